/*
 * test_grace.c - grace periods of freed slots in the chunks a node of a
 * shared index holds (meta/index/chunkset.c, meta/record/apply.c).
 *
 * A grace period ends by freeing its slot, so one that is stale (its slot
 * holds a page again) frees the slot under that page, and the next
 * writer overwrites it: the bug the nemesis saw as runs of checksum
 * mismatches in one slot. The fixture's SQLite pool is made to look
 * shared by hand (chunks of 2 slots), which is all the in-memory code
 * looks at.
 */
#include "fixture.h"

#include "meta/index.h"
#include "meta/keys.h"
#include "meta/record.h"
#include "meta/store.h"

#include <string.h>

TestSuite(grace, .init = fx_setup, .fini = fx_teardown, .timeout = 30);

static struct pool *shared_pool(void)
{
	struct pool *p = index_pool_by_id(fx.m, fx.pool);

	cr_assert_not_null(p, "pool %u not in the index", fx.pool);
	p->shared = 1;
	p->chunk_slots = 2;
	return p;
}

static int in_grace(const struct pool *p, uint64_t slot)
{
	for (size_t i = 0; i < p->ngrace; i++)
		if (p->grace[i].slot == slot)
			return 1;
	return 0;
}

Test(grace, a_leased_slot_that_a_page_holds_again_gets_no_grace_period)
{
	/* Chunk 3 (slots 6 and 7): the store says slot 6 holds a page and
	 * was also freed within the grace window (freed, then written again);
	 * slot 7 was only freed. */
	struct rec r = {.type = REC_LEASE,
	                .pool_id = fx.pool,
	                .chunk = 3,
	                .chunk_slots = 2,
	                .used_bits = 0x1,
	                .grace_bits = 0x3,
	                .grace_xid = 100};
	struct dropped *drops = NULL;

	index_lock(fx.m);
	struct pool *p = shared_pool();
	record_apply(fx.m, &r, &drops);
	int six = in_grace(p, 6), seven = in_grace(p, 7), held = index_chunk_owned(p, 3);
	index_grace_release(p, 101, NULL, 0); /* every node acked past the frees */
	int six_used = index_slot_mark(p, 6) == -EEXIST, seven_free = index_slot_mark(p, 7) == 0;
	index_unlock(fx.m);
	index_drops_notify(fx.m, drops);
	cr_assert(held, "the lease made the node hold chunk 3");
	cr_assert(!six, "slot 6 holds a page: no grace period may free it");
	cr_assert(seven, "slot 7 was freed: it waits out its grace period");
	cr_assert(six_used, "slot 6 stayed taken after the grace periods ended");
	cr_assert(seven_free, "slot 7 came free when its grace period ended");
}

Test(grace, a_slot_taken_in_a_held_chunk_cancels_its_stale_grace_period)
{
	uint64_t slot;

	index_lock(fx.m);
	struct pool *p = shared_pool();
	cr_assert_eq(index_chunk_own(p, 5), 0);
	index_grace_add(p, 10, 7); /* stale: slot 10's bit is clear */
	int rc = index_chunk_take(p, &slot);
	int stale = in_grace(p, slot);
	index_chunk_done(p, slot);
	index_unlock(fx.m);
	cr_assert_eq(rc, 0, "a free slot of chunk 5 is taken");
	cr_assert_eq(slot, 10);
	cr_assert(!stale, "the writer's slot has no grace period left to free it");
}

Test(grace, a_slot_the_key_protocol_takes_in_a_held_chunk_cancels_its_stale_grace_period)
{
	uint64_t slot;

	index_lock(fx.m);
	struct pool *p = shared_pool();
	cr_assert_eq(index_chunk_own(p, 4), 0);
	index_grace_add(p, 9, 7); /* stale: slot 9's bit is clear */
	index_grace_add(p, 8, 7);
	struct kpool *kp = keys_pool_get(fx.m, p);
	cr_assert_not_null(kp);
	int rc = keys_take(fx.m, fx.pool, kp, &slot);
	int stale = rc == 0 && in_grace(p, slot);
	if (rc == 0)
		index_chunk_done(p, slot);
	index_unlock(fx.m);
	cr_assert_eq(rc, 0, "a free slot of chunk 4 is taken: %s", strerror(-rc));
	cr_assert_eq(slot, 9, "the highest free slot of the held chunk");
	cr_assert(!stale, "the key's slot has no grace period left to free it");
}

