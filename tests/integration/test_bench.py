"""`pagefs bench`: a minimal run so the tool cannot rot (issue 3).

Runs every contender over a couple of tiny measurements and checks the
JSON records, the chart and that nothing is left mounted. It asserts what
the tool reports, never how fast anything is.
"""
import json
import os
import signal
import subprocess
import time

import pytest

import pagefs_helpers as H
from pagefs_helpers import describe, mounts_table, run_pagefs

FIELDS = {"workload", "page_size", "clients", "contender", "ops_per_s", "mib_per_s", "p50_us",
          "p99_us"}
CONTENDERS = {"raw", "dir", "passthrough", "pagefs", "pagefs-direct"}
WORKLOADS = {"write", "read-cold", "read-hot", "exists", "list", "delete"}

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="bench mounts a tmpfs and FUSE")


def _mounts_under(path):
    return [mp for mp, _ in mounts_table() if mp.startswith(str(path))]


@needs_root
@pytest.mark.timeout_s(240)
def test_bench_smoke_writes_a_record_per_measurement_for_every_contender(tmp_path):
    out = tmp_path / "bench.json"
    png = tmp_path / "bench.png"
    env = dict(os.environ, TMPDIR=str(tmp_path))
    r = run_pagefs("bench", "--sizes", "64K,1M", "--clients", "1,2", "--pages", "6",
                   "--json", out, "--plot", png, timeout=200, env=env)
    assert r.returncode == 0, f"bench failed: {describe(r)}"
    recs = json.loads(out.read_text())
    assert isinstance(recs, list) and recs
    for rec in recs:
        assert FIELDS <= rec.keys(), f"record lacks fields: {rec}"
        assert rec["contender"] in CONTENDERS and rec["workload"] in WORKLOADS, rec
        assert rec["page_size"] in (65536, 1 << 20) and rec["clients"] in (1, 2), rec
        assert rec["ops_per_s"] > 0 and rec["p99_us"] >= rec["p50_us"] > 0, rec
        if rec["workload"] in ("write", "read-cold", "read-hot"):
            assert rec["mib_per_s"] > 0, rec
    seen = {(r["workload"], r["page_size"], r["clients"], r["contender"]) for r in recs}
    for size in (65536, 1 << 20):
        for clients in (1, 2):
            for c in CONTENDERS:
                assert ("read-cold", size, clients, c) in seen, f"no read-cold record for {c}"
            for c in ("raw", "dir", "passthrough", "pagefs"):
                assert ("write", size, clients, c) in seen, f"no write record for {c}"
            for w in ("exists", "list", "delete", "read-hot"):
                for c in ("dir", "passthrough", "pagefs"):
                    assert (w, size, clients, c) in seen, f"no {w} record for {c}"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", "the plot is not a PNG"
    assert "pf/pt" in r.stdout, f"the summary table is missing: {describe(r)}"
    assert not _mounts_under(tmp_path), "bench left mounts behind"
    assert not any(p.name.startswith("pagefs-bench.") for p in tmp_path.iterdir()), \
        "bench left its temporary directory behind"


@needs_root
@pytest.mark.timeout_s(120)
def test_bench_scale_reports_mount_time_memory_latency_and_index_size(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path))
    r = run_pagefs("bench", "--scale", "500", timeout=100, env=env)
    assert r.returncode == 0, f"bench --scale failed: {describe(r)}"
    for what in ("mount time:", "daemon memory:", "stat:", "open+close:", "readdir:",
                 "index size:"):
        assert what in r.stdout, f"--scale output lacks {what!r}: {describe(r)}"
    assert "500 entries" in r.stdout
    assert not _mounts_under(tmp_path), "bench --scale left mounts behind"


