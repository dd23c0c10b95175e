/*
 * fs_xattr.c - the user.pagefs.* extended attributes: where a page's
 * bytes live (so a client can read the data file directly), a pool's
 * settings and counters and where its presence table is (meta_pool_presence),
 * and the root's stats JSON and daemon pid.
 *
 * Values are text without a trailing NUL. getxattr/listxattr follow the
 * usual size protocol: size 0 asks for the length, a smaller buffer gets
 * ERANGE. Only a pool's page_size and capacity can be set (sizes such as
 * "64K"); every other pagefs name is read-only (EPERM) and names outside
 * user.pagefs.* are not supported (getxattr ENODATA, setxattr ENOTSUP).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>

#include "fs/fs_inode.h"

#define XA_PREFIX "user.pagefs."
#define XA_PREFIX_LEN (sizeof(XA_PREFIX) - 1)

static const char *const page_keys[] = {"slot", "checksum", "data_file", "offset", NULL};
static const char *const pool_keys[] = {"page_size",         "capacity",  "pages",  "bytes",
                                        "used_slots",        "hits",      "misses", "evictions",
                                        "checksum_failures", "data_file", NULL};
static const char *const root_keys[] = {"stats", "pid", NULL};
static const char *const no_keys[] = {NULL};

static const char *const *keys_of(enum fs_kind kind)
{
	switch (kind) {
	case FS_PAGE:
		return page_keys;
	case FS_POOL:
		return pool_keys;
	case FS_ROOT:
		return root_keys;
	default:
		return no_keys;
	}
}

/* A pool's presence table: where the file is (read-only, not listed:
 * asking makes the table, which `getfattr -d` should not). */
#define XA_PRESENCE "presence"

/* The key of a user.pagefs.* name known for kind, or NULL. */
static const char *known_key(enum fs_kind kind, const char *name)
{
	if (strncmp(name, XA_PREFIX, XA_PREFIX_LEN) != 0)
		return NULL;
	name += XA_PREFIX_LEN;
	if (kind == FS_POOL && strcmp(name, XA_PRESENCE) == 0)
		return XA_PRESENCE;
	for (const char *const *k = keys_of(kind); *k; k++)
		if (strcmp(*k, name) == 0)
			return *k;
	return NULL;
}

/* A malloc'd copy of s as the value. 0 or -ENOMEM. */
static int set_str(const char *s, char **val, size_t *len)
{
	*len = strlen(s);
	*val = strdup(s);
	return *val ? 0 : -ENOMEM;
}

static int set_u64(uint64_t v, char **val, size_t *len)
{
	char buf[24];

	snprintf(buf, sizeof(buf), "%" PRIu64, v);
	return set_str(buf, val, len);
}

static int page_value(struct fs_mount *fs, uint64_t page_id, const char *key, char **val,
                      size_t *len)
{
	struct meta_pool_info pool;
	struct meta_page_info p;
	char hex[24];
	int ret = meta_page_get(fs->meta, page_id, &p);

	if (ret < 0)
		return ret;
	if (strcmp(key, "slot") == 0)
		return set_u64(p.slot, val, len);
	if (strcmp(key, "checksum") == 0) {
		if (!p.has_checksum)
			return -ENODATA;
		snprintf(hex, sizeof(hex), "%016" PRIx64, p.checksum);
		return set_str(hex, val, len);
	}
	ret = meta_pool_get(fs->meta, p.pool_id, &pool);
	if (ret < 0)
		return ret;
	if (strcmp(key, "data_file") == 0)
		return set_str(pool.data_file, val, len);
	return set_u64(p.slot * pool.slot_size, val, len); /* offset */
}

/* A numeric pool attribute; 0, or -ENODATA for data_file. */
static int pool_num(const struct meta_pool_info *p, const char *key, uint64_t *v)
{
	if (strcmp(key, "page_size") == 0)
		*v = p->slot_size;
	else if (strcmp(key, "capacity") == 0)
		*v = p->capacity * p->slot_size;
	else if (strcmp(key, "pages") == 0)
		*v = p->pages;
	else if (strcmp(key, "bytes") == 0)
		*v = p->bytes;
	else if (strcmp(key, "used_slots") == 0)
		*v = p->used_slots;
	else if (strcmp(key, "hits") == 0)
		*v = p->hits;
	else if (strcmp(key, "misses") == 0)
		*v = p->misses;
	else if (strcmp(key, "evictions") == 0)
		*v = p->evictions;
	else if (strcmp(key, "checksum_failures") == 0)
		*v = p->checksum_failures;
	else
		return -ENODATA;
	return 0;
}

