"""SGLang's Mamba state pool, the split of its memory between that pool and the KV pool, the speculative
buffers, and the request cap — each band of releases as its own code did it.

mem_cache/memory_pool.py (``MambaPool``); the split: model_executor/model_runner.py (0.5.2–0.5.6.post2),
model_executor/model_runner_kv_cache_mixin.py (0.5.7–0.5.15.post1), mem_cache/kv_cache_configurator.py (0.5.16
on); the request count: managers/tp_worker.py and model_runner.py (to 0.5.9), ``_resolve_max_num_reqs``
(0.5.10rc0 on); configs/mamba_utils.py for the dtypes.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from msgspec import Struct
from msgspec.structs import replace

from hybridplan.dtypes import flag_dtype, size_of
from hybridplan.engines.common import Shortfall, Waterfall
from hybridplan.engines.sglang.dtypes import checkpoint_kv, model_dtype
from hybridplan.engines.sglang.radix import Strategy, page_size, strategy
from hybridplan.engines.sglang.releases import Release
from hybridplan.errors import PlanError, Refused
from hybridplan.memory import CacheDtypes, Footprint
from hybridplan.memory import footprint as _footprint
from hybridplan.spec import ATTENTION_KINDS, ModelSpec
from hybridplan.units import human_bytes

if TYPE_CHECKING:
    from hybridplan.engines.sglang.hicache import HostPools
    from hybridplan.scenario import DtypeChoice, Scenario

GB = 1 << 30  # SGLang's "GB" in its logs is 2^30

#: ``--mamba-ssm-dtype`` and ``SGLANG_MAMBA_CONV_DTYPE``, with the release that brought each
STATE_DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}
_STATE_SINCE = {"float16": "0.5.9"}
#: ``--kv-cache-dtype``: the names hybridplan sizes, with the release that brought each, and the rest
KV_DTYPES = {"fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2", "bf16": "bfloat16", "bfloat16": "bfloat16"}
_KV_SINCE = {"bf16": "0.5.4", "bfloat16": "0.5.4"}
KV_NOT_SIZED = ("fp4_e2m1", "mxfp8", "nvfp4", "fp4_mx_block16")
#: the estimate of max_running_requests is clamped to this range (all releases)
ESTIMATE_RANGE = (2048, 4096)


def _since(rel: Release, table: dict[str, str], names: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in names.items() if rel.at_least(table.get(k, "0.5.2"))}


def cache_dtypes(spec: ModelSpec, choice: DtypeChoice, rel: Release) -> CacheDtypes:
    """Conv bfloat16 (``SGLANG_MAMBA_CONV_DTYPE`` from 0.5.9); SSM float32, or from 0.5.9 the config's
    ``mamba_ssm_dtype`` for the configs that read it (``Release.ssm_from_config``), then ``--mamba-ssm-dtype``;
    KV at the model dtype unless ``--kv-cache-dtype``."""
    mdt = model_dtype(spec, choice.dtype)
    names = _since(rel, _STATE_SINCE, STATE_DTYPES)
    conv = flag_dtype(
        choice.conv, what="--conv-dtype", engine_flag=f"SGLang {rel.version} SGLANG_MAMBA_CONV_DTYPE", accepted=names
    )
    if conv not in (None, "bfloat16") and not rel.conv_dtype_settable:
        raise PlanError(f"SGLang {rel.version} keeps conv states in bfloat16 (SGLANG_MAMBA_CONV_DTYPE came in 0.5.9)")
    ssm = flag_dtype(
        choice.ssm, what="--ssm-dtype", engine_flag=f"SGLang {rel.version} --mamba-ssm-dtype", accepted=names
    )
    kv = flag_dtype(
        choice.kv,
        what="--kv-dtype",
        engine_flag=f"SGLang {rel.version} --kv-cache-dtype",
        accepted=_since(rel, _KV_SINCE, KV_DTYPES),
        not_sized=KV_NOT_SIZED,
    )
    if kv is None and (forced := checkpoint_kv(spec, rel, None)) is not None:  # a ModelOpt checkpoint's fp8 KV
        kv = KV_DTYPES[forced[0]]
    from_config = spec.config_dtype("mamba_ssm_dtype") if rel.ssm_from_config(spec) else None
    return CacheDtypes(conv=conv or "bfloat16", ssm=ssm or from_config or "float32", kv=kv or mdt)


def footprint(sc: Scenario) -> Footprint:
    """One sequence's state as the MambaPool holds it: conv rows K−1 wide whatever the speculation (the draft
    tokens get buffers of their own, ``SpecBuffers``)."""
    return _cached(sc.spec, sc.tp, sc.dtypes, sc.sglang.release)


@lru_cache(maxsize=128)
def _cached(spec: ModelSpec, tp: int, choice: DtypeChoice, rel: Release) -> Footprint:
    return _footprint(spec, cache_dtypes(spec, choice, rel), tp=tp)


def per_request_bytes(fp: Footprint) -> int:
    """``mamba_cache_per_req``: (conv + SSM) of one sequence over all recurrent layers."""
    return fp.state_bytes


class Pool(Struct, frozen=True):
    """``MambaPool``: one tensor per state kind, ``(layers, size + 1, *shape)``; one row is padding."""

    size: int
    fp: Footprint
    #: "Mamba Cache is allocated" names the size from 0.5.3.post2
    named: bool = True

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

    def log(self, spec: SpecBuffers | None = None) -> str:
        size = f"max_mamba_cache_size: {self.size}, " if self.named else ""
        line = (
            f"Mamba Cache is allocated. {size}conv_state size: {self.conv_bytes / GB:.2f}GB, ssm_state size: "
            f"{self.ssm_bytes / GB:.2f}GB "
        )
        if spec is not None:
            line += (
                f"intermediate_ssm_state_cache size: {spec.ssm_bytes / GB:.2f}GB "
                f"intermediate_conv_window_cache size: {spec.conv_bytes / GB:.2f}GB "
            )
        return line


class SpecBuffers(Struct, frozen=True):
    """The per-draft-token buffers beside the pool under speculative decoding: ``(layers, S + 1, D, *shape)``
    for SSM and conv states. S is the pool size until 0.5.6.post2 and max_running_requests from 0.5.7; from
    0.5.14 (CUDA, top-k 1) the conv windows of one row overlap and are stored once, D + K − 2 columns wide."""

    rows: int
    draft: int
    fp: Footprint
    dedup: bool

    @property
    def ssm_bytes(self) -> int:
        return self.rows * self.draft * self.fp.ssm_bytes

    @property
    def conv_bytes(self) -> int:
        if not self.dedup:
            return self.rows * self.draft * self.fp.conv_bytes
        total = 0
        for g in self.fp.state:
            if g.conv_shape is None:
                continue
            channels, window = g.conv_shape
            total += g.count * channels * (self.draft + window - 1) * size_of(g.conv_dtype or "bfloat16")
        return self.rows * total

    @property
    def bytes(self) -> int:
        return self.ssm_bytes + self.conv_bytes


def budget_bytes(sc: Scenario) -> int:
    """R, the memory SGLang splits between its pools on one rank: given, or what the memory waterfall leaves
    (memory.py); from 0.5.18 a multimodal model's R loses ``SGLANG_VLM_CACHE_SIZE_MB`` (100 MB) first."""
    if sc.budget.kv_budget is not None:
        total = sc.budget.kv_budget
    else:
        from hybridplan.engines.sglang.memory import memory

        total = memory(sc).cache_bytes
    if sc.spec.architecture.endswith("ForConditionalGeneration"):
        total -= sc.sglang.release.multimodal_reserve
    if total <= 0:
        raise Refused("nothing is left for SGLang's pools after the weights and overhead")
    return total


