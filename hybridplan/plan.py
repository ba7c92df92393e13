"""`hybridplan plan`: how many GPUs of one type, split how, serve a model at a context and a concurrency.

It tries each GPU count from one up to ``max_gpus``, and on each count every layout of it each engine can start
(``layouts_on``): every split of the count into tensor × pipeline × data parallel — any PP up to the model's
decoder layers, any DP, any TP — with the experts sliced or dealt whole (vLLM --enable-expert-parallel; SGLang
--ep-size, --enable-dp-attention), and per layout the KV dtype (the model's, fp8), the SSM state dtype (the
engine's default, bfloat16) and vLLM's Mamba cache mode (its default, none). It sizes each with `fit`'s own
engine code (hybridplan/engines/*/parallel.py, sizing.py, pool.py) and keeps those that start and hold the
target: ``concurrency`` requests of ``ctx`` tokens at once, over all data-parallel engines. Which layouts an
engine refuses — a TP its heads, KV heads, groups or experts do not divide, a stage without layers, a model
without PP — the engine code says, with its reason; nothing is left out of the search for it.

The search stops at the first count that holds the target: the fewest GPUs. Its plans rank by margin (what
they hold over the target) in steps of 10 %, then by decode tokens/s per GPU at the target
(hybridplan/speed/layout.py, the step model of `speed`; a layout it does not price ranks last in its step),
and the ``best`` first are kept. Three things keep it fast, and none drops a layout that could hold the
target: what an engine refuses whatever the layout's other degrees — a TP for the model's layers, the context
as its maximum length, PP for a model without it — is asked once (``_Refusals``); a count, or a
cache setting on a count, whose GPUs' memory cannot hold the weights and the requests at all is not fitted
(``MemoryBound``; one layout of the largest such count is, for the engine's own words on why it fails); and
once one cache setting of a layout is fitted, another whose requests the layout's own caches cannot hold is
not (``_cache_bytes``: what the fit left for the caches, which no cache setting changes).

Pure: no printing; ``progress`` is called with (layouts tried, layouts there are) where the caller wants it.
"""

from __future__ import annotations

from collections.abc import Callable
from math import ceil
from typing import Any

from msgspec import Struct, field
from msgspec.structs import replace

from hybridplan.errors import PlanError
from hybridplan.scenario import Scenario

#: the most GPUs tried where --gpus is not given
DEFAULT_MAX_GPUS = 64


class Layout(Struct, frozen=True):
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
        return {
            "engine": self.engine,
            "gpus": self.gpus,
            "tp": self.tp,
            "pp": self.pp,
            "dp": self.dp,
            "expert_parallel": self.expert_parallel,
            "ep_size": self.ep_size,
            "dp_attention": self.dp_attention,
        }


class Variant(Struct, frozen=True):
    """The cache settings a layout is tried with: None = the engine's default."""

    kv: str | None = None
    ssm: str | None = None
    mode: str | None = None

    def label(self) -> str:
        said = (
            [f"KV {self.kv}"] * bool(self.kv)
            + [f"SSM {self.ssm}"] * bool(self.ssm)
            + [f"mode {self.mode}"] * bool(self.mode)
        )
        return ", ".join(said) or "defaults"


class Plan(Struct, frozen=True):
    layout: Layout
    variant: Variant
    scenario: Scenario
    #: the engine's fit (hybridplan.engines.*)
    part: Any  # the engine's fit (hybridplan.engines FitPart)
    #: requests of the context all engines hold together
    holds: float
    target: int
    #: decode tokens/s at the target (hybridplan.speed.layout.Rate); None where no datasheet is known
    rate: Any = None

    @property
    def margin(self) -> float:
        return self.holds / self.target - 1

    @property
    def per_engine(self) -> int:
        return ceil(self.target / self.layout.engines)

    @property
    def tokens_per_s_per_gpu(self) -> float | None:
        return self.rate.per_gpu if self.rate is not None else None

    @property
    def rate_range(self):
        """The held-out P10–P90 range of output tok/s at the requests each engine runs (hybridplan/speed/ranges.py),
        None where the layout is not priced or no held-out row gives one."""
        from hybridplan.speed.ranges import lookup

        if self.tokens_per_s_per_gpu is None:
            return None
        return lookup(self.scenario.spec.is_hybrid, "output tok/s", self.per_engine)

    def to_dict(self) -> dict:
        rng = self.rate_range
        return {
            **self.layout.to_dict(),
            "variant": {"kv": self.variant.kv, "ssm": self.variant.ssm, "mode": self.variant.mode},
            "holds": self.holds,
            "margin": self.margin,
            "requests_per_engine": self.per_engine,
            "decode": self.rate.to_dict() if self.rate is not None else None,
            "decode_range": None if rng is None else rng.to_dict(self.tokens_per_s_per_gpu),
        }


