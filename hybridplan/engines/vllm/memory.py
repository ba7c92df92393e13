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
- the speculative drafter's weights (``drafter``): vLLM loads the drafter inside the same measurement as the
  target ("Loading drafter model..." then "Model loading took", gpu_model_runner.py ``load_model``, 0.10.0,
  0.16.0, 0.25.1 and 0.33.0), so they come off the budget as the target's do — counted, a rule;
- CUDA graphs: subtracted by default from 0.20.0 (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``), not with
  --enforce-eager; vLLM's own estimate ran from 0.10 to 0.86 GiB in the logs of releases that subtract it, and
  to 1.82 GiB in ones that only print it — taken as 0.5 GiB.
"""

from __future__ import annotations

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
#: what the memory waterfall leaves for the caches, and the factor applied to the GPU's total, as vLLM names them
#: (vllm/v1/worker/gpu_worker.py "Available KV cache memory"; --gpu-memory-utilization)
CACHE_LABEL, FACTOR_LABEL = "Available KV cache memory", "gpu_memory_utilization"


def requested_memory(total: int, utilization: float, rel: Release) -> int:
    """``total × gpu_memory_utilization``: rounded up from 0.14.0 (``request_memory``), truncated before."""
    return ceil(total * utilization) if rel.at_least("0.14.0") else int(total * utilization)


def _vocab(sc: Scenario) -> int:
    return sc.spec.facts.vocab_size


def activation(rel: Release, max_num_seqs: int, vocab: int, batched_tokens: int) -> Term:
    """The profiling run's peak: its sampler pass over ``min(max_num_seqs, batched tokens)`` rows of logits."""
    per = SAMPLER_BYTES_OLD if rel.before("0.13.0") else SAMPLER_BYTES
    rows = min(max_num_seqs, batched_tokens)
    size = int(rows * vocab * per) + BATCH_ACTIVATION
    return Term(
        "activation",
        size,
        "estimate",
        f"profiling peak: {rows:,} rows × {vocab:,} logits × {per:g} B, and the dummy batch",
    )


def non_torch(tp: int, nvswitch: bool = True) -> Term:
    """Memory outside PyTorch's allocator that the profiling run adds: the CUDA context's growth at TP 1; NCCL's
    and the all-reduce buffers above it, far larger over an NVLink switch (NVLink SHARP) than over PCIe."""
    if tp == 1:
        return Term("non-torch", NON_TORCH_TP1, "estimate", "CUDA context growth")
    if nvswitch:
        return Term(
            "non-torch",
            NON_TORCH_NVSWITCH + NON_TORCH_NVSWITCH_PER_RANK * tp,
            "estimate",
            "NCCL and all-reduce buffers over an NVLink switch",
        )
    return Term(
        "non-torch", NON_TORCH_TP2 + NON_TORCH_PER_RANK * (tp - 2), "estimate", "NCCL and all-reduce buffers over PCIe"
    )


def cuda_graphs(rel: Release, eager: bool) -> Term | None:
    """Subtracted by default from 0.20.0 (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``), never when eager."""
    if rel.before("0.20.0") or eager:
        return None
    return Term("CUDA graphs", CUDA_GRAPHS, "estimate", "vLLM's own estimate, subtracted from 0.20.0")


def overheads(
    rel: Release, tp: int, batch: tuple[int, int], vocab: int, eager: bool, nvswitch: bool = True
) -> list[Term]:
    """Every estimated term between the weights and the KV cache; ``batch``: (max_num_seqs,
    max_num_batched_tokens)."""
    graphs = cuda_graphs(rel, eager)
    return [activation(rel, batch[0], vocab, batch[1]), non_torch(tp, nvswitch), *([graphs] if graphs else [])]


def encoder_note(rel: Release, multimodal: bool) -> str | None:
    """A multimodal checkpoint (its config has a ``vision_config``): the profiling run also encodes the largest
    dummy images (gpu_model_runner.py ``profile_run``), which no term here estimates."""
    if not multimodal:
        return None
    ways = [
        f
        for f, since in (("--skip-mm-profiling", "0.10.2"), ("--language-model-only", "0.17.0"))
        if rel.at_least(since)
    ]
    way = f"; {' or '.join(ways)} leaves it out" if ways else ""
    return (
        "a multimodal checkpoint: vLLM's profiling run also encodes its largest dummy images, which the "
        "estimate leaves out (a Qwen3-VL-30B-A3B log on H100 printed 2.4 GiB less, docs/memory.md)" + way
    )


