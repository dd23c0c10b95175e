/*
 * journal.c - the single writer: group commit of records to the store,
 * then their application to memory, in submission order.
 *
 * Submitters append records under journal.lock and (for user-visible
 * changes) wait for them. Whoever writes - a waiter, or the writer
 * thread - takes everything queued, writes it in one store transaction,
 * applies the records that succeeded to memory under meta.lock, and wakes
 * the waiters. Under load many closes share one transaction
 * (store_records / store_batches shows how many). A record that fails in
 * the store fails alone (savepoint) and is not applied; if the whole
 * transaction fails, every record in it fails.
 *
 * Who writes: one batch at a time (`busy`), in queue order. A waiter
 * finding the store idle writes the queue itself (leader): a close then
 * costs no hand-off to another thread and back, two context switches
 * that cost more than the SQLite transaction on a virtual machine. The
 * writer thread writes what nobody waits for (drops, touches). So a
 * waited record does not wake the writer thread; its waiter is about to
 * write it, or is waiting for the batch in progress, after which it or
 * another waiter leads.
 *
 * Before writing a batch to SQLite, the writer finds the rows its records
 * replace (replaced.c).
 */
#include "meta/counters.h"
#include "meta/hist.h"
#include "meta/log.h"
#include "meta/record.h"
#include "meta/store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Recency reaches the store in the background: a lookup only notes the
 * page id, and the writer writes the atimes of the noted pages every
 * TOUCH_FLUSH_NS (sooner when TOUCH_MAX are waiting), in id order, in
 * one transaction. A crash forgets at most that much recency; a lookup
 * never waits for, nor competes with, a store write of its own. */
#define TOUCH_FLUSH_NS (5 * 1000000000LL)
#define TOUCH_MAX 65536

/* A use of a page the store is to hear of: its id and the time. */
struct touch {
	uint64_t id;
	int64_t at;
};

struct journal {
	pthread_mutex_t lock;    /* protects the fields below */
	pthread_cond_t work;     /* queue not empty, touches due, or stop */
	pthread_cond_t done;     /* a batch finished */
	struct rec *head, *tail; /* queued records */
	uint64_t seq;
	int busy; /* a batch is being written (by a waiter or the thread) */
	int stop;
	uint64_t batches, records;
	struct touch *touch; /* atimes to be written */
	size_t ntouch, touch_cap;
	pthread_t thread;
};

struct rec *record_new(enum rec_type type)
{
	struct rec *r = calloc(1, sizeof(*r));

	if (r)
		r->type = type;
	return r;
}

/* A bulk record's page i as the store writes it (struct bulk's row). */
static void bulk_row(const struct bulk *b, size_t i, struct bulk_row *out)
{
	const struct page *p = b->pages[i];

	out->id = p->id;
	out->pool_id = page_pool(p)->id;
	out->slot = p->slot;
	out->length = p->length;
	out->checksum = p->checksum;
	out->has_checksum = p->has_checksum;
	out->mtime_ns = page_mtime(p);
	out->atime_ns = (int64_t)p->atime_s * 1000000000LL;
	out->gen = gen_column(p->gen, p->version);
	out->name_len = p->name_len;
	index_pname_text(p, out->name);
}

void record_submit(struct meta *m, struct rec *r)
{
	if (r->type == REC_BULK && r->bulk)
		r->bulk->row = bulk_row;
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
		pthread_cond_signal(&j->work);
	pthread_mutex_unlock(&j->lock);
}

void record_touch(struct meta *m, uint64_t page_id, int64_t atime_ns)
{
	struct journal *j = m->journal;

	pthread_mutex_lock(&j->lock);
	if (j->ntouch == j->touch_cap) {
		size_t cap = j->touch_cap ? j->touch_cap * 2 : 1024;
		struct touch *t = realloc(j->touch, cap * sizeof(*t));
		if (!t) { /* recency is a hint: this one is forgotten */
			pthread_mutex_unlock(&j->lock);
			return;
		}
		j->touch = t;
		j->touch_cap = cap;
	}
	j->touch[j->ntouch++] = (struct touch){page_id, atime_ns};
	if (j->ntouch == TOUCH_MAX)
		pthread_cond_signal(&j->work);
	pthread_mutex_unlock(&j->lock);
}

