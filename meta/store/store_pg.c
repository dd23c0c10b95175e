/*
 * store_pg.c - the shared store: one PostgreSQL database (or schema)
 * through libpq. Connections, the index lock and joining as a node, and
 * the journal's transactions. Schema: store_pg_schema.c; rows:
 * store_pg_rows.c; the sync thread's calls: store_pg_sync.c.
 *
 * One write connection (the journal's batch writer after open) and one
 * read connection for page iteration behind its own mutex, as with
 * SQLite. Tables are prefixed pagefs_ so the index can share a database
 * with other applications; two indexes on one server use two databases,
 * or two schemas chosen with ?options=-csearch_path%3DNAME in the URI.
 *
 * Durability: --durability process sets synchronous_commit=off (a
 * committed transaction is in the server's WAL buffers: it survives a
 * crash of pagefs, not of the server), power sets it on. A node of a
 * shared index always sets it on (pg_session).
 *
 * A lost connection fails the transaction in flight with -EIO; the next
 * begin reconnects (and retakes the lock). A connection known lost
 * before COMMIT was sent rolled its transaction back: no question to
 * ask. A COMMIT cut off on the wire has an unknown outcome: commit asks
 * over a new connection for up to PG_RESOLVE_MS (doubt_outcome). Still
 * unknown, the batch fails and the doubt is resolved at the next
 * reconnect; if it turns out to have committed, memory no longer mirrors
 * the index and the store refuses further writes until a remount reloads
 * it (logged).
 *
 * txid_status() answers for a transaction id, and a server that crashed
 * hands out again the ids it had not written to its WAL: after a restart
 * (pg_postmaster_start_time() is not the one the write connection was
 * made on) "committed" may
 * be another transaction's. Then the doubtful one counts as committed
 * only if the change rows its triggers wrote carry this node and its id;
 * an id the restarted server has not reached yet, or that another
 * transaction holds now, was never committed.
 */
#include "meta/store_pg.h"
#include "meta/counters.h"
#include "meta/log.h"

#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Advisory lock keys: (PG_LOCK_CLASS, hash of the schema). */
#define PG_LOCK_CLASS 1885824627 /* "pgfs" */
#define PG_RESOLVE_MS 3000
/* The outcome of a transaction id that cannot be told any more. */
#define PG_UNKNOWABLE (-EUCLEAN)

