/*
 * keys_slots.c - the protocol's state and where its slots come from and
 * go back to: the state itself (made on first use, which starts the
 * evictor thread; its tuning; keys_stop), the per-pool state (the
 * reservation and quarantine queues; the reservations are keys_resv.c's),
 * the highest free slot for a reservation (on a shared index, from the
 * chunks this node holds, leasing more), and the quarantine a freed slot
 * passes before it is free again (keys.c's header says why). Callers hold
 * meta.lock but for meta_keys_tune and keys_stop, which take it;
 * keys_lease and keys_take drop it while a lease is waited for.
 */
#include "meta/keys.h"
#include "meta/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Appends a slot to a reservation or quarantine queue (deadlines in
 * order): into the last run when it has the same time and kind and the
 * slot extends it, either way. 0 or -ENOMEM. */
int keys_fifo_push(struct fifo *f, uint64_t slot, int64_t at, int page_slot)
{
	if (f->len) {
		struct fifo_ent *t = &f->v[(f->head + f->len - 1) & (f->cap - 1)];
		if (t->at == at && t->page_slot == page_slot && t->n < UINT32_MAX) {
			if (slot == t->lo + t->n) {
				t->n++;
				return 0;
			}
			if (slot + 1 == t->lo) {
				t->lo = slot;
				t->n++;
				return 0;
			}
		}
	}
	if (f->len == f->cap) {
		size_t n = f->cap ? f->cap * 2 : 64;
		struct fifo_ent *v = malloc(n * sizeof(*v));
		if (!v)
			return -ENOMEM;
		for (size_t i = 0; i < f->len; i++)
			v[i] = *fifo_at(f, i);
		free(f->v);
		f->v = v;
		f->head = 0;
		f->cap = n;
	}
	f->v[(f->head + f->len) & (f->cap - 1)] = (struct fifo_ent){slot, at, 1, page_slot};
	f->len++;
	return 0;
}

/* The protocol state, created on first use. Caller holds meta.lock. */
static struct keys *keys_get(struct meta *m)
{
	if (m->keys)
		return m->keys;
	struct keys *k = calloc(1, sizeof(*k));
	if (!k)
		return NULL;
	k->t.reserve_timeout_ns = 60 * SEC;
	k->t.quarantine_ns = 6 * SEC;
	k->t.headroom_pct = 2;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&k->wake, &ca);
	pthread_condattr_destroy(&ca);
	m->keys = k;
	if (!m->cfg.read_only && pthread_create(&k->thread, NULL, keys_evictor_main, m) == 0)
		k->started = 1;
	return k;
}

void meta_keys_tune(struct meta *m, const struct meta_keys_tuning *t)
{
	index_lock(m);
	struct keys *k = keys_get(m);
	if (k) {
		if (t->reserve_timeout_ns > 0)
			k->t.reserve_timeout_ns = t->reserve_timeout_ns;
		if (t->quarantine_ns > 0)
			k->t.quarantine_ns =
				t->quarantine_ns < 5 * SEC ? 5 * SEC + SEC / 10 : t->quarantine_ns;
		if (t->headroom_pct > 0 && t->headroom_pct <= 50)
			k->t.headroom_pct = t->headroom_pct;
	}
	index_unlock(m);
}

/* The protocol's view of pool if it has one (never made here). */
static struct kpool *kpool_find(struct meta *m, const struct pool *pool)
{
	struct kpool *kp = m->keys ? m->keys->pools : NULL;

	while (kp && kp->pool_id != pool->id)
		kp = kp->next;
	return kp;
}

/* The protocol's view of a pool (registered on first use; its capacity
 * follows the pool's). NULL: out of memory. */
struct kpool *keys_pool_get(struct meta *m, struct pool *pool)
{
	struct keys *k = keys_get(m);
	struct kpool *kp;

