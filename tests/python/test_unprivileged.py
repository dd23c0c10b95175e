"""pagefs.Client as a user other than the mount's owner (-o allow_other):
the batch lookup ioctl answers any user who can open the pool directory,
and a data file that user cannot open (the backing under a 0700 temp dir)
is read through the mount, with the same bytes."""
import contextlib
import errno
import json
import os
import pathlib
import pwd
import stat
import subprocess
import sys

import pytest

import pagefs

USER = "pagefs-test"
ROOT = pathlib.Path(__file__).resolve().parent.parent.parent

PROBE = r"""
import json, sys
import pagefs
mnt, = sys.argv[1:]
c = pagefs.Client(mnt)
ex = c.exists(0, "kv", ["a", "b", "nope"])
bufs = [bytearray(3000), bytearray(5)]
ok = c.read_into(0, "kv", ["a", "b"], bufs)
wrote = c.write(0, "kv", ["mine"], [b"x"])
print(json.dumps({"exists": ex, "read": ok, "bytes": [bytes(b).hex() for b in bufs],
                  "counters": c.counters, "wrote": wrote, "why": c.last_error.errno}))
"""


@pytest.fixture(scope="module")
def user():
    if os.geteuid() != 0:
        pytest.fail("this test creates a user and mounts as root: run it as root")
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        r = subprocess.run(["useradd", "-M", "-r", "-s", "/usr/sbin/nologin", USER],
                           capture_output=True, text=True)
        assert r.returncode in (0, 9), f"useradd {USER}: {r.stderr}"
        return pwd.getpwnam(USER)


@contextlib.contextmanager
def traversable(path):
    """o+x on the ancestors of path that lack it, taken away afterwards."""
    changed = []
    p = pathlib.Path(path).parent
    while p != p.parent:
        mode = stat.S_IMODE(os.stat(p).st_mode)
        if not mode & stat.S_IXOTH:
            os.chmod(p, mode | stat.S_IXOTH)
            changed.append((p, mode))
        p = p.parent
    try:
        yield
    finally:
        for p, mode in changed:
            os.chmod(p, mode)


def test_another_user_looks_up_in_one_request_and_reads_through_the_mount(mount, user):
    m = mount("--page-size", "4K", "--capacity", "1M", "-o", "allow_other")
    c = pagefs.Client(m.mnt)
    c.pool(0, "kv")
    assert c.write(0, "kv", ["a", "b"], [b"\x01" * 3000, b"hello"]) == [True, True]
    c.close()
    backing_mode = stat.S_IMODE(os.stat(m.backing).st_mode)
    with traversable(m.mnt):
        os.chmod(m.backing, 0o700)  # the data files out of the user's reach
        r = subprocess.run(["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
                            "--clear-groups", sys.executable, "-c", PROBE, str(m.mnt)],
                           capture_output=True, text=True, timeout=60, cwd="/",
                           env={"PYTHONPATH": str(ROOT / "python"), "PATH": os.environ["PATH"]})
        os.chmod(m.backing, backing_mode)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout)
    assert got["exists"] == [True, True, False]
    assert got["read"] == [True, True]
    assert got["bytes"] == [(b"\x01" * 3000).hex(), b"hello".hex()]
    assert got["counters"]["mount_reads"] == 2 and got["counters"]["direct_reads"] == 0
    # the pool is root's 0755 directory: the user may not create pages in it
    assert got["wrote"] == [False] and got["why"] == errno.EACCES, got
