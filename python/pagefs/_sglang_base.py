"""A small stand-in for SGLang's HiCache storage interface
(sglang/srt/mem_cache/hicache_storage.py), written from its documented
behaviour, so pagefs.sglang can be imported and tested where SGLang is not
installed. pagefs.sglang uses SGLang's own classes whenever SGLang imports.
"""
from dataclasses import dataclass
from enum import Enum
from typing import Any, List, Optional


@dataclass
class HiCacheStorageConfig:
    tp_rank: int
    tp_size: int
    pp_rank: int = 0
    pp_size: int = 1
    attn_cp_rank: int = 0
    attn_cp_size: int = 1
    is_mla_model: bool = False
    enable_storage_metrics: bool = False
    is_page_first_layout: bool = True
    model_name: Optional[str] = None
    dp_rank: int = 0
    dp_size: int = 1
    tp_lcm_size: Optional[int] = None
    should_split_heads: bool = False
    extra_config: Optional[dict] = None


@dataclass
class HiCacheStorageExtraInfo:
    prefix_keys: Optional[List[str]] = None
    extra_info: Optional[dict] = None


class PoolName(str, Enum):
    KV = "kv"
    MAMBA = "mamba"
    SWA = "swa"
    INDEXER = "indexer"
    DRAFT = "draft"

    def __str__(self):
        return self.value


class PoolHitPolicy(str, Enum):
    ALL_PAGES = "all_pages"
    TRAILING_PAGES = "trailing_pages"


@dataclass
class PoolTransfer:
    name: Any
    host_indices: Any = None
    device_indices: Any = None
    keys: Optional[List[str]] = None
    hit_policy: PoolHitPolicy = PoolHitPolicy.ALL_PAGES
    nodes_to_load: Optional[List[Any]] = None
    indices_from_pool: Any = None


@dataclass
class PoolTransferResult:
    kv_hit_pages: int
    extra_pool_hit_pages: dict


class HiCacheStorage:
    def register_mem_pool_host(self, mem_pool_host):
        self.mem_pool_host = mem_pool_host

    def register_mem_host_pool_v2(self, host_pool, host_pool_name):
        if not hasattr(self, "registered_pools"):
            self.registered_pools = {}
        self.registered_pools[host_pool_name] = host_pool

    def batch_exists(self, keys, extra_info=None):
        for i, key in enumerate(keys):
            if not self.exists(key):
                return i
        return len(keys)

    def clear(self):
        pass

    def get_stats(self):
        return None
