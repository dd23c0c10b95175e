/*
 * keys.c - the mini_3fs_metadata_server protocol's operations on the
 * shared index: SGLang's HiCacheHF3FS asks for slots by key and writes the
 * bytes itself (3FS USRBIO) at slot * slot_size of the pool's data file.
 *
 * A key is a page name; a confirmed key is a committed page (length = slot
 * size, no checksum until pagefs reads it once), so it shows in the FUSE
 * tree and survives crashes like any page. What the protocol adds:
 *
 *  - Reservations: a slot handed to a writer before it has a name. Its
 *    bit is set in the pool's slot bitmap, so neither FUSE nor eviction
 *    can take it, and its deadline sits in resv (by slot, in chunks made
 *    on first use, so a pool of billions of slots costs memory only for
 *    the regions the protocol reserves in); a writer that never
 *    confirms loses it after reserve_timeout (through the quarantine: it
 *    may still be writing). New slots come from the top of the pool down,
 *    as the Python server pops its free list from the end.
 *  - Quarantine: HTTP readers read the data file directly and cannot be
 *    pinned, so a slot freed by delete, clear or eviction keeps its bit
 *    for quarantine_ns (> SGLang's 5 s client timeout) before slot_put()
 *    frees it (or makes it a zombie if a FUSE reader pins it).
 *  - An evictor thread keeps headroom_pct of every protocol pool free or
 *    in quarantine by evicting least recently used unpinned pages, so a
 *    reservation never waits for eviction; when none is free it gets -1.
 *
 * All state here is protected by meta.lock. Deletions leave memory at
 * once and are recorded with REC_DROP (handoff: apply does not free the
 * slot); their slots enter the quarantine only once the store has them.
 *
 * On a shared (PostgreSQL) index this node reserves only in the slot
 * chunks it holds (chunks.c), leasing more through the journal, highest
 * chunk first and from the top of each chunk down; a page slot in
 * quarantine is pinned (a zombie pin, which the heartbeat lists in
 * pagefs_pins, when another node holds its chunk), so it comes back only
 * after the quarantine AND its grace period; the evictor evicts only
 * pages of this node's chunks, and only once no chunk can be leased.
 */
#include "meta/internal.h"
#include "meta/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define SEC 1000000000LL

struct fifo_ent {
	uint64_t slot;
	int64_t at;    /* reservation: deadline; quarantine: release time */
	int page_slot; /* quarantine: a page's slot (else a reservation's) */
};

struct fifo {
	struct fifo_ent *v;
	size_t head, len, cap;
};

#define RESV_CHUNK 4096ULL /* slots per chunk of reservation deadlines */

struct kpool {
	struct kpool *next;
	uint32_t pool_id;
	uint64_t capacity; /* slots covered by resv */
	int64_t **resv;    /* chunks of RESV_CHUNK deadlines of the reservation
	                    * on a slot (0 = none); a NULL chunk holds none */
	uint64_t top;      /* where the downward search for a free slot starts */
	uint64_t quarantined;
	uint64_t refused; /* keys refused a slot since the evictor's last pass */
	struct fifo resv_q, quar_q;
	/* Shared index: the held chunk reservations are taken from (its
	 * index in pool.chunks when cur_ok), and whether the last lease found
	 * no chunk (then the evictor evicts, and leases are tried at most
	 * once a second). */
	uint64_t cur_chunk;
	size_t cur_idx;
	int cur_ok, full;
	int64_t lease_after;
};

struct keys {
	pthread_t thread;
	pthread_cond_t wake; /* with meta.lock */
	int stop, started;
	struct meta_keys_tuning t;
	struct kpool *pools;
};

/* ---- small helpers ---- */

static int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * SEC + ts.tv_nsec;
}

static int fifo_push(struct fifo *f, uint64_t slot, int64_t at, int page_slot)
{
	if (f->len == f->cap) {
		size_t n = f->cap ? f->cap * 2 : 64;
		struct fifo_ent *v = malloc(n * sizeof(*v));
		if (!v)
			return -ENOMEM;
		for (size_t i = 0; i < f->len; i++)
			v[i] = f->v[(f->head + i) % f->cap];
		free(f->v);
		f->v = v;
		f->head = 0;
		f->cap = n;
	}
	f->v[(f->head + f->len) % f->cap] = (struct fifo_ent){slot, at, page_slot};
	f->len++;
	return 0;
}

static struct fifo_ent *fifo_peek(struct fifo *f)
{
	return f->len ? &f->v[f->head] : NULL;
}

static void fifo_pop(struct fifo *f)
{
	f->head = (f->head + 1) % f->cap;
	f->len--;
}

static void *evictor_main(void *arg);

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
	if (!m->cfg.read_only && pthread_create(&k->thread, NULL, evictor_main, m) == 0)
		k->started = 1;
	return k;
}

void meta_keys_tune(struct meta *m, const struct meta_keys_tuning *t)
{
	pthread_mutex_lock(&m->lock);
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
	pthread_mutex_unlock(&m->lock);
}

/* The protocol's view of a pool (registered on first use). meta.lock held. */
static uint64_t resv_chunks(uint64_t slots)
{
	return (slots + RESV_CHUNK - 1) / RESV_CHUNK;
}

/* The deadline of the reservation on slot s, 0 if none. */
static int64_t resv_get(const struct kpool *kp, uint64_t s)
{
	const int64_t *c = s < kp->capacity ? kp->resv[s / RESV_CHUNK] : NULL;

	return c ? c[s % RESV_CHUNK] : 0;
}

