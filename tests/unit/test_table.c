/*
 * test_table.c - the page hash tables (meta/table.c by name,
 * meta/idtable.c by id): with any number of buckets, through every growth
 * step, each page is found by id and by name, a removal takes out only
 * its own page (and leaves every other findable: open addressing shifts
 * pages back), the tables stay sized to what they hold (by name a load
 * factor between 2/3 and 1 once grown, by id between 7/12 and 7/8), ids
 * spread over the buckets whatever their stride, a run of pages that
 * wraps past the last bucket survives removals in any order, a mount
 * sizes both from the store's estimate, for short and long names, a
 * reservation for more pages rehashes once, and the recent entries batch
 * lookups read first are hints checked against the page, which leave
 * with their page.
 */
#include "fixture.h"
#include "meta/cluster.h"
#include "meta/hash.h"
#include "meta/index.h"
#include "meta/ops.h"
#include "meta/record.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PAGES 20000u
#define LONGEST                                                                                    \
	400 /* buckets a lookup by id reads at most, at a load of 0.75 (1 million ids: 224 seen) */

static struct pool *pool;
static struct page *pages[PAGES];
static uint32_t hashes[PAGES]; /* of their names */

static void name_of(unsigned i, char *buf, size_t len)
{
	snprintf(buf, len, "%016x%016x_model_%u.bin", i * 2654435761u, i, i % 7);
}

static void setup(void)
{
	pool = index_pool_new();
	cr_assert_not_null(pool);
	pool->id = 42;
	for (unsigned i = 0; i < PAGES; i++) {
		char name[96];
		name_of(i, name, sizeof(name));
		pages[i] = index_page_alloc(name, strlen(name));
		cr_assert_not_null(pages[i]);
		pages[i]->id = 1000003ull * (i + 1); /* sparse, as ids after deletions */
		pages[i]->committed = 1;
		hashes[i] = index_name_hash(pool->id, name, strlen(name));
		page_set_pool(pages[i], pool);
		/* what removals and growth compute again from the packed name */
		cr_assert_eq(index_page_name_hash(pages[i]), hashes[i], "hash of %s again", name);
	}
}

static void teardown(void)
{
	for (unsigned i = 0; i < PAGES; i++)
		index_page_free(pages[i]);
	index_pool_free(pool);
}

/* Every page i in [from, to) is found by id and by name; those before
 * `from` (removed) are not. */
static void check_found(const struct page_table *by_name, const struct page_table *by_id,
                        unsigned from, unsigned to)
{
	for (unsigned i = 0; i < to; i++) {
		char name[96];
		name_of(i, name, sizeof(name));
		struct page *want = i >= from ? pages[i] : NULL;
		cr_assert_eq(index_idtable_find(by_id, pages[i]->id), want, "page %u by id", i);
		cr_assert_eq(index_table_find_name(by_name, pool->id, name, NULL), want,
		             "page %u by name", i);
	}
}

TestSuite(table, .init = setup, .fini = teardown);

