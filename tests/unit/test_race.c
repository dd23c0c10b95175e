/*
 * test_race.c - records that race in the journal: an operation queued
 * for the store while another one changes the same page in memory first
 * (an eviction, a checksum drop) or is queued just before it (an unlink).
 *
 * The journal is held (record_hold, a test seam) while the records
 * queue, so the order under test is the one every run sees. After each
 * race the store and memory must name the same pages (what a listing
 * shows and what the next mount loads), and every used slot must belong
 * to one of them. Each race runs on a SQLite index (suite race) and on a
 * PostgreSQL one (race_pg, skipped without PAGEFS_TEST_PG_URI).
 */
#include "fixture_pg.h"
#include "meta/cluster.h"
#include "meta/index.h"
#include "meta/ops.h"
#include "meta/record.h"

#include <pthread.h>

static void race_pg_setup(void)
{
	pg_setup();
	fx_open();
	fx_setup_pool();
}

/* Whether the test holds the journal: a failed assertion leaves it held,
 * and the fini lets it go before it closes the engine. */
static int held;

static void hold(void)
{
	record_hold(fx.m);
	held = 1;
}

static void release(void)
{
	held = 0;
	record_release(fx.m);
}

static void race_teardown(void)
{
	if (held && fx.m)
		release();
	fx_teardown();
}

static void race_pg_teardown(void)
{
	if (held && fx.m)
		release();
	pg_teardown();
}

TestSuite(race, .init = fx_setup, .fini = race_teardown, .timeout = 30);
TestSuite(race_pg, .init = race_pg_setup, .fini = race_pg_teardown, .timeout = 60);

/* One race, as a test of each suite. */
#define RACE(name)                                                                                 \
	static void name(void);                                                                    \
	Test(race, name)                                                                           \
	{                                                                                          \
		name();                                                                            \
	}                                                                                          \
	Test(race_pg, name)                                                                        \
	{                                                                                          \
		name();                                                                            \
	}                                                                                          \
	static void name(void)

/* ---- the store and memory agree ---- */

struct rows {
	int n;
	char names[FX_MAX_PAGES][META_NAME_MAX + 1];
};

static int row_seen(void *arg, const struct meta_page_info *stored)
{
	struct rows *rows = arg;
	struct meta_page_info p;
	int ret = meta_page_get(fx.m, stored->id, &p);

	cr_assert_eq(ret, 0, "the store has page %llu (\"%s\"), memory does not",
	             (unsigned long long)stored->id, stored->name);
	cr_assert(p.committed, "the store has page %llu, memory has it uncommitted",
	          (unsigned long long)stored->id);
	cr_assert_str_eq(p.name, stored->name, "page %llu is \"%s\" in the store, \"%s\" in memory",
	                 (unsigned long long)stored->id, stored->name, p.name);
	cr_assert(p.slot == stored->slot && p.length == stored->length,
	          "page %llu: slot %llu length %llu in the store, %llu and %llu in memory",
	          (unsigned long long)stored->id, (unsigned long long)stored->slot,
	          (unsigned long long)stored->length, (unsigned long long)p.slot,
	          (unsigned long long)p.length);
	cr_assert_lt(rows->n, FX_MAX_PAGES, "more rows than the test made");
	snprintf(rows->names[rows->n++], sizeof(rows->names[0]), "%s", stored->name);
	return 0;
}

/* Every stored page is the committed page of memory, and memory has no
 * other; once the slots of the pages that left are free (asynchronous:
 * the batch writer frees them), every used slot is a page's. Returns
 * the stored rows. */
static struct rows assert_store_matches_memory(const char *when)
{
	struct rows rows = {0};
	int ret = meta_page_iter(fx.m, fx.pool, 0, row_seen, &rows);

	cr_assert_eq(ret, 0, "%s: page iteration: %s", when, strerror(-ret));
	struct meta_pool_info pi = pool_info(fx.pool);
	cr_assert_eq(pi.pages, (uint64_t)rows.n,
	             "%s: memory has %llu committed pages, the store %d (lost on remount)", when,
	             (unsigned long long)pi.pages, rows.n);
	for (int i = 0; i < 200 && pi.used_slots != pi.pages; i++) {
		sleep_ms(10);
		pi = pool_info(fx.pool);
	}
	cr_assert_eq(pi.used_slots, pi.pages, "%s: %llu used slots for %llu pages", when,
	             (unsigned long long)pi.used_slots, (unsigned long long)pi.pages);
	return rows;
}