#: why a layout is rejected: the engine refuses it (its fit raises, with its reason), hybridplan does not model
#: it, its weights leave nothing for the caches (the engine's shortfall), it starts but holds too few requests,
#: it does not start (the engine's start-up check), or its GPU count was never fitted: their memory cannot
#: hold the weights and the requests (``MemoryBound``)
REJECTION_KINDS = ("refused", "not modelled", "weights", "too few", "does not start", "memory")


class Rejection(Struct, frozen=True):
    layout: Layout
    reason: str
    #: the most requests any variant held, where it started
    best_holds: float | None = None
    #: one of REJECTION_KINDS
    kind: str = "does not start"
    #: whether the engine's fit gave the reason (False: its count ruled out by ``MemoryBound``)
    fitted: bool = True

    def to_dict(self) -> dict:
        return {
            **self.layout.to_dict(),
            "reason": self.reason,
            "kind": self.kind,
            "fitted": self.fitted,
            "best_holds": self.best_holds,
        }


class PlanResult(Struct, frozen=True):
    base: Scenario
    concurrency: int
    max_gpus: int
    plans: tuple[Plan, ...]
    rejected: tuple[Rejection, ...]
    tried: int
    skipped: tuple[tuple[str, str], ...] = field(default=())


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def max_stages(sc: Scenario) -> tuple[int, str | None]:
    """The most pipeline stages tried: the model's decoder layers (past one layer a stage, both engines'
    ``get_pp_indices`` leave a stage without layers, which hybridplan refuses: hybridplan/stages.py
    ``bounds_of``), and why PP is not tried at all where the layers cannot be split into stages (None where they
    can)."""
    from hybridplan.stages import decoder_layers

    try:
        return max(1, len(decoder_layers(sc.spec))), None
    except PlanError as exc:
        return 1, str(exc)


def layouts_on(sc: Scenario, gpus: int, stages: int | None = None) -> list[Layout]:
    """Every layout of both engines (those the scenario asks for) on exactly ``gpus`` GPUs: each split of the
    count into TP × PP × DP (PP up to ``stages``, the decoder layers), vLLM with the experts sliced or dealt
    whole, SGLang as replicas (``--dp-size``) or pipeline stages, with each ``--ep-size`` that divides TP, and
    with ``--enable-dp-attention`` (its DP groups inside the TP ranks: each ``--dp-size`` that divides TP). Which
    of them an engine refuses (a TP the heads, groups or experts do not divide, an empty stage) is the engine
    code's to say, in `plan`: nothing is left out here for a divisibility rule."""
    if stages is None:
        stages = max_stages(sc)[0]
    moe = "moe" in sc.spec.ffn
    out: list[Layout] = []
    for tp in _divisors(gpus):
        rest = gpus // tp
        eps = [e for e in _divisors(tp) if e > 1] if moe else []
        for pp in _divisors(rest):
            if pp > stages:
                continue
            dp = rest // pp
            if sc.wants("vllm"):
                out.append(Layout("vllm", tp, pp, dp))
                if moe and tp * dp > 1:
                    out.append(Layout("vllm", tp, pp, dp, expert_parallel=True))
            if sc.wants("sglang") and (pp == 1 or dp == 1):  # SGLang PP with DP or EP: not modelled
                out.append(Layout("sglang", tp, pp, dp))
                if pp == 1:
                    out += [Layout("sglang", tp, 1, dp, ep_size=e) for e in eps]
        if sc.wants("sglang") and rest == 1:
            for dp in _divisors(tp)[1:]:
                out.append(Layout("sglang", tp, 1, dp, dp_attention=True))
                out += [Layout("sglang", tp, 1, dp, ep_size=e, dp_attention=True) for e in eps]
    return sorted(dict.fromkeys(out), key=lambda lay: (lay.tp * lay.pp, lay.engine))


