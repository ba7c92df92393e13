"""SGLang's part of `replay` (``ReplayAdvice`` in hybridplan/engines/__init__.py): its row (the radix strategy
asked for), what stood in its way in words with the flag that changes it, the flag changes that may recover a
cause of the gap, and the budget sweep. The cache rules themselves are in radix_cache.py (with the releases and
SGLang files they follow)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from msgspec.structs import replace

from hybridplan.engines.sglang import radix_cache as spc
from hybridplan.errors import PlanError
from hybridplan.replay import advice as adv
from hybridplan.replay.advice import UNBOUNDED
from hybridplan.replay.loop import Policy

if TYPE_CHECKING:
    from hybridplan.replay.loop import Run
    from hybridplan.replay.settings import ReplaySettings
    from hybridplan.scenario import Scenario

#: how SGLang admits a state it has seen once (radix_cache.py)
ADMISSION = "extra_buffer's branching point, mamba_branching_seqlen"


def running_limit(sc: Scenario) -> int:
    """SGLang's ``max_running_requests``: given, or what its pools admit (hybridplan/engines/sglang/pool.py
    ``fit``). More in flight wait in its queue."""
    if sc.sglang.max_running_requests is not None:
        return sc.sglang.max_running_requests
    from hybridplan.engines.sglang.pool import fit

    f = fit(sc)
    return max(getattr(f, "max_running_requests", 0), 1) if hasattr(f, "pool") else 1 << 30


def _any_budget(s: Scenario) -> Scenario:
    """The scenario, with a budget where none is given (the pools then come from --max-total-tokens and
    --max-mamba-cache-size)."""
    return (
        s
        if s.budget.kv_budget is not None or s.budget.gpu_mem is not None
        else replace(s, budget=replace(s.budget, kv_budget=1 << 40))
    )


def _policy(r: spc.Rules, concurrency: int | None = None) -> Policy:
    """The rules' radix cache: with its host tier where HiCache is on (radix_cache.py ``cache``), else behind
    SGLang's scheduler loop (scheduler.py: prefill batches, chunks, when each request is cached)."""
    if r.write_policy is not None:
        return Policy(r.label, spc.cache(r), r.grid, r.max_model_len, concurrency)
    from hybridplan.engines.sglang.scheduler import Scheduled

    return Policy(r.label, Scheduled(r), r.grid, r.max_model_len, concurrency)


def policies(sc: Scenario, rs: ReplaySettings, unbounded: bool) -> tuple[list[tuple[Policy, dict]], dict[str, str]]:
    """The row of the radix strategy asked for (none for a model with no recurrent layer: SGLang's hybrid
    radix cache is for those); ``NotServed`` where SGLang does not run the model."""
    if not sc.spec.recurrent:
        return [], {}
    sc.sglang.release.check_served(sc.spec)  # before its strategy rules, which take a served model
    if not (unbounded or rs.max_total_tokens and sc.sglang.max_mamba_cache_size):
        adv.need_budget(sc, rs)
    sc_s = _any_budget(sc)
    r = spc.rules(sc_s, rs)
    r = spc.unbounded(r, UNBOUNDED) if unbounded else r
    return [(_policy(r, min(rs.concurrency, running_limit(sc_s))), r.to_dict())], {}


def baseline(sc: Scenario, rs: ReplaySettings, unbounded: bool) -> tuple[Policy, dict] | None:
    """None: the attention-only baseline is vLLM's (``engines.BASELINE``)."""
    return None


def _radix(sc: Scenario, name: str) -> Scenario:
    return replace(sc, sglang=replace(sc.sglang, radix=name))


def _rerun(sc: Scenario, rs: ReplaySettings, replay_one: Callable[[Policy], Run] | None, **change) -> Run | None:
    """The row's policy with one thing changed (``retention``, ``radix``, ``double``: twice the pools), replayed
    (None: the trace is too long, or SGLang refuses it)."""
    if replay_one is None:
        return None
    retention, radix, double = change.get("retention"), change.get("radix"), change.get("double", False)
    s, r = sc, rs
    if retention is not None:
        r = replace(r, retention_interval=retention)
    if radix:
        s = _radix(s, radix)
    try:
        rr = spc.rules(s, r)
        if double:
            rr = replace(rr, state_slots=2 * rr.state_slots, kv_tokens=2 * rr.kv_tokens)
        pol = _policy(rr)
    except PlanError:
        return None
    return replay_one(pol)


