"""The result of a profile: frozen values, every derived figure a property, ``to_dict()`` for ``--json``.

Nothing here imports torch: the pipeline fills these in, the renderer and the JSON read them.
"""

from __future__ import annotations

from msgspec import Struct

from hybridplan.profile import arith
from hybridplan.profile.workload import KernelPlan, TensorPlan, Workload
from hybridplan.units import human_bytes

SCHEMA_VERSION = 1

CUDA, INTERPRETER = "cuda", "triton-interpreter"


class DeviceReport(Struct, frozen=True):
    """The device and its bandwidth ceilings. ``free_bytes`` is read after the CUDA context exists, before
    any pool is allocated; ``peak_bandwidth`` comes from NVML, ``copy_bandwidth`` from a measured copy."""

    backend: str
    index: int | None
    name: str
    total_bytes: int | None
    free_bytes: int | None
    memory_clock_mhz: int | None = None
    bus_width_bits: int | None = None
    copy_bytes: int = 0
    copy_seconds: float | None = None
    nvml: bool = False

    @property
    def peak_bandwidth(self) -> float | None:
        return arith.peak_bandwidth(self.memory_clock_mhz, self.bus_width_bits)

    @property
    def copy_bandwidth(self) -> float | None:
        return arith.copy_bandwidth(self.copy_bytes, self.copy_seconds) if self.copy_seconds else None

    @property
    def copy_fraction_of_peak(self) -> float | None:
        return arith.fraction(self.copy_bandwidth, self.peak_bandwidth)

    def to_dict(self) -> dict:
        return {
            "backend": self.backend,
            "index": self.index,
            "name": self.name,
            "total_bytes": self.total_bytes,
            "free_bytes": self.free_bytes,
            "nvml": self.nvml,
            "memory_clock_mhz": self.memory_clock_mhz,
            "bus_width_bits": self.bus_width_bits,
            "peak_bandwidth_bytes_per_s": self.peak_bandwidth,
            "copy": {
                "bytes": self.copy_bytes,
                "seconds": self.copy_seconds,
                "bandwidth_bytes_per_s": self.copy_bandwidth,
                "fraction_of_peak": self.copy_fraction_of_peak,
            },
        }


class TensorReport(Struct, frozen=True):
    """One pool tensor: the planner's bytes beside what was allocated (``tensor.nbytes`` and the size of the
    storage behind it) and, on CUDA, the caching-allocator block that holds it."""

    plan: TensorPlan
    nbytes: int
    storage_bytes: int
    block_bytes: int | None = None

    def to_dict(self) -> dict:
        return {
            "name": self.plan.name,
            "role": self.plan.role,
            "shape": list(self.plan.shape),
            "dtype": self.plan.dtype,
            "predicted": {"bytes": self.plan.nbytes, "allocator_bytes": arith.allocator_block(self.plan.nbytes)},
            "measured": {
                "bytes": self.nbytes,
                "storage_bytes": self.storage_bytes,
                "allocator_block_bytes": self.block_bytes,
            },
        }


