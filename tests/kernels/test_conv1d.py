"""causal_conv1d_update (decode) and causal_conv1d_prefill (packed varlen) against their float64 references.

Bounds (rel_err = max|kernel - ref| / max|ref|; u = unit roundoff, fp32 2^-24):
* Y_F32: an output is bias + K products summed in fp32 (K + 1 roundings of terms no larger than
  sum_k |w_k u_k| + |bias|, ~sqrt(K+1) max|y| for random data), then SiLU (a few ulp): <= ~20u = 1.2e-6;
  bound 5e-6 (margin for the GPU's approximate exp inside sigmoid).
* 16-bit outputs add their rounding (<= u16 of the value).
* Windows are copies: the pool must equal the reference's window bit for bit (a value converted from the
  input dtype to the pool dtype rounds the same way from fp32 or from float64, because fp32 values are exact
  in float64). Exception: bf16 pools under the CPU interpreter, which truncates fp32 -> bf16 where torch
  rounds to nearest; there the new entries are within one bf16 ulp (``store_roundoff``).
"""

import pytest

torch = pytest.importorskip("torch")  # the gpu or test extra; the test environment has it
from hybridplan.kernels import causal_conv1d_prefill, causal_conv1d_update  # noqa: E402
from hybridplan.kernels.conv1d.naive import causal_conv1d_prefill_ref, causal_conv1d_update_ref  # noqa: E402
from hybridplan.kernels.conv1d.prefill import conv_prefill_metadata  # noqa: E402
from hybridplan.kernels.inputs import conv_tokens, conv_weights, cu_from_lengths, state_pool  # noqa: E402
from hybridplan.kernels.testing import bits_equal, f64, rel_err, store_roundoff, unit_roundoff  # noqa: E402

pytestmark = pytest.mark.kernels

Y_F32 = 5e-6


def _pool(gen, slots, dim, width, dtype, device, transposed=False):
    if transposed:  # allocated (slots, K-1, dim), as some engine versions lay it out
        return state_pool((slots, width - 1, dim), gen, dtype, device, scale=1.0).transpose(1, 2)
    return state_pool((slots, dim, width - 1), gen, dtype, device, scale=1.0)


def _assert_windows(pool, ref_pool, dtype):
    if store_roundoff(dtype) > unit_roundoff(dtype):  # truncating interpreter conversion
        assert rel_err(pool, ref_pool) <= store_roundoff(dtype)
    else:
        assert bits_equal(pool, ref_pool.to(dtype))


# ---------------------------------------------------------------------------------------------------------
# decode


@pytest.mark.parametrize(
    "dim,width", [(40, 4), (300, 4), (24, 2)], ids=["dim40-K4", "dim300-K4-two-blocks", "dim24-K2"]
)
def test_update_matches_reference(device, gen, state_dtype, dim, width):
    batch, slots = 5, 8
    indices = [6, -1, 0, 3, 2]
    w, b = conv_weights(dim, width, gen, device=device)
    x = conv_tokens(batch, dim, gen, device=device)
    pool = _pool(gen, slots, dim, width, state_dtype, device)
    used = [i for i in indices if i != -1]
    unused = [s for s in range(slots) if s not in used]
    pool[unused] = float("nan")
    before = pool.clone()
    ref_pool = f64(pool)
    out = torch.full((batch, dim), float("nan"), device=device)
    idx = torch.tensor(indices, dtype=torch.int32, device=device)
    y = causal_conv1d_update(x, pool, w, b, "silu", idx, -1, out=out)
    y_ref = causal_conv1d_update_ref(f64(x), ref_pool, *f64(w, b), "silu", idx, -1)
    assert y is out
    assert rel_err(y, y_ref) <= Y_F32
    assert torch.equal(y[1], torch.zeros_like(y[1])), "pad row must be zeros"
    _assert_windows(pool[used], ref_pool[used], state_dtype)
    assert bits_equal(pool[unused], before[unused])


