/*
 * test_sqlite_log_faults.c - the SQLite page log (store_sqlite_log.c)
 * against what should not happen: page_log rows changed or made by hand
 * (a column changed under an intact body, an entry outside its run, a run
 * out of range or over another's ids), a restart after the last page of
 * a run was deleted, and writes that fail within a transaction or at
 * its end (temporary triggers that raise, a commit hook that turns the
 * COMMIT into a ROLLBACK).
 *
 * A bad record must fail the load with a message naming fsck and the
 * record, or, with fsck's log_damaged callback, be reported and left out
 * while the good ones load; a failed transaction must leave memory and
 * disk as they were. Blobs are crafted in version 1 of the format (which
 * the load still reads), sealed with a checksum seeded with the row's
 * columns as the reader takes them, so each crafted record is refused
 * for the one reason its test names.
 * The model and checks are sqlite_log_fixture.h's.
 */
#include "sqlite_log_fixture.h"

#include <xxhash.h>

TestSuite(sqlite_log_faults, .init = log_setup, .fini = log_teardown, .timeout = 60);

/* ---- blobs made by hand (version 1, still read: store_sqlite_log.c) ---- */

struct craft {
	unsigned char p[65536];
	size_t len;
};

static void craft_put(struct craft *c, const void *src, size_t n)
{
	cr_assert_leq(c->len + n, sizeof(c->p), "crafted blob too long");
	memcpy(c->p + c->len, src, n);
	c->len += n;
}

static void craft_varint(struct craft *c, uint64_t v)
{
	do {
		unsigned char b = (unsigned char)(v & 0x7f);
		v >>= 7;
		b |= v ? 0x80 : 0;
		craft_put(c, &b, 1);
	} while (v);
}

static void put_le64(unsigned char *out, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		out[i] = (unsigned char)(v >> (8 * i));
}

/* Starts a blob of count pages: the version, count as a 4-byte varint. */
static void craft_start(struct craft *c, uint32_t count)
{
	unsigned char h[5] = {1};

	for (int i = 0; i < 4; i++)
		h[1 + i] = (unsigned char)(((count >> (7 * i)) & 0x7f) | (i < 3 ? 0x80 : 0));
	c->len = 0;
	craft_put(c, h, 5);
}

/* Page p as the blob's entry at offset `off` (any value: the id is lo + off). */
static void craft_row(struct craft *c, uint64_t off, const struct bulk_row *p)
{
	unsigned char flags = p->has_checksum ? 1 : 0;

	craft_varint(c, off);
	craft_varint(c, p->slot);
	craft_varint(c, p->length);
	craft_put(c, &flags, 1);
	if (p->has_checksum) {
		unsigned char s[8];
		put_le64(s, p->checksum);
		craft_put(c, s, 8);
	}
	craft_varint(c, (uint64_t)p->mtime_ns);
	int64_t d = (int64_t)((uint64_t)p->atime_ns - (uint64_t)p->mtime_ns);
	craft_varint(c, ((uint64_t)d << 1) ^ (uint64_t)(d >> 63));
	craft_varint(c, (uint64_t)p->gen);
	craft_varint(c, p->name_len);
	craft_put(c, p->name, p->name_len);
}

/* Ends the blob with its XXH3-64 seeded with the XXH3-64 of the row's
 * pool, lo and span as three little-endian 64-bit words (blob_sum). */
static void craft_seal(struct craft *c, uint32_t pool, uint64_t lo, uint32_t span)
{
	unsigned char cols[24], s[8];

	put_le64(cols, pool);
	put_le64(cols + 8, lo);
	put_le64(cols + 16, span);
	put_le64(s, XXH3_64bits_withSeed(c->p, c->len, XXH3_64bits(cols, sizeof(cols))));
	craft_put(c, s, 8);
}

/* Seals c for the row (pool, lo, span) as the load converts its columns,
 * so its checksum holds whatever they are, and inserts it into page_log
 * (store closed). Returns the row's seq. */
