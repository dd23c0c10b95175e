/*
 * arena.c - where struct page lives: one reserved region of the address
 * space, carved into pieces of a multiple of 8 bytes, so that a page is
 * named by a 32-bit reference (its offset / 8) instead of a pointer.
 *
 * A page was a malloc chunk (an 8-byte header, rounded to 16) holding
 * four 8-byte pointers to other pages (LRU, two hash chains), and the two
 * hash tables held 8-byte pointers too. Here a page costs its size rounded
 * to 8 and every link to it 4 bytes.
 *
 * The region is reserved once per process (32 GiB of address space, less
 * where that is refused) without access, and made writable GROW bytes at
 * a time as pieces are handed out: only that part is memory the kernel
 * accounts for, a core dump holds, or valgrind's leak check scans (it
 * read all 32 GiB at every daemon's exit). It is shared by every index
 * the process opens. Pieces come from the top
 * of the used part, or from a free list per size (freed pieces of that
 * size, linked through their first 4 bytes). Nothing is given back to the
 * kernel: freed pieces are reused, as malloc would reuse them. One mutex;
 * a page is allocated once per page written, not per lookup.
 *
 * Under AddressSanitizer free pieces are poisoned and every piece is
 * followed by an 8-byte poisoned gap, so a use after free or a write past
 * a page's name is still reported (the untouched rest of the region is
 * not poisoned: its shadow would be 4 GiB).
 */
#include "meta/index.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__SANITIZE_ADDRESS__)
#define ARENA_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ARENA_ASAN 1
#endif
#endif

#ifdef ARENA_ASAN
#include <sanitizer/asan_interface.h>
#define GAP 8u
#define POISON(a, n) ASAN_POISON_MEMORY_REGION((a), (n))
#define UNPOISON(a, n) ASAN_UNPOISON_MEMORY_REGION((a), (n))
#else
#define GAP 0u
#define POISON(a, n) ((void)(a), (void)(n))
#define UNPOISON(a, n) ((void)(a), (void)(n))
#endif

#define UNIT 8u
#define GROW ((size_t)64 << 20) /* bytes made writable at a time */
#define CLASSES (ARENA_MAX_PIECE / UNIT + 1)

unsigned char *arena_base;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static size_t reserved;             /* bytes of address space */
static size_t top;                  /* bytes handed out from the start */
static size_t writable;             /* bytes made writable from the start */
static uint32_t free_head[CLASSES]; /* per size / UNIT: first free piece */
static atomic_size_t live;          /* pieces handed out and not freed */

/* Reserves the region, the largest size the kernel grants. */
static int reserve(void)
{
	for (size_t size = (size_t)32 << 30; size >= ((size_t)64 << 20); size /= 4) {
		void *a = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		               -1, 0);
		if (a == MAP_FAILED)
			continue;
		/* As the heap (docs/DECISIONS.md): fewer first-touch faults
		 * while an index loads, fewer TLB misses on lookups; and as
		 * for the heap, PAGEFS_HUGE_HEAP=0 turns it off. */
		const char *huge = getenv("PAGEFS_HUGE_HEAP");
		if (!huge || strcmp(huge, "0") != 0)
			(void)madvise(a, size, MADV_HUGEPAGE);
		arena_base = a;
		reserved = size;
		top = UNIT; /* offset 0 is the null reference */
		return 0;
	}
	return -ENOMEM;
}

/* Makes the region writable up to at least end. 0 or -ENOMEM. */
static int grow_to(size_t end)
{
	size_t want = writable;

	while (want < end && want < reserved)
		want = want + GROW < reserved ? want + GROW : reserved;
	if (want < end ||
	    mprotect(arena_base + writable, want - writable, PROT_READ | PROT_WRITE) < 0)
		return -ENOMEM;
	writable = want;
	return 0;
}

void *index_arena_alloc(size_t size)
{
	size_t n = (size + UNIT - 1) / UNIT * UNIT;
	void *p = NULL;

	if (n > ARENA_MAX_PIECE)
		return NULL;
	pthread_mutex_lock(&lock);
	if (!arena_base && reserve() < 0)
		goto out;
	uint32_t head = free_head[n / UNIT];
	if (head) {
		p = arena_base + (size_t)head * UNIT;
		UNPOISON(p, n);
		memcpy(&free_head[n / UNIT], p, sizeof(uint32_t));
	} else if (top + n + GAP <= writable || grow_to(top + n + GAP) == 0) {
		/* Nothing above top was ever poisoned: poisoning the whole
		 * region would touch 4 GiB of ASan's shadow memory. */
		p = arena_base + top;
		POISON((unsigned char *)p + n, GAP);
		top += n + GAP;
	}
	if (p) {
		memset(p, 0, n);
		atomic_fetch_add(&live, 1);
	}
out:
	pthread_mutex_unlock(&lock);
	return p;
}

void index_arena_free(void *p, size_t size)
{
	size_t n = (size + UNIT - 1) / UNIT * UNIT;
	uint32_t ref = (uint32_t)(((unsigned char *)p - arena_base) / UNIT);

	pthread_mutex_lock(&lock);
	memcpy(p, &free_head[n / UNIT], sizeof(uint32_t));
	free_head[n / UNIT] = ref;
	POISON(p, n);
	atomic_fetch_sub(&live, 1);
	pthread_mutex_unlock(&lock);
}

size_t index_arena_live(void)
{
	return atomic_load(&live);
}
