"""Decode step of the short causal convolution on a slot-indexed window pool (Triton).

One program per (channel block, batch entry). The K-1 window columns are read once, each is shifted one
place towards the oldest position as soon as it has been read, and the new input is written last, so the
window rolls in place with every element read once and written once.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._common import (
    check_float,
    check_same_device,
    check_shape,
    entry_slot,
    next_pow2,
    silu_fp32,
    slot_indices,
)
from .naive import check_activation

__all__ = ["causal_conv1d_update", "conv_update_launch_config"]


@triton.jit
def _conv_update_kernel(
    x_ptr,
    state_ptr,
    w_ptr,
    bias_ptr,
    idx_ptr,
    y_ptr,
    dim,
    pad_slot_id,
    x_b,
    x_d,
    s_slot,
    s_d,
    s_k,
    w_d,
    w_k,
    y_b,
    y_d,
    KW: tl.constexpr,
    HAS_IDX: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    SILU: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    pid_d = tl.program_id(0)
    b = tl.program_id(1)
    slot, valid = entry_slot(idx_ptr, b, pad_slot_id, HAS_IDX)

    offs = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    mask_d = offs < dim
    mask = mask_d & valid

    xv = tl.load(x_ptr + b * x_b + offs * x_d, mask=mask, other=0.0).to(tl.float32)
    if HAS_BIAS:
        acc = tl.load(bias_ptr + offs, mask=mask_d, other=0.0).to(tl.float32)
    else:
        acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    base = state_ptr + slot * s_slot + offs * s_d
    for k in tl.static_range(KW - 1):
        col = tl.load(base + k * s_k, mask=mask, other=0.0)
        acc += tl.load(w_ptr + offs * w_d + k * w_k, mask=mask_d, other=0.0).to(tl.float32) * col.to(tl.float32)
        if k > 0:
            tl.store(base + (k - 1) * s_k, col, mask=mask)
    acc += tl.load(w_ptr + offs * w_d + (KW - 1) * w_k, mask=mask_d, other=0.0).to(tl.float32) * xv
    tl.store(base + (KW - 2) * s_k, xv.to(state_ptr.dtype.element_ty), mask=mask)
    if SILU:
        acc = silu_fp32(acc)
    acc = tl.where(valid, acc, 0.0)
    tl.store(y_ptr + b * y_b + offs * y_d, acc.to(y_ptr.dtype.element_ty), mask=mask_d)


def conv_update_launch_config(dim: int) -> dict:
    """Up to 256 channels per program (K-1 strided column loads of the window each), 2 per thread."""
    block_d = min(256, next_pow2(dim))
    return {"BLOCK_D": block_d, "num_warps": 4 if block_d >= 256 else (2 if block_d >= 64 else 1)}


def causal_conv1d_update(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation="silu",
    conv_state_indices: torch.Tensor | None = None,
    pad_slot_id: int = -1,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """One token per sequence through the causal depthwise conv, rolling each window in place.

    x (batch, dim); conv_state (slots, dim, K-1), any strides (a (slots, K-1, dim) pool passed as
    ``pool.transpose(1, 2)`` works too); weight (dim, K), K >= 2; bias (dim,); activation "silu"/"swish" or
    None. Entry b uses slot ``conv_state_indices[b]`` (b when None, and then no entry is padding); an entry
    equal to ``pad_slot_id`` is neither read nor written and its output row is written as zeros. Two entries
    must not share a slot.
    Math in fp32. Returns y (batch, dim) in x's dtype unless ``out`` is given.
    """
    silu = check_activation(activation)
    if x.dim() != 2:
        raise ValueError(f"x must be (batch, dim), got shape {tuple(x.shape)}")
    batch, dim = x.shape
    if weight.dim() != 2 or weight.shape[0] != dim or weight.shape[1] < 2:
        raise ValueError(f"weight must be (dim={dim}, K>=2), got shape {tuple(weight.shape)}")
    width = weight.shape[1]
    if conv_state.dim() != 3:
        raise ValueError(f"conv_state must be (slots, dim, K-1), got shape {tuple(conv_state.shape)}")
    check_shape("conv_state", conv_state, (conv_state.shape[0], dim, width - 1))
    if bias is not None:
        check_shape("bias", bias, (dim,))
    check_float("conv_state", conv_state)
    device = check_same_device(x=x, conv_state=conv_state, weight=weight, bias=bias)
    if out is None:
        out = torch.empty((batch, dim), dtype=x.dtype, device=device)
    else:
        check_shape("out", out, (batch, dim))
    if batch == 0:
        return out
    idx = slot_indices(conv_state_indices, batch, device, "conv_state_indices")
    cfg = conv_update_launch_config(dim)
    block_d = cfg["BLOCK_D"]
    grid = (triton.cdiv(dim, block_d), batch)
    _conv_update_kernel[grid](
        x,
        conv_state,
        weight,
        bias if bias is not None else weight,
        idx if idx is not None else x,
        out,
        dim,
        int(pad_slot_id) if idx is not None else -1,  # without indices every entry is real
        x.stride(0),
        x.stride(1),
        conv_state.stride(0),
        conv_state.stride(1),
        conv_state.stride(2),
        weight.stride(0),
        weight.stride(1),
        out.stride(0),
        out.stride(1),
        KW=width,
        HAS_IDX=idx is not None,
        HAS_BIAS=bias is not None,
        SILU=silu,
        BLOCK_D=block_d,
        num_warps=cfg["num_warps"],
    )
    return out
