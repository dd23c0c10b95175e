/*
 * test_keys_want.c - the keys a protocol pool owes a slot (meta/keys_want.c),
 * the evictor's demand: a key refused again adds nothing, a key served
 * leaves and counts again when refused again, keys that stopped asking
 * expire and the others stay findable, demand stops at the pool's
 * capacity, the table grows through thousands of keys, and expiry finds
 * a key due behind a bound made exact and drops tombstones that
 * outnumber the live keys.
 */
#include "meta/keys.h"

#include <criterion/criterion.h>
#include <stdlib.h>

static struct kpool *kpool_of(uint64_t capacity)
{
	struct kpool *kp = calloc(1, sizeof(*kp));

	cr_assert(kp);
	kp->capacity = capacity;
	return kp;
}

static void kpool_done(struct kpool *kp)
{
	free(kp->want.v);
	free(kp);
}

Test(keys_want, a_key_refused_again_adds_no_demand)
{
	struct kpool *kp = kpool_of(16);

	for (int i = 0; i < 12; i++)
		keys_want_add(kp, 77, 1000 + i);
	cr_assert_eq(kp->want.live, 1);
	keys_want_add(kp, 78, 2000);
	cr_assert_eq(kp->want.live, 2);
	kpool_done(kp);
}

Test(keys_want, a_served_key_leaves_and_counts_again_when_refused_again)
{
	struct kpool *kp = kpool_of(16);

	keys_want_add(kp, 5, 100);
	keys_want_add(kp, 6, 100);
	keys_want_served(kp, 5);
	cr_assert_eq(kp->want.live, 1);
	keys_want_served(kp, 5); /* (twice: nothing more) */
	keys_want_served(kp, 99);
	cr_assert_eq(kp->want.live, 1);
	keys_want_add(kp, 5, 200);
	cr_assert_eq(kp->want.live, 2);
	kpool_done(kp);
}

Test(keys_want, keys_that_stopped_asking_expire_and_the_others_stay)
{
	struct kpool *kp = kpool_of(1000);

	for (uint32_t k = 1; k <= 300; k++)
		keys_want_add(kp, k * 2654435761u, (int64_t)k); /* asked at k */
	for (uint32_t k = 1; k <= 100; k += 2)
		keys_want_served(kp, k * 2654435761u);
	keys_want_expire(kp, 151); /* asked before 151: gone */
	cr_assert_eq(kp->want.live, 150, "live %llu", (unsigned long long)kp->want.live);
	cr_assert_eq(kp->want.used, 150, "tombstones and expired entries are dropped");
	for (uint32_t k = 1; k <= 300; k++) {
		keys_want_add(kp, k * 2654435761u, 1000); /* counts again only if gone */
		cr_assert_eq(kp->want.live, k <= 150 ? 150 + k : 300, "key %u", k);
	}
	keys_want_expire(kp, 2000);
	cr_assert_eq(kp->want.live, 0);
	cr_assert_null(kp->want.v, "an empty table is freed");
	kpool_done(kp);
}

Test(keys_want, demand_stops_at_the_pools_capacity)
{
	struct kpool *kp = kpool_of(8);

	for (uint32_t k = 0; k < 100; k++)
		keys_want_add(kp, k, 1);
	cr_assert_eq(kp->want.live, 8);
	kpool_done(kp);
}

Test(keys_want, thousands_of_keys_are_each_counted_once)
{
	struct kpool *kp = kpool_of(1u << 20);
	const uint32_t n = 20000;

	for (int round = 0; round < 2; round++)
		for (uint32_t k = 0; k < n; k++)
			keys_want_add(kp, k * 7919u, 1 + round);
	cr_assert_eq(kp->want.live, n);
	cr_assert(kp->want.used * 4 <= (kp->want.mask + 1) * 3, "the table keeps a quarter empty");
	for (uint32_t k = 0; k < n; k++)
		keys_want_served(kp, k * 7919u);
	cr_assert_eq(kp->want.live, 0);
	kpool_done(kp);
}

Test(keys_want, a_key_due_is_found_after_the_bound_was_made_exact)
{
	struct kpool *kp = kpool_of(100);

	keys_want_add(kp, 1, 100);
	keys_want_add(kp, 2, 200);
	keys_want_add(kp, 1, 300); /* asked again: the bound stays 100 */
	cr_assert_eq(kp->want.oldest, 100);
	keys_want_expire(kp, 150); /* none due: the bound becomes 200 */
	cr_assert_eq(kp->want.live, 2);
	cr_assert_eq(kp->want.oldest, 200);
	keys_want_expire(kp, 200); /* (not before 200) */
	cr_assert_eq(kp->want.live, 2);
	keys_want_expire(kp, 250); /* key 2 stopped asking */
	cr_assert_eq(kp->want.live, 1);
	cr_assert_eq(kp->want.oldest, 300);
	keys_want_add(kp, 2, 400); /* counts again */
	cr_assert_eq(kp->want.live, 2);
	keys_want_add(kp, 3, 50); /* (a clock read before another's) */
	cr_assert_eq(kp->want.oldest, 50);
	keys_want_expire(kp, 350);
	cr_assert_eq(kp->want.live, 1, "keys 1 and 3 asked before 350");
	kpool_done(kp);
}

Test(keys_want, tombstones_that_outnumber_the_live_keys_are_dropped)
{
	struct kpool *kp = kpool_of(100);

	for (uint32_t k = 1; k <= 10; k++)
		keys_want_add(kp, k, 1000);
	for (uint32_t k = 1; k <= 5; k++)
		keys_want_served(kp, k);
	keys_want_expire(kp, 10); /* nothing due, 5 tombstones for 5 keys */
	cr_assert_eq(kp->want.used, 10, "as many tombstones as keys are kept");
	keys_want_served(kp, 6);
	keys_want_expire(kp, 10);
	cr_assert_eq(kp->want.used, 4, "6 tombstones for 4 keys are dropped");
	cr_assert_eq(kp->want.live, 4);
	for (uint32_t k = 7; k <= 10; k++) {
		keys_want_add(kp, k, 2000); /* still there: no new demand */
		cr_assert_eq(kp->want.live, 4, "key %u", k);
	}
	kpool_done(kp);
}
