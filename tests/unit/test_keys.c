/*
 * test_keys.c - the mini_3fs_metadata_server protocol on the index
 * (meta/keys.c) and bulk adoption (meta/adopt.c): slots from the top
 * down, one slot per key, no leaks when the pool runs out, confirms that
 * publish only reserved slots (and are logged a line a second at most),
 * quarantined deletes, durable confirms, lookups that move a page in the
 * LRU at its first use in a second.
 */
#include "fixture.h"
#include "meta/index.h"
#include "meta/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

TestSuite(keys, .init = fx_setup, .fini = fx_teardown, .timeout = 30);

static uint32_t init_pool(int rank, const char *ns, uint64_t pages)
{
	char msg[512] = "";
	uint32_t id;
	int differs;
	int ret = meta_keys_initialize(fx.m, rank, ns, pages, &differs, msg, sizeof(msg));

	cr_assert_eq(ret, 0, "initialize %d/%s: %s %s", rank, ns, strerror(-ret), msg);
	cr_assert_eq(meta_keys_pool(fx.m, rank, ns, &id), 0);
	return id;
}

static void reserve(uint32_t pool, const char *const *keys, size_t n, int64_t *slots)
{
	uint8_t existed[64];
	int ret = meta_keys_reserve(fx.m, pool, keys, n, existed, slots);
	cr_assert_eq(ret, 0, "reserve: %s", strerror(-ret));
}

Test(keys, reserve_hands_out_slots_from_the_top_down)
{
	uint32_t p = init_pool(0, "http", 8);
	const char *keys[] = {"a", "b", "c"};
	int64_t s[3];

	reserve(p, keys, 3, s);
	cr_assert(s[0] == 7 && s[1] == 6 && s[2] == 5, "got %lld %lld %lld", (long long)s[0],
	          (long long)s[1], (long long)s[2]);
}

Test(keys, repeated_key_in_a_batch_gets_one_slot)
{
	uint32_t p = init_pool(0, "http", 8);
	const char *keys[] = {"a", "b", "a"};
	int64_t s[3];

	reserve(p, keys, 3, s);
	cr_assert_eq(s[0], s[2]);
	cr_assert_neq(s[0], s[1]);
}

Test(keys, exhausted_pool_answers_minus_one_without_leaking)
{
	uint32_t p = init_pool(0, "http", 2);
	const char *keys[] = {"a", "b", "c"};
	int64_t s[3], rel[2];
	size_t ignored;

	reserve(p, keys, 3, s);
	cr_assert_eq(s[2], -1, "third key in a 2-page pool gets -1, not %lld", (long long)s[2]);
	rel[0] = s[0];
	rel[1] = s[1];
	cr_assert_eq(meta_keys_confirm(fx.m, p, NULL, NULL, 0, rel, 2, &ignored), 0);
	reserve(p, keys, 2, s);
	cr_assert(s[0] >= 0 && s[1] >= 0, "released slots are free again");
}

Test(keys, confirm_publishes_a_durable_page_of_slot_size_without_checksum)
{
	uint32_t p = init_pool(0, "http", 8);
	const char *keys[] = {"k"};
	int64_t s[1];
	size_t ignored;

	reserve(p, keys, 1, s);
	cr_assert_eq(meta_keys_confirm(fx.m, p, keys, s, 1, NULL, 0, &ignored), 0);
	cr_assert_eq(ignored, 0);
	fx_reopen();
	cr_assert_eq(meta_keys_pool(fx.m, 0, "http", &p), 0);
	struct meta_page_info pi = lookup_ok(p, "k");
	cr_assert_eq(pi.slot, (uint64_t)s[0]);
	cr_assert_eq(pi.length, FX_SLOT_SIZE);
	cr_assert_eq(pi.has_checksum, 0);
	meta_page_set_checksum(fx.m, pi.id, pi.slot, 0x1234);
	fx_reopen();
	pi = lookup_ok(p, "k");
	cr_assert(pi.has_checksum && pi.checksum == 0x1234, "the first checksum is recorded");
}

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Lines of the log file at path holding what. */
static int lines_with(const char *path, const char *what)
{
	FILE *f = fopen(path, "r");
	char line[1024];
	int n = 0;

	cr_assert(f);
	while (fgets(line, sizeof(line), f))
		n += strstr(line, what) != NULL;
	fclose(f);
	return n;
}

