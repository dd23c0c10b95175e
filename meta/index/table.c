/*
 * table.c - the page hash table of the in-memory index by (pool, name),
 * for lookups (the one by id is idtable.c). Chained; buckets and chains
 * hold page references (arena.c). Names are hashed with xxhash. Callers
 * hold meta.lock.
 *
 * Any number of buckets, not only powers of two: a 32-bit hash picks its
 * bucket as (hash * buckets) >> 32, a multiply instead of an AND, so the
 * tables are sized to the pages the index probably holds (the store's
 * estimate: a load factor near 0.95 after a mount) and grow by half at
 * load factor 1. With powers of two, 10 million pages took 2^24 buckets,
 * 6.7 bytes a page.
 *
 * In front of the table by name, batch lookups (exists, get_page_indices)
 * read a small cache of the pages they found lately ("recent"): 2^19
 * entries of 8 bytes (4 MiB), direct mapped by the name's hash, each the
 * hash and the page's reference. The buckets of a large index are spread
 * over tens of MiB, and on this kind of virtual machine a bucket read was
 * a TLB miss as well as a cache miss; a key looked up again finds its
 * entry among far fewer lines and costs the page's lines alone (2^17
 * entries held 79 % of the protocol benchmark's 65,536 hot keys, 2^19 94 %
 * and were 1.2 x as fast, 2^20 only 1.02 x more: DECISIONS.md). An entry
 * is a hint: a lookup compares the page's name and pool as the chain walk
 * does, and falls back to the bucket when they differ. A page leaves it
 * when it leaves the table (index_table_del_name), so an entry never
 * names a freed page.
 */
#include "meta/hash.h"
#include "meta/index.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* The most buckets a table takes: (hash * n) >> 32 needs n <= 2^32, and
 * page references are 32 bits anyway. */
#define BUCKETS_MAX (1ULL << 32)
#define BUCKETS_MIN 1024ULL

int index_table_init(struct page_table *t, uint64_t buckets)
{
	uint64_t n = buckets < BUCKETS_MIN ? BUCKETS_MIN : buckets;

	if (n > BUCKETS_MAX)
		n = BUCKETS_MAX;
	t->buckets = calloc(n, sizeof(*t->buckets));
	if (!t->buckets)
		return -ENOMEM;
	t->n = n;
	t->count = 0;
	t->recent = NULL;
	t->segs = NULL;
	return 0;
}

/* The bucket of a 32-bit hash. */
static inline uint64_t slot_of(const struct page_table *t, uint32_t h)
{
	return ((uint64_t)h * t->n) >> 32;
}

#define RECENT_MASK (INDEX_RECENT_ENTRIES - 1)

int index_table_recent_init(struct page_table *t)
{
	t->recent = calloc((size_t)RECENT_MASK + 1, sizeof(*t->recent));
	return t->recent ? 0 : -ENOMEM;
}

void index_table_free(struct page_table *t)
{
	free(t->buckets);
	free(t->recent);
	t->buckets = NULL;
	t->recent = NULL;
}

/* The recent entry of name hash h. Entries are read and written whole,
 * relaxed: any value one holds names a page in the table or nothing. */
static inline uint64_t *recent_at(const struct page_table *t, uint32_t h)
{
	return &t->recent[h & RECENT_MASK];
}

/* The page the recent entry of h names if it was found for hash h, or
 * NULL. */
static inline struct page *recent_get(const struct page_table *t, uint32_t h)
{
	uint64_t e = __atomic_load_n(recent_at(t, h), __ATOMIC_RELAXED);

	return (uint32_t)(e >> 32) == h ? page_at((uint32_t)e) : NULL;
}

static inline void recent_put(const struct page_table *t, uint32_t h, const struct page *p)
{
	__atomic_store_n(recent_at(t, h), (uint64_t)h << 32 | page_ref(p), __ATOMIC_RELAXED);
}

/* Takes p out of its recent entry, if it is there. */
static void recent_forget(const struct page_table *t, uint32_t h, const struct page *p)
{
	uint64_t *e = recent_at(t, h);

	if ((uint32_t)__atomic_load_n(e, __ATOMIC_RELAXED) == page_ref(p))
		__atomic_store_n(e, 0, __ATOMIC_RELAXED);
}

uint32_t index_name_hash(uint32_t pool_id, const char *name, size_t len)
{
	return (uint32_t)XXH3_64bits_withSeed(name, len, pool_id);
}

uint32_t index_page_name_hash(const struct page *p)
{
	char text[META_NAME_MAX + 1];

	return index_name_hash(page_pool(p)->id, index_pname_text(p, text), p->name_len);
}

int index_table_grown(const struct page_table *t, struct page_table *g, uint64_t n)
{
	*g = (struct page_table){.n = n ? n : t->n + t->n / 2,
	                         .count = t->count,
	                         .recent = t->recent,
	                         .segs = t->segs};
	if (g->n > BUCKETS_MAX)
		g->n = BUCKETS_MAX;
	return g->n > t->n && (g->buckets = calloc(g->n, sizeof(*g->buckets))) ? 0 : -1;
}

