"""Several mounts over one backing directory and one PostgreSQL index (issue 5).

Each mount is a separate daemon (a node of the index): pages committed
through one are visible through the others within a bound, no slot is ever
owned by two names, a reader on one mount keeps its slot from being reused
by another, and kill -9 of one daemon does not stop the others. Needs
PAGEFS_TEST_PG_URI (skipped without it).
"""
import errno
import os
import pathlib
import random
import signal
import subprocess
import sys
import threading
import time

import pytest

import pagefs_helpers as H
from pagefs_helpers import (assert_bytes_equal, describe, expect_errno, read_page, run_pagefs,
                            write_page)
from pageformat import decode_page, make_page

pytestmark = pytest.mark.skipif(bool(H.PG_SKIP), reason=H.PG_SKIP)

OPTS = ("--page-size", "64K", "--capacity", "64M")  # 1024 slots, chunks of 32
VISIBLE_WITHIN_S = 2.0  # the bound README states (feed poll 50 ms + kernel invalidation)


def mounts(mount, n, *opts):
    """n mounts of one backing directory on one fresh PostgreSQL index."""
    first = mount(*(opts or OPTS), meta=mount.pg_index())
    return [first] + [mount(*(opts or OPTS), backing=first.backing, meta=first.meta)
                      for _ in range(n - 1)]


def pool_everywhere(ms, rank=0, ns="kv"):
    """Makes the pool through the first mount; waits until every mount shows it."""
    ms[0].pool(rank, ns)
    t0 = time.monotonic()
    while not all(os.path.isdir(m.path(rank, ns)) for m in ms):
        assert time.monotonic() - t0 < VISIBLE_WITHIN_S, "a new pool did not reach every mount"
        time.sleep(0.01)


def wait_visible(path, data, timeout=VISIBLE_WITHIN_S):
    """Seconds until path reads data (fails after timeout)."""
    t0 = time.monotonic()
    while True:
        try:
            if read_page(path) == data:
                return time.monotonic() - t0
        except OSError as e:
            if e.errno != errno.ENOENT:
                raise
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"{path} not visible with its bytes after {timeout} s")
        time.sleep(0.01)


def slots_of(m, rank=0, ns="kv"):
    pool = m.path(rank, ns)
    return {n: int(os.getxattr(pool / n, "user.pagefs.slot")) for n in os.listdir(pool)}


def test_a_page_committed_on_one_mount_is_visible_on_the_others_within_the_bound(mount):
    ms = mounts(mount, 3)
    pool_everywhere(ms)
    worst = 0.0
    for i, src in enumerate(ms):
        data = os.urandom(5000 + i)
        write_page(src.path(0, "kv", f"from-{i}"), data)
        for dst in ms:
            if dst is not src:
                worst = max(worst, wait_visible(dst.path(0, "kv", f"from-{i}"), data))
    # Unlink and rename through one mount show on the others too.
    os.rename(ms[1].path(0, "kv", "from-0"), ms[1].path(0, "kv", "renamed"))
    os.unlink(ms[2].path(0, "kv", "from-1"))
    t0 = time.monotonic()
    while time.monotonic() - t0 < VISIBLE_WITHIN_S:
        names = [sorted(os.listdir(m.path(0, "kv"))) for m in ms]
        if all(n == ["from-2", "renamed"] for n in names):
            break
        time.sleep(0.01)
    else:
        raise AssertionError(f"listings after rename and unlink: {names}")
    print(f"worst visibility delay {worst * 1000:.0f} ms")


@pytest.mark.timeout_s(180)
def test_a_key_renamed_over_on_one_mount_never_reads_as_missing_on_another(mount):
    """One mount publishes versions of a key by renaming over it, as
    SGLang's writers do, hundreds of times a second; a reader of the key on
    another mount finds it (some version) every time. The feed deleted the
    key's page in one batch while the rename that gave the name to the next
    version waited for the next one, so the other mount held no page of
    that name for up to a poll interval (a third of the reads failed)."""
    a, b = mounts(mount, 2, "--page-size", "64K", "--capacity", "256M")
    pool_everywhere([a, b])
    versions = [bytes([i]) * 4096 for i in range(4)]
    write_page(a.path(0, "kv", "key.bin"), versions[0])
    wait_visible(b.path(0, "kv", "key.bin"), versions[0])
    stop = threading.Event()

    def writer():
        i = 0
        while not stop.is_set():
            tmp = a.path(0, "kv", f"key.bin.tmp.{i}")
            write_page(tmp, versions[i % 4])
            os.rename(tmp, a.path(0, "kv", "key.bin"))
            i += 1

    t = threading.Thread(target=writer)
    t.start()
    errors, ok = {}, 0
    try:
        end = time.monotonic() + 3
        while time.monotonic() < end:
            try:
                assert read_page(b.path(0, "kv", "key.bin")) in versions
                ok += 1
            except OSError as e:
                errors[errno.errorcode[e.errno]] = errors.get(errno.errorcode[e.errno], 0) + 1
    finally:
        stop.set()
        t.join()
    assert "ENOENT" not in errors and ok > 100, (ok, errors)
    assert errors.get("ESTALE", 0) * 100 <= ok, (ok, errors)


