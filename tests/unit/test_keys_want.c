/*
 * test_keys_want.c - the keys a protocol pool owes a slot (meta/keys_want.c),
 * the evictor's demand: a key refused again adds nothing, a key served
 * leaves and counts again when refused again, keys that stopped asking
 * expire and the others stay findable, demand stops at the pool's
 * capacity, and the table grows through thousands of keys.
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
