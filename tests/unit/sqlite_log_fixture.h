/*
 * sqlite_log_fixture.h - what the page log's unit tests share
 * (test_sqlite_log.c, test_sqlite_log_faults.c): a store opened on the
 * fixture's index (fixture.h) with two pool rows, a model of the pages
 * it must hold (expect[], present[]), and the checks of that model
 * through store_load after a reopen and through store_iter_pages, plus
 * page_log read and changed with sqlite3 directly.
 *
 * Tables are read with sqlite3 directly only while the store is closed:
 * an open store holds the file in exclusive locking mode. Helpers are
 * static inline (the globals unused-tolerant), so each binary takes only
 * what it uses; each binary declares its own TestSuite with log_setup and
 * log_teardown.
 */
#ifndef PAGEFS_TEST_SQLITE_LOG_FIXTURE_H
#define PAGEFS_TEST_SQLITE_LOG_FIXTURE_H

#include "fixture.h"
#include "meta/store.h"

#include <sqlite3.h>
#include <stdlib.h>

#define MAX_ID 4096 /* page ids the tests use are below this */
#define RUN_MAX 64  /* pages a blob holds at most (store_sqlite_log.c) */
/* A bulk of two blobs: a full one and one of RUN_MAX / 2 + 8 pages. */
#define BULK_N (RUN_MAX + RUN_MAX / 2 + 8)
#define POOL 1
#define POOL2 2

static struct store *st __attribute__((unused));
/* each page as the index should hold it */
static struct bulk_row expect[MAX_ID] __attribute__((unused));
/* 1: the index should hold page id */
static int present[MAX_ID] __attribute__((unused));

/* ---- the model ---- */

/* Page id as a bulk would write it: every field varies with the id, so a
 * field read from another page or another offset shows. Names are the id
 * then a filler, 2 to META_NAME_MAX bytes (unique); every other page has a
 * checksum (some of them 0); atime is before, after or at mtime. */
static inline struct bulk_row page_row(uint64_t id, uint32_t pool)
{
	struct bulk_row p;
	size_t len = id % 97 == 0 ? META_NAME_MAX : 1 + (id * 37) % META_NAME_MAX;

	memset(&p, 0, sizeof(p));
	p.id = id;
	p.pool_id = pool;
	int n = snprintf(p.name, sizeof(p.name), "%llu", (unsigned long long)id);
	if (len < (size_t)n)
		len = (size_t)n;
	for (size_t i = (size_t)n; i < len; i++)
		p.name[i] = i == (size_t)n ? '.' : (char)('a' + (id + i) % 26);
	p.name[len] = '\0';
	p.name_len = (uint16_t)len;
	p.slot = (id * 7919) % 100000 + (id % 3 == 0 ? 1ULL << 40 : 0);
	p.length = id % 5 == 0 ? 0 : 4096 * (id % 17) + id;
	p.has_checksum = (int)(id % 2);
	p.checksum = p.has_checksum && id % 4 != 1 ? 0x9e3779b97f4a7c15ULL * id : 0;
	p.mtime_ns = 1700000000000000000LL + (int64_t)id * 1000003;
	p.atime_ns = id % 3 == 0   ? p.mtime_ns - (int64_t)id * 12345
	             : id % 3 == 1 ? p.mtime_ns + (int64_t)id * 999
	                           : p.mtime_ns;
	p.gen = gen_column(1 + (uint32_t)(id % 4), id % 7 == 0 ? 65535 : (uint16_t)(id % 3));
	return p;
}

static inline void fill(uint64_t first, size_t n, uint32_t pool)
{
	for (size_t i = 0; i < n; i++)
		expect[first + i] = page_row(first + i, pool);
}

static inline void set_present(uint64_t first, size_t n, int yes)
{
	for (size_t i = 0; i < n; i++)
		present[first + i] = yes;
}

/* ---- the store ---- */

static inline void open_store(void)
{
	char err[1024] = "";
	int ret = store_open(fx.uri, 0, 0, &st, err, sizeof(err));

	cr_assert_eq(ret, 0, "store_open %s: %s: %s", fx.uri, strerror(-ret), err);
	ret = store_lock(st, 1, err, sizeof(err));
	cr_assert_eq(ret, 0, "store_lock: %s: %s", strerror(-ret), err);
}

