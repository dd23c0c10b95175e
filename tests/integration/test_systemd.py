"""systemd (issue 25): the installed units pass `systemd-analyze verify`
(no running systemd needed), `pagefs mount -f` and serve-meta tell systemd
READY=1 once usable (Type=notify), and starting a second unit on a live
mount point fails clearly and leaves the mount serving."""
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess

import pytest
import requests

import metaclient as MC
import pagefs_helpers as H

ROOT = pathlib.Path(__file__).resolve().parents[2]


def build_dir():
    return pathlib.Path(H.PAGEFS_BIN).resolve().parent


@pytest.fixture
def sysroot(tmp_path):
    """A root with pagefs installed by `cmake --install` (prefix /usr) and
    the host's systemd units, for `systemd-analyze verify --root`."""
    root = tmp_path / "root"
    r = subprocess.run(["cmake", "--install", str(build_dir()), "--prefix", "/usr"],
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, DESTDIR=str(root)))
    assert r.returncode == 0, r.stdout + r.stderr
    (root / "bin").mkdir()
    for tool in ("/bin/sh", "/bin/kill"):
        shutil.copy(tool, root / "bin")
    shutil.copytree("/lib/systemd/system", root / "lib/systemd/system", symlinks=True,
                    dirs_exist_ok=True)
    return root


def verify(root, *units):
    return subprocess.run(["systemd-analyze", "verify", f"--root={root}", *units],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, MANPATH=str(root / "usr/share/man")))


def test_the_installed_units_pass_systemd_analyze_verify(sysroot):
    units = sysroot / "usr/lib/systemd/system"
    assert (units / "pagefs@.service").is_file() and (units / "pagefs-meta@.service").is_file()
    assert os.readlink(sysroot / "usr/sbin/mount.fuse.pagefs") == "../bin/pagefs"
    text = (units / "pagefs@.service").read_text()
    assert "Type=notify" in text and "ExecStop=/usr/bin/pagefs umount" in text
    assert "Restart=on-failure" in text and "Before=sglang.service" in text
    r = verify(sysroot, "pagefs@kv.service", "pagefs-meta@kv.service")
    assert r.returncode == 0 and not r.stderr.strip(), r.stdout + r.stderr
    # the check can fail: a unit whose binary is missing does not pass
    os.unlink(sysroot / "usr/bin/pagefs")
    r = verify(sysroot, "pagefs@kv.service")
    assert r.returncode != 0 and "/usr/bin/pagefs" in r.stderr, r.stdout + r.stderr


def test_the_installed_man_pages_open_with_man_l(sysroot):
    pages = sorted((sysroot / "usr/share/man/man8").glob("*.8"))
    assert len(pages) >= 11
    for p in pages:
        r = subprocess.run(["man", "-l", "-Tutf8", str(p)], capture_output=True, text=True,
                           timeout=60, env=dict(os.environ, MANWIDTH="80"))
        text = re.sub(r".\x08", "", r.stdout)  # overstrike to plain text
        assert r.returncode == 0 and "NAME" in text, f"{p}: {r.stderr}"
        assert "warning" not in r.stderr, f"{p}: {r.stderr}"


class Notify:
    """A NOTIFY_SOCKET as systemd offers it to a Type=notify service."""

    def __init__(self, path):
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(60)

    def wait_for(self, word):
        got = []
        while True:
            msg = self.sock.recv(4096).decode()
            got.append(msg)
            if word in msg.split("\n"):
                return msg
            assert len(got) < 20, got

    def close(self):
        self.sock.close()


def test_mount_in_the_foreground_notifies_ready_once_usable_and_stopping(mount, tmp_path):
    m = mount(start=False)
    mount.track_mountpoint(m.mnt)
    n = Notify(tmp_path / "notify")
    proc = subprocess.Popen([H.PAGEFS_BIN, "mount", "--foreground", str(m.backing), str(m.mnt),
                             "--meta", m.meta, "--page-size", "64K", "--log-file", str(m.log)],
                            env=dict(os.environ, NOTIFY_SOCKET=n.path),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    mount.track_pid(proc.pid)
    try:
        msg = n.wait_for("READY=1")
        assert f"STATUS=serving {m.backing} on {m.mnt}" in msg, msg
        assert H.is_mounted(m.mnt), "READY=1 came before the mount was in place"
        H.write_page(m.pool(0, "kv") / "p", b"r" * 100)
        # the unit's ExecStop
        assert H.run_pagefs("umount", "--timeout", "120", m.mnt).returncode == 0
        n.wait_for("STOPPING=1")
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        n.close()


def test_serve_meta_notifies_ready_once_listening(tmp_path):
    n = Notify(tmp_path / "notify")
    (tmp_path / "b").mkdir()
    proc = subprocess.Popen([H.PAGEFS_BIN, "serve-meta", "--backing", str(tmp_path / "b"),
                             "--meta", f"sqlite:{tmp_path}/i.db", "--listen", "127.0.0.1:0"],
                            env=dict(os.environ, NOTIFY_SOCKET=n.path), stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        msg = n.wait_for("READY=1")
        url = re.search(r"STATUS=serving (http://\S+)", msg).group(1)
        assert requests.get(f"{url}/ready", timeout=30).json() == {"status": "ready"}
        proc.send_signal(signal.SIGTERM)
        n.wait_for("STOPPING=1")
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        n.close()


def unit_exec_start_pre():
    text = (ROOT / "dist/systemd/pagefs@.service").read_text()
    line = re.search(r"^ExecStartPre=-/bin/sh -c '(.*)'$", text, re.M).group(1)
    return line.replace("/usr/bin/pagefs", os.path.abspath(H.PAGEFS_BIN))


def test_a_second_unit_on_a_live_mount_fails_clearly_and_the_mount_keeps_serving(mount):
    m = mount("--page-size", "64K", "--capacity", "1M")
    H.write_page(m.pool(0, "kv") / "keep", b"k" * 100)
    pre = subprocess.run(["/bin/sh", "-c", unit_exec_start_pre()], capture_output=True,
                         text=True, timeout=60, env=dict(os.environ, MOUNTPOINT=str(m.mnt)))
    assert pre.returncode == 0, pre.stderr
    assert H.is_mounted(m.mnt) and int(os.getxattr(m.mnt, "user.pagefs.pid")) == m.pid
    r = subprocess.run([H.PAGEFS_BIN, "mount", "--foreground", str(m.backing), str(m.mnt),
                        "--meta", m.meta], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "already a pagefs mount" in r.stderr, H.describe(r)
    assert H.read_page(m.pool(0, "kv") / "keep") == b"k" * 100
    m.umount()


def test_the_units_start_pre_clears_a_mount_whose_daemon_died(mount):
    m = mount("--page-size", "64K", "--capacity", "1M")
    os.kill(m.pid, signal.SIGKILL)
    assert H.wait_until(lambda: not H.pid_alive(m.pid), timeout=15)
    pre = subprocess.run(["/bin/sh", "-c", unit_exec_start_pre()], capture_output=True,
                         text=True, timeout=60, env=dict(os.environ, MOUNTPOINT=str(m.mnt)))
    assert pre.returncode == 0, pre.stderr
    assert not H.is_mounted(m.mnt), "the dead mount is cleared, so the restart can mount"
    m.start()
    m.umount()
