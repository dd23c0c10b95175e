"""SGLang HiCache file backend's access pattern, as SPEC "Who uses it and how" states it:
exists via stat; temp file `<key>.bin.tmp.<pid>.<tid>.<uuid>` written with one
open/write/close; rename over `<key>.bin`; read with open/read/close; list with
readdir; delete with unlink.
"""
import concurrent.futures
import hashlib
import os
import threading
import uuid

import pytest

from pagefs_helpers import assert_bytes_equal

SUFFIX = "_Qwen-Qwen3-32B_0_2"
SIZES = {"64K": 64 << 10, "1M": 1 << 20}


def sglang_key(i):
    return hashlib.sha256(b"prefix-tokens-%d" % i).hexdigest() + SUFFIX


def page_for(key, size):
    return hashlib.shake_128(key.encode()).digest(size)


class FileBackend:
    """What HiCacheFile does, minus torch."""

    def __init__(self, directory):
        self.dir = str(directory)

    def path(self, key):
        return os.path.join(self.dir, f"{key}.bin")

    def exists(self, key):
        return os.path.exists(self.path(key))

    def set(self, key, value):
        tmp = os.path.join(self.dir, f"{key}.bin.tmp.{os.getpid()}.{threading.get_ident()}."
                                     f"{uuid.uuid4().hex}")
        with open(tmp, "wb") as f:
            f.write(value)
        os.replace(tmp, self.path(key))

    def get(self, key, size):
        buf = bytearray(size)
        with open(self.path(key), "rb", buffering=0) as f:
            n = f.readinto(memoryview(buf))
        assert n == size, f"get {key}: read {n} of {size} bytes"
        return bytes(buf)

    def delete(self, key):
        os.remove(self.path(key))


@pytest.mark.parametrize("page", ["64K", "1M"])
def test_sglang_file_backend_pattern_round_trips_200_keys(mount, page):
    size = SIZES[page]
    m = mount("--page-size", page, "--capacity", "256M")
    be = FileBackend(m.pool(0, "kv"))
    keys = [sglang_key(i) for i in range(200)]
    for k in keys:
        assert not be.exists(k), f"{k} exists before it was written"
        be.set(k, page_for(k, size))
        assert be.exists(k), f"{k} missing right after set"
    listing = os.listdir(be.dir)
    tmps = [n for n in listing if ".tmp." in n]
    assert not tmps, f"temp files left in the listing: {tmps[:5]}"
    assert sorted(listing) == sorted(f"{k}.bin" for k in keys)
    for k in keys:
        assert_bytes_equal(be.get(k, size), page_for(k, size), k)
        assert os.stat(be.path(k)).st_size == size
    for k in keys:
        be.delete(k)
        assert not be.exists(k), f"{k} still exists after delete"
    assert os.listdir(be.dir) == []


def test_sglang_pattern_from_four_threads_with_duplicate_keys(mount):
    size = SIZES["64K"]
    m = mount("--page-size", "64K", "--capacity", "64M")
    be = FileBackend(m.pool(0, "kv"))
    keys = [sglang_key(i) for i in range(150)]
    work = keys + keys[::3]  # a third of the keys are set twice, concurrently

    def set_if_missing(k):
        if not be.exists(k):
            be.set(k, page_for(k, size))
        return k

    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        for f in concurrent.futures.as_completed([ex.submit(set_if_missing, k) for k in work]):
            f.result()
    listing = os.listdir(be.dir)
    assert sorted(listing) == sorted(f"{k}.bin" for k in keys), \
        f"unexpected names: {sorted(set(listing) - {f'{k}.bin' for k in keys})[:5]}"

    def check(k):
        assert_bytes_equal(be.get(k, size), page_for(k, size), k)

    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        for f in concurrent.futures.as_completed([ex.submit(check, k) for k in keys]):
            f.result()
