/*
 * fs_dir.c - the directory tree: lookup, mkdir, rmdir, opendir,
 * readdir(plus), releasedir and statfs.
 *
 * The root lists ranks, a rank lists its pools, a pool lists its
 * committed pages. Nothing else is a directory: mkdir inside a pool is
 * EPERM, a rank or namespace name that does not match its pattern EINVAL.
 *
 * readdir offsets are cookies, not positions: 1 and 2 follow "." and "..",
 * and every other entry's cookie is its id + 3 (rank, pool id, page id).
 * A listing resumes after the id its cookie names, so an entry that exists
 * throughout a listing is returned exactly once however the directory
 * changes meanwhile.
 *
 * Negative lookups in a pool are cached by the kernel (entry_timeout):
 * every page is created through this kernel, which replaces a negative
 * dentry itself, and pages dropped by the engine are invalidated by
 * fs_inval. A name someone is still writing is answered with a plain
 * ENOENT instead, so the kernel asks again after the commit; only the
 * writer's own process finds it (uncached), so that it may stat, unlink
 * or rename the file it is writing (docs/DECISIONS-posix.md).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "fs/fs_inode.h"

/* A name being written: the caller's own page (uncached), else a plain
 * ENOENT. */
static void lookup_own(fuse_req_t req, struct fs_mount *fs, uint32_t pool_id, const char *name)
{
	struct fs_handle *h;
	struct fuse_entry_param e;
	struct meta_page_info p;
	uint64_t length;
	int pending;

	if (fs_writers_owned(fs, pool_id, name, fuse_req_ctx(req)->pid, &h, 1) < 1)
		return (void)fuse_reply_err(req, ENOENT);
	int ret = meta_page_get(fs->meta, h->page_id, &p);
	fs_writer_peek(h, &length, &pending);
	memset(&e, 0, sizeof(e));
	e.ino = h->ino;
	e.generation = p.gen;
	if (ret == 0)
		fs_attr_page(fs, &p, 1, length, &e.attr);
	fs_handles_put(&fs->handles, h);
	if (ret < 0)
		return (void)fuse_reply_err(req, -ret);
	fuse_reply_entry(req, &e);
}

static void lookup_page(fuse_req_t req, struct fs_mount *fs, uint32_t pool_id, const char *name)
{
	struct fuse_entry_param e;
	struct meta_page_info p;
	int pending = 0;
	int ret = meta_check_name(name);

	if (ret == 0)
		ret = meta_page_lookup(fs->meta, pool_id, name, &p, &pending);
	if (ret == -ENOENT && pending)
		return lookup_own(req, fs, pool_id, name);
	if (ret == -ENOENT && !pending) {
		memset(&e, 0, sizeof(e));
		e.entry_timeout = fs->timeout;
		return (void)fuse_reply_entry(req, &e);
	}
	if (ret < 0)
		return (void)fuse_reply_err(req, -ret);
	fs_entry_page(fs, &p, &e);
	fuse_reply_entry(req, &e);
}

void pagefs_op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fs_mount *fs = fs_of(req);
	struct fuse_entry_param e;
	struct meta_pool_info pool;
	uint64_t id;
	int rank;

	switch (fs_ino_kind(parent, &id)) {
	case FS_ROOT:
		rank = meta_parse_rank(name);
		if (rank < 0 || !meta_rank_exists(fs->meta, rank))
			return (void)fuse_reply_err(req, ENOENT);
		fs_entry_dir(fs, fs_ino_rank(rank), &e);
		return (void)fuse_reply_entry(req, &e);
	case FS_RANK:
		if (meta_check_ns(name) < 0 || meta_pool_find(fs->meta, (int)id, name, &pool) < 0)
			return (void)fuse_reply_err(req, ENOENT);
		fs_entry_dir(fs, fs_ino_pool(pool.id), &e);
		return (void)fuse_reply_entry(req, &e);
	case FS_POOL:
		return lookup_page(req, fs, (uint32_t)id, name);
	case FS_PAGE:
		return (void)fuse_reply_err(req, ENOTDIR);
	default:
		return (void)fuse_reply_err(req, ENOENT);
	}
}

