/*
 * hash.c - meta_hash_update: libxxhash's XXH3 update, or the AVX2 build
 * of the same code (hash_avx2.c) when the CPU and the kernel support AVX2.
 */
#include "meta/hash.h"

#include <stdatomic.h>

#if defined(__x86_64__)
/* hash_avx2.c: st is an XXH3_state_t of libxxhash's 0.8 layout. */
void meta_hash_update_avx2(void *st, const void *buf, size_t len);
#endif

int meta_hash_fast(void)
{
#if defined(__x86_64__)
	static _Atomic int fast = -1; /* threads may race to set it: same value */
	int f = atomic_load_explicit(&fast, memory_order_relaxed);

	if (f < 0) {
		__builtin_cpu_init();
		f = __builtin_cpu_supports("avx2") ? 1 : 0;
		atomic_store_explicit(&fast, f, memory_order_relaxed);
	}
	return f;
#else
	return 0;
#endif
}

void meta_hash_update(XXH3_state_t *st, const void *buf, size_t len)
{
#if defined(__x86_64__)
	if (meta_hash_fast()) {
		meta_hash_update_avx2(st, buf, len);
		return;
	}
#endif
	XXH3_64bits_update(st, buf, len);
}
