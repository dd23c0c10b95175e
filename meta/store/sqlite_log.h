/*
 * sqlite_log.h - the page log of an SQLite index (store_sqlite_log.c),
 * private to meta/store/.
 *
 * A bulk record (the key protocol's confirm, an adoption) is written as
 * one row of table page_log per run of consecutive page ids: a compact
 * blob of the run's pages instead of a row per page. A page stays in its
 * blob until it is deleted or replaced, or until anything else changes it
 * (rename, touch, checksum, rewrite): then store_sqlite.c moves it to a
 * row of pages first ("materialises" it) and changes the row. A blob that
 * lost pages is written again with the pages it still has, at the end of
 * the transaction; one that has none is deleted. So page_log always holds
 * exactly the pages that are in no row.
 *
 * The log keeps in memory, for every blob, its pool, its id range and a
 * bit per id still in it (a page is in the log when its bit is set). The
 * changes a transaction makes to that are undone on rollback (an undo
 * list, with a mark per savepoint). Every call runs under the store's
 * db_lock.
 */
#ifndef PAGEFS_META_STORE_SQLITE_LOG_H
#define PAGEFS_META_STORE_SQLITE_LOG_H

#include "meta/store.h"

#include <sqlite3.h>
#include <stddef.h>
#include <stdint.h>

struct store_log;

/* The table, created with the schema of a new index (schema 4). */
#define PLOG_SCHEMA                                                                                \
	"CREATE TABLE page_log(seq INTEGER PRIMARY KEY, pool INTEGER NOT NULL,"                    \
	" lo INTEGER NOT NULL, span INTEGER NOT NULL, n INTEGER NOT NULL, body BLOB NOT NULL);"

/* A log over db's page_log table; NULL when out of memory. */
struct store_log *store_log_new(sqlite3 *db);
void store_log_free(struct store_log *l);

/* Reads every blob: builds the in-memory runs and, cb not NULL, passes
 * each page to cb->page. A blob that does not decode or whose checksum
 * does not match fails the load with a message naming fsck, unless
 * `damaged` is set: then it is reported there and left out. */
int store_log_load(struct store_log *l, const struct store_load_cb *cb,
                   int (*damaged)(void *arg, int64_t seq, const char *why), char *err,
                   size_t errlen);
/* Learns the runs of a log never loaded (a tool's store: a writer or a
 * listing needs them), else nothing. 0 or -errno. */
int store_log_ready(struct store_log *l);

/* 1 if page id is in the log. */
int store_log_has(const struct store_log *l, uint64_t id);
/* Page id of the log as a row (the caller checked store_log_has). 0 or -errno. */
int store_log_get(struct store_log *l, uint64_t id, struct bulk_row *out);
/* Writes the pages of bulk b as blobs: one per run of consecutive ids of
 * one pool, of at most PLOG_RUN_MAX pages; reads each page once. */
int store_log_add(struct store_log *l, const struct bulk *b);
/* Takes page id out of the log: 1, or 0 if it was not in it. */
int store_log_remove(struct store_log *l, uint64_t id);
/* Deletes blob seq whole (fsck's repair of a damaged one). */
int store_log_drop(struct store_log *l, int64_t seq);

/* Transactions: store_log_flush writes the blobs that lost pages again (before
 * COMMIT); store_log_done forgets the undo list after a commit; store_log_mark and
 * store_log_undo (to a mark; 0: all) follow savepoints and rollbacks. */
int store_log_flush(struct store_log *l);
void store_log_done(struct store_log *l);
size_t store_log_mark(const struct store_log *l);
void store_log_undo(struct store_log *l, size_t mark);

/* The pages of pool with id > after, in id order, one at a time:
 * store_log_next gives 1 and the page, 0 at the end, or -errno. */
struct store_log_cursor {
	struct store_log *l;
	uint32_t pool;
	uint64_t after;
	size_t run;            /* next run to read */
	struct bulk_row *rows; /* the current run's pages (malloc'd) */
	size_t nrows, at;
};
void store_log_cursor_init(struct store_log_cursor *c, struct store_log *l, uint32_t pool,
                           uint64_t after);
int store_log_next(struct store_log_cursor *c, struct bulk_row *out);
void store_log_cursor_free(struct store_log_cursor *c);

#endif
