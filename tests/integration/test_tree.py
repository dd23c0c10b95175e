"""SPEC "The tree": ranks, pools, where files may live, names."""
import errno
import os
import stat

import pytest

from pagefs_helpers import expect_errno, read_page, write_page, assert_bytes_equal

# Contract tests of the core: each runs against SQLite and PostgreSQL.
pytestmark = pytest.mark.engines


def test_mkdir_creates_ranks_and_pools_and_ls_lists_them(mount):
    m = mount()
    os.mkdir(m.path(0))
    os.mkdir(m.path(0, "kv"))
    os.makedirs(m.path(3, "mamba"))
    os.makedirs(m.path(3, "swa"), exist_ok=True)
    assert sorted(os.listdir(m.mnt)) == ["0", "3"], "root should list exactly the ranks"
    assert os.listdir(m.path(0)) == ["kv"]
    assert sorted(os.listdir(m.path(3))) == ["mamba", "swa"]
    for p in (m.path(0), m.path(0, "kv"), m.path(3, "mamba")):
        assert os.path.isdir(p), f"{p} should be a directory"
    assert os.listdir(m.path(0, "kv")) == [], "a new pool is empty"


def test_mkdir_accepts_the_extreme_rank_and_namespace_names(mount):
    m = mount()
    os.mkdir(m.path(65535))
    os.mkdir(m.path(65535, "a" * 64))
    os.mkdir(m.path(65535, "deepseek_v4_c4_indexer"))
    os.mkdir(m.path(65535, "0_9"))
    assert sorted(os.listdir(m.path(65535))) == sorted(["a" * 64, "deepseek_v4_c4_indexer", "0_9"])


def test_mkdir_of_an_existing_rank_or_pool_fails_with_eexist(mount):
    m = mount()
    m.pool(0, "kv")
    expect_errno(errno.EEXIST, os.mkdir, m.path(0))
    expect_errno(errno.EEXIST, os.mkdir, m.path(0, "kv"))


@pytest.mark.parametrize("rank", ["abc", "65536", "-1", "01", "1a", " 1", "+1", "99999999999"])
def test_mkdir_of_an_invalid_rank_name_fails_with_einval(mount, rank):
    m = mount()
    expect_errno(errno.EINVAL, os.mkdir, m.path(rank), what=f"mkdir MNT/{rank}")
    assert rank not in os.listdir(m.mnt)


@pytest.mark.parametrize("ns", ["KV", "a-b", "a" * 65, "kv.1", "k v", "\u00e9"])
def test_mkdir_of_an_invalid_namespace_fails_with_einval(mount, ns):
    m = mount()
    os.mkdir(m.path(0))
    expect_errno(errno.EINVAL, os.mkdir, m.path(0, ns), what=f"mkdir MNT/0/{ns!r}")
    assert os.listdir(m.path(0)) == []


def test_files_in_the_root_or_a_rank_directory_fail_with_eperm(mount):
    m = mount()
    os.mkdir(m.path(0))
    for p in (m.path("f"), m.path("7"), m.path(0, "f"), m.path(0, "kv")):
        expect_errno(errno.EPERM, os.open, p, os.O_WRONLY | os.O_CREAT, 0o644,
                     what=f"create file {p}")
    assert os.listdir(m.mnt) == ["0"]
    assert os.listdir(m.path(0)) == []


def test_mkdir_inside_a_pool_fails_with_eperm(mount):
    m = mount()
    pool = m.pool(0, "kv")
    expect_errno(errno.EPERM, os.mkdir, pool / "sub")
    expect_errno(errno.EPERM, os.mkdir, pool / "kv")
    assert os.listdir(pool) == []


def test_rmdir_of_a_non_empty_pool_fails_with_enotempty(mount):
    m = mount()
    pool = m.pool(0, "kv")
    write_page(pool / "page", b"x" * 100)
    expect_errno(errno.ENOTEMPTY, os.rmdir, pool)
    assert read_page(pool / "page") == b"x" * 100


