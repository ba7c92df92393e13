"""Compile every kernel ahead of time for sm_80, sm_89, sm_90, sm_100 and sm_120 on a machine without a GPU, and
print a JSON report with each kernel's registers, spills, shared memory and occupancy per arch.

Triton's NVIDIA backend (its LLVM and the ptxas shipped in the triton wheel) runs without a driver, so this
catches what the CPU interpreter cannot: code that does not compile for a GPU, register spills, shared memory
past an arch's limit, and whether the decode state tile is moved with 128-bit accesses. Launch configurations
are the wrappers' own (they depend on the shapes only, not on the arch), at Nemotron-H-8B shapes (H 128, P 64,
N 128, G 8, conv dim 10240, K 4, chunk 256), with bf16 activations and the state dtypes the engines use. Integer
strides are marked divisible by 16 and unit strides become constants, as Triton specialises them at run time
for contiguous tensors of these shapes.

Run without TRITON_INTERPRET (the test that calls it removes it): the kernels must be JIT functions.
    python tests/kernels/aot_compile.py [ARCH ...]      (default: 80 89 90 100 120)
Output: {"arches": {"90": [{"name", "ok", "error", "regs", "stack", "shared", "num_warps", "v4_loads",
"v4_stores"}, ...], ...}, "cuobjdump": bool}
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile

os.environ.pop("TRITON_INTERPRET", None)

import triton  # noqa: E402
from arch_limits import ARCHES  # noqa: E402
from hybridplan.kernels.conv1d import prefill as conv_prefill  # noqa: E402
from hybridplan.kernels.conv1d import update as conv_update  # noqa: E402
from hybridplan.kernels.gdn import fused_recurrent as gdn_update  # noqa: E402
from hybridplan.kernels.mamba1 import state_update as mamba1_update  # noqa: E402
from hybridplan.kernels.ssd import chunk, state_update  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

# Triton turns an integer argument equal to 1 into a compile-time constant: unit strides of contiguous tensors
UNIT_STRIDES = {"dt_h", "x_d", "y_d", "w_k", "s_k"}
NOT_DIVISIBLE = {"pad_slot_id"}  # -1; every other integer is a multiple of 16 at these shapes
CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")


def _resources(cubin: bytes):
    if not os.path.exists(CUOBJDUMP):
        return None, None
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
    try:
        out = subprocess.run([CUOBJDUMP, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    finally:
        os.unlink(f.name)
    m = re.search(r"REG:(\d+) STACK:(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)


def compile_one(target, name, jitfn, pointer_types, constexprs, num_warps, num_stages=3):
    args = jitfn.arg_names
    constexprs = {**{a: 1 for a in args if a in UNIT_STRIDES}, **constexprs}
    sig = {a: "constexpr" if a in constexprs else pointer_types.get(a, "i32") for a in args}
    attrs = {
        (i,): [["tt.divisibility", 16]]
        for i, a in enumerate(args)
        if sig[a].startswith("*") or (sig[a] == "i32" and a not in NOT_DIVISIBLE)
    }
    consts = {(args.index(k),): v for k, v in constexprs.items()}
    row = {
        "name": name,
        "ok": False,
        "error": None,
        "regs": None,
        "stack": None,
        "shared": None,
        "num_warps": num_warps,
        "v4_loads": None,
        "v4_stores": None,
    }
    try:
        k = triton.compile(
            ASTSource(jitfn, sig, consts, attrs),
            target=target,
            options={"num_warps": num_warps, "num_stages": num_stages},
        )
    except Exception as exc:  # report, do not stop: every kernel gets its line
        row["error"] = f"{type(exc).__name__}: {str(exc)[:2000]}"
        return row
    ptx = k.asm["ptx"]
    row.update(
        ok=True, shared=k.metadata.shared, v4_loads=ptx.count("ld.global.v4"), v4_stores=ptx.count("st.global.v4")
    )
    row["regs"], row["stack"] = _resources(k.asm["cubin"])
    return row


def kernels(arch: int) -> list[dict]:
    """Every launch the wrappers make, compiled for one arch."""
    target = GPUTarget("cuda", arch, 32)
    H, P, N, G, Q, DIM, K = 128, 64, 128, 8, 256, 10240, 4
    rows = []
    p = lambda t: "*" + t  # noqa: E731
    for sdt, nbytes in (("fp32", 4), ("bf16", 2), ("fp16", 2)):
        cfg = state_update.state_update_launch_config(P, N, nbytes)
        rows.append(
            compile_one(
                target,
                f"selective_state_update state={sdt}",
                state_update._state_update_kernel,
                {
                    "state_ptr": p(sdt),
                    "x_ptr": p("bf16"),
                    "dt_ptr": p("bf16"),
                    "A_ptr": p("fp32"),
                    "B_ptr": p("bf16"),
                    "C_ptr": p("bf16"),
                    "D_ptr": p("fp32"),
                    "z_ptr": p("bf16"),
                    "dt_bias_ptr": p("fp32"),
                    "idx_ptr": p("i32"),
                    "y_ptr": p("bf16"),
                },
                dict(
                    P=P,
                    N=N,
                    HEADS_PER_GROUP=H // G,
                    HAS_IDX=True,
                    HAS_D=True,
                    HAS_Z=True,
                    HAS_DT_BIAS=True,
                    DT_SOFTPLUS=True,
                    BLOCK_P=cfg["BLOCK_P"],
                    BLOCK_N=cfg["BLOCK_N"],
                ),
                cfg["num_warps"],
            )
        )
    for sdt, nbytes in (("fp32", 4), ("bf16", 2)):  # Qwen3-Next: Hv 32, Hk 16, V = K = 128
        cfg = gdn_update.gdn_update_launch_config(128, 128, nbytes)
        rows.append(
            compile_one(
                target,
                f"gated_delta_rule_update state={sdt}",
                gdn_update._gdn_update_kernel,
                {
                    "state_ptr": p(sdt),
                    "q_ptr": p("bf16"),
                    "k_ptr": p("bf16"),
                    "v_ptr": p("bf16"),
                    "g_ptr": p("fp32"),
                    "beta_ptr": p("fp32"),
                    "idx_ptr": p("i32"),
                    "o_ptr": p("bf16"),
                    "scale": "fp32",
                    "eps": "fp32",
                },
                dict(
                    V=128,
                    K=128,
                    HEADS_PER_KEY=2,
                    HAS_IDX=True,
                    L2NORM=True,
                    BLOCK_V=cfg["BLOCK_V"],
                    BLOCK_K=cfg["BLOCK_K"],
                ),
                cfg["num_warps"],
            )
        )
    for sdt, nbytes in (("fp32", 4), ("bf16", 2)):  # Jamba-1.5-Mini: I 8192, N 16
        cfg = mamba1_update.mamba1_update_launch_config(8192, 16, nbytes)
        rows.append(
            compile_one(
                target,
                f"mamba1_state_update state={sdt}",
                mamba1_update._mamba1_update_kernel,
                {
                    "state_ptr": p(sdt),
                    "x_ptr": p("bf16"),
                    "dt_ptr": p("bf16"),
                    "A_ptr": p("fp32"),
                    "B_ptr": p("bf16"),
                    "C_ptr": p("bf16"),
                    "D_ptr": p("fp32"),
                    "z_ptr": p("bf16"),
                    "dt_bias_ptr": p("fp32"),
                    "idx_ptr": p("i32"),
                    "y_ptr": p("bf16"),
                },
                dict(
                    DIM=8192,
                    N=16,
                    HAS_IDX=True,
                    HAS_D=True,
                    HAS_Z=True,
                    HAS_DT_BIAS=True,
                    DT_SOFTPLUS=True,
                    BLOCK_I=cfg["BLOCK_I"],
                    BLOCK_N=cfg["BLOCK_N"],
                ),
                cfg["num_warps"],
            )
        )
    cfg = conv_update.conv_update_launch_config(DIM)
    rows.append(
        compile_one(
            target,
            "causal_conv1d_update",
            conv_update._conv_update_kernel,
            {
                "x_ptr": p("bf16"),
                "state_ptr": p("bf16"),
                "w_ptr": p("bf16"),
                "bias_ptr": p("bf16"),
                "idx_ptr": p("i32"),
                "y_ptr": p("bf16"),
            },
            dict(KW=K, HAS_IDX=True, HAS_BIAS=True, SILU=True, BLOCK_D=cfg["BLOCK_D"]),
            cfg["num_warps"],
        )
    )
    meta_block_t = 16
    cfg = conv_prefill.conv_prefill_launch_config(DIM, meta_block_t)
    rows.append(
        compile_one(
            target,
            "causal_conv1d_prefill",
            conv_prefill._conv_prefill_kernel,
            {
                "x_ptr": p("bf16"),
                "w_ptr": p("bf16"),
                "bias_ptr": p("bf16"),
                "state_ptr": p("bf16"),
                "idx_ptr": p("i32"),
                "init_ptr": p("i1"),
                "y_ptr": p("bf16"),
                "cu_ptr": p("i32"),
                "blk_seq_ptr": p("i32"),
                "blk_pos_ptr": p("i32"),
            },
            dict(KW=K, HAS_BIAS=True, HAS_INIT=True, SILU=True, BLOCK_T=meta_block_t, BLOCK_D=cfg["BLOCK_D"]),
            cfg["num_warps"],
        )
    )
    rows.append(
        compile_one(
            target,
            "causal_conv1d_prefill window write-back",
            conv_prefill._conv_window_writeback_kernel,
            {"x_ptr": p("bf16"), "state_ptr": p("bf16"), "idx_ptr": p("i32"), "init_ptr": p("i1"), "cu_ptr": p("i32")},
            dict(KW=K, HAS_INIT=True, BLOCK_D=cfg["WRITEBACK_BLOCK_D"]),
            cfg["writeback_num_warps"],
        )
    )
    for io in ("bf16", "fp32"):
        exact = io == "fp32"
        cfg = chunk.chunk_scan_launch_config(Q, P, N, H, 1, True, exact)
        prev = io
        c = cfg["cumsum"]
        rows.append(
            compile_one(
                target,
                f"ssd cumsum {io}",
                chunk._chunk_cumsum_kernel,
                {
                    "dt_ptr": p(io),
                    "A_ptr": p("fp32"),
                    "dt_bias_ptr": p("fp32"),
                    "chunk_start_ptr": p("i32"),
                    "chunk_len_ptr": p("i32"),
                    "dt_out_ptr": p("fp32"),
                    "cum_ptr": p("fp32"),
                },
                dict(H=H, Q=Q, HAS_DT_BIAS=True, DT_SOFTPLUS=True, BLOCK_Q=c["BLOCK_Q"], BLOCK_H=c["BLOCK_H"]),
                c["num_warps"],
            )
        )
        c = cfg["cb"]
        rows.append(
            compile_one(
                target,
                f"ssd C.B^T {io}",
                chunk._chunk_cb_kernel,
                {
                    "C_ptr": p(io),
                    "B_ptr": p(io),
                    "cb_ptr": p("fp32"),
                    "chunk_start_ptr": p("i32"),
                    "chunk_len_ptr": p("i32"),
                },
                dict(G=G, N=N, Q=Q, EXACT_F32=exact, BLOCK_M=c["BLOCK_M"], BLOCK_S=c["BLOCK_S"], BLOCK_K=c["BLOCK_K"]),
                c["num_warps"],
                c["num_stages"],
            )
        )
        c = cfg["state"]
        rows.append(
            compile_one(
                target,
                f"ssd chunk state {io}",
                chunk._chunk_state_kernel,
                {
                    "x_ptr": p(io),
                    "B_ptr": p(io),
                    "dt_ptr": p("fp32"),
                    "cum_ptr": p("fp32"),
                    "states_ptr": p("fp32"),
                    "chunk_start_ptr": p("i32"),
                    "chunk_len_ptr": p("i32"),
                },
                dict(
                    H=H,
                    P=P,
                    N=N,
                    Q=Q,
                    HEADS_PER_GROUP=H // G,
                    EXACT_F32=exact,
                    BLOCK_P=c["BLOCK_P"],
                    BLOCK_N=c["BLOCK_N"],
                    BLOCK_L=c["BLOCK_L"],
                ),
                c["num_warps"],
                c["num_stages"],
            )
        )
        c = cfg["passing"]
        rows.append(
            compile_one(
                target,
                f"ssd state passing {io}",
                chunk._state_passing_kernel,
                {
                    "states_ptr": p("fp32"),
                    "prev_ptr": p(prev),
                    "cum_ptr": p("fp32"),
                    "pool_ptr": p("fp32"),
                    "idx_ptr": p("i32"),
                    "init_ptr": p("i1"),
                    "cu_chunks_ptr": p("i32"),
                },
                dict(H=H, P=P, N=N, Q=Q, HAS_INIT=True, BLOCK_P=c["BLOCK_P"], BLOCK_N=c["BLOCK_N"]),
                c["num_warps"],
            )
        )
        c = cfg["scan"]
        rows.append(
            compile_one(
                target,
                f"ssd chunk scan {io}",
                chunk._chunk_scan_kernel,
                {
                    "x_ptr": p(io),
                    "z_ptr": p(io),
                    "C_ptr": p(io),
                    "D_ptr": p("fp32"),
                    "y_ptr": p(io),
                    "cb_ptr": p("fp32"),
                    "dt_ptr": p("fp32"),
                    "cum_ptr": p("fp32"),
                    "prev_ptr": p(prev),
                    "chunk_start_ptr": p("i32"),
                    "chunk_len_ptr": p("i32"),
                },
                dict(
                    H=H,
                    G=G,
                    P=P,
                    N=N,
                    Q=Q,
                    HEADS_PER_GROUP=H // G,
                    HAS_D=True,
                    HAS_Z=True,
                    EXACT_F32=exact,
                    BLOCK_M=c["BLOCK_M"],
                    BLOCK_P=c["BLOCK_P"],
                    BLOCK_S=c["BLOCK_S"],
                    BLOCK_K=c["BLOCK_K"],
                ),
                c["num_warps"],
                c["num_stages"],
            )
        )
    return rows


def main() -> None:
    arches = [int(a) for a in sys.argv[1:]] or list(ARCHES)
    json.dump({"arches": {str(a): kernels(a) for a in arches}, "cuobjdump": os.path.exists(CUOBJDUMP)}, sys.stdout)


if __name__ == "__main__":
    main()
