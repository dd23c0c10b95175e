"""pagefs.Client and pagefs.sglang.PagefsStorage with real torch tensors
on a real mount: bf16 and fp16 pages written and read back bit for bit
(every 16-bit pattern, NaN payloads included), views with a storage
offset, the tensors the client refuses (not contiguous, not in host
memory, a conjugate view), and HiCache's host pools as SGLang lays them out
(sglang/srt/mem_cache/pool_host: MHA with K and V, MLA with one latent
buffer; layer_first, page_first and page_first_direct), built here from
torch tensors. Skipped where torch is not installed."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import pagefs  # noqa: E402
import pagefs.sglang as ps  # noqa: E402
from pagefs._checksum import xxh3_64  # noqa: E402

TOKENS = 4  # tokens per HiCache page
LAYOUTS = ["layer_first", "page_first", "page_first_direct"]


def random_bits(shape, dtype, seed):
    """A tensor of dtype whose 16-bit words are random: every bit pattern,
    NaNs, infinities and -0.0 among them."""
    g = torch.Generator().manual_seed(seed)
    words = torch.randint(-(1 << 15), 1 << 15, shape, dtype=torch.int16, generator=g)
    return words.view(dtype)


def raw(t):
    """The bytes of tensor t in memory, by a path that is not pagefs's."""
    return t.contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b""


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.int16),
                                                                       b.view(torch.int16))


@pytest.fixture
def client(mount):
    m = mount("--page-size", "16K", "--capacity", "4M")
    c = pagefs.Client(m.mnt)
    c.pool(0, "kv")
    yield m, c
    c.close()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_half_precision_tensor_round_trips_bit_exactly(client, dtype):
    m, c = client
    src = [random_bits((8, 512), dtype, seed) for seed in (1, 2)]  # 8 KiB each
    assert c.write(0, "kv", ["a", "b"], src) == [True, True]
    for name, t in zip("ab", src):
        with open(m.path(0, "kv", name), "rb") as f:
            assert f.read() == raw(t), "the page holds the tensor's bytes"
    dst = [torch.zeros(8, 512, dtype=dtype) for _ in src]
    assert c.read_into(0, "kv", ["a", "b", "absent"], dst + [torch.zeros(8, 512, dtype=dtype)]) \
        == [True, True, False]
    for s, d in zip(src, dst):
        assert same_bits(s, d)
    if xxh3_64 is not None:
        assert c.counters["direct_reads"] == 2, "read from the data file into the tensor"
    # a tensor of another shape but the same byte count reads the same bytes
    flat = torch.empty(8 * 512 * 2, dtype=torch.uint8)
    assert c.read_into(0, "kv", ["a"], [flat]) == [True]
    assert flat.numpy().tobytes() == raw(src[0])
    # a tensor of another byte count is a miss, left as it was
    short = torch.full((100,), 7, dtype=dtype)
    assert c.read_into(0, "kv", ["a"], [short]) == [False]
    assert (short == 7).all()


def test_read_into_a_view_with_a_storage_offset_fills_that_view_only(client):
    m, c = client
    page = random_bits((1024,), torch.bfloat16, 3)
    assert c.write(0, "kv", ["p"], [page]) == [True]
    big = torch.full((3, 1024), 5.0, dtype=torch.bfloat16)
    assert c.read_into(0, "kv", ["p"], [big[1]]) == [True]
    assert same_bits(big[1], page)
    assert (big[0] == 5).all() and (big[2] == 5).all(), "nothing outside the view is written"
    # an odd byte offset: not aligned for O_DIRECT, read all the same
    bytes_ = torch.zeros(2048 + 1, dtype=torch.uint8)
    assert c.read_into(0, "kv", ["p"], [bytes_[1:]]) == [True]
    assert bytes_[0] == 0 and bytes_[1:].numpy().tobytes() == raw(page)
    # writing from an offset view stores the view's bytes, not its storage's
    assert c.write(0, "kv", ["q"], [big[1]]) == [True]
    with open(m.path(0, "kv", "q"), "rb") as f:
        assert f.read() == raw(page)


def test_tensors_that_cannot_be_read_or_written_in_place_are_refused(client):
    m, c = client
    assert c.write(0, "kv", ["p"], [random_bits((64, 16), torch.float16, 4)]) == [True]
    strided = torch.zeros(16, 64, dtype=torch.float16).t()  # 64 x 16, not contiguous
    with pytest.raises(ValueError, match="contiguous"):
        c.read_into(0, "kv", ["p"], [strided])
    assert (strided == 0).all()
    with pytest.raises(ValueError, match="contiguous"):
        c.write(0, "kv", ["s"], [strided])
    elsewhere = torch.empty(64, 16, dtype=torch.float16, device="meta")  # no host memory
    with pytest.raises(ValueError, match="host memory"):
        c.read_into(0, "kv", ["p"], [elsewhere])
    with pytest.raises(ValueError, match="host memory"):
        c.write(0, "kv", ["s"], [elsewhere])
    conj = torch.ones(8, dtype=torch.complex64).conj()  # its bytes are not its values
    with pytest.raises(ValueError, match="conj"):
        c.write(0, "kv", ["s"], [conj])
    assert c.exists(0, "kv", ["s"]) == [False], "nothing refused was written"


