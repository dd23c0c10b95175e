"""pagefs: the Python client of the pagefs KV-cache filesystem.

    import pagefs
    c = pagefs.Client("/mnt/pagefs")
    c.pool(0, "kv", page_size=65536)
    c.write(0, "kv", ["k1"], [b"x" * 65536])
    c.exists(0, "kv", ["k1", "k2"])        # [True, False], one request
    buf = bytearray(65536)
    c.read_into(0, "kv", ["k1"], [buf])     # [True]

pagefs.sglang.PagefsStorage is the SGLang HiCache storage backend.
"""
from ._checksum import SOURCE as CHECKSUM_SOURCE
from .client import Client, NotPagefsError, Pool, PoolNotFoundError, encode_name

__all__ = ["Client", "NotPagefsError", "Pool", "PoolNotFoundError", "encode_name",
           "CHECKSUM_SOURCE"]
__version__ = "0.1.0"
