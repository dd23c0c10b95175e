/*
 * cli_mount.c - `pagefs mount BACKING MOUNTPOINT [OPTIONS]`.
 *
 * Checks every argument before anything is started, then calls
 * pagefs_serve(). Unless -f is given the command forks first: the child
 * becomes the daemon (setsid) and reports through a pipe when its mount is
 * in place or why it failed; the parent waits for that report, so the
 * command returns only once the mount is usable (or with the reason it is
 * not). The daemon leaves the terminal (stdio to /dev/null, cwd "/") only
 * after it reported success, so setup errors still reach the user.
 */
#include "tools/cli_mount.h"

#include "tools/cli_common.h"

#include "fs/fs.h"
#include "fs/fs_metrics.h"
#include "meta/log.h"
#include "meta/meta.h"
#include "serve/serve.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#define CMD "mount"
#define DEFAULT_PAGE_SIZE (16ULL << 20)
#define DEFAULT_CAPACITY (1ULL << 40)
#define DEFAULT_ENTRY_TIMEOUT 3600.0

/* What the ready callback needs; lives on the serving process's stack. */
struct cli_mount_ready_ctx {
	const struct cli_mount_config *cfg;
	int foreground; /* report on the terminal, not through the pipe */
	int pipe_fd;    /* daemon: write end of the report pipe until used */
	int called;
};

enum {
	OPT_META = 256,
	OPT_PAGE_SIZE,
	OPT_CAPACITY,
	OPT_PREFIX,
	OPT_EVICT,
	OPT_VERIFY,
	OPT_DURABILITY,
	OPT_THREADS,
	OPT_LOG_LEVEL,
	OPT_LOG_FILE,
	OPT_DEBUG,
	OPT_ENTRY_TIMEOUT,
	OPT_KERNEL_CACHE,
	OPT_HTTP,
	OPT_METRICS,
};

