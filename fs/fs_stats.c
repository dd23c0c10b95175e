/*
 * fs_stats.c - the user.pagefs.stats document of the root directory: the
 * mount's settings, the engine's totals and every pool's counters, as one
 * JSON object (what `pagefs status` reads).
 *
 * Pools are walked with the same rank/pool listing calls readdir uses.
 */
#include <errno.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "fs/fs_priv.h"

#ifndef PAGEFS_VERSION
#define PAGEFS_VERSION "0.1.0"
#endif

#define POOL_BATCH 16

/* A JSON string even for a path that is not UTF-8. */
static json_t *jstr(const char *s)
{
	json_t *j = json_string(s ? s : "");

	return j ? j : json_string_nocheck(s);
}

static json_t *jint(uint64_t v)
{
	return json_integer((json_int_t)v);
}

static const char *verify_name(enum meta_verify v)
{
	return v == META_VERIFY_NONE ? "none" : v == META_VERIFY_ALWAYS ? "always" : "first";
}

static const char *kernel_cache_name(enum pagefs_kernel_cache c)
{
	return c == PAGEFS_CACHE_REREAD ? "reread" : c == PAGEFS_CACHE_ALWAYS ? "always" : "never";
}

static json_t *totals_json(const struct meta_stats *s)
{
	json_t *t = json_object();

	json_object_set_new(t, "pools", jint(s->pools));
	json_object_set_new(t, "pages", jint(s->pages));
	json_object_set_new(t, "bytes", jint(s->bytes));
	json_object_set_new(t, "capacity_bytes", jint(s->capacity_bytes));
	json_object_set_new(t, "free_bytes", jint(s->free_bytes));
	json_object_set_new(t, "total_slots", jint(s->total_slots));
	json_object_set_new(t, "free_slots", jint(s->free_slots));
	json_object_set_new(t, "hits", jint(s->hits));
	json_object_set_new(t, "misses", jint(s->misses));
	json_object_set_new(t, "evictions", jint(s->evictions));
	json_object_set_new(t, "checksum_failures", jint(s->checksum_failures));
	json_object_set_new(t, "bytes_read", jint(s->bytes_read));
	json_object_set_new(t, "bytes_written", jint(s->bytes_written));
	json_object_set_new(t, "store_batches", jint(s->store_batches));
	json_object_set_new(t, "store_records", jint(s->store_records));
	return t;
}

static json_t *pool_json(const struct meta_pool_info *p)
{
	json_t *o = json_object();

	json_object_set_new(o, "rank", jint(p->rank));
	json_object_set_new(o, "namespace", jstr(p->ns));
	json_object_set_new(o, "slot_size", jint(p->slot_size));
	json_object_set_new(o, "capacity_slots", jint(p->capacity));
	json_object_set_new(o, "capacity_bytes", jint(p->capacity * p->slot_size));
	json_object_set_new(o, "pages", jint(p->pages));
	json_object_set_new(o, "bytes", jint(p->bytes));
	json_object_set_new(o, "used_slots", jint(p->used_slots));
	json_object_set_new(o, "writing", jint(p->writing));
	json_object_set_new(o, "pinned_slots", jint(p->pinned_slots));
	json_object_set_new(o, "freed_open_slots", jint(p->freed_open));
	json_object_set_new(o, "hits", jint(p->hits));
	json_object_set_new(o, "misses", jint(p->misses));
	json_object_set_new(o, "evictions", jint(p->evictions));
	json_object_set_new(o, "checksum_failures", jint(p->checksum_failures));
	json_object_set_new(o, "bytes_read", jint(p->bytes_read));
	json_object_set_new(o, "bytes_written", jint(p->bytes_written));
	json_object_set_new(o, "data_file", jstr(p->data_file));
	return o;
}

/* Appends every pool of every rank to arr. 0 or -ENOMEM. */
static int add_pools(struct meta *m, json_t *arr)
{
	struct meta_pool_info *pools = malloc(POOL_BATCH * sizeof(*pools));
	uint16_t ranks[256];
	int after_rank = -1;
	int nr;

	if (!pools)
		return -ENOMEM;
	do {
		nr = meta_rank_list(m, after_rank, ranks, 256);
		for (int i = 0; i < nr; i++) {
			uint32_t after = 0;
			int np;

			do {
				np = meta_pool_list(m, ranks[i], after, pools, POOL_BATCH);
				for (int j = 0; j < np; j++) {
					json_array_append_new(arr, pool_json(&pools[j]));
					after = pools[j].id;
				}
			} while (np == POOL_BATCH);
			after_rank = ranks[i];
		}
	} while (nr == 256);
	free(pools);
	return 0;
}

char *fs_stats_json(struct fs_mount *fs)
{
	const struct meta_config *cfg = meta_config(fs->meta);
	json_t *doc = json_object();
	json_t *pools = json_array();
	struct meta_stats s;
	struct timespec now;
	char *out = NULL;

	if (!doc || !pools)
		goto out;
	meta_get_stats(fs->meta, &s);
	clock_gettime(CLOCK_REALTIME, &now);

	json_object_set_new(doc, "version", json_string(PAGEFS_VERSION));
	json_object_set_new(doc, "pid", json_integer(fs->pid));
	json_object_set_new(doc, "mountpoint", jstr(fs->opts->mountpoint));
	json_object_set_new(doc, "backing", jstr(cfg->backing));
	char meta_name[1024];
	meta_uri_display(cfg->uri, meta_name, sizeof(meta_name));
	json_object_set_new(doc, "meta", jstr(meta_name));
	json_object_set_new(doc, "uptime_s",
	                    json_real((double)(now.tv_sec - fs->mounted.tv_sec) +
	                              (double)(now.tv_nsec - fs->mounted.tv_nsec) / 1e9));
	json_object_set_new(doc, "verify", json_string(verify_name(cfg->verify)));
	json_object_set_new(doc, "kernel_cache",
	                    json_string(kernel_cache_name(fs->opts->kernel_cache)));
	json_object_set_new(
		doc, "durability",
		json_string(cfg->durability == META_DURABLE_POWER ? "power" : "process"));
	json_object_set_new(doc, "evict",
	                    json_string(cfg->evict == META_EVICT_NONE ? "none" : "lru"));
	json_object_set_new(doc, "totals", totals_json(&s));
	/* reads answered from the bytes their open's checksum check read
	 * (fs_file.c), and the bytes open readers keep for that now */
	json_object_set_new(doc, "reads_from_check", jint(atomic_load(&fs->handles.kept_reads)));
	json_object_set_new(doc, "check_bytes_kept", jint(atomic_load(&fs->handles.kept)));
	if (add_pools(fs->meta, pools) < 0)
		goto out;
	json_object_set(doc, "pools", pools);
	out = json_dumps(doc, JSON_COMPACT | JSON_REAL_PRECISION(12));
out:
	json_decref(pools);
	json_decref(doc);
	return out;
}
