"""ssd_chunk_scan (prefill) against the token-by-token float64 recurrence, and its chunked-prefill algebra.

rel_err = max|kernel - ref| / max|ref|. Bounds (u = fp32 unit roundoff 6.0e-8; Q = chunk size):
* Y_F32 / STATE_F32: the log-decays are summed in fp32 along each chunk; with random rounding the error of
  a partial sum is ~sqrt(Q) u sum|dt' A| (|dt' A| <= ~1.5 here: 4 * 6e-8 * 24 = 6e-6 at Q = 16 in the
  worst chunk), and exp turns it into the same relative error on the decay factors. The dot products add
  ~(Q + N) u relative to sums of |terms| (~1e-6). Observed ~2e-7; bound 1e-5. Errors grow ~sqrt(Q): 3x for
  Q = 128.
* fp16 inputs (x, B, C, z, dt in fp16): the kernel feeds the tensor-core dots 16-bit operands: the scaled
  B (dt' exp(.) B), the decay-weighted C B^T and the carried-in states are each rounded to fp16 (u16 = 4.9e-4
  relative per term), then y is stored in fp16 (u16). Per-term roundings of random sign largely cancel in the
  sums; bound 4 u16 = 2e-3 for y and for the final states (which sum the rounded scaled-B products).
* A 16-bit state pool adds its store rounding (u16) to the final states.
"""

import pytest

torch = pytest.importorskip("torch")  # the gpu or test extra; the test environment has it
from hybridplan.kernels import selective_state_update, ssd_chunk_scan  # noqa: E402
from hybridplan.kernels.inputs import cu_from_lengths, ssd_params, ssd_tokens, state_pool  # noqa: E402
from hybridplan.kernels.ssd.naive import ssd_scan_sequential_ref  # noqa: E402
from hybridplan.kernels.testing import FP16_EPS, bits_equal, f64, rel_err, store_roundoff  # noqa: E402

pytestmark = pytest.mark.kernels

Y_F32 = 1e-5
STATE_F32 = 1e-5
Y_FP16_INPUTS = 4 * FP16_EPS

# sequence 1 starts mid-chunk in the packed buffer, 2 is a single token, 3 is empty, 4 spans several chunks,
# 5 uses the pad slot (computed from zero, never stored)
LENGTHS = [5, 1, 13, 0, 21, 3]
INDICES = [1, 4, 7, 6, 0, -1]
HAS_INIT = [True, False, True, True, True, True]


def _setup(
    device, gen, lengths, shape, io_dtype=torch.float32, state_dtype=torch.float32, slots=9, d_per_channel=False
):
    H, P, N, G = shape
    cu = cu_from_lengths(lengths, device)
    x, z, dt, B, C = ssd_tokens(int(cu[-1]), H, P, N, G, gen, io_dtype, device)
    A, D, dt_bias = ssd_params(H, P, gen, device, d_per_channel)
    pool = state_pool((slots, H, P, N), gen, state_dtype, device)
    return dict(cu=cu, x=x, z=z, dt=dt, B=B, C=C, A=A, D=D, dt_bias=dt_bias, pool=pool)


def _scan(t, chunk, pool, idx, init, *, with_z=True, with_D=True, with_bias=True, softplus=True, out=None):
    return ssd_chunk_scan(
        t["x"],
        t["dt"],
        t["A"],
        t["B"],
        t["C"],
        chunk,
        t["cu"],
        pool,
        idx,
        init,
        D=t["D"] if with_D else None,
        z=t["z"] if with_z else None,
        dt_bias=t["dt_bias"] if with_bias else None,
        dt_softplus=softplus,
        out=out,
    )


def _ref(t, pool64, idx, init, *, with_z=True, with_D=True, with_bias=True, softplus=True):
    x, dt, A, B, C, D, z, bias = f64(t["x"], t["dt"], t["A"], t["B"], t["C"], t["D"], t["z"], t["dt_bias"])
    return ssd_scan_sequential_ref(
        x,
        dt,
        A,
        B,
        C,
        t["cu"],
        pool64,
        idx,
        init,
        D=D if with_D else None,
        z=z if with_z else None,
        dt_bias=bias if with_bias else None,
        dt_softplus=softplus,
    )


