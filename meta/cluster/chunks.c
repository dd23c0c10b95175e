/*
 * chunks.c - slots of a pool on a shared index: the chunks of slots this
 * node leased, allocation inside them, and the grace period of a freed
 * slot before its chunk's holder reuses it.
 *
 * A node writes pages only into chunks it holds (pagefs_chunks: one
 * holder per chunk), so two nodes never pick one slot. A chunk is 64
 * slots, fewer in small pools (pool_chunk_slots). A slot freed anywhere
 * keeps its bit set in the holder's bitmap until every live node has
 * acknowledged the freeing transaction (it dropped the page from its
 * mirror: no new reader can pin it) and no node still pins it
 * (pagefs_pins) or reads it here. A chunk goes to another node that
 * asked for one when this node holds more than its fair share (handover:
 * drained, its pages evicted, released once no write of this node is in
 * flight in it), and when it is empty beyond a small reserve. See
 * docs/DESIGN.md ("Global eviction"). Callers hold meta.lock.
 */
#include "meta/cluster.h"
#include "meta/log.h"
#include "meta/ops.h"
#include "meta/record.h"
#include "meta/store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHUNK_RESERVE 2 /* empty chunks a node keeps per pool */

/* ---- handover: a chunk given to a node that asked for one ---- */

/* The chunk of p to hand over: held, not draining, none of its slots
 * pinned here if there is such a chunk, and the one whose most recently
 * used page is the oldest (one without pages first). */
static struct held_chunk *lru_chunk(const struct meta *m, struct pool *p)
{
	uint64_t total = (p->capacity + p->chunk_slots - 1) / p->chunk_slots;
	uint8_t *cand = calloc((size_t)(total + 7) / 8, 1);
	uint8_t *pinned = calloc((size_t)(total + 7) / 8, 1);
	struct held_chunk *pick = NULL;
	size_t ncand = 0, free_of_pins = 0, distinct = 0;
	uint64_t last = 0;

#define BIT(a, i) (((a)[(i) / 8] >> ((i) % 8)) & 1)
#define SET(a, i) ((a)[(i) / 8] |= (uint8_t)(1u << ((i) % 8)))
	for (size_t i = 0; i < p->nchunks && !pick; i++)
		if (!p->chunks[i].draining && (!cand || !pinned))
			pick = &p->chunks[i]; /* out of memory: any will do */
	if (!cand || !pinned) {
		free(cand);
		free(pinned);
		return pick;
	}
	pick = NULL;
	for (int b = 0; b < PIN_BUCKETS; b++)
		for (const struct pin *q = p->pins[b]; q; q = q->next)
			if (chunk_of(p, q->slot) < total)
				SET(pinned, chunk_of(p, q->slot));
	for (size_t i = 0; i < m->npeer_pins; i++)
		if (m->peer_pins[i][0] == p->id && chunk_of(p, m->peer_pins[i][1]) < total)
			SET(pinned, chunk_of(p, m->peer_pins[i][1]));
	for (size_t i = 0; i < p->nchunks; i++)
		if (!p->chunks[i].draining && p->chunks[i].chunk < total &&
		    !BIT(pinned, p->chunks[i].chunk))
			free_of_pins++;
	for (size_t i = 0; i < p->nchunks; i++) {
		uint64_t c = p->chunks[i].chunk;
		if (!p->chunks[i].draining && c < total && (!free_of_pins || !BIT(pinned, c))) {
			SET(cand, c);
			ncand++;
		}
	}
	/* From the most recent page on, the candidate met last is the one
	 * whose newest page is the oldest. */
	for (const struct page *g = p->lru_head; g && distinct < ncand; g = page_at(g->lru_next)) {
		uint64_t c = chunk_of(p, g->slot);
		if (c < total && BIT(cand, c)) {
			cand[c / 8] &= (uint8_t) ~(1u << (c % 8));
			distinct++;
			last = c;
		}
	}
	for (size_t i = 0; i < p->nchunks && !pick; i++) {
		uint64_t c = p->chunks[i].chunk;
		if (distinct < ncand ? c < total && BIT(cand, c) : distinct && c == last)
			pick = &p->chunks[i]; /* (a candidate without pages is still marked) */
	}
#undef BIT
#undef SET
	free(cand);
	free(pinned);
	return pick;
}

