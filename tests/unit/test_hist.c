/*
 * test_hist.c - the lock-free histograms of GET /metrics (meta/hist.c):
 * cumulative buckets in the Prometheus text format, +Inf equal to
 * _count, nothing lost when more threads than shards observe at once.
 */
#include "meta/hist.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* The text hist_write gives for h, malloc'd. */
static char *written(const char *labels, const struct hist *h)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	cr_assert_not_null(f);
	hist_write(f, "x_seconds", labels, h);
	cr_assert_eq(fclose(f), 0);
	return buf;
}

/* The value of the sample line that starts with `sample ` in text. */
static double sample(const char *text, const char *sample)
{
	size_t n = strlen(sample);

	for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		if (strncmp(l, sample, n) == 0 && l[n] == ' ')
			return strtod(l + n + 1, NULL);
	cr_assert_fail("no sample %s in:\n%s", sample, text);
	return -1;
}

Test(hist, buckets_are_cumulative_and_inf_equals_the_count)
{
	static struct hist h = {.bounds = &hist_latency_ns};
	uint64_t values[] = {5000, 10000, 10001, 3000000, 20000000000ULL};

	for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++)
		hist_observe(&h, values[i]);
	char *t = written("op=\"read\"", &h);
	cr_expect_eq(sample(t, "x_seconds_bucket{op=\"read\",le=\"1e-05\"}"), 2, "%s", t);
	cr_expect_eq(sample(t, "x_seconds_bucket{op=\"read\",le=\"2.5e-05\"}"), 3);
	cr_expect_eq(sample(t, "x_seconds_bucket{op=\"read\",le=\"0.005\"}"), 4);
	cr_expect_eq(sample(t, "x_seconds_bucket{op=\"read\",le=\"10\"}"), 4);
	cr_expect_eq(sample(t, "x_seconds_bucket{op=\"read\",le=\"+Inf\"}"), 5);
	cr_expect_eq(sample(t, "x_seconds_count{op=\"read\"}"), 5);
	double sum = sample(t, "x_seconds_sum{op=\"read\"}");
	cr_expect(sum > 20.003 && sum < 20.0031, "sum %f", sum);
	free(t);
}

Test(hist, a_histogram_without_labels_has_no_braces_on_sum_and_count)
{
	static struct hist h = {.bounds = &hist_batch};

	hist_observe(&h, 3);
	char *t = written("", &h);
	cr_expect_eq(sample(t, "x_seconds_bucket{le=\"2\"}"), 0);
	cr_expect_eq(sample(t, "x_seconds_bucket{le=\"4\"}"), 1);
	cr_expect_eq(sample(t, "x_seconds_sum"), 3);
	cr_expect_eq(sample(t, "x_seconds_count"), 1);
	free(t);
}

#define THREADS 40 /* more than HIST_SHARDS: threads share shards */
#define EACH 20000

static struct hist shared = {.bounds = &hist_latency_ns};

static void *observer(void *arg)
{
	uintptr_t k = (uintptr_t)arg;

	for (int i = 0; i < EACH; i++)
		hist_observe(&shared, (k * 7919 + (uint64_t)i) % 50000000);
	return NULL;
}

Test(hist, observations_from_more_threads_than_shards_are_all_counted)
{
	pthread_t t[THREADS];

	for (uintptr_t i = 0; i < THREADS; i++)
		cr_assert_eq(pthread_create(&t[i], NULL, observer, (void *)i), 0);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	char *text = written("", &shared);
	cr_expect_eq(sample(text, "x_seconds_count"), THREADS * EACH);
	cr_expect_eq(sample(text, "x_seconds_bucket{le=\"+Inf\"}"), THREADS * EACH);
	free(text);
}

Test(hist, label_values_are_escaped)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	hist_label(f, "a\"b\\c\nd");
	fclose(f);
	cr_expect_str_eq(buf, "a\\\"b\\\\c\\nd");
	free(buf);
}
