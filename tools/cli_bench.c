/*
 * cli_bench.c - `pagefs bench`: options and orchestration.
 *
 * For every page size and client count, each contender gets its own
 * directory (or raw file) on the same backing, and the workloads run in
 * order write, read-cold, read-hot, exists, list, delete. Within a
 * workload the contenders are interleaved: each takes its turn, in an
 * order rotated from one measurement to the next, so that background noise
 * on this shared machine spreads over all of them. The data written per
 * measurement is bounded (--quick: 32 MiB, else 256 MiB; at least 4 and
 * at most 4096 pages).
 *
 * Which contenders take part in which workload: raw only moves bytes
 * (write, read); pagefs-direct only reads (it reads pagefs's pages);
 * exists, list and delete compare dir, passthrough and pagefs.
 *
 * --backing-model 3fs puts the backing on pagefs-backing-model, whose
 * metadata and data requests wait a set time (docs/BENCH-3FS-MODEL.md);
 * each measurement then also reports the stand-in's requests per
 * operation, read from its counter file before and after.
 */
#include "tools/cli_bench.h"
#include "tools/cli_common.h"

#include "fs/pagefs_ioctl.h"
#include "meta/meta.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#define MIN_PAGES 4
#define MAX_PAGES 4096
#define MAX_REPEAT 9
#define DEFAULT_MODEL_US 1000

/* "1ms", "500us", "0.002s" or a bare number of ms, in us: 0 or -1. */
static int parse_latency(const char *arg, uint64_t *us)
{
	char *end;
	double v, scale = 1000.0;

	errno = 0;
	v = strtod(arg, &end);
	if (errno || end == arg || !(v >= 0)) /* NaN too */
		return -1;
	if (strcmp(end, "us") == 0)
		scale = 1.0;
	else if (strcmp(end, "s") == 0)
		scale = 1e6;
	else if (*end && strcmp(end, "ms") != 0)
		return -1;
	v *= scale;
	if (v > 1e7)
		return -1;
	*us = (uint64_t)(v + 0.5);
	return 0;
}

