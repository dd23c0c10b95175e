/*
 * sqlite_rows.c - what a durable key costs SQLite alone, in CPU time per
 * key: the floor under pagefs's confirm_write (and under any commit).
 *
 *   sqlite_rows DB_PATH KEYS BATCH random|sequential index|noindex|batchrow
 *
 * Inserts KEYS rows of pagefs's pages schema (meta/store_sqlite.c), BATCH
 * per transaction, WAL with synchronous=OFF as pagefs --durability
 * process, names of SGLang's shape (64 hex digits + a model suffix)
 * built beforehand. random: the hex digits are a hash (as SGLang's keys
 * are); sequential: a counter. index: the table as pagefs has it, with
 * UNIQUE(pool, name); noindex: without that index; batchrow: one row per
 * transaction holding the batch's (name, slot) pairs (a log record).
 * Prints keys per CPU second (utime + stime of this process).
 */
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "perf_common.h"

#define NAME_MAX_LEN 96

static int run(sqlite3 *db, const char *sql)
{
	char *err = NULL;

	if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
		fprintf(stderr, "sqlite_rows: %s: %s\n", sql, err);
		sqlite3_free(err);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 6) {
		fprintf(stderr, "usage: sqlite_rows DB_PATH KEYS BATCH random|sequential "
		                "index|noindex|batchrow\n");
		return 2;
	}
	const char *path = argv[1];
	long keys = atol(argv[2]), batch = atol(argv[3]);
	int random = strcmp(argv[4], "random") == 0;
	int batchrow = strcmp(argv[5], "batchrow") == 0;
	int index = strcmp(argv[5], "index") == 0;
	char wal[4096], shm[4096];
	sqlite3 *db;
	sqlite3_stmt *st;

	if (keys <= 0 || batch <= 0 || keys % batch != 0) {
		fprintf(stderr, "sqlite_rows: KEYS must be a positive multiple of BATCH\n");
		return 2;
	}
	snprintf(wal, sizeof(wal), "%s-wal", path);
	snprintf(shm, sizeof(shm), "%s-shm", path);
	unlink(path);
	unlink(wal);
	unlink(shm);
	if (sqlite3_open(path, &db) != SQLITE_OK)
		return 1;
	if (run(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF; PRAGMA cache_size=-65536") <
	            0 ||
	    run(db, index ? "CREATE TABLE pages(id INTEGER PRIMARY KEY, pool INTEGER NOT NULL,"
	                    " name BLOB NOT NULL, slot INTEGER NOT NULL, length INTEGER NOT NULL,"
	                    " checksum INTEGER, mtime INTEGER NOT NULL, atime INTEGER NOT NULL,"
	                    " gen INTEGER NOT NULL, UNIQUE(pool, name), UNIQUE(pool, slot))"
	                  : "CREATE TABLE pages(id INTEGER PRIMARY KEY, pool INTEGER NOT NULL,"
	                    " name BLOB NOT NULL, slot INTEGER NOT NULL, length INTEGER NOT NULL,"
	                    " checksum INTEGER, mtime INTEGER NOT NULL, atime INTEGER NOT NULL,"
	                    " gen INTEGER NOT NULL, UNIQUE(pool, slot))") < 0 ||
	    run(db, "CREATE TABLE batches(seq INTEGER PRIMARY KEY, pool INTEGER, pairs BLOB)") < 0)
		return 1;
	if (sqlite3_prepare_v2(db,
	                       batchrow ? "INSERT INTO batches(pool, pairs) VALUES(1, ?1)"
	                                : "INSERT INTO pages(id,pool,name,slot,length,checksum,"
	                                  "mtime,atime,gen) VALUES(?1,1,?2,?3,4096,NULL,?4,?4,0)",
	                       -1, &st, NULL) != SQLITE_OK)
		return 1;

	char *names = malloc((size_t)keys * NAME_MAX_LEN);
	int *lens = malloc((size_t)keys * sizeof(*lens));
	char *pairs = malloc((size_t)batch * (NAME_MAX_LEN + 8));
	if (!names || !lens || !pairs)
		return 1;
	for (long k = 0; k < keys; k++) {
		uint64_t h = random ? perf_mix((uint64_t)k) : (uint64_t)k;
		lens[k] = (int)perf_sglang_key(names + k * NAME_MAX_LEN, NAME_MAX_LEN, h, random);
	}

	double c0 = perf_cpu_s();
	for (long i = 0; i < keys; i += batch) {
		if (run(db, "BEGIN") < 0)
			return 1;
		if (batchrow) {
			size_t off = 0;
			for (long j = i; j < i + batch; j++) {
				int64_t slot = (1LL << 23) - 1 - j;
				memcpy(pairs + off, names + j * NAME_MAX_LEN, (size_t)lens[j]);
				off += (size_t)lens[j];
				memcpy(pairs + off, &slot, sizeof(slot));
				off += sizeof(slot);
			}
			sqlite3_bind_blob(st, 1, pairs, (int)off, SQLITE_STATIC);
			if (sqlite3_step(st) != SQLITE_DONE)
				goto fail;
			sqlite3_reset(st);
		} else {
			for (long k = i; k < i + batch; k++) {
				sqlite3_bind_int64(st, 1, k + 1);
				sqlite3_bind_blob(st, 2, names + k * NAME_MAX_LEN, lens[k],
				                  SQLITE_STATIC);
				sqlite3_bind_int64(st, 3, (1LL << 23) - 1 - k);
				sqlite3_bind_int64(st, 4, 1700000000000000000LL + k);
				if (sqlite3_step(st) != SQLITE_DONE)
					goto fail;
				sqlite3_reset(st);
			}
		}
		if (run(db, "COMMIT") < 0)
			return 1;
	}
	double c = perf_cpu_s() - c0;
	printf("sqlite_rows %s %s keys=%ld batch=%ld cpu_s=%.2f keys/cpu_s=%.0f us/key=%.2f\n",
	       argv[4], argv[5], keys, batch, c, (double)keys / c, c * 1e6 / (double)keys);
	sqlite3_finalize(st);
	sqlite3_close(db);
	unlink(path);
	unlink(wal);
	unlink(shm);
	free(names);
	free(lens);
	free(pairs);
	return 0;
fail:
	fprintf(stderr, "sqlite_rows: insert: %s\n", sqlite3_errmsg(db));
	return 1;
}
