"""The mini_3fs_metadata_server HTTP protocol (`pagefs serve-meta`, `pagefs
mount --http`): SGLang's client flow against the FUSE tree, every route's
error cases, the safety differences from the Python server, concurrency.

Tests marked `engines` also run on a PostgreSQL index (one node; several
nodes: test_http_multinode.py). There a node reserves in the slot chunks it
leases, so which page index comes first differs (`top_down` is False)."""
import errno
import os
import re
import threading
import time

import pytest
import requests

import indexdb
import metaclient as MC
import pagefs_helpers as H

PAGE = 64 * 1024


@pytest.fixture
def server(tmp_root, request, engine):
    """server(*opts) -> a serve-meta on a new index of the test's engine."""
    servers, schemas = [], []

    def start(*opts, **kw):
        d = os.path.join(tmp_root, f"{request.node.name[:50]}-{time.monotonic_ns()}")
        os.makedirs(d)
        if engine == "postgres" and "meta" not in kw:
            schema, kw["meta"] = H.new_pg_index("http")
            schemas.append(schema)
        s = MC.Server(d, "--page-size", "64K", *opts, **kw)
        servers.append(s)
        return s

    yield start
    for s in servers:
        assert s.stop() == 0, f"serve-meta did not exit cleanly:\n{s.log_text()}"
        reports = s.sanitizer_reports()
        assert not reports, "sanitizer reports from serve-meta:\n" + "\n".join(reports)[:20000]
    for schema in schemas:
        H.psql(f"SET client_min_messages=warning; DROP SCHEMA {schema} CASCADE")


@pytest.fixture
def top_down(engine):
    """True where new page indices come from the top of the pool down (one
    daemon's SQLite index); on a shared index only within held chunks."""
    return engine == "sqlite"


def snapshot(c, keys, rank=0, ns="kv"):
    return c.exists(rank, keys, ns), c.get_page_indices(rank, keys, ns)


# ---- SGLang's flow through a mount ----

@pytest.mark.engines
def test_http_written_pages_are_files_in_the_tree(mount, top_down):
    port = MC.free_port()
    m = mount("--page-size", "64K", "--http", f"127.0.0.1:{port}")
    c = MC.MetaClient(f"http://127.0.0.1:{port}")
    c.initialize(0, 16)
    assert os.path.isdir(m.path(0, "kv"))
    assert H.xattr_int(m.path(0, "kv"), "user.pagefs.capacity") == 16 * PAGE
    keys = [f"{i:064x}_Qwen-Qwen3-32B_0_2" for i in range(3)]
    res = c.reserve_and_allocate_page_indices(0, [[k, ""] for k in keys])
    assert [r[0] for r in res] == [False] * 3
    slots = [r[1] for r in res]
    if top_down:
        assert slots == [15, 14, 13], "new pages come from the top of the pool down"
    assert len(set(slots)) == 3 and all(0 <= i < 16 for i in slots), slots
    data = MC.write_pages(m.backing / "hicache.0.bin", keys, slots, PAGE)
    c.confirm_write(0, [[k, idx] for k, (_, idx) in zip(keys, res)], [])
    for k, (_, idx) in zip(keys, res):
        p = m.path(0, "kv", k)
        assert H.xattr_int(p, "user.pagefs.slot") == idx
        assert os.stat(p).st_size == PAGE
        H.expect_errno(61, os.getxattr, p, "user.pagefs.checksum",
                       what="a page written over HTTP has no checksum before its first read")
        H.assert_bytes_equal(H.read_page(p), data[k], f"page {k} read through the mount")
        assert len(H.xattr_str(p, "user.pagefs.checksum")) == 16, "first read records a checksum"
    assert c.exists(0, keys + ["nope"]) == [True, True, True, False]
    assert c.get_page_indices(0, keys) == slots
    # reserve of an existing key answers [true, its slot]
    assert c.reserve_and_allocate_page_indices(0, [[keys[0], ""]]) == [(True, slots[0])]
    # confirmed keys are durable: still there after a remount
    m.remount()
    c2 = MC.MetaClient(f"http://127.0.0.1:{port}")
    c2.initialize(0, 16)
    assert c2.get_page_indices(0, keys) == slots
    H.assert_bytes_equal(H.read_page(m.path(0, "kv", keys[1])), data[keys[1]], "after remount")
    m.umount()