static const char *const stmt_sql[PG_STMT_COUNT] = {
	[PG_COMMIT_DEL] = "DELETE FROM pagefs_pages WHERE pool=$1 AND name=$2 AND id<>$3",
	/* Only into a pool whose row exists and is not retired (pool.c; the
	 * record's pool lock, taken before, orders it with a removal). */
	[PG_COMMIT_PUT] = "INSERT INTO pagefs_pages(id,pool,name,slot,length,checksum,mtime,atime,"
			  "gen) SELECT $1::bigint,$2::bigint,$3::bytea,$4::bigint,$5::bigint,"
			  "$6::bigint,$7::bigint,$8::bigint,$9::bigint WHERE EXISTS(SELECT 1 FROM"
			  " pagefs_pools WHERE id=$2::bigint AND capacity>0)"
			  " ON CONFLICT(id) DO UPDATE SET"
			  " name=excluded.name, slot=excluded.slot, length=excluded.length,"
			  " checksum=excluded.checksum, mtime=excluded.mtime, atime=excluded.atime,"
			  " gen=excluded.gen",
	[PG_COMMIT_SET] = "UPDATE pagefs_pages SET slot=$2, length=$3, checksum=$4, mtime=$5,"
			  " atime=$6, gen=$7 WHERE id=$1 RETURNING name",
	[PG_DELETE] = "DELETE FROM pagefs_pages WHERE id=$1",
	[PG_RENAME_DEL] = "DELETE FROM pagefs_pages WHERE pool=$1 AND name=$2 AND id<>$3"
			  " AND EXISTS(SELECT 1 FROM pagefs_pages WHERE id=$3)",
	[PG_RENAME] = "UPDATE pagefs_pages SET name=$2 WHERE id=$1",
	[PG_TOUCH] = "UPDATE pagefs_pages SET atime=$2 WHERE id=$1 AND atime<$2",
	/* The update locks the row: a rank removal waits for the pool made
	 * in it (and then sees it), or comes first and this makes it again. */
	[PG_RANK_PUT] = "INSERT INTO pagefs_ranks(rank) VALUES($1) ON CONFLICT(rank) DO UPDATE"
			" SET rank=excluded.rank",
	[PG_POOL_PUT] = "INSERT INTO pagefs_pools(id,rank,ns,slot_size,capacity)"
			" VALUES($1,$2,$3,$4,$5) ON CONFLICT(id) DO UPDATE SET"
			" slot_size=excluded.slot_size, capacity=excluded.capacity",
	[PG_POOL_DEL] = "DELETE FROM pagefs_pools WHERE id=$1",
	[PG_RANK_DEL] = "DELETE FROM pagefs_ranks WHERE rank=$1",
	[PG_SETTING] = "INSERT INTO pagefs_settings(key,value) VALUES($1,$2)"
		       " ON CONFLICT(key) DO UPDATE SET value=excluded.value",
	[PG_GET_SETTING] = "SELECT value FROM pagefs_settings WHERE key=$1",
	[PG_CHECKSUM] = "UPDATE pagefs_pages SET checksum=$3 WHERE id=$1 AND slot=$2"
			" AND checksum IS NULL",
	/* Removing a pool on a shared index (pool.c): a retired row has
	 * capacity -node (the node removing it). */
	[PG_POOL_SET] =
		"UPDATE pagefs_pools SET slot_size=$2, capacity=$3 WHERE id=$1 AND capacity>0",
	/* A new capacity that changes the pool's chunk size: only while no
	 * node holds a chunk of it and no page is in it (under the pool's
	 * lock, taken exclusively: no lease or commit runs meanwhile). */
	[PG_POOL_RECHUNK] =
		"UPDATE pagefs_pools SET slot_size=$2, capacity=$3 WHERE id=$1 AND capacity>0"
		" AND NOT EXISTS (SELECT 1 FROM pagefs_chunks WHERE pool=$1)"
		" AND NOT EXISTS (SELECT 1 FROM pagefs_pages WHERE pool=$1)",
	/* A lease sized for this capacity (a node that has not yet seen a
	 * new capacity leases again once it has). */
	[PG_POOL_CAP] = "SELECT 1 FROM pagefs_pools WHERE id=$1 AND capacity=$2",
	[PG_POOL_LIVE] = "SELECT 1 FROM pagefs_pools WHERE id=$1 AND capacity>0",
	[PG_POOL_LOCK] = "SELECT 1 FROM pagefs_pools WHERE id=$1 AND capacity>0 FOR UPDATE",
	/* Pages in it; or another node may still read it: pins, or frees in
	 * it that a live node has not acknowledged (it may still list the
	 * page). This node's own readers are checked in memory. */
	[PG_POOL_BUSY] =
		"SELECT EXISTS(SELECT 1 FROM pagefs_pages WHERE pool=$1::bigint),"
		" EXISTS(SELECT 1 FROM pagefs_pins WHERE pool=$1::bigint AND node<>$2::bigint)"
		" OR EXISTS(SELECT 1 FROM pagefs_changes WHERE pool=$1::bigint AND"
		" freed_slot IS NOT NULL AND xid >= (SELECT min(acked) FROM pagefs_nodes"
		" WHERE lease_until >= now() AND id<>$2::bigint))",
	[PG_POOL_RETIRE] = "WITH c AS (DELETE FROM pagefs_chunks WHERE pool=$1::bigint)"
			   " UPDATE pagefs_pools SET capacity=-$2::bigint WHERE id=$1::bigint",
	[PG_RANK_LOCK] = "SELECT 1 FROM pagefs_ranks WHERE rank=$1 FOR UPDATE",
	[PG_RANK_USED] = "SELECT EXISTS(SELECT 1 FROM pagefs_pools WHERE rank=$1)",
};

/* ---- arguments and results ---- */

