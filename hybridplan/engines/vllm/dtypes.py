"""Which dtype each cache takes under vLLM, by release, and one sequence's footprint with them."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from msgspec.structs import replace

from hybridplan.dtypes import flag_dtype, serving_dtype, size_of
from hybridplan.engines.vllm.releases import NEWEST, Release
from hybridplan.errors import PlanError
from hybridplan.memory import CacheDtypes, Footprint
from hybridplan.memory import footprint as _footprint
from hybridplan.spec import Attention, Mamba2, ModelSpec

if TYPE_CHECKING:
    from hybridplan.scenario import DtypeChoice, Scenario

#: ``--dtype`` (vllm/config/model.py ``ModelDType``), the same in every release
MODEL_DTYPES = {
    "half": "float16",
    "float16": "float16",
    "bfloat16": "bfloat16",
    "float": "float32",
    "float32": "float32",
}
#: ``--mamba-cache-dtype`` and ``--mamba-ssm-cache-dtype`` (vllm/config/cache.py ``MambaDType``): float32 from
#: 0.10.1, float16 from 0.13.0, bfloat16 from 0.22.0
STATE_DTYPES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16"}
_STATE_SINCE = {"float32": "0.10.1", "float16": "0.13.0", "bfloat16": "0.22.0"}
#: ``--kv-cache-dtype`` (vllm/config/cache.py ``CacheDType``): the names hybridplan sizes, with the release
#: that brought each, and those it does not size
KV_DTYPES = {
    "float16": "float16",
    "bfloat16": "bfloat16",
    "fp8": "float8_e4m3fn",
    "fp8_e4m3": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2",
    "int8_per_token_head": "int8",
}
_KV_SINCE = {
    "fp8": "0.10.0",
    "fp8_e4m3": "0.10.0",
    "fp8_e5m2": "0.10.0",
    "bfloat16": "0.11.0",
    "float16": "0.18.0",
    "int8_per_token_head": "0.20.0",
}
#: ``int8_per_token_head`` (0.20.0 on): int8 K and V (vllm/utils/torch_utils.py ``STR_DTYPE_TO_TORCH_DTYPE``) and
#: one float32 scale per token, head and side beside them, carved from the KV cache: 0.20.0–0.32.0
#: ``AttentionSpec.page_size_bytes`` adds 2 · block · heads · 4 B (vllm/v1/kv_cache_interface.py), 0.33.0's
#: ``TritonAttentionBackend.customize_spec`` packs each head as (2 · head_size + 2 · 4) B
#: (vllm/v1/attention/backends/triton_attn.py); the hybrid block is aligned on that page
#: (vllm/platforms/interface.py). The same bytes in every release: 4 B a token, head and side
PER_TOKEN_HEAD_SCALE = {"int8": 4}
KV_NOT_SIZED = (
    "fp8_inc",
    "fp8_ds_mla",
    "nvfp4_ds_mla",
    "turboquant_k8v4",
    "turboquant_4bit_nc",
    "turboquant_k3v4_nc",
    "turboquant_3bit_nc",
    "octave_k3v4",
    "octave_k3v3",
    "octave_k3v3_compact",
    "ultraquant_4bit",
    "int4_per_token_head",
    "fp8_per_token_head",
    "nvfp4",
    "nvfp4_4over6",
)

#: the release from which each model class widens its conv state by the speculative tokens (``num_spec`` passed
#: to ``MambaStateShapeCalculator`` in its ``get_mamba_state_shape_from_config``, vllm/model_executor/models/*.py)
#: and the calculator keeps them (vllm/model_executor/layers/mamba/mamba_utils.py: ``kda_state_shape`` only from
#: 0.27.0). Classes not listed (Mamba-1, Jamba, Bamba, LFM2, MiniMax, Plamo2) never widen it.
_CONV_HOLDS_SPEC = {
    "Qwen3NextForCausalLM": "0.10.2",
    "Qwen3_5ForConditionalGeneration": "0.17.0",
    "Qwen3_5MoeForConditionalGeneration": "0.17.0",
    "Qwen3_5ForCausalLM": "0.17.0",
    "Qwen3_5MoeForCausalLM": "0.17.0",
    "NemotronHForCausalLM": "0.17.0",
    # the VL/Omni wrappers hand their text config to NemotronH's shape calculator
    **dict.fromkeys(
        (
            "NemotronH_Nano_VL_V2",
            "NemotronH_Nano_Omni_Reasoning_V3",
            "NemotronH_Super_Omni_Reasoning_V3",
            "NemotronH_Omni_Reasoning_V3",
        ),
        "0.17.0",
    ),
    "Mamba2ForCausalLM": "0.17.0",
    "KimiLinearForCausalLM": "0.27.0",
    "FalconH1ForCausalLM": "0.32.0",
    "Zamba2ForCausalLM": "0.32.0",
    "GraniteMoeHybridForCausalLM": "0.32.0",
}

_QWEN35_VLM = frozenset({"Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"})
_QWEN35_LM = frozenset({"Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM"})


def model_dtype(spec: ModelSpec, dtype: str | None = None) -> str:
    """``--dtype``, auto by default (vllm/config/model.py ``_resolve_auto_dtype``)."""
    return serving_dtype(
        spec.model_dtype, flag_dtype(dtype, what="--dtype", engine_flag="vLLM --dtype", accepted=MODEL_DTYPES)
    )


def _since(rel: Release, table: dict[str, str], names: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in names.items() if rel.at_least(table.get(k, "0.10.0"))}


#: ``NemotronHNanoVLV2Config`` (vllm/model_executor/models/config.py, 0.19.0 on) sets the SSM dtype of
#: NemotronH_Nano_VL_V2 from its text config's ``mamba_ssm_cache_dtype``, float32 by default. The hooks are
#: looked up by the architecture the config names (``MODELS_CONFIG_MAP``, vllm/config/vllm.py), and the Omni
#: architectures (NemotronH_Nano_Omni_Reasoning_V3 and the others, served by the same class) have none up to
#: 0.33.0: their SSM state takes the conv dtype, bf16 for a bf16 model, where Nemotron-H's is float32
VL_V2_SSM_HOOK_SINCE = "0.19.0"


def _ssm_hook(spec: ModelSpec, rel: Release) -> str | None:
    """The SSM dtype a model hook sets under "auto" (vllm/model_executor/models/config.py): Nemotron-H takes
    its config's ``mamba_ssm_cache_dtype`` from 0.13.0, else float16; from 0.19.1 float32 (0.19.1 accepts
    transformers 5, whose ``NemotronHConfig`` fills the missing field with float32; 0.20.0's hook defaults to
    float32 itself); Qwen3.5 its
    ``mamba_ssm_dtype``, the multimodal classes from 0.17.0 and the *ForCausalLM classes from 0.27.0."""
    if spec.architecture == "NemotronHForCausalLM" and rel.at_least("0.13.0"):
        return spec.config_dtype("mamba_ssm_cache_dtype") or ("float32" if rel.at_least("0.19.1") else "float16")
    if spec.architecture == "NemotronH_Nano_VL_V2" and rel.at_least(VL_V2_SSM_HOOK_SINCE):
        return spec.config_dtype("mamba_ssm_cache_dtype") or "float32"
    qwen35 = (spec.architecture in _QWEN35_VLM and rel.at_least("0.17.0")) or (
        spec.architecture in _QWEN35_LM and rel.at_least("0.27.0")
    )
    return spec.config_dtype("mamba_ssm_dtype") if qwen35 else None


def _kda_recurrent(spec: ModelSpec, rel: Release, ssm_given: str | None) -> str:
    """KDA's recurrent state: float32 up to 0.29 (the Kimi-Linear class passes no SSM dtype); from 0.30.0
    ``--mamba-ssm-cache-dtype`` float32 or bfloat16, auto still float32, anything else refused
    (``MambaStateDtypeCalculator.kda_state_dtype``, vllm/model_executor/layers/mamba/mamba_utils.py)."""
    if ssm_given is None or rel.before("0.30.0"):
        return "float32"
    if ssm_given not in ("float32", "bfloat16") and any(m.kind == "kda" for m in spec.recurrent):
        raise PlanError(
            f'vLLM {rel.version} refuses --mamba-ssm-cache-dtype {ssm_given} for KDA layers ("KDA '
            'recurrent state supports only auto, float32, and bfloat16", '
            "vllm/model_executor/layers/mamba/mamba_utils.py)"
        )
    return ssm_given


#: the release from which vLLM resolves ``--kv-cache-dtype auto`` from a ModelOpt checkpoint's KV scheme
#: (vllm/utils/torch_utils.py ``resolve_kv_cache_dtype_string``, called by vllm/engine/arg_utils.py
#: ``create_engine_config``; absent in 0.13.0), and from which its ``nvfp4`` is mapped (absent in 0.19.1)
MODELOPT_KV_SINCE = "0.14.0"
MODELOPT_NVFP4_KV_SINCE = "0.20.0"
#: compressed-tensors' ``kv_cache_scheme`` switches every attention layer's cache to "fp8" (its Attention
#: layer, vllm/attention/layer.py in 0.15, vllm/model_executor/layers/attention/attention.py from 0.16), over
#: any --kv-cache-dtype up to 0.21.0, and only under auto from 0.22.0
CT_KV_SINCE = "0.15.0"
#: from 0.20.0 the hybrid block is aligned after the model is built, on the cache dtype its layers set
#: (``Platform.update_block_size_for_backend`` in vllm/v1/executor/*.py); before, in the engine config
HYBRID_BLOCK_AFTER_LOAD_SINCE = "0.20.0"
CT_KV_AUTO_ONLY_FROM = "0.22.0"


def checkpoint_kv(spec: ModelSpec, rel: Release, given: str | None) -> tuple[str, str] | None:
    """The KV cache dtype (vLLM's name) that the checkpoint's quantization imposes over ``given`` (the
    --kv-cache-dtype name, None for auto) in ``rel``, and why; None when the flag stands.

    ModelOpt (``quant_method`` modelopt*, or an hf_quant_config.json whose producer is modelopt): under auto, its
    ``kv_cache_scheme`` (the ``quantization`` section's, else the top's), else its ``kv_cache_quant_algo``: a
    scheme of 8-bit floats, not dynamic, or the name "fp8" → fp8_e4m3; 4-bit floats or "nvfp4" → nvfp4 (from
    0.20.0); anything else → auto, with vLLM's warning. compressed-tensors: any ``kv_cache_scheme`` → fp8."""
    q = spec.quantization
    if q is None:
        return None
    if q.method.startswith("modelopt") and given is None and rel.at_least(MODELOPT_KV_SINCE):
        label = q.kv_scheme.label if q.kv_scheme is not None else (q.kv_algo or "").lower()
        if q.kv_scheme is not None:
            ks = q.kv_scheme
            name = (
                "fp8_e4m3"
                if ks.dynamic is False and ks.num_bits == 8 and ks.type == "float"
                else "nvfp4"
                if ks.num_bits == 4 and ks.type == "float" and rel.at_least(MODELOPT_NVFP4_KV_SINCE)
                else None
            )
            field = "kv_cache_scheme"
        elif q.kv_algo:
            name = {"fp8": "fp8_e4m3", "nvfp4": "nvfp4" if rel.at_least(MODELOPT_NVFP4_KV_SINCE) else None}.get(
                q.kv_algo.lower()
            )
            field = "kv_cache_quant_algo"
        else:
            return None
        if name is None:
            return None
        return name, (
            f"the ModelOpt checkpoint's {field} {label} ({q.where}; vLLM {rel.version} resolves auto "
            "from it: vllm/utils/torch_utils.py resolve_kv_cache_dtype_string)"
        )
    if (
        q.method == "compressed-tensors"
        and q.kv_scheme is not None
        and rel.at_least(CT_KV_SINCE)
        and (given is None or rel.before(CT_KV_AUTO_ONLY_FROM))
    ):
        over = "auto" if given is None else f"--kv-cache-dtype {given}"
        return "fp8", (
            f"the compressed-tensors checkpoint's kv_cache_scheme ({q.kv_scheme.label}, {q.where}): "
            f"vLLM {rel.version}'s Attention layer sets the cache to fp8 over {over}"
        )
    return None


def _kv_name(choice_kv: str | None) -> str | None:
    """The --kv-cache-dtype name as typed, lower case; None for auto."""
    if choice_kv is None:
        return None
    key = str(choice_kv).strip().lower().removeprefix("torch.")
    return None if key == "auto" else key


def _kv(spec: ModelSpec, choice: DtypeChoice, rel: Release, mdt: str) -> str:
    """The KV cache dtype: the checkpoint's where it imposes one (``checkpoint_kv``), else the flag, else the
    model dtype."""
    forced = checkpoint_kv(spec, rel, _kv_name(choice.kv))
    asked = (
        flag_dtype(
            choice.kv,
            what="--kv-dtype",
            engine_flag=f"vLLM {rel.version} --kv-cache-dtype",
            accepted=_since(rel, _KV_SINCE, KV_DTYPES),
            not_sized=KV_NOT_SIZED,
        )
        or mdt
    )
    if forced is None:
        return asked
    if forced[0] in KV_NOT_SIZED:
        raise PlanError(
            f"vLLM {rel.version} keeps a {forced[0]} KV cache for this checkpoint ({forced[1]}), which "
            "hybridplan does not size: pass --kv-dtype to size another"
        )
    kv = KV_DTYPES[forced[0]]
    if (
        spec.quantization is not None
        and spec.quantization.method == "compressed-tensors"
        and rel.before(HYBRID_BLOCK_AFTER_LOAD_SINCE)
        and size_of(kv) != size_of(asked)
        and spec.is_hybrid
    ):
        raise PlanError(
            f"vLLM {rel.version} aligns the hybrid block at the {asked} KV cache before the model is "
            f"built, then {forced[1]}; hybridplan does not model that start: pass --kv-dtype fp8"
        )
    return kv


def cache_dtypes(spec: ModelSpec, choice: DtypeChoice, rel: Release = NEWEST) -> CacheDtypes:
    """``--mamba-cache-dtype`` (conv), ``--mamba-ssm-cache-dtype`` (SSM), ``--kv-cache-dtype``; None = auto.

    vllm/model_executor/layers/mamba/mamba_utils.py ``MambaStateDtypeCalculator``: conv = the mamba cache
    dtype (auto → the model dtype); SSM = the SSM cache dtype if set, else a model hook's, else the conv dtype.
    Exceptions: GDN ignores the SSM dtype before 0.17.0; KDA's recurrent state follows ``_kda_recurrent``;
    MiniMax's linear-attention state takes the conv dtype, and refuses float32 until 0.20.0.
    """
    mdt = model_dtype(spec, choice.dtype)
    if rel.before("0.10.1"):  # no state dtype flags yet: every state takes the KV cache dtype
        kv_dt = _kv(spec, choice, rel, mdt)
        for given, flag in ((choice.conv, "--conv-dtype"), (choice.ssm, "--ssm-dtype")):
            if given is not None:
                raise PlanError(
                    f"vLLM {rel.version} has no {flag} (--mamba-cache-dtype and "
                    "--mamba-ssm-cache-dtype came in 0.10.1): its states take the KV cache dtype"
                )
        return CacheDtypes(conv=kv_dt, ssm=kv_dt, kv=kv_dt, ssm_by_kind=())
    states = _since(rel, _STATE_SINCE, STATE_DTYPES)
    conv_dt = (
        flag_dtype(
            choice.conv, what="--conv-dtype", engine_flag=f"vLLM {rel.version} --mamba-cache-dtype", accepted=states
        )
        or mdt
    )
    kv_dt = _kv(spec, choice, rel, mdt)
    ssm_given = flag_dtype(
        choice.ssm, what="--ssm-dtype", engine_flag=f"vLLM {rel.version} --mamba-ssm-cache-dtype", accepted=states
    )
    ssm_dt = ssm_given or _ssm_hook(spec, rel) or conv_dt
    by_kind = [("kda", _kda_recurrent(spec, rel, ssm_given)), ("linear_attention", conv_dt)]
    if rel.before("0.17.0"):
        by_kind.append(("gdn", conv_dt))
    if "float32" in (conv_dt, ssm_dt) and rel.before("0.10.2") and any(m.kind == "mamba1" for m in spec.recurrent):
        raise PlanError(
            f'vLLM {rel.version} refuses a float32 state for Mamba-1 layers ("fp32 state for mamba1 '
            'is not yet supported", vllm/model_executor/layers/mamba/mamba_utils.py)'
        )
    if conv_dt == "float32" and rel.before("0.20.1") and any(m.kind == "linear_attention" for m in spec.recurrent):
        raise PlanError(
            f'vLLM {rel.version} refuses a float32 state for MiniMax ("fp32 state for minimax is not '
            'yet supported", vllm/model_executor/layers/mamba/mamba_utils.py)'
        )
    return CacheDtypes(conv=conv_dt, ssm=ssm_dt, kv=kv_dt, ssm_by_kind=tuple(by_kind))


def footprint(sc: Scenario) -> Footprint:
    """One sequence of the scenario's model as vLLM caches it: its dtypes, its TP, its speculative tokens
    (they widen conv windows)."""
    return _cached(sc.spec, sc.tp, sc.dtypes, sc.spec_tokens, sc.vllm.release)


def _as_sized(spec: ModelSpec, rel: Release) -> ModelSpec:
    """0.10.0's Nemotron-H sizes the Mamba conv from ``expand · hidden_size`` rather than heads · head_dim
    (``get_mamba_state_shape_from_config``, vllm/model_executor/models/nemotron_h.py; 0.10.1 reads the heads):
    the two differ for Nemotron-Nano-9B-v2 (2 · 4,480 = 8,960 against 128 · 80 = 10,240)."""
    if (
        spec.architecture != "NemotronHForCausalLM"
        or rel.at_least("0.10.1")
        or not spec.facts.fields
        or not spec.hidden_size
    ):
        return spec
    # NemotronHConfig's ``expand`` is the config's ``mamba_expand``, 2 by default (transformers_utils/configs/
    # nemotron_h.py)
    inner = spec.facts.mamba_expand * spec.hidden_size
    return replace(
        spec, mixers=tuple(replace(m, intermediate=inner) if isinstance(m, Mamba2) else m for m in spec.mixers)
    )


def _with_scales(spec: ModelSpec, fp: Footprint, tp: int) -> Footprint:
    """A per-token-head KV cache's scales (``PER_TOKEN_HEAD_SCALE``) added to each attention layer's bytes a
    token: 2 sides · the rank's KV heads · the scale's bytes."""
    scale = PER_TOKEN_HEAD_SCALE.get(fp.dtypes.kv)
    if not scale or not fp.kv:
        return fp
    from hybridplan.spec import kv_heads_per_rank

    heads: dict[tuple[str, int | None], int] = {}
    for m in spec.mixers:
        if m.kind not in {g.kind for g in fp.kv} or not isinstance(m, Attention):
            continue
        heads.setdefault((m.kind, m.window), kv_heads_per_rank(m.num_heads, m.num_kv_heads, tp))
    if any((g.kind, g.window) not in heads for g in fp.kv):
        raise PlanError(
            f"--kv-cache-dtype int8_per_token_head is not sized for {spec.name}'s "
            f"{', '.join(sorted({g.kind for g in fp.kv}))} layers (vLLM scales per KV head)"
        )
    return replace(
        fp,
        kv=tuple(
            replace(g, bytes_per_token_per_layer=g.bytes_per_token_per_layer + 2 * heads[(g.kind, g.window)] * scale)
            for g in fp.kv
        ),
    )


@lru_cache(maxsize=256)
def _cached(spec: ModelSpec, tp: int, choice: DtypeChoice, spec_tokens: int, rel: Release) -> Footprint:
    spec = _as_sized(spec, rel)
    first = _CONV_HOLDS_SPEC.get(spec.architecture)
    return _with_scales(
        spec,
        _footprint(
            spec,
            cache_dtypes(spec, choice, rel),
            tp=tp,
            spec_tokens=spec_tokens,
            conv_holds_spec=first is not None and rel.at_least(first),
        ),
        tp,
    )


def draft_footprint(sc: Scenario) -> Footprint | None:
    """The layers speculative decoding adds (``sc.speculative.layers``: a draft model's, or the target's MTP
    layers) as vLLM caches them: the target's cache dtypes (the draft's ``ModelConfig`` takes the target's dtype,
    and the one ``CacheConfig`` serves both; vllm/config/speculative.py), the target's TP; None when none."""
    layers = sc.speculative.layers
    if not layers:
        return None
    return _cached_draft(sc.spec, layers, sc.tp, sc.dtypes, sc.spec_tokens, sc.vllm.release)


@lru_cache(maxsize=64)
def _cached_draft(
    spec: ModelSpec, layers: tuple, tp: int, choice: DtypeChoice, spec_tokens: int, rel: Release
) -> Footprint:
    draft = replace(spec, name=f"{spec.name} draft", mixers=layers)
    first = _CONV_HOLDS_SPEC.get(spec.architecture)
    return _with_scales(
        draft,
        _footprint(
            draft,
            cache_dtypes(spec, choice, rel),
            tp=tp,
            spec_tokens=spec_tokens,
            conv_holds_spec=first is not None and rel.at_least(first),
        ),
        tp,
    )
