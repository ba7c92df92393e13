"""What a profile allocates and runs, decided from the planner's footprint alone (pure; no torch).

* Pools: one tensor per state kind and layer group, of shape ``(layers, slots, *state_shape)`` in the
  planner's dtype, so that their bytes add up to ``Footprint.pool_bytes(slots)``; one KV tensor per attention
  group holding ``ctx`` tokens (or the window) for each of its layers, adding up to ``kv_bytes_at(ctx)``.
* Kernels: for every recurrent layer group, a decode step over all slots and a prefill of ``tokens`` tokens,
  split into the conv part (the depthwise causal conv window, which every family with a conv state shares)
  and the SSM part: Mamba-2 decode and prefill, Mamba-1 and Gated DeltaNet decode; the other recurrences
  (and the chunked prefill of Mamba-1 and Gated DeltaNet) have no kernel here and are reported as such.
  Modelled bytes and FLOPs come from ``hybridplan.kernels.bench``. A row's shape is typed: the layer's
  ``dims`` (one small record per family) and its ``launch`` (a decode ``Step`` or a ``Prefill``).
"""

from __future__ import annotations

from math import prod
from typing import NamedTuple

from msgspec import Struct
from msgspec.structs import fields

from hybridplan.dtypes import parse_dtype, size_of
from hybridplan.errors import PlanError
from hybridplan.kernels import bench
from hybridplan.memory import Footprint, KVGroup, StateGroup
from hybridplan.spec import MLA, Attention, GatedDeltaNet, Mamba1, Mamba2, ModelSpec, kv_heads_per_rank

#: state dtypes the kernels read and write
KERNEL_DTYPES = ("float32", "bfloat16", "float16")
#: bytes of the int32 slot index / metadata entries
INDEX_BYTES = 4
#: chunk size when the model's config names none (vLLM's fallback)
DEFAULT_CHUNK = 2048

DECODE, PREFILL = "decode", "prefill"
CONV_KERNELS = {DECODE: "causal_conv1d_update", PREFILL: "causal_conv1d_prefill"}
SSM_KERNELS = {DECODE: "selective_state_update", PREFILL: "ssd_chunk_scan"}
GDN_DECODE = "gated_delta_rule_update"
MAMBA1_DECODE = "mamba1_state_update"


class TensorPlan(Struct, frozen=True):
    """One tensor the profile allocates. ``role`` is "state" or "kv"; ``group`` indexes Footprint.state/kv."""

    name: str
    role: str
    part: str
    group: int
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        return prod(self.shape) * size_of(self.dtype)


class _Fields:
    """A frozen record whose fields, in order, are what ``to_dict`` writes (tuples as lists, None left out)."""

    def to_dict(self) -> dict:
        out = {}
        for f in fields(self):  # type: ignore[arg-type]  # every subclass is a frozen record
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = list(value) if isinstance(value, tuple) else value
        return out


class ConvDims(_Fields, Struct, frozen=True):
    """The depthwise causal conv: ``dim`` channels, ``width`` taps (its state keeps the last width - 1)."""

    dim: int
    width: int


class Mamba2Dims(_Fields, Struct, frozen=True):
    """Mamba-2's SSM: state (nheads, headdim, dstate); B and C shared by heads in ``ngroups`` groups."""

    nheads: int
    headdim: int
    dstate: int
    ngroups: int


class Mamba1Dims(_Fields, Struct, frozen=True):
    """Mamba-1's SSM: state (dim, dstate), a decay rate per state element."""

    dim: int
    dstate: int


class GdnDims(_Fields, Struct, frozen=True):
    """Gated DeltaNet: state (v_heads, vdim, kdim); q and k have ``k_heads`` heads."""

    v_heads: int
    k_heads: int
    vdim: int
    kdim: int


class StateDims(_Fields, Struct, frozen=True):
    """A recurrence no kernel here runs: only the shape of its per-slot state."""

    state: tuple[int, ...]


Dims = ConvDims | Mamba2Dims | Mamba1Dims | GdnDims | StateDims


class Step(_Fields, Struct, frozen=True):
    """A decode step: one token for each of ``batch`` slots."""

    batch: int


class Prefill(_Fields, Struct, frozen=True):
    """A prefill of ``tokens`` tokens in ``seqs`` sequences; ``chunk`` for the chunked scan only."""

    tokens: int
    seqs: int = 1
    chunk: int | None = None