class MemoryReport(Struct, frozen=True):
    """Predicted pool bytes against the measured growth of every counter that could hold them.

    On CUDA, ``*_delta`` are the growth from just before the pools were allocated to just after:
    ``requested`` (PyTorch allocator, exact bytes asked for), ``allocated`` (``torch.cuda.memory_allocated``:
    whole 512-byte blocks), ``reserved`` (the allocator's cudaMalloc'ed segments) and ``nvml_used`` (the
    device-wide figure). ``context_bytes`` is what creating the CUDA context cost (NVML, before any pool).
    """

    predicted_state: int
    predicted_kv: int
    tensors: tuple[TensorReport, ...]
    requested_delta: int | None = None
    allocated_delta: int | None = None
    reserved_delta: int | None = None
    nvml_used_delta: int | None = None
    context_bytes: int | None = None
    other_processes_bytes: int | None = None

    @property
    def predicted_total(self) -> int:
        return self.predicted_state + self.predicted_kv

    @property
    def predicted_rounded(self) -> int:
        """The prediction as the CUDA allocator books it: each tensor rounded up to 512 bytes."""
        return arith.allocator_rounded(t.plan.nbytes for t in self.tensors)

    @property
    def measured_state(self) -> int:
        return sum(t.storage_bytes for t in self.tensors if t.plan.role == "state")

    @property
    def measured_kv(self) -> int:
        return sum(t.storage_bytes for t in self.tensors if t.plan.role == "kv")

    @property
    def measured_total(self) -> int:
        return self.measured_state + self.measured_kv

    @property
    def block_bytes(self) -> int | None:
        """Σ of the allocator blocks holding the pools (None when the allocator snapshot was unavailable)."""
        blocks = [t.block_bytes for t in self.tensors]
        return None if not blocks or any(b is None for b in blocks) else sum(blocks)

    @property
    def exact(self) -> bool:
        """Allocation equals prediction: every tensor's bytes and storage, their sum, and (on CUDA) the bytes
        the allocator was asked for."""
        per_tensor = all(t.nbytes == t.plan.nbytes == t.storage_bytes for t in self.tensors)
        requested = self.requested_delta is None or self.requested_delta == self.predicted_total
        return per_tensor and self.measured_total == self.predicted_total and requested

    @property
    def rounding_explained(self) -> bool | None:
        """memory_allocated grew by exactly the 512-byte-rounded prediction (None off CUDA)."""
        if self.allocated_delta is None:
            return None
        return self.allocated_delta == self.predicted_rounded

    @property
    def requested_difference(self) -> int | None:
        """Bytes asked of the CUDA allocator minus the prediction (0 when exact)."""
        return arith.difference(self.predicted_total, self.requested_delta)

    @property
    def unsplit_tails(self) -> int | None:
        """Allocated bytes past the 512-byte rounding: tails of blocks the allocator hands out whole because
        what would remain (≤ 1 MiB of a large segment) is too small to split off."""
        return arith.difference(self.predicted_rounded, self.allocated_delta)

    @property
    def segment_slack(self) -> int | None:
        """Reserved but not allocated: segment space the allocator keeps cached for later tensors."""
        return arith.difference(self.allocated_delta, self.reserved_delta)

    @property
    def outside_allocator(self) -> int | None:
        """NVML growth not explained by new allocator segments: driver page granularity, memory other
        processes took or gave back meanwhile."""
        return arith.difference(self.reserved_delta, self.nvml_used_delta)

    def to_dict(self) -> dict:
        return {
            "exact": self.exact,
            "predicted": {
                "state_pool_bytes": self.predicted_state,
                "kv_bytes": self.predicted_kv,
                "total_bytes": self.predicted_total,
                "allocator_rounded_bytes": self.predicted_rounded,
            },
            "measured": {
                "state_pool_bytes": self.measured_state,
                "kv_bytes": self.measured_kv,
                "total_bytes": self.measured_total,
                "allocator_requested_bytes": self.requested_delta,
                "allocator_allocated_bytes": self.allocated_delta,
                "allocator_block_bytes": self.block_bytes,
                "allocator_reserved_bytes": self.reserved_delta,
                "nvml_used_bytes": self.nvml_used_delta,
            },
            "difference": {
                "total_bytes": self.measured_total - self.predicted_total,
                "allocated_vs_rounded_bytes": self.unsplit_tails,
                "reserved_vs_allocated_bytes": self.segment_slack,
                "nvml_vs_reserved_bytes": self.outside_allocator,
            },
            "cuda_context_bytes": self.context_bytes,
            "other_processes_bytes": self.other_processes_bytes,
            "tensors": [t.to_dict() for t in self.tensors],
        }


class KernelResult(Struct, frozen=True):
    """A kernel row: the plan (modelled bytes, FLOPs), the measured seconds, and the ceilings it is set
    against (``ceiling``: measured copy bandwidth; ``peak``: NVML's theoretical figure)."""

    plan: KernelPlan
    seconds: float | None
    ceiling: float | None
    peak: float | None = None

    @property
    def predicted_seconds(self) -> float | None:
        return arith.predicted_seconds(self.plan.nbytes, self.ceiling) if self.plan.runs else None

    @property
    def achieved_bandwidth(self) -> float | None:
        return arith.achieved_bandwidth(self.plan.nbytes, self.seconds)

    @property
    def fraction_of_ceiling(self) -> float | None:
        return arith.fraction(self.achieved_bandwidth, self.ceiling)

    @property
    def fraction_of_peak(self) -> float | None:
        return arith.fraction(self.achieved_bandwidth, self.peak)

    @property
    def tflops(self) -> float | None:
        return arith.tflops(self.plan.flops, self.seconds)

    @property
    def slowdown(self) -> float | None:
        """measured / predicted seconds (1.0 = at the copy ceiling)."""
        return arith.fraction(self.seconds, self.predicted_seconds)

    def to_dict(self) -> dict:
        p = self.plan
        return {
            "kind": p.kind,
            "part": p.part,
            "layers": p.layers,
            "kernel": p.kernel,
            "status": p.status,
            "shape": p.shape_dict(),
            "predicted": {
                "bytes": p.nbytes if p.runs else None,
                "flops": p.flops if p.runs else None,
                "seconds": self.predicted_seconds,
            },
            "measured": {
                "seconds": self.seconds,
                "bandwidth_bytes_per_s": self.achieved_bandwidth,
                "fraction_of_copy": self.fraction_of_ceiling,
                "fraction_of_peak": self.fraction_of_peak,
                "tflop_per_s": self.tflops,
            },
        }


