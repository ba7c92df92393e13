"""PNG plots (the ``plot`` extra). Each takes a finished report; matplotlib is imported only here."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from hybridplan.errors import PlanError
from hybridplan.units import GiB

if TYPE_CHECKING:
    from hybridplan.reports.crossover import CrossoverReport
    from hybridplan.reports.prefix import SweepReport


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlanError("--plot needs matplotlib: pip install 'hybridplan[plot]'") from None
    return plt


def _save(fig, path: Path) -> None:
    try:
        fig.savefig(path, dpi=130, bbox_inches="tight")
    except OSError as exc:
        raise PlanError(f"cannot write {path}: {exc.strerror}") from None


def _axis_start(r: CrossoverReport) -> float:
    """Where the context axis starts: 64 tokens, or a power of two below the first crossover left of that."""
    xs = [float(x) for row in r.rows for x in (row.state_only, row.total) if x is not None and x > 0]
    first = min(xs, default=64.0)
    return float(2 ** min(6, math.floor(math.log2(first)) - 1)) if first < 64 else 64.0


def crossover_plot(r: CrossoverReport, path: Path) -> None:
    plt = _pyplot()
    lo = _axis_start(r)
    ctxs = sorted({max(1, round(lo * 2 ** (math.log2(2 ** 21 / lo) * i / 300))) for i in range(301)})
    fig, ax = plt.subplots(figsize=(8.5, 5.2))
    ref_label = f"{r.ref.name} (KV + state)" if r.ref_fp.state_bytes else f"{r.ref.name} (KV)"
    ax.plot(ctxs, [r.ref_fp.total_at(c) / GiB for c in ctxs], color="tab:red", lw=2, label=ref_label)
    colors = ("tab:blue", "tab:green", "tab:purple", "tab:orange")
    lines = []
    for i, (row, fp) in enumerate(zip(r.rows, r.row_fps)):
        c = colors[i % len(colors)]
        ax.plot(ctxs, [fp.total_at(x) / GiB for x in ctxs], color=c, lw=2 if i == 0 else 1.3,
                ls="-" if i == 0 else "--", label=f"{r.spec.name}, SSM {row.ssm_dtype}: state + KV")
        ax.axhline(fp.state_bytes / GiB, color=c, ls=":", lw=1, label=f"{r.spec.name}, SSM {row.ssm_dtype}: state")
        for x, marker, what in ((row.state_only, "s", "state"), (row.total, "o", "state + KV")):
            if x is None:
                continue
            lines.append(f"{row.ssm_dtype:>9}  {what:<10} {float(x):>10,.2f}")
            if x >= lo:  # a crossover at 0 (the reference larger from the start) has no place on a log axis
                ax.plot([float(x)], [float(r.ref_fp.total_at(x)) / GiB], marker, color=c, mec="black", ms=7,
                        zorder=5)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlim(lo, ctxs[-1])
    ax.set_xlabel("context (tokens)")
    ax.set_ylabel("GiB per sequence (one rank)")
    ax.set_title(f"{r.spec.name} vs {r.ref.name}: memory per sequence, TP {r.tp}")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7.5, loc="upper left")
    if lines:
        ax.text(0.98, 0.03, "crossovers (tokens)\n" + "\n".join(lines), transform=ax.transAxes, ha="right",
                va="bottom", family="monospace", fontsize=7.5,
                bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.9, "edgecolor": "0.7"})
    _save(fig, path)
    plt.close(fig)


#: line styles that keep series on top of each other visible
_STYLES = (("-", 2.6), ("--", 2.0), (":", 2.4), ("-.", 1.6))


def prefix_plot(sw: SweepReport, path: Path) -> None:
    """One panel per engine, so that a series at zero (no reuse) is never hidden under another engine's."""
    plt = _pyplot()
    series = sw.series()
    engines = sorted({label.split()[0] for label in series}, key=lambda e: e != "vLLM")
    fig, axes = plt.subplots(len(engines), 1, figsize=(8, 3.2 * len(engines) + 1), sharex=True, squeeze=False)
    xs = [p.shared for p in sw.points]
    for ax, engine in zip(axes[:, 0], engines):
        mine = [(label, pts) for label, pts in series.items() if label.split()[0] == engine]
        for i, (label, pts) in enumerate(mine):
            ls, lw = _STYLES[i % len(_STYLES)]
            never = " (never reuses)" if not any(p[1] or p[2] for p in pts) else ""
            (line,) = ax.step([p[0] for p in pts], [p[1] for p in pts], where="post", ls=ls, lw=lw,
                              label=f"{label}{never}: 2nd request")
            ax.step([p[0] for p in pts], [p[2] for p in pts], where="post", ls=ls, lw=max(lw - 1, 0.8),
                    color=line.get_color(), alpha=0.55, label=f"{label}: 3rd and later")
        ax.plot(xs, xs, color="grey", lw=0.8, ls=":", label="whole shared prefix")
        ax.set_ylabel("tokens reused")
        ax.set_title(engine, fontsize=9, loc="left")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7.5)
    axes[-1, 0].set_xlabel("shared prefix (tokens)")
    fig.suptitle(f"{sw.spec.name}: prefix reuse, {sw.private:,} private tokens")
    _save(fig, path)
    plt.close(fig)


