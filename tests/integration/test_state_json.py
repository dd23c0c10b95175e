"""`pagefs import-json` / `export-json`: SGLang mini_3fs_metadata_server
persistence files adopted into the index (all or nothing) and written back
byte for byte as the Python server writes them."""
import json
import os
import pathlib
import stat
import subprocess
import time

import pytest

import pagefs_helpers as H

FIXTURE = pathlib.Path("/work/shared/fixtures/mini_3fs_state_sample.json")
FIXTURE = pathlib.Path(os.environ.get("PAGEFS_STATE_FIXTURE", FIXTURE))


def fixture_text():
    if not FIXTURE.exists():
        pytest.skip(f"{FIXTURE} not present")
    return FIXTURE.read_text()


@pytest.fixture
def work(tmp_root, request):
    d = pathlib.Path(tmp_root) / f"{request.node.name[:50]}-{time.monotonic_ns()}"
    d.mkdir()
    return d


def index(d, name):
    b = d / f"backing-{name}"
    b.mkdir(exist_ok=True)
    return ["--backing", str(b), "--meta", f"sqlite:{d / (name + '.db')}"]


def imp(d, name, file, *opts):
    return H.run_pagefs("import-json", file, *index(d, name), *opts)


def exp(d, name):
    r = H.run_pagefs("export-json", *index(d, name))
    assert r.returncode == 0, H.describe(r)
    return r.stdout


def test_round_trip_is_identical(work):
    text = fixture_text()
    r = imp(work, "a", FIXTURE, "--page-size", "4K")
    assert r.returncode == 0, H.describe(r)
    assert "imported 8 keys in 3 pools" in r.stdout
    out = exp(work, "a")
    assert out == text, "export of the imported fixture is the fixture, byte for byte"
    (work / "a.json").write_text(out)
    r = imp(work, "b", work / "a.json", "--page-size", "4K")
    assert r.returncode == 0, H.describe(r)
    assert exp(work, "b") == out
    r = H.run_pagefs("export-json", *index(work, "b"), "-o", work / "b.json")
    assert r.returncode == 0 and (work / "b.json").read_text() == out
    assert not (work / "b.json.tmp").exists()


def test_export_into_a_device_or_a_link_keeps_it(work):
    """`-o` a device (as /dev/stdout or /dev/null) writes into it: writing
    beside it and renaming, as for a regular file, put a regular file in
    place of the device node (root ran this once on /dev/null). A symbolic
    link stays a link; the file it names gets the JSON."""
    text = fixture_text()
    assert imp(work, "a", FIXTURE, "--page-size", "4K").returncode == 0
    dev = work / "null"
    os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    r = H.run_pagefs("export-json", *index(work, "a"), "-o", dev)
    assert r.returncode == 0, H.describe(r)
    assert stat.S_ISCHR(os.lstat(dev).st_mode), "still the device node"
    assert not (work / "null.tmp").exists()
    target = work / "real.json"
    target.write_text("old")
    link = work / "link.json"
    link.symlink_to(target)
    r = H.run_pagefs("export-json", *index(work, "a"), "-o", link)
    assert r.returncode == 0, H.describe(r)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == text
    # the file keeps its permissions; a link to no file yet makes that file;
    # a loop is an error
    os.chmod(target, 0o600)
    assert H.run_pagefs("export-json", *index(work, "a"), "-o", target).returncode == 0
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    dangling = work / "dangling.json"
    dangling.symlink_to("made-by-export.json")
    r = H.run_pagefs("export-json", *index(work, "a"), "-o", dangling)
    assert r.returncode == 0, H.describe(r)
    assert dangling.is_symlink() and (work / "made-by-export.json").read_text() == text
    (work / "l1").symlink_to(work / "l2")
    (work / "l2").symlink_to(work / "l1")
    r = H.run_pagefs("export-json", *index(work, "a"), "-o", work / "l1")
    assert r.returncode == 1 and "symbolic links" in r.stderr, H.describe(r)
    assert (work / "l1").is_symlink()
    r = H.run_pagefs("export-json", *index(work, "a"), "-o", work)
    assert r.returncode != 0 and "Is a directory" in r.stderr, H.describe(r)
    # never over the index or a data file (exit 0 left neither usable)
    data = work / "backing-a" / "hicache.0.bin"
    before = data.read_bytes()
    for own, what in ((work / "a.db", "the index itself"), (data, "a pool's data file")):
        r = H.run_pagefs("export-json", *index(work, "a"), "-o", own)
        assert r.returncode == 1 and what in r.stderr, H.describe(r)
    assert data.read_bytes() == before
    assert exp(work, "a") == text, "the index still exports what it holds"


