"""SPEC "Command line": exit codes and messages of mount, refusals, help."""
import errno
import os
import sqlite3
import stat
import subprocess

import pytest

from pagefs_helpers import PAGEFS_BIN, describe, expect_errno, is_mounted, run_pagefs, write_page


def test_mount_with_an_unknown_option_exits_2_with_a_message(mount):
    m = mount(start=False)
    r = m.attempt(opts=["--bogus-option"])
    assert r.returncode == 2, f"unknown option should be a usage error (exit 2): {describe(r)}"
    assert "bogus-option" in r.stdout + r.stderr, f"the message should name the option: {describe(r)}"
    assert not is_mounted(m.mnt)


def test_mount_with_a_bad_size_exits_2_with_a_message(mount):
    m = mount(start=False)
    r = m.attempt(opts=["--page-size", "12Q"])
    assert r.returncode == 2, f"a malformed size is a usage error (exit 2): {describe(r)}"
    assert "12Q" in r.stdout + r.stderr, f"the message should name the bad value: {describe(r)}"
    assert not is_mounted(m.mnt)


def test_mount_with_a_bad_kernel_cache_mode_exits_2_with_a_message(mount):
    m = mount(start=False)
    r = m.attempt(opts=["--kernel-cache", "sometimes"])
    assert r.returncode == 2, f"a bad --kernel-cache is a usage error (exit 2): {describe(r)}"
    assert "sometimes" in r.stdout + r.stderr, f"the message should name the bad value: {describe(r)}"
    assert not is_mounted(m.mnt)


def test_mount_of_a_nonexistent_backing_dir_exits_1_with_a_message(mount):
    m = mount(start=False)
    missing = m.dir / "does-not-exist"
    r = m.attempt(backing=missing)
    assert r.returncode == 1, f"missing backing dir should exit 1: {describe(r)}"
    assert str(missing) in r.stdout + r.stderr, f"the message should name the directory: {describe(r)}"
    assert not is_mounted(m.mnt)


def test_second_mount_of_the_same_index_is_refused(mount):
    m = mount()
    write_page(m.pool(0, "kv") / "p", b"first")
    other = m.dir / "mnt2"
    other.mkdir()
    r = m.attempt(mnt=other, log=m.dir / "log2")
    assert r.returncode == 1, f"a second daemon on the same SQLite index must be refused: {describe(r)}"
    assert (r.stdout + r.stderr).strip(), "the refusal needs a message"
    assert not is_mounted(other), "the refused mount left a mount point behind"
    with open(m.path(0, "kv", "p"), "rb") as f:
        assert f.read() == b"first", "the first mount must keep working"


def test_same_backing_dir_with_another_index_is_refused(mount):
    m = mount()
    write_page(m.pool(0, "kv") / "p", b"owned")
    other_mnt = m.dir / "mnt2"
    other_mnt.mkdir()
    other_meta = f"sqlite:{m.dir / 'other-index.db'}"
    r = m.attempt(mnt=other_mnt, meta=other_meta, log=m.dir / "log2")
    assert r.returncode == 1, f"another index on an owned backing dir must be refused: {describe(r)}"
    msg = r.stdout + r.stderr
    assert "index" in msg.lower() or str(m.index) in msg, f"the message should mention the index: {msg}"
    assert not is_mounted(other_mnt)
    m.umount()
    r = m.attempt(mnt=other_mnt, meta=other_meta, log=m.dir / "log3")
    assert r.returncode == 1, f"still refused after the owner unmounted: {describe(r)}"
    msg = r.stdout + r.stderr
    assert "index" in msg.lower() or str(m.index) in msg, f"the message should mention the index: {msg}"
    assert not is_mounted(other_mnt)
    m.start()
    with open(m.path(0, "kv", "p"), "rb") as f:
        assert f.read() == b"owned"


def test_mount_of_a_corrupt_index_fails_with_a_message_naming_fsck(mount):
    m = mount(start=False)
    m.index.write_bytes(os.urandom(8192))
    r = m.attempt()
    assert r.returncode == 1, f"a corrupt index should make mount fail with exit 1: {describe(r)}"
    assert "fsck" in r.stdout + r.stderr, f"the message should name `pagefs fsck`: {describe(r)}"
    assert not is_mounted(m.mnt)


def test_mount_of_a_foreign_sqlite_file_fails_with_a_message_naming_fsck(mount):
    m = mount(start=False)
    db = sqlite3.connect(m.index)
    db.execute("create table pages (name text, slot integer)")
    db.execute("create table recipes (title text)")
    db.execute("insert into recipes values ('soup')")
    db.commit()
    db.close()
    r = m.attempt()
    assert r.returncode == 1, f"a foreign SQLite file should make mount fail with exit 1: {describe(r)}"
    assert "fsck" in r.stdout + r.stderr, f"the message should name `pagefs fsck`: {describe(r)}"
    assert not is_mounted(m.mnt)
    db = sqlite3.connect(m.index)
    try:
        assert db.execute("pragma journal_mode").fetchone()[0] == "delete", \
            "the refused file is left as it was (not switched to WAL)"
        assert db.execute("select title from recipes").fetchall() == [("soup",)]
    finally:
        db.close()