def estimate(kv_tokens: int, context_len: int) -> int:
    """max_running_requests before any bound: int(T / context · 512) clamped to 2048..4096."""
    low, high = ESTIMATE_RANGE
    return max(min(int(kv_tokens / context_len * 512), high), low)


class Split(Struct, frozen=True):
    """R divided: the pool's size K, the speculative buffers reserved, and what the KV pool gets."""

    budget: int
    pool_size: int
    spec_reserve: int
    kv_bytes: int
    #: before 0.5.3.post2 K is what was reserved; the pool built is min(K, max_running_requests)
    reserved_only: bool = False
    #: --max-mamba-cache-size was given and the release sized K from the ratio instead (0.5.3.post2–0.5.6.post2)
    fixed_ignored: bool = False


def split(sc: Scenario, fp: Footprint, strategy: str, ratio: int) -> Split:
    """K and the KV pool's bytes, by the band of ``Release.split``:

    - fixed (0.5.2–0.5.3.post1): K = --max-mamba-cache-size, else --max-running-requests, else 512; KV = R − K·per.
    - radix (0.5.3.post2–0.5.6.post2): with the radix cache K = ⌊R·r/(1+r) / per / (1+D)⌋ whatever
      --max-mamba-cache-size says (model_runner.py ``handle_max_mamba_cache`` reads it only with the radix cache
      off), else as before; KV = R − K·per·(1+D).
    - 0.5.7: the radix split takes the speculative buffers (per·mrr·D) off R first; KV = R − K·per.
    - spec-first (0.5.8): the speculative buffers come off R in every case.
    - ratio (0.5.9–0.5.12.post1): no more 512: without --max-mamba-cache-size, and unless the radix cache is
      off with --max-running-requests, K = ⌊R'·r/(1+r) / per⌋.
    - joint (0.5.13–0.5.16): K and the speculative buffers solved together, K = ⌊R·r/(1+r) / (per·(1 + D/ratio))⌋,
      the buffers then sized by min(mrr, K // ratio).
    - padded (0.5.17 on): the pool's padding row is counted: K = ⌊(R·r/(1+r) − per·(1+D)) / (per·(1 + D/ratio))⌋,
      buffers of min(mrr, K // ratio) + 1 rows, KV = R − buffers − (K+1)·per.
    """
    s, rel = sc.sglang, sc.sglang.release
    band, per, r = rel.split, per_request_bytes(fp), s.full_memory_ratio
    d, mrr, fixed = s.draft(sc.spec_tokens), s.requested(sc.spec_tokens), s.max_mamba_cache_size
    total = budget_bytes(sc)
    radix = strategy != "off"

    def share(left: float) -> float:
        return left * r / (1 + r)

    if band in ("fixed", "radix", "0.5.7", "spec-first"):
        default = fixed or mrr or rel.default_pool_size or 0
        if band == "fixed":
            return Split(total, default, 0, total - default * per, reserved_only=True)
        if band == "radix":
            by_ratio = radix and per > 0
            k = int(share(total) // per // (1 + d)) if by_ratio else default
            return Split(total, k, 0, total - k * per * (1 + d), fixed_ignored=by_ratio and fixed is not None)
        spec = per * (mrr or 0) * d
        if band == "0.5.7" and (not radix or fixed is not None):
            spec = 0
        left = total - spec
        k = default if (not radix or fixed is not None) else int(share(left) // per)
        return Split(total, k, spec, left - k * per)
    if band == "ratio":
        left = total - per * (mrr or 0) * d
        k = fixed if fixed is not None else (mrr if not radix and mrr else int(share(left) // per))
        return Split(total, k, total - left, left - k * per)
    pad = 1 if band == "padded" else 0
    if fixed is not None:
        k = fixed
        spec = per * (min(mrr or 0, k // ratio) + pad) * d
    elif not radix and mrr:
        k = max(1, mrr) if pad else mrr
        spec = per * (k + pad) * d
    else:
        room = share(total) - (per * (1 + d) if pad else 0)
        k = int(room // (per * (1 + d / ratio))) if d else int((share(total) - pad * per) // per)
        spec = per * (min(mrr or 0, k // ratio) + pad) * d if d else 0
    if k <= 0:
        raise Refused(
            f"Not enough GPU memory for hybrid (mamba/linear-attention) state cache. Computed "
            f"max_mamba_cache_size={k} (total_rest_memory={total / GB:.2f} GB, "
            f"mamba_cache_per_req={per / (1 << 20):.2f} MB)"
        )
    return Split(total, k, spec, total - spec - (k + pad) * per)


def kv_tokens(fp: Footprint, kv_bytes: int, page_size: int = 1, extra: int = 0, cell: int | None = None) -> int:
    """KV pool tokens: ⌊bytes / cell⌋, plus ``extra`` (``draft_headroom``), floored to the page; a cell is
    kv_heads·(head_dim + v_head_dim)·attention layers·bytes (``cell``: with a draft's KV in it, ``kv_cell``)."""
    cell = fp.kv_bytes_per_token if cell is None else cell
    if not cell:
        return 0
    return max(0, (kv_bytes // cell + extra) // page_size * page_size)


def draft_headroom(rel: Release, requests: int, draft: int) -> int:
    """KV tokens 0.5.2–0.5.6.post2 add to the pool under speculative decoding, beyond the split, for the tokens
    the draft and the verify steps hold at once (model_runner.py ``init_memory_pool``, ``draft_runner_cache_size``):
    requests·steps·top-k + requests·D + 100, before the page floor; ``requests`` is the request pool. With EAGLE's
    top-k 1 the steps are D − 1 (server_args.py sets D = steps + 1). From 0.5.7 the pool keeps the profiled count."""
    if not draft or rel.at_least("0.5.7"):
        return 0
    steps, topk = draft - 1, 1
    return requests * steps * topk + requests * draft + 100


def admit(sc: Scenario, fp: Footprint, part: Split, strat: Strategy, page: int) -> Admission:
    """The KV tokens of a split and the requests they admit: the tokens of the KV bytes (a model without attention
    has the context as its token count from 0.5.19, ``_zero_kv_max_tokens``), then, under speculative decoding
    to 0.5.6.post2, the same with ``draft_headroom`` for the request pool those tokens gave."""
    rel, s = sc.sglang.release, sc.sglang
    tokens = kv_tokens(fp, part.kv_bytes, page, cell=kv_cell(rel, sc, fp))
    if not fp.kv and rel.at_least("0.5.19"):
        tokens = sc.ctx
    admission = Admission(rel, part.pool_size, strat.ratio, tokens, sc.ctx, s.requested(sc.spec_tokens))
    extra = draft_headroom(rel, admission.request_pool, s.draft(sc.spec_tokens))
    if not extra or not fp.kv:
        return admission
    return replace(admission, kv_tokens=kv_tokens(fp, part.kv_bytes, page, extra, cell=kv_cell(rel, sc, fp)))


def request_cap(pool_size: int, slots_per_request: int) -> int:
    """The most requests the state pool admits: K // state slots per request."""
    return pool_size // slots_per_request


class Admission(Struct, frozen=True):
    """max_running_requests, by the band of ``Release.requests``:

    - two-stage (0.5.2–0.5.9): the request pool is the asked count, else the estimate, capped by the state
      pool (K // ratio; K itself before 0.5.3.post2); the count is then the smaller of it and the asked
      count, or half the KV tokens when none was asked.
    - estimate (0.5.10rc0–0.5.13.post1): an asked count is lowered to the estimate, else the estimate bounded
      by half the KV tokens; then the state-pool cap.
    - kv-bounded (0.5.14 on): the asked count or the estimate, bounded by half the KV tokens, then the cap;
      a lowered request is logged, and from 0.5.17 a cap by the state pool is logged instead.
    """

    rel: Release
    pool_size: int
    ratio: int
    kv_tokens: int
    context_len: int
    requested: int | None = None

    @property
    def estimated(self) -> int:
        return estimate(self.kv_tokens, self.context_len)

    @property
    def cap(self) -> int:
        return request_cap(self.pool_size, self.ratio)

    @property
    def before_cap(self) -> int:
        band, asked, half = self.rel.requests, self.requested, self.kv_tokens // 2
        if band == "two-stage":
            return asked if asked is not None else min(self.estimated, half)
        if band == "estimate":
            return min(asked, self.estimated) if asked is not None else min(self.estimated, half)
        return min(asked if asked is not None else self.estimated, half)

    @property
    def value(self) -> int:
        if self.rel.requests == "two-stage":
            pool = min(self.requested if self.requested is not None else self.estimated, self.cap)
            return min(self.requested if self.requested is not None else self.kv_tokens // 2, pool)
        return min(self.before_cap, self.cap)

    @property
    def capped(self) -> bool:
        return self.cap < self.before_cap

    @property
    def request_pool(self) -> int:
        """The request-to-token pool's size (the speculative buffers' S from 0.5.7)."""
        if self.rel.requests == "two-stage":
            return min(self.requested if self.requested is not None else self.estimated, self.cap)
        return self.value

    @property
    def logs(self) -> list[str]:
        if self.rel.requests != "kv-bounded" and not self.rel.logs_cap:
            return []
        if self.capped and self.rel.logs_cap:
            return [cap_log(self.cap, self.pool_size, self.ratio)]
        if self.requested is not None and self.value < self.requested:
            return [
                f"max_running_requests was reduced from the requested {self.requested} to {self.value} "
                "(per dp worker) due to the available KV cache capacity."
            ]
        return []


def cap_log(n: int, k: int, ratio: int) -> str:
    return (
        f"max_running_requests is capped to {n} by the mamba state cache (max_mamba_cache_size={k}, {ratio} "
        "state slots per request). To raise it: increase --mamba-full-memory-ratio or --max-mamba-cache-size, "
        "or halve the state size with --mamba-ssm-dtype bfloat16."
    )


class PoolLayout(Struct, frozen=True):
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
        return {
            "version": self.rel.version,
            "slots": self.pool.size,
            "rows": self.pool.rows,
            "conv_dtype": fp.dtypes.conv,
            "ssm_dtype": fp.dtypes.ssm,
            "conv_state_bytes": self.pool.conv_bytes,
            "ssm_state_bytes": self.pool.ssm_bytes,
            "pool_bytes": self.pool.bytes,
            "per_request_bytes": per_request_bytes(fp),
            "radix_strategy": self.strategy,
            "state_slots_per_request": self.ratio,
            "max_running_requests": self.max_running_requests,
            "checkpoint_grid": self.grid,
            "logs": [self.pool.log()],
        }


def layout(sc: Scenario) -> PoolLayout:
    """`size --engine sglang`: a pool of ``sc.slots`` slots."""
    from hybridplan.engines.sglang.radix import checkpoint_grid

    strat = strategy(sc)
    rel = sc.sglang.release
    return PoolLayout(
        rel,
        Pool(sc.slots, footprint(sc), rel.logs_pool_size),
        strat.name,
        strat.ratio,
        checkpoint_grid(sc.spec, rel, page_size(sc, strat)),
    )


class Fit(Struct, frozen=True):
    """`fit` on SGLang: the memory split between the two pools and the requests it admits."""

    split: Split
    pool: Pool
    spec: SpecBuffers | None
    strategy: str
    admission: Admission
    ctx: int
    tp: int
    page_size: int
    #: SGLang's refusal of the context as --context-length, if it refuses it
    refusal: str | None = None
    #: the GPU's memory down to R, where R was not given
    memory: Waterfall | None = None
    #: what the draft's KV takes (``draft_kv_note``), where the scenario names a draft with layers
    draft: str | None = None
    #: the HiCache host pools (hicache.py), with --enable-hierarchical-cache
    host: HostPools | None = None

    @property
    def rel(self) -> Release:
        return self.admission.rel

    @property
    def budget(self) -> int:
        return self.split.budget

    @property
    def kv_bytes(self) -> int:
        return self.split.kv_bytes

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
    def kv_log(self) -> str | None:
        """ "KV Cache is allocated": K and V each hold T + page tokens of the attention layers."""
        fp = self.pool.fp
        if not fp.kv or not self.kv_tokens:
            return None
        half = (self.kv_tokens + self.page_size) * fp.kv_bytes_per_token // 2
        dtype = f"dtype: torch.{fp.dtypes.kv}, " if self.rel.at_least("0.5.13") else ""
        return (
            f"KV Cache is allocated. {dtype}#tokens: {self.kv_tokens}, K size: {half / GB:.2f} GB, "
            f"V size: {half / GB:.2f} GB"
        )

    @property
    def logs(self) -> list[str]:
        host = self.host.logs if self.host is not None else []
        return [self.pool.log(self.spec), *([self.kv_log] if self.kv_log else []), *host, *self.admission.logs]

    @property
    def starts(self) -> bool:
        return self.problem is None

    @property
    def problem(self) -> str | None:
        if self.refusal is not None:
            return f"SGLang: {self.refusal}"
        if self.pool.fp.kv and self.kv_tokens < 1:
            return (
                f"SGLang: the {self.split.pool_size}-slot state pool ({human_bytes(self.pool.bytes)}) leaves "
                f"nothing of the {human_bytes(self.budget)} for the KV pool; give --max-running-requests (or "
                "--max-mamba-cache-size) to shrink it"
            )
        if self.max_running_requests < 1:
            return (
                f"SGLang: the state pool of {self.pool.size} slots admits no request at {self.ratio} state slots "
                "per request"
            )
        return None

    @property
    def flags(self) -> str:
        return f"--context-length {self.ctx} --max-running-requests {self.max_running_requests}" + (
            f" --tp {self.tp}" if self.tp > 1 else ""
        )

    @property
    def draft_headroom(self) -> int:
        """KV tokens beyond the split for the draft and verify tokens (``draft_headroom``; 0 from 0.5.7)."""
        return draft_headroom(self.rel, self.admission.request_pool, self.spec.draft if self.spec else 0)

    @property
    def notes(self) -> tuple[str, ...]:
        per, v = per_request_bytes(self.pool.fp), self.rel.version
        notes = []
        if self.split.fixed_ignored:
            notes.append(
                f"SGLang {v} ignores --max-mamba-cache-size while the radix cache is on: it sizes the "
                f"state pool from --mamba-full-memory-ratio ({self.split.pool_size} slots); the flag counts "
                "only with --radix off"
            )
        if (extra := self.draft_headroom) and self.pool.fp.kv:
            more = human_bytes(extra * self.pool.fp.kv_bytes_per_token)
            notes.append(
                f"SGLang {v} adds {extra:,} KV tokens ({more}) to the pool beyond its split, for the draft "
                f"and verify tokens of {self.admission.request_pool} requests"
            )
        if self.split.reserved_only:
            notes.append(
                f"SGLang {v} reserves {self.split.pool_size} state slots but builds a pool of "
                f"{self.pool.size} (max_running_requests)"
            )
        elif self.pool.bytes + self.kv_bytes + self.split.spec_reserve > self.budget:
            notes.append(
                f"SGLang {v} leaves the pool's padding row out of its split: the two pools take "
                f"{human_bytes(per)} more than the budget"
            )
        if self.draft is not None:
            notes.append(self.draft)
        if self.host is not None:
            notes.extend(self.host.notes)
        return tuple(notes)

    def to_dict(self) -> dict:
        a = self.admission
        return {
            "version": self.rel.version,
            "budget_bytes": self.budget,
            "memory": self.memory.to_dict() if self.memory else None,
            "max_mamba_cache_size": self.pool.size,
            "pool_bytes": self.pool.bytes,
            "conv_state_bytes": self.pool.conv_bytes,
            "ssm_state_bytes": self.pool.ssm_bytes,
            "speculative_buffer_bytes": self.spec.bytes if self.spec else 0,
            "kv_pool_bytes": self.kv_bytes,
            "kv_tokens": self.kv_tokens,
            "radix_strategy": self.strategy,
            "state_slots_per_request": self.ratio,
            "max_running_requests": self.max_running_requests,
            "requested_max_running_requests": a.requested,
            "state_pool_cap": a.cap,
            "capped": a.capped,
            "context_length_refused": self.refusal,
            "logs": self.logs,
            **({"hicache": self.host.to_dict()} if self.host is not None else {}),
        }


#: The draft's KV in the target's KV cell (sglang/srt/model_executor/pool_configurator.py,
#: ``DefaultPoolConfigurator.__init__``; the draft's layer count from model_runner.py to 0.5.15, then
#: model_runner_components/spec_aux_hidden_state.py). The draft worker reuses the target's pool config: its own KV
#: pool gets the same max_total_num_tokens, and it shares the target's request-to-token pool and MambaPool (no
#: state slots of its own; model_runner_kv_cache_mixin.py / kv_cache_configurator.py ``_init_pools``).
#:
#: - EAGLE, EAGLE3, STANDALONE (NEXTN is EAGLE) from 0.5.14: the cell c of the target's L full-attention layers
#:   becomes ``int(c·(1 + n/L))`` (0.5.14–0.5.21) or ``c + int(c·n/L)`` (0.5.22 on), n the draft's layers
#:   (``eagle_draft_num_layers``, ``draft_layers_in_cell``): every draft layer priced as one target layer.
#: - DFLASH from 0.5.11, DSPARK from 0.5.16: to 0.5.17 ``⌈c·(L + n)/L⌉`` (speculative/dflash_utils.py
#:   ``scale_kv_cell_size_per_token_for_dflash``), n the draft's num_hidden_layers; from 0.5.18 c plus the
#:   draft's own cell (``dflash_draft_cell``).
#: - before those releases, and an EAGLE-family draft SGLang does not count (``draft_layers_in_cell`` None): the
#:   draft pool (``draft_runner_cache_size`` before 0.5.10, the same token count after) lies outside the split,
#:   left out and said.
DRAFT_KV_IN_CELL = {
    "dflash": "0.5.11",
    "dspark": "0.5.16",
    "eagle": "0.5.14",
    "eagle3": "0.5.14",
    "standalone": "0.5.14",
}
#: draft-mode rewrites that set ``num_nextn_predict_layers = 1`` where SGLang reads it (configs/model_config.py
#: ``_config_draft_model``; from 0.5.14): on hf_config, which is the text config for these
_MTP_ONE = ("Qwen3NextForCausalLM", "Qwen3MoeForCausalLM", "NemotronHForCausalLM", "NemotronHPuzzleForCausalLM")
#: the Qwen3.5 rewrite sets it on the text config too only from 0.5.18; before, SGLang reads the text config's
#: num_hidden_layers for a Qwen3.5 draft
_QWEN35_MTP = ("Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration")


def draft_layers_in_cell(rel: Release, sc: Scenario) -> int | None:
    """n, the draft layers SGLang prices into the target's cell (``eagle_draft_num_layers`` or
    ``dflash_draft_num_layers``); None where the release does not (see ``DRAFT_KV_IN_CELL``).

    EAGLE family: with ``--speculative-draft-model-path``, the draft-mode config's ``num_nextn_predict_layers``
    (1 after the MTP rewrites of ``_MTP_ONE``, and of Qwen3.5 from 0.5.18), else the larger of its
    num_hidden_layers and num_attention_layers (equal for these models); without a path, nothing until 0.5.21,
    from 0.5.22 the target config's own ``num_nextn_predict_layers`` if it has one."""
    sp = sc.speculative
    since = DRAFT_KV_IN_CELL.get(sp.method or "")
    if since is None or not rel.at_least(since) or not sp.layers:
        return None
    if sp.method in ("dflash", "dspark"):  # ``require_num_layers``: the draft config's num_hidden_layers
        n = sp.draft.facts.count("num_hidden_layers") if sp.draft is not None else None
        return int(n) if n else None
    if sp.draft_ref is None or sp.draft is None:  # path-less NEXTN: the target's own MTP layers
        if not rel.at_least("0.5.22"):
            return None
        n = sc.spec.facts.count("num_nextn_predict_layers")
        return int(n) if n else None
    arch = sp.draft.architecture
    text: dict[str, Any] = dict(sp.draft.facts.counts)
    if arch in _MTP_ONE or (arch in _QWEN35_MTP and rel.at_least("0.5.18")):
        return 1
    n = text.get("num_nextn_predict_layers")
    return int(n) if n is not None else int(text.get("num_hidden_layers") or len(sp.draft.mixers))


def kv_cell(rel: Release, sc: Scenario, fp: Footprint) -> int:
    """The bytes per token SGLang divides the KV pool's memory by: the target's cell, with the draft's KV in it
    where the release prices it (``DRAFT_KV_IN_CELL``)."""
    cell = fp.kv_bytes_per_token
    n = draft_layers_in_cell(rel, sc)
    layers = sum(g.count for g in fp.kv if g.window is None)
    if not cell or not n or n <= 0 or not layers:
        return cell
    if sc.speculative.method in ("dflash", "dspark"):
        if rel.at_least("0.5.18"):
            return cell + dflash_draft_cell(sc)
        return (cell * (layers + n) + layers - 1) // layers
    if rel.at_least("0.5.22"):
        return cell + int(cell * n / layers)
    return int(cell * (1 + n / layers))


def dflash_draft_cell(sc: Scenario) -> int:
    """The DFLASH/DSPARK draft's own KV bytes per token, which 0.5.18 on adds to the target's cell
    (speculative/dflash_utils.py ``dflash_draft_cell_size_per_token``): its KV heads per rank × (head_dim +
    v_head_dim) × its layers × the draft pool's dtype — ``--kv-cache-dtype`` when given, else the draft model's
    dtype (mem_cache/kv_cache_dtype.py ``configure_kv_cache_dtype``, read with no model: no checkpoint fp8)."""
    draft, rel = sc.speculative.draft, sc.sglang.release
    target = cache_dtypes(sc.spec, sc.dtypes, rel)
    kv = target.kv if sc.dtypes.kv else model_dtype(draft, sc.dtypes.dtype)
    dtypes = CacheDtypes(conv=target.conv, ssm=target.ssm, kv=kv)
    return _footprint(draft, dtypes, tp=sc.tp).kv_bytes_per_token


def draft_kv_note(rel: Release, sc: Scenario, fp: Footprint, tokens: int) -> str | None:
    """The draft's KV: what the cell now holds, or what hybridplan leaves out, said."""
    sp = sc.speculative
    layers = sum(m.kind in ATTENTION_KINDS for m in sp.layers) if sp.method and sp.layers else 0
    since = DRAFT_KV_IN_CELL.get(sp.method or "")
    if not layers or not fp.kv:
        return None
    if (n := draft_layers_in_cell(rel, sc)) is not None:
        cell = kv_cell(rel, sc, fp)
        return (
            f"SGLang {rel.version} prices the {sp.method} draft's KV into the target's KV cell as {n} more "
            f"target layer{'s' if n != 1 else ''} ({fp.kv_bytes_per_token:,} → {cell:,} bytes per token; "
            f"pool_configurator.py): the draft's pool of {tokens:,} tokens is inside the split"
        )
    if since is not None and rel.at_least(since):
        why = (
            "without --speculative-draft-model-path"
            if sp.draft_ref is None and sp.method != "dflash"
            else "for this draft"
        )
        return (
            f"SGLang {rel.version} counts no draft layers in the target's KV cell {why} (pool_configurator.py): "
            f"the {sp.method} draft's KV pool of the target's {tokens:,} tokens takes memory outside the split, "
            "not counted here; the KV tokens shown stand"
        )
    return (
        f"SGLang {rel.version} gives the {sp.method} draft's KV pool ({layers} layers) the target's {tokens:,} "
        "tokens, in memory outside the split (draft_runner_cache_size): the KV tokens shown stand, that memory "
        "is not counted"
    )


def fit(sc: Scenario) -> Fit | Shortfall:
    """`fit` on SGLang: the split of the budget and the requests it admits."""
    from hybridplan.engines.sglang.context import refusal

    if sc.budget.kv_budget is None:
        from hybridplan.engines.sglang.memory import memory

        water = memory(sc)
        if water.cache_bytes <= 0:
            return Shortfall(
                f"SGLang {sc.sglang.release.version}",
                water,
                "the memory split between the pools (R)",
                "mem_fraction_static",
            )

    rel, fp, s = sc.sglang.release, footprint(sc), sc.sglang
    strat = strategy(sc)
    page = page_size(sc, strat)
    part = split(sc, fp, strat.name, strat.ratio)
    admission = admit(sc, fp, part, strat, page)
    # before 0.5.3.post2 the pool built is the request pool, K its cap
    size = admission.request_pool if part.reserved_only else part.pool_size
    d = s.draft(sc.spec_tokens)
    buffers = None
    if d:
        rows = (admission.request_pool if rel.spec_rows_follow_requests else size) + 1
        buffers = SpecBuffers(rows, d, fp, dedup=rel.at_least("0.5.14"))
    water = None
    if sc.budget.kv_budget is None:
        from hybridplan.engines.sglang.memory import memory

        water = memory(sc)
    draft = draft_kv_note(rel, sc, fp, admission.kv_tokens)
    from hybridplan.engines.sglang.memory import drafter_shortfall

    out = Fit(
        part,
        Pool(size, fp, rel.logs_pool_size),
        buffers,
        strat.name,
        admission,
        sc.ctx,
        sc.tp,
        page,
        refusal(sc) or drafter_shortfall(water),
        water,
        draft,
    )
    if s.hicache is not None and fp.kv and out.kv_tokens > 0:
        from hybridplan.engines.sglang import hicache

        try:
            hicache.check(rel, radix_off=strat.name == "off")
            out = replace(out, host=hicache.for_fit(out, s.hicache, sc))
        except Refused as exc:  # SGLang's own start-up refusal of the hierarchical cache
            out = replace(out, refusal=out.refusal or str(exc))
    return out
