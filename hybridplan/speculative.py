"""Speculative decoding: the layers a draft adds to the caches, and the draft itself. Each engine reads its own
flags into a ``Speculative`` (hybridplan/engines/vllm/speculative.py ``speculative_from_vllm``, vLLM's
``--speculative-config``; hybridplan/engines/sglang/speculative.py ``speculative_from_sglang``, SGLang's
``--speculative-*`` flags), with the pieces here.

Both raise PlanError, in the engine's words where it has them, for bad JSON, an unknown method, a method the
release does not know, a draft that is missing or cannot be read, and MTP on a model without MTP layers.

What joins the caches (``Speculative.layers``): the draft model's token mixers (EAGLE, EAGLE-3, DFlash, a
draft model; loaded with ``hybridplan.loader.load_model``), or for MTP the target's own MTP layers, read from
its config: Qwen3.5 ``mtp_num_hidden_layers`` and Qwen3-Next ``num_nextn_predict_layers`` full-attention
layers (vllm/model_executor/models/qwen3_5_mtp.py, qwen3_next_mtp.py), Nemotron-H ``num_nextn_predict_layers``
× the attention layers of ``mtp_hybrid_override_pattern`` (nemotron_h_mtp.py), DeepSeek
``num_nextn_predict_layers`` MLA layers (deepseek_mtp.py). How each engine sizes them is an engine rule
(engines/vllm/sizing.py, engines/sglang/pool.py).

The same draft's weights (the MTP layers counted from the target's config, or the draft model's from its own)
are counted by hybridplan/weights and loaded as each engine loads them (``drafter`` in engines/vllm/memory.py and
engines/sglang/memory.py): a Qwen3-Next config without ``num_nextn_predict_layers`` has one MTP layer, as vLLM
reads it (``getattr(config, "num_nextn_predict_layers", 1)``, qwen3_next_mtp.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hybridplan.errors import PlanError
from hybridplan.spec import MLA, Attention, Mixer, ModelSpec


def token_count(value: Any, flag: str) -> int | None:
    """A token count as typed: None where not given, else a positive integer (PlanError naming ``flag``)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlanError(f"{flag} must be a positive integer, got {value!r}")
    return value


# --- the draft's layers -----------------------------------------------------------------------------------

#: draft architectures whose layers are plain decoder layers (EAGLE heads are Llama layers; DFlash drafts are
#: Qwen3 layers): read with the dense-attention adapter
DRAFT_ARCHITECTURES = (
    "LlamaForCausalLMEagle",
    "LlamaForCausalLMEagle3",
    "Eagle3LlamaForCausalLM",
    "EagleLlamaForCausalLM",
    "Qwen3ForCausalLMEagle3",
    "Eagle3Qwen3ForCausalLM",
    "DFlashDraftModel",
    "DFlash2DraftModel",
    "Qwen3DFlashForCausalLM",
    "Qwen3DSparkModel",
)


def load_draft(ref: str) -> ModelSpec:
    """The draft model: a shipped spec, a config path or folder, or a Hub id (``hybridplan.loader``); a draft
    architecture the adapters do not list is read as the plain attention layers it is made of."""
    from hybridplan.loader import load_model

    try:
        return load_model(ref)
    except PlanError as exc:
        if "unsupported architecture" not in str(exc):
            raise PlanError(f"the speculative draft model {ref}: {exc}") from None
    cfg = _raw_config(ref)
    archs = cfg.get("architectures") or []
    if not any(a in DRAFT_ARCHITECTURES for a in archs):
        raise PlanError(
            f"the speculative draft model {ref} has architecture {', '.join(map(str, archs))}, "
            f"which hybridplan does not read (draft architectures: {', '.join(DRAFT_ARCHITECTURES)})"
        )
    from hybridplan.adapters import spec_from_config

    return spec_from_config({**cfg, "architectures": ["LlamaForCausalLM"]}, name=Path(ref).name or ref, source=ref)


def _raw_config(ref: str) -> dict:
    path = Path(ref).expanduser()
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise PlanError(f"cannot read the draft config {path}: {exc}") from None
    from hybridplan import hub

    return hub.config(ref)[0]


def mtp_layers(target: ModelSpec) -> tuple[tuple[Mixer, ...], int]:
    """The target's MTP layers that keep a cache, and how many MTP steps it has (vLLM's ``n_predict``)."""
    text = dict(target.facts.counts)  # the text config's MTP counts as written
    arch = target.architecture
    full = next((m for m in target.attention if isinstance(m, Attention) and m.window is None), None)
    if arch.startswith("Qwen3_5") or arch == "Qwen3NextForCausalLM":
        key = "mtp_num_hidden_layers" if arch.startswith("Qwen3_5") else "num_nextn_predict_layers"
        n = _count(text.get(key, 1), key)
        return _need(target, (full,) * n if full else (), n, key)
    if arch == "NemotronHForCausalLM":
        n = _count(text.get("num_nextn_predict_layers", 0), "num_nextn_predict_layers")
        pattern = text.get("mtp_hybrid_override_pattern")
        if n and not isinstance(pattern, str):
            raise PlanError(
                f"{target.name}: num_nextn_predict_layers is {n} but the config has no "
                "mtp_hybrid_override_pattern (vllm/model_executor/models/nemotron_h_mtp.py)"
            )
        attn = pattern.count("*") if n and isinstance(pattern, str) else 0
        return _need(target, (full,) * (n * attn) if full else (), n, "num_nextn_predict_layers")
    if arch.startswith("Deepseek"):
        n = _count(text.get("num_nextn_predict_layers", 0), "num_nextn_predict_layers")
        mla = next((m for m in target.attention if isinstance(m, MLA)), None)
        return _need(target, (mla,) * n if mla else (), n, "num_nextn_predict_layers")
    raise PlanError(
        f"{target.name} ({arch}) has no MTP layers hybridplan reads: MTP drafts with the target's own "
        "layers (Qwen3.5, Qwen3-Next, Nemotron-H, DeepSeek)"
    )


def _count(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise PlanError(f"config field {key!r} must be a non-negative integer, got {value!r}")
    return value


def _need(target: ModelSpec, layers: tuple, n: int, key: str) -> tuple[tuple[Mixer, ...], int]:
    if n == 0:
        raise PlanError(f"{target.name} has no MTP layers ({key} is 0): MTP speculative decoding needs them")
    return layers, n
