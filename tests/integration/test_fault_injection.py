"""SPEC "Durability and crashes": errors of the backing mount reach the caller
as their errno and commit nothing; once the fault clears, the mount works on
without a remount.

Faults come from tests/fault/fault_shim.c (built next to the pagefs binary
as libpagefs_fault_shim.so), preloaded into the daemon. The test switches
them while the daemon runs by rewriting the control file: "OP MODE PATTERN"
lines, OP pwrite|pread|fdatasync, MODE an errno number or "short".
"""
import errno
import json
import os

import pytest

import pageformat as PF
from pagefs_helpers import (PAGEFS_BIN, describe, expect_errno, read_page, run_pagefs,
                            try_write_page, write_page)

SHIM = os.path.join(os.path.dirname(os.path.abspath(PAGEFS_BIN)), "libpagefs_fault_shim.so")
FAULTS = []  # injected fault counts per test, for the report


class Faulty:
    def __init__(self, mount, *opts):
        assert os.path.exists(SHIM), f"{SHIM} is missing: build the pagefs_fault_shim target"
        self.m = mount(*opts, start=False)
        self.ctl = self.m.dir / "faults"
        self.ctl.write_text("")
        base_env = self.m.env

        def env():
            e = base_env()
            e["LD_PRELOAD"] = SHIM
            e["PAGEFS_FAULT_CTL"] = str(self.ctl)
            # The shim has no ASan; the ASan runtime need not come first.
            e["ASAN_OPTIONS"] = e.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"
            return e
        self.m.env = env
        self.m.start()
        self.pool = self.m.pool(0, "kv")

    def set(self, *rules):
        tmp = self.ctl.with_suffix(".new")
        tmp.write_text("".join(f"{r}\n" for r in rules))
        os.replace(tmp, self.ctl)

    def hits(self):
        p = self.ctl.with_name(self.ctl.name + ".hits")
        return len(p.read_text().splitlines()) if p.exists() else 0


@pytest.mark.parametrize("err", [errno.EIO, errno.ENOSPC], ids=["EIO", "ENOSPC"])
def test_data_write_error_reaches_the_caller_commits_nothing_and_clears(mount, err):
    f = Faulty(mount, "--page-size", "1M", "--capacity", "64M")
    old = PF.make_page("old", 1, 300000)
    write_page(f.pool / "old", old)
    f.set(f"pwrite {err} hicache.0.bin")
    for i in range(5):
        got = try_write_page(f.pool / f"new{i}", PF.make_page(f"new{i}", 1, 200000 + i))
        assert got == ("write", err), f"write under an injected {errno.errorcode[err]}: {got}"
        expect_errno(errno.ENOENT, os.stat, f.pool / f"new{i}", what="a failed page is visible")
    got = try_write_page(f.pool / "old", PF.make_page("old", 2, 1000))
    assert got == ("write", err), f"replacement under the fault: {got}"
    assert read_page(f.pool / "old") == old, "a failed replacement must keep the old page"
    assert sorted(os.listdir(f.pool)) == ["old"]
    assert f.hits() >= 6
    f.set()  # the fault clears: no remount
    for i in range(5):
        data = PF.make_page(f"new{i}", 2, 100000 + i)
        write_page(f.pool / f"new{i}", data)
        assert read_page(f.pool / f"new{i}") == data
    free, total = f.m.statvfs_free_total()
    assert free == total - 6 * (1 << 20), "slots of failed writes must be free again"
    FAULTS.append(f.hits())
    f.m.umount()
    r = run_pagefs("fsck", f.m.backing, "--meta", f.m.meta, "--verify-data")
    assert r.returncode == 0, describe(r)


def test_short_data_writes_are_completed_and_the_bytes_are_exact(mount):
    f = Faulty(mount, "--page-size", "1M", "--capacity", "64M")
    f.set("pwrite short hicache.0.bin")
    pages = {f"s{i}": PF.make_page(f"s{i}", 1, 1 << (10 + i)) for i in range(11)}
    for n, data in pages.items():
        write_page(f.pool / n, data)
    assert f.hits() >= len(pages), "the shim should have shortened the writes"
    f.set()
    for n, data in pages.items():
        assert read_page(f.pool / n) == data, f"{n} after short backing writes"
    FAULTS.append(f.hits())
    f.m.umount()
    r = run_pagefs("fsck", f.m.backing, "--meta", f.m.meta, "--verify-data")
    assert r.returncode == 0, describe(r)


def test_fdatasync_error_with_power_durability_fails_the_close_and_commits_nothing(mount):
    f = Faulty(mount, "--page-size", "64K", "--capacity", "4M", "--durability", "power")
    write_page(f.pool / "before", b"b" * 1000)
    f.set(f"fdatasync {errno.EIO} hicache.0.bin")
    got = try_write_page(f.pool / "p", b"p" * 5000)
    assert got == ("close", errno.EIO), f"close of a page whose fdatasync failed: {got}"
    expect_errno(errno.ENOENT, os.stat, f.pool / "p", what="a page that was not synced")
    assert f.hits() >= 1
    f.set()
    write_page(f.pool / "p", b"q" * 5000)
    assert read_page(f.pool / "p") == b"q" * 5000
    assert read_page(f.pool / "before") == b"b" * 1000
    FAULTS.append(f.hits())


