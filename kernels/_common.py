"""Small helpers shared by the kernel wrappers: argument checks, launch arithmetic, Triton helpers."""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from .bench import MAX_GRID_YZ

_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def next_pow2(n: int) -> int:
    """Smallest power of two >= n (1 for n <= 1)."""
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def interpreting() -> bool:
    """True when Triton runs kernels through its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def dot_block(n: int, cap: int) -> int:
    """Tile size along a ``tl.dot`` dimension: a power of two, at least 16 (the hardware minimum), at most ``cap``."""
    return max(16, min(cap, next_pow2(n)))


def lastdim_contiguous(t: torch.Tensor | None) -> torch.Tensor | None:
    """``t`` if its last dimension is unit-stride, else a contiguous copy (inputs only, never state pools)."""
    if t is None or t.stride(-1) == 1:
        return t
    return t.contiguous()


def check_grid_dim(what: str, n: int) -> None:
    if n > MAX_GRID_YZ:
        raise ValueError(f"{what} ({n}) exceeds {MAX_GRID_YZ}, the most one launch can cover; split the call")


def check_float(name: str, t: torch.Tensor) -> None:
    if t.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"{name} must be float32, float16 or bfloat16, got {t.dtype}")


def check_shape(name: str, t: torch.Tensor, shape: tuple) -> None:
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(t.shape)}")


def check_same_device(**tensors: torch.Tensor | None) -> torch.device:
    devices = {t.device for t in tensors.values() if t is not None}
    if len(devices) != 1:
        names = {k: str(v.device) for k, v in tensors.items() if v is not None}
        raise ValueError(f"all tensors must be on one device, got {names}")
    return devices.pop()


def index_tensor(idx, n: int, device: torch.device, name: str) -> torch.Tensor:
    """A length-``n`` vector of slot indices or flags on ``device``, as the kernels read it.

    int32, int64 and bool tensors pass through untouched (no conversion kernel on the hot path; the kernels
    widen what they load to int64); other integer types and Python sequences are converted to int32.
    """
    t = torch.as_tensor(idx, device=device)
    if t.dim() != 1 or t.shape[0] != n:
        raise ValueError(f"{name} must be a vector of length {n}, got shape {tuple(t.shape)}")
    if t.dtype.is_floating_point or t.dtype.is_complex:
        raise TypeError(f"{name} must hold integers or booleans, got {t.dtype}")
    if t.dtype not in (torch.int32, torch.int64, torch.bool):
        t = t.to(torch.int32)
    return t if t.stride(0) == 1 else t.contiguous()


def decode_output(
    out: torch.Tensor | None, shape: tuple, dtype: torch.dtype, device: torch.device, axis: str
) -> torch.Tensor:
    """A decode op's output: ``out`` checked (shape, unit stride along its last dimension, named ``axis``),
    or a new tensor."""
    if out is None:
        return torch.empty(shape, dtype=dtype, device=device)
    check_shape("out", out, shape)
    if out.stride(-1) != 1:
        raise ValueError(f"out must have unit stride along {axis}")
    return out


def slot_indices(indices, batch: int, device: torch.device, name: str) -> torch.Tensor | None:
    """A decode batch's slot indices as the kernels read them (None stays None: entry b uses slot b)."""
    check_grid_dim("batch", batch)
    return None if indices is None else index_tensor(indices, batch, device, name)


@triton.jit
def entry_slot(idx_ptr, b, pad_slot_id, HAS_IDX: tl.constexpr):
    """The pool slot of batch entry ``b`` (``idx_ptr[b]``, or ``b`` without indices) as int64, and whether it is
    a real entry. A pad entry's slot is clamped to 0, so its masked address arithmetic stays in bounds."""
    if HAS_IDX:
        slot = tl.load(idx_ptr + b).to(tl.int64)
    else:
        slot = b.to(tl.int64)
    valid = slot != pad_slot_id
    return tl.where(valid, slot, 0), valid


@triton.jit
def softplus_fp32(v):
    """softplus(v) = log(1 + exp(v)) in fp32, equal to v above 20 (torch's threshold).

    log(1 + u) is evaluated as u * log(w) / (w - 1) with w = 1 + u, which keeps full relative precision when u is
    tiny (very negative v), where a plain log(1 + u) would lose every digit.
    """
    u = tl.exp(tl.minimum(v, 20.0))
    w = 1.0 + u
    lp = tl.where(w == 1.0, u, tl.log(w) * (u / (w - 1.0)))
    return tl.where(v > 20.0, v, lp)


@triton.jit
def silu_fp32(v):
    return v * tl.sigmoid(v)


@triton.jit
def mma(a, b, acc, EXACT_F32: tl.constexpr):
    """acc + a @ b with fp32 accumulation; fp32 operands use IEEE products (no TF32) so that fp32 runs stay exact."""
    if EXACT_F32:
        acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    else:
        acc = tl.dot(a, b, acc)
    return acc
