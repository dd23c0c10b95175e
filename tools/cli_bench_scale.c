/*
 * cli_bench_scale.c - `pagefs bench --scale N`: how pagefs behaves with
 * N pages in one pool.
 *
 * The pool (4 KiB slots, SGLang-style ~90-byte names) is filled through
 * meta/ directly into a fresh index: by meta_adopt, the one-transaction
 * path of import-json (pages of slot size), or with --fill commit by a
 * reserve and commit per page (length 0) from many threads, so that the
 * journal's group commit batches them. Then:
 *   - mount time: `pagefs mount` until the mount is usable (the whole
 *     index is loaded into memory);
 *   - daemon memory per page: VmRSS of the daemon minus that of a mount
 *     of an empty index, divided by N (right after mount, and again after
 *     the stat, open and readdir passes);
 *   - stat and open+close latency, p50/p99, of random existing pages
 *     through the fresh mount (cold kernel caches);
 *   - readdir of the whole pool;
 *   - the index size on disk (database, WAL and shared memory files).
 */
#include "tools/cli_bench.h"
#include "tools/cli_common.h"

#include "meta/meta.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define SCALE_SLOT 4096ULL
#define SCALE_THREADS 128
#define SCALE_SAMPLE 20000

struct filler {
	struct meta *m;
	uint32_t pool_id;
	uint64_t next, n; /* next page to create (shared), total */
	pthread_mutex_t lock;
	int err;
};

static void *fill_thread(void *arg)
{
	struct filler *f = arg;
	char name[160];

	for (;;) {
		struct meta_resv r;
		uint64_t i;
		int ret;

		pthread_mutex_lock(&f->lock);
		i = f->next++;
		pthread_mutex_unlock(&f->lock);
		if (i >= f->n || f->err || bench_interrupted)
			break;
		bench_page_name(i, 0, name, sizeof(name));
		ret = meta_page_reserve(f->m, f->pool_id, name, 0, &r);
		if (ret == 0)
			ret = meta_page_commit(f->m, &r, 0, XXH3_64bits("", 0));
		if (ret < 0) {
			f->err = ret;
			break;
		}
	}
	return NULL;
}

static void adopt_progress(void *arg, uint64_t done, uint64_t total)
{
	double *last = arg;

	if (bench_now() - *last >= 5 || done == total) {
		*last = bench_now();
		printf("  stored %llu of %llu pages\n", (unsigned long long)done,
		       (unsigned long long)total);
		fflush(stdout);
	}
}

/* All n pages in one meta_adopt call: names in one buffer. */
static int fill_adopt(struct meta *m, uint32_t pool_id, uint64_t n)
{
	struct meta_adopt_page *in = calloc(n, sizeof(*in));
	char *names = malloc(n * 128);
	double last = bench_now();
	int ret = -ENOMEM;

	if (in && names) {
		for (uint64_t i = 0; i < n; i++) {
			bench_page_name(i, 0, names + i * 128, 128);
			in[i].pool_id = pool_id;
			in[i].slot = i;
			in[i].name = names + i * 128;
		}
		ret = meta_adopt(m, in, n, adopt_progress, &last);
	}
	free(in);
	free(names);
	return ret;
}