class KernelPlan(Struct, frozen=True):
    """One row of the bandwidth tables: a kernel over every layer of one recurrent group.

    ``dims`` are the layer's, ``launch`` what one call covers (None when no kernel runs). ``nbytes``/``flops``
    are for all ``layers`` together; ``workspace`` is what one call allocates besides the pools (inputs,
    outputs, the kernel's own intermediates). ``status`` is "ok" when it runs, else why not.
    """

    phase: str
    kind: str
    part: str
    group: int
    layers: int
    kernel: str | None
    status: str
    dims: Dims
    launch: Step | Prefill | None = None
    nbytes: int = 0
    flops: int = 0
    workspace: int = 0

    @property
    def runs(self) -> bool:
        return self.status == "ok"

    def shape_dict(self) -> dict:
        """The launch's fields, then the dims' (the ``shape`` of the JSON report)."""
        return {**(self.launch.to_dict() if self.launch else {}), **self.dims.to_dict()}


class Workload(Struct, frozen=True):
    spec: ModelSpec
    fp: Footprint
    slots: int
    ctx: int
    tokens: int
    chunk_size: int
    act_dtype: str
    tensors: tuple[TensorPlan, ...]
    decode: tuple[KernelPlan, ...]
    prefill: tuple[KernelPlan, ...]

    @property
    def predicted_state(self) -> int:
        return self.fp.pool_bytes(self.slots)

    @property
    def predicted_kv(self) -> int:
        return self.fp.kv_bytes_at(self.ctx)

    @property
    def predicted_total(self) -> int:
        return self.predicted_state + self.predicted_kv

    @property
    def workspace_bytes(self) -> int:
        """The largest working set of any one kernel row (rows run one after another and free their inputs)."""
        return max((k.workspace for k in self.decode + self.prefill if k.runs), default=0)

    @property
    def kernels(self) -> tuple[KernelPlan, ...]:
        return tuple(k for k in self.decode + self.prefill if k.runs)


def _distinct(mixers) -> list:
    return list(dict.fromkeys(mixers))


def _pair(spec: ModelSpec, fp: Footprint) -> tuple[list[tuple[StateGroup, object]], list[tuple[KVGroup, object]]]:
    """Each footprint group with the mixer it was sized from (``footprint`` groups mixers in layer order)."""
    rec, att = _distinct(spec.recurrent), _distinct(spec.attention)
    if len(rec) != len(fp.state) or len(att) != len(fp.kv):
        raise PlanError(f"internal: footprint of {spec.name} does not match its mixers")
    for g, m in zip(fp.state, rec):
        if g.kind != m.kind:
            raise PlanError(f"internal: footprint group {g.kind} paired with a {m.kind} mixer")
    return list(zip(fp.state, rec)), list(zip(fp.kv, att))


def _names(kinds: list[str]) -> list[str]:
    """``mamba2``, or ``mamba2#0``/``mamba2#1`` when a kind has more than one group."""
    return [k if kinds.count(k) == 1 else f"{k}#{kinds[:i].count(k)}" for i, k in enumerate(kinds)]


def _kv_shape(g: KVGroup, mixer, tokens: int) -> tuple[int, ...]:
    per_token = g.bytes_per_token_per_layer // size_of(g.dtype)
    shape: tuple[int, ...]
    if isinstance(mixer, Attention):
        shape = (g.count, 2, tokens, kv_heads_per_rank(mixer.num_heads, mixer.num_kv_heads, 1), mixer.head_dim)
    elif isinstance(mixer, MLA):
        shape = (g.count, tokens, mixer.kv_lora_rank + mixer.qk_rope_head_dim)
    else:
        shape = (g.count, tokens, per_token)
    if prod(shape[1:]) != tokens * per_token:  # never for the shipped mixers; keep the planner's bytes
        shape = (g.count, tokens, per_token)
    return shape


def pool_tensors(spec: ModelSpec, fp: Footprint, slots: int, ctx: int) -> tuple[TensorPlan, ...]:
    """The pools at the planner's shapes and dtypes; their bytes sum to pool_bytes(slots) + kv_bytes_at(ctx)."""
    states, kvs = _pair(spec, fp)
    out: list[TensorPlan] = []
    for i, ((g, _), name) in enumerate(zip(states, _names([g.kind for g, _ in states]))):
        if g.conv_shape:
            out.append(TensorPlan(f"{name}.conv", "state", "conv", i, (g.count, slots, *g.conv_shape), g.conv_dtype))
        if g.ssm_shape:
            out.append(TensorPlan(f"{name}.ssm", "state", "ssm", i, (g.count, slots, *g.ssm_shape), g.ssm_dtype))
    for i, ((k, m), name) in enumerate(zip(kvs, _names([k.kind for k, _ in kvs]))):
        out.append(TensorPlan(f"{name}.kv", "kv", "kv", i, _kv_shape(k, m, k.tokens_kept(ctx)), k.dtype))
    return tuple(out)


