"""`hybridplan plan`: how many GPUs of one type, split how, serve a model at a context and a concurrency.

It enumerates the layouts each engine can start — tensor × pipeline × data parallel, experts sliced or dealt
whole (vLLM --enable-expert-parallel; SGLang --ep-size, --enable-dp-attention) — and per layout the KV dtype
(the model's, fp8), the SSM state dtype (the engine's default, bfloat16) and vLLM's Mamba cache mode (its
default, none), sizes each with `fit`'s own engine code (hybridplan/engines/*/parallel.py, sizing.py, pool.py),
and keeps those that start and hold the target: ``concurrency`` requests of ``ctx`` tokens at once, over
all data-parallel engines. Plans rank by GPUs, then by margin (what they hold over the target) in steps of
10 %, then by decode tokens/s per GPU at the target (hybridplan/speed/layout.py, the step model of `speed`;
a layout it does not price ranks last in its step). Layouts are tried from the fewest GPUs up; once ``best``
plans are found, larger layouts are not tried.

Pure: no printing; ``progress`` is called with (layouts tried, layouts to try) where the caller wants it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field, replace
from math import ceil

from hybridplan.errors import PlanError
from hybridplan.records import frozen
from hybridplan.scenario import DtypeChoice, Scenario

#: tensor-parallel degrees tried: one node's NVLink domain at most
TP_DEGREES = (1, 2, 4, 8)
PP_DEGREES = (1, 2, 4, 8)
DP_DEGREES = (1, 2, 4, 8, 16)
#: the most GPUs tried where --gpus is not given
DEFAULT_MAX_GPUS = 64


@frozen
class Layout:
    """How the GPUs are split for one engine."""

    engine: str
    tp: int
    pp: int = 1
    dp: int = 1
    #: vLLM --enable-expert-parallel
    expert_parallel: bool = False
    #: SGLang --ep-size
    ep_size: int = 1
    #: SGLang --enable-dp-attention
    dp_attention: bool = False

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * (1 if self.dp_attention else self.dp)

    @property
    def engines(self) -> int:
        """Independent engines (each with its own scheduler and cache) the target's requests spread over."""
        return self.dp

    def label(self) -> str:
        parts = [f"TP {self.tp}"] + [f"PP {self.pp}"] * (self.pp > 1) + [f"DP {self.dp}"] * (self.dp > 1)
        if self.dp_attention:
            parts.append("DP attention")
        if self.expert_parallel:
            parts.append("EP")
        if self.ep_size > 1:
            parts.append(f"EP {self.ep_size}")
        return " · ".join(parts)

    def to_dict(self) -> dict:
        return {"engine": self.engine, "gpus": self.gpus, "tp": self.tp, "pp": self.pp, "dp": self.dp,
                "expert_parallel": self.expert_parallel, "ep_size": self.ep_size, "dp_attention": self.dp_attention}


@frozen
class Variant:
    """The cache settings a layout is tried with: None = the engine's default."""

    kv: str | None = None
    ssm: str | None = None
    mode: str | None = None

    def label(self) -> str:
        said = [f"KV {self.kv}"] * bool(self.kv) + [f"SSM {self.ssm}"] * bool(self.ssm) + [
            f"mode {self.mode}"] * bool(self.mode)
        return ", ".join(said) or "defaults"


@frozen
class Plan:
    layout: Layout
    variant: Variant
    scenario: Scenario
    #: the engine's fit (hybridplan.engines.*)
    part: object
    #: requests of the context all engines hold together
    holds: float
    target: int
    #: decode tokens/s at the target (hybridplan.speed.layout.Rate); None where no datasheet is known
    rate: object = None

    @property
    def margin(self) -> float:
        return self.holds / self.target - 1

    @property
    def per_engine(self) -> int:
        return ceil(self.target / self.layout.engines)

    @property
    def tokens_per_s_per_gpu(self) -> float | None:
        return self.rate.per_gpu if self.rate is not None else None  # type: ignore[attr-defined]

    def to_dict(self) -> dict:
        return {**self.layout.to_dict(), "variant": {"kv": self.variant.kv, "ssm": self.variant.ssm,
                                                     "mode": self.variant.mode},
                "holds": self.holds, "margin": self.margin, "requests_per_engine": self.per_engine,
                "decode": self.rate.to_dict() if self.rate is not None else None}  # type: ignore[attr-defined]


