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

_NO_CLASS_BOTH = frozenset({"BambaForCausalLM", "JambaForCausalLM", "Zamba2ForCausalLM", "MiniMaxText01ForCausalLM",
                            "MiniMaxForCausalLM"})
#: architectures a release has no model class for (python/sglang/srt/models/)
_NOT_SERVED = {
    "0.5.23": _NO_CLASS_BOTH,
    # 0.5.9 has no mamba.py, mamba2.py or falcon_mamba.py yet
    "0.5.9": _NO_CLASS_BOTH | {"MambaForCausalLM", "Mamba2ForCausalLM", "FalconMambaForCausalLM"},
}
#: architectures that may use the extra_buffer strategy (0.5.23: arg_groups/overrides.py
#: ``_MAMBA_EXTRA_BUFFER_ARCHS``; 0.5.9: server_args.py, ``support_mamba_cache_extra_buffer=True`` in
#: ``_handle_mamba_radix_cache``); the others are refused it
_EXTRA_BUFFER_ARCHS = {
    "0.5.23": frozenset({"NemotronHForCausalLM", "GraniteMoeHybridForCausalLM", "FalconH1ForCausalLM",
                         "Qwen3NextForCausalLM", "Qwen3_5ForConditionalGeneration",
                         "Qwen3_5MoeForConditionalGeneration", "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM",
                         "KimiLinearForCausalLM"}),
    "0.5.9": frozenset({"Qwen3NextForCausalLM", "Qwen3_5ForConditionalGeneration",
                        "Qwen3_5MoeForConditionalGeneration"}),
}
#: architectures whose radix cache SGLang disables (0.5.9 server_args.py: ``support_mamba_cache=False``)
_NO_RADIX_ARCHS = {"0.5.23": frozenset(), "0.5.9": frozenset({"KimiLinearForCausalLM"})}
STRATEGIES = ("auto", "off", "no_buffer", "extra_buffer")
#: ``--mamba-full-memory-ratio`` fallback (server_args schedule fields)
FULL_MEMORY_RATIO = 0.9
#: decode tracking interval (``mamba_track_interval``)
TRACK_INTERVAL = 256
#: state slots per running request with the radix cache (``MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO``)
BASE_RATIO = 3


@dataclass(frozen=True)
class Release:
    version: str

    @property
    def newer(self) -> bool:
        """0.5.23 (mem_cache/kv_cache_configurator.py) rather than 0.5.9
        (model_executor/model_runner_kv_cache_mixin.py)."""
        return self.version != "0.5.9"

    @property
    def padding_slot_in_budget(self) -> bool:
        """0.5.23 counts the pool's padding row when it splits the budget (K one lower, and the KV pool gets
        the budget less (K+1) rows); 0.5.9 divides by the bare per-request bytes and subtracts K rows only."""
        return self.newer

    @property
    def logs_cap(self) -> bool:
        """0.5.23 warns "max_running_requests is capped to …" when the state pool caps the requests; 0.5.9 caps
        silently."""
        return self.newer

    @property
    def requests_bounded_by_kv(self) -> bool:
        """0.5.23 also bounds max_running_requests by half the KV tokens (``resolve_max_num_reqs``)."""
        return self.newer


def release(version: str | None) -> Release:
    v = (version or DEFAULT_VERSION).strip().lstrip("v")
    if v not in VERSIONS:
        raise PlanError(f"unknown SGLang version {version!r} (known: {', '.join(VERSIONS)})")
    return Release(v)


def check_served(spec: ModelSpec, rel: Release) -> None:
    if spec.architecture in _NOT_SERVED[rel.version]:
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