static int rows_have(const struct rows *rows, const char *name)
{
	for (int i = 0; i < rows->n; i++)
		if (strcmp(rows->names[i], name) == 0)
			return 1;
	return 0;
}

/* ---- operations that wait for the journal, run in a thread ---- */

struct op {
	pthread_t thread;
	const char *name, *to;
	struct meta_resv resv;
	uint64_t length;
	int ret;
};

static void *commit_main(void *arg)
{
	struct op *op = arg;

	op->ret = meta_page_commit(fx.m, &op->resv, op->length, op->length);
	return NULL;
}

static void *rename_main(void *arg)
{
	struct op *op = arg;

	op->ret = meta_page_rename(fx.m, fx.pool, op->name, op->to, 0);
	return NULL;
}

static void *unlink_main(void *arg)
{
	struct op *op = arg;

	op->ret = meta_page_unlink(fx.m, fx.pool, op->name);
	return NULL;
}

static void *reserve_main(void *arg)
{
	struct op *op = arg;

	op->ret = meta_page_reserve(fx.m, fx.pool, op->name, 0, &op->resv);
	return NULL;
}

static void start(struct op *op, void *(*fn)(void *))
{
	size_t before = record_queued(fx.m);
	int rc = pthread_create(&op->thread, NULL, fn, op);

	cr_assert_eq(rc, 0, "pthread_create: %s", strerror(rc));
	for (int i = 0; i < 500 && record_queued(fx.m) == before; i++)
		sleep_ms(2);
	cr_assert_eq(record_queued(fx.m), before + 1, "the operation queued no record");
}

static void join(struct op *op)
{
	pthread_join(op->thread, NULL);
}

/* Fills the pool (FX_SLOTS) with "a" first (the least recently used)
 * and fillers; returns "a". */
static struct meta_page_info fill_with_a_oldest(int fillers)
{
	struct meta_page_info a = put_page(fx.pool, "a", 100, 1);

	for (int i = 0; i < fillers; i++) {
		char name[32];
		page_name(name, sizeof(name), i);
		put_page(fx.pool, name, 100, 1);
	}
	return a;
}

/* A commit record of page_id under name, as meta_page_commit makes it. */
static struct rec commit_rec(uint64_t page_id, const char *name)
{
	struct rec r = {.type = REC_COMMIT, .pool_id = fx.pool, .page_id = page_id, .length = 100};

	r.name_len = (uint16_t)strlen(name);
	memcpy(r.name, name, r.name_len + 1u);
	return r;
}

/* Whether resolving batch lists page id among the rows its first record
 * replaces; *rc is the resolve's result, *n the candidates. */
static int replaced_lists(struct rec *batch, uint64_t id, int *rc, uint32_t *n)
{
	struct resolver rs = {0};
	int found = 0;

	*rc = record_replaced_resolve(fx.m, batch, &rs);
	*n = batch->nrepl;
	for (uint32_t i = 0; *rc == 0 && i < *n; i++)
		found |= batch->repl[i] == id;
	record_replaced_free(batch, &rs);
	return found;
}

/* Renames a's page to `to` and commits a 200-byte rewrite of it, the
 * rename queued first, while memory still names the page "a"; both
 * succeed. */
static void rename_then_rewrite(const struct meta_page_info *a, const char *to)
{
	struct op ren = {.name = "a", .to = to};
	struct op commit = {.name = "a", .length = 200};

	commit.resv = reserve_ok(fx.pool, "a", a->id);
	hold();
	start(&ren, rename_main);
	start(&commit, commit_main);
	release();
	join(&ren);
	join(&commit);
	cr_assert_eq(ren.ret, 0, "rename a -> %s: %s", to, strerror(-ren.ret));
	cr_assert_eq(commit.ret, 0, "commit of a's replacement: %s", strerror(-commit.ret));
}

/* ---- the races ---- */

/* Evictions race on a local index only: on a shared one a full pool
 * first asks the store for a chunk, and that record waits its turn. */
