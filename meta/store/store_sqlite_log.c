/*
 * store_sqlite_log.c - the page log of an SQLite index: pages written in
 * bulk, kept as one blob per run of consecutive ids (sqlite_log.h says
 * what it holds and when a page leaves it; sqlite_blob.h the blob's
 * bytes). Here: the runs in memory, their undo, and the rows of page_log.
 */
#include "meta/store/sqlite_blob.h"
#include "meta/store/sqlite_log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* Pages a blob holds at most. A delete rewrites the blob it takes a page
 * from, so random deletes cost more as blobs grow, confirms less
 * (DECISIONS.md, "Key confirms are page log blobs"). */
#define PLOG_RUN_MAX 64

struct run {
	uint64_t lo; /* the first id of the run; the key of a run */
	int64_t seq; /* its row in page_log */
	uint32_t pool;
	uint32_t span;  /* ids lo .. lo + span - 1 */
	uint32_t live;  /* pages still in the blob (bits set) */
	int dirty;      /* lost pages in this transaction: store_log_flush writes it */
	int gone;       /* its row is deleted (kept until store_log_done compacts) */
	uint64_t *bits; /* span bits */
};

enum undo_kind { U_ADDED, U_CLEARED, U_GONE, U_SPAN };

struct undo {
	enum undo_kind kind;
	uint64_t id;   /* U_CLEARED: the page; else the run's lo */
	uint32_t span; /* U_SPAN: the run's span before */
};

struct store_log {
	sqlite3 *db;
	struct run *runs; /* sorted by lo; ranges never overlap */
	size_t nruns, cap, ngone;
	struct undo *undo;
	size_t nundo, capundo;
	uint64_t *dirty; /* lo of each run written again at store_log_flush */
	size_t ndirty, capdirty;
	int loaded;
	/* The last blob decoded by store_log_get or a rewrite (a batch that
	 * moves many pages of one blob to rows decodes it once): its rows,
	 * or NULL. Dropped whenever that blob may change. */
	int64_t cseq;
	struct bulk_row *crows;
	size_t cn;
	sqlite3_stmt *st_ins, *st_get, *st_upd, *st_del;
};

/* ---- runs ---- */

static sqlite3_stmt *prep(struct store_log *l, sqlite3_stmt **st, const char *sql)
{
	if (!*st && sqlite3_prepare_v3(l->db, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL))
		return NULL;
	return *st;
}

static int sql_err(struct store_log *l)
{
	int rc = sqlite3_errcode(l->db) & 0xff;
	return rc == SQLITE_FULL ? -ENOSPC : rc == SQLITE_NOMEM ? -ENOMEM : -EIO;
}

/* The index of the first run with lo > id (nruns: none). */
static size_t first_after(const struct store_log *l, uint64_t id)
{
	size_t a = 0, b = l->nruns;

	while (a < b) {
		size_t m = a + (b - a) / 2;
		if (l->runs[m].lo <= id)
			a = m + 1;
		else
			b = m;
	}
	return a;
}

/* The run whose range holds id (gone or not), or NULL. */
static struct run *find(const struct store_log *l, uint64_t id)
{
	size_t a = first_after(l, id);

	if (a == 0)
		return NULL;
	struct run *r = &l->runs[a - 1];
	return id < r->lo + r->span ? r : NULL;
}

/* 1 if a run (gone or not) holds any id of lo .. hi: one that holds
 * neither end but lies inside counts too. */
static int overlaps(const struct store_log *l, uint64_t lo, uint64_t hi)
{
	size_t a = first_after(l, lo);

	return find(l, lo) || (a < l->nruns && l->runs[a].lo <= hi);
}

static int bit(const struct run *r, uint64_t id)
{
	uint64_t k = id - r->lo;
	return (int)((r->bits[k / 64] >> (k % 64)) & 1);
}

static int push_undo(struct store_log *l, enum undo_kind kind, uint64_t id, uint32_t span)
{
	if (l->nundo == l->capundo) {
		size_t cap = l->capundo ? l->capundo * 2 : 256;
		struct undo *u = realloc(l->undo, cap * sizeof(*u));
		if (!u)
			return -ENOMEM;
		l->undo = u;
		l->capundo = cap;
	}
	l->undo[l->nundo++] = (struct undo){kind, id, span};
	return 0;
}