void pagefs_op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	struct fs_mount *fs = fs_of(req);
	struct fuse_entry_param e;
	struct meta_pool_info pool;
	uint64_t id;
	int rank, ret;

	(void)mode;
	switch (fs_ino_kind(parent, &id)) {
	case FS_ROOT:
		rank = meta_parse_rank(name);
		if (rank < 0)
			return (void)fuse_reply_err(req, EINVAL);
		ret = meta_rank_create(fs->meta, rank);
		if (ret < 0)
			return (void)fuse_reply_err(req, -ret);
		fs_entry_dir(fs, fs_ino_rank(rank), &e);
		return (void)fuse_reply_entry(req, &e);
	case FS_RANK:
		if (meta_check_ns(name) < 0)
			return (void)fuse_reply_err(req, EINVAL);
		ret = meta_pool_create(fs->meta, (int)id, name, 0, 0, &pool);
		/* The kernel asks only for a name its lookup did not find: on a
		 * shared index another node made the pool a moment ago, and
		 * its row reaches this node within the feed's bound. The pool
		 * it made is the one asked for: answered as made here. (EEXIST
		 * with the name still missing failed `mkdir -p` and makedirs
		 * with exist_ok on nodes starting at once.) */
		for (int waited = 0; ret == -EEXIST && waited < 2000; waited += 10) {
			if (meta_pool_find(fs->meta, (int)id, name, &pool) == 0) {
				ret = 0;
				break;
			}
			usleep(10000);
		}
		if (ret < 0)
			return (void)fuse_reply_err(req, -ret);
		fs_entry_dir(fs, fs_ino_pool(pool.id), &e);
		return (void)fuse_reply_entry(req, &e);
	case FS_POOL:
		return (void)fuse_reply_err(req, EPERM);
	case FS_PAGE:
		return (void)fuse_reply_err(req, ENOTDIR);
	default:
		return (void)fuse_reply_err(req, ENOENT);
	}
}

void pagefs_op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fs_mount *fs = fs_of(req);
	struct meta_pool_info pool;
	uint64_t id;
	int rank, ret;

	switch (fs_ino_kind(parent, &id)) {
	case FS_ROOT:
		rank = meta_parse_rank(name);
		ret = rank < 0 ? -ENOENT : meta_rank_remove(fs->meta, rank);
		break;
	case FS_RANK:
		ret = meta_check_ns(name) < 0 ? -ENOENT
		                              : meta_pool_find(fs->meta, (int)id, name, &pool);
		if (ret == 0)
			ret = meta_pool_remove(fs->meta, pool.id);
		break;
	case FS_POOL:
	case FS_PAGE:
		ret = -ENOTDIR;
		break;
	default:
		ret = -ENOENT;
		break;
	}
	fuse_reply_err(req, -ret);
}

void pagefs_op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;
	double timeout;
	uint64_t id;
	int ret;

	if (fs_ino_kind(ino, &id) == FS_PAGE)
		return (void)fuse_reply_err(req, ENOTDIR);
	ret = fs_stat(fs_of(req), ino, NULL, &st, &timeout);
	if (ret < 0)
		return (void)fuse_reply_err(req, -ret);
	fi->fh = 0;
	if (fs_ino_kind(ino, &id) == FS_POOL) { /* may hold batch pins (fs_pin.h) */
		struct fs_dirh *d = fs_dirh_new(&fs_of(req)->pins);

		if (!d)
			return (void)fuse_reply_err(req, ENOMEM);
		fi->fh = (uintptr_t)d;
	}
	fuse_reply_open(req, fi);
}

void pagefs_op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs_mount *fs = fs_of(req);

	(void)ino;
	if (fi->fh)
		fs_dirh_free(&fs->pins, fs->meta, fs_dirh_of(fi));
	fuse_reply_err(req, 0);
}

/* A reply buffer being filled with directory entries. */
struct dirbuf {
	fuse_req_t req;
	struct fs_mount *fs;
	int plus;
	char *buf;
	size_t size, used;
	int full;
};

/* Adds one entry with cookie `next`; returns 1 (and sets full) when it
 * does not fit. */
static int dirbuf_add(struct dirbuf *d, const char *name, const struct fuse_entry_param *e,
                      off_t next)
{
	size_t rem = d->size - d->used;
	size_t n;

	if (d->plus)
		n = fuse_add_direntry_plus(d->req, d->buf + d->used, rem, name, e, next);
	else
		n = fuse_add_direntry(d->req, d->buf + d->used, rem, name, &e->attr, next);
	if (n > rem) {
		d->full = 1;
		return 1;
	}
	d->used += n;
	return 0;
}

/* "." or "..": the kernel fills in these itself; ino 0 keeps readdirplus
 * from creating an entry for them. */
static int dirbuf_add_dot(struct dirbuf *d, const char *name, fuse_ino_t ino, off_t next)
{
	struct fuse_entry_param e;

	memset(&e, 0, sizeof(e));
	e.attr.st_ino = ino;
	e.attr.st_mode = S_IFDIR;
	return dirbuf_add(d, name, &e, next);
}

