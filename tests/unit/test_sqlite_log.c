/*
 * test_sqlite_log.c - the SQLite index's page log (sqlite_log.h) through
 * the calls the journal and the loader make (store.h): a bulk record is
 * one blob per run of at most 64 consecutive ids of one pool; a page
 * leaves its blob when deleted or named over, or moves to a row of pages
 * before any other change; savepoints and rollbacks undo what the log
 * keeps in memory; a listing merges rows and blobs; a damaged blob fails
 * the load naming fsck, or is reported and left out. Crafted blobs and
 * failures at commit are test_sqlite_log_faults.c's.
 *
 * Each test keeps a model of what the index must hold (expect[],
 * present[]) and checks it two ways: store_iter_pages in the same session
 * (the log's bits in memory) and store_load after a reopen (the disk).
 * The model, the store and those checks are sqlite_log_fixture.h's.
 */
#include "sqlite_log_fixture.h"

#include "meta/store/sqlite_blob.h"

TestSuite(sqlite_log, .init = log_setup, .fini = log_teardown, .timeout = 60);

/* A REC_COMMIT writing expect[id] as a row. */
static struct rec commit_rec(uint64_t id)
{
	const struct bulk_row *p = &expect[id];
	struct rec r = page_rec(REC_COMMIT, id);

	memcpy(r.name, p->name, p->name_len + 1);
	r.name_len = p->name_len;
	r.slot = p->slot;
	r.length = p->length;
	r.has_checksum = p->has_checksum;
	r.checksum = p->checksum;
	r.mtime_ns = p->mtime_ns;
	r.atime_ns = p->atime_ns;
	r.gen = gen_of_column(p->gen);
	r.version = version_of_column(p->gen);
	return r;
}

/* ---- the tables, read directly (store closed) ---- */

static int64_t raw_int(const char *sql)
{
	sqlite3 *db = raw_open();
	sqlite3_stmt *q = NULL;

	cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK, "%s: %s", sql,
	             sqlite3_errmsg(db));
	cr_assert_eq(sqlite3_step(q), SQLITE_ROW, "%s: %s", sql, sqlite3_errmsg(db));
	int64_t v = sqlite3_column_int64(q, 0);
	sqlite3_finalize(q);
	sqlite3_close(db);
	return v;
}

/* Flips a byte in the middle of blob seq's body (its checksum then fails). */
static void raw_damage(int64_t seq)
{
	sqlite3 *db = raw_open();
	sqlite3_stmt *q = NULL;
	unsigned char *body;
	int len;

	cr_assert_eq(sqlite3_prepare_v2(db, "SELECT body FROM page_log WHERE seq=?1", -1, &q, NULL),
	             SQLITE_OK);
	sqlite3_bind_int64(q, 1, seq);
	cr_assert_eq(sqlite3_step(q), SQLITE_ROW, "no page_log row %lld", (long long)seq);
	len = sqlite3_column_bytes(q, 0);
	cr_assert_gt(len, 16, "page_log row %lld: body of %d bytes", (long long)seq, len);
	body = malloc((size_t)len);
	cr_assert_not_null(body);
	memcpy(body, sqlite3_column_blob(q, 0), (size_t)len);
	sqlite3_finalize(q);
	body[len / 2] ^= 0x5a;
	cr_assert_eq(
		sqlite3_prepare_v2(db, "UPDATE page_log SET body=?2 WHERE seq=?1", -1, &q, NULL),
		SQLITE_OK);
	sqlite3_bind_int64(q, 1, seq);
	sqlite3_bind_blob(q, 2, body, len, SQLITE_TRANSIENT);
	cr_assert_eq(sqlite3_step(q), SQLITE_DONE, "update page_log: %s", sqlite3_errmsg(db));
	sqlite3_finalize(q);
	sqlite3_close(db);
	free(body);
}

/* ---- 1, 2: bulks become blobs ---- */

Test(sqlite_log, a_bulk_is_a_blob_per_run_of_64_ids_and_reloads_field_for_field)
{
	put_bulk(1, BULK_N, POOL);
	/* (no row in pages: the estimate is the log's count alone) */
	cr_assert_eq(store_estimate(st), BULK_N, "estimate %llu, want %d",
	             (unsigned long long)store_estimate(st), BULK_N);
	assert_listing(POOL, 0, 0);

	close_store();
	struct blob b[4];
	cr_assert_eq(raw_int("SELECT count(*) FROM pages"), 0, "bulk pages went to rows");
	cr_assert_eq(raw_blobs(b, 4), (BULK_N + RUN_MAX - 1) / RUN_MAX);
	assert_blob(&b[0], POOL, 1, RUN_MAX, RUN_MAX);
	assert_blob(&b[1], POOL, 1 + RUN_MAX, BULK_N - RUN_MAX, BULK_N - RUN_MAX);
	open_store();
	assert_reloaded();
}

