"""Run a profile: size with the planner, allocate exactly that, time the kernels, free everything.

Order of a run: size the workload → device and free memory → refuse if the prediction does not fit → copy
bandwidth (its buffers freed again) → allocate the pools and read every memory counter → decode rows →
prefill rows → free. The device is a ``Backend`` (``backends``: a CUDA GPU, or the Triton interpreter on
the CPU); a row's kernel call comes from ``rows`` (the shared builders of ``hybridplan.kernels.inputs``).
Every tensor lives in one ``_Arena`` that is emptied in a ``finally``, so an error or Ctrl-C leaves nothing
allocated (the interrupted frames are cleared too, as they would otherwise keep tensors alive). torch and
triton are imported inside functions only.
"""

from __future__ import annotations

import gc
import traceback
from collections.abc import Callable
from typing import Any, Protocol

from msgspec import Struct

from hybridplan.engines import vllm
from hybridplan.errors import PlanError
from hybridplan.profile import arith
from hybridplan.profile.backends import Backend, load_backend
from hybridplan.profile.report import KernelResult, MemoryReport, PhaseReport, ProfileReport, TensorReport, run_notes
from hybridplan.profile.rows import kernel_call
from hybridplan.profile.shrink import CTX, SLOTS, TOKENS, shrink_spec
from hybridplan.profile.workload import (
    DECODE,
    PREFILL,
    KernelPlan,
    Sizes,
    Workload,
    activation_dtype,
    plan_workload,
)
from hybridplan.scenario import DtypeChoice, Scenario, default_ctx, positive
from hybridplan.spec import ModelSpec
from hybridplan.units import human_bytes

#: defaults of a GPU run
GPU_SLOTS, GPU_TOKENS = 256, 8192
#: head-room for allocator segment rounding and the kernels' small metadata tensors
MARGIN = 64 << 20


class Reporter(Protocol):
    """Progress: ``begin`` once with the number of steps, then ``step`` as each starts."""

    def begin(self, total: int) -> None: ...

    def step(self, label: str) -> None: ...


class _Silent:
    def begin(self, total: int) -> None:
        pass

    def step(self, label: str) -> None:
        pass


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


class ProfileRequest(Struct, frozen=True):
    """What `hybridplan profile` was asked: the model, where it runs, and its sizes (None: the defaults of a
    GPU run, or of an interpreter run on the model shrunk to toy sizes)."""

    model: ModelSpec
    gpu: int | None = None
    interpret: bool = False
    slots: int | None = None
    ctx: int | None = None
    tokens: int | None = None
    dtypes: DtypeChoice = DtypeChoice()


def _sized(req: ProfileRequest) -> Workload:
    """The workload of the request's model (shrunk under ``interpret``), sized by the planner (vLLM's
    dtype rules, TP 1)."""
    interpret = req.interpret
    spec = shrink_spec(req.model) if interpret else req.model
    ctx = positive(req.ctx if req.ctx is not None else (CTX if interpret else default_ctx(spec)), "--ctx")
    sc = Scenario(
        spec,
        ctx=ctx,
        dtypes=req.dtypes,
        slots=req.slots if req.slots is not None else (SLOTS if interpret else GPU_SLOTS),
    )
    tokens = positive(req.tokens if req.tokens is not None else (TOKENS if interpret else GPU_TOKENS), "--tokens")
    sc.vllm.release.check_served(spec)
    return plan_workload(
        spec, vllm.footprint(sc), Sizes(sc.slots, ctx, tokens, activation_dtype(spec, req.dtypes.dtype, interpret))
    )


def _check_fits(backend: Backend, w: Workload) -> int | None:
    free = backend.free_bytes()
    if free is None:
        return None
    pred = w.predicted_total
    extra = w.workspace_bytes + backend.harness_bytes + MARGIN
    where = backend.where()
    if pred > free:
        raise PlanError(
            f"the predicted pools need {human_bytes(pred)} (state {human_bytes(w.predicted_state)} for "
            f"{w.slots:,} slots + KV {human_bytes(w.predicted_kv)} at {w.ctx:,} tokens) but {where} has "
            f"{human_bytes(free)} free: {human_bytes(arith.missing_bytes(pred, free))} missing; "
            "lower --slots or --ctx"
        )
    if pred + extra > free:
        raise PlanError(
            f"the predicted pools ({human_bytes(pred)}) fit in the {human_bytes(free)} free on {where}, "
            f"but not with the {human_bytes(extra)} the kernel runs need beside them: "
            f"{human_bytes(arith.missing_bytes(pred + extra, free))} missing; lower --slots, --ctx "
            "or --tokens"
        )
    return free


def _time_copy(backend: Backend, arena: _Arena, nbytes: int) -> float:
    torch = backend.torch
    src = torch.empty(nbytes, dtype=torch.uint8, device=backend.device)
    dst = torch.empty_like(src)
    arena.scratch += [src, dst]
    src.fill_(1)
    return backend.time_copy(lambda: dst.copy_(src))


def _copy_seconds(backend: Backend, arena: _Arena, nbytes: int) -> float:
    """Seconds of one device-to-device copy of ``nbytes``; its two buffers are freed again before returning."""
    seconds = _time_copy(backend, arena, nbytes)  # its frame, and the buffers' last names, are gone here
    arena.clear_scratch()
    backend.empty_cache()
    return seconds


