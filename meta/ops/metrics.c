/*
 * metrics.c - the engine's metrics for GET /metrics: per-pool gauges and
 * counters read under meta.lock at scrape, and process-wide counters and
 * histograms the journal and sync threads feed without a lock (hist.h).
 *
 * Names follow Prometheus conventions: pagefs_ prefix, base units in the
 * name (_bytes, _seconds), _total for counters, rank and namespace
 * labels per pool. docs/OPERATIONS.md lists them.
 */
#include "meta/metrics.h"

#include "meta/counters.h"
#include "meta/hist.h"
#include "meta/ops.h"
#include "meta/record.h"
#include "meta/store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#ifndef PAGEFS_VERSION
#define PAGEFS_VERSION "0.1.0"
#endif

/* One pool's figures, copied under meta.lock. */
struct pool_row {
	uint16_t rank;
	char ns[META_NS_MAX + 1];
	uint64_t v[19];
};

/* The per-pool families, in the order of pool_row.v. */
static const struct {
	const char *name, *type, *help;
} pool_families[] = {
	{"pagefs_pool_pages", "gauge", "Committed pages in the pool."},
	{"pagefs_pool_bytes", "gauge", "Sum of the committed pages' lengths."},
	{"pagefs_pool_capacity_bytes", "gauge", "Pool capacity (slots times slot size)."},
	{"pagefs_pool_capacity_slots", "gauge", "Pool capacity in slots."},
	{"pagefs_pool_slot_size_bytes", "gauge", "Bytes per slot."},
	{"pagefs_pool_free_slots", "gauge", "Slots free for new pages."},
	{"pagefs_pool_used_slots", "gauge",
         "Slots in use: committed, being written, or waiting to be freed."},
	{"pagefs_pool_writing_slots", "gauge", "Slots reserved by writers not yet committed."},
	{"pagefs_pool_pinned_slots", "gauge", "Slots open readers (or the quarantine) hold."},
	{"pagefs_pool_quarantined_slots", "gauge",
         "Slots the 3FS protocol's quarantine holds after a delete."},
	{"pagefs_pool_hits_total", "counter", "Lookups that found a page."},
	{"pagefs_pool_misses_total", "counter", "Lookups that found no page."},
	{"pagefs_pool_evictions_total", "counter", "Pages evicted to make room."},
	{"pagefs_pool_checksum_failures_total", "counter",
         "Pages dropped because their bytes failed the checksum."},
	{"pagefs_pool_refused_total", "counter",
         "Writes refused a slot while the pool was full: 3FS protocol keys answered -1, "
         "FUSE writes ENOSPC."},
	{"pagefs_pool_ignored_confirms_total", "counter",
         "3FS protocol confirms of a slot not reserved for the key, and releases of a slot in "
         "use, ignored."},
	{"pagefs_pool_read_bytes_total", "counter", "Page bytes read."},
	{"pagefs_pool_written_bytes_total", "counter", "Page bytes written."},
	{"pagefs_pool_data_file_missing", "gauge",
         "1 if the pool's data file was missing at load."},
};

static uint64_t quarantined(const struct pool *p)
{
	uint64_t n = 0;

	for (int b = 0; b < PIN_BUCKETS; b++)
		for (const struct pin *pin = p->pins[b]; pin; pin = pin->next)
			n += pin->quar ? 1 : 0;
	return n;
}

/* Copies every live pool's row. Returns the count (*out malloc'd, may be
 * NULL when there are none or memory ran out). */
static size_t pool_rows(struct meta *m, struct pool_row **out)
{
	size_t n = 0, i = 0;

	index_lock(m);
	for (struct pool *p = m->pools; p; p = p->next)
		n += p->removed ? 0 : 1;
	*out = n ? calloc(n, sizeof(**out)) : NULL;
	for (struct pool *p = m->pools; *out && p; p = p->next) {
		if (p->removed)
			continue;
		struct pool_row *r = &(*out)[i++];
		uint64_t free_slots = p->capacity > p->nused ? p->capacity - p->nused : 0;
		r->rank = p->rank;
		memcpy(r->ns, p->ns, sizeof(r->ns));
		uint64_t v[] = {p->pages,
		                p->bytes,
		                p->capacity * p->slot_size,
		                p->capacity,
		                p->slot_size,
		                free_slots,
		                p->nused,
		                p->resv,
		                p->npins,
		                quarantined(p),
		                p->hits,
		                p->misses,
		                p->evictions,
		                p->checksum_failures,
		                p->refused,
		                p->ignored,
		                p->bytes_read,
		                p->bytes_written,
		                p->data_missing};
		memcpy(r->v, v, sizeof(r->v));
	}
	index_unlock(m);
	return *out ? i : 0;
}

