/*
 * keys_evict.c - how protocol pages leave: a drop takes a page out of
 * memory at once and queues its durable removal, and its slot enters the
 * quarantine once the store has it (delete, clear, a key confirmed over
 * an older page, eviction); the evictor thread expires reservations and
 * quarantines and evicts least recently used pages to keep each pool's
 * headroom free. meta.lock held but where a function says otherwise.
 */
#include "meta/keys.h"
#include "meta/log.h"

#include <errno.h>
#include <stdlib.h>

/*
 * Removes committed page p from memory and queues its durable removal;
 * the slot stays taken until keys_drops_finish() puts it in quarantine.
 * meta.lock held.
 */
int keys_drop_page(struct meta *m, struct page *p, struct drop_list *dl, struct dropped **drops)
{
	struct pool *pool = page_pool(p);
	struct rec *r;

	if (dl->n == dl->cap) {
		size_t n = dl->cap ? dl->cap * 2 : 16;
		// NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers, sizeof(*p) meant
		struct rec **v = realloc(dl->recs, n * sizeof(*v));
		if (!v)
			return -ENOMEM;
		dl->recs = v;
		dl->cap = n;
	}
	if (!(r = record_new(REC_DROP)))
		return -ENOMEM;
	record_set_drop(r, p);
	r->handoff = 1; /* the slot goes to the quarantine, not back to the pool */
	r->waited = 1;
	struct kpool *kp = pool->shared ? NULL : keys_pool_get(m, pool);
	if (kp)
		keys_fence_freed(m, pool, kp);
	if (pool->shared) {
		/* HTTP readers may read the slot: pinned from now on through
		 * the quarantine. In another node's chunk the pin is a zombie
		 * (its page is gone), listed in pagefs_pins by the heartbeat
		 * that acknowledges the drop, so the holder waits for it. */
		(void)index_slot_quarantine(pool, p->slot);
	}
	index_page_unlink_committed(m, p);
	index_drops_add(drops, p);
	index_page_free(p);
	record_submit(m, r);
	dl->recs[dl->n++] = r;
	return 0;
}

/* Waits for the drops to be durable and quarantines their slots. Called
 * without meta.lock; returns the first error. */
int keys_drops_finish(struct meta *m, struct drop_list *dl, struct dropped *drops)
{
	int rc = 0;

	index_drops_notify(m, drops);
	for (size_t i = 0; i < dl->n; i++) {
		struct rec *r = dl->recs[i];
		uint32_t pool_id = r->pool_id;
		uint64_t slot = r->drop_slot;
		int err = record_wait(m, r);
		index_lock(m);
		struct pool *pool = index_pool_by_id(m, pool_id);
		struct kpool *kp = pool && m->keys ? keys_pool_get(m, pool) : NULL;
		if (err < 0) {
			rc = rc ? rc : err; /* apply.c logged it; the slot stays taken */
			if (pool && pool->shared)
				index_slot_unquarantine(pool, slot);
		} else if (kp) {
			keys_quarantine(m->keys, kp, slot, 1);
		} else if (pool && pool->shared) {
			index_slot_unquarantine(pool, slot);
		} else if (pool) {
			index_slot_put(pool, slot);
		}
		index_unlock(m);
	}
	free(dl->recs);
	return rc;
}

/* ---- the evictor ---- */

/* Evicts up to n least recently used unpinned pages of the pool (on a
 * shared index, of the chunks this node holds). meta.lock held. */
static void evict(struct meta *m, struct pool *pool, uint64_t n, struct drop_list *dl,
                  struct dropped **drops)
{
	index_assert_locked(m);
	if (pool->shared && !pool->chunk_slots)
		return; /* (never: pool_chunk_slots is at least 1; cluster_chunks_handover checks too) */
	uint64_t total =
		pool->shared ? (pool->capacity + pool->chunk_slots - 1) / pool->chunk_slots : 0;
	uint8_t *held = total ? calloc((size_t)(total + 7) / 8, 1) : NULL;

