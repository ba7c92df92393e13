"""The longest context SGLang accepts for a model, and its refusal of a longer ``--context-length``
(python/sglang/srt/configs/model_config.py ``_derive_context_length``;
srt/utils/hf_transformers_utils.py ``get_context_length``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hybridplan.spec import ModelSpec

if TYPE_CHECKING:
    from hybridplan.scenario import Scenario

#: the length fields SGLang reads, in its order: the first one set wins
KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings")
#: the context SGLang assumes when the config names none
FALLBACK = 2048
ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"


def context_length(spec: ModelSpec) -> int:
    """The first length field set, times the RoPE factor — unless the scaling names its original length or
    is Llama-3's, whose length is already the scaled one."""
    rope = spec.context.rope[0] if spec.context.rope else None
    factor = 1.0
    if rope is not None and rope.factor is not None and not rope.names_original and rope.rope_type != "llama3":
        factor = rope.factor
    value = next((spec.context.length(k) for k in KEYS if spec.context.length(k) is not None), None)
    return FALLBACK if value is None else int(factor * value)


def refusal(sc: Scenario) -> str | None:
    derived = context_length(sc.spec)
    if sc.ctx <= derived or sc.allow_long_context:
        return None
    return (
        f"User-specified context_length ({sc.ctx}) is greater than the derived context_length ({derived}). "
        f"To allow overriding this maximum, set the env var {ENV}=1"
    )
