/*
 * test_store_pg.c - the PostgreSQL store against a real server.
 *
 * Needs PAGEFS_TEST_PG_URI (scripts/test.sh starts a private server and
 * sets it); without it every test is skipped with a message. Each test
 * gets its own schema (CREATE SCHEMA, then ?options=-csearch_path=...),
 * dropped at the end. Lost connections are real: an admin connection
 * ends the store's backend with pg_terminate_backend().
 */
#include "fixture_pg.h"
#include "meta/record.h"
#include "meta/store.h"
#include "meta/store_pg.h"

#include <fcntl.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdlib.h>

TestSuite(store_pg, .timeout = 60);

/* Ends every backend this process opened; returns how many. */
static int terminate_my_backends(void)
{
	char sql[256];
	PGconn *c = admin();

	snprintf(sql, sizeof(sql),
	         "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
	         " WHERE application_name LIKE 'pagefs pid %d %%'",
	         (int)getpid());
	PGresult *res = PQexec(c, sql);
	cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s: %s", sql,
	             PQresultErrorMessage(res));
	int n = PQntuples(res);
	PQclear(res);
	PQfinish(c);
	return n;
}

static int count_rows(void)
{
	char sql[256];
	PGconn *c = admin();

	snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s.pagefs_pages", pg_schema);
	PGresult *res = PQexec(c, sql);
	cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(res));
	int n = atoi(PQgetvalue(res, 0, 0));
	PQclear(res);
	PQfinish(c);
	return n;
}

static int open_fails(char *err, size_t len)
{
	struct meta *m = NULL;
	int ret = meta_open(&fx.cfg, &m, err, len);

	if (ret == 0)
		meta_close(m);
	cr_assert_lt(ret, 0, "meta_open of %s succeeded, want a refusal", fx.cfg.uri);
	cr_assert_neq(err[0], '\0', "refusal (%s) without a message", strerror(-ret));
	return ret;
}

static void assert_mentions(const char *err, const char *what)
{
	cr_assert_not_null(strstr(err, what), "message does not mention \"%s\": %s", what, err);
}

/* A store-level page record. */
static struct rec *page_rec(uint64_t id, const char *name, uint64_t slot)
{
	struct rec *r = record_new(REC_COMMIT);

	cr_assert_not_null(r);
	r->pool_id = 1;
	r->page_id = id;
	r->slot = slot;
	r->length = 10;
	r->mtime_ns = r->atime_ns = (int64_t)id;
	r->name_len = (uint16_t)snprintf(r->name, sizeof(r->name), "%s", name);
	return r;
}

struct seen {
	int n;
	uint64_t ids[1200];
	uint64_t slots[1200];
	int stop_at;
};

static int count_page(void *arg, const struct rec *row)
{
	struct seen *s = arg;

	s->ids[s->n] = row->page_id;
	s->slots[s->n++] = row->slot;
	return 0;
}

static int ignore_rank(void *arg, int rank)
{
	(void)arg;
	(void)rank;
	return 0;
}

static int ignore_pool(void *arg, const struct store_pool_row *row)
{
	(void)arg;
	(void)row;
	return 0;
}

static struct seen load_pages(struct store *s)
{
	static struct seen seen;
	char err[512];
	struct store_load_cb cb = {&seen, ignore_rank, ignore_pool, count_page, NULL};

	memset(&seen, 0, sizeof(seen));
	int ret = store_load(s, &cb, err, sizeof(err));
	cr_assert_eq(ret, 0, "store_load: %s: %s", strerror(-ret), err);
	return seen;
}

static struct store *store_ok(void)
{
	struct store *s = NULL;
	char err[1024] = "";
	int ret = store_open(pg_uri, 0, 0, &s, err, sizeof(err));

	cr_assert_eq(ret, 0, "store_open: %s: %s", strerror(-ret), err);
	ret = store_lock(s, 0, err, sizeof(err));
	cr_assert_eq(ret, 0, "store_lock: %s: %s", strerror(-ret), err);
	return s;
}

static int batch(struct store *s, struct rec **recs, int n, int *errs);

/* A store-level pool record (page records need their pool's row). */
static struct rec *pool_rec(enum rec_type type, uint32_t id, int rank)
{
	struct rec *r = record_new(type);

	cr_assert_not_null(r);
	r->pool_id = id;
	r->rank = (uint16_t)rank;
	snprintf(r->ns, sizeof(r->ns), "ns%u", id);
	r->slot_size = 4096;
	r->capacity = 4096;
	return r;
}

/* Runs one record in a batch of its own; returns its result. */
static int apply_one(struct store *s, struct rec *r)
{
	struct rec *recs[] = {r};
	int err = 0, ret = batch(s, recs, 1, &err);

	cr_assert_eq(ret, 0, "commit: %s", strerror(-ret));
	free(r);
	return err;
}

/* store_ok, with the row of pool 1, which page_rec's pages are in. */
static struct store *store_with_pool(void)
{
	struct store *s = store_ok();

