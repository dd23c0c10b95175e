"""The documentation stays true to the repository: docs/BENCHMARKS.md is
what scripts/bench_report.py makes of the bench data in docs/bench/ (no
figure typed into the page), every scripts/... and docs/... path the README
names exists, every relative link in the README and docs/ reaches a file,
and no page tells the history of the work (git keeps that). Needs no mount;
about a second."""
import json
import pathlib
import re
import shutil
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
REPORT = ROOT / "scripts" / "bench_report.py"
PYTHON = "/usr/bin/python3"

# Documents that branches merged alongside this one add; the README links
# them already. Empty this set once they are all in the tree.
ADDED_BY_OTHER_BRANCHES: set[str] = set()

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Every file of the tree a reader reads: pages, code and its comments,
# tests and scripts.
SOURCES = sorted(p for d in ("meta", "fs", "serve", "tools", "python", "tests", "scripts",
                             "dist", "man", "cmake")
                 for p in (ROOT / d).rglob("*")
                 if p.is_file() and p.suffix in {".c", ".h", ".py", ".sh", ".md", ".cmake",
                                                 ".service", ".8", ".in", ""}
                 and "corpus" not in p.parts)


def run_report(*args):
    return subprocess.run([PYTHON, str(REPORT), *args], capture_output=True, text=True,
                          timeout=60)


def test_the_benchmarks_page_is_what_the_script_makes_of_the_bench_data():
    r = run_report("--check")
    assert r.returncode == 0, r.stderr[-5000:]


def test_a_figure_changed_in_the_bench_json_changes_the_page(tmp_path):
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    bench = tmp_path / "docs" / "bench.json"
    recs = json.loads(bench.read_text())
    rec = next(x for x in recs if x["workload"] == "write" and x["contender"] == "pagefs")
    rec["mib_per_s"] = 4321.0
    bench.write_text(json.dumps(recs))
    stale = run_report("--check", "--root", str(tmp_path))
    assert stale.returncode == 1 and "4321" in stale.stderr
    assert run_report("--root", str(tmp_path)).returncode == 0
    assert "| 4321 |" in (tmp_path / "docs" / "BENCHMARKS.md").read_text()
    assert run_report("--check", "--root", str(tmp_path)).returncode == 0


def missing(paths):
    return sorted(p for p in paths
                  if not (ROOT / p).exists() and p not in ADDED_BY_OTHER_BRANCHES)


def test_every_script_and_document_the_readme_names_exists():
    text = (ROOT / "README.md").read_text()
    named = {m.rstrip(".,:;)") for m in re.findall(r"\b(?:scripts|docs)/[\w./-]*\w", text)}
    assert "scripts/run.sh" in named and "scripts/test.sh" in named
    assert not missing(named), "README names paths that do not exist"