@pytest.mark.engines
def test_files_written_through_the_mount_are_found_over_http(mount):
    port = MC.free_port()
    m = mount("--page-size", "64K", "--capacity", "1M", "--http", f"127.0.0.1:{port}")
    c = MC.MetaClient(f"http://127.0.0.1:{port}")
    pool = m.pool(0, "kv")
    H.write_page(pool / "fusekey", b"x" * 1000)
    slot = H.xattr_int(pool / "fusekey", "user.pagefs.slot")
    c.initialize(0, 16)  # the pool exists: initialize keeps it
    assert c.exists(0, ["fusekey", "other"]) == [True, False]
    assert c.get_page_indices(0, ["fusekey"]) == [slot]
    c.delete_keys(0, ["fusekey"])
    # the kernel's cached name is dropped by the invalidation thread, a
    # moment after the reply (README: the 3FS metadata protocol)
    assert H.wait_until(lambda: not os.path.exists(pool / "fusekey"), timeout=2.0), (
        "delete_keys removes the file")
    m.umount()


# ---- the protocol's answers ----

@pytest.mark.engines
def test_routes_answer_as_the_python_server(server, top_down):
    s = server()
    c = s.client
    nf = ("Rank 0 namespace 'kv' not initialized. Please call /0/initialize first.")
    for route, body in [("exists", {"keys": ["a"]}), ("get_page_indices", {"keys": ["a"]}),
                        ("reserve_and_allocate_page_indices", {"keys": [["a", ""]]}),
                        ("confirm_write", {}), ("delete_keys", {"keys": []}), ("clear", {})]:
        assert c.raw(f"0/{route}", body) == (404, {"detail": nf}), route
    assert c.raw("7/exists", {"keys": [], "namespace": "mamba"}) == (
        404, {"detail": "Rank 7 namespace 'mamba' not initialized. "
                        "Please call /7/initialize first."})
    assert c.raw("0/initialize", {"num_pages": 8}) == (204, None)
    assert c.raw("0/initialize", {"num_pages": 8, "namespace": "mamba"}) == (204, None)
    assert c.raw("0/exists", {"keys": ["a"]}) == (200, {"exists": [False]})
    st, js = c.raw("0/reserve_and_allocate_page_indices", {"keys": [["a", "p"], ["b", None]]})
    ia, ib = (js["indices"][0][1], js["indices"][1][1]) if st == 200 else (None, None)
    assert (st, js) == (200, {"indices": [[False, ia], [False, ib]]})
    assert ia != ib and 0 <= ia < 8 and 0 <= ib < 8
    if top_down:
        assert (ia, ib) == (7, 6)
    assert c.raw("0/confirm_write", {"written_keys_to_confirm": [["a", ia]],
                                     "pages_to_release": [ib]}) == (204, None)
    assert c.raw("0/get_page_indices", {"keys": ["a", "b"]}) == (200, {"indices": [ia, None]})
    assert c.raw("0/delete_keys", {"keys": ["a", "zz"]}) == (204, None)
    assert c.raw("0/exists", {"keys": ["a"], "namespace": "mamba"}) == (200, {"exists": [False]})
    assert c.raw("0/clear", {"namespace": "mamba"}) == (204, None)
    assert c.raw("0/nothing", {}) == (404, {"detail": "Not Found"})
    assert c.raw("0/exists", None, method="GET")[0] == 405
    # re-initialize with another size: logged, never applied
    assert c.raw("0/initialize", {"num_pages": 2}) == (204, None)
    # ia (deleted "a") is in quarantine; ib was released: it is the top free slot
    (_, ix), = c.reserve_and_allocate_page_indices(0, [["x", ""]])
    assert ix != ia and ix >= 0
    if top_down:
        assert ix == ib


