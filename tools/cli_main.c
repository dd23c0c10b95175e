/*
 * cli_main.c - the `pagefs` command: global options and dispatch to one
 * cli_<cmd>_main per subcommand. Adding a command is one row in `commands`.
 */
#include "tools/cli_common.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

struct cli_command {
	const char *name;
	int (*main)(int argc, char **argv);
	const char *synopsis;
	const char *summary;
	int daemon; /* holds an index in memory: runs on huge pages (cli_heap.c) */
};

static const struct cli_command commands[] = {
	{"mount", cli_mount_main, "mount BACKING MOUNTPOINT",
         "serve BACKING at MOUNTPOINT (returns when the mount is usable)", 1},
	{"umount", cli_umount_main, "umount MOUNTPOINT", "flush the index and unmount", 0},
	{"status", cli_status_main, "status [MOUNTPOINT]",
         "pages, bytes, hits, evictions and bandwidth per pool", 0},
	{"pool", cli_pool_main, "pool create MOUNTPOINT/RANK/NS",
         "create a pool with a page size and capacity", 0},
	{"fsck", cli_fsck_main, "fsck BACKING [--meta URI]",
         "check an index against its data files (offline)", 0},
	{"import-json", cli_import_main, "import-json FILE --backing DIR",
         "adopt a mini_3fs_metadata_server state file (offline)", 0},
	{"export-json", cli_export_main, "export-json --backing DIR [-o FILE]",
         "write the index as a mini_3fs_metadata_server state file (offline)", 0},
	{"serve-meta", cli_serve_main, "serve-meta --backing DIR [--listen ADDR:PORT]",
         "serve SGLang's 3FS metadata HTTP protocol from the index", 1},
	{"bench", cli_bench_main, "bench [--quick] [--scale N]",
         "side-by-side benchmarks against raw, dir and passthrough_ll", 0},
};

#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static void cli_main_usage(FILE *out)
{
	fprintf(out, "Usage: pagefs COMMAND [ARGS]...\n"
	             "       pagefs --help | --version\n"
	             "\n"
	             "pagefs is a FUSE filesystem for LLM KV-cache pages: every (rank, namespace)\n"
	             "pool is a directory of page files stored in one data file per pool on\n"
	             "the backing directory.\n"
	             "\n"
	             "Commands:\n");
	for (size_t i = 0; i < N_COMMANDS; i++)
		fprintf(out, "  %-32s %s\n", commands[i].synopsis, commands[i].summary);
	fprintf(out, "\n"
	             "Run 'pagefs COMMAND --help' for the options of a command.\n"
	             "Exit status: 0 ok, 1 operational error, 2 usage error.\n");
}

static const struct cli_command *cli_find_command(const char *name)
{
	for (size_t i = 0; i < N_COMMANDS; i++)
		if (strcmp(commands[i].name, name) == 0)
			return &commands[i];
	return NULL;
}

static int run(int argc, char **argv)
{
	char **given = argv;
	static const struct option longopts[] = {
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	const struct cli_command *cmd;
	int c;

	opterr = 0; /* we print our own messages */
	/* "+": stop at the command name; its options belong to it. */
	while ((c = getopt_long(argc, argv, "+hV", longopts, NULL)) != -1) {
		switch (c) {
		case 'h':
			cli_main_usage(stdout);
			return CLI_OK;
		case 'V':
			printf("pagefs %s\n", PAGEFS_VERSION);
			return CLI_OK;
		default:
			return cli_usage_error(NULL, "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind >= argc) {
		cli_main_usage(stderr);
		return CLI_USAGE;
	}
	if (strcmp(argv[optind], "help") == 0) {
		if (optind + 1 >= argc) {
			cli_main_usage(stdout);
			return CLI_OK;
		}
		cmd = cli_find_command(argv[optind + 1]);
		if (!cmd)
			return cli_usage_error(NULL, "unknown command '%s'", argv[optind + 1]);
		char *help_argv[] = {(char *)cmd->name, "--help", NULL};
		optind = 0;
		return cmd->main(2, help_argv);
	}
	cmd = cli_find_command(argv[optind]);
	if (!cmd)
		return cli_usage_error(NULL, "unknown command '%s'", argv[optind]);
	if (cmd->daemon)
		cli_huge_heap(given);

	argc -= optind;
	argv += optind;
	optind = 0; /* full getopt reset for the command's own table */
	return cmd->main(argc, argv);
}

int main(int argc, char **argv)
{
	const char *base = strrchr(argv[0], '/');
	/* installed as mount.fuse.pagefs too: mount(8)'s helper */
	int rc = strncmp(base ? base + 1 : argv[0], "mount.", 6) == 0 ? cli_fstab_main(argc, argv)
	                                                              : run(argc, argv);

	/* Output that could not be written (a full disk, a device that
	 * refuses it) is a failure: exit 0 would say the report is there. */
	if ((fflush(stdout) != 0 || ferror(stdout)) && rc == CLI_OK) {
		fprintf(stderr, "pagefs: cannot write standard output: %s\n", strerror(errno));
		rc = CLI_FAIL;
	}
	return rc;
}
