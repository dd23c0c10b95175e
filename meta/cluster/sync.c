/*
 * sync.c - the sync thread of a daemon on a shared (PostgreSQL) index:
 * what the other nodes changed reaches this node's memory, and this
 * node's pins and progress reach theirs.
 *
 * Every SYNC_TICK_MS it reads the change feed and brings the mirror to
 * the index's current rows (record_apply_remote), reloading pools when they
 * changed; every SYNC_BEAT_TICKS ticks it sends a heartbeat that renews
 * the node's lease, acknowledges the feed position and lists the slots
 * its readers pin (so no node evicts or reuses them), and learns when freed
 * slots of this node's chunks may be reused (grace periods, slots.c) and
 * which chunks to hand over to nodes that asked for one (chunks.c). It
 * also keeps a spare block of page and pool ids. See docs/DESIGN.md.
 *
 * Locks: store calls run with no engine lock held; the mirror is changed
 * under meta.lock; drop callbacks run after it is released.
 */
#include "meta/cluster.h"
#include "meta/counters.h"
#include "meta/log.h"
#include "meta/ops.h"
#include "meta/record.h"
#include "meta/store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SYNC_TICK_MS 50
#define SYNC_BEAT_TICKS 4

struct sync {
	pthread_t thread;
	pthread_mutex_t lock; /* protects stop */
	pthread_cond_t wake;
	int stop;
	int pools_changed;       /* sync thread only */
	int reload_again;        /* sync thread only: reload the pools at the next poll */
	struct store_change *ch; /* sync thread only: changes of one poll */
	size_t nch, cap;
};

/* ---- pools ---- */

struct pool_rows {
	struct store_pool_row *rows;
	size_t n, cap;
	uint8_t ranks[(META_RANK_MAX + 1) / 8];
};

static int row_rank(void *arg, int rank)
{
	struct pool_rows *pr = arg;

	if (rank >= 0 && rank <= META_RANK_MAX)
		pr->ranks[rank / 8] |= (uint8_t)(1u << (rank % 8));
	return 0;
}

static int row_pool(void *arg, const struct store_pool_row *row)
{
	struct pool_rows *pr = arg;

	if (pr->n == pr->cap) {
		size_t cap = pr->cap ? pr->cap * 2 : 16;
		struct store_pool_row *r = realloc(pr->rows, cap * sizeof(*r));
		if (!r)
			return -ENOMEM;
		pr->rows = r;
		pr->cap = cap;
	}
	pr->rows[pr->n++] = *row;
	return 0;
}

static int row_present(const struct pool_rows *pr, uint32_t id)
{
	for (size_t i = 0; i < pr->n; i++)
		if (pr->rows[i].id == id)
			return !pr->rows[i].retired;
	return 0;
}

/* Brings the pools and ranks in memory to the index's rows: pools and
 * ranks other nodes made appear, those they removed go (pool.c), and the
 * kernel forgets the names of those that went (the dir callback). 1 when
 * it must run again: the store failed, or a row collided with a pool this
 * node is creating (whose create fails if the row is another node's). */