/* Page id of a bulk of SGLang-shaped keys (64 hex digits of a hash, a
 * shared suffix), slots from the top down, close mtimes. */
static void sglang_row(uint64_t id, uint64_t slot)
{
	struct bulk_row *p = &expect[id];

	*p = page_row(id, POOL);
	p->name_len = (uint16_t)snprintf(p->name, sizeof(p->name), "%016llx%048llx_qwen_0_64.bin",
	                                 (unsigned long long)(id * 0x9e3779b97f4a7c15ULL),
	                                 (unsigned long long)id);
	p->slot = slot;
	p->length = 65536;
	p->has_checksum = 0;
	p->checksum = 0;
	p->mtime_ns = p->atime_ns = 1700000000000000000LL + (int64_t)(id % 7) * 1000;
}

/* Version 2 entries: each field against the page before it in the blob,
 * names sharing the previous name's end, hex digits packed. */
Test(sqlite_log, names_and_fields_of_every_shape_round_trip_through_a_blob)
{
	static const char *const names[] = {
		"0123456789abcdef_suffix", /* hex, then one sharing its end */
		"fedcba_suffix",
		"FEDCBA_suffix", /* uppercase: not packed */
		"abc_suffix",    /* an odd count of digits: not packed */
		"abc_suffix",    /* the same name again: nothing of its own */
		"suffix",        /* the end of the one before */
		"longer_than_before_suffix",
		"\xff\xfe\x01"
		"binary",
		"",
		"0a",
	};
	size_t n = sizeof(names) / sizeof(*names);
	struct test_bulk tb;

	for (size_t i = 0; i < n; i++) {
		struct bulk_row *p = &expect[1 + i];
		*p = page_row(1 + i, POOL);
		p->name_len = (uint16_t)strlen(names[i]);
		memcpy(p->name, names[i], p->name_len + 1);
		p->slot = i % 2 ? 5 : 1ULL << 40;            /* up and down */
		p->mtime_ns = i % 2 ? INT64_MAX : INT64_MIN; /* the widest differences */
		p->atime_ns = i % 3 ? INT64_MIN : INT64_MAX;
	}
	/* the longest name, all digits (odd: not packed), then one packed */
	expect[1 + n] = page_row(1 + n, POOL);
	memset(expect[1 + n].name, '7', META_NAME_MAX);
	expect[1 + n].name[META_NAME_MAX] = '\0';
	expect[1 + n].name_len = META_NAME_MAX;
	expect[2 + n] = page_row(2 + n, POOL);
	memset(expect[2 + n].name, 'e', META_NAME_MAX - 1);
	expect[2 + n].name[META_NAME_MAX - 1] = '\0';
	expect[2 + n].name_len = META_NAME_MAX - 1;
	struct rec r = bulk_rec(&tb, &expect[1], n + 2);
	tx_begin();
	tx_apply(&r, 0, "bulk of every shape");
	tx_commit();
	set_present(1, n + 2, 1);
	assert_listing(POOL, 0, 0);

	/* A confirm of SGLang's keys: a blob of 64 fits a 4 KiB page. */
	for (uint64_t i = 0; i < RUN_MAX; i++)
		sglang_row(100 + i, 1000000 - i);
	struct test_bulk tb2;
	struct rec k = bulk_rec(&tb2, &expect[100], RUN_MAX);
	tx_begin();
	tx_apply(&k, 0, "bulk of SGLang keys");
	tx_commit();
	set_present(100, RUN_MAX, 1);
	close_store();
	int64_t bytes = raw_int("SELECT length(body) FROM page_log WHERE lo=100");
	cr_assert_lt(bytes, 3000, "64 SGLang keys take %lld bytes", (long long)bytes);
	open_store();
	assert_reloaded();
}

