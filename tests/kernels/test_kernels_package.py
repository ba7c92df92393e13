"""Package-level properties of hybridplan.kernels: exports, launch configurations, no autotuning."""

import inspect
import re
from pathlib import Path

import hybridplan.kernels as hk
import pytest

pytest.importorskip("torch")  # the kernels' modules import it; the test environment has it
from hybridplan.kernels.ssd.chunk import chunk_scan_launch_config, ssd_chunk_metadata  # noqa: E402
from hybridplan.kernels.ssd.state_update import state_update_launch_config  # noqa: E402

pytestmark = pytest.mark.kernels

KERNELS_DIR = Path(hk.__file__).resolve().parent


def test_no_autotune_anywhere():
    """Launch configurations come from the shape; autotuning would need a GPU and make timings unstable."""
    pattern = re.compile(r"autotune")
    offenders = [str(p) for p in KERNELS_DIR.rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == []


def test_public_api():
    expected = {
        "selective_state_update": [
            "state",
            "x",
            "dt",
            "A",
            "B",
            "C",
            "D",
            "z",
            "dt_bias",
            "dt_softplus",
            "state_batch_indices",
            "pad_slot_id",
            "out",
        ],
        "causal_conv1d_update": [
            "x",
            "conv_state",
            "weight",
            "bias",
            "activation",
            "conv_state_indices",
            "pad_slot_id",
        ],
        "causal_conv1d_prefill": [
            "x",
            "weight",
            "bias",
            "cu_seqlens",
            "conv_states",
            "state_indices",
            "has_initial_state",
            "activation",
        ],
        "gated_delta_rule_update": [
            "state",
            "q",
            "k",
            "v",
            "g",
            "beta",
            "scale",
            "use_qk_l2norm",
            "state_batch_indices",
            "pad_slot_id",
        ],
        "mamba1_state_update": [
            "state",
            "x",
            "dt",
            "A",
            "B",
            "C",
            "D",
            "z",
            "dt_bias",
            "dt_softplus",
            "state_batch_indices",
            "pad_slot_id",
        ],
        "ssd_chunk_scan": [
            "x",
            "dt",
            "A",
            "B",
            "C",
            "chunk_size",
            "cu_seqlens",
            "state_pool",
            "state_indices",
            "has_initial_state",
            "D",
            "z",
            "dt_bias",
            "dt_softplus",
        ],
    }
    for name, params in expected.items():
        fn = getattr(hk, name)
        got = list(inspect.signature(fn).parameters)
        assert got[: len(params)] == params, name
        ref = getattr(hk, name + "_ref") if hasattr(hk, name + "_ref") else None
        if ref is not None:  # the references take the same leading arguments
            assert list(inspect.signature(ref).parameters)[: len(params)] == params, name + "_ref"
    assert set(hk.__all__) <= set(dir(hk))
    for name in hk.__all__:
        assert callable(getattr(hk, name))
    with pytest.raises(AttributeError):
        hk.not_a_kernel  # noqa: B018


@pytest.mark.parametrize(
    "P,N,nbytes", [(64, 128, 4), (64, 128, 2), (64, 64, 4), (16, 16, 4), (24, 12, 2), (128, 256, 4)]
)
def test_state_update_launch_config(P, N, nbytes):
    cfg = state_update_launch_config(P, N, nbytes)
    bp, bn = cfg["BLOCK_P"], cfg["BLOCK_N"]
    assert bn >= N and bn & (bn - 1) == 0 and bp & (bp - 1) == 0
    assert bp * bn * nbytes <= 8192 or bp == 1  # an ~8 KiB state tile per program
    assert 1 <= cfg["num_warps"] <= 8


def test_state_update_launch_config_nemotron():
    assert state_update_launch_config(64, 128, 4) == {"BLOCK_P": 16, "BLOCK_N": 128, "num_warps": 4}
    assert state_update_launch_config(64, 128, 2) == {"BLOCK_P": 32, "BLOCK_N": 128, "num_warps": 8}


@pytest.mark.parametrize("on_gpu", [False, True])
def test_chunk_scan_launch_config(on_gpu):
    cfg = chunk_scan_launch_config(256, 64, 128, 128, 1, on_gpu)
    for launch in ("cb", "state", "scan"):  # tl.dot needs every tile dimension >= 16
        assert all(v >= 16 for k, v in cfg[launch].items() if k.startswith("BLOCK"))
    assert cfg["cumsum"]["BLOCK_Q"] == 256
    tiles = (64 // cfg["passing"]["BLOCK_P"]) * (128 // cfg["passing"]["BLOCK_N"])
    if on_gpu:  # one sequence still spreads over thousands of programs
        assert 128 * tiles >= 4096
    exact = chunk_scan_launch_config(256, 64, 128, 128, 1, on_gpu, exact_f32=True)
    for launch in ("cb", "state", "scan"):  # fp32 IEEE dots use 32-wide tiles (64 spills on sm_90)
        assert all(16 <= v <= 32 for k, v in exact[launch].items() if k.startswith("BLOCK"))
    small = chunk_scan_launch_config(8, 8, 8, 2, 1, on_gpu)
    assert small["scan"]["BLOCK_M"] == 16 and small["cb"]["BLOCK_K"] == 16


def test_chunk_metadata_is_per_sequence():
    meta = ssd_chunk_metadata([0, 5, 6, 19, 19, 40], 8)
    assert meta.chunk_start.tolist() == [0, 5, 6, 14, 19, 27, 35]
    assert meta.chunk_len.tolist() == [5, 1, 8, 5, 8, 8, 5]
    assert meta.cu_chunks.tolist() == [0, 1, 2, 4, 4, 7]
    with pytest.raises(ValueError):
        ssd_chunk_metadata([0, 5, 3], 8)
    with pytest.raises(ValueError):
        ssd_chunk_metadata([0, 5], 0)
