#!/usr/bin/python3
"""sglang_bench.py - the native SGLang path (python/pagefs) against what
HiCacheFile does, side by side in one run.

Three ratios, for each page size, client process count and backing:
  exists  Client.exists of a batch (presence table;   vs a stat per key on a
          --no-presence: one ioctl request)
                                                          plain directory
  get     Client.read_into of a batch (direct path:    vs pread of the same
          one request pins the batch, one unpins it)      bytes from the data file
  set     Client.write of a batch (atomic publish)     vs temp file + write +
                                                          rename per key on a
                                                          plain directory
and with --ops pin, the batch pin against an open per page (pin=False, as
with a daemon without it) for the same reads; with --ops place, placed
writes against one write() through the mount (place=False) of the same
pages.
The plain directory lives on the same backing as pagefs's data files. The
contenders alternate in short rounds (--round seconds each) so that a load
change on the machine hits both, with a pause of --settle seconds after each
slot so that work one leaves behind is not measured in the next one's; a ratio is native keys/s over baseline
keys/s (bytes/s for get and set, the same pages on both sides).

Backings: a tmpfs of our own; with --backing-fuse also libfuse's
passthrough_ll (cache=never) over that tmpfs, built from the copy Debian
ships, as `pagefs bench --backing-fuse` does (a backing whose metadata
operations each cost a round trip, as on 3FS). Runs as root (tmpfs and
FUSE mounts); everything is unmounted on exit.

  PYTHONPATH=python /usr/bin/python3 scripts/sglang_bench.py --pagefs build/pagefs \\
      [--sizes 64K,1M] [--procs 1,4] [--batch 64] [--seconds 2] [--backing-fuse] \\
      [--verify first|always|none] [--ops exists,get,set,pin,place] [--no-pin] [--no-place]
      [--json FILE]
  ... --channels   compares lookup channels instead (presence table, ioctl
                   batch, stat and getxattr per name) on one mount
"""
import argparse
import json
import mmap
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import pagefs  # noqa: E402

PT_SOURCE = "/usr/share/doc/libfuse3-dev/examples/passthrough_ll.c"
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def size(s):
    s = s.strip().upper()
    return int(s[:-1]) * UNITS[s[-1]] if s[-1] in UNITS else int(s)


def human(n):
    for u, v in (("M", 1 << 20), ("K", 1 << 10)):
        if n % v == 0:
            return "%d%s" % (n // v, u)
    return str(n)


def mounted(path):
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == path for line in f)


def wait_for(pred, timeout=20):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False


