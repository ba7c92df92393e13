"""vLLM's part of `replay` (``ReplayAdvice`` in hybridplan/engines/__init__.py): its rows (one per Mamba cache
mode the release has), the attention-only baseline, what stood in a row's way in words with the flag that
changes it, the flag changes that may recover a cause of the gap, and the sweeps. The cache rules themselves
are in prefix_cache.py (with the releases and vLLM files they follow)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from msgspec.structs import replace

from hybridplan.engines.vllm import prefix_cache as vpc
from hybridplan.errors import NotServed, PlanError
from hybridplan.replay import advice as adv
from hybridplan.replay.advice import UNBOUNDED
from hybridplan.replay.loop import Policy

if TYPE_CHECKING:
    from hybridplan.replay.loop import Run
    from hybridplan.replay.settings import ReplaySettings
    from hybridplan.scenario import Scenario

#: how vLLM admits a state it has seen once (from 0.24.0: prefix_cache.py ``Rules.admission``)
ADMISSION = "Marconi-style admission, #37898"
#: the release whose admission saves a state at a shared prefix on its second sighting (prefix_cache.py)
ADMITTING_RELEASE = "0.24.0"


def running_limit(sc: Scenario) -> int:
    """vLLM's ``--max-num-seqs`` (its default for the GPU, hybridplan/engines/vllm/sizing.py ``max_num_seqs``):
    more in flight wait in its queue."""
    from hybridplan.engines.vllm.sizing import max_num_seqs

    return max_num_seqs(sc)


def budget(sc: Scenario, rs: ReplaySettings) -> int:
    from hybridplan.engines.vllm.sizing import kv_budget

    if rs.num_gpu_blocks_override is not None and sc.budget.kv_budget is None and sc.budget.gpu_mem is None:
        return 1 << 50  # only the groups are read; the override sets the blocks
    adv.need_budget(sc, rs)
    return kv_budget(sc)


def _policy(r: vpc.Rules, label: str | None = None, concurrency: int | None = None) -> Policy:
    """A row's policy: the prefix cache behind vLLM's scheduler loop (scheduler.py: the shared token budget, where
    each chunk ends, what a lookup sees of the requests still running)."""
    from hybridplan.engines.vllm.scheduler import Scheduled

    return Policy(label or r.label, Scheduled(r), r.block, r.max_model_len, concurrency)


def policies(sc: Scenario, rs: ReplaySettings, unbounded: bool) -> tuple[list[tuple[Policy, dict]], dict[str, str]]:
    """A row per Mamba cache mode the release runs the model with (one prefix-caching row for a model with no
    recurrent layer), and the modes it would not start with, with vLLM's reason (``NotServed``: none starts)."""
    rel = sc.vllm.release
    rel.check_served(sc.spec)
    kv = UNBOUNDED if unbounded else budget(sc, rs)
    modes = rel.modes_for(sc.spec, sc.vllm.mode) if sc.spec.recurrent else ("none",)
    out: list[tuple[Policy, dict]] = []
    refused: dict[str, str] = {}  # a mode vLLM would not start with (the others still run)
    for mode in modes:
        try:
            r = vpc.rules(sc, rs, mode, kv)
        except NotServed as exc:
            refused[mode] = str(exc)
            continue
        r = vpc.unbounded(r, UNBOUNDED) if unbounded else r
        label = r.label if sc.spec.recurrent else f"vLLM {rel.version} prefix caching"
        out.append((_policy(r, label, min(rs.concurrency, running_limit(sc))), r.to_dict()))
    if len(refused) == len(modes):
        raise NotServed("; ".join(dict.fromkeys(refused.values())))  # one reason once, whatever the modes
    return out, {f"vLLM {rel.version} {m}": why for m, why in refused.items()}


def baseline(sc: Scenario, rs: ReplaySettings, unbounded: bool) -> tuple[Policy, dict] | None:
    """The model's attention layers alone, in vLLM's KV blocks (prefix_cache.py ``attention_rules``)."""
    r = vpc.attention_rules(sc, UNBOUNDED if unbounded else budget(sc, rs))
    return _policy(r, concurrency=min(rs.concurrency, running_limit(sc))), r.to_dict()


def _half_ssm_block(sc: Scenario, mode: str) -> int | None:
    from hybridplan.engines.vllm.blocks import layout

    try:
        return layout(replace(sc, dtypes=replace(sc.dtypes, ssm="bfloat16")), mode).block_size
    except PlanError:
        return None


