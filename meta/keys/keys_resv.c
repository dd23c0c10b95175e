/*
 * keys_resv.c - the reservations of a protocol pool's slots: for each
 * reserved slot, the reservation's deadline and its key's hash, which a
 * confirm must match.
 *
 * Only the reservations outstanding are held: an open-addressing table
 * by slot (linear probing, a power of two of entries, at most half full;
 * a removal shifts the entries after it back, no tombstones), which
 * grows with a burst and shrinks back to RESV_MIN entries. An array over
 * every slot cost 16 bytes a slot for good (128 MB for a pool of 8
 * million pages), and each slot's first reservation touched fresh memory.
 * meta.lock held.
 */
#include "meta/keys.h"

#include <errno.h>
#include <stdlib.h>

#define RESV_MIN 1024u

/* The home of slot s in a table of mask + 1 entries: Fibonacci hashing,
 * since slots are handed out one after another. */
static size_t home(const struct resv_tab *t, uint64_t s)
{
	return (size_t)((s * 0x9e3779b97f4a7c15ULL) >> 32) & t->mask;
}

/* The entry of slot s, or NULL. */
static struct resv *find(const struct resv_tab *t, uint64_t s)
{
	if (!t->n)
		return NULL;
	for (size_t i = home(t, s);; i = (i + 1) & t->mask) {
		struct resv *e = &t->v[i];
		if (!e->at)
			return NULL;
		if (e->slot == s)
			return e;
	}
}

/* Puts e (of a slot not in t) into its first free entry. */
static void place(struct resv_tab *t, const struct resv *e)
{
	size_t i = home(t, e->slot);

	while (t->v[i].at)
		i = (i + 1) & t->mask;
	t->v[i] = *e;
}

/* Rebuilds t with size entries (a power of two, more than twice t->n).
 * 0, or -ENOMEM with t as it was. */
static int rebuild(struct resv_tab *t, size_t size)
{
	struct resv_tab g = {calloc(size, sizeof(*g.v)), size - 1, t->n};

	if (!g.v)
		return -ENOMEM;
	for (size_t i = 0; t->v && i <= t->mask; i++)
		if (t->v[i].at)
			place(&g, &t->v[i]);
	free(t->v);
	*t = g;
	return 0;
}

/* The reservation on slot s of kp, or NULL (none, or past the pool). */
static const struct resv *lookup(const struct kpool *kp, uint64_t s)
{
	return s < kp->capacity ? find(&kp->resv, s) : NULL;
}

int64_t keys_resv_get(const struct kpool *kp, uint64_t s)
{
	const struct resv *e = lookup(kp, s);

	return e ? e->at : 0;
}

int keys_resv_for(const struct kpool *kp, uint64_t s, uint32_t key)
{
	const struct resv *e = lookup(kp, s);

	return e && e->key == key;
}

/* Removes entry i, shifting back the entries after it that may not stay
 * where they are (their home is not between the gap and them). */
static void remove_at(struct resv_tab *t, size_t i)
{
	size_t gap = i;

	for (size_t j = (i + 1) & t->mask; t->v[j].at; j = (j + 1) & t->mask) {
		size_t h = home(t, t->v[j].slot);
		/* j may move to gap unless h lies cyclically in (gap, j] */
		if (((j - h) & t->mask) >= ((j - gap) & t->mask)) {
			t->v[gap] = t->v[j];
			gap = j;
		}
	}
	t->v[gap] = (struct resv){0};
	t->n--;
}

int keys_resv_set(struct kpool *kp, uint64_t s, int64_t at, uint32_t key)
{
	struct resv_tab *t = &kp->resv;

	if (s >= kp->capacity)
		return at ? -EINVAL : 0; /* (callers check: a bug) */
	struct resv *e = find(t, s);
	if (!at) {
		if (e) {
			remove_at(t, (size_t)(e - t->v));
			if (t->mask + 1 > RESV_MIN && t->n * 8 < t->mask + 1)
				(void)rebuild(t, (t->mask + 1) / 2); /* (else kept as it is) */
		}
		return 0;
	}
	if (e) {
		e->at = at;
		e->key = key;
		return 0;
	}
	if ((!t->v || (t->n + 1) * 2 > t->mask + 1) &&
	    rebuild(t, t->v ? (t->mask + 1) * 2 : RESV_MIN) < 0)
		return -ENOMEM;
	place(t, &(struct resv){.at = at, .key = key, .slot = (uint32_t)s});
	t->n++;
	return 0;
}

void keys_resv_tab_free(struct resv_tab *t)
{
	free(t->v);
	*t = (struct resv_tab){0};
}