	cr_assert_eq(apply_one(s, pool_rec(REC_POOL_PUT, 1, 0)), 0);
	return s;
}

/* Begins, applies, commits; returns the commit's result, records' in errs. */
static int batch(struct store *s, struct rec **recs, int n, int *errs)
{
	int ret = store_begin(s);

	for (int i = 0; i < n; i++)
		errs[i] = ret < 0 ? ret : store_apply(s, recs[i]);
	if (ret == 0)
		ret = store_commit(s);
	if (ret < 0)
		store_rollback(s);
	return ret;
}

/* ---- through the engine (meta.h) ---- */

Test(store_pg, pages_pools_and_settings_survive_a_reopen, .init = pg_setup, .fini = pg_teardown)
{
	struct meta_page_info before[6];

	fx_open();
	fx_setup_pool();
	put_pages(fx.pool, 6, before);
	cr_assert_eq(meta_page_unlink(fx.m, fx.pool, "page-02"), 0);
	cr_assert_eq(meta_page_rename(fx.m, fx.pool, "page-03", "renamed", 0), 0);
	fx_reopen();

	struct meta_pool_info pi = pool_info(fx.pool);
	cr_assert_eq(pi.pages, 5, "pages after reopen: %llu, want 5", (unsigned long long)pi.pages);
	lookup_missing(fx.pool, "page-02");
	lookup_missing(fx.pool, "page-03");
	struct meta_page_info r = lookup_ok(fx.pool, "renamed");
	cr_assert_eq(r.id, before[3].id, "rename kept id %llu, now %llu",
	             (unsigned long long)before[3].id, (unsigned long long)r.id);
	for (int i = 0; i < 6; i++) {
		char name[32];
		if (i == 2 || i == 3)
			continue;
		page_name(name, sizeof(name), i);
		struct meta_page_info p = lookup_ok(fx.pool, name);
		cr_assert(p.id == before[i].id && p.slot == before[i].slot &&
		                  p.length == before[i].length &&
		                  p.checksum == before[i].checksum && p.has_checksum,
		          "%s changed across the reopen", name);
	}
}

/* fsck's exclusive lock on the index: refused while a node holds it. */
static void assert_exclusive_refused(void)
{
	struct store *s = NULL;
	char err[1024] = "", pid[32];
	int ret = store_open(pg_uri, 0, 1, &s, err, sizeof(err));

	cr_assert_eq(ret, 0, "store_open: %s", err);
	ret = store_lock(s, 1, err, sizeof(err));
	store_close(s);
	cr_assert_eq(ret, -EBUSY, "exclusive lock while a node runs: %d (%s)", ret, err);
	snprintf(pid, sizeof(pid), "pid %d", (int)getpid());
	assert_mentions(err, pid);
	assert_mentions(err, "in use by pagefs daemons");
}

static struct meta *open_node(void)
{
	struct meta *m = NULL;
	char err[1024] = "";
	int ret = meta_open(&fx.cfg, &m, err, sizeof(err));

	cr_assert_eq(ret, 0, "meta_open: %s: %s", strerror(-ret), err);
	return m;
}

/* Polls until lookup of name on m gives want (0 or -ENOENT); returns ms. */
static long wait_lookup(struct meta *m, uint32_t pool, const char *name, int want,
                        struct meta_page_info *out)
{
	for (long ms = 0; ms < 3000; ms += 10) {
		int pending;
		if (meta_page_lookup(m, pool, name, out, &pending) == want)
			return ms;
		sleep_ms(10);
	}
	cr_assert_fail("%s did not become %s on the other node within 3 s", name,
	               want ? "absent" : "visible");
	return -1;
}

Test(store_pg, two_nodes_share_one_index_and_see_each_others_pages, .init = pg_setup,
     .fini = pg_teardown)
{
	struct meta_page_info a, b, seen;

	fx_open();
	fx_setup_pool();
	struct meta *other = open_node();
	assert_exclusive_refused();

	a = put_page(fx.pool, "from-first", 10, 0xa);
	long ms = wait_lookup(other, fx.pool, "from-first", 0, &seen);
	cr_assert(seen.id == a.id && seen.slot == a.slot && seen.length == 10 &&
	                  seen.checksum == 0xa,
	          "the other node sees a different page");
	/* The other node writes into its own chunk: never the same slot. */
	struct meta_resv r;
	cr_assert_eq(meta_page_reserve(other, fx.pool, "from-second", 0, &r), 0);
	cr_assert_neq(r.slot, a.slot, "both nodes hold slot %llu", (unsigned long long)a.slot);
	cr_assert_eq(meta_page_commit(other, &r, 20, 0xb), 0);
	meta_slot_unpin(other, r.pool_id, r.slot);
	wait_lookup(fx.m, fx.pool, "from-second", 0, &b);
	cr_assert_eq(b.slot, r.slot);
	/* A removal on one is a removal on the other. */
	cr_assert_eq(meta_page_unlink(other, fx.pool, "from-first"), 0);
	wait_lookup(fx.m, fx.pool, "from-first", -ENOENT, &seen);
	cr_log_info("visible on the other node after %ld ms", ms);
	meta_close(other);
}

