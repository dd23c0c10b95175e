"""SPEC "Checksums": XXH3-64 per page; corrupt bytes -> EIO, page dropped, counted, logged."""
import ctypes
import errno
import json
import os
import re

from pagefs_helpers import (assert_bytes_equal, counter, describe, expect_errno, read_page,
                            run_pagefs, wait_until, write_page, xattr_int, xattr_str)

SMALL = ("--page-size", "64K", "--capacity", "1M")


def _xxh3_64():
    try:
        import xxhash
        return lambda b: xxhash.xxh3_64_intdigest(b)
    except ImportError:
        pass
    try:
        lib = ctypes.CDLL("libxxhash.so.0")
        lib.XXH3_64bits.restype = ctypes.c_uint64
        lib.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        return lambda b: lib.XXH3_64bits(bytes(b), len(b))
    except OSError:
        return None


XXH3 = _xxh3_64()


def corrupt(page, at=100):
    """Flips one byte of the page directly in its backing data file."""
    data_file = xattr_str(page, "user.pagefs.data_file")
    off = xattr_int(page, "user.pagefs.offset")
    with open(data_file, "r+b") as f:
        f.seek(off + at)
        b = f.read(1)
        f.seek(off + at)
        f.write(bytes([b[0] ^ 0xFF]))
        f.flush()
        os.fsync(f.fileno())


def read_expect_eio(path):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        assert e.errno == errno.EIO, f"open of a corrupt page: expected EIO, got {e}"
        return
    try:
        # make sure the read reaches the daemon, not the kernel's page cache
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        data = os.read(fd, 1 << 20)
        raise AssertionError(f"read of a corrupt page returned {len(data)} bytes; expected EIO")
    except OSError as e:
        assert e.errno == errno.EIO, f"read of a corrupt page: expected EIO, got {e}"
    finally:
        os.close(fd)


