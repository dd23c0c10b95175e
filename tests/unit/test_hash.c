/*
 * test_hash.c - meta_hash_update (meta/hash.c) gives libxxhash's XXH3-64
 * for any split of the bytes into updates, on the AVX2 path where the CPU
 * has it: the page checksums stored by older builds stay valid.
 */
#include "meta/hash.h"

#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>

#define LEN ((3u << 20) + 4099u)

static unsigned char *random_bytes(size_t len, uint64_t seed)
{
	unsigned char *b = malloc(len);

	cr_assert_not_null(b);
	for (size_t i = 0; i < len; i++) {
		seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
		b[i] = (unsigned char)(seed >> 56);
	}
	return b;
}

/* The stream of len bytes fed in pieces of `step` (0: growing pieces). */
static uint64_t streamed(const unsigned char *b, size_t len, size_t step)
{
	XXH3_state_t *st = XXH3_createState();
	size_t off = 0, grow = 1;
	uint64_t h;

	cr_assert_not_null(st);
	XXH3_64bits_reset(st);
	while (off < len) {
		size_t n = step ? step : grow++ * 37;

		if (n > len - off)
			n = len - off;
		meta_hash_update(st, b + off, n);
		off += n;
	}
	h = XXH3_64bits_digest(st);
	XXH3_freeState(st);
	return h;
}

Test(hash, stream_equals_libxxhash_one_shot_for_every_split)
{
	static const size_t steps[] = {0,    1,    63,   64,    65,      239, 240,
	                               1000, 1024, 4096, 65536, 1 << 20, LEN};
	unsigned char *b = random_bytes(LEN, 42);
	uint64_t want = XXH3_64bits(b, LEN);

	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
		cr_expect_eq(streamed(b, LEN, steps[i]), want, "step %zu", steps[i]);
	free(b);
}

Test(hash, short_and_unaligned_inputs_match_too)
{
	unsigned char *b = random_bytes(5000, 7);

	for (size_t len = 0; len < 5000; len += len < 300 ? 1 : 97)
		for (size_t at = 0; at < 3; at++)
			cr_expect_eq(streamed(b + at, len, 0), XXH3_64bits(b + at, len),
			             "len %zu at %zu", len, at);
	free(b);
}

Test(hash, uses_avx2_where_the_cpu_has_it)
{
#if defined(__x86_64__)
	__builtin_cpu_init();
	cr_expect_eq(meta_hash_fast(), __builtin_cpu_supports("avx2") ? 1 : 0);
#else
	cr_expect_eq(meta_hash_fast(), 0);
#endif
}
