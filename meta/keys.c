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
#include <xxhash.h>

#define SEC 1000000000LL

struct fifo_ent {
	uint64_t slot;
	int64_t at; /* reservation: deadline; quarantine: release time */
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
	struct fifo resv_q, quar_q;
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

static int fifo_push(struct fifo *f, uint64_t slot, int64_t at)
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
	f->v[(f->head + f->len) % f->cap] = (struct fifo_ent){slot, at};
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

/* Frees a quarantined or reserved slot for reuse (FUSE pins respected). */
static void slot_back(struct pool *p, struct kpool *kp, uint64_t slot)
{
	slot_put(p, slot);
	if (slot > kp->top)
		kp->top = slot;
}

static void quarantine(struct keys *k, struct kpool *kp, uint64_t slot)
{
	if (fifo_push(&kp->quar_q, slot, mono_ns() + k->t.quarantine_ns) == 0)
		kp->quarantined++;
	else
		log_error("out of memory: slot %llu of pool %u stays used until remount",
		          (unsigned long long)slot, kp->pool_id);
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
	r->pool_id = p->pool->id;
	r->page_id = p->id;
	r->drop_slot = p->slot;
	r->handoff = 1; /* the slot goes to the quarantine, not back to the pool */
	r->waited = 1;
	page_unlink_committed(m, p);
	drops_add(drops, p);
	free(p);
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
		if (err < 0) {
			rc = rc ? rc : err; /* apply.c logged it; the slot stays taken */
			continue;
		}
		pthread_mutex_lock(&m->lock);
		struct pool *pool = pool_by_id(m, pool_id);
		struct kpool *kp = pool && m->keys ? kpool_get(m, pool) : NULL;
		if (kp)
			quarantine(m->keys, kp, slot);
		else if (pool)
			slot_put(pool, slot);
		pthread_mutex_unlock(&m->lock);
	}
	free(dl->recs);
	return rc;
}

/* ---- the evictor ---- */

static struct page *lru_victim(struct pool *pool)
{
	for (struct page *p = pool->lru_tail; p; p = p->lru_prev)
		if (!slot_pinned(pool, p->slot))
			return p;
	return NULL;
}

/* Expires reservations and quarantines, evicts for headroom. meta.lock
 * held; queues drops in dl. */
