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
 * (pagefs_pins) or reads it here. See docs/DESIGN.md. Callers hold
 * meta.lock.
 */
#include "meta/internal.h"

#include <errno.h>
#include <stdlib.h>

int chunk_owned(const struct pool *p, uint64_t chunk)
{
	for (size_t i = 0; i < p->nchunks; i++)
		if (p->chunks[i] == chunk)
			return 1;
	return 0;
}

int chunk_own(struct pool *p, uint64_t chunk)
{
	if (chunk_owned(p, chunk))
		return 0;
	if (p->nchunks == p->chunks_cap) {
		size_t cap = p->chunks_cap ? p->chunks_cap * 2 : 8;
		uint64_t *c = realloc(p->chunks, cap * sizeof(*c));
		if (!c)
			return -ENOMEM;
		p->chunks = c;
		p->chunks_cap = cap;
	}
	p->chunks[p->nchunks++] = chunk;
	return 0;
}

int chunk_take(struct pool *p, uint64_t *slot)
{
	uint64_t k = p->chunk_slots;

	for (size_t i = 0; i < p->nchunks; i++) {
		uint64_t first = p->chunks[i] * k;
		if (first >= p->capacity)
			continue;
		uint64_t n = p->capacity - first < k ? p->capacity - first : k;
		uint64_t valid = n == 64 ? ~0ULL : (1ULL << n) - 1;
		/* Bits at or above hwm are clear (slot_release keeps them so). */
		uint64_t word = first / 64 < p->bits_words ? p->bits[first / 64] : 0;
		uint64_t used = k == 64 ? word : (word >> (first % 64)) & ((1ULL << k) - 1);
		uint64_t free_bits = ~used & valid;
		if (!free_bits)
			continue;
		*slot = first + (uint64_t)__builtin_ctzll(free_bits);
		return slot_mark(p, *slot) == 0 ? 0 : -ENOMEM;
	}
	return -ENOSPC;
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

size_t slots_zombies(const struct pool *p, uint64_t (*out)[2], size_t max)
{
	size_t n = 0;

	for (int b = 0; b < PIN_BUCKETS; b++) {
		for (const struct pin *q = p->pins[b]; q; q = q->next) {
			if (!q->zombie)
				continue;
			if (out && n < max) {
				out[n][0] = p->id;
				out[n][1] = q->slot;
			}
			n++;
		}
	}
	return out && n > max ? max : n;
}

void chunks_free(struct pool *p)
{
	free(p->chunks);
	free(p->grace);
	p->chunks = NULL;
	p->grace = NULL;
	p->nchunks = p->chunks_cap = p->ngrace = p->grace_cap = 0;
}
