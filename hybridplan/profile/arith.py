"""The arithmetic of a profile report, as pure functions on Python numbers.

Conventions: bandwidths are bytes per second (decimal GB/s = 1e9 B/s in the tables); a copy of ``n`` bytes
moves ``2n`` bytes (one read, one write); a kernel's achieved bandwidth is its *modelled minimum* bytes
divided by its measured time (``hybridplan.kernels.bench``), so redundant traffic is never credited.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

#: PyTorch's CUDA caching allocator hands out blocks in multiples of 512 bytes (``kMinBlockSize``).
ALLOCATOR_BLOCK = 512


def round_up(n: int, multiple: int) -> int:
    if multiple <= 0:
        raise ValueError("multiple must be positive")
    return -(-int(n) // multiple) * multiple


def allocator_block(nbytes: int, block: int = ALLOCATOR_BLOCK) -> int:
    """Bytes the CUDA caching allocator books for one tensor of ``nbytes``: 0 for an empty tensor (no
    block), else ``nbytes`` rounded up to a multiple of 512 (at least 512)."""
    if nbytes < 0:
        raise ValueError("nbytes must be >= 0")
    return 0 if nbytes == 0 else round_up(nbytes, block)


def allocator_rounded(sizes: Iterable[int], block: int = ALLOCATOR_BLOCK) -> int:
    """What ``torch.cuda.memory_allocated`` grows by for tensors of these sizes when each gets its own block
    cut to size (a block is handed out whole, tail included, when its tail would be too small to split)."""
    return sum(allocator_block(n, block) for n in sizes)


def peak_bandwidth(max_memory_clock_mhz: float | None, bus_width_bits: int | None) -> float | None:
    """Theoretical DRAM bandwidth in bytes/s from NVML's figures: 2 (double data rate) · clock · bus width.

    H100 SXM: 2 · 2619 MHz · 1e6 · 5120 bit / 8 = 3.352e12 B/s.
    """
    if not max_memory_clock_mhz or not bus_width_bits:
        return None
    return 2.0 * float(max_memory_clock_mhz) * 1e6 * int(bus_width_bits) / 8.0


def copy_bandwidth(nbytes: int, seconds: float) -> float:
    """Bytes read + written per second by a copy of ``nbytes`` that took ``seconds``."""
    if seconds <= 0:
        raise ValueError("seconds must be > 0")
    return 2.0 * nbytes / seconds


def achieved_bandwidth(nbytes: int, seconds: float | None) -> float | None:
    """Modelled bytes over measured seconds; None when there is no measurement."""
    if seconds is None or seconds <= 0:
        return None
    return nbytes / seconds


def predicted_seconds(nbytes: int, bandwidth: float | None) -> float | None:
    """Time a purely bandwidth-bound kernel needs at ``bandwidth`` bytes/s: the planner's step-time figure."""
    if not bandwidth or bandwidth <= 0:
        return None
    return nbytes / bandwidth


def tflops(flops: int, seconds: float | None) -> float | None:
    if not flops or seconds is None or seconds <= 0:
        return None
    return flops / seconds / 1e12


def fraction(part: float | None, whole: float | None) -> float | None:
    """``part / whole``, None when either is missing or the whole is zero."""
    if part is None or not whole:
        return None
    return part / whole


_N = TypeVar("_N", int, float)


def difference(predicted: _N | None, measured: _N | None) -> _N | None:
    """measured − predicted (positive: more was measured than predicted)."""
    if predicted is None or measured is None:
        return None
    return measured - predicted


def missing_bytes(required: int, free: int) -> int:
    """How far ``required`` exceeds ``free`` (0 when it fits)."""
    return max(0, int(required) - int(free))


def fmt_rate(bytes_per_s: float | None) -> str:
    """``4.312e12`` → ``4,312 GB/s`` (decimal, as vendors quote bandwidth); slow rates in MB/s or kB/s."""
    if bytes_per_s is None:
        return "—"
    if bytes_per_s >= 1e10:
        return f"{bytes_per_s / 1e9:,.0f} GB/s"
    for scale, unit in ((1e9, "GB/s"), (1e6, "MB/s")):
        if bytes_per_s >= scale:
            return f"{bytes_per_s / scale:.3g} {unit}"
    return f"{bytes_per_s / 1e3:.3g} kB/s"


def fmt_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds >= 1:
        return f"{seconds:.3g} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} µs"


def fmt_fraction(x: float | None) -> str:
    if x is None:
        return "—"
    return "<0.1 %" if 0 < x < 0.0005 else f"{100 * x:.1f} %"
