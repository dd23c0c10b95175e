/*
 * cli_bench_work.c - the workloads, run by forked client processes, and
 * their timing.
 *
 * One measurement forks `clients` processes; client c owns pages i with
 * i % clients == c. Every client prepares (opens the raw file, fills its
 * buffer), reports ready, and waits on a pipe; the parent starts the clock
 * when it closes that pipe and stops it when the last client exited. Each
 * operation's latency goes into a shared array, from which p50 and p99
 * come. The file-per-page contenders (dir, passthrough, pagefs) do exactly
 * what SGLang's HiCacheFile does:
 *   write   open(tmp, O_WRONLY|O_CREAT|O_TRUNC), one write, close,
 *           rename(tmp, "<key>.bin"), tmp = "<key>.bin.tmp.<pid>.<tid>.<uuid>"
 *   read    open, read the page, close
 *   exists  stat; alternately a page that exists and one that does not,
 *           in batches of 128 keys (one op = one key)
 *   list    opendir/readdir of the whole directory, 3 times per client
 *           (one op = one entry; latency = one whole listing)
 *   delete  unlink
 * raw does pwrite/pread at slot offsets in one file; pagefs-direct opens
 * the pool's data file once (user.pagefs.data_file of the pool directory)
 * and reads its pages --direct-batch at a time as python/pagefs does: one
 * LOOKUP_PIN ioctl on the pool directory pins them and answers their
 * offsets, a pread of each from the data file, one UNPIN (each page's
 * latency is its batch's time divided by its pages). With --direct-batch
 * 1 it opens each page through the mount (the open pins its slot), reads
 * user.pagefs.offset and preads the data file.
 */
#include "tools/cli_bench.h"

#include "fs/pagefs_ioctl.h"
#include "meta/hash.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#define LIST_REPS 3
#define EXISTS_BATCH 128

/* Per-client area of the shared mapping; latencies follow it. */
struct client_slot {
	uint64_t n; /* latencies recorded */
	uint64_t ops, bytes;
	int err;
	char msg[256];
};

void bench_page_name(uint64_t i, int miss, char *buf, size_t len)
{
	uint64_t k = i * 4 + (miss ? 1 : 0);

	bench_fmt(buf, len, "%016llx%016llx%016llx%016llx_Qwen-Qwen3-32B_0_2.bin",
	          (unsigned long long)meta_mix64(k),
	          (unsigned long long)meta_mix64(k + 0x1000000001ULL),
	          (unsigned long long)meta_mix64(k + 0x2000000002ULL),
	          (unsigned long long)meta_mix64(k + 0x3000000003ULL));
}

static int fail(struct client_slot *s, const char *what, const char *path)
{
	s->err = errno ? errno : EIO;
	bench_fmt(s->msg, sizeof(s->msg), "%s %s: %s", what, path, strerror(s->err));
	return -1;
}

static int write_all(int fd, const char *buf, uint64_t len, uint64_t off, int positional)
{
	uint64_t done = 0;

	while (done < len) {
		ssize_t n = positional ? pwrite(fd, buf + done, len - done, (off_t)(off + done))
		                       : write(fd, buf + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n == 0)
				errno = EIO;
			return -1;
		}
		done += (uint64_t)n;
	}
	return 0;
}

static int read_all(int fd, char *buf, uint64_t len, uint64_t off, int positional)
{
	uint64_t done = 0;

	while (done < len) {
		ssize_t n = positional ? pread(fd, buf + done, len - done, (off_t)(off + done))
		                       : read(fd, buf + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0) {
			errno = ENODATA; /* short page */
			return -1;
		}
		done += (uint64_t)n;
	}
	return 0;
}

struct client {
	const struct bench_job *job;
	struct client_slot *slot;
	uint64_t *lat, cap;
	char *buf;
	int raw_fd;
	int data_fd; /* pagefs-direct: the pool's data file */
	char data_path[PATH_MAX];
};

static int op_write(struct client *c, uint64_t i)
{
	const struct bench_job *j = c->job;
	char name[160], path[PATH_MAX], tmp[PATH_MAX + 96];
	int fd;

	if (j->contender == C_RAW)
		return write_all(c->raw_fd, c->buf, j->page_size, i * j->page_size, 1) < 0
		               ? fail(c->slot, "pwrite", j->dir)
		               : 0;
	bench_page_name(i, 0, name, sizeof(name));
	bench_fmt(path, sizeof(path), "%s/%s", j->dir, name);
	bench_fmt(tmp, sizeof(tmp), "%s.tmp.%d.%d.%016llx%016llx", path, (int)getpid(),
	          (int)gettid(), (unsigned long long)meta_mix64(bench_now_ns()),
	          (unsigned long long)meta_mix64(i ^ 0x5555));
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return fail(c->slot, "open", tmp);
	if (write_all(fd, c->buf, j->page_size, 0, 0) < 0) {
		int e = errno;
		close(fd);
		errno = e;
		return fail(c->slot, "write", tmp);
	}
	if (close(fd) < 0)
		return fail(c->slot, "close", tmp);
	if (rename(tmp, path) < 0)
		return fail(c->slot, "rename", tmp);
	return 0;
}

