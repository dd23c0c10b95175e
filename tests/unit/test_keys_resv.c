/*
 * test_keys_resv.c - the reservations outstanding in a protocol pool
 * (meta/keys/keys_resv.c): set, replaced, cleared and looked up against a
 * model (an array over every slot) through growth to tens of thousands of
 * reservations and back, in orders that make long runs of probes and
 * remove from their middle; a slot at or past the pool's capacity holds
 * none; the table shrinks once they are gone.
 */
#include "meta/keys.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>

#define CAP 200000u

static struct kpool *kpool_of(uint64_t capacity)
{
	struct kpool *kp = calloc(1, sizeof(*kp));

	cr_assert(kp);
	kp->capacity = capacity;
	return kp;
}

static void kpool_done(struct kpool *kp)
{
	keys_resv_tab_free(&kp->resv);
	free(kp);
}

static uint64_t rnd(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* Every slot in [0, CAP) reads as the model says; n reservations. */
static void check_all(const struct kpool *kp, const int64_t *at, const uint32_t *key, size_t n)
{
	cr_assert_eq(kp->resv.n, n, "%zu reservations, the model %zu", kp->resv.n, n);
	for (uint64_t s = 0; s < CAP; s++) {
		cr_assert_eq(keys_resv_get(kp, s), at[s], "slot %llu", (unsigned long long)s);
		if (at[s])
			cr_assert(keys_resv_for(kp, s, key[s]) && !keys_resv_for(kp, s, key[s] + 1),
			          "slot %llu", (unsigned long long)s);
	}
}

Test(keys_resv, reservations_match_a_model_through_growth_removal_and_shrinking)
{
	struct kpool *kp = kpool_of(CAP);
	int64_t *at = calloc(CAP, sizeof(*at));
	uint32_t *key = calloc(CAP, sizeof(*key));
	uint64_t x = 88172645463325252ULL;
	size_t n = 0;

	cr_assert(at && key);
	/* slots handed out downward one after another, as keys_take does,
	 * then random ones, with clears among them */
	for (uint64_t i = 0; i < 60000; i++) {
		uint64_t s = i < 30000 ? CAP - 1 - i : rnd(&x) % CAP;
		int64_t when = (int64_t)(i + 1);
		uint32_t k = (uint32_t)rnd(&x);
		if (i % 5 == 4) { /* clear one set before, or one never set */
			uint64_t c = (i % 10 == 9) ? CAP - 1 - i / 2 : rnd(&x) % CAP;
			cr_assert_eq(keys_resv_set(kp, c, 0, 0), 0);
			n -= at[c] != 0;
			at[c] = 0;
			continue;
		}
		cr_assert_eq(keys_resv_set(kp, s, when, k), 0);
		n += at[s] == 0;
		at[s] = when;
		key[s] = k;
	}
	check_all(kp, at, key, n);
	size_t grown = kp->resv.mask + 1;
	cr_assert_geq(grown, 2 * n, "at most half full: %zu entries for %zu", grown, n);

	/* cleared in an order unlike the one they came in */
	for (uint64_t s = 0; s < CAP; s += 3) {
		n -= at[s] != 0;
		at[s] = 0;
		cr_assert_eq(keys_resv_set(kp, s, 0, 0), 0);
	}
	check_all(kp, at, key, n);
	for (uint64_t s = 0; s < CAP; s++) {
		n -= at[s] != 0;
		at[s] = 0;
		cr_assert_eq(keys_resv_set(kp, s, 0, 0), 0);
	}
	check_all(kp, at, key, 0);
	cr_assert_leq(kp->resv.mask + 1, 1024, "shrunk back: %zu entries", kp->resv.mask + 1);
	free(at);
	free(key);
	kpool_done(kp);
}

/* Reservations removed from among others (every third, starting at each
 * of the three) leave every other findable: the shift back after a
 * removal keeps each entry reachable from its home. */
Test(keys_resv, removal_from_a_long_run_keeps_the_rest_findable)
{
	struct kpool *kp = kpool_of(1ULL << 32);
	enum { N = 400 };
	uint64_t slots[N];

	/* strides of 1024 slots, every third removed in turn (the first,
	 * second or third of each three), each round at another offset */
	for (int round = 0; round < 8; round++) {
		for (int i = 0; i < N; i++) {
			slots[i] = (uint64_t)i * 1024u + (uint64_t)round;
			cr_assert_eq(keys_resv_set(kp, slots[i], i + 1, (uint32_t)i), 0);
		}
		for (int i = round % 3; i < N; i += 3)
			cr_assert_eq(keys_resv_set(kp, slots[i], 0, 0), 0);
		for (int i = 0; i < N; i++) {
			int gone = i >= round % 3 && (i - round % 3) % 3 == 0;
			cr_assert_eq(keys_resv_get(kp, slots[i]), gone ? 0 : i + 1,
			             "round %d slot %d", round, i);
			if (!gone)
				cr_assert(keys_resv_for(kp, slots[i], (uint32_t)i));
		}
		for (int i = 0; i < N; i++)
			cr_assert_eq(keys_resv_set(kp, slots[i], 0, 0), 0);
		cr_assert_eq(kp->resv.n, 0);
	}
	kpool_done(kp);
}

Test(keys_resv, a_slot_past_the_capacity_holds_no_reservation)
{
	struct kpool *kp = kpool_of(100);

	cr_assert_eq(keys_resv_set(kp, 99, 5, 7), 0);
	cr_assert_eq(keys_resv_get(kp, 99), 5);
	cr_assert_eq(keys_resv_set(kp, 100, 5, 7), -EINVAL);
	cr_assert_eq(keys_resv_get(kp, 100), 0);
	cr_assert_eq(keys_resv_get(kp, 99 + (1ULL << 32)), 0, "not slot 99 cut to 32 bits");
	cr_assert_not(keys_resv_for(kp, 99 + (1ULL << 32), 7));
	cr_assert_eq(keys_resv_set(kp, 100, 0, 0), 0, "clearing never fails");
	kpool_done(kp);
}
