/*
 * cli_mount.h - the options of `pagefs mount` as one config struct, and
 * the parser that fills it (tools/cli_mount.c). Separate from the command
 * so that tests/fuzz/fuzz_options.c can drive the parser with any argv.
 */
#ifndef PAGEFS_CLI_MOUNT_H
#define PAGEFS_CLI_MOUNT_H

#include "meta/meta.h"

#include <limits.h>
#include <stdint.h>

struct cli_mount_config {
	char backing[PATH_MAX];       /* absolute, resolved */
	char mountpoint[PATH_MAX];    /* absolute, resolved */
	char meta_uri[PATH_MAX + 16]; /* sqlite:ABSOLUTE or postgres://... as given */
	const char *meta_arg;         /* --meta as given, NULL: default */
	uint64_t page_size;
	uint64_t capacity;
	const char *prefix;
	enum meta_evict evict;
	enum meta_verify verify;
	enum meta_durability durability;
	int threads; /* 0: libfuse default */
	int allow_other;
	int read_only;
	int log_level; /* enum log_level */
	char log_file[PATH_MAX];
	int foreground;
	int debug;
	double entry_timeout;
	int kernel_cache; /* enum pagefs_kernel_cache */
	const char *http; /* --http ADDR:PORT: serve the 3FS metadata protocol too */
	/* as given, checked after every option is read */
	const char *page_size_arg, *capacity_arg, *log_file_arg;
	/* -o values (cfg's strings point into it) */
	char o_store[8192];
	size_t o_used;
	int sloppy;       /* mount.fuse.pagefs -s: ignore unknown -o options */
	char metrics[80]; /* --metrics ADDR:PORT: /metrics, /health, /ready only ("": none) */
};

/*
 * Parses `pagefs mount` argv (argv[0] is "mount") into cfg: every option,
 * then BACKING (an existing directory) and MOUNTPOINT (an existing empty
 * one) made absolute, then the index URI. Uses getopt_long: set optind to
 * 0 before a second call. Returns 0; -1 after printing --help to stdout;
 * or CLI_USAGE/CLI_FAIL after printing what was wrong to stderr. cfg
 * points into argv (meta_arg, prefix, http): keep argv alive.
 */
int cli_mount_parse(int argc, char **argv, struct cli_mount_config *cfg);

#endif
