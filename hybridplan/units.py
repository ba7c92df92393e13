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


#: a size as typed (compiled on first use, by re's own cache: most commands read no size)
_SIZE = r"^\s*([0-9]*\.?[0-9]+)\s*([kmgt]?i?b?)?\s*$"
_SCALE = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": KiB,
    "ki": KiB,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": MiB,
    "mi": MiB,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": GiB,
    "gi": GiB,
    "t": 1000**4,
    "tb": 1000**4,
    "tib": TiB,
    "ti": TiB,
}


#: the largest size hybridplan takes (1 PiB): no GPU or model comes near it
MAX_BYTES = 1 << 50
#: the longest context or prompt hybridplan takes, in tokens
MAX_TOKENS = 1 << 30
#: the largest count (slots, sequences, requests) hybridplan takes
MAX_COUNT = (1 << 31) - 1


def parse_size(text: str, *, what: str, allow_zero: bool = False) -> int:
    """``80GiB``, ``141 GB``, ``40e9``-free plain bytes → bytes. GB means 10^9 bytes, GiB 2^30."""
    m = re.match(_SIZE, str(text), re.IGNORECASE)
    if not m or m.group(2) is not None and m.group(2).lower() not in _SCALE:
        raise PlanError(f"{what}: cannot read {text!r} as a size (e.g. 80GiB, 141GB, 42949672960)")
    value = float(m.group(1)) * _SCALE[(m.group(2) or "").lower()]
    if value <= 0 and not (allow_zero and value == 0):
        raise PlanError(f"{what} must be positive, got {text!r}")
    if value > MAX_BYTES:
        raise PlanError(f"{what} {text} is beyond any GPU (hybridplan takes at most 1 PiB)")
    return int(value)


#: a count with a suffix (compiled on first use: a plain number, the usual case, never needs it)
_TOKENS = r"(\d+(?:\.\d+)?)([kKmMgGtT])"
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_count(text: str, *, what: str, limit: int = MAX_COUNT) -> int:
    """A whole number as vLLM's ``--max-model-len`` takes it (``human_readable_int``): ``131072``, ``128k``
    (decimal, 128,000), ``128K`` (binary, 131,072), ``25.6k``; also ``131,072`` and ``1e9`` when whole.
    Zero and negative numbers are left for the caller to refuse with its own words."""
    value = str(text).strip().replace(",", "").replace("_", "")
    m = None if value.isascii() and value.isdigit() else re.fullmatch(_TOKENS, value)
    n: float
    try:
        if m and m.group(2) in _DECIMAL:  # as vLLM: the decimal product, truncated
            n = int(float(m.group(1)) * _DECIMAL[m.group(2)])
        elif m:
            if "." in m.group(1):
                raise PlanError(
                    f"{what}: no decimals with a binary suffix in {text!r} (did you mean "
                    f"{m.group(1)}{m.group(2).lower()}?)"
                )
            n = int(m.group(1)) * _BINARY[m.group(2)]
        else:
            n = float(value) if ("e" in value.lower() or "." in value) else int(value)
    except (ValueError, OverflowError):
        raise PlanError(f"{what}: cannot read {text!r} as a whole number (e.g. 131072, 128k, 128K)") from None
    if n != int(n):
        raise PlanError(f"{what}: {text} is not a whole number")
    if n > limit:
        raise PlanError(f"{what} {text} is more than hybridplan takes (at most {limit:,})")
    return int(n)


def article(word: str) -> str:
    """``a`` or ``an`` before ``word`` as it is read aloud (``an online_int4``, ``an fp8``, ``a gptq``,
    ``an 8,192-token``): an before a vowel, and before the letters whose names start with one (f, h, l, m, n, r, s, x)
    where the word is read letter by letter (an abbreviation with no vowel in its first three letters)."""
    w = word.strip().lower()
    if not w:
        return "a"
    if w[0].isdigit():  # read as a number: an 8…, an 11,000, an 18,000 (eight, eleven, eighteen)
        first = w.split(",")[0] if "," in w else w.split("-")[0]
        return "an" if w[0] == "8" or first in ("11", "18") else "a"
    head = "".join(c for c in w[:3] if c.isalpha())
    spelled = bool(head) and not any(c in "aeiou" for c in head)
    return "an" if w[0] in "aeiou" or (spelled and w[0] in "fhlmnrsx") else "a"


def cdiv(a: int, b: int) -> int:
    """⌈a / b⌉ in integers, as the engines round up (their ``cdiv``)."""
    return -(-a // b)
