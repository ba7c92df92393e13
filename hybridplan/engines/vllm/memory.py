"""vLLM's memory before the KV cache, release by release (vllm/v1/worker/gpu_worker.py
``determine_available_memory``): ``total × gpu_memory_utilization`` less the weights, the profiling run's peak
activation, non-torch memory and, from 0.20.0, its CUDA-graph estimate; what is left is "Available KV cache
memory".

What is a rule and what is an estimate:

- requested memory: ``total × utilization``, rounded up from 0.14.0 (vllm/v1/worker/utils.py) — a rule;
- weights: given, or counted from the config as vLLM shards them (hybridplan/weights) — within a few tenths of
  a percent of "Model loading took" where the checkpoint is the config's;
- peak activation: the profiling run's sampler pass over ``min(max_num_seqs, max_num_batched_tokens)`` rows of
  logits (gpu_model_runner.py ``_dummy_sampler_run``) dominates it: 38.5 B a logit element up to 0.12.0 (fitted
  to logs), 14 B from 0.13.0 (from the DEBUG breakdown of an H100 sweep at 0.19.0, where models that differ
  only in vocabulary differ by 14 B per logit), plus 0.15 GiB for the rest of the dummy batch; MoE models add
  their fused-MoE workspace for the dummy batch (0.5–0.8 GiB at TP 1 in that sweep), which is not counted;
- non-torch memory (``non-torch forward increase`` in the DEBUG breakdown): 0.25 GiB at TP 1 (the CUDA
  context's growth, five logs of the sweep); at TP ≥ 2 NCCL's and the all-reduce buffers, 2.0 GiB + 0.03 GiB
  per rank over an NVLink switch (2.07–2.21 GiB at TP 2 and 4 in seven logs, NCCL's NVLink SHARP buffers among
  them) and 0.6 GiB at TP 2 plus 0.25 GiB per further rank over PCIe (fitted to RTX 3090, T4 and L40S logs);
- CUDA graphs: subtracted by default from 0.20.0 (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``), not with
  --enforce-eager; vLLM's own estimate ran from 0.10 to 0.86 GiB in the logs of releases that subtract it, and
  to 1.82 GiB in ones that only print it — taken as 0.5 GiB.
"""

from __future__ import annotations

import json
from math import ceil
from typing import TYPE_CHECKING

from hybridplan.engines.common import Term, Waterfall
from hybridplan.engines.vllm.dtypes import model_dtype
from hybridplan.engines.vllm.releases import Release

if TYPE_CHECKING:
    from hybridplan.scenario import Scenario

GiB = 1 << 30
#: bytes a logit element of the profiling sampler pass costs at its peak: up to 0.12.0, and from 0.13.0
SAMPLER_BYTES_OLD, SAMPLER_BYTES = 38.5, 14.0
#: the rest of the profiling run's dummy batch
BATCH_ACTIVATION = int(0.15 * GiB)
#: non-torch memory: at TP 1; over PCIe at TP 2 and per further rank; over an NVLink switch, base and per rank
NON_TORCH_TP1 = int(0.25 * GiB)
NON_TORCH_TP2 = int(0.6 * GiB)
NON_TORCH_PER_RANK = int(0.25 * GiB)
NON_TORCH_NVSWITCH, NON_TORCH_NVSWITCH_PER_RANK = int(2.0 * GiB), int(0.03 * GiB)
CUDA_GRAPHS = int(0.5 * GiB)


def requested_memory(total: int, utilization: float, rel: Release) -> int:
    """``total × gpu_memory_utilization``: rounded up from 0.14.0 (``request_memory``), truncated before."""
    return ceil(total * utilization) if rel.at_least("0.14.0") else int(total * utilization)


def _vocab(sc: Scenario) -> int:
    config = json.loads(sc.spec.config_json or "{}")
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    return int(text.get("vocab_size") or config.get("vocab_size") or 0)


