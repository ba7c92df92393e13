"""A kernel row's call: its typed plan (``workload``) mapped onto the input builders of
``hybridplan.kernels.inputs``. Importing this module loads neither torch nor triton."""

from __future__ import annotations

from typing import Any

from hybridplan.errors import PlanError
from hybridplan.profile.workload import ConvDims, GdnDims, KernelPlan, Mamba1Dims, Mamba2Dims, Prefill, Step


def kernel_call(k: KernelPlan, gen: Any, dtype: Any, device: Any):
    """The ``KernelCall`` of row ``k`` (every input but the state pool), its values drawn from ``gen``: a
    decode step over ``batch`` slots in slot order, or a prefill of one sequence into slot 0 from its state."""
    from hybridplan.kernels import inputs

    draw = {"gen": gen, "dtype": dtype, "device": device}
    activation = None if k.kind == "short_conv" else "silu"  # LFM2's gated short conv has none
    match k.dims, k.launch:
        case ConvDims(dim, width), Step(batch):
            return inputs.conv_decode(batch, dim, width, activation=activation, **draw)
        case ConvDims(dim, width), Prefill(tokens, 1):
            return inputs.conv_prefill([tokens], dim, width, activation=activation, **draw)
        case Mamba2Dims(nheads, headdim, dstate, ngroups), Step(batch):
            return inputs.mamba2_decode(batch, nheads, headdim, dstate, ngroups, **draw)
        case Mamba2Dims(nheads, headdim, dstate, ngroups), Prefill(tokens, 1, int(chunk)):
            return inputs.mamba2_prefill([tokens], nheads, headdim, dstate, ngroups, chunk, **draw)
        case Mamba1Dims(dim, dstate), Step(batch):
            return inputs.mamba1_decode(batch, dim, dstate, **draw)
        case GdnDims(v_heads, k_heads, vdim, kdim), Step(batch):
            return inputs.gdn_decode(batch, k_heads, v_heads, kdim, vdim, **draw)
    raise PlanError(f"internal: no kernel call for the {k.phase} {k.kind} {k.part} row ({k.status})")