@frozen
class Rejection:
    layout: Layout
    reason: str
    #: the most requests any variant held, where it started
    best_holds: float | None = None

    def to_dict(self) -> dict:
        return {**self.layout.to_dict(), "reason": self.reason, "best_holds": self.best_holds}


@frozen
class PlanResult:
    base: Scenario
    concurrency: int
    max_gpus: int
    plans: tuple[Plan, ...]
    rejected: tuple[Rejection, ...]
    tried: int
    skipped: tuple[tuple[str, str], ...] = field(default=())


def layouts(sc: Scenario, max_gpus: int) -> list[Layout]:
    """Every layout of both engines (those the scenario asks for) on at most ``max_gpus`` GPUs, fewest first."""
    moe = "moe" in sc.spec.ffn
    out: list[Layout] = []
    for tp in TP_DEGREES:
        for pp in PP_DEGREES:
            for dp in DP_DEGREES:
                if tp * pp * dp > max_gpus:
                    continue
                if sc.wants("vllm"):
                    out.append(Layout("vllm", tp, pp, dp))
                    if moe and tp * dp > 1:
                        out.append(Layout("vllm", tp, pp, dp, expert_parallel=True))
                if sc.wants("sglang"):
                    if pp == 1 or dp == 1:
                        out.append(Layout("sglang", tp, pp, dp))
                    if moe and tp > 1 and pp == 1:
                        out.append(Layout("sglang", tp, pp, dp, ep_size=tp))
            if sc.wants("sglang") and pp == 1:
                for dp in DP_DEGREES:
                    if 1 < dp <= tp and tp % dp == 0 and tp <= max_gpus:
                        out.append(Layout("sglang", tp, 1, dp, dp_attention=True))
                        if moe:
                            out.append(Layout("sglang", tp, 1, dp, ep_size=tp, dp_attention=True))
    return sorted(dict.fromkeys(out), key=lambda lay: (lay.gpus, lay.tp * lay.pp, lay.engine))


def variants(sc: Scenario, engine: str) -> list[Variant]:
    """The cache settings tried: the engine's defaults first, then fp8 KV, a bfloat16 SSM state, and vLLM's
    Mamba cache mode none (no prefix caching) where the default is another."""
    out = [Variant()]
    kvs = [None] + (["fp8"] if sc.spec.attention and sc.dtypes.kv is None else [])
    ssms = [None] + (["bfloat16"] if sc.spec.recurrent and sc.dtypes.ssm is None else [])
    modes: list[str | None] = [None]
    if engine == "vllm" and sc.spec.recurrent and sc.vllm.mode is None:
        default = sc.vllm.release.default_mode(sc.spec, sc.spec_tokens)
        if default != "none" and "none" in sc.vllm.release.modes_for(sc.spec, None):
            modes.append("none")
    for kv in kvs:
        for ssm in ssms:
            for mode in modes:
                v = Variant(kv, ssm, mode)
                if v not in out:
                    out.append(v)
    return out


def _scenario(base: Scenario, lay: Layout, v: Variant, concurrency: int) -> Scenario:
    kv = v.kv
    if kv == "fp8" and lay.engine == "sglang":
        kv = "fp8_e4m3"  # SGLang has no plain fp8 (hybridplan/options.py _kv_dtype)
    dtypes = replace(base.dtypes, kv=kv or base.dtypes.kv, ssm=v.ssm or base.dtypes.ssm)
    sc = replace(base, engine=lay.engine, tp=lay.tp, pp=lay.pp, dp=lay.dp, expert_parallel=lay.expert_parallel,
                 ep_size=lay.ep_size, dp_attention=lay.dp_attention, dtypes=dtypes)
    if lay.engine == "vllm":
        per = ceil(concurrency / lay.engines)
        sc = replace(sc, vllm=replace(sc.vllm, mode=v.mode or sc.vllm.mode,
                                      max_num_seqs=sc.vllm.max_num_seqs or per))
    return sc


def holds(lay: Layout, part: object, ctx: int) -> float:
    """Requests of the context the layout holds at once over all its engines."""
    if lay.engine == "vllm":
        return lay.engines * part.chosen.capacity.max_concurrency  # type: ignore[attr-defined]
    kv = part.kv_tokens // ctx if part.pool.fp.kv else part.max_running_requests  # type: ignore[attr-defined]
    return lay.engines * min(part.max_running_requests, kv)  # type: ignore[attr-defined]


