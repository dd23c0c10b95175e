"""pagefs.Client on a real mount: the batch lookup channel (fs/fs_ioctl.c),
the direct read path, writes through the mount, and every bad input the
client is expected to refuse with a clear error or to answer as a miss."""
import errno
import fcntl
import mmap
import os
import struct
import threading
import time

import pytest

import pagefs
from pagefs import _wire
from pagefs_helpers import expect_errno, read_page, write_page

KB = 1024


def body(name, size):
    seed = (name.encode() * (size // max(1, len(name)) + 1))[:size]
    head = bytes((b + i) & 0xFF for i, b in enumerate(seed[:256]))
    return head * (size // 256) + seed[:size % 256]


@pytest.fixture
def client(mount):
    m = mount("--page-size", "64K", "--capacity", "4M")
    c = pagefs.Client(m.mnt)
    c.pool(0, "kv")
    yield m, c
    c.close()


def test_batch_lookup_answers_what_the_page_xattrs_say(client):
    m, c = client
    names = ["a" * 64 + "_Qwen-Qwen3-32B_0_2", "short", "ü-name"]
    for i, n in enumerate(names):
        write_page(m.path(0, "kv", n), body(n, 1000 * (i + 1)))
    path, slot_size, recs = c.lookup(0, "kv", names + ["missing"])
    assert slot_size == 64 * KB
    for n, r in zip(names, recs):
        p = m.path(0, "kv", n)
        assert r.found
        assert path == os.getxattr(p, "user.pagefs.data_file").decode()
        assert r.offset == int(os.getxattr(p, "user.pagefs.offset"))
        assert r.checksum == int(os.getxattr(p, "user.pagefs.checksum"), 16)
        assert r.length == os.stat(p).st_size
        assert r.ino == os.stat(p).st_ino
        with open(path, "rb") as f:
            f.seek(r.offset)
            assert f.read(r.length) == read_page(p)
    assert not recs[3].found and recs[3].err == errno.ENOENT


def test_batch_exists_answers_each_name_of_a_batch_larger_than_one_request(client):
    m, c = client
    c.pool(0, "small", page_size="4K", capacity="4M")
    present = {f"{i:064x}" for i in range(0, 600, 3)}
    for n in present:
        write_page(m.path(0, "small", n), b"p")
    names = [f"{i:064x}" for i in range(600)] + ["x" * 255]
    assert len(names) > _wire.MAX_NAMES
    assert c.exists(0, "small", names) == [n in present for n in names]


def test_batch_exists_does_not_see_a_page_still_being_written(client):
    m, c = client
    fd = os.open(m.path(0, "kv", "w"), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"partial")
        assert c.exists(0, "kv", ["w"]) == [False]
    finally:
        os.close(fd)
    assert c.exists(0, "kv", ["w"]) == [True]


def raw_ioctl(fd, hdr_fields, names=b""):
    buf = bytearray(_wire.IOC_SIZE)
    struct.pack_into("=IHHII", buf, 0, *hdr_fields)
    buf[16:16 + len(names)] = names
    fcntl.ioctl(fd, _wire.IOC_BATCH, buf, True)
    return buf


def test_the_lookup_ioctl_refuses_other_inodes_and_malformed_requests(client):
    m, c = client
    write_page(m.path(0, "kv", "p"), b"x")
    good = (_wire.MAGIC, _wire.VERSION, _wire.OP_EXISTS, 1, 2)
    for path, want in ((m.mnt, errno.ENOTDIR), (m.path(0), errno.ENOTDIR)):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            expect_errno(want, raw_ioctl, fd, good, b"p\0", what=f"ioctl on {path}")
        finally:
            os.close(fd)
    fd = os.open(m.path(0, "kv"), os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert raw_ioctl(fd, good, b"p\0")[16] == 1
        bad = [((0, 1, 1, 1, 2), b"p\0"),                                   # magic
               ((_wire.MAGIC, 9, 1, 1, 2), b"p\0"),                        # version
               ((_wire.MAGIC, 1, 7, 1, 2), b"p\0"),                        # op
               ((_wire.MAGIC, 1, 1, 2, 2), b"p\0"),                        # fewer names than count
               ((_wire.MAGIC, 1, 1, 1, 3), b"p\0q"),                       # unterminated tail
               ((_wire.MAGIC, 1, 1, 1, _wire.IOC_SIZE), b"p\0")]           # bytes past the buffer
        for hdr, names in bad:
            expect_errno(errno.EINVAL, raw_ioctl, fd, hdr, names, what=f"request {hdr}")
        expect_errno(errno.ENOTTY, fcntl.ioctl, fd, 0x5401, bytearray(64), True,
                     what="an ioctl pagefs does not know")
        many = b"\0".join(b"%d" % i for i in range(500)) + b"\0"
        expect_errno(errno.E2BIG, raw_ioctl, fd, (_wire.MAGIC, 1, _wire.OP_LOOKUP, 500,
                                                  len(many)), many, what="a reply too big")
    finally:
        os.close(fd)
    fd = os.open(m.path(0, "kv", "p"), os.O_RDONLY)
    try:
        expect_errno(errno.ENOTDIR, raw_ioctl, fd, good, b"p\0", what="ioctl on a page")
    finally:
        os.close(fd)


def test_names_that_are_no_page_names_answer_missing_in_a_raw_request(client):
    m, c = client
    write_page(m.path(0, "kv", "p"), b"x")
    names = [b"p", b"", b"a/b", b"y" * 5000, b".", b"p"]
    body = b"\0".join(names) + b"\0"
    fd = os.open(m.path(0, "kv"), os.O_RDONLY | os.O_DIRECTORY)
    try:
        out = raw_ioctl(fd, (_wire.MAGIC, 1, _wire.OP_EXISTS, len(names), len(body)), body)
        assert list(out[16:16 + len(names)]) == [1, 0, 0, 0, 0, 1]
        out = raw_ioctl(fd, (_wire.MAGIC, 1, _wire.OP_LOOKUP, len(names), len(body)), body)
        errs = [struct.unpack_from("=i", out, 24 + 40 * i)[0] for i in range(len(names))]
        assert errs[0] == errs[5] == 0 and all(e < 0 for e in errs[1:5]), errs
    finally:
        os.close(fd)


def test_read_into_reads_exact_bytes_from_the_data_file(client):
    m, c = client
    names = [f"k{i}" for i in range(20)]
    data = [body(n, 64 * KB if i % 2 else 3000 + i) for i, n in enumerate(names)]
    assert c.write(0, "kv", names, data) == [True] * 20
    bufs = [bytearray(len(d)) for d in data]
    assert c.read_into(0, "kv", names, bufs) == [True] * 20
    assert [bytes(b) for b in bufs] == data
    assert c.counters["direct_reads"] == 20 and c.counters["mount_reads"] == 0
    big = bytearray(64 * KB + 10)  # a slice of a larger buffer, a memoryview
    assert c.read_into(0, "kv", ["k1"], [memoryview(big)[5:5 + 64 * KB]]) == [True]
    assert bytes(big[5:5 + 64 * KB]) == data[1] and big[:5] == b"\0" * 5


def test_aligned_buffers_are_read_with_o_direct_where_the_backing_allows_it(client):
    """On a backing without O_DIRECT (tmpfs) the same reads take the page
    cache; the integration runs put the backing under /tmp (ext4 in CI)."""
    m, c = client
    probe = m.backing / "odirect-probe"
    try:
        os.close(os.open(probe, os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o644))
        os.unlink(probe)
        odirect = True
    except OSError:
        odirect = False
    data = [body("o%d" % i, 64 * KB) for i in range(3)]
    c.write(0, "kv", ["o0", "o1", "o2"], data)
    bufs = [mmap.mmap(-1, 64 * KB) for _ in range(3)]  # page-aligned memory
    assert c.read_into(0, "kv", ["o0", "o1", "o2"], bufs) == [True] * 3
    assert [bytes(b) for b in bufs] == data
    assert c.counters["odirect_reads"] == (3 if odirect else 0)
    odd = bytearray(64 * KB + 1)
    assert c.read_into(0, "kv", ["o1"], [memoryview(odd)[1:]]) == [True]
    assert bytes(odd[1:]) == data[1] and c.counters["odirect_reads"] == (3 if odirect else 0)
    assert c.counters["direct_reads"] == 4


def test_read_into_fills_numpy_arrays_when_numpy_is_present(client):
    np = pytest.importorskip("numpy")
    m, c = client
    src = np.arange(16 * KB, dtype=np.float32)
    assert c.write(0, "kv", ["np"], [src]) == [True]
    dst = np.zeros(16 * KB, dtype=np.float32)
    assert c.read_into(0, "kv", ["np"], [dst]) == [True]
    assert (dst == src).all()


def test_a_page_replaced_between_open_and_lookup_reads_the_version_its_open_pinned(client):
    m, c = client
    p = c._pool(0, "kv")
    write_page(m.path(0, "kv", "r"), b"A" * 5000)
    fd = os.open(m.path(0, "kv", "r"), os.O_RDONLY)
    try:
        write_page(m.path(0, "kv", "r"), b"B" * 5000)  # O_TRUNC: a new slot
        for i in range(40):  # fill the pool so a free slot would be reused
            write_page(m.path(0, "kv", f"f{i}"), b"C" * 5000)
        path, _, recs = _wire.lookup(p.dirfd, [b"r"])
        assert os.fstat(fd).st_ino != recs[0].ino
        buf = bytearray(5000)
        assert c._read_one(p, path, fd, recs[0], memoryview(buf))
        assert bytes(buf) == b"A" * 5000, "read another version than the open one pinned"
        assert c.counters["mount_reads"] == 1
    finally:
        os.close(fd)


def test_a_data_file_the_client_cannot_open_is_read_through_the_mount(client):
    m, c = client
    c.write(0, "kv", ["a"], [b"q" * 3000])
    p = c._pool(0, "kv")
    fd = os.open(m.path(0, "kv", "a"), os.O_RDONLY)
    try:
        _, _, recs = _wire.lookup(p.dirfd, [b"a"])
        buf = bytearray(3000)
        assert c._read_one(p, str(m.dir / "no-such-data-file"), fd, recs[0], memoryview(buf))
        assert bytes(buf) == b"q" * 3000 and c.counters["mount_reads"] == 1
    finally:
        os.close(fd)


@pytest.mark.parametrize("daemon_verify", ["first", "none"])
def test_corrupt_bytes_in_the_data_file_are_a_miss_never_returned(mount, daemon_verify):
    m = mount("--page-size", "64K", "--capacity", "4M", "--verify", daemon_verify)
    c = pagefs.Client(m.mnt)
    c.pool(0, "kv")
    c.write(0, "kv", ["bad", "good"], [b"a" * 4096, b"g" * 4096])
    path, _, recs = c.lookup(0, "kv", ["bad"])
    with open(path, "r+b") as f:
        f.seek(recs[0].offset + 100)
        f.write(b"Z")
    c2 = pagefs.Client(m.mnt, verify="always")
    bufs = [bytearray(4096), bytearray(4096)]
    assert c2.read_into(0, "kv", ["bad", "good"], bufs) == [False, True]
    assert bytes(bufs[1]) == b"g" * 4096
    if daemon_verify == "none":  # the client's own check caught it
        assert c2.counters["checksum_mismatches"] == 1
    else:  # the daemon's check at the first open caught it and dropped the page
        assert c2.exists(0, "kv", ["bad", "good"]) == [False, True]
    c2.close()
    c.close()


def test_a_mountpoint_that_is_not_pagefs_is_refused_by_name(tmp_path):
    with pytest.raises(pagefs.NotPagefsError, match="is not a pagefs mount"):
        pagefs.Client(tmp_path)
    with pytest.raises(pagefs.NotPagefsError, match="is not a pagefs mount"):
        pagefs.Client(tmp_path / "nowhere")


def test_a_missing_pool_is_a_clear_error_for_every_call(client):
    m, c = client
    for call in (lambda: c.exists(0, "nope", ["a"]),
                 lambda: c.read_into(0, "nope", ["a"], [bytearray(1)]),
                 lambda: c.write(7, "kv", ["a"], [b"x"]),
                 lambda: c.lookup(0, "nope", ["a"])):
        with pytest.raises(pagefs.PoolNotFoundError, match="no pool"):
            call()


def test_a_page_size_that_does_not_fit_is_refused_and_changes_nothing(client):
    m, c = client
    with pytest.raises(ValueError, match="page_size"):
        c.pool(0, "huge", page_size="4G")
    huge = m.path(0, "huge")
    assert [int(os.getxattr(huge, "user.pagefs." + k)) for k in ("page_size", "capacity")] \
        == [64 * KB, 4 * KB * KB]
    c.write(0, "kv", ["a"], [b"x"])
    with pytest.raises(ValueError, match="not empty"):
        c.pool(0, "kv", page_size="1M")
    assert c._pool(0, "kv").page_size == 64 * KB
    with pytest.raises(ValueError, match="cannot create pool"):
        c.pool(0, "Bad-NS")
    with pytest.raises(ValueError, match="more than pool"):
        c.write(0, "kv", ["fits", "too_big"], [b"x", b"y" * (64 * KB + 1)])
    assert c.exists(0, "kv", ["fits", "too_big"]) == [False, False], "nothing was written"


def test_a_page_size_that_does_not_divide_the_capacity_rounds_it_down(client):
    """An MLA page (576 values x 2 bytes x 61 layers x 64 tokens) is no
    divisor of the 4 MiB capacity, and larger: the empty pool takes it, with
    as many whole pages as fit in 4 MiB, at least one."""
    m, c = client
    size = 576 * 2 * 61 * 64
    p = c.pool(0, "mla", page_size=size)
    assert p.page_size == size
    assert p.xattr("capacity") == size
    page = body("mla", size)
    assert c.write(0, "mla", ["a"], [page]) == [True]
    out = bytearray(size)
    assert c.read_into(0, "mla", ["a"], [out]) == [True] and out == page
    assert c.pool(0, "small", page_size=1536).xattr("capacity") == (4 << 20) // 1536 * 1536
    c.pool(0, "given", page_size=1536, capacity=1536 * 100)
    assert c._pool(0, "given").xattr("capacity") == 1536 * 100
    with pytest.raises(ValueError, match="capacity"):
        c.pool(0, "bad", page_size=1536, capacity="1M")  # asked, and no whole number


def test_a_buffer_of_the_wrong_size_is_a_miss_and_is_left_alone(client):
    m, c = client
    c.write(0, "kv", ["a"], [b"x" * 1000])
    small, big = bytearray(b"s" * 999), bytearray(b"b" * 1001)
    assert c.read_into(0, "kv", ["a", "a"], [small, big]) == [False, False]
    assert small == b"s" * 999 and big == b"b" * 1001
    with pytest.raises(ValueError, match="read-only"):
        c.read_into(0, "kv", ["a"], [b"x" * 1000])
    with pytest.raises(ValueError, match="names but"):
        c.read_into(0, "kv", ["a", "b"], [bytearray(1)])


@pytest.mark.parametrize("bad", ["a/b", "a\0b", "", ".", "..", "x" * 256])
def test_a_name_that_is_no_file_name_is_refused_before_anything_is_done(client, bad):
    m, c = client
    for call in (lambda: c.exists(0, "kv", ["ok", bad]),
                 lambda: c.write(0, "kv", ["ok", bad], [b"1", b"2"]),
                 lambda: c.read_into(0, "kv", ["ok", bad], [bytearray(1), bytearray(1)])):
        with pytest.raises(ValueError, match="invalid page name"):
            call()
    assert c.exists(0, "kv", ["ok"]) == [False]


def test_a_full_pool_without_eviction_fails_the_writes_that_do_not_fit(mount):
    m = mount("--page-size", "4K", "--capacity", "16K", "--evict", "none")
    c = pagefs.Client(m.mnt)
    c.pool(0, "kv")
    names = [f"p{i}" for i in range(6)]
    ok = c.write(0, "kv", names, [bytes([i]) * 4096 for i in range(6)])
    assert sum(ok) == 4 and c.last_error.errno == errno.ENOSPC
    bufs = [bytearray(4096) for _ in names]
    assert c.read_into(0, "kv", names, bufs) == ok
    for i, (good, b) in enumerate(zip(ok, bufs)):
        if good:
            assert bytes(b) == bytes([i]) * 4096
    c.close()


def test_delete_and_stats(client):
    m, c = client
    c.write(0, "kv", ["a", "b"], [b"1", b"2"])
    assert c.delete(0, "kv", ["a", "zz"]) == [True, False]
    assert c.exists(0, "kv", ["a", "b"]) == [False, True]
    assert sorted(c.list(0, "kv")) == ["b"]
    assert c.stats()["totals"]["pages"] == 1


@pytest.mark.timeout_s(90)
def test_a_daemon_killed_mid_batch_gives_misses_or_exact_bytes_never_a_hang(client):
    m, c = client
    names = [f"d{i}" for i in range(48)]
    data = {n: body(n, 64 * KB) for n in names}
    assert all(c.write(0, "kv", names, [data[n] for n in names]))
    results, errors, stop = [], [], threading.Event()

    writes = []

    def reader():
        while not stop.is_set():
            bufs = [bytearray(64 * KB) for _ in names]
            try:
                ok = c.read_into(0, "kv", names, bufs)
            except OSError as e:
                errors.append(e)
                continue
            results.append((ok, bufs))

    def writer():
        w = pagefs.Client(m.mnt)
        i = 0
        while not stop.is_set():
            try:
                writes.append(w.write(0, "kv", [f"w{i}_{j}" for j in range(8)],
                                      [data[names[j]] for j in range(8)]))
            except OSError as e:
                errors.append(e)
            i += 1
        w.close()

    t = threading.Thread(target=reader)
    tw = threading.Thread(target=writer)
    t.start()
    tw.start()
    time.sleep(0.3)
    m.kill9()
    time.sleep(0.3)
    stop.set()
    t.join(30)
    tw.join(30)
    assert not t.is_alive(), "a batch read hung after the daemon died"
    assert not tw.is_alive(), "a batch write hung after the daemon died"
    assert writes and any(all(w) for w in writes), "no write batch completed before the kill"
    assert results, "no batch completed before the kill"
    for ok, bufs in results:
        for n, good, b in zip(names, ok, bufs):
            if good:
                assert bytes(b) == data[n], f"wrong bytes for {n}"
    assert not any(results[-1][0]) or errors, "reads after the kill cannot succeed"
    for call in (lambda: c.exists(0, "kv", names),
                 lambda: c.write(0, "kv", ["after"], [b"x"])):
        with pytest.raises(OSError):
            call()


def test_a_pool_removed_and_made_again_is_found_by_a_client_that_knew_the_old_one(client):
    m, c = client
    c.pool(0, "tmp", page_size="4K")
    assert c.exists(0, "tmp", ["a"]) == [False]  # the client now holds the pool open
    os.rmdir(m.path(0, "tmp"))
    with pytest.raises(pagefs.PoolNotFoundError):
        c.exists(0, "tmp", ["a"])
    c.pool(0, "tmp", page_size="4K")
    assert c.write(0, "tmp", ["a"], [b"1"]) == [True]
    assert c.exists(0, "tmp", ["a"]) == [True]
    c.delete(0, "tmp", ["a"])
    os.rmdir(m.path(0, "tmp"))
    c.pool(0, "tmp", page_size="4K")
    c.write(0, "tmp", ["b"], [b"2"])
    buf = bytearray(1)
    assert c.read_into(0, "tmp", ["b"], [buf]) == [True] and buf == b"2"
    assert c.counters["direct_reads"] == 1, "the lookup found the new pool"


def test_a_capacity_that_is_no_whole_number_of_pages_is_refused(client):
    m, c = client
    with pytest.raises(ValueError, match="capacity"):
        c.pool(0, "kv", capacity=64 * KB + 1)
    assert int(os.getxattr(m.path(0, "kv"), "user.pagefs.capacity")) == 4 << 20


def test_a_batch_spreads_over_threads_only_while_cpus_are_idle(client, monkeypatch, tmp_path):
    """_in_parallel uses up to `threads` threads, but no more than the CPUs
    /proc/loadavg's runnable count leaves idle; the reads stay exact."""
    from pagefs import client as C
    m, c = client
    c.threads = 4
    names = ["spread%d" % i for i in range(8)]
    data = [body(n, 64 * KB) for n in names]
    assert all(c.write(0, "kv", names, data))
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    fake = tmp_path / "loadavg"

    def chunks_of_a_batch(runnable):
        fake.write_text("0.50 0.40 0.30 %d/200 1234\n" % runnable)
        monkeypatch.setattr(C, "_LOADAVG", os.open(fake, os.O_RDONLY))
        monkeypatch.setattr(C, "_IDLE", [0.0, 1])
        chunks = []
        c._in_parallel(lambda idx: chunks.append(list(idx)), 8)
        assert sorted(i for ch in chunks for i in ch) == list(range(8))
        bufs = [bytearray(64 * KB) for _ in names]
        assert all(c.read_into(0, "kv", names, bufs)) and bufs == data
        os.close(C._LOADAVG)
        return len(chunks)

    assert chunks_of_a_batch(1) == 4  # 3 CPUs idle besides this task
    assert chunks_of_a_batch(3) == 2
    assert chunks_of_a_batch(9) == 1  # a busy machine: the caller's thread alone
    fake.write_text("garbage\n")
    monkeypatch.setattr(C, "_LOADAVG", os.open(fake, os.O_RDONLY))
    monkeypatch.setattr(C, "_IDLE", [0.0, 1])
    assert C.idle_cpus() == 4  # unreadable: the CPU count
    os.close(C._LOADAVG)
