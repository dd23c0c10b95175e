"""pagefs.Client: batch exists, reads straight into the caller's buffers,
writes with pagefs's atomic publish, for any Python program.

A pool is the directory MOUNTPOINT/RANK/NS. exists asks no one where it
can: it probes the pool's presence table, a file of shared memory the
daemon keeps and this client maps read only (_presence.py; needs
python3-xxhash), and asks the daemon (the batch lookup ioctl, _wire.py)
only when there is no table (no xxhash, a daemon without tables, or one
that went away). Other lookups of a batch are one request to the daemon
(the ioctl), never a stat per name. Reads take the direct path: one
request (LOOKUP_PIN) pins every page of the batch, so nothing can
overwrite its slot, and answers each page's offset in the pool's data
file, length and checksum; the bytes are read from the data file with
preadv straight into the buffers (O_DIRECT when buffer, offset and length
are aligned and the backing allows it), their XXH3-64 is checked, and a
second request (UNPIN) lets the slots go; a client that dies lets them go
when the kernel closes its pool directory. A daemon without the batch pin
(or pin=False) gets an open per page instead, which pins it: the open
file's inode must be the one the batch's LOOKUP answered. A page without
a checksum, or no XXH3 available, reads through the open file, where the
daemon verifies; a checksum that does not match is a miss. Writes go
through the mount: one write of the whole buffer, committed at close, so
a page is published whole or not at all.

Errors: bad arguments (a name with '/' or NUL, a buffer larger than the
pool's page size, a buffer count that differs from the name count) raise
ValueError before anything is done; a mountpoint that is not pagefs
raises NotPagefsError and a missing pool PoolNotFoundError. A page that
cannot be read or written for any other reason (missing, evicted, a full
pool, a daemon that went away) is False in the returned list, and
Client.last_error says why.
"""
import ctypes
import errno
import json
import logging
import math
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from . import _presence, _wire
from ._buffers import byte_view
from ._checksum import xxh3_64

logger = logging.getLogger(__name__)

NAME_MAX = 255
_DOTS = (b".", b"..")
_DOTSET = frozenset(_DOTS)
_DOTSTR = frozenset(d.decode() for d in _DOTS)
_ALIGN = 4096


class NotPagefsError(OSError):
    """The mountpoint is not a mounted pagefs."""


class PoolNotFoundError(FileNotFoundError):
    """The pool directory does not exist."""


def encode_name(name):
    """The page name as bytes; ValueError unless it is a valid file name."""
    raw = name.encode("utf-8", "surrogateescape") if type(name) is str else os.fsencode(name)
    if 0 < len(raw) <= NAME_MAX and b"/" not in raw and b"\0" not in raw and raw not in _DOTS:
        return raw
    raise ValueError("invalid page name %r: 1 to %d bytes, no '/' or NUL, not '.' or '..'"
                     % (name, NAME_MAX))


def encode_names(names):
    """[encode_name(n) for n in names], checked for the whole batch at once
    (a name-by-name check costs more than a probe of the presence table);
    the first invalid name raises ValueError as encode_name does."""
    if type(names) not in (list, tuple):
        names = list(names)
    try:
        enc = list(map(str.encode, names))  # UTF-8: surrogates and bytes below
    except (TypeError, UnicodeEncodeError):
        return [encode_name(n) for n in names]
    if enc:
        lens = list(map(len, enc))
        joined = b"".join(enc)
        if b"/" in joined or b"\0" in joined or min(lens) == 0 or max(lens) > NAME_MAX or \
                not _DOTSET.isdisjoint(enc):
            return [encode_name(n) for n in names]
    return enc


def checked_names(names):
    """names as a list the presence table can hash, checked as
    encode_names checks them: the str names themselves when all are ASCII
    (whose UTF-8 is the same characters: no encoding needed), else
    encode_names(names)."""
    if type(names) not in (list, tuple):
        names = list(names)
    try:
        joined = "".join(names)
    except TypeError:
        return encode_names(names)
    if names and joined.isascii() and "/" not in joined and "\0" not in joined and \
            min(map(len, names)) > 0 and max(map(len, names)) <= NAME_MAX and \
            _DOTSTR.isdisjoint(names):
        return names
    return encode_names(names)


