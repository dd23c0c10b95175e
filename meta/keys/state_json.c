/*
 * state_json.c - SGLang's mini_3fs_metadata_server persistence file:
 * import (adopt a file into the index) and export (write one the Python
 * server loads).
 *
 * The file is {"rank:namespace": {"num_pages": N, "free_pages": [...],
 * "key_to_index": [[key, slot], ...]}} with key_to_index oldest use first;
 * a bare "rank" means "rank:kv". Import checks everything (shape, ranges,
 * one slot per key and one key per slot, slot sizes) before it changes
 * anything, creates the missing pools, and commits all keys in one store
 * transaction through meta_adopt(); if that fails the pools it created are
 * removed again, so the index is left as it was. free_pages is not stored:
 * a slot is free when no key maps it (slots the Python server leaked to
 * unconfirmed reservations come back free).
 *
 * Export walks each pool's LRU list from the least recent page and writes
 * with jansson at 4-space indent, as Python's json.dump(indent=4) does.
 */
#include "meta/keys.h"
#include "meta/log.h"
#include "meta/store.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

struct imp_pool {
	int rank;
	char ns[META_NS_MAX + 1];
	uint64_t num_pages, slot_size;
	json_t *keys; /* key_to_index array (borrowed) */
	uint32_t pool_id;
	int created; /* this import created the pool */
	int resized; /* this import changed an empty pool's capacity */
	uint64_t old_capacity_bytes;
	/* A created pool's data file was there before (SGLang's, adopted):
	 * an undo keeps it, at its old size. */
	int file_existed;
	off_t file_size;
	char path[4096];
};

#define FAIL(...)                                                                                  \
	do {                                                                                       \
		snprintf(err, errlen, __VA_ARGS__);                                                \
		return -EINVAL;                                                                    \
	} while (0)

static int parse_pool_key(const char *key, int *rank, char *ns, char *err, size_t errlen)
{
	char rbuf[16];
	const char *colon = strchr(key, ':');
	size_t rlen = colon ? (size_t)(colon - key) : strlen(key);
	const char *n = colon ? colon + 1 : "kv";

	if (rlen == 0 || rlen >= sizeof(rbuf))
		FAIL("pool key '%s' is not \"rank:namespace\"", key);
	memcpy(rbuf, key, rlen);
	rbuf[rlen] = '\0';
	if ((*rank = meta_parse_rank(rbuf)) < 0)
		FAIL("pool key '%s': rank '%s' is not a number in 0..%d", key, rbuf, META_RANK_MAX);
	if (meta_check_ns(n) < 0)
		FAIL("pool key '%s': namespace '%s' does not match [a-z0-9_]{1,64}", key, n);
	snprintf(ns, META_NS_MAX + 1, "%s", n);
	return 0;
}

static int is_index(const json_t *v, uint64_t limit)
{
	return json_is_integer(v) && json_integer_value(v) >= 0 &&
	       (uint64_t)json_integer_value(v) < limit;
}

/* Checks one pool's object; *nkeys gets its key count. */
static int check_pool(const char *pkey, json_t *v, struct imp_pool *ip, char *err, size_t errlen)
{
	json_t *np = json_object_get(v, "num_pages"), *fp = json_object_get(v, "free_pages");
	json_t *kt = json_object_get(v, "key_to_index");
	size_t i;
	json_t *e;

	if (!json_is_object(v))
		FAIL("pool '%s' is not an object", pkey);
	if (!json_is_integer(np) || json_integer_value(np) <= 0)
		FAIL("pool '%s': num_pages must be a positive integer", pkey);
	if (!json_is_array(fp))
		FAIL("pool '%s': free_pages must be a list of page indices", pkey);
	if (!json_is_array(kt))
		FAIL("pool '%s': key_to_index must be a list of [key, page_index] pairs", pkey);
	ip->num_pages = (uint64_t)json_integer_value(np);
	ip->keys = kt;
	json_array_foreach(fp, i, e)
	{
		if (!is_index(e, ip->num_pages))
			FAIL("pool '%s': free_pages[%zu] is not a page index below num_pages %llu",
			     pkey, i, (unsigned long long)ip->num_pages);
	}
	json_array_foreach(kt, i, e)
	{
		json_t *k = json_array_get(e, 0), *s = json_array_get(e, 1);
		if (!json_is_array(e) || json_array_size(e) != 2 || !json_is_string(k))
			FAIL("pool '%s': key_to_index[%zu] is not a [key, page_index] pair", pkey,
			     i);
		if (!is_index(s, ip->num_pages))
			FAIL("pool '%s': key_to_index[%zu] ('%s'): page index is not an integer "
			     "below num_pages %llu",
			     pkey, i, json_string_value(k), (unsigned long long)ip->num_pages);
		if (meta_check_name(json_string_value(k)) < 0 ||
		    strlen(json_string_value(k)) != json_string_length(k))
			FAIL("pool '%s': key '%s' cannot be a file name (1..255 bytes, no '/', not "
			     "'.' or '..')",
			     pkey, json_string_value(k));
	}
	return 0;
}

