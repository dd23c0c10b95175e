#!/usr/bin/python3
"""bench_report.py - writes docs/BENCHMARKS.md from the benchmark data.

    /usr/bin/python3 scripts/bench_report.py           # regenerate the page
    /usr/bin/python3 scripts/bench_report.py --check   # exit 1 if it is stale
    ... [--root DIR]                                   # another copy of the tree

docs/bench/runs.json lists the page's sections in order. Each section is
prose, or a run with its command, machine and date, whose figures come from
one of:
  - "matrix": a file `pagefs bench --json FILE` wrote (docs/bench.json);
    the table, its units and its ratios are computed here;
  - "floors": the files of one or more runs of `pagefs bench --floors
    --json FILE`, side by side ("run 1, run 2" in each cell);
  - "multi": the files `pagefs bench --mounts LIST --json FILE` wrote;
  - "table": figures a command printed as text (pagefs bench --scale,
    --floors and --mounts tables, tests/perf/http_bench.sh, the soak),
    kept as columns and rows.
To record a new run, replace its data (rerun the command; for a "table",
paste the printed figures), update its date and machine, and rerun this
script. tests/integration/test_docs.py fails while the page is stale.
"""
import argparse
import difflib
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
RUNS = "docs/bench/runs.json"
PAGE = "docs/BENCHMARKS.md"

CONTENDERS = ["raw", "dir", "passthrough", "pagefs", "pagefs-direct"]
DATA_WORKLOADS = {"write", "read-cold", "read-hot"}
RATIOS = [("pagefs/passthrough", "pagefs", "passthrough"),
          ("pagefs/raw", "pagefs", "raw"),
          ("direct/raw", "pagefs-direct", "raw"),
          ("pagefs/dir", "pagefs", "dir")]


def size_name(b):
    for shift, unit in ((30, "G"), (20, "M"), (10, "K")):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return f"{b >> shift}{unit}"
    return str(b)


def fmt(x):
    """Three significant figures, as the bench's summary reads."""
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def metric(rec):
    """MiB/s for writes and reads, thousands of operations/s otherwise."""
    if rec["workload"] in DATA_WORKLOADS:
        return rec["mib_per_s"]
    return rec["ops_per_s"] / 1000.0


def table(columns, rows, text_columns=1):
    """A Markdown table: the first text_columns left-aligned, the rest right."""
    align = ["---" if i < text_columns else "--:" for i in range(len(columns))]
    out = ["| " + " | ".join(columns) + " |", "|" + "|".join(align) + "|"]
    for row in rows:
        if len(row) != len(columns):
            raise SystemExit(f"bench_report: row {row} has {len(row)} cells, "
                             f"the table has {len(columns)} columns")
        out.append("| " + " | ".join(str(c) for c in row) + " |")
    return out


def matrix(root, path):
    recs = json.loads((root / path).read_text())
    keys, by = [], {}
    for r in recs:
        k = (r["workload"], r["page_size"], r["clients"])
        if k not in by:
            keys.append(k)
            by[k] = {}
        by[k][r["contender"]] = r
    rows = []
    for k in keys:
        row = by[k]
        cells = [k[0], size_name(k[1]), str(k[2])]
        cells += [fmt(metric(row[c])) if c in row else "" for c in CONTENDERS]
        for _, a, b in RATIOS:
            ok = a in row and b in row and metric(row[b]) > 0
            cells.append(f"{metric(row[a]) / metric(row[b]):.2f}" if ok else "")
        rows.append(cells)
    cols = ["workload", "page", "clients"] + CONTENDERS + [r[0] for r in RATIOS]
    out = table(cols, rows, text_columns=2)
    txn = [r["records_per_txn"] for r in recs if "records_per_txn" in r]
    out.append("")
    out.append("MiB/s for write and read, thousands of operations per second "
               "otherwise; ratios within a row.")
    if txn:
        out.append(f"Group commit: {min(txn):.1f} to {max(txn):.1f} records per "
                   f"index transaction under the pagefs writes ({len(txn)} measurements).")
    return out


def cells_of_runs(runs, get, form):
    """One cell holding every run's figure: '10.9, 10.2'."""
    return ", ".join(form(get(r)) for r in runs)


