/*
 * store_pg_rows.c - rows of the PostgreSQL store: loading the index,
 * applying the journal's records, iterating a pool's pages.
 *
 * The statements do exactly what store_sqlite.c's do (apply.c mirrors
 * them in memory). Each record runs in its own savepoint so one bad
 * record fails alone. Loading streams rows (single-row mode), so a large
 * index is never held twice in memory; iteration reads a pool in id
 * order in chunks of PG_ITER_CHUNK rows on its own connection.
 */
#include "meta/log.h"
#include "meta/store_pg.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PG_ITER_CHUNK 256

/* ---- load ---- */

/* Streams the rows of a query to row_cb; 0, row_cb's error, or -EIO. */
static int stream(struct pg_store *s, const char *sql, int (*row_cb)(void *, const PGresult *),
                  void *arg, char *err, size_t errlen)
{
	PGresult *res;
	int ret = 0, failed = 0;

	if (!PQsendQueryParams(s->conn, sql, 0, NULL, NULL, NULL, NULL, 1) ||
	    !PQsetSingleRowMode(s->conn)) {
		snprintf(err, errlen, "cannot read index %s: %s", s->display,
		         PQerrorMessage(s->conn));
		err[strcspn(err, "\n")] = '\0';
		while ((res = PQgetResult(s->conn)))
			PQclear(res);
		return -EIO;
	}
	while ((res = PQgetResult(s->conn))) {
		ExecStatusType st = PQresultStatus(res);
		if (st == PGRES_SINGLE_TUPLE && ret == 0)
			ret = row_cb(arg, res);
		else if (st != PGRES_SINGLE_TUPLE && st != PGRES_TUPLES_OK && !failed) {
			failed = 1;
			snprintf(err, errlen, "cannot read index %s (%s); run 'pagefs fsck' on it",
			         s->display, PQresultErrorMessage(res));
			err[strcspn(err, "\n")] = '\0';
		}
		PQclear(res);
	}
	return ret ? ret : failed ? -EIO : 0;
}

struct load_ctx {
	const struct store_load_cb *cb;
	struct rec *row;
};

static int load_rank(void *arg, const PGresult *res)
{
	struct load_ctx *l = arg;

	return l->cb->rank(l->cb->arg, (int)store_pg_col_i64(res, 0, 0));
}

static int load_pool(void *arg, const PGresult *res)
{
	struct load_ctx *l = arg;
	struct store_pool_row row = {0};

	row.id = (uint32_t)store_pg_col_i64(res, 0, 0);
	row.rank = (uint16_t)store_pg_col_i64(res, 0, 1);
	snprintf(row.ns, sizeof(row.ns), "%.*s", PQgetlength(res, 0, 2), PQgetvalue(res, 0, 2));
	row.slot_size = (uint64_t)store_pg_col_i64(res, 0, 3);
	int64_t cap = store_pg_col_i64(res, 0, 4);
	row.retired = cap <= 0; /* being removed (pool.c) */
	row.capacity = cap > 0 ? (uint64_t)cap : 0;
	return l->cb->pool(l->cb->arg, &row);
}

static int load_page(void *arg, const PGresult *res)
{
	struct load_ctx *l = arg;
	struct rec *row = l->row;
	int n = PQgetlength(res, 0, 2);
	/* A name of a bad length goes on truncated, name_len saying it does
	 * not fit: the loader refuses it, fsck reports and drops it. */
	size_t copy = n < 0 ? 0 : n > META_NAME_MAX ? META_NAME_MAX : (size_t)n;

	row->page_id = (uint64_t)store_pg_col_i64(res, 0, 0);
	row->pool_id = (uint32_t)store_pg_col_i64(res, 0, 1);
	memcpy(row->name, PQgetvalue(res, 0, 2), copy);
	row->name[copy] = '\0';
	row->name_len = (uint16_t)(n > META_NAME_MAX ? META_NAME_MAX + 1 : (int)copy);
	row->slot = (uint64_t)store_pg_col_i64(res, 0, 3);
	row->length = (uint64_t)store_pg_col_i64(res, 0, 4);
	row->has_checksum = !PQgetisnull(res, 0, 5);
	row->checksum = row->has_checksum ? (uint64_t)store_pg_col_i64(res, 0, 5) : 0;
	row->mtime_ns = store_pg_col_i64(res, 0, 6);
	row->atime_ns = store_pg_col_i64(res, 0, 7);
	row->gen = gen_of_column(store_pg_col_i64(res, 0, 8));
	row->version = version_of_column(store_pg_col_i64(res, 0, 8));
	return l->cb->page(l->cb->arg, row);
}

int store_pg_load(struct store *base, const struct store_load_cb *cb, char *err, size_t errlen)
{
	struct pg_store *s = (struct pg_store *)base;
	struct load_ctx l = {cb, calloc(1, sizeof(struct rec))};
	int rc;

	if (!l.row)
		return -ENOMEM;
	/* One snapshot for all of it; its xmin is where the change feed
	 * starts (changes seen twice are harmless: the feed applies rows),
	 * or the id after the node's join if that is lower: the feed's
	 * position never passes an id the server may hand out again after a
	 * crash (store_pg_sync.c). */
	PGresult *res = PQexec(s->conn, "BEGIN ISOLATION LEVEL REPEATABLE READ;"
	                                " SELECT pg_snapshot_xmin(pg_current_snapshot())::text");
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
		snprintf(err, errlen, "cannot read index %s: %s", s->display,
		         PQresultErrorMessage(res));
		err[strcspn(err, "\n")] = '\0';
		PQclear(res);
		PQclear(PQexec(s->conn, "ROLLBACK"));
		free(l.row);
		return -EIO;
	}
	s->feed_from = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	if (s->base.node_id && s->feed_from > s->feed_safe)
		s->feed_from = s->feed_safe;
	PQclear(res);
	rc = stream(s, "SELECT rank FROM pagefs_ranks", load_rank, &l, err, errlen);
	if (rc == 0)
		rc = stream(s, "SELECT id,rank,ns,slot_size,capacity FROM pagefs_pools ORDER BY id",
		            load_pool, &l, err, errlen);
	if (rc == 0)
		rc = stream(s,
		            "SELECT id,pool,name,slot,length,checksum,mtime,atime,gen"
		            " FROM pagefs_pages ORDER BY atime, id",
		            load_page, &l, err, errlen);
	PQclear(PQexec(s->conn, rc == 0 ? "COMMIT" : "ROLLBACK"));
	free(l.row);
	return rc;
}

