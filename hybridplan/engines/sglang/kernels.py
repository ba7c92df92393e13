"""How SGLang runs a decode step, for the speed model (hybridplan/speed): the kernels each decoder block launches,
the batches its CUDA graphs cover, and whether its CPU work overlaps the GPU's.

Kernels per block, named from SGLang 0.5.16's model files: where a path is the same as vLLM's (attention, the
fused MoE, the dense FFN, Mamba-2's conv and state update) the count is the same, and GDN differs:

- GDN (sglang/srt/models/qwen3_next.py ``Qwen3GatedDeltaNet.forward``): the norm, the in_proj_qkvz and in_proj_ba
  GEMMs, one ``fused_qkvzba_split_reshape_cat`` (vLLM's split, cat and copies in one Triton kernel), the conv
  update and the gated delta-rule update (layers/attention/hybrid_linear_attn_backend.py, the decode path, which
  fuses the gating into the recurrent update), the gated RMSNorm (``FusedRMSNormGated``), the out_proj GEMM;
- MoE (layers/moe/fused_moe_triton): the norm, the router GEMM, the top-k, ``moe_align_block_size``, the two
  grouped GEMMs with the activation between, ``moe_sum_reduce``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hybridplan.engines.vllm.kernels import DECODE_KERNELS as _VLLM

if TYPE_CHECKING:
    from hybridplan.scenario import Scenario

DECODE_KERNELS: dict[str, tuple[str, ...]] = {
    **_VLLM,
    "gdn": (
        "fused_add_rms_norm",
        "in_proj_qkvz",
        "in_proj_ba",
        "fused_qkvzba_split_reshape_cat",
        "causal_conv1d_update",
        "fused_sigmoid_gating_delta_rule_update",
        "fused_rms_norm_gated",
        "out_proj",
    ),
    "moe": (
        "fused_add_rms_norm",
        "router_gemm",
        "topk",
        "moe_align_block_size",
        "fused_moe_w13",
        "silu_and_mul",
        "fused_moe_w2",
        "moe_sum_reduce",
    ),
}

#: SGLang's sampler (sglang/srt/layers/sampler.py ``Sampler.forward``) for a plain request: the fp32 logits, the
#: temperature division, the softmax, the sampling kernel (FlashInfer's top-k/top-p from probabilities, greedy
#: argmax when temperature is 0)
#: each with the bytes it moves per logit (read + written)
SAMPLER_KERNELS: tuple[tuple[str, int], ...] = (
    ("logits_to_fp32", 2 + 4),
    ("apply_temperature", 4 + 4),
    ("softmax", 4 + 4),
    ("sampling_from_probs", 4),
)


def graph_max_batch(sc: Scenario) -> int:
    """The largest decode batch SGLang replays from a CUDA graph: ``--cuda-graph-max-bs``' default for the GPU and
    release (defaults.py ``decode_graph_bs``; the H100-class 256 where no GPU is named); larger runs eager."""
    from hybridplan.engines.sglang.defaults import decode_graph_bs, gpu_mib

    mib = gpu_mib(sc)
    return 256 if mib is None else decode_graph_bs(sc.sglang.release, mib, sc.tp)


def overlaps_cpu(sc: Scenario) -> tuple[bool, str]:
    """The overlap scheduler (on unless ``--disable-overlap-schedule``; sglang/srt/managers/scheduler.py
    ``event_loop_overlap``): the CPU's scheduling and output processing of one batch run while the GPU runs the
    next."""
    if not sc.sglang.overlap:
        return False, "--disable-overlap-schedule: the host's step adds to the GPU's"
    return True, "the overlap scheduler (SGLang's default): the host's step overlaps the GPU's"


def mixes_prefill(sc: Scenario) -> tuple[bool, str]:
    """Whether a step carries decodes and prompt tokens together: only with ``--enable-mixed-chunk`` (off by
    default, sglang/srt/server_args.py); otherwise ``Scheduler.get_next_batch_to_run`` (managers/scheduler.py)
    runs a prefill batch whenever a waiting request can be admitted, and the running requests wait for it."""
    return False, (
        "SGLang runs a prefill batch apart whenever a waiting request can be admitted (no --enable-mixed-chunk): "
        "the running requests' decodes wait for it"
    )
