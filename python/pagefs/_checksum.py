"""XXH3-64, the checksum pagefs keeps for every committed page: Debian's
python3-xxhash when present, else libxxhash through ctypes, else None
(the direct read path then reads through the mount, which verifies)."""
import ctypes
import ctypes.util


def _find():
    try:
        import xxhash

        if hasattr(xxhash, "xxh3_64_intdigest"):
            return "python3-xxhash", xxhash.xxh3_64_intdigest
    except ImportError:
        pass
    for name in ("libxxhash.so.0", ctypes.util.find_library("xxhash")):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        fn = lib.XXH3_64bits
        fn.restype = ctypes.c_uint64
        fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t]

        def xxh3(mv, fn=fn):
            if len(mv) == 0:
                return fn(None, 0)
            if mv.readonly:
                return fn(ctypes.c_char_p(bytes(mv)), len(mv))
            return fn(ctypes.addressof(ctypes.c_char.from_buffer(mv)), len(mv))

        return "libxxhash (ctypes)", xxh3
    return None, None


SOURCE, xxh3_64 = _find()