static inline void close_store(void)
{
	store_close(st);
	st = NULL;
}

static inline void tx_begin(void)
{
	int ret = store_begin(st);

	cr_assert_eq(ret, 0, "store_begin: %s", strerror(-ret));
}

static inline void tx_commit(void)
{
	int ret = store_commit(st);

	cr_assert_eq(ret, 0, "store_commit: %s", strerror(-ret));
}

static inline void tx_apply(struct rec *r, int want_rc, const char *what)
{
	int ret = store_apply(st, r);

	cr_assert_eq(ret, want_rc, "apply %s: got %d (%s), want %d (%s)", what, ret,
	             ret ? strerror(-ret) : "ok", want_rc, want_rc ? strerror(-want_rc) : "ok");
}

static inline struct rec page_rec(enum rec_type type, uint64_t id)
{
	struct rec r;

	memset(&r, 0, sizeof(r));
	r.type = type;
	r.page_id = id;
	r.pool_id = expect[id].pool_id;
	return r;
}

/* A bulk record over rows[0..n), as record_submit's would read them. */
struct test_bulk {
	struct bulk b; /* first: the store's row callback is given &b */
	const struct bulk_row *rows;
};

static inline void test_bulk_row(const struct bulk *b, size_t i, struct bulk_row *out)
{
	*out = ((const struct test_bulk *)b)->rows[i];
}

static inline struct rec bulk_rec(struct test_bulk *tb, const struct bulk_row *rows, size_t n)
{
	struct rec r;

	memset(tb, 0, sizeof(*tb));
	tb->b.row = test_bulk_row;
	tb->b.n = n;
	tb->rows = rows;
	memset(&r, 0, sizeof(r));
	r.type = REC_BULK;
	r.bulk = &tb->b;
	return r;
}

/* Commits pages first .. first + n - 1 of pool as one bulk record. */
static inline void put_bulk(uint64_t first, size_t n, uint32_t pool)
{
	struct test_bulk tb;

	fill(first, n, pool);
	struct rec r = bulk_rec(&tb, &expect[first], n);
	tx_begin();
	tx_apply(&r, 0, "bulk");
	tx_commit();
	set_present(first, n, 1);
}

static inline void put_pool_rows(void)
{
	tx_begin();
	for (uint32_t id = POOL; id <= POOL2; id++) {
		struct rec r;
		memset(&r, 0, sizeof(r));
		r.type = REC_POOL_PUT;
		r.pool_id = id;
		snprintf(r.ns, sizeof(r.ns), "ns%u", id);
		r.slot_size = 4096;
		r.capacity = 4096ULL << 20;
		tx_apply(&r, 0, "pool row");
	}
	tx_commit();
}

static inline void log_setup(void)
{
	fx_init_dirs();
	memset(expect, 0, sizeof(expect));
	memset(present, 0, sizeof(present));
	open_store();
	put_pool_rows();
}

static inline void log_teardown(void)
{
	close_store();
	fx_teardown();
}

/* ---- comparing pages ---- */

static inline struct bulk_row row_of_rec(const struct rec *r)
{
	struct bulk_row p;

	memset(&p, 0, sizeof(p));
	p.id = r->page_id;
	p.pool_id = r->pool_id;
	memcpy(p.name, r->name, sizeof(p.name));
	p.name_len = r->name_len;
	p.slot = r->slot;
	p.length = r->length;
	p.has_checksum = r->has_checksum;
	p.checksum = r->checksum;
	p.mtime_ns = r->mtime_ns;
	p.atime_ns = r->atime_ns;
	p.gen = gen_column(r->gen, r->version);
	return p;
}

static inline struct bulk_row row_of_info(const struct meta_page_info *i)
{
	struct bulk_row p;

	memset(&p, 0, sizeof(p));
	p.id = i->id;
	p.pool_id = i->pool_id;
	memcpy(p.name, i->name, sizeof(p.name));
	p.name_len = (uint16_t)strnlen(i->name, sizeof(i->name));
	p.slot = i->slot;
	p.length = i->length;
	p.has_checksum = i->has_checksum;
	p.checksum = i->checksum;
	p.mtime_ns = i->mtime_ns;
	p.atime_ns = i->atime_ns;
	p.gen = gen_column(i->gen, (uint16_t)i->version);
	return p;
}

