"""Crash loops (SPEC "Durability and crashes"): kill -9 the daemon again and
again under a mixed load from several processes and check every recovery
against the journals of what the load saw succeed.

Each cycle: WORKERS processes of crashload.py run create/write/close,
O_TRUNC replacement, tmp + rename, unlink and checked reads on their own
names in 0/kv (no eviction) and 0/small (16 slots, evicting); after a random
delay the daemon gets SIGKILL, the dead mount is cleared, `pagefs fsck`
checks the crashed index, the mount starts again and every name is checked:

- a page whose close()/rename() returned is there with its exact bytes,
  unless later unlinked or replaced (in 0/small: or evicted, never changed);
- a completed unlink stays done; nothing that was never closed is visible;
- the one operation in flight per worker at the kill may or may not be done;
- no slot has two names, statfs free = capacity - pages.

After the last cycle: a clean umount and `pagefs fsck --verify-data` (clean).
PAGEFS_CRASH_CYCLES sets the cycle count (CI: a handful; scripts/soak.sh:
hundreds); PAGEFS_CRASH_SEED the seed. The figures go to stderr.
"""
import os
import json
import random
import sys
import time

import pytest

import pageformat as PF
import pagefs_helpers as H
from pagefs_helpers import PYTHON, HERE, describe, read_page, run_pagefs, spawn, xattr_int

CYCLES = int(os.environ.get("PAGEFS_CRASH_CYCLES", "4"))
SEED = int(os.environ.get("PAGEFS_CRASH_SEED", str(random.randrange(1 << 30))))
WORKERS = 3
SLOT = 64 << 10
CAPS = {"kv": 1024, "small": 16}  # slots


def replay(text, start):
    """Journal -> (state after every completed op, the op in flight, stop errno, X lines)."""
    state = dict(start)
    pending, stop, bad, done = None, None, [], 0
    for line in text.splitlines():
        f = line.split()
        if not f:
            continue
        if f[0] == "B":
            pending = f[1:]
        elif f[0] == "D":
            op = f[1:]
            want = list(pending or [])
            if want and want[0] + "-" == op[0]:
                want[0] = op[0]
            assert op == want, f"journal out of order: D {op} after B {pending}"
            pending, done = None, done + 1
            if op[0] == "W":
                state[op[1]] = (op[2], int(op[3]), int(op[4]))
            elif op[0] == "R":
                state[op[2]] = state.pop(op[1])
            elif op[0] == "R-":
                state.pop(op[1], None)
            elif op[0] in ("U", "U-"):
                state.pop(op[1], None)
        elif f[0] == "X":
            bad.append(line)
        elif f[0] == "E":
            stop = int(f[1])
    return state, pending, stop, bad, done


def allowed_states(state, pending):
    """key -> set of allowed contents ((enc, ver, len) or None for absent)."""
    allowed = {k: {v} for k, v in state.items()}
    if pending:
        op = pending[0]
        if op == "W":
            k = pending[1]
            allowed[k] = {state.get(k), (pending[2], int(pending[3]), int(pending[4]))}
        elif op == "R":
            tmp, k = pending[1], pending[2]
            allowed[tmp] = {state.get(tmp), None}
            allowed[k] = {state.get(k), state.get(tmp)}
        elif op == "U":
            allowed[pending[1]] = {state.get(pending[1]), None}
    for k, s in allowed.items():
        if k.startswith("small/"):
            s.add(None)  # eviction may take any page of the small pool
    return allowed


def observe(m):
    """key -> (enc, ver, len) or an error string, for every page on the mount."""
    obs = {}
    for pool in CAPS:
        d = m.path(0, pool)
        for name in os.listdir(d):
            data = read_page(d / name)
            try:
                enc, ver = PF.decode_page(data)
                obs[f"{pool}/{name}"] = (enc.decode(), ver, len(data))
            except PF.PageError as e:
                obs[f"{pool}/{name}"] = f"partial or foreign bytes: {e}"
    return obs


