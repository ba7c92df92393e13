"""Cost models of the kernels (minimum bytes moved, FLOPs) and the arithmetic of their benchmark reports.

Everything here is pure arithmetic on Python numbers except ``measure_copy_bandwidth`` and ``time_cuda``,
which need a CUDA GPU (torch and triton are imported only inside them). Conventions:

* bytes are the *modelled minimum* traffic to and from device memory: every input read once, every output
  written once, state pools read and written once for the slots in use. Achieved bandwidth = modelled
  bytes / measured time, so it never credits a kernel for redundant traffic.
* GB/s and TB/s are decimal (1e9, 1e12 bytes per second), as vendors quote memory bandwidth.
* a fused multiply-add counts as 2 FLOPs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

__all__ = [
    "NEMOTRON_H_8B",
    "QWEN3_NEXT",
    "JAMBA_1_5_MINI",
    "DECODE_BATCHES",
    "PREFILL_TOKENS",
    "dtype_bytes",
    "state_update_bytes",
    "state_update_flops",
    "gdn_update_bytes",
    "gdn_update_flops",
    "mamba1_update_bytes",
    "mamba1_update_flops",
    "conv_update_bytes",
    "conv_prefill_bytes",
    "chunk_scan_bytes",
    "chunk_scan_flops",
    "chunk_lengths",
    "bandwidth",
    "tflops",
    "make_row",
    "format_row",
    "target_checks",
    "build_report",
    "measure_copy_bandwidth",
    "time_cuda",
]

# One TP rank of Nemotron-H-8B's Mamba-2 mixer (config: mamba_num_heads 128, mamba_head_dim 64,
# ssm_state_size 128, n_groups 8, conv_kernel 4); conv dim = H*P + 2*G*N = 8192 + 2048.
NEMOTRON_H_8B = {
    "nheads": 128,
    "headdim": 64,
    "dstate": 128,
    "ngroups": 8,
    "conv_dim": 128 * 64 + 2 * 8 * 128,
    "conv_width": 4,
    "chunk_size": 256,
}

# One TP rank of Qwen3-Next-80B-A3B's Gated DeltaNet (linear_num_value_heads 32, linear_num_key_heads 16,
# linear_value_head_dim = linear_key_head_dim = 128): state (Hv, V, K) per sequence.
QWEN3_NEXT = {"v_heads": 32, "k_heads": 16, "vdim": 128, "kdim": 128}

# One TP rank of Jamba-1.5-Mini's Mamba-1 mixer (mamba_d_state 16, mamba_expand 2 x hidden 4096): state (I, N).
JAMBA_1_5_MINI = {"dim": 8192, "dstate": 16}

# batch x heads from 512 to 32768 at 128 heads
DECODE_BATCHES = (4, 8, 16, 32, 64, 128, 256)
PREFILL_TOKENS = (2048, 4096, 8192, 16384)

_DTYPE_BYTES = {
    "float64": 8,
    "fp64": 8,
    "float32": 4,
    "fp32": 4,
    "float": 4,
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "fp8": 1,
    "int8": 1,
    "int32": 4,
    "int64": 8,
}


#: CUDA's limit on the second and third grid dimensions: the most sequences (or chunks) one launch covers
MAX_GRID_YZ = 65535


def dtype_bytes(dtype) -> int:
    """Bytes per element of a dtype given as a name ('bf16', 'float32', ...) or a torch dtype."""
    size = getattr(dtype, "itemsize", None)
    if isinstance(size, int):
        return size
    name = str(dtype).removeprefix("torch.")
    if name not in _DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}")
    return _DTYPE_BYTES[name]


def _nonneg(**values: int) -> None:
    for name, v in values.items():
        if v < 0:
            raise ValueError(f"{name} must be >= 0, got {v}")


def state_update_bytes(
    batch: int,
    nheads: int,
    headdim: int,
    dstate: int,
    ngroups: int,
    state_bytes: int = 4,
    io_bytes: int = 2,
    has_z: bool = True,
    has_D: bool = True,
    has_dt_bias: bool = True,
    param_bytes: int = 4,
    index_bytes: int = 4,
) -> int:
    """Minimum bytes of one ``selective_state_update`` call.

    state: read + write of batch*H*P*N elements (the dominant term); x, y (and z): batch*H*P each; B, C:
    batch*G*N each; dt: batch*H; A (+ D, dt_bias): H each, in ``param_bytes``; one slot index per entry.
    """
    _nonneg(batch=batch, nheads=nheads, headdim=headdim, dstate=dstate, ngroups=ngroups)
    state = 2 * batch * nheads * headdim * dstate * state_bytes
    act = batch * nheads * headdim * io_bytes * (2 + int(has_z))
    bc = 2 * batch * ngroups * dstate * io_bytes
    dt = batch * nheads * io_bytes
    params = nheads * param_bytes * (1 + int(has_D) + int(has_dt_bias))
    return state + act + bc + dt + params + batch * index_bytes


def state_update_flops(batch: int, nheads: int, headdim: int, dstate: int) -> int:
    """5 FLOPs per state element: S*decay (1), (dt x) B (1), the add (1), S.C multiply-add (2)."""
    _nonneg(batch=batch, nheads=nheads, headdim=headdim, dstate=dstate)
    return 5 * batch * nheads * headdim * dstate


def gdn_update_bytes(
    batch: int,
    v_heads: int,
    k_heads: int,
    vdim: int,
    kdim: int,
    state_bytes: int = 4,
    io_bytes: int = 2,
    gate_bytes: int = 4,
    index_bytes: int = 4,
) -> int:
    """Minimum bytes of one ``gated_delta_rule_update`` call.

    state: read + write of batch*Hv*V*K elements (the dominant term); q, k: batch*Hk*K each; v, o: batch*Hv*V
    each; g, beta: batch*Hv each, in ``gate_bytes``; one slot index per entry.
    """
    _nonneg(batch=batch, v_heads=v_heads, k_heads=k_heads, vdim=vdim, kdim=kdim)
    state = 2 * batch * v_heads * vdim * kdim * state_bytes
    qk = 2 * batch * k_heads * kdim * io_bytes
    vo = 2 * batch * v_heads * vdim * io_bytes
    return state + qk + vo + 2 * batch * v_heads * gate_bytes + batch * index_bytes


def gdn_update_flops(batch: int, v_heads: int, vdim: int, kdim: int) -> int:
    """7 FLOPs per state element: the decay (1), S.k multiply-add (2), S + u k (2), S.q multiply-add (2)."""
    _nonneg(batch=batch, v_heads=v_heads, vdim=vdim, kdim=kdim)
    return 7 * batch * v_heads * vdim * kdim


def mamba1_update_bytes(
    batch: int,
    dim: int,
    dstate: int,
    state_bytes: int = 4,
    io_bytes: int = 2,
    param_bytes: int = 4,
    index_bytes: int = 4,
) -> int:
    """Minimum bytes of one ``mamba1_state_update`` call (z, D and dt_bias on).

    state: read + write of batch*I*N elements (the dominant term); x, dt, z, y: batch*I each; B, C: batch*N
    each; A: I*N and D, dt_bias: I each, in ``param_bytes``, read once for the whole batch; one index per entry.
    """
    _nonneg(batch=batch, dim=dim, dstate=dstate)
    state = 2 * batch * dim * dstate * state_bytes
    act = 4 * batch * dim * io_bytes + 2 * batch * dstate * io_bytes
    params = (dim * dstate + 2 * dim) * param_bytes
    return state + act + params + batch * index_bytes


def mamba1_update_flops(batch: int, dim: int, dstate: int) -> int:
    """6 FLOPs per state element: dt*A (1), h*decay (1), (dt x) B (1), the add (1), h.C multiply-add (2)."""
    _nonneg(batch=batch, dim=dim, dstate=dstate)
    return 6 * batch * dim * dstate


def conv_update_bytes(
    batch: int,
    dim: int,
    width: int,
    state_bytes: int = 2,
    io_bytes: int = 2,
    weight_bytes: int = 2,
    has_bias: bool = True,
    index_bytes: int = 4,
) -> int:
    """Minimum bytes of one ``causal_conv1d_update`` call: the (dim, K-1) windows read and written, x and y,
    the weights (dim, K) and bias once, one slot index per entry."""
    _nonneg(batch=batch, dim=dim)
    if width < 2:
        raise ValueError("width must be >= 2")
    window = 2 * batch * dim * (width - 1) * state_bytes
    act = 2 * batch * dim * io_bytes
    weights = dim * (width + int(has_bias)) * weight_bytes
    return window + act + weights + batch * index_bytes


def conv_prefill_bytes(
    ntokens: int,
    nseqs: int,
    dim: int,
    width: int,
    state_bytes: int = 2,
    io_bytes: int = 2,
    weight_bytes: int = 2,
    has_bias: bool = True,
    initial_states: bool = True,
) -> int:
    """Minimum bytes of one ``causal_conv1d_prefill`` call: x and y (T*dim each), the final windows written
    (and initial windows read when ``initial_states``), the weights and bias once."""
    _nonneg(ntokens=ntokens, nseqs=nseqs, dim=dim)
    if width < 2:
        raise ValueError("width must be >= 2")
    act = 2 * ntokens * dim * io_bytes
    windows = nseqs * dim * (width - 1) * state_bytes * (1 + int(initial_states))
    weights = dim * (width + int(has_bias)) * weight_bytes
    return act + windows + weights + (nseqs + 1) * 4 + nseqs * 4


def chunk_scan_bytes(
    ntokens: int,
    nseqs: int,
    nheads: int,
    headdim: int,
    dstate: int,
    ngroups: int,
    io_bytes: int = 2,
    state_bytes: int = 4,
    has_z: bool = True,
    initial_states: bool = True,
    param_bytes: int = 4,
) -> int:
    """Minimum bytes of one ``ssd_chunk_scan`` call.

    x, y (and z): T*H*P each; B, C: T*G*N each; dt: T*H; final states written (and initial states read when
    ``initial_states``): nseqs*H*P*N; A, D, dt_bias: H each. Intermediates (chunk states, C B^T) are not
    counted: they are the algorithm's, not the problem's.
    """
    _nonneg(ntokens=ntokens, nseqs=nseqs, nheads=nheads, headdim=headdim, dstate=dstate, ngroups=ngroups)
    act = ntokens * nheads * headdim * io_bytes * (2 + int(has_z))
    bc = 2 * ntokens * ngroups * dstate * io_bytes
    dt = ntokens * nheads * io_bytes
    states = nseqs * nheads * headdim * dstate * state_bytes * (1 + int(initial_states))
    params = 3 * nheads * param_bytes
    return act + bc + dt + states + params + (2 * nseqs + 1) * 4


def chunk_lengths(seqlens: Iterable[int], chunk_size: int) -> list[int]:
    """Lengths of the chunks the scan cuts (per sequence, from each sequence's first token)."""
    if chunk_size < 1:
        raise ValueError("chunk_size must be >= 1")
    out: list[int] = []
    for n in seqlens:
        if n < 0:
            raise ValueError("sequence lengths must be >= 0")
        full, rest = divmod(int(n), chunk_size)
        out.extend([chunk_size] * full)
        if rest:
            out.append(rest)
    return out


def chunk_scan_flops(
    seqlens: Sequence[int],
    chunk_size: int,
    nheads: int,
    headdim: int,
    dstate: int,
    ngroups: int,
) -> int:
    """FLOPs of the chunked SSD algorithm as the kernels run it, summed over chunks of length L:

    * C B^T, lower triangle with the diagonal, once per group:      G * L(L+1)/2 * 2N
    * each chunk's own state sum_s w_s x_s B_s^T, per head:          H * 2 L P N
    * output from the carried-in state C_l S, per head:              H * 2 L P N
    * output inside the chunk, causal (C B^T o L) (dt' x), per head: H * L(L+1)/2 * 2P
    * passing the state across the chunk boundary, per head:         H * 2 P N

    Elementwise work (exp, scaling, gating, D skip) is left out. At Nemotron-H-8B shapes and full chunks of
    256 this is about 6.6 MFLOP per token.
    """
    total = 0
    for L in chunk_lengths(seqlens, chunk_size):
        tri = L * (L + 1)  # = 2 * (number of pairs s <= l)
        total += ngroups * tri * dstate
        total += nheads * 4 * L * headdim * dstate
        total += nheads * tri * headdim
        total += nheads * 2 * headdim * dstate
    return total


def bandwidth(nbytes: float, seconds: float) -> float:
    """Bytes per second."""
    if seconds <= 0:
        raise ValueError("seconds must be > 0")
    return nbytes / seconds


def tflops(flops: float, seconds: float) -> float:
    if seconds <= 0:
        raise ValueError("seconds must be > 0")
    return flops / seconds / 1e12


def make_row(
    kernel: str,
    shape: dict,
    seconds: float,
    nbytes: int,
    flops: int = 0,
    copy_bandwidth: float | None = None,
    tokens: int | None = None,
) -> dict:
    """One benchmark row: the shape, the time, modelled bytes/FLOPs and the rates derived from them."""
    bw = bandwidth(nbytes, seconds)
    row = {"kernel": kernel, **shape}
    row.update(
        time_us=seconds * 1e6,
        bytes=int(nbytes),
        gb_per_s=bw / 1e9,
        flops=int(flops),
        tflop_per_s=tflops(flops, seconds),
        frac_of_copy=(bw / copy_bandwidth) if copy_bandwidth else None,
        tokens_per_s=(tokens / seconds) if tokens else None,
    )
    return row


def format_row(row: dict) -> str:
    """A one-line human summary of a row."""
    derived = {"kernel", "time_us", "bytes", "gb_per_s", "flops", "tflop_per_s", "frac_of_copy", "tokens_per_s"}
    keys = [k for k in row if k not in derived]
    shape = " ".join(f"{k}={row[k]}" for k in keys)
    text = f"{row['kernel']:<24} {shape:<56} {row['time_us']:>10.2f} us {row['gb_per_s']:>8.1f} GB/s"
    if row.get("frac_of_copy") is not None:
        text += f" ({100 * row['frac_of_copy']:5.1f}% of copy)"
    text += f" {row['tflop_per_s']:>7.2f} TFLOP/s"
    if row.get("tokens_per_s"):
        text += f" {row['tokens_per_s']:.3e} tok/s"
    return text


def target_checks(
    rows: Sequence[dict],
    copy_bandwidth: float,
    decode_fraction: float = 0.90,
    decode_min_batch_heads: int = 8192,
    prefill_tokens_per_s: float = 2.4e7,
    prefill_tokens: int = 16384,
) -> list[dict]:
    """The performance targets, checked on benchmark rows.

    * every ``selective_state_update`` row with fp32 state and batch*heads >= ``decode_min_batch_heads``
      reaches ``decode_fraction`` of the measured copy bandwidth;
    * every ``ssd_chunk_scan`` row with ``prefill_tokens`` tokens reaches ``prefill_tokens_per_s``.
    A target with no matching row is reported as not met.
    """
    out = []
    dec = [
        r
        for r in rows
        if r["kernel"] == "selective_state_update"
        and r.get("state_dtype") == "float32"
        and r["batch"] * r["nheads"] >= decode_min_batch_heads
    ]
    worst = min((r["gb_per_s"] * 1e9 / copy_bandwidth for r in dec), default=None)
    out.append(
        {
            "target": f"decode state update >= {decode_fraction:.0%} of copy bandwidth at batch*heads >= "
            f"{decode_min_batch_heads} (fp32 state)",
            "value": worst,
            "required": decode_fraction,
            "met": worst is not None and worst >= decode_fraction,
        }
    )
    pre = [r for r in rows if r["kernel"] == "ssd_chunk_scan" and r.get("ntokens") == prefill_tokens]
    worst_tok = min((r["tokens_per_s"] for r in pre if r.get("tokens_per_s")), default=None)
    out.append(
        {
            "target": f"prefill scan >= {prefill_tokens_per_s:.2g} tokens/s per layer at {prefill_tokens} tokens",
            "value": worst_tok,
            "required": prefill_tokens_per_s,
            "met": worst_tok is not None and worst_tok >= prefill_tokens_per_s,
        }
    )
    return out


def build_report(rows: Sequence[dict], copy_bandwidth: float, environment: dict) -> dict:
    """The JSON document: environment (GPU name, versions), the copy ceiling, every row, the target checks."""
    if not math.isfinite(copy_bandwidth) or copy_bandwidth <= 0:
        raise ValueError("copy_bandwidth must be a positive number of bytes per second")
    return {
        **environment,
        "copy_bandwidth_gb_per_s": copy_bandwidth / 1e9,
        "rows": [dict(r) for r in rows],
        "targets": target_checks(rows, copy_bandwidth),
    }


# ---------------------------------------------------------------------------------------------------------
# GPU-only helpers


def time_cuda(fn, warmup_ms: int = 25, rep_ms: int = 100) -> float:
    """Median seconds of ``fn()`` on the current CUDA device (``triton.testing.do_bench``, which clears the
    L2 cache before every timed call)."""
    import triton.testing

    return triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median") * 1e-3


def measure_copy_bandwidth(nbytes: int = 4 << 30, device=None) -> float:
    """Practical memory-bandwidth ceiling: bytes read + written per second by a device-to-device copy of an
    ``nbytes`` buffer (the default, 4 GiB, is far beyond any L2). Needs a CUDA GPU."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("measure_copy_bandwidth needs a CUDA GPU")
    dev = torch.device(device) if device is not None else torch.device("cuda")
    src = torch.empty(int(nbytes), dtype=torch.uint8, device=dev)
    src.random_(0, 256)
    dst = torch.empty_like(src)
    seconds = time_cuda(lambda: dst.copy_(src), warmup_ms=50, rep_ms=200)
    return bandwidth(2 * int(nbytes), seconds)
