"""Which dtype each cache takes under vLLM, by release, and one sequence's footprint with them."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from hybridplan.dtypes import flag_dtype, serving_dtype
from hybridplan.engines.vllm.releases import NEWEST, Release
from hybridplan.memory import CacheDtypes, Footprint
from hybridplan.memory import footprint as _footprint
from hybridplan.spec import ModelSpec

if TYPE_CHECKING:
    from hybridplan.scenario import DtypeChoice, Scenario

#: ``--dtype`` (vllm/config/model.py ``ModelDType``)
MODEL_DTYPES = {"half": "float16", "float16": "float16", "bfloat16": "bfloat16", "float": "float32",
                "float32": "float32"}
#: ``--mamba-cache-dtype`` and ``--mamba-ssm-cache-dtype`` (vllm/config/cache.py ``MambaDType``)
STATE_DTYPES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16"}
#: ``--kv-cache-dtype`` (vllm/config/cache.py ``CacheDType``): the names hybridplan sizes, and the rest
KV_DTYPES = {"float16": "float16", "bfloat16": "bfloat16", "fp8": "float8_e4m3fn", "fp8_e4m3": "float8_e4m3fn",
             "fp8_e5m2": "float8_e5m2"}
KV_NOT_SIZED = ("fp8_inc", "fp8_ds_mla", "nvfp4_ds_mla", "turboquant_k8v4", "turboquant_4bit_nc",
                "turboquant_k3v4_nc", "turboquant_3bit_nc", "octave_k3v4", "octave_k3v3", "octave_k3v3_compact",
                "ultraquant_4bit", "int4_per_token_head", "int8_per_token_head", "fp8_per_token_head", "nvfp4",
                "nvfp4_4over6")

_QWEN35_VLM = frozenset({"Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"})
_QWEN35_LM = frozenset({"Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM"})


def model_dtype(spec: ModelSpec, dtype: str | None = None) -> str:
    """``--dtype``, auto by default (vllm/config/model.py ``_resolve_auto_dtype``)."""
    return serving_dtype(spec.model_dtype, flag_dtype(dtype, what="--dtype", engine_flag="vLLM --dtype",
                                                      accepted=MODEL_DTYPES))


def cache_dtypes(spec: ModelSpec, choice: DtypeChoice, rel: Release = NEWEST) -> CacheDtypes:
    """``--mamba-cache-dtype`` (conv), ``--mamba-ssm-cache-dtype`` (SSM), ``--kv-cache-dtype``; None = auto.

    vllm/model_executor/layers/mamba/mamba_utils.py ``MambaStateDtypeCalculator``: conv = mamba cache dtype
    (auto → model dtype); SSM = the SSM cache dtype if set, else the conv dtype. Model hooks that resolve an
    "auto" SSM dtype (vllm/model_executor/models/config.py):
      - Nemotron-H: 0.14–0.17 float16; 0.20+ the config's ``mamba_ssm_cache_dtype``, default float32.
      - Qwen3.5: 0.20+ the config's ``mamba_ssm_dtype`` (the *ForCausalLM classes only from 0.28).
      - KDA keeps its recurrent state in float32 under auto.
    """
    mdt = model_dtype(spec, choice.dtype)
    conv_dt = flag_dtype(choice.conv, what="--conv-dtype", engine_flag="vLLM --mamba-cache-dtype",
                         accepted=STATE_DTYPES) or mdt
    kv_dt = flag_dtype(choice.kv, what="--kv-dtype", engine_flag="vLLM --kv-cache-dtype", accepted=KV_DTYPES,
                       not_sized=KV_NOT_SIZED) or mdt
    ssm_given = flag_dtype(choice.ssm, what="--ssm-dtype", engine_flag="vLLM --mamba-ssm-cache-dtype",
                           accepted=STATE_DTYPES)
    if ssm_given:
        ssm_dt = ssm_given
    elif spec.family == "Nemotron-H" and rel.minor >= 14:
        ssm_dt = "float16" if rel.minor <= 17 else (spec.config_dtype("mamba_ssm_cache_dtype") or "float32")
    elif (spec.config_dtype("mamba_ssm_dtype") and rel.minor >= 20
          and (spec.architecture in _QWEN35_VLM or (spec.architecture in _QWEN35_LM and rel.minor >= 28))):
        ssm_dt = spec.config_dtype("mamba_ssm_dtype")
    else:
        ssm_dt = conv_dt
    return CacheDtypes(conv=conv_dt, ssm=ssm_dt, kv=kv_dt, ssm_by_kind=() if ssm_given else (("kda", "float32"),))


def footprint(sc: Scenario) -> Footprint:
    """One sequence of the scenario's model as vLLM caches it: its dtypes, its TP, its speculative tokens
    (they widen conv windows)."""
    return _cached(sc.spec, sc.tp, sc.dtypes, sc.spec_tokens, sc.vllm.release)


@lru_cache(maxsize=256)
def _cached(spec: ModelSpec, tp: int, choice: DtypeChoice, spec_tokens: int, rel: Release) -> Footprint:
    return _footprint(spec, cache_dtypes(spec, choice, rel), tp=tp, spec_tokens=spec_tokens)