/* pagefs-direct: where the page's bytes are, then pread them from the
 * pool's data file, opened once as a USRBIO client keeps it open. */
static int read_direct(struct client *c, int fd, const char *path)
{
	char val[64];
	ssize_t n = fgetxattr(fd, "user.pagefs.offset", val, sizeof(val) - 1);

	if (n <= 0)
		return fail(c->slot, "getxattr user.pagefs.offset", path);
	val[n] = '\0';
	if (read_all(c->data_fd, c->buf, c->job->page_size, strtoull(val, NULL, 10), 1) < 0)
		return fail(c->slot, "pread", c->data_path);
	return 0;
}

/* pagefs-direct: opens the data file the pool directory names. */
static int open_data_file(struct client *c)
{
	ssize_t n = getxattr(c->job->dir, "user.pagefs.data_file", c->data_path,
	                     sizeof(c->data_path) - 1);

	if (n <= 0)
		return fail(c->slot, "getxattr user.pagefs.data_file", c->job->dir);
	c->data_path[n] = '\0';
	c->data_fd = open(c->data_path, O_RDONLY);
	return c->data_fd < 0 ? fail(c->slot, "open", c->data_path) : 0;
}

static int op_read(struct client *c, uint64_t i)
{
	const struct bench_job *j = c->job;
	char name[160], path[PATH_MAX];
	int fd, ret;

	if (j->contender == C_RAW)
		return read_all(c->raw_fd, c->buf, j->page_size, i * j->page_size, 1) < 0
		               ? fail(c->slot, "pread", j->dir)
		               : 0;
	bench_page_name(i, 0, name, sizeof(name));
	bench_fmt(path, sizeof(path), "%s/%s", j->dir, name);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return fail(c->slot, "open", path);
	if (j->contender == C_DIRECT)
		ret = read_direct(c, fd, path);
	else if ((ret = read_all(fd, c->buf, j->page_size, 0, 0)) < 0)
		fail(c->slot, "read", path);
	close(fd);
	return ret;
}

static int record(struct client *c, uint64_t t0)
{
	if (c->slot->n < c->cap)
		c->lat[c->slot->n++] = bench_now_ns() - t0;
	return 0;
}

static int run_list(struct client *c)
{
	const struct bench_job *j = c->job;

	for (int r = 0; r < LIST_REPS; r++) {
		uint64_t t0 = bench_now_ns(), n = 0;
		DIR *d = opendir(j->dir);
		struct dirent *de;

		if (!d)
			return fail(c->slot, "opendir", j->dir);
		while ((de = readdir(d)))
			if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0)
				n++;
		closedir(d);
		record(c, t0);
		if (n != j->pages) {
			errno = EIO;
			bench_fmt(c->slot->msg, sizeof(c->slot->msg),
			          "readdir %s: %llu entries, expected %llu", j->dir,
			          (unsigned long long)n, (unsigned long long)j->pages);
			c->slot->err = EIO;
			return -1;
		}
		c->slot->ops += n;
	}
	return 0;
}

static int run_exists(struct client *c, long idx)
{
	const struct bench_job *j = c->job;
	char name[160], path[PATH_MAX];
	struct stat st;
	uint64_t in_batch = 0;

	for (uint64_t i = (uint64_t)idx; i < j->pages; i += (uint64_t)j->clients) {
		for (int miss = 0; miss <= 1; miss++) {
			uint64_t t0 = bench_now_ns();
			int ret;

			bench_page_name(i, miss, name, sizeof(name));
			bench_fmt(path, sizeof(path), "%s/%s", j->dir, name);
			ret = stat(path, &st);
			record(c, t0);
			if (miss ? (ret == 0 || errno != ENOENT) : ret < 0) {
				if (miss && ret == 0)
					errno = EEXIST;
				return fail(c->slot, "stat", path);
			}
			c->slot->ops++;
			if (++in_batch == EXISTS_BATCH)
				in_batch = 0; /* a batch_exists() call ends here */
		}
	}
	return 0;
}

/* One LOOKUP_PIN or UNPIN request in req (PAGEFS_IOC_SIZE bytes). */
static int pin_request(int dirfd, char *req, uint16_t op, uint32_t count, uint32_t bytes)
{
	struct pagefs_ioc_hdr h = {PAGEFS_IOC_MAGIC, PAGEFS_IOC_VERSION, op, count, bytes};

	memcpy(req, &h, sizeof(h));
	return ioctl(dirfd, PAGEFS_IOC_BATCH, req);
}

