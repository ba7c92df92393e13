"""`hybridplan fit`: how many requests of a context each engine holds in a memory budget, whether it starts
with the flags given, and the command that starts it with those figures (hybridplan/cmdline.py)."""

from __future__ import annotations

from importlib import import_module
from pathlib import Path
from typing import Any

from msgspec import Struct

from hybridplan import engines
from hybridplan.cmdline import Command, sglang_command, vllm_command
from hybridplan.engines.common import Waterfall
from hybridplan.errors import PlanError, Refused
from hybridplan.reports import SCHEMA_VERSION
from hybridplan.scenario import Scenario

#: the engines as the verdict names them
_ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang"}


class Refusal(Struct, frozen=True):
    """An engine that refuses to start with these settings (``Refused``), in its own words, with the memory it
    would have had where the budget was not given: its verdict, while the other engine still answers."""

    engine: str
    reason: str
    memory: Waterfall | None = None
    cache_label: str = ""
    factor_label: str = ""

    @property
    def starts(self) -> bool:
        return False

    @property
    def problem(self) -> str:
        return self.reason if self.reason.startswith(self.engine.split()[0]) else f"{self.engine}: {self.reason}"

    @property
    def flags(self) -> str:
        return "—"

    @property
    def notes(self) -> tuple[str, ...]:
        return ()

    def to_dict(self) -> dict:
        d: dict = {"starts": False, "problem": self.problem, "refused": self.reason}
        if self.memory is not None:
            d["memory"] = self.memory.to_dict()
        return d


def _refusal(sc: Scenario, name: str, exc: Refused) -> Refusal:
    """``name``'s refusal, with its memory waterfall (the rank's) where the budget was not given."""
    rel = sc.vllm.release if name == "vllm" else sc.sglang.release
    water, mem = None, import_module(f"hybridplan.engines.{name}.memory")
    if sc.budget.kv_budget is None:
        try:
            water = mem.memory(sc)
        except PlanError:
            water = None
    return Refusal(f"{_ENGINE_NAMES[name]} {rel.version}", str(exc), water, mem.CACHE_LABEL, mem.FACTOR_LABEL)


