"""`hybridplan plan`: the best few ways to serve a model at a context and concurrency on one GPU type, each
with the command that starts it (built as `fit` builds its commands, hybridplan/cmdline.py), and why the
layouts on fewer GPUs fail."""

from __future__ import annotations


from hybridplan.plan import Plan, PlanResult, Rejection
from hybridplan.records import frozen
from hybridplan.reports import SCHEMA_VERSION


@frozen
class PlanReport:
    result: PlanResult
    model_ref: str | None = None
    revision: str | None = None

    def command(self, p: Plan):
        from hybridplan.reports.fit import FitReport

        return FitReport(p.scenario, {p.layout.engine: p.part}, model_ref=self.model_ref,
                         revision=self.revision).commands()[p.layout.engine]

    @property
    def fewest(self) -> int | None:
        return min((p.layout.gpus for p in self.result.plans), default=None)

    def why_not_fewer(self) -> list[tuple[int, str, list[Rejection]]]:
        """(GPUs, reason kind, layouts) for the layouts on fewer GPUs than the best plan (all tried, if none)."""
        limit = self.fewest
        out: dict[tuple[int, str], list[Rejection]] = {}
        for r in self.result.rejected:
            if limit is not None and r.layout.gpus >= limit:
                continue
            out.setdefault((r.layout.gpus, kind(r.reason)), []).append(r)
        return [(g, k, rs) for (g, k), rs in sorted(out.items())]

    def default_notes(self) -> list[str]:
        """Which batch and chunk defaults the plans were sized with, once per engine (the first plan's)."""
        from hybridplan.engines.sglang import defaults as sglang_defaults
        from hybridplan.engines.vllm import defaults as vllm_defaults

        out: list[str] = []
        for engine, mod in (("vllm", vllm_defaults), ("sglang", sglang_defaults)):
            p = next((p for p in self.result.plans if p.layout.engine == engine), None)
            if p is not None and (n := mod.note(p.scenario)):
                out.append(n)
        return out

    @property
    def ok(self) -> bool:
        return bool(self.result.plans)

    def to_dict(self) -> dict:
        r = self.result
        plans = []
        for p in r.plans:
            c = self.command(p)
            plans.append({**p.to_dict(), "command": None if c is None else {"env": list(c.env), "argv": list(c.argv)}})
        return {"schema_version": SCHEMA_VERSION, "model": r.base.spec.name, "ctx": r.base.ctx,
                "concurrency": r.concurrency, "gpu": r.base.budget.gpu, "max_gpus": r.max_gpus,
                "layouts_tried": r.tried, "plans": plans, "rejected": [x.to_dict() for x in r.rejected]}


def kind(reason: str) -> str:
    """A rejection's reason, as a family of causes a person reads."""
    if reason.startswith("the weights do not fit"):
        return "the weights do not fit"
    if reason.startswith("holds at most"):
        return "too few requests fit (KV blocks or state slots)"
    if "Mamba cache blocks" in reason or "mamba" in reason.lower():
        return "too few Mamba state slots"
    if "refuses" in reason or "does not divide" in reason or "not supported" in reason:
        return "the engine refuses the layout"
    return "does not start"


def plan_view(r: PlanReport, *, exact: bool = False):
    from rich.console import Group
    from rich.text import Text

    from hybridplan.render import Rows, _command, note

    res = r.result
    sc = res.base
    head = Text.assemble((sc.spec.name, "bold"), f"  ·  {res.concurrency:,} requests of {sc.ctx:,} tokens  ·  "
                                                 f"{sc.budget.gpu or 'GPU'}  ·  up to {res.max_gpus} GPUs")
    parts: list = [head]
    if not res.plans:
        parts.append(Text(f"no layout of up to {res.max_gpus} GPUs starts and holds the target", style="bold"))
    else:
        rows = [(str(i + 1), p.layout.engine, f"{p.layout.gpus}", p.layout.label(), p.variant.label(),
                 f"{p.holds:,.1f}", f"{100 * p.margin:+.0f} %",
                 "—" if p.tokens_per_s_per_gpu is None else f"{p.tokens_per_s_per_gpu:,.0f}")
                for i, p in enumerate(res.plans)]
        parts.append(Rows(("#", "engine", "GPUs", "layout", "cache settings", "holds", "margin", "tok/s/GPU"), rows,
                          title="Plans that start and hold the target, fewest GPUs first", left=(1, 3, 4)))
        unpriced = {p.rate.why for p in res.plans if p.rate is not None and p.rate.why}
        parts += [note(w) for w in sorted(unpriced)]
        for i, p in enumerate(res.plans):
            parts.append(_command(f"{i + 1}:", r.command(p)))
        parts += [note(n) for n in r.default_notes()]
    why = r.why_not_fewer()
    if why:
        lines = []
        for gpus, k, rs in why:
            labels = ", ".join(f"{x.layout.engine} {x.layout.label()}" for x in rs[:6]) + (
                f" and {len(rs) - 6} more" if len(rs) > 6 else "")
            lines.append((f"{gpus} GPU{'s' * (gpus > 1)}", k, labels))
        parts.append(Rows(("GPUs", "why", "layouts"), lines, title="Why fewer GPUs will not do", left=(0, 1, 2),
                          prose=(2,)))
        first = next((x for _, _, rs in why for x in rs if kind(x.reason) != "the weights do not fit"), None)
        if first is not None:
            parts.append(note(f"e.g. {first.layout.engine} {first.layout.label()}: {first.reason}"))
    if res.plans:
        parts.append(note("tok/s/GPU: decode output tokens/s per GPU with the target's requests running, each at "
                          "the context (hybridplan speed's step model; plans within a 10 % step of margin rank by "
                          "it)"))
    parts.append(note(f"{res.tried} layouts tried (TP 1-8 × PP × DP, experts sliced or dealt whole; per layout "
                      "the model's and fp8 KV, the default and bfloat16 SSM state, vLLM's default Mamba cache mode "
                      "and none); the commands start the engines with the figures shown: `hybridplan fit ... -- "
                      "COMMAND` checks one"))
    return Group(*parts)
