/*
 * keys.h - what the protocol's files share (private to them): keys.c
 * (pools, lookups, reserve, confirm, delete, clear), keys_slots.c (the
 * protocol's state, which starts the evictor thread; where reserved
 * slots come from and go back to: reservations, the quarantine),
 * keys_resv.c (the reservations outstanding, by slot), keys_want.c (the
 * keys refused a slot and owed one) and keys_evict.c
 * (drops, and what the evictor thread does). keys.c's header describes
 * the protocol's state. All of it under meta.lock.
 */
#ifndef PAGEFS_META_KEYS_H
#define PAGEFS_META_KEYS_H

#include "meta/index.h"
#include "meta/ops.h"
#include "meta/record.h"

#include <stdint.h>
#include <time.h>

/* ---- what the layers above the index call of the protocol ---- */

/* fence.c: at mount, holds the free slots of pools whose HTTP clients may
 * still write slots the daemon before reserved. 0 or -ENOMEM. */
int keys_fences_load(struct meta *m);

/* keys_slots.c: stops the protocol's evictor thread and frees its state. */
void keys_stop(struct meta *m);
/* A page's slot freed in a pool the protocol uses here (a pool with HTTP
 * state): 1 if it went into the quarantine (HTTP clients read slots they
 * cannot pin), else 0. One daemon's index: a FUSE operation's free, which
 * does not go back to the pool then. Shared index: any free the feed
 * reports (the slot is pinned; its grace period runs as usual), unless
 * this node's HTTP drop quarantined it already. meta.lock held. */
int keys_quarantine_freed(struct meta *m, struct pool *pool, uint64_t slot);
/* A FUSE writer of name found no free slot in pool: 1 if the protocol's
 * evictor makes room there (its evicted slots wait out the quarantine, so
 * none is handed to the writer at once): name is counted as a key owed a
 * slot (once, however often it retries) and the evictor is woken. 0: not
 * a protocol pool, evict as usual. meta.lock held. */
int keys_refuse_fuse(struct meta *m, struct pool *pool, const char *name);
/* The keys refused a slot in pool that are owed one (keys_want.c), 0 in
 * a pool the protocol does not use. meta.lock held. */
uint64_t keys_owed(struct meta *m, const struct pool *pool);

/* The hooks open.c installs in struct meta (index.h). */
extern const struct meta_hooks keys_hooks;

/* ---- private to meta/keys/ ---- */

#define SEC 1000000000LL

/* A run of n slots lo .. lo + n - 1 queued at once (one reservation
 * batch takes neighbouring slots, so a batch is mostly one entry). */
struct fifo_ent {
	uint64_t lo;
	int64_t at;    /* reservation: deadline; quarantine: release time */
	uint32_t n;    /* slots in the run, >= 1 */
	int page_slot; /* quarantine: a page's slot (else a reservation's) */
};

struct fifo {
	struct fifo_ent *v; /* a ring of cap entries, cap a power of two */
	size_t head, len, cap;
};

/* A reservation (keys_resv.c): its deadline (0: an empty entry), its key's
 * index_name_hash, which a confirm must name (a late confirm of an expired
 * reservation whose slot another key reserved since was taken for it),
 * and its slot (< META_SLOTS_MAX). */
struct resv {
	int64_t at;
	uint32_t key;
	uint32_t slot;
};

/* The reservations outstanding in a pool, by slot. */
struct resv_tab {
	struct resv *v; /* mask + 1 entries, NULL until a slot is reserved */
	size_t mask;
	size_t n;
};

/* A key refused a slot (keys_want.c): its index_name_hash and when it last
 * asked (monotonic ns; 0: an empty entry, -1: served). */
struct want {
	uint32_t key;
	int64_t at;
};

struct want_tab {
	struct want *v; /* mask + 1 entries, NULL until a key is refused */
	size_t mask;
	uint64_t live;  /* keys owed a slot: the evictor's demand */
	uint64_t used;  /* entries live or served (tombstones) */
	int64_t oldest; /* at most the earliest `at` of a live entry */
};

