"""A start-up log read as a stream: only the lines that may hold a setting or a figure are kept, so a log of
millions of unrelated lines (a DEBUG log) is read in constant memory and in seconds."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from pathlib import Path

from hybridplan.errors import PlanError

BLOCK = 1 << 22
#: the most kept lines: the last ones win, as a setting printed twice counts as it was printed last
MAX_LINES = 50_000


def scan(path: Path, keywords: Iterable[str]) -> str:
    """The lines of ``path`` holding any of ``keywords``, in order, joined."""
    keys = [k.encode() for k in dict.fromkeys(keywords)]
    kept: deque[str] = deque(maxlen=MAX_LINES)
    try:
        with open(path, "rb") as f:
            carry = b""
            while block := f.read(BLOCK):
                block = carry + block
                cut = block.rfind(b"\n") + 1
                body, carry = block[:cut], block[cut:]
                kept.extend(_lines(body, keys))
            kept.extend(_lines(carry + b"\n", keys) if carry else ())
    except OSError as exc:
        raise PlanError(f"cannot read {path}: {exc.strerror}") from None
    return "\n".join(kept)


def _lines(body: bytes, keys: list[bytes]) -> list[str]:
    starts: set[int] = set()
    for key in keys:
        i = body.find(key)
        while i >= 0:
            start = body.rfind(b"\n", 0, i) + 1
            starts.add(start)
            end = body.find(b"\n", i)
            i = body.find(key, end) if end >= 0 else -1
    return [body[s:body.find(b"\n", s)].decode("utf-8", errors="replace") for s in sorted(starts)]
