"""`hybridplan check-log`: a real start-up log, each figure the engine printed beside the prediction for the
same settings. The settings (model, TP, release, mode, context, KV dtype) are read from the log where the
engine prints them, and flags override them; each engine reads its own lines."""

from __future__ import annotations

from dataclasses import dataclass

from hybridplan import engines
from hybridplan.engines.common import Row
from hybridplan.errors import PlanError
from hybridplan.loader import load_logged_model, load_model
from hybridplan.reports import SCHEMA_VERSION
from hybridplan.scenario import DtypeChoice, Scenario, default_ctx


@dataclass(frozen=True)
class Given:
    """`check-log`'s flags: what they say wins over what the log says."""

    model: str | None = None
    tp: int | None = None
    engine: engines.LogGiven = engines.LogGiven()


@dataclass(frozen=True)
class CheckReport:
    model: str
    settings: dict
    rows: tuple[Row, ...]
    notes: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rows)

    def to_dict(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, "model": self.model, "settings": self.settings, "ok": self.ok,
                "rows": [{"engine": r.engine, "figure": r.figure, "logged": r.logged, "predicted": r.predicted,
                          "ok": r.ok} for r in self.rows], "notes": list(self.notes)}


def check(text: str, given: Given = Given()) -> CheckReport:
    found = [e for e in engines.every() if e.log_present(text)]
    if not found:
        lines = [line for e in engines.every() for line in e.looked_for]
        looked = f"{', '.join(lines[:-1])} and {lines[-1]}"
        raise PlanError(f"no line hybridplan can check in this log (looked for {looked})")

    def logged(name: str) -> str | None:
        return next((v for e in found if (v := e.log_setting(text, name)) is not None), None)

    if given.model:
        spec = load_model(given.model)
    elif (ref := logged("model")) is not None:
        spec = load_logged_model(ref)
    else:
        raise PlanError("the log does not name the model: pass --model")
    tp = given.tp or int(logged("tp") or 1)
    if tp < 1:
        raise PlanError(f"--tp must be a positive integer, got {tp}")
    kv = logged("kv_dtype")
    kv = None if kv in (None, "auto") else kv
    base = Scenario(spec, ctx=default_ctx(spec), tp=tp, dtypes=DtypeChoice(kv=kv))
    settings: dict = {"tp": tp, "kv_dtype": kv or "auto"}
    rows: list[Row] = []
    notes: list[str] = []
    for e in found:
        part = e.check_log(text, base, given.engine)
        settings.update(part.settings)
        rows += part.rows
        notes += part.notes
    return CheckReport(spec.name, settings, tuple(rows), tuple(notes))
