"""The whole-call input builders of ``hybridplan.kernels.inputs`` (what the benchmarks and the profiler run):
each call passes its inputs to the kernel as the float64 reference takes them, writes into its own output and
updates exactly the slots it was given.

Bounds as in the per-kernel tests (fp32 throughout): decode outputs 2e-5, states 4e-6 (Gated DeltaNet 2e-5);
conv 5e-6; the chunked scan 1e-5.
"""

import pytest

torch = pytest.importorskip("torch")  # the gpu or test extra; the test environment has it
from hybridplan.kernels import inputs  # noqa: E402
from hybridplan.kernels.conv1d.naive import causal_conv1d_prefill_ref, causal_conv1d_update_ref  # noqa: E402
from hybridplan.kernels.gdn.naive import gated_delta_rule_update_ref  # noqa: E402
from hybridplan.kernels.mamba1.naive import mamba1_state_update_ref  # noqa: E402
from hybridplan.kernels.ssd.naive import selective_state_update_ref, ssd_chunk_scan_ref  # noqa: E402
from hybridplan.kernels.testing import bits_equal, f64, rel_err  # noqa: E402

pytestmark = pytest.mark.kernels


def _check(call, ref, pool, used, y_bound, state_bound):
    """Run ``call`` on ``pool`` and ``ref`` on a float64 copy with the same arguments."""
    ref_pool = f64(pool)
    before = pool.clone()
    args = {
        k: f64(v) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
        for k, v in call.args.items()
        if k not in ("out", "metadata")
    }
    y = call(pool)
    y_ref = ref(**args, **{call.pool_arg: ref_pool})
    assert y is call.args["out"]
    assert rel_err(y, y_ref) <= y_bound
    assert rel_err(pool[used], ref_pool[used]) <= state_bound
    unused = [s for s in range(pool.shape[0]) if s not in used]
    assert bits_equal(pool[unused], before[unused])
    held = call.held
    assert all(any(v is h for h in held) for v in call.args.values() if isinstance(v, torch.Tensor))


def test_mamba2_decode(device, gen):
    idx = inputs.random_slots(6, 3, gen, device)
    call = inputs.mamba2_decode(3, 4, 16, 16, 2, gen, device=device, indices=idx)
    pool = inputs.state_pool((6, 4, 16, 16), gen, device=device)
    _check(call, selective_state_update_ref, pool, idx.tolist(), 2e-5, 4e-6)


def test_mamba2_decode_default_slots(device, gen):
    call = inputs.mamba2_decode(3, 2, 8, 8, 1, gen, device=device)
    assert call.args["state_batch_indices"].tolist() == [0, 1, 2]
    pool = inputs.state_pool((3, 2, 8, 8), gen, device=device)
    _check(call, selective_state_update_ref, pool, [0, 1, 2], 2e-5, 4e-6)


def test_mamba2_prefill(device, gen):
    slots = torch.tensor([3, 0], dtype=torch.int32, device=device)
    call = inputs.mamba2_prefill([11, 6], 2, 16, 16, 1, 8, gen, device=device, slots=slots)
    pool = inputs.state_pool((4, 2, 16, 16), gen, device=device)
    _check(call, ssd_chunk_scan_ref, pool, [3, 0], 1e-5, 1e-5)


def test_mamba1_decode(device, gen):
    call = inputs.mamba1_decode(3, 24, 8, gen, device=device)
    pool = inputs.state_pool((4, 24, 8), gen, device=device)
    _check(call, mamba1_state_update_ref, pool, [0, 1, 2], 2e-5, 4e-6)


def test_gdn_decode(device, gen):
    idx = inputs.random_slots(5, 2, gen, device)
    call = inputs.gdn_decode(2, 2, 4, 16, 16, gen, device=device, indices=idx)
    pool = inputs.state_pool((5, 4, 16, 16), gen, device=device)
    _check(call, gated_delta_rule_update_ref, pool, idx.tolist(), 2e-5, 2e-5)


@pytest.mark.parametrize("activation", ["silu", None])
def test_conv_decode(device, gen, activation):
    call = inputs.conv_decode(3, 40, 4, gen, device=device, activation=activation)
    pool = inputs.state_pool((5, 40, 3), gen, device=device, scale=1.0)
    _check(call, causal_conv1d_update_ref, pool, [0, 1, 2], 5e-6, 0.0)


def test_conv_prefill(device, gen):
    call = inputs.conv_prefill([9, 2], 40, 4, gen, device=device)
    pool = inputs.state_pool((3, 40, 3), gen, device=device, scale=1.0)
    _check(call, causal_conv1d_prefill_ref, pool, [0, 1], 5e-6, 0.0)


def test_random_slots_are_distinct(gen):
    idx = inputs.random_slots(16, 8, gen)
    assert idx.dtype == torch.int32 and len(set(idx.tolist())) == 8 and all(0 <= s < 16 for s in idx.tolist())


def test_builders_take_a_dtype(device, gen):
    """Activations in the dtype asked for; the parameters stay fp32 as checkpoints keep them."""
    call = inputs.mamba2_decode(2, 2, 8, 8, 1, gen, dtype=torch.float16, device=device)
    a = call.args
    assert {a[k].dtype for k in ("x", "z", "dt", "B", "C", "out")} == {torch.float16}
    assert {a[k].dtype for k in ("A", "D", "dt_bias")} == {torch.float32}
    conv = inputs.conv_prefill([4], 8, 4, gen, dtype=torch.bfloat16, device=device)
    assert conv.args["x"].dtype == conv.args["weight"].dtype == torch.bfloat16
