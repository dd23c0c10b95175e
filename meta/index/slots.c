/*
 * slots.c - slot allocation and pins of one pool.
 *
 * Allocation never lists free slots: slots at or above the high-water mark
 * are free by definition; below it a bitmap marks the slots that are not
 * allocatable, and `scan` remembers where the lowest clear bit may be. A
 * pool of 16M slots costs 2 MiB of bitmap only once all are used.
 *
 * A pin keeps a slot from being reused while readers have it open. When a
 * pinned slot's page goes away the pin becomes a zombie and the slot is
 * freed when the last pin drops. Callers hold meta.lock.
 *
 * On a shared index (several nodes) a pool allocates only inside the
 * chunks this node leased (chunks.c), and a slot of those chunks whose
 * page goes keeps its bit until its grace period ends (index_grace_release);
 * slots of other nodes' chunks are freed here at once (their bits only
 * mirror pages).
 */
#include "meta/index.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int bit_get(const struct pool *p, uint64_t i)
{
	return i < p->hwm && (p->bits[i / 64] >> (i % 64)) & 1;
}

static int ensure_words(struct pool *p, uint64_t slots)
{
	uint64_t words = (slots + 63) / 64;

	if (words <= p->bits_words)
		return 0;
	uint64_t n = p->bits_words ? p->bits_words : 16;
	while (n < words)
		n *= 2;
	uint64_t *b = realloc(p->bits, n * sizeof(*b));
	if (!b)
		return -ENOMEM;
	memset(b + p->bits_words, 0, (n - p->bits_words) * sizeof(*b));
	p->bits = b;
	p->bits_words = n;
	return 0;
}

int index_slot_take(struct pool *p, uint64_t *slot)
{
	if (p->shared)
		return index_chunk_take(p, slot);
	if (p->fence_bits)
		index_slots_unfence(p);
	if (p->nused < p->hwm) {
		for (uint64_t w = p->scan / 64; w * 64 < p->hwm; w++) {
			if (p->bits[w] == ~0ULL)
				continue;
			uint64_t i = w * 64 + (uint64_t)__builtin_ctzll(~p->bits[w]);
			if (i >= p->hwm)
				break;
			p->bits[w] |= 1ULL << (i % 64);
			p->nused++;
			p->scan = i + 1;
			*slot = i;
			return 0;
		}
	}
	if (p->hwm >= p->capacity)
		return -ENOSPC;
	if (ensure_words(p, p->hwm + 1) < 0)
		return -ENOMEM;
	*slot = p->hwm++;
	p->bits[*slot / 64] |= 1ULL << (*slot % 64);
	p->nused++;
	if (p->scan == *slot)
		p->scan = p->hwm;
	return 0;
}

int index_slot_mark(struct pool *p, uint64_t slot)
{
	if (slot >= p->hwm) {
		if (ensure_words(p, slot + 1) < 0)
			return -ENOMEM;
		p->hwm = slot + 1;
	}
	if (bit_get(p, slot))
		return -EEXIST;
	p->bits[slot / 64] |= 1ULL << (slot % 64);
	p->nused++;
	return 0;
}

void index_slot_release(struct pool *p, uint64_t slot)
{
	if (!bit_get(p, slot))
		return;
	p->bits[slot / 64] &= ~(1ULL << (slot % 64));
	p->nused--;
	if (slot < p->scan)
		p->scan = slot;
	/* Trim the high-water mark so an emptied pool costs nothing to scan. */
	while (p->hwm > 0 && !bit_get(p, p->hwm - 1))
		p->hwm--;
	if (p->scan > p->hwm)
		p->scan = p->hwm;
}

static struct pin **pin_find(struct pool *p, uint64_t slot)
{
	struct pin **pp = &p->pins[slot % PIN_BUCKETS];

	while (*pp && (*pp)->slot != slot)
		pp = &(*pp)->next;
	return pp;
}

void index_slot_put(struct pool *p, uint64_t slot)
{
	struct pin **pp = pin_find(p, slot);

	if (*pp) {
		p->nzombies += !(*pp)->zombie;
		(*pp)->zombie = 1;
	} else if (!p->shared || !index_chunk_owned(p, chunk_of(p, slot)))
		index_slot_release(p, slot);
	/* else: freed in a chunk of this node; index_grace_release frees it */
}

