"""The weights of a model, counted from its config, module by module, per family.

Each family function lists the checkpoint's tensors as ``Part``s (the module tree of the model class that
loads the checkpoint; the Hugging Face classes name the same tensors). A part says how tensor parallelism
splits it — ``column``/``row`` (a linear layer's output or input dimension, split over the ranks), ``vocab``
(the embedding and LM head, split by vocabulary rows), ``replicated`` (norms, routers, small vectors) — and
whether quantization touches it (linear weights of the decoder layers; never embeddings, norms, convolution
kernels or the SSM's A, D and dt vectors).

Layers a start may not load are marked: ``mtp`` (multi-token-prediction layers, loaded only for speculative
decoding with them) and ``vision`` (the vision tower of a multimodal class, loaded unless the engine is told to
serve the language model alone).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from msgspec import Struct

from hybridplan.errors import PlanError
from hybridplan.fields import Fields
from hybridplan.fields import qwen3_moe_layers as _qwen3_moe_layers
from hybridplan.spec import GatedDeltaNet


class Part(Struct, frozen=True):
    """One tensor kind, summed over the layers that hold it."""

    group: str
    name: str
    params: int
    split: str = "replicated"  # column, row, vocab, replicated
    quantizable: bool = False
    #: how many ranks hold the same slice when the TP degree exceeds what the tensor splits into (KV heads, groups)
    units: int | None = None
    section: str = "model"  # model, mtp, vision


class How(Struct, frozen=True):
    """How a linear layer splits over the ranks, whether it has a bias, and the heads or groups it is made of
    (replicated where the ranks outnumber them)."""

    split: str = "column"
    bias: bool = False
    units: int | None = None


COLUMN, ROW, WHOLE = How(), How("row"), How("replicated")


class Count:
    """Builds the parts of one model."""

    def __init__(self, f: Fields, section: str = "model") -> None:
        self.f = f
        self.parts: list[Part] = []
        self.section = section

    def add(self, group: str, name: str, params: int, times: int = 1, how: How = WHOLE) -> None:
        """A tensor that is not a linear weight (never quantized)."""
        if params and times:
            self.parts.append(Part(group, name, params * times, how.split, False, how.units, self.section))

    def linear(self, group: str, name: str, n_in: int, n_out: int, times: int = 1, how: How = COLUMN) -> None:
        if not (n_in and n_out and times):
            return
        self.parts.append(Part(group, name, n_in * n_out * times, how.split, True, how.units, self.section))
        if how.bias:
            self.add(
                group,
                name + ".bias",
                n_out,
                times,
                How(how.split if how.split == "column" else "replicated", units=how.units),
            )

    def norm(self, group: str, name: str, n: int, times: int = 1) -> None:
        self.add(group, name, n, times)


# --- shared blocks ---------------------------------------------------------------------------------


class Attn(Struct, frozen=True):
    """An attention block's shapes, as its weights are counted."""

    heads: int
    kv: int
    head_dim: int
    bias: bool = False
    #: Qwen3-Next's gated attention: q carries its gate, twice as wide
    gated: bool = False
    qk_norm: bool = False
    out_bias: bool = False
    #: the width o projects to (the input width unless given)
    out: int | None = None


class SSM2(Struct, frozen=True):
    """A Mamba-2 block's shapes, as its weights are counted."""

    heads: int
    head_dim: int
    state: int
    groups: int
    kernel: int
    inner: int
    conv_bias: bool = True
    proj_bias: bool = False
    gated_norm: bool = True


class SSM1(Struct, frozen=True):
    """A Mamba-1 block's shapes, as its weights are counted."""

    inner: int
    state: int
    kernel: int
    dt_rank: int
    conv_bias: bool = True
    proj_bias: bool = False
    #: Jamba's dt, B and C layer norms
    inner_norms: bool = False


class Experts(Struct, frozen=True):
    """A mixture-of-experts block's shapes (routed and shared experts), as its weights are counted."""

    experts: int
    inter: int
    gated: bool = True
    shared: int = 0
    shared_gated: bool = True
    shared_gate: bool = False
    latent: int | None = None


def embeddings(c: Count, vocab: int, hidden: int, tied: bool) -> None:
    c.add("embedding", "embed_tokens", vocab * hidden, how=How("vocab"))
    if not tied:
        c.add("lm_head", "lm_head", vocab * hidden, how=How("vocab"))


def attention(c: Count, hidden: int, a: Attn, times: int) -> None:
    c.linear("attention", "q_proj", hidden, a.heads * a.head_dim * (2 if a.gated else 1), times, How(bias=a.bias))
    for name in ("k_proj", "v_proj"):
        c.linear("attention", name, hidden, a.kv * a.head_dim, times, How(bias=a.bias, units=a.kv))
    c.linear("attention", "o_proj", a.heads * a.head_dim, a.out or hidden, times, How("row", a.out_bias))
    if a.qk_norm:
        c.norm("attention", "q_norm, k_norm", 2 * a.head_dim, times)


