/*
 * cli_bench_floor.c - `pagefs bench --floors`: what no FUSE daemon can go
 * below on this machine, measured, and the ratios to `raw` that leaves.
 *
 * A page read or written through a FUSE mount costs at least what `raw`
 * pays for its bytes (the same copy) plus one round trip between the
 * client and the daemon for each request the kernel must send and wait
 * for. Measured here, one client, on the bench's backing:
 *   - pipe:  a one-byte round trip between two processes over two pipes:
 *            waking another process and being woken back, no filesystem;
 *   - fuse:  one FUSE round trip through a pagefs mount: fgetxattr of
 *            user.pagefs.offset on an open page (answered from memory);
 *   - open:  open(O_RDONLY) and close of a page through pagefs (its name
 *            cached: one OPEN; a reader's close waits for nothing);
 *   - per page size P: pread of P bytes in the page cache (`raw`'s hot
 *     read), pread of P bytes just dropped from it (cold; on tmpfs the
 *     same as hot) and pwrite of P bytes into a fresh part of a file
 *     (`raw`'s write).
 * From these, the highest ratio to `raw` each pagefs contender can reach:
 *   pagefs-direct read  pread / (pread + open + fuse): the open pins the
 *                       page, the getxattr finds its bytes;
 *   pagefs read         pread / (pread + open + ceil(P / max_read) fuse):
 *                       direct I/O, one request per max_read bytes;
 *   pagefs write        pwrite / (pwrite + pread + (3 + ceil(P /
 *                       FS_MAX_WRITE)) fuse): the bytes are copied into
 *                       the daemon (a pread's worth) and then into the
 *                       data file (a pwrite's), and create, each write,
 *                       the flush at close and the rename wait for their
 *                       answers.
 * These leave out everything a daemon does in its answers, so the real
 * ratios are lower; the bench's matrix measures those.
 */
#include "tools/cli_bench.h"

#include "fs/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#define FLOOR_TRIPS 4000
#define FLOOR_BYTES (512ULL << 20) /* per copy measurement */
#define FLOOR_MAX_ITERS 2000
#define FLOOR_MIN_ITERS 16

struct floor_row {
	uint64_t size;
	double pread_us, cold_us, pwrite_us;
	double direct, read_hot, read_cold, write;
};

static double median_us(uint64_t *ns, uint64_t n)
{
	bench_sort_ns(ns, n);
	return bench_percentile_us(ns, n, 50);
}

static int failed(const char *what, const char *path)
{
	fprintf(stderr, "pagefs bench: %s %s: %s\n", what, path, strerror(errno));
	return -1;
}

/* Median one-byte round trip between this process and a child over two
 * pipes, in us; -1 on failure. */
static double pipe_round_trip(uint64_t *lat)
{
	int there[2], back[2];
	char b = 'x';
	pid_t pid;
	double us = -1;

	if (pipe(there) < 0)
		return -1;
	if (pipe(back) < 0) {
		close(there[0]);
		close(there[1]);
		return -1;
	}
	pid = fork();
	if (pid == 0) {
		close(there[1]);
		close(back[0]);
		while (read(there[0], &b, 1) == 1 && write(back[1], &b, 1) == 1)
			;
		_exit(0);
	}
	close(there[0]);
	close(back[1]);
	if (pid > 0) {
		int i;
		for (i = 0; i < FLOOR_TRIPS && !bench_interrupted; i++) {
			uint64_t t0 = bench_now_ns();
			if (write(there[1], &b, 1) != 1 || read(back[0], &b, 1) != 1)
				break;
			lat[i] = bench_now_ns() - t0;
		}
		if (i == FLOOR_TRIPS)
			us = median_us(lat, FLOOR_TRIPS);
	}
	close(there[1]); /* the child reads EOF and exits */
	close(back[0]);
	if (pid > 0)
		waitpid(pid, NULL, 0);
	return us;
}

/* Median FUSE round trip (fgetxattr on an open page) and open+close of
 * page `path`, in us. 0 or -1. */
static int fuse_round_trips(const char *path, uint64_t *lat, double *fuse_us, double *open_us)
{
	char val[64];
	int fd = open(path, O_RDONLY);

	if (fd < 0)
		return failed("open", path);
	for (int i = 0; i < FLOOR_TRIPS; i++) {
		uint64_t t0 = bench_now_ns();
		if (fgetxattr(fd, "user.pagefs.offset", val, sizeof(val)) <= 0) {
			close(fd);
			return failed("getxattr user.pagefs.offset", path);
		}
		lat[i] = bench_now_ns() - t0;
	}
	close(fd);
	*fuse_us = median_us(lat, FLOOR_TRIPS);
	for (int i = 0; i < FLOOR_TRIPS; i++) {
		uint64_t t0 = bench_now_ns();
		if ((fd = open(path, O_RDONLY)) < 0)
			return failed("open", path);
		close(fd);
		lat[i] = bench_now_ns() - t0;
	}
	*open_us = median_us(lat, FLOOR_TRIPS);
	return 0;
}

