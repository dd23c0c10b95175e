/*
 * perf_meta.h - an index of meta/ for the measurement programs that call
 * it directly (lookup_bench, write_bench): SQLite in a temporary
 * directory with a backing directory beside it, no eviction, no checksum
 * checks, pools of 4 KiB slots; and its removal. Header-only, as
 * perf_common.h.
 */
#ifndef PAGEFS_PERF_META_H
#define PAGEFS_PERF_META_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "meta/meta.h"

struct perf_index {
	char dir[32];
	struct meta *m;
};

/* Opens a new index whose pools default to pages slots; 0, or -1 after
 * printing why (prog: the program's name). */
static inline int perf_index_open(struct perf_index *x, const char *prog, uint64_t pages)
{
	char uri[64], backing[64], err[512];
	struct meta_config cfg;

	snprintf(x->dir, sizeof(x->dir), "/tmp/%s.XXXXXX", prog);
	if (!mkdtemp(x->dir))
		return perror("mkdtemp"), -1;
	snprintf(uri, sizeof(uri), "sqlite:%s/index.db", x->dir);
	snprintf(backing, sizeof(backing), "%s/backing", x->dir);
	if (mkdir(backing, 0755) < 0)
		return perror(backing), -1;
	memset(&cfg, 0, sizeof(cfg));
	cfg.uri = uri;
	cfg.backing = backing;
	cfg.prefix = "hicache";
	cfg.default_slot_size = 4096;
	cfg.default_capacity = pages * 4096;
	cfg.evict = META_EVICT_NONE;
	cfg.verify = META_VERIFY_NONE;
	if (meta_open(&cfg, &x->m, err, sizeof(err)) < 0)
		return fprintf(stderr, "%s: %s\n", prog, err), -1;
	return 0;
}

/* Closes the index and removes its directory: 0, or -1. */
static inline int perf_index_close(struct perf_index *x)
{
	char cmd[64];

	meta_close(x->m);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", x->dir);
	return system(cmd) == 0 ? 0 : -1;
}

#endif
