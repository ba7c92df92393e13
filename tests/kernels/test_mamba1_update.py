"""mamba1_state_update (Mamba-1 decode) against its float64 reference.

Error measure: rel_err = max|kernel - ref| / max|ref| (ref in float64 from the same quantised inputs).

Bounds (u = unit roundoff, fp32 2^-24 = 6.0e-8):
* STATE_F32: h' = exp(dt' A) h + (dt' x) B: the exp of a rounded argument (|dt' A| <= ~10 here) errs by
  ~|dt' A| u plus a few ulp, then three roundings: <= ~20u = 1.2e-6; bound 4e-6, as for Mamba-2.
* Y_F32: y = sum_n h_n C_n over N <= 16 terms (+ D x, * silu z): (log2 N + 6) u sum|h_n C_n| <= 10u * 4 max|y|
  with random signs; bound 1e-5.
* A 16-bit store adds its rounding (``store_roundoff``).
"""

import pytest

torch = pytest.importorskip("torch")  # the gpu or test extra; the test environment has it
from hybridplan.kernels import mamba1_state_update  # noqa: E402
from hybridplan.kernels.inputs import mamba1_inputs, state_pool  # noqa: E402
from hybridplan.kernels.mamba1.naive import mamba1_state_update_ref  # noqa: E402
from hybridplan.kernels.testing import bits_equal, f64, rel_err, store_roundoff  # noqa: E402

pytestmark = pytest.mark.kernels

STATE_F32 = 4e-6
Y_F32 = 1e-5

# (I, N): Mamba-1's N = 16; I = 200 makes two channel blocks of 128 (the second partly masked); N = 12 is not
# a power of two (masked state columns).
SHAPES = [(32, 16), (200, 16), (24, 12)]


def _run(
    device,
    gen,
    shape,
    state_dtype=torch.float32,
    *,
    batch=5,
    slots=9,
    indices=(3, -1, 0, 7, 5),
    pad_slot_id=-1,
    plain=False,
):
    dim, dstate = shape
    x, dt, A, B, C, D, z, dt_bias = mamba1_inputs(batch, dim, dstate, gen, device=device)
    if plain:  # no D, z, bias; dt already a positive step
        D = z = dt_bias = None
        dt = dt.abs() * 0.2 + 0.05
    pool = state_pool((slots, dim, dstate), gen, state_dtype, device)
    idx = None if indices is None else torch.tensor(indices, dtype=torch.int32, device=device)
    used = list(range(batch)) if indices is None else [i for i in indices if i != pad_slot_id]
    pool[[s for s in range(slots) if s not in used]] = float("nan")  # must stay bit-for-bit as they are
    before = pool.clone()
    ref_pool = f64(pool)
    out = torch.full((batch, dim), float("nan"), device=device)  # poisoned: every row gets written
    y = mamba1_state_update(pool, x, dt, A, B, C, D, z, dt_bias, not plain, idx, pad_slot_id, out=out)
    y_ref = mamba1_state_update_ref(
        ref_pool,
        *f64(x, dt, A, B, C, D, z, dt_bias),
        dt_softplus=not plain,
        state_batch_indices=idx,
        pad_slot_id=pad_slot_id,
    )
    assert y is out
    return pool, before, ref_pool, y, y_ref, used


@pytest.mark.parametrize("shape", SHAPES)
def test_matches_reference(device, gen, shape, state_dtype):
    pool, before, ref_pool, y, y_ref, used = _run(device, gen, shape, state_dtype)
    assert rel_err(pool[used], ref_pool[used]) <= STATE_F32 + store_roundoff(state_dtype)
    assert rel_err(y, y_ref) <= Y_F32 + 4 * store_roundoff(state_dtype)  # y reads the stored-precision state
    unused = [s for s in range(pool.shape[0]) if s not in used]
    assert bits_equal(pool[unused], before[unused])
    assert torch.all(y[1] == 0)  # the pad entry: a zero row, nothing read


def test_without_indices_or_optional_inputs(device, gen):
    pool, _, ref_pool, y, y_ref, _ = _run(device, gen, (32, 16), indices=None, slots=5, plain=True)
    assert rel_err(pool, ref_pool) <= STATE_F32 and rel_err(y, y_ref) <= Y_F32


def test_each_state_column_decays_at_its_own_rate(device, gen):
    # x = 0: h' = exp(dt' A) h column by column, so a column's ratio h'/h is exp(dt' A[i, n]) exactly as the
    # reference has it (Mamba-2 would give one rate per head)
    dim, dstate = 8, 4
    x, dt, A, B, C, _, _, _ = mamba1_inputs(1, dim, dstate, gen, device=device)
    pool = torch.ones(1, dim, dstate, device=device)
    mamba1_state_update(pool, torch.zeros_like(x), dt, A, B, C, dt_softplus=True)
    rates = torch.exp(torch.nn.functional.softplus(dt.double())[0][:, None] * A.double())
    assert rel_err(pool[0], rates) <= STATE_F32


def test_bad_arguments(device, gen):
    x, dt, A, B, C, D, z, dt_bias = mamba1_inputs(2, 8, 4, gen, device=device)
    pool = torch.zeros(3, 8, 4, device=device)
    with pytest.raises(ValueError, match="A must have shape"):
        mamba1_state_update(pool, x, dt, A[:, :2], B, C)
    with pytest.raises(ValueError, match="state must be"):
        mamba1_state_update(pool[0], x, dt, A, B, C)
    with pytest.raises(ValueError, match="unit stride along N"):
        mamba1_state_update(torch.zeros(3, 4, 8, device=device).transpose(1, 2), x, dt, A, B, C)
