/*
 * test_pool.c - ranks and pools: creation with defaults or explicit sizes,
 * settings, removal, the data files on the backing directory (SGLang
 * HiCacheHF3FS names and layout) and meta_checksum_range over them.
 */
#include "fixture.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

TestSuite(pool, .init = fx_setup, .fini = fx_teardown, .timeout = 30);
TestSuite(pool_noevict, .init = fx_setup_noevict, .fini = fx_teardown, .timeout = 30);

static struct meta_pool_info create_ok(int rank, const char *ns, uint64_t slot_size,
                                       uint64_t capacity_bytes)
{
	struct meta_pool_info pi;
	int ret = meta_pool_create(fx.m, rank, ns, slot_size, capacity_bytes, &pi);

	cr_assert_eq(ret, 0, "create pool %d/%s (slot %llu, capacity %llu): %s", rank, ns,
	             (unsigned long long)slot_size, (unsigned long long)capacity_bytes,
	             strerror(-ret));
	return pi;
}

static void assert_create_fails(int rank, const char *ns, int want)
{
	struct meta_pool_info pi;
	int ret = meta_pool_create(fx.m, rank, ns, 0, 0, &pi);

	cr_assert_eq(ret, want, "create pool %d/%s: %d (%s), want %d (%s)", rank, ns, ret,
	             ret ? strerror(-ret) : "created", want, strerror(-want));
}

static struct stat stat_ok(const char *path)
{
	struct stat st;

	cr_assert_eq(stat(path, &st), 0, "stat %s: %s", path, strerror(errno));
	return st;
}

static void expect_path(char *buf, size_t len, const char *file)
{
	snprintf(buf, len, "%s/%s", fx.backing, file);
}

/* Deterministic pseudo-random bytes (xorshift), so failures reproduce. */
static void fill_random(unsigned char *buf, size_t len, uint64_t seed)
{
	uint64_t x = seed | 1;

	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		buf[i] = (unsigned char)x;
	}
}

static void pwrite_ok(int fd, const void *buf, size_t len, uint64_t off)
{
	ssize_t n = pwrite(fd, buf, len, (off_t)off);

	cr_assert_eq(n, (ssize_t)len, "pwrite %zu bytes at %llu: %zd (%s)", len,
	             (unsigned long long)off, n, n < 0 ? strerror(errno) : "short");
}

/* Data files in the backing directory (not the owner mark). */
static int count_data_files(void)
{
	DIR *d = opendir(fx.backing);
	int n = 0;

	cr_assert_not_null(d, "opendir %s: %s", fx.backing, strerror(errno));
	for (struct dirent *e; (e = readdir(d));)
		n += strncmp(e->d_name, "hicache.", 8) == 0;
	closedir(d);
	return n;
}

/* ---- creation ---- */

Test(pool, create_takes_the_mount_defaults)
{
	struct meta_pool_info pi = pool_info(fx.pool);
	char want[PATH_MAX];

	cr_assert_eq(pi.id, fx.pool, "pool id %u, want %u", pi.id, fx.pool);
	cr_assert_eq(pi.rank, 0, "rank %u", pi.rank);
	cr_assert_str_eq(pi.ns, "kv", "ns \"%s\"", pi.ns);
	cr_assert_eq(pi.slot_size, FX_SLOT_SIZE, "slot_size %llu, want the default %d",
	             (unsigned long long)pi.slot_size, FX_SLOT_SIZE);
	cr_assert_eq(pi.capacity, FX_SLOTS, "capacity %llu slots, want the default %d",
	             (unsigned long long)pi.capacity, FX_SLOTS);
	cr_assert_eq(pi.pages + pi.bytes + pi.used_slots, 0, "a new pool is not empty");
	cr_assert_geq(pi.data_fd, 0, "new pool has no data fd");
	expect_path(want, sizeof(want), "hicache.0.bin");
	cr_assert_str_eq(pi.data_file, want, "data file %s, want %s", pi.data_file, want);

	struct meta_pool_info found;
	int ret = meta_pool_find(fx.m, 0, "kv", &found);
	cr_assert_eq(ret, 0, "find 0/kv: %s", strerror(-ret));
	cr_assert_eq(found.id, fx.pool, "find 0/kv returned pool %u", found.id);
}

