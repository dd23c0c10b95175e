"""scripts/layers.py finds what breaks the layering of meta/ (base < store
< index < ... < top): upward includes and calls, cycles across layers,
unprefixed functions in a layer's header, a layer's function defined in
another layer, headers with no layer. Each test
writes a small C tree in tmp_path and runs the script on it. Needs no mount
and no pagefs binary; about a second."""
import json
import pathlib
import subprocess
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "layers.py"
PYTHON = "/usr/bin/python3"


@pytest.fixture(scope="session", autouse=True)
def _binary_exists():
    """Overrides conftest's check for PAGEFS_BIN: nothing here runs pagefs."""


def run(root, *args):
    return subprocess.run([PYTHON, str(SCRIPT), "--root", str(root), *args],
                          capture_output=True, text=True, timeout=60)


def tree(tmp_path, files):
    """Writes {path under meta/: C text} and returns the root."""
    for rel, text in files.items():
        path = tmp_path / "meta" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path


def counts(root):
    r = run(root, "--json")
    return r.returncode, json.loads(r.stdout), r.stderr


STORE_H = """\
    #ifndef STORE_H
    #define STORE_H
    #include "meta/meta.h"
    #include <stdint.h>
    struct store;
    int store_get(struct store *s, uint32_t id);
    int store_put(struct store *s, uint32_t id) __attribute__((warn_unused_result));
    static inline int row_size(void)
    {
    	return 8;
    }
    #endif
"""

STORE_C = """\
    #include "store.h"
    static int check(uint32_t id)
    {
    	return id > 4;
    }
    int store_get(struct store *s, uint32_t id)
    {
    	return check(id);
    }
    int store_put(struct store *s, uint32_t id)
    {
    	return store_get(s, id) + row_size();
    }
    int store_drop(void)
    {
    	return 0;
    }
"""

INDEX_H = """\
    #include "meta/store/store.h"
    int index_find(int key);
"""

INDEX_C = """\
    #include "meta/index/index.h"
    #include "../store/store.h"
    #include <string.h>
    struct hooks {
    	int (*put)(struct store *, uint32_t);
    };
    static const struct hooks hooks = {
    	.put = store_put,
    };
    int index_find(int key)
    {
    	/* store_drop(key) is not called: a comment */
    	const char *why = "store_drop";
    	return store_get(0, key) + (why != 0);
    }
    struct store_drop {
    	int store_drop;
    };
    int index_peek(struct store_drop *d)
    {
    	return d->store_drop + (int)sizeof(struct store_drop);
    }
"""

META_H = """\
    struct meta;
    int meta_open(struct meta **m);
"""


def clean_files():
    return {"meta.h": META_H, "store/store.h": STORE_H, "store/store.c": STORE_C,
            "index/index.h": INDEX_H, "index/index.c": INDEX_C}


def test_a_clean_two_layer_tree_passes_with_its_counts(tmp_path):
    code, c, err = counts(tree(tmp_path, clean_files()))
    assert code == 0, err
    assert c["files"] == {"base": 1, "store": 2, "index": 2, "record": 0, "ops": 0,
                          "cluster": 0, "keys": 0, "top": 0}
    # store.h->meta.h, store.c->store.h, index.h->store.h, index.c->index.h, index.c->store.h
    assert c["include_arrows"] == 5
    # index.c -> store.c: index_find calls store_get, <hooks> takes store_put; store_drop
    # in a comment, a string, a struct tag and a member is no arrow
    assert c["call_arrows"] == {"file_pairs": 1, "function_pairs": 2}
    assert c["address_taken"] == {"file_pairs": 1, "function_pairs": 1}
    assert c["upward_include_arrows"] == 0
    assert c["upward_call_arrows"] == {"file_pairs": 0, "function_pairs": 0}
    assert c["cross_layer_cycles"] == 0 and c["violations"] == 0

    r = run(tmp_path, "--list")
    assert r.returncode == 0, r.stdout
    assert "call index->store meta/index/index.c:14 index_find -> meta/store/store.c store_get" \
        in r.stdout
    assert "<hooks> -> meta/store/store.c store_put  (address taken)" in r.stdout
    assert "include index->store meta/index/index.c:2 -> meta/store/store.h" in r.stdout
    assert "upward call arrows          0 file pairs (0 function pairs)" in r.stdout


def test_an_upward_call_names_the_caller_and_the_callee(tmp_path):
    files = clean_files()
    files["store/store.c"] += textwrap.dedent("""\
        int index_find(int key);
        int store_scan(void)
        {
        	return index_find(3);
        }
    """)
    r = run(tree(tmp_path, files))
    assert r.returncode == 1, r.stdout
    assert ("meta/store/store.c:21: upward call: store_scan calls index_find in "
            "meta/index/index.c (store -> index)") in r.stdout
    code, c, _ = counts(tmp_path)
    assert c["upward_call_arrows"] == {"file_pairs": 1, "function_pairs": 1}


def test_a_function_taken_as_a_pointer_upward_is_reported_too(tmp_path):
    files = clean_files()
    files["store/store.c"] += "int index_find(int key);\nvoid *store_hook(void)\n{\n" \
                              "\treturn (void *)index_find;\n}\n"
    r = run(tree(tmp_path, files))
    assert r.returncode == 1
    assert "upward call: store_hook takes the address of index_find in meta/index/index.c" \
        in r.stdout


