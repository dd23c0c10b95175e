/*
 * cli_status.c - `pagefs status [MOUNTPOINT]`.
 *
 * Reads the daemon's counters from the mount root (user.pagefs.stats, a
 * JSON object) and prints one row per pool plus totals. Bandwidth is the
 * byte counters averaged over the daemon's uptime, or with --interval the
 * rate between two samples taken that many seconds apart. Without a
 * MOUNTPOINT every pagefs mount in /proc/mounts is shown.
 */
#include "tools/cli_common.h"

#include "meta/meta.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CMD "status"

struct cli_status_config {
	int json;
	const char *url; /* --url: a daemon's HTTP listener instead of a mount */
	double interval; /* seconds between samples; 0: average over uptime */
	const char *mountpoint;
};

/* One mount being reported: its two samples. */
struct cli_status_mount {
	char path[PATH_MAX];
	char *raw;      /* first sample as the daemon wrote it */
	json_t *first;  /* parsed first sample, NULL on error */
	json_t *second; /* parsed second sample with --interval */
	int failed;
};

static const struct option status_longopts[] = {
	{"json", no_argument, NULL, 'j'},
	{"interval", required_argument, NULL, 'i'},
	{"url", required_argument, NULL, 'u'},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

static void cli_status_usage(FILE *out)
{
	fprintf(out,
	        "Usage: pagefs status [MOUNTPOINT] [OPTIONS]\n"
	        "\n"
	        "Shows per pool: pages, bytes, capacity, slot size, hits, misses, evictions,\n"
	        "checksum failures and read/write bandwidth, then totals and how the index\n"
	        "store groups its commits. Without MOUNTPOINT: every pagefs mount.\n"
	        "\n"
	        "Options:\n"
	        "  -i, --interval SECS  bandwidth over SECS between two samples (default:\n"
	        "                       averaged over the daemon's uptime)\n"
	        "  -j, --json           print the daemon's counters as JSON (an array of\n"
	        "                       objects when no MOUNTPOINT is named)\n"
	        "  -u, --url [http://]ADDR:PORT\n"
	        "                       the pools of a daemon with no mount here (serve-meta,\n"
	        "                       or mount --http/--metrics), from its GET /metrics\n"
	        "  -h, --help           show this help\n");
}

static uint64_t cli_json_u64(const json_t *obj, const char *key)
{
	const json_t *v = json_object_get(obj, key);

	if (json_is_integer(v))
		return json_integer_value(v) < 0 ? 0 : (uint64_t)json_integer_value(v);
	if (json_is_real(v))
		return json_real_value(v) < 0 ? 0 : (uint64_t)json_real_value(v);
	return 0;
}

static double cli_json_double(const json_t *obj, const char *key)
{
	const json_t *v = json_object_get(obj, key);

	return json_is_number(v) ? json_number_value(v) : 0.0;
}

static const char *cli_json_str(const json_t *obj, const char *key)
{
	const char *s = json_string_value(json_object_get(obj, key));

	return s ? s : "?";
}

/* Reads and parses the stats of one mount; prints why on failure. */
static int cli_status_sample(const char *path, char **raw, json_t **out)
{
	json_error_t jerr;
	char *buf;
	int ret = cli_getxattr(path, CLI_XATTR_STATS, &buf, NULL);

	if (ret == -ENODATA || ret == -ENOTSUP)
		return cli_fail(CMD,
		                "%s is not a pagefs mount (no %s attribute): name a pagefs mount "
		                "point, or run 'pagefs status' to list all of them",
		                path, CLI_XATTR_STATS);
	if (ret == -ENOTCONN)
		return cli_fail(
			CMD,
			"the daemon of %s is gone: remove the dead mount with 'pagefs umount "
			"%s' and mount again",
			path, path);
	if (ret < 0)
		return cli_fail(CMD, "cannot read %s of %s: %s", CLI_XATTR_STATS, path,
		                strerror(-ret));
	*out = json_loads(buf, 0, &jerr);
	if (!*out || !json_is_object(*out)) {
		json_decref(*out);
		*out = NULL;
		free(buf);
		return cli_fail(CMD, "%s: the daemon's %s is not a JSON object (%s at line %d)",
		                path, CLI_XATTR_STATS, jerr.text, jerr.line);
	}
	if (raw)
		*raw = buf;
	else
		free(buf);
	return 0;
}

/* Finds the pool (rank, namespace) of `pool` in another sample. */
static const json_t *cli_status_match(const json_t *sample, const json_t *pool)
{
	const json_t *pools = json_object_get(sample, "pools"), *p;
	size_t i;

	json_array_foreach(pools, i, p)
	{
		if (cli_json_u64(p, "rank") == cli_json_u64(pool, "rank") &&
		    strcmp(cli_json_str(p, "namespace"), cli_json_str(pool, "namespace")) == 0)
			return p;
	}
	return NULL;
}

/*
 * Bytes per second of counter `key` of `cur` (a pool or the totals of the
 * latest sample). With an interval: the growth since `before` (the same
 * object in the first sample; NULL for a pool created meanwhile) over secs;
 * without: the counter over the daemon's uptime, secs.
 */
static double cli_status_rate(const json_t *cur, const json_t *before, int interval, double secs,
                              const char *key)
{
	uint64_t b = cli_json_u64(cur, key), a = 0;

	if (secs <= 0)
		return 0.0;
	if (!interval)
		return (double)b / secs;
	if (before)
		a = cli_json_u64(before, key);
	return b >= a ? (double)(b - a) / secs : 0.0;
}

static int cli_status_pool_cmp(const void *a, const void *b)
{
	const json_t *pa = *(const json_t *const *)a, *pb = *(const json_t *const *)b;
	uint64_t ra = cli_json_u64(pa, "rank"), rb = cli_json_u64(pb, "rank");

	if (ra != rb)
		return ra < rb ? -1 : 1;
	return strcmp(cli_json_str(pa, "namespace"), cli_json_str(pb, "namespace"));
}

/* One table row: the counters of `o` (latest sample), bandwidth per
 * cli_status_rate. */
static void cli_status_row(int name_w, const char *name, const json_t *o, const json_t *before,
                           int interval, double secs, uint64_t capacity, uint64_t slot)
{
	char bytes[32], cap[32], slotbuf[32], rd[32], wr[32];

	cli_human_bytes((double)cli_json_u64(o, "bytes"), bytes, sizeof(bytes));
	meta_format_size(capacity, cap, sizeof(cap));
	if (slot)
		meta_format_size(slot, slotbuf, sizeof(slotbuf));
	else
		snprintf(slotbuf, sizeof(slotbuf), "-");
	cli_human_bytes(cli_status_rate(o, before, interval, secs, "bytes_read"), rd, sizeof(rd));
	cli_human_bytes(cli_status_rate(o, before, interval, secs, "bytes_written"), wr,
	                sizeof(wr));
	printf("%-*s %10llu %8s %8s %6s %10llu %10llu %9llu %8llu %9s/s %9s/s\n", name_w, name,
	       (unsigned long long)cli_json_u64(o, "pages"), bytes, cap, slotbuf,
	       (unsigned long long)cli_json_u64(o, "hits"),
	       (unsigned long long)cli_json_u64(o, "misses"),
	       (unsigned long long)cli_json_u64(o, "evictions"),
	       (unsigned long long)cli_json_u64(o, "checksum_failures"), rd, wr);
}

/* Prints one mount: its latest sample, bandwidth against the first. */
static void cli_status_print(const struct cli_status_mount *m, double interval)
{
	const json_t *first = m->first, *s = m->second ? m->second : m->first;
	const json_t *pools = json_object_get(s, "pools"), *totals = json_object_get(s, "totals");
	const json_t *p;
	double uptime = cli_json_double(s, "uptime_s"), secs = uptime;
	size_t n = json_array_size(pools), i;
	const json_t **sorted = calloc(n ? n : 1, sizeof(json_t *));
	int name_w = 7, has_interval = m->second != NULL;
	char up[64], name[META_NS_MAX + 16];
	uint64_t batches, records;

	if (has_interval) {
		secs = uptime - cli_json_double(first, "uptime_s");
		if (secs <= 0)
			secs = interval;
	}
	snprintf(up, sizeof(up), "%.0fh%02.0fm%02.0fs", floor(uptime / 3600),
	         floor(fmod(uptime, 3600) / 60), floor(fmod(uptime, 60)));
	printf("%s: pagefs %s, pid %llu, up %s\n", m->path, cli_json_str(s, "version"),
	       (unsigned long long)cli_json_u64(s, "pid"), up);
	printf("  backing %s, index %s\n", cli_json_str(s, "backing"), cli_json_str(s, "meta"));
	printf("  verify %s, durability %s, evict %s; bandwidth %s\n", cli_json_str(s, "verify"),
	       cli_json_str(s, "durability"), cli_json_str(s, "evict"),
	       has_interval ? "over the interval" : "averaged over uptime");

	json_array_foreach(pools, i, p)
	{
		int w;

		if (!sorted)
			break;
		sorted[i] = p;
		w = snprintf(name, sizeof(name), "%llu/%s",
		             (unsigned long long)cli_json_u64(p, "rank"),
		             cli_json_str(p, "namespace"));
		if (w > name_w)
			name_w = w;
	}
	printf("%-*s %10s %8s %8s %6s %10s %10s %9s %8s %11s %11s\n", name_w, "RANK/NS", "PAGES",
	       "BYTES", "CAPACITY", "SLOT", "HITS", "MISSES", "EVICTED", "CKSUMERR", "READ",
	       "WRITE");
	if (sorted) {
		qsort(sorted, n, sizeof(json_t *), cli_status_pool_cmp);
		for (i = 0; i < n; i++) {
			p = sorted[i];
			snprintf(name, sizeof(name), "%llu/%s",
			         (unsigned long long)cli_json_u64(p, "rank"),
			         cli_json_str(p, "namespace"));
			cli_status_row(name_w, name, p,
			               has_interval ? cli_status_match(first, p) : NULL,
			               has_interval, secs, cli_json_u64(p, "capacity_bytes"),
			               cli_json_u64(p, "slot_size"));
		}
	}
	free(sorted);
	cli_status_row(name_w, "total", totals, json_object_get(first, "totals"), has_interval,
	               secs, cli_json_u64(totals, "capacity_bytes"), 0);

	batches = cli_json_u64(totals, "store_batches");
	records = cli_json_u64(totals, "store_records");
	printf("  %llu pools; free %llu of %llu slots; store: %llu batches, %llu records",
	       (unsigned long long)cli_json_u64(totals, "pools"),
	       (unsigned long long)cli_json_u64(totals, "free_slots"),
	       (unsigned long long)cli_json_u64(totals, "total_slots"), (unsigned long long)batches,
	       (unsigned long long)records);
	if (batches)
		printf(" (%.1f records/batch)", (double)records / (double)batches);
	printf("\n");
}

static int cli_status_parse(int argc, char **argv, struct cli_status_config *cfg)
{
	char *end;
	int c;

	memset(cfg, 0, sizeof(*cfg));
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hji:u:", status_longopts, NULL)) != -1) {
		switch (c) {
		case 'h':
			cli_status_usage(stdout);
			return -1;
		case 'j':
			cfg->json = 1;
			break;
		case 'u':
			cfg->url = optarg;
			break;
		case 'i':
			errno = 0;
			cfg->interval = strtod(optarg, &end);
			if (errno || end == optarg || *end || !isfinite(cfg->interval) ||
			    cfg->interval <= 0 || cfg->interval > 3600)
				return cli_usage_error(
					CMD,
					"--interval '%s' is not a number of seconds: use "
					"more than 0 and at most 3600, e.g. 1 or 0.5",
					optarg);
			break;
		case ':':
			return cli_usage_error(CMD, "option '%s' needs a value", argv[optind - 1]);
		default:
			return cli_usage_error(CMD, "unknown option '%s'", argv[optind - 1]);
		}
	}
	if (cfg->json && cfg->interval > 0)
		return cli_usage_error(CMD, "--json prints one sample: drop --interval or --json");
	if (argc - optind > 1)
		return cli_usage_error(CMD, "too many arguments: name at most one MOUNTPOINT");
	if (argc - optind == 1)
		cfg->mountpoint = argv[optind];
	if (cfg->url && (cfg->mountpoint || cfg->interval > 0))
		return cli_usage_error(CMD, "--url reads one daemon's counters once: drop %s",
		                       cfg->mountpoint ? "MOUNTPOINT" : "--interval");
	return 0;
}

