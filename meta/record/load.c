/*
 * load.c - the index load at open: the store's rows become the in-memory
 * index (ranks, pools, pages, the pools' LRU lists).
 *
 * Two threads share the page rows. The one that runs the store's scan
 * checks each row, marks its slot and copies what the page needs; a
 * second one, the linker, builds the struct pages (the allocation, whose
 * first touch of fresh memory is much of the cost, the packed name, its
 * hash) and puts them into the two hash tables and the LRU array. The
 * scan hands rows over in batches through two buffers, so on two cores
 * the halves run side by side. (A scan that built the pages itself would
 * be busy all the time and the linker a fifth of it: a mount would leave
 * most of a core idle.) The linker works a group at a
 * time so that the cache misses of a group's buckets and chains overlap
 * instead of following one another.
 *
 * Either side can stop the load: the scan at a bad row, the linker at a
 * name loaded twice (the SQLite table has no unique index on names,
 * store_sqlite.c: memory is where two rows of one name show) or out of
 * memory. Pages built and not linked are freed; linked ones are in the
 * tables, which meta_close frees as usual.
 */
#include "meta/record.h"
#include "meta/store.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOAD_GROUP 16
#define LOAD_BATCH 1024

/* A loaded page waiting for its place in its pool's LRU. */
struct lru_ent {
	int64_t atime;
	uint64_t id;
	struct page *p;
};

/* A checked row, as the linker needs it to build the page. */
struct row {
	uint64_t id, slot, length, checksum;
	int64_t mtime_ns, atime_ns;
	struct pool *pool;
	uint32_t gen;
	uint16_t version;
	uint8_t has_checksum, name_len;
	char name[META_NAME_MAX + 1];
};

struct batch {
	struct row r[LOAD_BATCH];
	size_t n; /* 0 once linked (or dropped) */
};

struct loader {
	struct meta *m;
	char *err; /* the scan's message; the linker's goes to lerr */
	size_t errlen;

	/* Hand-over, under mu: the scan fills buf[fill]; full[i] means
	 * buf[i] waits for the linker; done: no more batches. */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct batch buf[2];
	int full[2];
	int fill;
	int done;
	int lrc; /* the linker's error, which stops the scan too */
	pthread_t thread;
	int threaded;

	/* The linker's. */
	struct lru_ent *lru; /* pages as loaded, ordered by (atime, id) at the end */
	size_t n, cap;
	char lerr[1024];
};

/* The page of a checked row, or NULL when out of memory; *h: its name's
 * hash. */
static struct page *build(const struct row *r, uint32_t *h)
{
	struct page *p = index_page_alloc(r->name, r->name_len);

	if (!p)
		return NULL;
	p->id = r->id;
	page_set_pool(p, r->pool);
	p->slot = r->slot;
	p->length = r->length;
	p->checksum = r->checksum;
	p->has_checksum = r->has_checksum;
	page_set_mtime(p, r->mtime_ns);
	p->atime_s = page_secs(r->atime_ns);
	p->gen = r->gen;
	p->version = r->version;
	*h = index_name_hash(r->pool->id, r->name, r->name_len);
	return p;
}

/* Builds and links b's pages a group at a time; on an error frees those
 * built and not linked. 0 or -errno. */