/* The bytes of a version 2 blob, as store_sqlite_blob.c's header lays
 * them out: an index on disk keeps them, so an encoder made faster must
 * write these same bytes. Four pages: packed hex digits, a checksum, the
 * length changing, uppercase and an odd count of digits (not packed), a
 * name sharing its end with the one before, an atime before the mtime. */
Test(sqlite_log, a_blob_holds_the_bytes_of_its_documented_format)
{
	static const char *const names[] = {"0123456789abcdef_k", "fedcba_k", "FEDCBA_k", "abc_k"};
	static const char want[] = "028480800000d8040080208080d0e2c6"
				   "bfce972f000000123031323334353637"
				   "38396162636465665f6b01cd0407efcd"
				   "ab8967452301d00f00010206fedcba02"
				   "ce0400e807d00f000202064645444342"
				   "4103cd0402d00f090302036162636c98"
				   "9eb3d00c14cf";
	struct bulk_row rows[4];
	unsigned char *body;
	size_t len;
	char hex[2 * sizeof(want)];

	memset(rows, 0, sizeof(rows));
	for (int i = 0; i < 4; i++) {
		rows[i].id = 100 + (uint64_t)i;
		rows[i].pool_id = 7;
		rows[i].slot = i % 2 ? 5 : 300;
		rows[i].length = i < 2 ? 4096 : 1000;
		rows[i].has_checksum = i == 1;
		rows[i].checksum = 0x0123456789abcdefULL;
		rows[i].mtime_ns = 1700000000000000000LL + i * 1000;
		rows[i].atime_ns = rows[i].mtime_ns - (i == 3 ? 5 : 0);
		rows[i].gen = i;
		rows[i].name_len = (uint16_t)strlen(names[i]);
		memcpy(rows[i].name, names[i], rows[i].name_len + 1);
	}
	cr_assert_eq(store_blob_encode(rows, 4, 7, 100, 64, &body, &len), 0);
	cr_assert_eq(len * 2, strlen(want), "a blob of %zu bytes", len);
	for (size_t i = 0; i < len; i++)
		snprintf(hex + 2 * i, 3, "%02x", body[i]);
	cr_assert_str_eq(hex, want);

	struct bulk_row *back;
	size_t n;
	const char *why = NULL;
	cr_assert_eq(store_blob_decode(body, len, 7, 100, 64, &back, &n, &why), 0, "%s", why);
	cr_assert_eq(n, 4);
	for (size_t i = 0; i < n; i++) {
		cr_assert_str_eq(back[i].name, names[i]);
		cr_assert_eq(back[i].atime_ns, rows[i].atime_ns);
		cr_assert_eq(back[i].has_checksum, rows[i].has_checksum);
	}
	free(back);
	free(body);
}

Test(sqlite_log, a_gap_in_ids_or_a_change_of_pool_starts_another_blob)
{
	struct bulk_row rows[20];
	struct test_bulk tb;

	fill(1, 10, POOL);
	fill(20, 5, POOL);
	fill(25, 5, POOL2); /* consecutive with the run before, another pool */
	memcpy(rows, &expect[1], 10 * sizeof(*rows));
	memcpy(rows + 10, &expect[20], 10 * sizeof(*rows));
	struct rec r = bulk_rec(&tb, rows, 20);
	tx_begin();
	tx_apply(&r, 0, "bulk of three runs");
	tx_commit();
	set_present(1, 10, 1);
	set_present(20, 10, 1);
	assert_listing(POOL, 0, 0);
	assert_listing(POOL2, 0, 0);

	close_store();
	struct blob b[4];
	cr_assert_eq(raw_blobs(b, 4), 3);
	assert_blob(&b[0], POOL, 1, 10, 10);
	assert_blob(&b[1], POOL, 20, 5, 5);
	assert_blob(&b[2], POOL2, 25, 5, 5);
	open_store();
	assert_reloaded();
}

/* ---- 3, 4, 5: pages leave the log ---- */

