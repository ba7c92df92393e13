"""One adapter per model family: a raw Hugging Face ``config.json`` dict → a normalised ``ModelSpec``.

Pure functions over a dict; no I/O. Layouts per family follow the checkpoints' own fields (the raw JSON,
so both the transformers-4 spellings ``mamba``/``attention`` and the transformers-5 ones
``linear_attention``/``full_attention`` are accepted).

Missing fields: a field a real checkpoint may omit takes the transformers class default, because that is
what vLLM sees when it loads the config; each such default is recorded in ``ModelSpec.notes`` so the user
learns it was assumed (it matters: Zamba2's ``n_mamba_heads`` defaults to 8 where Zamba2-7B has 112). The
fields that define a model's size and every checkpoint carries (``hidden_size``, the layer count or layer
list, the attention head count) are required.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from hybridplan.errors import PlanError
from hybridplan.fields import Fields
from hybridplan.fields import display_int as _display_int
from hybridplan.fields import qwen3_moe_layers as _qwen3_moe_layers
from hybridplan.quant_config import stated_quantization
from hybridplan.spec import (
    MLA,
    Attention,
    ConfigFacts,
    ContextFields,
    DraftFields,
    GatedDeltaNet,
    KimiDeltaAttention,
    LinearAttention,
    Mamba1,
    Mamba2,
    Mixer,
    ModelSpec,
    RopeScaling,
    ShortConv,
)

#: config fields that name a recurrent-state dtype
_STATE_DTYPE_FIELDS = ("mamba_ssm_cache_dtype", "mamba_ssm_dtype")


# Spellings of the layer types across checkpoints and transformers versions.
_RECURRENT_NAMES = {"mamba", "linear_attention", "m", "conv"}
_ATTENTION_NAMES = {"attention", "full_attention", "*", "g", "hybrid"}


def _check_layer_count(f: Fields, key: str, listed: int) -> None:
    """A per-layer list must name every layer ``num_hidden_layers`` counts."""
    if f.has("num_hidden_layers") and f.int("num_hidden_layers") != listed:
        raise PlanError(
            f"{f.family} config: {key} lists {listed} layers but num_hidden_layers is {f.int('num_hidden_layers')}"
        )


def _layer_types(f: Fields, key: str, allowed: set[str]) -> list[str]:
    types = f.list(key)
    if not types:
        raise PlanError(f"{f.family} config field {key!r} is empty")
    _check_layer_count(f, key, len(types))
    for t in types:
        if not isinstance(t, str) or t.lower() not in allowed:
            raise PlanError(
                f"{f.family} config field {key!r} holds an unknown layer type {t!r} "
                f"(known: {', '.join(sorted(allowed))})"
            )
    return [t.lower() for t in types]


def _attention(
    f: Fields,
    *,
    heads_key: tuple[str, ...] = ("num_attention_heads",),
    kv_default: Any = None,
    head_dim: int | None = None,
    window: int | None = None,
) -> Attention:
    heads = f.int(*heads_key)
    kv = f.int("num_key_value_heads", default=heads if kv_default is None else kv_default)
    if head_dim is None:
        head_dim = (
            f.int("head_dim")
            if f.has("head_dim")
            else _even(f, f.int("hidden_size"), heads, "hidden_size", "num_attention_heads")
        )
    return Attention(num_heads=heads, num_kv_heads=kv, head_dim=head_dim, window=window)


def _even(f: Fields, a: int, b: int, a_name: str, b_name: str) -> int:
    if a % b:
        raise PlanError(f"{f.family} config: {a_name} ({a}) is not a multiple of {b_name} ({b})")
    return a // b


def _mamba2(f: Fields, m: Mamba2) -> Mamba2:
    """A Mamba-2 mixer the model can be built from."""
    if m.num_heads * m.head_dim != m.intermediate:
        raise PlanError(
            f"{f.family} config: Mamba-2 inner width {m.intermediate} is not heads·head_dim = "
            f"{m.num_heads}·{m.head_dim} = {m.num_heads * m.head_dim}; the model cannot be built from it"
        )
    if m.num_heads % m.n_groups:
        raise PlanError(
            f"{f.family} config: Mamba heads ({m.num_heads}) are not a multiple of the groups ({m.n_groups})"
        )
    return m


def _model_dtype(f: Fields) -> str:
    return f.dtype("torch_dtype", "dtype", default="bfloat16")


# --------------------------------------------------------------------------------------------------
# Families
# --------------------------------------------------------------------------------------------------


def nemotron_h(f: Fields) -> dict:
    f.int("hidden_size")
    # Pattern: one char per layer, M = Mamba-2, * = attention, - = MLP, E = MoE (transformers 5 writes a list).
    if f.has("hybrid_override_pattern"):
        pattern = f.str("hybrid_override_pattern")
        chars = list(pattern)
    elif not (f.has("layers_block_type") or f.has("layer_types")):
        # the field vLLM's model reads (vllm/model_executor/models/nemotron_h.py, 0.33.0), not a list's key
        raise PlanError(
            f"{f.family} config is missing the needed field 'hybrid_override_pattern' (or its list "
            "form 'layers_block_type', as transformers 5 writes it)"
        )
    else:
        names = {"mamba": "M", "linear_attention": "M", "attention": "*", "full_attention": "*", "mlp": "-", "moe": "E"}
        chars = [
            names[t]
            for t in _layer_types(f, "layers_block_type" if f.has("layers_block_type") else "layer_types", set(names))
        ]
    if not chars or any(c not in "M*-E" for c in chars):
        raise PlanError(f"{f.family} config: hybrid_override_pattern must use only M, *, - and E")
    if f.has("num_hidden_layers") and f.int("num_hidden_layers") != len(chars):
        raise PlanError(
            f"{f.family} config: hybrid_override_pattern has {len(chars)} layers but "
            f"num_hidden_layers is {f.int('num_hidden_layers')}"
        )
    mixers: list[Mixer] = []
    ffn: list[str] = []
    mamba = attn = None
    if "M" in chars:
        heads = f.int("mamba_num_heads", default=128)
        head_dim = f.int("mamba_head_dim", default=64)
        # vLLM: I = mamba_num_heads·mamba_head_dim, never expand·hidden (Nano-3: 64·64 ≠ 2·2688).
        mamba = _mamba2(
            f,
            Mamba2(
                intermediate=heads * head_dim,
                num_heads=heads,
                head_dim=head_dim,
                state_size=f.int("ssm_state_size", "mamba_d_state", default=128),
                n_groups=f.int("n_groups", "mamba_n_groups", default=8),
                conv_kernel=f.int("conv_kernel", "mamba_d_conv", default=4),
            ),
        )
    if "*" in chars:
        head_dim = f.int("head_dim", "attention_head_dim", default=128)
        attn = _attention(f, kv_default=8, head_dim=head_dim)
    for c in chars:
        if c == "M":
            mixers.append(mamba)
        elif c == "*":
            mixers.append(attn)
        else:
            ffn.append("mlp" if c == "-" else "moe")
    return dict(mixers=mixers, ffn=ffn, chunk=f.int("chunk_size", "mamba_chunk_size", default=128))


def jamba(f: Fields) -> dict:
    n = f.int("num_hidden_layers")
    period, offset = f.int("attn_layer_period", default=8), f.int("attn_layer_offset", default=4, minimum=0)
    e_period, e_offset = f.int("expert_layer_period", default=2), f.int("expert_layer_offset", default=1, minimum=0)
    experts = _display_int(f.raw.get("num_experts", 16))
    hidden = f.int("hidden_size")
    mamba = Mamba1(
        intermediate=int(f.number("mamba_expand", default=2) * hidden),
        state_size=f.int("mamba_d_state", default=16),
        conv_kernel=f.int("mamba_d_conv", default=4),
    )
    attn = _attention(f, kv_default=8)
    mixers = [attn if i % period == offset else mamba for i in range(n)]
    ffn = ["moe" if experts > 1 and i % e_period == e_offset else "mlp" for i in range(n)]
    return dict(mixers=mixers, ffn=ffn, chunk=None)


def zamba2(f: Fields) -> dict:
    hidden = f.int("hidden_size")
    if f.has("layers_block_type"):
        types = _layer_types(f, "layers_block_type", {"mamba", "linear_attention", "hybrid"})
    else:
        types = ["hybrid" if t == "g" else "mamba" for t in _layer_types(f, "layer_mapping", {"m", "g"})]
    if not f.has("mamba_d_state") and f.has("state_size", "mamba_headdim"):
        # Pre-release Zyphra schema (state_size, conv_dimension, expansion_factor, mamba_headdim).
        expand = f.number("expansion_factor", default=2)
        head_dim = f.int("mamba_headdim", default=64)
        inner = int(expand * hidden)
        heads = _even(f, inner, head_dim, "expansion_factor·hidden_size", "mamba_headdim")
        state, kernel = f.int("state_size", default=64), f.int("conv_dimension", default=4)
        f.notes.append(
            "pre-release Zamba2 schema: read state_size, conv_dimension, expansion_factor, "
            "mamba_headdim as the HF fields"
        )
    else:
        inner = int(f.number("mamba_expand", default=2) * hidden)
        heads = f.int("n_mamba_heads", default=8)
        head_dim = _even(f, inner, heads, "mamba_expand·hidden_size", "n_mamba_heads")
        state, kernel = f.int("mamba_d_state", default=64), f.int("mamba_d_conv", default=4)
    mamba = _mamba2(
        f,
        Mamba2(
            intermediate=inner,
            num_heads=heads,
            head_dim=head_dim,
            state_size=state,
            n_groups=f.int("mamba_ngroups", default=1),
            conv_kernel=kernel,
        ),
    )
    heads_attn = f.int("num_attention_heads", "num_mem_heads")
    # The shared block attends over concat(hidden, embedding): head size 2·hidden/heads.
    attn = _attention(
        f,
        heads_key=("num_attention_heads", "num_mem_heads"),
        head_dim=_even(f, 2 * hidden, heads_attn, "2·hidden_size", "num_attention_heads"),
    )
    mixers: list[Mixer] = []
    ffn: list[str] = []
    for t in types:
        if t == "hybrid":
            mixers.append(attn)
            ffn.append("mlp")
        mixers.append(mamba)
    return dict(mixers=mixers, ffn=ffn, chunk=f.int("chunk_size", default=256))


def falcon_h1(f: Fields) -> dict:
    n, hidden = f.int("num_hidden_layers"), f.int("hidden_size")
    heads = f.int("mamba_n_heads", default=128)
    # vLLM: I = mamba_d_ssm if set, else int(mamba_expand·hidden); FalconH1Config's default mamba_d_ssm is 1024.
    defaulted = "mamba_d_ssm" not in f.raw
    if "mamba_d_ssm" in f.raw and f.raw["mamba_d_ssm"] is None:
        inner = int(f.number("mamba_expand", default=2) * hidden)
    else:
        inner = f.int("mamba_d_ssm", default=1024)
    head_dim = (
        _even(f, inner, heads, "the Mamba inner width", "mamba_n_heads")
        if f.raw.get("mamba_d_head", "auto") == "auto"
        else f.int("mamba_d_head")
    )
    try:
        mamba = _mamba2(
            f,
            Mamba2(
                intermediate=inner,
                num_heads=heads,
                head_dim=head_dim,
                state_size=f.int("mamba_d_state", default=256),
                n_groups=f.int("mamba_n_groups", default=1),
                conv_kernel=f.int("mamba_d_conv", default=4),
            ),
        )
    except PlanError as exc:
        if not defaulted or "inner width" not in str(exc):
            raise
        raise PlanError(
            f"{f.family} config has no mamba_d_ssm, and FalconH1Config's default inner width, "
            f"{inner}, is not heads·head_dim = {heads}·{head_dim} = {heads * head_dim}: add mamba_d_ssm "
            "(the checkpoint's Mamba inner width) to the config"
        ) from None
    attn = _attention(f, kv_default=8)
    mixers: list[Mixer] = []
    for _ in range(n):  # every layer runs attention and Mamba-2 in parallel
        mixers += [attn, mamba]
    return dict(mixers=mixers, ffn=["mlp"] * n, chunk=f.int("mamba_chunk_size", default=256))


def _granite_like_mamba(f: Fields) -> Mamba2:
    hidden = f.int("hidden_size")
    inner = int(f.number("mamba_expand", default=2) * hidden)
    heads = f.int("mamba_n_heads", default=128)
    head_dim = (
        _even(f, inner, heads, "mamba_expand·hidden_size", "mamba_n_heads")
        if f.raw.get("mamba_d_head", "auto") == "auto"
        else f.int("mamba_d_head")
    )
    return _mamba2(
        f,
        Mamba2(
            intermediate=inner,
            num_heads=heads,
            head_dim=head_dim,
            state_size=f.int("mamba_d_state", default=256),
            n_groups=f.int("mamba_n_groups", default=1),
            conv_kernel=f.int("mamba_d_conv", default=4),
        ),
    )


def granite_hybrid(f: Fields) -> dict:
    key = "layer_types" if f.has("layer_types") else "layers_block_type"
    types = _layer_types(f, key, {"mamba", "linear_attention", "attention", "full_attention"})
    mamba, attn = _granite_like_mamba(f), _attention(f, kv_default=8)
    mixers = [mamba if t in _RECURRENT_NAMES else attn for t in types]
    moe = _display_int(f.raw.get("num_local_experts")) > 0
    return dict(mixers=mixers, ffn=["moe" if moe else "mlp"] * len(types), chunk=f.int("mamba_chunk_size", default=256))


def bamba(f: Fields) -> dict:
    n = f.int("num_hidden_layers")
    attn_idx = f.indices("attn_layer_indices", n) if f.has("attn_layer_indices") else set()
    mamba = _granite_like_mamba(f)
    attn = _attention(f, kv_default=8) if attn_idx else None
    return dict(
        mixers=[attn if i in attn_idx else mamba for i in range(n)],
        ffn=["mlp"] * n,
        chunk=f.int("mamba_chunk_size", default=256),
    )


def mamba1(f: Fields) -> dict:
    n, hidden = f.int("num_hidden_layers", "n_layer"), f.int("hidden_size", "d_model")
    # falcon-mamba-7b says expand 16 beside intermediate_size 8192: the explicit width wins.
    inner = f.int("intermediate_size") if f.has("intermediate_size") else int(f.number("expand", default=2) * hidden)
    m = Mamba1(
        intermediate=inner, state_size=f.int("state_size", default=16), conv_kernel=f.int("conv_kernel", default=4)
    )
    return dict(mixers=[m] * n, ffn=[], chunk=None)


def mamba2(f: Fields) -> dict:
    n, hidden = f.int("num_hidden_layers"), f.int("hidden_size")
    inner = int(f.number("expand", default=2) * hidden)
    m = _mamba2(
        f,
        Mamba2(
            intermediate=inner,
            num_heads=f.int("num_heads", default=128),
            head_dim=f.int("head_dim", default=64),
            state_size=f.int("state_size", default=128),
            n_groups=f.int("n_groups", default=8),
            conv_kernel=f.int("conv_kernel", default=4),
        ),
    )
    return dict(mixers=[m] * n, ffn=[], chunk=f.int("chunk_size", default=256))


def lfm2(f: Fields) -> dict:
    hidden = f.int("hidden_size")
    if f.has("layer_types"):
        types = _layer_types(f, "layer_types", {"conv", "full_attention", "attention"})
        is_attn = [t != "conv" for t in types]
    else:
        n = f.int("num_hidden_layers")
        idx = f.indices("full_attn_idxs", n)  # indices beyond n are refused there
        is_attn = [i in idx for i in range(n)]
    conv = ShortConv(dim=f.int("conv_dim", default=hidden), l_cache=f.int("conv_L_cache", default=3, minimum=2))
    attn = _attention(f, kv_default=8)
    return dict(mixers=[attn if a else conv for a in is_attn], ffn=["mlp"] * len(is_attn), chunk=None)


def lfm2_moe(f: Fields) -> dict:
    """LFM2-MoE (vllm/model_executor/models/lfm2_moe.py from 0.11.1, sglang configs/lfm2_moe.py): LFM2's layers
    from ``layer_types``, which ``Lfm2MoeConfig`` needs (no ``full_attn_idxs``, no default); a layer is attention
    only where it says "full_attention". The short convs are ``hidden_size`` wide (``conv_dim`` is not read) and
    the attention heads ``hidden_size / num_attention_heads`` (``head_dim`` is not read); a gated MLP in the
    first ``num_dense_layers`` layers, experts in the rest."""
    hidden = f.int("hidden_size")
    types = _layer_types(f, "layer_types", {"conv", "full_attention"})
    conv = ShortConv(dim=hidden, l_cache=f.int("conv_L_cache", default=3, minimum=2))
    heads = f.int("num_attention_heads")
    attn = _attention(f, kv_default=8, head_dim=_even(f, hidden, heads, "hidden_size", "num_attention_heads"))
    dense = f.int("num_dense_layers", default=2, minimum=0)
    return dict(
        mixers=[attn if t == "full_attention" else conv for t in types],
        ffn=["mlp" if i < dense else "moe" for i in range(len(types))],
        chunk=None,
    )


def qwen_next(f: Fields) -> dict:
    if f.has("layer_types"):
        types = _layer_types(f, "layer_types", {"linear_attention", "full_attention", "attention"})
        is_attn = [t != "linear_attention" for t in types]
    else:
        n = f.int("num_hidden_layers")
        interval = f.int("full_attention_interval", default=4)
        is_attn = [(i + 1) % interval == 0 for i in range(n)]
    gdn = GatedDeltaNet(
        num_k_heads=f.int("linear_num_key_heads", default=16),
        num_v_heads=f.int("linear_num_value_heads", default=32),
        head_k_dim=f.int("linear_key_head_dim", default=128),
        head_v_dim=f.int("linear_value_head_dim", default=128),
        conv_kernel=f.int("linear_conv_kernel_dim", default=4),
    )
    if gdn.num_v_heads % gdn.num_k_heads:
        raise PlanError(
            f"{f.family} config: linear value heads ({gdn.num_v_heads}) are not a multiple of the "
            f"key heads ({gdn.num_k_heads})"
        )
    attn = _attention(f, kv_default=2, head_dim=f.int("head_dim", default=256))
    moe = _display_int(f.raw.get("num_experts")) > 0
    return dict(mixers=[attn if a else gdn for a in is_attn], ffn=["moe" if moe else "mlp"] * len(is_attn), chunk=None)


def kimi_linear(f: Fields) -> dict:
    n = f.int("num_hidden_layers")
    lac = f.raw.get("linear_attn_config") or {}
    if not isinstance(lac, Mapping):
        raise PlanError(f"{f.family} config field 'linear_attn_config' must be an object")
    sub = Fields(lac, f.family + " linear_attn_config")
    if sub.has("full_attn_layers"):
        full = sub.indices("full_attn_layers", n, base=1)  # 1-indexed in the checkpoint
    else:
        full = {i for i in range(n) if i and i % 4 == 0}
        f.notes.append(
            "linear_attn_config.full_attn_layers not in config: using the class fallback "
            "(full attention where i % 4 == 0, i > 0)"
        )
    kda = KimiDeltaAttention(
        num_heads=sub.int("num_heads", default=f.raw.get("linear_num_heads") or 32),
        head_dim=sub.int("head_dim", default=f.raw.get("linear_head_dim") or 128),
        conv_kernel=sub.int("short_conv_kernel_size", default=f.raw.get("linear_conv_kernel_dim") or 4),
    )
    f.notes.extend(sub.notes)
    mla = MLA(
        num_heads=f.int("num_attention_heads"),
        kv_lora_rank=f.int("kv_lora_rank", default=512),
        qk_rope_head_dim=f.int("qk_rope_head_dim", default=64),
    )
    first_dense = _display_int(f.raw.get("first_k_dense_replace", 1))
    return dict(
        mixers=[mla if i in full else kda for i in range(n)],
        ffn=["mlp" if i < first_dense else "moe" for i in range(n)],
        chunk=None,
    )


def minimax(f: Fields) -> dict:
    if f.has("attn_type_list"):
        kinds = f.list("attn_type_list")
        if any(k not in (0, 1) or isinstance(k, bool) for k in kinds):
            raise PlanError(f"{f.family} config field 'attn_type_list' must hold 0 (lightning) or 1 (softmax)")
        is_attn = [k == 1 for k in kinds]
        _check_layer_count(f, "attn_type_list", len(kinds))
    else:
        types = _layer_types(f, "layer_types", {"linear_attention", "full_attention", "attention"})
        is_attn = [t != "linear_attention" for t in types]
    attn = _attention(f)
    lin = LinearAttention(num_heads=attn.num_heads, head_dim=attn.head_dim)
    return dict(mixers=[attn if a else lin for a in is_attn], ffn=["moe"] * len(is_attn), chunk=None)


def dense_attention(f: Fields) -> dict:
    """Llama, Mistral, Qwen2 and kin: one attention mixer and one MLP per layer."""
    n = f.int("num_hidden_layers")
    window = f.opt_int("sliding_window")
    use_sliding = f.raw.get("use_sliding_window", True) is not False
    attn_full = _attention(f)
    slid = Attention(attn_full.num_heads, attn_full.num_kv_heads, attn_full.head_dim, window) if window else attn_full
    if window and use_sliding and "max_window_layers" in f.raw and f.raw.get("model_type") == "qwen2":
        # Qwen2: layers from max_window_layers on use the window when use_sliding_window is on.
        first = f.int("max_window_layers", minimum=0)
        mixers = [slid if i >= first else attn_full for i in range(n)]
    else:
        mixers = [slid if window and use_sliding else attn_full] * n
    return dict(mixers=mixers, ffn=["mlp"] * n, chunk=None)


def deepseek(f: Fields) -> dict:
    n = f.int("num_hidden_layers")
    mla = MLA(
        num_heads=f.int("num_attention_heads"),
        kv_lora_rank=f.int("kv_lora_rank", default=512),
        qk_rope_head_dim=f.int("qk_rope_head_dim", default=64),
    )
    dense = _display_int(f.raw.get("first_k_dense_replace"))
    moe = _display_int(f.raw.get("n_routed_experts")) > 0
    return dict(mixers=[mla] * n, ffn=["moe" if moe and i >= dense else "mlp" for i in range(n)], chunk=None)


def qwen3_moe(f: Fields) -> dict:
    """Qwen3-MoE (Qwen3-30B-A3B, Qwen3-235B-A22B): Qwen3's attention in every layer, routed experts with no
    shared expert in the sparse layers, Qwen3's dense MLP in the others."""
    out = dense_attention(f)
    out["ffn"] = ["moe" if m else "mlp" for m in _qwen3_moe_layers(f)]
    return out


