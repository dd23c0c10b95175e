/*
 * apply.c - mirrors durable records in memory.
 *
 * Runs in the journal's batch writer with meta.lock held, in the order the store
 * applied the records, and does exactly what the store's statements did
 * (see store_sqlite.c), so memory and store never disagree even when two
 * operations on one name race. A page that goes away frees its slot
 * through index_slot_put: at once, or when its last reader unpins it.
 *
 * On a shared index record_apply_remote does the same for changes other nodes
 * made, from the page's current row in the index (the feed's order and
 * duplicates therefore do not matter).
 */
#include "meta/log.h"
#include "meta/record.h"
#include "meta/store.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* A page of this record left: its slot is free (or pinned), or, in a
 * chunk of this node on a shared index, in its grace period from this
 * transaction on (the change feed reports the same). */
static void free_slot(struct meta *m, struct pool *pool, uint64_t slot, const struct rec *r)
{
	/* In a pool HTTP clients read, a slot waits out the quarantine
	 * whoever freed it: a client that looked the page up just before may
	 * still read it. */
	if (!pool->shared && index_hook_slot_freed(m, pool, slot))
		return; /* (shared: record_apply_remote, from the feed) */
	index_slot_put(pool, slot);
	if (pool->shared && index_chunk_owned(pool, chunk_of(pool, slot)))
		index_grace_add(pool, slot, r->xid);
}

/* The committed page of the record's name in pool, or NULL. */
static struct page *named(struct meta *m, const struct pool *pool, const struct rec *r)
{
	return index_table_find_hashed(&m->by_name, index_name_hash(pool->id, r->name, r->name_len),
	                               pool->id, r->name, r->name_len);
}

/* Removes old (the committed page of a name, or NULL) unless it is keep_id. */
static void remove_other(struct meta *m, const struct rec *r, struct pool *pool, struct page *old,
                         uint64_t keep_id, struct dropped **drops)
{
	if (!old || old->id == keep_id)
		return;
	index_page_replaced(m, old);
	index_page_unlink_committed(m, old);
	free_slot(m, pool, old->slot, r);
	if (drops)
		index_drops_add(drops, old);
	index_page_free(old);
}

static void apply_commit(struct meta *m, const struct rec *r, struct dropped **drops)
{
	struct pool *pool = index_pool_by_id(m, r->pool_id);
	struct page *p;

	if (!pool)
		return;
	p = index_idtable_find(&m->by_id, r->page_id);
	/* A replacement updated its row in place and kept the row's name
	 * (the store put it in the record: a rename may have come first); a
	 * new page takes its name from any other. */
	if (!r->in_place)
		remove_other(m, r, pool, named(m, pool, r), r->page_id, drops);
	if (p && p->committed) {
		/* In-place replacement (open with O_TRUNC): new slot, same id. */
		index_page_local(m, p->id);
		pool->bytes -= p->length;
		if (p->slot != r->slot)
			free_slot(m, pool, p->slot, r);
		page_new_version(p);
		index_pool_changed(pool, index_now_ns());
		index_ctime_del(&m->ctimes, p->id); /* its ctime is the commit's */
	} else if (p) {
		/* A new page: leaves the pending state, relinked below. */
		pool->pending--;
		index_table_del_name(&m->by_name, p);
		index_idtable_del(&m->by_id, p);
	} else if (r->in_place) {
		/* A replacement whose page the engine dropped since (its row
		 * was there, the store updated it): the drop, later in this
		 * batch or queued, deletes the row; the rewrite's slot is free
		 * once it has (or now, if another node deleted the row). A
		 * rewrite before this one gave the drop its slot, which no row
		 * names any more: free now. */
		struct rec *d = record_drop_after(m, r);
		if (!d) {
			free_slot(m, pool, r->slot, r);
			return;
		}
		if (d->has_extra)
			free_slot(m, pool, d->extra_slot, r);
		d->extra_slot = r->slot;
		d->has_extra = 1;
		return;
	} else {
		/* (A new page is pending until this apply: not reached.) */
		log_error("commit of page %llu found no page in memory; its row stays until "
		          "remount",
		          (unsigned long long)r->page_id);
		return;
	}
	index_page_take_row(p, r);
	if (p->committed) {
		pool->bytes += p->length;
		index_lru_touch(pool, p);
	} else {
		index_page_link_committed(m, p, index_page_name_hash(p), index_now_ns());
	}
}

