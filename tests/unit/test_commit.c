/*
 * test_commit.c - the life of one page: reserve, commit or abort,
 * replacement (same name, O_TRUNC, rename over) and unlink.
 *
 * The rules under test: a page is invisible until its commit returns; a
 * commit, rename or unlink replaces atomically; and a slot that a reader
 * still has pinned is never handed to another page.
 */
#include "fixture.h"

#include <pthread.h>

TestSuite(commit, .init = fx_setup, .fini = fx_teardown, .timeout = 30);
TestSuite(commit_noevict, .init = fx_setup_noevict, .fini = fx_teardown, .timeout = 30);

static void assert_page_gone(uint64_t page_id, const char *what)
{
	struct meta_page_info p;
	int ret = meta_page_get(fx.m, page_id, &p);

	cr_assert_eq(ret, -ENOENT, "%s: page %llu still exists (get = %d, name \"%s\")", what,
	             (unsigned long long)page_id, ret, ret == 0 ? p.name : "");
}

static void assert_usage(uint64_t pages, uint64_t used_slots, uint64_t bytes, const char *when)
{
	struct meta_pool_info pi = pool_info(fx.pool);

	cr_assert_eq(pi.pages, pages, "%s: %llu pages, want %llu", when,
	             (unsigned long long)pi.pages, (unsigned long long)pages);
	cr_assert_eq(pi.used_slots, used_slots, "%s: %llu used slots, want %llu", when,
	             (unsigned long long)pi.used_slots, (unsigned long long)used_slots);
	cr_assert_eq(pi.bytes, bytes, "%s: %llu bytes, want %llu", when,
	             (unsigned long long)pi.bytes, (unsigned long long)bytes);
}

static void rename_ok(const char *from, const char *to)
{
	int ret = meta_page_rename(fx.m, fx.pool, from, to, 0);

	cr_assert_eq(ret, 0, "rename %s -> %s: %s", from, to, strerror(-ret));
}

static void unlink_ok(const char *name)
{
	int ret = meta_page_unlink(fx.m, fx.pool, name);

	cr_assert_eq(ret, 0, "unlink %s: %s", name, strerror(-ret));
}

static int64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- reserve, commit, abort ---- */

Test(commit, reserved_page_is_invisible_until_commit)
{
	struct meta_resv r = reserve_ok(fx.pool, "a", 0);

	cr_assert_neq(r.page_id, 0, "reservation without a page id");
	cr_assert_eq(lookup_missing(fx.pool, "a"), 1, "lookup of a name being written: pending");
	assert_usage(0, 1, 0, "after reserve");

	struct meta_page_info g;
	int ret = meta_page_get(fx.m, r.page_id, &g);
	cr_assert_eq(ret, 0, "get of a page being written: %s", strerror(-ret));
	cr_assert_eq(g.committed, 0, "a page being written reads as committed");
	cr_assert_eq(g.slot, r.slot, "get: slot %llu, reserved %llu", (unsigned long long)g.slot,
	             (unsigned long long)r.slot);

	commit_ok(&r, "a", 1234, 0xfeedfacecafebeefULL);
	struct meta_page_info p = lookup_ok(fx.pool, "a");
	cr_assert_eq(p.id, r.page_id, "committed id %llu, reserved %llu", (unsigned long long)p.id,
	             (unsigned long long)r.page_id);
	cr_assert_eq(p.pool_id, fx.pool, "committed into pool %u", p.pool_id);
	cr_assert_eq(p.slot, r.slot, "committed slot %llu, reserved %llu",
	             (unsigned long long)p.slot, (unsigned long long)r.slot);
	cr_assert_eq(p.length, 1234, "length %llu", (unsigned long long)p.length);
	cr_assert(p.has_checksum, "committed page has no checksum");
	cr_assert_eq(p.checksum, 0xfeedfacecafebeefULL, "checksum %llx",
	             (unsigned long long)p.checksum);
	assert_usage(1, 1, 1234, "after commit");
}

Test(commit, pending_flag_clears_once_the_page_is_committed)
{
	struct meta_page_info p;
	int pending = -1;
	struct meta_resv r = reserve_ok(fx.pool, "a", 0);

	commit_ok(&r, "a", 1, 1);
	int ret = meta_page_lookup(fx.m, fx.pool, "a", &p, &pending);
	cr_assert_eq(ret, 0, "lookup a: %s", strerror(-ret));
	cr_assert_eq(pending, 0, "committed page with no other writer reports pending");
}