void store_pg_arg_i64(struct pg_args *a, int64_t v)
{
	a->be[a->n] = htobe64((uint64_t)v);
	a->val[a->n] = (const char *)&a->be[a->n];
	a->len[a->n] = 8;
	a->fmt[a->n++] = 1;
}

void store_pg_arg_bytes(struct pg_args *a, const void *p, int len)
{
	a->val[a->n] = p;
	a->len[a->n] = len;
	a->fmt[a->n++] = 1;
}

void store_pg_arg_text(struct pg_args *a, const char *str)
{
	a->val[a->n] = str;
	a->len[a->n] = 0;
	a->fmt[a->n++] = 0;
}

void store_pg_arg_null(struct pg_args *a)
{
	a->val[a->n] = NULL;
	a->len[a->n] = 0;
	a->fmt[a->n++] = 1;
}

int64_t store_pg_col_i64(const PGresult *res, int row, int col)
{
	const char *v = PQgetvalue(res, row, col);
	uint64_t u = 0;

	if (PQgetlength(res, row, col) == 8) {
		memcpy(&u, v, 8);
		return (int64_t)be64toh(u);
	}
	if (PQgetlength(res, row, col) == 4) {
		uint32_t w;
		memcpy(&w, v, 4);
		return (int32_t)be32toh(w);
	}
	return 0;
}

/* SQLSTATE classes to errno. */
static int state_errno(const char *state)
{
	if (!state)
		return -EIO;
	if (strncmp(state, "23", 2) == 0)
		return -EEXIST; /* integrity: unique, foreign key, check */
	if (strcmp(state, "53100") == 0)
		return -ENOSPC;
	if (strcmp(state, "53200") == 0)
		return -ENOMEM;
	if (strcmp(state, "25006") == 0)
		return -EROFS;
	if (strcmp(state, "42501") == 0 || strncmp(state, "28", 2) == 0)
		return -EACCES;
	if (strcmp(state, "40P01") == 0 || strcmp(state, "40001") == 0)
		return -EDEADLK; /* another transaction won: run it again (store_pg_apply) */
	return -EIO;             /* connection (08), shutdown (57P), anything else */
}

int store_pg_error(PGconn *c, const PGresult *res, const char *what)
{
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	const char *msg = res ? PQresultErrorMessage(res) : PQerrorMessage(c);

	if (!msg || !*msg)
		msg = PQerrorMessage(c);
	log_warn("index (PostgreSQL) %.80s failed: %.*s", what, (int)strcspn(msg, "\n"), msg);
	if (PQstatus(c) != CONNECTION_OK)
		return -EIO;
	return state_errno(state);
}

/* ---- connections ---- */

/* Server notices go to the log, not to stderr. */
static void notice(void *arg, const char *msg)
{
	(void)arg;
	log_debug("PostgreSQL: %.*s", (int)strcspn(msg, "\n"), msg);
}

PGconn *store_pg_connect(struct pg_store *s)
{
	char app[64], host[40] = "";

	gethostname(host, sizeof(host) - 1);
	snprintf(app, sizeof(app), "pagefs pid %d on %s", (int)getpid(), host);
	/* Later keywords win: the URI (dbname, expanded) overrides these. */
	const char *keys[] = {"connect_timeout",
	                      "keepalives_idle",
	                      "keepalives_interval",
	                      "keepalives_count",
	                      "tcp_user_timeout",
	                      "application_name",
	                      "dbname",
	                      NULL};
	const char *vals[] = {"5", "10", "3", "3", "15000", app, s->uri, NULL};
	PGconn *c = PQconnectdbParams(keys, vals, 1);

	if (c)
		PQsetNoticeProcessor(c, notice, NULL);
	return c;
}

int store_pg_keep_conn(struct pg_store *s, PGconn **c, const char *what)
{
	if (*c && PQstatus(*c) == CONNECTION_OK)
		return 0;
	PQfinish(*c);
	*c = store_pg_connect(s);
	if (!*c || PQstatus(*c) != CONNECTION_OK) {
		store_pg_error(*c, NULL, what);
		PQfinish(*c);
		*c = NULL;
		return -EIO;
	}
	return 1;
}

