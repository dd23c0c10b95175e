/*
 * store_pg_sync.c - the calls of the sync thread on a shared PostgreSQL
 * index (see docs/DESIGN.md, "Several daemons on one PostgreSQL index"):
 * the change feed, heartbeats with acknowledgements and pins, reaping
 * dead nodes, and blocks of ids. One connection of its own (sconn), used
 * only by the sync thread.
 *
 * The feed reads the changes of every transaction below the current
 * xmin that it has not read yet: a transaction below xmin is over, so
 * none is skipped even when the order of the change sequence and of the
 * commits differ. It returns each page as the index holds it now, so the
 * order in which changes are applied does not matter.
 *
 * The feed's position. A crash of the server (pg_ctl restart -m
 * immediate, a killed postmaster, a power cut) hands out again every
 * transaction id above the last one in the WAL it had written out: a
 * transaction that wrote nothing but its own commit or rollback record
 * (txid_current() and nothing else, a rolled back batch) has its record
 * in the WAL buffers for up to wal_writer_delay, yet it is over, so xmin
 * passes it at once. A position (and an ack, which is the position) past
 * such an id would skip the changes of the new transaction that gets it
 * after the crash, forever; and other nodes, comparing their frees with
 * that ack, would reuse a slot this node still maps. So the position
 * never passes feed_safe, an id at most one above one the server has in
 * its WAL on disk: after a crash it hands out only ids above that one,
 * so none below the position. Known on disk: an id whose commit this
 * node saw return from a synchronous commit that wrote something (its
 * join, its heartbeats), and the id of any change row a node wrote
 * (nodes commit synchronously, and a synchronous commit is flushed before
 * it becomes visible). It costs no round trip, and a position held
 * back re-reads nearly nothing: it moves to one above the newest change
 * of a node read, or past the heartbeat's id (only rows of a writer that
 * is not a node, between the two, come again: harmless).
 */
#include "meta/log.h"
#include "meta/store_pg.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LEASE_S 10
#define LEASE_SECONDS PG_STR(LEASE_S)
#define REAP_SECONDS "8" /* lease_until - 8 s = the heartbeat was 2 s ago */

/* The sync connection, (re)made on demand. 0 or -EIO. */
static int sync_conn(struct pg_store *s)
{
	char sql[160];
	int rc = store_pg_keep_conn(s, &s->sconn, "connect (sync)");

	if (rc <= 0)
		return rc;
	/* A heartbeat's commit is on disk when it returns (feed_safe). */
	PQclear(PQexec(s->sconn, "SET synchronous_commit = on"));
	/* While this connection lives, the node's lock is held: a node whose
	 * lock is free has lost its sessions (died) and is reaped early. */
	snprintf(sql, sizeof(sql), "SELECT pg_advisory_lock(" PG_NODE_LOCK_KEY ", %u)",
	         s->base.node_id);
	PQclear(PQexec(s->sconn, sql));
	s->sconn_since = time(NULL);
	return 0;
}

static PGresult *sq(struct pg_store *s, const char *sql, const struct pg_args *a, int binary)
{
	static const struct pg_args none;

	if (!a)
		a = &none;
	return PQexecParams(s->sconn, sql, a->n, NULL, a->val, a->len, a->fmt, binary);
}

static int sq_ok(struct pg_store *s, PGresult *res, const char *what)
{
	ExecStatusType st = PQresultStatus(res);

	if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
		return 0;
	return store_pg_error(s->sconn, res, what);
}

/* Fills c->row from columns first.. of row i (id, pool, name, slot,
 * length, checksum, mtime, atime, gen; the id column is not read: the
 * caller set c->page_id). 0, or -1 for a name that cannot be a page's. */
static int page_row(PGresult *res, int i, int first, struct store_change *c)
{
	struct rec *r = &c->row;
	int n = PQgetlength(res, i, first + 2);

	if (n <= 0 || n > META_NAME_MAX)
		return -1;
	r->type = REC_COMMIT;
	r->page_id = c->page_id;
	r->pool_id = (uint32_t)store_pg_col_i64(res, i, first + 1);
	memcpy(r->name, PQgetvalue(res, i, first + 2), (size_t)n);
	r->name[n] = '\0';
	r->name_len = (uint16_t)n;
	r->slot = (uint64_t)store_pg_col_i64(res, i, first + 3);
	r->length = (uint64_t)store_pg_col_i64(res, i, first + 4);
	r->has_checksum = !PQgetisnull(res, i, first + 5);
	r->checksum = r->has_checksum ? (uint64_t)store_pg_col_i64(res, i, first + 5) : 0;
	r->mtime_ns = store_pg_col_i64(res, i, first + 6);
	r->atime_ns = store_pg_col_i64(res, i, first + 7);
	r->gen = gen_of_column(store_pg_col_i64(res, i, first + 8));
	r->version = version_of_column(store_pg_col_i64(res, i, first + 8));
	return 0;
}

