"""The algebra under the chunked scan: every step is an affine map S -> a S + b.

* composition (a2, b2) o (a1, b1) = (a2 a1, a2 b1 + b2) is associative, so any grouping of the steps (chunks,
  a doubling scan) gives the same states as the token-by-token recurrence;
* the recurrence is linear in the state, so a perturbation d of the state after step t reaches step T as
  exactly d * prod_{t < s <= T} exp(dt'_s A): checked on the references in float64 and on the kernels in fp32.

float64 bounds: each composition or step rounds a handful of times (u64 = 1.1e-16); over <= 40 steps the
accumulated relative error stays below ~1e-14. Bounds 1e-12.
"""

import pytest

torch = pytest.importorskip("torch")  # the gpu or test extra; the test environment has it
import torch.nn.functional as F  # noqa: E402
from hybridplan.kernels import selective_state_update, ssd_chunk_scan  # noqa: E402
from hybridplan.kernels.inputs import cu_from_lengths, ssd_params, ssd_tokens  # noqa: E402
from hybridplan.kernels.ssd.naive import (  # noqa: E402
    affine_apply,
    affine_compose,
    affine_scan,
    affine_steps,
    selective_state_update_ref,
    ssd_chunk_scan_ref,
    ssd_scan_sequential_ref,
)
from hybridplan.kernels.testing import FP32_EPS, f64, rel_err  # noqa: E402

pytestmark = pytest.mark.kernels

F64_BOUND = 1e-12


def _random_map(gen, H=3, P=4, N=5):
    a = torch.rand(H, generator=gen, dtype=torch.float64) + 0.1
    return a, torch.randn(H, P, N, generator=gen, dtype=torch.float64)


def test_composition_is_associative_with_identity(gen):
    m1, m2, m3 = (_random_map(gen) for _ in range(3))
    left = affine_compose(affine_compose(m1, m2), m3)
    right = affine_compose(m1, affine_compose(m2, m3))
    assert rel_err(left[0], right[0]) <= F64_BOUND
    assert rel_err(left[1], right[1]) <= F64_BOUND
    identity = (torch.ones(3, dtype=torch.float64), torch.zeros(3, 4, 5, dtype=torch.float64))
    for composed in (affine_compose(identity, m1), affine_compose(m1, identity)):
        assert torch.equal(composed[0], m1[0]) and torch.equal(composed[1], m1[1])
    # composing then applying equals applying one after the other
    s = torch.randn(3, 4, 5, generator=gen, dtype=torch.float64)
    assert rel_err(affine_apply(affine_compose(m1, m2), s), affine_apply(m2, affine_apply(m1, s))) <= F64_BOUND


def _sequence(gen, T, H=2, P=8, N=8, G=1, dt_shift=0.0):
    x, z, dt, B, C = ssd_tokens(T, H, P, N, G, gen, torch.float64)
    A, D, dt_bias = (t.double() for t in ssd_params(H, P, gen))
    return dict(x=x, z=z, dt=dt, B=B, C=C, A=A, D=D, dt_bias=dt_bias + dt_shift)


def _states_by_steps(s, s0):
    """States after every step, stepping the decode reference."""
    pool = s0[None].clone()
    out = []
    for t in range(s["x"].shape[0]):
        selective_state_update_ref(
            pool,
            s["x"][t : t + 1],
            s["dt"][t : t + 1],
            s["A"],
            s["B"][t : t + 1],
            s["C"][t : t + 1],
            dt_bias=s["dt_bias"],
        )
        out.append(pool[0].clone())
    return torch.stack(out)


def test_doubling_scan_matches_recurrence(gen):
    """A log-depth scan built from ``affine_compose`` (a grouping unlike the sequential one) gives every
    intermediate state of the recurrence."""
    s = _sequence(gen, 37)
    s0 = torch.randn(2, 8, 8, generator=gen, dtype=torch.float64)
    a, b = affine_steps(s["x"], s["dt"], s["A"], s["B"], s["dt_bias"])
    a_cum, b_cum = affine_scan(a, b)
    scanned = a_cum[..., None, None] * s0 + b_cum
    assert rel_err(scanned, _states_by_steps(s, s0)) <= F64_BOUND


