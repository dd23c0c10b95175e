"""GET /metrics, /health and /ready (issue 25): on `mount --metrics`, on
the `--http` listener and on `serve-meta`; the text passes `promtool check
metrics`, and a real Prometheus server scrapes a live mount."""
import errno
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time

import pytest
import requests

import metaclient as MC
import pagefs_helpers as H

PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")


def scrape(port, path="/metrics"):
    return requests.get(f"http://127.0.0.1:{port}{path}", timeout=30)


def samples(text):
    """{'name{labels}': float} of a Prometheus text exposition."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, value = line.rsplit(" ", 1)
        out[key] = float(value)
    return out


def promtool_check(text):
    assert PROMTOOL, "promtool is missing: apt-get install prometheus (scripts/deps.sh)"
    r = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, f"promtool check metrics failed:\n{r.stdout}\n{r.stderr}"


def pool(rank, ns):
    return f'{{rank="{rank}",namespace="{ns}"}}'


def test_a_mount_with_metrics_counts_its_pools_and_requests_and_passes_promtool(mount):
    port = MC.free_port()
    m = mount("--page-size", "64K", "--capacity", "1M", "--metrics", str(port))
    kv, mamba = m.pool(0, "kv"), m.pool(3, "mamba")
    for i in range(3):
        H.write_page(kv / f"p{i}", b"k" * 1000)
    H.write_page(mamba / "m0", b"m" * 65536)
    assert H.read_page(kv / "p1") == b"k" * 1000
    assert not os.path.exists(kv / "absent")
    r = scrape(port)
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    promtool_check(r.text)
    s = samples(r.text)
    assert s["pagefs_pool_pages" + pool(0, "kv")] == 3
    assert s["pagefs_pool_pages" + pool(3, "mamba")] == 1
    assert s["pagefs_pool_bytes" + pool(0, "kv")] == 3000
    assert s["pagefs_pool_capacity_bytes" + pool(0, "kv")] == 1 << 20
    assert s["pagefs_pool_capacity_slots" + pool(0, "kv")] == 16
    assert s["pagefs_pool_free_slots" + pool(0, "kv")] == 13
    assert s["pagefs_pool_written_bytes_total" + pool(3, "mamba")] == 65536
    assert s["pagefs_pool_read_bytes_total" + pool(0, "kv")] >= 1000
    assert s["pagefs_pools"] == 2
    assert s['pagefs_build_info{version="0.1.0"}'] == 1
    assert s["pagefs_mount_serving"] == 1
    assert s['pagefs_fuse_request_duration_seconds_count{op="create"}'] >= 4
    assert s['pagefs_fuse_request_duration_seconds_count{op="flush"}'] >= 4
    assert s['pagefs_fuse_request_duration_seconds_bucket{op="create",le="+Inf"}'] == \
        s['pagefs_fuse_request_duration_seconds_count{op="create"}']
    assert s["pagefs_store_commits_total"] >= 1
    assert s["pagefs_store_commit_records_count"] >= 1
    assert s["pagefs_store_errors_total"] == 0
    # a second scrape sees the counters move, and its own scrape counted
    H.write_page(kv / "p3", b"k" * 10)
    s2 = samples(scrape(port).text)
    assert s2["pagefs_pool_pages" + pool(0, "kv")] == 4
    assert s2['pagefs_fuse_request_duration_seconds_count{op="create"}'] > \
        s['pagefs_fuse_request_duration_seconds_count{op="create"}']
    assert s2['pagefs_http_request_duration_seconds_count{route="metrics"}'] >= 1
    h = scrape(port, "/health")
    assert (h.status_code, h.json()) == (200, {"status": "ok"})
    rd = scrape(port, "/ready")
    assert (rd.status_code, rd.json()) == (200, {"status": "ready"})
    # the metrics listener does not speak the 3FS protocol, nor POST /metrics
    r = requests.post(f"http://127.0.0.1:{port}/0/exists", json={"keys": []}, timeout=30)
    assert r.status_code == 404 and "/metrics" in r.json()["detail"]
    assert requests.post(f"http://127.0.0.1:{port}/metrics", timeout=30).status_code == 405
    m.umount()


def test_the_http_listener_serves_metrics_health_and_ready_beside_the_protocol(mount):
    port = MC.free_port()
    m = mount("--page-size", "64K", "--capacity", "1M", "--http", f"127.0.0.1:{port}")
    c = MC.MetaClient(f"http://127.0.0.1:{port}")
    c.initialize(2, 16)
    assert c.exists(2, ["a", "b"]) == [False, False]
    r = scrape(port)
    promtool_check(r.text)
    s = samples(r.text)
    assert s["pagefs_pool_capacity_slots" + pool(2, "kv")] == 16
    assert s['pagefs_http_request_duration_seconds_count{route="exists"}'] == 1
    assert s['pagefs_http_request_duration_seconds_count{route="initialize"}'] == 1
    assert s["pagefs_mount_serving"] == 1
    assert scrape(port, "/ready").json() == {"status": "ready"}
    assert scrape(port, "/health").status_code == 200
    m.umount()


def test_serve_meta_serves_metrics_health_and_ready(tmp_path):
    srv = MC.Server(str(tmp_path))
    try:
        srv.client.initialize(0, 8)
        srv.client.reserve_and_allocate_page_indices(0, [["k1", ""]])
        r = requests.get(f"{srv.url}/metrics", timeout=30)
        assert r.status_code == 200
        promtool_check(r.text)
        s = samples(r.text)
        assert s["pagefs_pool_capacity_slots" + pool(0, "kv")] == 8
        assert s['pagefs_http_request_duration_seconds_count{route="reserve_and_allocate_page_indices"}'] == 1
        assert "pagefs_mount_serving" not in r.text, "serve-meta has no mount"
        assert requests.get(f"{srv.url}/ready", timeout=30).json() == {"status": "ready"}
        assert requests.get(f"{srv.url}/health", timeout=30).status_code == 200
    finally:
        srv.stop()


def test_refused_keys_and_ignored_confirms_are_counted_per_pool(tmp_path):
    """A full pool's refusals (-1) and a client's confirms of slots it was
    not given are what an operator watches under pressure: both counted."""
    srv = MC.Server(str(tmp_path))
    try:
        c = srv.client
        c.initialize(0, 4)
        got = c.reserve_and_allocate_page_indices(0, [[f"k{i}", ""] for i in range(6)])
        refused = sum(1 for _, s in got if s < 0)
        assert refused == 2, got  # 4 slots, 6 keys
        c.confirm_write(0, [["k0", -1], ["nobody", 3]], [])
        s = samples(requests.get(f"{srv.url}/metrics", timeout=30).text)
        assert s["pagefs_pool_refused_total" + pool(0, "kv")] == refused
        assert s["pagefs_pool_ignored_confirms_total" + pool(0, "kv")] == 2
        # every slot is reserved for 60 s: a key asked again is refused again
        assert c.reserve_and_allocate_page_indices(0, [["k5", ""]]) == [(False, -1)]
        s = samples(requests.get(f"{srv.url}/metrics", timeout=30).text)
        assert s["pagefs_pool_refused_total" + pool(0, "kv")] == refused + 1
    finally:
        srv.stop()


def test_a_metrics_port_in_use_fails_the_second_mount_and_leaves_the_first_serving(mount):
    port = MC.free_port()
    first = mount("--page-size", "64K", "--capacity", "1M", "--metrics", f"127.0.0.1:{port}")
    H.write_page(first.pool(0, "kv") / "keep", b"x" * 100)
    second = mount("--page-size", "64K", "--capacity", "1M", "--metrics", f"127.0.0.1:{port}",
                   start=False)
    r = second.attempt()
    assert r.returncode == 1, H.describe(r)
    assert f"cannot listen on 127.0.0.1:{port}" in r.stderr and "--metrics" in r.stderr, r.stderr
    assert not H.is_mounted(second.mnt)
    assert H.read_page(first.pool(0, "kv") / "keep") == b"x" * 100
    assert samples(scrape(port).text)["pagefs_pool_pages" + pool(0, "kv")] == 1
    first.umount()


def test_a_bad_metrics_address_is_a_usage_error(mount):
    m = mount("--page-size", "64K", start=False)
    for bad in ("nonsense", "127.0.0.1:99999", "1.2.3:80", ""):
        r = m.attempt(opts=["--metrics", bad])
        assert r.returncode == 2, H.describe(r)
        assert "--metrics" in r.stderr and "PORT" in r.stderr, r.stderr
        assert not H.is_mounted(m.mnt)


def test_scrapes_during_an_unmount_neither_fail_nor_hold_it(mount):
    port = MC.free_port()
    m = mount("--page-size", "64K", "--capacity", "1M", "--metrics", str(port))
    for i in range(8):
        H.write_page(m.pool(0, "kv") / f"p{i}", b"z" * 4096)
    stop, seen, bad = threading.Event(), [], []

    def scraper():
        while not stop.is_set():
            try:
                r = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
                seen.append(r.status_code)
                if r.status_code != 200 or not r.text.endswith("\n"):
                    bad.append((r.status_code, r.text[-200:]))
                rd = requests.get(f"http://127.0.0.1:{port}/ready", timeout=10)
                if rd.status_code not in (200, 503):
                    bad.append(("ready", rd.status_code))
            except requests.ConnectionError:
                seen.append("closed")

    threads = [threading.Thread(target=scraper) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        assert H.wait_until(lambda: seen.count(200) >= 5, timeout=30)
        r = m.umount()
        assert r.returncode == 0
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not bad, bad[:5]
    assert "closed" in seen or not H.is_mounted(m.mnt)
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5)


@pytest.mark.timeout_s(180)
def test_a_prometheus_server_scrapes_a_live_mount_and_answers_a_pool_page_count(mount):
    assert PROMETHEUS, "prometheus is missing: apt-get install prometheus (scripts/deps.sh)"
    port, prom_port = MC.free_port(), MC.free_port()
    m = mount("--page-size", "64K", "--capacity", "1M", "--metrics", f"127.0.0.1:{port}")
    for i in range(5):
        H.write_page(m.pool(1, "kv") / f"p{i}", b"q" * 512)
    d = tempfile.mkdtemp(prefix="prom-", dir=str(m.dir))
    cfg = os.path.join(d, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                "scrape_configs:\n  - job_name: pagefs\n    static_configs:\n"
                f"      - targets: ['127.0.0.1:{port}']\n")
    log = open(os.path.join(d, "prometheus.log"), "w")
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={d}/data",
         f"--web.listen-address=127.0.0.1:{prom_port}", "--web.enable-lifecycle"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        api = f"http://127.0.0.1:{prom_port}/api/v1/query"
        query = 'pagefs_pool_pages{rank="1",namespace="kv"}'
        answer = []

        def answered():
            try:
                r = requests.get(api, params={"query": query}, timeout=5).json()
            except (requests.RequestException, ValueError):
                return False
            res = r.get("data", {}).get("result", [])
            answer[:] = res
            return bool(res) and float(res[0]["value"][1]) == 5

        assert H.wait_until(answered, timeout=120, interval=0.5), (
            f"prometheus never answered {query} = 5 (last: {answer}); log:\n"
            + open(os.path.join(d, "prometheus.log")).read()[-3000:])
        assert answer[0]["metric"]["job"] == "pagefs"
        up = requests.get(api, params={"query": "up{job='pagefs'}"}, timeout=5).json()
        assert up["data"]["result"][0]["value"][1] == "1"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()
    m.umount()


def test_the_grafana_dashboard_uses_only_metric_names_a_mount_exports(mount):
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    dash = json.load(open(os.path.join(root, "docs", "grafana-pagefs.json")))
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    used = set(re.findall(r"\bpagefs_[a-z_]+", " ".join(exprs)))
    assert len(used) >= 15, used
    port = MC.free_port()
    m = mount("--page-size", "64K", "--capacity", "1M", "--metrics", str(port))
    H.write_page(m.pool(0, "kv") / "a", b"a")
    families = set(re.findall(r"^# TYPE (\S+) (\S+)", scrape(port).text, re.M))
    names = {n for n, _ in families}
    hists = {n for n, t in families if t == "histogram"}
    pg_only = open(os.path.join(root, "meta", "ops", "metrics.c")).read()
    for u in sorted(used):
        base = re.sub(r"_(bucket|count|sum)$", "", u)
        if u.startswith("pagefs_pg_"):
            assert f'"{u}"' in pg_only, f"{u}: not a shared-index metric of meta/ops/metrics.c"
            continue
        assert u in names or (base in hists and base != u), f"the dashboard uses {u}, not exported"
    m.umount()


def test_pagefs_status_url_shows_the_pools_of_a_serve_meta_daemon(tmp_path):
    srv = MC.Server(str(tmp_path))
    try:
        srv.client.initialize(4, 8, "mamba")
        r = H.run_pagefs("status", "--url", srv.url)
        assert r.returncode == 0, H.describe(r)
        assert '{"status":"ready"}' in r.stdout
        row = [l.split() for l in r.stdout.splitlines() if l.split()[:2] == ["4", "mamba"]]
        assert row and row[0][6] == "8", r.stdout  # FREE: all 8 slots
        j = json.loads(H.run_pagefs("status", "--json", "--url", srv.url).stdout)
        assert j["ready"] == {"status": "ready"}
        assert [(p["rank"], p["namespace"], p["free_slots"]) for p in j["pools"]] == [(4, "mamba", 8)]
    finally:
        srv.stop()
    r = H.run_pagefs("status", "--url", srv.url)
    assert r.returncode == 1 and "cannot connect" in r.stderr, H.describe(r)
    r = H.run_pagefs("status", "--url", "nonsense")
    assert r.returncode == 2 and "--url 'nonsense'" in r.stderr, H.describe(r)


def test_the_alert_rules_of_the_operations_guide_pass_promtool_and_use_exported_names(tmp_path):
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    doc = open(os.path.join(root, "docs", "OPERATIONS.md")).read()
    block = re.search(r"\n    groups:\n(.*?)\n\n", doc, re.S)
    assert block, "no alert rules block in docs/OPERATIONS.md"
    rules = tmp_path / "rules.yml"
    rules.write_text("\n".join(l[4:] for l in ("    groups:\n" + block.group(1)).splitlines()) + "\n")
    r = subprocess.run([PROMTOOL, "check", "rules", str(rules)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS: 11 rules found" in r.stdout, r.stdout
    exported = open(os.path.join(root, "meta", "ops", "metrics.c")).read() + \
        open(os.path.join(root, "fs", "fs_metrics.c")).read()
    for name in set(re.findall(r"\bpagefs_[a-z_]+", rules.read_text())):
        base = re.sub(r"_(bucket|count|sum)$", "", name)
        assert f'"{base}' in exported, f"the rules use {name}, which pagefs does not export"


@pytest.mark.engines
def test_the_index_engine_reports_group_commits_and_a_shared_index_its_nodes_and_lease(mount,
                                                                                   engine):
    port = MC.free_port()
    m = mount("--page-size", "64K", "--capacity", "1M", "--metrics", str(port))
    for i in range(4):
        H.write_page(m.pool(0, "kv") / f"p{i}", b"s" * 100)
    s = samples(scrape(port).text)
    assert s["pagefs_pool_pages" + pool(0, "kv")] == 4
    assert s["pagefs_store_commit_records_sum"] >= 4, "every commit is a record of a batch"
    assert s["pagefs_store_commit_duration_seconds_count"] >= 1
    assert s["pagefs_store_shared"] == (1 if engine == "postgres" else 0)
    if engine == "postgres":
        # heartbeats run every second or so: the lease age stays small
        assert H.wait_until(lambda: samples(scrape(port).text).get("pagefs_pg_nodes") == 1,
                            timeout=10)
        s = samples(scrape(port).text)
        assert s["pagefs_pg_fenced"] == 0
        assert 0 < s["pagefs_pg_lease_age_seconds"] < 10, s["pagefs_pg_lease_age_seconds"]
        assert 0 < s["pagefs_pg_feed_lag_seconds"] < 10, s["pagefs_pg_feed_lag_seconds"]
    else:
        assert "pagefs_pg_nodes" not in s
    assert scrape(port, "/ready").json() == {"status": "ready"}
    m.umount()


def test_an_index_that_fails_its_writes_makes_ready_503_and_counts_errors_until_it_answers(
        mount):
    from test_fault_injection import Faulty
    port = MC.free_port()
    f = Faulty(mount, "--page-size", "64K", "--capacity", "1M", "--metrics", str(port))
    H.write_page(f.pool / "ok", b"o" * 10)
    assert scrape(port, "/ready").status_code == 200
    f.set(f"pwrite {errno.EIO} index.db")
    with pytest.raises(OSError):
        H.write_page(f.pool / "fails", b"f" * 10)
    assert f.hits() > 0, "the fault did not reach the index"
    rd = scrape(port, "/ready")
    assert rd.status_code == 503, rd.text
    assert rd.json()["status"] == "unavailable"
    assert "index transaction failed" in rd.json()["reason"], rd.json()
    assert samples(scrape(port).text)["pagefs_store_errors_total"] >= 1
    assert scrape(port, "/health").status_code == 200, "the process still answers"
    f.set()
    H.write_page(f.pool / "again", b"a" * 10)
    assert scrape(port, "/ready").json() == {"status": "ready"}
    f.m.umount()
