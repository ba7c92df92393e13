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
    ctxs = sorted({max(1, round(lo * 2 ** (math.log2(2**21 / lo) * i / 300))) for i in range(301)})
    fig, ax = plt.subplots(figsize=(8.5, 5.2))
    ref_label = f"{r.ref.name} (KV + state)" if r.ref_fp.state_bytes else f"{r.ref.name} (KV)"
    ax.plot(ctxs, [r.ref_fp.total_at(c) / GiB for c in ctxs], color="tab:red", lw=2, label=ref_label)
    colors = ("tab:blue", "tab:green", "tab:purple", "tab:orange")
    lines = []
    for i, (row, fp) in enumerate(zip(r.rows, r.row_fps)):
        c = colors[i % len(colors)]
        ax.plot(
            ctxs,
            [fp.total_at(x) / GiB for x in ctxs],
            color=c,
            lw=2 if i == 0 else 1.3,
            ls="-" if i == 0 else "--",
            label=f"{r.spec.name}, SSM {row.ssm_dtype}: state + KV",
        )
        ax.axhline(fp.state_bytes / GiB, color=c, ls=":", lw=1, label=f"{r.spec.name}, SSM {row.ssm_dtype}: state")
        for x, marker, what in ((row.state_only, "s", "state"), (row.total, "o", "state + KV")):
            if x is None:
                continue
            lines.append(f"{row.ssm_dtype:>9}  {what:<10} {float(x):>10,.2f}")
            if x >= lo:  # a crossover at 0 (the reference larger from the start) has no place on a log axis
                y = r.ref_fp.total_at(x)  # type: ignore[arg-type]  # a crossover lies between whole tokens
                ax.plot([float(x)], [float(y) / GiB], marker, color=c, mec="black", ms=7, zorder=5)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlim(lo, ctxs[-1])
    ax.set_xlabel("context (tokens)")
    ax.set_ylabel("GiB per sequence (one rank)")
    ax.set_title(f"{r.spec.name} vs {r.ref.name}: memory per sequence, TP {r.tp}")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7.5, loc="upper left")
    if lines:
        ax.text(
            0.98,
            0.03,
            "crossovers (tokens)\n" + "\n".join(lines),
            transform=ax.transAxes,
            ha="right",
            va="bottom",
            family="monospace",
            fontsize=7.5,
            bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.9, "edgecolor": "0.7"},
        )
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
            (line,) = ax.step(
                [p[0] for p in pts],
                [p[1] for p in pts],
                where="post",
                ls=ls,
                lw=lw,
                label=f"{label}{never}: 2nd request",
            )
            ax.step(
                [p[0] for p in pts],
                [p[2] for p in pts],
                where="post",
                ls=ls,
                lw=max(lw - 1, 0.8),
                color=line.get_color(),
                alpha=0.55,
                label=f"{label}: 3rd and later",
            )
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
    """`replay --plot`: with --plot-over, the token hit rate of each cache against the budget or the block
    (``sweep_plot``); else the hit rate over the trace and the gap to the ideal cache (``trace_plot``)."""
    if r.sweep:
        sweep_plot(r, path)
    else:
        trace_plot(r, path)


def sweep_plot(r, path: Path) -> None:
    """`replay --plot FILE --plot-over budget|block`: the token hit rate of each cache against the budget or the
    block."""
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


def hit_rate_series(r) -> list[tuple[str, list[int], list[float]]]:
    """Per row of a replay report, in its order (the ideal cache last): the requests replayed (1, 2, ...) and the
    token hit rate so far, prompt tokens reused ÷ prompt tokens over the requests up to each (a refused request
    counts neither, as in the row's own rate: the last point is the row's ``token_hit_rate``)."""
    out = []
    for row in r.rows:
        xs, ys, reused, prompt = [], [], 0, 0
        for i, o in enumerate(row.run.outcomes):
            reused += o.reused
            prompt += o.prompt
            xs.append(i + 1)
            ys.append(reused / prompt if prompt else 0.0)
        out.append((row.label, xs, ys))
    return out


def gap_bars(r) -> list[tuple[str, int, list[tuple[str, int]]]]:
    """Per row with a gap to the ideal cache (not the ideal cache itself, nor under --no-gap): its reused tokens
    and the tokens lost to each cause, in the order they are lifted (``CAUSES``); they add up to the ideal
    cache's reused tokens over every request."""
    return [
        (row.label, row.gap.reused_tokens, [(c.name, c.tokens) for c in row.gap.causes])
        for row in r.rows
        if row.gap is not None
    ]


