/*
 * cli_bench.h - what the `pagefs bench` files share.
 *
 *   cli_bench.c       options and orchestration (the measurement matrix)
 *   cli_bench_env.c   contenders' set-up and teardown: backing tmpfs,
 *                     passthrough_ll built at bench time, the pagefs mount
 *   cli_bench_work.c  the workloads, run by forked clients, and timing
 *   cli_bench_out.c   progress lines, the summary table, JSON, gnuplot
 *   cli_bench_scale.c --scale N: a pool of N pages, mount time, memory
 *   cli_bench_multi.c --mounts LIST: commits/s of N daemons on one index
 *   cli_bench_floor.c --floors: round trips and copies, the ratios they allow
 *   bench_backing_model.c  --backing-model 3fs: the FUSE stand-in, its own
 *                     program (pagefs-backing-model); bench_model.h
 *
 * Everything the bench mounts or creates lives under one temporary
 * directory and is removed on every exit path, Ctrl-C included.
 */
#ifndef PAGEFS_CLI_BENCH_H
#define PAGEFS_CLI_BENCH_H

#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define BENCH_CMD "bench"
#define BENCH_MAX_LIST 8
#define BENCH_MODEL_OPS 19 /* MODEL_OP_COUNT of bench_model.h */

enum bench_contender { C_RAW, C_DIR, C_PT, C_PAGEFS, C_DIRECT, C_COUNT };
enum bench_workload { W_WRITE, W_READ_COLD, W_READ_HOT, W_EXISTS, W_LIST, W_DELETE, W_COUNT };

extern const char *const bench_contender_names[C_COUNT];
extern const char *const bench_workload_names[W_COUNT];

struct bench_opts {
	int quick;
	const char *backing;    /* NULL: a tmpfs of our own */
	int backing_fuse;       /* stack the backing on passthrough_ll */
	int backing_model;      /* --backing-model 3fs: the backing is pagefs-backing-model */
	uint64_t model_meta_us; /* its metadata and data latencies */
	uint64_t model_data_us;
	int model_local; /* --model-cache local: 3FS's client cache timeouts */
	const char *json;
	const char *plot;
	uint64_t scale;  /* 0: the contender matrix */
	int fill_commit; /* --scale fills page by page (else meta_adopt) */
	uint64_t sizes[BENCH_MAX_LIST];
	int nsizes;
	long clients[BENCH_MAX_LIST];
	int nclients;
	const char *meta_uri;        /* pagefs contender's index; NULL: temporary */
	const char *pt_cache;        /* passthrough_ll's cache= for the contender */
	const char *pf_cache;        /* the pagefs contender's --kernel-cache */
	int repeat;                  /* rounds of the repeatable workloads */
	uint64_t budget;             /* bytes written per measurement */
	uint64_t pages;              /* --pages: pages per measurement (0: from budget) */
	long mounts[BENCH_MAX_LIST]; /* --mounts: daemons on one index, per run */
	int nmounts;
	unsigned workloads; /* --workloads: bit w reports workload w (0: all) */
	int floors;         /* --floors: what no FUSE daemon goes below */
	long direct_batch;  /* --direct-batch: pages pagefs-direct pins per request
	                     * (1: an open and user.pagefs.offset per page) */
};

/* Set by SIGINT/SIGTERM/SIGHUP: every loop gives up and cleans up. */
extern volatile sig_atomic_t bench_interrupted;

/* Everything the bench set up; cleanup undoes what is recorded here. */
struct bench_env {
	char self[PATH_MAX];    /* this binary, for `pagefs mount/umount` */
	char tmp[PATH_MAX];     /* our temporary directory (always removed) */
	char lower[PATH_MAX];   /* the tmpfs, or our subdirectory of --backing */
	int lower_tmpfs;        /* 1: we mounted a tmpfs at lower */
	char backing[PATH_MAX]; /* where every contender keeps its files */
	char backing_desc[128]; /* "tmpfs", "ext4 /data", "+ passthrough_ll" */
	char pt_bin[PATH_MAX];  /* passthrough_ll built for this run */
	char bfuse_mnt[PATH_MAX];
	pid_t bfuse_pid; /* passthrough_ll or the model under the backing, or 0 */
	/* --backing-model: the stand-in's request counters (bench_model.h),
	 * mapped shared with it, or NULL */
	uint64_t *model_counts;
	uint64_t model_meta_us, model_data_us;
	int model_local;
	char pt_mnt[PATH_MAX];
	pid_t pt_pid; /* passthrough contender, or 0 */
	char pf_mnt[PATH_MAX];
	int pf_mounted;
	pid_t pf_pid;      /* pagefs daemon */
	int root;          /* can drop caches */
	char pf_cache[16]; /* --kernel-cache of every pagefs mount */
	/* PostgreSQL schemas made for this run's indexes (dropped at cleanup) */
	char pg_base[PATH_MAX + 16];
	char pg_schemas[2 * BENCH_MAX_LIST + 2][64];
	int npg;
};

