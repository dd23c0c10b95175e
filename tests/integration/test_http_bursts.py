"""A full protocol pool under bursts of refused keys (docs/KEYS.md,
"Eviction under bursts"): eviction serves demand and does not multiply
it. Slots in the quarantine are supply on its way, a key refused again
adds no demand, a refused key gets a slot once one leaves the quarantine;
the restart hold is supply too, and its slots are not "used". Last, the
hit ratio of a replayed Zipf-like trace against an ideal LRU of the same
capacity on the same trace.

Most tests run serve-meta on a clock that runs SPEED times faster
(libfaketime, as test_http_protocol.py does), so that the 6 s quarantine
passes in 0.6 s: times in comments are the daemon's."""
import collections
import errno
import os
import random
import signal
import time

import pytest

import metaclient as MC
import pagefs_helpers as H
from test_http_protocol import FAKETIME, built_with_tsan

SPEED = 10

needs_faketime = [
    pytest.mark.skipif(bool(H.WRAPPER), reason="libfaketime is preloaded; valgrind preloads its own"),
    pytest.mark.skipif(built_with_tsan(), reason="libfaketime wraps pthread_cond_timedwait, which "
                       "ThreadSanitizer then reports as a mutex locked twice"),
]


def fast_env(speed):
    return {"LD_PRELOAD": FAKETIME, "FAKETIME": f"+0 x{speed}", "FAKETIME_NO_CACHE": "1",
            "ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"}


@pytest.fixture
def server(tmp_root, request, engine):
    """server(*opts, speed=None) -> a serve-meta on a new index of the
    test's engine, on a clock `speed` times faster when speed is given."""
    servers, schemas = [], []

    def start(*opts, speed=None, **kw):
        d = os.path.join(tmp_root, f"{request.node.name[:50]}-{time.monotonic_ns()}")
        os.makedirs(d)
        if engine == "postgres" and "meta" not in kw:
            schema, kw["meta"] = H.new_pg_index("bursts")
            schemas.append(schema)
        s = MC.Server(d, "--page-size", "64K", *opts, env=fast_env(speed) if speed else None, **kw)
        servers.append(s)
        return s

    yield start
    for s in servers:
        assert s.stop() == 0, f"serve-meta did not exit cleanly:\n{s.log_text()}"
        reports = s.sanitizer_reports()
        assert not reports, "sanitizer reports from serve-meta:\n" + "\n".join(reports)[:20000]
    for schema in schemas:
        H.psql(f"SET client_min_messages=warning; DROP SCHEMA {schema} CASCADE")


def fill(c, keys):
    res = c.reserve_and_allocate_page_indices(0, [[k, ""] for k in keys])
    assert all(s >= 0 for _, s in res), res
    c.confirm_write(0, [[k, s] for k, (_, s) in zip(keys, res)], [])


# ---- bursts ----

def skip_without_faketime():
    for mark in needs_faketime:
        if mark.args[0]:
            pytest.skip(mark.kwargs["reason"])


@pytest.mark.timeout_s(90)
@pytest.mark.engines
def test_one_key_retried_in_a_full_pool_costs_it_one_page(server):
    """SGLang's server keeps 7 of 8 pages for one new key; pagefs keeps 7
    until the key's slot is back, then 6 (its 8-page pool keeps a page of
    headroom). Every retry evicted another page: none was left."""
    skip_without_faketime()
    c = server(speed=SPEED).client
    c.initialize(0, 8)
    old = [f"old{i}" for i in range(8)]
    fill(c, old)
    tries, least, slot, t0 = 0, 8, -1, time.monotonic()
    while slot < 0:
        assert time.monotonic() - t0 < 30, f"the key got no slot in {tries} tries"
        (_, slot), = c.reserve_and_allocate_page_indices(0, [["new", ""]])
        tries += 1
        least = min(least, sum(c.exists(0, old)))
        time.sleep(0.5 / SPEED)
    waited = (time.monotonic() - t0) * SPEED
    c.confirm_write(0, [["new", slot]], [])
    live = sum(c.exists(0, old))
    print(f"8-page pool, one key retried {tries} times: {live} of 8 earlier keys live "
          f"after its slot came back (least while refused: {least}), after {waited:.1f} s")
    assert tries >= 4, f"the key was refused only {tries - 1} times: no burst was tested"
    assert waited < 2 * 6, f"the key got a slot {waited:.1f} s after it asked (quarantine: 6 s)"
    assert least >= 6 and live >= 6, (
        f"{live} of 8 earlier keys live after one new key's slot came back ({least} at the "
        f"least while it was refused {tries - 1} times): each retry evicted a page")


