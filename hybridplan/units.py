"""Byte and size figures as a person reads them, and sizes as a person types them."""

from __future__ import annotations

import re

from hybridplan.errors import PlanError

KiB, MiB, GiB, TiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40


def human_bytes(n: int | float, *, exact: bool = False) -> str:
    """``2249621504`` → ``2.095 GiB`` (four significant digits); with ``exact`` the byte count follows."""
    if n is None:
        return "—"
    for unit, scale in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(n) >= scale:
            v = n / scale
            text = f"{v:.4g} {unit}" if v < 1000 else f"{v:.0f} {unit}"
            break
    else:
        text = f"{n:,.0f} B"
    if exact and abs(n) >= KiB:
        text += f" ({int(n):,} B)"
    return text


def human_tokens(n: int | float | None) -> str:
    if n is None:
        return "never"
    return f"{n:,.2f}" if isinstance(n, float) and not float(n).is_integer() else f"{int(n):,}"


_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_SCALE = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": KiB, "ki": KiB, "m": 1000**2, "mb": 1000**2, "mib": MiB,
          "mi": MiB, "g": 1000**3, "gb": 1000**3, "gib": GiB, "gi": GiB, "t": 1000**4, "tb": 1000**4, "tib": TiB,
          "ti": TiB}


def parse_size(text: str, *, what: str) -> int:
    """``80GiB``, ``141 GB``, ``40e9``-free plain bytes → bytes. GB means 10^9, GiB 2^30."""
    m = _SIZE.match(str(text))
    if not m or m.group(2) is not None and m.group(2).lower() not in _SCALE:
        raise PlanError(f"{what}: cannot read {text!r} as a size (e.g. 80GiB, 141GB, 42949672960)")
    value = float(m.group(1)) * _SCALE[(m.group(2) or "").lower()]
    if value <= 0:
        raise PlanError(f"{what} must be positive, got {text!r}")
    return int(value)