void index_slot_pin(struct pool *p, uint64_t slot)
{
	struct pin **pp = pin_find(p, slot);

	if (!*pp) {
		struct pin *n = calloc(1, sizeof(*n));
		if (!n)
			abort(); /* a pin must never be lost: out of memory is fatal */
		n->slot = slot;
		*pp = n;
		p->npins++;
	}
	(*pp)->count++;
}

void index_slot_unpin(struct pool *p, uint64_t slot)
{
	struct pin **pp = pin_find(p, slot);
	struct pin *n = *pp;

	if (!n)
		return;
	if (--n->count > 0)
		return;
	*pp = n->next;
	p->npins--;
	p->nzombies -= n->zombie;
	if (n->zombie && (!p->shared || !index_chunk_owned(p, chunk_of(p, slot))))
		index_slot_release(p, slot);
	free(n);
}

int index_slot_quarantine(struct pool *p, uint64_t slot)
{
	if (index_slot_quarantined(p, slot))
		return -EEXIST;
	index_slot_pin(p, slot);
	struct pin *n = *pin_find(p, slot);
	n->quar = 1;
	/* In this node's chunk its grace period keeps the bit (index_grace_release
	 * skips pinned slots); in another's, the bit may be gone already
	 * (index_slot_put) or still its page's (-EEXIST). */
	if (index_chunk_owned(p, chunk_of(p, slot)))
		return 0;
	(void)index_slot_mark(p, slot);
	p->nzombies += !n->zombie;
	n->zombie = 1;
	return 0;
}

void index_slot_unquarantine(struct pool *p, uint64_t slot)
{
	struct pin *n = *pin_find(p, slot);

	if (n && n->quar) {
		n->quar = 0;
		index_slot_unpin(p, slot);
	}
}

int index_slot_quarantined(const struct pool *p, uint64_t slot)
{
	for (const struct pin *n = p->pins[slot % PIN_BUCKETS]; n; n = n->next)
		if (n->slot == slot)
			return n->quar;
	return 0;
}

int index_slot_pinned(const struct pool *p, uint64_t slot)
{
	for (const struct pin *n = p->pins[slot % PIN_BUCKETS]; n; n = n->next)
		if (n->slot == slot)
			return 1;
	return 0;
}

int index_slots_fence(struct pool *p, int64_t until_mono)
{
	uint64_t words = (p->capacity + 63) / 64;

	if (p->fence_bits || ensure_words(p, p->capacity) < 0 ||
	    !(p->fence_bits = calloc(words ? words : 1, sizeof(*p->fence_bits))))
		return -ENOMEM;
	for (uint64_t w = 0; w < words; w++) {
		uint64_t valid =
			p->capacity - w * 64 >= 64 ? ~0ULL : (1ULL << (p->capacity % 64)) - 1;
		uint64_t used = w * 64 < p->hwm ? p->bits[w] : 0;
		if (w * 64 < p->hwm && p->hwm < w * 64 + 64)
			used &= (1ULL << (p->hwm % 64)) - 1;
		p->fence_bits[w] = ~used & valid;
		p->bits[w] = used | p->fence_bits[w];
		p->nused += (uint64_t)__builtin_popcountll(p->fence_bits[w]);
		p->nfenced += (uint64_t)__builtin_popcountll(p->fence_bits[w]);
	}
	p->fence_words = words;
	p->hwm = p->capacity;
	p->scan = p->capacity;
	p->fence_end = until_mono;
	return 0;
}

void index_slots_unfence(struct pool *p)
{
	struct timespec ts;

	if (!p->fence_bits)
		return;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	if ((int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec < p->fence_end)
		return;
	for (uint64_t w = 0; w < p->fence_words; w++) {
		p->bits[w] &= ~p->fence_bits[w];
		p->nused -= (uint64_t)__builtin_popcountll(p->fence_bits[w]);
	}
	free(p->fence_bits);
	p->fence_bits = NULL;
	p->nfenced = 0;
	p->scan = 0;
	while (p->hwm > 0 && !bit_get(p, p->hwm - 1))
		p->hwm--;
}

uint64_t index_slot_top(const struct pool *p)
{
	return p->hwm;
}

void index_slots_free(struct pool *p)
{
	for (int i = 0; i < PIN_BUCKETS; i++) {
		while (p->pins[i]) {
			struct pin *n = p->pins[i];
			p->pins[i] = n->next;
			free(n);
		}
	}
	p->npins = p->nzombies = 0;
	free(p->bits);
	p->bits = NULL;
	p->bits_words = 0;
}