/* One key or slot twice in a pool: refused, never guessed. Keys and slots
 * are checked with open-addressing sets of key_to_index indices (a jansson
 * object would cost more than the whole store transaction); both are sized
 * by the keys, never by num_pages, which the file may set to anything. */
static int check_unique(const char *pkey, const struct imp_pool *ip, char *err, size_t errlen)
{
	size_t n = json_array_size(ip->keys), cap = 16;
	while (cap < 2 * n)
		cap *= 2;
	size_t *set = malloc(cap * sizeof(*set)), *slots = malloc(cap * sizeof(*slots));
	size_t i;
	json_t *e;
	int rc = 0;

	if (!set || !slots) {
		free(set);
		free(slots);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	memset(set, 0xff, cap * sizeof(*set));
	memset(slots, 0xff, cap * sizeof(*slots));
	json_array_foreach(ip->keys, i, e)
	{
		json_t *kj = json_array_get(e, 0);
		const char *k = json_string_value(kj);
		size_t klen = json_string_length(kj);
		uint64_t s = (uint64_t)json_integer_value(json_array_get(e, 1));
		size_t h = (size_t)XXH3_64bits(&s, sizeof(s)) & (cap - 1);
		for (; slots[h] != SIZE_MAX; h = (h + 1) & (cap - 1)) {
			json_t *o = json_array_get(json_array_get(ip->keys, slots[h]), 1);
			if ((uint64_t)json_integer_value(o) == s)
				break;
		}
		if (slots[h] != SIZE_MAX) {
			snprintf(err, errlen,
			         "pool '%s': page index %llu is mapped by two keys (second: '%s')",
			         pkey, (unsigned long long)s, k);
			rc = -EINVAL;
			break;
		}
		slots[h] = i;
		h = (size_t)XXH3_64bits(k, klen) & (cap - 1);
		for (; set[h] != SIZE_MAX; h = (h + 1) & (cap - 1)) {
			json_t *o = json_array_get(json_array_get(ip->keys, set[h]), 0);
			if (json_string_length(o) == klen &&
			    memcmp(json_string_value(o), k, klen) == 0)
				break;
		}
		if (set[h] != SIZE_MAX) {
			snprintf(err, errlen, "pool '%s': key '%s' appears twice in key_to_index",
			         pkey, k);
			rc = -EINVAL;
			break;
		}
		set[h] = i;
	}
	free(set);
	free(slots);
	return rc;
}

/* num_pages * slot_size must be a file size (and not wrap around). */
static int check_pool_bytes(const char *pkey, const struct imp_pool *ip, char *err, size_t errlen)
{
	if (ip->num_pages > (uint64_t)INT64_MAX / ip->slot_size)
		FAIL("pool '%s': num_pages %llu of %llu bytes is more than a data file can hold",
		     pkey, (unsigned long long)ip->num_pages, (unsigned long long)ip->slot_size);
	if (meta_check_geometry(ip->slot_size, ip->num_pages) < 0)
		FAIL("pool '%s': num_pages %llu of %llu bytes: a pool holds at most %llu pages of "
		     "at most %llu bytes",
		     pkey, (unsigned long long)ip->num_pages, (unsigned long long)ip->slot_size,
		     (unsigned long long)META_SLOTS_MAX, (unsigned long long)META_SLOT_SIZE_MAX);
	return 0;
}

/* The slot size per the import's rules; 0 or -EINVAL with a message. */
static int choose_slot_size(struct meta *m, const char *pkey, struct imp_pool *ip,
                            uint64_t page_size, char *err, size_t errlen)
{
	struct meta_pool_info info;
	char path[4096];
	struct stat st;

	if (meta_pool_find(m, ip->rank, ip->ns, &info) == 0) {
		if (page_size && page_size != info.slot_size)
			FAIL("pool '%s' exists with slot size %llu, not --page-size %llu", pkey,
			     (unsigned long long)info.slot_size, (unsigned long long)page_size);
		if (info.pages || info.used_slots)
			FAIL("pool '%s' already holds pages; import only into new or empty pools",
			     pkey);
		ip->pool_id = info.id;
		ip->slot_size = info.slot_size;
		return 0;
	}
	if (record_data_path(m, ip->rank, ip->ns, path, sizeof(path)) < 0)
		FAIL("pool '%s': data file path too long", pkey);
	if (stat(path, &st) == 0 && st.st_size > 0) {
		uint64_t size = (uint64_t)st.st_size;
		uint64_t bpp = page_size ? page_size : meta_page_size_of(size, ip->num_pages);
		if (!page_size && !bpp)
			FAIL("pool '%s': data file %s has %llu bytes, which does not tell the page "
			     "size for num_pages %llu (several sizes give that many pages); give "
			     "--page-size",
			     pkey, path, (unsigned long long)size,
			     (unsigned long long)ip->num_pages);
		if (size / bpp != ip->num_pages)
			FAIL("pool '%s': data file %s has %llu bytes, which SGLang divides into "
			     "%llu pages of %llu bytes, not num_pages %llu; give the --page-size "
			     "SGLang used or check the file",
			     pkey, path, (unsigned long long)size,
			     bpp ? (unsigned long long)(size / bpp) : 0ULL, (unsigned long long)bpp,
			     (unsigned long long)ip->num_pages);
		ip->slot_size = bpp;
		return check_pool_bytes(pkey, ip, err, errlen);
	}
	if (!page_size)
		FAIL("pool '%s': no data file %s to size its pages from; give --page-size", pkey,
		     path);
	ip->slot_size = page_size;
	return check_pool_bytes(pkey, ip, err, errlen);
}

/* Undoes the pool changes of a failed import. */
/* Puts back the pools as they were: the pools this import created go
 * (their data files too, unless they were there before: then they stay
 * as they were), resized ones get their capacity back. */
static void undo_pools(struct meta *m, struct imp_pool *ips, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct imp_pool *ip = &ips[i];
		if (ip->created) {
			int rrc = ops_pool_remove(m, ip->pool_id, ip->file_existed);
			if (rrc == 0 && ip->file_existed && truncate(ip->path, ip->file_size) < 0)
				log_warn("cannot give %s its size of %lld bytes back: %s", ip->path,
				         (long long)ip->file_size, strerror(errno));
		} else if (ip->resized) {
			meta_pool_set(m, ip->pool_id, 0, ip->old_capacity_bytes);
		}
	}
}

