"""selective_state_update (decode) against its float64 reference.

Error measure: rel_err = max|kernel - ref| / max|ref| over the compared tensor (ref in float64 from the same
quantised inputs, so only the kernel's own arithmetic and its final stores are measured).

Bounds (u = unit roundoff: fp32 2^-24 = 6.0e-8, fp16 2^-11 = 4.9e-4, bf16 2^-8 = 3.9e-3):
* STATE_F32: a new state element is S*decay + (dt'*x)*B, three fp32 roundings, plus the error of decay =
  exp(softplus(dt + bias) * A): softplus and exp are within a few ulp and exp turns the rounding of its
  argument (|dt' A| <= ~5 here) into a relative error of that size times u. Together <= ~10u = 6e-7;
  bound 4e-6 (a margin for the GPU's approximate exp, ~2 ulp).
* Y_F32: y = sum_n S_n C_n (+ D x): a tree reduction of N <= 128 products errs by <= (log2 N + 5) u
  sum_n |S_n C_n|, and with random signs sum_n |S_n C_n| <= ~sqrt(N) max|y|: 12 * 6e-8 * 11 = 8e-6 at
  N = 128; bound 2e-5.
* A 16-bit store (state pool or y) adds its rounding, <= u of the stored value <= u * max|ref|
  (``store_roundoff``; 2u for bf16 under the CPU interpreter, which truncates instead of rounding).
"""

import pytest

torch = pytest.importorskip("torch")  # the gpu or test extra; the test environment has it
from hybridplan.kernels import selective_state_update  # noqa: E402
from hybridplan.kernels.inputs import ssd_params, ssd_tokens, state_pool  # noqa: E402
from hybridplan.kernels.ssd.naive import selective_state_update_ref  # noqa: E402
from hybridplan.kernels.testing import bits_equal, f64, rel_err, store_roundoff  # noqa: E402

pytestmark = pytest.mark.kernels

STATE_F32 = 4e-6
Y_F32 = 2e-5

# (H, P, N, G): tiny; P=24 with N=128 makes two P-blocks of 16 (the second half masked); N=12 is not a power
# of two (masked state columns); G = H (one head per group).
SHAPES = [(4, 16, 16, 2), (2, 24, 128, 1), (4, 8, 12, 4)]


def _state_bound(state_dtype):
    return STATE_F32 + store_roundoff(state_dtype)


def _run(
    device,
    gen,
    shape,
    state_dtype=torch.float32,
    io_dtype=torch.float32,
    *,
    batch=5,
    slots=9,
    indices=(3, -1, 0, 7, 5),
    pad_slot_id=-1,
    with_z=True,
    with_D=True,
    with_bias=True,
    softplus=True,
    d_per_channel=False,
    index_dtype=torch.int32,
):
    H, P, N, G = shape
    A, D, dt_bias = ssd_params(H, P, gen, device, d_per_channel)
    x, z, dt, B, C = ssd_tokens(batch, H, P, N, G, gen, io_dtype, device)
    if not softplus:
        dt = (dt.float().abs() * 0.2 + 0.05).to(io_dtype)  # already a positive step size
    D = D if with_D else None
    z = z if with_z else None
    dt_bias = dt_bias if with_bias else None
    pool = state_pool((slots, H, P, N), gen, state_dtype, device)
    idx = None if indices is None else torch.tensor(indices, dtype=index_dtype, device=device)
    used = list(range(batch)) if indices is None else [i for i in indices if i != pad_slot_id]
    unused = [s for s in range(slots) if s not in used]
    pool[unused] = float("nan")  # must stay bit-for-bit as they are
    before = pool.clone()
    ref_pool = f64(pool)
    out = torch.full((batch, H, P), float("nan"), dtype=io_dtype, device=device)  # poisoned: every row gets written

    y = selective_state_update(pool, x, dt, A, B, C, D, z, dt_bias, softplus, idx, pad_slot_id, out=out)
    y_ref = selective_state_update_ref(
        ref_pool,
        *f64(x, dt, A, B, C, D, z, dt_bias),
        dt_softplus=softplus,
        state_batch_indices=idx,
        pad_slot_id=pad_slot_id,
    )
    assert y is out
    return dict(
        y=y,
        y_ref=y_ref,
        pool=pool,
        ref_pool=ref_pool,
        before=before,
        used=used,
        unused=unused,
        pad_rows=[] if indices is None else [b for b, i in enumerate(indices) if i == pad_slot_id],
    )


def _check(r, state_dtype, io_dtype=torch.float32):
    assert bits_equal(r["pool"][r["unused"]], r["before"][r["unused"]]), "a slot not in the batch was written"
    assert rel_err(r["pool"][r["used"]], r["ref_pool"][r["used"]]) <= _state_bound(state_dtype)
    y_bound = Y_F32 + store_roundoff(io_dtype)
    assert rel_err(r["y"], r["y_ref"]) <= y_bound
    for b in r["pad_rows"]:
        assert torch.equal(r["y"][b], torch.zeros_like(r["y"][b])), "a pad entry's output row must be zeros"


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "H{}P{}N{}G{}".format(*s))
def test_matches_float64_reference(device, gen, shape, state_dtype):
    _check(_run(device, gen, shape, state_dtype), state_dtype)