Test(keys, ignored_confirms_are_logged_at_most_once_a_second_with_their_count)
{
	char path[] = "/tmp/pagefs-test-keys-log.XXXXXX";
	int fd = mkstemp(path);
	uint32_t p = init_pool(0, "http", 8);
	static char names[1000][8];
	const char *keys[1000], *a[] = {"a"};
	int64_t s[1000], sa[1];
	size_t ignored;

	cr_assert(fd >= 0);
	close(fd);
	cr_assert_eq(log_open_file(path), 0);
	for (int i = 0; i < 1000; i++) {
		snprintf(names[i], sizeof(names[i]), "k%d", i);
		keys[i] = names[i];
		s[i] = -1; /* refused, and confirmed all the same */
	}
	reserve(p, a, 1, sa);
	cr_assert_eq(meta_keys_confirm(fx.m, p, a, sa, 1, NULL, 0, &ignored), 0);
	double t0 = mono_s();
	for (int round = 0; round < 3; round++) {
		cr_assert_eq(meta_keys_confirm(fx.m, p, keys, s, 1000, NULL, 0, &ignored), 0);
		cr_assert_eq(ignored, 1000);
	}
	/* a release line is not held back by the confirm lines */
	for (int round = 0; round < 2; round++) {
		cr_assert_eq(meta_keys_confirm(fx.m, p, NULL, NULL, 0, sa, 1, &ignored), 0);
		cr_assert_eq(ignored, 1, "releasing the slot 'a' maps is ignored");
	}
	double took = mono_s() - t0;
	int confirms = lines_with(path, "confirm of key 'k0' at page -1 ignored");
	int releases = lines_with(path, "release of page");
	cr_assert_eq(lines_with(path, "1000 confirm(s) ignored since"), 1, "the first line");
	if (took < 0.9) { /* (a slow machine may open the next second) */
		cr_assert_eq(confirms, 1, "3000 confirms ignored within a second make one line");
		cr_assert_eq(releases, 1, "2 releases ignored within a second make one line");
	} else {
		cr_assert(confirms >= 1 && confirms <= 3 && releases >= 1 && releases <= 2);
	}
	cr_assert_eq(lines_with(path, "1 release(s) ignored since"), 1);
	unlink(path);
}

Test(keys, confirm_of_an_unreserved_slot_and_release_of_a_mapped_one_are_ignored)
{
	uint32_t p = init_pool(0, "http", 8);
	const char *keys[] = {"a"}, *other[] = {"b"};
	int64_t s[1], bogus[1] = {3};
	size_t ignored;
	uint8_t ex[1];

	cr_assert_eq(meta_keys_confirm(fx.m, p, other, bogus, 1, NULL, 0, &ignored), 0);
	cr_assert_eq(ignored, 1);
	reserve(p, keys, 1, s);
	cr_assert_eq(meta_keys_confirm(fx.m, p, keys, s, 1, s, 1, &ignored), 0);
	cr_assert_eq(ignored, 1, "releasing the slot 'a' maps is ignored");
	cr_assert_eq(meta_keys_confirm(fx.m, p, other, s, 1, NULL, 0, &ignored), 0);
	cr_assert_eq(ignored, 1, "a second key on a mapped slot is ignored");
	meta_keys_exists(fx.m, p, other, 1, ex);
	cr_assert_eq(ex[0], 0);
	meta_keys_exists(fx.m, p, keys, 1, ex);
	cr_assert_eq(ex[0], 1);
}

/* A confirm must name the key that reserved the slot: a late confirm of
 * an expired reservation whose slot went to another key, or two keys'
 * slots swapped, put a key on bytes written for another (found by a
 * probe). */