/* Rehashes into n buckets (0: half as many again); keeps the old table
 * on ENOMEM. */
static void grow(struct page_table *t, uint64_t n)
{
	struct page_table g;

	if (index_table_grown(t, &g, n) < 0)
		return;
	for (uint64_t i = 0; i < t->n; i++) {
		uint32_t r = t->buckets[i];
		while (r) {
			struct page *p = page_at(r);
			uint32_t next = p->name_next;
			uint64_t b = slot_of(&g, index_page_name_hash(p));
			p->name_next = g.buckets[b];
			g.buckets[b] = r;
			r = next;
		}
	}
	free(t->buckets);
	*t = g;
}

void index_table_reserve(struct page_table *t, uint64_t pages)
{
	if (pages > t->n)
		grow(t, pages);
}

void index_table_add_name(struct page_table *t, struct page *p, uint32_t h)
{
	if (t->count >= t->n)
		grow(t, 0);
	uint64_t b = slot_of(t, h);
	p->name_next = t->buckets[b];
	t->buckets[b] = page_ref(p);
	t->count++;
}

void index_table_del_name(struct page_table *t, struct page *p)
{
	uint32_t ref = page_ref(p), h = index_page_name_hash(p);

	if (t->recent)
		recent_forget(t, h, p);
	for (uint32_t *pp = &t->buckets[slot_of(t, h)]; *pp; pp = &page_at(*pp)->name_next) {
		if (*pp == ref) {
			*pp = p->name_next;
			p->name_next = 0;
			t->count--;
			return;
		}
	}
}

void index_table_prefetch_name(const struct page_table *t, uint32_t h)
{
	__builtin_prefetch(&t->buckets[slot_of(t, h)], 1);
}

struct page *index_table_bucket_name(const struct page_table *t, uint32_t h)
{
	return page_at(t->buckets[slot_of(t, h)]);
}

/* The committed page of (pool_id, name) in the chain from p; *pending is
 * set when an uncommitted one is there too. A name has one committed
 * page, so without `pending` the walk stops at it. Pages hold no hash:
 * the walk compares names (index_pname_eq: the length, then 32 digits at a
 * time), then pools. */
static struct page *chain_find(struct page *p, uint32_t pool_id, const char *name, size_t len,
                               int *pending)
{
	struct page *found = NULL;

	if (pending)
		*pending = 0;
	for (; p; p = page_at(p->name_next)) {
		if (!index_pname_eq(p, name, len) || page_pool(p)->id != pool_id)
			continue;
		if (p->committed) {
			found = p;
			if (!pending)
				break;
		} else if (pending) {
			*pending = 1;
		}
	}
	return found;
}

struct page *index_table_find_name(const struct page_table *t, uint32_t pool_id, const char *name,
                                   int *pending)
{
	size_t len = strlen(name);
	uint32_t h = index_name_hash(pool_id, name, len);

	return chain_find(page_at(t->buckets[slot_of(t, h)]), pool_id, name, len, pending);
}

int index_table_find_pending(const struct page_table *t, uint32_t pool_id, const char *name,
                             uint64_t *ids, int max)
{
	size_t len = strlen(name);
	int n = 0;

	for (struct page *p = page_at(t->buckets[slot_of(t, index_name_hash(pool_id, name, len))]);
	     p; p = page_at(p->name_next))
		if (!p->committed && index_pname_eq(p, name, len) && page_pool(p)->id == pool_id) {
			if (n < max)
				ids[n] = p->id;
			n++;
		}
	return n;
}

struct page *index_table_find_hashed(const struct page_table *t, uint32_t h, uint32_t pool_id,
                                     const char *name, size_t len)
{
	return chain_find(page_at(t->buckets[slot_of(t, h)]), pool_id, name, len, NULL);
}

struct page *index_table_find_same(const struct page_table *t, const struct page *b, uint32_t h)
{
	for (struct page *p = page_at(t->buckets[slot_of(t, h)]); p; p = page_at(p->name_next))
		if (p->committed && p->name_len == b->name_len && p->pool_ix == b->pool_ix &&
		    index_pname_same(p, b))
			return p;
	return NULL;
}

/* Lookups as a pipeline, so that the cache misses of several keys
 * overlap instead of following one another (a batch of 128 SGLang keys
 * spent most of its time waiting on them). Each key passes four stages,
 * LEAD keys apart: its hash and its bucket loaded; the bucket read and
 * its chain head's lookup fields and name loaded; the second page of the
 * chain loaded, if there is one (pages hold no hash that would tell
 * whether the head is the one; at load factor up to 1 a third of lookups
 * reach the second); the walk. With recent entries, lookups take a stage
 * more in front: the entry loaded, then read, and a name it holds skips
 * the bucket. LEAD was chosen with tests/perf/lookup_bench.c (2, 4, 8,
 * 12, 16 keys: 8 and 12 best, 2 a quarter slower). Loading past the end
 * of a shorter name is harmless. */
