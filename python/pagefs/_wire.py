"""The batch lookup channel of a pagefs mount (fs/fs_ioctl.c): one ioctl on
a pool directory answers for a whole batch of page names.

The request and the reply share one buffer of IOC_SIZE bytes; a batch that
does not fit is split here into as many requests as it needs.
"""
import errno
import fcntl
import os
import struct

IOC_SIZE = 16368
_IOC_READ_WRITE = 3
# _IOWR('P', 0x47, char[IOC_SIZE]) as <asm-generic/ioctl.h> encodes it.
IOC_BATCH = (_IOC_READ_WRITE << 30) | (IOC_SIZE << 16) | (ord("P") << 8) | 0x47
MAGIC = 0x53464750
VERSION = 1
OP_EXISTS = 1
OP_LOOKUP = 2
OP_LOOKUP_PIN = 3
OP_UNPIN = 4
OP_RESERVE = 5
OP_COMMIT = 6
ABORT = (1 << 64) - 1  # COMMIT's length that gives a slot back
_HDR = struct.Struct("=IHHII")
_REC = struct.Struct("=iIQQQQ")
# Most names a request may carry: a LOOKUP_PIN reply needs a 40-byte
# record per name, the slot size, the token and the data file's path (up
# to 4 KiB).
MAX_NAMES = (IOC_SIZE - _HDR.size - 16 - 4096) // _REC.size


class Record:
    """What LOOKUP answers for one name."""

    __slots__ = ("err", "has_checksum", "pinned", "ino", "offset", "length", "checksum")

    def __init__(self, err, flags, ino, offset, length, checksum):
        self.err = -err
        self.has_checksum = bool(flags & 1)
        self.pinned = bool(flags & 2)
        self.ino = ino
        self.offset = offset
        self.length = length
        self.checksum = checksum

    @property
    def found(self):
        return self.err == 0


def _chunks(encoded):
    """Splits encoded names into runs that fit one request."""
    start, size = 0, 0
    for i, name in enumerate(encoded):
        if i - start >= MAX_NAMES or size + len(name) + 1 > IOC_SIZE - _HDR.size:
            yield start, i
            start, size = i, 0
        size += len(name) + 1
    yield start, len(encoded)


def _request(dirfd, op, names, body=None):
    """One request of op for names (or, with body, for len(names) entries
    of that body): the reply buffer and its header's byte count."""
    if body is None:
        body = b"\0".join(names) + b"\0" if names else b""
    buf = bytearray(IOC_SIZE)
    _HDR.pack_into(buf, 0, MAGIC, VERSION, op, len(names), len(body))
    buf[_HDR.size:_HDR.size + len(body)] = body
    fcntl.ioctl(dirfd, IOC_BATCH, buf, True)
    magic, _, rop, count, nbytes = _HDR.unpack_from(buf, 0)
    if magic != MAGIC or rop != op or count != len(names):
        raise OSError(errno.EPROTO, "pagefs answered a batch request with a malformed reply")
    return buf, nbytes


def exists(dirfd, encoded):
    """[bool] for each encoded (bytes) name of the pool open as dirfd."""
    out = []
    for a, b in _chunks(encoded):
        if a == b:
            continue
        buf, _ = _request(dirfd, OP_EXISTS, encoded[a:b])
        out.extend(x == 1 for x in buf[_HDR.size:_HDR.size + (b - a)])
    return out


def lookup(dirfd, encoded):
    """(data file path, slot size, [Record]) for the encoded names."""
    path, slot_size, recs, _ = _lookup(dirfd, encoded, OP_LOOKUP)
    return path, slot_size, recs


def lookup_pin(dirfd, encoded):
    """lookup, and each found page's slot stays pinned (Record.pinned)
    until unpin(dirfd, tokens) or until dirfd is closed: (path, slot size,
    [Record], tokens). OSError EINVAL from a daemon without the op."""
    tokens = []
    try:
        return _lookup(dirfd, encoded, OP_LOOKUP_PIN, tokens)
    except BaseException:
        if tokens:
            unpin(dirfd, tokens)
        raise


