/*
 * fs_metrics.h - the FUSE side of GET /metrics and GET /ready: request
 * latency by operation, and whether the mount serves.
 *
 * One mount per daemon: the state is process-wide. tools/ calls
 * fs_metrics_write and fs_metrics_ready from its HTTP listener's hooks;
 * fs_main.c wraps its handler table with fs_metrics_ops and reports the
 * mount's phase with fs_metrics_phase.
 */
#ifndef PAGEFS_FS_METRICS_H
#define PAGEFS_FS_METRICS_H

#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION 314
#endif
#include <fuse_lowlevel.h>
#include <stdio.h>

enum fs_phase {
	FS_PHASE_STARTING = 0, /* the index is loading or the mount is being made */
	FS_PHASE_SERVING,      /* mounted: requests are answered */
	FS_PHASE_STOPPING,     /* unmounted or signalled: tearing down */
};

/* A table that times every handler of real (which must outlive it) and
 * then calls it; handlers real lacks stay NULL, ones this file does not
 * know are copied untimed. */
const struct fuse_lowlevel_ops *fs_metrics_ops(const struct fuse_lowlevel_ops *real);
void fs_metrics_phase(enum fs_phase phase);
/* pagefs_fuse_request_duration_seconds{op} and pagefs_mount_serving. */
void fs_metrics_write(FILE *out);
/* 0 while serving; else -EAGAIN with the phase in why. */
int fs_metrics_ready(char *why, size_t len);

#endif
