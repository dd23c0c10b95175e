/*
 * hist.h - lock-free histograms and counters for the Prometheus text
 * format (GET /metrics), shared by meta/, fs/ and serve/.
 *
 * Observing costs a bucket search over at most HIST_BUCKETS bounds and
 * two relaxed atomic adds, on one of HIST_SHARDS cache-line-aligned
 * shards picked per thread: threads on the data path do not share a
 * line unless more than HIST_SHARDS of them run, and nothing takes a
 * lock. A scrape sums the shards (values may be a few observations
 * apart from each other: Prometheus tolerates that).
 */
#ifndef PAGEFS_META_HIST_H
#define PAGEFS_META_HIST_H

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#define HIST_BUCKETS 20
#define HIST_SHARDS 16

/* Upper bounds (inclusive) of a histogram's buckets, ascending, and the
 * factor that turns an observed integer into the exposed unit (1e-9 for
 * nanoseconds -> seconds, 1 for counts). */
struct hist_bounds {
	int n; /* <= HIST_BUCKETS */
	uint64_t le[HIST_BUCKETS];
	double scale;
};

/* Latencies in ns: 10 us .. 10 s. Batch sizes: 1 .. 4096 records. */
extern const struct hist_bounds hist_latency_ns;
extern const struct hist_bounds hist_batch;

struct hist_shard {
	_Atomic uint64_t bucket[HIST_BUCKETS + 1]; /* last: above every bound */
	_Atomic uint64_t sum;
} __attribute__((aligned(64)));

struct hist {
	const struct hist_bounds *bounds;
	struct hist_shard shard[HIST_SHARDS];
};

/* Records one value. No lock; safe from any thread. */
void hist_observe(struct hist *h, uint64_t v);
/* Writes one histogram's samples (no HELP/TYPE lines): name_bucket{labels,le=..},
 * name_sum, name_count. labels: "" or `key="value",...` without braces. */
void hist_write(FILE *out, const char *name, const char *labels, const struct hist *h);
/* HELP and TYPE lines of a metric family. */
void hist_family(FILE *out, const char *name, const char *type, const char *help);
/* The monotonic clock in ns (what latencies are measured with). */
uint64_t hist_now_ns(void);
/* Writes s into out as a label value (", \ and newline escaped). */
void hist_label(FILE *out, const char *s);

#endif
