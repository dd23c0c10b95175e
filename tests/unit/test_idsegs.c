/*
 * test_idsegs.c - the table by id's direct part (meta/index/idsegs.c):
 * before the seal every page is hashed; after it, pages of new ids go to
 * segments and are found, removed and counted like hashed ones; ids below
 * the floor stay hashed; a passed segment left less than half full moves
 * its pages to the buckets and its range stays hashed; a segment not yet
 * passed keeps its pages however few; the directory forgets ranges moved
 * far below the top; and a mount seals its table, so the pages written
 * after it are in segments and a remount hashes them all.
 */
#include "fixture.h"
#include "meta/index.h"
#include "meta/meta.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#define SEG 4096u /* idsegs.c's SEG */
#define N (4 * SEG)

static struct page *v[N + 100];

static void setup(void)
{
	for (unsigned i = 0; i < N + 100; i++) {
		v[i] = index_page_alloc("x", 1);
		cr_assert_not_null(v[i]);
	}
}

static void teardown(void)
{
	for (unsigned i = 0; i < N + 100; i++)
		index_page_free(v[i]);
}

TestSuite(idsegs, .init = setup, .fini = teardown);

/* Every page of v[from, to) is found by its id; the count is right. */
static void check(const struct page_table *t, unsigned from, unsigned to, const char *when)
{
	for (unsigned i = from; i < to; i++)
		cr_assert_eq(index_idtable_find(t, v[i]->id), v[i], "%s: page of id %llu", when,
		             (unsigned long long)v[i]->id);
}

Test(idsegs, pages_before_the_seal_are_hashed_and_new_ids_after_it_are_not)
{
	struct page_table t;

	cr_assert_eq(index_idtable_init(&t, 1), 0);
	for (unsigned i = 0; i < 100; i++) {
		v[N + i]->id = 1 + 3 * i; /* loaded, sparse */
		index_idtable_add(&t, v[N + i]);
	}
	cr_assert_eq(index_idsegs_live(t.segs), 0, "nothing in segments before the seal");
	index_idtable_seal(&t);
	for (unsigned i = 0; i < N; i++) {
		v[i]->id = 2 * SEG + i; /* handed out after the load */
		index_idtable_add(&t, v[i]);
	}
	cr_assert_eq(index_idsegs_live(t.segs), N, "new ids in segments");
	cr_assert_eq(t.count, N + 100);
	check(&t, 0, N + 100, "after the adds");
	cr_assert_null(index_idtable_find(&t, 2 * SEG + N), "an id never linked");
	cr_assert_null(index_idtable_find(&t, 2), "an id between loaded ones");
	uint64_t longest;
	uint64_t probes = index_idtable_probes(&t, &longest);
	cr_assert_geq(probes, N + 100, "a lookup reads an entry or more");
	cr_assert_leq(probes, N + 100 * 8, "segment lookups read one entry: %llu",
	              (unsigned long long)probes);

	/* an id below the floor, of a range without a segment, linked now
	 * is hashed, and found */
	struct page *late = v[N + 99];
	index_idtable_del(&t, late);
	late->id = 200; /* below the floor (the highest loaded, 298, + 1) */
	index_idtable_add(&t, late);
	cr_assert_eq(index_idsegs_live(t.segs), N);
	cr_assert_eq(index_idtable_find(&t, 200), late);

	for (unsigned i = 0; i < N; i += 2)
		index_idtable_del(&t, v[i]);
	cr_assert_eq(t.count, N / 2 + 100);
	for (unsigned i = 0; i < N; i++)
		cr_assert_eq(index_idtable_find(&t, v[i]->id), i % 2 ? v[i] : NULL,
		             "page %u after every other was removed", i);
	check(&t, N, N + 100, "loaded pages after the removals");
	index_idtable_free(&t, 0);
}

Test(idsegs, a_passed_segment_half_empty_moves_its_pages_to_the_buckets)
{
	struct page_table t;

	cr_assert_eq(index_idtable_init(&t, 1), 0);
	index_idtable_seal(&t); /* an empty index: every id is new */
	for (unsigned i = 0; i < N; i++) {
		v[i]->id = (uint64_t)SEG * 10 + i; /* four whole ranges */
		index_idtable_add(&t, v[i]);
	}
	cr_assert_eq(index_idsegs_live(t.segs), N);
	/* the first range, oldest first as an LRU evicts: at half it moves */
	for (unsigned i = 0; i < SEG / 2; i++)
		index_idtable_del(&t, v[i]);
	cr_assert_eq(index_idsegs_live(t.segs), N - SEG / 2, "half full: still a segment");
	index_idtable_del(&t, v[SEG / 2]);
	cr_assert_eq(index_idsegs_live(t.segs), N - SEG, "below half: moved to the buckets");
	cr_assert_eq(t.count, N - SEG / 2 - 1);
	check(&t, SEG / 2 + 1, N, "after the move");
	for (unsigned i = 0; i <= SEG / 2; i++)
		cr_assert_null(index_idtable_find(&t, v[i]->id), "removed page %u", i);

	/* its range stays hashed: a page of an id there is not in a segment */
	index_idtable_add(&t, v[0]);
	cr_assert_eq(index_idsegs_live(t.segs), N - SEG);
	cr_assert_eq(index_idtable_find(&t, v[0]->id), v[0]);
	/* the moved pages leave the buckets as any hashed page does */
	for (unsigned i = SEG / 2 + 1; i < SEG; i++)
		index_idtable_del(&t, v[i]);
	index_idtable_del(&t, v[0]);
	cr_assert_eq(t.count, N - SEG);
	for (unsigned i = 0; i < SEG; i++)
		cr_assert_null(index_idtable_find(&t, v[i]->id), "page %u", i);
	check(&t, SEG, N, "the other ranges");
	index_idtable_free(&t, 0);
}