static int64_t raw_insert_blob(int64_t pool, int64_t lo, int64_t span, int64_t n, struct craft *c)
{
	sqlite3 *db = raw_open();
	sqlite3_stmt *q = NULL;

	craft_seal(c, (uint32_t)pool, (uint64_t)lo, (uint32_t)span);
	cr_assert_eq(sqlite3_prepare_v2(db,
	                                "INSERT INTO page_log(pool,lo,span,n,body)"
	                                " VALUES(?1,?2,?3,?4,?5)",
	                                -1, &q, NULL),
	             SQLITE_OK, "%s", sqlite3_errmsg(db));
	sqlite3_bind_int64(q, 1, pool);
	sqlite3_bind_int64(q, 2, lo);
	sqlite3_bind_int64(q, 3, span);
	sqlite3_bind_int64(q, 4, n);
	sqlite3_bind_blob(q, 5, c->p, (int)c->len, SQLITE_TRANSIENT);
	cr_assert_eq(sqlite3_step(q), SQLITE_DONE, "insert page_log: %s", sqlite3_errmsg(db));
	int64_t seq = sqlite3_last_insert_rowid(db);
	sqlite3_finalize(q);
	sqlite3_close(db);
	return seq;
}

/* A record of the one page `id` (page_row's) at offset off of the run
 * (pool, lo, span); returns its seq. */
static int64_t raw_insert_one(int64_t pool, int64_t lo, int64_t span, uint64_t off, uint64_t id)
{
	static struct craft c;
	struct bulk_row p = page_row(id, (uint32_t)pool);

	craft_start(&c, 1);
	craft_row(&c, off, &p);
	return raw_insert_blob(pool, lo, span, 1, &c);
}

/* The control: a blob of version 1 made here loads as the writer's did,
 * so the tests below differ from such blobs only where they say. */
Test(sqlite_log_faults, a_blob_crafted_in_version_1_loads)
{
	static struct craft c;

	fill(300, 10, POOL);
	close_store();
	craft_start(&c, 10);
	for (uint64_t i = 0; i < 10; i++)
		craft_row(&c, i, &expect[300 + i]);
	raw_insert_blob(POOL, 300, 10, 10, &c);
	set_present(300, 10, 1);
	open_store();
	assert_reloaded();
	assert_listing(POOL, 0, 0);
}

/* ---- a row's columns changed under an intact body ---- */

/* Its pages would load at ids nobody holds. */
Test(sqlite_log_faults, a_blob_whose_lo_column_changed_is_refused)
{
	int64_t seq = two_blobs();
	char sql[128];

	snprintf(sql, sizeof(sql), "UPDATE page_log SET lo=2000 WHERE seq=%lld", (long long)seq);
	raw_exec(sql);
	open_store();
	assert_load_refused(seq);
	set_present(RUN_MAX + 1, BULK_N - RUN_MAX, 0); /* left out, not loaded at 2000.. */
	assert_load_reports(seq, "checksum mismatch");
}

/* Its pages would load into another pool. */
Test(sqlite_log_faults, a_blob_whose_pool_column_changed_is_refused)
{
	int64_t seq = two_blobs();
	char sql[128];

	snprintf(sql, sizeof(sql), "UPDATE page_log SET pool=%d WHERE seq=%lld", POOL2,
	         (long long)seq);
	raw_exec(sql);
	open_store();
	assert_load_refused(seq);
	set_present(RUN_MAX + 1, BULK_N - RUN_MAX, 0); /* in neither pool */
	assert_load_reports(seq, "checksum mismatch");
}

/* Blob 1's span changed from 64 to 100 covers blob 2's ids: the changed
 * blob is the one reported (fsck's repair deletes it), not blob 2, whose
 * 40 pages are good and load. */
Test(sqlite_log_faults, fsck_reports_the_blob_whose_span_column_changed_not_the_good_one)
{
	two_blobs();
	raw_exec("UPDATE page_log SET span=100 WHERE seq=1");
	open_store();
	assert_load_refused(1);
	set_present(1, RUN_MAX, 0);
	assert_load_reports(1, "checksum mismatch");
}

/* ---- records whose ids are not theirs ---- */

/* One entry one past its run's end (id 110 in 100..109), one whose offset
 * wraps below its run (id 50 in 200..209: 2^64 - 150), which would set a
 * bit far outside the run's array. */
