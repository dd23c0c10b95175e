/*
 * cli_bench_out.c - what `pagefs bench` shows: a progress line per
 * measurement, the summary table with the ratios the targets are stated
 * in, the JSON records (--json) and the chart (--plot, gnuplot).
 *
 * Throughput is MiB/s for write and read, thousands of operations per
 * second for exists (stats), list (entries) and delete (unlinks).
 */
#include "tools/bench_model.h"
#include "tools/cli_bench.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *const bench_contender_names[C_COUNT] = {"raw", "dir", "passthrough", "pagefs",
                                                    "pagefs-direct"};
const char *const bench_workload_names[W_COUNT] = {"write",  "read-cold", "read-hot",
                                                   "exists", "list",      "delete"};

_Static_assert(BENCH_MODEL_OPS == MODEL_OP_COUNT, "cli_bench.h counts bench_model.h's kinds");

static const char *const model_op_names[MODEL_OP_COUNT] = MODEL_OP_NAMES;

const char *bench_model_note(const struct bench_env *env)
{
	static char note[96];

	if (!env->model_counts)
		return "";
	bench_fmt(note, sizeof(note), " on 3fs-model (meta %llu us, data %llu us, cache %s)",
	          (unsigned long long)env->model_meta_us, (unsigned long long)env->model_data_us,
	          env->model_local ? "local" : "shared");
	return note;
}

static int is_data(enum bench_workload w)
{
	return w == W_WRITE || w == W_READ_COLD || w == W_READ_HOT;
}

static double metric(const struct bench_result *r)
{
	return is_data(r->workload) ? r->mib_per_s : r->ops_per_s / 1000.0;
}

static void size_str(uint64_t b, char *buf, size_t len)
{
	if (b >= (1ULL << 20) && b % (1ULL << 20) == 0)
		bench_fmt(buf, len, "%lluM", (unsigned long long)(b >> 20));
	else if (b >= 1024 && b % 1024 == 0)
		bench_fmt(buf, len, "%lluK", (unsigned long long)(b >> 10));
	else
		bench_fmt(buf, len, "%llu", (unsigned long long)b);
}

void bench_print_progress(const struct bench_env *env, const struct bench_result *r, int done,
                          int total)
{
	char sz[32];

	size_str(r->page_size, sz, sizeof(sz));
	printf("[%3d/%3d] %-9s %4s x%-2ld %-13s %10.1f %-6s %9.0f ops/s  p50 %8.1f us  p99 %9.1f "
	       "us\n",
	       done, total, bench_workload_names[r->workload], sz, r->clients,
	       bench_contender_names[r->contender], metric(r),
	       is_data(r->workload) ? "MiB/s" : "kop/s", r->ops_per_s, r->p50_us, r->p99_us);
	if (r->records_per_txn > 0)
		printf("          group commit: %.1f records per store transaction\n",
		       r->records_per_txn);
	if (r->has_model) {
		printf("         %s requests per op:", bench_model_note(env));
		for (int k = 0; k < MODEL_OP_COUNT; k++)
			if (r->model_per_op[k] >= 0.005)
				printf(" %s %.2f", model_op_names[k], r->model_per_op[k]);
		printf("\n");
	}
	fflush(stdout);
}

static const struct bench_result *find(const struct bench_result *rs, int n,
                                       const struct bench_result *key, enum bench_contender c)
{
	for (int i = 0; i < n; i++)
		if (rs[i].workload == key->workload && rs[i].page_size == key->page_size &&
		    rs[i].clients == key->clients && rs[i].contender == c)
			return &rs[i];
	return NULL;
}

static void cell(const struct bench_result *r)
{
	if (r)
		printf(" %11.1f", metric(r));
	else
		printf(" %11s", "-");
}

static void ratio(const struct bench_result *a, const struct bench_result *b)
{
	if (a && b && metric(b) > 0)
		printf(" %7.2f", metric(a) / metric(b));
	else
		printf(" %7s", "-");
}

