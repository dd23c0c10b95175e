"""SPEC "Durability and crashes": clean remount, kill -9 of the daemon under load,
a writer killed with a page open."""
import errno
import os
import signal
import subprocess
import time

import pytest

import pageformat as PF
from pagefs_helpers import (PYTHON, WORKLOAD, assert_bytes_equal, describe, expect_errno,
                            read_page, run_pagefs, spawn, wait_until, write_page, xattr_int)

# Contract tests of the core: each runs against SQLite and PostgreSQL.
pytestmark = pytest.mark.engines


def test_pages_survive_umount_and_mount_with_names_bytes_sizes_and_inodes(mount):
    m = mount("--page-size", "64K", "--capacity", "4M")
    pages = {}
    for rank, ns in ((0, "kv"), (0, "mamba"), (5, "kv")):
        pool = m.pool(rank, ns)
        for i in range(8):
            d = os.urandom(i * 8000)
            write_page(pool / f"page-{i}", d)
            pages[pool / f"page-{i}"] = d
    os.rename(m.path(0, "kv", "page-1"), m.path(0, "kv", "renamed"))
    pages[m.path(0, "kv", "renamed")] = pages.pop(m.path(0, "kv", "page-1"))
    os.unlink(m.path(0, "mamba", "page-2"))
    del pages[m.path(0, "mamba", "page-2")]
    before = {p: os.stat(p) for p in pages}
    listing = {(r, ns): sorted(os.listdir(m.path(r, ns))) for r, ns in ((0, "kv"), (0, "mamba"), (5, "kv"))}
    m.umount()
    m.start()
    assert sorted(os.listdir(m.mnt)) == ["0", "5"]
    for (r, ns), names in listing.items():
        assert sorted(os.listdir(m.path(r, ns))) == names, f"listing of {r}/{ns} changed"
    for p, d in pages.items():
        st = os.stat(p)
        assert st.st_size == len(d), f"{p}: size {st.st_size} != {len(d)}"
        assert st.st_ino == before[p].st_ino, f"{p}: st_ino changed across remount"
        assert abs(st.st_mtime - before[p].st_mtime) < 0.001, f"{p}: mtime changed across remount"
        assert_bytes_equal(read_page(p), d, str(p))


def test_a_rewritten_page_keeps_its_inode_number_across_remount(mount):
    """An O_TRUNC rewrite gives the page a new inode number (each version of
    the bytes has its own); the index keeps the version, so the number is
    the same after a remount (it went back to the first version's, found
    by a probe). A shell's `echo x > page` commits twice (its fd is
    dup'ed and closed twice), and renames keep the number too."""
    m = mount("--page-size", "64K", "--capacity", "4M")
    pool = m.pool(0, "kv")
    write_page(pool / "once", b"1")
    for i in range(3):
        write_page(pool / "thrice", bytes([i]) * 100)
    subprocess.run(["bash", "-c", f"echo x > {pool / 'shell'}"], check=True, timeout=30)
    write_page(pool / "moved", b"m")
    write_page(pool / "moved", b"mm")
    os.rename(pool / "moved", pool / "moved2")
    before = {n: os.stat(pool / n).st_ino for n in ("once", "thrice", "shell", "moved2")}
    assert before["thrice"] >> 48 != before["once"] >> 48, \
        f"a rewrite gives a new version in the inode number: {before}"
    m.umount()
    m.start()
    after = {n: os.stat(pool / n).st_ino for n in before}
    assert after == before, f"inode numbers changed across remount: {before} -> {after}"
    assert read_page(pool / "thrice") == bytes([2]) * 100
    write_page(pool / "thrice", b"again")
    assert os.stat(pool / "thrice").st_ino not in before.values(), \
        "the rewrite after the remount takes a version not given out before"


def test_fsck_reports_clean_after_a_clean_umount(mount):
    m = mount("--page-size", "64K", "--capacity", "1M")
    pool = m.pool(0, "kv")
    for i in range(5):
        write_page(pool / f"p{i}", os.urandom(1000 * i))
    m.umount()
    r = run_pagefs("fsck", m.backing, "--meta", m.meta, "--verify-data", timeout=120)
    assert r.returncode == 0, f"pagefs fsck after a clean umount: {describe(r)}"


def test_durability_power_commits_pages_that_survive_remount(mount):
    m = mount("--page-size", "64K", "--capacity", "1M", "--durability", "power")
    pool = m.pool(0, "kv")
    data = os.urandom(60000)
    write_page(pool / "p", data)
    m.remount()
    assert_bytes_equal(read_page(pool / "p"), data, "page after remount")


