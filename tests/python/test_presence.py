"""Client.exists through the pools' presence tables (meta/index/presence.c,
python/pagefs/_presence.py) on a real mount: the table follows every way a
name joins or leaves a pool (write, unlink, rename, eviction, a checksum
drop, another node's commit), is rebuilt into a new generation as it fills,
goes with the mount, and a client stops trusting it the moment the daemon
does; the batch ioctl still answers when the table is not used."""
import errno
import os
import stat
import struct
import time

import pytest

import pagefs
import pagefs_helpers as H
from pagefs import _presence, _wire
from pagefs_helpers import read_page, write_page

pytestmark = pytest.mark.skipif(not _presence.available, reason="python3-xxhash missing")

KEY = "%064x_Qwen-Qwen3-32B_0_2"


def no_ioctl(monkeypatch):
    """Makes the batch ioctl fail, so an answer can only come from the table."""
    def refused(dirfd, encoded):
        raise AssertionError("exists asked the daemon")
    monkeypatch.setattr(_wire, "exists", refused)


def header(path):
    with open(path, "rb") as f:
        return struct.unpack("=QIIQQQQQII", f.read(64))


@pytest.fixture
def small(mount):
    m = mount("--page-size", "4K", "--capacity", "64K")  # 16 slots
    c = pagefs.Client(m.mnt)
    c.pool(0, "kv")
    yield m, c
    c.close()


def test_exists_follows_write_unlink_and_rename_without_asking_the_daemon(small, monkeypatch):
    m, c = small
    names = [KEY % i for i in range(3)]
    assert c.exists(0, "kv", names) == [False] * 3
    no_ioctl(monkeypatch)
    write_page(m.path(0, "kv", names[0]), b"a" * 100)
    write_page(m.path(0, "kv", names[1]), b"b" * 100)
    assert c.exists(0, "kv", names) == [True, True, False]
    os.unlink(m.path(0, "kv", names[0]))
    assert c.exists(0, "kv", names) == [False, True, False]
    os.rename(m.path(0, "kv", names[1]), m.path(0, "kv", names[2]))
    assert c.exists(0, "kv", names) == [False, False, True]
    # A page being written is not there until its close.
    with open(m.path(0, "kv", names[0]), "wb") as f:
        f.write(b"x")
        f.flush()
        assert c.exists(0, "kv", names[:1]) == [False]
    assert c.exists(0, "kv", names[:1]) == [True]


def test_the_table_is_a_private_file_of_shared_memory_naming_its_daemon(small):
    m, c = small
    path = os.getxattr(m.path(0, "kv"), "user.pagefs.presence").decode()
    assert path.startswith("/dev/shm/pagefs-%d-" % m.pid)
    st = os.stat(path)
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.getuid()
    magic, version, hdr, live, gen, pid, _pool, mask, hash_id, _ = header(path)
    assert (magic, version, hdr, pid, hash_id) == (_presence.MAGIC, 1, 128, m.pid, 1)
    assert live == gen and (mask + 1) & mask == 0
    # Not listed: `getfattr -d` makes no table.
    assert "user.pagefs.presence" not in os.listxattr(m.path(0, "kv"))
    with pytest.raises(OSError) as e:
        os.setxattr(m.path(0, "kv"), "user.pagefs.presence", b"/tmp/x")
    assert e.value.errno == errno.EPERM


def test_eviction_in_a_full_pool_takes_the_page_out_of_the_table(small, monkeypatch):
    m, c = small
    names = [KEY % i for i in range(17)]
    for n in names[:16]:
        write_page(m.path(0, "kv", n), b"p" * 4096)
    assert c.exists(0, "kv", names[:16]) == [True] * 16
    no_ioctl(monkeypatch)
    write_page(m.path(0, "kv", names[16]), b"q" * 4096)  # evicts the least recent
    got = c.exists(0, "kv", names)
    assert got.count(True) == 16 and got[16]
    evicted = [n for n, yes in zip(names, got) if not yes]
    assert len(evicted) == 1 and not os.path.exists(m.path(0, "kv", evicted[0]))