@pytest.mark.timeout_s(90)
@pytest.mark.engines
def test_four_keys_retried_in_a_full_pool_cost_it_four_pages(server):
    skip_without_faketime()
    c = server(speed=SPEED).client
    c.initialize(0, 16)
    old = [f"old{i}" for i in range(16)]
    fill(c, old)
    new = [f"new{i}" for i in range(4)]
    got, t0 = {}, time.monotonic()
    while time.monotonic() - t0 < 3.0 / SPEED:  # 3 s, every 0.2 s
        res = c.reserve_and_allocate_page_indices(0, [[k, ""] for k in new if k not in got])
        got.update({k: s for k, (_, s) in zip([k for k in new if k not in got], res) if s >= 0})
        time.sleep(0.2 / SPEED)
    during = sum(c.exists(0, old))
    while len(got) < 4:  # until their slots left the quarantine
        assert time.monotonic() - t0 < 30, f"refused keys got no slot: {got}"
        todo = [k for k in new if k not in got]
        res = c.reserve_and_allocate_page_indices(0, [[k, ""] for k in todo])
        got.update({k: s for k, (_, s) in zip(todo, res) if s >= 0})
        time.sleep(0.2 / SPEED)
    c.confirm_write(0, [[k, s] for k, s in got.items()], [])
    after = sum(c.exists(0, old))
    print(f"16-page pool, 4 keys retried for 3 s: {during} of 16 earlier keys live during the "
          f"burst, {after} once the 4 had slots")
    assert during >= 11, f"{during} of 16 earlier keys live under a burst of 4 retried keys"
    assert after >= 11, f"{after} of 16 earlier keys live once the 4 keys had their slots"


@pytest.mark.timeout_s(90)
@pytest.mark.engines
def test_pages_a_lookup_just_touched_outlive_colder_ones_under_a_burst(server):
    """get_page_indices makes its keys the most recently used: a burst
    evicts colder pages first, so the keys a client just looked up are
    there for its next request."""
    skip_without_faketime()
    c = server(speed=SPEED).client
    c.initialize(0, 16)
    old = [f"old{i}" for i in range(16)]
    fill(c, old)
    assert H.wait_until(lambda: sum(c.exists(0, old)) == 15, timeout=5), "the headroom page"
    live = [k for k, e in zip(old, c.exists(0, old)) if e]
    touched = live[:4]  # the coldest pages
    assert all(i is not None for i in c.get_page_indices(0, touched))
    new = [f"new{i}" for i in range(8)]
    for _ in range(5):
        c.reserve_and_allocate_page_indices(0, [[k, ""] for k in new])
        time.sleep(0.2 / SPEED)
    after = dict(zip(old, c.exists(0, old)))
    gone = [k for k in live if not after[k]]
    print(f"16-page pool, 8 keys refused 5 times after a lookup of the 4 coldest: "
          f"{len(gone)} pages evicted, {sum(after[k] for k in touched)} of the 4 kept")
    assert all(after[k] for k in touched), f"a page a lookup just touched was evicted: {gone}"
    assert gone == [k for k in live if k not in touched][:len(gone)], (
        f"evicted {gone}, not the least recently used")
    assert len(gone) <= 8, f"8 refused keys (5 tries each) evicted {len(gone)} pages"