class Env:
    """A tmpfs, optionally a passthrough_ll over it, and a pagefs mount."""

    def __init__(self, args, fuse_backing):
        self.args = args
        self.tmp = tempfile.mkdtemp(prefix="pagefs-sglang-bench.")
        self.mounts, self.procs = [], []
        self.tmpfs = os.path.join(self.tmp, "tmpfs")
        os.mkdir(self.tmpfs)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=75%", "sglang-bench", self.tmpfs],
                       check=True)
        self.mounts.append(self.tmpfs)
        self.backing = self.tmpfs
        self.desc = "tmpfs"
        if fuse_backing:
            pt = os.path.join(self.tmp, "passthrough_ll")
            flags = subprocess.run(["pkg-config", "--cflags", "--libs", "fuse3"], check=True,
                                   capture_output=True, text=True).stdout.split()
            subprocess.run(["cc", "-O2", "-w", "-o", pt, PT_SOURCE] + flags, check=True)
            lower = os.path.join(self.tmpfs, "lower")
            self.backing = os.path.join(self.tmp, "bfuse")
            os.mkdir(lower)
            os.mkdir(self.backing)
            log = open(os.path.join(self.tmp, "passthrough.log"), "w")
            p = subprocess.Popen([pt, "-f", "-o", "source=%s,cache=never" % lower, self.backing],
                                 stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
            self.procs.append(p)
            if not wait_for(lambda: mounted(self.backing)):
                raise RuntimeError("passthrough_ll did not mount %s" % self.backing)
            self.mounts.append(self.backing)
            self.desc = "fuse (passthrough_ll over tmpfs)"
        self.plain = os.path.join(self.backing, "plain")
        os.mkdir(self.plain)
        data = os.path.join(self.backing, "pagefs")
        os.mkdir(data)
        self.mnt = os.path.join(self.tmp, "mnt")
        os.mkdir(self.mnt)
        subprocess.run([args.pagefs, "mount", data, self.mnt, "--meta",
                        "sqlite:" + os.path.join(self.tmp, "index.db"),
                        "--log-file", os.path.join(self.tmp, "pagefs.log")],
                       check=True, stdout=subprocess.DEVNULL)
        self.mounts.append(self.mnt)

    def close(self):
        for m in reversed(self.mounts):
            if m == self.mnt:
                r = subprocess.run([self.args.pagefs, "umount", m], capture_output=True)
                if r.returncode == 0:
                    continue
            subprocess.run(["umount", m], capture_output=True)
            if mounted(m):
                subprocess.run(["umount", "-l", m], capture_output=True)
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


# ---- the contenders: each runs one batch and returns the keys it did ----

def aligned(n, fill=None):
    """n bytes of page-aligned memory (an anonymous mapping), holding fill."""
    m = mmap.mmap(-1, n)
    if fill is not None:
        m[:] = fill
    return memoryview(m)


def names_of(proc, n):
    return ["%064x_bench_%d" % (i * 7919 + proc, proc) for i in range(n)]


class Worker:
    """One client process's view: its keys, buffers and pagefs client."""

    def __init__(self, env, proc, page, batch, verify, rank, threads, presence=True, pin=True,
                 place=True):
        self.env, self.page, self.batch, self.rank = env, page, batch, rank
        self.client = pagefs.Client(env.mnt, verify=verify, threads=threads, presence=presence,
                                    pin=pin, place=place)
        # the same writes with one write() through the mount per page
        self.mounted = pagefs.Client(env.mnt, verify=verify, threads=threads, place=False)
        # the same reads with an open per page instead of the batch pin
        self.opener = pagefs.Client(env.mnt, verify=verify, threads=threads, pin=False)
        self.names = names_of(proc, batch * 4)
        # set writes names of its own: the pages get and exists use stay the
        # ones fill() wrote (a rewritten page is a new version, which the
        # daemon and the client check again at its first read)
        self.set_names = ["%064x_set_%d" % (i * 7919 + proc, proc) for i in range(batch * 4)]
        # Page-aligned buffers on both sides, as SGLang's host pool pages
        # are (one tensor; 64 KiB and 1 MiB pages start on a page).
        self.bufs = [aligned(page) for _ in range(batch)]
        self.data = [aligned(page, os.urandom(page)) for _ in range(batch)]
        self.i = 0

    def take(self, names=None):
        names = names or self.names
        k = self.i % 4
        self.i += 1
        return names[k * self.batch:(k + 1) * self.batch]

    def fill(self):
        for k in range(4):
            names = self.names[k * self.batch:(k + 1) * self.batch]
            assert all(self.client.write(self.rank, "kv", names, self.data))
            for n, d in zip(names, self.data):
                with open(os.path.join(self.env.plain, n + ".bin"), "wb") as f:
                    f.write(d)
        path, _, recs = self.client.lookup(self.rank, "kv", self.names)
        self.raw_fd = os.open(path, os.O_RDONLY)
        # Warm up: the first read of a page after its commit is checked by
        # the daemon (at open, --verify first) and by the client; measured
        # reads are of pages read before, as a hot prefix is.
        for k in range(4):
            assert all(self.client.read_into(self.rank, "kv", self.take(), self.bufs))
            assert all(self.opener.read_into(self.rank, "kv", self.take(), self.bufs))
        self.offsets = [r.offset for r in recs]

    # exists
    def exists_native(self):
        assert all(self.client.exists(self.rank, "kv", self.take()))

    def exists_file(self):
        for n in self.take():
            assert os.path.exists(os.path.join(self.env.plain, n + ".bin"))

    # get
    def get_native(self):
        assert all(self.client.read_into(self.rank, "kv", self.take(), self.bufs))

    def get_opened(self):
        assert all(self.opener.read_into(self.rank, "kv", self.take(), self.bufs))

    def get_raw(self):
        k = self.i % 4
        self.i += 1
        for j, b in enumerate(self.bufs):
            assert os.preadv(self.raw_fd, [b], self.offsets[k * self.batch + j]) == self.page

    # set
    def set_native(self):
        assert all(self.client.write(self.rank, "kv", self.take(self.set_names), self.data))

    def set_mounted(self):
        assert all(self.mounted.write(self.rank, "kv", self.take(self.set_names), self.data))

    def set_file(self):
        for n, d in zip(self.take(self.set_names), self.data):
            final = os.path.join(self.env.plain, n + ".bin")
            tmp = "%s.tmp.%d.%d.bench" % (final, os.getpid(), 1)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.write(fd, d)
            os.close(fd)
            os.rename(tmp, final)


PAIRS = {"exists": ("exists_native", "exists_file"),
         "get": ("get_native", "get_raw"),
         "pin": ("get_native", "get_opened"),
         "set": ("set_native", "set_file"),
         "place": ("set_native", "set_mounted")}


def child(env, proc, page, args, barrier, out):
    w = Worker(env, proc, page, args.batch, args.verify, rank=proc, threads=args.threads,
               presence=not args.no_presence, pin=not args.no_pin, place=not args.no_place)
    w.fill()
    res = {}
    for op in args.ops:
        for method in PAIRS[op]:
            res[method] = [0, 0.0]
    rounds = max(1, int(args.seconds / args.round))
    for _ in range(rounds):
        for op in args.ops:
            for method in PAIRS[op]:
                barrier.wait()
                fn = getattr(w, method)
                t0 = time.perf_counter()
                n = 0
                while time.perf_counter() - t0 < args.round / 2:
                    fn()
                    n += 1
                res[method][0] += n * args.batch
                res[method][1] += time.perf_counter() - t0
                # Work a contender leaves to the kernel and the daemons
                # (freeing a renamed-over file's pages, forgetting its
                # inodes) is done before the next contender's slot, not
                # in it.
                time.sleep(args.settle)
    out.put((proc, res))


def run_cell(env, page, nprocs, args):
    os.makedirs(env.mnt, exist_ok=True)
    cap = page * args.batch * 4 * 3
    c = pagefs.Client(env.mnt)
    for p in range(nprocs):
        c.pool(p, "kv", page_size=page, capacity=cap)
    c.close()
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(nprocs), ctx.Queue()
    ps = [ctx.Process(target=child, args=(env, p, page, args, barrier, out))
          for p in range(nprocs)]
    for p in ps:
        p.start()
    results = [out.get(timeout=600) for _ in ps]
    for p in ps:
        p.join()
        if p.exitcode != 0:
            raise RuntimeError("a client process failed (exit %s)" % p.exitcode)
    total = {}
    for _, res in results:
        for method, (keys, secs) in res.items():
            t = total.setdefault(method, [0, 0.0])
            t[0] += keys
            t[1] = max(t[1], secs)
    # clean the pools for the next cell
    c = pagefs.Client(env.mnt)
    for p in range(nprocs):
        c.delete(p, "kv", c.list(p, "kv"))
        os.rmdir(os.path.join(env.mnt, str(p), "kv"))
        os.rmdir(os.path.join(env.mnt, str(p)))
    c.close()
    for n in os.listdir(env.plain):
        os.unlink(os.path.join(env.plain, n))
    return {m: k / s for m, (k, s) in total.items()}


def channels(env, args):
    """Lookup channels for a batch: one ioctl, a stat per name, a getxattr
    per name (the offset), on one pagefs mount."""
    c = pagefs.Client(env.mnt)
    ci = pagefs.Client(env.mnt, presence=False)
    c.pool(0, "kv", page_size="4K")
    names = names_of(0, args.batch)
    c.write(0, "kv", names, [b"x"] * len(names))
    pool = os.path.join(env.mnt, "0", "kv")
    ways = {
        "presence table (no request)": lambda: c.exists(0, "kv", names),
        "ioctl EXISTS (1 request)": lambda: ci.exists(0, "kv", names),
        "ioctl LOOKUP (1 request)": lambda: c.lookup(0, "kv", names),
        "stat per name": lambda: [os.stat(os.path.join(pool, n)) for n in names],
        "getxattr user.pagefs.offset per name":
            lambda: [os.getxattr(os.path.join(pool, n), "user.pagefs.offset") for n in names],
    }
    rates = {k: [0, 0.0] for k in ways}
    for _ in range(max(1, int(args.seconds / args.round))):
        for k, fn in ways.items():
            t0 = time.perf_counter()
            n = 0
            while time.perf_counter() - t0 < args.round / len(ways):
                fn()
                n += 1
            rates[k][0] += n
            rates[k][1] += time.perf_counter() - t0
    print("lookup channels, batch of %d names, %s backing:" % (args.batch, env.desc))
    for k, (n, s) in rates.items():
        print("  %-40s %9.1f us/batch  %10.0f names/s" % (k, s / n * 1e6, n * args.batch / s))
    c.close()
    ci.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pagefs", default=os.path.join(HERE, "..", "build", "pagefs"))
    ap.add_argument("--sizes", default="64K,1M")
    ap.add_argument("--procs", default="1,4")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=2.0, help="per contender and cell")
    ap.add_argument("--round", type=float, default=0.5)
    ap.add_argument("--settle", type=float, default=0.1,
                    help="pause after each contender's slot, not measured")
    ap.add_argument("--ops", default="exists,get,set")
    ap.add_argument("--verify", default="first", choices=["first", "always", "none"])
    ap.add_argument("--backing-fuse", action="store_true",
                    help="also on passthrough_ll over the tmpfs")
    ap.add_argument("--threads", type=int, default=None,
                    help="pagefs.Client threads (default: its own, the CPUs up to 4)")
    ap.add_argument("--no-presence", action="store_true",
                    help="exists asks the daemon (ioctl) instead of the presence table")
    ap.add_argument("--no-pin", action="store_true",
                    help="get opens each page (which pins it) instead of the batch pin")
    ap.add_argument("--no-place", action="store_true",
                    help="set writes through the mount instead of placing the bytes")
    ap.add_argument("--channels", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    args.pagefs = os.path.abspath(args.pagefs)
    args.ops = [o for o in args.ops.split(",") if o]
    if os.geteuid() != 0:
        sys.exit("sglang_bench.py: run as root (it mounts a tmpfs and FUSE filesystems)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    backings = [False, True] if args.backing_fuse else [False]
    rows = []
    print("pagefs %s, checksum %s, verify=%s, batch %d, %.1f s per contender and cell"
          % (args.pagefs, pagefs.CHECKSUM_SOURCE, args.verify, args.batch, args.seconds))
    for fuse_backing in backings:
        env = Env(args, fuse_backing)
        try:
            if args.channels:
                channels(env, args)
                continue
            for page in [size(s) for s in args.sizes.split(",")]:
                for nprocs in [int(p) for p in args.procs.split(",")]:
                    r = run_cell(env, page, nprocs, args)
                    for op in args.ops:
                        nat, base = PAIRS[op]
                        row = {"backing": env.desc, "page": page, "procs": nprocs, "op": op,
                               "native_keys_s": r[nat], "baseline_keys_s": r[base],
                               "ratio": r[nat] / r[base]}
                        rows.append(row)
                        print("%-34s %5s %d proc  %-6s native %9.0f keys/s  %-22s %9.0f "
                              "keys/s  ratio %5.2f" % (
                                  env.desc, human(page), nprocs, op, r[nat],
                                  {"exists": "stat per key", "get": "raw pread",
                                   "pin": "open per page",
                                   "place": "write() via mount",
                                   "set": "tmp+write+rename"}[op], r[base], row["ratio"]),
                              flush=True)
        finally:
            env.close()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