	if (!k)
		return NULL;
	kp = kpool_find(m, pool);
	if (kp && kp->capacity < pool->capacity)
		kp->capacity = pool->capacity;
	if (kp)
		return kp;
	if (!(kp = calloc(1, sizeof(*kp))))
		return NULL;
	kp->pool_id = pool->id;
	kp->capacity = pool->capacity;
	kp->top = pool->capacity - 1;
	kp->next = k->pools;
	k->pools = kp;
	return kp;
}

static void kpool_free(struct kpool *kp)
{
	keys_resv_tab_free(&kp->resv);
	free(kp->resv_q.v);
	free(kp->quar_q.v);
	free(kp->want.v);
	free(kp);
}

void keys_stop(struct meta *m)
{
	struct keys *k = m->keys;

	if (!k)
		return;
	index_lock(m);
	k->stop = 1;
	pthread_cond_broadcast(&k->wake);
	index_unlock(m);
	if (k->started)
		pthread_join(k->thread, NULL);
	index_lock(m);
	for (struct kpool *kp = k->pools; kp; kp = kp->next)
		keys_fence_clear(m, kp);
	index_unlock(m);
	while (k->pools) {
		struct kpool *kp = k->pools;
		k->pools = kp->next;
		kpool_free(kp);
	}
	pthread_cond_destroy(&k->wake);
	free(k);
	m->keys = NULL;
}

int keys_slot_used(const struct pool *p, uint64_t i)
{
	return i < p->hwm && (p->bits[i / 64] >> (i % 64)) & 1;
}

/* Highest clear bit at or below `from`, or -1 (slots >= hwm are free). */
static int64_t scan_down(const struct pool *p, uint64_t from)
{
	for (int64_t w = (int64_t)(from / 64); w >= 0; w--) {
		uint64_t base = (uint64_t)w * 64, used = 0;
		if (base < p->hwm) {
			used = p->bits[w];
			if (p->hwm < base + 64)
				used &= (1ULL << (p->hwm - base)) - 1;
		}
		uint64_t free_bits = ~used;
		if ((uint64_t)w == from / 64 && from % 64 != 63)
			free_bits &= (1ULL << (from % 64 + 1)) - 1;
		if (free_bits)
			return (int64_t)(base + 63 - (uint64_t)__builtin_clzll(free_bits));
	}
	return -1;
}

/* Takes a free slot, highest first. 0 or -ENOSPC. meta.lock held. */
static int take_top(struct pool *p, struct kpool *kp, uint64_t *slot)
{
	int64_t s;

	if (p->fence_bits)
		index_slots_unfence(p);
	if (p->nused >= p->capacity)
		return -ENOSPC;
	if (kp->top >= p->capacity)
		kp->top = p->capacity - 1;
	s = scan_down(p, kp->top);
	if (s < 0 && kp->top < p->capacity - 1)
		s = scan_down(p, p->capacity - 1); /* slots freed above the hint */
	if (s < 0 || index_slot_mark(p, (uint64_t)s) < 0)
		return -ENOSPC;
	*slot = (uint64_t)s;
	kp->top = s > 0 ? (uint64_t)s - 1 : 0;
	return 0;
}

/* Shared index: the number of the i-th chunk this node holds. */
uint64_t keys_held_at(const struct pool *p, size_t i)
{
	return p->chunks[i].chunk;
}

/* Shared index: the free slots of the i-th held chunk c (bit j = slot
 * c*k + j); none while it drains for a handover to another node. */
uint64_t keys_held_free_bits(const struct pool *p, size_t i, uint64_t c)
{
	uint64_t k = p->chunk_slots, first = c * k;

	if (p->chunks[i].draining || first >= p->capacity)
		return 0;
	uint64_t n = p->capacity - first < k ? p->capacity - first : k;
	uint64_t valid = n == 64 ? ~0ULL : (1ULL << n) - 1;
	/* A chunk lies in one bitmap word; bits at or above hwm are clear. */
	uint64_t word = first / 64 < p->bits_words ? p->bits[first / 64] : 0;
	uint64_t used = k == 64 ? word : (word >> (first % 64)) & ((1ULL << k) - 1);
	return ~used & valid;
}