static const struct option mount_longopts[] = {
	{"meta", required_argument, NULL, OPT_META},
	{"page-size", required_argument, NULL, OPT_PAGE_SIZE},
	{"capacity", required_argument, NULL, OPT_CAPACITY},
	{"prefix", required_argument, NULL, OPT_PREFIX},
	{"evict", required_argument, NULL, OPT_EVICT},
	{"verify", required_argument, NULL, OPT_VERIFY},
	{"durability", required_argument, NULL, OPT_DURABILITY},
	{"threads", required_argument, NULL, OPT_THREADS},
	{"log-level", required_argument, NULL, OPT_LOG_LEVEL},
	{"log-file", required_argument, NULL, OPT_LOG_FILE},
	{"foreground", no_argument, NULL, 'f'},
	{"debug", no_argument, NULL, OPT_DEBUG},
	{"entry-timeout", required_argument, NULL, OPT_ENTRY_TIMEOUT},
	{"kernel-cache", required_argument, NULL, OPT_KERNEL_CACHE},
	{"http", required_argument, NULL, OPT_HTTP},
	{"metrics", required_argument, NULL, OPT_METRICS},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

static void cli_mount_usage(FILE *out)
{
	fprintf(out,
	        "Usage: pagefs mount BACKING MOUNTPOINT [OPTIONS]\n"
	        "\n"
	        "Serves the pools kept in directory BACKING as page files under the empty\n"
	        "directory MOUNTPOINT. Returns once the mount is usable; the daemon runs until\n"
	        "'pagefs umount MOUNTPOINT'.\n"
	        "\n"
	        "Options:\n"
	        "      --meta URI             index: sqlite:PATH (default: a file in the user's\n"
	        "                             state directory, printed at mount), or\n"
	        "                             postgres://USER@HOST/DB (a PostgreSQL database)\n"
	        "      --page-size SIZE       slot size of pools created without one (16M)\n"
	        "      --capacity SIZE        capacity of pools created without one (1T)\n"
	        "      --prefix NAME          data file prefix on BACKING (hicache)\n"
	        "      --evict lru|none       full pool: evict the least recently used page (lru)\n"
	        "                             or fail writes with ENOSPC (none)\n"
	        "      --verify none|first|always\n"
	        "                             checksum check on read (first: first read after\n"
	        "                             commit or mount)\n"
	        "      --durability process|power\n"
	        "                             committed pages survive a daemon crash (process)\n"
	        "                             or also a power loss (power)\n"
	        "      --threads N            maximum FUSE worker threads\n"
	        "  -o OPTS                    comma list: KEY=VALUE for any --KEY here (e.g.\n"
	        "                             "
	        "meta=sqlite:/var/lib/pagefs/index.db,page_size=64K),\n"
	        "                             allow_other, ro, and mount(8)'s generic options\n"
	        "                             (rw, defaults, noauto, nofail, _netdev, x-systemd.*\n"
	        "                             ...), which are ignored\n"
	        "      --log-level LEVEL      error, warn, info (default) or debug\n"
	        "      --log-file PATH|syslog append the log to PATH (reopened on SIGHUP, for\n"
	        "                             logrotate) or send it to syslog; without it the log\n"
	        "                             goes to stderr, which a daemon closes once mounted\n"
	        "      --entry-timeout SECS   how long the kernel caches names (3600)\n"
	        "      --kernel-cache never|reread|always\n"
	        "                             when readers use the kernel's page cache: never\n"
	        "                             (direct I/O, the default), from a page's second\n"
	        "                             open on (reread), or from the first (always)\n"
	        "      --http ADDR:PORT       also serve SGLang's 3FS metadata protocol\n"
	        "                             (and /metrics, /health, /ready)\n"
	        "      --metrics [ADDR:]PORT  serve /metrics (Prometheus), /health and /ready\n"
	        "                             (ADDR defaults to 127.0.0.1)\n"
	        "  -f, --foreground           do not daemonize\n"
	        "      --debug                print every FUSE request (implies -f)\n"
	        "  -h, --help                 show this help\n"
	        "\n"
	        "SIZE is a power of two: 4096, 64K, 16M, 1G, 1T.\n");
}

int cli_mount_sloppy;

static int cli_mount_option(struct cli_mount_config *cfg, int c, const char *val);

/* The -o spelling of every option: key=value for the long options
 * (either '_' or '-' in the key), plain words for the flags. */
static const struct {
	const char *key;
	int code;
} o_keys[] = {
	{"meta", OPT_META},
	{"page_size", OPT_PAGE_SIZE},
	{"capacity", OPT_CAPACITY},
	{"prefix", OPT_PREFIX},
	{"evict", OPT_EVICT},
	{"verify", OPT_VERIFY},
	{"durability", OPT_DURABILITY},
	{"threads", OPT_THREADS},
	{"log_level", OPT_LOG_LEVEL},
	{"log_file", OPT_LOG_FILE},
	{"entry_timeout", OPT_ENTRY_TIMEOUT},
	{"kernel_cache", OPT_KERNEL_CACHE},
	{"http", OPT_HTTP},
	{"metrics", OPT_METRICS},
};

/* mount(8)'s generic options that a FUSE filesystem accepts and pagefs
 * ignores: fstab and systemd read them (noauto, nofail, _netdev,
 * x-systemd.*), or they change nothing here (pages are never executable,
 * set-id or devices; times are pagefs's own). "x-" and "comment=" start
 * more of them. */
static const char *const o_ignored[] = {
	"rw",         "defaults", "auto",     "noauto",     "nofail",      "_netdev",
	"user",       "nouser",   "users",    "owner",      "group",       "nosuid",
	"suid",       "nodev",    "dev",      "noexec",     "exec",        "async",
	"atime",      "noatime",  "relatime", "norelatime", "strictatime", "nostrictatime",
	"nodiratime", "diratime", "lazytime", "nolazytime", "silent",      "loud",
};

/* Copies s into cfg->o_store. NULL if it is full. */
static const char *cli_mount_o_keep(struct cli_mount_config *cfg, const char *s)
{
	size_t n = strlen(s) + 1;
	char *at = cfg->o_store + cfg->o_used;

	if (n > sizeof(cfg->o_store) - cfg->o_used)
		return NULL;
	memcpy(at, s, n);
	cfg->o_used += n;
	return at;
}

static int cli_mount_o_token(struct cli_mount_config *cfg, char *tok)
{
	char *eq = strchr(tok, '=');
	const char *val = eq ? eq + 1 : NULL;

	if (eq)
		*eq = '\0';
	for (char *p = tok; *p; p++)
		if (*p == '-')
			*p = '_';
	if (!eq && strcmp(tok, "allow_other") == 0) {
		cfg->allow_other = 1;
		return 0;
	}
	if (!eq && strcmp(tok, "ro") == 0) {
		cfg->read_only = 1;
		return 0;
	}
	if (!eq && (strcmp(tok, "foreground") == 0 || strcmp(tok, "debug") == 0))
		return cli_mount_option(cfg, tok[0] == 'f' ? 'f' : OPT_DEBUG, NULL);
	for (size_t i = 0; i < sizeof(o_keys) / sizeof(o_keys[0]); i++) {
		if (strcmp(tok, o_keys[i].key) != 0)
			continue;
		if (!val || !*val)
			return cli_usage_error(
				CMD, "mount option '-o %s' needs a value: -o %s=VALUE", tok, tok);
		if (!(val = cli_mount_o_keep(cfg, val)))
			return cli_usage_error(CMD, "the -o options are too long");
		return cli_mount_option(cfg, o_keys[i].code, val);
	}
	for (size_t i = 0; i < sizeof(o_ignored) / sizeof(o_ignored[0]); i++)
		if (!eq && strcmp(tok, o_ignored[i]) == 0)
			return 0;
	if (strncmp(tok, "x_", 2) == 0 || strcmp(tok, "comment") == 0)
		return 0; /* x-systemd.*, x-initrd.mount, comment=...: for other readers */
	if (cfg->sloppy) {
		fprintf(stderr, "pagefs mount: ignoring unknown mount option '-o %s' (-s)\n", tok);
		return 0;
	}
	return cli_usage_error(CMD,
	                       "unknown mount option '-o %s%s%s': pagefs takes -o KEY=VALUE for "
	                       "each --KEY option (meta, page_size, capacity, prefix, evict, "
	                       "verify, durability, threads, log_level, log_file, entry_timeout, "
	                       "kernel_cache, http, metrics), allow_other, ro, foreground, debug, "
	                       "and mount(8)'s generic options",
	                       tok, eq ? "=" : "", val ? val : "");
}

static int cli_mount_parse_o(struct cli_mount_config *cfg, const char *arg)
{
	char *copy = strdup(arg), *save = NULL, *tok;
	int ret = 0;

	if (!copy)
		return cli_fail(CMD, "out of memory");
	for (tok = strtok_r(copy, ",", &save); tok && ret == 0; tok = strtok_r(NULL, ",", &save))
		ret = cli_mount_o_token(cfg, tok);
	free(copy);
	return ret;
}

/* --metrics [ADDR:]PORT (a bare number is a port on 127.0.0.1). */
static int cli_mount_parse_metrics(struct cli_mount_config *cfg, const char *arg)
{
	char addr[64];
	int port;

	snprintf(cfg->metrics, sizeof(cfg->metrics), "%s%s",
	         arg[0] && strspn(arg, "0123456789") == strlen(arg) ? ":" : "", arg);
	if (strlen(arg) >= sizeof(cfg->metrics) - 1 || !strchr(cfg->metrics, ':') ||
	    serve_parse_listen(cfg->metrics, addr, sizeof(addr), &port) < 0)
		return cli_usage_error(CMD,
		                       "--metrics '%s' is not [IPV4ADDR:]PORT (e.g. 9101 or "
		                       "127.0.0.1:9101)",
		                       arg);
	return 0;
}

/* Makes `path` absolute against the current directory (no symlinks resolved:
 * the file may not exist yet). */
static int cli_mount_absolute(const char *path, char *out, size_t len)
{
	char cwd[PATH_MAX];
	int n;

	if (path[0] == '/') {
		n = snprintf(out, len, "%s", path);
	} else {
		if (!getcwd(cwd, sizeof(cwd)))
			return -errno;
		n = snprintf(out, len, "%s/%s", strcmp(cwd, "/") == 0 ? "" : cwd, path);
	}
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* --meta: "sqlite:PATH" or a bare PATH become sqlite:ABSOLUTE (the daemon
 * changes to "/"); URIs of other schemes ("postgres://...") pass through. */
static int cli_mount_meta_uri(struct cli_mount_config *cfg)
{
	const char *arg = cfg->meta_arg, *path;
	char abs[PATH_MAX];
	int ret;

	if (!arg) {
		ret = meta_default_uri(cfg->backing, cfg->meta_uri, sizeof(cfg->meta_uri));
		if (ret < 0)
			return cli_fail(CMD,
			                "cannot choose a default index path for %s: %s; name one "
			                "with --meta sqlite:PATH",
			                cfg->backing, strerror(-ret));
		return 0;
	}
	if (strncmp(arg, "sqlite:", 7) == 0)
		path = arg + 7;
	else if (cli_uri_is_shared(arg))
		path = NULL;
	else
		path = arg;
	if (!path) {
		if (strlen(arg) >= sizeof(cfg->meta_uri))
			return cli_usage_error(CMD, "--meta URI is too long");
		snprintf(cfg->meta_uri, sizeof(cfg->meta_uri), "%s", arg);
		return 0;
	}
	if (!*path)
		return cli_usage_error(CMD, "--meta '%s' names no file: use --meta sqlite:PATH",
		                       arg);
	if (cli_mount_absolute(path, abs, sizeof(abs)) < 0)
		return cli_usage_error(CMD, "--meta path '%s' is too long", path);
	snprintf(cfg->meta_uri, sizeof(cfg->meta_uri), "sqlite:%s", abs);
	return 0;
}

/* Whether the file at path (absolute) would lie inside MOUNTPOINT, where
 * the mount hides it: an index or a log there is written beneath the
 * mount, and the next mount finds MOUNTPOINT not empty. Its directory is
 * resolved when it exists (symbolic links), else compared as written. */
static int cli_mount_inside(const struct cli_mount_config *cfg, const char *path)
{
	char dir[PATH_MAX], real[PATH_MAX];
	size_t n = strlen(cfg->mountpoint);

	cli_dirname(path, dir, sizeof(dir));
	const char *d = realpath(dir, real) ? real : dir;
	return strncmp(d, cfg->mountpoint, n) == 0 && (d[n] == '\0' || d[n] == '/' || n == 1);
}

static int cli_mount_check_backing(struct cli_mount_config *cfg, const char *arg)
{
	struct stat st;

	if (!realpath(arg, cfg->backing)) {
		int e = errno;

		if (e == ENOENT)
			return cli_fail(CMD, "BACKING '%s' does not exist: create it (mkdir -p %s)",
			                arg, arg);
		return cli_fail(CMD, "BACKING '%s': %s", arg, strerror(e));
	}
	if (stat(cfg->backing, &st) < 0)
		return cli_fail(CMD, "BACKING '%s': %s", arg, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return cli_fail(CMD,
		                "BACKING '%s' is not a directory: name the directory that holds "
		                "(or will hold) the data files",
		                arg);
	return 0;
}

static int cli_mount_check_mountpoint(struct cli_mount_config *cfg, const char *arg)
{
	struct stat st;
	struct dirent *d;
	DIR *dir;
	int empty = 1;

	if (!realpath(arg, cfg->mountpoint)) {
		int e = errno;

		if (e == ENOENT)
			return cli_fail(CMD,
			                "MOUNTPOINT '%s' does not exist: create it (mkdir -p %s)",
			                arg, arg);
		if (e == ENOTCONN)
			return cli_fail(CMD,
			                "MOUNTPOINT '%s' is a dead FUSE mount: clear it with "
			                "'pagefs umount %s' (or fusermount3 -u %s)",
			                arg, arg, arg);
		return cli_fail(CMD, "MOUNTPOINT '%s': %s", arg, strerror(e));
	}
	if (stat(cfg->mountpoint, &st) < 0)
		return cli_fail(CMD, "MOUNTPOINT '%s': %s", arg, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return cli_fail(CMD,
		                "MOUNTPOINT '%s' is not a directory: mount on an empty directory",
		                arg);
	if (cli_is_pagefs_mount(cfg->mountpoint)) {
		pid_t pid;

		if (cli_mount_pid(cfg->mountpoint, &pid) == -ENOTCONN)
			return cli_fail(
				CMD,
				"MOUNTPOINT '%s' is a dead pagefs mount (its daemon is gone): "
				"clear it with 'pagefs umount %s', then mount again",
				arg, arg);
		return cli_fail(CMD,
		                "MOUNTPOINT '%s' is already a pagefs mount: unmount it first "
		                "('pagefs umount %s')",
		                arg, arg);
	}
	dir = opendir(cfg->mountpoint);
	if (!dir)
		return cli_fail(CMD, "MOUNTPOINT '%s': %s", arg, strerror(errno));
	while (empty && (d = readdir(dir)) != NULL)
		if (strcmp(d->d_name, ".") != 0 && strcmp(d->d_name, "..") != 0)
			empty = 0;
	closedir(dir);
	if (!empty)
		return cli_fail(CMD,
		                "MOUNTPOINT '%s' is not empty: mount on an empty directory "
		                "(the mount would hide its files)",
		                arg);
	/* Serving the backing directory from inside the mount would deadlock. */
	size_t n = strlen(cfg->mountpoint);
	if (strncmp(cfg->backing, cfg->mountpoint, n) == 0 &&
	    (cfg->backing[n] == '\0' || cfg->backing[n] == '/' || n == 1))
		return cli_usage_error(CMD,
		                       "BACKING '%s' lies inside MOUNTPOINT '%s': keep it outside",
		                       cfg->backing, cfg->mountpoint);
	return 0;
}

/* Applies one option (its getopt code, value val) to cfg. 0, 1 for a
 * code this function does not know, or CLI_USAGE after the message. */
static int cli_mount_option(struct cli_mount_config *cfg, int c, const char *val)
{
	long l;
	int ret;

	switch (c) {
	case 'f':
		cfg->foreground = 1;
		break;
	case OPT_META:
		cfg->meta_arg = val;
		break;
	case OPT_PAGE_SIZE:
		cfg->page_size_arg = val;
		break;
	case OPT_CAPACITY:
		cfg->capacity_arg = val;
		break;
	case OPT_PREFIX:
		if (meta_check_prefix(val) < 0)
			return cli_usage_error(
				CMD,
				"--prefix '%s' is not a data file prefix: use 1 "
				"to %d of the characters A-Z a-z 0-9 _ . - (not \"..\")",
				val, META_PREFIX_MAX);
		cfg->prefix = val;
		break;
	case OPT_EVICT:
		if (strcmp(val, "lru") == 0)
			cfg->evict = META_EVICT_LRU;
		else if (strcmp(val, "none") == 0)
			cfg->evict = META_EVICT_NONE;
		else
			return cli_usage_error(CMD, "--evict '%s': use lru or none", val);
		break;
	case OPT_VERIFY:
		if (strcmp(val, "none") == 0)
			cfg->verify = META_VERIFY_NONE;
		else if (strcmp(val, "first") == 0)
			cfg->verify = META_VERIFY_FIRST;
		else if (strcmp(val, "always") == 0)
			cfg->verify = META_VERIFY_ALWAYS;
		else
			return cli_usage_error(CMD, "--verify '%s': use none, first or always",
			                       val);
		break;
	case OPT_KERNEL_CACHE:
		if (strcmp(val, "reread") == 0)
			cfg->kernel_cache = PAGEFS_CACHE_REREAD;
		else if (strcmp(val, "never") == 0)
			cfg->kernel_cache = PAGEFS_CACHE_NEVER;
		else if (strcmp(val, "always") == 0)
			cfg->kernel_cache = PAGEFS_CACHE_ALWAYS;
		else
			return cli_usage_error(
				CMD, "--kernel-cache '%s': use never, reread or always", val);
		break;
	case OPT_DURABILITY:
		if (strcmp(val, "process") == 0)
			cfg->durability = META_DURABLE_PROCESS;
		else if (strcmp(val, "power") == 0)
			cfg->durability = META_DURABLE_POWER;
		else
			return cli_usage_error(CMD, "--durability '%s': use process or power", val);
		break;
	case OPT_THREADS:
		if (cli_parse_long(val, 1, 1024, &l) < 0)
			return cli_usage_error(
				CMD, "--threads '%s' is not a thread count: use 1 to 1024", val);
		cfg->threads = (int)l;
		break;
	case OPT_LOG_LEVEL:
		cfg->log_level = log_parse_level(val);
		if (cfg->log_level < 0)
			return cli_usage_error(
				CMD, "--log-level '%s': use error, warn, info or debug", val);
		break;
	case OPT_LOG_FILE:
		cfg->log_file_arg = val;
		break;
	case OPT_DEBUG:
		cfg->debug = 1;
		cfg->foreground = 1; /* FUSE debug output goes to the terminal */
		break;
	case OPT_ENTRY_TIMEOUT: {
		char *end;

		errno = 0;
		cfg->entry_timeout = strtod(val, &end);
		if (errno || end == val || *end || !isfinite(cfg->entry_timeout) ||
		    cfg->entry_timeout < 0 || cfg->entry_timeout > 1e9)
			return cli_usage_error(CMD,
			                       "--entry-timeout '%s' is not a number of seconds: "
			                       "use 0 or more, e.g. 3600 or 0.5",
			                       val);
		break;
	}
	case OPT_HTTP: {
		char addr[64];
		int port;
		if (serve_parse_listen(val, addr, sizeof(addr), &port) < 0)
			return cli_usage_error(CMD,
			                       "--http '%s' is not IPV4ADDR:PORT (e.g. "
			                       "127.0.0.1:18000)",
			                       val);
		cfg->http = val;
		break;
	}
	case OPT_METRICS:
		if ((ret = cli_mount_parse_metrics(cfg, val)) != 0)
			return ret;
		break;
	default:
		return 1;
	}
	return 0;
}

int cli_mount_parse(int argc, char **argv, struct cli_mount_config *cfg)
{
	int ret, c;

	memset(cfg, 0, sizeof(*cfg));
	cfg->sloppy = cli_mount_sloppy;
	cfg->page_size = DEFAULT_PAGE_SIZE;
	cfg->capacity = DEFAULT_CAPACITY;
	cfg->prefix = "hicache";
	cfg->evict = META_EVICT_LRU;
	cfg->verify = META_VERIFY_FIRST;
	cfg->durability = META_DURABLE_PROCESS;
	cfg->log_level = LOG_INFO;
	cfg->entry_timeout = DEFAULT_ENTRY_TIMEOUT;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":ho:f", mount_longopts, NULL)) != -1) {
		switch (c) {
		case 'h':
			cli_mount_usage(stdout);
			return -1;
		case 'o':
			ret = cli_mount_parse_o(cfg, optarg);
			if (ret)
				return ret;
			break;
		case ':':
			return cli_usage_error(CMD, "option '%s' needs a value", argv[optind - 1]);
		default:
			ret = cli_mount_option(cfg, c, optarg);
			if (ret == 1)
				return cli_usage_error(CMD, "unknown option '%s'",
				                       argv[optind - 1]);
			if (ret)
				return ret;
		}
	}
	if (argc - optind != 2)
		return cli_usage_error(CMD, "%s: name BACKING and MOUNTPOINT",
		                       argc - optind < 2 ? "missing arguments"
		                                         : "too many arguments");

	if (cfg->page_size_arg) {
		ret = cli_parse_page_size(CMD, cfg->page_size_arg, &cfg->page_size);
		if (ret)
			return ret;
	}
	if (cfg->capacity_arg) {
		ret = cli_parse_pow2_size(CMD, "--capacity", cfg->capacity_arg, 4096,
		                          &cfg->capacity);
		if (ret)
			return ret;
	}
	if (cfg->capacity < cfg->page_size || cfg->capacity % cfg->page_size != 0) {
		char ps[32], cap[32];

		meta_format_size(cfg->page_size, ps, sizeof(ps));
		meta_format_size(cfg->capacity, cap, sizeof(cap));
		return cli_usage_error(CMD,
		                       "--capacity %s does not hold whole pages of %s: use a "
		                       "multiple of the page size (at least %s)",
		                       cap, ps, ps);
	}
	if ((ret = cli_check_page_count(CMD, cfg->page_size, cfg->capacity)) != 0)
		return ret;
	if (cfg->log_file_arg && strcmp(cfg->log_file_arg, "syslog") == 0)
		snprintf(cfg->log_file, sizeof(cfg->log_file), "syslog");
	else if (cfg->log_file_arg &&
	         cli_mount_absolute(cfg->log_file_arg, cfg->log_file, sizeof(cfg->log_file)) < 0)
		return cli_usage_error(CMD, "--log-file path '%s' is too long", cfg->log_file_arg);

	ret = cli_mount_check_backing(cfg, argv[optind]);
	if (ret)
		return ret;
	ret = cli_mount_check_mountpoint(cfg, argv[optind + 1]);
	if (ret)
		return ret;
	if ((ret = cli_mount_meta_uri(cfg)) != 0)
		return ret;
	if (strncmp(cfg->meta_uri, "sqlite:", 7) == 0 && cli_mount_inside(cfg, cfg->meta_uri + 7))
		return cli_usage_error(CMD,
		                       "--meta '%s' lies inside MOUNTPOINT '%s': keep it outside",
		                       cfg->meta_uri + 7, cfg->mountpoint);
	if (cfg->log_file[0] == '/' && cli_mount_inside(cfg, cfg->log_file))
		return cli_usage_error(
			CMD, "--log-file '%s' lies inside MOUNTPOINT '%s': keep it outside",
			cfg->log_file, cfg->mountpoint);
	return 0;
}

static void cli_mount_print_mounted(const struct cli_mount_config *cfg)
{
	char name[sizeof(cfg->meta_uri)];

	meta_uri_display(cfg->meta_uri, name, sizeof(name));
	printf("pagefs: index: %s\n", name);
	printf("pagefs: mounted %s on %s (index %s)\n", cfg->backing, cfg->mountpoint, name);
	fflush(stdout);
}

static int cli_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Leaves the terminal: the parent is gone, nobody reads our stdio. */
static void cli_mount_detach(void)
{
	int fd = open("/dev/null", O_RDWR | O_CLOEXEC);

	if (fd >= 0) {
		dup2(fd, STDIN_FILENO);
		dup2(fd, STDOUT_FILENO);
		dup2(fd, STDERR_FILENO);
		if (fd > STDERR_FILENO)
			close(fd);
	}
	if (chdir("/") < 0)
		log_warn("cannot change to /: %s", strerror(errno));
}

/* Called by pagefs_serve exactly once, when the mount is in place (err 0)
 * or setup failed (err < 0, msg says why). */
static void cli_mount_ready(void *arg, int err, const char *msg)
{
	struct cli_mount_ready_ctx *ctx = arg;
	char status = err ? 1 : 0;

	ctx->called = 1;
	if (!msg || !*msg)
		msg = err ? strerror(-err) : "";
	/* systemd (Type=notify, pagefs@.service): the mount is usable now */
	if (!err)
		sd_notifyf(0, "READY=1\nSTATUS=serving %s on %s", ctx->cfg->backing,
		           ctx->cfg->mountpoint);
	else
		sd_notifyf(0, "STATUS=mount failed: %s", msg);
	if (ctx->foreground) {
		if (err)
			cli_fail(CMD, "%s", msg);
		else
			cli_mount_print_mounted(ctx->cfg);
		return;
	}
	/* If the parent was killed meanwhile, the writes fail with EPIPE
	 * (SIGPIPE is ignored) and the daemon goes on regardless. */
	if (ctx->pipe_fd < 0)
		return;
	if (cli_write_all(ctx->pipe_fd, &status, 1) == 0)
		cli_write_all(ctx->pipe_fd, msg, strlen(msg));
	close(ctx->pipe_fd);
	ctx->pipe_fd = -1;
	if (!err)
		cli_mount_detach();
}

/* --http (the mini_3fs_metadata_server protocol and the operator's
 * routes) and --metrics (the operator's routes only) from the mounted
 * index; both add the FUSE side's metrics and readiness. */
static struct serve *cli_http_server, *cli_metrics_server;

static void cli_ops_metrics(void *arg, FILE *out)
{
	(void)arg;
	fs_metrics_write(out);
}

static int cli_ops_ready(void *arg, char *why, size_t len)
{
	(void)arg;
	return fs_metrics_ready(why, len);
}

static int cli_listener_start(struct meta *m, const char *listen, const char *uri, int ops_only,
                              struct serve **out, char *msg, size_t msglen)
{
	struct serve_ops ops = {cli_ops_metrics, cli_ops_ready, NULL, ops_only};
	char addr[64];
	int port, bound;

	if (serve_parse_listen(listen, addr, sizeof(addr), &port) < 0) {
		snprintf(msg, msglen, "'%s' is not IPV4ADDR:PORT", listen);
		return -EINVAL;
	}
	int rc = serve_start_ops(m, addr, port, ops_only ? 2 : cli_http_workers(uri), &ops, out,
	                         &bound, msg, msglen);
	if (rc == 0 && ops_only)
		log_info("serving /metrics, /health and /ready on http://%s:%d", addr, bound);
	else if (rc == 0)
		log_info("serving the 3FS metadata protocol (and /metrics) on http://%s:%d", addr,
		         bound);
	return rc;
}

static int cli_http_start(void *arg, struct meta *m, char *msg, size_t msglen)
{
	const struct cli_mount_config *cfg = arg;
	int rc = 0;

	if (cfg->http)
		rc = cli_listener_start(m, cfg->http, cfg->meta_uri, 0, &cli_http_server, msg,
		                        msglen);
	if (rc == 0 && cfg->metrics[0])
		rc = cli_listener_start(m, cfg->metrics, cfg->meta_uri, 1, &cli_metrics_server, msg,
		                        msglen);
	if (rc < 0) {
		serve_stop(cli_http_server);
		cli_http_server = NULL;
	}
	return rc;
}

static void cli_http_stop(void *arg)
{
	(void)arg;
	serve_stop(cli_http_server);
	serve_stop(cli_metrics_server);
	cli_http_server = cli_metrics_server = NULL;
}

static void cli_mount_fill_opts(const struct cli_mount_config *cfg, struct pagefs_mount_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->meta.uri = cfg->meta_uri;
	o->meta.backing = cfg->backing;
	o->meta.prefix = cfg->prefix;
	o->meta.default_slot_size = cfg->page_size;
	o->meta.default_capacity = cfg->capacity;
	o->meta.evict = cfg->evict;
	o->meta.verify = cfg->verify;
	o->meta.durability = cfg->durability;
	o->meta.read_only = cfg->read_only;
	/* Presence tables in shared memory (docs/SGLANG.md): readable by
	 * whoever may list the pools, the mounting user alone unless
	 * allow_other. */
	if (access("/dev/shm", W_OK | X_OK) == 0)
		o->meta.presence_dir = "/dev/shm";
	o->meta.presence_mode = cfg->allow_other ? 0644 : 0600;
	o->mountpoint = cfg->mountpoint;
	o->threads = cfg->threads;
	o->allow_other = cfg->allow_other;
	o->read_only = cfg->read_only;
	o->debug = cfg->debug;
	o->entry_timeout = cfg->entry_timeout;
	o->kernel_cache = (enum pagefs_kernel_cache)cfg->kernel_cache;
	if (cfg->http || cfg->metrics[0]) {
		o->on_meta = cli_http_start;
		o->on_close = cli_http_stop;
		o->hook_arg = (void *)cfg;
	}
}

/* Serves in this process; returns pagefs_serve's exit code. */
static int cli_mount_serve(const struct cli_mount_config *cfg, int pipe_fd)
{
	struct cli_mount_ready_ctx ctx = {
		.cfg = cfg, .foreground = pipe_fd < 0, .pipe_fd = pipe_fd, .called = 0};
	struct pagefs_mount_opts o;
	int ret;

	cli_mount_fill_opts(cfg, &o);
	ret = pagefs_serve(&o, cli_mount_ready, &ctx);
	sd_notify(0, "STOPPING=1");
	if (!ctx.called) /* a broken promise of fs/; still tell the parent */
		cli_mount_ready(&ctx, -EIO, "the filesystem stopped before it was mounted");
	return ret ? CLI_FAIL : CLI_OK;
}

/* Reaps a daemon that reported failure and is exiting; gives up after
 * about ten seconds (it is then reparented to init). */
static int cli_mount_reap(pid_t child)
{
	int st;

	for (int i = 0; i < 1000; i++) {
		pid_t r = waitpid(child, &st, WNOHANG);

		if (r == child)
			return st;
		if (r < 0 && errno != EINTR)
			break;
		usleep(10000);
	}
	return -1;
}

/*
 * 1 if the daemon has been sent SIGKILL (pending on it, or its leader a
 * zombie) but has not exited: a thread of it can be stuck in the kernel
 * (docs/DECISIONS.md), keeping the report pipe open for ever.
 */
static int cli_mount_killed(pid_t child)
{
	char path[64], line[256];
	int killed = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)child);
	if (!(f = fopen(path, "r")))
		return 0;
	while (!killed && fgets(line, sizeof(line), f)) {
		unsigned long long mask;
		if (strncmp(line, "State:", 6) == 0)
			killed = strchr(line, 'Z') != NULL;
		else if ((sscanf(line, "SigPnd: %llx", &mask) == 1 ||
		          sscanf(line, "ShdPnd: %llx", &mask) == 1) &&
		         (mask & (1ULL << (SIGKILL - 1))))
			killed = 1;
	}
	fclose(f);
	return killed;
}