static int list_ranks(struct dirbuf *d, off_t off)
{
	uint16_t ranks[256];
	int after = off >= 3 ? (int)(off - 3) : -1;
	int n;

	do {
		n = meta_rank_list(d->fs->meta, after, ranks, 256);
		for (int i = 0; i < n; i++) {
			struct fuse_entry_param e;
			char name[8];

			snprintf(name, sizeof(name), "%u", ranks[i]);
			fs_entry_dir(d->fs, fs_ino_rank(ranks[i]), &e);
			if (dirbuf_add(d, name, &e, (off_t)ranks[i] + 3))
				return 0;
			after = ranks[i];
		}
	} while (n == 256);
	return n < 0 ? n : 0;
}

#define POOL_BATCH 16

static int list_pools(struct dirbuf *d, int rank, off_t off)
{
	struct meta_pool_info *pools = malloc(POOL_BATCH * sizeof(*pools));
	uint32_t after = off >= 3 ? (uint32_t)(off - 3) : 0;
	int n;

	if (!pools)
		return -ENOMEM;
	do {
		n = meta_pool_list(d->fs->meta, rank, after, pools, POOL_BATCH);
		for (int i = 0; i < n; i++) {
			struct fuse_entry_param e;

			fs_entry_dir(d->fs, fs_ino_pool(pools[i].id), &e);
			if (dirbuf_add(d, pools[i].ns, &e, (off_t)pools[i].id + 3)) {
				n = 0;
				break;
			}
			after = pools[i].id;
		}
	} while (n == POOL_BATCH);
	free(pools);
	return n < 0 ? n : 0;
}

/* The iterator reads the store; the in-memory page has the version (the
 * inode number) and the latest atime, and tells a page removed since. */
static int add_page(void *arg, const struct meta_page_info *stored)
{
	struct dirbuf *d = arg;
	struct fuse_entry_param e;
	struct meta_page_info p;

	if (meta_page_get(d->fs->meta, stored->id, &p) < 0 || !p.committed)
		return 0;
	fs_entry_page(d->fs, &p, &e);
	return dirbuf_add(d, p.name, &e, (off_t)(p.id + 3));
}

static void list_dir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, int plus)
{
	struct fs_mount *fs = fs_of(req);
	struct dirbuf d = {.req = req, .fs = fs, .plus = plus, .size = size};
	struct meta_pool_info pool;
	fuse_ino_t parent = FUSE_ROOT_ID;
	uint64_t id;
	enum fs_kind kind = fs_ino_kind(ino, &id);
	int ret = 0;

	if (kind == FS_PAGE)
		return (void)fuse_reply_err(req, ENOTDIR);
	if (kind == FS_POOL) {
		ret = meta_pool_get(fs->meta, (uint32_t)id, &pool);
		if (ret < 0)
			return (void)fuse_reply_err(req, -ret);
		parent = fs_ino_rank(pool.rank);
	} else if (kind == FS_BAD) {
		return (void)fuse_reply_err(req, ENOENT);
	}
	d.buf = malloc(size ? size : 1);
	if (!d.buf)
		return (void)fuse_reply_err(req, ENOMEM);

	if (off < 1 && dirbuf_add_dot(&d, ".", ino, 1))
		goto reply;
	if (off < 2 && dirbuf_add_dot(&d, "..", parent, 2))
		goto reply;
	if (kind == FS_ROOT)
		ret = list_ranks(&d, off);
	else if (kind == FS_RANK)
		ret = list_pools(&d, (int)id, off);
	else
		ret = meta_page_iter(fs->meta, (uint32_t)id, off >= 3 ? (uint64_t)off - 3 : 0,
		                     add_page, &d);
reply:
	if (ret < 0 && d.used == 0)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_buf(req, d.buf, d.used);
	free(d.buf);
}

void pagefs_op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
	(void)fi;
	list_dir(req, ino, size, off, 0);
}

void pagefs_op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                           struct fuse_file_info *fi)
{
	(void)fi;
	list_dir(req, ino, size, off, 1);
}

void pagefs_op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct meta_stats s;
	struct statvfs sv;

	(void)ino;
	meta_get_stats(fs_of(req)->meta, &s);
	memset(&sv, 0, sizeof(sv));
	sv.f_bsize = 4096;
	sv.f_frsize = 4096;
	sv.f_blocks = s.capacity_bytes / 4096;
	sv.f_bfree = s.free_bytes / 4096;
	sv.f_bavail = sv.f_bfree;
	sv.f_files = s.total_slots;
	sv.f_ffree = s.free_slots;
	sv.f_favail = s.free_slots;
	sv.f_namemax = META_NAME_MAX;
	fuse_reply_statfs(req, &sv);
}