def test_no_slot_is_ever_owned_by_two_names_under_writers_on_every_mount(mount):
    ms = mounts(mount, 3)
    pool_everywhere(ms)
    procs = []
    for i, m in enumerate(ms):
        code = (
            "import os, sys\n"
            f"pool = {str(m.path(0, 'kv'))!r}\n"
            "for j in range(150):\n"
            f"    name = 'w{i}-%d' % j\n"
            "    data = (name.encode() * 400)[:3000 + j]\n"
            "    fd = os.open(os.path.join(pool, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)\n"
            "    os.write(fd, data)\n"
            "    os.close(fd)\n"
            "    if j % 3 == 0:\n"
            "        os.unlink(os.path.join(pool, name))\n")
        procs.append(H.spawn([H.PYTHON, "-c", code], stderr=subprocess.PIPE))
    for p in procs:
        _, err = p.communicate(timeout=150)
        assert p.returncode == 0, f"writer failed: {err.decode()}"
    time.sleep(VISIBLE_WITHIN_S)
    expect = {f"w{i}-{j}" for i in range(3) for j in range(150) if j % 3}
    for m in ms:
        slots = slots_of(m)
        assert set(slots) == expect, f"{m.mnt}: names differ from what was written"
        owners = {}
        for name, slot in slots.items():
            assert slot not in owners, f"slot {slot} owned by {owners[slot]} and {name}"
            owners[slot] = name
        for name in list(expect)[::20]:
            want = (name.encode() * 400)[:3000 + int(name.split("-")[1])]
            assert_bytes_equal(read_page(m.path(0, "kv", name)), want, f"{m.mnt}/{name}")
    for m in ms:
        m.umount()
    r = run_pagefs("fsck", ms[0].backing, "--meta", ms[0].meta, "--verify-data", timeout=120)
    assert r.returncode == 0, describe(r)