Test(store_pg, a_slot_freed_on_one_node_is_not_reused_while_another_node_reads_it, .init = pg_setup,
     .fini = pg_teardown)
{
	struct meta_page_info seen;
	int verify;

	fx_open();
	fx_setup_pool();
	struct meta *other = open_node();
	struct meta_page_info a = put_page(fx.pool, "read-elsewhere", 10, 1);
	wait_lookup(other, fx.pool, "read-elsewhere", 0, &seen);
	cr_assert_eq(meta_page_pin(other, a.id, &seen, &verify), 0); /* a reader there */
	cr_assert_eq(meta_page_unlink(fx.m, fx.pool, "read-elsewhere"), 0);
	wait_lookup(other, fx.pool, "read-elsewhere", -ENOENT, &seen);
	/* Many writes later (and several heartbeats), the slot is still not
	 * handed out: the other node's reader pins it. */
	for (int i = 0; i < 20; i++) {
		char name[32];
		snprintf(name, sizeof(name), "new-%d", i);
		struct meta_resv r = reserve_ok(fx.pool, name, 0);
		cr_assert_neq(r.slot, a.slot,
		              "slot %llu reused while a reader on another node "
		              "has it open",
		              (unsigned long long)a.slot);
		commit_ok(&r, name, 1, 1);
		cr_assert_eq(meta_page_unlink(fx.m, fx.pool, name), 0);
		sleep_ms(60); /* 16 slots: freed ones must come back meanwhile */
	}
	/* Once the reader is gone, the slot comes back. */
	meta_slot_unpin(other, fx.pool, a.slot);
	int reused = 0;
	for (int i = 0; i < 200 && !reused; i++) {
		char name[32];
		snprintf(name, sizeof(name), "after-%d", i);
		struct meta_resv r = reserve_ok(fx.pool, name, 0);
		reused = r.slot == a.slot;
		commit_ok(&r, name, 1, 1);
		cr_assert_eq(meta_page_unlink(fx.m, fx.pool, name), 0);
		sleep_ms(20);
	}
	cr_assert(reused, "slot %llu never came back after the reader closed",
	          (unsigned long long)a.slot);
	meta_close(other);
}

struct reserver {
	struct meta *m;
	uint32_t pool;
	struct meta_resv r;
	int rc, done;
	pthread_mutex_t lock;
};

static void *reserve_there(void *arg)
{
	struct reserver *x = arg;
	int rc = meta_page_reserve(x->m, x->pool, "from-b", 0, &x->r);

	pthread_mutex_lock(&x->lock);
	x->rc = rc;
	x->done = 1;
	pthread_mutex_unlock(&x->lock);
	return NULL;
}

static int reserver_done(struct reserver *x)
{
	pthread_mutex_lock(&x->lock);
	int done = x->done;
	pthread_mutex_unlock(&x->lock);
	return done;
}

static long long chunk_holder_pid(uint64_t chunk)
{
	char sql[256];
	PGconn *c = admin();

	snprintf(sql, sizeof(sql),
	         "SELECT coalesce((SELECT n.pid FROM %s.pagefs_chunks c JOIN %s.pagefs_nodes n"
	         " ON n.id = c.node WHERE c.chunk = %llu), 0)",
	         pg_schema, pg_schema, (unsigned long long)chunk);
	PGresult *res = PQexec(c, sql);
	cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "%s", PQresultErrorMessage(res));
	long long pid = atoll(PQgetvalue(res, 0, 0));
	PQclear(res);
	PQfinish(c);
	return pid;
}

Test(store_pg, a_chunk_handed_over_waits_for_the_write_its_holder_had_in_flight_there,
     .init = pg_setup, .fini = pg_teardown)
{
	struct meta_page_info seen;

	fx_open();
	fx_setup_pool(); /* 16 slots: chunks of one slot */
	put_pages(fx.pool, FX_SLOTS - 1, NULL);
	struct meta_resv mine = reserve_ok(fx.pool, "in-flight", 0); /* the last slot */
	struct meta *other = open_node();
	wait_lookup(other, fx.pool, "page-14", 0, &seen);
	/* The other node finds every chunk held by this one: it asks for one.
	 * The chunk without a committed page (the write in flight) is the
	 * one to hand over, but only once that write has ended. */
	struct reserver x = {.m = other, .pool = fx.pool};
	pthread_t t;
	pthread_mutex_init(&x.lock, NULL);
	cr_assert_eq(pthread_create(&t, NULL, reserve_there, &x), 0);
	sleep_ms(1000);
	cr_assert_not(reserver_done(&x),
	              "the other node got a slot (rc %d, slot %llu) while "
	              "this one still writes into its last chunk",
	              x.rc, (unsigned long long)x.r.slot);
	cr_assert_eq(chunk_holder_pid(mine.slot), (long long)getpid(),
	             "the chunk of a write in flight was released");
	commit_ok(&mine, "in-flight", 10, 7);
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_eq(x.rc, 0, "reserve on the other node: %s", strerror(-x.rc));
	cr_assert_eq(x.r.slot, mine.slot, "the other node got slot %llu, want %llu (handed over)",
	             (unsigned long long)x.r.slot, (unsigned long long)mine.slot);
	/* The page committed there was evicted before the chunk changed hands. */
	wait_lookup(fx.m, fx.pool, "in-flight", -ENOENT, &seen);
	cr_assert_eq(meta_page_commit(other, &x.r, 20, 8), 0);
	meta_slot_unpin(other, x.r.pool_id, x.r.slot);
	wait_lookup(fx.m, fx.pool, "from-b", 0, &seen);
	cr_assert_eq(seen.slot, mine.slot);
	pthread_mutex_destroy(&x.lock);
	meta_close(other);
}

