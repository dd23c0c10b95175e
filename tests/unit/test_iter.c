/*
 * test_iter.c - the read-only views: meta_page_iter (readdir, fsck and
 * export walk pages through it), rank and pool listings, and the totals
 * of meta_get_stats behind statfs and `pagefs status`.
 */
#include "fixture.h"

TestSuite(iter, .init = fx_setup, .fini = fx_teardown, .timeout = 30);

struct seen {
	int calls;
	int stop_at; /* return stop_value on this call (1-based); 0: never */
	int stop_value;
	struct meta_page_info pages[FX_MAX_PAGES];
};

static int collect(void *arg, const struct meta_page_info *p)
{
	struct seen *s = arg;

	cr_assert_lt(s->calls, FX_MAX_PAGES, "iterator reported more than %d pages", FX_MAX_PAGES);
	s->pages[s->calls++] = *p;
	return s->calls == s->stop_at ? s->stop_value : 0;
}

static void iter_ok(uint32_t pool_id, uint64_t after, struct seen *s)
{
	int ret = meta_page_iter(fx.m, pool_id, after, collect, s);

	cr_assert_eq(ret, 0, "iter pool %u after %llu: %d (%s)", pool_id, (unsigned long long)after,
	             ret, ret < 0 ? strerror(-ret) : "callback value");
}

/* How many times page id appears in s. */
static int count_id(const struct seen *s, uint64_t id)
{
	int n = 0;

	for (int i = 0; i < s->calls; i++)
		n += s->pages[i].id == id;
	return n;
}

static void assert_ids_ascending(const struct seen *s)
{
	for (int i = 1; i < s->calls; i++)
		cr_assert_gt(s->pages[i].id, s->pages[i - 1].id,
		             "iterator order: %s (id %llu) after %s (id %llu)", s->pages[i].name,
		             (unsigned long long)s->pages[i].id, s->pages[i - 1].name,
		             (unsigned long long)s->pages[i - 1].id);
}

static struct meta_pool_info create_ok(int rank, const char *ns, uint64_t slot_size,
                                       uint64_t capacity_bytes)
{
	struct meta_pool_info pi;
	int ret = meta_pool_create(fx.m, rank, ns, slot_size, capacity_bytes, &pi);

	cr_assert_eq(ret, 0, "create pool %d/%s: %s", rank, ns, strerror(-ret));
	return pi;
}

static struct meta_stats stats(void)
{
	struct meta_stats s;

	memset(&s, 0xa5, sizeof(s));
	meta_get_stats(fx.m, &s);
	return s;
}

/* ---- pages ---- */

Test(iter, lists_committed_pages_in_id_order_with_their_fields)
{
	static const char *names[] = {"c", "a", "e", "b", "d"};
	struct meta_page_info put[5];
	struct seen s = {0};

	for (int i = 0; i < 5; i++)
		put[i] = put_page(fx.pool, names[i], 10 * (uint64_t)(i + 1), 0xabc0 + (uint64_t)i);
	iter_ok(fx.pool, 0, &s);

	cr_assert_eq(s.calls, 5, "iterator reported %d pages, want 5", s.calls);
	assert_ids_ascending(&s);
	for (int i = 0; i < 5; i++) {
		const struct meta_page_info *p = &s.pages[i];

		/* Ids grow with creation, so id order is creation order here. */
		cr_assert_eq(p->id, put[i].id, "entry %d: id %llu, want %llu (%s)", i,
		             (unsigned long long)p->id, (unsigned long long)put[i].id, names[i]);
		cr_assert_str_eq(p->name, names[i], "entry %d: name %s, want %s", i, p->name,
		                 names[i]);
		cr_assert_eq(p->pool_id, fx.pool, "%s: pool %u", p->name, p->pool_id);
		cr_assert_eq(p->slot, put[i].slot, "%s: slot %llu, want %llu", p->name,
		             (unsigned long long)p->slot, (unsigned long long)put[i].slot);
		cr_assert_eq(p->length, put[i].length, "%s: length %llu", p->name,
		             (unsigned long long)p->length);
		cr_assert(p->has_checksum && p->checksum == put[i].checksum, "%s: checksum %llx",
		          p->name, (unsigned long long)p->checksum);
		cr_assert(p->committed, "%s: listed as uncommitted", p->name);
		cr_assert_eq(p->mtime_ns, put[i].mtime_ns, "%s: mtime %lld, want %lld", p->name,
		             (long long)p->mtime_ns, (long long)put[i].mtime_ns);
	}
}