Test(table, grows_by_half_and_finds_every_page)
{
	struct page_table by_name, by_id;
	uint64_t sizes = 0, last = 0;

	cr_assert_eq(index_table_init(&by_name, 1), 0);
	cr_assert_eq(index_idtable_init(&by_id, 1), 0);
	cr_assert_eq(by_name.n, 1024, "a table starts at 1024 buckets");
	cr_assert_eq(by_id.n, 1024, "a table starts at 1024 buckets");
	for (unsigned i = 0; i < PAGES; i++) {
		index_table_add_name(&by_name, pages[i], hashes[i]);
		index_idtable_add(&by_id, pages[i]);
		cr_assert_leq(by_name.count, by_name.n, "load factor at most 1");
		cr_assert_leq(by_id.count * 8, by_id.n * 7, "load factor at most 7/8 by id");
		if (by_name.n != last) {
			if (last)
				cr_assert_eq(
					by_name.n, last + last / 2, "grows by half: %llu -> %llu",
					(unsigned long long)last, (unsigned long long)by_name.n);
			last = by_name.n;
			sizes++;
			check_found(&by_name, &by_id, 0, i + 1);
		}
	}
	cr_assert_geq(sizes, 8, "1024 -> 20000 takes several steps, most not powers of two");
	cr_assert_geq(by_name.count * 3, by_name.n * 2, "load factor at least 2/3 once grown");
	cr_assert_geq(by_id.count * 12, by_id.n * 7, "load factor by id at least 7/12 once grown");
	check_found(&by_name, &by_id, 0, PAGES);
	{ /* the batch lookup after growth too */
		const char *names[64];
		size_t lens[64];
		struct page *out[64];
		char buf[64][96];
		for (unsigned i = 0; i < 64; i++) {
			name_of(i * 311u, buf[i], sizeof(buf[i]));
			names[i] = buf[i];
			lens[i] = strlen(buf[i]);
		}
		index_table_find_names(&by_name, pool->id, names, lens, 64, out);
		for (unsigned i = 0; i < 64; i++)
			cr_assert_eq(out[i], pages[i * 311u], "batch key %u", i);
	}

	/* Removing the first half takes out those pages only; a removal
	 * leaves every other page findable (checked after some of them). */
	for (unsigned i = 0; i < PAGES / 2; i++) {
		index_table_del_name(&by_name, pages[i]);
		index_idtable_del(&by_id, pages[i]);
		if (i % 1000 == 999)
			check_found(&by_name, &by_id, i + 1, PAGES);
	}
	cr_assert_eq(by_id.count, PAGES - PAGES / 2);
	cr_assert_eq(by_name.count, PAGES - PAGES / 2);
	check_found(&by_name, &by_id, PAGES / 2, PAGES);
	index_table_free(&by_name);
	index_idtable_free(&by_id, 0);
}

/* Sized up front (as the mount sizes them from the index file), the
 * tables take the buckets asked for and do not grow while that many
 * pages go in; the batch lookup finds what the single one does. */
Test(table, sized_up_front_holds_without_growing)
{
	struct page_table by_name, by_id;
	const char *names[128];
	size_t lens[128];
	struct page *out[128];
	char buf[128][96];

	cr_assert_eq(index_table_init(&by_name, PAGES + 7), 0);
	cr_assert_eq(index_idtable_init(&by_id, PAGES + 7), 0);
	uint64_t id_buckets = by_id.n;
	cr_assert_geq(id_buckets * 4, (PAGES + 7) * 5ull, "sized for a load near 0.8 by id");
	for (unsigned i = 0; i < PAGES; i++) {
		index_table_add_name(&by_name, pages[i], hashes[i]);
		index_idtable_add(&by_id, pages[i]);
	}
	cr_assert_eq(by_name.n, PAGES + 7, "no growth below load factor 1");
	cr_assert_eq(by_id.n, id_buckets, "no growth by id either");
	check_found(&by_name, &by_id, 0, PAGES);
	for (unsigned i = 0; i < 128; i++) {
		unsigned k = (i * 7919u) % (PAGES + 64); /* some past the end: misses */
		name_of(k, buf[i], sizeof(buf[i]));
		names[i] = buf[i];
		lens[i] = strlen(buf[i]);
	}
	index_table_find_names(&by_name, pool->id, names, lens, 128, out);
	for (unsigned i = 0; i < 128; i++) {
		unsigned k = (i * 7919u) % (PAGES + 64);
		cr_assert_eq(out[i], k < PAGES ? pages[k] : NULL, "key %u (page %u)", i, k);
	}
	index_table_free(&by_name);
	index_idtable_free(&by_id, 0);
}

/* Reserved for more pages while holding some (as the key protocol's
 * initialize sizes them for its pool): the tables rehash once to the
 * size asked for, keep every page, and take the rest without growing; a
 * reservation below what they have changes nothing. */
