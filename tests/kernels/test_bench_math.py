"""The benchmark arithmetic (hybridplan.kernels.bench) and the benchmark script's no-GPU exit, on the CPU."""

import importlib.util
import json
import math
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
from hybridplan.kernels import bench

pytestmark = pytest.mark.kernels

REPO = Path(__file__).resolve().parents[2]
NEMO = bench.NEMOTRON_H_8B


def test_dtype_bytes():
    torch = pytest.importorskip("torch")

    assert [bench.dtype_bytes(d) for d in ("fp32", "bf16", "float16", "fp8", "float64")] == [4, 2, 2, 1, 8]
    assert bench.dtype_bytes(torch.bfloat16) == 2 and bench.dtype_bytes(torch.float32) == 4
    with pytest.raises(ValueError):
        bench.dtype_bytes("complex32")


def test_nemotron_shapes():
    assert (NEMO["nheads"], NEMO["headdim"], NEMO["dstate"], NEMO["ngroups"]) == (128, 64, 128, 8)
    assert NEMO["conv_dim"] == 10240 and NEMO["conv_width"] == 4 and NEMO["chunk_size"] == 256
    assert [b * NEMO["nheads"] for b in bench.DECODE_BATCHES] == [512, 1024, 2048, 4096, 8192, 16384, 32768]


def test_state_update_bytes_by_hand():
    # batch 2, H 4, P 3, N 5, G 2, fp32 state, bf16 activations, z/D/dt_bias on
    state = 2 * (2 * 4 * 3 * 5) * 4  # read + write
    act = 2 * 4 * 3 * 2 * 3  # x, z, y
    bc = 2 * 2 * 2 * 5 * 2
    dt = 2 * 4 * 2
    params = 4 * 4 * 3  # A, D, dt_bias in fp32
    idx = 2 * 4
    assert bench.state_update_bytes(2, 4, 3, 5, 2, 4, 2) == state + act + bc + dt + params + idx == 1256
    # no z, D, dt_bias: two fewer parameter vectors and one fewer activation
    assert bench.state_update_bytes(2, 4, 3, 5, 2, 4, 2, has_z=False, has_D=False, has_dt_bias=False) == 1256 - 48 - 32


def test_state_update_bytes_nemotron():
    """At batch*heads 8192 the fp32 state moves 2 * 8192 * 64 * 128 * 4 = 512 MiB: over 98% of the total."""
    total = bench.state_update_bytes(64, 128, 64, 128, 8, 4, 2)
    state = 2 * 64 * 128 * 64 * 128 * 4
    assert state == 512 * 2**20
    assert 0.98 < state / total < 1
    # halving the state dtype roughly halves the traffic
    assert 0.5 < bench.state_update_bytes(64, 128, 64, 128, 8, 2, 2) / total < 0.52
    assert bench.state_update_flops(64, 128, 64, 128) == 5 * 64 * 128 * 64 * 128


def test_gdn_update_bytes_by_hand():
    # batch 2, Hv 4, Hk 2, V 3, K 5, fp32 state, bf16 q/k/v/o, fp32 g and beta
    state = 2 * (2 * 4 * 3 * 5) * 4  # read + write
    qk = 2 * (2 * 2 * 5) * 2
    vo = 2 * (2 * 4 * 3) * 2
    gates = 2 * (2 * 4) * 4
    idx = 2 * 4
    assert bench.gdn_update_bytes(2, 4, 2, 3, 5, 4, 2) == state + qk + vo + gates + idx == 1208
    # Qwen3-Next at TP 1 (Hv 32, Hk 16, V = K = 128), 256 sequences: the fp32 state is 2 * 256 * 32 * 128 * 128 * 4
    # = 1 GiB of the traffic, over 99 %
    total = bench.gdn_update_bytes(256, 32, 16, 128, 128, 4, 2)
    assert 0.99 < 2**30 / total < 1
    assert bench.gdn_update_flops(2, 4, 3, 5) == 7 * 2 * 4 * 3 * 5


def test_mamba1_update_bytes_by_hand():
    # batch 2, I 3, N 5, fp32 state, bf16 x/dt/z/y and B/C, fp32 A (3 x 5), D and dt_bias
    state = 2 * (2 * 3 * 5) * 4
    act = 4 * 2 * 3 * 2 + 2 * 2 * 5 * 2
    params = (3 * 5 + 2 * 3) * 4
    idx = 2 * 4
    assert bench.mamba1_update_bytes(2, 3, 5, 4, 2) == state + act + params + idx == 420
    assert bench.mamba1_update_flops(2, 3, 5) == 6 * 2 * 3 * 5