Test(pool, create_takes_explicit_sizes)
{
	struct meta_pool_info pi = create_ok(2, "mamba", 8192, 8 * 8192);

	cr_assert_eq(pi.slot_size, 8192, "slot_size %llu", (unsigned long long)pi.slot_size);
	cr_assert_eq(pi.capacity, 8, "capacity %llu slots, want 8",
	             (unsigned long long)pi.capacity);
	struct meta_pool_info got = pool_info(pi.id);
	cr_assert_eq(got.slot_size, 8192, "get: slot_size %llu", (unsigned long long)got.slot_size);
	cr_assert_eq(got.capacity, 8, "get: capacity %llu", (unsigned long long)got.capacity);
	cr_assert_eq(got.rank, 2, "get: rank %u", got.rank);
	cr_assert_str_eq(got.ns, "mamba", "get: ns %s", got.ns);
	cr_assert_neq(pi.id, fx.pool, "two pools share id %u", pi.id);
}

Test(pool, kv_data_file_is_prefix_dot_rank_dot_bin_of_capacity_size)
{
	struct meta_pool_info pi = create_ok(3, "kv", 8192, 4 * 8192);
	char want[PATH_MAX];

	expect_path(want, sizeof(want), "hicache.3.bin");
	cr_assert_str_eq(pi.data_file, want, "data file %s, want %s", pi.data_file, want);
	struct stat st = stat_ok(want);
	cr_assert(S_ISREG(st.st_mode), "%s is not a regular file", want);
	cr_assert_eq(st.st_size, 4 * 8192, "%s is %lld bytes, want the capacity %d", want,
	             (long long)st.st_size, 4 * 8192);
}

Test(pool, other_data_files_end_in_the_namespace)
{
	struct meta_pool_info pi = create_ok(3, "deepseek_v4_c4_indexer", 0, 0);
	char want[PATH_MAX];

	expect_path(want, sizeof(want), "hicache.3.bin.deepseek_v4_c4_indexer");
	cr_assert_str_eq(pi.data_file, want, "data file %s, want %s", pi.data_file, want);
	struct stat st = stat_ok(want);
	cr_assert_eq(st.st_size, FX_SLOTS * FX_SLOT_SIZE, "%s is %lld bytes", want,
	             (long long)st.st_size);
}

Test(pool, data_file_is_sparse)
{
	uint64_t cap = UINT64_C(1) << 30;
	struct meta_pool_info pi = create_ok(1, "kv", 16 << 20, cap);
	struct stat st = stat_ok(pi.data_file);

	cr_assert_eq((uint64_t)st.st_size, cap, "size %lld, want 1G", (long long)st.st_size);
	cr_assert_lt((uint64_t)st.st_blocks * 512, UINT64_C(1) << 20,
	             "a new 1G pool allocated %lld bytes on disk", (long long)st.st_blocks * 512);
}

Test(pool, data_fd_is_the_data_file_open_for_writing)
{
	struct meta_pool_info pi = pool_info(fx.pool);
	struct stat a = stat_ok(pi.data_file), b;

	cr_assert_eq(fstat(pi.data_fd, &b), 0, "fstat data_fd %d: %s", pi.data_fd, strerror(errno));
	cr_assert(a.st_dev == b.st_dev && a.st_ino == b.st_ino, "data_fd is not %s", pi.data_file);
	int fl = fcntl(pi.data_fd, F_GETFL);
	cr_assert_eq(fl & O_ACCMODE, O_RDWR, "data_fd flags %#x, want O_RDWR", fl);
}

