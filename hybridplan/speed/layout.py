"""Decode tokens/s of a whole layout — tensor, pipeline and data parallel, experts sliced or dealt whole — from the
same per-rank step model as `speed` (hybridplan/speed/work.py, model.py). Pure functions; `plan` ranks by it.

- **Pipeline stages.** vLLM keeps ``pp`` batches in flight (its engine core's batch queue): the running requests
  are split into ``pp`` micro-batches of ``m = ⌈B / pp⌉``, and each stage runs its own layers of one micro-batch
  at a time. A stage's work is the whole model's decode step at ``m`` sequences with each layer kind scaled to the
  stage's share of that kind's layers (the LM head on the last stage, the norms and all-reduces by its layers).
  A micro-batch emits ``m`` tokens a round of ``Σ T_s``; with ``pp`` of them circulating, tokens/s is
  ``min(pp·m / Σ T_s, m / max T_s)`` (the slowest stage bounds it). Stage-to-stage sends are not timed.
- **vLLM data parallel.** Each of the ``dp`` engines runs its own batch, but the fused MoE spans all ``dp × tp``
  ranks (sliced, or with --enable-expert-parallel dealt whole: hybridplan/engines/vllm/parallel.py
  ``sharding``): a rank reads its share of the experts the ``dp`` batches together touch, and does its share of
  their FLOPs. The all-to-all / all-gather of the tokens is not timed.
- **SGLang data parallel** without DP attention: whole replicas. With --enable-dp-attention the attention and
  recurrent layers run at a smaller TP than the MoE: not priced here (said as the reason).
"""

from __future__ import annotations

from math import ceil
from typing import Any

from msgspec import Struct
from msgspec.structs import replace

from hybridplan.scenario import Scenario
from hybridplan.speed.costs import decode_mode
from hybridplan.speed.gpus import Datasheet
from hybridplan.speed.model import DEFAULT, Efficiency, step_time
from hybridplan.speed.work import HEAD, NORM, SAMPLING, Step, Work, decode_step


class Rate(Struct, frozen=True):
    """Decode output tokens/s of every engine of a layout together, at a batch and context; None where the
    layout is not priced, with the reason."""

    tokens_per_s: float | None
    gpus: int
    #: one round of every stage: the time between two tokens of one request
    round_s: float | None = None
    why: str | None = None

    @property
    def per_gpu(self) -> float | None:
        return self.tokens_per_s / self.gpus if self.tokens_per_s is not None else None

    def to_dict(self) -> dict:
        return {
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_s_per_gpu": self.per_gpu,
            "gpus": self.gpus,
            "round_s": self.round_s,
            "not_priced": self.why,
        }


def _scaled(w: Work, share: float) -> Work:
    return replace(
        w,
        layers=round(w.layers * share),
        weight_bytes=w.weight_bytes * share,
        kv_bytes=w.kv_bytes * share,
        state_bytes=w.state_bytes * share,
        flops=w.flops * share,
        scalar_flops=w.scalar_flops * share,
        scan_flops=w.scan_flops * share,
        kernels=round(w.kernels * share),
        logit_bytes=w.logit_bytes * share,
    )


def stage_step(step: Step, whole, stage_spec, last: bool) -> Step:
    """``step`` (the whole model's) cut to one stage's layers: each kind by the stage's share of its layers."""
    total, held = whole.layer_counts, stage_spec.layer_counts
    layers = max(1, len(whole.mixers))
    share_layers = len(stage_spec.mixers) / layers
    kinds = []
    for w in step.kinds:
        if w.kind in (HEAD, SAMPLING):
            share = 1.0 if last else 0.0
        elif w.kind in total:
            share = held.get(w.kind, 0) / total[w.kind]
        else:  # norms and any per-model part: by the stage's layers
            share = share_layers if w.kind == NORM else 1.0
        if share:
            kinds.append(_scaled(w, share))
    return replace(step, kinds=tuple(kinds), allreduces=round(step.allreduces * share_layers))


def _moe_across_dp(sc: Scenario, step: Step, m: int, ctx: int) -> Step:
    """vLLM's MoE over all ``dp × tp`` ranks: each rank reads ``1/dp`` of the experts the ``dp`` micro-batches
    together touch (at its TP share) and does ``1/dp`` of their FLOPs."""
    if sc.dp <= 1 or "moe" not in {w.kind for w in step.kinds}:
        return step
    pooled = {w.kind: w for w in decode_step(sc, m * sc.dp, ctx).kinds}
    kinds = tuple(
        replace(pooled["moe"], weight_bytes=pooled["moe"].weight_bytes / sc.dp, flops=pooled["moe"].flops / sc.dp)
        if w.kind == "moe"
        else w
        for w in step.kinds
    )
    return replace(step, kinds=kinds)


def decode_rate(sc: Scenario, g: Datasheet, batch: int, ctx: int, eff: Efficiency = DEFAULT) -> Rate:
    """Decode tokens/s of the scenario's layout with ``batch`` requests running on each engine at ``ctx``."""
    gpus = sc.tp * sc.pp * (1 if sc.dp_attention else sc.dp)
    if sc.dp_attention:
        return Rate(
            None,
            gpus,
            why="SGLang DP attention runs its attention and recurrent layers at a smaller TP than its MoE: not priced",
        )
    m = ceil(batch / sc.pp)
    graphs, overlap = decode_mode(sc, m)
    kw: dict[str, Any] = {"tp": sc.tp, "graphs": graphs, "overlap": overlap}
    whole = decode_step(sc, m, ctx)
    if sc.engine != "sglang":
        whole = _moe_across_dp(sc, whole, m, ctx)
    if sc.pp > 1:
        from hybridplan.engines.sglang.parallel import pipeline as sglang_pipeline
        from hybridplan.engines.vllm.parallel import pipeline as vllm_pipeline

        stages = (sglang_pipeline if sc.engine == "sglang" else vllm_pipeline)(sc)
        times = [step_time(stage_step(whole, sc.spec, st.spec, st.last), g, eff, **kw).seconds for st in stages]
    else:
        times = [step_time(whole, g, eff, **kw).seconds]
    per_engine = min(sc.pp * m / sum(times), m / max(times))
    return Rate(per_engine * sc.dp, gpus, round_s=sum(times))