def _rate(p: Plan) -> object:
    """Decode tokens/s of the plan's layout at its target: each engine running its share of the requests, each
    at the context (the speed model's per-rank step, hybridplan/speed/layout.py)."""
    from hybridplan.speed.gpus import DATASHEETS
    from hybridplan.speed.layout import decode_rate

    g = DATASHEETS.get(str(p.scenario.budget.gpu))
    if g is None:
        return None
    try:
        return decode_rate(p.scenario, g, p.per_engine, p.scenario.ctx)
    except PlanError:
        return None


def rank_key(p: Plan) -> tuple:
    """Fewest GPUs, then the larger margin in 10 % steps, then the more decode tokens/s per GPU."""
    return p.layout.gpus, -int(p.margin * 10 // 1), -(p.tokens_per_s_per_gpu or 0.0)


def _fit(sc: Scenario, lay: Layout) -> object:
    from hybridplan import engines

    engine = engines.get(lay.engine)
    return engine.fit(sc)


def plan(base: Scenario, concurrency: int, max_gpus: int | None = None, best: int = 5,
         progress: Callable[[int, int], None] | None = None) -> PlanResult:
    """The ``best`` plans that start and hold ``concurrency`` requests of ``base.ctx``, fewest GPUs first."""
    from hybridplan.engines.common import Shortfall

    if concurrency <= 0:
        raise PlanError(f"--concurrency must be positive, got {concurrency}")
    if base.budget.gpu is None and base.budget.gpu_mem is None:
        raise PlanError("give --gpu-type (or --gpu-mem): plan sizes each GPU's memory")
    cap = max_gpus or DEFAULT_MAX_GPUS
    todo = layouts(base, cap)
    plans: list[Plan] = []
    rejected: list[Rejection] = []
    skipped: dict[str, str] = {}
    tried = 0
    limit = None
    for i, lay in enumerate(todo):
        if limit is not None and lay.gpus > limit:
            break
        if progress is not None:
            progress(i, len(todo))
        tried += 1
        found: Plan | None = None
        first_reason: str | None = None
        most: float | None = None
        for v in variants(base, lay.engine):
            try:
                sc = _scenario(base, lay, v, concurrency)
                part = _fit(sc, lay)
            except PlanError as exc:
                if v == Variant():
                    first_reason = str(exc)
                    break  # a refusal of the layout holds for every variant
                continue
            if isinstance(part, Shortfall):
                first_reason = first_reason or f"the weights do not fit: {part.problem}"
                if v == Variant():
                    break
                continue
            h = holds(lay, part, base.ctx)
            most = max(most or 0, h)
            if not part.starts:  # type: ignore[attr-defined]
                first_reason = first_reason or str(part.problem)  # type: ignore[attr-defined]
                continue
            if h >= concurrency:
                found = Plan(lay, v, sc, part, h, concurrency)
                break
        if found is not None:
            twin = next((p for p in plans if p.layout.engine == lay.engine and p.layout.gpus == lay.gpus
                         and p.variant == found.variant and round(p.holds, 2) == round(found.holds, 2)
                         and (p.layout.tp, p.layout.pp, p.layout.dp) == (lay.tp, lay.pp, lay.dp)), None)
            if twin is not None:  # experts dealt whole where slicing them holds as much: the simpler one shown
                continue
            plans.append(found)
            if len(plans) >= best and limit is None:
                limit = sorted(p.layout.gpus for p in plans)[best - 1]
            continue
        if first_reason is None:
            first_reason = (f"holds at most {most:.1f} requests of {base.ctx:,} tokens, below {concurrency}"
                            if most is not None else "no variant starts")
        elif most is not None and most < concurrency:
            first_reason = (f"holds at most {most:.1f} requests of {base.ctx:,} tokens, below {concurrency} "
                            f"(with the defaults: {first_reason})")
        rejected.append(Rejection(lay, first_reason, most))
    plans = [replace(p, rate=_rate(p)) for p in plans]
    plans.sort(key=rank_key)
    return PlanResult(base, concurrency, cap, tuple(plans[:best]), tuple(rejected), tried,
                      tuple(skipped.items()))