void bench_print_table(const struct bench_result *rs, int n)
{
	printf("\n%-9s %4s %3s", "workload", "size", "cl");
	for (int c = 0; c < C_COUNT; c++)
		printf(" %11s", bench_contender_names[c]);
	printf(" %7s %7s %7s %7s\n", "pf/pt", "pf/raw", "pfd/raw", "pf/dir");
	printf("%-9s %4s %3s", "", "", "");
	printf("  (MiB/s for write/read, kop/s otherwise)%*s", 11 * C_COUNT - 39, "");
	printf(" %7s %7s %7s %7s\n", "", "", "", "");
	for (int i = 0; i < n; i++) {
		const struct bench_result *r = &rs[i];
		const struct bench_result *row[C_COUNT];
		char sz[32];
		int first = 1;

		for (int j = 0; j < i; j++)
			if (rs[j].workload == r->workload && rs[j].page_size == r->page_size &&
			    rs[j].clients == r->clients)
				first = 0;
		if (!first)
			continue;
		for (int c = 0; c < C_COUNT; c++)
			row[c] = find(rs, n, r, (enum bench_contender)c);
		size_str(r->page_size, sz, sizeof(sz));
		printf("%-9s %4s %3ld", bench_workload_names[r->workload], sz, r->clients);
		for (int c = 0; c < C_COUNT; c++)
			cell(row[c]);
		ratio(row[C_PAGEFS], row[C_PT]);
		ratio(row[C_PAGEFS], row[C_RAW]);
		ratio(row[C_DIRECT], row[C_RAW]);
		ratio(row[C_PAGEFS], row[C_DIR]);
		printf("\n");
	}
	printf("(pf = pagefs, pt = passthrough, pfd = pagefs-direct)\n");
	fflush(stdout);
}

/* The backing's name in the records: the model, the FUSE stack, or the
 * filesystem type describe_backing found. */
static void backing_name(const struct bench_env *env, char *buf, size_t len)
{
	if (env->model_counts)
		bench_fmt(buf, len, "3fs-model");
	else if (env->bfuse_pid)
		bench_fmt(buf, len, "passthrough_ll");
	else
		bench_fmt(buf, len, "%.*s", (int)strcspn(env->backing_desc, " "),
		          env->backing_desc);
}

/* The model's fields of a record: latencies and requests per operation. */
static int model_fields(const struct bench_env *env, const struct bench_result *r, json_t *o)
{
	json_t *per = json_object();

	if (!per)
		return -1;
	for (int k = 0; k < MODEL_OP_COUNT && r->has_model; k++)
		if (r->model_per_op[k] > 0 &&
		    json_object_set_new(per, model_op_names[k], json_real(r->model_per_op[k])) <
		            0) {
			json_decref(per);
			return -1;
		}
	if (json_object_set_new(o, "model_requests_per_op", per) < 0 ||
	    json_object_set_new(o, "model_meta_latency_us",
	                        json_integer((json_int_t)env->model_meta_us)) < 0 ||
	    json_object_set_new(o, "model_data_latency_us",
	                        json_integer((json_int_t)env->model_data_us)) < 0 ||
	    json_object_set_new(o, "model_cache",
	                        json_string(env->model_local ? "local" : "shared")) < 0)
		return -1;
	return 0;
}

int bench_write_json(const char *path, const struct bench_env *env, const struct bench_result *rs,
                     int n)
{
	json_t *arr = json_array();
	char backing[64];
	int ret;

	backing_name(env, backing, sizeof(backing));

	if (!arr)
		return -1;
	for (int i = 0; i < n; i++) {
		const struct bench_result *r = &rs[i];
		json_t *o = json_pack("{s:s, s:I, s:I, s:s, s:f, s:f, s:f, s:f, s:I, s:I, s:f}",
		                      "workload", bench_workload_names[r->workload], "page_size",
		                      (json_int_t)r->page_size, "clients", (json_int_t)r->clients,
		                      "contender", bench_contender_names[r->contender], "ops_per_s",
		                      r->ops_per_s, "mib_per_s", r->mib_per_s, "p50_us", r->p50_us,
		                      "p99_us", r->p99_us, "ops", (json_int_t)r->ops, "bytes",
		                      (json_int_t)r->bytes, "seconds", r->seconds);
		if (o && r->records_per_txn > 0)
			json_object_set_new(o, "records_per_txn", json_real(r->records_per_txn));
		if (o && r->direct_batch > 0)
			json_object_set_new(o, "direct_batch", json_integer(r->direct_batch));
		if (o && (json_object_set_new(o, "backing", json_string(backing)) < 0 ||
		          (env->model_counts && model_fields(env, r, o) < 0))) {
			json_decref(o);
			o = NULL;
		}
		if (!o || json_array_append_new(arr, o) < 0) {
			json_decref(arr);
			return -1;
		}
	}
	ret = json_dump_file(arr, path, JSON_INDENT(1));
	json_decref(arr);
	if (ret < 0)
		fprintf(stderr, "pagefs bench: cannot write %s\n", path);
	return ret < 0 ? -1 : 0;
}

