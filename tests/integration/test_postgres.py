"""The PostgreSQL index (issue 5): what differs from SQLite, for one daemon.

The shared contract tests (test_tree, test_page_write, test_persistence,
test_rename_unlink) already run against both engines; these cover what only
a server has: schema versions, connection losses, other commands taking a
postgres:// URI, and passwords kept out of every output. Several mounts on
one index: test_multimount.py. Needs PAGEFS_TEST_PG_URI (skipped without it).
"""
import errno
import os
import threading
import time

import pytest

import pagefs_helpers as H
from pagefs_helpers import assert_bytes_equal, describe, read_page, run_pagefs, write_page

pytestmark = pytest.mark.skipif(bool(H.PG_SKIP), reason=H.PG_SKIP)

SMALL = ("--page-size", "64K", "--capacity", "4M")


def pg_mount(mount, *opts):
    """A mount on a fresh PostgreSQL index (its own schema)."""
    factory = mount
    return factory(*(opts or SMALL), meta=factory.pg_index())


def terminate_backends(pid):
    """Ends every PostgreSQL session of daemon pid; returns how many."""
    out = H.psql("SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity"
                 f" WHERE application_name LIKE 'pagefs pid {pid} %'")
    return int(out or 0)


def test_a_newer_schema_is_refused_at_mount_naming_the_fix(mount):
    m = pg_mount(mount)
    write_page(m.pool() / "p", b"data")
    m.umount()
    version = H.psql("SELECT value FROM pagefs_settings WHERE key='schema_version'", uri=m.meta)
    H.psql("UPDATE pagefs_settings SET value='77' WHERE key='schema_version'", uri=m.meta)
    r = m.attempt()
    assert r.returncode == 1, describe(r)
    assert "schema version 77" in r.stderr and "upgrade pagefs" in r.stderr, r.stderr
    H.psql(f"UPDATE pagefs_settings SET value='{version}' WHERE key='schema_version'",
           uri=m.meta)
    m.start()
    assert read_page(m.pool() / "p") == b"data"


@pytest.mark.timeout_s(180)
def test_lost_connections_fail_commits_only_with_eio_and_lose_nothing_that_returned(mount):
    m = pg_mount(mount, "--page-size", "8K", "--capacity", "256M")  # 32768 slots: no eviction
    pool = m.pool()
    ok, failed, other = {}, [], []
    stop = threading.Event()

    def writer():
        i = 0
        while not stop.is_set():
            name = f"page-{i}"
            data = os.urandom(1000 + i % 5000)
            if i >= 30000:
                break
            try:
                write_page(pool / name, data)
                ok[name] = data
            except OSError as e:
                (failed if e.errno == errno.EIO else other).append((name, e.errno))
            i += 1

    t = threading.Thread(target=writer)
    t.start()
    killed = 0
    try:
        for _ in range(12):
            time.sleep(0.15)
            killed += terminate_backends(m.pid)
    finally:
        stop.set()
        t.join(60)
    assert killed >= 12, f"only {killed} sessions ended"
    assert not other, f"errors other than EIO: {other[:5]}"
    # The daemon reconnected by itself: new commits work.
    for i in range(5):
        write_page(pool / f"later-{i}", b"later %d" % i)
    m.remount()
    names = set(os.listdir(pool))
    for name, data in ok.items():
        assert name in names, f"{name} returned from close() but is gone after remount"
        assert_bytes_equal(read_page(pool / name), data, name)
    for name, _ in failed:
        assert name not in names, f"{name} failed with EIO but was published"
    assert {f"later-{i}" for i in range(5)} <= names
    m.umount()
    r = run_pagefs("fsck", m.backing, "--meta", m.meta, "--verify-data", timeout=120)
    assert r.returncode == 0, describe(r)
    print(f"{len(ok)} commits ok, {len(failed)} failed with EIO, {killed} sessions ended")


def deadlocks_on(m, op, times):
    """Makes PostgreSQL cancel the next `times` inserts or deletions (op) of
    a page row with SQLSTATE 40P01, as it cancels the loser of a real
    deadlock between two nodes' transactions (which cannot be made to
    happen on demand): a trigger that counts on a sequence, which a
    rollback does not take back."""
    H.psql("CREATE SEQUENCE test_deadlocks;"
           " CREATE FUNCTION test_deadlock() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
           f" IF nextval('test_deadlocks') <= {times} THEN"
           " RAISE EXCEPTION 'test: deadlock detected' USING ERRCODE = '40P01'; END IF;"
           f" RETURN {'OLD' if op == 'DELETE' else 'NEW'}; END $$;"
           f" CREATE TRIGGER test_deadlock BEFORE {op} ON pagefs_pages"
           " FOR EACH ROW EXECUTE FUNCTION test_deadlock()", uri=m.meta)


