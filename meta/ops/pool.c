/*
 * pool.c - ranks and pools: creation, settings, removal, listing.
 *
 * These changes are rare, so they take the simple road: change memory
 * under meta.lock, submit the record, wait for the store, and undo the
 * memory change if the store failed. Pools stay in a list sorted by id
 * (ids only grow), which is also the readdir order of a rank directory.
 *
 * On a shared index a pool is removed in steps that other nodes' commits
 * cannot slip between (retire, unlink the file, delete the row; see
 * remove_shared and docs/DESIGN.md), and a pool removed by any node stays
 * in the list, hidden (removed), until this node's writers and readers no
 * longer use its data file (ops_pool_reap).
 */
#include "meta/log.h"
#include "meta/ops.h"
#include "meta/record.h"
#include "meta/store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Shared index: how long rmdir waits for the other nodes to acknowledge
 * the pool's last frees (and to release their pins) before EBUSY. */
#define RETIRE_WAIT_MS 3000

static int pool_pinned(const struct pool *p)
{
	for (int b = 0; b < PIN_BUCKETS; b++)
		if (p->pins[b])
			return 1;
	return 0;
}

int ops_pool_reap(struct meta *m, struct pool *p)
{
	if (!p->removed || p->removing || p->resv || p->pending || pool_pinned(p))
		return 0;
	index_pool_unlink(m, p);
	index_pool_free(p);
	return 1;
}

/* ops_pool_retire but for the reap: p stays allocated. 0 if it was retired
 * already (nothing done). */
static int retire_pages(struct meta *m, struct pool *p, struct dropped **drops)
{
	if (p->removed)
		return 0;
	p->removed = 1;
	index_presence_free(p->presence); /* its file goes with the pool */
	p->presence = NULL;
	/* No page row names the pool any more (commits check its row): pages
	 * still in the mirror are removals the feed has not brought yet. */
	while (p->lru_head) {
		struct page *pg = p->lru_head;
		index_page_unlink_committed(m, pg);
		index_slot_put(p, pg->slot);
		if (drops)
			index_drops_add(drops, pg);
		index_page_free(pg);
	}
	return 1;
}

void ops_pool_retire(struct meta *m, struct pool *p, struct dropped **drops)
{
	if (retire_pages(m, p, drops))
		ops_pool_reap(m, p);
}

/* Submits a waited record for a rank; caller holds meta.lock. */
static struct rec *rank_rec(struct meta *m, enum rec_type type, int rank)
{
	struct rec *r = record_new(type);

	if (!r)
		return NULL;
	r->rank = (uint16_t)rank;
	r->waited = 1;
	record_submit(m, r);
	return r;
}

int meta_rank_exists(struct meta *m, int rank)
{
	int yes;

	if (rank < 0 || rank > META_RANK_MAX)
		return 0;
	index_lock(m);
	yes = index_rank_is_set(m, rank);
	index_unlock(m);
	return yes;
}

int meta_rank_create(struct meta *m, int rank)
{
	struct rec *r;

	if (rank < 0 || rank > META_RANK_MAX)
		return -EINVAL;
	if (m->cfg.read_only)
		return -EROFS;
	index_lock(m);
	if (index_rank_is_set(m, rank)) {
		index_unlock(m);
		return -EEXIST;
	}
	index_rank_set(m, rank, 1);
	m->ranks_busy++;
	r = rank_rec(m, REC_RANK_PUT, rank);
	index_unlock(m);
	int rc = r ? record_wait(m, r) : -ENOMEM;
	index_lock(m);
	m->ranks_busy--;
	m->ranks_made++;
	if (rc < 0)
		index_rank_set(m, rank, index_rank_has_pools(m, rank));
	index_unlock(m);
	return rc;
}

int meta_rank_remove(struct meta *m, int rank)
{
	struct rec *r;

	if (rank < 0 || rank > META_RANK_MAX)
		return -ENOENT;
	if (m->cfg.read_only)
		return -EROFS;
	index_lock(m);
	if (!index_rank_is_set(m, rank) || index_rank_has_pools(m, rank)) {
		int rc = index_rank_is_set(m, rank) ? -ENOTEMPTY : -ENOENT;
		index_unlock(m);
		return rc;
	}
	index_rank_set(m, rank, 0);
	m->ranks_busy++;
	r = rank_rec(m, REC_RANK_DEL, rank);
	index_unlock(m);
	/* A shared index checks again that no node made a pool in it. */
	int rc = r ? record_wait(m, r) : -ENOMEM;
	index_lock(m);
	m->ranks_busy--;
	m->ranks_made++;
	if (rc < 0 && rc != -ENOENT)
		index_rank_set(m, rank, 1);
	index_unlock(m);
	if (rc == -ENOENT && m->dir_cb) {
		m->dir_cb(m->dir_arg, rank, NULL); /* another node removed it first */
	}
	return rc;
}

