"""gated_delta_rule_update (Gated DeltaNet decode) against its float64 reference, and the delta rule's algebra.

Error measure: rel_err = max|kernel - ref| / max|ref| (ref in float64 from the same quantised inputs).

Bounds (u = unit roundoff, fp32 2^-24 = 6.0e-8):
* STATE_F32: a new state element is e^g S + u_v k, with u_v = beta (v - S.k). The dot S.k over K <= 128
  terms errs by <= (log2 K + 2) u sum_j |S_j k_j| <= 9u |S row| |k| (Cauchy-Schwarz), and with k unit-norm
  and |S row| <= sqrt(K) max|S| that is <= 9 * 6e-8 * 11.3 max|S| = 6e-6 max|S|; the normalisation of k, the
  exp and the few remaining roundings add < 10u. Bound 2e-5.
* O_F32: o = scale S.q, the same dot against a unit q: bound 2e-5.
* A 16-bit store adds its rounding (``store_roundoff``); a 16-bit pool also feeds its rounded old state in,
  which the reference sees identically (it reads the same quantised pool).
"""

import pytest

torch = pytest.importorskip("torch")  # the gpu or test extra; the test environment has it
from hybridplan.kernels import gated_delta_rule_update  # noqa: E402
from hybridplan.kernels.gdn.naive import gated_delta_rule_update_ref, l2_normalise  # noqa: E402
from hybridplan.kernels.inputs import gdn_inputs, state_pool  # noqa: E402
from hybridplan.kernels.testing import bits_equal, f64, rel_err, store_roundoff  # noqa: E402

pytestmark = pytest.mark.kernels

STATE_F32 = 2e-5
O_F32 = 2e-5

# (Hk, Hv, K, V): two value heads per key head; V = 24 with K = 128 makes two V-blocks of 16 (the second
# half masked); K = 12 is not a power of two (masked state columns); Hk = Hv.
SHAPES = [(2, 4, 16, 16), (1, 2, 128, 24), (2, 2, 12, 8)]


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
    l2norm=True,
    scale=None,
):
    hk, hv, kdim, vdim = shape
    q, k, v, g, beta = gdn_inputs(batch, hk, hv, kdim, vdim, gen, device=device)
    pool = state_pool((slots, hv, vdim, kdim), gen, state_dtype, device)
    idx = None if indices is None else torch.tensor(indices, dtype=torch.int32, device=device)
    used = list(range(batch)) if indices is None else [i for i in indices if i != pad_slot_id]
    pool[[s for s in range(slots) if s not in used]] = float("nan")  # must stay bit-for-bit as they are
    before = pool.clone()
    ref_pool = f64(pool)
    out = torch.full((batch, hv, vdim), float("nan"), device=device)  # poisoned: every row gets written
    o = gated_delta_rule_update(
        pool,
        q,
        k,
        v,
        g,
        beta,
        scale=scale,
        use_qk_l2norm=l2norm,
        state_batch_indices=idx,
        pad_slot_id=pad_slot_id,
        out=out,
    )
    o_ref = gated_delta_rule_update_ref(
        ref_pool,
        *f64(q, k, v, g, beta),
        scale=scale,
        use_qk_l2norm=l2norm,
        state_batch_indices=idx,
        pad_slot_id=pad_slot_id,
    )
    assert o is out
    return pool, before, ref_pool, o, o_ref, used


@pytest.mark.parametrize("shape", SHAPES)
def test_matches_reference(device, gen, shape, state_dtype):
    pool, before, ref_pool, o, o_ref, used = _run(device, gen, shape, state_dtype)
    bound = STATE_F32 + store_roundoff(state_dtype)
    assert rel_err(pool[used], ref_pool[used]) <= bound
    assert rel_err(o, o_ref) <= O_F32 + 4 * store_roundoff(state_dtype)  # o reads the stored-precision state
    unused = [s for s in range(pool.shape[0]) if s not in used]
    assert bits_equal(pool[unused], before[unused])
    assert torch.all(o[1] == 0)  # the pad entry: a zero row, nothing read


def test_without_indices_and_without_normalisation(device, gen):
    pool, _, ref_pool, o, o_ref, _ = _run(device, gen, (2, 4, 16, 16), indices=None, slots=5, l2norm=False, scale=0.3)
    # unnormalised q, k of norm ~4: the dot's error bound scales with |k| |q|, 16x the unit-norm case
    assert rel_err(pool, ref_pool) <= 16 * STATE_F32 and rel_err(o, o_ref) <= 16 * O_F32


def test_delta_rule_writes_v_at_k(device, gen):
    # beta = 1 and no decay: S' k = S k + (v - S k) (k.k) = v for a unit k, whatever S was
    hk, hv, kdim, vdim = 1, 2, 32, 16
    q, k, v, _, _ = gdn_inputs(3, hk, hv, kdim, vdim, gen, device=device)
    pool = torch.randn(3, hv, vdim, kdim, generator=gen).to(device)
    zeros, ones = torch.zeros(3, hv, device=device), torch.ones(3, hv, device=device)
    gated_delta_rule_update(pool, q, k, v, zeros, ones)
    kn = l2_normalise(k.double()).repeat_interleave(hv // hk, dim=1)
    recalled = torch.einsum("bhvk,bhk->bhv", pool.double(), kn)
    assert rel_err(recalled, v.double()) <= 1e-5


def test_two_steps_equal_the_reference_twice(device, gen):
    batch = 3
    pool = torch.randn(batch, 4, 16, 16, generator=gen).to(device)
    ref_pool = f64(pool)
    for _ in range(2):
        q, k, v, g, beta = gdn_inputs(batch, 2, 4, 16, 16, gen, device=device)
        o = gated_delta_rule_update(pool, q, k, v, g, beta)
        o_ref = gated_delta_rule_update_ref(ref_pool, *f64(q, k, v, g, beta))
    assert rel_err(pool, ref_pool) <= 2 * STATE_F32 and rel_err(o, o_ref) <= 2 * O_F32


def test_bad_arguments(device, gen):
    pool = torch.zeros(2, 4, 8, 16, device=device)
    q, k, v, g, beta = gdn_inputs(2, 2, 4, 16, 8, gen, device=device)
    with pytest.raises(ValueError, match="multiple of key heads"):
        gated_delta_rule_update(pool, q[:, :1].expand(2, 3, 16), k[:, :1].expand(2, 3, 16), v, g, beta)
    with pytest.raises(ValueError, match="g must have shape"):
        gated_delta_rule_update(pool, q, k, v, g[:, :2], beta)
    with pytest.raises(ValueError, match="unit stride along K"):
        gated_delta_rule_update(pool.transpose(2, 3).contiguous().transpose(2, 3), q, k, v, g, beta)