def deadlocks_met(m):
    return int(H.psql("SELECT CASE WHEN is_called THEN last_value ELSE 0 END"
                      " FROM test_deadlocks", uri=m.meta))


# The change each deadlock test makes, by the row operation the trigger
# cancels: a deletion (unlink) or a commit (close: it takes its pool's lock
# again before it runs again); and the pages the pool holds once the change
# went through, and while it did not.
CHANGES = {
    "DELETE": (lambda pool, data: os.unlink(pool / "p"), ["q"], ["p", "q"]),
    "INSERT": (lambda pool, data: write_page(pool / "p", data), ["p", "q"], ["q"]),
}


def pool_before(m, op, data):
    """The pool as the change finds it: q (so that the pool exists and only
    the change inserts), and p too when the change deletes it."""
    pool = m.pool()
    write_page(pool / "q", b"y")
    if op == "DELETE":
        write_page(pool / "p", data)
    return pool


def assert_pages(pool, names, data, what):
    assert sorted(os.listdir(pool)) == names, what
    for name in names:
        assert_bytes_equal(read_page(pool / name), data if name == "p" else b"y", what)


def deadlock_case(mount, op, times):
    """A mount whose pool holds what change op finds, the page's bytes,
    and the next `times` row operations op cancelled as deadlocks."""
    m = pg_mount(mount)
    data = os.urandom(50000)
    pool = pool_before(m, op, data)
    deadlocks_on(m, op, times)
    return m, pool, data


@pytest.mark.parametrize("op", CHANGES)
def test_a_change_cancelled_as_a_deadlock_is_run_again(mount, op):
    change, done, _ = CHANGES[op]
    m, pool, data = deadlock_case(mount, op, 2)
    change(pool, data)  # cancelled twice, then through
    assert deadlocks_met(m) == 3, "two cancelled runs, then the one that went through"
    # each time the whole transaction went back (the rows its other
    # records locked with it) and its batch ran again
    log = m.log_tail()
    assert log.count("a batch of records met another node's transaction; running it again") == 2, log
    m.remount()
    assert_pages(pool, done, data, "after two retries")


@pytest.mark.parametrize("op", CHANGES)
def test_a_change_cancelled_every_time_fails_with_eio_and_changes_nothing(mount, op):
    change, done, kept = CHANGES[op]
    m, pool, data = deadlock_case(mount, op, 1000)
    with pytest.raises(OSError) as e:
        change(pool, data)
    assert e.value.errno == errno.EIO, e.value
    assert deadlocks_met(m) == 6, "the first run and 5 more (BATCH_RUNS), no more"
    assert "(run 6 of 6)" in m.log_tail(), m.log_tail()
    assert_pages(pool, kept, data, "after the failed change")
    m.remount()
    assert_pages(pool, kept, data, "the index kept what it had")
    H.psql("DROP TRIGGER test_deadlock ON pagefs_pages", uri=m.meta)
    change(pool, data)  # the page, or the name and a slot, are free again
    m.remount()
    assert_pages(pool, done, data, "the change once nothing cancels it")


def test_an_atime_cancelled_as_a_deadlock_yields_at_once(mount):
    # Run again in the same transaction, an atime update met the same
    # other node's transaction at every run (the rows its batch locked
    # before stay locked), and that node's page deletion failed with EIO
    # after its retries (test_multimount under ASan). An atime is a hint:
    # it yields the first time.
    m = pg_mount(mount)
    pool = m.pool()
    write_page(pool / "p", b"x" * 1000)
    time.sleep(1.2)  # a use notes the atime once the stored one is a second old
    deadlocks_on(m, "UPDATE", 1000)
    assert read_page(pool / "p") == b"x" * 1000
    m.umount()  # writes the noted atimes
    log = m.log_tail()
    assert deadlocks_met(m) == 1, "the atime was run again after its deadlock"
    assert "left for its next use" in log, log
    assert "running it again" not in log, log
    H.psql("DROP TRIGGER test_deadlock ON pagefs_pages", uri=m.meta)
    m.start()
    assert read_page(pool / "p") == b"x" * 1000


def test_fsck_and_export_json_take_a_postgres_uri(mount):
    m = pg_mount(mount)
    write_page(m.pool(0, "kv") / "key-1", b"a" * 100)
    write_page(m.pool(0, "kv") / "key-2", b"b" * 100)
    m.umount()
    r = run_pagefs("fsck", m.backing, "--meta", m.meta)
    assert r.returncode == 0 and "clean" in r.stdout, describe(r)
    out = m.dir / "state.json"
    r = run_pagefs("export-json", "--backing", m.backing, "--meta", m.meta, "-o", out)
    assert r.returncode == 0, describe(r)
    text = out.read_text()
    assert '"0:kv"' in text and '"key-1"' in text and '"key-2"' in text, text[:500]