/* A dir callback that counts what it was told. */
struct dirs_seen {
	int pools, ranks;
};

static void count_dirs(void *arg, int rank, const char *ns)
{
	struct dirs_seen *d = arg;

	(void)rank;
	if (ns)
		__atomic_add_fetch(&d->pools, 1, __ATOMIC_SEQ_CST);
	else
		__atomic_add_fetch(&d->ranks, 1, __ATOMIC_SEQ_CST);
}

Test(store_pg, a_pool_removed_by_one_node_leaves_the_other_whose_writer_in_it_fails,
     .init = pg_setup, .fini = pg_teardown)
{
	struct meta_pool_info pi;
	struct dirs_seen dirs = {0};

	fx_open();
	fx_setup_pool();
	struct meta *other = open_node();
	meta_set_dir_cb(other, count_dirs, &dirs);
	/* A writer on the other node: a reservation only it knows of. */
	struct meta_resv r;
	cr_assert_eq(meta_page_reserve(other, fx.pool, "late", 0, &r), 0);
	struct meta_pool_info before;
	cr_assert_eq(meta_pool_get(other, fx.pool, &before), 0);
	cr_assert_eq(meta_pool_remove(fx.m, fx.pool), 0);
	/* The other node retires the pool under its lock and calls back after
	 * it lets go: wait for both. */
	long ms = 0;
	while ((meta_pool_find(other, 0, "kv", &pi) == 0 ||
	        __atomic_load_n(&dirs.pools, __ATOMIC_SEQ_CST) == 0) &&
	       ms < 3000) {
		sleep_ms(10);
		ms += 10;
	}
	cr_assert_eq(meta_pool_find(other, 0, "kv", &pi), -ENOENT, "still there after %ld ms", ms);
	cr_assert_eq(meta_pool_get(other, fx.pool, &pi), -ENOENT);
	cr_assert_eq(__atomic_load_n(&dirs.pools, __ATOMIC_SEQ_CST), 1, "dir callbacks: %d",
	             dirs.pools);
	/* Its data file stays open for the writer, whose commit fails. */
	cr_assert_eq(fcntl(before.data_fd, F_GETFD) >= 0, 1, "the writer's fd was closed");
	cr_assert_eq(meta_page_commit(other, &r, 10, 1), -ENOENT);
	cr_assert_eq(meta_page_reserve(other, fx.pool, "later", 0, &r), -ENOENT);
	/* The name can be made again, on either node. */
	cr_assert_eq(meta_pool_create(other, 0, "kv", 0, 0, &pi), 0);
	cr_assert_neq(pi.id, fx.pool, "a removed pool's id came back");
	cr_log_info("a removal reached the other node after %ld ms", ms);
	meta_close(other);
}

Test(store_pg, an_index_of_schema_1_is_migrated_keeping_its_pages, .init = pg_setup,
     .fini = pg_teardown)
{
	fx_open();
	fx_setup_pool();
	struct meta_page_info a = put_page(fx.pool, "old", 10, 1);
	fx_close();
	/* Back to what version 1 had. */
	schema_sql("DROP TABLE pagefs_wants, pagefs_changes, pagefs_pins, pagefs_chunks,"
	           " pagefs_nodes;"
	           " DROP SEQUENCE pagefs_page_ids, pagefs_pool_ids;"
	           " DROP FUNCTION pagefs_page_change, pagefs_pool_change CASCADE;"
	           " UPDATE pagefs_settings SET value='1' WHERE key='schema_version'");
	fx_open();
	struct meta_page_info b = lookup_ok(fx.pool, "old");
	cr_assert(b.id == a.id && b.slot == a.slot, "the page changed in the migration");
	struct meta_page_info c = put_page(fx.pool, "new", 10, 2);
	cr_assert_gt(c.id, a.id, "a new page reuses an old id");
	PGconn *conn = admin();
	char sql[128];
	snprintf(sql, sizeof(sql),
	         "SELECT value FROM %s.pagefs_settings WHERE key='schema_version'", pg_schema);
	PGresult *res = PQexec(conn, sql);
	cr_assert_str_eq(PQgetvalue(res, 0, 0), "3");
	PQclear(res);
	PQfinish(conn);
}

