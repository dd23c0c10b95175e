"""One worker of the crash loop (test_crash_loop.py), run as a process:

    python3 crashload.py MNT WORKER CYCLE SEED STATE_JSON JOURNAL

Runs a mixed load on its own names in two pools until an operation fails
(the test kills the daemon under it): create/write/close (O_TRUNC
replacement included), tmp + rename over a name (the SGLang pattern),
unlink, and reads checked against what this worker knows.

  0/kv     big pool, no eviction: every closed page must stay
  0/small  small pool: writes evict, so a page may vanish (never change)

STATE_JSON: {"pool/name": [enc, version, length]} of this worker's pages
that the test saw after the last recovery. The journal gets "B op" before
and "D op" after every operation (op: W pool name enc ver len | R pool tmp
name | R- (tmp evicted) | U pool name | U- (ENOENT)), "X message" for a read that
returned wrong bytes, and "E errno" for the error that stopped the worker.
"""
import errno
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pageformat as PF  # noqa: E402

POOLS = {"kv": 24, "small": 12}  # names per worker in each pool
SLOT = 64 << 10


def main(mnt, worker, cycle, seed, state_json, journal):
    rng = random.Random(int(seed))
    with open(state_json) as f:
        state = {k: tuple(v) for k, v in json.load(f).items()}
    jfd = os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    ver = int(cycle) * 1_000_000

    def J(line):
        os.write(jfd, (line + "\n").encode())

    def check_alive():
        """ENOENT after the kill: the cleared mount point is an empty
        directory. Stop as if the daemon's error had reached us."""
        if not os.path.ismount(mnt):
            raise OSError(errno.ENOTCONN, "the mount is gone")

    def path(key):
        return os.path.join(mnt, "0", key)

    def write(key, enc):
        nonlocal ver
        ver += 1
        hl = PF.header_len(enc)
        length = SLOT if rng.random() < 0.1 else rng.randint(hl, SLOT)
        J(f"B W {key} {enc} {ver} {length}")
        stage = "open"
        try:
            fd = os.open(path(key), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                stage = "write"
                data = memoryview(PF.make_page(enc, ver, length))
                pos = 0
                while pos < len(data):
                    pos += os.write(fd, data[pos:])
            finally:
                stage = "close"
                os.close(fd)
        except OSError as e:
            J(f"S {stage} failed: {e.strerror}")
            raise
        J(f"D W {key} {enc} {ver} {length}")
        state[key] = (enc, ver, length)

    def unlink(key):
        J(f"B U {key}")
        try:
            os.unlink(path(key))
            J(f"D U {key}")
        except FileNotFoundError:
            check_alive()
            J(f"D U- {key}")
        state.pop(key, None)

    def read(key):
        try:
            fd = os.open(path(key), os.O_RDONLY)
        except FileNotFoundError:
            check_alive()
            if key in state and key.startswith("kv/"):
                J(f"X {key} is gone but was never unlinked")
            state.pop(key, None)  # evicted from small
            return
        try:
            out = bytearray()
            while True:
                b = os.read(fd, 1 << 20)
                if not b:
                    break
                out += b
        finally:
            os.close(fd)
        want = state.get(key)
        if want is None:
            J(f"X {key} exists with {len(out)} bytes but this worker never wrote it")
        elif bytes(out) != PF.make_page(*want):
            try:
                got = PF.decode_page(out)
            except PF.PageError as e:
                got = str(e)
            J(f"X {key} expected {want[0]} v{want[1]} {want[2]} bytes, got {len(out)}: {got}")

    try:
        for key in [k for k in state if ".tmp." in k]:
            unlink(key)  # leftovers of a rename the last kill interrupted
        n = 0
        while True:
            n += 1
            pool = "kv" if rng.random() < 0.6 else "small"
            base = f"{pool}/w{worker}-{rng.randrange(POOLS[pool])}"
            r = rng.random()
            if r < 0.35:
                write(base, base.split("/")[1])
            elif r < 0.6:
                tmp = f"{base}.tmp.{cycle}.{n}"
                write(tmp, base.split("/")[1])
                J(f"B R {tmp} {base}")
                try:
                    os.rename(path(tmp), path(base))
                except FileNotFoundError:
                    check_alive()
                    if pool == "kv":
                        raise  # only eviction may take a closed page away
                    J(f"D R- {tmp} {base}")  # tmp was evicted before the rename
                    state.pop(tmp, None)
                    continue
                J(f"D R {tmp} {base}")
                state[base] = state.pop(tmp)
            elif r < 0.75:
                unlink(base)
            else:
                read(base)
    except OSError as e:
        J(f"E {e.errno} {errno.errorcode.get(e.errno, '?')}")


if __name__ == "__main__":
    main(*sys.argv[1:])