Test(sqlite_log_faults, an_entry_offset_outside_its_span_is_refused)
{
	put_bulk(1, 10, POOL);
	close_store();
	int64_t seqs[2] = {
		raw_insert_one(POOL, 100, 10, 10, 110),
		raw_insert_one(POOL, 200, 10, (uint64_t)50 - 200, 50),
	};
	open_store();
	assert_load_refused(seqs[0]);
	assert_load_reports_each(seqs, 2, "bad page entry");
}

/* Columns the checksum holds for, as the load converts them, but whose
 * ids do not fit: a pool above 32 bits (it would be read as pool 1), a
 * negative first id, a run past INT64_MAX. */
Test(sqlite_log_faults, a_record_whose_pool_lo_or_span_is_out_of_range_is_refused)
{
	put_bulk(1, 10, POOL);
	close_store();
	int64_t seqs[3] = {
		raw_insert_one((1LL << 32) + POOL, 100, 1, 0, 100),
		raw_insert_one(POOL, -64, 1, 0, 200),
		raw_insert_one(POOL, INT64_MAX - 4, 10, 0, 300),
	};
	open_store();
	assert_load_refused(seqs[0]);
	assert_load_reports_each(seqs, 3, "bad run");
}

/* Two records (checksums good) whose ranges meet runs 1..64 and 100..109
 * though none of their pages lies in them: one starts inside run 1..64
 * (60..79, pages 70..79), one spans run 100..109 (90..119, pages 90..99
 * and 110..119). Taken, they would hide pages of those runs from lookups
 * of the log (page 62's unlink would delete nothing). */
Test(sqlite_log_faults, a_record_whose_ids_overlap_another_records_is_refused)
{
	static struct craft c;

	put_bulk(1, RUN_MAX, POOL);
	put_bulk(100, 10, POOL);
	close_store();
	int64_t seqs[2];
	craft_start(&c, 10);
	for (uint64_t i = 0; i < 10; i++) {
		struct bulk_row p = page_row(70 + i, POOL);
		craft_row(&c, 10 + i, &p);
	}
	seqs[0] = raw_insert_blob(POOL, 60, 20, 10, &c);
	craft_start(&c, 20);
	for (uint64_t i = 0; i < 20; i++) {
		uint64_t off = i < 10 ? i : 10 + i;
		struct bulk_row p = page_row(90 + off, POOL);
		craft_row(&c, off, &p);
	}
	seqs[1] = raw_insert_blob(POOL, 90, 30, 20, &c);
	open_store();
	assert_load_refused(seqs[0]);
	assert_load_reports_each(seqs, 2, "its ids are another record's");
}

/* ---- the next ids after a restart ---- */

/* Run 1..10 loses page 10; a restart takes the next page id after the
 * highest loaded, 10: a bulk from there must not fall in the run (it was
 * refused with -EEXIST, "ids are never reused"). */
Test(sqlite_log_faults, after_a_delete_and_a_restart_a_bulk_of_the_next_ids_is_taken)
{
	put_bulk(1, 10, POOL);
	tx_begin();
	struct rec u = page_rec(REC_UNLINK, 10);
	tx_apply(&u, 0, "unlink 10");
	tx_commit();
	present[10] = 0;
	assert_reloaded(); /* the highest id loaded is 9 */

	struct test_bulk tb;
	fill(10, 5, POOL);
	struct rec r = bulk_rec(&tb, &expect[10], 5);
	tx_begin();
	tx_apply(&r, 0, "bulk of ids 10..14 (the engine's next ids)");
	tx_commit();
	set_present(10, 5, 1);
	assert_listing(POOL, 0, 0);
	assert_reloaded();

	close_store();
	struct blob b[4];
	cr_assert_eq(raw_blobs(b, 4), 2);
	assert_blob(&b[0], POOL, 1, 9, 9); /* the run ends at its last page */
	assert_blob(&b[1], POOL, 10, 5, 5);
	open_store();
}

