/*
 * fs_handle.c - the table of open page files.
 *
 * One mutex guards the list of all handles and the hash of them by page
 * id. It is a leaf: nothing else is locked and no
 * meta_* call is made while it is held, so any thread may take it.
 *
 * Handles are reference counted only so that a lookup through the table
 * (getattr or truncate by inode of a page still being written) can use a
 * writer while its release runs concurrently; the kernel's own reference
 * (fi->fh) is the first one and release drops it.
 */
#include "fs/fs_handle.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fs/fs_align.h"

static size_t bucket(uint64_t page_id)
{
	return (size_t)((page_id * 0x9e3779b97f4a7c15ULL) >> 54) % FS_HANDLE_BUCKETS;
}

int fs_handles_init(struct fs_handles *t)
{
	memset(t, 0, sizeof(*t));
	return -pthread_mutex_init(&t->lock, NULL);
}

void fs_handles_destroy(struct fs_handles *t)
{
	pthread_mutex_destroy(&t->lock);
}

struct fs_handle *fs_handle_new(enum fs_handle_kind kind)
{
	struct fs_handle *h = calloc(1, sizeof(*h));

	if (!h)
		return NULL;
	h->kind = kind;
	h->data_fd = -1;
	h->refs = 1;
	h->opens = 1;
	if (kind == FS_WRITER) {
		h->w.xxh = XXH3_createState();
		if (!h->w.xxh) {
			free(h);
			return NULL;
		}
		XXH3_64bits_reset(h->w.xxh);
		h->w.hash_ok = 1;
		h->w.state = FS_W_OPEN;
	}
	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->idle, NULL);
	return h;
}

static void handle_free(struct fs_handles *t, struct fs_handle *h)
{
	if (h->kind == FS_WRITER) {
		XXH3_freeState(h->w.xxh);
		fs_align_give(h->w.held); /* (fs_handle_close dropped it already) */
	}
	fs_keep_put(t, h->kept);
	pthread_cond_destroy(&h->idle);
	pthread_mutex_destroy(&h->lock);
	free(h);
}

struct fs_kept *fs_keep_alloc(struct fs_handles *t, uint64_t len)
{
	struct fs_kept *k;

	if (len == 0 || len > FS_KEEP_MAX)
		return NULL;
	if (atomic_fetch_add(&t->kept, len) + len > FS_KEEP_TOTAL) {
		atomic_fetch_sub(&t->kept, len);
		return NULL;
	}
	if (posix_memalign((void **)&k, _Alignof(struct fs_kept), sizeof(*k) + len) != 0) {
		atomic_fetch_sub(&t->kept, len);
		return NULL;
	}
	atomic_init(&k->refs, 1);
	k->len = len;
	return k;
}

void fs_keep_put(struct fs_handles *t, struct fs_kept *k)
{
	if (!k || atomic_fetch_sub(&k->refs, 1) != 1)
		return;
	atomic_fetch_sub(&t->kept, k->len);
	free(k);
}

/* Called with t->lock held. */
static void unlink_locked(struct fs_handles *t, struct fs_handle *h)
{
	if (!h->linked)
		return;
	if (h->prev)
		h->prev->next = h->next;
	else
		t->all = h->next;
	if (h->next)
		h->next->prev = h->prev;
	h->prev = h->next = NULL;

	struct fs_handle **pp = &t->by_page[bucket(h->page_id)];

	while (*pp && *pp != h)
		pp = &(*pp)->hash_next;
	if (*pp)
		*pp = h->hash_next;
	h->hash_next = NULL;
	h->linked = 0;
}

static void link_locked(struct fs_handles *t, struct fs_handle *h)
{
	h->prev = NULL;
	h->next = t->all;
	if (t->all)
		t->all->prev = h;
	t->all = h;
	h->hash_next = t->by_page[bucket(h->page_id)];
	t->by_page[bucket(h->page_id)] = h;
	h->linked = 1;
}

void fs_handles_add(struct fs_handles *t, struct fs_handle *h)
{
	pthread_mutex_lock(&t->lock);
	link_locked(t, h);
	pthread_mutex_unlock(&t->lock);
}

