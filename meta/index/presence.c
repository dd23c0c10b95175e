/*
 * presence.c - a pool's presence table: the fingerprints of the names of
 * its committed pages in a file of shared memory that clients map read
 * only and probe without asking the daemon (python/pagefs/_presence.py).
 * Client.exists of a batch then costs a hash and a probe a name instead
 * of a FUSE round trip (docs/SGLANG.md, "exists without a request").
 *
 * The file (PRESENCE_HDR bytes of header, then 2^k 64-bit entries):
 *
 *   u64 magic "PGFSPRES", u32 version 1, u32 header bytes 128,
 *   u64 live: the generation while this file is the pool's table, 0 once
 *       the daemon retired it (a rebuild, the pool's removal, unmount),
 *   u64 generation, u64 pid of the daemon, u64 pool id,
 *   u64 mask (entries - 1), u32 hash 1 (XXH64 of the name, seed 0), u32 0,
 *   at byte 64: u64 pages in the table (a hint).
 *
 * An entry is 0 (empty), 1 (a tombstone) or a fingerprint: XXH64 of the
 * name's bytes with seed 0, 0 and 1 remapped to 2 and 3. Open addressing
 * with linear probing from fingerprint & mask. Two names of one
 * fingerprint are two entries (one goes, the other stays): a probe then
 * answers yes for a name that is not a page only when XXH64 collides.
 *
 * One writer, under meta.lock (or the load's single linker thread): each
 * change is one aligned 8-byte atomic store with release order, so a
 * reader probing lock-free sees every entry old or new, never torn. A
 * table whose entries and tombstones pass half its size is rebuilt into a
 * new file of a new generation (sized for 3 times the pages): the new
 * file is filled, then the old one's live word is cleared, unlinked and
 * unmapped; a reader checks the live word once a batch and re-opens.
 * The daemon holds an open-file-description write lock (F_OFD_SETLK) on
 * each file it keeps: the kernel drops it when the daemon dies however it
 * dies, so a reader (F_OFD_GETLK, one call a batch) and the next daemon's
 * sweep tell a table of a killed daemon, whose live word stays set, from
 * a kept one; a pid could be reused or stay a zombie.
 * A removal whose next entry is empty empties its entry (and the
 * tombstones before it) instead of leaving a tombstone: no probe passes
 * through them any more.
 */
#include "meta/index.h"
#include "meta/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define PRESENCE_MAGIC 0x5345525053464750ULL /* "PGFSPRES" little-endian */
#define PRESENCE_VERSION 1u
#define PRESENCE_HDR 128u
#define PRESENCE_HASH_XXH64 1u
#define PRESENCE_MIN 1024u
#define EMPTY 0u
#define TOMB 1u

struct presence_hdr {
	uint64_t magic;
	uint32_t version, hdr_bytes;
	_Atomic uint64_t live;
	uint64_t generation, pid, pool_id, mask;
	uint32_t hash, zero;
	_Atomic uint64_t count; /* at byte 64, apart from what readers check */
};

_Static_assert(sizeof(struct presence_hdr) <= PRESENCE_HDR, "header fits");

/* The writer's side of a table; every field under meta.lock (the one
 * writer). */
struct presence {
	char path[320];
	unsigned mode;
	uint32_t pool_id;
	int fd;                   /* the file, open: it holds the lock that says "alive" */
	struct presence_hdr *hdr; /* the mapping; entries follow at PRESENCE_HDR */
	_Atomic uint64_t *e;
	uint64_t size;     /* entries */
	uint64_t used;     /* not empty: pages and tombstones */
	uint64_t count;    /* pages */
	uint64_t rebuilds; /* generations made after the first (tests) */
	char dir[200];
};

/* Generations are process-wide: two indexes of one process (the unit
 * tests open several) never name two files alike. */
static _Atomic uint64_t generations;

uint64_t index_presence_remap(uint64_t h)
{
	return h < 2 ? h + 2 : h;
}

uint64_t index_presence_fp(const char *name, size_t len)
{
	return index_presence_remap(XXH64(name, len, 0));
}

uint64_t index_presence_page_fp(const struct page *p)
{
	char text[META_NAME_MAX + 1];

	return index_presence_fp(index_pname_text(p, text), p->name_len);
}

static uint64_t size_for(uint64_t pages)
{
	uint64_t n = PRESENCE_MIN;

	while (n < 3 * (pages + 1))
		n *= 2;
	return n;
}

static size_t map_bytes(uint64_t size)
{
	return PRESENCE_HDR + (size_t)size * 8u;
}

