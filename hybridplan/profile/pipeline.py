"""Run a profile: size with the planner, allocate exactly that, time the kernels, free everything.

This is the only module of the profiler that touches torch and triton (both imported inside functions).
Two backends run the same steps: ``_Cuda`` on a GPU (CUDA allocator statistics, NVML, ``do_bench``
timings) and ``_Interpreter`` on the CPU through Triton's interpreter (allocation checked against tensor
storage sizes; timings only prove the path runs).

Order of a run: device and free memory → refuse if the prediction does not fit → copy bandwidth (its
buffers freed again) → allocate the pools and read every memory counter → decode rows → prefill rows →
free. Every tensor lives in one ``_Arena`` that is emptied in a ``finally``, so an error or Ctrl-C leaves
nothing allocated (the interrupted frames are cleared too, as they would otherwise keep tensors alive).
"""

from __future__ import annotations

import gc
import os
import platform
import statistics
import time
import traceback
from collections.abc import Callable
from typing import Any, Protocol

from hybridplan.engines import vllm
from hybridplan.errors import PlanError
from hybridplan.profile import arith
from hybridplan.profile.report import (
    CUDA,
    INTERPRETER,
    DeviceReport,
    KernelResult,
    MemoryReport,
    PhaseReport,
    ProfileReport,
    TensorReport,
)
from hybridplan.profile.shrink import CTX, SLOTS, TOKENS, shrink_spec
from hybridplan.profile.workload import (
    DECODE,
    GDN_DECODE,
    KERNEL_DTYPES,
    MAMBA1_DECODE,
    PREFILL,
    KernelPlan,
    Workload,
    plan_workload,
)
from hybridplan.scenario import DtypeChoice, Scenario, default_ctx, positive
from hybridplan.spec import ModelSpec
from hybridplan.units import human_bytes

#: defaults of a GPU run
GPU_SLOTS, GPU_TOKENS = 256, 8192
#: the copy that sets the practical bandwidth ceiling (GPU: far beyond any L2; CPU: far beyond the LLC)
GPU_COPY_BYTES, CPU_COPY_BYTES = 1 << 30, 64 << 20
#: triton.testing.do_bench clears L2 by zeroing a 256 MiB buffer it allocates for the purpose
DO_BENCH_FLUSH = 256 << 20
#: head-room for allocator segment rounding and the kernels' small metadata tensors
MARGIN = 64 << 20

INSTALL_HINT = "pip install 'hybridplan[gpu]'"


class Reporter(Protocol):
    """Progress: ``begin`` once with the number of steps, then ``step`` as each starts."""

    def begin(self, total: int) -> None: ...

    def step(self, label: str) -> None: ...


class _Silent:
    def begin(self, total: int) -> None:
        pass

    def step(self, label: str) -> None:
        pass


# ---------------------------------------------------------------------------------------------------------
# Imports and modes


def _interpreting_triton() -> bool:
    import triton.language.standard as std

    return type(std.sum).__name__ == "InterpretedFunction"


def _load(interpret: bool):
    """torch, with triton loaded in the mode asked for; PlanError when that cannot be had."""
    if interpret:
        # Triton decides at import time whether its functions are interpreted: set this before it loads.
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        import torch
        import triton  # noqa: F401
    except ImportError as exc:
        raise PlanError(f"`hybridplan profile` needs torch and triton ({exc.name} is missing): {INSTALL_HINT}") \
            from None
    if not interpret:
        if not torch.cuda.is_available():
            raise PlanError("no CUDA GPU is available (torch.cuda.is_available() is False); "
                            "`--interpret` runs the same pipeline at a tiny size on the CPU")
        if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
            raise PlanError("TRITON_INTERPRET is set: unset it to profile on the GPU (or use --interpret)")
    if interpret and not _interpreting_triton():
        raise PlanError("--interpret needs triton loaded with TRITON_INTERPRET=1, but this process loaded it "
                        "for the GPU already: run it in a fresh process or export TRITON_INTERPRET=1")
    return torch


def _torch_dtype(torch, name: str):
    return getattr(torch, name)


# ---------------------------------------------------------------------------------------------------------
# Backends


class _Backend:
    kind = ""
    harness_bytes = 0

    def __init__(self, torch) -> None:
        self.torch = torch
        self.device = None

    def open(self) -> None: ...

    def close(self) -> None: ...

    def free_bytes(self) -> int | None: ...

    def where(self) -> str: ...

    def device_report(self, copy_bytes: int, copy_seconds: float | None) -> DeviceReport: ...

    def copy_size(self, spare: int | None) -> int: ...

    def time(self, fn: Callable[[], Any], *, long: bool = False) -> float: ...

    def sync(self) -> None: ...

    def counters(self) -> dict: ...

    def blocks(self, tensors) -> list[int | None]:
        return [None] * len(tensors)

    def empty_cache(self) -> None: ...


