"""SPEC "Page files": a writer may unlink or rename its own page before
close, as POSIX allows; a name another process is still writing is not
there for anyone else (docs/DECISIONS-posix.md)."""
import ctypes
import errno
import os
import threading
import time

import pytest

from pagefs_helpers import (assert_bytes_equal, expect_errno, listdir_elsewhere, read_elsewhere,
                            read_page,
                            stat_elsewhere, workload, write_all, write_page)

SMALL = ("--page-size", "64K", "--capacity", "1M")
WRITE = os.O_WRONLY | os.O_CREAT

_libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
RENAME_NOREPLACE = 1

# Contract tests of the core: each runs against SQLite and PostgreSQL.
pytestmark = pytest.mark.engines


def renameat2(old, new, flags):
    r = _libc.renameat2(AT_FDCWD, os.fsencode(old), AT_FDCWD, os.fsencode(new),
                        ctypes.c_uint(flags))
    if r != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), str(old), None, str(new))


def pool_counters(m):
    """(pages, used slots) of pool 0/kv, from user.pagefs.*."""
    pool = m.pool(0, "kv")
    return tuple(int(os.getxattr(pool, "user.pagefs." + n)) for n in ("pages", "used_slots"))


def wait_counters(m, want, what):
    """The pool's counters reach want (a remote apply or a release may lag
    a close by a moment)."""
    deadline = time.monotonic() + 10
    while pool_counters(m) != want and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pool_counters(m) == want, f"{what}: (pages, used_slots) = " \
        f"{pool_counters(m)}, want {want}"


