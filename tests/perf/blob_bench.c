/*
 * blob_bench.c - what the SQLite index's page log blob (meta/store/
 * sqlite_blob.h) costs alone: nanoseconds of CPU time per key to encode
 * and to decode a blob of 64 pages named as SGLang names them (64 hex
 * digits of a hash and a model suffix, tests/perf/perf_common.h), as a
 * confirm of the 3FS protocol writes two of them for 128 keys.
 *
 *   blob_bench [SECONDS]
 *
 * Runs each call for SECONDS (default 1) of CPU time and prints ns/key.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "meta/store/sqlite_blob.h"
#include "perf_common.h"

#define KEYS 64

static double cpu_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 1.0;
	static struct bulk_row rows[KEYS];
	unsigned char *body = NULL;
	size_t len = 0;

	if (argc > 2 || !(seconds > 0)) {
		fprintf(stderr, "usage: blob_bench [SECONDS]\n");
		return 2;
	}
	for (size_t i = 0; i < KEYS; i++) {
		struct bulk_row *r = &rows[i];
		r->id = 1000 + i;
		r->pool_id = 1;
		r->slot = 500000 - i;
		r->length = 65536;
		r->mtime_ns = 1700000000000000000LL + (int64_t)i * 15259;
		r->atime_ns = r->mtime_ns;
		r->gen = 3;
		r->name_len = (uint16_t)perf_sglang_key(r->name, sizeof(r->name), perf_mix(i), 1);
	}
	for (int decode = 0; decode < 2; decode++) {
		double t0 = cpu_now(), t;
		unsigned long n = 0;
		do {
			for (int k = 0; k < 1000; k++, n++) {
				if (!decode) {
					free(body);
					if (store_blob_encode(rows, KEYS, 1, 1000, KEYS, &body,
					                      &len) != 0)
						return 1;
					continue;
				}
				struct bulk_row *back;
				size_t count;
				const char *why;
				if (store_blob_decode(body, len, 1, 1000, KEYS, &back, &count,
				                      &why) != 0 ||
				    count != KEYS)
					return 1;
				free(back);
			}
		} while ((t = cpu_now() - t0) < seconds);
		printf("%s: %.1f ns/key (%zu bytes for %d keys)\n", decode ? "decode" : "encode",
		       t * 1e9 / (double)n / KEYS, len, KEYS);
	}
	free(body);
	return 0;
}