Test(keys, a_confirm_naming_another_keys_reservation_is_ignored)
{
	uint32_t p = init_pool(0, "http", 8);
	const char *keys[] = {"x", "y"};
	int64_t s[2], swapped[2], got[2];
	size_t ignored;

	reserve(p, keys, 2, s);
	swapped[0] = s[1];
	swapped[1] = s[0];
	cr_assert_eq(meta_keys_confirm(fx.m, p, keys, swapped, 2, NULL, 0, &ignored), 0);
	cr_assert_eq(ignored, 2, "swapped slots confirmed (%zu ignored)", ignored);
	cr_assert_eq(meta_keys_get(fx.m, p, keys, 2, got), 0);
	cr_assert(got[0] == -1 && got[1] == -1, "get: %lld %lld", (long long)got[0],
	          (long long)got[1]);
	cr_assert_eq(meta_keys_confirm(fx.m, p, keys, s, 2, NULL, 0, &ignored), 0);
	cr_assert_eq(ignored, 0, "the right confirms were refused (%zu ignored)", ignored);
	cr_assert_eq(meta_keys_get(fx.m, p, keys, 2, got), 0);
	cr_assert(got[0] == s[0] && got[1] == s[1]);
}

Test(keys, deleted_slot_is_not_handed_out_during_the_quarantine)
{
	uint32_t p = init_pool(0, "http", 8);
	const char *keys[] = {"a"}, *more[] = {"b", "c", "d", "e", "f", "g", "h"};
	int64_t s[1], t[7];
	size_t ignored, deleted;

	reserve(p, keys, 1, s);
	meta_keys_confirm(fx.m, p, keys, s, 1, NULL, 0, &ignored);
	cr_assert_eq(meta_keys_delete(fx.m, p, keys, 1, &deleted), 0);
	cr_assert_eq(deleted, 1);
	reserve(p, more, 7, t);
	for (int i = 0; i < 7; i++)
		cr_assert_neq(t[i], s[0], "slot %lld reused at once", (long long)s[0]);
}

/* Reservation deadlines live in chunks of 4096 slots made on first use
 * (fuzz_serve: initialize with 4 billion pages made the server calloc
 * 32 GiB at once). Slots 4097, 4096 and 4095 sit in two chunks. */
Test(keys, reservations_in_two_chunks_confirm_release_and_clear)
{
	uint32_t p = init_pool(0, "http", 4098);
	const char *keys[] = {"a", "b", "c"};
	int64_t s[3], got[3], rel[1];
	size_t ignored;

	reserve(p, keys, 3, s);
	cr_assert(s[0] == 4097 && s[1] == 4096 && s[2] == 4095, "got %lld %lld %lld",
	          (long long)s[0], (long long)s[1], (long long)s[2]);
	rel[0] = s[2];
	cr_assert_eq(meta_keys_confirm(fx.m, p, keys, s, 2, rel, 1, &ignored), 0);
	cr_assert_eq(ignored, 0, "%zu entries ignored", ignored);
	cr_assert_eq(meta_keys_confirm(fx.m, p, keys + 2, s + 2, 1, NULL, 0, &ignored), 0);
	cr_assert_eq(ignored, 1, "a confirm of a released slot is ignored");
	cr_assert_eq(meta_keys_get(fx.m, p, keys, 3, got), 0);
	cr_assert(got[0] == 4097 && got[1] == 4096 && got[2] == -1, "get: %lld %lld %lld",
	          (long long)got[0], (long long)got[1], (long long)got[2]);
	reserve(p, keys + 2, 1, s + 2);
	cr_assert_eq(meta_keys_clear(fx.m, p), 0);
	cr_assert_eq(meta_keys_get(fx.m, p, keys, 3, got), 0);
	cr_assert(got[0] == -1 && got[1] == -1 && got[2] == -1, "after clear: %lld %lld %lld",
	          (long long)got[0], (long long)got[1], (long long)got[2]);
	/* A reservation outlives the clear: its writer may still write. */
	cr_assert_eq(meta_keys_confirm(fx.m, p, keys + 2, s + 2, 1, NULL, 0, &ignored), 0);
	cr_assert_eq(ignored, 0, "clear dropped the reservation of slot %lld", (long long)s[2]);
	cr_assert_eq(meta_keys_get(fx.m, p, keys + 2, 1, got), 0);
	cr_assert_eq(got[0], s[2], "the key confirmed after the clear is at %lld",
	             (long long)got[0]);
}

