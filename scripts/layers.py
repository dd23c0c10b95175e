#!/usr/bin/python3
"""layers.py - checks that the C library in meta/ is layered.

    /usr/bin/python3 scripts/layers.py            # counts; exit 1 on a violation
    ... --list                                    # and every arrow
    ... --json                                    # the counts as JSON (the rest to stderr)
    ... --root DIR                                # another copy of the tree

The layers, bottom to top, are LAYERS below; a file may include and call
only its own layer or lower ones. meta/<layer>/*.c and *.h belong to that
layer, meta/*.c to "top", meta/*.h to the layer HEADER_LAYER gives them.
Arrows:
  - include: an #include "..." of a meta/ header ("meta/x.h" from the
    repository root, "x.h" and "../x.h" from the including file's folder);
    system includes are not followed;
  - call: an identifier in a function body (or a file-scope initializer)
    that names a non-static function defined in another meta/ file. A
    name taken as a pointer (a hook table) counts too and is also counted
    apart as "address taken". A static function shadows the others in
    its own file.
Violations: an upward include or call arrow; a cycle of files (include
and call arrows) that spans two or more layers; a function declared in a
layer's header whose name lacks the layer's prefix (PREFIXES), or that a
file of another layer defines; a header in
meta/ missing from HEADER_LAYER; a file in a folder that is not a layer.
The C is read by a small tokenizer, not a compiler: both sides of an
#if are read, macros are not expanded (a call hidden in a macro makes no
arrow), and a local variable that has a function's name is taken for it.
"""
import argparse
import json
import pathlib
import re
import sys

LAYERS = ["base", "store", "index", "record", "ops", "cluster", "keys", "top"]
FOLDERS = LAYERS[:-1]  # meta/<folder>/; "top" is meta/ itself

HEADER_LAYER = {  # headers directly in meta/
    "meta.h": "base",  # the public API's types and declarations
    "log.h": "base", "hash.h": "base", "hist.h": "base", "lock.h": "base", "counters.h": "base",
    "store.h": "store", "store_pg.h": "store", "rec.h": "store",
    "index.h": "index",
    "record.h": "record",
    "ops.h": "ops", "metrics.h": "ops",
    "cluster.h": "cluster",
    "keys.h": "keys",
}

PREFIXES = {  # by header name first, then by layer; a missing key is no check
    "meta.h": ("meta_",),
    "store": ("store_",), "index": ("index_",), "record": ("record_",),
    "ops": ("ops_", "meta_"), "cluster": ("cluster_",), "keys": ("keys_",),
}

ROOT = pathlib.Path(__file__).resolve().parent.parent

TOKEN = re.compile(r"""
    (?P<pp>^[ \t]*\#(?:\\\n|/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|[^\n])*)
  | (?P<comment>/\*.*?\*/|//[^\n]*)
  | (?P<str>"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')
  | (?P<ident>[A-Za-z_]\w*)
  | (?P<num>\.?\d(?:[eEpP][+-]|[\w.])*)
  | (?P<op>->|\S)
  | \s+""", re.S | re.M | re.X)
INCLUDE = re.compile(r'#\s*include\s*"([^"]+)"')
KEYWORDS = set("""auto break case char const continue default do double else enum extern
float for goto if inline int long register restrict return short signed sizeof static struct
switch typedef union unsigned void volatile while _Bool _Noreturn _Static_assert _Alignof
__attribute__ __typeof__ typeof bool""".split())


class Source:
    """One file of meta/: its layer, includes, functions and declarations."""

    def __init__(self, rel, layer):
        self.rel, self.layer = rel, layer
        self.includes = []  # (quoted path, line)
        self.defs = []  # (name, is_static, body tokens)
        self.decls = []  # (name, head tokens, line): prototypes
        self.statics = set()  # names declared or defined static here
        self.inits = []  # (variable, initializer tokens) at file scope


def tokenize(text, src):
    """Returns the tokens (kind, text, line) of text; records src's includes."""
    toks, line = [], 1
    for m in TOKEN.finditer(text):
        kind, s = m.lastgroup, m.group()
        if kind == "pp":
            inc = INCLUDE.match(s.strip())
            if inc:
                src.includes.append((inc.group(1), line))
        elif kind in ("str", "ident", "num", "op"):
            toks.append((kind, '""' if kind == "str" else s, line))
        line += s.count("\n")
    return toks


def closing(toks, i, op, cl):
    """The index of the token closing the op at toks[i] (len(toks) if none)."""
    depth = 0
    for j in range(i, len(toks)):
        depth += (toks[j][1] == op) - (toks[j][1] == cl)
        if depth == 0:
            return j
    return len(toks)


def declared_name(head):
    """The function a top-level head declares or defines, or None."""
    depth = 0  # a name inside parentheses is a parameter, an attribute or a pointer
    for (kind, s, _), nxt in zip(head, head[1:]):
        depth += (s == "(") - (s == ")")
        if kind == "ident" and depth == 0 and s not in KEYWORDS and nxt[1] == "(":
            return s
    return None


