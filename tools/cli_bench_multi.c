/*
 * cli_bench_multi.c - `pagefs bench --mounts LIST`: how commits per second
 * scale with the number of pagefs daemons sharing one index.
 *
 * For each N in LIST: N mounts of one backing directory on one fresh
 * index, --clients (first value, default 2) writer processes per mount,
 * each creating --pages pages (default 256) of --sizes (first value,
 * default 64K) with open/write/close, all released at once. Reports
 * commits per second over the wall time of the slowest writer, and the
 * index transactions the daemons used (records per transaction: group
 * commit). More than one mount needs a PostgreSQL --meta; an SQLite index
 * serves one daemon, so with SQLite only N = 1 runs.
 */
#include "meta/meta.h"
#include "tools/cli_bench.h"
#include "tools/cli_common.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_MOUNTS 16

static void counters(const char *mnt, uint64_t *batches, uint64_t *records)
{
	char *val = NULL;
	json_t *doc, *t;

	*batches = *records = 0;
	if (cli_getxattr(mnt, CLI_XATTR_STATS, &val, NULL) < 0)
		return;
	doc = json_loads(val, 0, NULL);
	free(val);
	if (!doc)
		return;
	t = json_object_get(doc, "totals");
	*batches = (uint64_t)json_integer_value(json_object_get(t, "store_batches"));
	*records = (uint64_t)json_integer_value(json_object_get(t, "store_records"));
	json_decref(doc);
}

/* One writer: waits for the start byte, writes its pages, exits 0 or 1. */
static void writer(const char *pool, int id, uint64_t pages, uint64_t size, int start_fd)
{
	char path[PATH_MAX], c;
	char *buf = malloc(size);

	if (!buf || read(start_fd, &c, 1) != 1)
		_exit(1);
	memset(buf, 'a' + id % 26, size);
	for (uint64_t i = 0; i < pages; i++) {
		bench_fmt(path, sizeof(path), "%s/w%d-%llu.bin", pool, id, (unsigned long long)i);
		int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (fd < 0 || write(fd, buf, size) != (ssize_t)size || close(fd) < 0) {
			fprintf(stderr, "pagefs bench: writer %d: %s: %s\n", id, path,
			        strerror(errno));
			_exit(1);
		}
	}
	_exit(0);
}

struct multi_row {
	int mounts;
	long clients;
	uint64_t pages;
	double seconds, commits_per_s, records_per_txn;
};

/* Runs the writers on mnts[0..n); 0 or -1. */
static int run_writers(char mnts[][PATH_MAX], int n, long clients, uint64_t pages, uint64_t size,
                       struct multi_row *row)
{
	int start[2], failed = 0;
	pid_t pids[MAX_MOUNTS * 64];
	int np = 0;
	uint64_t b0[MAX_MOUNTS], r0[MAX_MOUNTS], b1, r1, batches = 0, records = 0;

	if (pipe(start) < 0)
		return -1;
	for (int m = 0; m < n; m++)
		counters(mnts[m], &b0[m], &r0[m]);
	for (int m = 0; m < n; m++) {
		char pool[PATH_MAX];
		bench_fmt(pool, sizeof(pool), "%s/0/kv", mnts[m]);
		for (long c = 0; c < clients; c++) {
			pid_t pid = fork();
			if (pid == 0) {
				close(start[1]);
				writer(pool, (int)(m * clients + c), pages, size, start[0]);
			}
			if (pid > 0)
				pids[np++] = pid;
		}
	}
	close(start[0]);
	double t0 = bench_now();
	for (int i = 0; i < np; i++)
		if (write(start[1], "g", 1) != 1)
			failed = 1;
	close(start[1]);
	for (int i = 0; i < np; i++) {
		int st;
		while (waitpid(pids[i], &st, 0) < 0 && errno == EINTR)
			;
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			failed = 1;
	}
	row->seconds = bench_now() - t0;
	for (int m = 0; m < n; m++) {
		counters(mnts[m], &b1, &r1);
		batches += b1 - b0[m];
		records += r1 - r0[m];
	}
	row->mounts = n;
	row->clients = clients * n;
	row->pages = (uint64_t)np * pages;
	row->commits_per_s = (double)row->pages / row->seconds;
	row->records_per_txn = batches ? (double)records / (double)batches : 0;
	return failed || np != n * clients ? -1 : 0;
}

