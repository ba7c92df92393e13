"""`hybridplan prefix`: how much of a shared prefix a later request reuses on each engine, for one shared
length or a sweep of them.

It is a replay of the trace it describes, by the loop and through the policies `replay` runs
(hybridplan/replay/loop.py ``replay``, hybridplan/reports/replay.py ``policies``), with pools that never evict,
so that the geometry alone decides: three requests, one after another, each ``shared`` tokens in common then
``private`` tokens of its own, each generating one token. The first request's checkpoints are where its cache
holds states once it has run (``held_states``); "2nd" and "3rd+" are what the second and the third request
reuse (the third also finds what the second left where it branched off)."""

from __future__ import annotations

from collections.abc import Callable

from msgspec import Struct

from hybridplan import engines
from hybridplan.engines.common import Reuse
from hybridplan.errors import NotServed, PlanError
from hybridplan.replay.loop import Policy, replay
from hybridplan.replay.settings import ReplaySettings
from hybridplan.replay.trace import MAX_PROMPT, Synthetic
from hybridplan.reports import SCHEMA_VERSION
from hybridplan.scenario import Scenario
from hybridplan.spec import ModelSpec

#: the most points a sweep computes (a table, or a plot, of more says no more)
MAX_SWEEP_POINTS = 2_000
#: the most blocks (vLLM) or grid points (SGLang) one request is replayed over, on each policy: the replay's
#: work, and the checkpoints listed (which sit on them), grow with it
MAX_UNITS = 100_000
#: the most blocks or grid points a sweep replays over all its points and policies
MAX_SWEEP_UNITS = 2_000_000
#: the trace: the first request leaves states, the second reuses them, the third also finds the second's
REQUESTS = 3
#: the tokens each request generates: one, the least a request asks for (vLLM's max_tokens ≥ 1); both engines'
#: rules write no state for it (its KV is never computed), so the checkpoints are the prompt's own
OUTPUT = 1


#: `prefix --csv`: a row per shared length and engine row; "2nd" (reused_tokens, computed_tokens) and "3rd+"
#: (later_…) as the table's columns; grid_tokens: the row's block size (vLLM) or state grid (SGLang)
CSV_COLUMNS = (
    "shared_tokens",
    "private_tokens",
    "prompt_tokens",
    "engine",
    "row",
    "grid",
    "grid_tokens",
    "reused_tokens",
    "computed_tokens",
    "later_reused_tokens",
    "later_computed_tokens",
)


class PrefixReport(Struct, frozen=True):
    spec: ModelSpec
    shared: int
    private: int
    parts: dict[str, engines.PrefixPart]
    skipped: tuple[tuple[str, str], ...] = ()

    def entries(self):
        """(row label, what its grid is called, reuse) for every engine and mode."""
        return [e for p in self.parts.values() for e in p.entries()]

    csv_columns = CSV_COLUMNS

    def csv_rows(self) -> list[dict]:
        """One row per engine row (``CSV_COLUMNS``), as the table shows them."""
        out = []
        for engine, part in self.parts.items():
            for label, grid_name, r in part.entries():
                out.append(
                    {
                        "shared_tokens": self.shared,
                        "private_tokens": self.private,
                        "prompt_tokens": self.shared + self.private,
                        "engine": engine,
                        "row": label,
                        "grid": grid_name,
                        "grid_tokens": r.grid,
                        "reused_tokens": r.reused_tokens,
                        "computed_tokens": r.computed_tokens,
                        "later_reused_tokens": r.later_reused_tokens,
                        "later_computed_tokens": r.later_computed_tokens,
                    }
                )
        return out

    def to_dict(self) -> dict:
        d: dict = {
            "schema_version": SCHEMA_VERSION,
            "model": self.spec.name,
            "shared": self.shared,
            "private": self.private,
            "prompt": self.shared + self.private,
        }
        d.update((name, p.to_dict()) for name, p in self.parts.items())
        if self.skipped:
            d["skipped"] = dict(self.skipped)
        return d


class Lanes(Struct, frozen=True):
    """The replay policies of a scenario's engines and modes (the attention-only baseline left out), built once
    for every point of a sweep, and the engines skipped with the reason."""

    chosen: tuple[tuple[str, Policy, dict], ...]
    skipped: dict[str, str]


def lanes(sc: Scenario) -> Lanes:
    from hybridplan.reports.replay import policies

    chosen, skipped = policies(sc, ReplaySettings(per_request=False), unbounded=True)
    return Lanes(tuple(c for c in chosen if c[0] != "baseline"), skipped)


