/*
 * counters.h - process-wide counters the engine's threads feed without a
 * lock (one engine per daemon): group commits, store errors, reconnects,
 * heartbeats, change-feed reads. ops/metrics.c writes them for GET
 * /metrics and reads last_error for GET /ready.
 */
#ifndef PAGEFS_META_COUNTERS_H
#define PAGEFS_META_COUNTERS_H

#include "meta/hist.h"

#include <stdatomic.h>
#include <stdint.h>

struct counters {
	struct hist commit_ns, batch_records; /* per group commit */
	_Atomic uint64_t store_errors, reconnects;
	_Atomic int last_error;                 /* of the last transaction: 0 or -errno */
	_Atomic uint64_t heartbeat_at, feed_at; /* hist_now_ns() of the last one; 0: never */
};
extern struct counters counters;

/* A group commit of `records` records that took ns. */
void metrics_commit(uint64_t records, uint64_t ns);
/* An index transaction that failed with err (< 0), or succeeded (0:
 * what /ready reports from then on). */
void metrics_store_error(int err);
void metrics_reconnect(void);
void metrics_heartbeat(void);
void metrics_feed(void);

#endif