def layouts(sc: Scenario, max_gpus: int) -> list[Layout]:
    """Every layout of both engines on at most ``max_gpus`` GPUs, fewest first (``layouts_on`` each count)."""
    stages = max_stages(sc)[0]
    return [lay for n in range(1, max_gpus + 1) for lay in layouts_on(sc, n, stages)]


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
        kv = "fp8_e4m3"  # SGLang has no plain fp8 (hybridplan/build.py _kv_dtype)
    dtypes = replace(base.dtypes, kv=kv or base.dtypes.kv, ssm=v.ssm or base.dtypes.ssm)
    sc = replace(
        base,
        engine=lay.engine,
        tp=lay.tp,
        pp=lay.pp,
        dp=lay.dp,
        expert_parallel=lay.expert_parallel,
        ep_size=lay.ep_size,
        dp_attention=lay.dp_attention,
        dtypes=dtypes,
    )
    if lay.engine == "vllm":
        per = ceil(concurrency / lay.engines)
        sc = replace(sc, vllm=replace(sc.vllm, mode=v.mode or sc.vllm.mode, max_num_seqs=sc.vllm.max_num_seqs or per))
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


def _attention_tp(sc: Scenario) -> int:
    """The TP degree the layout's attention and recurrent layers are split over: the engine's own rule (SGLang's
    DP attention groups, hybridplan/engines/sglang/parallel.py ``attention_tp``)."""
    if sc.engine == "sglang" and sc.dp_attention:
        from hybridplan.engines.sglang.parallel import attention_tp

        return attention_tp(sc)
    return sc.tp


class _Refusals:
    """The engine's refusals that hold whatever the layout's other degrees, each asked once: the context as its
    maximum length (each engine's context.py ``refusal``: the model's config, the release and the context
    alone), vLLM's refusal of PP for a model or drafter without ``SupportsPP`` (once per PP degree), and a TP
    degree the model's layers refuse (their heads, KV heads, groups: each engine's ``footprint``, which checks
    every layer as the engines' ``divide()`` does, hybridplan/spec.py ``check_tp``). A TP refusal holds for every
    PP and DP of the degree, as a start fails on any rank that cannot split a layer it builds, and vLLM checks
    the attention heads of the whole model before any (vllm/config/model.py ``verify_with_parallel_config``,
    "Total number of attention heads ... must be divisible by tensor parallel size", 0.33.0). What depends on
    more than that (the experts over TP × DP or EP, an empty stage) the engine's fit says, layout by layout."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, int], str | None] = {}

    def reason(self, sc: Scenario) -> str | None:
        from hybridplan import engines

        key = (sc.engine, _attention_tp(sc))
        if key not in self.seen:
            engine = engines.get(sc.engine)
            one = replace(sc, tp=key[1], pp=1, dp=1, expert_parallel=False, ep_size=1, dp_attention=False)
            try:
                engine.check_served(one)
                engine.footprint(one)
                self.seen[key] = None
            except PlanError as exc:
                self.seen[key] = str(exc)
        if self.seen[key] is None:
            said = self._context(sc)
            if said is not None:
                return said
        if self.seen[key] is None and sc.pp > 1 and sc.engine == "vllm":
            return self._pipeline(sc)
        return self.seen[key]

    def _context(self, sc: Scenario) -> str | None:
        """The engine's refusal of the context as its maximum length (hybridplan/engines/*/context.py
        ``refusal``: the model's config, the release and the context alone), as its fit words it."""
        from importlib import import_module

        key = (f"{sc.engine} context", 0)
        if key not in self.seen:
            said = import_module(f"hybridplan.engines.{sc.engine}.context").refusal(sc)
            self.seen[key] = None if said is None else f"{'vLLM' if sc.engine == 'vllm' else 'SGLang'}: {said}"
        return self.seen[key]

    def _pipeline(self, sc: Scenario) -> str | None:
        """vLLM's refusal of PP for the model's class or its drafter's (hybridplan/engines/vllm/parallel.py
        ``check``), asked once per degree (its message names it)."""
        from hybridplan.engines.vllm.parallel import check

        key = ("vllm pp", sc.pp)
        if key not in self.seen:
            try:
                check(sc)
                self.seen[key] = None
            except PlanError as exc:
                self.seen[key] = str(exc)
        return self.seen[key]


