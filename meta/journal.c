/*
 * journal.c - group commit of records to the store, then their application
 * to memory, in submission order.
 *
 * Submitters append records under journal.lock and (for user-visible
 * changes) wait for them. One batch is written at a time (`writing`): it
 * takes everything queued, writes it in one store transaction, applies the
 * records that succeeded to memory under meta.lock, and wakes the waiters.
 * A waiter whose record is queued while no batch is being written writes
 * the batch itself (it leads), so a lone close costs no thread handoff;
 * the writer thread writes batches that no one waits for (touches, drops
 * of evicted pages). Batches are taken from the head of the queue one at a
 * time, so records reach the store and memory in submission order. Under
 * load many closes share one transaction (store_records / store_batches
 * shows how many). A record that fails in the store fails alone
 * (savepoint) and is not applied; if the whole transaction fails, every
 * record in it fails.
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
	int writing; /* a batch is being written: only its writer uses the store */
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
	if (!r->waited)
		pthread_cond_signal(&j->work); /* else its waiter leads (journal_wait) */
	pthread_mutex_unlock(&j->lock);
}

static void write_batch(struct meta *m, struct rec *batch);
static void run_batch(struct meta *m, struct rec *batch);

/* Takes the queue as a batch; called with journal.lock held, no batch
 * being written. */
static struct rec *take_batch(struct journal *j)
{
	struct rec *batch = j->head;

	j->head = j->tail = NULL;
	j->writing = 1;
	return batch;
}

/* Publishes a written batch; called with journal.lock held. Frees the
 * records no one waits for and wakes the waiters, one of which may lead the
 * next batch; the writer thread takes it if only unwaited records are left. */
static void finish_batch(struct journal *j, struct rec *batch)
{
	uint64_t n = 0;

	for (struct rec *r = batch, *next; r; r = next, n++) {
		next = r->next;
		if (r->waited)
			r->done = 1; /* the waiter frees it */
		else
			free(r);
	}
	j->batches++;
	j->records += n;
	j->writing = 0;
	if (j->head || j->stop)
		pthread_cond_signal(&j->work);
	pthread_cond_broadcast(&j->done);
}

int journal_wait(struct meta *m, struct rec *r)
{
	struct journal *j = m->journal;
	int err;

	pthread_mutex_lock(&j->lock);
	while (!r->done) {
		if (!j->writing && j->head) {
			/* Lead: r is queued (not done) and no batch is in flight. */
			struct rec *batch = take_batch(j);
			pthread_mutex_unlock(&j->lock);
			run_batch(m, batch);
			pthread_mutex_lock(&j->lock);
			finish_batch(j, batch);
			continue;
		}
		pthread_cond_wait(&j->done, &j->lock);
	}
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
		if (r->err < 0 && r->type != REC_TOUCH)
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

/* Writes a batch taken by take_batch to the store, then applies it to
 * memory under meta.lock (no journal.lock held: see the lock order). */
static void run_batch(struct meta *m, struct rec *batch)
{
	struct dropped *drops = NULL;

	write_batch(m, batch);
	pthread_mutex_lock(&m->lock);
	for (struct rec *r = batch; r; r = r->next)
		apply_record(m, r, &drops);
	pthread_mutex_unlock(&m->lock);
	drops_notify(m, drops);
}

static void *writer_main(void *arg)
{
	struct meta *m = arg;
	struct journal *j = m->journal;

	pthread_mutex_lock(&j->lock);
	for (;;) {
		while (j->writing || (!j->head && !j->stop))
			pthread_cond_wait(&j->work, &j->lock);
		if (!j->head)
			break; /* stop with nothing queued and nothing in flight */
		struct rec *batch = take_batch(j);
		pthread_mutex_unlock(&j->lock);
		run_batch(m, batch);
		pthread_mutex_lock(&j->lock);
		finish_batch(j, batch);
	}
	pthread_mutex_unlock(&j->lock);
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