@pytest.mark.engines
def test_bad_requests_get_422_and_change_nothing(server, top_down):
    s = server()
    c = s.client
    c.initialize(0, 8)
    res = c.reserve_and_allocate_page_indices(0, [["a", ""], ["b", ""]])
    c.confirm_write(0, [["a", res[0][1]], ["b", res[1][1]]], [])
    keys = ["a", "b", "c"]
    before = snapshot(c, keys)
    bad = [
        ("0/exists", b"{not json"), ("0/exists", b""), ("0/exists", b"[1,2]"),
        ("0/exists", {}), ("0/exists", {"keys": "a"}), ("0/exists", {"keys": [1]}),
        ("0/exists", {"keys": ["a"], "namespace": 3}),
        ("0/get_page_indices", {"keys": None}),
        ("0/reserve_and_allocate_page_indices", {"keys": ["a"]}),
        ("0/reserve_and_allocate_page_indices", {"keys": [["a"]]}),
        ("0/reserve_and_allocate_page_indices", {"keys": [["c", ""], [5, ""]]}),
        ("0/confirm_write", {"written_keys_to_confirm": [["c", "7"]]}),
        ("0/confirm_write", {"written_keys_to_confirm": [["c", 5]], "pages_to_release": ["x"]}),
        ("0/confirm_write", {"written_keys_to_confirm": "c"}),
        ("0/delete_keys", {"keys": ["a", 1]}), ("0/delete_keys", {}),
        ("0/clear", b"{"), ("0/clear", {"namespace": ["kv"]}),
        ("0/initialize", {}), ("0/initialize", {"num_pages": "8"}),
        ("0/initialize", {"num_pages": 0}), ("0/initialize", {"num_pages": 8, "namespace": "Bad/ns"}),
        ("x/exists", {"keys": []}), ("1.5/clear", {}),
        ("%90/exists", {"keys": []}),  # a rank that is not UTF-8 is echoed as '?'
        ("\u00e9/exists", {"keys": []}),
        # strict JSON, as Python's parser: no comments, no trailing text,
        # UTF-8 only, and a key is never cut at an embedded NUL
        ("0/delete_keys", b'/* c */ {"keys": ["a"]}'), ("0/delete_keys", b'{"keys": ["a"]} x'),
        ("0/delete_keys", b'{"keys": ["\xff"]}'), ("0/delete_keys", b'{"keys": ["a\\u0000b"]}'),
        ("0/delete_keys", b'{"keys": ["a",]}'), ("0/delete_keys", b'{"keys": [NaN]}'),
        ("0/delete_keys", b'{"keys": ["a"]}\x0b'), ("0/delete_keys", b'\x0c{"keys": ["a"]}'),
        ("0/delete_keys", b'{"keys": ["a"]}"x'), ("0/delete_keys", b'{"keys": ["a"]}\x00'),
        # a NUL or control byte as it is inside a string, and \u0000 in a field name
        ("0/delete_keys", b'{"keys": ["a\x00b"]}'), ("0/delete_keys", b'{"keys": ["a\x01b"]}'),
        ("0/delete_keys", b'{"ke\\u0000ys": ["a"], "keys": ["b"]}'),
    ]
    for route, body in bad:
        st, js = c.raw(route, body)
        assert st == 422, f"{route} {body!r}: {st} {js}"
        assert isinstance(js["detail"], list) and js["detail"][0]["loc"], (route, js)
    st, js = c.raw("0/exists", b'{"keys": ["a", ')
    assert (st, js["detail"][0]["type"], js["detail"][0]["loc"]) == (422, "json_invalid", ["body", 15])
    st, js = c.raw("0/exists", b'{"keys": 5, "keys": ["a", "zz"]}')
    assert (st, js) == (200, {"exists": [True, False]}), "a repeated field: the last one counts"
    st, js = c.raw("0/exists", {"keys": ["k"] * 1000001})
    assert st == 413, "a huge batch is refused"
    assert snapshot(c, keys) == before
    (_, ic), = c.reserve_and_allocate_page_indices(0, [["c", ""]])
    assert ic >= 0 and ic not in (res[0][1], res[1][1])
    if top_down:
        assert ic == 5, "no bad request took a slot"


# ---- where pagefs answers safely and the Python server does not ----

@pytest.mark.engines
def test_repeated_key_in_a_batch_gets_one_slot(server, top_down):
    c = server().client
    c.initialize(0, 8)
    res = c.reserve_and_allocate_page_indices(0, [["a", ""], ["b", ""], ["a", ""]])
    assert res == [(False, res[0][1]), (False, res[1][1]), (False, res[0][1])]
    assert res[0][1] != res[1][1] and min(res)[1] >= 0
    if top_down:
        assert res == [(False, 7), (False, 6), (False, 7)]


@pytest.mark.engines
def test_exhausted_pool_answers_minus_one_and_leaks_nothing(server, top_down):
    c = server().client
    c.initialize(0, 4)
    res = c.reserve_and_allocate_page_indices(0, [[f"k{i}", ""] for i in range(6)])
    got = [r[1] for r in res]
    assert sorted(got[:4]) == [0, 1, 2, 3] and got[4:] == [-1, -1], got
    if top_down:
        assert got == [3, 2, 1, 0, -1, -1]
    c.confirm_write(0, [], got[:4])
    res = c.reserve_and_allocate_page_indices(0, [[f"k{i}", ""] for i in range(4)])
    assert sorted(r[1] for r in res) == [0, 1, 2, 3], "released slots are all free again"


@pytest.mark.engines
def test_release_of_a_mapped_slot_is_ignored(server):
    c = server().client
    c.initialize(0, 8)
    (_, a), = c.reserve_and_allocate_page_indices(0, [["a", ""]])
    c.confirm_write(0, [["a", a]], [])
    c.confirm_write(0, [], [a])
    assert c.get_page_indices(0, ["a"]) == [a]
    res = c.reserve_and_allocate_page_indices(0, [["b", ""], ["c", ""]])
    assert a not in [r[1] for r in res], "never two keys on one slot"