Test(keys, initialize_with_another_size_keeps_the_pool)
{
	char msg[256];
	int differs;
	struct meta_pool_info pi;

	init_pool(0, "http", 8);
	cr_assert_eq(meta_keys_initialize(fx.m, 0, "http", 4, &differs, msg, sizeof(msg)), 0);
	cr_assert_eq(differs, 1);
	cr_assert_eq(meta_pool_find(fx.m, 0, "http", &pi), 0);
	cr_assert_eq(pi.capacity, 8);
}

Test(keys, page_size_is_derived_only_when_unambiguous)
{
	cr_assert_eq(meta_page_size_of(8 * 4096, 8), 4096);
	cr_assert_eq(meta_page_size_of(100, 3), 0, "26..33-byte pages all give 3 pages");
	cr_assert_eq(meta_page_size_of(1000003, 1000), 1000);
	cr_assert_eq(meta_page_size_of(1ULL << 40, 1ULL << 25), 1ULL << 15);
	/* SGLang sizes num_pages = file_size // bytes_per_page: a 1T file of 3 MB
	 * pages fits 3000001 just as well, so the caller must be told. */
	cr_assert_eq(meta_page_size_of(1ULL << 40, (1ULL << 40) / 3000000), 0);
}

Test(keys, adopt_is_all_or_nothing)
{
	uint32_t p = init_pool(0, "imp", 8);
	struct meta_adopt_page in[3] = {{p, 1, "a"}, {p, 2, "b"}, {p, 1, "c"}};
	struct meta_pool_info pi;

	cr_assert_eq(meta_adopt(fx.m, in, 3, NULL, NULL), -EINVAL);
	cr_assert_eq(meta_pool_get(fx.m, p, &pi), 0);
	cr_assert(pi.pages == 0 && pi.used_slots == 0, "nothing adopted, no slot kept");
	in[2].slot = 3;
	cr_assert_eq(meta_adopt(fx.m, in, 3, NULL, NULL), 0);
	fx_reopen();
	cr_assert_eq(lookup_ok(p, "c").slot, 3);
	cr_assert_eq(lookup_ok(p, "a").length, FX_SLOT_SIZE);
}

/* exists/get look keys up a group at a time (index_table_find_names): every
 * answer must still be the one of its own key, across chunk boundaries,
 * for invalid names and for the same name in another pool. */
Test(keys, batched_lookups_answer_each_key_of_a_long_batch)
{
	enum { N = 300 };
	uint32_t p = init_pool(0, "http", 512), q = init_pool(1, "http", 512);
	static char names[N][16];
	const char *keys[N];
	int64_t got[N];
	uint8_t exists[N];
	size_t ignored, n = 0;

	for (size_t i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), i % 7 == 3 ? "bad/%zu" : "k%zu", i);
		keys[i] = names[i];
	}
	/* every other valid key is stored in p; all of them in q */
	const char *stored[N];
	for (size_t i = 0; i < N; i += 2)
		if (i % 7 != 3)
			stored[n++] = keys[i];
	int64_t *ss = calloc(n, sizeof(*ss));
	uint8_t *ex = calloc(n, 1);
	cr_assert_eq(meta_keys_reserve(fx.m, p, stored, n, ex, ss), 0);
	cr_assert_eq(meta_keys_confirm(fx.m, p, stored, ss, n, NULL, 0, &ignored), 0);
	cr_assert_eq(meta_keys_exists(fx.m, q, keys, N, exists), 0);
	for (size_t i = 0; i < N; i++)
		cr_assert_eq(exists[i], 0, "nothing is stored in pool q yet: %s", keys[i]);
	cr_assert_eq(meta_keys_exists(fx.m, p, keys, N, exists), 0);
	cr_assert_eq(meta_keys_get(fx.m, p, keys, N, got), 0);
	for (size_t i = 0, j = 0; i < N; i++) {
		int want = i % 2 == 0 && i % 7 != 3;
		cr_assert_eq(exists[i], want, "exists %s", keys[i]);
		cr_assert_eq(got[i], want ? ss[j] : -1, "get %s: %lld", keys[i], (long long)got[i]);
		j += want;
	}
	free(ss);
	free(ex);
}