/* The same through the engine: keys a, b, c confirmed (ids 1..3, one
 * blob), c deleted, a restart, then an import (meta_adopt) of one page
 * into another pool, which takes c's id, 3. (A key confirm takes it the
 * same way; right after a restart the protocol holds the free slots, so
 * the test imports.) */
static uint32_t keys_pool(int rank, const char *ns)
{
	char msg[512] = "";
	uint32_t id;
	int differs;
	int ret = meta_keys_initialize(fx.m, rank, ns, 8, &differs, msg, sizeof(msg));

	cr_assert_eq(ret, 0, "initialize: %s %s", strerror(-ret), msg);
	cr_assert_eq(meta_keys_pool(fx.m, rank, ns, &id), 0);
	return id;
}

TestSuite(sqlite_log_engine, .init = fx_setup, .fini = fx_teardown, .timeout = 30);

Test(sqlite_log_engine, an_import_after_a_delete_and_a_restart_takes_the_next_id)
{
	const char *abc[] = {"a", "b", "c"};
	uint8_t existed[3];
	int64_t s[3];
	size_t ignored = 99, deleted = 0;
	uint32_t p = keys_pool(0, "http");

	cr_assert_eq(meta_keys_reserve(fx.m, p, abc, 3, existed, s), 0);
	cr_assert_eq(meta_keys_confirm(fx.m, p, abc, s, 3, NULL, 0, &ignored), 0);
	cr_assert_eq(ignored, 0);
	struct meta_page_info pc = lookup_ok(p, "c");
	cr_assert_eq(pc.id, lookup_ok(p, "a").id + 2, "a, b, c have consecutive ids");
	cr_assert_eq(meta_keys_delete(fx.m, p, abc + 2, 1, &deleted), 0);
	cr_assert_eq(deleted, 1);
	fx_reopen();
	uint32_t q = keys_pool(1, "imp");
	struct meta_adopt_page in[1] = {{q, 1, "x"}};
	int ret = meta_adopt(fx.m, in, 1, NULL, NULL);
	cr_assert_eq(ret, 0, "import after the restart: %d (%s)", ret, strerror(-ret));
	struct meta_page_info px = lookup_ok(q, "x");
	cr_assert_eq(px.id, pc.id, "the import took id %llu, not c's %llu (the test proves less)",
	             (unsigned long long)px.id, (unsigned long long)pc.id);
	fx_reopen(); /* and everything reloads */
	cr_assert_eq(lookup_ok(q, "x").id, pc.id);
	lookup_ok(p, "a");
	lookup_ok(p, "b");
	lookup_missing(p, "c");
}

/* ---- writes that fail: savepoints, flushes and COMMITs ---- */

/* The store's connection: struct sqlite_store (store_sqlite.c) starts
 * with its struct store, then the sqlite3 handle. */
struct sq_head {
	struct store base;
	sqlite3 *db;
};

static sqlite3 *store_db(void)
{
	return ((struct sq_head *)st)->db;
}

static int fail_commits;

static int commit_hook(void *arg)
{
	(void)arg;
	return fail_commits; /* nonzero: the COMMIT becomes a ROLLBACK */
}

/* Temp triggers that raise while table fault holds their kind and id:
 * upd/del of the page_log row whose lo is id, put/set of page id's row. */
static void faults_install(void)
{
	char *msg = NULL;
	int rc = sqlite3_exec(
		store_db(),
		"CREATE TEMP TABLE fault(what TEXT, id INTEGER);"
		"CREATE TEMP TRIGGER f_upd BEFORE UPDATE ON main.page_log WHEN EXISTS(SELECT 1 FROM"
		" fault WHERE what='upd' AND id=OLD.lo) BEGIN SELECT RAISE(ABORT,'injected'); END;"
		"CREATE TEMP TRIGGER f_del BEFORE DELETE ON main.page_log WHEN EXISTS(SELECT 1 FROM"
		" fault WHERE what='del' AND id=OLD.lo) BEGIN SELECT RAISE(ABORT,'injected'); END;"
		"CREATE TEMP TRIGGER f_put BEFORE INSERT ON main.pages WHEN EXISTS(SELECT 1 FROM"
		" fault WHERE what='put' AND id=NEW.id) BEGIN SELECT RAISE(ABORT,'injected'); END;"
		"CREATE TEMP TRIGGER f_set BEFORE UPDATE ON main.pages WHEN EXISTS(SELECT 1 FROM"
		" fault WHERE what='set' AND id=OLD.id) BEGIN SELECT RAISE(ABORT,'injected'); END;",
		NULL, NULL, &msg);
	cr_assert_eq(rc, SQLITE_OK, "faults: %s", msg ? msg : "");
	sqlite3_commit_hook(store_db(), commit_hook, NULL);
}

