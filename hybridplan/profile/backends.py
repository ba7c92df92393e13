"""Where a profile runs: the ``Backend`` protocol the pipeline drives, and its two implementations.

``CudaBackend`` runs on a GPU: CUDA allocator statistics and snapshots, NVML (the session opened with the
device), ``do_bench`` timings. ``InterpreterBackend`` runs on the CPU through Triton's interpreter: no
allocator counters (the pipeline checks the allocation against tensor storage sizes) and wall-clock timings
that only prove the path runs. ``load_backend`` imports torch and triton in the mode asked for and returns
the one that fits. Importing this module loads neither torch nor triton.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from hybridplan.errors import PlanError
from hybridplan.profile.report import CUDA, INTERPRETER, DeviceReport
from hybridplan.profile.workload import Workload

if TYPE_CHECKING:
    from hybridplan.profile.nvml import NvmlSession

#: the copy that sets the practical bandwidth ceiling (GPU: far beyond any L2; CPU: far beyond the LLC)
GPU_COPY_BYTES, CPU_COPY_BYTES = 1 << 30, 64 << 20
#: triton.testing.do_bench clears L2 by zeroing a 256 MiB buffer it allocates for the purpose
DO_BENCH_FLUSH = 256 << 20

INSTALL_HINT = "pip install 'hybridplan[gpu]'"


@runtime_checkable
class Backend(Protocol):
    """A device the pipeline sizes, allocates on and times kernels on.

    ``torch`` is the loaded module and ``device`` the torch device (None until ``open``); ``harness_bytes``
    is what the timing harness allocates beside a kernel's own buffers; ``context_bytes`` (what creating the
    device context cost) and ``other_processes`` (bytes other processes hold on the device) are None where
    unknown; ``label`` names the device in the progress display.
    """

    torch: Any
    device: Any
    harness_bytes: int
    context_bytes: int | None
    other_processes: int | None

    @property
    def label(self) -> str: ...

    def open(self) -> None:
        """Take the device (PlanError when it cannot be had)."""

    def close(self) -> None:
        """Let go of what ``open`` took."""

    def where(self) -> str:
        """The device in a sentence: "GPU 0", "this CPU"."""

    def free_bytes(self) -> int | None:
        """Bytes free on the device now (None where unknown)."""

    def copy_size(self, spare: int | None) -> int:
        """Bytes of the bandwidth-ceiling copy, given what is ``spare`` beside the run (None: unknown)."""

    def device_report(
        self, copy_bytes: int, copy_seconds: float | None, free_before_pools: int | None = None
    ) -> DeviceReport:
        """The device, its memory and the copy ceiling; ``free_before_pools`` is the free memory the run
        started from, where the backend reports that (CUDA) rather than what is free now."""

    def time(self, fn: Callable[[], Any]) -> float:
        """Seconds of one call of a kernel row's ``fn``."""

    def time_copy(self, fn: Callable[[], Any]) -> float:
        """Seconds of one call of the ceiling copy ``fn``."""

    def sync(self) -> None:
        """Wait for the device's queued work."""

    def counters(self) -> dict[str, int | None]:
        """Memory counters: "requested", "allocated", "reserved" (allocator) and "nvml_used" (None where
        unknown)."""

    def blocks(self, tensors: Sequence[Any]) -> list[int | None]:
        """The allocator block behind each tensor (None where unknown)."""

    def empty_cache(self) -> None:
        """Hand cached, unused memory back to the device."""

    def notes(self, w: Workload, common: Sequence[str]) -> tuple[str, ...]:
        """The report's notes: the run's ``common`` ones with this backend's own before or after them."""


# ---------------------------------------------------------------------------------------------------------
# Loading torch and triton


def _interpreting_triton() -> bool:
    import triton.language.standard as std

    return type(std.sum).__name__ == "InterpretedFunction"


