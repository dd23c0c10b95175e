/*
 * cli_bench_env.c - the contenders' world: the backing directory (a tmpfs
 * of our own by default), libfuse's passthrough_ll example built at bench
 * time from the copy Debian ships, its mounts (the passthrough contender,
 * and with --backing-fuse one under the backing itself), and the pagefs
 * mount (this binary's `mount`/`umount` commands).
 *
 * passthrough_ll runs in the foreground as our child, in its own process
 * group (Ctrl-C reaches the bench, not it). The passthrough contender
 * uses -o cache=never by default (--pt-cache changes it): direct I/O, as
 * pagefs serves page files, and by far its best cold reads here (with
 * cache=always every read goes through 128 KiB readahead requests: about
 * 150 MiB/s against 1 GiB/s). Under --backing-fuse the backing itself is
 * a cache=never passthrough_ll, like a remote filesystem whose data and
 * metadata this kernel cannot keep. Under --backing-model 3fs it is
 * pagefs-backing-model instead (tools/bench_backing_model.c, built beside
 * this binary), whose request counters the bench maps to report requests
 * per page.
 *
 * Teardown undoes exactly what was recorded in struct bench_env, deepest
 * mount first, and removes files without crossing mount points.
 */
#include "meta/meta.h"
#include "tools/bench_model.h"
#include "tools/cli_bench.h"
#include "tools/cli_common.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PT_SOURCE "/usr/share/doc/libfuse3-dev/examples/passthrough_ll.c"
#define MOUNT_WAIT_S 20.0

volatile sig_atomic_t bench_interrupted;

static void on_signal(int sig)
{
	(void)sig;
	bench_interrupted = 1;
}

void bench_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal; /* no SA_RESTART: waits return EINTR */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
}

int bench_fmt(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, len, fmt, ap);
	va_end(ap);
	return n < 0 || (size_t)n >= len ? -1 : 0;
}

uint64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

double bench_now(void)
{
	return (double)bench_now_ns() / 1e9;
}

int bench_mkdirs(const char *path)
{
	char buf[PATH_MAX];

	bench_fmt(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) < 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	if (mkdir(buf, 0755) < 0 && errno != EEXIST)
		return -1;
	return 0;
}

/* bench_run and bench_run_log: stdout (if out) and stderr (if err) go to
 * those files; argv[0] is looked up in PATH unless it is a path. */