static void fault(const char *what, int64_t id, int on)
{
	char sql[128];

	if (on)
		snprintf(sql, sizeof(sql), "INSERT INTO temp.fault VALUES('%s',%lld)", what,
		         (long long)id);
	else
		snprintf(sql, sizeof(sql), "DELETE FROM temp.fault WHERE what='%s' AND id=%lld",
		         what, (long long)id);
	cr_assert_eq(sqlite3_exec(store_db(), sql, NULL, NULL, NULL), SQLITE_OK);
}

/* Every kind of change to the log in one transaction, whose end fails
 * (how: a blob's rewrite, a blob's delete, or the COMMIT itself), then
 * more transactions: memory and disk keep what committed. Runs: 1..64,
 * 65..104 (BULK_N), 200..209. */
static void failed_end(const char *how)
{
	put_bulk(1, BULK_N, POOL);
	put_bulk(200, 10, POOL);
	faults_install();

	tx_begin();
	for (uint64_t id = 200; id < 210; id++) { /* empties run 200: a delete */
		struct rec u = page_rec(REC_UNLINK, id);
		tx_apply(&u, 0, "unlink");
	}
	struct rec u = page_rec(REC_UNLINK, 3); /* run 1: a rewrite */
	tx_apply(&u, 0, "unlink 3");
	struct rec t = page_rec(REC_TOUCH, 70); /* run 65: a move and a rewrite... */
	t.atime_ns = expect[70].atime_ns + 1;
	tx_apply(&t, 0, "touch 70");
	struct rec last = page_rec(REC_UNLINK, BULK_N); /* ...that shortens the run */
	tx_apply(&last, 0, "unlink the run's last page");
	struct test_bulk tb;
	fill(300, 5, POOL);
	struct rec b = bulk_rec(&tb, &expect[300], 5); /* a new run... */
	tx_apply(&b, 0, "bulk 300");
	struct rec u2 = page_rec(REC_UNLINK, 301); /* ...that loses a page */
	tx_apply(&u2, 0, "unlink 301");
	if (strcmp(how, "rewrite") == 0)
		fault("upd", RUN_MAX + 1, 1);
	else if (strcmp(how, "delete") == 0)
		fault("del", 200, 1);
	else
		fail_commits = 1;
	int ret = store_commit(st);
	cr_assert_lt(ret, 0, "the commit (%s failing) succeeded", how);
	store_rollback(st);
	fail_commits = 0;
	fault("upd", RUN_MAX + 1, 0);
	fault("del", 200, 0);
	assert_listing(POOL, 0, 0);

	/* the same ids again, and more, committed */
	tx_begin();
	struct rec v = page_rec(REC_UNLINK, 4);
	tx_apply(&v, 0, "unlink 4");
	struct rec w = page_rec(REC_UNLINK, 205);
	tx_apply(&w, 0, "unlink 205");
	struct test_bulk tb2;
	struct rec b2 = bulk_rec(&tb2, &expect[300], 5);
	tx_apply(&b2, 0, "bulk 300 again");
	t.atime_ns = expect[70].atime_ns + 7;
	tx_apply(&t, 0, "touch 70 again");
	tx_commit();
	present[4] = present[205] = 0;
	set_present(300, 5, 1);
	expect[70].atime_ns = t.atime_ns;
	assert_listing(POOL, 0, 0);
	assert_reloaded();
	assert_listing(POOL, 0, 7);
}

Test(sqlite_log_faults, a_failed_blob_rewrite_at_commit_undoes_the_transaction)
{
	failed_end("rewrite");
}

Test(sqlite_log_faults, a_failed_blob_delete_at_commit_undoes_the_transaction)
{
	failed_end("delete");
}

