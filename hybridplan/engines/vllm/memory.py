"""vLLM's memory before the KV cache, release by release (vllm/v1/worker/gpu_worker.py
``determine_available_memory``): ``total × gpu_memory_utilization`` less the weights, the profiling run's peak
activation, non-torch memory and, from 0.20.0, its CUDA-graph estimate; what is left is "Available KV cache
memory".

What is a rule and what is an estimate:

- requested memory: ``total × utilization``, rounded up from 0.14.0 (vllm/v1/worker/utils.py) — a rule;
- weights: given, or counted from the config as vLLM shards them (hybridplan/weights) — within a few tenths of
  a percent of "Model loading took" where the checkpoint is the config's;
- peak activation: the profiling run's sampler pass over ``min(max_num_seqs, max_num_batched_tokens)`` rows of
  logits (gpu_model_runner.py ``_dummy_sampler_run``) dominates it. Fit to real logs (tests/data/memlogs):
  38.5 B a logit element up to 0.12.0, 12 B from 0.13.0 (builds with FlashInfer's sampler keep less), plus
  0.15 GiB for the rest of the dummy batch — an estimate, ±0.5 GiB;
- non-torch memory (NCCL and custom all-reduce buffers, the CUDA context's growth): 0.1 GiB at TP 1, about
  0.6 GiB at TP 2 and 0.25 GiB more per further rank (2.1 GiB at TP 8) — fitted to the logs, ±0.3 GiB there;
- CUDA graphs: subtracted by default from 0.20.0 (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``), not with
  --enforce-eager; vLLM's own estimate ran from 0.10 to 0.86 GiB in the logs of releases that subtract it, and
  to 1.65 GiB in one that only prints it — taken as 0.5 GiB, more than most, so that the budget errs low.
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
SAMPLER_BYTES_OLD, SAMPLER_BYTES = 38.5, 12.0
#: the rest of the profiling run's dummy batch
BATCH_ACTIVATION = int(0.15 * GiB)
NON_TORCH_TP1 = int(0.1 * GiB)
NON_TORCH_TP2 = int(0.6 * GiB)
NON_TORCH_PER_RANK = int(0.25 * GiB)
CUDA_GRAPHS = int(0.5 * GiB)
#: --max-num-batched-tokens when none is given for an online server (vllm/engine/arg_utils.py)
DEFAULT_BATCHED_TOKENS = 8192


def requested_memory(total: int, utilization: float, rel: Release) -> int:
    """``total × gpu_memory_utilization``: rounded up from 0.14.0 (``request_memory``), truncated before."""
    return ceil(total * utilization) if rel.at_least("0.14.0") else int(total * utilization)


def _vocab(sc: Scenario) -> int:
    config = json.loads(sc.spec.config_json or "{}")
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    return int(text.get("vocab_size") or config.get("vocab_size") or 0)


def activation(rel: Release, max_num_seqs: int, vocab: int) -> Term:
    """The profiling run's peak: its sampler pass over ``min(max_num_seqs, batched tokens)`` rows of logits."""
    per = SAMPLER_BYTES_OLD if rel.before("0.13.0") else SAMPLER_BYTES
    rows = min(max_num_seqs, DEFAULT_BATCHED_TOKENS)
    size = int(rows * vocab * per) + BATCH_ACTIVATION
    return Term("activation", size, "estimate",
                f"profiling peak: {rows:,} rows × {vocab:,} logits × {per:g} B, and the dummy batch")


def non_torch(tp: int) -> Term:
    size = NON_TORCH_TP1 if tp == 1 else NON_TORCH_TP2 + NON_TORCH_PER_RANK * (tp - 2)
    return Term("non-torch", size, "estimate", "NCCL and all-reduce buffers" if tp > 1 else "CUDA context growth")


def cuda_graphs(rel: Release, eager: bool) -> Term | None:
    """Subtracted by default from 0.20.0 (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``), never when eager."""
    if rel.before("0.20.0") or eager:
        return None
    return Term("CUDA graphs", CUDA_GRAPHS, "estimate", "vLLM's own estimate, subtracted from 0.20.0")


def overheads(rel: Release, tp: int, max_num_seqs: int, vocab: int, eager: bool) -> list[Term]:
    """Every estimated term between the weights and the KV cache."""
    graphs = cuda_graphs(rel, eager)
    return [activation(rel, max_num_seqs, vocab), non_torch(tp), *([graphs] if graphs else [])]


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
        seqs = sc.vllm.max_num_seqs or rel.default_max_num_seqs(b.gpu_mem, b.gpu)
        terms += overheads(rel, sc.tp, seqs, _vocab(sc), sc.vllm.enforce_eager)
    return Waterfall(b.gpu_mem, util, requested, tuple(terms), requested - sum(t.bytes for t in terms))