#: one colour per cause of the gap, kept across rows (hybridplan/reports/replay.py CAUSES)
_CAUSE_COLORS = {
    "concurrency": "tab:purple",
    "eviction": "tab:red",
    "max_model_len": "tab:brown",
    "caching_off": "tab:pink",
    "policy": "tab:orange",
    "hash_unit": "tab:olive",
    "grid": "tab:cyan",
}


def _row_style(row, i: int) -> dict:
    if row.rules.get("mode") == "ideal":
        return {"color": "black", "ls": "--", "lw": 2.0}
    if row.engine == "baseline":
        return {"color": "0.55", "ls": ":", "lw": 2.2}
    colors = ("tab:blue", "tab:green", "tab:purple", "tab:orange", "tab:red", "tab:brown")
    return {"color": colors[i % len(colors)], "ls": "-", "lw": 1.8}


def trace_plot(r, path: Path) -> None:
    """`replay --plot FILE`: the token hit rate so far of each row against the requests replayed (``hit_rate_series``),
    and below, each row's reused tokens and its gap to the ideal cache as a bar stacked by cause (``gap_bars``)."""
    from hybridplan.reports.replay import CAUSE_TEXT

    plt = _pyplot()
    from matplotlib.patches import Patch

    series = hit_rate_series(r)
    bars = gap_bars(r)
    n_bars = len(bars)
    heights = [3.4] + ([0.75 + 0.42 * n_bars] if n_bars else [])
    fig, axes = plt.subplots(
        len(heights), 1, figsize=(9, sum(heights) + 1.4), squeeze=False, gridspec_kw={"height_ratios": heights}
    )
    ax = axes[0, 0]
    styles = {}
    engine_i = 0
    for row, (label, xs, ys) in zip(r.rows, series):
        st = _row_style(row, engine_i)
        engine_i += row.engine != "baseline"
        styles[label] = st
        ax.plot(xs, [100 * y for y in ys], label=f"{label}: {100 * row.run.hit_rate:.1f} %", **st)
    ax.set_xlabel("requests replayed")
    ax.set_ylabel("token hit rate so far (%)")
    ax.set_xlim(1, max((len(xs) for _, xs, _ in series), default=1))
    top = max((100 * y for _, _, ys in series for y in ys), default=1.0) or 1.0
    ax.set_ylim(-0.02 * top, 1.08 * top)  # a row at 0 % stays visible above the axis
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7.5, loc="best", title="final token hit rate", title_fontsize=7.5)
    flight = f", {r.settings.concurrency:,} in flight" if r.settings.concurrency > 1 else ""
    ax.set_title(
        f"{r.spec.name}: prefix-cache token hit rate\nover {r.rows[0].run.requests:,} requests of {r.trace}{flight}",
        fontsize=10,
    )
    if n_bars:
        bx = axes[1, 0]
        labels = [label for label, _, _ in bars]
        bar_ys = list(range(n_bars))[::-1]
        bx.barh(
            bar_ys,
            [reused for _, reused, _ in bars],
            color=[styles[label]["color"] for label in labels],
            alpha=0.85,
            edgecolor="white",
        )
        handles = [Patch(facecolor="0.85", edgecolor="0.5", label="reused by the row (its colour above)")]
        left = [float(reused) for _, reused, _ in bars]
        for name in CAUSE_TEXT:
            widths = [dict(causes).get(name, 0) for _, _, causes in bars]
            if not any(w > 0 for w in widths):
                continue
            handles.append(
                bx.barh(
                    bar_ys,
                    [max(w, 0) for w in widths],
                    left=left,
                    color=_CAUSE_COLORS[name],
                    edgecolor="white",
                    hatch="//",
                    label=f"lost: {CAUSE_TEXT[name]}",
                )
            )
            left = [a + max(w, 0) for a, w in zip(left, widths)]
        ideal = next(row.gap.ideal_tokens for row in r.rows if row.gap is not None)
        handles.append(bx.axvline(ideal, color="black", ls="--", lw=1.2, label=f"ideal cache: {ideal:,} tokens"))
        bx.set_yticks(bar_ys)
        bx.set_yticklabels(labels, fontsize=8)
        negative = [f"{label}: {CAUSE_TEXT[name]} {t:,}" for label, _, causes in bars for name, t in causes if t < 0]
        bx.set_xlabel(
            "prompt tokens reused, and lost to each cause (together: what the ideal cache reuses)"
            + ("\nnot drawn, lifting it lowered the rate: " + "; ".join(negative) if negative else "")
        )
        bx.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:,.0f}"))
        for y, (_, _, causes) in zip(bar_ys, bars):
            gap = sum(t for _, t in causes)
            bx.text(
                ideal * 1.01,
                y,
                f" gap {gap:,}" + (f" ({100 * gap / ideal:.0f} %)" if ideal else ""),
                va="center",
                fontsize=7.5,
            )
        bx.set_xlim(0, ideal * 1.25 if ideal else 1)
        bx.grid(True, axis="x", alpha=0.3)
        bx.legend(
            handles=handles,
            fontsize=7,
            ncol=2,
            loc="lower left",
            bbox_to_anchor=(0, 1.02, 1, 0),
            mode="expand",
            borderaxespad=0,
            title="the gap to the ideal cache, cause by cause (each cause lifted on top of those before it)",
            title_fontsize=8,
        )
    fig.tight_layout()
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
    ax.plot(
        xs,
        [min(m, c) for m, c in zip(mem, comp)],
        color="grey",
        ls="--",
        lw=1,
        label=f"roofline ({r.gpu.hbm_gbps:,.0f} GB/s, {peak / 1e12:,.0f} TFLOP/s)",
    )
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


