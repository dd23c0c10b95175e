/*
 * ctimes.c - directory times and renamed pages' ctimes in memory: when a
 * page joined or left its pool's names, and a table of ctimes by page id.
 * record/dirtime.c saves and loads them. meta.lock held.
 */
#include "meta/index.h"
#include "meta/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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
			index_ctime_set(t, old.v[i].id, old.v[i].ns);
	free(old.v);
	return 0;
}

void index_ctime_del(struct ctimes *t, uint64_t id)
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

int64_t index_ctime_get(const struct ctimes *t, uint64_t id)
{
	if (!t->n)
		return 0;
	for (size_t i = ct_slot(t, id); t->v[i].id; i = (i + 1) & (t->cap - 1))
		if (t->v[i].id == id)
			return t->v[i].ns;
	return 0;
}

void index_ctime_set(struct ctimes *t, uint64_t id, int64_t ns)
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

void index_ctimes_free(struct ctimes *t)
{
	free(t->v);
	t->v = NULL;
	t->cap = t->n = 0;
}

void index_pool_changed(struct pool *pool, int64_t ns)
{
	if (ns > pool->dir_ns)
		pool->dir_ns = ns;
}
