"""PNG plots (the ``plot`` extra). Each takes a finished report; matplotlib is imported only here."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from hybridplan.errors import PlanError
from hybridplan.units import GiB

if TYPE_CHECKING:
    from hybridplan.plan import CrossoverReport


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
    ctxs = [2**k for k in range(6, 21)] + [1 << 21]
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.plot(ctxs, [r.ref_fp.total_at(c) / GiB for c in ctxs], label=f"{r.ref.name} (KV)", color="tab:red")
    ax.plot(ctxs, [r.fp.total_at(c) / GiB for c in ctxs], label=f"{r.spec.name} (state + KV, SSM {r.fp.dtypes.ssm})",
            color="tab:blue")
    ax.axhline(r.fp.state_bytes / GiB, color="tab:blue", ls=":", lw=1, label=f"{r.spec.name} state alone")
    for row in r.rows:
        for x, style in ((row.state_only, "s"), (row.total, "o")):
            if x is not None:
                y = r.ref_fp.total_at(x) / GiB
                ax.plot([float(x)], [float(y)], style, color="black", ms=6)
                ax.annotate(f"{float(x):,.1f}\n({row.ssm_dtype})", (float(x), float(y)), textcoords="offset points",
                            xytext=(6, -18), fontsize=7)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("context (tokens)")
    ax.set_ylabel("GiB per sequence (one rank)")
    ax.set_title(f"{r.spec.name} vs {r.ref.name}: memory per sequence, TP {r.tp}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, path)
    plt.close(fig)


def prefix_plot(sw, path: Path) -> None:
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
