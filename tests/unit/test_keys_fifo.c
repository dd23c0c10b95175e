/*
 * test_keys_fifo.c - the reservation and quarantine queues (keys_slots.c):
 * neighbouring slots queued with one time and kind become one run, in
 * either direction; anything else starts a new entry; the ring keeps its
 * order through growth and wrap-around, and every slot pushed comes out
 * exactly once.
 */
#include "meta/keys.h"

#include <criterion/criterion.h>
#include <stdlib.h>

static void drain(struct fifo *f, uint8_t *seen, size_t nseen, int64_t *last_at)
{
	struct fifo_ent *e;

	while ((e = fifo_peek(f))) {
		cr_assert_geq(e->n, 1);
		cr_assert_geq(e->at, *last_at, "times come out in order");
		*last_at = e->at;
		for (uint64_t s = e->lo; s < e->lo + e->n; s++) {
			cr_assert_lt(s, nseen);
			cr_assert_eq(seen[s], 0, "slot %llu came out twice", (unsigned long long)s);
			seen[s] = 1;
		}
		fifo_pop(f);
	}
}

Test(keys_fifo, one_batch_of_neighbouring_slots_is_one_run_either_way)
{
	struct fifo f = {0};

	for (uint64_t s = 100; s > 50; s--) /* a batch taken from the top down */
		cr_assert_eq(keys_fifo_push(&f, s, 7, 0), 0);
	cr_assert_eq(f.len, 1);
	cr_assert(fifo_peek(&f)->lo == 51 && fifo_peek(&f)->n == 50, "run %llu+%u",
	          (unsigned long long)fifo_peek(&f)->lo, fifo_peek(&f)->n);
	for (uint64_t s = 101; s < 111; s++) /* and upwards from its top */
		cr_assert_eq(keys_fifo_push(&f, s, 7, 0), 0);
	cr_assert_eq(f.len, 1);
	cr_assert_eq(fifo_peek(&f)->n, 60);
	cr_assert_eq(keys_fifo_push(&f, 111, 8, 0), 0); /* another deadline */
	cr_assert_eq(keys_fifo_push(&f, 112, 8, 1), 0); /* another kind */
	cr_assert_eq(keys_fifo_push(&f, 300, 8, 1), 0); /* not a neighbour */
	cr_assert_eq(keys_fifo_push(&f, 111, 8, 1), 0); /* a neighbour of 112, not the last */
	cr_assert_eq(f.len, 5);
	free(f.v);
}

Test(keys_fifo, every_slot_comes_out_once_through_growth_and_wrap_around)
{
	enum { SLOTS = 20000 };
	struct fifo f = {0};
	uint8_t *seen = calloc(SLOTS, 1);
	uint64_t pushed = 0;
	int64_t at = 0, last_at = 0;

	cr_assert(seen);
	srand(5);
	/* Batches of random length, each from a random top downwards or a
	 * random bottom upwards, and half of the queue drained between them:
	 * the ring wraps and grows while it holds entries. */
	for (uint64_t base = 0; base + 64 <= SLOTS; base += 64) {
		unsigned len = 1 + (unsigned)(rand() % 64);
		int up = rand() % 2;
		at++;
		for (unsigned i = 0; i < len; i++) {
			uint64_t s = up ? base + i : base + len - 1 - i;
			cr_assert_eq(keys_fifo_push(&f, s, at, 0), 0);
			pushed++;
		}
		if (len < 63 && rand() % 3 == 0) { /* the same batch, not a neighbour */
			size_t before = f.len;
			cr_assert_eq(keys_fifo_push(&f, base + 63, at, 0), 0);
			cr_assert_eq(f.len, before + 1, "slot %llu joined a run it does not touch",
			             (unsigned long long)(base + 63));
			pushed++;
		}
		for (size_t k = f.len / 2; k > 0; k--) {
			struct fifo_ent *e = fifo_peek(&f);
			cr_assert_geq(e->at, last_at);
			last_at = e->at;
			for (uint64_t s = e->lo; s < e->lo + e->n; s++) {
				cr_assert_eq(seen[s], 0, "slot %llu came out twice",
				             (unsigned long long)s);
				seen[s] = 1;
			}
			fifo_pop(&f);
		}
	}
	drain(&f, seen, SLOTS, &last_at);
	uint64_t out = 0;
	for (size_t s = 0; s < SLOTS; s++)
		out += seen[s];
	cr_assert_eq(out, pushed, "%llu slots pushed, %llu came out", (unsigned long long)pushed,
	             (unsigned long long)out);
	free(f.v);
	free(seen);
}
