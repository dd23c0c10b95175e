"""kill -9 of `pagefs serve-meta` under the key protocol's writes (SPEC
"Durability and crashes"): every confirm_write and delete_keys that
returned holds after the restart. The SQLite index keeps confirms as page
log blobs (meta/store/sqlite_log.h), deletes and replacements as changes
to those blobs; this checks them where a crash can fall anywhere.

Each cycle: WRITERS threads confirm batches of new keys (each key written
once, or confirmed again on another slot: a replacement) and delete some
of the keys they confirmed earlier, noting each call once it returned;
after a random delay the daemon gets SIGKILL; `pagefs fsck` finds the
index clean; the next daemon (the one of the next cycle) must map every
noted key to its slot and none of the deleted ones. The one call in
flight per writer at the kill may or may not have landed.
PAGEFS_CRASH_CYCLES sets the cycle count, PAGEFS_CRASH_SEED the seed.
"""
import os
import random
import sys
import threading
import time

import pytest
import requests

import indexdb
import metaclient as MC
import pagefs_helpers as H
from pagefs_helpers import describe, run_pagefs

CYCLES = int(os.environ.get("PAGEFS_CRASH_CYCLES", "3"))
SEED = int(os.environ.get("PAGEFS_CRASH_SEED", str(random.randrange(1 << 30))))
WRITERS = 3
PAGES = 1 << 17  # no eviction: every key confirmed stays unless deleted
BATCH = 64
LIVE = 3000  # keys a writer holds at most (then it deletes)


class Writer(threading.Thread):
    """Confirms and deletes keys w<i>.<n>; `have` (its own) holds what
    returned."""

    def __init__(self, client, i, rng, have):
        super().__init__(daemon=True)
        self.c, self.i, self.rng, self.have = client, i, rng, have
        self.inflight = set()  # keys of the call that had not returned
        self.n = max((int(k.split(".")[1]) + 1 for k in have), default=0)
        self.error = None

    def run(self):
        try:
            while True:
                self.step()
        except requests.ConnectionError:
            return  # the kill
        except Exception as e:  # noqa: BLE001 (reported by the test)
            self.error = e

    def step(self):
        old = list(self.have)
        time.sleep(0.005)  # (slots freed come back after 5 s: no eviction)
        if old and (len(old) > LIVE or self.rng.random() < 0.3):
            gone = self.rng.sample(old, min(len(old), self.rng.randrange(1, 16)))
            self.inflight = set(gone)
            self.c.delete_keys(0, gone)
            for k in gone:
                del self.have[k]
            self.inflight = set()
            return
        keys = [f"w{self.i}.{self.n + j}" for j in range(BATCH)]
        self.n += BATCH
        if old and self.rng.random() < 0.5:  # confirmed again: a new slot
            keys[: len(keys) // 4] = self.rng.sample(old, min(len(old), len(keys) // 4))
        got = self.c.reserve_and_allocate_page_indices(0, [[k, ""] for k in keys])
        done = [[k, s] for k, (_, s) in zip(keys, got) if s >= 0]
        self.inflight = set(keys)
        self.c.confirm_write(0, done, [])
        for k, s in done:
            self.have[k] = s
        self.inflight = set()


def wait_for_slots(client, t0):
    """The daemon after a crash holds the free slots until the crashed
    one's reservations could have ended (--reserve-timeout, quarantine)."""
    while client.reserve_and_allocate_page_indices(0, [["probe", ""]]) == [(False, -1)]:
        assert time.monotonic() - t0 < 60, "the slots held after the crash never came back"
        time.sleep(0.25)
    client.delete_keys(0, ["probe"])


@pytest.mark.timeout_s(300)
def test_every_returned_confirm_and_delete_survives_kill_9(tmp_root):
    rng = random.Random(SEED)
    print(f"PAGEFS_CRASH_SEED={SEED}", file=sys.stderr)
    d = os.path.join(tmp_root, "http-crash")
    os.makedirs(d)
    opts = ("--page-size", "64K", "--reserve-timeout", "1")
    haves = [{} for _ in range(WRITERS)]  # per writer: key -> slot, as returned calls left it
    maybe = set()  # keys of calls in flight at a kill
    s = MC.Server(d, *opts)
    s.client.initialize(0, PAGES)
    try:
        for cycle in range(CYCLES):
            writers = [Writer(s.client, i, random.Random(rng.random()), haves[i])
                       for i in range(WRITERS)]
            for w in writers:
                w.start()
            time.sleep(rng.uniform(0.5, 2.0))
            s.proc.kill()
            s.proc.wait(30)
            s.log.close()
            for w in writers:
                w.join(30)
                assert w.error is None, f"cycle {cycle}: writer {w.i}: {w.error!r}"
                maybe |= w.inflight
            r = run_pagefs("fsck", s.backing, "--meta", s.meta)
            assert r.returncode == 0, f"cycle {cycle}: fsck after the kill: {describe(r)}"
            have = {k: v for h in haves for k, v in h.items()}
            index = s.meta.split(":", 1)[1]
            stored = {p["name"].decode(): p["slot"] for p in indexdb.pages(index)}
            t0 = time.monotonic()
            s = MC.Server(d, *opts, backing=s.backing, meta=s.meta)
            s.client.initialize(0, PAGES)
            keys = sorted(set(have) | {k for k in stored if k not in maybe})
            got = dict(zip(keys, s.client.get_page_indices(0, keys)))
            lost = {k: (v, got[k], stored.get(k)) for k, v in have.items() if k not in maybe and got[k] != v}
            assert not lost, f"cycle {cycle}: confirms that returned and were lost: " \
                f"{sorted(lost.items())[:10]} ({len(lost)} of {len(have)})"
            back = [k for k in keys if k not in have and k not in maybe and got[k] is not None]
            assert not back, f"cycle {cycle}: deleted keys came back: {back[:10]}"
            assert all(stored.get(k) == v for k, v in have.items() if k not in maybe), \
                f"cycle {cycle}: the index file disagrees with the daemon"
            for k in maybe:  # either outcome is right; the daemon's is the truth now
                h = haves[int(k[1:].split(".")[0])]
                h.pop(k, None)
                if got.get(k) is not None:
                    h[k] = got[k]
            maybe = set()
            print(f"cycle {cycle}: {sum(map(len, haves))} keys held", file=sys.stderr)
            wait_for_slots(s.client, t0)
        assert sum(map(len, haves)) > 1000, "the writers confirmed too little to test"
    finally:
        assert s.stop() == 0, f"serve-meta did not exit cleanly:\n{s.log_text()}"
        reports = s.sanitizer_reports()
        assert not reports, "sanitizer reports:\n" + "\n".join(reports)[:20000]