class FitReport(Struct, frozen=True):
    sc: Scenario
    parts: dict[str, engines.FitPart]
    notes: tuple[str, ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()
    #: the model as the user named it, and the Hub revision they asked for
    model_ref: str | None = None
    revision: str | None = None

    @property
    def verdict_ok(self) -> bool:
        return bool(self.parts) and all(p.starts for p in self.parts.values())

    @property
    def problems(self) -> list[str]:
        return [p.problem for p in self.parts.values() if p.problem]

    @property
    def verdict(self) -> str:
        """The summary line: it starts, or which engines do not start (and which do)."""
        if self.verdict_ok:
            return "starts with these settings"
        names = {n: _ENGINE_NAMES.get(n, n) for n in self.parts}
        stop = [names[n] for n, p in self.parts.items() if not p.starts]
        go = [names[n] for n, p in self.parts.items() if p.starts]
        if len(stop) == 1 and not go:
            return "will not start"
        if not go:
            return f"{' and '.join(stop)} will not start"
        return f"{' and '.join(stop)} will not start; {' and '.join(go)} starts with these settings"

    def commands(self) -> dict[str, Command | None]:
        """Per engine the command that starts it with the figures shown (None where the weights leave nothing)."""
        from hybridplan.engines.common import Shortfall

        model = engine_model(self.model_ref, self.sc)
        out: dict[str, Command | None] = {}
        for name, p in self.parts.items():
            if isinstance(p, Shortfall) or (isinstance(p, Refusal) and name == "vllm"):
                out[name] = None
            elif name == "vllm":
                v: Any = p  # vLLM's part: its Fit (with the mode chosen and the refusal, if any)
                f = v.chosen
                n = f.max_num_seqs if f.starts else (f.largest_max_num_seqs or 0)
                out[name] = vllm_command(
                    self.sc,
                    model,
                    mode=v.default_mode,
                    max_num_seqs=n,
                    revision=self.revision,
                    lowered=not f.starts and v.refusal is None,
                )
            else:
                out[name] = sglang_command(self.sc, model, revision=self.revision)
        return out

    def targets(self, gpus_per_node: int = 8) -> dict:
        """Per engine that starts, what `--emit` writes down (hybridplan/deploy.py ``Target``): its command, its
        release, its layout, and the figures predicted for it, for the files' headers."""
        from importlib import import_module

        from hybridplan.deploy import Target

        sc, out = self.sc, {}
        for name, cmd in self.commands().items():
            part = self.parts[name]
            if cmd is None or not part.starts:
                continue
            rel = sc.vllm.release if name == "vllm" else sc.sglang.release
            coupled = not import_module(f"hybridplan.engines.{name}.deploy").dp_replicas(sc)
            out[name] = Target(
                name,
                rel,
                cmd,
                sc.spec.name,
                tp=sc.tp,
                pp=sc.pp,
                dp=sc.dp,
                dp_coupled=coupled,
                figures=tuple(f"predicted: {line}" for line in _logs(part)),
                gpus_per_node=gpus_per_node,
            )
        return out

    def flags(self) -> dict[str, str]:
        return {name: "—" if c is None else str(c) for name, c in self.commands().items()}

    def to_dict(self) -> dict:
        sc = self.sc
        d: dict = {
            "schema_version": SCHEMA_VERSION,
            "model": sc.spec.name,
            "ctx": sc.ctx,
            "tp": sc.tp,
            "ok": self.verdict_ok,
            "flags": self.flags(),
            "notes": list(self.notes),
            "commands": {
                name: None if c is None else {"env": list(c.env), "argv": list(c.argv), "notes": list(c.notes)}
                for name, c in self.commands().items()
            },
        }
        if self.skipped:
            d["skipped"] = dict(self.skipped)
        d.update((name, p.to_dict()) for name, p in self.parts.items())
        return d


def _logs(part) -> list[str]:
    """The start-up lines an engine is predicted to print (the figures a deployment file came from)."""
    chosen = getattr(part, "chosen", None)
    if chosen is not None:
        return list(chosen.to_dict().get("logs", ()))
    logs = getattr(part, "logs", ())
    return list(logs() if callable(logs) else logs)


def budget_notes(sc: Scenario) -> tuple[str, ...]:
    """What the budget rests on, where it was not given."""
    b = sc.budget
    if b.kv_budget is not None:
        return ()
    notes = [b.gpu_note] if b.gpu_note else []
    if b.gpu is not None:
        from hybridplan.gpus import gpu

        g = gpu(b.gpu)
        if g.approximation:
            notes.append(g.approximation)
        if g.unified:
            notes.append(
                f"{g.name} shares its memory with the host: vLLM reads free memory from the host's "
                "available memory (vllm/utils/mem_utils.py), so whatever the host takes during start-up "
                "counts as non-torch; real logs came out up to 3.2 GiB below this estimate (docs/memory.md)"
            )
    return tuple(notes)


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
    return (
        "memory terms estimated from real start-up logs (docs/memory.md), which the engine measures at "
        f"start-up: {'; '.join(said)}",
    )


def engine_model(ref: str | None, sc: Scenario) -> str:
    """The model as an engine takes it: a Hub id or a folder as the user typed it; a shipped name as the Hub id
    it comes from; a config.json as its folder."""
    from hybridplan import hub

    if ref is not None:
        path = Path(ref).expanduser()
        if path.is_dir():
            return ref
        if path.is_file() and path.name == "config.json":
            return str(path.parent)
        if not path.exists() and hub.is_hub_id(ref):
            return ref
    source = sc.spec.source
    if source and hub.is_hub_id(source) and not Path(source).exists():
        return source
    return ref or sc.spec.name


def fit(sc: Scenario, model_ref: str | None = None, revision: str | None = None) -> FitReport:
    def one(e: engines.Engine) -> engines.FitPart:
        try:
            return e.fit(sc)
        except Refused as exc:  # the engine's verdict: the other engine still answers
            return _refusal(sc, e.name, exc)

    parts, skipped = engines.each(sc, one)
    if not parts:
        raise engines.none_left(skipped, "fit")
    notes = budget_notes(sc) + estimate_note(parts) + tuple(n for p in parts.values() for n in p.notes)
    report = FitReport(sc, parts, notes, tuple(skipped.items()), model_ref, revision)
    said = tuple(n for c in report.commands().values() if c is not None for n in c.notes)
    return FitReport(sc, parts, notes + said, tuple(skipped.items()), model_ref, revision) if said else report