Adapter = Callable[[Fields], dict]

#: architecture name → (family label, adapter)
ARCHITECTURES: dict[str, tuple[str, Adapter]] = {
    "NemotronHForCausalLM": ("Nemotron-H", nemotron_h),
    # Nemotron-H's vision-language and omni wrappers: the language model is a Nemotron-H, its config nested as
    # ``llm_config`` (vLLM's configs expose it as ``text_config``; vllm/model_executor/models/nano_nemotron_vl.py)
    **dict.fromkeys(
        (
            "NemotronH_Nano_VL_V2",
            "NemotronH_Nano_Omni_Reasoning_V3",
            "NemotronH_Super_Omni_Reasoning_V3",
            "NemotronH_Omni_Reasoning_V3",
        ),
        ("Nemotron-H", nemotron_h),
    ),
    "JambaForCausalLM": ("Jamba", jamba),
    "Zamba2ForCausalLM": ("Zamba2", zamba2),
    "FalconH1ForCausalLM": ("Falcon-H1", falcon_h1),
    "GraniteMoeHybridForCausalLM": ("Granite-4.0-H", granite_hybrid),
    "BambaForCausalLM": ("Bamba", bamba),
    "MambaForCausalLM": ("Mamba", mamba1),
    "FalconMambaForCausalLM": ("FalconMamba", mamba1),
    "Mamba2ForCausalLM": ("Mamba2", mamba2),
    "Lfm2ForCausalLM": ("LFM2", lfm2),
    "Lfm2MoeForCausalLM": ("LFM2-MoE", lfm2_moe),
    "Qwen3NextForCausalLM": ("Qwen3-Next", qwen_next),
    "Qwen3_5ForConditionalGeneration": ("Qwen3.5", qwen_next),
    "Qwen3_5MoeForConditionalGeneration": ("Qwen3.5", qwen_next),
    "Qwen3_5ForCausalLM": ("Qwen3.5", qwen_next),
    "Qwen3_5MoeForCausalLM": ("Qwen3.5", qwen_next),
    "KimiLinearForCausalLM": ("Kimi-Linear", kimi_linear),
    "MiniMaxText01ForCausalLM": ("MiniMax-Text-01", minimax),
    "MiniMaxForCausalLM": ("MiniMax-Text-01", minimax),
    "MiniMaxM1ForCausalLM": ("MiniMax-Text-01", minimax),
    "LlamaForCausalLM": ("Llama", dense_attention),
    "MistralForCausalLM": ("Mistral", dense_attention),
    "Qwen2ForCausalLM": ("Qwen2", dense_attention),
    "Qwen3ForCausalLM": ("Qwen3", dense_attention),
    "Qwen3MoeForCausalLM": ("Qwen3-MoE", qwen3_moe),
    "DeepseekV2ForCausalLM": ("DeepSeek", deepseek),
    "DeepseekV3ForCausalLM": ("DeepSeek", deepseek),
}

