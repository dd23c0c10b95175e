/*
 * dirtime.c - the times a local filesystem would keep and the index has
 * no column for: a pool directory's mtime/ctime (the last publish,
 * rename, unlink or eviction of one of its pages) and a page's ctime
 * after a rename (docs/DECISIONS-posix.md).
 *
 * Nothing here writes the store per page. A pool's time lives in memory
 * (struct pool.dir_ns), moved by every page that joins or leaves the
 * pool's names (page_link_committed, page_unlink_committed) or is
 * replaced in place; at load it is the newest commit time of its pages,
 * or what a clean unmount recorded for it (setting "dir_time.POOL",
 * written once per pool at close), whichever is later. A crash forgets
 * the unlinks and renames since the last clean unmount that no page's
 * commit time covers.
 *
 * A page's ctime is its commit time, except after a rename: then the
 * rename's time, kept for the pages renamed since mount in a table by
 * page id (open addressing, linear probing, deletion by backward shift)
 * that costs nothing for pages never renamed. After a remount the ctime
 * of a renamed page is its commit time again (the index keeps no more).
 * Everything here is protected by meta.lock.
 */
#include "meta/internal.h"
#include "meta/log.h"
#include "meta/store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

void pool_changed(struct pool *pool, int64_t ns)
{
	if (ns > pool->dir_ns)
		pool->dir_ns = ns;
}

static void dirtime_key(uint32_t pool_id, char *buf, size_t len)
{
	snprintf(buf, len, "dir_time.%u", pool_id);
}

void dirtimes_load(struct meta *m)
{
	for (struct pool *p = m->pools; p; p = p->next) {
		char key[32], val[32] = "";

		dirtime_key(p->id, key, sizeof(key));
		if (store_get_setting(m->store, key, val, sizeof(val)) == 0 && val[0])
			pool_changed(p, strtoll(val, NULL, 10));
		p->dir_saved_ns = p->dir_ns;
	}
}

void dirtimes_save(struct meta *m)
{
	if (m->cfg.read_only)
		return;
	pthread_mutex_lock(&m->lock);
	for (struct pool *p = m->pools; p; p = p->next) {
		if (p->removed || p->dir_ns <= p->dir_saved_ns)
			continue;
		struct rec *r = rec_new(REC_SETTING);
		if (!r)
			break; /* (only a time is lost) */
		dirtime_key(p->id, r->key, sizeof(r->key));
		snprintf(r->value, sizeof(r->value), "%lld", (long long)p->dir_ns);
		p->dir_saved_ns = p->dir_ns;
		journal_submit(m, r);
	}
	pthread_mutex_unlock(&m->lock);
}

/* ---- ctimes of renamed pages ---- */

static size_t ct_slot(const struct ctimes *t, uint64_t id)
{
	return (size_t)((id * 0x9E3779B97F4A7C15ULL) >> 20) & (t->cap - 1);
}

static int ct_grow(struct ctimes *t)
{
	size_t cap = t->cap ? t->cap * 2 : 256;
	struct ctime_ent *v = calloc(cap, sizeof(*v));

	if (!v)
		return -ENOMEM;
	struct ctimes old = *t;
	t->v = v;
	t->cap = cap;
	t->n = 0;
	for (size_t i = 0; i < old.cap; i++)
		if (old.v[i].id)
			ctime_set(t, old.v[i].id, old.v[i].ns);
	free(old.v);
	return 0;
}

void ctime_set(struct ctimes *t, uint64_t id, int64_t ns)
{
	if ((t->n + 1) * 4 > t->cap * 3 && ct_grow(t) < 0) {
		log_warn("out of memory keeping a renamed page's ctime: its commit time is shown");
		return;
	}
	size_t i = ct_slot(t, id);
	while (t->v[i].id && t->v[i].id != id)
		i = (i + 1) & (t->cap - 1);
	if (!t->v[i].id)
		t->n++;
	t->v[i].id = id;
	t->v[i].ns = ns;
}

int64_t ctime_get(const struct ctimes *t, uint64_t id)
{
	if (!t->n)
		return 0;
	for (size_t i = ct_slot(t, id); t->v[i].id; i = (i + 1) & (t->cap - 1))
		if (t->v[i].id == id)
			return t->v[i].ns;
	return 0;
}

void ctime_del(struct ctimes *t, uint64_t id)
{
	if (!t->n)
		return;
	size_t i = ct_slot(t, id);
	while (t->v[i].id != id) {
		if (!t->v[i].id)
			return;
		i = (i + 1) & (t->cap - 1);
	}
	/* Shift back the entries after it that probed past i. */
	for (size_t j = (i + 1) & (t->cap - 1); t->v[j].id; j = (j + 1) & (t->cap - 1)) {
		size_t home = ct_slot(t, t->v[j].id);
		if (((j - home) & (t->cap - 1)) >= ((j - i) & (t->cap - 1))) {
			t->v[i] = t->v[j];
			i = j;
		}
	}
	t->v[i].id = 0;
	t->n--;
}

void ctimes_free(struct ctimes *t)
{
	free(t->v);
	t->v = NULL;
	t->cap = t->n = 0;
}