@pytest.mark.timeout_s(120)
def test_a_seeded_trace_keeps_the_pool_and_lookups_agree(server):
    """400 steps of reserve/confirm/get/exists/delete/clear over 48 keys in
    16 pages, 0.05 s apart: far more new keys than the quarantine lets
    through, so most are refused, but the pool
    keeps pages live throughout instead of ending empty, and a key
    get_page_indices just found (its most recent use) is still there for
    the exists that follows."""
    skip_without_faketime()
    c = server(speed=SPEED).client
    c.initialize(0, 16)
    rng = random.Random(23)
    keys = [f"key{i}" for i in range(48)]
    asked = refused = 0
    disagreements, live = [], []
    for step in range(400):
        op = rng.random()
        pick = rng.sample(keys, rng.randint(1, 4))
        if step == 50:
            c.clear(0)
        elif op < 0.35:
            res = c.reserve_and_allocate_page_indices(0, [[k, ""] for k in pick])
            new = [(k, s) for k, (e, s) in zip(pick, res) if not e]
            asked += len(new)
            refused += sum(1 for _, s in new if s < 0)
            take = [(k, s) for k, s in new if s >= 0]
            keep = [(k, s) for k, s in take if rng.random() < 0.9]
            c.confirm_write(0, [[k, s] for k, s in keep],
                            [s for k, s in take if (k, s) not in keep])
        elif op < 0.65:
            idx = c.get_page_indices(0, pick)
            ex = c.exists(0, pick)
            if ex != [i is not None for i in idx]:
                disagreements.append((step, pick, idx, ex))
        elif op < 0.95:
            c.exists(0, pick)
        else:
            c.delete_keys(0, pick[:2])
        if step >= 200 and step % 10 == 0:
            live.append(sum(c.exists(0, keys)))
        time.sleep(0.05 / SPEED)
    live.append(sum(c.exists(0, keys)))
    print(f"seeded trace: {refused} of {asked} new keys refused; live keys from step 200 on, "
          f"every 10 steps: {live}")
    assert not disagreements, f"exists and get_page_indices disagreed: {disagreements[:3]}"
    assert min(live) >= 4, f"the 16-page pool was left with {min(live)} live keys: {live}"


def test_a_fuse_writer_retrying_in_a_full_protocol_pool_costs_it_one_page(mount):
    """A FUSE writer refused ENOSPC in a pool HTTP clients read is a key
    owed a slot too, counted once however often it retries."""
    port = MC.free_port()
    m = mount("--page-size", "64K", "--http", f"127.0.0.1:{port}")
    c = MC.MetaClient(f"http://127.0.0.1:{port}")
    c.initialize(0, 16)
    old = [f"old{i}" for i in range(16)]
    fill(c, old)
    for _ in range(10):
        H.expect_errno(errno.ENOSPC, H.write_page, m.path(0, "kv", "fuse-new"), b"x" * 100)
        time.sleep(0.05)
    time.sleep(0.5)  # the evictor's passes
    live = sum(c.exists(0, old))
    print(f"16-page pool, one FUSE writer refused 10 times: {live} of 16 earlier keys live")
    assert live >= 14, f"{live} of 16 pages live after one FUSE writer was refused 10 times"
    m.umount()


# ---- the restart hold ----

def crash_with_reservations(tmp_root, confirm_first):
    """A serve-meta (--reserve-timeout 30) killed with SIGKILL after reserving
    k0..k3 of a 16-page pool, k0 confirmed if confirm_first: its Server."""
    d = os.path.join(tmp_root, f"held-{time.monotonic_ns()}")
    os.makedirs(d)
    a = MC.Server(d, "--page-size", "64K", "--reserve-timeout", "30")
    try:
        a.client.initialize(0, 16)
        res = a.client.reserve_and_allocate_page_indices(0, [[f"k{i}", ""] for i in range(4)])
        assert all(s >= 0 for _, s in res), res
        if confirm_first:
            a.client.confirm_write(0, [["k0", res[0][1]]], [])
    finally:
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait(30)
        a.log.close()
    return a


def test_held_slots_are_free_in_status_and_df_and_do_not_block_rmdir(mount, tmp_root):
    a = crash_with_reservations(tmp_root, confirm_first=False)
    m = mount("--page-size", "64K", backing=a.backing, meta=a.meta)
    pool = m.path(0, "kv")
    assert "held for" in m.log_tail(), m.log_tail()
    assert H.xattr_int(pool, "user.pagefs.used_slots") == 0, "held slots hold no page"
    st = m.stats()
    assert H.counter(st, "free_slots") == 16, st
    free, total = m.statvfs_free_total()
    assert free == total, f"df: {free} of {total} bytes free in a pool holding no page"
    os.rmdir(pool)  # ENOTEMPTY before: it holds no page
    assert not os.path.exists(pool)
    m.umount()