/*
 * Shared index: the highest free slot of the chunk reservations are
 * taken from; when it is full, of the highest-numbered held chunk with a
 * free slot (a scan of the held chunks once per chunk used up). The
 * chunks themselves come in the order the lease hands them out (the
 * lowest free one from a per-node offset), so "from the top down" holds
 * only within this node's chunks. 0 or -ENOSPC. meta.lock held.
 */
static int take_top_held(struct pool *p, struct kpool *kp, uint64_t *slot)
{
	uint64_t c = kp->cur_chunk, free_bits = 0;

	if (kp->cur_ok && kp->cur_idx < p->nchunks && keys_held_at(p, kp->cur_idx) == c)
		free_bits = keys_held_free_bits(p, kp->cur_idx, c);
	if (!free_bits) {
		kp->cur_ok = 0;
		for (size_t i = 0; i < p->nchunks; i++) {
			uint64_t f = keys_held_free_bits(p, i, keys_held_at(p, i));
			if (f && (!kp->cur_ok || keys_held_at(p, i) > c)) {
				c = keys_held_at(p, i);
				free_bits = f;
				kp->cur_idx = i;
				kp->cur_ok = 1;
			}
		}
		if (!kp->cur_ok)
			return -ENOSPC;
		kp->cur_chunk = c;
	}
	*slot = c * p->chunk_slots + 63 - (uint64_t)__builtin_clzll(free_bits);
	if (index_slot_mark(p, *slot) < 0)
		return -ENOSPC;
	/* As index_chunk_take: a grace period still listed for the free
	 * slot is stale, and must not free it again under this key's page. */
	if (p->ngrace)
		index_grace_forget(p, *slot);
	p->chunks[kp->cur_idx].inflight++; /* until index_chunk_done: no handover meanwhile */
	return 0;
}

/* Shared index: leases another chunk of the pool through the journal
 * (REC_LEASE, as FUSE writers do). meta.lock held on entry and return,
 * dropped while waiting: the caller looks the pool up again. */
int keys_lease(struct meta *m, uint32_t pool_id, struct kpool *kp)
{
	index_assert_locked(m);
	struct pool *pool = index_pool_by_id(m, pool_id);
	struct rec *r;

	if (!pool)
		return -ENOENT;
	if (!(r = record_new(REC_LEASE)))
		return -ENOMEM;
	r->pool_id = pool_id;
	r->chunk_slots = pool->chunk_slots;
	r->capacity_slots = pool->capacity;
	r->lease_from = pool->lease_from;
	r->ask = 1; /* the protocol always evicts: a full unheld chunk, or a handover */
	r->waited = 1;
	record_submit(m, r);
	index_unlock(m);
	int rc = record_wait(m, r);
	index_lock(m);
	/* LEASE_FULL: a chunk came without a free slot (the evictor makes
	 * room in it); LEASE_ASKED: a node over its share hands one over at
	 * its next heartbeat. */
	kp->full = rc == -ENOSPC || rc == LEASE_FULL || rc == LEASE_ASKED;
	kp->lease_after = rc == 0 ? 0 : mono_ns() + SEC;
	return rc;
}

/*
 * A free slot for a new reservation, marked taken: on an index of one
 * daemon the highest free slot of the pool; on a shared index one of the
 * chunks this node holds, leasing another when they are full (meta.lock
 * is then dropped while the lease is waited for). Every reservation gets
 * its slot here (chunk handover between nodes plugs in here). 0,
 * -ENOSPC, or -ENOENT when the pool went away. meta.lock held.
 */
