/*
 * stats.c - counters, totals and page iteration: read-only views of the
 * index for status, statfs, xattrs, readdir and export.
 */
#include "meta/ops.h"
#include "meta/record.h"
#include "meta/store.h"

void meta_count_io(struct meta *m, uint32_t pool_id, uint64_t read, uint64_t written)
{
	index_lock(m);
	struct pool *p = index_pool_by_id(m, pool_id);
	if (p) {
		p->bytes_read += read;
		p->bytes_written += written;
	}
	index_unlock(m);
}

void meta_get_stats(struct meta *m, struct meta_stats *out)
{
	*out = (struct meta_stats){0};
	index_lock(m);
	for (struct pool *p = m->pools; p; p = p->next) {
		if (p->removed)
			continue;
		uint64_t free_slots = p->capacity > pool_used(p) ? p->capacity - pool_used(p) : 0;
		out->pools++;
		out->pages += p->pages;
		out->bytes += p->bytes;
		out->total_slots += p->capacity;
		out->free_slots += free_slots;
		out->capacity_bytes += p->capacity * p->slot_size;
		out->free_bytes += free_slots * p->slot_size;
		out->hits += p->hits;
		out->misses += p->misses;
		out->evictions += p->evictions;
		out->checksum_failures += p->checksum_failures;
		out->bytes_read += p->bytes_read;
		out->bytes_written += p->bytes_written;
	}
	index_unlock(m);
	record_counters(m, &out->store_batches, &out->store_records);
}

int meta_page_iter(struct meta *m, uint32_t pool_id, uint64_t after_id, meta_page_cb cb, void *arg)
{
	return store_iter_pages(m->store, pool_id, after_id, cb, arg);
}

const struct meta_config *meta_config(struct meta *m)
{
	return &m->cfg;
}

void meta_set_drop_cb(struct meta *m, meta_drop_cb cb, void *arg)
{
	index_lock(m);
	m->drop_cb = cb;
	m->drop_arg = arg;
	index_unlock(m);
}

void meta_set_dir_cb(struct meta *m, meta_dir_cb cb, void *arg)
{
	index_lock(m);
	m->dir_cb = cb;
	m->dir_arg = arg;
	index_unlock(m);
}
