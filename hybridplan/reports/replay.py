"""`hybridplan replay`: a trace through each engine's prefix cache (vLLM per Mamba cache mode, SGLang per radix
strategy) and two baselines (the model's attention layers alone, an ideal cache), with what each request
reuses, what it saves, and why a request that shares a prefix reused less."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace

from hybridplan.errors import NotServed, PlanError
from hybridplan.records import frozen
from hybridplan.replay.loop import Policy, Run, replay
from hybridplan.replay.settings import ReplaySettings
from hybridplan.replay.trace import Request
from hybridplan.reports import SCHEMA_VERSION
from hybridplan.scenario import Scenario
from hybridplan.spec import ModelSpec

#: the most requests a what-if replay (a diagnostic's "by how much") reruns
WHAT_IF_LIMIT = 20_000
#: weight groups that do no per-token work in the layers (hybridplan/weights groups)
_NO_WORK = ("embedding", "lm_head", "norm", "vision", "mtp")
#: tokens FLOPs and hit rates are shown for per request in the JSON, at most
MAX_LISTED = 1_000_000


@frozen
class Flops:
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
    cfg = json.loads(spec.config_json or "{}")
    text = cfg.get("text_config") or cfg
    experts = text.get("num_experts") or text.get("n_routed_experts") or text.get("num_local_experts")
    active = text.get("num_experts_per_tok") or text.get("moe_top_k")
    share = active / experts if experts and active else 1.0
    params = sum(n * (share if g == "moe" else 1.0) for g, n in w.groups if g not in _NO_WORK)
    attn = 0
    for m in spec.attention:
        heads = getattr(m, "num_heads", 0)
        dim = getattr(m, "head_dim", 0) or (getattr(m, "kv_lora_rank", 0) + getattr(m, "qk_rope_head_dim", 0))
        attn += 4 * heads * dim
    note = "MoE experts counted at their active share (top-k of all)" if share != 1.0 else ""
    return Flops(2.0 * params, float(attn), note)


@frozen
class Row:
    engine: str
    label: str
    run: Run
    rules: dict
    flops_saved: float
    flops_total: float
    diagnostics: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        r = self.run
        return {"engine": self.engine, "label": self.label, "block": r.block, "requests": r.requests,
                "token_hit_rate": r.hit_rate, "requests_with_hit": r.with_hit, "prompt_tokens": r.prompt_tokens,
                "reused_tokens": r.reused_tokens, "computed_tokens": r.computed_tokens,
                "prefill_flops_saved": self.flops_saved, "prefill_flops_total": self.flops_total,
                "peak_states_held": r.peak_states, "peak_blocks_held": r.peak_blocks, "evictions": r.evictions,
                "refused": [{"request": i, "why": w} for i, w in r.refused], "reasons": dict(r.reasons),
                "rules": self.rules, "diagnostics": list(self.diagnostics)}


@frozen
class ReplayReport:
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

    def to_dict(self) -> dict:
        d: dict = {"schema_version": SCHEMA_VERSION, "model": self.spec.name, "trace": self.trace,
                   "concurrency": self.settings.concurrency, "rows": [r.to_dict() for r in self.rows]}
        if self.settings.per_request:
            first = self.rows[0].run.outcomes if self.rows else []
            d["requests"] = [
                {"index": o.index, "prompt_tokens": o.prompt, "shared_tokens": o.shared,
                 "reused": {r.label: r.run.outcomes[i].reused for r in self.rows if len(r.run.outcomes) > i},
                 "why": {r.label: r.run.outcomes[i].reason for r in self.rows if len(r.run.outcomes) > i}}
                for i, o in enumerate(first[:MAX_LISTED])]
        if self.skipped:
            d["skipped"] = dict(self.skipped)
        if self.notes:
            d["notes"] = list(self.notes)
        if self.sweep:
            d["sweep"] = {"over": self.sweep[0], "series": {k: [list(p) for p in v] for k, v in self.sweep[1]}}
        return d


# --- the policies a scenario runs ----------------------------------------------------------------------


def _need_budget(sc: Scenario, rs: ReplaySettings) -> None:
    if sc.budget.kv_budget is None and sc.budget.gpu_mem is None:
        raise PlanError("give the memory the caches get: --kv-budget, --gpu-type or --gpu-mem (or "
                        "--num-gpu-blocks-override and --max-total-tokens with --max-mamba-cache-size)")


#: blocks, tokens and state slots of a pool that never evicts (``policies(unbounded=True)``)
UNBOUNDED = 1 << 50


def policies(sc: Scenario, rs: ReplaySettings, unbounded: bool = False) -> tuple[list[tuple[str, Policy, dict]],
                                                                                 dict[str, str]]:
    """(engine, policy, rules) for every engine and mode the scenario asks for, the attention-only baseline, and
    the engines skipped with the reason. ``unbounded``: every pool holds all it is given (nothing is evicted, no
    budget is asked for), the geometry alone deciding what is reused (`prefix`)."""
    from hybridplan.engines.vllm import prefix_cache as vpc

    out: list[tuple[str, Policy, dict]] = []
    skipped: dict[str, str] = {}
    budget = UNBOUNDED if unbounded else None
    if sc.wants("vllm"):
        try:
            rel = sc.vllm.release
            rel.check_served(sc.spec)
            budget = budget or _vllm_budget(sc, rs)
            modes = rel.modes_for(sc.spec, sc.vllm.mode) if sc.spec.recurrent else ("none",)
            refused: dict[str, str] = {}  # a mode vLLM would not start with (the others still run)
            for mode in modes:
                try:
                    r = vpc.rules(sc, rs, mode, budget)
                except NotServed as exc:
                    refused[mode] = str(exc)
                    continue
                r = vpc.unbounded(r, UNBOUNDED) if unbounded else r
                label = r.label if sc.spec.recurrent else f"vLLM {rel.version} prefix caching"
                out.append(("vllm", Policy(label, vpc.Cache(r), r.block, r.max_model_len), r.to_dict()))
            if len(refused) == len(modes):
                raise NotServed("; ".join(refused.values()))
            skipped.update((f"vLLM {rel.version} {m}", why) for m, why in refused.items())
        except NotServed as exc:
            if sc.engine != "both":
                raise
            skipped["vllm"] = str(exc)
    if sc.wants("sglang") and sc.spec.recurrent:
        from hybridplan.engines.sglang import radix_cache as spc

        try:
            sc.sglang.release.check_served(sc.spec)  # before its strategy rules, which take a served model
            if not (unbounded or rs.max_total_tokens and sc.sglang.max_mamba_cache_size):
                _need_budget(sc, rs)
            sc_s = sc if sc.budget.kv_budget is not None or sc.budget.gpu_mem is not None else replace(
                sc, budget=replace(sc.budget, kv_budget=1 << 40))
            r = spc.rules(sc_s, rs)
            r = spc.unbounded(r, UNBOUNDED) if unbounded else r
            out.append(("sglang", Policy(r.label, spc.Cache(r), r.grid, r.max_model_len), r.to_dict()))
        except NotServed as exc:
            if sc.engine != "both":
                raise
            skipped["sglang"] = str(exc)
    if sc.spec.recurrent and sc.spec.attention:
        r = vpc.attention_rules(sc, budget if budget is not None else _vllm_budget(sc, rs))
        out.append(("baseline", Policy(r.label, vpc.Cache(r), r.block, r.max_model_len), r.to_dict()))
    return out, skipped


def _vllm_budget(sc: Scenario, rs: ReplaySettings) -> int:
    from hybridplan.engines.vllm.sizing import kv_budget

    if rs.num_gpu_blocks_override is not None and sc.budget.kv_budget is None and sc.budget.gpu_mem is None:
        return 1 << 50  # only the groups are read; the override sets the blocks
    _need_budget(sc, rs)
    return kv_budget(sc)


# --- diagnostics ---------------------------------------------------------------------------------------


def _median(run: Run, reason: str, what: str = "shared") -> int:
    vals = [getattr(o, what) for o in run.outcomes if o.reason == reason]
    return int(statistics.median(vals)) if vals else 0


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _requests(n: int) -> str:
    return f"{n:,} request" + ("" if n == 1 else "s")


def diagnose(engine: str, run: Run, rules: dict, sc: Scenario, rerun: Callable[..., Run | None]) -> list[str]:
    """A miss in words: what stood in the way, the flag that changes it and by how much (a what-if replay where
    the trace is short enough)."""
    out: list[str] = []
    c = run.reasons
    B = run.block
    grid = "block" if engine != "sglang" else "checkpoint grid"
    mode = rules.get("mode") or rules.get("strategy")
    if c.get("caching_off"):
        out.append(f"{_requests(c['caching_off'])}: prefix caching is off here ({mode}): no state is ever saved"
                   + ("; --mamba-cache-mode align (with --enable-prefix-caching) saves them" if engine == "vllm"
                      else "; --mamba-radix-cache-strategy extra_buffer (without --disable-radix-cache) saves them"))
    if c.get("block_past_max_len"):
        out.append(f"{_requests(c['block_past_max_len'])}: the {B:,}-token block is larger than max_model_len "
                   f"{sc.ctx:,}, so no prompt fills a block and prefix caching is inert (vllm#48401); "
                   "--mamba-cache-mode none frees the padding, or a larger --max-model-len makes blocks fill")
    if c.get("before_first_checkpoint"):
        x = _median(run, "before_first_checkpoint")
        msg = (f"{_requests(c['before_first_checkpoint'])}: the shared prefix (median {x:,} tokens) ends before the "
               f"first {grid} boundary at {B:,} tokens, where the first state can be saved")
        if engine == "vllm" and mode != "attention-only":
            alt = _half_ssm_block(sc, mode)
            if alt and alt < B:
                msg += (f"; --mamba-ssm-cache-dtype bfloat16 shrinks the Mamba page and the block to {alt:,} tokens"
                        + (", under the prefix" if alt <= x else ", still past the prefix"))
            else:
                msg += "; no flag takes the block below one Mamba page"
        out.append(msg)
    if c.get("checkpoint_past_divergence"):
        x = _median(run, "checkpoint_past_divergence")
        msg = (f"{_requests(c['checkpoint_past_divergence'])}: the earlier requests' states lie past where the "
               f"prompts diverge (median shared {x:,} tokens): the KV blocks match, the Mamba group has no state "
               "inside them, so the whole hit is dropped")
        if engine == "vllm" and mode == "align":
            from hybridplan.engines.vllm.prefix_cache import chunk_ending_at_block

            target = chunk_ending_at_block(x, B)
            rel = sc.vllm.release
            if rel.before("0.24.0"):
                alt = rerun(vllm_version="0.24.0")
                msg += ("; vLLM 0.24.0+ saves a state at the shared prefix on its second sighting (Marconi-style "
                        "admission, #37898)" + (f": {_pct(alt.hit_rate)} hit rate on this trace" if alt else ""))
            if target:
                alt = rerun(chunk=target)
                msg += (f"; --max-num-batched-tokens {target:,} puts a prefill chunk end at {target:,}"
                        + (f": {_pct(alt.hit_rate)} hit rate" if alt else ""))
        if engine == "sglang" and mode == "no_buffer":
            alt = rerun(radix="extra_buffer")
            msg += ("; --mamba-radix-cache-strategy extra_buffer saves a state at the branching point"
                    + (f": {_pct(alt.hit_rate)} hit rate" if alt else ""))
        out.append(msg)
    if c.get("not_admitted_yet"):
        how = ("Marconi-style admission, #37898" if engine == "vllm" else
               "extra_buffer's branching point, mamba_branching_seqlen")
        out.append(f"{_requests(c['not_admitted_yet'])}: not admitted yet — the shared prefix was seen once, so this "
                   "request saves a state where it branches off and the next request with the prefix reuses it "
                   f"({how}: the first hit is on the third sighting)")
    if c.get("retention"):
        alt = rerun(retention=B)
        out.append(f"{_requests(c['retention'])}: the state was computed but not kept under retention interval "
                   f"{rules.get('retention_interval')} ({rules.get('retention_source')}); "
                   f"--prefix-cache-retention-interval {B} keeps one per block"
                   + (f": {_pct(alt.hit_rate)} hit rate" if alt else ""))
    if c.get("evicted"):
        blocks = rules.get("num_gpu_blocks") or rules.get("mamba_pool_slots")
        flag = "--num-gpu-blocks-override" if engine != "sglang" else "--max-mamba-cache-size"
        alt = rerun(double=True)
        out.append(f"{_requests(c['evicted'])}: what they would have reused was evicted ({run.evictions:,} evictions "
                   f"from a pool of {blocks:,}); {flag} {2 * blocks:,} (twice the memory)"
                   + (f" gives {_pct(alt.hit_rate)} hit rate" if alt else ""))
    if c.get("speculative"):
        out.append(f"{_requests(c['speculative'])}: speculative decoding moved the state — EAGLE/MTP drops the last "
                   f"block of the attention hit ({B:,} tokens) and the last prefill checkpoint moves a block earlier; "
                   "decoding's states are not block-aligned")
    if run.refused:
        out.append(f"{_requests(len(run.refused))} refused: " + "; ".join(
            f"#{i}: {w}" for i, w in run.refused[:5]) + (" …" if len(run.refused) > 5 else ""))
    return out


def _half_ssm_block(sc: Scenario, mode: str) -> int | None:
    from hybridplan.engines.vllm.blocks import layout

    try:
        return layout(replace(sc, dtypes=replace(sc.dtypes, ssm="bfloat16")), mode).block_size
    except PlanError:
        return None


# --- the report ----------------------------------------------------------------------------------------


def _what_if(sc: Scenario, rs: ReplaySettings, factory: Callable[[], Iterable[Request]], engine: str,
             rules: dict, n: int) -> Callable[..., Run | None]:
    """A rerun of one policy with one thing changed, where the trace is short enough."""

    def rerun(vllm_version: str | None = None, chunk: int | None = None, retention: int | None = None,
              radix: str | None = None, double: bool = False) -> Run | None:
        if n > WHAT_IF_LIMIT:
            return None
        from hybridplan.engines.sglang.settings import SglangSettings
        from hybridplan.engines.vllm.releases import release
        from hybridplan.engines.vllm.settings import VllmSettings

        s, r = sc, rs
        if vllm_version:
            s = replace(s, vllm=VllmSettings(**{**s.vllm.__dict__, "release": release(vllm_version)}))
        if chunk:
            s = replace(s, chunk=chunk)
        if retention is not None:
            r = replace(r, retention_interval=retention)
        if radix:
            s = replace(s, sglang=SglangSettings(**{**s.sglang.__dict__, "radix": radix}))
        mode = rules.get("mode")
        try:
            if engine == "sglang":
                from hybridplan.engines.sglang import radix_cache as spc

                rr = spc.rules(s, r)
                if double:
                    rr = replace(rr, state_slots=2 * rr.state_slots, kv_tokens=2 * rr.kv_tokens)
                pol = Policy(rr.label, spc.Cache(rr), rr.grid, rr.max_model_len)
            else:
                from hybridplan.engines.vllm import prefix_cache as vpc

                budget = _vllm_budget(s, r)
                vr = vpc.attention_rules(s, budget) if mode == "attention-only" else vpc.rules(s, r, mode, budget)
                if double:
                    vr = replace(vr, num_blocks=2 * vr.num_blocks)
                pol = Policy(vr.label, vpc.Cache(vr), vr.block, vr.max_model_len)
        except PlanError:
            return None
        runs, _ = replay([pol], factory(), r.concurrency, keep_outcomes=False)
        return runs[pol.label]

    return rerun


def replay_report(sc: Scenario, rs: ReplaySettings, factory: Callable[[], Iterable[Request]], trace: str,
                  progress: Callable[[Iterator[Request]], Iterator[Request]] | None = None,
                  sweep_over: str | None = None) -> ReplayReport:
    """Replay ``factory()``'s requests through every engine and mode the scenario asks for."""
    chosen, skipped = policies(sc, rs)
    if not chosen:
        from hybridplan import engines

        raise engines.none_left(skipped, "model")
    reqs: Iterable[Request] = factory()
    if rs.limit is not None:
        reqs = _take(reqs, rs.limit)
    if progress is not None:
        reqs = progress(iter(reqs))
    runs, ideal = replay([p for _, p, _ in chosen], reqs, rs.concurrency, keep_outcomes=True)
    n = ideal.requests
    if n == 0:
        raise PlanError(f"{trace}: the trace holds no request")
    fl = flops(sc.spec)
    limited = (lambda: _take(factory(), rs.limit)) if rs.limit is not None else factory
    rows = []
    for engine, p, rules in chosen:
        run = runs[p.label]
        diag = diagnose(engine, run, rules, sc, _what_if(sc, rs, limited, engine, rules, n)) \
            if engine != "baseline" else []
        rows.append(Row(engine, p.label, run, rules, fl.saved(run), fl.total(run), tuple(diag)))
    rows.append(Row("baseline", ideal.label, ideal, {"mode": "ideal"}, fl.saved(ideal), fl.total(ideal)))
    notes = [fl.note] if fl.note else []
    if rs.concurrency > 1:
        notes.append(f"{rs.concurrency} requests in flight: a request's prefill is cached when it is admitted; "
                     "the engines' shared prefill budget (smaller chunks under load) is not modelled "
                     "(docs/replay.md)")
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
        if over == "block" and engine == "sglang":
            continue
        for k in steps:
            s, r = sc, rs
            try:
                if over == "budget":
                    if engine == "sglang":
                        from hybridplan.engines.sglang import radix_cache as spc

                        rr = spc.rules(s, r)
                        rr = replace(rr, state_slots=max(1, int(rr.state_slots * k)),
                                     kv_tokens=max(1, int(rr.kv_tokens * k)))
                        pol, x = Policy(rr.label, spc.Cache(rr), rr.grid, rr.max_model_len), k
                    else:
                        from hybridplan.engines.vllm import prefix_cache as vpc

                        budget = int(_vllm_budget(s, r) * k)
                        mode = rules["mode"]
                        vr = vpc.attention_rules(s, budget) if mode == "attention-only" else vpc.rules(s, r, mode,
                                                                                                     budget)
                        pol, x = Policy(vr.label, vpc.Cache(vr), vr.block, vr.max_model_len), k
                else:
                    from hybridplan.engines.vllm import prefix_cache as vpc
                    from hybridplan.engines.vllm.settings import VllmSettings

                    if rules["mode"] == "attention-only":
                        continue
                    s = replace(s, vllm=VllmSettings(**{**s.vllm.__dict__, "block_size": k * p.block}))
                    vr = vpc.rules(s, r, rules["mode"], _vllm_budget(s, r))
                    pol, x = Policy(vr.label, vpc.Cache(vr), vr.block, vr.max_model_len), vr.block
            except PlanError:
                continue
            runs, _ = replay([pol], factory(), r.concurrency, keep_outcomes=False)
            series.setdefault(p.label, []).append((float(x), runs[pol.label].hit_rate))
    return (over, tuple((k, tuple(v)) for k, v in series.items()))