/* Runs a simple command; 0 or a negative errno. */
int store_pg_exec(struct pg_store *s, const char *sql)
{
	PGresult *res = PQexec(s->conn, sql);
	int rc = 0;

	if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK)
		rc = store_pg_error(s->conn, res, sql);
	PQclear(res);
	return rc;
}

/* pg_postmaster_start_time() as text into out ("" when it cannot be read). */
static void server_started(PGconn *c, char *out, size_t len)
{
	PGresult *res = PQexec(c, "SELECT pg_postmaster_start_time()::text");

	out[0] = '\0';
	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
		snprintf(out, len, "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
}

/* Session settings, on every (re)connect. */
static int pg_session(struct pg_store *s)
{
	char sql[64];
	/* A node of a shared index commits synchronously whatever its
	 * --durability: other nodes act on what it committed (a lease, a
	 * drop, a page), and a server crash that forgot it would leave a
	 * slot with two owners. */
	int rc = store_pg_exec(s, s->power || s->base.node_id ? "SET synchronous_commit = on"
	                                                      : "SET synchronous_commit = off");

	/* The server this connection reached: a connection does not outlive
	 * a restart, so its transactions all ran on this one (doubt_outcome). */
	if (rc == 0)
		server_started(s->conn, s->conn_started, sizeof(s->conn_started));
	/* The node the change feed's triggers name. */
	if (rc == 0 && s->base.node_id) {
		snprintf(sql, sizeof(sql), "SET pagefs.node = '%u'", s->base.node_id);
		rc = store_pg_exec(s, sql);
	}
	return rc;
}

int store_pg_run(struct pg_store *s, enum pg_stmt id, const struct pg_args *a, PGresult **out)
{
	char name[16];
	PGresult *res;
	int rc = 0;

	snprintf(name, sizeof(name), "pagefs%d", (int)id);
	if (!s->prepared[id]) {
		res = PQprepare(s->conn, name, stmt_sql[id], 0, NULL);
		if (PQresultStatus(res) != PGRES_COMMAND_OK)
			rc = store_pg_error(s->conn, res, "prepare");
		PQclear(res);
		if (rc < 0)
			return rc;
		s->prepared[id] = 1;
	}
	res = PQexecPrepared(s->conn, name, a->n, a->val, a->len, a->fmt, 1);
	if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK) {
		rc = store_pg_error(s->conn, res, stmt_sql[id]);
		PQclear(res);
		return rc;
	}
	if (out)
		*out = res;
	else
		PQclear(res);
	return 0;
}

/* Asks (over the current connection) whether transaction xid committed:
 * 1 yes, 0 no (aborted), -EAGAIN still running, -EIO unknown. */
static int xid_outcome(struct pg_store *s, int64_t xid)
{
	char sql[96];
	int rc = -EIO;

	snprintf(sql, sizeof(sql), "SELECT txid_status(%lld)", (long long)xid);
	PGresult *res = PQexec(s->conn, sql);
	const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
	    !PQgetisnull(res, 0, 0)) {
		const char *v = PQgetvalue(res, 0, 0);
		rc = strcmp(v, "committed") == 0 ? 1 : strcmp(v, "aborted") == 0 ? 0 : -EAGAIN;
	} else if (state && strcmp(state, "22023") == 0) {
		rc = -ERANGE; /* "transaction ID ... is in the future" */
	}
	PQclear(res);
	return rc;
}

/* Whether change rows of transaction xid carry this node (1), only other
 * nodes (0), or none exist (-1); -EIO when the query fails. */
static int own_changes(struct pg_store *s, int64_t xid)
{
	char sql[160];
	int rc = -EIO;

	snprintf(sql, sizeof(sql),
	         "SELECT coalesce(bool_or(node = %u), false), count(*) FROM pagefs_changes"
	         " WHERE xid = '%lld'::xid8",
	         s->base.node_id, (long long)xid);
	PGresult *res = PQexec(s->conn, sql);
	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
		rc = strcmp(PQgetvalue(res, 0, 0), "t") == 0 ? 1
		     : atoll(PQgetvalue(res, 0, 1)) > 0      ? 0
		                                             : -1;
	PQclear(res);
	return rc;
}