Test(iter, skips_pages_being_written_and_unlinked_pages)
{
	struct seen s = {0};

	put_page(fx.pool, "keep", 1, 1);
	put_page(fx.pool, "gone", 1, 1);
	reserve_ok(fx.pool, "pending", 0);
	int ret = meta_page_unlink(fx.m, fx.pool, "gone");
	cr_assert_eq(ret, 0, "unlink gone: %s", strerror(-ret));

	iter_ok(fx.pool, 0, &s);
	cr_assert_eq(s.calls, 1, "iterator reported %d pages, want only \"keep\"", s.calls);
	cr_assert_str_eq(s.pages[0].name, "keep", "listed %s", s.pages[0].name);
}

Test(iter, resumes_after_the_given_id)
{
	struct meta_page_info put[5];
	struct seen s = {0};

	put_pages(fx.pool, 5, put);
	iter_ok(fx.pool, put[2].id, &s);
	cr_assert_eq(s.calls, 2, "after page-02: %d pages, want 2", s.calls);
	cr_assert_eq(s.pages[0].id, put[3].id, "first after page-02 is %s", s.pages[0].name);
	cr_assert_eq(s.pages[1].id, put[4].id, "second after page-02 is %s", s.pages[1].name);

	memset(&s, 0, sizeof(s));
	iter_ok(fx.pool, put[4].id, &s);
	cr_assert_eq(s.calls, 0, "after the last page: %d pages, want 0", s.calls);
}

Test(iter, stops_when_the_callback_returns_nonzero_and_returns_that_value)
{
	struct seen s = {.stop_at = 2, .stop_value = 7};

	put_pages(fx.pool, 5, NULL);
	int ret = meta_page_iter(fx.m, fx.pool, 0, collect, &s);
	cr_assert_eq(ret, 7, "iter returned %d, want the callback's 7", ret);
	cr_assert_eq(s.calls, 2, "callback called %d times after asking to stop at 2", s.calls);

	s = (struct seen){.stop_at = 1, .stop_value = -ENOBUFS};
	ret = meta_page_iter(fx.m, fx.pool, 0, collect, &s);
	cr_assert_eq(ret, -ENOBUFS, "iter returned %d, want the callback's -ENOBUFS", ret);
	cr_assert_eq(s.calls, 1, "callback called %d times after asking to stop", s.calls);
}

Test(iter, empty_pool_lists_nothing)
{
	struct seen s = {0};

	iter_ok(fx.pool, 0, &s);
	cr_assert_eq(s.calls, 0, "empty pool listed %d pages", s.calls);
}

Test(iter, lists_only_the_pool_asked_for)
{
	struct meta_pool_info b = create_ok(0, "mamba", 0, 0);
	struct seen s = {0};

	put_page(fx.pool, "in-kv", 1, 1);
	put_page(b.id, "in-mamba", 1, 1);
	put_page(fx.pool, "also-in-kv", 1, 1);
	iter_ok(b.id, 0, &s);
	cr_assert_eq(s.calls, 1, "0/mamba listed %d pages, want 1", s.calls);
	cr_assert_str_eq(s.pages[0].name, "in-mamba", "0/mamba listed %s", s.pages[0].name);
	cr_assert_eq(s.pages[0].pool_id, b.id, "listed with pool %u", s.pages[0].pool_id);

	memset(&s, 0, sizeof(s));
	iter_ok(fx.pool, 0, &s);
	cr_assert_eq(s.calls, 2, "0/kv listed %d pages, want 2", s.calls);
}

Test(iter, shows_renames_and_replacements_once)
{
	struct seen s = {0};

	struct meta_page_info a = put_page(fx.pool, "a.tmp", 1, 1);
	put_page(fx.pool, "b", 2, 2);
	int ret = meta_page_rename(fx.m, fx.pool, "a.tmp", "b", 0);
	cr_assert_eq(ret, 0, "rename a.tmp -> b: %s", strerror(-ret));
	struct meta_resv r = reserve_ok(fx.pool, "b", a.id);
	commit_ok(&r, "b", 3, 3);

	iter_ok(fx.pool, 0, &s);
	cr_assert_eq(s.calls, 1, "listed %d pages after rename over and replace, want 1", s.calls);
	cr_assert_str_eq(s.pages[0].name, "b", "listed %s", s.pages[0].name);
	cr_assert_eq(s.pages[0].id, a.id, "listed id %llu, want %llu",
	             (unsigned long long)s.pages[0].id, (unsigned long long)a.id);
	cr_assert_eq(s.pages[0].length, 3, "listed length %llu, want the replacement's 3",
	             (unsigned long long)s.pages[0].length);
	cr_assert_eq(s.pages[0].slot, r.slot, "listed slot %llu, want the replacement's %llu",
	             (unsigned long long)s.pages[0].slot, (unsigned long long)r.slot);
}