Test(pool, create_adopts_an_existing_data_file_without_losing_bytes)
{
	char path[PATH_MAX];
	unsigned char buf[512], back[512];

	expect_path(path, sizeof(path), "hicache.9.bin.swa");
	int fd = open(path, O_RDWR | O_CREAT, 0644);
	cr_assert_geq(fd, 0, "create %s: %s", path, strerror(errno));
	fill_random(buf, sizeof(buf), 9);
	pwrite_ok(fd, buf, sizeof(buf), 2 * FX_SLOT_SIZE);
	close(fd);

	struct meta_pool_info pi = create_ok(9, "swa", 0, 0);
	cr_assert_eq(pread(pi.data_fd, back, sizeof(back), 2 * FX_SLOT_SIZE), (ssize_t)sizeof(back),
	             "pread: %s", strerror(errno));
	cr_assert_arr_eq(back, buf, sizeof(buf), "existing bytes of %s changed", path);
	cr_assert_eq(stat_ok(path).st_size, FX_SLOTS * FX_SLOT_SIZE, "file not grown to capacity");
}

Test(pool, duplicate_create_fails_with_eexist_and_leaves_the_pool_alone)
{
	struct meta_pool_info pi = pool_info(fx.pool);
	struct meta_pool_info dup;
	unsigned char buf[256], back[256];

	fill_random(buf, sizeof(buf), 5);
	pwrite_ok(pi.data_fd, buf, sizeof(buf), 5 * FX_SLOT_SIZE);
	int ret = meta_pool_create(fx.m, 0, "kv", FX_SLOT_SIZE, 64 * FX_SLOT_SIZE, &dup);
	cr_assert_eq(ret, -EEXIST, "second create of 0/kv: %d (%s), want -EEXIST", ret,
	             ret ? strerror(-ret) : "created");

	struct meta_pool_info after = pool_info(fx.pool);
	cr_assert_eq(after.capacity, FX_SLOTS, "capacity changed to %llu",
	             (unsigned long long)after.capacity);
	struct stat st = stat_ok(pi.data_file);
	cr_assert_eq(st.st_size, FX_SLOTS * FX_SLOT_SIZE,
	             "a refused create resized the data file to %lld bytes", (long long)st.st_size);
	cr_assert_eq(pread(pi.data_fd, back, sizeof(back), 5 * FX_SLOT_SIZE), (ssize_t)sizeof(back),
	             "pread: %s", strerror(errno));
	cr_assert_arr_eq(back, buf, sizeof(buf), "a refused create changed page bytes");
}

Test(pool, create_rejects_bad_ranks_and_namespaces)
{
	assert_create_fails(-1, "kv", -EINVAL);
	assert_create_fails(META_RANK_MAX + 1, "kv", -EINVAL);
	assert_create_fails(1, "", -EINVAL);
	assert_create_fails(1, "KV", -EINVAL);
	assert_create_fails(1, "a/b", -EINVAL);
	assert_create_fails(1, "..", -EINVAL);
	cr_assert_eq(count_data_files(), 1, "refused creates left files in %s", fx.backing);
	cr_assert_eq(meta_rank_exists(fx.m, 1), 0, "a refused create made rank 1");
}

Test(pool, create_rejects_a_capacity_below_one_slot)
{
	struct meta_pool_info pi;
	int ret = meta_pool_create(fx.m, 1, "kv", 8192, 4096, &pi);

	cr_assert_eq(ret, -EINVAL, "pool of 4096 bytes with 8192-byte slots: %d, want -EINVAL",
	             ret);
}

Test(pool, create_makes_its_rank)
{
	cr_assert_eq(meta_rank_exists(fx.m, 7), 0, "rank 7 exists before any pool");
	create_ok(7, "kv", 0, 0);
	cr_assert_eq(meta_rank_exists(fx.m, 7), 1, "pool 7/kv made no rank 7");
	create_ok(7, "mamba", 0, 0);
}

