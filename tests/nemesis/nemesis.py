"""nemesis.py - several pagefs nodes on one PostgreSQL index, under faults,
with a checker of every byte read (docs/NEMESIS.md).

    /usr/bin/python3 tests/nemesis/nemesis.py WORKDIR    (scripts/nemesis.sh)

Starts a private PostgreSQL server, one shared backing directory and
NEMESIS_NODES mounts of it on one --meta URI (the nodes). Writers and
readers run on every node over small pools that are full most of the time;
HTTP clients reserve, write and confirm keys on two nodes at once (mount
--http). A nemesis, at seeded random intervals, does one of: kill -9 a node
and mount it again; SIGSTOP a node for longer than its lease, then SIGCONT;
restart PostgreSQL (pg_ctl restart -m immediate); terminate a node's
database connections (pg_terminate_backend); a rename and unlink storm.

The checker: every page's bytes are a function of its name and version
(tests/integration/pageformat.py), so each successful read is checked
exactly. Wrong bytes are a failure, always. A read that fails with EIO
because the daemon's checksum caught foreign bytes ("checksum mismatch" in
its log) is counted and explained by the fault that preceded it. After the
run every node is unmounted and `pagefs fsck` must be clean.

Everything started is stopped (workers, mounts, daemons, PostgreSQL) on
success, failure, SIGTERM or Ctrl-C. Exit 0 only when nothing failed.

Environment: NEMESIS_SECONDS (60), NEMESIS_SEED (from the clock; printed),
NEMESIS_NODES (3), PAGEFS_BIN (build/pagefs), NEMESIS_FAULTS (comma list
of kill9,stop,pg_restart,pg_terminate,storm,http_burst; all by default),
NEMESIS_STOP_SECONDS (13: longer than the 10 s lease).
"""
import calendar
import errno
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import pageformat as PF  # noqa: E402
import pagefs_helpers as H  # noqa: E402

BIN = os.environ.get("PAGEFS_BIN") or os.path.join(ROOT, "build", "pagefs")
H.PAGEFS_BIN = BIN
SECONDS = float(os.environ.get("NEMESIS_SECONDS", "60"))
SEED = int(os.environ.get("NEMESIS_SEED") or time.time_ns() % 1000000)
NODES = int(os.environ.get("NEMESIS_NODES", "3"))
STOP_S = float(os.environ.get("NEMESIS_STOP_SECONDS", "13"))
ALL_FAULTS = ("kill9", "stop", "pg_restart", "pg_terminate", "storm", "http_burst")
FAULTS = tuple(f for f in os.environ.get("NEMESIS_FAULTS", ",".join(ALL_FAULTS)).split(",")
               if f and f != "none")  # none: the load alone

PAGE = 64 * 1024
CAPACITY = "4M"          # 64 slots of 64 KiB: two per chunk
FUSE_POOLS = ("0/kv", "0/v")
HTTP_RANK = 1            # pool 1/kv is the HTTP clients'
HTTP_PAGES = 64
KEYS = 160               # names per pool: 2.5 times the slots, so pools stay full
HTTP_NODES = 2           # nodes that serve --http
LATE_READ_S = 3.0        # an HTTP read this long after its lookup may see a reused slot


def utc(t=None):
    t = time.time() if t is None else t
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"


def say(*a):
    print(f"[{utc()}] nemesis:", *a, flush=True)


# ---------------------------------------------------------------- workers

class Tally:
    """A worker's counters, written to WORKDIR/events/NAME.json every
    second, and its notable events appended to NAME.jsonl at once."""

    def __init__(self, workdir, name):
        self.path = os.path.join(workdir, "events", name)
        self.c = Counter()
        self.last = 0.0
        self.ev = open(self.path + ".jsonl", "a", buffering=1)

    def event(self, **kw):
        kw.setdefault("t", time.time())
        self.ev.write(json.dumps(kw) + "\n")

    def flush(self, force=False):
        now = time.monotonic()
        if force or now - self.last > 1.0:
            self.last = now
            with open(self.path + ".tmp", "w") as f:
                json.dump(self.c, f)
            os.replace(self.path + ".tmp", self.path + ".json")


