/*
 * test_pname.c - page names as struct page holds them (meta/pname.c):
 * every name comes back as the exact text it was given, the packed form
 * is smaller for SGLang's hex names and no larger for any other, and
 * equality holds only between identical texts.
 */
#include "meta/cluster.h"
#include "meta/index.h"
#include "meta/ops.h"
#include "meta/record.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char sha[] = "0f3a9c1e5b7d2468ace0135792468bdf0f3a9c1e5b7d2468ace0135792468bdf";

/* Bytes of packed[] a page of that name takes. */
static size_t packed_size(const char *name, size_t len)
{
	struct index_pname_plan plan;

	return index_pname_plan(name, len, &plan);
}

static struct page *make(const char *name)
{
	struct page *p = index_page_alloc(name, strlen(name));

	cr_assert_not_null(p);
	return p;
}

/* Gives the text back, and says whether it equals itself. */
static void round_trip(const char *name)
{
	char out[META_NAME_MAX + 1];
	struct page *p = make(name);

	cr_assert_eq(p->name_len, strlen(name));
	cr_assert_str_eq(index_pname_text(p, out), name);
	cr_assert(index_pname_eq(p, name, strlen(name)), "'%s' is not equal to itself", name);
	index_page_free(p);
}

Test(pname, round_trips)
{
	char all_hex[256], odd_hex[256], high[8] = {'a', 'b', (char)0xc3, (char)0xa9, 'f', 0};

	memset(all_hex, 'e', 255);
	all_hex[255] = '\0';
	memset(odd_hex, '7', 254);
	odd_hex[254] = 'x';
	odd_hex[255] = '\0';
	const char *names[] = {
		sha,
		"0f3a9c1e5b7d2468ace0135792468bdf0f3a9c1e5b7d2468ace0135792468bdf_Qwen-Qwen3-32B_0_"
		"2.bin",
		"0F3A9C1E", /* uppercase: held as text */
		"abc",      /* odd run: "ab" packed, "c" as text */
		"a",
		"g0",
		"0",
		"page-1",
		"ff.tmp",
		all_hex, /* 254 packed (what hex_bytes holds, halved), one as text */
		odd_hex,
		high,
	};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		round_trip(names[i]);
}

Test(pname, packs_hex_prefixes_only)
{
	char suffixed[128];

	cr_assert_eq(packed_size(sha, 64), 32);
	snprintf(suffixed, sizeof(suffixed), "%s_Qwen-Qwen3-32B_0_2.bin", sha);
	cr_assert_eq(packed_size(suffixed, strlen(suffixed)), 32 + 2); /* the tail interned */
	cr_assert_eq(packed_size("abc", 3), 2);                        /* 0xab, 'c' */
	cr_assert_eq(packed_size("ABCDEF", 6), 6);                     /* uppercase stays text */
	cr_assert_eq(packed_size("x0123456", 8), 8);                   /* not at the start */
	cr_assert_eq(packed_size("page-00001", 10), 10);               /* no run of two */
	cr_assert_eq(packed_size("0a1b2c3d.bin", 12), 8);              /* 4 bytes + ".bin" */

	struct page *p = make("0a1b2c3d.bin");
	cr_assert_eq(pname_hex(p), 8);
	cr_assert_eq(p->packed[0], 0x0a);
	cr_assert_eq(p->packed[3], 0x3d);
	cr_assert_eq(memcmp(p->packed + 4, ".bin", 4), 0);
	index_page_free(p);
}

