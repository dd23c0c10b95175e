/*
 * pools.c - pools and ranks in the index: lookup by id and by name, the
 * pool list, the explicitly created ranks, and the directories another
 * node removed (for the dir callback). meta.lock held.
 */
#include "meta/index.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct pool *index_pool_by_id(struct meta *m, uint32_t id)
{
	for (struct pool *p = m->pools; p; p = p->next)
		if (p->id == id)
			return p;
	return NULL;
}

/* Any pool of that name but a removed one (creating ones included). */
struct pool *index_pool_by_name(struct meta *m, int rank, const char *ns)
{
	for (struct pool *p = m->pools; p; p = p->next)
		if (!p->removed && p->rank == rank && strcmp(p->ns, ns) == 0)
			return p;
	return NULL;
}

void index_pool_fill_info(const struct pool *p, struct meta_pool_info *out)
{
	if (!out)
		return;
	memset(out, 0, sizeof(*out));
	out->id = p->id;
	out->rank = p->rank;
	memcpy(out->ns, p->ns, sizeof(out->ns));
	out->slot_size = p->slot_size;
	out->capacity = p->capacity;
	out->pages = p->pages;
	out->bytes = p->bytes;
	out->used_slots = pool_used(p);
	out->writing = p->resv;
	out->pinned_slots = p->npins;
	out->freed_open = p->nzombies;
	out->hits = p->hits;
	out->misses = p->misses;
	out->evictions = p->evictions;
	out->checksum_failures = p->checksum_failures;
	out->mtime_ns = p->dir_ns;
	out->bytes_read = p->bytes_read;
	out->bytes_written = p->bytes_written;
	snprintf(out->data_file, sizeof(out->data_file), "%s", p->data_path);
	out->data_fd = p->fd;
}

void index_pool_free(struct pool *p)
{
	if (!p)
		return;
	index_pool_index_drop(p);
	index_presence_free(p->presence);
	index_slots_free(p);
	index_chunks_free(p);
	free(p->fence_bits);
	if (p->fd >= 0)
		close(p->fd);
	free(p->data_path);
	free(p);
}

void index_pool_link(struct meta *m, struct pool *p)
{
	struct pool **pp = &m->pools;

	while (*pp && (*pp)->id < p->id)
		pp = &(*pp)->next;
	p->next = *pp;
	*pp = p;
}

struct pool *index_pool_live(struct meta *m, uint32_t id)
{
	struct pool *p = index_pool_by_id(m, id);

	return p && !p->removed && !p->creating ? p : NULL;
}

void index_pool_unlink(struct meta *m, struct pool *p)
{
	for (struct pool **pp = &m->pools; *pp; pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			return;
		}
	}
}

int index_rank_has_pools(struct meta *m, int rank)
{
	for (struct pool *p = m->pools; p; p = p->next)
		if (p->rank == rank && !p->removed)
			return 1;
	return 0;
}

int index_rank_is_set(const struct meta *m, int rank)
{
	return (m->ranks[rank / 8] >> (rank % 8)) & 1;
}

void index_rank_set(struct meta *m, int rank, int on)
{
	if (on)
		m->ranks[rank / 8] |= (uint8_t)(1u << (rank % 8));
	else
		m->ranks[rank / 8] &= (uint8_t) ~(1u << (rank % 8));
}

void index_dirs_add(struct gone_dir **list, int rank, const char *ns)
{
	struct gone_dir *d = calloc(1, sizeof(*d));

	if (!d)
		return; /* only a kernel cache hint is lost */
	d->rank = rank;
	snprintf(d->ns, sizeof(d->ns), "%s", ns ? ns : "");
	d->next = *list;
	*list = d;
}

int meta_check_geometry(uint64_t slot_size, uint64_t slots)
{
	return slot_size && slot_size <= META_SLOT_SIZE_MAX && slots <= META_SLOTS_MAX ? 0
	                                                                               : -EINVAL;
}

void index_dirs_notify(struct meta *m, struct gone_dir *d)
{
	index_assert_unlocked(m); /* its callback reaches fs/, which may call meta_* */
	while (d) {
		struct gone_dir *next = d->next;
		if (m->dir_cb)
			m->dir_cb(m->dir_arg, d->rank, d->ns[0] ? d->ns : NULL);
		free(d);
		d = next;
	}
}
