"""Logs an operator can rotate and route (issue 25): every line carries
time, process, level and subsystem; SIGHUP reopens --log-file (logrotate
without copytruncate) and leaves the mount serving; --log-file syslog."""
import os
import re
import signal
import socket
import subprocess
import time

import pytest

import metaclient as MC
import pagefs_helpers as H

LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z pagefs\[(\d+)\] "
                  r"(error|warn|info|debug) ([a-z]+/[a-z_]+): \S")


def test_every_log_line_carries_time_pid_level_and_subsystem(mount):
    m = mount("--page-size", "64K", "--capacity", "1M")
    H.write_page(m.pool(0, "kv") / "a", b"a")
    m.umount()
    lines = m.log.read_text().splitlines()
    assert len(lines) >= 3, lines
    for line in lines:
        g = LINE.match(line)
        assert g, f"log line without time, pid, level and subsystem: {line!r}"
        assert int(g.group(1)) == m.pid
    subsystems = {LINE.match(l).group(3) for l in lines}
    assert "fs/fs_main" in subsystems, subsystems


def test_sighup_reopens_the_log_file_and_the_mount_keeps_serving(mount):
    m = mount("--page-size", "64K", "--capacity", "1M")
    H.write_page(m.pool(0, "kv") / "before", b"b" * 100)
    rotated = m.log.with_name("log.1")
    os.rename(m.log, rotated)  # what logrotate does without copytruncate
    os.kill(m.pid, signal.SIGHUP)
    assert H.wait_until(lambda: m.log.exists(), timeout=10), "SIGHUP did not create a new log"
    assert H.is_mounted(m.mnt), "SIGHUP must not unmount"
    H.write_page(m.pool(0, "kv") / "after", b"c" * 100)
    assert H.read_page(m.pool(0, "kv") / "before") == b"b" * 100
    m.umount()
    new, old = m.log.read_text(), rotated.read_text()
    assert "unmounting" in new, new
    assert "unmounting" not in old and "serving" in old, old


def test_sighup_reopens_the_log_file_of_serve_meta(tmp_path):
    log = tmp_path / "serve-meta.log"
    srv = MC.Server(str(tmp_path), "--log-file", str(log))
    try:
        assert H.wait_until(lambda: "listening" in log.read_text(), timeout=10)
        os.rename(log, tmp_path / "serve-meta.log.1")
        srv.proc.send_signal(signal.SIGHUP)
        assert H.wait_until(lambda: log.exists(), timeout=10)
        srv.client.initialize(0, 4)
        assert srv.proc.poll() is None, "SIGHUP must not stop serve-meta"
    finally:
        assert srv.stop() == 0
    assert "stopping" in log.read_text()
    for line in log.read_text().splitlines():
        assert LINE.match(line), line


def test_log_file_syslog_sends_lines_to_syslog_with_level_and_subsystem(mount, tmp_path):
    if os.path.exists("/dev/log"):
        pytest.skip("a syslog daemon owns /dev/log here; this test listens there itself")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("/dev/log")
    try:
        m = mount(start=False)
        mount.track_mountpoint(m.mnt)
        r = subprocess.run([H.PAGEFS_BIN, "mount", str(m.backing), str(m.mnt), "--meta", m.meta,
                            "--page-size", "64K", "--capacity", "1M", "--log-file", "syslog"],
                           capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert r.returncode == 0, H.describe(r)
        pid = int(os.getxattr(m.mnt, "user.pagefs.pid"))
        mount.track_pid(pid)
        assert H.run_pagefs("umount", m.mnt).returncode == 0
        sock.settimeout(5)
        got = []
        while True:
            try:
                got.append(sock.recv(65536).decode(errors="replace"))
            except socket.timeout:
                break
            if any("unmounting" in g for g in got):
                break
    finally:
        sock.close()
        os.unlink("/dev/log")
    # <facility*8+severity>: daemon (3) and info (6) = 30
    serving = [g for g in got if "serving" in g]
    assert serving, got
    assert serving[0].startswith("<30>"), serving[0]
    assert f"pagefs[{pid}]: info fs/fs_main: serving" in serving[0], serving[0]
    assert any("unmounting" in g for g in got), got
