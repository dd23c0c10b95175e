/*
 * cli_common.c - helpers shared by the pagefs commands: messages with the
 * usage hint, size and number parsing, human-readable sizes, xattr reads
 * and the list of pagefs mounts from /proc/mounts.
 */
#include "tools/cli_common.h"

#include "meta/meta.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <mntent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "pagefs%s%s: ", cmd ? " " : "", cmd ? cmd : "");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'pagefs%s%s --help'.\n", cmd ? " " : "", cmd ? cmd : "");
	return CLI_USAGE;
}

int cli_fail(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "pagefs%s%s: ", cmd ? " " : "", cmd ? cmd : "");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return CLI_FAIL;
}

int cli_parse_pow2_size(const char *cmd, const char *what, const char *s, uint64_t min,
                        uint64_t *out)
{
	uint64_t v;
	char minbuf[32];

	if (meta_parse_size(s, &v) < 0 || v == 0 || (v & (v - 1)) != 0)
		return cli_usage_error(cmd,
		                       "%s '%s' is not a size: use a power of two such as "
		                       "4096, 64K, 16M, 1G or 1T",
		                       what, s);
	if (v < min) {
		meta_format_size(min, minbuf, sizeof(minbuf));
		return cli_usage_error(cmd, "%s '%s' is too small: use at least %s", what, s,
		                       minbuf);
	}
	*out = v;
	return 0;
}

int cli_parse_page_size(const char *cmd, const char *s, uint64_t *out)
{
	char maxbuf[32];
	int ret = cli_parse_pow2_size(cmd, "--page-size", s, 4096, out);

	if (ret || *out <= META_SLOT_SIZE_MAX)
		return ret;
	meta_format_size(META_SLOT_SIZE_MAX, maxbuf, sizeof(maxbuf));
	return cli_usage_error(cmd, "--page-size '%s' is too large: use at most %s", s, maxbuf);
}

int cli_check_page_count(const char *cmd, uint64_t page_size, uint64_t capacity)
{
	char ps[32], cap[32];

	if (!page_size || capacity / page_size <= META_SLOTS_MAX)
		return 0;
	meta_format_size(page_size, ps, sizeof(ps));
	meta_format_size(capacity, cap, sizeof(cap));
	return cli_usage_error(cmd,
	                       "--capacity %s holds %llu pages of %s: a pool holds at most %llu; "
	                       "use a smaller capacity or larger pages",
	                       cap, (unsigned long long)(capacity / page_size), ps,
	                       (unsigned long long)META_SLOTS_MAX);
}

int cli_parse_long(const char *s, long min, long max, long *out)
{
	char *end;
	long v;

	if (!s || !*s)
		return -EINVAL;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

void cli_dirname(const char *path, char *out, size_t len)
{
	snprintf(out, len, "%s", path);
	char *slash = strrchr(out, '/');
	if (slash)
		slash[slash == out ? 1 : 0] = '\0';
	else
		snprintf(out, len, ".");
}

void cli_human_bytes(double bytes, char *buf, size_t len)
{
	static const char units[] = "KMGTPE";
	double v = bytes / 1024;
	int u = 0;

	if (!(bytes >= 1024)) { /* also NaN */
		snprintf(buf, len, "%.0f%s", bytes, bytes == 0 ? "" : "B");
		return;
	}
	while (v >= 1024 && u < (int)sizeof(units) - 2) {
		v /= 1024;
		u++;
	}
	if (v >= 100 || v == (double)(uint64_t)v)
		snprintf(buf, len, "%.0f%c", v, units[u]);
	else if (v >= 10)
		snprintf(buf, len, "%.1f%c", v, units[u]);
	else
		snprintf(buf, len, "%.2f%c", v, units[u]);
}

int cli_getxattr(const char *path, const char *name, char **out, size_t *len)
{
	for (int tries = 0; tries < 8; tries++) {
		ssize_t n = getxattr(path, name, NULL, 0);
		char *buf;
		ssize_t got;

		if (n < 0)
			return -errno;
		buf = malloc((size_t)n + 1);
		if (!buf)
			return -ENOMEM;
		got = getxattr(path, name, buf, (size_t)n);
		if (got < 0) {
			int e = errno;

			free(buf);
			if (e == ERANGE) /* grew between the two calls */
				continue;
			return -e;
		}
		buf[got] = '\0';
		*out = buf;
		if (len)
			*len = (size_t)got;
		return 0;
	}
	return -ERANGE;
}

int cli_getxattr_u64(const char *path, const char *name, uint64_t *out)
{
	char *buf = NULL, *end;
	size_t len = 0;
	int ret = cli_getxattr(path, name, &buf, &len);

	if (ret < 0 || !buf)
		return ret < 0 ? ret : -EIO;
	while (len > 0 && (buf[len - 1] == '\0' || buf[len - 1] == '\n'))
		buf[--len] = '\0';
	errno = 0;
	*out = strtoull(buf, &end, 10);
	ret = (len == 0 || *end || errno) ? -EINVAL : 0;
	free(buf);
	return ret;
}

int cli_mount_pid(const char *path, pid_t *out)
{
	uint64_t pid;
	int ret = cli_getxattr_u64(path, CLI_XATTR_PID, &pid);

	if (ret < 0)
		return ret;
	if (pid == 0 || pid > INT_MAX)
		return -EINVAL;
	*out = (pid_t)pid;
	return 0;
}

int cli_each_mount(int (*cb)(void *arg, const char *mountpoint), void *arg)
{
	FILE *f = setmntent("/proc/self/mounts", "r");
	struct mntent *e;
	int ret = 0;

	if (!f)
		return -errno;
	while (ret == 0 && (e = getmntent(f)) != NULL)
		if (strcmp(e->mnt_type, CLI_FSTYPE) == 0)
			ret = cb(arg, e->mnt_dir);
	endmntent(f);
	return ret;
}

int cli_is_pagefs_mount(const char *path)
{
	FILE *f = setmntent("/proc/self/mounts", "r");
	struct mntent *e;
	int found = 0;

	if (!f)
		return 0;
	/* The last mount on a directory is the one that is visible. */
	while ((e = getmntent(f)) != NULL)
		if (strcmp(e->mnt_dir, path) == 0)
			found = strcmp(e->mnt_type, CLI_FSTYPE) == 0;
	endmntent(f);
	return found;
}

int cli_uri_is_shared(const char *uri)
{
	return strstr(uri, "://") != NULL;
}

int cli_http_workers(const char *uri)
{
	return cli_uri_is_shared(uri) ? 2 : 1;
}
