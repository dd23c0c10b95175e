/*
 * check.c - the structural invariants of the in-memory index, as code.
 *
 * index_check walks every pool and compares what the counters say with
 * what the structures hold: the slot bitmap against nused and hwm, the
 * pins against npins and nzombies, the LRU list's links against its
 * ends and the pool's page and byte counts, and each committed page
 * against its pool, its slot and its pool's presence table (if any). It
 * costs a walk of every page, so checked builds (PAGEFS_CHECKS: the
 * sanitizer and Debug builds) run it at open and at close (open.c), and
 * the unit tests after the operations they make. meta.lock held (or no
 * other thread running).
 */
#include "meta/index.h"

#include <errno.h>
#include <stdio.h>

/* Formats the first broken invariant into err; returns -EUCLEAN. */
#define BROKEN(...) (snprintf(err, errlen, __VA_ARGS__), -EUCLEAN)

static int check_bits(const struct pool *p, char *err, size_t errlen)
{
	uint64_t set = 0;

	for (uint64_t w = 0; w < p->bits_words; w++) {
		uint64_t word = p->bits[w];
		set += (uint64_t)__builtin_popcountll(word);
		for (; word; word &= word - 1) {
			uint64_t slot = w * 64 + (uint64_t)__builtin_ctzll(word);
			if (slot >= p->hwm)
				return BROKEN("pool %u: slot %llu is used above hwm %llu", p->id,
				              (unsigned long long)slot, (unsigned long long)p->hwm);
		}
	}
	if (set != p->nused)
		return BROKEN("pool %u: %llu slot bits set, nused says %llu", p->id,
		              (unsigned long long)set, (unsigned long long)p->nused);
	if (p->nfenced > p->nused)
		return BROKEN("pool %u: %llu slots fenced of %llu used", p->id,
		              (unsigned long long)p->nfenced, (unsigned long long)p->nused);
	return 0;
}

static int check_pins(const struct pool *p, char *err, size_t errlen)
{
	uint64_t pins = 0, zombies = 0;

	for (int b = 0; b < PIN_BUCKETS; b++) {
		for (const struct pin *n = p->pins[b]; n; n = n->next) {
			if (n->count == 0 || n->slot % PIN_BUCKETS != (uint64_t)b)
				return BROKEN("pool %u: pin of slot %llu has count %u in bucket %d",
				              p->id, (unsigned long long)n->slot, n->count, b);
			pins++;
			zombies += n->zombie;
		}
	}
	if (pins != p->npins || zombies != p->nzombies)
		return BROKEN("pool %u: %llu pins (%llu zombies), the counts say %llu (%llu)",
		              p->id, (unsigned long long)pins, (unsigned long long)zombies,
		              (unsigned long long)p->npins, (unsigned long long)p->nzombies);
	return 0;
}

static int check_lru(const struct pool *p, char *err, size_t errlen)
{
	uint64_t pages = 0, bytes = 0;
	const struct page *prev = NULL;

	for (const struct page *g = p->lru_head; g; prev = g, g = page_at(g->lru_next)) {
		if (page_at(g->lru_prev) != prev)
			return BROKEN("pool %u: page %llu's LRU link back is broken", p->id,
			              (unsigned long long)g->id);
		if (!g->committed || page_pool(g) != p)
			return BROKEN("pool %u: page %llu in its LRU is %s", p->id,
			              (unsigned long long)g->id,
			              g->committed ? "another pool's" : "not committed");
		if (g->slot >= p->capacity && p->slot_size)
			return BROKEN("pool %u: page %llu at slot %llu of %llu", p->id,
			              (unsigned long long)g->id, (unsigned long long)g->slot,
			              (unsigned long long)p->capacity);
		/* A shared pool's mirror may trail the index by a feed poll. */
		if (!p->shared && !p->removed &&
		    (g->slot / 64 >= p->bits_words ||
		     !(p->bits[g->slot / 64] >> (g->slot % 64) & 1)))
			return BROKEN("pool %u: page %llu's slot %llu is free in the bitmap", p->id,
			              (unsigned long long)g->id, (unsigned long long)g->slot);
		if (p->presence && !index_presence_has(p->presence, index_presence_page_fp(g)))
			return BROKEN("pool %u: page %llu is not in its presence table", p->id,
			              (unsigned long long)g->id);
		if (++pages > p->pages)
			break;
		bytes += g->length;
	}
	struct presence_stats ps;
	if (p->presence && (index_presence_stats(p->presence, &ps), ps.count != p->pages))
		return BROKEN("pool %u: %llu names in its presence table, %llu pages", p->id,
		              (unsigned long long)ps.count, (unsigned long long)p->pages);
	if (p->lru_tail != prev && pages <= p->pages)
		return BROKEN("pool %u: the LRU list does not end at its tail", p->id);
	if (pages != p->pages || bytes != p->bytes)
		return BROKEN("pool %u: %llu%s pages of %llu bytes in the LRU, the counts say %llu "
		              "of %llu",
		              p->id, (unsigned long long)pages, pages > p->pages ? " or more" : "",
		              (unsigned long long)bytes, (unsigned long long)p->pages,
		              (unsigned long long)p->bytes);
	return 0;
}

int index_check(struct meta *m, char *err, size_t errlen)
{
	uint64_t pages = 0;
	int rc;

	err[0] = '\0';
	for (const struct pool *p = m->pools; p; p = p->next) {
		if ((rc = check_bits(p, err, errlen)) < 0 ||
		    (rc = check_pins(p, err, errlen)) < 0 || (rc = check_lru(p, err, errlen)) < 0)
			return rc;
		pages += p->pages;
	}
	/* by_id holds the committed pages and those being written. */
	if (m->by_id.count < pages)
		return BROKEN("%llu pages by id, %llu committed in the pools",
		              (unsigned long long)m->by_id.count, (unsigned long long)pages);
	return 0;
}
