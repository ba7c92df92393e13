"""Small pieces both engines' rules are written with: integer rounding, the result of prefix reuse, and a
figure read from a log beside its prediction."""

from __future__ import annotations

import re
from dataclasses import dataclass
from math import gcd

from hybridplan.errors import PlanError


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def lcm(a: int, b: int) -> int:
    return a * b // gcd(a, b)


def floor_to(n: int, unit: int) -> int:
    return n // unit * unit


#: the most checkpoints hybridplan lists for one request
MAX_CHECKPOINTS = 100_000


def spaced(start: int, stop: int, step: int, what: str) -> range:
    """Positions ``start, start + step, …`` below ``stop``, refused when there are more than can be listed."""
    n = len(range(start, stop, step))
    if n > MAX_CHECKPOINTS:
        raise PlanError(f"a {stop:,}-token prompt would leave {n:,} checkpoints ({what}); hybridplan lists at most "
                        f"{MAX_CHECKPOINTS:,}: shorten the prompt or lengthen the chunk")
    return range(start, stop, step)


@dataclass(frozen=True)
class Reuse:
    """Prefix reuse on one engine. The second request finds only the first one's checkpoints; from the
    third on, requests also find the checkpoint the second left where the two diverged (the junction)."""

    grid: int | None
    checkpoints: tuple[int, ...]
    reused_tokens: int
    computed_tokens: int
    later_reused_tokens: int
    later_computed_tokens: int

    @classmethod
    def of(cls, grid: int | None, checkpoints: tuple[int, ...], junction: int, shared: int, prompt: int) -> Reuse:
        """A prompt of ``prompt`` tokens whose first ``shared`` were seen before: it resumes from the deepest
        checkpoint inside the shared part that still leaves one token to compute."""
        hit = _hit(checkpoints, shared, prompt)
        later = max(hit, _hit((junction,), shared, prompt)) if junction else hit
        return cls(grid, checkpoints, hit, prompt - hit, later, prompt - later)

    def to_dict(self, grid_key: str) -> dict:
        return {grid_key: self.grid, "checkpoints": list(self.checkpoints), "reused_tokens": self.reused_tokens,
                "computed_tokens": self.computed_tokens, "later_reused_tokens": self.later_reused_tokens,
                "later_computed_tokens": self.later_computed_tokens}


def _hit(checkpoints, shared: int, prompt: int) -> int:
    return max((c for c in checkpoints if c <= shared and c <= prompt - 1), default=0)


def last(pattern: re.Pattern, text: str):
    """The last match of ``pattern`` in a log: a setting printed twice counts as it was printed last."""
    found = pattern.findall(text)
    return found[-1] if found else None


@dataclass(frozen=True)
class Row:
    """One figure of a log beside its prediction."""

    engine: str
    figure: str
    logged: str
    predicted: str

    @property
    def ok(self) -> bool:
        return self.logged == self.predicted