class MemoryBound(Struct, frozen=True):
    """The most requests ``gpus`` GPUs of one engine could hold, whatever the layout: their memory, less the
    model's weights once, over the least one request of the context keeps. Every layout stores each weight on
    at least one rank (TP and PP split them, DP copies them), each request's full-attention KV at the context
    and its recurrent state on at least one rank (TP splits or replicates the heads, PP splits the layers), and
    no rank keeps more than the engine asks of its GPU; so a count this says cannot hold the target is not
    fitted. The figures are the engine's own: its waterfall's request (vLLM) or GPU total (SGLang) and weights
    at TP 1 (hybridplan/engines/*/memory.py), and its footprint of one sequence at TP 1 in each cache setting
    tried (sliding-window KV left out, as SGLang admits by state slots alone where no full-attention layer
    counts tokens). ``tests/test_plan.py`` holds it to a brute force over every layout of the counts below."""

    engine: str
    #: what each GPU can give at most: vLLM's request (total × utilization), SGLang's total, or the --kv-budget
    #: given for each
    per_gpu: int
    #: the whole model's weights, once (0 with --kv-budget, which is the caches' alone)
    weights: int
    #: the least one request of the context keeps, all layers (bytes), in each cache setting tried
    requests: tuple[tuple[Variant, int], ...]
    ctx: int
    given_budget: bool = False

    @property
    def request(self) -> int:
        return min(r for _, r in self.requests)

    def most(self, gpus: int, variant: Variant | None = None) -> float:
        """The most requests ``gpus`` GPUs could hold in the variant's cache dtypes (in the smallest, if None)."""
        need = self.request if variant is None else dict(self.requests)[variant]
        return max(0, gpus * self.per_gpu - self.weights) / need

    def reason(self, gpus: int, concurrency: int) -> str:
        gib = 1 << 30
        total = (
            f"{gpus} × the --kv-budget {self.per_gpu / gib:.2f} GiB"
            if self.given_budget
            else f"{gpus} GPU{'s' * (gpus > 1)} × {self.per_gpu / gib:.2f} GiB = {gpus * self.per_gpu / gib:,.2f} GiB"
            + (" (each GPU's total × gpu_memory_utilization)" if self.engine == "vllm" else "")
        )
        if gpus * self.per_gpu <= self.weights:
            return (
                f"the weights do not fit: the model's weights, {self.weights / gib:,.2f} GiB, are more than "
                f"{total} (not fitted: no layout of {gpus} GPUs can hold them)"
            )
        return (
            f"at most {self.most(gpus):,.1f} requests of {self.ctx:,} tokens fit, below {concurrency}: {total}, "
            f"less {self.weights / gib:,.2f} GiB of weights, over {self.request / (1 << 20):,.1f} MiB a request "
            "at least (its full-attention KV and recurrent state in the smallest cache dtypes tried; not "
            f"fitted: no layout of {gpus} GPUs can hold more)"
        )


def memory_bound(base: Scenario, engine: str, concurrency: int) -> MemoryBound | None:
    """The engine's ``MemoryBound`` for the scenario, or None where its figures cannot be had (a model it does
    not serve: each layout's fit then says so)."""
    from hybridplan import engines

    one = replace(base, engine=engine, tp=1, pp=1, dp=1, expert_parallel=False, ep_size=1, dp_attention=False)
    try:
        e = engines.get(engine)
        e.check_served(one)
        requests = []
        for v in variants(base, engine):
            fp = e.footprint(_scenario(base, Layout(engine, 1), v, concurrency))
            requests.append((v, fp.state_bytes + sum(g.bytes_at(base.ctx) for g in fp.kv if g.window is None)))
        if min(r for _, r in requests) <= 0:
            return None
        b = base.budget
        if b.kv_budget is not None:
            return MemoryBound(engine, b.kv_budget, 0, tuple(requests), base.ctx, given_budget=True)
        if engine == "vllm":
            from hybridplan.engines.vllm.memory import memory
        else:
            from hybridplan.engines.sglang.memory import memory
        water = memory(one)
    except PlanError:
        return None
    # what a rank can give: vLLM asks every rank for total × gpu_memory_utilization, whatever the layout
    # (hybridplan/engines/vllm/memory.py ``requested_memory``: the GPU, the utilization and the release alone);
    # SGLang's fraction is chosen by TP and more, so its GPU's total
    per_gpu = water.requested if engine == "vllm" else water.gpu_bytes
    # the stages' weights are the whole model's, each rounded down to a byte: a byte a stage of slack
    return MemoryBound(engine, per_gpu, max(0, water.term("weights") - DEFAULT_MAX_GPUS), tuple(requests), base.ctx)