Test(pname, equal_only_to_the_same_text)
{
	struct page *p = make(sha);
	char other[65];

	memcpy(other, sha, sizeof(other));
	for (size_t i = 0; i < 64; i++) { /* one digit changed anywhere */
		other[i] = other[i] == '0' ? '1' : '0';
		cr_assert_not(index_pname_eq(p, other, 64), "equal with digit %zu changed", i);
		other[i] = sha[i];
	}
	cr_assert(index_pname_eq(p, other, 64));
	other[3] = 'A'; /* sha[3] is 'a': the uppercase name is another name */
	cr_assert_eq(sha[3], 'a');
	cr_assert_not(index_pname_eq(p, other, 64));
	cr_assert_not(index_pname_eq(p, sha, 63)); /* a prefix */
	index_page_free(p);

	struct page *a = make("abc_x"), *b = make("abc_x"), *c = make("abc_y"), *d = make("ABC_x");
	cr_assert(index_pname_same(a, b));
	cr_assert_not(index_pname_same(a, c));
	cr_assert_not(index_pname_same(a, d));
	cr_assert_not(index_pname_eq(a, "abd_x", 5));
	cr_assert_not(index_pname_eq(a, "abc_x_", 6));
	/* text that looks like another name's packed bytes is not that name */
	struct page *raw = index_page_alloc("\xab"
	                                    "c_x",
	                                    4);
	cr_assert_not_null(raw);
	cr_assert_not(index_pname_same(a, raw));
	cr_assert_not(index_pname_eq(raw, "abc_x", 5));
	index_page_free(raw);
	index_page_free(a);
	index_page_free(b);
	index_page_free(c);
	index_page_free(d);
}

Test(pname, hex_names_take_less_memory)
{
	/* What the structures hold: the fixed part and the packed name, in
	 * arena pieces of 8 bytes: 104 for a SHA-256 key (3FS) and for one
	 * with an interned tail (SGLang's file backend). */
	cr_assert_leq(offsetof(struct page, packed) + packed_size(sha, 64), 104);
	cr_assert_leq(offsetof(struct page, packed) + 32 + 2, 104);
}

/* Names with a hex run of every length, ended by every kind of byte that
 * is not a lowercase digit, against what the packing must give: the
 * 16-byte and one-byte loops meet at every offset. */
Test(pname, every_run_length)
{
	static const char stops[] = {'A', 'F', 'g', 'z', '_', '.', ':', '`', '@', '\x80', '\xff'};
	uint64_t seed = 42;
	char name[256], out[256], other[256];

	for (size_t len = 1; len <= 255; len++) {
		for (size_t run = 0; run <= len; run++) {
			seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
			for (size_t i = 0; i < len; i++)
				name[i] = "0123456789abcdef"[(seed >> (i % 60)) & 15];
			if (run < len)
				name[run] = stops[(seed >> 7) % sizeof(stops)];
			name[len] = '\0';
			size_t hex = (run > 254 ? 254 : run) & ~(size_t)1;
			int interned = hex >= 16 && len - hex >= 3; /* the table never fills here */
			struct page *p = index_page_alloc(name, len);
			cr_assert_not_null(p);
			cr_assert_eq(pname_hex(p), hex, "len %zu run %zu", len, run);
			cr_assert_eq(p->name_tail, interned, "len %zu run %zu", len, run);
			cr_assert_eq(packed_size(name, len), hex / 2 + (interned ? 2 : len - hex));
			cr_assert_eq(memcmp(index_pname_text(p, out), name, len + 1), 0,
			             "len %zu run %zu", len, run);
			cr_assert(index_pname_eq(p, name, len));
			size_t at = (seed >> 20) % len; /* one byte changed, anywhere */
			memcpy(other, name, len + 1);
			other[at] = other[at] == 'a' ? 'b' : 'a';
			cr_assert_not(index_pname_eq(p, other, len), "len %zu run %zu at %zu", len,
			              run, at);
			index_page_free(p);
		}
	}
}

/* The arena (meta/arena.c) that pages live in: references name pages,
 * freed pieces are reused for pages of their size, pieces come zeroed. */