Test(store_pg, an_index_of_schema_2_is_migrated_and_its_nodes_can_ask_for_chunks, .init = pg_setup,
     .fini = pg_teardown)
{
	char sql[256];

	fx_open();
	fx_setup_pool();
	struct meta_page_info a = put_page(fx.pool, "old", 10, 1);
	fx_close();
	/* Back to what version 2 had. */
	schema_sql("DROP TABLE pagefs_wants;"
	           " UPDATE pagefs_settings SET value='2' WHERE key='schema_version'");
	fx_open();
	struct meta_page_info b = lookup_ok(fx.pool, "old");
	cr_assert(b.id == a.id && b.slot == a.slot, "the page changed in the migration");
	PGconn *conn = admin();
	snprintf(sql, sizeof(sql),
	         "SELECT value FROM %s.pagefs_settings WHERE key='schema_version'", pg_schema);
	PGresult *res = PQexec(conn, sql);
	cr_assert_str_eq(PQgetvalue(res, 0, 0), "3");
	PQclear(res);
	/* The new table takes a request of a live node and goes with it. */
	snprintf(sql, sizeof(sql),
	         "SET search_path = %s; INSERT INTO pagefs_wants(node, pool)"
	         " SELECT id, 1 FROM pagefs_nodes",
	         pg_schema);
	sql_ok(conn, sql);
	fx_close();
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s.pagefs_wants", pg_schema);
	res = PQexec(conn, sql);
	cr_assert_str_eq(PQgetvalue(res, 0, 0), "0", "a departed node's request outlived it");
	PQclear(res);
	PQfinish(conn);
}

Test(store_pg, newer_schema_version_is_refused_naming_the_fix, .init = pg_setup,
     .fini = pg_teardown)
{
	char err[1024] = "";

	fx_open();
	fx_close();
	schema_sql("UPDATE pagefs_settings SET value='99' WHERE key='schema_version'");
	open_fails(err, sizeof(err));
	assert_mentions(err, "99");
	assert_mentions(err, "upgrade pagefs");
}

Test(store_pg, read_only_open_of_an_empty_database_creates_nothing, .init = pg_setup,
     .fini = pg_teardown)
{
	char err[1024] = "";

	fx.cfg.read_only = 1;
	cr_assert_eq(open_fails(err, sizeof(err)), -EROFS, "%s", err);
	assert_mentions(err, "read-write");
	PGconn *c = admin();
	char sql[256];
	snprintf(sql, sizeof(sql), "SELECT to_regclass('%s.pagefs_settings') IS NULL", pg_schema);
	PGresult *res = PQexec(c, sql);
	cr_assert_eq(PQgetvalue(res, 0, 0)[0], 't', "a read-only open created tables");
	PQclear(res);
	PQfinish(c);
}

Test(store_pg, a_missing_schema_in_the_search_path_is_named, .init = pg_setup, .fini = pg_teardown)
{
	char err[1024] = "", uri[1100];

	snprintf(uri, sizeof(uri), "%s%coptions=-csearch_path%%3Dno_such_schema_here",
	         getenv("PAGEFS_TEST_PG_URI"),
	         strchr(getenv("PAGEFS_TEST_PG_URI"), '?') ? '&' : '?');
	fx.cfg.uri = uri;
	open_fails(err, sizeof(err));
	assert_mentions(err, "search_path");
}

Test(store_pg, a_password_never_appears_in_messages, .init = fx_init_dirs, .fini = fx_teardown)
{
	char err[1024] = "";

	fx.cfg.uri = "postgresql://pagefs:s3cret-pw@127.0.0.1:1/pagefs?connect_timeout=2";
	open_fails(err, sizeof(err));
	cr_assert_null(strstr(err, "s3cret-pw"), "password shown: %s", err);
	assert_mentions(err, "pagefs:***@127.0.0.1");
	char shown[256];
	meta_uri_display("postgres://h/db?user=a&password=hunter2&sslmode=require", shown,
	                 sizeof(shown));
	cr_assert_str_eq(shown, "postgres://h/db?user=a&password=***&sslmode=require");
}

Test(store_pg, an_idle_connection_lost_is_replaced_without_a_failed_commit, .init = pg_setup,
     .fini = pg_teardown)
{
	char err[1024] = "";

	fx_open();
	fx_setup_pool();
	put_page(fx.pool, "before", 1, 1);
	cr_assert_geq(terminate_my_backends(), 1, "no backend of this process to end");
	put_page(fx.pool, "after", 2, 2); /* asserts the commit succeeded */
	/* The lock was retaken on the new connection. */
	assert_exclusive_refused();
	(void)err;
	fx_reopen();
	lookup_ok(fx.pool, "before");
	lookup_ok(fx.pool, "after");
}