def stopping(stop_at):
    return time.monotonic() >= stop_at


def check_page(data, fname):
    """None when data is a complete page that may live under fname (its own
    name, or that name with a rename suffix ~rN), else what is wrong."""
    try:
        name, version = PF.decode_page(data)
    except PF.PageError as e:
        return str(e)
    base = fname.split("~", 1)[0]
    if name.decode(errors="replace") != base:
        return f"page of {name!r} v{version} under the name {fname!r}"
    return None


def fuse_writer(workdir, node, wid, seed, stop_at):
    rng = random.Random(seed)
    t = Tally(workdir, f"w{node}.{wid}")
    mnt = os.path.join(workdir, f"node{node}", "mnt")
    n = 0
    while not stopping(stop_at):
        pool = rng.choice(FUSE_POOLS)
        name = f"p{rng.randrange(KEYS):04d}"
        n += 1
        version = (node << 48) | (wid << 40) | n
        hl = PF.header_len(name)
        length = rng.choice((hl, rng.randint(hl, 4096), rng.randint(hl, PAGE), PAGE))
        path = os.path.join(mnt, pool, name)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                H.write_all(fd, PF.make_page(name, version, length))
            finally:
                os.close(fd)
            t.c["writes_ok"] += 1
        except OSError as e:
            t.c["write_" + H.ename(e.errno)] += 1
            time.sleep(0.05)
        t.flush()
    t.flush(True)


def fuse_reader(workdir, node, wid, seed, stop_at):
    rng = random.Random(seed)
    t = Tally(workdir, f"r{node}.{wid}")
    mnt = os.path.join(workdir, f"node{node}", "mnt")
    pools = FUSE_POOLS + (f"{HTTP_RANK}/kv",)
    while not stopping(stop_at):
        pool = rng.choice(pools)
        try:
            if rng.random() < 0.2:
                names = os.listdir(os.path.join(mnt, pool))
                t.c["listdirs"] += 1
                if not names:
                    continue
                name = rng.choice(names)
            elif pool.startswith(f"{HTTP_RANK}/"):
                name = f"h{rng.randrange(KEYS):04d}"
            else:
                name = f"p{rng.randrange(KEYS):04d}"
                if rng.random() < 0.1:
                    name += f"~r{rng.randrange(3)}"
        except OSError as e:
            t.c["listdir_" + H.ename(e.errno)] += 1
            time.sleep(0.05)
            continue
        path = os.path.join(mnt, pool, name)
        t0 = time.time()
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                data = H.read_all(fd)
            finally:
                os.close(fd)
        except OSError as e:
            t.c["read_" + H.ename(e.errno)] += 1
            if e.errno == errno.EIO:
                t.event(kind="eio", node=node, path=f"{pool}/{name}", t=t0)
            continue
        bad = check_page(data, name)
        t.c["reads_checked"] += 1
        if bad:
            t.c["reads_wrong"] += 1
            t.event(kind="wrong_bytes", node=node, path=f"{pool}/{name}", what=bad, t=t0)
        t.flush()
    t.flush(True)


def storm(workdir, node, seed, seconds):
    """Renames pages to NAME~rK (over whatever is there) and unlinks pages,
    as fast as it can, for seconds."""
    rng = random.Random(seed)
    t = Tally(workdir, f"s{node}.{seed}")
    mnt = os.path.join(workdir, f"node{node}", "mnt")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pool = os.path.join(mnt, rng.choice(FUSE_POOLS))
        try:
            names = os.listdir(pool)
        except OSError as e:
            t.c["listdir_" + H.ename(e.errno)] += 1
            time.sleep(0.05)
            continue
        for name in rng.sample(names, min(len(names), 16)):
            try:
                if rng.random() < 0.6:
                    os.rename(os.path.join(pool, name),
                              os.path.join(pool, name.split("~", 1)[0] + f"~r{rng.randrange(3)}"))
                    t.c["renames_ok"] += 1
                else:
                    os.unlink(os.path.join(pool, name))
                    t.c["unlinks_ok"] += 1
            except OSError as e:
                t.c["storm_" + H.ename(e.errno)] += 1
    t.flush(True)


