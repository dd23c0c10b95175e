/*
 * adopt.c - bulk adoption of many pages into an empty pool (import-json).
 *
 * An import of a million keys cannot afford one journal round trip per
 * key, so the pages travel in one REC_BULK record: the batch writer
 * inserts every row inside one savepoint (all or nothing) and then links
 * the pages into memory in list order, oldest first, so the LRU order and
 * the atimes (increasing in list order) match the file. The slots are
 * marked taken before the record is submitted, so nobody else can take
 * them meanwhile; if the store refuses the batch they are given back.
 */
#include "meta/keys.h"
#include "meta/log.h"
#include "meta/store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Gives back the slots of the first n pages (caller holds meta.lock). */
static void release_slots(const struct meta_adopt_page *in, struct pool **pools, size_t n)
{
	for (size_t i = 0; i < n; i++)
		index_slot_release(pools[i], in[i].slot);
}

int meta_adopt(struct meta *m, const struct meta_adopt_page *in, size_t n,
               void (*progress)(void *arg, uint64_t done, uint64_t total), void *arg)
{
	struct page **pages;
	struct pool **pools;
	uint32_t *hash;
	struct bulk bulk;
	struct rec *r = NULL;
	int64_t now = index_now_ns();
	size_t i, marked = 0;
	int rc = 0;

	if (m->cfg.read_only)
		return -EROFS;
	for (i = 0; i < n; i++)
		if ((rc = meta_check_name(in[i].name)) < 0)
			return rc;
	// NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers, sizeof(*p) meant
	pages = calloc(n ? n : 1, sizeof(*pages));
	// NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers, sizeof(*p) meant
	pools = calloc(n ? n : 1, sizeof(*pools));
	hash = calloc(n ? n : 1, sizeof(*hash));
	if (!pages || !pools || !hash || !(r = record_new(REC_BULK))) {
		rc = -ENOMEM;
		goto fail;
	}
	for (i = 0; i < n; i++) {
		if (!(pages[i] = index_page_alloc(in[i].name, strlen(in[i].name)))) {
			rc = -ENOMEM;
			goto fail;
		}
	}
	index_lock(m);
	/* Ids first. A shared index hands them out in blocks of 2^20 from its
	 * sequence: a bigger import waits for the sync thread to fetch each
	 * next block (one a heartbeat), with meta.lock dropped. */
	for (i = 0; rc == 0 && i < n; i++) {
		for (int waited = 0; !(pages[i]->id = index_id_take(&m->page_ids)); waited += 20) {
			if (!m->shared || waited >= 10000) {
				rc = -EAGAIN;
				break;
			}
			index_unlock(m);
			index_cluster_kick(m);
			nanosleep(&(struct timespec){0, 20 * 1000000L}, NULL);
			index_lock(m);
		}
	}
	for (i = 0; rc == 0 && i < n; i++) {
		struct pool *pool = i && in[i].pool_id == in[i - 1].pool_id
		                            ? pools[i - 1]
		                            : index_pool_by_id(m, in[i].pool_id);
		pools[i] = pool;
		if (!pool)
			rc = -ENOENT;
		else if (in[i].slot >= pool->capacity)
			rc = -ERANGE;
		else if ((i == 0 || pool != pools[i - 1]) &&
		         (pool->pages || pool->pending || pool->nused))
			rc = -EBUSY;
		else if ((rc = index_slot_mark(pool, in[i].slot)) < 0)
			rc = rc == -EEXIST ? -EINVAL : rc; /* two keys on one slot */
		else
			marked++;
	}
	if (rc != 0) { /* (0 only if every pools[i] was found and its slot marked) */
		release_slots(in, pools, marked);
		index_unlock(m);
		goto fail;
	}
	for (i = 0; i < n; i++) {
		struct page *p = pages[i];
		page_set_pool(p, pools[i]);
		p->gen = m->epoch;
		p->slot = in[i].slot;
		p->length = pools[i]->slot_size;
		p->has_checksum = 0; /* bytes written elsewhere: summed on first read */
		page_set_mtime(p, now);
		/* The same second: the LRU (built oldest first here) and, after
		 * a remount, ids (taken in list order) keep the file's order. */
		p->atime_s = page_secs(now);
		hash[i] = index_name_hash(pools[i]->id, in[i].name, p->name_len);
	}
	bulk = (struct bulk){
		.pages = pages, .hash = hash, .n = n, .progress = progress, .arg = arg};
	r->bulk = &bulk;
	r->waited = 1;
	record_submit(m, r);
	index_unlock(m);

	rc = record_wait(m, r);
	r = NULL;
	if (rc < 0) {
		index_lock(m);
		release_slots(in, pools, n);
		index_unlock(m);
		log_error("import of %zu pages failed: %s", n, strerror(-rc));
		goto fail;
	}
	free(pages); /* the pages now belong to the index */
	free(pools);
	free(hash);
	return 0;
fail:
	for (i = 0; pages && i < n; i++)
		index_page_free(pages[i]);
	free(pages);
	free(pools);
	free(hash);
	free(r);
	return rc;
}