#: model_type → architecture, for configs without an ``architectures`` list
MODEL_TYPES: dict[str, str] = {
    "nemotron_h": "NemotronHForCausalLM",
    "jamba": "JambaForCausalLM",
    "zamba2": "Zamba2ForCausalLM",
    "falcon_h1": "FalconH1ForCausalLM",
    "granitemoehybrid": "GraniteMoeHybridForCausalLM",
    "bamba": "BambaForCausalLM",
    "mamba": "MambaForCausalLM",
    "falcon_mamba": "FalconMambaForCausalLM",
    "mamba2": "Mamba2ForCausalLM",
    "lfm2": "Lfm2ForCausalLM",
    "lfm2_moe": "Lfm2MoeForCausalLM",
    "qwen3_next": "Qwen3NextForCausalLM",
    "qwen3_5": "Qwen3_5ForConditionalGeneration",
    "qwen3_5_moe": "Qwen3_5MoeForConditionalGeneration",
    "qwen3_5_text": "Qwen3_5ForCausalLM",
    "qwen3_5_moe_text": "Qwen3_5MoeForCausalLM",
    "kimi_linear": "KimiLinearForCausalLM",
    "minimax_text_01": "MiniMaxText01ForCausalLM",
    "minimax": "MiniMaxForCausalLM",
    "minimax_m1": "MiniMaxM1ForCausalLM",
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "deepseek_v2": "DeepseekV2ForCausalLM",
    "deepseek_v3": "DeepseekV3ForCausalLM",
}