/* ---- the store itself ---- */

Test(store_pg, a_connection_lost_in_a_batch_fails_it_with_eio_and_the_next_batch_reconnects,
     .init = pg_setup, .fini = pg_teardown)
{
	struct store *s = store_with_pool();
	struct rec *a = page_rec(1, "a", 0), *b = page_rec(2, "b", 1);
	int errs[2];

	cr_assert_eq(store_begin(s), 0);
	cr_assert_eq(store_apply(s, a), 0);
	cr_assert_geq(terminate_my_backends(), 1);
	errs[1] = store_apply(s, b);
	int ret = errs[1] < 0 ? errs[1] : store_commit(s);
	store_rollback(s);
	cr_assert_eq(ret, -EIO, "batch on a dead connection: %d (%s), want -EIO", ret,
	             strerror(-ret));

	/* Nothing of it is in the index; the next batch reconnects. */
	cr_assert_eq(count_rows(), 0, "a failed batch left rows");
	struct rec *recs[] = {b};
	ret = batch(s, recs, 1, errs);
	cr_assert_eq(ret, 0, "batch after the loss: %s", strerror(-ret));
	cr_assert_eq(errs[0], 0, "record after the loss: %s", strerror(-errs[0]));
	struct seen seen = load_pages(s);
	cr_assert(seen.n == 1 && seen.ids[0] == 2, "rows after reconnect: %d", seen.n);
	free(a);
	free(b);
	store_close(s);
}

/* libpq knows the connection is gone before COMMIT is sent (a statement
 * of the batch saw it die): the batch was rolled back, and the store says
 * so at once, without asking txid_status() about an id that a crashed
 * server may have handed out again to a transaction that committed. */
Test(store_pg, a_batch_whose_connection_died_before_commit_is_rolled_back_without_asking,
     .init = pg_setup, .fini = pg_teardown)
{
	struct store *s = store_with_pool();
	struct pg_store *ps = (struct pg_store *)s;
	struct rec *a = page_rec(1, "a", 0);
	struct timespec t0, t1;

	cr_assert_eq(store_begin(s), 0);
	cr_assert_eq(store_apply(s, a), 0);
	cr_assert_geq(terminate_my_backends(), 1);
	PQclear(PQexec(ps->conn, "SELECT 1")); /* libpq finds the connection dead */
	cr_assert_neq(PQstatus(ps->conn), CONNECTION_OK, "the connection still looks alive");
	PGconn *dead = ps->conn;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int ret = store_commit(s);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	store_rollback(s);
	long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
	cr_assert_eq(ret, -EIO, "commit on a connection lost before it: %d", ret);
	cr_assert_eq(ps->doubt_xid, 0, "no doubt to resolve: COMMIT was never sent");
	/* Asking means a new connection (resolve_commit); the next begin
	 * makes that one, not the commit. */
	cr_assert_eq(ps->conn, dead, "the commit opened a connection to ask about its batch");
	cr_assert_lt(ms, 1000, "the commit asked a new connection (%ld ms)", ms);
	cr_assert_eq(count_rows(), 0, "the rolled back batch left rows");
	free(a);
	store_close(s);
}

Test(store_pg, a_record_that_breaks_a_constraint_fails_alone, .init = pg_setup, .fini = pg_teardown)
{
	struct store *s = store_with_pool();
	/* Two names on one slot: UNIQUE(pool, slot) refuses the second, as
	 * a slot taken (-EADDRINUSE: the engine keeps it, page.c). */
	struct rec *recs[] = {page_rec(1, "a", 5), page_rec(2, "b", 5), page_rec(3, "c", 6)};
	int errs[3];

	int ret = batch(s, recs, 3, errs);
	cr_assert_eq(ret, 0, "commit: %s", strerror(-ret));
	cr_assert(errs[0] == 0 && errs[2] == 0, "good records failed: %d %d", errs[0], errs[2]);
	cr_assert_eq(errs[1], -EADDRINUSE, "second owner of slot 5: %d, want -EADDRINUSE", errs[1]);
	struct seen seen = load_pages(s);
	cr_assert_eq(seen.n, 2, "rows: %d, want 2", seen.n);
	for (int i = 0; i < seen.n; i++)
		cr_assert_neq(seen.ids[i], 2, "the refused page was stored");
	for (int i = 0; i < 3; i++)
		free(recs[i]);
	store_close(s);
}

struct iter_seen {
	uint64_t last;
	int n, stop_at, ordered;
};

static int iter_cb(void *arg, const struct meta_page_info *p)
{
	struct iter_seen *s = arg;

	if (p->id <= s->last)
		s->ordered = 0;
	s->last = p->id;
	return ++s->n == s->stop_at ? 42 : 0;
}

