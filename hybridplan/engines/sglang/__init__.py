"""SGLang's Mamba state pool and the split of free memory between it and the KV pool (0.5.23, 0.5.9).

- ``releases``: which release and the models it serves;
- ``settings``: the SGLang flags of a scenario;
- ``pool``: the state dtypes, the MambaPool, the split, the request cap;
- ``radix``: the radix strategy, state slots per request, and where states are checkpointed;
- ``logs``: the start-up log read back;
- ``engine``: the verbs of the ``Engine`` protocol.

The names below are imported from those modules on first use, so that a command loads only what it needs.
"""

from importlib import import_module

_HOME = {
    "DEFAULT": "releases", "VERSIONS": "releases", "Release": "releases", "release": "releases",
    "SglangSettings": "settings",
    "GB": "pool", "Admission": "pool", "Pool": "pool", "auto_pool_size": "pool", "cache_dtypes": "pool",
    "cap_log": "pool", "footprint": "pool", "kv_pool_bytes": "pool", "kv_tokens": "pool",
    "per_request_bytes": "pool", "request_cap": "pool",
    "checkpoint_grid": "radix", "checkpoints": "radix", "slots_per_request": "radix", "strategy": "radix",
    "ENGINE": "engine",
}
__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name in _HOME:
        return getattr(import_module(f"{__name__}.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
