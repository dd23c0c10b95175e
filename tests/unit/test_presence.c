/*
 * test_presence.c - a pool's presence table (meta/index/presence.c) as a
 * client sees it through its own mapping of the file: fingerprints are
 * XXH64 of the name with 0 and 1 remapped, entries come and go through
 * tombstones that empty again when nothing probes past them, a table
 * rebuilds into a new generation as it fills (the old file retired and
 * gone), and a reader probing while the writer churns never sees an
 * entry that was not written whole.
 */
#include "meta/index.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define HDR 128u
#define LIVE_WORD 2
#define GEN_WORD 3
#define MASK_WORD 6

static char dir[] = "/tmp/pagefs-presence-XXXXXX";

static void setup(void)
{
	cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
	cr_assert_eq(rmdir(dir), 0, "a table file was left in %s", dir);
}

TestSuite(presence, .init = setup, .fini = teardown);

/* A client's view: the file mapped read only. */
struct view {
	void *map;
	const volatile uint64_t *w;
	size_t bytes;
	uint64_t gen, mask;
};

static int view_open(const char *path, struct view *v)
{
	struct stat st;
	int fd = open(path, O_RDONLY);

	if (fd < 0)
		return -1;
	fstat(fd, &st);
	void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (map == MAP_FAILED)
		return -1;
	v->map = map;
	v->w = map;
	v->bytes = (size_t)st.st_size;
	v->gen = v->w[GEN_WORD];
	v->mask = v->w[MASK_WORD];
	return 0;
}

static void view_close(struct view *v)
{
	munmap(v->map, v->bytes);
}

/* What python/pagefs/_presence.py's probe does. */
static int view_has(const struct view *v, uint64_t fp)
{
	for (uint64_t i = fp & v->mask;; i = (i + 1) & v->mask) {
		uint64_t e = __atomic_load_n(&v->w[HDR / 8 + i], __ATOMIC_ACQUIRE);
		if (e == fp)
			return 1;
		if (e == 0)
			return 0;
	}
}

static int exists(const char *path)
{
	return access(path, F_OK) == 0;
}

Test(presence, fingerprints_are_xxh64_of_the_name_with_0_and_1_remapped)
{
	const char *name = "0123456789abcdef_Qwen-Qwen3-32B_0_2";

	cr_assert_eq(index_presence_fp(name, strlen(name)), XXH64(name, strlen(name), 0));
	cr_assert_eq(index_presence_remap(0), 2);
	cr_assert_eq(index_presence_remap(1), 3);
	cr_assert_eq(index_presence_remap(2), 2);
	cr_assert_eq(index_presence_remap(UINT64_MAX), UINT64_MAX);
}

Test(presence, the_file_header_names_the_daemon_and_its_live_generation)
{
	struct presence *t;
	struct view v;

	cr_assert_eq(index_presence_new(dir, 0600, 7, 0, &t), 0);
	char path[400];
	snprintf(path, sizeof(path), "%s", index_presence_path(t));
	cr_assert_eq(view_open(path, &v), 0);
	cr_assert_eq(v.w[0], 0x5345525053464750ULL);
	cr_assert_eq(v.w[1], 1u | (uint64_t)HDR << 32);
	cr_assert_eq(v.w[LIVE_WORD], v.gen);
	cr_assert_eq(v.w[4], (uint64_t)getpid());
	cr_assert_eq(v.w[5], 7);
	cr_assert_eq(v.mask, 1023);
	struct stat st;
	cr_assert_eq(stat(path, &st), 0);
	cr_assert_eq(st.st_mode & 0777, 0600);
	index_presence_free(t);
	cr_assert_eq(v.w[LIVE_WORD], 0, "a retired table tells its readers");
	cr_assert(!exists(path));
	view_close(&v);
}

Test(presence, entries_come_and_go_through_tombstones)
{
	struct presence *t;
	struct presence_stats s;
	struct view v;

	cr_assert_eq(index_presence_new(dir, 0600, 1, 0, &t), 0);
	cr_assert_eq(view_open(index_presence_path(t), &v), 0);
	/* Four fingerprints of one home bucket (5): a run of four. */
	uint64_t fp[4] = {5, 1024 + 5, 2048 + 5, 4096 + 5};
	for (int i = 0; i < 4; i++)
		cr_assert_eq(index_presence_add(t, fp[i]), 0);
	for (int i = 0; i < 4; i++)
		cr_assert(view_has(&v, fp[i]) && index_presence_has(t, fp[i]));
	cr_assert(!view_has(&v, 8192 + 5));
	index_presence_del(t, fp[1]); /* middle: a tombstone */
	cr_assert_eq(v.w[HDR / 8 + 6], 1);
	cr_assert(!view_has(&v, fp[1]) && view_has(&v, fp[2]) && view_has(&v, fp[3]));
	index_presence_stats(t, &s);
	cr_assert_eq(s.count, 3);
	cr_assert_eq(s.used, 4);
	index_presence_del(t, fp[3]); /* last of the run: empty at once */
	index_presence_stats(t, &s);
	cr_assert_eq(s.used, 3);
	index_presence_del(t, fp[2]); /* empties itself and the tombstone before it */
	index_presence_stats(t, &s);
	cr_assert_eq(s.used, 1);
	cr_assert_eq(s.count, 1);
	cr_assert(view_has(&v, fp[0]) && !view_has(&v, fp[2]));
	/* A name twice (two names of one fingerprint): one goes, one stays. */
	cr_assert_eq(index_presence_add(t, 77), 0);
	cr_assert_eq(index_presence_add(t, 77), 0);
	index_presence_del(t, 77);
	cr_assert(view_has(&v, 77));
	index_presence_del(t, 77);
	cr_assert(!view_has(&v, 77));
	index_presence_del(t, 12345); /* not there: nothing */
	index_presence_stats(t, &s);
	cr_assert_eq(s.count, 1);
	/* The remapped values of 0 and 1 are plain entries. */
	cr_assert_eq(index_presence_add(t, index_presence_remap(0)), 0);
	cr_assert_eq(index_presence_add(t, index_presence_remap(1)), 0);
	cr_assert(view_has(&v, 2) && view_has(&v, 3));
	view_close(&v);
	index_presence_free(t);
}