/* ---- records ---- */

/* What a commit changes: slot, length, checksum, mtime, atime, gen (the
 * epoch and the version: gen_column). */
static void args_version(struct pg_args *a, const struct rec *r)
{
	store_pg_arg_i64(a, (int64_t)r->slot);
	store_pg_arg_i64(a, (int64_t)r->length);
	if (r->has_checksum)
		store_pg_arg_i64(a, (int64_t)r->checksum);
	else
		store_pg_arg_null(a);
	store_pg_arg_i64(a, r->mtime_ns);
	store_pg_arg_i64(a, r->atime_ns);
	store_pg_arg_i64(a, gen_column(r->gen, r->version));
}

static void args_page(struct pg_args *a, const struct rec *r)
{
	store_pg_arg_i64(a, (int64_t)r->page_id);
	store_pg_arg_i64(a, r->pool_id);
	store_pg_arg_bytes(a, r->name, r->name_len);
	args_version(a, r); /* $4 .. $9 */
}

/* Runs a statement whose zero rows mean the pool is gone: -ENOENT. */
static int run_rows(struct pg_store *s, enum pg_stmt id, const struct pg_args *a)
{
	PGresult *res;
	int rc = store_pg_run(s, id, a, &res);

	if (rc < 0)
		return rc;
	rc = atoi(PQcmdTuples(res)) > 0 ? 0 : -ENOENT;
	PQclear(res);
	return rc;
}

/* A query's first row, column col, as a boolean (binary results). */
static int run_flag(struct pg_store *s, enum pg_stmt id, const struct pg_args *a, int cols,
                    int *out)
{
	PGresult *res;
	int rc = store_pg_run(s, id, a, &res);

	if (rc < 0)
		return rc;
	for (int c = 0; c < cols; c++)
		out[c] = PQntuples(res) > 0 && PQnfields(res) > c && !PQgetisnull(res, 0, c) &&
		         PQgetvalue(res, 0, c)[0] != 0;
	rc = PQntuples(res);
	PQclear(res);
	return rc;
}

/* Shared index, removing an empty pool (pool.c): with the pool's lock
 * held exclusively (store_pg_apply), so that every commit into it came first
 * and is seen, or comes after and sees the pool retired, checks it and
 * retires it. Its row is locked too, against a concurrent change. */
static int apply_retire(struct pg_store *s, const struct rec *r)
{
	struct pg_args a = {0};
	int busy[2], rc;

	store_pg_arg_i64(&a, r->pool_id);
	if ((rc = run_flag(s, PG_POOL_LOCK, &a, 0, busy)) <= 0)
		return rc < 0 ? rc : -ENOENT; /* retired or removed by another node */
	store_pg_arg_i64(&a, s->base.node_id);
	if ((rc = run_flag(s, PG_POOL_BUSY, &a, 2, busy)) < 0)
		return rc;
	if (busy[0])
		return -ENOTEMPTY; /* another node committed a page in it */
	if (busy[1])
		return -EAGAIN;
	return run_rows(s, PG_POOL_RETIRE, &a);
}

/* Shared index, removing a rank: only while no pool (retired ones too)
 * is in it; the lock waits for a pool being made in it (PG_RANK_PUT). */
static int apply_rank_del(struct pg_store *s, const struct rec *r)
{
	struct pg_args a = {0};
	int used = 0, rc;

	store_pg_arg_i64(&a, r->rank);
	if ((rc = run_flag(s, PG_RANK_LOCK, &a, 0, &used)) <= 0)
		return rc < 0 ? rc : -ENOENT;
	if ((rc = run_flag(s, PG_RANK_USED, &a, 1, &used)) < 0)
		return rc;
	if (used)
		return -ENOTEMPTY;
	return store_pg_run(s, PG_RANK_DEL, &a, NULL);
}

static int run_pool_name_id(struct pg_store *s, enum pg_stmt id, uint32_t pool, const char *name,
                            int len, uint64_t page_id)
{
	struct pg_args a = {0};

	store_pg_arg_i64(&a, pool);
	store_pg_arg_bytes(&a, name, len);
	store_pg_arg_i64(&a, (int64_t)page_id);
	return store_pg_run(s, id, &a, NULL);
}

static int run_ids(struct pg_store *s, enum pg_stmt id, int nargs, int64_t x, int64_t y)
{
	struct pg_args a = {0};

	store_pg_arg_i64(&a, x);
	if (nargs > 1)
		store_pg_arg_i64(&a, y);
	return store_pg_run(s, id, &a, NULL);
}

/* REC_DROP: deletes the page's row. A mirror behind the index may have
 * chosen it at a slot it no longer has (another node rewrote it in place
 * elsewhere, or removed it) while another page's row holds that slot now
 * (a chunk just leased, whose last holder freed the slot and wrote there
 * again): then -EEXIST, so that apply.c keeps the slot taken instead of
 * handing another page's bytes to a writer. */