/* Inserts run r (owning its bits) in lo order. */
static int insert_run(struct store_log *l, const struct run *r)
{
	if (l->nruns == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 256;
		struct run *v = realloc(l->runs, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		l->runs = v;
		l->cap = cap;
	}
	size_t at = l->nruns;
	while (at > 0 && l->runs[at - 1].lo > r->lo) /* ids mostly grow: the end */
		at--;
	memmove(&l->runs[at + 1], &l->runs[at], (l->nruns - at) * sizeof(*l->runs));
	l->runs[at] = *r;
	l->nruns++;
	return 0;
}

static void remove_run(struct store_log *l, struct run *r)
{
	size_t at = (size_t)(r - l->runs);

	if (r->gone)
		l->ngone--;
	free(r->bits);
	memmove(r, r + 1, (l->nruns - at - 1) * sizeof(*r));
	l->nruns--;
}

/* A run of span ids from lo with the pages rows[0..n) (ids in range). */
static int make_run(struct run *r, int64_t seq, uint32_t pool, uint64_t lo, uint32_t span,
                    const struct bulk_row *rows, size_t n)
{
	*r = (struct run){.lo = lo, .seq = seq, .pool = pool, .span = span};
	r->bits = calloc(span ? (span + 63) / 64 : 1, sizeof(uint64_t));
	if (!r->bits)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		uint64_t k = rows[i].id - lo;
		if (!((r->bits[k / 64] >> (k % 64)) & 1)) {
			r->bits[k / 64] |= 1ULL << (k % 64);
			r->live++;
		}
	}
	return 0;
}

/* ---- the interface ---- */

static void uncache(struct store_log *l)
{
	free(l->crows);
	l->crows = NULL;
	l->cn = 0;
}

struct store_log *store_log_new(sqlite3 *db)
{

	struct store_log *l = calloc(1, sizeof(*l));
	if (l)
		l->db = db;
	return l;
}

void store_log_free(struct store_log *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->nruns; i++)
		free(l->runs[i].bits);
	free(l->runs);
	free(l->undo);
	free(l->dirty);
	free(l->crows);
	sqlite3_finalize(l->st_ins);
	sqlite3_finalize(l->st_get);
	sqlite3_finalize(l->st_upd);
	sqlite3_finalize(l->st_del);
	free(l);
}

