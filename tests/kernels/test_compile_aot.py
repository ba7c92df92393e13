"""Every kernel compiles ahead of time for sm_80, sm_89, sm_90, sm_100 and sm_120 at the wrappers' Nemotron-H-8B
launch configurations, without a GPU: no register spills, shared memory within each arch's limit, and the
occupancy each kernel gets per arch is the one docs/profile.md states.

The CPU interpreter executes the kernels as Python, so it cannot see what only the GPU compiler rejects
(layouts, dot shapes, types), nor register spills or unvectorised memory accesses. Triton's NVIDIA backend
runs without a driver; ``aot_compile.py`` drives it in a subprocess (the kernels must be JIT functions,
which they are not once TRITON_INTERPRET is set in this process).
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.kernels

pytest.importorskip("torch")  # aot_compile.py imports the kernels, which import it; the test environment has it

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from arch_limits import ARCHES, LIMITS, RESERVED_SHARED, occupancy  # noqa: E402

SCRIPT = HERE / "aot_compile.py"
PROFILE_MD = HERE.parents[1] / "docs" / "profile.md"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    env["TRITON_CACHE_DIR"] = str(tmp_path_factory.mktemp("triton-cache"))  # compile for real, not from a cache
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, ARCHES)], capture_output=True, text=True, env=env, timeout=900
    )
    if proc.returncode != 0:
        pytest.fail(f"aot_compile.py failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout)


@pytest.mark.parametrize("arch", ARCHES)
def test_every_kernel_compiles(report, arch):
    rows = report["arches"][str(arch)]
    failed = {r["name"]: r["error"] for r in rows if not r["ok"]}
    assert failed == {} and len(rows) == 20


@pytest.mark.parametrize("arch", ARCHES)
def test_no_register_spills(report, arch):
    assert report["cuobjdump"], "the triton wheel ships cuobjdump (triton/backends/nvidia/bin): register counts"
    rows = report["arches"][str(arch)]
    spills = {r["name"]: (r["regs"], r["stack"]) for r in rows if r["stack"]}
    assert spills == {}
    assert all(r["regs"] is not None and r["regs"] <= 255 for r in rows)


@pytest.mark.parametrize("arch", ARCHES)
def test_shared_memory_within_the_arch(report, arch):
    # a block may opt into the multiprocessor's shared memory less the 1 KiB the driver reserves for it
    optin = LIMITS[arch][0] - RESERVED_SHARED
    over = {r["name"]: r["shared"] for r in report["arches"][str(arch)] if r["shared"] > optin}
    assert over == {}


@pytest.mark.parametrize("arch", ARCHES)
def test_decode_state_tile_uses_128_bit_accesses(report, arch):
    """The decode kernel is bandwidth-bound: its state tile (16 x 128 fp32 per program, 4 warps) must move as
    16-byte vectors, 4 loads and 4 stores per thread for fp32 (16 elements each), 2 and 2 for 16-bit states."""
    rows = {r["name"]: r for r in report["arches"][str(arch)]}
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


def occupancy_table(report) -> str:
    """docs/profile.md's table: per kernel, registers and resident blocks a multiprocessor holds, per arch."""
    names = [r["name"] for r in report["arches"][str(ARCHES[0])]]
    head = "| kernel | warps | " + " | ".join(f"sm_{a}" for a in ARCHES) + " |"
    lines = [head, "|" + "---|" * (len(ARCHES) + 2)]
    for i, name in enumerate(names):
        cells = []
        for a in ARCHES:
            row = report["arches"][str(a)][i]
            blocks, bound = occupancy(row, a)
            cells.append(f"{row['regs']} regs, {row['shared'] // 1024} KiB: {blocks} ({bound})")
        lines.append(f"| {name} | {report['arches'][str(ARCHES[0])][i]['num_warps']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def test_occupancy_per_arch_is_the_one_docs_profile_md_states(report):
    # the table is the compiler's own figures turned into resident blocks per multiprocessor (aot_compile.py
    # ``occupancy``): regenerate it with `python tests/kernels/test_compile_aot.py` when a kernel changes
    doc = PROFILE_MD.read_text()
    m = re.search(r"<!-- occupancy -->\n(.*?)\n<!-- /occupancy -->", doc, re.S)
    assert m, "docs/profile.md lacks its occupancy table"
    assert m.group(1).strip() == occupancy_table(report)


if __name__ == "__main__":  # print the table for docs/profile.md
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    out = subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, ARCHES)], capture_output=True, text=True, env=env, check=True
    ).stdout
    print(occupancy_table(json.loads(out)))