static int apply_drop(struct pg_store *s, const struct rec *r)
{
	struct pg_args a = {0};
	int rc;

	store_pg_arg_i64(&a, (int64_t)r->page_id);
	PGresult *res =
		PQexecParams(s->conn, "DELETE FROM pagefs_pages WHERE id = $1 RETURNING slot", a.n,
	                     NULL, a.val, a.len, a.fmt, 0);
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		rc = store_pg_error(s->conn, res, "drop");
		PQclear(res);
		return rc;
	}
	int same = PQntuples(res) == 1 && strtoull(PQgetvalue(res, 0, 0), NULL, 10) == r->drop_slot;
	PQclear(res);
	if (same || !s->base.node_id)
		return 0;
	a.n = 0;
	store_pg_arg_i64(&a, r->pool_id);
	store_pg_arg_i64(&a, (int64_t)r->drop_slot);
	res = PQexecParams(
		s->conn,
		"SELECT id FROM pagefs_pages WHERE pool = $1::bigint AND slot = $2::bigint", a.n,
		NULL, a.val, a.len, a.fmt, 1);
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		rc = store_pg_error(s->conn, res, "drop");
		PQclear(res);
		return rc;
	}
	int taken = PQntuples(res) > 0;
	PQclear(res);
	if (!taken)
		return 0;
	log_warn("index %s: page %llu was dropped here at slot %llu of pool %u, which another "
	         "page holds now (the mirror was behind the index): the slot stays taken",
	         s->display, (unsigned long long)r->page_id, (unsigned long long)r->drop_slot,
	         r->pool_id);
	return -EEXIST;
}

/* REC_BULK in chunks of PG_BULK_ROWS pages: per chunk, one DELETE of the
 * other rows of their names and one INSERT, the columns passed as arrays
 * in text form (names in hex). The rows are what one PG_COMMIT_DEL and
 * PG_COMMIT_PUT per page in list order leave (a name twice in a chunk:
 * the last page of it). The record's savepoint makes it all or nothing. */
#define PG_BULK_ROWS 1024
#define PG_BULK_COLS 9

/* A growing text buffer: the arrays' text form. */
struct tbuf {
	char *p;
	size_t len, cap;
	int failed; /* out of memory */
};

/* Room for need more bytes and a NUL; 0, or 0 with failed set. */
static int tb_room(struct tbuf *b, size_t need)
{
	if (b->failed)
		return 0;
	if (b->len + need + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->len + need + 1)
			cap *= 2;
		char *n = realloc(b->p, cap);
		if (!n) {
			b->failed = 1;
			return 0;
		}
		b->p = n;
		b->cap = cap;
	}
	return 1;
}

static void tb_str(struct tbuf *b, const char *str)
{
	size_t n = strlen(str);

	if (tb_room(b, n)) {
		memcpy(b->p + b->len, str, n + 1);
		b->len += n;
	}
}

static void tb_i64(struct tbuf *b, int64_t v)
{
	if (tb_room(b, 24))
		b->len += (size_t)snprintf(b->p + b->len, 24, "%lld", (long long)v);
}

static void tb_hex(struct tbuf *b, const void *bytes, size_t n)
{
	static const char digits[] = "0123456789abcdef";
	const unsigned char *h = bytes;

	if (!tb_room(b, 2 * n))
		return;
	for (size_t i = 0; i < n; i++) {
		b->p[b->len++] = digits[h[i] >> 4];
		b->p[b->len++] = digits[h[i] & 15];
	}
	b->p[b->len] = '\0';
}

/* Runs one statement of a bulk record over the columns' arrays in a. */
static int bulk_exec(struct pg_store *s, const char *sql, const struct pg_args *a, const char *what)
{
	PGresult *res = PQexecParams(s->conn, sql, a->n, NULL, a->val, a->len, a->fmt, 1);
	int rc = PQresultStatus(res) == PGRES_COMMAND_OK ? 0 : store_pg_error(s->conn, res, what);

	PQclear(res);
	return rc;
}