def test_export_makes_no_index(work):
    """export-json reads an index: with --meta naming none (a typo) it
    fails and creates nothing, where it used to make an empty index and
    claim the backing directory for it."""
    b = work / "backing-new"
    b.mkdir()
    r = H.run_pagefs("export-json", "--backing", b, "--meta", f"sqlite:{work / 'typo.db'}")
    assert r.returncode == 1 and "no index at" in r.stderr, H.describe(r)
    assert not (work / "typo.db").exists() and list(b.iterdir()) == []


def test_import_reads_a_pipe_and_refuses_a_directory(work):
    """import-json FILE may be a pipe (<(...), /dev/stdin): it is read to
    its end (a pipe has no size, and an empty read was taken for a
    malformed file). A directory is refused by name."""
    text = fixture_text()
    r = subprocess.run([H.PAGEFS_BIN, "import-json", "/dev/stdin", *map(str, index(work, "a")),
                        "--page-size", "4K"], input=text, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and "imported 8 keys" in r.stdout, H.describe(r)
    assert exp(work, "a") == text
    r = imp(work, "b", work)
    assert r.returncode == 1 and "is a directory" in r.stderr, H.describe(r)


def test_imported_keys_are_pages_in_lru_order(work, mount):
    fixture_text()
    r = imp(work, "a", FIXTURE, "--page-size", "4K")
    assert r.returncode == 0, H.describe(r)
    m = mount(backing=work / "backing-a", meta=f"sqlite:{work / 'a.db'}", start=False)
    m.start("--page-size", "4K")
    kv = m.path(0, "kv")
    assert sorted(os.listdir(kv)) == ["k0", "k2", "k3"]
    assert sorted(os.listdir(m.path(0, "mamba"))) == ["m0", "m1"]
    assert sorted(os.listdir(m.path(1, "kv"))) == ["b", "c", "d"]
    assert H.xattr_int(kv / "k0", "user.pagefs.slot") == 7
    assert os.stat(kv / "k2").st_size == 4096
    assert H.xattr_int(kv, "user.pagefs.capacity") == 8 * 4096
    at = [os.stat(kv / k).st_atime_ns for k in ("k2", "k3", "k0")]
    assert at == sorted(at), "atimes follow key_to_index (oldest first)"
    H.expect_errno(61, os.getxattr, kv / "k2", "user.pagefs.checksum")
    # The LRU follows key_to_index too (the atimes are whole seconds, so
    # it is the evictions that tell): fill the pool's 8 slots, then each
    # new page evicts the oldest imported key.
    for i in range(5):
        (kv / f"n{i}").write_bytes(b"n" * 4096)
    # (An eviction reaches the kernel's cached names through the daemon's
    # invalidation thread, after the write that caused it returned.)
    for i, gone in enumerate(("k2", "k3", "k0")):
        (kv / f"e{i}").write_bytes(b"e" * 4096)
        H.wait_until(lambda g=gone: not (kv / g).exists(), timeout=5)
        left = {k for k in ("k2", "k3", "k0") if (kv / k).exists()}
        assert gone not in left, f"page e{i} should have evicted {gone}; left: {sorted(left)}"
        assert len(left) == 2 - i, f"page e{i} evicted more than {gone}: left {sorted(left)}"
    m.umount()


def test_failed_import_keeps_the_data_files_it_adopted(work, mount):
    """An import that fails after making its pools undoes them, and a pool
    whose data file was there before (SGLang's, being adopted) leaves that
    file as it was: the undo once deleted it, and said the index was not
    changed."""
    b = work / "backing-a"
    b.mkdir()
    data = os.urandom(16 * 4096)
    (b / "hicache.0.bin").write_bytes(data)
    os.mkfifo(b / "hicache.1.bin")  # pool 1:kv cannot get its data file
    state = {
        "0:kv": {"num_pages": 16, "free_pages": list(range(1, 16)), "key_to_index": [["a", 0]]},
        "1:kv": {"num_pages": 4, "free_pages": [0, 1, 2, 3], "key_to_index": []},
    }
    f = work / "state.json"
    f.write_text(json.dumps(state))
    r = imp(work, "a", f, "--page-size", "4K")
    assert r.returncode == 1 and "1:kv" in r.stderr, H.describe(r)
    assert (b / "hicache.0.bin").read_bytes() == data, "the adopted data file is untouched"
    assert stat.S_ISFIFO(os.lstat(b / "hicache.1.bin").st_mode)
    assert json.loads(exp(work, "a")) == {}, "no pool is left in the index"
    # without the obstacle the same file imports, and the key reads the bytes
    (b / "hicache.1.bin").unlink()
    r = imp(work, "a", f, "--page-size", "4K")
    assert r.returncode == 0, H.describe(r)
    assert (b / "hicache.0.bin").read_bytes() == data
    m = mount(backing=b, meta=f"sqlite:{work / 'a.db'}", start=False)
    m.start("--page-size", "4K")
    assert (m.path(0, "kv") / "a").read_bytes() == data[:4096], "the key reads its slot's bytes"
    m.umount()


def test_slot_size_from_the_data_file(work):
    text = json.loads(fixture_text())
    b = work / "backing-a"
    b.mkdir()
    for name, n in (("hicache.0.bin", 8), ("hicache.0.bin.mamba", 4), ("hicache.1.bin", 3)):
        with open(b / name, "wb") as f:
            f.truncate(n * 8192)
    r = imp(work, "a", FIXTURE)
    assert r.returncode == 0, H.describe(r)
    r = H.run_pagefs("import-json", FIXTURE, *index(work, "c"))
    assert r.returncode == 1 and "--page-size" in r.stderr, "no data file and no size: refused"
    # a data file that does not hold num_pages pages of --page-size is refused
    b2 = work / "backing-d"
    b2.mkdir()
    with open(b2 / "hicache.0.bin", "wb") as f:
        f.truncate(5 * 4096)
    r = imp(work, "d", FIXTURE, "--page-size", "4K")
    assert r.returncode == 1 and "num_pages 8" in r.stderr, H.describe(r)
    assert exp(work, "d") == "{}", "a refused import leaves the index as it was"
    assert text


@pytest.mark.parametrize("body,want", [
    ('{"0:kv": {"num_pages": 3, "free_pages": [],\n "key_to_index": [["a", 1],]}}', ":2:"),
    ('{"0:kv": {"num_pages": 3, "free_pages": [], "key_to_index": [["a", 3]]}}', "below num_pages"),
    ('{"0:kv": {"num_pages": 3, "free_pages": [], "key_to_index": [["a", 1], ["b", 1]]}}',
     "two keys"),
    ('{"0:kv": {"num_pages": 3, "free_pages": [], "key_to_index": [["a", 1], ["a", 2]]}}',
     "twice"),
    ('{"0:kv": {"num_pages": 3, "free_pages": [], "key_to_index": [["a/b", 1]]}}', "file name"),
    ('{"0:Kv": {"num_pages": 3, "free_pages": [], "key_to_index": []}}', "namespace"),
    ('{"x:kv": {"num_pages": 3, "free_pages": [], "key_to_index": []}}', "rank"),
    ('{"0:kv": {"free_pages": [], "key_to_index": []}}', "num_pages"),
    ('[1, 2]', "top level"),
    # num_pages is the file's word: no memory sized by it, no wrap-around
    ('{"0:kv": {"num_pages": 1125899906842624, "free_pages": [], '
     '"key_to_index": [["a", 1125899906842623], ["b", 1125899906842623]]}}', "two keys"),
    ('{"7:big": {"num_pages": 4503599627370496, "free_pages": [], '
     '"key_to_index": [["a", 4503599627370495]]}}', "more than a data file can hold"),
])
def test_malformed_files_are_refused_and_change_nothing(work, body, want):
    fixture_text()
    r = imp(work, "a", FIXTURE, "--page-size", "4K")
    assert r.returncode == 0
    before = exp(work, "a")
    # a good pool first, then the bad one: all or nothing
    good = '{"5:kv": {"num_pages": 2, "free_pages": [0], "key_to_index": [["z", 1]]}'
    bad = work / "bad.json"
    bad.write_text(body if body.startswith("[") or ":2:" in want else good + "," + body[1:])
    r = imp(work, "a", bad, "--page-size", "4K")
    assert r.returncode == 1, H.describe(r)
    assert want in r.stderr, r.stderr
    assert "not changed" in r.stderr
    assert exp(work, "a") == before


def test_bare_rank_means_kv(work):
    f = work / "old.json"
    f.write_text('{"3": {"num_pages": 2, "free_pages": [], "key_to_index": [["a", 0], ["b", 1]]}}')
    r = imp(work, "a", f, "--page-size", "4K")
    assert r.returncode == 0, H.describe(r)
    assert json.loads(exp(work, "a")) == {
        "3:kv": {"num_pages": 2, "free_pages": [], "key_to_index": [["a", 0], ["b", 1]]}}


def test_import_into_a_pool_with_pages_is_refused(work):
    fixture_text()
    assert imp(work, "a", FIXTURE, "--page-size", "4K").returncode == 0
    r = imp(work, "a", FIXTURE, "--page-size", "4K")
    assert r.returncode == 1 and "already holds pages" in r.stderr


@pytest.mark.timeout_s(300)
def test_hundred_thousand_keys_import_quickly(work):
    n = 100000
    kti = [[f"{i:064x}_Qwen-Qwen3-32B_0_2", i] for i in range(n)]
    f = work / "big.json"
    f.write_text(json.dumps({"0:kv": {"num_pages": n + 10, "free_pages": list(range(n, n + 10)),
                                      "key_to_index": kti}}, indent=4))
    t0 = time.monotonic()
    r = imp(work, "a", f, "--page-size", "4K")
    took = time.monotonic() - t0
    assert r.returncode == 0, H.describe(r)
    assert took < 60, f"100k keys took {took:.1f} s"
    assert exp(work, "a") == f.read_text()
