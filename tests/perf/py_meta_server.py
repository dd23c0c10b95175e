#!/usr/bin/python3
"""py_meta_server.py - runs SGLang's own mini_3fs_metadata_server.py, from an
SGLang source tree given on the command line, so that http_bench.sh can load
it side by side with pagefs. SGLang's code is never copied into pagefs: this
only stubs the two SGLang modules the server imports (PoolName and the
client interface, unused by the server) and, when it is not installed,
orjson with the standard json module (compact output, as orjson writes).

    /usr/bin/python3 tests/perf/py_meta_server.py SGLANG_DIR PORT

SGLANG_DIR is the repository root (with python/sglang/...) or its python/
directory. Needs Debian's python3-fastapi and python3-uvicorn.
"""
import enum
import importlib.util
import json
import os
import sys
import types

REL = "sglang/srt/mem_cache/storage/hf3fs/mini_3fs_metadata_server.py"


def stub(name, **attrs):
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    return mod


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: py_meta_server.py SGLANG_DIR PORT")
    root, port = sys.argv[1], int(sys.argv[2])
    path = next((os.path.join(d, REL) for d in (os.path.join(root, "python"), root)
                 if os.path.isfile(os.path.join(d, REL))), None)
    if not path:
        sys.exit(f"py_meta_server.py: no {REL} under {root}")
    try:
        import orjson  # noqa: F401
    except ImportError:
        stub("orjson", loads=json.loads, OPT_NON_STR_KEYS=1, OPT_SERIALIZE_NUMPY=2,
             dumps=lambda o, option=0: json.dumps(o, separators=(",", ":")).encode())

    class PoolName(str, enum.Enum):
        KV = "kv"

        def __str__(self):
            return self.value

    for pkg in ("sglang", "sglang.srt", "sglang.srt.mem_cache", "sglang.srt.mem_cache.storage",
                "sglang.srt.mem_cache.storage.hf3fs"):
        stub(pkg, __path__=[])
    stub("sglang.srt.mem_cache.hicache_storage", PoolName=PoolName)
    stub("sglang.srt.mem_cache.storage.hf3fs.storage_hf3fs",
         Hf3fsMetadataInterface=type("Hf3fsMetadataInterface", (), {}))
    spec = importlib.util.spec_from_file_location("mini_3fs_metadata_server", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    import logging
    import uvicorn
    logging.disable(logging.INFO)
    server = mod.Hf3fsMetadataServer()
    print(f"listening on 127.0.0.1:{port}", flush=True)
    uvicorn.run(server.app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
