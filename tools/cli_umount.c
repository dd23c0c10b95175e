/*
 * cli_umount.c - `pagefs umount MOUNTPOINT`.
 *
 * Reads the daemon's pid from the mount root (user.pagefs.pid), unmounts,
 * then waits for the daemon to exit: the daemon flushes and unlocks its
 * index on the way out, so when this command returns the backing
 * directory and index can be mounted again or checked with fsck.
 * A mount whose daemon died (ENOTCONN) is still unmounted, so a crash never
 * leaves a dead mount point behind.
 *
 * --force is for a mount that hangs: a daemon killed while one of its
 * threads waited in the kernel (an entry invalidation waits for the
 * directory lock a blocked client holds) never closes /dev/fuse, so every
 * request, ours included, waits forever. --force touches nothing under the
 * mount point: it finds the FUSE connection in /proc/self/mountinfo,
 * aborts it through fusectl (/sys/fs/fuse/connections/N/abort: waiting
 * calls fail with ECONNABORTED, later ones ENOTCONN) and detaches it.
 */
#include "fs/fs.h"
#include "tools/cli_common.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CMD "umount"

struct cli_umount_config {
	char mountpoint[PATH_MAX];
	int timeout_s; /* how long to wait for the daemon to exit */
	int force;     /* abort the FUSE connection, detach, ask nothing */
};

