"""The rich view of `replay`: one row per engine, mode and baseline, then what stood in the way of each."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group
from rich.text import Text

from hybridplan.render import Rows, _notes, _skipped, labelled

if TYPE_CHECKING:
    from hybridplan.reports.replay import ReplayReport


def _flops(x: float) -> str:
    for unit, scale in (("EFLOP", 1e18), ("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9)):
        if x >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.3g} FLOP"


def replay_view(r: ReplayReport) -> Group:
    rows = []
    for row in r.rows:
        run = row.run
        saved = f"{_flops(row.flops_saved)} ({100 * row.flops_saved / row.flops_total:.1f} %)" \
            if row.flops_total else "—"
        rows.append((row.label, f"{run.block:,}" if run.block > 1 else "—", f"{100 * run.hit_rate:.1f} %",
                     f"{run.with_hit:,} / {run.requests:,}", f"{run.computed_tokens:,}", saved,
                     f"{run.peak_states:,}" if row.engine != "baseline" else "—",
                     f"{run.peak_blocks:,}" if row.engine != "baseline" else "—",
                     f"{run.evictions:,}", f"{len(run.refused):,}"))
    n = r.rows[0].run.requests if r.rows else 0
    t = Rows(("cache", "block / grid", "token hit rate", "requests with a hit", "prompt tokens computed",
              "prefill FLOPs saved", "states held (peak)", "blocks / KV tokens held (peak)", "evictions",
              "refused"), rows,
             title=f"{r.spec.name}: {n:,} request{'' if n == 1 else 's'} of {r.trace}, {r.settings.concurrency:,} in "
                   "flight",
             caption="token hit rate: prompt tokens reused ÷ prompt tokens; states held: Mamba states cached at "
                     "the peak; blocks: vLLM blocks (SGLang: KV tokens) held by the cache and running requests; "
                     "ideal cache: resumes anywhere, no memory limit; attention layers alone: the same model's "
                     "KV in 16-token blocks at the same memory")
    parts: list = [t]
    for row in r.rows:
        if row.diagnostics:
            parts.append(Text(f"{row.label}: why requests that share a prefix reused less", style="bold"))
            parts.extend(labelled("  ·", d) for d in row.diagnostics)
    parts += _skipped(r.skipped)
    parts += _notes(r.notes)
    return Group(*parts)
