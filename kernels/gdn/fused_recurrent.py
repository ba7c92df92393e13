"""Decode step of the gated delta rule on a slot-indexed state pool (Triton); reference in ``naive.py``.

One program per (V-block, value head, batch entry): it loads a (BLOCK_V, K) tile of the head's state (whole
rows of K, unit stride, so the loads vectorise), decays it, applies the delta-rule correction and the output
projection in fp32, and stores it back in the pool's dtype. q and k (and their L2 norms) are reloaded by each
of a head's V-blocks: K elements, small beside the tile. Every state element is read once and written once
(``hybridplan.kernels.bench.gdn_update_bytes``).
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
    slot_indices,
)
from .naive import L2_EPS

__all__ = ["gated_delta_rule_update", "gdn_update_launch_config"]


@triton.jit
def _gdn_update_kernel(
    state_ptr,
    q_ptr,
    k_ptr,
    v_ptr,
    g_ptr,
    beta_ptr,
    idx_ptr,
    o_ptr,
    pad_slot_id,
    scale,
    eps,
    s_slot,
    s_head,
    s_v,
    q_b,
    q_h,
    k_b,
    k_h,
    v_b,
    v_h,
    g_b,
    g_h,
    beta_b,
    beta_h,
    o_b,
    o_h,
    V: tl.constexpr,
    K: tl.constexpr,
    HEADS_PER_KEY: tl.constexpr,
    HAS_IDX: tl.constexpr,
    L2NORM: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pid_v = tl.program_id(0)
    h = tl.program_id(1)
    b = tl.program_id(2)
    hk = h // HEADS_PER_KEY

    slot, valid = entry_slot(idx_ptr, b, pad_slot_id, HAS_IDX)

    offs_v = pid_v * BLOCK_V + tl.arange(0, BLOCK_V)
    offs_k = tl.arange(0, BLOCK_K)
    mask_v = offs_v < V
    mask_k = (offs_k < K) & valid
    mask_s = (mask_v & valid)[:, None] & mask_k[None, :]

    s_ptrs = state_ptr + slot * s_slot + h * s_head + offs_v[:, None] * s_v + offs_k[None, :]
    state = tl.load(s_ptrs, mask=mask_s, other=0.0).to(tl.float32)

    q = tl.load(q_ptr + b * q_b + hk * q_h + offs_k, mask=mask_k, other=0.0).to(tl.float32)
    k = tl.load(k_ptr + b * k_b + hk * k_h + offs_k, mask=mask_k, other=0.0).to(tl.float32)
    if L2NORM:
        q = q / tl.sqrt(tl.sum(q * q, axis=0) + eps)
        k = k / tl.sqrt(tl.sum(k * k, axis=0) + eps)
    v = tl.load(v_ptr + b * v_b + h * v_h + offs_v, mask=mask_v & valid, other=0.0).to(tl.float32)
    decay = tl.exp(tl.load(g_ptr + b * g_b + h * g_h).to(tl.float32))
    beta = tl.load(beta_ptr + b * beta_b + h * beta_h).to(tl.float32)

    state = state * decay
    u = beta * (v - tl.sum(state * k[None, :], axis=1))
    state = state + u[:, None] * k[None, :]
    tl.store(s_ptrs, state.to(state_ptr.dtype.element_ty), mask=mask_s)

    o = tl.sum(state * q[None, :], axis=1) * scale
    o = tl.where(valid, o, 0.0)
    tl.store(o_ptr + b * o_b + h * o_h + offs_v, o.to(o_ptr.dtype.element_ty), mask=mask_v)


def gdn_update_launch_config(vdim: int, kdim: int, state_elem_bytes: int) -> dict:
    """BLOCK_V / BLOCK_K / num_warps, chosen from the shape (no autotuning): as for the Mamba-2 decode tile,
    ~8 KiB of state per program (16 x 128 fp32, 32 x 128 bf16) and about 16 elements per thread."""
    block_k = next_pow2(kdim)
    tile = max(1, 8192 // max(1, state_elem_bytes))
    block_v = max(1, min(next_pow2(vdim), tile // block_k))
    num_warps = max(1, min(8, (block_v * block_k) // 512))
    return {"BLOCK_V": block_v, "BLOCK_K": block_k, "num_warps": num_warps}


def gated_delta_rule_update(
    state: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    *,
    scale: float | None = None,
    use_qk_l2norm: bool = True,
    state_batch_indices: torch.Tensor | None = None,
    pad_slot_id: int = -1,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Gated DeltaNet decode step, in place on the state pool.

    state (slots, Hv, V, K) fp32/bf16/fp16 with unit stride along K (the engines' layout); q, k (batch, Hk, K);
    v (batch, Hv, V) with Hv % Hk == 0; g (batch, Hv) the log-decay; beta (batch, Hv). Entry b uses slot
    ``state_batch_indices[b]`` (slot b when None); an entry equal to ``pad_slot_id`` is neither read nor
    written and gets a zero output row. Math in fp32, state stored back in the pool's dtype. Returns
    o (batch, Hv, V), in v's dtype unless ``out`` (unit stride along V) is given.
    """
    if state.dim() != 4:
        raise ValueError(f"state must be (slots, Hv, V, K), got shape {tuple(state.shape)}")
    _, hv, vdim, kdim = state.shape
    if v.dim() != 3 or q.dim() != 3:
        raise ValueError(
            f"q, k must be (batch, Hk, K) and v (batch, Hv, V); got q {tuple(q.shape)}, v {tuple(v.shape)}"
        )
    batch, hk = v.shape[0], q.shape[1]
    check_shape("v", v, (batch, hv, vdim))
    check_shape("q", q, (batch, hk, kdim))
    check_shape("k", k, (batch, hk, kdim))
    check_shape("g", g, (batch, hv))
    check_shape("beta", beta, (batch, hv))
    if hk < 1 or hv % hk:
        raise ValueError(f"value heads ({hv}) must be a multiple of key heads ({hk})")
    check_float("state", state)
    if state.stride(-1) != 1:
        raise ValueError("state must have unit stride along K (the pool is updated in place, never copied)")
    device = check_same_device(state=state, q=q, k=k, v=v, g=g, beta=beta)
    q, k, v = (lastdim_contiguous(t) for t in (q, k, v))
    out = decode_output(out, (batch, hv, vdim), v.dtype, device, "V")
    if batch == 0:
        return out
    idx = slot_indices(state_batch_indices, batch, device, "state_batch_indices")

    cfg = gdn_update_launch_config(vdim, kdim, state.element_size())
    grid = (triton.cdiv(vdim, cfg["BLOCK_V"]), hv, batch)
    _gdn_update_kernel[grid](
        state,
        q,
        k,
        v,
        g,
        beta,
        idx if idx is not None else g,
        out,
        int(pad_slot_id) if idx is not None else -1,
        float(kdim**-0.5 if scale is None else scale),
        L2_EPS,
        state.stride(0),
        state.stride(1),
        state.stride(2),
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        v.stride(0),
        v.stride(1),
        g.stride(0),
        g.stride(1),
        beta.stride(0),
        beta.stride(1),
        out.stride(0),
        out.stride(1),
        V=vdim,
        K=kdim,
        HEADS_PER_KEY=hv // hk,
        HAS_IDX=idx is not None,
        L2NORM=bool(use_qk_l2norm),
        BLOCK_V=cfg["BLOCK_V"],
        BLOCK_K=cfg["BLOCK_K"],
        num_warps=cfg["num_warps"],
    )
    return out
