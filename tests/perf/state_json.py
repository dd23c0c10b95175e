#!/usr/bin/python3
"""state_json.py - writes a mini_3fs_metadata_server persistence file of N
keys in one pool ("0:kv", every page used, key_to_index as [key, index]
pairs, oldest first), each key the SHA-256 of its number as SGLang's 3FS
backend names pages. For measuring large indexes made by import-json:

    /usr/bin/python3 tests/perf/state_json.py 10000000 /tmp/state.json
    pagefs import-json /tmp/state.json --backing DIR --meta sqlite:DB --page-size 64K

The file is written as it goes (10 million keys: 770 MB, about 20 s).
"""
import hashlib
import sys


def main(n, out):
    with open(out, "w") as f:
        f.write('{"0:kv": {"num_pages": %d, "free_pages": [], "key_to_index": [' % n)
        for i in range(n):
            key = hashlib.sha256(i.to_bytes(8, "little")).hexdigest()
            f.write('%s["%s", %d]' % (", " if i else "", key, i))
        f.write("]}}")


if __name__ == "__main__":
    if len(sys.argv) != 3 or not sys.argv[1].isdigit():
        sys.exit("usage: state_json.py N FILE")
    main(int(sys.argv[1]), sys.argv[2])
