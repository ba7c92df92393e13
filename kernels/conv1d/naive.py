"""Plain-torch references for the short causal depthwise convolution of Mamba-style mixers, usable in float64.

Channel d of a sequence with inputs u_0, u_1, ... and kernel width K:

    y_t[d] = act(bias[d] + sum_{k<K} weight[d, k] * u_{t-K+1+k}[d])

where inputs before the sequence's first token come from its conv window (the last K-1 inputs seen before,
oldest first) or are zero when there is none. The window lives in a pool (slots, dim, K-1); after the call
it holds the last K-1 inputs of the sequence (including older window entries when fewer than K-1 new tokens
arrived). ``act`` is SiLU (``activation="silu"`` or ``"swish"``) or the identity (``None``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["causal_conv1d_update_ref", "causal_conv1d_prefill_ref", "check_activation"]


def check_activation(activation) -> bool:
    """True for SiLU, False for none; raises on anything else."""
    if activation in (None, False, "identity", "none"):
        return False
    if activation in (True, "silu", "swish"):
        return True
    raise ValueError(f"activation must be None, 'silu' or 'swish', got {activation!r}")


def _flags(has_initial_state, n: int) -> list[bool]:
    if has_initial_state is None:
        return [False] * n
    return [bool(v) for v in torch.as_tensor(has_initial_state).tolist()]


def _cd(pool: torch.Tensor, compute_dtype):
    if compute_dtype is not None:
        return compute_dtype
    return torch.float64 if pool.dtype == torch.float64 else torch.float32


def causal_conv1d_update_ref(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation="silu",
    conv_state_indices: torch.Tensor | None = None,
    pad_slot_id: int = -1,
    out: torch.Tensor | None = None,
    compute_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """One decode token per sequence: x (batch, dim), pool (slots, dim, K-1), weight (dim, K).

    Entry b uses slot ``conv_state_indices[b]`` (b when None). A pad entry is neither read nor written and its
    output row is zero. Rolls each used window by one in place; returns y (batch, dim).
    """
    silu = check_activation(activation)
    cd = _cd(conv_state, compute_dtype)
    batch, _ = x.shape
    if conv_state_indices is None:
        idx = torch.arange(batch, device=x.device)
        valid = torch.ones(batch, dtype=torch.bool, device=x.device)
    else:
        idx = torch.as_tensor(conv_state_indices, device=x.device).long()
        valid = idx != pad_slot_id
    slots = idx[valid]
    y = torch.zeros(x.shape, dtype=cd, device=x.device)
    if slots.numel():
        window = torch.cat([conv_state[slots].to(cd), x[valid].to(cd)[..., None]], dim=-1)  # (nb, dim, K)
        yv = (window * weight.to(cd)).sum(-1)
        if bias is not None:
            yv = yv + bias.to(cd)
        y[valid] = F.silu(yv) if silu else yv
        conv_state[slots] = window[..., 1:].to(conv_state.dtype)
    if out is None:
        return y.to(x.dtype)
    out.copy_(y)
    return out


def causal_conv1d_prefill_ref(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    cu_seqlens,
    conv_states: torch.Tensor,
    state_indices,
    has_initial_state=None,
    activation="silu",
    pad_slot_id: int = -1,
    out: torch.Tensor | None = None,
    compute_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Packed variable-length prefill: x (T, dim); sequence s spans cu_seqlens[s]:cu_seqlens[s+1].

    The window of sequence s is read from ``conv_states[state_indices[s]]`` when has_initial_state[s] (zeros
    otherwise, and always for a pad slot) and the final window is written back there (never for a pad slot).
    """
    silu = check_activation(activation)
    cd = _cd(conv_states, compute_dtype)
    width = weight.shape[1]
    cu = [int(v) for v in torch.as_tensor(cu_seqlens).tolist()]
    idx = [int(v) for v in torch.as_tensor(state_indices).tolist()]
    nseq = len(cu) - 1
    init = _flags(has_initial_state, nseq)
    dim = x.shape[1]
    y = torch.zeros(x.shape, dtype=cd, device=x.device)
    w = weight.to(cd)
    for s in range(nseq):
        lo, hi = cu[s], cu[s + 1]
        if idx[s] != pad_slot_id and init[s]:
            prev = conv_states[idx[s]].to(cd).T  # (K-1, dim), oldest first
        else:
            prev = torch.zeros((width - 1, dim), dtype=cd, device=x.device)
        ext = torch.cat([prev, x[lo:hi].to(cd)], dim=0)  # (K-1+L, dim)
        for t in range(hi - lo):
            v = (ext[t : t + width] * w.T).sum(0)
            if bias is not None:
                v = v + bias.to(cd)
            y[lo + t] = F.silu(v) if silu else v
        if idx[s] != pad_slot_id:
            conv_states[idx[s]] = ext[ext.shape[0] - (width - 1) :].T.to(conv_states.dtype)
    if out is None:
        return y.to(x.dtype)
    out.copy_(y)
    return out