/* What became of the doubtful transaction s->doubt_xid, asked over
 * s->conn: 1 committed, 0 rolled back, -EAGAIN not known yet (ask again),
 * PG_UNKNOWABLE when it cannot be told (the server restarted and the
 * transaction left no row of this node), -EIO on an error. */
static int doubt_outcome(struct pg_store *s)
{
	char now[64];
	int rc = xid_outcome(s, s->doubt_xid);

	server_started(s->conn, now, sizeof(now));
	if (!now[0])
		return -EAGAIN;
	if (strcmp(now, s->doubt_started) == 0)
		return rc == -ERANGE ? -EIO : rc; /* the same server: its answer holds */
	/* Restarted: whatever holds the id now, ours committed only if its
	 * commit reached the WAL, and then its change rows are there. */
	if (rc == -ERANGE || rc == -EAGAIN || rc == 0)
		return 0; /* not reached, or another transaction's since: ours never committed */
	if (rc < 0)
		return rc;
	if (!s->base.node_id)
		return PG_UNKNOWABLE; /* (a tool's rows name no node to tell them by) */
	int own = own_changes(s, s->doubt_xid);
	return own == 1 ? 1 : own == 0 ? 0 : own == -1 ? PG_UNKNOWABLE : own;
}

/* The index lock: shared by the daemons (nodes), exclusive for fsck. */
static int take_lock(struct pg_store *s, int *got)
{
	char sql[160];

	snprintf(sql, sizeof(sql),
	         "SELECT pg_try_advisory_lock%s(%d, hashtext(coalesce(current_schema(), '')))",
	         s->exclusive ? "" : "_shared", PG_LOCK_CLASS);
	PGresult *res = PQexec(s->conn, sql);
	int rc = 0;

	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		rc = store_pg_error(s->conn, res, "pg_try_advisory_lock");
	else
		*got = PQgetvalue(res, 0, 0)[0] == 't';
	PQclear(res);
	return rc;
}

/* A new write connection after a loss; resolves a doubtful commit. */
static int reconnect(struct pg_store *s)
{
	int got = 0, rc;

	PQfinish(s->conn);
	memset(s->prepared, 0, sizeof(s->prepared));
	s->conn = store_pg_connect(s);
	if (!s->conn || PQstatus(s->conn) != CONNECTION_OK)
		return store_pg_error(s->conn, NULL, "reconnect");
	if ((rc = pg_session(s)) < 0)
		return rc;
	if (s->locked) {
		if ((rc = take_lock(s, &got)) < 0)
			return rc;
		if (!got) {
			log_error("index %s: another pagefs daemon took the index while this one "
			          "was disconnected; this daemon writes nothing more (unmount it)",
			          s->display);
			s->broken = 1;
			return -EIO;
		}
	}
	log_warn("index %s: reconnected to PostgreSQL", s->display);
	metrics_reconnect();
	if (s->doubt_xid) {
		rc = doubt_outcome(s);
		if (rc == 1 || rc == PG_UNKNOWABLE) {
			log_error("index %s: a transaction reported as failed %s; memory "
			          "no longer mirrors the index: writes are refused until a "
			          "remount ('pagefs umount', then mount again)",
			          s->display,
			          rc == 1 ? "did commit"
			                  : "may have committed (the server restarted)");
			s->broken = 1;
			return -EIO;
		}
		if (rc < 0)
			return -EIO;
		s->doubt_xid = 0;
	}
	return 0;
}

static int ensure_conn(struct pg_store *s)
{
	if (s->broken)
		return -EIO;
	if (s->conn && PQstatus(s->conn) == CONNECTION_OK && !s->doubt_xid)
		return 0;
	return reconnect(s);
}

/* ---- the engine's calls ---- */

/* The planner's count of page rows (autovacuum keeps it near; 0 before
 * the table was first analyzed), a sixteenth high. */