def architecture_of(config: Mapping[str, Any]) -> str:
    archs = config.get("architectures")
    if isinstance(archs, list) and archs:
        for arch in archs:
            if isinstance(arch, str) and arch in ARCHITECTURES:
                return arch
        raise PlanError(f"unsupported architecture {archs[0]!r} (supported: {', '.join(sorted(ARCHITECTURES))})")
    model_type = config.get("model_type")
    if isinstance(model_type, str) and model_type in MODEL_TYPES:
        return MODEL_TYPES[model_type]
    if archs is None and model_type is None:
        raise PlanError("config has neither 'architectures' nor 'model_type': cannot tell the model family")
    raise PlanError(f"unsupported model_type {model_type!r} (supported: {', '.join(sorted(MODEL_TYPES))})")


#: every config field either engine reads a maximum context from (vLLM ``derive_max_model_len_and_key``,
#: SGLang ``CONTEXT_LENGTH_KEYS``)
CONTEXT_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)


def _rope_entries(raw: Mapping[str, Any]) -> list[RopeScaling]:
    """``rope_scaling`` (transformers 4), or ``rope_parameters`` (transformers 5: one mapping, or one per layer
    type); an entry without a type is the default RoPE."""
    value = raw.get("rope_scaling") or raw.get("rope_parameters")
    if not isinstance(value, Mapping):
        return []
    entries = (
        [v for v in value.values() if isinstance(v, Mapping)]
        if not any(k in value for k in ("rope_type", "type", "factor"))
        else [value]
    )
    out = []
    for e in entries:
        kind = e.get("rope_type", e.get("type", "default"))
        factor = e.get("factor")
        original = e.get("original_max_position_embeddings")
        out.append(
            RopeScaling(
                rope_type=kind if isinstance(kind, str) else "default",
                factor=float(factor)
                if isinstance(factor, (int, float))
                and not isinstance(factor, bool)
                and math.isfinite(factor)
                and factor > 0
                else None,
                names_original="original_max_position_embeddings" in e,
                original=original
                if isinstance(original, int) and not isinstance(original, bool) and original > 0
                else None,
            )
        )
    return out