	for (size_t i = 0; held && i < pool->nchunks; i++)
		if (keys_held_at(pool, i) < total)
			held[keys_held_at(pool, i) / 8] |=
				(uint8_t)(1u << (keys_held_at(pool, i) % 8));
	for (struct page *p = pool->lru_tail, *prev; p && n; p = prev) {
		uint64_t c = pool->shared ? chunk_of(pool, p->slot) : 0;
		prev = page_at(p->lru_prev);
		if (pool->shared ? index_slot_pinned_anywhere(m, pool, p->slot)
		                 : index_slot_pinned(pool, p->slot))
			continue; /* a reader here, or on another node, has it open */
		if (pool->shared && (held ? c >= total || !((held[c / 8] >> (c % 8)) & 1)
		                          : !index_chunk_owned(pool, c)))
			continue; /* another node's page: that node evicts it */
		if (keys_drop_page(m, p, dl, drops) < 0)
			break;
		pool->evictions++;
		n--;
	}
	free(held);
}

/*
 * What the evictor frees: eviction serves demand, it does not multiply
 * it. The demand is the headroom (headroom_pct of the pool, at least a
 * slot, so that reservations seldom wait) or, when more, the keys owed a
 * slot (keys_want.c: a key refused a slot, counted once however often it
 * asks again), up to half the pool; the headroom is what serves a burst
 * first, so the two do not add up. The supply is every slot free or on
 * its way back: free, in the quarantine, held by a restart (fence.c: free
 * when the hold ends), and on a shared index in a grace period. A pool
 * under a burst of B keys keeps about capacity - B of its pages, and each
 * key gets a slot when one leaves the quarantine; a burst of more than
 * half the pool gets half of it per quarantine, the rest of its keys the
 * slots that come back, and the other half of the pages stays live (a
 * page evicted for a key frees nothing for 6 s: a scan of new keys would
 * otherwise leave the pool empty that long). (Evicting a page for every
 * refusal, and for the headroom while the quarantine already held it,
 * emptied a full pool under one key retried twice a second.)
 */
static uint64_t shortfall(const struct keys *k, const struct kpool *kp, uint64_t slots,
                          uint64_t supply)
{
	uint64_t want = slots * k->t.headroom_pct / 100, burst = kp->want.live;

	want = want ? want : 1;
	if (burst > slots / 2)
		burst = slots / 2;
	if (burst > want)
		want = burst;
	return supply < want ? want - supply : 0;
}

/* Shared index: the supply is the free slots of the chunks this node
 * holds, those in their grace period and every slot in this node's
 * quarantine, against the held slots. Short of the headroom the evictor
 * leases another chunk (a chunk ahead, so that reservations seldom wait
 * for one); only when none is left does it evict. */
static void headroom_shared(struct meta *m, struct keys *k, struct pool *pool, struct kpool *kp,
                            int64_t now, uint32_t *lease, struct drop_list *dl,
                            struct dropped **drops)
{
	uint64_t free_now = 0, held = (uint64_t)pool->nchunks * pool->chunk_slots;

	for (size_t i = 0; i < pool->nchunks; i++)
		free_now += (uint64_t)__builtin_popcountll(
			keys_held_free_bits(pool, i, keys_held_at(pool, i)));
	uint64_t have = free_now + pool->ngrace + kp->quarantined;
	uint64_t want = held * k->t.headroom_pct / 100;
	uint64_t ahead = want > pool->chunk_slots ? want : pool->chunk_slots;
	uint64_t n = shortfall(k, kp, held, have);
	if ((have < ahead || n) && now >= kp->lease_after) {
		if (!*lease)
			*lease = kp->pool_id;
	} else if (n && kp->full) {
		evict(m, pool, n, dl, drops);
	}
}

/* Reservations a pass found never confirmed: how many, and the lowest and
 * highest of their slots. */
struct expired {
	uint64_t n, lo, hi;
};

