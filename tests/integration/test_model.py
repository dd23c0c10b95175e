"""Model-based random testing: long random sequences of operations on one
pool, every result checked against a reference model of the SPEC (and the
README decisions). On a failure the test prints the seed and a shrunk
(shortest failing it could find) sequence, replayed in a fresh pool.

Operations: one-shot create/write/close, open(O_CREAT|O_TRUNC) writers
with pwrite at offsets, ftruncate and close, O_EXCL, open for write
without O_TRUNC (EPERM), rename, unlink, stat, readdir, read, getxattr,
mkdir in a pool (refused). PAGEFS_MODEL_OPS (default 100000, ~10 s) and
PAGEFS_MODEL_SEED choose the run; scripts/soak.sh runs millions.
"""
import errno
import os
import random
import stat
import sys
import time

import pytest

OPS = int(os.environ.get("PAGEFS_MODEL_OPS", "100000"))
# CI runs a fixed seed (reproducible); scripts/soak.sh sets random ones.
SEED = int(os.environ.get("PAGEFS_MODEL_SEED", "1"))
SLOT = 64 << 10
NAMES = [f"n{i}" for i in range(12)] + ["sp ace", "\u00e9t\u00e9", "x" * 255]


def gen(rng, n):
    ops = []
    for _ in range(n):
        r = rng.random()
        name, other = rng.choice(NAMES), rng.choice(NAMES)
        if r < 0.15:
            ops.append(("put", name, rng.randrange(0, 3 * 4096), rng.randrange(256)))
        elif r < 0.25:
            ops.append(("open_w", name))
        elif r < 0.40:
            ops.append(("pwrite", name, rng.randrange(0, SLOT - 1), rng.randrange(1, 5000),
                        rng.randrange(256)))
        elif r < 0.44:
            ops.append(("ftruncate", name, rng.randrange(0, SLOT + 1)))
        elif r < 0.54:
            ops.append(("close", name))
        elif r < 0.60:
            ops.append(("rename", name, other))
        elif r < 0.66:
            ops.append(("unlink", name))
        elif r < 0.74:
            ops.append(("stat", name))
        elif r < 0.78:
            ops.append(("readdir",))
        elif r < 0.90:
            ops.append(("read", name))
        elif r < 0.93:
            ops.append(("xattr", name))
        elif r < 0.96:
            ops.append(("excl", name))
        elif r < 0.98:
            ops.append(("open_nontrunc", name))
        else:
            ops.append(("mkdir", name))
    return ops


class Mismatch(AssertionError):
    pass