int meta_rank_list(struct meta *m, int after, uint16_t *out, int max)
{
	int n = 0;

	index_lock(m);
	for (int r = after < 0 ? 0 : after + 1; r <= META_RANK_MAX && n < max; r++) {
		if (!m->ranks[r / 8]) {
			r |= 7; /* skip a whole empty byte */
			continue;
		}
		if (index_rank_is_set(m, r))
			out[n++] = (uint16_t)r;
	}
	index_unlock(m);
	return n;
}

int meta_pool_find(struct meta *m, int rank, const char *ns, struct meta_pool_info *out)
{
	index_lock(m);
	struct pool *p = index_pool_by_name(m, rank, ns);
	if (p && p->creating)
		p = NULL; /* visible once its row is committed */
	index_pool_fill_info(p, p ? out : NULL);
	index_unlock(m);
	return p ? 0 : -ENOENT;
}

int meta_pool_get(struct meta *m, uint32_t pool_id, struct meta_pool_info *out)
{
	index_lock(m);
	struct pool *p = index_pool_live(m, pool_id);
	if (p)
		index_pool_fill_info(p, out);
	index_unlock(m);
	return p ? 0 : -ENOENT;
}

int meta_pool_presence(struct meta *m, uint32_t pool_id, char *path, size_t len)
{
	const char *at = NULL;
	int rc = -EOPNOTSUPP;

	if (!m->cfg.presence_dir)
		return rc;
	index_lock(m);
	struct pool *p = index_pool_live(m, pool_id);
	rc = p ? index_presence_pool(p, m->cfg.presence_dir, m->cfg.presence_mode, &at) : -ENOENT;
	if (rc == 0 && snprintf(path, len, "%s", at) >= (int)len)
		rc = -ERANGE;
	index_unlock(m);
	return rc;
}

static struct rec *pool_rec(struct meta *m, enum rec_type type, const struct pool *p)
{
	struct rec *r = record_new(type);

	if (!r)
		return NULL;
	r->pool_id = p->id;
	r->rank = p->rank;
	memcpy(r->ns, p->ns, sizeof(r->ns));
	r->slot_size = p->slot_size;
	r->capacity = p->capacity;
	r->pool_update = !p->creating;
	r->rechunk = p->shared && r->pool_update && pool_chunk_slots(p->capacity) != p->chunk_slots;
	r->waited = 1;
	record_submit(m, r);
	return r;
}

/* 1 if fd is the file at path now (0 if not or unknown). */
static int is_file_at(int fd, const char *path)
{
	struct stat a, b;

	return fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
	       a.st_ino == b.st_ino;
}