/* The reservations of run e whose deadline passed unconfirmed go to the
 * quarantine, counted in x. meta.lock held. */
static void expire_run(struct keys *k, struct kpool *kp, const struct fifo_ent *e,
                       struct expired *x)
{
	for (uint64_t s = e->lo; s < e->lo + e->n; s++) {
		if (keys_resv_get(kp, s) != e->at)
			continue; /* confirmed, or reserved again since */
		if (!x->n++ || s < x->lo)
			x->lo = s;
		if (x->n == 1 || s > x->hi)
			x->hi = s;
		keys_resv_set(kp, s, 0, 0);
		keys_quarantine(k, kp, s, 0);
	}
}

/* One line for the reservations a pass expired in a pool (a pass every
 * 100 ms, or sooner when woken): a client that reserves batch after batch
 * and never confirms made a line per batch. */
static void log_expired(const struct pool *pool, const struct expired *x)
{
	if (x->n == 1)
		log_warn("pool %u/%s: reservation of slot %llu was never confirmed; it returns "
		         "to the pool after the quarantine",
		         pool->rank, pool->ns, (unsigned long long)x->lo);
	else if (x->n)
		log_warn("pool %u/%s: %llu reservations of slots %llu..%llu were never "
		         "confirmed; they return to the pool after the quarantine",
		         pool->rank, pool->ns, (unsigned long long)x->n, (unsigned long long)x->lo,
		         (unsigned long long)x->hi);
}

/* Expires reservations, quarantines and the keys owed a slot, evicts for
 * the demand. meta.lock held; queues drops in dl; *lease: a shared pool
 * that needs a chunk. */
static void housekeep(struct meta *m, struct keys *k, struct drop_list *dl, struct dropped **drops,
                      uint32_t *lease)
{
	index_assert_locked(m);
	int64_t now = mono_ns();

	for (struct kpool *kp = k->pools; kp; kp = kp->next) {
		struct pool *pool = index_pool_by_id(m, kp->pool_id);
		struct fifo_ent *e;
		if (!pool)
			continue;
		keys_quarantine_release(pool, kp, now);
		struct expired x = {0};
		while ((e = fifo_peek(&kp->resv_q)) && e->at <= now) {
			expire_run(k, kp, e, &x);
			fifo_pop(&kp->resv_q);
		}
		log_expired(pool, &x);
		/* (A key's writer that stopped asking has given up.) */
		keys_want_expire(kp, now - k->t.quarantine_ns - SEC);
		if (pool->shared) {
			headroom_shared(m, k, pool, kp, now, lease, dl, drops);
			continue;
		}
		uint64_t n = shortfall(k, kp, pool->capacity,
		                       pool->capacity - pool_used(pool) + kp->quarantined);
		if (n)
			evict(m, pool, n, dl, drops);
	}
}

void *keys_evictor_main(void *arg)
{
	struct meta *m = arg;
	struct keys *k = m->keys;

	index_lock(m);
	while (!k->stop) {
		struct drop_list dl = {0};
		struct dropped *drops = NULL;
		uint32_t lease = 0;
		housekeep(m, k, &dl, &drops, &lease);
		if (dl.n || drops) {
			index_unlock(m);
			keys_drops_finish(m, &dl, drops);
			index_lock(m);
			continue;
		}
		free(dl.recs);
		if (lease) {
			struct pool *pool = index_pool_by_id(m, lease);
			struct kpool *kp = pool ? keys_pool_get(m, pool) : NULL;
			if (kp) {
				keys_lease(m, lease, kp);
				continue;
			}
		}
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += 100L * 1000 * 1000;
		if (ts.tv_nsec >= SEC) {
			ts.tv_sec++;
			ts.tv_nsec -= SEC;
		}
		lock_released(&m->lock_owner);
		pthread_cond_timedwait(&k->wake, &m->lock, &ts);
		lock_taken(&m->lock_owner);
	}
	index_unlock(m);
	return NULL;
}