/* Mounts n daemons over one backing on a fresh index, runs, unmounts. */
static int one_run(struct bench_env *env, const struct bench_opts *o, int n, struct multi_row *row)
{
	char uri[PATH_MAX + 64], backing[PATH_MAX], log[PATH_MAX], tag[32];
	char mnts[MAX_MOUNTS][PATH_MAX];
	pid_t pid;
	int mounted = 0, rc = -1;
	long clients = o->nclients ? o->clients[0] : 2;
	uint64_t size = o->nsizes ? o->sizes[0] : 64ULL << 10;
	uint64_t pages = o->pages ? o->pages : 256;

	bench_fmt(tag, sizeof(tag), "m%d", n);
	if (bench_index_uri(env, o, tag, uri, sizeof(uri)) < 0)
		return -1;
	bench_fmt(backing, sizeof(backing), "%s/multi-%d", env->backing, n);
	for (int m = 0; m < n; m++) {
		bench_fmt(mnts[m], sizeof(mnts[m]), "%s/mnt-multi-%d-%d", env->tmp, n, m);
		bench_fmt(log, sizeof(log), "%s/pagefs-multi-%d-%d.log", env->tmp, n, m);
		if (bench_pagefs_mount(env, backing, mnts[m], uri, log, &pid) < 0)
			goto out;
		mounted++;
		if (m == 0) {
			char pool[PATH_MAX];
			bench_fmt(pool, sizeof(pool), "%s/0/kv", mnts[0]);
			if (bench_mkdirs(pool) < 0)
				goto out;
		}
	}
	/* Every mount sees the pool (the change feed) before the run. */
	for (int m = 0; m < n; m++) {
		char pool[PATH_MAX];
		struct stat st;
		bench_fmt(pool, sizeof(pool), "%s/0/kv", mnts[m]);
		for (int i = 0; stat(pool, &st) < 0; i++) {
			if (i == 500) {
				fprintf(stderr, "pagefs bench: %s never showed the pool\n",
				        mnts[m]);
				goto out;
			}
			usleep(10000);
		}
	}
	rc = run_writers(mnts, n, clients, pages, size, row);
	if (rc < 0) {
		fprintf(stderr, "pagefs bench: a writer failed with %d mounts\n", n);
		for (int m = 0; m < n; m++) {
			bench_fmt(log, sizeof(log), "%s/pagefs-multi-%d-%d.log", env->tmp, n, m);
			bench_print_log(log);
		}
	}
out:
	for (int m = mounted - 1; m >= 0; m--)
		if (bench_pagefs_umount(env, mnts[m]) < 0)
			fprintf(stderr, "pagefs bench: could not unmount %s\n", mnts[m]);
	return rc;
}

int bench_multi(struct bench_env *env, const struct bench_opts *o)
{
	struct multi_row rows[BENCH_MAX_LIST];
	int nrows = 0, shared = o->meta_uri && cli_uri_is_shared(o->meta_uri);
	uint64_t size = o->nsizes ? o->sizes[0] : 64ULL << 10;
	FILE *json = NULL;

	char sz[32];

	meta_format_size(size, sz, sizeof(sz));
	printf("pagefs bench --mounts: %s pages, %ld writers per mount, %llu pages each, index "
	       "%s, backing %s\n",
	       sz, o->nclients ? o->clients[0] : 2, (unsigned long long)(o->pages ? o->pages : 256),
	       shared ? "PostgreSQL" : "SQLite", env->backing_desc);
	for (int i = 0; i < o->nmounts && !bench_interrupted; i++) {
		int n = (int)o->mounts[i];
		if (n > 1 && !shared) {
			printf("  %d mounts: skipped (an SQLite index serves one daemon; give "
			       "--meta "
			       "postgres://...)\n",
			       n);
			continue;
		}
		if (one_run(env, o, n, &rows[nrows]) < 0)
			return -1;
		nrows++;
	}
	printf("\n| mounts | writers | pages | seconds | commits/s | per mount | records/txn |\n"
	       "|--:|--:|--:|--:|--:|--:|--:|\n");
	for (int i = 0; i < nrows; i++)
		printf("| %d | %ld | %llu | %.2f | %.0f | %.0f | %.1f |\n", rows[i].mounts,
		       rows[i].clients, (unsigned long long)rows[i].pages, rows[i].seconds,
		       rows[i].commits_per_s, rows[i].commits_per_s / rows[i].mounts,
		       rows[i].records_per_txn);
	if (o->json && !(json = fopen(o->json, "w"))) {
		fprintf(stderr, "pagefs bench: cannot write %s: %s\n", o->json, strerror(errno));
		return -1;
	}
	for (int i = 0; json && i < nrows; i++)
		fprintf(json,
		        "%s{\"workload\": \"multi-write\", \"engine\": \"%s\", \"page_size\": "
		        "%llu, "
		        "\"mounts\": %d, \"clients\": %ld, \"pages\": %llu, \"seconds\": %.3f, "
		        "\"commits_per_s\": %.1f, \"records_per_txn\": %.2f}%s\n",
		        i ? " " : "[", shared ? "postgres" : "sqlite", (unsigned long long)size,
		        rows[i].mounts, rows[i].clients, (unsigned long long)rows[i].pages,
		        rows[i].seconds, rows[i].commits_per_s, rows[i].records_per_txn,
		        i + 1 == nrows ? "]" : ",");
	if (json)
		fclose(json);
	return 0;
}
