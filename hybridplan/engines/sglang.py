"""SGLang's Mamba state pool and the split of free memory between it and the KV pool (0.5.23, 0.5.9).

Paths are those of the SGLang wheels: python/sglang/srt/mem_cache/memory_pool.py (``MambaPool``),
mem_cache/kv_cache_configurator.py (the split and the request cap), configs/mamba_utils.py (dtypes).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd

from hybridplan.dtypes import parse_dtype, serving_dtype
from hybridplan.errors import NotServed, PlanError
from hybridplan.memory import CacheDtypes, Footprint
from hybridplan.spec import ModelSpec

VERSIONS = ("0.5.9", "0.5.23")
DEFAULT_VERSION = "0.5.23"
GB = 1 << 30  # SGLang's "GB" in its logs is 2^30

#: architectures SGLang 0.5.23 has no model class for
_NOT_SERVED = frozenset({"BambaForCausalLM", "JambaForCausalLM", "Zamba2ForCausalLM", "MiniMaxText01ForCausalLM",
                         "MiniMaxForCausalLM"})
#: families whose default radix strategy resolves to extra_buffer; others (LFM2, pure SSMs) to no_buffer
_EXTRA_BUFFER_FAMILIES = frozenset({"Nemotron-H", "Granite-4.0-H", "Falcon-H1", "Qwen3-Next", "Qwen3.5"})
STRATEGIES = ("auto", "off", "no_buffer", "extra_buffer")
#: ``--mamba-full-memory-ratio`` fallback (server_args schedule fields)
FULL_MEMORY_RATIO = 0.9
#: decode tracking interval (``mamba_track_interval``)
TRACK_INTERVAL = 256


@dataclass(frozen=True)
class Release:
    version: str

    @property
    def padding_slot_in_budget(self) -> bool:
        """0.5.23 reserves the padding slot's bytes before dividing the budget; 0.5.9 does not."""
        return self.version != "0.5.9"


def release(version: str | None) -> Release:
    v = (version or DEFAULT_VERSION).strip().lstrip("v")
    if v not in VERSIONS:
        raise PlanError(f"unknown SGLang version {version!r} (known: {', '.join(VERSIONS)})")
    return Release(v)


def check_served(spec: ModelSpec, rel: Release) -> None:
    if spec.architecture in _NOT_SERVED:
        raise NotServed(f"SGLang {rel.version} has no model class for {spec.architecture} ({spec.name})")


def check_modelled(spec_tokens: int) -> None:
    """Speculative decoding is not modelled for SGLang: there the pool's conv rows stay K−1 wide, and separate
    per-draft-token verify buffers, sized by max_running_requests, are added (memory_pool.py ``MambaPool``,
    ``intermediate_ssm_state_cache``) and split jointly with the pool (kv_cache_configurator.py)."""
    if spec_tokens:
        raise NotServed("SGLang's speculative decoding is not modelled (per-draft-token verify buffers beside the "
                        "MambaPool, split jointly with it); drop --spec-tokens for the plain pool")


def cache_dtypes(spec: ModelSpec, *, dtype: str | None = None, conv: str | None = None, ssm: str | None = None,
                 kv: str | None = None) -> CacheDtypes:
    """Conv bfloat16 (env ``SGLANG_MAMBA_CONV_DTYPE``); SSM float32, overridden by the config's
    ``mamba_ssm_dtype``, then by ``--mamba-ssm-dtype``; KV at the model dtype unless ``--kv-cache-dtype``."""
    mdt = serving_dtype(spec.model_dtype, dtype)
    return CacheDtypes(conv=parse_dtype(conv, what="--conv-dtype") if conv else "bfloat16",
                       ssm=parse_dtype(ssm, what="--ssm-dtype") if ssm else (spec.config_dtype("mamba_ssm_dtype")
                                                                            or "float32"),
                       kv=parse_dtype(kv, what="--kv-dtype") if kv else mdt)


def strategy(spec: ModelSpec, chosen: str = "auto") -> str:
    if chosen not in STRATEGIES:
        raise PlanError(f"unknown radix strategy {chosen!r} (known: {', '.join(STRATEGIES)})")
    if chosen != "auto":
        return chosen
    return "extra_buffer" if spec.attention and spec.family in _EXTRA_BUFFER_FAMILIES else "no_buffer"


def slots_per_request(strat: str, *, overlap: bool = True) -> int:
    """State slots one running request may hold: 1 without radix cache, 3 for no_buffer, 3 + 2 for
    extra_buffer with the overlap scheduler (3 + 1 without)."""
    return {"off": 1, "no_buffer": 3}.get(strat, 5 if overlap else 4)


@dataclass(frozen=True)
class Pool:
    """``MambaPool``: one tensor per state kind, ``(layers, size + 1, *shape)``; row 0 is padding."""

    size: int
    fp: Footprint

    @property
    def rows(self) -> int:
        return self.size + 1

    @property
    def conv_bytes(self) -> int:
        return self.rows * self.fp.conv_bytes

    @property
    def ssm_bytes(self) -> int:
        return self.rows * self.fp.ssm_bytes

    @property
    def bytes(self) -> int:
        return self.conv_bytes + self.ssm_bytes

    @property
    def log(self) -> str:
        return (f"Mamba Cache is allocated. max_mamba_cache_size: {self.size}, conv_state size: "
                f"{self.conv_bytes / GB:.2f}GB, ssm_state size: {self.ssm_bytes / GB:.2f}GB ")


def per_request_bytes(fp: Footprint) -> int:
    """``mamba_cache_per_req``: (conv + SSM) of one sequence over all recurrent layers."""
    return fp.state_bytes


def auto_pool_size(fp: Footprint, budget: int, rel: Release, *, ratio: float = FULL_MEMORY_RATIO) -> int:
    """K from the memory left after weights: the state pool gets r/(1+r) of it. 0.5.23:
    K = floor((R·r/(1+r) − per_req) / per_req); 0.5.9: K = floor(R·r/(1+r) / per_req)."""
    if ratio <= 0:
        raise PlanError(f"--mamba-full-memory-ratio must be positive, got {ratio}")
    per = per_request_bytes(fp)
    share = budget * ratio / (1 + ratio)
    k = int((share - per) // per) if rel.padding_slot_in_budget else int(share // per)
    if k <= 0:
        raise PlanError(f"Not enough GPU memory for the hybrid state cache: {budget / GB:.2f} GiB leaves "
                        f"{share / GB:.2f} GiB for states, under two of {per / GB:.3f} GiB")
    return k


def kv_bytes_per_token(fp: Footprint) -> int:
    """KV cell: kv_heads·(head_dim + v_head_dim)·attention layers·bytes."""
    return fp.kv_bytes_per_token


def kv_tokens(fp: Footprint, kv_bytes: int, page_size: int = 1) -> int:
    cell = kv_bytes_per_token(fp)
    if not cell:
        return 0
    return kv_bytes // cell // page_size * page_size


def cap_log(n: int, k: int, ratio: int) -> str:
    return (f"max_running_requests is capped to {n} by the mamba state cache (max_mamba_cache_size={k}, {ratio} "
            "state slots per request). To raise it: increase --mamba-full-memory-ratio or --max-mamba-cache-size, "
            "or halve the state size with --mamba-ssm-dtype bfloat16.")


def checkpoint_grid(spec: ModelSpec, page_size: int = 1, tree_page: int = 1) -> int:
    """States are saved on multiples of lcm(max(model chunk or 64, page_size), tree page)."""
    base = max(spec.chunk_size or 64, page_size)
    return base * tree_page // gcd(base, tree_page)