def _cache_bytes(lay: Layout, part: object) -> int:
    """What the caches of all the layout's GPUs get together, as the engine's fit sized them: each pipeline
    stage's budget (vLLM's "Available KV cache memory", SGLang's R) on each of its TP ranks, on each engine."""
    if getattr(part, "stage_caches", None):  # vLLM with PP, DP or EP (hybridplan/engines/vllm/parallel.py)
        one = sum(c.budget for c in part.stage_caches) * lay.tp  # type: ignore[attr-defined]
    elif getattr(part, "stage_pools", None):  # SGLang with PP (hybridplan/engines/sglang/parallel.py)
        one = sum(p.fit.budget for p in part.stage_pools) * lay.tp  # type: ignore[attr-defined]
    else:  # one rank's budget, every rank of an engine alike
        one = part.budget * lay.tp * lay.pp  # type: ignore[attr-defined]
    return one * (1 if lay.dp_attention else lay.dp)


def _try(
    base: Scenario,
    lay: Layout,
    concurrency: int,
    refusals: _Refusals,
    bound: MemoryBound | None = None,
    whole_count: bool = True,
) -> Plan | Rejection:
    """The first variant of the layout that starts and holds the target, else why none does. A variant whose
    cache dtypes ``bound`` says the layout's GPUs cannot hold the target in (``whole_count``: all the count's
    memory; and once one variant is fitted, all that its fit left for the caches, which no variant changes) is
    not fitted."""
    from hybridplan.engines.common import Shortfall

    refused = refusals.reason(_scenario(base, lay, Variant(), concurrency))
    if refused is not None:
        return Rejection(lay, refused, kind=_refusal_kind(refused))
    first_reason: str | None = None
    first_kind = "does not start"
    most: float | None = None
    fitted = False
    unfitted = 0
    caches: int | None = None
    for v in variants(base, lay.engine):
        if bound is not None and (
            whole_count
            and bound.most(lay.gpus, v) < concurrency
            or caches is not None
            and caches / dict(bound.requests)[v] < concurrency
        ):
            unfitted += 1
            continue
        try:
            sc = _scenario(base, lay, v, concurrency)
            part = _fit(sc, lay)
        except PlanError as exc:
            if first_reason is None and (v == Variant() or not fitted):
                first_reason, first_kind = str(exc), _refusal_kind(str(exc))
            if v == Variant():
                break  # a refusal of the layout holds for every variant
            continue
        fitted = True
        if isinstance(part, Shortfall):
            # the variants change the cache dtypes and vLLM's Mamba cache mode, which no term of the memory down
            # to the caches depends on (hybridplan/engines/*/memory.py): the weights do not fit in any
            first_reason, first_kind = f"the weights do not fit: {part.problem}", "weights"
            break
        h = holds(lay, part, base.ctx)
        most = max(most or 0, h)
        if caches is None:
            caches = _cache_bytes(lay, part)
        if not part.starts:  # type: ignore[attr-defined]
            first_reason = first_reason or str(part.problem)  # type: ignore[attr-defined]
            continue
        if h >= concurrency:
            return Plan(lay, v, sc, part, h, concurrency)
    others = (
        (
            f"; {unfitted} other cache setting{'s' * (unfitted > 1)} not fitted: the GPUs' memory cannot hold "
            f"{concurrency} requests in {'them' if unfitted > 1 else 'it'}"
        )
        if unfitted
        else ""
    )
    if first_reason is None:
        if most is None:
            return Rejection(lay, "no variant starts" + others, None)
        return Rejection(
            lay,
            f"holds at most {most:.1f} requests of {base.ctx:,} tokens, below {concurrency}{others}",
            most,
            "too few",
        )
    if most is not None and most < concurrency:
        return Rejection(
            lay,
            f"holds at most {most:.1f} requests of {base.ctx:,} tokens, below {concurrency}{others} "
            f"(as fitted: {first_reason})",
            most,
            "too few",
        )
    return Rejection(lay, first_reason, most, first_kind)


