/*
 * chunkset.c - the chunks of slots a node of a shared index holds, and
 * the freed slots of them that wait out a grace period; the slots
 * readers here and on other nodes pin. Plain bookkeeping on struct pool
 * and struct meta under meta.lock: the leases, handovers and heartbeats
 * that change it are meta/cluster/'s. Only shared pools get here.
 */
#include "meta/index.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Bits of a chunk's slots in the bitmap, and the mask of its valid ones. */
uint64_t index_chunk_bits(const struct pool *p, uint64_t chunk, uint64_t *valid)
{
	uint64_t k = p->chunk_slots, first = chunk * k;

	if (first >= p->capacity) {
		*valid = 0;
		return 0;
	}
	uint64_t n = p->capacity - first < k ? p->capacity - first : k;
	*valid = n == 64 ? ~0ULL : (1ULL << n) - 1;
	/* Bits at or above hwm are clear (index_slot_release keeps them so). */
	uint64_t word = first / 64 < p->bits_words ? p->bits[first / 64] : 0;
	return k == 64 ? word : (word >> (first % 64)) & ((1ULL << k) - 1);
}

static int pinned_elsewhere(const struct pool *p, uint64_t slot, const uint64_t (*pins)[2],
                            size_t npins)
{
	for (size_t i = 0; i < npins; i++)
		if (pins[i][0] == p->id && pins[i][1] == slot)
			return 1;
	return 0;
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

void index_chunk_disown(struct pool *p, uint64_t chunk)
{
	size_t kept = 0;

	for (size_t i = 0; i < p->ngrace; i++) {
		struct grace g = p->grace[i];
		if (chunk_of(p, g.slot) != chunk)
			p->grace[kept++] = g;
		else if (!index_slot_pinned(p, g.slot))
			index_slot_release(p, g.slot); /* (a pinned one: at its unpin) */
	}
	p->ngrace = kept;
	for (size_t i = 0; i < p->nchunks; i++) {
		if (p->chunks[i].chunk == chunk) {
			p->chunks[i] = p->chunks[--p->nchunks];
			break;
		}
	}
}

void index_chunk_done(struct pool *p, uint64_t slot)
{
	struct held_chunk *h = p->shared ? index_chunk_find(p, chunk_of(p, slot)) : NULL;

	if (h && h->inflight)
		h->inflight--;
}

struct held_chunk *index_chunk_find(struct pool *p, uint64_t chunk)
{
	for (size_t i = 0; i < p->nchunks; i++)
		if (p->chunks[i].chunk == chunk)
			return &p->chunks[i];
	return NULL;
}

int index_chunk_own(struct pool *p, uint64_t chunk)
{
	if (index_chunk_owned(p, chunk))
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

int index_chunk_owned(const struct pool *p, uint64_t chunk)
{
	return index_chunk_find((struct pool *)p, chunk) != NULL;
}

int index_chunk_take(struct pool *p, uint64_t *slot)
{
	for (size_t i = 0; i < p->nchunks; i++) {
		struct held_chunk *h = &p->chunks[i];
		uint64_t valid, free_bits;
		if (h->draining)
			continue;
		free_bits = ~index_chunk_bits(p, h->chunk, &valid) & valid;
		if (!free_bits)
			continue;
		*slot = h->chunk * p->chunk_slots + (uint64_t)__builtin_ctzll(free_bits);
		if (index_slot_mark(p, *slot) < 0)
			return -ENOMEM;
		/* A grace period of a free slot is stale: it must not free
		 * the slot again once this writer's page is there. */
		if (p->ngrace)
			index_grace_forget(p, *slot);
		h->inflight++;
		return 0;
	}
	return -ENOSPC;
}

void index_chunks_free(struct pool *p)
{
	free(p->chunks);
	free(p->grace);
	p->chunks = NULL;
	p->grace = NULL;
	p->nchunks = p->chunks_cap = p->ngrace = p->grace_cap = 0;
}

void index_grace_add(struct pool *p, uint64_t slot, uint64_t xid)
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

void index_grace_forget(struct pool *p, uint64_t slot)
{
	for (size_t i = 0; i < p->ngrace; i++) {
		if (p->grace[i].slot == slot) {
			p->grace[i] = p->grace[--p->ngrace];
			return;
		}
	}
}

void index_grace_release(struct pool *p, uint64_t min_ack, const uint64_t (*pins)[2], size_t npins)
{
	size_t kept = 0;

	for (size_t i = 0; i < p->ngrace; i++) {
		struct grace g = p->grace[i];
		if (g.xid < min_ack && !index_slot_pinned(p, g.slot) &&
		    !pinned_elsewhere(p, g.slot, pins, npins))
			index_slot_release(p, g.slot);
		else
			p->grace[kept++] = g;
	}
	p->ngrace = kept;
}

void index_lease_pin_add(struct meta *m, uint32_t pool, uint64_t slot)
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

void index_peer_pins_set(struct meta *m, uint64_t (*pins)[2], size_t n)
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

int index_slot_pinned_anywhere(const struct meta *m, const struct pool *p, uint64_t slot)
{
	uint64_t key[2] = {p->id, slot};

	if (index_slot_pinned(p, slot) ||
	    (m->npeer_pins &&
	     bsearch(key, m->peer_pins, m->npeer_pins, sizeof(*m->peer_pins), cmp_pin)))
		return 1;
	for (size_t i = 0; i < m->nlease_pins; i++)
		if (m->lease_pins[i][0] == p->id && m->lease_pins[i][1] == slot)
			return 1;
	return 0;
}

size_t index_slots_pinned(const struct pool *p, uint64_t (*out)[2], size_t max)
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
