/*
 * pool.c - ranks and pools: creation, settings, removal, listing.
 *
 * These changes are rare, so they take the simple road: change memory
 * under meta.lock, submit the record, wait for the store, and undo the
 * memory change if the store failed. Pools stay in a list sorted by id
 * (ids only grow), which is also the readdir order of a rank directory.
 */
#include "meta/internal.h"
#include "meta/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct pool *pool_by_id(struct meta *m, uint32_t id)
{
	for (struct pool *p = m->pools; p; p = p->next)
		if (p->id == id)
			return p;
	return NULL;
}

struct pool *pool_by_name(struct meta *m, int rank, const char *ns)
{
	for (struct pool *p = m->pools; p; p = p->next)
		if (p->rank == rank && strcmp(p->ns, ns) == 0)
			return p;
	return NULL;
}

void pool_fill_info(const struct pool *p, struct meta_pool_info *out)
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
	out->used_slots = p->nused;
	out->hits = p->hits;
	out->misses = p->misses;
	out->evictions = p->evictions;
	out->checksum_failures = p->checksum_failures;
	out->bytes_read = p->bytes_read;
	out->bytes_written = p->bytes_written;
	snprintf(out->data_file, sizeof(out->data_file), "%s", p->data_path);
	out->data_fd = p->fd;
}

void pool_free(struct pool *p)
{
	if (!p)
		return;
	slots_free(p);
	chunks_free(p);
	if (p->fd >= 0)
		close(p->fd);
	free(p->data_path);
	free(p);
}

int rank_is_set(const struct meta *m, int rank)
{
	return (m->ranks[rank / 8] >> (rank % 8)) & 1;
}

void rank_set(struct meta *m, int rank, int on)
{
	if (on)
		m->ranks[rank / 8] |= (uint8_t)(1u << (rank % 8));
	else
		m->ranks[rank / 8] &= (uint8_t) ~(1u << (rank % 8));
}

static int rank_has_pools(struct meta *m, int rank)
{
	for (struct pool *p = m->pools; p; p = p->next)
		if (p->rank == rank)
			return 1;
	return 0;
}

void pool_link(struct meta *m, struct pool *p)
{
	struct pool **pp = &m->pools;

	while (*pp && (*pp)->id < p->id)
		pp = &(*pp)->next;
	p->next = *pp;
	*pp = p;
}

void pool_unlink(struct meta *m, struct pool *p)
{
	for (struct pool **pp = &m->pools; *pp; pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			return;
		}
	}
}

/* Submits a waited record for a rank; caller holds meta.lock. */
static struct rec *rank_rec(struct meta *m, enum rec_type type, int rank)
{
	struct rec *r = rec_new(type);

	if (!r)
		return NULL;
	r->rank = (uint16_t)rank;
	r->waited = 1;
	journal_submit(m, r);
	return r;
}

int meta_rank_exists(struct meta *m, int rank)
{
	int yes;

	if (rank < 0 || rank > META_RANK_MAX)
		return 0;
	pthread_mutex_lock(&m->lock);
	yes = rank_is_set(m, rank);
	pthread_mutex_unlock(&m->lock);
	return yes;
}

int meta_rank_create(struct meta *m, int rank)
{
	struct rec *r;

	if (rank < 0 || rank > META_RANK_MAX)
		return -EINVAL;
	if (m->cfg.read_only)
		return -EROFS;
	pthread_mutex_lock(&m->lock);
	if (rank_is_set(m, rank)) {
		pthread_mutex_unlock(&m->lock);
		return -EEXIST;
	}
	rank_set(m, rank, 1);
	r = rank_rec(m, REC_RANK_PUT, rank);
	pthread_mutex_unlock(&m->lock);
	int rc = r ? journal_wait(m, r) : -ENOMEM;
	if (rc < 0) {
		pthread_mutex_lock(&m->lock);
		rank_set(m, rank, rank_has_pools(m, rank));
		pthread_mutex_unlock(&m->lock);
	}
	return rc;
}

int meta_rank_remove(struct meta *m, int rank)
{
	struct rec *r;

	if (rank < 0 || rank > META_RANK_MAX)
		return -ENOENT;
	if (m->cfg.read_only)
		return -EROFS;
	pthread_mutex_lock(&m->lock);
	if (!rank_is_set(m, rank) || rank_has_pools(m, rank)) {
		int rc = rank_is_set(m, rank) ? -ENOTEMPTY : -ENOENT;
		pthread_mutex_unlock(&m->lock);
		return rc;
	}
	rank_set(m, rank, 0);
	r = rank_rec(m, REC_RANK_DEL, rank);
	pthread_mutex_unlock(&m->lock);
	int rc = r ? journal_wait(m, r) : -ENOMEM;
	if (rc < 0) {
		pthread_mutex_lock(&m->lock);
		rank_set(m, rank, 1);
		pthread_mutex_unlock(&m->lock);
	}
	return rc;
}

