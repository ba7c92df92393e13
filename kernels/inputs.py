"""Plausible inputs for every kernel, drawn from a torch generator: one definition for the kernel tests, the
kernel benchmarks (``benchmarks/kernels.py``) and the profiler's kernel rows.

Values are drawn in fp32 on the generator's device, then moved to ``device`` and cast to ``dtype`` one
tensor at a time (so a CPU generator gives the same values whatever the device, and at most one fp32 copy
exists beside the results). The parameters are fp32 as checkpoints keep them.

* Pieces (what the tests combine, each call consuming the generator in a fixed order): ``ssd_params``,
  ``ssd_tokens``, ``mamba1_inputs``, ``gdn_inputs``, ``conv_weights``, ``conv_tokens``, ``state_pool``,
  ``cu_from_lengths``, ``random_slots``.
* Whole calls (the benchmarks and the profiler): ``mamba2_decode``, ``mamba2_prefill``, ``mamba1_decode``,
  ``gdn_decode``, ``conv_decode``, ``conv_prefill`` return a ``KernelCall`` holding every input but the state
  pool; ``call(pool)`` runs the kernel on a pool (or one layer of it).

Distributions: x, z, B, C, q, k, v standard normal; dt (before softplus) N(0, 0.5²) with dt_bias ~ -1 ± 0.5;
Mamba-2 A in [-1.5, -0.5] (per-step decays exp(dt' A) of about 0.6-0.95, the regime of trained models);
Mamba-1 A in [-4.1, -0.1], one rate per state element; Gated DeltaNet log-decays in (-2, 0] and betas in
[0, 1); conv weights N(0, 0.25) and biases N(0, 1); SSM pools N(0, 0.25), conv pools N(0, 1).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = [
    "KernelCall",
    "conv_decode",
    "conv_prefill",
    "conv_tokens",
    "conv_weights",
    "cu_from_lengths",
    "gdn_decode",
    "gdn_inputs",
    "mamba1_decode",
    "mamba1_inputs",
    "mamba2_decode",
    "mamba2_prefill",
    "random_slots",
    "ssd_params",
    "ssd_tokens",
    "state_pool",
]

F32 = torch.float32


# ---------------------------------------------------------------------------------------------------------
# Pieces


def ssd_params(nheads: int, headdim: int, gen: torch.Generator, device="cpu", d_per_channel: bool = False):
    """Mamba-2's A (H,), D (H,) or (H, P), dt_bias (H,), fp32."""
    A = -(0.5 + torch.rand(nheads, generator=gen, device=gen.device))
    D = torch.randn((nheads, headdim) if d_per_channel else (nheads,), generator=gen, device=gen.device)
    dt_bias = torch.randn(nheads, generator=gen, device=gen.device) * 0.5 - 1.0
    return A.to(device), D.to(device), dt_bias.to(device)


def _normal(*shape, gen, dtype, device, scale=1.0):
    """N(0, scale²) of ``shape``, drawn in fp32 on the generator's device, then moved and cast."""
    t = torch.randn(*shape, generator=gen, device=gen.device)
    return (t if scale == 1.0 else t * scale).to(device=device, dtype=dtype)


def ssd_tokens(ntokens, nheads, headdim, dstate, ngroups, gen, dtype=F32, device="cpu"):
    """x, z (T, H, P), dt (T, H) (raw, before softplus), B, C (T, G, N); T tokens or decode entries."""
    io = {"gen": gen, "dtype": dtype, "device": device}
    x = _normal(ntokens, nheads, headdim, **io)
    z = _normal(ntokens, nheads, headdim, **io)
    dt = _normal(ntokens, nheads, scale=0.5, **io)
    B = _normal(ntokens, ngroups, dstate, **io)
    C = _normal(ntokens, ngroups, dstate, **io)
    return x, z, dt, B, C


def mamba1_inputs(batch, dim, dstate, gen, dtype=F32, device="cpu"):
    """Mamba-1 decode inputs in the kernel's argument order: x, dt (batch, I), A (I, N), B, C (batch, N), D,
    z (batch, I), dt_bias (I,); x, dt, B, C, z in ``dtype``, A, D, dt_bias fp32."""
    io = {"gen": gen, "dtype": dtype, "device": device}
    x = _normal(batch, dim, **io)
    z = _normal(batch, dim, **io)
    dt = _normal(batch, dim, scale=0.5, **io)
    A = (-torch.rand(dim, dstate, generator=gen, device=gen.device) * 4.0 - 0.1).to(device)
    B = _normal(batch, dstate, **io)
    C = _normal(batch, dstate, **io)
    D = torch.randn(dim, generator=gen, device=gen.device).to(device)
    dt_bias = (torch.randn(dim, generator=gen, device=gen.device) * 0.5 - 1.0).to(device)
    return x, dt, A, B, C, D, z, dt_bias


