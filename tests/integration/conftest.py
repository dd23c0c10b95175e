"""Fixtures for the pagefs integration suite.

`mount` is a factory: mount("--page-size", "64K", "--capacity", "1M") makes a
temp dir with backing/, mnt/ and index.db, runs `pagefs mount` (which
daemonizes and returns when the mount is usable) and returns a Mount (see
pagefs_helpers.py). Teardown always unmounts (pagefs umount, fusermount3 -u,
umount -l), kills the daemons it started and fails the test if a sanitizer
wrote a report. The daemon log is attached to every failed test's report.

A watchdog per test (marker `timeout_s`, default 120 s) kills the daemons if
a test hangs, so a wedged FUSE request can never hang the suite.

Engines: a module marked `pytestmark = pytest.mark.engines` runs each of its
tests twice, engine=sqlite and engine=postgres; under postgres every mount
without an explicit meta= gets a fresh PostgreSQL index (its own schema on
the server PAGEFS_TEST_PG_URI names; scripts/test.sh starts one). Without
PAGEFS_TEST_PG_URI, or with PAGEFS_IT_PG_SKIP=REASON, the postgres variants
and the PostgreSQL modules are skipped with that reason.
"""
import faulthandler
import os
import shutil
import sys
import tempfile
import threading

import pytest

import pagefs_helpers as H

DEFAULT_TIMEOUT = float(os.environ.get("PAGEFS_IT_TEST_TIMEOUT", "120"))


def pytest_configure(config):
    config.addinivalue_line("markers", "timeout_s(seconds): per-test watchdog limit")
    config.addinivalue_line("markers", "engines: run each test against SQLite and PostgreSQL")


def pytest_generate_tests(metafunc):
    if "engine" in metafunc.fixturenames and metafunc.definition.get_closest_marker("engines"):
        metafunc.parametrize("engine", ["sqlite", "postgres"], indirect=True)


@pytest.fixture
def engine(request):
    """The index engine of the `mount` fixture: sqlite unless parametrized."""
    name = getattr(request, "param", "sqlite")
    if name == "postgres" and H.PG_SKIP:
        pytest.skip(H.PG_SKIP)
    return name


@pytest.fixture(scope="session")
def tmp_root():
    root = tempfile.mkdtemp(prefix="pagefs-it-", dir=os.environ.get("PAGEFS_IT_TMPDIR"))
    yield root
    H.kill_children()
    left = H.unmount_all_under(root)
    if left:
        sys.stderr.write(f"\n[pagefs-it] lazily unmounted leftovers: {left}\n")
    if not os.environ.get("PAGEFS_IT_KEEP"):
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def _binary_exists():
    if not os.access(H.PAGEFS_BIN, os.X_OK):
        pytest.exit(f"pagefs binary not found at {H.PAGEFS_BIN} (set PAGEFS_BIN or build it first)",
                    returncode=1)


@pytest.fixture(autouse=True)
def _watchdog(request):
    marker = request.node.get_closest_marker("timeout_s")
    limit = float(marker.args[0]) if marker else DEFAULT_TIMEOUT
    fired = []

    def fire():
        fired.append(True)
        sys.stderr.write(f"\n[pagefs-it] WATCHDOG: {request.node.nodeid} ran over {limit:.0f}s; "
                         "killing pagefs daemons and test children\n")
        faulthandler.dump_traceback(all_threads=True)
        for m in list(H.LIVE_MOUNTS):
            m.emergency_kill()
        H.kill_children()

    t = threading.Timer(limit, fire)
    t.daemon = True
    t.start()
    yield
    t.cancel()
    if fired:
        pytest.fail(f"test ran over its {limit:.0f}s limit (watchdog killed the daemons)")


@pytest.fixture
def mount(request, tmp_root, engine):
    factory = H.MountFactory(tmp_root, request.node, engine=engine)
    request.node._pagefs_factory = factory
    yield factory
    problems = factory.cleanup()
    problems += factory.drop_pg_schemas()
    reports = []
    for m in factory.mounts:
        reports += m.sanitizer_reports()
    if reports:
        request.node._pagefs_sanitizer = "\n".join(reports)
    assert not problems, "teardown: " + "; ".join(problems)
    assert not reports, "sanitizer reports from pagefs:\n" + "\n".join(reports)[:20000]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if not rep.failed:
        return
    factory = getattr(item, "_pagefs_factory", None)
    if factory is None:
        return
    for m in factory.mounts:
        if getattr(m, f"_reported_{rep.when}", False):
            continue
        setattr(m, f"_reported_{rep.when}", True)
        rep.sections.append((f"pagefs daemon log {m.log}", m.log_tail()))
        for cmd, r in m.outputs[-3:]:
            rep.sections.append((f"pagefs mount output ({' '.join(cmd[3:5])})",
                                 f"{H.describe(r)}"))