/* pagefs-direct reads, direct_batch pages a request (the file's header). */
static int run_pinned(struct client *c, long idx, int dirfd, char *req)
{
	const struct bench_job *j = c->job;
	const size_t hdr = sizeof(struct pagefs_ioc_hdr);
	char name[160];

	for (uint64_t i = (uint64_t)idx; i < j->pages;) {
		uint64_t t0 = bench_now_ns(), token, dt;
		uint32_t n = 0, bytes = 0;

		for (; i < j->pages && n < (uint32_t)j->direct_batch;
		     i += (uint64_t)j->clients, n++) {
			bench_page_name(i, 0, name, sizeof(name));
			size_t len = strlen(name) + 1;

			if (hdr + bytes + len > PAGEFS_IOC_SIZE)
				break;
			memcpy(req + hdr + bytes, name, len);
			bytes += (uint32_t)len;
		}
		if (pin_request(dirfd, req, PAGEFS_IOC_LOOKUP_PIN, n, bytes) < 0)
			return fail(c->slot, "ioctl LOOKUP_PIN", j->dir);
		memcpy(&token, req + hdr + 8, sizeof(token));
		for (uint32_t k = 0; k < n; k++) {
			struct pagefs_ioc_rec rec;

			memcpy(&rec, req + hdr + 16 + k * sizeof(rec), sizeof(rec));
			if (rec.err != 0 || !(rec.flags & PAGEFS_IOC_PINNED)) {
				errno = rec.err ? -rec.err : EIO;
				return fail(c->slot, "LOOKUP_PIN of a page", j->dir);
			}
			if (read_all(c->data_fd, c->buf, j->page_size, rec.offset, 1) < 0)
				return fail(c->slot, "pread", c->data_path);
		}
		memcpy(req + hdr, &token, sizeof(token));
		if (pin_request(dirfd, req, PAGEFS_IOC_UNPIN, 0, sizeof(token)) < 0)
			return fail(c->slot, "ioctl UNPIN", j->dir);
		dt = n ? (bench_now_ns() - t0) / n : 0;
		for (uint32_t k = 0; k < n && c->slot->n < c->cap; k++)
			c->lat[c->slot->n++] = dt;
		c->slot->ops += n;
		c->slot->bytes += n * j->page_size;
	}
	return 0;
}

static int run_pages(struct client *c, long idx)
{
	const struct bench_job *j = c->job;

	for (uint64_t i = (uint64_t)idx; i < j->pages; i += (uint64_t)j->clients) {
		uint64_t t0 = bench_now_ns();
		int ret = 0;

		switch (j->workload) {
		case W_WRITE:
			ret = op_write(c, i);
			break;
		case W_READ_COLD:
		case W_READ_HOT:
			ret = op_read(c, i);
			break;
		case W_DELETE: {
			char name[160], path[PATH_MAX];
			bench_page_name(i, 0, name, sizeof(name));
			bench_fmt(path, sizeof(path), "%s/%s", j->dir, name);
			if (unlink(path) < 0)
				ret = fail(c->slot, "unlink", path);
			break;
		}
		default:
			break;
		}
		if (ret < 0)
			return -1;
		record(c, t0);
		c->slot->ops++;
		if (j->workload != W_DELETE)
			c->slot->bytes += j->page_size;
	}
	return 0;
}

static void client_main(const struct bench_job *job, long idx, struct client_slot *slot,
                        uint64_t *lat, uint64_t cap, int ready_fd, int go_fd)
{
	struct client c = {job, slot, lat, cap, NULL, -1, -1, ""};
	char b, *req = NULL;
	int ret, pinned, dirfd = -1;

	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
	if (job->workload <= W_READ_HOT) {
		if (posix_memalign((void **)&c.buf, 4096, job->page_size) != 0)
			_exit(1);
		for (uint64_t k = 0; k < job->page_size; k += 8) {
			uint64_t v = meta_mix64(k ^ (uint64_t)idx);
			memcpy(c.buf + k, &v, 8);
		}
	}
	if (job->contender == C_RAW) {
		c.raw_fd = open(job->dir, O_RDWR);
		if (c.raw_fd < 0) {
			fail(slot, "open", job->dir);
			_exit(1);
		}
	}
	if (job->contender == C_DIRECT && open_data_file(&c) < 0)
		_exit(1);
	pinned = job->contender == C_DIRECT && job->direct_batch > 1 &&
	         (job->workload == W_READ_COLD || job->workload == W_READ_HOT);
	if (pinned) {
		req = malloc(PAGEFS_IOC_SIZE);
		dirfd = open(job->dir, O_RDONLY | O_DIRECTORY);
		if (!req || dirfd < 0) {
			fail(slot, "open", job->dir);
			_exit(1);
		}
	}
	if (write(ready_fd, "r", 1) != 1)
		_exit(1);
	while (read(go_fd, &b, 1) < 0 && errno == EINTR)
		;
	if (job->workload == W_LIST)
		ret = run_list(&c);
	else if (job->workload == W_EXISTS)
		ret = run_exists(&c, idx);
	else if (pinned)
		ret = run_pinned(&c, idx, dirfd, req);
	else
		ret = run_pages(&c, idx);
	_exit(ret < 0 ? 1 : 0);
}