static void usage(FILE *out)
{
	fprintf(out,
	        "Usage: pagefs bench [--quick] [--backing DIR] [--backing-fuse] [--json FILE]\n"
	        "                    [--backing-model 3fs [--model-meta-latency T]\n"
	        "                     [--model-data-latency T] [--model-cache MODE]]\n"
	        "                    [--plot FILE.png] [--sizes LIST] [--clients LIST]\n"
	        "                    [--meta URI] [--pages N] [--pt-cache MODE]\n"
	        "                    [--pf-cache MODE]\n"
	        "                    [--repeat N] [--workloads LIST] [--direct-batch N]\n"
	        "       pagefs bench --scale N [--backing DIR] [--meta URI]\n"
	        "       pagefs bench --mounts LIST --meta postgres://... [--clients N] [--pages "
	        "N]\n"
	        "       pagefs bench --floors [--backing DIR] [--sizes LIST] [--json FILE]\n"
	        "                             [--meta URI] [--pf-cache MODE]\n"
	        "\n"
	        "Runs the same KV-cache page workloads (write, read cold and hot, exists,\n"
	        "list, delete) against raw pread/pwrite, a plain directory, libfuse's\n"
	        "passthrough_ll and pagefs, side by side in one run, and prints a table.\n"
	        "Needs root (tmpfs, FUSE mounts, dropping caches).\n"
	        "\n"
	        "Options:\n"
	        "  -q, --quick           small data volumes (finishes in about a minute)\n"
	        "  -b, --backing DIR     put every contender's files under DIR (default: a\n"
	        "                        tmpfs mounted for the run; on tmpfs cold == hot)\n"
	        "  -F, --backing-fuse    stack the backing on passthrough_ll (stands in for a\n"
	        "                        FUSE shared filesystem such as 3FS)\n"
	        "  -B, --backing-model 3fs  stack the backing on pagefs-backing-model, a\n"
	        "                        passthrough whose metadata requests (lookup, create,\n"
	        "                        open, rename, unlink, setattr, readdir) and reads and\n"
	        "                        writes first wait a set time, as on 3FS\n"
	        "  -T, --model-meta-latency T  its metadata wait (default 1ms; us, ms or s)\n"
	        "  -D, --model-data-latency T  its read and write wait (default 1ms)\n"
	        "  -X, --model-cache MODE   shared (default): this kernel keeps the model's\n"
	        "                        directories, never a page's name or attributes, as a\n"
	        "                        node sees pages other nodes write and evict; local:\n"
	        "                        3FS's FUSE client defaults (entries 30 s, misses 5 s)\n"
	        "  -j, --json FILE       write one JSON record per measurement\n"
	        "  -p, --plot FILE.png   draw throughput by page size and contender (gnuplot)\n"
	        "  -s, --sizes LIST      page sizes (default 64K,1M,16M)\n"
	        "  -c, --clients LIST    client process counts (default 1,2,8)\n"
	        "  -m, --meta URI        the pagefs contender's index (default: temporary);\n"
	        "                        postgres://...: a new schema in that database\n"
	        "  -P, --pages N         pages per measurement (default: 256 MiB of pages,\n"
	        "                        32 MiB with --quick, 4 to 4096 pages)\n"
	        "  -C, --pt-cache MODE   passthrough_ll's cache=never|auto|always (default\n"
	        "                        never: direct I/O, as pagefs page files)\n"
	        "  -K, --pf-cache MODE   the pagefs contender's --kernel-cache=never|reread|\n"
	        "                        always (default never, the mount's default)\n"
	        "  -R, --repeat N        rounds of read, exists and list; the median is\n"
	        "                        reported (default 3, 1 with --quick)\n"
	        "  -G, --direct-batch N  pagefs-direct reads pin N pages with one request\n"
	        "                        and unpin them with another, as python/pagefs\n"
	        "                        does (default 64); 1: each page opened through\n"
	        "                        the mount, its user.pagefs.offset read, as a\n"
	        "                        client without the batch channel does\n"
	        "  -W, --workloads LIST  report only these of write, read-cold, read-hot,\n"
	        "                        exists, list, delete (write and delete always run:\n"
	        "                        the others need the pages, and the run cleans up)\n"
	        "  -M, --mounts LIST     commits/s of LIST daemons (e.g. 1,2,4) writing into\n"
	        "                        one index over one backing; more than one needs\n"
	        "                        --meta postgres://... (a fresh schema per run)\n"
	        "  -S, --scale N         fill one pool with N pages and report mount time,\n"
	        "                        daemon memory per page, stat/open latency, readdir\n"
	        "                        and index size\n"
	        "  -L, --fill HOW        --scale fills with adopt (one store transaction,\n"
	        "                        as import-json; default) or commit (a reserve and\n"
	        "                        commit per page from 128 threads: group commit)\n"
	        "  -f, --floors          measure what no FUSE daemon goes below here (a\n"
	        "                        round trip, a page's copy) and print the highest\n"
	        "                        ratio to raw each pagefs contender can reach\n"
	        "  -h, --help            this text\n");
}

static int parse_list(const char *arg, const char *what, int sizes, struct bench_opts *o)
{
	char buf[256], *save = NULL, *tok;
	int n = 0;

	bench_fmt(buf, sizeof(buf), "%s", arg);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (n == BENCH_MAX_LIST)
			return cli_usage_error(BENCH_CMD, "%s: at most %d values", what,
			                       BENCH_MAX_LIST);
		if (sizes) {
			if (cli_parse_pow2_size(BENCH_CMD, what, tok, 4096, &o->sizes[n]) != 0)
				return CLI_USAGE;
			if (o->sizes[n] > (256ULL << 20))
				return cli_usage_error(BENCH_CMD, "%s: %s is above 256M", what,
				                       tok);
		} else if (cli_parse_long(tok, 1, 64, &o->clients[n]) < 0) {
			return cli_usage_error(BENCH_CMD, "%s: '%s' is not a count in 1..64", what,
			                       tok);
		}
		n++;
	}
	if (n == 0)
		return cli_usage_error(BENCH_CMD, "%s: empty list", what);
	if (sizes)
		o->nsizes = n;
	else
		o->nclients = n;
	return 0;
}

/* --workloads LIST: a mask of bench_workload bits. */
static int parse_workloads(const char *arg, struct bench_opts *o)
{
	char buf[128], *save = NULL;

	if (bench_fmt(buf, sizeof(buf), "%s", arg) < 0)
		return cli_usage_error(BENCH_CMD, "--workloads: list too long");
	o->workloads = 0;
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		int w = 0;

		while (w < W_COUNT && strcmp(t, bench_workload_names[w]) != 0)
			w++;
		if (w == W_COUNT)
			return cli_usage_error(BENCH_CMD,
			                       "--workloads: '%s' is not one of write, read-cold, "
			                       "read-hot, exists, list, delete",
			                       t);
		o->workloads |= 1U << w;
	}
	if (!o->workloads)
		return cli_usage_error(BENCH_CMD, "--workloads: empty list");
	return 0;
}

