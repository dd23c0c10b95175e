/*
 * fault_shim.c - an LD_PRELOAD library for the fault-injection tests only
 * (tests/integration/test_fault_injection.py); never linked into pagefs.
 *
 * Makes pwrite/pwrite64/pread/pread64/fdatasync/fsync on files whose path
 * contains a pattern fail, switchable while the daemon runs.
 * PAGEFS_FAULT_CTL names a control file that the test rewrites at any
 * time; each line is
 *
 *     OP MODE PATTERN        OP: pwrite | pread | fdatasync
 *                            MODE: an errno number, or "short" (pwrite
 *                            only: it writes half, at least 1 byte)
 *
 * pread covers every read of the file: pread, pread64, and splice from it
 * (how libfuse serves a read from an open file).
 *
 * An empty or missing file injects nothing. Every injected fault appends
 * one line to PAGEFS_FAULT_CTL.hits, so the test can count them. The file
 * is re-read only when its mtime or size changes. Trade-off: a readlink of
 * /proc/self/fd per matching call, fine for tests.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define MAX_RULES 8

struct rule {
	char op[16];
	char mode[16];
	char pattern[256];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct rule rules[MAX_RULES]; /* protected by lock */
static int nrules;
static struct timespec seen_mtime;
static off_t seen_size = -1;

static void reload(const char *ctl)
{
	struct stat st;

	if (stat(ctl, &st) < 0) {
		nrules = 0;
		seen_size = -1;
		return;
	}
	if (st.st_size == seen_size && st.st_mtim.tv_sec == seen_mtime.tv_sec &&
	    st.st_mtim.tv_nsec == seen_mtime.tv_nsec)
		return;
	seen_size = st.st_size;
	seen_mtime = st.st_mtim;
	nrules = 0;
	FILE *f = fopen(ctl, "re");
	if (!f)
		return;
	while (nrules < MAX_RULES && fscanf(f, "%15s %15s %255s", rules[nrules].op,
	                                    rules[nrules].mode, rules[nrules].pattern) == 3)
		nrules++;
	fclose(f);
}

/* The rule's mode for op on fd ("" for none), copied into mode. */
static int match(const char *op, int fd, char *mode, size_t len)
{
	const char *ctl = getenv("PAGEFS_FAULT_CTL");
	char link[64], path[4096];
	ssize_t n;
	int hit = 0;

	if (!ctl)
		return 0;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, path, sizeof(path) - 1);
	if (n <= 0)
		return 0;
	path[n] = '\0';
	pthread_mutex_lock(&lock);
	reload(ctl);
	for (int i = 0; i < nrules && !hit; i++) {
		if (strcmp(rules[i].op, op) == 0 && strstr(path, rules[i].pattern)) {
			snprintf(mode, len, "%s", rules[i].mode);
			hit = 1;
		}
	}
	pthread_mutex_unlock(&lock);
	if (hit) {
		char hits[4200];
		snprintf(hits, sizeof(hits), "%s.hits", ctl);
		int h = open(hits, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (h >= 0) {
			char line[64];
			int l = snprintf(line, sizeof(line), "%s %s\n", op, mode);
			if (write(h, line, (size_t)l) < 0) {
				/* counting is best effort */
			}
			close(h);
		}
	}
	return hit;
}

typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);
typedef ssize_t (*pread_fn)(int, void *, size_t, off_t);
typedef ssize_t (*splice_fn)(int, loff_t *, int, loff_t *, size_t, unsigned int);
typedef int (*sync_fn)(int);

/* Sets errno to the rule's MODE (an errno number, else EIO); -1. */
static int fail(const char *mode)
{
	errno = atoi(mode) > 0 ? atoi(mode) : EIO;
	return -1;
}

/* 1 (errno set) when a "pread" rule fails a read of len bytes of fd. */
static int read_fails(int fd, size_t len)
{
	char mode[16];

	return len > 0 && match("pread", fd, mode, sizeof(mode)) && fail(mode);
}

static ssize_t faulty_pwrite(const char *sym, int fd, const void *buf, size_t count, off_t off)
{
	pwrite_fn real = (pwrite_fn)dlsym(RTLD_NEXT, sym);
	char mode[16];

	if (count > 0 && match("pwrite", fd, mode, sizeof(mode))) {
		if (strcmp(mode, "short") == 0)
			return real(fd, buf, count > 1 ? count / 2 : 1, off);
		return fail(mode);
	}
	return real(fd, buf, count, off);
}

static ssize_t faulty_pread(const char *sym, int fd, void *buf, size_t count, off_t off)
{
	pread_fn real = (pread_fn)dlsym(RTLD_NEXT, sym);

	return read_fails(fd, count) ? -1 : real(fd, buf, count, off);
}

static int faulty_sync(const char *sym, int fd)
{
	sync_fn real = (sync_fn)dlsym(RTLD_NEXT, sym);
	char mode[16];

	if (match("fdatasync", fd, mode, sizeof(mode)))
		return fail(mode);
	return real(fd);
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t off);
ssize_t pwrite64(int fd, const void *buf, size_t count, off_t off);
ssize_t pread(int fd, void *buf, size_t count, off_t off);
ssize_t pread64(int fd, void *buf, size_t count, off_t off);
ssize_t splice(int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len,
               unsigned int flags);
int fdatasync(int fd);
int fsync(int fd);

ssize_t pwrite(int fd, const void *buf, size_t count, off_t off)
{
	return faulty_pwrite("pwrite", fd, buf, count, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off_t off)
{
	return faulty_pwrite("pwrite64", fd, buf, count, off);
}

ssize_t pread(int fd, void *buf, size_t count, off_t off)
{
	return faulty_pread("pread", fd, buf, count, off);
}

ssize_t pread64(int fd, void *buf, size_t count, off_t off)
{
	return faulty_pread("pread64", fd, buf, count, off);
}

ssize_t splice(int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len,
               unsigned int flags)
{
	splice_fn real = (splice_fn)dlsym(RTLD_NEXT, "splice");

	return read_fails(fd_in, len) ? -1 : real(fd_in, off_in, fd_out, off_out, len, flags);
}

int fdatasync(int fd)
{
	return faulty_sync("fdatasync", fd);
}

int fsync(int fd)
{
	return faulty_sync("fsync", fd);
}