/* Shared index, after a new pool's row was committed: the data file it
 * opened first may have been the file of a removed pool of that name
 * whose remover unlinked it since (the remover unlinks before the last
 * trace of the old pool, its retired row, leaves the index, and the new
 * row could only be inserted after that). Then the pool's file is
 * whatever is at the path now: made again, and put behind the same fd. */
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
	if (!slot_size || capacity_bytes < slot_size ||
	    meta_check_geometry(slot_size, capacity_bytes / slot_size) < 0)
		return -EINVAL;
	rc = record_data_path(m, rank, ns, path, sizeof(path));
	if (rc < 0)
		return rc;
	index_lock(m);
	rc = index_pool_by_name(m, rank, ns) ? -EEXIST : 0;
	index_unlock(m);
	if (rc < 0)
		return rc; /* checked again below, after the file is made */
	if (!(p = index_pool_new()))
		return errno == ENOSPC ? -ENOSPC : -ENOMEM;
	if (!(p->data_path = strdup(path))) {
		index_pool_free(p);
		return -ENOMEM;
	}
	p->rank = (uint16_t)rank;
	snprintf(p->ns, sizeof(p->ns), "%s", ns);
	p->slot_size = slot_size;
	p->capacity = capacity_bytes / slot_size;
	/* Data before metadata on an index of one daemon: the file exists
	 * before the index names it. On a shared index the row comes first:
	 * another node initializing the pool at the same moment took the
	 * slot size from the size of this node's new file (as of an SGLang
	 * file found with no pool), and its row could win: a pool of a slot
	 * size neither asked for. Once the row is in,
	 * whoever sees the file sees the pool. (A mount makes a missing file
	 * of a pool without pages.) */
	int made = 0, drc = 0;
	if (!m->shared &&
	    (rc = record_data_open(path, p->capacity * slot_size, 0, &p->fd, &made)) < 0) {
		log_error("cannot create data file %s: %s", path, strerror(-rc));
		index_pool_free(p);
		return rc;
	}
	index_lock(m);
	if (index_pool_by_name(m, rank, ns)) {
		index_unlock(m);
		index_pool_free(p); /* (the other pool's file: kept) */
		return -EEXIST;
	}
	p->id = (uint32_t)index_id_take(&m->pool_ids);
	p->shared = (uint8_t)m->shared;
	p->chunk_slots = pool_chunk_slots(p->capacity);
	if (!p->id) {
		index_unlock(m);
		if (made && !m->shared)
			unlink(path);
		index_pool_free(p);
		return -EAGAIN; /* no pool id left until the sync thread fetched more */
	}
	index_pool_link(m, p);
	index_pool_changed(p, index_now_ns());
	p->creating = 1;
	index_rank_set(m, rank, 1);
	m->ranks_busy++;
	r = pool_rec(m, REC_POOL_PUT, p);
	index_pool_fill_info(p, out);
	index_unlock(m);
	rc = r ? record_wait(m, r) : -ENOMEM;
	if (rc == 0 && m->shared &&
	    (drc = record_data_open(path, p->capacity * slot_size, 0, &p->fd, &made)) < 0)
		log_error("cannot create data file %s: %s", path, strerror(-drc));
	index_lock(m);
	p->creating = 0;
	p->created = ++m->pools_made;
	m->ranks_busy--;
	m->ranks_made++;
	index_unlock(m);
	if (drc < 0) {
		/* The row is in: out again, as an rmdir takes it. */
		uint32_t id = p->id;
		if ((rc = ops_pool_remove(m, id, 1)) < 0)
			log_warn("pool %d/%s stays in the index without its data file (%s): "
			         "'rmdir' it, or a mount makes the file",
			         rank, ns, strerror(-rc));
		return drc;
	}
	if (rc < 0) {
		index_lock(m);
		index_pool_unlink(m, p);
		index_unlock(m);
		if (made && !m->shared)
			unlink(path); /* the index never named it (shared: another node's may) */
		index_pool_free(p);
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
	index_lock(m);
	p = index_pool_live(m, pool_id);
	if (!p) {
		index_unlock(m);
		return -ENOENT;
	}
	old_size = p->slot_size;
	old_cap = p->capacity;
	slot_size = slot_size ? slot_size : old_size;
	capacity_bytes = capacity_bytes ? capacity_bytes : old_cap * old_size;
	new_cap = capacity_bytes / slot_size;
	rc = 0;
	/* Whole pages only: what was set must read back as set. */
	if (new_cap == 0 || capacity_bytes % slot_size != 0 ||
	    meta_check_geometry(slot_size, new_cap) < 0)
		rc = -EINVAL;
	else if ((slot_size != old_size && (p->pages || p->pending || p->nused)) ||
	         new_cap < index_slot_top(p) ||
	         /* nodes lease chunks of this size: it changes only while
	          * nothing is in the pool (the store checks the other nodes) */
	         (p->shared && pool_chunk_slots(new_cap) != p->chunk_slots &&
	          (p->pages || p->pending || p->nused || p->nchunks)))
		rc = -EBUSY;
	else if (new_cap * slot_size > old_cap * old_size &&
	         ftruncate(p->fd, (off_t)(new_cap * slot_size)) < 0)
		rc = -errno;
	if (rc < 0) {
		index_unlock(m);
		return rc;
	}
	p->slot_size = slot_size;
	p->capacity = new_cap;
	r = pool_rec(m, REC_POOL_PUT, p);
	m->pools_setting++;
	uint32_t old_chunk = p->chunk_slots;
	p->chunk_slots = pool_chunk_slots(new_cap); /* (a lease meanwhile: sized so) */
	if (!p->shared)
		p->chunk_slots = old_chunk;
	index_unlock(m);
	rc = r ? record_wait(m, r) : -ENOMEM;
	index_lock(m);
	m->pools_setting--;
	m->pools_set++; /* a reload read before it would undo it (sync.c) */
	if (rc < 0) {
		p->slot_size = old_size;
		p->capacity = old_cap;
		p->chunk_slots = old_chunk;
	}
	index_unlock(m);
	return rc;
}

/*
 * Shared index (docs/DESIGN.md, "Removing a pool"): the row is first
 * retired (a tombstone that fails every later commit and lease in the
 * pool) in a transaction that checks in the index that no page names the
 * pool and no other node may still read it; then the data file goes, then
 * the row. Called with meta.lock held and the local checks done; returns
 * with it released.
 */
