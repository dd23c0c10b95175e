/*
 * record.h - the durable record: journal and group commit, apply, load.
 *
 * meta/record/ turns index changes into records (rec.h), makes them durable
 * in the store (store.h) in batches, and mirrors what became durable in the
 * in-memory index (index.h). It also loads the index at open and keeps the
 * pools' data files. Lock order: meta.lock before journal.lock; the batch
 * writer never holds both (docs/DESIGN.md, "Locks").
 */
#ifndef PAGEFS_META_RECORD_H
#define PAGEFS_META_RECORD_H

#include "meta/index.h"
#include "meta/rec.h"

#include <stddef.h>
#include <stdint.h>

/* replaced.c: the rows a naming record replaces (SQLite store). */
/* Notes in r (REC_COMMIT or REC_RENAME, pool_id, page_id and name set)
 * the committed page its name belongs to now, if another. meta.lock
 * held. */
void record_note_replaced(struct meta *m, struct rec *r);
/* Makes r (REC_DROP) the drop of p: pool, id, slot and name hash. */
void record_set_drop(struct rec *r, const struct page *p);
struct namer;
struct resolver {
	struct namer *v;
	size_t n;
	uint32_t *head; /* by hash: the latest namer, + 1 */
	uint64_t mask;
	uint64_t *cand;
	size_t ncand, cap;
	uint32_t *at;             /* offsets into cand, per record (bulk: per page) */
	struct later_drop *later; /* drops in the batch or behind it, by hash */
	size_t nlater, later_cap;
	int oom;
};
/* Sets r->repl / bulk->repl of every naming record of batch. 0, or
 * -ENOMEM (nothing set: the batch must fail). No lock held. */
int record_replaced_resolve(struct meta *m, struct rec *batch, struct resolver *rs);
/* Clears what record_replaced_resolve set and frees rs. */
void record_replaced_free(struct rec *batch, struct resolver *rs);

/* journal.c */
int record_start(struct meta *m, char *err, size_t errlen);
void record_stop(struct meta *m);
/* Allocates a zeroed record. NULL on ENOMEM. */
struct rec *record_new(enum rec_type type);
/* Queues r; takes ownership. Caller may hold meta.lock. */
void record_submit(struct meta *m, struct rec *r);
/* Waits until r (submitted with r->waited = 1) is durable and applied;
 * returns r->err and frees r. Must not hold meta.lock. */
int record_wait(struct meta *m, struct rec *r);
/* Notes that the page's atime is to be written, within seconds, in the
 * background (no record, no wait). Caller may hold meta.lock. */
void record_touch(struct meta *m, uint64_t page_id, int64_t atime_ns);
void record_counters(struct meta *m, uint64_t *batches, uint64_t *records);
/* Holds every batch back (after the one being written) / lets them go:
 * records queued meanwhile go in one batch (meta_page_commit_many, and
 * tests). Release before waiting for any record; never with meta.lock
 * held at the hold. */
void record_hold(struct meta *m);
void record_release(struct meta *m);
size_t record_queued(struct meta *m);
/* Calls fn for every REC_DROP queued and not yet taken by a writer.
 * meta.lock may be held. */
void record_each_queued_drop(struct meta *m, void (*fn)(void *, const struct rec *), void *arg);
/* The REC_DROP of r's page after r (later in r's batch, or queued), or
 * NULL. For the batch writer, with meta.lock held: the record stays
 * until the writer is done, and its extra_slot and has_extra are
 * meta.lock's (apply.c). */
struct rec *record_drop_after(struct meta *m, const struct rec *r);

/* apply.c: mirrors a durable record in memory; called with meta.lock held
 * by the batch writer. Appends dropped names for the callback. */
void record_apply(struct meta *m, const struct rec *r, struct dropped **drops);
/* Shared index: brings the mirror to a page's current row after another
 * node changed it, and starts the grace period of a slot it freed in a
 * chunk of this node. Sync thread, meta.lock held. */
void record_apply_remote(struct meta *m, const struct store_change *c, struct dropped **drops);

/* dirtime.c: directory times across a clean unmount (meta.lock held by
 * the load and close calls). Pool times a clean unmount recorded (at
 * open, after the load); queues the pool times that moved since the load
 * (at close, before the journal stops). */
void record_dirtimes_load(struct meta *m);
void record_dirtimes_save(struct meta *m);

/* load.c: fills the empty meta from its store (pools, ranks, pages and
 * their LRU lists); 0, or -errno with err set (pages loaded stay linked
 * for meta_close to free). */
int record_load(struct meta *m, char *err, size_t errlen);
/* A pool from its store row, its data file opened (open.c). */
/* defer: only looks at the data file (data_missing, data_size); the load
 * opens it (record_pool_open_data) once it knows the pages. */
int record_pool_open_data(struct meta *m, struct pool *p, char *err, size_t errlen);
int record_pool_from_row(struct meta *m, const struct store_pool_row *row, int defer,
                         struct pool **out, char *err, size_t errlen);

/* data.c */
int record_data_path(const struct meta *m, int rank, const char *ns, char *buf, size_t len);
int record_data_path_of(const char *backing, const char *prefix, int rank, const char *ns,
                        char *buf, size_t len);
/* Opens (creating) a pool's data file and grows it to size bytes. */
/* Opens (read_only = 0: creating it, or growing it to size) a pool's
 * data file, a regular file. *made (may be NULL): this call created it; on
 * an error a file it created is removed again. 0 or -errno. */
int record_data_open(const char *path, uint64_t size, int read_only, int *fd, int *made);

#endif
