"""Self-describing page contents for the integration tests.

Every page a test writes under load carries a header with the name it is
meant to live under, a version and its total length; the body is derived
deterministically from (name, version). So any bytes read back can be
checked on their own: a torn page (wrong length), a page of another name,
or bytes of a version nobody wrote are all detected.

Pure standard library (no pytest) so workload.py can import it.
"""
import hashlib
import struct

MAGIC = b"PFSTPG01"
_HDR = struct.Struct("<8sQQH")  # magic, total length, version, name length


class PageError(ValueError):
    """The bytes are not a complete, self-consistent test page."""


def _b(name):
    return name if isinstance(name, bytes) else name.encode()


def header_len(name):
    return _HDR.size + len(_b(name))


def body(name, version, n):
    if n <= 0:
        return b""
    return hashlib.shake_128(_b(name) + struct.pack("<Q", version)).digest(n)


def make_page(name, version, length):
    """Bytes of a test page that belongs under `name`, `length` bytes long."""
    name = _b(name)
    hl = header_len(name)
    if length < hl:
        raise ValueError(f"length {length} is shorter than the header ({hl})")
    return _HDR.pack(MAGIC, length, version, len(name)) + name + body(name, version, length - hl)


def decode_page(data):
    """Returns (name, version) or raises PageError saying what is wrong."""
    data = bytes(data)
    if len(data) < _HDR.size:
        raise PageError(f"only {len(data)} bytes, shorter than a header")
    magic, total, version, nlen = _HDR.unpack_from(data)
    if magic != MAGIC:
        raise PageError(f"bad magic {magic!r} (first bytes {data[:16]!r})")
    if total != len(data):
        raise PageError(f"torn page: header says {total} bytes, read {len(data)}")
    name = data[_HDR.size:_HDR.size + nlen]
    if len(name) != nlen:
        raise PageError("name cut short")
    want = body(name, version, total - _HDR.size - nlen)
    got = data[_HDR.size + nlen:]
    if got != want:
        first = next(i for i in range(len(want)) if got[i] != want[i])
        raise PageError(f"body of {name!r} v{version} differs from byte {_HDR.size + nlen + first} on")
    return name, version