static void apply_rename(struct meta *m, const struct rec *r)
{
	struct pool *pool = index_pool_by_id(m, r->pool_id);
	struct page *p = index_idtable_find(&m->by_id, r->page_id);
	struct page *q;

	if (!pool)
		return;
	/* The store found the page (else the record failed): the name's
	 * other page went, even if this one left memory since it was queued
	 * (an eviction; its drop follows). */
	remove_other(m, r, pool, named(m, pool, r), r->page_id, NULL);
	if (!p || !p->committed)
		return;
	q = index_page_alloc(r->name, r->name_len);
	if (!q) {
		log_error("out of memory applying a rename; restart the daemon");
		return;
	}
	/* The name lives inside the struct: move the page into a new one
	 * (everything before its chain link and the name). */
	index_page_unlink_committed(m, p);
	memcpy(q, p, offsetof(struct page, name_next));
	index_page_free(p);
	index_page_link_committed(m, q, index_name_hash(pool->id, r->name, r->name_len),
	                          index_now_ns());
	index_ctime_set(&m->ctimes, q->id, index_now_ns());
}

/* A chunk this node now holds: its used slots and those still in their
 * grace period stay taken. */
static void apply_lease(struct meta *m, const struct rec *r)
{
	struct pool *pool = index_pool_by_id(m, r->pool_id);

	if (!pool || index_chunk_own(pool, r->chunk) < 0)
		return;
	uint64_t k = pool->chunk_slots;
	pool->lease_from = r->chunk + 1; /* (past the end: the store starts anywhere) */

	for (uint64_t i = 0; i < k && r->chunk * k + i < pool->capacity; i++) {
		uint64_t slot = r->chunk * k + i, bit = 1ULL << i;
		if ((r->used_bits | r->grace_bits) & bit)
			index_slot_mark(pool, slot); /* -EEXIST: the mirror knew it */
		/* A slot a page holds again has no grace period left to run:
		 * its end would free the slot under that page. */
		if ((r->grace_bits & bit) && !(r->used_bits & bit))
			index_grace_add(pool, slot, r->grace_xid);
		if (r->pinned_bits & bit)
			index_lease_pin_add(m, pool->id, slot); /* not evicted here meanwhile */
	}
}

/* Drops a committed page from the mirror because the index no longer has
 * it (under that id or that name). */
static void remote_drop(struct meta *m, struct page *p, struct dropped **drops)
{
	struct pool *pool = page_pool(p);

	index_page_unlink_committed(m, p);
	index_slot_put(pool, p->slot);
	index_drops_add(drops, p);
	index_page_free(p);
}