def parse_size(value):
    """Bytes of a size as the daemon reads it (4096, "64K", "1M", "2G", "1T":
    powers of 1024), or None when it is not one."""
    text = str(value).strip()
    units = {"k": 10, "m": 20, "g": 30, "t": 40}
    shift = units.get(text[-1:].lower(), 0)
    digits = text[:-1] if shift else text
    if not (digits.isascii() and digits.isdigit()):
        return None
    return int(digits) << shift


def default_threads():
    """Pages of a batch read or written at once: the CPUs this process may
    run on, at most 4. Each page's copy releases the GIL, so threads beyond
    the CPUs only add switches (docs/SGLANG.md, "Measured")."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(4, cpus))


_LOADAVG = None  # /proc/loadavg, open for pread: its 4th field is the runnable tasks
_IDLE = [0.0, 1]  # when idle_cpus last read it, and what it found


def idle_cpus():
    """The CPUs a batch may spread over now: the machine's CPUs less the
    tasks running or waiting to run besides this one (the 4th field of
    /proc/loadavg, read at most every 10 ms: a read costs about 7 us), at
    least 1. A batch spread over CPUs that other tasks keep busy only adds
    switches: 4 client processes of 1 MiB reads on 2 CPUs took 0.99 to
    1.02 x raw pread on a FUSE backing with one thread each, 0.85 and 0.87
    with four (docs/SGLANG.md). The machine's CPU count when the file
    cannot be read."""
    global _LOADAVG
    now = time.monotonic()
    if now - _IDLE[0] < 0.01:
        return _IDLE[1]
    cpus = os.cpu_count() or 1
    try:
        if _LOADAVG is None:
            _LOADAVG = os.open("/proc/loadavg", os.O_RDONLY | os.O_CLOEXEC)
        running = int(os.pread(_LOADAVG, 128, 0).split()[3].split(b"/")[0])
        idle = max(1, cpus - running + 1)
    except (OSError, ValueError, IndexError):
        idle = cpus
    _IDLE[:] = [now, idle]
    return idle


def _address(mv):
    return ctypes.addressof(ctypes.c_char.from_buffer(mv))


def _pwrite_full(fd, mv, offset):
    """Writes all of mv at offset (OSError EIO if the file takes none)."""
    done = 0
    while done < len(mv):
        n = os.pwritev(fd, [mv[done:]], offset + done)
        if n <= 0:
            raise OSError(errno.EIO, "short write into the data file")
        done += n


def _pread_full(fd, mv, offset):
    """Reads len(mv) bytes at offset into mv; the count read (short at EOF)."""
    done = 0
    while done < len(mv):
        n = os.preadv(fd, [mv[done:]], offset + done)
        if n <= 0:
            break
        done += n
    return done


class Pool:
    """An open pool directory: its fd (for batch lookups), its data file."""

    def __init__(self, client, rank, ns):
        self.rank, self.ns = int(rank), str(ns)
        self.path = os.path.join(client.mountpoint, str(self.rank), self.ns)
        self.bpath = os.fsencode(self.path)
        try:
            self.dirfd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:
            raise PoolNotFoundError(errno.ENOENT, "no pool %s/%s in %s: create it with "
                                    "Client.pool(%d, %r, page_size=...) or mkdir"
                                    % (self.rank, self.ns, client.mountpoint, self.rank,
                                       self.ns), self.path)
        self._lock = threading.Lock()
        self._data_path = None
        self._data_fd = -1
        self._direct_fd = -1
        self._table = None  # the presence table mapped, or None
        self._no_table = False  # the daemon keeps none for this pool
        self._wfd = None  # the data file open for placed writes, -1: cannot
        self.ino = os.fstat(self.dirfd).st_ino  # a pool made again has a new one

    def table(self):
        """The pool's presence table as last mapped (the caller checks
        Table.live after probing it and calls forget_table if it is not),
        else mapped now, or None: no table here, ask the daemon. An old
        table is not closed here: a thread may still probe it (it goes with
        its last reference)."""
        t = self._table
        if t is not None or self._no_table:
            return t
        with self._lock:
            if self._table is not None:
                return self._table
            try:
                t = _presence.Table(os.fsdecode(os.getxattr(self.path,
                                                            "user.pagefs.presence")))
            except OSError as e:
                if e.errno in (errno.ENODATA, errno.EOPNOTSUPP):
                    self._no_table = True  # a daemon that keeps none
                return None
            self._table = t
            return t

    def forget_table(self, t):
        """t is no longer the pool's table: the next table() maps anew."""
        with self._lock:
            if self._table is t:
                self._table = None

    def close(self):
        with self._lock:
            for fd in (self.dirfd, self._data_fd, self._direct_fd, self._wfd):
                if fd is not None and fd >= 0:
                    os.close(fd)
            self.dirfd = self._data_fd = self._direct_fd = -1
            self._wfd = None
            self._table = None

    def __del__(self):
        try:
            self.close()
        except (AttributeError, OSError):
            pass  # a half-made Pool, or interpreter shutdown

    def xattr(self, key):
        return int(os.getxattr(self.path, "user.pagefs." + key))

    @property
    def page_size(self):
        return self.xattr("page_size")

    def data_fds(self, path):
        """(buffered fd, O_DIRECT fd or -1) of the data file at path; (-1, -1)
        when this process cannot open it (say the backing is not readable by
        its user): the pages are then read through the mount."""
        with self._lock:
            if path != self._data_path:
                for fd in (self._data_fd, self._direct_fd):
                    if fd >= 0:
                        os.close(fd)
                self._data_fd = self._direct_fd = -1
                self._data_path = path
                try:
                    self._data_fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                except OSError:
                    return -1, -1
                try:
                    self._direct_fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_DIRECT)
                except OSError:
                    self._direct_fd = -1  # tmpfs and others: no O_DIRECT
                self._data_path = path
            return self._data_fd, self._direct_fd


    def write_fd(self):
        """The pool's data file open for writing (placed writes), or -1 when
        this process cannot open it (say the backing is not writable by its
        user): pages are then written through the mount."""
        with self._lock:
            if self._wfd is None:
                try:
                    path = os.getxattr(self.path, "user.pagefs.data_file")
                    self._wfd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
                except OSError:
                    self._wfd = -1
            return self._wfd


