"""`hybridplan check-log`: a real start-up log, each figure the engine printed beside the prediction for the
same settings. A log may hold several start-ups (a restart appended by ``docker logs``, A/B runs pasted into one
file): it is cut into them first, and each is checked on its own lines alone. Each engine reads its own lines:
the settings the log states (and where), the figures it prints, and those hybridplan does not model; flags
override what the log says."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from msgspec import Struct
from msgspec.structs import replace

from hybridplan import engines
from hybridplan.engines import LogGiven
from hybridplan.engines.common import Estimate, NotModelled, Row, Setting
from hybridplan.errors import PlanError
from hybridplan.logread import Log
from hybridplan.reports import schema_version

NOTHING = (
    'no line hybridplan can check in this log (looked for vLLM\'s "Setting attention block size", "Padding '
    'mamba page size", "KV cache size", "Maximum concurrency" and "max_num_seqs … exceeds", and SGLang\'s '
    '"Mamba Cache is allocated", "KV Cache is allocated" and max_running_requests lines)'
)


class StartCheck(Struct, frozen=True):
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
        return {
            "index": self.index,
            "lines": list(self.lines),
            "model": self.model,
            "ok": self.ok,
            "error": self.error,
            **{f: [_JSON[f](x) for x in getattr(self, f)] for f in _FIELDS},
            "notes": list(self.notes),
        }


class CheckReport(Struct, frozen=True):
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

    csv_columns = ("start", "engine", "figure", "unit", "logged", "predicted", "ok")

    def csv_rows(self) -> list[dict]:
        """One row per figure compared, typed as --json types it (``typed``: a count as a number, without its
        separators; text that is not a number stays text)."""
        return [
            {"start": s.index, **{k: v for k, v in _row_json(x).items() if k in self.csv_columns}}
            for s in self.checked
            for x in s.rows
        ]

    def to_dict(self) -> dict:
        return {
            "schema_version": schema_version("check-log"),
            "model": self.model,
            "ok": self.ok,
            **{f: [{**_JSON[f](x), "start": s.index} for s in self.checked for x in getattr(s, f)] for f in _FIELDS},
            "notes": list(self.notes),
            "starts": [s.to_dict() for s in self.starts],
        }


# --- the JSON: numbers as numbers, the unit in the name -------------------------------------------------------
#
# The engines' lines are read as text and compared as text (a figure matches when it prints the same). The JSON
# gives each value typed: a count as an integer (973,760 → 973760), a figure the engine prints with decimals as a
# number (180.00 → 180.0), True/False as booleans; a setting the engine prints with a unit has the unit in its
# name ("44.59 GiB" → available_kv_cache_memory_gib: 44.59, as rounded by the engine: the bytes are not known);
# "…_text" keeps what was printed, on which the comparison is made.

_INT = re.compile(r"-?\d{1,3}(?:,\d{3})+|-?\d+")
_FLOAT = re.compile(r"-?\d+\.\d+")
_WITH_UNIT = re.compile(r"(-?[\d,]+(?:\.\d+)?) (GiB|GB|MiB|MB|B)")
_UNIT_SUFFIX = {"GiB": "gib", "GB": "gb", "MiB": "mib", "MB": "mb", "B": "bytes"}
#: settings whose value reads as a number but is a name (a release, sm_86's 8.6)
_TEXT_SETTINGS = frozenset({"version", "compute_capability", "model", "model_path", "architecture"})


def typed(text: str) -> str | int | float | bool:
    """A printed value as JSON: ``"1,474,560"`` → 1474560, ``"0.10"`` → 0.1, ``"False"`` → false; anything else
    (a dtype, ``"1, 5.00%"``, ``"refused"``) stays text."""
    t = text.strip()
    if _INT.fullmatch(t):
        return int(t.replace(",", ""))
    if _FLOAT.fullmatch(t):
        return float(t)
    if t in ("True", "False"):
        return t == "True"
    return text


def _snake(name: str) -> str:
    return re.sub(r"[^0-9a-z]+", "_", name.lower()).strip("_")


def _setting_json(x: Setting) -> dict:
    name, value = x.name, x.value
    m = _WITH_UNIT.fullmatch(value.strip())
    if m:
        number = m.group(1).replace(",", "")
        name = f"{_snake(name)}_{_UNIT_SUFFIX[m.group(2)]}"
        out: object = int(number) if m.group(2) == "B" else float(number)
    elif x.name in _TEXT_SETTINGS:
        out = value
    else:
        out = typed(value)
    return {"engine": x.engine, "name": name, "value": out, "text": value, "source": x.source}


def _unit(figure: str) -> str | None:
    """The unit of a figure, from its label as the table shows it."""
    for mark, unit in (
        ("(GiB)", "GiB"),
        ("(GB", "GB"),
        ("(MB)", "MB"),
        ("(tokens)", "tokens"),
        ("%", "percent"),
        ("max concurrency", "requests"),
        ("block size", "tokens"),
    ):
        if mark in figure:
            return unit
    return None


def _row_json(x: Row) -> dict:
    return {
        "engine": x.engine,
        "figure": x.figure,
        "unit": _unit(x.figure),
        "logged": typed(x.logged),
        "predicted": typed(x.predicted),
        "logged_text": x.logged,
        "predicted_text": x.predicted,
        "ok": x.ok,
    }


def _estimate_json(x: Estimate) -> dict:
    return {**x.to_dict(), "unit": _unit(x.figure)}


def _not_modelled_json(x: NotModelled) -> dict:
    return {
        "engine": x.engine,
        "figure": x.figure,
        "logged": typed(x.logged),
        "logged_text": x.logged,
        "reason": x.reason,
    }


_FIELDS = ("settings", "rows", "estimates", "not_modelled")
_JSON: dict[str, Callable[[Any], dict]] = {
    "settings": _setting_json,
    "rows": _row_json,
    "estimates": _estimate_json,
    "not_modelled": _not_modelled_json,
}


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
        return StartCheck(
            index,
            log.span,
            None,
            notes=(
                f"start {index} (lines {log.span[0]:,}–{log.span[1]:,}) prints no figure hybridplan checks: it stopped "
                "before its caches were sized, or the excerpt left them out",
            ),
        )
    parts = [e.check_log(log, given) for e in found]
    if log.cut_by is None:
        cut: tuple[str, ...] = ()
    elif log.cut_by.startswith("container "):
        cut = (
            f"start {index} (lines {log.span[0]:,}–{log.span[1]:,}) is the lines of {log.cut_by}: the log "
            "interleaves docker compose services, each read on its own lines",
        )
    else:
        cut = (
            f"start {index} (lines {log.span[0]:,}–{log.span[1]:,}) prints no banner of its own: it is cut from "
            f"the one before where a figure that start printed appears again ({log.cut_by}), as pasted runs are; "
            "the settings the log states are read from this start's lines alone",
        )
    return StartCheck(
        index,
        log.span,
        parts[0].model,
        tuple(s for p in parts for s in p.settings),
        tuple(r for p in parts for r in p.rows),
        tuple(n for p in parts for n in p.not_modelled),
        cut + tuple(n for p in parts for n in p.notes),
        tuple(e for p in parts for e in p.estimates),
    )


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