@pytest.mark.engines
def test_confirm_of_an_unreserved_slot_is_ignored(server):
    c = server().client
    c.initialize(0, 8)
    c.confirm_write(0, [["x", 3]], [])
    assert c.exists(0, ["x"]) == [False]
    (_, a), = c.reserve_and_allocate_page_indices(0, [["a", ""]])
    c.confirm_write(0, [["a", a]], [])
    c.confirm_write(0, [["b", a]], [])  # a slot a key maps: not reserved
    assert c.get_page_indices(0, ["a", "b"]) == [a, None]


def http_workers(pid):
    """The threads of process pid that serve HTTP requests (libmicrohttpd
    names its one polling thread MHD-single, those of a pool MHD-worker)."""
    names = []
    for t in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{t}/comm") as f:
            names.append(f.read().strip())
    return sum(n in ("MHD-single", "MHD-worker") for n in names)


def settled_workers(pid, expected):
    """http_workers once it has reached expected and stayed there for
    0.3 s: each thread names itself after it starts."""
    H.wait_until(lambda: http_workers(pid) == expected, timeout=5)
    time.sleep(0.3)
    return http_workers(pid)


@pytest.mark.engines
@pytest.mark.skipif(bool(H.WRAPPER), reason="valgrind runs the threads under its own names")
def test_one_worker_thread_on_sqlite_two_on_postgresql_unless_threads_says(server, engine):
    s = server()
    want = 2 if engine == "postgres" else 1
    assert settled_workers(s.proc.pid, want) == want
    s.client.initialize(0, 8)
    (_, a), = s.client.reserve_and_allocate_page_indices(0, [["a", ""]])
    s.client.confirm_write(0, [["a", a]], [])
    assert s.client.get_page_indices(0, ["a"]) == [a]
    assert settled_workers(server("--threads", "3").proc.pid, 3) == 3


FAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"  # Debian's faketime


def stored_atime(index, key):
    """The atime the index holds for key (the daemon is stopped)."""
    return indexdb.page(index, key)["atime"]


def built_with_tsan():
    with open(H.PAGEFS_BIN, "rb") as f:
        return b"libtsan.so" in f.read()


@pytest.mark.timeout_s(120)
@pytest.mark.skipif(bool(H.WRAPPER), reason="libfaketime is preloaded; valgrind preloads its own")
@pytest.mark.skipif(built_with_tsan(), reason="libfaketime wraps pthread_cond_timedwait, which "
                    "ThreadSanitizer then reports as a mutex locked twice")
def test_a_lookup_reaches_the_index_once_a_minute(tmp_root):
    # A get_page_indices refreshes a key's recency in memory at once, but
    # notes it for the index only when its atime moves to another minute
    # (a FUSE use: another second): a busy key costs the index one write a
    # minute, and a restart forgets at most a minute of its recency. The
    # daemon runs on a clock the test moves (libfaketime, re-reading its
    # offset at every call), 5 s past a minute at the start.
    tmp_root = os.path.join(tmp_root, "minute")
    os.makedirs(tmp_root)
    clock = os.path.join(tmp_root, "clock")
    offset = 60 - time.time() % 60 + 5
    index = os.path.join(tmp_root, "index.db")
    env = {"LD_PRELOAD": FAKETIME, "FAKETIME_TIMESTAMP_FILE": clock, "FAKETIME_NO_CACHE": "1",
           "FAKETIME_DONT_FAKE_MONOTONIC": "1",
           "ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"}

    def run(seconds, step):
        with open(clock, "w") as f:
            f.write(f"+{offset + seconds:.3f}\n")
        s = MC.Server(tmp_root, "--page-size", "64K", meta=f"sqlite:{index}", env=env)
        try:
            step(s.client)
        finally:
            assert s.stop() == 0, f"serve-meta did not exit cleanly:\n{s.log_text()}"
            reports = s.sanitizer_reports()
            assert not reports, "sanitizer reports:\n" + "\n".join(reports)[:20000]

    def write(c):
        c.initialize(0, 4)
        (_, a), = c.reserve_and_allocate_page_indices(0, [["a", ""]])
        c.confirm_write(0, [["a", a]], [])

    def get(c):
        assert c.get_page_indices(0, ["a"])[0] is not None

    run(0, write)
    confirmed = stored_atime(index, "a")
    assert confirmed // 60_000_000_000 == (time.time() + offset) // 60, "the clock is faked"
    time.sleep(1.2)  # another second, the same minute
    run(0, get)
    assert stored_atime(index, "a") == confirmed, "a lookup in the same minute is not written"
    run(60, get)  # the next minute
    later = stored_atime(index, "a")
    assert later // 60_000_000_000 == confirmed // 60_000_000_000 + 1, (confirmed, later)


