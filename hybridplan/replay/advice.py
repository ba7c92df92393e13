"""Pieces both engines' replay advice (hybridplan/engines/*/replay_advice.py) and the replay report are written
with: how a count of requests, a rate and a replayed change read, the budget a replay needs, and the notes for
a gap cause no flag recovers."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import TYPE_CHECKING

from hybridplan.errors import PlanError

if TYPE_CHECKING:
    from hybridplan.replay.loop import Run
    from hybridplan.replay.settings import ReplaySettings
    from hybridplan.scenario import Scenario

#: the most requests a what-if replay (a diagnostic's "by how much") reruns
WHAT_IF_LIMIT = 20_000
#: blocks, tokens and state slots of a pool that never evicts (``policies(unbounded=True)``)
UNBOUNDED = 1 << 50


def need_budget(sc: Scenario, rs: ReplaySettings) -> None:
    if sc.budget.kv_budget is None and sc.budget.gpu_mem is None:
        raise PlanError(
            "give the memory the caches get: --kv-budget, --gpu-type or --gpu-mem (or "
            "--num-gpu-blocks-override and --max-total-tokens with --max-mamba-cache-size)"
        )


def median(run: Run, reason: str, what: str = "shared") -> int:
    vals = [getattr(o, what) for o in run.outcomes if o.reason == reason]
    return int(statistics.median(vals)) if vals else 0


def pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def requests(n: int) -> str:
    return f"{n:,} request" + ("" if n == 1 else "s")


def advice(change: str, alt: Run | None, run: Run) -> str:
    """A change and the hit rate it was replayed at, when that is above the row's; said not to help when it is
    not (a change that lowers the rate is never recommended); the change alone when the trace was too long to
    replay."""
    if alt is None:
        return f"; {change}"
    if alt.hit_rate > run.hit_rate:
        return f"; {change}: {pct(alt.hit_rate)} hit rate"
    return (
        f" (replayed with {change.split(' ', 1)[0] if change.startswith('--') else change}: "
        f"{pct(alt.hit_rate)}, not above this row's {pct(run.hit_rate)}, so not advised)"
    )


#: why no flag is tried for a gap cause, where the engine has no word of its own (its ``no_flag``)
NO_FLAG = {
    "concurrency": "fewer in flight (a lower --max-num-seqs / --max-running-requests) frees memory; "
    "the concurrency-1 replay is the stage above",
    "hash_unit": "no engine caches the last generated token's KV, and KV is matched whole blocks from the left",
    "policy": "no flag tried places states where these requests needed them",
}
#: the note for a cause in none of the notes
NO_FLAG_OTHER = "no flag tried recovers it"


# --- a row's misses in words, the parts both engines' diagnoses share ---------------------------------------


def caching_off(c: dict[str, int], mode: str | None, how: str) -> str:
    return f"{requests(c['caching_off'])}: prefix caching is off here ({mode}): no state is ever saved" + how


def block_past_max_len(c: dict[str, int], block: int, ctx: int) -> str:
    return (
        f"{requests(c['block_past_max_len'])}: the {block:,}-token block is larger than max_model_len "
        f"{ctx:,}, so no prompt fills a block and prefix caching is inert (vllm#48401); "
        "--mamba-cache-mode none frees the padding, or a larger --max-model-len makes blocks fill"
    )


def before_first_checkpoint(c: dict[str, int], run: Run, grid: str) -> tuple[str, int]:
    """The message and the median shared prefix."""
    x = median(run, "before_first_checkpoint")
    return (
        f"{requests(c['before_first_checkpoint'])}: the shared prefix (median {x:,} tokens) ends before the "
        f"first {grid} boundary at {run.block:,} tokens, where the first state can be saved"
    ), x


def past_divergence(c: dict[str, int], run: Run) -> tuple[str, int]:
    """The message and the median shared prefix."""
    x = median(run, "checkpoint_past_divergence")
    return (
        f"{requests(c['checkpoint_past_divergence'])}: the earlier requests' states lie past where the "
        f"prompts diverge (median shared {x:,} tokens): the KV blocks match, the Mamba group has no state "
        "inside them, so the whole hit is dropped"
    ), x


def common(run: Run, rules: dict, how: str, evict_flag: str, rerun: Callable[..., Run | None]) -> list[str]:
    """The misses said alike on both engines, after each engine's own: not admitted yet (``how``: the engine's
    admission), not retained, evicted (``evict_flag``: the engine's pool flag), moved by speculative decoding,
    refused. ``rerun(retention=…)`` / ``rerun(double=True)``: the row replayed with that change."""
    out: list[str] = []
    c, B = run.reasons, run.block
    if c.get("not_admitted_yet"):
        out.append(
            f"{requests(c['not_admitted_yet'])}: not admitted yet — the shared prefix was seen once, so this "
            "request saves a state where it branches off and the next request with the prefix reuses it "
            f"({how}: the first hit is on the third sighting)"
        )
    if c.get("retention"):
        out.append(
            f"{requests(c['retention'])}: the state was computed but not kept under retention interval "
            f"{rules.get('retention_interval')} ({rules.get('retention_source')})"
            + advice(f"--prefix-cache-retention-interval {B} keeps one per block", rerun(retention=B), run)
        )
    if c.get("evicted"):
        blocks = rules.get("num_gpu_blocks") or rules.get("mamba_pool_slots")
        out.append(
            f"{requests(c['evicted'])}: what they would have reused was evicted ({run.evictions:,} evictions "
            f"from a pool of {blocks:,})"
            + advice(f"{evict_flag} {2 * blocks} (twice the memory)", rerun(double=True), run)
        )
    if c.get("speculative"):
        out.append(
            f"{requests(c['speculative'])}: speculative decoding moved the state — EAGLE/MTP drops the last "
            f"block of the attention hit ({B:,} tokens) and the last prefill checkpoint moves a block earlier; "
            "decoding's states are not block-aligned"
        )
    if run.refused:
        out.append(
            f"{requests(len(run.refused))} refused: "
            + "; ".join(f"#{i}: {w}" for i, w in run.refused[:5])
            + (" …" if len(run.refused) > 5 else "")
        )
    return out


def lift(cause: str, r, cache):
    """The rules ``r`` with one cause of the gap lifted, through the engine's own cache module ``cache``
    (its ``unbounded``, ``any_length``, ``caching_on``, ``every_checkpoint``)."""
    if cause == "eviction":
        return cache.unbounded(r, UNBOUNDED)
    return {"max_model_len": cache.any_length, "caching_off": cache.caching_on, "policy": cache.every_checkpoint}[
        cause
    ](r)