void record_counters(struct meta *m, uint64_t *batches, uint64_t *records)
{
	struct journal *j = m->journal;

	pthread_mutex_lock(&j->lock);
	*batches = j->batches;
	*records = j->records;
	pthread_mutex_unlock(&j->lock);
}

/* Runs in all of a batch that keeps meeting another node's transaction
 * (a shared index), with a growing pause between them. */
#define BATCH_RUNS 6

/* Before run `run` (1 ...) of a batch: 10, 20, 40 ... ms, and up to as
 * much again at random, so that two nodes that met do not meet again. */
static void batch_pause(int run)
{
	long ms = 10L << (run - 1);
	unsigned seed = (unsigned)index_now_ns();
	ms += (long)(rand_r(&seed) % (unsigned)ms);
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* One run of a batch in one store transaction; sets each record's err
 * (every record's when the transaction fails). Returns -EDEADLK when a
 * record met another node's transaction and the transaction was rolled
 * back to be run again (unless this is the last run: that record then
 * fails with -EIO and the others are committed), else 0. */
static int write_run(struct meta *m, struct rec *batch, int last)
{
	int rc = store_begin(m->store);

	for (struct rec *r = batch; r; r = r->next) {
		r->err = rc < 0 ? rc : store_apply(m->store, r);
		if (r->err == -EDEADLK && !last) {
			store_rollback(m->store);
			return -EDEADLK;
		}
		if (r->err == -EDEADLK)
			r->err = -EIO;
		/* (A lease finding every chunk taken, or a rename or rewrite
		 * finding its page gone, is an answer, not a fault.) */
		if (r->err < 0 && r->type != REC_TOUCH &&
		    !(r->type == REC_LEASE && (r->err == -ENOSPC || r->err == -EAGAIN)) &&
		    !(r->type == REC_RENAME && r->err == -ENOENT) &&
		    !(r->type == REC_COMMIT && r->err == -ESTALE))
			log_warn("index write failed (record %d, page %llu): %s", (int)r->type,
			         (unsigned long long)r->page_id, strerror(-r->err));
	}
	if (rc == 0)
		rc = store_commit(m->store);
	if (rc == 0)
		metrics_store_error(0); /* the index answers again */
	if (rc == -EDEADLK && !last) {
		store_rollback(m->store);
		return -EDEADLK;
	}
	if (rc < 0) {
		log_error("index transaction failed: %s", strerror(-rc));
		metrics_store_error(rc);
		/* (the SQLite store's begin took its db_lock, even if it failed) */
		store_rollback(m->store);
		for (struct rec *r = batch; r; r = r->next)
			r->err = rc == -EDEADLK ? -EIO : rc;
	}
	return 0;
}

/* Writes one batch; sets each record's err. A record that meets another
 * node's transaction (a deadlock PostgreSQL broke by cancelling this
 * one) runs the whole batch again, after a pause: going back to the
 * record alone would keep the rows the batch's earlier records locked,
 * which is how the two transactions met, and they would meet again. */
static void write_batch(struct meta *m, struct rec *batch)
{
	struct resolver rs = {0};
	uint64_t t0 = hist_now_ns(), n = 0;
	int rc = m->shared ? 0 : record_replaced_resolve(m, batch, &rs);

	if (rc < 0) {
		log_error("index transaction failed: %s", strerror(-rc));
		for (struct rec *r = batch; r; r = r->next)
			r->err = rc;
	}
	for (int run = 1; rc == 0; run++) {
		rc = write_run(m, batch, run == BATCH_RUNS);
		if (rc != -EDEADLK)
			break;
		log_info("index: a batch of records met another node's transaction; "
		         "running it again (run %d of %d)",
		         run + 1, BATCH_RUNS);
		batch_pause(run);
		rc = 0;
	}
	record_replaced_free(batch, &rs);
	for (struct rec *r = batch; r; r = r->next)
		n++;
	if (rc == 0)
		metrics_commit(n, hist_now_ns() - t0);
}

/* By page id, then time. */
static int cmp_touch(const void *a, const void *b)
{
	const struct touch *x = a, *y = b;

	if (x->id != y->id)
		return x->id < y->id ? -1 : 1;
	return x->at < y->at ? -1 : x->at > y->at;
}

/* Writes the noted atimes of pages that still exist, the latest of each,
 * TOUCH_CHUNK rows a transaction (ts: taken from the journal, freed here).
 * The noted times are the clock's, to the nanosecond: memory keeps whole
 * seconds, and the LRU a remount builds follows these. A page is noted at
 * its first use in a second, so of uses in one second the store orders
 * pages by their first (a later use in that second moved the page in
 * memory only). Called by the writer thread only. */
#define TOUCH_CHUNK 4096

static void write_touches(struct meta *m, struct touch *ts, size_t n)
{
	struct rec *recs = n ? calloc(n < TOUCH_CHUNK ? n : TOUCH_CHUNK, sizeof(*recs)) : NULL;

	if (recs && ts)
		qsort(ts, n, sizeof(*ts), cmp_touch);
	else
		n = 0; /* neighbouring rows share pages */
	for (size_t i = 0; recs && i < n;) {
		struct rec *head = NULL, **tail = &head;
		size_t k = 0;
		index_lock(m);
		for (; i < n && k < TOUCH_CHUNK; i++) {
			struct page *p = i + 1 < n && ts[i + 1].id == ts[i].id
			                         ? NULL /* a later one follows */
			                         : index_idtable_find(&m->by_id, ts[i].id);
			if (!p || !p->committed)
				continue;
			memset(&recs[k], 0, sizeof(recs[k]));
			recs[k].type = REC_TOUCH;
			recs[k].page_id = p->id;
			recs[k].atime_ns = ts[i].at; /* (the store never moves one back) */
			*tail = &recs[k++];
			tail = &(*tail)->next;
		}
		index_unlock(m);
		if (!head)
			continue;
		write_batch(m, head);
		pthread_mutex_lock(&m->journal->lock);
		m->journal->batches++;
		m->journal->records += k;
		pthread_mutex_unlock(&m->journal->lock);
	}
	free(recs);
	free(ts);
}

/* Writes batch, applies it to memory and marks its records done. Called
 * by the one writer of the moment (busy set), with no lock held. */
static void run_batch(struct meta *m, struct rec *batch)
{
	struct journal *j = m->journal;
	struct dropped *drops = NULL;
	uint64_t n = 0;

	write_batch(m, batch);
	index_lock(m);
	for (struct rec *r = batch; r; r = r->next, n++)
		record_apply(m, r, &drops);
	index_unlock(m);
	index_drops_notify(m, drops);

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
	pthread_mutex_unlock(&j->lock);
}

/* Ends a writer's turn: wakes the waiters (theirs is done, or one of them
 * leads next) and the writer thread if records nobody waits for are
 * queued. Called with journal.lock held. */
static void finish(struct journal *j)
{
	j->busy = 0;
	pthread_cond_broadcast(&j->done);
	for (struct rec *r = j->head; r; r = r->next) {
		if (!r->waited) {
			pthread_cond_signal(&j->work);
			break;
		}
	}
}

int record_wait(struct meta *m, struct rec *r)
{
	index_assert_unlocked(m);
	struct journal *j = m->journal;
	int err;

	pthread_mutex_lock(&j->lock);
	while (!r->done) {
		if (!j->busy && j->head) {
			/* Lead: write everything queued, r among it. */
			struct rec *batch = j->head;

			j->head = j->tail = NULL;
			j->busy = 1;
			pthread_mutex_unlock(&j->lock);
			run_batch(m, batch);
			pthread_mutex_lock(&j->lock);
			finish(j);
			continue;
		}
		pthread_cond_wait(&j->done, &j->lock);
	}
	pthread_mutex_unlock(&j->lock);
	err = r->err;
	free(r);
	return err;
}

static int passed(const struct timespec *due)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec > due->tv_sec ||
	       (now.tv_sec == due->tv_sec && now.tv_nsec >= due->tv_nsec);
}

static void *writer_main(void *arg)
{
	struct meta *m = arg;
	struct journal *j = m->journal;
	struct timespec due;

	clock_gettime(CLOCK_MONOTONIC, &due);
	due.tv_sec += TOUCH_FLUSH_NS / 1000000000LL;
	for (;;) {
		int late = 0, stop;

		pthread_mutex_lock(&j->lock);
		for (;;) {
			late = passed(&due);
			if (!j->busy && (j->head || j->stop || j->ntouch >= TOUCH_MAX || late))
				break;
			if (j->busy) /* a waiter is writing; its finish() wakes us */
				pthread_cond_wait(&j->done, &j->lock);
			else
				pthread_cond_timedwait(&j->work, &j->lock, &due);
		}
		struct rec *batch = j->head;
		struct touch *touch = NULL;
		size_t ntouch = 0;
		j->head = j->tail = NULL;
		stop = j->stop;
		if (stop || j->ntouch >= TOUCH_MAX || late) {
			touch = j->touch;
			ntouch = j->ntouch;
			j->touch = NULL;
			j->ntouch = j->touch_cap = 0;
		}
		j->busy = 1;
		pthread_mutex_unlock(&j->lock);
		if (touch || late) {
			write_touches(m, touch, ntouch);
			clock_gettime(CLOCK_MONOTONIC, &due);
			due.tv_sec += TOUCH_FLUSH_NS / 1000000000LL;
		}
		if (batch)
			run_batch(m, batch);
		pthread_mutex_lock(&j->lock);
		finish(j);
		pthread_mutex_unlock(&j->lock);
		if (!batch && stop)
			break; /* stop with nothing queued (touches written above) */
	}
	return NULL;
}

int record_start(struct meta *m, char *err, size_t errlen)
{
	struct journal *j = calloc(1, sizeof(*j));
	int rc;

	if (!j) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_mutex_init(&j->lock, NULL);
	pthread_cond_init(&j->work, &ca);
	pthread_condattr_destroy(&ca);
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

/* While held, no batch starts, as if one were being written, so records
 * queue together (meta_page_commit_many) or in the order a test chooses
 * (tests/unit/test_race.c); release lets them go. */
void record_hold(struct meta *m)
{
	struct journal *j = m->journal;

	pthread_mutex_lock(&j->lock);
	while (j->busy)
		pthread_cond_wait(&j->done, &j->lock);
	j->busy = 1;
	pthread_mutex_unlock(&j->lock);
}

void record_release(struct meta *m)
{
	struct journal *j = m->journal;

	pthread_mutex_lock(&j->lock);
	finish(j);
	pthread_mutex_unlock(&j->lock);
}

void record_each_queued_drop(struct meta *m, void (*fn)(void *, const struct rec *), void *arg)
{
	struct journal *j = m->journal;

	pthread_mutex_lock(&j->lock);
	for (const struct rec *r = j->head; r; r = r->next)
		if (r->type == REC_DROP)
			fn(arg, r);
	pthread_mutex_unlock(&j->lock);
}

static struct rec *drop_of(struct rec *from, uint64_t page_id)
{
	while (from && !(from->type == REC_DROP && from->page_id == page_id))
		from = from->next;
	return from;
}

struct rec *record_drop_after(struct meta *m, const struct rec *r)
{
	index_assert_locked(m);
	struct journal *j = m->journal;
	struct rec *d = drop_of(r->next, r->page_id);

	if (!d) {
		pthread_mutex_lock(&j->lock);
		d = drop_of(j->head, r->page_id);
		pthread_mutex_unlock(&j->lock);
	}
	return d;
}

size_t record_queued(struct meta *m)
{
	struct journal *j = m->journal;
	size_t n = 0;

	pthread_mutex_lock(&j->lock);
	for (const struct rec *r = j->head; r; r = r->next)
		n++;
	pthread_mutex_unlock(&j->lock);
	return n;
}

void record_stop(struct meta *m)
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
	free(j->touch);
	free(j);
	m->journal = NULL;
}