def test_rmdir_of_an_empty_pool_removes_it(mount):
    m = mount()
    pool = m.pool(0, "kv")
    write_page(pool / "page", b"x" * 100)
    os.unlink(pool / "page")
    os.rmdir(pool)
    assert os.listdir(m.path(0)) == []
    assert not os.path.exists(pool)


def test_rmdir_of_a_rank_with_pools_fails_with_enotempty(mount):
    m = mount()
    m.pool(0, "kv")
    expect_errno(errno.ENOTEMPTY, os.rmdir, m.path(0))


def test_symlink_hard_link_and_fifo_fail_with_eperm(mount):
    m = mount()
    pool = m.pool(0, "kv")
    write_page(pool / "page", b"data")
    expect_errno(errno.EPERM, os.symlink, "page", pool / "sym")
    expect_errno(errno.EPERM, os.link, pool / "page", pool / "hard")
    expect_errno(errno.EPERM, os.mkfifo, pool / "fifo")
    assert os.listdir(pool) == ["page"]


def test_chown_of_a_page_fails_with_eperm(mount):
    m = mount()
    pool = m.pool(0, "kv")
    write_page(pool / "page", b"data")
    expect_errno(errno.EPERM, os.chown, pool / "page", 12345, 12345)


def test_device_nodes_and_chown_of_directories_fail_with_eperm(mount):
    m = mount()
    pool = m.pool(0, "kv")
    for mode in (stat.S_IFCHR | 0o600, stat.S_IFBLK | 0o600):
        expect_errno(errno.EPERM, os.mknod, pool / "dev", mode, os.makedev(1, 3))
    for d in (pool, pool.parent, m.mnt):
        expect_errno(errno.EPERM, os.chown, d, 12345, 12345)
    assert os.listdir(pool) == []


def test_chmod_of_a_page_is_accepted_and_ignored(mount):
    m = mount()
    pool = m.pool(0, "kv")
    write_page(pool / "page", b"data")
    os.chmod(pool / "page", 0o644)
    os.chmod(pool / "page", 0o600)
    assert oct(os.stat(pool / "page").st_mode & 0o777) == oct(0o444), \
        "chmod of a page must be ignored: it stays -r--r--r--"
    assert read_page(pool / "page") == b"data"


def test_page_name_of_255_bytes_works_and_256_fails_with_enametoolong(mount):
    m = mount()
    pool = m.pool(0, "kv")
    name = "n" * 255
    write_page(pool / name, b"long name")
    assert os.listdir(pool) == [name]
    assert read_page(pool / name) == b"long name"
    expect_errno(errno.ENAMETOOLONG, os.open, pool / ("n" * 256), os.O_WRONLY | os.O_CREAT, 0o644)
    utf8 = ("\u00e9" * 127).encode() + b"x"  # 255 bytes of UTF-8
    assert len(utf8) == 255
    write_page(os.fsencode(pool) + b"/" + utf8, b"u")
    assert utf8 in os.listdir(os.fsencode(pool))


ODD_NAMES = [
    b"with space",
    b" leading and trailing ",
    "\u043a\u043b\u044e\u0447-\u2713-\u30ad\u30fc".encode(),
    bytes(b for b in range(1, 128) if b != ord("/")),
    b"\x80\xfe\xff high bytes \xc3",
    b"line\nbreak",
    b"tab\there",
    b"...",
    b".hidden",
    b"-rf",
    b"*?[]",
    b"back\\slash",
    b"%s%n",
]


def test_names_with_odd_bytes_round_trip_through_listdir(mount):
    m = mount()
    pool = os.fsencode(m.pool(0, "kv"))
    for i, name in enumerate(ODD_NAMES):
        write_page(pool + b"/" + name, b"content of %d:" % i + name)
    listed = os.listdir(pool)
    assert sorted(listed) == sorted(ODD_NAMES), \
        f"missing {set(ODD_NAMES) - set(listed)}, unexpected {set(listed) - set(ODD_NAMES)}"
    for i, name in enumerate(ODD_NAMES):
        assert_bytes_equal(read_page(pool + b"/" + name), b"content of %d:" % i + name, repr(name))
        assert os.stat(pool + b"/" + name).st_size == len(b"content of %d:" % i + name)