def _full_check(device, t, chunk, state_dtype, y_bound, state_bound=STATE_F32, **opts):
    idx = torch.tensor(INDICES, dtype=torch.int32, device=device)
    init = torch.tensor(HAS_INIT, device=device)
    pool = t["pool"]
    slots = pool.shape[0]
    used = [i for i in INDICES if i != -1]
    unused = [s for s in range(slots) if s not in used]
    pool[unused] = float("nan")  # untouched, bit for bit
    pool[4] = float("nan")  # sequence 1 has no initial state: its slot must not be read
    before = pool.clone()
    ref_pool = f64(pool)
    out = torch.full_like(t["x"], float("nan"))  # poisoned: every row must be written
    y = _scan(t, chunk, pool, idx, init, out=out, **opts)
    y_ref = _ref(t, ref_pool, idx, init, **opts)
    assert y is out
    assert rel_err(y, y_ref) <= y_bound
    assert rel_err(pool[used], ref_pool[used]) <= state_bound + store_roundoff(state_dtype)
    assert bits_equal(pool[unused], before[unused])


@pytest.mark.parametrize("chunk", [8, 16])
def test_matches_float64_recurrence(device, gen, state_dtype, chunk):
    t = _setup(device, gen, LENGTHS, (4, 16, 16, 2), state_dtype=state_dtype)
    _full_check(device, t, chunk, state_dtype, Y_F32)


def test_fp16_inputs(device, gen):
    t = _setup(device, gen, LENGTHS, (4, 16, 16, 2), io_dtype=torch.float16)
    _full_check(device, t, 8, torch.float32, Y_FP16_INPUTS, Y_FP16_INPUTS)


def test_bf16_inputs(device, gen, on_gpu):
    """bf16 x, B, C, z, dt (the production dtype): the fp16 argument with u_bf16 = 3.9e-3 per rounding."""
    if not on_gpu:
        pytest.skip("bf16 tl.dot gives wrong results in the Triton CPU interpreter; this case runs on a CUDA GPU")
    t = _setup(device, gen, LENGTHS, (4, 16, 16, 2), io_dtype=torch.bfloat16)
    _full_check(device, t, 16, torch.float32, 4 * 2.0**-8, 4 * 2.0**-8)


def test_large_tiles(device, gen):
    """Chunk 128 and N = 96: two row blocks and two column blocks per chunk, a two-step loop over N (the
    second step half masked), P = 24 masked within one tile. The paths Q = 256 takes on a GPU."""
    lengths = [150, 37]
    t = _setup(device, gen, lengths, (2, 24, 96, 1), slots=3)
    idx = torch.tensor([2, 0], dtype=torch.int32, device=device)
    init = torch.tensor([True, False], device=device)
    ref_pool = f64(t["pool"])
    y = _scan(t, 128, t["pool"], idx, init)
    y_ref = _ref(t, ref_pool, idx, init)
    # 128-token chunks: sqrt(8) ~ 3x the decay-sum error of Q = 16 (see the bounds above)
    assert rel_err(y, y_ref) <= 3 * Y_F32
    assert rel_err(t["pool"][[2, 0]], ref_pool[[2, 0]]) <= 3 * STATE_F32


@pytest.mark.parametrize(
    "shape,with_z,with_D,with_bias,softplus,d_per_channel",
    [((4, 16, 16, 4), False, False, False, False, False), ((2, 8, 8, 1), True, True, False, True, True)],
    ids=["G=H-bare", "P8N8-D-per-channel-no-bias"],
)
def test_optional_inputs(device, gen, shape, with_z, with_D, with_bias, softplus, d_per_channel):
    t = _setup(device, gen, LENGTHS, shape, d_per_channel=d_per_channel)
    if not softplus:
        t["dt"] = t["dt"].abs() * 0.2 + 0.05
    _full_check(
        device, t, 8, torch.float32, Y_F32, with_z=with_z, with_D=with_D, with_bias=with_bias, softplus=softplus
    )


def test_no_initial_states(device, gen):
    """has_initial_state=None: every sequence starts from zero, nothing is read from the pool. Indices as int64
    (vLLM's dtype)."""
    t = _setup(device, gen, [6, 11], (2, 16, 16, 1), slots=3)
    t["pool"][:] = float("nan")
    idx = torch.tensor([2, 0], dtype=torch.int64, device=device)
    ref_pool = f64(t["pool"])
    y = _scan(t, 8, t["pool"], idx, None)
    y_ref = _ref(t, ref_pool, idx, None)
    assert rel_err(y, y_ref) <= Y_F32
    assert rel_err(t["pool"][[2, 0]], ref_pool[[2, 0]]) <= STATE_F32
    assert bool(torch.isnan(t["pool"][1]).all())


