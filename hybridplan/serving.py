"""What the serving engines will do with a model: pages and padding per vLLM mode, SGLang's pool, how many
requests fit a memory budget, and how much of a shared prefix a hybrid reuses. Pure functions returning
frozen reports; the rules themselves live in ``hybridplan.engines``."""

from __future__ import annotations

from dataclasses import dataclass, field

from hybridplan.dtypes import size_of
from hybridplan.engines import sglang, vllm
from hybridplan.errors import NotServed, PlanError
from hybridplan.memory import Footprint, footprint
from hybridplan.plan import SCHEMA_VERSION, DtypeChoice, positive, resolve_footprint
from hybridplan.spec import ModelSpec
from hybridplan.units import human_bytes

ENGINES = ("vllm", "sglang", "both")


@dataclass(frozen=True)
class EngineSettings:
    """The engine flags a user typed."""

    engine: str = "both"
    vllm_version: str | None = None
    sglang_version: str | None = None
    mode: str | None = None  # vLLM mamba cache mode; None = every mode of the release
    block_size: int | None = None
    gdn_backend: str = "flashinfer"
    radix: str = "auto"  # SGLang --mamba-radix-cache-strategy
    overlap: bool = True
    full_memory_ratio: float = sglang.FULL_MEMORY_RATIO
    max_num_batched_tokens: int = 8192

    def wants(self, engine: str) -> bool:
        if self.engine not in ENGINES:
            raise PlanError(f"unknown engine {self.engine!r} (known: {', '.join(ENGINES)})")
        return self.engine in (engine, "both")

    @property
    def vllm(self) -> vllm.Release:
        return vllm.release(self.vllm_version)

    @property
    def sglang(self) -> sglang.Release:
        return sglang.release(self.sglang_version)


def _modes(spec: ModelSpec, rel: vllm.Release, s: EngineSettings) -> tuple[str, ...]:
    modes = rel.modes_for(spec)
    if s.mode is None:
        return modes
    if s.mode not in rel.modes:
        raise PlanError(f"vLLM {rel.version} has no mamba cache mode {s.mode!r} (it has: {', '.join(rel.modes)})")
    if s.mode not in modes:
        raise PlanError(f"mode {s.mode!r} is not modelled for attention-free {spec.name}: only 'none'")
    return (s.mode,)


def _part(s: EngineSettings, engine: str, build, skipped: dict[str, str]):
    """Build one engine's part of a report. With ``--engine both`` an engine that does not serve the model is
    skipped, with its reason; asked for alone, that is an error."""
    if not s.wants(engine):
        return None
    try:
        return build()
    except NotServed as exc:
        if s.engine == engine:
            raise
        skipped[engine] = str(exc)
        return None


def _check_gdn_backend(s: EngineSettings) -> None:
    if s.gdn_backend not in ("flashinfer", "triton"):
        raise PlanError(f"unknown --gdn-prefill-backend {s.gdn_backend!r} (known: flashinfer, triton)")


# --------------------------------------------------------------------------------------------------
# vLLM pages per mode (`size --engine vllm`)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VllmMode:
    layout: vllm.Layout
    state_pages_per_request: int
    kv_pages_per_request: int

    def to_dict(self) -> dict:
        lay = self.layout
        return {"block_size": lay.block_size, "mamba_page_bytes": lay.mamba_page_bytes, "page_bytes": lay.page_bytes,
                "padding_pct": lay.padding_pct, "padding_bytes": lay.page_bytes - lay.mamba_page_bytes,
                "state_pages_per_request": self.state_pages_per_request,
                "state_bytes_per_request": self.state_pages_per_request * lay.page_bytes,
                "kv_pages_per_request": self.kv_pages_per_request,
                "kv_bytes_per_request": self.kv_pages_per_request * lay.page_bytes, "logs": list(lay.logs)}


@dataclass(frozen=True)
class VllmSection:
    rel: vllm.Release
    default_mode: str
    prefix_mode: str
    modes: dict[str, VllmMode]

    def to_dict(self) -> dict:
        return {"version": self.rel.version, "default_mode": self.default_mode,
                "mode_with_prefix_caching": self.prefix_mode,
                "modes": {m: v.to_dict() for m, v in self.modes.items()}}