static int bulk_chunk(struct pg_store *s, const struct bulk *b, size_t first, size_t n)
{
	struct tbuf col[PG_BULK_COLS] = {0};
	struct pg_args a = {0};
	int rc = 0;

	for (int c = 0; c < PG_BULK_COLS; c++)
		tb_str(&col[c], "{");
	for (size_t i = 0; i < n; i++) {
		struct bulk_row p;
		b->row(b, first + i, &p);
		int64_t v[PG_BULK_COLS] = {(int64_t)p.id,   (int64_t)p.pool_id, 0,
		                           (int64_t)p.slot, (int64_t)p.length,  (int64_t)p.checksum,
		                           p.mtime_ns,      p.atime_ns,         p.gen};
		for (int c = 0; c < PG_BULK_COLS; c++) {
			if (i)
				tb_str(&col[c], ",");
			if (c == 2)
				tb_hex(&col[c], p.name, p.name_len);
			else if (c == 5 && !p.has_checksum)
				tb_str(&col[c], "NULL");
			else
				tb_i64(&col[c], v[c]);
		}
	}
	for (int c = 0; c < PG_BULK_COLS; c++) {
		tb_str(&col[c], "}");
		if (col[c].failed)
			rc = -ENOMEM;
	}
	if (rc == 0) {
		for (int c = 0; c < 3; c++)
			store_pg_arg_text(&a, col[c].p);
		/* LATERAL: one index probe per name, whatever the planner
		 * guesses of the arrays' length. */
		rc = bulk_exec(s,
		               "DELETE FROM pagefs_pages WHERE id IN (SELECT q.id FROM"
		               " unnest($1::text::bigint[], $2::text::bigint[], $3::text::text[])"
		               " AS t(id, pool, name), LATERAL (SELECT id FROM pagefs_pages p"
		               " WHERE p.pool = t.pool AND p.name = decode(t.name, 'hex')"
		               " AND p.id <> t.id) AS q)",
		               &a, "bulk delete");
	}
	if (rc == 0) {
		for (int c = 3; c < PG_BULK_COLS; c++)
			store_pg_arg_text(&a, col[c].p);
		rc = bulk_exec(
			s,
			"INSERT INTO "
			"pagefs_pages(id,pool,name,slot,length,checksum,mtime,atime,gen)"
			" SELECT DISTINCT ON (pool, name) id, pool, decode(name, 'hex'), slot, "
			"length,"
			" checksum, mtime, atime, gen FROM unnest($1::text::bigint[],"
			" $2::text::bigint[], $3::text::text[], $4::text::bigint[], "
			"$5::text::bigint[],"
			" $6::text::bigint[], $7::text::bigint[], $8::text::bigint[], "
			"$9::text::bigint[])"
			" WITH ORDINALITY AS t(id, pool, name, slot, length, checksum, mtime, "
			"atime, gen,"
			" ord) ORDER BY pool, name, ord DESC ON CONFLICT(id) DO UPDATE SET"
			" name=excluded.name, slot=excluded.slot, length=excluded.length,"
			" checksum=excluded.checksum, mtime=excluded.mtime, atime=excluded.atime",
			&a, "bulk insert");
	}
	for (int c = 0; c < PG_BULK_COLS; c++)
		free(col[c].p);
	return rc;
}

/* Takes the pool's removal lock, shared (a commit, lease or bulk
 * confirm) or exclusive (a removal), for the rest of the transaction;
 * before: SQL sent in the same round trip ("SAVEPOINT rec; " or "").
 * The statements that follow see the pool's row as it is once any
 * removal that held the lock has committed; a removal waits for every
 * transaction that holds it shared, then sees what they wrote. An
 * advisory lock writes nothing (a row lock would, at every commit). */
static int pool_lock(struct pg_store *s, const char *before, uint32_t pool, int exclusive)
{
	char sql[256];

	snprintf(sql, sizeof(sql), "%sSELECT pg_advisory_xact_lock%s(" PG_POOL_KEY("%u") ")",
	         before, exclusive ? "" : "_shared", pool);
	PGresult *res = PQexec(s->conn, sql);
	int rc = PQresultStatus(res) == PGRES_TUPLES_OK ? 0 : store_pg_error(s->conn, res, sql);

	PQclear(res);
	return rc;
}

static int apply_bulk(struct pg_store *s, const struct rec *r)
{
	const struct bulk *b = r->bulk;
	int rc = 0;
	uint32_t prev_pool = 0; /* pool ids start at 1 */

	/* The pools' removal locks first (see pool_lock), then each pool
	 * must still be live: a removal that committed before the lock was
	 * granted is seen by this later statement (-ENOENT). */
	for (size_t i = 0; i < b->n && rc == 0 && s->base.node_id; i++) {
		struct bulk_row row;
		b->row(b, i, &row);
		uint32_t pool = row.pool_id;
		if (pool == prev_pool)
			continue;
		prev_pool = pool;
		struct pg_args a = {0};
		int live = 0;
		store_pg_arg_i64(&a, pool);
		if ((rc = pool_lock(s, "", pool, 0)) == 0 &&
		    (rc = run_flag(s, PG_POOL_LIVE, &a, 0, &live)) >= 0)
			rc = rc > 0 ? 0 : -ENOENT; /* retired or removed by another node */
	}
	for (size_t i = 0; i < b->n && rc == 0; i += PG_BULK_ROWS) {
		size_t n = b->n - i < PG_BULK_ROWS ? b->n - i : PG_BULK_ROWS;
		rc = bulk_chunk(s, b, i, n);
		if (rc == 0 && b->progress)
			b->progress(b->arg, i + n, b->n);
	}
	return rc;
}

/* Runs a query of the lease on the write connection (binary results). */
static PGresult *lease_query(struct pg_store *s, const char *sql, const struct pg_args *a)
{
	PGresult *res = PQexecParams(s->conn, sql, a->n, NULL, a->val, a->len, a->fmt, 1);

	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		store_pg_error(s->conn, res, "chunk lease");
		PQclear(res);
		return NULL;
	}
	return res;
}

/* REC_LEASE found no chunk: asks (r->ask) for a handover when this node holds
 * fewer chunks of the pool than its fair share (all chunks over the
 * nodes that hold or want some) while another holds more. LEASE_ASKED,
 * or -ENOSPC: nobody is to hand one over. */
static int ask_handover(struct pg_store *s, const struct rec *r, int64_t nchunks)
{
	struct pg_args a = {0};
	PGresult *res;

	if (!r->ask)
		return -ENOSPC;
	store_pg_arg_i64(&a, r->pool_id);
	store_pg_arg_i64(&a, s->base.node_id);
	res = lease_query(
		s,
		"WITH h AS (SELECT node, count(*) AS n FROM pagefs_chunks"
		"  WHERE pool = $1::bigint GROUP BY node)"
		" SELECT coalesce((SELECT n FROM h WHERE node = $2::bigint), 0),"
		" (SELECT count(*) FROM (SELECT node FROM h UNION SELECT node FROM"
		"  pagefs_wants WHERE pool = $1::bigint AND since > now() - " PG_WANT_FRESH
		"  UNION SELECT $2::bigint) AS u),"
		" coalesce((SELECT max(n) FROM h WHERE node <> $2::bigint), 0)",
		&a);
	if (!res)
		return -EIO;
	int64_t mine = store_pg_col_i64(res, 0, 0), nodes = store_pg_col_i64(res, 0, 1);
	int64_t most = store_pg_col_i64(res, 0, 2);
	PQclear(res);
	int64_t fair = nodes > 0 ? (nchunks + nodes - 1) / nodes : nchunks;
	if (mine >= fair || most <= fair)
		return -ENOSPC;
	res = lease_query(s,
	                  "INSERT INTO pagefs_wants(node, pool) VALUES ($2::bigint, $1::bigint)"
	                  " ON CONFLICT (node, pool) DO UPDATE SET since = now() RETURNING 1",
	                  &a);
	if (!res)
		return -EIO;
	PQclear(res);
	return LEASE_ASKED;
}