static uint64_t pg_estimate(struct store *base)
{
	struct pg_store *s = (struct pg_store *)base;
	uint64_t n = 0;

	if (ensure_conn(s) < 0)
		return 0;
	PGresult *res = PQexec(s->conn, "SELECT greatest(reltuples, 0)::bigint FROM pg_class "
	                                "WHERE oid = to_regclass('pagefs_pages')");
	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
		n = strtoull(PQgetvalue(res, 0, 0), NULL, 10);
	PQclear(res);
	return n + n / 16;
}

static void pg_close(struct store *base)
{
	struct pg_store *s = (struct pg_store *)base;

	/* A node leaves: its chunks and pins go with its row. */
	if (s->base.node_id && s->conn && PQstatus(s->conn) == CONNECTION_OK && !s->broken) {
		char sql[96];
		snprintf(sql, sizeof(sql), "DELETE FROM pagefs_nodes WHERE id = %u",
		         s->base.node_id);
		PQclear(PQexec(s->conn, sql));
	}
	PQfinish(s->conn); /* ends the session: releases the advisory lock */
	PQfinish(s->rconn);
	PQfinish(s->sconn);
	pthread_mutex_destroy(&s->read_lock);
	free(s->uri);
	free(s->display);
	free(s);
}

/* Names the live nodes (or "none") for a refusal message. */
static void list_nodes(struct pg_store *s, char *buf, size_t len)
{
	PGresult *res = PQexec(s->conn, "SELECT string_agg(format('node %s: pid %s on %s since %s',"
	                                " id, pid, host, date_trunc('second', started)), '; ')"
	                                " FROM pagefs_nodes WHERE lease_until >= now()");

	snprintf(buf, len, "%s",
	         PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
	                         !PQgetisnull(res, 0, 0)
	                 ? PQgetvalue(res, 0, 0)
	                 : "none alive");
	PQclear(res);
}

/* Joins the index as a node: a row in pagefs_nodes with a lease the sync
 * thread renews, its id in every change it makes. */
static int join(struct pg_store *s, char *err, size_t errlen)
{
	char host[64] = "", sql[256];
	int rc;

	gethostname(host, sizeof(host) - 1);
	struct pg_args a = {0};
	store_pg_arg_text(&a, host);
	store_pg_arg_i64(&a, getpid());
	if ((rc = store_pg_exec(s, "SET synchronous_commit = on")) < 0) { /* see pg_session */
		snprintf(err, errlen, "index %s: cannot set up the session", s->display);
		return rc;
	}
	PGresult *res = PQexecParams(s->conn,
	                             "INSERT INTO pagefs_nodes(host, pid, lease_until, acked)"
	                             " VALUES($1, $2, now() + interval '10 seconds',"
	                             " pg_snapshot_xmin(pg_current_snapshot())) RETURNING id,"
	                             " pg_current_xact_id()::text::bigint",
	                             a.n, NULL, a.val, a.len, a.fmt, 1);
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
		rc = store_pg_error(s->conn, res, "join");
		snprintf(err, errlen, "index %s: cannot join as a node: %s", s->display,
		         PQresultErrorMessage(res));
		err[strcspn(err, "\n")] = '\0';
		PQclear(res);
		return rc;
	}
	s->base.node_id = (uint32_t)store_pg_col_i64(res, 0, 0);
	/* Committed synchronously (a write): the server keeps this id across
	 * a crash, so the change feed may start after it (store_pg_sync.c). */
	s->feed_safe = store_pg_col_i64(res, 0, 1) + 1;
	PQclear(res);
	snprintf(sql, sizeof(sql), "SET pagefs.node = '%u'", s->base.node_id);
	if ((rc = store_pg_exec(s, sql)) < 0)
		snprintf(err, errlen, "index %s: cannot set up the session", s->display);
	s->base.sync = &pg_sync_ops;
	log_info("index %s: joined as node %u", s->display, s->base.node_id);
	return rc;
}

