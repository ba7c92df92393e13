"""Small pieces both engines' rules are written with: integer rounding, the result of prefix reuse, and what
a log check reports (settings with their source, figures beside their prediction, figures not modelled)."""

from __future__ import annotations

import re
from math import gcd
from typing import Any

from msgspec import Struct

from hybridplan.units import cdiv  # noqa: E402,F401 - defined with the units, so that weights need not load this


def lcm(a: int, b: int) -> int:
    return a * b // gcd(a, b)


def floor_to(n: int, unit: int) -> int:
    return n // unit * unit


class Reuse(Struct, frozen=True):
    """Prefix reuse on one engine, as `prefix` replays it (hybridplan/reports/prefix.py): where the first request
    left states (``checkpoints``), what the second request reuses and computes, and what the third does (it
    also finds what the second left where it branched off)."""

    grid: int | None
    checkpoints: tuple[int, ...]
    reused_tokens: int
    computed_tokens: int
    later_reused_tokens: int
    later_computed_tokens: int

    def to_dict(self, grid_key: str) -> dict:
        return {
            grid_key: self.grid,
            "checkpoints": list(self.checkpoints),
            "reused_tokens": self.reused_tokens,
            "computed_tokens": self.computed_tokens,
            "later_reused_tokens": self.later_reused_tokens,
            "later_computed_tokens": self.later_computed_tokens,
        }


def last(pattern: re.Pattern, text: str):
    """The last match of ``pattern`` in a log: a setting printed twice counts as it was printed last."""
    found = pattern.findall(text)
    return found[-1] if found else None


class Row(Struct, frozen=True):
    """One figure of a log beside its prediction."""

    engine: str
    figure: str
    logged: str
    predicted: str

    @property
    def ok(self) -> bool:
        return self.logged == self.predicted

    def to_dict(self) -> dict:
        return {
            "engine": self.engine,
            "figure": self.figure,
            "logged": self.logged,
            "predicted": self.predicted,
            "ok": self.ok,
        }


class Setting(Struct, frozen=True):
    """A setting a log check ran with, and where it came from: a log line, a flag, or a default."""

    engine: str
    name: str
    value: str
    source: str

    def to_dict(self) -> dict:
        return {"engine": self.engine, "name": self.name, "value": self.value, "source": self.source}


class Settings:
    """The settings a log check gathers for one engine, each with its source; the first source a setting is
    given by wins (flags are put first)."""

    def __init__(self, engine: str) -> None:
        self.engine = engine
        self.values: dict[str, object] = {}
        self.sources: dict[str, str] = {}

    def put(self, name: str, value: object, source: str) -> None:
        if value is not None and name not in self.values:
            self.values[name] = value
            self.sources[name] = source

    def get(self, name: str, default: object = None):
        return self.values.get(name, default)

    def listed(self) -> tuple[Setting, ...]:
        return tuple(Setting(self.engine, n, str(v), self.sources[n]) for n, v in self.values.items())


class NotModelled(Struct, frozen=True):
    """A figure the log shows that hybridplan does not predict, and why."""

    engine: str
    figure: str
    logged: str
    reason: str

    def to_dict(self) -> dict:
        return {"engine": self.engine, "figure": self.figure, "logged": self.logged, "reason": self.reason}


class Estimate(Struct, frozen=True):
    """A figure of the log beside hybridplan's estimate of it, which is not expected to be exact."""

    engine: str
    figure: str
    logged: float
    predicted: float
    #: what the estimate rests on
    basis: str
    #: the error within which the estimate is held good, in percent
    tolerance_pct: float = 2.0

    @property
    def error_pct(self) -> float:
        return 100 * (self.predicted - self.logged) / self.logged if self.logged else 0.0

    @property
    def within(self) -> bool:
        return abs(self.error_pct) <= self.tolerance_pct

    def to_dict(self) -> dict:
        return {
            "engine": self.engine,
            "figure": self.figure,
            "logged": self.logged,
            "predicted": self.predicted,
            "error_pct": round(self.error_pct, 3),
            "within": self.within,
            "basis": self.basis,
        }


