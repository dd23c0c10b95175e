"""SPEC "Page files": create and write, commit at close, immutability, O_TRUNC replacement."""
import errno
import fcntl
import hashlib
import os
import stat
import time

import pytest

from pagefs_helpers import (assert_bytes_equal, close_quietly, ename, expect_errno, listdir_elsewhere, opened,
                            read_all, read_elsewhere, read_page, stat_elsewhere, write_all,
                            write_page)

SMALL = ("--page-size", "64K", "--capacity", "1M")
MEDIUM = ("--page-size", "1M", "--capacity", "64M")

# Contract tests of the core: each runs against SQLite and PostgreSQL.
pytestmark = pytest.mark.engines


def test_page_written_in_one_open_write_close_reads_back(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    data = os.urandom(50000)
    write_page(pool / "page", data)
    assert_bytes_equal(read_page(pool / "page"), data, "page read back")
    st = os.stat(pool / "page")
    assert st.st_size == 50000
    assert stat.S_ISREG(st.st_mode)


def test_page_is_invisible_to_other_processes_until_its_writer_closes(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    data = os.urandom(40000)
    fd = os.open(pool / "page", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, data)
        r = stat_elsewhere(pool / "page")
        assert not r["ok"] and r["errno"] == errno.ENOENT, \
            f"stat from another process before close should fail with ENOENT, got {r}"
        assert b"page" not in listdir_elsewhere(pool), "an uncommitted page must not be listed"
        r = read_elsewhere(pool / "page")
        assert not r["ok"] and r["errno"] == errno.ENOENT, \
            f"open from another process before close should fail with ENOENT, got {r}"
    finally:
        os.close(fd)
    r = stat_elsewhere(pool / "page")
    assert r["ok"], f"after close the page must be visible to another process, got {ename(r.get('errno'))}"
    assert r["size"] == 40000, f"size seen by another process: {r['size']}"
    assert stat.S_IMODE(r["mode"]) == 0o444, f"committed page mode {stat.filemode(r['mode'])}, want -r--r--r--"
    assert stat.S_ISREG(r["mode"])
    assert b"page" in listdir_elsewhere(pool)
    r = read_elsewhere(pool / "page")
    assert r["ok"] and r["data"] == data, "another process should read the committed bytes"


def test_o_excl_excludes_a_writer_still_creating_the_name(mount):
    """open(O_CREAT|O_EXCL) fails with EEXIST while another writer is
    creating the name, not only once it is committed: the second exclusive
    create used to succeed, and its close replaced the first writer's
    page."""
    m = mount()
    pool = m.pool(0, "kv")
    excl = os.O_CREAT | os.O_EXCL | os.O_WRONLY
    fd = os.open(pool / "x", excl, 0o644)
    try:
        os.write(fd, b"first")
        expect_errno(errno.EEXIST, os.open, pool / "x", excl, 0o644)
    finally:
        os.close(fd)
    expect_errno(errno.EEXIST, os.open, pool / "x", excl, 0o644)
    with open(pool / "x", "rb") as f:
        assert f.read() == b"first"


def test_o_append_after_o_trunc_writes_from_zero(mount):
    """open(O_TRUNC|O_APPEND) of a committed page: the appends start at 0,
    as after any truncation, even when a stat of the name (the old page's
    length, which other processes see until the commit) came between. They
    landed after the old length, zeros before them."""
    m = mount()
    pool = m.pool(0, "kv")
    write_page(pool / "ap", b"0123456789")
    for _ in range(3):
        fd = os.open(pool / "ap", os.O_WRONLY | os.O_TRUNC | os.O_APPEND)
        try:
            os.fstat(fd)
            os.write(fd, b"AB")
            os.stat(pool / "ap")
            os.write(fd, b"CD")
        finally:
            os.close(fd)
        assert read_page(pool / "ap") == b"ABCD"
        write_page(pool / "ap", b"0123456789")
    # O_APPEND is the file's state at each write: fcntl can clear it
    fd = os.open(pool / "ap", os.O_WRONLY | os.O_TRUNC | os.O_APPEND)
    try:
        os.write(fd, b"abcdef")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_APPEND)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, b"X")
    finally:
        os.close(fd)
    assert read_page(pool / "ap") == b"Xbcdef"