Test(sqlite_log, deleted_pages_leave_their_blob_and_an_emptied_blob_is_deleted)
{
	put_bulk(1, BULK_N, POOL);
	fill(BULK_N + 1, 1, POOL);
	struct rec row = commit_rec(BULK_N + 1); /* a row, deleted the old way */
	tx_begin();
	tx_apply(&row, 0, "commit of a row");
	tx_commit();
	present[BULK_N + 1] = 1;

	tx_begin();
	for (uint64_t id = RUN_MAX + 1; id <= BULK_N; id++) { /* all of the second blob */
		struct rec r = page_rec(id % 2 ? REC_DROP : REC_UNLINK, id);
		tx_apply(&r, 0, "delete");
	}
	uint64_t some[] = {1, 2, RUN_MAX / 2, BULK_N + 1};
	for (size_t i = 0; i < 4; i++) {
		struct rec r = page_rec(REC_UNLINK, some[i]);
		tx_apply(&r, 0, "unlink");
		present[some[i]] = 0;
	}
	tx_commit();
	set_present(RUN_MAX + 1, BULK_N - RUN_MAX, 0);
	assert_listing(POOL, 0, 0);
	cr_assert_eq(store_estimate(st), RUN_MAX - 3, "estimate %llu, want %d",
	             (unsigned long long)store_estimate(st), RUN_MAX - 3);

	close_store();
	struct blob b[4];
	cr_assert_eq(raw_int("SELECT count(*) FROM pages"), 0);
	cr_assert_eq(raw_blobs(b, 4), 1, "the emptied blob is still in page_log");
	cr_assert_eq(b[0].seq, 1, "the blob left is seq %lld, want 1", (long long)b[0].seq);
	assert_blob(&b[0], POOL, 1, RUN_MAX, RUN_MAX - 3);
	open_store();
	assert_reloaded();
}

Test(sqlite_log, a_renamed_touched_checksummed_or_rewritten_page_moves_to_a_row)
{
	put_bulk(1, 40, POOL);
	tx_begin();

	struct rec rename = page_rec(REC_RENAME, 10);
	rename.name_len = (uint16_t)snprintf(rename.name, sizeof(rename.name), "renamed-10");
	tx_apply(&rename, 0, "rename");
	memcpy(expect[10].name, rename.name, sizeof(rename.name));
	expect[10].name_len = rename.name_len;

	struct rec touch = page_rec(REC_TOUCH, 11);
	touch.atime_ns = expect[11].atime_ns + 5000000000LL;
	tx_apply(&touch, 0, "touch");
	expect[11].atime_ns = touch.atime_ns;

	struct rec older = page_rec(REC_TOUCH, 12); /* an older atime changes nothing */
	older.atime_ns = expect[12].atime_ns - 1;
	tx_apply(&older, 0, "touch with an older atime");

	cr_assert_not(expect[14].has_checksum, "page 14 is written without a checksum");
	struct rec sum = page_rec(REC_CHECKSUM, 14);
	sum.slot = expect[14].slot;
	sum.checksum = 0xfeedfacecafef00dULL;
	tx_apply(&sum, 0, "checksum");
	expect[14].has_checksum = 1;
	expect[14].checksum = sum.checksum;

	struct rec rewrite = page_rec(REC_COMMIT, 16); /* O_TRUNC: keeps its name */
	rewrite.replace = 1;
	rewrite.slot = 77777;
	rewrite.length = 123;
	rewrite.has_checksum = 1;
	rewrite.checksum = 0x1234;
	rewrite.mtime_ns = expect[16].mtime_ns + BULK_N;
	rewrite.atime_ns = expect[16].mtime_ns + 2000;
	rewrite.gen = 9;
	rewrite.version = 3;
	tx_apply(&rewrite, 0, "rewrite in place");
	cr_assert(rewrite.in_place, "the rewrite did not find page 16");
	cr_assert_str_eq(rewrite.name, expect[16].name, "the rewrite took the log's name");
	expect[16].slot = rewrite.slot;
	expect[16].length = rewrite.length;
	expect[16].has_checksum = 1;
	expect[16].checksum = rewrite.checksum;
	expect[16].mtime_ns = rewrite.mtime_ns;
	expect[16].atime_ns = rewrite.atime_ns;
	expect[16].gen = gen_column(9, 3);
	tx_commit();
	assert_listing(POOL, 0, 0);

	close_store();
	struct blob b[2];
	cr_assert_eq(raw_int("SELECT count(*) FROM pages WHERE id IN (10,11,12,14,16)"), 5,
	             "the changed pages are not all rows");
	cr_assert_eq(raw_int("SELECT count(*) FROM pages"), 5);
	cr_assert_eq(raw_blobs(b, 2), 1);
	assert_blob(&b[0], POOL, 1, 40, 35);
	open_store();
	assert_reloaded();
}

