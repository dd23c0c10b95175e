"""kill -9 in the two phases a crash loop under load rarely hits (SPEC
"Durability and crashes"): while `pagefs mount` is still loading a large
index, and while a pool is being cleared (mass unlink).

The large index is made offline: one real (empty) page written through a
mount, then cloned PAGEFS_BIG_PAGES times (default 200,000) by SQL onto
distinct names and slots, as a long-lived cache would have it.
"""
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from pagefs_helpers import (PAGEFS_BIN, describe, force_unmount, is_mounted, pids_with_arg,
                            read_page, run_pagefs, wait_until, write_page, xattr_int,
                            threads_alive, abort_fuse_connection)

BIG = int(os.environ.get("PAGEFS_BIG_PAGES", "200000"))
SLOT = 4096
CAP_SLOTS = 1 << 18


def clone_pages(m, n, pool_rank=0, pool_ns="kv", prefix="n"):
    """Adds n copies of the page 'seed' (slots 1..n) straight into the index."""
    import sqlite3
    db = sqlite3.connect(m.index)
    db.execute(
        "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i<?) "
        "INSERT INTO pages(id,pool,name,slot,length,checksum,mtime,atime,gen) "
        "SELECT p.id+c.i, p.pool, CAST(?||c.i AS BLOB), p.slot+c.i, p.length, p.checksum, "
        "p.mtime, p.atime+c.i, p.gen FROM pages p, c WHERE p.name=CAST('seed' AS BLOB)",
        (n, prefix))
    db.commit()
    (count,) = db.execute("SELECT count(*) FROM pages").fetchone()
    db.close()
    return count


def big_index(mount, n):
    m = mount("--page-size", "4K", "--capacity", str(CAP_SLOTS * SLOT))
    pool = m.pool(0, "kv")
    write_page(pool / "seed", b"")
    assert xattr_int(pool / "seed", "user.pagefs.slot") == 0
    m.umount()
    assert clone_pages(m, n) == n + 1
    return m


def kill_mount_after(m, delay):
    """Starts `pagefs mount`, SIGKILLs its daemon after delay s; returns the
    front end's CompletedProcess-like (rc, out)."""
    cmd = [PAGEFS_BIN, "mount", str(m.backing), str(m.mnt), "--meta", m.meta, *m.opts,
           "--log-file", str(m.log)]
    m.factory.track_mountpoint(m.mnt)
    env = dict(m.env())
    # LeakSanitizer's exit-time check of the front can spin for ever in its
    # stop-the-world step when the daemon child was just SIGKILLed (seen in
    # the ASan build); leaks of a killed daemon mean nothing, and the front's
    # own are checked by every other mount of the suite.
    env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":detect_leaks=0").lstrip(":")
    front = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env, stdin=subprocess.DEVNULL)
    time.sleep(delay)
    daemons = [p for p in pids_with_arg(m.mnt) if p != front.pid]
    for p in daemons:
        m.factory.track_pid(p)
        os.kill(p, signal.SIGKILL)
    try:
        out, err = front.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        # A daemon killed just after its mount can stay blocked in the
        # kernel, and the front's first request with it (README, Decisions:
        # a killed daemon can hang its mount): abort the connection, as
        # `pagefs umount --force` would, and the front's check fails.
        abort_fuse_connection(m.mnt)
        out, err = front.communicate(timeout=60)
    for p in daemons:
        if not wait_until(lambda: not threads_alive(p), timeout=1.0):
            abort_fuse_connection(m.mnt)
    if is_mounted(m.mnt):
        force_unmount(m.mnt, use_pagefs=False)
    assert not is_mounted(m.mnt)
    # A kill that came before the fork hit nothing: that daemon mounted, and
    # after the unmount above it is still closing its index (and holds the
    # index lock) for a moment. The attempt is over when it is gone.
    assert wait_until(lambda: not [p for p in pids_with_arg(m.mnt) if p != front.pid],
                      timeout=60), f"a daemon of {m.mnt} outlived its unmount"
    return front.returncode, out + err, bool(daemons)


@pytest.mark.timeout_s(600)
def test_kill_9_while_mount_loads_a_large_index_loses_nothing(mount):
    m = big_index(mount, BIG)
    t0 = time.monotonic()
    m.start()
    load_s = time.monotonic() - t0
    free, _ = m.statvfs_free_total()
    assert free == (CAP_SLOTS - BIG - 1) * SLOT, "every cloned page should hold a slot"
    m.umount()
    rng = random.Random(int(os.environ.get("PAGEFS_CRASH_SEED", "0")) or None)
    killed_in_load = 0
    for i in range(int(os.environ.get("PAGEFS_LOAD_KILLS", "3"))):
        rc, out, killed = kill_mount_after(m, rng.uniform(0.02, max(0.05, load_s * 0.9)))
        if killed and rc != 0:
            killed_in_load += 1
            assert rc == 1 and out.strip(), f"mount killed while loading: {rc} {out}"
    sys.stderr.write(f"[crash-phases] {BIG} pages load in {load_s:.2f}s; "
                     f"{killed_in_load} kills landed during the load\n")
    r = run_pagefs("fsck", m.backing, "--meta", m.meta, timeout=300)
    assert r.returncode == 0 and f"{BIG + 1} pages" in r.stdout, describe(r)
    m.start()
    free, _ = m.statvfs_free_total()
    assert free == (CAP_SLOTS - BIG - 1) * SLOT, "pages lost after mounts killed during load"
    for k in rng.sample(range(1, BIG + 1), 50):
        p = m.path(0, "kv", f"n{k}")
        assert os.stat(p).st_size == 0 and xattr_int(p, "user.pagefs.slot") == k
        assert read_page(p) == b""