def run(pool, ops):
    """Runs ops in directory pool; raises Mismatch(index, message) on the first
    result the model does not allow. Closes every descriptor it opened."""
    pages = {}   # committed: name -> bytes
    writers = {}  # name -> [fd, bytearray]

    def expect(i, cond, msg):
        if not cond:
            raise Mismatch(i, msg)

    def err_of(fn, *a):
        try:
            fn(*a)
            return None
        except OSError as e:
            return e.errno

    try:
        for i, op in enumerate(ops):
            kind, name = op[0], (op[1] if len(op) > 1 else None)
            p = os.path.join(pool, name) if name else None
            busy = name in writers
            if kind == "put":
                if busy:
                    continue
                data = bytes([op[3]]) * op[2]
                fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                n = os.write(fd, data) if data else 0
                os.close(fd)
                expect(i, n == len(data), f"write returned {n} of {len(data)}")
                pages[name] = data
            elif kind == "open_w":
                if busy:
                    continue
                fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
                writers[name] = [fd, bytearray()]
            elif kind == "pwrite":
                if not busy:
                    continue
                fd, buf = writers[name]
                off, ln, b = op[2], min(op[3], SLOT - op[2]), op[4]
                n = os.pwrite(fd, bytes([b]) * ln, off)
                expect(i, n == ln, f"pwrite returned {n} of {ln}")
                if len(buf) < off + ln:
                    buf.extend(b"\0" * (off + ln - len(buf)))
                buf[off:off + ln] = bytes([b]) * ln
            elif kind == "ftruncate":
                if not busy:
                    continue
                fd, buf = writers[name]
                os.ftruncate(fd, op[2])
                if op[2] < len(buf):
                    del buf[op[2]:]
                else:
                    buf.extend(b"\0" * (op[2] - len(buf)))
                # Not for an O_TRUNC replacement: its inode is shared with
                # readers of the old version, whose fstat shows the old size
                # (README "One inode per version").
                if name not in pages:
                    expect(i, os.fstat(fd).st_size == len(buf),
                           f"fstat size {os.fstat(fd).st_size} after ftruncate, want {len(buf)}")
            elif kind == "close":
                if not busy:
                    continue
                fd, buf = writers.pop(name)
                os.close(fd)
                pages[name] = bytes(buf)
            elif kind == "rename":
                other = op[2]
                if busy or other in writers:
                    continue
                e = err_of(os.rename, p, os.path.join(pool, other))
                if name not in pages:
                    expect(i, e == errno.ENOENT, f"rename of a missing page: {e}")
                else:
                    expect(i, e is None, f"rename failed: {e}")
                    pages[other] = pages.pop(name)
            elif kind == "unlink":
                if busy:
                    continue
                e = err_of(os.unlink, p)
                expect(i, e == (None if name in pages else errno.ENOENT), f"unlink: {e}")
                pages.pop(name, None)
            elif kind == "stat":
                if busy:
                    continue
                try:
                    st = os.stat(p)
                except OSError as e:
                    expect(i, name not in pages and e.errno == errno.ENOENT, f"stat: {e}")
                    continue
                expect(i, name in pages, "stat of a page that should not exist")
                expect(i, st.st_size == len(pages[name]),
                       f"st_size {st.st_size}, want {len(pages[name])}")
                expect(i, stat.S_IMODE(st.st_mode) == 0o444 and stat.S_ISREG(st.st_mode),
                       f"mode {oct(st.st_mode)} of a committed page")
            elif kind == "readdir":
                got = set(os.listdir(pool))
                expect(i, got == set(pages), f"readdir {sorted(got)} != {sorted(pages)}")
            elif kind == "read":
                try:
                    fd = os.open(p, os.O_RDONLY)
                except OSError as e:
                    expect(i, name not in pages and e.errno == errno.ENOENT, f"open: {e}")
                    continue
                data = bytearray()
                while True:
                    b = os.read(fd, 1 << 20)
                    if not b:
                        break
                    data += b
                os.close(fd)
                expect(i, name in pages, "read of a page that should not exist")
                expect(i, bytes(data) == pages[name],
                       f"read {len(data)} bytes, want {len(pages[name])} (or content differs)")
            elif kind == "xattr":
                if busy:
                    continue
                try:
                    v = os.getxattr(p, "user.pagefs.slot")
                    expect(i, name in pages and v.decode().isdigit(), f"slot xattr {v!r}")
                except OSError as e:
                    expect(i, name not in pages and e.errno == errno.ENOENT, f"getxattr: {e}")
            elif kind == "excl":
                if busy:
                    continue
                try:
                    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                except OSError as e:
                    expect(i, name in pages and e.errno == errno.EEXIST, f"O_EXCL: {e}")
                    continue
                expect(i, name not in pages, "O_EXCL create over an existing page")
                os.close(fd)
                pages[name] = b""
            elif kind == "open_nontrunc":
                if busy or name not in pages:
                    continue
                e = err_of(lambda: os.close(os.open(p, os.O_WRONLY)))
                expect(i, e == errno.EPERM, f"open for write without O_TRUNC: {e}")
            elif kind == "mkdir":
                d = (name + ".d")[-255:]
                e = err_of(os.mkdir, os.path.join(pool, d))
                expect(i, e in (errno.EPERM, errno.EINVAL), f"mkdir inside a pool: {e}")
    finally:
        for fd, _ in writers.values():
            try:
                os.close(fd)
            except OSError:
                pass


def shrink(mkpool, ops):
    """Shortest failing subsequence it finds (ddmin-style chunk removal)."""
    def fails(seq):
        try:
            run(mkpool(), seq)
            return False
        except Mismatch:
            return True
        except OSError:
            return True

    deadline = time.monotonic() + float(os.environ.get("PAGEFS_MODEL_SHRINK_S", "60"))
    chunk = max(1, len(ops) // 2)
    while chunk >= 1 and time.monotonic() < deadline:
        i, changed = 0, False
        while i < len(ops):
            cand = ops[:i] + ops[i + chunk:]
            if time.monotonic() >= deadline:
                break
            if cand and fails(cand):
                ops, changed = cand, True
            else:
                i += chunk
        if not changed:
            chunk //= 2
    return ops


@pytest.mark.timeout_s(600)
def test_random_operation_sequences_match_the_model(mount):
    m = mount("--page-size", "64K", "--capacity", "64M")
    counter = [0]

    def mkpool():
        counter[0] += 1
        d = m.path(counter[0] % 60000, "kv")
        os.makedirs(d, exist_ok=True)
        for n in os.listdir(d):
            os.unlink(os.path.join(d, n))
        return str(d)

    ops = gen(random.Random(SEED), OPS)
    t0 = time.monotonic()
    try:
        run(mkpool(), ops)
    except (Mismatch, OSError) as e:
        failing = ops[:e.args[0] + 1] if isinstance(e, Mismatch) else ops
        small = shrink(mkpool, failing)
        pytest.fail(f"seed {SEED}: {e}\nshortest failing sequence found ({len(small)} ops):\n" +
                    "\n".join(map(repr, small)))
    sys.stderr.write(f"[model] seed {SEED}: {OPS} operations checked in "
                     f"{time.monotonic() - t0:.1f}s\n")