def http_client(workdir, node, url, wid, seed, stop_at):
    """Reserves, writes (into the data file, as SGLang does) and confirms
    keys of pool 1/kv through one node, and reads back keys it looks up."""
    import metaclient as MC
    rng = random.Random(seed)
    t = Tally(workdir, f"h{node}.{wid}")
    data_file = os.path.join(workdir, "backing", f"hicache.{HTTP_RANK}.bin")
    c = MC.MetaClient(url, max_retries=0)
    n = 0
    inited = False
    while not stopping(stop_at):
        try:
            if not inited:
                c.initialize(HTTP_RANK, HTTP_PAGES)
                inited = True
            keys = sorted({f"h{rng.randrange(KEYS):04d}" for _ in range(rng.randint(1, 4))})
            got = c.reserve_and_allocate_page_indices(HTTP_RANK, [[k, ""] for k in keys])
            ok, release = [], []
            fd = os.open(data_file, os.O_WRONLY)
            try:
                for k, (flag, idx) in zip(keys, got):
                    if idx < 0:
                        t.c["http_refused"] += 1
                        time.sleep(0.02)
                        continue
                    if flag:  # already there
                        continue
                    n += 1
                    version = (node << 48) | (wid << 40) | n
                    H.write_all(fd, PF.make_page(k, version, PAGE), idx * PAGE)
                    ok.append([k, idx])
            finally:
                os.close(fd)
            c.confirm_write(HTTP_RANK, ok, release)
            t.c["http_confirmed"] += len(ok)
            look = [f"h{rng.randrange(KEYS):04d}" for _ in range(4)]
            t0 = time.monotonic()
            idxs = c.get_page_indices(HTTP_RANK, look)
            fd = os.open(data_file, os.O_RDONLY)
            try:
                for k, idx in zip(look, idxs):
                    if idx is None or idx < 0:
                        continue
                    data = os.pread(fd, PAGE, idx * PAGE)
                    bad = check_page(data, k)
                    if bad and time.monotonic() - t0 > LATE_READ_S:
                        t.c["http_late_reads"] += 1  # the quarantine may have ended
                        continue
                    t.c["http_reads_checked"] += 1
                    if bad:
                        t.c["http_reads_wrong"] += 1
                        t.event(kind="wrong_bytes", node=node, path=f"http {k} slot {idx}",
                                what=bad, t=time.time())
            finally:
                os.close(fd)
        except OSError as e:
            t.c["http_" + H.ename(e.errno)] += 1
            time.sleep(0.1)
        except Exception as e:  # noqa: BLE001 (requests' errors: node down, 5xx)
            t.c["http_err_" + type(e).__name__] += 1
            inited = False
            time.sleep(0.1)
        t.flush()
    t.flush(True)