def test_tensors_need_no_numpy(client):
    """Tensors are addressed by data_ptr(), not through numpy: a process
    where numpy cannot be imported writes and reads a bf16 page."""
    m, c = client
    page = random_bits((2048,), torch.bfloat16, 5)
    probe = (
        "import sys; sys.modules['numpy'] = None\n"
        "import torch, pagefs\n"
        "g = torch.Generator().manual_seed(5)\n"
        "t = torch.randint(-(1 << 15), 1 << 15, (2048,), dtype=torch.int16, generator=g)\n"
        "c = pagefs.Client(sys.argv[1])\n"
        "assert c.write(0, 'kv', ['np'], [t.view(torch.bfloat16)]) == [True]\n"
        "out = torch.zeros(2048, dtype=torch.bfloat16)\n"
        "assert c.read_into(0, 'kv', ['np'], [out]) == [True]\n"
        "assert torch.equal(out.view(torch.int16), t)\n"
        "c.close(); print('ok', sys.modules['numpy'])\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-W", "ignore", "-c", probe, str(m.mnt)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.split() == ["ok", "None"], r.stderr
    with open(m.path(0, "kv", "np"), "rb") as f:
        assert f.read() == raw(page)


# ---- HiCache host pools as SGLang builds them, in torch ----


class HostPool:
    """A HiCache host pool with SGLang's layouts and flat-page interface
    (get_data_page, get_dummy_flat_data_page, set_from_flat_data_page).
    mha: kv_buffer[0] holds K, kv_buffer[1] V, each head_num x head_dim per
    token and layer; mla: one latent row of `latent` values per token and
    layer. The data page of index i is the page's tokens over all layers
    (and K then V): one contiguous slice of kv_buffer where the layout keeps
    a page together, otherwise a copy."""

    def __init__(self, kind, layout, tokens, dtype, layers=2, heads=2, head_dim=64, latent=96):
        self.kind, self.layout, self.dtype = kind, layout, dtype
        self.page_size, self.size, self.layer_num = TOKENS, tokens, layers
        self.page_num = tokens // TOKENS
        row = (heads, head_dim) if kind == "mha" else (1, latent)
        self.row = row
        if layout == "layer_first":
            dims = (layers, tokens) + row
        elif layout == "page_first":
            dims = (tokens, layers) + row
        else:  # page_first_direct
            dims = (self.page_num, layers, TOKENS) + row
        self.kv_buffer = torch.zeros(((2,) if kind == "mha" else ()) + dims, dtype=dtype)
        self.dummy_pages = 0

    def _page(self, index):
        kv = (slice(None),) if self.kind == "mha" else ()
        if self.layout == "page_first_direct":
            at = slice(index // TOKENS, index // TOKENS + 1)
            return kv + (at,)
        at = slice(index, index + TOKENS)
        return kv + ((slice(None), at) if self.layout == "layer_first" else (at,))

    def _page_shape(self):
        if self.layout == "layer_first":
            inner = (self.layer_num, TOKENS) + self.row
        elif self.layout == "page_first":
            inner = (TOKENS, self.layer_num) + self.row
        else:
            inner = (1, self.layer_num, TOKENS) + self.row
        return ((2,) if self.kind == "mha" else ()) + inner

    def get_data_page(self, index, flat=True):
        page = self.kv_buffer[self._page(index)]
        return page.flatten() if flat else page

    def get_dummy_flat_data_page(self):
        self.dummy_pages += 1
        return torch.zeros(self._page_shape(), dtype=self.dtype).flatten()

    def set_from_flat_data_page(self, index, data_page):
        self.kv_buffer[self._page(index)] = data_page.reshape(self._page_shape())

    def page_bytes(self):
        return self.get_data_page(0).numel() * self.kv_buffer.element_size()


def config(mla=False, model="org/model-7b", **extra):
    return ps.HiCacheStorageConfig(tp_rank=0, tp_size=1, is_mla_model=mla,
                                   is_page_first_layout=True, model_name=model,
                                   extra_config=extra)


@pytest.fixture
def store(mount):
    m = mount("--page-size", "4K", "--capacity", "4M")
    made = []

    def make(**kw):
        b = ps.PagefsStorage(config(mountpoint=str(m.mnt), **kw), {})
        made.append(b)
        return b

    yield m, make
    for b in made:
        b.close()


def keys(n, tag="k"):
    return [f"{tag}{i:063x}" for i in range(n)]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind,dtype", [("mha", torch.bfloat16), ("mla", torch.float16)])
def test_batch_set_v1_then_batch_get_v1_moves_host_pages_bit_exactly(store, kind, dtype, layout):
    m, make = store
    b = make(mla=kind == "mla", capacity="1M")
    src = HostPool(kind, layout, 64, dtype)
    src.kv_buffer.copy_(random_bits(src.kv_buffer.shape, dtype, 11))
    b.register_mem_pool_host(src)
    n = 6
    ks = keys(n)
    assert b.batch_set_v1(ks, torch.arange(n * TOKENS)) == [True] * n
    assert b.batch_exists(ks + keys(2, "x")) == n and b.exists(ks[3])
    pool = m.path(0, "kv")
    assert int(os.getxattr(pool, "user.pagefs.page_size")) == src.page_bytes()
    assert int(os.getxattr(pool, "user.pagefs.capacity")) == \
        (1 << 20) // src.page_bytes() * src.page_bytes(), "1M in whole pages (MLA: 1536 bytes)"
    for i, k in enumerate(ks):
        with open(os.path.join(pool, k + "_org-model-7b"), "rb") as f:
            assert f.read() == raw(src.get_data_page(i * TOKENS)), "the flat data page's bytes"

    dst = HostPool(kind, layout, 64, dtype)
    b.register_mem_pool_host(dst)
    at = 8 * TOKENS  # other host slots than the writer's
    assert b.batch_get_v1(ks + ["absent"], torch.arange(at, at + (n + 1) * TOKENS)) \
        == [True] * n + [False]
    for i in range(n):
        assert same_bits(dst.get_data_page(at + i * TOKENS), src.get_data_page(i * TOKENS))
    # pages that are contiguous in kv_buffer (MLA page_first and
    # page_first_direct) are read straight into it; the others into a
    # scratch page, copied in
    in_place = kind == "mla" and layout != "layer_first"
    assert dst.dummy_pages == (0 if in_place else n + 1)
    for i in range(n):
        page = dst.get_data_page(at + i * TOKENS)
        dst.set_from_flat_data_page(at + i * TOKENS, torch.zeros_like(page))
    assert dst.kv_buffer.view(torch.int16).eq(0).all(), "no byte outside the pages read"
    s = b.get_stats()
    assert s.hits == n and s.misses == 1 and s.bytes_read == n * src.page_bytes()


def test_v0_calls_with_tensors_and_a_tensor_in_no_host_memory_is_a_miss(store, caplog):
    m, make = store
    b = make()
    vals = [random_bits((2048,), torch.bfloat16, 20 + i) for i in range(3)]
    assert b.batch_set(keys(3), vals) is True
    outs = [torch.zeros(2048, dtype=torch.bfloat16) for _ in range(3)]
    got = b.batch_get(keys(3), outs)
    assert all(g is o for g, o in zip(got, outs))
    assert all(same_bits(v, o) for v, o in zip(vals, outs))
    assert bytes(b.get(keys(3)[1])) == raw(vals[1])
    elsewhere = torch.empty(2048, dtype=torch.bfloat16, device="meta")
    assert b.set("m", elsewhere) is False and not b.exists("m")
    assert b.get(keys(3)[0], elsewhere) is None
    assert "host memory" in caplog.text


def test_a_host_pool_whose_kv_buffer_is_a_list_of_layers(store):
    """A side pool that keeps one tensor per layer (kv_buffer a list): its
    pages are copies, read through a scratch page, bit exact."""
    m, make = store

    class PerLayer:
        page_size = TOKENS

        def __init__(self):
            self.kv_buffer = [torch.zeros(64, 256, dtype=torch.float32) for _ in range(2)]

        def get_data_page(self, index, flat=True):
            return torch.stack([lb[index:index + TOKENS] for lb in self.kv_buffer]).flatten()

        def get_dummy_flat_data_page(self):
            return torch.zeros(2 * TOKENS * 256, dtype=torch.float32)

        def set_from_flat_data_page(self, index, data):
            for i, part in enumerate(data.reshape(2, TOKENS, 256)):
                self.kv_buffer[i][index:index + TOKENS] = part

    b = make()
    src, dst = PerLayer(), PerLayer()
    for i, lb in enumerate(src.kv_buffer):
        lb.view(torch.int32).copy_(torch.randint(-(1 << 31), 1 << 31, lb.shape,
                                                 dtype=torch.int32,
                                                 generator=torch.Generator().manual_seed(i)))
    b.register_mem_host_pool_v2(src, ps.PoolName.MAMBA)
    from pagefs._sglang_base import PoolTransfer

    ks = keys(3)
    res = b.batch_set_v2([PoolTransfer(name=ps.PoolName.MAMBA, keys=ks,
                                       host_indices=torch.arange(3 * TOKENS))])
    assert res[ps.PoolName.MAMBA] == [True] * 3
    b.register_mem_host_pool_v2(dst, ps.PoolName.MAMBA)
    got = b.batch_get_v2([PoolTransfer(name=ps.PoolName.MAMBA, keys=ks,
                                       host_indices=torch.arange(16, 16 + 3 * TOKENS))])
    assert got[ps.PoolName.MAMBA] == [True] * 3
    for i in range(3):
        a, d = src.get_data_page(i * TOKENS), dst.get_data_page(16 + i * TOKENS)
        assert torch.equal(a.view(torch.int32), d.view(torch.int32))