def _pages(fp: Footprint, rel: vllm.Release, mode: str, lay: vllm.Layout, *, max_len: int, spec_tokens: int,
           s: EngineSettings) -> tuple[int, int]:
    """Pages one request pins over all layers: (recurrent, attention)."""
    state = sum(g.count * vllm.recurrent_pages_per_request(g.kind, rel, mode, block_size=lay.block_size,
                                                           max_len=max_len, spec_tokens=spec_tokens,
                                                           gdn_backend=s.gdn_backend) for g in fp.state)
    groups = [vllm.CacheGroup(g.kind, g.count, g.window, False) for g in fp.kv]
    attn = sum(g.layers * vllm.attention_pages_per_request(g, block_size=lay.block_size, max_len=max_len,
                                                           in_flight=s.max_num_batched_tokens) for g in groups)
    return state, attn


def vllm_section(spec: ModelSpec, fp: Footprint, *, max_len: int, s: EngineSettings) -> VllmSection:
    rel = s.vllm
    _check_gdn_backend(s)
    vllm.check_served(spec, rel)
    out: dict[str, VllmMode] = {}
    for mode in _modes(spec, rel, s):
        lay = vllm.layout(fp, spec, rel, mode, block_size=s.block_size, gdn_backend=s.gdn_backend)
        state, attn = _pages(fp, rel, mode, lay, max_len=max_len, spec_tokens=fp.spec_tokens, s=s)
        out[mode] = VllmMode(lay, state, attn)
    return VllmSection(rel, rel.default_mode(spec, fp.spec_tokens), rel.prefix_mode(spec, fp.spec_tokens), out)


# --------------------------------------------------------------------------------------------------
# SGLang pool (`size --engine sglang`)
# --------------------------------------------------------------------------------------------------


def sglang_footprint(spec: ModelSpec, *, tp: int, choice: DtypeChoice, spec_tokens: int = 0) -> Footprint:
    """One sequence's state as SGLang's MambaPool holds it: conv rows K−1 wide whatever the draft tokens."""
    sglang.check_modelled(spec_tokens)
    dts = sglang.cache_dtypes(spec, dtype=choice.dtype, conv=choice.conv, ssm=choice.ssm, kv=choice.kv)
    return footprint(spec, dts, tp=tp)


@dataclass(frozen=True)
class SglangSection:
    rel: sglang.Release
    pool: sglang.Pool
    strategy: str
    ratio: int
    grid: int

    @property
    def max_running_requests(self) -> int:
        return self.pool.size // self.ratio

    def to_dict(self) -> dict:
        fp = self.pool.fp
        return {"version": self.rel.version, "slots": self.pool.size, "rows": self.pool.rows,
                "conv_dtype": fp.dtypes.conv, "ssm_dtype": fp.dtypes.ssm,
                "conv_state_bytes": self.pool.conv_bytes, "ssm_state_bytes": self.pool.ssm_bytes,
                "pool_bytes": self.pool.bytes, "per_request_bytes": sglang.per_request_bytes(fp),
                "radix_strategy": self.strategy, "state_slots_per_request": self.ratio,
                "max_running_requests": self.max_running_requests, "checkpoint_grid": self.grid,
                "logs": [self.pool.log]}


def sglang_section(spec: ModelSpec, fp: Footprint, *, slots: int, s: EngineSettings) -> SglangSection:
    rel = s.sglang
    sglang.check_served(spec, rel)
    if not fp.state:
        raise NotServed(f"{spec.name} has no recurrent layers: SGLang keeps no Mamba pool for it")
    strat = sglang.strategy(spec, rel, s.radix)
    return SglangSection(rel, sglang.Pool(slots, fp), strat, sglang.slots_per_request(strat, rel, overlap=s.overlap),
                         sglang.checkpoint_grid(spec))


@dataclass(frozen=True)
class EngineReport:
    vllm: VllmSection | None = None
    sglang: SglangSection | None = None
    skipped: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> dict:
        d: dict = {}
        if self.vllm:
            d["vllm"] = self.vllm.to_dict()
        if self.sglang:
            d["sglang"] = self.sglang.to_dict()
        if self.skipped:
            d["skipped"] = dict(self.skipped)
        return d