class PhaseReport(Struct, frozen=True):
    """Decode step or prefill: its rows and their sum over the rows that ran."""

    phase: str
    rows: tuple[KernelResult, ...]
    ceiling: float | None

    @property
    def ran(self) -> tuple[KernelResult, ...]:
        return tuple(r for r in self.rows if r.plan.runs and r.seconds is not None)

    @property
    def nbytes(self) -> int:
        return sum(r.plan.nbytes for r in self.ran)

    @property
    def flops(self) -> int:
        return sum(r.plan.flops for r in self.ran)

    @property
    def seconds(self) -> float | None:
        return sum(r.seconds for r in self.ran) if self.ran else None

    @property
    def predicted_seconds(self) -> float | None:
        return arith.predicted_seconds(self.nbytes, self.ceiling) if self.ran else None

    @property
    def achieved_bandwidth(self) -> float | None:
        return arith.achieved_bandwidth(self.nbytes, self.seconds)

    @property
    def fraction_of_ceiling(self) -> float | None:
        return arith.fraction(self.achieved_bandwidth, self.ceiling)

    @property
    def tflops(self) -> float | None:
        return arith.tflops(self.flops, self.seconds)

    @property
    def not_covered(self) -> tuple[str, ...]:
        """``kind part`` of every row with no kernel (their time is not in the totals)."""
        return tuple(f"{r.plan.kind} {r.plan.part}" for r in self.rows if not r.plan.runs)

    def to_dict(self) -> dict:
        return {
            "rows": [r.to_dict() for r in self.rows],
            "predicted": {"bytes": self.nbytes, "flops": self.flops, "seconds": self.predicted_seconds},
            "measured": {
                "seconds": self.seconds,
                "bandwidth_bytes_per_s": self.achieved_bandwidth,
                "fraction_of_copy": self.fraction_of_ceiling,
                "tflop_per_s": self.tflops,
            },
            "not_covered": list(self.not_covered),
        }


def run_notes(w: Workload, memory: MemoryReport) -> list[str]:
    """The notes any run may carry (a backend adds its own): rows without a kernel, unsplit allocator tails."""
    notes: list[str] = []
    missing = sorted({f"{k.kind} {k.part} {k.phase}" for k in w.decode + w.prefill if not k.runs})
    if missing:
        notes.append(f"no kernel for {', '.join(missing)}: those rows have no time and are left out of the totals")
    if memory.unsplit_tails:
        notes.append(
            f"memory_allocated grew {human_bytes(memory.unsplit_tails, exact=True)} past the 512-byte "
            "rounding: blocks handed out whole, tails too small to split"
        )
    return notes


class ProfileReport(Struct, frozen=True):
    model: str
    workload: Workload
    interpret: bool
    device: DeviceReport
    memory: MemoryReport
    decode: PhaseReport
    prefill: PhaseReport
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        w, fp = self.workload, self.workload.fp
        return {
            "schema_version": SCHEMA_VERSION,
            "model": self.model,
            "profiled_spec": w.spec.name,
            "interpret": self.interpret,
            "tp": 1,
            "slots": w.slots,
            "ctx": w.ctx,
            "tokens": w.tokens,
            "chunk_size": w.chunk_size,
            "layers": w.spec.layer_counts,
            "dtypes": {"conv": fp.dtypes.conv, "ssm": fp.dtypes.ssm, "kv": fp.dtypes.kv, "activations": w.act_dtype},
            "device": self.device.to_dict(),
            "memory": self.memory.to_dict(),
            "decode": self.decode.to_dict(),
            "prefill": self.prefill.to_dict(),
            "notes": list(self.notes),
        }