static void adopt_progress(void *arg, uint64_t done, uint64_t total)
{
	const struct meta_json_opts *o = arg;
	o->progress(o->arg, "committing", done, total);
}

/* json_load_file reads a byte at a time; a whole-file read is 5x faster.
 * A pipe (import-json <(...), /dev/stdin) has no size: it is read to its
 * end in growing pieces. A directory is refused by name. */
static json_t *load_file(const char *path, json_error_t *jerr)
{
	FILE *f = fopen(path, "rb");
	struct stat st;
	char *buf = NULL;
	size_t n = 0, cap;
	json_t *root;

	if (f && fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
		fclose(f);
		snprintf(jerr->text, sizeof(jerr->text), "%s is a directory, not a state file",
		         path);
		jerr->line = jerr->column = -1;
		jerr->position = 0;
		return NULL;
	}
	if (!f || fstat(fileno(f), &st) < 0) {
		if (f)
			fclose(f);
		return json_load_file(path, 0, jerr); /* for its error message */
	}
	cap = S_ISREG(st.st_mode) ? (size_t)st.st_size + 1 : 1 << 20;
	for (;;) {
		char *nb = n + 1 >= cap || !buf ? realloc(buf, cap) : buf;
		if (!nb) {
			free(buf);
			fclose(f);
			snprintf(jerr->text, sizeof(jerr->text), "out of memory reading %s", path);
			return NULL;
		}
		buf = nb;
		size_t got = fread(buf + n, 1, cap - n - 1, f);
		n += got;
		if (got == 0 || S_ISREG(st.st_mode))
			break;
		if (n + 1 >= cap)
			cap *= 2;
	}
	fclose(f);
	root = json_loadb(buf, n, 0, jerr);
	free(buf);
	return root;
}

