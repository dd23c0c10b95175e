/*
 * store_pg.h - private to the PostgreSQL store (store_pg.c: connections,
 * lock, transactions; store_pg_schema.c: schema; store_pg_rows.c: rows in
 * and out; store_pg_sync.c: the sync thread's calls).
 */
#ifndef PAGEFS_META_STORE_PG_H
#define PAGEFS_META_STORE_PG_H

#include "meta/store.h"

#include <libpq-fe.h>
#include <pthread.h>
#include <stdint.h>

#define PG_STR_(x) #x
#define PG_STR(x) PG_STR_(x) /* a number macro as an SQL literal */

/* Prepared statements of the write connection. */
enum pg_stmt {
	PG_COMMIT_DEL,
	PG_COMMIT_PUT,
	PG_COMMIT_SET,
	PG_DELETE,
	PG_RENAME_DEL,
	PG_RENAME,
	PG_TOUCH,
	PG_RANK_PUT,
	PG_POOL_PUT,
	PG_POOL_DEL,
	PG_RANK_DEL,
	PG_SETTING,
	PG_GET_SETTING,
	PG_CHECKSUM,
	PG_POOL_SET,
	PG_POOL_RECHUNK,
	PG_POOL_CAP,
	PG_POOL_LIVE,
	PG_POOL_LOCK,
	PG_POOL_BUSY,
	PG_POOL_RETIRE,
	PG_RANK_LOCK,
	PG_RANK_USED,
	PG_STMT_COUNT
};

struct pg_store {
	struct store base; /* first: a struct store * points here */
	char *uri;         /* libpq URI, with any password: never logged */
	char *display;     /* the URI as messages show it */
	int power, read_only;

	/* The write connection: the opening thread, then only the journal's
	 * batch writer (one thread at a time). */
	PGconn *conn;
	uint8_t prepared[PG_STMT_COUNT];
	int locked;        /* holds the index's advisory lock (retaken on reconnect) */
	int exclusive;     /* ... exclusively (fsck); else shared, as a node */
	int64_t xid;       /* the open transaction's id */
	int64_t doubt_xid; /* a COMMIT whose outcome is not known yet, or 0 */
	/* pg_postmaster_start_time() of the server the write connection
	 * reached (read at each connect), and of the one the doubtful
	 * transaction ran on: a restart in between may have handed its id
	 * out again (store_pg.c, doubt_outcome). */
	char conn_started[64], doubt_started[64];
	int broken; /* memory and index may disagree: writes refused */

	pthread_mutex_t read_lock; /* protects rconn */
	PGconn *rconn;             /* page iteration (readdir, export) */

	/* Shared index (store_pg_sync.c): the sync thread's connection and
	 * the feed's position (every transaction below it has been read),
	 * which never passes feed_safe: the server has id feed_safe - 1 or a
	 * later one in the WAL it wrote out, so a crash of the server never
	 * hands out again an id below feed_safe (store_pg_sync.c, "The
	 * feed's position"). */
	PGconn *sconn;
	int64_t feed_from;
	int64_t feed_safe;
	uint64_t heartbeats;
	int64_t sconn_since; /* time(NULL) when sconn connected */
};

/* A handover request (pagefs_wants) counts while renewed within this. */
#define PG_WANT_FRESH "interval '3 seconds'"
/* (key, node id): held by a node's sync session. The key is the schema's:
 * two indexes in two schemas of one database have nodes of one id (their
 * node locks must not be one lock, or the second index's mount would
 * wait for the first's node forever). */
#define PG_NODE_LOCK_KEY "hashtext('pagefs-node:' || coalesce(current_schema(), ''))"
/* A pool's removal lock (one bigint key: the schema's hash, pool id):
 * commits and leases take it shared, a removal exclusively (pool.c). */
#define PG_POOL_KEY(pool)                                                                          \
	"((hashtext(coalesce(current_schema(), ''))::bigint << 32) | (" pool ")::bigint)"
#define PG_PAGE_ID_BLOCK (1ULL << 20)
#define PG_POOL_ID_BLOCK 64ULL
extern const struct store_sync_ops pg_sync_ops;

/* Parameters of one statement, binary except text. */
#define PG_MAX_ARGS 10
struct pg_args {
	int n;
	const char *val[PG_MAX_ARGS];
	int len[PG_MAX_ARGS];
	int fmt[PG_MAX_ARGS];
	uint64_t be[PG_MAX_ARGS];
};

void store_pg_arg_i64(struct pg_args *a, int64_t v);
void store_pg_arg_bytes(struct pg_args *a, const void *p, int len);
void store_pg_arg_text(struct pg_args *a, const char *s);
void store_pg_arg_null(struct pg_args *a);
/* A bigint (or int4) column of a binary result. */
int64_t store_pg_col_i64(const PGresult *res, int row, int col);

/* Runs prepared statement id on the write connection (preparing it
 * first on this connection). Returns 0 or a negative errno; *out (may
 * be NULL) gets the binary result, owned by the caller. */
int store_pg_run(struct pg_store *s, enum pg_stmt id, const struct pg_args *a, PGresult **out);
/* Runs a simple command on the write connection; 0 or a negative errno. */
int store_pg_exec(struct pg_store *s, const char *sql);
/* store_pg_schema.c: creates, checks or migrates the schema (err names
 * the fix). */
int store_pg_check_schema(struct pg_store *s, char *err, size_t errlen);
/* Maps a failed result (or connection) to a negative errno and logs it. */
int store_pg_error(PGconn *c, const PGresult *res, const char *what);
/* Connects with pagefs's defaults (timeouts, keepalives, application
 * name) under the URI's own settings. NULL only on out of memory. */
PGconn *store_pg_connect(struct pg_store *s);
/* Keeps *c, a connection of its own (sync, iteration), up: 0 if it was,
 * 1 if it was made again now (what: for the log), -EIO if it cannot be. */
int store_pg_keep_conn(struct pg_store *s, PGconn **c, const char *what);

/* store_pg_rows.c: the engine's row calls. */
int store_pg_load(struct store *base, const struct store_load_cb *cb, char *err, size_t errlen);
int store_pg_apply(struct store *base, struct rec *r);
int store_pg_iter_pages(struct store *base, uint32_t pool_id, uint64_t after, meta_page_cb cb,
                        void *arg);

#endif