def run_worker(kind, *args):
    """Runs one worker in a child process (fork); returns its Popen-like pid."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.setpgid(0, 0)
            kind(*args)
        except BaseException as e:  # noqa: BLE001
            print(f"worker {kind.__name__}{args[1:3]} died: {e!r}", file=sys.stderr, flush=True)
            code = 1
        os._exit(code)
    return pid


# ---------------------------------------------------------------- the cluster

class Cluster:
    def __init__(self, workdir):
        self.dir = workdir
        self.pg_dir = os.path.join(workdir, "pg")
        self.backing = os.path.join(workdir, "backing")
        self.uri = None
        self.nodes = []
        self.workers = []  # pids
        self.faults = []   # (wall time, kind, node or None, detail)
        self.fault_counts = Counter()
        self.lock = threading.Lock()
        os.makedirs(os.path.join(workdir, "events"), exist_ok=True)
        os.makedirs(self.backing, exist_ok=True)

    # ---- PostgreSQL
    def pg_start(self):
        r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "pg_test.sh"), "start",
                            self.pg_dir], capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"cannot start PostgreSQL: {r.stderr}")
        self.uri = r.stdout.strip()

    def pg_ctl(self, *args):
        bindir = sorted(os.listdir("/usr/lib/postgresql"), key=lambda v: int(v))[-1]
        cmd = [f"/usr/lib/postgresql/{bindir}/bin/pg_ctl", "-D", os.path.join(self.pg_dir, "data"),
               *args]
        if os.getuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--"] + cmd
        # The server it starts keeps whatever output it is given open: a
        # file, never a pipe that run() would wait on.
        with open(os.path.join(self.dir, "pg_ctl.log"), "a+") as out:
            start = out.tell()
            r = subprocess.run(cmd, stdout=out, stderr=out, stdin=subprocess.DEVNULL, timeout=120)
            out.seek(start)
            r.stderr = out.read()
        return r

    def psql(self, sql):
        return subprocess.run(["psql", self.uri, "-XAtqc", sql], capture_output=True, text=True,
                              timeout=60)

    def pg_stop(self):
        subprocess.run(["bash", os.path.join(ROOT, "scripts", "pg_test.sh"), "stop", self.pg_dir],
                       capture_output=True, timeout=120)

    # ---- nodes
    def node_dir(self, i):
        return os.path.join(self.dir, f"node{i}")

    def mount(self, i):
        d = self.node_dir(i)
        mnt = os.path.join(d, "mnt")
        os.makedirs(mnt, exist_ok=True)
        cmd = [BIN, "mount", self.backing, mnt, "--meta", self.uri, "--page-size", "64K",
               "--capacity", CAPACITY, "--verify", "always", "--log-file",
               os.path.join(d, "log")]
        if i < HTTP_NODES:
            cmd += ["--http", f"127.0.0.1:{self.ports[i]}"]
        env = dict(os.environ)
        for var, stem in (("ASAN_OPTIONS", "asan"), ("UBSAN_OPTIONS", "ubsan"),
                          ("LSAN_OPTIONS", "lsan")):
            cur = env.get(var, "")
            env[var] = (cur + ":" if cur else "") + f"log_path={os.path.join(d, stem)}"
        deadline = time.monotonic() + 60
        while True:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=90,
                               stdin=subprocess.DEVNULL, env=env)
            if r.returncode == 0 and H.is_mounted(mnt):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"node {i}: pagefs mount failed: {r.stdout}{r.stderr}")
            H.force_unmount(mnt, use_pagefs=False)
            time.sleep(0.5)
        pid = int(os.getxattr(mnt, "user.pagefs.pid"))
        self.pids[i] = pid
        return pid

    def start(self):
        self.pg_start()
        import metaclient as MC
        self.ports = [MC.free_port() for _ in range(HTTP_NODES)]
        self.pids = [None] * NODES
        self.stopped = set()
        for i in range(NODES):
            self.mount(i)
        mnt0 = os.path.join(self.node_dir(0), "mnt")
        for p in FUSE_POOLS:
            os.makedirs(os.path.join(mnt0, p), exist_ok=True)
        # the other nodes see the pools within the feed's bound
        for i in range(1, NODES):
            for p in FUSE_POOLS:
                if not H.wait_until(lambda: os.path.isdir(os.path.join(self.node_dir(i), "mnt", p)),
                                    timeout=10):
                    raise RuntimeError(f"node {i} does not see pool {p}")

    def fault(self, kind, node, detail=""):
        now = time.time()
        with self.lock:
            self.faults.append((now, kind, node, detail))
            self.fault_counts[kind] += 1
        say(f"fault {kind}" + (f" node {node}" if node is not None else "") +
            (f": {detail}" if detail else ""))

    def kill9(self, i):
        pid = self.pids[i]
        mnt = os.path.join(self.node_dir(i), "mnt")
        os.kill(pid, signal.SIGKILL)
        if not H.wait_until(lambda: not H.threads_alive(pid), timeout=2.0, interval=0.01):
            H.abort_fuse_connection(mnt)
        H.wait_until(lambda: not H.threads_alive(pid), timeout=15)
        H.force_unmount(mnt, use_pagefs=False)
        self.mount(i)

    def stop_node(self, i, seconds):
        """SIGSTOP, SIGCONT after seconds; a node that finds its lease gone
        serves nothing more (EIO) until remounted: as its operator would,
        remount it (kill -9: its workers may hold files open)."""
        pid = self.pids[i]
        log = os.path.join(self.node_dir(i), "log")
        seen = os.path.getsize(log)
        with self.lock:
            self.stopped.add(pid)
        os.kill(pid, signal.SIGSTOP)
        time.sleep(seconds)
        os.kill(pid, signal.SIGCONT)
        with self.lock:
            self.stopped.discard(pid)

        def removed():
            with open(log, errors="replace") as f:
                f.seek(seen)
                return "lease on index" in f.read()
        if H.wait_until(removed, timeout=5.0, interval=0.1):
            say(f"node {i} lost its lease while stopped: mounting it again")
            self.kill9(i)

    def pg_restart(self):
        r = self.pg_ctl("restart", "-m", "immediate", "-w", "-t", "60", "-l",
                        os.path.join(self.pg_dir, "server.log"))
        if r.returncode != 0:
            raise RuntimeError(f"pg_ctl restart failed: {r.stderr}")

    def pg_terminate(self, i):
        r = self.psql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
                      f"application_name LIKE 'pagefs pid {self.pids[i]} on %'")
        return r.stdout.strip() or r.stderr.strip()

    def node_alive(self, i):
        return self.pids[i] and H.pid_alive(self.pids[i])

    # ---- cleanup: always, whatever state things are in
    def cleanup(self):
        for pid in self.workers:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
        # every node continued (stopped by a fault, or from outside): a
        # stopped daemon would keep its umount waiting
        for pid in set(getattr(self, "stopped", ())) | set(getattr(self, "pids", None) or ()):
            try:
                if pid:
                    os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
        for i in range(NODES):
            mnt = os.path.join(self.node_dir(i), "mnt")
            if H.is_mounted(mnt):
                r = subprocess.run([BIN, "umount", "--timeout", "30", mnt], capture_output=True,
                                   timeout=60)
                if r.returncode != 0:
                    H.force_unmount(mnt, use_pagefs=False)
            pid = (getattr(self, "pids", None) or [None] * NODES)[i]
            if pid and not H.wait_pid_gone(pid, 10):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        # Killed workers end at once, unless one waits in the kernel on a
        # wedged mount: 30 s at most for all, then go on (scripts/nemesis.sh
        # ends what is left).
        deadline = time.monotonic() + 30
        for pid in self.workers:
            while True:
                try:
                    done, _ = os.waitpid(pid, os.WNOHANG)
                except OSError:
                    break
                if done or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        self.pg_stop()


# ---------------------------------------------------------------- the run

# Signals received (SIGTERM): the handler raises KeyboardInterrupt, which
# Python drops when it lands in a callback (an at-fork hook, a __del__);
# the run's loops check this too.
INTERRUPTED = []


def check_interrupted():
    if INTERRUPTED:
        raise KeyboardInterrupt


def nemesis(cl, rng, stop_at, errors):
    """Injects one fault at a time at random intervals until stop_at."""
    burst = 0
    unknown = set(FAULTS) - set(ALL_FAULTS)
    if unknown:
        errors.append(f"unknown fault(s) {sorted(unknown)}: choose from {', '.join(ALL_FAULTS)}")
        return
    while FAULTS and time.monotonic() + 1 < stop_at:
        check_interrupted()
        time.sleep(rng.uniform(1.0, 5.0))
        check_interrupted()
        if time.monotonic() + 1 >= stop_at:
            break
        kind = rng.choice(FAULTS)
        node = rng.randrange(NODES)
        try:
            if kind == "kill9":
                cl.fault(kind, node, f"pid {cl.pids[node]}")
                cl.kill9(node)
            elif kind == "stop":
                cl.fault(kind, node, f"pid {cl.pids[node]} for {STOP_S:.0f} s")
                cl.stop_node(node, STOP_S)
            elif kind == "pg_restart":
                cl.fault(kind, None)
                cl.pg_restart()
            elif kind == "pg_terminate":
                cl.fault(kind, node, f"{cl.pg_terminate(node)} connection(s)")
            elif kind == "storm":
                cl.fault(kind, node)
                pid = run_worker(storm, cl.dir, node, rng.randrange(1 << 30), 3.0)
                cl.workers.append(pid)
            elif kind == "http_burst" and HTTP_NODES >= 2:
                cl.fault(kind, None, "nodes 0 and 1")
                burst += 1
                end = min(stop_at, time.monotonic() + 3.0)
                for n in range(2):
                    pid = run_worker(http_client, cl.dir, n, f"http://127.0.0.1:{cl.ports[n]}",
                                     100 + burst * 2 + n, rng.randrange(1 << 30), end)
                    cl.workers.append(pid)
        except Exception as e:  # noqa: BLE001
            errors.append(f"fault {kind} on node {node} failed: {e!r}")
            say(errors[-1])
            for i in range(NODES):
                if not cl.node_alive(i):
                    try:
                        cl.mount(i)
                    except Exception as e2:  # noqa: BLE001
                        errors.append(f"node {i} cannot be mounted again: {e2!r}")
                        return


# A daemon's log line (meta/log.c): time, pid, level, subsystem, message:
#   2026-12-05T07:11:01.845Z pagefs[11569] error meta/page: checksum mismatch: ...
LOG_LINE = re.compile(r"^(?P<time>\S+Z) pagefs\[(?P<pid>\d+)\] (?P<level>\w+) "
                      r"(?P<subsystem>[\w/]+): (?P<msg>.*)$")


def node_log_lines(cl, i, pattern):
    """(time, message) of each line of node i's log whose message holds pattern."""
    out = []
    try:
        with open(os.path.join(cl.node_dir(i), "log"), errors="replace") as f:
            for line in f:
                m = LOG_LINE.match(line.rstrip("\n"))
                if m and pattern in m.group("msg"):
                    when = m.group("time")
                    t = calendar.timegm(time.strptime(when[:19], "%Y-%m-%dT%H:%M:%S")) + \
                        float("0." + when[20:23])
                    out.append((t, m.group("msg")))
    except OSError:
        pass
    return out