static int pg_lock(struct store *base, int exclusive, char *err, size_t errlen)
{
	struct pg_store *s = (struct pg_store *)base;
	char nodes[768];
	int got = 0, rc;

	if (s->locked)
		return 0;
	s->exclusive = exclusive;
	if ((rc = take_lock(s, &got)) < 0) {
		snprintf(err, errlen, "index %s: cannot take the index lock", s->display);
		return rc;
	}
	if (!got) {
		list_nodes(s, nodes, sizeof(nodes));
		if (exclusive)
			snprintf(err, errlen,
			         "index %s is in use by pagefs daemons (%s); unmount them first "
			         "('pagefs umount')",
			         s->display, nodes);
		else
			snprintf(
				err, errlen,
				"index %s is held by an offline pagefs command (fsck); wait for it "
				"to finish",
				s->display);
		return -EBUSY;
	}
	s->locked = 1;
	return exclusive ? 0 : join(s, err, errlen);
}

static int pg_get_setting(struct store *base, const char *key, char *buf, size_t len)
{
	struct pg_store *s = (struct pg_store *)base;
	struct pg_args a = {0};
	PGresult *res = NULL;
	int rc;

	store_pg_arg_text(&a, key);
	if ((rc = store_pg_run(s, PG_GET_SETTING, &a, &res)) < 0)
		return rc;
	if (PQntuples(res) == 1)
		snprintf(buf, len, "%.*s", PQgetlength(res, 0, 0), PQgetvalue(res, 0, 0));
	else
		rc = -ENOENT;
	PQclear(res);
	return rc;
}

static int pg_set_setting(struct store *base, const char *key, const char *value)
{
	struct pg_args a = {0};

	store_pg_arg_text(&a, key);
	store_pg_arg_text(&a, value);
	return store_pg_run((struct pg_store *)base, PG_SETTING, &a, NULL);
}

static int pg_begin(struct store *base)
{
	struct pg_store *s = (struct pg_store *)base;
	int rc = -EIO;

	/* A connection that died while idle fails BEGIN: nothing was sent
	 * for this batch yet, so reconnect and try once more. */
	char sql[192];

	/* A node's transaction first reads its own row FOR SHARE: once its
	 * lease ran out and another node removed it, it is fenced off. */
	snprintf(sql, sizeof(sql),
	         "BEGIN; SELECT txid_current(), (SELECT count(*) FROM (SELECT 1 FROM"
	         " pagefs_nodes WHERE id = %u FOR SHARE) AS me)",
	         s->base.node_id);
	for (int attempt = 0; attempt < 2; attempt++) {
		if ((rc = ensure_conn(s)) < 0)
			return rc;
		PGresult *res =
			PQexec(s->conn, s->base.node_id ? sql : "BEGIN; SELECT txid_current()");
		if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
			s->xid = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
			int fenced = s->base.node_id && atoi(PQgetvalue(res, 0, 1)) == 0;
			PQclear(res);
			if (fenced) {
				log_error("index %s: node %u's lease ran out and another node "
				          "removed "
				          "it; this daemon writes nothing more (remount it)",
				          s->display, s->base.node_id);
				s->broken = 1;
				return -EIO;
			}
			return 0;
		}
		const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
		/* The server ended the session (a restart, pg_terminate_backend:
		 * 57P01 to 57P03) or the link (class 08): libpq may still call
		 * the connection OK until its next call. */
		int gone =
			PQstatus(s->conn) != CONNECTION_OK ||
			(state && (strncmp(state, "08", 2) == 0 || strncmp(state, "57P0", 4) == 0));
		rc = store_pg_error(s->conn, res, "BEGIN");
		PQclear(res);
		if (!gone)
			return rc;
		PQfinish(s->conn); /* ensure_conn makes a new one */
		s->conn = NULL;
	}
	return rc;
}

/* A COMMIT cut off on the wire: asks a new connection what happened,
 * for up to PG_RESOLVE_MS. 0 committed, -EIO otherwise. */