Test(idsegs, a_segment_not_yet_passed_keeps_its_pages_however_few)
{
	struct page_table t;

	cr_assert_eq(index_idtable_init(&t, 1), 0);
	index_idtable_seal(&t);
	for (unsigned i = 0; i < SEG / 2; i++) { /* the first half of a range */
		v[i]->id = (uint64_t)SEG * 7 + i;
		index_idtable_add(&t, v[i]);
	}
	for (unsigned i = 0; i < SEG / 2 - 1; i++)
		index_idtable_del(&t, v[i]);
	cr_assert_eq(index_idsegs_live(t.segs), 1, "still filling: no move");
	index_idtable_del(&t, v[SEG / 2 - 1]);
	cr_assert_eq(index_idsegs_live(t.segs), 0);
	cr_assert_eq(t.count, 0);
	/* the stream goes on in the same range */
	for (unsigned i = SEG / 2; i < SEG; i++) {
		v[i]->id = (uint64_t)SEG * 7 + i;
		index_idtable_add(&t, v[i]);
	}
	cr_assert_eq(index_idsegs_live(t.segs), SEG / 2);
	check(&t, SEG / 2, SEG, "the range's second half");
	index_idtable_free(&t, 1); /* frees the pages it holds */
	for (unsigned i = SEG / 2; i < SEG; i++)
		v[i] = index_page_alloc("x", 1);
}

/* Ranges moved long ago leave the directory: over three windows of
 * ranges, each taking one page near its end (passed) that then goes (its
 * pages move), the directory keeps at most two windows of entries, and an id
 * of a range below the window, or of a moved one, is hashed. */
Test(idsegs, the_directory_forgets_ranges_far_below_the_top)
{
	enum { WINDOW = 4096 }; /* idsegs.c's WINDOW */
	struct page_table t;
	struct page *p = v[0];

	cr_assert_eq(index_idtable_init(&t, 1), 0);
	index_idtable_seal(&t);
	for (uint64_t r = 0; r < 3 * WINDOW; r++) {
		p->id = r * SEG + SEG - 1;
		index_idtable_add(&t, p);
		cr_assert_eq(index_idsegs_live(t.segs), 1, "range %llu", (unsigned long long)r);
		cr_assert_eq(index_idtable_find(&t, p->id), p);
		index_idtable_del(&t, p);
		cr_assert_eq(t.count, 0);
	}
	/* (rebuilt at half full to a quarter: twice the window at most) */
	cr_assert_leq(index_idsegs_ranges(t.segs), 2 * WINDOW + 2, "%llu ranges in the directory",
	              (unsigned long long)index_idsegs_ranges(t.segs));
	p->id = 5 * SEG; /* a range far below: hashed */
	index_idtable_add(&t, p);
	cr_assert_eq(index_idsegs_live(t.segs), 0);
	cr_assert_eq(index_idtable_find(&t, p->id), p);
	index_idtable_del(&t, p);
	p->id = (3 * WINDOW - 2) * SEG + 7; /* a moved range in the window: hashed */
	index_idtable_add(&t, p);
	cr_assert_eq(index_idsegs_live(t.segs), 0);
	cr_assert_eq(index_idtable_find(&t, p->id), p);
	index_idtable_del(&t, p);
	p->id = 3 * WINDOW * SEG; /* the next range: a segment */
	index_idtable_add(&t, p);
	cr_assert_eq(index_idsegs_live(t.segs), 1);
	index_idtable_del(&t, p);
	index_idtable_free(&t, 0);
}

/* Through meta/: pages written after a mount are in segments; a remount
 * loads them all into the buckets, and finds each. */
Test(idsegs, a_mount_seals_its_table_and_a_remount_hashes_what_it_loads)
{
	struct meta_pool_info pi;
	struct meta_adopt_page in[300];
	char names[300][32];

	fx_init_dirs();
	fx_open();
	cr_assert_eq(meta_pool_create(fx.m, 0, "kv", 4096, 300 * 4096, &pi), 0);
	for (unsigned i = 0; i < 300; i++) {
		snprintf(names[i], sizeof(names[i]), "p%u", i);
		in[i] = (struct meta_adopt_page){pi.id, i, names[i]};
	}
	cr_assert_eq(meta_adopt(fx.m, in, 300, NULL, NULL), 0);
	cr_assert_eq(index_idsegs_live(fx.m->by_id.segs), 300, "written after the mount");
	fx_reopen();
	cr_assert_eq(index_idsegs_live(fx.m->by_id.segs), 0, "loaded: hashed");
	cr_assert_eq(fx.m->by_id.count, 300);
	for (unsigned i = 0; i < 300; i++) {
		struct meta_page_info a, b;
		cr_assert_eq(meta_page_lookup(fx.m, pi.id, names[i], &a, NULL), 0, "%s", names[i]);
		cr_assert_eq(meta_page_get(fx.m, a.id, &b), 0, "%s by id", names[i]);
		cr_assert_eq(b.slot, a.slot);
	}
	fx_teardown();
}