Test(commit, commit_time_becomes_mtime)
{
	struct meta_resv r = reserve_ok(fx.pool, "a", 0);
	int64_t before = realtime_ns();

	commit_ok(&r, "a", 1, 1);
	int64_t after = realtime_ns();
	struct meta_page_info p = lookup_ok(fx.pool, "a");
	cr_assert(p.mtime_ns >= before - META_MTIME_GRAIN_NS && p.mtime_ns <= after,
	          "mtime %lld not within the commit call [%lld, %lld]", (long long)p.mtime_ns,
	          (long long)before, (long long)after);
}

Test(commit_noevict, abort_gives_the_slot_back)
{
	put_pages(fx.pool, FX_SLOTS - 1, NULL);
	struct meta_resv r = reserve_ok(fx.pool, "a", 0);
	assert_reserve_fails(fx.pool, "b", -ENOSPC);

	meta_page_abort(fx.m, &r);
	cr_assert_eq(lookup_missing(fx.pool, "a"), 0, "aborted name still has a writer");
	assert_page_gone(r.page_id, "after abort");
	cr_assert_eq(pool_info(fx.pool).used_slots, FX_SLOTS - 1, "abort kept its slot");

	struct meta_resv again = reserve_ok(fx.pool, "b", 0);
	cr_assert_eq(again.slot, r.slot, "new reservation got slot %llu, the aborted one is %llu",
	             (unsigned long long)again.slot, (unsigned long long)r.slot);
}

Test(commit, aborted_name_can_be_created_again)
{
	struct meta_resv r = reserve_ok(fx.pool, "a", 0);

	meta_page_abort(fx.m, &r);
	struct meta_page_info p = put_page(fx.pool, "a", 7, 7);
	cr_assert_neq(p.id, r.page_id, "the aborted page's id %llu was given to a new page",
	              (unsigned long long)p.id);
	assert_usage(1, 1, 7, "after abort and create");
}

Test(commit, page_may_fill_its_whole_slot)
{
	struct meta_resv r = reserve_ok(fx.pool, "a", 0);

	commit_ok(&r, "a", r.slot_size, 1);
	cr_assert_eq(lookup_ok(fx.pool, "a").length, r.slot_size, "full-slot page length");
}

Test(commit, commit_longer_than_the_slot_fails_and_gives_the_slot_back)
{
	struct meta_resv r = reserve_ok(fx.pool, "a", 0);
	int ret = meta_page_commit(fx.m, &r, r.slot_size + 1, 1);

	cr_assert_eq(ret, -EFBIG, "commit of %llu bytes into a %llu-byte slot: %d, want -EFBIG",
	             (unsigned long long)r.slot_size + 1, (unsigned long long)r.slot_size, ret);
	/* meta.h: on error nothing was published and the slot was given back. */
	cr_assert_eq(lookup_missing(fx.pool, "a"), 0, "failed commit left a writer behind");
	assert_usage(0, 0, 0, "after a failed commit");
}

/* ---- replacement by name ---- */

Test(commit, commit_replaces_a_committed_page_of_the_same_name)
{
	struct meta_page_info old = put_page(fx.pool, "a", 100, 1);
	struct meta_resv r = reserve_ok(fx.pool, "a", 0);

	cr_assert_neq(r.slot, old.slot, "new writer of a committed name got its slot");
	cr_assert_neq(r.page_id, old.id, "new writer of a committed name got its id");
	struct meta_page_info still = lookup_ok(fx.pool, "a");
	cr_assert_eq(still.id, old.id, "old page must stay visible until the commit");
	cr_assert_eq(still.length, 100, "old length must stay until the commit");

	commit_ok(&r, "a", 200, 2);
	struct meta_page_info p = lookup_ok(fx.pool, "a");
	cr_assert_eq(p.id, r.page_id, "lookup after replace: id %llu, want %llu",
	             (unsigned long long)p.id, (unsigned long long)r.page_id);
	cr_assert_eq(p.slot, r.slot, "lookup after replace: slot %llu, want %llu",
	             (unsigned long long)p.slot, (unsigned long long)r.slot);
	cr_assert_eq(p.length, 200, "lookup after replace: length %llu",
	             (unsigned long long)p.length);
	cr_assert_eq(p.checksum, 2, "lookup after replace: checksum %llu",
	             (unsigned long long)p.checksum);
	assert_page_gone(old.id, "replaced page");
	assert_usage(1, 1, 200, "after replace");
}

