"""Issue 4 "security": who may enter the mount (-o allow_other,
default_permissions checked with a real non-root user), and nothing a
client writes (names, namespaces, xattrs, --prefix) makes pagefs touch a
path outside its backing directory and its index."""
import contextlib
import errno
import json
import os
import pathlib
import pwd
import shutil
import stat
import subprocess
import sys

import pytest

from pagefs_helpers import PAGEFS_BIN, expect_errno, read_page, write_page

SMALL = ("--page-size", "64K", "--capacity", "1M")
USER = "pagefs-test"

# Runs ops as another user and prints one JSON result per op: "ok" (+ value)
# or the errno name.
AS_USER = r"""
import errno, json, os, sys
out = []
for op, *args in json.loads(sys.argv[1]):
    try:
        if op == "stat":
            v = os.stat(args[0]).st_size
        elif op == "listdir":
            v = sorted(os.listdir(args[0]))
        elif op == "chdir":
            v = os.chdir(args[0])
        elif op == "read":
            with open(args[0], "rb") as f:
                v = f.read().decode("latin-1")
        elif op == "create":
            fd = os.open(args[0], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.write(fd, b"x")
            os.close(fd)
            v = None
        elif op == "open_trunc":
            os.close(os.open(args[0], os.O_WRONLY | os.O_TRUNC))
            v = None
        elif op == "mkdir":
            v = os.mkdir(args[0])
        elif op == "rmdir":
            v = os.rmdir(args[0])
        elif op == "unlink":
            v = os.unlink(args[0])
        elif op == "rename":
            v = os.rename(args[0], args[1])
        elif op == "chown":
            v = os.chown(args[0], os.getuid(), os.getgid())
        elif op == "chmod":
            v = os.chmod(args[0], 0o777)
        elif op == "setxattr":
            v = os.setxattr(args[0], args[1], args[2].encode())
        elif op == "getxattr":
            v = os.getxattr(args[0], args[1]).decode()
        else:
            raise SystemExit("unknown op " + op)
        out.append(["ok", v])
    except OSError as e:
        out.append([errno.errorcode.get(e.errno, str(e.errno)), None])
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def user():
    """The non-root user of these tests, created when missing."""
    if os.geteuid() != 0:
        pytest.fail("the security tests create a user and mount as root: run them as root")
    try:
        pw = pwd.getpwnam(USER)
    except KeyError:
        r = subprocess.run(["useradd", "-M", "-r", "-s", "/usr/sbin/nologin", USER],
                           capture_output=True, text=True)
        assert r.returncode in (0, 9), f"useradd {USER}: {r.stderr}"
        pw = pwd.getpwnam(USER)
    assert pw.pw_uid != 0
    return pw


@contextlib.contextmanager
def reachable(path):
    """Lets other users traverse to path: adds o+x to the ancestors that lack
    it (temp dirs are 0700), and takes it away again afterwards."""
    changed = []
    p = pathlib.Path(path).parent
    while p != p.parent:
        st = os.stat(p)
        if not st.st_mode & stat.S_IXOTH:
            os.chmod(p, stat.S_IMODE(st.st_mode) | stat.S_IXOTH)
            changed.append((p, stat.S_IMODE(st.st_mode)))
        p = p.parent
    try:
        yield
    finally:
        for p, mode in changed:
            os.chmod(p, mode)


def as_user(pw, *ops):
    """Runs ops as pw's user in another process; returns [[result, value], ...]."""
    cmd = ["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups",
           sys.executable, "-c", AS_USER, json.dumps([[o[0], *map(str, o[1:])] for o in ops])]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd="/")
    assert r.returncode == 0, f"as {pw.pw_name}: {r.stderr}"
    return json.loads(r.stdout)


def results(pw, *ops):
    return [res for res, _ in as_user(pw, *ops)]


def test_without_allow_other_another_user_cannot_enter_the_mount(mount, user):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    write_page(pool / "p", b"secret")
    with reachable(m.mnt):
        got = as_user(user, ("stat", m.mnt), ("chdir", m.mnt), ("listdir", m.mnt), ("stat", pool),
                      ("read", pool / "p"), ("getxattr", m.mnt, "user.pagefs.stats"))
        assert [r for r, _ in got] == ["EACCES"] * 6, got
        # the same user can see the mount point's parent: the refusal is FUSE's
        assert results(user, ("stat", m.mnt.parent)) == ["ok"]
    # root still can
    assert read_page(pool / "p") == b"secret"


