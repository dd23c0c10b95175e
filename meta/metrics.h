/*
 * metrics.h - the engine's part of GET /metrics (Prometheus text format)
 * and of GET /ready, and the hooks the engine's threads call to count.
 *
 * The counters the hooks feed are process-wide (one engine per daemon);
 * per-pool figures are read from the engine under meta.lock at scrape.
 */
#ifndef PAGEFS_META_METRICS_H
#define PAGEFS_META_METRICS_H

#include "meta/meta.h"

#include <stdint.h>
#include <stdio.h>

/* Writes every pool's gauges and counters, the store's (group commit,
 * errors, reconnects) and, for a shared index, the node's (nodes, lease,
 * change feed), plus pagefs_build_info. Takes meta.lock briefly. */
void meta_metrics_write(struct meta *m, FILE *out);
/* 0 when the engine can serve: the index is loaded, this node is not
 * fenced and the last index transaction succeeded; otherwise -EIO with
 * a short reason in why. */
int meta_metrics_ready(struct meta *m, char *why, size_t len);

/* Hooks (meta/ only): a group commit of `records` records that took ns;
 * an index transaction that failed with err (< 0), or succeeded (0:
 * what /ready reports from then on); a reconnect to
 * PostgreSQL; a heartbeat that renewed this node's lease; a read of the
 * change feed. */
void metrics_commit(uint64_t records, uint64_t ns);
void metrics_store_error(int err);
void metrics_reconnect(void);
void metrics_heartbeat(void);
void metrics_feed(void);

#endif
