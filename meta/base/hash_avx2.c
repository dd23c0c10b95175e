/*
 * hash_avx2.c - XXH3's streaming update compiled for AVX2 (CMakeLists.txt
 * builds this one file with -mavx2; hash.c calls it only on a CPU that has
 * AVX2).
 *
 * xxhash.h is included inline here (XXH_INLINE_ALL: every function
 * static, renamed XXH_INLINE_*), so none of this AVX2 code is reachable
 * from elsewhere. The state it updates is one libxxhash created and
 * reset: the same header, so the same struct under another name, which
 * the static assertion below pins down.
 */
#if defined(__x86_64__)

#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX2
#include <xxhash.h>

#ifndef __AVX2__
#error "hash_avx2.c must be compiled with -mavx2"
#endif

_Static_assert(XXH_VERSION_MAJOR == 0 && XXH_VERSION_MINOR == 8,
               "the XXH3 state layout shared with libxxhash is 0.8's");

void meta_hash_update_avx2(void *st, const void *buf, size_t len);

void meta_hash_update_avx2(void *st, const void *buf, size_t len)
{
	(void)XXH3_64bits_update((XXH3_state_t *)st, buf, len);
}

#else
typedef int meta_hash_avx2_unused; /* an empty file is not ISO C */
#endif