def test_keys_refused_during_the_hold_evict_no_page(server, tmp_root):
    a = crash_with_reservations(tmp_root, confirm_first=True)
    b = server(backing=a.backing, meta=a.meta)
    c = b.client
    t0 = time.monotonic()
    while time.monotonic() - t0 < 2.0:
        res = c.reserve_and_allocate_page_indices(0, [[f"n{i}", ""] for i in range(3)])
        assert [s for _, s in res] == [-1, -1, -1], "the hold gave a slot away"
        time.sleep(0.1)
    assert c.exists(0, ["k0"]) == [True], (
        "keys refused while the pool's free slots are held evicted its only page")


# ---- hit ratio against an ideal LRU ----

def zipf_trace(seed, n_keys, steps, batch, alpha, delete_share):
    """[(op, keys)]: op "get" (a batch of keys, Zipf-like popularity over a
    shuffled key set) or "delete" (one key)."""
    rng = random.Random(seed)
    names = [f"{rng.getrandbits(64):016x}_trace_{i}" for i in range(n_keys)]
    weights = [1.0 / (r + 1) ** alpha for r in range(n_keys)]
    out = []
    for _ in range(steps):
        if rng.random() < delete_share:
            out.append(("delete", rng.choices(names, weights)))
        else:
            out.append(("get", list(dict.fromkeys(rng.choices(names, weights, k=batch)))))
    return out


def ideal_lru(trace, capacity):
    """Hits and lookups of an LRU cache of capacity pages on the trace: a
    miss inserts the key, evicting the least recently used."""
    lru, hits, gets = collections.OrderedDict(), 0, 0
    for op, keys in trace:
        if op == "delete":
            for k in keys:
                lru.pop(k, None)
            continue
        for k in keys:
            gets += 1
            if k in lru:
                hits += 1
                lru.move_to_end(k)
            else:
                lru[k] = True
                if len(lru) > capacity:
                    lru.popitem(last=False)
    return hits, gets


HIT_SPEED = 100
HIT_PACE = float(os.environ.get("PAGEFS_HIT_PACE", "1.0"))  # s between batches, daemon's clock


@pytest.mark.timeout_s(240)
def test_hit_ratio_of_a_zipf_trace_is_near_an_ideal_lru(server):
    """SGLang's flow on a replayed trace: look the batch up, reserve and
    confirm what missed; deletes in between. The daemon's clock runs
    HIT_SPEED times faster and each batch is HIT_PACE apart on it, so the
    quarantine holds what a pool of this size takes in over 6 s at about
    one batch a second."""
    skip_without_faketime()
    capacity, n_keys, steps, batch = 256, 1024, 1200, 8
    trace = zipf_trace(7, n_keys, steps, batch, alpha=0.9, delete_share=0.03)
    lru_hits, lru_gets = ideal_lru(trace, capacity)
    c = server(speed=HIT_SPEED).client
    c.initialize(0, capacity)
    hits = gets = refused = 0
    t0 = time.monotonic()
    for op, keys in trace:
        if op == "delete":
            c.delete_keys(0, keys)
            continue
        idx = c.get_page_indices(0, keys)
        gets += len(keys)
        hits += sum(1 for i in idx if i is not None)
        miss = [k for k, i in zip(keys, idx) if i is None]
        if miss:
            res = c.reserve_and_allocate_page_indices(0, [[k, ""] for k in miss])
            refused += sum(1 for _, s in res if s < 0)
            c.confirm_write(0, [[k, s] for k, (_, s) in zip(miss, res) if s >= 0], [])
        time.sleep(HIT_PACE / HIT_SPEED)
    took = time.monotonic() - t0
    assert gets == lru_gets
    ratio, ideal = hits / gets, lru_hits / lru_gets
    print(f"\nhit ratio over {gets} lookups ({capacity} pages, {n_keys} keys, Zipf 0.9, "
          f"3% deletes, a batch of {batch} every {HIT_PACE:g} s): pagefs {ratio:.4f}, "
          f"ideal LRU {ideal:.4f}, {ratio / ideal:.3f} of it; {refused} of {gets - hits} "
          f"inserts refused; {took:.1f} s, a batch every {took * HIT_SPEED / len(trace):.2f} s "
          f"on the daemon's clock")
    assert ratio >= 0.95 * ideal, (
        f"pagefs hit ratio {ratio:.4f} is {ratio / ideal:.3f} of the ideal LRU's {ideal:.4f}")