def plan_series(r) -> dict:
    """What `plan --plot` draws, from a plan report: ``plans``, each plan in the report's order (its number in
    the table: ``rank``) with its GPUs and decode tokens/s per GPU (None where not priced); ``tried``, per GPU
    count the layouts tried by outcome: ``plan`` (the plans listed), else the rejection's cause
    (hybridplan/reports/plan.py ``kind``) as ``(cause, fitted)`` (fitted False: its count ruled out by the
    memory bound, never fitted)."""
    from hybridplan.reports.plan import kind

    res = r.result
    plans = [
        {
            "rank": i + 1,
            "engine": p.layout.engine,
            "gpus": p.layout.gpus,
            "layout": p.layout.label(),
            "variant": p.variant.label(),
            "margin": p.margin,
            "tokens_per_s_per_gpu": p.tokens_per_s_per_gpu,
            "not_priced": getattr(p.rate, "why", None) if p.rate is not None else "no datasheet rate",
        }
        for i, p in enumerate(res.plans)
    ]
    tried: dict[int, dict] = {}
    for p in res.plans:
        by = tried.setdefault(p.layout.gpus, {})
        by["plan"] = by.get("plan", 0) + 1
    for x in res.rejected:
        by = tried.setdefault(x.layout.gpus, {})
        key = (kind(x), x.fitted)
        by[key] = by.get(key, 0) + 1
    return {"plans": plans, "tried": dict(sorted(tried.items()))}


#: a colour per cause a layout fails for, kept across plots (hybridplan/reports/plan.py KIND_WORDS and ``kind``)
_FAIL_COLORS = {
    "refused": "tab:red",
    "not modelled": "tab:brown",
    "weights": "tab:orange",
    "too few": "tab:purple",
    "memory": "tab:pink",
    "mamba": "tab:cyan",
    "other": "0.5",
}