static int pg_poll(struct store *base, int (*cb)(void *arg, const struct store_change *c),
                   void *arg)
{
	struct pg_store *s = (struct pg_store *)base;
	struct pg_args a = {0};
	struct store_change *c;
	int rc;

	if ((rc = sync_conn(s)) < 0)
		return rc;
	PGresult *res =
		sq(s, "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint", NULL, 1);
	if ((rc = sq_ok(s, res, "feed xmin")) < 0) {
		PQclear(res);
		return rc;
	}
	int64_t cur = store_pg_col_i64(res, 0, 0);
	PQclear(res);
	if (cur <= s->feed_from)
		return 0;
	store_pg_arg_i64(&a, s->feed_from);
	store_pg_arg_i64(&a, cur);
	res = sq(
		s,
		"SELECT c.node, c.xid::text::bigint, c.pool, c.page_id, c.freed_slot,"
		" p.id IS NOT NULL, p.pool, p.name, p.slot, p.length, p.checksum, p.mtime,"
		" p.atime, p.gen FROM pagefs_changes c LEFT JOIN pagefs_pages p ON p.id = c.page_id"
		" WHERE c.xid >= $1::bigint::text::xid8 AND c.xid < $2::bigint::text::xid8"
		" ORDER BY c.page_id IS NOT NULL, c.seq",
		&a, 1);
	if ((rc = sq_ok(s, res, "feed")) < 0) {
		PQclear(res);
		return rc;
	}
	if (!(c = calloc(1, sizeof(*c)))) {
		PQclear(res);
		return -ENOMEM;
	}
	for (int i = 0; i < PQntuples(res) && rc == 0; i++) {
		memset(c, 0, offsetof(struct store_change, row));
		c->node = (uint32_t)store_pg_col_i64(res, i, 0);
		c->xid = (uint64_t)store_pg_col_i64(res, i, 1);
		/* A node's change: committed synchronously, so on disk. */
		if (!PQgetisnull(res, i, 0) && (int64_t)c->xid >= s->feed_safe)
			s->feed_safe = (int64_t)c->xid + 1;
		c->pools = PQgetisnull(res, i, 3);
		c->pool_id = (uint32_t)store_pg_col_i64(res, i, 2);
		c->page_id = (uint64_t)store_pg_col_i64(res, i, 3);
		c->freed_slot = PQgetisnull(res, i, 4) ? -1 : store_pg_col_i64(res, i, 4);
		c->exists = PQgetvalue(res, i, 5)[0] == 1;
		if (c->exists && page_row(res, i, 5, c) < 0)
			continue; /* (columns 6..13: the row; page_row skips the id) */
		rc = cb(arg, c);
	}
	free(c);
	PQclear(res);
	/* Every transaction below cur is read, but the position stops at
	 * feed_safe: after a crash the ids from there on may come again. */
	if (rc == 0 && (cur < s->feed_safe ? cur : s->feed_safe) > s->feed_from)
		s->feed_from = cur < s->feed_safe ? cur : s->feed_safe;
	return rc;
}