def test_committed_page_reads_r_r_r(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    write_page(pool / "page", b"abc")
    assert stat.filemode(os.stat(pool / "page").st_mode) == "-r--r--r--"


def test_sparse_write_at_offset_reads_zeros_before_it(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    with opened(pool / "sparse", os.O_WRONLY | os.O_CREAT, 0o644) as fd:
        assert os.pwrite(fd, b"0123456789", 1000) == 10
    got = read_page(pool / "sparse")
    assert os.stat(pool / "sparse").st_size == 1010, "size is the highest byte written"
    assert_bytes_equal(got, b"\0" * 1000 + b"0123456789", "sparse page")


def test_sparse_page_in_a_reused_slot_reads_zeros_not_old_bytes(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    os.setxattr(pool, "user.pagefs.capacity", b"64K")  # exactly one slot
    write_page(pool / "old", b"\xaa" * 65536)
    os.unlink(pool / "old")
    with opened(pool / "sparse", os.O_WRONLY | os.O_CREAT, 0o644) as fd:
        os.pwrite(fd, b"tail", 2000)
    assert_bytes_equal(read_page(pool / "sparse"), b"\0" * 2000 + b"tail",
                       "a sparse page must not show bytes of the page that had its slot before")


def test_writes_at_several_offsets_build_one_page(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    with opened(pool / "p", os.O_WRONLY | os.O_CREAT, 0o644) as fd:
        os.pwrite(fd, b"C" * 100, 200)
        os.pwrite(fd, b"A" * 100, 0)
        os.pwrite(fd, b"B" * 100, 100)
    assert read_page(pool / "p") == b"A" * 100 + b"B" * 100 + b"C" * 100


def _close_after_rejected_write(pool, name, fd, written):
    """After a write failed with EFBIG the writer may close: either the page
    commits with what was written, or the close fails (EFBIG) and nothing is
    published. Anything else is wrong."""
    err = close_quietly(fd)
    if err is None:
        assert_bytes_equal(read_page(pool / name), written,
                           f"{name} committed after a rejected write")
    else:
        assert err == errno.EFBIG, f"close of {name} after EFBIG failed with {ename(err)}"
        assert name not in os.listdir(pool), f"{name}: close failed but the page is listed"


def test_write_past_the_slot_size_fails_with_efbig(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    fd = os.open(pool / "big", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        expect_errno(errno.EFBIG, os.pwrite, fd, b"x", 65536, what="write at offset == slot size")
        expect_errno(errno.EFBIG, os.pwrite, fd, b"x" * 10, 1 << 20, what="write far past the slot")
    finally:
        _close_after_rejected_write(pool, "big", fd, b"")
    fd = os.open(pool / "big2", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        write_all(fd, b"y" * 65536)
        expect_errno(errno.EFBIG, os.write, fd, b"y", what="sequential write of byte 65537")
    finally:
        _close_after_rejected_write(pool, "big2", fd, b"y" * 65536)


def test_write_ending_exactly_at_the_slot_size_works(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    data = os.urandom(65536)
    write_page(pool / "full", data)
    assert os.stat(pool / "full").st_size == 65536
    assert_bytes_equal(read_page(pool / "full"), data, "page of exactly one slot")
    with opened(pool / "tail", os.O_WRONLY | os.O_CREAT, 0o644) as fd:
        assert os.pwrite(fd, b"end", 65533) == 3
    assert os.stat(pool / "tail").st_size == 65536


def test_zero_length_page_exists_with_size_zero(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    os.close(os.open(pool / "empty", os.O_WRONLY | os.O_CREAT, 0o644))
    assert os.listdir(pool) == ["empty"]
    st = os.stat(pool / "empty")
    assert st.st_size == 0
    assert stat.S_IMODE(st.st_mode) == 0o444
    assert read_page(pool / "empty") == b""


def test_ftruncate_sets_the_size_of_a_page_being_written(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    with opened(pool / "grown", os.O_WRONLY | os.O_CREAT, 0o644) as fd:
        write_all(fd, b"abc")
        os.ftruncate(fd, 5000)
    assert read_page(pool / "grown") == b"abc" + b"\0" * 4997
    with opened(pool / "shrunk", os.O_WRONLY | os.O_CREAT, 0o644) as fd:
        write_all(fd, b"q" * 3000)
        os.ftruncate(fd, 10)
    assert read_page(pool / "shrunk") == b"q" * 10
    with opened(pool / "toolong", os.O_WRONLY | os.O_CREAT, 0o644) as fd:
        expect_errno((errno.EFBIG, errno.EINVAL), os.ftruncate, fd, 65537,
                     what="ftruncate past the slot size")


def test_reopening_a_committed_page_for_writing_fails_with_eperm(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    write_page(pool / "page", b"original")
    for flags, label in ((os.O_WRONLY, "O_WRONLY"), (os.O_RDWR, "O_RDWR"),
                         (os.O_WRONLY | os.O_APPEND, "O_WRONLY|O_APPEND"),
                         (os.O_WRONLY | os.O_CREAT, "O_WRONLY|O_CREAT")):
        expect_errno(errno.EPERM, os.open, pool / "page", flags, 0o644, what=f"open(page, {label})")
    expect_errno(errno.EEXIST, os.open, pool / "page", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644,
                 what="open(page, O_CREAT|O_EXCL)")
    assert read_page(pool / "page") == b"original"


def test_open_with_o_trunc_replaces_the_page_at_close_and_old_readers_keep_old_bytes(mount):
    m = mount(*MEDIUM)
    pool = m.pool(0, "kv")
    old = os.urandom(300000)
    new = os.urandom(123457)
    write_page(pool / "page", old)
    rfd = os.open(pool / "page", os.O_RDONLY)
    try:
        head = os.read(rfd, 4096)
        assert head == old[:4096]
        wfd = os.open(pool / "page", os.O_WRONLY | os.O_TRUNC)
        try:
            write_all(wfd, new)
            r = read_elsewhere(pool / "page")
            assert r["ok"], f"during a replacement the old page must stay readable, got {r}"
            assert hashlib.sha256(r["data"]).hexdigest() == hashlib.sha256(old).hexdigest(), \
                f"before the replacement is closed other processes must read the old bytes " \
                f"(got {len(r['data'])} bytes)"
            assert stat_elsewhere(pool / "page")["size"] == len(old)
        finally:
            os.close(wfd)
        r = read_elsewhere(pool / "page")
        assert r["ok"] and r["data"] == new, "after close the new content must be visible"
        assert_bytes_equal(read_page(pool / "page"), new, "replaced page read in this process")
        assert os.stat(pool / "page").st_size == len(new)
        rest = read_all(rfd)
        assert_bytes_equal(head + rest, old, "reader opened before the replacement")
        assert_bytes_equal(os.pread(rfd, len(old) + 10, 0), old, "pread on the old handle")
    finally:
        os.close(rfd)
    assert os.listdir(pool) == ["page"]


def test_page_mtime_is_the_commit_time(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    with opened(pool / "p", os.O_WRONLY | os.O_CREAT, 0o644) as fd:
        write_all(fd, b"x" * 100)
        time.sleep(1.5)
        t0 = time.time()
    t1 = time.time()
    mtime = os.stat(pool / "p").st_mtime
    assert t0 - 0.5 <= mtime <= t1 + 0.5, \
        f"st_mtime {mtime:.3f} should be the commit (close) time, in [{t0:.3f}, {t1:.3f}]"


def test_st_blocks_follows_the_page_length(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    for size in (0, 1, 511, 512, 4097, 65536):
        write_page(pool / f"p{size}", b"b" * size)
        st = os.stat(pool / f"p{size}")
        assert st.st_size == size
        assert st.st_blocks * 512 >= size and st.st_blocks * 512 < size + 4096, \
            f"st_blocks {st.st_blocks} does not match a {size}-byte page"
        if size == 0:
            assert st.st_blocks == 0
