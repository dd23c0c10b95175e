/*
 * page.c - page operations: lookup, reserve (with LRU eviction), commit,
 * pins, verification results, unlink and rename.
 *
 * Reads of the index (lookup, get, pin) are answered from memory under
 * meta.lock. Changes a caller must be able to rely on (commit, unlink,
 * rename) are submitted to the journal and applied to memory only once
 * durable (apply.c); the call returns after that. Pages the engine drops
 * by itself (eviction, checksum failure) leave memory at once, and their
 * slots are reused only after the store recorded the drop.
 */
#include "meta/log.h"
#include "meta/ops.h"
#include "meta/record.h"
#include "meta/store.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GRACE_WAIT_MS 5000 /* shared index: how long a writer waits for an evicted slot */
#define EVICT_BATCH 8ULL   /* shared index: pages one eviction frees at once */
#define COLLISION_TRIES 8  /* shared index: tries of a commit or rename another node races */

_Static_assert(offsetof(struct page, packed) == 54 && offsetof(struct page, name_next) == 48,
               "struct page is laid out as DESIGN.md says: 54 bytes before the name");
_Static_assert(sizeof(struct page) + META_NAME_MAX <= ARENA_MAX_PIECE,
               "a page with the longest name fits an arena piece");

static void fill_info(const struct meta *m, const struct page *p, struct meta_page_info *out)
{
	if (!out)
		return;
	out->id = p->id;
	out->pool_id = page_pool(p)->id;
	out->gen = p->gen;
	out->slot = p->slot;
	out->length = p->length;
	out->checksum = p->checksum;
	out->has_checksum = p->has_checksum;
	out->committed = p->committed;
	out->version = p->version;
	out->opened = p->opened;
	out->mtime_ns = page_mtime(p);
	out->ctime_ns = index_ctime_get(&m->ctimes, p->id);
	if (out->ctime_ns < out->mtime_ns)
		out->ctime_ns = out->mtime_ns;
	out->atime_ns = (int64_t)p->atime_s * 1000000000LL;
	index_pname_text(p, out->name);
}

/* Refreshes recency; the store hears of it at most once in each second
 * of the clock. */
void ops_page_touch(struct meta *m, struct page *p)
{
	uint32_t before = p->atime_s;
	int64_t now = index_now_ns();

	p->atime_s = page_secs(now);
	index_lru_touch(page_pool(p), p);
	if (m->cfg.read_only || p->atime_s == before)
		return;
	record_touch(m, p->id, now);
}

/* meta_page_lookup, and with pin set also pins the found page's slot
 * (meta_page_lookup_pin), in one critical section. */
static int page_lookup(struct meta *m, uint32_t pool_id, const char *name,
                       struct meta_page_info *out, int *pending, int pin)
{
	int ret = -ENOENT;

	if (pending)
		*pending = 0;
	index_lock(m);
	struct pool *pool = index_pool_live(m, pool_id);
	if (pool) {
		struct page *p = index_table_find_name(&m->by_name, pool_id, name, pending);
		if (p) {
			if (pin)
				index_slot_pin(pool, p->slot);
			ops_page_touch(m, p);
			fill_info(m, p, out);
			pool->hits++;
			ret = 0;
		} else {
			pool->misses++;
		}
	}
	index_unlock(m);
	return ret;
}

int meta_page_lookup(struct meta *m, uint32_t pool_id, const char *name, struct meta_page_info *out,
                     int *pending)
{
	return page_lookup(m, pool_id, name, out, pending, 0);
}

int meta_page_replaced(struct meta *m, uint64_t page_id)
{
	size_t n = sizeof(m->replaced) / sizeof(m->replaced[0]);
	int found = 0;

	index_lock(m);
	for (size_t i = 0; i < n && !found; i++)
		found = page_id != 0 && m->replaced[i] == page_id;
	index_unlock(m);
	return found;
}

int meta_page_get(struct meta *m, uint64_t page_id, struct meta_page_info *out)
{
	int ret = -ENOENT;

	index_lock(m);
	struct page *p = index_idtable_find(&m->by_id, page_id);
	if (p) {
		fill_info(m, p, out);
		ret = 0;
	}
	index_unlock(m);
	return ret;
}