/* The lookup pipeline (table.c find_block) has stages LEAD keys apart:
 * batches shorter than a stage, of one stage, across stages and blocks,
 * each with hits, misses and invalid names at every position, answer
 * exactly what one lookup at a time answers. 2,000 keys in a pool also
 * make chains of several pages in the name table. */
Test(keys, lookups_of_every_batch_length_answer_as_one_at_a_time)
{
	enum { STORED = 2000, MAXN = 140 };
	uint32_t p = init_pool(0, "len", 4096);
	static char names[2 * STORED][16];
	static const char *stored[STORED], *keys[MAXN];
	int64_t *slots = calloc(STORED, sizeof(*slots)), got[MAXN], one;
	uint8_t *ex = calloc(STORED, 1), exists[MAXN], alone;
	size_t ignored;

	for (size_t i = 0; i < 2 * STORED; i++)
		snprintf(names[i], sizeof(names[i]), "n%zu", i);
	for (size_t i = 0; i < STORED; i++)
		stored[i] = names[2 * i]; /* even names stored, odd ones not */
	for (size_t i = 0; i < STORED; i += 128) {
		size_t n = STORED - i < 128 ? STORED - i : 128;
		cr_assert_eq(meta_keys_reserve(fx.m, p, stored + i, n, ex + i, slots + i), 0);
		cr_assert_eq(
			meta_keys_confirm(fx.m, p, stored + i, slots + i, n, NULL, 0, &ignored), 0);
	}
	for (size_t n = 1; n <= MAXN; n++) {
		for (size_t i = 0; i < n; i++)
			keys[i] = (i * 7 + n) % 11 == 0 ? "bad/name"
			                                : names[(i * 613 + n * 31) % (2 * STORED)];
		cr_assert_eq(meta_keys_exists(fx.m, p, keys, n, exists), 0);
		cr_assert_eq(meta_keys_get(fx.m, p, keys, n, got), 0);
		for (size_t i = 0; i < n; i++) {
			cr_assert_eq(meta_keys_exists(fx.m, p, &keys[i], 1, &alone), 0);
			cr_assert_eq(meta_keys_get(fx.m, p, &keys[i], 1, &one), 0);
			cr_assert_eq(exists[i], alone,
			             "batch of %zu, key %zu (%s): exists %d alone %d", n, i,
			             keys[i], exists[i], alone);
			cr_assert_eq(got[i], one, "batch of %zu, key %zu (%s): get %lld alone %lld",
			             n, i, keys[i], (long long)got[i], (long long)one);
			int want = keys[i][0] == 'n' && atoi(keys[i] + 1) % 2 == 0;
			cr_assert_eq(alone, want, "%s", keys[i]);
		}
	}
	free(slots);
	free(ex);
}

/* reserve and confirm look keys up a chunk at a time, by hashes computed
 * ahead (keys_ahead): across chunk boundaries each key keeps its own
 * slot, a second reserve finds every key where the first put it, and a
 * second confirm of the same slots changes nothing. */