def explain(cl, t, node):
    """The fault that most likely let foreign bytes under a page read at t on
    node: the latest before t (within a minute), preferring one on node."""
    before = [f for f in cl.faults if f[0] <= t and t - f[0] < 60]
    if not before:
        return None

    def one(f):
        return f"{f[1]}" + (f" of node {f[2]}" if f[2] is not None else "") + \
            f" {t - f[0]:.1f} s before"
    why = one(before[-1])
    mine = [f for f in before if f[2] == node and t - f[0] < 30]
    if mine and mine[-1] is not before[-1]:
        why += f" (this node's last: {one(mine[-1])})"
    return why


def mismatch_kind(behind, t, slot):
    """Which of the two ways foreign bytes got under a page read at t:
    'mirror' when its drop found the slot held by another page in the index
    (the reader's mirror was behind the index: a rule of the shared index
    failed), 'two writers' when the index still gave the slot to the page
    (someone else wrote into it: the window of docs/NEMESIS.md, "What is
    left"). behind: (time, message) of the node's "behind the index" lines."""
    for bt, msg in behind:
        if 0 <= bt - t < 2 and f" at slot {slot} " in msg:
            return "mirror"
    return "two writers"


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    workdir = os.path.abspath(sys.argv[1])
    rng = random.Random(SEED)
    say(f"seed {SEED}, {SECONDS:.0f} s, {NODES} nodes, faults {','.join(FAULTS)}, in {workdir}")
    say(f"reproduce: NEMESIS_SEED={SEED} NEMESIS_SECONDS={SECONDS:.0f} scripts/nemesis.sh")
    cl = Cluster(workdir)
    errors = []
    def on_signal(sig, frame):
        # Once: a second SIGTERM (timeout(1) signals the process group, then
        # scripts/nemesis.sh signals this process) must not cut the cleanup.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        INTERRUPTED.append(sig)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    fsck_ok = False
    try:
        cl.start()
        say(f"PostgreSQL at {cl.uri}; nodes {cl.pids}")
        stop_at = time.monotonic() + SECONDS
        for i in range(NODES):
            for w in range(2):
                cl.workers.append(run_worker(fuse_writer, workdir, i, w, rng.randrange(1 << 30),
                                             stop_at))
            for w in range(2):
                cl.workers.append(run_worker(fuse_reader, workdir, i, w, rng.randrange(1 << 30),
                                             stop_at))
        for i in range(min(HTTP_NODES, NODES)):
            cl.workers.append(run_worker(http_client, workdir, i,
                                         f"http://127.0.0.1:{cl.ports[i]}", 0,
                                         rng.randrange(1 << 30), stop_at))
        nemesis(cl, rng, stop_at, errors)
        while time.monotonic() < stop_at:
            check_interrupted()
            time.sleep(0.2)
        # workers end at stop_at; one stuck in a FUSE call past that is a hang
        deadline = stop_at + 60
        for pid in list(cl.workers):
            while True:
                try:
                    done, status = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    break
                if done:
                    if status != 0:
                        errors.append(f"a worker (pid {pid}) exited with status {status}")
                    break
                if time.monotonic() > deadline:
                    errors.append(f"a worker (pid {pid}) still runs 60 s after the end: a hang")
                    break
                check_interrupted()
                time.sleep(0.1)
        # every node unmounts cleanly, then fsck
        for i in range(NODES):
            mnt = os.path.join(cl.node_dir(i), "mnt")
            r = subprocess.run([BIN, "umount", "--timeout", "60", mnt], capture_output=True,
                               text=True, timeout=90)
            if r.returncode != 0:
                errors.append(f"node {i}: pagefs umount failed: {r.stdout}{r.stderr}")
        r = subprocess.run([BIN, "fsck", cl.backing, "--meta", cl.uri, "--verify-data"],
                           capture_output=True, text=True, timeout=300)
        fsck_ok = r.returncode == 0
        # A key confirmed over HTTP has no checksum until pagefs reads it
        # once (DESIGN.md, "The 3FS key protocol"): that alone is no fault.
        kinds = {line.split()[0] for line in r.stdout.splitlines()
                 if line[:1].isalpha() and not line.startswith(("pagefs", "Run "))}
        if not fsck_ok and kinds == {"checksum-missing"} and \
                all(f"of pool {HTTP_RANK}/kv" in line for line in r.stdout.splitlines()
                    if line.startswith("checksum-missing")):
            say(f"fsck: only keys confirmed over HTTP and never read lack a checksum "
                f"({r.stdout.count('checksum-missing')}): clean")
            fsck_ok = True
        if not fsck_ok:
            errors.append(f"pagefs fsck is not clean:\n{r.stdout}{r.stderr}")
        else:
            say("fsck: " + (r.stdout.strip().splitlines() or ["clean"])[-1])
    except KeyboardInterrupt:
        errors.append("interrupted")
    except Exception as e:  # noqa: BLE001
        errors.append(f"the run failed: {e!r}")
    finally:
        cl.cleanup()
    return report(cl, errors)


