"""Where a raw HF config states its quantization: read by the adapters (whether a spec has one to read) and by
hybridplan/weights/quant.py (what it is), so that neither imports the other."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def stated_quantization(config: Mapping[str, Any]) -> tuple[Any, str]:
    """The quantization a config states, and where: its ``quantization_config``, else its text config's (None
    when neither states one). hybridplan/weights/quant.py reads it."""
    q, place = config.get("quantization_config"), "config.json"
    if q is None and isinstance(config.get("text_config"), Mapping):
        q, place = config["text_config"].get("quantization_config"), "config.json text_config"
    return q, place