def test_a_page_dropped_for_a_bad_checksum_leaves_the_table(mount, monkeypatch):
    m = mount("--page-size", "4K", "--capacity", "64K", "--verify", "always")
    c = pagefs.Client(m.mnt)
    c.pool(0, "kv")
    name = KEY % 7
    p = m.path(0, "kv", name)
    write_page(p, b"z" * 4096)
    assert c.exists(0, "kv", [name]) == [True]
    data, offset = os.getxattr(p, "user.pagefs.data_file"), int(os.getxattr(p, "user.pagefs.offset"))
    fd = os.open(data, os.O_WRONLY)
    os.pwrite(fd, b"Z", offset + 10)
    os.close(fd)
    no_ioctl(monkeypatch)
    with pytest.raises(OSError) as e:
        read_page(p)
    assert e.value.errno == errno.EIO
    assert c.exists(0, "kv", [name]) == [False]
    c.close()


def test_a_filling_pool_gets_new_generations_the_client_follows(mount, monkeypatch):
    m = mount("--page-size", "4K", "--capacity", "8M")  # 2048 slots
    c = pagefs.Client(m.mnt)
    c.pool(0, "kv")
    first = os.getxattr(m.path(0, "kv"), "user.pagefs.presence").decode()
    assert c.exists(0, "kv", [KEY % 0]) == [False]
    no_ioctl(monkeypatch)
    names = [KEY % i for i in range(700)]  # past half of 1024 entries: rebuilt
    for n in names:
        write_page(m.path(0, "kv", n), b"r")
    assert c.exists(0, "kv", names + [KEY % 9999]) == [True] * 700 + [False]
    now = os.getxattr(m.path(0, "kv"), "user.pagefs.presence").decode()
    assert now != first and not os.path.exists(first)
    assert c._pool(0, "kv")._table.path == now
    for n in names[:650]:
        os.unlink(m.path(0, "kv", n))
    assert c.exists(0, "kv", names) == [False] * 650 + [True] * 50
    c.close()


def test_remount_makes_a_new_table_and_the_old_file_is_gone(small):
    m, c = small
    write_page(m.path(0, "kv", KEY % 1), b"a")
    old = os.getxattr(m.path(0, "kv"), "user.pagefs.presence").decode()
    c.close()
    m.umount()
    assert not os.path.exists(old)
    m.start()
    c = pagefs.Client(m.mnt)
    assert c.exists(0, "kv", [KEY % 1, KEY % 2]) == [True, False]
    new = c._pool(0, "kv")._table.path
    assert new != old and os.path.exists(new)
    c.close()


def test_a_client_holding_a_table_after_unmount_does_not_answer_from_it(small):
    m, c = small
    write_page(m.path(0, "kv", KEY % 1), b"a")
    assert c.exists(0, "kv", [KEY % 1]) == [True]
    p = c._pool(0, "kv")
    t = p._table
    os.close(p.dirfd)  # (an open pool directory keeps the mount busy)
    p.dirfd = os.open(m.dir, os.O_RDONLY | os.O_DIRECTORY)  # not pagefs: the ioctl fails
    m.umount()
    assert not t.live() and p._table is t
    # not from the table: it asks the daemon, whose ioctl fails (not pagefs)
    with pytest.raises(OSError):
        c.exists(0, "kv", [KEY % 1])


def test_a_client_holding_a_table_of_a_killed_daemon_does_not_answer_from_it(small):
    m, c = small
    write_page(m.path(0, "kv", KEY % 1), b"a")
    assert c.exists(0, "kv", [KEY % 1]) == [True]
    t = c._pool(0, "kv")._table
    path = t.path
    m.kill9()
    assert not t.live() and os.path.exists(path)  # left behind by kill -9
    # not from the table: it asks the daemon, which is gone
    with pytest.raises(OSError):
        c.exists(0, "kv", [KEY % 1])
    m.start()  # the next daemon removes the tables of daemons that are gone
    assert not os.path.exists(path)