def test_an_upward_include_is_reported_with_its_line(tmp_path):
    files = clean_files()
    files["store/store.c"] = '#include "../index/index.h"\n' + textwrap.dedent(STORE_C)
    r = run(tree(tmp_path, files))
    assert r.returncode == 1, r.stdout
    assert ("meta/store/store.c:1: upward include of meta/index/index.h (store -> index)"
            in r.stdout)
    assert counts(tmp_path)[1]["upward_include_arrows"] == 1


@pytest.mark.parametrize("storage", ["static ", ""])
def test_a_static_function_of_the_same_name_in_a_lower_file_makes_no_arrow(tmp_path, storage):
    files = clean_files()
    files["store/store.c"] += textwrap.dedent(f"""\
        {storage}int index_find(int key)
        {{
        	return key;
        }}
        int store_scan(void)
        {{
        	return index_find(3);
        }}
    """)
    code, c, _ = counts(tree(tmp_path, files))
    if storage:  # store_scan calls its own file's index_find
        assert code == 0
        assert c["call_arrows"]["function_pairs"] == 2
    else:  # two public index_find: the call could reach index.c's, and index.c's store.c's
        assert code == 1
        assert c["upward_call_arrows"]["function_pairs"] == 1


def test_a_cycle_across_layers_is_reported_and_one_within_a_layer_is_not(tmp_path):
    files = clean_files()
    files["store/pages.c"] = textwrap.dedent("""\
        int store_get(void *s, unsigned id);
        int store_pages(void)
        {
        	return store_get(0, 1);
        }
        int store_back(void)
        {
        	return 0;
        }
    """)
    files["store/store.c"] += "int store_pages(void);\nint store_count(void)\n{\n" \
                              "\treturn store_pages();\n}\n"
    code, c, err = counts(tree(tmp_path, files))
    assert code == 0, err  # store.c <-> pages.c: one layer
    files["index/index.c"] += "int index_up(void)\n{\n\treturn store_back();\n}\n"
    files["store/pages.c"] += "int index_find(int);\nint store_down(void)\n{\n" \
                              "\treturn index_find(1);\n}\n"
    r = run(tree(tmp_path, files))
    assert r.returncode == 1
    assert ("meta/index/index.c: cycle across layers: meta/index/index.c (index), "
            "meta/store/pages.c (store)") in r.stdout
    assert "upward call: store_down calls index_find" in r.stdout
    assert counts(tmp_path)[1]["cross_layer_cycles"] == 1


def test_a_function_without_its_layers_prefix_in_a_header_is_reported(tmp_path):
    files = clean_files()
    files["store/store.h"] = files["store/store.h"].replace(
        "    #endif", "    int fetch_row(int id);\n    static int local_row(int id);\n    #endif")
    files["meta.h"] += "int open_pool(int rank);\ntypedef int (*meta_cb)(void *arg);\n"
    r = run(tree(tmp_path, files))
    assert r.returncode == 1
    problems = [line for line in r.stdout.splitlines() if "does not start" in line]
    assert problems == [
        "meta/meta.h:3: open_pool is declared in a base header but does not start with meta_",
        "meta/store/store.h:12: fetch_row is declared in a store header but does not start "
        "with store_"]


def test_a_function_a_layer_declares_but_another_layer_defines_is_reported(tmp_path):
    """index.h declares index_tidy, and a file of the store layer defines it:
    the name says index, the code lives elsewhere."""
    files = clean_files()
    files["index/index.h"] += "void index_tidy(void);\n"
    files["store/store.c"] += "void index_tidy(void)\n{\n}\n"
    r = run(tree(tmp_path, files))
    assert r.returncode == 1, r.stdout
    assert "meta/index/index.h:3: index_tidy is declared in a index header but defined in " \
        "meta/store/store.c (store)" in r.stdout


def test_a_header_in_meta_with_no_layer_is_an_error(tmp_path):
    files = clean_files()
    files["internal.h"] = "struct page;\n"
    files["open.c"] = '#include "meta/internal.h"\nint meta_open(void **m)\n{\n' \
                      "\treturn index_find(1);\n}\n"
    r = run(tree(tmp_path, files))
    assert r.returncode == 1
    assert "meta/internal.h: no layer; add it to HEADER_LAYER in scripts/layers.py" in r.stdout
    assert "top 1" in r.stdout


def test_a_usage_error_exits_2(tmp_path):
    assert run(tmp_path).returncode == 2
    assert run(ROOT, "--no-such-option").returncode == 2


def test_the_script_reads_the_real_tree():
    r = run(ROOT, "--json")
    assert r.returncode in (0, 1), r.stderr
    c = json.loads(r.stdout)
    assert sum(c["files"].values()) > 20
    assert c["call_arrows"]["function_pairs"] > 100


@pytest.mark.skipif(not (ROOT / "meta" / "index").is_dir(),
                    reason="meta/ is not in layer folders yet")
def test_meta_tree_is_layered():
    r = run(ROOT)
    assert r.returncode == 0, r.stdout