static int cmp_lo(const void *a, const void *b)
{
	const struct run *x = a, *y = b;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* A bulk_row as the loader's struct rec. */
static void to_rec(const struct bulk_row *w, struct rec *row)
{
	row->page_id = w->id;
	row->pool_id = w->pool_id;
	memcpy(row->name, w->name, w->name_len);
	row->name[w->name_len] = '\0';
	row->name_len = w->name_len;
	row->slot = w->slot;
	row->length = w->length;
	row->has_checksum = w->has_checksum;
	row->checksum = w->checksum;
	row->mtime_ns = w->mtime_ns;
	row->atime_ns = w->atime_ns;
	row->gen = gen_of_column(w->gen);
	row->version = version_of_column(w->gen);
}

int store_log_load(struct store_log *l, const struct store_load_cb *cb,
                   int (*damaged)(void *arg, int64_t seq, const char *why), char *err,
                   size_t errlen)
{
	sqlite3_stmt *st = NULL;
	struct rec *row = calloc(1, sizeof(*row));
	int rc, ret = 0;

	if (!row)
		return -ENOMEM;
	for (size_t i = 0; i < l->nruns; i++)
		free(l->runs[i].bits);
	l->nruns = l->ngone = 0;
	uncache(l);
	rc = sqlite3_prepare_v2(l->db, "SELECT seq,pool,lo,span,body FROM page_log", -1, &st, NULL);
	while (rc == SQLITE_OK && ret == 0 && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		int64_t seq = sqlite3_column_int64(st, 0);
		int64_t pool_col = sqlite3_column_int64(st, 1);
		int64_t lo_col = sqlite3_column_int64(st, 2);
		int64_t span = sqlite3_column_int64(st, 3);
		uint32_t pool = (uint32_t)pool_col;
		uint64_t lo = (uint64_t)lo_col;
		struct bulk_row *rows = NULL;
		size_t n = 0;
		const char *why = "bad run";
		struct run r;

		rc = SQLITE_OK;
		/* (ids lo .. lo + span - 1 all positive int64: no overflow) */
		ret = span > 0 && span <= STORE_BLOB_READ_MAX && lo_col > 0 &&
		                      lo_col <= INT64_MAX - span && pool_col >= 0 &&
		                      pool_col <= UINT32_MAX
		              ? store_blob_decode(sqlite3_column_blob(st, 4),
		                                  (size_t)sqlite3_column_bytes(st, 4), pool, lo,
		                                  (uint32_t)span, &rows, &n, &why)
		              : -EBADMSG;
		if (ret == 0 && overlaps(l, lo, lo + (uint64_t)span - 1)) {
			why = "its ids are another record's";
			ret = -EBADMSG;
		}
		for (size_t i = 1; ret == 0 && i < n; i++)
			if (rows[i].id <= rows[i - 1].id) {
				why = "pages out of order";
				ret = -EBADMSG;
			}
		if (ret == -EBADMSG && damaged) {
			/* Left out like its run: a blob that decodes but
			 * overlaps another has rows, which must not reach cb
			 * (they would be pages no delete could reach). */
			n = 0;
			ret = damaged(cb ? cb->arg : NULL, seq, why);
		} else if (ret == -EBADMSG) {
			snprintf(err, errlen,
			         "page log record %lld is damaged (%s); run 'pagefs fsck --repair'",
			         (long long)seq, why);
			ret = -EUCLEAN;
		} else if (ret == 0 &&
		           (ret = make_run(&r, seq, pool, lo, (uint32_t)span, rows, n)) == 0 &&
		           (ret = insert_run(l, &r)) < 0) {
			free(r.bits);
		}
		for (size_t i = 0; ret == 0 && cb && i < n; i++) {
			to_rec(&rows[i], row);
			ret = cb->page(cb->arg, row);
		}
		free(rows);
	}
	sqlite3_finalize(st);
	free(row);
	if (ret == 0 && rc != SQLITE_DONE) {
		snprintf(err, errlen, "cannot read the page log (%s); run 'pagefs fsck'",
		         sqlite3_errmsg(l->db));
		ret = -EIO;
	}
	/* (an empty log has no array: qsort of NULL is undefined, UBSan stops) */
	if (l->nruns > 1)
		qsort(l->runs, l->nruns, sizeof(*l->runs), cmp_lo);
	l->nundo = l->ndirty = 0;
	l->loaded = ret == 0;
	return ret;
}

int store_log_ready(struct store_log *l)
{
	char err[256];

	return l->loaded ? 0 : store_log_load(l, NULL, NULL, err, sizeof(err));
}

int store_log_has(const struct store_log *l, uint64_t id)
{
	const struct run *r = find(l, id);
	return r && !r->gone && bit(r, id);
}

/* The pages of run r's blob. */
static int read_run(struct store_log *l, const struct run *r, struct bulk_row **rows, size_t *n)
{
	sqlite3_stmt *st = prep(l, &l->st_get, "SELECT body FROM page_log WHERE seq=?1");
	const char *why = NULL;
	int rc;

	if (!st)
		return sql_err(l);
	sqlite3_bind_int64(st, 1, r->seq);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW)
		rc = store_blob_decode(sqlite3_column_blob(st, 0),
		                       (size_t)sqlite3_column_bytes(st, 0), r->pool, r->lo, r->span,
		                       rows, n, &why);
	else
		rc = rc == SQLITE_DONE ? -ENOENT : sql_err(l);
	sqlite3_reset(st);
	return rc == -EBADMSG ? -EUCLEAN : rc;
}

/* Run r's pages from the cache, decoding its blob if another is there:
 * valid until the next call or change. */
static int cached_run(struct store_log *l, const struct run *r, struct bulk_row **rows, size_t *n)
{
	int rc = 0;

	if (!l->crows || l->cseq != r->seq) {
		uncache(l);
		if ((rc = read_run(l, r, &l->crows, &l->cn)) < 0)
			return rc;
		l->cseq = r->seq;
	}
	*rows = l->crows;
	*n = l->cn;
	return 0;
}

int store_log_get(struct store_log *l, uint64_t id, struct bulk_row *out)
{
	const struct run *r = find(l, id);
	struct bulk_row *rows;
	size_t n;
	int rc;

	if (!r || r->gone || !bit(r, id))
		return -ENOENT;
	if ((rc = cached_run(l, r, &rows, &n)) < 0)
		return rc;
	for (size_t i = 0; i < n; i++)
		if (rows[i].id == id) {
			*out = rows[i];
			return 0;
		}
	return -ENOENT;
}

/* Writes rows[0..n) (ids from lo, within span) as the blob of row seq (0:
 * a new row, whose seq goes to *seq). */