/* REC_LEASE: takes the lowest chunk of the pool that no node holds and
 * that has a free slot, else the unheld chunk of the least recently used
 * page (LEASE_FULL: the leaser evicts in it; only when r->ask, i.e. it
 * may evict), and reports its used slots
 * and those still in a grace period. When every chunk is held:
 * ask_handover. -EAGAIN: other nodes took the candidates first. */
static int apply_lease(struct pg_store *s, struct rec *r)
{
	struct pg_args a = {0}, f = {0};
	int64_t k = (int64_t)r->chunk_slots, first;
	PGresult *res;
	int full = 0;

	if (!s->base.node_id || k <= 0)
		return -EINVAL;
	/* Not in a pool being removed (store_pg_apply took its lock). */
	store_pg_arg_i64(&a, r->pool_id);
	int live = 0, rc = run_flag(s, PG_POOL_LIVE, &a, 0, &live);
	if (rc <= 0)
		return rc < 0 ? rc : -ENOENT;
	store_pg_arg_i64(&a, (int64_t)r->capacity_slots);
	if ((rc = run_flag(s, PG_POOL_CAP, &a, 0, &live)) <= 0)
		return rc < 0 ? rc : -EAGAIN; /* resized: chunks of another size now */
	a.n = 0;
	int64_t nchunks = (int64_t)((r->capacity_slots + (uint64_t)k - 1) / (uint64_t)k);
	store_pg_arg_i64(&a, r->pool_id);
	store_pg_arg_i64(&a, s->base.node_id);
	store_pg_arg_i64(&a, nchunks);
	store_pg_arg_i64(&a, k);
	store_pg_arg_i64(&a, (int64_t)r->capacity_slots);
	/* After the chunk this node leased last (the chunks below it are
	 * mostly its own, or were full), else at a place of its own: nodes
	 * start looking at different places, so they seldom collide. */
	uint64_t from = r->lease_from > 0 && r->lease_from < (uint64_t)nchunks
	                        ? r->lease_from
	                        : (uint64_t)s->base.node_id * 7919u % (uint64_t)nchunks;
	store_pg_arg_i64(&a, (int64_t)from);
	store_pg_arg_i64(&f, r->pool_id);
	store_pg_arg_i64(&f, s->base.node_id);
	store_pg_arg_i64(&f, k);
	/* A collision with another node's lease of the same chunk waits for
	 * its commit and inserts nothing: the next statement sees it taken. */
	for (int attempt = 0;; attempt++) {
		res = lease_query(
			s,
			"WITH cand AS (SELECT c FROM (SELECT generate_series($6::bigint, "
			"$3::bigint - 1)"
			" UNION ALL SELECT generate_series(0, $6::bigint - 1)) AS s(c)"
			" WHERE NOT EXISTS (SELECT 1 FROM pagefs_chunks h WHERE h.pool = $1::bigint"
			"  AND h.chunk = c)"
			" AND (SELECT count(*) FROM pagefs_pages g WHERE g.pool = $1::bigint"
			"  AND g.slot >= c * $4::bigint AND g.slot < c * $4::bigint + $4::bigint)"
			"  < least($4::bigint, $5::bigint - c * $4::bigint)"
			/* No ORDER BY: the scan stops at the first chunk that fits. */
			" LIMIT 1),"
			" ins AS (INSERT INTO pagefs_chunks(pool, chunk, node)"
			"  SELECT $1::bigint, c, $2::bigint FROM cand ON CONFLICT DO NOTHING"
			"  RETURNING chunk)"
			" SELECT (SELECT c FROM cand), (SELECT chunk FROM ins)",
			&a);
		if (!res)
			return -EIO;
		full = 0;
		if (PQgetisnull(res, 0, 0) && r->ask) {
			/* Every unheld chunk is full (a departed node left them
			 * so): the one of the page every node used least lately. */
			PQclear(res);
			full = 1;
			res = lease_query(
				s,
				"WITH cand AS (SELECT g.slot / $3::bigint AS c FROM pagefs_pages g"
				"  WHERE g.pool = $1::bigint AND NOT EXISTS (SELECT 1 FROM"
				"  pagefs_chunks h WHERE h.pool = $1::bigint AND h.chunk = g.slot /"
				"  $3::bigint) ORDER BY g.atime, g.id LIMIT 1),"
				" ins AS (INSERT INTO pagefs_chunks(pool, chunk, node)"
				"  SELECT $1::bigint, c, $2::bigint FROM cand ON CONFLICT DO "
				"NOTHING"
				"  RETURNING chunk)"
				" SELECT (SELECT c FROM cand), (SELECT chunk FROM ins)",
				&f);
			if (!res)
				return -EIO;
		}
		if (PQgetisnull(res, 0, 0)) {
			PQclear(res);
			return ask_handover(s, r, nchunks); /* every chunk is held */
		}
		if (!PQgetisnull(res, 0, 1))
			break;
		PQclear(res);
		if (attempt == 16)
			return -EAGAIN;
	}
	r->chunk = (uint64_t)store_pg_col_i64(res, 0, 1);
	PQclear(res);
	first = (int64_t)r->chunk * k;
	r->used_bits = r->grace_bits = r->pinned_bits = 0;
	r->grace_xid = (uint64_t)s->xid;
	a.n = 0;
	store_pg_arg_i64(&a, r->pool_id);
	store_pg_arg_i64(&a, first);
	store_pg_arg_i64(&a, k);
	res = lease_query(
		s,
		"SELECT slot - $2::bigint, 0::bigint FROM pagefs_pages WHERE pool = $1::bigint AND "
		"slot >= $2::bigint"
		" AND slot < $2::bigint + $3::bigint"
		" UNION ALL SELECT freed_slot - $2::bigint, xid::text::bigint FROM pagefs_changes"
		" WHERE pool = $1::bigint AND freed_slot >= $2::bigint AND freed_slot < $2::bigint "
		"+ $3::bigint"
		" AND xid >= (SELECT coalesce(min(acked), '0') FROM pagefs_nodes"
		"  WHERE lease_until >= now())"
		" UNION ALL SELECT slot - $2::bigint, -1::bigint FROM pagefs_pins WHERE pool = "
		"$1::bigint"
		" AND slot >= $2::bigint AND slot < $2::bigint + $3::bigint",
		&a);
	if (!res)
		return -EIO;
	for (int i = 0; i < PQntuples(res); i++) {
		int64_t bit = store_pg_col_i64(res, i, 0), xid = store_pg_col_i64(res, i, 1);
		if (bit < 0 || bit >= k)
			continue;
		if (xid == 0) {
			r->used_bits |= 1ULL << bit;
		} else {
			r->grace_bits |= 1ULL << bit;
			if (xid == -1)
				r->pinned_bits |= 1ULL << bit; /* a reader's pin (pagefs_pins) */
			if (xid > (int64_t)r->grace_xid)
				r->grace_xid = (uint64_t)xid;
		}
	}
	PQclear(res);
	/* This node has a chunk again: it asks for no other. */
	a.n = 0;
	store_pg_arg_i64(&a, r->pool_id);
	store_pg_arg_i64(&a, s->base.node_id);
	if (!(res = lease_query(s,
	                        "DELETE FROM pagefs_wants WHERE pool = $1::bigint"
	                        " AND node = $2::bigint RETURNING 1",
	                        &a)))
		return -EIO;
	PQclear(res);
	return full ? LEASE_FULL : 0;
}