def report(cl, errors):
    total = Counter()
    events = []
    edir = os.path.join(cl.dir, "events")
    for name in sorted(os.listdir(edir)):
        p = os.path.join(edir, name)
        try:
            if name.endswith(".json"):
                with open(p) as f:
                    total.update(json.load(f))
            elif name.endswith(".jsonl"):
                with open(p) as f:
                    events += [json.loads(line) for line in f if line.strip()]
        except (OSError, ValueError):
            pass
    wrong = [e for e in events if e["kind"] == "wrong_bytes"]
    for i in range(NODES):
        d = cl.node_dir(i)
        for name in sorted(os.listdir(d)) if os.path.isdir(d) else ():
            if "san." in name and os.path.getsize(os.path.join(d, name)):
                errors.append(f"node {i}: sanitizer report {os.path.join(d, name)}")
    drops = []
    skipped = 0
    for i in range(NODES):
        behind = node_log_lines(cl, i, "(the mirror was behind the index)")
        skipped += len(node_log_lines(cl, i, "feed: the row of page"))
        for t, msg in node_log_lines(cl, i, "checksum mismatch"):
            slot = re.search(r"\(slot (\d+)\)", msg)
            drops.append((t, i, msg, mismatch_kind(behind, t, slot.group(1) if slot else "?")))
    drops.sort()
    print("\n==== nemesis summary ====")
    print(f"seed {SEED}, {SECONDS:.0f} s, {NODES} nodes")
    print("faults injected: " + (", ".join(f"{k} {v}" for k, v in sorted(cl.fault_counts.items()))
                                 or "none") + f" (total {sum(cl.fault_counts.values())})")
    reads = total["reads_checked"] + total["http_reads_checked"]
    print(f"reads checked: {reads} (FUSE {total['reads_checked']}, HTTP "
          f"{total['http_reads_checked']}); wrong bytes: {len(wrong)}")
    print(f"writes committed: FUSE {total['writes_ok']}, HTTP keys confirmed "
          f"{total['http_confirmed']}; renames {total['renames_ok']}, unlinks {total['unlinks_ok']}")
    other = {k: v for k, v in total.items() if k not in (
        "reads_checked", "http_reads_checked", "writes_ok", "http_confirmed", "renames_ok",
        "unlinks_ok", "reads_wrong", "http_reads_wrong")}
    print("errors seen by clients: " + (", ".join(f"{k} {v}" for k, v in sorted(other.items()))
                                        or "none"))
    print(f"checksum mismatches (EIO, page dropped): {len(drops)}")
    unexplained = 0
    by_fault, by_kind = Counter(), Counter()
    for t, i, msg, kind in drops:
        why = explain(cl, t, i)
        if not why:
            unexplained += 1
        by_fault[why.split()[0] if why else "none"] += 1
        by_kind[kind] += 1
        print(f"  {utc(t)} node {i}: {msg[:120]} [{kind}] <- {why or 'NO FAULT BEFORE IT'}")
    if drops:
        print("checksum mismatches by the fault before them: " +
              ", ".join(f"{k} {v}" for k, v in sorted(by_fault.items())))
        print("checksum mismatches by kind: " +
              ", ".join(f"{k} {v}" for k, v in sorted(by_kind.items())) +
              " (mirror: the reader's mirror was behind the index; two writers: the index "
              "still gave the slot to the page)")
    print(f"feed rows read before the node's own change and left alone: {skipped}")
    taken = sum(len(node_log_lines(cl, i, "holds; node")) for i in range(NODES))
    print(f"commits refused because another page held their slot: {taken}")
    for e in wrong[:20]:
        print(f"  WRONG BYTES {utc(e['t'])} node {e['node']} {e['path']}: {e['what']} "
              f"<- {explain(cl, e['t'], e['node']) or 'no fault before it'}")
    for e in errors:
        print(f"  ERROR: {e}")
    failed = len(wrong) + len(errors) + unexplained
    print(f"nemesis: {'PASS' if not failed else 'FAIL'} (wrong bytes {len(wrong)}, unexplained "
          f"checksum mismatches {unexplained}, errors {len(errors)})")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