void record_apply_remote(struct meta *m, const struct store_change *c, struct dropped **drops)
{
	index_assert_locked(m);
	struct pool *pool = index_pool_by_id(m, c->pool_id);
	const struct rec *r = &c->row;
	struct page *p, *o;

	if (!pool || pool->removed)
		return; /* (no commit lands in a removed pool: the index checks) */
	if (c->freed_slot >= 0) {
		uint64_t slot = (uint64_t)c->freed_slot;
		if (index_chunk_owned(pool, chunk_of(pool, slot)))
			index_grace_add(pool, slot, c->xid);
		/* A pool this node's HTTP clients read: whichever node freed
		 * the slot, it waits out the quarantine, pinned before this
		 * node acknowledges the change (the sync thread does both), so
		 * no node reuses it meanwhile. This node's own frees come here
		 * too: the writer thread applies them after the commit, when a
		 * heartbeat may already have acknowledged them. */
		index_hook_slot_freed(m, pool, slot);
	}
	if (c->node == m->store->node_id)
		return; /* this node's own change: memory has it already */
	p = index_idtable_find(&m->by_id, c->page_id);
	if (p && !p->committed)
		return; /* ids are never shared between nodes */
	if (!c->exists) {
		if (p)
			remote_drop(m, p, drops);
		return;
	}
	if (r->pool_id != pool->id || r->slot >= pool->capacity || r->length > pool->slot_size)
		return;
	if (r->page_id >
	    META_PAGE_ID_MAX) { /* (a page keeps 48 bits; the sequence never gets there) */
		log_error("page %llu of another node has an id past %llu: not loaded here",
		          (unsigned long long)r->page_id, (unsigned long long)META_PAGE_ID_MAX);
		return;
	}
	o = index_table_find_name(&m->by_name, pool->id, r->name, NULL);
	/* The feed read this row before this node itself changed the page
	 * (evicted, unlinked, replaced or rewrote it) or gave its name to a
	 * page of its own: the row is older than memory, and the change that
	 * supersedes it in the index is this node's, which the feed never
	 * brings (above). Applied, it would bring back a page whose slot is
	 * freed and reused, or take the name from a page that has it now. */
	if ((!p && index_page_local_since(m, r->page_id) > 0) ||
	    /* (a rewrite on another node after this node's: a newer version) */
	    (p && p->slot != r->slot && (int16_t)(r->version - p->version) <= 0 &&
	     index_page_local_since(m, r->page_id) > 0) ||
	    (o && o->id != r->page_id && index_page_local_since(m, o->id) > 0)) {
		log_info("feed: the row of page %llu (%s, slot %llu, from node %u) was read "
		         "before this node's own change of it or its name: left alone",
		         (unsigned long long)r->page_id, r->name, (unsigned long long)r->slot,
		         c->node);
		return;
	}
	if (o && o->id != r->page_id) {
		index_page_replaced(m, o);
		remote_drop(m, o, drops); /* that name is this page's now */
	}
	if (p && p->slot == r->slot && p->length == r->length && p->checksum == r->checksum &&
	    p->has_checksum == r->has_checksum && index_pname_eq(p, r->name, r->name_len))
		return; /* nothing this node does not know */
	if (p && !index_pname_eq(p, r->name, r->name_len)) {
		/* Renamed: the same page under its new name, in the same slot,
		 * which a reader here may pin (dropped and made again, its slot
		 * was freed at that reader's close though the page kept it). */
		struct page *q = index_page_alloc(r->name, r->name_len);
		if (!q) {
			remote_drop(m, p, drops); /* made again below, if memory allows */
			p = NULL;
		} else {
			index_drops_add(drops, p); /* the kernel forgets the old name */
			index_page_unlink_committed(m, p);
			memcpy(q, p, offsetof(struct page, name_next));
			index_page_free(p);
			p = q;
			int64_t now = index_now_ns();
			index_page_link_committed(
				m, p, index_name_hash(pool->id, r->name, r->name_len), now);
			index_ctime_set(&m->ctimes, p->id, now);
		}
	}
	if (p) {
		/* Replaced in place on another node: new slot, new version. */
		pool->bytes -= p->length;
		if (p->slot != r->slot) {
			index_slot_put(pool, p->slot);
			index_slot_mark(pool, r->slot);
			index_grace_forget(pool, r->slot); /* see below */
			page_new_version(p);
			/* The writer's version, unless this node is past it
			 * already (its own new versions: the numbers it gave
			 * out are not given again to other bytes). */
			if ((int16_t)(r->version - p->version) > 0)
				p->version = r->version;
		}
		pool->bytes += r->length;
	} else {
		if (!(p = index_page_alloc(r->name, r->name_len))) {
			log_error(
				"out of memory applying another node's change; restart the daemon");
			return;
		}
		p->id = r->page_id;
		p->version = r->version;
		page_set_pool(p, pool);
		index_slot_mark(pool, r->slot);
		/* A free of this slot that the feed brought in after this
		 * node leased its chunk came before this page (a lease reads
		 * the rows; the feed may be behind it): the slot is taken. */
		index_grace_forget(pool, r->slot);
	}
	index_page_take_row(p, r);
	p->gen = r->gen;
	if (!p->committed)
		index_page_link_committed(m, p, index_name_hash(pool->id, r->name, r->name_len),
		                          index_now_ns());
	index_drops_add(drops, p);
}