struct bench_result {
	enum bench_workload workload;
	uint64_t page_size;
	long clients;
	enum bench_contender contender;
	uint64_t ops;
	uint64_t bytes;
	double seconds;
	double ops_per_s, mib_per_s;
	double p50_us, p99_us;
	double records_per_txn; /* pagefs write: store records per transaction */
	long direct_batch;      /* pagefs-direct reads: pages per LOOKUP_PIN (0: not one) */
	/* --backing-model: the stand-in's requests per operation, by kind
	 * (bench_model.h); has_model 0 otherwise */
	int has_model;
	double model_per_op[BENCH_MODEL_OPS];
};

/* One measurement's job, shared by the forked clients. */
struct bench_job {
	enum bench_workload workload;
	enum bench_contender contender;
	uint64_t page_size;
	long clients;
	uint64_t pages;     /* pages 0..pages-1, page i belongs to client i % clients */
	long direct_batch;  /* pagefs-direct reads: pages per LOOKUP_PIN (1: open each) */
	char dir[PATH_MAX]; /* raw: the data file; others: the directory */
};

/* cli_bench_env.c: each returns 0 or prints why and returns -1. */
int bench_env_setup(struct bench_env *env, const struct bench_opts *o, int need_contenders);
void bench_env_cleanup(struct bench_env *env);
/* Mounts pagefs from backing dir over mnt with index uri; sets *pid. */
int bench_pagefs_mount(const struct bench_env *env, const char *backing, const char *mnt,
                       const char *uri, const char *log, pid_t *pid);
int bench_pagefs_umount(const struct bench_env *env, const char *mnt);
/* Prints the last BENCH_LOG_LINES lines of a daemon's log to stderr: the
 * bench's temporary directory, where logs live, goes at exit. */
#define BENCH_LOG_LINES 20
void bench_print_log(const char *log);
/* A fresh index for one pagefs mount (or several: --mounts), tag naming
 * it: --meta postgres://... gets a new schema in that database (dropped at
 * cleanup), --meta sqlite:PATH is used as given, no --meta gives a file
 * under env->tmp. 0 or -1 (printed). */
int bench_index_uri(struct bench_env *env, const struct bench_opts *o, const char *tag, char *out,
                    size_t len);
/* Runs argv (argv[0] a path, or a name looked up in PATH), waits; the
 * exit status, or -1. quiet: its output goes to /dev/null. */
int bench_run(char *const argv[], int quiet);
/* bench_run, its stderr to the file errlog (no shell in between). */
int bench_run_log(char *const argv[], const char *errlog);
/* snprintf that reports truncation: 0, or -1 (buf then holds a prefix). */
int bench_fmt(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Creates every directory of path. 0 or -1. */
int bench_mkdirs(const char *path);
/* sync + drop the kernel's caches (root only); 0 or -1. */
int bench_drop_caches(const struct bench_env *env);
/* Resident memory of pid in KiB, or 0. */
uint64_t bench_rss_kib(pid_t pid);
/* The same, and its anonymous and file-backed parts (RssAnon, RssFile;
 * NULL: not wanted). */
uint64_t bench_rss_parts(pid_t pid, uint64_t *anon, uint64_t *file);
/* Installs the interrupt handlers. */
void bench_signals(void);
/* CLOCK_MONOTONIC in seconds, and in ns for latencies. */
double bench_now(void);
uint64_t bench_now_ns(void);

/* cli_bench_work.c */
/* Name of page i (a SGLang-style key plus ".bin"); miss != 0: never written. */
void bench_page_name(uint64_t i, int miss, char *buf, size_t len);
/* Runs one measurement with job->clients forked clients. 0, or -1. */
int bench_measure(const struct bench_job *job, struct bench_result *out);
/* Sorts n latencies in ns, for bench_percentile_us. */
void bench_sort_ns(uint64_t *ns, uint64_t n);
/* p-th percentile (0..100) of n sorted latencies in ns, in us. */
double bench_percentile_us(uint64_t *ns, uint64_t n, double p);

/* cli_bench_out.c */
/* A measurement's line (and the model's requests per op under it). */
void bench_print_progress(const struct bench_env *env, const struct bench_result *r, int done,
                          int total);
void bench_print_table(const struct bench_result *rs, int n);
/* The backing's name in the JSON records ("3fs-model", "passthrough_ll",
 * "tmpfs", ...) and the model's latencies with them. */
int bench_write_json(const char *path, const struct bench_env *env, const struct bench_result *rs,
                     int n);
/* " on 3fs-model (meta 1000 us, data 1000 us)" under --backing-model,
 * else "": printed with every result. */
const char *bench_model_note(const struct bench_env *env);
int bench_write_plot(const char *path, const struct bench_env *env, const struct bench_result *rs,
                     int n);

/* cli_bench_scale.c */
int bench_scale(struct bench_env *env, const struct bench_opts *o);

/* cli_bench_multi.c */
int bench_multi(struct bench_env *env, const struct bench_opts *o);

/* cli_bench_floor.c */
int bench_floors(struct bench_env *env, const struct bench_opts *o);

#endif
