/*
 * hist.c - lock-free histograms for GET /metrics (hist.h): sharded per
 * thread, summed at scrape.
 */
#include "meta/hist.h"

#include <time.h>

const struct hist_bounds hist_latency_ns = {
	.n = 19,
	.le = {10000, 25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000,
               25000000, 50000000, 100000000, 250000000, 500000000, 1000000000, 2500000000,
               5000000000, 10000000000},
	.scale = 1e-9,
};

const struct hist_bounds hist_batch = {
	.n = 13,
	.le = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096},
	.scale = 1,
};

static _Atomic unsigned next_shard;
static _Thread_local int my_shard = -1;

static int shard_of_thread(void)
{
	if (my_shard < 0)
		my_shard = (int)(atomic_fetch_add_explicit(&next_shard, 1, memory_order_relaxed) %
		                 HIST_SHARDS);
	return my_shard;
}

uint64_t hist_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

void hist_observe(struct hist *h, uint64_t v)
{
	struct hist_shard *s = &h->shard[shard_of_thread()];
	const struct hist_bounds *b = h->bounds;
	int i = 0;

	while (i < b->n && v > b->le[i])
		i++;
	atomic_fetch_add_explicit(&s->bucket[i], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->sum, v, memory_order_relaxed);
}

void hist_label(FILE *out, const char *s)
{
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fputc('\\', out);
		if (*s == '\n')
			fputs("\\n", out);
		else
			fputc(*s, out);
	}
}

void hist_family(FILE *out, const char *name, const char *type, const char *help)
{
	fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void hist_write(FILE *out, const char *name, const char *labels, const struct hist *h)
{
	const struct hist_bounds *b = h->bounds;
	uint64_t bucket[HIST_BUCKETS + 1] = {0}, sum = 0, count = 0, cum = 0;
	const char *sep = labels[0] ? "," : "";

	for (int s = 0; s < HIST_SHARDS; s++) {
		const struct hist_shard *sh = &h->shard[s];
		for (int i = 0; i <= b->n; i++)
			bucket[i] += atomic_load_explicit(&sh->bucket[i], memory_order_relaxed);
		sum += atomic_load_explicit(&sh->sum, memory_order_relaxed);
	}
	for (int i = 0; i <= b->n; i++) {
		cum += bucket[i];
		if (i < b->n)
			fprintf(out, "%s_bucket{%s%sle=\"%.9g\"} %llu\n", name, labels, sep,
			        (double)b->le[i] * b->scale, (unsigned long long)cum);
	}
	/* the count is the buckets' total, so +Inf and _count always agree */
	count = cum;
	fprintf(out, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep,
	        (unsigned long long)count);
	fprintf(out, "%s_sum%s%s%s %.9g\n", name, labels[0] ? "{" : "", labels,
	        labels[0] ? "}" : "", (double)sum * b->scale);
	fprintf(out, "%s_count%s%s%s %llu\n", name, labels[0] ? "{" : "", labels,
	        labels[0] ? "}" : "", (unsigned long long)count);
}
