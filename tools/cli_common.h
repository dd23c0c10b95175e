/*
 * cli_common.h - what the `pagefs` front ends share: the command entry points,
 * the exit codes, and small helpers for messages, sizes and xattrs.
 *
 * Every command lives in its own tools/cli_<cmd>.c with one getopt_long
 * table and one config struct. Commands print what was wrong and the fix,
 * and return CLI_OK, CLI_FAIL (operational error) or CLI_USAGE.
 */
#ifndef PAGEFS_CLI_COMMON_H
#define PAGEFS_CLI_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifndef PAGEFS_VERSION
#define PAGEFS_VERSION "0.1.0"
#endif

enum cli_exit { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* The xattrs the daemon serves on its root and pool directories. */
#define CLI_XATTR_PID "user.pagefs.pid"
#define CLI_XATTR_STATS "user.pagefs.stats"
#define CLI_XATTR_PAGE_SIZE "user.pagefs.page_size"
#define CLI_XATTR_CAPACITY "user.pagefs.capacity"

/* The filesystem type of a pagefs mount in /proc/mounts. */
#define CLI_FSTYPE "fuse.pagefs"

/* Command entry points: argv[0] is the command name ("mount", ...). Each
 * returns an enum cli_exit value. */
int cli_mount_main(int argc, char **argv);
/* mount.fuse.pagefs (cli_fstab.c); cli_mount_sloppy: -s, unknown -o options only warn */
int cli_fstab_main(int argc, char **argv);
extern int cli_mount_sloppy;
int cli_umount_main(int argc, char **argv);
int cli_status_main(int argc, char **argv);
/* `pagefs status --url`: a daemon's pools from its /metrics (cli_status_url.c) */
int cli_status_url(const char *url, int json);
int cli_pool_main(int argc, char **argv);
int cli_fsck_main(int argc, char **argv);
int cli_import_main(int argc, char **argv);
int cli_export_main(int argc, char **argv);
int cli_serve_main(int argc, char **argv);
int cli_bench_main(int argc, char **argv);

/* Executes the command again with glibc's malloc on transparent huge
 * pages, unless that is set or unavailable (cli_heap.c); returns only
 * when it does not. argv: main's, as it was given. */
void cli_huge_heap(char **argv);

/*
 * Prints "pagefs CMD: MESSAGE" to stderr followed by a hint to run
 * `pagefs CMD --help`, and returns CLI_USAGE.
 */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints "pagefs CMD: MESSAGE" to stderr and returns CLI_FAIL. */
int cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * Parses a size option ("4096", "64K", "16M", "1G", "1T") that must be a
 * power of two of at least `min` bytes (0: no minimum). Returns 0, or
 * prints a usage message naming `what` and returns CLI_USAGE.
 */
int cli_parse_pow2_size(const char *cmd, const char *what, const char *s, uint64_t min,
                        uint64_t *out);
/* A --page-size: a power of two from 4096 to META_SLOT_SIZE_MAX, as
 * cli_parse_pow2_size. */
int cli_parse_page_size(const char *cmd, const char *s, uint64_t *out);
/* Whether capacity bytes of page_size pages are at most META_SLOTS_MAX
 * pages: 0, or prints a usage message and returns CLI_USAGE. */
int cli_check_page_count(const char *cmd, uint64_t page_size, uint64_t capacity);
/* Parses a decimal integer in [min, max]. 0 or -EINVAL. */
int cli_parse_long(const char *s, long min, long max, long *out);

/* Formats bytes for people: "0", "512B", "1.5K", "16M", "2.25T". */
void cli_human_bytes(double bytes, char *buf, size_t len);
/* The directory part of path into out (len bytes): "." when path has no
 * slash, "/" for a name at the root. */
void cli_dirname(const char *path, char *out, size_t len);
/* Whether index uri names a shared PostgreSQL index (postgres://...,
 * postgresql://...) rather than an SQLite file. */
int cli_uri_is_shared(const char *uri);
/*
 * How many HTTP worker threads serve the metadata protocol (serve-meta,
 * mount --http) on index uri when --threads does not say: 1 on SQLite,
 * whose commits are tens of microseconds of this process's CPU and whose
 * every request holds meta.lock, so a second worker only waits for the
 * first; 2 on PostgreSQL, whose commits and lease waits are network round
 * trips that a lookup must not queue behind (DECISIONS.md, "The
 * protocol's worker threads").
 */
int cli_http_workers(const char *uri);

/*
 * Reads an xattr into a new NUL-terminated buffer (the caller frees it)
 * and stores its length in *len (may be NULL). Returns 0 or -errno
 * (-ENODATA when the attribute is absent).
 */
int cli_getxattr(const char *path, const char *name, char **out, size_t *len);
/* Reads an xattr holding a decimal number. 0, -errno, or -EINVAL. */
int cli_getxattr_u64(const char *path, const char *name, uint64_t *out);

/*
 * Reads the daemon pid of the pagefs mounted at path. Returns 0, or
 * -ENODATA/-ENOTSUP when path is not a pagefs mount root, or -errno.
 */
int cli_mount_pid(const char *path, pid_t *out);

/*
 * Calls cb for every pagefs mount in /proc/mounts (unescaped mount point)
 * until cb returns non-zero, which is returned. 0 at the end, -errno if
 * /proc/mounts cannot be read.
 */
int cli_each_mount(int (*cb)(void *arg, const char *mountpoint), void *arg);
/* 1 if path is a mount point of type fuse.pagefs per /proc/mounts, else 0. */
int cli_is_pagefs_mount(const char *path);

#endif