Test(table, reserved_while_holding_pages_rehashes_once_and_holds_the_rest)
{
	struct page_table by_name, by_id;

	cr_assert_eq(index_table_init(&by_name, 1), 0);
	cr_assert_eq(index_idtable_init(&by_id, 1), 0);
	for (unsigned i = 0; i < 700; i++) {
		index_table_add_name(&by_name, pages[i], hashes[i]);
		index_idtable_add(&by_id, pages[i]);
	}
	index_table_reserve(&by_name, PAGES);
	index_idtable_reserve(&by_id, PAGES);
	cr_assert_eq(by_name.n, PAGES, "by name: %llu buckets", (unsigned long long)by_name.n);
	uint64_t id_buckets = by_id.n;
	cr_assert_geq(id_buckets * 4, PAGES * 5ull, "by id: sized for a load near 0.8");
	check_found(&by_name, &by_id, 0, 700);
	index_table_reserve(&by_name, 100);
	index_idtable_reserve(&by_id, 100);
	cr_assert(by_name.n == PAGES && by_id.n == id_buckets, "a smaller reservation shrinks");
	for (unsigned i = 700; i < PAGES; i++) {
		index_table_add_name(&by_name, pages[i], hashes[i]);
		index_idtable_add(&by_id, pages[i]);
	}
	cr_assert_eq(by_name.n, PAGES, "no growth by name");
	cr_assert_eq(by_id.n, id_buckets, "no growth by id");
	check_found(&by_name, &by_id, 0, PAGES);
	index_table_free(&by_name);
	index_idtable_free(&by_id, 0);
}

/* Ids as they come (one after another, in blocks of a shared index's
 * sequence) and at strides that clustered a multiply-only hash: lookups
 * read as few buckets as a random spread gives (linear probing: (1 + 1 /
 * (1 - load)) / 2 on average). */
Test(table, ids_of_any_stride_spread_evenly)
{
	enum { N = 1000000 };
	static const uint64_t strides[] = {1, 7, 1000003, 1u << 20, 4096 * 3};
	struct page **v = calloc(N, sizeof(*v));

	cr_assert_not_null(v);
	for (unsigned i = 0; i < N; i++) {
		v[i] = index_page_alloc("x", 1);
		cr_assert_not_null(v[i]);
	}
	for (size_t k = 0; k < sizeof(strides) / sizeof(strides[0]); k++) {
		struct page_table t;
		uint64_t longest;
		cr_assert_eq(index_idtable_init(&t, N + N / 16), 0);
		for (unsigned i = 0; i < N; i++) {
			v[i]->id = 1 + strides[k] * i;
			index_idtable_add(&t, v[i]);
		}
		double load = (double)t.count / (double)t.n;
		double avg = (double)index_idtable_probes(&t, &longest) / (double)t.count;
		cr_assert_lt(avg, (1 + 1 / (1 - load)) / 2 + 0.1,
		             "stride %llu: %.3f buckets a lookup at load %.2f",
		             (unsigned long long)strides[k], avg, load);
		cr_assert_leq(longest, LONGEST, "stride %llu: a lookup of %llu buckets",
		              (unsigned long long)strides[k], (unsigned long long)longest);
		for (unsigned i = 0; i < N; i += 997)
			cr_assert_eq(index_idtable_find(&t, v[i]->id), v[i]);
		index_idtable_free(&t, 0);
	}
	for (unsigned i = 0; i < N; i++)
		index_page_free(v[i]);
	free(v);
}

/* An index of n pages through meta_adopt, named as SGLang names 3FS keys
 * (64 digits) followed by suffix, or short names (short != 0), reopened: the tables hold the pages without having
 * grown, and at a load factor near 1 (the store's estimate). */
static void sized_at_mount(unsigned n, const char *suffix, int short_names)
{
	struct meta_adopt_page *in = calloc(n, sizeof(*in));
	char(*names)[128] = calloc(n, sizeof(*names));
	struct meta_pool_info pi;

	cr_assert(in && names);
	fx_init_dirs();
	fx_open();
	cr_assert_eq(meta_pool_create(fx.m, 0, "kv", 4096, (uint64_t)n * 4096, &pi), 0);
	for (unsigned i = 0; i < n; i++) {
		if (short_names)
			snprintf(names[i], sizeof(names[i]), "p%x", i);
		else
			snprintf(names[i], sizeof(names[i]), "%08x%056x%s", i * 2654435761u, i,
			         suffix);
		in[i] = (struct meta_adopt_page){pi.id, i, names[i]};
	}
	cr_assert_eq(meta_adopt(fx.m, in, n, NULL, NULL), 0);
	fx_reopen();
	uint64_t buckets = fx.m->by_name.n;
	cr_assert_eq(fx.m->by_id.count, n);
	cr_assert_eq(fx.m->by_name.count, n);
	cr_assert_geq(buckets, n, "%u pages in %llu buckets", n, (unsigned long long)buckets);
	cr_assert_leq(buckets, n + n / 8, "%u pages (names like '%s') in %llu buckets", n, names[0],
	              (unsigned long long)buckets);
	/* by id a quarter more (open addressing wants a lower load) */
	cr_assert_geq(fx.m->by_id.n * 4, (uint64_t)n * 5, "by id: %llu buckets",
	              (unsigned long long)fx.m->by_id.n);
	cr_assert_leq(fx.m->by_id.n, buckets + buckets / 4 + buckets / 64 + 1,
	              "by id: %llu buckets", (unsigned long long)fx.m->by_id.n);
	fx_teardown();
	free(in);
	free(names);
}

