"""`hybridplan prefix`: how much of a shared prefix a later request reuses on each engine, for one shared
length or a sweep of them."""

from __future__ import annotations


from hybridplan import engines
from hybridplan.errors import PlanError
from hybridplan.reports import SCHEMA_VERSION
from hybridplan.scenario import Scenario
from hybridplan.spec import ModelSpec
from hybridplan.records import frozen

#: the most points a sweep computes (a table, or a plot, of more says no more)
MAX_SWEEP_POINTS = 2_000
#: the most checkpoints a sweep lists over all its points
MAX_SWEEP_CHECKPOINTS = 2_000_000


@frozen
class PrefixReport:
    spec: ModelSpec
    shared: int
    private: int
    parts: dict[str, engines.PrefixPart]
    skipped: tuple[tuple[str, str], ...] = ()

    def entries(self):
        """(row label, what its grid is called, reuse) for every engine and mode."""
        return [e for p in self.parts.values() for e in p.entries()]

    def to_dict(self) -> dict:
        d: dict = {"schema_version": SCHEMA_VERSION, "model": self.spec.name, "shared": self.shared,
                   "private": self.private, "prompt": self.shared + self.private}
        d.update((name, p.to_dict()) for name, p in self.parts.items())
        if self.skipped:
            d["skipped"] = dict(self.skipped)
        return d


def prefix(sc: Scenario, shared: int, private: int) -> PrefixReport:
    if shared < 0 or private < 0 or shared + private <= 0:
        raise PlanError(f"--shared and --private must be ≥ 0 with a positive sum, got {shared} and {private}")
    parts, skipped = engines.each(sc, lambda e: e.prefix(sc, shared, shared + private))
    if not parts:
        raise engines.none_left(skipped, "model")
    return PrefixReport(sc.spec, shared, private, parts, tuple(skipped.items()))


@frozen
class SweepReport:
    """Reuse as the shared length grows: a step function with a step at each checkpoint."""

    spec: ModelSpec
    private: int
    points: tuple[PrefixReport, ...]

    def series(self) -> dict[str, list[tuple[int, int, int]]]:
        """engine/mode label → [(shared, reused by the 2nd request, reused by the 3rd and later)]."""
        out: dict[str, list[tuple[int, int, int]]] = {}
        for p in self.points:
            for label, grid_name, r in p.entries():
                out.setdefault(f"{label} ({grid_name} {r.grid})", []).append(
                    (p.shared, r.reused_tokens, r.later_reused_tokens))
        return out

    def to_dict(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, "model": self.spec.name, "private": self.private,
                "points": [p.to_dict() for p in self.points]}


def parse_sweep(text: str) -> range:
    try:
        a, b, step = (int(x) for x in text.split(":"))
    except ValueError:
        raise PlanError(f"--sweep takes A:B:STEP in tokens, got {text!r}") from None
    if a < 0 or b < a or step <= 0:
        raise PlanError(f"--sweep needs 0 ≤ A ≤ B and STEP > 0, got {text!r}")
    if (b - a) // step > MAX_SWEEP_POINTS:
        raise PlanError(f"--sweep {text} has more than {MAX_SWEEP_POINTS:,} points")
    return range(a, b + 1, step)


def prefix_sweep(sc: Scenario, sweep: str, private: int) -> SweepReport:
    points: list[PrefixReport] = []
    listed = 0
    for n in parse_sweep(sweep):
        if n + private > 0:
            points.append(prefix(sc, n, private))
            listed += sum(len(r.checkpoints) for _, _, r in points[-1].entries())
            if listed > MAX_SWEEP_CHECKPOINTS:
                raise PlanError(f"--sweep {sweep} with {private:,} private tokens would list more than "
                                f"{MAX_SWEEP_CHECKPOINTS:,} checkpoints: sweep shorter prompts or fewer steps")
    return SweepReport(sc.spec, private, tuple(points))