def replay(journal_text):
    """Journal of workload.py journal-writer -> (state, inflight op or None, ended)."""
    state, pending = {}, None
    ended = False
    for line in journal_text.splitlines():
        f = line.split()
        if not f:
            continue
        if f[0] == "B":
            pending = f[1:]
        elif f[0] == "D":
            op = f[1:]
            assert op == pending, f"journal out of order: D {op} after B {pending}"
            pending = None
            if op[0] == "W":
                state[op[1]] = (op[2], int(op[3]), int(op[4]))
            elif op[0] == "R":
                state[op[2]] = state.pop(op[1])
            elif op[0] == "U":
                del state[op[1]]
        elif f[0] in ("E", "END"):
            ended = True
    return state, pending, ended


@pytest.mark.timeout_s(180)
def test_kill_9_under_write_load_keeps_every_closed_page_and_no_partial_one(mount):
    m = mount("--page-size", "64K", "--capacity", "64M")  # 1024 slots: no eviction
    pool = m.pool(0, "kv")
    journal = m.dir / "journal"
    writer = spawn([PYTHON, str(WORKLOAD), "journal-writer", str(pool), str(journal),
                    "100000", "7", "900", "65536"])
    ok = wait_until(lambda: journal.exists() and journal.read_text().count("\nD ") >= 150,
                    timeout=60, interval=0.02)
    assert writer.poll() is None, f"the writer stopped early: {journal.read_text()[-500:]}"
    assert ok, "the writer did not complete 150 operations in 60 s"
    time.sleep(0.2)
    m.kill9()
    writer.wait(timeout=60)
    text = journal.read_text()
    state, inflight, ended = replay(text)
    assert ended, f"the writer should have stopped on an error after the kill: {text[-300:]}"
    assert len(state) > 50

    m.start()
    listing = set(os.listdir(pool))

    def content(name):
        enc, ver, length = state[name]
        return PF.make_page(enc, ver, length)

    # the one operation in flight at the kill may or may not have happened
    op = inflight or [None]
    for name in state:
        if op[0] == "R" and name in (op[1], op[2]):
            continue
        if name not in listing:
            assert op[0] == "U" and op[1] == name, \
                f"{name} was journaled after its close/rename returned but is gone after kill -9 " \
                f"(in flight at the kill: {inflight})"
            continue
        assert_bytes_equal(read_page(pool / name), content(name), f"journaled page {name}")
    if op[0] == "R":
        tmp, target = op[1], op[2]
        if tmp in listing:   # rename not done: tmp intact, target as before
            assert_bytes_equal(read_page(pool / tmp), content(tmp), f"{tmp} (rename in flight)")
            if target in state:
                assert_bytes_equal(read_page(pool / target), content(target),
                                   f"{target} (rename onto it in flight)")
            else:
                assert target not in listing, f"{target} exists although {tmp} was not renamed"
        else:                # rename done: target holds tmp's bytes
            assert target in listing, f"both {tmp} and {target} are gone after kill -9"
            assert_bytes_equal(read_page(pool / target), content(tmp),
                               f"{target} after the in-flight rename of {tmp}")
    for name in listing - set(state):
        allowed = (op[0] == "W" and op[1] == name) or (op[0] == "R" and op[2] == name)
        assert allowed, f"{name} is listed but its write never completed (in flight: {inflight})"
    for name in listing:
        data = read_page(pool / name)
        try:
            enc, ver = PF.decode_page(data)
        except PF.PageError as e:
            raise AssertionError(f"{name} has partial or foreign content after kill -9: {e}")
        assert enc.decode() == name.split(".tmp.")[0], f"{name} holds the bytes of {enc!r}"
    slots = {}
    for name in listing:
        slots.setdefault(xattr_int(pool / name, "user.pagefs.slot"), []).append(name)
    twice = {s: n for s, n in slots.items() if len(n) > 1}
    assert not twice, f"slots owned by two names after recovery: {twice}"
    free, total = m.statvfs_free_total()
    assert total == 64 << 20
    assert free == (1024 - len(listing)) * 65536, \
        f"free space {free} after recovery; {len(listing)} pages should leave " \
        f"{(1024 - len(listing)) * 65536}"
    m.umount()
    r = run_pagefs("fsck", m.backing, "--meta", m.meta, timeout=120)
    assert r.returncode == 0, f"pagefs fsck after kill -9 recovery: {describe(r)}"


