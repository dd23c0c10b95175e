"""Helpers for the pagefs integration tests: mounting, cleanup, errno checks,
other-process probes. Everything here works on the real mounted filesystem.
"""
import contextlib
import errno
import json
import os
import pathlib
import shlex
import signal
import stat
import subprocess
import sys
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent
WORKLOAD = HERE / "workload.py"
PAGEFS_BIN = os.environ.get("PAGEFS_BIN", "/work/main/build/pagefs")
PYTHON = sys.executable

MOUNT_TIMEOUT = float(os.environ.get("PAGEFS_IT_MOUNT_TIMEOUT", "60"))
# A command put before PAGEFS_BIN for `pagefs mount` (the daemon is its
# fork), e.g. valgrind (scripts/valgrind.sh); "{dir}" in it becomes the
# mount's temp dir, where reports are looked for (valgrind.PID).
WRAPPER = shlex.split(os.environ.get("PAGEFS_WRAPPER", ""))
# How long teardown waits for a daemon to exit after its unmount before
# SIGKILL (valgrind's leak check at exit needs more than the default).
EXIT_WAIT = float(os.environ.get("PAGEFS_IT_EXIT_WAIT", "5"))
# A PostgreSQL server for engine=postgres tests (scripts/pg_test.sh prints one).
PG_URI = os.environ.get("PAGEFS_TEST_PG_URI", "")
# Why the PostgreSQL tests do not run in this pass, or "" when they do.
PG_SKIP = ("PAGEFS_TEST_PG_URI is unset: no PostgreSQL server (scripts/test.sh starts one)"
           if not PG_URI else os.environ.get("PAGEFS_IT_PG_SKIP", ""))

# Every Mount and child process alive in this test run; the watchdog and the
# teardowns kill what is left here.
LIVE_MOUNTS = []
CHILDREN = []
_lock = threading.Lock()


def ename(e):
    return errno.errorcode.get(e, str(e)) if isinstance(e, int) else str(e)


# ---------------------------------------------------------------- processes

def pid_alive(pid):
    """True while pid is a live (not zombie) process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            st = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = st[st.rindex(")") + 2:].split()[0]
    return state not in ("Z", "X")


def threads_alive(pid):
    """Threads of pid that are not zombies (a killed process whose main
    thread is a zombie may still have a thread stuck in the kernel)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out = []
    for t in tids:
        try:
            with open(f"/proc/{pid}/task/{t}/stat") as f:
                st = f.read()
        except OSError:
            continue
        if st[st.rindex(")") + 2:].split()[0] not in ("Z", "X"):
            out.append(int(t))
    return out


# pids of daemons that kill -9 left stuck in the kernel until their FUSE
# connection was aborted (see Mount.kill9).
KILL9_WEDGED = []


