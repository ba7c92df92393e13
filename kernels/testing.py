"""Helpers to check the kernels against their references: unit roundoffs, float64 copies, error measures.

Used by the test suite (which draws its inputs from ``inputs``) and usable by the profiler for a quick
self-check on the device it profiles. Needs torch only.
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
