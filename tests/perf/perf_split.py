#!/usr/bin/python3
"""perf_split.py - where a server's CPU goes per batch of keys, from a
`perf record -g` profile of it (tests/perf/http_profile.sh makes both).

    perf_split.py PERF_DATA KEYS_PER_CPU_S [BATCH]

KEYS_PER_CPU_S is what http_load printed for the same run; BATCH the keys
per request (128). Prints each part's share of the profile and its
microseconds of CPU per batch:

- first touches: page faults (the kernel giving the process new memory);
- index I/O: pwrite, pread and mprotect system calls (SQLite's WAL and
  checkpoints; the arena made writable);
- requests: the rest of the kernel (TCP over loopback, waking the client,
  epoll, the server's own wake-ups);
- then each user-space library by name, and pagefs itself.
"""
import re
import subprocess
import sys

LIBS = [
    ("pagefs", "pagefs"),
    ("libc.so.6", "libc"),
    ("libyajl.so.2.1.0", "yajl (JSON)"),
    ("libsqlite3.so.0.8.6", "SQLite"),
    ("libmicrohttpd.so.12.60.0", "libmicrohttpd"),
    ("libxxhash.so.0.8.1", "xxhash"),
]
IO_CALLS = ("__x64_sys_pwrite64", "__x64_sys_pread64", "__x64_sys_mprotect")


def report(data, args):
    out = subprocess.run(["perf", "report", "-i", data, "--stdio", "-g", "none"] + args,
                         capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if line.strip() and not line.startswith("#")]


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: perf_split.py PERF_DATA KEYS_PER_CPU_S [BATCH]")
    data, kps = sys.argv[1], float(sys.argv[2])
    batch = int(sys.argv[3]) if len(sys.argv) == 4 else 128
    if kps <= 0:
        sys.exit("perf_split.py: KEYS_PER_CPU_S must be positive")
    children = {}
    for line in report(data, ["--children", "--sort", "sym"]):
        m = re.match(r"\s*([\d.]+)%\s+[\d.]+%\s+\[k\]\s+(\S+)", line)
        if m:
            children[m.group(2)] = float(m.group(1))
    dso = {}
    for line in report(data, ["--no-children", "--sort", "dso"]):
        m = re.match(r"\s*([\d.]+)%\s+(\S+)", line)
        if m:
            dso[m.group(2)] = float(m.group(1))
    kernel = dso.get("[kernel.kallsyms]", 0.0)
    faults = children.get("asm_exc_page_fault", 0.0)
    io = sum(children.get(c, 0.0) for c in IO_CALLS)
    rows = [("first touches (page faults)", faults), ("index I/O (pwrite, pread, mprotect)", io),
            ("requests (TCP, wake-ups, epoll)", kernel - faults - io)]
    rows += [(name, dso.get(lib, 0.0)) for lib, name in LIBS]
    rows.append(("other", 100.0 - sum(share for _, share in rows)))
    us = batch / kps * 1e6
    print(f"server CPU per {batch} keys: {us:.0f} us")
    for name, share in rows:
        print(f"  {name:<38} {share:5.1f} %  {share * us / 100:6.1f} us")


if __name__ == "__main__":
    main()
