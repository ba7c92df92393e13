"""Prefill: the chunked SSD scan of Mamba-2 (arXiv 2405.21060) over packed variable-length sequences (Triton).

Chunking is per sequence: every sequence is cut into chunks of ``chunk_size`` tokens counted from its own
first token, so a chunk never holds tokens of two sequences, wherever the sequence starts in the packed
buffer. A host-built map gives each chunk its sequence, first packed token and length, and each sequence
its range of chunks (``ssd_chunk_metadata``). Five launches, all over chunks except the fourth:

1. ``_chunk_cumsum_kernel``  dt' = softplus(dt + dt_bias) and the running sum of dt'*A inside each chunk
   (positions past the chunk's end get dt' = 0, so the sum stays flat there).
2. ``_chunk_cb_kernel``      C B^T per chunk and group (the lower triangle of blocks only), shared by the
   H/G heads of the group.
3. ``_chunk_state_kernel``   each chunk's own final state, from a zero start:
   sum_s exp(cum_last - cum_s) dt'_s x_s B_s^T, as a tl.dot over the chunk.
4. ``_state_passing_kernel`` per sequence, sequentially over its chunks: the state entering each chunk,
   seeded from the pool (when the sequence has an initial state) and written back to the pool at the end.
5. ``_chunk_scan_kernel``    y = (C B^T o L) (dt' x) + exp(cum) C S_in + D x, then the z gate, where L is
   the causal decay matrix exp(cum_l - cum_s), s <= l.

All sums accumulate in fp32. With 16-bit inputs the tl.dot operands are 16-bit (tensor cores) and the states
entering the chunks are kept in the input dtype; with fp32 inputs everything stays fp32 (IEEE dots).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .._common import (
    check_float,
    check_grid_dim,
    check_same_device,
    check_shape,
    dot_block,
    index_tensor,
    lastdim_contiguous,
    mma,
    next_pow2,
    silu_fp32,
    softplus_fp32,
)

__all__ = ["ssd_chunk_scan", "SSDChunkMeta", "ssd_chunk_metadata", "chunk_scan_launch_config"]


@dataclass
class SSDChunkMeta:
    """Chunk <-> sequence maps for one packed batch (build once per batch, reuse for every layer)."""

    chunk_size: int
    ntokens: int
    nseqs: int
    chunk_start: torch.Tensor  # (nchunks,) first packed token of each chunk
    chunk_len: torch.Tensor  # (nchunks,) tokens in each chunk, 1..chunk_size
    cu_chunks: torch.Tensor  # (nseq + 1,) chunks of sequence s are cu_chunks[s]:cu_chunks[s+1]

    @property
    def nchunks(self) -> int:
        return int(self.chunk_start.shape[0])


def ssd_chunk_metadata(cu_seqlens, chunk_size: int, device=None) -> SSDChunkMeta:
    """Cut each sequence of ``cu_seqlens`` into chunks of ``chunk_size`` tokens from its own start.

    Runs on the host (reads ``cu_seqlens`` back if it lives on a GPU).
    """
    if chunk_size < 1:
        raise ValueError("chunk_size must be >= 1")
    cu = [int(v) for v in torch.as_tensor(cu_seqlens).tolist()]
    if len(cu) < 2 or cu[0] != 0 or any(b < a for a, b in zip(cu, cu[1:])):
        raise ValueError("cu_seqlens must start at 0 and be non-decreasing, with at least one sequence")
    if device is None:
        device = cu_seqlens.device if isinstance(cu_seqlens, torch.Tensor) else torch.device("cpu")
    starts, lens, cu_chunks = [], [], [0]
    for a, b in zip(cu, cu[1:]):
        for c0 in range(a, b, chunk_size):
            starts.append(c0)
            lens.append(min(chunk_size, b - c0))
        cu_chunks.append(len(starts))
    as_dev = lambda v: torch.tensor(v, dtype=torch.int32, device=device)  # noqa: E731
    return SSDChunkMeta(chunk_size, cu[-1], len(cu) - 1, as_dev(starts), as_dev(lens), as_dev(cu_chunks))


# ---------------------------------------------------------------------------------------------------------
# 1. dt' and the cumulative log-decay inside each chunk


@triton.jit
def _chunk_cumsum_kernel(
    dt_ptr,
    A_ptr,
    dt_bias_ptr,
    chunk_start_ptr,
    chunk_len_ptr,
    dt_out_ptr,
    cum_ptr,
    dt_t,
    dt_h,
    H: tl.constexpr,
    Q: tl.constexpr,
    HAS_DT_BIAS: tl.constexpr,
    DT_SOFTPLUS: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    c = tl.program_id(0)
    pid_h = tl.program_id(1)
    start = tl.load(chunk_start_ptr + c).to(tl.int64)
    clen = tl.load(chunk_len_ptr + c)
    offs_l = tl.arange(0, BLOCK_Q)
    offs_h = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    mask_h = offs_h < H
    mask = (offs_l < clen)[:, None] & mask_h[None, :]
    dt = tl.load(dt_ptr + (start + offs_l)[:, None] * dt_t + offs_h[None, :] * dt_h, mask=mask, other=0.0)
    dt = dt.to(tl.float32)
    if HAS_DT_BIAS:
        dt += tl.load(dt_bias_ptr + offs_h, mask=mask_h, other=0.0).to(tl.float32)[None, :]
    if DT_SOFTPLUS:
        dt = softplus_fp32(dt)
    dt = tl.where(mask, dt, 0.0)
    a = tl.load(A_ptr + offs_h, mask=mask_h, other=0.0).to(tl.float32)
    cum = tl.cumsum(dt * a[None, :], axis=0)
    # 64-bit: c · H · Q passes 2^31 within the profile's token bound once H · Q > 32,768 (chunk 256, 128+ heads)
    out_off = c.to(tl.int64) * (H * Q) + offs_h[None, :] * Q + offs_l[:, None]
    out_mask = (offs_l < Q)[:, None] & mask_h[None, :]
    tl.store(dt_out_ptr + out_off, dt, mask=out_mask)
    tl.store(cum_ptr + out_off, cum, mask=out_mask)


# ---------------------------------------------------------------------------------------------------------
# 2. C B^T per chunk and group


@triton.jit
def _chunk_cb_kernel(
    C_ptr,
    B_ptr,
    cb_ptr,
    chunk_start_ptr,
    chunk_len_ptr,
    C_t,
    C_g,
    B_t,
    B_g,
    G: tl.constexpr,
    N: tl.constexpr,
    Q: tl.constexpr,
    EXACT_F32: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pid = tl.program_id(0)
    g = tl.program_id(1)
    c = tl.program_id(2)
    n_s: tl.constexpr = (Q + BLOCK_S - 1) // BLOCK_S
    mb = pid // n_s
    sb = pid % n_s
    # blocks strictly above the diagonal are never read (the output is causal)
    if sb * BLOCK_S <= mb * BLOCK_M + BLOCK_M - 1:
        start = tl.load(chunk_start_ptr + c).to(tl.int64)
        clen = tl.load(chunk_len_ptr + c)
        offs_m = mb * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_s = sb * BLOCK_S + tl.arange(0, BLOCK_S)
        acc = tl.zeros((BLOCK_M, BLOCK_S), dtype=tl.float32)
        for k0 in range(0, N, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            mask_k = offs_k < N
            cv = tl.load(
                C_ptr + (start + offs_m)[:, None] * C_t + g * C_g + offs_k[None, :],
                mask=(offs_m < clen)[:, None] & mask_k[None, :],
                other=0.0,
            )
            bv = tl.load(
                B_ptr + (start + offs_s)[None, :] * B_t + g * B_g + offs_k[:, None],
                mask=(offs_s < clen)[None, :] & mask_k[:, None],
                other=0.0,
            )
            acc = mma(cv, bv, acc, EXACT_F32)
        tl.store(
            cb_ptr + (c * G + g).to(tl.int64) * (Q * Q) + offs_m[:, None] * Q + offs_s[None, :],
            acc,
            mask=(offs_m < Q)[:, None] & (offs_s < Q)[None, :],
        )


# ---------------------------------------------------------------------------------------------------------
# 3. each chunk's own final state (from a zero start)


@triton.jit
def _chunk_state_kernel(
    x_ptr,
    B_ptr,
    dt_ptr,
    cum_ptr,
    states_ptr,
    chunk_start_ptr,
    chunk_len_ptr,
    x_t,
    x_h,
    B_t,
    B_g,
    H: tl.constexpr,
    P: tl.constexpr,
    N: tl.constexpr,
    Q: tl.constexpr,
    HEADS_PER_GROUP: tl.constexpr,
    EXACT_F32: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_L: tl.constexpr,
):
    pid = tl.program_id(0)
    pid_pn = tl.program_id(1)
    c = tl.program_id(2)
    h = pid % H  # heads fastest: neighbouring programs share B tiles through L2
    n_n: tl.constexpr = (N + BLOCK_N - 1) // BLOCK_N
    pb = pid_pn // n_n
    nb = pid_pn % n_n
    g = h // HEADS_PER_GROUP
    start = tl.load(chunk_start_ptr + c).to(tl.int64)
    clen = tl.load(chunk_len_ptr + c)
    offs_p = pb * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_n = nb * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_p = offs_p < P
    mask_n = offs_n < N
    row = (c * H + h).to(tl.int64) * Q
    cum_last = tl.load(cum_ptr + row + Q - 1)
    acc = tl.zeros((BLOCK_P, BLOCK_N), dtype=tl.float32)
    for l0 in range(0, Q, BLOCK_L):
        offs_l = l0 + tl.arange(0, BLOCK_L)
        mask_l = offs_l < clen
        xt = tl.load(
            x_ptr + (start + offs_l)[None, :] * x_t + h * x_h + offs_p[:, None],
            mask=mask_l[None, :] & mask_p[:, None],
            other=0.0,
        )
        dtl = tl.load(dt_ptr + row + offs_l, mask=mask_l, other=0.0)
        cl = tl.load(cum_ptr + row + offs_l, mask=mask_l, other=0.0)
        scale = tl.where(mask_l, tl.exp(cum_last - cl) * dtl, 0.0)
        bv = tl.load(
            B_ptr + (start + offs_l)[:, None] * B_t + g * B_g + offs_n[None, :],
            mask=mask_l[:, None] & mask_n[None, :],
            other=0.0,
        ).to(tl.float32)
        bv = (bv * scale[:, None]).to(xt.dtype)
        acc = mma(xt, bv, acc, EXACT_F32)
    tl.store(
        states_ptr + (c * H + h).to(tl.int64) * (P * N) + offs_p[:, None] * N + offs_n[None, :],
        acc,
        mask=mask_p[:, None] & mask_n[None, :],
    )


# ---------------------------------------------------------------------------------------------------------
# 4. sequential state passing across the chunks of each sequence


@triton.jit
def _state_passing_kernel(
    states_ptr,
    prev_ptr,
    cum_ptr,
    pool_ptr,
    idx_ptr,
    init_ptr,
    cu_chunks_ptr,
    pad_slot_id,
    s_slot,
    s_head,
    s_p,
    H: tl.constexpr,
    P: tl.constexpr,
    N: tl.constexpr,
    Q: tl.constexpr,
    HAS_INIT: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid_pn = tl.program_id(0)
    h = tl.program_id(1)
    seq = tl.program_id(2)
    n_n: tl.constexpr = (N + BLOCK_N - 1) // BLOCK_N
    pb = pid_pn // n_n
    nb = pid_pn % n_n
    offs_p = pb * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_n = nb * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_p < P)[:, None] & (offs_n < N)[None, :]
    tile = offs_p[:, None] * N + offs_n[None, :]

    slot = tl.load(idx_ptr + seq).to(tl.int64)
    valid = slot != pad_slot_id
    slot = tl.where(valid, slot, 0)
    pool_ptrs = pool_ptr + slot * s_slot + h * s_head + offs_p[:, None] * s_p + offs_n[None, :]
    if HAS_INIT:
        use_init = valid & (tl.load(init_ptr + seq).to(tl.int32) != 0)
        state = tl.load(pool_ptrs, mask=mask & use_init, other=0.0).to(tl.float32)
    else:
        state = tl.zeros((BLOCK_P, BLOCK_N), dtype=tl.float32)
    c0 = tl.load(cu_chunks_ptr + seq)
    c1 = tl.load(cu_chunks_ptr + seq + 1)
    for c in range(c0, c1):
        off = (c * H + h).to(tl.int64) * (P * N)
        own = tl.load(states_ptr + off + tile, mask=mask, other=0.0)
        tl.store(prev_ptr + off + tile, state.to(prev_ptr.dtype.element_ty), mask=mask)
        decay = tl.exp(tl.load(cum_ptr + (c * H + h).to(tl.int64) * Q + Q - 1))
        state = state * decay + own
    tl.store(pool_ptrs, state.to(pool_ptr.dtype.element_ty), mask=mask & valid)


# ---------------------------------------------------------------------------------------------------------
# 5. chunk outputs


@triton.jit
def _chunk_scan_kernel(
    x_ptr,
    z_ptr,
    C_ptr,
    D_ptr,
    y_ptr,
    cb_ptr,
    dt_ptr,
    cum_ptr,
    prev_ptr,
    chunk_start_ptr,
    chunk_len_ptr,
    x_t,
    x_h,
    z_t,
    z_h,
    C_t,
    C_g,
    D_h,
    D_p,
    y_t,
    y_h,
    H: tl.constexpr,
    G: tl.constexpr,
    P: tl.constexpr,
    N: tl.constexpr,
    Q: tl.constexpr,
    HEADS_PER_GROUP: tl.constexpr,
    HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr,
    EXACT_F32: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pid = tl.program_id(0)
    mb = tl.program_id(1)
    c = tl.program_id(2)
    h = pid % H  # heads fastest: the H/G heads of a group read the same C B^T and C tiles back to back
    pb = pid // H
    g = h // HEADS_PER_GROUP
    start = tl.load(chunk_start_ptr + c).to(tl.int64)
    clen = tl.load(chunk_len_ptr + c)
    if mb * BLOCK_M < clen:
        offs_m = mb * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_p = pb * BLOCK_P + tl.arange(0, BLOCK_P)
        mask_m = offs_m < clen
        mask_p = offs_p < P
        row = (c * H + h).to(tl.int64) * Q
        cum_m = tl.load(cum_ptr + row + offs_m, mask=offs_m < Q, other=0.0)

        # carried-in state: exp(cum_l) * C_l . S_in
        acc = tl.zeros((BLOCK_M, BLOCK_P), dtype=tl.float32)
        prev_base = prev_ptr + (c * H + h).to(tl.int64) * (P * N)
        for k0 in range(0, N, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            mask_k = offs_k < N
            cv = tl.load(
                C_ptr + (start + offs_m)[:, None] * C_t + g * C_g + offs_k[None, :],
                mask=mask_m[:, None] & mask_k[None, :],
                other=0.0,
            )
            sv = tl.load(
                prev_base + offs_p[None, :] * N + offs_k[:, None],
                mask=mask_p[None, :] & mask_k[:, None],
                other=0.0,
            )
            acc = mma(cv, sv.to(cv.dtype), acc, EXACT_F32)
        acc = acc * tl.exp(cum_m)[:, None]

        # inside the chunk: sum_{s <= l} (C_l . B_s) exp(cum_l - cum_s) dt'_s x_s
        cb_base = cb_ptr + (c * G + g).to(tl.int64) * (Q * Q)
        hi = tl.minimum((mb + 1) * BLOCK_M, clen)
        for s0 in range(0, hi, BLOCK_S):
            offs_s = s0 + tl.arange(0, BLOCK_S)
            mask_s = offs_s < clen
            causal = (offs_s[None, :] <= offs_m[:, None]) & mask_s[None, :] & mask_m[:, None]
            cb = tl.load(cb_base + offs_m[:, None] * Q + offs_s[None, :], mask=causal, other=0.0)
            cum_s = tl.load(cum_ptr + row + offs_s, mask=mask_s, other=0.0)
            dt_s = tl.load(dt_ptr + row + offs_s, mask=mask_s, other=0.0)
            seg = tl.where(causal, cum_m[:, None] - cum_s[None, :], float("-inf"))
            w = tl.where(causal, cb * tl.exp(seg) * dt_s[None, :], 0.0)
            xs = tl.load(
                x_ptr + (start + offs_s)[:, None] * x_t + h * x_h + offs_p[None, :],
                mask=mask_s[:, None] & mask_p[None, :],
                other=0.0,
            )
            acc = mma(w.to(xs.dtype), xs, acc, EXACT_F32)

        mask_out = mask_m[:, None] & mask_p[None, :]
        if HAS_D:
            xm = tl.load(
                x_ptr + (start + offs_m)[:, None] * x_t + h * x_h + offs_p[None, :], mask=mask_out, other=0.0
            ).to(tl.float32)
            acc += xm * tl.load(D_ptr + h * D_h + offs_p * D_p, mask=mask_p, other=0.0).to(tl.float32)[None, :]
        if HAS_Z:
            zv = tl.load(
                z_ptr + (start + offs_m)[:, None] * z_t + h * z_h + offs_p[None, :], mask=mask_out, other=0.0
            ).to(tl.float32)
            acc *= silu_fp32(zv)
        tl.store(
            y_ptr + (start + offs_m)[:, None] * y_t + h * y_h + offs_p[None, :],
            acc.to(y_ptr.dtype.element_ty),
            mask=mask_out,
        )


# ---------------------------------------------------------------------------------------------------------


def chunk_scan_launch_config(
    chunk_size: int, headdim: int, dstate: int, nheads: int, nseqs: int, on_gpu: bool, exact_f32: bool = False
) -> dict:
    """Tile sizes and warps for the five launches, from the shape alone (no autotuning).

    Dot tiles are 64 wide for 16-bit inputs (tensor cores; 16 minimum, the tl.dot requirement), capped by the
    padded problem size; 32 wide for fp32 inputs, whose IEEE dots run on the FMA units and spill registers
    with 64-wide tiles on sm_90. State passing is latency-bound (one sequential loop per sequence): its tiles
    shrink until a single sequence yields a few thousand programs, enough to keep every SM's loads in flight.
    """
    cap = 32 if exact_f32 else 64
    q2 = next_pow2(chunk_size)
    block_pass_n = min(next_pow2(dstate), 64)
    block_pass_p = min(next_pow2(headdim), max(1, 1024 // block_pass_n))
    if on_gpu:
        n_pn = triton.cdiv(dstate, block_pass_n)
        while block_pass_p > 1 and nseqs * nheads * triton.cdiv(headdim, block_pass_p) * n_pn < 4096:
            block_pass_p //= 2
    bq, bp, bn = dot_block(chunk_size, cap), dot_block(headdim, cap), dot_block(dstate, cap)
    dots = {"num_warps": 4, "num_stages": 2}
    return {
        "cumsum": {"BLOCK_Q": q2, "BLOCK_H": max(1, min(next_pow2(nheads), max(1, 4096 // q2))), "num_warps": 4},
        "cb": {"BLOCK_M": bq, "BLOCK_S": bq, "BLOCK_K": bn, **dots},
        "state": {"BLOCK_P": bp, "BLOCK_N": bn, "BLOCK_L": bq, **dots},
        "passing": {
            "BLOCK_P": block_pass_p,
            "BLOCK_N": block_pass_n,
            "num_warps": max(1, min(4, block_pass_p * block_pass_n // 256)),
        },
        "scan": {"BLOCK_M": bq, "BLOCK_P": bp, "BLOCK_S": bq, "BLOCK_K": bn, **dots},
    }


def ssd_chunk_scan(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    cu_seqlens: torch.Tensor,
    state_pool: torch.Tensor,
    state_indices: torch.Tensor,
    has_initial_state: torch.Tensor | None,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = True,
    pad_slot_id: int = -1,
    out: torch.Tensor | None = None,
    metadata: SSDChunkMeta | None = None,
) -> torch.Tensor:
    """Chunked SSD prefill over packed sequences; final states are written into ``state_pool``.

    x (T, H, P) with T == cu_seqlens[-1]; dt (T, H); A (H,); B, C (T, G, N) with H % G == 0; D (H,) or
    (H, P); z (T, H, P); dt_bias (H,); cu_seqlens (nseq+1,); state_pool (slots, H, P, N) fp32/bf16/fp16 with
    unit stride along N; state_indices (nseq,); has_initial_state (nseq,) bool or None (all start from zero).
    Sequence s starts from ``state_pool[state_indices[s]]`` when has_initial_state[s] (else from zero) and its
    final state is stored there in the pool's dtype. A slot equal to ``pad_slot_id`` is never read or
    written. Sequences must use distinct slots. Returns y (T, H, P) in x's dtype unless ``out`` is given.
    ``metadata`` (``ssd_chunk_metadata(cu_seqlens, chunk_size)``) skips rebuilding the chunk map, which reads
    ``cu_seqlens`` on the host, on every call.
    """
    if x.dim() != 3:
        raise ValueError(f"x must be (T, H, P), got shape {tuple(x.shape)}")
    ntok, nheads, headdim = x.shape
    if B.dim() != 3:
        raise ValueError(f"B must be (T, G, N), got shape {tuple(B.shape)}")
    ngroups, dstate = B.shape[1], B.shape[2]
    check_shape("dt", dt, (ntok, nheads))
    check_shape("A", A, (nheads,))
    check_shape("B", B, (ntok, ngroups, dstate))
    check_shape("C", C, (ntok, ngroups, dstate))
    if ngroups < 1 or nheads % ngroups:
        raise ValueError(f"heads ({nheads}) must be a multiple of groups ({ngroups})")
    if D is not None and tuple(D.shape) not in ((nheads,), (nheads, headdim)):
        raise ValueError(f"D must be (H,) or (H, P), got shape {tuple(D.shape)}")
    if z is not None:
        check_shape("z", z, (ntok, nheads, headdim))
    if dt_bias is not None:
        check_shape("dt_bias", dt_bias, (nheads,))
    if state_pool.dim() != 4:
        raise ValueError(f"state_pool must be (slots, H, P, N), got shape {tuple(state_pool.shape)}")
    check_shape("state_pool", state_pool, (state_pool.shape[0], nheads, headdim, dstate))
    if state_pool.stride(-1) != 1:
        raise ValueError("state_pool must have unit stride along N (it is updated in place, never copied)")
    for name, t in (("x", x), ("B", B), ("C", C), ("state_pool", state_pool)):
        check_float(name, t)
    if B.dtype != x.dtype or C.dtype != x.dtype:
        raise TypeError(f"x, B and C must share a dtype, got {x.dtype}, {B.dtype}, {C.dtype}")
    device = check_same_device(x=x, dt=dt, A=A, B=B, C=C, D=D, z=z, dt_bias=dt_bias, state_pool=state_pool)
    meta = metadata if metadata is not None else ssd_chunk_metadata(cu_seqlens, chunk_size, device=device)
    if meta.chunk_size != chunk_size:
        raise ValueError(f"metadata was built for chunk_size {meta.chunk_size}, not {chunk_size}")
    if meta.ntokens != ntok:
        raise ValueError(f"cu_seqlens[-1] ({meta.ntokens}) must equal the number of tokens ({ntok})")
    nseq = meta.nseqs
    idx = index_tensor(state_indices, nseq, device, "state_indices")
    init = None if has_initial_state is None else index_tensor(has_initial_state, nseq, device, "has_initial_state")
    x, B, C, z = (lastdim_contiguous(t) for t in (x, B, C, z))
    if out is None:
        out = torch.empty((ntok, nheads, headdim), dtype=x.dtype, device=device)
    else:
        check_shape("out", out, (ntok, nheads, headdim))
        if out.stride(-1) != 1:
            raise ValueError("out must have unit stride along P")
    if nseq == 0:
        return out

    Q = int(chunk_size)
    nchunks = meta.nchunks
    check_grid_dim("the number of chunks", nchunks)
    check_grid_dim("the number of sequences", nseq)
    exact = x.dtype == torch.float32
    cfg = chunk_scan_launch_config(Q, headdim, dstate, nheads, nseq, device.type == "cuda", exact)
    f32 = torch.float32
    dt_proc = torch.empty((nchunks, nheads, Q), dtype=f32, device=device)
    cum = torch.empty((nchunks, nheads, Q), dtype=f32, device=device)
    cb = torch.empty((nchunks, ngroups, Q, Q), dtype=f32, device=device)
    states = torch.empty((nchunks, nheads, headdim, dstate), dtype=f32, device=device)
    prev = torch.empty((nchunks, nheads, headdim, dstate), dtype=f32 if exact else x.dtype, device=device)
    hpg = nheads // ngroups

    if nchunks:
        k = cfg["cumsum"]
        _chunk_cumsum_kernel[(nchunks, triton.cdiv(nheads, k["BLOCK_H"]))](
            dt,
            A,
            dt_bias if dt_bias is not None else A,
            meta.chunk_start,
            meta.chunk_len,
            dt_proc,
            cum,
            dt.stride(0),
            dt.stride(1),
            H=nheads,
            Q=Q,
            HAS_DT_BIAS=dt_bias is not None,
            DT_SOFTPLUS=bool(dt_softplus),
            BLOCK_Q=k["BLOCK_Q"],
            BLOCK_H=k["BLOCK_H"],
            num_warps=k["num_warps"],
        )
        k = cfg["cb"]
        n_tiles = triton.cdiv(Q, k["BLOCK_M"]) * triton.cdiv(Q, k["BLOCK_S"])
        _chunk_cb_kernel[(n_tiles, ngroups, nchunks)](
            C,
            B,
            cb,
            meta.chunk_start,
            meta.chunk_len,
            C.stride(0),
            C.stride(1),
            B.stride(0),
            B.stride(1),
            G=ngroups,
            N=dstate,
            Q=Q,
            EXACT_F32=exact,
            BLOCK_M=k["BLOCK_M"],
            BLOCK_S=k["BLOCK_S"],
            BLOCK_K=k["BLOCK_K"],
            num_warps=k["num_warps"],
            num_stages=k["num_stages"],
        )
        k = cfg["state"]
        n_tiles = triton.cdiv(headdim, k["BLOCK_P"]) * triton.cdiv(dstate, k["BLOCK_N"])
        _chunk_state_kernel[(nheads, n_tiles, nchunks)](
            x,
            B,
            dt_proc,
            cum,
            states,
            meta.chunk_start,
            meta.chunk_len,
            x.stride(0),
            x.stride(1),
            B.stride(0),
            B.stride(1),
            H=nheads,
            P=headdim,
            N=dstate,
            Q=Q,
            HEADS_PER_GROUP=hpg,
            EXACT_F32=exact,
            BLOCK_P=k["BLOCK_P"],
            BLOCK_N=k["BLOCK_N"],
            BLOCK_L=k["BLOCK_L"],
            num_warps=k["num_warps"],
            num_stages=k["num_stages"],
        )
    k = cfg["passing"]
    n_tiles = triton.cdiv(headdim, k["BLOCK_P"]) * triton.cdiv(dstate, k["BLOCK_N"])
    _state_passing_kernel[(n_tiles, nheads, nseq)](
        states,
        prev,
        cum,
        state_pool,
        idx,
        init if init is not None else idx,
        meta.cu_chunks,
        int(pad_slot_id),
        state_pool.stride(0),
        state_pool.stride(1),
        state_pool.stride(2),
        H=nheads,
        P=headdim,
        N=dstate,
        Q=Q,
        HAS_INIT=init is not None,
        BLOCK_P=k["BLOCK_P"],
        BLOCK_N=k["BLOCK_N"],
        num_warps=k["num_warps"],
    )
    if nchunks:
        k = cfg["scan"]
        d_h, d_p = (0, 0) if D is None else ((D.stride(0), 0) if D.dim() == 1 else (D.stride(0), D.stride(1)))
        _chunk_scan_kernel[(nheads * triton.cdiv(headdim, k["BLOCK_P"]), triton.cdiv(Q, k["BLOCK_M"]), nchunks)](
            x,
            z if z is not None else x,
            C,
            D if D is not None else A,
            out,
            cb,
            dt_proc,
            cum,
            prev,
            meta.chunk_start,
            meta.chunk_len,
            x.stride(0),
            x.stride(1),
            z.stride(0) if z is not None else 0,
            z.stride(1) if z is not None else 0,
            C.stride(0),
            C.stride(1),
            d_h,
            d_p,
            out.stride(0),
            out.stride(1),
            H=nheads,
            G=ngroups,
            P=headdim,
            N=dstate,
            Q=Q,
            HEADS_PER_GROUP=hpg,
            HAS_D=D is not None,
            HAS_Z=z is not None,
            EXACT_F32=exact,
            BLOCK_M=k["BLOCK_M"],
            BLOCK_P=k["BLOCK_P"],
            BLOCK_S=k["BLOCK_S"],
            BLOCK_K=k["BLOCK_K"],
            num_warps=k["num_warps"],
            num_stages=k["num_stages"],
        )
    return out