def diagnose(
    run: Run, rules: dict, sc: Scenario, rs: ReplaySettings, replay_one: Callable[[Policy], Run] | None
) -> list[str]:
    """An SGLang row's misses in words: what stood in the way, the flag that changes it and by how much (a
    what-if replay with ``replay_one``; None: the trace is too long to replay)."""
    c, B = run.reasons, run.block
    mode = rules.get("mode") or rules.get("strategy")

    def rerun(**change) -> Run | None:
        return _rerun(sc, rs, replay_one, **change)

    out: list[str] = []
    if c.get("caching_off"):
        out.append(
            adv.caching_off(
                c, mode, "; --mamba-radix-cache-strategy extra_buffer (without --disable-radix-cache) saves them"
            )
        )
    if c.get("block_past_max_len"):
        out.append(adv.block_past_max_len(c, B, sc.ctx))
    if c.get("before_first_checkpoint"):
        out.append(adv.before_first_checkpoint(c, run, "checkpoint grid")[0])
    if c.get("checkpoint_past_divergence"):
        msg, _ = adv.past_divergence(c, run)
        if mode == "no_buffer":
            msg += adv.advice(
                "--mamba-radix-cache-strategy extra_buffer saves a state at the branching point",
                rerun(radix="extra_buffer"),
                run,
            )
        out.append(msg)
    out += adv.common(run, rules, ADMISSION, "--max-mamba-cache-size", rerun)
    from hybridplan.engines.sglang.hicache import diagnose as host_tier

    return out + host_tier(run, rules)


def candidates(
    p: Policy, rules: dict, run: Run, lost: dict[str, int], sc: Scenario, rs: ReplaySettings
) -> list[tuple[str, str, object]]:
    """(cause, change, rules) for each SGLang flag or memory that may recover a cause that costs tokens: the
    row's rules rebuilt with that change (those SGLang refuses left out)."""
    out: list[tuple[str, str, object]] = []
    mode = rules.get("mode") or rules.get("strategy")
    if mode == "attention-only":
        return out

    def add(cause: str, change: str, build: Callable[[], object]) -> None:
        try:
            out.append((cause, change, build()))
        except PlanError:
            return

    r0 = p.cache.r

    def sg(s: Scenario = sc, r: ReplaySettings = rs):
        return spc.rules(_any_budget(s), r)

    if lost.get("eviction", 0) > 0:
        for k in (2, 8):
            add(
                "eviction",
                f"--max-total-tokens {k * r0.kv_tokens} --max-mamba-cache-size {k * r0.state_slots} ({k}× the memory)",
                lambda k=k: replace(
                    r0,
                    kv_tokens=k * r0.kv_tokens,  # type: ignore[misc]  # a default argument binds the loop's value
                    state_slots=k * r0.state_slots,
                ),
            )
    if lost.get("max_model_len", 0) > 0 and run.longest_refused:
        m = run.longest_refused + 1
        add("max_model_len", f"--context-length {m}", lambda: sg(replace(sc, ctx=m)))
    if lost.get("caching_off", 0) > 0:
        add("caching_off", "--mamba-radix-cache-strategy extra_buffer", lambda: sg(_radix(sc, "extra_buffer")))
    if lost.get("policy", 0) > 0:
        if mode == "no_buffer":
            add("policy", "--mamba-radix-cache-strategy extra_buffer", lambda: sg(_radix(sc, "extra_buffer")))
        if rs.mamba_max_states_per_path != -1:
            add("policy", "--mamba-max-states-per-path -1", lambda: sg(r=replace(rs, mamba_max_states_per_path=-1)))
    return out


def no_flag(cause: str) -> str:
    if cause == "grid":
        return "no flag moves SGLang's checkpoint grid (lcm of its chunk and page)"
    return adv.NO_FLAG.get(cause, adv.NO_FLAG_OTHER)


def lift(cause: str, r: spc.Rules) -> spc.Rules:
    """The rules with one cause of the gap lifted (radix_cache.py's own variants)."""
    return adv.lift(cause, r, spc)


def state_grid(r: spc.Rules) -> int:
    return spc.state_grid(r)


def sweep_point(
    sc: Scenario, rs: ReplaySettings, rules: dict, over: str, k: float, block: int
) -> tuple[Policy, float] | None:
    """The row's policy at one point of a ``--plot`` over the budget (its pools times ``k``); None over the
    block, which SGLang's checkpoint grid does not take."""
    if over != "budget":
        return None
    rr = spc.rules(sc, rs)
    rr = replace(rr, state_slots=max(1, int(rr.state_slots * k)), kv_tokens=max(1, int(rr.kv_tokens * k)))
    return _policy(rr), k


def notes(sc: Scenario) -> list[str]:
    """Which prefill chunk SGLang's defaults gave, where the flags left it to them."""
    from hybridplan.engines.sglang import defaults

    return list(filter(None, [defaults.note(sc)]))