/* readdir: a page that exists throughout a listing appears exactly once. */
Test(iter, resumed_listing_reports_surviving_pages_exactly_once)
{
	struct meta_page_info put[10];
	struct seen first = {.stop_at = 4, .stop_value = 1}, rest = {0};

	put_pages(fx.pool, 10, put);
	int ret = meta_page_iter(fx.m, fx.pool, 0, collect, &first);
	cr_assert_eq(ret, 1, "first part of the listing: %d", ret);

	/* Between the two parts: remove listed and unlisted pages, add new ones. */
	for (int i = 1; i < 10; i += 3) {
		ret = meta_page_unlink(fx.m, fx.pool, put[i].name);
		cr_assert_eq(ret, 0, "unlink %s: %s", put[i].name, strerror(-ret));
	}
	put_page(fx.pool, "late-1", 1, 1);
	put_page(fx.pool, "late-2", 1, 1);
	iter_ok(fx.pool, first.pages[first.calls - 1].id, &rest);

	for (int i = 0; i < 10; i++) {
		int n = count_id(&first, put[i].id) + count_id(&rest, put[i].id);

		if (i % 3 != 1)
			cr_assert_eq(n, 1, "%s, present throughout, was listed %d times",
			             put[i].name, n);
		else if (i > 3)
			cr_assert_eq(n, 0, "%s, removed before its turn, was listed", put[i].name);
	}
	assert_ids_ascending(&rest);
	cr_assert_str_eq(rest.pages[rest.calls - 1].name, "late-2", "newest page listed last");
}

/* ---- ranks and pools ---- */

Test(iter, ranks_are_listed_in_order)
{
	static const int make[] = {5, META_RANK_MAX, 3, 300};
	uint16_t out[8];

	for (size_t i = 0; i < sizeof(make) / sizeof(make[0]); i++) {
		int ret = meta_rank_create(fx.m, make[i]);
		cr_assert_eq(ret, 0, "create rank %d: %s", make[i], strerror(-ret));
	}
	create_ok(9, "kv", 0, 0);

	int n = meta_rank_list(fx.m, -1, out, 8);
	static const uint16_t all[] = {0, 3, 5, 9, 300, META_RANK_MAX};
	cr_assert_eq(n, 6, "listed %d ranks, want 6", n);
	for (int i = 0; i < 6; i++)
		cr_assert_eq(out[i], all[i], "rank #%d is %u, want %u", i, out[i], all[i]);

	n = meta_rank_list(fx.m, 5, out, 8);
	cr_assert_eq(n, 3, "ranks after 5: %d, want 3", n);
	cr_assert_eq(out[0], 9, "first rank after 5 is %u", out[0]);

	n = meta_rank_list(fx.m, -1, out, 2);
	cr_assert_eq(n, 2, "max 2 listed %d ranks", n);
	cr_assert(out[0] == 0 && out[1] == 3, "first two ranks %u %u", out[0], out[1]);

	n = meta_rank_list(fx.m, META_RANK_MAX, out, 8);
	cr_assert_eq(n, 0, "ranks after 65535: %d", n);
}

Test(iter, pools_of_a_rank_are_listed_in_id_order)
{
	struct meta_pool_info out[8];
	struct meta_pool_info mamba = create_ok(0, "mamba", 0, 0);
	struct meta_pool_info other = create_ok(1, "kv", 0, 0);
	struct meta_pool_info swa = create_ok(0, "swa", 0, 0);

	int n = meta_pool_list(fx.m, 0, 0, out, 8);
	cr_assert_eq(n, 3, "rank 0 lists %d pools, want 3", n);
	cr_assert(out[0].id == fx.pool && out[1].id == mamba.id && out[2].id == swa.id,
	          "rank 0 pools in order %u %u %u, want %u %u %u", out[0].id, out[1].id, out[2].id,
	          fx.pool, mamba.id, swa.id);
	cr_assert_str_eq(out[1].ns, "mamba", "second pool %s", out[1].ns);

	n = meta_pool_list(fx.m, 0, mamba.id, out, 8);
	cr_assert_eq(n, 1, "rank 0 after mamba: %d pools, want 1", n);
	cr_assert_eq(out[0].id, swa.id, "rank 0 after mamba: pool %u", out[0].id);

	n = meta_pool_list(fx.m, 0, 0, out, 2);
	cr_assert_eq(n, 2, "max 2 listed %d pools", n);

	n = meta_pool_list(fx.m, 1, 0, out, 8);
	cr_assert(n == 1 && out[0].id == other.id, "rank 1 lists %d pools", n);
	n = meta_pool_list(fx.m, 2, 0, out, 8);
	cr_assert_eq(n, 0, "rank 2 lists %d pools", n);
}