class _Cuda(_Backend):
    kind = CUDA
    harness_bytes = DO_BENCH_FLUSH

    def __init__(self, torch, index: int) -> None:
        super().__init__(torch)
        self.index = index
        self.nvml = None
        self.context_bytes: int | None = None
        self.other_processes: int | None = None
        self.free_before_pools: int | None = None

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

    def device_report(self, copy_bytes: int, copy_seconds: float | None) -> DeviceReport:
        reading = self.nvml.read() if self.nvml else None
        free, total = self.torch.cuda.mem_get_info(self.device)
        return DeviceReport(backend=CUDA, index=self.index, name=(reading.name if reading and reading.name
                                                                  else self.props.name),
                            total_bytes=int(total), free_bytes=self.free_before_pools or int(free),
                            memory_clock_mhz=reading.memory_clock_mhz if reading else None,
                            bus_width_bits=reading.bus_width_bits if reading else None,
                            copy_bytes=copy_bytes, copy_seconds=copy_seconds, nvml=reading is not None)

    def copy_size(self, spare: int | None) -> int:
        # two buffers must fit beside what the run needs
        n = GPU_COPY_BYTES if spare is None else min(GPU_COPY_BYTES, max(spare, 0) // 2)
        return max(n // (1 << 20), 1) << 20

    def time(self, fn, *, long: bool = False) -> float:
        """Median seconds (``do_bench``: L2 cleared before every call); ``long`` as the kernel benchmarks time
        their copy ceiling."""
        from hybridplan.kernels import bench

        return bench.time_cuda(fn, warmup_ms=50, rep_ms=200) if long else bench.time_cuda(fn)

    def sync(self) -> None:
        self.torch.cuda.synchronize(self.device)

    def counters(self) -> dict:
        torch = self.torch
        stats = torch.cuda.memory_stats(self.device)
        return {"requested": stats.get("requested_bytes.all.current"),
                "allocated": torch.cuda.memory_allocated(self.device),
                "reserved": torch.cuda.memory_reserved(self.device),
                "nvml_used": self.nvml.used() if self.nvml else None}

    def blocks(self, tensors) -> list[int | None]:
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


class _Interpreter(_Backend):
    kind = INTERPRETER

    def open(self) -> None:
        self.device = self.torch.device("cpu")

    def where(self) -> str:
        return "this CPU"

    def free_bytes(self) -> int | None:
        return _cpu_memory()[1]

    def device_report(self, copy_bytes: int, copy_seconds: float | None) -> DeviceReport:
        total, free = _cpu_memory()
        return DeviceReport(backend=INTERPRETER, index=None, name=f"{_cpu_name()} (Triton interpreter)",
                            total_bytes=total, free_bytes=free, copy_bytes=copy_bytes, copy_seconds=copy_seconds)

    def copy_size(self, spare: int | None) -> int:
        return CPU_COPY_BYTES

    def time(self, fn, *, long: bool = False) -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    def sync(self) -> None:
        pass

    def counters(self) -> dict:
        return {"requested": None, "allocated": None, "reserved": None, "nvml_used": None}

    def empty_cache(self) -> None:
        pass


# ---------------------------------------------------------------------------------------------------------
# The run


class _Arena:
    """Owns every tensor of a run, so that one ``release()`` drops them all."""

    def __init__(self) -> None:
        self.pools: dict[str, Any] = {}
        self.scratch: list[Any] = []

    def clear_scratch(self) -> None:
        self.scratch.clear()

    def release(self) -> None:
        self.scratch.clear()
        self.pools.clear()


def _time_copy(backend: _Backend, arena: _Arena, nbytes: int) -> float:
    torch = backend.torch
    src = torch.empty(nbytes, dtype=torch.uint8, device=backend.device)
    dst = torch.empty_like(src)
    arena.scratch += [src, dst]
    src.fill_(1)
    if backend.kind == CUDA:
        return backend.time(lambda: dst.copy_(src), long=True)
    return statistics.median(backend.time(lambda: dst.copy_(src)) for _ in range(5))


def _copy_seconds(backend: _Backend, arena: _Arena, nbytes: int) -> float:
    """Seconds of one device-to-device copy of ``nbytes``; its two buffers are freed again before returning."""
    seconds = _time_copy(backend, arena, nbytes)  # its frame, and the buffers' last names, are gone here
    arena.clear_scratch()
    backend.empty_cache()
    return seconds


def _allocate(backend: _Backend, arena: _Arena, w: Workload) -> MemoryReport:
    torch = backend.torch
    gc.collect()
    backend.empty_cache()
    before = backend.counters()
    for t in w.tensors:
        arena.pools[t.name] = torch.empty(t.shape, dtype=_torch_dtype(torch, t.dtype), device=backend.device)
    backend.sync()
    after = backend.counters()
    allocated = [arena.pools[t.name] for t in w.tensors]
    blocks = backend.blocks(allocated)
    tensors = tuple(TensorReport(plan=t, nbytes=int(a.nbytes), storage_bytes=int(a.untyped_storage().nbytes()),
                                 block_bytes=b) for t, a, b in zip(w.tensors, allocated, blocks))
    del allocated

    def delta(key: str) -> int | None:
        a, b = before.get(key), after.get(key)
        return None if a is None or b is None else b - a

    # start every recurrence from zero state (after the counters: zeroing allocates nothing)
    for t in w.tensors:
        if t.role == "state":
            arena.pools[t.name].zero_()
    backend.sync()
    return MemoryReport(predicted_state=w.predicted_state, predicted_kv=w.predicted_kv, tensors=tensors,
                        requested_delta=delta("requested"), allocated_delta=delta("allocated"),
                        reserved_delta=delta("reserved"), nvml_used_delta=delta("nvml_used"),
                        context_bytes=getattr(backend, "context_bytes", None),
                        other_processes_bytes=getattr(backend, "other_processes", None))


def _pool(arena: _Arena, w: Workload, k: KernelPlan):
    name = next(t.name for t in w.tensors if t.role == "state" and t.group == k.group and t.part == k.part)
    return arena.pools[name]


def _kernel_fn(backend: _Backend, arena: _Arena, w: Workload, k: KernelPlan) -> Callable[[], None]:
    """Inputs for one row (kept in the arena's scratch) and a closure running the kernel on every layer."""
    import hybridplan.kernels as hk

    torch = backend.torch
    dev, act, f32 = backend.device, _torch_dtype(torch, w.act_dtype), torch.float32
    gen = torch.Generator(device=dev).manual_seed(0)

    def keep(t):
        arena.scratch.append(t)
        return t

    def rand(*shape, dtype=act, scale=1.0, shift=0.0):
        return keep(torch.randn(shape, generator=gen, device=dev, dtype=dtype).mul_(scale).add_(shift))

    def empty(*shape):
        return keep(torch.empty(shape, dtype=act, device=dev))

    def one_sequence():
        """cu_seqlens, slot and has-initial-state of a prefill of all ``w.tokens`` into slot 0."""
        return (keep(torch.tensor([0, w.tokens], dtype=torch.int32, device=dev)),
                keep(torch.zeros(1, dtype=torch.int32, device=dev)), keep(torch.ones(1, dtype=torch.bool, device=dev)))

    pool = _pool(arena, w, k)
    layers, s, b = k.layers, k.shape, w.slots

    def every_layer(step: Callable[[Any], object]) -> Callable[[], None]:
        def run() -> None:
            for layer in range(layers):
                step(pool[layer])
        return run

    idx = keep(torch.arange(b, dtype=torch.int32, device=dev)) if k.phase == DECODE else None
    if k.part == "conv":
        dim, width = s["dim"], s["width"]
        weight, bias = rand(dim, width, scale=0.5), rand(dim, scale=0.1)
        activation = None if k.kind == "short_conv" else "silu"
        if k.phase == DECODE:
            x, y = rand(b, dim), empty(b, dim)
            return every_layer(lambda p: hk.causal_conv1d_update(x, p, weight, bias, activation,
                                                                 conv_state_indices=idx, out=y))
        x, y = rand(w.tokens, dim), empty(w.tokens, dim)
        cu, slot, init = one_sequence()
        meta = keep(hk.conv_prefill_metadata(cu, device=dev))
        return every_layer(lambda p: hk.causal_conv1d_prefill(x, weight, bias, cu, p, slot, init, activation, out=y,
                                                              metadata=meta))

    if k.kernel == GDN_DECODE:
        hv, hkeys, vdim, kdim = s["v_heads"], s["k_heads"], s["vdim"], s["kdim"]
        q, key, v = rand(b, hkeys, kdim), rand(b, hkeys, kdim), rand(b, hv, vdim)
        log_decay = rand(b, hv, dtype=f32, scale=0.5).abs_().neg_()  # gates <= 0
        beta = rand(b, hv, dtype=f32).sigmoid_()
        y = empty(b, hv, vdim)
        return every_layer(lambda p: hk.gated_delta_rule_update(p, q, key, v, log_decay, beta,
                                                                state_batch_indices=idx, out=y))

    if k.kernel == MAMBA1_DECODE:
        dim, dstate = s["dim"], s["dstate"]
        x, z, dt = rand(b, dim), rand(b, dim), rand(b, dim, scale=0.5)
        A1 = rand(dim, dstate, dtype=f32, scale=0.5, shift=1.0).abs_().neg_()  # a decay rate per column, < 0
        B1, C1 = rand(b, dstate, scale=0.3), rand(b, dstate, scale=0.3)
        D1, bias1 = rand(dim, dtype=f32, scale=0.1, shift=1.0), rand(dim, dtype=f32, scale=0.5, shift=-3.0)
        y = empty(b, dim)
        return every_layer(lambda p: hk.mamba1_state_update(p, x, dt, A1, B1, C1, D=D1, z=z, dt_bias=bias1,
                                                            dt_softplus=True, state_batch_indices=idx, out=y))

    nheads, headdim, dstate, ngroups = s["nheads"], s["headdim"], s["dstate"], s["ngroups"]
    A = rand(nheads, dtype=f32, scale=0.25, shift=1.0).abs_().neg_()  # decay rates < 0
    D = rand(nheads, dtype=f32, scale=0.1, shift=1.0)
    dt_bias = rand(nheads, dtype=f32, scale=0.5, shift=-3.0)
    n = b if k.phase == DECODE else w.tokens
    x, z, dt = rand(n, nheads, headdim), rand(n, nheads, headdim), rand(n, nheads)
    B, C = rand(n, ngroups, dstate, scale=0.3), rand(n, ngroups, dstate, scale=0.3)
    y = empty(n, nheads, headdim)
    if k.phase == DECODE:
        return every_layer(lambda p: hk.selective_state_update(p, x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias,
                                                               dt_softplus=True, state_batch_indices=idx, out=y))
    chunk = w.chunk_size
    cu, slot, init = one_sequence()
    meta = keep(hk.ssd_chunk_metadata(cu, chunk, device=dev))
    return every_layer(lambda p: hk.ssd_chunk_scan(x, dt, A, B, C, chunk, cu, p, slot, init, D=D, z=z,
                                                   dt_bias=dt_bias, dt_softplus=True, out=y, metadata=meta))


def _time_row(backend: _Backend, arena: _Arena, w: Workload, k: KernelPlan) -> float:
    run = _kernel_fn(backend, arena, w, k)
    try:
        if backend.kind == CUDA:
            run()  # compiles, and surfaces an error before do_bench hides it in a loop
            backend.sync()
        return backend.time(run)
    finally:
        del run
        arena.clear_scratch()
        backend.empty_cache()


def _check_fits(backend: _Backend, w: Workload) -> int | None:
    free = backend.free_bytes()
    if free is None:
        return None
    pred = w.predicted_total
    extra = w.workspace_bytes + backend.harness_bytes + MARGIN
    where = backend.where()
    if pred > free:
        raise PlanError(f"the predicted pools need {human_bytes(pred)} (state {human_bytes(w.predicted_state)} for "
                        f"{w.slots:,} slots + KV {human_bytes(w.predicted_kv)} at {w.ctx:,} tokens) but {where} has "
                        f"{human_bytes(free)} free: {human_bytes(arith.missing_bytes(pred, free))} missing; "
                        "lower --slots or --ctx")
    if pred + extra > free:
        raise PlanError(f"the predicted pools ({human_bytes(pred)}) fit in the {human_bytes(free)} free on {where}, "
                        f"but not with the {human_bytes(extra)} the kernel runs need beside them: "
                        f"{human_bytes(arith.missing_bytes(pred + extra, free))} missing; lower --slots, --ctx "
                        "or --tokens")
    return free


def _act_dtype(spec: ModelSpec, choice: DtypeChoice, interpret: bool) -> str:
    if interpret:
        return "float32"  # the interpreter's 16-bit dots are not reliable; fp32 runs are exact
    name = choice.dtype or spec.model_dtype
    from hybridplan.dtypes import parse_dtype

    name = parse_dtype(name, what="--dtype")
    return name if name in KERNEL_DTYPES else "bfloat16"


def _notes(w: Workload, backend: _Backend, memory: MemoryReport) -> tuple[str, ...]:
    notes: list[str] = []
    if backend.kind == INTERPRETER:
        notes.append(f"--interpret: {w.spec.name} is {w.spec.name.removesuffix('-tiny')} shrunk to toy sizes; "
                     "timings measure the Triton interpreter on the CPU, not a GPU")
    missing = sorted({f"{k.kind} {k.part} {k.phase}" for k in w.decode + w.prefill if not k.runs})
    if missing:
        notes.append(f"no kernel for {', '.join(missing)}: those rows have no time and are left out of the totals")
    if memory.unsplit_tails:
        notes.append(f"memory_allocated grew {human_bytes(memory.unsplit_tails, exact=True)} past the 512-byte "
                     "rounding: blocks handed out whole, tails too small to split")
    if w.slots < 64 and backend.kind == CUDA:
        notes.append("few slots: decode kernels this small are bound by launch latency, not bandwidth")
    return tuple(notes)


def run_profile(model: ModelSpec, *, gpu: int | None = None, interpret: bool = False, slots: int | None = None,
                ctx: int | None = None, tokens: int | None = None, choice: DtypeChoice = DtypeChoice(),
                reporter: Reporter | None = None) -> ProfileReport:
    """Profile ``model`` on GPU ``gpu`` (default 0), or with ``interpret`` its shrunken copy on the CPU."""
    if interpret and gpu is not None:
        raise PlanError("--interpret runs on the CPU: drop --gpu")
    if not model.recurrent:
        raise PlanError(f"{model.name} has no recurrent layers: there is nothing for `hybridplan profile` to run "
                        "(`hybridplan size` sizes its KV)")
    reporter = reporter or _Silent()
    spec = shrink_spec(model) if interpret else model
    slots = positive(slots if slots is not None else (SLOTS if interpret else GPU_SLOTS), "--slots")
    ctx = positive(ctx if ctx is not None else (CTX if interpret else default_ctx(spec)), "--ctx")
    tokens = positive(tokens if tokens is not None else (TOKENS if interpret else GPU_TOKENS), "--tokens")
    vllm.NEWEST.check_served(spec)
    fp = vllm.footprint(Scenario(spec, ctx=ctx, dtypes=choice))
    w = plan_workload(spec, fp, slots=slots, ctx=ctx, tokens=tokens, chunk_size=None,
                      act_dtype=_act_dtype(spec, choice, interpret))

    torch = _load(interpret)
    backend: _Backend = _Interpreter(torch) if interpret else _Cuda(torch, 0 if gpu is None else gpu)
    arena = _Arena()
    runs = w.kernels
    reporter.begin(3 + len(runs))
    try:
        reporter.step(f"device ({'CPU, Triton interpreter' if interpret else f'GPU {backend.index}'})")
        backend.open()
        free = _check_fits(backend, w)
        if isinstance(backend, _Cuda):
            backend.free_before_pools = free
        reporter.step("copy bandwidth")
        spare = None if free is None else free - backend.harness_bytes - MARGIN
        copy_bytes = backend.copy_size(spare)
        copy_seconds = _copy_seconds(backend, arena, copy_bytes)
        device = backend.device_report(copy_bytes, copy_seconds)
        reporter.step(f"allocate {human_bytes(w.predicted_total)} of pools")
        memory = _allocate(backend, arena, w)
        times: dict[KernelPlan, float] = {}
        for k in runs:
            reporter.step(f"{k.phase} {k.kind} {k.part} × {k.layers}")
            times[k] = _time_row(backend, arena, w, k)
        ceiling, peak = device.copy_bandwidth, device.peak_bandwidth

        def phase(name: str, plans: tuple[KernelPlan, ...]) -> PhaseReport:
            return PhaseReport(name, tuple(KernelResult(p, times.get(p), ceiling, peak) for p in plans), ceiling)

        return ProfileReport(model=model.name, workload=w, interpret=interpret, device=device, memory=memory,
                             decode=phase(DECODE, w.decode), prefill=phase(PREFILL, w.prefill),
                             notes=_notes(w, backend, memory))
    except BaseException as exc:
        # the traceback's frames hold tensors: clear them so that the memory really goes back below
        traceback.clear_frames(exc.__traceback__)
        if isinstance(exc, getattr(torch, "OutOfMemoryError", ())):
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else "out of memory"
            raise PlanError(f"{backend.where()} ran out of memory although the prediction fit when the run "
                            f"started (another process?): {first}") from None
        raise
    finally:
        arena.release()
        gc.collect()
        try:
            backend.empty_cache()
        finally:
            backend.close()