@pytest.mark.parametrize("io_dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_16bit_activations(device, gen, io_dtype):
    """x, dt, B, C, z in 16 bits (read exactly into fp32), y stored in 16 bits: adds the rounding of y."""
    r = _run(device, gen, (4, 16, 16, 2), torch.float32, io_dtype)
    _check(r, torch.float32, io_dtype)


@pytest.mark.parametrize(
    "with_z,with_D,with_bias,softplus,d_per_channel",
    [(False, False, False, False, False), (True, True, False, True, True), (False, True, True, False, False)],
    ids=["bare", "D-per-channel-no-bias", "no-z-no-softplus"],
)
def test_optional_inputs(device, gen, with_z, with_D, with_bias, softplus, d_per_channel):
    r = _run(
        device,
        gen,
        (4, 16, 16, 2),
        with_z=with_z,
        with_D=with_D,
        with_bias=with_bias,
        softplus=softplus,
        d_per_channel=d_per_channel,
    )
    _check(r, torch.float32)


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_pad_slot_zero(device, gen, index_dtype):
    """SGLang's convention: slot 0 is the padding slot; entries pointing at it leave it untouched."""
    r = _run(device, gen, (2, 16, 16, 1), indices=(4, 0, 2, 0, 6), pad_slot_id=0, index_dtype=index_dtype)
    assert 0 in r["unused"]
    _check(r, torch.float32)


@pytest.mark.parametrize("pad_slot_id", [-1, 0])
def test_without_indices(device, gen, pad_slot_id):
    """No index vector: entry b uses slot b, none is padding (even entry 0 with pad_slot_id 0); the slots past
    the batch stay untouched."""
    r = _run(device, gen, (2, 16, 16, 2), indices=None, batch=4, slots=7, pad_slot_id=pad_slot_id)
    assert r["unused"] == [4, 5, 6]
    _check(r, torch.float32)


def test_all_pad(device, gen):
    r = _run(device, gen, (2, 16, 16, 2), indices=(-1, -1), batch=2, slots=3)
    assert r["used"] == []
    _check(r, torch.float32)


def test_strided_views(device, gen):
    """Inputs as column slices of one projection output, the pool one page-strided layer of a larger buffer."""
    H, P, N, G, batch, slots = 2, 16, 16, 1, 3, 5
    A, D, dt_bias = ssd_params(H, P, gen, device)
    width = 2 * H * P + 2 * G * N + H
    proj = torch.randn(batch, width + 3, generator=gen).to(device)  # +3: rows are not tightly packed
    z = proj[:, : H * P].view(batch, H, P)
    x = proj[:, H * P : 2 * H * P].view(batch, H, P)
    B = proj[:, 2 * H * P : 2 * H * P + G * N].view(batch, G, N)
    C = proj[:, 2 * H * P + G * N : 2 * H * P + 2 * G * N].view(batch, G, N)
    dt = proj[:, width - H : width] * 0.5
    page = H * P * N + 40  # each slot's page holds more than this layer's state
    raw = torch.randn(2, slots, page, generator=gen).to(device)
    pool = torch.as_strided(raw[1], (slots, H, P, N), (page, P * N, N, 1))
    idx = torch.tensor([4, 0, 2], dtype=torch.int32, device=device)
    ref_pool = f64(pool)
    raw_before = raw.clone()
    y = selective_state_update(pool, x, dt, A, B, C, D, z, dt_bias, True, idx)
    y_ref = selective_state_update_ref(ref_pool, *f64(x, dt, A, B, C, D, z, dt_bias), state_batch_indices=idx)
    assert rel_err(y, y_ref) <= Y_F32
    assert rel_err(pool[[4, 0, 2]], ref_pool[[4, 0, 2]]) <= STATE_F32
    # nothing outside the used states moved: layer 0, the page tails, slots 1 and 3
    mask = torch.ones_like(raw, dtype=torch.bool)
    for s in (4, 0, 2):
        mask[1, s, : H * P * N] = False
    assert bits_equal(raw[mask], raw_before[mask])


def test_rejects_bad_arguments(device, gen):
    H, P, N, G = 4, 8, 8, 2
    A, D, dt_bias = ssd_params(H, P, gen, device)
    x, z, dt, B, C = ssd_tokens(2, H, P, N, G, gen, torch.float32, device)
    pool = torch.zeros(3, H, P, N, device=device)
    with pytest.raises(ValueError):
        b3 = torch.zeros(2, 3, N, device=device)
        selective_state_update(pool, x, dt, A, b3, b3, D)  # 3 groups do not divide 4 heads
    with pytest.raises(ValueError):
        selective_state_update(pool, x[:, :, :4], dt, A, B, C)
    with pytest.raises(ValueError):
        selective_state_update(pool.transpose(2, 3), x, dt, A, B, C)  # state not unit-stride along N
    with pytest.raises(ValueError):
        selective_state_update(pool, x, dt, A, B, C, state_batch_indices=torch.tensor([0], device=device))