def gdn_inputs(batch, hk, hv, kdim, vdim, gen, dtype=F32, device="cpu"):
    """Gated DeltaNet decode inputs: q, k (batch, Hk, K), v (batch, Hv, V) in ``dtype``; g (log-decay), beta
    (batch, Hv) fp32."""
    io = {"gen": gen, "dtype": dtype, "device": device}
    q = _normal(batch, hk, kdim, **io)
    k = _normal(batch, hk, kdim, **io)
    v = _normal(batch, hv, vdim, **io)
    g = (-torch.rand(batch, hv, generator=gen, device=gen.device) * 2.0).to(device)
    beta = torch.rand(batch, hv, generator=gen, device=gen.device).to(device)
    return [q, k, v, g, beta]


def conv_weights(dim, width, gen, dtype=F32, device="cpu", with_bias=True):
    """Depthwise conv weight (dim, width) and bias (dim,) (None without)."""
    w = _normal(dim, width, gen=gen, dtype=dtype, device=device, scale=0.5)
    b = _normal(dim, gen=gen, dtype=dtype, device=device) if with_bias else None
    return w, b


def conv_tokens(ntokens, dim, gen, dtype=F32, device="cpu"):
    """Conv input x (T, dim): T tokens or decode entries."""
    return _normal(ntokens, dim, gen=gen, dtype=dtype, device=device)


def state_pool(shape, gen, dtype=F32, device="cpu", scale=0.5):
    """A state pool of ``shape`` (slots first) holding N(0, scale²) states."""
    return _normal(*shape, gen=gen, dtype=dtype, device=device, scale=scale)


def cu_from_lengths(lengths, device="cpu") -> torch.Tensor:
    """cu_seqlens (int32) of packed sequences of these lengths."""
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + int(n))
    return torch.tensor(cu, dtype=torch.int32, device=device)


def random_slots(nslots: int, batch: int, gen: torch.Generator, device="cpu") -> torch.Tensor:
    """``batch`` distinct slots of a pool of ``nslots``, in random order (int32), as an engine's pool hands
    them out."""
    perm = torch.randperm(nslots, generator=gen, device=gen.device)
    return perm[:batch].to(device=device, dtype=torch.int32)


# ---------------------------------------------------------------------------------------------------------
# Whole calls


@dataclass(frozen=True)
class KernelCall:
    """A kernel with every argument but its state pool: ``call(pool)`` runs it (the pool passed as
    ``pool_arg``); ``held`` lists the inputs, outputs and metadata it keeps alive."""

    kernel: Callable[..., Any]
    pool_arg: str
    args: dict[str, Any] = field(default_factory=dict)

    def __call__(self, pool: torch.Tensor):
        return self.kernel(**self.args, **{self.pool_arg: pool})

    @property
    def held(self) -> list[Any]:
        return [v for v in self.args.values() if v is not None and not isinstance(v, (bool, int, float, str))]


def _decode_indices(indices, batch: int, device) -> torch.Tensor:
    """Each entry's slot: ``indices``, else entry b in slot b (still through an index vector, as engines pass)."""
    return torch.arange(batch, dtype=torch.int32, device=device) if indices is None else indices


def _sequences(lengths: Sequence[int], slots, device):
    """cu_seqlens, slots (default 0, 1, …) and has-initial-state (all True) of packed sequences."""
    idx = torch.arange(len(lengths), dtype=torch.int32, device=device) if slots is None else slots
    return cu_from_lengths(lengths, device), idx, torch.ones(len(lengths), dtype=torch.bool, device=device)


def mamba2_decode(batch, nheads, headdim, dstate, ngroups, gen, *, dtype=F32, device="cpu", indices=None) -> KernelCall:
    """``selective_state_update`` of ``batch`` entries (dt through softplus with dt_bias)."""
    from .ssd.state_update import selective_state_update

    A, D, dt_bias = ssd_params(nheads, headdim, gen, device)
    x, z, dt, B, C = ssd_tokens(batch, nheads, headdim, dstate, ngroups, gen, dtype, device)
    return KernelCall(
        selective_state_update,
        "state",
        dict(
            x=x,
            dt=dt,
            A=A,
            B=B,
            C=C,
            D=D,
            z=z,
            dt_bias=dt_bias,
            dt_softplus=True,
            state_batch_indices=_decode_indices(indices, batch, device),
            out=torch.empty_like(x),
        ),
    )


