"""A name whose page the daemon evicted (or dropped) while the kernel still
caches its dentry: open(O_CREAT) must create it again and open(O_RDONLY)
must say ENOENT, never fail a create with ENOENT. The daemon invalidates
such dentries from a separate thread, so an open can reach the old inode
first; fs/ then answers ESTALE and the kernel looks the name up again."""
import errno
import os
import subprocess
import sys
import time

from pagefs_helpers import read_page, run_pagefs, describe, write_page

SLOT = 64 << 10


def test_create_over_a_just_evicted_name_succeeds(mount):
    m = mount("--page-size", "64K", "--capacity", "64M")
    r = run_pagefs("pool", "create", m.path(0, "small"), "--capacity", str(2 * SLOT))
    assert r.returncode == 0, describe(r)
    pool = m.path(0, "small")
    failures = []
    for i in range(400):
        names = [pool / f"a{i}", pool / f"b{i}", pool / f"c{i}"]
        for n in names:  # the third evicts one of the first two
            write_page(n, n.name.encode() * 10)
        for n in names[:2]:  # both dentries are cached; one page is gone
            try:
                write_page(n, b"new" * 10)
            except OSError as e:
                failures.append(f"open(O_CREAT) of {n.name}: {os.strerror(e.errno)}")
        for n in os.listdir(pool):
            os.unlink(pool / n)
    assert not failures, f"{len(failures)} creates failed: {failures[:5]}"


def wait_empty(pool, timeout=10.0):
    """Waits until the pool holds no slot: a reader's close reaches the
    daemon after close() returns (FUSE's release is asynchronous), and a
    page unlinked before that keeps its slot until then, so the next
    round's writes could find one slot fewer and evict one page more."""
    deadline = time.monotonic() + timeout
    while int(os.getxattr(pool, "user.pagefs.used_slots")) != 0:
        assert time.monotonic() < deadline, "the slots of unlinked pages did not come back"
        time.sleep(0.001)


def test_read_open_of_a_just_evicted_name_says_enoent(mount):
    m = mount("--page-size", "64K", "--capacity", "64M")
    r = run_pagefs("pool", "create", m.path(0, "small"), "--capacity", str(2 * SLOT))
    assert r.returncode == 0, describe(r)
    pool = m.path(0, "small")
    enoent = 0
    for i in range(200):
        names = [pool / f"a{i}", pool / f"b{i}", pool / f"c{i}"]
        for n in names:
            write_page(n, n.name.encode() * 10)
        for n in names[:2]:
            try:
                assert read_page(n) == n.name.encode() * 10
            except OSError as e:
                assert e.errno == errno.ENOENT, f"read open of an evicted page: {e}"
                enoent += 1
        for n in os.listdir(pool):
            os.unlink(pool / n)
        wait_empty(pool)
    assert enoent == 200, "exactly one of the first two pages is evicted each round"


def test_creates_racing_with_eviction_never_fail_with_enoent(mount):
    """Several processes rewrite names in a pool of 4 slots: every write
    evicts, and the kernel often still caches the evicted name."""
    m = mount("--page-size", "64K", "--capacity", "64M")
    r = run_pagefs("pool", "create", m.path(0, "small"), "--capacity", str(4 * SLOT))
    assert r.returncode == 0, describe(r)
    pool = m.path(0, "small")
    code = (
        "import os,sys\n"
        "pool, w = sys.argv[1], sys.argv[2]\n"
        "bad = 0\n"
        "for i in range(1500):\n"
        "    p = os.path.join(pool, f'w{w}-{i % 5}')\n"
        "    try:\n"
        "        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)\n"
        "        os.write(fd, b'x' * 1000)\n"
        "        os.close(fd)\n"
        "    except OSError as e:\n"
        "        bad += 1\n"
        "        print(f'{p}: {os.strerror(e.errno)}')\n"
        "print('bad', bad)\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(pool), str(w)],
                              stdout=subprocess.PIPE, text=True) for w in range(3)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(o.strip().endswith("bad 0") for o in outs), \
        "creates failed while racing eviction:\n" + "\n".join(o[-600:] for o in outs)