#define LEAD ((size_t)8)
#define FIND_BLOCK 128

/* The walk for one name of hash h: head is the page its recent entry
 * named (hit) or its chain's first page. */
static struct page *walk(const struct page_table *t, uint32_t pool_id, const char *name, size_t len,
                         uint32_t h, struct page *head, int hit)
{
	if (hit) {
		if (head->committed && index_pname_eq(head, name, len) &&
		    page_pool(head)->id == pool_id)
			return head;
		head = page_at(t->buckets[slot_of(t, h)]); /* another name's entry */
	}
	struct page *p = head ? chain_find(head, pool_id, name, len, NULL) : NULL;
	if (p && t->recent)
		recent_put(t, h, p);
	return p;
}

/* The stages for names[0..n), n <= FIND_BLOCK, as above; with out, the
 * walks too (and the recent entries, if t has them); h: their hashes. */
static void find_block(const struct page_table *t, uint32_t pool_id, const char *const *names,
                       const size_t *lens, size_t n, struct page **out, uint32_t *h)
{
	struct page *head[FIND_BLOCK] = {0};
	unsigned char hit[FIND_BLOCK] = {0};
	int recent = out && t->recent;
	size_t bucket = recent ? 2 : 1; /* the stage that reads the bucket */
	size_t last = out ? bucket + 2 : bucket;

	for (size_t i = 0; i < n + last * LEAD; i++) {
		size_t k = i;
		if (k < n) {
			h[k] = names[k] ? index_name_hash(pool_id, names[k], lens[k]) : 0;
			__builtin_prefetch(recent ? (const void *)recent_at(t, h[k])
			                          : (const void *)&t->buckets[slot_of(t, h[k])]);
		}
		/* (k wraps below 0: out of range) */
		if (recent && (k = i - LEAD) < n && names[k]) {
			head[k] = recent_get(t, h[k]);
			hit[k] = head[k] != NULL;
			if (hit[k])
				page_prefetch_lookup(head[k], lens[k]);
			else
				__builtin_prefetch(&t->buckets[slot_of(t, h[k])]);
		}
		if ((k = i - bucket * LEAD) < n && names[k] && !hit[k]) {
			head[k] = page_at(t->buckets[slot_of(t, h[k])]);
			if (head[k])
				page_prefetch_lookup(head[k], lens[k]);
		}
		if (!out)
			continue;
		if ((k = i - (bucket + 1) * LEAD) < n && !hit[k] && head[k] && head[k]->name_next)
			page_prefetch_lookup(page_at(head[k]->name_next), lens[k]);
		if ((k = i - last * LEAD) < n)
			out[k] = names[k] ? walk(t, pool_id, names[k], lens[k], h[k], head[k],
			                         hit[k])
			                  : NULL;
	}
}

/* find_block over names[0..n) a block at a time; hs: where to put their
 * hashes, or NULL. */
static void find_names(const struct page_table *t, uint32_t pool_id, const char *const *names,
                       const size_t *lens, size_t n, struct page **out, uint32_t *hs)
{
	uint32_t h[FIND_BLOCK];

	for (size_t base = 0; base < n; base += FIND_BLOCK) {
		size_t g = n - base < FIND_BLOCK ? n - base : FIND_BLOCK;
		find_block(t, pool_id, names + base, lens + base, g, out ? out + base : NULL, h);
		if (hs)
			memcpy(hs + base, h, g * sizeof(*h));
	}
}

void index_table_find_names(const struct page_table *t, uint32_t pool_id, const char *const *names,
                            const size_t *lens, size_t n, struct page **out)
{
	find_names(t, pool_id, names, lens, n, out, NULL);
}

void index_table_prefetch_names(const struct page_table *t, uint32_t pool_id,
                                const char *const *names, const size_t *lens, size_t n,
                                uint32_t *hs)
{
	find_names(t, pool_id, names, lens, n, NULL, hs);
}

/* How far ahead index_table_prefetch_ahead loads buckets; chain heads are
 * loaded half as far ahead, once their bucket has arrived. */
#define AHEAD 16

void index_table_prefetch_ahead(const struct page_table *by_name, const struct page_table *by_id,
                                struct page *const *pages, const uint32_t *hs, size_t n, size_t i)
{
	if (i == 0) /* the first AHEAD buckets, then one more a step */
		for (size_t j = 0; j < AHEAD && j < n; j++) {
			index_table_prefetch_name(by_name, hs[j]);
			if (by_id)
				index_idtable_prefetch(by_id, pages[j]->id);
		}
	if (i + AHEAD < n) {
		index_table_prefetch_name(by_name, hs[i + AHEAD]);
		if (by_id)
			index_idtable_prefetch(by_id, pages[i + AHEAD]->id);
	}
	struct page *head =
		i + AHEAD / 2 < n ? index_table_bucket_name(by_name, hs[i + AHEAD / 2]) : NULL;
	if (head)
		page_prefetch_chain(head);
}