Test(sqlite_log_faults, a_failed_commit_undoes_the_transaction)
{
	failed_end("commit");
}

/* Records that fail half way (a move's row insert, an O_TRUNC rewrite's
 * update) are undone; the rest of the transaction, which rewrites the
 * same blob, commits. */
Test(sqlite_log_faults, a_move_that_fails_half_way_keeps_the_page_in_its_blob)
{
	put_bulk(1, 20, POOL);
	faults_install();
	tx_begin();
	fault("put", 5, 1);
	struct rec t = page_rec(REC_TOUCH, 5);
	t.atime_ns = expect[5].atime_ns + 1;
	cr_assert_lt(store_apply(st, &t), 0, "touch 5 (its row insert fails)");
	fault("put", 5, 0);
	fault("set", 6, 1);
	struct rec rw = page_rec(REC_COMMIT, 6);
	rw.replace = 1;
	rw.slot = 1;
	cr_assert_lt(store_apply(st, &rw), 0, "rewrite 6 (its update fails)");
	fault("set", 6, 0);
	struct rec u = page_rec(REC_UNLINK, 7);
	tx_apply(&u, 0, "unlink 7");
	struct rec t8 = page_rec(REC_TOUCH, 8);
	t8.atime_ns = expect[8].atime_ns + 1;
	tx_apply(&t8, 0, "touch 8");
	tx_commit();
	present[7] = 0;
	expect[8].atime_ns = t8.atime_ns;
	assert_listing(POOL, 0, 0);
	assert_reloaded();
	/* 5 and 6 are in the blob still: deleting them works */
	tx_begin();
	struct rec d5 = page_rec(REC_UNLINK, 5), d6 = page_rec(REC_DROP, 6);
	tx_apply(&d5, 0, "unlink 5");
	tx_apply(&d6, 0, "drop 6");
	tx_commit();
	present[5] = present[6] = 0;
	assert_listing(POOL, 0, 0);
	assert_reloaded();
}

/* A blob deleted (its seq the highest) gives its seq to the next blob
 * (INTEGER PRIMARY KEY, no AUTOINCREMENT) while the emptied run is kept
 * in memory and the deleted blob's pages were the last read (the cache):
 * the new run works through the cache, rewrites and deletes. */
Test(sqlite_log_faults, a_blob_reusing_a_deleted_blobs_seq_is_read_rewritten_and_reloaded)
{
	put_bulk(1, 10, POOL);
	put_bulk(20, 10, POOL); /* seq 2 */
	tx_begin();
	struct rec t20 = page_rec(REC_TOUCH, 20); /* read from seq 2, moved to a row */
	t20.atime_ns = expect[20].atime_ns + 1;
	tx_apply(&t20, 0, "touch 20");
	expect[20].atime_ns = t20.atime_ns;
	for (uint64_t id = 21; id < 30; id++) {
		struct rec u = page_rec(REC_UNLINK, id);
		tx_apply(&u, 0, "unlink");
	}
	tx_commit();
	set_present(21, 9, 0);
	put_bulk(40, 10, POOL); /* seq 2 again */
	tx_begin();
	struct rec t = page_rec(REC_TOUCH, 41);
	t.atime_ns = expect[41].atime_ns + 1;
	tx_apply(&t, 0, "touch 41");
	struct rec u = page_rec(REC_UNLINK, 42);
	tx_apply(&u, 0, "unlink 42");
	struct rec t2 = page_rec(REC_TOUCH, 43);
	t2.atime_ns = expect[43].atime_ns + 1;
	tx_apply(&t2, 0, "touch 43");
	tx_commit();
	expect[41].atime_ns = t.atime_ns;
	expect[43].atime_ns = t2.atime_ns;
	present[42] = 0;
	assert_listing(POOL, 0, 0);

	close_store();
	struct blob bl[4];
	cr_assert_eq(raw_blobs(bl, 4), 2);
	cr_assert_eq(bl[1].seq, 2, "the seq was not reused (the test proves less)");
	assert_blob(&bl[1], POOL, 40, 10, 7);
	open_store();
	assert_reloaded();
}