def test_with_allow_other_kernel_enforces_permissions(mount, user):
    m = mount(*SMALL, "-o", "allow_other")
    pool = m.pool(0, "kv")
    write_page(pool / "p", b"shared page")
    st = os.stat(pool)
    assert st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o755, \
        f"pool dir owner {st.st_uid} mode {oct(st.st_mode)}"
    cap = os.getxattr(pool, "user.pagefs.capacity")
    pst = os.stat(pool / "p")
    assert stat.S_IMODE(pst.st_mode) == 0o444 and pst.st_uid == 0
    with reachable(m.mnt):
        got = as_user(user, ("stat", m.mnt), ("listdir", pool), ("read", pool / "p"),
                      ("stat", pool / "p"), ("getxattr", pool, "user.pagefs.page_size"))
        assert [r for r, _ in got] == ["ok"] * 5, got
        assert got[1][1] == ["p"] and got[2][1] == "shared page" and got[3][1] == 11
        got = results(user,
                      ("create", pool / "mine"),
                      ("open_trunc", pool / "p"),
                      ("unlink", pool / "p"),
                      ("rename", pool / "p", pool / "q"),
                      ("mkdir", m.mnt / "1"),
                      ("mkdir", pool.parent / "other"),
                      ("rmdir", pool),
                      ("chown", pool / "p"),
                      ("chown", pool),
                      ("chmod", pool / "p"),
                      ("setxattr", pool, "user.pagefs.capacity", "2M"))
        assert got == ["EACCES", "EACCES", "EACCES", "EACCES", "EACCES", "EACCES", "EACCES",
                       "EPERM", "EPERM", "EPERM", "EACCES"], got
    # nothing changed
    assert os.listdir(pool) == ["p"]
    assert sorted(os.listdir(m.mnt)) == ["0"]
    assert read_page(pool / "p") == b"shared page"
    assert os.getxattr(pool, "user.pagefs.capacity") == cap
    st2 = os.stat(pool / "p")
    assert (st2.st_uid, st2.st_mode) == (pst.st_uid, pst.st_mode)


def test_with_allow_other_a_pool_the_user_may_write_takes_its_pages(mount, user):
    """default_permissions checks the mode, not a blanket refusal: a pool
    chmod 0777 by root lets the user write pages."""
    m = mount(*SMALL, "-o", "allow_other")
    pool = m.pool(0, "kv")
    try:
        os.chmod(pool, 0o777)
    except OSError as e:
        pytest.fail(f"chmod of a pool dir (SPEC: accepted): {errno.errorcode[e.errno]}")
    if stat.S_IMODE(os.stat(pool).st_mode) != 0o777:
        # SPEC: chmod is accepted; whether it sticks is the filesystem's choice
        with reachable(m.mnt):
            assert results(user, ("create", pool / "mine")) == ["EACCES"]
        return
    with reachable(m.mnt):
        assert results(user, ("create", pool / "mine"), ("read", pool / "mine")) == ["ok", "ok"]
    assert read_page(pool / "mine") == b"x"


def expected_backing_files(backing, prefix, pools):
    want = {".pagefs-owner"}
    for rank, ns in pools:
        want.add(f"{prefix}.{rank}.bin" if ns == "kv" else f"{prefix}.{rank}.bin.{ns}")
    return want


def snapshot(root):
    """Every path under root (relative), files and dirs."""
    out = set()
    for dirpath, dirs, files in os.walk(root):
        for n in dirs + files:
            out.add(os.path.relpath(os.path.join(dirpath, n), root))
    return out