/* Asserts got is expect[got->id], field by field; how: which read. */
static inline void assert_same_page(const char *how, const struct bulk_row *got)
{
	const struct bulk_row *w = &expect[got->id];
	unsigned long long id = (unsigned long long)got->id;

	cr_assert_eq(got->pool_id, w->pool_id, "%s: page %llu in pool %u, want %u", how, id,
	             got->pool_id, w->pool_id);
	cr_assert(got->name_len == w->name_len && memcmp(got->name, w->name, w->name_len) == 0 &&
	                  got->name[w->name_len] == '\0',
	          "%s: page %llu named \"%.*s\" (%u bytes), want \"%s\" (%u)", how, id,
	          (int)got->name_len, got->name, got->name_len, w->name, w->name_len);
	cr_assert_eq(got->slot, w->slot, "%s: page %llu slot %llu, want %llu", how, id,
	             (unsigned long long)got->slot, (unsigned long long)w->slot);
	cr_assert_eq(got->length, w->length, "%s: page %llu length %llu, want %llu", how, id,
	             (unsigned long long)got->length, (unsigned long long)w->length);
	cr_assert_eq(!!got->has_checksum, !!w->has_checksum, "%s: page %llu has_checksum %d", how,
	             id, got->has_checksum);
	cr_assert(!w->has_checksum || got->checksum == w->checksum,
	          "%s: page %llu checksum %#llx, want %#llx", how, id,
	          (unsigned long long)got->checksum, (unsigned long long)w->checksum);
	cr_assert_eq(got->mtime_ns, w->mtime_ns, "%s: page %llu mtime %lld, want %lld", how, id,
	             (long long)got->mtime_ns, (long long)w->mtime_ns);
	cr_assert_eq(got->atime_ns, w->atime_ns, "%s: page %llu atime %lld, want %lld", how, id,
	             (long long)got->atime_ns, (long long)w->atime_ns);
	cr_assert_eq(got->gen, w->gen, "%s: page %llu gen column %#llx, want %#llx", how, id,
	             (unsigned long long)got->gen, (unsigned long long)w->gen);
}

/* ---- store_load ---- */

struct loaded {
	struct rec rows[MAX_ID]; /* by page id */
	unsigned count[MAX_ID];  /* times each id was delivered */
	size_t out_of_range;     /* pages with an id >= MAX_ID */
	int64_t damaged[8];      /* seqs given to log_damaged */
	char why[8][128];
	int ndamaged;
};

static struct loaded got __attribute__((unused)); /* what the last load() gave */

static inline int on_rank(void *arg, int rank)
{
	(void)arg;
	(void)rank;
	return 0;
}

static inline int on_pool(void *arg, const struct store_pool_row *row)
{
	(void)arg;
	(void)row;
	return 0;
}

/* (No assertion here: the store is in the middle of a statement.) */
static inline int on_page(void *arg, const struct rec *row)
{
	struct loaded *l = arg;

	if (row->page_id >= MAX_ID) {
		l->out_of_range++;
		return 0;
	}
	l->rows[row->page_id] = *row;
	l->count[row->page_id]++;
	return 0;
}

static inline int on_damaged(void *arg, int64_t seq, const char *why)
{
	struct loaded *l = arg;

	if (l->ndamaged < 8) {
		l->damaged[l->ndamaged] = seq;
		snprintf(l->why[l->ndamaged], sizeof(l->why[0]), "%s", why);
	}
	l->ndamaged++;
	return 0;
}

/* store_load into got; with_damaged: a log_damaged callback (fsck's). */
static inline int load(int with_damaged, char *err, size_t errlen)
{
	struct store_load_cb cb = {&got, on_rank, on_pool, on_page,
	                           with_damaged ? on_damaged : NULL};

	memset(&got, 0, sizeof(got));
	err[0] = '\0';
	return store_load(st, &cb, err, errlen);
}

