"""Mounting from /etc/fstab (issue 25): the real mount(8) and umount(8)
commands through the mount helper mount.fuse.pagefs, `mount -a -T` with a
temporary fstab, and every `pagefs mount` option spelled -o key=value.

The helper is the pagefs binary under another name; mount(8) looks for it
in /sbin only, so the `helper` fixture links /usr/sbin/mount.fuse.pagefs
(= /sbin on Debian) to the binary under test for the test's length and
puts back whatever was there."""
import os
import re
import subprocess

import pytest

import pagefs_helpers as H

HELPER = "/usr/sbin/mount.fuse.pagefs"


@pytest.fixture
def helper():
    saved = os.readlink(HELPER) if os.path.islink(HELPER) else None
    if os.path.exists(HELPER) and saved is None:
        pytest.fail(f"{HELPER} is a file, not a link: a pagefs package is installed? "
                    "remove it (apt-get remove pagefs) to test the build")
    tmp = HELPER + ".test"
    os.symlink(os.path.abspath(H.PAGEFS_BIN), tmp)
    os.replace(tmp, HELPER)
    try:
        yield HELPER
    finally:
        if saved is not None:
            os.symlink(saved, tmp)
            os.replace(tmp, HELPER)
        else:
            os.unlink(HELPER)


def run(*cmd, env=None):
    return subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=90,
                          stdin=subprocess.DEVNULL, env=env)


def daemon_of(mnt):
    return int(os.getxattr(mnt, "user.pagefs.pid"))


def o_opts(m, *extra):
    return ",".join([f"meta={m.meta}", "page_size=64K", "capacity=1M",
                     f"log_file={m.log}", *extra])


def test_mount_t_fuse_pagefs_with_o_options_mounts_and_umount_unmounts(mount, helper):
    m = mount(start=False)
    mount.track_mountpoint(m.mnt)
    r = run("mount", "-t", "fuse.pagefs", m.backing, m.mnt, "-o",
            o_opts(m, "rw", "defaults", "nosuid", "nodev", "noexec", "noatime", "nofail",
                   "_netdev", "x-systemd.automount", "x-systemd.requires=network.target",
                   "comment=kv", "evict=none", "verify=always", "kernel_cache=reread"))
    assert r.returncode == 0, H.describe(r)
    assert H.is_mounted(m.mnt)
    pid = daemon_of(m.mnt)
    mount.track_pid(pid)
    pool = m.pool(0, "kv")
    assert H.xattr_int(pool, "user.pagefs.page_size") == 65536, "page_size=64K"
    assert H.xattr_int(pool, "user.pagefs.capacity") == 1 << 20, "capacity=1M"
    stats = m.stats()
    assert (stats["evict"], stats["verify"], stats["kernel_cache"]) == ("none", "always", "reread")
    H.write_page(pool / "page", b"f" * 5000)
    line = [l for l in open("/proc/mounts") if f" {m.mnt} " in l][0]
    assert line.split()[:3] == [f"pagefs:{m.backing}", str(m.mnt), "fuse.pagefs"], line
    r = run("umount", m.mnt)
    assert r.returncode == 0, H.describe(r)
    assert not H.is_mounted(m.mnt)
    assert H.wait_pid_gone(pid, 15), "the daemon exits after umount(8)"
    m.start("--page-size", "64K")
    assert H.read_page(m.pool(0, "kv") / "page") == b"f" * 5000, "the page survived umount(8)"
    m.umount()


