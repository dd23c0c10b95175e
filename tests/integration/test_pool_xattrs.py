"""Pool defaults and pool xattrs (user.pagefs.page_size, user.pagefs.capacity)."""
import errno
import os

from pagefs_helpers import (close_quietly, describe, expect_errno, opened, read_page, run_pagefs, write_page,
                            xattr_int)

SMALL = ("--page-size", "64K", "--capacity", "1M")


def test_new_pool_takes_the_mount_default_page_size_and_capacity(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    assert xattr_int(pool, "user.pagefs.page_size") == 65536
    assert xattr_int(pool, "user.pagefs.capacity") == 1048576
    names = os.listxattr(pool)
    assert "user.pagefs.page_size" in names and "user.pagefs.capacity" in names, \
        f"listxattr of a pool should name its settings, got {names}"


def test_pool_page_size_and_capacity_are_settable_as_sizes_or_bytes(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    os.setxattr(pool, "user.pagefs.page_size", b"128K")
    assert xattr_int(pool, "user.pagefs.page_size") == 131072
    os.setxattr(pool, "user.pagefs.page_size", b"131072")
    assert xattr_int(pool, "user.pagefs.page_size") == 131072
    os.setxattr(pool, "user.pagefs.capacity", b"2M")
    assert xattr_int(pool, "user.pagefs.capacity") == 2097152
    os.setxattr(pool, "user.pagefs.capacity", b"4194304")
    assert xattr_int(pool, "user.pagefs.capacity") == 4194304
    # the new page size is the slot size: 128K fits, one byte more does not
    with opened(pool / "p", os.O_WRONLY | os.O_CREAT, 0o644) as fd:
        assert os.pwrite(fd, b"z", 131071) == 1
    assert os.stat(pool / "p").st_size == 131072
    fd = os.open(pool / "q", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        expect_errno(errno.EFBIG, os.pwrite, fd, b"z", 131072, what="write past the 128K slot")
    finally:
        close_quietly(fd)


def test_pool_xattr_with_a_garbage_value_fails_with_einval(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    expect_errno(errno.EINVAL, os.setxattr, pool, "user.pagefs.page_size", b"abc")
    expect_errno(errno.EINVAL, os.setxattr, pool, "user.pagefs.capacity", b"-5")
    # a NUL inside the value must not cut it short into a valid size
    expect_errno(errno.EINVAL, os.setxattr, pool, "user.pagefs.capacity", b"2M\x00junk")
    os.setxattr(pool, "user.pagefs.capacity", b"1M\n\x00")  # trailing newline/NUL: fine
    assert xattr_int(pool, "user.pagefs.page_size") == 65536
    assert xattr_int(pool, "user.pagefs.capacity") == 1048576


def test_changing_page_size_of_a_pool_with_pages_fails_with_ebusy(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    write_page(pool / "p", b"x" * 1000)
    expect_errno(errno.EBUSY, os.setxattr, pool, "user.pagefs.page_size", b"128K")
    assert xattr_int(pool, "user.pagefs.page_size") == 65536
    assert read_page(pool / "p") == b"x" * 1000
    os.unlink(pool / "p")
    os.setxattr(pool, "user.pagefs.page_size", b"128K")
    assert xattr_int(pool, "user.pagefs.page_size") == 131072


def test_pool_create_command_sets_page_size_and_capacity(mount):
    m = mount(*SMALL)
    r = run_pagefs("pool", "create", m.path(1, "indexer"), "--page-size", "1M", "--capacity", "64M")
    assert r.returncode == 0, f"pagefs pool create failed: {describe(r)}"
    pool = m.path(1, "indexer")
    assert os.path.isdir(pool), "pool create should make the rank and pool directories"
    assert "indexer" in os.listdir(m.path(1))
    assert xattr_int(pool, "user.pagefs.page_size") == 1048576
    assert xattr_int(pool, "user.pagefs.capacity") == 67108864
    data = os.urandom(1 << 20)
    write_page(pool / "page", data)
    assert read_page(pool / "page") == data


def test_pool_create_refusing_a_page_size_changes_nothing(mount):
    """pool create of a pool with pages, asking another page size and a
    larger capacity, fails and changes neither (it used to grow the
    capacity and the data file, then refuse the page size)."""
    m = mount(*SMALL)
    pool = m.pool(3, "kv")
    write_page(pool / "p", b"y" * 100)
    cap = xattr_int(pool, "user.pagefs.capacity")
    r = run_pagefs("pool", "create", pool, "--page-size", "128K", "--capacity", "4M")
    assert r.returncode == 1 and "nothing was changed" in r.stderr, describe(r)
    assert xattr_int(pool, "user.pagefs.capacity") == cap
    assert xattr_int(pool, "user.pagefs.page_size") == 65536
    assert read_page(pool / "p") == b"y" * 100


def test_pool_settings_survive_remount(mount):
    m = mount(*SMALL)
    pool = m.pool(2, "swa")
    os.setxattr(pool, "user.pagefs.page_size", b"256K")
    os.setxattr(pool, "user.pagefs.capacity", b"8M")
    m.remount()
    assert xattr_int(pool, "user.pagefs.page_size") == 262144
    assert xattr_int(pool, "user.pagefs.capacity") == 8388608


# Pages keep slot and length in 32 bits (README "Decisions"): at most
# 2^32 - 1 slots of at most 2 GiB in a pool.
def test_pool_geometry_beyond_the_limits_is_refused_with_the_limit(mount):
    m = mount(*SMALL)
    r = run_pagefs("pool", "create", m.path(0, "big"), "--page-size", "4G")
    assert r.returncode == 2, f"a 4 GiB page is over the limit: {describe(r)}"
    assert "at most 2G" in r.stdout + r.stderr, describe(r)
    r = run_pagefs("pool", "create", m.path(0, "big"), "--page-size", "4K", "--capacity", "16T")
    assert r.returncode == 2, f"2^32 pages are over the limit: {describe(r)}"
    assert "at most 4294967295" in r.stdout + r.stderr, describe(r)
    assert not os.path.exists(m.path(0, "big")), "a refused pool was made"

    pool = m.pool(0, "kv")
    os.setxattr(pool, "user.pagefs.capacity", b"8G")  # two pages of 4 GiB would fit
    expect_errno(errno.EINVAL, os.setxattr, pool, "user.pagefs.page_size", b"4G")
    expect_errno(errno.EINVAL, os.setxattr, pool, "user.pagefs.capacity",
                 str(1 << 48).encode())  # 2^32 pages of 64 KiB
    assert xattr_int(pool, "user.pagefs.page_size") == 65536
    assert xattr_int(pool, "user.pagefs.capacity") == 8 << 30

    r = run_pagefs("pool", "create", m.path(0, "huge"), "--page-size", "2G", "--capacity", "2G")
    assert r.returncode == 0, f"2 GiB pages are allowed: {describe(r)}"
    assert xattr_int(m.path(0, "huge"), "user.pagefs.page_size") == 2 << 30


def test_mount_with_a_page_size_or_capacity_over_the_limits_exits_2(mount):
    m = mount(start=False)
    r = m.attempt(opts=["--page-size", "4G"])
    assert r.returncode == 2 and "at most 2G" in r.stdout + r.stderr, describe(r)
    r = m.attempt(opts=["--page-size", "4K", "--capacity", "16T"])
    assert r.returncode == 2 and "at most 4294967295" in r.stdout + r.stderr, describe(r)


def test_pool_counters_are_read_only_and_count_what_happened(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    write_page(pool / "a", b"a" * 1000)
    write_page(pool / "b", b"b" * 3000)
    assert read_page(pool / "a") == b"a" * 1000
    expect_errno(errno.ENOENT, os.stat, pool / "missing")
    assert xattr_int(pool, "user.pagefs.pages") == 2
    assert xattr_int(pool, "user.pagefs.bytes") == 4000
    assert xattr_int(pool, "user.pagefs.used_slots") == 2
    assert xattr_int(pool, "user.pagefs.hits") >= 1
    assert xattr_int(pool, "user.pagefs.misses") >= 1
    assert xattr_int(pool, "user.pagefs.evictions") == 0
    assert xattr_int(pool, "user.pagefs.checksum_failures") == 0
    for key in ("pages", "bytes", "used_slots", "hits", "misses", "evictions",
                "checksum_failures", "data_file"):
        expect_errno(errno.EPERM, os.setxattr, pool, "user.pagefs." + key, b"7")
    assert xattr_int(pool, "user.pagefs.pages") == 2
