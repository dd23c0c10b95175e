"""A pool's presence table (meta/index/presence.c): the fingerprints of its
committed pages' names in a file of shared memory the daemon keeps, mapped
read only here, so that exists costs a hash and a probe a name and no
request to the daemon.

The fingerprint is XXH64 of the name's bytes with seed 0 (0 and 1 taken
to 2 and 3), which needs python3-xxhash: without it, `available` is
False and Client.exists asks the daemon (the batch ioctl, _wire.py).

A Table is trusted while its header's live word is its generation (the
daemon clears it when it rebuilds, removes the pool or unmounts) and the
daemon still holds its lock on the file (an open-file-description lock:
the kernel drops it when the daemon dies, even by kill -9, whose table
keeps its live word); Client.exists checks both before and after each
batch, so an answer comes from a table that was the pool's for the
whole probe. Entries are read as native 8-byte words of an aligned
memoryview: one load each, never torn.
"""
import fcntl
import mmap
import os
import struct

try:
    from xxhash import xxh64_intdigest as _xxh64
except ImportError:  # pragma: no cover - depends on the host
    _xxh64 = None

available = _xxh64 is not None

MAGIC = 0x5345525053464750
VERSION = 1
HASH_XXH64 = 1
_HDR = struct.Struct("=QIIQQQQQII")
HDR_BYTES = 128
_LIVE_WORD = 2  # the live word, in 8-byte words from the start
_BASE = HDR_BYTES // 8


# struct flock (x86-64 and aarch64 layout): a write lock on the whole file.
_FLOCK = struct.Struct("hhxxxxqqixxxx")
_ASK = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
_GETLK = getattr(fcntl, "F_OFD_GETLK", None)
if _GETLK is None:  # pragma: no cover - not Linux
    available = False


class Table:
    """One generation of a pool's table, mapped. OSError when path is no
    live table."""

    def __init__(self, path):
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            size = os.fstat(fd).st_size
            if size < HDR_BYTES:
                raise OSError(22, "not a pagefs presence table", path)
            self._mm = mmap.mmap(fd, size, prot=mmap.PROT_READ)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        (magic, version, hdr, live, gen, pid, _pool, mask, hash_id,
         _) = _HDR.unpack_from(self._mm, 0)
        if magic != MAGIC or version != VERSION or hdr != HDR_BYTES or \
                hash_id != HASH_XXH64 or size < HDR_BYTES + 8 * (mask + 1) or \
                mask & (mask + 1):
            self.close()
            raise OSError(22, "not a pagefs presence table of this version", path)
        self.path, self.generation, self.pid, self.mask = path, gen, pid, mask
        self._words = memoryview(self._mm).cast("Q")
        self._slots = self._words[_BASE:_BASE + mask + 1]
        if live != gen or not self.live():
            self.close()
            raise OSError(116, "presence table retired", path)  # ESTALE

    def live(self):
        """The daemon keeps this generation and is alive."""
        w = self._words
        if w is None or w[_LIVE_WORD] != self.generation:
            return False
        try:
            return _FLOCK.unpack(fcntl.fcntl(self._fd, _GETLK, _ASK))[0] != fcntl.F_UNLCK
        except OSError:
            return False

    def probe(self, names):
        """[bool] for each name (bytes, or str hashed as its UTF-8 bytes):
        is it in the table. Most names end at their first slot."""
        slots, mask, out = self._slots, self.mask, []
        add = out.append
        for fp in map(_xxh64, names):
            if fp < 2:
                fp += 2
            e = slots[fp & mask]
            if e == fp:
                add(True)
            elif e == 0:
                add(False)
            else:  # another name's fingerprint: follow the chain
                i = fp & mask
                while e != fp and e != 0:
                    i = (i + 1) & mask
                    e = slots[i]
                add(e == fp)
        return out

    def close(self):
        for attr in ("_slots", "_words"):  # the slice first: it holds _words
            w = getattr(self, attr, None)
            setattr(self, attr, None)
            if w is not None:
                w.release()
        mm = getattr(self, "_mm", None)
        if mm is not None:
            try:
                mm.close()
            except BufferError:
                pass  # another thread still probes it: closed when it lets go
        fd, self._fd = getattr(self, "_fd", -1), -1
        if fd >= 0:
            os.close(fd)

    def __del__(self):
        self.close()
