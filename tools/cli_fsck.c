/*
 * cli_fsck.c - `pagefs fsck BACKING --meta URI [--repair] [--verify-data]`:
 * the offline check of an index against its data files (meta_fsck), one
 * line per problem, progress on stderr when it is a terminal.
 *
 * Exit status: 0 only when the index is clean; 1 when problems were found
 * (repaired or not) or the check could not run; 2 for usage errors.
 */
#include "meta/meta.h"
#include "tools/cli_common.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

struct cli_fsck_config {
	const char *backing;
	const char *meta;
	int repair;
	int verify_data;
	int quiet;
};

static void cli_fsck_usage(FILE *out)
{
	fprintf(out,
	        "Usage: pagefs fsck BACKING [--meta URI] [--repair] [--verify-data]\n"
	        "\n"
	        "Checks a pagefs index against the data files in BACKING with no daemon\n"
	        "running: pages outside their pool, two pages on one slot, missing or short\n"
	        "data files, pool settings, the owner mark, and with --verify-data every\n"
	        "page's checksum. Exit 0 only when clean.\n"
	        "\n"
	        "  --meta URI       the index: sqlite:PATH or postgres://... (default: the one\n"
	        "                   'pagefs mount' uses for BACKING)\n"
	        "  --repair         fix what can be fixed without inventing data: a page that\n"
	        "                   cannot be trusted is dropped, never guessed\n"
	        "  --verify-data    read every page and compare it with its checksum\n"
	        "  -q, --quiet      print only the summary\n"
	        "  -h, --help       this text\n");
}

static void cli_fsck_report(void *arg, const char *code, const char *what, const char *fix,
                            int repaired)
{
	const struct cli_fsck_config *c = arg;

	if (c->quiet)
		return;
	printf("%-17s %s\n%17s fix: %s%s\n", code, what, "", fix,
	       repaired    ? " [repaired]"
	       : c->repair ? " [NOT repaired]"
	                   : "");
}

static void cli_fsck_progress(void *arg, const char *pass, uint64_t done, uint64_t total)
{
	(void)arg;
	if (!isatty(STDERR_FILENO))
		return;
	if (total)
		fprintf(stderr, "\r%s: %llu/%llu pages", pass, (unsigned long long)done,
		        (unsigned long long)total);
	else
		fprintf(stderr, "\r%s: %llu pages", pass, (unsigned long long)done);
	if (total && done == total)
		fputc('\n', stderr);
}

int cli_fsck_main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"meta", required_argument, NULL, 'm'},  {"repair", no_argument, NULL, 'r'},
		{"verify-data", no_argument, NULL, 'v'}, {"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0},
	};
	struct cli_fsck_config c = {0};
	struct meta_fsck_result res;
	char uri[4200], err[1024];
	int opt;

	opterr = 0;
	/* No "+": options may follow BACKING (pagefs fsck BACKING --meta URI). */
	while ((opt = getopt_long(argc, argv, ":qh", longopts, NULL)) != -1) {
		switch (opt) {
		case 'm':
			c.meta = optarg;
			break;
		case 'r':
			c.repair = 1;
			break;
		case 'v':
			c.verify_data = 1;
			break;
		case 'q':
			c.quiet = 1;
			break;
		case 'h':
			cli_fsck_usage(stdout);
			return CLI_OK;
		case ':':
			return cli_usage_error("fsck", "option '%s' needs a value",
			                       argv[optind - 1]);
		default:
			return cli_usage_error("fsck", "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (argc - optind != 1)
		return cli_usage_error("fsck", "expected BACKING, the backing directory");
	c.backing = argv[optind];
	if (!c.meta) {
		if (meta_default_uri(c.backing, uri, sizeof(uri)) < 0)
			return cli_fail("fsck", "backing directory %s does not exist", c.backing);
		c.meta = uri;
	}
	struct meta_fsck_opts o = {
		.uri = c.meta,
		.backing = c.backing,
		.repair = c.repair,
		.verify_data = c.verify_data,
		.report = cli_fsck_report,
		.progress = cli_fsck_progress,
		.arg = &c,
	};
	int rc = meta_fsck(&o, &res, err, sizeof(err));
	if (rc < 0)
		return cli_fail("fsck", "%s", err);
	printf("pagefs fsck: %s: %llu pools, %llu pages, %llu problems", c.meta,
	       (unsigned long long)res.pools, (unsigned long long)res.pages,
	       (unsigned long long)res.problems);
	if (c.repair)
		printf(", %llu repaired", (unsigned long long)res.repaired);
	printf("%s\n", res.problems ? "" : " (clean)");
	if (res.problems && !c.repair)
		printf("Run 'pagefs fsck %s --meta %s --repair' to fix them.\n", c.backing, c.meta);
	return res.problems ? CLI_FAIL : CLI_OK;
}