@pytest.mark.parametrize("activation,with_bias", [(None, True), ("silu", False)])
def test_update_options_and_transposed_pool(device, gen, activation, with_bias):
    """No activation / no bias, with the pool stored (slots, K-1, dim) and passed transposed."""
    batch, slots, dim, width = 3, 4, 32, 4
    w, b = conv_weights(dim, width, gen, device=device, with_bias=with_bias)
    x = conv_tokens(batch, dim, gen, device=device)
    pool = _pool(gen, slots, dim, width, torch.float32, device, transposed=True)
    assert pool.stride(1) == 1
    ref_pool = f64(pool)
    # no indices: entry b uses slot b and none is padding, whatever pad_slot_id says
    y = causal_conv1d_update(x, pool, w, b, activation, None, pad_slot_id=0)
    y_ref = causal_conv1d_update_ref(f64(x), ref_pool, *f64(w, b), activation, None, pad_slot_id=0)
    assert rel_err(y, y_ref) <= Y_F32
    assert bits_equal(pool[:batch], ref_pool[:batch].float())
    assert bits_equal(pool[batch:], ref_pool[batch:].float())


def test_update_pad_slot_zero(device, gen):
    batch, slots, dim, width = 4, 5, 16, 4
    w, b = conv_weights(dim, width, gen, device=device)
    x = conv_tokens(batch, dim, gen, device=device)
    pool = _pool(gen, slots, dim, width, torch.float16, device)
    pool[0] = float("nan")
    before = pool.clone()
    ref_pool = f64(pool)
    idx = torch.tensor([0, 3, 0, 1], dtype=torch.int32, device=device)
    y = causal_conv1d_update(x.half(), pool, w, b, "silu", idx, pad_slot_id=0)
    y_ref = causal_conv1d_update_ref(f64(x.half()), ref_pool, *f64(w, b), "silu", idx, pad_slot_id=0)
    assert y.dtype == torch.float16
    assert rel_err(y, y_ref) <= Y_F32 + unit_roundoff(torch.float16)
    assert bits_equal(pool[[0, 2, 4]], before[[0, 2, 4]])
    assert bits_equal(pool[[3, 1]], ref_pool[[3, 1]].half())


# ---------------------------------------------------------------------------------------------------------
# prefill

# lengths: a sequence starting mid-block, one shorter than K-1 (its final window keeps old entries), an empty
# one, a long one spanning several token blocks.
LENGTHS = [5, 2, 0, 19, 1]
INDICES = [1, 4, 7, 6, -1]
HAS_INIT = [True, True, True, False, True]


@pytest.mark.parametrize("block_t", [4, None], ids=["block4", "block-default"])
def test_prefill_matches_reference(device, gen, state_dtype, block_t):
    dim, width, slots = 40, 4, 9
    w, b = conv_weights(dim, width, gen, device=device)
    cu = cu_from_lengths(LENGTHS, device)
    x = conv_tokens(int(cu[-1]), dim, gen, device=device)
    pool = _pool(gen, slots, dim, width, state_dtype, device)
    used = [i for i in INDICES if i != -1]
    unused = [s for s in range(slots) if s not in used]
    pool[unused] = float("nan")
    pool[6] = float("nan")  # sequence 3 has no initial state: its slot must not be read
    before = pool.clone()
    ref_pool = f64(pool)
    idx = torch.tensor(INDICES, dtype=torch.int32, device=device)
    init = torch.tensor(HAS_INIT, device=device)
    out = torch.full_like(x, float("nan"))
    meta = conv_prefill_metadata(cu, block_t=block_t)
    y = causal_conv1d_prefill(x, w, b, cu, pool, idx, init, "silu", out=out, metadata=meta)
    y_ref = causal_conv1d_prefill_ref(*f64(x, w, b), cu, ref_pool, idx, init, "silu")
    assert y is out
    assert rel_err(y, y_ref) <= Y_F32
    _assert_windows(pool[used], ref_pool[used], state_dtype)
    assert bits_equal(pool[unused], before[unused])


def test_prefill_no_initial_states_strided_input(device, gen):
    """has_initial_state=None (all start from zeros); x is a column slice of a wider projection."""
    dim, width, slots = 24, 3, 4
    lengths = [7, 3, 9]
    w, b = conv_weights(dim, width, gen, device=device)
    cu = cu_from_lengths(lengths, device)
    proj = torch.randn(int(cu[-1]), dim + 10, generator=gen).to(device)
    x = proj[:, 5 : 5 + dim]
    pool = _pool(gen, slots, dim, width, torch.float32, device)
    pool[:] = float("nan")  # nothing may be read
    ref_pool = f64(pool)
    idx = torch.tensor([3, 0, 2], dtype=torch.int32, device=device)
    y = causal_conv1d_prefill(x, w, None, cu, pool, idx, None, None)
    y_ref = causal_conv1d_prefill_ref(*f64(x, w), None, cu, ref_pool, idx, None, None)
    assert rel_err(y, y_ref) <= Y_F32
    assert bits_equal(pool[[3, 0, 2]], ref_pool[[3, 0, 2]].float())
    assert bool(torch.isnan(pool[1]).all())


