"""pagefs over a backing directory that is itself a FUSE mount (3FS in a
deployment; libfuse's passthrough_ll here, as `pagefs bench --backing-fuse`
stacks it). A splice from such a mount's direct-I/O files asks it for
4 KiB at a time, so the daemon notices the backing's type at mount and
answers reads from one pread, and reads and writes pages through aligned
buffers (fs/fs_align.h: one backing request per MiB). A write the kernel
cut at its 256-page limit is held back and sent with the rest of its
write() (fs/fs_write.c). The bytes must be exact on a page's first,
checked read and on later ones, at any offset, whatever sizes they were
written in.
"""
import errno
import mmap
import os
import random
import signal
import subprocess
import time

import pytest

import pagefs_helpers as H
from pagefs_helpers import read_page, write_page

PT_SOURCE = "/usr/share/doc/libfuse3-dev/examples/passthrough_ll.c"

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounting passthrough_ll needs root")


@pytest.fixture
def fuse_backing(tmp_path):
    """A directory served by passthrough_ll (cache=never), unmounted at the end."""
    (tmp_path / "src").mkdir()
    yield from passthrough(tmp_path)


@pytest.fixture
def small_fuse_backing(tmp_path, mount):
    """fuse_backing over a tmpfs of 512 KiB (unmounted by mount after it)."""
    mount.mount_tmpfs(tmp_path / "src", "512K")
    yield from passthrough(tmp_path)