Test(commit, last_commit_wins_between_two_writers_of_one_name)
{
	struct meta_resv a = reserve_ok(fx.pool, "k", 0);
	struct meta_resv b = reserve_ok(fx.pool, "k", 0);

	cr_assert_neq(a.slot, b.slot, "two writers of one name share slot %llu",
	              (unsigned long long)a.slot);
	cr_assert_neq(a.page_id, b.page_id, "two writers of one name share a page id");
	commit_ok(&b, "k (second writer)", 22, 22);
	commit_ok(&a, "k (first writer)", 11, 11);

	struct meta_page_info p = lookup_ok(fx.pool, "k");
	cr_assert_eq(p.id, a.page_id, "the page committed last must win");
	cr_assert_eq(p.length, 11, "length %llu, want the last commit's 11",
	             (unsigned long long)p.length);
	assert_page_gone(b.page_id, "page replaced by a later commit");
	assert_usage(1, 1, 11, "after both commits");
}

Test(commit_noevict, replaced_page_slot_is_not_reused_while_pinned)
{
	struct meta_page_info old = put_page(fx.pool, "a", 100, 1);
	struct meta_page_info pinned = pin_ok(old.id);

	cr_assert_eq(pinned.slot, old.slot, "pin returned slot %llu, page is in %llu",
	             (unsigned long long)pinned.slot, (unsigned long long)old.slot);
	put_pages(fx.pool, FX_SLOTS - 2, NULL);
	struct meta_resv r = reserve_ok(fx.pool, "a", 0);
	commit_ok(&r, "a", 200, 2);

	/* All slots but the old one hold pages; the old one has a reader. */
	assert_usage(FX_SLOTS - 1, FX_SLOTS,
	             (FX_SLOTS - 2) * 100 + (FX_SLOTS - 2) * (FX_SLOTS - 3) / 2 + 200,
	             "replaced page still pinned");
	assert_reserve_fails(fx.pool, "b", -ENOSPC);

	meta_slot_unpin(fx.m, fx.pool, old.slot);
	cr_assert_eq(pool_info(fx.pool).used_slots, FX_SLOTS - 1,
	             "the last unpin must free the replaced page's slot");
	struct meta_resv b = reserve_ok(fx.pool, "b", 0);
	cr_assert_eq(b.slot, old.slot, "got slot %llu, the only free one is %llu",
	             (unsigned long long)b.slot, (unsigned long long)old.slot);
}

Test(commit, eviction_never_hands_out_a_pinned_replaced_slot)
{
	struct meta_page_info old = put_page(fx.pool, "a", 100, 1);
	struct meta_page_info others[FX_SLOTS];

	pin_ok(old.id);
	put_pages(fx.pool, FX_SLOTS - 2, others);
	struct meta_resv r = reserve_ok(fx.pool, "a", 0);
	commit_ok(&r, "a", 200, 2);

	/* Full: the next reservation must evict page-00, not reuse the old slot. */
	struct meta_resv b = reserve_ok(fx.pool, "b", 0);
	cr_assert_neq(b.slot, old.slot, "the replaced page's reader lost slot %llu",
	              (unsigned long long)old.slot);
	cr_assert_eq(b.slot, others[0].slot, "got slot %llu, want %llu of the LRU page %s",
	             (unsigned long long)b.slot, (unsigned long long)others[0].slot,
	             others[0].name);
	meta_slot_unpin(fx.m, fx.pool, old.slot);
}

/* ---- replacement in place (open with O_TRUNC) ---- */