static int resolve_commit(struct pg_store *s)
{
	struct timespec pause = {0, 100L * 1000 * 1000};

	s->doubt_xid = s->xid;
	memcpy(s->doubt_started, s->conn_started, sizeof(s->doubt_started));
	for (int waited = 0; waited < PG_RESOLVE_MS; waited += 100) {
		PQfinish(s->conn);
		memset(s->prepared, 0, sizeof(s->prepared));
		s->conn = store_pg_connect(s);
		if (s->conn && PQstatus(s->conn) == CONNECTION_OK) {
			int rc = doubt_outcome(s);
			if (rc == PG_UNKNOWABLE)
				break; /* (the reconnect says so and refuses writes) */
			if (rc == 1 || rc == 0) {
				/* Known: the next begin retakes the lock and session. */
				s->doubt_xid = 0;
				PQfinish(s->conn);
				s->conn = NULL;
				log_warn("index %s: the interrupted commit %s", s->display,
				         rc ? "had committed" : "was rolled back");
				return rc == 1 ? 0 : -EIO;
			}
		}
		nanosleep(&pause, NULL);
	}
	log_error("index %s: the outcome of an interrupted commit is unknown; it is checked "
	          "again at the next reconnect",
	          s->display);
	return -EIO;
}

static int pg_commit(struct store *base)
{
	struct pg_store *s = (struct pg_store *)base;

	/* Lost before COMMIT was sent: the server rolled the transaction
	 * back (a commit needs the COMMIT), whatever txid_status() may say
	 * of its id later. The next begin reconnects. */
	if (PQstatus(s->conn) != CONNECTION_OK) {
		log_warn("index %s: the connection was lost before COMMIT: the batch was rolled "
		         "back",
		         s->display);
		return -EIO;
	}
	PGresult *res = PQexec(s->conn, "COMMIT");
	int rc = 0;

	if (PQresultStatus(res) == PGRES_COMMAND_OK) {
		/* COMMIT of a failed transaction reports ROLLBACK. */
		if (strcmp(PQcmdStatus(res), "COMMIT") != 0)
			rc = -EIO;
	} else if (PQstatus(s->conn) != CONNECTION_OK) {
		store_pg_error(s->conn, res, "COMMIT");
		rc = resolve_commit(s);
	} else {
		rc = store_pg_error(s->conn, res, "COMMIT");
	}
	PQclear(res);
	return rc;
}

static void pg_rollback(struct store *base)
{
	struct pg_store *s = (struct pg_store *)base;

	if (s->conn && PQstatus(s->conn) == CONNECTION_OK &&
	    PQtransactionStatus(s->conn) != PQTRANS_IDLE)
		PQclear(PQexec(s->conn, "ROLLBACK"));
}

static const struct store_ops pg_ops = {
	.close = pg_close,
	.lock = pg_lock,
	.get_setting = pg_get_setting,
	.set_setting = pg_set_setting,
	.load = store_pg_load,
	.estimate = pg_estimate,
	.begin = pg_begin,
	.apply = store_pg_apply,
	.commit = pg_commit,
	.rollback = pg_rollback,
	.iter_pages = store_pg_iter_pages,
};

int store_pg_open(const char *uri, const char *display, int power, int read_only,
                  struct store **out, char *err, size_t errlen)
{
	struct pg_store *s = calloc(1, sizeof(*s));
	int rc;

	if (!s || !(s->uri = strdup(uri)) || !(s->display = strdup(display))) {
		if (s)
			free(s->uri);
		free(s);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	s->base.ops = &pg_ops;
	s->base.engine = STORE_PG;
	s->power = power;
	s->read_only = read_only;
	pthread_mutex_init(&s->read_lock, NULL);
	s->conn = store_pg_connect(s);
	if (!s->conn || PQstatus(s->conn) != CONNECTION_OK) {
		const char *msg = s->conn ? PQerrorMessage(s->conn) : "out of memory";
		snprintf(err, errlen,
		         "cannot connect to index %s: %.*s; check that the server runs and the "
		         "URI (host, port, user, database)",
		         display, (int)strcspn(msg, "\n"), msg);
		rc = -ECONNREFUSED;
		goto fail;
	}
	if ((rc = pg_session(s)) < 0) {
		snprintf(err, errlen, "index %s: cannot set up the session", display);
		goto fail;
	}
	if ((rc = store_pg_check_schema(s, err, errlen)) < 0)
		goto fail;
	*out = &s->base;
	return 0;
fail:
	pg_close(&s->base);
	return rc;
}