@pytest.mark.parametrize("chunk", [1, 3, 8, 64])
def test_chunked_reference_matches_recurrence(gen, chunk):
    """The chunked SSD reference (per-chunk quadratic form + state passing) equals the recurrence in float64
    for any chunk size, including 1 (pure recurrence) and one longer than every sequence."""
    lengths = [5, 1, 13, 0, 21]
    H, P, N, G = 4, 8, 8, 2
    T = sum(lengths)
    x, z, dt, B, C = ssd_tokens(T, H, P, N, G, gen, torch.float64)
    A, D, dt_bias = (t.double() for t in ssd_params(H, P, gen))
    pool = torch.randn(6, H, P, N, generator=gen, dtype=torch.float64)
    cu, idx, init = cu_from_lengths(lengths), torch.tensor([5, 0, 2, 3, 1]), torch.tensor([1, 0, 1, 1, 0])
    p_seq, p_chunk = pool.clone(), pool.clone()
    y_seq = ssd_scan_sequential_ref(x, dt, A, B, C, cu, p_seq, idx, init, D, z, dt_bias)
    y_chunk = ssd_chunk_scan_ref(x, dt, A, B, C, chunk, cu, p_chunk, idx, init, D, z, dt_bias)
    assert rel_err(y_chunk, y_seq) <= F64_BOUND
    assert rel_err(p_chunk, p_seq) <= F64_BOUND


def _decay_product(s, lo, hi):
    """prod_{lo <= s < hi} exp(dt'_s A) per head, in float64."""
    dtp = F.softplus(s["dt"][lo:hi].double() + s["dt_bias"].double())
    return torch.exp((dtp * s["A"].double()).sum(0))


@pytest.mark.parametrize("t", [0, 7, 19])
def test_perturbation_decays_as_product_reference(gen, t):
    T = 20
    s = _sequence(gen, T)
    s0 = torch.randn(2, 8, 8, generator=gen, dtype=torch.float64)
    delta = torch.randn(2, 8, 8, generator=gen, dtype=torch.float64)
    pool = torch.stack([s0, s0])
    ys = []
    for step in range(T):
        sl = slice(step, step + 1)
        y = selective_state_update_ref(
            pool,
            s["x"][sl].expand(2, -1, -1),
            s["dt"][sl].expand(2, -1),
            s["A"],
            s["B"][sl].expand(2, -1, -1),
            s["C"][sl].expand(2, -1, -1),
            s["D"],
            dt_bias=s["dt_bias"],
        )
        if step == t:
            pool[1] += delta  # perturb the checkpoint after step t
        ys.append(y)
    expected = delta * _decay_product(s, t + 1, T)[:, None, None]
    assert rel_err(pool[1] - pool[0], expected) <= F64_BOUND
    if t < T - 1:  # the output at T moves by C_T . (the propagated perturbation); D x cancels
        dy = ys[-1][1] - ys[-1][0]
        assert rel_err(dy, (expected * s["C"][T - 1, 0][None, None, :]).sum(-1)) <= F64_BOUND