Test(commit, truncate_replace_keeps_the_id_and_moves_to_a_new_slot)
{
	struct meta_page_info old = put_page(fx.pool, "a", 100, 1);

	sleep_ms(5);
	struct meta_resv r = reserve_ok(fx.pool, "a", old.id);
	cr_assert_eq(r.replace, 1, "a replacement reservation must say so");
	cr_assert_eq(r.page_id, old.id, "replacement reserved for page %llu, want %llu",
	             (unsigned long long)r.page_id, (unsigned long long)old.id);
	cr_assert_neq(r.slot, old.slot, "replacement must write into a new slot");

	struct meta_page_info still = lookup_ok(fx.pool, "a");
	cr_assert_eq(still.slot, old.slot, "old bytes must stay visible until the commit");
	cr_assert_eq(still.length, 100, "old length must stay visible until the commit");

	commit_ok(&r, "a", 200, 2);
	struct meta_page_info p = lookup_ok(fx.pool, "a");
	cr_assert_eq(p.id, old.id, "O_TRUNC replace changed the id %llu -> %llu",
	             (unsigned long long)old.id, (unsigned long long)p.id);
	cr_assert_eq(p.slot, r.slot, "slot %llu, want the new %llu", (unsigned long long)p.slot,
	             (unsigned long long)r.slot);
	cr_assert_eq(p.length, 200, "length %llu", (unsigned long long)p.length);
	cr_assert_eq(p.checksum, 2, "checksum %llu", (unsigned long long)p.checksum);
	cr_assert_gt(p.mtime_ns, old.mtime_ns, "replacement must move mtime forward");
	cr_assert_eq(p.version, old.version + 1, "O_TRUNC replace: version %u, want %u", p.version,
	             old.version + 1);
	assert_usage(1, 1, 200, "after O_TRUNC replace");
}

Test(commit, aborted_truncate_leaves_the_old_page_intact)
{
	struct meta_page_info old = put_page(fx.pool, "a", 100, 1);
	struct meta_resv r = reserve_ok(fx.pool, "a", old.id);

	meta_page_abort(fx.m, &r);
	struct meta_page_info p = lookup_ok(fx.pool, "a");
	cr_assert_eq(p.id, old.id, "aborted replace changed the id");
	cr_assert_eq(p.slot, old.slot, "aborted replace moved the page to slot %llu",
	             (unsigned long long)p.slot);
	cr_assert_eq(p.length, 100, "aborted replace changed the length");
	cr_assert_eq(p.checksum, 1, "aborted replace changed the checksum");
	cr_assert_eq(p.version, old.version, "aborted replace bumped the version");
	assert_usage(1, 1, 100, "after aborted replace");
}

Test(commit, truncate_replace_of_a_missing_page_fails_with_enoent)
{
	struct meta_page_info p = put_page(fx.pool, "a", 1, 1);
	struct meta_resv r;

	unlink_ok("a");
	int ret = meta_page_reserve(fx.m, fx.pool, "a", p.id, &r);
	cr_assert_eq(ret, -ENOENT, "replace of unlinked page %llu: %d (%s), want -ENOENT",
	             (unsigned long long)p.id, ret, ret ? strerror(-ret) : "ok");
	ret = meta_page_reserve(fx.m, fx.pool, "b", 987654321, &r);
	cr_assert_eq(ret, -ENOENT, "replace of a never-existing page: %d, want -ENOENT", ret);
	assert_usage(0, 0, 0, "after failed replacements");
}

Test(commit_noevict, truncate_replace_frees_the_old_slot_after_the_last_unpin)
{
	struct meta_page_info old = put_page(fx.pool, "a", 100, 1);

	pin_ok(old.id);
	pin_ok(old.id);
	put_pages(fx.pool, FX_SLOTS - 2, NULL);
	struct meta_resv r = reserve_ok(fx.pool, "a", old.id);
	commit_ok(&r, "a", 200, 2);
	assert_reserve_fails(fx.pool, "b", -ENOSPC);

	meta_slot_unpin(fx.m, fx.pool, old.slot);
	assert_reserve_fails(fx.pool, "b", -ENOSPC);
	meta_slot_unpin(fx.m, fx.pool, old.slot);
	struct meta_resv b = reserve_ok(fx.pool, "b", 0);
	cr_assert_eq(b.slot, old.slot, "got slot %llu, the freed one is %llu",
	             (unsigned long long)b.slot, (unsigned long long)old.slot);
}

/* ---- rename ---- */