def test_faults_on_another_pools_data_file_leave_this_pool_alone(mount):
    f = Faulty(mount, "--page-size", "64K", "--capacity", "4M")
    other = f.m.pool(0, "mamba")
    f.set(f"pwrite {errno.EIO} hicache.0.bin.mamba")
    assert try_write_page(other / "x", b"x" * 100) == ("write", errno.EIO)
    write_page(f.pool / "fine", b"fine" * 100)
    assert read_page(f.pool / "fine") == b"fine" * 100
    FAULTS.append(f.hits())


@pytest.mark.parametrize("err", [errno.EIO, errno.ENOTCONN], ids=["EIO", "ENOTCONN"])
def test_a_read_error_while_verifying_reaches_the_caller_and_the_page_stays(mount, err):
    """The first open of a page reads it to verify it (--verify first): a
    backing read error there is the backing's errno for the open, not a
    checksum failure. The page stays listed, uncounted, and reads back
    whole once the fault clears."""
    f = Faulty(mount, "--page-size", "64K", "--capacity", "4M")
    data = PF.make_page("v", 1, 50000)
    write_page(f.pool / "v", data)
    f.set(f"pread {err} hicache.0.bin")
    for _ in range(2):
        expect_errno(err, read_page, f.pool / "v", what="a page whose bytes cannot be read")
    assert f.hits() >= 2
    assert os.listdir(f.pool) == ["v"], "a read error must not drop the page"
    stats = json.loads(os.getxattr(f.m.mnt, "user.pagefs.stats"))
    assert stats["totals"]["checksum_failures"] == 0
    f.set()
    assert read_page(f.pool / "v") == data
    FAULTS.append(f.hits())


def test_a_page_whose_bytes_are_gone_still_fails_verification(mount):
    """A data file cut short under a page (its bytes gone) is a failed
    verification: EIO, dropped, counted."""
    f = Faulty(mount, "--page-size", "64K", "--capacity", "4M")
    write_page(f.pool / "keep", b"k" * 1000)
    write_page(f.pool / "cut", b"c" * 1000)
    offset = int(os.getxattr(f.pool / "cut", "user.pagefs.offset"))
    data_file = os.getxattr(f.pool / "cut", "user.pagefs.data_file")
    assert offset > int(os.getxattr(f.pool / "keep", "user.pagefs.offset"))
    os.truncate(data_file, offset)
    expect_errno(errno.EIO, read_page, f.pool / "cut", what="a page past the data file's end")
    assert os.listdir(f.pool) == ["keep"]
    stats = json.loads(os.getxattr(f.m.mnt, "user.pagefs.stats"))
    assert stats["totals"]["checksum_failures"] == 1
    assert read_page(f.pool / "keep") == b"k" * 1000


def test_an_index_sync_error_with_power_durability_fails_the_close_and_commits_nothing(mount):
    """Under --durability power the index is synced before close returns:
    when that sync fails, the close fails and the page is not there, and
    once the fault clears the mount commits again and a remount agrees."""
    f = Faulty(mount, "--page-size", "64K", "--capacity", "4M", "--durability", "power")
    if not f.m.meta.startswith("sqlite:"):
        pytest.skip("the index is PostgreSQL's: its sync is the server's")
    write_page(f.pool / "before", b"b" * 1000)
    f.set(f"fdatasync {errno.EIO} {os.path.basename(f.m.meta[len('sqlite:'):])}")
    got = try_write_page(f.pool / "p", b"p" * 5000)
    assert got == ("close", errno.EIO), f"close of a page whose index sync failed: {got}"
    assert f.hits() >= 1
    expect_errno(errno.ENOENT, os.stat, f.pool / "p", what="a page whose record was not synced")
    assert read_page(f.pool / "before") == b"b" * 1000
    f.set()  # the fault clears: the same mount commits again
    write_page(f.pool / "p", b"q" * 5000)
    assert read_page(f.pool / "p") == b"q" * 5000
    FAULTS.append(f.hits())
    f.m.umount()
    f.m.start()
    assert sorted(os.listdir(f.pool)) == ["before", "p"]
    assert read_page(f.pool / "p") == b"q" * 5000


def test_a_backing_read_error_of_a_verified_page_reaches_the_reader(mount):
    """SPEC: errors of the backing reach the caller as that errno. A page
    read once (verified) and read again while the data file's reads fail
    gives the reader the error; it stays, and reads back after."""
    f = Faulty(mount, "--page-size", "64K", "--capacity", "4M")
    data = PF.make_page("r", 1, 60000)
    write_page(f.pool / "r", data)
    assert read_page(f.pool / "r") == data  # verified: later opens read the data file
    f.set(f"pread {errno.EIO} hicache.0.bin")
    expect_errno(errno.EIO, read_page, f.pool / "r", what="a read the backing failed")
    assert f.hits() >= 1
    f.set()
    assert os.listdir(f.pool) == ["r"]
    assert read_page(f.pool / "r") == data
    FAULTS.append(f.hits())
