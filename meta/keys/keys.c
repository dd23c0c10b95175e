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
 *    for quarantine_ns (> SGLang's 5 s client timeout) before index_slot_put()
 *    frees it (or makes it a zombie if a FUSE reader pins it).
 *  - An evictor thread keeps headroom_pct of every protocol pool free or
 *    in quarantine by evicting least recently used unpinned pages, so a
 *    reservation seldom waits for eviction; when none is free it gets -1,
 *    and the key is owed a slot (keys_want.c) that the evictor frees once,
 *    however often the key asks again (keys_evict.c: what it frees).
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
 *
 * This file: pools (initialize), lookups (exists, get), reserve, confirm,
 * delete and clear. keys_slots.c: the protocol's state (made on first
 * use, starting the evictor thread; tuning; keys_stop), the per-pool
 * state, where reserved slots come from, the quarantine. keys_evict.c:
 * drops and the evictor thread's passes. keys_want.c: the keys owed a
 * slot, the evictor's demand. keys.h: what the four share.
 */
#include "meta/keys.h"
#include "meta/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

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
	if (record_data_path(m, rank, ns, path, sizeof(path)) < 0 || stat(path, &st) < 0 ||
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

	index_cluster_kick(m);
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

/* The most pages keys_size_tables sizes the table by name for: 16M
 * pages, 134 MB of buckets. */
#define KEYS_TABLES_AHEAD (1ULL << 24)

/* A cache fills its pools, so the table by name is sized for the pool's
 * free slots at its initialize, while it holds few pages: otherwise the
 * first fill rehashes every page under meta.lock each time the table
 * grows by half. It takes twice as many buckets as pages (a load factor
 * of 1/2 when the pool is full, 4 bytes a page more than a mount gives
 * it): a write looks each new key up three times (reserve, confirm,
 * commit), and each miss reads every page of the key's chain, a cache
 * miss each (DECISIONS.md, "The key protocol's table by name at load
 * factor 1/2"). The table by id needs no room: pages of new ids go to
 * its segments (idsegs.c). meta.lock held. */
static void keys_size_tables(struct meta *m, const struct pool *pool)
{
	uint64_t want = m->by_name.count + (pool->capacity - pool_used(pool));

	if (want > KEYS_TABLES_AHEAD)
		want = KEYS_TABLES_AHEAD;
	index_table_reserve(&m->by_name, 2 * want);
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
		if (rc == 0 && (info.capacity != num_pages || info.slot_size != slot_size)) {
			*differs = info.capacity != num_pages; /* (made by another node) */
			log_warn(
				"rank %d namespace '%s' initialized by another node at the same "
				"moment: %llu pages of %llu bytes (kept; asked here: %llu of %llu)",
				rank, ns, (unsigned long long)info.capacity,
				(unsigned long long)info.slot_size, (unsigned long long)num_pages,
				(unsigned long long)slot_size);
		} else if (rc == 0) {
			log_info("pool %d/%s initialized: %llu pages of %llu bytes", rank, ns,
			         (unsigned long long)num_pages, (unsigned long long)slot_size);
		}
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
	index_lock(m);
	struct pool *pool = index_pool_by_id(m, info.id);
	if (pool && !keys_pool_get(m, pool))
		rc = -ENOMEM;
	else if (pool)
		keys_size_tables(m, pool);
	index_unlock(m);
	return rc;
}

int meta_keys_pool(struct meta *m, int rank, const char *ns, uint32_t *pool_id)
{
	int rc = -ENOENT;

	if (rank < 0 || rank > META_RANK_MAX || meta_check_ns(ns) < 0)
		return -ENOENT;
	index_lock(m);
	struct pool *p = index_pool_by_name(m, rank, ns);
	if (p) {
		*pool_id = p->id;
		rc = keys_pool_get(m, p) ? 0 : -ENOMEM;
	}
	index_unlock(m);
	return rc;
}

/* Recency for a protocol lookup, to the second. A page's first lookup in
 * a second moves it to the head of its pool's LRU; later ones in the same
 * second leave it there, among the pages used in that second, which is
 * the order a remount rebuilds (DECISIONS.md, "An HTTP lookup moves a page
 * once a second"). A page committed in this second has this second's
 * atime from its commit, not from a lookup: each lookup moves it, so that
 * a key looked up just after it was written outlives pages written after
 * it. The store hears of a use when it is in another minute than the one
 * before (HTTP clients look keys up far more often than FUSE): at most
 * once a minute per page. */
static int keys_touch_due(const struct page *p, uint32_t now_s)
{
	return p->atime_s != now_s || (uint32_t)(p->mtime_q >> 16) == now_s;
}

static void keys_touch(struct meta *m, struct page *p, uint32_t now_s)
{
	if (!keys_touch_due(p, now_s))
		return;
	if (now_s / 60 != p->atime_s / 60) {
		ops_page_touch(m, p);
		return;
	}
	p->atime_s = now_s;
	index_lru_touch(page_pool(p), p);
}

/* The committed page named key, if the name is valid. meta.lock held. */
static struct page *find_key(struct meta *m, uint32_t pool_id, const char *key)
{
	index_assert_locked(m);
	if (meta_check_name(key) < 0)
		return NULL;
	return index_table_find_name(&m->by_name, pool_id, key, NULL);
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
	index_table_prefetch_names(&m->by_name, pool_id, a->valid, a->len, g, a->h);
}

/* find_key for keys[i] after keys_ahead(..., i, a). */
static struct page *find_key_ahead(struct meta *m, uint32_t pool_id, const struct keys_ahead *a,
                                   size_t i)
{
	size_t j = i % KEYS_CHUNK;
	if (!a->valid[j])
		return NULL;
	return index_table_find_hashed(&m->by_name, a->h[j], pool_id, a->valid[j], a->len[j]);
}

static void find_keys(struct meta *m, uint32_t pool_id, const char *const *keys, size_t n,
                      struct page **out)
{
	const char *valid[KEYS_CHUNK];
	size_t len[KEYS_CHUNK];

	for (size_t i = 0; i < n; i++)
		valid[i] = meta_check_name_len(keys[i], &len[i]) < 0 ? NULL : keys[i];
	index_table_find_names(&m->by_name, pool_id, valid, len, n, out);
}

int meta_keys_exists(struct meta *m, uint32_t pool_id, const char *const *keys, size_t n,
                     uint8_t *out)
{
	struct page *found[KEYS_CHUNK];

	index_lock(m);
	if (!index_pool_by_id(m, pool_id)) {
		index_unlock(m);
		return -ENOENT;
	}
	for (size_t base = 0; base < n; base += KEYS_CHUNK) {
		size_t g = n - base < KEYS_CHUNK ? n - base : KEYS_CHUNK;
		find_keys(m, pool_id, keys + base, g, found);
		for (size_t i = 0; i < g; i++)
			out[base + i] = found[i] != NULL;
	}
	index_unlock(m);
	return 0;
}

int meta_keys_get(struct meta *m, uint32_t pool_id, const char *const *keys, size_t n,
                  int64_t *slot)
{
	struct page *found[KEYS_CHUNK];
	uint32_t now_s = page_secs(index_now_ns());
	int held = meta_lease_hold(m); /* the client reads the slots we name */

	if (held < 0)
		return held;

	index_lock(m);
	struct pool *pool = index_pool_by_id(m, pool_id);
	if (!pool) {
		index_unlock(m);
		return -ENOENT;
	}
	for (size_t base = 0; base < n; base += KEYS_CHUNK) {
		size_t g = n - base < KEYS_CHUNK ? n - base : KEYS_CHUNK;
		find_keys(m, pool_id, keys + base, g, found);
		/* the LRU neighbours each due touch relinks: their misses
		 * overlap too */
		for (size_t i = 0; i < g; i++) {
			struct page *p = found[i];
			if (!p || !keys_touch_due(p, now_s))
				continue;
			if (p->lru_prev)
				__builtin_prefetch(page_at(p->lru_prev), 1);
			if (p->lru_next)
				__builtin_prefetch(page_at(p->lru_next), 1);
		}
		for (size_t i = 0; i < g; i++) {
			struct page *p = found[i];
			slot[base + i] = p ? (int64_t)p->slot : -1;
			if (p) {
				keys_touch(m, p, now_s);
				pool->hits++;
			} else {
				pool->misses++;
			}
		}
	}
	index_unlock(m);
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
	int rc = meta_lease_hold(m), newly_owed = 0; /* the client writes them */

	if (rc < 0)
		return rc;
	while (sz < 2 * n)
		sz *= 2;
	if (!(bs.v = malloc(sz * sizeof(*bs.v))))
		return -ENOMEM;
	memset(bs.v, 0xff, sz * sizeof(*bs.v));
	bs.mask = sz - 1;
	index_lock(m);
	struct pool *pool = index_pool_by_id(m, pool_id);
	struct kpool *kp = pool ? keys_pool_get(m, pool) : NULL;
	if (!kp || m->cfg.read_only) {
		rc = !pool ? -ENOENT : m->cfg.read_only ? -EROFS : -ENOMEM;
		goto out;
	}
	/* (A reservation may be written after a restart: fence.c.) */
	if ((rc = keys_fence_ahead(m, pool, kp)) < 0)
		goto out;
	if (!(pool = index_pool_by_id(m, pool_id)) || !(kp = keys_pool_get(m, pool))) {
		rc = !pool ? -ENOENT : -ENOMEM;
		goto out;
	}
	int64_t asked = mono_ns(); /* (a refused key's time: one clock read a batch) */
	int64_t deadline = asked + m->keys->t.reserve_timeout_ns;
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
			keys_touch(m, p, page_secs(index_now_ns()));
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
		if (!(pool = index_pool_by_id(m, pool_id)))
			break; /* removed while a lease was waited for: -1 for the rest */
		if (trc == -ENOSPC && kp->quar_q.len && fifo_peek(&kp->quar_q)->at <= mono_ns()) {
			/* a slot is back from the quarantine: the evictor's next
			 * pass would free it; this key gets it now */
			keys_quarantine_release(pool, kp, mono_ns());
			trc = keys_take(m, pool_id, kp, &s);
			if (!(pool = index_pool_by_id(m, pool_id)))
				break;
		}
		if (trc < 0) {
			uint64_t owed = kp->want.live;
			pool->refused++;
			keys_want_add(kp, ka.h[i % KEYS_CHUNK], asked);
			newly_owed |= kp->want.live > owed;
			continue;
		}
		if (kp->want.live)
			keys_want_served(kp, ka.h[i % KEYS_CHUNK]);
		if (keys_resv_set(kp, s, deadline, ka.h[i % KEYS_CHUNK]) < 0 ||
		    keys_fifo_push(&kp->resv_q, s, deadline, 0) < 0) {
			keys_resv_set(kp, s, 0, 0);
			keys_resv_free(pool, kp, s);
			continue;
		}
		slot[i] = (int64_t)s;
	}
	if (!pool) {
		rc = -ENOENT; /* its reservations expire */
		goto out;
	}
	/* The evictor hears of a key newly owed a slot, or of a supply below
	 * the headroom; a key refused again adds no demand, and waking the
	 * evictor for each refused batch of a pool under a storm cost more
	 * context switches than the refusals (its 100 ms pass comes anyway). */
	if (newly_owed || pool->capacity - pool_used(pool) + kp->quarantined <
	                          pool->capacity * m->keys->t.headroom_pct / 100)
		pthread_cond_signal(&m->keys->wake);
out:
	index_unlock(m);
	free(bs.v);
	return rc;
}