def strategy(spec: ModelSpec, rel: Release, chosen: str = "auto") -> str:
    """The radix strategy SGLang runs with default flags (overlap scheduler on, page size 1): ``auto`` resolves
    to extra_buffer where the architecture supports it in 0.5.23 (arg_groups/overrides.py
    ``_mamba_radix_cache_resolution``) and to no_buffer always in 0.5.9 (server_args.py); pure SSMs run as
    no_buffer; an asked-for extra_buffer the architecture does not support is refused, as SGLang does."""
    if chosen not in STRATEGIES:
        raise PlanError(f"unknown radix strategy {chosen!r} (known: {', '.join(STRATEGIES)})")
    arch = spec.architecture
    if arch in _NO_RADIX_ARCHS[rel.version]:
        return "off"
    extra = arch in _EXTRA_BUFFER_ARCHS[rel.version]
    if chosen == "extra_buffer" and not extra:
        raise PlanError(f"SGLang {rel.version} refuses --mamba-radix-cache-strategy extra_buffer for {arch}: "
                        "use no_buffer")
    if chosen != "auto":
        return chosen
    return "extra_buffer" if extra and rel.newer else "no_buffer"


def slots_per_request(strat: str, rel: Release, *, overlap: bool = True) -> int:
    """State slots one running request may hold: 1 without radix cache, 3 for no_buffer, and for extra_buffer
    3 + 2 (0.5.23 with the overlap scheduler, and 0.5.9 without speculative decoding) or 3 + 1 (0.5.23
    without overlap)."""
    if strat == "off":
        return 1
    if strat == "no_buffer":
        return BASE_RATIO
    return BASE_RATIO + (2 if overlap or not rel.newer else 1)


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


def kv_pool_bytes(fp: Footprint, budget: int, k: int, rel: Release) -> int:
    """What the split leaves the KV pool: the budget less (K+1) state rows in 0.5.23, less K rows in 0.5.9
    (whose pool still allocates K+1)."""
    return budget - (k + 1 if rel.padding_slot_in_budget else k) * per_request_bytes(fp)


def kv_bytes_per_token(fp: Footprint) -> int:
    """KV cell: kv_heads·(head_dim + v_head_dim)·attention layers·bytes."""
    return fp.kv_bytes_per_token


def kv_tokens(fp: Footprint, kv_bytes: int, page_size: int = 1) -> int:
    cell = kv_bytes_per_token(fp)
    if not cell:
        return 0
    return kv_bytes // cell // page_size * page_size


@dataclass(frozen=True)
class Admission:
    """max_running_requests: the one asked for, else an estimate from the KV tokens (clamped to 2048..4096),
    bounded in 0.5.23 by half the KV tokens, then capped by the state pool at K // slots per request
    (0.5.23 kv_cache_configurator.py ``resolve_max_num_reqs``; 0.5.9 model_runner_kv_cache_mixin.py
    ``init_memory_pool``)."""

    rel: Release
    pool_size: int
    ratio: int
    kv_tokens: int
    context_len: int
    requested: int | None = None

    @property
    def estimated(self) -> int:
        return max(min(int(self.kv_tokens / self.context_len * 512), 4096), 2048)

    @property
    def before_cap(self) -> int:
        n = self.requested if self.requested is not None else self.estimated
        # an attention-free model has no KV tokens to bound it by
        return min(n, self.kv_tokens // 2) if self.rel.requests_bounded_by_kv and self.kv_tokens else n

    @property
    def cap(self) -> int:
        return self.pool_size // self.ratio

    @property
    def capped(self) -> bool:
        return self.cap < self.before_cap

    @property
    def value(self) -> int:
        return min(self.before_cap, self.cap)

    @property
    def logs(self) -> list[str]:
        if not self.rel.logs_cap:
            return []
        if self.capped:
            return [cap_log(self.cap, self.pool_size, self.ratio)]
        if self.requested is not None and self.before_cap < self.requested:
            return [f"max_running_requests was reduced from the requested {self.requested} to {self.before_cap} "
                    "(per dp worker) due to the available KV cache capacity."]
        return []


def cap_log(n: int, k: int, ratio: int) -> str:
    return (f"max_running_requests is capped to {n} by the mamba state cache (max_mamba_cache_size={k}, {ratio} "
            "state slots per request). To raise it: increase --mamba-full-memory-ratio or --max-mamba-cache-size, "
            "or halve the state size with --mamba-ssm-dtype bfloat16.")


def checkpoint_grid(spec: ModelSpec, page_size: int = 1, tree_page: int = 1) -> int:
    """States are saved on multiples of lcm(max(model chunk or 64, page_size), tree page)."""
    base = max(spec.chunk_size or 64, page_size)
    return base * tree_page // gcd(base, tree_page)