int meta_import_json(struct meta *m, const struct meta_json_opts *o, struct meta_json_result *res,
                     char *err, size_t errlen)
{
	struct meta_adopt_page *pages = NULL;
	struct imp_pool *ips = NULL;
	json_error_t jerr;
	json_t *root, *v;
	const char *pkey;
	size_t npools, nkeys = 0, k = 0, i = 0;
	int rc = 0;

	memset(res, 0, sizeof(*res));
	if (o->progress)
		o->progress(o->arg, "reading", 0, 1);
	root = load_file(o->file, &jerr);
	if (!root) {
		if (jerr.line > 0)
			snprintf(err, errlen, "%s:%d:%d: %s", o->file, jerr.line, jerr.column,
			         jerr.text);
		else
			snprintf(err, errlen, "%s", jerr.text);
		return jerr.line <= 0 && !strstr(jerr.text, "JSON") ? -EIO : -EINVAL;
	}
	if (!json_is_object(root)) {
		snprintf(err, errlen,
		         "%s: the top level is not an object of \"rank:namespace\" pools", o->file);
		json_decref(root);
		return -EINVAL;
	}
	npools = json_object_size(root);
	if (!(ips = calloc(npools ? npools : 1, sizeof(*ips)))) {
		rc = -ENOMEM;
		goto out;
	}
	json_object_foreach(root, pkey, v)
	{
		struct imp_pool *ip = &ips[i];
		if ((rc = parse_pool_key(pkey, &ip->rank, ip->ns, err, errlen)) < 0 ||
		    (rc = check_pool(pkey, v, ip, err, errlen)) < 0 ||
		    (rc = check_unique(pkey, ip, err, errlen)) < 0 ||
		    (rc = choose_slot_size(m, pkey, ip, o->page_size, err, errlen)) < 0)
			goto out;
		for (size_t j = 0; j < i; j++) {
			if (ips[j].rank == ip->rank && strcmp(ips[j].ns, ip->ns) == 0) {
				snprintf(err, errlen, "pool %d:%s appears twice (as '%s' and '%d')",
				         ip->rank, ip->ns, pkey, ip->rank);
				rc = -EINVAL;
				goto out;
			}
		}
		nkeys += json_array_size(ip->keys);
		i++;
	}
	if (!(pages = calloc(nkeys ? nkeys : 1, sizeof(*pages)))) {
		rc = -ENOMEM;
		goto out;
	}
	/* Everything checked: now the pools, then all keys in one transaction. */
	for (i = 0; i < npools; i++) {
		struct imp_pool *ip = &ips[i];
		struct meta_pool_info info;
		if (ip->pool_id) {
			if ((rc = meta_pool_get(m, ip->pool_id, &info)) == 0 &&
			    info.capacity != ip->num_pages) {
				ip->old_capacity_bytes = info.capacity * info.slot_size;
				rc = meta_pool_set(m, ip->pool_id, 0,
				                   ip->num_pages * ip->slot_size);
				ip->resized = rc == 0;
			}
		} else {
			struct stat st;
			if (record_data_path(m, ip->rank, ip->ns, ip->path, sizeof(ip->path)) ==
			            0 &&
			    stat(ip->path, &st) == 0) {
				ip->file_existed = 1;
				ip->file_size = st.st_size;
			}
			rc = meta_pool_create(m, ip->rank, ip->ns, ip->slot_size,
			                      ip->num_pages * ip->slot_size, &info);
			ip->created = rc == 0;
			ip->pool_id = info.id;
		}
		if (rc < 0) {
			snprintf(err, errlen, "cannot set up pool %d:%s: %s", ip->rank, ip->ns,
			         strerror(-rc));
			goto undo;
		}
		json_array_foreach(ip->keys, k, v)
		{
			pages[res->keys].pool_id = ip->pool_id;
			pages[res->keys].name = json_string_value(json_array_get(v, 0));
			pages[res->keys].slot = (uint64_t)json_integer_value(json_array_get(v, 1));
			res->keys++;
		}
	}
	rc = meta_adopt(m, pages, res->keys, o->progress ? adopt_progress : NULL, (void *)o);
	if (rc < 0) {
		snprintf(err, errlen, "the index refused the import: %s", strerror(-rc));
		goto undo;
	}
	res->pools = npools;
	goto out;
undo:
	undo_pools(m, ips, npools);
	res->keys = 0;
out:
	free(pages);
	free(ips);
	json_decref(root);
	return rc;
}