/* ---- the change feed: a row read before this node's own change ----
 *
 * The sync thread reads a feed batch (each changed page as the index
 * holds it at that moment), then applies it under meta.lock. A change
 * this node makes in between (its writer replaces or evicts the page)
 * reaches memory first; the batch's row, older, would then bring the
 * page back, and the change that removed it never comes through the
 * feed (a node skips its own changes). The page then names a slot whose
 * bytes are someone else's once it is reused: the nemesis's "checksum
 * mismatch ... (the mirror was behind the index)". */

/* A remote change of page id at slot, named name, in fx.pool. */
static void remote_row(struct store_change *c, uint64_t id, const char *name, uint64_t slot)
{
	memset(c, 0, sizeof(*c));
	c->node = 7; /* another node */
	c->xid = 100;
	c->pool_id = fx.pool;
	c->page_id = id;
	c->freed_slot = -1;
	c->exists = 1;
	c->row.type = REC_COMMIT;
	c->row.pool_id = fx.pool;
	c->row.page_id = id;
	c->row.name_len = (uint16_t)strlen(name);
	memcpy(c->row.name, name, c->row.name_len + 1);
	c->row.slot = slot;
	c->row.length = 4096;
	c->row.has_checksum = 1;
	c->row.checksum = 42;
}

/* Page id arrives from node 7 at slot 6; this node drops it; then a feed
 * batch applies node 7's row again, the batch read before this node's
 * drop (read_before) or after it. Whether the page is back. */
static int row_back_after_own_drop(uint64_t id, const char *name, int read_before)
{
	struct store_change c;
	struct dropped *drops = NULL;
	uint64_t read_at = 0;

	remote_row(&c, id, name, 6);
	index_lock(fx.m);
	shared_pool();
	record_apply_remote(fx.m, &c, &drops);
	struct page *g = index_idtable_find(&fx.m->by_id, id);
	cr_assert_not_null(g, "the feed brought page %llu", (unsigned long long)id);
	if (read_before)
		read_at = index_feed_mark(fx.m);
	index_page_unlink_committed(fx.m, g);
	index_page_free(g);
	if (!read_before)
		read_at = index_feed_mark(fx.m);
	index_feed_begin(fx.m, read_at);
	record_apply_remote(fx.m, &c, &drops);
	index_feed_end(fx.m);
	int back = index_idtable_find(&fx.m->by_id, id) != NULL;
	index_unlock(fx.m);
	index_drops_notify(fx.m, drops);
	return back;
}

Test(grace, a_feed_row_read_before_this_nodes_eviction_does_not_bring_the_page_back)
{
	/* The sync thread reads its next batch (it names page 500 at slot 6:
	 * node 7 renamed it, say), then this node evicts page 500, then the
	 * batch is applied. */
	cr_assert(!row_back_after_own_drop(500, "pa", 1),
	          "a row read before this node dropped page 500 brought it back");
}

Test(grace, a_feed_row_read_before_this_nodes_commit_of_its_name_does_not_replace_it)
{
	struct store_change c;
	struct dropped *drops = NULL;

	index_lock(fx.m);
	struct pool *p = shared_pool();
	uint64_t read_at = index_feed_mark(fx.m);
	/* After the batch was read, this node commits its own page 600
	 * named "pb" at slot 3 (its commit deleted node 7's page 501 of
	 * that name in the index, which this node had not seen yet) ... */
	struct page *mine = index_page_alloc("pb", 2);
	cr_assert_not_null(mine);
	mine->id = 600;
	page_set_pool(mine, p);
	struct rec own = {.slot = 3, .length = 100, .has_checksum = 1, .checksum = 1};
	index_slot_mark(p, 3);
	index_page_take_row(mine, &own);
	index_page_link_committed(fx.m, mine, index_name_hash(p->id, "pb", 2), index_now_ns());
	/* ... then the batch, read before, brings node 7's page 501 "pb". */
	remote_row(&c, 501, "pb", 6);
	index_feed_begin(fx.m, read_at);
	record_apply_remote(fx.m, &c, &drops);
	index_feed_end(fx.m);
	struct page *now = index_table_find_name(&fx.m->by_name, p->id, "pb", NULL);
	uint64_t id = now ? now->id : 0;
	index_unlock(fx.m);
	index_drops_notify(fx.m, drops);
	cr_assert_eq(id, 600,
	             "name pb is this node's page 600, committed after the row was read "
	             "(found %llu)",
	             (unsigned long long)id);
}

Test(grace, a_feed_row_read_after_this_nodes_change_is_applied)
{
	/* (node 7 wrote it again after this node's drop) */
	cr_assert(row_back_after_own_drop(502, "pc", 0),
	          "a row read after this node's change is the index's word");
}
