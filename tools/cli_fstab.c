/*
 * cli_fstab.c - `mount.fuse.pagefs`: the helper mount(8) runs for
 * `mount -t fuse.pagefs` and /etc/fstab lines of that type (the same
 * binary, installed as a link named mount.fuse.pagefs in /sbin).
 *
 *   mount.fuse.pagefs SOURCE MOUNTPOINT [-sfnvrw] [-o OPTIONS] [-t TYPE]
 *
 * SOURCE is the backing directory, written BACKING or pagefs:BACKING (the
 * second matches what /proc/mounts shows, so `mount -a` sees the entry is
 * mounted already). OPTIONS are `pagefs mount -o` options: KEY=VALUE for
 * every --KEY, the flags, and mount(8)'s generic options, ignored. The
 * helper runs `pagefs mount` itself, which returns once the mount is
 * usable, as mount(8) expects.
 */
#include "tools/cli_common.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

#define CMD "mount.fuse.pagefs"

static void cli_fstab_usage(FILE *out)
{
	fprintf(out,
	        "Usage: mount.fuse.pagefs BACKING MOUNTPOINT [-sfnvrw] [-o OPTIONS] [-t TYPE]\n"
	        "\n"
	        "The mount helper behind 'mount -t fuse.pagefs' and /etc/fstab, e.g.\n"
	        "  pagefs:/srv/kv /mnt/kv fuse.pagefs meta=sqlite:/var/lib/pagefs/kv.db,"
	        "page_size=64K,nofail 0 0\n"
	        "OPTIONS: KEY=VALUE for each 'pagefs mount --KEY VALUE', allow_other, ro, and\n"
	        "mount(8)'s generic options (ignored). -s ignores unknown options, -f does\n"
	        "nothing (mount -f), -r is ro; -n, -v and -w change nothing.\n");
}

int cli_fstab_main(int argc, char **argv)
{
	char opts[8192] = "";
	size_t used = 0;
	int c, fake = 0, sloppy = 0, ro = 0;

	opterr = 0;
	optind = 0;
	while ((c = getopt(argc, argv, "sfnvrwho:t:N:")) != -1) {
		switch (c) {
		case 's':
			sloppy = 1;
			break;
		case 'f':
			fake = 1;
			break;
		case 'r':
			ro = 1;
			break;
		case 'n':
		case 'v':
		case 'w':
		case 't': /* fuse.pagefs, as the helper's name says */
			break;
		case 'N':
			return cli_usage_error(CMD, "-N (mount namespaces) is not supported: run "
			                            "the mount inside the namespace");
		case 'h':
			cli_fstab_usage(stdout);
			return CLI_OK;
		case 'o': {
			int n = snprintf(opts + used, sizeof(opts) - used, "%s%s", used ? "," : "",
			                 optarg);
			if (n < 0 || (size_t)n >= sizeof(opts) - used)
				return cli_usage_error(CMD, "the -o options are too long");
			used += (size_t)n;
			break;
		}
		default:
			return cli_usage_error(CMD, "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (argc - optind != 2) {
		cli_fstab_usage(stderr);
		return CLI_USAGE;
	}
	const char *source = argv[optind], *target = argv[optind + 1];
	if (strncmp(source, "pagefs:", 7) == 0)
		source += 7;
	if (ro && used + 3 < sizeof(opts)) {
		snprintf(opts + used, sizeof(opts) - used, "%sro", used ? "," : "");
		used += used ? 3 : 2;
	}
	if (fake)
		return CLI_OK;
	char *mount_argv[] = {"mount", (char *)source, (char *)target, "-o", opts, NULL};
	cli_mount_sloppy = sloppy;
	optind = 0;
	return cli_mount_main(used ? 5 : 3, mount_argv);
}
