"""NVIDIA's management library (NVML) for the profiler: device name, memory, memory clock and bus width.

``pynvml`` comes from the ``nvidia-ml-py`` package and is imported only when a session opens. Every reading
tolerates a call the driver does not support (MIG slices, some virtual GPUs): that figure becomes None.
"""

from __future__ import annotations

from typing import Any

from msgspec import Struct

from hybridplan.profile.arith import peak_bandwidth


class NvmlReading(Struct, frozen=True):
    """One look at a device. Memory in bytes; ``memory_clock_mhz`` is the maximum memory clock."""

    name: str | None
    total: int | None
    free: int | None
    used: int | None
    memory_clock_mhz: int | None
    bus_width_bits: int | None

    @property
    def peak_bandwidth(self) -> float | None:
        """2 · max memory clock (MHz) · 1e6 · bus width (bits) / 8, bytes per second."""
        return peak_bandwidth(self.memory_clock_mhz, self.bus_width_bits)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class NvmlSession:
    """An initialised NVML bound to one device; ``close()`` (or ``with``) shuts NVML down again."""

    def __init__(self, lib: Any, handle: Any) -> None:
        self._lib = lib
        self._handle = handle
        self._open = True

    @classmethod
    def open(cls, index: int, uuid: str | None = None) -> NvmlSession | None:
        """NVML on the GPU with this CUDA ``uuid`` (NVML indices ignore CUDA_VISIBLE_DEVICES), else on NVML
        device ``index``. None when NVML is missing or cannot start (no driver, no permission)."""
        try:
            import pynvml
        except ImportError:
            return None
        try:
            pynvml.nvmlInit()
        except Exception:  # NVMLError_LibraryNotFound, driver not loaded, ...
            return None
        handle = None
        try:
            if uuid:
                for candidate in (uuid, f"GPU-{uuid}", f"MIG-{uuid}"):
                    try:
                        handle = pynvml.nvmlDeviceGetHandleByUUID(candidate)
                        break
                    except Exception:
                        continue
            if handle is None:
                handle = pynvml.nvmlDeviceGetHandleByIndex(int(index))
        except Exception:
            _shutdown(pynvml)
            return None
        return cls(pynvml, handle)

    def _call(self, fn: str, *args: Any) -> Any:
        try:
            return getattr(self._lib, fn)(self._handle, *args)
        except Exception:  # NVMLError_NotSupported and friends: the figure is unknown
            return None

    def read(self) -> NvmlReading:
        mem = self._call("nvmlDeviceGetMemoryInfo")
        name = self._call("nvmlDeviceGetName")
        clock = self._call("nvmlDeviceGetMaxClockInfo", getattr(self._lib, "NVML_CLOCK_MEM", 2))
        bus = self._call("nvmlDeviceGetMemoryBusWidth")
        return NvmlReading(
            name=_text(name) if name is not None else None,
            total=int(mem.total) if mem is not None else None,
            free=int(mem.free) if mem is not None else None,
            used=int(mem.used) if mem is not None else None,
            memory_clock_mhz=int(clock) if clock else None,
            bus_width_bits=int(bus) if bus else None,
        )

    def used(self) -> int | None:
        """Device-wide used memory: every process's allocations and contexts, plus the driver's reserve."""
        mem = self._call("nvmlDeviceGetMemoryInfo")
        return int(mem.used) if mem is not None else None

    def other_processes_bytes(self, own_pid: int) -> int | None:
        """GPU memory held by compute processes other than ``own_pid`` (None where NVML cannot tell, e.g.
        inside a container that hides other PIDs)."""
        procs = self._call("nvmlDeviceGetComputeRunningProcesses")
        if procs is None:
            return None
        total = 0
        for p in procs:
            used = getattr(p, "usedGpuMemory", None)
            # NVML_VALUE_NOT_AVAILABLE (all ones) where the driver cannot attribute the memory
            if getattr(p, "pid", None) != own_pid and isinstance(used, int) and 0 <= used < 1 << 63:
                total += used
        return total

    def close(self) -> None:
        if self._open:
            self._open = False
            _shutdown(self._lib)

    def __enter__(self) -> NvmlSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _shutdown(lib: Any) -> None:
    try:
        lib.nvmlShutdown()
    except Exception:
        pass