/* Makes a file of size entries, mapped, not yet live. 0 or -errno. */
static int make_file(struct presence *t, uint64_t size, struct presence_hdr **hdr, int *fdp,
                     char *path, size_t pathlen)
{
	struct flock lk = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
	uint64_t gen = atomic_fetch_add(&generations, 1) + 1;
	int fd, rc = 0;

	snprintf(path, pathlen, "%s/pagefs-%ld-%u-%llu", t->dir, (long)getpid(), t->pool_id,
	         (unsigned long long)gen);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, t->mode);
	if (fd < 0)
		return -errno;
	/* The mode asked for, whatever the umask. */
	if (fchmod(fd, t->mode) < 0 || fcntl(fd, F_OFD_SETLK, &lk) < 0 ||
	    ftruncate(fd, (off_t)map_bytes(size)) < 0) {
		rc = -errno;
		goto fail;
	}
	void *map = mmap(NULL, map_bytes(size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED) {
		rc = -errno;
		goto fail;
	}
	*fdp = fd;
	*hdr = map;
	**hdr = (struct presence_hdr){.magic = PRESENCE_MAGIC,
	                              .version = PRESENCE_VERSION,
	                              .hdr_bytes = PRESENCE_HDR,
	                              .generation = gen,
	                              .pid = (uint64_t)getpid(),
	                              .pool_id = t->pool_id,
	                              .mask = size - 1,
	                              .hash = PRESENCE_HASH_XXH64};
	return 0;
fail:
	close(fd);
	unlink(path);
	return rc;
}

/* The old mapping is no table any more: readers see live 0 and re-open. */
static void retire(struct presence_hdr *hdr, int fd, const char *path, uint64_t size)
{
	if (!hdr)
		return;
	atomic_store_explicit(&hdr->live, 0, memory_order_release);
	if (unlink(path) < 0 && errno != ENOENT)
		log_warn("cannot remove presence table %s: %s", path, strerror(errno));
	munmap(hdr, map_bytes(size));
	close(fd); /* and the lock with it */
}

/* Stores fp in the first empty entry or tombstone of its probe; returns
 * what that entry held (EMPTY or TOMB). */
static uint64_t put(_Atomic uint64_t *e, uint64_t mask, uint64_t fp)
{
	uint64_t i = fp & mask, v;

	while ((v = atomic_load_explicit(&e[i], memory_order_relaxed)) > TOMB)
		i = (i + 1) & mask;
	atomic_store_explicit(&e[i], fp, memory_order_release);
	return v;
}

/* A new generation of size entries holding the pages of the old one.
 * 0 or -errno (the old one stays). */
static int rebuild(struct presence *t, uint64_t size)
{
	struct presence_hdr *hdr = NULL;
	char path[sizeof(t->path)];
	int fd = -1;
	int rc = make_file(t, size, &hdr, &fd, path, sizeof(path));

	if (rc < 0 || !hdr)
		return rc < 0 ? rc : -EIO;
	_Atomic uint64_t *e = (_Atomic uint64_t *)(void *)((char *)hdr + PRESENCE_HDR);
	for (uint64_t i = 0; t->e && i < t->size; i++) {
		uint64_t fp = atomic_load_explicit(&t->e[i], memory_order_relaxed);
		if (fp > TOMB)
			put(e, size - 1, fp);
	}
	atomic_store_explicit(&hdr->count, t->count, memory_order_relaxed);
	atomic_store_explicit(&hdr->live, hdr->generation, memory_order_release);
	if (t->hdr)
		t->rebuilds++;
	retire(t->hdr, t->fd, t->path, t->size);
	memcpy(t->path, path, sizeof(path));
	t->fd = fd;
	t->hdr = hdr;
	t->e = e;
	t->size = size;
	t->used = t->count;
	return 0;
}

int index_presence_new(const char *dir, unsigned mode, uint32_t pool_id, uint64_t pages,
                       struct presence **out)
{
	struct presence *t = calloc(1, sizeof(*t));
	int rc;

	if (!t)
		return -ENOMEM;
	if (strlen(dir) >= sizeof(t->dir)) {
		free(t);
		return -ENAMETOOLONG;
	}
	snprintf(t->dir, sizeof(t->dir), "%s", dir);
	t->mode = mode;
	t->pool_id = pool_id;
	if ((rc = rebuild(t, size_for(pages))) < 0) {
		free(t);
		return rc;
	}
	*out = t;
	return 0;
}

void index_presence_free(struct presence *t)
{
	if (!t)
		return;
	retire(t->hdr, t->fd, t->path, t->size);
	free(t);
}