Test(pool, missing_pools_are_not_found)
{
	struct meta_pool_info pi;
	int ret = meta_pool_find(fx.m, 0, "mamba", &pi);

	cr_assert_eq(ret, -ENOENT, "find 0/mamba: %d, want -ENOENT", ret);
	ret = meta_pool_find(fx.m, 1, "kv", &pi);
	cr_assert_eq(ret, -ENOENT, "find 1/kv: %d, want -ENOENT", ret);
	ret = meta_pool_get(fx.m, fx.pool + 1000, &pi);
	cr_assert_eq(ret, -ENOENT, "get pool %u: %d, want -ENOENT", fx.pool + 1000, ret);
}

/* ---- settings ---- */

Test(pool, page_size_can_change_while_the_pool_is_empty)
{
	int ret = meta_pool_set(fx.m, fx.pool, 8192, 16 * 8192);

	cr_assert_eq(ret, 0, "set slot 8192 capacity 128K on an empty pool: %s", strerror(-ret));
	struct meta_pool_info pi = pool_info(fx.pool);
	cr_assert_eq(pi.slot_size, 8192, "slot_size %llu", (unsigned long long)pi.slot_size);
	cr_assert_eq(pi.capacity, 16, "capacity %llu slots", (unsigned long long)pi.capacity);
	struct stat st = stat_ok(pi.data_file);
	cr_assert_eq(st.st_size, 16 * 8192, "data file %lld bytes, want the new capacity",
	             (long long)st.st_size);
	struct meta_resv r = reserve_ok(fx.pool, "a", 0);
	cr_assert_eq(r.slot_size, 8192, "reservation slot_size %llu",
	             (unsigned long long)r.slot_size);
}

Test(pool, page_size_cannot_change_while_the_pool_has_pages)
{
	put_page(fx.pool, "a", 1, 1);
	int ret = meta_pool_set(fx.m, fx.pool, 8192, 16 * 8192);

	cr_assert_eq(ret, -EBUSY, "set page size on a pool with a page: %d, want -EBUSY", ret);
	struct meta_pool_info pi = pool_info(fx.pool);
	cr_assert_eq(pi.slot_size, FX_SLOT_SIZE, "slot_size changed to %llu",
	             (unsigned long long)pi.slot_size);
	cr_assert_eq(pi.capacity, FX_SLOTS, "capacity changed to %llu",
	             (unsigned long long)pi.capacity);
}

Test(pool, page_size_cannot_change_while_a_page_is_being_written)
{
	reserve_ok(fx.pool, "a", 0);
	int ret = meta_pool_set(fx.m, fx.pool, 8192, 0);

	cr_assert_eq(ret, -EBUSY, "set page size under a writer: %d, want -EBUSY", ret);
	cr_assert_eq(pool_info(fx.pool).slot_size, FX_SLOT_SIZE, "slot size changed");
}

Test(pool, capacity_cannot_drop_below_the_slots_in_use)
{
	put_pages(fx.pool, 3, NULL);
	int ret = meta_pool_set(fx.m, fx.pool, 0, 2 * FX_SLOT_SIZE);

	cr_assert_eq(ret, -EBUSY, "capacity 2 slots under 3 pages: %d, want -EBUSY", ret);
	cr_assert_eq(pool_info(fx.pool).capacity, FX_SLOTS, "capacity changed");
	ret = meta_pool_set(fx.m, fx.pool, 0, 3 * FX_SLOT_SIZE);
	cr_assert_eq(ret, 0, "capacity 3 slots under 3 pages: %s", strerror(-ret));
	cr_assert_eq(pool_info(fx.pool).capacity, 3, "capacity %llu, want 3",
	             (unsigned long long)pool_info(fx.pool).capacity);
}

