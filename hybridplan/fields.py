"""Typed, validated access to one raw config dict (``Fields``), shared by the adapters (hybridplan/adapters.py:
the mixers) and the weight counts (hybridplan/weights/families.py: the tensors), which both read the config."""

from __future__ import annotations

import builtins
import math
from collections.abc import Mapping
from typing import Any

from hybridplan.dtypes import parse_dtype
from hybridplan.errors import PlanError

_REQUIRED = object()
_MAX_LAYERS = 10_000
_MAX_DIM = 1 << 24


class Fields:
    """Typed, validated access to one config dict; remembers which class defaults it applied."""

    def __init__(self, raw: Mapping[builtins.str, Any], family: builtins.str) -> None:
        if not isinstance(raw, Mapping):
            raise PlanError(f"{family} config must be an object of fields, got {type(raw).__name__}")
        self.raw = raw
        self.family = family
        self.notes: list[str] = []

    def has(self, *keys: builtins.str) -> bool:
        return any(self.raw.get(k) is not None for k in keys)

    def _lookup(self, keys: tuple[builtins.str, ...], default: Any) -> tuple[builtins.str, Any]:
        for key in keys:
            if self.raw.get(key) is not None:
                return key, self.raw[key]
        if default is _REQUIRED:
            alts = " or ".join(repr(k) for k in keys)
            raise PlanError(f"{self.family} config is missing the needed field {alts}")
        self.notes.append(f"{keys[0]} not in config: using the {self.family} class default {default!r}")
        return keys[0], default

    def int(self, *keys: builtins.str, default: Any = _REQUIRED, minimum: builtins.int = 1) -> builtins.int:
        key, value = self._lookup(keys, default)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise PlanError(f"{self.family} config field {key!r} must be an integer, got {value!r}")
        if value < minimum or value > _MAX_DIM:
            raise PlanError(f"{self.family} config field {key!r} is out of range: {value}")
        return value

    def number(self, *keys: builtins.str, default: Any = _REQUIRED) -> float:
        key, value = self._lookup(keys, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise PlanError(f"{self.family} config field {key!r} must be a positive number, got {value!r}")
        return value

    def opt_int(self, *keys: builtins.str, minimum: builtins.int = 1) -> builtins.int | None:
        return self.int(*keys, minimum=minimum) if self.has(*keys) else None

    def count(self, *keys: builtins.str, default: builtins.int = 0) -> builtins.int:
        """A whole number ≥ 0 that may be absent (experts, MTP layers, shared experts): ``default`` then, with no
        note (the absence is the model's shape, not a class default)."""
        return self.int(*keys, minimum=0) if self.has(*keys) else default

    def int_list(self, *keys: builtins.str) -> builtins.list[builtins.int]:
        """A list of whole numbers that may be absent (layer indices): empty then."""
        if not self.has(*keys):
            return []
        key, value = self._lookup(keys, [])
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise PlanError(f"{self.family} config field {key!r} must be a list of integers, got {value!r}")
        return value

    def list(self, *keys: builtins.str, default: Any = _REQUIRED) -> builtins.list:
        key, value = self._lookup(keys, default)
        if not isinstance(value, list) or len(value) > _MAX_LAYERS:
            raise PlanError(f"{self.family} config field {key!r} must be a list, got {type(value).__name__}")
        return value

    def str(self, *keys: builtins.str, default: Any = _REQUIRED) -> builtins.str:
        key, value = self._lookup(keys, default)
        if not isinstance(value, str):
            raise PlanError(f"{self.family} config field {key!r} must be a string, got {value!r}")
        return value

    def dtype(self, *keys: builtins.str, default: Any = "bfloat16") -> builtins.str:
        key, value = self._lookup(keys, default)
        if not isinstance(value, str):
            raise PlanError(f"{self.family} config field {key!r} must be a dtype name, got {value!r}")
        return parse_dtype(value, what=f"dtype in config field {key!r}")

    def opt_dtype(self, *keys: builtins.str) -> builtins.str | None:
        return self.dtype(*keys) if self.has(*keys) else None

    def indices(self, key: builtins.str, num_layers: builtins.int, base: builtins.int = 0) -> set[builtins.int]:
        values = self.list(key)
        out = set()
        for v in values:
            if isinstance(v, bool) or not isinstance(v, int) or not base <= v < num_layers + base:
                raise PlanError(
                    f"{self.family} config field {key!r} holds {v!r}, not a layer index "
                    f"in [{base}, {num_layers + base})"
                )
            out.add(v - base)
        return out


def display_int(value: Any) -> int:
    """A field that only labels layers (MLP or MoE): never a reason to refuse a config."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def qwen3_moe_layers(f: Fields) -> list[bool]:
    """Which layers of a Qwen3-MoE config are sparse: every ``decoder_sparse_step``-th layer (counting from 1)
    not named in ``mlp_only_layers`` (vllm/model_executor/models/qwen3_moe.py, Qwen3MoeDecoderLayer)."""
    n = f.int("num_hidden_layers")
    step = f.int("decoder_sparse_step", default=1)
    dense = set(f.int_list("mlp_only_layers")) if f.raw.get("mlp_only_layers") is not None else set()
    experts = display_int(f.raw.get("num_experts")) > 0
    return [experts and i not in dense and (i + 1) % step == 0 for i in range(n)]
