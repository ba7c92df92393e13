"""How vLLM runs a decode step, for the speed model (hybridplan/speed): the kernels each decoder block launches,
the batches its CUDA graphs cover, and whether the CPU's work on the next step overlaps the GPU's on this one.

Kernels per block, named from the model files of vLLM 0.14.0 and the layers they call (the same structure from
0.11 to 0.23 for these paths; the count is what the speed model multiplies by a per-kernel time):

- attention (vllm/model_executor/models/llama.py ``LlamaDecoderLayer``, qwen3_next.py ``Qwen3NextAttention``):
  the fused residual-add RMSNorm, the qkv GEMM, the rotary embedding, the KV-cache write (``reshape_and_cache``),
  the attention kernel, the o_proj GEMM;
- GDN (qwen3_next.py ``Qwen3NextGatedDeltaNet.forward`` and ``_forward_core``): the norm, the in_proj_qkvz and
  in_proj_ba GEMMs, the concatenation of q, k and v, ``causal_conv1d_update``, the three ``.contiguous()`` copies of
  ``rearrange_mixed_qkv`` (inside the opaque ``gdn_attention_core`` op, so not fused by torch.compile),
  ``fused_gdn_gating``, ``fused_recurrent_gated_delta_rule``, the gated RMSNorm, the out_proj GEMM;
- Mamba-2 (nemotron_h.py ``NemotronHMambaDecoderLayer`` → layers/mamba/mamba_mixer2.py): the norm, the in_proj
  GEMM, ``causal_conv1d_update``, ``selective_state_update``, the gated RMSNorm, the out_proj GEMM;
- dense FFN (llama.py ``LlamaMLP``, nemotron_h.py ``NemotronHMLP``): the norm, the up (or gate_up) GEMM, the
  activation, the down GEMM;
- MoE (qwen3_moe.py / qwen3_next.py ``SparseMoeBlock`` → layers/fused_moe/fused_moe.py ``fused_experts_impl``):
  the norm, the router GEMM, ``topk_softmax``, ``moe_align_block_size``, the w13 grouped GEMM, ``silu_and_mul``, the
  w2 grouped GEMM, ``moe_sum``; a shared expert adds its gate_up GEMM, activation, down GEMM and sigmoid gate;
- the LM head (``LogitsProcessor``): the final norm, the lm_head GEMM (the TP gather of the logits is a
  collective, ``speed`` times it with the all-reduces).

Kinds without a model file read here (MLA, KDA, Mamba-1, short conv, lightning attention) are counted by the same
rule — norm, in-projections, the mixer's own kernels, out-projection — from their mixer layers' names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hybridplan.scenario import Scenario

DECODE_KERNELS: dict[str, tuple[str, ...]] = {
    "attention": ("fused_add_rms_norm", "qkv_proj", "rotary_embedding", "reshape_and_cache", "attention", "o_proj"),
    "sliding_attention": (
        "fused_add_rms_norm",
        "qkv_proj",
        "rotary_embedding",
        "reshape_and_cache",
        "attention",
        "o_proj",
    ),
    "mla": (
        "fused_add_rms_norm",
        "q_a_proj",
        "q_a_layernorm",
        "q_b_proj",
        "kv_a_proj",
        "kv_a_layernorm",
        "rotary_embedding",
        "concat_and_cache_mla",
        "mla_decode",
        "o_proj",
    ),
    "gdn": (
        "fused_add_rms_norm",
        "in_proj_qkvz",
        "in_proj_ba",
        "cat_qkv",
        "causal_conv1d_update",
        "contiguous_q",
        "contiguous_k",
        "contiguous_v",
        "fused_gdn_gating",
        "fused_recurrent_gated_delta_rule",
        "rms_norm_gated",
        "out_proj",
    ),
    "kda": (
        "fused_add_rms_norm",
        "q_proj",
        "k_proj",
        "v_proj",
        "f_proj",
        "b_proj",
        "causal_conv1d_update",
        "fused_kda_gate",
        "fused_recurrent_kda",
        "g_proj",
        "rms_norm_gated",
        "o_proj",
    ),
    "mamba2": (
        "fused_add_rms_norm",
        "in_proj",
        "causal_conv1d_update",
        "selective_state_update",
        "rms_norm_gated",
        "out_proj",
    ),
    "mamba1": (
        "fused_add_rms_norm",
        "in_proj",
        "causal_conv1d_update",
        "x_proj",
        "dt_proj",
        "selective_state_update",
        "out_proj",
    ),
    "short_conv": ("fused_add_rms_norm", "in_proj", "causal_conv1d_update", "gate_mul", "out_proj"),
    "linear_attention": ("fused_add_rms_norm", "qkv_proj", "lightning_decode", "norm_gate", "out_proj"),
    "mlp": ("fused_add_rms_norm", "gate_up_proj", "act_and_mul", "down_proj"),
    "moe": (
        "fused_add_rms_norm",
        "router_gemm",
        "topk_softmax",
        "moe_align_block_size",
        "fused_moe_w13",
        "silu_and_mul",
        "fused_moe_w2",
        "moe_sum",
    ),
    "shared": ("shared_gate_up_proj", "shared_act_and_mul", "shared_down_proj", "shared_expert_gate"),
    "lm_head": ("final_rms_norm", "lm_head"),
}

#: vLLM's sampler (vllm/v1/sample/sampler.py ``Sampler.forward``) for a request without penalties or top-k/top-p,
#: as `vllm bench serve` sends: the logits cast to fp32, the temperature division, the log-softmax the
#: ``logprobs`` path computes only when asked (not here), the greedy argmax or the exponential-race sample
#: (``random_sample``: the probabilities' softmax, the exponential draw, the division, the argmax)
#: each with the bytes it moves per logit (read + written): bf16 logits in, fp32 from there
SAMPLER_KERNELS: tuple[tuple[str, int], ...] = (
    ("logits_to_fp32", 2 + 4),
    ("apply_temperature", 4 + 4),
    ("softmax", 4 + 4),
    ("exponential_", 4),
    ("div", 8 + 4),
    ("argmax", 4),
)

#: async scheduling (the CPU's scheduling of step n+1 while the GPU runs step n) is on by default from 0.11.2
#: (vllm/config/vllm.py ``VllmConfig.__post_init__``: ``async_scheduling`` None → True) unless speculative
#: decoding or pipeline parallelism is configured; 0.11.0–0.11.1: off unless asked (scheduler.py default False)
ASYNC_SCHEDULING_FROM = "0.11.2"


def graph_max_batch(sc: Scenario) -> int:
    """The largest decode batch vLLM replays from a CUDA graph: ``max_cudagraph_capture_size`` =
    ``min(max_num_seqs × 2, 512)`` when not given (vllm/config/scheduler.py 0.11.0 ``cuda_graph_sizes``,
    vllm/config/compilation.py 0.14.0 ``max_cudagraph_capture_size``); a larger batch runs without graphs."""
    from hybridplan.engines.vllm.defaults import max_num_seqs

    return min(2 * max_num_seqs(sc), 512)


def overlaps_cpu(sc: Scenario) -> tuple[bool, str]:
    """Whether the CPU's per-step work overlaps the GPU's, and why."""
    if sc.vllm.release.before(ASYNC_SCHEDULING_FROM):
        return False, (
            f"vLLM {sc.vllm.release.version}: async scheduling off by default (on from 0.11.2): the host's step adds"
        )
    if sc.spec_tokens:
        return False, "async scheduling is off with speculative decoding (vllm/config/vllm.py): the host's step adds"
    if sc.pp > 1:
        return False, "async scheduling is off with pipeline parallelism (vllm/config/vllm.py): the host's step adds"
    return True, "async scheduling (vLLM's default from 0.11.2): the host's step overlaps the GPU's"


def mixes_prefill(sc: Scenario) -> tuple[bool, str]:
    """Whether a step carries the running requests' decodes and waiting prompts' tokens together: always in V1
    (vllm/v1/core/sched/scheduler.py ``Scheduler.schedule``: the running requests are scheduled first, a token each,
    then the waiting ones' prompt tokens up to what is left of ``max_num_batched_tokens``; chunked prefill is on
    in every V1 release hybridplan knows)."""
    return True, (
        "vLLM's scheduler puts the running requests' decodes and the waiting prompts' tokens in one step "
        "(up to --max-num-batched-tokens): a prompt adds its compute to the running batch's step, not a step of "
        "its own"
    )


#: weight-only schemes (activations stay bf16): the GEMM loads the packed weights, dequantizes each tile in the
#: kernel and multiplies on the bf16 tensor cores, so the tensor peak is bf16's whatever the weights' width.
#: vLLM: AWQ and GPTQ run Marlin (layers/quantization/awq_marlin.py, gptq_marlin.py ``apply_*_marlin_linear``,
#: its ``mma.sync`` on bf16 fragments); SGLang 0.5.15–0.5.16: the same, and ModelOpt ``W4A16_NVFP4``
#: (layers/quantization/modelopt_quant.py ``ModelOptNvFp4A16LinearMethod.apply`` → ``apply_fp4_marlin_linear``);
#: bitsandbytes dequantizes to bf16 before a bf16 GEMM
WEIGHT_ONLY_METHODS = frozenset(
    {"awq", "awq_marlin", "gptq", "gptq_marlin", "auto-round", "auto_round", "bitsandbytes"}
)
WEIGHT_ONLY_ALGOS = frozenset({"W4A16_NVFP4", "W4A16_AWQ", "W4A16"})


def gemm_dtype(q) -> str:
    """The tensor-core class a checkpoint's linear layers multiply in: ``bf16`` for a weight-only scheme
    (``WEIGHT_ONLY_*``) and for unquantized weights, ``fp8`` for 8-bit-and-narrower weights whose activations
    are quantized too (FP8 W8A8, NVFP4 and MXFP4 W4A4; the tensor peak falls back to bf16 where the GPU has no
    fp8 figure, model.py ``tensor_peak``)."""
    scheme = None if q is None else q.scheme
    if scheme is None:
        return "bf16"
    if q.method in WEIGHT_ONLY_METHODS or (q.algo or "").upper() in WEIGHT_ONLY_ALGOS:
        return "bf16"
    return "fp8" if scheme.bytes_per_param < 1.5 else "bf16"
