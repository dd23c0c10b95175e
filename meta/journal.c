/*
 * journal.c - the single writer: group commit of records to the store,
 * then their application to memory, in submission order.
 *
 * Submitters append records under journal.lock and (for user-visible
 * changes) wait for them. The writer thread takes everything queued,
 * writes it in one store transaction, applies the records that succeeded
 * to memory under meta.lock, and wakes the waiters. Under load many
 * closes share one transaction (store_records / store_batches shows how
 * many). A record that fails in the store fails alone (savepoint) and is
 * not applied; if the whole transaction fails, every record in it fails.
 */
#include "meta/internal.h"
#include "meta/log.h"
#include "meta/store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct journal {
	pthread_mutex_t lock;    /* protects the fields below */
	pthread_cond_t work;     /* queue not empty, or stop */
	pthread_cond_t done;     /* a batch finished */
	struct rec *head, *tail; /* queued records */
	uint64_t seq;
	int stop;
	uint64_t batches, records;
	pthread_t thread;
};

struct rec *rec_new(enum rec_type type)
{
	struct rec *r = calloc(1, sizeof(*r));

	if (r)
		r->type = type;
	return r;
}

void journal_submit(struct meta *m, struct rec *r)
{
	struct journal *j = m->journal;

	pthread_mutex_lock(&j->lock);
	r->seq = ++j->seq;
	r->next = NULL;
	if (j->tail)
		j->tail->next = r;
	else
		j->head = r;
	j->tail = r;
	pthread_cond_signal(&j->work);
	pthread_mutex_unlock(&j->lock);
}

int journal_wait(struct meta *m, struct rec *r)
{
	struct journal *j = m->journal;
	int err;

	pthread_mutex_lock(&j->lock);
	while (!r->done)
		pthread_cond_wait(&j->done, &j->lock);
	pthread_mutex_unlock(&j->lock);
	err = r->err;
	free(r);
	return err;
}

void journal_counters(struct meta *m, uint64_t *batches, uint64_t *records)
{
	struct journal *j = m->journal;

	pthread_mutex_lock(&j->lock);
	*batches = j->batches;
	*records = j->records;
	pthread_mutex_unlock(&j->lock);
}

/* Writes one batch; sets each record's err. */
static void write_batch(struct meta *m, struct rec *batch)
{
	int rc = store_begin(m->store);

	for (struct rec *r = batch; r; r = r->next) {
		r->err = rc < 0 ? rc : store_apply(m->store, r);
		/* (A lease finding every chunk taken is an answer, not a fault.) */
		if (r->err < 0 && r->type != REC_TOUCH &&
		    !(r->type == REC_LEASE && (r->err == -ENOSPC || r->err == -EAGAIN)))
			log_warn("index write failed (record %d, page %llu): %s", (int)r->type,
			         (unsigned long long)r->page_id, strerror(-r->err));
	}
	if (rc == 0)
		rc = store_commit(m->store);
	if (rc < 0) {
		log_error("index transaction failed: %s", strerror(-rc));
		store_rollback(m->store);
		for (struct rec *r = batch; r; r = r->next)
			r->err = rc;
	}
}

static void *writer_main(void *arg)
{
	struct meta *m = arg;
	struct journal *j = m->journal;

	for (;;) {
		pthread_mutex_lock(&j->lock);
		while (!j->head && !j->stop)
			pthread_cond_wait(&j->work, &j->lock);
		struct rec *batch = j->head;
		j->head = j->tail = NULL;
		pthread_mutex_unlock(&j->lock);
		if (!batch)
			break; /* stop with nothing queued */

		write_batch(m, batch);

		struct dropped *drops = NULL;
		uint64_t n = 0;
		pthread_mutex_lock(&m->lock);
		for (struct rec *r = batch; r; r = r->next, n++)
			apply_record(m, r, &drops);
		pthread_mutex_unlock(&m->lock);
		drops_notify(m, drops);

		pthread_mutex_lock(&j->lock);
		j->batches++;
		j->records += n;
		for (struct rec *r = batch, *next; r; r = next) {
			next = r->next;
			if (r->waited)
				r->done = 1; /* the waiter frees it */
			else
				free(r);
		}
		pthread_cond_broadcast(&j->done);
		pthread_mutex_unlock(&j->lock);
	}
	return NULL;
}

int journal_start(struct meta *m, char *err, size_t errlen)
{
	struct journal *j = calloc(1, sizeof(*j));
	int rc;

	if (!j) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	pthread_mutex_init(&j->lock, NULL);
	pthread_cond_init(&j->work, NULL);
	pthread_cond_init(&j->done, NULL);
	m->journal = j;
	rc = pthread_create(&j->thread, NULL, writer_main, m);
	if (rc) {
		snprintf(err, errlen, "cannot start the index writer: %s", strerror(rc));
		m->journal = NULL;
		free(j);
		return -rc;
	}
	return 0;
}

void journal_stop(struct meta *m)
{
	struct journal *j = m->journal;

	if (!j)
		return;
	pthread_mutex_lock(&j->lock);
	j->stop = 1;
	pthread_cond_signal(&j->work);
	pthread_mutex_unlock(&j->lock);
	pthread_join(j->thread, NULL);
	pthread_cond_destroy(&j->work);
	pthread_cond_destroy(&j->done);
	pthread_mutex_destroy(&j->lock);
	free(j);
	m->journal = NULL;
}