/* The parent's side: waits for the daemon's report on fd. */
static int cli_mount_wait_ready(const struct cli_mount_config *cfg, pid_t child, int fd)
{
	char status = 1, msg[4096];
	size_t used = 0;
	ssize_t n;
	int got_status, st;

	/* the report, or the daemon's death; a killed daemon that cannot
	 * exit (stuck in the kernel) is a death too, after a grace second */
	for (int killed_for = 0;;) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		if (poll(&pfd, 1, 500) != 0)
			break;
		killed_for = cli_mount_killed(child) ? killed_for + 1 : 0;
		if (killed_for >= 2) {
			close(fd);
			waitpid(child, NULL, WNOHANG); /* no zombie if it did exit */
			return cli_fail(CMD,
			                "the daemon (pid %d) was killed before the mount was ready "
			                "and is stuck in the kernel; if %s is still mounted, run "
			                "'pagefs umount --force %s'",
			                (int)child, cfg->mountpoint, cfg->mountpoint);
		}
	}
	do
		n = read(fd, &status, 1);
	while (n < 0 && errno == EINTR);
	got_status = n == 1;
	while (got_status && used < sizeof(msg) - 1) {
		n = read(fd, msg + used, sizeof(msg) - 1 - used);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		used += (size_t)n;
	}
	msg[used] = '\0';
	close(fd);

	if (got_status && status == 0) {
		/* The kernel mount exists; the first request proves the daemon
		 * finished FUSE INIT and answers (it blocks until then). */
		pid_t daemon_pid;
		int rc = cli_mount_pid(cfg->mountpoint, &daemon_pid);
		if (rc < 0) {
			cli_fail(CMD,
			         "%s was mounted but the daemon does not answer (%s); run again "
			         "with "
			         "-f --log-level debug to see why",
			         cfg->mountpoint, strerror(-rc));
			umount2(cfg->mountpoint, MNT_DETACH);
			cli_mount_reap(child);
			return CLI_FAIL;
		}
		cli_mount_print_mounted(cfg);
		return CLI_OK; /* the daemon keeps running */
	}
	if (got_status) {
		cli_fail(CMD, "%s",
		         msg[0] ? msg : "the mount failed; run again with -f to see why");
		cli_mount_reap(child);
		return CLI_FAIL;
	}
	/* The pipe closed without a report: the daemon died during setup. */
	st = cli_mount_reap(child);
	if (st >= 0 && WIFSIGNALED(st))
		return cli_fail(CMD,
		                "the daemon (pid %d) was killed by signal %d (%s) before the mount "
		                "was ready: run again with -f --log-level debug to see why",
		                (int)child, WTERMSIG(st), strsignal(WTERMSIG(st)));
	if (st >= 0 && WIFEXITED(st))
		return cli_fail(CMD,
		                "the daemon (pid %d) exited with status %d before the mount was "
		                "ready: run again with -f --log-level debug to see why",
		                (int)child, WEXITSTATUS(st));
	return cli_fail(CMD,
	                "the daemon (pid %d) stopped reporting before the mount was ready: run "
	                "again with -f --log-level debug to see why",
	                (int)child);
}