def plan_plot(r, path: Path) -> None:
    """`plan --plot`: above, decode tokens/s per GPU of each plan listed against its GPUs (the first, the one
    ranked best, highlighted); below, per GPU count, the layouts tried stacked by outcome: the plans, and the
    layouts that fail by why (hatched: ruled out by memory, never fitted)."""
    plt = _pyplot()
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    res = r.result
    sc = res.base
    data = plan_series(r)
    plans, tried = data["plans"], data["tried"]
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(9, 7.4), sharex=True, gridspec_kw={"height_ratios": [3, 2.2]})
    gpu = sc.budget.gpu or "GPU"
    ax.set_title(
        f"{sc.spec.name}: the plans for {res.concurrency:,} requests of {sc.ctx:,} tokens on {gpu}", fontsize=10
    )
    priced = [p for p in plans if p["tokens_per_s_per_gpu"] is not None]
    at: dict[int, list[dict]] = {}
    for p in priced:
        at.setdefault(p["gpus"], []).append(p)
    markers = {"vllm": "o", "sglang": "s"}
    colors = {"vllm": "tab:blue", "sglang": "tab:green"}
    shown: set[str] = set()
    for n, group in at.items():
        for j, p in enumerate(group):
            x = n + (j - (len(group) - 1) / 2) * 0.12  # plans on one count side by side
            y = p["tokens_per_s_per_gpu"]
            e = p["engine"]
            label = None if e in shown else ("vLLM" if e == "vllm" else "SGLang") + " plan"
            shown.add(e)
            ax.plot(
                [x],
                [y],
                markers.get(e, "o"),
                color=colors.get(e, "tab:gray"),
                ms=8,
                mec="black",
                mew=0.6,
                label=label,
                zorder=3,
            )
            if p["rank"] == 1:
                ax.plot(
                    [x], [y], "*", color="gold", ms=17, mec="black", mew=0.8, zorder=4, label="plan 1, ranked first"
                )
            ax.annotate(
                str(p["rank"]), (x, y), xytext=(7, 5), textcoords="offset points", fontsize=8, fontweight="bold"
            )
    top = max((p["tokens_per_s_per_gpu"] for p in priced), default=1.0)
    ax.set_ylim(0, top * 1.3)
    ax.set_ylabel("decode output tok/s per GPU\n(at the target's requests)")
    ax.grid(True, alpha=0.3)
    lines = ["#  engine  GPUs  layout, cache settings: margin, decode"] if plans else []
    lines += [
        f"{p['rank']}  {p['engine']:<6}  {p['gpus']:>4}  {p['layout']}, {p['variant']}: "
        f"{100 * p['margin']:+.0f} %, "
        + (
            f"{p['tokens_per_s_per_gpu']:,.0f} tok/s/GPU"
            if p["tokens_per_s_per_gpu"] is not None
            else f"not priced ({p['not_priced']})"
        )
        for p in plans
    ]
    if not plans:
        lines.append(f"no layout of up to {res.max_gpus} GPUs starts and holds the target (below: why)")
    else:
        lines.append("ranked by margin in 10 % steps, then by tok/s/GPU")
        if (fewest := min(p["gpus"] for p in plans)) > 1:
            lines.append(f"no layout on {'1' if fewest == 2 else f'1-{fewest - 1}'} GPUs holds the target (below: why)")
    ax.text(
        0.015,
        0.96,
        "\n".join(lines),
        transform=ax.transAxes,
        va="top",
        fontsize=7.5,
        family="monospace",
        bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.9, "edgecolor": "0.7"},
    )
    if priced:
        ax.legend(fontsize=7.5, loc="lower left")
    else:
        ax.set_yticks([])
    counts = sorted(tried)
    bottom = {n: 0 for n in counts}
    causes = sorted({k for by in tried.values() for k in by if k != "plan"}, key=lambda k: (k[0], not k[1]))
    handles = []
    if any("plan" in by for by in tried.values()):
        handles.append(
            bx.bar(
                counts,
                [tried[n].get("plan", 0) for n in counts],
                color="gold",
                edgecolor="black",
                lw=0.5,
                label="plans listed (hold the target)",
            )
        )
        bottom = {n: tried[n].get("plan", 0) for n in counts}
    from hybridplan.reports.plan import KIND_WORDS

    words = {w: k for k, w in KIND_WORDS.items()}
    palette = {
        name: _FAIL_COLORS.get(words.get(name, "mamba" if "Mamba" in name else "other"), "0.5") for name, _ in causes
    }
    for name, fitted in causes:
        hs = [tried[n].get((name, fitted), 0) for n in counts]
        bar = bx.bar(
            counts,
            hs,
            bottom=[bottom[n] for n in counts],
            color=palette[name],
            alpha=0.85 if fitted else 0.35,
            hatch=None if fitted else "//",
            edgecolor="white" if fitted else palette[name],
            lw=0.5,
            label=name if fitted else f"{name} (not fitted)",
        )
        handles.append(bar)
        bottom = {n: bottom[n] + h for n, h in zip(counts, hs)}
    if any(not k[1] for k in causes):
        handles.append(
            Patch(
                facecolor="white",
                edgecolor="0.4",
                hatch="//",
                label="hatched: ruled out by the memory bound, not fitted",
            )
        )
    bx.set_ylabel("layouts tried")
    bx.set_xlabel(f"GPUs ({gpu})")
    bx.grid(True, axis="y", alpha=0.3)
    bx.legend(
        handles=handles,
        fontsize=7,
        ncol=2,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.2),
        title="the layouts tried on each count, by outcome",
        title_fontsize=7.5,
    )
    bx.set_ylim(0, 1.08 * max((sum(by.values()) for by in tried.values()), default=1))
    hi = max(counts, default=1)
    if hi <= 16:
        bx.set_xticks(range(1, hi + 1))
    else:
        bx.xaxis.set_major_locator(MaxNLocator(integer=True))
    bx.set_xlim(0.4, hi + 0.6)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
