/*
 * test_gather.c - the VFS that gathers WAL writes (meta/store/
 * sqlite_gather.c): a commit's frames are in the kernel when COMMIT
 * returns, in one write(2) (what a kill -9 leaves, read by SQLite's own
 * VFS, holds every commit), a commit larger than the buffer is written
 * in pieces SQLite's own VFS takes, and a write-out that fails fails its
 * commit and leaves the commits before it.
 *
 * The index's settings: exclusive locking, WAL, synchronous=OFF
 * (--durability process), automatic checkpoints off so that only the
 * WAL is written between commits.
 */
#include "fixture.h"
#include "meta/store/sqlite_gather.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define ROWS_A_COMMIT 3
#define BLOB_BYTES 3000 /* a page a row: several frames a commit */

/* fixture.h's directory: its index path, opened here through SQLite
 * alone, and a copy beside it. */
static char copy_path[512];

static void setup(void)
{
	fx_init_dirs();
	snprintf(copy_path, sizeof(copy_path), "%s/copy.db", fx.dir);
}

static void teardown(void)
{
	cr_expect_eq(nftw(fx.dir, fx_rm_entry, 16, FTW_DEPTH | FTW_PHYS), 0);
}

TestSuite(gather, .init = setup, .fini = teardown, .timeout = 60);

static void exec_ok(sqlite3 *db, const char *sql)
{
	char *msg = NULL;
	int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);

	cr_assert_eq(rc, SQLITE_OK, "%s: %s", sql, msg ? msg : sqlite3_errstr(rc));
}

/* The index as the store opens it, through the gathering VFS. */
static sqlite3 *open_gathered(void)
{
	const char *vfs = store_gather_vfs();
	sqlite3 *db = NULL;

	cr_assert_not_null(vfs, "the gathering VFS is not registered");
	cr_assert_eq(
		sqlite3_open_v2(fx.index, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, vfs),
		SQLITE_OK);
	exec_ok(db, "PRAGMA locking_mode=EXCLUSIVE");
	exec_ok(db, "PRAGMA journal_mode=WAL");
	exec_ok(db, "PRAGMA synchronous=OFF");
	exec_ok(db, "PRAGMA wal_autocheckpoint=0");
	exec_ok(db, "CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, b BLOB)");
	return db;
}

/* One transaction of n rows from id first on; SQLite's answer to its
 * COMMIT. */
static int commit_n(sqlite3 *db, int first, int n)
{
	sqlite3_stmt *st = NULL;

	exec_ok(db, "BEGIN IMMEDIATE");
	cr_assert_eq(
		sqlite3_prepare_v2(db, "INSERT INTO t VALUES(?1, randomblob(?2))", -1, &st, NULL),
		SQLITE_OK);
	for (int i = 0; i < n; i++) {
		sqlite3_bind_int(st, 1, first + i);
		sqlite3_bind_int(st, 2, BLOB_BYTES);
		cr_assert_eq(sqlite3_step(st), SQLITE_DONE);
		sqlite3_reset(st);
	}
	sqlite3_finalize(st);
	int rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
	if (rc != SQLITE_OK)
		sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL); /* (if it is still open) */
	return rc;
}

static int commit_rows(sqlite3 *db, int first)
{
	return commit_n(db, first, ROWS_A_COMMIT);
}

/* Copies file from to to with read(2) and write(2): the bytes the kernel
 * holds, as a killed process leaves them. A missing from is no copy. */
static void copy_file(const char *from, const char *to)
{
	static char buf[1 << 16];
	int in = open(from, O_RDONLY), out;
	ssize_t n;

	unlink(to);
	if (in < 0)
		return;
	out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	cr_assert_geq(out, 0);
	while ((n = read(in, buf, sizeof(buf))) > 0)
		cr_assert_eq(write(out, buf, (size_t)n), n);
	cr_assert_eq(n, 0);
	close(in);
	close(out);
}

/* Rows in path, opened with SQLite's own VFS (it recovers the WAL); the
 * file passes integrity_check. */
static int rows_in(const char *path)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	int n;

	cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
	cr_assert_str_eq((const char *)sqlite3_column_text(st, 0), "ok");
	sqlite3_finalize(st);
	cr_assert_eq(sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &st, NULL), SQLITE_OK);
	cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
	n = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
	return n;
}