void fs_handles_remove(struct fs_handles *t, struct fs_handle *h)
{
	pthread_mutex_lock(&t->lock);
	unlink_locked(t, h);
	pthread_mutex_unlock(&t->lock);
}

struct fs_handle *fs_handles_pop(struct fs_handles *t)
{
	struct fs_handle *h;

	pthread_mutex_lock(&t->lock);
	h = t->all;
	if (h)
		unlink_locked(t, h);
	pthread_mutex_unlock(&t->lock);
	return h;
}

void fs_handles_put(struct fs_handles *t, struct fs_handle *h)
{
	int last;

	pthread_mutex_lock(&t->lock);
	last = --h->refs == 0;
	if (last)
		unlink_locked(t, h);
	pthread_mutex_unlock(&t->lock);
	if (last)
		handle_free(t, h);
}

/* A listed handle of kind for page_id (through ino unless 0; cached
 * readers only if cached). Called with t->lock held. */
static struct fs_handle *find_locked(struct fs_handles *t, enum fs_handle_kind kind,
                                     uint64_t page_id, uint64_t ino, int cached)
{
	struct fs_handle *h;

	for (h = t->by_page[bucket(page_id)]; h; h = h->hash_next)
		if (h->kind == kind && h->page_id == page_id && (!ino || h->ino == ino) &&
		    (!cached || h->cached))
			break;
	return h;
}

static struct fs_handle *find(struct fs_handles *t, enum fs_handle_kind kind, uint64_t page_id,
                              uint64_t ino)
{
	struct fs_handle *h;

	pthread_mutex_lock(&t->lock);
	h = find_locked(t, kind, page_id, ino, 0);
	if (h)
		h->refs++;
	pthread_mutex_unlock(&t->lock);
	return h;
}

struct fs_handle *fs_handles_find_writer(struct fs_handles *t, uint64_t page_id)
{
	return find(t, FS_WRITER, page_id, 0);
}

struct fs_handle *fs_handles_find_reader(struct fs_handles *t, uint64_t page_id, uint64_t ino)
{
	return find(t, FS_READER, page_id, ino);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* The entry expecting a writer of page_id, or NULL; forgets expired ones
 * on the way. */
static struct fs_expect *expected_locked(struct fs_handles *t, uint64_t page_id)
{
	struct fs_expect *found = NULL;
	uint64_t now;

	if (t->nexpect == 0)
		return NULL;
	now = now_ns();
	for (int i = 0; i < FS_EXPECT_MAX; i++) {
		struct fs_expect *e = &t->expect[i];
		if (e->until_ns && e->until_ns <= now) {
			e->until_ns = 0;
			t->nexpect--;
		}
		if (e->until_ns && e->page_id == page_id)
			found = e;
	}
	return found;
}

void fs_handles_expect_writer(struct fs_handles *t, uint64_t page_id)
{
	struct fs_expect *e;

	pthread_mutex_lock(&t->lock);
	e = expected_locked(t, page_id);
	for (int i = 0; !e && i < FS_EXPECT_MAX; i++)
		if (!t->expect[i].until_ns) {
			e = &t->expect[i];
			t->nexpect++;
		}
	if (!e) /* all taken: the one that ends first makes room */
		for (int i = 0; i < FS_EXPECT_MAX; i++)
			if (!e || t->expect[i].until_ns < e->until_ns)
				e = &t->expect[i];
	e->page_id = page_id;
	e->until_ns = now_ns() + FS_EXPECT_NS;
	pthread_mutex_unlock(&t->lock);
}

int fs_handles_add_checked(struct fs_handles *t, struct fs_handle *h)
{
	struct fs_expect *e;

	pthread_mutex_lock(&t->lock);
	e = expected_locked(t, h->page_id);
	if (h->kind == FS_READER && h->cached && (e || find_locked(t, FS_WRITER, h->page_id, 0, 0)))
		h->cached = 0;
	if (h->kind == FS_WRITER && find_locked(t, FS_READER, h->page_id, h->ino, 1)) {
		pthread_mutex_unlock(&t->lock);
		return -EBUSY;
	}
	if (h->kind == FS_WRITER && e) { /* here: listed, the usual rule takes over */
		e->until_ns = 0;
		t->nexpect--;
	}
	link_locked(t, h);
	pthread_mutex_unlock(&t->lock);
	return 0;
}