Test(keys, a_long_batch_is_reserved_and_confirmed_key_by_key)
{
	enum { N = 300 };
	uint32_t p = init_pool(0, "long", 1024);
	static char names[N][16];
	const char *keys[N];
	int64_t slot[N], again[N], got[N];
	uint8_t existed[N];
	size_t ignored;

	for (size_t i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "r%zu", i);
		keys[i] = names[i];
	}
	cr_assert_eq(meta_keys_reserve(fx.m, p, keys, N, existed, slot), 0);
	for (size_t i = 0; i < N; i++) {
		cr_assert_eq(existed[i], 0, "%s existed", keys[i]);
		cr_assert_geq(slot[i], 0, "%s got no slot", keys[i]);
		for (size_t j = 0; j < i; j++)
			cr_assert_neq(slot[i], slot[j], "%s and %s share slot %lld", keys[i],
			              keys[j], (long long)slot[i]);
	}
	cr_assert_eq(meta_keys_confirm(fx.m, p, keys, slot, N, NULL, 0, &ignored), 0);
	cr_assert_eq(ignored, 0);
	cr_assert_eq(meta_keys_reserve(fx.m, p, keys, N, existed, again), 0);
	for (size_t i = 0; i < N; i++) {
		cr_assert_eq(existed[i], 1, "%s: not found by the second reserve", keys[i]);
		cr_assert_eq(again[i], slot[i], "%s: slot %lld, then %lld", keys[i],
		             (long long)slot[i], (long long)again[i]);
	}
	cr_assert_eq(meta_keys_confirm(fx.m, p, keys, slot, N, NULL, 0, &ignored), 0);
	cr_assert_eq(ignored, 0, "a confirm of the same slots again ignored %zu", ignored);
	cr_assert_eq(meta_keys_get(fx.m, p, keys, N, got), 0);
	for (size_t i = 0; i < N; i++)
		cr_assert_eq(got[i], slot[i], "get %s: %lld, want %lld", keys[i], (long long)got[i],
		             (long long)slot[i]);
	fx_reopen();
	cr_assert_eq(meta_keys_get(fx.m, p, keys, N, got), 0);
	for (size_t i = 0; i < N; i++)
		cr_assert_eq(got[i], slot[i], "after reopen, get %s: %lld, want %lld", keys[i],
		             (long long)got[i], (long long)slot[i]);
}

/* Three batches reserved and never confirmed expire in one evictor pass
 * (or two): a line of all 6 slots, not a line per batch. */
Test(keys, reservations_a_pass_expires_are_logged_as_one_line, .timeout = 30)
{
	char path[] = "/tmp/pagefs-test-keys-log.XXXXXX";
	int fd = mkstemp(path);
	uint32_t p = init_pool(0, "http", 8);
	const char *b1[] = {"a", "b"}, *b2[] = {"c", "d"}, *b3[] = {"e", "f"};
	int64_t s[2];
	struct meta_keys_tuning tune = {.reserve_timeout_ns = 200 * 1000 * 1000};

	cr_assert(fd >= 0);
	close(fd);
	cr_assert_eq(log_open_file(path), 0);
	meta_keys_tune(fx.m, &tune);
	reserve(p, b1, 2, s); /* three batches: three runs, never confirmed */
	reserve(p, b2, 2, s);
	reserve(p, b3, 2, s);
	usleep(1500 * 1000); /* past the deadline and an evictor pass */
	int lines = lines_with(path, "never confirmed");
	int all = lines_with(path, "6 reservations of slots 2..7 were never confirmed");
	cr_assert(lines >= 1 && lines <= 2, "%d lines for 3 runs expired within microseconds",
	          lines);
	cr_assert(lines == 2 || all == 1, "one pass, one line of all 6");
	if (lines == 2) /* (a pass between two batches) */
		cr_assert_eq(lines_with(path, "reservations of slots"), lines,
		             "the lines count runs");
	unlink(path);
}

/* Reservations go to the expiry queue as runs of neighbouring slots: the
 * evictor expires the unconfirmed slots of a run and leaves its confirmed
 * ones, and the expired ones come back after the quarantine (5 s at
 * least), each once. */
