/*
 * fuzz_xattr.c - libFuzzer target for the settable pool xattrs
 * (user.pagefs.page_size, user.pagefs.capacity): the value parser
 * meta_parse_size_value() that fs/fs_xattr.c calls, then the setting
 * applied to a real pool with meta_pool_set() as setxattr does.
 *
 * Input: byte 0 chooses the attribute (bit 0: page_size or capacity) and
 * the pool (bit 1: an empty pool, or one holding a committed page); the
 * rest is the value as setxattr hands it over (not NUL-terminated).
 *
 * Checks: an accepted value is a size that formats and parses back to
 * itself, has no NUL before its trailing newlines/NULs, and is not 0. A
 * setting that succeeds reads back exactly as set (getfattr shows what
 * setfattr wrote), keeps whole pages, and the data file covers the
 * capacity; one that fails changes nothing. Both pools get their
 * settings back after each input.
 */
#define FUZZ_NAME "fuzz_xattr"
#include "tests/fuzz/fuzz_index.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define SLOT 4096ULL
#define SLOTS 16ULL

static struct fuzz_index fi;
static uint32_t pool_empty, pool_full;

static void setup(void)
{
	struct meta_pool_info info;
	struct meta_resv r;

	fuzz_index_open(&fi);
	CHECK(meta_pool_create(fi.m, 0, "kv", SLOT, SLOT * SLOTS, &info) == 0, "pool 0/kv");
	pool_empty = info.id;
	CHECK(meta_pool_create(fi.m, 0, "full", SLOT, SLOT * SLOTS, &info) == 0, "pool 0/full");
	pool_full = info.id;
	CHECK(meta_page_reserve(fi.m, pool_full, "page", 0, &r) == 0, "reserve");
	CHECK(meta_page_commit(fi.m, &r, 0, 0) == 0, "commit");
}

/* The contract of the parser alone. */
static void check_parse(const uint8_t *v, size_t n, int rc, uint64_t bytes)
{
	uint64_t again = 0;
	char buf[64];
	size_t end = n;

	CHECK(rc == 0 || rc == -EINVAL, "parse = %d", rc);
	if (rc < 0)
		return;
	while (end > 0 && (v[end - 1] == '\n' || v[end - 1] == '\0'))
		end--;
	CHECK(end > 0 && !memchr(v, '\0', end), "value with an inner NUL accepted");
	CHECK(v[0] >= '0' && v[0] <= '9', "value not starting with a digit accepted");
	CHECK(bytes > 0, "0 accepted");
	meta_format_size(bytes, buf, sizeof(buf));
	CHECK(meta_parse_size_value(buf, strlen(buf), &again) == 0 && again == bytes,
	      "%llu -> '%s' -> %llu", (unsigned long long)bytes, buf, (unsigned long long)again);
}

static void check_set(uint32_t pool, int page_size, uint64_t bytes, int rc,
                      const struct meta_pool_info *before)
{
	struct meta_pool_info after;
	struct stat st;

	CHECK(meta_pool_get(fi.m, pool, &after) == 0, "pool gone");
	CHECK(rc == 0 || rc == -EINVAL || rc == -EBUSY || rc == -EFBIG || rc == -ENOSPC,
	      "meta_pool_set(%s = %llu) = %d", page_size ? "page_size" : "capacity",
	      (unsigned long long)bytes, rc);
	if (rc < 0) {
		CHECK(after.slot_size == before->slot_size && after.capacity == before->capacity,
		      "failed set (%d) changed the pool", rc);
		return;
	}
	if (page_size)
		CHECK(after.slot_size == bytes, "page_size %llu reads back as %llu",
		      (unsigned long long)bytes, (unsigned long long)after.slot_size);
	else
		CHECK(after.capacity * after.slot_size == bytes,
		      "capacity %llu reads back as %llu x %llu", (unsigned long long)bytes,
		      (unsigned long long)after.capacity, (unsigned long long)after.slot_size);
	CHECK(after.capacity >= 1 && after.capacity >= after.used_slots, "capacity %llu, used %llu",
	      (unsigned long long)after.capacity, (unsigned long long)after.used_slots);
	CHECK(fstat(after.data_fd, &st) == 0 &&
	              (uint64_t)st.st_size >= after.capacity * after.slot_size,
	      "data file of %lld bytes for %llu x %llu", (long long)st.st_size,
	      (unsigned long long)after.capacity, (unsigned long long)after.slot_size);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct meta_pool_info before;
	uint64_t bytes = 0;
	uint32_t pool;
	int page_size, rc;

	if (size < 1)
		return 0;
	if (!fi.m)
		setup();
	page_size = !(data[0] & 1);
	pool = data[0] & 2 ? pool_full : pool_empty;
	rc = meta_parse_size_value((const char *)data + 1, size - 1, &bytes);
	check_parse(data + 1, size - 1, rc, bytes);
	if (rc < 0)
		return 0;
	CHECK(meta_pool_get(fi.m, pool, &before) == 0, "pool gone");
	rc = meta_pool_set(fi.m, pool, page_size ? bytes : 0, page_size ? 0 : bytes);
	check_set(pool, page_size, bytes, rc, &before);
	/* Back to 16 slots of 4096 (one call: each value alone may not fit). */
	rc = meta_pool_set(fi.m, pool, SLOT, SLOT * SLOTS);
	CHECK(rc == 0, "restoring the pool: %d", rc);
	return 0;
}