def parse(src, toks):
    """Splits the top level of a file into definitions, prototypes and initializers."""
    head, init, i = [], [], 0
    while i < len(toks):
        s = toks[i][1]
        texts = [t[1] for t in head]
        if s == "{":
            end = closing(toks, i, "{", "}")
            name = declared_name(head)
            if texts and texts[-1] == ")" and "=" not in texts and name:
                src.defs.append((name, "static" in texts, toks[i + 1:end]))
                if "static" in texts:
                    src.statics.add(name)
                head, init = [], []
            else:
                if "=" in texts:
                    init += toks[i + 1:end]
                head.append(("op", "{}", toks[i][2]))
            i = end + 1
            continue
        if s == ";":
            finish_statement(src, head, texts, init)
            head, init = [], []
        else:
            head.append(toks[i])
        i += 1


def finish_statement(src, head, texts, init):
    if "=" in texts:
        eq = texts.index("=")
        var = next((t[1] for t in reversed(head[:eq]) if t[0] == "ident"), "?")
        src.inits.append((var, head[eq + 1:] + init))
    elif texts and texts[0] != "typedef":
        name = declared_name(head)
        if name:
            src.decls.append((name, texts, head[0][2]))
            if "static" in texts:
                src.statics.add(name)


def layer_of(rel, problems):
    """The layer of meta/ file rel (a path relative to meta/), or None."""
    parts = rel.parts
    if len(parts) == 1 and rel.suffix == ".c":
        return "top"
    if len(parts) == 1:
        if HEADER_LAYER.get(rel.name) not in LAYERS:
            problems.append(f"meta/{rel}: no layer; add it to HEADER_LAYER in scripts/layers.py")
            return None
        return HEADER_LAYER[rel.name]
    if parts[0] in FOLDERS and len(parts) == 2:
        return parts[0]
    problems.append(f"meta/{rel}: not in a layer folder (meta/{{{','.join(FOLDERS)}}}/)")
    return None


def load(root, problems):
    """Reads every .c and .h under root/meta; returns {"meta/x": Source}."""
    files = {}
    meta = root / "meta"
    for path in sorted(p for p in meta.rglob("*") if p.suffix in (".c", ".h") and p.is_file()):
        rel = path.relative_to(meta)
        src = Source(f"meta/{rel.as_posix()}", layer_of(rel, problems))
        parse(src, tokenize(path.read_text(errors="replace"), src))
        files[src.rel] = src
    return files


def resolve(root, src, quoted):
    """The meta/ file an #include "quoted" in src names, or None."""
    here = (root / src.rel).parent
    for cand in (here / quoted, root / quoted):
        try:
            rel = cand.resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            continue
        if cand.is_file():
            return rel
    return None


def include_arrows(root, files):
    """{(includer, header): first line} for includes of meta/ headers."""
    arrows = {}
    for src in files.values():
        for quoted, line in src.includes:
            target = resolve(root, src, quoted)
            if target in files and target != src.rel:
                arrows.setdefault((src.rel, target), line)
    return arrows


def references(toks):
    """Yields (name, line, taken) for each identifier that may name a function."""
    for k, (kind, s, line) in enumerate(toks):
        before = toks[k - 1][1] if k else ""
        if kind != "ident" or s in KEYWORDS or before in (".", "->", "struct", "union", "enum"):
            continue
        taken = k + 1 >= len(toks) or toks[k + 1][1] != "("
        yield s, line, taken


def call_arrows(files):
    """{(file, fn, file2, fn2): [first line, taken]} for references across files."""
    public = {}
    for src in files.values():
        for name, static, _ in src.defs:
            if not static and name not in src.statics:
                public.setdefault(name, []).append(src.rel)
    arrows = {}
    for src in files.values():
        bodies = [(n, b) for n, _, b in src.defs] + [(f"<{v}>", b) for v, b in src.inits]
        for caller, body in bodies:
            for name, line, taken in references(body):
                if name in src.statics:
                    continue
                for target in public.get(name, ()):
                    if target != src.rel:
                        arrow = arrows.setdefault((src.rel, caller, target, name), [line, False])
                        arrow[1] |= taken
    return arrows


def cycles(nodes, edges):
    """The strongly connected components of more than one node."""
    succ = {n: set() for n in nodes}
    for a, b in edges:
        succ[a].add(b)
    reach = {}
    for n in nodes:  # the graph is small: a search from every node
        seen, todo = set(), [n]
        while todo:
            for m in succ[todo.pop()] - seen:
                seen.add(m)
                todo.append(m)
        reach[n] = seen
    comps = {frozenset(m for m in reach[n] if n in reach[m]) | {n} for n in nodes}
    return sorted(sorted(c) for c in comps if len(c) > 1)


def upward(files, a, b):
    """Whether an arrow from file a to file b goes up."""
    la, lb = files[a].layer, files[b].layer
    return bool(la and lb) and LAYERS.index(la) < LAYERS.index(lb)