@pytest.mark.timeout_s(60)
@pytest.mark.engines
def test_unconfirmed_reservation_expires(server):
    c = server("--reserve-timeout", "1").client
    c.initialize(0, 4)
    (_, a), = c.reserve_and_allocate_page_indices(0, [["a", ""]])
    time.sleep(1.6)
    c.confirm_write(0, [["a", a]], [])
    assert c.exists(0, ["a"]) == [False], "a confirm after the timeout is ignored"
    # the slot is quarantined, then free: after ~6 s all 4 slots can be had
    time.sleep(6.5)
    res = c.reserve_and_allocate_page_indices(0, [[f"k{i}", ""] for i in range(4)])
    assert sorted(r[1] for r in res) == [0, 1, 2, 3]


@pytest.mark.timeout_s(60)
def test_a_full_pool_keeps_its_pages_idle_and_turns_over_as_writers_ask(server):
    """Eviction follows demand (README, "Eviction and deletion have a
    quarantine"): idle, a full pool keeps all but its headroom; a writer
    refused slots (-1) makes the evictor free one page per refused key,
    which it gets after the quarantine (6 s) instead of one page per
    quarantine. (The shared-index case: test_http_multinode.py.)"""
    c = server().client
    c.initialize(0, 16)
    old = [f"old{i}" for i in range(16)]
    res = c.reserve_and_allocate_page_indices(0, [[k, ""] for k in old])
    assert all(s >= 0 for _, s in res)
    c.confirm_write(0, [[k, s] for k, (_, s) in zip(old, res)], [])
    time.sleep(2.0)
    kept = sum(c.exists(0, old))
    assert kept >= 14, f"an idle full pool of 16 kept {kept} pages (headroom: 1)"
    written, n, t0 = [], 0, time.monotonic()
    while time.monotonic() - t0 < 15 and len(written) < 12:
        k = f"new{n}"
        n += 1
        (_, s), = c.reserve_and_allocate_page_indices(0, [[k, ""]])
        if s < 0:
            time.sleep(0.1)
            continue
        c.confirm_write(0, [[k, s]], [])
        written.append(k)
    assert len(written) >= 12, (
        f"a writer refused {n - len(written)} times got {len(written)} slots in 15 s: "
        "the evictor did not follow its demand")
    idx = [i for i in c.get_page_indices(0, old + written) if i is not None]
    assert len(idx) == len(set(idx)) and len(idx) <= 16, f"page indices: {sorted(idx)}"


@pytest.mark.timeout_s(60)
@pytest.mark.engines
def test_deleted_slot_is_quarantined_longer_than_the_client_timeout(server, top_down):
    c = server().client
    c.initialize(0, 8)
    (_, a), = c.reserve_and_allocate_page_indices(0, [["a", ""]])
    c.confirm_write(0, [["a", a]], [])
    t0 = time.monotonic()
    c.delete_keys(0, ["a"])
    got = []
    while time.monotonic() - t0 < 5.0:
        (_, s), = c.reserve_and_allocate_page_indices(0, [[f"n{len(got)}", ""]])
        got.append(s)
        c.confirm_write(0, [], [s])
        time.sleep(0.5)
    assert a not in got, f"slot {a} was handed out again within 5 s: {got}"
    time.sleep(1.5)
    if top_down:
        (_, s), = c.reserve_and_allocate_page_indices(0, [["late", ""]])
        assert s == a, "after the quarantine the top slot is free again"
        return
    # shared index: back once its grace period is over too (a heartbeat)
    deadline = time.monotonic() + 3
    while True:
        res = c.reserve_and_allocate_page_indices(0, [[f"late{j}", ""] for j in range(8)])
        c.confirm_write(0, [], [s for _, s in res if s >= 0])
        if a in [s for _, s in res]:
            break
        assert time.monotonic() < deadline, f"slot {a} did not come back after the quarantine"
        time.sleep(0.1)


