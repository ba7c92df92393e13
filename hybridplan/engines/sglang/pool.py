"""SGLang's Mamba state pool, the split of free memory between it and the KV pool, and the request cap.

python/sglang/srt/mem_cache/memory_pool.py (``MambaPool``); mem_cache/kv_cache_configurator.py (0.5.23) and
model_executor/model_runner_kv_cache_mixin.py (0.5.9) for the split and the cap; configs/mamba_utils.py for
the dtypes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from hybridplan.dtypes import flag_dtype, serving_dtype, size_of
from hybridplan.engines.sglang.releases import Release
from hybridplan.errors import NotServed, PlanError
from hybridplan.memory import CacheDtypes, Footprint
from hybridplan.memory import footprint as _footprint
from hybridplan.spec import ModelSpec
from hybridplan.units import human_bytes

if TYPE_CHECKING:
    from hybridplan.scenario import DtypeChoice, Scenario

GB = 1 << 30  # SGLang's "GB" in its logs is 2^30


def check_modelled(spec_tokens: int) -> None:
    """Speculative decoding is not modelled for SGLang: there the pool's conv rows stay K−1 wide, and separate
    per-draft-token verify buffers, sized by max_running_requests, are added (memory_pool.py ``MambaPool``,
    ``intermediate_ssm_state_cache``) and split jointly with the pool (kv_cache_configurator.py)."""
    if spec_tokens:
        raise NotServed("SGLang's speculative decoding is not modelled (per-draft-token verify buffers beside the "
                        "MambaPool, split jointly with it); drop --spec-tokens for the plain pool")


#: ``--dtype`` (python/sglang/srt/server_args.py)
MODEL_DTYPES = {"half": "float16", "float16": "float16", "bfloat16": "bfloat16", "float": "float32",
                "float32": "float32"}
#: ``--mamba-ssm-dtype`` (server_args.py ``MAMBA_SSM_DTYPE_CHOICES``); the conv dtype
#: (``SGLANG_MAMBA_CONV_DTYPE``) takes the same names
STATE_DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}
#: ``--kv-cache-dtype``: the names hybridplan sizes, and the rest
KV_DTYPES = {"bfloat16": "bfloat16", "fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}
KV_NOT_SIZED = ("fp4_e2m1",)


def model_dtype(spec: ModelSpec, dtype: str | None) -> str:
    return serving_dtype(spec.model_dtype, flag_dtype(dtype, what="--dtype", engine_flag="SGLang --dtype",
                                                      accepted=MODEL_DTYPES))


def cache_dtypes(spec: ModelSpec, choice: DtypeChoice) -> CacheDtypes:
    """Conv bfloat16 (env ``SGLANG_MAMBA_CONV_DTYPE``); SSM float32, overridden by the config's
    ``mamba_ssm_dtype``, then by ``--mamba-ssm-dtype``; KV at the model dtype unless ``--kv-cache-dtype``."""
    mdt = model_dtype(spec, choice.dtype)
    conv = flag_dtype(choice.conv, what="--conv-dtype", engine_flag="SGLANG_MAMBA_CONV_DTYPE", accepted=STATE_DTYPES)
    ssm = flag_dtype(choice.ssm, what="--ssm-dtype", engine_flag="SGLang --mamba-ssm-dtype", accepted=STATE_DTYPES)
    kv = flag_dtype(choice.kv, what="--kv-dtype", engine_flag="SGLang --kv-cache-dtype", accepted=KV_DTYPES,
                    not_sized=KV_NOT_SIZED)
    return CacheDtypes(conv=conv or "bfloat16", ssm=ssm or spec.config_dtype("mamba_ssm_dtype") or "float32",
                       kv=kv or mdt)


def footprint(sc: Scenario) -> Footprint:
    """One sequence's state as the MambaPool holds it: conv rows K−1 wide (no speculative columns)."""
    check_modelled(sc.spec_tokens)
    return _cached(sc.spec, sc.tp, sc.dtypes)


@lru_cache(maxsize=128)
def _cached(spec: ModelSpec, tp: int, choice: DtypeChoice) -> Footprint:
    return _footprint(spec, cache_dtypes(spec, choice), tp=tp)


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


def budget_bytes(sc: Scenario) -> int:
    """The memory SGLang splits between its pools on one rank: given, or GPU memory · mem_fraction_static
    less this rank's share of the weights and the overhead."""
    b = sc.budget
    weights = b.weight_bytes(size_of(model_dtype(sc.spec, sc.dtypes.dtype))) // sc.tp
    if b.kv_budget is not None:
        return b.kv_budget
    total = int(b.gpu_mem * sc.sglang.mem_fraction_static) - weights - b.overhead
    if total <= 0:
        raise PlanError("nothing is left for SGLang's pools after the weights and overhead")
    return total


def auto_pool_size(fp: Footprint, budget: int, rel: Release, ratio: float) -> int:
    """K from the memory left after weights: the state pool gets r/(1+r) of it. 0.5.23:
    K = floor((R·r/(1+r) − per_req) / per_req); 0.5.9: K = floor(R·r/(1+r) / per_req)."""
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


def kv_tokens(fp: Footprint, kv_bytes: int, page_size: int = 1) -> int:
    """KV pool tokens; a cell is kv_heads·(head_dim + v_head_dim)·attention layers·bytes."""
    cell = fp.kv_bytes_per_token
    if not cell:
        return 0
    return kv_bytes // cell // page_size * page_size