Test(keys, a_batch_partly_confirmed_expires_only_its_unconfirmed_slots, .timeout = 40)
{
	uint32_t p = init_pool(0, "http", 8);
	const char *keys[] = {"a", "b", "c", "d", "e", "f"};
	const char *done[] = {"a", "c", "e"}, *late[] = {"b"};
	const char *more[] = {"g", "h", "i", "j", "k", "l"};
	int64_t s[6], ok[3], t[6], got[6];
	size_t ignored;
	struct meta_keys_tuning tune = {.reserve_timeout_ns = 200 * 1000 * 1000};

	meta_keys_tune(fx.m, &tune);
	reserve(p, keys, 6, s); /* slots 7 .. 2: one run */
	ok[0] = s[0], ok[1] = s[2], ok[2] = s[4];
	cr_assert_eq(meta_keys_confirm(fx.m, p, done, ok, 3, NULL, 0, &ignored), 0);
	cr_assert_eq(ignored, 0);
	usleep(1500 * 1000); /* past the deadline and an evictor pass (1 s) */
	cr_assert_eq(meta_keys_confirm(fx.m, p, late, &s[1], 1, NULL, 0, &ignored), 0);
	cr_assert_eq(ignored, 1, "a confirm after the deadline is ignored");
	usleep(5200 * 1000); /* the quarantine */
	uint8_t existed[6];
	int64_t want[8] = {0}; /* by slot: the pool has 8 */
	cr_assert_eq(meta_keys_reserve(fx.m, p, more, 6, existed, t), 0);
	for (int i = 0; i < 6; i++) {
		cr_assert(t[i] != s[0] && t[i] != s[2] && t[i] != s[4],
		          "slot %lld of a confirmed page handed out again", (long long)t[i]);
		if (t[i] >= 0) {
			cr_assert_eq(want[t[i]], 0, "slot %lld handed out twice", (long long)t[i]);
			want[t[i]] = 1;
		}
	}
	/* 8 slots, 3 pages: 5 come back (the 3 expired and 2 never used) */
	cr_assert(t[0] >= 0 && t[1] >= 0 && t[2] >= 0 && t[3] >= 0 && t[4] >= 0 && t[5] == -1,
	          "got %lld %lld %lld %lld %lld %lld", (long long)t[0], (long long)t[1],
	          (long long)t[2], (long long)t[3], (long long)t[4], (long long)t[5]);
	cr_assert_eq(meta_keys_get(fx.m, p, done, 3, got), 0);
	cr_assert(got[0] == s[0] && got[1] == s[2] && got[2] == s[4], "the confirmed pages stay");
}

/* A cache fills its pool: initialize sizes the table by name for the
 * pool's slots at once, at twice the slots (a load factor of 1/2 once
 * the pool is full), so the first fill never rehashes it; the table by
 * id takes the new pages into its segments, and its buckets never grow. */
Test(keys, initialize_sizes_the_tables_for_the_pool)
{
	enum { KEYS = 4096 };
	uint64_t before = fx.m->by_name.n, id_buckets = fx.m->by_id.n;
	uint32_t p = init_pool(0, "http", 50000);
	cr_assert_geq(fx.m->by_name.n, 100000, "by name: %llu buckets (%llu before)",
	              (unsigned long long)fx.m->by_name.n, (unsigned long long)before);
	uint64_t name_buckets = fx.m->by_name.n;

	static char names[KEYS][16];
	const char *keys[64];
	int64_t slots[64];
	for (unsigned base = 0; base < KEYS; base += 64) {
		for (unsigned i = 0; i < 64; i++) {
			snprintf(names[base + i], sizeof(names[0]), "k%u", base + i);
			keys[i] = names[base + i];
		}
		reserve(p, keys, 64, slots);
		size_t ignored = 0;
		cr_assert_eq(meta_keys_confirm(fx.m, p, keys, slots, 64, NULL, 0, &ignored), 0);
		cr_assert_eq(ignored, 0);
	}
	cr_assert_eq(fx.m->by_name.n, name_buckets, "by name: no growth while filling");
	cr_assert_eq(fx.m->by_id.n, id_buckets, "by id: the buckets never grew");
	cr_assert_eq(index_idsegs_live(fx.m->by_id.segs), KEYS, "by id: in segments");
	for (unsigned i = 0; i < KEYS; i += 97) {
		const char *k = names[i];
		int64_t got;
		cr_assert_eq(meta_keys_get(fx.m, p, &k, 1, &got), 0);
		cr_assert_geq(got, 0, "%s", k);
	}
}

