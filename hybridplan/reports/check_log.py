"""`hybridplan check-log`: a real start-up log, each figure the engine printed beside the prediction for the
same settings. Each engine reads its own lines: the settings the log states (and where), the figures it
prints, and those hybridplan does not model; flags override what the log says."""

from __future__ import annotations

from dataclasses import dataclass

from hybridplan import engines
from hybridplan.engines import LogGiven
from hybridplan.engines.common import Estimate, NotModelled, Row, Setting
from hybridplan.errors import PlanError
from hybridplan.logread import Log
from hybridplan.reports import SCHEMA_VERSION


@dataclass(frozen=True)
class CheckReport:
    model: str
    settings: tuple[Setting, ...]
    rows: tuple[Row, ...]
    not_modelled: tuple[NotModelled, ...]
    notes: tuple[str, ...]
    estimates: tuple[Estimate, ...] = ()

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rows)

    def setting(self, name: str) -> str | None:
        return next((s.value for s in self.settings if s.name == name), None)

    def to_dict(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, "model": self.model, "ok": self.ok,
                "settings": [s.to_dict() for s in self.settings], "rows": [r.to_dict() for r in self.rows],
                "estimates": [e.to_dict() for e in self.estimates],
                "not_modelled": [n.to_dict() for n in self.not_modelled], "notes": list(self.notes)}


def keywords() -> list[str]:
    """What a line must hold for any engine to read it."""
    return [k for e in engines.every() for k in e.log_keywords]


def check(log: Log, given: LogGiven = LogGiven()) -> CheckReport:
    found = [e for e in engines.every() if e.log_present(log)]
    if not found:
        raise PlanError("no line hybridplan can check in this log (looked for vLLM's \"Setting attention block "
                        "size\", \"Padding mamba page size\", \"KV cache size\", \"Maximum concurrency\" and "
                        "\"max_num_seqs … exceeds\", and SGLang's \"Mamba Cache is allocated\", \"KV Cache is "
                        "allocated\" and max_running_requests lines)")
    if given.tp is not None and given.tp < 1:
        raise PlanError(f"--tp must be a positive integer, got {given.tp}")
    parts = [e.check_log(log, given) for e in found]
    return CheckReport(parts[0].model, tuple(s for p in parts for s in p.settings),
                       tuple(r for p in parts for r in p.rows), tuple(n for p in parts for n in p.not_modelled),
                       tuple(n for p in parts for n in p.notes), tuple(e for p in parts for e in p.estimates))