/* REC_RELEASE: gives a drained chunk back; the slots of it readers of
 * this node still pin are listed in pagefs_pins in the same transaction
 * (the next heartbeat keeps those whose page is gone). */
static int apply_release(struct pg_store *s, const struct rec *r)
{
	struct pg_args a = {0};
	char slots[64 * 24 + 4];
	size_t o = 0;
	PGresult *res;

	o += (size_t)snprintf(slots + o, sizeof(slots) - o, "{");
	for (uint64_t i = 0; i < r->chunk_slots && i < 64; i++)
		if ((r->grace_bits >> i) & 1)
			o += (size_t)snprintf(slots + o, sizeof(slots) - o, "%s%llu",
			                      o > 1 ? "," : "",
			                      (unsigned long long)r->chunk * r->chunk_slots + i);
	snprintf(slots + o, sizeof(slots) - o, "}");
	store_pg_arg_i64(&a, r->pool_id);
	store_pg_arg_i64(&a, (int64_t)r->chunk);
	store_pg_arg_i64(&a, s->base.node_id);
	store_pg_arg_text(&a, slots);
	res = lease_query(
		s,
		"WITH pins AS (INSERT INTO pagefs_pins(node, pool, slot) SELECT $3::bigint,"
		" $1::bigint, x FROM unnest($4::text::bigint[]) AS t(x)"
		" ON CONFLICT DO NOTHING RETURNING 1)"
		" DELETE FROM pagefs_chunks WHERE pool = $1::bigint AND chunk = $2::bigint"
		" AND node = $3::bigint RETURNING (SELECT count(*) FROM pins)",
		&a);
	if (!res)
		return -EIO;
	PQclear(res);
	return 0;
}

/* An O_TRUNC replacement: the row keeps its name (a rename may have come
 * first), which goes to r (in_place). 0, 1 when the row went, or -errno. */
static int replace_in_place(struct pg_store *s, struct rec *r)
{
	struct pg_args a = {0};
	PGresult *res;
	int rc;

	store_pg_arg_i64(&a, (int64_t)r->page_id);
	args_version(&a, r);
	if ((rc = store_pg_run(s, PG_COMMIT_SET, &a, &res)) < 0)
		return rc;
	if (PQntuples(res) == 1) {
		int len = PQgetlength(res, 0, 0);
		if (len > 0 && len <= META_NAME_MAX) {
			memcpy(r->name, PQgetvalue(res, 0, 0), (size_t)len);
			r->name[len] = '\0';
			r->name_len = (uint16_t)len;
		}
		r->in_place = 1;
	}
	PQclear(res);
	return !r->in_place;
}

