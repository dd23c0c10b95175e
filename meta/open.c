/*
 * open.c - opening and closing an index: the URI, the exclusive lock, the
 * ownership mark on the backing directory, loading the store into memory,
 * and crash recovery.
 *
 * Recovery needs no log replay: reservations are never written to the
 * store, so after a crash every slot that no committed page names is free
 * again, and pages still being written are simply absent. What the store
 * holds was committed before the matching close() returned.
 *
 * Ownership: the backing directory carries BACKING/.pagefs-owner with the
 * index's random id; the index stores the same id. A mount of a backing
 * directory with another index, or of an index with another backing
 * directory, is refused.
 */
#include "meta/cluster.h"
#include "meta/keys.h"
#include "meta/log.h"
#include "meta/ops.h"
#include "meta/record.h"
#include "meta/store.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

static int mkdir_p(const char *dir)
{
	char buf[PATH_MAX];

	if (snprintf(buf, sizeof(buf), "%s", dir) >= (int)sizeof(buf))
		return -ENAMETOOLONG;
	for (char *s = buf + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(buf, 0755) < 0 && errno != EEXIST)
			return -errno;
		*s = '/';
	}
	if (mkdir(buf, 0755) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

int meta_default_uri(const char *backing, char *buf, size_t len)
{
	char real[PATH_MAX], dir[PATH_MAX];
	const char *state = getenv("XDG_STATE_HOME");
	const char *home = getenv("HOME");
	int rc;

	if (!realpath(backing, real))
		return -errno;
	if (state && state[0] == '/')
		rc = snprintf(dir, sizeof(dir), "%s/pagefs", state);
	else
		rc = snprintf(dir, sizeof(dir), "%s/.local/state/pagefs", home ? home : "/root");
	if (rc < 0 || rc >= (int)sizeof(dir))
		return -ENAMETOOLONG;
	if ((rc = mkdir_p(dir)) < 0)
		return rc;
	rc = snprintf(buf, len, "sqlite:%s/index-%016llx.db", dir,
	              (unsigned long long)XXH3_64bits(real, strlen(real)));
	return rc < 0 || (size_t)rc >= len ? -ENAMETOOLONG : 0;
}

/* Checks (or establishes) that this index owns the backing directory. */
static int check_owner(struct meta *m, char *err, size_t errlen)
{
	char mine[64] = "", theirs[64] = "";
	int have_mine = store_get_setting(m->store, "index_id", mine, sizeof(mine)) == 0;
	int rc = store_read_owner(m->backing, theirs, sizeof(theirs));

	if (rc < 0 && rc != -ENOENT) {
		snprintf(err, errlen, "cannot read %s/%s: %s", m->backing, OWNER_FILE,
		         strerror(-rc));
		return rc;
	}
	if (have_mine && rc == 0 && strcmp(mine, theirs) == 0)
		return 0;
	if (rc == 0) {
		snprintf(err, errlen,
		         "backing directory %s belongs to another pagefs index (id %s, see %s/%s); "
		         "mount it with the --meta it was created with, or remove that file if the "
		         "old index is gone for good",
		         m->backing, theirs, m->backing, OWNER_FILE);
		return -EEXIST;
	}
	if (have_mine && m->pools) {
		snprintf(err, errlen,
		         "index %s (id %s) has pools but %s has no %s mark: is this the right "
		         "backing directory? Check with 'pagefs fsck'",
		         m->db_path, mine, m->backing, OWNER_FILE);
		return -ENOENT;
	}
	if (m->cfg.read_only) {
		snprintf(err, errlen,
		         "backing directory %s has no owner mark and the mount is "
		         "read-only",
		         m->backing);
		return -EROFS;
	}
	if (!have_mine) {
		unsigned char raw[16];
		if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
			return -EIO;
		for (size_t i = 0; i < sizeof(raw); i++)
			snprintf(mine + 2 * i, 3, "%02x", raw[i]);
		if ((rc = store_set_setting(m->store, "index_id", mine)) < 0 ||
		    (rc = store_set_setting(m->store, "backing", m->backing)) < 0) {
			snprintf(err, errlen, "cannot write index %s: %s", m->db_path,
			         strerror(-rc));
			return rc;
		}
	}
	char uri[1100]; /* the mark names the index without its password */
	snprintf(uri, sizeof(uri), "%s%s", m->store->engine == STORE_SQLITE ? "sqlite:" : "",
	         m->db_path);
	rc = store_write_owner(m->backing, uri, mine);
	if (rc < 0)
		snprintf(err, errlen, "cannot write %s/%s: %s", m->backing, OWNER_FILE,
		         strerror(-rc));
	return rc;
}

/* After the load: a data file that lost pages the index names (missing,
 * or cut short) is refused before anything creates or extends it, so
 * that the refusal changes nothing and every later mount refuses too
 * (the pages would read as zeros: those written over HTTP or imported
 * have no checksum to catch it). */
static int open_loaded_data(struct meta *m, char *err, size_t errlen)
{
	for (struct pool *p = m->pools; p; p = p->next) {
		if (p->data_missing && p->pages) {
			snprintf(err, errlen,
			         "data file %s is missing but the index names %llu pages in it; "
			         "restore it, or run 'pagefs fsck --repair' to drop them",
			         p->data_path, (unsigned long long)p->pages);
			return -ENOENT;
		}
		if (!p->data_missing && p->data_size < p->load_end) {
			snprintf(
				err, errlen,
				"data file %s is %llu bytes but the index names pages up to byte "
				"%llu of it; restore it, or run 'pagefs fsck --repair' to drop the "
				"pages past its end",
				p->data_path, (unsigned long long)p->data_size,
				(unsigned long long)p->load_end);
			return -EIO;
		}
		int rc = record_pool_open_data(m, p, err, errlen);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static void reverse_pools(struct meta *m)
{
	struct pool *rev = NULL;

	while (m->pools) {
		struct pool *p = m->pools;
		m->pools = p->next;
		p->next = rev;
		rev = p;
	}
	m->pools = rev;
}

/* The data file names depend on the prefix: an index keeps the one it
 * was created with. */
static int check_prefix(struct meta *m, char *err, size_t errlen)
{
	char val[256];
	int rc = store_get_setting(m->store, "prefix", val, sizeof(val));

	if (rc == 0 && strcmp(val, m->prefix) != 0) {
		snprintf(err, errlen,
		         "index %s was created with --prefix %s, not %s; mount with --prefix %s",
		         m->db_path, val, m->prefix, val);
		return -EINVAL;
	}
	if (rc == -ENOENT)
		rc = m->cfg.read_only ? 0 : store_set_setting(m->store, "prefix", m->prefix);
	if (rc < 0)
		snprintf(err, errlen, "cannot read or write index %s: %s", m->db_path,
		         strerror(-rc));
	return rc;
}

static int bump_epoch(struct meta *m, char *err, size_t errlen)
{
	char val[32] = "0";
	int rc;

	store_get_setting(m->store, "epoch", val, sizeof(val));
	/* Pages keep 28 bits of it: it wraps there (after 268 million
	 * mounts), past 0, which no page was made in. */
	m->epoch = ((uint32_t)strtoul(val, NULL, 10) + 1) & PAGE_GEN_MASK;
	if (!m->epoch)
		m->epoch = 1;
	if (m->cfg.read_only)
		return 0;
	snprintf(val, sizeof(val), "%u", m->epoch);
	rc = store_set_setting(m->store, "epoch", val);
	if (rc < 0)
		snprintf(err, errlen, "cannot write index %s: %s", m->db_path, strerror(-rc));
	return rc;
}

/* A shared index: this daemon is one node of several; its page and pool
 * ids come from the index's sequences in blocks. */
static int shared_ids(struct meta *m, char *err, size_t errlen)
{
	uint64_t first, count;
	int rc;

	m->shared = 1;
	m->cluster = &cluster_ops;
	for (int pool = 0; pool < 2; pool++) {
		struct idblock *b = pool ? &m->pool_ids : &m->page_ids;
		if ((rc = m->store->sync->ids(m->store, pool, &first, &count)) < 0) {
			snprintf(err, errlen, "index %s: cannot take a block of ids: %s",
			         m->db_path, strerror(-rc));
			return rc;
		}
		*b = (struct idblock){first, first + count, 0, 0};
	}
	return 0;
}

static int copy_config(struct meta *m, const struct meta_config *cfg, const char *db_path)
{
	m->cfg = *cfg;
	m->uri = strdup(cfg->uri);
	m->backing = realpath(cfg->backing, NULL);
	m->prefix = strdup(cfg->prefix && cfg->prefix[0] ? cfg->prefix : "hicache");
	m->db_path = strdup(db_path);
	m->presence_dir = cfg->presence_dir ? strdup(cfg->presence_dir) : NULL;
	if (!m->backing)
		return -errno;
	if (!m->uri || !m->prefix || !m->db_path || (cfg->presence_dir && !m->presence_dir))
		return -ENOMEM;
	m->cfg.presence_dir = m->presence_dir;
	m->cfg.uri = m->uri;
	m->cfg.backing = m->backing;
	m->cfg.prefix = m->prefix;
	return 0;
}

/* Checked builds (PAGEFS_CHECKS): the index's invariants hold after the
 * load and once the last record was applied; a broken one is a bug, and
 * the daemon stops there rather than serve from it. A node the others
 * removed is not checked: its mirror stopped following the index. */
static void check_index(struct meta *m, const char *when)
{
#ifdef PAGEFS_CHECKS
	char why[256];
	int rc;

	if (m->fenced)
		return;
	index_lock(m);
	rc = index_check(m, why, sizeof(why));
	index_unlock(m);
	if (rc < 0) {
		log_error("index %s: invariant broken %s: %s", m->db_path, when, why);
		abort();
	}
#else
	(void)m;
	(void)when;
#endif
}

int meta_open(const struct meta_config *cfg, struct meta **out, char *err, size_t errlen)
{
	struct meta *m = calloc(1, sizeof(*m));
	struct store_uri u;
	struct stat st;
	int rc;

	err[0] = '\0';
	if (!m)
		return -ENOMEM;
	/* One daemon alone counts ids from the highest loaded (a shared index
	 * replaces these blocks with blocks of its sequences). */
	m->page_ids = (struct idblock){1, UINT64_MAX, 0, 0};
	m->pool_ids = (struct idblock){1, UINT32_MAX, 0, 0};
	pthread_mutex_init(&m->lock, NULL);
	cluster_lease_init(m);
	m->hooks = &keys_hooks;
	if ((rc = store_parse_uri(cfg->uri, &u, err, errlen)) < 0)
		goto fail;
	if (stat(cfg->backing, &st) < 0 || !S_ISDIR(st.st_mode)) {
		rc = -ENOTDIR;
		snprintf(err, errlen, "backing directory %s does not exist or is not a directory",
		         cfg->backing);
		goto fail;
	}
	if (cfg->prefix && cfg->prefix[0] && meta_check_prefix(cfg->prefix) < 0) {
		rc = -EINVAL;
		snprintf(err, errlen,
		         "'%s' is not a data file prefix: use 1 to %d of the characters "
		         "A-Z a-z 0-9 _ . - (not \"..\")",
		         cfg->prefix, META_PREFIX_MAX);
		goto fail;
	}
	if ((rc = copy_config(m, cfg, u.display)) < 0) {
		snprintf(err, errlen, "cannot resolve %s: %s", cfg->backing, strerror(-rc));
		goto fail;
	}
	if (m->presence_dir)
		index_presence_sweep(m->presence_dir); /* tables of daemons killed before */
	rc = store_open(m->uri, cfg->durability == META_DURABLE_POWER, cfg->read_only, &m->store,
	                err, errlen);
	if (rc < 0 || (rc = store_lock(m->store, 0, err, errlen)) < 0)
		goto fail;
	/* Tables sized for the pages the index probably holds (the store's
	 * estimate errs a little high: a load factor near 0.95, no rehash
	 * while loading, which rehashed every page many times). */
	uint64_t est = store_estimate(m->store);
	if (est > (1ULL << 30))
		est = 1ULL << 30;
	if ((rc = index_table_init(&m->by_name, est)) < 0 ||
	    (rc = index_table_recent_init(&m->by_name)) < 0 ||
	    (rc = index_idtable_init(&m->by_id, est)) < 0)
		goto fail;
	if (m->store->sync && (rc = shared_ids(m, err, errlen)) < 0)
		goto fail;
	if ((rc = check_prefix(m, err, errlen)) < 0 || (rc = bump_epoch(m, err, errlen)) < 0)
		goto fail;
	{
		rc = record_load(m, err, errlen);
		reverse_pools(m);
		if (rc == 0)
			rc = open_loaded_data(m, err, errlen);
		if (rc == 0 && (rc = keys_fences_load(m)) < 0)
			snprintf(err, errlen, "out of memory holding slots of pools");
		if (rc == 0) {
			record_dirtimes_load(m);
			check_index(m, "after the load");
			index_idtable_seal(&m->by_id); /* new ids by id from here */
		}
		if (rc < 0) {
			if (!err[0])
				snprintf(err, errlen, "cannot load index %s: %s; run 'pagefs fsck'",
				         m->db_path, strerror(-rc));
			goto fail;
		}
	}
	if ((rc = check_owner(m, err, errlen)) < 0)
		goto fail;
	if ((rc = record_start(m, err, errlen)) < 0)
		goto fail;
	if (m->shared && (rc = cluster_sync_start(m, err, errlen)) < 0)
		goto fail;
	log_info("index %s: %llu pages in %llu-slot tables, epoch %u", m->db_path,
	         (unsigned long long)m->by_id.count, (unsigned long long)m->by_id.n, m->epoch);
	*out = m;
	return 0;
fail:
	if (!err[0])
		snprintf(err, errlen, "cannot open index %s: %s", cfg->uri, strerror(-rc));
	meta_close(m);
	return rc;
}

void meta_close(struct meta *m)
{
	if (!m)
		return;
	int served = m->journal != NULL;

	keys_stop(m);
	cluster_sync_stop(m);
	if (m->journal)
		record_dirtimes_save(m);
	record_stop(m);
	if (served)
		check_index(m, "at close");
	index_idtable_free(&m->by_id, 1);
	index_table_free(&m->by_name);
	index_ctimes_free(&m->ctimes);
	while (m->pools) {
		struct pool *p = m->pools;
		m->pools = p->next;
		index_pool_free(p);
	}
	store_close(m->store); /* releases the daemon lock */
	pthread_mutex_destroy(&m->lock);
	cluster_lease_destroy(m);
	free(m->peer_pins);
	free(m->lease_pins);
	free(m->uri);
	free(m->backing);
	free(m->prefix);
	free(m->presence_dir);
	free(m->db_path);
	free(m);
}
