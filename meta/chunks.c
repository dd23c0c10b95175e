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
#include "meta/internal.h"
#include "meta/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHUNK_RESERVE 2 /* empty chunks a node keeps per pool */

struct held_chunk *chunk_find(struct pool *p, uint64_t chunk)
{
	for (size_t i = 0; i < p->nchunks; i++)
		if (p->chunks[i].chunk == chunk)
			return &p->chunks[i];
	return NULL;
}

int chunk_owned(const struct pool *p, uint64_t chunk)
{
	return chunk_find((struct pool *)p, chunk) != NULL;
}

int chunk_own(struct pool *p, uint64_t chunk)
{
	if (chunk_owned(p, chunk))
		return 0;
	if (p->nchunks == p->chunks_cap) {
		size_t cap = p->chunks_cap ? p->chunks_cap * 2 : 8;
		struct held_chunk *c = realloc(p->chunks, cap * sizeof(*c));
		if (!c)
			return -ENOMEM;
		p->chunks = c;
		p->chunks_cap = cap;
	}
	p->chunks[p->nchunks++] = (struct held_chunk){.chunk = chunk};
	return 0;
}

/* Bits of a chunk's slots in the bitmap, and the mask of its valid ones. */
static uint64_t chunk_bits(const struct pool *p, uint64_t chunk, uint64_t *valid)
{
	uint64_t k = p->chunk_slots, first = chunk * k;

	if (first >= p->capacity) {
		*valid = 0;
		return 0;
	}
	uint64_t n = p->capacity - first < k ? p->capacity - first : k;
	*valid = n == 64 ? ~0ULL : (1ULL << n) - 1;
	/* Bits at or above hwm are clear (slot_release keeps them so). */
	uint64_t word = first / 64 < p->bits_words ? p->bits[first / 64] : 0;
	return k == 64 ? word : (word >> (first % 64)) & ((1ULL << k) - 1);
}

int chunk_take(struct pool *p, uint64_t *slot)
{
	for (size_t i = 0; i < p->nchunks; i++) {
		struct held_chunk *h = &p->chunks[i];
		uint64_t valid, free_bits;
		if (h->draining)
			continue;
		free_bits = ~chunk_bits(p, h->chunk, &valid) & valid;
		if (!free_bits)
			continue;
		*slot = h->chunk * p->chunk_slots + (uint64_t)__builtin_ctzll(free_bits);
		if (slot_mark(p, *slot) < 0)
			return -ENOMEM;
		/* A grace period of a free slot is stale: it must not free
		 * the slot again once this writer's page is there. */
		if (p->ngrace)
			grace_forget(p, *slot);
		h->inflight++;
		return 0;
	}
	return -ENOSPC;
}

void chunk_done(struct pool *p, uint64_t slot)
{
	struct held_chunk *h = p->shared ? chunk_find(p, chunk_of(p, slot)) : NULL;

	if (h && h->inflight)
		h->inflight--;
}

void chunk_disown(struct pool *p, uint64_t chunk)
{
	size_t kept = 0;

	for (size_t i = 0; i < p->ngrace; i++) {
		struct grace g = p->grace[i];
		if (chunk_of(p, g.slot) != chunk)
			p->grace[kept++] = g;
		else if (!slot_pinned(p, g.slot))
			slot_release(p, g.slot); /* (a pinned one: at its unpin) */
	}
	p->ngrace = kept;
	for (size_t i = 0; i < p->nchunks; i++) {
		if (p->chunks[i].chunk == chunk) {
			p->chunks[i] = p->chunks[--p->nchunks];
			break;
		}
	}
}

void grace_add(struct pool *p, uint64_t slot, uint64_t xid)
{
	for (size_t i = 0; i < p->ngrace; i++) {
		if (p->grace[i].slot == slot) {
			if (xid > p->grace[i].xid)
				p->grace[i].xid = xid;
			return;
		}
	}
	if (p->ngrace == p->grace_cap) {
		size_t cap = p->grace_cap ? p->grace_cap * 2 : 64;
		struct grace *g = realloc(p->grace, cap * sizeof(*g));
		if (!g)
			return; /* the slot stays unusable until remount: never reused early */
		p->grace = g;
		p->grace_cap = cap;
	}
	p->grace[p->ngrace].slot = slot;
	p->grace[p->ngrace++].xid = xid;
}

void grace_forget(struct pool *p, uint64_t slot)
{
	for (size_t i = 0; i < p->ngrace; i++) {
		if (p->grace[i].slot == slot) {
			p->grace[i] = p->grace[--p->ngrace];
			return;
		}
	}
}

static int pinned_elsewhere(const struct pool *p, uint64_t slot, const uint64_t (*pins)[2],
                            size_t npins)
{
	for (size_t i = 0; i < npins; i++)
		if (pins[i][0] == p->id && pins[i][1] == slot)
			return 1;
	return 0;
}

