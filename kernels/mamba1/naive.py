"""Plain-torch reference of the Mamba-1 decode step (float64-capable), beside ``state_update.py``.

Per channel i of the inner width and state column n, with dt' = softplus(dt + dt_bias):

    h[i, n] <- exp(dt'[i] A[i, n]) h[i, n] + dt'[i] B[n] x[i]
    y[i]     = sum_n h[i, n] C[n] + D[i] x[i],  then y *= silu(z[i])

Unlike Mamba-2, the decay has its own rate per (channel, state column) and the step size is per channel.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["mamba1_state_update_ref"]


def mamba1_state_update_ref(
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
) -> torch.Tensor:
    """state (slots, I, N), updated in place; x, dt, z (batch, I); A (I, N); B, C (batch, N); D, dt_bias (I,).
    Returns y (batch, I) in state's dtype; a pad entry leaves the pool alone and gets a zero row."""
    cd = state.dtype
    out = torch.zeros(x.shape, dtype=cd, device=state.device)
    for b in range(x.shape[0]):
        slot = b if state_batch_indices is None else int(state_batch_indices[b])
        if state_batch_indices is not None and slot == pad_slot_id:
            continue
        xb, step = x[b].to(cd), dt[b].to(cd)
        if dt_bias is not None:
            step = step + dt_bias.to(cd)
        if dt_softplus:
            step = F.softplus(step)
        h = state[slot] * torch.exp(step[:, None] * A.to(cd)) + (step * xb)[:, None] * B[b].to(cd)[None, :]
        state[slot] = h
        y = h @ C[b].to(cd)
        if D is not None:
            y = y + D.to(cd) * xb
        if z is not None:
            y = y * F.silu(z[b].to(cd))
        out[b] = y
    return out