/* Found by fuzz_xattr: setfattr capacity=6K on a pool of 4K pages was
 * accepted and read back as 4096. */
Test(pool, settings_that_are_not_whole_pages_are_refused_and_change_nothing)
{
	int ret = meta_pool_set(fx.m, fx.pool, 0, FX_SLOT_SIZE + FX_SLOT_SIZE / 2);

	cr_assert_eq(ret, -EINVAL, "capacity of 1.5 slots: %d, want -EINVAL", ret);
	ret = meta_pool_set(fx.m, fx.pool, 3 * FX_SLOT_SIZE, 0);
	cr_assert_eq(ret, -EINVAL, "slot of 3x4096 in a capacity of 16x4096: %d, want -EINVAL",
	             ret);
	struct meta_pool_info pi = pool_info(fx.pool);
	cr_assert(pi.slot_size == FX_SLOT_SIZE && pi.capacity == FX_SLOTS,
	          "pool changed to %llu slots of %llu", (unsigned long long)pi.capacity,
	          (unsigned long long)pi.slot_size);
	ret = meta_pool_set(fx.m, fx.pool, 3 * FX_SLOT_SIZE, 9 * FX_SLOT_SIZE);
	cr_assert_eq(ret, 0, "3 slots of 3x4096: %s", strerror(-ret));
	cr_assert_eq(pool_info(fx.pool).capacity, 3);
}

Test(pool_noevict, growing_capacity_makes_room_in_a_full_pool)
{
	put_pages(fx.pool, FX_SLOTS, NULL);
	assert_reserve_fails(fx.pool, "x", -ENOSPC);
	int ret = meta_pool_set(fx.m, fx.pool, 0, 2 * FX_SLOTS * FX_SLOT_SIZE);
	cr_assert_eq(ret, 0, "grow capacity: %s", strerror(-ret));

	for (int i = 0; i < FX_SLOTS; i++) {
		char name[32];

		snprintf(name, sizeof(name), "more-%02d", i);
		struct meta_resv r = reserve_ok(fx.pool, name, 0);
		cr_assert_geq(r.slot, FX_SLOTS, "%s got slot %llu, in use by an old page", name,
		              (unsigned long long)r.slot);
	}
	assert_reserve_fails(fx.pool, "x", -ENOSPC);
	struct stat st = stat_ok(pool_info(fx.pool).data_file);
	cr_assert_eq(st.st_size, 2 * FX_SLOTS * FX_SLOT_SIZE, "data file not grown: %lld bytes",
	             (long long)st.st_size);
}

Test(pool, settings_survive_reopen)
{
	struct meta_pool_info b = create_ok(4, "mamba", 0, 0);
	int ret = meta_pool_set(fx.m, b.id, 8192, 4 * 8192);

	cr_assert_eq(ret, 0, "set 4/mamba: %s", strerror(-ret));
	fx_reopen();
	struct meta_pool_info pi;
	ret = meta_pool_find(fx.m, 4, "mamba", &pi);
	cr_assert_eq(ret, 0, "find 4/mamba after reopen: %s", strerror(-ret));
	cr_assert_eq(pi.id, b.id, "pool id %u after reopen, was %u", pi.id, b.id);
	cr_assert_eq(pi.slot_size, 8192, "slot_size %llu after reopen",
	             (unsigned long long)pi.slot_size);
	cr_assert_eq(pi.capacity, 4, "capacity %llu after reopen", (unsigned long long)pi.capacity);
	cr_assert_str_eq(pi.data_file, b.data_file, "data file moved");
	cr_assert_geq(pi.data_fd, 0, "no data fd after reopen");
}

/* ---- removal ---- */