def request_cap(pool_size: int, slots_per_request: int) -> int:
    """The most requests the state pool admits: K // state slots per request."""
    return pool_size // slots_per_request


@dataclass(frozen=True)
class Admission:
    """max_running_requests: the one asked for, else an estimate from the KV tokens (clamped to 2048..4096),
    bounded in 0.5.23 by half the KV tokens, then capped by the state pool (0.5.23 kv_cache_configurator.py
    ``resolve_max_num_reqs``; 0.5.9 model_runner_kv_cache_mixin.py ``init_memory_pool``)."""

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
        return request_cap(self.pool_size, self.ratio)

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


def _slots(sc: Scenario) -> tuple[str, int]:
    """The radix strategy the scenario runs and the state slots a request holds under it."""
    from hybridplan.engines.sglang.radix import slots_per_request, strategy

    rel = sc.sglang.release
    strat = strategy(sc.spec, rel, sc.sglang.radix)
    return strat, slots_per_request(strat, rel, overlap=sc.sglang.overlap)


@dataclass(frozen=True)
class PoolLayout:
    """`size --engine sglang`: a MambaPool of ``--slots`` slots and what it admits."""

    rel: Release
    pool: Pool
    strategy: str
    ratio: int
    grid: int

    @property
    def max_running_requests(self) -> int:
        return request_cap(self.pool.size, self.ratio)

    def to_dict(self) -> dict:
        fp = self.pool.fp
        return {"version": self.rel.version, "slots": self.pool.size, "rows": self.pool.rows,
                "conv_dtype": fp.dtypes.conv, "ssm_dtype": fp.dtypes.ssm,
                "conv_state_bytes": self.pool.conv_bytes, "ssm_state_bytes": self.pool.ssm_bytes,
                "pool_bytes": self.pool.bytes, "per_request_bytes": per_request_bytes(fp),
                "radix_strategy": self.strategy, "state_slots_per_request": self.ratio,
                "max_running_requests": self.max_running_requests, "checkpoint_grid": self.grid,
                "logs": [self.pool.log]}


def layout(sc: Scenario) -> PoolLayout:
    """`size --engine sglang`: a pool of ``sc.slots`` slots."""
    from hybridplan.engines.sglang.radix import checkpoint_grid

    return PoolLayout(sc.sglang.release, Pool(sc.slots, footprint(sc)), *_slots(sc), checkpoint_grid(sc.spec))


@dataclass(frozen=True)
class Fit:
    """`fit` on SGLang: the memory split between the two pools and the requests it admits."""

    budget: int
    pool: Pool
    kv_bytes: int
    strategy: str
    admission: Admission
    ctx: int
    tp: int
    #: SGLang's refusal of the context as --context-length, if it refuses it
    refusal: str | None = None

    @property
    def rel(self) -> Release:
        return self.admission.rel

    @property
    def kv_tokens(self) -> int:
        return self.admission.kv_tokens

    @property
    def ratio(self) -> int:
        return self.admission.ratio

    @property
    def max_running_requests(self) -> int:
        return self.admission.value

    @property
    def logs(self) -> list[str]:
        return [self.pool.log, *self.admission.logs]

    @property
    def starts(self) -> bool:
        return self.refusal is None and self.max_running_requests >= 1

    @property
    def problem(self) -> str | None:
        return None if self.refusal is None else f"SGLang: {self.refusal}"

    @property
    def flags(self) -> str:
        return (f"--context-length {self.ctx} --max-running-requests {self.max_running_requests}"
                + (f" --tp {self.tp}" if self.tp > 1 else ""))

    @property
    def notes(self) -> tuple[str, ...]:
        if self.rel.padding_slot_in_budget:
            return ()
        return (f"SGLang {self.rel.version} leaves the pool's padding row out of its split: the two pools take "
                f"{human_bytes(per_request_bytes(self.pool.fp))} more than the budget",)

    def to_dict(self) -> dict:
        a = self.admission
        return {"version": self.rel.version, "budget_bytes": self.budget, "max_mamba_cache_size": self.pool.size,
                "pool_bytes": self.pool.bytes, "conv_state_bytes": self.pool.conv_bytes,
                "ssm_state_bytes": self.pool.ssm_bytes, "kv_pool_bytes": self.kv_bytes, "kv_tokens": self.kv_tokens,
                "radix_strategy": self.strategy, "state_slots_per_request": self.ratio,
                "max_running_requests": self.max_running_requests, "requested_max_running_requests": a.requested,
                "state_pool_cap": a.cap, "capped": a.capped, "context_length_refused": self.refusal,
                "logs": self.logs}


def fit(sc: Scenario) -> Fit:
    """`fit` on SGLang: the split of the budget and the requests it admits."""
    rel, fp = sc.sglang.release, footprint(sc)
    total = budget_bytes(sc)
    pool = Pool(auto_pool_size(fp, total, rel, sc.sglang.full_memory_ratio), fp)
    kv_bytes = kv_pool_bytes(fp, total, pool.size, rel)
    strat, ratio = _slots(sc)
    admission = Admission(rel, pool.size, ratio, kv_tokens(fp, kv_bytes), sc.ctx, sc.sglang.max_running_requests)
    from hybridplan.engines.sglang.context import refusal

    return Fit(total, pool, kv_bytes, strat, admission, sc.ctx, sc.tp, refusal(sc))