Test(presence, a_filling_table_rebuilds_into_a_new_generation)
{
	struct presence *t;
	struct presence_stats s;
	struct view v;
	char first[400];

	cr_assert_eq(index_presence_new(dir, 0644, 2, 0, &t), 0);
	snprintf(first, sizeof(first), "%s", index_presence_path(t));
	cr_assert_eq(view_open(first, &v), 0);
	for (uint64_t i = 0; i < 3000; i++)
		cr_assert_eq(index_presence_add(t, index_presence_remap(XXH64(&i, sizeof(i), 0))),
		             0);
	index_presence_stats(t, &s);
	cr_assert_gt(s.rebuilds, 0);
	cr_assert_eq(s.count, 3000);
	cr_assert_leq(s.used * 2, s.size);
	cr_assert_eq(v.w[LIVE_WORD], 0, "the first generation was retired");
	cr_assert(!exists(first));
	view_close(&v);
	cr_assert_eq(view_open(index_presence_path(t), &v), 0);
	cr_assert_eq(v.w[LIVE_WORD], s.generation);
	for (uint64_t i = 0; i < 3000; i++)
		cr_assert(view_has(&v, index_presence_remap(XXH64(&i, sizeof(i), 0))));
	view_close(&v);
	/* Churn: tombstones make it rebuild too, and it stays sized to what
	 * it holds. */
	for (uint64_t i = 0; i < 3000; i++)
		index_presence_del(t, index_presence_remap(XXH64(&i, sizeof(i), 0)));
	for (uint64_t i = 10000; i < 60000; i++) {
		uint64_t fp = index_presence_remap(XXH64(&i, sizeof(i), 0));
		cr_assert_eq(index_presence_add(t, fp), 0);
		if (i % 10)
			index_presence_del(t, fp);
	}
	index_presence_stats(t, &s);
	cr_assert_eq(s.count, 5000);
	cr_assert_leq(s.size, 32768);
	cr_assert_leq(s.used * 2, s.size);
	for (uint64_t i = 10000; i < 60000; i++)
		cr_assert_eq(index_presence_has(t, index_presence_remap(XXH64(&i, sizeof(i), 0))),
		             i % 10 == 0);
	index_presence_free(t);
}

/* The concurrent reader: maps the current generation (the path read
 * under the writer's mutex), probes the names that never leave, and
 * checks every entry it reads is one the writer wrote whole. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct presence *shared;
static volatile int stop;
#define STAY 200u
#define CHURN_BASE 0x5a5a000000000000ULL

static uint64_t stay_fp(uint64_t i)
{
	return index_presence_remap(XXH64(&i, sizeof(i), 1));
}

static int known(uint64_t e)
{
	if (e <= 1 || (e & 0xffff000000000000ULL) == CHURN_BASE)
		return 1;
	for (uint64_t i = 0; i < STAY; i++)
		if (e == stay_fp(i))
			return 1;
	return 0;
}

static void *reader(void *arg)
{
	long *probes = arg;

	while (!stop) {
		char path[400];
		struct view v;
		pthread_mutex_lock(&mu);
		snprintf(path, sizeof(path), "%s", index_presence_path(shared));
		pthread_mutex_unlock(&mu);
		if (view_open(path, &v) < 0)
			continue; /* retired between: the next one */
		for (int round = 0; round < 50 && v.w[LIVE_WORD] == v.gen; round++) {
			int all = 1;
			for (uint64_t i = 0; i < STAY; i++)
				all &= view_has(&v, stay_fp(i));
			for (uint64_t i = 0; i <= v.mask; i++)
				if (!known(v.w[HDR / 8 + i]))
					all = -1;
			/* Only a table still live at the end must have them all. */
			if (v.w[LIVE_WORD] == v.gen && all != 1) {
				*probes = -1;
				view_close(&v);
				return NULL;
			}
			(*probes)++;
		}
		view_close(&v);
	}
	return NULL;
}

Test(presence, a_reader_probing_while_the_writer_churns_sees_no_torn_state, .timeout = 60)
{
	pthread_t th;
	long probes = 0;

	cr_assert_eq(index_presence_new(dir, 0600, 3, 0, &shared), 0);
	for (uint64_t i = 0; i < STAY; i++)
		cr_assert_eq(index_presence_add(shared, stay_fp(i)), 0);
	pthread_create(&th, NULL, reader, &probes);
	for (uint64_t i = 0; i < 400000; i++) {
		uint64_t fp = CHURN_BASE | (i * 2654435761u & 0xffffffffffffULL);
		pthread_mutex_lock(&mu);
		cr_assert_eq(index_presence_add(shared, fp), 0);
		if (i >= 300)
			index_presence_del(
				shared, CHURN_BASE | ((i - 300) * 2654435761u & 0xffffffffffffULL));
		pthread_mutex_unlock(&mu);
	}
	stop = 1;
	pthread_join(th, NULL);
	struct presence_stats s;
	index_presence_stats(shared, &s);
	cr_assert_gt(s.rebuilds, 0);
	cr_assert_gt(probes, 0, "the reader probed a live table");
	index_presence_free(shared);
}
