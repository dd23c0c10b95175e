/*
 * test_table.c - the page hash tables (meta/table.c): with any number of
 * buckets, through every growth step, each page is found by id and by
 * name, a removal takes out only its own page, and the tables stay sized
 * to what they hold (load factor between 2/3 and 1 once grown).
 */
#include "meta/internal.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#define PAGES 20000u

static struct pool *pool;
static struct page *pages[PAGES];

static void name_of(unsigned i, char *buf, size_t len)
{
	snprintf(buf, len, "%016x%016x_model_%u.bin", i * 2654435761u, i, i % 7);
}

static void setup(void)
{
	pool = pool_new();
	cr_assert_not_null(pool);
	pool->id = 42;
	for (unsigned i = 0; i < PAGES; i++) {
		char name[96];
		name_of(i, name, sizeof(name));
		pages[i] = page_alloc(name, strlen(name));
		cr_assert_not_null(pages[i]);
		pages[i]->id = 1000003ull * (i + 1); /* sparse, as ids after deletions */
		pages[i]->committed = 1;
		pages[i]->name_hash = name_hash(pool->id, name, strlen(name));
		page_set_pool(pages[i], pool);
	}
}

static void teardown(void)
{
	for (unsigned i = 0; i < PAGES; i++)
		page_free(pages[i]);
	pool_free(pool);
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
		cr_assert_eq(table_find_id(by_id, pages[i]->id), want, "page %u by id", i);
		cr_assert_eq(table_find_name(by_name, pool->id, name, NULL), want,
		             "page %u by name", i);
	}
}

TestSuite(table, .init = setup, .fini = teardown);

Test(table, grows_by_half_and_finds_every_page)
{
	struct page_table by_name, by_id;
	uint64_t sizes = 0, last = 0;

	cr_assert_eq(table_init(&by_name, 1), 0);
	cr_assert_eq(table_init(&by_id, 1), 0);
	cr_assert_eq(by_id.n, 1024, "a table starts at 1024 buckets");
	for (unsigned i = 0; i < PAGES; i++) {
		table_add_name(&by_name, pages[i]);
		table_add_id(&by_id, pages[i]);
		cr_assert_leq(by_id.count, by_id.n, "load factor at most 1");
		if (by_id.n != last) {
			if (last)
				cr_assert_eq(by_id.n, last + last / 2,
				             "grows by half: %llu -> %llu",
				             (unsigned long long)last, (unsigned long long)by_id.n);
			last = by_id.n;
			sizes++;
			check_found(&by_name, &by_id, 0, i + 1);
		}
	}
	cr_assert_geq(sizes, 8, "1024 -> 20000 takes several steps, most not powers of two");
	cr_assert_geq(by_id.count * 3, by_id.n * 2, "load factor at least 2/3 once grown");
	cr_assert_eq(by_name.n, by_id.n);
	check_found(&by_name, &by_id, 0, PAGES);

	/* Removing the first half takes out those pages only. */
	for (unsigned i = 0; i < PAGES / 2; i++) {
		table_del_name(&by_name, pages[i]);
		table_del_id(&by_id, pages[i]);
	}
	cr_assert_eq(by_id.count, PAGES - PAGES / 2);
	cr_assert_eq(by_name.count, PAGES - PAGES / 2);
	check_found(&by_name, &by_id, PAGES / 2, PAGES);
	table_free(&by_name);
	table_free(&by_id);
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

	cr_assert_eq(table_init(&by_name, PAGES + 7), 0);
	cr_assert_eq(table_init(&by_id, PAGES + 7), 0);
	for (unsigned i = 0; i < PAGES; i++) {
		table_add_name(&by_name, pages[i]);
		table_add_id(&by_id, pages[i]);
	}
	cr_assert_eq(by_name.n, PAGES + 7, "no growth below load factor 1");
	check_found(&by_name, &by_id, 0, PAGES);
	for (unsigned i = 0; i < 128; i++) {
		unsigned k = (i * 7919u) % (PAGES + 64); /* some past the end: misses */
		name_of(k, buf[i], sizeof(buf[i]));
		names[i] = buf[i];
		lens[i] = strlen(buf[i]);
	}
	table_find_names(&by_name, pool->id, names, lens, 128, out);
	for (unsigned i = 0; i < 128; i++) {
		unsigned k = (i * 7919u) % (PAGES + 64);
		cr_assert_eq(out[i], k < PAGES ? pages[k] : NULL, "key %u (page %u)", i, k);
	}
	table_free(&by_name);
	table_free(&by_id);
}
