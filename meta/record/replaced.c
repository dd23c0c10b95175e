/*
 * replaced.c - which rows a record that names a page replaces, for the
 * SQLite store, which has no index on names (schema 2, store_sqlite.c:
 * a hashed name would dirty a random index page per committed key).
 *
 * A record that gives a page a name (commit, rename, the pages of a key
 * confirm or an import) carries the ids of the rows that name belongs
 * to, which the store deletes by id (if they still have that name). They
 * are found in memory: the committed page of the name when the record
 * was submitted (record_note_replaced) and when its batch is written, every
 * record earlier in the batch that gave the name, and every page of that
 * name whose drop is in the batch or queued behind it. That is every row
 * the name can have when the record is applied: between batches memory
 * mirrors the store, except for the pages the engine dropped by itself
 * (eviction, checksum failure), which leave memory in the critical
 * section that queues their REC_DROP, so their rows are deleted only
 * when that drop is applied: after this record if the drop was queued
 * after it (the page got the name in an earlier batch, after this record
 * was submitted), in a later transaction if queued behind the batch. Such
 * a row is a candidate here, or the record would meet it: a crash between
 * the two transactions would leave two rows of one name, and a schema 1
 * index (a unique name index) would refuse the record. Extra candidates
 * are harmless: the delete checks the name.
 *
 * The batch writer (journal.c) calls record_replaced_resolve before it writes a
 * batch, with no lock held; it takes meta.lock for the lookups.
 */
#include "meta/record.h"
#include "meta/store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void record_note_replaced(struct meta *m, struct rec *r)
{
	struct page *p = index_table_find_name(&m->by_name, r->pool_id, r->name, NULL);

	r->replaced_id = p && p->id != r->page_id ? p->id : 0;
}

void record_set_drop(struct rec *r, const struct page *p)
{
	r->pool_id = page_pool(p)->id;
	r->page_id = p->id;
	r->drop_slot = p->slot;
	r->drop_hash = index_page_name_hash(p);
}

/* A page whose drop is in the batch being resolved or queued behind it. */
struct later_drop {
	uint64_t id;
	uint32_t hash, pool_id;
};

static void later_add(void *arg, const struct rec *r)
{
	struct resolver *rs = arg;

	if (rs->nlater == rs->later_cap) {
		size_t cap = rs->later_cap ? rs->later_cap * 2 : 16;
		struct later_drop *v = realloc(rs->later, cap * sizeof(*v));
		if (!v) {
			rs->oom = 1;
			return;
		}
		rs->later = v;
		rs->later_cap = cap;
	}
	rs->later[rs->nlater++] = (struct later_drop){r->page_id, r->drop_hash, r->pool_id};
}

static int cmp_later(const void *a, const void *b)
{
	uint32_t x = ((const struct later_drop *)a)->hash, y = ((const struct later_drop *)b)->hash;

	return x < y ? -1 : x > y;
}

