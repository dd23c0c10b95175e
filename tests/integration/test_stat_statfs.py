"""SPEC stat and statfs (df), and the directory tools (ls -l, du, find)."""
import os
import subprocess
import time

from pagefs_helpers import describe, is_mounted, pid_alive, run_pagefs, wait_until, write_page

SMALL = ("--page-size", "64K", "--capacity", "1M")
SLOT = 65536


def free_total(m):
    s = os.statvfs(m.mnt)
    return s.f_bfree * s.f_frsize, s.f_blocks * s.f_frsize


def test_st_ino_of_pages_is_stable_across_unmount_and_mount(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    inos = {}
    for i in range(5):
        write_page(pool / f"p{i}", b"%d" % i)
        inos[f"p{i}"] = os.stat(pool / f"p{i}").st_ino
    assert len(set(inos.values())) == 5, f"pages share inode numbers: {inos}"
    m.umount()
    m.start()
    for n, ino in inos.items():
        assert os.stat(pool / n).st_ino == ino, f"st_ino of {n} changed across remount"
    dents = {e.name: e.inode() for e in os.scandir(pool)}
    assert dents == inos, f"readdir inode numbers {dents} != stat {inos}"


def test_times_cannot_be_set_and_setting_them_is_not_an_error(mount):
    """README Decisions "Times cannot be set": touch and utimensat succeed
    and change nothing; st_mtime stays the commit time."""
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    write_page(pool / "p", b"x" * 100)
    before = os.stat(pool / "p")
    os.utime(pool / "p", ns=(10**9, 2 * 10**9))
    os.utime(pool, ns=(10**9, 2 * 10**9))
    r = subprocess.run(["touch", "-d", "2001-01-01", str(pool / "p")], capture_output=True,
                       text=True)
    assert r.returncode == 0, describe(r)
    m.remount()  # what the daemon holds, not what the kernel cached
    after = os.stat(pool / "p")
    assert after.st_mtime_ns == before.st_mtime_ns, "utime changed a page's mtime"
    assert after.st_mtime_ns > 2 * 10**9 and os.stat(pool).st_mtime_ns > 2 * 10**9
    assert after.st_size == 100


def test_statfs_total_is_the_sum_of_pool_capacities_and_free_counts_slots(mount):
    m = mount(*SMALL)
    kv = m.pool(0, "kv")
    m.pool(1, "kv")
    assert free_total(m) == (2 << 20, 2 << 20), f"two empty 1M pools: free/total {free_total(m)}"
    for i in range(3):
        write_page(kv / f"p{i}", b"x" * (i * 1000 + 1))
        assert wait_until(lambda: free_total(m)[0] == (2 << 20) - (i + 1) * SLOT, 3), \
            f"after {i + 1} pages free/total is {free_total(m)}, want free {(2 << 20) - (i + 1) * SLOT}"
    os.unlink(kv / "p1")
    assert wait_until(lambda: free_total(m)[0] == (2 << 20) - 2 * SLOT, 3), \
        f"after an unlink free/total is {free_total(m)}"
    big = m.pool(2, "indexer")
    os.setxattr(big, "user.pagefs.page_size", b"1M")
    os.setxattr(big, "user.pagefs.capacity", b"4M")
    assert free_total(m)[1] == 6 << 20, f"total after adding a 4M pool: {free_total(m)}"
    write_page(big / "p", b"y")
    assert wait_until(lambda: free_total(m)[0] == (6 << 20) - 2 * SLOT - (1 << 20), 3), \
        f"a page in a 1M-slot pool takes one 1M slot: {free_total(m)}"
    r = subprocess.run(["df", "-B1", str(m.mnt)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, f"df failed: {r.stderr}"
    assert str(6 << 20) in r.stdout, f"df should show the 6 MiB total: {r.stdout}"


def test_ls_du_and_find_work_on_the_tree(mount):
    m = mount(*SMALL)
    sizes = {}
    for rank, ns in ((0, "kv"), (0, "mamba"), (1, "kv")):
        pool = m.pool(rank, ns)
        for i in range(3):
            sizes[f"{rank}/{ns}/p{i}"] = 1000 * (i + 1)
            write_page(pool / f"p{i}", b"z" * (1000 * (i + 1)))
    r = subprocess.run(["find", str(m.mnt), "-type", "f", "-printf", "%P %s\n"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, f"find failed: {r.stderr}"
    found = dict(line.rsplit(" ", 1) for line in r.stdout.splitlines())
    assert {k: int(v) for k, v in found.items()} == sizes
    r = subprocess.run(["find", str(m.mnt), "-type", "d", "-printf", "%P\n"],
                       capture_output=True, text=True, timeout=30)
    assert sorted(r.stdout.split()) == ["0", "0/kv", "0/mamba", "1", "1/kv"]
    r = subprocess.run(["ls", "-lR", str(m.mnt)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stderr == "", f"ls -lR: {r.stderr}"
    assert "-r--r--r--" in r.stdout
    r = subprocess.run(["du", "-s", "--apparent-size", "-B1", str(m.path(0, "kv"))],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, f"du failed: {r.stderr}"
    assert int(r.stdout.split()[0]) >= 6000, f"du of 0/kv: {r.stdout}"
    r = subprocess.run(["du", "-s", "-B1", str(m.mnt)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and int(r.stdout.split()[0]) >= 18000, f"du: {r.stdout} {r.stderr}"


def test_umount_returns_only_after_the_daemon_exited(mount):
    m = mount(*SMALL)
    write_page(m.pool(0, "kv") / "p", b"x")
    pid = m.pid
    assert pid, "the daemon's pid is unknown (user.pagefs.pid)"
    r = run_pagefs("umount", m.mnt)
    assert r.returncode == 0, f"pagefs umount: {describe(r)}"
    assert not pid_alive(pid), f"pagefs umount returned while daemon {pid} was still running"
    assert not is_mounted(m.mnt)
    m.mounted = False


def test_st_atime_is_the_last_use_and_st_mtime_the_commit(mount):
    """A read is a use: st_atime moves to it, st_mtime stays the commit's.
    (With --entry-timeout 0 each stat asks the daemon: a stat the kernel
    answers from its cache is not a use, docs/DECISIONS.md.)"""
    m = mount(*SMALL, "--entry-timeout", "0")
    pool = m.pool(0, "kv")
    write_page(pool / "p", b"p" * 100)
    st = os.stat(pool / "p")
    assert abs(st.st_atime_ns - st.st_mtime_ns) < 10**9
    time.sleep(1.2)
    read_at = time.time_ns() // 10**9 * 10**9  # atimes are kept in whole seconds
    with open(pool / "p", "rb") as f:
        assert f.read() == b"p" * 100
    after = os.stat(pool / "p")
    assert after.st_mtime_ns == st.st_mtime_ns, "a read must not move the commit time"
    assert after.st_atime_ns > st.st_atime_ns and after.st_atime_ns >= read_at, \
        f"st_atime {after.st_atime_ns} did not move to the read at {read_at} " \
        f"(before {st.st_atime_ns}, mtime {st.st_mtime_ns})"