@pytest.mark.engines
def test_slots_fuse_frees_in_a_protocol_pool_wait_out_the_quarantine(mount):
    """An HTTP client reads a key's slot straight from the data file, so a
    slot freed through the mount (unlink, the old slot of an O_TRUNC
    rewrite, a page renamed over, a FUSE writer's eviction) must not take
    another page's bytes within SGLang's 5 s client timeout either, as one
    freed over HTTP does not: FUSE writes took such a slot at once. A FUSE
    write into the full pool gets ENOSPC, as an HTTP writer gets -1, and
    the evictor makes room through the quarantine."""
    port = MC.free_port()
    m = mount("--page-size", "64K", "--http", f"127.0.0.1:{port}")
    c = MC.MetaClient(f"http://127.0.0.1:{port}")
    c.initialize(5, 16)
    pool = m.path(5, "kv")
    data = m.backing / "hicache.5.bin"
    keys = ["unlinked", "rewritten", "renamed-over"]
    res = c.reserve_and_allocate_page_indices(5, [[k, ""] for k in keys])
    slots = [s for _, s in res]
    old = MC.write_pages(data, keys, slots, PAGE)
    c.confirm_write(5, [[k, s] for k, s in zip(keys, slots)], [])
    assert c.get_page_indices(5, keys) == slots  # a client now holds these
    os.unlink(pool / "unlinked")
    H.write_page(pool / "rewritten", b"R" * 100)  # O_TRUNC: a new slot
    H.write_page(pool / "tmp", b"T" * 100)
    os.rename(pool / "tmp", pool / "renamed-over")
    for i in range(11):  # the pool's free slots
        H.write_page(pool / f"new{i}", bytes([i]) * PAGE)
    # one more: no slot is free, and the evictor's victims wait out the
    # quarantine too (a victim's slot went straight to the FUSE writer)
    H.expect_errno(errno.ENOSPC, H.write_page, pool / "new11", bytes([11]) * PAGE)
    with open(data, "rb") as f:
        for k, s in zip(keys, slots):
            f.seek(s * PAGE)
            assert f.read(PAGE) == old[k], f"slot {s} of {k} was given to another page at once"
    taken = {H.xattr_int(pool / f"new{i}", "user.pagefs.slot") for i in range(12)
             if os.path.exists(pool / f"new{i}")}
    assert not taken & set(slots), (taken, slots)
    m.umount()


@pytest.mark.timeout_s(90)
@pytest.mark.engines
def test_evictor_keeps_room_and_never_takes_a_pinned_page(mount):
    port = MC.free_port()
    m = mount("--page-size", "64K", "--http", f"127.0.0.1:{port}")
    c = MC.MetaClient(f"http://127.0.0.1:{port}")
    c.initialize(0, 8)
    fd = None
    written = []
    for i in range(8):
        (_, s), = c.reserve_and_allocate_page_indices(0, [[f"k{i}", ""]])
        if s < 0:
            time.sleep(0.3)
            continue
        c.confirm_write(0, [[f"k{i}", s]], [])
        written.append(f"k{i}")
        if i == 0:
            fd = os.open(m.path(0, "kv", "k0"), os.O_RDONLY)  # pins k0's slot
        time.sleep(0.3)
    try:
        time.sleep(0.5)
        ex = c.exists(0, written)
        assert ex[0], "a page a FUSE reader has open is never evicted"
        assert not all(ex), "the evictor freed room in the full pool"
        st = m.stats()
        assert H.counter(st, "evictions") >= 1
    finally:
        os.close(fd)
    m.umount()


@pytest.mark.engines
def test_clear_removes_every_key(server):
    c = server().client
    c.initialize(0, 8)
    res = c.reserve_and_allocate_page_indices(0, [["a", ""], ["b", ""]])
    c.confirm_write(0, [["a", res[0][1]], ["b", res[1][1]]], [])
    c.clear(0)
    assert c.exists(0, ["a", "b"]) == [False, False]


@pytest.mark.timeout_s(120)
@pytest.mark.engines
def test_concurrent_clients_never_share_a_slot(server):
    s = server()
    s.client.initialize(0, 4096)
    errors = []
    results = {}

    def worker(t):
        try:
            c = MC.MetaClient(s.url)
            for b in range(8):
                keys = [f"t{t}-b{b}-{i}" for i in range(32)]
                res = c.reserve_and_allocate_page_indices(0, [[k, ""] for k in keys])
                c.confirm_write(0, [[k, r[1]] for k, r in zip(keys, res)], [])
                for k, r in zip(keys, res):
                    results[k] = r[1]
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    keys = sorted(results)
    assert len(set(results.values())) == len(keys) == 8 * 8 * 32
    got = s.client.get_page_indices(0, keys)
    assert got == [results[k] for k in keys]