def _conv_row(phase: str, i: int, g: StateGroup, z: RowSizes) -> KernelPlan:
    slots, tokens, _, act = z
    dim, window = g.conv_shape
    width = window + 1
    dims = ConvDims(dim, width)
    if g.conv_dtype not in KERNEL_DTYPES:
        return KernelPlan(phase, g.kind, "conv", i, g.count, None, f"no kernel for {g.conv_dtype} state", dims)
    sb = size_of(g.conv_dtype)
    weights = dim * (width + 1) * act
    launch: Step | Prefill
    if phase == DECODE:
        launch = Step(slots)
        per_layer = bench.conv_update_bytes(slots, dim, width, state_bytes=sb, io_bytes=act, weight_bytes=act)
        flops = 2 * slots * dim * width
        work = 2 * slots * dim * act + weights + slots * INDEX_BYTES
    else:
        launch = Prefill(tokens)
        per_layer = bench.conv_prefill_bytes(tokens, 1, dim, width, state_bytes=sb, io_bytes=act, weight_bytes=act)
        flops = 2 * tokens * dim * width
        work = 2 * tokens * dim * act + weights + (tokens + 8) * INDEX_BYTES
    return KernelPlan(
        phase,
        g.kind,
        "conv",
        i,
        g.count,
        CONV_KERNELS[phase],
        "ok",
        dims,
        launch,
        g.count * per_layer,
        g.count * flops,
        work,
    )


def _ssm_without_kernel(phase: str, i: int, g: StateGroup, dims: Dims, *, decode_only: bool) -> KernelPlan | None:
    """The row of an SSM part no kernel here runs (a prefill of a decode-only family, or a state dtype the
    kernels do not take), with why; None when it runs."""
    if decode_only and phase != DECODE:
        return KernelPlan(phase, g.kind, "ssm", i, g.count, None, "no kernel", dims)
    if g.ssm_dtype not in KERNEL_DTYPES:
        return KernelPlan(phase, g.kind, "ssm", i, g.count, None, f"no kernel for {g.ssm_dtype} state", dims)
    return None


def _gdn_row(phase: str, i: int, g: StateGroup, mixer: GatedDeltaNet, z: RowSizes) -> KernelPlan:
    slots, _, _, act = z
    hv, vdim, kdim = g.ssm_shape
    dims = GdnDims(hv, mixer.num_k_heads, vdim, kdim)
    blocked = _ssm_without_kernel(phase, i, g, dims, decode_only=True)
    if blocked:
        return blocked
    hk = dims.k_heads
    per_layer = bench.gdn_update_bytes(slots, hv, hk, vdim, kdim, state_bytes=size_of(g.ssm_dtype), io_bytes=act)
    work = (2 * slots * hk * kdim + 2 * slots * hv * vdim) * act + 2 * slots * hv * 4 + slots * INDEX_BYTES
    return KernelPlan(
        phase,
        g.kind,
        "ssm",
        i,
        g.count,
        GDN_DECODE,
        "ok",
        dims,
        Step(slots),
        g.count * per_layer,
        g.count * bench.gdn_update_flops(slots, hv, vdim, kdim),
        work,
    )


def _mamba1_row(phase: str, i: int, g: StateGroup, z: RowSizes) -> KernelPlan:
    slots, _, _, act = z
    dim, dstate = g.ssm_shape
    dims = Mamba1Dims(dim, dstate)
    blocked = _ssm_without_kernel(phase, i, g, dims, decode_only=True)
    if blocked:
        return blocked
    per_layer = bench.mamba1_update_bytes(slots, dim, dstate, state_bytes=size_of(g.ssm_dtype), io_bytes=act)
    work = (4 * slots * dim + 2 * slots * dstate) * act + (dim * dstate + 2 * dim) * 4 + slots * INDEX_BYTES
    return KernelPlan(
        phase,
        g.kind,
        "ssm",
        i,
        g.count,
        MAMBA1_DECODE,
        "ok",
        dims,
        Step(slots),
        g.count * per_layer,
        g.count * bench.mamba1_update_flops(slots, dim, dstate),
        work,
    )