def check_slots_and_space(m, obs):
    total_pages = 0
    for pool in CAPS:
        d = m.path(0, pool)
        names = os.listdir(d)
        total_pages += len(names)
        slots = {}
        for n in names:
            slots.setdefault(xattr_int(d / n, "user.pagefs.slot"), []).append(n)
        twice = {s: ns for s, ns in slots.items() if len(ns) > 1}
        assert not twice, f"slots of 0/{pool} owned by two names after recovery: {twice}"
    free, total = m.statvfs_free_total()
    assert total == sum(CAPS.values()) * SLOT, f"statfs total {total}"
    assert free == total - total_pages * SLOT, (
        f"statfs free {free} after recovery, but {total_pages} pages leave "
        f"{total - total_pages * SLOT}: free space is not whole")


def run_cycles(m, cycles, seed, log):
    rng = random.Random(seed)
    states = [dict() for _ in range(WORKERS)]
    ops = checked = 0
    for cycle in range(1, cycles + 1):
        procs = []
        journals = []
        for w in range(WORKERS):
            sj = m.dir / f"state-{w}.json"
            sj.write_text(json.dumps(states[w]))
            j = m.dir / f"journal-{cycle}-{w}"
            journals.append(j)
            procs.append(spawn([PYTHON, str(HERE / "crashload.py"), str(m.mnt), str(w), str(cycle),
                                str(rng.randrange(1 << 30)), str(sj), str(j)]))
        delay = rng.uniform(0.15, 1.5)
        time.sleep(delay)
        # A worker that stopped on its own before the kill hit a real error.
        early = [j.read_text()[-400:] for j in journals
                 if j.exists() and "\nE " in "\n" + j.read_text()]
        m.kill9()
        for p in procs:
            p.wait(timeout=60)
        ctx = f"(seed {seed}, cycle {cycle}, kill after {delay:.2f}s)"
        assert not early, f"a worker stopped before the kill {ctx}: " + "; ".join(early)
        r = run_pagefs("fsck", m.backing, "--meta", m.meta, timeout=120)
        assert r.returncode == 0, f"fsck of the crashed index is not clean {ctx}: {describe(r)}"
        m.start()
        obs = observe(m)
        allowed = {}
        for w in range(WORKERS):
            text = journals[w].read_text()
            state, pending, stop, bad, done = replay(text, states[w])
            ops += done
            assert not bad, f"worker {w} read wrong bytes before the kill {ctx}: {bad}"
            # After the kill: ENOTCONN/ECONNABORTED, or ENOENT once the dead
            # mount was cleared (the path then leads into the empty mount point).
            assert stop is not None, f"worker {w} did not stop after the kill {ctx}"
            allowed.update(allowed_states(state, pending))
        for key in set(allowed) | set(obs):
            got = obs.get(key)
            want = allowed.get(key, {None})
            checked += 1
            assert got in want, (
                f"{key} after recovery {ctx}: got {got}, allowed {sorted(map(str, want))}")
        check_slots_and_space(m, obs)
        for w in range(WORKERS):
            states[w] = {k: v for k, v in obs.items()
                         if k.split("/", 1)[1].split("-", 1)[0] == f"w{w}"}
        log.write(f"[crash-loop] cycle {cycle}: kill at {delay:.2f}s, {len(obs)} pages\n")
    return ops, checked


@pytest.mark.timeout_s(max(180, CYCLES * 25))
def test_kill_9_loop_under_mixed_load_loses_nothing_that_returned(mount):
    m = mount("--page-size", "64K", "--capacity", "64M")
    os.makedirs(m.path(0, "kv"))
    r = run_pagefs("pool", "create", m.path(0, "small"), "--capacity", f"{CAPS['small'] * SLOT}")
    assert r.returncode == 0, describe(r)
    t0 = time.monotonic()
    ops, checked = run_cycles(m, CYCLES, SEED, sys.stderr)
    m.umount()
    r = run_pagefs("fsck", m.backing, "--meta", m.meta, "--verify-data", timeout=300)
    assert r.returncode == 0, f"fsck --verify-data after {CYCLES} crash cycles: {describe(r)}"
    sys.stderr.write(f"[crash-loop] seed {SEED}: {CYCLES} kill -9 cycles survived, {ops} "
                     f"operations journaled, {checked} name states checked in "
                     f"{time.monotonic() - t0:.1f}s; {len(H.KILL9_WEDGED)} killed daemons "
                     "hung in the kernel until their FUSE connection was aborted\n")
