"""pagefs.sglang.PagefsStorage: an SGLang HiCache storage backend on a
pagefs mount, loaded by

    --hicache-storage-backend dynamic --hicache-storage-backend-extra-config
    '{"backend_name": "pagefs", "module_path": "pagefs.sglang",
      "class_name": "PagefsStorage", "mountpoint": "/mnt/pagefs"}'

Layout: each TP rank has its own rank directory (MLA models: one rank
shared by all TP ranks, written by TP rank 0 only, as SGLang's own
backends do), and each HiCache pool (kv, mamba, swa, indexer, ...) its own
pagefs pool MOUNTPOINT/RANK/POOLNAME whose page size is that pool's bytes
per page, created on first use. A page's file name is the HiCache key plus
"_" and the model name, so several models can share a mount.

Contract with HiCache: a key already stored is not written again; a page
that fails for any reason is a miss (False, None, a shorter prefix) and is
logged, never an exception into HiCache's prefetch or backup thread;
pagefs's eviction is the only eviction (this backend keeps no LRU).

extra_config fields besides the three SGLang reads:
  mountpoint  (required) the pagefs mount
  rank        rank directory to use instead of the one derived from the
              TP/PP/CP position (0..65535)
  capacity    a size ("1T") or {pool name: size} applied to the pools,
              rounded down to a whole number of their pages
  verify      "first" (default), "always" or "none": checksum checks on
              the direct read path (pagefs.Client)
  threads     pages of a batch opened, read or written at once (default
              the CPUs the process may use, at most 4)
  key_suffix  text appended to every key (default "_" + model name)
"""
import logging
import re
import threading
import time

from . import client as _client
from ._buffers import byte_view, is_tensor, tensor_span

try:  # SGLang's own interface when it is installed
    from sglang.srt.mem_cache.hicache_storage import (HiCacheStorage, HiCacheStorageConfig,
                                                      PoolHitPolicy, PoolName,
                                                      PoolTransferResult)

    HAVE_SGLANG = True
except Exception:  # noqa: BLE001 - any failure to import SGLang means: not usable
    from ._sglang_base import (HiCacheStorage, HiCacheStorageConfig, PoolHitPolicy,  # noqa: F401
                               PoolName, PoolTransferResult)

    HAVE_SGLANG = False

__all__ = ["PagefsStorage", "PagefsStats", "HAVE_SGLANG", "HiCacheStorage",
           "HiCacheStorageConfig", "PoolHitPolicy", "PoolName", "PoolTransferResult"]

logger = logging.getLogger(__name__)
_NS = re.compile(r"[a-z0-9_]{1,64}\Z")


def _pool_ns(name):
    ns = str(getattr(name, "value", name))
    if not _NS.match(ns):
        raise ValueError("HiCache pool name %r is not a pagefs namespace ([a-z0-9_]{1,64})" % ns)
    return ns


def _index(indices, j):
    v = indices[j]
    return int(v.item() if hasattr(v, "item") else v)


def _count(indices):
    if hasattr(indices, "numel"):
        return int(indices.numel())
    return len(indices)


def _span(a):
    """(first byte address, byte count) that tensor or array a spans, or
    None for anything else."""
    if is_tensor(a):
        if getattr(a.device, "type", None) != "cpu":
            return None
        return tensor_span(a)
    ai = getattr(a, "__array_interface__", None)  # numpy
    if not ai or not getattr(a, "size", 0):
        return None
    start, es = ai["data"][0], a.itemsize
    lo = hi = 0
    for size, stride in zip(a.shape, a.strides):
        step = (size - 1) * stride
        lo, hi = (lo + step, hi) if step < 0 else (lo, hi + step)
    return start + lo, hi - lo + es