static int run(char *const argv[], const char *out, const char *err)
{
	int status;
	pid_t pid = fork();

	if (pid < 0)
		return -1;
	if (pid == 0) {
		signal(SIGINT, SIG_IGN); /* the bench cleans up after us */
		const char *to[3] = {NULL, out, err};
		for (int i = 1; i <= 2; i++) {
			int fd = to[i] ? open(to[i], O_WRONLY | O_CREAT | O_TRUNC, 0644) : -1;
			if (fd >= 0) {
				dup2(fd, i);
				close(fd);
			}
		}
		execvp(argv[0], argv);
		fprintf(stderr, "pagefs bench: cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int bench_run(char *const argv[], int quiet)
{
	return run(argv, quiet ? "/dev/null" : NULL, quiet ? "/dev/null" : NULL);
}

int bench_run_log(char *const argv[], const char *errlog)
{
	return run(argv, NULL, errlog);
}

uint64_t bench_rss_kib(pid_t pid)
{
	return bench_rss_parts(pid, NULL, NULL);
}

uint64_t bench_rss_parts(pid_t pid, uint64_t *anon, uint64_t *file)
{
	char path[64], line[256];
	unsigned long long kib = 0, v;
	FILE *f;

	if (anon)
		*anon = 0;
	if (file)
		*file = 0;
	bench_fmt(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "VmRSS: %llu", &v) == 1)
			kib = v;
		else if (anon && sscanf(line, "RssAnon: %llu", &v) == 1)
			*anon = v;
		else if (file && sscanf(line, "RssFile: %llu", &v) == 1)
			*file = v;
	}
	fclose(f);
	return kib;
}

int bench_drop_caches(const struct bench_env *env)
{
	int fd;

	sync();
	if (!env->root)
		return -1;
	fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
	if (fd < 0)
		return -1;
	if (write(fd, "3", 1) != 1) {
		close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

static int is_mounted(const char *path)
{
	char parent[PATH_MAX];
	struct stat a, b;

	bench_fmt(parent, sizeof(parent), "%s/..", path);
	if (stat(path, &a) < 0 || stat(parent, &b) < 0)
		return 0;
	return a.st_dev != b.st_dev;
}

/* Waits until a FUSE daemon child mounted mnt; -1 if it died or hung. */
static int wait_mounted(pid_t pid, const char *mnt)
{
	double end = bench_now() + MOUNT_WAIT_S;
	int status;

	while (bench_now() < end && !bench_interrupted) {
		if (is_mounted(mnt))
			return 0;
		if (waitpid(pid, &status, WNOHANG) == pid)
			return -1;
		usleep(10000);
	}
	return -1;
}

static int build_passthrough(struct bench_env *env)
{
	char log[PATH_MAX];

	if (access(PT_SOURCE, R_OK) < 0) {
		fprintf(stderr,
		        "pagefs bench: %s is missing: install libfuse3-dev (scripts/deps.sh)\n",
		        PT_SOURCE);
		return -1;
	}
	bench_fmt(env->pt_bin, sizeof(env->pt_bin), "%s/passthrough_ll", env->tmp);
	bench_fmt(log, sizeof(log), "%s/cc.log", env->tmp);
	/* The paths reach the shell as $1 and $2, never as script text. */
	char *argv[] = {"/bin/sh",
	                "-c",
	                "exec cc -O2 -w -o \"$1\" \"$2\" $(pkg-config --cflags --libs fuse3)",
	                "sh",
	                env->pt_bin,
	                PT_SOURCE,
	                NULL};
	if (bench_run_log(argv, log) != 0) {
		fprintf(stderr, "pagefs bench: building passthrough_ll failed (see %s/cc.log)\n",
		        env->tmp);
		return -1;
	}
	return 0;
}

/* Starts the FUSE daemon argv (foreground, mounting mnt) as our child in
 * its own process group, its stderr appended to log; *pid its process. */
static int spawn_fuse(char *const argv[], const char *mnt, const char *log, pid_t *pid)
{
	pid_t p = fork();

	if (p < 0)
		return -1;
	if (p == 0) {
		int fd = open("/dev/null", O_RDWR);
		setpgid(0, 0);
		if (fd >= 0) {
			dup2(fd, 0);
			dup2(fd, 1);
		}
		fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd >= 0)
			dup2(fd, 2);
		execv(argv[0], argv);
		_exit(127);
	}
	*pid = p;
	if (wait_mounted(p, mnt) < 0) {
		fprintf(stderr, "pagefs bench: %s did not mount %s (see %s)\n", argv[0], mnt, log);
		bench_print_log(log);
		kill(p, SIGKILL);
		waitpid(p, NULL, 0);
		*pid = 0;
		return -1;
	}
	return 0;
}

/* Starts passthrough_ll serving src at mnt; *pid its process. */
static int mount_passthrough(const struct bench_env *env, const char *src, const char *mnt,
                             const char *cache, pid_t *pid)
{
	char opts[PATH_MAX + 64], log[PATH_MAX];
	char *argv[] = {(char *)env->pt_bin, "-f", "-o", opts, (char *)mnt, NULL};

	if (bench_mkdirs(src) < 0 || bench_mkdirs(mnt) < 0)
		return -1;
	bench_fmt(opts, sizeof(opts), "source=%s,cache=%s", src, cache);
	bench_fmt(log, sizeof(log), "%s/passthrough.log", env->tmp);
	return spawn_fuse(argv, mnt, log, pid);
}

/* Starts pagefs-backing-model (beside this binary) serving src at mnt,
 * its request counters mapped at env->model_counts. */
static int mount_model(struct bench_env *env, const char *src, const char *mnt)
{
	char bin[PATH_MAX], counters[PATH_MAX], log[PATH_MAX], meta[32], data[32];
	/* Directories are kept as 3FS's client keeps them (30 s); files and
	 * missing names too with --model-cache local (30 s, 5 s), else never. */
	const char *ft = env->model_local ? "30" : "0", *nt = env->model_local ? "5" : "0";
	char *argv[] = {bin,        "--meta-latency-us",  meta,        "--data-latency-us",
	                data,       "--dir-timeout",      "30",        "--file-timeout",
	                (char *)ft, "--negative-timeout", (char *)nt,  "--counters",
	                counters,   (char *)src,          (char *)mnt, NULL};
	size_t len = BENCH_MODEL_OPS * sizeof(uint64_t);
	void *p;
	int fd;

	cli_dirname(env->self, bin, sizeof(bin));
	if (bench_fmt(bin + strlen(bin), sizeof(bin) - strlen(bin), "/%s", MODEL_BIN) < 0 ||
	    access(bin, X_OK) < 0) {
		fprintf(stderr,
		        "pagefs bench: %s is missing: it is built with pagefs (cmake --build) "
		        "and installed beside it\n",
		        bin);
		return -1;
	}
	bench_fmt(meta, sizeof(meta), "%llu", (unsigned long long)env->model_meta_us);
	bench_fmt(data, sizeof(data), "%llu", (unsigned long long)env->model_data_us);
	bench_fmt(counters, sizeof(counters), "%s/model.counters", env->tmp);
	bench_fmt(log, sizeof(log), "%s/model.log", env->tmp);
	fd = open(counters, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0 || ftruncate(fd, (off_t)len) < 0) {
		fprintf(stderr, "pagefs bench: cannot make %s: %s\n", counters, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return -1;
	env->model_counts = p;
	if (bench_mkdirs(src) < 0 || bench_mkdirs(mnt) < 0)
		return -1;
	return spawn_fuse(argv, mnt, log, &env->bfuse_pid);
}

static void umount_passthrough(const char *mnt, pid_t *pid)
{
	if (!*pid)
		return;
	if (umount2(mnt, 0) < 0 && umount2(mnt, MNT_DETACH) < 0)
		kill(*pid, SIGTERM);
	while (waitpid(*pid, NULL, 0) < 0 && errno == EINTR)
		;
	*pid = 0;
}

void bench_print_log(const char *log)
{
	char lines[BENCH_LOG_LINES][512];
	int n = 0;
	FILE *f = fopen(log, "r");

	if (!f)
		return;
	while (fgets(lines[n % BENCH_LOG_LINES], sizeof(lines[0]), f))
		n++;
	fclose(f);
	if (n > 0)
		fprintf(stderr,
		        "pagefs bench: the end of the daemon's log (%s, removed at exit):\n", log);
	for (int i = n > BENCH_LOG_LINES ? n - BENCH_LOG_LINES : 0; i < n; i++)
		fprintf(stderr, "  | %s", lines[i % BENCH_LOG_LINES]);
}

int bench_pagefs_mount(const struct bench_env *env, const char *backing, const char *mnt,
                       const char *uri, const char *log, pid_t *pid)
{
	char meta[PATH_MAX + 16];
	char *argv[] = {(char *)env->self,
	                "mount",
	                (char *)backing,
	                (char *)mnt,
	                "--meta",
	                meta,
	                "--log-file",
	                (char *)log,
	                "--verify",
	                "first",
	                "--kernel-cache",
	                env->pf_cache[0] ? (char *)env->pf_cache : "never",
	                NULL};

	bench_fmt(meta, sizeof(meta), "%s", uri);
	if (bench_mkdirs(backing) < 0 || bench_mkdirs(mnt) < 0)
		return -1;
	if (bench_run(argv, 0) != 0) {
		fprintf(stderr, "pagefs bench: pagefs mount %s failed\n", mnt);
		bench_print_log(log);
		return -1;
	}
	if (cli_mount_pid(mnt, pid) < 0)
		*pid = 0;
	return 0;
}

int bench_pagefs_umount(const struct bench_env *env, const char *mnt)
{
	char *argv[] = {(char *)env->self, "umount", (char *)mnt, NULL};

	if (bench_run(argv, 1) == 0)
		return 0;
	if (umount2(mnt, MNT_DETACH) < 0)
		return -1;
	return 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0;
}

/* Removes dir and everything in it, never crossing into a mount. */
static void rm_tree(const char *dir)
{
	nftw(dir, rm_entry, 32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

static void describe_backing(struct bench_env *env, const char *path)
{
	struct statfs sf;
	const char *type = "unknown";

	if (statfs(path, &sf) == 0) {
		switch ((unsigned long)sf.f_type) {
		case 0x01021994UL:
			type = "tmpfs";
			break;
		case 0xEF53UL:
			type = "ext4";
			break;
		case 0x58465342UL:
			type = "xfs";
			break;
		case 0x9123683EUL:
			type = "btrfs";
			break;
		case 0x794c7630UL:
			type = "overlayfs";
			break;
		case 0x65735546UL:
			type = "fuse";
			break;
		default:
			break;
		}
	}
	bench_fmt(env->backing_desc, sizeof(env->backing_desc), "%s%s", type,
	          !env->bfuse_pid     ? ""
	          : env->model_counts ? " under the 3fs-model stand-in"
	                              : " under passthrough_ll");
}

int bench_env_setup(struct bench_env *env, const struct bench_opts *o, int need_contenders)
{
	ssize_t n;

	memset(env, 0, sizeof(*env));
	env->root = geteuid() == 0;
	bench_fmt(env->pf_cache, sizeof(env->pf_cache), "%s", o->pf_cache ? o->pf_cache : "never");
	n = readlink("/proc/self/exe", env->self, sizeof(env->self) - 1);
	if (n <= 0)
		return -1;
	env->self[n] = '\0';
	const char *tmpdir = getenv("TMPDIR");
	if (!tmpdir || !tmpdir[0])
		tmpdir = "/tmp";
	bench_fmt(env->tmp, sizeof(env->tmp), "%s/pagefs-bench.XXXXXX", tmpdir);
	if (!mkdtemp(env->tmp)) {
		fprintf(stderr,
		        "pagefs bench: cannot create a temporary directory in %s: %s (it goes "
		        "under $TMPDIR, else /tmp)\n",
		        tmpdir, strerror(errno));
		env->tmp[0] = '\0';
		return -1;
	}
	if (o->backing) {
		bench_fmt(env->lower, sizeof(env->lower), "%s/pagefs-bench.XXXXXX", o->backing);
		if (!mkdtemp(env->lower)) {
			fprintf(stderr,
			        "pagefs bench: cannot create a directory in --backing %s: %s\n",
			        o->backing, strerror(errno));
			env->lower[0] = '\0';
			return -1;
		}
	} else {
		bench_fmt(env->lower, sizeof(env->lower), "%s/tmpfs", env->tmp);
		if (mkdir(env->lower, 0755) < 0 ||
		    mount("pagefs-bench", env->lower, "tmpfs", 0, "size=75%") < 0) {
			fprintf(stderr,
			        "pagefs bench: cannot mount a tmpfs at %s: %s: run as root, or "
			        "give --backing DIR\n",
			        env->lower, strerror(errno));
			return -1;
		}
		env->lower_tmpfs = 1;
	}
	bench_fmt(env->backing, sizeof(env->backing), "%s", env->lower);
	if (need_contenders || o->backing_fuse) {
		if (build_passthrough(env) < 0)
			return -1;
	}
	if (o->backing_fuse || o->backing_model) {
		char src[PATH_MAX];

		bench_fmt(src, sizeof(src), "%s/lower", env->lower);
		bench_fmt(env->bfuse_mnt, sizeof(env->bfuse_mnt), "%s/bfuse", env->tmp);
		env->model_meta_us = o->model_meta_us;
		env->model_data_us = o->model_data_us;
		env->model_local = o->model_local;
		if (o->backing_model ? mount_model(env, src, env->bfuse_mnt) < 0
		                     : mount_passthrough(env, src, env->bfuse_mnt, "never",
		                                         &env->bfuse_pid) < 0)
			return -1;
		bench_fmt(env->backing, sizeof(env->backing), "%s", env->bfuse_mnt);
	}
	describe_backing(env, env->lower);
	if (!need_contenders)
		return 0;

	char src[PATH_MAX], idx[PATH_MAX + 16], log[PATH_MAX], pfb[PATH_MAX];

	bench_fmt(src, sizeof(src), "%s/pt", env->backing);
	bench_fmt(env->pt_mnt, sizeof(env->pt_mnt), "%s/mnt-passthrough", env->tmp);
	if (mount_passthrough(env, src, env->pt_mnt, o->pt_cache, &env->pt_pid) < 0)
		return -1;
	bench_fmt(pfb, sizeof(pfb), "%s/pagefs", env->backing);
	bench_fmt(env->pf_mnt, sizeof(env->pf_mnt), "%s/mnt-pagefs", env->tmp);
	bench_fmt(log, sizeof(log), "%s/pagefs.log", env->tmp);
	if (bench_index_uri(env, o, "matrix", idx, sizeof(idx)) < 0)
		return -1;
	bench_fmt(log, sizeof(log), "%s/pagefs.log", env->tmp);
	if (bench_pagefs_mount(env, pfb, env->pf_mnt, idx, log, &env->pf_pid) < 0)
		return -1;
	env->pf_mounted = 1;
	return 0;
}

int bench_index_uri(struct bench_env *env, const struct bench_opts *o, const char *tag, char *out,
                    size_t len)
{
	char dir[PATH_MAX], err[1024];

	if (o->meta_uri && cli_uri_is_shared(o->meta_uri)) {
		if (env->npg == (int)(sizeof(env->pg_schemas) / sizeof(env->pg_schemas[0])))
			return -1;
		char *schema = env->pg_schemas[env->npg];
		bench_fmt(schema, sizeof(env->pg_schemas[0]), "pagefs_bench_%d_%s", (int)getpid(),
		          tag);
		bench_fmt(env->pg_base, sizeof(env->pg_base), "%s", o->meta_uri);
		if (meta_pg_schema(o->meta_uri, schema, 1, out, len, err, sizeof(err)) < 0) {
			fprintf(stderr, "pagefs bench: %s\n", err);
			return -1;
		}
		env->npg++;
		return 0;
	}
	if (o->meta_uri)
		return bench_fmt(out, len, "%s", o->meta_uri);
	bench_fmt(dir, sizeof(dir), "%s/index", env->tmp);
	if (bench_mkdirs(dir) < 0)
		return -1;
	return bench_fmt(out, len, "sqlite:%s/pagefs-%s.db", dir, tag);
}

void bench_env_cleanup(struct bench_env *env)
{
	if (env->pf_mounted) {
		if (bench_pagefs_umount(env, env->pf_mnt) < 0)
			fprintf(stderr, "pagefs bench: could not unmount %s\n", env->pf_mnt);
		env->pf_mounted = 0;
	}
	umount_passthrough(env->pt_mnt, &env->pt_pid);
	umount_passthrough(env->bfuse_mnt, &env->bfuse_pid);
	if (env->model_counts) {
		munmap(env->model_counts, BENCH_MODEL_OPS * sizeof(uint64_t));
		env->model_counts = NULL;
	}
	if (env->lower_tmpfs) {
		if (umount2(env->lower, 0) < 0 && umount2(env->lower, MNT_DETACH) < 0)
			fprintf(stderr, "pagefs bench: could not unmount %s: %s\n", env->lower,
			        strerror(errno));
		env->lower_tmpfs = 0;
	} else if (env->lower[0]) {
		rm_tree(env->lower);
	}
	env->lower[0] = '\0';
	if (env->tmp[0])
		rm_tree(env->tmp);
	env->tmp[0] = '\0';
	for (int i = 0; i < env->npg; i++) {
		char err[1024];
		if (meta_pg_schema(env->pg_base, env->pg_schemas[i], 0, NULL, 0, err, sizeof(err)) <
		    0)
			fprintf(stderr, "pagefs bench: %s\n", err);
	}
	env->npg = 0;
}
