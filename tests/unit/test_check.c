/*
 * test_check.c - the index's invariants as code (meta/index/check.c) and
 * the lock preconditions that run (meta/lock.h).
 *
 * index_check must pass on every index the engine builds (pages put,
 * evicted, pinned, unlinked, reopened) and name the broken invariant on
 * one a test breaks by hand. The lock assertions abort, so those tests
 * run in Criterion's forked child and expect SIGABRT; they exist in
 * checked builds only (PAGEFS_CHECKS: the sanitizer and Debug builds).
 */
#include "fixture.h"

#include "meta/index.h"
#include "meta/record.h"

#include <signal.h>

TestSuite(check, .init = fx_setup, .fini = fx_teardown, .timeout = 30);

static int check_now(char *why, size_t len)
{
	index_lock(fx.m);
	int rc = index_check(fx.m, why, len);
	index_unlock(fx.m);
	return rc;
}

static void assert_clean(const char *when)
{
	char why[256];
	int rc = check_now(why, sizeof(why));

	cr_assert_eq(rc, 0, "%s: %s", when, why);
}

static struct pool *the_pool(void)
{
	struct pool *p = index_pool_by_id(fx.m, fx.pool);

	cr_assert_not_null(p, "pool %u not in the index", fx.pool);
	return p;
}

Test(check, holds_through_puts_evictions_pins_unlinks_and_a_reopen)
{
	struct meta_page_info pages[FX_SLOTS + 4];

	assert_clean("empty pool");
	put_pages(fx.pool, FX_SLOTS + 4, pages); /* four evictions */
	assert_clean("after evictions");
	struct meta_page_info pinned = pin_ok(pages[FX_SLOTS + 3].id);
	cr_assert_eq(meta_page_unlink(fx.m, fx.pool, pinned.name), 0, "unlink %s", pinned.name);
	assert_clean("pinned page unlinked (a zombie slot)");
	meta_slot_unpin(fx.m, fx.pool, pinned.slot);
	assert_clean("zombie unpinned");
	fx_reopen();
	assert_clean("after a reopen");
}

Test(check, names_a_slot_count_that_disagrees_with_the_bitmap)
{
	struct meta_page_info pages[3];
	char why[256];

	put_pages(fx.pool, 3, pages);
	index_lock(fx.m);
	the_pool()->nused++;
	int rc = index_check(fx.m, why, sizeof(why));
	the_pool()->nused--;
	index_unlock(fx.m);
	cr_assert_eq(rc, -EUCLEAN);
	cr_assert(strstr(why, "3 slot bits set, nused says 4"), "reason: %s", why);
}

Test(check, names_a_broken_lru_link)
{
	struct meta_page_info pages[3];
	char why[256];

	put_pages(fx.pool, 3, pages);
	index_lock(fx.m);
	struct page *head = the_pool()->lru_head, *next = page_at(head->lru_next);
	uint32_t saved = next->lru_prev;
	next->lru_prev = 0;
	int rc = index_check(fx.m, why, sizeof(why));
	next->lru_prev = saved;
	index_unlock(fx.m);
	cr_assert_eq(rc, -EUCLEAN);
	cr_assert(strstr(why, "LRU link back is broken"), "reason: %s", why);
}

Test(check, names_a_page_whose_slot_is_free_in_the_bitmap)
{
	struct meta_page_info pages[2];
	char why[256];

	put_pages(fx.pool, 2, pages);
	index_lock(fx.m);
	struct pool *p = the_pool();
	uint64_t slot = p->lru_head->slot;
	p->bits[slot / 64] &= ~(1ULL << (slot % 64));
	p->nused--;
	int rc = index_check(fx.m, why, sizeof(why));
	p->bits[slot / 64] |= 1ULL << (slot % 64);
	p->nused++;
	index_unlock(fx.m);
	cr_assert_eq(rc, -EUCLEAN);
	cr_assert(strstr(why, "is free in the bitmap"), "reason: %s", why);
}

Test(check, names_a_pin_count_that_disagrees)
{
	struct meta_page_info pages[1];
	char why[256];

	put_pages(fx.pool, 1, pages);
	pin_ok(pages[0].id);
	index_lock(fx.m);
	the_pool()->npins++;
	int rc = index_check(fx.m, why, sizeof(why));
	the_pool()->npins--;
	index_unlock(fx.m);
	cr_assert_eq(rc, -EUCLEAN);
	cr_assert(strstr(why, "1 pins (0 zombies), the counts say 2 (0)"), "reason: %s", why);
}

#if LOCK_CHECKS
/* A checked build aborts when a function that needs meta.lock runs
 * without it (record_drop_after asserts it), and when one that must not
 * hold it runs with it (record_wait). The abort skips the suite's fini:
 * the test's directory goes first (the open index keeps its files). */
static void remove_dir_before_abort(void)
{
	cr_assert_eq(nftw(fx.dir, fx_rm_entry, 16, FTW_DEPTH | FTW_PHYS), 0);
}

Test(check, a_call_without_meta_lock_aborts_in_a_checked_build, .signal = SIGABRT)
{
	struct rec r = {.type = REC_TOUCH};

	remove_dir_before_abort();
	(void)record_drop_after(fx.m, &r);
}

Test(check, waiting_for_a_record_with_meta_lock_held_aborts_in_a_checked_build, .signal = SIGABRT)
{
	struct rec *r = record_new(REC_SETTING);
	cr_assert_not_null(r);
	r->waited = 1;
	remove_dir_before_abort();
	index_lock(fx.m);
	(void)record_wait(fx.m, r);
}
#endif

Test(check, holding_meta_lock_passes_the_assertion)
{
	index_lock(fx.m);
	index_assert_locked(fx.m);
	index_unlock(fx.m);
	index_assert_unlocked(fx.m);
	cr_assert(1, "no abort");
}