int index_presence_add(struct presence *t, uint64_t fp)
{
	if ((t->used + 1) * 2 > t->size) {
		int rc = rebuild(t, size_for(t->count + 1));
		if (rc < 0)
			return rc;
	}
	if (put(t->e, t->size - 1, fp) == EMPTY)
		t->used++;
	t->count++;
	atomic_store_explicit(&t->hdr->count, t->count, memory_order_relaxed);
	return 0;
}

void index_presence_del(struct presence *t, uint64_t fp)
{
	uint64_t mask = t->size - 1, i = fp & mask, v;

	while ((v = atomic_load_explicit(&t->e[i], memory_order_relaxed)) != EMPTY) {
		if (v == fp)
			break;
		i = (i + 1) & mask;
	}
	if (v == EMPTY)
		return; /* not there (a page the table was made after) */
	t->count--;
	atomic_store_explicit(&t->hdr->count, t->count, memory_order_relaxed);
	if (atomic_load_explicit(&t->e[(i + 1) & mask], memory_order_relaxed) != EMPTY) {
		atomic_store_explicit(&t->e[i], TOMB, memory_order_release);
		return;
	}
	/* Nothing probes past i: it and the tombstones before it are empty. */
	do {
		atomic_store_explicit(&t->e[i], EMPTY, memory_order_release);
		t->used--;
		i = (i - 1) & mask;
	} while (atomic_load_explicit(&t->e[i], memory_order_relaxed) == TOMB);
}

int index_presence_has(const struct presence *t, uint64_t fp)
{
	uint64_t mask = t->size - 1, i = fp & mask, v;

	while ((v = atomic_load_explicit(&t->e[i], memory_order_acquire)) != EMPTY) {
		if (v == fp)
			return 1;
		i = (i + 1) & mask;
	}
	return 0;
}

const char *index_presence_path(const struct presence *t)
{
	return t->path;
}

void index_presence_stats(const struct presence *t, struct presence_stats *out)
{
	*out = (struct presence_stats){.size = t->size,
	                               .used = t->used,
	                               .count = t->count,
	                               .rebuilds = t->rebuilds,
	                               .generation = t->hdr->generation};
}

/* Whether the file at path is a table no daemon keeps: nobody holds its
 * lock (a daemon that exits, even killed, lets it go). */
static int abandoned(const char *path)
{
	struct flock lk = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	int gone = fd >= 0 && fcntl(fd, F_OFD_GETLK, &lk) == 0 && lk.l_type == F_UNLCK;

	if (fd >= 0)
		close(fd);
	return gone;
}

void index_presence_sweep(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d))) {
		long pid;
		unsigned pool;
		unsigned long long gen;
		char path[512];
		struct stat st;
		/* (A table another daemon makes at this instant, between its
		 * create and its lock, could go too: that daemon's clients
		 * then ask it by ioctl until the table's next generation.) */
		if (sscanf(de->d_name, "pagefs-%ld-%u-%llu", &pid, &pool, &gen) != 3 ||
		    pid == (long)getpid())
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
		    abandoned(path) && unlink(path) == 0)
			log_info("removed presence table %s of a daemon that is gone", path);
	}
	closedir(d);
}

/* The pool's table and a page's name: the index's choke points
 * (pages.c) call this for every page that joins or leaves its pool's
 * names. A table that cannot grow is dropped (clients ask the daemon
 * again) and made anew at the next request. */
void index_presence_page(struct page *p, int in)
{
	struct pool *pool = page_pool(p);

	if (!pool->presence)
		return;
	uint64_t fp = index_presence_page_fp(p);
	if (!in) {
		index_presence_del(pool->presence, fp);
	} else if (index_presence_add(pool->presence, fp) < 0) {
		log_warn("presence table of pool %u/%s dropped: cannot grow it in %s", pool->rank,
		         pool->ns, pool->presence->dir);
		index_presence_free(pool->presence);
		pool->presence = NULL;
	}
}

int index_presence_pool(struct pool *pool, const char *dir, unsigned mode, const char **path)
{
	int rc;

	if (!pool->presence) {
		if ((rc = index_presence_new(dir, mode, pool->id, pool->pages, &pool->presence)) <
		    0)
			return rc;
		for (struct page *p = pool->lru_head; p; p = page_at(p->lru_next)) {
			if ((rc = index_presence_add(pool->presence, index_presence_page_fp(p))) <
			    0) {
				index_presence_free(pool->presence);
				pool->presence = NULL;
				return rc;
			}
		}
	}
	*path = pool->presence->path;
	return 0;
}