int meta_rank_list(struct meta *m, int after, uint16_t *out, int max)
{
	int n = 0;

	pthread_mutex_lock(&m->lock);
	for (int r = after < 0 ? 0 : after + 1; r <= META_RANK_MAX && n < max; r++) {
		if (!m->ranks[r / 8]) {
			r |= 7; /* skip a whole empty byte */
			continue;
		}
		if (rank_is_set(m, r))
			out[n++] = (uint16_t)r;
	}
	pthread_mutex_unlock(&m->lock);
	return n;
}

int meta_pool_find(struct meta *m, int rank, const char *ns, struct meta_pool_info *out)
{
	pthread_mutex_lock(&m->lock);
	struct pool *p = pool_by_name(m, rank, ns);
	pool_fill_info(p, p ? out : NULL);
	pthread_mutex_unlock(&m->lock);
	return p ? 0 : -ENOENT;
}

int meta_pool_get(struct meta *m, uint32_t pool_id, struct meta_pool_info *out)
{
	pthread_mutex_lock(&m->lock);
	struct pool *p = pool_by_id(m, pool_id);
	if (p)
		pool_fill_info(p, out);
	pthread_mutex_unlock(&m->lock);
	return p ? 0 : -ENOENT;
}

static struct rec *pool_rec(struct meta *m, enum rec_type type, const struct pool *p)
{
	struct rec *r = rec_new(type);

	if (!r)
		return NULL;
	r->pool_id = p->id;
	r->rank = p->rank;
	memcpy(r->ns, p->ns, sizeof(r->ns));
	r->slot_size = p->slot_size;
	r->capacity = p->capacity;
	r->waited = 1;
	journal_submit(m, r);
	return r;
}

int meta_pool_create(struct meta *m, int rank, const char *ns, uint64_t slot_size,
                     uint64_t capacity_bytes, struct meta_pool_info *out)
{
	char path[4096];
	struct pool *p;
	struct rec *r;
	int rc;

	if (rank < 0 || rank > META_RANK_MAX || meta_check_ns(ns) < 0)
		return -EINVAL;
	if (m->cfg.read_only)
		return -EROFS;
	slot_size = slot_size ? slot_size : m->cfg.default_slot_size;
	capacity_bytes = capacity_bytes ? capacity_bytes : m->cfg.default_capacity;
	if (slot_size == 0 || capacity_bytes < slot_size)
		return -EINVAL;
	rc = data_path(m, rank, ns, path, sizeof(path));
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&m->lock);
	rc = pool_by_name(m, rank, ns) ? -EEXIST : 0;
	pthread_mutex_unlock(&m->lock);
	if (rc < 0)
		return rc; /* checked again below, after the file is made */
	if (!(p = calloc(1, sizeof(*p))) || !(p->data_path = strdup(path))) {
		free(p);
		return -ENOMEM;
	}
	p->rank = (uint16_t)rank;
	snprintf(p->ns, sizeof(p->ns), "%s", ns);
	p->slot_size = slot_size;
	p->capacity = capacity_bytes / slot_size;
	p->fd = -1;
	/* Data before metadata: the file exists before the index names it. */
	rc = data_open(path, p->capacity * slot_size, 0, &p->fd);
	if (rc < 0) {
		log_error("cannot create data file %s: %s", path, strerror(-rc));
		pool_free(p);
		return rc;
	}
	pthread_mutex_lock(&m->lock);
	if (pool_by_name(m, rank, ns)) {
		pthread_mutex_unlock(&m->lock);
		pool_free(p);
		return -EEXIST;
	}
	p->id = (uint32_t)id_take(&m->pool_ids);
	p->shared = (uint8_t)m->shared;
	p->chunk_slots = pool_chunk_slots(p->capacity);
	if (!p->id) {
		pthread_mutex_unlock(&m->lock);
		pool_free(p);
		return -EAGAIN; /* no pool id left until the sync thread fetched more */
	}
	pool_link(m, p);
	p->creating = 1;
	rank_set(m, rank, 1);
	r = pool_rec(m, REC_POOL_PUT, p);
	pool_fill_info(p, out);
	pthread_mutex_unlock(&m->lock);
	rc = r ? journal_wait(m, r) : -ENOMEM;
	pthread_mutex_lock(&m->lock);
	p->creating = 0;
	p->created = ++m->pools_made;
	pthread_mutex_unlock(&m->lock);
	if (rc < 0) {
		pthread_mutex_lock(&m->lock);
		pool_unlink(m, p);
		pthread_mutex_unlock(&m->lock);
		pool_free(p);
	}
	return rc;
}