static int link_batch(struct loader *l, struct batch *b)
{
	struct meta *m = l->m;
	struct page *pg[LOAD_GROUP];
	uint32_t hg[LOAD_GROUP];
	int rc = 0;
	size_t i = 0, g = 0;

	for (size_t base = 0; base < b->n && rc == 0; base += LOAD_GROUP) {
		g = b->n - base < LOAD_GROUP ? b->n - base : LOAD_GROUP;
		for (i = 0; i < g; i++) {
			if (!(pg[i] = build(&b->r[base + i], &hg[i]))) {
				rc = -ENOMEM;
				break;
			}
			index_table_prefetch_name(&m->by_name, hg[i]);
			index_idtable_prefetch(&m->by_id, pg[i]->id);
		}
		if (rc < 0) {
			g = i; /* pg[0..i) built */
			i = 0;
			break;
		}
		for (i = 0; i < g; i++) {
			struct page *head = index_table_bucket_name(&m->by_name, hg[i]);
			if (head)
				page_prefetch_chain(head);
		}
		for (i = 0; i < g; i++) {
			struct page *p = pg[i];
			struct pool *pool = page_pool(p);
			struct page *twin = index_table_find_same(&m->by_name, p, hg[i]);
			if (twin) {
				char name[META_NAME_MAX + 1];
				snprintf(l->lerr, sizeof(l->lerr),
				         "index %s is inconsistent: pages %llu and %llu are both "
				         "named '%s' in pool %u/%s; run 'pagefs fsck --repair'",
				         m->db_path, (unsigned long long)twin->id,
				         (unsigned long long)p->id, index_pname_text(p, name),
				         pool->rank, pool->ns);
				rc = -EUCLEAN;
				break;
			}
			if (l->n == l->cap) {
				size_t cap = l->cap ? l->cap * 2 : 4096;
				struct lru_ent *e = realloc(l->lru, cap * sizeof(*e));
				if (!e) {
					rc = -ENOMEM;
					break;
				}
				l->lru = e;
				l->cap = cap;
			}
			l->lru[l->n++] = (struct lru_ent){b->r[base + i].atime_ns, p->id, p};
			index_page_link_loaded(m, p, hg[i]); /* the LRU is built once all are in */
			if (!m->shared && p->id >= m->page_ids.next)
				m->page_ids.next = p->id + 1;
		}
	}
	if (rc < 0)
		for (; i < g; i++)
			index_page_free(pg[i]);
	b->n = 0;
	return rc;
}

static void *linker_main(void *arg)
{
	struct loader *l = arg;

	pthread_mutex_lock(&l->mu);
	for (int i = 0;; i ^= 1) {
		while (!l->full[i] && !l->done)
			pthread_cond_wait(&l->cv, &l->mu);
		if (!l->full[i])
			break; /* done, and every batch linked */
		pthread_mutex_unlock(&l->mu);
		int rc = link_batch(l, &l->buf[i]);
		pthread_mutex_lock(&l->mu);
		l->full[i] = 0;
		pthread_cond_broadcast(&l->cv);
		if (rc < 0) {
			l->lrc = rc;
			break;
		}
	}
	pthread_mutex_unlock(&l->mu);
	return NULL;
}

/* Hands the filled batch to the linker and waits for the other buffer.
 * 0, or the linker's error. */
static int hand_over(struct loader *l)
{
	if (!l->threaded) {
		int rc = link_batch(l, &l->buf[l->fill]);
		if (rc < 0)
			l->lrc = rc;
		return rc;
	}
	pthread_mutex_lock(&l->mu);
	l->full[l->fill] = 1;
	pthread_cond_broadcast(&l->cv);
	l->fill ^= 1;
	while (l->full[l->fill] && !l->lrc)
		pthread_cond_wait(&l->cv, &l->mu);
	int rc = l->lrc;
	pthread_mutex_unlock(&l->mu);
	return rc;
}

static int load_rank(void *arg, int rank)
{
	struct loader *l = arg;

	if (rank < 0 || rank > META_RANK_MAX)
		return 0;
	index_rank_set(l->m, rank, 1);
	return 0;
}

static int load_pool(void *arg, const struct store_pool_row *row)
{
	struct loader *l = arg;
	struct meta *m = l->m;
	struct pool *p;

	if (row->retired)
		return 0; /* another node is removing it (pool.c) */
	int rc = record_pool_from_row(m, row, 1, &p, l->err, l->errlen);

	if (rc < 0)
		return rc;
	p->next = m->pools; /* rows come in id order: reversed in meta_open */
	m->pools = p;
	index_rank_set(m, p->rank, 1);
	if (!m->shared && p->id >= m->pool_ids.next)
		m->pool_ids.next = p->id + 1;
	return 0;
}

