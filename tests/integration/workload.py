"""Other processes for the integration tests (run as `python3 workload.py CMD ...`).

  stat HEXPATH            -> JSON {ok, errno, size, mode, ino}
  read HEXPATH            -> JSON {ok, errno, data(hex)}
  listdir HEXPATH         -> JSON [hex names]
  unlink HEXPATH HEXOTHER -> JSON {ok, errno} of unlink(PATH)
  rename HEXPATH HEXNEW   -> JSON {ok, errno} of rename(PATH, NEW)
  open_unlink HEXPOOL PROCS N
                          -> PROCS processes, each N times: create a name
                             of its own, write, unlink, close (what
                             stress-ng --open does); JSON {errors}
  hold-writer PATH N      -> opens PATH for writing, writes N bytes, prints
                             "ready", then sleeps (the test kills it)
  journal-writer POOL JOURNAL MAXOPS SEED MAXLIVE PAGEMAX
                          -> create/write/close, tmp+rename, unlink in a loop;
                             journals "B op" before and "D op" after each op;
                             stops at the first error ("E errno")
  stress POOL WORKER SECONDS SEED OUT PAGEMAX
                          -> 2 threads of writes, renames, reads, unlinks on
                             shared and own names; every read is decoded
                             (pageformat) and must carry the name it was
                             opened under; writes a JSON report to OUT
"""
import errno
import json
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pageformat as PF  # noqa: E402


def _read_all(fd):
    out = bytearray()
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            return bytes(out)
        out += b


def _write_all(fd, data):
    view = memoryview(data)
    pos = 0
    while pos < len(view):
        pos += os.write(fd, view[pos:])


def cmd_stat(hexpath):
    p = bytes.fromhex(hexpath)
    try:
        st = os.stat(p)
        return {"ok": True, "size": st.st_size, "mode": st.st_mode, "ino": st.st_ino}
    except OSError as e:
        return {"ok": False, "errno": e.errno}


def cmd_read(hexpath):
    p = bytes.fromhex(hexpath)
    try:
        fd = os.open(p, os.O_RDONLY)
        try:
            return {"ok": True, "data": _read_all(fd).hex()}
        finally:
            os.close(fd)
    except OSError as e:
        return {"ok": False, "errno": e.errno}


def cmd_listdir(hexpath):
    return [n.hex() for n in os.listdir(bytes.fromhex(hexpath))]


def cmd_name_op(op, hexpath, hexother):
    p, other = bytes.fromhex(hexpath), bytes.fromhex(hexother)
    try:
        if op == "unlink":
            os.unlink(p)
        else:
            os.rename(p, other)
        return {"ok": True}
    except OSError as e:
        return {"ok": False, "errno": e.errno}


def cmd_open_unlink(hexpool, procs, n):
    pool = bytes.fromhex(hexpool)
    kids = []
    for k in range(int(procs)):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            errors = []
            for i in range(int(n)):
                name = os.path.join(pool, b"ou.%d.%d" % (os.getpid(), i))
                try:
                    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    try:
                        _write_all(fd, b"u" * 4096)
                        os.unlink(name)
                    finally:
                        os.close(fd)
                except OSError as e:
                    errors.append(f"{name!r}: {errno.errorcode.get(e.errno, e.errno)}")
            os.write(w, json.dumps(errors).encode())
            os._exit(0)
        os.close(w)
        kids.append((pid, r))
    errors = []
    for pid, r in kids:
        out = b""
        while True:
            b = os.read(r, 1 << 16)
            if not b:
                break
            out += b
        os.close(r)
        os.waitpid(pid, 0)
        errors += json.loads(out or b"[\"no report\"]")
    return {"errors": errors}


def cmd_hold_writer(path, n):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    _write_all(fd, b"\xab" * int(n))
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    time.sleep(600)