def prefix_problems(files):
    """A violation for each function a layer's header declares without its
    prefix, or that a file of another layer defines."""
    out = []
    defined = {name: src for src in files.values() for name, static, _ in src.defs
               if not static}
    for src in files.values():
        if not src.rel.endswith(".h") or not src.layer:
            continue
        top_level = src.rel.count("/") == 1  # PREFIXES may name a header of meta/
        prefixes = PREFIXES.get(src.rel[5:] if top_level else None) or PREFIXES.get(src.layer)
        for name, texts, line in src.decls:
            if prefixes and "static" not in texts and "inline" not in texts \
                    and not name.startswith(prefixes):
                out.append(f"{src.rel}:{line}: {name} is declared in a {src.layer} header "
                           f"but does not start with {' or '.join(prefixes)}")
            home = defined.get(name)
            if home and home.layer != src.layer and src.layer != "base" \
                    and "static" not in texts:
                out.append(f"{src.rel}:{line}: {name} is declared in a {src.layer} header "
                           f"but defined in {home.rel} ({home.layer})")
    return out


def list_arrows(files, incs, calls, problems):
    """The lines of --list; appends a violation for each upward arrow."""
    def lay(f):
        return files[f].layer or "?"
    lines = []
    for (a, b), line in sorted(incs.items()):
        up = upward(files, a, b)
        lines.append(f"include {lay(a)}->{lay(b)} {a}:{line} -> {b}" + "  UPWARD" * up)
        if up:
            problems.append(f"{a}:{line}: upward include of {b} ({lay(a)} -> {lay(b)})")
    for (a, fa, b, fb), (line, taken) in sorted(calls.items()):
        up = upward(files, a, b)
        lines.append(f"call {lay(a)}->{lay(b)} {a}:{line} {fa} -> {b} {fb}"
                     + "  (address taken)" * taken + "  UPWARD" * up)
        if up:
            verb = "takes the address of" if taken else "calls"
            problems.append(f"{a}:{line}: upward call: {fa} {verb} {fb} in {b} "
                            f"({lay(a)} -> {lay(b)})")
    return lines


def pairs(calls):
    """{"file_pairs": n, "function_pairs": n} of a set of call arrows."""
    return {"file_pairs": len({(a, b) for a, _, b, _ in calls}), "function_pairs": len(calls)}


def check(root):
    """Returns (counts, violations, arrow lines) for the tree at root."""
    problems = []
    files = load(root, problems)
    incs, calls = include_arrows(root, files), call_arrows(files)
    lines = list_arrows(files, incs, calls, problems)
    graph = set(incs) | {(a, b) for a, _, b, _ in calls}
    crossing = [c for c in cycles(list(files), graph)
                if len({files[f].layer for f in c} - {None}) > 1]
    for comp in crossing:
        problems.append(f"{comp[0]}: cycle across layers: "
                        + ", ".join(f"{f} ({files[f].layer})" for f in comp))
    problems += prefix_problems(files)
    return {
        "files": {layer: sum(s.layer == layer for s in files.values()) for layer in LAYERS},
        "include_arrows": len(incs),
        "call_arrows": pairs(calls),
        "address_taken": pairs({k for k, v in calls.items() if v[1]}),
        "upward_include_arrows": sum(upward(files, a, b) for a, b in incs),
        "upward_call_arrows": pairs({k for k in calls if upward(files, k[0], k[2])}),
        "cross_layer_cycles": len(crossing),
        "violations": len(problems),
    }, problems, lines


def table(counts):
    def pair(d):
        return f"{d['file_pairs']} file pairs ({d['function_pairs']} function pairs)"
    per_layer = ", ".join(f"{k} {v}" for k, v in counts["files"].items())
    rows = [("files (.c, .h) per layer", per_layer),
            ("include arrows", counts["include_arrows"]),
            ("call arrows", pair(counts["call_arrows"])),
            ("  of which address taken", pair(counts["address_taken"])),
            ("upward include arrows", counts["upward_include_arrows"]),
            ("upward call arrows", pair(counts["upward_call_arrows"])),
            ("cross-layer cycles", counts["cross_layer_cycles"]),
            ("violations", counts["violations"])]
    return "\n".join(f"{k:<27} {v}" for k, v in rows)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Checks the layering of meta/ (" +
                                 " < ".join(LAYERS) + ").")
    ap.add_argument("--root", type=pathlib.Path, default=ROOT,
                    help="the tree (default: %(default)s)")
    ap.add_argument("--list", action="store_true", help="print every arrow")
    ap.add_argument("--json", action="store_true", help="print the counts as JSON")
    args = ap.parse_args(argv)
    if not (args.root / "meta").is_dir():
        ap.error(f"{args.root}/meta is not a directory")
    counts, problems, lines = check(args.root)
    if args.list:
        print("\n".join(lines), file=sys.stderr if args.json else sys.stdout)
    print(json.dumps(counts, indent=2) if args.json else table(counts))
    for p in problems:
        print(p, file=sys.stderr if args.json else sys.stdout)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