static int pg_named(struct store *base, uint32_t pool_id, const char *const *names,
                    const size_t *lens, size_t n,
                    int (*cb)(void *arg, const struct store_change *c), void *arg)
{
	static const char hex[] = "0123456789abcdef";
	struct pg_store *s = (struct pg_store *)base;
	struct pg_args a = {0};
	size_t len = 3;
	int rc;

	if (!n)
		return 0;
	if ((rc = sync_conn(s)) < 0)
		return rc;
	for (size_t i = 0; i < n; i++)
		len += 2 * lens[i] + 1;
	/* '{6b6579,...}': hex needs no quoting in an array literal */
	char *arr = malloc(len), *w = arr;
	struct store_change *c = calloc(1, sizeof(*c));
	if (!arr || !c) {
		free(arr);
		free(c);
		return -ENOMEM;
	}
	*w++ = '{';
	for (size_t i = 0; i < n; i++) {
		if (i)
			*w++ = ',';
		for (size_t j = 0; j < lens[i]; j++) {
			*w++ = hex[(unsigned char)names[i][j] >> 4];
			*w++ = hex[(unsigned char)names[i][j] & 15];
		}
	}
	*w++ = '}';
	*w = '\0';
	store_pg_arg_i64(&a, pool_id);
	store_pg_arg_text(&a, arr);
	PGresult *res = sq(s,
	                   "SELECT id, pool, name, slot, length, checksum, mtime, atime, gen"
	                   " FROM pagefs_pages WHERE pool = $1::bigint AND name = ANY(ARRAY("
	                   "SELECT decode(x, 'hex') FROM unnest($2::text[]) x))",
	                   &a, 1);
	if ((rc = sq_ok(s, res, "names")) == 0)
		for (int i = 0; i < PQntuples(res) && rc == 0; i++) {
			memset(c, 0, offsetof(struct store_change, row));
			c->page_id = (uint64_t)store_pg_col_i64(res, i, 0);
			c->pool_id = pool_id;
			c->freed_slot = -1;
			c->exists = 1;
			if (page_row(res, i, 0, c) == 0)
				rc = cb(arg, c);
		}
	PQclear(res);
	free(arr);
	free(c);
	return rc;
}

static int pg_pools(struct store *base, const struct store_load_cb *cb)
{
	struct pg_store *s = (struct pg_store *)base;
	int rc, ret = 0;

	if ((rc = sync_conn(s)) < 0)
		return rc;
	PGresult *res = sq(s, "SELECT rank FROM pagefs_ranks", NULL, 1);
	if ((rc = sq_ok(s, res, "ranks")) == 0)
		for (int i = 0; i < PQntuples(res) && ret == 0; i++)
			ret = cb->rank(cb->arg, (int)store_pg_col_i64(res, i, 0));
	PQclear(res);
	if (rc < 0 || ret)
		return rc < 0 ? rc : ret;
	res = sq(s, "SELECT id,rank,ns,slot_size,capacity FROM pagefs_pools ORDER BY id", NULL, 1);
	if ((rc = sq_ok(s, res, "pools")) == 0) {
		for (int i = 0; i < PQntuples(res) && ret == 0; i++) {
			struct store_pool_row row = {0};
			row.id = (uint32_t)store_pg_col_i64(res, i, 0);
			row.rank = (uint16_t)store_pg_col_i64(res, i, 1);
			snprintf(row.ns, sizeof(row.ns), "%.*s", PQgetlength(res, i, 2),
			         PQgetvalue(res, i, 2));
			row.slot_size = (uint64_t)store_pg_col_i64(res, i, 3);
			int64_t cap = store_pg_col_i64(res, i, 4);
			row.retired = cap <= 0; /* being removed (pool.c) */
			row.capacity = cap > 0 ? (uint64_t)cap : 0;
			ret = cb->pool(cb->arg, &row);
		}
	}
	PQclear(res);
	return rc < 0 ? rc : ret;
}

/* Runs one statement of the heartbeat transaction. */
static int hb_exec(struct pg_store *s, const char *sql, const struct pg_args *a, PGresult **out)
{
	PGresult *res = sq(s, sql, a, 1);
	int rc = sq_ok(s, res, sql);

	if (rc == 0 && out)
		*out = res;
	else
		PQclear(res);
	return rc;
}

static int heartbeat_txn(struct pg_store *s, const uint64_t (*pins)[2], size_t npins,
                         struct store_peers *out, int64_t *xid)
{
	struct pg_args a = {0};
	PGresult *res = NULL;
	char *pools = NULL, *slots = NULL;
	int rc;