def test_a_password_in_the_uri_shows_in_no_output_log_status_or_mark(mount):
    # The test server trusts local connections, so any password is accepted.
    schema, uri = H.new_pg_index(f"pw{os.getpid()}")
    mount.pg_schemas.append(schema)
    secret = "s3cret-Pw-123"
    rest = uri.split("://", 1)[1]
    user_host, sep, tail = rest.partition("/")
    uri_pw = f"postgresql://postgres:{secret}@{user_host}{sep}{tail}"
    m = mount(*SMALL, meta=uri_pw)
    write_page(m.pool() / "p", b"x")
    seen = {
        "mount output": "".join(r.stdout + r.stderr for _, r in m.outputs),
        "stats xattr": os.getxattr(m.mnt, "user.pagefs.stats").decode(),
        "status": run_pagefs("status", m.mnt).stdout,
    }
    m.umount()
    seen["daemon log"] = m.log_tail()
    seen["owner mark"] = (m.backing / ".pagefs-owner").read_text()
    r = run_pagefs("fsck", m.backing, "--meta", "postgresql://postgres:%s@127.0.0.1:1/x" % secret)
    seen["fsck error"] = r.stderr
    for what, text in seen.items():
        assert secret not in text, f"the password shows in the {what}: {text[:2000]}"
    assert "***" in seen["owner mark"], seen["owner mark"]


def test_two_indexes_in_two_schemas_of_one_database_mount_side_by_side(mount):
    """README: two indexes on one server live in two databases or in two
    schemas of one database. Their first nodes both have id 1, and the
    advisory lock a node holds was keyed by its id alone: the second mount
    waited for the first's lock forever."""
    a = pg_mount(mount)
    t0 = time.monotonic()
    b = pg_mount(mount)
    assert time.monotonic() - t0 < 20, "the second index's mount waited for the first"
    for m, name in ((a, "in-a"), (b, "in-b")):
        write_page(m.pool() / name, name.encode())
    assert os.listdir(a.pool()) == ["in-a"] and os.listdir(b.pool()) == ["in-b"]
    a.umount()
    b.umount()



def test_rewriting_a_few_names_fast_evicts_nothing_from_a_nearly_empty_pool(mount):
    """Every rename over a name frees a slot that comes back only once every
    node has seen the page go (its grace period): a writer that rewrites
    four names as fast as it can keeps dozens of slots in grace, and the
    writers evicted live pages of a pool with 60 of 64 slots about to come
    free.
    They wait for the grace periods now."""
    m = pg_mount(mount)
    d = m.pool()
    for i in range(600):
        tmp = d / f"key{i % 4}.tmp.{i}"
        write_page(tmp, b"%d" % i)
        os.rename(tmp, d / f"key{i % 4}")
    assert sorted(os.listdir(d)) == [f"key{k}" for k in range(4)]
    assert int(os.getxattr(d, "user.pagefs.evictions")) == 0
    m.umount()


def test_pool_create_sets_the_capacity_of_a_new_or_empty_pool(mount):
    """pool create --capacity on a pool with no pages: a new one, and one
    made before with the mount's defaults (its chunks of slots change
    size; it is not refused as "below the slots in use" on PostgreSQL,
    and no new pool stays behind)."""
    m = pg_mount(mount)
    for rank, opts in ((1, ("--page-size", "64K", "--capacity", "8M")),
                       (2, ("--capacity", "2M"))):
        path = m.path(rank, "kv")
        r = run_pagefs("pool", "create", path, *opts)
        assert r.returncode == 0, describe(r)
        assert int(os.getxattr(path, "user.pagefs.capacity")) == int(opts[-1][:-1]) << 20
    pool = m.pool(0, "kv")
    r = run_pagefs("pool", "create", pool, "--capacity", "16M")
    assert r.returncode == 0, describe(r)
    assert int(os.getxattr(pool, "user.pagefs.capacity")) == 16 << 20
    data = os.urandom(1000)
    write_page(pool / "p", data)
    m.remount()
    assert int(os.getxattr(m.pool(0, "kv"), "user.pagefs.capacity")) == 16 << 20
    assert read_page(m.pool(0, "kv") / "p") == data


def test_pool_create_refused_on_a_pool_with_pages_leaves_it_as_it_was(mount):
    """A capacity that changes how nodes divide a pool holding pages is
    refused with a message that says so, and nothing changes."""
    m = pg_mount(mount)
    pool = m.pool(0, "kv")
    write_page(pool / "p", b"x")
    r = run_pagefs("pool", "create", pool, "--capacity", "16M")
    assert r.returncode == 1 and "nothing was changed" in r.stderr, describe(r)
    assert int(os.getxattr(pool, "user.pagefs.capacity")) == 4 << 20
    assert read_page(pool / "p") == b"x"
