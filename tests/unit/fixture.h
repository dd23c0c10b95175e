/*
 * fixture.h - a fresh index in a temporary directory for each unit test,
 * and assert_* helpers that say which call failed and why.
 *
 * Criterion forks a process per test, so the fixture is one static struct:
 * init makes /tmp/pagefs-unit.XXXXXX with backing/ and index.db in it,
 * fini closes the engine and removes the directory. Helpers are static
 * inline so each test binary takes only what it uses.
 */
#ifndef PAGEFS_TEST_FIXTURE_H
#define PAGEFS_TEST_FIXTURE_H

#include <criterion/criterion.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "meta/log.h"
#include "meta/meta.h"

#define FX_SLOT_SIZE 4096
#define FX_SLOTS 16
#define FX_MAX_PAGES 64

struct fixture {
	char dir[256];     /* temporary directory, removed in fini */
	char backing[512]; /* dir/backing */
	char index[512];   /* dir/index.db */
	char uri[520];     /* sqlite:dir/index.db */
	struct meta_config cfg;
	struct meta *m; /* open engine or NULL */
	uint32_t pool;  /* rank 0 "kv", created by fx_setup_pool */
};

static struct fixture fx __attribute__((unused));

static inline int fx_rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (type == FTW_DP)
		return rmdir(path);
	return unlink(path);
}

/* Makes the directories and a config with small pools; opens nothing. */
static inline void fx_init_dirs(void)
{
	memset(&fx, 0, sizeof(fx));
	log_set_level(LOG_WARN);
	snprintf(fx.dir, sizeof(fx.dir), "/tmp/pagefs-unit.XXXXXX");
	cr_assert_not_null(mkdtemp(fx.dir), "mkdtemp: %s", strerror(errno));
	snprintf(fx.backing, sizeof(fx.backing), "%s/backing", fx.dir);
	cr_assert_eq(mkdir(fx.backing, 0755), 0, "mkdir %s: %s", fx.backing, strerror(errno));
	snprintf(fx.index, sizeof(fx.index), "%s/index.db", fx.dir);
	snprintf(fx.uri, sizeof(fx.uri), "sqlite:%s", fx.index);
	fx.cfg.uri = fx.uri;
	fx.cfg.backing = fx.backing;
	fx.cfg.prefix = "hicache";
	fx.cfg.default_slot_size = FX_SLOT_SIZE;
	fx.cfg.default_capacity = FX_SLOTS * FX_SLOT_SIZE;
	fx.cfg.evict = META_EVICT_LRU;
	fx.cfg.verify = META_VERIFY_FIRST;
	fx.cfg.durability = META_DURABLE_PROCESS;
}

static inline void fx_open(void)
{
	char err[1024] = "";
	int ret = meta_open(&fx.cfg, &fx.m, err, sizeof(err));

	cr_assert_eq(ret, 0, "meta_open %s: %s: %s", fx.uri, strerror(-ret), err);
	cr_assert_not_null(fx.m, "meta_open returned 0 without a handle");
}

static inline void fx_close(void)
{
	meta_close(fx.m);
	fx.m = NULL;
}

static inline void fx_reopen(void)
{
	fx_close();
	fx_open();
}

/* Creates pool 0/kv with the defaults (FX_SLOTS slots of FX_SLOT_SIZE). */
static inline void fx_setup_pool(void)
{
	struct meta_pool_info pi;
	int ret = meta_pool_create(fx.m, 0, "kv", 0, 0, &pi);

	cr_assert_eq(ret, 0, "meta_pool_create 0/kv: %s", strerror(-ret));
	fx.pool = pi.id;
}

static inline void fx_setup(void)
{
	fx_init_dirs();
	fx_open();
	fx_setup_pool();
}

static inline void fx_setup_noevict(void)
{
	fx_init_dirs();
	fx.cfg.evict = META_EVICT_NONE;
	fx_open();
	fx_setup_pool();
}

