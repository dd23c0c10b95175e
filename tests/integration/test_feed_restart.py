"""The change feed across a crash of the PostgreSQL server.

After `pg_ctl restart -m immediate` the server hands out again the
transaction ids whose records had not reached its WAL on disk (a commit or
rollback that wrote nothing but its own record, not flushed yet). A node
whose feed had already read past such ids must still read the changes of
the new transactions that get them: it keeps its feed position (and so its
acknowledgement) at or below an id it knows the server has on disk
(docs/DESIGN.md, "Several daemons on one PostgreSQL index", change feed).

The test runs its own server (it crashes it), and makes the crash forget
transaction ids for certain: nothing writes the WAL out between the ids
and the crash (the nodes' heartbeats, which commit synchronously, fail on a
check constraint for that second; the server's WAL writer is stopped;
autovacuum is off), while node A's feed polls. Then node B unlinks a page A
had read and rewrites the pool's slots; A must read ENOENT for it and B's
bytes for B's pages, never the old page nor another page's bytes out of
its slot. Needs PostgreSQL's server binaries (not PAGEFS_TEST_PG_URI).
"""
import errno
import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

import pagefs_helpers as H
from pagefs_helpers import read_page, write_page
from pageformat import make_page

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PG_TEST = os.path.join(ROOT, "scripts", "pg_test.sh")
PG_BINS = sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                 key=lambda p: int(p.split("/")[-2]) if p.split("/")[-2].isdigit() else 0)

pytestmark = pytest.mark.skipif(
    not PG_BINS or bool(os.environ.get("PAGEFS_IT_PG_SKIP")),
    reason=os.environ.get("PAGEFS_IT_PG_SKIP") or "no PostgreSQL server binaries")

PAGE = 64 * 1024
OPTS = ("--page-size", "64K", "--capacity", "2M")  # 32 slots, chunks of one
BURNED = 400  # transaction ids that end before the crash and reach no disk
SEEN_WITHIN_S = 15  # a renewed lease after the restart, then the feed's bound