def _refusal_kind(reason: str) -> str:
    """An engine fit's PlanError: the engine's refusal, or a layout hybridplan does not model (its messages say
    "not modelled")."""
    return "not modelled" if "not modelled" in reason else "refused"


def plan(
    base: Scenario,
    concurrency: int,
    max_gpus: int | None = None,
    best: int = 5,
    progress: Callable[[int, int], None] | None = None,
) -> PlanResult:
    """The ``best`` plans that start and hold ``concurrency`` requests of ``base.ctx`` on the fewest GPUs: each
    GPU count from one up, every layout of it (``layouts_on``), until a count holds the target."""
    if concurrency <= 0:
        raise PlanError(f"--concurrency must be positive, got {concurrency}")
    if base.budget.gpu is None and base.budget.gpu_mem is None:
        raise PlanError("give --gpu-type (or --gpu-mem): plan sizes each GPU's memory")
    cap = max_gpus or DEFAULT_MAX_GPUS
    stages, no_pp = max_stages(base)
    skipped: dict[str, str] = {"pipeline parallelism": no_pp} if no_pp else {}
    total = len(layouts(base, cap)) if progress is not None else 0
    refusals = _Refusals()
    bounds = {e: memory_bound(base, e, concurrency) for e in ("vllm", "sglang") if base.wants(e)}
    plans: list[Plan] = []
    rejected: list[Rejection] = []
    examples: set[str] = set()
    tried = 0
    # the largest count each engine's memory bound rules out: one layout of it is fitted all the same, for the
    # engine's own words on why it fails (and as a check on the bound: were it to start, it is a plan)
    last_short = {
        e: max((n for n in range(1, cap + 1) if b.most(n) < concurrency), default=0)
        for e, b in bounds.items()
        if b is not None
    }
    for n in range(1, cap + 1):
        lays = layouts_on(base, n, stages)
        if n in last_short.values():  # the example: the layout that splits the weights most, first
            lays.reverse()
        for lay in lays:
            b = bounds.get(lay.engine)
            refused = refusals.reason(_scenario(base, lay, Variant(), concurrency))
            if refused is not None:  # the engine's refusal of the TP for the model's layers, asked once
                tried += 1
                rejected.append(Rejection(lay, refused, kind=_refusal_kind(refused)))
                continue
            if b is not None and n <= last_short[lay.engine] and (n < last_short[lay.engine] or lay.engine in examples):
                rejected.append(
                    Rejection(
                        lay,
                        b.reason(n, concurrency),
                        None,
                        "weights" if n * b.per_gpu <= b.weights else "memory",
                        fitted=False,
                    )
                )
                continue
            if progress is not None:
                progress(tried, total)
            tried += 1
            got = _try(base, lay, concurrency, refusals, b, b is not None and n > last_short[lay.engine])
            if (
                b is not None
                and n == last_short[lay.engine]
                and not (isinstance(got, Rejection) and got.kind in ("refused", "not modelled"))
            ):
                examples.add(lay.engine)
            if isinstance(got, Rejection):
                rejected.append(got)
                continue
            twin = next(
                (
                    p
                    for p in plans
                    if p.layout.engine == lay.engine
                    and p.layout.gpus == lay.gpus
                    and p.variant == got.variant
                    and round(p.holds, 2) == round(got.holds, 2)
                    and (p.layout.tp, p.layout.pp, p.layout.dp) == (lay.tp, lay.pp, lay.dp)
                ),
                None,
            )
            if twin is None:  # else experts dealt whole where slicing them holds as much: the simpler one shown
                plans.append(got)
        if plans:  # the fewest GPUs that hold the target: larger counts are not tried
            break
    plans = [replace(p, rate=_rate(p)) for p in plans]
    plans.sort(key=rank_key)
    return PlanResult(base, concurrency, cap, tuple(plans[:best]), tuple(rejected), tried, tuple(skipped.items()))
