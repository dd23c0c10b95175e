"""Issue 4 "bad input": odd names, name lengths, empty and boundary writes,
zero-length pages, O_APPEND, O_DIRECT and mmap, all through the mount."""
import errno
import mmap
import os
import stat

from pagefs_helpers import (assert_bytes_equal, expect_errno, listdir_elsewhere, opened, read_all,
                            read_page, stat_elsewhere, write_all, write_page)

SLOT = 64 * 1024
SMALL = ("--page-size", "64K", "--capacity", "4M")
# more slots than byte_names() has names: no eviction in the name tests
MANY = ("--page-size", "64K", "--capacity", "32M")

# Every byte a file name may hold: 1..255 except '/'.
NAME_BYTES = [b for b in range(1, 256) if b != ord("/")]


def byte_names():
    """One name per byte value (a lone '.' is the directory itself, so that
    byte goes in as 'x.'), plus names holding all of them in 255-byte chunks."""
    names = []
    for b in NAME_BYTES:
        names.append(bytes([b]) if b != ord(".") else b"x.")
    everything = bytes(NAME_BYTES)
    for i in range(0, len(everything), 255):
        names.append(everything[i:i + 255])
    # the same bytes shifted, so that no chunk starts with the same byte
    for i in range(100, len(everything), 200):
        names.append(everything[i:i + 200] + everything[:i % 55 + 1])
    return names


def content_for(name):
    return b"page:" + name + b":" + bytes(range(256)) * 3


def test_names_with_every_byte_value_round_trip(mount):
    m = mount(*MANY)
    pool = os.fsencode(str(m.pool(0, "kv")))
    names = byte_names()
    assert len(set(names)) == len(names)
    for n in names:
        assert 1 <= len(n) <= 255 and b"/" not in n
        write_page(pool + b"/" + n, content_for(n))
    listed = set(os.listdir(pool))
    assert listed == set(names), (
        f"listdir: missing {sorted(set(names) - listed)[:5]}, extra {sorted(listed - set(names))[:5]}")
    assert set(listdir_elsewhere(m.pool(0, "kv"))) == set(names), "another process lists the same names"
    for n in names:
        p = pool + b"/" + n
        st = os.stat(p)
        assert stat.S_ISREG(st.st_mode) and st.st_size == len(content_for(n)), f"stat {n!r}"
        assert_bytes_equal(read_page(p), content_for(n), f"read {n!r}")
    # rename each to a reversed name (also valid), then back, then unlink
    for n in names:
        r = b"r" + n[::-1][:254]
        os.rename(pool + b"/" + n, pool + b"/" + r)
        assert_bytes_equal(read_page(pool + b"/" + r), content_for(n), f"read renamed {r!r}")
        expect_errno(errno.ENOENT, os.stat, pool + b"/" + n)
        os.rename(pool + b"/" + r, pool + b"/" + n)
    assert set(os.listdir(pool)) == set(names)
    for n in names:
        os.unlink(pool + b"/" + n)
        expect_errno(errno.ENOENT, os.stat, pool + b"/" + n)
    assert os.listdir(pool) == []
    # after a remount nothing came back and the index is consistent
    m.remount()
    assert os.listdir(pool) == []


def test_names_with_every_byte_value_survive_a_remount(mount):
    m = mount(*MANY)
    pool = os.fsencode(str(m.pool(0, "kv")))
    names = byte_names()
    for n in names:
        write_page(pool + b"/" + n, content_for(n))
    m.remount()
    assert set(os.listdir(pool)) == set(names)
    for n in names:
        assert_bytes_equal(read_page(pool + b"/" + n), content_for(n), f"read {n!r} after remount")