def context_fields(raw: Mapping[str, Any]) -> ContextFields:
    """The length fields and RoPE scaling a (text) config sets; values that are not positive integers are
    not lengths an engine could use, and are left out."""
    lengths = tuple(
        (k, raw[k])
        for k in CONTEXT_KEYS
        if isinstance(raw.get(k), int) and not isinstance(raw.get(k), bool) and raw[k] > 0
    )
    return ContextFields(lengths=lengths, rope=tuple(_rope_entries(raw)))


#: Nemotron-H's layer names as one character each (the adapter's reading of ``layers_block_type``/``layer_types``)
_NEMOTRON_CHARS = {
    "mamba": "M",
    "linear_attention": "M",
    "attention": "*",
    "full_attention": "*",
    "mlp": "-",
    "moe": "E",
}
#: the layer counts a text config may set, read as written (``ConfigFacts.counts``)
_COUNT_KEYS = (
    "num_hidden_layers",
    "n_layer",
    "num_nextn_predict_layers",
    "mtp_num_hidden_layers",
    "mtp_hybrid_override_pattern",
)


def _positive(value: Any) -> int:
    """A count or width as written, 0 where absent or not a whole number."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _nemotron_pattern(config: Mapping[str, Any]) -> str:
    """Nemotron-H's layers, one character each: ``hybrid_override_pattern``, else the layer-type list."""
    if isinstance(config.get("hybrid_override_pattern"), str) and config["hybrid_override_pattern"]:
        return config["hybrid_override_pattern"]
    key = "layers_block_type" if config.get("layers_block_type") else "layer_types"
    names = config.get(key) or []
    if not isinstance(names, list) or any(not isinstance(n, str) or n not in _NEMOTRON_CHARS for n in names):
        return ""
    return "".join(_NEMOTRON_CHARS[n] for n in names)