Test(pool, empty_pool_can_be_removed)
{
	struct meta_pool_info b = create_ok(1, "mamba", 0, 0);
	struct meta_pool_info pi;

	int ret = meta_pool_remove(fx.m, b.id);
	cr_assert_eq(ret, 0, "remove empty pool 1/mamba: %s", strerror(-ret));
	cr_assert_eq(meta_pool_find(fx.m, 1, "mamba", &pi), -ENOENT, "removed pool still found");
	cr_assert_eq(meta_pool_get(fx.m, b.id, &pi), -ENOENT, "removed pool still gettable");
	ret = meta_pool_remove(fx.m, b.id);
	cr_assert_eq(ret, -ENOENT, "second remove: %d, want -ENOENT", ret);

	fx_reopen();
	cr_assert_eq(meta_pool_find(fx.m, 1, "mamba", &pi), -ENOENT, "removed pool came back");
	create_ok(1, "mamba", 0, 0);
}

Test(pool, pool_with_pages_cannot_be_removed)
{
	put_page(fx.pool, "a", 1, 1);
	int ret = meta_pool_remove(fx.m, fx.pool);

	cr_assert_eq(ret, -ENOTEMPTY, "remove pool with a page: %d, want -ENOTEMPTY", ret);
	lookup_ok(fx.pool, "a");
	cr_assert_geq(fcntl(pool_info(fx.pool).data_fd, F_GETFD), 0, "data fd closed");

	ret = meta_page_unlink(fx.m, fx.pool, "a");
	cr_assert_eq(ret, 0, "unlink a: %s", strerror(-ret));
	ret = meta_pool_remove(fx.m, fx.pool);
	cr_assert_eq(ret, 0, "remove the emptied pool: %s", strerror(-ret));
}

Test(pool, pool_with_a_page_being_written_cannot_be_removed)
{
	struct meta_resv r = reserve_ok(fx.pool, "a", 0);
	int ret = meta_pool_remove(fx.m, fx.pool);

	cr_assert_eq(ret, -ENOTEMPTY, "remove pool under a writer: %d, want -ENOTEMPTY", ret);
	commit_ok(&r, "a", 1, 1);
	lookup_ok(fx.pool, "a");
}

/* ---- ranks ---- */

Test(pool, ranks_are_created_once_and_removed_when_empty)
{
	int ret = meta_rank_create(fx.m, 5);

	cr_assert_eq(ret, 0, "create rank 5: %s", strerror(-ret));
	cr_assert_eq(meta_rank_exists(fx.m, 5), 1, "rank 5 missing after create");
	ret = meta_rank_create(fx.m, 5);
	cr_assert_eq(ret, -EEXIST, "second create of rank 5: %d, want -EEXIST", ret);
	ret = meta_rank_remove(fx.m, 5);
	cr_assert_eq(ret, 0, "remove rank 5: %s", strerror(-ret));
	cr_assert_eq(meta_rank_exists(fx.m, 5), 0, "rank 5 still exists");
	ret = meta_rank_remove(fx.m, 5);
	cr_assert_eq(ret, -ENOENT, "second remove of rank 5: %d, want -ENOENT", ret);

	ret = meta_rank_create(fx.m, META_RANK_MAX + 1);
	cr_assert_eq(ret, -EINVAL, "create rank 65536: %d, want -EINVAL", ret);
	ret = meta_rank_create(fx.m, META_RANK_MAX);
	cr_assert_eq(ret, 0, "create rank 65535: %s", strerror(-ret));
}

Test(pool, rank_with_a_pool_cannot_be_removed)
{
	int ret = meta_rank_remove(fx.m, 0);

	cr_assert_eq(ret, -ENOTEMPTY, "remove rank 0 holding 0/kv: %d, want -ENOTEMPTY", ret);
	cr_assert_eq(meta_rank_exists(fx.m, 0), 1, "rank 0 vanished");
}