static int reload_pools(struct meta *m)
{
	int again = 0;

	struct pool_rows pr = {0};
	struct store_load_cb cb = {&pr, row_rank, row_pool, NULL, NULL};
	struct dropped *drops = NULL;
	struct gone_dir *dirs = NULL;
	char err[512];

	/* Pools and ranks this node creates while the rows are read may be
	 * missing from them: those are kept. */
	index_lock(m);
	uint64_t made = m->pools_made, ranks_made = m->ranks_made, set = m->pools_set;
	index_unlock(m);
	if (m->store->sync->pools(m->store, &cb) < 0) {
		free(pr.rows);
		return 1;
	}
	for (size_t i = 0; i < pr.n; i++) {
		const struct store_pool_row *row = &pr.rows[i];
		if (row->retired)
			continue; /* being removed: gone below */
		index_lock(m);
		struct pool *p = index_pool_by_id(m, row->id);
		if (p && !p->removed && (m->pools_set != set || m->pools_setting)) {
			again = 1; /* rows read before a change here: read again */
		} else if (p && !p->removed) {
			p->slot_size = row->slot_size;
			p->capacity = row->capacity;
			/* Resized while nobody held a chunk of it (the store
			 * checked): chunks of the new size from now on. */
			if (pool_chunk_slots(p->capacity) != p->chunk_slots && !p->nchunks)
				p->chunk_slots = pool_chunk_slots(p->capacity);
		}
		index_unlock(m);
		if (p)
			continue;
		/* A pool another node made: open its data file outside the lock. */
		if (record_pool_from_row(m, row, 0, &p, err, sizeof(err)) < 0) {
			log_warn("cannot serve pool %u/%s made by another node: %s", row->rank,
			         row->ns, err);
			continue;
		}
		index_lock(m);
		struct pool *q = index_pool_by_name(m, row->rank, row->ns);
		if (index_pool_by_id(m, row->id) || q) {
			again |= q && q->id != row->id && q->creating;
			index_unlock(m);
			index_pool_free(p);
			continue;
		}
		index_pool_link(m, p);
		index_rank_set(m, p->rank, 1);
		index_unlock(m);
	}
	index_lock(m);
	/* Pools another node removed (retired or deleted their rows; it
	 * removes empty ones only). A pool whose row this node is retiring
	 * itself is left to pool.c. */
	for (struct pool *p = m->pools, *next; p; p = next) {
		next = p->next;
		if (p->removed || p->removing || p->creating || p->created > made ||
		    row_present(&pr, p->id))
			continue;
		index_dirs_add(&dirs, p->rank, p->ns);
		ops_pool_retire(m, p, &drops); /* may free p */
	}
	/* Ranks: those another node made appear; those it removed go, unless
	 * this node made or removed one, or is doing so, meanwhile (the rows
	 * may predate it; the next reload, which that change brings, decides). */
	int settled = !m->ranks_busy && m->ranks_made == ranks_made;
	for (size_t i = 0; i < pr.n; i++)
		if (!pr.rows[i].retired)
			pr.ranks[pr.rows[i].rank / 8] |= (uint8_t)(1u << (pr.rows[i].rank % 8));
	for (int r = 0; r <= META_RANK_MAX; r++) {
		int in_index = (pr.ranks[r / 8] >> (r % 8)) & 1;
		if (in_index && !index_rank_is_set(m, r) && settled) {
			index_rank_set(m, r, 1);
		} else if (!in_index && index_rank_is_set(m, r) && settled &&
		           !index_rank_has_pools(m, r)) {
			index_rank_set(m, r, 0);
			index_dirs_add(&dirs, r, NULL);
		}
	}
	index_unlock(m);
	index_drops_notify(m, drops);
	index_dirs_notify(m, dirs);
	free(pr.rows);
	return again;
}

/* ---- the feed ---- */