void grace_release(struct pool *p, uint64_t min_ack, const uint64_t (*pins)[2], size_t npins)
{
	size_t kept = 0;

	for (size_t i = 0; i < p->ngrace; i++) {
		struct grace g = p->grace[i];
		if (g.xid < min_ack && !slot_pinned(p, g.slot) &&
		    !pinned_elsewhere(p, g.slot, pins, npins))
			slot_release(p, g.slot);
		else
			p->grace[kept++] = g;
	}
	p->ngrace = kept;
}

size_t slots_pinned(const struct pool *p, uint64_t (*out)[2], size_t max)
{
	size_t n = 0;

	for (int b = 0; b < PIN_BUCKETS; b++) {
		for (const struct pin *q = p->pins[b]; q; q = q->next) {
			if (out && n < max) {
				out[n][0] = p->id;
				out[n][1] = q->slot;
			}
			n++;
		}
	}
	return out && n > max ? max : n;
}

static int cmp_pin(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;

	return x[0] != y[0] ? (x[0] < y[0] ? -1 : 1) : (x[1] < y[1] ? -1 : x[1] > y[1]);
}

static uint64_t mono_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* How long a pin a lease found counts on its own: by then every node's
 * heartbeat (200 ms) has published its pins and this node's has read
 * them, even from a snapshot older than the lease. */
#define LEASE_PIN_NS (3ULL * 1000000000ULL)

void peer_pins_set(struct meta *m, uint64_t (*pins)[2], size_t n)
{
	uint64_t now = mono_now_ns();
	size_t kept = 0;

	if (n)
		qsort(pins, n, sizeof(*pins), cmp_pin);
	free(m->peer_pins);
	m->peer_pins = pins;
	m->npeer_pins = n;
	for (size_t i = 0; i < m->nlease_pins; i++)
		if (m->lease_pins[i][2] > now)
			memmove(m->lease_pins[kept++], m->lease_pins[i], sizeof(*m->lease_pins));
	m->nlease_pins = kept;
}

void lease_pin_add(struct meta *m, uint32_t pool, uint64_t slot)
{
	if (m->nlease_pins == m->lease_pins_cap) {
		size_t cap = m->lease_pins_cap ? m->lease_pins_cap * 2 : 16;
		uint64_t(*l)[3] = realloc(m->lease_pins, cap * sizeof(*l));
		if (!l)
			return; /* the next heartbeat brings it (as before leases carried pins) */
		m->lease_pins = l;
		m->lease_pins_cap = cap;
	}
	m->lease_pins[m->nlease_pins][0] = pool;
	m->lease_pins[m->nlease_pins][1] = slot;
	m->lease_pins[m->nlease_pins][2] = mono_now_ns() + LEASE_PIN_NS;
	m->nlease_pins++;
}

int slot_pinned_anywhere(const struct meta *m, const struct pool *p, uint64_t slot)
{
	uint64_t key[2] = {p->id, slot};

	if (slot_pinned(p, slot) || (m->npeer_pins && bsearch(key, m->peer_pins, m->npeer_pins,
	                                                      sizeof(*m->peer_pins), cmp_pin)))
		return 1;
	for (size_t i = 0; i < m->nlease_pins; i++)
		if (m->lease_pins[i][0] == p->id && m->lease_pins[i][1] == slot)
			return 1;
	return 0;
}

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
	struct rec *rel = rec_new(REC_RELEASE);
	uint64_t first = h->chunk * p->chunk_slots, pins = 0, valid;
	unsigned evicted = 0;

	if (!rel)
		return; /* tried again at the next heartbeat */
	/* A chunk none of whose slots is taken holds no page: no LRU walk
	 * (it is O(pages), and unused chunks go back at every heartbeat). */
	int used = (chunk_bits(p, h->chunk, &valid) & valid) != 0;
	for (struct page *g = used ? p->lru_tail : NULL, *prev; g; g = prev) {
		prev = page_at(g->lru_prev);
		if (chunk_of(p, g->slot) != h->chunk || slot_pinned_anywhere(m, p, g->slot))
			continue;
		struct rec *drop = rec_new(REC_DROP);
		if (!drop)
			continue; /* the page goes along with the chunk */
		page_unlink_committed(m, g);
		p->evictions++;
		evicted++;
		drops_add(drops, g);
		rec_set_drop(drop, g);
		page_free(g);
		journal_submit(m, drop);
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
	journal_submit(m, rel);
}

void chunks_handover(struct meta *m, const uint64_t (*wants)[3], size_t nwants,
                     struct dropped **drops)
{
	for (size_t i = 0; i < nwants; i++) {
		struct pool *p = pool_by_id(m, (uint32_t)wants[i][0]);
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
		if (keys_owed(m, p))
			continue;
		for (size_t j = 0; j < p->nchunks; j++) {
			struct held_chunk *h = &p->chunks[j];
			uint64_t valid;
			if (h->draining || h->inflight || chunk_bits(p, h->chunk, &valid) & valid)
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

void chunks_free(struct pool *p)
{
	free(p->chunks);
	free(p->grace);
	p->chunks = NULL;
	p->grace = NULL;
	p->nchunks = p->chunks_cap = p->ngrace = p->grace_cap = 0;
}