def _rerun(
    sc: Scenario, rs: ReplaySettings, rules: dict, replay_one: Callable[[Policy], Run] | None, **change
) -> Run | None:
    """The row's policy with one thing changed (``vllm_version``, ``chunk``, ``retention``, ``double``: twice the
    blocks), replayed (None: the trace is too long, or vLLM refuses it)."""
    if replay_one is None:
        return None
    from hybridplan.engines.vllm.releases import release

    vllm_version, chunk, retention = change.get("vllm_version"), change.get("chunk"), change.get("retention")
    double = change.get("double", False)
    s, r = sc, rs
    if vllm_version:
        s = replace(s, vllm=replace(s.vllm, release=release(vllm_version)))
    if chunk:
        s = replace(s, chunk=chunk)
    if retention is not None:
        r = replace(r, retention_interval=retention)
    mode = rules.get("mode")
    try:
        kv = budget(s, r)
        vr = vpc.attention_rules(s, kv) if mode == "attention-only" else vpc.rules(s, r, mode, kv)
        if double:
            vr = replace(vr, num_blocks=2 * vr.num_blocks)
        pol = _policy(vr)
    except PlanError:
        return None
    return replay_one(pol)


def diagnose(
    run: Run, rules: dict, sc: Scenario, rs: ReplaySettings, replay_one: Callable[[Policy], Run] | None
) -> list[str]:
    """A vLLM row's misses in words: what stood in the way, the flag that changes it and by how much (a what-if
    replay with ``replay_one``; None: the trace is too long to replay)."""
    c, B = run.reasons, run.block
    mode = rules.get("mode") or rules.get("strategy")

    def rerun(**change) -> Run | None:
        return _rerun(sc, rs, rules, replay_one, **change)

    out: list[str] = []
    if c.get("caching_off"):
        out.append(adv.caching_off(c, mode, "; --mamba-cache-mode align (with --enable-prefix-caching) saves them"))
    if c.get("block_past_max_len"):
        out.append(adv.block_past_max_len(c, B, sc.ctx))
    if c.get("before_first_checkpoint"):
        msg, x = adv.before_first_checkpoint(c, run, "block")
        if mode != "attention-only":
            alt = _half_ssm_block(sc, mode)
            if alt and alt < B:
                msg += f"; --mamba-ssm-cache-dtype bfloat16 shrinks the Mamba page and the block to {alt:,} tokens" + (
                    ", under the prefix" if alt <= x else ", still past the prefix"
                )
            else:
                msg += "; no flag takes the block below one Mamba page"
        out.append(msg)
    if c.get("checkpoint_past_divergence"):
        msg, x = adv.past_divergence(c, run)
        if mode == "align":
            target = vpc.chunk_ending_at_block(x, B)
            if sc.vllm.release.before(ADMITTING_RELEASE):
                msg += adv.advice(
                    f"vLLM {ADMITTING_RELEASE}+ saves a state at the shared prefix on its second "
                    f"sighting ({ADMISSION})",
                    rerun(vllm_version=ADMITTING_RELEASE),
                    run,
                )
            if target:
                msg += adv.advice(
                    f"--max-num-batched-tokens {target} puts a prefill chunk end at {target:,}",
                    rerun(chunk=target),
                    run,
                )
        out.append(msg)
    out += adv.common(run, rules, ADMISSION, "--num-gpu-blocks-override", rerun)
    return out