def floors(root, paths):
    runs = [json.loads((root / p).read_text()) for p in paths]
    sizes = [r["page_size"] for r in runs[0]]
    for recs in runs:
        if [r["page_size"] for r in recs] != sizes:
            raise SystemExit(f"bench_report: floors runs {paths} measured different sizes")
    one = [recs[0] for recs in runs]
    us = lambda x: f"{x:.1f} us"
    out = table(["", "round trip"], [
        ["between two processes (pipes)", cells_of_runs(one, lambda r: r["pipe_rt_us"], us)],
        ["FUSE request through pagefs", cells_of_runs(one, lambda r: r["fuse_rt_us"], us)],
        ["`open` + `close` of a page through pagefs",
         cells_of_runs(one, lambda r: r["open_us"], us)]])
    rows = []
    for i, size in enumerate(sizes):
        at = [recs[i] for recs in runs]
        row = [size_name(size)]
        for key in ("pread_us", "cold_pread_us", "pwrite_us"):
            row.append(cells_of_runs(at, lambda r, k=key: r[k], fmt))
        for key in ("max_direct_read", "max_read_hot", "max_read_cold", "max_write"):
            row.append(cells_of_runs(at, lambda r, k=key: r[k], lambda x: f"{x:.2f}"))
        rows.append(row)
    out += [""] + table(["page", "`pread` us", "`pread` after `drop_caches` us", "`pwrite` us",
                         "pagefs-direct read, at most", "read-hot, at most",
                         "read-cold, at most", "write, at most"], rows)
    out += ["", "Ceilings are ratios to `raw`; a cell holds each run's figure in turn."]
    return out


def multi(root, paths):
    rows = []
    for p in paths:
        for r in json.loads((root / p).read_text()):
            rows.append([r["engine"], size_name(r["page_size"]), str(r["mounts"]),
                         str(r["clients"]), str(r["pages"]), f"{r['seconds']:.2f}",
                         f"{r['commits_per_s']:.0f}", f"{r['commits_per_s'] / r['mounts']:.0f}",
                         f"{r['records_per_txn']:.1f}"])
    return table(["index", "page", "mounts", "writers", "pages", "seconds", "commits/s",
                  "per mount", "records/txn"], rows, text_columns=2)


def section(root, sec, machines):
    out = [f"## {sec['heading']}", ""] if sec.get("level", 2) == 2 else [
        f"### {sec['heading']}", ""]
    if sec.get("text"):
        out += sec["text"] + [""]
    kind = sec.get("kind", "prose")
    if kind == "matrix":
        out += matrix(root, sec["file"]) + [""]
    elif kind == "floors":
        out += floors(root, sec["files"]) + [""]
    elif kind == "multi":
        out += multi(root, sec["files"]) + [""]
    elif kind == "table":
        out += table(sec["columns"], sec["rows"], sec.get("text_columns", 1)) + [""]
    elif kind != "prose":
        raise SystemExit(f"bench_report: unknown section kind {kind!r}")
    if sec.get("after"):
        out += sec["after"] + [""]
    if kind != "prose" or sec.get("command"):
        cmds = sec["command"] if isinstance(sec["command"], list) else [sec["command"]]
        out.append("Measured with:")
        out.append("")
        out += ["    " + c for c in cmds]
        out.append("")
        where = machines[sec["machine"]]
        files = [sec["file"]] if "file" in sec else sec.get("files", [])
        links = ", ".join(f"[{f}]({pathlib.PurePath(f).relative_to('docs').as_posix()})"
                          for f in files)
        source = (f"Figures from {links}, written by the command." if files else
                  "Figures as the command printed them." if kind == "table" else "")
        line = f"Machine: {where}. Date: {sec['date']}."
        if sec.get("conditions"):
            line += f" {sec['conditions']}"
        if source:
            line += f" {source}"
        out.append(line)
        out.append("")
    return out


def render(root):
    runs = json.loads((root / RUNS).read_text())
    out = [f"# {runs['title']}", "",
           "<!-- Generated by scripts/bench_report.py from docs/bench/runs.json "
           "and the files it names; edit those and rerun it. -->", ""]
    out += runs["intro"] + [""]
    for sec in runs["sections"]:
        out += section(root, sec, runs["machines"])
    while out and out[-1] == "":
        out.pop()
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description="Write docs/BENCHMARKS.md from docs/bench/.")
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 with a diff if the page is stale")
    ap.add_argument("--root", type=pathlib.Path, default=ROOT,
                    help="the repository to read and write (default: this one)")
    args = ap.parse_args()
    text = render(args.root)
    page = args.root / PAGE
    if args.check:
        old = page.read_text() if page.exists() else ""
        if old != text:
            sys.stderr.writelines(difflib.unified_diff(
                old.splitlines(True), text.splitlines(True), PAGE, PAGE + " (regenerated)"))
            print(f"{PAGE} is stale: run /usr/bin/python3 scripts/bench_report.py",
                  file=sys.stderr)
            return 1
        return 0
    page.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