def mamba2_prefill(
    lengths, nheads, headdim, dstate, ngroups, chunk, gen, *, dtype=F32, device="cpu", slots=None
) -> KernelCall:
    """``ssd_chunk_scan`` of packed sequences of ``lengths`` tokens, each from its slot's state; the chunk
    metadata built once, here."""
    from .ssd.chunk import ssd_chunk_metadata, ssd_chunk_scan

    cu, idx, init = _sequences(lengths, slots, device)
    x, z, dt, B, C = ssd_tokens(int(sum(lengths)), nheads, headdim, dstate, ngroups, gen, dtype, device)
    A, D, dt_bias = ssd_params(nheads, headdim, gen, device)
    return KernelCall(
        ssd_chunk_scan,
        "state_pool",
        dict(
            x=x,
            dt=dt,
            A=A,
            B=B,
            C=C,
            chunk_size=chunk,
            cu_seqlens=cu,
            state_indices=idx,
            has_initial_state=init,
            D=D,
            z=z,
            dt_bias=dt_bias,
            dt_softplus=True,
            out=torch.empty_like(x),
            metadata=ssd_chunk_metadata(cu, chunk, device=device),
        ),
    )


def mamba1_decode(batch, dim, dstate, gen, *, dtype=F32, device="cpu", indices=None) -> KernelCall:
    """``mamba1_state_update`` of ``batch`` entries (dt through softplus with dt_bias)."""
    from .mamba1.state_update import mamba1_state_update

    x, dt, A, B, C, D, z, dt_bias = mamba1_inputs(batch, dim, dstate, gen, dtype, device)
    return KernelCall(
        mamba1_state_update,
        "state",
        dict(
            x=x,
            dt=dt,
            A=A,
            B=B,
            C=C,
            D=D,
            z=z,
            dt_bias=dt_bias,
            dt_softplus=True,
            state_batch_indices=_decode_indices(indices, batch, device),
            out=torch.empty_like(x),
        ),
    )


def gdn_decode(batch, hk, hv, kdim, vdim, gen, *, dtype=F32, device="cpu", indices=None) -> KernelCall:
    """``gated_delta_rule_update`` of ``batch`` entries (q and k L2-normalised)."""
    from .gdn.fused_recurrent import gated_delta_rule_update

    q, k, v, g, beta = gdn_inputs(batch, hk, hv, kdim, vdim, gen, dtype, device)
    return KernelCall(
        gated_delta_rule_update,
        "state",
        dict(
            q=q,
            k=k,
            v=v,
            g=g,
            beta=beta,
            state_batch_indices=_decode_indices(indices, batch, device),
            out=torch.empty_like(v),
        ),
    )


def conv_decode(
    batch, dim, width, gen, *, dtype=F32, device="cpu", indices=None, activation: str | None = "silu"
) -> KernelCall:
    """``causal_conv1d_update`` of ``batch`` entries."""
    from .conv1d.update import causal_conv1d_update

    w, b = conv_weights(dim, width, gen, dtype, device)
    x = conv_tokens(batch, dim, gen, dtype, device)
    return KernelCall(
        causal_conv1d_update,
        "conv_state",
        dict(
            x=x,
            weight=w,
            bias=b,
            activation=activation,
            conv_state_indices=_decode_indices(indices, batch, device),
            out=torch.empty_like(x),
        ),
    )


def conv_prefill(
    lengths, dim, width, gen, *, dtype=F32, device="cpu", slots=None, activation: str | None = "silu"
) -> KernelCall:
    """``causal_conv1d_prefill`` of packed sequences of ``lengths`` tokens, each from its slot's window; the
    metadata built once, here."""
    from .conv1d.prefill import causal_conv1d_prefill, conv_prefill_metadata

    cu, idx, init = _sequences(lengths, slots, device)
    w, b = conv_weights(dim, width, gen, dtype, device)
    x = conv_tokens(int(sum(lengths)), dim, gen, dtype, device)
    return KernelCall(
        causal_conv1d_prefill,
        "conv_states",
        dict(
            x=x,
            weight=w,
            bias=b,
            cu_seqlens=cu,
            state_indices=idx,
            has_initial_state=init,
            activation=activation,
            out=torch.empty_like(x),
            metadata=conv_prefill_metadata(cu, device=device),
        ),
    )