Test(commit, rename_rekeys_the_page_keeping_id_and_slot)
{
	struct meta_page_info tmp = put_page(fx.pool, "k.bin.tmp.1.2.uuid", 300, 3);

	pin_ok(tmp.id); /* opened once: a later open is its second */
	meta_slot_unpin(fx.m, fx.pool, tmp.slot);
	rename_ok("k.bin.tmp.1.2.uuid", "k.bin");
	cr_assert_eq(lookup_missing(fx.pool, "k.bin.tmp.1.2.uuid"), 0, "old name has a writer");
	struct meta_page_info p = lookup_ok(fx.pool, "k.bin");
	cr_assert_eq(p.id, tmp.id, "rename changed the id %llu -> %llu", (unsigned long long)tmp.id,
	             (unsigned long long)p.id);
	cr_assert_eq(p.slot, tmp.slot, "rename moved the data from slot %llu to %llu",
	             (unsigned long long)tmp.slot, (unsigned long long)p.slot);
	cr_assert_eq(p.length, 300, "rename changed the length");
	cr_assert_eq(p.checksum, 3, "rename changed the checksum");
	cr_assert(p.has_checksum, "rename lost the checksum");
	struct meta_page_info again = pin_ok(tmp.id);
	cr_assert(again.opened, "rename forgot the page was opened");
	meta_slot_unpin(fx.m, fx.pool, tmp.slot);
	assert_usage(1, 1, 300, "after rename");
}

Test(commit, rename_replaces_the_target_atomically)
{
	struct meta_page_info target = put_page(fx.pool, "k.bin", 100, 1);
	struct meta_page_info tmp = put_page(fx.pool, "k.bin.tmp", 200, 2);

	rename_ok("k.bin.tmp", "k.bin");
	struct meta_page_info p = lookup_ok(fx.pool, "k.bin");
	cr_assert_eq(p.id, tmp.id, "target has id %llu, want the renamed %llu",
	             (unsigned long long)p.id, (unsigned long long)tmp.id);
	cr_assert_eq(p.slot, tmp.slot, "target has slot %llu, want %llu",
	             (unsigned long long)p.slot, (unsigned long long)tmp.slot);
	cr_assert_eq(lookup_missing(fx.pool, "k.bin.tmp"), 0, "source name has a writer");
	assert_page_gone(target.id, "replaced rename target");
	assert_usage(1, 1, 200, "after rename over a page");
}

Test(commit, rename_noreplace_fails_with_eexist_and_changes_nothing)
{
	struct meta_page_info a = put_page(fx.pool, "a", 100, 1);
	struct meta_page_info b = put_page(fx.pool, "b", 200, 2);

	int ret = meta_page_rename(fx.m, fx.pool, "a", "b", 1);
	cr_assert_eq(ret, -EEXIST, "rename noreplace onto a page: %d (%s), want -EEXIST", ret,
	             ret ? strerror(-ret) : "ok");
	cr_assert_eq(lookup_ok(fx.pool, "a").id, a.id, "source changed");
	cr_assert_eq(lookup_ok(fx.pool, "b").id, b.id, "target changed");
	assert_usage(2, 2, 300, "after refused rename");

	ret = meta_page_rename(fx.m, fx.pool, "a", "c", 1);
	cr_assert_eq(ret, 0, "rename noreplace onto a free name: %s", strerror(-ret));
	cr_assert_eq(lookup_ok(fx.pool, "c").id, a.id, "noreplace rename lost the page");
}

Test(commit, rename_of_a_missing_page_fails_with_enoent)
{
	put_page(fx.pool, "b", 1, 1);
	int ret = meta_page_rename(fx.m, fx.pool, "nope", "b", 0);

	cr_assert_eq(ret, -ENOENT, "rename of a missing page: %d, want -ENOENT", ret);
	lookup_ok(fx.pool, "b");
	assert_usage(1, 1, 1, "after failed rename");
}

Test(commit, rename_of_a_page_still_being_written_fails_with_enoent)
{
	struct meta_resv r = reserve_ok(fx.pool, "a", 0);
	int ret = meta_page_rename(fx.m, fx.pool, "a", "b", 0);

	cr_assert_eq(ret, -ENOENT, "rename of an uncommitted page: %d, want -ENOENT", ret);
	cr_assert_eq(lookup_missing(fx.pool, "b"), 0, "rename target appeared");
	commit_ok(&r, "a", 1, 1);
	lookup_ok(fx.pool, "a");
}