Test(table, sized_from_the_store_at_mount)
{
	/* SGLang's 3FS keys (64 digits) and its file backend's names. */
	sized_at_mount(60000, "", 0);
	sized_at_mount(60000, "_Qwen-Qwen3-32B_0_2.bin", 0);
	sized_at_mount(60000, "", 1);
}

/* The bucket idtable.c gives id in a table of n buckets (its home). */
static uint64_t home_of(uint64_t id, uint64_t n)
{
	return ((meta_mix64(id) >> 32) * n) >> 32;
}

/* A run of pages that wraps from the last bucket to the first: ids whose
 * home is one of the last two buckets or the first, removed in every
 * rotation of their order; after each removal every other is still
 * found and the removed one is not (the backward shift across the end). */
Test(table, removals_shift_pages_back_across_the_end)
{
	enum { RUN = 12 };
	struct page_table t;
	struct page *v[RUN];
	uint64_t n;

	cr_assert_eq(index_idtable_init(&t, 1), 0);
	n = t.n;
	index_idtable_free(&t, 0);
	for (unsigned i = 0, k = 0; k < RUN; i++) { /* homes n-2, n-1, 0, n-2, ... */
		uint64_t want = (k % 3 == 0) ? n - 2 : (k % 3 == 1) ? n - 1 : 0;
		if (home_of(pages[i]->id, n) != want) {
			cr_assert_lt(i + 1, PAGES, "no ids of those homes among the pages");
			continue;
		}
		v[k++] = pages[i];
	}
	for (unsigned rot = 0; rot < RUN; rot++) {
		cr_assert_eq(index_idtable_init(&t, 1), 0);
		for (unsigned k = 0; k < RUN; k++)
			index_idtable_add(&t, v[k]);
		cr_assert_eq(t.n, n, "no growth at 12 pages");
		cr_assert_neq(t.buckets[0], 0, "the run wraps into bucket 0");
		for (unsigned d = 0; d < RUN; d++) {
			struct page *gone = v[(rot + d * 5) % RUN]; /* 5 is prime to 12 */
			index_idtable_del(&t, gone);
			cr_assert_null(index_idtable_find(&t, gone->id),
			               "rotation %u: removed page found", rot);
			for (unsigned e = d + 1; e < RUN; e++) {
				struct page *left = v[(rot + e * 5) % RUN];
				cr_assert_eq(index_idtable_find(&t, left->id), left,
				             "rotation %u, %u removed: page %llu lost", rot, d + 1,
				             (unsigned long long)left->id);
			}
		}
		cr_assert_eq(t.count, 0);
		for (uint64_t b = 0; b < t.n; b++)
			cr_assert_eq(t.buckets[b], 0, "bucket %llu not emptied",
			             (unsigned long long)b);
		index_idtable_free(&t, 0);
	}
}

/* Looks pages[idx[0..n)] up by name in one batch (n <= 128). */
static void find_batch(const struct page_table *t, const unsigned *idx, size_t n, struct page **out)
{
	static char buf[128][96];
	const char *names[128];
	size_t lens[128];

	for (size_t i = 0; i < n; i++) {
		name_of(idx[i], buf[i], sizeof(buf[i]));
		names[i] = buf[i];
		lens[i] = strlen(buf[i]);
	}
	index_table_find_names(t, pool->id, names, lens, n, out);
}