class Server:
    def __init__(self, dir, uri):
        self.dir = dir
        self.uri = uri

    def sql(self, *statements):
        """Runs each statement in its own transaction (psql -c ...); the
        output lines."""
        cmd = ["psql", self.uri, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"]
        for s in statements:
            cmd += ["-c", s]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"psql {statements!r} failed: {r.stderr}"
        return r.stdout.split()

    def crash_restart(self):
        """pg_ctl restart -m immediate, as the nemesis does."""
        cmd = [os.path.join(PG_BINS[-1], "pg_ctl"), "-D", os.path.join(self.dir, "data"),
               "restart", "-m", "immediate", "-w", "-t", "60",
               "-l", os.path.join(self.dir, "server.log")]
        if os.getuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--"] + cmd
        # a file, not a pipe: the server it starts keeps its output open
        with open(os.path.join(self.dir, "pg_ctl.log"), "a") as out:
            r = subprocess.run(cmd, stdout=out, stderr=out, stdin=subprocess.DEVNULL,
                               timeout=120)
        assert r.returncode == 0, "pg_ctl restart failed (see pg_ctl.log)"


@pytest.fixture(scope="module")
def server():
    # its own directory: the tests' one is private to root, and the server
    # runs as postgres when the tests run as root
    top = tempfile.mkdtemp(prefix="pagefs-pg-feed-", dir=os.environ.get("PAGEFS_IT_TMPDIR"))
    os.chmod(top, 0o755)
    d = os.path.join(top, "pg")
    r = subprocess.run(["bash", PG_TEST, "start", d], capture_output=True, text=True,
                       timeout=180)
    try:
        assert r.returncode == 0, f"cannot start a PostgreSQL server: {r.stderr}"
        s = Server(d, r.stdout.strip().splitlines()[-1])
        # A vacuum that writes a page out writes the WAL before it.
        s.sql("ALTER SYSTEM SET autovacuum = off", "SELECT pg_reload_conf()")
        yield s
    finally:
        subprocess.run(["bash", PG_TEST, "stop", d], capture_output=True, timeout=120)
        if not os.environ.get("PAGEFS_IT_KEEP"):
            shutil.rmtree(top, ignore_errors=True)


def read_or_errno(path):
    try:
        return read_page(path)
    except OSError as e:
        return e.errno


def write_or_errno(path, data):
    try:
        write_page(path, data)
    except OSError as e:
        return e.errno
    return None


@pytest.mark.timeout_s(150)
def test_a_node_reads_the_changes_of_transaction_ids_a_server_crash_handed_out_again(
        mount, server):
    a = mount(*OPTS, meta=server.uri)
    b = mount(*OPTS, backing=a.backing, meta=a.meta)
    a.pool()
    assert H.wait_until(lambda: os.path.isdir(b.path(0, "kv")), timeout=5)
    old = make_page("p", 1, PAGE)
    write_page(b.path(0, "kv", "p"), old)
    # A reads p once (checked against its checksum; --verify first checks
    # no later read), and its atime goes out in the next second.
    assert H.wait_until(lambda: read_or_errno(a.path(0, "kv", "p")) == old, timeout=5), \
        "A never saw B's page"
    time.sleep(1.5)

    # From here to the crash nothing writes the WAL out.
    server.sql("ALTER TABLE pagefs_nodes ADD CONSTRAINT no_renewal"
               " CHECK (lease_until < '2000-01-01') NOT VALID")
    time.sleep(0.3)  # a heartbeat under way ends
    walwriter = int(server.sql("SELECT pid FROM pg_stat_activity"
                               " WHERE backend_type = 'walwriter'")[0])
    os.kill(walwriter, signal.SIGSTOP)
    try:
        # BURNED transactions that end (their commit records stay in the
        # WAL buffers), while A's feed polls every 50 ms.
        last = int(server.sql(
            "DO $$BEGIN FOR i IN 1.." + str(BURNED) + " LOOP PERFORM pg_current_xact_id();"
            " COMMIT; END LOOP; END$$",
            "SELECT pg_current_xact_id()")[-1])
        time.sleep(0.5)
        server.crash_restart()  # (the server kills the stopped WAL writer)
    finally:
        try:
            os.kill(walwriter, signal.SIGCONT)
        except ProcessLookupError:
            pass
    first = int(server.sql("SELECT pg_current_xact_id()")[0])
    assert first <= last - BURNED // 2, (
        f"the crash forgot no transaction id (the last was {last}, the next is {first}):"
        " something wrote the WAL out, so this run shows nothing")
    server.sql("ALTER TABLE pagefs_nodes DROP CONSTRAINT no_renewal")
    print(f"ids {first}..{last} handed out again after the crash")

    # B's first transaction on its dead connection fails (EIO); the next
    # one reconnects.
    assert H.wait_until(lambda: write_or_errno(b.path(0, "kv", "warm"), b"w") is None,
                        timeout=15, interval=0.2), "B never wrote again after the restart"
    os.unlink(b.path(0, "kv", "warm"))

    # B: p goes, and new pages take the pool's slots (p's among them once
    # its grace period ends), with ids the crash handed out again.
    slot = int(os.getxattr(b.path(0, "kv", "p"), "user.pagefs.slot"))
    os.unlink(b.path(0, "kv", "p"))
    theirs = {}
    for i in range(40):
        name = f"q{i}"
        theirs[name] = make_page(name, 2, PAGE)
        write_page(b.path(0, "kv", name), theirs[name])
    reused = [n for n in os.listdir(b.path(0, "kv"))
              if int(os.getxattr(b.path(0, "kv", n), "user.pagefs.slot")) == slot]
    nodes = server.sql("SELECT id || ':' || acked FROM pagefs_nodes ORDER BY id")
    print(f"p's slot {slot} now holds {reused}; acks after the restart {nodes};"
          f" next id {server.sql('SELECT pg_current_xact_id()')[0]}")

    # A: p is gone (never its old bytes, nor those its slot holds now), and
    # every page B has reads as B wrote it.
    def a_caught_up():
        if read_or_errno(a.path(0, "kv", "p")) != errno.ENOENT:
            return False
        live = set(os.listdir(b.path(0, "kv")))
        return set(os.listdir(a.path(0, "kv"))) == live and all(
            read_or_errno(a.path(0, "kv", n)) == theirs[n] for n in live)

    if not H.wait_until(a_caught_up, timeout=SEEN_WITHIN_S, interval=0.2):
        got = read_or_errno(a.path(0, "kv", "p"))
        what = (H.ename(got) if isinstance(got, int) else "its old bytes" if got == old else
                "the bytes of another page" if got[:64] != old[:64] else "other bytes")
        live = set(os.listdir(b.path(0, "kv")))
        seen = set(os.listdir(a.path(0, "kv")))
        raise AssertionError(
            f"{SEEN_WITHIN_S} s after B's changes, A reads p (unlinked on B) as {what}; "
            f"A lists {len(seen & live)} of B's {len(live)} pages and "
            f"{sorted(seen - live)} that B does not have")