def test_an_index_path_that_is_a_device_or_a_directory_is_refused_untouched(mount):
    """--meta naming a device (a typo naming a disk) is refused before
    anything opens it: SQLite wrote its 4 KiB header into the device, and
    the lock file went beside it."""
    m = mount(start=False)
    dev = m.dir / "disk"
    os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    for path, kind in ((dev, "character device"), (m.dir, "directory")):
        r = m.attempt(meta=f"sqlite:{path}")
        assert r.returncode == 1, describe(r)
        assert f"is a {kind}" in r.stderr, describe(r)
        assert not is_mounted(m.mnt)
    assert stat.S_ISCHR(os.lstat(dev).st_mode)
    assert not (m.dir / "disk.lock").exists(), "nothing made beside the device"
    r = run_pagefs("export-json", "--backing", m.backing, "--meta", f"sqlite:{dev}")
    assert r.returncode == 1 and "character device" in r.stderr, describe(r)


def test_an_index_or_log_inside_the_mountpoint_is_a_usage_error(mount):
    """--meta or --log-file under MOUNTPOINT would be written beneath the
    mount, out of sight, and the next mount would find MOUNTPOINT not
    empty: refused like a BACKING inside it."""
    m = mount(start=False)
    for opts, what in ((["--meta", f"sqlite:{m.mnt / 'idx.db'}"], "--meta"),
                       (["--log-file", str(m.mnt / "pagefs.log")], "--log-file")):
        r = run_pagefs("mount", m.backing, m.mnt, *opts)
        assert r.returncode == 2 and f"{what} '" in r.stderr and "inside MOUNTPOINT" in r.stderr, \
            describe(r)
        assert not is_mounted(m.mnt)
    assert os.listdir(m.mnt) == []