static int fill(const char *uri, const char *backing, uint64_t n, int by_commit)
{
	struct meta_config cfg;
	struct meta_pool_info pool;
	struct filler f;
	pthread_t th[SCALE_THREADS];
	struct meta *m = NULL;
	char err[512];
	double t0 = bench_now(), last = t0;
	int ret, nth = 0;

	memset(&cfg, 0, sizeof(cfg));
	cfg.uri = uri;
	cfg.backing = backing;
	cfg.prefix = "hicache";
	cfg.default_slot_size = SCALE_SLOT;
	cfg.default_capacity = n * SCALE_SLOT;
	cfg.evict = META_EVICT_NONE;
	cfg.verify = META_VERIFY_NONE;
	ret = meta_open(&cfg, &m, err, sizeof(err));
	if (ret < 0) {
		fprintf(stderr, "pagefs bench: %s\n", err);
		return -1;
	}
	ret = meta_pool_create(m, 0, "kv", SCALE_SLOT, n * SCALE_SLOT, &pool);
	if (ret < 0) {
		fprintf(stderr, "pagefs bench: cannot create the pool: %s\n", strerror(-ret));
		meta_close(m);
		return -1;
	}
	if (!by_commit) {
		ret = fill_adopt(m, pool.id, n);
		printf("fill:            %llu pages through meta_adopt in %.1f s (%.0f pages/s)\n",
		       (unsigned long long)(ret == 0 ? n : 0), bench_now() - t0,
		       ret == 0 ? (double)n / (bench_now() - t0) : 0.0);
		t0 = bench_now();
		meta_close(m);
		printf("  (closing the index took %.1f s)\n", bench_now() - t0);
		if (ret < 0)
			fprintf(stderr, "pagefs bench: filling the pool failed: %s\n",
			        strerror(-ret));
		return ret < 0 || bench_interrupted ? -1 : 0;
	}
	memset(&f, 0, sizeof(f));
	f.m = m;
	f.pool_id = pool.id;
	f.n = n;
	pthread_mutex_init(&f.lock, NULL);
	for (; nth < SCALE_THREADS; nth++)
		if (pthread_create(&th[nth], NULL, fill_thread, &f) != 0)
			break;
	for (;;) {
		uint64_t done;
		usleep(200000);
		pthread_mutex_lock(&f.lock);
		done = f.next < n ? f.next : n;
		pthread_mutex_unlock(&f.lock);
		if (done >= n || f.err || bench_interrupted)
			break;
		if (bench_now() - last >= 5) {
			last = bench_now();
			printf("  filled %llu of %llu pages (%.0f/s)\n", (unsigned long long)done,
			       (unsigned long long)n, (double)done / (last - t0));
			fflush(stdout);
		}
	}
	for (int i = 0; i < nth; i++)
		pthread_join(th[i], NULL);
	{
		struct meta_stats st;
		meta_get_stats(m, &st);
		printf("fill:            %llu pages through meta/ in %.1f s (%.0f pages/s, %d "
		       "threads)%s\n",
		       (unsigned long long)st.pages, bench_now() - t0,
		       (double)st.pages / (bench_now() - t0), SCALE_THREADS,
		       bench_interrupted ? ", interrupted" : "");
	}
	{
		struct meta_stats st;
		meta_get_stats(m, &st);
		if (st.store_batches)
			printf("group commit:    %.1f records per store transaction (%llu "
			       "transactions)\n",
			       (double)st.store_records / (double)st.store_batches,
			       (unsigned long long)st.store_batches);
	}
	t0 = bench_now();
	meta_close(m);
	printf("  (closing the index took %.1f s)\n", bench_now() - t0);
	pthread_mutex_destroy(&f.lock);
	if (f.err) {
		fprintf(stderr, "pagefs bench: filling the pool failed: %s\n", strerror(-f.err));
		return -1;
	}
	return bench_interrupted ? -1 : 0;
}

/* stat (open = 0) or open+close (open = 1) of k random existing pages. */
static int sample(const char *pool, uint64_t n, uint64_t k, int open_close, uint64_t seed)
{
	uint64_t *lat = malloc(k * sizeof(*lat));
	char name[160], path[PATH_MAX];
	struct stat st;

	if (!lat)
		return -1;
	for (uint64_t j = 0; j < k; j++) {
		uint64_t i, t0;
		int ret;

		seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
		i = (seed >> 11) % n;
		bench_page_name(i, 0, name, sizeof(name));
		bench_fmt(path, sizeof(path), "%s/%s", pool, name);
		t0 = bench_now_ns();
		if (open_close) {
			int fd = open(path, O_RDONLY);
			ret = fd;
			if (fd >= 0)
				close(fd);
		} else {
			ret = stat(path, &st);
		}
		lat[j] = bench_now_ns() - t0;
		if (ret < 0) {
			fprintf(stderr, "pagefs bench: %s %s: %s\n", open_close ? "open" : "stat",
			        path, strerror(errno));
			free(lat);
			return -1;
		}
	}
	bench_sort_ns(lat, k);
	printf("%-16s p50 %.1f us, p99 %.1f us (%llu random pages, fresh mount)\n",
	       open_close ? "open+close:" : "stat:", bench_percentile_us(lat, k, 50),
	       bench_percentile_us(lat, k, 99), (unsigned long long)k);
	free(lat);
	return 0;
}

static int list_all(const char *pool, uint64_t n)
{
	double t0 = bench_now(), t;
	uint64_t count = 0;
	struct dirent *de;
	DIR *d = opendir(pool);

	if (!d)
		return -1;
	while (!bench_interrupted && (de = readdir(d)))
		if (de->d_name[0] != '.')
			count++;
	closedir(d);
	t = bench_now() - t0;
	printf("readdir:         %llu entries in %.2f s (%.0f entries/s)\n",
	       (unsigned long long)count, t, (double)count / t);
	if (count != n) {
		fprintf(stderr, "pagefs bench: readdir found %llu pages, expected %llu\n",
		        (unsigned long long)count, (unsigned long long)n);
		return -1;
	}
	return 0;
}

