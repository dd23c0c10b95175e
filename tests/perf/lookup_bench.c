/*
 * lookup_bench.c - what a key lookup costs meta/ alone, in CPU time per
 * key, with no HTTP, JSON or kernel around it: the part of the 3FS
 * protocol's exists and get_page_indices that pagefs's own code decides.
 *
 *   lookup_bench PAGES HOT SECONDS
 *
 * Adopts PAGES pages named as SGLang names them (64 hex digits of a hash
 * and a model suffix, as tests/perf/http_load.c sends) into one pool of
 * an SQLite index in a temporary directory, then, for SECONDS each,
 * calls meta_keys_exists and meta_keys_get on batches of 128 keys drawn
 * at random from the first HOT pages (a hot set, as a serving engine's
 * prefix reuse makes one), three of four hits, the keys of a batch in one
 * buffer as a request body holds them. Prints nanoseconds of this
 * process's CPU time per key spent in each call.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "meta/meta.h"
#include "perf_common.h"
#include "perf_meta.h"

#define BATCH 128
#define NAME_LEN 96

/* Batches of keys from names (hot of them stored, the same number not),
 * each copied into one buffer first as a parsed request body holds them,
 * until the calls took seconds of CPU time; ns per key of the calls. */
static double run(struct meta *m, uint32_t pool_id, const char *names, uint64_t hot, double seconds,
                  int get)
{
	static char body[BATCH * NAME_LEN];
	const char *keys[BATCH];
	uint8_t found[BATCH];
	int64_t slots[BATCH];
	uint64_t seed = 12345, done = 0;
	double spent = 0;

	while (spent < seconds) {
		for (int k = 0; k < BATCH; k++) {
			seed = perf_mix(seed + 1);
			/* three of four from the stored hot set, one a miss */
			uint64_t j = seed % hot + (seed >> 62 == 0 ? hot : 0);
			memcpy(body + k * NAME_LEN, names + j * NAME_LEN, NAME_LEN);
			keys[k] = body + k * NAME_LEN;
		}
		double t0 = perf_cpu_s();
		int ret = get ? meta_keys_get(m, pool_id, keys, BATCH, slots)
		              : meta_keys_exists(m, pool_id, keys, BATCH, found);
		spent += perf_cpu_s() - t0;
		if (ret < 0) {
			fprintf(stderr, "lookup_bench: %s\n", strerror(-ret));
			exit(1);
		}
		done += BATCH;
	}
	return spent * 1e9 / (double)done;
}

int main(int argc, char **argv)
{
	struct perf_index ix;
	struct meta_pool_info pool;

	if (argc != 4) {
		fprintf(stderr, "usage: lookup_bench PAGES HOT SECONDS\n");
		return 2;
	}
	uint64_t pages = strtoull(argv[1], NULL, 10), hot = strtoull(argv[2], NULL, 10);
	double seconds = atof(argv[3]);
	if (pages == 0 || hot == 0 || hot * 2 > pages || seconds <= 0) {
		fprintf(stderr, "lookup_bench: need 0 < 2 * HOT <= PAGES and SECONDS > 0\n");
		return 2;
	}
	char *names = malloc(pages * NAME_LEN);
	struct meta_adopt_page *in = calloc(pages, sizeof(*in));
	if (!names || !in)
		return fprintf(stderr, "lookup_bench: out of memory\n"), 1;
	/* The hot set and its misses first in names; stored: all but the
	 * misses [hot, 2 hot). */
	size_t n = 0;
	for (uint64_t i = 0; i < pages; i++) {
		perf_sglang_key(names + i * NAME_LEN, NAME_LEN, perf_mix(i), 1);
		if (i < hot || i >= 2 * hot) {
			in[n].slot = n;
			in[n++].name = names + i * NAME_LEN;
		}
	}

	if (perf_index_open(&ix, "lookup_bench", pages) < 0)
		return 1;
	struct meta *m = ix.m;
	int ret = meta_pool_create(m, 0, "kv", 4096, pages * 4096, &pool);
	for (size_t i = 0; ret == 0 && i < n; i++)
		in[i].pool_id = pool.id;
	if (ret == 0)
		ret = meta_adopt(m, in, n, NULL, NULL);
	if (ret < 0)
		return fprintf(stderr, "lookup_bench: %s\n", strerror(-ret)), 1;

	double e = run(m, pool.id, names, hot, seconds, 0);
	double g = run(m, pool.id, names, hot, seconds, 1);
	printf("pages=%llu hot=%llu exists_ns_per_key=%.1f get_ns_per_key=%.1f\n",
	       (unsigned long long)pages, (unsigned long long)hot, e, g);
	free(names);
	free(in);
	return perf_index_close(&ix) == 0 ? 0 : 1;
}