def test_a_writer_that_unlinks_its_page_before_close_publishes_nothing(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    fd = os.open(pool / "gone", WRITE, 0o644)
    try:
        write_all(fd, os.urandom(30000))
        time.sleep(0.05)  # past the kernel's own entry from create (timeout 0)
        os.unlink(pool / "gone")
        expect_errno(errno.ENOENT, os.stat, pool / "gone", what="stat after the unlink")
        write_all(fd, os.urandom(1000))  # the open file still takes writes
        assert os.fstat(fd).st_size == 31000
    finally:
        os.close(fd)
    expect_errno(errno.ENOENT, os.stat, pool / "gone", what="stat after close")
    assert os.listdir(pool) == []
    wait_counters(m, (0, 0), "after close of an unlinked page")
    m.remount()
    assert os.listdir(m.pool(0, "kv")) == [], "nothing may come back at the next mount"


def test_a_writer_that_renames_its_page_before_close_publishes_under_the_new_name(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    old, new = os.urandom(20000), os.urandom(40000)
    write_page(pool / "key.bin", old)
    fd = os.open(pool / "key.bin.tmp", WRITE, 0o644)
    try:
        write_all(fd, new[:10000])
        time.sleep(0.05)
        os.rename(pool / "key.bin.tmp", pool / "key.bin")
        # The target stays the old page until the commit replaces it.
        assert_bytes_equal(read_page(pool / "key.bin"), old, "target before close")
        write_all(fd, new[10000:])
    finally:
        os.close(fd)
    assert sorted(os.listdir(pool)) == ["key.bin"]
    assert_bytes_equal(read_page(pool / "key.bin"), new, "target after close")
    r = stat_elsewhere(pool / "key.bin")
    assert r["ok"] and r["size"] == 40000, f"another process must see the new page: {r}"
    wait_counters(m, (1, 1), "one page, its slot the only one used")
    m.remount()
    pool = m.pool(0, "kv")
    assert sorted(os.listdir(pool)) == ["key.bin"]
    assert_bytes_equal(read_page(pool / "key.bin"), new, "target after remount")


def test_renames_and_an_unlink_by_the_writer_follow_one_another(mount):
    """Renamed twice: published under the last name. Renamed and then
    unlinked under its new name: nothing. A rename back to a name another
    writer of the same process holds is allowed: the later close wins."""
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    fd = os.open(pool / "a", WRITE, 0o644)
    try:
        write_all(fd, b"twice renamed")
        os.rename(pool / "a", pool / "b")
        time.sleep(0.05)
        os.rename(pool / "b", pool / "c")
        assert os.stat(pool / "c").st_size == len(b"twice renamed"), \
            "the writer's own stat finds its page under the new name"
        expect_errno(errno.ENOENT, os.stat, pool / "b")
    finally:
        os.close(fd)
    assert sorted(os.listdir(pool)) == ["c"]
    assert read_page(pool / "c") == b"twice renamed"

    fd = os.open(pool / "d", WRITE, 0o644)
    try:
        write_all(fd, b"renamed, then unlinked")
        os.rename(pool / "d", pool / "e")
        os.unlink(pool / "e")
        expect_errno(errno.ENOENT, os.unlink, pool / "e", what="a second unlink")
        expect_errno(errno.ENOENT, os.rename, pool / "e", pool / "f",
                     what="a rename of the unlinked name")
    finally:
        os.close(fd)
    assert sorted(os.listdir(pool)) == ["c"]
    wait_counters(m, (1, 1), "the unlinked page's slot is free again")


def test_rename_noreplace_of_a_page_being_written_over_an_existing_name_fails(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    write_page(pool / "taken", b"old")
    fd = os.open(pool / "mine", WRITE, 0o644)
    try:
        write_all(fd, b"new")
        expect_errno(errno.EEXIST, renameat2, pool / "mine", pool / "taken", RENAME_NOREPLACE)
        renameat2(pool / "mine", pool / "free", RENAME_NOREPLACE)
    finally:
        os.close(fd)
    assert sorted(os.listdir(pool)) == ["free", "taken"]
    assert read_page(pool / "taken") == b"old"
    assert read_page(pool / "free") == b"new"


def test_another_thread_of_the_writer_neither_sees_nor_shares_its_page(mount):
    """Another thread of the writer's process is a reader or a writer of
    its own: it finds no such name (so its unlink says ENOENT), and its
    own create of the name makes a page of its own, so that both pages
    are whole and the last close wins (sharing one file, the second
    open's O_TRUNC tore the first writer's page)."""
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    fd = os.open(pool / "t", WRITE | os.O_TRUNC, 0o644)
    got = {}

    def other_thread():
        try:
            os.unlink(pool / "t")
        except OSError as e:
            got["unlink"] = e.errno
        fd2 = os.open(pool / "t", WRITE | os.O_TRUNC, 0o644)
        write_all(fd2, b"second" * 1000)
        os.close(fd2)

    try:
        write_all(fd, b"first" * 1000)
        time.sleep(0.05)
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
        assert got.get("unlink") == errno.ENOENT, f"unlink from another thread: {got}"
        assert read_page(pool / "t") == b"second" * 1000
        write_all(fd, b"first" * 1000)
    finally:
        os.close(fd)
    assert read_page(pool / "t") == b"first" * 2000, "the last close wins, its page whole"


def test_another_process_cannot_unlink_or_rename_a_name_it_cannot_see(mount):
    """The decision in docs/DECISIONS-posix.md: a page being written is
    invisible to other processes (stat, open, readdir say ENOENT), so
    their unlink and rename of it say ENOENT too, and the writer's close
    publishes it under its own name."""
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    fd = os.open(pool / "private", WRITE, 0o644)
    try:
        write_all(fd, b"mine")
        for op in ("unlink", "rename"):
            r = workload(op, os.fsencode(str(pool / "private")).hex(),
                         os.fsencode(str(pool / "taken")).hex())
            assert not r["ok"] and r["errno"] == errno.ENOENT, \
                f"{op} by another process of a name being written: {r}"
        assert stat_elsewhere(pool / "private")["errno"] == errno.ENOENT
    finally:
        os.close(fd)
    assert listdir_elsewhere(pool) == [b"private"]
    assert read_page(pool / "private") == b"mine"


def test_open_unlink_close_in_a_loop_leaks_no_slot_and_evicts_nothing(mount):
    """What stress-ng --open does (create, unlink, close, many times, from
    several processes at once) in a pool of 16 slots holding 8 pages: no
    page is published, none of the 8 is evicted, and every slot the loop
    took is free afterwards: an unlinked page published at close would
    fill the pool with them."""
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    keep = {f"keep{i}": os.urandom(3000) for i in range(8)}
    for n, data in keep.items():
        write_page(pool / n, data)
    r = workload("open_unlink", os.fsencode(str(pool)).hex(), 4, 200, timeout=120)
    assert r["errors"] == [], f"open/unlink/close errors: {r['errors'][:5]}"
    assert sorted(os.listdir(pool)) == sorted(keep), "only the kept pages may be listed"
    for n, data in keep.items():
        assert_bytes_equal(read_page(pool / n), data, n)
    wait_counters(m, (8, 8), "after 800 open/unlink/close")
    assert int(os.getxattr(pool, "user.pagefs.evictions")) == 0


def test_a_rewrite_with_o_trunc_follows_an_unlink_or_rename_by_its_writer(mount):
    """The same for open(O_TRUNC) of a committed page: after an unlink the
    close publishes nothing; after a rename the new bytes land under the
    new name."""
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    write_page(pool / "u", b"old u")
    write_page(pool / "r", b"old r")
    fu = os.open(pool / "u", os.O_WRONLY | os.O_TRUNC)
    fr = os.open(pool / "r", os.O_WRONLY | os.O_TRUNC)
    try:
        write_all(fu, b"new u")
        write_all(fr, b"new r")
        os.unlink(pool / "u")
        os.rename(pool / "r", pool / "r2")
    finally:
        os.close(fu)
        os.close(fr)
    assert sorted(os.listdir(pool)) == ["r2"]
    assert read_page(pool / "r2") == b"new r"
    wait_counters(m, (1, 1), "the unlinked rewrite's slots are free")


def test_the_writer_may_open_its_page_again_before_close(mount):
    """A second open for writing of the page by its writer's process is a
    second descriptor of the same file: it reads what was written so far,
    O_TRUNC empties it, and an unlink then publishes nothing (stress-ng
    --open opens a new file again with O_RDONLY|O_TRUNC and unlinks it
    only when that open succeeds: each one was published and stayed). A
    plain read-only open finds nothing, in this process too: readers never
    get a page before its commit. Another process finds no such file. As
    for a dup'd descriptor, the first close by the writer's process
    publishes."""
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    fd = os.open(pool / "again", os.O_RDWR | os.O_CREAT, 0o600)
    rd = tr = None
    try:
        write_all(fd, b"first bytes")
        time.sleep(0.05)
        expect_errno(errno.ENOENT, os.open, pool / "again", os.O_RDONLY,
                     what="a read-only open before the commit")
        rd = os.open(pool / "again", os.O_RDWR)
        assert os.read(rd, 100) == b"first bytes"
        r = read_elsewhere(pool / "again")
        assert not r["ok"] and r["errno"] == errno.ENOENT, f"another process: {r}"
        tr = os.open(pool / "again", os.O_RDONLY | os.O_TRUNC)
        assert os.fstat(fd).st_size == 0, "O_TRUNC empties the file for every descriptor"
        os.unlink(pool / "again")
    finally:
        for f in (tr, rd, fd):
            if f is not None:
                os.close(f)
    assert os.listdir(pool) == []
    wait_counters(m, (0, 0), "nothing published, the slot free")

    fd = os.open(pool / "kept", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        write_all(fd, b"written through the first descriptor")
        os.close(os.open(pool / "kept", os.O_WRONLY))  # publishes
        assert read_elsewhere(pool / "kept")["data"] == b"written through the first descriptor"
    finally:
        os.close(fd)
    assert read_page(pool / "kept") == b"written through the first descriptor"
    wait_counters(m, (1, 1), "one page")