def test_perturbation_decays_as_product_decode_kernel(device, gen):
    """The same on the Triton decode kernel, fp32 pool: two slots, one perturbed after step t, same tokens.

    Bound: each step rounds each trajectory <= 4 times on values <= M = max(|S| + |d|), and decays are <= 1,
    so the difference carries <= 8 T u M absolute error; the kernel's fp32 decays are off by a few u each,
    a relative T * 4u on the product. Steps with dt' ~ 0.05 keep the product around 0.3, well above the
    rounding floor.
    """
    T, t = 20, 4
    s = _sequence(gen, T, dt_shift=-2.0)
    s0 = torch.randn(2, 8, 8, generator=gen, dtype=torch.float64)
    delta = torch.randn(2, 8, 8, generator=gen, dtype=torch.float64)
    dev = {k: v.float().to(device) for k, v in s.items()}
    pool = torch.stack([s0, s0]).float().to(device)
    for step in range(T):
        sl = slice(step, step + 1)
        selective_state_update(
            pool,
            dev["x"][sl].expand(2, -1, -1),
            dev["dt"][sl].expand(2, -1),
            dev["A"],
            dev["B"][sl].expand(2, -1, -1),
            dev["C"][sl].expand(2, -1, -1),
            dev["D"],
            dt_bias=dev["dt_bias"],
        )
        if step == t:
            pool[1] += delta.float().to(device)
    expected = delta * _decay_product(s, t + 1, T)[:, None, None]
    assert float(_decay_product(s, t + 1, T).min()) > 0.1
    M = float(pool.abs().max()) + float(delta.abs().max())
    err = (f64(pool[1].cpu()) - f64(pool[0].cpu()) - expected).abs().max()
    assert float(err) <= 8 * T * FP32_EPS * M + 4 * T * FP32_EPS * float(expected.abs().max())


def test_perturbation_decays_as_product_chunk_scan_kernel(device, gen):
    """Two identical sequences whose initial states differ by d: the scan kernel's final states differ by
    d * prod exp(dt'_s A) over the whole sequence, and its outputs at token t by
    silu(z_t) * (C_t . d prod_{s <= t} exp(dt'_s A)).

    Same bound as the decode case with T the sequence length: only the carried-in-state path differs between
    the two sequences (everything else is bit-identical work on identical tokens).
    """
    T, H, P, N = 20, 2, 8, 8
    s = _sequence(gen, T, dt_shift=-2.0)
    s0 = torch.randn(H, P, N, generator=gen, dtype=torch.float64)
    delta = torch.randn(H, P, N, generator=gen, dtype=torch.float64)
    two = {k: torch.cat([s[k], s[k]]).float().to(device) for k in ("x", "z", "dt", "B", "C")}
    prm = {k: s[k].float().to(device) for k in ("A", "D", "dt_bias")}
    pool = torch.stack([s0, s0 + delta]).float().to(device)
    idx = torch.tensor([0, 1], dtype=torch.int32, device=device)
    init = torch.tensor([True, True], device=device)
    y = ssd_chunk_scan(
        two["x"],
        two["dt"],
        prm["A"],
        two["B"],
        two["C"],
        8,
        cu_from_lengths([T, T], device),
        pool,
        idx,
        init,
        D=prm["D"],
        z=two["z"],
        dt_bias=prm["dt_bias"],
    )
    M = float(pool.abs().max()) + float(delta.abs().max())
    expected = delta * _decay_product(s, 0, T)[:, None, None]
    err = (f64(pool[1].cpu()) - f64(pool[0].cpu()) - expected).abs().max()
    assert float(err) <= 8 * T * FP32_EPS * M + 4 * T * FP32_EPS * float(expected.abs().max())

    dtp = F.softplus(s["dt"] + s["dt_bias"])
    prod = torch.exp(torch.cumsum(dtp * s["A"], 0))  # (T, H): decay from the initial state through token t
    carried = delta[None] * prod[:, :, None, None]  # (T, H, P, N)
    gate = F.silu(s["z"])
    dy_expected = gate * (carried * s["C"][:, 0][:, None, None, :]).sum(-1)
    dy = f64(y[T:].cpu()) - f64(y[:T].cpu())
    # the sum over N adds N u relative to sum_n |C_n d_n| per output
    scale = float((gate.abs()[..., None] * (M * s["C"][:, 0].abs())[:, None, None, :]).sum(-1).max())
    assert float((dy - dy_expected).abs().max()) <= (8 * T + 4 * N) * FP32_EPS * scale
