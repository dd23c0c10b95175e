"""A node of a shared (PostgreSQL) index that was stopped for longer than its
lease (SIGSTOP, a paused VM) comes back removed: another node took its
chunks and rewrote their slots. It must then neither write into a slot it
reserved before the stop (another node's page lives there now) nor read
bytes through its stale mirror (docs/NEMESIS.md; meta/cluster/lease.c). Needs
PAGEFS_TEST_PG_URI (skipped without it).
"""
import errno
import os
import signal
import time

import pytest

import pagefs_helpers as H
from pagefs_helpers import expect_errno, read_page, write_page
from pageformat import make_page

pytestmark = pytest.mark.skipif(bool(H.PG_SKIP), reason=H.PG_SKIP)

PAGE = 64 * 1024
OPTS = ("--page-size", "64K", "--capacity", "2M")  # 32 slots, chunks of one


def test_a_node_resumed_after_its_lease_ran_out_writes_and_reads_no_slot_another_node_took(mount):
    a = mount(*OPTS, meta=mount.pg_index())
    b = mount(*OPTS, backing=a.backing, meta=a.meta)
    a.pool()
    assert H.wait_until(lambda: os.path.isdir(b.path(0, "kv")), timeout=5)
    mine = {f"a-{i}": make_page(f"a-{i}", 1, PAGE) for i in range(8)}
    for name, data in mine.items():
        write_page(a.path(0, "kv", name), data)
    assert read_page(a.path(0, "kv", "a-0")) == mine["a-0"]  # verified once: not again
    fd = os.open(a.path(0, "kv", "late"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    theirs = {}
    try:
        os.write(fd, make_page("late", 1, PAGE)[:4096])  # a holds a slot for it now
        os.kill(a.pid, signal.SIGSTOP)
        try:
            # (no child process while a is stopped: it would flush fd there)
            t0 = time.monotonic()
            while "stopped renewing their lease were removed" not in b.log.read_text():
                assert time.monotonic() - t0 < 30, "the stopped node was never removed"
                time.sleep(0.2)
            # b takes every slot of the pool, a's chunks included
            for i in range(48):
                name = f"b-{i}"
                theirs[name] = make_page(name, 2, PAGE)
                write_page(b.path(0, "kv", name), theirs[name])
        finally:
            os.kill(a.pid, signal.SIGCONT)
        # a's write lands nowhere: its slot is b's now
        expect_errno(errno.EIO, os.write, fd, make_page("late", 1, PAGE)[4096:],
                     what="a write through a node whose lease ran out")
    finally:
        try:
            os.close(fd)
        except OSError:
            pass
    # a reads nothing through its stale mirror: EIO (or, once its feed
    # caught up, ENOENT), never the bytes b wrote into the slot since
    for name, data in mine.items():
        try:
            got = read_page(a.path(0, "kv", name))
        except OSError as e:
            assert e.errno in (errno.EIO, errno.ENOENT), f"{name}: {H.ename(e.errno)}"
        else:
            assert got == data, f"{name} read through the removed node gave other bytes"
    # and every page b still has reads back exactly, checksum and all
    live = set(os.listdir(b.path(0, "kv")))
    assert len(live & set(theirs)) >= 16, f"b kept only {sorted(live)}"
    for name in live & set(theirs):
        assert read_page(b.path(0, "kv", name)) == theirs[name], f"{name} was overwritten"
