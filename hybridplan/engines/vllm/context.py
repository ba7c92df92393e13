"""The longest context vLLM accepts for a model, and its refusal of a longer ``--max-model-len``
(vllm/config/model.py ``_get_and_verify_max_len``; the keys: transformers_utils/model_arch_config_convertor.py
``derive_max_model_len_and_key``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from hybridplan.spec import ModelSpec

if TYPE_CHECKING:
    from hybridplan.scenario import Scenario

#: the length fields vLLM reads, in its order; the smallest wins, except that model_max_length overrides all
KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
        "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
#: RoPE types whose config length is already the scaled one: their factor is not applied again
UNSCALED_ROPE = frozenset({"su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling"})
#: the maximum vLLM assumes for a config with no length field, when --max-model-len is not given
FALLBACK = 2048
ENV = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"


@dataclass(frozen=True)
class MaxLen:
    """vLLM's derived maximum: the value (a float once a RoPE factor applies, as vLLM prints it) and the key
    it came from; ``None`` when the config names no length."""

    value: float | None
    key: str | None

    def __str__(self) -> str:
        return "none in the config" if self.value is None else f"{self.key}={self.value}"


def derived_max_len(spec: ModelSpec) -> MaxLen:
    lengths = [(k, v) for k, v in spec.context.lengths if k in KEYS]
    if not lengths:
        return MaxLen(None, None)
    key, value = min(lengths, key=lambda kv: (kv[1], KEYS.index(kv[0])))
    if spec.context.length("model_max_length"):
        key, value = "model_max_length", spec.context.length("model_max_length")
    factor = 1.0
    for rope in spec.context.rope:
        if rope.rope_type not in UNSCALED_ROPE and rope.factor is not None:
            factor = rope.factor
    return MaxLen(value * factor if factor != 1.0 else value, key)


def default_max_len(spec: ModelSpec) -> int:
    """``--max-model-len`` when none is given: the derived maximum, or 2048 for a config with no length."""
    m = derived_max_len(spec)
    return FALLBACK if m.value is None else int(m.value)


def refusal(sc: Scenario) -> str | None:
    """vLLM's refusal of ``sc.ctx`` as ``--max-model-len``, or None when it starts (the context fits, the
    config names no length, or the environment variable is set: ``--allow-long-context``)."""
    m = derived_max_len(sc.spec)
    if m.value is None or sc.ctx <= m.value or sc.allow_long_context:
        return None
    return (f"User-specified max_model_len ({sc.ctx}) is greater than the derived max_model_len ({m} or "
            f"model_max_length={sc.spec.context.length('model_max_length')} in model's config.json). To allow "
            f"overriding this maximum, set the env var {ENV}=1.")
