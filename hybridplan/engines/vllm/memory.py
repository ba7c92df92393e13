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
  0.8 GiB at TP 2 and 0.25 GiB more per further rank (2.3 GiB at TP 8 in the logs) — an estimate, ±0.7 GiB;
- CUDA graphs: subtracted by default from 0.20.0 (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``), not with
  --enforce-eager; vLLM's own estimate ranged from 0.1 to 1.65 GiB in the logs — taken as 0.5 GiB, ±0.6 GiB.
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
NON_TORCH_TP2 = int(0.8 * GiB)
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


def activation(sc: Scenario, max_num_seqs: int) -> Term:
    rel = sc.vllm.release
    per = SAMPLER_BYTES_OLD if rel.before("0.13.0") else SAMPLER_BYTES
    rows = min(max_num_seqs, DEFAULT_BATCHED_TOKENS)
    vocab = _vocab(sc)
    size = int(rows * vocab * per) + BATCH_ACTIVATION
    return Term("activation", size, "estimate",
                f"profiling peak: {rows:,} rows × {vocab:,} logits × {per:g} B, and the dummy batch")


def non_torch(tp: int) -> Term:
    size = NON_TORCH_TP1 if tp == 1 else NON_TORCH_TP2 + NON_TORCH_PER_RANK * (tp - 2)
    return Term("non-torch", size, "estimate", "NCCL and all-reduce buffers" if tp > 1 else "CUDA context growth")


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
        terms += [activation(sc, seqs), non_torch(sc.tp)]
        if rel.at_least("0.20.0") and not sc.vllm.enforce_eager:
            terms.append(Term("CUDA graphs", CUDA_GRAPHS, "estimate", "subtracted from 0.20.0"))
    return Waterfall(b.gpu_mem, util, requested, tuple(terms), requested - sum(t.bytes for t in terms))
