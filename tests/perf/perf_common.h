/*
 * perf_common.h - what the measurement programs of tests/perf share: the
 * process's CPU time, a 64-bit mixer, and page keys of SGLang's shape.
 * Header-only: each program is one file built on its own.
 */
#ifndef PAGEFS_PERF_COMMON_H
#define PAGEFS_PERF_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <time.h>

/* CPU seconds this process has used (all threads). */
static inline double perf_cpu_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* splitmix64's finalizer: a bijection that scatters counters. */
static inline uint64_t perf_mix(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xBF58476D1CE4E5B9ULL;
	x ^= x >> 27;
	x *= 0x94D049BB133111EBULL;
	return x ^ (x >> 31);
}

/* A key as SGLang names pages, into out (size bytes): 64 hex digits and a
 * model suffix. hashed: the digits are h and perf_mix(h + 1 .. 3), as a
 * hash of tokens looks (keys in no order: an index keyed by name sees
 * random inserts); else h then zeros (a counter: appends). Its length. */
static inline size_t perf_sglang_key(char *out, size_t size, uint64_t h, int hashed)
{
	int n = snprintf(out, size, "%016llx%016llx%016llx%016llx_Qwen-Qwen3-32B_0_2",
	                 (unsigned long long)h, (unsigned long long)(hashed ? perf_mix(h + 1) : 0),
	                 (unsigned long long)(hashed ? perf_mix(h + 2) : 0),
	                 (unsigned long long)(hashed ? perf_mix(h + 3) : 0));
	return n < 0 ? 0 : (size_t)n;
}

#endif