static void housekeep(struct meta *m, struct keys *k, struct drop_list *dl, struct dropped **drops)
{
	int64_t now = mono_ns();

	for (struct kpool *kp = k->pools; kp; kp = kp->next) {
		struct pool *pool = pool_by_id(m, kp->pool_id);
		struct fifo_ent *e;
		if (!pool)
			continue;
		while ((e = fifo_peek(&kp->quar_q)) && e->at <= now) {
			slot_back(pool, kp, e->slot);
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
				quarantine(k, kp, e->slot);
			}
			fifo_pop(&kp->resv_q);
		}
		uint64_t want = pool->capacity * k->t.headroom_pct / 100;
		want = want ? want : 1;
		uint64_t have = pool->capacity - pool->nused + kp->quarantined;
		for (; have < want; have++) {
			struct page *v = lru_victim(pool);
			if (!v || drop_page(m, v, dl, drops) < 0)
				break;
			pool->evictions++;
		}
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
		housekeep(m, k, &dl, &drops);
		if (dl.n || drops) {
			pthread_mutex_unlock(&m->lock);
			drops_finish(m, &dl, drops);
			pthread_mutex_lock(&m->lock);
			continue;
		}
		free(dl.recs);
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

int meta_keys_initialize(struct meta *m, int rank, const char *ns, uint64_t num_pages, int *differs,
                         char *msg, size_t msglen)
{
	struct meta_pool_info info;
	uint64_t slot_size;
	int rc;

	*differs = 0;
	if (m->shared) {
		/* Its slots come from the top of the whole pool: not yet from
		 * this node's chunks. */
		snprintf(msg, msglen,
		         "the key protocol does not serve a shared (PostgreSQL) index "
		         "yet; use an SQLite index");
		return -EOPNOTSUPP;
	}
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
		if (num_pages > UINT64_MAX / slot_size) {
			snprintf(msg, msglen, "num_pages %llu is too large",
			         (unsigned long long)num_pages);
			return -EINVAL;
		}
		rc = meta_pool_create(m, rank, ns, slot_size, num_pages * slot_size, &info);
		if (rc == 0)
			log_info("pool %d/%s initialized: %llu pages of %llu bytes", rank, ns,
			         (unsigned long long)num_pages, (unsigned long long)slot_size);
		if (rc == -EEXIST)
			rc = meta_pool_find(m, rank, ns, &info);
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

	if (rank < 0 || rank > META_RANK_MAX || meta_check_ns(ns) < 0 || m->shared)
		return -ENOENT; /* a shared index does not serve the key protocol yet */
	pthread_mutex_lock(&m->lock);
	struct pool *p = pool_by_name(m, rank, ns);
	if (p) {
		*pool_id = p->id;
		rc = kpool_get(m, p) ? 0 : -ENOMEM;
	}
	pthread_mutex_unlock(&m->lock);
	return rc;
}

/* Recency for a protocol lookup: memory at once, the store at most once a
 * minute per page (HTTP clients look keys up far more often than FUSE). */
static void keys_touch(struct meta *m, struct page *p, int64_t now)
{
	if (now - p->atime_saved_ns >= 60 * SEC) {
		page_touch(m, p);
		return;
	}
	p->atime_ns = now;
	lru_touch(p->pool, p);
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

static void find_keys(struct meta *m, uint32_t pool_id, const char *const *keys, size_t n,
                      struct page **out)
{
	const char *valid[KEYS_CHUNK];

	for (size_t i = 0; i < n; i++)
		valid[i] = meta_check_name(keys[i]) < 0 ? NULL : keys[i];
	table_find_names(&m->by_name, pool_id, valid, n, out);
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
				__builtin_prefetch(found[i]->lru_prev, 1);
			if (found[i] && found[i]->lru_next)
				__builtin_prefetch(found[i]->lru_next, 1);
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

/* Index of an earlier equal key in the batch, or -1 (open addressing). */
struct batch_set {
	int64_t *v;
	size_t mask;
};

static int64_t batch_seen(struct batch_set *b, const char *const *keys, size_t i)
{
	size_t h = (size_t)XXH3_64bits(keys[i], strlen(keys[i])) & b->mask;

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
		struct page *p = find_key(m, pool_id, keys[i]);
		int64_t prev;
		existed[i] = 0;
		slot[i] = -1;
		if (p) {
			existed[i] = 1;
			slot[i] = (int64_t)p->slot;
			keys_touch(m, p, now_ns());
			continue;
		}
		if ((prev = batch_seen(&bs, keys, i)) >= 0) {
			slot[i] = slot[prev]; /* one slot per key, even if repeated */
			continue;
		}
		uint64_t s;
		if (meta_check_name(keys[i]) < 0)
			continue; /* cannot become a page: -1, the writer skips it */
		if (take_top(pool, kp, &s) < 0) {
			short_of_slots = 1;
			continue;
		}
		if (resv_set(kp, s, deadline) < 0 || fifo_push(&kp->resv_q, s, deadline) < 0) {
			resv_set(kp, s, 0);
			slot_release(pool, s);
			continue;
		}
		slot[i] = (int64_t)s;
	}
	if (short_of_slots || pool->capacity - pool->nused + kp->quarantined <
	                              pool->capacity * m->keys->t.headroom_pct / 100)
		pthread_cond_signal(&m->keys->wake);
out:
	pthread_mutex_unlock(&m->lock);
	free(bs.v);
	return rc;
}

int meta_keys_confirm(struct meta *m, uint32_t pool_id, const char *const *keys,
                      const int64_t *slots, size_t n, const int64_t *release, size_t nrel,
                      size_t *ignored)
{
	struct drop_list dl = {0};
	struct dropped *drops = NULL;
	struct page **pages = calloc(n ? n : 1, sizeof(*pages));
	struct rec *r = rec_new(REC_BULK);
	struct bulk bulk = {pages, 0, NULL, NULL};
	int64_t now = now_ns();
	int rc = 0;

	*ignored = 0;
	if (!pages || !r) {
		free(pages);
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
		free(r);
		return rc;
	}
	for (size_t i = 0; i < n; i++) {
		int64_t s = slots[i];
		struct page *old = find_key(m, pool_id, keys[i]);
		if (old && (int64_t)old->slot == s) {
			keys_touch(m, old, now_ns()); /* confirmed again: nothing changes */
			continue;
		}
		if (s < 0 || !resv_get(kp, (uint64_t)s) || meta_check_name(keys[i]) < 0) {
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
		struct page *p = page_alloc(keys[i], strlen(keys[i]));
		/* A key confirmed over an older page of the same name: the old
		 * slot goes through the quarantine (readers may hold it). */
		if (!p || (old && drop_page(m, old, &dl, &drops) < 0)) {
			free(p);
			rc = -ENOMEM;
			break;
		}
		resv_set(kp, (uint64_t)s, 0);
		p->id = id_take(&m->page_ids);
		p->pool = pool;
		p->gen = m->epoch;
		p->slot = (uint64_t)s;
		p->length = pool->slot_size;
		p->has_checksum = 0; /* summed on its first read through pagefs */
		p->mtime_ns = p->atime_ns = p->atime_saved_ns = now;
		p->name_hash = name_hash(pool_id, p->name, p->name_len);
		pages[bulk.n++] = p;
	}
	for (size_t i = 0; rc == 0 && i < nrel; i++) {
		int64_t s = release[i];
		if (s >= 0 && resv_get(kp, (uint64_t)s)) {
			resv_set(kp, (uint64_t)s, 0);
			slot_back(pool, kp, (uint64_t)s);
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
		if (err < 0) {
			rc = rc ? rc : err;
			pthread_mutex_lock(&m->lock);
			if ((pool = pool_by_id(m, pool_id)))
				for (size_t i = 0; i < bulk.n; i++)
					slot_release(pool, pages[i]->slot);
			pthread_mutex_unlock(&m->lock);
			for (size_t i = 0; i < bulk.n; i++)
				free(pages[i]);
		}
	} else {
		free(r);
	}
	free(pages);
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
			quarantine(m->keys, kp, s); /* its writer may still be writing */
		}
	}
	pthread_mutex_unlock(&m->lock);
	int drc = drops_finish(m, &dl, drops);
	return rc ? rc : drc;
}
