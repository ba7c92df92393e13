"""Plain-torch references for the Mamba-2 (SSD) recurrence, usable in float64.

Notation, per head h of a sequence, token t:

    dt'_t = softplus(dt_t + dt_bias[h])            (or dt_t + dt_bias[h] when dt_softplus is False)
    a_t   = exp(dt'_t * A[h])                       (a scalar per head)
    S_t   = a_t * S_{t-1} + dt'_t * x_t (outer) B_t (an (P, N) matrix; B_t of the head's group)
    y_t   = S_t @ C_t + D[h] * x_t,   then y_t *= z_t * sigmoid(z_t) when z is given

Heads are split into G contiguous groups of H/G heads; group g(h) = h // (H/G) supplies B and C.

Every step is the affine map S -> a_t * S + b_t with b_t = dt'_t * x_t (outer) B_t. ``affine_compose`` and
``affine_scan`` express the recurrence through composition of such maps; the tests use them to check the
algebra the chunked scan relies on.

Every function computes in ``compute_dtype`` (default: float64 when the state pool is float64, else float32)
and writes state pools in their own dtype, in place, like the kernels.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = [
    "selective_state_update_ref",
    "ssd_scan_sequential_ref",
    "ssd_chunk_scan_ref",
    "affine_steps",
    "affine_compose",
    "affine_apply",
    "affine_scan",
]


def _compute_dtype(pool: torch.Tensor, compute_dtype: torch.dtype | None) -> torch.dtype:
    if compute_dtype is not None:
        return compute_dtype
    return torch.float64 if pool.dtype == torch.float64 else torch.float32


def _process_dt(dt: torch.Tensor, dt_bias, dt_softplus: bool, cd: torch.dtype) -> torch.Tensor:
    v = dt.to(cd)
    if dt_bias is not None:
        v = v + dt_bias.to(cd)
    if dt_softplus:
        v = F.softplus(v)  # threshold 20: v itself above 20, as in the kernels
    return v


def _expand_groups(t: torch.Tensor, nheads: int) -> torch.Tensor:
    """(..., G, N) -> (..., H, N): head h reads group h // (H/G)."""
    groups = t.shape[-2]
    if nheads % groups:
        raise ValueError(f"heads ({nheads}) must be a multiple of groups ({groups})")
    return t.repeat_interleave(nheads // groups, dim=-2)


def _d_term(D, x: torch.Tensor, cd: torch.dtype) -> torch.Tensor:
    """D[h] * x (D of shape (H,) or (H, P)); x (..., H, P)."""
    if D is None:
        return torch.zeros_like(x, dtype=cd)
    d = D.to(cd)
    if d.dim() == 1:
        d = d[:, None]
    return d * x.to(cd)


def _gate(y: torch.Tensor, z, cd: torch.dtype) -> torch.Tensor:
    if z is None:
        return y
    zz = z.to(cd)
    return y * (zz * torch.sigmoid(zz))


def _finish_scan(y: torch.Tensor, x: torch.Tensor, xc: torch.Tensor, D, z, cd: torch.dtype, out):
    """A prefill scan's epilogue: the D skip and the z gate, then y in x's dtype (or written into ``out``)."""
    y = _gate(y + _d_term(D, xc, cd), z, cd)
    if out is None:
        return y.to(x.dtype)
    out[: y.shape[0]].copy_(y)
    return out


def selective_state_update_ref(
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
    compute_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """One decode step for a batch of sequences whose states live in ``state`` (slots, H, P, N), in place.

    Entry b uses slot ``state_batch_indices[b]`` (slot b when None); an entry equal to ``pad_slot_id`` is neither
    read nor written, and its output row is zero. Returns y (batch, H, P) in x's dtype (or written into ``out``).
    """
    cd = _compute_dtype(state, compute_dtype)
    batch, nheads, _ = x.shape
    if state_batch_indices is None:
        idx = torch.arange(batch, device=x.device)
        valid = torch.ones(batch, dtype=torch.bool, device=x.device)
    else:
        idx = torch.as_tensor(state_batch_indices, device=x.device).long()
        valid = idx != pad_slot_id
    slots = idx[valid]
    y = torch.zeros(x.shape, dtype=cd, device=x.device)
    if slots.numel():
        xv = x[valid].to(cd)
        s = state[slots].to(cd)
        dtv = _process_dt(dt[valid], dt_bias, dt_softplus, cd)  # (nb, H)
        decay = torch.exp(dtv * A.to(cd))  # (nb, H)
        bh = _expand_groups(B[valid].to(cd), nheads)  # (nb, H, N)
        ch = _expand_groups(C[valid].to(cd), nheads)
        s = s * decay[..., None, None] + (dtv[..., None] * xv)[..., None] * bh[..., None, :]
        yv = (s * ch[..., None, :]).sum(-1) + _d_term(D, xv, cd)
        y[valid] = _gate(yv, None if z is None else z[valid], cd)
        state[slots] = s.to(state.dtype)
    if out is None:
        return y.to(x.dtype)
    out.copy_(y)
    return out


def _seq_bounds(cu_seqlens) -> list[tuple[int, int]]:
    cu = [int(v) for v in torch.as_tensor(cu_seqlens).tolist()]
    return list(zip(cu[:-1], cu[1:]))


def _flags(has_initial_state, n: int) -> list[bool]:
    if has_initial_state is None:
        return [False] * n
    return [bool(v) for v in torch.as_tensor(has_initial_state).tolist()]


def _initial_state(state_pool, slot: int, has_init: bool, pad_slot_id: int, shape, cd, device):
    if slot != pad_slot_id and has_init:
        return state_pool[slot].to(cd).clone()
    return torch.zeros(shape, dtype=cd, device=device)


def ssd_scan_sequential_ref(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    cu_seqlens,
    state_pool: torch.Tensor,
    state_indices,
    has_initial_state=None,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = True,
    pad_slot_id: int = -1,
    out: torch.Tensor | None = None,
    compute_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """The recurrence token by token over packed sequences: the ground truth for the chunked scans.

    Same contract as ``ssd_chunk_scan_ref`` (without a chunk size).
    """
    cd = _compute_dtype(state_pool, compute_dtype)
    ntok, nheads, headdim = x.shape
    dstate = B.shape[-1]
    bounds = _seq_bounds(cu_seqlens)
    idx = [int(v) for v in torch.as_tensor(state_indices).tolist()]
    init = _flags(has_initial_state, len(bounds))
    y = torch.zeros((ntok, nheads, headdim), dtype=cd, device=x.device)
    dtp = _process_dt(dt, dt_bias, dt_softplus, cd)  # (T, H)
    a_all = torch.exp(dtp * A.to(cd))
    bh = _expand_groups(B.to(cd), nheads)
    ch = _expand_groups(C.to(cd), nheads)
    xc = x.to(cd)
    for s, (lo, hi) in enumerate(bounds):
        st = _initial_state(state_pool, idx[s], init[s], pad_slot_id, (nheads, headdim, dstate), cd, x.device)
        for t in range(lo, hi):
            st = st * a_all[t][:, None, None] + (dtp[t][:, None] * xc[t])[:, :, None] * bh[t][:, None, :]
            y[t] = (st * ch[t][:, None, :]).sum(-1)
        if idx[s] != pad_slot_id:
            state_pool[idx[s]] = st.to(state_pool.dtype)
    return _finish_scan(y, x, xc, D, z, cd, out)


def ssd_chunk_scan_ref(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    cu_seqlens,
    state_pool: torch.Tensor,
    state_indices,
    has_initial_state=None,
    D: torch.Tensor | None = None,
    z: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = True,
    pad_slot_id: int = -1,
    out: torch.Tensor | None = None,
    compute_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """The chunked SSD algorithm (Mamba-2, arXiv 2405.21060) in plain torch, sequence by sequence.

    x (T, H, P), dt (T, H), A (H,), B and C (T, G, N), D (H,) or (H, P), z (T, H, P), dt_bias (H,).
    Sequence s spans tokens cu_seqlens[s]:cu_seqlens[s+1] and uses slot state_indices[s] of state_pool
    (slots, H, P, N): its initial state is read from there when has_initial_state[s] (zero otherwise, and
    always zero for a pad slot) and its final state is written back there (never for a pad slot).
    Each sequence is cut into chunks of ``chunk_size`` tokens counted from its own first token. Per chunk:
    the cumulative sum of dt'*A, the masked decay matrix L[l, s] = exp(cum_l - cum_s) for s <= l, the output
    (C B^T * L) (dt' x) plus the carried-in state's contribution C S exp(cum_l), and the next state
    S exp(cum_last) + sum_s exp(cum_last - cum_s) dt'_s x_s B_s^T.
    """
    if chunk_size < 1:
        raise ValueError("chunk_size must be >= 1")
    cd = _compute_dtype(state_pool, compute_dtype)
    ntok, nheads, headdim = x.shape
    dstate = B.shape[-1]
    bounds = _seq_bounds(cu_seqlens)
    idx = [int(v) for v in torch.as_tensor(state_indices).tolist()]
    init = _flags(has_initial_state, len(bounds))
    y = torch.zeros((ntok, nheads, headdim), dtype=cd, device=x.device)
    dtp = _process_dt(dt, dt_bias, dt_softplus, cd)  # (T, H)
    a_log = dtp * A.to(cd)  # log of each step's decay
    bh = _expand_groups(B.to(cd), nheads)  # (T, H, N)
    ch = _expand_groups(C.to(cd), nheads)
    xc = x.to(cd)
    for s, (lo, hi) in enumerate(bounds):
        st = _initial_state(state_pool, idx[s], init[s], pad_slot_id, (nheads, headdim, dstate), cd, x.device)
        for c0 in range(lo, hi, chunk_size):
            c1 = min(c0 + chunk_size, hi)
            cum = torch.cumsum(a_log[c0:c1], dim=0)  # (L, H)
            n = c1 - c0
            causal = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()
            diff = cum[:, None, :] - cum[None, :, :]  # (l, s, H)
            decay = torch.where(causal[..., None], diff, torch.full_like(diff, float("-inf"))).exp()
            cb = torch.einsum("lhn,shn->lsh", ch[c0:c1], bh[c0:c1])
            dx = dtp[c0:c1, :, None] * xc[c0:c1]  # (s, H, P)
            y_intra = torch.einsum("lsh,shp->lhp", cb * decay, dx)
            y_inter = torch.einsum("lhn,hpn->lhp", ch[c0:c1], st) * cum.exp()[:, :, None]
            y[c0:c1] = y_intra + y_inter
            tail = (cum[-1][None, :] - cum).exp()  # (s, H)
            st = st * cum[-1].exp()[:, None, None] + torch.einsum("sh,shp,shn->hpn", tail, dx, bh[c0:c1])
        if idx[s] != pad_slot_id:
            state_pool[idx[s]] = st.to(state_pool.dtype)
    return _finish_scan(y, x, xc, D, z, cd, out)


# ---------------------------------------------------------------------------------------------------------
# The recurrence as a composition of affine maps S -> a * S + b.


def affine_steps(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = True,
    compute_dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The affine map of every step of one sequence: a (T, H) and b (T, H, P, N), S_t = a_t * S_{t-1} + b_t."""
    nheads = x.shape[1]
    dtp = _process_dt(dt, dt_bias, dt_softplus, compute_dtype)
    a = torch.exp(dtp * A.to(compute_dtype))
    bh = _expand_groups(B.to(compute_dtype), nheads)
    b = (dtp[..., None] * x.to(compute_dtype))[..., None] * bh[:, :, None, :]
    return a, b


def affine_compose(first, second):
    """The map 'apply ``first``, then ``second``': (a2, b2) o (a1, b1) = (a2 * a1, a2 * b1 + b2).

    ``a`` has the leading shape of ``b`` without its last two (P, N) dimensions.
    """
    a1, b1 = first
    a2, b2 = second
    return a2 * a1, a2[..., None, None] * b1 + b2


def affine_apply(ab, state: torch.Tensor) -> torch.Tensor:
    a, b = ab
    return a[..., None, None] * state + b


def affine_scan(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Inclusive prefix compositions along dim 0 by recursive doubling (Hillis-Steele), in log2(T) rounds.

    Returns (a_cum, b_cum) with (a_cum[t], b_cum[t]) = step t o ... o step 0, so that
    S_t = a_cum[t] * S_init + b_cum[t]. The grouping of the compositions differs from the sequential
    recurrence, so agreement between the two rests on associativity.
    """
    a_cum, b_cum = a.clone(), b.clone()
    n = a.shape[0]
    shift = 1
    while shift < n:
        earlier = (a_cum[:-shift], b_cum[:-shift])
        later = (a_cum[shift:], b_cum[shift:])
        na, nb = affine_compose(earlier, later)
        a_cum = torch.cat([a_cum[:shift], na])
        b_cum = torch.cat([b_cum[:shift], nb])
        shift *= 2
    return a_cum, b_cum