def _allocate(backend: Backend, arena: _Arena, w: Workload) -> MemoryReport:
    torch = backend.torch
    gc.collect()
    backend.empty_cache()
    before = backend.counters()
    for t in w.tensors:
        arena.pools[t.name] = torch.empty(t.shape, dtype=getattr(torch, t.dtype), device=backend.device)
    backend.sync()
    after = backend.counters()
    allocated = [arena.pools[t.name] for t in w.tensors]
    blocks = backend.blocks(allocated)
    tensors = tuple(
        TensorReport(plan=t, nbytes=int(a.nbytes), storage_bytes=int(a.untyped_storage().nbytes()), block_bytes=b)
        for t, a, b in zip(w.tensors, allocated, blocks)
    )
    del allocated

    def delta(key: str) -> int | None:
        a, b = before.get(key), after.get(key)
        return None if a is None or b is None else b - a

    # start every recurrence from zero state (after the counters: zeroing allocates nothing)
    for t in w.tensors:
        if t.role == "state":
            arena.pools[t.name].zero_()
    backend.sync()
    return MemoryReport(
        predicted_state=w.predicted_state,
        predicted_kv=w.predicted_kv,
        tensors=tensors,
        requested_delta=delta("requested"),
        allocated_delta=delta("allocated"),
        reserved_delta=delta("reserved"),
        nvml_used_delta=delta("nvml_used"),
        context_bytes=backend.context_bytes,
        other_processes_bytes=backend.other_processes,
    )


def _kernel_fn(backend: Backend, arena: _Arena, w: Workload, k: KernelPlan) -> Callable[[], None]:
    """Inputs for one row (kept in the arena's scratch) and a closure running the kernel on every layer."""
    torch = backend.torch
    gen = torch.Generator(device=backend.device).manual_seed(0)
    call = kernel_call(k, gen, getattr(torch, w.act_dtype), backend.device)
    arena.scratch.extend(call.held)
    pool = next(arena.pools[t.name] for t in w.tensors if t.role == "state" and t.group == k.group and t.part == k.part)

    def run() -> None:
        for layer in range(k.layers):
            call(pool[layer])

    return run


def _time_row(backend: Backend, arena: _Arena, w: Workload, k: KernelPlan) -> float:
    run = _kernel_fn(backend, arena, w, k)
    try:
        return backend.time(run)
    finally:
        del run
        arena.clear_scratch()
        backend.empty_cache()


def run_profile(req: ProfileRequest, reporter: Reporter | None = None) -> ProfileReport:
    """Profile the model on GPU ``req.gpu`` (default 0), or with ``req.interpret`` its shrunken copy on the
    CPU."""
    model, interpret = req.model, req.interpret
    if interpret and req.gpu is not None:
        raise PlanError("--interpret runs on the CPU: drop --gpu")
    if not model.recurrent:
        raise PlanError(
            f"{model.name} has no recurrent layers: there is nothing for `hybridplan profile` to run "
            "(`hybridplan size` sizes its KV)"
        )
    reporter = reporter or _Silent()
    w = _sized(req)
    backend = load_backend(interpret, req.gpu)
    arena = _Arena()
    runs = w.kernels
    reporter.begin(3 + len(runs))
    try:
        reporter.step(f"device ({backend.label})")
        backend.open()
        free = _check_fits(backend, w)
        reporter.step("copy bandwidth")
        spare = None if free is None else free - backend.harness_bytes - MARGIN
        copy_bytes = backend.copy_size(spare)
        copy_seconds = _copy_seconds(backend, arena, copy_bytes)
        device = backend.device_report(copy_bytes, copy_seconds, free_before_pools=free)
        reporter.step(f"allocate {human_bytes(w.predicted_total)} of pools")
        memory = _allocate(backend, arena, w)
        times: dict[KernelPlan, float] = {}
        for k in runs:
            reporter.step(f"{k.phase} {k.kind} {k.part} × {k.layers}")
            times[k] = _time_row(backend, arena, w, k)
        ceiling, peak = device.copy_bandwidth, device.peak_bandwidth

        def phase(name: str, plans: tuple[KernelPlan, ...]) -> PhaseReport:
            return PhaseReport(name, tuple(KernelResult(p, times.get(p), ceiling, peak) for p in plans), ceiling)

        return ProfileReport(
            model=model.name,
            workload=w,
            interpret=interpret,
            device=device,
            memory=memory,
            decode=phase(DECODE, w.decode),
            prefill=phase(PREFILL, w.prefill),
            notes=backend.notes(w, run_notes(w, memory)),
        )
    except BaseException as exc:
        # the traceback's frames hold tensors: clear them so that the memory really goes back below
        traceback.clear_frames(exc.__traceback__)
        if isinstance(exc, getattr(backend.torch, "OutOfMemoryError", ())):
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else "out of memory"
            raise PlanError(
                f"{backend.where()} ran out of memory although the prediction fit when the run "
                f"started (another process?): {first}"
            ) from None
        raise
    finally:
        arena.release()
        gc.collect()
        try:
            backend.empty_cache()
        finally:
            backend.close()
