/*
 * fuzz_state_json.c - libFuzzer target for `pagefs import-json`'s parser
 * and checks (meta_import_json in meta/state_json.c). Each process opens a
 * throwaway index in a temporary directory; each input is written to a
 * file there and imported with --page-size 4096. An import either fails
 * with a message and leaves the index as it was (no pool, no page), or
 * succeeds with every key of the file findable in its pool; after a
 * success the index is thrown away and opened again empty.
 */
#include "meta/meta.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "fuzz_state_json: " __VA_ARGS__);                          \
			fprintf(stderr, " [%s]\n", #cond);                                         \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

static char dir[64], backing[128], uri[160], file[128];
static struct meta *m;

static void cleanup(void)
{
	char cmd[200];

	if (m)
		meta_close(m);
	m = NULL;
	if (dir[0]) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd) != 0)
			fprintf(stderr, "fuzz_state_json: could not remove %s\n", dir);
	}
}

static void open_index(void)
{
	struct meta_config cfg = {0};
	char err[512], cmd[512];

	if (m)
		meta_close(m);
	/* A fresh index needs a fresh backing dir (.pagefs-owner names the old). */
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'/index.db* '%s' && mkdir '%s'", dir, backing,
	         backing);
	if (system(cmd) != 0)
		abort();
	cfg.uri = uri;
	cfg.backing = backing;
	cfg.prefix = "hicache";
	cfg.default_slot_size = 4096;
	cfg.default_capacity = 4096 * 16;
	cfg.evict = META_EVICT_LRU;
	cfg.verify = META_VERIFY_NONE;
	cfg.durability = META_DURABLE_PROCESS;
	CHECK(meta_open(&cfg, &m, err, sizeof(err)) == 0, "meta_open: %s", err);
}

static void setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/pagefs-fuzz-json.XXXXXX");
	CHECK(mkdtemp(dir) != NULL, "mkdtemp");
	snprintf(backing, sizeof(backing), "%s/backing", dir);
	snprintf(uri, sizeof(uri), "sqlite:%s/index.db", dir);
	snprintf(file, sizeof(file), "%s/state.json", dir);
	atexit(cleanup);
	open_index();
}

static int no_pools(void)
{
	struct meta_pool_info p[1];
	uint16_t ranks[64];
	int after = -1, n;

	while ((n = meta_rank_list(m, after, ranks, 64)) > 0) {
		for (int i = 0; i < n; i++)
			if (meta_pool_list(m, ranks[i], 0, p, 1) > 0)
				return 0;
		after = ranks[n - 1];
	}
	return 1;
}

/* After a successful import every key of the file is a page of its pool. */
static void check_imported(const uint8_t *data, size_t size, const struct meta_json_result *res)
{
	json_error_t jerr;
	json_t *root = json_loadb((const char *)data, size, 0, &jerr), *v, *e;
	const char *pkey;
	size_t i, keys = 0;

	CHECK(root && json_is_object(root), "import accepted a file jansson cannot load");
	CHECK(res->pools == json_object_size(root), "%llu pools imported, file has %zu",
	      (unsigned long long)res->pools, json_object_size(root));
	json_object_foreach(root, pkey, v)
	{
		char rk[16] = {0};
		const char *colon = strchr(pkey, ':');
		size_t rl = colon ? (size_t)(colon - pkey) : strlen(pkey);
		struct meta_pool_info info;
		struct meta_page_info pg;

		CHECK(rl < sizeof(rk), "pool key '%s'", pkey);
		memcpy(rk, pkey, rl);
		CHECK(meta_pool_find(m, meta_parse_rank(rk), colon ? colon + 1 : "kv", &info) == 0,
		      "pool '%s' missing after import", pkey);
		CHECK(info.capacity ==
		              (uint64_t)json_integer_value(json_object_get(v, "num_pages")),
		      "pool '%s' capacity %llu", pkey, (unsigned long long)info.capacity);
		json_array_foreach(json_object_get(v, "key_to_index"), i, e)
		{
			const char *k = json_string_value(json_array_get(e, 0));
			CHECK(meta_page_lookup(m, info.id, k, &pg, NULL) == 0,
			      "key '%s' of pool '%s' missing after import", k, pkey);
			CHECK(pg.slot == (uint64_t)json_integer_value(json_array_get(e, 1)),
			      "key '%s' in slot %llu", k, (unsigned long long)pg.slot);
			keys++;
		}
	}
	CHECK(res->keys == keys, "%llu keys imported, file has %zu", (unsigned long long)res->keys,
	      keys);
	json_decref(root);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct meta_json_opts o = {0};
	struct meta_json_result res;
	char err[1024];
	FILE *f;
	int rc;

	if (!m)
		setup();
	f = fopen(file, "wb");
	CHECK(f && fwrite(data, 1, size, f) == size && fclose(f) == 0, "writing %s", file);
	o.file = file;
	o.page_size = 4096;
	err[0] = '\0';
	rc = meta_import_json(m, &o, &res, err, sizeof(err));
	CHECK(memchr(err, '\0', sizeof(err)) != NULL, "err not terminated");
	if (rc < 0) {
		CHECK(err[0] != '\0', "import failed (%d) without a message", rc);
		CHECK(res.keys == 0, "failed import reports %llu keys",
		      (unsigned long long)res.keys);
		CHECK(no_pools(), "failed import left a pool behind: %s", err);
		return 0;
	}
	check_imported(data, size, &res);
	open_index();
	return 0;
}
