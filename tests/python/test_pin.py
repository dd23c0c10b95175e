"""The batch pin on a real mount (fs/fs_ioctl.c LOOKUP_PIN and UNPIN,
fs/fs_pin.c): one request pins a batch's slots for a client that reads
them from the data file, and nothing can reuse a pinned slot until UNPIN,
the close of the pool directory (a client that dies) or unmount."""
import errno
import fcntl
import os
import signal
import struct
import subprocess
import sys

import pytest

import pagefs
from pagefs import _wire
from pagefs_helpers import expect_errno, force_unmount, wait_pid_gone

KB = 1024
PAGE = 64 * KB


@pytest.fixture
def small(mount):
    """A pool of 4 pages of 64 KiB that evicts: a slot freed by an unlink
    is the first a new page takes, unless it is pinned."""
    m = mount("--page-size", "64K", "--capacity", "256K")
    # One page at a time: with a slot pinned, three are left, and four
    # writers at once would rightly leave one without a slot (ENOSPC).
    c = pagefs.Client(m.mnt, threads=1)
    c.pool(0, "kv")
    yield m, c
    c.close()


def pool_stats(c):
    (p,) = [p for p in c.stats()["pools"] if p["rank"] == 0 and p["namespace"] == "kv"]
    return p


def offsets(c, names):
    _, _, recs = c.lookup(0, "kv", names)
    return {r.offset for r in recs if r.found}


def fill(c, prefix, n):
    names = ["%s%d" % (prefix, i) for i in range(n)]
    assert c.write(0, "kv", names, [bytes([65 + i]) * PAGE for i in range(n)]) == [True] * n
    return names


def data_at(path, offset):
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(PAGE)


def test_a_batch_is_read_through_one_pin_and_one_unpin_and_leaves_no_pin(small):
    m, c = small
    names = fill(c, "p", 4)
    bufs = [bytearray(PAGE) for _ in names]
    hits = pool_stats(c)["hits"]
    assert c.read_into(0, "kv", names + ["missing"], bufs + [bytearray(PAGE)]) == \
        [True] * 4 + [False]
    assert [bytes(b) for b in bufs] == [bytes([65 + i]) * PAGE for i in range(4)]
    assert c.counters["pinned_batches"] == 1
    assert c.counters["direct_reads"] == 4 and c.counters["mount_reads"] == 0
    st = pool_stats(c)
    assert st["pinned_slots"] == 0, "UNPIN left a pin behind"
    assert st["hits"] == hits + 4, "a pinned lookup counts a hit per page found"


def test_a_pinned_slot_is_not_reused_until_unpin(small):
    m, c = small
    fill(c, "p", 4)
    p = c._pool(0, "kv")
    path, _, recs, tokens = _wire.lookup_pin(p.dirfd, [b"p0"])
    assert recs[0].pinned and recs[0].found and len(tokens) == 1
    held = recs[0].offset
    assert pool_stats(c)["pinned_slots"] == 1
    os.unlink(m.path(0, "kv", "p0"))
    fill(c, "q", 6)  # the full pool evicts; the freed, pinned slot stays
    assert held not in offsets(c, ["q%d" % i for i in range(6)])
    assert data_at(path, held) == b"A" * PAGE, "a pinned slot was overwritten"
    _wire.unpin(p.dirfd, tokens)
    assert pool_stats(c)["pinned_slots"] == 0
    fill(c, "r", 4)  # the whole pool again: the slot is used once more
    assert held in offsets(c, ["r%d" % i for i in range(4)])


def test_closing_the_pool_directory_drops_the_pins_it_holds(small):
    m, c = small
    fill(c, "p", 4)
    fd = os.open(m.path(0, "kv"), os.O_RDONLY | os.O_DIRECTORY)
    try:
        _, _, recs, _ = _wire.lookup_pin(fd, [b"p0", b"p1"])
        assert pool_stats(c)["pinned_slots"] == 2
    finally:
        os.close(fd)
    assert pool_stats(c)["pinned_slots"] == 0
    os.unlink(m.path(0, "kv", "p0"))
    fill(c, "r", 4)
    assert recs[0].offset in offsets(c, ["r%d" % i for i in range(4)])


def test_a_client_killed_while_it_holds_pins_lets_them_go(small):
    m, c = small
    fill(c, "p", 4)
    code = ("import os, sys; sys.path.insert(0, %r); from pagefs import _wire\n"
            "fd = os.open(%r, os.O_RDONLY | os.O_DIRECTORY)\n"
            "_wire.lookup_pin(fd, [b'p0', b'p1', b'p2'])\n"
            "print('pinned', flush=True); sys.stdin.read()\n"
            % (os.path.dirname(os.path.dirname(pagefs.__file__)), str(m.path(0, "kv"))))
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "pinned"
        assert pool_stats(c)["pinned_slots"] == 3
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        child.stdin.close()
        child.stdout.close()
    assert pool_stats(c)["pinned_slots"] == 0