Test(commit, rename_onto_itself_keeps_the_page)
{
	struct meta_page_info a = put_page(fx.pool, "a", 100, 1);
	int ret = meta_page_rename(fx.m, fx.pool, "a", "a", 0);

	cr_assert_eq(ret, 0, "rename a -> a: %s", strerror(-ret));
	struct meta_page_info p = lookup_ok(fx.pool, "a");
	cr_assert_eq(p.id, a.id, "rename onto itself changed the id");
	cr_assert_eq(p.slot, a.slot, "rename onto itself changed the slot");
	assert_usage(1, 1, 100, "after rename onto itself");
}

Test(commit_noevict, rename_over_a_pinned_target_frees_its_slot_after_unpin)
{
	struct meta_page_info target = put_page(fx.pool, "k", 100, 1);

	pin_ok(target.id);
	put_pages(fx.pool, FX_SLOTS - 2, NULL);
	put_page(fx.pool, "k.tmp", 200, 2);
	rename_ok("k.tmp", "k");
	assert_reserve_fails(fx.pool, "x", -ENOSPC);
	meta_slot_unpin(fx.m, fx.pool, target.slot);
	struct meta_resv r = reserve_ok(fx.pool, "x", 0);
	cr_assert_eq(r.slot, target.slot, "got slot %llu, the freed one is %llu",
	             (unsigned long long)r.slot, (unsigned long long)target.slot);
}

Test(commit, sglang_temp_then_rename_cycle_keeps_one_page)
{
	uint64_t last_id = 0;

	for (int i = 0; i < 3 * FX_SLOTS; i++) {
		char tmp[64];

		snprintf(tmp, sizeof(tmp), "key.bin.tmp.%d.%d.uuid", 1000 + i, i);
		last_id = put_page(fx.pool, tmp, 10 + (uint64_t)i, (uint64_t)i).id;
		rename_ok(tmp, "key.bin");
		assert_usage(1, 1, 10 + (uint64_t)i, tmp);
	}
	struct meta_page_info p = lookup_ok(fx.pool, "key.bin");
	cr_assert_eq(p.id, last_id, "key.bin is page %llu, want the last written %llu",
	             (unsigned long long)p.id, (unsigned long long)last_id);
	cr_assert_eq(pool_info(fx.pool).evictions, 0, "renames over a page caused evictions");
}

/* ---- unlink ---- */

Test(commit, unlink_removes_the_page_and_frees_its_slot)
{
	struct meta_page_info a = put_page(fx.pool, "a", 100, 1);

	unlink_ok("a");
	cr_assert_eq(lookup_missing(fx.pool, "a"), 0, "unlinked name has a writer");
	assert_page_gone(a.id, "unlinked page");
	assert_usage(0, 0, 0, "after unlink");
	int ret = meta_page_unlink(fx.m, fx.pool, "a");
	cr_assert_eq(ret, -ENOENT, "second unlink: %d, want -ENOENT", ret);

	struct meta_page_info p;
	int verify;
	ret = meta_page_pin(fx.m, a.id, &p, &verify);
	cr_assert_eq(ret, -ENOENT, "pin of an unlinked page: %d, want -ENOENT", ret);
}

Test(commit, unlink_of_a_page_still_being_written_fails_with_enoent)
{
	struct meta_resv r = reserve_ok(fx.pool, "a", 0);
	int ret = meta_page_unlink(fx.m, fx.pool, "a");

	cr_assert_eq(ret, -ENOENT, "unlink of an uncommitted page: %d, want -ENOENT", ret);
	commit_ok(&r, "a", 5, 5);
	cr_assert_eq(lookup_ok(fx.pool, "a").length, 5, "commit after a refused unlink");
}

Test(commit_noevict, unlink_of_a_pinned_page_frees_its_slot_after_unpin)
{
	struct meta_page_info p[FX_SLOTS];

	put_pages(fx.pool, FX_SLOTS, p);
	pin_ok(p[3].id);
	unlink_ok(p[3].name);
	cr_assert_eq(lookup_missing(fx.pool, p[3].name), 0, "unlinked page has a writer");
	assert_reserve_fails(fx.pool, "x", -ENOSPC);
	meta_slot_unpin(fx.m, fx.pool, p[3].slot);
	struct meta_resv r = reserve_ok(fx.pool, "x", 0);
	cr_assert_eq(r.slot, p[3].slot, "got slot %llu, the freed one is %llu",
	             (unsigned long long)r.slot, (unsigned long long)p[3].slot);
}