static int collect(void *arg, const struct store_change *c)
{
	struct sync *y = arg;

	if (c->pools) {
		y->pools_changed = 1;
		return 0;
	}
	if (y->nch == y->cap) {
		size_t cap = y->cap ? y->cap * 2 : 64;
		struct store_change *n = realloc(y->ch, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		y->ch = n;
		y->cap = cap;
	}
	y->ch[y->nch++] = *c;
	return 0;
}

/*
 * The feed returns each page as the index holds it when the feed is read:
 * a rename over a name deletes the page the name had, and when a later
 * transaction (outside this batch: it reads only transactions below the
 * xmin) has already renamed yet another page over that name, the batch
 * deletes the name's page and holds none for it. Between this batch and
 * the next (50 ms) the name would be missing here. So the names the batch
 * takes a page from are looked up in the index now, and their current
 * rows applied with the batch. Appends them to y->ch; errors only lose
 * that help.
 */
static void add_current_names(struct meta *m, struct sync *y)
{
	size_t nb = y->nch, n = 0;
	char(*names)[META_NAME_MAX + 1] = NULL;
	const char **ptr = NULL;
	size_t *lens = NULL;
	uint32_t *pools = NULL;

	for (size_t i = 0; i < nb; i++)
		n += !y->ch[i].exists;
	if (!n || !(names = malloc(n * sizeof(*names))) || !(ptr = malloc(n * sizeof(*ptr))) ||
	    !(lens = malloc(n * sizeof(*lens))) || !(pools = malloc(n * sizeof(*pools))))
		goto out;
	n = 0;
	index_lock(m);
	for (size_t i = 0; i < nb; i++) {
		struct page *p =
			y->ch[i].exists ? NULL : index_idtable_find(&m->by_id, y->ch[i].page_id);
		if (!p || !p->committed)
			continue;
		index_pname_text(p, names[n]);
		pools[n++] = page_pool(p)->id;
	}
	index_unlock(m);
	/* one query per pool (a batch is mostly one pool) */
	for (size_t i = 0; i < n; i++) {
		size_t k = 0;
		if (pools[i] == 0)
			continue;
		uint32_t pool = pools[i];
		for (size_t j = i; j < n; j++)
			if (pools[j] == pool) {
				ptr[k] = names[j];
				lens[k++] = strlen(names[j]);
				pools[j] = 0;
			}
		m->store->sync->named(m->store, pool, ptr, lens, k, collect, y);
	}
out:
	free(names);
	free(ptr);
	free(lens);
	free(pools);
}

static void poll_feed(struct meta *m, struct sync *y)
{
	struct dropped *drops = NULL;

	y->nch = 0;
	y->pools_changed = y->reload_again;
	y->reload_again = 0;
	/* This node's own changes from here on are newer than the rows the
	 * batch reads (record_apply_remote leaves those pages alone). */
	index_lock(m);
	uint64_t read_at = index_feed_mark(m);
	index_unlock(m);
	if (m->store->sync->poll(m->store, collect, y) < 0) {
		y->reload_again = y->pools_changed;
		return; /* the same changes come again at the next poll */
	}
	metrics_feed();
	if (y->pools_changed)
		y->reload_again = reload_pools(m);
	if (!y->nch)
		return;
	size_t batch = y->nch;
	add_current_names(m, y);
	index_lock(m);
	index_feed_begin(m, read_at);
	for (size_t i = 0; i < y->nch; i++) {
		/* A current row read for a name (after the batch) only fills a
		 * name the batch left without a page, with a page this node does
		 * not know: this node may have committed or renamed over the
		 * name since it was read (its own changes never come back
		 * through the feed to correct a stale row). */
		const struct rec *r = &y->ch[i].row;
		if (i >= batch && (index_table_find_name(&m->by_name, r->pool_id, r->name, NULL) ||
		                   index_idtable_find(&m->by_id, r->page_id)))
			continue;
		record_apply_remote(m, &y->ch[i], &drops);
	}
	index_feed_end(m);
	/* A page deleted in a transaction that gave its name to another (a
	 * rename over it on another node: its deletion may come first) was
	 * replaced, not removed: a reader here that still reaches it looks
	 * the name up again (meta_page_replaced). */
	for (struct dropped *d = drops; d; d = d->next) {
		struct page *now = index_table_find_name(&m->by_name, d->pool_id, d->name, NULL);
		if (now && now->id != d->page_id && !index_idtable_find(&m->by_id, d->page_id))
			index_page_replaced_id(m, d->page_id);
	}
	index_unlock(m);
	index_drops_notify(m, drops);
}

/* ---- heartbeat ---- */

/* Pool removals whose node died half way, taken over by this node: the
 * retired row still holds the name, so the file at the path is the
 * removed pool's; it goes, then the row (pool.c's last two steps). */
static void finish_orphans(struct meta *m, const struct store_pool_row *rows, size_t n)
{
	char path[4096];

	for (size_t i = 0; i < n; i++) {
		const struct store_pool_row *o = &rows[i];
		struct rec *r = record_new(REC_POOL_DEL);
		if (!r)
			return; /* the row stays, taken over again once this node is gone */
		if (record_data_path(m, o->rank, o->ns, path, sizeof(path)) == 0 &&
		    unlink(path) < 0 && errno != ENOENT)
			log_warn("cannot remove data file %s: %s", path, strerror(errno));
		log_warn("pool %u/%s: finished its removal, which a node that died left half way",
		         o->rank, o->ns);
		r->pool_id = o->id;
		r->rank = o->rank;
		record_submit(m, r);
	}
}

static void heartbeat(struct meta *m)
{
	uint64_t(*pins)[2] = NULL;
	size_t npins = 0;
	struct store_peers peers;
	struct dropped *drops = NULL;

	index_lock(m);
	for (struct pool *p = m->pools; p; p = p->next)
		npins += index_slots_pinned(p, NULL, 0);
	if (npins && (pins = calloc(npins, sizeof(*pins)))) {
		size_t n = 0;
		for (struct pool *p = m->pools; p; p = p->next)
			n += index_slots_pinned(p, pins + n, npins - n);
	}
	index_unlock(m);
	if (npins && !pins)
		return; /* no ack without the pins: try again */
	int64_t began = cluster_lease_clock();
	int rc = m->store->sync->heartbeat(m->store, (const uint64_t(*)[2])pins, npins, &peers);
	free(pins);
	if (rc < 0)
		return;
	metrics_heartbeat();
	if (peers.fenced)
		cluster_lease_lost(m);
	else
		cluster_lease_renewed(m, began);
	index_lock(m);
	m->live_nodes = peers.live;
	if (peers.fenced && !m->fenced) {
		m->fenced = 1;
		log_error("this node's lease on index %s ran out (another node removed it): it "
		          "reads and writes no page any more (EIO); remount it",
		          m->db_path);
	}
	for (struct pool *p = m->pools; p; p = p->next)
		index_grace_release(p, peers.min_ack, (const uint64_t(*)[2])peers.pins,
		                    peers.npins);
	index_peer_pins_set(m, peers.pins, peers.npins); /* (takes them over) */
	if (!m->fenced)
		cluster_chunks_handover(m, (const uint64_t(*)[3])peers.wants, peers.nwants, &drops);
	index_unlock(m);
	index_drops_notify(m, drops);
	free(peers.wants);
	finish_orphans(m, peers.orphans, peers.norphans);
	free(peers.orphans);
}

/* Keeps a spare block of ids so that allocation never waits for one. */
static void top_up_ids(struct meta *m)
{
	for (int pool = 0; pool < 2; pool++) {
		struct idblock *b = pool ? &m->pool_ids : &m->page_ids;
		uint64_t first, count;
		index_lock(m);
		int need = b->spare_count == 0;
		index_unlock(m);
		if (!need || m->store->sync->ids(m->store, pool, &first, &count) < 0)
			continue;
		index_lock(m);
		b->spare_first = first;
		b->spare_count = count;
		index_unlock(m);
	}
}

static void *sync_main(void *arg)
{
	struct meta *m = arg;
	struct sync *y = m->sync;

	for (unsigned tick = 0;; tick++) {
		poll_feed(m, y);
		if (tick % SYNC_BEAT_TICKS == 0) {
			heartbeat(m);
			top_up_ids(m);
		}
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += SYNC_TICK_MS * 1000000L;
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		pthread_mutex_lock(&y->lock);
		if (!y->stop)
			pthread_cond_timedwait(&y->wake, &y->lock, &until);
		int stop = y->stop;
		pthread_mutex_unlock(&y->lock);
		if (stop)
			break;
	}
	return NULL;
}

int cluster_sync_start(struct meta *m, char *err, size_t errlen)
{
	struct sync *y = calloc(1, sizeof(*y));
	int rc;

	if (!y) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	pthread_mutex_init(&y->lock, NULL);
	pthread_cond_init(&y->wake, NULL);
	m->sync = y;
	rc = pthread_create(&y->thread, NULL, sync_main, m);
	if (rc) {
		snprintf(err, errlen, "cannot start the sync thread: %s", strerror(rc));
		m->sync = NULL;
		free(y);
		return -rc;
	}
	return 0;
}

void cluster_sync_stop(struct meta *m)
{
	struct sync *y = m->sync;

	if (!y)
		return;
	pthread_mutex_lock(&y->lock);
	y->stop = 1;
	pthread_cond_signal(&y->wake);
	pthread_mutex_unlock(&y->lock);
	pthread_join(y->thread, NULL);
	pthread_cond_destroy(&y->wake);
	pthread_mutex_destroy(&y->lock);
	free(y->ch);
	free(y);
	m->sync = NULL;
}

/* Waits (outside meta.lock) for the next heartbeat to have run. */
void cluster_sync_kick(struct meta *m)
{
	struct sync *y = m->sync;

	if (!y)
		return;
	pthread_mutex_lock(&y->lock);
	pthread_cond_signal(&y->wake);
	pthread_mutex_unlock(&y->lock);
}

const struct cluster_ops cluster_ops = {
	.kick = cluster_sync_kick,
};