/* Clustered bars: one group per (workload, size) at the fewest clients,
 * one bar per contender, MiB/s on a log scale. */
int bench_write_plot(const char *path, const struct bench_env *env, const struct bench_result *rs,
                     int n)
{
	char dat[PATH_MAX], gp[PATH_MAX];
	long cl = 0;
	FILE *f;

	for (int i = 0; i < n; i++)
		if (cl == 0 || rs[i].clients < cl)
			cl = rs[i].clients;
	bench_fmt(dat, sizeof(dat), "%s/plot.dat", env->tmp);
	bench_fmt(gp, sizeof(gp), "%s/plot.gp", env->tmp);
	f = fopen(dat, "w");
	if (!f)
		return -1;
	fprintf(f, "group");
	for (int c = 0; c < C_COUNT; c++)
		fprintf(f, " %s", bench_contender_names[c]);
	fprintf(f, "\n");
	for (int i = 0; i < n; i++) {
		const struct bench_result *r = &rs[i];
		int first = 1;
		char sz[32];

		if (!is_data(r->workload) || r->clients != cl)
			continue;
		for (int j = 0; j < i; j++)
			if (rs[j].workload == r->workload && rs[j].page_size == r->page_size &&
			    rs[j].clients == r->clients)
				first = 0;
		if (!first)
			continue;
		size_str(r->page_size, sz, sizeof(sz));
		fprintf(f, "\"%s %s\"", bench_workload_names[r->workload], sz);
		for (int c = 0; c < C_COUNT; c++) {
			const struct bench_result *x = find(rs, n, r, (enum bench_contender)c);
			if (x && x->mib_per_s > 0)
				fprintf(f, " %.1f", x->mib_per_s);
			else
				fprintf(f, " -");
		}
		fprintf(f, "\n");
	}
	fclose(f);
	f = fopen(gp, "w");
	if (!f)
		return -1;
	fprintf(f,
	        "set terminal pngcairo size 1100,520 font 'sans,10'\n"
	        "set output '%s'\n"
	        "set title 'pagefs bench: throughput, %ld client%s, backing %s'\n"
	        "set datafile missing '-'\n"
	        "set style data histogram\n"
	        "set style histogram cluster gap 1\n"
	        "set style fill solid 0.8 border -1\n"
	        "set boxwidth 0.9\n"
	        "set logscale y\n"
	        "set ylabel 'MiB/s (log)'\n"
	        "set grid ytics\n"
	        "set key outside top center horizontal\n"
	        "set xtics rotate by -30\n"
	        "plot for [i=2:%d] '%s' using i:xtic(1) title columnheader(i)\n",
	        path, cl, cl == 1 ? "" : "s", env->backing_desc, C_COUNT + 1, dat);
	fclose(f);
	{
		char log[PATH_MAX];
		char *argv[] = {"gnuplot", gp, NULL};
		bench_fmt(log, sizeof(log), "%s/gnuplot.log", env->tmp);
		if (bench_run_log(argv, log) != 0) {
			fprintf(stderr,
			        "pagefs bench: gnuplot failed drawing %s (is gnuplot-nox "
			        "installed? "
			        "scripts/deps.sh)\n",
			        path);
			return -1;
		}
	}
	return 0;
}