def test_conv_bytes_by_hand():
    # batch 3, dim 10, K 4, bf16: windows 2*3*10*3*2, x+y 2*3*10*2, weights+bias 10*5*2, indices 3*4
    assert bench.conv_update_bytes(3, 10, 4) == 360 + 120 + 100 + 12
    assert bench.conv_update_bytes(3, 10, 4, has_bias=False) == 592 - 20
    # prefill: x+y 2*7*10*2, windows read+write 2*10*3*2*2, weights 100, cu_seqlens (3 ints) + 2 indices
    assert bench.conv_prefill_bytes(7, 2, 10, 4) == 280 + 240 + 100 + 12 + 8
    assert bench.conv_prefill_bytes(7, 2, 10, 4, initial_states=False) == 640 - 120
    with pytest.raises(ValueError):
        bench.conv_update_bytes(1, 8, 1)


def test_chunk_scan_bytes():
    # T 10, 2 seqs, H 2, P 3, N 4, G 1, bf16 io, fp32 states
    act = 10 * 2 * 3 * 2 * 3
    bc = 2 * 10 * 1 * 4 * 2
    dt = 10 * 2 * 2
    states = 2 * 2 * 3 * 4 * 4 * 2
    params = 3 * 2 * 4
    ints = (2 * 2 + 1) * 4
    assert bench.chunk_scan_bytes(10, 2, 2, 3, 4, 1) == act + bc + dt + states + params + ints
    # per token at Nemotron shapes (16K tokens, one sequence): x, z, y 48 KiB + B, C 4 KiB + dt 256 B
    per_token = bench.chunk_scan_bytes(16384, 1, 128, 64, 128, 8) / 16384
    assert 53504 < per_token < 53504 + 600
    no_z = bench.chunk_scan_bytes(16384, 1, 128, 64, 128, 8, has_z=False) / 16384
    assert round(per_token - no_z) == 16384


def test_chunk_lengths():
    assert bench.chunk_lengths([0, 5, 256, 257, 600], 256) == [5, 256, 256, 1, 256, 256, 88]
    assert bench.chunk_lengths([], 8) == []
    with pytest.raises(ValueError):
        bench.chunk_lengths([3], 0)


def _flops_by_enumeration(seqlens, Q, H, P, N, G):
    """Count the multiply-adds one by one (x2), chunk by chunk: an independent check of the closed form."""
    total = 0
    for L in bench.chunk_lengths(seqlens, Q):
        pairs = sum(1 for row in range(L) for col in range(L) if col <= row)
        total += 2 * G * pairs * N  # C_l . B_s for s <= l
        total += 2 * H * L * P * N  # chunk state: sum over positions of x (outer) B
        total += 2 * H * L * P * N  # C_l . S_in for every output
        total += 2 * H * pairs * P  # (C B^T o L)(dt' x)
        total += 2 * H * P * N  # state passing
    return total


@pytest.mark.parametrize("seqlens,Q", [([1], 4), ([5, 9], 4), ([17, 0, 3], 8), ([40], 16)])
def test_chunk_scan_flops_matches_enumeration(seqlens, Q):
    args = (Q, 3, 2, 5, 1)
    assert bench.chunk_scan_flops(seqlens, *args) == _flops_by_enumeration(seqlens, *args)


def test_chunk_scan_flops_nemotron_per_token():
    """~6.6 MFLOP per token at Nemotron-H-8B shapes with full 256-token chunks (2.4e7 tokens/s ~ 158 TFLOP/s)."""
    per_token = bench.chunk_scan_flops([16384], 256, 128, 64, 128, 8) / 16384
    assert per_token == pytest.approx(6_571_008, rel=1e-12)
    # a tiny hand example: one chunk of 2 tokens, H = P = N = G = 1: 6 + 8 + 6 + 2
    assert bench.chunk_scan_flops([2], 4, 1, 1, 1, 1) == 22


def test_rates_and_rows():
    assert bench.bandwidth(4e12, 2.0) == 2e12
    assert bench.tflops(3e12, 0.5) == 6.0
    with pytest.raises(ValueError):
        bench.bandwidth(1, 0)
    row = bench.make_row(
        "selective_state_update",
        {"batch": 64, "nheads": 128, "state_dtype": "float32"},
        seconds=125e-6,
        nbytes=500_000_000,
        flops=250_000_000,
        copy_bandwidth=4.3e12,
    )
    assert row["time_us"] == pytest.approx(125.0)
    assert row["gb_per_s"] == pytest.approx(4000.0)
    assert row["frac_of_copy"] == pytest.approx(4.0e12 / 4.3e12)
    assert row["tflop_per_s"] == pytest.approx(2.0)
    assert row["tokens_per_s"] is None
    line = bench.format_row(row)
    assert "\n" not in line and "selective_state_update" in line and "93.0% of copy" in line
    scan = bench.make_row("ssd_chunk_scan", {"ntokens": 16384}, 0.5e-3, 1, 1, None, tokens=16384)
    assert scan["tokens_per_s"] == pytest.approx(16384 / 0.5e-3) and scan["frac_of_copy"] is None


def _rows(decode_gbps, scan_seconds):
    rows = [
        bench.make_row(
            "selective_state_update", {"batch": b, "nheads": 128, "state_dtype": "float32"}, 1e-3, int(g * 1e6)
        )
        for b, g in zip((32, 64, 128), decode_gbps)
    ]
    rows.append(
        bench.make_row("selective_state_update", {"batch": 64, "nheads": 128, "state_dtype": "bfloat16"}, 1e-3, 1)
    )  # bf16 state: not part of the fp32 target
    rows.append(bench.make_row("ssd_chunk_scan", {"ntokens": 16384, "nseqs": 1}, scan_seconds, 1, tokens=16384))
    return rows