def engines(spec: ModelSpec, fp: Footprint, *, tp: int, choice: DtypeChoice, max_len: int, slots: int,
            s: EngineSettings) -> EngineReport:
    skipped: dict[str, str] = {}
    v = _part(s, "vllm", lambda: vllm_section(spec, fp, max_len=max_len, s=s), skipped)
    g = _part(s, "sglang", lambda: sglang_section(
        spec, sglang_footprint(spec, tp=tp, choice=choice, spec_tokens=fp.spec_tokens), slots=slots, s=s), skipped)
    return EngineReport(v, g, tuple(skipped.items()))


# --------------------------------------------------------------------------------------------------
# fit: how many requests a memory budget holds
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    """Memory left for caches: given directly, or derived from the GPU, the weights and an overhead."""

    kv_budget: int | None = None
    gpu_mem: int | None = None
    weights: int | None = None
    params: float | None = None
    gpu_util: float | None = None
    overhead: int = 0

    def vllm_bytes(self, rel: vllm.Release, weight_bytes: int) -> int:
        if self.kv_budget is not None:
            return self.kv_budget
        util = self.gpu_util if self.gpu_util is not None else rel.gpu_memory_utilization
        return vllm.requested_memory(self.gpu_mem, util) - weight_bytes - self.overhead

    def sglang_bytes(self, weight_bytes: int, fraction: float) -> int:
        if self.kv_budget is not None:
            return self.kv_budget
        return int(self.gpu_mem * fraction) - weight_bytes - self.overhead


def weight_bytes(spec: ModelSpec, b: Budget, dtype_bytes: int) -> int:
    if b.kv_budget is not None:
        return 0
    if b.gpu_mem is None:
        raise PlanError("give --kv-budget, or --gpu-mem with --weights or --params")
    if b.weights is not None:
        return b.weights
    if b.params is not None:
        if b.params <= 0:
            raise PlanError(f"--params must be positive, got {b.params:g}")
        return int(b.params * dtype_bytes)
    raise PlanError("with --gpu-mem, give --weights SIZE or --params N (the model's weights on this GPU)")


@dataclass(frozen=True)
class VllmFit:
    capacity: vllm.Capacity
    max_num_seqs: int
    max_num_seqs_given: bool

    @property
    def fits_one(self) -> bool:
        return self.capacity.max_concurrency >= 1

    @property
    def largest_max_num_seqs(self) -> int | None:
        return self.capacity.max_num_seqs_limit

    @property
    def starts(self) -> bool:
        lim = self.largest_max_num_seqs
        return self.fits_one and (lim is None or self.max_num_seqs <= lim)

    @property
    def problem(self) -> str | None:
        if not self.fits_one:
            return (f"one {self.capacity.max_len:,}-token request needs {self.capacity.blocks_per_request} blocks, "
                    f"only {self.capacity.num_blocks} fit")
        lim = self.largest_max_num_seqs
        if lim is not None and self.max_num_seqs > lim:
            return (f"max_num_seqs ({self.max_num_seqs}) exceeds available Mamba cache blocks ({lim}). Each decode "
                    "sequence requires one Mamba cache block, so CUDA graph capture cannot proceed. Please lower "
                    f"max_num_seqs to at most {lim} or increase gpu_memory_utilization.")
        return None

    def to_dict(self) -> dict:
        c = self.capacity
        return {"block_size": c.layout.block_size, "page_bytes": c.layout.page_bytes, "group_size": c.group_size,
                "groups": len(c.groups), "bytes_per_block": c.bytes_per_block, "num_blocks": c.num_blocks,
                "blocks_per_request": c.blocks_per_request, "max_concurrency": c.max_concurrency,
                "kv_tokens": c.kv_tokens, "max_num_seqs": self.max_num_seqs,
                "largest_max_num_seqs": self.largest_max_num_seqs, "starts": self.starts, "problem": self.problem,
                "logs": list(c.layout.logs) + list(c.logs)}


