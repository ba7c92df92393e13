"""The rich view of `plan`: the plans that start and hold the target with their commands, then why fewer GPUs
will not do (hybridplan/reports/plan.py builds the report)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group
from rich.text import Text

from hybridplan.render import Rows, _command, note

if TYPE_CHECKING:
    from hybridplan.plan import Rejection
    from hybridplan.reports.plan import PlanReport


def _range_notes(plans) -> list[str]:
    """The held-out P10–P90 range of tok/s/GPU, once per regime the plans fall in (hybridplan/speed/ranges.py)."""
    seen: dict[tuple, list[str]] = {}
    for i, p in enumerate(plans):
        r = p.rate_range
        if r is not None:
            seen.setdefault((r.regime, r.p10, r.p90, r.rows, r.pooled, r.set), []).append(str(i + 1))
    out = []
    for (regime, lo, hi, rows, pooled, which), ids in seen.items():
        where = f"{which} models, all regimes" if pooled else f"{which} models, {regime}"
        out.append(
            f"tok/s/GPU range (plan{'s' * (len(ids) > 1)} {', '.join(ids)}): P10–P90 {lo:.2f}×–{hi:.2f}× the figure, from "
            f"{rows} held-out published runs ({where}; docs/speed.md)"
        )
    return out


def plan_view(r: PlanReport, *, exact: bool = False):
    res = r.result
    sc = res.base
    head = Text.assemble(
        (sc.spec.name, "bold"),
        f"  ·  {res.concurrency:,} requests of {sc.ctx:,} tokens  ·  "
        f"{sc.budget.gpu or 'GPU'}  ·  up to {res.max_gpus} GPUs",
    )
    parts: list = [head]
    if sc.budget.gpu_note:
        parts.append(note(sc.budget.gpu_note))
    if not res.plans:
        parts.append(Text(f"no layout of up to {res.max_gpus} GPUs starts and holds the target", style="bold"))
    else:
        rows = [
            (
                str(i + 1),
                p.layout.engine,
                f"{p.layout.gpus}",
                p.layout.label(),
                p.variant.label(),
                f"{p.holds:,.1f}",
                f"{100 * p.margin:+.0f} %",
                "—" if p.tokens_per_s_per_gpu is None else f"{p.tokens_per_s_per_gpu:,.0f}",
            )
            for i, p in enumerate(res.plans)
        ]
        parts.append(
            Rows(
                ("#", "engine", "GPUs", "layout", "cache settings", "holds", "margin", "tok/s/GPU"),
                rows,
                title="Plans that start and hold the target, fewest GPUs first",
                left=(1, 3, 4),
            )
        )
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
                f" and {len(rs) - 6} more" if len(rs) > 6 else ""
            )
            lines.append((f"{gpus} GPU{'s' * (gpus != '1')}", k, labels))
        parts.append(
            Rows(("GPUs", "why", "layouts"), lines, title="Why fewer GPUs will not do", left=(0, 1, 2), prose=(2,))
        )
        # the engine's own words for each cause: the layout of it nearest the best plan's count
        examples: dict[str, Rejection] = {}
        for _, k, rs in why:
            examples[k] = max(rs, key=lambda x: (x.fitted, x.layout.gpus))
        for x in sorted(examples.values(), key=lambda x: -x.layout.gpus):
            parts.append(
                note(
                    f"e.g. {x.layout.engine} {x.layout.label()} on {x.layout.gpus} "
                    f"GPU{'s' * (x.layout.gpus > 1)}: {x.reason}"
                )
            )
    if res.plans:
        parts.append(
            note(
                "tok/s/GPU: decode output tokens/s per GPU with the target's requests running, each at "
                "the context (hybridplan speed's step model; plans within a 10 % step of margin rank by "
                "it)"
            )
        )
        parts += [note(n) for n in _range_notes(res.plans)]
    parts += [note(f"{what} not tried: {why}") for what, why in res.skipped]
    parts.append(
        note(
            f"{res.tried} layouts tried, from 1 GPU up: every split of each count into TP × PP × DP (any "
            "TP the engine takes for the model's heads, groups and experts, PP up to its layers), experts "
            "sliced or dealt whole; per layout the model's and fp8 KV, the default and bfloat16 SSM state, "
            "vLLM's default Mamba cache mode and none; the commands start the engines with the figures "
            "shown: `hybridplan fit ... -- COMMAND` checks one"
        )
    )
    return Group(*parts)
