"""pagefs.sglang.PagefsStorage on a real mount, driven as SGLang's HiCache
drives a storage backend: loaded the way --hicache-storage-backend dynamic
loads a class, v0 calls with buffers, the zero-copy v1 calls and the v2
side pools over host memory pools. Without SGLang installed, the stand-in
pagefs/_sglang_base.py provides the base classes."""
import importlib
import logging
import os
import time

import pytest

np = pytest.importorskip("numpy")

import pagefs.sglang as ps  # noqa: E402
from pagefs._sglang_base import PoolTransfer  # noqa: E402

TOKENS_PER_PAGE = 4


class HostPool:
    """A host memory pool shaped like SGLang's HostKVCache, in numpy.

    page_first: tokens are rows, so one page is a contiguous slice and
    get_data_page returns a view; layer_first: a page is spread over the
    layers, and get_data_page returns a copy; copy_view: a view of a copy
    (memory that is not the pool's, though it looks like a view)."""

    def __init__(self, tokens, token_bytes, layout="page_first", layers=2):
        self.page_size = TOKENS_PER_PAGE
        self.layout = layout
        self.layers = layers
        if layout in ("page_first", "copy_view"):
            self.kv_buffer = np.zeros((tokens, token_bytes), dtype=np.uint8)
        else:
            self.kv_buffer = np.zeros((layers, tokens, token_bytes // layers), dtype=np.uint8)

    def get_data_page(self, index, flat=True):
        if self.layout == "page_first":
            return self.kv_buffer[index:index + self.page_size].reshape(-1)
        if self.layout == "copy_view":  # a view, but of a copy: not host memory
            return self.kv_buffer[index:index + self.page_size].copy().reshape(-1)
        return self.kv_buffer[:, index:index + self.page_size, :].flatten()

    def get_dummy_flat_data_page(self):
        return np.zeros(self.get_data_page(0).size, dtype=np.uint8)

    def set_from_flat_data_page(self, index, data):
        if self.layout in ("page_first", "copy_view"):
            self.kv_buffer[index:index + self.page_size] = data.reshape(self.page_size, -1)
        else:
            self.kv_buffer[:, index:index + self.page_size, :] = data.reshape(self.layers,
                                                                         self.page_size, -1)

    def fill(self, index, seed):
        page = self.get_data_page(index)
        data = (np.arange(page.size, dtype=np.uint32) * 7 + seed).astype(np.uint8)
        self.set_from_flat_data_page(index, data)
        return data


def config(tp_rank=0, tp_size=1, mla=False, model="org/model-7b", **extra):
    return ps.HiCacheStorageConfig(tp_rank=tp_rank, tp_size=tp_size, pp_rank=0, pp_size=1,
                                   attn_cp_rank=0, attn_cp_size=1, is_mla_model=mla,
                                   enable_storage_metrics=True, is_page_first_layout=True,
                                   model_name=model, extra_config=extra)


def dynamic_backend(cfg):
    """What SGLang's StorageBackendFactory does for `dynamic`."""
    ec = cfg.extra_config
    cls = getattr(importlib.import_module(ec["module_path"]), ec["class_name"])
    assert issubclass(cls, ps.HiCacheStorage)
    return cls(cfg, {})


OPEN = []


@pytest.fixture
def mnt(mount):
    yield mount("--page-size", "4K", "--capacity", "1M")
    while OPEN:  # their open fds would keep the mount busy at unmount
        OPEN.pop().close()


def backend(m, **kw):
    extra = {"backend_name": "pagefs", "module_path": "pagefs.sglang",
             "class_name": "PagefsStorage", "mountpoint": str(m.mnt)}
    extra.update(kw.pop("extra", {}))
    b = dynamic_backend(config(**kw, **extra))
    OPEN.append(b)
    return b


def keys(n, tag="k"):
    return [f"{tag}{i:063x}" for i in range(n)]


@pytest.mark.parametrize("layout", ["page_first", "layer_first", "copy_view"])
def test_v1_calls_move_exact_pages_between_host_memory_and_the_pool(mnt, layout):
    b = backend(mnt)
    src = HostPool(64, 1024, layout)
    b.register_mem_pool_host(src)
    ks = keys(8)
    idx = np.arange(8 * TOKENS_PER_PAGE)
    want = [src.fill(i * TOKENS_PER_PAGE, i) for i in range(8)]
    assert b.batch_set_v1(ks, idx) == [True] * 8
    pool = mnt.path(0, "kv")
    assert int(os.getxattr(pool, "user.pagefs.page_size")) == 4096, "page size = bytes per page"
    assert sorted(os.listdir(pool)) == sorted(k + "_org-model-7b" for k in ks)
    assert b.batch_exists(ks + keys(2, "x")) == 8

    dst = HostPool(64, 1024, layout)
    b.register_mem_pool_host(dst)
    at = np.arange(32, 64)  # other host slots than the writer used
    assert b.batch_get_v1(ks, at) == [True] * 8
    for i in range(8):
        assert (dst.get_data_page(32 + i * TOKENS_PER_PAGE) == want[i]).all()
    if layout == "page_first":
        assert b.client.counters["direct_reads"] == 8
    s = b.get_stats()
    assert s.hits == 8 and s.pages_written == 8 and s.bytes_read == 8 * 4096
    assert b.get_stats().hits == 0, "get_stats counts since the previous call"


def test_a_stored_key_is_not_written_again(mnt):
    b = backend(mnt)
    host = HostPool(16, 1024)
    b.register_mem_pool_host(host)
    host.fill(0, 1)
    assert b.batch_set_v1(keys(1), np.arange(4)) == [True]
    p = mnt.path(0, "kv", keys(1)[0] + "_org-model-7b")
    before = os.stat(p)
    host.fill(0, 2)
    assert b.batch_set_v1(keys(1), np.arange(4)) == [True]
    assert b.set(keys(1)[0], host.get_data_page(0)) is True
    after = os.stat(p)
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert b.get_stats().pages_skipped == 2


def test_v0_calls_take_and_fill_buffers(mnt):
    b = backend(mnt)
    vals = [np.full(3000, i, dtype=np.uint8) for i in range(3)]
    assert b.batch_set(keys(3), vals) is True
    assert b.exists(keys(3)[1]) and not b.exists("absent")
    outs = [np.zeros(3000, dtype=np.uint8) for _ in range(3)]
    got = b.batch_get(keys(3) + ["absent"], outs + [np.zeros(3000, dtype=np.uint8)])
    assert got[3] is None and all(g is o for g, o in zip(got, outs))
    assert all((o == i).all() for i, o in enumerate(outs))
    one = b.get(keys(3)[2])
    assert bytes(one) == bytes(vals[2])
    assert b.get("absent") is None


def test_each_tp_rank_has_its_own_rank_directory_and_mla_shares_rank_0(mnt):
    for r in range(2):
        b = backend(mnt, tp_rank=r, tp_size=2)
        assert b.set("k", np.full(100, r, dtype=np.uint8))
    assert os.listdir(mnt.path(1, "kv")) == ["k_org-model-7b"]
    assert open(mnt.path(1, "kv", "k_org-model-7b"), "rb").read() == bytes([1]) * 100
    m0 = backend(mnt, tp_rank=0, tp_size=2, mla=True, model="mla")
    m1 = backend(mnt, tp_rank=1, tp_size=2, mla=True, model="mla")
    assert m1.set("s", np.ones(10, dtype=np.uint8)) is True  # rank 1 leaves it to rank 0
    assert not m1.exists("s")
    assert m0.set("s", np.ones(10, dtype=np.uint8)) and m1.exists("s")
    assert m0.rank == m1.rank == 0


def test_side_pools_get_their_own_pools_and_page_sizes_and_hit_policies(mnt):
    b = backend(mnt)
    kv, mamba = HostPool(64, 1024), HostPool(64, 512)
    b.register_mem_pool_host(kv)
    b.register_mem_host_pool_v2(kv, ps.PoolName.KV)
    b.register_mem_host_pool_v2(mamba, ps.PoolName.MAMBA)
    ks = keys(6)
    idx = np.arange(6 * TOKENS_PER_PAGE)
    for i in range(6):
        kv.fill(i * TOKENS_PER_PAGE, i)
        mamba.fill(i * TOKENS_PER_PAGE, 100 + i)
    assert b.batch_set_v1(ks, idx) == [True] * 6
    # mamba only for the last two pages (a trailing state)
    res = b.batch_set_v2([PoolTransfer(name=ps.PoolName.MAMBA, keys=ks[4:6],
                                       host_indices=idx[16:24])])
    assert res[ps.PoolName.MAMBA] == [True, True]
    assert int(os.getxattr(mnt.path(0, "mamba"), "user.pagefs.page_size")) == 2048
    assert int(os.getxattr(mnt.path(0, "kv"), "user.pagefs.page_size")) == 4096

    trailing = PoolTransfer(name=ps.PoolName.MAMBA, keys=ks[4:6],
                            hit_policy=ps.PoolHitPolicy.TRAILING_PAGES)
    r = b.batch_exists_v2(ks, [trailing])
    assert r.kv_hit_pages == 6 and r.extra_pool_hit_pages[ps.PoolName.MAMBA] == 6
    allp = PoolTransfer(name=ps.PoolName.MAMBA, keys=ks,
                        hit_policy=ps.PoolHitPolicy.ALL_PAGES)
    r = b.batch_exists_v2(ks, [allp])
    assert r.kv_hit_pages == 0, "all_pages: mamba is missing for page 0"

    dst = HostPool(64, 512)
    b.register_mem_host_pool_v2(dst, ps.PoolName.MAMBA)
    got = b.batch_get_v2([PoolTransfer(name=ps.PoolName.MAMBA, keys=ks[3:6],
                                       host_indices=np.arange(12))])
    assert got[ps.PoolName.MAMBA] == [False, True, True]
    assert (dst.get_data_page(4) == mamba.get_data_page(16)).all()
    bad = b.batch_get_v2([PoolTransfer(name=ps.PoolName.MAMBA, keys=ks[4:6],
                                       host_indices=np.arange(3))])
    assert bad[ps.PoolName.MAMBA] == [False, False], "wrong index count: misses"
    unknown = b.batch_get_v2([PoolTransfer(name=ps.PoolName.SWA, keys=ks[:1],
                                           host_indices=np.arange(4))])
    assert unknown[ps.PoolName.SWA] == [False], "a pool with no host pool: misses"


def test_failures_are_misses_never_exceptions(mnt, caplog):
    caplog.set_level(logging.WARNING)
    b = backend(mnt)
    assert b.set("a/b", np.ones(10, dtype=np.uint8)) is False
    assert b.batch_exists(["ok", "a\0b"]) == 0
    assert b.get("a/b", np.zeros(10, dtype=np.uint8)) is None
    assert b.set("small", np.ones(10, dtype=np.uint8))
    # the pool now has pages of 4 KiB and is not empty: a bigger page is a miss
    assert b.set("big", np.ones(8192, dtype=np.uint8)) is False
    assert "cannot hold 8192-byte pages" in caplog.text
    # a buffer of another size than the page is a miss, the buffer untouched
    out = np.full(11, 9, dtype=np.uint8)
    assert b.get("small", out) is None and (out == 9).all()
    host = HostPool(16, 1024)
    b.register_mem_pool_host(host)
    assert b.batch_get_v1(["nokey"], np.arange(4)) == [False]
    assert b.batch_get_v1(["x"], None) == [False]


def test_a_pool_name_that_is_no_namespace_is_a_miss(mnt):
    b = backend(mnt)
    b.register_mem_host_pool_v2(HostPool(16, 512), "Bad-Name")
    assert b.batch_set_v2([PoolTransfer(name="Bad-Name", keys=["k"],
                                        host_indices=np.arange(4))]) == {"Bad-Name": [False]}


def test_a_mountpoint_that_is_not_pagefs_fails_at_construction(tmp_path):
    with pytest.raises(OSError, match="is not a pagefs mount"):
        dynamic_backend(config(mountpoint=str(tmp_path), module_path="pagefs.sglang",
                               class_name="PagefsStorage", backend_name="pagefs"))
    with pytest.raises(ValueError, match="mountpoint"):
        ps.PagefsStorage(config(), {})


def test_capacity_from_the_extra_config_is_applied_to_new_pools(mnt):
    b = backend(mnt, extra={"capacity": {"kv": "64K"}})
    assert b.set("k", np.ones(4096, dtype=np.uint8))
    assert int(os.getxattr(mnt.path(0, "kv"), "user.pagefs.capacity")) == 65536


def test_threads_in_the_extra_config_set_the_clients_and_bad_ones_are_refused(mnt):
    assert backend(mnt, extra={"threads": "2"}).client.threads == 2
    assert backend(mnt, extra={"threads": 3}).client.threads == 3
    cpus = len(os.sched_getaffinity(0))
    assert backend(mnt).client.threads == max(1, min(4, cpus))
    for bad in ("0", -1, "two", 2.5):
        with pytest.raises(ValueError, match="threads"):
            backend(mnt, extra={"threads": bad})


@pytest.mark.timeout_s(90)
def test_a_dead_daemon_makes_every_call_a_miss(mnt):
    b = backend(mnt)
    assert b.set("k", np.ones(100, dtype=np.uint8))
    mnt.kill9()
    assert b.exists("k") is False
    assert b.batch_exists(["k"]) == 0
    assert b.get("k", np.zeros(100, dtype=np.uint8)) is None
    assert b.set("k2", np.ones(100, dtype=np.uint8)) is False
    b.register_mem_pool_host(HostPool(16, 1024))
    assert b.batch_get_v1(["k"], np.arange(4)) == [False]
    assert b.batch_set_v1(["k3"], np.arange(4)) == [False]


def test_clear_removes_this_backends_pages_only(mnt):
    a = backend(mnt, model="a")
    other = backend(mnt, model="b")
    a.set("k", np.ones(10, dtype=np.uint8))
    other.set("k", np.ones(10, dtype=np.uint8))
    assert a.clear() is True
    assert os.listdir(mnt.path(0, "kv")) == ["k_b"]


@pytest.mark.timeout_s(120)
def test_prefetch_and_backup_threads_at_once_move_exact_pages(mnt):
    """HiCache reads (prefetch) and writes (backup) from two threads on one
    backend: every page read is the one written under its key."""
    import threading

    b = backend(mnt)
    src, dst = HostPool(256, 1024), HostPool(256, 1024)
    b.register_mem_pool_host(src)
    pages = {}
    written, errors, read_batches, stop = [], [], [], threading.Event()

    def backup():
        for round_ in range(12):
            ks = keys(4, "r%d_" % round_)
            idx = np.arange(4 * TOKENS_PER_PAGE) + (round_ % 4) * 16
            for i in range(4):
                pages[ks[i]] = src.fill(int(idx[i * TOKENS_PER_PAGE]), round_ * 4 + i).copy()
            if b.batch_set_v1(ks, idx) == [True] * 4:
                written.extend(ks)
        stop.set()

    def prefetch():
        reads = 0
        while not stop.is_set():
            ks = list(written[-4:])
            if len(ks) < 4:
                time.sleep(0.001)
            else:
                reads += 1
                at = np.arange(4 * TOKENS_PER_PAGE) + 128
                ok = b._host_read("kv", dst, ks, at)
                for i, k in enumerate(ks):
                    if ok[i] and not (dst.get_data_page(128 + i * TOKENS_PER_PAGE)
                                      == pages[k]).all():
                        errors.append(k)
        read_batches.append(reads)

    t1, t2 = threading.Thread(target=backup), threading.Thread(target=prefetch)
    t1.start()
    t2.start()
    t1.join(90)
    t2.join(90)
    assert len(written) == 48 and not errors
    assert read_batches and read_batches[0] > 0, "no read ran beside the writes"


def test_a_v2_kv_transfer_uses_the_host_pool_given_by_register_mem_pool_host(mnt):
    b = backend(mnt)
    host = HostPool(32, 1024)
    b.register_mem_pool_host(host)
    want = host.fill(0, 5).copy()
    res = b.batch_set_v2([PoolTransfer(name=ps.PoolName.KV, keys=["k"],
                                       host_indices=np.arange(4))])
    assert res[ps.PoolName.KV] == [True]
    got = b.batch_get_v2([PoolTransfer(name=ps.PoolName.KV, keys=["k"],
                                       host_indices=np.arange(16, 20))])
    assert got[ps.PoolName.KV] == [True] and (host.get_data_page(16) == want).all()