def trace(shared: int, private: int) -> list:
    """`prefix`'s three requests: ``shared`` tokens in common, then ``private`` of each one's own."""
    return list(Synthetic(shared=shared, users=REQUESTS, private=private, output=OUTPUT).requests())


def replayed(ln: Lanes, shared: int, private: int) -> dict[str, list[tuple[dict, Reuse]]]:
    """engine → (rules, reuse) for each of its policies over the three requests, each over an empty cache (one
    replay for all of them)."""
    reqs = trace(shared, private)
    prompt = shared + private
    mine = [(e, p.renewed(max_len=prompt + OUTPUT + 1), rules) for e, p, rules in ln.chosen]
    first: dict[str, list[int]] = {}

    def after(n: int) -> None:  # the first request has run: where its cache holds states
        if n == 1:
            first.update((p.label, p.cache.held_states(reqs[0])) for _, p, _ in mine)

    runs, _ = replay([p for _, p, _ in mine], reqs, 1, progress=after)
    out: dict[str, list[tuple[dict, Reuse]]] = {}
    for e, p, rules in mine:
        second, third = (o.reused for o in runs[p.label].outcomes[1:])
        reuse = Reuse(p.block, tuple(first[p.label]), second, prompt - second, third, prompt - third)
        out.setdefault(e, []).append((rules, reuse))
    return out


def _check_size(ln: Lanes, prompt: int) -> None:
    if prompt > MAX_PROMPT:
        raise PlanError(f"a prompt of {prompt:,} tokens: hybridplan replays requests of at most {MAX_PROMPT:,}")
    for _, p, _ in ln.chosen:
        if prompt // p.block > MAX_UNITS:
            raise PlanError(
                f"a {prompt:,}-token prompt spans {prompt // p.block:,} {p.block:,}-token blocks on "
                f"{p.label}: hybridplan replays at most {MAX_UNITS:,} a request: shorten the prompt"
            )


def prefix(sc: Scenario, shared: int, private: int, ln: Lanes | None = None) -> PrefixReport:
    if shared < 0 or private < 0 or shared + private <= 0:
        raise PlanError(f"--shared and --private must be ≥ 0 with a positive sum, got {shared} and {private}")
    ln = ln if ln is not None else lanes(sc)
    done: dict[str, list[tuple[dict, Reuse]]] = {}

    def rows(engine: str) -> list[tuple[dict, Reuse]]:  # replayed once an engine takes the prompt
        if engine in ln.skipped:  # no policy replays it (after the engine's own refusals, which come first)
            raise NotServed(ln.skipped[engine])
        if not done:
            _check_size(ln, shared + private)
            done.update(replayed(ln, shared, private))
        if engine not in done:
            raise NotServed(f"no {engine} policy replays {sc.spec.name}")
        return done[engine]

    parts, skipped = engines.each(sc, lambda e: e.prefix(sc, shared + private, lambda: rows(e.name)))
    if not parts:
        raise engines.none_left(skipped, "model")
    modes = tuple((k, v) for k, v in ln.skipped.items() if k not in engines.NAMES)  # a mode the engine refuses
    return PrefixReport(sc.spec, shared, private, parts, tuple(skipped.items()) + modes)


class SweepReport(Struct, frozen=True):
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
                    (p.shared, r.reused_tokens, r.later_reused_tokens)
                )
        return out

    csv_columns = CSV_COLUMNS

    def csv_rows(self) -> list[dict]:
        """One row per shared length and engine row (``CSV_COLUMNS``)."""
        return [r for p in self.points for r in p.csv_rows()]

    def to_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "model": self.spec.name,
            "private": self.private,
            "points": [p.to_dict() for p in self.points],
        }


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


def prefix_sweep(
    sc: Scenario, sweep: str, private: int, progress: Callable[[int, int], None] | None = None
) -> SweepReport:
    """``prefix`` at every shared length of ``sweep``; ``progress(done, total)`` after each point."""
    shared = [n for n in parse_sweep(sweep) if n + private > 0]
    ln = lanes(sc)
    units = sum((n + private) // p.block for n in shared for _, p, _ in ln.chosen)
    if units > MAX_SWEEP_UNITS:
        raise PlanError(
            f"--sweep {sweep} with {private:,} private tokens would replay {units:,} blocks (vLLM) and "
            f"grid points (SGLang), more than {MAX_SWEEP_UNITS:,}: sweep shorter prompts or fewer steps"
        )
    points = []
    for n in shared:
        points.append(prefix(sc, n, private, ln))
        if progress is not None:
            progress(len(points), len(shared))
    return SweepReport(sc.spec, private, tuple(points))