def unpin(dirfd, tokens):
    """Drops the pins lookup_pin gave under tokens."""
    for a in range(0, len(tokens), 1024):
        part = tokens[a:a + 1024]
        _request(dirfd, OP_UNPIN, [], struct.pack("=%dQ" % len(part), *part))


def reserve(dirfd, encoded):
    """A slot for each encoded name, held for a batch write until commit()
    (or until dirfd is closed): (data file path, slot size, [Record]
    whose offset is the slot's where found, [(token, first, end)] the
    requests the names went in). OSError EINVAL from a daemon without
    batch writes."""
    tokens = []
    try:
        path, slot_size, recs, _ = _lookup(dirfd, encoded, OP_RESERVE, tokens, spans=True)
    except BaseException:
        for token, a, b in tokens:  # the requests answered before: give back
            try:
                commit(dirfd, token, [(ABORT, 0)] * (b - a))
            except OSError:
                pass
        raise
    return path, slot_size, recs, tokens


def commit(dirfd, token, entries):
    """Publishes the reservations of one RESERVE request: entries holds a
    (length, checksum) per name of it, length ABORT to give the slot back.
    [errno]: 0 where published."""
    body = struct.pack("=Q", token) + b"".join(struct.pack("=QQ", n, c) for n, c in entries)
    buf, _ = _request(dirfd, OP_COMMIT, entries, body)
    count = len(entries)
    return [-e for e in struct.unpack_from("=%di" % count, buf, _HDR.size)]


def _lookup(dirfd, encoded, op, tokens=None, spans=False):
    recs, path, slot_size = [], None, 0
    for a, b in _chunks(encoded):
        if a == b:
            continue
        buf, path_len = _request(dirfd, op, encoded[a:b])
        (slot_size,) = struct.unpack_from("=Q", buf, _HDR.size)
        at = _HDR.size + 8
        if op in (OP_LOOKUP_PIN, OP_RESERVE):
            token = struct.unpack_from("=Q", buf, at)[0]
            tokens.append((token, a, b) if spans else token)
            at += 8
        for _ in range(b - a):
            recs.append(Record(*_REC.unpack_from(buf, at)))
            at += _REC.size
        path = os.fsdecode(bytes(buf[at:at + path_len]))
    return path, slot_size, recs, tokens


# Placed writes (fs/fs_place.c): on a page open for writing through the
# mount, WHERE says where its slot is in the pool's data file, DONE gives
# the length and XXH3-64 of the bytes the writer put there.
_PLACE = struct.Struct("=IHHQQQQQ")
IOC_PLACE = (_IOC_READ_WRITE << 30) | (_PLACE.size << 16) | (ord("P") << 8) | 0x48
PLACE_WHERE = 1
PLACE_DONE = 2


def _place(fd, op, length=0, checksum=0):
    buf = bytearray(_PLACE.pack(MAGIC, VERSION, op, 0, 0, length, checksum, 0))
    fcntl.ioctl(fd, IOC_PLACE, buf, True)
    magic, _, rop, offset, slot_size, _, _, pool_ino = _PLACE.unpack(buf)
    if magic != MAGIC or rop != op:
        raise OSError(errno.EPROTO, "pagefs answered a placed write with a malformed reply")
    return offset, slot_size, pool_ino


def place_where(fd):
    """(offset, slot size, pool directory's inode number) of the slot of the
    page open for writing as fd. OSError ENOTTY from a daemon without
    placed writes."""
    return _place(fd, PLACE_WHERE)


def place_done(fd, length, checksum):
    """The page open as fd is the length bytes at its slot, whose XXH3-64
    is checksum: close(fd) publishes them."""
    _place(fd, PLACE_DONE, length, checksum)