/* What the kernel holds of the index, opened as a copy: its rows. */
static int rows_in_kernel(void)
{
	char from[600], to[600];

	copy_file(fx.index, copy_path);
	snprintf(from, sizeof(from), "%s-wal", fx.index);
	snprintf(to, sizeof(to), "%s-wal", copy_path);
	copy_file(from, to);
	snprintf(to, sizeof(to), "%s-shm", copy_path);
	unlink(to);
	return rows_in(copy_path);
}

Test(gather, every_commit_is_in_the_kernel_in_one_write)
{
	sqlite3 *db = open_gathered();

	for (int c = 0; c < 40; c++) {
		uint64_t before = store_gather_writes();
		cr_assert_eq(commit_rows(db, c * ROWS_A_COMMIT + 1), SQLITE_OK);
		cr_assert_eq(rows_in_kernel(), (c + 1) * ROWS_A_COMMIT, "commit %d", c);
		cr_assert_eq(store_gather_writes() - before, 1,
		             "commit %d: %llu writes of the WAL, not 1", c,
		             (unsigned long long)(store_gather_writes() - before));
		cr_assert_eq(store_gather_flush(db), SQLITE_OK);
		cr_assert_eq(store_gather_writes() - before, 1, "something was left to write");
	}
	/* A checkpoint reads the WAL back and writes the database: the same
	 * rows, through SQLite's own VFS and through this one. */
	exec_ok(db, "PRAGMA wal_checkpoint(TRUNCATE)");
	cr_assert_eq(rows_in_kernel(), 40 * ROWS_A_COMMIT);
	cr_assert_eq(commit_rows(db, 40 * ROWS_A_COMMIT + 1), SQLITE_OK);
	cr_assert_eq(rows_in_kernel(), 41 * ROWS_A_COMMIT);
	cr_assert_eq(sqlite3_close(db), SQLITE_OK);
	cr_assert_eq(rows_in(fx.index), 41 * ROWS_A_COMMIT);
}

Test(gather, a_commit_larger_than_the_buffer)
{
	sqlite3 *db = open_gathered();
	uint64_t before = store_gather_writes();

	/* 200 pages of 4 KiB: written out 128 KiB at a time at most (the
	 * most SQLite's own VFS writes in one call). */
	cr_assert_eq(commit_n(db, 1, 200), SQLITE_OK);
	cr_assert_geq(store_gather_writes() - before, 200 * 4096 / (128 * 1024));
	cr_assert_lt(store_gather_writes() - before, 20);
	cr_assert_eq(rows_in_kernel(), 200);
	cr_assert_eq(commit_rows(db, 201), SQLITE_OK);
	cr_assert_eq(rows_in_kernel(), 200 + ROWS_A_COMMIT);
	sqlite3_close(db);
}

Test(gather, a_write_out_that_fails_fails_its_commit_alone)
{
	sqlite3 *db = open_gathered();
	int committed = 0, failed = 0;

	/* Commits until the WAL reaches the size limit: the write-out of the
	 * commit that crosses it gets EFBIG (SIGXFSZ ignored). */
	exec_ok(db, "PRAGMA wal_checkpoint(TRUNCATE)");
	cr_assert_neq(signal(SIGXFSZ, SIG_IGN), SIG_ERR);
	struct rlimit old, lim;
	cr_assert_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
	lim = old;
	lim.rlim_cur = (rlim_t)20 * 4096 * (ROWS_A_COMMIT + 2);
	cr_assert_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
	for (int c = 0; c < 200 && !failed; c++) {
		if (commit_rows(db, committed + 1) == SQLITE_OK)
			committed += ROWS_A_COMMIT;
		else
			failed = 1;
	}
	cr_assert_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
	cr_assert(failed, "no commit failed under a WAL size limit");
	cr_assert_gt(committed, 0);
	/* What the kernel holds, and the index reopened: the commits before,
	 * not the one that failed; and the index takes commits again. */
	cr_assert_eq(rows_in_kernel(), committed);
	cr_assert_eq(commit_rows(db, committed + 1), SQLITE_OK);
	cr_assert_eq(rows_in_kernel(), committed + ROWS_A_COMMIT);
	sqlite3_close(db);
	cr_assert_eq(rows_in(fx.index), committed + ROWS_A_COMMIT);
}