def load_torch(interpret: bool):
    """torch, with triton loaded in the mode asked for; PlanError when that cannot be had."""
    if interpret:
        # Triton decides at import time whether its functions are interpreted: set this before it loads.
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        import torch
        import triton  # noqa: F401
    except ImportError as exc:
        raise PlanError(
            f"`hybridplan profile` needs torch and triton ({exc.name} is missing): {INSTALL_HINT}"
            + (
                ""
                if interpret
                else "; with them, `--interpret` runs the same pipeline at a tiny size on the CPU where there is no GPU"
            )
        ) from None
    if not interpret:
        if not torch.cuda.is_available():
            raise PlanError(
                "no CUDA GPU is available (torch.cuda.is_available() is False); "
                "`--interpret` runs the same pipeline at a tiny size on the CPU"
            )
        if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
            raise PlanError("TRITON_INTERPRET is set: unset it to profile on the GPU (or use --interpret)")
    if interpret and not _interpreting_triton():
        raise PlanError(
            "--interpret needs triton loaded with TRITON_INTERPRET=1, but this process loaded it "
            "for the GPU already: run it in a fresh process or export TRITON_INTERPRET=1"
        )
    return torch


def load_backend(interpret: bool, gpu: int | None) -> Backend:
    """The interpreter on the CPU, or CUDA GPU ``gpu`` (default 0); not opened yet."""
    torch = load_torch(interpret)
    return InterpreterBackend(torch) if interpret else CudaBackend(torch, 0 if gpu is None else gpu)


# ---------------------------------------------------------------------------------------------------------
# CUDA