Test(arena, references_and_reuse)
{
	size_t live = index_arena_live();
	struct page *a = make(sha), *b = make("page-b");

	cr_assert_eq(index_arena_live(), live + 2);
	cr_assert_neq(page_ref(a), 0);
	cr_assert_eq(page_at(page_ref(a)), a);
	cr_assert_eq(page_at(page_ref(b)), b);
	cr_assert_null(page_at(0));
	cr_assert_eq(page_ref(NULL), 0);
	cr_assert_eq((uintptr_t)a % 8, 0, "pages are 8-byte aligned");
	a->id = 77;
	a->lru_next = page_ref(b);
	index_page_free(a);
	cr_assert_eq(index_arena_live(), live + 1);
	struct page *c = make(sha); /* same size: the piece a had */
	cr_assert_eq(c, a);
	cr_assert_eq(c->id, 0, "a reused piece comes zeroed");
	cr_assert_eq(c->lru_next, 0);
	index_page_free(c);
	index_page_free(b);
	cr_assert_eq(index_arena_live(), live);
	cr_assert_null(index_arena_alloc(ARENA_MAX_PIECE + 1));
}

/* Tails after a hash (tails.c): one id per text, shared by every page
 * that ends so; a name that is not a hash keeps its own text. */
Test(pname, tails_after_a_hash_are_shared)
{
	char a_name[128], b_name[128], c_name[128], out[256];

	snprintf(a_name, sizeof(a_name), "%s_Qwen-Qwen3-32B_0_2.bin", sha);
	snprintf(b_name, sizeof(b_name), "%.62s17_Qwen-Qwen3-32B_0_2.bin", sha);
	snprintf(c_name, sizeof(c_name), "%s_Qwen-Qwen3-32B_1_2.bin", sha);
	struct page *a = make(a_name), *b = make(b_name), *c = make(c_name);
	cr_assert(a->name_tail && b->name_tail && c->name_tail);
	cr_assert_eq(index_pname_stored(a), 34);
	cr_assert_eq(memcmp(a->packed + 32, b->packed + 32, 2), 0, "one id for one text");
	cr_assert_neq(memcmp(a->packed + 32, c->packed + 32, 2), 0, "another text, another id");
	cr_assert_str_eq(index_pname_text(a, out), a_name);
	cr_assert_str_eq(index_pname_text(c, out), c_name);
	cr_assert(index_pname_eq(a, a_name, strlen(a_name)));
	cr_assert_not(index_pname_eq(a, c_name, strlen(c_name)));
	cr_assert_not(index_pname_eq(a, b_name, strlen(b_name)));
	cr_assert_not(index_pname_same(a, c));

	struct page *short_hex = make("0a1b2c3d_Qwen-Qwen3-32B_0_2.bin"); /* 8 digits: no hash */
	cr_assert_not(short_hex->name_tail);
	cr_assert_eq(index_pname_stored(short_hex), 4 + 23);

	/* the same name held inline (as it would be had the table been
	 * full when its tail first came) is still the same name */
	size_t n = strlen(a_name);
	struct page *inline_a = index_arena_alloc(offsetof(struct page, packed) + 32 + (n - 64));
	cr_assert_not_null(inline_a);
	memcpy(inline_a->packed, a->packed, 32);
	memcpy(inline_a->packed + 32, a_name + 64, n - 64);
	inline_a->name_len = (uint16_t)n;
	inline_a->hex_bytes = 32;
	cr_assert_str_eq(index_pname_text(inline_a, out), a_name);
	cr_assert(index_pname_same(a, inline_a));
	cr_assert(index_pname_same(inline_a, a));
	cr_assert_not(index_pname_same(inline_a, c));
	index_page_free(inline_a);
	index_page_free(short_hex);
	index_page_free(a);
	index_page_free(b);
	index_page_free(c);
}

Test(pname, a_full_tail_table_leaves_new_tails_inline)
{
	char name[128], tail[32], out[256];
	uint16_t known = index_tail_intern("_known.bin", 10);

	cr_assert_neq(known, 0);
	for (unsigned i = 1; i < TAILS_MAX; i++) {
		int len = snprintf(tail, sizeof(tail), "_filler_%u", i);
		cr_assert_neq(index_tail_intern(tail, (size_t)len), 0, "tail %u", i);
	}
	cr_assert_eq(index_tail_intern("_one_too_many", 13), 0, "the table is full");
	cr_assert_eq(index_tail_intern("_known.bin", 10), known, "an interned text keeps its id");

	snprintf(name, sizeof(name), "%s_new.bin", sha);
	struct page *p = make(name);
	cr_assert_not(p->name_tail);
	cr_assert_eq(index_pname_stored(p), 32 + 8);
	cr_assert_str_eq(index_pname_text(p, out), name);
	cr_assert(index_pname_eq(p, name, strlen(name)));
	index_page_free(p);
	snprintf(name, sizeof(name), "%s_known.bin", sha);
	p = make(name);
	cr_assert(p->name_tail);
	cr_assert_str_eq(index_pname_text(p, out), name);
	index_page_free(p);
}