def offloaded(weights: int, source: str, cpu_offload: int | None) -> tuple[int, str]:
    """The weights left on the GPU with --cpu-offload-gb: vLLM's UVA offloader (vllm/model_executor/models/utils.py
    ``maybe_offload_to_cpu``; vllm/model_executor/offloader/ in 0.33) copies the decoder layers' parameters to pinned CPU memory one by one until ``int(gb * 1024**3)`` bytes are moved,
    so the GPU keeps the rest, less at most one parameter more than asked (not modelled)."""
    if not cpu_offload:
        return weights, source
    moved = min(cpu_offload, weights)
    return weights - moved, f"{source}, less {moved / 2**30:.2f} GiB moved to the CPU (--cpu-offload-gb)"


#: from this release the target's LM head also replaces a DeepSeek-style MTP layer's own (``shared_head.head``):
#: 0.16.0's and 0.33.0's v1/spec_decode ``_maybe_share_lm_head`` do so (vllm#34385, merged 2026-02-11); 0.10.0's
#: ``EagleProposer.load_model`` replaces only ``lm_head``, so each MTP layer keeps a head of its own there
MTP_HEAD_SHARED = "0.16.0"
#: the first release read that decides an EAGLE draft's sharing by what its checkpoint holds (``has_own_lm_head``,
#: ``has_own_embed_tokens``: 0.16.0 v1/spec_decode/eagle.py, 0.25.1 and 0.33.0 llm_base_proposer.py); 0.10.0 keeps
#: every EAGLE-3 head (``method != "eagle3"``) and shares any embedding of the target's shape
DRAFT_SHARING_BY_CONTENT = "0.16.0"
#: methods whose drafter is the target's own MTP layers (before 0.11.0 each model had its name)
_MTP = frozenset(
    {
        "mtp",
        "deepseek_mtp",
        "qwen3_next_mtp",
        "ernie_mtp",
        "mimo_mtp",
        "glm4_moe_mtp",
        "longcat_flash_mtp",
        "qwen3_5_mtp",
        "nemotron_h_mtp",
    }
)
#: methods whose drafter is a model of its own (``--speculative-config`` ``model``)
_DRAFTS = frozenset({"eagle", "eagle3", "dflash", "dspark", "draft_model"})