static int remove_shared(struct meta *m, struct pool *p)
{
	index_assert_locked(m);
	struct dropped *drops = NULL;
	struct rec *r;
	int rc;

	p->removing = 1; /* keeps p allocated while the lock is released */
	for (int waited = 0;; waited += 50) {
		r = pool_rec(m, REC_POOL_RETIRE, p);
		index_unlock(m);
		rc = r ? record_wait(m, r) : -ENOMEM;
		if (rc != -EAGAIN || waited >= RETIRE_WAIT_MS)
			break;
		/* Another node has not yet acknowledged the pool's last frees,
		 * or still reads a page of it that was removed: heartbeats
		 * settle the first within a few hundred ms. */
		struct timespec ts = {0, 50 * 1000000L};
		index_cluster_kick(m);
		nanosleep(&ts, NULL);
		index_lock(m);
	}
	if (rc < 0) {
		if (rc == -EAGAIN)
			log_warn("pool %u/%s not removed: another node still reads a page of it "
			         "that was removed, or has not caught up with the removals",
			         p->rank, p->ns);
		int rank = p->rank;
		char ns[META_NS_MAX + 1];
		memcpy(ns, p->ns, sizeof(ns));
		index_lock(m);
		p->removing = 0;
		/* -ENOENT: another node retired or removed it first (the reload
		 * that saw it left it to this call). */
		if (rc == -ENOENT)
			ops_pool_retire(m, p, &drops); /* may free p */
		index_unlock(m);
		index_drops_notify(m, drops);
		if (rc == -ENOENT && m->dir_cb)
			m->dir_cb(m->dir_arg, rank, ns);
		return rc == -EAGAIN ? -EBUSY : rc;
	}
	index_lock(m);
	retire_pages(m, p, &drops); /* not reaped: p->removing holds it until the end */
	index_unlock(m);
	index_drops_notify(m, drops);
	/* No commit or lease lands in the pool now: its file may go. */
	if (p->keep_file) /* an undone import's adopted file */
		log_debug("data file %s of removed pool %u/%s kept", p->data_path, p->rank, p->ns);
	else if (!is_file_at(p->fd, p->data_path))
		log_warn("data file %s of removed pool %u/%s was replaced meanwhile; left alone",
		         p->data_path, p->rank, p->ns);
	else if (unlink(p->data_path) < 0 && errno != ENOENT)
		log_warn("cannot remove data file %s: %s", p->data_path, strerror(errno));
	r = pool_rec(m, REC_POOL_DEL, p);
	rc = r ? record_wait(m, r) : -ENOMEM;
	if (rc < 0)
		log_warn("pool %u/%s: its retired row stays in the index (%s); another node "
		         "deletes it once this one is gone, or 'pagefs fsck --repair' does",
		         p->rank, p->ns, strerror(-rc));
	index_lock(m);
	p->removing = 0;
	ops_pool_reap(m, p);
	index_unlock(m);
	return 0;
}

int meta_pool_remove(struct meta *m, uint32_t pool_id)
{
	return ops_pool_remove(m, pool_id, 0);
}

int ops_pool_remove(struct meta *m, uint32_t pool_id, int keep_file)
{
	struct pool *p;
	struct rec *r;
	int rc;

	if (m->cfg.read_only)
		return -EROFS;
	index_lock(m);
	p = index_pool_live(m, pool_id);
	/* (A shared index's slots in their grace period hold no page, nor do
	 * the slots a restart holds.) */
	if (!p || p->pages || p->pending || p->resv || pool_pinned(p) ||
	    pool_used(p) > (p->shared ? p->ngrace : 0)) {
		index_unlock(m);
		return p ? -ENOTEMPTY : -ENOENT;
	}
	if (p->removing) {
		index_unlock(m);
		return -EBUSY; /* another rmdir of it is running here */
	}
	p->keep_file = (uint8_t)(keep_file != 0);
	if (m->shared)
		return remove_shared(m, p);
	index_pool_unlink(m, p);
	r = pool_rec(m, REC_POOL_DEL, p);
	index_unlock(m);
	rc = r ? record_wait(m, r) : -ENOMEM;
	if (rc < 0) {
		index_lock(m);
		index_pool_link(m, p);
		index_unlock(m);
		return rc;
	}
	/* The data file holds no page any more: give its space back. */
	if (!p->keep_file && unlink(p->data_path) < 0 && errno != ENOENT)
		log_warn("cannot remove data file %s: %s", p->data_path, strerror(errno));
	index_pool_free(p);
	return 0;
}

int meta_pool_list(struct meta *m, int rank, uint32_t after, struct meta_pool_info *out, int max)
{
	int n = 0;

	index_lock(m);
	for (struct pool *p = m->pools; p && n < max; p = p->next)
		if (p->rank == rank && p->id > after && !p->removed && !p->creating)
			index_pool_fill_info(p, &out[n++]);
	index_unlock(m);
	return n;
}