static uint64_t file_size(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

int bench_scale(struct bench_env *env, const struct bench_opts *o)
{
	char empty_b[PATH_MAX], b[PATH_MAX], mnt[PATH_MAX], uri[PATH_MAX + 16], db[PATH_MAX];
	char euri[PATH_MAX + 16], log[PATH_MAX], pool[PATH_MAX + 8], dir[PATH_MAX];
	char wal[PATH_MAX + 8];
	uint64_t n = o->scale, base_kib, kib, anon, file, k = n < SCALE_SAMPLE ? n : SCALE_SAMPLE;
	double t0, t;
	pid_t pid = 0;
	int ret = -1;

	bench_fmt(empty_b, sizeof(empty_b), "%s/scale-empty", env->backing);
	bench_fmt(b, sizeof(b), "%s/scale", env->backing);
	bench_fmt(mnt, sizeof(mnt), "%s/mnt-scale", env->tmp);
	bench_fmt(log, sizeof(log), "%s/pagefs-scale.log", env->tmp);
	bench_fmt(dir, sizeof(dir), "%s/index", env->tmp);
	bench_fmt(db, sizeof(db), "%s/scale.db", dir);
	bench_fmt(euri, sizeof(euri), "sqlite:%s/empty.db", dir);
	if (o->meta_uri && bench_index_uri(env, o, "scale", uri, sizeof(uri)) < 0)
		return -1;
	if (!o->meta_uri)
		bench_fmt(uri, sizeof(uri), "sqlite:%s", db);
	if (strncmp(uri, "sqlite:", 7) == 0)
		bench_fmt(db, sizeof(db), "%s", uri + 7);
	bench_fmt(pool, sizeof(pool), "%s/0/kv", mnt);
	bench_fmt(wal, sizeof(wal), "%s-wal", db);
	if (bench_mkdirs(dir) < 0 || bench_mkdirs(b) < 0 || bench_mkdirs(empty_b) < 0)
		return -1;
	printf("pagefs bench --scale %llu on %s (%s)\n", (unsigned long long)n, env->backing,
	       env->backing_desc);

	/* The baseline: a daemon with one empty pool. */
	bench_fmt(env->pf_mnt, sizeof(env->pf_mnt), "%s", mnt);
	if (bench_pagefs_mount(env, empty_b, mnt, euri, log, &pid) < 0)
		return -1;
	env->pf_mounted = 1;
	if (bench_mkdirs(pool) < 0)
		fprintf(stderr, "pagefs bench: mkdir %s: %s\n", pool, strerror(errno));
	base_kib = bench_rss_kib(pid);
	bench_pagefs_umount(env, mnt);
	env->pf_mounted = 0;
	printf("empty mount:     daemon VmRSS %llu KiB\n", (unsigned long long)base_kib);

	if (fill(uri, b, n, o->fill_commit) < 0)
		return -1;
	uint64_t pg_bytes;
	char err[512];
	if (cli_uri_is_shared(uri) && meta_pg_index_bytes(uri, &pg_bytes, err, sizeof(err)) == 0)
		printf("index size:      %.1f MiB (%.1f bytes/page; PostgreSQL tables and "
		       "indexes)\n",
		       (double)pg_bytes / 1048576.0, (double)pg_bytes / (double)n);
	else
		printf("index size:      %.1f MiB (%.1f bytes/page; WAL %.1f MiB)\n",
		       (double)(file_size(db)) / 1048576.0, (double)file_size(db) / (double)n,
		       (double)file_size(wal) / 1048576.0);

	bench_drop_caches(env);
	t0 = bench_now();
	if (bench_pagefs_mount(env, b, mnt, uri, log, &pid) < 0)
		return -1;
	env->pf_mounted = 1;
	t = bench_now() - t0;
	kib = bench_rss_parts(pid, &anon, &file);
	printf("mount time:      %.2f s (pagefs mount until usable)\n", t);
	printf("daemon memory:   VmRSS %llu KiB: %.1f bytes/page above the empty mount (anonymous "
	       "%llu KiB, file-backed %llu KiB)\n",
	       (unsigned long long)kib,
	       kib > base_kib ? (double)(kib - base_kib) * 1024.0 / (double)n : 0.0,
	       (unsigned long long)anon, (unsigned long long)file);
	fflush(stdout);
	if (sample(pool, n, k, 0, 12345) < 0 || sample(pool, n, k, 1, 67890) < 0)
		goto out;
	if (list_all(pool, n) < 0)
		goto out;
	kib = bench_rss_parts(pid, &anon, &file);
	printf("daemon memory:   VmRSS %llu KiB after the passes: %.1f bytes/page (anonymous "
	       "%llu KiB, file-backed %llu KiB)\n",
	       (unsigned long long)kib,
	       kib > base_kib ? (double)(kib - base_kib) * 1024.0 / (double)n : 0.0,
	       (unsigned long long)anon, (unsigned long long)file);
	ret = 0;
out:
	if (bench_pagefs_umount(env, mnt) < 0)
		fprintf(stderr, "pagefs bench: could not unmount %s\n", mnt);
	env->pf_mounted = 0;
	fflush(stdout);
	return ret;
}