/* Median pwrite of `size` bytes into fresh parts of file `path`, then
 * pread of them in the page cache (the second pass: the first read of a
 * page just written costs more, as the kernel moves it to its active
 * list) and, after dropping the cache, cold. 0 or -1. */
static int copies(const struct bench_env *env, const char *path, uint64_t size, char *buf,
                  uint64_t *lat, struct floor_row *row)
{
	uint64_t n = size ? FLOOR_BYTES / size : 0;
	double *to[] = {&row->pwrite_us, &row->pread_us, &row->pread_us, &row->cold_us};
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	int ret = -1;

	if (fd < 0)
		return failed("create", path);
	n = n < FLOOR_MIN_ITERS ? FLOOR_MIN_ITERS : n > FLOOR_MAX_ITERS ? FLOOR_MAX_ITERS : n;
	memset(buf, 0x5a, size);
	for (int pass = 0; pass < 4; pass++) {
		if (pass == 3 && (!env->root || fsync(fd) < 0 || bench_drop_caches(env) < 0)) {
			row->cold_us = row->pread_us; /* the caches stayed: said so (print) */
			break;
		}
		for (uint64_t i = 0; i < n; i++) {
			uint64_t t0 = bench_now_ns();
			ssize_t got = pass ? pread(fd, buf, size, (off_t)(i * size))
			                   : pwrite(fd, buf, size, (off_t)(i * size));
			if (got != (ssize_t)size) {
				failed(pass ? "pread" : "pwrite", path);
				goto out;
			}
			lat[i] = bench_now_ns() - t0;
		}
		*to[pass] = median_us(lat, n);
	}
	ret = 0;
out:
	close(fd);
	unlink(path);
	return ret;
}

static double ratio(double raw, double floor)
{
	return floor > 0 ? raw / floor : 0;
}

/* Requests of at most max bytes that carry size bytes. */
static double requests(uint64_t size, uint64_t max)
{
	uint64_t n = max ? (size + max - 1) / max : 1;

	return (double)n;
}

static void bounds(struct floor_row *r, double fuse, double open)
{
	double reads = requests(r->size, fs_max_read());
	double writes = requests(r->size, FS_MAX_WRITE);

	r->direct = ratio(r->pread_us, r->pread_us + open + fuse);
	r->read_hot = ratio(r->pread_us, r->pread_us + open + reads * fuse);
	r->read_cold = ratio(r->cold_us, r->cold_us + open + reads * fuse);
	r->write = ratio(r->pwrite_us, r->pwrite_us + r->pread_us + (3 + writes) * fuse);
}

static void print(const struct bench_env *env, const struct floor_row *rows, int n, double pipe_us,
                  double fuse_us, double open_us)
{
	printf("\npagefs bench --floors on %s, one client: what no FUSE daemon goes below here\n",
	       env->backing_desc);
	printf("  round trip between two processes (pipes)   %7.1f us\n", pipe_us);
	printf("  FUSE round trip through pagefs (getxattr)  %7.1f us\n", fuse_us);
	printf("  open + close of a page through pagefs      %7.1f us\n", open_us);
	printf("  pagefs requests: reads of at most %u KiB, writes of at most %u KiB\n%s",
	       fs_max_read() >> 10, FS_MAX_WRITE >> 10,
	       env->root ? "" : "  (not root: cold reads could not drop the page cache)\n");
	printf("\nThe highest ratio to raw each contender can reach (copies and round trips "
	       "alone):\n\n");
	printf("| page | pread us | cold pread us | pwrite us | pagefs-direct read | pagefs read "
	       "hot | pagefs read cold | pagefs write |\n");
	printf("|--:|--:|--:|--:|--:|--:|--:|--:|\n");
	for (int i = 0; i < n; i++) {
		char sz[32];
		meta_format_size(rows[i].size, sz, sizeof(sz));
		printf("| %s | %.1f | %.1f | %.1f | %.2f | %.2f | %.2f | %.2f |\n", sz,
		       rows[i].pread_us, rows[i].cold_us, rows[i].pwrite_us, rows[i].direct,
		       rows[i].read_hot, rows[i].read_cold, rows[i].write);
	}
}

static int write_json(const char *path, const struct floor_row *rows, int n, double pipe_us,
                      double fuse_us, double open_us)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return failed("cannot write", path);
	for (int i = 0; i < n; i++)
		fprintf(f,
		        "%s{\"workload\": \"floor\", \"page_size\": %llu, \"pipe_rt_us\": %.2f, "
		        "\"fuse_rt_us\": %.2f, \"open_us\": %.2f, \"pread_us\": %.2f, "
		        "\"cold_pread_us\": %.2f, \"pwrite_us\": %.2f, \"max_direct_read\": %.4f, "
		        "\"max_read_hot\": %.4f, \"max_read_cold\": %.4f, \"max_write\": %.4f}%s\n",
		        i ? " " : "[", (unsigned long long)rows[i].size, pipe_us, fuse_us, open_us,
		        rows[i].pread_us, rows[i].cold_us, rows[i].pwrite_us, rows[i].direct,
		        rows[i].read_hot, rows[i].read_cold, rows[i].write, i + 1 == n ? "]" : ",");
	return fclose(f) == 0 ? 0 : failed("cannot write", path);
}