def _ssm_row(phase: str, i: int, g: StateGroup, mixer, z: RowSizes) -> KernelPlan:
    if isinstance(mixer, GatedDeltaNet):
        return _gdn_row(phase, i, g, mixer, z)
    if isinstance(mixer, Mamba1):
        return _mamba1_row(phase, i, g, z)
    slots, tokens, chunk, act = z
    if not isinstance(mixer, Mamba2):
        return KernelPlan(phase, g.kind, "ssm", i, g.count, None, "no kernel", StateDims(tuple(g.ssm_shape)))
    nheads, headdim, dstate = g.ssm_shape
    ngroups = mixer.padded_groups(1)
    dims = Mamba2Dims(nheads, headdim, dstate, ngroups)
    blocked = _ssm_without_kernel(phase, i, g, dims, decode_only=False)
    if blocked:
        return blocked
    sb = size_of(g.ssm_dtype)
    params = 3 * nheads * 4
    launch: Step | Prefill
    if phase == DECODE:
        launch = Step(slots)
        per_layer = bench.state_update_bytes(slots, nheads, headdim, dstate, ngroups, state_bytes=sb, io_bytes=act)
        flops = bench.state_update_flops(slots, nheads, headdim, dstate)
        work = (
            (3 * slots * nheads * headdim + slots * nheads + 2 * slots * ngroups * dstate) * act
            + params
            + slots * INDEX_BYTES
        )
    else:
        launch = Prefill(tokens, chunk=chunk)
        per_layer = bench.chunk_scan_bytes(tokens, 1, nheads, headdim, dstate, ngroups, io_bytes=act, state_bytes=sb)
        flops = bench.chunk_scan_flops([tokens], chunk, nheads, headdim, dstate, ngroups)
        nchunks = -(-tokens // chunk)
        inter = (
            2 * nchunks * nheads * chunk + nchunks * ngroups * chunk * chunk + nchunks * nheads * headdim * dstate
        ) * 4 + nchunks * nheads * headdim * dstate * max(act, 4)
        work = (
            (3 * tokens * nheads * headdim + tokens * nheads + 2 * tokens * ngroups * dstate) * act
            + params
            + inter
            + (3 * nchunks + 8) * INDEX_BYTES
        )
    return KernelPlan(
        phase,
        g.kind,
        "ssm",
        i,
        g.count,
        SSM_KERNELS[phase],
        "ok",
        dims,
        launch,
        g.count * per_layer,
        g.count * flops,
        work,
    )


class RowSizes(NamedTuple):
    """What every kernel row is sized by: slots stepped at decode, prefill tokens, the scan's chunk, and the
    activations' bytes per element."""

    slots: int
    tokens: int
    chunk: int
    act: int


def kernel_rows(spec: ModelSpec, fp: Footprint, phase: str, z: RowSizes) -> tuple[KernelPlan, ...]:
    states, _ = _pair(spec, fp)
    rows: list[KernelPlan] = []
    for i, (g, mixer) in enumerate(states):
        if g.conv_shape:
            rows.append(_conv_row(phase, i, g, z))
        if g.ssm_shape:
            rows.append(_ssm_row(phase, i, g, mixer, z))
    return tuple(rows)


def activation_dtype(spec: ModelSpec, dtype: str | None, interpret: bool) -> str:
    """The kernels' activation dtype: the model's (or ``--dtype``), bf16 where the kernels take no such dtype;
    fp32 under the interpreter, whose 16-bit dots are not reliable (fp32 runs are exact)."""
    if interpret:
        return "float32"
    name = parse_dtype(dtype or spec.model_dtype, what="--dtype")
    return name if name in KERNEL_DTYPES else "bfloat16"


class Sizes(Struct, frozen=True):
    """What a profile is sized by: state slots, KV context, prefill tokens, the activation dtype, and the
    chunk of the prefill scan (None: the model's)."""

    slots: int
    ctx: int
    tokens: int
    act_dtype: str
    chunk_size: int | None = None


def plan_workload(spec: ModelSpec, fp: Footprint, sizes: Sizes) -> Workload:
    if fp.tp != 1 or fp.spec_tokens:
        raise PlanError("the profiler runs one GPU without speculative tokens (tp 1, spec-tokens 0)")
    chunk = int(sizes.chunk_size or spec.chunk_size or DEFAULT_CHUNK)
    if sizes.slots > bench.MAX_GRID_YZ:
        raise PlanError(
            f"--slots {sizes.slots:,}: one decode launch steps at most {bench.MAX_GRID_YZ:,} sequences "
            "(CUDA's grid limit); lower --slots"
        )
    if -(-sizes.tokens // chunk) > bench.MAX_GRID_YZ:
        raise PlanError(
            f"--tokens {sizes.tokens:,}: one prefill launch covers at most {bench.MAX_GRID_YZ:,} chunks "
            f"of {chunk} tokens (CUDA's grid limit); lower --tokens"
        )
    z = RowSizes(sizes.slots, sizes.tokens, chunk, size_of(sizes.act_dtype))
    return Workload(
        spec=spec,
        fp=fp,
        slots=sizes.slots,
        ctx=sizes.ctx,
        tokens=sizes.tokens,
        chunk_size=chunk,
        act_dtype=sizes.act_dtype,
        tensors=pool_tensors(spec, fp, sizes.slots, sizes.ctx),
        decode=kernel_rows(spec, fp, DECODE, z),
        prefill=kernel_rows(spec, fp, PREFILL, z),
    )