static int write_blob(struct store_log *l, int64_t *seq, uint32_t pool, uint64_t lo, uint32_t span,
                      const struct bulk_row *rows, size_t n)
{
	unsigned char *body;
	size_t len;
	int rc = store_blob_encode(rows, n, pool, lo, span, &body, &len);

	if (rc)
		return rc;
	if (*seq && l->crows && l->cseq == *seq)
		uncache(l);
	sqlite3_stmt *st = *seq ? prep(l, &l->st_upd,
	                               "UPDATE page_log SET n=?2, body=?3, span=?5 WHERE seq=?1")
	                        : prep(l, &l->st_ins,
	                               "INSERT INTO page_log(pool,lo,span,n,body)"
	                               " VALUES(?1,?4,?5,?2,?3)");
	if (!st) {
		free(body);
		return sql_err(l);
	}
	if (*seq)
		sqlite3_bind_int64(st, 1, *seq);
	else
		sqlite3_bind_int64(st, 1, pool);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)n);
	sqlite3_bind_blob(st, 3, body, (int)len, SQLITE_STATIC);
	if (!*seq)
		sqlite3_bind_int64(st, 4, (sqlite3_int64)lo);
	sqlite3_bind_int64(st, 5, span);
	rc = sqlite3_step(st);
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	free(body);
	if (rc != SQLITE_DONE)
		return sql_err(l);
	if (!*seq)
		*seq = sqlite3_last_insert_rowid(l->db);
	return 0;
}

/* rows[0 .. n), consecutive ids of one pool, as a new blob and its run. */
static int add_run(struct store_log *l, const struct bulk_row *rows, size_t n)
{
	uint64_t lo = rows[0].id;
	int64_t seq = 0;
	struct run r;
	int rc;

	if (overlaps(l, lo, lo + n - 1))
		return -EEXIST; /* ids are never reused: a bug, refused */
	if ((rc = write_blob(l, &seq, rows[0].pool_id, lo, (uint32_t)n, rows, n)) < 0 ||
	    (rc = make_run(&r, seq, rows[0].pool_id, lo, (uint32_t)n, rows, n)) < 0)
		return rc;
	if ((rc = insert_run(l, &r)) < 0) {
		free(r.bits);
		return rc;
	}
	if ((rc = push_undo(l, U_ADDED, lo, 0)) < 0)
		remove_run(l, find(l, lo));
	return rc;
}

int store_log_add(struct store_log *l, const struct bulk *b)
{
	struct bulk_row *rows = calloc(PLOG_RUN_MAX, sizeof(*rows));
	size_t n = 0;
	int rc = rows ? 0 : -ENOMEM;

	for (size_t i = 0; rc == 0 && i < b->n; i++) {
		if (n == PLOG_RUN_MAX) { /* a full run */
			if ((rc = add_run(l, rows, n)) < 0)
				break;
			n = 0;
		}
		b->row(b, i, &rows[n]);
		if (n && (rows[n].id != rows[n - 1].id + 1 ||
		          rows[n].pool_id != rows[n - 1].pool_id)) { /* the next run */
			struct bulk_row next = rows[n];
			rc = add_run(l, rows, n);
			rows[0] = next;
			n = 0;
		}
		n++;
		if (b->progress && rc == 0 && ((i + 1) % 65536 == 0 || i + 1 == b->n))
			b->progress(b->arg, i + 1, b->n);
	}
	if (rc == 0 && n)
		rc = add_run(l, rows, n);
	free(rows);
	return rc;
}

int store_log_remove(struct store_log *l, uint64_t id)
{
	struct run *r = find(l, id);
	uint64_t k;

	if (!r || r->gone || !bit(r, id))
		return 0;
	if (!r->dirty) {
		if (l->ndirty == l->capdirty) {
			size_t cap = l->capdirty ? l->capdirty * 2 : 64;
			uint64_t *v = realloc(l->dirty, cap * sizeof(*v));
			if (!v)
				return -ENOMEM;
			l->dirty = v;
			l->capdirty = cap;
		}
		l->dirty[l->ndirty++] = r->lo;
		r->dirty = 1;
	}
	if (push_undo(l, U_CLEARED, id, 0) < 0)
		return -ENOMEM;
	k = id - r->lo;
	r->bits[k / 64] &= ~(1ULL << (k % 64));
	r->live--;
	return 1;
}

int store_log_drop(struct store_log *l, int64_t seq)
{
	sqlite3_stmt *st = prep(l, &l->st_del, "DELETE FROM page_log WHERE seq=?1");
	int rc;

	if (!st)
		return sql_err(l);
	if (l->crows && l->cseq == seq)
		uncache(l);
	sqlite3_bind_int64(st, 1, seq);
	rc = sqlite3_step(st);
	sqlite3_reset(st);
	return rc == SQLITE_DONE ? 0 : sql_err(l);
}