/* Evicts the unpinned pages of a drained chunk through the journal (so
 * their frees get grace periods like any other) and queues its release
 * after them, with the slots readers here still pin. */
static void release_chunk(struct meta *m, struct pool *p, struct held_chunk *h,
                          struct dropped **drops)
{
	struct rec *rel = record_new(REC_RELEASE);
	uint64_t first = h->chunk * p->chunk_slots, pins = 0, valid;
	unsigned evicted = 0;

	if (!rel)
		return; /* tried again at the next heartbeat */
	/* A chunk none of whose slots is taken holds no page: no LRU walk
	 * (it is O(pages), and unused chunks go back at every heartbeat). */
	int used = (index_chunk_bits(p, h->chunk, &valid) & valid) != 0;
	for (struct page *g = used ? p->lru_tail : NULL, *prev; g; g = prev) {
		prev = page_at(g->lru_prev);
		if (chunk_of(p, g->slot) != h->chunk || index_slot_pinned_anywhere(m, p, g->slot))
			continue;
		struct rec *drop = record_new(REC_DROP);
		if (!drop)
			continue; /* the page goes along with the chunk */
		index_page_unlink_committed(m, g);
		p->evictions++;
		evicted++;
		index_drops_add(drops, g);
		record_set_drop(drop, g);
		index_page_free(g);
		record_submit(m, drop);
	}
	for (int b = 0; b < PIN_BUCKETS; b++)
		for (const struct pin *q = p->pins[b]; q; q = q->next)
			if (chunk_of(p, q->slot) == h->chunk)
				pins |= 1ULL << (q->slot - first);
	rel->pool_id = p->id;
	rel->chunk = h->chunk;
	rel->chunk_slots = p->chunk_slots;
	rel->grace_bits = pins;
	h->releasing = 1;
	log_debug("pool %u: chunk %llu handed over (%u pages evicted)", p->id,
	          (unsigned long long)h->chunk, evicted);
	record_submit(m, rel);
}

void cluster_chunks_handover(struct meta *m, const uint64_t (*wants)[3], size_t nwants,
                             struct dropped **drops)
{
	for (size_t i = 0; i < nwants; i++) {
		struct pool *p = index_pool_by_id(m, (uint32_t)wants[i][0]);
		int busy = 0;
		if (!p || !p->shared || !wants[i][2] || !p->chunk_slots ||
		    m->cfg.evict != META_EVICT_LRU)
			continue; /* (--evict none: this node evicts nothing) */
		uint64_t total = (p->capacity + p->chunk_slots - 1) / p->chunk_slots;
		uint64_t fair = (total + wants[i][2] - 1) / wants[i][2];
		if (wants[i][1] <= fair)
			continue; /* this node holds no more than its share */
		for (size_t j = 0; j < p->nchunks; j++)
			busy |= p->chunks[j].draining;
		struct held_chunk *h = busy ? NULL : lru_chunk(m, p);
		if (h)
			h->draining = 1; /* nothing more is allocated in it */
	}
	/* Free space goes back to the pool: chunks without a used slot
	 * beyond the first CHUNK_RESERVE are released (a writer here leases
	 * again when it needs them), unless keys refused a slot here wait
	 * for them (the evictor would evict for those keys again). */
	for (struct pool *p = m->pools; p; p = p->next) {
		size_t empty = 0;
		if (index_hook_owed(m, p))
			continue;
		for (size_t j = 0; j < p->nchunks; j++) {
			struct held_chunk *h = &p->chunks[j];
			uint64_t valid;
			if (h->draining || h->inflight ||
			    index_chunk_bits(p, h->chunk, &valid) & valid)
				continue;
			if (++empty > CHUNK_RESERVE)
				h->draining = 1;
		}
	}
	for (struct pool *p = m->pools; p; p = p->next)
		for (size_t j = 0; j < p->nchunks; j++) {
			struct held_chunk *h = &p->chunks[j];
			/* A writer that took a slot of it before the drain began
			 * commits or aborts first: one writer per slot, ever. */
			if (h->draining && !h->releasing && !h->inflight)
				release_chunk(m, p, h, drops);
		}
}