/* Each of pages[from, to) is found by a batch lookup, the rest not. */
static void check_batches(const struct page_table *t, unsigned from, unsigned to)
{
	for (unsigned base = 0; base < PAGES; base += 128) {
		unsigned idx[128];
		struct page *out[128];
		size_t n = PAGES - base < 128 ? PAGES - base : 128;
		for (size_t i = 0; i < n; i++)
			idx[i] = base + (unsigned)i;
		find_batch(t, idx, n, out);
		for (size_t i = 0; i < n; i++) {
			unsigned k = base + (unsigned)i;
			cr_assert_eq(out[i], k >= from && k < to ? pages[k] : NULL,
			             "batch lookup of %u", k);
		}
	}
}

static uint64_t *entry_of(const struct page_table *t, unsigned i)
{
	return &t->recent[hashes[i] % INDEX_RECENT_ENTRIES];
}

static int entry_names(const struct page_table *t, unsigned i)
{
	return *entry_of(t, i) == ((uint64_t)hashes[i] << 32 | page_ref(pages[i]));
}

/* The recent entries batch lookups read first: filled by the lookups,
 * kept through growth, checked against the page's name (an entry that
 * names another page is passed over and mended), and a page leaves its
 * entry when it leaves the table, not another page's. */
Test(table, recent_finds_are_checked_hints_that_leave_with_their_page)
{
	struct page_table t;
	unsigned half = PAGES / 2;

	cr_assert_eq(index_table_init(&t, 1), 0);
	cr_assert_eq(index_table_recent_init(&t), 0);
	uint64_t *recent = t.recent;
	for (unsigned i = 0; i < half; i++)
		index_table_add_name(&t, pages[i], hashes[i]);
	check_batches(&t, 0, half);
	unsigned named = 0;
	for (unsigned i = 0; i < half; i++)
		named += entry_names(&t, i);
	cr_assert_geq(named, half * 9 / 10, "%u of %u found pages in their entries", named, half);
	for (unsigned i = half; i < PAGES; i++)
		index_table_add_name(&t, pages[i], hashes[i]);
	cr_assert_eq(t.recent, recent, "growth keeps the entries");
	check_batches(&t, 0, PAGES);
	check_batches(&t, 0, PAGES); /* now mostly from the entries */

	/* an entry of page 2's hash naming page 1: page 2 is found, and the
	 * entry mended */
	*entry_of(&t, 2) = (uint64_t)hashes[2] << 32 | page_ref(pages[1]);
	unsigned two = 2;
	struct page *out[1];
	find_batch(&t, &two, 1, out);
	cr_assert_eq(out[0], pages[2]);
	cr_assert(entry_names(&t, 2), "the entry names page 2 again");

	/* two pages of one entry: each found, whichever the entry names */
	unsigned a = PAGES, b = PAGES;
	for (unsigned i = 0; i < PAGES && a == PAGES; i++)
		for (unsigned j = i + 1; j < PAGES; j++)
			if (entry_of(&t, i) == entry_of(&t, j)) {
				a = i;
				b = j;
				break;
			}
	cr_assert_lt(a, PAGES, "20000 names share some entry");
	unsigned ab[] = {a, b, a};
	struct page *got[3];
	find_batch(&t, ab, 3, got);
	cr_assert(got[0] == pages[a] && got[1] == pages[b] && got[2] == pages[a]);
	cr_assert(entry_names(&t, a));
	index_table_del_name(&t, pages[b]);
	cr_assert(entry_names(&t, a), "a removal leaves another page's entry");
	index_table_del_name(&t, pages[a]);
	cr_assert_eq(*entry_of(&t, a), 0, "a removal empties its page's entry");
	find_batch(&t, ab, 2, got);
	cr_assert(got[0] == NULL && got[1] == NULL);
	index_table_add_name(&t, pages[a], hashes[a]);
	index_table_add_name(&t, pages[b], hashes[b]);

	/* the first half removed: no entry names any of them */
	for (unsigned i = 0; i < half; i++)
		index_table_del_name(&t, pages[i]);
	for (unsigned i = 0; i < half; i++)
		cr_assert_neq((uint32_t)*entry_of(&t, i), page_ref(pages[i]), "page %u's entry", i);
	check_batches(&t, half, PAGES);
	index_table_free(&t);
	cr_assert_null(t.recent);
}