Test(sqlite_log, a_page_named_over_or_committed_again_leaves_the_log)
{
	put_bulk(1, 40, POOL);
	tx_begin();

	/* a new page of the name of logged page 20 */
	uint64_t repl20[] = {20};
	fill(100, 1, POOL);
	memcpy(expect[100].name, expect[20].name, sizeof(expect[100].name));
	expect[100].name_len = expect[20].name_len;
	struct rec c = commit_rec(100);
	c.repl = repl20;
	c.nrepl = 1;
	tx_apply(&c, 0, "commit over 20");
	present[20] = 0;
	present[100] = 1;

	/* logged page 21 renamed over logged page 22 */
	uint64_t repl22[] = {22};
	struct rec rename = page_rec(REC_RENAME, 21);
	memcpy(rename.name, expect[22].name, sizeof(rename.name));
	rename.name_len = expect[22].name_len;
	rename.repl = repl22;
	rename.nrepl = 1;
	tx_apply(&rename, 0, "rename over 22");
	memcpy(expect[21].name, rename.name, sizeof(rename.name));
	expect[21].name_len = rename.name_len;
	present[22] = 0;

	/* a bulk whose first page takes the name of logged page 23 */
	uint64_t repl23[] = {23};
	uint32_t repl_at[] = {0, 1, 1};
	struct test_bulk tb;
	fill(101, 2, POOL);
	memcpy(expect[101].name, expect[23].name, sizeof(expect[101].name));
	expect[101].name_len = expect[23].name_len;
	struct rec bulk = bulk_rec(&tb, &expect[101], 2);
	tb.b.repl = repl23;
	tb.b.repl_at = repl_at;
	tx_apply(&bulk, 0, "bulk over 23");
	present[23] = 0;
	set_present(101, 2, 1);

	/* logged page 24 committed again under its id: the row wins */
	expect[24].slot = 4242;
	expect[24].atime_ns += 1;
	struct rec again = commit_rec(24);
	tx_apply(&again, 0, "commit of 24 again");
	tx_commit();
	assert_listing(POOL, 0, 0);

	close_store();
	struct blob b[4];
	cr_assert_eq(raw_int("SELECT count(*) FROM pages"), 3, "rows: 100, 21, 24");
	cr_assert_eq(raw_blobs(b, 4), 2);
	assert_blob(&b[0], POOL, 1, 40, 35);
	assert_blob(&b[1], POOL, 101, 2, 2);
	open_store();
	assert_reloaded();
}

/* ---- 6, 7: rollbacks and savepoints ---- */

Test(sqlite_log, a_rollback_forgets_a_bulk_and_its_deletes)
{
	struct test_bulk tb;

	put_bulk(1, 20, POOL);
	fill(21, 40, POOL);
	struct rec r = bulk_rec(&tb, &expect[21], 40);
	tx_begin();
	tx_apply(&r, 0, "bulk");
	uint64_t gone[] = {5, 30};
	for (size_t i = 0; i < 2; i++) {
		struct rec u = page_rec(REC_UNLINK, gone[i]);
		tx_apply(&u, 0, "unlink");
	}
	store_rollback(st);
	assert_listing(POOL, 0, 0);

	/* the rolled back run is forgotten: its ids can be written */
	put_bulk(21, 40, POOL);
	struct rec u = page_rec(REC_UNLINK, 5);
	tx_begin();
	tx_apply(&u, 0, "unlink 5");
	tx_commit();
	present[5] = 0;
	assert_listing(POOL, 0, 0);

	close_store();
	struct blob b[4];
	cr_assert_eq(raw_blobs(b, 4), 2);
	assert_blob(&b[0], POOL, 1, 20, 19);
	assert_blob(&b[1], POOL, 21, 40, 40);
	open_store();
	assert_reloaded();
}

Test(sqlite_log, a_rolled_back_delete_or_move_keeps_the_page_through_later_commits)
{
	put_bulk(1, 20, POOL);
	tx_begin();
	struct rec u = page_rec(REC_UNLINK, 3);
	tx_apply(&u, 0, "unlink 3");
	struct rec t = page_rec(REC_TOUCH, 7);
	t.atime_ns = expect[7].atime_ns + BULK_N;
	tx_apply(&t, 0, "touch 7");
	store_rollback(st);
	assert_listing(POOL, 0, 0);

	/* the blob is written again from the bits in memory */
	tx_begin();
	u = page_rec(REC_UNLINK, 5);
	tx_apply(&u, 0, "unlink 5");
	tx_commit();
	present[5] = 0;
	assert_listing(POOL, 0, 0);

	close_store();
	struct blob b[2];
	cr_assert_eq(raw_int("SELECT count(*) FROM pages"), 0, "the rolled back touch left a row");
	cr_assert_eq(raw_blobs(b, 2), 1);
	assert_blob(&b[0], POOL, 1, 20, 19);
	open_store();
	assert_reloaded();
}