Test(race, replacement_committed_while_the_page_is_evicted_leaves_no_page_only_memory_has)
{
	/* One slot left for the replacement of "a", none for "new". */
	struct meta_page_info a = fill_with_a_oldest(FX_SLOTS - 2);
	struct op commit = {.name = "a", .length = 200};
	struct op evict = {.name = "new"};

	commit.resv = reserve_ok(fx.pool, "a", a.id);
	hold();
	start(&commit, commit_main);
	start(&evict, reserve_main); /* evicts "a", the oldest */
	release();
	join(&commit);
	join(&evict);
	cr_assert_eq(commit.ret, 0, "commit of a's replacement: %s", strerror(-commit.ret));
	cr_assert_eq(evict.ret, 0, "reserve of new (evicting a): %s", strerror(-evict.ret));
	commit_ok(&evict.resv, "new", 100, 1);

	lookup_missing(fx.pool, "a"); /* evicted after its replacement was queued */
	struct rows rows = assert_store_matches_memory("after the race");
	cr_assert(rows_have(&rows, "new"), "the page that evicted a is not stored");
	fx_reopen();
	lookup_missing(fx.pool, "a");
	assert_store_matches_memory("after reopen");
}

RACE(replacement_committed_while_the_page_fails_its_checksum_leaves_no_page_only_memory_has)
{
	struct meta_page_info a = put_page(fx.pool, "a", 100, 1);
	struct op commit = {.name = "a", .length = 200};

	commit.resv = reserve_ok(fx.pool, "a", a.id);
	hold();
	start(&commit, commit_main);
	meta_page_verified(fx.m, a.id, a.slot, 0); /* a reader of the old bytes */
	cr_assert_eq(record_queued(fx.m), 2, "the checksum failure queued no drop");
	release();
	join(&commit);
	cr_assert_eq(commit.ret, 0, "commit of a's replacement: %s", strerror(-commit.ret));

	lookup_missing(fx.pool, "a");
	assert_store_matches_memory("after the race");
	fx_reopen();
	lookup_missing(fx.pool, "a");
	assert_store_matches_memory("after reopen");
}

Test(race, rename_over_a_page_while_the_source_is_evicted_replaces_it_in_memory_too)
{
	fill_with_a_oldest(FX_SLOTS - 1); /* a, page-00 .. page-14: full */
	struct op ren = {.name = "a", .to = "page-00"};
	struct op evict = {.name = "new"};

	hold();
	start(&ren, rename_main);
	start(&evict, reserve_main); /* evicts "a" before its rename is applied */
	release();
	join(&ren);
	join(&evict);
	/* The store renamed a over page-00, then dropped a: both are gone. */
	cr_assert_eq(ren.ret, 0, "rename a -> page-00: %s", strerror(-ren.ret));
	cr_assert_eq(evict.ret, 0, "reserve of new (evicting a): %s", strerror(-evict.ret));
	commit_ok(&evict.resv, "new", 100, 1);

	lookup_missing(fx.pool, "a");
	lookup_missing(fx.pool, "page-00");
	assert_store_matches_memory("after the race");
	fx_reopen();
	lookup_missing(fx.pool, "page-00");
	assert_store_matches_memory("after reopen");
}

RACE(rename_of_a_page_unlinked_just_before_fails_and_keeps_the_target)
{
	put_page(fx.pool, "a", 100, 1);
	struct meta_page_info b = put_page(fx.pool, "b", 300, 3);
	struct op unl = {.name = "a"};
	struct op ren = {.name = "a", .to = "b"};

	hold();
	start(&unl, unlink_main);
	start(&ren, rename_main); /* memory still has "a" when it is queued */
	release();
	join(&unl);
	join(&ren);
	cr_assert_eq(unl.ret, 0, "unlink a: %s", strerror(-unl.ret));
	cr_assert_eq(ren.ret, -ENOENT, "rename of an unlinked page: %d (%s), want -ENOENT", ren.ret,
	             strerror(-ren.ret));

	lookup_missing(fx.pool, "a");
	struct meta_page_info p = lookup_ok(fx.pool, "b");
	cr_assert_eq(p.id, b.id, "the failed rename replaced b");
	struct rows rows = assert_store_matches_memory("after the race");
	cr_assert(rows_have(&rows, "b"), "the store lost b");
	fx_reopen();
	p = lookup_ok(fx.pool, "b");
	cr_assert_eq(p.length, 300, "b after reopen: length %llu", (unsigned long long)p.length);
	assert_store_matches_memory("after reopen");
}