class LogCheck(Struct, frozen=True):
    """One engine's reading of a log: its settings, each figure beside its prediction, what it does not
    model, and how the figures were compared."""

    model: str
    settings: tuple[Setting, ...]
    rows: tuple[Row, ...]
    not_modelled: tuple[NotModelled, ...]
    notes: tuple[str, ...]
    estimates: tuple[Estimate, ...] = ()


def literal(text: str):
    """A value as a log prints it (``'x'``, ``3``, ``0.9``, ``True``, ``None``, ``torch.bfloat16``), as Python."""
    import ast

    text = text.strip().rstrip(",")
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text.removeprefix("torch.")


class Term(Struct, frozen=True):
    """One step of the memory waterfall: what it takes, and whether it is known or estimated."""

    name: str
    bytes: int
    #: "exact" (a rule or a given figure), "counted" (from the config) or "estimate"
    kind: str
    note: str = ""


class Waterfall(Struct, frozen=True):
    """A GPU's memory from its total to the cache pool: ``total × utilization`` less each term."""

    gpu_bytes: int
    utilization: float
    requested: int
    terms: tuple[Term, ...]
    #: what is left for the caches on one rank
    cache_bytes: int
    #: what comes off the total before the utilization applies (SGLang: the CUDA context)
    before: tuple[Term, ...] = ()
    #: how the utilization was chosen, where the engine chose it
    factor_note: str = ""
    #: what loads later, out of the memory the utilization leaves (SGLang: the speculative draft worker's weights)
    after: tuple[Term, ...] = ()

    def term(self, name: str) -> int:
        return sum(t.bytes for t in (*self.before, *self.terms) if t.name == name)

    @property
    def estimated(self) -> list[str]:
        return [t.name for t in (*self.before, *self.terms) if t.kind == "estimate"]

    def to_dict(self) -> dict:
        return {
            "gpu_bytes": self.gpu_bytes,
            "utilization": self.utilization,
            "utilization_note": self.factor_note,
            "requested_bytes": self.requested,
            "weights_bytes": self.term("weights"),
            "drafter_weights_bytes": sum(t.bytes for t in (*self.terms, *self.after) if t.name == "drafter weights"),
            "activation_bytes": self.term("activation"),
            "non_torch_bytes": self.term("non-torch"),
            "cudagraph_bytes": self.term("CUDA graphs"),
            "kv_budget_bytes": self.cache_bytes,
            "estimated": self.estimated,
            "terms": [
                {"name": t.name, "bytes": t.bytes, "kind": t.kind, "note": t.note} for t in (*self.before, *self.terms)
            ],
            "after_terms": [{"name": t.name, "bytes": t.bytes, "kind": t.kind, "note": t.note} for t in self.after],
        }


class Shortfall(Struct, frozen=True):
    """`fit` on an engine whose weights and overheads leave nothing for its caches: it will not start."""

    engine: str
    memory: Waterfall
    cache_label: str
    factor_label: str

    @property
    def starts(self) -> bool:
        return False

    @property
    def problem(self) -> str:
        taken = ", ".join(f"{t.name} {t.bytes / (1 << 30):.2f} GiB" for t in (*self.memory.before, *self.memory.terms))
        return (
            f"{self.engine}: nothing is left for the caches ({self.cache_label}): {taken} take more than "
            f"{self.memory.requested / (1 << 30):.2f} GiB ({self.factor_label} {self.memory.utilization:.4g}); "
            "use more GPUs (--tp) or a quantized checkpoint"
        )

    @property
    def flags(self) -> str:
        return "—"

    @property
    def notes(self) -> tuple[str, ...]:
        return ()

    def to_dict(self) -> dict:
        return {"memory": self.memory.to_dict(), "starts": False, "problem": self.problem}


class SchedulerLoop:
    """What an engine's scheduler loop for ``replay`` (engines/vllm/scheduler.py, engines/sglang/scheduler.py)
    passes straight through from the cache it drives (``cache``): the figures the replay loop reads off a cache,
    and a request's keys."""

    cache: Any

    @property
    def evictions(self) -> int:
        return self.cache.evictions

    @property
    def peak_states(self) -> int:
        return self.cache.peak_states

    @property
    def peak_blocks(self) -> int:
        return self.cache.peak_blocks

    def keys(self, req: Any, stop: int) -> list[int]:
        return self.cache.keys(req, stop)