/* ---- export ---- */

static json_t *export_pool(struct meta *m, uint32_t pool_id, uint64_t *skipped)
{
	json_t *obj = json_object(), *free_list = json_array(), *keys = json_array();
	uint8_t *used = NULL;

	index_lock(m);
	struct pool *p = index_pool_by_id(m, pool_id);
	if (!p || !obj || !free_list || !keys || !(used = calloc((p->capacity + 7) / 8, 1)))
		goto fail;
	for (struct page *pg = p->lru_tail; pg; pg = page_at(pg->lru_prev)) {
		char text[META_NAME_MAX + 1];
		json_t *name = json_string(index_pname_text(pg, text)); /* NULL: not UTF-8 */
		if (!name) {
			(*skipped)++;
			continue;
		}
		json_t *pair = json_pack("[o,I]", name, (json_int_t)pg->slot);
		if (!pair || json_array_append_new(keys, pair) < 0)
			goto fail;
		used[pg->slot / 8] |= (uint8_t)(1u << (pg->slot % 8));
	}
	for (uint64_t s = 0; s < p->capacity; s++)
		if (!(used[s / 8] & (1u << (s % 8))) &&
		    json_array_append_new(free_list, json_integer((json_int_t)s)) < 0)
			goto fail;
	json_object_set_new(obj, "num_pages", json_integer((json_int_t)p->capacity));
	index_unlock(m);
	free(used);
	json_object_set_new(obj, "free_pages", free_list);
	json_object_set_new(obj, "key_to_index", keys);
	return obj;
fail:
	index_unlock(m);
	free(used);
	json_decref(obj);
	json_decref(free_list);
	json_decref(keys);
	return NULL;
}

/*
 * Writes root to path. A regular file (or none yet) is written through
 * path.tmp and a rename, so that no reader sees half a file; a symbolic
 * link is followed, so the file it names is replaced and the link stays.
 * Anything else (/dev/stdout, /dev/null, a pipe) is written straight into:
 * a rename would put a regular file in place of the device node. 0 or
 * -errno.
 */