def wait_pid_gone(pid, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not pid_alive(pid):
            return True
        time.sleep(0.02)
    return not pid_alive(pid)


def pids_with_arg(arg):
    """Processes (other than us) whose command line has `arg` as a word."""
    out = []
    arg = os.fsencode(str(arg))
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                words = f.read().split(b"\0")
        except OSError:
            continue
        if arg in words and pid_alive(int(d)):
            out.append(int(d))
    return out


def spawn(args, **kw):
    """Popen registered for killing at teardown."""
    p = subprocess.Popen(args, **kw)
    with _lock:
        CHILDREN.append(p)
    return p


def kill_children():
    with _lock:
        kids = list(CHILDREN)
        CHILDREN.clear()
    for p in kids:
        if p.poll() is None:
            try:
                p.kill()
            except OSError:
                pass
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


def workload(*args, timeout=60, check=True):
    """Runs workload.py in another process and returns its JSON answer."""
    r = subprocess.run([PYTHON, str(WORKLOAD), *map(str, args)], capture_output=True,
                       text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"workload {args} failed with {r.returncode}: {r.stderr}")
    return json.loads(r.stdout) if r.stdout.strip() else None


def stat_elsewhere(path):
    """os.stat of path from another process: dict with ok/errno/size/mode/ino."""
    return workload("stat", os.fsencode(str(path)).hex())


def read_elsewhere(path):
    """Reads path from another process: dict with ok/errno/data (hex)."""
    r = workload("read", os.fsencode(str(path)).hex())
    if r.get("ok"):
        r["data"] = bytes.fromhex(r["data"])
    return r


def listdir_elsewhere(path):
    r = workload("listdir", os.fsencode(str(path)).hex())
    return [bytes.fromhex(n) for n in r]


# ------------------------------------------------------------------- mounts

def _unescape_mount_path(s):
    out, i = "", 0
    while i < len(s):
        if s[i] == "\\" and len(s[i + 1:i + 4]) == 3 and s[i + 1:i + 4].isdigit():
            out += chr(int(s[i + 1:i + 4], 8))
            i += 4
        else:
            out += s[i]
            i += 1
    return out


def mounts_table():
    """[(mountpoint, fstype)] from /proc/self/mounts (works for dead FUSE mounts)."""
    res = []
    with open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3:
                res.append((_unescape_mount_path(parts[1]), parts[2]))
    return res


def is_mounted(path):
    p = os.path.abspath(str(path))
    return any(mp == p for mp, _ in mounts_table())


FUSECTL = "/sys/fs/fuse/connections"


def abort_fuse_connection(path):
    """Aborts the FUSE connection mounted at path (fusectl `abort`), so that
    requests still waiting on a dead daemon fail with ENOTCONN. Needed after
    kill -9: a daemon thread can be stuck in the kernel inside
    fuse_lowlevel_notify_inval_entry (it waits for a directory lock that a
    request of a blocked client holds), so the killed daemon never closes
    /dev/fuse and its clients would wait forever. Returns True if aborted."""
    p = os.path.abspath(str(path))
    dev = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            if len(parts) > 4 and _unescape_mount_path(parts[4]) == p:
                dev = parts[2]
    if not dev:
        return False
    if not os.path.isdir(FUSECTL) or not os.listdir(FUSECTL):
        subprocess.run(["mount", "-t", "fusectl", "none", FUSECTL], capture_output=True,
                       timeout=30)
    try:
        with open(os.path.join(FUSECTL, dev.split(":")[1], "abort"), "w") as f:
            f.write("1")
        return True
    except OSError:
        return False


def force_unmount(path, use_pagefs=True):
    """pagefs umount, then fusermount3 -u, then umount -l; returns the log of tries."""
    path = str(path)
    tries = []
    steps = []
    if use_pagefs and os.path.exists(PAGEFS_BIN):
        steps.append([PAGEFS_BIN, "umount", path])
    steps += [["fusermount3", "-u", path], ["umount", "-l", path]]
    for cmd in steps:
        if not is_mounted(path):
            break
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
            tries.append(f"{' '.join(cmd)} -> {r.returncode} {r.stderr.strip()}")
        except subprocess.TimeoutExpired:
            tries.append(f"{' '.join(cmd)} -> timed out")
    return tries


def run_pagefs(*args, timeout=60, env=None):
    """Runs the pagefs binary; returns CompletedProcess (text)."""
    return subprocess.run([PAGEFS_BIN, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL)


def describe(r):
    return (f"exit {r.returncode}\n--- stdout ---\n{r.stdout}\n--- stderr ---\n{r.stderr}")


def wrapped(cmd, dir):
    """cmd behind PAGEFS_WRAPPER, its "{dir}" made dir (where its reports go)."""
    return [a.replace("{dir}", str(dir)) for a in WRAPPER] + list(cmd)


def valgrind_reports(dir):
    """valgrind logs (PAGEFS_WRAPPER) in dir, one per process, that show an
    error or lack the summary (the process was killed before it exited)."""
    out = []
    for p in sorted(pathlib.Path(dir).glob("valgrind.*")):
        try:
            txt = p.read_text(errors="replace")
        except OSError:
            continue
        if "ERROR SUMMARY: 0 errors" not in txt:
            why = "errors" if "ERROR SUMMARY:" in txt else "no summary: killed before exit?"
            out.append(f"=== {p.name} ({why}) ===\n{txt[-20000:]}")
    return out


class Mount:
    """One pagefs mount in its own temp dir: DIR/backing, DIR/mnt, DIR/index.db."""

    def __init__(self, factory, dir, opts, backing=None, meta=None):
        self.factory = factory
        self.dir = pathlib.Path(dir)
        self.backing = pathlib.Path(backing) if backing else self.dir / "backing"
        self.mnt = self.dir / "mnt"
        self.index = self.dir / "index.db"
        self.meta = meta or f"sqlite:{self.index}"
        self.log = self.dir / "log"
        self.opts = list(opts)
        self.pid = None
        self.pids = set()
        self.mounted = False
        self.outputs = []  # (cmd, CompletedProcess) of mount attempts
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mnt.mkdir(parents=True, exist_ok=True)

    # -- environment for the daemon: ASan/UBSan reports go to files we check
    def env(self):
        env = dict(os.environ)
        for var, stem in (("ASAN_OPTIONS", "asan"), ("UBSAN_OPTIONS", "ubsan"),
                          ("LSAN_OPTIONS", "lsan"), ("TSAN_OPTIONS", "tsan")):
            cur = env.get(var, "")
            if "log_path" not in cur:
                env[var] = (cur + ":" if cur else "") + f"log_path={self.dir / stem}"
        return env

    def sanitizer_reports(self):
        out = []
        for p in sorted(self.dir.glob("*san.*")):
            try:
                txt = p.read_text(errors="replace")
            except OSError:
                continue
            if txt.strip():
                out.append(f"=== {p.name} ===\n{txt}")
        return out + valgrind_reports(self.dir)

    def attempt(self, backing=None, mnt=None, meta=None, opts=None, log=None):
        """Runs `pagefs mount` and returns the CompletedProcess, whatever happened."""
        mnt = pathlib.Path(mnt) if mnt else self.mnt
        self.factory.track_mountpoint(mnt)
        cmd = [PAGEFS_BIN, "mount", str(backing or self.backing), str(mnt),
               "--meta", meta or self.meta, *(self.opts if opts is None else opts),
               "--log-file", str(log or self.log)]
        try:
            r = subprocess.run(wrapped(cmd, self.dir), capture_output=True, text=True,
                               timeout=MOUNT_TIMEOUT, env=self.env(), stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            r = subprocess.CompletedProcess(cmd, -999, e.stdout or "", (e.stderr or "")
                                            + f"\n[test] mount did not return in {MOUNT_TIMEOUT}s")
            if isinstance(r.stdout, bytes):
                r.stdout = r.stdout.decode(errors="replace")
            if isinstance(r.stderr, bytes):
                r.stderr = r.stderr.decode(errors="replace")
        self.outputs.append((cmd, r))
        if is_mounted(mnt):
            for pid in pids_with_arg(mnt):
                self.factory.track_pid(pid)
        return r

    def start(self, *opts):
        """Mounts (with opts if given, else the opts of this Mount); asserts success."""
        if opts:
            self.opts = list(opts)
        r = self.attempt()
        assert r.returncode == 0, f"pagefs mount failed: {describe(r)}\n--- log ---\n{self.log_tail()}"
        assert is_mounted(self.mnt), (
            f"pagefs mount exited 0 but {self.mnt} is not a mount point when it returned\n{describe(r)}")
        self.mounted = True
        with _lock:
            if self not in LIVE_MOUNTS:
                LIVE_MOUNTS.append(self)
        self.pid = self._find_pid()
        if self.pid:
            self.pids.add(self.pid)
            self.factory.track_pid(self.pid)
        return self

    def _find_pid(self):
        try:
            return int(os.getxattr(self.mnt, "user.pagefs.pid"))
        except (OSError, ValueError):
            pids = pids_with_arg(self.mnt)
            return pids[0] if len(pids) == 1 else None

    def umount(self, check=True):
        """`pagefs umount MNT`; waits (up to 15 s) for the daemon to be gone."""
        r = run_pagefs("umount", self.mnt, timeout=60)
        if check:
            assert r.returncode == 0, f"pagefs umount {self.mnt} failed: {describe(r)}"
            assert not is_mounted(self.mnt), f"pagefs umount returned 0 but {self.mnt} is still mounted"
        if self.pid:
            gone = wait_pid_gone(self.pid, max(15, EXIT_WAIT))
            if check:
                assert gone, f"daemon pid {self.pid} still alive 15 s after pagefs umount"
        self.mounted = is_mounted(self.mnt)
        return r

    def remount(self, *opts):
        self.umount()
        return self.start(*opts)

    def kill9(self):
        """kill -9 the daemon, then clear the dead mount (fusermount3 -u / umount -l)."""
        pid = self.pid or self._find_pid()
        assert pid, "cannot find the daemon's pid (user.pagefs.pid xattr or /proc)"
        os.kill(pid, signal.SIGKILL)
        # A killed daemon can hang in the kernel for good (see
        # abort_fuse_connection); an operator would abort the connection.
        if not wait_until(lambda: not threads_alive(pid), timeout=1.0, interval=0.01):
            KILL9_WEDGED.append(pid)
            abort_fuse_connection(self.mnt)
        assert wait_until(lambda: not threads_alive(pid), timeout=15), \
            f"daemon {pid} survived SIGKILL for 15 s"
        force_unmount(self.mnt, use_pagefs=False)
        assert not is_mounted(self.mnt), f"could not clear the dead mount {self.mnt}"
        self.mounted = False

    def emergency_kill(self):
        for pid in set(self.pids) | set(pids_with_arg(self.mnt)):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        abort_fuse_connection(self.mnt)
        subprocess.run(["umount", "-l", str(self.mnt)], capture_output=True, timeout=30)

    def log_tail(self, n=30000):
        try:
            txt = self.log.read_text(errors="replace")
        except OSError:
            return "(no log file)"
        return txt[-n:]

    # -- tree helpers
    def path(self, *parts):
        return self.mnt.joinpath(*map(str, parts))

    def pool(self, rank=0, ns="kv"):
        p = self.path(rank, ns)
        os.makedirs(p, exist_ok=True)
        return p

    def stats(self):
        raw = os.getxattr(self.mnt, "user.pagefs.stats")
        try:
            return json.loads(raw)
        except ValueError as e:
            raise AssertionError(f"user.pagefs.stats is not JSON ({e}): {raw[:500]!r}")

    def statvfs_free_total(self):
        s = os.statvfs(self.mnt)
        return s.f_bfree * s.f_frsize, s.f_blocks * s.f_frsize


def psql(sql, uri=None, timeout=60):
    """Runs SQL with psql on the test server (or uri); returns stdout, asserts success."""
    r = subprocess.run(["psql", uri or PG_URI, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                        "-c", sql], capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"psql {sql!r} failed: {r.stderr}"
    return r.stdout.strip()


def pg_schema_uri(schema):
    """The test server's URI with search_path set to schema."""
    sep = "&" if "?" in PG_URI else "?"
    return f"{PG_URI}{sep}options=-csearch_path%3D{schema}"


def new_pg_index(tag):
    """A fresh PostgreSQL index: a new schema on the test server. (schema, uri)."""
    schema = f"it_{tag}_{os.getpid()}_{time.monotonic_ns()}"
    psql(f"CREATE SCHEMA {schema}")
    return schema, pg_schema_uri(schema)


class MountFactory:
    """The `mount` fixture: call it to get a mounted Mount in a fresh temp dir.
    engine="postgres" gives each Mount without meta= its own PostgreSQL index."""

    def __init__(self, root, item, engine="sqlite"):
        self.root = pathlib.Path(root)
        self.item = item
        self.engine = engine
        self.pg_schemas = []
        self.mounts = []
        self.mountpoints = []
        self.tmpfs = []
        self.pids = set()
        self.n = 0

    def new_dir(self):
        self.n += 1
        name = "".join(c if c.isalnum() else "_" for c in self.item.name)[:60]
        d = self.root / f"{name}-{os.getpid()}-{time.monotonic_ns()}-{self.n}"
        d.mkdir(parents=True)
        return d

    def pg_index(self):
        """A new PostgreSQL index URI, dropped at teardown."""
        schema, uri = new_pg_index(self.n)
        self.pg_schemas.append(schema)
        return uri

    def drop_pg_schemas(self):
        problems = []
        for schema in self.pg_schemas:
            try:
                psql(f"SET client_min_messages=warning; DROP SCHEMA {schema} CASCADE")
            except (AssertionError, subprocess.TimeoutExpired) as e:
                problems.append(f"cannot drop schema {schema}: {e}")
        self.pg_schemas.clear()
        return problems

    def __call__(self, *opts, backing=None, meta=None, start=True):
        if meta is None and self.engine == "postgres":
            meta = self.pg_index()
        m = Mount(self, self.new_dir(), opts, backing=backing, meta=meta)
        self.mounts.append(m)
        if start:
            m.start()
        return m

    def track_mountpoint(self, p):
        p = os.path.abspath(str(p))
        if p not in self.mountpoints:
            self.mountpoints.append(p)

    def track_pid(self, pid):
        self.pids.add(pid)

    def mount_tmpfs(self, path, size):
        path = pathlib.Path(path)
        path.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, f"cannot mount a tmpfs at {path}: {r.stderr}"
        self.tmpfs.append(str(path))
        return path

    def cleanup(self):
        """Unmounts everything, kills every daemon; returns problems found."""
        problems = []
        kill_children()
        for mp in reversed(self.mountpoints):
            if is_mounted(mp):
                tries = force_unmount(mp)
                if is_mounted(mp):
                    problems.append(f"could not unmount {mp}: {tries}")
        for m in self.mounts:
            for pid in set(m.pids) | set(pids_with_arg(m.mnt)):
                self.pids.add(pid)
        for pid in self.pids:
            if pid_alive(pid) and not wait_pid_gone(pid, EXIT_WAIT):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
                wait_pid_gone(pid, 10)
        for mp in reversed(self.mountpoints):
            if is_mounted(mp):
                subprocess.run(["umount", "-l", mp], capture_output=True, timeout=30)
        for t in reversed(self.tmpfs):
            if is_mounted(t):
                subprocess.run(["umount", "-l", t], capture_output=True, timeout=30)
        with _lock:
            for m in self.mounts:
                if m in LIVE_MOUNTS:
                    LIVE_MOUNTS.remove(m)
        return problems


def unmount_all_under(root):
    """Lazily unmounts every mount below root (deepest first)."""
    root = os.path.abspath(str(root))
    mps = [mp for mp, _ in mounts_table() if mp == root or mp.startswith(root + "/")]
    for mp in sorted(mps, key=len, reverse=True):
        subprocess.run(["umount", "-l", mp], capture_output=True, timeout=30)
    return mps


# -------------------------------------------------------------- assertions

def expect_errno(want, fn, *args, what=None, **kw):
    """Calls fn(*args); asserts it raises OSError with errno in `want`."""
    wants = want if isinstance(want, (tuple, list, set)) else (want,)
    label = what or f"{getattr(fn, '__name__', fn)}{tuple(str(a) for a in args)}"
    try:
        res = fn(*args, **kw)
    except OSError as e:
        assert e.errno in wants, (
            f"{label}: expected {'/'.join(ename(w) for w in wants)}, got "
            f"{ename(e.errno)} ({e.strerror})")
        return e
    raise AssertionError(f"{label}: expected {'/'.join(ename(w) for w in wants)}, "
                         f"but it succeeded (returned {res!r})")


@contextlib.contextmanager
def opened(path, flags=os.O_RDONLY, mode=0o644):
    fd = os.open(path, flags, mode)
    try:
        yield fd
    finally:
        os.close(fd)


def write_all(fd, data, offset=None):
    view = memoryview(data)
    pos = 0
    while pos < len(view):
        if offset is None:
            n = os.write(fd, view[pos:])
        else:
            n = os.pwrite(fd, view[pos:], offset + pos)
        assert n > 0, f"write returned {n}"
        pos += n


def read_all(fd, chunk=1 << 20):
    out = bytearray()
    while True:
        b = os.read(fd, chunk)
        if not b:
            return bytes(out)
        out += b


def write_page(path, data, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC):
    """One open/write/close, as a cache client does."""
    fd = os.open(path, flags, 0o644)
    try:
        write_all(fd, data)
    except BaseException:
        close_quietly(fd)
        raise
    os.close(fd)


def read_page(path):
    with opened(path) as fd:
        return read_all(fd)


def assert_bytes_equal(got, want, what):
    if got == want:
        return
    if len(got) != len(want):
        first = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]),
                     min(len(got), len(want)))
        raise AssertionError(f"{what}: got {len(got)} bytes, expected {len(want)}; "
                             f"first difference at byte {first}")
    first = next(i for i in range(len(got)) if got[i] != want[i])
    raise AssertionError(f"{what}: {len(got)} bytes but they differ from byte {first} on "
                         f"(got {got[first:first + 8]!r}, expected {want[first:first + 8]!r})")


def xattr_str(path, name):
    v = os.getxattr(path, name)
    return v.decode()


def xattr_int(path, name):
    v = os.getxattr(path, name)
    s = v.decode(errors="replace")
    assert s.isdigit(), f"xattr {name} of {path} should be plain decimal, got {v!r}"
    return int(s)


def counter(js, name):
    """A counter from a stats JSON: the top-level value, else the one in a
    "totals" object, else the sum over every nested object that has it
    (per pool)."""
    if isinstance(js, dict):
        if isinstance(js.get(name), (int, float)):
            return js[name]
        tot = js.get("totals")
        if isinstance(tot, dict) and isinstance(tot.get(name), (int, float)):
            return tot[name]
    total, found = 0, False

    def walk(o):
        nonlocal total, found
        if isinstance(o, dict):
            if name in o and isinstance(o[name], (int, float)):
                total += o[name]
                found = True
                return
            for v in o.values():
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)
    walk(js)
    assert found, f"no counter {name!r} in stats JSON: {json.dumps(js)[:1000]}"
    return total


def close_quietly(fd):
    """os.close; returns the errno it failed with, or None."""
    try:
        os.close(fd)
        return None
    except OSError as e:
        return e.errno


def try_write_page(path, data):
    """Writes a page in one open/write/close. Returns None on success, or
    (stage, errno) of the first step that failed: "open", "write" or
    "close" (after a failed write the descriptor is still closed)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError as e:
        return ("open", e.errno)
    try:
        write_all(fd, data)
    except OSError as e:
        close_quietly(fd)  # the close may report the error again
        return ("write", e.errno)
    try:
        os.close(fd)
    except OSError as e:
        return ("close", e.errno)
    return None


def wait_until(pred, timeout=5.0, interval=0.05):
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() >= end:
            return v
        time.sleep(interval)


def mode_str(m):
    return stat.filemode(m)