/* Asserts that the last load gave every present page once, as expected,
 * and no other. */
static inline void assert_loaded(void)
{
	cr_assert_eq(got.out_of_range, 0, "load gave %zu pages of unknown ids", got.out_of_range);
	for (uint64_t id = 1; id < MAX_ID; id++) {
		cr_assert_eq(got.count[id], (unsigned)present[id],
		             "load gave page %llu %u times, want %d", (unsigned long long)id,
		             got.count[id], present[id]);
		if (present[id]) {
			struct bulk_row p = row_of_rec(&got.rows[id]);
			assert_same_page("load", &p);
		}
	}
}

/* Closes and reopens the store, loads it and checks the model. */
static inline void assert_reloaded(void)
{
	char err[1024];
	int ret;

	close_store();
	open_store();
	ret = load(0, err, sizeof(err));
	cr_assert_eq(ret, 0, "store_load: %s: %s", strerror(-ret), err);
	assert_loaded();
}

/* ---- store_iter_pages ---- */

struct listing {
	struct bulk_row pages[MAX_ID]; /* in the order given */
	size_t n;
	size_t chunk, in_call; /* chunk: stop a call after that many (0: never) */
};

static inline int on_listed(void *arg, const struct meta_page_info *p)
{
	struct listing *l = arg;

	if (l->n < MAX_ID)
		l->pages[l->n] = row_of_info(p);
	l->n++;
	return l->chunk && ++l->in_call == l->chunk ? 1 : 0;
}

/* Lists pool from after, chunk pages a call, each call resuming after
 * the last id given (as readdir does), and asserts it gives the present
 * pages of pool past `after`, once each, in id order, as expected. */
static inline void assert_listing(uint32_t pool, uint64_t after, size_t chunk)
{
	static struct listing l;
	uint64_t from = after;
	int ret;

	memset(&l, 0, sizeof(l));
	l.chunk = chunk;
	for (int calls = 0;; calls++) {
		cr_assert_lt(calls, MAX_ID, "listing pool %u does not end", pool);
		l.in_call = 0;
		ret = store_iter_pages(st, pool, from, on_listed, &l);
		cr_assert(ret == 0 || (ret == 1 && chunk),
		          "store_iter_pages pool %u after %llu: %d", pool, (unsigned long long)from,
		          ret);
		if (ret == 0)
			break;
		cr_assert(l.n > 0 && l.n <= MAX_ID, "listing pool %u: %zu pages", pool, l.n);
		from = l.pages[l.n - 1].id;
	}
	size_t at = 0;
	for (uint64_t id = after + 1; id < MAX_ID; id++) {
		if (!present[id] || expect[id].pool_id != pool)
			continue;
		cr_assert_lt(at, l.n,
		             "listing pool %u after %llu (chunks of %zu) ends before page %llu",
		             pool, (unsigned long long)after, chunk, (unsigned long long)id);
		cr_assert_eq(l.pages[at].id, id,
		             "listing pool %u after %llu (chunks of %zu): entry %zu is page %llu, "
		             "want %llu",
		             pool, (unsigned long long)after, chunk, at,
		             (unsigned long long)l.pages[at].id, (unsigned long long)id);
		assert_same_page("listing", &l.pages[at]);
		at++;
	}
	cr_assert_eq(at, l.n, "listing pool %u after %llu gave %zu pages, want %zu", pool,
	             (unsigned long long)after, l.n, at);
}

/* ---- the tables, read directly (store closed) ---- */

static inline sqlite3 *raw_open(void)
{
	sqlite3 *db = NULL;
	int rc;

	cr_assert_null(st, "the store holds the index: close it first");
	rc = sqlite3_open(fx.index, &db);
	cr_assert_eq(rc, SQLITE_OK, "sqlite3_open %s: %s", fx.index, sqlite3_errstr(rc));
	return db;
}

static inline void raw_exec(const char *sql)
{
	sqlite3 *db = raw_open();
	char *msg = NULL;
	int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);

	cr_assert_eq(rc, SQLITE_OK, "%s: %s", sql, msg ? msg : sqlite3_errstr(rc));
	cr_assert_gt(sqlite3_changes(db), 0, "%s changed nothing", sql);
	sqlite3_close(db);
}