	store_pg_arg_i64(&a, s->base.node_id);
	store_pg_arg_i64(&a, s->feed_from);
	if ((rc = hb_exec(s,
	                  "UPDATE pagefs_nodes SET lease_until = now() + interval '" LEASE_SECONDS
	                  " seconds', acked = $2::bigint::text::xid8 WHERE id = $1"
	                  " RETURNING pg_current_xact_id()::text::bigint",
	                  &a, &res)) < 0)
		return rc;
	out->fenced = PQntuples(res) == 0;
	if (!out->fenced)
		*xid = store_pg_col_i64(res, 0, 0);
	PQclear(res);
	if (out->fenced)
		return 0;
	a.n = 1;
	if ((rc = hb_exec(s, "DELETE FROM pagefs_pins WHERE node = $1", &a, NULL)) < 0)
		return rc;
	if (npins) {
		/* Two arrays in text form: {p1,p2,...} {s1,s2,...}. */
		size_t cap = npins * 24 + 4;
		pools = malloc(cap);
		slots = malloc(cap);
		if (!pools || !slots) {
			free(pools);
			free(slots);
			return -ENOMEM;
		}
		size_t po = 0, so = 0;
		pools[po++] = '{';
		slots[so++] = '{';
		for (size_t i = 0; i < npins; i++) {
			po += (size_t)snprintf(pools + po, cap - po, "%s%llu", i ? "," : "",
			                       (unsigned long long)pins[i][0]);
			so += (size_t)snprintf(slots + so, cap - so, "%s%llu", i ? "," : "",
			                       (unsigned long long)pins[i][1]);
		}
		snprintf(pools + po, cap - po, "}");
		snprintf(slots + so, cap - so, "}");
		store_pg_arg_text(&a, pools);
		store_pg_arg_text(&a, slots);
		rc = hb_exec(s,
		             "INSERT INTO pagefs_pins(node, pool, slot) SELECT $1, p, s FROM"
		             " unnest($2::text::bigint[], $3::text::bigint[]) AS t(p, s)"
		             " ON CONFLICT DO NOTHING",
		             &a, NULL);
		free(pools);
		free(slots);
		if (rc < 0)
			return rc;
	}
	/* Reap nodes whose lease ran out, or whose last heartbeat is over 2 s
	 * old and whose sync session is gone (its lock is free): their chunks
	 * and pins go with them. Not in the first lease period of this
	 * session: after the server came back from an outage, the other nodes
	 * get that long to reconnect and renew before anyone counts them dead. */
	a.n = 1;
	if (time(NULL) - s->sconn_since >= LEASE_S) {
		rc = hb_exec(s,
		             "DELETE FROM pagefs_nodes WHERE lease_until < now() OR (id <> $1"
		             " AND lease_until < now() + interval '" REAP_SECONDS " seconds'"
		             " AND pg_try_advisory_xact_lock(" PG_NODE_LOCK_KEY ", id::int))",
		             &a, &res);
		if (rc < 0)
			return rc;
		if (atoi(PQcmdTuples(res)) > 0)
			log_warn("index %s: %s node(s) that stopped renewing their lease were "
			         "removed",
			         s->display, PQcmdTuples(res));
		PQclear(res);
	}
	if ((rc = hb_exec(s,
	                  "SELECT count(*), coalesce(min(acked), '0')::text::bigint"
	                  " FROM pagefs_nodes WHERE lease_until >= now()",
	                  NULL, &res)) < 0)
		return rc;
	out->live = (uint32_t)store_pg_col_i64(res, 0, 0);
	out->min_ack = (uint64_t)store_pg_col_i64(res, 0, 1);
	PQclear(res);
	a.n = 1;
	if ((rc = hb_exec(s, "SELECT pool, slot FROM pagefs_pins WHERE node <> $1", &a, &res)) < 0)
		return rc;
	out->npins = (size_t)PQntuples(res);
	out->pins = out->npins ? calloc(out->npins, sizeof(*out->pins)) : NULL;
	for (size_t i = 0; out->pins && i < out->npins; i++) {
		out->pins[i][0] = (uint64_t)store_pg_col_i64(res, (int)i, 0);
		out->pins[i][1] = (uint64_t)store_pg_col_i64(res, (int)i, 1);
	}
	if (out->npins && !out->pins)
		rc = -ENOMEM;
	PQclear(res);
	/* Pools where another node asked for a chunk: what this node holds
	 * there, and how many nodes hold or want chunks of it. */
	if (rc == 0 &&
	    (rc = hb_exec(
		     s,
		     "SELECT w.pool, (SELECT count(*) FROM pagefs_chunks c WHERE c.pool = w.pool"
		     "  AND c.node = $1),"
		     " (SELECT count(*) FROM (SELECT node FROM pagefs_chunks c WHERE c.pool ="
		     "  w.pool UNION SELECT node FROM pagefs_wants x WHERE x.pool = w.pool"
		     "  AND x.since > now() - " PG_WANT_FRESH ") AS u)"
		     " FROM (SELECT DISTINCT pool FROM pagefs_wants WHERE node <> $1"
		     "  AND since > now() - " PG_WANT_FRESH ") AS w",
		     &a, &res)) == 0) {
		out->nwants = (size_t)PQntuples(res);
		out->wants = out->nwants ? calloc(out->nwants, sizeof(*out->wants)) : NULL;
		for (size_t i = 0; out->wants && i < out->nwants; i++)
			for (int j = 0; j < 3; j++)
				out->wants[i][j] = (uint64_t)store_pg_col_i64(res, (int)i, j);
		if (out->nwants && !out->wants)
			rc = -ENOMEM;
		PQclear(res);
	}
	/* A pool removal whose node died between retiring the row and
	 * deleting it (pool.c): the row keeps the name; this node takes it
	 * over (another that takes it later finds it taken, unless this one
	 * died too) and finishes it (sync.c). */
	if (rc == 0 && s->heartbeats % 8 == 0) {
		PGresult *orph = NULL;
		a.n = 1;
		rc = hb_exec(s,
		             "UPDATE pagefs_pools SET capacity = -$1::bigint WHERE capacity <= 0"
		             " AND capacity <> -$1::bigint AND NOT EXISTS(SELECT 1 FROM"
		             " pagefs_nodes n WHERE n.id = -pagefs_pools.capacity)"
		             " RETURNING id, rank, ns",
		             &a, &orph);
		int n = rc == 0 ? PQntuples(orph) : 0;
		if (n > 0 && !(out->orphans = calloc((size_t)n, sizeof(*out->orphans))))
			rc = -ENOMEM;
		for (int i = 0; out->orphans && i < n; i++) {
			struct store_pool_row *o = &out->orphans[i];
			o->id = (uint32_t)store_pg_col_i64(orph, i, 0);
			o->rank = (uint16_t)store_pg_col_i64(orph, i, 1);
			snprintf(o->ns, sizeof(o->ns), "%.*s", PQgetlength(orph, i, 2),
			         PQgetvalue(orph, i, 2));
			o->retired = 1;
			out->norphans++;
		}
		PQclear(orph);
	}
	/* Changes every node has seen are history: keep the table small. */
	if (rc == 0 && ++s->heartbeats % 64 == 0) {
		struct pg_args old = {0};
		store_pg_arg_i64(&old, (int64_t)out->min_ack);
		rc = hb_exec(s, "DELETE FROM pagefs_changes WHERE xid < $1::bigint::text::xid8",
		             &old, NULL);
	}
	return rc;
}