/* ---- verification on read ---- */

static void setup_verify(enum meta_verify v)
{
	fx_init_dirs();
	fx.cfg.verify = v;
	fx_open();
	fx_setup_pool();
}

static void setup_verify_none(void)
{
	setup_verify(META_VERIFY_NONE);
}

static void setup_verify_always(void)
{
	setup_verify(META_VERIFY_ALWAYS);
}

TestSuite(verify, .init = fx_setup, .fini = fx_teardown, .timeout = 30);
TestSuite(verify_none, .init = setup_verify_none, .fini = fx_teardown, .timeout = 30);
TestSuite(verify_always, .init = setup_verify_always, .fini = fx_teardown, .timeout = 30);

/* Pins and unpins page_id; returns the verify flag. */
static int pin_verify(uint64_t page_id)
{
	struct meta_page_info p;
	int verify = -1;
	int ret = meta_page_pin(fx.m, page_id, &p, &verify);

	cr_assert_eq(ret, 0, "pin page %llu: %s", (unsigned long long)page_id, strerror(-ret));
	cr_assert(verify == 0 || verify == 1, "verify flag %d", verify);
	meta_slot_unpin(fx.m, p.pool_id, p.slot);
	return verify;
}

static pthread_mutex_t drop_lock = PTHREAD_MUTEX_INITIALIZER;
static int drop_calls;
static uint64_t drop_id;

static void on_drop(void *arg, uint32_t pool_id, uint64_t page_id, const char *name)
{
	(void)arg;
	(void)pool_id;
	(void)name;
	pthread_mutex_lock(&drop_lock);
	drop_calls++;
	drop_id = page_id;
	pthread_mutex_unlock(&drop_lock);
}

Test(verify, first_read_after_commit_or_mount_is_verified_once)
{
	struct meta_page_info a = put_page(fx.pool, "a", 100, 1);

	cr_assert_eq(pin_verify(a.id), 1, "first read of a new page must verify");
	cr_assert_eq(pin_verify(a.id), 1, "a page nobody verified yet must still verify");
	meta_page_verified(fx.m, a.id, a.slot, 1);
	cr_assert_eq(pin_verify(a.id), 0, "a verified page must not verify again");

	struct meta_resv r = reserve_ok(fx.pool, "a", a.id);
	commit_ok(&r, "a", 200, 2);
	cr_assert_eq(pin_verify(a.id), 1, "replaced bytes must verify again");
	meta_page_verified(fx.m, a.id, r.slot, 1);
	cr_assert_eq(pin_verify(a.id), 0, "verified replacement verifies again");

	fx_reopen();
	cr_assert_eq(pin_verify(a.id), 1, "first read after mount must verify");
}

Test(verify_none, reads_are_never_verified)
{
	struct meta_page_info a = put_page(fx.pool, "a", 100, 1);

	cr_assert_eq(pin_verify(a.id), 0, "--verify none asked to verify");
}

Test(verify_always, every_read_is_verified)
{
	struct meta_page_info a = put_page(fx.pool, "a", 100, 1);

	meta_page_verified(fx.m, a.id, a.slot, 1);
	cr_assert_eq(pin_verify(a.id), 1, "--verify always skipped a read");
	cr_assert_eq(pin_verify(a.id), 1, "--verify always skipped a read");
}

