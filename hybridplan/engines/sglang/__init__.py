"""SGLang's Mamba state pool and the split of free memory between it and the KV pool, release by release
(every 0.5.x with a Mamba pool, 0.5.2 to 0.5.23).

- ``releases``: which release, the models it serves, its radix strategies and slots, the band of each rule;
- ``settings``: the SGLang flags of a scenario;
- ``pool``: the state dtypes, the MambaPool, the speculative buffers, the split, the request cap;
- ``radix``: the strategy a scenario runs, the grid states are checkpointed on, `prefix`'s part and refusal;
- ``radix_cache``: the radix-cache policy `replay` and `prefix` run;
- ``hicache``: the hierarchical cache's host pools per release, its refusals; ``hicache_tree``: the host tier
  `replay` runs behind ``radix_cache``;
- ``logs``: the start-up log read back;
- ``engine``: the verbs of the ``Engine`` protocol.

The names below are imported from those modules on first use, so that a command loads only what it needs.
"""

from importlib import import_module

_HOME = {
    "DEFAULT": "releases",
    "VERSIONS": "releases",
    "Release": "releases",
    "release": "releases",
    "known_versions": "releases",
    "SglangSettings": "settings",
    "GB": "pool",
    "Admission": "pool",
    "Pool": "pool",
    "SpecBuffers": "pool",
    "Split": "pool",
    "Strategy": "radix",
    "cache_dtypes": "pool",
    "cap_log": "pool",
    "estimate": "pool",
    "footprint": "pool",
    "kv_tokens": "pool",
    "per_request_bytes": "pool",
    "request_cap": "pool",
    "split": "pool",
    "strategy": "radix",
    "checkpoint_grid": "radix",
    "ENGINE": "engine",
}
__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name in _HOME:
        return getattr(import_module(f"{__name__}.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
