"""Bytes a weight takes under a checkpoint's ``quantization_config``, scales included, and what the scheme
leaves unquantized. A scheme hybridplan cannot size is refused: pass --weights."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hybridplan.errors import PlanError


@dataclass(frozen=True)
class Scheme:
    """``bytes_per_param``: a quantized weight with its share of the scales and zero points."""

    name: str
    bytes_per_param: float
    #: module-name fragments the checkpoint leaves unquantized
    ignore: tuple[str, ...] = ()

    def skips(self, where: str) -> bool:
        return any(frag and frag in where for frag in self.ignore)


def _ignore(cfg: Mapping[str, Any]) -> tuple[str, ...]:
    out: list[str] = []
    for key in ("modules_to_not_convert", "ignored_layers", "ignore", "exclude_modules", "llm_int8_skip_modules"):
        value = cfg.get(key)
        if isinstance(value, list):
            out += [str(v).strip("*").removeprefix("re:").strip(".*") for v in value if isinstance(v, str)]
    return tuple(out)


def _int_scheme(bits: int, group: int | None, zero: bool) -> float:
    """An integer code of ``bits`` with a 16-bit scale (and a ``bits``-bit zero point) per ``group`` weights."""
    if group is None or group <= 0:  # per output channel: the scales are a rounding error
        return bits / 8
    return bits / 8 + 2 / group + (bits / 8 / group if zero else 0.0)


def scheme(config: Mapping[str, Any]) -> Scheme | None:
    """The checkpoint's scheme, from ``quantization_config`` (or a text config's); None when unquantized."""
    q = config.get("quantization_config")
    if q is None and isinstance(config.get("text_config"), Mapping):
        q = config["text_config"].get("quantization_config")
    if q is None:
        return None
    if not isinstance(q, Mapping):
        raise PlanError("quantization_config must be an object")
    method = str(q.get("quant_method", "")).lower()
    ignore = _ignore(q)
    if method == "fp8":
        block = q.get("weight_block_size")
        extra = 4 / (block[0] * block[1]) if isinstance(block, list) and len(block) == 2 else 0.0
        return Scheme("fp8" + (f" (blocks {block[0]}×{block[1]})" if extra else ""), 1 + extra, ignore)
    if method == "modelopt":
        algo = str(q.get("quant_algo") or (q.get("quantization") or {}).get("quant_algo") or "").upper()
        if algo == "FP8":
            return Scheme("modelopt fp8", 1.0, ignore)
        if algo == "NVFP4":
            group = int(q.get("group_size") or 16)
            return Scheme(f"modelopt nvfp4 (group {group})", 0.5 + 1 / group, ignore)
        raise PlanError(f"hybridplan does not size the modelopt scheme {algo or '?'}: give --weights")
    if method in ("awq", "gptq", "auto-round", "auto_round"):
        bits = int(q.get("bits") or q.get("w_bit") or 4)
        group = q.get("group_size", q.get("q_group_size", 128))
        zero = bool(q.get("zero_point", method != "gptq" or not q.get("sym", True)))
        return Scheme(f"{method} int{bits} (group {group})", _int_scheme(bits, int(group), zero), ignore)
    if method == "mxfp4":
        return Scheme("mxfp4", 0.5 + 1 / 32, ignore)
    if method == "bitsandbytes":
        if q.get("load_in_4bit"):
            return Scheme("bitsandbytes 4-bit", 0.5 + 4 / 64, ignore)
        if q.get("load_in_8bit"):
            return Scheme("bitsandbytes 8-bit", 1.0, ignore)
    if method == "compressed-tensors":
        return _compressed(q, ignore)
    raise PlanError(f"hybridplan does not size the quantization {method or 'unnamed'!r}: give --weights")


def _compressed(q: Mapping[str, Any], ignore: tuple[str, ...]) -> Scheme:
    """compressed-tensors: the weights of the first config group (the one that covers the linear layers)."""
    groups = q.get("config_groups") or {}
    for group in groups.values() if isinstance(groups, Mapping) else ():
        w = group.get("weights") if isinstance(group, Mapping) else None
        if not isinstance(w, Mapping):
            continue
        bits, kind = int(w.get("num_bits") or 8), str(w.get("type") or "int")
        size = w.get("group_size")
        if kind == "float" and bits == 4:
            return Scheme(f"compressed-tensors fp4 (group {size or 16})", 0.5 + 1 / int(size or 16), ignore)
        if kind == "float":
            return Scheme("compressed-tensors fp8", bits / 8, ignore)
        zero = not bool(w.get("symmetric", True))
        name = f"compressed-tensors int{bits}" + (f" (group {size})" if size else "")
        return Scheme(name, _int_scheme(bits, int(size) if size else None, zero), ignore)
    raise PlanError("compressed-tensors config without weight settings: give --weights")
