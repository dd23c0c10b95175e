/*
 * metrics.h - the engine's part of GET /metrics (Prometheus text format)
 * and of GET /ready (the counters the engine's threads feed: counters.h).
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

#endif