@pytest.mark.engines
def test_page_confirmed_over_http_appears_where_a_miss_was_cached(mount):
    """A stat miss through the mount is cached by the kernel (negative
    entry); a key confirmed over HTTP afterwards must still show up as a
    file, because the daemon invalidates that name."""
    port = MC.free_port()
    m = mount("--page-size", "64K", "--http", f"127.0.0.1:{port}")
    c = MC.MetaClient(f"http://127.0.0.1:{port}")
    c.initialize(0, 16)
    key = "ab" * 32 + "_Qwen-Qwen3-32B_0_2"
    p = m.path(0, "kv", key)
    assert not os.path.exists(p), "no such page yet"
    assert not os.path.exists(p), "the miss is now cached by the kernel"
    (_, idx), = c.reserve_and_allocate_page_indices(0, [[key, ""]])
    data = MC.write_pages(m.backing / "hicache.0.bin", [key], [idx], PAGE)[key]
    c.confirm_write(0, [[key, idx]], [])
    deadline = time.monotonic() + 2
    while not os.path.exists(p) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert os.path.exists(p), "a page confirmed over HTTP stays invisible behind a cached miss"
    H.assert_bytes_equal(H.read_page(p), data, "page confirmed over HTTP")
    c.delete_keys(0, [key])
    deadline = time.monotonic() + 2
    while os.path.exists(p) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(p), "a key deleted over HTTP stays visible through the mount"
    m.umount()


def test_422_echoes_the_offending_value_as_sent(server):
    """The input of a validation answer is the value the client sent, whole:
    nested objects and arrays, numbers, booleans, null and escapes."""
    c = server().client
    c.initialize(0, 8)
    value = {"a": [1, -2.5, 1e3, True, False, None, "x\"y\\z\u00e9\U0001f600", {"b": [], "c": {}}],
             "": [[[]]], "n": 12345678901234567890}
    st, js = c.raw("0/exists", {"keys": value})
    assert st == 422
    assert js["detail"][0]["type"] == "list_type"
    assert js["detail"][0]["input"] == value


@pytest.mark.engines
def test_a_key_confirmed_twice_in_one_batch_keeps_the_last_slot(server):
    s = server()
    c = s.client
    c.initialize(0, 64)
    # (two reservations of k, as two writers of it would make: a confirm
    # must name the key a slot was reserved for)
    (_, a), = c.reserve_and_allocate_page_indices(0, [["k", ""]])
    (_, b), (_, z) = c.reserve_and_allocate_page_indices(0, [["k", ""], ["other", ""]])
    assert len({a, b, z}) == 3
    c.confirm_write(0, [["k", a], ["other", z], ["k", b]], [])
    assert c.get_page_indices(0, ["k", "other"]) == [b, z]
    # the index holds the same: after a restart of the server
    assert s.stop() == 0
    s2 = server(meta=s.meta, backing=s.backing)
    s2.client.initialize(0, 64)
    assert s2.client.get_page_indices(0, ["k", "other"]) == [b, z]


def crashed_server(tmp_root, *opts):
    """A serve-meta killed with SIGKILL after reserving keys k0..k3 of a
    16-page pool and confirming k0: (its Server, the slots of k1..k3)."""
    d = os.path.join(tmp_root, f"crashed-{time.monotonic_ns()}")
    os.makedirs(d)
    a = MC.Server(d, "--page-size", "64K", *opts)
    try:
        a.client.initialize(0, 16)
        res = a.client.reserve_and_allocate_page_indices(0, [[f"k{i}", ""] for i in range(4)])
        slots = [s for _, s in res]
        assert all(s >= 0 for s in slots), res
        a.client.confirm_write(0, [["k0", slots[0]]], [])
    finally:
        a.proc.kill()
        a.proc.wait(30)
        a.log.close()
    return a, slots[1:]


@pytest.mark.timeout_s(120)
def test_slots_reserved_before_a_crash_are_held_after_the_restart(server, tmp_root):
    """An HTTP client writes the slot it reserved straight into the data
    file, maybe after the daemon that reserved it crashed: the daemon
    after it must not hand that slot to another key (or FUSE writer) until
    the reservation could have ended (--reserve-timeout, then the
    quarantine). It gave it to the next key at once, whose page then held
    the late writer's bytes."""
    a, reserved = crashed_server(tmp_root, "--reserve-timeout", "2")
    t0 = time.monotonic()
    b = server("--reserve-timeout", "2", backing=a.backing, meta=a.meta)
    assert b.client.reserve_and_allocate_page_indices(0, [["n0", ""]]) == [(False, -1)], \
        "every free slot is held after the crash"
    assert "held for" in b.log_text(), b.log_text()
    seen, n = [], 0
    while not set(seen) & set(reserved):
        assert time.monotonic() - t0 < 40, f"the held slots never came back: {seen}"
        n += 1
        res = b.client.reserve_and_allocate_page_indices(0, [[f"n{n}.{j}", ""] for j in range(16)])
        got = [s for _, s in res if s >= 0]  # (k0's slot, once the evictor freed it)
        seen += got
        b.client.confirm_write(0, [], got)
        time.sleep(0.25)
    elapsed = time.monotonic() - t0
    assert elapsed >= 2 + 6, f"a slot reserved before the crash came back after {elapsed:.1f} s"