/* Picks the least recently used page nobody has open, other than skip. */
static struct page *lru_victim(struct pool *pool, uint64_t skip)
{
	for (struct page *p = pool->lru_tail; p; p = page_at(p->lru_prev))
		if (p->id != skip && !index_slot_pinned(pool, p->slot))
			return p;
	return NULL;
}

/* Shared index: asks the store for a chunk: 0 (one with free slots),
 * LEASE_FULL (an unheld chunk without a free slot: evict in it),
 * LEASE_ASKED (none unheld; a node over its share hands one over soon),
 * -ENOSPC, -EAGAIN (others leased the candidates first) or an error.
 * meta.lock held on entry and return, dropped while waiting. */
static int lease_chunk(struct meta *m, uint32_t pool_id)
{
	index_assert_locked(m);
	struct rec *lease = record_new(REC_LEASE);

	if (!lease)
		return -ENOMEM;
	struct pool *pool = index_pool_live(m, pool_id);
	if (!pool) {
		free(lease);
		return -ENOENT;
	}
	lease->pool_id = pool_id;
	lease->chunk_slots = pool->chunk_slots;
	lease->capacity_slots = pool->capacity;
	lease->lease_from = pool->lease_from;
	lease->ask = m->cfg.evict == META_EVICT_LRU; /* (others evict for it) */
	lease->waited = 1;
	record_submit(m, lease);
	index_unlock(m);
	int rc = record_wait(m, lease);
	index_lock(m);
	return rc;
}

/* May this node evict page p of its pool now? */
static int evictable(struct meta *m, struct pool *pool, const struct page *p, uint64_t skip)
{
	struct held_chunk *h = index_chunk_find(pool, chunk_of(pool, p->slot));

	return p->id != skip && h && !h->draining && !index_slot_pinned_anywhere(m, pool, p->slot);
}

/* Shared index: evicts pages of this node's chunks (not of one being
 * handed over, none a reader anywhere pins) and waits until the store has
 * recorded it; their slots come back after their grace period (every
 * node has dropped the pages, nobody reads them). Up to EVICT_BATCH of
 * them among the pool's oldest eighth (the pages of other nodes' chunks
 * and of unheld ones included: a chunk leased full is evicted only as
 * far as it is cold), else the least recently used one of them.
 * meta.lock held on entry and return. 0, or -ENOSPC: nothing to evict. */
