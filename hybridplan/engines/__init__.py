"""Serving-engine rules: one package per engine (``vllm``, ``sglang``), each rule with the releases it holds
for and where the engine does it. Both offer the same verbs behind ``Engine``, so a report loops over the
engines a scenario asks for instead of branching on their names. An engine package is imported only when a
command needs it."""

from __future__ import annotations

import re
from collections.abc import Callable
from importlib import import_module
from typing import TYPE_CHECKING, Protocol, TypeVar

from hybridplan.errors import NotServed, PlanError

if TYPE_CHECKING:
    from hybridplan.engines.common import LogCheck, Reuse
    from hybridplan.engines.given import LogGiven
    from hybridplan.logread import Log
    from hybridplan.memory import Footprint
    from hybridplan.replay.loop import Policy, Run
    from hybridplan.replay.settings import ReplaySettings
    from hybridplan.scenario import Scenario

#: the engines, in the order reports show them
NAMES = ("vllm", "sglang")
#: the engine whose attention-only layout (its KV blocks, the recurrent layers left out) is `replay`'s baseline
BASELINE = "vllm"


class Part(Protocol):
    """An engine's share of a report: it knows its JSON."""

    def to_dict(self) -> dict: ...


class FitPart(Part, Protocol):
    @property
    def starts(self) -> bool: ...

    @property
    def problem(self) -> str | None: ...

    @property
    def flags(self) -> str: ...

    @property
    def notes(self) -> tuple[str, ...]: ...


class PrefixPart(Part, Protocol):
    def entries(self) -> list[tuple[str, str, Reuse]]:
        """(row label, what its grid is called, reuse) per row."""
        ...


class ReplayAdvice(Protocol):
    """An engine's part of `replay` (hybridplan/engines/<name>/replay_advice.py): its rows, what stood in a
    row's way, what may recover each cause of its gap to the ideal cache. ``rules`` is a row's rules' dict;
    ``r`` the engine's own rules (its prefix cache module's ``Rules``)."""

    def policies(
        self, sc: Scenario, rs: ReplaySettings, unbounded: bool
    ) -> tuple[list[tuple[Policy, dict]], dict[str, str]]:
        """(policy, rules) per row the scenario asks of this engine, and the rows it would not start with, with
        the reason (``NotServed``: none starts). ``unbounded``: pools that never evict, no budget asked for."""
        ...

    def baseline(self, sc: Scenario, rs: ReplaySettings, unbounded: bool) -> tuple[Policy, dict] | None:
        """The model's attention layers alone in this engine's layout (``BASELINE``'s; None elsewhere)."""
        ...

    def diagnose(
        self, run: Run, rules: dict, sc: Scenario, rs: ReplaySettings, replay_one: Callable[[Policy], Run] | None
    ) -> list[str]:
        """A row's misses in words, with the flag that changes each and by how much (``replay_one`` replays a
        changed policy over the trace; None: the trace is too long)."""
        ...

    def candidates(
        self, p: Policy, rules: dict, run: Run, lost: dict[str, int], sc: Scenario, rs: ReplaySettings
    ) -> list[tuple[str, str, object]]:
        """(cause, change, rules) for each flag or memory that may recover a cause of the gap (``lost``)."""
        ...

    def no_flag(self, cause: str) -> str:
        """Why no flag is tried for a cause that costs tokens."""
        ...

    def lift(self, cause: str, r):
        """The rules with one cause of the gap lifted (eviction, max_model_len, caching_off, policy)."""
        ...

    def state_grid(self, r) -> int:
        """The grid the states of rules with every cause lifted sit on."""
        ...

    def sweep_point(
        self, sc: Scenario, rs: ReplaySettings, rules: dict, over: str, k: float, block: int
    ) -> tuple[Policy, float] | None:
        """A row's policy and x at one ``--plot`` point (``over``: budget or block); None: not swept."""
        ...

    def notes(self, sc: Scenario) -> list[str]:
        """What the engine's defaults chose where the flags left it to them."""
        ...


