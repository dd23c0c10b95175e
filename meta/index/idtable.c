/*
 * idtable.c - the table of pages by id, which resolves inode numbers:
 * open addressing with linear probing, a 32-bit page reference a bucket
 * and nothing in the page itself (a chain link there cost every page 4
 * bytes). Callers hold meta.lock.
 *
 * A lookup probes from the id's home bucket to the page or an empty
 * bucket, reading the id of each page it passes. The table is sized at
 * mount for a load factor near 0.76 (store_estimate errs high) and grows
 * by half at 0.875: at 0.76 a lookup that finds its page reads 2.6 pages
 * on average. A delete shifts the pages after it back (no tombstones).
 *
 * In front of the buckets, pages of ids handed out since the load sit in
 * arrays by id (idsegs.c): a page is looked for there first, then in the
 * buckets. t->count counts both; the load factor, the buckets' pages.
 */
#include "meta/hash.h"
#include "meta/index.h"
#include "meta/log.h"

#include <stdlib.h>

/* MurmurHash3's 64-bit finalizer: every bit of id moves every bit of the
 * result, so ids that follow one another, or any stride, spread evenly
 * (one multiply's high half clustered ids of some strides). */
static uint64_t home(const struct page_table *t, uint64_t id)
{
	return ((meta_mix64(id) >> 32) * t->n) >> 32;
}

static uint64_t buckets_for(uint64_t pages)
{
	return pages + pages / 4 + pages / 64;
}

int index_idtable_init(struct page_table *t, uint64_t pages)
{
	int rc = index_table_init(t, buckets_for(pages)); /* (clamped as by name) */

	if (rc == 0 && (rc = index_idsegs_init(&t->segs)) < 0)
		index_table_free(t);
	return rc;
}

void index_idtable_seal(struct page_table *t)
{
	index_idsegs_seal(t->segs);
}

void index_idtable_free(struct page_table *t, int free_pages)
{
	for (uint64_t i = 0; free_pages && t->buckets && i < t->n; i++)
		if (t->buckets[i])
			index_page_free(page_at(t->buckets[i]));
	index_idsegs_free(t->segs, free_pages);
	t->segs = NULL;
	index_table_free(t);
}

/* Pages in the buckets. */
static uint64_t hashed(const struct page_table *t)
{
	return t->count - index_idsegs_live(t->segs);
}

/* Puts ref (of a page not in t) into its first empty bucket. */
static void place(struct page_table *t, uint32_t ref, uint64_t id)
{
	uint64_t i = home(t, id);

	while (t->buckets[i])
		i = i + 1 == t->n ? 0 : i + 1;
	t->buckets[i] = ref;
}

/* Rehashes into n buckets (0: half as many again); keeps the old table
 * on ENOMEM (it still works, only fuller). */
static void grow(struct page_table *t, uint64_t n)
{
	struct page_table g;

	if (index_table_grown(t, &g, n) < 0)
		return;
	for (uint64_t i = 0; i < t->n; i++)
		if (t->buckets[i])
			place(&g, t->buckets[i], page_at(t->buckets[i])->id);
	free(t->buckets);
	*t = g;
}

void index_idtable_reserve(struct page_table *t, uint64_t pages)
{
	if (buckets_for(pages) > t->n)
		grow(t, buckets_for(pages));
}

/* Puts p into the buckets, growing them first if they are 7/8 full. */
static void add_hashed(struct page_table *t, struct page *p)
{
	if ((hashed(t) + 1) * 8 > t->n * 7)
		grow(t, 0);
	if (hashed(t) + 1 >= t->n) {
		/* Every grow since the table was 7/8 full found no memory. */
		log_error("out of memory: the table of pages by id is full (%llu pages)",
		          (unsigned long long)hashed(t));
		abort();
	}
	place(t, page_ref(p), p->id);
}

void index_idtable_add(struct page_table *t, struct page *p)
{
	if (!index_idsegs_add(t->segs, p))
		add_hashed(t, p);
	t->count++;
}

/* The bucket of the page of id, or t->n. */
static uint64_t find(const struct page_table *t, uint64_t id)
{
	for (uint64_t i = home(t, id);; i = i + 1 == t->n ? 0 : i + 1) {
		struct page *p = page_at(t->buckets[i]);
		if (!p)
			return t->n;
		if (p->id == id)
			return i;
	}
}

struct page *index_idtable_find(const struct page_table *t, uint64_t id)
{
	struct page *p = index_idsegs_find(t->segs, id);

	if (p)
		return p;
	uint64_t i = find(t, id);

	return i < t->n ? page_at(t->buckets[i]) : NULL;
}

/* 1 if bucket h lies cyclically in (from, to]. */
static int between(uint64_t from, uint64_t h, uint64_t to)
{
	return from <= to ? from < h && h <= to : from < h || h <= to;
}

/* A segment's page moving to the buckets (still counted in t->count). */
static void rehash(void *arg, struct page *p)
{
	add_hashed(arg, p);
}

void index_idtable_del(struct page_table *t, struct page *p)
{
	if (index_idsegs_del(t->segs, p, rehash, t)) {
		t->count--;
		return;
	}
	uint64_t hole = find(t, p->id);

	if (hole == t->n || t->buckets[hole] != page_ref(p))
		return;
	/* Each page after the hole, up to the next empty bucket, moves into
	 * it unless its home lies between the hole and where it is. */
	for (uint64_t j = hole;;) {
		j = j + 1 == t->n ? 0 : j + 1;
		uint32_t ref = t->buckets[j];
		if (!ref)
			break;
		if (between(hole, home(t, page_at(ref)->id), j))
			continue;
		t->buckets[hole] = ref;
		hole = j;
	}
	t->buckets[hole] = 0;
	t->count--;
}

void index_idtable_prefetch(const struct page_table *t, uint64_t id)
{
	const void *e = index_idsegs_entry(t->segs, id);

	__builtin_prefetch(e ? e : &t->buckets[home(t, id)], 1);
}

uint64_t index_idtable_probes(const struct page_table *t, uint64_t *longest)
{
	uint64_t sum = index_idsegs_live(t->segs); /* one entry each */

	*longest = sum ? 1 : 0;
	for (uint64_t i = 0; i < t->n; i++) {
		if (!t->buckets[i])
			continue;
		uint64_t h = home(t, page_at(t->buckets[i])->id);
		uint64_t d = (i >= h ? i - h : i + t->n - h) + 1;
		sum += d;
		*longest = d > *longest ? d : *longest;
	}
	return sum;
}