double bench_percentile_us(uint64_t *ns, uint64_t n, double p)
{
	uint64_t k;

	if (n == 0)
		return 0;
	k = (uint64_t)((p / 100.0) * (double)n + 0.999999);
	if (k == 0)
		k = 1;
	if (k > n)
		k = n;
	return (double)ns[k - 1] / 1000.0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

void bench_sort_ns(uint64_t *ns, uint64_t n)
{
	qsort(ns, n, sizeof(*ns), cmp_u64);
}

int bench_measure(const struct bench_job *job, struct bench_result *out)
{
	long n = job->clients;
	uint64_t per = (job->pages + (uint64_t)n - 1) / (uint64_t)n;
	uint64_t cap = job->workload == W_LIST ? LIST_REPS : 2 * per + 2;
	size_t stride = sizeof(struct client_slot) + cap * sizeof(uint64_t);
	size_t size = stride * (size_t)n;
	int ready[2] = {-1, -1}, go[2] = {-1, -1};
	pid_t pids[64];
	long started = 0;
	int ret = -1, failed = 0;
	double t0 = 0, t1;
	char *shm;

	if (n > 64)
		return -1;
	shm = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (shm == MAP_FAILED)
		return -1;
	if (pipe(ready) < 0 || pipe(go) < 0)
		goto out;
	for (; started < n; started++) {
		pid_t p = fork();
		if (p < 0)
			goto kill;
		if (p == 0) {
			struct client_slot *s =
				(struct client_slot *)(shm + stride * (size_t)started);
			close(ready[0]);
			close(go[1]);
			client_main(job, started, s, (uint64_t *)(s + 1), cap, ready[1], go[0]);
		}
		pids[started] = p;
	}
	close(ready[1]);
	ready[1] = -1;
	close(go[0]);
	go[0] = -1;
	for (long k = 0; k < n; k++) {
		char b;
		ssize_t r = read(ready[0], &b, 1);
		if (r != 1 || bench_interrupted)
			goto kill;
	}
	t0 = bench_now();
	close(go[1]);
	go[1] = -1;
	for (long k = 0; k < n; k++) {
		int status;
		while (waitpid(pids[k], &status, 0) < 0) {
			if (errno != EINTR || bench_interrupted)
				goto kill;
		}
		pids[k] = 0;
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			failed = 1;
	}
	t1 = bench_now();

	memset(out, 0, sizeof(*out));
	out->workload = job->workload;
	out->contender = job->contender;
	out->page_size = job->page_size;
	out->clients = n;
	out->seconds = t1 - t0;
	{
		uint64_t total = 0, *all;
		for (long k = 0; k < n; k++) {
			struct client_slot *s = (struct client_slot *)(shm + stride * (size_t)k);
			if (s->err) {
				fprintf(stderr, "pagefs bench: %s %s client %ld: %s\n",
				        bench_workload_names[job->workload],
				        bench_contender_names[job->contender], k, s->msg);
				failed = 1;
			}
			out->ops += s->ops;
			out->bytes += s->bytes;
			total += s->n;
		}
		all = malloc((total + 1) * sizeof(*all));
		if (!all)
			goto out;
		total = 0;
		for (long k = 0; k < n; k++) {
			struct client_slot *s = (struct client_slot *)(shm + stride * (size_t)k);
			memcpy(all + total, s + 1, s->n * sizeof(uint64_t));
			total += s->n;
		}
		bench_sort_ns(all, total);
		out->p50_us = bench_percentile_us(all, total, 50);
		out->p99_us = bench_percentile_us(all, total, 99);
		free(all);
	}
	if (out->seconds > 0) {
		out->ops_per_s = (double)out->ops / out->seconds;
		out->mib_per_s = (double)out->bytes / out->seconds / (1024.0 * 1024.0);
	}
	ret = failed ? -1 : 0;
	goto out;
kill:
	for (long k = 0; k < started; k++)
		if (pids[k] > 0)
			kill(pids[k], SIGKILL);
	for (long k = 0; k < started; k++)
		if (pids[k] > 0)
			while (waitpid(pids[k], NULL, 0) < 0 && errno == EINTR)
				;
out:
	for (int k = 0; k < 2; k++) {
		if (ready[k] >= 0)
			close(ready[k]);
		if (go[k] >= 0)
			close(go[k]);
	}
	munmap(shm, size);
	return ret;
}
