"""Decode step of the Mamba-2 recurrence on a slot-indexed state pool (Triton).

One program per (P-block, head, batch entry): it loads a (BLOCK_P, N) tile of the sequence's state (whole
rows of N, unit stride, so the loads vectorise), updates it in fp32 and stores it back in the pool's dtype,
then reduces it against C for the output. No atomics; every state element is read once and written once,
which is the minimum traffic for this op (see ``hybridplan.kernels.bench.state_update_bytes``).
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

__all__ = ["selective_state_update", "state_update_launch_config"]


@triton.jit
def _state_update_kernel(
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
    s_head,
    s_p,
    x_b,
    x_h,
    dt_b,
    dt_h,
    B_b,
    B_g,
    C_b,
    C_g,
    D_h,
    D_p,
    z_b,
    z_h,
    y_b,
    y_h,
    P: tl.constexpr,
    N: tl.constexpr,
    HEADS_PER_GROUP: tl.constexpr,
    HAS_IDX: tl.constexpr,
    HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_DT_BIAS: tl.constexpr,
    DT_SOFTPLUS: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid_p = tl.program_id(0)
    h = tl.program_id(1)
    b = tl.program_id(2)
    g = h // HEADS_PER_GROUP

    slot, valid = entry_slot(idx_ptr, b, pad_slot_id, HAS_IDX)

    offs_p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_n = tl.arange(0, BLOCK_N)
    mask_p = offs_p < P
    mask_n = offs_n < N
    mask_pv = mask_p & valid
    mask_s = mask_pv[:, None] & mask_n[None, :]

    s_ptrs = state_ptr + slot * s_slot + h * s_head + offs_p[:, None] * s_p + offs_n[None, :]
    state = tl.load(s_ptrs, mask=mask_s, other=0.0).to(tl.float32)

    x = tl.load(x_ptr + b * x_b + h * x_h + offs_p, mask=mask_pv, other=0.0).to(tl.float32)
    dt = tl.load(dt_ptr + b * dt_b + h * dt_h).to(tl.float32)
    if HAS_DT_BIAS:
        dt += tl.load(dt_bias_ptr + h).to(tl.float32)
    if DT_SOFTPLUS:
        dt = softplus_fp32(dt)
    a = tl.load(A_ptr + h).to(tl.float32)
    decay = tl.exp(dt * a)
    bvec = tl.load(B_ptr + b * B_b + g * B_g + offs_n, mask=mask_n & valid, other=0.0).to(tl.float32)
    cvec = tl.load(C_ptr + b * C_b + g * C_g + offs_n, mask=mask_n & valid, other=0.0).to(tl.float32)

    state = state * decay + (dt * x)[:, None] * bvec[None, :]
    tl.store(s_ptrs, state.to(state_ptr.dtype.element_ty), mask=mask_s)

    y = tl.sum(state * cvec[None, :], axis=1)
    if HAS_D:
        y += x * tl.load(D_ptr + h * D_h + offs_p * D_p, mask=mask_p, other=0.0).to(tl.float32)
    if HAS_Z:
        zv = tl.load(z_ptr + b * z_b + h * z_h + offs_p, mask=mask_pv, other=0.0).to(tl.float32)
        y *= silu_fp32(zv)
    y = tl.where(valid, y, 0.0)
    tl.store(y_ptr + b * y_b + h * y_h + offs_p, y.to(y_ptr.dtype.element_ty), mask=mask_p)


def state_update_launch_config(headdim: int, dstate: int, state_elem_bytes: int) -> dict:
    """BLOCK_P / BLOCK_N / num_warps for the decode kernel, chosen from the shape (no autotuning).

    A program moves an ~8 KiB tile of state (e.g. 16 x 128 fp32, 32 x 128 bf16): large enough for wide
    vector loads with many bytes in flight per SM, small enough that a batch of 4 x 128 heads still makes
    thousands of programs. About 16 elements per thread: num_warps = tile / 512.
    """
    block_n = next_pow2(dstate)
    tile = max(1, 8192 // max(1, state_elem_bytes))
    block_p = max(1, min(next_pow2(headdim), tile // block_n))
    num_warps = max(1, min(8, (block_p * block_n) // 512))
    return {"BLOCK_P": block_p, "BLOCK_N": block_n, "num_warps": num_warps}


def selective_state_update(
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
    """Mamba-2 decode step, in place on the state pool.

    state (slots, H, P, N) fp32/bf16/fp16 with unit stride along N; x (batch, H, P); dt (batch, H); A (H,);
    B, C (batch, G, N) with H % G == 0; D (H,) or (H, P); z (batch, H, P); dt_bias (H,).
    Entry b uses slot ``state_batch_indices[b]`` (slot b when None, and then no entry is padding). An entry
    equal to ``pad_slot_id`` is neither read nor written and its output row is written as zeros. Two entries
    must not share a slot.
    Math in fp32, state stored back in the pool's dtype. Returns y (batch, H, P), in x's dtype unless ``out``
    (any float dtype, unit stride along P) is given.
    """
    if state.dim() != 4:
        raise ValueError(f"state must be (slots, H, P, N), got shape {tuple(state.shape)}")
    _, nheads, headdim, dstate = state.shape
    if x.dim() != 3:
        raise ValueError(f"x must be (batch, H, P), got shape {tuple(x.shape)}")
    batch = x.shape[0]
    check_shape("x", x, (batch, nheads, headdim))
    check_shape("dt", dt, (batch, nheads))
    check_shape("A", A, (nheads,))
    if B.dim() != 3:
        raise ValueError(f"B must be (batch, G, N), got shape {tuple(B.shape)}")
    ngroups = B.shape[1]
    check_shape("B", B, (batch, ngroups, dstate))
    check_shape("C", C, (batch, ngroups, dstate))
    if ngroups < 1 or nheads % ngroups:
        raise ValueError(f"heads ({nheads}) must be a multiple of groups ({ngroups})")
    if D is not None and tuple(D.shape) not in ((nheads,), (nheads, headdim)):
        raise ValueError(f"D must be (H,) or (H, P), got shape {tuple(D.shape)}")
    if z is not None:
        check_shape("z", z, (batch, nheads, headdim))
    if dt_bias is not None:
        check_shape("dt_bias", dt_bias, (nheads,))
    check_float("state", state)
    if state.stride(-1) != 1:
        raise ValueError("state must have unit stride along N (the pool is updated in place, never copied)")
    device = check_same_device(state=state, x=x, dt=dt, A=A, B=B, C=C, D=D, z=z, dt_bias=dt_bias)
    x, B, C, z = (lastdim_contiguous(t) for t in (x, B, C, z))
    out = decode_output(out, (batch, nheads, headdim), x.dtype, device, "P")
    if batch == 0:
        return out
    idx = slot_indices(state_batch_indices, batch, device, "state_batch_indices")

    cfg = state_update_launch_config(headdim, dstate, state.element_size())
    d_h, d_p = (0, 0) if D is None else ((D.stride(0), 0) if D.dim() == 1 else (D.stride(0), D.stride(1)))
    grid = (triton.cdiv(headdim, cfg["BLOCK_P"]), nheads, batch)
    _state_update_kernel[grid](
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
        int(pad_slot_id) if idx is not None else -1,  # without indices every entry is real
        state.stride(0),
        state.stride(1),
        state.stride(2),
        x.stride(0),
        x.stride(1),
        dt.stride(0),
        dt.stride(1),
        B.stride(0),
        B.stride(1),
        C.stride(0),
        C.stride(1),
        d_h,
        d_p,
        z.stride(0) if z is not None else 0,
        z.stride(1) if z is not None else 0,
        out.stride(0),
        out.stride(1),
        P=headdim,
        N=dstate,
        HEADS_PER_GROUP=nheads // ngroups,
        HAS_IDX=idx is not None,
        HAS_D=D is not None,
        HAS_Z=z is not None,
        HAS_DT_BIAS=dt_bias is not None,
        DT_SOFTPLUS=bool(dt_softplus),
        BLOCK_P=cfg["BLOCK_P"],
        BLOCK_N=cfg["BLOCK_N"],
        num_warps=cfg["num_warps"],
    )
    return out
