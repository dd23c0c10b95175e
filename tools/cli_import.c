/*
 * cli_import.c - `pagefs import-json FILE`: adopts a persistence file of
 * SGLang's mini_3fs_metadata_server into the index (all or nothing), with
 * a progress bar when stderr is a terminal.
 */
#include "tools/cli_common.h"
#include "tools/cli_index.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CMD "import-json"

static void import_usage(FILE *f)
{
	fprintf(f, "usage: pagefs import-json FILE --backing DIR [--meta URI] [--page-size SIZE]\n"
	           "                          [--prefix NAME]\n"
	           "Adopts a mini_3fs_metadata_server persistence file: its pools, keys (as\n"
	           "pages of slot size), slots and LRU order. Nothing changes unless all of\n"
	           "it can be adopted. No daemon may hold the index. The slot size of a new\n"
	           "pool is --page-size, else the pool data file's size / num_pages.\n");
}

static void import_progress(void *arg, const char *what, uint64_t done, uint64_t total)
{
	(void)arg;
	if (!isatty(2) || !total)
		return;
	int width = 40, fill = (int)(done * (uint64_t)width / total);
	fprintf(stderr, "\r%-10s [%.*s%*s] %llu/%llu", what, fill,
	        "########################################", width - fill, "",
	        (unsigned long long)done, (unsigned long long)total);
	if (done == total && strcmp(what, "committing") == 0)
		fputc('\n', stderr);
}

int cli_import_main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"meta", required_argument, NULL, CLI_INDEX_META},
		{"backing", required_argument, NULL, CLI_INDEX_BACKING},
		{"prefix", required_argument, NULL, CLI_INDEX_PREFIX},
		{"page-size", required_argument, NULL, CLI_INDEX_PAGE_SIZE},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct cli_index_opts io = {0};
	struct meta_json_result res;
	struct timespec t0, t1;
	struct meta *m;
	char err[1024];
	int c, r;

	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		if ((r = cli_index_opt(CMD, &io, c, optarg)) == 1)
			continue;
		if (r)
			return r;
		if (c == 'h') {
			import_usage(stdout);
			return CLI_OK;
		}
		return cli_usage_error(CMD, "unknown option or missing argument '%s'",
		                       argv[optind - 1]);
	}
	if (optind + 1 != argc)
		return cli_usage_error(CMD, "give exactly one FILE to import");
	if ((r = cli_index_open(CMD, &io, &m)) != CLI_OK)
		return r;
	struct meta_json_opts o = {argv[optind], io.page_size, import_progress, NULL};
	clock_gettime(CLOCK_MONOTONIC, &t0);
	r = meta_import_json(m, &o, &res, err, sizeof(err));
	clock_gettime(CLOCK_MONOTONIC, &t1);
	meta_close(m);
	if (r < 0) {
		if (isatty(2))
			fputc('\n', stderr);
		return cli_fail(CMD, "%s; the index was not changed", err);
	}
	printf("imported %llu keys in %llu pools from %s in %.2f s\n", (unsigned long long)res.keys,
	       (unsigned long long)res.pools, argv[optind],
	       (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
	return CLI_OK;
}