struct kpool {
	struct kpool *next;
	uint32_t pool_id;
	uint64_t capacity;    /* the pool's slots, as last seen */
	struct resv_tab resv; /* reservations outstanding */
	uint64_t top;         /* where the downward search for a free slot starts */
	uint64_t quarantined;
	struct want_tab want; /* keys refused a slot and owed one */
	struct fifo resv_q, quar_q;
	/* Shared index: the held chunk reservations are taken from (its
	 * index in pool.chunks when cur_ok), and whether the last lease found
	 * no chunk (then the evictor evicts, and leases are tried at most
	 * once a second). */
	uint64_t cur_chunk;
	size_t cur_idx;
	int cur_ok, full;
	int64_t lease_after;
	int64_t fence_until; /* wall-clock ns the index records (fence.c) */
	/* Confirms and releases ignored since the last line that said so
	 * (keys.c logs at most one of each a second), and when those lines
	 * were (monotonic ns; 0: never). */
	uint64_t ignored_confirms, ignored_releases;
	int64_t confirms_logged_at, releases_logged_at;
};

struct keys {
	pthread_t thread;
	pthread_cond_t wake; /* with meta.lock */
	int stop, started;
	struct meta_keys_tuning t;
	struct kpool *pools;
};

struct drop_list {
	struct rec **recs;
	size_t n, cap;
};

static inline int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * SEC + ts.tv_nsec;
}

static inline struct fifo_ent *fifo_peek(struct fifo *f)
{
	return f->len ? &f->v[f->head] : NULL;
}

static inline void fifo_pop(struct fifo *f)
{
	f->head = (f->head + 1) & (f->cap - 1);
	f->len--;
}

/* The i-th entry from the head (i < len). */
static inline const struct fifo_ent *fifo_at(const struct fifo *f, size_t i)
{
	return &f->v[(f->head + i) & (f->cap - 1)];
}

/* keys_slots.c */
int keys_fifo_push(struct fifo *f, uint64_t slot, int64_t at, int page_slot);
struct kpool *keys_pool_get(struct meta *m, struct pool *pool); /* NULL: out of memory */
int keys_slot_used(const struct pool *p, uint64_t i);           /* its bit is set */
uint64_t keys_held_at(const struct pool *p, size_t i);          /* shared: i-th held chunk */
uint64_t keys_held_free_bits(const struct pool *p, size_t i, uint64_t c);
/* Shared index: leases a chunk (meta.lock dropped while waiting). */
int keys_lease(struct meta *m, uint32_t pool_id, struct kpool *kp);
/* A free slot for a reservation, marked taken: 0, -ENOSPC or -ENOENT. */
int keys_take(struct meta *m, uint32_t pool_id, struct kpool *kp, uint64_t *slot);
void keys_resv_free(struct pool *p, struct kpool *kp, uint64_t slot); /* never named */
void keys_quarantine(struct keys *k, struct kpool *kp, uint64_t slot, int page_slot);
/* Ends the quarantines due by now (monotonic ns): their slots are free. */
void keys_quarantine_release(struct pool *p, struct kpool *kp, int64_t now);

/* keys_resv.c: the reservation on slot s (< capacity, else none): its
 * deadline (0: none); whether it is one for the key of hash key; set (0,
 * or -ENOMEM) or, with at 0, cleared (never fails); the table freed. */
int64_t keys_resv_get(const struct kpool *kp, uint64_t s);
int keys_resv_for(const struct kpool *kp, uint64_t s, uint32_t key);
int keys_resv_set(struct kpool *kp, uint64_t s, int64_t at, uint32_t key);
void keys_resv_tab_free(struct resv_tab *t);

/* fence.c (index of one daemon): records in the index, before a
 * reservation is handed out, until when its slot may be written; at a
 * clean stop clears that when no reservation is outstanding. meta.lock
 * held, dropped while the record is written. */
int keys_fence_ahead(struct meta *m, struct pool *pool, struct kpool *kp);
void keys_fence_clear(struct meta *m, struct kpool *kp);
/* A slot of pool went into the quarantine: recorded too (not waited for). */
void keys_fence_freed(struct meta *m, struct pool *pool, struct kpool *kp);

/* keys_want.c: a key refused a slot (asking again adds no demand), a
 * key that got one, and the keys that last asked before `before` dropped
 * (monotonic ns). */
void keys_want_add(struct kpool *kp, uint32_t key, int64_t now);
void keys_want_served(struct kpool *kp, uint32_t key);
void keys_want_expire(struct kpool *kp, int64_t before);

/* keys_evict.c: a drop takes p out of memory and queues its removal;
 * keys_drops_finish (without meta.lock) waits for them and quarantines
 * their slots. */
int keys_drop_page(struct meta *m, struct page *p, struct drop_list *dl, struct dropped **drops);
int keys_drops_finish(struct meta *m, struct drop_list *dl, struct dropped *drops);
void *keys_evictor_main(void *arg); /* the evictor thread (arg: the meta) */

#endif