/* Writes run r's blob again with the pages it still has, or deletes it. */
static int rewrite(struct store_log *l, struct run *r)
{
	struct bulk_row *rows;
	size_t n, keep = 0;
	int rc;

	if (r->live == 0) {
		if ((rc = store_log_drop(l, r->seq)) < 0 ||
		    (rc = push_undo(l, U_GONE, r->lo, 0)) < 0)
			return rc;
		r->gone = 1;
		l->ngone++;
		return 0;
	}
	if ((rc = cached_run(l, r, &rows, &n)) < 0)
		return rc;
	l->crows = NULL; /* (the blob changes: its rows are ours now) */
	l->cn = 0;
	for (size_t i = 0; i < n; i++)
		if (bit(r, rows[i].id))
			rows[keep++] = rows[i];
	/* The run ends at its last page: a mount takes the next id after
	 * the last page it loaded, which must lie past every run. */
	uint32_t span = keep ? (uint32_t)(rows[keep - 1].id - r->lo + 1) : r->span;
	if (span < r->span) {
		if ((rc = push_undo(l, U_SPAN, r->lo, r->span)) < 0) {
			free(rows);
			return rc;
		}
		r->span = span;
	}
	rc = write_blob(l, &r->seq, r->pool, r->lo, r->span, rows, keep);
	free(rows);
	return rc;
}

int store_log_flush(struct store_log *l)
{
	int rc = 0;

	for (size_t i = 0; i < l->ndirty && rc == 0; i++) {
		struct run *r = find(l, l->dirty[i]);
		if (r && r->dirty && !r->gone)
			rc = rewrite(l, r);
	}
	return rc;
}

/* Drops the runs whose rows are deleted once they are half the array. */
static void compact(struct store_log *l)
{
	size_t keep = 0;

	if (l->ngone < 64 || l->ngone * 2 < l->nruns)
		return;
	for (size_t i = 0; i < l->nruns; i++) {
		if (l->runs[i].gone)
			free(l->runs[i].bits);
		else
			l->runs[keep++] = l->runs[i];
	}
	l->nruns = keep;
	l->ngone = 0;
}

void store_log_done(struct store_log *l)
{
	for (size_t i = 0; i < l->ndirty; i++) {
		struct run *r = find(l, l->dirty[i]);
		if (r)
			r->dirty = 0;
	}
	l->ndirty = 0;
	l->nundo = 0;
	compact(l);
}

size_t store_log_mark(const struct store_log *l)
{
	return l->nundo;
}

void store_log_undo(struct store_log *l, size_t mark)
{
	uncache(l); /* (a rollback may bring an older blob back) */
	while (l->nundo > mark) {
		const struct undo *u = &l->undo[--l->nundo];
		struct run *r = find(l, u->id);
		if (!r)
			continue;
		switch (u->kind) {
		case U_ADDED:
			remove_run(l, r);
			break;
		case U_CLEARED: {
			uint64_t k = u->id - r->lo;
			r->bits[k / 64] |= 1ULL << (k % 64);
			r->live++;
			break;
		}
		case U_GONE:
			r->gone = 0;
			l->ngone--;
			break;
		case U_SPAN:
			r->span = u->span;
			break;
		}
	}
	if (mark == 0) { /* a rollback: every run is as the database has it */
		for (size_t i = 0; i < l->ndirty; i++) {
			struct run *r = find(l, l->dirty[i]);
			if (r)
				r->dirty = 0;
		}
		l->ndirty = 0;
	}
}

void store_log_cursor_init(struct store_log_cursor *c, struct store_log *l, uint32_t pool,
                           uint64_t after)
{
	size_t a = 0, b = l->nruns;

	while (a < b) { /* the first run that ends past `after` */
		size_t m = a + (b - a) / 2;
		if (l->runs[m].lo + l->runs[m].span <= after + 1)
			a = m + 1;
		else
			b = m;
	}
	*c = (struct store_log_cursor){.l = l, .pool = pool, .after = after, .run = a};
}

int store_log_next(struct store_log_cursor *c, struct bulk_row *out)
{
	for (;;) {
		while (c->at < c->nrows) {
			const struct bulk_row *w = &c->rows[c->at++];
			const struct run *r = find(c->l, w->id);
			if (w->id > c->after && r && !r->gone && bit(r, w->id)) {
				*out = *w;
				return 1;
			}
		}
		free(c->rows);
		c->rows = NULL;
		c->nrows = c->at = 0;
		while (c->run < c->l->nruns &&
		       (c->l->runs[c->run].pool != c->pool || c->l->runs[c->run].gone ||
		        !c->l->runs[c->run].live))
			c->run++;
		if (c->run >= c->l->nruns)
			return 0;
		int rc = read_run(c->l, &c->l->runs[c->run++], &c->rows, &c->nrows);
		if (rc < 0)
			return rc;
	}
}

void store_log_cursor_free(struct store_log_cursor *c)
{
	free(c->rows);
	c->rows = NULL;
}