class Client:
    """A pagefs mount, seen from Python.

    verify: "first" (default) checks the checksum of a page read on the
    direct path the first time this client reads that page version;
    "always" on every read; "none" never (the daemon still verifies the
    first open after commit under its own --verify first). threads: how
    many pages of one batch are opened, read or written at once (the
    daemon answers them in parallel, and concurrent commits share its
    group commit); default the CPUs this process may use, at most 4.
    presence: exists probes the pools' presence tables where it can
    (False: always one request to the daemon). pin: a read
    pins its batch's pages with one request and unpins them with another
    (False, or a daemon without the batch pin: each page is opened through
    the mount, which pins it, and closed). place: a write opens the page
    through the mount, puts its bytes into the data file at the page's slot
    itself and gives their checksum, and close() publishes them (on a FUSE
    backing such as 3FS the bytes cross FUSE once instead of twice); False,
    a daemon without placed writes, a data file this process cannot write
    or no XXH3 here: the bytes go through the mount with one write().
    """

    def __init__(self, mountpoint, verify="first", threads=None, presence=True, pin=True,
                 place=True):
        if verify not in ("first", "always", "none"):
            raise ValueError("verify must be first, always or none, not %r" % (verify,))
        self.mountpoint = os.path.abspath(mountpoint)
        try:
            pid = os.getxattr(self.mountpoint, "user.pagefs.pid")
            int(pid)
        except (OSError, ValueError) as e:
            raise NotPagefsError(errno.EINVAL, "%s is not a pagefs mount (%s): mount one with "
                                 "`pagefs mount BACKING %s`"
                                 % (self.mountpoint, getattr(e, "strerror", e), self.mountpoint),
                                 self.mountpoint)
        self.verify = verify
        self.presence = bool(presence) and _presence.available
        self.threads = default_threads() if threads is None else max(1, int(threads))
        self.last_error = None
        self._pools = {}
        self._lock = threading.Lock()
        self._verified = {}
        self._executor = None
        self.pin = bool(pin)
        self.place = bool(place) and xxh3_64 is not None
        self.batch_write = True  # the daemon reserves and commits batches
        # How reads went: straight from the data file (pinned_batches of
        # them pinned by one request), or through the mount.
        self.counters = {"direct_reads": 0, "odirect_reads": 0, "mount_reads": 0,
                         "checksum_mismatches": 0, "pinned_batches": 0,
                         "placed_writes": 0, "mount_writes": 0}

    # ---- pools ----

    def pool(self, rank, ns, page_size=None, capacity=None):
        """Creates pool (rank, ns) if missing (mkdir -p) and applies page_size
        and capacity (bytes, or sizes such as "64K"). The page size can change
        only while the pool is empty: otherwise ValueError, the pool unchanged.
        A new page size on an empty pool keeps its capacity rounded down to
        a whole number of the new pages (at least one), unless capacity is
        given. Returns the Pool."""
        path = os.path.join(self.mountpoint, str(int(rank)), str(ns))
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as e:
            raise ValueError("cannot create pool %s: %s (a rank is 0..65535, a namespace "
                             "[a-z0-9_]{1,64})" % (path, e.strerror)) from None
        p = self._pool(rank, ns)
        for key, want in (("page_size", page_size), ("capacity", capacity)):
            if want is None:
                continue
            try:
                os.setxattr(path, "user.pagefs." + key, str(want).encode())
            except OSError as e:
                if key == "page_size" and e.errno == errno.EINVAL and \
                        self._resize_empty(p, parse_size(want), capacity):
                    continue
                why = {errno.EBUSY: "the pool is not empty (or its pages would not fit)",
                       errno.EINVAL: "the size does not fit (slot sizes up to 2 GiB, a "
                                     "capacity that is a whole number of pages)"}
                raise ValueError("cannot set %s=%s on pool %s: %s: %s"
                                 % (key, want, path, e.strerror, why.get(e.errno, ""))) from None
        return p

    def _resize_empty(self, p, size, capacity):
        """Sets page size `size` on empty pool p whose capacity is no whole
        number of such pages: through a capacity that is a whole number of
        both the old and the new pages (the data file, sparse, keeps the
        larger of its sizes), to the old capacity rounded down to the new
        pages (or `capacity` when that is one). True when done; False, the
        pool as it was, when it cannot be."""
        try:
            if size is None or not 0 < size <= 1 << 31 or p.xattr("pages") or \
                    p.xattr("used_slots"):
                return False
            old, cap = p.xattr("page_size"), p.xattr("capacity")
            target = parse_size(capacity) if capacity is not None else \
                max(size, cap // size * size)
            if target is None or target % size or cap % size == 0:
                return False
            both = old * size // math.gcd(old, size)
            if both > max(cap, target, 1 << 30):
                return False  # the data file would grow too far on the way
            os.setxattr(p.path, "user.pagefs.capacity", b"%d" % max(both, cap // both * both))
        except OSError:
            return False
        try:
            os.setxattr(p.path, "user.pagefs.page_size", b"%d" % size)
            os.setxattr(p.path, "user.pagefs.capacity", b"%d" % target)
            return True
        except OSError:
            for key, value in (("page_size", old), ("capacity", cap)):
                try:
                    os.setxattr(p.path, "user.pagefs." + key, b"%d" % value)
                except OSError:
                    pass
            return False

    def _pool(self, rank, ns):
        key = (int(rank), str(ns))
        with self._lock:
            p = self._pools.get(key)
        if p is None:
            p = Pool(self, rank, ns)
            with self._lock:
                old = self._pools.setdefault(key, p)
            if old is not p:
                p.close()
                p = old
        return p

    def _forget_pool(self, p):
        """Drops p from the cache. Its fds close when the last thread using
        it lets it go (Pool.__del__): closing them now could hand their
        numbers to another open while a batch still uses them."""
        with self._lock:
            if self._pools.get((p.rank, p.ns)) is p:
                del self._pools[(p.rank, p.ns)]

    def _batch(self, rank, ns, fn):
        """fn(pool) with a cached pool fd, once more with a fresh one if the
        cached one names a pool that was removed (ENOENT) meanwhile."""
        p = self._pool(rank, ns)
        try:
            return fn(p)
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.ENOTDIR, errno.EBADF):
                raise
            self._forget_pool(p)
            return fn(self._pool(rank, ns))

    def close(self):
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for p in pools:
            p.close()
        if self._executor:
            self._executor.shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- pages ----

    def exists(self, rank, ns, names):
        """[bool]: which names are committed pages: probed in the pool's
        presence table, else one request per batch. An answer is as of some
        moment of the call (a page published or removed meanwhile may go
        either way), never from a table the daemon no longer keeps."""
        names = checked_names(names)
        if self.presence:
            p = self._pool(rank, ns)
            for _ in range(2):  # a table retired before the probe ended: once more
                t = p.table()
                if t is None:
                    break
                out = t.probe(names)
                if t.live():
                    return out
                p.forget_table(t)
        enc = encode_names(names)
        return self._batch(rank, ns, lambda p: _wire.exists(p.dirfd, enc))

    def lookup(self, rank, ns, names):
        """(data file, slot size, [Record]) for names: where each page lives."""
        enc = [encode_name(n) for n in names]
        return self._batch(rank, ns, lambda p: _wire.lookup(p.dirfd, enc))

    def read_into(self, rank, ns, names, buffers):
        """Reads each page into its buffer, whose size must be the page's
        length. [bool]: False for a page missing, of another length, or that
        could not be read (the buffer's contents are then undefined)."""
        names, buffers = list(names), list(buffers)
        if len(names) != len(buffers):
            raise ValueError("%d names but %d buffers" % (len(names), len(buffers)))
        enc = [encode_name(n) for n in names]
        views = [byte_view(b, writable=True) for b in buffers]
        p = self._pool(rank, ns)
        ok = [False] * len(enc)
        rest = range(len(enc))
        if self.pin and xxh3_64 is not None and enc:
            rest = self._read_pinned(p, enc, views, ok)
        if rest:
            self._read_opened(rank, ns, p, enc, views, ok, rest)
        return ok

    def _read_pinned(self, p, enc, views, ok):
        """Reads the batch with its pages pinned by one request and unpinned
        by another (no open per page). Returns the indices left for
        _read_opened: all of them when the daemon has no batch pin or the
        data file cannot be opened; pages without a checksum."""
        try:
            path, _, recs, tokens = _wire.lookup_pin(p.dirfd, enc)
        except OSError as e:
            if e.errno in (errno.EINVAL, errno.ENOTTY):
                self.pin = False  # a daemon without LOOKUP_PIN: open per page
            elif e.errno not in (errno.ENOENT, errno.ENOTDIR, errno.EBADF):
                self.last_error = e  # say EBUSY: this client holds too many pins
            return range(len(enc))
        rest = []
        try:
            data_fd, direct_fd = p.data_fds(path)
            if data_fd < 0:
                return range(len(enc))
            self.counters["pinned_batches"] += 1

            def read_some(idx):
                for i in idx:
                    rec = recs[i]
                    if not rec.found or rec.length != len(views[i]):
                        continue  # a miss
                    got = None
                    if rec.pinned and rec.has_checksum:
                        try:
                            got = self._read_slot(data_fd, direct_fd, rec, views[i])
                        except OSError as e:
                            self.last_error = e
                    if not got:
                        # Short, unreadable or corrupt: an open through the
                        # mount decides (the daemon's check at open drops a
                        # corrupt page it has not verified yet).
                        rest.append(i)
                    else:
                        self.counters["direct_reads"] += 1
                        ok[i] = True

            self._in_parallel(read_some, len(enc))
        finally:
            try:
                _wire.unpin(p.dirfd, tokens)
            except OSError as e:
                self.last_error = e  # closing the pool directory drops them
        return sorted(rest)

    def _read_opened(self, rank, ns, p, enc, views, ok, which):
        """Reads the pages `which` of the batch each held open through the
        mount (the open pins it), with one lookup for them all."""
        which = list(which)
        fds = {}

        def open_some(idx):
            for j in idx:
                i = which[j]
                try:
                    fds[i] = os.open(p.bpath + b"/" + enc[i], os.O_RDONLY | os.O_CLOEXEC)
                except OSError as e:
                    if e.errno != errno.ENOENT:
                        self.last_error = e

        try:
            self._in_parallel(open_some, len(which))
            opened = [i for i in which if i in fds]
            if not opened:
                return
            try:
                asked = [enc[i] for i in opened]
                path, _, got = self._batch(rank, ns, lambda q: _wire.lookup(q.dirfd, asked))
            except OSError as e:
                self.last_error = e
                path, got = None, [None] * len(opened)
            recs = dict(zip(opened, got))

            def read_some(idx):
                for j in idx:
                    i = opened[j]
                    ok[i] = self._read_one(p, path, fds[i], recs[i], views[i])

            self._in_parallel(read_some, len(opened))
        finally:
            for fd in fds.values():
                os.close(fd)

    def _in_parallel(self, fn, n):
        """fn(indices) over range(n) in up to self.threads contiguous chunks
        at once (the daemon answers opens in parallel; preadv and the
        checksum release the GIL), and no more than the machine has idle
        CPUs for (idle_cpus)."""
        k = min(self.threads, n)
        if k > 1:
            k = min(k, idle_cpus())
        if k <= 1:
            fn(range(n))
            return
        if self._executor is None:
            with self._lock:
                if self._executor is None:
                    self._executor = ThreadPoolExecutor(self.threads, "pagefs")
        cuts = [n * j // k for j in range(k + 1)]
        futs = [self._executor.submit(fn, range(cuts[j], cuts[j + 1])) for j in range(1, k)]
        fn(range(cuts[0], cuts[1]))
        for f in futs:
            f.result()

    def _read_one(self, p, path, fd, rec, view):
        try:
            if rec is None:  # no lookup answer: the open file alone
                st = os.fstat(fd)
                if st.st_size != len(view):
                    return False
                self.counters["mount_reads"] += 1
                return _pread_full(fd, view, 0) == len(view)
            if not rec.found or rec.length != len(view):
                return False
            direct = self._read_direct(p, path, fd, rec, view)
            if direct is not None:
                self.counters["direct_reads"] += direct
                return direct
            self.counters["mount_reads"] += 1
            return _pread_full(fd, view, 0) == len(view)
        except OSError as e:
            self.last_error = e
            return False

    def _read_direct(self, p, path, fd, rec, view):
        """Reads rec's bytes from the data file: True, False when they are
        not the page's (a miss), None to read through fd instead."""
        if not rec.has_checksum or xxh3_64 is None or path is None:
            return None
        if os.fstat(fd).st_ino != rec.ino:
            return None  # fd pins another version than rec describes
        data_fd, direct_fd = p.data_fds(path)
        if data_fd < 0:
            return None
        got = self._read_slot(data_fd, direct_fd, rec, view)
        if got is False:
            # The open file pins this version's slot, so these are its
            # bytes, corrupt on the backing: a miss (the daemon, under
            # --verify none, would serve them through fd as they are).
            self.counters["checksum_mismatches"] += 1
        return got

    def _read_slot(self, data_fd, direct_fd, rec, view):
        """Reads the bytes of rec, whose slot is pinned, from the data file
        into view and checks them: True, False when they do not match the
        checksum, None when the file is short (read through the mount)."""
        use = data_fd
        if (direct_fd >= 0 and rec.offset % _ALIGN == 0 and len(view) % _ALIGN == 0 and
                len(view) and _address(view) % _ALIGN == 0):
            use = direct_fd
        if _pread_full(use, view, rec.offset) != len(view):
            return None
        if use == direct_fd:
            self.counters["odirect_reads"] += 1
        if self.verify == "none":
            return True
        key = (rec.ino, rec.offset)
        if self.verify == "first" and self._verified.get(key) == rec.checksum:
            return True
        if xxh3_64(view) != rec.checksum:
            return False
        if self.verify == "first":
            if len(self._verified) > 1 << 20:
                self._verified.clear()
            self._verified[key] = rec.checksum
        return True

    def write(self, rank, ns, names, buffers):
        """Writes each buffer as page name (replacing a page of that name):
        one write, committed when the file closes. [bool]: False for a page
        not written (a full pool with --evict none, a daemon gone, ...).
        ValueError, with nothing written, for a buffer larger than the
        pool's page size."""
        names, buffers = list(names), list(buffers)
        if len(names) != len(buffers):
            raise ValueError("%d names but %d buffers" % (len(names), len(buffers)))
        enc = [encode_name(n) for n in names]
        views = [byte_view(b) for b in buffers]
        p = self._pool(rank, ns)
        limit = p.page_size
        for n, v in zip(names, views):
            if len(v) > limit:
                raise ValueError("page %r is %d bytes, more than pool %s/%s's page size %d"
                                 % (n, len(v), p.rank, p.ns, limit))
        if self.place and self.batch_write and enc:
            ok = self._write_batch(rank, ns, p, enc, views)
            if ok is not None:
                return ok
        paths = [p.bpath + b"/" + e for e in enc]
        ok = [False] * len(paths)

        def write_some(idx):
            for i in idx:
                ok[i] = self._write_one(p, paths[i], views[i])

        self._in_parallel(write_some, len(paths))
        return ok

    def _write_batch(self, rank, ns, p, enc, views):
        """Placed writes a batch at a time: one request reserves a slot for
        each page, the bytes go into the data file from here, and one
        request publishes them with their checksums. Pages refused a slot
        (a batch larger than what the pool can free at once) go again in a
        next round, as long as a round publishes something. [bool], or
        None to write page by page instead (a daemon without batch writes,
        a data file this process cannot write)."""
        ok = [False] * len(enc)
        todo = list(range(len(enc)))
        while todo:
            got = self._write_round(rank, ns, p, [enc[i] for i in todo],
                                    [views[i] for i in todo])
            if got is None:
                return None if len(todo) == len(enc) else ok
            done, again = got
            for j in done:
                ok[todo[j]] = True
            if not done:
                break
            todo = [todo[j] for j in again]
        self.counters["placed_writes"] += sum(ok)
        return ok

    def _write_round(self, rank, ns, p, enc, views):
        """One reserve and commit of _write_batch: (indices published,
        indices refused a slot for want of space), or None (see there)."""
        try:
            try:
                path, slot_size, recs, spans = _wire.reserve(p.dirfd, enc)
            except OSError as e:
                if e.errno not in (errno.ENOENT, errno.ENOTDIR, errno.EBADF):
                    raise
                self._forget_pool(p)  # removed and made again since p was opened
                p = self._pool(rank, ns)
                path, slot_size, recs, spans = _wire.reserve(p.dirfd, enc)
        except OSError as e:
            if e.errno == errno.EINVAL:
                self.batch_write = False  # a daemon without batch writes
                logger.warning("pagefs: the daemon of %s has no batch writes (RESERVE): "
                               "pages are placed one open at a time", self.mountpoint)
            else:
                self.last_error = e
            return None
        wfd = p.write_fd()
        entries = [(_wire.ABORT, 0)] * len(enc)

        def put_some(idx):
            for i in idx:
                r, v = recs[i], views[i]
                if wfd < 0 or not r.found or len(v) > slot_size:
                    continue
                try:
                    _pwrite_full(wfd, v, r.offset)
                    entries[i] = (len(v), xxh3_64(v))
                except OSError as e:
                    self.last_error = e

        if wfd >= 0:
            self._in_parallel(put_some, len(enc))
        done = []
        try:
            for token, a, b in spans:
                for i, err in enumerate(_wire.commit(p.dirfd, token, entries[a:b]), a):
                    if err == 0:
                        done.append(i)
                    elif err != errno.ECANCELED:
                        self.last_error = OSError(err, os.strerror(err), enc[i])
        except OSError as e:
            self.last_error = e  # the daemon is gone: nothing more was published
        if wfd < 0:
            self.place = False  # this process cannot write the data file
            logger.warning("pagefs: cannot open the data file of pool %s/%s for writing: "
                           "pages are written through the mount from now on", p.rank, p.ns)
            return None
        again = [i for i, r in enumerate(recs) if r.err == errno.ENOSPC]
        return done, again

    def _write_one(self, p, path, view):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        except OSError as e:
            self.last_error = e
            return False
        ok = False
        try:
            if self.place and self._write_placed(p, fd, view):
                self.counters["placed_writes"] += 1
            else:
                done = 0
                while done < len(view):
                    done += os.write(fd, view[done:])
                self.counters["mount_writes"] += 1
            ok = True
        except OSError as e:
            self.last_error = e
        finally:
            try:
                os.close(fd)  # commits
            except OSError as e:
                self.last_error = e
                ok = False
        return ok

    def _write_placed(self, p, fd, view):
        """Puts view's bytes into the slot of the page open as fd and tells
        the daemon their checksum: True, or False to write through fd
        instead (nothing is published from a placed write that did not
        finish: the bytes through fd replace whatever it wrote)."""
        try:
            offset, slot_size, pool_ino = _wire.place_where(fd)
        except OSError as e:
            if e.errno in (errno.ENOTTY, errno.ENOSYS):
                self.place = False  # a daemon without placed writes
                logger.warning("pagefs: the daemon of %s has no placed writes: pages are "
                               "written through the mount", self.mountpoint)
            else:
                self.last_error = e
            return False
        if pool_ino != p.ino:
            # The pool was removed and made again since p was opened: p's
            # data file is the old one. The next batch opens the new pool.
            self._forget_pool(p)
            return False
        wfd = p.write_fd()
        if wfd < 0 or len(view) > slot_size:
            return False
        try:
            _pwrite_full(wfd, view, offset)
            _wire.place_done(fd, len(view), xxh3_64(view))
        except OSError as e:
            self.last_error = e
            return False
        return True

    def delete(self, rank, ns, names):
        """Unlinks each page; [bool]: True where a page was removed."""
        p = self._pool(rank, ns)
        out = []
        for n in names:
            try:
                os.unlink(p.bpath + b"/" + encode_name(n))
                out.append(True)
            except OSError as e:
                if e.errno != errno.ENOENT:
                    self.last_error = e
                out.append(False)
        return out

    def list(self, rank, ns):
        """The names of the pool's committed pages."""
        return os.listdir(self._pool(rank, ns).path)

    def stats(self):
        """The mount's counters (the root's user.pagefs.stats JSON)."""
        return json.loads(os.getxattr(self.mountpoint, "user.pagefs.stats"))
