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
