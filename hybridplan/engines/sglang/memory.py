"""SGLang's memory before its pools, release by release: the ``--mem-fraction-static`` it picks for a GPU, and
the memory R it splits between the state pool and the KV pool.

- ``mem_fraction_static`` when none is given (server_args.py ``_handle_gpu_memory_settings`` from 0.5.3rc2,
  arg_groups/memory_hook.py from 0.5.19): ``round((M − reserved) / M, 3)`` with M the GPU's memory in MiB as
  nvidia-smi reports it, and ``reserved`` 512 MiB plus 1.5 MiB per token of the prefill chunk (at least 2048),
  2 MiB per decode CUDA-graph batch, ``tp/8`` GiB, the prefill CUDA graphs (0.5.10rc0 on: 8 MiB per captured
  size, not for Qwen3-Next, multimodal models or speculative decoding), the speculative-decoding allowance
  (2 GiB up to 0.5.9, 4 GiB 0.5.10rc0–0.5.13), and at least 10 GiB above 60 GiB; a multimodal model's fraction
  is then scaled by its vision tower's size. The chunk and the decode batch are themselves defaults by GPU
  size. 0.5.2–0.5.3rc0 take the reservation from a table. A rule, except which hybrids capture prefill graphs
  from 0.5.14 on, which is assumed as for 0.5.13.
- the speculative draft's weights (``drafter``): the draft worker is built after the target's worker has
  sized its pools (managers/scheduler.py makes the draft worker after the TpModelWorker, 0.5.2; "the draft worker
  … inits after it", model_runner.py 0.5.23), so they load out of what ``mem_fraction_static`` leaves, not out of
  R: shown after R, a start refused where they exceed it. A rule;
- R (``_profile_available_bytes``): the free memory after loading less ``(1 − mem_fraction_static)`` of the
  free memory before loading, that is ``before × mem_fraction_static − weights``. hybridplan takes the free
  memory before loading as the CUDA total less the CUDA context and communicators (an estimate: 0.7 GiB at
  TP 1, as an H100 log shows 50.01 GB free after loading 28.47 GB; 1.2 GiB above TP 1).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hybridplan.engines.common import Term, Waterfall
from hybridplan.engines.sglang.defaults import chunked_prefill_size, decode_graph_bs

#: what SGLang splits between its pools (R), and the factor applied to the GPU's total, as hybridplan's waterfall
#: names them (python/sglang/srt/model_executor/model_runner.py; --mem-fraction-static)
CACHE_LABEL, FACTOR_LABEL = "the memory split between the pools (R)", "mem_fraction_static"

if TYPE_CHECKING:
    from hybridplan.scenario import Scenario

GiB, MiB = 1 << 30, 1 << 20
CONTEXT_TP1 = int(0.7 * GiB)
CONTEXT_TP = int(1.2 * GiB)


def prefill_graph_sizes(chunk: int) -> int:
    """How many token counts the prefill CUDA graphs capture up to ``chunk``."""
    sizes = [
        *range(4, 33, 4),
        *range(48, 257, 16),
        *range(288, 513, 32),
        *range(576, 1025, 64),
        *range(1280, 4097, 256),
        *range(4608, chunk + 1, 512),
    ]
    return sum(1 for s in sizes if s <= chunk)


def _vision_scale(tower: tuple[int, int]) -> float:
    """``adjust_mem_fraction_for_vlm``: 0.95 × a factor of the vision tower's depth and width (``ConfigFacts.vision``:
    its ``num_hidden_layers`` or ``depth``, 24 where unset, and ``hidden_size``, 1024 where unset)."""
    layers, hidden = tower
    ratio = layers * hidden * hidden / (24 * 1024 * 1024)
    return 0.95 * min(max(1 - 0.1 * (ratio - 1), 0.8), 1.05)


def default_mem_fraction(sc: Scenario, smi_mib: float) -> tuple[float, str]:
    """``--mem-fraction-static`` SGLang picks, and how."""
    rel, tp = sc.sglang.release, sc.tp
    spec_decoding = bool(sc.sglang.draft(sc.spec_tokens))
    multimodal = sc.spec.facts.multimodal
    if rel.before("0.5.3rc2"):
        if smi_mib < 35 * 1024:
            reserved = (2.8 + tp / 10) * 1024
        elif smi_mib < 90 * 1024:
            reserved = (9.5 + tp / 2) * 1024
        else:
            reserved = (12 + tp / 2) * 1024 if smi_mib < 160 * 1024 else 32 * 1024
        reserved += 2048 if spec_decoding else 0
        how = "the GPU-size table"
    else:
        # the reserve scales with the chunk in use: --chunked-prefill-size where given, else the GPU's default
        chunk = sc.chunk if sc.chunk is not None else chunked_prefill_size(rel, smi_mib)
        bs = decode_graph_bs(rel, smi_mib, tp)
        mrr = sc.sglang.requested(sc.spec_tokens)
        if mrr is not None and rel.at_least("0.5.14"):
            bs = min(bs, mrr)
        reserved = 512 + max(chunk, 2048) * 1.5 + bs * 2 + tp / 8 * 1024
        piecewise = rel.at_least("0.5.10rc0") and not (
            multimodal or spec_decoding or sc.spec.architecture == "Qwen3NextForCausalLM"
        )
        if piecewise:
            reserved += prefill_graph_sizes(chunk) * 8
        if smi_mib > 60 * 1024:
            reserved = max(reserved, 10 * 1024)
        if spec_decoding and rel.before("0.5.14"):
            reserved += 4096 if rel.at_least("0.5.10rc0") else 2048
        how = f"chunk {chunk}, decode graphs to {bs}" + (", prefill graphs" if piecewise else "")
    fraction = round((smi_mib - reserved) / smi_mib, 3)
    if multimodal:
        fraction *= _vision_scale(sc.spec.facts.vision or (24, 1024))
        how += ", scaled for the vision tower"
    return fraction, how


def offloaded(weights: int, source: str, cpu_offload: int | None) -> tuple[int, str]:
    """The weights left on the GPU with --cpu-offload-gb: SGLang's offloader (python/sglang/srt/utils/offloader.py
    OffloaderV1, 0.5.x) copies the decoder layers' parameters to pinned CPU memory one by one until ``int(gb * 1024**3)`` bytes are moved,
    so the GPU keeps the rest, less at most one parameter more than asked (not modelled)."""
    if not cpu_offload:
        return weights, source
    moved = min(cpu_offload, weights)
    return weights - moved, f"{source}, less {moved / 2**30:.2f} GiB moved to the CPU (--cpu-offload-gb)"


def drafter(sc: Scenario) -> Term | None:
    """The speculative draft's weights on one rank, as SGLang's draft worker loads them
    (speculative/eagle_worker.py ``init_lm_head`` 0.5.2, eagle_worker_v2.py 0.5.23): for NEXTN (EAGLE with the
    target's own MTP layers) those layers, the embedding and LM head the target's (``set_embed_and_head``); an
    EAGLE draft's layers with the target's embedding and head; an EAGLE-3 draft's with the target's embedding
    and its own head (``set_embed``; one that sets ``load_lm_head_from_target`` is not told apart); a DFlash draft
    borrows the target's head (dflash_worker_v2.py); a STANDALONE draft keeps both of its own
    (standalone_worker_v2.py). None for NGRAM and without speculative decoding."""
    from hybridplan.engines.sglang.dtypes import model_dtype
    from hybridplan.weights import draft_rank_bytes, mtp_rank_bytes

    sp = sc.speculative
    if not sp.active or sp.method in (None, "ngram"):
        return None
    dtype = model_dtype(sc.spec, sc.dtypes.dtype)
    if sp.draft is None or sp.draft is sc.spec or sp.draft_ref == sc.spec.source:
        # NEXTN is EAGLE on the target's own layers; a vLLM MTP method given to both engines is NEXTN here
        # (hybridplan/cmdline.py VLLM_TO_SGLANG)
        if not (sp.method in ("eagle", "nextn") or sp.method.endswith("mtp")) or not sp.layers:
            return None
        params, size = mtp_rank_bytes(sc.spec, sc.tp, dtype)
        return (
            Term(
                "drafter weights",
                size,
                "counted",
                f"the target's MTP layers (NEXTN), {params / 1e9:.2f}B "
                "parameters; embedding and LM head shared with the target",
            )
            if params
            else None
        )
    draft = sp.draft
    vocab = draft.facts.draft.vocab_size
    own = sp.method == "standalone"
    head = vocab if own or sp.method == "eagle3" else None
    kind = "model" if own else sp.method
    params, size = draft_rank_bytes(
        draft,
        sc.tp,
        dtype,
        kind=kind,
        ends=(own, head),
        target_hidden=draft.facts.draft.target_hidden_size or sc.spec.hidden_size or 0,
    )
    return Term(
        "drafter weights",
        size,
        "counted",
        f"the {sp.method} draft {sp.draft_ref or draft.name}, {params / 1e9:.2f}B parameters; embedding "
        f"{'its own' if own else 'shared'}, LM head {'its own' if head else 'shared'}",
    )


def memory(sc: Scenario) -> Waterfall:
    """From the GPU's total to R, the memory SGLang splits between its pools, on one rank."""
    from hybridplan.engines.sglang.dtypes import model_dtype
    from hybridplan.gpus import gpu as gpu_named
    from hybridplan.weights import rank_bytes

    b = sc.budget
    b.check()
    smi = gpu_named(b.gpu).smi_mib if b.gpu else b.gpu_mem / MiB
    if sc.sglang.mem_fraction_static is not None:
        fraction, how = sc.sglang.mem_fraction_static, "given (--mem-fraction-static)"
    else:
        fraction, how = default_mem_fraction(sc, smi)
    context = Term(
        "CUDA context",
        CONTEXT_TP1 if sc.tp == 1 else CONTEXT_TP,
        "estimate",
        "with the communicators, off the total before loading",
    )
    before = b.gpu_mem - context.bytes
    weights, source = rank_bytes(sc.spec, sc.tp, model_dtype(sc.spec, sc.dtypes.dtype), b.weights, b.params)
    requested = int(before * fraction)
    weights, source = offloaded(weights, source, b.cpu_offload)
    terms = [Term("weights", weights, "exact" if source.startswith("given") else "counted", source)]
    if b.overhead is not None:
        terms.append(Term("overhead", b.overhead, "exact", "given (--overhead)"))
    left = requested - sum(t.bytes for t in terms)
    draft = drafter(sc)
    if draft is not None:
        reserve = before - requested
        draft = Term(
            draft.name,
            draft.bytes,
            draft.kind,
            f"{draft.note}; loaded after the pools, out of the {reserve / GiB:.2f} GiB that "
            f"mem_fraction_static {fraction:.4g} leaves",
        )
    return Waterfall(
        b.gpu_mem, fraction, requested, tuple(terms), left, (context,), how, (draft,) if draft is not None else ()
    )


def drafter_shortfall(water: Waterfall | None) -> str | None:
    """Where the draft's weights exceed what ``mem_fraction_static`` leaves beside the pools (the draft worker
    loads them there, after the pools: ``drafter``), the start fails: said as a refusal."""
    if water is None or not water.after:
        return None
    reserve = water.gpu_bytes - sum(t.bytes for t in water.before) - water.requested
    need = sum(t.bytes for t in water.after)
    if need <= reserve:
        return None
    return (
        f"the speculative draft's weights ({need / GiB:.2f} GiB) exceed the {reserve / GiB:.2f} GiB that "
        f"mem_fraction_static {water.utilization:.4g} leaves beside the pools, where the draft worker loads "
        "them: lower --mem-fraction-static"
    )
