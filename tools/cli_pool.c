/*
 * cli_pool.c - `pagefs pool create MOUNTPOINT/RANK/NS [--page-size SIZE]
 * [--capacity SIZE]`.
 *
 * Works through the mount with plain calls, as any user could: mkdir of the
 * rank and pool directories, then setxattr of user.pagefs.page_size and
 * user.pagefs.capacity (decimal bytes). An existing pool is fine when its
 * settings already match or can still be changed (the page size only while
 * the pool is empty).
 */
#include "tools/cli_common.h"

#include "meta/meta.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#define CMD "pool create"

struct cli_pool_create_config {
	char path[PATH_MAX]; /* the argument, cut into mountpoint/rank/ns */
	char mountpoint[PATH_MAX];
	char rank_dir[PATH_MAX];
	char pool_dir[PATH_MAX];
	const char *rank;   /* points into path */
	const char *ns;     /* points into path */
	uint64_t page_size; /* 0: leave as is (new pools: the mount default) */
	uint64_t capacity;  /* 0: leave as is */
};

static const struct option pool_create_longopts[] = {
	{"page-size", required_argument, NULL, 'p'},
	{"capacity", required_argument, NULL, 'c'},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

static void cli_pool_usage(FILE *out)
{
	fprintf(out,
	        "Usage: pagefs pool create MOUNTPOINT/RANK/NS [--page-size SIZE] [--capacity "
	        "SIZE]\n"
	        "\n"
	        "Creates the pool directory RANK/NS of a mounted pagefs (and its rank), and\n"
	        "sets its page (slot) size and capacity. Without an option the pool takes the\n"
	        "mount's default. An existing pool is changed instead: the capacity at any\n"
	        "time (not below the slots in use), the page size only while it is empty.\n"
	        "\n"
	        "  RANK  decimal 0..65535       NS  1 to 64 of a-z 0-9 _ (e.g. kv, mamba)\n"
	        "\n"
	        "Options:\n"
	        "  -p, --page-size SIZE   bytes per page slot, a power of two >= 4096\n"
	        "  -c, --capacity SIZE    pool size in bytes, a multiple of the page size\n"
	        "  -h, --help             show this help\n"
	        "\n"
	        "SIZE is a power of two: 4096, 64K, 16M, 1G, 1T.\n");
}

/* Splits "MP/RANK/NS" (trailing slashes allowed) into cfg. */
static int cli_pool_split(const char *arg, struct cli_pool_create_config *cfg)
{
	char *buf = cfg->path, *ns, *rank;
	size_t n = strlen(arg);

	if (n >= sizeof(cfg->path))
		return cli_usage_error(CMD, "pool path is too long");
	memcpy(buf, arg, n + 1);
	while (n > 1 && buf[n - 1] == '/')
		buf[--n] = '\0';
	memcpy(cfg->pool_dir, buf, n + 1); /* MP/RANK/NS */
	ns = strrchr(buf, '/');
	if (!ns || ns == buf)
		goto bad;
	*ns++ = '\0';
	memcpy(cfg->rank_dir, buf, (size_t)(ns - buf)); /* MP/RANK and its NUL */
	rank = strrchr(buf, '/');
	if (!rank)
		goto bad;
	*rank++ = '\0';
	memcpy(cfg->mountpoint, buf[0] ? buf : "/", strlen(buf[0] ? buf : "/") + 1);
	cfg->rank = rank;
	cfg->ns = ns;
	if (meta_parse_rank(rank) < 0)
		return cli_usage_error(CMD,
		                       "'%s' is not a rank: use a decimal number 0 to %d without "
		                       "leading zeros, as in MOUNTPOINT/0/kv",
		                       rank, META_RANK_MAX);
	if (meta_check_ns(ns) < 0)
		return cli_usage_error(CMD,
		                       "'%s' is not a pool namespace: use 1 to %d of a-z 0-9 _ "
		                       "(e.g. kv, mamba, swa)",
		                       ns, META_NS_MAX);
	return 0;
bad:
	return cli_usage_error(CMD,
	                       "'%s' does not name a pool: use MOUNTPOINT/RANK/NS, e.g. "
	                       "/mnt/pagefs/0/kv",
	                       arg);
}

static int cli_pool_create_parse(int argc, char **argv, struct cli_pool_create_config *cfg)
{
	int ret, c;

	memset(cfg, 0, sizeof(*cfg));
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hp:c:", pool_create_longopts, NULL)) != -1) {
		switch (c) {
		case 'h':
			cli_pool_usage(stdout);
			return -1;
		case 'p':
			ret = cli_parse_page_size(CMD, optarg, &cfg->page_size);
			if (ret)
				return ret;
			break;
		case 'c':
			ret = cli_parse_pow2_size(CMD, "--capacity", optarg, 4096, &cfg->capacity);
			if (ret)
				return ret;
			break;
		case ':':
			return cli_usage_error(CMD, "option '%s' needs a value", argv[optind - 1]);
		default:
			return cli_usage_error(CMD, "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (argc - optind != 1)
		return cli_usage_error(CMD, "%s: name one pool as MOUNTPOINT/RANK/NS",
		                       argc - optind < 1 ? "missing argument"
		                                         : "too many arguments");
	if (cfg->page_size && cfg->capacity && cfg->capacity % cfg->page_size != 0) {
		char ps[32], cap[32];

		meta_format_size(cfg->page_size, ps, sizeof(ps));
		meta_format_size(cfg->capacity, cap, sizeof(cap));
		return cli_usage_error(CMD,
		                       "--capacity %s does not hold whole pages of %s: use a "
		                       "multiple of --page-size",
		                       cap, ps);
	}
	if ((ret = cli_check_page_count(CMD, cfg->page_size, cfg->capacity)) != 0)
		return ret;
	return cli_pool_split(argv[optind], cfg);
}

/* Sets one setting of the pool; changed: an earlier setting was set. */
static int cli_pool_set(const struct cli_pool_create_config *cfg, const char *attr, uint64_t value,
                        int changed)
{
	const char *none = changed ? "" : "; nothing was changed";
	char buf[32], size[32];
	int e;

	snprintf(buf, sizeof(buf), "%" PRIu64, value);
	if (setxattr(cfg->pool_dir, attr, buf, strlen(buf), 0) == 0)
		return 0;
	e = errno;
	meta_format_size(value, size, sizeof(size));
	if (e == EBUSY && strcmp(attr, CLI_XATTR_PAGE_SIZE) == 0)
		return cli_fail(CMD,
		                "%s: pool has pages; page size can change only while it is empty "
		                "(remove its pages, or use another pool)%s",
		                cfg->pool_dir, none);
	if (e == EBUSY)
		return cli_fail(CMD,
		                "%s: capacity %s cannot be set while the pool is in use: it is "
		                "below the slots in use, or, on an index several mounts share, "
		                "it changes how they divide a pool of fewer than 2048 pages; "
		                "remove its pages first, or use another pool%s",
		                cfg->pool_dir, size, none);
	if (e == EINVAL)
		return cli_fail(CMD,
		                "%s: the filesystem refused %s = %s: the capacity must be a "
		                "multiple of the page size, and at most %llu pages",
		                cfg->pool_dir, attr, size, (unsigned long long)META_SLOTS_MAX);
	if (e == EROFS)
		return cli_fail(CMD, "%s: the mount is read-only (-o ro): remount it read-write",
		                cfg->pool_dir);
	return cli_fail(CMD, "%s: cannot set %s to %s: %s", cfg->pool_dir, attr, buf, strerror(e));
}

static int cli_pool_configure(const struct cli_pool_create_config *c, int existed);

static int cli_pool_create(int argc, char **argv)
{
	struct cli_pool_create_config cfg;
	int ret, existed = 0, rank_made = 0;
	pid_t pid;

	ret = cli_pool_create_parse(argc, argv, &cfg);
	if (ret)
		return ret < 0 ? CLI_OK : ret;

	ret = cli_mount_pid(cfg.mountpoint, &pid);
	if (ret == -ENOENT)
		return cli_fail(CMD, "%s does not exist: name a pagefs mount point",
		                cfg.mountpoint);
	if (ret == -ENODATA || ret == -ENOTSUP)
		return cli_fail(CMD,
		                "%s is not a pagefs mount: mount one first with 'pagefs mount "
		                "BACKING %s'",
		                cfg.mountpoint, cfg.mountpoint);
	if (ret < 0)
		return cli_fail(CMD, "cannot read %s of %s: %s", CLI_XATTR_PID, cfg.mountpoint,
		                strerror(-ret));

	if (mkdir(cfg.rank_dir, 0755) == 0)
		rank_made = 1;
	else if (errno != EEXIST)
		return cli_fail(CMD, "cannot create rank directory %s: %s", cfg.rank_dir,
		                strerror(errno));
	if (mkdir(cfg.pool_dir, 0755) < 0) {
		if (errno != EEXIST)
			return cli_fail(CMD, "cannot create pool directory %s: %s", cfg.pool_dir,
			                strerror(errno));
		existed = 1;
	}
	ret = cli_pool_configure(&cfg, existed);
	/* A pool made here whose settings were refused goes again: a failed
	 * command leaves nothing behind. */
	if (ret != CLI_OK && !existed) {
		if (rmdir(cfg.pool_dir) < 0)
			fprintf(stderr,
			        "pagefs %s: the new pool %s is left (%s): remove it with rmdir\n",
			        CMD, cfg.pool_dir, strerror(errno));
		else if (rank_made)
			(void)rmdir(cfg.rank_dir);
	}
	return ret;
}

/* Gives pool cfg->pool_dir (made now, or existed) the settings asked for
 * and reports them. CLI_OK or an exit code (the message printed). */
static int cli_pool_configure(const struct cli_pool_create_config *c, int existed)
{
	struct cli_pool_create_config cfg = *c;
	uint64_t cur_ps = 0, cur_cap = 0, ps, cap;
	char ps_buf[32], cap_buf[32];
	int ret, changed = 0;

	ret = cli_getxattr_u64(cfg.pool_dir, CLI_XATTR_PAGE_SIZE, &cur_ps);
	if (ret == 0)
		ret = cli_getxattr_u64(cfg.pool_dir, CLI_XATTR_CAPACITY, &cur_cap);
	if (ret < 0)
		return cli_fail(CMD, "cannot read the settings of %s: %s", cfg.pool_dir,
		                strerror(-ret));

	ps = cfg.page_size ? cfg.page_size : cur_ps;
	cap = cfg.capacity ? cfg.capacity : cur_cap;
	if (ps == 0 || cap < ps || cap % ps != 0) {
		meta_format_size(ps, ps_buf, sizeof(ps_buf));
		meta_format_size(cap, cap_buf, sizeof(cap_buf));
		return cli_fail(CMD,
		                "%s: capacity %s does not hold whole pages of %s: give a multiple "
		                "of the page size (or both --page-size and --capacity)",
		                cfg.pool_dir, cap_buf, ps_buf);
	}
	/* A page size the pool cannot take (it holds slots) is refused before
	 * the capacity changes: nothing half done. (The filesystem checks
	 * again: a writer may come in between.) */
	uint64_t used = 0;
	if (ps != cur_ps && cli_getxattr_u64(cfg.pool_dir, "user.pagefs.used_slots", &used) == 0 &&
	    used > 0)
		return cli_fail(CMD,
		                "%s: pool has pages; page size can change only while it is empty "
		                "(remove its pages, or use another pool); nothing was changed",
		                cfg.pool_dir);
	/* A larger page size may not fit the old capacity: grow that first. */
	if (cap != cur_cap && ps > cur_cap) {
		ret = cli_pool_set(&cfg, CLI_XATTR_CAPACITY, cap, 0);
		if (ret)
			return ret;
		cur_cap = cap;
		changed = 1;
	}
	if (ps != cur_ps) {
		ret = cli_pool_set(&cfg, CLI_XATTR_PAGE_SIZE, ps, changed);
		if (ret)
			return ret;
		changed = 1;
	}
	if (cap != cur_cap) {
		ret = cli_pool_set(&cfg, CLI_XATTR_CAPACITY, cap, changed);
		if (ret)
			return ret;
	}

	meta_format_size(ps, ps_buf, sizeof(ps_buf));
	meta_format_size(cap, cap_buf, sizeof(cap_buf));
	printf("pagefs: pool %s: page size %s, capacity %s (%" PRIu64 " pages)%s\n", cfg.pool_dir,
	       ps_buf, cap_buf, cap / ps, existed ? ", already existed" : "");
	return CLI_OK;
}

int cli_pool_main(int argc, char **argv)
{
	if (argc < 2)
		return cli_usage_error("pool", "missing command: use 'pagefs pool create "
		                               "MOUNTPOINT/RANK/NS'");
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		cli_pool_usage(stdout);
		return CLI_OK;
	}
	if (strcmp(argv[1], "create") == 0)
		return cli_pool_create(argc - 1, argv + 1);
	return cli_usage_error("pool", "unknown pool command '%s': use create", argv[1]);
}