void record_apply(struct meta *m, const struct rec *r, struct dropped **drops)
{
	index_assert_locked(m);
	struct pool *pool;
	struct page *p;
	int64_t now;

	if (r->type == REC_DROP) {
		/* The page left memory when it was dropped; its slot may be
		 * reused only once the store no longer names it. */
		pool = index_pool_by_id(m, r->pool_id);
		if (r->err < 0) {
			log_error("slot %llu of pool %u stays reserved until remount: the index "
			          "could not record that its page was dropped",
			          (unsigned long long)r->drop_slot, r->pool_id);
			if (r->has_extra)
				log_error("so does slot %llu of pool %u, where it was rewritten",
				          (unsigned long long)r->extra_slot, r->pool_id);
			return;
		}
		/* Durable now: a feed row read before this is older than it. */
		index_page_local(m, r->page_id);
		if (pool && !r->handoff)
			free_slot(m, pool, r->drop_slot, r);
		if (pool && r->has_extra) /* a rewrite's, never handed out */
			free_slot(m, pool, r->extra_slot, r);
		/* On a shared index another node's change may have brought the
		 * page back meanwhile (record_apply_remote); the store deleted it. */
		p = index_idtable_find(&m->by_id, r->page_id);
		if (pool && p && p->committed) {
			index_page_unlink_committed(m, p);
			if (p->slot != r->drop_slot && !(r->has_extra && p->slot == r->extra_slot))
				free_slot(m, pool, p->slot, r);
			index_drops_add(drops, p);
			index_page_free(p);
		}
		return;
	}
	if (r->err < 0) {
		struct held_chunk *h =
			r->type == REC_RELEASE && (pool = index_pool_by_id(m, r->pool_id))
				? index_chunk_find(pool, r->chunk)
				: NULL;
		if (h)
			h->releasing = 0; /* the next heartbeat tries again */
		return;
	}
	switch (r->type) {
	case REC_COMMIT:
		apply_commit(m, r, drops);
		break;
	case REC_UNLINK:
		index_page_local(m, r->page_id); /* (as for REC_DROP) */
		p = index_idtable_find(&m->by_id, r->page_id);
		if (p && p->committed) {
			index_page_unlink_committed(m, p);
			free_slot(m, page_pool(p), p->slot, r);
			index_page_free(p);
		}
		break;
	case REC_RENAME:
		apply_rename(m, r);
		break;
	case REC_LEASE:
		if (r->err != LEASE_ASKED)
			apply_lease(m, r);
		break;
	case REC_RELEASE:
		if ((pool = index_pool_by_id(m, r->pool_id)))
			index_chunk_disown(pool, r->chunk);
		break;
	case REC_BULK:
		/* Oldest first: each link makes the page the most recent. As
		 * the store did, a page replaces another of its name. */
		now = index_now_ns();
		for (size_t i = 0; i < r->bulk->n; i++) {
			const struct bulk *k = r->bulk;
			index_table_prefetch_ahead(&m->by_name, &m->by_id, k->pages, k->hash, k->n,
			                           i);
			struct page *b = k->pages[i];
			remove_other(m, r, page_pool(b),
			             index_table_find_same(&m->by_name, b, k->hash[i]), b->id,
			             drops);
			index_page_link_committed(m, b, k->hash[i], now);
			/* It appeared without a FUSE create (a key confirmed over
			 * HTTP): the kernel may cache a miss for the name. */
			if (m->drop_cb)
				index_drops_add(drops, b);
		}
		break;
	default:
		break; /* pools, ranks, settings, touches: applied before submit */
	}
}