@pytest.mark.parametrize("split", [1, 2, 5, 8])
def test_prefill_chunked_invariance(device, gen, split):
    """Prefill of x equals prefill of x[:a] then of x[a:] seeded with the window it left (per sequence)."""
    dim, width, slots = 32, 4, 6
    lengths = [11, 9, 14]
    heads = [min(split + i, n - 1) for i, n in enumerate(lengths)]  # a different split per sequence
    w, b = conv_weights(dim, width, gen, device=device)
    xs = [conv_tokens(n, dim, gen, device=device) for n in lengths]
    pool0 = _pool(gen, slots, dim, width, torch.float32, device)
    idx = torch.tensor([5, 0, 3], dtype=torch.int32, device=device)
    init = torch.tensor([True, False, True], device=device)
    meta = dict(metadata=None)

    full_pool = pool0.clone()
    y_full = causal_conv1d_prefill(torch.cat(xs), w, b, cu_from_lengths(lengths, device), full_pool, idx, init, **meta)

    part_pool = pool0.clone()
    y1 = causal_conv1d_prefill(
        torch.cat([x[:a] for x, a in zip(xs, heads)]), w, b, cu_from_lengths(heads, device), part_pool, idx, init
    )
    tails = [n - a for n, a in zip(lengths, heads)]
    y2 = causal_conv1d_prefill(
        torch.cat([x[a:] for x, a in zip(xs, heads)]),
        w,
        b,
        cu_from_lengths(tails, device),
        part_pool,
        idx,
        torch.ones(3, dtype=torch.bool, device=device),
    )
    y_split = torch.cat([torch.cat([p, q]) for p, q in zip(y1.split(heads), y2.split(tails))])
    # the same fp32 sums in the same order either way: equal up to the last ulp
    assert rel_err(y_split, y_full) <= 1e-6
    assert bits_equal(part_pool, full_pool)


def test_decode_after_prefill(device, gen):
    """One decode step after a prefill equals a prefill one token longer (output row and window)."""
    dim, width, slots = 32, 4, 4
    lengths = [6, 2, 9]
    w, b = conv_weights(dim, width, gen, device=device)
    xs = [conv_tokens(n + 1, dim, gen, device=device) for n in lengths]
    pool0 = _pool(gen, slots, dim, width, torch.float32, device)
    idx = torch.tensor([2, 3, 0], dtype=torch.int32, device=device)
    init = torch.tensor([True, False, True], device=device)

    long_pool = pool0.clone()
    y_long = causal_conv1d_prefill(
        torch.cat(xs), w, b, cu_from_lengths([n + 1 for n in lengths], device), long_pool, idx, init
    )
    pool = pool0.clone()
    causal_conv1d_prefill(torch.cat([x[:-1] for x in xs]), w, b, cu_from_lengths(lengths, device), pool, idx, init)
    y_step = causal_conv1d_update(torch.stack([x[-1] for x in xs]), pool, w, b, "silu", idx)
    last_rows = torch.cumsum(torch.tensor([n + 1 for n in lengths]), 0) - 1
    assert rel_err(y_step, y_long[last_rows]) <= 1e-6
    assert bits_equal(pool, long_pool)


def test_prefill_rejects_bad_arguments(device, gen):
    w, b = conv_weights(8, 4, gen, device=device)
    pool = torch.zeros(2, 8, 3, device=device)
    x = torch.zeros(5, 8, device=device)
    with pytest.raises(ValueError):  # cu_seqlens does not cover x
        causal_conv1d_prefill(x, w, b, torch.tensor([0, 4]), pool, torch.tensor([0]), None)
    with pytest.raises(ValueError):
        narrow = torch.zeros(2, 8, 2, device=device)  # window of 2 for a width-4 kernel
        causal_conv1d_prefill(x, w, b, torch.tensor([0, 5]), narrow, torch.tensor([0]), None)
    with pytest.raises(ValueError):
        causal_conv1d_update(x, pool, w, b, activation="relu")