def _in_host_memory(t, host):
    """True when page t is contiguous memory inside one of host's buffers
    (kv_buffer, k_buffer or v_buffer; a tensor, an array or a list of
    them, as SGLang's host pools keep them), so reading into t fills the
    host pool; else the read goes to a scratch page and
    set_from_flat_data_page copies it in. A page that get_data_page
    copied lives in its own allocation, outside every buffer of the pool."""
    if is_tensor(t):
        if not t.is_contiguous():
            return False
    elif not getattr(getattr(t, "flags", None), "c_contiguous", False):
        return False
    page = _span(t)
    if page is None or page[1] == 0:
        return False
    for attr in ("kv_buffer", "k_buffer", "v_buffer"):
        try:
            bufs = getattr(host, attr, None)
        except Exception:  # noqa: BLE001 - a property that does not apply to this pool
            continue
        for buf in bufs if isinstance(bufs, (list, tuple)) else (bufs,):
            span = _span(buf) if buf is not None else None
            if span and span[0] <= page[0] and page[0] + page[1] <= span[0] + span[1]:
                return True
    return False


def _nbytes(t):
    return len(byte_view(t))


def _prefix(flags):
    return flags.index(False) if False in flags else len(flags)


class PagefsStats:
    """What get_stats returns: counts since the previous call, and the page
    lists SGLang's storage metrics read (prefetch_pgs, backup_pgs,
    prefetch_bandwidth, backup_bandwidth)."""

    def __init__(self):
        self.hits = self.misses = 0
        self.bytes_read = self.bytes_written = 0
        self.pages_written = self.pages_skipped = self.write_failures = 0
        self.get_seconds = self.set_seconds = self.exists_seconds = 0.0
        self.get_calls = self.set_calls = self.exists_calls = 0
        self.prefetch_pgs, self.backup_pgs = [], []
        self.prefetch_bandwidth, self.backup_bandwidth = [], []

    def as_dict(self):
        return {k: v for k, v in vars(self).items()}


def _flag(v):
    """A JSON or string boolean of the extra config."""
    if isinstance(v, str):
        return v.strip().lower() not in ("0", "false", "no", "off", "")
    return bool(v)


def _threads(v):
    """The extra config's "threads": None (absent) for the client's
    default, else a whole number of at least 1."""
    if v is None:
        return None
    try:
        n = int(v)
    except (TypeError, ValueError):
        n = 0
    if n < 1 or str(n) != str(v).strip():
        raise ValueError('"threads" must be a whole number of at least 1, not %r' % (v,))
    return n