def test_a_clean_stop_with_no_reservation_outstanding_holds_nothing(server):
    a = server()
    a.client.initialize(0, 16)
    res = a.client.reserve_and_allocate_page_indices(0, [["k0", ""], ["k1", ""]])
    a.client.confirm_write(0, [["k0", res[0][1]]], [res[1][1]])
    assert a.stop() == 0
    b = server(backing=a.backing, meta=a.meta)
    (_, s), = b.client.reserve_and_allocate_page_indices(0, [["n", ""]])
    assert s >= 0, "a clean stop with every reservation confirmed or released holds no slot"
    assert "held for" not in b.log_text()


def test_a_clean_stop_with_a_reservation_outstanding_holds_the_free_slots(server):
    a = server()
    a.client.initialize(0, 16)
    a.client.reserve_and_allocate_page_indices(0, [["k0", ""]])  # never confirmed
    assert a.stop() == 0
    b = server(backing=a.backing, meta=a.meta)
    assert b.client.reserve_and_allocate_page_indices(0, [["n", ""]]) == [(False, -1)]
    assert "held for" in b.log_text(), b.log_text()


@pytest.mark.engines
def test_a_pool_whose_data_file_cannot_be_made_is_refused_and_left_out(server, tmp_root):
    """num_pages whose data file the backing filesystem cannot hold: 409,
    and no pool is left behind, so that initialize with fewer pages makes
    it. (On a shared index the pool row now goes in before the file is
    made, so the row is taken out again.)"""
    big = 2_000_000 * (16 << 20)
    probe = os.path.join(tmp_root, f"efbig-{time.monotonic_ns()}")
    with open(probe, "wb") as f:
        try:
            os.ftruncate(f.fileno(), big)
            pytest.skip("this filesystem holds a 32 TB file (not ext4)")
        except OSError as e:
            assert e.errno == errno.EFBIG, e
    os.unlink(probe)
    s = server("--page-size", "16M")
    with pytest.raises(requests.HTTPError) as e:
        s.client.initialize(0, 2_000_000)
    r = e.value.response
    assert r.status_code == 409 and "fewer pages" in r.json()["detail"], r.text
    s.client.initialize(0, 4)
    assert s.client.reserve_and_allocate_page_indices(0, [["k", ""]])[0][1] >= 0
    assert os.path.getsize(os.path.join(s.backing, "hicache.0.bin")) == 4 * (16 << 20)


def test_the_hold_survives_the_daemons_after_the_crash(server, tmp_root):
    """The daemon after a crash holds the pool's free slots; a clean stop
    of it, or a shorter --reserve-timeout of its own, must not shorten the
    hold the crashed daemon's reservations need: the record was cleared,
    or lowered, by the first reservation the holding daemon refused (found
    by a probe)."""
    a, reserved = crashed_server(tmp_root, "--reserve-timeout", "30")
    b = server("--reserve-timeout", "2", backing=a.backing, meta=a.meta)
    assert b.client.reserve_and_allocate_page_indices(0, [["n", ""]]) == [(False, -1)]
    assert b.stop() == 0
    c = server("--reserve-timeout", "2", backing=a.backing, meta=a.meta)
    assert c.client.reserve_and_allocate_page_indices(0, [["n", ""]]) == [(False, -1)], \
        "the pool was given back after the daemon that held it stopped"
    held = [int(x) for x in re.findall(r"held for (\d+) s", c.log_text())]
    assert held and held[0] >= 30, c.log_text()


def test_a_slot_in_quarantine_stays_out_after_a_restart(server):
    """A client that looked a key up may read its slot for 5 s: a delete
    followed at once by a restart handed that slot to the next key, whose
    bytes the client then read."""
    a = server()
    a.client.initialize(0, 16)
    (_, s), = a.client.reserve_and_allocate_page_indices(0, [["old", ""]])
    a.client.confirm_write(0, [["old", s]], [])
    assert a.client.get_page_indices(0, ["old"]) == [s]  # a client holds s now
    a.client.delete_keys(0, ["old"])
    assert a.stop() == 0
    b = server(backing=a.backing, meta=a.meta)
    got = [i for _, i in b.client.reserve_and_allocate_page_indices(0, [[f"n{j}", ""] for j in range(16)])]
    assert s not in got, f"slot {s}, deleted a moment before the restart, went to a new key: {got}"