int keys_take(struct meta *m, uint32_t pool_id, struct kpool *kp, uint64_t *slot)
{
	index_assert_locked(m);
	struct pool *pool = index_pool_by_id(m, pool_id);
	int rc;

	if (!pool)
		return -ENOENT;
	if (!pool->shared)
		return take_top(pool, kp, slot);
	rc = take_top_held(pool, kp, slot);
	/* A full pool: no database round trip per request, the evictor
	 * makes room (and leases again once a second). */
	if (rc == -ENOSPC && kp->full && mono_ns() < kp->lease_after)
		return rc;
	for (int round = 0; rc == -ENOSPC && round < 3; round++) {
		int lrc = keys_lease(m, pool_id, kp);
		if (!(pool = index_pool_by_id(m, pool_id)))
			return -ENOENT;
		rc = take_top_held(pool, kp, slot);
		if (lrc != 0 && lrc != -EAGAIN)
			break; /* no chunk free anywhere (evict, or wait for a handover) */
	}
	return rc;
}

/* A reserved slot that no page ever named goes back to the pool. */
void keys_resv_free(struct pool *p, struct kpool *kp, uint64_t slot)
{
	if (p->shared) {
		index_chunk_done(p, slot);
		index_slot_release(p, slot); /* in this node's chunk; nobody else knows it */
		return;
	}
	index_slot_put(p, slot);
	if (slot > kp->top)
		kp->top = slot;
}

/* Quarantined slots leave the quarantine when it ends (called by the
 * evictor's passes, and by a reservation about to be refused, so that a
 * refused key gets a slot as soon as one is back). A page's slot on a
 * shared index loses the quarantine's pin: its grace period (chunks.c)
 * or, in another node's chunk, that node's frees it. */
void keys_quarantine_release(struct pool *p, struct kpool *kp, int64_t now)
{
	struct fifo_ent *e;

	while ((e = fifo_peek(&kp->quar_q)) && e->at <= now) {
		for (uint64_t s = e->lo; s < e->lo + e->n; s++) {
			if (!e->page_slot || !p->shared)
				keys_resv_free(p, kp, s);
			else
				index_slot_unquarantine(p, s);
			kp->quarantined--;
		}
		fifo_pop(&kp->quar_q);
	}
}

int keys_refuse_fuse(struct meta *m, struct pool *pool, const char *name)
{
	index_assert_locked(m);
	struct kpool *kp = kpool_find(m, pool);

	if (!kp)
		return 0;
	keys_want_add(kp, index_name_hash(pool->id, name, strlen(name)), mono_ns());
	pthread_cond_signal(&m->keys->wake);
	return 1;
}

uint64_t keys_owed(struct meta *m, const struct pool *pool)
{
	index_assert_locked(m);
	const struct kpool *kp = kpool_find(m, pool);

	return kp ? kp->want.live : 0;
}

int keys_quarantine_freed(struct meta *m, struct pool *pool, uint64_t slot)
{
	index_assert_locked(m);
	struct kpool *kp = kpool_find(m, pool);

	if (!kp || slot >= kp->capacity)
		return 0;
	if (pool->shared && index_slot_quarantine(pool, slot) < 0)
		return 1; /* in it already (this node's HTTP drop) */
	keys_quarantine(m->keys, kp, slot, 1);
	keys_fence_freed(m, pool, kp); /* (one daemon's index only) */
	return 1;
}

void keys_quarantine(struct keys *k, struct kpool *kp, uint64_t slot, int page_slot)
{
	if (keys_fifo_push(&kp->quar_q, slot, mono_ns() + k->t.quarantine_ns, page_slot) == 0) {
		kp->quarantined++;
	} else {
		log_error("out of memory: slot %llu of pool %u stays used until remount",
		          (unsigned long long)slot, kp->pool_id);
	}
}

const struct meta_hooks keys_hooks = {
	.slot_freed = keys_quarantine_freed,
	.fuse_refused = keys_refuse_fuse,
	.owed = keys_owed,
};