def gated_mlp(c: Count, group: str, hidden: int, inter: int, times: int, bias: bool = False) -> None:
    c.linear(group, "gate_up_proj", hidden, 2 * inter, times, How(bias=bias))
    c.linear(group, "down_proj", inter, hidden, times, How("row", bias))


def mamba2(c: Count, hidden: int, m: SSM2, times: int) -> None:
    """in_proj → (z, x, B, C, dt); the B and C slices and their conv channels belong to groups, which TP
    replicates where it cannot split them."""
    bc = 2 * m.groups * m.state
    c.linear("mamba", "in_proj.zx", hidden, 2 * m.inner, times, How(bias=m.proj_bias))
    c.linear("mamba", "in_proj.bc", hidden, bc, times, How(bias=m.proj_bias, units=m.groups))
    c.linear("mamba", "in_proj.dt", hidden, m.heads, times, How(bias=m.proj_bias))
    c.add("mamba", "conv1d.x", m.inner * m.kernel + (m.inner if m.conv_bias else 0), times, How("column"))
    c.add("mamba", "conv1d.bc", bc * m.kernel + (bc if m.conv_bias else 0), times, How("column", units=m.groups))
    c.add("mamba", "A_log, D, dt_bias", 3 * m.heads, times, How("column"))
    if m.gated_norm:
        c.add("mamba", "norm", m.inner, times, How("column"))
    c.linear("mamba", "out_proj", m.inner, hidden, times, How("row", m.proj_bias))


def mamba1(c: Count, hidden: int, m: SSM1, times: int) -> None:
    c.linear("mamba", "in_proj", hidden, 2 * m.inner, times, How(bias=m.proj_bias))
    c.add("mamba", "conv1d", m.inner * m.kernel + (m.inner if m.conv_bias else 0), times, How("column"))
    c.linear("mamba", "x_proj", m.inner, m.dt_rank + 2 * m.state, times, ROW)
    c.linear("mamba", "dt_proj", m.dt_rank, m.inner, times, How(bias=True))
    c.add("mamba", "A_log, D", m.inner * (m.state + 1), times, How("column"))
    if m.inner_norms:
        c.norm("mamba", "dt_layernorm, b_layernorm, c_layernorm", m.dt_rank + 2 * m.state, times)
    c.linear("mamba", "out_proj", m.inner, hidden, times, How("row", m.proj_bias))


def gdn(c: Count, hidden: int, g: GatedDeltaNet, times: int) -> None:
    """Gated DeltaNet (Qwen3-Next, Qwen3.5): q, k, v, z projections, b and a gates, a depthwise conv over q, k
    and v, per-value-head A and dt, a per-head-dim norm, and the output projection."""
    conv = 2 * g.num_k_heads * g.head_k_dim + g.num_v_heads * g.head_v_dim
    c.linear("gdn", "in_proj_qkvz", hidden, conv + g.num_v_heads * g.head_v_dim, times)
    c.linear("gdn", "in_proj_ba", hidden, 2 * g.num_v_heads, times)
    c.add("gdn", "conv1d", conv * g.conv_kernel, times, How("column"))
    c.add("gdn", "A_log, dt_bias", 2 * g.num_v_heads, times, How("column"))
    c.norm("gdn", "norm", g.head_v_dim, times)
    c.linear("gdn", "out_proj", g.num_v_heads * g.head_v_dim, hidden, times, ROW)


def moe(c: Count, hidden: int, e: Experts, times: int) -> None:
    width = e.latent or hidden
    c.add("moe", "router", e.experts * hidden, times)
    c.linear("moe", "experts.up", width, (2 if e.gated else 1) * e.inter * e.experts, times)
    c.linear("moe", "experts.down", e.inter * e.experts, width, times, ROW)
    if e.latent:
        c.linear("moe", "fc1_latent_proj", hidden, e.latent, times, WHOLE)
        c.linear("moe", "fc2_latent_proj", e.latent, hidden, times, WHOLE)
    if e.shared:
        c.linear("moe", "shared_expert.up", hidden, (2 if e.shared_gated else 1) * e.shared, times)
        c.linear("moe", "shared_expert.down", e.shared, hidden, times, ROW)
    if e.shared_gate:
        c.add("moe", "shared_expert_gate", hidden, times)


# --- families -----------------------------------------------------------------------------------------


def _tied(f: Fields, default: bool) -> bool:
    value = f.raw.get("tie_word_embeddings", default)
    return bool(value) if value is not None else default


def _flag(f: Fields, key: str, default: bool = False) -> bool:
    value = f.raw.get(key, default)
    return default if value is None else bool(value)