def _hashable(value: Any) -> object:
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value


def _draft_fields(cfg: Mapping[str, Any]) -> DraftFields:
    """A draft class's own fields (top level of its config: EAGLE, EAGLE-3 and DFlash configs are flat)."""
    aux = 0
    for key, field in (("eagle_config", "eagle_aux_hidden_state_layer_ids"), ("dflash_config", "target_layer_ids")):
        ids = cfg[key].get(field) if isinstance(cfg.get(key), Mapping) else None
        if ids:
            aux = len(ids)
            break
    heads = _positive(cfg.get("num_attention_heads"))
    return DraftFields(
        hidden_size=_positive(cfg.get("hidden_size")),
        num_hidden_layers=_positive(cfg.get("num_hidden_layers")),
        heads=heads,
        kv_heads=_positive(cfg.get("num_key_value_heads")),
        head_dim=_positive(cfg.get("head_dim")),
        aux_layers=aux or _positive(cfg.get("num_aux_hidden_states")),
        vocab_size=_positive(cfg.get("draft_vocab_size")) or _positive(cfg.get("vocab_size")),
        target_hidden_size=_positive(cfg.get("target_hidden_size")),
    )


def _experts(config: Mapping[str, Any]) -> tuple[int, int]:
    """Routed experts and experts per token, the text config's over the wrapper's."""
    text = config.get("text_config")
    merged = {**text, **config} if isinstance(text, Mapping) else config
    count = next(
        (_positive(merged[k]) for k in ("n_routed_experts", "num_experts", "num_local_experts") if merged.get(k)), 0
    )
    top_k = next(
        (
            _positive(merged[k])
            for k in ("num_experts_per_tok", "moe_topk", "moe_top_k", "num_experts_per_token", "top_k")
            if merged.get(k)
        ),
        0,
    )
    return count, top_k


