"""PNG plots (the ``plot`` extra). Each takes a finished report; matplotlib is imported only here."""

from __future__ import annotations

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


def crossover_plot(r: CrossoverReport, path: Path) -> None:
    plt = _pyplot()
    ctxs = sorted({round(2 ** (6 + 15 * i / 300)) for i in range(301)})
    fig, ax = plt.subplots(figsize=(8.5, 5.2))
    ax.plot(ctxs, [r.ref_fp.total_at(c) / GiB for c in ctxs], color="tab:red", lw=2, label=f"{r.ref.name} (KV)")
    colors = ("tab:blue", "tab:green", "tab:purple", "tab:orange")
    lines = []
    for i, (row, fp) in enumerate(zip(r.rows, r.row_fps)):
        c = colors[i % len(colors)]
        ax.plot(ctxs, [fp.total_at(x) / GiB for x in ctxs], color=c, lw=2 if i == 0 else 1.3,
                ls="-" if i == 0 else "--", label=f"{r.spec.name}, SSM {row.ssm_dtype}: state + KV")
        ax.axhline(fp.state_bytes / GiB, color=c, ls=":", lw=1, label=f"{r.spec.name}, SSM {row.ssm_dtype}: state")
        for x, marker, what in ((row.state_only, "s", "state"), (row.total, "o", "state + KV")):
            if x is not None:
                ax.plot([float(x)], [float(r.ref_fp.total_at(x)) / GiB], marker, color=c, mec="black", ms=7, zorder=5)
                lines.append(f"{row.ssm_dtype:>9}  {what:<10} {float(x):>10,.2f}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
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


def prefix_plot(sw: SweepReport, path: Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    for label, pts in sw.series().items():
        (line,) = ax.step([p[0] for p in pts], [p[1] for p in pts], where="post", label=f"{label}: 2nd request")
        ax.step([p[0] for p in pts], [p[2] for p in pts], where="post", ls="--", color=line.get_color(), alpha=0.7,
                label=f"{label}: 3rd and later")
    xs = [p.shared for p in sw.points]
    ax.plot(xs, xs, color="grey", lw=0.8, ls=":", label="whole shared prefix")
    ax.set_xlabel("shared prefix (tokens)")
    ax.set_ylabel("tokens reused")
    ax.set_title(f"{sw.spec.name}: prefix reuse, {sw.private:,} private tokens")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, path)
    plt.close(fig)