def _split(t, heads, lengths):
    """Per-sequence split of the packed tokens: the first ``heads[s]`` tokens of each sequence, then the rest."""
    cu = [0] + torch.cumsum(torch.tensor(lengths), 0).tolist()
    first, second = {}, {}
    for k in ("x", "z", "dt", "B", "C"):
        first[k] = torch.cat([t[k][cu[s] : cu[s] + heads[s]] for s in range(len(lengths))])
        second[k] = torch.cat([t[k][cu[s] + heads[s] : cu[s + 1]] for s in range(len(lengths))])
    for part, lens in ((first, heads), (second, [n - a for n, a in zip(lengths, heads)])):
        part.update(A=t["A"], D=t["D"], dt_bias=t["dt_bias"], cu=cu_from_lengths(lens, t["x"].device))
    return first, second


@pytest.mark.parametrize("split", [1, 5, 8, 13], ids=lambda a: f"split{a}")
def test_chunked_prefill_invariance(device, gen, split):
    """Scanning x equals scanning x[:a], then x[a:] seeded with the state it left, per sequence. Splits at
    and inside chunk boundaries (chunk 8), a different one per sequence."""
    lengths = [19, 24, 7]
    heads = [min(split + s, n - 1) for s, n in enumerate(lengths)]
    t = _setup(device, gen, lengths, (2, 16, 16, 2), slots=4)
    idx = torch.tensor([3, 0, 2], dtype=torch.int32, device=device)
    init = [True, False, True]  # a Python list works too
    pool0 = t["pool"]

    full_pool = pool0.clone()
    y_full = _scan(t, 8, full_pool, idx, init)

    first, second = _split(t, heads, lengths)
    part_pool = pool0.clone()
    y1 = _scan(first, 8, part_pool, idx, init)
    y2 = _scan(second, 8, part_pool, idx, torch.ones(3, dtype=torch.bool, device=device))
    tails = [n - a for n, a in zip(lengths, heads)]
    y_split = torch.cat([torch.cat([p, q]) for p, q in zip(y1.split(heads), y2.split(tails))])
    # both sides are fp32 kernel runs that differ only in where chunks start: each within Y_F32 of the exact
    # result, so within 2 Y_F32 of each other
    assert rel_err(y_split, y_full) <= 2 * Y_F32
    assert rel_err(part_pool, full_pool) <= 2 * STATE_F32


def test_decode_after_prefill(device, gen):
    """One decode step after a prefill equals a prefill one token longer: output of that token and state."""
    lengths = [9, 1, 16]
    longer = [n + 1 for n in lengths]
    t = _setup(device, gen, longer, (4, 16, 16, 2), slots=5)
    idx = torch.tensor([4, 1, 2], dtype=torch.int32, device=device)
    init = torch.tensor([True, False, True], device=device)
    pool0 = t["pool"]

    long_pool = pool0.clone()
    y_long = _scan(t, 8, long_pool, idx, init)

    heads, last = _split(t, lengths, longer)
    pool = pool0.clone()
    _scan(heads, 8, pool, idx, init)
    y_step = selective_state_update(
        pool, last["x"], last["dt"], t["A"], last["B"], last["C"], t["D"], last["z"], t["dt_bias"], True, idx
    )
    last_rows = torch.cumsum(torch.tensor(longer), 0) - 1
    assert rel_err(y_step, y_long[last_rows]) <= 2 * Y_F32
    assert rel_err(pool, long_pool) <= 2 * STATE_F32


def test_rejects_bad_arguments(device, gen):
    t = _setup(device, gen, [4, 4], (2, 8, 8, 1), slots=2)
    idx = torch.tensor([0, 1], dtype=torch.int32, device=device)
    with pytest.raises(ValueError):  # cu_seqlens must cover every token
        ssd_chunk_scan(t["x"], t["dt"], t["A"], t["B"], t["C"], 8, torch.tensor([0, 4, 7]), t["pool"], idx, None)
    with pytest.raises(ValueError):
        ssd_chunk_scan(t["x"], t["dt"], t["A"], t["B"], t["C"], 8, t["cu"], t["pool"], idx[:1], None)
    with pytest.raises(TypeError):
        ssd_chunk_scan(t["x"], t["dt"], t["A"], t["B"].half(), t["C"], 8, t["cu"], t["pool"], idx, None)