def config_facts(config: Mapping[str, Any], architecture: str, family: str) -> ConfigFacts:
    """What the rules read of ``config`` beyond its mixers (``ConfigFacts``), read here once."""
    from hybridplan.weights.families import parts

    text = config["text_config"] if isinstance(config.get("text_config"), Mapping) else config
    vision = config.get("vision_config")
    tower = None
    if "vision_config" in config:
        v = vision if isinstance(vision, Mapping) else {}
        tower = (_positive(v.get("num_hidden_layers", v.get("depth", 24))), _positive(v.get("hidden_size", 1024)))
    quant = config.get("quantization_config")
    method = quant.get("quant_method") if isinstance(quant, Mapping) else None
    try:
        counted, why = tuple(parts(architecture, config, family)), None
    except PlanError as exc:
        counted, why = (), str(exc)
    experts, top_k = _experts(config)
    return ConfigFacts(
        fields=tuple(sorted(map(str, config))),
        vocab_size=_positive(text.get("vocab_size")) or _positive(config.get("vocab_size")),
        vision=tower,
        quant_method=None if method is None else str(method),
        mamba_expand=_positive(config.get("mamba_expand")) or 2,
        layer_pattern=_nemotron_pattern(config) if family == "Nemotron-H" else "",
        counts=tuple((k, _hashable(text[k])) for k in _COUNT_KEYS if k in text),
        experts=experts,
        experts_per_token=top_k,
        draft=_draft_fields(config),
        parts=counted,
        parts_error=why,
    )