def anchors(page):
    """The anchors GitHub makes of a Markdown page's headings."""
    out = set()
    for heading in re.findall(r"^#+ (.+)$", page.read_text(), re.MULTILINE):
        out.add(re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-"))
    return out


def test_every_relative_link_in_the_readme_and_docs_reaches_a_file_and_heading():
    bad = []
    for page in PAGES:
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            path = (page.parent / target).resolve() if target else page
            rel = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else target
            if rel in ADDED_BY_OTHER_BRANCHES and not path.exists():
                continue
            if not path.exists():
                bad.append(f"{page.relative_to(ROOT)}: {target} does not exist")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                bad.append(f"{page.relative_to(ROOT)}: {target}#{anchor} names no heading")
    assert not bad, bad


HISTORY = re.compile(
    r"\b(?:(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|"
    r"twelfth|thirteenth|\d+(?:st|nd|rd|th)|this|last|earlier|previous)"
    r"(?:'s)? session|session's (?:first|last|final) binary|found (?:it )?by a probe|"
    r"used to be (?:published|refused|evicted|lost)|before the fix|after the fix)\b",
    re.IGNORECASE)


def test_no_page_tells_the_history_of_the_work():
    told = [f"{page.relative_to(ROOT)}:{n}: {line.strip()}"
            for page in PAGES + [p for p in SOURCES if p.name != "test_docs.py"]
            for n, line in enumerate(page.read_text(errors="replace").splitlines(), 1)
            if HISTORY.search(line)]
    assert not told, "\n".join(told)


def test_the_history_check_reads_code_comments(tmp_path):
    """The check above reads C comments too: a sentence of the work's
    history in a comment is found."""
    assert HISTORY.search("/* This was broken before the fix; see the last session's log. */")
    assert any(p.suffix == ".c" and p.parts[-3] == "meta" for p in SOURCES)


# What `pagefs bench --floors --json` and `--mounts --json` write
# (tools/cli_bench_floor.c, tools/cli_bench_multi.c), byte for byte.
FLOORS_RUN = ('[{{"workload": "floor", "page_size": 65536, "pipe_rt_us": {pipe}, '
              '"fuse_rt_us": 29.40, "open_us": 64.80, "pread_us": {pread}, '
              '"cold_pread_us": 11.00, "pwrite_us": 16.90, "max_direct_read": 0.1000, '
              '"max_read_hot": 0.0990, "max_read_cold": 0.0980, "max_write": 0.1200}},\n'
              ' {{"workload": "floor", "page_size": 1048576, "pipe_rt_us": {pipe}, '
              '"fuse_rt_us": 29.40, "open_us": 64.80, "pread_us": 74.10, '
              '"cold_pread_us": 75.00, "pwrite_us": 221.50, "max_direct_read": 0.4400, '
              '"max_read_hot": 0.3700, "max_read_cold": 0.3600, "max_write": 0.5400}}]\n')
MULTI_RUN = ('[{"workload": "multi-write", "engine": "postgres", "page_size": 65536, '
             '"mounts": 1, "clients": 2, "pages": 3000, "seconds": 1.784, '
             '"commits_per_s": 1682.0, "records_per_txn": 1.00},\n'
             ' {"workload": "multi-write", "engine": "postgres", "page_size": 65536, '
             '"mounts": 2, "clients": 4, "pages": 6000, "seconds": 2.833, '
             '"commits_per_s": 2118.0, "records_per_txn": 1.02}]\n')


def test_floors_and_mounts_json_of_the_bench_become_tables(tmp_path):
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    bench = tmp_path / "docs" / "bench"
    (bench / "floors-1.json").write_text(FLOORS_RUN.format(pipe="25.30", pread="10.90"))
    (bench / "floors-2.json").write_text(FLOORS_RUN.format(pipe="25.40", pread="10.20"))
    (bench / "mounts.json").write_text(MULTI_RUN)
    runs = json.loads((bench / "runs.json").read_text())
    common = {"machine": "vm", "date": "2026-12-02"}
    runs["sections"] += [
        {"heading": "Floors from JSON", "kind": "floors", "command": "pagefs bench --floors",
         "files": ["docs/bench/floors-1.json", "docs/bench/floors-2.json"], **common},
        {"heading": "Mounts from JSON", "kind": "multi", "command": "pagefs bench --mounts 1,2",
         "files": ["docs/bench/mounts.json"], **common}]
    (bench / "runs.json").write_text(json.dumps(runs))
    r = run_report("--root", str(tmp_path))
    assert r.returncode == 0, r.stderr
    page = (tmp_path / "docs" / "BENCHMARKS.md").read_text()
    for row in ("| between two processes (pipes) | 25.3 us, 25.4 us |",
                "| 64K | 10.9, 10.2 | 11.0, 11.0 | 16.9, 16.9 | 0.10, 0.10 |",
                "| postgres | 64K | 1 | 2 | 3000 | 1.78 | 1682 | 1682 | 1.0 |",
                "| postgres | 64K | 2 | 4 | 6000 | 2.83 | 2118 | 1059 | 1.0 |",
                "[docs/bench/floors-1.json](bench/floors-1.json)"):
        assert row in page, f"{row!r} not in the page"
