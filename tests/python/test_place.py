"""Placed writes on a real mount (fs/fs_place.c, PAGEFS_IOC_PLACE): a writer
puts its page's bytes into the data file at its slot itself and gives their
checksum; close() publishes them at once or not at all, readers check them
as any page's, and a write() through the handle undoes the placing."""
import errno
import fcntl
import os
import signal
import subprocess
import sys

import pytest

import pagefs
from pagefs import _wire
from pagefs._checksum import xxh3_64
import pagefs_helpers as H
from pagefs_helpers import expect_errno, read_page

KB = 1024
PAGE = 64 * KB

pytestmark = pytest.mark.skipif(xxh3_64 is None, reason="no XXH3 in this Python")


@pytest.fixture
def pool(mount):
    m = mount("--page-size", "64K", "--capacity", "1M")
    c = pagefs.Client(m.mnt)
    p = c.pool(0, "kv")
    yield m, c, p
    c.close()


def pattern(seed, n=PAGE):
    return bytes((seed * 7 + i * 13) & 0xFF for i in range(256)) * (n // 256)


def place(p, name, data, checksum=None, close=True):
    """Opens name for writing, puts data at its slot, gives the checksum."""
    fd = os.open(os.path.join(p.path, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    offset, slot_size, pool_ino = _wire.place_where(fd)
    assert offset % slot_size == 0 and slot_size == PAGE and pool_ino == os.stat(p.path).st_ino
    with open(os.getxattr(p.path, "user.pagefs.data_file"), "r+b", buffering=0) as f:
        f.seek(offset)
        f.write(data)
    _wire.place_done(fd, len(data), xxh3_64(data) if checksum is None else checksum)
    if close:
        os.close(fd)
    return fd


def test_a_placed_page_reads_back_exactly_through_the_mount_and_the_client(pool):
    m, c, p = pool
    data = pattern(1, PAGE - 100)
    assert c.write(0, "kv", ["a"], [data]) == [True]
    assert c.counters["placed_writes"] == 1 and c.counters["mount_writes"] == 0
    assert read_page(os.path.join(p.path, "a")) == data
    buf = bytearray(len(data))
    assert c.read_into(0, "kv", ["a"], [buf]) == [True] and bytes(buf) == data
    path = os.path.join(p.path, "a")
    assert int(os.getxattr(path, "user.pagefs.checksum"), 16) == xxh3_64(data)
    assert os.stat(path).st_size == len(data)
    # A second write of the name replaces it, placed again.
    data2 = pattern(2)
    assert c.write(0, "kv", ["a"], [data2]) == [True]
    assert read_page(path) == data2
    assert c.counters["placed_writes"] == 2


def test_nothing_is_published_before_close_and_a_replaced_page_stays_until_then(pool):
    m, c, p = pool
    old = pattern(3)
    assert c.write(0, "kv", ["r"], [old]) == [True]
    fd = place(p, "new", pattern(4), close=False)
    fd2 = place(p, "r", pattern(5), close=False)
    try:
        assert "new" not in os.listdir(p.path)
        assert c.exists(0, "kv", ["new", "r"]) == [False, True]
        assert read_page(os.path.join(p.path, "r")) == old
    finally:
        os.close(fd)
        os.close(fd2)
    assert read_page(os.path.join(p.path, "new")) == pattern(4)
    assert read_page(os.path.join(p.path, "r")) == pattern(5)


def test_bytes_that_do_not_match_their_checksum_are_a_miss_never_read(pool):
    m, c, p = pool
    data = pattern(6)
    place(p, "liar", data, checksum=xxh3_64(data) ^ 1)
    place(p, "liar2", data, checksum=xxh3_64(data) ^ 1)
    # The client's direct read checks them (then the daemon's open does,
    # which drops the page): a miss.
    assert c.read_into(0, "kv", ["liar"], [bytearray(PAGE)]) == [False]
    assert c.exists(0, "kv", ["liar"]) == [False]
    # A reader through the mount: the first open checks them.
    expect_errno(errno.EIO, read_page, os.path.join(p.path, "liar2"))
    assert c.exists(0, "kv", ["liar2"]) == [False]


def test_a_write_through_the_handle_after_done_is_published_with_a_checksum_of_the_slot(pool):
    m, c, p = pool
    data = bytearray(pattern(7))
    fd = place(p, "mixed", bytes(data), close=False)
    os.pwrite(fd, b"XYZ", 10)
    os.close(fd)
    data[10:13] = b"XYZ"
    path = os.path.join(p.path, "mixed")
    assert read_page(path) == bytes(data)
    assert int(os.getxattr(path, "user.pagefs.checksum"), 16) == xxh3_64(bytes(data))


def test_placed_bytes_count_as_written_once_and_only_when_published(pool):
    """bytes_written counts a placed page's length at its commit: once for
    two DONEs, not at all for a placement that is never published, and
    beside the bytes a write() after DONE brings itself."""
    m, c, p = pool

    def written():
        return c.stats()["totals"]["bytes_written"]

    before = written()
    fd = place(p, "twice", pattern(1), close=False)
    _wire.place_done(fd, PAGE, xxh3_64(pattern(1)))
    assert written() == before  # nothing published yet
    os.close(fd)
    assert written() == before + PAGE
    fd = place(p, "mixed", pattern(2), close=False)
    os.pwrite(fd, b"XYZ", 10)
    os.close(fd)
    assert written() == before + 2 * PAGE + 3
    run_and_kill(WRITER, os.path.join(p.path, "never"),  # DONE, then killed
                 os.getxattr(p.path, "user.pagefs.data_file"), ready=str.isdigit)
    assert c.exists(0, "kv", ["never"]) == [False]
    assert written() == before + 2 * PAGE + 3


def test_bad_placed_requests_get_their_errors_and_publish_nothing_wrong(pool):
    m, c, p = pool
    path = os.path.join(p.path, "bad")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        expect_errno(errno.EFBIG, _wire.place_done, fd, PAGE + 1, 0)
        os.write(fd, b"through the mount")
        # Bytes came through the handle: placing now would lie about them.
        expect_errno(errno.EINVAL, _wire.place_done, fd, 5, 0)
    finally:
        os.close(fd)
    assert read_page(path) == b"through the mount"
    # Committed: the handle holds no slot to place into any more.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.close(fd)
    # A reader, a directory: no writer's slot.
    fd = os.open(path, os.O_RDONLY)
    try:
        expect_errno(errno.EBADF, _wire.place_where, fd)
    finally:
        os.close(fd)
    expect_errno(errno.EBADF, _wire.place_where, p.dirfd)
    # A malformed request.
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        buf = bytearray(_wire._PLACE.pack(0x1234, 1, 1, 0, 0, 0, 0, 0))
        expect_errno(errno.EINVAL, fcntl.ioctl, fd, _wire.IOC_PLACE, buf, True)
        buf = bytearray(_wire._PLACE.pack(_wire.MAGIC, 1, 9, 0, 0, 0, 0, 0))
        expect_errno(errno.EINVAL, fcntl.ioctl, fd, _wire.IOC_PLACE, buf, True)
    finally:
        os.close(fd)


WRITER = r"""
import os, sys, time
sys.path.insert(0, sys.argv[3])
from pagefs import _wire
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
offset, _, _ = _wire.place_where(fd)
with open(sys.argv[2], "r+b", buffering=0) as f:
    f.seek(offset)
    f.write(b"K" * 65536)
_wire.place_done(fd, 65536, 0)
print(offset, flush=True)
time.sleep(60)
"""


def run_and_kill(code, *args, ready, check=lambda: None):
    """Runs code (argv: args, then python/'s path) until its first line
    passes ready and check() has run, then kill -9s it."""
    pkg = os.path.dirname(os.path.dirname(pagefs.__file__))
    proc = subprocess.Popen([sys.executable, "-c", code, *args, pkg], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert ready(proc.stdout.readline().strip())
        check()
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_placing_writer_killed_before_close_publishes_nothing_and_its_slot_comes_back(pool):
    m, c, p = pool
    run_and_kill(WRITER, os.path.join(p.path, "dead"),
                 os.getxattr(p.path, "user.pagefs.data_file"), ready=str.isdigit)
    assert c.exists(0, "kv", ["dead"]) == [False]
    assert "dead" not in os.listdir(p.path)
    # Every slot of the pool can still be written and read back.
    names = ["f%d" % i for i in range(16)]
    assert c.write(0, "kv", names, [pattern(i) for i in range(16)]) == [True] * 16
    bufs = [bytearray(PAGE) for _ in names]
    assert c.read_into(0, "kv", names, bufs) == [True] * 16
    assert [bytes(b) for b in bufs] == [pattern(i) for i in range(16)]


def test_a_client_without_placed_writes_or_write_access_writes_through_the_mount(pool, caplog):
    m, c, p = pool
    plain = pagefs.Client(m.mnt, place=False)
    try:
        assert plain.write(0, "kv", ["m"], [pattern(8)]) == [True]
        assert plain.counters == dict(plain.counters, placed_writes=0, mount_writes=1)
    finally:
        plain.close()
    # A data file this process cannot open for writing: through the mount.
    p.write_fd()
    with p._lock:
        if p._wfd is not None and p._wfd >= 0:
            os.close(p._wfd)
        p._wfd = -1
    assert c.write(0, "kv", ["n"], [pattern(9)]) == [True]
    assert c.counters["mount_writes"] == 1
    assert "cannot open the data file of pool 0/kv for writing" in caplog.text
    assert read_page(os.path.join(p.path, "n")) == pattern(9)


# ---- batch writes: RESERVE and COMMIT on the pool directory ----


def test_a_batch_write_is_published_whole_and_seen_at_once_where_a_miss_was_cached(pool):
    m, c, p = pool
    names = ["b%d" % i for i in range(8)]
    for n in names:  # the kernel now holds negative entries for the names
        assert not os.path.exists(os.path.join(p.path, n))
    data = [pattern(i, PAGE - i) for i in range(8)]
    assert c.write(0, "kv", names, data) == [True] * 8
    assert c.counters["placed_writes"] == 8 and c.counters["mount_writes"] == 0
    for n, d in zip(names, data):
        path = os.path.join(p.path, n)
        assert os.stat(path).st_size == len(d), "a cached miss hid a batch-written page"
        assert read_page(path) == d
        assert int(os.getxattr(path, "user.pagefs.checksum"), 16) == xxh3_64(d)
    assert sorted(os.listdir(p.path)) == sorted(names)
    # Written again: each name now holds the new page.
    assert c.write(0, "kv", names, data[::-1]) == [True] * 8
    assert [read_page(os.path.join(p.path, n)) for n in names] == data[::-1]
    assert pool_stat(c)["pages"] == 8 and pool_stat(c)["used_slots"] == 8


def pool_stat(c):
    (s,) = [s for s in c.stats()["pools"] if s["rank"] == 0 and s["namespace"] == "kv"]
    return s


def test_commit_publishes_what_it_is_told_and_refuses_what_it_cannot(pool):
    m, c, p = pool
    enc = [b"ok", b"aborted", b"too_big", b"bad/name", b"liar"]
    path, slot_size, recs, spans = _wire.reserve(p.dirfd, enc)
    assert [r.err for r in recs] == [0, 0, 0, errno.EINVAL, 0] and len(spans) == 1
    assert len({r.offset for r in recs if r.found}) == 4
    assert pool_stat(c)["writing"] == 4
    data = pattern(10)
    with open(path, "r+b", buffering=0) as f:
        for r in recs:
            if r.found:
                f.seek(r.offset)
                f.write(data)
    token = spans[0][0]
    # Not the batch RESERVE answered, an unknown token: refused.
    expect_errno(errno.EINVAL, _wire.commit, p.dirfd, token + 99, [(0, 0)] * 5)
    entries = [(PAGE, xxh3_64(data)), (_wire.ABORT, 0), (PAGE + 1, 0), (PAGE, 0),
               (PAGE, xxh3_64(data) ^ 1)]
    assert _wire.commit(p.dirfd, token, entries) == \
        [0, errno.ECANCELED, errno.EFBIG, errno.EINVAL, 0]
    assert sorted(os.listdir(p.path)) == ["liar", "ok"]
    assert read_page(os.path.join(p.path, "ok")) == data
    expect_errno(errno.EIO, read_page, os.path.join(p.path, "liar"))  # a miss
    assert pool_stat(c)["writing"] == 0
    # The token is spent.
    expect_errno(errno.EINVAL, _wire.commit, p.dirfd, token, entries)
    # A count that is not the RESERVE's publishes nothing of the batch.
    _, _, recs, spans = _wire.reserve(p.dirfd, [b"x", b"y"])
    expect_errno(errno.EINVAL, _wire.commit, p.dirfd, spans[0][0], [(1, 0)])
    assert c.exists(0, "kv", ["x", "y"]) == [False, False]
    assert pool_stat(c)["writing"] == 0


RESERVER = r"""
import os, sys, time
sys.path.insert(0, sys.argv[2])
from pagefs import _wire
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
_wire.reserve(fd, [b"r%d" % i for i in range(16)])
print("reserved", flush=True)
time.sleep(60)
"""


def test_reservations_of_a_client_that_dies_are_given_back_and_nothing_published(pool):
    m, c, p = pool

    def sixteen_held():
        assert pool_stat(c)["writing"] == 16

    run_and_kill(RESERVER, p.path, ready=lambda line: line == "reserved", check=sixteen_held)
    H.wait_until(lambda: pool_stat(c)["writing"] == 0)
    assert pool_stat(c)["writing"] == 0
    assert os.listdir(p.path) == []
    names = ["n%d" % i for i in range(16)]
    assert c.write(0, "kv", names, [pattern(i) for i in range(16)]) == [True] * 16


def test_a_batch_larger_than_the_pool_goes_in_rounds_and_the_last_pages_stay(mount):
    m = mount("--page-size", "64K", "--capacity", "256K")
    c = pagefs.Client(m.mnt)
    try:
        c.pool(0, "kv")
        names = ["l%d" % i for i in range(10)]
        assert c.write(0, "kv", names, [pattern(i) for i in range(10)]) == [True] * 10
        kept = c.exists(0, "kv", names)
        assert sum(kept) == 4 and kept[-1]
        bufs = [bytearray(PAGE) for _ in names]
        got = c.read_into(0, "kv", names, bufs)
        assert got == kept
        assert all(bytes(b) == pattern(i) for i, b in enumerate(bufs) if got[i])
    finally:
        c.close()


def test_a_batch_written_page_survives_a_kill_9_of_the_daemon(pool):
    m, c, p = pool
    assert c.write(0, "kv", ["durable"], [pattern(11)]) == [True]
    c.close()
    m.kill9()
    m.start()
    assert read_page(m.path(0, "kv", "durable")) == pattern(11)


def test_a_client_of_a_daemon_without_batch_writes_places_page_by_page(pool):
    m, c, p = pool
    c.batch_write = False  # what an EINVAL from RESERVE leaves
    assert c.write(0, "kv", ["s1", "s2"], [pattern(1), pattern(2)]) == [True, True]
    assert c.counters == dict(c.counters, placed_writes=2, mount_writes=0)
    assert read_page(os.path.join(p.path, "s2")) == pattern(2)


@pytest.mark.skipif(bool(H.PG_SKIP), reason=H.PG_SKIP)
def test_batch_writes_on_two_nodes_of_one_index_are_read_whole_on_the_other(mount):
    """Two daemons on one PostgreSQL index and one backing: pages each node's
    client places reach the other node's readers with their bytes, and a
    name written again on the other node holds the newer page there too."""
    a = mount("--page-size", "64K", "--capacity", "4M", meta=mount.pg_index())
    b = mount("--page-size", "64K", "--capacity", "4M", backing=a.backing, meta=a.meta)
    ca, cb = pagefs.Client(a.mnt), pagefs.Client(b.mnt)
    try:
        ca.pool(0, "kv")
        assert H.wait_until(lambda: os.path.isdir(b.path(0, "kv")), timeout=5)
        names = ["n%d" % i for i in range(32)]
        assert ca.write(0, "kv", names, [pattern(i) for i in range(32)]) == [True] * 32
        assert ca.counters["placed_writes"] == 32
        assert H.wait_until(lambda: all(cb.exists(0, "kv", names)), timeout=5)
        bufs = [bytearray(PAGE) for _ in names]
        assert cb.read_into(0, "kv", names, bufs) == [True] * 32
        assert [bytes(x) for x in bufs] == [pattern(i) for i in range(32)]
        # Written again on b: a's readers get b's pages.
        assert cb.write(0, "kv", names[:8], [pattern(100 + i) for i in range(8)]) == [True] * 8

        def a_sees_b():
            got = [bytearray(PAGE) for _ in range(8)]
            return ca.read_into(0, "kv", names[:8], got) == [True] * 8 and \
                [bytes(x) for x in got] == [pattern(100 + i) for i in range(8)]

        assert H.wait_until(a_sees_b, timeout=5)
        assert read_page(a.path(0, "kv", "n9")) == pattern(9)
        # Every page of the pool holds a slot of its own.
        slots = [int(os.getxattr(a.path(0, "kv", n), "user.pagefs.slot")) for n in names]
        assert len(set(slots)) == 32
    finally:
        ca.close()
        cb.close()
