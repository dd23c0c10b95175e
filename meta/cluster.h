/*
 * cluster.h - several nodes on one PostgreSQL index: sync, leases, chunks.
 *
 * meta/cluster/ runs only on a shared index. The layers below reach it
 * through struct cluster_ops (index.h), NULL on a single node, so the
 * single-node path runs none of this code.
 */
#ifndef PAGEFS_META_CLUSTER_H
#define PAGEFS_META_CLUSTER_H

#include "meta/index.h"

#include <stdint.h>

/* What open.c installs in struct meta on a shared index (index.h). */
extern const struct cluster_ops cluster_ops;

/* sync.c: the sync thread of a shared index. */
int cluster_sync_start(struct meta *m, char *err, size_t errlen);
void cluster_sync_stop(struct meta *m);
void cluster_sync_kick(struct meta *m); /* wakes it for a heartbeat soon */

/* lease.c: this node's lease as its own clock can be sure of it. */
int64_t cluster_lease_clock(void); /* CLOCK_BOOTTIME, ns */
void cluster_lease_init(struct meta *m);
void cluster_lease_destroy(struct meta *m);
/* A heartbeat whose transaction began at `began` (cluster_lease_clock) renewed. */
void cluster_lease_renewed(struct meta *m, int64_t began);
/* The node was removed: every meta_lease_hold fails from now on. */
void cluster_lease_lost(struct meta *m);

/* Heartbeat: hands chunks over to nodes that asked for one (wants[i]:
 * pool id, chunks this node holds there, nodes sharing it), then queues
 * the release of drained chunks. Appends evicted names to drops. */
void cluster_chunks_handover(struct meta *m, const uint64_t (*wants)[3], size_t nwants,
                             struct dropped **drops);

#endif