Test(pool, empty_ranks_survive_reopen)
{
	int ret = meta_rank_create(fx.m, 42);

	cr_assert_eq(ret, 0, "create rank 42: %s", strerror(-ret));
	fx_reopen();
	cr_assert_eq(meta_rank_exists(fx.m, 42), 1, "empty rank 42 lost at reopen");
	cr_assert_eq(meta_rank_exists(fx.m, 0), 1, "rank 0 lost at reopen");
	cr_assert_eq(meta_rank_exists(fx.m, 41), 0, "rank 41 appeared");
}

/* ---- page bytes ---- */

Test(pool, checksum_range_is_xxh3_of_the_bytes_written_at_the_slot)
{
	struct meta_pool_info pi = pool_info(fx.pool);
	unsigned char buf[3000];
	uint64_t sum = 0;

	fill_random(buf, sizeof(buf), 42);
	pwrite_ok(pi.data_fd, buf, sizeof(buf), 5 * pi.slot_size);
	int ret = meta_checksum_range(pi.data_fd, 5 * pi.slot_size, sizeof(buf), &sum);
	cr_assert_eq(ret, 0, "checksum slot 5: %s", strerror(-ret));
	cr_assert_eq(sum, XXH3_64bits(buf, sizeof(buf)), "checksum %016llx, XXH3 %016llx",
	             (unsigned long long)sum, (unsigned long long)XXH3_64bits(buf, sizeof(buf)));

	/* A different slot holds different (zero) bytes. */
	ret = meta_checksum_range(pi.data_fd, 6 * pi.slot_size, sizeof(buf), &sum);
	cr_assert_eq(ret, 0, "checksum slot 6: %s", strerror(-ret));
	cr_assert_neq(sum, XXH3_64bits(buf, sizeof(buf)), "slot 6 checksummed slot 5's bytes");
}

Test(pool, checksum_range_covers_pages_larger_than_its_read_chunk)
{
	uint64_t slot = 8u << 20, len = (3u << 20) + 4097;
	struct meta_pool_info pi = create_ok(1, "kv", slot, 4 * slot);
	unsigned char *buf = malloc(len);
	uint64_t sum = 0;

	cr_assert_not_null(buf, "malloc %llu", (unsigned long long)len);
	fill_random(buf, len, 7);
	pwrite_ok(pi.data_fd, buf, len, 2 * slot);
	int ret = meta_checksum_range(pi.data_fd, 2 * slot, len, &sum);
	uint64_t want = XXH3_64bits(buf, len);
	free(buf);
	cr_assert_eq(ret, 0, "checksum %llu bytes: %s", (unsigned long long)len, strerror(-ret));
	cr_assert_eq(sum, want, "checksum of %llu bytes %016llx, XXH3 %016llx",
	             (unsigned long long)len, (unsigned long long)sum, (unsigned long long)want);
}

Test(pool, checksum_read_keeps_the_bytes_and_sums_as_checksum_range)
{
	uint64_t slot = 1u << 20, len = slot - 333, sum = 0, want = 0;
	struct meta_pool_info pi = create_ok(1, "kv", slot, 4 * slot);
	unsigned char *buf = malloc(len), *got = malloc(len);

	cr_assert(buf && got, "malloc %llu", (unsigned long long)len);
	fill_random(buf, len, 9);
	pwrite_ok(pi.data_fd, buf, len, 3 * slot);
	int ret = meta_checksum_read(pi.data_fd, 3 * slot, len, got, &sum);
	cr_assert_eq(ret, 0, "checksum_read: %s", strerror(-ret));
	cr_assert_eq(memcmp(got, buf, len), 0, "the kept bytes differ from the slot's");
	ret = meta_checksum_range(pi.data_fd, 3 * slot, len, &want);
	cr_assert_eq(ret, 0, "checksum_range: %s", strerror(-ret));
	cr_assert_eq(sum, want, "checksum_read %016llx, checksum_range %016llx",
	             (unsigned long long)sum, (unsigned long long)want);
	cr_assert_eq(sum, XXH3_64bits(buf, len), "not the XXH3 of the bytes");
	/* past the end of the file: ENODATA, as checksum_range */
	ret = meta_checksum_read(pi.data_fd, 4 * slot - 10, 20, got, &sum);
	cr_assert_eq(ret, -ENODATA, "read past the end: %d, want -ENODATA", ret);
	free(buf);
	free(got);
}

