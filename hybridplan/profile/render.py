"""Rich tables for a profile report, and the progress display shown on stderr while it runs.

Rendering reads report fields and properties; it computes no figure of its own.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING

from rich.console import Group
from rich.text import Text

from hybridplan.profile.arith import fmt_fraction, fmt_rate, fmt_seconds
from hybridplan.render import Rows, console, note
from hybridplan.units import human_bytes

if TYPE_CHECKING:
    from hybridplan.profile.report import KernelResult, MemoryReport, PhaseReport, ProfileReport


_SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float8_e4m3fn": "fp8", "float8_e5m2": "fp8e5m2"}


def _short(dtype: str | None) -> str:
    return _SHORT.get(dtype, dtype or "—")


def _shape(shape: tuple[int, ...], dtype: str) -> str:
    return "×".join(str(d) for d in shape) + f" {_short(dtype)}"


def _b(n: int | None, exact: bool) -> str:
    return "—" if n is None else human_bytes(n, exact=exact)


def _signed(n: int | None, exact: bool) -> str:
    if n is None:
        return "—"
    if n == 0:
        return "0"
    return ("+" if n > 0 else "−") + human_bytes(abs(n), exact=exact)


def device_view(r: ProfileReport, exact: bool = False) -> Rows:
    d = r.device
    peak_how = (
        f"NVML: 2 · {d.memory_clock_mhz:,} MHz · {d.bus_width_bits:,} bit / 8"
        if d.peak_bandwidth is not None
        else "NVML unavailable"
        if d.backend == "cuda"
        else "no NVML on a CPU"
    )
    share = f" · {fmt_fraction(d.copy_fraction_of_peak)} of peak" if d.copy_fraction_of_peak is not None else ""
    return Rows(
        None,
        [
            ("name", d.name, f"GPU {d.index}" if d.index is not None else ""),
            ("memory", _b(d.total_bytes, exact), "total"),
            ("free before the pools", _b(d.free_bytes, exact), "after the CUDA context" if d.backend == "cuda" else ""),
            ("peak bandwidth", fmt_rate(d.peak_bandwidth), peak_how),
            (
                "copy bandwidth",
                fmt_rate(d.copy_bandwidth),
                f"{human_bytes(d.copy_bytes)} copied, read + write counted{share}",
            ),
        ],
        title="Device",
        left=(0, 1, 2),
        prose=(2,),
        styles={0: "bold", 2: "dim"},
    )


def memory_view(m: MemoryReport, exact: bool = False, cuda: bool = True) -> Rows:
    rows: list = [
        (
            tr.plan.name,
            _shape(tr.plan.shape, tr.plan.dtype),
            _b(tr.plan.nbytes, exact),
            _b(tr.storage_bytes, exact),
            _signed(tr.storage_bytes - tr.plan.nbytes, exact),
        )
        for tr in m.tensors
    ]
    verdict = Text("exact", style="green") if m.exact else Text("MISMATCH", style="bold red")
    rows.append(
        (
            Text("total", style="bold"),
            verdict,
            _b(m.predicted_total, exact),
            _b(m.measured_total, exact),
            _signed(m.measured_total - m.predicted_total, exact),
        )
    )
    sections = (len(rows) - 1,)
    if not cuda:
        caption = "measured: the storage bytes of each tensor (the interpreter has no allocator counters)"
    else:
        rows += [
            (
                "allocator: requested",
                "exact bytes asked for",
                _b(m.predicted_total, exact),
                _b(m.requested_delta, exact),
                _signed(m.requested_difference, exact),
            ),
            (
                "memory_allocated",
                "512-byte blocks",
                _b(m.predicted_rounded, exact),
                _b(m.allocated_delta, exact),
                _signed(m.unsplit_tails, exact),
            ),
            (
                "memory_reserved",
                "allocator segments",
                _b(m.allocated_delta, exact),
                _b(m.reserved_delta, exact),
                _signed(m.segment_slack, exact),
            ),
            (
                "NVML used",
                "whole device",
                _b(m.reserved_delta, exact),
                _b(m.nvml_used_delta, exact),
                _signed(m.outside_allocator, exact),
            ),
        ]
        lines = ["each counter's growth while the pools were allocated, beside the figure it should equal"]
        if m.context_bytes is not None:
            lines.append(f"CUDA context (NVML, before any pool): {human_bytes(m.context_bytes)}")
        if m.other_processes_bytes:
            lines.append(f"other processes on this GPU hold {human_bytes(m.other_processes_bytes)}")
        caption = "\n".join(lines)
    return Rows(
        ("pool", "shape", "predicted", "measured", "difference"),
        rows,
        title="Memory: the planner's pools, allocated",
        left=(0, 1),
        sections=sections,
        caption=caption,
    )


def _kernel_row(r: KernelResult, exact: bool, flops: bool) -> list:
    p = r.plan
    layers = f"{p.layers} × {p.kind} {p.part}"
    if not p.runs:
        cells = [layers, "—", Text(p.status, style="yellow"), "—", "—", "—", "—"]
        return cells + (["—"] if flops else [])
    cells = [
        layers,
        p.kernel,
        _b(p.nbytes, exact),
        fmt_seconds(r.predicted_seconds),
        fmt_seconds(r.seconds),
        fmt_rate(r.achieved_bandwidth),
        fmt_fraction(r.fraction_of_ceiling),
    ]
    if flops:
        cells.append("—" if r.tflops is None else f"{r.tflops:.3g}")
    return cells


def phase_view(ph: PhaseReport, title: str, exact: bool = False, flops: bool = False) -> Rows:
    cols = ("layers", "kernel", "modelled bytes", "predicted", "measured", "achieved", "of copy")
    rows = [_kernel_row(r, exact, flops) for r in ph.rows]
    sections: tuple[int, ...] = ()
    if ph.ran:
        tail = ["—" if ph.tflops is None else f"{ph.tflops:.3g}"] if flops else []
        sections = (len(rows) - 1,)
        rows.append(
            [
                Text("total", style="bold"),
                "",
                _b(ph.nbytes, exact),
                fmt_seconds(ph.predicted_seconds),
                fmt_seconds(ph.seconds),
                fmt_rate(ph.achieved_bandwidth),
                fmt_fraction(ph.fraction_of_ceiling),
                *tail,
            ]
        )
    return Rows(
        cols + (("TFLOP/s",) if flops else ()),
        rows,
        title=title,
        left=(0, 1),
        sections=sections,
        caption="predicted = modelled bytes ÷ copy bandwidth; achieved = modelled bytes ÷ measured time",
        optional=(1, 7, 3),
    )


def profile_view(r: ProfileReport, *, exact: bool = False) -> Group:
    w, fp = r.workload, r.workload.fp
    where = r.device.name if r.device.index is None else f"{r.device.name} (GPU {r.device.index})"
    head = Text.assemble((w.spec.name, "bold"), f"  ·  {where}")
    sub = Text(
        f"{w.slots:,} slots · KV for {w.ctx:,} tokens · prefill {w.tokens:,} tokens (chunk {w.chunk_size}) · "
        f"conv {_short(fp.dtypes.conv)} · SSM {_short(fp.dtypes.ssm)} · KV {_short(fp.dtypes.kv)} · "
        f"activations {_short(w.act_dtype)}",
        style="dim",
    )
    parts: list = [
        head,
        sub,
        device_view(r, exact),
        memory_view(r.memory, exact, cuda=r.device.backend == "cuda"),
        phase_view(r.decode, f"Decode step: one token for each of {w.slots:,} slots, every recurrent layer", exact),
        phase_view(r.prefill, f"Prefill: {w.tokens:,} tokens into one slot, every recurrent layer", exact, flops=True),
    ]
    parts.extend(note(n) for n in r.notes)
    return Group(*parts)


class _RichReporter:
    def __init__(self, progress) -> None:
        self.progress = progress
        self.task = None

    def begin(self, total: int) -> None:
        self.task = self.progress.add_task("profiling", total=total)

    def step(self, label: str) -> None:
        if self.task is None:
            return
        task = self.progress.tasks[0]
        if task.description != "profiling":
            self.progress.advance(self.task)
        self.progress.update(self.task, description=label)


@contextmanager
def progress_display():
    """A transient progress bar on stderr (drawn only on a terminal); yields the pipeline's Reporter."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    err = console(stderr=True)
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    ) as progress:
        yield _RichReporter(progress)