static int parse_args(int argc, char **argv, struct bench_opts *o)
{
	static const struct option longopts[] = {
		{"quick", no_argument, NULL, 'q'},
		{"backing", required_argument, NULL, 'b'},
		{"backing-fuse", no_argument, NULL, 'F'},
		{"backing-model", required_argument, NULL, 'B'},
		{"model-meta-latency", required_argument, NULL, 'T'},
		{"model-data-latency", required_argument, NULL, 'D'},
		{"model-cache", required_argument, NULL, 'X'},
		{"json", required_argument, NULL, 'j'},
		{"plot", required_argument, NULL, 'p'},
		{"sizes", required_argument, NULL, 's'},
		{"clients", required_argument, NULL, 'c'},
		{"meta", required_argument, NULL, 'm'},
		{"scale", required_argument, NULL, 'S'},
		{"fill", required_argument, NULL, 'L'},
		{"pages", required_argument, NULL, 'P'},
		{"pt-cache", required_argument, NULL, 'C'},
		{"pf-cache", required_argument, NULL, 'K'},
		{"repeat", required_argument, NULL, 'R'},
		{"mounts", required_argument, NULL, 'M'},
		{"workloads", required_argument, NULL, 'W'},
		{"floors", no_argument, NULL, 'f'},
		{"direct-batch", required_argument, NULL, 'G'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct stat st;
	int c, ret, model_opt_given = 0;

	memset(o, 0, sizeof(*o));
	o->model_meta_us = o->model_data_us = DEFAULT_MODEL_US;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "qb:FB:T:D:X:j:p:s:c:m:S:L:P:C:K:R:M:W:G:fh", longopts,
	                        NULL)) != -1) {
		switch (c) {
		case 'f':
			o->floors = 1;
			break;
		case 'q':
			o->quick = 1;
			break;
		case 'b':
			o->backing = optarg;
			break;
		case 'F':
			o->backing_fuse = 1;
			break;
		case 'B':
			if (strcmp(optarg, "3fs") != 0)
				return cli_usage_error(BENCH_CMD,
				                       "--backing-model: '%s' is not a model (3fs)",
				                       optarg);
			o->backing_model = 1;
			break;
		case 'T':
		case 'D':
			if (parse_latency(optarg,
			                  c == 'T' ? &o->model_meta_us : &o->model_data_us) < 0)
				return cli_usage_error(
					BENCH_CMD,
					"%s: '%s' is not a time such as 1ms, 500us or "
					"0.002s (at most 10s)",
					c == 'T' ? "--model-meta-latency" : "--model-data-latency",
					optarg);
			model_opt_given = 1;
			break;
		case 'X':
			if (strcmp(optarg, "shared") != 0 && strcmp(optarg, "local") != 0)
				return cli_usage_error(BENCH_CMD,
				                       "--model-cache: '%s' is not shared or local",
				                       optarg);
			o->model_local = strcmp(optarg, "local") == 0;
			model_opt_given = 1;
			break;
		case 'j':
			o->json = optarg;
			break;
		case 'p':
			o->plot = optarg;
			break;
		case 's':
			if ((ret = parse_list(optarg, "--sizes", 1, o)) != 0)
				return ret;
			break;
		case 'c':
			if ((ret = parse_list(optarg, "--clients", 0, o)) != 0)
				return ret;
			break;
		case 'm':
			o->meta_uri = optarg;
			break;
		case 'G': {
			char *end;
			long v = strtol(optarg, &end, 10);

			if (*optarg == '\0' || *end != '\0' || v < 1 || v > PAGEFS_IOC_MAX_NAMES)
				return cli_usage_error(BENCH_CMD,
				                       "--direct-batch: '%s' is not 1 to %d",
				                       optarg, PAGEFS_IOC_MAX_NAMES);
			o->direct_batch = v;
			break;
		}
		case 'L':
			if (strcmp(optarg, "adopt") == 0)
				o->fill_commit = 0;
			else if (strcmp(optarg, "commit") == 0)
				o->fill_commit = 1;
			else
				return cli_usage_error(
					BENCH_CMD, "--fill: '%s' is not adopt or commit", optarg);
			break;
		case 'S': {
			char *end;
			errno = 0;
			o->scale = strtoull(optarg, &end, 10);
			if (errno || *end || o->scale == 0 || o->scale > 100000000ULL)
				return cli_usage_error(BENCH_CMD,
				                       "--scale: '%s' is not a page count in "
				                       "1..100000000",
				                       optarg);
			break;
		}
		case 'P': {
			long v;
			if (cli_parse_long(optarg, 1, 100000, &v) < 0)
				return cli_usage_error(BENCH_CMD,
				                       "--pages: '%s' is not a count in 1..100000",
				                       optarg);
			o->pages = (uint64_t)v;
			break;
		}
		case 'R': {
			long v;
			if (cli_parse_long(optarg, 1, MAX_REPEAT, &v) < 0)
				return cli_usage_error(BENCH_CMD,
				                       "--repeat: '%s' is not a count in 1..%d",
				                       optarg, MAX_REPEAT);
			o->repeat = (int)v;
			break;
		}
		case 'C':
			if (strcmp(optarg, "never") != 0 && strcmp(optarg, "auto") != 0 &&
			    strcmp(optarg, "always") != 0)
				return cli_usage_error(
					BENCH_CMD, "--pt-cache: '%s' is not never, auto or always",
					optarg);
			o->pt_cache = optarg;
			break;
		case 'K':
			if (strcmp(optarg, "never") != 0 && strcmp(optarg, "reread") != 0 &&
			    strcmp(optarg, "always") != 0)
				return cli_usage_error(
					BENCH_CMD,
					"--pf-cache: '%s' is not never, reread or always", optarg);
			o->pf_cache = optarg;
			break;
		case 'M': {
			char buf[128], *save = NULL;
			bench_fmt(buf, sizeof(buf), "%s", optarg);
			o->nmounts = 0;
			for (char *t = strtok_r(buf, ",", &save); t;
			     t = strtok_r(NULL, ",", &save)) {
				if (o->nmounts == BENCH_MAX_LIST ||
				    cli_parse_long(t, 1, 16, &o->mounts[o->nmounts]) < 0)
					return cli_usage_error(
						BENCH_CMD,
						"--mounts: '%s' is not a list of up to %d "
						"counts in 1..16",
						optarg, BENCH_MAX_LIST);
				o->nmounts++;
			}
			if (!o->nmounts)
				return cli_usage_error(BENCH_CMD, "--mounts: empty list");
			break;
		}
		case 'W':
			if ((ret = parse_workloads(optarg, o)) != 0)
				return ret;
			break;
		case 'h':
			usage(stdout);
			return -1;
		default:
			return cli_usage_error(BENCH_CMD, "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return cli_usage_error(BENCH_CMD, "unexpected argument '%s'", argv[optind]);
	if (o->backing && (stat(o->backing, &st) < 0 || !S_ISDIR(st.st_mode)))
		return cli_usage_error(BENCH_CMD, "--backing %s is not a directory", o->backing);
	/* The result files' directories, before minutes of benchmarking. */
	const char *outs[] = {o->json, o->plot};
	for (size_t i = 0; i < 2; i++) {
		char dir[PATH_MAX];
		if (!outs[i])
			continue;
		if (!outs[i][0])
			return cli_usage_error(BENCH_CMD, "%s: an empty file name",
			                       i ? "--plot" : "--json");
		cli_dirname(outs[i], dir, sizeof(dir));
		int is_dir = stat(outs[i], &st) == 0 && S_ISDIR(st.st_mode);
		if (is_dir || access(dir, W_OK) < 0)
			return cli_usage_error(BENCH_CMD, "%s %s: cannot write there (%s)",
			                       i ? "--plot" : "--json", outs[i],
			                       is_dir ? "a directory" : strerror(errno));
	}
	if (o->scale && (o->json || o->plot || o->quick))
		return cli_usage_error(BENCH_CMD, "--scale runs alone: drop --json/--plot/--quick");
	if (o->nmounts && (o->scale || o->plot))
		return cli_usage_error(BENCH_CMD, "--mounts runs alone: drop --scale/--plot");
	if (o->floors &&
	    (o->scale || o->nmounts || o->plot || o->backing_fuse || o->backing_model || o->quick ||
	     o->nclients || o->pages || o->repeat || o->workloads || o->pt_cache))
		return cli_usage_error(BENCH_CMD, "--floors runs alone: it takes only --backing, "
		                                  "--sizes, --json, --meta and --pf-cache");
	if (model_opt_given && !o->backing_model)
		return cli_usage_error(BENCH_CMD, "--model-meta-latency, --model-data-latency and "
		                                  "--model-cache need --backing-model 3fs");
	if (o->backing_model && o->backing_fuse)
		return cli_usage_error(BENCH_CMD,
		                       "--backing-model and --backing-fuse both stack the backing: "
		                       "give one");
	if (!o->nsizes) {
		o->sizes[0] = 64ULL << 10;
		o->sizes[1] = 1ULL << 20;
		o->sizes[2] = 16ULL << 20;
		o->nsizes = 3;
	}
	if (!o->nclients) {
		o->clients[0] = 1;
		o->clients[1] = 2;
		o->clients[2] = 8;
		o->nclients = 3;
	}
	if (!o->repeat)
		o->repeat = o->quick ? 1 : 3;
	if (!o->direct_batch)
		o->direct_batch = 64;
	if (!o->workloads)
		o->workloads = (1U << W_COUNT) - 1;
	if (!o->pt_cache)
		o->pt_cache = "never";
	if (!o->pf_cache)
		o->pf_cache = "never";
	o->budget = o->quick ? (32ULL << 20) : (256ULL << 20);
	return 0;
}

static int takes_part(enum bench_workload w, enum bench_contender c)
{
	if (c == C_RAW)
		return w == W_WRITE || w == W_READ_COLD || w == W_READ_HOT;
	if (c == C_DIRECT)
		return w == W_READ_COLD || w == W_READ_HOT;
	return 1;
}

static uint64_t pages_for(const struct bench_opts *o, uint64_t size)
{
	uint64_t n = o->budget / size;

	if (o->pages)
		return o->pages;
	if (n < MIN_PAGES)
		n = MIN_PAGES;
	if (n > MAX_PAGES)
		n = MAX_PAGES;
	return n;
}

/* The store's (transactions, records) counters of the pagefs mount. */
static void store_counters(const struct bench_env *env, uint64_t *batches, uint64_t *records)
{
	char *val = NULL;
	json_t *doc;

	*batches = *records = 0;
	if (cli_getxattr(env->pf_mnt, CLI_XATTR_STATS, &val, NULL) < 0)
		return;
	doc = json_loads(val, 0, NULL);
	free(val);
	if (!doc)
		return;
	json_t *t = json_object_get(doc, "totals");
	*batches = (uint64_t)json_integer_value(json_object_get(t, "store_batches"));
	*records = (uint64_t)json_integer_value(json_object_get(t, "store_records"));
	json_decref(doc);
}

/* The model stand-in's request counters now (zeros without one). */
static void model_counts(const struct bench_env *env, uint64_t *counts)
{
	for (int k = 0; k < BENCH_MODEL_OPS; k++)
		counts[k] = env->model_counts
		                    ? __atomic_load_n(&env->model_counts[k], __ATOMIC_RELAXED)
		                    : 0;
}

/* The stand-in's requests per operation of out since counts before. */
static void model_per_op(const struct bench_env *env, const uint64_t *before,
                         struct bench_result *out)
{
	uint64_t now[BENCH_MODEL_OPS];

	if (!env->model_counts || out->ops == 0)
		return;
	model_counts(env, now);
	out->has_model = 1;
	for (int k = 0; k < BENCH_MODEL_OPS; k++)
		out->model_per_op[k] = (double)(now[k] - before[k]) / (double)out->ops;
}

/* Where contender c keeps the pages of (size, clients). */
static void target(const struct bench_env *env, enum bench_contender c, uint64_t size, long clients,
                   char *buf, size_t len)
{
	switch (c) {
	case C_RAW:
		bench_fmt(buf, len, "%s/raw/s%llu_c%ld.bin", env->backing, (unsigned long long)size,
		          clients);
		break;
	case C_DIR:
		bench_fmt(buf, len, "%s/dir/s%llu_c%ld", env->backing, (unsigned long long)size,
		          clients);
		break;
	case C_PT:
		bench_fmt(buf, len, "%s/s%llu_c%ld", env->pt_mnt, (unsigned long long)size,
		          clients);
		break;
	default:
		bench_fmt(buf, len, "%s/0/s%llu_c%ld", env->pf_mnt, (unsigned long long)size,
		          clients);
		break;
	}
}

static int prepare(const struct bench_env *env, uint64_t size, long clients)
{
	char path[PATH_MAX], val[32];
	int fd;

	for (int c = C_RAW; c <= C_PAGEFS; c++) {
		target(env, (enum bench_contender)c, size, clients, path, sizeof(path));
		if (c == C_RAW) {
			char dir[PATH_MAX];
			bench_fmt(dir, sizeof(dir), "%s/raw", env->backing);
			if (bench_mkdirs(dir) < 0 || (fd = open(path, O_RDWR | O_CREAT, 0644)) < 0)
				goto fail;
			close(fd);
			continue;
		}
		if (bench_mkdirs(path) < 0)
			goto fail;
		if (c == C_PAGEFS) {
			bench_fmt(val, sizeof(val), "%llu", (unsigned long long)size);
			if (setxattr(path, CLI_XATTR_PAGE_SIZE, val, strlen(val), 0) < 0)
				goto fail;
		}
	}
	return 0;
fail:
	fprintf(stderr, "pagefs bench: cannot prepare %s: %s\n", path, strerror(errno));
	return -1;
}

static void unprepare(const struct bench_env *env, uint64_t size, long clients)
{
	char path[PATH_MAX];

	for (int c = C_RAW; c <= C_PAGEFS; c++) {
		target(env, (enum bench_contender)c, size, clients, path, sizeof(path));
		if (c == C_RAW)
			unlink(path);
		else
			rmdir(path);
	}
}

/* 1 if workload w is reported; 0 if it runs unreported (write and delete
 * always run: the others need the pages, and the run cleans up); -1 if it
 * does not run. */
static int reported(const struct bench_opts *o, enum bench_workload w)
{
	if (o->workloads & (1U << w))
		return 1;
	return w == W_WRITE || w == W_DELETE ? 0 : -1;
}

/* Rounds of a workload: the ones that leave the pages as they found them
 * repeat (the median is reported); write and delete run once. */
static int repeats(const struct bench_opts *o, enum bench_workload w)
{
	return w == W_WRITE || w == W_DELETE ? 1 : o->repeat;
}

static int cmp_metric(const void *a, const void *b)
{
	const struct bench_result *x = a, *y = b;

	return x->ops_per_s < y->ops_per_s ? -1 : x->ops_per_s > y->ops_per_s;
}

static struct bench_result median(struct bench_result *tries, int n)
{
	qsort(tries, (size_t)n, sizeof(*tries), cmp_metric);
	return tries[n / 2];
}

/* One measurement of contender c, with its cache preparation. */
static int measure_one(const struct bench_env *env, const struct bench_opts *o,
                       enum bench_workload w, enum bench_contender c, uint64_t size, long cl,
                       struct bench_result *out)
{
	struct bench_job job;
	uint64_t b0 = 0, r0 = 0, b1, r1;

	memset(&job, 0, sizeof(job));
	job.workload = w;
	job.contender = c;
	job.direct_batch = o->direct_batch;
	job.page_size = size;
	job.clients = cl;
	job.pages = pages_for(o, size);
	target(env, c, size, cl, job.dir, sizeof(job.dir));
	if (w == W_READ_COLD)
		bench_drop_caches(env);
	/* Hot: what a previous read left in the caches; the cold reads of
	 * the others dropped ours. */
	if (w == W_READ_HOT && bench_measure(&job, out) < 0)
		goto fail;
	uint64_t m0[BENCH_MODEL_OPS];

	if (c == C_PAGEFS && w == W_WRITE)
		store_counters(env, &b0, &r0);
	model_counts(env, m0);
	if (bench_measure(&job, out) < 0)
		goto fail;
	model_per_op(env, m0, out);
	if (c == C_DIRECT && (w == W_READ_COLD || w == W_READ_HOT))
		out->direct_batch = o->direct_batch;
	if (c == C_PAGEFS && w == W_WRITE) {
		store_counters(env, &b1, &r1);
		if (b1 > b0)
			out->records_per_txn = (double)(r1 - r0) / (double)(b1 - b0);
	}
	return 0;
fail:
	if (!bench_interrupted)
		fprintf(stderr, "pagefs bench: %s with %s failed; stopping\n",
		        bench_workload_names[w], bench_contender_names[c]);
	return -1;
}

static int run_matrix(struct bench_env *env, const struct bench_opts *o, struct bench_result **out,
                      int *nout)
{
	int total = 0, done = 0, turn = 0;
	struct bench_result *rs;

	for (int w = 0; w < W_COUNT; w++)
		for (int c = 0; c < C_COUNT; c++)
			total += reported(o, (enum bench_workload)w) > 0 &&
			         takes_part((enum bench_workload)w, (enum bench_contender)c);
	total *= o->nsizes * o->nclients;
	rs = calloc((size_t)total, sizeof(*rs));
	if (!rs)
		return -1;
	*out = rs;
	printf("pagefs bench: %d measurements on %s (%s%s), passthrough_ll cache=%s, pagefs "
	       "--kernel-cache %s%s\n",
	       total, env->backing, env->backing_desc, bench_model_note(env), o->pt_cache,
	       o->pf_cache,
	       env->root ? "" : "; not root: cold reads cannot drop the kernel's caches");
	if (!env->bfuse_pid && strncmp(env->backing_desc, "tmpfs", 5) == 0)
		printf("pagefs bench: the backing is tmpfs: its data never leaves memory, so "
		       "read-cold differs from read-hot only in the FUSE and dentry caches\n");
	fflush(stdout);
	for (int si = 0; si < o->nsizes; si++) {
		for (int ci = 0; ci < o->nclients; ci++) {
			uint64_t size = o->sizes[si];
			long cl = o->clients[ci];

			if (prepare(env, size, cl) < 0)
				return -1;
			for (int w = 0; w < W_COUNT; w++) {
				enum bench_contender order[C_COUNT];
				int k = 0, rep_w = reported(o, (enum bench_workload)w);

				if (rep_w < 0)
					continue;
				for (int c = 0; c < C_COUNT; c++)
					if (takes_part((enum bench_workload)w,
					               (enum bench_contender)c))
						order[k++] = (enum bench_contender)c;
				int reps = rep_w ? repeats(o, (enum bench_workload)w) : 1;
				struct bench_result tries[C_COUNT][MAX_REPEAT];

				for (int rep = 0; rep < reps; rep++, turn++) {
					for (int r = 0; r < k; r++) {
						enum bench_contender c = order[(r + turn) % k];

						if (bench_interrupted ||
						    measure_one(env, o, (enum bench_workload)w, c,
						                size, cl, &tries[c][rep]) < 0)
							return -1;
					}
				}
				for (int r = 0; r < k && rep_w; r++) {
					rs[done] = median(tries[order[r]], reps);
					done++;
					*nout = done;
					bench_print_progress(env, &rs[done - 1], done, total);
				}
			}
			unprepare(env, size, cl);
		}
	}
	return 0;
}

int cli_bench_main(int argc, char **argv)
{
	struct bench_opts o;
	struct bench_env env;
	struct bench_result *rs = NULL;
	int n = 0, ret;
	double t0 = bench_now();

	setvbuf(stdout, NULL, _IOLBF, 0); /* progress shows up in logs too */
	ret = parse_args(argc, argv, &o);
	if (ret != 0)
		return ret < 0 ? CLI_OK : ret;
	bench_signals();
	if (bench_env_setup(&env, &o, o.scale == 0 && o.nmounts == 0 && !o.floors) < 0) {
		bench_env_cleanup(&env);
		return CLI_FAIL;
	}
	if (o.scale || o.nmounts || o.floors) {
		ret = o.scale     ? bench_scale(&env, &o)
		      : o.nmounts ? bench_multi(&env, &o)
		                  : bench_floors(&env, &o);
		bench_env_cleanup(&env);
		return ret < 0 ? CLI_FAIL : CLI_OK;
	}
	ret = run_matrix(&env, &o, &rs, &n);
	if (n > 0) {
		bench_print_table(rs, n);
		if (env.model_counts)
			printf("backing:%s\n", bench_model_note(&env));
		if (o.json && bench_write_json(o.json, &env, rs, n) < 0)
			ret = -1;
		if (o.plot && bench_write_plot(o.plot, &env, rs, n) < 0)
			ret = -1;
	}
	bench_env_cleanup(&env);
	free(rs);
	printf("pagefs bench: %s in %.0f s\n",
	       bench_interrupted ? "interrupted"
	       : ret < 0         ? "failed"
	                         : "done",
	       bench_now() - t0);
	return ret < 0 || bench_interrupted ? CLI_FAIL : CLI_OK;
}
