/*
 * cli_index.h - what import-json, export-json and serve-meta share: the
 * --meta/--backing/--prefix/--page-size options and opening the index
 * without a mount.
 */
#ifndef PAGEFS_CLI_INDEX_H
#define PAGEFS_CLI_INDEX_H

#include "meta/meta.h"

#include <limits.h>
#include <stdint.h>

struct cli_index_opts {
	const char *meta_arg;    /* --meta as given; NULL: the default index */
	const char *backing_arg; /* --backing as given (required) */
	const char *prefix;      /* --prefix, default "hicache" */
	uint64_t page_size;      /* --page-size, 0 if not given */
	int must_exist;          /* an SQLite index must be there (export: make none) */
	char backing[PATH_MAX];
	char uri[PATH_MAX + 16];
};

/* getopt_long ids of the shared options (above 255). */
enum { CLI_INDEX_META = 300, CLI_INDEX_BACKING, CLI_INDEX_PREFIX, CLI_INDEX_PAGE_SIZE };

/* Handles one shared option; returns 1 if it was one, 0 if not, or
 * CLI_USAGE (2) after printing what was wrong. */
int cli_index_opt(const char *cmd, struct cli_index_opts *o, int c, const char *arg);
/*
 * Resolves the paths and opens the index (taking its lock: no daemon may
 * hold it). Prints the reason and returns CLI_USAGE/CLI_FAIL on error,
 * CLI_OK with *m set on success.
 */
int cli_index_open(const char *cmd, struct cli_index_opts *o, struct meta **m);

#endif
