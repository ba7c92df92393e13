"""A quantized (or unquantized) re-release of a shipped model, named by its Hub id, read offline: the repository's
name is a shipped spec's source name with a quantization suffix (``-FP8``, ``-NVFP4``, ``-AWQ``, ``-GPTQ-Int4``,
``-MXFP4``, ``-BF16`` …), so its shapes are that spec's and its weights are the suffix's format.

This is used only where the repository's own config.json cannot be had (not cached, no Hub to ask): the real
config, when there is one, always wins (hybridplan/loader.py ``_from_hub``). What a suffix stands for is the
publishers' own format for it, as their repositories' config.json files write ``quantization_config``:

- ``-FP8``: NVIDIA's releases are ModelOpt FP8 (``quant_method: modelopt``, ``quant_algo: FP8``, as
  nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8, shipped here); Qwen's and DeepSeek's are block-wise fp8
  (``quant_method: fp8``, ``weight_block_size: [128, 128]``, as Qwen/Qwen3-32B-FP8, shipped here).
- ``-FP8-KV``: AMD Quark's FP8 (per-tensor fp8 weights; the fp8 KV scales it adds are not read offline).
- ``-FP8-Dynamic``: compressed-tensors fp8 (per-channel weights, dynamic activations).
- ``-NVFP4``: ModelOpt NVFP4, an fp8 scale per 16 weights (as nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4).
- ``-MXFP4`` (``-MXFP4-Preview``): MXFP4, an e8m0 scale per 32 weights.
- ``-AWQ``: AutoAWQ's 4-bit, group 128, with zero points; ``-GPTQ-Int4`` / ``-GPTQ-Int8``: GPTQ, group 128,
  symmetric (Qwen's GPTQ releases).
- ``-BF16``: no quantization (the spec's own, where the shipped spec is a quantized release).

Which modules a real checkpoint leaves unquantized (attention, the LM head, the routers) and the KV-cache
dtype it declares are in its config.json alone: offline, every linear layer is counted in the suffix's format and
no KV dtype is declared; the note says so. A suffix not listed here is refused, never guessed.
"""

from __future__ import annotations

from typing import Any

from hybridplan.errors import PlanError
from hybridplan.quant_config import stated_quantization

_FP8_MODELOPT = {"quant_method": "modelopt", "quant_algo": "FP8", "producer": {"name": "modelopt"}}
_FP8_BLOCKS = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3", "weight_block_size": [128, 128]}
_MXFP4 = {"quant_method": "mxfp4"}

#: suffix (lower case) → (the quantization_config its publishers write, keyed by the Hub organisation, "" for any
#: other; None: unquantized), what it is called in a note
SUFFIXES: dict[str, tuple[dict[str, dict | None], str]] = {
    "fp8": ({"nvidia": _FP8_MODELOPT, "": _FP8_BLOCKS}, "fp8"),
    "fp8-kv": ({"": {"quant_method": "fp8", "activation_scheme": "static"}}, "AMD Quark fp8 (per-tensor)"),
    "fp8-dynamic": (
        {
            "": {
                "quant_method": "compressed-tensors",
                "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float"}}},
            }
        },
        "compressed-tensors fp8",
    ),
    "nvfp4": (
        {"": {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "producer": {"name": "modelopt"}}},
        "ModelOpt NVFP4",
    ),
    "mxfp4": ({"": _MXFP4}, "MXFP4"),
    "mxfp4-preview": ({"": _MXFP4}, "MXFP4"),
    "awq": ({"": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}}, "AWQ int4"),
    "gptq-int4": ({"": {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True}}, "GPTQ int4"),
    "gptq-int8": ({"": {"quant_method": "gptq", "bits": 8, "group_size": 128, "sym": True}}, "GPTQ int8"),
    "bf16": ({"": None}, "bf16 (unquantized)"),
}


def split(name: str) -> tuple[str, str] | None:
    """``NVIDIA-Nemotron-3-Nano-30B-A3B-FP8`` → (``NVIDIA-Nemotron-3-Nano-30B-A3B``, ``fp8``): the longest known
    suffix taken off; None when the name ends in none."""
    low = name.lower()
    for suffix in sorted(SUFFIXES, key=len, reverse=True):
        if low.endswith("-" + suffix) and len(name) > len(suffix) + 1:
            return name[: -len(suffix) - 1], suffix
    return None


def _stem(source: str) -> str:
    name = source.split("/")[-1]
    cut = split(name)
    return (cut[0] if cut else name).lower()


def variant_of(repo_id: str, sources: dict[str, str], quantized: dict[str, bool]) -> tuple[str, str] | None:
    """The shipped spec (its file name) that ``repo_id`` is a variant of, and the suffix; None when its name is
    no shipped spec's with a known suffix. ``sources``: file name → the spec's source Hub id; ``quantized``: file
    name → whether the spec's own config is quantized (the unquantized base is preferred). PlanError for a name
    that is a shipped spec's with a suffix hybridplan does not read."""
    org, name = repo_id.split("/", 1)
    cut = split(name)
    if cut is None:
        _refuse_unknown(repo_id, name, sources)
        return None
    stem, suffix = cut
    found = [fn for fn, src in sources.items() if src and _stem(src) == stem.lower()]
    if not found:
        return None
    found.sort(key=lambda fn: (quantized[fn], sources[fn].split("/")[0].lower() != org.lower(), fn))
    return found[0], suffix


def _refuse_unknown(repo_id: str, name: str, sources: dict[str, str]) -> None:
    low = name.lower()
    for fn, src in sorted(sources.items()):
        base = src.split("/")[-1].lower() if src else ""
        for stem in dict.fromkeys((base, _stem(src) if src else "")):
            if stem and low.startswith(stem + "-"):
                rest = name[len(stem) + 1 :]
                known = ", ".join("-" + s.upper() for s in SUFFIXES)
                raise PlanError(
                    f"{repo_id} is not in the local Hugging Face cache and the Hub cannot be reached; "
                    f"its name is the shipped spec {fn[:-5]}'s ({src}) with '-{rest}', which hybridplan "
                    f"does not read as a quantization (it reads {known}): download its config.json or "
                    "pass a folder"
                )


def config_of(base: dict[str, Any], repo_id: str, suffix: str) -> tuple[dict[str, Any], str]:
    original = repo_id[-len(suffix) :]
    """The base spec's config with the suffix's quantization in place of its own, and the note that says so."""
    formats, label = SUFFIXES[suffix]
    org = repo_id.split("/", 1)[0].lower()
    q = formats.get(org, formats.get(""))
    config = {k: v for k, v in base.items() if k != "quantization_config"}
    if isinstance(config.get("text_config"), dict) and "quantization_config" in config["text_config"]:
        config["text_config"] = {k: v for k, v in config["text_config"].items() if k != "quantization_config"}
    if q is not None:
        config["quantization_config"] = dict(q)
    had = stated_quantization(base)[0] is not None
    shown = "-" + original
    how = (
        f"quantized as its '{shown}' suffix says ({label}); its own config.json would say which modules stay "
        "unquantized and which KV-cache dtype it declares: every linear layer is counted so, and none is "
        "declared (give --kv-cache-dtype)"
        if q is not None
        else f"unquantized, as its '{shown}' suffix says"
        + (" (the shipped spec's quantization dropped)" if had else "")
    )
    return config, how