/* The first later drop of hash h (or nlater). */
static size_t later_first(const struct resolver *rs, uint32_t h)
{
	size_t lo = 0, hi = rs->nlater;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (rs->later[mid].hash < h)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The names a batch gives, in order: a record's, as text, or a bulk
 * page's, as the page holds it. */
struct namer {
	uint64_t id;
	const char *name; /* or NULL: */
	const struct page *page;
	uint32_t hash;
	uint32_t pool_id;
	uint16_t len;
	uint32_t prev; /* the previous namer of the same hash, + 1 (0: none) */
};

/* Whether namer o gives the name k gives; both of one hash and pool. */
static int same_name(const struct namer *o, const struct namer *k)
{
	if (o->len != k->len)
		return 0;
	if (o->page)
		return k->page ? index_pname_same(o->page, k->page)
		               : index_pname_eq(o->page, k->name, k->len);
	return k->page ? index_pname_eq(k->page, o->name, o->len)
	               : memcmp(o->name, k->name, k->len) == 0;
}

static int cand_add(struct resolver *rs, uint64_t id)
{
	if (rs->ncand == rs->cap) {
		size_t cap = rs->cap ? rs->cap * 2 : 64;
		uint64_t *v = realloc(rs->cand, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		rs->cand = v;
		rs->cap = cap;
	}
	rs->cand[rs->ncand++] = id;
	return 0;
}

/* Adds the candidates of one name (of hash h) given to page id (see the
 * header) and records the namer. 0 or -ENOMEM; meta.lock held. */
static int name_given(struct meta *m, struct resolver *rs, const struct namer *given,
                      uint64_t submitted)
{
	uint32_t h = given->hash;
	uint64_t id = given->id;
	struct page *p = given->page ? index_table_find_same(&m->by_name, given->page, h)
	                             : index_table_find_hashed(&m->by_name, h, given->pool_id,
	                                                       given->name, given->len);
	struct namer *k = &rs->v[rs->n];
	int rc = 0;

	if (p && p->id != id)
		rc = cand_add(rs, p->id);
	if (rc == 0 && submitted && submitted != id && (!p || p->id != submitted))
		rc = cand_add(rs, submitted);
	for (uint32_t e = rs->head[h & rs->mask]; rc == 0 && e; e = rs->v[e - 1].prev) {
		const struct namer *o = &rs->v[e - 1];
		if (o->hash == h && o->pool_id == given->pool_id && o->id != id &&
		    same_name(o, given))
			rc = cand_add(rs, o->id);
	}
	/* (of the same hash: the delete checks the name) */
	for (size_t i = later_first(rs, h); rc == 0 && i < rs->nlater && rs->later[i].hash == h;
	     i++)
		if (rs->later[i].pool_id == given->pool_id && rs->later[i].id != id)
			rc = cand_add(rs, rs->later[i].id);
	*k = *given;
	k->prev = rs->head[h & rs->mask];
	rs->head[h & rs->mask] = (uint32_t)++rs->n;
	return rc;
}

/* Sets the replaced-row candidates of every naming record of the batch
 * (SQLite store; see the header). 0, or -ENOMEM: then nothing is set and
 * the batch fails rather than leave two rows with one name. */
int record_replaced_resolve(struct meta *m, struct rec *batch, struct resolver *rs)
{
	size_t n = 0, nat = 0, buckets = 16;
	int rc = 0;

	for (struct rec *r = batch; r; r = r->next) {
		if (r->type == REC_COMMIT || r->type == REC_RENAME)
			n++, nat += 2;
		else if (r->type == REC_BULK)
			n += r->bulk->n, nat += r->bulk->n + 1;
	}
	if (n == 0)
		return 0;
	while (buckets < 2 * n)
		buckets <<= 1;
	rs->v = malloc(n * sizeof(*rs->v));
	rs->head = calloc(buckets, sizeof(*rs->head));
	rs->at = malloc(nat * sizeof(*rs->at));
	if (!rs->v || !rs->head || !rs->at)
		return -ENOMEM;
	rs->mask = buckets - 1;

	uint32_t *at = rs->at;
	index_lock(m);
	for (const struct rec *r = batch; r; r = r->next)
		if (r->type == REC_DROP)
			later_add(rs, r);
	record_each_queued_drop(m, later_add, rs);
	if (rs->oom)
		rc = -ENOMEM;
	else if (rs->nlater > 1)
		qsort(rs->later, rs->nlater, sizeof(*rs->later), cmp_later);
	for (struct rec *r = batch; r && rc == 0; r = r->next) {
		if (r->type == REC_COMMIT || r->type == REC_RENAME) {
			at[0] = (uint32_t)rs->ncand;
			struct namer given = {
				.id = r->page_id,
				.name = r->name,
				.hash = index_name_hash(r->pool_id, r->name, r->name_len),
				.pool_id = r->pool_id,
				.len = r->name_len,
			};
			rc = name_given(m, rs, &given, r->replaced_id);
			at[1] = (uint32_t)rs->ncand;
			at += 2;
		} else if (r->type == REC_BULK) {
			const struct bulk *b = r->bulk;
			at[0] = (uint32_t)rs->ncand;
			for (size_t i = 0; i < b->n && rc == 0; i++) {
				index_table_prefetch_ahead(&m->by_name, NULL, b->pages, b->hash,
				                           b->n, i);
				const struct page *p = b->pages[i];
				struct namer given = {
					.id = p->id,
					.page = p,
					.hash = b->hash[i],
					.pool_id = page_pool(p)->id,
					.len = p->name_len,
				};
				rc = name_given(m, rs, &given, 0);
				at[i + 1] = (uint32_t)rs->ncand;
			}
			at += b->n + 1;
		}
	}
	index_unlock(m);
	if (rc < 0)
		return rc;
	/* Pointers only now: cand moved while it grew. */
	at = rs->at;
	for (struct rec *r = batch; r; r = r->next) {
		if (r->type == REC_COMMIT || r->type == REC_RENAME) {
			r->repl = rs->cand ? rs->cand + at[0] : NULL;
			r->nrepl = at[1] - at[0];
			at += 2;
		} else if (r->type == REC_BULK) {
			r->bulk->repl = rs->cand;
			r->bulk->repl_at = at;
			at += r->bulk->n + 1;
		}
	}
	return 0;
}

void record_replaced_free(struct rec *batch, struct resolver *rs)
{
	for (struct rec *r = batch; r; r = r->next) {
		r->repl = NULL;
		r->nrepl = 0;
		if (r->type == REC_BULK) {
			r->bulk->repl = NULL;
			r->bulk->repl_at = NULL;
		}
	}
	free(rs->v);
	free(rs->head);
	free(rs->cand);
	free(rs->at);
	free(rs->later);
}
