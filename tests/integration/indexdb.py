"""The pages an SQLite index holds, read straight from its file: the rows
of `pages` and the pages of `page_log` blobs (meta/store/sqlite_log.h:
the key protocol's confirms are written as one blob per run of
consecutive page ids). Tests read a stopped daemon's index with it."""

import sqlite3
import struct

import xxhash


def _varint(b, at):
    v = shift = 0
    while True:
        c = b[at]
        at += 1
        v |= (c & 0x7F) << shift
        if not c & 0x80:
            return v, at
        shift += 7


def _zigzag(v):
    return (v >> 1) ^ -(v & 1)


def log_pages(pool, lo, span, body):
    """The pages of one blob, as dicts like page rows; ValueError if it
    does not decode. (Its XXH3-64 is seeded with that of its row's pool,
    lo and span; store_sqlite_log.c has both versions' entries.)"""
    body = bytes(body)
    seed = xxhash.xxh3_64_intdigest(struct.pack("<QQQ", pool, lo, span))
    if len(body) < 13 or \
            int.from_bytes(body[-8:], "little") != xxhash.xxh3_64_intdigest(body[:-8], seed=seed):
        raise ValueError("checksum mismatch")
    version = body[0]
    if version not in (1, 2):
        raise ValueError("unknown version")
    count, at = _varint(body, 1)
    out = []
    prev = {"slot": 0, "length": 0, "mtime": 0, "name": b""}
    for _ in range(count):
        off, at = _varint(body, at)
        p = {"id": lo + off, "pool": pool, "checksum": None}
        if version == 1:
            p["slot"], at = _varint(body, at)
            p["length"], at = _varint(body, at)
            flags = body[at]
            at += 1
        else:
            d, at = _varint(body, at)
            p["slot"] = prev["slot"] + _zigzag(d)
            flags = body[at]
            at += 1
        if flags & 1:
            p["checksum"] = int.from_bytes(body[at:at + 8], "little", signed=True)
            at += 8
        if version == 1:
            p["mtime"], at = _varint(body, at)
        else:
            if flags & 2:
                p["length"] = prev["length"]
            else:
                p["length"], at = _varint(body, at)
            d, at = _varint(body, at)
            p["mtime"] = prev["mtime"] + _zigzag(d)
        d, at = _varint(body, at)
        p["atime"] = p["mtime"] + _zigzag(d)
        p["gen"], at = _varint(body, at)
        if version == 1:
            n, at = _varint(body, at)
            p["name"] = body[at:at + n]
            at += n
        else:
            shared, at = _varint(body, at)
            own, at = _varint(body, at)
            if flags & 4:
                p["name"] = body[at:at + own // 2].hex().encode()
                at += own // 2
            else:
                p["name"] = body[at:at + own]
                at += own
            p["name"] += prev["name"][len(prev["name"]) - shared:] if shared else b""
        out.append(p)
        prev = p
    if at != len(body) - 8:
        raise ValueError("bad page entry")
    return out


def pages(path):
    """Every page of the index at path, rows and log, sorted by id."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        cols = ("id", "pool", "name", "slot", "length", "checksum", "mtime", "atime", "gen")
        out = [dict(zip(cols, r)) for r in
               con.execute("SELECT id, pool, name, slot, length, checksum, mtime, atime, gen"
                           " FROM pages")]
        if con.execute("SELECT 1 FROM sqlite_master WHERE name='page_log'").fetchone():
            for pool, lo, span, body in con.execute("SELECT pool, lo, span, body FROM page_log"):
                out += log_pages(pool, lo, span, body)
    finally:
        con.close()
    for p in out:
        p["name"] = bytes(p["name"])
    return sorted(out, key=lambda p: p["id"])


def page(path, name):
    """The page named name (str) of the index at path, or None."""
    want = name.encode()
    return next((p for p in pages(path) if p["name"] == want), None)