@dataclass(frozen=True)
class SglangFit:
    budget: int
    pool: sglang.Pool
    kv_bytes: int
    strategy: str
    admission: sglang.Admission

    @property
    def rel(self) -> sglang.Release:
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

    def to_dict(self) -> dict:
        a = self.admission
        return {"version": self.rel.version, "budget_bytes": self.budget, "max_mamba_cache_size": self.pool.size,
                "pool_bytes": self.pool.bytes, "conv_state_bytes": self.pool.conv_bytes,
                "ssm_state_bytes": self.pool.ssm_bytes, "kv_pool_bytes": self.kv_bytes, "kv_tokens": self.kv_tokens,
                "radix_strategy": self.strategy, "state_slots_per_request": self.ratio,
                "max_running_requests": self.max_running_requests, "requested_max_running_requests": a.requested,
                "state_pool_cap": a.cap, "capped": a.capped, "logs": self.logs}


@dataclass(frozen=True)
class FitReport:
    spec: ModelSpec
    ctx: int
    tp: int
    vllm_budget: int | None
    vllm_default_mode: str | None
    vllm: dict[str, VllmFit] = field(default_factory=dict)
    sglang: SglangFit | None = None
    notes: tuple[str, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()

    @property
    def verdict_ok(self) -> bool:
        fits = [f.starts for m, f in self.vllm.items() if m == self.vllm_default_mode] if self.vllm else []
        if self.sglang is not None:
            fits.append(self.sglang.max_running_requests >= 1)
        return all(fits) and bool(fits)

    def flags(self) -> dict[str, str]:
        out = {}
        if self.vllm_default_mode in self.vllm:
            f = self.vllm[self.vllm_default_mode]
            n = f.max_num_seqs if f.starts else (f.largest_max_num_seqs or 0)
            out["vllm"] = f"--max-model-len {self.ctx} --max-num-seqs {max(n, 1)}" + (
                f" --tensor-parallel-size {self.tp}" if self.tp > 1 else "")
        if self.sglang is not None:
            out["sglang"] = (f"--context-length {self.ctx} --max-running-requests {self.sglang.max_running_requests}"
                             + (f" --tp {self.tp}" if self.tp > 1 else ""))
        return out

    def to_dict(self) -> dict:
        d: dict = {"schema_version": SCHEMA_VERSION, "model": self.spec.name, "ctx": self.ctx, "tp": self.tp,
                   "ok": self.verdict_ok, "flags": self.flags(), "notes": list(self.notes)}
        if self.skipped:
            d["skipped"] = dict(self.skipped)
        if self.vllm:
            d["vllm"] = {"default_mode": self.vllm_default_mode, "kv_budget_bytes": self.vllm_budget,
                         "available_kv_cache_memory_log": vllm.available_kv_memory_log(self.vllm_budget),
                         "modes": {m: f.to_dict() for m, f in self.vllm.items()}}
        if self.sglang:
            d["sglang"] = self.sglang.to_dict()
        return d


def default_max_num_seqs(gpu_mem: int | None) -> int:
    """vllm/engine/arg_utils.py: 1024 on GPUs with ≥ 70 GiB (not A100), else 256."""
    return 1024 if gpu_mem is None or gpu_mem >= 70 * (1 << 30) else 256


def _vllm_fit(spec: ModelSpec, *, ctx: int, tp: int, choice: DtypeChoice, budget: Budget, s: EngineSettings,
              spec_tokens: int, max_num_seqs: int | None) -> tuple[int, str, dict[str, VllmFit]]:
    rel = s.vllm
    vllm.check_served(spec, rel)
    _check_gdn_backend(s)
    fp = resolve_footprint(spec, tp=tp, choice=choice, spec_tokens=spec_tokens, rel=rel)
    wb = weight_bytes(spec, budget, size_of(vllm.model_dtype(spec, choice.dtype))) // tp
    kv_budget = budget.vllm_bytes(rel, wb)
    if kv_budget <= 0:
        raise PlanError(f"nothing is left for the KV cache: the weights and overhead take all of "
                        f"{(budget.gpu_mem or 0) / (1 << 30):.2f} GiB × utilization")
    n = max_num_seqs if max_num_seqs is not None else default_max_num_seqs(budget.gpu_mem)
    if n <= 0:
        raise PlanError(f"--max-num-seqs must be positive, got {n}")
    fits = {mode: VllmFit(vllm.capacity(fp, spec, rel, mode, kv_budget=kv_budget, max_len=ctx,
                                        block_size=s.block_size, spec_tokens=spec_tokens,
                                        gdn_backend=s.gdn_backend, in_flight=s.max_num_batched_tokens),
                          n, max_num_seqs is not None)
            for mode in _modes(spec, rel, s)}
    return kv_budget, s.mode or rel.default_mode(spec, spec_tokens), fits


def _sglang_fit(spec: ModelSpec, *, ctx: int, tp: int, choice: DtypeChoice, budget: Budget, s: EngineSettings,
                spec_tokens: int, max_running_requests: int | None, mem_fraction_static: float) -> SglangFit:
    rel = s.sglang
    sglang.check_served(spec, rel)
    if not spec.recurrent:
        raise NotServed(f"{spec.name} has no recurrent layers: SGLang keeps no Mamba pool for it")
    if max_running_requests is not None and max_running_requests <= 0:
        raise PlanError(f"--max-running-requests must be positive, got {max_running_requests}")
    sfp = sglang_footprint(spec, tp=tp, choice=choice, spec_tokens=spec_tokens)
    wb = weight_bytes(spec, budget, size_of(vllm.model_dtype(spec, choice.dtype))) // tp
    total = budget.sglang_bytes(wb, mem_fraction_static)
    if total <= 0:
        raise PlanError("nothing is left for SGLang's pools after the weights and overhead")
    pool = sglang.Pool(sglang.auto_pool_size(sfp, total, rel, ratio=s.full_memory_ratio), sfp)
    kv_bytes = sglang.kv_pool_bytes(sfp, total, pool.size, rel)
    strat = sglang.strategy(spec, rel, s.radix)
    admission = sglang.Admission(rel, pool.size, sglang.slots_per_request(strat, rel, overlap=s.overlap),
                                 sglang.kv_tokens(sfp, kv_bytes), ctx, max_running_requests)
    return SglangFit(total, pool, kv_bytes, strat, admission)


def fit(spec: ModelSpec, *, ctx: int, tp: int, choice: DtypeChoice, budget: Budget, s: EngineSettings,
        spec_tokens: int = 0, max_num_seqs: int | None = None, max_running_requests: int | None = None,
        mem_fraction_static: float = 0.88) -> FitReport:
    positive(ctx, "--ctx")
    notes: list[str] = []
    if budget.kv_budget is None:
        notes.append(f"the budget subtracts weights and a {budget.overhead / (1 << 30):.2f} GiB overhead for "
                     "activations, CUDA graphs and non-torch memory: an estimate; the engine measures it at start-up")
    skipped: dict[str, str] = {}
    v = _part(s, "vllm", lambda: _vllm_fit(spec, ctx=ctx, tp=tp, choice=choice, budget=budget, s=s,
                                           spec_tokens=spec_tokens, max_num_seqs=max_num_seqs), skipped)
    sfit = _part(s, "sglang", lambda: _sglang_fit(spec, ctx=ctx, tp=tp, choice=choice, budget=budget, s=s,
                                                  spec_tokens=spec_tokens, max_running_requests=max_running_requests,
                                                  mem_fraction_static=mem_fraction_static), skipped)
    if v is None and sfit is None:
        raise PlanError("; ".join(skipped.values()) or "no engine to fit")
    if sfit is not None and not sfit.rel.padding_slot_in_budget:
        notes.append(f"SGLang {sfit.rel.version} leaves the pool's padding row out of its split: the two pools take "
                     f"{human_bytes(sglang.per_request_bytes(sfit.pool.fp))} more than the budget")
    vbudget, vdefault, vfits = v if v is not None else (None, None, {})
    return FitReport(spec, ctx, tp, vbudget, vdefault, vfits, sfit, tuple(notes), tuple(skipped.items()))


# --------------------------------------------------------------------------------------------------
# prefix reuse
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reuse:
    """Prefix reuse on one engine. The second request finds only the first one's checkpoints; from the
    third on, requests also find the checkpoint the second left where the two diverged (the junction)."""

    grid: int | None
    checkpoints: tuple[int, ...]
    reused_tokens: int
    computed_tokens: int
    later_reused_tokens: int
    later_computed_tokens: int

    def to_dict(self, grid_key: str) -> dict:
        return {grid_key: self.grid, "checkpoints": list(self.checkpoints), "reused_tokens": self.reused_tokens,
                "computed_tokens": self.computed_tokens, "later_reused_tokens": self.later_reused_tokens,
                "later_computed_tokens": self.later_computed_tokens}


def _hit(checkpoints, shared: int, prompt: int) -> int:
    """The deepest checkpoint inside the shared prefix that still leaves one token to compute."""
    return max((c for c in checkpoints if c <= shared and c <= prompt - 1), default=0)


def _floor_to(n: int, unit: int) -> int:
    return n // unit * unit


def _reuse(grid: int | None, checkpoints: tuple[int, ...], junction: int, shared: int, prompt: int) -> Reuse:
    hit = _hit(checkpoints, shared, prompt)
    later = max(hit, _hit((junction,), shared, prompt)) if junction else hit
    return Reuse(grid, checkpoints, hit, prompt - hit, later, prompt - later)


def vllm_checkpoints(mode: str, block: int | None, prompt: int, chunk: int, minor: int = 33) -> tuple[int, ...]:
    """Where the first request leaves reusable states (vllm/v1/core/sched/scheduler.py
    ``_mamba_block_aligned_split``; kv_cache_interface.py ``get_mamba_prefill_checkpoint_position``).

    all: every full block. align: the ends of prefill chunks, cut to block boundaries (a chunk is
    floor(max_num_batched_tokens / B)·B tokens), and the prompt's last cacheable boundary: floor(L/B)·B
    through 0.31, floor((L − 1)/B)·B from 0.32 (saved inside the final forward). none: nothing."""
    if mode == "none" or not block:
        return ()
    if mode == "all":
        return tuple(range(block, prompt + 1, block))
    last = _floor_to(prompt - 1 if minor >= 32 else prompt, block)
    step = max(block, _floor_to(chunk, block))
    ends = set(range(step, prompt, step))
    ends.add(last)
    return tuple(sorted(c for c in ends if 0 < c <= last))


def sglang_checkpoints(strategy: str, grid: int, prompt: int, chunk: int) -> tuple[int, ...]:
    """Where the first request leaves states in SGLang's radix tree
    (mem_cache/unified_radix_cache.py ``checkpoint_into_tree``): extra_buffer, one per prefill chunk at
    the chunk's last grid point; no_buffer, every chunk end and the prompt's end; off, nothing."""
    if strategy == "off":
        return ()
    starts = range(0, prompt, chunk)
    if strategy == "no_buffer":
        ends = {min(s + chunk, prompt) for s in starts}
    else:
        ends = {s + _floor_to(min(chunk, prompt - s), grid) for s in starts}
    return tuple(sorted(c for c in ends if c > 0))


@dataclass(frozen=True)
class PrefixReport:
    spec: ModelSpec
    shared: int
    private: int
    vllm_rel: vllm.Release | None
    vllm: dict[str, Reuse]
    sglang: Reuse | None
    sglang_rel: sglang.Release | None
    skipped: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> dict:
        d: dict = {"schema_version": SCHEMA_VERSION, "model": self.spec.name, "shared": self.shared,
                   "private": self.private, "prompt": self.shared + self.private}
        if self.vllm_rel:
            d["vllm"] = {"version": self.vllm_rel.version,
                         "modes": {m: r.to_dict("block_size") for m, r in self.vllm.items()}}
        if self.sglang:
            d["sglang"] = {"version": self.sglang_rel.version, **self.sglang.to_dict("grid")}
        if self.skipped:
            d["skipped"] = dict(self.skipped)
        return d


def _vllm_prefix(spec: ModelSpec, *, shared: int, prompt: int, tp: int, choice: DtypeChoice,
                 s: EngineSettings) -> tuple[vllm.Release, dict[str, Reuse]]:
    rel = s.vllm
    vllm.check_served(spec, rel)
    fp = resolve_footprint(spec, tp=tp, choice=choice, rel=rel)
    out: dict[str, Reuse] = {}
    if not spec.recurrent:  # a transformer: prefix caching keeps every full block, whatever the Mamba mode
        block = vllm.layout(fp, spec, rel, "none", block_size=s.block_size).block_size
        out["prefix_caching"] = _reuse(block, vllm_checkpoints("all", block, prompt, s.max_num_batched_tokens),
                                       0, shared, prompt)
        return rel, out
    for mode in _modes(spec, rel, s):
        block = vllm.layout(fp, spec, rel, mode, block_size=s.block_size, gdn_backend=s.gdn_backend).block_size
        cps = vllm_checkpoints(mode, block, prompt, s.max_num_batched_tokens, rel.minor)
        # align: the second request stops a chunk at the block-floored junction with the first and saves a
        # state there (always on, 0.28+); all caches every block anyway
        junction = _floor_to(min(shared, prompt - 1), block) if mode == "align" and rel.minor >= 28 else 0
        out[mode] = _reuse(block, cps, junction, shared, prompt)
    return rel, out


def _sglang_prefix(spec: ModelSpec, *, shared: int, prompt: int, s: EngineSettings) -> tuple[sglang.Release, Reuse]:
    rel = s.sglang
    sglang.check_served(spec, rel)
    if not spec.recurrent:
        raise NotServed(f"{spec.name} has no recurrent layers: SGLang keeps no Mamba pool for it")
    grid = sglang.checkpoint_grid(spec)
    strat = sglang.strategy(spec, rel, s.radix)
    cps = sglang_checkpoints(strat, grid, prompt, s.max_num_batched_tokens)
    # extra_buffer: the second request records its branch point, grid-floored, and saves a state there
    junction = _floor_to(min(shared, prompt - 1), grid) if strat == "extra_buffer" else 0
    return rel, _reuse(grid, cps, junction, shared, prompt)


def prefix(spec: ModelSpec, *, shared: int, private: int, tp: int = 1, choice: DtypeChoice = DtypeChoice(),
           s: EngineSettings = EngineSettings()) -> PrefixReport:
    if shared < 0 or private < 0 or shared + private <= 0:
        raise PlanError(f"--shared and --private must be ≥ 0 with a positive sum, got {shared} and {private}")
    prompt = shared + private
    skipped: dict[str, str] = {}
    v = _part(s, "vllm", lambda: _vllm_prefix(spec, shared=shared, prompt=prompt, tp=tp, choice=choice, s=s),
              skipped)
    g = _part(s, "sglang", lambda: _sglang_prefix(spec, shared=shared, prompt=prompt, s=s), skipped)
    if v is None and g is None:
        raise PlanError("; ".join(skipped.values()) or "no engine to model")
    vrel, vres = v if v is not None else (None, {})
    srel, sres = g if g is not None else (None, None)
    return PrefixReport(spec, shared, private, vrel, vres, sres, srel, tuple(skipped.items()))


@dataclass(frozen=True)
class SweepReport:
    """Reuse as the shared length grows: a step function with a step at each checkpoint."""

    spec: ModelSpec
    private: int
    points: tuple[PrefixReport, ...]

    def series(self) -> dict[str, list[tuple[int, int, int]]]:
        """engine/mode label → [(shared, reused by the 2nd request, reused by the 3rd and later)]."""
        out: dict[str, list[tuple[int, int, int]]] = {}
        for p in self.points:
            rows = [(f"vLLM {p.vllm_rel.version} {mode} (block {r.grid})", r) for mode, r in p.vllm.items()]
            if p.sglang:
                rows.append((f"SGLang {p.sglang_rel.version} (grid {p.sglang.grid})", p.sglang))
            for label, r in rows:
                out.setdefault(label, []).append((p.shared, r.reused_tokens, r.later_reused_tokens))
        return out

    def to_dict(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, "model": self.spec.name, "private": self.private,
                "points": [p.to_dict() for p in self.points]}


def parse_sweep(text: str) -> range:
    try:
        a, b, step = (int(x) for x in text.split(":"))
    except ValueError:
        raise PlanError(f"--sweep takes A:B:STEP in tokens, got {text!r}") from None
    if a < 0 or b < a or step <= 0:
        raise PlanError(f"--sweep needs 0 ≤ A ≤ B and STEP > 0, got {text!r}")
    if (b - a) // step > 10_000:
        raise PlanError(f"--sweep {text} has more than 10,000 points")
    return range(a, b + 1, step)


def prefix_sweep(spec: ModelSpec, *, sweep: str, private: int, tp: int = 1, choice: DtypeChoice = DtypeChoice(),
                 s: EngineSettings = EngineSettings()) -> SweepReport:
    points = tuple(prefix(spec, shared=n, private=private, tp=tp, choice=choice, s=s) for n in parse_sweep(sweep)
                   if n + private > 0)
    return SweepReport(spec, private, points)
