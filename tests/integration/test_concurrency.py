"""Concurrency: 4 processes x 2 threads write, rename, read and unlink shared and
own names on a 16-slot pool (constant eviction). Every page carries its name
and version (pageformat), so every successful read must decode to the exact
name it was opened under and a version somebody wrote: never another page's
bytes, never a torn page.
"""
import json
import os

import pytest

import pageformat as PF
from pagefs_helpers import PYTHON, WORKLOAD, spawn, wait_until, xattr_int

SECONDS = float(os.environ.get("PAGEFS_IT_STRESS_SECONDS", "10"))
WORKERS = 4


# always: every reader goes through the kernel's page cache, which must
# survive in-place replacements of the pages it holds (fs_file.c).
@pytest.mark.timeout_s(SECONDS + 150)
@pytest.mark.engines
@pytest.mark.parametrize("kernel_cache", ["never", "always"])
def test_concurrent_writers_readers_renamers_and_deleters_never_see_foreign_or_torn_bytes(
        mount, kernel_cache):
    m = mount("--page-size", "64K", "--capacity", "1M", "--kernel-cache", kernel_cache)
    pool = m.pool(0, "kv")
    outs = [m.dir / f"stress-{w}.json" for w in range(WORKERS)]
    procs = [spawn([PYTHON, str(WORKLOAD), "stress", str(pool), str(w), str(SECONDS), "1234",
                    str(outs[w]), "65536"])
             for w in range(WORKERS)]
    for w, p in enumerate(procs):
        rc = p.wait(timeout=SECONDS + 120)
        assert rc == 0, f"stress worker {w} exited with {rc}"
    reports = [json.loads(o.read_text()) for o in outs]

    errors = [f"worker {r['worker']}: {e}" for r in reports for e in r["errors"]]
    assert not errors, f"{len(errors)} errors, first ones:\n" + "\n".join(errors[:20])

    attempted = {}
    for r in reports:
        for name, vs in r["attempted"].items():
            attempted.setdefault(name, set()).update(vs)
    bogus = [(n, v) for r in reports for n, v in r["reads"] if v not in attempted.get(n, ())]
    assert not bogus, f"reads returned versions nobody wrote: {bogus[:10]}"

    counts = {}
    for r in reports:
        for k, v in r["counts"].items():
            counts[k] = counts.get(k, 0) + v
    print("stress counts:", json.dumps(counts, sort_keys=True))
    assert counts.get("read_ok", 0) >= 50, f"too few successful reads to mean anything: {counts}"
    assert counts.get("write_ok", 0) + counts.get("rename_ok", 0) >= 50, f"too few writes: {counts}"
    opens = sum(v for k, v in counts.items() if k.startswith(("read_", "write_", "rename_")))
    stale = counts.get("read_ESTALE", 0) + counts.get("write_open_ESTALE", 0)
    assert stale * 100 <= opens, f"ESTALE on more than 1% of opens: {counts}"

    # after the load: every page left is whole and under its own name, one slot each
    listing = os.listdir(pool)
    assert len(listing) <= 16, f"a 16-slot pool lists {len(listing)} pages"
    slots = {}
    for n in listing:
        with open(pool / n, "rb") as f:
            data = f.read()
        enc, ver = PF.decode_page(data)
        want = n.split(".tmp.")[0]
        assert enc.decode() == want, f"{n} holds the bytes of {enc!r}"
        assert ver in attempted.get(want, ()), f"{n} holds version {ver} nobody wrote"
        slots.setdefault(xattr_int(pool / n, "user.pagefs.slot"), []).append(n)
    shared = {s: ns for s, ns in slots.items() if len(ns) > 1}
    assert not shared, f"slots owned by two names: {shared}"
    assert wait_until(lambda: m.statvfs_free_total()[0] ==
                      (16 - len(os.listdir(pool))) * 65536, timeout=20), \
        f"free space {m.statvfs_free_total()} does not match {len(os.listdir(pool))} pages; " \
        f"stats: {json.dumps(m.stats(), sort_keys=True)}"

    # what the index holds is what was listed: the next mount finds the same pages
    before = sorted(os.listdir(pool))
    m.remount()
    assert sorted(os.listdir(pool)) == before, "pages changed across a remount"
    assert m.statvfs_free_total()[0] == (16 - len(before)) * 65536, \
        f"free space after remount: {m.statvfs_free_total()}"
