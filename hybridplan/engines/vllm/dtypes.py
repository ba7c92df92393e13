"""Which dtype each cache takes under vLLM, by release, and one sequence's footprint with them."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from hybridplan.dtypes import parse_dtype, serving_dtype
from hybridplan.engines.vllm.releases import NEWEST, Release
from hybridplan.memory import CacheDtypes, Footprint
from hybridplan.memory import footprint as _footprint
from hybridplan.spec import ModelSpec

if TYPE_CHECKING:
    from hybridplan.scenario import DtypeChoice, Scenario

_QWEN35_VLM = frozenset({"Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"})
_QWEN35_LM = frozenset({"Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM"})


def model_dtype(spec: ModelSpec, dtype: str | None = None) -> str:
    """``--dtype``, auto by default (vllm/config/model.py ``_resolve_auto_dtype``)."""
    return serving_dtype(spec.model_dtype, dtype)


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
    conv_dt = parse_dtype(choice.conv, what="--conv-dtype") if choice.conv else mdt
    kv_dt = parse_dtype(choice.kv, what="--kv-dtype") if choice.kv else mdt
    if choice.ssm:
        ssm_dt = parse_dtype(choice.ssm, what="--ssm-dtype")
    elif spec.family == "Nemotron-H" and rel.minor >= 14:
        ssm_dt = "float16" if rel.minor <= 17 else (spec.config_dtype("mamba_ssm_cache_dtype") or "float32")
    elif (spec.config_dtype("mamba_ssm_dtype") and rel.minor >= 20
          and (spec.architecture in _QWEN35_VLM or (spec.architecture in _QWEN35_LM and rel.minor >= 28))):
        ssm_dt = spec.config_dtype("mamba_ssm_dtype")
    else:
        ssm_dt = conv_dt
    return CacheDtypes(conv=conv_dt, ssm=ssm_dt, kv=kv_dt, ssm_by_kind=() if choice.ssm else (("kda", "float32"),))


def footprint(sc: Scenario) -> Footprint:
    """One sequence of the scenario's model as vLLM caches it: its dtypes, its TP, its speculative tokens
    (they widen conv windows)."""
    return _cached(sc.spec, sc.tp, sc.dtypes, sc.spec_tokens, sc.vllm.release)


@lru_cache(maxsize=256)
def _cached(spec: ModelSpec, tp: int, choice: DtypeChoice, spec_tokens: int, rel: Release) -> Footprint:
    return _footprint(spec, cache_dtypes(spec, choice, rel), tp=tp, spec_tokens=spec_tokens)