@needs_root
@pytest.mark.timeout_s(120)
def test_bench_floors_reports_round_trips_copies_and_the_ratios_they_leave(tmp_path):
    """--floors: the round trips and copies no FUSE daemon goes below, and
    each pagefs contender's highest ratio to raw computed from them. Its
    pool and page go when it ends: an index given with --meta is left as
    it was (a leftover pool named a data file in the removed temporary
    directory, and the next run's mount failed)."""
    out = tmp_path / "floors.json"
    env = dict(os.environ, TMPDIR=str(tmp_path))
    index = f"sqlite:{tmp_path}/floors.db"
    for run in (1, 2):  # the second finds the index as the first found it
        r = run_pagefs("bench", "--floors", "--sizes", "64K,1M", "--json", out, "--meta", index,
                       timeout=100, env=env)
        assert r.returncode == 0, f"bench --floors run {run} failed: {describe(r)}"
    recs = json.loads(out.read_text())
    assert [rec["page_size"] for rec in recs] == [65536, 1 << 20], recs
    for rec in recs:
        assert rec["workload"] == "floor", rec
        for k in ("pipe_rt_us", "fuse_rt_us", "open_us", "pread_us", "cold_pread_us",
                  "pwrite_us"):
            assert rec[k] > 0, (k, rec)
        for k in ("max_direct_read", "max_read_hot", "max_read_cold", "max_write"):
            assert 0 < rec[k] < 1, (k, rec)
        pread, trip, opened_us = rec["pread_us"], rec["fuse_rt_us"], rec["open_us"]
        assert rec["max_direct_read"] == pytest.approx(pread / (pread + opened_us + trip),
                                                       rel=0.02), rec
        # a read through the mount asks at least once after its open: never
        # above a direct read, which asks for the offset once
        assert rec["max_read_hot"] <= rec["max_direct_read"], rec
    assert recs[0]["fuse_rt_us"] == recs[1]["fuse_rt_us"], "one round trip measured per run"
    for what in ("FUSE round trip through pagefs", "| 64K |", "| 1M |"):
        assert what in r.stdout, f"--floors output lacks {what!r}: {describe(r)}"
    assert not _mounts_under(tmp_path), "bench --floors left mounts behind"
    assert not any(p.name.startswith("pagefs-bench.") for p in tmp_path.iterdir()), \
        "bench --floors left its temporary directory behind"


def test_bench_rejects_a_bad_option_with_exit_2():
    r = run_pagefs("bench", "--sizes", "12Q")
    assert r.returncode == 2, describe(r)
    assert "12Q" in r.stdout + r.stderr
    r = run_pagefs("bench", "--workloads", "write,sideways")
    assert r.returncode == 2, describe(r)
    assert "sideways" in r.stdout + r.stderr
    for extra in (("--scale", "10"), ("--clients", "2"), ("--quick",)):
        r = run_pagefs("bench", "--floors", *extra)
        assert r.returncode == 2 and "--floors runs alone" in r.stderr, describe(r)
    r = run_pagefs("bench", "--floors", "--json", "")
    assert r.returncode == 2 and "--json: an empty file name" in r.stderr, describe(r)


@needs_root
@pytest.mark.timeout_s(200)
def test_pagefs_direct_reads_by_batch_pin_or_by_an_open_per_page(tmp_path):
    """--direct-batch N: pagefs-direct reads N pages per LOOKUP_PIN (64 by
    default), 1: an open and user.pagefs.offset per page; both read every
    page of every client, and each record says which it measured."""
    env = dict(os.environ, TMPDIR=str(tmp_path))
    for batch in (None, "1", "3"):
        out = tmp_path / ("bench-%s.json" % batch)
        extra = ("--direct-batch", batch) if batch else ()
        r = run_pagefs("bench", "--sizes", "64K", "--clients", "1,2", "--pages", "7",
                       "--workloads", "read-cold,read-hot", "--json", out, *extra,
                       timeout=150, env=env)
        assert r.returncode == 0, f"bench failed: {describe(r)}"
        recs = [rec for rec in json.loads(out.read_text()) if rec["contender"] == "pagefs-direct"]
        assert {(rec["workload"], rec["clients"]) for rec in recs} == \
            {(w, c) for w in ("read-cold", "read-hot") for c in (1, 2)}, recs
        for rec in recs:
            assert rec["direct_batch"] == int(batch or 64), rec
            assert rec["ops"] == 7 and rec["bytes"] == 7 * 65536, rec
    assert not _mounts_under(tmp_path), "bench left mounts behind"
    for bad in ("0", "307", "x"):
        r = run_pagefs("bench", "--direct-batch", bad, timeout=30)
        assert r.returncode == 2 and "--direct-batch" in r.stderr, describe(r)


def test_bench_refuses_result_files_it_could_not_write_before_running(tmp_path):
    """--json/--plot where nothing can be written fail at once (exit 2),
    not after the minutes of the run."""
    for opt, path, why in (("--json", tmp_path / "missing" / "r.json", "No such file"),
                           ("--plot", tmp_path, "a directory")):
        r = run_pagefs("bench", opt, path, timeout=30)
        assert r.returncode == 2 and why in r.stderr, describe(r)