static int evict_shared(struct meta *m, uint32_t pool_id, uint64_t skip, struct dropped **drops)
{
	index_assert_locked(m);
	struct pool *pool = index_pool_live(m, pool_id);
	struct page *victims[EVICT_BATCH];
	uint64_t window, seen = 0;
	uint64_t n = 0;
	int rc;

	if (!pool)
		return -ENOENT;
	window = pool->pages / 8 > 2 * EVICT_BATCH ? pool->pages / 8 : 2 * EVICT_BATCH;
	for (struct page *p = pool->lru_tail; p && n < EVICT_BATCH && seen < window;
	     p = page_at(p->lru_prev), seen++)
		if (evictable(m, pool, p, skip))
			victims[n++] = p;
	for (struct page *p = n ? NULL : pool->lru_tail; p && !n; p = page_at(p->lru_prev))
		if (evictable(m, pool, p, skip))
			victims[n++] = p;
	if (!n)
		return -ENOSPC;
	struct rec *last = NULL;
	for (uint64_t i = 0; i < n; i++) {
		struct page *p = victims[i];
		struct rec *drop = record_new(REC_DROP);
		if (!drop)
			break;
		index_page_unlink_committed(m, p);
		pool->evictions++;
		index_drops_add(drops, p);
		record_set_drop(drop, p);
		index_page_free(p);
		if (last)
			record_submit(m, last); /* only the last one is waited for */
		last = drop;
	}
	if (!last)
		return -ENOMEM;
	last->waited = 1;
	record_submit(m, last);
	index_unlock(m);
	rc = record_wait(m, last);
	index_lock(m);
	return rc;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sleeps ms outside meta.lock, waking the sync thread (feed, heartbeat). */
static void nap(struct meta *m, long ms)
{
	struct timespec ts = {0, ms * 1000000L};

	index_unlock(m);
	index_cluster_kick(m);
	nanosleep(&ts, NULL);
	index_lock(m);
}

/* Shared index: a slot in this node's chunks. When they are full: a
 * slot of them back from its grace period, a chunk no node holds (one
 * with free slots, else the one whose pages are least recently used, to
 * evict in), a chunk handed over by a node holding more than its share
 * (waited for up to GRACE_WAIT_MS / 2), else an eviction among this
 * node's own least recently used pages. -ENOSPC after 2 * GRACE_WAIT_MS,
 * or at once when nothing anywhere can be freed (every page pinned, or
 * --evict none). meta.lock held on entry and return. */
static int take_shared(struct meta *m, uint32_t pool_id, const char *name, uint64_t skip,
                       uint64_t *slot, struct dropped **drops)
{
	index_assert_locked(m);
	int64_t start = now_ms(), since = start; /* since: last lease or eviction */
	struct pool *pool;
	int rc, in_vain = 0; /* a lease found no chunk with a free slot */

	for (;;) {
		if (!(pool = index_pool_live(m, pool_id)))
			return -ENOENT;
		if ((rc = index_slot_take(pool, slot)) != -ENOSPC)
			break;
		int64_t now = now_ms();
		if (now - start >= 2LL * GRACE_WAIT_MS)
			return -ENOSPC;
		if (in_vain && pool->ngrace && now - since < 1000) {
			nap(m, 20); /* freed slots come back soon */
			continue;
		}
		int lrc = lease_chunk(m, pool_id);
		if (lrc < 0 && lrc != -ENOSPC && lrc != -EAGAIN)
			return lrc; /* the store failed (EIO): the pool is not full */
		if (!(pool = index_pool_live(m, pool_id)))
			return -ENOENT;
		if ((rc = index_slot_take(pool, slot)) != -ENOSPC)
			break;
		if (lrc == 0 || lrc == -EAGAIN) {
			since = now_ms(); /* (a handed-over chunk's slots are in grace) */
			continue;
		}
		in_vain = 1;
		if (lrc == LEASE_ASKED && now_ms() - start < GRACE_WAIT_MS / 2) {
			nap(m, 50); /* the handover comes at the holder's heartbeat */
			continue;
		}
		if (pool->ngrace && now_ms() - since < 1000) {
			/* Slots freed here come back once every node has seen
			 * them go (a few heartbeats): waited for before a live
			 * page is evicted. Else a writer rewriting a few names
			 * as fast as it can keeps the grace periods full and
			 * evicts pages of a nearly empty pool. */
			nap(m, 20);
			continue;
		}
		/* (A pool HTTP clients read: the protocol's evictor makes
		 * the room, through the quarantine, as on an index of one
		 * daemon; evicting here would only wait for it.) */
		if (m->cfg.evict == META_EVICT_LRU && index_hook_fuse_refused(m, pool, name))
			return -ENOSPC;
		int erc = m->cfg.evict == META_EVICT_LRU ? evict_shared(m, pool_id, skip, drops)
		                                         : -ENOSPC;
		if (erc == 0) {
			since = now_ms();
			continue;
		}
		if (erc != -ENOSPC)
			return erc;
		if (!(pool = index_pool_live(m, pool_id)))
			return -ENOENT;
		if (!pool->ngrace && lrc != LEASE_ASKED)
			return -ENOSPC; /* nothing here or anywhere comes free */
		nap(m, 20);
	}
	if (rc == 0 && index_id_left(&m->page_ids) == 0) {
		index_slot_release(pool, *slot);
		index_chunk_done(pool, *slot);
		rc = -EAGAIN; /* ids come in blocks; the sync thread fetches the next */
	}
	return rc;
}

static int reserve(struct meta *m, uint32_t pool_id, const char *name, uint64_t replace_id,
                   int excl, struct meta_resv *out);

int meta_page_reserve(struct meta *m, uint32_t pool_id, const char *name, uint64_t replace_id,
                      struct meta_resv *out)
{
	return reserve(m, pool_id, name, replace_id, 0, out);
}

int meta_page_reserve_excl(struct meta *m, uint32_t pool_id, const char *name,
                           struct meta_resv *out)
{
	return reserve(m, pool_id, name, 0, 1, out);
}

static int reserve(struct meta *m, uint32_t pool_id, const char *name, uint64_t replace_id,
                   int excl, struct meta_resv *out)
{
	struct dropped *drops = NULL;
	struct rec *drop = NULL;
	struct page *pend = NULL;
	struct pool *pool;
	uint64_t slot = 0;
	int rc = meta_check_name(name);

	if (rc < 0)
		return rc;
	if (m->cfg.read_only)
		return -EROFS;
	if (m->fenced)
		return -EIO;
	index_lock(m);
	pool = index_pool_live(m, pool_id);
	if (!pool) {
		rc = -ENOENT;
		goto out;
	}
	if (replace_id) {
		struct page *t = index_idtable_find(&m->by_id, replace_id);
		if (!t || !t->committed) {
			rc = -ENOENT;
			goto out;
		}
	}
	if (excl) {
		int pending = 0;
		if (index_table_find_name(&m->by_name, pool_id, name, &pending) || pending) {
			rc = -EEXIST; /* (a shared index knows only this node's writers) */
			goto out;
		}
	}
	if (m->shared) {
		rc = take_shared(m, pool_id, name, replace_id, &slot, &drops);
		if (rc == 0 && !(pool = index_pool_live(m, pool_id)))
			rc = -ENOENT;
		int pending = 0;
		if (rc == 0 && excl &&
		    (index_table_find_name(&m->by_name, pool_id, name, &pending) || pending)) {
			/* made or being made while a lease was waited for */
			index_slot_release(pool, slot);
			index_chunk_done(pool, slot);
			rc = -EEXIST;
		}
	} else {
		rc = index_slot_take(pool, &slot);
	}
	/* (In a pool HTTP clients read, the protocol's evictor makes the
	 * room, through the quarantine: a victim's slot handed to this writer
	 * at once could be read by a client that looked its page up.) */
	if (rc == -ENOSPC && !m->shared && m->cfg.evict == META_EVICT_LRU &&
	    !index_hook_fuse_refused(m, pool, name)) { /* (shared: take_shared) */
		struct page *v = lru_victim(pool, replace_id);
		if (v && (drop = record_new(REC_DROP))) {
			char vname[META_NAME_MAX + 1];
			/* The victim's slot passes straight to this writer once
			 * the store has recorded the eviction. */
			index_page_unlink_committed(m, v);
			slot = v->slot;
			pool->evictions++;
			index_drops_add(&drops, v);
			record_set_drop(drop, v);
			drop->handoff = 1;
			drop->waited = 1;
			log_debug("evict %s from pool %u slot %llu", index_pname_text(v, vname),
			          pool_id, (unsigned long long)slot);
			index_page_free(v);
			rc = 0;
		}
	}
	struct pool *full = rc == -ENOSPC ? index_pool_live(m, pool_id) : NULL;
	if (full)
		full->refused++;
	if (rc < 0)
		goto out;
	if (!replace_id) {
		size_t len = strlen(name);
		pend = index_page_alloc(name, len);
		if (!pend) {
			if (drop) {
				/* Still record the eviction; its slot frees itself. */
				drop->handoff = 0;
				drop->waited = 0;
				record_submit(m, drop);
				drop = NULL;
			} else {
				index_slot_release(pool, slot);
				index_chunk_done(pool, slot);
			}
			rc = -ENOMEM;
			goto out;
		}
		pend->id = index_id_take(&m->page_ids);
		page_set_pool(pend, pool);
		pend->gen = m->epoch;
		pend->slot = slot;
		index_table_add_name(&m->by_name, pend, index_name_hash(pool_id, name, len));
		index_idtable_add(&m->by_id, pend);
		pool->pending++;
	}
	/* The pool's data file stays open while a reservation holds it. */
	pool->resv++;
	out->pool_id = pool_id;
	out->page_id = replace_id ? replace_id : pend->id;
	out->slot = slot;
	out->slot_size = pool->slot_size;
	out->replace = replace_id != 0;
	if (drop)
		record_submit(m, drop);
out:
	index_unlock(m);
	index_drops_notify(m, drops);
	if (drop && rc == 0) {
		rc = record_wait(m, drop);
		if (rc < 0) {
			/* The store still names the victim: its slot stays taken
			 * (apply.c logs it); only the pending page goes. */
			index_lock(m);
			if (pend) {
				index_table_del_name(&m->by_name, pend);
				index_idtable_del(&m->by_id, pend);
				pool->pending--;
				index_page_free(pend);
			}
			pool->resv--;
			ops_pool_reap(m, pool);
			index_unlock(m);
		}
	} else if (drop) {
		free(drop);
	}
	return rc;
}

/* Gives back a reservation; keep: its slot stays taken (the index names
 * another page on it). */
static void abort_resv(struct meta *m, const struct meta_resv *r, int keep)
{
	index_lock(m);
	struct pool *pool = index_pool_by_id(m, r->pool_id);
	if (pool && !r->replace) {
		struct page *p = index_idtable_find(&m->by_id, r->page_id);
		if (p && !p->committed) {
			if (!page_orphaned(p))
				index_table_del_name(&m->by_name, p);
			index_idtable_del(&m->by_id, p);
			pool->pending--;
			index_page_free(p);
		}
	}
	if (pool) {
		if (!keep)
			index_slot_release(pool, r->slot);
		index_chunk_done(pool, r->slot);
		if (pool->resv)
			pool->resv--;
		ops_pool_reap(m, pool);
	}
	index_unlock(m);
}

void meta_page_abort(struct meta *m, const struct meta_resv *r)
{
	abort_resv(m, r, 0);
}

/* A reservation ended with its commit: the slot is its page's now. */
static void resv_done(struct meta *m, uint32_t pool_id, uint64_t slot)
{
	index_lock(m);
	struct pool *pool = index_pool_by_id(m, pool_id);
	if (pool && pool->resv)
		pool->resv--;
	if (pool)
		index_chunk_done(pool, slot); /* (a shared index: it may be handed over now) */
	index_unlock(m);
}

/* One try of meta_page_commit: 0, 1 (the page went meanwhile), or a
 * negative errno (the store's, or -ENOMEM); the reservation still held. */
/* Queues the commit record of r: 0 with *out the record to wait for, 1
 * when the page went before its commit (nothing to publish), -ENOMEM. */
static int commit_submit(struct meta *m, const struct meta_resv *r, uint64_t length,
                         uint64_t checksum, struct rec **out)
{
	struct rec *rec = record_new(REC_COMMIT);
	struct page *p;

	if (!rec)
		return -ENOMEM;
	index_lock(m);
	p = index_idtable_find(&m->by_id, r->page_id);
	if (!p || (r->replace && !p->committed) || page_orphaned(p)) {
		/* Replacing a page that was removed meanwhile, or a new page
		 * its writer unlinked: like writing to an unlinked file, the
		 * bytes go nowhere. */
		index_unlock(m);
		free(rec);
		return 1;
	}
	rec->pool_id = r->pool_id;
	rec->page_id = r->page_id;
	rec->slot = r->slot;
	rec->length = length;
	rec->checksum = checksum;
	rec->has_checksum = 1;
	rec->mtime_ns = rec->atime_ns = page_mtime_grain(index_now_ns());
	rec->gen = p->gen;
	/* apply_commit makes a replacement the next version */
	rec->version = p->committed ? (uint16_t)(p->version + 1) : p->version;
	rec->replace = r->replace;
	rec->name_len = p->name_len;
	index_pname_text(p, rec->name);
	record_note_replaced(m, rec);
	rec->waited = 1;
	record_submit(m, rec);
	index_unlock(m);
	*out = rec;
	return 0;
}

static int commit_once(struct meta *m, const struct meta_resv *r, uint64_t length,
                       uint64_t checksum)
{
	struct rec *rec = NULL;
	int rc = commit_submit(m, r, length, checksum, &rec);

	return rc == 0 ? record_wait(m, rec) : rc;
}

/* What meta_page_commit does with the result rc of a commit of r: a name
 * another node took meanwhile (shared index) is tried again. */
static int commit_finish(struct meta *m, const struct meta_resv *r, uint64_t length,
                         uint64_t checksum, int rc, int tries)
{
	/* On a shared index another node may commit or rename onto the same
	 * name in the same instant: the store refuses the second row
	 * (UNIQUE(pool, name), -EEXIST). That row is visible then, and a
	 * next try replaces it, as a later write would (close() and rename()
	 * must not fail with EEXIST). */
	while (rc == -EEXIST && m->shared && !r->replace && ++tries < COLLISION_TRIES)
		rc = commit_once(m, r, length, checksum);
	if (rc == -EADDRINUSE) {
		/* The slot was given out while the index names another page
		 * on it (store_pg_rows.c logs whose): it stays taken until
		 * that page leaves, so no other writer lands there too. */
		abort_resv(m, r, 1);
		rc = -EIO;
	} else if (rc != 0) {
		meta_page_abort(m, r); /* -ENOENT: the pool was removed meanwhile */
	} else
		resv_done(m, r->pool_id, r->slot);
	/* -ESTALE: a replacement whose page was unlinked or renamed over
	 * since it was queued; 1: the page went before its commit. As for a
	 * write to an unlinked file, the bytes go nowhere. */
	return rc == -ESTALE || rc == 1 ? 0 : rc;
}

int meta_page_commit(struct meta *m, const struct meta_resv *r, uint64_t length, uint64_t checksum)
{
	if (length > r->slot_size) {
		meta_page_abort(m, r);
		return -EFBIG;
	}
	return commit_finish(m, r, length, checksum, commit_once(m, r, length, checksum), 0);
}

void meta_page_commit_many(struct meta *m, const struct meta_resv *r, const uint64_t *length,
                           const uint64_t *checksum, size_t n, int *err)
{
	struct rec **recs = calloc(n ? n : 1, sizeof(struct rec *));

	/* All queued first, so that one journal batch (one transaction)
	 * takes them, then each waited for. The hold keeps the journal's
	 * timed flush from starting a batch with only some of them
	 * (commit_submit waits for no record). */
	for (size_t i = 0; i < n; i++) {
		if (length[i] > r[i].slot_size) {
			meta_page_abort(m, &r[i]);
			err[i] = -EFBIG;
		} else if (!recs) {
			err[i] = meta_page_commit(m, &r[i], length[i], checksum[i]);
		}
	}
	if (!recs)
		return;
	record_hold(m);
	for (size_t i = 0; i < n; i++)
		if (length[i] <= r[i].slot_size)
			err[i] = commit_submit(m, &r[i], length[i], checksum[i], &recs[i]);
	record_release(m);
	for (size_t i = 0; i < n; i++) {
		if (length[i] > r[i].slot_size)
			continue;
		if (recs[i])
			err[i] = record_wait(m, recs[i]);
		err[i] = commit_finish(m, &r[i], length[i], checksum[i], err[i], 0);
	}
	free(recs);
}

int meta_page_pin(struct meta *m, uint64_t page_id, struct meta_page_info *out, int *verify)
{
	int ret = -ENOENT;

	index_lock(m);
	struct page *p = index_idtable_find(&m->by_id, page_id);
	if (p && p->committed) {
		index_slot_pin(page_pool(p), p->slot);
		ops_page_touch(m, p);
		fill_info(m, p, out);
		p->opened = 1;
		/* A page without a checksum (written by the key protocol or
		 * imported) is read once to get one. */
		*verify = !p->has_checksum || m->cfg.verify == META_VERIFY_ALWAYS ||
		          (m->cfg.verify == META_VERIFY_FIRST && !p->verified);
		ret = 0;
	}
	index_unlock(m);
	return ret;
}

int meta_page_lookup_pin(struct meta *m, uint32_t pool_id, const char *name,
                         struct meta_page_info *out)
{
	return page_lookup(m, pool_id, name, out, NULL, 1);
}

int meta_page_new_version(struct meta *m, uint64_t page_id, struct meta_page_info *out)
{
	int ret = -ENOENT;

	index_lock(m);
	struct page *p = index_idtable_find(&m->by_id, page_id);
	if (p && p->committed) {
		page_new_version(p);
		fill_info(m, p, out);
		ret = 0;
	}
	index_unlock(m);
	return ret;
}

void meta_slot_unpin(struct meta *m, uint32_t pool_id, uint64_t slot)
{
	index_lock(m);
	struct pool *pool = index_pool_by_id(m, pool_id);
	if (pool) {
		index_slot_unpin(pool, slot);
		ops_pool_reap(m, pool);
	}
	index_unlock(m);
}

void meta_page_verified(struct meta *m, uint64_t page_id, uint64_t slot, int ok)
{
	struct dropped *drops = NULL;

	index_lock(m);
	struct page *p = index_idtable_find(&m->by_id, page_id);
	if (!p || !p->committed || p->slot != slot) {
		index_unlock(m);
		return;
	}
	if (ok) {
		p->verified = 1;
		index_unlock(m);
		return;
	}
	struct pool *pool = page_pool(p);
	struct rec *r = record_new(REC_DROP);
	pool->checksum_failures++;
	char name[META_NAME_MAX + 1];
	log_error("checksum mismatch: page '%s' of pool %u/%s (slot %llu) dropped from the index",
	          index_pname_text(p, name), pool->rank, pool->ns, (unsigned long long)slot);
	if (r && !m->cfg.read_only) {
		index_page_unlink_committed(m, p);
		index_drops_add(&drops, p);
		record_set_drop(r, p);
		record_submit(m, r);
		index_page_free(p);
	} else {
		free(r);
	}
	index_unlock(m);
	index_drops_notify(m, drops);
}

int meta_page_verdict(struct meta *m, const struct meta_page_info *p, int read_ret, uint64_t sum)
{
	if (read_ret < 0 && read_ret != -ENODATA)
		return read_ret;
	int ok = read_ret == 0 && (!p->has_checksum || sum == p->checksum);

	meta_page_verified(m, p->id, p->slot, ok);
	return ok ? 0 : -EIO;
}

int meta_page_pending(struct meta *m, uint32_t pool_id, const char *name, uint64_t *ids, int max)
{
	int n = 0;

	if (meta_check_name(name) < 0)
		return 0;
	index_lock(m);
	if (index_pool_live(m, pool_id))
		n = index_table_find_pending(&m->by_name, pool_id, name, ids, max);
	index_unlock(m);
	return n;
}

/* Page page_id while it is still being written and has its name, or
 * NULL. meta.lock held. */
static struct page *pending_page(struct meta *m, uint64_t page_id)
{
	index_assert_locked(m);
	struct page *p = index_idtable_find(&m->by_id, page_id);

	return p && !p->committed && !page_orphaned(p) ? p : NULL;
}

int meta_page_unlink_pending(struct meta *m, uint64_t page_id)
{
	int rc = -ENOENT;

	index_lock(m);
	struct page *p = pending_page(m, page_id);
	if (p) {
		index_table_del_name(&m->by_name, p);
		page_set_orphaned(p);
		index_pool_changed(page_pool(p), index_now_ns());
		rc = 0;
	}
	index_unlock(m);
	return rc;
}

int meta_page_rename_pending(struct meta *m, uint64_t page_id, const char *to, int noreplace)
{
	size_t len;
	int rc = meta_check_name_len(to, &len);

	if (rc < 0)
		return rc;
	index_lock(m);
	struct page *p = pending_page(m, page_id), *q;
	uint32_t pool_id = p ? page_pool(p)->id : 0;
	if (!p) {
		rc = -ENOENT;
	} else if (noreplace && index_table_find_name(&m->by_name, pool_id, to, NULL)) {
		rc = -EEXIST;
	} else if (index_pname_eq(p, to, len)) {
		rc = 0;
	} else if (!(q = index_page_alloc(to, len))) {
		rc = -ENOMEM;
	} else {
		/* The name lives inside the struct: move the page into a new
		 * one, as apply_rename does for a committed page. */
		index_table_del_name(&m->by_name, p);
		index_idtable_del(&m->by_id, p);
		memcpy(q, p, offsetof(struct page, name_next));
		index_page_free(p);
		index_table_add_name(&m->by_name, q, index_name_hash(pool_id, to, len));
		index_idtable_add(&m->by_id, q);
		index_pool_changed(page_pool(q), index_now_ns());
	}
	index_unlock(m);
	return rc;
}

/* Submits a waited record for a committed page found by name. */
static int submit_named(struct meta *m, struct rec *r, uint32_t pool_id, const char *name,
                        const char *to, int noreplace)
{
	index_lock(m);
	struct page *p = index_pool_live(m, pool_id)
	                         ? index_table_find_name(&m->by_name, pool_id, name, NULL)
	                         : NULL;
	if (!p) {
		index_unlock(m);
		free(r);
		return -ENOENT;
	}
	if (to && noreplace && index_table_find_name(&m->by_name, pool_id, to, NULL)) {
		index_unlock(m);
		free(r);
		return -EEXIST;
	}
	r->pool_id = pool_id;
	r->page_id = p->id;
	if (to) {
		r->name_len = (uint16_t)strlen(to);
		memcpy(r->name, to, r->name_len + 1u);
		record_note_replaced(m, r);
	}
	r->waited = 1;
	record_submit(m, r);
	index_unlock(m);
	return record_wait(m, r);
}

int meta_page_unlink(struct meta *m, uint32_t pool_id, const char *name)
{
	struct rec *r;

	if (m->cfg.read_only)
		return -EROFS;
	if (!(r = record_new(REC_UNLINK)))
		return -ENOMEM;
	return submit_named(m, r, pool_id, name, NULL, 0);
}

int meta_page_rename(struct meta *m, uint32_t pool_id, const char *from, const char *to,
                     int noreplace)
{
	struct rec *r;
	int rc;

	if ((rc = meta_check_name(from)) < 0 || (rc = meta_check_name(to)) < 0)
		return rc;
	if (m->cfg.read_only)
		return -EROFS;
	if (strcmp(from, to) == 0) {
		int found;
		index_lock(m);
		found = index_table_find_name(&m->by_name, pool_id, from, NULL) != NULL;
		index_unlock(m);
		return found ? (noreplace ? -EEXIST : 0) : -ENOENT;
	}
	/* (A shared index: another node's rename or commit onto `to` in the
	 * same instant; tried again, as meta_page_commit does.) */
	for (int tries = 0;; tries++) {
		if (!(r = record_new(REC_RENAME)))
			return -ENOMEM;
		rc = submit_named(m, r, pool_id, from, to, noreplace);
		if (rc != -EEXIST || !m->shared || noreplace || tries + 1 >= COLLISION_TRIES)
			return rc;
	}
}

void meta_page_set_checksum(struct meta *m, uint64_t page_id, uint64_t slot, uint64_t checksum)
{
	index_lock(m);
	struct page *p = index_idtable_find(&m->by_id, page_id);
	if (p && p->committed && p->slot == slot && !p->has_checksum && !m->cfg.read_only) {
		struct rec *r = record_new(REC_CHECKSUM);
		if (r) {
			/* Memory first: a crash before the store has it only means
			 * the page is summed again on its next first read. */
			p->checksum = checksum;
			p->has_checksum = 1;
			r->page_id = page_id;
			r->slot = slot;
			r->checksum = checksum;
			record_submit(m, r);
		}
	}
	index_unlock(m);
}
