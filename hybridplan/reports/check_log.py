"""`hybridplan check-log`: a real start-up log, each figure the engine printed beside the prediction for the
same settings. A log may hold several start-ups (a restart appended by ``docker logs``, A/B runs pasted into one
file): it is cut into them first, and each is checked on its own lines alone. Each engine reads its own lines:
the settings the log states (and where), the figures it prints, and those hybridplan does not model; flags
override what the log says."""

from __future__ import annotations


from dataclasses import replace

from hybridplan import engines
from hybridplan.engines import LogGiven
from hybridplan.engines.common import Estimate, NotModelled, Row, Setting
from hybridplan.errors import PlanError
from hybridplan.logread import Log
from hybridplan.records import frozen
from hybridplan.reports import SCHEMA_VERSION

NOTHING = ("no line hybridplan can check in this log (looked for vLLM's \"Setting attention block size\", \"Padding "
           "mamba page size\", \"KV cache size\", \"Maximum concurrency\" and \"max_num_seqs … exceeds\", and SGLang's "
           "\"Mamba Cache is allocated\", \"KV Cache is allocated\" and max_running_requests lines)")


@frozen
class StartCheck:
    """One start-up of the log: the lines it spans, and its settings, figures and notes, never mixed with
    another start's. ``error`` says why a start could not be checked (its figures are then not compared)."""

    index: int
    lines: tuple[int, int]
    model: str | None
    settings: tuple[Setting, ...] = ()
    rows: tuple[Row, ...] = ()
    not_modelled: tuple[NotModelled, ...] = ()
    notes: tuple[str, ...] = ()
    estimates: tuple[Estimate, ...] = ()
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and all(r.ok for r in self.rows)

    @property
    def checked(self) -> bool:
        return self.error is None and bool(self.rows)

    def setting(self, name: str) -> str | None:
        return next((s.value for s in self.settings if s.name == name), None)

    def to_dict(self) -> dict:
        return {"index": self.index, "lines": list(self.lines), "model": self.model, "ok": self.ok,
                "error": self.error, "settings": [s.to_dict() for s in self.settings],
                "rows": [r.to_dict() for r in self.rows], "estimates": [e.to_dict() for e in self.estimates],
                "not_modelled": [n.to_dict() for n in self.not_modelled], "notes": list(self.notes)}


@frozen
class CheckReport:
    """Every start of the log. ``ok`` when every start that could be checked matches; the top-level JSON lists
    each start's rows with its index, so a figure is always read with its own start."""

    starts: tuple[StartCheck, ...]

    @property
    def checked(self) -> tuple[StartCheck, ...]:
        return tuple(s for s in self.starts if s.error is None)

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.checked)

    @property
    def model(self) -> str:
        return next((s.model for s in self.checked if s.model), "")

    def _every(self, field: str) -> tuple:
        """One field of every start that could be checked, in log order."""
        return tuple(x for s in self.checked for x in getattr(s, field))

    @property
    def settings(self) -> tuple[Setting, ...]:
        return self._every("settings")

    @property
    def rows(self) -> tuple[Row, ...]:
        return self._every("rows")

    @property
    def not_modelled(self) -> tuple[NotModelled, ...]:
        return self._every("not_modelled")

    @property
    def estimates(self) -> tuple[Estimate, ...]:
        return self._every("estimates")

    @property
    def notes(self) -> tuple[str, ...]:
        return tuple(x for s in self.starts for x in s.notes)

    def setting(self, name: str) -> str | None:
        return next((s.value for s in self.settings if s.name == name), None)

    def to_dict(self) -> dict:
        def tagged(items, start: StartCheck) -> list[dict]:
            return [{**x.to_dict(), "start": start.index} for x in items]

        fields = ("settings", "rows", "estimates", "not_modelled")
        return {"schema_version": SCHEMA_VERSION, "model": self.model, "ok": self.ok,
                **{f: [d for s in self.checked for d in tagged(getattr(s, f), s)] for f in fields},
                "notes": list(self.notes), "starts": [s.to_dict() for s in self.starts]}


def keywords() -> list[str]:
    """What a line must hold for any engine to read it."""
    return [k for e in engines.every() for k in e.log_keywords]


def split(log: Log) -> list[Log]:
    """The log's start-ups, cut where any engine's start opens again (``Log.starts``)."""
    from importlib import import_module

    every = engines.every()
    stages = [getattr(import_module(f"hybridplan.engines.{e.name}.logs"), "FIGURE_STAGES", ()) for e in every]
    openers, figures = [p for e in every for p in e.log_openers], [p for e in every for p in e.log_figures]
    out = []
    for part in log.containers():  # interleaved compose services first, then each one's start-ups
        pieces = part.starts(openers, figures, stages)
        if part is not log:
            pieces = [replace(pieces[0], cut_by=part.cut_by), *pieces[1:]] if pieces else []
        out += pieces
    return out


def _check_start(index: int, log: Log, given: LogGiven) -> StartCheck:
    found = [e for e in engines.every() if e.log_present(log)]
    if not found:
        return StartCheck(index, log.span, None, notes=(
            f"start {index} (lines {log.span[0]:,}–{log.span[1]:,}) prints no figure hybridplan checks: it stopped "
            "before its caches were sized, or the excerpt left them out",))
    parts = [e.check_log(log, given) for e in found]
    if log.cut_by is None:
        cut: tuple[str, ...] = ()
    elif log.cut_by.startswith("container "):
        cut = (f"start {index} (lines {log.span[0]:,}–{log.span[1]:,}) is the lines of {log.cut_by}: the log "
               "interleaves docker compose services, each read on its own lines",)
    else:
        cut = (f"start {index} (lines {log.span[0]:,}–{log.span[1]:,}) prints no banner of its own: it is cut from "
               f"the one before where a figure that start printed appears again ({log.cut_by}), as pasted runs are; "
               "the settings the log states are read from this start's lines alone",)
    return StartCheck(index, log.span, parts[0].model, tuple(s for p in parts for s in p.settings),
                      tuple(r for p in parts for r in p.rows), tuple(n for p in parts for n in p.not_modelled),
                      cut + tuple(n for p in parts for n in p.notes), tuple(e for p in parts for e in p.estimates))


def check(log: Log, given: LogGiven = LogGiven()) -> CheckReport:
    """Each start of the log checked on its own lines. One start that cannot be checked is an error (exit 2);
    among several, it is reported with its reason and the others are still checked."""
    if given.tp is not None and given.tp < 1:
        raise PlanError(f"--tp must be a positive integer, got {given.tp}")
    if not any(e.log_present(log) for e in engines.every()):
        raise PlanError(NOTHING)
    pieces = split(log)
    starts = []
    for i, piece in enumerate(pieces, 1):
        if len(pieces) == 1:
            starts.append(_check_start(i, piece, given))
            continue
        try:
            starts.append(_check_start(i, piece, given))
        except PlanError as exc:
            starts.append(StartCheck(i, piece.span, None, error=str(exc)))
    report = CheckReport(tuple(starts))
    if not report.checked:
        raise PlanError(next(s.error for s in starts if s.error))
    return report
