/*
 * write_bench.c - what a key write costs meta/ alone, in CPU time per
 * key, with no HTTP, JSON or kernel around it: the part of the 3FS
 * protocol's reserve_and_allocate_page_indices + confirm_write that
 * pagefs's own code and its index decide.
 *
 *   write_bench PAGES BATCHES
 *
 * Opens an SQLite index in a temporary directory with one protocol pool
 * of PAGES slots (as serve-meta makes it on initialize), then writes
 * BATCHES batches of 128 new keys named as SGLang names them: reserve,
 * then confirm, each durable as serve-meta's are. Prints nanoseconds of
 * this process's CPU time (every thread: the journal's too) per key,
 * for the whole run and for its last tenth, when the index is largest.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meta/meta.h"
#include "perf_common.h"
#include "perf_meta.h"

#define BATCH 128
#define NAME_LEN 96

static void fail(const char *what, int ret)
{
	fprintf(stderr, "write_bench: %s: %s\n", what, strerror(-ret));
	exit(1);
}

int main(int argc, char **argv)
{
	char msg[256];
	static char body[BATCH * NAME_LEN];
	const char *keys[BATCH];
	uint8_t existed[BATCH];
	int64_t slots[BATCH];
	struct perf_index ix;
	uint32_t pool_id;
	int differs = 0;

	if (argc != 3) {
		fprintf(stderr, "usage: write_bench PAGES BATCHES\n");
		return 2;
	}
	uint64_t pages = strtoull(argv[1], NULL, 10), batches = strtoull(argv[2], NULL, 10);
	if (batches < 10 || batches * BATCH > pages) {
		fprintf(stderr, "write_bench: need 10 <= BATCHES and BATCHES * 128 <= PAGES\n");
		return 2;
	}
	if (perf_index_open(&ix, "write_bench", pages) < 0)
		return 1;
	struct meta *m = ix.m;
	int ret;
	if ((ret = meta_keys_initialize(m, 0, "kv", pages, &differs, msg, sizeof(msg))) < 0)
		fail(msg[0] ? msg : "initialize", ret);
	if ((ret = meta_keys_pool(m, 0, "kv", &pool_id)) < 0)
		fail("pool", ret);

	uint64_t last = batches / 10; /* batches in the last tenth */
	double t0 = perf_cpu_s(), tail = 0;
	for (uint64_t b = 0; b < batches; b++) {
		if (b == batches - last)
			tail = perf_cpu_s();
		for (size_t k = 0; k < BATCH; k++) {
			perf_sglang_key(body + k * NAME_LEN, NAME_LEN, perf_mix(b * BATCH + k), 1);
			keys[k] = body + k * NAME_LEN;
		}
		size_t ignored = 0;
		if ((ret = meta_keys_reserve(m, pool_id, keys, BATCH, existed, slots)) < 0)
			fail("reserve", ret);
		if ((ret = meta_keys_confirm(m, pool_id, keys, slots, BATCH, NULL, 0, &ignored)) <
		    0)
			fail("confirm", ret);
		if (ignored)
			return fprintf(stderr, "write_bench: %zu keys not confirmed\n", ignored), 1;
	}
	double t1 = perf_cpu_s();
	printf("pages=%llu keys=%llu write_ns_per_key=%.1f last_tenth_ns_per_key=%.1f\n",
	       (unsigned long long)pages, (unsigned long long)batches * BATCH,
	       (t1 - t0) * 1e9 / (double)(batches * BATCH),
	       (t1 - tail) * 1e9 / (double)(last * BATCH));
	return perf_index_close(&ix) == 0 ? 0 : 1;
}