RACE(rename_over_a_page_while_the_source_fails_its_checksum_replaces_it_in_memory_too)
{
	struct meta_page_info a = put_page(fx.pool, "a", 100, 1);
	put_page(fx.pool, "b", 300, 3);
	struct op ren = {.name = "a", .to = "b"};

	hold();
	start(&ren, rename_main);
	meta_page_verified(fx.m, a.id, a.slot, 0); /* a reader of a's bytes */
	cr_assert_eq(record_queued(fx.m), 2, "the checksum failure queued no drop");
	release();
	join(&ren);
	/* The store renamed a over b, then dropped a: both are gone. */
	cr_assert_eq(ren.ret, 0, "rename a -> b: %s", strerror(-ren.ret));

	lookup_missing(fx.pool, "a");
	lookup_missing(fx.pool, "b");
	assert_store_matches_memory("after the race");
	fx_reopen();
	lookup_missing(fx.pool, "b");
	assert_store_matches_memory("after reopen");
}

RACE(replacement_committed_after_a_rename_of_its_page_keeps_the_new_name)
{
	struct meta_page_info a = put_page(fx.pool, "a", 100, 1);
	struct meta_page_info b = put_page(fx.pool, "b", 300, 3);

	rename_then_rewrite(&a, "c");
	/* The bytes went to the page, which is "c" now. */
	lookup_missing(fx.pool, "a");
	struct meta_page_info c = lookup_ok(fx.pool, "c");
	cr_assert_eq(c.id, a.id, "c is page %llu, want a's %llu", (unsigned long long)c.id,
	             (unsigned long long)a.id);
	cr_assert_eq(c.length, 200, "c: length %llu, want the replacement's 200",
	             (unsigned long long)c.length);
	cr_assert_eq(lookup_ok(fx.pool, "b").id, b.id, "b changed");
	assert_store_matches_memory("after the race");
	fx_reopen();
	lookup_missing(fx.pool, "a");
	c = lookup_ok(fx.pool, "c");
	cr_assert_eq(c.length, 200, "c after reopen: length %llu", (unsigned long long)c.length);
	assert_store_matches_memory("after reopen");
}

RACE(replacement_committed_after_its_page_was_renamed_over_another_keeps_that_one_gone)
{
	struct meta_page_info a = put_page(fx.pool, "a", 100, 1);
	put_page(fx.pool, "b", 300, 3);

	rename_then_rewrite(&a, "b");
	lookup_missing(fx.pool, "a");
	struct meta_page_info p = lookup_ok(fx.pool, "b");
	cr_assert_eq(p.id, a.id, "b is page %llu, want a's %llu", (unsigned long long)p.id,
	             (unsigned long long)a.id);
	cr_assert_eq(p.length, 200, "b: length %llu", (unsigned long long)p.length);
	assert_store_matches_memory("after the race");
	fx_reopen();
	p = lookup_ok(fx.pool, "b");
	cr_assert_eq(p.length, 200, "b after reopen: length %llu", (unsigned long long)p.length);
	assert_store_matches_memory("after reopen");
}

/* A batch being written names "a" while the old page of that name waits
 * behind it to be dropped (it left memory after the batch was taken):
 * the batch deletes its row itself, or a crash before the drop's own
 * transaction would leave two rows named "a" (which the load refuses). */
Test(race, a_batch_deletes_the_row_of_its_name_whose_drop_waits_behind_it)
{
	struct meta_page_info a = put_page(fx.pool, "a", 100, 1);
	struct rec r = commit_rec(a.id + 1000, "a");
	uint32_t n;
	int rc;

	hold();
	meta_page_verified(fx.m, a.id, a.slot, 0); /* leaves memory; its drop queues */
	cr_assert_eq(record_queued(fx.m), 1, "the checksum failure queued no drop");
	int found = replaced_lists(&r, a.id, &rc, &n);
	release(); /* (before any assertion: the fini waits for it) */
	cr_assert_eq(rc, 0, "record_replaced_resolve: %s", strerror(-rc));
	cr_assert(found, "the commit of \"a\" does not delete the row of page %llu (%u candidates)",
	          (unsigned long long)a.id, n);
}