Test(store_pg, iteration_walks_a_pool_in_id_order_across_chunks_and_stops_when_asked,
     .init = pg_setup, .fini = pg_teardown)
{
	struct store *s = store_with_pool();
	enum { N = 700 };
	static struct rec *recs[N];
	static int errs[N];

	for (int i = 0; i < N; i++) {
		char name[32];
		snprintf(name, sizeof(name), "p%d", i);
		recs[i] = page_rec((uint64_t)(N - i) * 3, name, (uint64_t)i);
	}
	cr_assert_eq(batch(s, recs, N, errs), 0);
	struct iter_seen all = {.ordered = 1};
	int ret = store_iter_pages(s, 1, 0, iter_cb, &all);
	cr_assert(ret == 0 && all.n == N && all.ordered, "iteration: ret %d, %d pages, ordered %d",
	          ret, all.n, all.ordered);
	struct iter_seen part = {.ordered = 1, .stop_at = 300};
	ret = store_iter_pages(s, 1, 30, iter_cb, &part);
	cr_assert_eq(ret, 42, "callback's stop value not returned: %d", ret);
	cr_assert_eq(part.n, 300);
	struct iter_seen other = {.ordered = 1};
	cr_assert_eq(store_iter_pages(s, 2, 0, iter_cb, &other), 0);
	cr_assert_eq(other.n, 0, "pages of another pool listed");
	for (int i = 0; i < N; i++)
		free(recs[i]);
	store_close(s);
}

/* ---- the 3FS key protocol (keys.c) on two nodes ---- */

static uint32_t keys_init_ok(struct meta *m, uint64_t pages)
{
	char msg[512] = "";
	int differs;
	uint32_t id;
	int ret = meta_keys_initialize(m, 0, "kv", pages, &differs, msg, sizeof(msg));

	cr_assert_eq(ret, 0, "initialize: %s: %s", strerror(-ret), msg);
	cr_assert_eq(meta_keys_pool(m, 0, "kv", &id), 0);
	return id;
}

Test(store_pg, a_pool_initialized_on_two_nodes_at_once_is_one_pool, .init = pg_setup,
     .fini = pg_teardown)
{
	fx_open();
	struct meta *other = open_node();
	/* The other node's pool reaches this one only through the feed
	 * (<= 50 ms): this node's create collides with it in the index and
	 * must find it instead of failing. */
	uint32_t b = keys_init_ok(other, 4096);
	uint32_t a = keys_init_ok(fx.m, 4096);
	cr_assert_eq(a, b, "two pools for one rank and namespace: %u and %u", a, b);
	meta_close(other);
}

Test(store_pg, key_reservations_of_two_nodes_never_share_a_slot_and_keys_cross, .init = pg_setup,
     .fini = pg_teardown)
{
	enum { N = 150 };
	static char names[2][N][32];
	const char *keys[2][N];
	int64_t slots[2][N];
	uint8_t existed[N], found[N];
	size_t ignored;

	fx_open();
	struct meta *node[2] = {fx.m, open_node()};
	uint32_t pool = keys_init_ok(node[0], 4096);
	cr_assert_eq(keys_init_ok(node[1], 4096), pool);
	for (int n = 0; n < 2; n++) {
		for (int i = 0; i < N; i++) {
			snprintf(names[n][i], sizeof(names[n][i]), "node%d-key%d", n, i);
			keys[n][i] = names[n][i];
		}
		cr_assert_eq(meta_keys_reserve(node[n], pool, keys[n], N, existed, slots[n]), 0);
	}
	/* 300 reservations: 3 chunks of 64 slots at least on each node. */
	for (int n = 0; n < 2; n++)
		for (int i = 0; i < N; i++) {
			cr_assert(slots[n][i] >= 0 && slots[n][i] < 4096, "no slot for key %d", i);
			for (int j = 0; j < N; j++)
				cr_assert(slots[n][i] != slots[1 - n][j] &&
				                  (j == i || slots[n][i] != slots[n][j]),
				          "slot %lld handed out twice", (long long)slots[n][i]);
		}
	for (int n = 0; n < 2; n++) {
		cr_assert_eq(
			meta_keys_confirm(node[n], pool, keys[n], slots[n], N, NULL, 0, &ignored),
			0);
		cr_assert_eq(ignored, 0);
	}
	/* Each node finds the other's keys at the other's slots. */
	for (int n = 0; n < 2; n++) {
		int64_t got[N];
		long ms = 0;
		for (;; ms += 10) {
			cr_assert_eq(meta_keys_exists(node[n], pool, keys[1 - n], N, found), 0);
			if (memchr(found, 0, N) == NULL)
				break;
			cr_assert_lt(ms, 3000, "node %d does not find node %d's keys within 3 s", n,
			             1 - n);
			sleep_ms(10);
		}
		cr_assert_eq(meta_keys_get(node[n], pool, keys[1 - n], N, got), 0);
		cr_assert_arr_eq(got, slots[1 - n], sizeof(got));
	}
	/* A key of node 1 deleted and written again on node 0 (its own
	 * reservation, which a confirm must name) reaches node 1. */
	const char *k0[1] = {keys[1][0]};
	int64_t s, seen;
	size_t gone;
	cr_assert_eq(meta_keys_delete(node[0], pool, k0, 1, &gone), 0);
	cr_assert_eq(gone, 1);
	cr_assert_eq(meta_keys_reserve(node[0], pool, k0, 1, existed, &s), 0);
	cr_assert(s >= 0 && !existed[0]);
	cr_assert_eq(meta_keys_confirm(node[0], pool, k0, &s, 1, NULL, 0, &ignored), 0);
	cr_assert_eq(ignored, 0);
	for (long ms = 0;; ms += 10) {
		cr_assert_eq(meta_keys_get(node[1], pool, k0, 1, &seen), 0);
		if (seen == s)
			break;
		cr_assert_lt(ms, 3000, "node 1 still maps %s to %lld", k0[0], (long long)seen);
		sleep_ms(10);
	}
	/* Deleted on node 1: gone on node 0. */
	size_t deleted;
	cr_assert_eq(meta_keys_delete(node[1], pool, keys[0], 10, &deleted), 0);
	cr_assert_eq(deleted, 10);
	for (long ms = 0;; ms += 10) {
		cr_assert_eq(meta_keys_exists(node[0], pool, keys[0], 11, found), 0);
		if (!memchr(found, 1, 10))
			break;
		cr_assert_lt(ms, 3000, "node 0 still has keys node 1 deleted");
		sleep_ms(10);
	}
	cr_assert(found[10], "a key nobody deleted is gone");
	meta_close(node[1]);
}

