"""The `speed` view: decode by batch size, the bound per layer kind at the benchmark's batch, the prompt's
prefill, and the benchmark's figures."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group
from rich.text import Text

from hybridplan.render import Rows, note
from hybridplan.units import human_tokens

if TYPE_CHECKING:
    from hybridplan.reports.speed import SpeedReport


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:,.3f}" if ms < 1 else f"{ms:,.2f}" if ms < 100 else f"{ms:,.0f}"


def _tok(x: float) -> str:
    return f"{x:,.0f}"


def speed_view(r: SpeedReport) -> Group:
    sc, b = r.sc, r.bench
    wl = b.workload
    head = Text.assemble(
        (sc.spec.name, "bold"),
        f"  ·  {r.gpu.key}  ·  TP {sc.tp}  ·  ",
        f"context {human_tokens(r.ctx)} at decode  ·  ",
        "CUDA graphs" if r.graphs else "eager (--enforce-eager)",
    )
    rows = []
    for st in r.steps:
        name, share = st.main_bound
        flag = "" if st.step.batch <= b.running else "  (beyond what the engine runs)"
        rows.append(
            (
                f"{st.step.batch:,}",
                _ms(st.seconds),
                _tok(st.step.tokens / st.seconds),
                _tok(st.step.tokens / st.seconds / st.step.batch),
                f"{name} {share:.0%}{flag}",
            )
        )
    decode = Rows(
        ("batch", "step ms", "tokens/s", "per request", "bound (share of the step)"),
        rows,
        title="Decode, one rank",
        left=(4,),
        prose=(4,),
    )
    at = next((st for st in r.steps if st.step.batch == b.running), b.decode)
    kinds = [
        (
            k.kind,
            _ms(k.seconds),
            f"{k.share:.0%}",
            f"{k.work.kernels:,}" if k.work else "",
            _ms(k.launch_s) if k.work else "",
            k.bound,
        )
        for k in at.kinds
        if k.share >= 0.0005
    ]
    per_kind = Rows(
        ("layer kind", "ms", "share", "kernels", "launch ms", "bound"),
        kinds,
        left=(0, 5),
        title=f"Decode step at batch {at.step.batch:,}, by layer kind",
    )
    pname, pshare = r.prefill.main_bound
    prefill = Rows(
        None,
        [
            ("prompt", f"{wl.input:,} tokens"),
            ("prefill", f"{_ms(r.prefill_s)} ms, {_tok(wl.input / r.prefill_s)} tokens/s, {pname} {pshare:.0%}"),
            ("TTFT alone", f"{_ms(r.prefill_s)} ms (one request, nothing queued)"),
        ],
        title="Prefill",
        styles={0: "bold"},
        left=(0, 1),
        prose=(1,),
    )
    benches = [_bench_rows(x, len(r.benches) > 1, r.ranges(x), r.dataset) for x in r.benches]
    return Group(head, decode, per_kind, prefill, *benches, *(note(n) for n in r.notes))


_LABEL = {"vllm": "vLLM", "sglang": "SGLang"}


def _with_range(value: float, rng) -> str:
    """The figure, and its held-out P10–P90 range beside it (hybridplan/speed/ranges.py)."""
    if rng is None:
        return f"{value:,.2f}  (no held-out range)"
    lo, hi = rng.around(value)
    where = f"{rng.set}, all regimes" if rng.pooled else f"{rng.set}, {rng.regime}"
    return f"{value:,.2f}  (P10–P90 {lo:,.2f}–{hi:,.2f}; {rng.rows} held-out rows, {where})"


def _bench_rows(b, labelled: bool, ranges: dict, dataset: str | None = None) -> Rows:
    """One engine's benchmark figures, each with its held-out range; under --engine both each table names its
    engine and its tool."""
    wl = b.workload
    kind = (
        f"{dataset}, mean {wl.input:,} in / {wl.output:,} out"
        if dataset
        else f"random, {wl.input:,} in / {wl.output:,} out"
    )
    tool = {"vllm": "vllm bench serve", "sglang": "sglang.bench_serving"}.get(b.engine)
    title = (
        f"{_LABEL.get(b.engine, b.engine)} benchmark ({tool} figures)"
        if labelled and tool
        else f"{b.engine} benchmark (vllm bench serve / sglang.bench_serving figures)"
    )
    return Rows(
        None,
        [
            ("workload", f"{kind}, concurrency {wl.concurrency:,}, {wl.prompts:,} prompts"),
            ("running", f"{b.running:,} ({b.running_from})"),
            ("Output token throughput (tok/s)", _with_range(b.output_tok_s, ranges["output_tok_s"])),
            ("Mean TTFT (ms)", _with_range(b.mean_ttft_s * 1e3, ranges["mean_ttft_ms"])),
            ("Median TTFT (ms)", _with_range(b.median_ttft_s * 1e3, ranges["median_ttft_ms"])),
            ("Mean TPOT (ms)", _with_range(b.tpot_s * 1e3, ranges["mean_tpot_ms"])),
            ("Mean ITL (ms)", _with_range(b.tpot_s * 1e3, ranges["mean_itl_ms"])),
            *([("draft (speculative)", f"{b.draft_s * 1e3:,.3f} ms a step")] if b.draft_s is not None else []),
            *_queue_rows(b),
            (
                "host per decode step",
                f"{b.decode.host_s * 1e3:,.3f} ms" + (" (overlapped with the GPU's step)" if b.decode.overlap else ""),
            ),
        ],
        title=title,
        styles={0: "bold"},
        left=(0, 1),
        prose=(1,),
    )


def _queue_rows(b) -> list[tuple[str, str]]:
    """The queue's terms (hybridplan/speed/queue.py): what a prompt costs the running batch, and the median TPOT."""
    out = []
    if b.median_tpot_s is not None:
        out.append(("Median TPOT (ms)", f"{b.median_tpot_s * 1e3:,.2f}"))
    if b.loaded_prefill_s is not None:
        if b.mixed is not None:
            extra = b.mixed.step.tokens - b.mixed.step.batch
            how = (
                f"its tokens' share of steps carrying the {b.running:,} decodes and {extra:,} prompt tokens "
                f"({b.mixed.seconds * 1e3:,.3f} ms a step against {b.decode.seconds * 1e3:,.3f} ms decoding alone)"
            )
        else:
            how = "its prefill batch, which the running requests wait for"
        out.append(("a prompt in the running batch", f"{b.loaded_prefill_s * 1e3:,.3f} ms ({how})"))
    return out