struct cli_status_list {
	struct cli_status_mount *v;
	size_t n, cap;
};

static int cli_status_add(void *arg, const char *path)
{
	struct cli_status_list *l = arg;

	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 8;
		struct cli_status_mount *v = realloc(l->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	memset(&l->v[l->n], 0, sizeof(l->v[l->n]));
	if (strlen(path) >= sizeof(l->v[l->n].path))
		return 0; /* cannot be named; skip */
	snprintf(l->v[l->n].path, sizeof(l->v[l->n].path), "%s", path);
	l->n++;
	return 0;
}

int cli_status_main(int argc, char **argv)
{
	struct cli_status_config cfg;
	struct cli_status_list list = {NULL, 0, 0};
	int ret, failed = 0, shown = 0;
	size_t i;

	ret = cli_status_parse(argc, argv, &cfg);
	if (ret)
		return ret < 0 ? CLI_OK : ret;
	if (cfg.url)
		return cli_status_url(cfg.url, cfg.json);

	if (cfg.mountpoint) {
		char path[PATH_MAX];

		if (!realpath(cfg.mountpoint, path)) {
			int e = errno;

			if (e == ENOTCONN)
				return cli_fail(
					CMD,
					"the daemon of %s is gone: remove the dead mount with "
					"'pagefs umount %s' and mount again",
					cfg.mountpoint, cfg.mountpoint);
			return cli_fail(CMD, "%s: %s", cfg.mountpoint, strerror(e));
		}
		ret = cli_status_add(&list, path);
	} else {
		ret = cli_each_mount(cli_status_add, &list);
	}
	if (ret < 0) {
		free(list.v);
		return cli_fail(CMD, "cannot list mounts: %s", strerror(-ret));
	}
	if (list.n == 0) {
		free(list.v);
		if (cfg.json) {
			printf("[]\n");
			return CLI_OK;
		}
		return cli_fail(CMD, "no pagefs mounts: mount one with 'pagefs mount BACKING "
		                     "MOUNTPOINT'");
	}

	for (i = 0; i < list.n; i++)
		if (cli_status_sample(list.v[i].path, &list.v[i].raw, &list.v[i].first))
			list.v[i].failed = 1;
	if (cfg.interval > 0) {
		struct timespec ts;

		ts.tv_sec = (time_t)cfg.interval;
		ts.tv_nsec = (long)((cfg.interval - (double)ts.tv_sec) * 1e9);
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
		for (i = 0; i < list.n; i++)
			if (!list.v[i].failed &&
			    cli_status_sample(list.v[i].path, NULL, &list.v[i].second))
				list.v[i].failed = 1;
	}

	if (cfg.json && !cfg.mountpoint)
		printf("[");
	for (i = 0; i < list.n; i++) {
		struct cli_status_mount *m = &list.v[i];

		if (m->failed) {
			failed = 1;
		} else if (cfg.json) {
			size_t len = strlen(m->raw);

			while (len > 0 && m->raw[len - 1] == '\n')
				len--;
			printf("%s%.*s", shown ? ",\n" : "", (int)len, m->raw);
			shown++;
		} else {
			if (shown++)
				printf("\n");
			cli_status_print(m, cfg.interval);
		}
		free(m->raw);
		json_decref(m->first);
		json_decref(m->second);
	}
	if (cfg.json && !cfg.mountpoint)
		printf("]\n");
	else if (cfg.json && shown)
		printf("\n");
	free(list.v);
	return failed ? CLI_FAIL : CLI_OK;
}
