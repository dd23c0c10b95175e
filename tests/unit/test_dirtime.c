/*
 * test_dirtime.c - the table of renamed pages' ctimes (meta/dirtime.c):
 * through every growth step each id keeps its time, a set of an id it
 * holds replaces the time, a removal takes out only its own id and leaves
 * every other findable (linear probing shifts entries back), in any
 * order, and a pool's time only moves forward.
 */
#include "meta/cluster.h"
#include "meta/index.h"
#include "meta/ops.h"
#include "meta/record.h"

#include <criterion/criterion.h>
#include <stdlib.h>

#define IDS 50000u

/* Ids of pages as the index hands them out: in blocks, with gaps. */
static uint64_t id_of(unsigned i)
{
	return 1 + (uint64_t)(i / 1000) * 1048576u + (i % 1000) * 3u;
}

Test(dirtime, every_id_keeps_its_ctime_through_growth_and_updates)
{
	struct ctimes t = {0};

	cr_assert_eq(index_ctime_get(&t, 7), 0, "an empty table knows no id");
	for (unsigned i = 0; i < IDS; i++)
		index_ctime_set(&t, id_of(i), 1000 + i);
	for (unsigned i = 0; i < IDS; i += 2)
		index_ctime_set(&t, id_of(i), 5000000 + i); /* renamed again */
	cr_assert_eq(t.n, IDS);
	for (unsigned i = 0; i < IDS; i++)
		cr_assert_eq(index_ctime_get(&t, id_of(i)), i % 2 ? 1000 + i : 5000000 + i, "id %u",
		             i);
	cr_assert_eq(index_ctime_get(&t, id_of(IDS) + 1), 0);
	index_ctimes_free(&t);
}

Test(dirtime, a_removal_takes_out_only_its_own_id_in_any_order)
{
	struct ctimes t = {0};
	unsigned *order = malloc(IDS * sizeof(*order));

	cr_assert_not_null(order);
	for (unsigned i = 0; i < IDS; i++) {
		index_ctime_set(&t, id_of(i), 1 + i);
		order[i] = i;
	}
	srand(1);
	for (unsigned i = IDS - 1; i > 0; i--) {
		unsigned j = (unsigned)rand() % (i + 1), x = order[i];
		order[i] = order[j];
		order[j] = x;
	}
	for (unsigned k = 0; k < IDS; k++) {
		index_ctime_del(&t, id_of(order[k]));
		index_ctime_del(&t, id_of(order[k])); /* twice: nothing more goes */
		cr_assert_eq(index_ctime_get(&t, id_of(order[k])), 0);
		if (k % 997 == 0) /* the rest are all still there */
			for (unsigned r = k + 1; r < IDS; r++)
				cr_assert_eq(index_ctime_get(&t, id_of(order[r])), 1 + order[r],
				             "id %u lost after removing %u of them", order[r],
				             k + 1);
	}
	cr_assert_eq(t.n, 0);
	free(order);
	index_ctimes_free(&t);
}

Test(dirtime, a_pool_time_only_moves_forward)
{
	struct pool p = {0};

	index_pool_changed(&p, 200);
	index_pool_changed(&p, 100);
	cr_assert_eq(p.dir_ns, 200);
	index_pool_changed(&p, 300);
	cr_assert_eq(p.dir_ns, 300);
}