def nemotron_h(f: Fields, c: Count) -> None:
    h, v = f.int("hidden_size"), f.int("vocab_size")
    pattern = (
        f.str("hybrid_override_pattern")
        if f.has("hybrid_override_pattern")
        else "".join(
            {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}.get(t, "?")
            for t in f.list("layers_block_type" if f.has("layers_block_type") else "layer_types")
        )
    )
    embeddings(c, v, h, _tied(f, False))
    c.norm("norm", "norm_f", h)
    _nemotron_layers(f, c, pattern)
    mtp = f.raw.get("mtp_hybrid_override_pattern")
    steps = f.count("num_nextn_predict_layers")
    if isinstance(mtp, str) and mtp and steps > 0:
        # vllm/model_executor/models/nemotron_h_mtp.py: num_nextn_predict_layers steps of the pattern's layers,
        # each step's first layer with the start projections (enorm, hnorm, eh_proj), its last with the end norm
        m = Count(f, "mtp")
        m.linear("mtp", "eh_proj", 2 * h, h, steps, WHOLE)
        m.norm("mtp", "enorm, hnorm, final_layernorm", 3 * h, steps)
        _nemotron_layers(f, m, mtp * steps)
        c.parts += m.parts


def _nemotron_layers(f: Fields, c: Count, pattern: str) -> None:
    h = f.int("hidden_size")
    n = {k: pattern.count(k) for k in "M*-E"}
    c.norm("norm", "layer norms", h, len(pattern))
    if n["M"]:
        heads, hd = f.int("mamba_num_heads", default=128), f.int("mamba_head_dim", default=64)
        mamba2(
            c,
            h,
            SSM2(
                heads,
                hd,
                f.int("ssm_state_size", default=128),
                f.int("n_groups", default=8),
                f.int("conv_kernel", default=4),
                heads * hd,
                _flag(f, "use_conv_bias", True),
                _flag(f, "mamba_proj_bias"),
            ),
            n["M"],
        )
    if n["*"]:
        heads, bias = f.int("num_attention_heads"), _flag(f, "attention_bias")
        attention(
            c,
            h,
            Attn(
                heads,
                f.int("num_key_value_heads", default=8),
                f.int("head_dim", "attention_head_dim", default=h // heads),
                bias,
                out_bias=bias,
            ),
            n["*"],
        )
    if n["-"]:
        inter, bias = f.int("intermediate_size"), _flag(f, "mlp_bias")
        c.linear("mlp", "up_proj", h, inter, n["-"], How(bias=bias))
        c.linear("mlp", "down_proj", inter, h, n["-"], How("row", bias))
    if n["E"]:
        shared = f.int("moe_shared_expert_intermediate_size", default=0, minimum=0) * f.int(
            "n_shared_experts", default=1, minimum=0
        )
        moe(
            c,
            h,
            Experts(
                f.int("n_routed_experts"),
                f.int("moe_intermediate_size"),
                gated=False,
                shared=shared,
                shared_gated=False,
                latent=f.opt_int("moe_latent_size"),
            ),
            n["E"],
        )


def jamba(f: Fields, c: Count) -> None:
    h, v, n = f.int("hidden_size"), f.int("vocab_size"), f.int("num_hidden_layers")
    period, offset = f.int("attn_layer_period", default=8), f.int("attn_layer_offset", default=4, minimum=0)
    e_period, e_offset = f.int("expert_layer_period", default=2), f.int("expert_layer_offset", default=1, minimum=0)
    experts = f.count("num_experts", default=16) or 1
    n_attn = sum(1 for i in range(n) if i % period == offset)
    n_moe = sum(1 for i in range(n) if experts > 1 and i % e_period == e_offset)
    embeddings(c, v, h, _tied(f, False))
    c.norm("norm", "final_layernorm", h)
    c.norm("norm", "input_layernorm, pre_ff_layernorm", 2 * h, n)
    rank = f.raw.get("mamba_dt_rank", "auto")
    rank = math.ceil(h / 16) if rank in ("auto", None) else f.int("mamba_dt_rank")
    mamba1(
        c,
        h,
        SSM1(
            int(f.number("mamba_expand", default=2) * h),
            f.int("mamba_d_state", default=16),
            f.int("mamba_d_conv", default=4),
            rank,
            _flag(f, "mamba_conv_bias", True),
            _flag(f, "mamba_proj_bias"),
            inner_norms=True,
        ),
        n - n_attn,
    )
    heads = f.int("num_attention_heads")
    attention(c, h, Attn(heads, f.int("num_key_value_heads", default=8), h // heads), n_attn)
    inter = f.int("intermediate_size")
    gated_mlp(c, "mlp", h, inter, n - n_moe)
    moe(c, h, Experts(experts, inter), n_moe)


def zamba2(f: Fields, c: Count) -> None:
    """A Mamba-2 layer stack; the hybrid layers share ``num_mem_blocks`` transformer blocks of width 2·hidden,
    each hybrid layer adding its own projection and LoRA adapters."""
    h, v = f.int("hidden_size"), f.int("vocab_size")
    types = f.list("layers_block_type")
    n, hybrid = len(types), sum(1 for t in types if t == "hybrid")
    embeddings(c, v, h, _tied(f, True))
    c.norm("norm", "final_layernorm", h)
    c.norm("norm", "input_layernorm", h, n)
    inner = int(f.number("mamba_expand", "expand", default=2) * h)
    heads = f.int("n_mamba_heads", default=8)
    mamba2(
        c,
        h,
        SSM2(
            heads,
            inner // heads,
            f.int("mamba_d_state", default=64),
            f.int("mamba_ngroups", default=1),
            f.int("mamba_d_conv", default=4),
            inner,
            _flag(f, "use_conv_bias", True),
            _flag(f, "add_bias_linear"),
        ),
        n,
    )
    c.linear("shared", "linear", h, h, hybrid, WHOLE)
    blocks, rank = f.int("num_mem_blocks", default=1), f.int("adapter_rank", default=128)
    a, ffn, att_heads = 2 * h, f.int("intermediate_size", "ffn_hidden_size"), f.int("num_attention_heads")
    attention(c, a, Attn(att_heads, f.int("num_key_value_heads", default=att_heads), a // att_heads, out=h), blocks)
    gated_mlp(c, "shared", h, ffn, blocks)
    c.norm("norm", "shared input_layernorm, pre_ff_layernorm", a + h, blocks)
    c.linear("shared", "gate_up adapters", h, rank, hybrid, WHOLE)
    c.linear("shared", "gate_up adapters", rank, 2 * ffn, hybrid)
    if f.raw.get("use_shared_attention_adapter"):
        c.linear("shared", "q, k, v adapters", a, rank, 3 * hybrid, WHOLE)
        c.linear("shared", "q, k, v adapters", rank, a, 3 * hybrid)


def falcon_h1(f: Fields, c: Count) -> None:
    h, v, n = f.int("hidden_size"), f.int("vocab_size"), f.int("num_hidden_layers")
    embeddings(c, v, h, _tied(f, False))
    c.norm("norm", "final_layernorm", h)
    c.norm("norm", "input_layernorm, pre_ff_layernorm", 2 * h, n)
    heads = f.int("mamba_n_heads", default=128)
    hd = f.int("mamba_d_head", default=h * 2 // heads)
    mamba2(
        c,
        h,
        SSM2(
            heads,
            hd,
            f.int("mamba_d_state", default=256),
            f.int("mamba_n_groups", default=1),
            f.int("mamba_d_conv", default=4),
            f.int("mamba_d_ssm", default=heads * hd),
            _flag(f, "mamba_conv_bias", True),
            _flag(f, "mamba_proj_bias"),
            _flag(f, "mamba_rms_norm"),
        ),
        n,
    )
    att = f.int("num_attention_heads")
    attention(
        c,
        h,
        Attn(
            att,
            f.int("num_key_value_heads", default=8),
            f.int("head_dim", default=h // att),
            _flag(f, "attention_bias"),
        ),
        n,
    )
    gated_mlp(c, "mlp", h, f.int("intermediate_size"), n, _flag(f, "mlp_bias"))


def _granite_ssm(f: Fields, h: int) -> SSM2:
    heads = f.int("mamba_n_heads", default=128)
    inner = int(f.number("mamba_expand", default=2) * h)
    return SSM2(
        heads,
        f.int("mamba_d_head", default=inner // heads),
        f.int("mamba_d_state", default=256),
        f.int("mamba_n_groups", default=1),
        f.int("mamba_d_conv", default=4),
        inner,
        _flag(f, "mamba_conv_bias", True),
        _flag(f, "mamba_proj_bias"),
    )


def granite_hybrid(f: Fields, c: Count) -> None:
    h, v = f.int("hidden_size"), f.int("vocab_size")
    types = f.list("layer_types")
    n, n_m = len(types), sum(1 for t in types if t == "mamba")
    embeddings(c, v, h, _tied(f, True))
    c.norm("norm", "norm", h)
    c.norm("norm", "input_layernorm, post_attention_layernorm", 2 * h, n)
    mamba2(c, h, _granite_ssm(f, h), n_m)
    att = f.int("num_attention_heads")
    attention(c, h, Attn(att, f.int("num_key_value_heads", default=8), h // att, _flag(f, "attention_bias")), n - n_m)
    experts = f.count("num_local_experts")
    if experts:
        moe(c, h, Experts(experts, f.int("intermediate_size")), n)
    shared = f.count("shared_intermediate_size")
    if shared:
        gated_mlp(c, "mlp", h, shared, n)


def bamba(f: Fields, c: Count) -> None:
    h, v, n = f.int("hidden_size"), f.int("vocab_size"), f.int("num_hidden_layers")
    attn = set(f.list("attn_layer_indices"))
    embeddings(c, v, h, _tied(f, False))
    c.norm("norm", "final_layernorm", h)
    c.norm("norm", "input_layernorm, pre_ff_layernorm", 2 * h, n)
    mamba2(c, h, _granite_ssm(f, h), n - len(attn))
    att = f.int("num_attention_heads")
    attention(c, h, Attn(att, f.int("num_key_value_heads", default=8), h // att), len(attn))
    gated_mlp(c, "mlp", h, f.int("intermediate_size"), n)


def mamba_1(f: Fields, c: Count) -> None:
    h, v, n = f.int("hidden_size", "d_model"), f.int("vocab_size"), f.int("num_hidden_layers", "n_layer")
    embeddings(c, v, h, _tied(f, True))
    c.norm("norm", "norm_f, layer norms", h, n + 1)
    rank = f.raw.get("time_step_rank", "auto")
    rank = math.ceil(h / 16) if rank in ("auto", None) else f.int("time_step_rank")
    mamba1(
        c,
        h,
        SSM1(
            f.int("intermediate_size", default=int(f.number("expand", default=2) * h)),
            f.int("state_size", default=16),
            f.int("conv_kernel", default=4),
            rank,
            _flag(f, "use_conv_bias", True),
            _flag(f, "use_bias"),
        ),
        n,
    )


def mamba_2(f: Fields, c: Count) -> None:
    h, v, n = f.int("hidden_size"), f.int("vocab_size"), f.int("num_hidden_layers")
    embeddings(c, v, h, _tied(f, False))
    c.norm("norm", "norm_f, layer norms", h, n + 1)
    heads = f.int("num_heads", default=128)
    inner = int(f.number("expand", default=2) * h)
    mamba2(
        c,
        h,
        SSM2(
            heads,
            f.int("head_dim", default=inner // heads),
            f.int("state_size", default=128),
            f.int("n_groups", default=8),
            f.int("conv_kernel", default=4),
            inner,
            _flag(f, "use_conv_bias", True),
            _flag(f, "use_bias"),
        ),
        n,
    )


def lfm2(f: Fields, c: Count) -> None:
    h, v = f.int("hidden_size"), f.int("vocab_size")
    if f.has("layer_types"):
        n_attn = sum(1 for t in f.list("layer_types") if t != "conv")
        n = len(f.list("layer_types"))
    else:
        n = f.int("num_hidden_layers")
        n_attn = len(f.list("full_attn_idxs"))
    _lfm2_trunk(f, c, (h, v), n, n_attn)
    ff = f.int("block_ff_dim", "intermediate_size")
    if f.raw.get("block_auto_adjust_ff_dim"):
        ff = int(2 * ff / 3)
        if f.has("block_ffn_dim_multiplier"):
            ff = int(f.number("block_ffn_dim_multiplier") * ff)
        multiple = f.int("block_multiple_of", default=256)
        ff = multiple * ((ff + multiple - 1) // multiple)
    gated_mlp(c, "mlp", h, ff, n)


def _lfm2_trunk(f: Fields, c: Count, hidden_vocab: tuple[int, int], n: int, n_attn: int) -> None:
    """What LFM2 and LFM2-MoE share: the embeddings and norms, the short convs (``hidden_size`` wide, of the
    ``n - n_attn`` conv layers) and the attention of the ``n_attn`` others, with heads of ``hidden_size``."""
    h, v = hidden_vocab
    embeddings(c, v, h, _tied(f, True))
    c.norm("norm", "embedding_norm", h)
    c.norm("norm", "operator_norm, ffn_norm", 2 * h, n)
    c.linear("conv", "in_proj", h, 3 * h, n - n_attn)
    c.add("conv", "conv", h * f.int("conv_L_cache", default=3), n - n_attn, How("column"))
    c.linear("conv", "out_proj", h, h, n - n_attn, ROW)
    heads = f.int("num_attention_heads")
    attention(c, h, Attn(heads, f.int("num_key_value_heads", default=8), h // heads, qk_norm=True), n_attn)


def lfm2_moe(f: Fields, c: Count) -> None:
    """vllm/model_executor/models/lfm2_moe.py: LFM2's trunk (short convs and heads of ``hidden_size``), a gated
    MLP of ``intermediate_size`` in the first ``num_dense_layers`` layers, then a router, the experts and, with
    ``use_expert_bias``, the routing bias (``expert_bias``) a layer."""
    h, v = f.int("hidden_size"), f.int("vocab_size")
    types = f.list("layer_types")
    n, n_attn = len(types), sum(1 for t in types if t == "full_attention")
    _lfm2_trunk(f, c, (h, v), n, n_attn)
    dense_n = min(f.int("num_dense_layers", default=2, minimum=0), n)
    gated_mlp(c, "mlp", h, f.int("intermediate_size", default=7168), dense_n)
    experts = f.int("num_experts", default=32)
    moe(c, h, Experts(experts, f.int("moe_intermediate_size", default=1792)), n - dense_n)
    if _flag(f, "use_expert_bias", True):
        c.add("moe", "expert_bias", experts, n - dense_n)


def qwen_next(f: Fields, c: Count) -> None:
    h, v = f.int("hidden_size"), f.int("vocab_size")
    if f.has("layer_types"):
        types = f.list("layer_types")
        n, n_attn = len(types), sum(1 for t in types if t != "linear_attention")
    else:
        n = f.int("num_hidden_layers")
        interval = f.int("full_attention_interval", default=4)
        n_attn = sum(1 for i in range(n) if (i + 1) % interval == 0)
    embeddings(c, v, h, _tied(f, False))
    c.norm("norm", "norm", h)
    _qwen_layers(f, c, (n, n_attn), list(range(n)))
    mtp = _qwen_mtp_layers(f)
    if mtp:
        m = Count(f, "mtp")
        m.linear("mtp", "fc", 2 * h, h, mtp, WHOLE)
        m.norm("mtp", "pre_fc_norm_hidden, pre_fc_norm_embedding, norm", 3 * h, mtp)
        _qwen_layers(f, m, (mtp, mtp), [])
        c.parts += m.parts


def _qwen_mtp_layers(f: Fields) -> int:
    """The MTP layers a Qwen3.5/3.6 or Qwen3-Next checkpoint holds, as vLLM builds them: ``mtp_num_hidden_layers``
    (qwen3_5_mtp.py) or ``num_nextn_predict_layers`` (qwen3_next_mtp.py), 1 where the config does not say (both
    read the field with ``getattr(config, …, 1)``, 0.10.2–0.33.0; Qwen3-Next's configs do not name it, and their
    checkpoints hold one ``mtp.layers.0``)."""
    key = "mtp_num_hidden_layers" if f.has("mtp_num_hidden_layers") else "num_nextn_predict_layers"
    return f.count(key, default=1)


def _qwen_layers(f: Fields, c: Count, counts: tuple[int, int], ids: list[int]) -> None:
    """``counts``: (layers, of which full attention); ``ids``: the layer indices (none for MTP layers)."""
    h, (n, n_attn) = f.int("hidden_size"), counts
    c.norm("norm", "input_layernorm, post_attention_layernorm", 2 * h, n)
    gdn(
        c,
        h,
        GatedDeltaNet(
            f.int("linear_num_key_heads", default=16),
            f.int("linear_num_value_heads", default=32),
            f.int("linear_key_head_dim", default=128),
            f.int("linear_value_head_dim", default=128),
            f.int("linear_conv_kernel_dim", default=4),
        ),
        n - n_attn,
    )
    heads = f.int("num_attention_heads")
    attention(
        c,
        h,
        Attn(heads, f.int("num_key_value_heads", default=2), f.int("head_dim", default=256), gated=True, qk_norm=True),
        n_attn,
    )
    experts = f.count("num_experts")
    dense_ids = set(f.int_list("mlp_only_layers"))
    step = f.count("decoder_sparse_step", default=1) or 1
    n_moe = (n if not ids else sum(1 for i in ids if i not in dense_ids and (i + 1) % step == 0)) if experts else 0
    gated_mlp(c, "mlp", h, f.int("intermediate_size", default=0, minimum=0), n - n_moe)
    if n_moe:
        moe(
            c,
            h,
            Experts(
                experts,
                f.int("moe_intermediate_size"),
                shared=f.count("shared_expert_intermediate_size"),
                shared_gate=True,
            ),
            n_moe,
        )


def qwen_vision(vision: Mapping[str, Any], lm_hidden: int) -> Count:
    """The Qwen3.5 vision tower (``Qwen3_5VisionConfig``; a missing field takes its class default)."""
    f = Fields(vision, "Qwen3.5 vision_config")
    c = Count(f, "vision")
    h, inter, depth = (
        f.int("hidden_size", default=1152),
        f.int("intermediate_size", default=4304),
        f.int("depth", default=27),
    )
    patch, temporal, chans = (
        f.int("patch_size", default=16),
        f.int("temporal_patch_size", default=2),
        f.int("in_channels", default=3),
    )
    out, merge = f.int("out_hidden_size", default=lm_hidden), f.int("spatial_merge_size", default=2)
    biased = How(bias=True)
    c.add("vision", "patch_embed", chans * temporal * patch * patch * h + h)
    c.add("vision", "pos_embed", f.int("num_position_embeddings", default=2304) * h)
    c.norm("vision", "norm1, norm2", 4 * h, depth)
    c.linear("vision", "qkv", h, 3 * h, depth, biased)
    c.linear("vision", "proj", h, h, depth, How("row", True))
    c.linear("vision", "mlp.fc1", h, inter, depth, biased)
    c.linear("vision", "mlp.fc2", inter, h, depth, How("row", True))
    mergers = 1 + len(vision.get("deepstack_visual_indexes") or [])
    wide = h * merge * merge
    c.norm("vision", "merger.norm", 2 * h, mergers)
    c.linear("vision", "merger.fc1", wide, wide, mergers, biased)
    c.linear("vision", "merger.fc2", wide, out, mergers, How("row", True))
    return c


def minimax(f: Fields, c: Count) -> None:
    h, v = f.int("hidden_size"), f.int("vocab_size")
    kinds = (
        f.list("attn_type_list")
        if f.has("attn_type_list")
        else [0 if t == "linear_attention" else 1 for t in f.list("layer_types")]
    )
    n, n_attn = len(kinds), sum(1 for k in kinds if k == 1)
    embeddings(c, v, h, _tied(f, False))
    c.norm("norm", "norm", h)
    c.norm("norm", "input_layernorm, post_attention_layernorm", 2 * h, n)
    heads = f.int("num_attention_heads")
    hd = f.int("head_dim", default=h // heads)
    attention(c, h, Attn(heads, f.int("num_key_value_heads", default=8), hd), n_attn)
    lin = n - n_attn
    c.linear("linear_attention", "qkv_proj", h, 3 * heads * hd, lin)
    c.linear("linear_attention", "output_gate", h, heads * hd, lin)
    c.linear("linear_attention", "out_proj", heads * hd, h, lin, ROW)
    c.norm("linear_attention", "norm", heads * hd, lin)
    moe(
        c,
        h,
        Experts(f.int("num_local_experts"), f.int("intermediate_size"), shared=f.count("shared_intermediate_size")),
        n,
    )


def dense(f: Fields, c: Count) -> None:
    h, v, n = f.int("hidden_size"), f.int("vocab_size"), f.int("num_hidden_layers")
    heads = f.int("num_attention_heads")
    qwen2 = f.raw.get("model_type") == "qwen2"
    embeddings(c, v, h, _tied(f, False))
    c.norm("norm", "norm", h)
    c.norm("norm", "input_layernorm, post_attention_layernorm", 2 * h, n)
    bias = _flag(f, "attention_bias")
    attention(
        c,
        h,
        Attn(
            heads,
            f.int("num_key_value_heads", default=heads),
            f.int("head_dim", default=h // heads),
            qwen2 or bias,
            qk_norm=f.raw.get("model_type") == "qwen3",
            out_bias=bias,
        ),
        n,
    )
    gated_mlp(c, "mlp", h, f.int("intermediate_size"), n, _flag(f, "mlp_bias"))


def qwen3_moe(f: Fields, c: Count) -> None:
    """Qwen3-MoE: Qwen3's attention (q/k norms, no bias) in every layer; a router and ``num_experts`` gated
    experts of ``moe_intermediate_size`` in the sparse layers, Qwen3's MLP in the others (no shared expert)."""
    h, v, n = f.int("hidden_size"), f.int("vocab_size"), f.int("num_hidden_layers")
    heads = f.int("num_attention_heads")
    embeddings(c, v, h, _tied(f, False))
    c.norm("norm", "norm", h)
    c.norm("norm", "input_layernorm, post_attention_layernorm", 2 * h, n)
    bias = _flag(f, "attention_bias")
    attention(
        c,
        h,
        Attn(
            heads,
            f.int("num_key_value_heads", default=heads),
            f.int("head_dim", default=h // heads),
            bias,
            qk_norm=True,
            out_bias=bias,
        ),
        n,
    )
    sparse = sum(_qwen3_moe_layers(f))
    gated_mlp(c, "mlp", h, f.int("intermediate_size"), n - sparse)
    if sparse:
        moe(c, h, Experts(f.int("num_experts"), f.int("moe_intermediate_size")), sparse)


def deepseek(f: Fields, c: Count) -> None:
    h, v, n = f.int("hidden_size"), f.int("vocab_size"), f.int("num_hidden_layers")
    embeddings(c, v, h, _tied(f, False))
    c.norm("norm", "norm", h)
    _deepseek_layers(f, c, n, first=0)
    mtp = f.count("num_nextn_predict_layers")
    if mtp:
        m = Count(f, "mtp")
        m.linear("mtp", "eh_proj", 2 * h, h, mtp, WHOLE)
        m.norm("mtp", "enorm, hnorm, shared_head.norm", 3 * h, mtp)
        _deepseek_layers(f, m, mtp, first=n)
        c.parts += m.parts


def _deepseek_layers(f: Fields, c: Count, n: int, first: int) -> None:
    h = f.int("hidden_size")
    c.norm("norm", "input_layernorm, post_attention_layernorm", 2 * h, n)
    _mla(f, c, n)
    dense_n = f.count("first_k_dense_replace")
    experts = f.count("n_routed_experts")
    n_dense = max(0, min(n, dense_n - first)) if experts else n
    gated_mlp(c, "mlp", h, f.int("intermediate_size"), n_dense)
    if n - n_dense:
        inter = f.int("moe_intermediate_size")
        moe(c, h, Experts(experts, inter, shared=inter * f.count("n_shared_experts")), n - n_dense)


def _mla(f: Fields, c: Count, n: int) -> None:
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi-Linear): low-rank KV (and optionally Q)."""
    h, heads = f.int("hidden_size"), f.int("num_attention_heads")
    rope, nope, vd = (
        f.int("qk_rope_head_dim", default=64),
        f.int("qk_nope_head_dim", default=128),
        f.int("v_head_dim", default=128),
    )
    kv_rank, q_rank = f.int("kv_lora_rank", default=512), f.opt_int("q_lora_rank")
    if q_rank:
        c.linear("attention", "q_a_proj", h, q_rank, n, WHOLE)
        c.norm("attention", "q_a_layernorm", q_rank, n)
        c.linear("attention", "q_b_proj", q_rank, heads * (nope + rope), n)
    else:
        c.linear("attention", "q_proj", h, heads * (nope + rope), n)
    c.linear("attention", "kv_a_proj_with_mqa", h, kv_rank + rope, n, WHOLE)
    c.norm("attention", "kv_a_layernorm", kv_rank, n)
    c.linear("attention", "kv_b_proj", kv_rank, heads * (nope + vd), n)
    c.linear("attention", "o_proj", heads * vd, h, n, ROW)


def kimi_linear(f: Fields, c: Count) -> None:
    """Kimi-Linear: KDA layers and MLA layers (``linear_attn_config``), a dense first layer, then MoE with a
    shared expert and a router bias."""
    h, v, n = f.int("hidden_size"), f.int("vocab_size"), f.int("num_hidden_layers")
    la = f.raw.get("linear_attn_config") or {}
    kda_n = len(la.get("kda_layers") or [])
    embeddings(c, v, h, _tied(f, False))
    c.norm("norm", "norm", h)
    c.norm("norm", "input_layernorm, post_attention_layernorm", 2 * h, n)
    heads, hd, kernel = (
        int(la.get("num_heads", 32)),
        int(la.get("head_dim", 128)),
        int(la.get("short_conv_kernel_size", 4)),
    )
    p = heads * hd
    # q, k, v, the beta gate (one per head) and f_a; f_b, g_a, g_b: the low-rank forget and output gates
    for name, width in (("q_proj, k_proj, v_proj", 3 * p), ("b_proj", heads)):
        c.linear("kda", name, h, width, kda_n)
    c.linear("kda", "f_a_proj, g_a_proj", h, 2 * hd, kda_n, WHOLE)
    c.linear("kda", "f_b_proj, g_b_proj", hd, 2 * p, kda_n)
    c.add("kda", "q_conv1d, k_conv1d, v_conv1d", 3 * p * kernel, kda_n, How("column"))
    c.add("kda", "dt_bias, A_log", p + heads, kda_n, How("column"))
    c.norm("kda", "o_norm", hd, kda_n)
    c.linear("kda", "o_proj", p, h, kda_n, ROW)
    _mla(f, c, n - kda_n)
    dense_n = min(n, f.count("first_k_dense_replace"))
    gated_mlp(c, "mlp", h, f.int("intermediate_size"), dense_n)
    experts, inter = f.int("num_experts"), f.int("moe_intermediate_size")
    moe(c, h, Experts(experts, inter, shared=inter * f.count("num_shared_experts")), n - dense_n)
    c.add("moe", "e_score_correction_bias", experts, n - dense_n)


#: architecture → counter (a family hybridplan cannot count is refused: pass --weights)
FAMILIES: dict[str, Callable[[Fields, Count], None]] = {
    "NemotronHForCausalLM": nemotron_h,
    "JambaForCausalLM": jamba,
    "Zamba2ForCausalLM": zamba2,
    "FalconH1ForCausalLM": falcon_h1,
    "GraniteMoeHybridForCausalLM": granite_hybrid,
    "BambaForCausalLM": bamba,
    "MambaForCausalLM": mamba_1,
    "FalconMambaForCausalLM": mamba_1,
    "Mamba2ForCausalLM": mamba_2,
    "Lfm2ForCausalLM": lfm2,
    "Lfm2MoeForCausalLM": lfm2_moe,
    "Qwen3NextForCausalLM": qwen_next,
    "Qwen3_5ForConditionalGeneration": qwen_next,
    "Qwen3_5MoeForConditionalGeneration": qwen_next,
    "Qwen3_5ForCausalLM": qwen_next,
    "Qwen3_5MoeForCausalLM": qwen_next,
    "MiniMaxText01ForCausalLM": minimax,
    "MiniMaxForCausalLM": minimax,
    "MiniMaxM1ForCausalLM": minimax,
    "LlamaForCausalLM": dense,
    "MistralForCausalLM": dense,
    "Qwen2ForCausalLM": dense,
    "Qwen3ForCausalLM": dense,
    "Qwen3MoeForCausalLM": qwen3_moe,
    "DeepseekV2ForCausalLM": deepseek,
    "DeepseekV3ForCausalLM": deepseek,
    "KimiLinearForCausalLM": kimi_linear,
}
#: multimodal classes whose checkpoint holds a vision tower the engine loads
VISION = {"Qwen3_5ForConditionalGeneration": qwen_vision, "Qwen3_5MoeForConditionalGeneration": qwen_vision}


def parts(architecture: str, config: Mapping[str, Any], family: str) -> list[Part]:
    """Every tensor kind of the checkpoint, counted from its config."""
    counter = FAMILIES.get(architecture)
    if counter is None:
        raise PlanError(f"hybridplan does not count the weights of {architecture}: give --weights or --params")
    raw = config
    if isinstance(config.get("text_config"), Mapping):
        raw = {**config["text_config"], "architectures": config.get("architectures")}
    f = Fields(raw, family)
    c = Count(f)
    counter(f, c)
    vision = VISION.get(architecture)
    if vision is not None:
        c.parts += vision(config.get("vision_config") or {}, f.int("hidden_size")).parts
    return c.parts