def test_writer_killed_with_a_page_open_never_publishes_it(mount):
    m = mount("--page-size", "64K", "--capacity", "1M")
    pool = m.pool(0, "kv")
    write_page(pool / "other", b"o" * 100)
    w = spawn([PYTHON, str(WORKLOAD), "hold-writer", str(pool / "victim"), "30000"],
              stdout=subprocess.PIPE, text=True)
    line = w.stdout.readline()
    assert line.strip() == "ready", f"hold-writer did not get ready: {line!r}"
    w.send_signal(signal.SIGKILL)
    w.wait(timeout=30)
    for _ in range(2):
        assert os.listdir(pool) == ["other"], f"killed writer's page is listed: {os.listdir(pool)}"
        expect_errno(errno.ENOENT, os.stat, pool / "victim", what="stat of the killed writer's page")
        time.sleep(0.5)
    assert wait_until(lambda: m.statvfs_free_total()[0] == (16 - 1) * 65536, timeout=5), \
        f"the killed writer's slot was not reclaimed: free/total {m.statvfs_free_total()}"
    m.remount()
    assert os.listdir(pool) == ["other"], "the killed writer's page appeared after remount"
    assert m.statvfs_free_total()[0] == 15 * 65536


def test_a_writer_that_exits_without_closing_publishes_and_one_killed_by_a_signal_does_not(mount):
    """The implicit close of exit() commits like close(); a task ended by a
    signal (here SIGTERM's default action, from inside, after its write)
    leaves nothing. Both flushes come from a task without its memory any
    more: the commit reads the exit code (fs_task.c)."""
    m = mount("--page-size", "64K", "--capacity", "1M")
    pool = m.pool(0, "kv")
    prog = ("import os, signal, sys\n"
            "fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)\n"
            "os.write(fd, b'e' * 5000)\n"
            "if sys.argv[2] == 'exit':\n"
            "    os._exit(0)\n"
            "os.kill(os.getpid(), signal.SIGTERM)\n")
    r = subprocess.run([PYTHON, "-c", prog, str(pool / "exited"), "exit"], timeout=60)
    assert r.returncode == 0
    r = subprocess.run([PYTHON, "-c", prog, str(pool / "signalled"), "signal"], timeout=60)
    assert r.returncode == -signal.SIGTERM
    assert sorted(os.listdir(pool)) == ["exited"], f"listing: {os.listdir(pool)}"
    assert_bytes_equal(read_page(pool / "exited"), b"e" * 5000, "exited")
    expect_errno(errno.ENOENT, os.stat, pool / "signalled", what="stat of the signalled writer's page")
    m.remount()
    assert sorted(os.listdir(pool)) == ["exited"], "after remount"


def test_the_sqlite_index_is_the_daemons_alone_and_a_crash_leaves_it_readable(mount):
    """The daemon runs SQLite in exclusive locking mode (README, Decisions):
    no -shm, nobody else opens the file while it runs, readdir shares its
    connection, and after kill -9 fsck and a new mount read the WAL."""
    m = mount("--page-size", "64K", "--capacity", "1M")
    if not m.meta.startswith("sqlite:"):
        pytest.skip("SQLite's own locking")
    db = m.meta[len("sqlite:"):]
    pool = m.pool(0, "kv")
    data = {f"p{i}": os.urandom(3000 + i) for i in range(6)}
    for name, d in data.items():
        write_page(pool / name, d)
    assert not os.path.exists(db + "-shm"), "a -shm file: the index is not held exclusively"
    probe = ("import sqlite3, sys\n"
             "c = sqlite3.connect(sys.argv[1], timeout=0.2)\n"
             "print(c.execute('SELECT count(*) FROM pages').fetchone()[0])\n")
    r = subprocess.run([PYTHON, "-c", probe, db], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "locked" in r.stderr, \
        f"another process read the index of a running daemon: {describe(r)}"
    assert sorted(os.listdir(pool)) == sorted(data), "readdir through the daemon's connection"
    r = run_pagefs("fsck", m.backing, "--meta", m.meta)
    assert r.returncode != 0 and "in use by another pagefs daemon" in r.stderr, \
        f"fsck of a mounted index: {describe(r)}"

    m.kill9()
    r = run_pagefs("fsck", m.backing, "--meta", m.meta)
    assert r.returncode == 0 and "6 pages" in r.stdout + r.stderr, \
        f"fsck after kill -9: {describe(r)}"
    r = subprocess.run([PYTHON, "-c", probe, db], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "6", f"the index after kill -9: {describe(r)}"
    m.start()
    for name, d in data.items():
        assert_bytes_equal(read_page(pool / name), d, name)
