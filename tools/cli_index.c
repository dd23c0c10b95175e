/*
 * cli_index.c - opening the index for the commands that work without a
 * mount (import-json, export-json, serve-meta): the same defaults as
 * `pagefs mount` (16M pages, 1T pools, prefix "hicache").
 */
#include "tools/cli_index.h"
#include "meta/log.h"
#include "tools/cli_common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_PAGE_SIZE (16ULL << 20)
#define DEFAULT_CAPACITY (1ULL << 40)

int cli_index_opt(const char *cmd, struct cli_index_opts *o, int c, const char *arg)
{
	switch (c) {
	case CLI_INDEX_META:
		o->meta_arg = arg;
		return 1;
	case CLI_INDEX_BACKING:
		o->backing_arg = arg;
		return 1;
	case CLI_INDEX_PREFIX:
		o->prefix = arg;
		return 1;
	case CLI_INDEX_PAGE_SIZE:
		return cli_parse_page_size(cmd, arg, &o->page_size) ? CLI_USAGE : 1;
	}
	return 0;
}

int cli_index_open(const char *cmd, struct cli_index_opts *o, struct meta **m)
{
	struct meta_config cfg = {0};
	struct stat st;
	char err[1024], abs[PATH_MAX];

	if (!o->backing_arg)
		return cli_usage_error(cmd, "--backing DIR is required (the directory of the data "
		                            "files)");
	if (!realpath(o->backing_arg, o->backing) || stat(o->backing, &st) < 0 ||
	    !S_ISDIR(st.st_mode))
		return cli_fail(cmd, "backing directory '%s' does not exist or is not a directory",
		                o->backing_arg);
	if (!o->meta_arg) {
		if (meta_default_uri(o->backing, o->uri, sizeof(o->uri)) < 0)
			return cli_fail(cmd,
			                "cannot choose a default index; give --meta sqlite:PATH");
	} else {
		const char *path =
			strncmp(o->meta_arg, "sqlite:", 7) == 0 ? o->meta_arg + 7 : o->meta_arg;
		if (cli_uri_is_shared(o->meta_arg)) {
			snprintf(o->uri, sizeof(o->uri), "%s", o->meta_arg);
		} else if (!*path) {
			return cli_usage_error(cmd, "--meta '%s' names no file", o->meta_arg);
		} else {
			if (path[0] == '/')
				snprintf(abs, sizeof(abs), "%s", path);
			else if (!getcwd(abs, sizeof(abs)) ||
			         strlen(abs) + strlen(path) + 2 > sizeof(abs))
				return cli_usage_error(cmd, "--meta path '%s' is too long", path);
			else
				snprintf(abs + strlen(abs), sizeof(abs) - strlen(abs), "/%s", path);
			snprintf(o->uri, sizeof(o->uri), "sqlite:%s", abs);
		}
	}
	if (o->prefix && meta_check_prefix(o->prefix) < 0)
		return cli_usage_error(
			cmd,
			"--prefix '%s' is not a data file prefix: use 1 to %d of the "
			"characters A-Z a-z 0-9 _ . - (not \"..\")",
			o->prefix, META_PREFIX_MAX);
	if (o->must_exist && strncmp(o->uri, "sqlite:", 7) == 0 && access(o->uri + 7, F_OK) < 0)
		return cli_fail(cmd, "no index at %s%s: check --meta (this command makes none)",
		                o->uri + 7, o->meta_arg ? "" : " (the default for this backing)");
	log_set_level(LOG_WARN); /* serve-meta's --log-level comes later */
	cfg.uri = o->uri;
	cfg.backing = o->backing;
	cfg.prefix = o->prefix ? o->prefix : "hicache";
	cfg.default_slot_size = o->page_size ? o->page_size : DEFAULT_PAGE_SIZE;
	cfg.default_capacity = DEFAULT_CAPACITY;
	cfg.evict = META_EVICT_LRU;
	cfg.verify = META_VERIFY_FIRST;
	cfg.durability = META_DURABLE_PROCESS;
	int rc = meta_open(&cfg, m, err, sizeof(err));
	if (rc < 0)
		return cli_fail(cmd, "%s", err);
	return CLI_OK;
}