Test(verify, failed_verification_drops_the_page_and_frees_its_slot_after_unpin)
{
	struct meta_page_info a = put_page(fx.pool, "a", 100, 1);
	struct meta_page_info p;
	int verify, calls = 0;

	meta_set_drop_cb(fx.m, on_drop, NULL);
	int ret = meta_page_pin(fx.m, a.id, &p, &verify);
	cr_assert_eq(ret, 0, "pin a: %s", strerror(-ret));
	meta_page_verified(fx.m, a.id, a.slot, 0);

	cr_assert_eq(lookup_missing(fx.pool, "a"), 0, "corrupt page has a writer");
	ret = meta_page_pin(fx.m, a.id, &p, &verify);
	cr_assert_eq(ret, -ENOENT, "pin of a dropped page: %d, want -ENOENT", ret);
	struct meta_pool_info pi = pool_info(fx.pool);
	cr_assert_eq(pi.checksum_failures, 1, "checksum_failures %llu",
	             (unsigned long long)pi.checksum_failures);
	cr_assert_eq(pi.pages, 0, "dropped page still counted");
	for (int i = 0; i < 200 && !calls; i++) {
		pthread_mutex_lock(&drop_lock);
		calls = drop_calls;
		pthread_mutex_unlock(&drop_lock);
		if (!calls)
			sleep_ms(10);
	}
	cr_assert_eq(calls, 1, "drop callback called %d times", calls);
	cr_assert_eq(drop_id, a.id, "drop callback got page %llu", (unsigned long long)drop_id);

	/* The reader still holds the slot; its unpin frees it (once durable). */
	cr_assert_eq(pool_info(fx.pool).used_slots, 1, "slot of a pinned dropped page was freed");
	meta_slot_unpin(fx.m, fx.pool, a.slot);
	uint64_t used = 1;
	for (int i = 0; i < 200 && used; i++) {
		used = pool_info(fx.pool).used_slots;
		if (used)
			sleep_ms(10);
	}
	cr_assert_eq(used, 0, "dropped page's slot never freed");

	fx_reopen();
	cr_assert_eq(lookup_missing(fx.pool, "a"), 0, "dropped page came back after reopen");
}

Test(verify, stale_failure_for_an_old_slot_keeps_the_page)
{
	struct meta_page_info a = put_page(fx.pool, "a", 100, 1);
	struct meta_resv r = reserve_ok(fx.pool, "a", a.id);

	commit_ok(&r, "a", 200, 2);
	/* A reader of the old bytes reports a mismatch after the replace. */
	meta_page_verified(fx.m, a.id, a.slot, 0);
	struct meta_page_info p = lookup_ok(fx.pool, "a");
	cr_assert_eq(p.slot, r.slot, "page moved to slot %llu", (unsigned long long)p.slot);
	cr_assert_eq(p.length, 200, "replacement length %llu", (unsigned long long)p.length);
}

/* ---- a batch of commits at once (meta_page_commit_many) ---- */

Test(commit, a_batch_of_commits_publishes_each_page_in_one_store_transaction)
{
	struct meta_resv r[6];
	uint64_t len[6], sum[6];
	int err[6];
	struct meta_stats before, after;
	char name[16];

	for (int i = 0; i < 6; i++) {
		snprintf(name, sizeof(name), "b%d", i);
		r[i] = reserve_ok(fx.pool, name, 0);
		len[i] = 100 + (uint64_t)i;
		sum[i] = 0x1000 + (uint64_t)i;
	}
	len[2] = FX_SLOT_SIZE + 1; /* too big: refused alone */
	meta_get_stats(fx.m, &before);
	meta_page_commit_many(fx.m, r, len, sum, 6, err);
	meta_get_stats(fx.m, &after);
	for (int i = 0; i < 6; i++) {
		snprintf(name, sizeof(name), "b%d", i);
		if (i == 2) {
			cr_assert_eq(err[i], -EFBIG, "an oversized page: %d", err[i]);
			cr_assert_eq(lookup_missing(fx.pool, name), 0,
			             "an oversized page was published");
			continue;
		}
		cr_assert_eq(err[i], 0, "page %d: %s", i, strerror(-err[i]));
		struct meta_page_info p = lookup_ok(fx.pool, name);
		cr_assert_eq(p.length, len[i], "page %d: length %llu", i,
		             (unsigned long long)p.length);
		cr_assert_eq(p.checksum, sum[i], "page %d: checksum %llx", i,
		             (unsigned long long)p.checksum);
	}
	cr_assert_eq(after.store_records - before.store_records, 5, "%llu records for 5 commits",
	             (unsigned long long)(after.store_records - before.store_records));
	cr_assert_eq(after.store_batches - before.store_batches, 1,
	             "5 commits queued together took %llu store transactions",
	             (unsigned long long)(after.store_batches - before.store_batches));
	assert_usage(5, 5, 500 + 0 + 1 + 3 + 4 + 5, "after the batch");
}
