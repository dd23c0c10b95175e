"""SPEC "stat": a pool directory's mtime and ctime move when pages are
published, renamed or unlinked (or leave by eviction), a page's ctime
when it is renamed, as on a local filesystem (docs/DECISIONS-posix.md)."""
import os
import subprocess
import time

import pytest

from pagefs_helpers import write_page

SMALL = ("--page-size", "64K", "--capacity", "1M")

# Contract tests of the core: each runs against SQLite and PostgreSQL.
pytestmark = pytest.mark.engines


def times(path):
    st = os.stat(path)
    return st.st_mtime_ns, st.st_ctime_ns


def moved(pool, before, what):
    """Asserts the pool's mtime and ctime are past `before` (ns), as the
    kernel answers a stat (its cached attributes included)."""
    mt, ct = times(pool)
    assert mt >= before and ct >= before, \
        f"{what}: pool mtime {mt} / ctime {ct} not moved past {before}"
    return mt


def test_pool_mtime_and_ctime_move_on_publish_rename_and_unlink(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    write_page(pool / "first", b"1")
    last = moved(pool, 0, "after the first publish")
    for what, op in (("publish", lambda: write_page(pool / "second", b"2")),
                     ("rename", lambda: os.rename(pool / "second", pool / "third")),
                     ("rename over", lambda: os.replace(pool / "third", pool / "first")),
                     ("unlink", lambda: os.unlink(pool / "first")),
                     ("tmp+rename", lambda: (write_page(pool / "k.tmp", b"k"),
                                             os.rename(pool / "k.tmp", pool / "k")))):
        times(pool)  # the kernel caches the attributes now (long attr timeout)
        time.sleep(0.02)
        before = time.time_ns()
        op()
        last = moved(pool, before, f"after {what}")
    # A rewrite in place (O_TRUNC) publishes too.
    times(pool)
    time.sleep(0.02)
    before = time.time_ns()
    write_page(pool / "k", b"rewritten")
    moved(pool, before, "after a rewrite with O_TRUNC")
    # Reading changes nothing.
    mt = times(pool)
    with open(pool / "k", "rb") as f:
        f.read()
    os.listdir(pool)
    assert times(pool) == mt, "a read or a listing must not move the pool's times"


def test_a_renamed_page_gets_a_new_ctime_and_keeps_its_mtime(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    write_page(pool / "a", b"bytes")
    st = os.stat(pool / "a")
    assert st.st_ctime_ns == st.st_mtime_ns
    time.sleep(0.05)
    before = time.time_ns()
    os.rename(pool / "a", pool / "b")
    st2 = os.stat(pool / "b")
    assert st2.st_mtime_ns == st.st_mtime_ns, "a rename keeps the page's mtime (its commit time)"
    assert st2.st_ctime_ns >= before, f"ctime {st2.st_ctime_ns} not past the rename {before}"
    # Asked again (uncached), the daemon says the same.
    m.remount()
    st3 = os.stat(m.pool(0, "kv") / "b")
    assert st3.st_mtime_ns == st.st_mtime_ns
    assert st3.st_ctime_ns >= st3.st_mtime_ns


def test_an_eviction_moves_the_pool_times_the_kernel_had_cached(mount):
    m = mount("--page-size", "64K", "--capacity", "256K")
    pool = m.pool(0, "kv")
    for i in range(4):
        write_page(pool / f"p{i}", b"x" * 100)
    times(pool)
    time.sleep(0.02)
    before = time.time_ns()
    # A write in another process (so this one's stat cache is not
    # touched by its create) evicts the oldest page.
    subprocess.run(["sh", "-c", f"printf y > '{pool}/p4'"], check=True)
    assert not os.path.exists(pool / "p0"), "the oldest page must have been evicted"
    moved(pool, before, "after an eviction")


def test_find_newer_sees_a_pool_that_changed(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    other = m.pool(0, "other")
    write_page(pool / "old", b"o")
    write_page(other / "old", b"o")
    ref = m.dir / "ref"
    ref.write_bytes(b"")
    time.sleep(0.05)
    os.utime(ref, ns=(time.time_ns() - 10_000_000,) * 2)
    write_page(pool / "new", b"n")
    out = subprocess.run(["find", str(m.path(0)), "-mindepth", "1", "-newer", str(ref)],
                         capture_output=True, text=True, check=True).stdout.split()
    assert str(pool) in out, f"find -newer missed the changed pool: {out}"
    assert str(pool / "new") in out
    assert str(other) not in out, f"find -newer listed a pool nothing changed in: {out}"


def test_pool_times_survive_a_remount_as_far_as_its_pages_keep_them(mount):
    """After a remount a pool's mtime is at least its newest page's commit
    time; a pool whose pages were all unlinked keeps the time of its last
    change from a clean unmount."""
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    write_page(pool / "a", b"a")
    write_page(pool / "b", b"b")
    newest = os.stat(pool / "b").st_mtime_ns
    gone = m.pool(0, "gone")
    write_page(gone / "x", b"x")
    os.unlink(gone / "x")
    gone_mt = times(gone)[0]
    m.remount()
    mt, ct = times(m.pool(0, "kv"))
    assert mt >= newest and ct >= newest, f"pool times {mt}/{ct} before its newest page {newest}"
    assert times(m.pool(0, "gone"))[0] == gone_mt, "an emptied pool's mtime after a remount"
