"""SPEC xattrs of a page: slot, offset, data_file, checksum; the raw path to the bytes."""
import errno
import os

from pagefs_helpers import PAGEFS_BIN, WRAPPER, assert_bytes_equal, expect_errno, write_page, xattr_int, xattr_str

SMALL = ("--page-size", "64K", "--capacity", "1M")
PAGE_XATTRS = {"user.pagefs.slot", "user.pagefs.offset", "user.pagefs.data_file",
               "user.pagefs.checksum"}


def raw_read(page, length):
    data_file = xattr_str(page, "user.pagefs.data_file")
    off = xattr_int(page, "user.pagefs.offset")
    with open(data_file, "rb") as f:
        f.seek(off)
        return f.read(length)


def test_page_xattrs_locate_its_bytes_in_the_hf3fs_data_files(mount):
    m = mount(*SMALL)
    kv, mamba = m.pool(0, "kv"), m.pool(0, "mamba")
    pages = {}
    for pool in (kv, mamba):
        for i in range(3):
            d = os.urandom(1000 + 20000 * i)
            write_page(pool / f"p{i}", d)
            pages[pool / f"p{i}"] = d
    want_file = {kv: m.backing / "hicache.0.bin", mamba: m.backing / "hicache.0.bin.mamba"}
    for pool in (kv, mamba):
        slots = set()
        for i in range(3):
            page = pool / f"p{i}"
            slot = xattr_int(page, "user.pagefs.slot")
            off = xattr_int(page, "user.pagefs.offset")
            assert off == slot * 65536, f"{page}: offset {off} != slot {slot} * 65536"
            assert slot < 16, f"{page}: slot {slot} outside a 16-slot pool"
            slots.add(slot)
            df = xattr_str(page, "user.pagefs.data_file")
            assert os.path.realpath(df) == os.path.realpath(want_file[pool]), \
                f"{page}: data_file {df!r}, expected {want_file[pool]}"
            assert_bytes_equal(raw_read(page, len(pages[page])), pages[page],
                               f"bytes of {page} read straight from {df} at {off}")
        assert len(slots) == 3, f"pages of {pool} share slots: {slots}"


def test_data_file_of_a_rank_other_than_zero_carries_the_rank(mount):
    m = mount(*SMALL)
    pool = m.pool(7, "kv")
    write_page(pool / "p", b"seven")
    assert os.path.realpath(xattr_str(pool / "p", "user.pagefs.data_file")) == \
        os.path.realpath(m.backing / "hicache.7.bin")
    pool = m.pool(7, "swa")
    write_page(pool / "p", b"seven swa")
    assert os.path.realpath(xattr_str(pool / "p", "user.pagefs.data_file")) == \
        os.path.realpath(m.backing / "hicache.7.bin.swa")
    assert raw_read(pool / "p", 9) == b"seven swa"


def test_prefix_option_names_the_data_files(mount):
    m = mount(*SMALL, "--prefix", "myprefix")
    pool = m.pool(0, "kv")
    write_page(pool / "p", b"prefixed")
    assert os.path.realpath(xattr_str(pool / "p", "user.pagefs.data_file")) == \
        os.path.realpath(m.backing / "myprefix.0.bin")
    assert raw_read(pool / "p", 8) == b"prefixed"


def test_listxattr_of_a_page_names_its_xattrs(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    write_page(pool / "p", b"x")
    names = set(os.listxattr(pool / "p"))
    assert PAGE_XATTRS <= names, f"listxattr of a page: {sorted(names)}, missing {PAGE_XATTRS - names}"
    for n in names:
        os.getxattr(pool / "p", n)  # every listed xattr is readable


def test_setxattr_on_a_page_fails_with_eperm(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    write_page(pool / "p", b"x")
    slot = os.getxattr(pool / "p", "user.pagefs.slot")
    expect_errno(errno.EPERM, os.setxattr, pool / "p", "user.pagefs.slot", b"3")
    expect_errno(errno.EPERM, os.setxattr, pool / "p", "user.pagefs.checksum", b"0" * 16)
    # a name pagefs does not know: EPERM, or ENOTSUP (no such xattrs here)
    expect_errno((errno.EPERM, errno.ENOTSUP), os.setxattr, pool / "p", "user.other", b"v")
    assert "user.other" not in os.listxattr(pool / "p")
    assert os.getxattr(pool / "p", "user.pagefs.slot") == slot


def test_root_xattr_pid_names_the_running_daemon(mount):
    m = mount()
    pid = xattr_int(m.mnt, "user.pagefs.pid")
    exe = os.path.realpath(f"/proc/{pid}/exe")
    if WRAPPER:  # e.g. valgrind: the process runs the wrapper's binary
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = [os.fsdecode(a) for a in f.read().split(b"\0")]
        assert PAGEFS_BIN in args, f"user.pagefs.pid {pid} runs {args}, not {PAGEFS_BIN}"
        return
    assert exe == os.path.realpath(PAGEFS_BIN), f"user.pagefs.pid {pid} runs {exe}, not {PAGEFS_BIN}"