static int pg_heartbeat(struct store *base, const uint64_t (*pins)[2], size_t npins,
                        struct store_peers *out)
{
	struct pg_store *s = (struct pg_store *)base;
	PGresult *res = NULL;
	int64_t xid = 0;
	int rc;

	memset(out, 0, sizeof(*out));
	if ((rc = sync_conn(s)) < 0)
		return rc;
	if ((rc = hb_exec(s, "BEGIN", NULL, NULL)) < 0)
		return rc;
	rc = heartbeat_txn(s, pins, npins, out, &xid);
	if (rc == 0 && (rc = hb_exec(s, "COMMIT", NULL, &res)) == 0) {
		/* Committed (a write, synchronously): its id is on disk. */
		if (strcmp(PQcmdStatus(res), "COMMIT") == 0 && xid >= s->feed_safe)
			s->feed_safe = xid + 1;
		PQclear(res);
	}
	if (rc < 0) {
		if (PQstatus(s->sconn) == CONNECTION_OK)
			PQclear(PQexec(s->sconn, "ROLLBACK"));
		free(out->pins);
		free(out->wants);
		out->pins = NULL;
		out->wants = NULL;
		out->npins = out->nwants = 0;
		free(out->orphans);
		out->orphans = NULL;
		out->norphans = 0;
	}
	return rc;
}

static int pg_ids(struct store *base, int pool, uint64_t *first, uint64_t *count)
{
	struct pg_store *s = (struct pg_store *)base;
	int rc;

	if ((rc = sync_conn(s)) < 0)
		return rc;
	PGresult *res = sq(
		s, pool ? "SELECT nextval('pagefs_pool_ids')" : "SELECT nextval('pagefs_page_ids')",
		NULL, 1);
	if ((rc = sq_ok(s, res, "nextval")) == 0) {
		*first = (uint64_t)store_pg_col_i64(res, 0, 0);
		*count = pool ? PG_POOL_ID_BLOCK : PG_PAGE_ID_BLOCK;
	}
	PQclear(res);
	return rc;
}

const struct store_sync_ops pg_sync_ops = {
	.poll = pg_poll,
	.named = pg_named,
	.pools = pg_pools,
	.heartbeat = pg_heartbeat,
	.ids = pg_ids,
};