Test(pool, checksum_range_of_nothing_is_the_empty_hash)
{
	uint64_t sum = 0;
	int ret = meta_checksum_range(pool_info(fx.pool).data_fd, 0, 0, &sum);

	cr_assert_eq(ret, 0, "checksum of 0 bytes: %s", strerror(-ret));
	cr_assert_eq(sum, XXH3_64bits(NULL, 0), "checksum of 0 bytes %016llx",
	             (unsigned long long)sum);
}

Test(pool, checksum_range_past_the_end_of_the_file_fails_with_eio)
{
	char path[PATH_MAX];
	unsigned char buf[100] = {1};
	uint64_t sum = 0;

	snprintf(path, sizeof(path), "%s/short", fx.dir);
	int fd = open(path, O_RDWR | O_CREAT, 0644);
	cr_assert_geq(fd, 0, "create %s: %s", path, strerror(errno));
	pwrite_ok(fd, buf, sizeof(buf), 0);
	int ret = meta_checksum_range(fd, 0, 200, &sum);
	cr_assert_eq(ret, -ENODATA, "checksum of 200 bytes of a 100-byte file: %d, want -ENODATA",
	             ret);
	ret = meta_checksum_range(fd, 100, 1, &sum);
	cr_assert_eq(ret, -ENODATA, "checksum at EOF: %d, want -ENODATA", ret);
	close(fd);

	ret = meta_checksum_range(-1, 0, 1, &sum);
	cr_assert_eq(ret, -EBADF, "checksum of fd -1: %d, want -EBADF", ret);
}

/* ---- counters and settings ---- */

Test(pool, io_counters_add_up_per_pool)
{
	struct meta_pool_info b = create_ok(1, "kv", 0, 0);

	meta_count_io(fx.m, fx.pool, 100, 200);
	meta_count_io(fx.m, fx.pool, 1, 2);
	meta_count_io(fx.m, b.id, 1000, 0);
	struct meta_pool_info a = pool_info(fx.pool);
	cr_assert_eq(a.bytes_read, 101, "pool 0/kv read %llu", (unsigned long long)a.bytes_read);
	cr_assert_eq(a.bytes_written, 202, "pool 0/kv written %llu",
	             (unsigned long long)a.bytes_written);
	b = pool_info(b.id);
	cr_assert_eq(b.bytes_read, 1000, "pool 1/kv read %llu", (unsigned long long)b.bytes_read);

	struct meta_stats s;
	meta_get_stats(fx.m, &s);
	cr_assert_eq(s.bytes_read, 1101, "total read %llu", (unsigned long long)s.bytes_read);
	cr_assert_eq(s.bytes_written, 202, "total written %llu",
	             (unsigned long long)s.bytes_written);
}

Test(pool, config_reports_the_settings_as_opened)
{
	const struct meta_config *c = meta_config(fx.m);

	cr_assert_not_null(c, "meta_config returned NULL");
	cr_assert_eq(c->default_slot_size, FX_SLOT_SIZE, "default_slot_size %llu",
	             (unsigned long long)c->default_slot_size);
	cr_assert_eq(c->default_capacity, FX_SLOTS * FX_SLOT_SIZE, "default_capacity %llu",
	             (unsigned long long)c->default_capacity);
	cr_assert_str_eq(c->prefix, "hicache", "prefix %s", c->prefix);
	cr_assert_str_eq(c->backing, fx.backing, "backing %s", c->backing);
	cr_assert_eq(c->evict, META_EVICT_LRU, "evict %d", c->evict);
	cr_assert_eq(c->verify, META_VERIFY_FIRST, "verify %d", c->verify);
}