/* A page names its pool by a 2-byte index (pool_index.c): at most
 * POOLS_MAX pools at once; a freed pool's index is taken again. */
Test(pool_index, pages_find_their_pool_and_the_table_has_a_limit)
{
	static struct pool *pools[POOLS_MAX];
	struct page *p = make(sha);

	for (unsigned i = 0; i < POOLS_MAX; i++) {
		pools[i] = index_pool_new();
		cr_assert_not_null(pools[i], "pool %u of %u: %s", i, POOLS_MAX, strerror(errno));
		cr_assert_eq(pools[i]->fd, -1, "a new pool has no data file yet");
	}
	page_set_pool(p, pools[1234]);
	cr_assert_eq(page_pool(p), pools[1234]);
	errno = 0;
	cr_assert_null(index_pool_new(), "pool %u", POOLS_MAX + 1);
	cr_assert_eq(errno, ENOSPC);
	uint16_t ix = pools[7]->ix;
	index_pool_free(pools[7]);
	struct pool *again = index_pool_new();
	cr_assert_not_null(again, "a freed pool's index is free again");
	cr_assert_eq(again->ix, ix);
	pools[7] = again;
	cr_assert_eq(page_pool(p), pools[1234]);
	for (unsigned i = 0; i < POOLS_MAX; i++)
		index_pool_free(pools[i]);
	index_page_free(p);
}

/* struct page keeps mtimes in 2^-16 s: a commit's time (page_mtime_grain)
 * is at most META_MTIME_GRAIN_NS before the clock's and comes back
 * exactly from the page (so stat and the store agree, and a remount shows
 * the same mtime); times out of range are clamped, not wrapped. */
Test(page, mtimes_keep_their_grain_and_come_back_exactly)
{
	struct page *p = make(sha);
	uint64_t x = 88172645463325252ull;

	for (int i = 0; i < 200000; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		int64_t ns = (int64_t)(x % (4102444800ull * 1000000000ull)); /* to 2100 */
		int64_t g = page_mtime_grain(ns);
		cr_assert(g <= ns && ns - g < META_MTIME_GRAIN_NS, "%lld -> %lld", (long long)ns,
		          (long long)g);
		page_set_mtime(p, g);
		cr_assert_eq(page_mtime(p), g, "%lld stored as %lld", (long long)g,
		             (long long)page_mtime(p));
		page_set_mtime(p, ns);
		cr_assert_eq(page_mtime(p), g, "%lld kept as %lld, not %lld", (long long)ns,
		             (long long)page_mtime(p), (long long)g);
	}
	page_set_mtime(p, -5);
	cr_assert_eq(page_mtime(p), 0);
	page_set_mtime(p, INT64_MAX);
	cr_assert_geq(page_mtime(p), (int64_t)UINT32_MAX * 1000000000ll, "clamped to 2106");
	index_page_free(p);
}

/* Pages keep 48 bits of an id (as inode numbers do): the ids run out
 * there instead of wrapping onto page 0's. */
Test(page, ids_stop_at_48_bits)
{
	struct idblock b = {.next = META_PAGE_ID_MAX - 1, .end = UINT64_MAX};
	struct page *p = make(sha);

	cr_assert_eq(index_id_take(&b), META_PAGE_ID_MAX - 1);
	p->id = index_id_take(&b);
	cr_assert_eq(p->id, META_PAGE_ID_MAX, "the last id fits a page");
	cr_assert_eq(index_id_left(&b), 0);
	cr_assert_eq(index_id_take(&b), 0, "no id past 48 bits");
	index_page_free(p);
}