class CudaBackend:
    harness_bytes = DO_BENCH_FLUSH

    def __init__(self, torch, index: int) -> None:
        self.torch = torch
        self.index = index
        self.device = None
        self.nvml: NvmlSession | None = None
        self.context_bytes: int | None = None
        self.other_processes: int | None = None

    @property
    def label(self) -> str:
        return f"GPU {self.index}"

    def open(self) -> None:
        torch = self.torch
        count = torch.cuda.device_count()
        if not 0 <= self.index < count:
            raise PlanError(f"--gpu {self.index}: this machine has {count} CUDA GPU(s) (0..{count - 1})")
        from hybridplan.profile.nvml import NvmlSession

        fresh = not torch.cuda.is_initialized()
        props = torch.cuda.get_device_properties(self.index)
        self.props = props
        self.nvml = NvmlSession.open(self.index, uuid=str(getattr(props, "uuid", "") or "") or None)
        before = self.nvml.used() if self.nvml else None
        self.device = torch.device("cuda", self.index)
        torch.cuda.set_device(self.device)
        torch.empty(1, device=self.device)  # creates the context
        torch.cuda.synchronize(self.device)
        torch.cuda.empty_cache()
        after = self.nvml.used() if self.nvml else None
        if fresh and before is not None and after is not None:
            self.context_bytes = after - before
        if self.nvml:
            self.other_processes = self.nvml.other_processes_bytes(os.getpid())

    def close(self) -> None:
        if self.nvml:
            self.nvml.close()

    def where(self) -> str:
        return f"GPU {self.index}"

    def free_bytes(self) -> int | None:
        free, _ = self.torch.cuda.mem_get_info(self.device)
        return int(free)

    def device_report(
        self, copy_bytes: int, copy_seconds: float | None, free_before_pools: int | None = None
    ) -> DeviceReport:
        reading = self.nvml.read() if self.nvml else None
        free, total = self.torch.cuda.mem_get_info(self.device)
        return DeviceReport(
            backend=CUDA,
            index=self.index,
            name=(reading.name if reading and reading.name else self.props.name),
            total_bytes=int(total),
            free_bytes=free_before_pools or int(free),
            memory_clock_mhz=reading.memory_clock_mhz if reading else None,
            bus_width_bits=reading.bus_width_bits if reading else None,
            copy_bytes=copy_bytes,
            copy_seconds=copy_seconds,
            nvml=reading is not None,
        )

    def copy_size(self, spare: int | None) -> int:
        # two buffers must fit beside what the run needs
        n = GPU_COPY_BYTES if spare is None else min(GPU_COPY_BYTES, max(spare, 0) // 2)
        return max(n // (1 << 20), 1) << 20

    def time(self, fn: Callable[[], Any]) -> float:
        """Median seconds (``do_bench``: L2 cleared before every call), after one call outside the timing that
        compiles and surfaces an error before ``do_bench`` hides it in a loop."""
        from hybridplan.kernels import bench

        fn()
        self.sync()
        return bench.time_cuda(fn)

    def time_copy(self, fn: Callable[[], Any]) -> float:
        """As the kernel benchmarks time their copy ceiling."""
        from hybridplan.kernels import bench

        return bench.time_cuda(fn, warmup_ms=50, rep_ms=200)

    def sync(self) -> None:
        self.torch.cuda.synchronize(self.device)

    def counters(self) -> dict[str, int | None]:
        torch = self.torch
        stats = torch.cuda.memory_stats(self.device)
        return {
            "requested": stats.get("requested_bytes.all.current"),
            "allocated": torch.cuda.memory_allocated(self.device),
            "reserved": torch.cuda.memory_reserved(self.device),
            "nvml_used": self.nvml.used() if self.nvml else None,
        }

    def blocks(self, tensors: Sequence[Any]) -> list[int | None]:
        """The caching-allocator block behind each tensor (from the allocator's snapshot)."""
        try:
            snapshot = self.torch.cuda.memory_snapshot()
        except Exception:
            return [None] * len(tensors)
        sizes: dict[int, int] = {}
        for seg in snapshot:
            if seg.get("device", self.index) != self.index:
                continue
            addr = seg.get("address", 0)
            for block in seg.get("blocks", ()):
                start = block.get("address", addr)
                sizes[start] = int(block["size"])
                addr = start + int(block["size"])
        return [sizes.get(t.data_ptr()) for t in tensors]

    def empty_cache(self) -> None:
        if self.device is None:  # never opened: nothing of ours is cached
            return
        self.torch.cuda.synchronize(self.device)
        self.torch.cuda.empty_cache()

    def notes(self, w: Workload, common: Sequence[str]) -> tuple[str, ...]:
        few = ("few slots: decode kernels this small are bound by launch latency, not bandwidth",)
        return (*common, *(few if w.slots < 64 else ()))


# ---------------------------------------------------------------------------------------------------------
# The Triton interpreter on the CPU


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def _cpu_memory() -> tuple[int | None, int | None]:
    total = free = None
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    free = int(line.split()[1]) * 1024
    except (OSError, ValueError, AttributeError):
        pass
    return total, free


class InterpreterBackend:
    harness_bytes: int = 0
    context_bytes: int | None = None
    other_processes: int | None = None
    label: str = "CPU, Triton interpreter"

    def __init__(self, torch) -> None:
        self.torch = torch
        self.device = None

    def open(self) -> None:
        self.device = self.torch.device("cpu")

    def close(self) -> None:
        pass

    def where(self) -> str:
        return "this CPU"

    def free_bytes(self) -> int | None:
        return _cpu_memory()[1]

    def device_report(
        self, copy_bytes: int, copy_seconds: float | None, free_before_pools: int | None = None
    ) -> DeviceReport:
        total, free = _cpu_memory()
        return DeviceReport(
            backend=INTERPRETER,
            index=None,
            name=f"{_cpu_name()} (Triton interpreter)",
            total_bytes=total,
            free_bytes=free,
            copy_bytes=copy_bytes,
            copy_seconds=copy_seconds,
        )

    def copy_size(self, spare: int | None) -> int:
        return CPU_COPY_BYTES

    def time(self, fn: Callable[[], Any]) -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    def time_copy(self, fn: Callable[[], Any]) -> float:
        return statistics.median(self.time(fn) for _ in range(5))

    def sync(self) -> None:
        pass

    def counters(self) -> dict[str, int | None]:
        return {"requested": None, "allocated": None, "reserved": None, "nvml_used": None}

    def blocks(self, tensors: Sequence[Any]) -> list[int | None]:
        return [None] * len(tensors)

    def empty_cache(self) -> None:
        pass

    def notes(self, w: Workload, common: Sequence[str]) -> tuple[str, ...]:
        shrunk = (
            f"--interpret: {w.spec.name} is {w.spec.name.removesuffix('-tiny')} shrunk to toy sizes; "
            "timings measure the Triton interpreter on the CPU, not a GPU"
        )
        return (shrunk, *common)