/* ---- totals ---- */

Test(iter, stats_add_up_across_pools)
{
	struct meta_pool_info b = create_ok(1, "kv", 8192, 8 * 8192);

	put_pages(fx.pool, 3, NULL);
	put_page(b.id, "big", 5000, 1);
	struct meta_stats s = stats();

	cr_assert_eq(s.pools, 2, "pools %llu", (unsigned long long)s.pools);
	cr_assert_eq(s.pages, 4, "pages %llu", (unsigned long long)s.pages);
	cr_assert_eq(s.bytes, 100 + 101 + 102 + 5000, "bytes %llu", (unsigned long long)s.bytes);
	cr_assert_eq(s.total_slots, FX_SLOTS + 8, "total_slots %llu",
	             (unsigned long long)s.total_slots);
	cr_assert_eq(s.free_slots, FX_SLOTS + 8 - 4, "free_slots %llu",
	             (unsigned long long)s.free_slots);
	cr_assert_eq(s.capacity_bytes, FX_SLOTS * FX_SLOT_SIZE + 8 * 8192, "capacity_bytes %llu",
	             (unsigned long long)s.capacity_bytes);
	cr_assert_eq(s.free_bytes, (FX_SLOTS - 3) * FX_SLOT_SIZE + 7 * 8192, "free_bytes %llu",
	             (unsigned long long)s.free_bytes);
	cr_assert_eq(s.evictions + s.checksum_failures, 0, "evictions/failures without cause");
}

Test(iter, free_slots_drop_by_one_per_page_and_come_back_on_unlink)
{
	uint64_t start = stats().free_slots;
	char name[32];

	cr_assert_eq(start, FX_SLOTS, "an empty pool has %llu free slots",
	             (unsigned long long)start);
	for (int i = 0; i < 5; i++) {
		page_name(name, sizeof(name), i);
		put_page(fx.pool, name, 1, 1);
		cr_assert_eq(stats().free_slots, start - (uint64_t)i - 1,
		             "free_slots after %d pages", i + 1);
	}
	struct meta_resv r = reserve_ok(fx.pool, "writing", 0);
	cr_assert_eq(stats().free_slots, start - 6, "a reservation must take a free slot");
	meta_page_abort(fx.m, &r);
	for (int i = 0; i < 5; i++) {
		page_name(name, sizeof(name), i);
		int ret = meta_page_unlink(fx.m, fx.pool, name);
		cr_assert_eq(ret, 0, "unlink %s: %s", name, strerror(-ret));
	}
	struct meta_stats s = stats();
	cr_assert_eq(s.free_slots, start, "free_slots %llu after removing everything",
	             (unsigned long long)s.free_slots);
	cr_assert_eq(s.pages + s.bytes, 0, "pages/bytes left after removing everything");
}

Test(iter, lookups_count_hits_and_misses)
{
	put_page(fx.pool, "a", 1, 1);
	struct meta_stats before = stats();
	struct meta_page_info p;
	int pending;

	lookup_ok(fx.pool, "a");
	lookup_ok(fx.pool, "a");
	meta_page_lookup(fx.m, fx.pool, "nope", &p, &pending);
	struct meta_stats after = stats();
	cr_assert_eq(after.hits - before.hits, 2, "two found lookups counted %llu hits",
	             (unsigned long long)(after.hits - before.hits));
	cr_assert_eq(after.misses - before.misses, 1, "one failed lookup counted %llu misses",
	             (unsigned long long)(after.misses - before.misses));
	cr_assert_eq(pool_info(fx.pool).hits, after.hits, "pool and total hits differ");
}

Test(iter, evictions_show_in_the_totals)
{
	put_pages(fx.pool, FX_SLOTS, NULL);
	reserve_ok(fx.pool, "x", 0);
	reserve_ok(fx.pool, "y", 0);
	cr_assert_eq(stats().evictions, 2, "total evictions %llu",
	             (unsigned long long)stats().evictions);
}

Test(iter, store_counters_count_committed_records)
{
	struct meta_stats before = stats();

	put_pages(fx.pool, 5, NULL);
	struct meta_stats after = stats();
	uint64_t recs = after.store_records - before.store_records;
	uint64_t batches = after.store_batches - before.store_batches;
	cr_assert_geq(recs, 5, "5 commits made %llu store records", (unsigned long long)recs);
	cr_assert(batches >= 1 && batches <= recs, "%llu records in %llu batches",
	          (unsigned long long)recs, (unsigned long long)batches);
}
