"""vLLM's cache arithmetic for hybrid models, release by release.

Every rule is a pure function of a ``Scenario`` and names the releases it holds for and where vLLM does it
(paths of the vLLM wheels):

- ``releases``: which release, the models it serves, its Mamba cache modes and flag defaults;
- ``settings``: the vLLM flags of a scenario;
- ``dtypes``: the cache dtypes under "auto", and one sequence's footprint;
- ``blocks``: block size, page padding, pages per request;
- ``sizing``: cache groups, blocks, concurrency, the token figure, the budget and the start-up check;
- ``prefix``: `prefix`'s part (its reuse per mode, replayed through ``prefix_cache``'s policy) and its refusal;
- ``prefix_cache``: the prefix-cache policy `replay` and `prefix` run;
- ``logs``: the start-up log read back;
- ``engine``: the verbs of the ``Engine`` protocol.

The names below are imported from those modules on first use, so that a command loads only what it needs.
"""

from importlib import import_module

_HOME = {
    "Release": "releases",
    "NEWEST": "releases",
    "KNOWN": "releases",
    "VERSIONS": "releases",
    "known_versions": "releases",
    "release": "releases",
    "VllmSettings": "settings",
    "cache_dtypes": "dtypes",
    "footprint": "dtypes",
    "model_dtype": "dtypes",
    "KERNEL_BLOCK": "blocks",
    "Layout": "blocks",
    "attention_page_per_token": "blocks",
    "layout": "blocks",
    "mamba_page": "blocks",
    "recurrent_pages": "blocks",
    "pages_per_request": "blocks",
    "CacheGroup": "sizing",
    "Capacity": "sizing",
    "available_kv_memory_log": "sizing",
    "cache_groups": "sizing",
    "capacity": "sizing",
    "kv_budget": "sizing",
    "requested_memory": "memory",
    "memory": "memory",
    "ENGINE": "engine",
}
__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name in _HOME:
        return getattr(import_module(f"{__name__}.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