def passthrough(tmp_path):
    """passthrough_ll of tmp_path/src, mounted while the generator runs."""
    binary = tmp_path / "passthrough_ll"
    r = subprocess.run(f"cc -O2 -w -o '{binary}' {PT_SOURCE} $(pkg-config --cflags --libs fuse3)",
                       shell=True, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"cannot build passthrough_ll (libfuse3-dev): {r.stderr}"
    src, mnt = tmp_path / "src", tmp_path / "fuse-backing"
    mnt.mkdir()
    with open(tmp_path / "passthrough.log", "w") as log:
        proc = subprocess.Popen([str(binary), "-f", "-o", f"source={src},cache=never", str(mnt)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 15
        while not H.is_mounted(mnt):
            assert proc.poll() is None, "passthrough_ll exited: " + (tmp_path / "passthrough.log").read_text()
            assert time.monotonic() < deadline, "passthrough_ll did not mount in 15 s"
            time.sleep(0.05)
        yield mnt
    finally:
        if H.is_mounted(mnt):
            subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True, timeout=30)
        if H.is_mounted(mnt):
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True, timeout=30)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


@needs_root
def test_pages_on_a_fuse_backing_read_back_exactly_on_first_and_later_reads(fuse_backing, mount):
    m = mount("--page-size", "4M", "--capacity", "64M", "--verify", "first",
              backing=fuse_backing)
    assert "is a FUSE mount: reads are copied" in m.log_tail(), m.log_tail()
    pool = m.pool(0, "kv")
    rng = random.Random(7)
    pages = {f"p{n}": rng.randbytes(n) for n in (65536, (1 << 20) + 17, (3 << 20) - 5, 1)}
    for name, data in pages.items():
        write_page(pool / name, data)
    # written in pieces of any size, 1 MiB ones included (the aligned copy)
    data = rng.randbytes(3 << 20)
    fd = os.open(pool / "pieces", os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        pos = 0
        while pos < len(data):
            n = rng.choice((1 << 20, 4096, 1, rng.randrange(1, 1 << 20)))
            pos += os.write(fd, data[pos:pos + n])
    finally:
        os.close(fd)
    pages["pieces"] = data
    for attempt in range(2):  # the first open checks (and may keep) the bytes; then plain reads
        for name, data in pages.items():
            assert read_page(pool / name) == data, f"{name}: read {attempt} differs"
    for name, data in pages.items():
        with open(pool / name, "rb", buffering=0) as f:
            for _ in range(20):
                off = rng.randrange(len(data))
                n = rng.randrange(1, 600000)
                assert os.pread(f.fileno(), n, off) == data[off:off + n], (name, off, n)
    m.umount()
    m.start()  # after a remount every page is checked once more, then read plainly
    for attempt in range(2):
        for name, data in pages.items():
            assert read_page(pool / name) == data, f"{name}: read {attempt} after remount"
    m.umount()


def unaligned(data, lead):
    """A view of data starting lead bytes into a page of memory."""
    m = mmap.mmap(-1, len(data) + lead)
    m[lead:] = data
    return memoryview(m)[lead:]


@needs_root
def test_held_write_bytes_reach_the_backing_before_any_later_use(fuse_backing, mount):
    """The first part of a 1 MiB write() from a buffer 16 bytes into a page
    (256 pages of memory: what the kernel sends in one request) is held
    back: a later write over it, an fsync, a read through the writer, a
    truncate and the commit must all see its bytes."""
    m = mount("--page-size", "4M", "--capacity", "64M", backing=fuse_backing)
    pool = m.pool(0, "kv")
    rng = random.Random(11)
    MIB = 1 << 20
    expect = {}

    d = rng.randbytes(MIB)
    fd = os.open(pool / "whole", os.O_CREAT | os.O_WRONLY, 0o644)
    assert os.write(fd, unaligned(d, 16)) == MIB
    os.close(fd)
    expect["whole"] = d

    d = bytearray(rng.randbytes(MIB - 16))
    fd = os.open(pool / "overwritten", os.O_CREAT | os.O_WRONLY, 0o644)
    assert os.write(fd, unaligned(bytes(d), 16)) == MIB - 16  # one request: held
    assert os.pwrite(fd, b"Z" * 100, 5000) == 100             # over the held bytes
    os.close(fd)
    d[5000:5100] = b"Z" * 100
    expect["overwritten"] = bytes(d)

    d = rng.randbytes(MIB - 16)
    fd = os.open(pool / "rdwr", os.O_CREAT | os.O_RDWR, 0o644)
    assert os.write(fd, unaligned(d, 16)) == MIB - 16
    os.fsync(fd)
    assert os.pread(fd, 4096, MIB - 4096) == d[MIB - 4096:], "read through the writer"
    assert os.write(fd, unaligned(d[:100], 16)) == 100         # held again? (too small: no)
    os.ftruncate(fd, 700000)
    os.close(fd)
    expect["rdwr"] = d[:700000]

    d = rng.randbytes(MIB - 16)
    fd = os.open(pool / "committed", os.O_CREAT | os.O_WRONLY, 0o644)
    assert os.write(fd, unaligned(d, 16)) == MIB - 16          # held until the commit
    os.close(fd)
    expect["committed"] = d

    for attempt in range(2):
        for name, data in expect.items():
            assert read_page(pool / name) == data, f"{name}: read {attempt} differs"
    m.umount()
    m.start()
    for name, data in expect.items():
        assert read_page(pool / name) == data, f"{name}: after a remount"
    m.umount()


@needs_root
def test_backing_error_on_held_bytes_fails_the_close_and_publishes_nothing(small_fuse_backing,
                                                                            mount):
    """Held bytes go to the backing only at the close here: its ENOSPC is
    what close() returns, and the page is not published."""
    m = mount("--page-size", "4M", "--capacity", "64M", backing=small_fuse_backing)
    pool = m.pool(0, "kv")
    d = random.Random(3).randbytes((1 << 20) - 16)
    fd = os.open(pool / "too-big", os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        assert os.write(fd, unaligned(d, 16)) == len(d)  # held: answered at once
    finally:
        with pytest.raises(OSError) as e:
            os.close(fd)
    assert e.value.errno == errno.ENOSPC, e.value
    assert "too-big" not in os.listdir(pool)
    with pytest.raises(FileNotFoundError):
        os.stat(pool / "too-big")
    small = b"fits"
    write_page(pool / "small", small)
    assert read_page(pool / "small") == small
    m.umount()


@needs_root
def test_umount_force_aborts_only_pagefs_mounts(fuse_backing):
    """`pagefs umount --force` aborts a hung pagefs mount's connection; on
    another file system's FUSE mount (here passthrough_ll, an sshfs or a
    3FS elsewhere) it refuses, where it used to abort that mount too."""
    r = H.run_pagefs("umount", "--force", fuse_backing)
    assert r.returncode == 1 and "not pagefs" in r.stderr, H.describe(r)
    assert H.is_mounted(fuse_backing)
    (fuse_backing / "still-there").write_text("yes")
    assert (fuse_backing / "still-there").read_text() == "yes"