RACE(replacement_of_a_renamed_page_dropped_meanwhile_leaves_its_old_name_to_the_next)
{
	struct meta_page_info a = put_page(fx.pool, "a", 100, 1);
	struct meta_page_info b = put_page(fx.pool, "b", 300, 3);
	struct op ren1 = {.name = "a", .to = "c"};
	struct op ren2 = {.name = "b", .to = "a"};
	struct op commit = {.name = "a", .length = 200};

	commit.resv = reserve_ok(fx.pool, "a", a.id);
	hold();
	start(&ren1, rename_main);                 /* a -> c */
	start(&ren2, rename_main);                 /* then b -> a */
	start(&commit, commit_main);               /* memory still names a's page "a" */
	meta_page_verified(fx.m, a.id, a.slot, 0); /* and drops it */
	cr_assert_eq(record_queued(fx.m), 4, "the checksum failure queued no drop");
	release();
	join(&ren1);
	join(&ren2);
	join(&commit);
	cr_assert_eq(ren1.ret, 0, "rename a -> c: %s", strerror(-ren1.ret));
	cr_assert_eq(ren2.ret, 0, "rename b -> a: %s", strerror(-ren2.ret));
	cr_assert_eq(commit.ret, 0, "commit of a's replacement: %s", strerror(-commit.ret));

	/* The replacement went to the page called "c" by then, which the
	 * drop removed; "a" is b's page. */
	lookup_missing(fx.pool, "c");
	cr_assert_eq(lookup_ok(fx.pool, "a").id, b.id, "\"a\" is not b's page");
	assert_store_matches_memory("after the race");
	fx_reopen();
	cr_assert_eq(lookup_ok(fx.pool, "a").id, b.id, "\"a\" after reopen is not b's page");
	assert_store_matches_memory("after reopen");
}

RACE(replacement_of_a_page_unlinked_meanwhile_goes_nowhere)
{
	struct meta_page_info a = put_page(fx.pool, "a", 100, 1);
	struct op unl = {.name = "a"};
	struct op commit = {.name = "a", .length = 200};

	commit.resv = reserve_ok(fx.pool, "a", a.id);
	hold();
	start(&unl, unlink_main);
	start(&commit, commit_main); /* memory still has "a" */
	release();
	join(&unl);
	join(&commit);
	cr_assert_eq(unl.ret, 0, "unlink a: %s", strerror(-unl.ret));
	/* As a write to an unlinked file: it succeeds, and nothing shows. */
	cr_assert_eq(commit.ret, 0, "commit of an unlinked page's replacement: %s",
	             strerror(-commit.ret));

	lookup_missing(fx.pool, "a");
	struct rows rows = assert_store_matches_memory("after the race");
	cr_assert_eq(rows.n, 0, "%d pages stored, want none", rows.n);
	fx_reopen();
	lookup_missing(fx.pool, "a");
	assert_store_matches_memory("after reopen");
}

RACE(replacement_of_a_page_renamed_over_meanwhile_leaves_the_new_page)
{
	struct meta_page_info a = put_page(fx.pool, "a", 100, 1);
	struct meta_page_info b = put_page(fx.pool, "b", 300, 3);
	struct op ren = {.name = "b", .to = "a"};
	struct op commit = {.name = "a", .length = 200};

	commit.resv = reserve_ok(fx.pool, "a", a.id);
	hold();
	start(&ren, rename_main);    /* b over a */
	start(&commit, commit_main); /* memory still has a's page as "a" */
	release();
	join(&ren);
	join(&commit);
	cr_assert_eq(ren.ret, 0, "rename b -> a: %s", strerror(-ren.ret));
	cr_assert_eq(commit.ret, 0, "commit of a replaced page's replacement: %s",
	             strerror(-commit.ret));

	struct meta_page_info p = lookup_ok(fx.pool, "a");
	cr_assert_eq(p.id, b.id, "\"a\" is page %llu, want b's %llu", (unsigned long long)p.id,
	             (unsigned long long)b.id);
	cr_assert_eq(p.length, 300, "\"a\": length %llu, want b's 300",
	             (unsigned long long)p.length);
	assert_store_matches_memory("after the race");
	fx_reopen();
	cr_assert_eq(lookup_ok(fx.pool, "a").id, b.id, "\"a\" after reopen is not b's page");
	assert_store_matches_memory("after reopen");
}

