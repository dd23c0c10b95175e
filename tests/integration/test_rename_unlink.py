"""SPEC "Page files": rename and unlink, readers are safe."""
import collections
import ctypes
import errno
import os
import time

import pytest

from pagefs_helpers import (assert_bytes_equal, expect_errno, opened, read_all, read_page,
                            write_page)

SMALL = ("--page-size", "64K", "--capacity", "1M")

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


def test_rename_replaces_existing_page_atomically(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    old, new = os.urandom(60000), os.urandom(30000)
    write_page(pool / "key.bin", old)
    write_page(pool / "key.bin.tmp", new)
    tmp_ino = os.stat(pool / "key.bin.tmp").st_ino
    where = [os.getxattr(pool / "key.bin.tmp", "user.pagefs." + k) for k in ("slot", "offset")]
    with opened(pool / "key.bin") as rfd:
        head = os.read(rfd, 1000)
        os.replace(pool / "key.bin.tmp", pool / "key.bin")
        assert sorted(os.listdir(pool)) == ["key.bin"], "tmp must be gone after rename"
        assert_bytes_equal(read_page(pool / "key.bin"), new, "target after rename")
        assert os.stat(pool / "key.bin").st_ino == tmp_ino, \
            "rename must keep the inode number of the renamed page"
        assert os.stat(pool / "key.bin").st_size == 30000
        assert [os.getxattr(pool / "key.bin", "user.pagefs." + k) for k in ("slot", "offset")] \
            == where, "rename re-keys the page: its bytes stay in their slot"
        assert_bytes_equal(head + read_all(rfd), old, "reader of the replaced page")
    expect_errno(errno.ENOENT, os.stat, pool / "key.bin.tmp")


def test_a_key_renamed_over_again_and_again_never_reads_as_missing(mount):
    """SGLang's writers publish a key by renaming a temporary file over it.
    Another process that opens or stats the key meanwhile must find it (old
    or new bytes), never ENOENT: the kernel may still hold the replaced
    page's inode, which the open reaches after the rename. ENOENT failed
    one open in thirteen here; now the kernel looks the name up again
    (ESTALE), and only when that second look loses the race too does the
    caller see ESTALE (a few in 10,000). Room for every version, so that
    no eviction takes the key (on PostgreSQL freed slots wait out a grace
    period)."""
    m = mount("--page-size", "64K", "--capacity", "256M")
    pool = m.pool(0, "kv")
    key = pool / "key.bin"
    versions = [bytes([i]) * 4096 for i in range(4)]
    write_page(key, versions[0])
    pid = os.fork()
    if pid == 0:
        try:
            end = time.monotonic() + 3
            i = 0
            while time.monotonic() < end:
                tmp = pool / f"key.bin.tmp.{i}"
                write_page(tmp, versions[i % 4])
                os.rename(tmp, key)
                i += 1
        finally:
            os._exit(0)
    counts = collections.Counter()
    end = time.monotonic() + 3
    while time.monotonic() < end:
        for op in ("open", "stat"):
            try:
                if op == "open":
                    data = read_page(key)
                    assert data in versions, "old or new bytes, never others"
                else:
                    os.stat(key)
                counts[op, "ok"] += 1
            except OSError as e:
                counts[op, errno.errorcode[e.errno]] += 1
    os.waitpid(pid, 0)
    assert counts["open", "ENOENT"] == 0 and counts["stat", "ENOENT"] == 0, dict(counts)
    for op in ("open", "stat"):
        total = sum(n for (o, _), n in counts.items() if o == op)
        assert counts[op, "ok"] > 100 and counts[op, "ESTALE"] * 100 <= total, dict(counts)


def test_rename_to_a_new_name_keeps_bytes_and_inode(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    data = os.urandom(12345)
    write_page(pool / "a", data)
    ino = os.stat(pool / "a").st_ino
    os.rename(pool / "a", pool / "b")
    assert os.listdir(pool) == ["b"]
    assert os.stat(pool / "b").st_ino == ino
    assert_bytes_equal(read_page(pool / "b"), data, "renamed page")
    expect_errno(errno.ENOENT, os.stat, pool / "a")


def test_rename_noreplace_fails_with_eexist_when_the_target_exists(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    write_page(pool / "a", b"A")
    write_page(pool / "b", b"B")
    expect_errno(errno.EEXIST, renameat2, pool / "a", pool / "b", RENAME_NOREPLACE,
                 what="renameat2(a, b, RENAME_NOREPLACE)")
    assert read_page(pool / "a") == b"A" and read_page(pool / "b") == b"B"
    renameat2(pool / "a", pool / "c", RENAME_NOREPLACE)
    assert sorted(os.listdir(pool)) == ["b", "c"]
    assert read_page(pool / "c") == b"A"


def test_rename_across_pools_fails_with_exdev(mount):
    m = mount(*SMALL)
    kv, mamba, other_rank = m.pool(0, "kv"), m.pool(0, "mamba"), m.pool(1, "kv")
    write_page(kv / "a", b"A")
    expect_errno(errno.EXDEV, os.rename, kv / "a", mamba / "a", what="rename 0/kv/a -> 0/mamba/a")
    expect_errno(errno.EXDEV, os.rename, kv / "a", other_rank / "a", what="rename 0/kv/a -> 1/kv/a")
    assert os.listdir(kv) == ["a"] and os.listdir(mamba) == [] and os.listdir(other_rank) == []
    assert read_page(kv / "a") == b"A"


def test_rename_of_a_missing_page_fails_with_enoent(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    expect_errno(errno.ENOENT, os.rename, pool / "nope", pool / "x")


def test_unlink_removes_the_page(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    write_page(pool / "a", b"A")
    write_page(pool / "b", b"B")
    os.unlink(pool / "a")
    assert os.listdir(pool) == ["b"]
    assert not os.path.exists(pool / "a")
    expect_errno(errno.ENOENT, os.unlink, pool / "a")
    expect_errno(errno.ENOENT, os.open, pool / "a", os.O_RDONLY)


def test_open_handle_of_an_unlinked_page_still_reads_its_bytes(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    os.setxattr(pool, "user.pagefs.capacity", b"128K")  # two slots
    data = os.urandom(65536)
    write_page(pool / "a", data)
    with opened(pool / "a") as fd:
        head = os.read(fd, 100)
        os.unlink(pool / "a")
        assert os.listdir(pool) == []
        st = os.fstat(fd)
        assert st.st_nlink == 0 and st.st_size == 65536, "unlinked, still its size"
        # the unlinked page's slot is pinned: these writes must not reuse it
        for i in range(3):
            try:
                write_page(pool / f"other{i}", bytes([i]) * 65536)
            except OSError as e:
                assert e.errno == errno.ENOSPC, f"write other{i}: {e}"
        assert_bytes_equal(head + read_all(fd), data, "reader of an unlinked page")
        assert_bytes_equal(os.pread(fd, 65536, 0), data, "pread of an unlinked page")