int cli_mount_main(int argc, char **argv)
{
	struct cli_mount_config cfg;
	int fds[2], ret;
	pid_t pid;

	ret = cli_mount_parse(argc, argv, &cfg);
	if (ret)
		return ret < 0 ? CLI_OK : ret;

	log_set_level((enum log_level)cfg.log_level);
	if (cfg.log_file[0]) {
		ret = log_open_file(cfg.log_file);
		if (ret < 0)
			return cli_fail(CMD,
			                "cannot open --log-file '%s': %s; name a file in an "
			                "existing, writable directory",
			                cfg.log_file, strerror(-ret));
	}

	if (cfg.foreground)
		return cli_mount_serve(&cfg, -1);

	if (pipe2(fds, O_CLOEXEC) < 0)
		return cli_fail(CMD, "cannot create a pipe: %s", strerror(errno));
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0) {
		int e = errno;

		close(fds[0]);
		close(fds[1]);
		return cli_fail(CMD, "cannot start the daemon (fork): %s", strerror(e));
	}
	if (pid == 0) {
		close(fds[0]);
		setsid();
		signal(SIGPIPE, SIG_IGN);
		return cli_mount_serve(&cfg, fds[1]);
	}
	close(fds[1]);
	return cli_mount_wait_ready(&cfg, pid, fds[0]);
}