/* Shared index: page ids come in blocks from the index's sequence; when
 * this node's ran out, waits (up to 2 s, meta.lock dropped) for the sync
 * thread to fetch the next. 0 once there are ids, else -EAGAIN. */
static int ids_wait(struct meta *m)
{
	for (int waited = 0; index_id_left(&m->page_ids) == 0; waited += 20) {
		if (waited >= 2000)
			return -EAGAIN;
		index_unlock(m);
		nap(m);
		index_lock(m);
	}
	return 0;
}

/* What one confirm ignored: how many confirms and releases, and the
 * first of each. */
struct ignored {
	size_t confirms, releases;
	const char *key;
	int64_t slot, rel;
};

/* Logs what a confirm ignored, at most one line of each kind a second per
 * pool, with how many since the last line of that kind: a client that
 * confirms the keys it was refused (at -1) while a pool is full would
 * otherwise write a line per key, hundreds of thousands a second.
 * meta.lock held. */
/* Whether a line last written at *at (0: never) may be written now; if
 * so, now is when it was. */
static int line_due(int64_t *at, int64_t now)
{
	if (*at && now - *at < SEC)
		return 0;
	*at = now;
	return 1;
}

static void log_ignored(const struct pool *pool, struct kpool *kp, const struct ignored *ig)
{
	int64_t now = mono_ns();

	kp->ignored_confirms += ig->confirms;
	kp->ignored_releases += ig->releases;
	if (ig->confirms && line_due(&kp->confirms_logged_at, now)) {
		log_warn("pool %u/%s: confirm of key '%.64s' at page %lld ignored: that page is "
		         "not reserved for it (expired, never reserved, or reserved for another "
		         "key); %llu confirm(s) ignored since the last such line",
		         pool->rank, pool->ns, ig->key, (long long)ig->slot,
		         (unsigned long long)kp->ignored_confirms);
		kp->ignored_confirms = 0;
	}
	if (ig->releases && line_due(&kp->releases_logged_at, now)) {
		log_warn("pool %u/%s: release of page %lld ignored: it is in use; %llu "
		         "release(s) ignored since the last such line",
		         pool->rank, pool->ns, (long long)ig->rel,
		         (unsigned long long)kp->ignored_releases);
		kp->ignored_releases = 0;
	}
}