def test_output_that_cannot_be_written_is_an_error(tmp_path):
    """A report whose output fails (a full device here) exits 1 with the
    reason, not 0 as if it were written."""
    full = tmp_path / "full"
    os.mknod(full, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    with open(full, "w") as out:
        r = subprocess.run([PAGEFS_BIN, "--help"], stdout=out, stderr=subprocess.PIPE, text=True,
                           timeout=30)
    assert r.returncode == 1 and "cannot write standard output" in r.stderr, r.stderr


def test_help_and_version_exit_0():
    for args in (["--help"], ["--version"], ["mount", "--help"], ["umount", "--help"]):
        r = run_pagefs(*args)
        assert r.returncode == 0, f"pagefs {' '.join(args)}: {describe(r)}"
        assert r.stdout.strip(), f"pagefs {' '.join(args)} printed nothing on stdout"


def test_no_arguments_or_an_unknown_command_exit_2():
    for args in ([], ["frobnicate"]):
        r = run_pagefs(*args)
        assert r.returncode == 2, f"pagefs {' '.join(args)}: {describe(r)}"
        assert r.stderr.strip(), f"pagefs {' '.join(args)}: usage errors need a message on stderr"


def test_read_only_mount_serves_pages_and_refuses_changes_with_erofs(mount):
    m = mount("--page-size", "64K", "--capacity", "1M")
    pool = m.pool(0, "kv")
    write_page(pool / "p", b"kept")
    m.umount()
    m.start("--page-size", "64K", "--capacity", "1M", "-o", "ro")
    with open(pool / "p", "rb") as f:
        assert f.read() == b"kept"
    expect_errno(errno.EROFS, os.open, pool / "new", os.O_WRONLY | os.O_CREAT, 0o644)
    expect_errno(errno.EROFS, os.unlink, pool / "p")
    expect_errno(errno.EROFS, os.rename, pool / "p", pool / "q")
    expect_errno(errno.EROFS, os.mkdir, m.path(1))
    assert os.listdir(pool) == ["p"]


def test_mount_accepts_threads_and_log_level_options(mount):
    m = mount("--page-size", "64K", "--capacity", "1M", "--threads", "2", "--log-level", "debug")
    pool = m.pool(0, "kv")
    write_page(pool / "p", b"threads")
    with open(pool / "p", "rb") as f:
        assert f.read() == b"threads"
    assert " info fs/fs_main: serving " in m.log.read_text(), "debug logs info lines too"


def test_log_level_warn_leaves_the_info_lines_out(mount):
    m = mount("--page-size", "64K", "--capacity", "1M", "--log-level", "warn")
    write_page(m.pool(0, "kv") / "p", b"quiet")
    m.umount()
    text = m.log.read_text()
    assert " info " not in text and " debug " not in text, text[-2000:]



def _heap_on_huge_pages(pid):
    """Whether the daemon's [heap] is madvise()d for transparent huge pages
    (VmFlags "hg"), as glibc.malloc.hugetlb=1 does."""
    with open(f"/proc/{pid}/smaps") as f:
        text = f.read()
    if "libasan" in text or "libtsan" in text:
        pytest.skip("a sanitizer's allocator replaces glibc's malloc (the plain build checks this)")
    at = text.index("[heap]")
    flags = next(line for line in text[at:].splitlines() if line.startswith("VmFlags:"))
    return " hg" in flags


def _thp_available():
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return "[never]" not in f.read()
    except OSError:
        return False


def test_daemon_heap_runs_on_huge_pages(mount, monkeypatch):
    """tools/cli_heap.c: the daemon executes itself again with glibc's malloc
    on transparent huge pages, next to the tunables it was given."""
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=4")
    monkeypatch.delenv("PAGEFS_HUGE_HEAP", raising=False)
    m = mount("--page-size", "64K", "--capacity", "1M")
    assert _heap_on_huge_pages(m.pid) == _thp_available()
    write_page(m.pool(0, "kv") / "p", b"huge")
    with open(m.pool(0, "kv") / "p", "rb") as f:
        assert f.read() == b"huge"


def test_daemon_heap_is_left_alone_with_pagefs_huge_heap_0_or_a_hugetlb_choice(mount, monkeypatch):
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    monkeypatch.setenv("PAGEFS_HUGE_HEAP", "0")
    m = mount("--page-size", "64K", "--capacity", "1M")
    assert not _heap_on_huge_pages(m.pid)
    m.umount()
    monkeypatch.delenv("PAGEFS_HUGE_HEAP")
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=0")
    m.start()
    assert not _heap_on_huge_pages(m.pid)
    assert os.listdir(m.pool(0, "kv")) == []


def test_serve_meta_heap_runs_on_huge_pages_too(tmp_path, monkeypatch):
    from metaclient import Server

    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    monkeypatch.delenv("PAGEFS_HUGE_HEAP", raising=False)
    s = Server(str(tmp_path))
    try:
        assert _heap_on_huge_pages(s.proc.pid) == _thp_available()
        s.client.initialize(0, 4)
        assert s.client.exists(0, ["k"]) == [False]
    finally:
        assert s.stop() == 0, s.log_text()


def test_mount_defaults_an_index_in_the_state_dir_it_prints_and_16m_pages_of_1t(mount):
    """SPEC "Command line": without --meta the index is a file under the
    user's state directory, printed at mount; a pool made without sizes
    gets the 16M page size and the 1T capacity."""
    from pagefs_helpers import pids_with_arg
    m = mount(start=False)
    state = m.dir / "state"
    env = m.env()
    env["XDG_STATE_HOME"] = str(state)
    m.factory.track_mountpoint(m.mnt)
    r = subprocess.run([PAGEFS_BIN, "mount", str(m.backing), str(m.mnt), "--log-file", str(m.log)],
                       capture_output=True, text=True, timeout=60, env=env,
                       stdin=subprocess.DEVNULL)
    for pid in pids_with_arg(m.mnt):
        m.factory.track_pid(pid)
    try:
        assert r.returncode == 0 and is_mounted(m.mnt), describe(r)
        made = list((state / "pagefs").glob("*.db"))
        assert len(made) == 1, f"one index under {state}/pagefs: {made}"
        assert str(made[0]) in r.stdout + r.stderr, f"the index path is printed: {describe(r)}"
        pool = m.mnt / "0" / "kv"
        os.makedirs(pool)
        assert int(os.getxattr(pool, "user.pagefs.page_size")) == 16 << 20
        assert int(os.getxattr(pool, "user.pagefs.capacity")) == 1 << 40
        write_page(pool / "p", b"p" * 100)
    finally:
        u = run_pagefs("umount", m.mnt)
        assert u.returncode == 0, describe(u)


@pytest.mark.parametrize("cmd", ["fsck", "import-json", "export-json", "status", "umount"])
def test_other_commands_exit_2_naming_an_unknown_option(cmd):
    r = run_pagefs(cmd, "--bogus-option")
    assert r.returncode == 2, f"pagefs {cmd} --bogus-option: {describe(r)}"
    assert "bogus-option" in r.stdout + r.stderr, describe(r)


@pytest.mark.parametrize("opt,value", [("--page-size", "3000"), ("--capacity", "3G")])
def test_a_size_that_is_no_power_of_two_is_a_usage_error(mount, opt, value):
    m = mount(start=False)
    r = m.attempt(opts=[opt, value])
    assert r.returncode == 2 and value in r.stdout + r.stderr, describe(r)
    assert "power of two" in r.stdout + r.stderr, describe(r)
    assert not is_mounted(m.mnt)