int meta_pool_set(struct meta *m, uint32_t pool_id, uint64_t slot_size, uint64_t capacity_bytes)
{
	uint64_t old_size, old_cap, new_cap;
	struct pool *p;
	struct rec *r;
	int rc;

	if (m->cfg.read_only)
		return -EROFS;
	pthread_mutex_lock(&m->lock);
	p = pool_by_id(m, pool_id);
	if (!p) {
		pthread_mutex_unlock(&m->lock);
		return -ENOENT;
	}
	old_size = p->slot_size;
	old_cap = p->capacity;
	slot_size = slot_size ? slot_size : old_size;
	capacity_bytes = capacity_bytes ? capacity_bytes : old_cap * old_size;
	new_cap = capacity_bytes / slot_size;
	rc = 0;
	/* Whole pages only: what was set must read back as set. */
	if (new_cap == 0 || capacity_bytes % slot_size != 0)
		rc = -EINVAL;
	else if (slot_size != old_size && (p->pages || p->pending || p->nused))
		rc = -EBUSY;
	else if (new_cap < slot_top(p))
		rc = -EBUSY;
	else if (p->shared && pool_chunk_slots(new_cap) != p->chunk_slots)
		rc = -EBUSY; /* nodes lease chunks of this size: it cannot change */
	else if (new_cap * slot_size > old_cap * old_size &&
	         ftruncate(p->fd, (off_t)(new_cap * slot_size)) < 0)
		rc = -errno;
	if (rc < 0) {
		pthread_mutex_unlock(&m->lock);
		return rc;
	}
	p->slot_size = slot_size;
	p->capacity = new_cap;
	r = pool_rec(m, REC_POOL_PUT, p);
	pthread_mutex_unlock(&m->lock);
	rc = r ? journal_wait(m, r) : -ENOMEM;
	if (rc < 0) {
		pthread_mutex_lock(&m->lock);
		p->slot_size = old_size;
		p->capacity = old_cap;
		pthread_mutex_unlock(&m->lock);
	}
	return rc;
}

int meta_pool_remove(struct meta *m, uint32_t pool_id)
{
	struct pool *p;
	struct rec *r;
	int rc;

	if (m->cfg.read_only)
		return -EROFS;
	pthread_mutex_lock(&m->lock);
	p = pool_by_id(m, pool_id);
	/* (A shared index's slots in their grace period hold no page.) */
	if (!p || p->pages || p->pending || p->nused > (p->shared ? p->ngrace : 0)) {
		pthread_mutex_unlock(&m->lock);
		return p ? -ENOTEMPTY : -ENOENT;
	}
	if (m->shared && m->live_nodes > 1) {
		/* Other nodes may be writing into it: only the last node removes. */
		pthread_mutex_unlock(&m->lock);
		log_warn("pool %u/%s not removed: %u nodes serve this index", p->rank, p->ns,
		         m->live_nodes);
		return -EBUSY;
	}
	pool_unlink(m, p);
	r = pool_rec(m, REC_POOL_DEL, p);
	pthread_mutex_unlock(&m->lock);
	rc = r ? journal_wait(m, r) : -ENOMEM;
	if (rc < 0) {
		pthread_mutex_lock(&m->lock);
		pool_link(m, p);
		pthread_mutex_unlock(&m->lock);
		return rc;
	}
	/* The data file holds no page any more: give its space back. */
	if (unlink(p->data_path) < 0 && errno != ENOENT)
		log_warn("cannot remove data file %s: %s", p->data_path, strerror(errno));
	pool_free(p);
	return 0;
}

int meta_pool_list(struct meta *m, int rank, uint32_t after, struct meta_pool_info *out, int max)
{
	int n = 0;

	pthread_mutex_lock(&m->lock);
	for (struct pool *p = m->pools; p && n < max; p = p->next)
		if (p->rank == rank && p->id > after)
			pool_fill_info(p, &out[n++]);
	pthread_mutex_unlock(&m->lock);
	return n;
}