def test_255_byte_name_works_and_256_is_enametoolong(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    n255 = "n" * 255
    write_page(pool / n255, b"long name")
    assert read_page(pool / n255) == b"long name"
    assert n255 in os.listdir(pool)
    n256 = "n" * 256
    expect_errno(errno.ENAMETOOLONG, os.open, pool / n256, os.O_WRONLY | os.O_CREAT, 0o644)
    expect_errno(errno.ENAMETOOLONG, os.stat, pool / n256)
    expect_errno(errno.ENAMETOOLONG, os.rename, pool / n255, pool / n256)
    # multi-byte characters: 255 bytes fine, 256 bytes refused
    u255 = "\u00e9" * 127 + "x"  # 2 * 127 + 1 = 255 bytes
    assert len(os.fsencode(u255)) == 255
    write_page(pool / u255, b"utf8")
    assert read_page(pool / u255) == b"utf8"
    expect_errno(errno.ENAMETOOLONG, os.open, pool / ("\u00e9" * 128), os.O_WRONLY | os.O_CREAT, 0o644)
    assert sorted(os.listdir(pool)) == sorted([n255, u255])


def test_dot_and_dotdot_are_not_page_names(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    # "." and ".." resolve to directories: creating them as files fails
    expect_errno((errno.EISDIR, errno.EEXIST), os.open, str(pool) + "/.", os.O_WRONLY | os.O_CREAT, 0o644)
    expect_errno((errno.EISDIR, errno.EEXIST), os.open, str(pool) + "/..", os.O_WRONLY | os.O_CREAT, 0o644)
    write_page(str(pool) + "/..x", b"dotdotx")
    write_page(str(pool) + "/.x", b"dotx")
    assert sorted(os.listdir(pool)) == ["..x", ".x"]
    assert read_page(str(pool) + "/..x") == b"dotdotx"


def test_empty_write_is_accepted_and_commits_an_empty_page(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    with opened(pool / "empty", os.O_WRONLY | os.O_CREAT | os.O_TRUNC) as fd:
        assert os.write(fd, b"") == 0
        assert os.pwrite(fd, b"", 1000) == 0
    st = os.stat(pool / "empty")
    assert st.st_size == 0
    assert read_page(pool / "empty") == b""
    # an empty write after real data does not change the size
    with opened(pool / "data", os.O_WRONLY | os.O_CREAT | os.O_TRUNC) as fd:
        write_all(fd, b"abc")
        assert os.write(fd, b"") == 0
    assert os.stat(pool / "data").st_size == 3
    assert read_page(pool / "data") == b"abc"


def test_zero_length_page_exists_with_size_zero(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    os.close(os.open(pool / "zero", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
    st = os.stat(pool / "zero")
    assert st.st_size == 0 and stat.S_ISREG(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o444
    r = stat_elsewhere(pool / "zero")
    assert r["ok"] and r["size"] == 0
    assert "zero" in os.listdir(pool)
    assert read_page(pool / "zero") == b""
    m.remount()
    assert os.stat(pool / "zero").st_size == 0
    assert read_page(pool / "zero") == b""


def test_write_ending_exactly_at_slot_size_is_ok(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    data = os.urandom(SLOT)
    write_page(pool / "full", data)
    assert os.stat(pool / "full").st_size == SLOT
    assert_bytes_equal(read_page(pool / "full"), data, "full-slot page")
    with opened(pool / "last", os.O_WRONLY | os.O_CREAT | os.O_TRUNC) as fd:
        assert os.pwrite(fd, b"E", SLOT - 1) == 1
    assert os.stat(pool / "last").st_size == SLOT
    got = read_page(pool / "last")
    assert len(got) == SLOT and got[-1:] == b"E" and got[:-1] == bytes(SLOT - 1)


def test_write_one_byte_past_slot_size_is_efbig(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    fd = os.open(pool / "over", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        assert os.pwrite(fd, b"a", SLOT - 1) == 1
        expect_errno(errno.EFBIG, os.pwrite, fd, b"b", SLOT)
        expect_errno(errno.EFBIG, os.pwrite, fd, b"bc", SLOT - 1, what="write straddling the slot end")
    finally:
        # README "Failed writes": close() returns EFBIG once, publishes nothing
        expect_errno(errno.EFBIG, os.close, fd)
    expect_errno(errno.ENOENT, os.stat, pool / "over")
    # a single write one byte too long
    fd = os.open(pool / "over2", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        r = None
        try:
            r = os.write(fd, os.urandom(SLOT + 1))
        except OSError as e:
            assert e.errno == errno.EFBIG, f"write of slot+1 bytes: {errno.errorcode[e.errno]}"
        # README: or a short count when the kernel split the write
        assert r is None or r <= SLOT
    finally:
        try:
            os.close(fd)
        except OSError as e:
            assert e.errno == errno.EFBIG
    # the slots are reusable: the pool still takes a full set of pages
    write_page(pool / "after", b"ok")
    assert read_page(pool / "after") == b"ok"


def test_o_append_writes_append(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    fd = os.open(pool / "ap", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        assert os.write(fd, b"one,") == 4
        assert os.write(fd, b"two,") == 4
        os.lseek(fd, 0, os.SEEK_SET)  # O_APPEND ignores the offset
        assert os.write(fd, b"three") == 5
    finally:
        os.close(fd)
    assert read_page(pool / "ap") == b"one,two,three"
    # a committed page is immutable: O_APPEND without O_TRUNC is EPERM
    expect_errno(errno.EPERM, os.open, pool / "ap", os.O_WRONLY | os.O_APPEND)
    assert read_page(pool / "ap") == b"one,two,three"
    # O_APPEND | O_TRUNC replaces it, then appends
    with opened(pool / "ap", os.O_WRONLY | os.O_APPEND | os.O_TRUNC) as fd:
        os.write(fd, b"new")
        os.write(fd, b"er")
    assert read_page(pool / "ap") == b"newer"


def test_o_direct_aligned_write_and_read(mount):
    """Page files are direct_io already; O_DIRECT with an aligned buffer works."""
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    buf = mmap.mmap(-1, 8192)  # page-aligned
    data = os.urandom(8192)
    buf.write(data)
    fd = os.open(pool / "direct", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
    try:
        assert os.write(fd, buf) == 8192
    finally:
        os.close(fd)
    assert os.stat(pool / "direct").st_size == 8192
    rbuf = mmap.mmap(-1, 8192)
    fd = os.open(pool / "direct", os.O_RDONLY | os.O_DIRECT)
    try:
        assert os.readv(fd, [rbuf]) == 8192
        assert os.readv(fd, [rbuf]) == 0
    finally:
        os.close(fd)
    assert_bytes_equal(bytes(rbuf), data, "O_DIRECT read")
    # unaligned O_DIRECT is no different for pagefs (direct_io, no page cache)
    with opened(pool / "direct", os.O_RDONLY | os.O_DIRECT) as fd:
        assert os.pread(fd, 100, 7) == data[7:107]
    assert_bytes_equal(read_page(pool / "direct"), data, "buffered read of an O_DIRECT page")


def test_shared_mmap_of_a_page_file_is_enodev_private_mmap_reads(mount):
    """README "Direct I/O for page files": page files cannot be mapped shared
    (ENODEV, the kernel's rule for direct_io files); a private mapping goes
    through the kernel's page cache and reads the page's bytes."""
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    data = os.urandom(5000)
    write_page(pool / "p", data)
    with opened(pool / "p") as fd:
        expect_errno(errno.ENODEV, mmap.mmap, fd, 5000, prot=mmap.PROT_READ, what="mmap MAP_SHARED")
        mp = mmap.mmap(fd, 5000, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
        try:
            assert_bytes_equal(mp[:], data, "MAP_PRIVATE read")
        finally:
            mp.close()
    fd = os.open(pool / "w", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, 4096)
        expect_errno(errno.ENODEV, mmap.mmap, fd, 4096, what="shared mmap of a page being written")
        write_all(fd, b"still writable")
    finally:
        os.close(fd)
    got = read_page(pool / "w")
    assert got[:14] == b"still writable" and len(got) == 4096
    with opened(pool / "p") as fd:
        assert read_all(fd) == data