/* Sets (at != 0) or clears the reservation deadline of slot s < capacity.
 * 0, or -ENOMEM when a chunk cannot be made (clearing never fails). */
static int resv_set(struct kpool *kp, uint64_t s, int64_t at)
{
	int64_t **c = &kp->resv[s / RESV_CHUNK];

	if (!*c && !at)
		return 0;
	if (!*c && !(*c = calloc(RESV_CHUNK, sizeof(**c))))
		return -ENOMEM;
	(*c)[s % RESV_CHUNK] = at;
	return 0;
}

static struct kpool *kpool_get(struct meta *m, struct pool *pool)
{
	struct keys *k = keys_get(m);
	struct kpool *kp;

	if (!k)
		return NULL;
	for (kp = k->pools; kp; kp = kp->next)
		if (kp->pool_id == pool->id)
			break;
	if (kp && kp->capacity < pool->capacity) {
		uint64_t had = resv_chunks(kp->capacity), need = resv_chunks(pool->capacity);
		int64_t **r = realloc(kp->resv, need * sizeof(*r));
		if (!r)
			return NULL;
		memset(r + had, 0, (need - had) * sizeof(*r));
		kp->resv = r;
		kp->capacity = pool->capacity;
	}
	if (kp)
		return kp;
	if (!(kp = calloc(1, sizeof(*kp))) ||
	    !(kp->resv = calloc(resv_chunks(pool->capacity), sizeof(*kp->resv)))) {
		free(kp);
		return NULL;
	}
	kp->pool_id = pool->id;
	kp->capacity = pool->capacity;
	kp->top = pool->capacity - 1;
	kp->next = k->pools;
	k->pools = kp;
	return kp;
}

static void kpool_free(struct kpool *kp)
{
	for (uint64_t c = 0; c < resv_chunks(kp->capacity); c++)
		free(kp->resv[c]);
	free(kp->resv);
	free(kp->resv_q.v);
	free(kp->quar_q.v);
	free(kp);
}

void keys_stop(struct meta *m)
{
	struct keys *k = m->keys;

	if (!k)
		return;
	pthread_mutex_lock(&m->lock);
	k->stop = 1;
	pthread_cond_broadcast(&k->wake);
	pthread_mutex_unlock(&m->lock);
	if (k->started)
		pthread_join(k->thread, NULL);
	while (k->pools) {
		struct kpool *kp = k->pools;
		k->pools = kp->next;
		kpool_free(kp);
	}
	pthread_cond_destroy(&k->wake);
	free(k);
	m->keys = NULL;
}

/* ---- slots ---- */

static int bit_set(const struct pool *p, uint64_t i)
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

	if (p->nused >= p->capacity)
		return -ENOSPC;
	if (kp->top >= p->capacity)
		kp->top = p->capacity - 1;
	s = scan_down(p, kp->top);
	if (s < 0 && kp->top < p->capacity - 1)
		s = scan_down(p, p->capacity - 1); /* slots freed above the hint */
	if (s < 0 || slot_mark(p, (uint64_t)s) < 0)
		return -ENOSPC;
	*slot = (uint64_t)s;
	kp->top = s > 0 ? (uint64_t)s - 1 : 0;
	return 0;
}

/* Shared index: the number of the i-th chunk this node holds (the one
 * place keys.c reads pool.chunks). */
static uint64_t held_at(const struct pool *p, size_t i)
{
	return p->chunks[i].chunk;
}

/* Shared index: the free slots of the i-th held chunk c (bit j = slot
 * c*k + j); none while it drains for a handover to another node. */