def cmd_journal_writer(pool, journal, maxops, seed, maxlive, pagemax):
    maxops, maxlive, pagemax = int(maxops), int(maxlive), int(pagemax)
    rng = random.Random(int(seed))
    jfd = os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def J(line):
        os.write(jfd, (line + "\n").encode())

    live = []

    def write(name, enc, version):
        length = rng.randint(PF.header_len(enc), pagemax)
        J(f"B W {name} {enc} {version} {length}")
        fd = os.open(os.path.join(pool, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_all(fd, PF.make_page(enc, version, length))
        finally:
            os.close(fd)
        J(f"D W {name} {enc} {version} {length}")

    try:
        for i in range(maxops):
            r = rng.random()
            if len(live) >= maxlive or (r >= 0.9 and live):
                name = live.pop(rng.randrange(len(live)))
                J(f"B U {name}")
                os.unlink(os.path.join(pool, name))
                J(f"D U {name}")
            elif r < 0.65 or not live:
                name = f"p{i:06d}"
                write(name, name, i)
                live.append(name)
            else:
                target = rng.choice(live) if rng.random() < 0.5 else f"r{i:06d}"
                tmp = f"{target}.tmp.{i}"
                write(tmp, target, i)
                J(f"B R {tmp} {target}")
                os.rename(os.path.join(pool, tmp), os.path.join(pool, target))
                J(f"D R {tmp} {target}")
                if target not in live:
                    live.append(target)
        J("END")
    except OSError as e:
        J(f"E {e.errno}")


class Stress:
    SHARED = [f"shared-{i:02d}" for i in range(12)]

    def __init__(self, pool, worker, seconds, seed, pagemax):
        self.pool = pool
        self.worker = int(worker)
        self.deadline = time.monotonic() + float(seconds)
        self.seed = int(seed)
        self.pagemax = int(pagemax)
        self.lock = threading.Lock()
        self.attempted = {}   # name -> set(versions)
        self.reads = []       # [name, version]
        self.errors = []
        self.counts = {}

    def count(self, k):
        with self.lock:
            self.counts[k] = self.counts.get(k, 0) + 1

    def error(self, msg):
        with self.lock:
            if len(self.errors) < 50:
                self.errors.append(msg)

    def p(self, name):
        return os.path.join(self.pool, name)

    def replaced(self, name, ino, timeout=5.0):
        """True once name is gone or names another inode than ino (a new
        version got committed, or the page was renamed over or unlinked)."""
        end = time.monotonic() + timeout
        while True:
            try:
                if os.stat(self.p(name)).st_ino != ino:
                    return True
            except OSError:
                return True
            if time.monotonic() > end:
                return False
            time.sleep(0.01)

    def write_to(self, path, enc, version, rng, flags):
        length = rng.randint(PF.header_len(enc), self.pagemax)
        data = PF.make_page(enc, version, length)
        with self.lock:
            self.attempted.setdefault(enc, set()).add(version)
        stage = "open"
        try:
            fd = os.open(path, flags, 0o644)
            stage = "write"
            try:
                _write_all(fd, data)
            finally:
                stage = "close"
                os.close(fd)
            return True
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.ENOENT) or (e.errno == errno.ESTALE and
                                                          stage == "open"):
                # ESTALE at open: the name was replaced twice between the
                # kernel's lookups (README "ESTALE under churn"); rare,
                # bounded by the test.
                self.count(f"write_{stage}_{errno.errorcode[e.errno]}")
                return False
            self.error(f"write {path} at {stage}: {errno.errorcode.get(e.errno, e.errno)} {e}")
            return False

    def thread(self, t):
        rng = random.Random(self.seed * 1000 + self.worker * 10 + t)
        own = [f"w{self.worker}-{i}" for i in range(4)]
        n = 0
        while time.monotonic() < self.deadline and len(self.errors) < 50:
            n += 1
            name = rng.choice(self.SHARED if rng.random() < 0.7 else own)
            version = (self.worker << 48) | (t << 40) | n
            r = rng.random()
            if r < 0.25:
                if self.write_to(self.p(name), name, version, rng,
                                 os.O_WRONLY | os.O_CREAT | os.O_TRUNC):
                    self.count("write_ok")
            elif r < 0.5:
                tmp = f"{name}.tmp.{self.worker}.{t}.{n}"
                if self.write_to(self.p(tmp), name, version, rng,
                                 os.O_WRONLY | os.O_CREAT | os.O_TRUNC):
                    try:
                        os.rename(self.p(tmp), self.p(name))
                        self.count("rename_ok")
                    except OSError as e:
                        if e.errno == errno.ENOENT:
                            self.count("rename_ENOENT")
                        else:
                            self.error(f"rename {tmp} -> {name}: {errno.errorcode.get(e.errno)} {e}")
            elif r < 0.85:
                try:
                    fd = os.open(self.p(name), os.O_RDONLY)
                except OSError as e:
                    if e.errno in (errno.ENOENT, errno.ESTALE):
                        self.count(f"read_{errno.errorcode[e.errno]}")
                    else:
                        self.error(f"open {name} for reading: {errno.errorcode.get(e.errno)} {e}")
                    continue
                stage = "fstat"
                try:
                    fst = os.fstat(fd)
                    size = fst.st_size
                    stage = "read"
                    data = _read_all(fd)
                except OSError as e:
                    self.error(f"{stage} of open page {name}: {errno.errorcode.get(e.errno)} {e}")
                    continue
                finally:
                    os.close(fd)
                try:
                    enc, ver = PF.decode_page(data)
                except PF.PageError as e:
                    self.error(f"read {name}: {e}")
                    continue
                if enc.decode() != name:
                    self.error(f"read {name}: got the bytes of page {enc!r} v{ver}")
                    continue
                # An open(O_TRUNC) replacing this page in place truncates the
                # shared inode, which POSIX makes visible to every opener's
                # fstat; the bytes this reader gets stay the old version's.
                # Its writes then grow that size again (README "One inode per
                # version"), so fstat may show any size up to the new
                # version's, as long as a new version does get committed.
                if size == 0 and len(data) > 0:
                    self.count("fstat_truncated_by_replacement")
                elif size != len(data):
                    if self.replaced(name, fst.st_ino):
                        self.count("fstat_resized_by_replacement")
                    else:
                        self.error(f"read {name}: fstat size {size} but read {len(data)} bytes "
                                   f"and no new version of it was committed")
                with self.lock:
                    self.reads.append([name, ver])
                self.count("read_ok")
            elif r < 0.97:
                try:
                    os.unlink(self.p(name))
                    self.count("unlink_ok")
                except OSError as e:
                    if e.errno == errno.ENOENT:
                        self.count("unlink_ENOENT")
                    else:
                        self.error(f"unlink {name}: {errno.errorcode.get(e.errno)} {e}")
            else:
                try:
                    os.listdir(self.pool)
                    self.count("listdir_ok")
                except OSError as e:
                    self.error(f"listdir: {errno.errorcode.get(e.errno)} {e}")

    def run(self, out):
        ts = [threading.Thread(target=self.thread, args=(t,)) for t in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        with open(out, "w") as f:
            json.dump({"worker": self.worker,
                       "attempted": {k: sorted(v) for k, v in self.attempted.items()},
                       "reads": self.reads, "errors": self.errors, "counts": self.counts}, f)


def main(argv):
    cmd, args = argv[0], argv[1:]
    if cmd == "stat":
        print(json.dumps(cmd_stat(*args)))
    elif cmd == "read":
        print(json.dumps(cmd_read(*args)))
    elif cmd == "listdir":
        print(json.dumps(cmd_listdir(*args)))
    elif cmd in ("unlink", "rename"):
        print(json.dumps(cmd_name_op(cmd, *args)))
    elif cmd == "open_unlink":
        print(json.dumps(cmd_open_unlink(*args)))
    elif cmd == "hold-writer":
        cmd_hold_writer(*args)
    elif cmd == "journal-writer":
        cmd_journal_writer(*args)
    elif cmd == "stress":
        pool, worker, seconds, seed, out, pagemax = args
        Stress(pool, worker, seconds, seed, pagemax).run(out)
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main(sys.argv[1:])