def test_removing_the_pool_removes_its_table(small):
    m, c = small
    os.makedirs(m.path(0, "other"))
    path = os.getxattr(m.path(0, "other"), "user.pagefs.presence").decode()
    assert os.path.exists(path)
    os.rmdir(m.path(0, "other"))
    assert not os.path.exists(path)


def test_the_ioctl_still_answers_when_the_table_is_not_used(small, monkeypatch):
    m, c = small
    names = [KEY % i for i in range(200)]
    for n in names[:5]:
        write_page(m.path(0, "kv", n), b"a")
    want = [True] * 5 + [False] * 195
    forced = pagefs.Client(m.mnt, presence=False)
    assert forced.exists(0, "kv", names) == want
    assert forced._pool(0, "kv")._table is None
    forced.close()
    monkeypatch.setattr(_presence, "available", False)  # no python3-xxhash
    plain = pagefs.Client(m.mnt)
    assert plain.exists(0, "kv", names) == want
    assert plain._pool(0, "kv")._table is None
    plain.close()
    assert c.exists(0, "kv", names) == want


@pytest.mark.skipif(bool(H.PG_SKIP), reason=H.PG_SKIP)
def test_another_nodes_commit_reaches_this_nodes_table(mount):
    a = mount("--page-size", "4K", "--capacity", "4M", meta=mount.pg_index())
    b = mount("--page-size", "4K", "--capacity", "4M", backing=a.backing, meta=a.meta)
    a.pool(0, "kv")
    t0 = time.monotonic()
    while not os.path.isdir(b.path(0, "kv")):
        assert time.monotonic() - t0 < 5
        time.sleep(0.01)
    cb = pagefs.Client(b.mnt)
    assert cb.exists(0, "kv", [KEY % 1]) == [False]
    assert cb._pool(0, "kv")._table is not None
    write_page(a.path(0, "kv", KEY % 1), b"from a")
    t0 = time.monotonic()
    while cb.exists(0, "kv", [KEY % 1]) != [True]:
        assert time.monotonic() - t0 < 5, "node A's commit did not reach B's table"
        time.sleep(0.01)
    os.unlink(a.path(0, "kv", KEY % 1))
    t0 = time.monotonic()
    while cb.exists(0, "kv", [KEY % 1]) != [False]:
        assert time.monotonic() - t0 < 5, "node A's unlink did not reach B's table"
        time.sleep(0.01)
    cb.close()


def test_names_of_every_form_and_chains_of_colliding_names_answer_as_the_daemon_does(small):
    """str (ASCII or not), bytes and surrogate-escaped names hash to the
    fingerprints the daemon stored, and names whose first slot holds
    another name's fingerprint follow the chain, present or not."""
    m, c = small
    t = c._pool(0, "kv").table()
    by_slot = {}
    for i in range(20000):  # three present and two absent names on one first slot
        name = KEY % i
        by_slot.setdefault(_presence._xxh64(name) & t.mask, []).append(name)
    chain = next(v for v in by_slot.values() if len(v) >= 5)[:5]
    present = chain[:3] + ["caf\u00e9_%d" % i for i in range(3)] + ["raw\udcff"]
    for n in present:
        write_page(os.path.join(os.fsencode(m.path(0, "kv")), os.fsencode(n)), b"p" * 64)
    asked = present + chain[3:] + ["caf\u00e9_9", "raw\udcfe"]
    want = [True] * len(present) + [False] * 4
    assert c.exists(0, "kv", asked) == want
    assert c.exists(0, "kv", [os.fsencode(n) for n in asked]) == want
    assert _wire.exists(c._pool(0, "kv").dirfd, [os.fsencode(n) for n in asked]) == want