Test(sqlite_log, a_failed_record_is_undone_and_the_rest_of_its_transaction_commits)
{
	put_bulk(1, 10, POOL);
	tx_begin();
	struct rec u = page_rec(REC_UNLINK, 2);
	tx_apply(&u, 0, "unlink 2");

	/* a run of new ids that replaces logged page 3, then ids 5 and 6,
	 * which are in the log already: refused after the first run and the
	 * replacement are done, which the savepoint must undo */
	struct bulk_row rows[5];
	uint64_t repl3[] = {3};
	uint32_t repl_at[] = {0, 1, 1, 1, 1, 1};
	struct test_bulk tb;
	for (int i = 0; i < 3; i++)
		rows[i] = page_row(100 + (uint64_t)i, POOL);
	memcpy(rows[0].name, expect[3].name, sizeof(rows[0].name));
	rows[0].name_len = expect[3].name_len;
	rows[3] = page_row(5, POOL);
	rows[4] = page_row(6, POOL);
	struct rec bad = bulk_rec(&tb, rows, 5);
	tb.b.repl = repl3;
	tb.b.repl_at = repl_at;
	tx_apply(&bad, -EEXIST, "bulk over logged ids");

	struct test_bulk tb2;
	fill(200, 5, POOL);
	struct rec good = bulk_rec(&tb2, &expect[200], 5);
	tx_apply(&good, 0, "bulk after the failed one");
	struct rec t = page_rec(REC_TOUCH, 4);
	t.atime_ns = expect[4].atime_ns + BULK_N;
	tx_apply(&t, 0, "touch 4");
	tx_commit();
	present[2] = 0;
	set_present(200, 5, 1);
	expect[4].atime_ns = t.atime_ns;
	assert_listing(POOL, 0, 0);

	/* the failed record's run is forgotten too */
	put_bulk(100, 3, POOL);
	assert_listing(POOL, 0, 0);

	close_store();
	struct blob b[4];
	cr_assert_eq(raw_int("SELECT count(*) FROM pages"), 1, "rows: 4");
	cr_assert_eq(raw_blobs(b, 4), 3);
	assert_blob(&b[0], POOL, 1, 10, 8);
	assert_blob(&b[1], POOL, 200, 5, 5);
	assert_blob(&b[2], POOL, 100, 3, 3);
	open_store();
	assert_reloaded();
}

Test(sqlite_log, a_bulk_over_any_part_of_a_logged_run_is_refused)
{
	static const uint64_t spans[][2] = {{95, 21}, {105, 2}, {99, 2}, {109, 3}};

	put_bulk(100, 10, POOL);
	for (size_t k = 0; k < 4; k++) {
		struct bulk_row rows[32];
		struct test_bulk tb;
		for (uint64_t i = 0; i < spans[k][1]; i++)
			rows[i] = page_row(spans[k][0] + i, POOL);
		struct rec r = bulk_rec(&tb, rows, spans[k][1]);
		tx_begin();
		tx_apply(&r, -EEXIST, "bulk over run 100..109");
		tx_commit();
	}
	assert_listing(POOL, 0, 0);

	close_store();
	struct blob b[2];
	cr_assert_eq(raw_blobs(b, 2), 1);
	assert_blob(&b[0], POOL, 100, 10, 10);
	open_store();
	assert_reloaded();
}

/* ---- 8: listings ---- */

/* Pool 1: blobs of 64 ids from 1 to 600 and from 651 to 1050, rows
 * 1100..1109 and the pages touched out of the blobs; pool 2's blob
 * 601..650 between. */
