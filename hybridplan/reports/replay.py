"""`hybridplan replay`: a trace through each engine's prefix cache (vLLM per Mamba cache mode, SGLang per radix
strategy) and two baselines (the model's attention layers alone, an ideal cache), with what each request
reuses, what it saves, and why a request that shares a prefix reused less."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import TYPE_CHECKING

from msgspec import Struct

from hybridplan import engines
from hybridplan.errors import PlanError
from hybridplan.replay.advice import WHAT_IF_LIMIT
from hybridplan.replay.loop import Policy, Run, replay
from hybridplan.replay.settings import ReplaySettings
from hybridplan.replay.trace import Request
from hybridplan.reports import SCHEMA_VERSION
from hybridplan.scenario import Scenario
from hybridplan.spec import ModelSpec

if TYPE_CHECKING:
    from hybridplan.engines import ReplayAdvice

#: weight groups that do no per-token work in the layers (hybridplan/weights groups)
_NO_WORK = ("embedding", "lm_head", "norm", "vision", "mtp")
#: tokens FLOPs and hit rates are shown for per request in the JSON, at most
MAX_LISTED = 1_000_000


class Flops(Struct, frozen=True):
    """Prefill FLOPs per token from the config's counted weights: 2 per weight a token passes through (MoE
    experts scaled by the active share), plus attention's scores and values, 4·heads·head_dim per attention
    layer and earlier position."""

    per_token: float
    attention_per_position: float
    note: str

    def saved(self, run: Run) -> float:
        pairs = run.reused_sq - run.reused_tokens  # Σ h(h − 1)
        return self.per_token * run.reused_tokens + self.attention_per_position * pairs / 2

    def total(self, run: Run) -> float:
        return self.per_token * run.prompt_tokens


def flops(spec: ModelSpec) -> Flops:
    from hybridplan.weights import weights

    try:
        w = weights(spec)
    except PlanError as exc:
        return Flops(0.0, 0.0, f"FLOPs not counted: {exc}")
    experts, active = spec.facts.experts, spec.facts.experts_per_token
    share = active / experts if experts and active else 1.0
    params = sum(n * (share if g == "moe" else 1.0) for g, n in w.groups if g not in _NO_WORK)
    attn = 0
    for m in spec.attention:
        heads = getattr(m, "num_heads", 0)
        dim = getattr(m, "head_dim", 0) or (getattr(m, "kv_lora_rank", 0) + getattr(m, "qk_rope_head_dim", 0))
        attn += 4 * heads * dim
    note = "MoE experts counted at their active share (top-k of all)" if share != 1.0 else ""
    return Flops(2.0 * params, float(attn), note)


class Row(Struct, frozen=True):
    engine: str
    label: str
    run: Run
    rules: dict
    flops_saved: float
    flops_total: float
    diagnostics: tuple[str, ...] = ()
    #: the gap to the ideal cache, cause by cause (None: the ideal cache itself, or --no-gap)
    gap: Gap | None = None
    #: the most requests in flight the row replayed with (--concurrency capped at the engine's running limit)
    in_flight: int | None = None

    def to_dict(self) -> dict:
        r = self.run
        d = {
            "engine": self.engine,
            "label": self.label,
            "block": r.block,
            "requests": r.requests,
            "token_hit_rate": r.hit_rate,
            "requests_with_hit": r.with_hit,
            "prompt_tokens": r.prompt_tokens,
            "reused_tokens": r.reused_tokens,
            "computed_tokens": r.computed_tokens,
            "prefill_flops_saved": self.flops_saved,
            "prefill_flops_total": self.flops_total,
            "peak_states_held": r.peak_states,
            "peak_blocks_held": r.peak_blocks,
            "evictions": r.evictions,
            "refused": [{"request": i, "why": w} for i, w in r.refused],
            "reasons": dict(r.reasons),
            "rules": self.rules,
            "diagnostics": list(self.diagnostics),
        }
        if self.in_flight is not None:
            d["in_flight"] = self.in_flight
        if r.host is not None:  # SGLang's host tier: its hits beside the device's, and what it wrote
            d["host_tier"] = {**r.host, "device_hit_tokens": r.reused_tokens - r.host["host_hit_tokens"]}
        if self.gap is not None:
            d["gap"] = self.gap.to_dict()
        return d


class ReplayReport(Struct, frozen=True):
    spec: ModelSpec
    trace: str
    settings: ReplaySettings
    rows: tuple[Row, ...]
    skipped: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()
    #: hit rate per row label over a swept quantity (``--plot``)
    sweep: tuple[str, tuple[tuple[str, tuple[tuple[float, float], ...]], ...]] | None = None

    def row(self, label: str) -> Row:
        return next(r for r in self.rows if r.label == label)

    def request_lines(self) -> Iterator[dict]:
        """Per request: its index, prompt tokens, the tokens it shares with an earlier request (the ideal
        cache's, capped at prompt − 1), and per row what it reused and why (``REASONS``)."""
        first = self.rows[0].run.outcomes if self.rows else []
        for i, o in enumerate(first):
            yield {
                "index": o.index,
                "prompt_tokens": o.prompt,
                "shared_tokens": o.shared,
                "reused": {r.label: r.run.outcomes[i].reused for r in self.rows if len(r.run.outcomes) > i},
                "why": {r.label: r.run.outcomes[i].reason for r in self.rows if len(r.run.outcomes) > i},
            }

    def to_dict(self) -> dict:
        d: dict = {
            "schema_version": SCHEMA_VERSION,
            "model": self.spec.name,
            "trace": self.trace,
            "concurrency": self.settings.concurrency,
            "rows": [r.to_dict() for r in self.rows],
        }
        if self.settings.per_request:
            d["requests"] = list(islice(self.request_lines(), MAX_LISTED))
        if self.skipped:
            d["skipped"] = dict(self.skipped)
        if self.notes:
            d["notes"] = list(self.notes)
        if self.sweep:
            d["sweep"] = {"over": self.sweep[0], "series": {k: [list(p) for p in v] for k, v in self.sweep[1]}}
        return d


# --- the policies a scenario runs ----------------------------------------------------------------------


def _advice_of(engine: str) -> ReplayAdvice:
    """The replay advice of a row's engine (the baseline's: ``engines.BASELINE``'s)."""
    return engines.get(engines.BASELINE if engine == "baseline" else engine).replay_advice()


def policies(
    sc: Scenario, rs: ReplaySettings, unbounded: bool = False
) -> tuple[list[tuple[str, Policy, dict]], dict[str, str]]:
    """(engine, policy, rules) for every engine and mode the scenario asks for, the attention-only baseline, and
    the engines skipped with the reason. ``unbounded``: every pool holds all it is given (nothing is evicted, no
    budget is asked for), the geometry alone deciding what is reused (`prefix`)."""
    parts, not_served = engines.each(sc, lambda e: e.replay_advice().policies(sc, rs, unbounded))
    out: list[tuple[str, Policy, dict]] = []
    skipped: dict[str, str] = {}
    for name in engines.NAMES:
        if name in parts:
            rows, refused = parts[name]
            out += [(name, p, rules) for p, rules in rows]
            skipped.update(refused)
        elif name in not_served:
            skipped[name] = not_served[name]
    if sc.spec.recurrent and sc.spec.attention:
        base = _advice_of("baseline").baseline(sc, rs, unbounded)
        if base is not None:
            out.append(("baseline", *base))
    return out, skipped


# --- the report ----------------------------------------------------------------------------------------


def _replay_one(factory: Callable[[], Iterable[Request]], concurrency: int, n: int) -> Callable[[Policy], Run] | None:
    """A what-if replay of one changed policy over the trace, where the trace is short enough (None: it is not)."""
    if n > WHAT_IF_LIMIT:
        return None

    def one(pol: Policy) -> Run:
        runs, _ = replay([pol], factory(), concurrency, keep_outcomes=False)
        return runs[pol.label]

    return one


def _default_notes(sc: Scenario) -> list[str]:
    """Which prefill chunk (and GDN backend) each engine's defaults gave, where the flags left them to it."""
    return [n for e in engines.every() if sc.wants(e.name) for n in e.replay_advice().notes(sc)]


# --- the gap to the ideal cache, cause by cause ----------------------------------------------------------

#: the causes of a row's gap to the ideal cache, in the order they are lifted (docs/replay.md "The gap, cause by
#: cause"): each counterfactual keeps the ones lifted before it lifted
CAUSES = ("concurrency", "eviction", "max_model_len", "caching_off", "policy", "hash_unit", "grid")
#: each cause in words
CAUSE_TEXT = {
    "concurrency": "concurrency: requests in flight pin memory",
    "eviction": "eviction (memory): KV blocks, Mamba states and slots",
    "max_model_len": "requests at or past max_model_len",
    "caching_off": "prefix caching off",
    "policy": "checkpoint policy: where states are kept",
    "hash_unit": "attention hash unit: KV matched whole from the left",
    "grid": "checkpoint grid (block rounding)",
}


class Cause(Struct, frozen=True):
    """One cause of a row's gap: the tokens it costs, its share of the gap, and what recovers it."""

    name: str
    tokens: int
    share: float
    #: (the change, the token hit rate replayed with it), the changes tried that raise the row's rate, best first
    recover: tuple[tuple[str, float], ...] = ()
    #: the changes tried that do not raise it (never recommended)
    tried: tuple[str, ...] = ()
    #: why nothing is tried, where that is so
    note: str = ""

    def to_dict(self) -> dict:
        d: dict = {
            "tokens": self.tokens,
            "share": self.share,
            "recover": [{"change": c, "token_hit_rate": h} for c, h in self.recover],
        }
        if self.tried:
            d["tried_without_gain"] = list(self.tried)
        if self.note:
            d["note"] = self.note
        return d


class Gap(Struct, frozen=True):
    """A row's reused tokens against the ideal cache's over every request, split into ``CAUSES``."""

    ideal_tokens: int
    reused_tokens: int
    causes: tuple[Cause, ...]

    @property
    def tokens(self) -> int:
        return self.ideal_tokens - self.reused_tokens

    def cause(self, name: str) -> Cause:
        return next(c for c in self.causes if c.name == name)

    def to_dict(self) -> dict:
        return {
            "ideal_tokens": self.ideal_tokens,
            "reused_tokens": self.reused_tokens,
            "gap_tokens": self.tokens,
            "order": list(CAUSES),
            "lost": {c.name: c.to_dict() for c in self.causes},
        }


def _aside(p: Policy, label: str, rules, concurrency: int | None) -> Policy:
    block = rules.grid if hasattr(rules, "grid") else rules.block
    return Policy(label, type(p.cache)(rules), block, rules.max_model_len, concurrency, aside=True)


def lifts(engine: str, p: Policy) -> tuple[list[tuple[str, Policy | None]], int]:
    """The counterfactual replays of one row, a cause lifted at a time in ``CAUSES``' order on top of those
    before it (None where lifting it changes no rule), each a variant of the engine's own rules (its package's
    ``unbounded``, ``any_length``, ``caching_on``, ``every_checkpoint``); and the grid its states then sit on
    (``state_grid``), from which the last two causes are counted without a replay."""
    m = _advice_of(engine)
    r, c = p.cache.r, p.concurrency or 1
    out: list[tuple[str, Policy | None]] = []
    for cause in ("concurrency", "eviction", "max_model_len", "caching_off", "policy"):
        nr, new_c = (r, 1) if cause == "concurrency" else (m.lift(cause, r), c)
        if nr == r and new_c == c:
            out.append((cause, None))
            continue
        r, c = nr, new_c
        out.append((cause, _aside(p, f"{p.label} · {cause} lifted", r, c)))
    return out, m.state_grid(r)


def attribute(run: Run, ideal: Run, stages: list[tuple[str, Run | None]], grid: int) -> dict[str, int]:
    """Tokens lost per cause, telescoping from the row's reused tokens to the ideal cache's over every request
    (refused ones too): each replayed stage's gain over the one before, then, counted from the ideal cache's
    shared prefixes s (each capped at prompt − 1), Σ floor(s / grid)·grid less the last stage (a cache with a
    state at every grid point still matches KV whole from the left and never caches the last generated token:
    ``hash_unit``) and Σ s less that (``grid``)."""
    lost: dict[str, int] = {}
    v = run.reused_tokens
    for cause, st in stages:
        now = st.reused_tokens if st is not None else v
        lost[cause] = now - v
        v = now
    on_grid = sum(o.shared // grid * grid for o in ideal.outcomes)
    lost["hash_unit"] = on_grid - v
    lost["grid"] = sum(o.shared for o in ideal.outcomes) - on_grid
    return lost


def gaps(
    chosen: list[tuple[str, Policy, dict]],
    replayed: tuple[dict[str, Run], Run],
    stages: dict[str, tuple[list[tuple[str, Policy | None]], int]],
    sc: Scenario,
    rs: ReplaySettings,
    factory: Callable[[], Iterable[Request]] | None,
) -> dict[str, Gap]:
    """Each row's gap, cause by cause, and what recovers each (``replayed``: the rows' runs and the ideal cache's):
    the candidates of every row (each engine's ``candidates``: the same row's rules rebuilt with one change)
    replayed together in one more pass over the trace (``factory``; None: not replayed, the trace being too
    long)."""
    runs, ideal = replayed
    losts: dict[str, dict[str, int]] = {}
    cands: list[tuple[str, str, str, Policy]] = []
    for engine, p, rules in chosen:
        st, grid = stages[p.label]
        lost = attribute(runs[p.label], ideal, [(c, runs[q.label] if q is not None else None) for c, q in st], grid)
        losts[p.label] = lost
        if factory is not None and engine != "baseline":
            cands += [
                (p.label, cause, change, _aside(p, f"{p.label} · {change}", r, p.concurrency))
                for cause, change, r in _advice_of(engine).candidates(p, rules, runs[p.label], lost, sc, rs)
            ]
    alt: dict[str, Run] = {}
    if cands:
        alt, _ = replay([q for *_, q in cands], factory(), rs.concurrency, keep_outcomes=False)
    out: dict[str, Gap] = {}
    ideal_tokens = sum(o.shared for o in ideal.outcomes)
    for engine, p, rules in chosen:
        run, lost = runs[p.label], losts[p.label]
        gap = ideal_tokens - run.reused_tokens
        causes = []
        for cause in CAUSES:
            mine = [(ch, alt[q.label].hit_rate) for lab, c, ch, q in cands if lab == p.label and c == cause]
            # best first; between equal rates the one tried first (the smaller change: 2× the memory before 8×)
            better = tuple(sorted(((ch, h) for ch, h in mine if h > run.hit_rate), key=lambda x: -x[1]))
            worse = tuple(ch for ch, h in mine if h <= run.hit_rate)
            note = ""
            if lost[cause] > 0 and not mine:
                note = _no_flag(engine, cause, rules, factory is None)
            elif cause == "eviction" and not lost[cause] and run.evictions:
                note = f"{run.evictions:,} evictions, yet a pool that never evicts reuses no more here"
            causes.append(Cause(cause, lost[cause], lost[cause] / gap if gap else 0.0, better, worse, note))
        out[p.label] = Gap(ideal_tokens, run.reused_tokens, tuple(causes))
    return out


def _no_flag(engine: str, cause: str, rules: dict, too_long: bool) -> str:
    if too_long:
        return f"not replayed: the trace is longer than {WHAT_IF_LIMIT:,} requests (use --limit)"
    if rules.get("mode") == "attention-only":
        return "a baseline: no engine flag"
    return _advice_of(engine).no_flag(cause)


def replay_report(
    sc: Scenario,
    rs: ReplaySettings,
    factory: Callable[[], Iterable[Request]],
    trace: str,
    progress: Callable[[Iterator[Request]], Iterator[Request]] | None = None,
    sweep_over: str | None = None,
) -> ReplayReport:
    """Replay ``factory()``'s requests through every engine and mode the scenario asks for."""
    chosen, skipped = policies(sc, rs)
    if not chosen:
        raise engines.none_left(skipped, "model")
    reqs: Iterable[Request] = factory()
    if rs.limit is not None:
        reqs = _take(reqs, rs.limit)
    if progress is not None:
        reqs = progress(iter(reqs))
    stages = {p.label: lifts(engine, p) for engine, p, _ in chosen} if rs.gap else {}
    extra = [q for st, _ in stages.values() for _, q in st if q is not None]
    runs, ideal = replay([p for _, p, _ in chosen] + extra, reqs, rs.concurrency, keep_outcomes=True)
    n = ideal.requests
    if n == 0:
        raise PlanError(f"{trace}: the trace holds no request")
    fl = flops(sc.spec)
    limited = (lambda: _take(factory(), rs.limit)) if rs.limit is not None else factory
    found = gaps(chosen, (runs, ideal), stages, sc, rs, limited if n <= WHAT_IF_LIMIT else None) if rs.gap else {}
    rows = []
    for engine, p, rules in chosen:
        run = runs[p.label]
        diag = (
            _advice_of(engine).diagnose(run, rules, sc, rs, _replay_one(limited, p.concurrency or rs.concurrency, n))
            if engine != "baseline"
            else []
        )
        rows.append(
            Row(
                engine,
                p.label,
                run,
                rules,
                fl.saved(run),
                fl.total(run),
                tuple(diag),
                found.get(p.label),
                p.concurrency,
            )
        )
    rows.append(Row("baseline", ideal.label, ideal, {"mode": "ideal"}, fl.saved(ideal), fl.total(ideal)))
    notes = [fl.note] if fl.note else []
    capped = [
        (p.label, p.concurrency) for _, p, _ in chosen if p.concurrency is not None and p.concurrency < rs.concurrency
    ]
    if capped:
        by: dict[int, list[str]] = {}
        for label, c in capped:
            by.setdefault(c, []).append(label)
        notes.append(
            f"--concurrency {rs.concurrency:,} is past the engines' running limit (vLLM --max-num-seqs, "
            "SGLang --max-running-requests), so the rest wait in the queue: "
            + "; ".join(
                f"{', '.join(labels)} run{'s' if len(labels) == 1 else ''} {c:,} at once" for c, labels in by.items()
            )
        )
    if rs.concurrency > 1:
        notes.append(
            f"{rs.concurrency} requests in flight: SGLang's rows run its scheduler loop (prefills share "
            "the chunk budget of a step, requests of one batch cannot hit each other); vLLM's cache a "
            "request's prefill when it is admitted, its shared prefill budget not modelled (docs/replay.md)"
        )
    notes += _default_notes(sc)
    if any(o.reason == "refused" for o in ideal.outcomes) and found:
        notes.append("the gap is to the ideal cache over every request, those refused at max_model_len too")
    sweep = _sweep(sc, rs, limited, chosen, sweep_over, n) if sweep_over else None
    return ReplayReport(sc.spec, trace, rs, tuple(rows), tuple(skipped.items()), tuple(notes), sweep)


def _take(reqs: Iterable[Request], n: int) -> Iterator[Request]:
    for i, r in enumerate(reqs):
        if i >= n:
            return
        yield r


#: budget multiples a ``--plot`` over the budget sweeps
BUDGET_STEPS = (0.0625, 0.125, 0.25, 0.5, 1.0, 2.0)
#: block multiples a ``--plot`` over the block sweeps
BLOCK_STEPS = (1, 2, 3, 4, 6, 8)


def _sweep(sc: Scenario, rs: ReplaySettings, factory, chosen, over: str, n: int):
    """Hit rate per row against the budget (multiples of the one given) or vLLM's block (multiples of the
    resolved one, as --block-size)."""
    if n > WHAT_IF_LIMIT:
        raise PlanError(f"--plot replays the trace once per point: at most {WHAT_IF_LIMIT:,} requests (use --limit)")
    series: dict[str, list[tuple[float, float]]] = {}
    for engine, p, rules in chosen:
        steps = BUDGET_STEPS if over == "budget" else BLOCK_STEPS
        for k in steps:
            try:
                point = _advice_of(engine).sweep_point(sc, rs, rules, over, k, p.block)
            except PlanError:
                continue
            if point is None:
                continue
            pol, x = point
            runs, _ = replay([pol], factory(), p.concurrency or rs.concurrency, keep_outcomes=False)
            series.setdefault(p.label, []).append((float(x), runs[pol.label].hit_rate))
    return (over, tuple((k, tuple(v)) for k, v in series.items()))