static inline void fx_teardown(void)
{
	fx_close();
	if (fx.dir[0])
		nftw(fx.dir, fx_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- assertions with context ---- */

static inline struct meta_pool_info pool_info(uint32_t pool_id)
{
	struct meta_pool_info pi;
	int ret = meta_pool_get(fx.m, pool_id, &pi);

	cr_assert_eq(ret, 0, "meta_pool_get %u: %s", pool_id, strerror(-ret));
	return pi;
}

static inline struct meta_resv reserve_ok(uint32_t pool_id, const char *name, uint64_t replace_id)
{
	struct meta_resv r;
	int ret;

	memset(&r, 0, sizeof(r));
	ret = meta_page_reserve(fx.m, pool_id, name, replace_id, &r);
	cr_assert_eq(ret, 0, "reserve %s (replace %llu): %s", name, (unsigned long long)replace_id,
	             strerror(-ret));
	cr_assert_eq(r.pool_id, pool_id, "reserve %s: pool %u, want %u", name, r.pool_id, pool_id);
	return r;
}

static inline void assert_reserve_fails(uint32_t pool_id, const char *name, int want)
{
	struct meta_resv r;
	int ret = meta_page_reserve(fx.m, pool_id, name, 0, &r);

	cr_assert_eq(ret, want, "reserve %s: got %d (%s), want %d (%s)", name, ret,
	             ret ? strerror(-ret) : "ok, slot granted", want, strerror(-want));
}

/* Commits a reservation (which pins nothing: the page is evictable as
 * soon as it is committed). */
static inline void commit_ok(const struct meta_resv *r, const char *name, uint64_t length,
                             uint64_t checksum)
{
	int ret = meta_page_commit(fx.m, r, length, checksum);

	cr_assert_eq(ret, 0, "commit %s (slot %llu): %s", name, (unsigned long long)r->slot,
	             strerror(-ret));
}

static inline struct meta_page_info lookup_ok(uint32_t pool_id, const char *name)
{
	struct meta_page_info p;
	int pending = -1;
	int ret = meta_page_lookup(fx.m, pool_id, name, &p, &pending);

	cr_assert_eq(ret, 0, "lookup %s: %s", name, strerror(-ret));
	cr_assert_str_eq(p.name, name, "lookup %s found \"%s\"", name, p.name);
	cr_assert(p.committed, "lookup %s returned an uncommitted page", name);
	return p;
}

/* Asserts the name is not visible; returns the pending flag. */
static inline int lookup_missing(uint32_t pool_id, const char *name)
{
	struct meta_page_info p;
	int pending = -1;
	int ret = meta_page_lookup(fx.m, pool_id, name, &p, &pending);

	cr_assert_eq(ret, -ENOENT, "lookup %s: got %d (%s), want -ENOENT", name, ret,
	             ret ? strerror(-ret) : "found", -ENOENT);
	cr_assert(pending == 0 || pending == 1, "lookup %s: pending = %d", name, pending);
	return pending;
}

/* Reserves, commits and unpins one page; returns it as lookup sees it. */
static inline struct meta_page_info put_page(uint32_t pool_id, const char *name, uint64_t length,
                                             uint64_t checksum)
{
	struct meta_resv r = reserve_ok(pool_id, name, 0);

	commit_ok(&r, name, length, checksum);
	return lookup_ok(pool_id, name);
}

static inline void page_name(char *buf, size_t len, int i)
{
	snprintf(buf, len, "page-%02d", i);
}

/* Fills a pool with n pages page-00..; records them in out[0..n). */
static inline void put_pages(uint32_t pool_id, int n, struct meta_page_info *out)
{
	for (int i = 0; i < n; i++) {
		char name[32];

		page_name(name, sizeof(name), i);
		struct meta_page_info p =
			put_page(pool_id, name, 100 + (uint64_t)i, 0x1000 + (uint64_t)i);
		if (out)
			out[i] = p;
	}
}

static inline void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/* Pins page_id, asserting it is there and is that page; returns its info. */
static inline struct meta_page_info pin_ok(uint64_t page_id)
{
	struct meta_page_info p;
	int verify = -1;
	int ret = meta_page_pin(fx.m, page_id, &p, &verify);

	cr_assert_eq(ret, 0, "pin page %llu: %s", (unsigned long long)page_id, strerror(-ret));
	cr_assert_eq(p.id, page_id, "pin page %llu returned page %llu", (unsigned long long)page_id,
	             (unsigned long long)p.id);
	return p;
}

#endif
