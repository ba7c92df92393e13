"""Causal depthwise conv over packed variable-length sequences, seeded from and writing back the window pool.

Two launches:

1. the convolution: one program per (block of BLOCK_T tokens of one sequence, block of channels). Blocks are
   cut per sequence (a block never straddles two sequences) from a block -> (sequence, first position) map
   built on the host from ``cu_seqlens``. Positions before a sequence's first token read its initial window
   from the pool (or zeros).
2. the window write-back: one program per (sequence, channel block) writes the last K-1 inputs into the
   sequence's slot. It runs after launch 1 so that no program reads a window another has already replaced.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .._common import check_float, check_grid_dim, check_same_device, check_shape, index_tensor, next_pow2, silu_fp32
from .naive import check_activation

__all__ = ["causal_conv1d_prefill", "ConvPrefillMeta", "conv_prefill_metadata", "conv_prefill_launch_config"]


@dataclass
class ConvPrefillMeta:
    """Per-batch launch metadata (build once per batch; reusable by every layer)."""

    cu_seqlens: torch.Tensor  # (nseq + 1,) int32 on the device
    block_seq: torch.Tensor  # (nblocks,) sequence of each token block
    block_pos: torch.Tensor  # (nblocks,) first position of the block inside its sequence
    block_t: int
    ntokens: int


def conv_prefill_metadata(cu_seqlens, device=None, block_t: int | None = None) -> ConvPrefillMeta:
    """Cut every sequence into blocks of ``block_t`` tokens (default: 16, or less for short batches)."""
    cu = [int(v) for v in torch.as_tensor(cu_seqlens).tolist()]
    if len(cu) < 2 or cu[0] != 0 or any(b < a for a, b in zip(cu, cu[1:])):
        raise ValueError("cu_seqlens must start at 0 and be non-decreasing, with at least one sequence")
    if device is None:
        device = cu_seqlens.device if isinstance(cu_seqlens, torch.Tensor) else torch.device("cpu")
    longest = max(b - a for a, b in zip(cu, cu[1:]))
    if block_t is None:
        block_t = max(2, min(16, next_pow2(longest)))
    if block_t < 1 or block_t & (block_t - 1):
        raise ValueError("block_t must be a power of two")
    seq, pos = [], []
    for s, (a, b) in enumerate(zip(cu, cu[1:])):
        for p in range(0, b - a, block_t):
            seq.append(s)
            pos.append(p)
    as_dev = lambda v: torch.tensor(v, dtype=torch.int32, device=device)  # noqa: E731
    return ConvPrefillMeta(as_dev(cu), as_dev(seq), as_dev(pos), block_t, cu[-1])


@triton.jit
def _conv_prefill_kernel(
    x_ptr,
    w_ptr,
    bias_ptr,
    state_ptr,
    idx_ptr,
    init_ptr,
    y_ptr,
    cu_ptr,
    blk_seq_ptr,
    blk_pos_ptr,
    dim,
    pad_slot_id,
    x_t,
    x_d,
    s_slot,
    s_d,
    s_k,
    w_d,
    w_k,
    y_t,
    y_d,
    KW: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_INIT: tl.constexpr,
    SILU: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    blk = tl.program_id(0)
    pid_d = tl.program_id(1)
    seq = tl.load(blk_seq_ptr + blk)
    pos0 = tl.load(blk_pos_ptr + blk)
    start = tl.load(cu_ptr + seq).to(tl.int64)
    seqlen = tl.load(cu_ptr + seq + 1) - tl.load(cu_ptr + seq)
    slot = tl.load(idx_ptr + seq).to(tl.int64)
    valid = slot != pad_slot_id
    if HAS_INIT:
        use_init = valid & (tl.load(init_ptr + seq).to(tl.int32) != 0)
    slot = tl.where(valid, slot, 0)

    pos = pos0 + tl.arange(0, BLOCK_T)
    offs_d = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    mask_d = offs_d < dim
    mask_t = pos < seqlen

    if HAS_BIAS:
        bias = tl.load(bias_ptr + offs_d, mask=mask_d, other=0.0).to(tl.float32)
        acc = tl.zeros((BLOCK_T, BLOCK_D), dtype=tl.float32) + bias[None, :]
    else:
        acc = tl.zeros((BLOCK_T, BLOCK_D), dtype=tl.float32)
    for k in tl.static_range(KW):
        src = pos - (KW - 1) + k  # input position read by tap k, relative to the sequence start
        in_x = mask_t & (src >= 0)
        xv = tl.load(
            x_ptr + (start + src)[:, None] * x_t + offs_d[None, :] * x_d,
            mask=in_x[:, None] & mask_d[None, :],
            other=0.0,
        ).to(tl.float32)
        if HAS_INIT:
            if k < KW - 1:  # only the first K-1 taps can reach before the sequence start
                in_s = mask_t & (src < 0) & use_init
                xv += tl.load(
                    state_ptr + slot * s_slot + offs_d[None, :] * s_d + (src + (KW - 1))[:, None] * s_k,
                    mask=in_s[:, None] & mask_d[None, :],
                    other=0.0,
                ).to(tl.float32)
        wk = tl.load(w_ptr + offs_d * w_d + k * w_k, mask=mask_d, other=0.0).to(tl.float32)
        acc += wk[None, :] * xv
    if SILU:
        acc = silu_fp32(acc)
    tl.store(
        y_ptr + (start + pos)[:, None] * y_t + offs_d[None, :] * y_d,
        acc.to(y_ptr.dtype.element_ty),
        mask=mask_t[:, None] & mask_d[None, :],
    )


@triton.jit
def _conv_window_writeback_kernel(
    x_ptr,
    state_ptr,
    idx_ptr,
    init_ptr,
    cu_ptr,
    dim,
    pad_slot_id,
    x_t,
    x_d,
    s_slot,
    s_d,
    s_k,
    KW: tl.constexpr,
    HAS_INIT: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    seq = tl.program_id(0)
    pid_d = tl.program_id(1)
    start = tl.load(cu_ptr + seq).to(tl.int64)
    seqlen = tl.load(cu_ptr + seq + 1) - tl.load(cu_ptr + seq)
    slot = tl.load(idx_ptr + seq).to(tl.int64)
    valid = slot != pad_slot_id
    if HAS_INIT:
        use_init = valid & (tl.load(init_ptr + seq).to(tl.int32) != 0)
    slot = tl.where(valid, slot, 0)
    offs_d = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    mask_d = offs_d < dim
    base = state_ptr + slot * s_slot + offs_d * s_d
    # New column j holds input position seqlen-(K-1)+j; a negative position is old column j+seqlen > j.
    # Ascending j reads every old column before it is overwritten.
    for j in tl.static_range(KW - 1):
        src = seqlen - (KW - 1) + j
        v = tl.load(x_ptr + (start + src) * x_t + offs_d * x_d, mask=mask_d & valid & (src >= 0), other=0.0)
        v = v.to(tl.float32)
        if HAS_INIT:
            sv = tl.load(base + (src + (KW - 1)) * s_k, mask=mask_d & use_init & (src < 0), other=0.0)
            v += sv.to(tl.float32)
        tl.store(base + j * s_k, v.to(state_ptr.dtype.element_ty), mask=mask_d & valid)


def conv_prefill_launch_config(dim: int, block_t: int) -> dict:
    """Channel block for (block_t x BLOCK_D) tiles of ~2048 elements: 16 x 128 compiles to ~140 registers on
    sm_90 without spills (the 2D pointer tensors of the K shifted loads are what costs; 64 x 64 spills)."""
    block_d = max(16, min(next_pow2(dim), max(16, 2048 // block_t), 256))
    wb = min(256, next_pow2(dim))
    return {"BLOCK_D": block_d, "num_warps": 4, "WRITEBACK_BLOCK_D": wb, "writeback_num_warps": 4 if wb >= 256 else 2}


def causal_conv1d_prefill(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    cu_seqlens: torch.Tensor,
    conv_states: torch.Tensor,
    state_indices: torch.Tensor,
    has_initial_state: torch.Tensor | None,
    activation="silu",
    pad_slot_id: int = -1,
    out: torch.Tensor | None = None,
    metadata: ConvPrefillMeta | None = None,
) -> torch.Tensor:
    """Causal depthwise conv over packed sequences; the final windows are written into the pool.

    x (T, dim) with T == cu_seqlens[-1]; weight (dim, K), K >= 2; bias (dim,) or None; cu_seqlens (nseq+1,);
    conv_states (slots, dim, K-1) any strides; state_indices (nseq,); has_initial_state (nseq,) bool or None
    (no initial windows). Sequence s reads its initial window from slot state_indices[s] when
    has_initial_state[s], and its last K-1 inputs (older window entries when it is shorter than K-1) are
    written to that slot. A slot equal to ``pad_slot_id`` is never read or written (its sequence starts from
    zeros). Sequences must use distinct slots. Returns y (T, dim) in x's dtype unless ``out`` is given.
    ``metadata`` (from ``conv_prefill_metadata``) avoids rebuilding the block map, a host sync, per call.
    """
    silu = check_activation(activation)
    if x.dim() != 2:
        raise ValueError(f"x must be (T, dim), got shape {tuple(x.shape)}")
    ntok, dim = x.shape
    if weight.dim() != 2 or weight.shape[0] != dim or weight.shape[1] < 2:
        raise ValueError(f"weight must be (dim={dim}, K>=2), got shape {tuple(weight.shape)}")
    width = weight.shape[1]
    if conv_states.dim() != 3:
        raise ValueError(f"conv_states must be (slots, dim, K-1), got shape {tuple(conv_states.shape)}")
    check_shape("conv_states", conv_states, (conv_states.shape[0], dim, width - 1))
    if bias is not None:
        check_shape("bias", bias, (dim,))
    check_float("conv_states", conv_states)
    device = check_same_device(x=x, weight=weight, bias=bias, conv_states=conv_states)
    meta = metadata if metadata is not None else conv_prefill_metadata(cu_seqlens, device=device)
    nseq = meta.cu_seqlens.shape[0] - 1
    if meta.ntokens != ntok:
        raise ValueError(f"cu_seqlens[-1] ({meta.ntokens}) must equal the number of tokens ({ntok})")
    idx = index_tensor(state_indices, nseq, device, "state_indices")
    init = None if has_initial_state is None else index_tensor(has_initial_state, nseq, device, "has_initial_state")
    if out is None:
        out = torch.empty((ntok, dim), dtype=x.dtype, device=device)
    else:
        check_shape("out", out, (ntok, dim))
    if nseq == 0:
        return out
    check_grid_dim("the number of sequences", nseq)
    cfg = conv_prefill_launch_config(dim, meta.block_t)
    block_t, block_d = meta.block_t, cfg["BLOCK_D"]
    nblocks = meta.block_seq.shape[0]
    if nblocks:
        _conv_prefill_kernel[(nblocks, triton.cdiv(dim, block_d))](
            x,
            weight,
            bias if bias is not None else weight,
            conv_states,
            idx,
            init if init is not None else idx,
            out,
            meta.cu_seqlens,
            meta.block_seq,
            meta.block_pos,
            dim,
            int(pad_slot_id),
            x.stride(0),
            x.stride(1),
            conv_states.stride(0),
            conv_states.stride(1),
            conv_states.stride(2),
            weight.stride(0),
            weight.stride(1),
            out.stride(0),
            out.stride(1),
            KW=width,
            HAS_BIAS=bias is not None,
            HAS_INIT=init is not None,
            SILU=silu,
            BLOCK_T=block_t,
            BLOCK_D=block_d,
            num_warps=cfg["num_warps"],
        )
    wb_block = cfg["WRITEBACK_BLOCK_D"]
    _conv_window_writeback_kernel[(nseq, triton.cdiv(dim, wb_block))](
        x,
        conv_states,
        idx,
        init if init is not None else idx,
        meta.cu_seqlens,
        dim,
        int(pad_slot_id),
        x.stride(0),
        x.stride(1),
        conv_states.stride(0),
        conv_states.stride(1),
        conv_states.stride(2),
        KW=width,
        HAS_INIT=init is not None,
        BLOCK_D=wb_block,
        num_warps=cfg["writeback_num_warps"],
    )
    return out