static int dump_to(json_t *root, const char *path, size_t flags)
{
	char real[PATH_MAX], tmp[PATH_MAX + 8], link[PATH_MAX];
	struct stat st;
	int rc = 0, have = 0;

	errno = 0;
	if (stat(path, &st) == 0) {
		have = 1;
		if (!S_ISREG(st.st_mode)) {
			FILE *f = fopen(path, "w");
			if (!f)
				return -errno;
			if (json_dumpf(root, f, flags) < 0)
				rc = errno ? -errno : -EIO;
			if (fclose(f) != 0 && rc == 0)
				rc = -errno;
			return rc;
		}
	} else if (errno == ELOOP) {
		return -ELOOP;
	}
	if (realpath(path, real)) {
		path = real;
	} else if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) {
		/* A link to a file not made yet: make that file, keep the link. */
		ssize_t n = readlink(path, link, sizeof(link) - 1);
		if (n <= 0)
			return -EINVAL;
		link[n] = '\0';
		const char *slash = strrchr(path, '/');
		int len = link[0] != '/' && slash ? snprintf(real, sizeof(real), "%.*s/%s",
		                                             (int)(slash - path), path, link)
		                                  : snprintf(real, sizeof(real), "%s", link);
		if (len < 0 || (size_t)len >= sizeof(real))
			return -ENAMETOOLONG;
		path = real;
	}
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp))
		return -ENAMETOOLONG;
	errno = 0;
	if (json_dump_file(root, tmp, flags) < 0 || (have && chmod(tmp, st.st_mode & 07777) < 0) ||
	    rename(tmp, path) < 0) {
		rc = errno ? -errno : -EIO;
		unlink(tmp);
	}
	return rc;
}

/* What of the index's own files path names (an export over it would
 * destroy it), or NULL. */
static const char *own_file(struct meta *m, const char *path)
{
	const char *what = NULL;
	struct stat a, b;

	if (stat(path, &a) < 0 || !S_ISREG(a.st_mode))
		return NULL;
	if (m->store->engine == STORE_SQLITE && stat(m->db_path, &b) == 0 && a.st_dev == b.st_dev &&
	    a.st_ino == b.st_ino)
		return "the index itself";
	index_lock(m);
	for (struct pool *p = m->pools; p && !what; p = p->next)
		if (p->data_path && stat(p->data_path, &b) == 0 && a.st_dev == b.st_dev &&
		    a.st_ino == b.st_ino)
			what = "a pool's data file";
	index_unlock(m);
	return what;
}

int meta_export_json(struct meta *m, const struct meta_json_opts *o, struct meta_json_result *res,
                     char *err, size_t errlen)
{
	json_t *root = json_object();
	struct meta_pool_info info[64];
	uint64_t skipped = 0;
	char key[80];
	int rc = 0, n;

	memset(res, 0, sizeof(*res));
	if (!root)
		return -ENOMEM;
	const char *own = o->file ? own_file(m, o->file) : NULL;
	if (own) {
		json_decref(root);
		snprintf(err, errlen, "%s is %s: write the export to another file", o->file, own);
		return -EINVAL;
	}
	uint16_t ranks[256];
	for (int rank = -1; (n = meta_rank_list(m, rank, ranks, 256)) > 0;) {
		for (int r = 0; r < n; r++) {
			uint32_t after = 0;
			int np;
			while ((np = meta_pool_list(m, ranks[r], after, info, 64)) > 0) {
				for (int j = 0; j < np; j++) {
					json_t *po = export_pool(m, info[j].id, &skipped);
					if (!po) {
						json_decref(root);
						snprintf(err, errlen, "out of memory");
						return -ENOMEM;
					}
					snprintf(key, sizeof(key), "%d:%s", ranks[r], info[j].ns);
					json_object_set_new(root, key, po);
					res->pools++;
					res->keys += json_array_size(
						json_object_get(po, "key_to_index"));
					after = info[j].id;
				}
			}
		}
		rank = ranks[n - 1];
	}
	size_t flags = JSON_INDENT(4) | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII;
	if (!o->file) {
		rc = json_dumpf(root, stdout, flags) < 0 ? -EIO : 0;
		fflush(stdout);
	} else {
		rc = dump_to(root, o->file, flags);
	}
	json_decref(root);
	if (rc < 0)
		snprintf(err, errlen, "cannot write %s: %s", o->file ? o->file : "standard output",
		         strerror(-rc));
	else if (skipped)
		snprintf(err, errlen, "%llu page names are not UTF-8 and were left out",
		         (unsigned long long)skipped);
	return rc;
}