@needs_root
@pytest.mark.timeout_s(120)
def test_bench_workloads_reports_only_the_chosen_ones_and_cleans_up(tmp_path):
    out = tmp_path / "bench.json"
    env = dict(os.environ, TMPDIR=str(tmp_path))
    r = run_pagefs("bench", "--sizes", "64K", "--clients", "1", "--pages", "4",
                   "--workloads", "read-cold,exists", "--json", out, timeout=100, env=env)
    assert r.returncode == 0, f"bench failed: {describe(r)}"
    recs = json.loads(out.read_text())
    got = {(rec["workload"], rec["contender"]) for rec in recs}
    want = {("read-cold", c) for c in CONTENDERS} | \
        {("exists", c) for c in ("dir", "passthrough", "pagefs")}
    assert got == want, recs
    assert not _mounts_under(tmp_path), "bench left mounts behind"
    assert not any(p.name.startswith("pagefs-bench.") for p in tmp_path.iterdir()), \
        "bench left its temporary directory behind"


@needs_root
@pytest.mark.skipif(bool(H.PG_SKIP), reason=H.PG_SKIP or "-")
@pytest.mark.timeout_s(180)
def test_bench_mounts_runs_several_daemons_on_one_postgres_index_and_cleans_up(tmp_path):
    out = tmp_path / "multi.json"
    env = dict(os.environ, TMPDIR=str(tmp_path))
    r = run_pagefs("bench", "--mounts", "1,2", "--meta", H.PG_URI, "--clients", "1",
                   "--pages", "20", "--json", out, timeout=150, env=env)
    assert r.returncode == 0, f"bench --mounts failed: {describe(r)}"
    recs = json.loads(out.read_text())
    assert [rec["mounts"] for rec in recs] == [1, 2], recs
    for rec in recs:
        assert rec["engine"] == "postgres" and rec["workload"] == "multi-write", rec
        assert rec["pages"] == 20 * rec["mounts"] and rec["commits_per_s"] > 0, rec
        assert rec["records_per_txn"] >= 1, rec
    assert "| mounts |" in r.stdout, describe(r)
    assert not _mounts_under(tmp_path), "bench --mounts left mounts behind"
    left = H.psql("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'pagefs_bench_%'")
    assert left == "0", f"bench left {left} schemas behind"