static int apply_one(struct pg_store *s, struct rec *r)
{
	struct pg_args a = {0};
	int rc;

	switch (r->type) {
	case REC_COMMIT:
		r->in_place = 0;
		if (r->replace) /* -ESTALE: unlinked or renamed over meanwhile */
			return (rc = replace_in_place(s, r)) > 0 ? -ESTALE : rc;
		rc = run_pool_name_id(s, PG_COMMIT_DEL, r->pool_id, r->name, r->name_len,
		                      r->page_id);
		if (rc < 0)
			return rc;
		args_page(&a, r);
		return run_rows(s, PG_COMMIT_PUT, &a); /* -ENOENT: the pool went */
	case REC_UNLINK:
		return run_ids(s, PG_DELETE, 1, (int64_t)r->page_id, 0);
	case REC_DROP:
		return apply_drop(s, r);
	case REC_RENAME:
		rc = run_pool_name_id(s, PG_RENAME_DEL, r->pool_id, r->name, r->name_len,
		                      r->page_id);
		if (rc < 0)
			return rc;
		store_pg_arg_i64(&a, (int64_t)r->page_id);
		store_pg_arg_bytes(&a, r->name, r->name_len);
		return run_rows(s, PG_RENAME, &a); /* -ENOENT: unlinked since queued */
	case REC_TOUCH:
		return run_ids(s, PG_TOUCH, 2, (int64_t)r->page_id, r->atime_ns);
	case REC_RANK_PUT:
		return run_ids(s, PG_RANK_PUT, 1, r->rank, 0);
	case REC_RANK_DEL:
		if (s->base.node_id)
			return apply_rank_del(s, r);
		return run_ids(s, PG_RANK_DEL, 1, r->rank, 0);
	case REC_POOL_PUT:
		if (r->pool_update) {
			/* Never makes a pool another node removed meanwhile again. */
			store_pg_arg_i64(&a, r->pool_id);
			store_pg_arg_i64(&a, (int64_t)r->slot_size);
			store_pg_arg_i64(&a, (int64_t)r->capacity);
			if (r->rechunk && s->base.node_id)
				return run_rows(s, PG_POOL_RECHUNK, &a) == 0 ? 0 : -EBUSY;
			return run_rows(s, PG_POOL_SET, &a);
		}
		if ((rc = run_ids(s, PG_RANK_PUT, 1, r->rank, 0)) < 0)
			return rc;
		store_pg_arg_i64(&a, r->pool_id);
		store_pg_arg_i64(&a, r->rank);
		store_pg_arg_text(&a, r->ns);
		store_pg_arg_i64(&a, (int64_t)r->slot_size);
		store_pg_arg_i64(&a, (int64_t)r->capacity);
		return store_pg_run(s, PG_POOL_PUT, &a, NULL);
	case REC_POOL_DEL:
		return run_ids(s, PG_POOL_DEL, 1, r->pool_id, 0);
	case REC_POOL_RETIRE:
		return apply_retire(s, r);
	case REC_SETTING:
		store_pg_arg_text(&a, r->key);
		store_pg_arg_text(&a, r->value);
		return store_pg_run(s, PG_SETTING, &a, NULL);
	case REC_BULK:
		return apply_bulk(s, r);
	case REC_LEASE:
		return apply_lease(s, r);
	case REC_RELEASE:
		return apply_release(s, r);
	case REC_LOG_DROP:
		return -EINVAL; /* the SQLite index's page log only */
	case REC_CHECKSUM:
		store_pg_arg_i64(&a, (int64_t)r->page_id);
		store_pg_arg_i64(&a, (int64_t)r->slot);
		store_pg_arg_i64(&a, (int64_t)r->checksum);
		return store_pg_run(s, PG_CHECKSUM, &a, NULL);
	}
	return -EINVAL;
}

static int exec_simple(struct pg_store *s, const char *sql)
{
	PGresult *res = PQexec(s->conn, sql);
	int rc = PQresultStatus(res) == PGRES_COMMAND_OK ? 0 : store_pg_error(s->conn, res, sql);

	PQclear(res);
	return rc;
}

/* A commit refused as a duplicate: 1 if another row names its slot (the
 * slot was given out twice: a bug), which it logs with the chunk's holder,
 * else 0 (another row of its name). */
static int slot_conflict(struct pg_store *s, const struct rec *r)
{
	int taken = 0;

	struct pg_args a = {0};

	store_pg_arg_i64(&a, r->pool_id);
	PGresult *res = PQexecParams(s->conn, "SELECT capacity FROM pagefs_pools WHERE id = $1",
	                             a.n, NULL, a.val, a.len, a.fmt, 0);
	int64_t cap = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1
	                      ? strtoll(PQgetvalue(res, 0, 0), NULL, 10)
	                      : 0;
	PQclear(res);
	uint32_t k = pool_chunk_slots(cap > 0 ? (uint64_t)cap : 0);
	store_pg_arg_i64(&a, (int64_t)r->slot);
	store_pg_arg_i64(&a, (int64_t)(r->slot / k));
	res = PQexecParams(s->conn,
	                   "SELECT p.id, coalesce((SELECT node FROM pagefs_chunks c WHERE"
	                   " c.pool = $1::bigint AND c.chunk = $3::bigint), -1)"
	                   " FROM pagefs_pages p WHERE p.pool = $1::bigint AND p.slot = $2::bigint",
	                   a.n, NULL, a.val, a.len, a.fmt, 0);
	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
	    strtoull(PQgetvalue(res, 0, 0), NULL, 10) != r->page_id) {
		taken = 1;
		log_error("index %s: node %u committed page %llu into slot %llu of pool %u, which "
		          "page %s holds; node %s holds its chunk",
		          s->display, s->base.node_id, (unsigned long long)r->page_id,
		          (unsigned long long)r->slot, r->pool_id, PQgetvalue(res, 0, 0),
		          PQgetvalue(res, 0, 1));
	}
	PQclear(res);
	return taken;
}