def drafter(sc: Scenario) -> Term | None:
    """The speculative drafter's weights on one rank, as vLLM loads them beside the target's (gpu_model_runner.py
    ``load_model`` → the proposer's ``load_model``; v1/spec_decode/eagle.py up to 0.20, llm_base_proposer.py on):

    - MTP: the target's MTP layers (fc or eh_proj, their norms, their decoder layers: qwen3_5_mtp.py,
      qwen3_next_mtp.py, deepseek_mtp.py, nemotron_h_mtp.py); the drafter's embedding and LM head are dropped for
      the target's ("Detected MTP model. Sharing target model …"), the embedding only at PP 1 (at PP > 1 "The
      draft model's vocab embedding will be loaded separately"); a DeepSeek-style layer's own head is shared from
      ``MTP_HEAD_SHARED`` only;
    - EAGLE, EAGLE-3, DFlash, DSpark: the draft's layers, norms and ``fc``; its embedding is the target's (0.10.0:
      where the shapes match; from 0.16.0 where the draft ships none or an identical one, which a config does not
      say: taken as shipped none); its LM head the target's, except an EAGLE-3 or DFlash head of a
      ``draft_vocab_size`` unlike the target's vocabulary, and any EAGLE-3 head in 0.10.0 (``method != "eagle3"``);
    - draft_model: the whole draft, embedding and head its own (v1/spec_decode/draft_model.py shares neither).

    None without a drafter that loads weights (n-gram, suffix; Medusa and MLP-speculator heads are not counted)."""
    from hybridplan.weights import draft_rank_bytes, head_rank_bytes, mtp_rank_bytes

    sp, rel = sc.speculative, sc.vllm.release
    if not sp.active or sp.method is None:
        return None
    dtype = model_dtype(sc.spec, sc.dtypes.dtype)
    # SGLang's NEXTN read for both engines is EAGLE on the target's own MTP layers: vLLM's MTP
    if sp.method in _MTP or (sp.method in ("eagle", "nextn") and sp.draft is None and sp.layers):
        params, size = mtp_rank_bytes(sc.spec, sc.tp, dtype)
        if not params:
            return None
        own = []
        n_layers = len(sp.layers) or 1
        if sc.spec.architecture.startswith("Deepseek") and rel.before(MTP_HEAD_SHARED):
            size += n_layers * head_rank_bytes(sc.spec, sc.tp, dtype)
            own.append(f"a head of its own per layer (shared from {MTP_HEAD_SHARED})")
        if sc.pp > 1:
            size += head_rank_bytes(sc.spec, sc.tp, dtype)
            own.append("its own embedding (PP > 1)")
        what = f"the target's MTP layers, {params / 1e9:.2f}B parameters; " + (
            ", ".join(own) if own else "embedding and LM head shared with the target"
        )
        return Term("drafter weights", size, "counted", what)
    if sp.method not in _DRAFTS or sp.draft is None:
        return None
    draft = sp.draft
    draft_vocab = draft.facts.draft.vocab_size
    if sp.method == "draft_model":
        embedding, head = True, draft_vocab or None
    else:
        embedding = sc.pp > 1  # "The draft model's vocab embedding will be loaded separately" at PP > 1
        own_head = sp.method != "eagle" and draft_vocab and draft_vocab != _vocab(sc)
        head = draft_vocab if own_head or (sp.method == "eagle3" and rel.before(DRAFT_SHARING_BY_CONTENT)) else None
    kind = "model" if sp.method == "draft_model" else sp.method
    params, size = draft_rank_bytes(
        draft,
        sc.tp,
        dtype,
        kind=kind,
        ends=(embedding, head),
        target_hidden=draft.facts.draft.target_hidden_size or sc.spec.hidden_size or 0,
    )
    shared = (
        "embedding and LM head its own"
        if sp.method == "draft_model"
        else f"embedding {'its own' if embedding else 'shared'}, LM head {'its own' if head else 'shared'}"
    )
    return Term(
        "drafter weights",
        size,
        "counted",
        f"the {sp.method} draft {sp.draft_ref or draft.name}, {params / 1e9:.2f}B parameters; {shared}",
    )


def memory(sc: Scenario) -> Waterfall:
    """From the GPU's total to "Available KV cache memory" on one rank."""
    from hybridplan.weights import rank_bytes

    b, rel = sc.budget, sc.vllm.release
    b.check()
    util = sc.vllm.gpu_util if sc.vllm.gpu_util is not None else rel.gpu_memory_utilization
    requested = requested_memory(b.gpu_mem, util, rel)
    weights, source = rank_bytes(sc.spec, sc.tp, model_dtype(sc.spec, sc.dtypes.dtype), b.weights, b.params)
    weights, source = offloaded(weights, source, b.cpu_offload)
    terms = [Term("weights", weights, "exact" if source.startswith("given") else "counted", source)]
    if (draft := drafter(sc)) is not None:
        terms.append(draft)
    if b.overhead is not None:
        terms.append(Term("overhead", b.overhead, "exact", "given (--overhead): activations, non-torch, graphs"))
    else:
        from hybridplan.engines.vllm.defaults import for_scenario
        from hybridplan.gpus import gpu

        d = for_scenario(sc)
        # a GPU given by its memory alone is taken as switched: the larger figure
        nvswitch = gpu(b.gpu).nvswitch if b.gpu else True
        terms += overheads(
            rel, sc.tp, (d.max_num_seqs, d.max_num_batched_tokens), _vocab(sc), sc.vllm.enforce_eager, nvswitch
        )
    return Waterfall(b.gpu_mem, util, requested, tuple(terms), requested - sum(t.bytes for t in terms))
