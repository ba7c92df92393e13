"""Helpers to check the kernels against their references: random inputs, float64 copies, error measures.

Used by the test suite and usable by the profiler for a quick self-check on the device it profiles.
Needs torch only.
"""

from __future__ import annotations

import torch

__all__ = [
    "FP16_EPS",
    "BF16_EPS",
    "FP32_EPS",
    "unit_roundoff",
    "store_roundoff",
    "bits",
    "bits_equal",
    "rel_err",
    "f64",
    "ssd_params",
    "ssd_tokens",
    "decode_inputs",
    "cu_from_lengths",
]

FP32_EPS = 2.0**-24  # unit roundoff (half an ulp at 1) of each format
FP16_EPS = 2.0**-11
BF16_EPS = 2.0**-8


def unit_roundoff(dtype: torch.dtype) -> float:
    return {torch.float32: FP32_EPS, torch.float16: FP16_EPS, torch.bfloat16: BF16_EPS, torch.float64: 2.0**-53}[dtype]


def store_roundoff(dtype: torch.dtype) -> float:
    """Bound on the relative error of a kernel storing an fp32 value as ``dtype``: the unit roundoff, except
    for bf16 under the Triton CPU interpreter, which truncates fp32 -> bf16 (an error below one ulp, 2u)
    where GPUs round to nearest even."""
    from ._common import interpreting

    if dtype == torch.float32:
        return 0.0
    u = unit_roundoff(dtype)
    return 2 * u if (dtype == torch.bfloat16 and interpreting()) else u


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bit patterns of a float tensor (so NaN sentinels compare equal to themselves)."""
    view = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8}[t.element_size()]
    return t.contiguous().view(view)


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(bits(a), bits(b))


def rel_err(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """max |actual - expected| / max |expected| (inf if anything is non-finite)."""
    a = actual.detach().to(torch.float64)
    e = expected.detach().to(torch.float64).to(a.device)
    if not bool(torch.isfinite(a).all()):
        return float("inf")
    scale = float(e.abs().max()) if e.numel() else 0.0
    return float((a - e).abs().max()) / max(scale, 1e-30) if e.numel() else 0.0


def f64(*tensors):
    """float64 copies (None passes through)."""
    out = tuple(None if t is None else t.detach().to(torch.float64).clone() for t in tensors)
    return out if len(out) > 1 else out[0]


def ssd_params(nheads: int, headdim: int, gen: torch.Generator, device="cpu", d_per_channel: bool = False):
    """A (H,), D (H,) or (H, P), dt_bias (H,), all fp32 like the checkpoints keep them.

    A in [-1.5, -0.5] and dt_bias around -1 give per-step decays exp(dt' A) of about 0.6-0.95, the regime of
    trained models (long memory but visible decay).
    """
    A = -(0.5 + torch.rand(nheads, generator=gen))
    D = torch.randn((nheads, headdim) if d_per_channel else (nheads,), generator=gen)
    dt_bias = torch.randn(nheads, generator=gen) * 0.5 - 1.0
    return A.to(device), D.to(device), dt_bias.to(device)


def ssd_tokens(ntokens, nheads, headdim, dstate, ngroups, gen, dtype=torch.float32, device="cpu"):
    """x, z (T, H, P), dt (T, H), B, C (T, G, N): standard normal except dt (raw, pre-softplus, ~N(0, 0.5))."""
    x = torch.randn(ntokens, nheads, headdim, generator=gen)
    z = torch.randn(ntokens, nheads, headdim, generator=gen)
    dt = torch.randn(ntokens, nheads, generator=gen) * 0.5
    B = torch.randn(ntokens, ngroups, dstate, generator=gen)
    C = torch.randn(ntokens, ngroups, dstate, generator=gen)
    return tuple(t.to(device=device, dtype=dtype) for t in (x, z, dt, B, C))


def decode_inputs(batch, nheads, headdim, dstate, ngroups, gen, dtype=torch.float32, device="cpu"):
    """x, z (batch, H, P), dt (batch, H), B, C (batch, G, N)."""
    return ssd_tokens(batch, nheads, headdim, dstate, ngroups, gen, dtype, device)


def cu_from_lengths(lengths, device="cpu") -> torch.Tensor:
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + int(n))
    return torch.tensor(cu, dtype=torch.int32, device=device)