int store_pg_apply(struct store *base, struct rec *r)
{
	struct pg_store *s = (struct pg_store *)base;
	int rc, shared = s->base.node_id != 0;
	int rechunk = shared && r->type == REC_POOL_PUT && r->rechunk;
	int pool_locked = shared && (r->type == REC_COMMIT || r->type == REC_LEASE ||
	                             r->type == REC_POOL_RETIRE || rechunk);

	if (pool_locked)
		rc = pool_lock(s, "SAVEPOINT rec; ", r->pool_id,
		               r->type == REC_POOL_RETIRE || rechunk);
	else
		rc = exec_simple(s, "SAVEPOINT rec");
	r->xid = (uint64_t)s->xid;
	if (rc == 0)
		rc = apply_one(s, r);
	/* A deadlock with another node's transaction (or a serialization
	 * failure) cancels this record's statements. Two nodes met here
	 * updating atimes and dropping pages in different orders. Running
	 * the record again from its savepoint would keep the rows the
	 * transaction's earlier records locked, so the same two transactions
	 * met again at every run (PostgreSQL cancels whichever waited
	 * longest) until one failed: -EDEADLK goes up instead and the journal
	 * rolls the whole transaction back, which frees them, and runs the
	 * batch again (journal.c write_batch). An atime, a hint, yields at
	 * once (its transaction goes on without it). */
	if (rc == -EDEADLK && r->type == REC_TOUCH && PQstatus(s->conn) == CONNECTION_OK) {
		log_info("index (PostgreSQL): the atime of page %llu met another node's "
		         "transaction; left for its next use",
		         (unsigned long long)r->page_id);
		rc = exec_simple(s, "ROLLBACK TO SAVEPOINT rec");
	} else if (rc < 0 && PQstatus(s->conn) == CONNECTION_OK) {
		exec_simple(s, "ROLLBACK TO SAVEPOINT rec");
	}
	if (rc == -EEXIST && r->type == REC_COMMIT && shared &&
	    PQstatus(s->conn) == CONNECTION_OK && slot_conflict(s, r))
		rc = -EADDRINUSE;
	if (rc == -EDEADLK)
		log_info("index (PostgreSQL): record %d (page %llu) met another node's "
		         "transaction",
		         (int)r->type, (unsigned long long)r->page_id);
	if (PQstatus(s->conn) == CONNECTION_OK)
		exec_simple(s, "RELEASE SAVEPOINT rec");
	return rc;
}

/* ---- iteration (its own connection) ---- */

static int iter_chunk(struct pg_store *s, uint32_t pool_id, uint64_t *after, meta_page_cb cb,
                      void *arg, int *rows)
{
	static const char sql[] =
		"SELECT id,name,slot,length,checksum,mtime,atime,gen"
		" FROM pagefs_pages WHERE pool=$1 AND id>$2 ORDER BY id LIMIT " PG_STR(
			PG_ITER_CHUNK);
	struct pg_args a = {0};
	int ret = 0;

	store_pg_arg_i64(&a, pool_id);
	store_pg_arg_i64(&a, (int64_t)*after);
	PGresult *res = PQexecParams(s->rconn, sql, a.n, NULL, a.val, a.len, a.fmt, 1);
	if (PQresultStatus(res) != PGRES_TUPLES_OK) {
		int rc = store_pg_error(s->rconn, res, "page iteration");
		PQclear(res);
		return rc;
	}
	*rows = PQntuples(res);
	for (int i = 0; i < *rows && ret == 0; i++) {
		struct meta_page_info info = {0};
		int n = PQgetlength(res, i, 1);
		*after = (uint64_t)store_pg_col_i64(res, i, 0);
		if (n <= 0 || n > META_NAME_MAX)
			continue;
		info.id = *after;
		info.pool_id = pool_id;
		memcpy(info.name, PQgetvalue(res, i, 1), (size_t)n);
		info.slot = (uint64_t)store_pg_col_i64(res, i, 2);
		info.length = (uint64_t)store_pg_col_i64(res, i, 3);
		info.has_checksum = !PQgetisnull(res, i, 4);
		info.checksum = info.has_checksum ? (uint64_t)store_pg_col_i64(res, i, 4) : 0;
		info.mtime_ns = store_pg_col_i64(res, i, 5);
		info.atime_ns = store_pg_col_i64(res, i, 6);
		info.gen = gen_of_column(store_pg_col_i64(res, i, 7));
		info.version = version_of_column(store_pg_col_i64(res, i, 7));
		info.committed = 1;
		ret = cb(arg, &info);
	}
	PQclear(res);
	return ret;
}

int store_pg_iter_pages(struct store *base, uint32_t pool_id, uint64_t after, meta_page_cb cb,
                        void *arg)
{
	struct pg_store *s = (struct pg_store *)base;
	int rows = PG_ITER_CHUNK, ret, retried = 0;

	pthread_mutex_lock(&s->read_lock);
	ret = store_pg_keep_conn(s, &s->rconn, "connect for page iteration") < 0 ? -EIO : 0;
	while (ret == 0 && rows == PG_ITER_CHUNK) {
		ret = iter_chunk(s, pool_id, &after, cb, arg, &rows);
		/* An idle connection the server dropped (it restarted) shows
		 * only when used: made again once, from where it stopped
		 * (readdir failed with EIO once on every node; found by a
		 * probe). */
		if (ret < 0 && !retried && PQstatus(s->rconn) != CONNECTION_OK) {
			retried = 1;
			rows = PG_ITER_CHUNK;
			ret = store_pg_keep_conn(s, &s->rconn, "connect for page iteration") < 0
			              ? -EIO
			              : 0;
		}
	}
	pthread_mutex_unlock(&s->read_lock);
	return ret;
}