/* The scan's half: checks the row, marks its slot, and copies what the
 * page needs for the linker. Pools and their slot bits are the scan's
 * alone while it runs. */
static int load_page(void *arg, const struct rec *row)
{
	struct loader *l = arg;
	struct meta *m = l->m;
	struct pool *pool = index_pool_by_id(m, row->pool_id);

	if (!pool || !row->page_id || row->page_id > META_PAGE_ID_MAX ||
	    meta_check_name(row->name) < 0 || strlen(row->name) != row->name_len ||
	    row->slot >= pool->capacity || row->length > pool->slot_size ||
	    index_slot_mark(pool, row->slot) < 0) {
		snprintf(l->err, l->errlen,
		         "index %s is inconsistent: page %llu ('%s') has a bad id, pool, name, "
		         "slot or length, or shares its slot; run 'pagefs fsck --repair'",
		         m->db_path, (unsigned long long)row->page_id, row->name);
		return -EUCLEAN;
	}
	uint64_t end = (uint64_t)row->slot * pool->slot_size + row->length;
	if (end > pool->load_end)
		pool->load_end = end;
	struct batch *b = &l->buf[l->fill];
	struct row *r = &b->r[b->n++];
	r->id = row->page_id;
	r->slot = row->slot;
	r->length = row->length;
	r->checksum = row->checksum;
	r->has_checksum = row->has_checksum != 0;
	r->mtime_ns = row->mtime_ns;
	r->atime_ns = row->atime_ns;
	r->pool = pool;
	r->gen = row->gen;
	r->version = row->version;
	r->name_len = (uint8_t)row->name_len;
	memcpy(r->name, row->name, row->name_len + 1u);
	return b->n == LOAD_BATCH ? hand_over(l) : 0;
}

static int cmp_lru(const void *a, const void *b)
{
	const struct lru_ent *x = a, *y = b;

	if (x->atime != y->atime)
		return x->atime < y->atime ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

/*
 * Links the loaded pages into their pools' LRU lists, least recently used
 * first so that the most recent ends at the head. The store hands pages
 * over in its own order (SQLite: by id, a plain scan): sorting them here,
 * on a compact array that is usually sorted already, replaced an ORDER BY
 * whose sorter was a third of the load time.
 */
static void lru_build(struct loader *l)
{
	size_t i = 1;

	while (i < l->n && cmp_lru(&l->lru[i - 1], &l->lru[i]) <= 0)
		i++;
	if (i < l->n)
		qsort(l->lru, l->n, sizeof(*l->lru), cmp_lru);
	for (i = 0; i < l->n; i++)
		index_lru_push_head(page_pool(l->lru[i].p), l->lru[i].p);
}

int record_load(struct meta *m, char *err, size_t errlen)
{
	struct loader *l = calloc(1, sizeof(*l));
	int rc;

	if (!l)
		return -ENOMEM;
	l->m = m;
	l->err = err;
	l->errlen = errlen;
	pthread_mutex_init(&l->mu, NULL);
	pthread_cond_init(&l->cv, NULL);
	l->threaded = pthread_create(&l->thread, NULL, linker_main, l) == 0;

	struct store_load_cb cb = {l, load_rank, load_pool, load_page, NULL};
	rc = store_load(m->store, &cb, err, errlen);
	if (rc == 0 && l->buf[l->fill].n)
		rc = hand_over(l);
	if (l->threaded) {
		pthread_mutex_lock(&l->mu);
		l->done = 1;
		pthread_cond_broadcast(&l->cv);
		pthread_mutex_unlock(&l->mu);
		pthread_join(l->thread, NULL);
	}
	if (l->lrc) { /* the linker stopped first, at an earlier row */
		rc = l->lrc;
		snprintf(err, errlen, "%s", l->lerr);
	}
	lru_build(l); /* (rows never linked had no pages built) */
	free(l->lru);
	pthread_cond_destroy(&l->cv);
	pthread_mutex_destroy(&l->mu);
	free(l);
	return rc;
}