/* The same when the drop is in the batch, after the record: the record is
 * applied first and would meet the row (on a schema 1 index, whose name
 * index is unique, it would fail). */
Test(race, a_batch_deletes_the_row_of_its_name_whose_drop_comes_after_it_in_the_batch)
{
	const uint64_t gone = 424242; /* left memory: only its drop names it */
	struct rec r = commit_rec(1000, "a");
	struct rec drop = {.type = REC_DROP, .pool_id = fx.pool, .page_id = gone};
	uint32_t n;
	int rc;

	drop.drop_hash = index_name_hash(fx.pool, "a", 1);
	r.next = &drop;
	int found = replaced_lists(&r, gone, &rc, &n);
	cr_assert_eq(rc, 0, "record_replaced_resolve: %s", strerror(-rc));
	cr_assert(found, "the commit of \"a\" does not delete the row of page %llu (%u candidates)",
	          (unsigned long long)gone, n);
}

/* Two rewrites of one page applied after it left memory, its drop still
 * queued: the drop frees the last one's slot (the row names it until the
 * drop), the first one's is free at once (no row names it any more). The
 * records are applied by hand, as the batch writer would, since the
 * drop must wait behind their batch. */
Test(race, two_rewrites_before_one_drop_leave_only_the_last_slot_to_the_drop)
{
	struct meta_page_info a = put_page(fx.pool, "a", 100, 1);
	struct meta_resv r1 = reserve_ok(fx.pool, "a", a.id);
	struct meta_resv r2 = reserve_ok(fx.pool, "a", a.id);
	struct rec c1 = commit_rec(a.id, "a");
	struct rec c2;
	struct dropped *drops = NULL;

	c1.replace = c1.in_place = 1;
	c2 = c1;
	c1.slot = r1.slot;
	c2.slot = r2.slot;
	hold();
	meta_page_verified(fx.m, a.id, a.slot, 0); /* leaves memory; its drop queues */
	index_lock(fx.m);
	record_apply(fx.m, &c1, &drops);
	record_apply(fx.m, &c2, &drops);
	struct rec *d = record_drop_after(fx.m, &c2);
	int has = d && d->has_extra;
	uint64_t extra = has ? d->extra_slot : 0;
	struct pool *pool = index_pool_by_id(fx.m, fx.pool);
	int first_free = index_slot_mark(pool, r1.slot) == 0; /* (a probe: marks a free slot) */
	if (first_free)
		index_slot_release(pool, r1.slot);
	int last_taken = index_slot_mark(pool, r2.slot) == -EEXIST;
	if (!last_taken)
		index_slot_release(pool, r2.slot);
	index_unlock(fx.m);
	index_drops_notify(fx.m, drops);
	release();
	meta_page_abort(fx.m, &r1); /* (the reservations' counts; slots already free) */
	meta_page_abort(fx.m, &r2);

	cr_assert(has, "the drop of page %llu carries no rewrite's slot", (unsigned long long)a.id);
	cr_assert_eq(extra, r2.slot, "the drop frees slot %llu, want the last rewrite's %llu",
	             (unsigned long long)extra, (unsigned long long)r2.slot);
	cr_assert(first_free, "the first rewrite's slot %llu is still taken",
	          (unsigned long long)r1.slot);
	cr_assert(last_taken, "the last rewrite's slot %llu is free while the row names it",
	          (unsigned long long)r2.slot);
	lookup_missing(fx.pool, "a");
	uint64_t used = 1; /* the drop frees its page's slot and the last rewrite's */
	for (int i = 0; i < 200 && (used = pool_info(fx.pool).used_slots) != 0; i++)
		sleep_ms(10);
	cr_assert_eq(used, 0, "%llu slots still used after the drop", (unsigned long long)used);
	assert_store_matches_memory("after the drop");
}
