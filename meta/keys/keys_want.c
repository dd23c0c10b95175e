/*
 * keys_want.c - the keys a protocol pool refused a slot and still owes
 * one: the demand the evictor serves (keys_evict.c).
 *
 * A full pool answers -1 and its evictor frees pages, whose slots come
 * back only after the quarantine (6 s). Writers retry meanwhile, and so
 * do FUSE writers refused ENOSPC: counting every refusal as demand made
 * one key retried every 0.5 s evict a page per retry, and emptied the
 * pool. So a refused key is counted once, by its name hash (two keys of
 * one hash count once: demand is then underestimated by one), until it
 * gets a slot or has not asked for longer than the quarantine and a
 * second (keys_want_expire: its writer gave up, and the slot freed for it
 * is free by then).
 *
 * The evictor expires at every pass, and passes are many under pressure:
 * expiry looks at the entries only when one may be due (`oldest`, a bound
 * kept on add and made exact by a look) or the tombstones outnumber the
 * live entries. (A look at each pass over a table of 65536 keys took a
 * third of the server's CPU while a full pool refused writers.)
 *
 * An open-addressing table by hash (linear probing, at most 3/4 full),
 * of at most KEYS_WANT_MAX keys or the pool's capacity when smaller (the
 * evictor serves at most half the pool's worth: more changes nothing); a
 * key served leaves a tombstone, and expiry rebuilds the table without
 * them. meta.lock held.
 */
#include "meta/keys.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#define KEYS_WANT_MAX 65536ULL

/* Rebuilds the table with room for `size` entries, keeping the entries
 * refused at or after `since` (0: every live one). 0 or -ENOMEM. */
static int want_rebuild(struct kpool *kp, size_t size, int64_t since)
{
	struct want *v = calloc(size, sizeof(*v));

	if (!v)
		return -ENOMEM;
	size_t n = 0;
	int64_t oldest = INT64_MAX;
	for (size_t i = 0; kp->want.v && i <= kp->want.mask; i++) {
		const struct want *e = &kp->want.v[i];
		if (e->at <= 0 || e->at < since)
			continue;
		size_t h = e->key & (size - 1);
		while (v[h].at)
			h = (h + 1) & (size - 1);
		v[h] = *e;
		n++;
		oldest = e->at < oldest ? e->at : oldest;
	}
	free(kp->want.v);
	kp->want.v = v;
	kp->want.mask = size - 1;
	kp->want.live = kp->want.used = n;
	kp->want.oldest = oldest;
	return 0;
}

/* The entry of key, or NULL. */
static struct want *want_find(const struct kpool *kp, uint32_t key)
{
	if (!kp->want.v)
		return NULL;
	for (size_t h = key & kp->want.mask;; h = (h + 1) & kp->want.mask) {
		struct want *e = &kp->want.v[h];
		if (!e->at)
			return NULL;
		if (e->key == key)
			return e;
	}
}

void keys_want_add(struct kpool *kp, uint32_t key, int64_t now)
{
	uint64_t most = kp->capacity < KEYS_WANT_MAX ? kp->capacity : KEYS_WANT_MAX;
	struct want *e = want_find(kp, key);

	if (e && e->at > 0) {
		e->at = now; /* asked again: no more demand */
		if (now < kp->want.oldest)
			kp->want.oldest = now;
		return;
	}
	if (e) { /* served before, refused again: demand again */
		e->at = now;
		if (!kp->want.live++ || now < kp->want.oldest)
			kp->want.oldest = now;
		return;
	}
	if (kp->want.live >= most)
		return; /* (demand for more than every slot) */
	if (!kp->want.v || (kp->want.used + 1) * 4 > (kp->want.mask + 1) * 3) {
		size_t size = 16;
		while (size < (kp->want.live + 1) * 2)
			size *= 2;
		if (want_rebuild(kp, size, 0) < 0 || !kp->want.v)
			return; /* (out of memory: not counted) */
	}
	size_t h = key & kp->want.mask;
	while (kp->want.v[h].at)
		h = (h + 1) & kp->want.mask;
	kp->want.v[h] = (struct want){key, now};
	if (!kp->want.live++ || now < kp->want.oldest)
		kp->want.oldest = now;
	kp->want.used++;
}

void keys_want_served(struct kpool *kp, uint32_t key)
{
	struct want *e = kp->want.live ? want_find(kp, key) : NULL;

	if (e && e->at > 0) {
		e->at = -1; /* a tombstone: probes go on past it */
		kp->want.live--;
	}
}

void keys_want_expire(struct kpool *kp, int64_t before)
{
	struct want_tab *w = &kp->want;

	if (!w->used)
		return;
	int look = w->live && w->oldest < before;
	int stale = (w->used - w->live) > w->live; /* tombstones outnumber keys */
	int64_t oldest = INT64_MAX;
	for (size_t i = 0; look && !stale && i <= w->mask; i++) {
		int64_t at = w->v[i].at;
		stale = at > 0 && at < before;
		oldest = at > 0 && at < oldest ? at : oldest;
	}
	if (stale)
		(void)want_rebuild(kp, w->mask + 1, before); /* (else kept as it is) */
	else if (look)
		w->oldest = oldest; /* none due: the bound made exact */
	if (!w->live) {
		free(kp->want.v);
		kp->want = (struct want_tab){0};
	}
}