def spec_from_config(
    config: Mapping[str, Any], *, name: str, source: str | None = None, aliases: tuple[str, ...] = ()
) -> ModelSpec:
    """Normalise a raw HF config dict. Raises PlanError, naming the field, on anything it cannot use."""
    if not isinstance(config, Mapping):
        raise PlanError(f"{name}: a config must be a JSON object, got {type(config).__name__}")
    arch = architecture_of(config)
    family, adapter = ARCHITECTURES[arch]
    raw: Mapping[str, Any] = config
    # multimodal wrappers nest the LM: Qwen3.5 as text_config, Nemotron-H's VL and Omni wrappers as llm_config
    key = next((k for k in ("text_config", "llm_config") if config.get(k) is not None), None)
    if key is not None and isinstance(config[key], Mapping):
        raw = {**config[key], "architectures": config.get("architectures")}
    elif key is not None:
        raise PlanError(f"{family} config field {key!r} must be an object")
    f = Fields(raw, family)
    parts = adapter(f)
    if not parts["mixers"]:
        raise PlanError(f"{family} config describes no layers")
    quantization = None
    if stated_quantization(config)[0] is not None:  # the quantization module loads only for a quantized model
        # here, not at the top: hybridplan.weights (its families) imports this module
        from hybridplan.weights.quant import read as read_quantization

        quantization = read_quantization(config)
    return ModelSpec(
        name=name,
        architecture=arch,
        family=family,
        model_dtype=_model_dtype(f),
        mixers=tuple(parts["mixers"]),
        ffn=tuple(parts["ffn"]),
        hidden_size=_display_int(raw.get("hidden_size", raw.get("d_model"))),
        max_position_embeddings=f.opt_int("max_position_embeddings"),
        context=context_fields(raw),
        chunk_size=parts["chunk"],
        config_dtypes=tuple((k, f.dtype(k)) for k in _STATE_DTYPE_FIELDS if f.has(k)),
        source=source,
        aliases=aliases,
        notes=tuple(f.notes),
        config_json=json.dumps(config, sort_keys=True, default=str),
        facts=config_facts(config, arch, family),
        quantization=quantization,
    )