def test_unpin_refuses_tokens_this_directory_does_not_hold(small):
    m, c = small
    fill(c, "p", 1)
    fd1 = os.open(m.path(0, "kv"), os.O_RDONLY | os.O_DIRECTORY)
    fd2 = os.open(m.path(0, "kv"), os.O_RDONLY | os.O_DIRECTORY)
    try:
        _, _, _, (t1,) = _wire.lookup_pin(fd1, [b"p0"])
        _, _, _, (t2,) = _wire.lookup_pin(fd2, [b"p0"])
        assert pool_stats(c)["pinned_slots"] == 1  # one slot, pinned twice
        expect_errno(errno.EINVAL, _wire.unpin, fd2, [t1 + 1000])
        # A token of another open directory is not this one's; its own
        # token in the same request is still dropped.
        other = t1 if t1 != t2 else t1 + 1
        expect_errno(errno.EINVAL, _wire.unpin, fd2, [other, t2])
        expect_errno(errno.EINVAL, _wire.unpin, fd2, [t2])  # dropped already
        assert pool_stats(c)["pinned_slots"] == 1  # fd1's pin holds it
        _wire.unpin(fd1, [t1])
        assert pool_stats(c)["pinned_slots"] == 0
    finally:
        os.close(fd1)
        os.close(fd2)


def test_malformed_unpin_requests_are_refused(small):
    m, c = small
    p = c._pool(0, "kv")
    for count, body in ((1, b"x\0"), (0, b"1234567")):
        buf = bytearray(_wire.IOC_SIZE)
        struct.pack_into("=IHHII", buf, 0, _wire.MAGIC, _wire.VERSION, _wire.OP_UNPIN, count,
                         len(body))
        buf[16:16 + len(body)] = body
        expect_errno(errno.EINVAL, fcntl.ioctl, p.dirfd, _wire.IOC_BATCH, buf, True)
    root = os.open(m.mnt, os.O_RDONLY | os.O_DIRECTORY)
    try:
        expect_errno(errno.ENOTDIR, _wire.lookup_pin, root, [b"p0"])
    finally:
        os.close(root)


def test_a_directory_holding_too_many_pins_is_refused_and_pins_nothing_more(small):
    m, c = small
    fill(c, "p", 1)
    fd = os.open(m.path(0, "kv"), os.O_RDONLY | os.O_DIRECTORY)
    try:
        batch = [b"p0"] * _wire.MAX_NAMES
        tokens, refused = [], None
        for _ in range((1 << 16) // len(batch) + 2):
            try:
                tokens += _wire.lookup_pin(fd, batch)[3]
            except OSError as e:
                refused = e
                break
        assert refused is not None and refused.errno == errno.EBUSY
        assert len(tokens) * len(batch) <= 1 << 16 < (len(tokens) + 1) * len(batch)
        _wire.unpin(fd, tokens[:1])
        _wire.unpin(fd, _wire.lookup_pin(fd, batch)[3])  # room again
        _wire.unpin(fd, tokens[1:])
        assert pool_stats(c)["pinned_slots"] == 0
    finally:
        os.close(fd)


def test_a_page_without_a_checksum_or_a_daemon_without_the_pin_reads_through_opens(
        small, monkeypatch):
    m, c = small
    names = fill(c, "p", 2)

    def old_daemon(dirfd, encoded):
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(_wire, "lookup_pin", old_daemon)
    bufs = [bytearray(PAGE) for _ in names]
    assert c.read_into(0, "kv", names, bufs) == [True, True]
    assert bytes(bufs[1]) == b"B" * PAGE
    assert c.pin is False and c.counters["pinned_batches"] == 0
    assert c.counters["direct_reads"] == 2  # each page opened, its bytes from the data file


def test_a_corrupt_pinned_page_is_a_miss_and_the_daemon_drops_it(small):
    m, c = small
    fill(c, "p", 2)
    path, _, recs = c.lookup(0, "kv", ["p0"])
    with open(path, "r+b") as f:
        f.seek(recs[0].offset + 7)
        f.write(b"Z")
    bufs = [bytearray(PAGE), bytearray(PAGE)]
    assert c.read_into(0, "kv", ["p0", "p1"], bufs) == [False, True]
    assert bytes(bufs[1]) == b"B" * PAGE
    # Nobody had opened p0: the open that followed the client's mismatch
    # let the daemon check it (--verify first), and it dropped the page.
    assert c.exists(0, "kv", ["p0", "p1"]) == [False, True]
    assert pool_stats(c)["checksum_failures"] == 1 and pool_stats(c)["pinned_slots"] == 0


def test_a_daemon_stopped_while_directories_hold_pins_drops_them_and_exits(mount):
    """SIGTERM with a pool directory still open and pinning: the kernel
    never releases it, so the daemon drops its handle and pins itself on
    the way out (the ASan pass fails the test on a leak of either)."""
    m = mount("--page-size", "64K", "--capacity", "256K")
    # One page at a time: with a slot pinned, three are left, and four
    # writers at once would rightly leave one without a slot (ENOSPC).
    c = pagefs.Client(m.mnt, threads=1)
    c.pool(0, "kv")
    fill(c, "p", 2)
    _wire.lookup_pin(c._pool(0, "kv").dirfd, [b"p0", b"p1"])
    assert pool_stats(c)["pinned_slots"] == 2
    pid = m.pid
    try:
        os.kill(pid, signal.SIGTERM)
        assert wait_pid_gone(pid, 30), "the daemon did not exit on SIGTERM"
    finally:
        c.close()
        force_unmount(m.mnt, use_pagefs=False)
        m.mounted = False
    assert "unmounting" in m.log_tail()