static uint64_t held_free_bits(const struct pool *p, size_t i, uint64_t c)
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

	if (kp->cur_ok && kp->cur_idx < p->nchunks && held_at(p, kp->cur_idx) == c)
		free_bits = held_free_bits(p, kp->cur_idx, c);
	if (!free_bits) {
		kp->cur_ok = 0;
		for (size_t i = 0; i < p->nchunks; i++) {
			uint64_t f = held_free_bits(p, i, held_at(p, i));
			if (f && (!kp->cur_ok || held_at(p, i) > c)) {
				c = held_at(p, i);
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
	if (slot_mark(p, *slot) < 0)
		return -ENOSPC;
	p->chunks[kp->cur_idx].inflight++; /* until chunk_done: no handover meanwhile */
	return 0;
}

/* Shared index: leases another chunk of the pool through the journal
 * (REC_LEASE, as FUSE writers do). meta.lock held on entry and return,
 * dropped while waiting: the caller looks the pool up again. */
static int keys_lease(struct meta *m, uint32_t pool_id, struct kpool *kp)
{
	struct pool *pool = pool_by_id(m, pool_id);
	struct rec *r;

	if (!pool)
		return -ENOENT;
	if (!(r = rec_new(REC_LEASE)))
		return -ENOMEM;
	r->pool_id = pool_id;
	r->chunk_slots = pool->chunk_slots;
	r->capacity_slots = pool->capacity;
	r->lease_from = pool->lease_from;
	r->ask = 1; /* the protocol always evicts: a full unheld chunk, or a handover */
	r->waited = 1;
	journal_submit(m, r);
	pthread_mutex_unlock(&m->lock);
	int rc = journal_wait(m, r);
	pthread_mutex_lock(&m->lock);
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
static int keys_take(struct meta *m, uint32_t pool_id, struct kpool *kp, uint64_t *slot)
{
	struct pool *pool = pool_by_id(m, pool_id);
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
		if (!(pool = pool_by_id(m, pool_id)))
			return -ENOENT;
		rc = take_top_held(pool, kp, slot);
		if (lrc != 0 && lrc != -EAGAIN)
			break; /* no chunk free anywhere (evict, or wait for a handover) */
	}
	return rc;
}

/* A reserved slot that no page ever named goes back to the pool. */
static void resv_free(struct pool *p, struct kpool *kp, uint64_t slot)
{
	if (p->shared) {
		chunk_done(p, slot);
		slot_release(p, slot); /* in this node's chunk; nobody else knows it */
		return;
	}
	slot_put(p, slot);
	if (slot > kp->top)
		kp->top = slot;
}

/* A quarantined slot leaves the quarantine. A page's slot on a shared
 * index loses the quarantine's pin: its grace period (chunks.c) or, in
 * another node's chunk, that node's frees it. */
static void quarantine_end(struct pool *p, struct kpool *kp, const struct fifo_ent *e)
{
	if (!e->page_slot || !p->shared) {
		resv_free(p, kp, e->slot);
		return;
	}
	slot_unpin(p, e->slot);
}

static void quarantine(struct keys *k, struct kpool *kp, uint64_t slot, int page_slot)
{
	if (fifo_push(&kp->quar_q, slot, mono_ns() + k->t.quarantine_ns, page_slot) == 0) {
		kp->quarantined++;
	} else {
		log_error("out of memory: slot %llu of pool %u stays used until remount",
		          (unsigned long long)slot, kp->pool_id);
	}
}

/* ---- drops (delete, clear, eviction) ---- */

struct drop_list {
	struct rec **recs;
	size_t n, cap;
};

/*
 * Removes committed page p from memory and queues its durable removal;
 * the slot stays taken until drops_finish() puts it in quarantine.
 * meta.lock held.
 */
static int drop_page(struct meta *m, struct page *p, struct drop_list *dl, struct dropped **drops)
{
	struct pool *pool = page_pool(p);
	struct rec *r;

	if (dl->n == dl->cap) {
		size_t n = dl->cap ? dl->cap * 2 : 16;
		struct rec **v = realloc(dl->recs, n * sizeof(*v));
		if (!v)
			return -ENOMEM;
		dl->recs = v;
		dl->cap = n;
	}
	if (!(r = rec_new(REC_DROP)))
		return -ENOMEM;
	rec_set_drop(r, p);
	r->handoff = 1; /* the slot goes to the quarantine, not back to the pool */
	r->waited = 1;
	if (pool->shared) {
		/* HTTP readers may read the slot: pinned from now on through
		 * the quarantine. In another node's chunk the pin is a zombie
		 * (its page is gone), listed in pagefs_pins by the heartbeat
		 * that acknowledges the drop, so the holder waits for it. */
		slot_pin(pool, p->slot);
		if (!chunk_owned(pool, chunk_of(pool, p->slot)))
			slot_put(pool, p->slot); /* pinned: only marks it a zombie */
	}
	page_unlink_committed(m, p);
	drops_add(drops, p);
	page_free(p);
	journal_submit(m, r);
	dl->recs[dl->n++] = r;
	return 0;
}

/* Waits for the drops to be durable and quarantines their slots. Called
 * without meta.lock; returns the first error. */
static int drops_finish(struct meta *m, struct drop_list *dl, struct dropped *drops)
{
	int rc = 0;

	drops_notify(m, drops);
	for (size_t i = 0; i < dl->n; i++) {
		struct rec *r = dl->recs[i];
		uint32_t pool_id = r->pool_id;
		uint64_t slot = r->drop_slot;
		int err = journal_wait(m, r);
		pthread_mutex_lock(&m->lock);
		struct pool *pool = pool_by_id(m, pool_id);
		struct kpool *kp = pool && m->keys ? kpool_get(m, pool) : NULL;
		if (err < 0) {
			rc = rc ? rc : err; /* apply.c logged it; the slot stays taken */
			if (pool && pool->shared)
				slot_unpin(pool, slot);
		} else if (kp) {
			quarantine(m->keys, kp, slot, 1);
		} else if (pool && pool->shared) {
			slot_unpin(pool, slot);
		} else if (pool) {
			slot_put(pool, slot);
		}
		pthread_mutex_unlock(&m->lock);
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
	uint64_t total =
		pool->shared ? (pool->capacity + pool->chunk_slots - 1) / pool->chunk_slots : 0;
	uint8_t *held = total ? calloc((size_t)(total + 7) / 8, 1) : NULL;

	for (size_t i = 0; held && i < pool->nchunks; i++)
		if (held_at(pool, i) < total)
			held[held_at(pool, i) / 8] |= (uint8_t)(1u << (held_at(pool, i) % 8));
	for (struct page *p = pool->lru_tail, *prev; p && n; p = prev) {
		uint64_t c = pool->shared ? chunk_of(pool, p->slot) : 0;
		prev = page_at(p->lru_prev);
		if (pool->shared ? slot_pinned_anywhere(m, pool, p->slot)
		                 : slot_pinned(pool, p->slot))
			continue; /* a reader here, or on another node, has it open */
		if (pool->shared &&
		    (held ? c >= total || !((held[c / 8] >> (c % 8)) & 1) : !chunk_owned(pool, c)))
			continue; /* another node's page: that node evicts it */
		if (drop_page(m, p, dl, drops) < 0)
			break;
		pool->evictions++;
		n--;
	}
	free(held);
}

/* Shared index: the headroom counts the free slots of the chunks this
 * node holds, those in their grace period and every slot in this node's
 * quarantine (expired reservations, and the pages it evicted or deleted,
 * which come free when it ends), against headroom_pct of the held slots
 * (and leases a chunk ahead). Below it the evictor leases another chunk;
 * only when none is left does it evict, the shortfall plus one page for
 * every key refused a slot since the last pass: writers that outrun the
 * headroom get -1, and what they asked for comes free after the
 * quarantine. (Counting only the reservations in the quarantine made
 * every pass, 10 a second, evict again what the quarantine still held:
 * an idle full pool lost its pages one a pass until the first quarantine
 * ended, 6 s.) */
static void headroom_shared(struct meta *m, struct keys *k, struct pool *pool, struct kpool *kp,
                            int64_t now, uint32_t *lease, struct drop_list *dl,
                            struct dropped **drops)
{
	uint64_t free_now = 0, held = (uint64_t)pool->nchunks * pool->chunk_slots;

	for (size_t i = 0; i < pool->nchunks; i++)
		free_now +=
			(uint64_t)__builtin_popcountll(held_free_bits(pool, i, held_at(pool, i)));
	uint64_t want = held * k->t.headroom_pct / 100;
	want = want ? want : 1;
	uint64_t have = free_now + pool->ngrace + kp->quarantined;
	/* Leases run ahead by a chunk, so that reservations seldom wait for
	 * one; eviction keeps only the headroom. */
	uint64_t ahead = want > pool->chunk_slots ? want : pool->chunk_slots;
	if (have < ahead && now >= kp->lease_after) {
		if (!*lease)
			*lease = kp->pool_id;
	} else if ((have < want || kp->refused) && kp->full) {
		evict(m, pool, (have < want ? want - have : 0) + kp->refused, dl, drops);
	}
}

/* Expires reservations and quarantines, evicts for headroom. meta.lock
 * held; queues drops in dl; *lease: a shared pool that needs a chunk. */
static void housekeep(struct meta *m, struct keys *k, struct drop_list *dl, struct dropped **drops,
                      uint32_t *lease)
{
	int64_t now = mono_ns();

	for (struct kpool *kp = k->pools; kp; kp = kp->next) {
		struct pool *pool = pool_by_id(m, kp->pool_id);
		struct fifo_ent *e;
		if (!pool)
			continue;
		while ((e = fifo_peek(&kp->quar_q)) && e->at <= now) {
			quarantine_end(pool, kp, e);
			kp->quarantined--;
			fifo_pop(&kp->quar_q);
		}
		while ((e = fifo_peek(&kp->resv_q)) && e->at <= now) {
			if (resv_get(kp, e->slot) == e->at) {
				log_warn(
					"pool %u/%s: reservation of slot %llu was never confirmed; "
					"it returns to the pool after the quarantine",
					pool->rank, pool->ns, (unsigned long long)e->slot);
				resv_set(kp, e->slot, 0);
				quarantine(k, kp, e->slot, 0);
			}
			fifo_pop(&kp->resv_q);
		}
		if (pool->shared) {
			headroom_shared(m, k, pool, kp, now, lease, dl, drops);
			kp->refused = 0;
			continue;
		}
		uint64_t want = pool->capacity * k->t.headroom_pct / 100;
		want = want ? want : 1;
		uint64_t have = pool->capacity - pool->nused + kp->quarantined;
		uint64_t n =
			(have < want ? want - have : 0) + kp->refused; /* (as headroom_shared) */
		kp->refused = 0;
		if (n)
			evict(m, pool, n, dl, drops);
	}
}

static void *evictor_main(void *arg)
{
	struct meta *m = arg;
	struct keys *k = m->keys;

	pthread_mutex_lock(&m->lock);
	while (!k->stop) {
		struct drop_list dl = {0};
		struct dropped *drops = NULL;
		uint32_t lease = 0;
		housekeep(m, k, &dl, &drops, &lease);
		if (dl.n || drops) {
			pthread_mutex_unlock(&m->lock);
			drops_finish(m, &dl, drops);
			pthread_mutex_lock(&m->lock);
			continue;
		}
		free(dl.recs);
		if (lease) {
			struct pool *pool = pool_by_id(m, lease);
			struct kpool *kp = pool ? kpool_get(m, pool) : NULL;
			if (kp) {
				keys_lease(m, lease, kp);
				continue;
			}
		}
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += 100 * 1000 * 1000;
		if (ts.tv_nsec >= SEC) {
			ts.tv_sec++;
			ts.tv_nsec -= SEC;
		}
		pthread_cond_timedwait(&k->wake, &m->lock, &ts);
	}
	pthread_mutex_unlock(&m->lock);
	return NULL;
}

/* ---- pools ---- */

uint64_t meta_page_size_of(uint64_t size, uint64_t n)
{
	if (n == 0 || size < n)
		return 0;
	if (size % n == 0)
		return size / n;
	uint64_t hi = size / n, lo = size / (n + 1) + 1;
	return lo == hi ? hi : 0;
}

/* Slot size for a new pool of num_pages: the data file's, when it exists. */
static int size_from_file(struct meta *m, int rank, const char *ns, uint64_t num_pages,
                          uint64_t *slot_size, char *msg, size_t msglen)
{
	char path[4096];
	struct stat st;

	*slot_size = 0;
	if (data_path(m, rank, ns, path, sizeof(path)) < 0 || stat(path, &st) < 0 ||
	    st.st_size <= 0)
		return 0;
	uint64_t size = (uint64_t)st.st_size, def = m->cfg.default_slot_size;
	if (def && size / def == num_pages)
		*slot_size = def;
	else if (!(*slot_size = meta_page_size_of(size, num_pages))) {
		snprintf(msg, msglen,
		         "data file %s has %llu bytes: num_pages %llu does not tell the page size, "
		         "and %llu-byte pages (the mount's --page-size) give %llu pages; create "
		         "the pool with 'pagefs pool create' or fix num_pages",
		         path, (unsigned long long)size, (unsigned long long)num_pages,
		         (unsigned long long)def, (unsigned long long)(def ? size / def : 0));
		return -EMSGSIZE;
	}
	return 0;
}

/* Sleeps 20 ms with no lock held, waking the sync thread. */
static void nap(struct meta *m)
{
	struct timespec ts = {0, 20 * 1000000L};

	sync_kick(m);
	nanosleep(&ts, NULL);
}

/*
 * Creates the pool, or finds it when it exists already. On a shared index
 * another node may create it at the same moment: the loser's row is
 * refused (UNIQUE(rank, ns): -EEXIST) and the winner's pool reaches this
 * node through the change feed, which is waited for (up to 5 s); pool ids
 * come in blocks (-EAGAIN until the sync thread fetched the next).
 */
static int create_pool(struct meta *m, int rank, const char *ns, uint64_t slot_size, uint64_t bytes,
                       struct meta_pool_info *info)
{
	int rc = -EAGAIN;

	for (int waited = 0; waited <= 5000; waited += 20) {
		if (rc == -EAGAIN)
			rc = meta_pool_create(m, rank, ns, slot_size, bytes, info);
		if (rc == -EEXIST)
			rc = meta_pool_find(m, rank, ns, info) == 0 ? 0 : -EEXIST;
		if ((rc != -EEXIST && rc != -EAGAIN) || !m->shared)
			break;
		nap(m);
	}
	return rc;
}

int meta_keys_initialize(struct meta *m, int rank, const char *ns, uint64_t num_pages, int *differs,
                         char *msg, size_t msglen)
{
	struct meta_pool_info info;
	uint64_t slot_size;
	int rc;

	*differs = 0;
	if (rank < 0 || rank > META_RANK_MAX || meta_check_ns(ns) < 0 || num_pages == 0) {
		snprintf(msg, msglen,
		         "rank must be 0..%d, namespace [a-z0-9_]{1,64}, num_pages > 0",
		         META_RANK_MAX);
		return -EINVAL;
	}
	rc = meta_pool_find(m, rank, ns, &info);
	if (rc == -ENOENT) {
		if ((rc = size_from_file(m, rank, ns, num_pages, &slot_size, msg, msglen)) < 0)
			return rc;
		slot_size = slot_size ? slot_size : m->cfg.default_slot_size;
		if (meta_check_geometry(slot_size, num_pages) < 0) { /* (no overflow below) */
			snprintf(msg, msglen,
			         "num_pages %llu of %llu bytes is too large: at most %llu pages of "
			         "at most %llu bytes",
			         (unsigned long long)num_pages, (unsigned long long)slot_size,
			         (unsigned long long)META_SLOTS_MAX,
			         (unsigned long long)META_SLOT_SIZE_MAX);
			return -EINVAL;
		}
		rc = create_pool(m, rank, ns, slot_size, num_pages * slot_size, &info);
		if (rc == 0)
			log_info("pool %d/%s initialized: %llu pages of %llu bytes", rank, ns,
			         (unsigned long long)num_pages, (unsigned long long)slot_size);
		if (rc == -EFBIG)
			snprintf(msg, msglen,
			         "num_pages %llu of %llu bytes make a data file larger than the "
			         "backing filesystem holds: ask for fewer pages",
			         (unsigned long long)num_pages, (unsigned long long)slot_size);
		else if (rc < 0)
			snprintf(msg, msglen, "cannot create pool %d/%s: %s", rank, ns,
			         strerror(-rc));
		if (rc < 0)
			return rc;
	} else if (rc == 0 && info.capacity != num_pages) {
		*differs = 1;
		log_warn("rank %d namespace '%s' initialized with different num_pages. Existing: "
		         "%llu, New: %llu (kept; resize with 'pagefs pool create')",
		         rank, ns, (unsigned long long)info.capacity,
		         (unsigned long long)num_pages);
	}
	pthread_mutex_lock(&m->lock);
	struct pool *pool = pool_by_id(m, info.id);
	if (pool && !kpool_get(m, pool))
		rc = -ENOMEM;
	pthread_mutex_unlock(&m->lock);
	return rc;
}

int meta_keys_pool(struct meta *m, int rank, const char *ns, uint32_t *pool_id)
{
	int rc = -ENOENT;

	if (rank < 0 || rank > META_RANK_MAX || meta_check_ns(ns) < 0)
		return -ENOENT;
	pthread_mutex_lock(&m->lock);
	struct pool *p = pool_by_name(m, rank, ns);
	if (p) {
		*pool_id = p->id;
		rc = kpool_get(m, p) ? 0 : -ENOMEM;
	}
	pthread_mutex_unlock(&m->lock);
	return rc;
}

/* Recency for a protocol lookup: memory at once, the store when the use
 * is in another minute than the one before (HTTP clients look keys up far
 * more often than FUSE): at most once a minute per page. */
static void keys_touch(struct meta *m, struct page *p, int64_t now)
{
	if (now / (60 * SEC) != p->atime_ns / (60 * SEC)) {
		page_touch(m, p);
		return;
	}
	p->atime_ns = now;
	lru_touch(page_pool(p), p);
}

/* The committed page named key, if the name is valid. meta.lock held. */
static struct page *find_key(struct meta *m, uint32_t pool_id, const char *key)
{
	if (meta_check_name(key) < 0)
		return NULL;
	return table_find_name(&m->by_name, pool_id, key, NULL);
}

/* The committed pages named keys[0..n), n <= KEYS_CHUNK, NULL where none
 * or the name is invalid. meta.lock held. */
#define KEYS_CHUNK 128

/* For loops that look keys up one at a time and may drop meta.lock in
 * between (reserve, confirm): at each KEYS_CHUNK-th key, the next chunk's
 * names checked (valid: the key, or NULL), measured and hashed, with their
 * table lines on the way to the cache. Entry i of keys is entry
 * i % KEYS_CHUNK here. */
struct keys_ahead {
	const char *valid[KEYS_CHUNK];
	size_t len[KEYS_CHUNK];
	uint32_t h[KEYS_CHUNK];
};

static void keys_ahead(struct meta *m, uint32_t pool_id, const char *const *keys, size_t n,
                       size_t i, struct keys_ahead *a)
{
	if (i % KEYS_CHUNK != 0)
		return;
	size_t g = n - i < KEYS_CHUNK ? n - i : KEYS_CHUNK;
	for (size_t j = 0; j < g; j++)
		a->valid[j] = meta_check_name_len(keys[i + j], &a->len[j]) < 0 ? NULL : keys[i + j];
	table_prefetch_names(&m->by_name, pool_id, a->valid, a->len, g, a->h);
}

/* find_key for keys[i] after keys_ahead(..., i, a). */
static struct page *find_key_ahead(struct meta *m, uint32_t pool_id, const struct keys_ahead *a,
                                   size_t i)
{
	size_t j = i % KEYS_CHUNK;
	if (!a->valid[j])
		return NULL;
	return table_find_hashed(&m->by_name, a->h[j], pool_id, a->valid[j], a->len[j]);
}

static void find_keys(struct meta *m, uint32_t pool_id, const char *const *keys, size_t n,
                      struct page **out)
{
	const char *valid[KEYS_CHUNK];
	size_t len[KEYS_CHUNK];

	for (size_t i = 0; i < n; i++)
		valid[i] = meta_check_name_len(keys[i], &len[i]) < 0 ? NULL : keys[i];
	table_find_names(&m->by_name, pool_id, valid, len, n, out);
}

int meta_keys_exists(struct meta *m, uint32_t pool_id, const char *const *keys, size_t n,
                     uint8_t *out)
{
	struct page *found[KEYS_CHUNK];

	pthread_mutex_lock(&m->lock);
	if (!pool_by_id(m, pool_id)) {
		pthread_mutex_unlock(&m->lock);
		return -ENOENT;
	}
	for (size_t base = 0; base < n; base += KEYS_CHUNK) {
		size_t g = n - base < KEYS_CHUNK ? n - base : KEYS_CHUNK;
		find_keys(m, pool_id, keys + base, g, found);
		for (size_t i = 0; i < g; i++)
			out[base + i] = found[i] != NULL;
	}
	pthread_mutex_unlock(&m->lock);
	return 0;
}

int meta_keys_get(struct meta *m, uint32_t pool_id, const char *const *keys, size_t n,
                  int64_t *slot)
{
	struct page *found[KEYS_CHUNK];
	int64_t now = now_ns();

	pthread_mutex_lock(&m->lock);
	struct pool *pool = pool_by_id(m, pool_id);
	if (!pool) {
		pthread_mutex_unlock(&m->lock);
		return -ENOENT;
	}
	for (size_t base = 0; base < n; base += KEYS_CHUNK) {
		size_t g = n - base < KEYS_CHUNK ? n - base : KEYS_CHUNK;
		find_keys(m, pool_id, keys + base, g, found);
		/* the LRU neighbours each touch relinks: their misses overlap too */
		for (size_t i = 0; i < g; i++) {
			if (found[i] && found[i]->lru_prev)
				__builtin_prefetch(page_at(found[i]->lru_prev), 1);
			if (found[i] && found[i]->lru_next)
				__builtin_prefetch(page_at(found[i]->lru_next), 1);
		}
		for (size_t i = 0; i < g; i++) {
			struct page *p = found[i];
			slot[base + i] = p ? (int64_t)p->slot : -1;
			if (p) {
				keys_touch(m, p, now);
				pool->hits++;
			} else {
				pool->misses++;
			}
		}
	}
	pthread_mutex_unlock(&m->lock);
	return 0;
}

/* Index of an earlier equal key in the batch, or -1 (open addressing by
 * the key's name hash h). */
struct batch_set {
	int64_t *v;
	size_t mask;
};

static int64_t batch_seen(struct batch_set *b, const char *const *keys, size_t i, uint64_t hash)
{
	size_t h = (size_t)hash & b->mask;

	for (;; h = (h + 1) & b->mask) {
		if (b->v[h] < 0) {
			b->v[h] = (int64_t)i;
			return -1;
		}
		if (strcmp(keys[b->v[h]], keys[i]) == 0)
			return b->v[h];
	}
}

int meta_keys_reserve(struct meta *m, uint32_t pool_id, const char *const *keys, size_t n,
                      uint8_t *existed, int64_t *slot)
{
	struct batch_set bs = {0};
	struct keys_ahead ka;
	size_t sz = 16;
	int rc = 0, short_of_slots = 0;

	while (sz < 2 * n)
		sz *= 2;
	if (!(bs.v = malloc(sz * sizeof(*bs.v))))
		return -ENOMEM;
	memset(bs.v, 0xff, sz * sizeof(*bs.v));
	bs.mask = sz - 1;
	pthread_mutex_lock(&m->lock);
	struct pool *pool = pool_by_id(m, pool_id);
	struct kpool *kp = pool ? kpool_get(m, pool) : NULL;
	if (!kp || m->cfg.read_only) {
		rc = !pool ? -ENOENT : m->cfg.read_only ? -EROFS : -ENOMEM;
		goto out;
	}
	int64_t deadline = mono_ns() + m->keys->t.reserve_timeout_ns;
	for (size_t i = 0; i < n; i++) {
		existed[i] = 0;
		slot[i] = -1;
	}
	for (size_t i = 0; i < n; i++) {
		keys_ahead(m, pool_id, keys, n, i, &ka); /* (keys_take may drop meta.lock) */
		struct page *p = find_key_ahead(m, pool_id, &ka, i);
		int64_t prev;
		if (p) {
			existed[i] = 1;
			slot[i] = (int64_t)p->slot;
			keys_touch(m, p, now_ns());
			continue;
		}
		if ((prev = batch_seen(&bs, keys, i, ka.h[i % KEYS_CHUNK])) >= 0) {
			slot[i] = slot[prev]; /* one slot per key, even if repeated */
			continue;
		}
		uint64_t s;
		if (!ka.valid[i % KEYS_CHUNK])
			continue; /* cannot become a page: -1, the writer skips it */
		int trc = keys_take(m, pool_id, kp, &s);
		if (!(pool = pool_by_id(m, pool_id)))
			break; /* removed while a lease was waited for: -1 for the rest */
		if (trc < 0) {
			short_of_slots = 1;
			kp->refused++;
			continue;
		}
		if (resv_set(kp, s, deadline) < 0 || fifo_push(&kp->resv_q, s, deadline, 0) < 0) {
			resv_set(kp, s, 0);
			resv_free(pool, kp, s);
			continue;
		}
		slot[i] = (int64_t)s;
	}
	if (!pool) {
		rc = -ENOENT; /* its reservations expire */
		goto out;
	}
	if (short_of_slots || pool->capacity - pool->nused + kp->quarantined <
	                              pool->capacity * m->keys->t.headroom_pct / 100)
		pthread_cond_signal(&m->keys->wake);
out:
	pthread_mutex_unlock(&m->lock);
	free(bs.v);
	return rc;
}

/* Shared index: page ids come in blocks from the index's sequence; when
 * this node's ran out, waits (up to 2 s, meta.lock dropped) for the sync
 * thread to fetch the next. 0 once there are ids, else -EAGAIN. */
static int ids_wait(struct meta *m)
{
	for (int waited = 0; id_left(&m->page_ids) == 0; waited += 20) {
		if (waited >= 2000)
			return -EAGAIN;
		pthread_mutex_unlock(&m->lock);
		nap(m);
		pthread_mutex_lock(&m->lock);
	}
	return 0;
}

int meta_keys_confirm(struct meta *m, uint32_t pool_id, const char *const *keys,
                      const int64_t *slots, size_t n, const int64_t *release, size_t nrel,
                      size_t *ignored)
{
	struct drop_list dl = {0};
	struct dropped *drops = NULL;
	struct keys_ahead ka;
	struct page **pages = calloc(n ? n : 1, sizeof(*pages));
	uint64_t *done = calloc(n ? n : 1, sizeof(*done)); /* slots of pages[] */
	struct rec *r = rec_new(REC_BULK);
	struct bulk bulk = {.pages = pages};
	int64_t now = now_ns();
	int rc = 0, shared = m->shared;

	*ignored = 0;
	if (!pages || !done || !r) {
		free(pages);
		free(done);
		free(r);
		return -ENOMEM;
	}
	pthread_mutex_lock(&m->lock);
	struct pool *pool = pool_by_id(m, pool_id);
	struct kpool *kp = pool ? kpool_get(m, pool) : NULL;
	if (!kp || m->cfg.read_only) {
		rc = !pool ? -ENOENT : m->cfg.read_only ? -EROFS : -ENOMEM;
		pthread_mutex_unlock(&m->lock);
		free(pages);
		free(done);
		free(r);
		return rc;
	}
	for (size_t i = 0; i < n; i++) {
		int64_t s = slots[i];
		if (id_left(&m->page_ids) == 0 && shared) {
			/* (Reserved slots keep the pool from being removed meanwhile.) */
			rc = ids_wait(m);
			if (rc == 0 && !(pool = pool_by_id(m, pool_id)))
				rc = -ENOENT;
			if (rc < 0)
				break;
		}
		keys_ahead(m, pool_id, keys, n, i, &ka); /* (ids_wait drops meta.lock) */
		struct page *old = find_key_ahead(m, pool_id, &ka, i);
		if (old && (int64_t)old->slot == s) {
			keys_touch(m, old, now_ns()); /* confirmed again: nothing changes */
			continue;
		}
		if (s < 0 || !resv_get(kp, (uint64_t)s) || !ka.valid[i % KEYS_CHUNK]) {
			log_warn("pool %u/%s: confirm of key '%.64s' at page %lld ignored: that "
			         "page is not reserved (expired, never reserved, or taken)",
			         pool->rank, pool->ns, keys[i], (long long)s);
			(*ignored)++;
			continue;
		}
		if (id_left(&m->page_ids) == 0) {
			rc = -EAGAIN; /* a shared index hands out ids in blocks */
			break;
		}
		struct page *p = page_alloc(keys[i], ka.len[i % KEYS_CHUNK]);
		/* A key confirmed over an older page of the same name: the old
		 * slot goes through the quarantine (readers may hold it). */
		if (!p || (old && drop_page(m, old, &dl, &drops) < 0)) {
			page_free(p);
			rc = -ENOMEM;
			break;
		}
		resv_set(kp, (uint64_t)s, 0);
		p->id = id_take(&m->page_ids);
		page_set_pool(p, pool);
		p->gen = m->epoch;
		p->slot = (uint64_t)s;
		p->length = pool->slot_size;
		p->has_checksum = 0; /* summed on its first read through pagefs */
		p->mtime_ns = p->atime_ns = now;
		p->name_hash = ka.h[i % KEYS_CHUNK];
		done[bulk.n] = p->slot;
		pages[bulk.n++] = p;
	}
	for (size_t i = 0; rc == 0 && i < nrel; i++) {
		int64_t s = release[i];
		if (s >= 0 && resv_get(kp, (uint64_t)s)) {
			resv_set(kp, (uint64_t)s, 0);
			resv_free(pool, kp, (uint64_t)s);
		} else if (s >= 0 && (uint64_t)s < kp->capacity && bit_set(pool, (uint64_t)s)) {
			log_warn("pool %u/%s: release of page %lld ignored: it is in use",
			         pool->rank, pool->ns, (long long)s);
			(*ignored)++;
		}
	}
	/* All confirmed keys in one record: one savepoint, one apply. */
	if (bulk.n) {
		r->bulk = &bulk;
		r->waited = 1;
		journal_submit(m, r);
	}
	pthread_mutex_unlock(&m->lock);

	int drc = drops_finish(m, &dl, drops);
	if (bulk.n) {
		int err = journal_wait(m, r);
		if (err == -EEXIST && shared && (r = rec_new(REC_BULK))) {
			/* Another node committed one of these names at the same
			 * moment: its row is visible now, and a second try
			 * replaces it, as a later confirm would. */
			r->bulk = &bulk;
			r->waited = 1;
			journal_submit(m, r);
			err = journal_wait(m, r);
		}
		if (err < 0) {
			rc = rc ? rc : err;
			pthread_mutex_lock(&m->lock);
			if ((pool = pool_by_id(m, pool_id)))
				for (size_t i = 0; i < bulk.n; i++)
					slot_release(pool, pages[i]->slot);
			pthread_mutex_unlock(&m->lock);
			for (size_t i = 0; i < bulk.n; i++)
				page_free(pages[i]);
		}
		/* Committed or given back: the slots are no writer's any more,
		 * their chunks may be handed over (pages[] may be gone: done[]). */
		pthread_mutex_lock(&m->lock);
		if (shared && (pool = pool_by_id(m, pool_id)))
			for (size_t i = 0; i < bulk.n; i++)
				chunk_done(pool, done[i]);
		pthread_mutex_unlock(&m->lock);
	} else {
		free(r);
	}
	free(pages);
	free(done);
	return rc ? rc : drc;
}

int meta_keys_delete(struct meta *m, uint32_t pool_id, const char *const *keys, size_t n,
                     size_t *deleted)
{
	struct drop_list dl = {0};
	struct dropped *drops = NULL;
	int rc = 0;

	*deleted = 0;
	pthread_mutex_lock(&m->lock);
	struct pool *pool = pool_by_id(m, pool_id);
	if (!pool || m->cfg.read_only) {
		pthread_mutex_unlock(&m->lock);
		return !pool ? -ENOENT : -EROFS;
	}
	if (!kpool_get(m, pool))
		rc = -ENOMEM;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		struct page *p = find_key(m, pool_id, keys[i]);
		if (p && (rc = drop_page(m, p, &dl, &drops)) == 0)
			(*deleted)++;
	}
	pthread_mutex_unlock(&m->lock);
	int drc = drops_finish(m, &dl, drops);
	return rc ? rc : drc;
}

int meta_keys_clear(struct meta *m, uint32_t pool_id)
{
	struct drop_list dl = {0};
	struct dropped *drops = NULL;
	int rc = 0;

	pthread_mutex_lock(&m->lock);
	struct pool *pool = pool_by_id(m, pool_id);
	struct kpool *kp = pool ? kpool_get(m, pool) : NULL;
	if (!kp || m->cfg.read_only) {
		pthread_mutex_unlock(&m->lock);
		return !pool ? -ENOENT : m->cfg.read_only ? -EROFS : -ENOMEM;
	}
	while (rc == 0 && pool->lru_tail)
		rc = drop_page(m, pool->lru_tail, &dl, &drops);
	for (uint64_t s = 0; s < kp->capacity; s++) {
		if (!kp->resv[s / RESV_CHUNK]) {
			s |= RESV_CHUNK - 1; /* a chunk without reservations */
			continue;
		}
		if (resv_get(kp, s)) {
			resv_set(kp, s, 0);
			quarantine(m->keys, kp, s, 0); /* its writer may still be writing */
		}
	}
	pthread_mutex_unlock(&m->lock);
	int drc = drops_finish(m, &dl, drops);
	return rc ? rc : drc;
}
