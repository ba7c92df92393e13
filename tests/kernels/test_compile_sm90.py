"""Every kernel compiles for Hopper (sm_90) at the wrappers' Nemotron-H-8B launch configurations, without a GPU.

The CPU interpreter executes the kernels as Python, so it cannot see what only the GPU compiler rejects
(layouts, dot shapes, types), nor register spills or unvectorised memory accesses. Triton's NVIDIA backend
runs without a driver; ``sm90_compile.py`` drives it in a subprocess (the kernels must be JIT functions,
which they are not once TRITON_INTERPRET is set in this process).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("sm90_compile.py")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    env["TRITON_CACHE_DIR"] = str(tmp_path_factory.mktemp("triton-cache"))  # compile for real, not from a cache
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"sm90_compile.py failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout)


def test_every_kernel_compiles(report):
    failed = {r["name"]: r["error"] for r in report["kernels"] if not r["ok"]}
    assert failed == {}
    assert len(report["kernels"]) == 20


def test_no_register_spills(report):
    if not report["cuobjdump"]:
        pytest.skip("the triton wheel ships no cuobjdump here: register counts unavailable")
    spills = {r["name"]: (r["regs"], r["stack"]) for r in report["kernels"] if r["stack"]}
    assert spills == {}
    assert all(r["regs"] is not None and r["regs"] <= 255 for r in report["kernels"])


def test_decode_state_tile_uses_128_bit_accesses(report):
    """The decode kernel is bandwidth-bound: its state tile (16 x 128 fp32 per program, 4 warps) must move as
    16-byte vectors, 4 loads and 4 stores per thread for fp32 (16 elements each), 2 and 2 for 16-bit states."""
    rows = {r["name"]: r for r in report["kernels"]}
    fp32 = rows["selective_state_update state=fp32"]
    assert fp32["v4_loads"] >= 4 and fp32["v4_stores"] >= 4
    for name in ("selective_state_update state=bf16", "selective_state_update state=fp16"):
        assert rows[name]["v4_loads"] >= 2 and rows[name]["v4_stores"] >= 2
    # the Gated DeltaNet decode tile has the same shape and budget (16 x 128 fp32, 32 x 128 bf16)
    gdn32, gdn16 = rows["gated_delta_rule_update state=fp32"], rows["gated_delta_rule_update state=bf16"]
    assert gdn32["v4_loads"] >= 4 and gdn32["v4_stores"] >= 4
    assert gdn16["v4_loads"] >= 2 and gdn16["v4_stores"] >= 2
    # Mamba-1: 128 x 16 fp32 (and 256 x 16 bf16) tiles of whole 16-column rows
    m32, m16 = rows["mamba1_state_update state=fp32"], rows["mamba1_state_update state=bf16"]
    assert m32["v4_loads"] >= 4 and m32["v4_stores"] >= 4
    assert m16["v4_loads"] >= 2 and m16["v4_stores"] >= 2