static int pool_value(struct fs_mount *fs, uint32_t pool_id, const char *key, char **val,
                      size_t *len)
{
	struct meta_pool_info p;
	uint64_t v;
	int ret = meta_pool_get(fs->meta, pool_id, &p);

	if (ret < 0)
		return ret;
	if (strcmp(key, XA_PRESENCE) == 0) {
		char path[4096];
		ret = meta_pool_presence(fs->meta, pool_id, path, sizeof(path));
		/* A mount without tables: as for a name it does not know. */
		return ret == -EOPNOTSUPP ? -ENODATA : ret < 0 ? ret : set_str(path, val, len);
	}
	if (strcmp(key, "data_file") == 0)
		return set_str(p.data_file, val, len);
	ret = pool_num(&p, key, &v);
	return ret < 0 ? ret : set_u64(v, val, len);
}

static int root_value(struct fs_mount *fs, const char *key, char **val, size_t *len)
{
	if (strcmp(key, "pid") == 0)
		return set_u64((uint64_t)fs->pid, val, len);
	*val = fs_stats_json(fs);
	if (!*val)
		return -ENOMEM;
	*len = strlen(*val);
	return 0;
}

/* Replies a value or a list under the size protocol. */
static void reply_sized(fuse_req_t req, const char *buf, size_t len, size_t size)
{
	if (size == 0)
		fuse_reply_xattr(req, len);
	else if (size < len)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, buf, len);
}

void pagefs_op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	struct fs_mount *fs = fs_of(req);
	uint64_t id;
	enum fs_kind kind = fs_ino_kind(ino, &id);
	const char *key = known_key(kind, name);
	char *val = NULL;
	size_t len = 0;
	int ret;

	if (!key)
		return (void)fuse_reply_err(req, ENODATA);
	if (kind == FS_PAGE)
		ret = page_value(fs, id, key, &val, &len);
	else if (kind == FS_POOL)
		ret = pool_value(fs, (uint32_t)id, key, &val, &len);
	else
		ret = root_value(fs, key, &val, &len);
	if (ret < 0)
		fuse_reply_err(req, -ret);
	else
		reply_sized(req, val, len, size);
	free(val);
}

void pagefs_op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct fs_mount *fs = fs_of(req);
	struct meta_page_info p;
	char list[512];
	size_t len = 0;
	uint64_t id;
	enum fs_kind kind = fs_ino_kind(ino, &id);
	int ret;

	if (kind == FS_PAGE) {
		ret = meta_page_get(fs->meta, id, &p);
		if (ret < 0)
			return (void)fuse_reply_err(req, -ret);
	}
	for (const char *const *k = keys_of(kind); *k; k++) {
		if (kind == FS_PAGE && strcmp(*k, "checksum") == 0 && !p.has_checksum)
			continue;
		len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s", XA_PREFIX, *k) + 1;
	}
	reply_sized(req, list, len, size);
}

static int set_pool(struct fs_mount *fs, uint32_t pool_id, const char *key, const char *value,
                    size_t size)
{
	uint64_t bytes;
	int ret;

	if (strcmp(key, "page_size") != 0 && strcmp(key, "capacity") != 0)
		return -EPERM;
	ret = meta_parse_size_value(value, size, &bytes);
	if (ret < 0)
		return ret;
	if (strcmp(key, "page_size") == 0)
		return meta_pool_set(fs->meta, pool_id, bytes, 0);
	return meta_pool_set(fs->meta, pool_id, 0, bytes);
}

void pagefs_op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                        size_t size, int flags)
{
	uint64_t id;
	enum fs_kind kind = fs_ino_kind(ino, &id);
	const char *key = known_key(kind, name);

	if (!key)
		return (void)fuse_reply_err(req, ENOTSUP);
	if (flags & XATTR_CREATE)
		return (void)fuse_reply_err(req, EEXIST); /* pagefs attributes always exist */
	if (kind != FS_POOL)
		return (void)fuse_reply_err(req, EPERM);
	fuse_reply_err(req, -set_pool(fs_of(req), (uint32_t)id, key, value, size));
}

void pagefs_op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	uint64_t id;

	fuse_reply_err(req, known_key(fs_ino_kind(ino, &id), name) ? EPERM : ENODATA);
}