def test_bench_mounts_with_sqlite_runs_one_mount_and_says_why_not_more(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("bench mounts a tmpfs and FUSE")
    env = dict(os.environ, TMPDIR=str(tmp_path))
    r = run_pagefs("bench", "--mounts", "1,2", "--clients", "1", "--pages", "10", timeout=100,
                   env=env)
    assert r.returncode == 0, describe(r)
    assert "2 mounts: skipped (an SQLite index serves one daemon" in r.stdout, describe(r)
    assert "| 1 | 1 | 10 |" in r.stdout, describe(r)


def _model_processes(path):
    """pids of pagefs-backing-model processes serving something under path."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"pagefs-backing-model") and \
                any(a.startswith(str(path).encode()) for a in argv):
            pids.append(int(d))
    return pids


def _bench_on_model(tmp_path, meta, data, size, workloads):
    """One client's pagefs bench of 4 pages of size on the 3fs model with
    those latencies: (the finished run, its JSON records)."""
    out = tmp_path / "model.json"
    env = dict(os.environ, TMPDIR=str(tmp_path))
    r = run_pagefs("bench", "--backing-model", "3fs", "--model-meta-latency", meta,
                   "--model-data-latency", data, "--sizes", size, "--clients", "1",
                   "--pages", "4", "--repeat", "1", "--workloads", workloads,
                   "--json", out, timeout=150, env=env)
    assert r.returncode == 0, f"bench failed: {describe(r)}"
    return r, json.loads(out.read_text())


@needs_root
@pytest.mark.timeout_s(180)
def test_bench_on_the_3fs_model_charges_its_latencies_and_records_them(tmp_path):
    """--backing-model 3fs: every record names the backing and both
    latencies; a name the model looks up really waits (a dir stat takes at
    least the metadata latency, a raw read the data latency); the requests
    per page show dir's create and rename reaching the model and pagefs's
    exists never reaching it; the stand-in is unmounted and gone at the end."""
    meta_us, data_us = 5000, 3000
    r, recs = _bench_on_model(tmp_path, "5ms", "3000us", "64K", "write,read-cold,exists")
    assert "3fs-model (meta 5000 us, data 3000 us, cache shared)" in r.stdout, describe(r)
    got = {(rec["workload"], rec["contender"]): rec for rec in recs}
    assert {c for w, c in got} == CONTENDERS, recs
    for rec in recs:
        assert rec["backing"] == "3fs-model", rec
        assert rec["model_meta_latency_us"] == meta_us, rec
        assert rec["model_data_latency_us"] == data_us, rec
        assert rec["model_cache"] == "shared", rec
        assert isinstance(rec["model_requests_per_op"], dict), rec
    # every dir stat looks its name up in the model: none faster than that
    dir_exists = got[("exists", "dir")]
    assert dir_exists["p50_us"] >= meta_us, dir_exists
    assert dir_exists["model_requests_per_op"].get("lookup", 0) >= 1, dir_exists
    for c in ("raw", "pagefs", "pagefs-direct"):
        rec = got[("read-cold", c)]
        assert rec["p50_us"] >= data_us, rec
        assert rec["model_requests_per_op"]["read"] == pytest.approx(1.0), rec
    dir_write = got[("write", "dir")]["model_requests_per_op"]
    for op in ("create", "rename", "write"):
        assert dir_write.get(op) == pytest.approx(1.0), (op, dir_write)
    assert got[("write", "dir")]["p50_us"] >= 2 * meta_us + data_us, got[("write", "dir")]
    pf_write = got[("write", "pagefs")]["model_requests_per_op"]
    assert pf_write.get("write", 0) >= 1 and "create" not in pf_write \
        and "rename" not in pf_write, pf_write
    assert "lookup" not in got[("exists", "pagefs")]["model_requests_per_op"], \
        got[("exists", "pagefs")]
    assert not _mounts_under(tmp_path), "bench left mounts behind"
    assert not _model_processes(tmp_path), "the stand-in outlived the bench"
    assert not any(p.name.startswith("pagefs-bench.") for p in tmp_path.iterdir()), \
        "bench left its temporary directory behind"


@needs_root
@pytest.mark.timeout_s(180)
def test_on_the_3fs_model_pagefs_moves_a_1m_page_in_one_backing_request(tmp_path):
    """A 1 MiB page costs the FUSE backing one write and one read, as it
    costs raw pwrite/pread from an aligned buffer: the daemon's bytes go
    through page-aligned buffers (fs/fs_align.h). From libfuse's request
    buffer or a malloc'd one they span 257 pages, which the kernel sends
    as two requests, each paying 3FS's data latency."""
    _, recs = _bench_on_model(tmp_path, "100us", "100us", "1M", "write,read-cold")
    got = {(rec["workload"], rec["contender"]): rec["model_requests_per_op"] for rec in recs}
    for contender in ("raw", "pagefs"):
        assert got[("write", contender)].get("write") == pytest.approx(1.0), \
            (contender, got[("write", contender)])
        assert got[("read-cold", contender)].get("read") == pytest.approx(1.0), \
            (contender, got[("read-cold", contender)])
    assert not _mounts_under(tmp_path), "bench left mounts behind"
    assert not _model_processes(tmp_path), "the stand-in outlived the bench"


@needs_root
@pytest.mark.timeout_s(120)
def test_an_interrupted_bench_unmounts_the_3fs_model_and_stops_it(tmp_path):
    """Ctrl-C in the middle of a run on the model: the bench unmounts
    pagefs, the passthrough and the stand-in, which exits."""
    env = dict(os.environ, TMPDIR=str(tmp_path))
    proc = subprocess.Popen([H.PAGEFS_BIN, "bench", "--backing-model", "3fs",
                             "--model-meta-latency", "20ms", "--sizes", "64K", "--clients",
                             "1", "--pages", "200"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env,
                            stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not any(fs == "fuse.3fs-model" for mp, fs in mounts_table()
                      if mp.startswith(str(tmp_path))):
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "the model never mounted"
            time.sleep(0.05)
        assert _model_processes(tmp_path), "no stand-in process while mounted"
        time.sleep(1)  # into the measurements
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0 and "interrupted" in output, output
    assert not _mounts_under(tmp_path), "bench left mounts behind"
    deadline = time.monotonic() + 10
    while _model_processes(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _model_processes(tmp_path), "the stand-in outlived the bench"


def test_bench_rejects_model_options_that_do_not_fit():
    for args, why in ((("--backing-model", "nfs"), "'nfs' is not a model"),
                      (("--model-meta-latency", "1ms"), "need --backing-model 3fs"),
                      (("--backing-model", "3fs", "--model-data-latency", "5 parsecs"),
                       "'5 parsecs' is not a time"),
                      (("--backing-model", "3fs", "--model-meta-latency", "nan"),
                       "'nan' is not a time"),
                      (("--backing-model", "3fs", "--model-cache", "warm"),
                       "'warm' is not shared or local"),
                      (("--backing-model", "3fs", "--backing-fuse"), "give one")):
        r = run_pagefs("bench", *args)
        assert r.returncode == 2 and why in r.stderr, describe(r)
