/*
 * parse_bench.c - what reading a request body costs serve/ alone: ns of
 * CPU time per body for the bodies of the 3FS protocol's routes as
 * tests/perf/http_load.c sends them (128 SGLang-named keys), read by each
 * tier of the fast paths (serve/flat.h: the scan, the copy) and by the
 * general parse (body_parse, the tree).
 *
 *   parse_bench [SECONDS]
 *
 * Runs each for SECONDS (default 0.5) of CPU time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "perf_common.h"
#include "serve/body.h"
#include "serve/flat.h"

#define KEYS 128
#define CAP (KEYS * 256)

static double cpu_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* The body of kind 0 (key list), 1 (reserve) or 2 (confirm), in b. */
static size_t make_body(char *b, int kind)
{
	static const char *const head[] = {"{\"keys\":[", "{\"keys\":[",
	                                   "{\"written_keys_to_confirm\":["};
	size_t n = (size_t)sprintf(b, "%s", head[kind]);
	char key[128];

	for (int i = 0; i < KEYS; i++) {
		perf_sglang_key(key, sizeof(key), perf_mix((uint64_t)i), 1);
		const char *sep = i ? "," : "";
		if (kind == 0)
			n += (size_t)sprintf(b + n, "%s\"%s\"", sep, key);
		else if (kind == 1)
			n += (size_t)sprintf(b + n, "%s[\"%s\",\"\"]", sep, key);
		else
			n += (size_t)sprintf(b + n, "%s[\"%s\",%d]", sep, key, 8000000 - i);
	}
	n += (size_t)sprintf(b + n, kind == 2 ? "],\"pages_to_release\":[]}" : "]}");
	return n;
}

/* One read of body (len bytes, copied to t first) by tier: 0 the scan,
 * 1 the copy, 2 the tree. Returns 0 if taken. */
static int read_once(const char *body, size_t len, char *t, int kind, int tier)
{
	char err[128];
	size_t pos;
	int rc;

	memcpy(t, body, len + 1);
	if (tier == 2) {
		yajl_val v = body_parse(t, len, err, sizeof(err), &pos);
		rc = v ? 0 : 1;
		if (v)
			body_free(v);
	} else if (kind == 0) {
		struct flat f;
		rc = (tier ? flat_parse_copy : flat_scan)(t, len, KEYS, &f);
		if (rc == 0)
			flat_free(&f);
	} else {
		struct flat_write w;
		rc = (tier ? flat_parse_write_copy : flat_scan_write)(t, len, kind == 2, KEYS, &w);
		if (rc == 0)
			flat_write_free(&w);
	}
	return rc;
}

int main(int argc, char **argv)
{
	static const char *const kinds[] = {"key list", "reserve", "confirm"};
	static const char *const tiers[] = {"scan", "copy", "tree"};
	double seconds = argc > 1 ? atof(argv[1]) : 0.5;
	static char body[CAP], t[CAP];

	if (argc > 2 || !(seconds > 0)) {
		fprintf(stderr, "usage: parse_bench [SECONDS]\n");
		return 2;
	}
	for (int kind = 0; kind < 3; kind++) {
		size_t len = make_body(body, kind);
		printf("%-8s (%zu bytes):", kinds[kind], len);
		for (int tier = 0; tier < 3; tier++) {
			double t0 = cpu_now(), el;
			unsigned long n = 0;
			do {
				for (int k = 0; k < 100; k++, n++)
					if (read_once(body, len, t, kind, tier) != 0) {
						fprintf(stderr,
						        "parse_bench: the %s did not take the %s "
						        "body\n",
						        tiers[tier], kinds[kind]);
						return 1;
					}
			} while ((el = cpu_now() - t0) < seconds);
			printf("  %s %.2f us", tiers[tier], el * 1e6 / (double)n);
		}
		printf("  (a body)\n");
	}
	return 0;
}