static double age_s(uint64_t at)
{
	uint64_t now = hist_now_ns();

	return at && now > at ? (double)(now - at) / 1e9 : 0;
}

void meta_metrics_write(struct meta *m, FILE *out)
{
	_Static_assert(sizeof(pool_families) / sizeof(pool_families[0]) ==
	                       sizeof(((struct pool_row *)0)->v) / sizeof(uint64_t),
	               "one family per pool figure");
	struct pool_row *rows;
	size_t n = pool_rows(m, &rows);
	uint64_t batches, records;

	hist_family(out, "pagefs_build_info", "gauge", "The pagefs version serving (always 1).");
	fprintf(out, "pagefs_build_info{version=\"%s\"} 1\n", PAGEFS_VERSION);
	hist_family(out, "pagefs_pools", "gauge", "Pools in the index.");
	fprintf(out, "pagefs_pools %zu\n", n);
	for (size_t f = 0; f < sizeof(pool_families) / sizeof(pool_families[0]); f++) {
		hist_family(out, pool_families[f].name, pool_families[f].type,
		            pool_families[f].help);
		for (size_t i = 0; i < n; i++)
			fprintf(out, "%s{rank=\"%u\",namespace=\"%s\"} %llu\n",
			        pool_families[f].name, rows[i].rank, rows[i].ns,
			        (unsigned long long)rows[i].v[f]);
	}
	free(rows);

	record_counters(m, &batches, &records);
	hist_family(out, "pagefs_store_commits_total", "counter",
	            "Index transactions committed (group commits).");
	fprintf(out, "pagefs_store_commits_total %llu\n", (unsigned long long)batches);
	hist_family(out, "pagefs_store_records_total", "counter",
	            "Records written in index transactions.");
	fprintf(out, "pagefs_store_records_total %llu\n", (unsigned long long)records);
	hist_family(out, "pagefs_store_commit_records", "histogram",
	            "Records per group commit (batch size).");
	hist_write(out, "pagefs_store_commit_records", "", &counters.batch_records);
	hist_family(out, "pagefs_store_commit_duration_seconds", "histogram",
	            "Time to write one group commit to the index.");
	hist_write(out, "pagefs_store_commit_duration_seconds", "", &counters.commit_ns);
	hist_family(out, "pagefs_store_errors_total", "counter", "Index transactions that failed.");
	fprintf(out, "pagefs_store_errors_total %llu\n",
	        (unsigned long long)atomic_load(&counters.store_errors));
	hist_family(out, "pagefs_store_reconnects_total", "counter",
	            "Reconnects to the PostgreSQL index.");
	fprintf(out, "pagefs_store_reconnects_total %llu\n",
	        (unsigned long long)atomic_load(&counters.reconnects));

	index_lock(m);
	int shared = m->shared, fenced = m->fenced;
	unsigned nodes = m->live_nodes;
	index_unlock(m);
	hist_family(out, "pagefs_store_shared", "gauge",
	            "1 if the index is shared by several nodes (PostgreSQL).");
	fprintf(out, "pagefs_store_shared %d\n", shared);
	if (!shared)
		return;
	hist_family(out, "pagefs_pg_nodes", "gauge", "Live nodes on the shared index.");
	fprintf(out, "pagefs_pg_nodes %u\n", nodes);
	hist_family(out, "pagefs_pg_fenced", "gauge",
	            "1 if this node lost its lease and writes nothing more.");
	fprintf(out, "pagefs_pg_fenced %d\n", fenced);
	hist_family(out, "pagefs_pg_lease_age_seconds", "gauge",
	            "Seconds since a heartbeat last renewed this node's lease.");
	fprintf(out, "pagefs_pg_lease_age_seconds %.3f\n",
	        age_s(atomic_load(&counters.heartbeat_at)));
	hist_family(out, "pagefs_pg_feed_lag_seconds", "gauge",
	            "Seconds since this node last read the change feed.");
	fprintf(out, "pagefs_pg_feed_lag_seconds %.3f\n", age_s(atomic_load(&counters.feed_at)));
}

int meta_metrics_ready(struct meta *m, char *why, size_t len)
{
	index_lock(m);
	int fenced = m->fenced;
	index_unlock(m);
	int err = atomic_load(&counters.last_error);

	if (fenced) {
		snprintf(why, len, "this node lost its lease on the index: remount it");
		return -EIO;
	}
	if (err < 0) {
		snprintf(why, len, "the last index transaction failed: %s", strerror(-err));
		return -EIO;
	}
	snprintf(why, len, "ok");
	return 0;
}
