"""Where a hybrid starts to beat a transformer: exact crossovers of two piecewise-linear memory curves.

A model's bytes at context x are ``a + Σ_g r_g · min(x, w_g)`` (state, then KV per token of each attention
group, capped at its window). Crossovers are solved exactly in rationals, so 779.25 prints as 779.25.
"""

from __future__ import annotations

from fractions import Fraction
from math import floor

from msgspec import Struct

from hybridplan.memory import Footprint


class Curve(Struct, frozen=True):
    """bytes(x) = constant + Σ slope·min(x, cap); cap None means uncapped."""

    constant: int
    terms: tuple[tuple[int, int | None], ...]

    def at(self, x: Fraction | int) -> Fraction:
        return Fraction(self.constant + sum(s * (x if c is None else min(x, c)) for s, c in self.terms))

    def breakpoints(self) -> list[int]:
        return sorted({c for _, c in self.terms if c is not None})


def state_curve(fp: Footprint) -> Curve:
    return Curve(fp.state_bytes, ())


def kv_curve(fp: Footprint) -> Curve:
    return Curve(0, tuple((g.bytes_per_token, g.window) for g in fp.kv))


def total_curve(fp: Footprint) -> Curve:
    return Curve(fp.state_bytes, kv_curve(fp).terms)


def first_crossing(ref: Curve, hybrid: Curve) -> Fraction | None:
    """Smallest x ≥ 0 with ref(x) = hybrid(x) after which the reference is larger; None if it never is."""
    points = [0, *ref.breakpoints(), *hybrid.breakpoints()]
    points = sorted(set(points))
    for i, lo in enumerate(points):
        hi = points[i + 1] if i + 1 < len(points) else None
        d_lo = ref.at(lo) - hybrid.at(lo)
        if d_lo > 0:
            return Fraction(lo)
        probe = lo + 1 if hi is None else hi
        slope = Fraction((ref.at(probe) - hybrid.at(probe)) - d_lo, probe - lo)
        if slope <= 0:
            continue
        x = lo - d_lo / slope
        if hi is None or x <= hi:
            return x
    return None


def first_whole_smaller(ref: Curve, hybrid: Curve, crossing: Fraction | None) -> int | None:
    """The first whole context where the hybrid needs strictly fewer bytes than the reference."""
    if crossing is None:
        return None
    n = max(0, floor(crossing))
    while ref.at(n) <= hybrid.at(n):
        n += 1
    return n


class CrossoverRow(Struct, frozen=True):
    ssm_dtype: str
    state_bytes: int
    state_only: Fraction | None
    state_only_tokens: int | None
    total: Fraction | None
    total_tokens: int | None


def crossover_row(hybrid: Footprint, ref: Footprint) -> CrossoverRow:
    """The reference's whole footprint (its KV, and its own recurrent state when it is a hybrid too) against
    the hybrid's state alone and against its state + KV."""
    r = total_curve(ref)
    s_only = first_crossing(r, state_curve(hybrid))
    tot = first_crossing(r, total_curve(hybrid))
    return CrossoverRow(
        ssm_dtype=hybrid.dtypes.ssm,
        state_bytes=hybrid.state_bytes,
        state_only=s_only,
        state_only_tokens=first_whole_smaller(r, state_curve(hybrid), s_only),
        total=tot,
        total_tokens=first_whole_smaller(r, total_curve(hybrid), tot),
    )