def test_hostile_names_and_xattrs_never_reach_outside_backing(mount, tmp_path):
    m = mount(*SMALL)
    # a canary tree around the mount's directory: nothing may appear there
    outside_before = snapshot(m.dir.parent)
    pool = m.pool(0, "kv")
    pool1 = m.pool(1, "ns_a")
    # names that are paths: refused by the kernel or pagefs
    expect_errno((errno.EISDIR, errno.EEXIST), os.open, str(pool) + "/..", os.O_WRONLY | os.O_CREAT, 0o644)
    # "../x" resolves to the rank dir: files outside pools are refused
    expect_errno((errno.EINVAL, errno.EPERM), os.open, str(pool) + "/../x", os.O_WRONLY | os.O_CREAT, 0o644)
    expect_errno((errno.EINVAL, errno.EPERM), os.open, str(pool) + "/../../x", os.O_WRONLY | os.O_CREAT,
                 0o644)
    # "a/b": a is not a directory
    expect_errno(errno.ENOENT, os.open, str(pool) + "/a/b", os.O_WRONLY | os.O_CREAT, 0o644)
    # names that look like paths but are plain names
    hostile = [b"..x", b"...", b"..\\..\\etc", b"~", b"$HOME", b"-rf", b"x\n..", b".pagefs-owner",
               b"index.db", b"hicache.0.bin", b"hicache.0.bin.ns_a", b"*", b"\x01..\x02"]
    for n in hostile:
        for p in (pool, pool1):
            write_page(os.fsencode(str(p)) + b"/" + n, b"hostile " + n)
    for n in hostile:
        assert read_page(os.fsencode(str(pool)) + b"/" + n) == b"hostile " + n
    # namespaces and ranks that are paths or odd
    for bad in ("..", "ns..", "NS", "a.b", "x" * 65, "-1", "01", "65536"):
        with pytest.raises(OSError):
            os.mkdir(m.mnt / "2" / bad if bad not in ("-1", "01", "65536") else m.mnt / bad)
    # pool xattrs with path-like values (on an empty pool: a pool with pages
    # refuses any change with EBUSY first): refused, settings unchanged
    empty = m.pool(2, "empty")
    settings = {n: os.getxattr(empty, n) for n in ("user.pagefs.page_size", "user.pagefs.capacity")}
    for name in settings:
        for val in (b"../../x", b"/etc/passwd", b"..", b"64K/..", b"1M\x00../x"):
            expect_errno(errno.EINVAL, os.setxattr, empty, name, val, what=f"setxattr {name}={val!r}")
    assert settings == {n: os.getxattr(empty, n) for n in settings}
    for name, val in (("user.pagefs.data_file", b"../../escape"), ("user.pagefs.prefix", b"../x"),
                      ("user.pagefs.../x", b"1"), ("trusted.x", b"1")):
        with pytest.raises(OSError):
            os.setxattr(empty, name, val)
    # page xattrs are read-only
    with pytest.raises(OSError):
        os.setxattr(os.fsencode(str(pool)) + b"/..x", "user.pagefs.data_file", b"../../escape")
    m.remount()
    for n in hostile:
        assert read_page(os.fsencode(str(pool1)) + b"/" + n) == b"hostile " + n
    m.umount()
    # only the expected files exist in BACKING and next to the index
    assert set(os.listdir(m.backing)) == expected_backing_files(m.backing, "hicache", [(0, "kv"), (1, "ns_a"), (2, "empty")]), \
        sorted(os.listdir(m.backing))
    index_dir = set(os.listdir(m.index.parent))
    allowed = {"backing", "mnt", "log", m.index.name, m.index.name + "-wal", m.index.name + "-shm",
               m.index.name + "-journal", m.index.name + ".lock"}
    stray = {n for n in index_dir - allowed if "san." not in n}
    assert not stray, f"unexpected files next to the index: {sorted(stray)}"
    assert os.listdir(m.mnt) == []
    # and nothing new around the mount's directory
    outside_after = snapshot(m.dir.parent)
    new = {p for p in outside_after - outside_before
           if not p.startswith(m.dir.name + os.sep) and p != m.dir.name}
    assert not new, f"files appeared outside the mount's directory: {sorted(new)[:10]}"


@pytest.mark.parametrize("prefix", ["a/b", "..", "../x", "x/../y", "/abs", "", "a..b"])
def test_mount_refuses_a_prefix_that_is_a_path(mount, prefix):
    m = mount(*SMALL)
    m.umount()
    before = snapshot(m.dir)
    r = m.attempt(opts=[*SMALL, "--prefix", prefix])
    assert r.returncode == 2, f"--prefix {prefix!r}: exit {r.returncode}\n{r.stderr}"
    assert "prefix" in r.stderr
    assert not os.path.ismount(m.mnt)
    after = snapshot(m.dir)
    assert after - before <= {"log"}, sorted(after - before)


@pytest.mark.parametrize("cmd", ["import-json", "export-json"])
def test_index_commands_refuse_a_prefix_that_is_a_path(tmp_path, cmd):
    backing = tmp_path / "backing"
    backing.mkdir()
    escape = tmp_path / "escape.0.bin"
    args = [PAGEFS_BIN, cmd]
    if cmd == "import-json":
        sample = tmp_path / "state.json"
        shutil.copy("/work/shared/fixtures/mini_3fs_state_sample.json", sample) \
            if os.path.exists("/work/shared/fixtures/mini_3fs_state_sample.json") \
            else sample.write_text('{"pools": []}')
        args.append(str(sample))
    args += ["--backing", str(backing), "--meta", f"sqlite:{tmp_path / 'index.db'}",
             "--prefix", "../escape"]
    if cmd == "import-json":
        args += ["--page-size", "64K"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0, f"{cmd} --prefix ../escape succeeded: {r.stdout}{r.stderr}"
    assert "prefix" in r.stderr, r.stderr
    assert not escape.exists()
    assert set(os.listdir(tmp_path)) <= {"backing", "state.json", "index.db", "index.db.lock",
                                         "index.db-wal", "index.db-shm", "index.db-journal"}