Test(store_pg, a_commit_or_lease_into_a_pool_being_removed_fails_and_a_full_pool_stays,
     .init = pg_setup, .fini = pg_teardown)
{
	struct store *s = store_with_pool();

	/* A pool with a page is not retired; a rank with a pool stays. */
	cr_assert_eq(apply_one(s, page_rec(1, "a", 0)), 0);
	cr_assert_eq(apply_one(s, pool_rec(REC_POOL_RETIRE, 1, 0)), -ENOTEMPTY);
	struct rec *rank = pool_rec(REC_RANK_DEL, 0, 0);
	cr_assert_eq(apply_one(s, rank), -ENOTEMPTY);
	/* An empty pool is: then no commit and no lease lands in it. */
	cr_assert_eq(apply_one(s, pool_rec(REC_POOL_PUT, 2, 1)), 0);
	cr_assert_eq(apply_one(s, pool_rec(REC_POOL_RETIRE, 2, 1)), 0);
	struct rec *late = page_rec(2, "late", 0);
	late->pool_id = 2;
	cr_assert_eq(apply_one(s, late), -ENOENT, "commit into a retired pool");
	struct rec *lease = pool_rec(REC_LEASE, 2, 1);
	lease->chunk_slots = 64;
	lease->capacity_slots = 4096;
	cr_assert_eq(apply_one(s, lease), -ENOENT, "lease in a retired pool");
	struct rec *set = pool_rec(REC_POOL_PUT, 2, 1);
	set->pool_update = 1;
	cr_assert_eq(apply_one(s, set), -ENOENT, "a capacity change revives a retired pool");
	cr_assert_eq(apply_one(s, pool_rec(REC_POOL_RETIRE, 2, 1)), -ENOENT, "retired twice");
	/* Removed for good: still nothing lands in it; its rank may go. */
	cr_assert_eq(apply_one(s, pool_rec(REC_POOL_DEL, 2, 1)), 0);
	late = page_rec(3, "later", 1);
	late->pool_id = 2;
	cr_assert_eq(apply_one(s, late), -ENOENT, "commit into a removed pool");
	cr_assert_eq(apply_one(s, pool_rec(REC_RANK_DEL, 0, 1)), 0);
	cr_assert_eq(apply_one(s, pool_rec(REC_RANK_DEL, 0, 1)), -ENOENT);
	struct seen seen = load_pages(s);
	cr_assert(seen.n == 1 && seen.ids[0] == 1, "pages: %d", seen.n);
	store_close(s);
}

/* A node of a shared index commits synchronously even with --durability
 * process: a server crash must not forget a lease, drop or commit other
 * nodes already acted on (the nemesis's pg_ctl restart -m immediate gave
 * slots two owners: docs/NEMESIS.md). */
Test(store_pg, a_node_commits_synchronously_whatever_its_durability, .init = pg_setup,
     .fini = pg_teardown)
{
	struct store *s = store_ok(); /* --durability process, as a node */
	struct pg_store *p = (struct pg_store *)s;

	cr_assert_neq(s->node_id, 0, "store_ok did not join as a node");
	PGresult *res = PQexec(p->conn, "SHOW synchronous_commit");
	cr_assert_eq(PQresultStatus(res), PGRES_TUPLES_OK, "SHOW: %s", PQerrorMessage(p->conn));
	cr_assert_str_eq(PQgetvalue(res, 0, 0), "on", "a node's transactions may be forgotten");
	PQclear(res);
	store_close(s);
}
