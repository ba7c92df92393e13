"""Plain-torch reference of the gated delta rule decode step (float64-capable), beside ``fused_recurrent.py``.

Per value head h (key head h // (Hv / Hk)), with the state S of shape (V, K):

    q, k <- q / |q|, k / |k|            (optional L2 normalisation)
    S    <- exp(g) * S                   (g <= 0: the gate's log-decay)
    u    =  beta * (v - S k)             (the delta rule: move S k towards v by a fraction beta)
    S    <- S + u k^T
    o    =  scale * S q                  (scale defaults to K^-1/2)

The gate g = -exp(A_log) * softplus(a + dt_bias) and beta = sigmoid(b) are computed before this step, as the
serving engines do; this op takes them as inputs.
"""

from __future__ import annotations

import torch

__all__ = ["gated_delta_rule_update_ref", "l2_normalise"]

#: added to |x|^2 before the square root (the convention of the GDN kernels)
L2_EPS = 1e-6


def l2_normalise(x: torch.Tensor) -> torch.Tensor:
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + L2_EPS)


def gated_delta_rule_update_ref(
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
) -> torch.Tensor:
    """state (slots, Hv, V, K), updated in place; q, k (batch, Hk, K); v (batch, Hv, V); g, beta (batch, Hv).
    Returns o (batch, Hv, V) in state's dtype; a pad entry leaves the pool alone and gets a zero row."""
    batch, hv, vdim = v.shape
    hk, kdim = k.shape[1], k.shape[2]
    scale = kdim**-0.5 if scale is None else scale
    group = hv // hk
    out = torch.zeros((batch, hv, vdim), dtype=state.dtype, device=state.device)
    for b in range(batch):
        slot = b if state_batch_indices is None else int(state_batch_indices[b])
        if state_batch_indices is not None and slot == pad_slot_id:
            continue
        qb = q[b].to(state.dtype).repeat_interleave(group, dim=0)  # (Hv, K)
        kb = k[b].to(state.dtype).repeat_interleave(group, dim=0)
        if use_qk_l2norm:
            qb, kb = l2_normalise(qb), l2_normalise(kb)
        s = state[slot] * torch.exp(g[b].to(state.dtype))[:, None, None]
        u = beta[b].to(state.dtype)[:, None] * (v[b].to(state.dtype) - torch.einsum("hvk,hk->hv", s, kb))
        s = s + u[:, :, None] * kb[:, None, :]
        state[slot] = s
        out[b] = scale * torch.einsum("hvk,hk->hv", s, qb)
    return out
