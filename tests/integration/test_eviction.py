"""SPEC "Eviction": LRU of unpinned committed pages; --evict none; ENOSPC when all are in use.

Pools here are 16 slots of 64 KiB (--page-size 64K --capacity 1M).
"""
import errno
import os

from pagefs_helpers import (assert_bytes_equal, close_quietly, counter, expect_errno, opened, read_all,
                            read_page, wait_until, write_all, write_page)

SMALL = ("--page-size", "64K", "--capacity", "1M")


def page_bytes(i):
    return (b"page-%03d:" % i) * 6000  # 54000 bytes, fits a 64K slot


def fill(pool, n, start=0):
    for i in range(start, start + n):
        write_page(pool / f"p{i:02d}", page_bytes(i))


def test_write_into_a_full_pool_evicts_the_least_recently_used_page(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    fill(pool, 16)
    assert read_page(pool / "p00") == page_bytes(0)  # p00 is now the most recent
    write_page(pool / "p16", page_bytes(16))
    listed = set(os.listdir(pool))
    assert "p01" not in listed, "p01 was the least recently used page and should have been evicted"
    assert "p00" in listed, "p00 was read after p01 was written; it must not be evicted"
    assert listed == {f"p{i:02d}" for i in range(17)} - {"p01"}, f"unexpected listing {sorted(listed)}"
    expect_errno(errno.ENOENT, os.stat, pool / "p01", what="stat of the evicted page")
    for i in [0] + list(range(2, 17)):
        assert_bytes_equal(read_page(pool / f"p{i:02d}"), page_bytes(i), f"p{i:02d}")
    assert counter(m.stats(), "evictions") == 1


def test_a_stat_that_reaches_the_daemon_refreshes_recency(mount):
    """SPEC: stats refresh a page's recency. The kernel answers a stat from
    its cache for --entry-timeout seconds (README Decisions: such a stat is
    not a use); with 0 every stat reaches the daemon."""
    m = mount(*SMALL, "--entry-timeout", "0")
    pool = m.pool(0, "kv")
    fill(pool, 16)
    os.stat(pool / "p00")  # the kernel would cache this one
    for i in range(1, 16):
        read_page(pool / f"p{i:02d}")  # p00 is now the least recently used
    assert os.stat(pool / "p00").st_size == len(page_bytes(0))  # and now the most recent
    write_page(pool / "p16", page_bytes(16))
    listed = set(os.listdir(pool))
    assert "p00" in listed, "p00 was stat'ed after p01 was read; it must not be evicted"
    assert "p01" not in listed, f"p01 was the least recently used page: {sorted(listed)}"


def test_page_open_for_reading_is_never_evicted(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    fill(pool, 16)
    with opened(pool / "p02") as fd:
        head = os.read(fd, 10)
        fill(pool, 40, start=16)  # every other page is evicted at least twice over
        assert "p02" in os.listdir(pool), "a page that is open must not be evicted"
        assert_bytes_equal(head + read_all(fd), page_bytes(2), "held-open page")
        assert_bytes_equal(os.pread(fd, 65536, 0), page_bytes(2), "held-open page (pread)")
    assert_bytes_equal(read_page(pool / "p02"), page_bytes(2), "p02 reopened")
    listed = sorted(os.listdir(pool))
    assert len(listed) == 16, f"the pool should be full, listing {listed}"
    for n in listed:
        assert_bytes_equal(read_page(pool / n), page_bytes(int(n[1:])), n)


def _assert_not_visible(pool, name):
    assert name not in os.listdir(pool), f"{name} failed with ENOSPC but is listed"
    expect_errno(errno.ENOENT, os.stat, pool / name, what=f"stat of {name} after ENOSPC")


def _write_expect_enospc(pool, name, data):
    """The write may fail at open, write or close; returns where it failed."""
    try:
        fd = os.open(pool / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError as e:
        assert e.errno == errno.ENOSPC, f"open of {name} in a full pool: expected ENOSPC, got {e}"
        return "open"
    try:
        write_all(fd, data)
    except OSError as e:
        close_quietly(fd)  # the close may report the error again
        assert e.errno == errno.ENOSPC, f"write of {name} in a full pool: expected ENOSPC, got {e}"
        return "write"
    try:
        os.close(fd)
    except OSError as e:
        assert e.errno == errno.ENOSPC, f"close of {name} in a full pool: expected ENOSPC, got {e}"
        return "close"
    raise AssertionError(f"writing {name} into a full pool succeeded; expected ENOSPC")


def test_evict_none_makes_a_write_into_a_full_pool_fail_with_enospc(mount):
    m = mount(*SMALL, "--evict", "none")
    pool = m.pool(0, "kv")
    fill(pool, 16)
    _write_expect_enospc(pool, "p16", page_bytes(16))
    _assert_not_visible(pool, "p16")
    assert sorted(os.listdir(pool)) == [f"p{i:02d}" for i in range(16)]
    for i in range(16):
        assert_bytes_equal(read_page(pool / f"p{i:02d}"), page_bytes(i), f"p{i:02d}")
    os.unlink(pool / "p05")
    write_page(pool / "p16", page_bytes(16))  # a free slot again
    assert_bytes_equal(read_page(pool / "p16"), page_bytes(16), "p16 after freeing a slot")


def test_write_into_a_full_pool_whose_pages_are_all_open_fails_with_enospc(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    fill(pool, 16)
    fds = [os.open(pool / f"p{i:02d}", os.O_RDONLY) for i in range(16)]
    try:
        _write_expect_enospc(pool, "p16", page_bytes(16))
        _assert_not_visible(pool, "p16")
        for i, fd in enumerate(fds):
            assert_bytes_equal(read_all(fd), page_bytes(i), f"open page p{i:02d}")
    finally:
        for fd in fds:
            os.close(fd)
    # evicts now that nothing is pinned (the kernel sends RELEASE after close
    # returns, so give the last unpin a moment)
    def try_write():
        try:
            write_page(pool / "p16", page_bytes(16))
            return True
        except OSError as e:
            assert e.errno == errno.ENOSPC, f"write p16 after closing all readers: {e}"
            return False
    assert wait_until(try_write, timeout=3), "p16 still fails with ENOSPC 3 s after all readers closed"
    assert len(os.listdir(pool)) == 16
