/*
 * cli_export.c - `pagefs export-json`: writes the index as a persistence
 * file SGLang's mini_3fs_metadata_server loads.
 */
#include "tools/cli_common.h"
#include "tools/cli_index.h"

#include <getopt.h>
#include <stdio.h>

#define CMD "export-json"

static void export_usage(FILE *f)
{
	fprintf(f,
	        "usage: pagefs export-json --backing DIR [--meta URI] [--prefix NAME] [-o FILE]\n"
	        "Writes every pool as {\"rank:namespace\": {num_pages, free_pages,\n"
	        "key_to_index}} (oldest use first) to FILE (via FILE.tmp; straight into\n"
	        "a device or pipe) or stdout.\n"
	        "No daemon may hold the index.\n");
}

int cli_export_main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"meta", required_argument, NULL, CLI_INDEX_META},
		{"backing", required_argument, NULL, CLI_INDEX_BACKING},
		{"prefix", required_argument, NULL, CLI_INDEX_PREFIX},
		{"output", required_argument, NULL, 'o'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct cli_index_opts io = {.must_exist = 1};
	struct meta_json_result res;
	const char *file = NULL;
	struct meta *m;
	char err[1024] = "";
	int c, r;

	while ((c = getopt_long(argc, argv, ":ho:", longopts, NULL)) != -1) {
		if ((r = cli_index_opt(CMD, &io, c, optarg)) == 1)
			continue;
		if (r)
			return r;
		if (c == 'h') {
			export_usage(stdout);
			return CLI_OK;
		}
		if (c == 'o') {
			file = optarg;
			continue;
		}
		return cli_usage_error(CMD, "unknown option or missing argument '%s'",
		                       argv[optind - 1]);
	}
	if (optind != argc)
		return cli_usage_error(CMD, "unexpected argument '%s'", argv[optind]);
	if ((r = cli_index_open(CMD, &io, &m)) != CLI_OK)
		return r;
	struct meta_json_opts o = {file, 0, NULL, NULL};
	r = meta_export_json(m, &o, &res, err, sizeof(err));
	meta_close(m);
	if (r < 0)
		return cli_fail(CMD, "%s", err);
	if (err[0])
		fprintf(stderr, "pagefs %s: warning: %s\n", CMD, err);
	if (file)
		printf("exported %llu keys in %llu pools to %s\n", (unsigned long long)res.keys,
		       (unsigned long long)res.pools, file);
	return CLI_OK;
}