def test_page_checksum_xattr_is_the_xxh3_64_of_its_bytes(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    pages = {"a": os.urandom(50000), "b": b"", "c": b"hello"}
    for n, d in pages.items():
        write_page(pool / n, d)
    for n, d in pages.items():
        cs = xattr_str(pool / n, "user.pagefs.checksum")
        assert re.fullmatch(r"[0-9a-fA-F]{16}", cs), f"checksum of {n} should be 16 hex digits, got {cs!r}"
        if XXH3:
            assert int(cs, 16) == XXH3(d), f"checksum of {n}: {cs}, XXH3-64 is {XXH3(d):016x}"


def test_checksum_of_a_page_written_in_pieces_is_the_xxh3_of_its_bytes(mount):
    """Writes are answered before their bytes are hashed (fs_write.c): the
    pieces of one large write() must still be hashed in order, and pieces
    out of order must fall back to a re-read, never a wrong checksum."""
    m = mount("--page-size", "8M", "--capacity", "64M")
    pool = m.pool(0, "big")
    data = os.urandom((5 << 20) + 123)
    write_page(pool / "one-write", data)  # 1 MiB requests, in order
    fd = os.open(pool / "small-writes", os.O_WRONLY | os.O_CREAT, 0o644)
    for at in range(0, len(data), 65536 + 7):
        os.write(fd, data[at:at + 65536 + 7])
    os.close(fd)
    fd = os.open(pool / "backwards", os.O_WRONLY | os.O_CREAT, 0o644)
    half = len(data) // 2
    os.pwrite(fd, data[half:], half)
    os.pwrite(fd, data[:half], 0)
    os.close(fd)
    for n in ("one-write", "small-writes", "backwards"):
        assert_bytes_equal(read_page(pool / n), data, f"page {n}")
        cs = int(xattr_str(pool / n, "user.pagefs.checksum"), 16)
        if XXH3:
            assert cs == XXH3(data), f"checksum of {n}: {cs:016x}, XXH3-64 is {XXH3(data):016x}"
    m.remount("--verify", "always")
    for n in ("one-write", "small-writes", "backwards"):
        assert_bytes_equal(read_page(m.pool(0, "big") / n), data, f"page {n} after remount")


def test_corrupt_page_fails_with_eio_after_remount_and_is_dropped(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    good = os.urandom(40000)
    write_page(pool / "bad", os.urandom(50000))
    write_page(pool / "good", good)
    corrupt(pool / "bad")
    m.remount()  # --verify first (the default): the first read after mount verifies
    read_expect_eio(pool / "bad")
    assert "bad" not in os.listdir(pool), "a page that failed verification must be dropped"
    assert_bytes_equal(read_page(pool / "good"), good, "the other page")
    st = m.stats()
    assert counter(st, "checksum_failures") == 1, f"stats: {json.dumps(st)[:2000]}"
    assert wait_until(lambda: "bad" in m.log_tail(), timeout=3), \
        "the checksum failure should be logged with the page's name"
    # the slot is free again
    assert wait_until(lambda: m.statvfs_free_total()[0] == m.statvfs_free_total()[1] - 65536,
                      timeout=3), \
        f"free/total {m.statvfs_free_total()}: only 'good' should hold a slot"


def test_corrupt_page_fails_with_eio_under_verify_always_without_remount(mount):
    m = mount(*SMALL, "--verify", "always")
    pool = m.pool(0, "kv")
    data = os.urandom(30000)
    write_page(pool / "p", data)
    assert_bytes_equal(read_page(pool / "p"), data, "first read")
    assert_bytes_equal(read_page(pool / "p"), data, "second read")
    corrupt(pool / "p", at=29999)
    read_expect_eio(pool / "p")
    assert "p" not in os.listdir(pool)
    assert counter(m.stats(), "checksum_failures") == 1


def test_status_json_counts_the_checksum_failure(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    write_page(pool / "bad", os.urandom(1000))
    write_page(pool / "ok", b"fine")
    corrupt(pool / "bad", at=10)
    m.remount()
    read_expect_eio(pool / "bad")
    r = run_pagefs("status", "--json", m.mnt)
    assert r.returncode == 0, f"pagefs status --json: {describe(r)}"
    try:
        js = json.loads(r.stdout)
    except ValueError as e:
        raise AssertionError(f"pagefs status --json did not print JSON ({e}): {r.stdout[:1000]}")
    assert counter(js, "checksum_failures") == 1, f"status: {r.stdout[:2000]}"
    assert counter(js, "pages") == 1, f"status: {r.stdout[:2000]}"
    r = run_pagefs("status", m.mnt)
    assert r.returncode == 0, f"pagefs status: {describe(r)}"
    assert "kv" in r.stdout, f"human status should name the pool: {r.stdout}"


def test_root_stats_xattr_is_json_with_the_counters(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    write_page(pool / "a", b"x" * 1000)
    read_page(pool / "a")
    expect_errno(errno.ENOENT, os.stat, pool / "missing")
    st = m.stats()
    for k in ("hits", "misses", "evictions", "checksum_failures", "pages"):
        counter(st, k)
    assert counter(st, "pages") == 1
    assert counter(st, "evictions") == 0
    assert counter(st, "hits") >= 1 and counter(st, "misses") >= 1, st


def test_status_shows_each_pools_figures_and_every_mount_without_a_mountpoint(mount):
    """`pagefs status` (SPEC "Command line"): per pool its pages, bytes,
    capacity, slot size, hits and misses as the daemon counts them; without
    MOUNTPOINT every mount, this one among them."""
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    write_page(pool / "a", b"a" * 1000)
    write_page(pool / "b", b"b" * 2000)
    read_page(pool / "a")
    expect_errno(errno.ENOENT, os.stat, pool / "missing")
    r = run_pagefs("status", "--json", m.mnt)
    assert r.returncode == 0, describe(r)
    js = json.loads(r.stdout)
    p = next(q for q in js["pools"] if q["rank"] == 0 and q["namespace"] == "kv")
    assert (p["pages"], p["bytes"], p["slot_size"]) == (2, 3000, 64 * 1024), p
    assert p["capacity_bytes"] == 1 << 20 and p["hits"] >= 1 and p["misses"] >= 1, p
    human = run_pagefs("status", m.mnt)
    assert human.returncode == 0, describe(human)
    row = next((line.split() for line in human.stdout.splitlines()
                if line.split()[:1] == ["0/kv"]), None)
    assert row, f"no row for 0/kv: {human.stdout}"
    # RANK/NS PAGES BYTES CAPACITY SLOT HITS MISSES EVICTIONS CKSUM_FAIL READ/s WRITE/s
    assert row[1] == "2" and int(row[5]) == p["hits"] and int(row[6]) == p["misses"], \
        f"{row} against {p}"
    every = run_pagefs("status", "--json")
    assert every.returncode == 0, describe(every)
    assert any(d.get("mountpoint") == str(m.mnt) for d in json.loads(every.stdout)), every.stdout
