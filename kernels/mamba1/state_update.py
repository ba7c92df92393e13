"""Decode step of the Mamba-1 recurrence on a slot-indexed state pool (Triton); reference in ``naive.py``.

One program per (channel block, batch entry): it loads a (BLOCK_I, N) tile of the sequence's state (whole
rows of N, unit stride) with the matching tile of A, updates it in fp32, stores it back in the pool's dtype and
reduces it against C. Every state element is read once and written once; A is the same for every entry of the
batch and stays in L2 (``hybridplan.kernels.bench.mamba1_update_bytes`` counts it once).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._common import (
    check_float,
    check_same_device,
    check_shape,
    decode_output,
    entry_slot,
    lastdim_contiguous,
    next_pow2,
    silu_fp32,
    slot_indices,
    softplus_fp32,
)

__all__ = ["mamba1_state_update", "mamba1_update_launch_config"]


@triton.jit
def _mamba1_update_kernel(
    state_ptr,
    x_ptr,
    dt_ptr,
    A_ptr,
    B_ptr,
    C_ptr,
    D_ptr,
    z_ptr,
    dt_bias_ptr,
    idx_ptr,
    y_ptr,
    pad_slot_id,
    s_slot,
    s_i,
    x_b,
    dt_b,
    A_i,
    B_b,
    C_b,
    z_b,
    y_b,
    DIM: tl.constexpr,
    N: tl.constexpr,
    HAS_IDX: tl.constexpr,
    HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_DT_BIAS: tl.constexpr,
    DT_SOFTPLUS: tl.constexpr,
    BLOCK_I: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid_i = tl.program_id(0)
    b = tl.program_id(1)

    slot, valid = entry_slot(idx_ptr, b, pad_slot_id, HAS_IDX)

    offs_i = pid_i * BLOCK_I + tl.arange(0, BLOCK_I)
    offs_n = tl.arange(0, BLOCK_N)
    mask_i = offs_i < DIM
    mask_n = offs_n < N
    mask_iv = mask_i & valid
    mask_s = mask_iv[:, None] & mask_n[None, :]

    s_ptrs = state_ptr + slot * s_slot + offs_i[:, None] * s_i + offs_n[None, :]
    state = tl.load(s_ptrs, mask=mask_s, other=0.0).to(tl.float32)
    a = tl.load(A_ptr + offs_i[:, None] * A_i + offs_n[None, :], mask=mask_s, other=0.0).to(tl.float32)

    x = tl.load(x_ptr + b * x_b + offs_i, mask=mask_iv, other=0.0).to(tl.float32)
    dt = tl.load(dt_ptr + b * dt_b + offs_i, mask=mask_iv, other=0.0).to(tl.float32)
    if HAS_DT_BIAS:
        dt += tl.load(dt_bias_ptr + offs_i, mask=mask_i, other=0.0).to(tl.float32)
    if DT_SOFTPLUS:
        dt = softplus_fp32(dt)
    bvec = tl.load(B_ptr + b * B_b + offs_n, mask=mask_n & valid, other=0.0).to(tl.float32)
    cvec = tl.load(C_ptr + b * C_b + offs_n, mask=mask_n & valid, other=0.0).to(tl.float32)

    state = state * tl.exp(dt[:, None] * a) + (dt * x)[:, None] * bvec[None, :]
    tl.store(s_ptrs, state.to(state_ptr.dtype.element_ty), mask=mask_s)

    y = tl.sum(state * cvec[None, :], axis=1)
    if HAS_D:
        y += x * tl.load(D_ptr + offs_i, mask=mask_i, other=0.0).to(tl.float32)
    if HAS_Z:
        y *= silu_fp32(tl.load(z_ptr + b * z_b + offs_i, mask=mask_iv, other=0.0).to(tl.float32))
    y = tl.where(valid, y, 0.0)
    tl.store(y_ptr + b * y_b + offs_i, y.to(y_ptr.dtype.element_ty), mask=mask_i)


def mamba1_update_launch_config(dim: int, dstate: int, state_elem_bytes: int) -> dict:
    """BLOCK_I / BLOCK_N / num_warps, chosen from the shape (no autotuning): ~8 KiB of state per program
    (128 x 16 fp32 at Mamba-1's N = 16, 256 x 16 bf16) and about 16 elements per thread."""
    block_n = next_pow2(dstate)
    tile = max(1, 8192 // max(1, state_elem_bytes))
    block_i = max(1, min(next_pow2(dim), tile // block_n))
    num_warps = max(1, min(8, (block_i * block_n) // 512))
    return {"BLOCK_I": block_i, "BLOCK_N": block_n, "num_warps": num_warps}


def mamba1_state_update(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = True,
    state_batch_indices: torch.Tensor | None = None,
    pad_slot_id: int = -1,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mamba-1 decode step, in place on the state pool.

    state (slots, I, N) fp32/bf16/fp16 with unit stride along N (the engines' layout); x, dt (batch, I);
    A (I, N); B, C (batch, N); D, dt_bias (I,); z (batch, I). Entry b uses slot ``state_batch_indices[b]``
    (slot b when None); an entry equal to ``pad_slot_id`` is neither read nor written and gets a zero output
    row. Math in fp32, state stored back in the pool's dtype. Returns y (batch, I), in x's dtype unless ``out``
    (unit stride along I) is given.
    """
    if state.dim() != 3:
        raise ValueError(f"state must be (slots, I, N), got shape {tuple(state.shape)}")
    _, dim, dstate = state.shape
    if x.dim() != 2:
        raise ValueError(f"x must be (batch, I), got shape {tuple(x.shape)}")
    batch = x.shape[0]
    check_shape("x", x, (batch, dim))
    check_shape("dt", dt, (batch, dim))
    check_shape("A", A, (dim, dstate))
    check_shape("B", B, (batch, dstate))
    check_shape("C", C, (batch, dstate))
    for name, t in (("D", D), ("dt_bias", dt_bias)):
        if t is not None:
            check_shape(name, t, (dim,))
    if z is not None:
        check_shape("z", z, (batch, dim))
    check_float("state", state)
    if state.stride(-1) != 1:
        raise ValueError("state must have unit stride along N (the pool is updated in place, never copied)")
    device = check_same_device(state=state, x=x, dt=dt, A=A, B=B, C=C, D=D, z=z, dt_bias=dt_bias)
    x, dt, A, B, C, D, z, dt_bias = (lastdim_contiguous(t) for t in (x, dt, A, B, C, D, z, dt_bias))
    out = decode_output(out, (batch, dim), x.dtype, device, "I")
    if batch == 0:
        return out
    idx = slot_indices(state_batch_indices, batch, device, "state_batch_indices")

    cfg = mamba1_update_launch_config(dim, dstate, state.element_size())
    grid = (triton.cdiv(dim, cfg["BLOCK_I"]), batch)
    _mamba1_update_kernel[grid](
        state,
        x,
        dt,
        A,
        B,
        C,
        D if D is not None else A,
        z if z is not None else x,
        dt_bias if dt_bias is not None else A,
        idx if idx is not None else dt,
        out,
        int(pad_slot_id) if idx is not None else -1,
        state.stride(0),
        state.stride(1),
        x.stride(0),
        dt.stride(0),
        A.stride(0),
        B.stride(0),
        C.stride(0),
        z.stride(0) if z is not None else 0,
        out.stride(0),
        DIM=dim,
        N=dstate,
        HAS_IDX=idx is not None,
        HAS_D=D is not None,
        HAS_Z=z is not None,
        HAS_DT_BIAS=dt_bias is not None,
        DT_SOFTPLUS=bool(dt_softplus),
        BLOCK_I=cfg["BLOCK_I"],
        BLOCK_N=cfg["BLOCK_N"],
        num_warps=cfg["num_warps"],
    )
    return out