class PagefsStorage(HiCacheStorage):
    def __init__(self, storage_config, kwargs=None):
        extra = dict(getattr(storage_config, "extra_config", None) or {})
        extra.update((kwargs or {}).get("extra_config", {}) if isinstance(kwargs, dict) else {})
        mountpoint = extra.get("mountpoint")
        if not mountpoint:
            raise ValueError('PagefsStorage needs "mountpoint" in '
                             "--hicache-storage-backend-extra-config")
        self.client = _client.Client(mountpoint, verify=extra.get("verify", "first"),
                                     threads=_threads(extra.get("threads")),
                                     place=_flag(extra.get("place", True)))
        cfg = storage_config
        self.is_mla = bool(getattr(cfg, "is_mla_model", False))
        self.tp_rank = int(getattr(cfg, "tp_rank", 0))
        if "rank" in extra:
            self.rank = int(extra["rank"])
        else:
            tp_n = 1 if self.is_mla else int(getattr(cfg, "tp_size", 1))
            tp = 0 if self.is_mla else self.tp_rank
            cp_n = int(getattr(cfg, "attn_cp_size", 1) or 1)
            cp = int(getattr(cfg, "attn_cp_rank", 0) or 0)
            pp = int(getattr(cfg, "pp_rank", 0) or 0)
            self.rank = (pp * cp_n + cp) * tp_n + tp
        if not 0 <= self.rank <= 65535:
            raise ValueError("pagefs rank %d is outside 0..65535: set \"rank\" in the "
                             "extra config" % self.rank)
        model = getattr(cfg, "model_name", None) or ""
        self.suffix = extra.get("key_suffix", "_" + model.replace("/", "-") if model else "")
        self.capacity = extra.get("capacity")
        self.writer = not (self.is_mla and self.tp_rank != 0)
        self._pool_sizes = {}  # ns -> page size known to fit, or 0 if unusable
        self._lock = threading.Lock()
        self._stats = PagefsStats()
        self.mem_pool_host = None
        self.registered_pools = {}
        logger.info("pagefs HiCache backend on %s, rank directory %d%s", mountpoint, self.rank,
                    " (MLA: shared, written by TP rank 0)" if self.is_mla else "")

    # ---- helpers ----

    def _name(self, key):
        return key + self.suffix

    def _names(self, keys):
        """The file name (bytes) of each key, or None for a key that cannot
        be one (a '/' or NUL in it): that key is a miss."""
        out = []
        for k in keys:
            try:
                out.append(_client.encode_name(self._name(str(k))))
            except ValueError as e:
                logger.warning("pagefs: key %r skipped: %s", k, e)
                out.append(None)
        return out

    def _ensure_pool(self, ns, page_bytes):
        """True when pool ns exists with a page size of at least page_bytes
        (creating it, or sizing it while empty)."""
        with self._lock:
            known = self._pool_sizes.get(ns)
        if known is not None and known >= page_bytes and known:
            return True
        try:
            cap = self.capacity.get(ns) if isinstance(self.capacity, dict) else self.capacity
            pool = self.client.pool(self.rank, ns)
            size = pool.page_size
            # An empty pool takes exactly this pool's bytes per page.
            want = page_bytes if size != page_bytes and pool.xattr("used_slots") == 0 else None
            if size < page_bytes:
                want = page_bytes
            if want or known is None and cap:
                if cap:  # whole pages: at most the size asked, at least one page
                    unit = want or size
                    cap_bytes = _client.parse_size(cap)
                    cap = max(unit, cap_bytes // unit * unit) if cap_bytes else cap
                try:
                    pool = self.client.pool(self.rank, ns, page_size=want, capacity=cap)
                except ValueError:
                    if pool.page_size < page_bytes:
                        raise  # else a writer raced us to a size that fits
                size = pool.page_size
        except (OSError, ValueError) as e:
            logger.error("pagefs: pool %d/%s cannot hold %d-byte pages: %s", self.rank, ns,
                         page_bytes, e)
            size = 0
        with self._lock:
            self._pool_sizes[ns] = size
        return size >= page_bytes and size > 0

    def _exists(self, ns, keys):
        names = self._names(keys)
        asked = [n for n in names if n is not None]
        t0 = time.monotonic()
        try:
            found = iter(self.client.exists(self.rank, ns, asked)) if asked else iter(())
        except (OSError, ValueError) as e:
            if not isinstance(e, _client.PoolNotFoundError):
                logger.warning("pagefs: exists in %d/%s failed: %s", self.rank, ns, e)
            return [False] * len(keys)
        finally:
            with self._lock:
                self._stats.exists_seconds += time.monotonic() - t0
                self._stats.exists_calls += 1
        return [False if n is None else next(found) for n in names]

    def _read(self, ns, keys, targets):
        names = self._names(keys)
        idx = [i for i, n in enumerate(names) if n is not None]
        ok = [False] * len(keys)
        t0 = time.monotonic()
        try:
            if idx:
                got = self.client.read_into(self.rank, ns, [names[i] for i in idx],
                                            [targets[i] for i in idx])
                for i, g in zip(idx, got):
                    ok[i] = g
        except (OSError, ValueError) as e:
            if not isinstance(e, _client.PoolNotFoundError):
                logger.warning("pagefs: read from %d/%s failed: %s", self.rank, ns, e)
        dt = time.monotonic() - t0
        nbytes = sum(_nbytes(targets[i]) for i in range(len(keys)) if ok[i])
        with self._lock:
            s = self._stats
            s.hits += sum(ok)
            s.misses += len(ok) - sum(ok)
            s.bytes_read += nbytes
            s.get_seconds += dt
            s.get_calls += 1
            s.prefetch_pgs.append(sum(ok))
            if dt > 0 and nbytes:
                s.prefetch_bandwidth.append(nbytes / dt / 1e9)
        return ok

    def _write(self, ns, keys, values, check=True):
        """Writes the pages not stored yet (check=False: the caller knows
        none is); [bool] (True for one already there)."""
        if not keys:
            return []
        if not self.writer:
            return [True] * len(keys)
        t0 = time.monotonic()
        try:
            page_bytes = max(_nbytes(v) for v in values)
        except ValueError as e:
            logger.error("pagefs: cannot write to %d/%s: %s", self.rank, ns, e)
            return [False] * len(keys)
        if not self._ensure_pool(ns, page_bytes):
            return [False] * len(keys)
        names = self._names(keys)
        have = self._exists(ns, keys) if check else [False] * len(keys)
        todo = [i for i, n in enumerate(names) if n is not None and not have[i]]
        ok = [bool(h) for h in have]
        try:
            if todo:
                got = self.client.write(self.rank, ns, [names[i] for i in todo],
                                        [values[i] for i in todo])
                for i, g in zip(todo, got):
                    ok[i] = g
                if not all(got):
                    logger.warning("pagefs: %d of %d pages not written to %d/%s: %s",
                                   len(got) - sum(got), len(got), self.rank, ns,
                                   self.client.last_error)
        except (OSError, ValueError) as e:
            logger.warning("pagefs: write to %d/%s failed: %s", self.rank, ns, e)
        dt = time.monotonic() - t0
        written = [i for i in todo if ok[i]]
        nbytes = sum(_nbytes(values[i]) for i in written)
        with self._lock:
            s = self._stats
            s.pages_written += len(written)
            s.pages_skipped += len(keys) - len(todo)
            s.write_failures += len(todo) - len(written)
            s.bytes_written += nbytes
            s.set_seconds += dt
            s.set_calls += 1
            s.backup_pgs.append(len(written))
            if dt > 0 and nbytes:
                s.backup_bandwidth.append(nbytes / dt / 1e9)
        return ok

    # ---- host memory pools ----

    def _host_read(self, ns, host, keys, indices):
        page = getattr(host, "page_size", 1) or 1
        if _count(indices) != len(keys) * page:
            logger.error("pagefs: %d host indices for %d keys of %d tokens (pool %s)",
                         _count(indices), len(keys), page, ns)
            return [False] * len(keys)
        targets, copy_back = [], []
        for i in range(len(keys)):
            at = _index(indices, i * page)
            view = host.get_data_page(at, flat=True)
            if _in_host_memory(view, host):
                targets.append(view)
                copy_back.append(None)
            else:  # a layout whose page is not contiguous: read, then scatter
                targets.append(host.get_dummy_flat_data_page())
                copy_back.append(at)
        ok = self._read(ns, keys, targets)
        for i, at in enumerate(copy_back):
            if ok[i] and at is not None:
                try:
                    host.set_from_flat_data_page(at, targets[i])
                except Exception as e:  # noqa: BLE001 - a page that cannot land is a miss
                    logger.warning("pagefs: page %r not copied to host memory: %s", keys[i], e)
                    ok[i] = False
        return ok

    def _host_write(self, ns, host, keys, indices):
        page = getattr(host, "page_size", 1) or 1
        if _count(indices) != len(keys) * page:
            logger.error("pagefs: %d host indices for %d keys of %d tokens (pool %s)",
                         _count(indices), len(keys), page, ns)
            return [False] * len(keys)
        if not self.writer:
            return [True] * len(keys)
        have = self._exists(ns, keys)
        todo = [i for i in range(len(keys)) if not have[i]]
        with self._lock:
            self._stats.pages_skipped += len(keys) - len(todo)
        values = [host.get_data_page(_index(indices, i * page), flat=True) for i in todo]
        got = self._write(ns, [keys[i] for i in todo], values, check=False)
        ok = [True] * len(keys)
        for i, g in zip(todo, got):
            ok[i] = g
        return ok

    def register_mem_pool_host(self, mem_pool_host):
        super().register_mem_pool_host(mem_pool_host)
        self.mem_pool_host = mem_pool_host

    def register_mem_host_pool_v2(self, host_pool, host_pool_name):
        super().register_mem_host_pool_v2(host_pool, host_pool_name)
        if not hasattr(self, "registered_pools") or self.registered_pools is None:
            self.registered_pools = {}
        self.registered_pools[host_pool_name] = host_pool

    # ---- the HiCacheStorage interface ----

    def exists(self, key):
        return self._guard(lambda: self._exists("kv", [key])[0], False)

    def batch_exists(self, keys, extra_info=None):
        return self._guard(lambda: _prefix(self._exists("kv", list(keys))), 0)

    def get(self, key, target_location=None, target_sizes=None):
        def run():
            target = target_location
            if target is None:
                _, _, recs = self.client.lookup(self.rank, "kv", [self._name(key)])
                if not recs[0].found:
                    return None
                target = bytearray(recs[0].length)
            return target if self._read("kv", [key], [target])[0] else None

        return self._guard(run, None)

    def batch_get(self, keys, target_locations=None, target_sizes=None):
        keys = list(keys)
        if target_locations is None:
            return [self.get(k) for k in keys]
        targets = list(target_locations)
        return self._guard(lambda: [t if ok else None for t, ok in
                                    zip(targets, self._read("kv", keys, targets))],
                           [None] * len(keys))

    def set(self, key, value=None, target_location=None, target_sizes=None):
        return self._guard(lambda: self._write("kv", [key], [value])[0], False)

    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):
        return self._guard(lambda: all(self._write("kv", list(keys), list(values))), False)

    def batch_get_v1(self, keys, host_indices, extra_info=None):
        keys = list(keys)
        return self._guard(lambda: self._host_read("kv", self.mem_pool_host, keys, host_indices),
                           [False] * len(keys))

    def batch_set_v1(self, keys, host_indices, extra_info=None):
        keys = list(keys)
        return self._guard(lambda: self._host_write("kv", self.mem_pool_host, keys,
                                                    host_indices), [False] * len(keys))

    def batch_exists_v2(self, keys, pool_transfers=None, extra_info=None):
        keys = list(keys)

        def run():
            kv_pages = _prefix(self._exists("kv", keys))
            hits = {PoolName.KV: kv_pages} if kv_pages else {}
            final = kv_pages
            for t in pool_transfers or []:
                if final == 0:
                    break
                have = self._exists(_pool_ns(t.name), keys[:kv_pages])
                if str(getattr(t.hit_policy, "value", t.hit_policy)) == "trailing_pages":
                    trailing = max(1, len(t.keys) if t.keys else 1)
                    boundary = next((n for n in range(kv_pages, 0, -1)
                                     if all(have[max(0, n - trailing):n])), 0)
                else:
                    boundary = _prefix(have)
                if boundary:
                    hits[t.name] = boundary
                final = min(final, boundary)
            return PoolTransferResult(final, hits)

        return self._guard(run, PoolTransferResult(0, {}))

    def _batch_v2(self, transfers, op):
        results = {}
        for t in transfers:
            keys = list(t.keys or [])
            try:
                host = self.registered_pools.get(t.name)
                if host is None and _pool_ns(t.name) == "kv":
                    host = self.mem_pool_host  # registered by register_mem_pool_host only
                if host is None:
                    raise KeyError("no host pool registered for %s" % t.name)
                results[t.name] = op(_pool_ns(t.name), host, keys, t.host_indices)
            except Exception as e:  # noqa: BLE001 - a failed pool is all misses
                logger.warning("pagefs: pool %s: %s", t.name, e)
                results[t.name] = [False] * len(keys)
        return results

    def batch_get_v2(self, transfers, extra_info=None):
        return self._batch_v2(transfers, self._host_read)

    def batch_set_v2(self, transfers, extra_info=None):
        return self._batch_v2(transfers, self._host_write)

    def clear(self):
        """Removes this backend's pages (its key suffix) from its pools."""
        def run():
            with self._lock:
                pools = list(self._pool_sizes)
            for ns in pools or ["kv"]:
                try:
                    names = self.client.list(self.rank, ns)
                except OSError:
                    continue
                mine = [n for n in names if n.endswith(self.suffix)]
                self.client.delete(self.rank, ns, mine)
            return True

        return self._guard(run, False)

    def close(self):
        """Closes the pool and data file descriptors this backend holds."""
        self.client.close()

    def get_stats(self):
        with self._lock:
            s, self._stats = self._stats, PagefsStats()
        return s

    def _guard(self, fn, fallback):
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - HiCache's threads must survive
            logger.exception("pagefs: %s", e)
            return fallback
