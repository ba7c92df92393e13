"""The step's fixed costs that depend on how the engine runs it, not on the model's work: whether a decode batch
is replayed from a CUDA graph (up to the engine's captured sizes), whether the engine's host work overlaps the
GPU's, and the speculative draft's own forward passes. The engine rules are in hybridplan/engines/*/kernels.py;
this module only asks them."""

from __future__ import annotations

from msgspec.structs import replace

from hybridplan.scenario import Scenario
from hybridplan.speed.work import HEAD, SAMPLING, Step, Work


def engine_of(sc: Scenario) -> str:
    return "sglang" if sc.engine == "sglang" else "vllm"


def _engine_module(sc: Scenario):
    from hybridplan.engines.sglang import kernels as sglang_kernels
    from hybridplan.engines.vllm import kernels as vllm_kernels

    return sglang_kernels if engine_of(sc) == "sglang" else vllm_kernels


def graph_max_batch(sc: Scenario) -> int:
    """The largest decode batch the engine replays from a CUDA graph (0 under --enforce-eager)."""
    if sc.vllm.enforce_eager:
        return 0
    return _engine_module(sc).graph_max_batch(sc)


def decode_mode(sc: Scenario, batch: int) -> tuple[bool, bool]:
    """(CUDA graphs, host overlapped) for a decode step of ``batch`` requests under the scenario's engine."""
    return batch <= graph_max_batch(sc), _engine_module(sc).overlaps_cpu(sc)[0]


def mixes_prefill(sc: Scenario) -> tuple[bool, str]:
    """Whether the engine's step carries decodes and prompt tokens together, and why (hybridplan/engines/*/
    kernels.py ``mixes_prefill``)."""
    return _engine_module(sc).mixes_prefill(sc)


def arrival_lag(sc: Scenario) -> int:
    """Steps a prompt sent while the engine is busy waits before it can be scheduled: 1 where the engine
    schedules step k + 1 while step k runs (vLLM's async scheduling, SGLang's overlap scheduler), else 0."""
    return 1 if _engine_module(sc).overlaps_cpu(sc)[0] else 0


def mode_notes(sc: Scenario, batch: int) -> list[str]:
    """Whether the decode step replays a CUDA graph and whether the host's step is hidden, in words."""
    top = graph_max_batch(sc)
    if top == 0:
        graphs = "--enforce-eager: the host launches every kernel of every step"
    elif batch <= top:
        graphs = f"CUDA graphs captured up to batch {top:,}: the decode step at batch {batch:,} replays one"
    else:
        graphs = (
            f"CUDA graphs captured up to batch {top:,} only: the decode step at batch {batch:,} runs eager, "
            "a host launch per kernel"
        )
    return [graphs, _engine_module(sc).overlaps_cpu(sc)[1]]


def draft_step(step: Step, sc: Scenario) -> Step:
    """One draft forward pass of an MTP/EAGLE-style drafter at the step's batch: one decoder block of the target's
    shape (its first attention kind and its FFN kind, one layer each), the LM head and the sampler, one token a
    request (the draft proposes one token a pass)."""
    counts = sc.spec.layer_counts
    mixer = next((k for k in counts if k in ("attention", "sliding_attention", "mla")), None)
    ffn = next((k for k in counts if k in ("moe", "mlp")), None)
    per = step.tokens / step.batch  # tokens a request pushes through the verify step
    kinds: list[Work] = []
    for w in step.kinds:
        if w.kind in (HEAD, SAMPLING):
            share = 1.0 / per
        elif w.kind in (mixer, ffn, "shared") and counts.get(w.kind, 1):
            share = 1.0 / (counts.get(w.kind) or 1) / per
        else:
            continue
        # weights are read once a pass whatever its tokens (one layer's of ``count``, the head whole); the rest
        # scales with the pass's tokens, one a request where the verify step pushed ``per``
        kinds.append(
            replace(
                w,
                layers=min(w.layers, 1),
                weight_bytes=w.weight_bytes * share * per,
                kv_bytes=w.kv_bytes * share,
                state_bytes=w.state_bytes * share,
                flops=w.flops * share,
                scalar_flops=w.scalar_flops * share,
                scan_flops=w.scan_flops * share,
                logit_bytes=w.logit_bytes * share,
                kernels=max(1, round(w.kernels * (share * per))),
            )
        )
    blocks = (1 if mixer else 0) + (1 if ffn else 0)
    return replace(
        step,
        tokens=step.batch,
        kinds=tuple(kinds),
        allreduces=blocks if step.allreduces else 0,
        allreduce_bytes=step.allreduce_bytes / per,
    )