@pytest.mark.timeout_s(300)
def test_kill_9_while_a_pool_is_being_cleared_keeps_every_unlink_that_returned(mount):
    m = mount("--page-size", "4K", "--capacity", str(CAP_SLOTS * SLOT))
    pool = m.pool(0, "kv")
    for i in range(20):
        write_page(pool / f"real{i}", f"page {i}".encode() * 50)
    write_page(pool / "seed", b"")
    m.umount()
    n = 20000
    clone_pages(m, n)
    m.start()
    journal = m.dir / "unlinks"
    code = ("import os,sys\n"
            "pool, j = sys.argv[1], sys.argv[2]\n"
            "fd = os.open(j, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)\n"
            "for name in sorted(os.listdir(pool)):\n"
            "    os.write(fd, f'B {name}\\n'.encode())\n"
            "    try:\n"
            "        os.unlink(os.path.join(pool, name))\n"
            "    except OSError as e:\n"
            "        os.write(fd, f'E {e.errno}\\n'.encode()); break\n"
            "    os.write(fd, f'D {name}\\n'.encode())\n")
    clearer = subprocess.Popen([sys.executable, "-c", code, str(pool), str(journal)])
    assert wait_until(lambda: journal.exists() and journal.read_text().count("\nD ") > 3000,
                      timeout=120), "the clearer did not unlink 3000 pages in 120 s"
    m.kill9()
    clearer.wait(timeout=60)
    done, inflight = set(), None
    for line in journal.read_text().splitlines():
        kind, _, name = line.partition(" ")
        if kind == "B":
            inflight = name
        elif kind == "D":
            done.add(name)
            inflight = None
    r = run_pagefs("fsck", m.backing, "--meta", m.meta, timeout=300)
    assert r.returncode == 0, f"fsck after a kill during the clear: {describe(r)}"
    m.start()
    left = set(os.listdir(pool))
    every = {f"n{i}" for i in range(1, n + 1)} | {f"real{i}" for i in range(20)} | {"seed"}
    assert not (left & done), f"{len(left & done)} unlinks that returned came back: " \
        f"{sorted(left & done)[:5]}"
    missing = every - done - left - {inflight}
    assert not missing, f"{len(missing)} pages nobody unlinked are gone: {sorted(missing)[:5]}"
    assert left <= every
    free, _ = m.statvfs_free_total()
    assert free == (CAP_SLOTS - len(left)) * SLOT, "free space is not whole after the kill"
    for i in range(20):
        if f"real{i}" in left:
            assert read_page(pool / f"real{i}") == f"page {i}".encode() * 50
    sys.stderr.write(f"[crash-phases] clear killed after {len(done)} of {len(every)} unlinks\n")


@pytest.mark.timeout_s(120)
def test_umount_force_frees_clients_of_a_hung_daemon_and_the_index_mounts_again(mount):
    """A daemon that answers nothing (here: SIGSTOP; after kill -9 the same
    happens when a thread hangs in the kernel) blocks every client; plain
    unmount tools would block too. `pagefs umount --force` aborts the FUSE
    connection without touching the mount: the client gets ECONNABORTED."""
    m = mount("--page-size", "4K", "--capacity", "1M")
    pool = m.pool(0, "kv")
    write_page(pool / "kept", b"kept" * 100)
    os.kill(m.pid, signal.SIGSTOP)
    try:
        code = ("import os,sys\n"
                "try:\n"
                "    os.stat(sys.argv[1]); print('ok')\n"
                "except OSError as e:\n"
                "    print(e.errno)\n")
        client = subprocess.Popen([sys.executable, "-c", code, str(pool / "new")],
                                  stdout=subprocess.PIPE, text=True)
        time.sleep(0.5)
        assert client.poll() is None, "the client should block on the stopped daemon"
        r = run_pagefs("umount", "--force", m.mnt, timeout=20)
        assert r.returncode == 0, describe(r)
        out, _ = client.communicate(timeout=20)
        assert out.strip() in ("103", "107"), \
            f"the blocked client should get ECONNABORTED or ENOTCONN, got {out!r}"
        assert not is_mounted(m.mnt)
    finally:
        os.kill(m.pid, signal.SIGKILL)
        os.kill(m.pid, signal.SIGCONT)
    assert wait_until(lambda: not threads_alive(m.pid), timeout=15)
    m.start()
    assert read_page(pool / "kept") == b"kept" * 100


def test_umount_force_of_a_path_that_is_no_fuse_mount_fails_naming_it(mount):
    m = mount(start=False)
    r = run_pagefs("umount", "--force", m.mnt)
    assert r.returncode == 1 and str(m.mnt) in r.stderr, describe(r)