def test_mount_a_with_a_temporary_fstab_mounts_each_entry_once_and_skips_noauto(mount, helper,
                                                                                tmp_path):
    a, b = mount(start=False), mount(start=False)
    for x in (a, b):
        mount.track_mountpoint(x.mnt)
    fstab = tmp_path / "fstab"
    fstab.write_text(
        "# pagefs entries\n"
        f"pagefs:{a.backing} {a.mnt} fuse.pagefs {o_opts(a, 'nofail', '_netdev')} 0 0\n"
        f"{b.backing} {b.mnt} fuse.pagefs {o_opts(b, 'noauto')} 0 0\n")
    r = run("mount", "-a", "-T", fstab)
    assert r.returncode == 0, H.describe(r)
    assert H.is_mounted(a.mnt) and not H.is_mounted(b.mnt), "noauto is left alone"
    pid = daemon_of(a.mnt)
    mount.track_pid(pid)
    H.write_page(a.pool(1, "kv") / "x", b"x")
    # again: the entry is mounted already (its source is what /proc/mounts shows)
    r = run("mount", "-a", "-T", fstab)
    assert r.returncode == 0, H.describe(r)
    assert daemon_of(a.mnt) == pid
    assert sum(f" {a.mnt} " in l for l in open("/proc/mounts")) == 1
    # the noauto entry mounts by its mount point, as `mount /mnt/x` does
    r = run("mount", "-T", fstab, b.mnt)
    assert r.returncode == 0, H.describe(r)
    assert H.is_mounted(b.mnt)
    mount.track_pid(daemon_of(b.mnt))
    for x in (a, b):
        r = run("umount", x.mnt)
        assert r.returncode == 0, H.describe(r)
        assert not H.is_mounted(x.mnt)


def test_an_unknown_o_option_is_a_clear_error_and_mounts_nothing(mount, helper):
    m = mount(start=False)
    mount.track_mountpoint(m.mnt)
    r = run("mount", "-t", "fuse.pagefs", m.backing, m.mnt, "-o", o_opts(m, "pagesize=64K"))
    assert r.returncode != 0
    assert "unknown mount option '-o pagesize=64K'" in r.stderr, r.stderr
    assert not H.is_mounted(m.mnt)
    r = run("mount", "-t", "fuse.pagefs", m.backing, m.mnt, "-o", o_opts(m, "evict=sometimes"))
    assert r.returncode != 0 and "--evict 'sometimes'" in r.stderr, r.stderr
    assert not H.is_mounted(m.mnt)
    # mount -s (sloppy): unknown options are ignored with a warning
    r = run("mount", "-s", "-t", "fuse.pagefs", m.backing, m.mnt, "-o", o_opts(m, "pagesize=1"))
    assert r.returncode == 0, H.describe(r)
    assert "ignoring unknown mount option '-o pagesize'" in r.stderr, r.stderr
    mount.track_pid(daemon_of(m.mnt))
    assert run("umount", m.mnt).returncode == 0


def test_a_second_mount_on_a_mounted_point_fails_and_leaves_the_first_serving(mount, helper):
    m = mount(start=False)
    mount.track_mountpoint(m.mnt)
    r = run("mount", "-t", "fuse.pagefs", m.backing, m.mnt, "-o", o_opts(m))
    assert r.returncode == 0, H.describe(r)
    pid = daemon_of(m.mnt)
    mount.track_pid(pid)
    H.write_page(m.pool(0, "kv") / "p", b"p" * 10)
    r = run("mount", "-t", "fuse.pagefs", m.backing, m.mnt, "-o", o_opts(m))
    assert r.returncode != 0
    assert "already a pagefs mount" in r.stderr, r.stderr
    assert daemon_of(m.mnt) == pid
    assert H.read_page(m.pool(0, "kv") / "p") == b"p" * 10
    assert run("umount", m.mnt).returncode == 0


def test_every_pagefs_mount_option_has_an_o_spelling(mount):
    m = mount(start=False)
    helptext = H.run_pagefs("mount", "--help").stdout
    longs = re.findall(r"--([a-z-]+) (?! )", helptext)
    assert {"meta", "page-size", "capacity", "metrics", "http", "log-file"} <= set(longs), longs
    for opt in longs:
        for key in (opt, opt.replace("-", "_")):
            # a BACKING that does not exist: nothing is mounted or created
            r = H.run_pagefs("mount", m.dir / "no-such-backing", m.mnt, "-o", f"{key}=@bad@")
            assert r.returncode in (1, 2), H.describe(r)
            assert "unknown mount option" not in r.stderr, f"-o {key}=: {r.stderr}"
            assert f"--{opt}" in r.stderr or "no-such-backing" in r.stderr, r.stderr
    r = H.run_pagefs("mount", m.backing, m.mnt, "-o", "allow_other,ro,bogus")
    assert r.returncode == 2 and "unknown mount option '-o bogus'" in r.stderr, r.stderr
    assert not H.is_mounted(m.mnt)