def candidates(
    p: Policy, rules: dict, run: Run, lost: dict[str, int], sc: Scenario, rs: ReplaySettings
) -> list[tuple[str, str, object]]:
    """(cause, change, rules) for each vLLM flag or memory that may recover a cause that costs tokens: the row's
    rules rebuilt with that change (those vLLM refuses left out)."""
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
    rel = sc.vllm.release

    def vl(s: Scenario = sc, r: ReplaySettings = rs, m: str = mode):
        return vpc.rules(s, r, m, budget(s, r))

    B = r0.block
    if lost.get("eviction", 0) > 0:
        for k in (2, 8):
            add(
                "eviction",
                f"--num-gpu-blocks-override {k * r0.num_blocks} ({k}× the KV memory)",
                lambda k=k: replace(r0, num_blocks=k * r0.num_blocks),  # type: ignore[misc]  # binds the loop's k
            )
    if lost.get("max_model_len", 0) > 0 and run.longest_refused:
        m = run.longest_refused + 1
        add("max_model_len", f"--max-model-len {m}", lambda: vl(replace(sc, ctx=m)))
    if lost.get("caching_off", 0) > 0:
        add("caching_off", "--mamba-cache-mode align", lambda: vl(m="align"))
    if lost.get("policy", 0) > 0 and mode != "none":
        if mode != "all" and "all" in rel.modes_for(sc.spec, None):
            add("policy", "--mamba-cache-mode all", lambda: vl(m="all"))
        if rules.get("retention_interval") is not None:
            # the retention interval: an environment variable before 0.29.0, a flag from it (prefix_cache.py
            # ``retention``)
            flag = (
                "VLLM_PREFIX_CACHE_RETENTION_INTERVAL="
                if rel.before("0.29.0")
                else "--prefix-cache-retention-interval "
            )
            add("policy", f"{flag}{B}", lambda: vl(r=replace(rs, retention_interval=B)))
        if mode == "align" and r0.eagle and rel.at_least("0.30.0") and not r0.shared_prefix_checkpoint:
            # the shared-prefix checkpoint with EAGLE: 0.30.0+, renamed in 0.31.0 (prefix_cache.py)
            flag = (
                "--enable-mamba-fine-grained-prefix-cache"
                if rel.before("0.31.0")
                else "--enable-mamba-shared-prefix-checkpoint"
            )
            for u in (64, 16):
                if B % u == 0 and u < B:
                    add(
                        "policy",
                        f"{flag} --prefix-match-unit {u}",
                        lambda u=u: vl(  # type: ignore[misc]  # a default argument binds the loop's u
                            r=replace(rs, shared_prefix_checkpoint=True, prefix_match_unit=u)
                        ),
                    )
        x = adv.median(run, "checkpoint_past_divergence")
        target = vpc.chunk_ending_at_block(x, B) if mode == "align" else 0
        if target and target != sc.chunk:
            add("policy", f"--max-num-batched-tokens {target}", lambda: vl(replace(sc, chunk=target)))
    if lost.get("grid", 0) > 0 and mode != "none":
        alt = _half_ssm_block(sc, mode)
        if alt and alt < B:
            add(
                "grid",
                "--mamba-ssm-cache-dtype bfloat16",
                lambda: vl(replace(sc, dtypes=replace(sc.dtypes, ssm="bfloat16"))),
            )
        if r0.unit == B and rel.at_least("0.26.0") and mode == "align":  # --prefix-match-unit: 0.26.0+
            for u in (64, 16):
                if B % u == 0 and u < B:
                    add("grid", f"--prefix-match-unit {u}", lambda u=u: vl(r=replace(rs, prefix_match_unit=u)))  # type: ignore[misc]  # a default argument binds the loop's value
    return out


def no_flag(cause: str) -> str:
    if cause == "grid":
        return "no flag moves the grid below one Mamba page"
    return adv.NO_FLAG.get(cause, adv.NO_FLAG_OTHER)


def lift(cause: str, r: vpc.Rules) -> vpc.Rules:
    """The rules with one cause of the gap lifted (prefix_cache.py's own variants)."""
    return adv.lift(cause, r, vpc)


def state_grid(r: vpc.Rules) -> int:
    return vpc.state_grid(r)


def sweep_point(
    sc: Scenario, rs: ReplaySettings, rules: dict, over: str, k: float, block: int
) -> tuple[Policy, float] | None:
    """The row's policy at one point of a ``--plot``: the budget times ``k``, or the block (``block`` times
    ``k``, as --block-size); None where the row is not swept."""
    if over == "budget":
        kv = int(budget(sc, rs) * k)
        mode = rules["mode"]
        vr = vpc.attention_rules(sc, kv) if mode == "attention-only" else vpc.rules(sc, rs, mode, kv)
        return _policy(vr), k
    if rules["mode"] == "attention-only":
        return None
    s = replace(sc, vllm=replace(sc.vllm, block_size=k * block))
    vr = vpc.rules(s, rs, rules["mode"], budget(s, rs))
    return _policy(vr), vr.block


def notes(sc: Scenario) -> list[str]:
    """Which prefill chunk and GDN backend vLLM's defaults gave, where the flags left them to it."""
    from hybridplan.engines.vllm import defaults

    return list(filter(None, [defaults.note(sc), defaults.gdn_note(sc)]))