def activation(rel: Release, max_num_seqs: int, vocab: int, batched_tokens: int) -> Term:
    """The profiling run's peak: its sampler pass over ``min(max_num_seqs, batched tokens)`` rows of logits."""
    per = SAMPLER_BYTES_OLD if rel.before("0.13.0") else SAMPLER_BYTES
    rows = min(max_num_seqs, batched_tokens)
    size = int(rows * vocab * per) + BATCH_ACTIVATION
    return Term("activation", size, "estimate",
                f"profiling peak: {rows:,} rows × {vocab:,} logits × {per:g} B, and the dummy batch")


def non_torch(tp: int, nvswitch: bool = True) -> Term:
    """Memory outside PyTorch's allocator that the profiling run adds: the CUDA context's growth at TP 1; NCCL's
    and the all-reduce buffers above it, far larger over an NVLink switch (NVLink SHARP) than over PCIe."""
    if tp == 1:
        return Term("non-torch", NON_TORCH_TP1, "estimate", "CUDA context growth")
    if nvswitch:
        return Term("non-torch", NON_TORCH_NVSWITCH + NON_TORCH_NVSWITCH_PER_RANK * tp, "estimate",
                    "NCCL and all-reduce buffers over an NVLink switch")
    return Term("non-torch", NON_TORCH_TP2 + NON_TORCH_PER_RANK * (tp - 2), "estimate",
                "NCCL and all-reduce buffers over PCIe")


def cuda_graphs(rel: Release, eager: bool) -> Term | None:
    """Subtracted by default from 0.20.0 (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``), never when eager."""
    if rel.before("0.20.0") or eager:
        return None
    return Term("CUDA graphs", CUDA_GRAPHS, "estimate", "vLLM's own estimate, subtracted from 0.20.0")


def overheads(rel: Release, tp: int, batch: tuple[int, int], vocab: int, eager: bool,
              nvswitch: bool = True) -> list[Term]:
    """Every estimated term between the weights and the KV cache; ``batch``: (max_num_seqs,
    max_num_batched_tokens)."""
    graphs = cuda_graphs(rel, eager)
    return [activation(rel, batch[0], vocab, batch[1]), non_torch(tp, nvswitch), *([graphs] if graphs else [])]


def encoder_note(rel: Release, config: dict) -> str | None:
    """A multimodal checkpoint: the profiling run also encodes the largest dummy images
    (gpu_model_runner.py ``profile_run``), which no term here estimates."""
    if "vision_config" not in config:
        return None
    ways = [f for f, since in (("--skip-mm-profiling", "0.10.2"), ("--language-model-only", "0.17.0"))
            if rel.at_least(since)]
    way = f"; {' or '.join(ways)} leaves it out" if ways else ""
    return ("a multimodal checkpoint: vLLM's profiling run also encodes its largest dummy images, which the "
            "estimate leaves out (a Qwen3-VL-30B-A3B log on H100 printed 2.4 GiB less, docs/memory.md)" + way)


def memory(sc: Scenario) -> Waterfall:
    """From the GPU's total to "Available KV cache memory" on one rank."""
    from hybridplan.weights import rank_bytes

    b, rel = sc.budget, sc.vllm.release
    b.check()
    util = sc.vllm.gpu_util if sc.vllm.gpu_util is not None else rel.gpu_memory_utilization
    requested = requested_memory(b.gpu_mem, util, rel)
    weights, source = rank_bytes(sc.spec, sc.tp, model_dtype(sc.spec, sc.dtypes.dtype), b.weights, b.params)
    terms = [Term("weights", weights, "exact" if source.startswith("given") else "counted", source)]
    if b.overhead is not None:
        terms.append(Term("overhead", b.overhead, "exact", "given (--overhead): activations, non-torch, graphs"))
    else:
        from hybridplan.engines.vllm.defaults import for_scenario
        from hybridplan.gpus import gpu

        d = for_scenario(sc)
        # a GPU given by its memory alone is taken as switched: the larger figure
        nvswitch = gpu(b.gpu).nvswitch if b.gpu else True
        terms += overheads(rel, sc.tp, (d.max_num_seqs, d.max_num_batched_tokens), _vocab(sc), sc.vllm.enforce_eager,
                           nvswitch)
    return Waterfall(b.gpu_mem, util, requested, tuple(terms), requested - sum(t.bytes for t in terms))
