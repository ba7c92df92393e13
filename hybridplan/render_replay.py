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
        saved = (
            f"{_flops(row.flops_saved)} ({100 * row.flops_saved / row.flops_total:.1f} %)" if row.flops_total else "—"
        )
        rows.append(
            (
                row.label,
                f"{run.block:,}" if run.block > 1 else "—",
                f"{100 * run.hit_rate:.1f} %",
                f"{run.with_hit:,} / {run.requests:,}",
                f"{run.computed_tokens:,}",
                saved,
                f"{run.peak_states:,}" if row.engine != "baseline" else "—",
                f"{run.peak_blocks:,}" if row.engine != "baseline" else "—",
                f"{run.evictions:,}",
                f"{len(run.refused):,}",
            )
        )
    n = r.rows[0].run.requests if r.rows else 0
    t = Rows(
        (
            "cache",
            "block / grid",
            "token hit rate",
            "requests with a hit",
            "prompt tokens computed",
            "prefill FLOPs saved",
            "states held (peak)",
            "blocks / KV tokens held (peak)",
            "evictions",
            "refused",
        ),
        rows,
        title=f"{r.spec.name}: {n:,} request{'' if n == 1 else 's'} of {r.trace}, {r.settings.concurrency:,} in flight",
        caption="token hit rate: prompt tokens reused ÷ prompt tokens; states held: Mamba states cached at "
        "the peak; blocks: vLLM blocks (SGLang: KV tokens) held by the cache and running requests; "
        "ideal cache: resumes anywhere, no memory limit; attention layers alone: the same model's "
        "KV in 16-token blocks at the same memory",
    )
    parts: list = [t]
    if hosted := [row for row in r.rows if row.run.host is not None]:
        parts.append(host_table(hosted))
    gapped = [row for row in r.rows if row.gap is not None and row.gap.tokens]
    parts += [gap_table(row) for row in gapped]
    if gapped:
        parts.append(
            Text(
                "the gap: tokens the ideal cache reuses that the row does not, each cause lifted in this "
                "order on top of those above it (docs/replay.md); memory: a higher "
                "--gpu-memory-utilization, or a GPU with more, buys the blocks shown"
            )
        )
    for row in r.rows:
        if row.diagnostics:
            parts.append(Text(f"{row.label}: why requests that share a prefix reused less", style="bold"))
            parts.extend(labelled("  ·", d) for d in row.diagnostics)
    parts += _skipped(r.skipped)
    parts += _notes(r.notes)
    return Group(*parts)


def host_table(rows) -> Rows:
    """SGLang's host tier (HiCache) beside each row's device hits: what was read back from host and written to it."""
    out = []
    for row in rows:
        h, run = row.run.host, row.run
        out.append(
            (
                row.label,
                h["write_policy"],
                f"{h['host_kv_tokens']:,} / {h['host_states']:,}",
                f"{run.reused_tokens - h['host_hit_tokens']:,}",
                f"{h['host_hit_tokens']:,}",
                f"{h['host_hit_requests']:,}",
                f"{h['written_tokens']:,} / {h['written_states']:,}",
                f"{h['host_evicted_tokens']:,} / {h['host_evicted_states']:,}",
            )
        )
    return Rows(
        (
            "cache",
            "write policy",
            "host pools",
            "reused from device",
            "loaded from host",
            "host hits",
            "written to host",
            "host evictions",
        ),
        out,
        title="the host tier (SGLang HiCache)",
        caption="host pools, written, evictions: KV tokens / Mamba states; reused and loaded: prompt "
        "tokens; host hits: requests; written to host: backups per --hicache-write-policy "
        "(write_through at a node's first insert, write_through_selective at its second, "
        "write_back when the device evicts it); a host hit is loaded back into the device pools "
        "before the request runs",
    )


def gap_table(row) -> Rows:
    """One row's gap to the ideal cache, cause by cause in the order they were lifted, with what recovers each
    (replayed) — the causes that cost tokens, and eviction wherever the row evicted."""
    from hybridplan.reports.replay import CAUSE_TEXT

    g = row.gap
    lines = []
    for c in g.causes:
        if not c.tokens and not (c.name == "eviction" and row.run.evictions):
            continue
        fix = (
            "; ".join(f"{ch}: {100 * h:.1f} %" for ch, h in _best(c.recover))
            or c.note
            or ("tried, none raises the rate: " + ", ".join(c.tried) if c.tried else "—")
        )
        lines.append((CAUSE_TEXT[c.name], f"{c.tokens:,}", f"{100 * c.share:.1f} %", fix))
    lines.append(("gap to the ideal cache", f"{g.tokens:,}", "100.0 %", ""))
    return Rows(
        ("cause", "tokens", "share of the gap", "what recovers it (replayed hit rate)"),
        lines,
        title=f"{row.label}: {g.reused_tokens:,} tokens reused, the ideal cache {g.ideal_tokens:,}",
        left=(0, 3),
        prose=(0, 3),
        sections=(len(lines) - 1,),
    )


def _best(recover):
    """Per flag, the change that raises the rate most (the first tried of equals: 2× the memory before 8×), best
    first."""
    seen: dict[str, tuple[str, float]] = {}
    for ch, h in recover:
        seen.setdefault(ch.split(" ", 1)[0], (ch, h))
    return tuple(seen.values())