int meta_keys_confirm(struct meta *m, uint32_t pool_id, const char *const *keys,
                      const int64_t *slots, size_t n, const int64_t *release, size_t nrel,
                      size_t *ignored)
{
	struct drop_list dl = {0};
	struct dropped *drops = NULL;
	struct keys_ahead ka;
	// NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers, sizeof(*p) meant
	struct page **pages = calloc(n ? n : 1, sizeof(*pages));
	uint64_t *done = calloc(n ? n : 1, sizeof(*done)); /* slots of pages[] */
	uint32_t *hash = calloc(n ? n : 1, sizeof(*hash));
	struct rec *r = record_new(REC_BULK);
	struct bulk bulk = {.pages = pages, .hash = hash};
	int64_t now = index_now_ns();
	int rc = 0, shared = m->shared;
	struct ignored ig = {0};

	*ignored = 0;
	if (!pages || !done || !hash || !r) {
		free(pages);
		free(hash);
		free(done);
		free(r);
		return -ENOMEM;
	}
	index_lock(m);
	struct pool *pool = index_pool_by_id(m, pool_id);
	struct kpool *kp = pool ? keys_pool_get(m, pool) : NULL;
	if (!kp || m->cfg.read_only) {
		rc = !pool ? -ENOENT : m->cfg.read_only ? -EROFS : -ENOMEM;
		index_unlock(m);
		free(pages);
		free(hash);
		free(done);
		free(r);
		return rc;
	}
	for (size_t i = 0; i < n; i++) {
		int64_t s = slots[i];
		if (index_id_left(&m->page_ids) == 0 && shared) {
			/* (Reserved slots keep the pool from being removed meanwhile.) */
			rc = ids_wait(m);
			pool = index_pool_by_id(m, pool_id); /* (may be gone, whatever rc) */
			if (rc == 0 && !pool)
				rc = -ENOENT;
			if (rc < 0)
				break;
		}
		keys_ahead(m, pool_id, keys, n, i, &ka); /* (ids_wait drops meta.lock) */
		struct page *old = find_key_ahead(m, pool_id, &ka, i);
		if (old && (int64_t)old->slot == s) {
			/* confirmed again: nothing changes */
			keys_touch(m, old, page_secs(index_now_ns()));
			continue;
		}
		if (s < 0 || !ka.valid[i % KEYS_CHUNK] ||
		    !keys_resv_for(kp, (uint64_t)s, ka.h[i % KEYS_CHUNK])) {
			if (!ig.confirms++) {
				ig.key = keys[i];
				ig.slot = s;
			}
			continue;
		}
		if (index_id_left(&m->page_ids) == 0) {
			rc = -EAGAIN; /* a shared index hands out ids in blocks */
			break;
		}
		struct page *p = index_page_alloc(keys[i], ka.len[i % KEYS_CHUNK]);
		/* A key confirmed over an older page of the same name: the old
		 * slot goes through the quarantine (readers may hold it). */
		if (old)
			index_page_replaced(m, old);
		if (!p || (old && keys_drop_page(m, old, &dl, &drops) < 0)) {
			index_page_free(p);
			rc = -ENOMEM;
			break;
		}
		keys_resv_set(kp, (uint64_t)s, 0, 0);
		p->id = index_id_take(&m->page_ids);
		page_set_pool(p, pool);
		p->gen = m->epoch;
		p->slot = (uint64_t)s;
		p->length = pool->slot_size;
		p->has_checksum = 0; /* summed on its first read through pagefs */
		page_set_mtime(p, now);
		p->atime_s = page_secs(now);
		hash[bulk.n] = ka.h[i % KEYS_CHUNK];
		done[bulk.n] = p->slot;
		pages[bulk.n++] = p;
	}
	for (size_t i = 0; rc == 0 && i < nrel; i++) {
		int64_t s = release[i];
		if (s >= 0 && keys_resv_get(kp, (uint64_t)s)) {
			keys_resv_set(kp, (uint64_t)s, 0, 0);
			keys_resv_free(pool, kp, (uint64_t)s);
		} else if (s >= 0 && (uint64_t)s < kp->capacity &&
		           keys_slot_used(pool, (uint64_t)s)) {
			if (!ig.releases++)
				ig.rel = s;
		}
	}
	if (pool) {
		pool->ignored += ig.confirms + ig.releases;
		log_ignored(pool, kp, &ig);
	}
	*ignored = ig.confirms + ig.releases;
	/* All confirmed keys in one record: one savepoint, one apply. */
	if (bulk.n) {
		r->bulk = &bulk;
		r->waited = 1;
		record_submit(m, r);
	}
	index_unlock(m);

	int drc = keys_drops_finish(m, &dl, drops);
	if (bulk.n) {
		int err = record_wait(m, r);
		if (err == -EEXIST && shared && (r = record_new(REC_BULK))) {
			/* Another node committed one of these names at the same
			 * moment: its row is visible now, and a second try
			 * replaces it, as a later confirm would. */
			r->bulk = &bulk;
			r->waited = 1;
			record_submit(m, r);
			err = record_wait(m, r);
		}
		if (err < 0) {
			rc = rc ? rc : err;
			index_lock(m);
			if ((pool = index_pool_by_id(m, pool_id)))
				for (size_t i = 0; i < bulk.n; i++)
					index_slot_release(pool, pages[i]->slot);
			index_unlock(m);
			for (size_t i = 0; i < bulk.n; i++)
				index_page_free(pages[i]);
		}
		/* Committed or given back: the slots are no writer's any more,
		 * their chunks may be handed over (pages[] may be gone: done[]).
		 * (Only a shared index hands chunks over.) */
		if (shared) {
			index_lock(m);
			if ((pool = index_pool_by_id(m, pool_id)))
				for (size_t i = 0; i < bulk.n; i++)
					index_chunk_done(pool, done[i]);
			index_unlock(m);
		}
	} else {
		free(r);
	}
	free(pages);
	free(hash);
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
	index_lock(m);
	struct pool *pool = index_pool_by_id(m, pool_id);
	if (!pool || m->cfg.read_only) {
		index_unlock(m);
		return !pool ? -ENOENT : -EROFS;
	}
	if (!keys_pool_get(m, pool))
		rc = -ENOMEM;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		struct page *p = find_key(m, pool_id, keys[i]);
		if (p && (rc = keys_drop_page(m, p, &dl, &drops)) == 0)
			(*deleted)++;
	}
	index_unlock(m);
	int drc = keys_drops_finish(m, &dl, drops);
	return rc ? rc : drc;
}

int meta_keys_clear(struct meta *m, uint32_t pool_id)
{
	struct drop_list dl = {0};
	struct dropped *drops = NULL;
	int rc = 0;

	index_lock(m);
	struct pool *pool = index_pool_by_id(m, pool_id);
	struct kpool *kp = pool ? keys_pool_get(m, pool) : NULL;
	if (!kp || m->cfg.read_only) {
		index_unlock(m);
		return !pool ? -ENOENT : m->cfg.read_only ? -EROFS : -ENOMEM;
	}
	while (rc == 0 && pool->lru_tail)
		rc = keys_drop_page(m, pool->lru_tail, &dl, &drops);
	/* Reservations stay until confirmed, released or expired: their
	 * writers may still write the slots (they went back after the 6 s
	 * quarantine, to other keys that a late writer then overwrote; found
	 * by a probe). A confirm after the clear makes its page. */
	index_unlock(m);
	int drc = keys_drops_finish(m, &dl, drops);
	return rc ? rc : drc;
}
