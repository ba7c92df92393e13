"""The longest context vLLM accepts for a model, and its refusal of a longer ``--max-model-len``
(vllm/config/model.py ``_get_and_verify_max_len``; the keys: transformers_utils/model_arch_config_convertor.py
``derive_max_model_len_and_key``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from msgspec import Struct

from hybridplan.engines.vllm.releases import NEWEST, Release
from hybridplan.spec import ModelSpec

if TYPE_CHECKING:
    from hybridplan.scenario import Scenario

#: the length fields vLLM reads, in its order; the smallest wins, except that model_max_length overrides all
KEYS = (
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
#: RoPE types whose config length is already the scaled one, so their factor is not applied: su, longrope and
#: llama3; from 0.30.0 also the YaRN family (before, YaRN's length is original_max_position_embeddings · factor)
UNSCALED_ROPE = frozenset({"su", "longrope", "llama3"})
UNSCALED_ROPE_FROM_0_30 = UNSCALED_ROPE | {"yarn", "deepseek_yarn", "deepseek_llama_scaling"}
#: the maximum vLLM assumes for a config with no length field, when --max-model-len is not given
FALLBACK = 2048
ENV = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"


class MaxLen(Struct, frozen=True):
    """vLLM's derived maximum: the value (a float once a RoPE factor applies, as vLLM prints it) and the key
    it came from; ``None`` when the config names no length."""

    value: float | None
    key: str | None

    def __str__(self) -> str:
        return "none in the config" if self.value is None else f"{self.key}={self.value}"


def derived_max_len(spec: ModelSpec, rel: Release = NEWEST) -> MaxLen:
    lengths = [(k, v) for k, v in spec.context.lengths if k in KEYS]
    if not lengths:
        return MaxLen(None, None)
    key, value = min(lengths, key=lambda kv: (kv[1], KEYS.index(kv[0])))
    if spec.context.length("model_max_length"):
        key, value = "model_max_length", spec.context.length("model_max_length")
    unscaled = UNSCALED_ROPE_FROM_0_30 if rel.at_least("0.30.0") else UNSCALED_ROPE
    factor, derived = 1.0, float(value)
    for rope in spec.context.rope:
        if rope.rope_type in unscaled or rope.factor is None:
            continue
        factor = rope.factor
        if rope.rope_type == "yarn" and rope.original is not None:  # before 0.30.0
            derived = float(rope.original)
    if factor == 1.0:
        return MaxLen(value, key)
    return MaxLen(derived * factor, key)


def default_max_len(spec: ModelSpec, rel: Release = NEWEST) -> int:
    """``--max-model-len`` when none is given: the derived maximum, or 2048 for a config with no length."""
    m = derived_max_len(spec, rel)
    return FALLBACK if m.value is None else int(m.value)


def refusal(sc: Scenario) -> str | None:
    """vLLM's refusal of ``sc.ctx`` as ``--max-model-len``, or None when it starts (the context fits, the
    config names no length, or the environment variable is set: ``--allow-long-context``)."""
    m = derived_max_len(sc.spec, sc.vllm.release)
    if m.value is None or sc.ctx <= m.value or sc.allow_long_context:
        return None
    return (
        f"User-specified max_model_len ({sc.ctx}) is greater than the derived max_model_len ({m} or "
        f"model_max_length={sc.spec.context.length('model_max_length')} in model's config.json). To allow "
        f"overriding this maximum, set the env var {ENV}=1."
    )
