#!/usr/bin/env python3
"""http_churn.py - what deletes and replacements cost `pagefs serve-meta`,
in server CPU per key, on an index filled by the key protocol.

Fills one pool with FILL keys (confirms of 1024 keys, ids in order), then
measures, each on keys no other phase touched:
  - delete-seq:  delete_keys of 128 keys confirmed one after another (as
                 an eviction in LRU order or a clear takes them);
  - delete-rand: delete_keys of 128 keys drawn at random from the pool;
  - write:       128 new keys reserved and confirmed (the reference).
Server CPU = utime + stime of the daemon from /proc/PID/stat around each
phase. On an index of schema 4 a confirm's keys are page log blobs of up
to 512 ids (meta/store/sqlite_log.h): a delete rewrites each blob it
takes a page from, once per transaction; with rows (schema 3 and older,
or another binary) it deletes rows. (A key that exists is not written
again: reserve answers its slot, so the protocol has no replacement.)

Usage: /usr/bin/python3 tests/perf/http_churn.py PAGEFS_BIN [FILL] [BATCHES]
"""
import json
import os
import random
import subprocess
import sys
import tempfile
import time

import requests

TICK = os.sysconf("SC_CLK_TCK")


def cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def key(i):
    return f"{i:064x}_model_0_16.bin"


def main():
    binary = sys.argv[1]
    fill = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
    batches = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    with tempfile.TemporaryDirectory(prefix="pagefs-churn.") as d:
        os.mkdir(f"{d}/backing")
        proc = subprocess.Popen([binary, "serve-meta", "--backing", f"{d}/backing", "--meta",
                                 f"sqlite:{d}/index.db", "--listen", "127.0.0.1:0",
                                 "--page-size", "4K", "--log-level", "warn"],
                                stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        try:
            url = proc.stdout.readline().split("listening on ")[1].split()[0]
            s = requests.Session()

            def post(ep, body):
                r = s.post(f"{url}/0/{ep}", data=json.dumps(body),
                           headers={"Content-Type": "application/json"})
                r.raise_for_status()
                return r.json() if r.content else {}

            def confirm(keys):
                got = post("reserve_and_allocate_page_indices",
                           {"keys": [[k, ""] for k in keys], "namespace": "kv"})["indices"]
                post("confirm_write", {"written_keys_to_confirm":
                                       [[k, slot] for k, (_, slot) in zip(keys, got)],
                                       "pages_to_release": [], "namespace": "kv"})

            post("initialize", {"num_pages": 2 * fill, "namespace": "kv"})
            t0 = time.monotonic()
            for i in range(0, fill, 1024):
                confirm([key(j) for j in range(i, min(fill, i + 1024))])
            print(f"fill: {fill} keys in {time.monotonic() - t0:.1f} s", file=sys.stderr)
            rng = random.Random(1)
            pool = list(range(fill // 2, fill))  # the random phases draw from here
            rng.shuffle(pool)
            seq = iter(range(0, fill // 2))
            phases = {
                "delete-seq": lambda: post("delete_keys", {"keys": [key(next(seq))
                                                                    for _ in range(128)],
                                                           "namespace": "kv"}),
                "delete-rand": lambda: post("delete_keys", {"keys": [key(pool.pop())
                                                                     for _ in range(128)],
                                                            "namespace": "kv"}),
                "write": lambda: confirm([key(fill + next(fresh)) for _ in range(128)]),
            }
            fresh = iter(range(fill))
            for name, step in phases.items():
                c0 = cpu(proc.pid)
                for _ in range(batches):
                    step()
                used = cpu(proc.pid) - c0
                n = batches * 128
                print(f"{name:12s} keys={n} server_cpu_s={used:.2f} "
                      f"us/key={1e6 * used / n:.1f}")
        finally:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    main()
