"""`hybridplan fit`: how many requests of a context each engine holds in a memory budget, whether it starts
with the flags given, and the flags to pass."""

from __future__ import annotations

from dataclasses import dataclass

from hybridplan import engines
from hybridplan.reports import SCHEMA_VERSION
from hybridplan.scenario import Scenario


@dataclass(frozen=True)
class FitReport:
    sc: Scenario
    parts: dict[str, engines.FitPart]
    notes: tuple[str, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()

    @property
    def verdict_ok(self) -> bool:
        return bool(self.parts) and all(p.starts for p in self.parts.values())

    @property
    def problems(self) -> list[str]:
        return [p.problem for p in self.parts.values() if p.problem]

    def flags(self) -> dict[str, str]:
        return {name: p.flags for name, p in self.parts.items()}

    def to_dict(self) -> dict:
        sc = self.sc
        d: dict = {"schema_version": SCHEMA_VERSION, "model": sc.spec.name, "ctx": sc.ctx, "tp": sc.tp,
                   "ok": self.verdict_ok, "flags": self.flags(), "notes": list(self.notes)}
        if self.skipped:
            d["skipped"] = dict(self.skipped)
        d.update((name, p.to_dict()) for name, p in self.parts.items())
        return d


def budget_notes(sc: Scenario) -> tuple[str, ...]:
    """What the budget rests on, where it was not given."""
    b = sc.budget
    if b.kv_budget is not None:
        return ()
    notes = []
    if b.gpu is not None:
        from hybridplan.gpus import gpu

        g = gpu(b.gpu)
        if not g.exact:
            notes.append(f"{g.name}: nvidia-smi's total, {g.total:,} B; the CUDA total the engines see is 0.45–0.9 "
                         "GiB smaller (hybridplan/gpus.py)")
        if g.unified:
            notes.append(f"{g.name} shares its memory with the host: vLLM reads free memory from the host's "
                         "available memory (vllm/utils/mem_utils.py), so whatever the host takes during start-up "
                         "counts as non-torch; real logs came out up to 3.2 GiB below this estimate (docs/memory.md)")
    return tuple(notes)


_ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang"}


def estimate_note(parts: dict) -> tuple[str, ...]:
    """Which terms of the memory shown are estimates, engine by engine, as each waterfall marks them."""
    said = []
    for name, p in parts.items():
        memory = getattr(p, "memory", None)
        terms = list(dict.fromkeys(memory.estimated)) if memory is not None else []
        if terms:
            what = ", ".join(terms[:-1]) + (" and " if len(terms) > 1 else "") + terms[-1]
            said.append(f"{_ENGINE_NAMES.get(name, name)}: {what}")
    if not said:
        return ()
    return ("memory terms estimated from real start-up logs (docs/memory.md), which the engine measures at "
            f"start-up: {'; '.join(said)}",)


def fit(sc: Scenario) -> FitReport:
    parts, skipped = engines.each(sc, lambda e: e.fit(sc))
    if not parts:
        raise engines.none_left(skipped, "fit")
    notes = budget_notes(sc) + estimate_note(parts) + tuple(n for p in parts.values() for n in p.notes)
    return FitReport(sc, parts, notes, tuple(skipped.items()))