class Engine(Protocol):
    """The verbs every engine offers; each takes the scenario and raises ``NotServed`` for a model (or
    release) it does not run."""

    name: str
    #: the log lines that say a log is this engine's, as a person would name them
    looked_for: tuple[str, ...]

    def check_served(self, sc: Scenario) -> None: ...

    def footprint(self, sc: Scenario) -> Footprint:
        """One sequence as this engine caches it (its dtype rules)."""
        ...

    def layout(self, sc: Scenario) -> Part:
        """`size --engine`: pages, padding, pools."""
        ...

    def fit(self, sc: Scenario) -> FitPart:
        """What the budget holds and whether the engine starts."""
        ...

    def prefix(self, sc: Scenario, prompt: int, replayed: Callable[[], list[tuple[dict, Reuse]]]) -> PrefixPart:
        """`prefix`'s part: the reuse ``replayed()`` gives for each of this engine's replay policies (its rules'
        dict and the reuse), once the engine takes a ``prompt``-token prompt (``NotServed`` where it does not)."""
        ...

    @property
    def log_keywords(self) -> tuple[str, ...]:
        """Substrings one of which every log line this engine reads holds."""
        ...

    @property
    def log_openers(self) -> tuple[re.Pattern[str], ...]:
        """The lines a start-up prints once each: one printed again opens the next start in the same file."""
        ...

    @property
    def log_figures(self) -> tuple[re.Pattern[str], ...]:
        """The lines holding a figure this engine checks."""
        ...

    def log_present(self, log: Log) -> bool:
        """Does a start-up log hold a figure of this engine?"""
        ...

    def replay_advice(self) -> ReplayAdvice:
        """This engine's part of `replay` (its ``replay_advice`` module)."""
        ...

    def check_log(self, log: Log, given: LogGiven) -> LogCheck:
        """The settings the log states, its figures beside the prediction, and those not modelled."""
        ...


class LogVerbs:
    """The log verbs of an engine whose log rules live in ``hybridplan.engines.<name>.logs`` (its ``KEYWORDS``,
    ``OPENERS``, ``FIGURE_PATTERNS``, ``present`` and ``check``), that module imported on first use."""

    name: str

    def _logs(self):
        return import_module(f"hybridplan.engines.{self.name}.logs")

    @property
    def log_keywords(self) -> tuple[str, ...]:
        return self._logs().KEYWORDS

    @property
    def log_openers(self) -> tuple[re.Pattern[str], ...]:
        return self._logs().OPENERS

    @property
    def log_figures(self) -> tuple[re.Pattern[str], ...]:
        return self._logs().FIGURE_PATTERNS

    def log_present(self, log: Log) -> bool:
        return self._logs().present(log)

    def check_log(self, log: Log, given: LogGiven) -> LogCheck:
        """The settings the log states, its figures beside the prediction for them, and those not modelled."""
        return self._logs().check(log, given)


def get(name: str) -> Engine:
    if name not in NAMES:
        raise PlanError(f"unknown engine {name!r} (known: {', '.join(NAMES)})")
    return import_module(f"hybridplan.engines.{name}.engine").ENGINE


def every() -> list[Engine]:
    return [get(n) for n in NAMES]


T = TypeVar("T")


def each(sc: Scenario, verb: Callable[[Engine], T]) -> tuple[dict[str, T], dict[str, str]]:
    """Run ``verb`` on every engine the scenario asks for: (results by engine, reasons for skipping).

    With ``--engine both`` an engine that does not serve the model is skipped, with its reason; asked for
    alone, that is an error like any other."""
    parts: dict[str, T] = {}
    skipped: dict[str, str] = {}
    for name in NAMES:
        if not sc.wants(name):
            continue
        try:
            parts[name] = verb(get(name))
        except NotServed as exc:
            if sc.engine == name:
                raise
            skipped[name] = str(exc)
    return parts, skipped


def __getattr__(name: str):
    if name == "LogGiven":  # check-log's alone: its class is built when that command asks for it
        from hybridplan.engines.given import LogGiven

        return LogGiven
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def none_left(skipped: dict[str, str], what: str) -> PlanError:
    """The error when every engine asked for was skipped."""
    return PlanError("; ".join(skipped.values()) or f"no engine to {what}")


__all__ = [
    "BASELINE",
    "Engine",
    "FitPart",
    "LogGiven",
    "NAMES",
    "Part",
    "PrefixPart",
    "ReplayAdvice",
    "each",
    "every",
    "get",
    "none_left",
]