/* Mounts pagefs over a fresh index and writes one page to measure on. */
static int mount_with_page(struct bench_env *env, const struct bench_opts *o, char *page,
                           size_t len)
{
	char uri[PATH_MAX + 64], backing[PATH_MAX], log[PATH_MAX], pool[PATH_MAX];
	int fd;

	if (bench_index_uri(env, o, "floor", uri, sizeof(uri)) < 0)
		return -1;
	bench_fmt(backing, sizeof(backing), "%s/floor", env->backing);
	bench_fmt(env->pf_mnt, sizeof(env->pf_mnt), "%s/mnt-floor", env->tmp);
	bench_fmt(log, sizeof(log), "%s/pagefs-floor.log", env->tmp);
	if (bench_pagefs_mount(env, backing, env->pf_mnt, uri, log, &env->pf_pid) < 0)
		return -1;
	env->pf_mounted = 1;
	bench_fmt(pool, sizeof(pool), "%s/0/floor", env->pf_mnt);
	bench_fmt(page, len, "%s/p", pool);
	if (bench_mkdirs(pool) < 0)
		return failed("mkdir", pool);
	fd = open(page, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || write(fd, "floor", 5) != 5 || close(fd) < 0)
		return failed("write", page);
	return 0;
}

/* Removes what mount_with_page made, so that an index given with --meta
 * is left as it was (the pool's data file lives in our temporary
 * directory). 0, or -1 (printed). */
static int unmake_page(const struct bench_env *env)
{
	char pool[PATH_MAX], rank[PATH_MAX], page[PATH_MAX];

	bench_fmt(rank, sizeof(rank), "%s/0", env->pf_mnt);
	bench_fmt(pool, sizeof(pool), "%s/floor", rank);
	bench_fmt(page, sizeof(page), "%s/p", pool);
	if (unlink(page) < 0 && errno != ENOENT)
		return failed("unlink", page);
	if (rmdir(pool) < 0 && errno != ENOENT)
		return failed("rmdir", pool);
	if (rmdir(rank) < 0 && errno != ENOENT && errno != ENOTEMPTY)
		return failed("rmdir", rank); /* other pools of an index given with --meta */
	return 0;
}

int bench_floors(struct bench_env *env, const struct bench_opts *o)
{
	struct floor_row rows[BENCH_MAX_LIST] = {0};
	uint64_t *lat =
		calloc(FLOOR_MAX_ITERS > FLOOR_TRIPS ? FLOOR_MAX_ITERS : FLOOR_TRIPS, sizeof(*lat));
	uint64_t max = 0;
	char page[PATH_MAX], file[PATH_MAX], *buf = NULL;
	double pipe_us, fuse_us = 0, open_us = 0;
	int ret = -1;

	for (int i = 0; i < o->nsizes; i++)
		max = o->sizes[i] > max ? o->sizes[i] : max;
	if (!lat || posix_memalign((void **)&buf, 4096, max) != 0) {
		fprintf(stderr, "pagefs bench: out of memory\n");
		goto out;
	}
	printf("pagefs bench --floors: round trips, then the copy of each page size\n");
	if ((pipe_us = pipe_round_trip(lat)) < 0) {
		fprintf(stderr, "pagefs bench: the pipe round trip failed: %s\n", strerror(errno));
		goto out;
	}
	if (mount_with_page(env, o, page, sizeof(page)) < 0 ||
	    fuse_round_trips(page, lat, &fuse_us, &open_us) < 0)
		goto out;
	bench_fmt(file, sizeof(file), "%s/floor.data", env->backing);
	for (int i = 0; i < o->nsizes && !bench_interrupted; i++) {
		rows[i].size = o->sizes[i];
		if (copies(env, file, o->sizes[i], buf, lat, &rows[i]) < 0)
			goto out;
		bounds(&rows[i], fuse_us, open_us);
	}
	if (bench_interrupted)
		goto out;
	print(env, rows, o->nsizes, pipe_us, fuse_us, open_us);
	ret = o->json ? write_json(o->json, rows, o->nsizes, pipe_us, fuse_us, open_us) : 0;
out:
	if (env->pf_mounted && unmake_page(env) < 0)
		ret = -1;
	if (env->pf_mounted && bench_pagefs_umount(env, env->pf_mnt) < 0)
		fprintf(stderr, "pagefs bench: could not unmount %s\n", env->pf_mnt);
	env->pf_mounted = 0;
	free(buf);
	free(lat);
	return ret;
}
