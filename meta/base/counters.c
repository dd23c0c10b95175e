/*
 * counters.c - the process-wide counters the engine's threads feed for
 * GET /metrics and /ready: group commits, store errors, reconnects,
 * heartbeats and change-feed reads (ops/metrics.c writes them out).
 */
#include "meta/counters.h"
#include "meta/hist.h"

#include <stdatomic.h>
#include <stdint.h>

struct counters counters = {
	.commit_ns = {.bounds = &hist_latency_ns},
	.batch_records = {.bounds = &hist_batch},
};

void metrics_commit(uint64_t records, uint64_t ns)
{
	hist_observe(&counters.commit_ns, ns);
	hist_observe(&counters.batch_records, records);
}

void metrics_store_error(int err)
{
	if (err < 0)
		atomic_fetch_add_explicit(&counters.store_errors, 1, memory_order_relaxed);
	atomic_store_explicit(&counters.last_error, err, memory_order_relaxed);
}

void metrics_reconnect(void)
{
	atomic_fetch_add_explicit(&counters.reconnects, 1, memory_order_relaxed);
}

void metrics_heartbeat(void)
{
	atomic_store_explicit(&counters.heartbeat_at, hist_now_ns(), memory_order_relaxed);
}

void metrics_feed(void)
{
	atomic_store_explicit(&counters.feed_at, hist_now_ns(), memory_order_relaxed);
}