def test_target_checks():
    copy = 4.3e12
    ok = bench.target_checks(_rows([3000, 3900, 4000], 16384 / 2.5e7), copy)
    assert [t["met"] for t in ok] == [True, True]
    assert ok[0]["value"] == pytest.approx(3.9e12 / copy)  # the worst row at batch*heads >= 8192 (batch 32 is below)
    bad = bench.target_checks(_rows([4000, 3800, 4000], 16384 / 2.0e7), copy)
    assert [t["met"] for t in bad] == [False, False]
    missing = bench.target_checks([], copy)
    assert [t["met"] for t in missing] == [False, False] and missing[0]["value"] is None


def test_build_report_is_json():
    env = {"gpu": "Test GPU", "torch": "x", "triton": "y"}
    report = bench.build_report(_rows([3000, 3900, 4000], 1e-3), 4.3e12, env)
    text = json.dumps(report)
    back = json.loads(text)
    assert back["gpu"] == "Test GPU" and back["copy_bandwidth_gb_per_s"] == pytest.approx(4300.0)
    assert len(back["rows"]) == 5 and len(back["targets"]) == 2
    with pytest.raises(ValueError):
        bench.build_report([], math.nan, env)


def test_bench_module_needs_neither_torch_nor_triton():
    code = "import sys, hybridplan.kernels.bench; assert 'torch' not in sys.modules and 'triton' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd="/")


def test_script_exits_2_without_gpu(on_gpu):
    if on_gpu:
        pytest.skip("a CUDA GPU is present: the script would run the benchmarks")
    env = dict(os.environ)
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "kernels.py")], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 2
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert len(lines) == 1 and "no CUDA GPU" in lines[0]


def test_copy_bandwidth_needs_gpu(on_gpu):
    pytest.importorskip("torch")
    if on_gpu:
        assert bench.measure_copy_bandwidth(256 << 20) > 1e11
    else:
        with pytest.raises(RuntimeError):
            bench.measure_copy_bandwidth(1 << 20)


def test_benchmark_suite_plumbing_on_tiny_shapes(device):
    """The script's per-kernel benchmarks, run at tiny shapes with a wall-clock timer in place of do_bench:
    every wrapper call, row and the JSON report are exercised without a GPU (the times mean nothing)."""
    import hybridplan.kernels as hk

    torch = pytest.importorskip("torch")

    spec = importlib.util.spec_from_file_location("kernels_benchmark_script", REPO / "benchmarks" / "kernels.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)

    def wall_clock(fn, warmup_ms=0, rep_ms=0):
        t0 = time.perf_counter()
        fn()
        return max(time.perf_counter() - t0, 1e-9)

    tiny = types.SimpleNamespace(**{k: getattr(bench, k) for k in bench.__all__})
    tiny.NEMOTRON_H_8B = {
        "nheads": 2,
        "headdim": 8,
        "dstate": 8,
        "ngroups": 1,
        "conv_dim": 16,
        "conv_width": 4,
        "chunk_size": 8,
    }
    tiny.QWEN3_NEXT = {"v_heads": 4, "k_heads": 2, "vdim": 8, "kdim": 8}
    tiny.JAMBA_1_5_MINI = {"dim": 16, "dstate": 4}
    tiny.time_cuda = wall_clock
    suite = script._Suite(torch, hk, tiny, device, quick=True, act_dtype=torch.float32)
    rows = [
        suite.state_update(2, torch.float32, 1e9),
        suite.state_update(2, torch.float16, 1e9),
        suite.conv_update(2, 1e9),
        suite.chunk_scan(16, 2, 1e9),
        suite.conv_prefill(16, 2, 1e9),
    ]
    assert [r["kernel"] for r in rows] == ["selective_state_update"] * 2 + [
        "causal_conv1d_update",
        "ssd_chunk_scan",
        "causal_conv1d_prefill",
    ]
    assert rows[0]["bytes"] == bench.state_update_bytes(2, 2, 8, 8, 1, 4, 4)
    assert rows[3]["flops"] == bench.chunk_scan_flops([8, 8], 8, 2, 8, 8, 1) and rows[3]["tokens_per_s"] > 0
    gdn = suite.gdn_update(2, torch.float32, 1e9)
    assert gdn["kernel"] == "gated_delta_rule_update" and gdn["bytes"] == bench.gdn_update_bytes(2, 4, 2, 8, 8, 4, 4)
    m1 = suite.mamba1_update(2, torch.float32, 1e9)
    assert m1["kernel"] == "mamba1_state_update" and m1["bytes"] == bench.mamba1_update_bytes(2, 16, 4, 4, 4)
    json.dumps(bench.build_report(rows + [gdn, m1], 1e9, {"gpu": "none"}))