def replay_plot(r, path: Path) -> None:
    """`replay --plot`: the token hit rate of each cache against the budget or the block."""
    if not r.sweep:
        raise PlanError("--plot needs a sweep: give --plot-over budget or block")
    plt = _pyplot()
    over, series = r.sweep
    fig, ax = plt.subplots(figsize=(8, 4.6))
    for i, (label, pts) in enumerate(series):
        ls, lw = _STYLES[i % len(_STYLES)]
        ax.plot([p[0] for p in pts], [100 * p[1] for p in pts], marker="o", ls=ls, lw=lw, label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("budget (× the one given)" if over == "budget" else "vLLM block (tokens, --block-size)")
    ax.set_ylabel("token hit rate (%)")
    ax.set_title(f"{r.spec.name}: prefix-cache hit rate, {r.trace}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7.5)
    _save(fig, path)
    plt.close(fig)


def speed_plot(r, path: Path) -> None:
    """`speed --plot`: predicted decode tokens/s against the batch, under the roofline of the same step (its
    bytes at the datasheet's full bandwidth, its FLOPs at the full tensor peak)."""
    from hybridplan.speed.model import tensor_peak

    plt = _pyplot()
    xs = [st.step.batch for st in r.steps]
    bw = r.gpu.hbm_gbps * 1e9
    mem = [st.step.tokens / (st.step.total("bytes") / bw) for st in r.steps]
    peak = tensor_peak(r.gpu, r.steps[0].step.tensor_dtype)
    comp = [st.step.tokens / ((st.step.total("flops") + st.step.total("scan_flops")) / peak) for st in r.steps]
    fig, ax = plt.subplots(figsize=(8, 4.6))
    ax.plot(xs, [st.step.tokens / st.seconds for st in r.steps], marker="o", lw=2, label="predicted")
    ax.plot(xs, [min(m, c) for m, c in zip(mem, comp)], color="grey", ls="--", lw=1,
            label=f"roofline ({r.gpu.hbm_gbps:,.0f} GB/s, {peak / 1e12:,.0f} TFLOP/s)")
    ax.axvline(r.bench.running, color="tab:red", ls=":", lw=1, label=f"running in the benchmark ({r.bench.running})")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch (sequences a decode step)")
    ax.set_ylabel("output tokens/s, one rank")
    ax.set_title(f"{r.sc.spec.name} on {r.gpu.key}, TP {r.sc.tp}: decode at {r.ctx:,} tokens of context")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7.5)
    _save(fig, path)
    plt.close(fig)