Test(sqlite_log, a_listing_merges_rows_and_blobs_in_id_order_and_resumes_anywhere)
{
	put_bulk(1, 600, POOL);
	put_bulk(601, 50, POOL2);
	put_bulk(651, 400, POOL);
	tx_begin();
	fill(1100, 10, POOL);
	fill(1110, 2, POOL2);
	for (uint64_t id = 1100; id < 1112; id++) {
		struct rec c = commit_rec(id);
		tx_apply(&c, 0, "commit of a row");
	}
	set_present(1100, 12, 1);
	static const uint64_t touched[] = {5, 300, 610, 700};
	for (size_t i = 0; i < 4; i++) {
		struct rec t = page_rec(REC_TOUCH, touched[i]);
		t.atime_ns = expect[touched[i]].atime_ns + 1;
		tx_apply(&t, 0, "touch");
		expect[touched[i]].atime_ns = t.atime_ns;
	}
	static const uint64_t gone[] = {7, 64, 65, 512, 513, 651};
	for (size_t i = 0; i < sizeof(gone) / sizeof(*gone); i++) {
		struct rec u = page_rec(REC_UNLINK, gone[i]);
		tx_apply(&u, 0, "unlink");
		present[gone[i]] = 0;
	}
	tx_commit();

	/* from the start, around a row (4, 5), inside a blob (250), at the
	 * ends of blobs, across pool 2's, among the rows, past the end */
	static const uint64_t afters[] = {0,   4,   5,   63,  64,   65,   250,  511,
	                                  512, 599, 600, 650, 1049, 1050, 1105, 2000};
	for (size_t i = 0; i < sizeof(afters) / sizeof(*afters); i++)
		assert_listing(POOL, afters[i], 0);
	static const size_t chunks[] = {1, 37, 512};
	for (size_t i = 0; i < 3; i++) {
		assert_listing(POOL, 0, chunks[i]);
		assert_listing(POOL2, 0, chunks[i]);
	}
	assert_reloaded();
	assert_listing(POOL, 0, 37);
}

Test(sqlite_log, a_listing_before_any_load_sees_the_log)
{
	put_bulk(1, 30, POOL);
	close_store();
	open_store(); /* a tool's store: opened, not loaded */
	assert_listing(POOL, 0, 0);
	assert_listing(POOL, 12, 5);
}

/* ---- many runs ---- */

/* The log forgets emptied runs once they are half of its array (64 at
 * least): 150 of 200 here. */
Test(sqlite_log, many_emptied_blobs_are_forgotten_and_the_others_keep_working)
{
	struct bulk_row rows[200];
	struct test_bulk tb;

	for (uint64_t i = 0; i < 200; i++) { /* ids 2, 4, .. 400: a blob each */
		fill(2 + 2 * i, 1, POOL);
		rows[i] = expect[2 + 2 * i];
	}
	struct rec r = bulk_rec(&tb, rows, 200);
	tx_begin();
	tx_apply(&r, 0, "bulk of 200 runs");
	tx_commit();
	for (uint64_t i = 0; i < 200; i++)
		present[2 + 2 * i] = 1;

	tx_begin();
	for (uint64_t id = 2; id <= 300; id += 2) {
		struct rec u = page_rec(REC_UNLINK, id);
		tx_apply(&u, 0, "unlink");
		present[id] = 0;
	}
	tx_commit();
	assert_listing(POOL, 0, 0);

	tx_begin();
	struct rec u = page_rec(REC_UNLINK, 350);
	tx_apply(&u, 0, "unlink 350");
	present[350] = 0;
	struct rec t = page_rec(REC_TOUCH, 360);
	t.atime_ns = expect[360].atime_ns + 1;
	tx_apply(&t, 0, "touch 360");
	expect[360].atime_ns = t.atime_ns;
	fill(BULK_N, 3, POOL);
	struct test_bulk tb2;
	struct rec more = bulk_rec(&tb2, &expect[BULK_N], 3);
	tx_apply(&more, 0, "bulk after the emptied runs");
	set_present(BULK_N, 3, 1);
	tx_commit();
	assert_listing(POOL, 0, 0);

	close_store();
	struct blob b[64];
	/* 50 runs were left; 350 was deleted and 360 moved to a row */
	cr_assert_eq(raw_blobs(b, 64), 48 + 1, "page_log: the 48 runs left and the new one");
	open_store();
	assert_reloaded();
}

/* ---- 9: damage ---- */

Test(sqlite_log, a_damaged_blob_fails_the_load_naming_fsck_or_is_reported_and_left_out)
{
	int64_t seq = two_blobs();

	raw_damage(seq);
	open_store();
	assert_load_refused(seq);
	set_present(RUN_MAX + 1, BULK_N - RUN_MAX, 0); /* left out */
	assert_load_reports(seq, "checksum mismatch");
}
