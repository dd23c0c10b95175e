#!/usr/bin/python3
"""metrics_cost.py - what scraping GET /metrics costs the data path.

Mounts pagefs with --metrics, runs CLIENTS processes doing SGLang's small
page cycle (create + one 64 KiB write + close, then stat) for SECONDS per
round, and alternates rounds without a scraper and with one that scrapes
/metrics back to back (far harsher than Prometheus's one scrape per 15 s).
Prints the median pages/s of each and their ratio, and the median scrape
time. Rounds alternate so that the load of a shared machine falls on both.

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


def round_(pool, port, scrape):
    stop, times = threading.Event(), []

    def scraper():
        while not stop.is_set():
            t = time.monotonic()
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read()
            times.append(time.monotonic() - t)

    th = threading.Thread(target=scraper) if scrape else None
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
    return total / SECS, times


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
        plain, scraped, scrape_times = [], [], []
        for r in range(ROUNDS):
            for scrape in ((False, True) if r % 2 == 0 else (True, False)):
                rate, times = round_(pool, port, scrape)
                (scraped if scrape else plain).append(rate)
                scrape_times += times
        a, b = statistics.median(plain), statistics.median(scraped)
        print(f"clients {CLIENTS}, {SECS:g} s x {ROUNDS} rounds each, 64 KiB pages "
              "(create+write+close+stat)")
        print(f"  no scraper:              {a:9.0f} pages/s  (rounds: "
              + ", ".join(f"{x:.0f}" for x in plain) + ")")
        print(f"  scraping back to back:   {b:9.0f} pages/s  (rounds: "
              + ", ".join(f"{x:.0f}" for x in scraped) + ")")
        print(f"  ratio scraped/plain:     {b / a:9.3f}")
        print(f"  scrapes: {len(scrape_times)}, median {statistics.median(scrape_times) * 1e3:.2f} ms")
    finally:
        subprocess.run([pagefs, "umount", mnt], check=False)
        subprocess.run(["rm", "-rf", d], check=False)


if __name__ == "__main__":
    main()