/* Sleeps to just past the start of the next second of the realtime
 * clock (the one recency is kept in); returns that second. */
static time_t next_second(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	usleep((useconds_t)((1000000000L - ts.tv_nsec) / 1000 + 20000));
	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec;
}

/* The first page of pool_id's LRU (the most recent) is the one named
 * key. */
static int lru_head_is(uint32_t pool_id, const char *key)
{
	char text[META_NAME_MAX + 1];

	index_lock(fx.m);
	struct page *head = index_pool_by_id(fx.m, pool_id)->lru_head;
	int is = head && strcmp(index_pname_text(head, text), key) == 0;
	index_unlock(fx.m);
	return is;
}

/* get_page_indices moves a page to the head of the LRU at its first use
 * in a second and leaves it where it is at later uses in that second: the
 * order within a second is the order of first uses, as a remount builds
 * it (DECISIONS.md, "An HTTP lookup moves a page once a second"). */
Test(keys, a_lookup_moves_a_page_at_its_first_use_in_a_second)
{
	uint32_t p = init_pool(0, "http", 8);
	const char *keys[] = {"a", "b"};
	int64_t s[2], got[1];
	size_t ignored;

	reserve(p, keys, 2, s);
	cr_assert_eq(meta_keys_confirm(fx.m, p, keys, s, 2, NULL, 0, &ignored), 0);
	cr_assert(lru_head_is(p, "b"), "the last confirmed is the most recent");
	int tries = 0;
	for (;; tries++) {
		cr_assert_lt(tries, 5, "no second held the three lookups");
		time_t second = next_second();
		cr_assert_eq(meta_keys_get(fx.m, p, &keys[0], 1, got), 0);
		cr_assert_eq(got[0], s[0]);
		int a_first = lru_head_is(p, "a");
		cr_assert_eq(meta_keys_get(fx.m, p, &keys[1], 1, got), 0);
		int b_next = lru_head_is(p, "b");
		cr_assert_eq(meta_keys_get(fx.m, p, &keys[0], 1, got), 0);
		int b_stays = lru_head_is(p, "b");
		if (time(NULL) != second)
			continue; /* the second turned between: not the case tested */
		cr_assert(a_first, "the first use in a new second moves the page");
		cr_assert(b_next, "so does another page's");
		cr_assert(b_stays, "a's second use in the second leaves the order");
		break;
	}
	next_second();
	cr_assert_eq(meta_keys_get(fx.m, p, &keys[0], 1, got), 0);
	cr_assert(lru_head_is(p, "a"), "in the next second a's use moves it again");
}

/* A page committed in this second has this second's atime from its
 * commit: every lookup in the second moves it, so a key looked up right
 * after it was written outlives the pages written after it. */
Test(keys, a_lookup_in_the_second_of_the_commit_moves_the_page)
{
	uint32_t p = init_pool(0, "http", 8);
	int64_t s[4], got[1];
	size_t ignored;

	for (int tries = 0;; tries++) {
		cr_assert_lt(tries, 5, "no second held the commits and the lookups");
		char a[16], b[16];
		snprintf(a, sizeof(a), "a%d", tries);
		snprintf(b, sizeof(b), "b%d", tries);
		const char *keys[] = {a, b};
		time_t second = next_second();
		reserve(p, keys, 2, s);
		cr_assert_eq(meta_keys_confirm(fx.m, p, keys, s, 2, NULL, 0, &ignored), 0);
		cr_assert_eq(meta_keys_get(fx.m, p, &keys[0], 1, got), 0);
		int a_first = lru_head_is(p, a);
		cr_assert_eq(meta_keys_get(fx.m, p, &keys[1], 1, got), 0);
		cr_assert_eq(meta_keys_get(fx.m, p, &keys[0], 1, got), 0);
		int a_again = lru_head_is(p, a);
		if (time(NULL) != second)
			continue;
		cr_assert(a_first, "a lookup moves a page committed in its second");
		cr_assert(a_again, "and so does the next one in that second");
		break;
	}
}