def batch_pin(pool_dir, name):
    """A reader of python/pagefs's kind: the pool directory open, name
    pinned by LOOKUP_PIN. (directory fd, the page's bytes as read from the
    data file, for as long as the fd is open)."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "python"))
    from pagefs import _wire

    dirfd = os.open(pool_dir, os.O_RDONLY | os.O_DIRECTORY)
    path, _, (rec,), _ = _wire.lookup_pin(dirfd, [name.encode()])
    assert rec.pinned

    def read(n):
        with open(path, "rb") as f:
            return os.pread(f.fileno(), n, rec.offset)

    return dirfd, read


@pytest.mark.parametrize("reader", ["open", "batch_pin"])
def test_a_reader_on_one_mount_keeps_its_slot_from_reuse_by_another(mount, reader):
    # 64 slots in chunks of 2: the writer's node must reuse freed slots.
    a, b = mounts(mount, 2, "--page-size", "64K", "--capacity", "4M")
    pool_everywhere([a, b])
    old = os.urandom(60000)
    write_page(a.path(0, "kv", "old"), old)
    wait_visible(b.path(0, "kv", "old"), old)
    if reader == "open":  # a reader on b
        fd = os.open(b.path(0, "kv", "old"), os.O_RDONLY)

        def read(n):
            return os.pread(fd, n, 0)
    else:
        fd, read = batch_pin(b.path(0, "kv"), "old")
    try:
        slot = int(os.getxattr(a.path(0, "kv", "old"), "user.pagefs.slot"))
        os.unlink(a.path(0, "kv", "old"))
        # a writes and drops 3 pools' worth of pages: its slots cycle.
        seen = set()
        for i in range(200):
            p = a.path(0, "kv", f"churn-{i}")
            write_page(p, b"\x55" * 60000)
            seen.add(int(os.getxattr(p, "user.pagefs.slot")))
            os.unlink(p)
        assert slot not in seen, f"slot {slot} was reused while b's reader had it open"
        assert len(seen) > 1, "the writer never cycled through its slots"
        assert_bytes_equal(read(60000), old, "b's pinned page")
    finally:
        os.close(fd)
    # Closed: the slot comes back to the chunk's holder within a few seconds.
    for i in range(300):
        p = a.path(0, "kv", f"after-{i}")
        write_page(p, b"\x66" * 100)
        got = int(os.getxattr(p, "user.pagefs.slot"))
        os.unlink(p)
        if got == slot:
            break
        time.sleep(0.02)
    else:
        raise AssertionError(f"slot {slot} never came back after the reader closed")


@pytest.mark.timeout_s(180)
def test_kill_9_of_one_daemon_leaves_the_others_serving_and_its_lease_expires(mount):
    a, b, c = mounts(mount, 3, "--page-size", "64K", "--capacity", "1G")  # 16384 slots: no eviction
    pool_everywhere([a, b, c])
    written, errors = {}, []
    stop = threading.Event()

    def writer():
        i = 0
        while not stop.is_set() and i < 12000:
            name = f"b-{i}"
            data = os.urandom(2000 + i % 3000)
            try:
                write_page(b.path(0, "kv", name), data)
                written[name] = data
            except OSError as e:
                errors.append((name, e))
            i += 1

    for i in range(20):
        write_page(a.path(0, "kv", f"a-{i}"), b"a%d" % i)
    t = threading.Thread(target=writer)
    t.start()
    try:
        time.sleep(0.5)
        a.kill9()
        before = len(written)
        time.sleep(1.0)
        assert len(written) > before, "writes through b stopped when a died"
    finally:
        stop.set()
        t.join(60)
    assert not errors, f"writes through b failed after a died: {errors[:3]}"
    for name, data in list(written.items())[::10]:
        wait_visible(c.path(0, "kv", name), data)  # (the last ones may be on their way)
    for i in range(20):
        assert read_page(c.path(0, "kv", f"a-{i}")) == b"a%d" % i
    # a's node row (and its chunks) go once its lease runs out (10 s).
    t0 = time.monotonic()
    while H.psql("SELECT count(*) FROM pagefs_nodes", uri=b.meta) != "2":
        assert time.monotonic() - t0 < 20, "the dead node's lease never expired"
        time.sleep(0.5)
    print(f"{len(written)} pages written through b; dead node reaped after "
          f"{time.monotonic() - t0:.1f} s more")
    a.start()  # comes back as a new node and sees everything
    assert set(os.listdir(a.path(0, "kv"))) >= set(written) | {f"a-{i}" for i in range(20)}


def test_fsck_is_refused_while_a_daemon_serves_the_index(mount):
    a, = mounts(mount, 1)
    r = run_pagefs("fsck", a.backing, "--meta", a.meta)
    assert r.returncode == 1, describe(r)
    assert "in use by pagefs daemons" in r.stderr and f"pid {a.pid}" in r.stderr, r.stderr
    a.umount()
    r = run_pagefs("fsck", a.backing, "--meta", a.meta)
    assert r.returncode == 0, describe(r)


# ---- global eviction: a full pool is shared by every node ----

FULL = ("--page-size", "64K", "--capacity", "16M")  # 256 slots, 32 chunks of 8
FULL_SLOTS = 256


def fill(m, prefix, n, length=3000):
    """Writes n self-checking pages (pageformat) through mount m."""
    for i in range(n):
        name = f"{prefix}{i:03d}"
        write_page(m.path(0, "kv", name), make_page(name, 1, length))


def timed_writes(m, prefix, n, length=3000):
    """Writes n self-checking pages; every write must succeed. Seconds each."""
    took = []
    for i in range(n):
        name = f"{prefix}{i:03d}"
        t0 = time.monotonic()
        write_page(m.path(0, "kv", name), make_page(name, 1, length))
        took.append(time.monotonic() - t0)
    return took


def pages_in_index(m):
    return int(H.psql("SELECT count(*) FROM pagefs_pages", uri=m.meta))


def check_pages(ms):
    """Every page listed on each mount reads back as its own bytes, and no
    slot belongs to two names (on each mount and in the index)."""
    for m in ms:
        owners = {}
        for name, slot in slots_of(m).items():
            assert slot not in owners, f"{m.mnt}: slot {slot} owned by {owners[slot]} and {name}"
            owners[slot] = name
            try:
                data = read_page(m.path(0, "kv", name))
            except FileNotFoundError:
                continue  # evicted since it was listed
            assert decode_page(data) == (name.encode(), 1), f"{m.mnt}/{name}"
    dup = H.psql("SELECT count(*) FROM (SELECT slot FROM pagefs_pages GROUP BY pool, slot"
                 " HAVING count(*) > 1) d", uri=ms[0].meta)
    assert dup == "0", "the index names one slot twice"


def wait_same_listing(ms):
    t0 = time.monotonic()
    while True:
        names = [set(os.listdir(m.path(0, "kv"))) for m in ms]
        if all(n == names[0] for n in names):
            return names[0]
        assert time.monotonic() - t0 < VISIBLE_WITHIN_S * 2, "the mounts list different pages"
        time.sleep(0.05)


def figures(took):
    s = sorted(took)
    return (f"first {took[0] * 1000:.0f} ms, p50 {s[len(s) // 2] * 1000:.0f} ms,"
            f" p90 {s[len(s) * 9 // 10] * 1000:.0f} ms, max {s[-1] * 1000:.0f} ms"
            f" over {len(s)} writes")


@pytest.mark.timeout_s(180)
def test_a_mount_in_a_pool_full_of_anothers_pages_writes_by_evicting_its_least_recently_used(mount):
    a, b = mounts(mount, 2, *FULL)
    pool_everywhere([a, b])
    fill(a, "a", FULL_SLOTS)
    assert pages_in_index(a) == FULL_SLOTS
    time.sleep(1.1)  # so that reading them again makes them the most recent
    hot = [f"a{i:03d}" for i in range(0, FULL_SLOTS, 16)]  # one chunk in two has one
    for name in hot:
        assert decode_page(read_page(a.path(0, "kv", name))) == (name.encode(), 1)
    most = [0]
    stop = threading.Event()

    def watch():  # the pool never holds more pages than it has slots
        while not stop.is_set():
            most[0] = max(most[0], pages_in_index(a))
            time.sleep(0.05)

    t = threading.Thread(target=watch)
    t.start()
    try:
        took = timed_writes(b, "b", 50)
    finally:
        stop.set()
        t.join()
    assert most[0] <= FULL_SLOTS, f"the pool held {most[0]} pages in {FULL_SLOTS} slots"
    names = wait_same_listing([a, b])
    assert {f"b{i:03d}" for i in range(50)} <= names, "a page b wrote was evicted"
    assert set(hot) <= names, f"pages a read lately were evicted: {set(hot) - names}"
    left = len([n for n in names if n.startswith("a")])
    assert FULL_SLOTS - 50 - 16 <= left <= FULL_SLOTS - 50, f"{left} of a's pages left"
    check_pages([a, b])
    print(f"b's writes into a pool full of a's pages: {figures(took)}")


@pytest.mark.timeout_s(180)
def test_a_pool_left_full_by_a_departed_mount_takes_new_pages(mount):
    a, = mounts(mount, 1, *FULL)
    pool_everywhere([a])
    fill(a, "a", FULL_SLOTS)
    time.sleep(1.1)
    hot = [f"a{i:03d}" for i in range(0, FULL_SLOTS, 16)]
    for name in hot:
        read_page(a.path(0, "kv", name))
    a.umount()
    assert H.psql("SELECT count(*) FROM pagefs_chunks", uri=a.meta) == "0"
    b = mount(*FULL, backing=a.backing, meta=a.meta)
    took = timed_writes(b, "b", 48)
    names = set(os.listdir(b.path(0, "kv")))
    assert {f"b{i:03d}" for i in range(48)} <= names
    assert set(hot) <= names, f"pages read last before a left were evicted: {set(hot) - names}"
    assert pages_in_index(b) <= FULL_SLOTS
    check_pages([b])
    print(f"b's writes into a pool a left full: {figures(took)}")


@pytest.mark.timeout_s(240)
def test_a_page_open_on_one_mount_survives_eviction_pressure_from_another(mount):
    a, b = mounts(mount, 2, *FULL)
    pool_everywhere([a, b])
    fill(a, "a", FULL_SLOTS)
    # A reader on a in every chunk: a cannot hand over a chunk free of them.
    open_by_chunk = {}
    for name, slot in sorted(slots_of(a).items()):
        open_by_chunk.setdefault(slot // 8, name)
    fds = {n: os.open(a.path(0, "kv", n), os.O_RDONLY) for n in open_by_chunk.values()}
    try:
        # b writes more than its share of the pool: it evicts among its own
        # chunks too, where a's readers still are.
        took = timed_writes(b, "b", 160)
        time.sleep(VISIBLE_WITHIN_S)
        names_a = set(os.listdir(a.path(0, "kv")))
        for n, fd in fds.items():
            want = make_page(n, 1, 3000)
            assert_bytes_equal(os.pread(fd, 4096, 0), want, f"a's open page {n}")
            assert n in names_a, f"{n} was evicted while a reader on a had it open"
        check_pages([a, b])
    finally:
        for fd in fds.values():
            os.close(fd)
    names = wait_same_listing([a, b])
    # Past its share b evicts its own oldest pages: the newest all stay.
    assert {f"b{i:03d}" for i in range(128, 160)} <= names
    check_pages([a, b])
    print(f"b's writes beside 32 readers on a: {figures(took)}; "
          f"{len([n for n in names if n.startswith('b')])} of b's pages left")


@pytest.mark.timeout_s(240)
def test_writers_and_readers_on_both_mounts_of_a_full_pool_never_share_a_slot(mount):
    a, b = mounts(mount, 2, *FULL)
    pool_everywhere([a, b])
    fill(a, "a", FULL_SLOTS)
    errors, bad = [], []
    stop = threading.Event()

    def writer(m, prefix, n):
        for i in range(n):
            name = f"{prefix}{i:03d}"
            try:
                write_page(m.path(0, "kv", name), make_page(name, 1, 3000 + i))
            except OSError as e:
                errors.append((str(m.mnt), name, e))

    def reader(m):  # whatever a mount lists and opens reads as its own bytes
        while not stop.is_set():
            for name in os.listdir(m.path(0, "kv"))[::7]:
                try:
                    data = read_page(m.path(0, "kv", name))
                except FileNotFoundError:
                    continue
                try:
                    if decode_page(data)[0] != name.encode():
                        bad.append((str(m.mnt), name))
                except ValueError as e:
                    bad.append((str(m.mnt), name, str(e)))

    ws = [threading.Thread(target=writer, args=(m, p, 120))
          for m, p in ((a, "x"), (a, "y"), (b, "u"), (b, "v"))]
    rs = [threading.Thread(target=reader, args=(m,)) for m in (a, b)]
    for t in ws + rs:
        t.start()
    for t in ws:
        t.join(200)
    stop.set()
    for t in rs:
        t.join(60)
    assert not errors, f"writes into the full pool failed: {errors[:3]}"
    assert not bad, f"pages read with bytes not their own: {bad[:3]}"
    assert pages_in_index(a) <= FULL_SLOTS
    wait_same_listing([a, b])
    check_pages([a, b])
    for m in (a, b):
        m.umount()
    r = run_pagefs("fsck", a.backing, "--meta", a.meta, "--verify-data", timeout=120)
    assert r.returncode == 0, describe(r)


def test_chunks_a_mount_emptied_go_back_to_the_pool(mount):
    a, b = mounts(mount, 2, *FULL)
    pool_everywhere([a, b])
    fill(a, "a", FULL_SLOTS)
    held = "SELECT count(*) FROM pagefs_chunks c JOIN pagefs_nodes n ON n.id = c.node" \
           f" WHERE n.pid = {a.pid}"
    assert H.psql(held, uri=a.meta) == "32"
    for i in range(FULL_SLOTS):
        os.unlink(a.path(0, "kv", f"a{i:03d}"))
    t0 = time.monotonic()
    while int(H.psql(held, uri=a.meta)) > 2:  # two are kept for the next writes
        assert time.monotonic() - t0 < 5, "a kept the chunks it emptied"
        time.sleep(0.1)
    took = timed_writes(b, "b", 200)
    assert pages_in_index(b) == 200
    check_pages([a, b])
    print(f"b's writes into a pool a emptied: {figures(took)}")


def test_evict_none_fails_a_write_into_a_pool_another_mount_filled_with_enospc(mount):
    a, b = mounts(mount, 2, *FULL, "--evict", "none")
    pool_everywhere([a, b])
    fill(a, "a", FULL_SLOTS)
    t0 = time.monotonic()
    with pytest.raises(OSError) as e:
        write_page(b.path(0, "kv", "b000"), make_page("b000", 1, 3000))
    assert e.value.errno == errno.ENOSPC, e.value
    assert time.monotonic() - t0 < 3, "ENOSPC came only after a wait"
    assert pages_in_index(a) == FULL_SLOTS
    assert H.psql("SELECT count(*) FROM pagefs_wants", uri=a.meta) == "0"


# ---- removing pools and ranks while other nodes are live ----
#
# A directory removed through one mount leaves the others' listings (and
# their kernels' cached entries) within the bound pages use:
GONE_WITHIN_S = VISIBLE_WITHIN_S


def wait_for(cond, what, timeout=GONE_WITHIN_S):
    """Seconds until cond() holds (fails after timeout)."""
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < timeout, f"{what} after {timeout} s"
        time.sleep(0.01)
    return time.monotonic() - t0


def fsck_clean(ms):
    for m in ms:
        m.umount()
    r = run_pagefs("fsck", ms[0].backing, "--meta", ms[0].meta, "--verify-data", timeout=120)
    assert r.returncode == 0, describe(r)


def test_an_empty_pool_removed_on_one_mount_leaves_the_others_and_can_be_made_again(mount):
    a, b = mounts(mount, 2)
    pool_everywhere([a, b], 0, "swa")
    data_file = os.getxattr(a.path(0, "swa"), "user.pagefs.data_file").decode().rstrip("\0")
    assert os.path.exists(data_file)
    os.stat(b.path(0, "swa"))  # B's kernel now caches the entry
    os.rmdir(a.path(0, "swa"))
    assert not os.path.exists(a.path(0, "swa"))
    took = wait_for(lambda: "swa" not in os.listdir(b.path(0)) and
                    not os.path.exists(b.path(0, "swa")), "B still shows the removed pool")
    print(f"pool removal reached the other mount in {took * 1000:.0f} ms")
    assert not os.path.exists(data_file), "the removed pool's data file is still there"
    expect_errno(errno.ENOENT, os.open, b.path(0, "swa", "x"), os.O_WRONLY | os.O_CREAT)
    # Made again through B: a new pool, served by both.
    os.mkdir(b.path(0, "swa"))
    wait_for(lambda: os.path.isdir(a.path(0, "swa")), "the pool made again did not reach A")
    one, two = os.urandom(7000), os.urandom(9000)
    write_page(a.path(0, "swa", "one"), one)
    write_page(b.path(0, "swa", "two"), two)
    wait_visible(b.path(0, "swa", "one"), one)
    wait_visible(a.path(0, "swa", "two"), two)
    assert os.path.exists(data_file)
    fsck_clean([a, b])


def test_rmdir_of_a_pool_holding_a_page_just_committed_on_another_mount_is_enotempty(mount):
    a, b = mounts(mount, 2)
    pool_everywhere([a, b])
    pages = {}
    for i in range(10):
        name = f"p{i}"
        pages[name] = os.urandom(3000 + i)
        write_page(b.path(0, "kv", name), pages[name])
        # Right after B's close returned: A's mirror may not have it yet.
        expect_errno(errno.ENOTEMPTY, os.rmdir, a.path(0, "kv"))
    for m in (a, b):
        for name, data in pages.items():
            wait_visible(m.path(0, "kv", name), data)
    fsck_clean([a, b])


def test_a_write_in_flight_on_another_mount_fails_cleanly_when_the_pool_is_removed(mount):
    a, b = mounts(mount, 2)
    pool_everywhere([a, b], 1, "mamba")
    fd = os.open(b.path(1, "mamba", "late"), os.O_WRONLY | os.O_CREAT)
    os.write(fd, b"x" * 5000)
    # B's reservation is in its memory only: the pool is empty in the index.
    os.rmdir(a.path(1, "mamba"))
    os.write(fd, b"y" * 100)  # into the old file: harmless, never published
    e = expect_errno((errno.ENOENT, errno.EIO), os.close, fd)
    print(f"the writer's close after the removal: {errno.errorcode[e.errno]}")
    wait_for(lambda: not os.path.exists(b.path(1, "mamba")), "B still shows the removed pool")
    expect_errno(errno.ENOENT, os.stat, a.path(1, "mamba", "late"))
    fsck_clean([a, b])


def test_a_reader_on_another_mount_of_a_removed_page_keeps_the_pool_until_it_closes(mount):
    a, b = mounts(mount, 2)
    pool_everywhere([a, b], 3, "indexer")
    data = os.urandom(6000)
    write_page(a.path(3, "indexer", "x"), data)
    wait_visible(b.path(3, "indexer", "x"), data)
    with open(b.path(3, "indexer", "x"), "rb") as reader:
        os.unlink(a.path(3, "indexer", "x"))
        # B still reads page x from the pool's data file: not removed.
        t0 = time.monotonic()
        expect_errno(errno.EBUSY, os.rmdir, a.path(3, "indexer"))
        print(f"rmdir refused with EBUSY after {time.monotonic() - t0:.1f} s")
        assert os.path.isdir(b.path(3, "indexer"))
        assert_bytes_equal(reader.read(), data, "the reader on B")
    os.rmdir(a.path(3, "indexer"))
    wait_for(lambda: not os.path.exists(b.path(3, "indexer")), "B still shows the pool")
    fsck_clean([a, b])


def test_rmdir_racing_writers_on_another_mount_never_loses_a_committed_page(mount):
    a, b = mounts(mount, 2)
    removed = kept = 0
    for rnd in range(12):
        ns = f"race{rnd}"
        pool_everywhere([a, b], 2, ns)
        code = (
            "import os, random, sys, time\n"
            f"pool = {str(b.path(2, ns))!r}\n"
            "print('go', flush=True)\n"
            "for j in range(40):\n"
            "    name = 'w%d' % j\n"
            "    data = (name.encode() * 500)[:2000 + j]\n"
            "    try:\n"
            "        fd = os.open(os.path.join(pool, name), os.O_WRONLY | os.O_CREAT)\n"
            "        time.sleep(random.random() * 0.02)\n"
            "        os.write(fd, data)\n"
            "        os.close(fd)\n"
            "        print('ok', name, time.monotonic(), flush=True)\n"
            "    except OSError as e:\n"
            "        print('err', name, e.errno, time.monotonic(), flush=True)\n")
        writer = H.spawn([H.PYTHON, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert writer.stdout.readline().strip() == b"go"
        # Sometimes before, sometimes after the first page's commit.
        time.sleep(random.random() * 0.04)
        gone_at = None
        while writer.poll() is None and gone_at is None:
            try:
                os.rmdir(a.path(2, ns))
                gone_at = time.monotonic()
            except OSError as e:
                assert e.errno in (errno.ENOTEMPTY, errno.EBUSY), errno.errorcode[e.errno]
                time.sleep(0.002)
        out, err = writer.communicate(timeout=120)
        assert writer.returncode == 0, err.decode()
        lines = [ln.split() for ln in out.decode().splitlines()]
        ok = [ln[1] for ln in lines if ln[0] == "ok"]
        failed = [(ln[1], int(ln[2])) for ln in lines if ln[0] == "err"]
        for name, code_ in failed:
            assert code_ in (errno.ENOENT, errno.EIO), f"{name}: {errno.errorcode[code_]}"
        if gone_at is None:
            kept += 1
            assert not failed, f"writes failed though the pool stayed: {failed}"
            for m in (a, b):
                for name in ok:
                    want = (name.encode() * 500)[:2000 + int(name[1:])]
                    wait_visible(m.path(2, ns, name), want)
        else:
            removed += 1
            # Nothing committed can be lost: the pool was empty in the index
            # when it went, so every write of this round failed.
            assert not ok, f"pages reported written into a pool that was removed: {ok}"
            wait_for(lambda: not os.path.exists(b.path(2, ns)), "B still shows the pool")
    print(f"rounds: pool removed {removed}, pool kept (ENOTEMPTY) {kept}")
    fsck_clean([a, b])


def test_a_rank_removed_on_one_mount_leaves_the_others(mount):
    a, b = mounts(mount, 2)
    os.mkdir(a.path(7))
    wait_for(lambda: os.path.isdir(b.path(7)), "a new rank did not reach B")
    os.stat(b.path(7))
    os.rmdir(a.path(7))
    took = wait_for(lambda: "7" not in os.listdir(b.mnt) and not os.path.exists(b.path(7)),
                    "B still shows the removed rank")
    print(f"rank removal reached the other mount in {took * 1000:.0f} ms")
    # A pool made in a rank on B just before A removes the rank: ENOTEMPTY.
    os.mkdir(a.path(8))
    wait_for(lambda: os.path.isdir(b.path(8)), "a new rank did not reach B")
    os.mkdir(b.path(8, "kv"))
    expect_errno(errno.ENOTEMPTY, os.rmdir, a.path(8))
    wait_for(lambda: os.path.isdir(a.path(8, "kv")), "the pool did not reach A")
    # The rank made again on B appears on A.
    os.mkdir(b.path(7))
    wait_for(lambda: os.path.isdir(a.path(7)), "the rank made again did not reach A")
    fsck_clean([a, b])


def test_a_removal_stopped_half_way_is_finished_by_a_live_node_or_by_fsck(mount):
    a, b = mounts(mount, 2)
    pool_everywhere([a, b], 5, "draft")
    pool_everywhere([a, b], 5, "swa")
    draft = os.getxattr(a.path(5, "draft"), "user.pagefs.data_file").decode().rstrip("\0")
    swa = os.getxattr(a.path(5, "swa"), "user.pagefs.data_file").decode().rstrip("\0")
    # What a node that died between the steps of a removal leaves: the
    # pool's row retired (capacity -node), its data file still there.
    H.psql("UPDATE pagefs_pools SET capacity = -424242 WHERE rank = 5 AND ns = 'draft'",
           uri=a.meta)
    # A live node takes it over (the remover is not a node) and finishes it.
    wait_for(lambda: not os.path.exists(draft), "the half-done removal was not finished",
             timeout=10)
    for m in (a, b):
        wait_for(lambda: "draft" not in os.listdir(m.path(5)), f"{m.mnt} still shows it")
    wait_for(lambda: H.psql("SELECT count(*) FROM pagefs_pools WHERE ns = 'draft'",
                            uri=a.meta) == "0", "its row stayed", timeout=10)
    os.mkdir(b.path(5, "draft"))
    wait_for(lambda: os.path.isdir(a.path(5, "draft")), "the pool made again did not reach A")
    # With no daemon running, fsck reports it and --repair finishes it.
    for m in (a, b):
        m.umount()
    H.psql("UPDATE pagefs_pools SET capacity = -424242 WHERE rank = 5 AND ns = 'swa'",
           uri=a.meta)
    r = run_pagefs("fsck", a.backing, "--meta", a.meta)
    assert r.returncode != 0 and "pool-retired" in r.stdout, describe(r)
    r = run_pagefs("fsck", a.backing, "--meta", a.meta, "--repair")
    assert "pool-retired" in r.stdout, describe(r)
    assert not os.path.exists(swa)
    r = run_pagefs("fsck", a.backing, "--meta", a.meta)
    assert r.returncode == 0, describe(r)
    a.start(*OPTS)
    os.mkdir(a.path(5, "swa"))
    write_page(a.path(5, "swa", "p"), b"z" * 100)
    a.umount()


@pytest.mark.timeout_s(240)
def test_a_daemon_killed_while_invalidating_names_exits_and_frees_its_clients(mount):
    """Writers on two nodes evict each other's pages, so each daemon's
    invalidation thread keeps telling its kernel that names went. A kill -9
    that caught that thread waiting in the kernel for a directory lock (held
    by a client's create, which waited for the dead daemon) left the daemon
    unable to exit, its /dev/fuse open and its clients blocked for good,
    until `pagefs umount --force` (a probe: 2 kills in 4). The daemon's
    watchdog now aborts the connection: the process exits, its clients get
    an error, and a plain `pagefs umount` clears the mount."""
    for attempt in range(3):
        a, b = mounts(mount, 2, "--page-size", "64K", "--capacity", "8M")
        pool_everywhere([a, b])
        stop = threading.Event()
        failed = {}

        def writer(m, tag):
            i = 0
            while not stop.is_set():
                name = m.path(0, "kv", f"{tag}_{i % 40}")
                try:
                    with open(f"{name}.tmp", "wb") as f:
                        f.write(os.urandom(65536))
                    os.rename(f"{name}.tmp", name)
                except OSError as e:
                    failed[tag] = e
                    return
                i += 1

        ts = [threading.Thread(target=writer, args=(m, f"{n}{k}"), daemon=True)
              for n, m in (("a", a), ("b", b)) for k in range(2)]
        for t in ts:
            t.start()
        time.sleep(3)
        pid = b.pid
        os.kill(pid, signal.SIGKILL)
        alive = H.wait_until(lambda: not H.threads_alive(pid), timeout=10)
        b_writers = [t for t in ts[2:] if t.is_alive()]
        for t in ts[2:]:
            t.join(10)
        stop.set()
        for t in ts[:2]:
            t.join(30)
        assert alive, f"attempt {attempt}: daemon {pid} still has live threads 10 s after SIGKILL"
        assert not [t for t in ts[2:] if t.is_alive()], \
            f"attempt {attempt}: writers on the killed node still blocked ({len(b_writers)})"
        assert set(failed) >= {"b0", "b1"}, failed
        r = run_pagefs("umount", b.mnt, timeout=30)
        assert r.returncode == 0, f"attempt {attempt}: {describe(r)}"
        b.mounted = False
        a.umount()


@pytest.mark.timeout_s(180)
def test_two_nodes_renaming_and_writing_onto_one_name_never_get_eexist(mount):
    """SGLang's writers on two nodes publish one key at once (temporary
    file, rename over the key; or a write of the key itself): the store
    refused the second row of that name and rename() or close() failed
    with EEXIST, leaving the temporary page behind. rename(2) replaces its target; the loser's try is
    run again and replaces the winner's row."""
    a, b = mounts(mount, 2, "--page-size", "64K", "--capacity", "64M")
    pool_everywhere([a, b])
    errors = []

    def worker(m, tag):
        d = m.path(0, "kv")
        for i in range(250):
            tmp = d / f"key.tmp.{tag}.{i}"
            try:
                write_page(tmp, b"%s %d" % (tag.encode(), i))
                os.rename(tmp, d / "key")
                write_page(d / "direct", b"%s %d" % (tag.encode(), i))
            except OSError as e:
                errors.append((tag, i, errno.errorcode.get(e.errno, e.errno)))

    ts = [threading.Thread(target=worker, args=(m, t)) for m, t in ((a, "a"), (b, "b"))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errors, f"{len(errors)} failures, first: {errors[:5]}"
    for m in (a, b):
        left = [n for n in os.listdir(m.path(0, "kv")) if ".tmp." in n]
        assert not left, f"temporary pages left behind: {left[:5]}"
    a.umount()
    b.umount()


def test_makedirs_of_a_pool_another_node_just_made_succeeds(mount):
    """SGLang processes starting on several nodes at once each make the
    pool directory (os.makedirs(exist_ok=True)): the node that did not yet
    know the other's new pool answered mkdir with EEXIST while its lookup
    still said ENOENT, and makedirs raised."""
    a, b = mounts(mount, 2)
    a.pool(0, "kv")  # the rank
    for i in range(20):
        os.mkdir(a.path(0, f"p{i}"))
        os.makedirs(b.path(0, f"p{i}"), exist_ok=True)
        assert os.path.isdir(b.path(0, f"p{i}"))
    a.umount()
    b.umount()


def wait_used_slots(m, want, what, rank=0, ns="kv"):
    pool = m.path(rank, ns)
    t0 = time.monotonic()
    while True:
        got = (int(os.getxattr(pool, "user.pagefs.pages")),
               int(os.getxattr(pool, "user.pagefs.used_slots")))
        if got == want:
            return
        assert time.monotonic() - t0 < 10, f"{what}: (pages, used_slots) = {got}, want {want}"
        time.sleep(0.05)


def test_a_page_another_node_renames_while_it_is_open_here_keeps_its_slot_counted(mount):
    """Node a has page p, which node b wrote, open for reading; b renames
    it. On a the page is the same (same slot) under its new name: its slot
    stays used while it is open and after the reader closes (a counted it
    one low: the rename reached a as a drop of p, whose pinned slot in b's
    chunk was freed when the reader closed, though the renamed page still
    had it)."""
    a, b = mounts(mount, 2, "--page-size", "64K", "--capacity", "4M")
    pool_everywhere([a, b])
    data = os.urandom(30000)
    write_page(b.path(0, "kv", "p"), data)
    write_page(a.path(0, "kv", "other"), b"o")
    wait_visible(a.path(0, "kv", "p"), data)
    fd = os.open(a.path(0, "kv", "p"), os.O_RDONLY)
    try:
        os.rename(b.path(0, "kv", "p"), b.path(0, "kv", "q"))
        wait_visible(a.path(0, "kv", "q"), data)
        wait_used_slots(a, (2, 2), "on a, the reader still open")
        assert_bytes_equal(os.pread(fd, 30000, 0), data, "a's open page")
    finally:
        os.close(fd)
    wait_used_slots(a, (2, 2), "on a, after the reader closed")
    wait_used_slots(b, (2, 2), "on b")
    assert read_page(a.path(0, "kv", "q")) == data


def test_a_pool_resized_while_empty_is_divided_alike_by_every_node(mount):
    """pool create --capacity on a new pool of a shared index changes its
    chunk size (64 slots in chunks of 2, then 128 in chunks of 4): every
    node leases chunks of the new size, and writers on both never share a
    slot."""
    a, b = mounts(mount, 2, "--page-size", "64K", "--capacity", "4M")
    r = run_pagefs("pool", "create", a.path(0, "kv"), "--capacity", "8M")
    assert r.returncode == 0, describe(r)
    t0 = time.monotonic()
    while not (os.path.isdir(b.path(0, "kv")) and
               int(os.getxattr(b.path(0, "kv"), "user.pagefs.capacity")) == 8 << 20):
        assert time.monotonic() - t0 < 5, "b never saw the new capacity"
        time.sleep(0.05)
    for i in range(60):
        write_page((a if i % 2 else b).path(0, "kv", f"p{i}"), b"%d" % i)
    wait_same_listing([a, b])
    slots = slots_of(a)
    assert len(slots) == 60 and len(set(slots.values())) == 60, f"a slot shared: {slots}"
    for i in range(60):
        assert read_page(a.path(0, "kv", f"p{i}")) == b"%d" % i
        assert read_page(b.path(0, "kv", f"p{i}")) == b"%d" % i


def test_a_page_published_on_another_node_moves_the_pool_times_seen_here(mount):
    """The kernel here caches the pool's attributes for the attr timeout;
    a page another node publishes, renames or unlinks moves them here too
    within the bound (the change feed drops them from the kernel)."""
    a, b = mounts(mount, 2)
    pool_everywhere([a, b])
    for what, op in (("publish", lambda: write_page(b.path(0, "kv", "x"), b"x")),
                     ("rename", lambda: os.rename(b.path(0, "kv", "x"), b.path(0, "kv", "y"))),
                     ("unlink", lambda: os.unlink(b.path(0, "kv", "y")))):
        before = os.stat(a.path(0, "kv")).st_mtime_ns  # cached by a's kernel now
        time.sleep(0.02)
        start = time.time_ns()
        op()
        t0 = time.monotonic()
        while os.stat(a.path(0, "kv")).st_mtime_ns < start:
            assert time.monotonic() - t0 < VISIBLE_WITHIN_S, \
                f"a's pool mtime stayed {before} after b's {what}"
            time.sleep(0.02)
