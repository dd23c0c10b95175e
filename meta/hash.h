/*
 * hash.h - the page checksum, XXH3-64, fed as a stream at the speed the
 * CPU allows.
 *
 * The state is libxxhash's (XXH3_createState, _reset, _digest); only the
 * update, where the bytes go through, is ours: Debian's libxxhash is built
 * for SSE2 (about 15 GB/s here), the AVX2 variant of the same code runs at
 * about 43 GB/s, and a writer hashes every byte of a page on the way in.
 * The value is the same either way (XXH3 does not depend on the vector
 * width); tests/unit/test_hash.c checks it against libxxhash.
 */
#ifndef PAGEFS_META_HASH_H
#define PAGEFS_META_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <xxhash.h>

/* XXH3_64bits_update(st, buf, len) with AVX2 where the CPU has it. */
void meta_hash_update(XXH3_state_t *st, const void *buf, size_t len);

/* 1 if meta_hash_update uses AVX2 on this CPU (for tests and logs). */
int meta_hash_fast(void);

/* MurmurHash3's 64-bit finalizer: every bit of x moves every bit of the
 * result (ids of any stride spread over hash buckets; the bench makes
 * key-like names from counters with it). */
static inline uint64_t meta_mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

#endif