static const struct option umount_longopts[] = {
	{"timeout", required_argument, NULL, 't'},
	{"force", no_argument, NULL, 'f'},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

static void cli_umount_usage(FILE *out)
{
	fprintf(out, "Usage: pagefs umount MOUNTPOINT [OPTIONS]\n"
	             "\n"
	             "Unmounts a pagefs mount and waits until its daemon has flushed and closed\n"
	             "the index and exited.\n"
	             "\n"
	             "Options:\n"
	             "  -t, --timeout SECS   wait at most SECS for the daemon to exit (60)\n"
	             "  -f, --force          for a hung mount whose daemon was killed: abort its\n"
	             "                       FUSE connection (blocked calls fail, ECONNABORTED)\n"
	             "                       and detach it, without waiting for anything\n"
	             "  -h, --help           show this help\n");
}

/* 1 while pid runs; a zombie (exited, not yet reaped by its parent) is done. */
static int cli_pid_running(pid_t pid)
{
	char path[64], buf[512], *p;
	FILE *f;
	size_t n;

	if (kill(pid, 0) < 0 && errno == ESRCH)
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return errno != ENOENT;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* "pid (comm) S ..." - comm may hold spaces and parentheses. */
	p = strrchr(buf, ')');
	if (p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X'))
		return 0;
	return 1;
}

/* Runs `fusermount3 -u MOUNTPOINT`: the way for a user who is not root. */
static int cli_fusermount(const char *mountpoint)
{
	pid_t pid = fork();
	int st;

	if (pid < 0)
		return -errno;
	if (pid == 0) {
		execlp("fusermount3", "fusermount3", "-u", "--", mountpoint, (char *)NULL);
		fprintf(stderr, "pagefs umount: cannot run fusermount3: %s; install fuse3\n",
		        strerror(errno));
		_exit(127);
	}
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EPERM;
}

static int cli_umount_parse(int argc, char **argv, struct cli_umount_config *cfg)
{
	long l;
	int c;

	memset(cfg, 0, sizeof(*cfg));
	cfg->timeout_s = 60;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hft:", umount_longopts, NULL)) != -1) {
		switch (c) {
		case 'f':
			cfg->force = 1;
			break;
		case 'h':
			cli_umount_usage(stdout);
			return -1;
		case 't':
			if (cli_parse_long(optarg, 0, 86400, &l) < 0)
				return cli_usage_error(
					CMD,
					"--timeout '%s' is not a number of seconds: use "
					"0 to 86400",
					optarg);
			cfg->timeout_s = (int)l;
			break;
		case ':':
			return cli_usage_error(CMD, "option '%s' needs a value", argv[optind - 1]);
		default:
			return cli_usage_error(CMD, "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (argc - optind != 1)
		return cli_usage_error(CMD, "%s: name one MOUNTPOINT",
		                       argc - optind < 1 ? "missing argument"
		                                         : "too many arguments");
	/* realpath fails on a dead FUSE mount (ENOTCONN): keep the name given.
	 * --force never calls it: stat of a hung mount point would hang too. */
	if (cfg->force && argv[optind][0] != '/') {
		char cwd[PATH_MAX];
		if (!getcwd(cwd, sizeof(cwd)) ||
		    (size_t)snprintf(cfg->mountpoint, sizeof(cfg->mountpoint), "%s/%s", cwd,
		                     argv[optind]) >= sizeof(cfg->mountpoint))
			return cli_usage_error(CMD, "MOUNTPOINT is too long");
	} else if (cfg->force || !realpath(argv[optind], cfg->mountpoint)) {
		if (strlen(argv[optind]) >= sizeof(cfg->mountpoint))
			return cli_usage_error(CMD, "MOUNTPOINT is too long");
		snprintf(cfg->mountpoint, sizeof(cfg->mountpoint), "%s", argv[optind]);
	}
	return 0;
}

static int cli_umount_force(const char *mp)
{
	unsigned conn = 0;

	int rc = fs_fuse_conn(mp, &conn);
	if (rc == -EPERM)
		return cli_fail(CMD,
		                "%s is another file system's FUSE mount, not pagefs's: --force "
		                "aborts only pagefs mounts",
		                mp);
	if (rc < 0)
		return cli_fail(CMD, "%s is not a FUSE mount point (see /proc/self/mountinfo)", mp);
	if ((rc = fs_fuse_abort(conn)) < 0)
		return cli_fail(CMD,
		                "cannot abort FUSE connection %u of %s (%s): as root, mount "
		                "fusectl (mount -t fusectl none /sys/fs/fuse/connections) and "
		                "retry",
		                conn, mp, strerror(-rc));
	if (umount2(mp, MNT_DETACH) < 0 && cli_fusermount(mp) < 0)
		return cli_fail(CMD, "aborted FUSE connection %u, but cannot detach %s: %s", conn,
		                mp, strerror(errno));
	fprintf(stderr, "pagefs umount: aborted FUSE connection %u and detached %s\n", conn, mp);
	return CLI_OK;
}

int cli_umount_main(int argc, char **argv)
{
	struct cli_umount_config cfg;
	const char *mp;
	pid_t pid = 0;
	int ret;

	ret = cli_umount_parse(argc, argv, &cfg);
	if (ret)
		return ret < 0 ? CLI_OK : ret;
	mp = cfg.mountpoint;
	if (cfg.force)
		return cli_umount_force(mp);

	ret = cli_mount_pid(mp, &pid);
	if (ret == -ENOTCONN && cli_is_pagefs_mount(mp)) {
		fprintf(stderr,
		        "pagefs umount: the daemon of %s is gone; removing the dead mount\n", mp);
		pid = 0;
	} else if (ret == -ENOENT) {
		return cli_fail(CMD, "%s does not exist: name the directory pagefs is mounted on",
		                mp);
	} else if (ret == -ENODATA || ret == -ENOTSUP) {
		return cli_fail(CMD,
		                "%s is not a pagefs mount (it has no %s attribute): name a pagefs "
		                "mount point ('pagefs status' lists them)",
		                mp, CLI_XATTR_PID);
	} else if (ret < 0) {
		return cli_fail(CMD, "cannot read %s of %s: %s", CLI_XATTR_PID, mp, strerror(-ret));
	}

	if (umount2(mp, 0) < 0) {
		int e = errno;

		if (e == EPERM && geteuid() != 0) {
			if (cli_fusermount(mp) < 0)
				return cli_fail(
					CMD,
					"fusermount3 -u %s failed (see above): close files under "
					"it, or unmount as root",
					mp);
		} else if (e == EBUSY) {
			return cli_fail(CMD,
			                "%s is busy: close files under it (lsof/fuser), then retry",
			                mp);
		} else if (e == EINVAL) {
			return cli_fail(CMD, "%s is not a mount point", mp);
		} else {
			return cli_fail(CMD, "cannot unmount %s: %s", mp, strerror(e));
		}
	}
	if (pid == 0)
		return CLI_OK;

	/* The daemon flushes and closes its index on its way out. */
	for (long waited_ms = 0; cli_pid_running(pid); waited_ms += 20) {
		if (waited_ms >= cfg.timeout_s * 1000L)
			return cli_fail(
				CMD,
				"unmounted %s, but its daemon (pid %d) is still running after "
				"%d s: it may still be flushing its index; check its log and "
				"wait for it before mounting the backing directory again",
				mp, (int)pid, cfg.timeout_s);
		struct timespec ts = {.tv_sec = 0, .tv_nsec = 20000000L};
		nanosleep(&ts, NULL);
	}
	return CLI_OK;
}