struct blob {
	int64_t seq, pool, lo, span, n;
};

/* The rows of page_log in seq order; how many (at most max). */
static inline size_t raw_blobs(struct blob *out, size_t max)
{
	sqlite3 *db = raw_open();
	sqlite3_stmt *q = NULL;
	size_t n = 0;
	int rc;

	cr_assert_eq(sqlite3_prepare_v2(db, "SELECT seq,pool,lo,span,n FROM page_log ORDER BY seq",
	                                -1, &q, NULL),
	             SQLITE_OK, "page_log: %s", sqlite3_errmsg(db));
	while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
		cr_assert_lt(n, max, "page_log has more than %zu rows", max);
		out[n++] = (struct blob){sqlite3_column_int64(q, 0), sqlite3_column_int64(q, 1),
		                         sqlite3_column_int64(q, 2), sqlite3_column_int64(q, 3),
		                         sqlite3_column_int64(q, 4)};
	}
	cr_assert_eq(rc, SQLITE_DONE, "page_log: %s", sqlite3_errmsg(db));
	sqlite3_finalize(q);
	sqlite3_close(db);
	return n;
}

static inline void assert_blob(const struct blob *b, int64_t pool, int64_t lo, int64_t span,
                               int64_t n)
{
	cr_assert(b->pool == pool && b->lo == lo && b->span == span && b->n == n,
	          "page_log seq %lld: pool %lld ids %lld+%lld with %lld pages, want pool %lld "
	          "ids %lld+%lld with %lld",
	          (long long)b->seq, (long long)b->pool, (long long)b->lo, (long long)b->span,
	          (long long)b->n, (long long)pool, (long long)lo, (long long)span, (long long)n);
}

/* ---- damaged records ---- */

/* A bulk of two blobs (pages 1..BULK_N), the store closed after; returns
 * the seq of the second. */
static inline int64_t two_blobs(void)
{
	struct blob b[2];

	put_bulk(1, BULK_N, POOL);
	close_store();
	cr_assert_eq(raw_blobs(b, 2), 2);
	return b[1].seq;
}

/* Asserts a load without log_damaged fails with -EUCLEAN and a message
 * naming record seq and the fix. */
static inline void assert_load_refused(int64_t seq)
{
	char err[1024], want[64];
	int ret = load(0, err, sizeof(err));

	cr_assert_eq(ret, -EUCLEAN, "load of a damaged log: %d (%s), want -EUCLEAN", ret,
	             strerror(-ret));
	cr_assert_not_null(strstr(err, "pagefs fsck --repair"), "message names no fix: %s", err);
	snprintf(want, sizeof(want), "record %lld", (long long)seq);
	cr_assert_not_null(strstr(err, want), "message does not name %s: %s", want, err);
}

/* Loads with fsck's callback and asserts records seqs[0..n) (at most 8)
 * alone were reported, in that order, each with why, and that the load
 * and the listings of both pools give the model: mark the reported
 * records' pages absent first. */
static inline void assert_load_reports_each(const int64_t *seqs, int n, const char *why)
{
	char err[1024];
	int ret;

	cr_assert_leq(n, 8, "got keeps 8 reports");
	ret = load(1, err, sizeof(err));
	cr_assert_eq(ret, 0, "load with log_damaged: %s: %s", strerror(-ret), err);
	cr_assert_eq(got.ndamaged, n, "%d records reported damaged, want %d", got.ndamaged, n);
	for (int i = 0; i < n; i++) {
		cr_assert_eq(got.damaged[i], seqs[i], "report %d: record %lld, want %lld", i,
		             (long long)got.damaged[i], (long long)seqs[i]);
		cr_assert_str_eq(got.why[i], why, "record %lld: reported as \"%s\", want \"%s\"",
		                 (long long)seqs[i], got.why[i], why);
	}
	assert_loaded();
	assert_listing(POOL, 0, 0);
	assert_listing(POOL2, 0, 0);
}

static inline void assert_load_reports(int64_t seq, const char *why)
{
	assert_load_reports_each(&seq, 1, why);
}

#endif
