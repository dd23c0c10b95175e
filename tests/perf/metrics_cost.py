#!/usr/bin/python3
"""metrics_cost.py - what scraping GET /metrics costs the data path.

Mounts pagefs with --metrics, runs CLIENTS processes doing SGLang's small
page cycle (create + one 64 KiB write + close, then stat) for SECONDS per
round, and rotates three kinds of round: no scraper, one scrape a second
(already 15 times Prometheus's default interval), and scrapes back to back
(a whole core spent on /metrics). Prints the median pages/s of each, their
ratios to no scraper, the daemon's median time per FUSE request (its own
histograms: the data path without the clients' share of the CPU) and the
median scrape time. Rounds rotate so that
the load of a shared machine falls on all three.

Usage (root): tests/perf/metrics_cost.py [BUILD_DIR] [SECONDS] [ROUNDS] [CLIENTS]
"""
import multiprocessing as mp
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
SECS = float(sys.argv[2]) if len(sys.argv) > 2 else 5
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 5
CLIENTS = int(sys.argv[4]) if len(sys.argv) > 4 else 4
PAGE = b"p" * 65536


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def client(pool, cid, secs, out):
    n, end = 0, time.monotonic() + secs
    while time.monotonic() < end:
        p = os.path.join(pool, f"c{cid}-{n % 2000}")
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, PAGE)
        os.close(fd)
        os.stat(p)
        n += 1
    out.put(n)


def fuse_time(port):
    """(seconds, requests) the daemon spent on FUSE requests so far."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    secs = reqs = 0.0
    for line in text.splitlines():
        if line.startswith("pagefs_fuse_request_duration_seconds_sum"):
            secs += float(line.rsplit(" ", 1)[1])
        elif line.startswith("pagefs_fuse_request_duration_seconds_count"):
            reqs += float(line.rsplit(" ", 1)[1])
    return secs, reqs


def round_(pool, port, scrape):
    """scrape: None, or the pause between scrapes in seconds. Returns
    pages/s, the scrape times, and the daemon's mean time per request."""
    t0 = fuse_time(port)
    stop, times = threading.Event(), []

    def scraper():
        while not stop.is_set():
            t = time.monotonic()
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read()
            times.append(time.monotonic() - t)
            if scrape:
                stop.wait(scrape)

    th = threading.Thread(target=scraper) if scrape is not None else None
    if th:
        th.start()
    q = mp.Queue()
    procs = [mp.Process(target=client, args=(pool, i, SECS, q)) for i in range(CLIENTS)]
    for p in procs:
        p.start()
    total = sum(q.get() for _ in procs)
    for p in procs:
        p.join()
    stop.set()
    if th:
        th.join()
    t1 = fuse_time(port)
    return total / SECS, times, (t1[0] - t0[0]) / max(t1[1] - t0[1], 1)


def main():
    pagefs = os.path.abspath(os.path.join(BUILD, "pagefs"))
    d = tempfile.mkdtemp(prefix="pagefs-metrics-cost-")
    backing, mnt = os.path.join(d, "b"), os.path.join(d, "m")
    os.makedirs(backing)
    os.makedirs(mnt)
    port = free_port()
    subprocess.run([pagefs, "mount", backing, mnt, "--meta", f"sqlite:{d}/index.db",
                    "--page-size", "64K", "--capacity", "1G", "--metrics", str(port),
                    "--log-file", f"{d}/log"], check=True, stdout=subprocess.DEVNULL)
    try:
        pool = os.path.join(mnt, "0", "kv")
        os.makedirs(pool)
        kinds = [("no scraper", None), ("one scrape a second", 1.0),
                 ("scrapes back to back", 0.0)]
        rates, scrape_times = {k: [] for k, _ in kinds}, []
        per_req = {k: [] for k, _ in kinds}
        for r in range(ROUNDS):
            for i in range(len(kinds)):
                name, pause = kinds[(i + r) % len(kinds)]
                rate, times, mean = round_(pool, port, pause)
                rates[name].append(rate)
                per_req[name].append(mean)
                scrape_times += times
        base = statistics.median(rates["no scraper"])
        print(f"clients {CLIENTS}, {SECS:g} s x {ROUNDS} rounds each, 64 KiB pages "
              "(create+write+close+stat)")
        for name, _ in kinds:
            med = statistics.median(rates[name])
            print(f"  {name:22s} {med:9.0f} pages/s  ratio {med / base:5.3f}  daemon "
                  f"{statistics.median(per_req[name]) * 1e6:6.1f} us/request  (rounds: "
                  + ", ".join(f"{x:.0f}" for x in rates[name]) + ")")
        print(f"  scrapes: {len(scrape_times)}, median {statistics.median(scrape_times) * 1e3:.2f} ms")
    finally:
        subprocess.run([pagefs, "umount", mnt], check=False)
        subprocess.run(["rm", "-rf", d], check=False)


if __name__ == "__main__":
    main()
