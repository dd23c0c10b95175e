/*
 * fs_pin.c - pins and reservations held by an open pool directory
 * (fs_pin.h).
 */
#include "fs/fs_pin.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "meta/meta.h"

/* The pins of one LOOKUP_PIN. */
struct fs_pinset {
	struct fs_pinset *next;
	uint64_t token;
	uint32_t pool_id;
	size_t n;
	uint64_t slots[];
};

static void unpin_set(struct meta *m, struct fs_pinset *s)
{
	for (size_t i = 0; i < s->n; i++)
		meta_slot_unpin(m, s->pool_id, s->slots[i]);
	free(s);
}

int fs_pins_init(struct fs_pins *t)
{
	memset(t, 0, sizeof(*t));
	return -pthread_mutex_init(&t->lock, NULL);
}

void fs_pins_destroy(struct fs_pins *t)
{
	pthread_mutex_destroy(&t->lock);
}

struct fs_dirh *fs_dirh_new(struct fs_pins *t)
{
	struct fs_dirh *d = calloc(1, sizeof(*d));

	if (!d)
		return NULL;
	if (pthread_mutex_init(&d->lock, NULL) != 0) {
		free(d);
		return NULL;
	}
	d->next_token = 1;
	pthread_mutex_lock(&t->lock);
	d->next = t->head;
	if (t->head)
		t->head->prev = d;
	t->head = d;
	pthread_mutex_unlock(&t->lock);
	return d;
}

/* Takes d off the list and drops its pins; d's memory stays. */
static void dirh_end(struct fs_pins *t, struct meta *m, struct fs_dirh *d)
{
	struct fs_pinset *s;

	pthread_mutex_lock(&t->lock);
	if (d->prev)
		d->prev->next = d->next;
	else if (t->head == d)
		t->head = d->next;
	if (d->next)
		d->next->prev = d->prev;
	d->prev = d->next = NULL;
	pthread_mutex_unlock(&t->lock);

	pthread_mutex_lock(&d->lock);
	s = d->sets;
	d->sets = NULL;
	d->npins = 0;
	struct fs_resvset *rs = d->resvs;
	d->resvs = NULL;
	d->nresv = 0;
	pthread_mutex_unlock(&d->lock);
	while (rs) {
		struct fs_resvset *next = rs->next;

		fs_resvset_abort(m, rs);
		rs = next;
	}
	while (s) {
		struct fs_pinset *next = s->next;

		unpin_set(m, s);
		s = next;
	}
}

void fs_dirh_free(struct fs_pins *t, struct meta *m, struct fs_dirh *d)
{
	if (!d)
		return;
	dirh_end(t, m, d);
	pthread_mutex_destroy(&d->lock);
	free(d);
}

/* The kernel never releases the directories still open at unmount; their
 * handles are dropped here, once no request runs. */
void fs_pins_close_all(struct fs_pins *t, struct meta *m)
{
	for (;;) {
		pthread_mutex_lock(&t->lock);
		struct fs_dirh *d = t->head;
		pthread_mutex_unlock(&t->lock);
		if (!d)
			return;
		fs_dirh_free(t, m, d);
	}
}

int fs_dirh_keep(struct fs_dirh *d, uint32_t pool_id, const uint64_t *slots, size_t n,
                 uint64_t *token)
{
	struct fs_pinset *s = malloc(sizeof(*s) + n * sizeof(s->slots[0]));
	int ret = 0;

	if (!s)
		return -ENOMEM;
	s->pool_id = pool_id;
	s->n = n;
	if (n)
		memcpy(s->slots, slots, n * sizeof(s->slots[0]));
	pthread_mutex_lock(&d->lock);
	if (d->npins + n > FS_PIN_MAX) {
		ret = -EBUSY;
	} else {
		s->token = d->next_token++;
		s->next = d->sets;
		d->sets = s;
		d->npins += n;
		*token = s->token;
	}
	pthread_mutex_unlock(&d->lock);
	if (ret < 0)
		free(s);
	return ret;
}

int fs_dirh_drop(struct fs_dirh *d, struct meta *m, uint64_t token)
{
	struct fs_pinset **at, *s = NULL;

	pthread_mutex_lock(&d->lock);
	for (at = &d->sets; *at; at = &(*at)->next) {
		if ((*at)->token == token) {
			s = *at;
			*at = s->next;
			d->npins -= s->n;
			break;
		}
	}
	pthread_mutex_unlock(&d->lock);
	if (!s)
		return -EINVAL;
	unpin_set(m, s);
	return 0;
}

void fs_resvset_abort(struct meta *m, struct fs_resvset *s)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->e[i].err == 0)
			meta_page_abort(m, &s->e[i].r);
	free(s);
}

int fs_dirh_keep_resv(struct fs_dirh *d, struct fs_resvset *s, uint64_t *token)
{
	int ret = 0;

	pthread_mutex_lock(&d->lock);
	if (d->nresv + s->n > FS_PIN_MAX) {
		ret = -EBUSY;
	} else {
		s->token = d->next_token++;
		*token = s->token;
		s->next = d->resvs;
		d->resvs = s;
		d->nresv += s->n;
	}
	pthread_mutex_unlock(&d->lock);
	return ret;
}

struct fs_resvset *fs_dirh_take_resv(struct fs_dirh *d, uint64_t token)
{
	struct fs_resvset **at, *s = NULL;

	pthread_mutex_lock(&d->lock);
	for (at = &d->resvs; *at; at = &(*at)->next) {
		if ((*at)->token == token) {
			s = *at;
			*at = s->next;
			d->nresv -= s->n;
			break;
		}
	}
	pthread_mutex_unlock(&d->lock);
	return s;
}
