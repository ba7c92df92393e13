"""Time the hybrid-model kernels on a CUDA GPU at Nemotron-H-8B (and Qwen3-Next) shapes; write a JSON report.

    python benchmarks/kernels.py [--out FILE] [--quick]

Rows: decode state update (fp32 and bf16 state pools) and conv update at batch 4..256 (batch*heads 512 to
32768 at 128 heads); the Gated DeltaNet decode update at Qwen3-Next shapes (fp32 and bf16 pools, the same
batches) and the Mamba-1 decode update at Jamba-1.5-Mini shapes; the prefill SSD scan and the prefill conv
at 2K..16K tokens. Each row gives the time
(median of ``triton.testing.do_bench``, which clears L2 before every call), the modelled minimum bytes and
FLOPs (``hybridplan.kernels.bench``), the achieved bandwidth, its fraction of a measured device-to-device
copy, TFLOP/s and tokens/s. Without a CUDA GPU it prints one line and exits with status 2.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import json
import os
import platform
import re
import sys
from pathlib import Path

EXIT_NO_GPU = 2
NO_GPU_MESSAGE = "benchmarks/kernels.py: no CUDA GPU available; these kernel benchmarks need one (nothing was run)"


def _import_kernels():
    """``hybridplan.kernels`` when installed; else the ``kernels/`` folder of this checkout as a package."""
    try:
        import hybridplan.kernels as hk
        from hybridplan.kernels import bench
    except ImportError:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        import kernels as hk
        from kernels import bench
    return hk, bench


def _parse(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--out", type=Path, default=None, help="JSON report path (default: benchmarks/results/kernels-<gpu>.json)"
    )
    p.add_argument("--quick", action="store_true", help="fewer shapes and shorter timing (a smoke run)")
    p.add_argument("--copy-gib", type=float, default=4.0, help="size of the copy that sets the bandwidth ceiling")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = _parse(argv)
    try:
        import torch
    except ImportError:
        print(NO_GPU_MESSAGE, file=sys.stderr)
        return EXIT_NO_GPU
    if not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        print(NO_GPU_MESSAGE, file=sys.stderr)
        return EXIT_NO_GPU

    import triton

    hk, bench = _import_kernels()
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    suite = _Suite(torch, hk, bench, dev, quick=args.quick)
    copy_bw = bench.measure_copy_bandwidth(int(args.copy_gib * (1 << 30)))
    print(f"GPU {props.name} ({props.multi_processor_count} SMs); device-to-device copy: {copy_bw / 1e9:.1f} GB/s")
    rows = []

    def add(row):
        rows.append(row)
        print(bench.format_row(row), flush=True)

    batches = (4, 64, 256) if args.quick else bench.DECODE_BATCHES
    token_counts = (16384,) if args.quick else bench.PREFILL_TOKENS
    for state_dtype in (torch.float32, torch.bfloat16):
        for batch in batches:
            add(suite.state_update(batch, state_dtype, copy_bw))
    for state_dtype in (torch.float32, torch.bfloat16):
        for batch in batches:
            add(suite.gdn_update(batch, state_dtype, copy_bw))
    for state_dtype in (torch.float32, torch.bfloat16):
        for batch in batches:
            add(suite.mamba1_update(batch, state_dtype, copy_bw))
    for batch in batches:
        add(suite.conv_update(batch, copy_bw))
    for ntok in token_counts:
        for nseq in (1, 16):
            add(suite.chunk_scan(ntok, nseq, copy_bw))
            add(suite.conv_prefill(ntok, nseq, copy_bw))

    env = {
        "gpu": props.name,
        "sm_count": props.multi_processor_count,
        "gpu_memory_bytes": props.total_memory,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "quick": bool(args.quick),
    }
    report = bench.build_report(rows, copy_bw, env)
    for t in report["targets"]:
        value = "n/a" if t["value"] is None else f"{t['value']:.4g}"
        print(f"[{'met' if t['met'] else 'NOT met'}] {t['target']}: {value}")
    path = args.out
    if path is None:
        slug = re.sub(r"[^A-Za-z0-9]+", "-", props.name).strip("-").lower()
        path = Path(__file__).resolve().parent / "results" / f"kernels-{slug}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


class _Suite:
    """One benchmark per method: build inputs at Nemotron-H-8B shapes (Qwen3-Next for Gated DeltaNet, Jamba for
    Mamba-1) with ``hybridplan.kernels.inputs``, time the kernel, return the row.

    Activations are bf16 with fp32 A, D and dt_bias, as in the checkpoints; pools hold twice the batch's slots
    and the batch uses a random half of them, as a serving engine's pool would.
    """

    def __init__(self, torch, hk, bench, dev, quick: bool, act_dtype=None):
        self.torch, self.bench, self.dev = torch, bench, dev
        self.inputs = importlib.import_module(hk.__name__ + ".inputs")
        self.act = act_dtype or torch.bfloat16
        self.act_bytes = self.act.itemsize
        self.warm, self.rep = (10, 30) if quick else (25, 100)
        cfg = bench.NEMOTRON_H_8B
        self.H, self.P, self.N, self.G = cfg["nheads"], cfg["headdim"], cfg["dstate"], cfg["ngroups"]
        self.dim, self.K, self.Q = cfg["conv_dim"], cfg["conv_width"], cfg["chunk_size"]
        self.gen = torch.Generator(device=dev)
        self.gen.manual_seed(0)
        #: what every input builder takes besides the shapes
        self.draw = {"gen": self.gen, "dtype": self.act, "device": self.dev}

    def pool(self, shape, dtype, scale=0.5):
        return self.inputs.state_pool(shape, self.gen, dtype, self.dev, scale)

    def slots(self, batch):
        """A random half of a pool of 2 * batch slots."""
        return self.inputs.random_slots(2 * batch, batch, self.gen, self.dev)

    def packed(self, ntok, nseq):
        """``nseq`` sequences of equal length, and every other slot of a pool of 2 * nseq for them."""
        return [ntok // nseq] * nseq, self.torch.arange(nseq, dtype=self.torch.int32, device=self.dev) * 2

    def timed(self, call, pool):
        call(pool)  # compile outside the timing
        if self.dev.type == "cuda":
            self.torch.cuda.synchronize()
        return self.bench.time_cuda(lambda: call(pool), warmup_ms=self.warm, rep_ms=self.rep)

    def state_update(self, batch, state_dtype, copy_bw):
        H, P, N, G, bench = self.H, self.P, self.N, self.G, self.bench
        pool = self.pool((2 * batch, H, P, N), state_dtype)
        call = self.inputs.mamba2_decode(batch, H, P, N, G, indices=self.slots(batch), **self.draw)
        sec = self.timed(call, pool)
        shape = {
            "batch": batch,
            "nheads": H,
            "headdim": P,
            "dstate": N,
            "ngroups": G,
            "state_dtype": str(state_dtype).removeprefix("torch."),
        }
        nbytes = bench.state_update_bytes(batch, H, P, N, G, state_dtype.itemsize, self.act_bytes)
        return bench.make_row(
            "selective_state_update", shape, sec, nbytes, bench.state_update_flops(batch, H, P, N), copy_bw
        )

    def gdn_update(self, batch, state_dtype, copy_bw):
        cfg, bench = self.bench.QWEN3_NEXT, self.bench
        hv, hk, V, K = cfg["v_heads"], cfg["k_heads"], cfg["vdim"], cfg["kdim"]
        pool = self.pool((2 * batch, hv, V, K), state_dtype)
        call = self.inputs.gdn_decode(batch, hk, hv, K, V, indices=self.slots(batch), **self.draw)
        sec = self.timed(call, pool)
        shape = {
            "batch": batch,
            "v_heads": hv,
            "k_heads": hk,
            "vdim": V,
            "kdim": K,
            "state_dtype": str(state_dtype).removeprefix("torch."),
        }
        nbytes = bench.gdn_update_bytes(batch, hv, hk, V, K, state_dtype.itemsize, self.act_bytes)
        return bench.make_row(
            "gated_delta_rule_update", shape, sec, nbytes, bench.gdn_update_flops(batch, hv, V, K), copy_bw
        )

    def mamba1_update(self, batch, state_dtype, copy_bw):
        cfg, bench = self.bench.JAMBA_1_5_MINI, self.bench
        dim, N = cfg["dim"], cfg["dstate"]
        pool = self.pool((2 * batch, dim, N), state_dtype)
        call = self.inputs.mamba1_decode(batch, dim, N, indices=self.slots(batch), **self.draw)
        sec = self.timed(call, pool)
        shape = {"batch": batch, "dim": dim, "dstate": N, "state_dtype": str(state_dtype).removeprefix("torch.")}
        nbytes = bench.mamba1_update_bytes(batch, dim, N, state_dtype.itemsize, self.act_bytes)
        return bench.make_row(
            "mamba1_state_update", shape, sec, nbytes, bench.mamba1_update_flops(batch, dim, N), copy_bw
        )

    def conv_update(self, batch, copy_bw):
        dim, K, bench = self.dim, self.K, self.bench
        pool = self.pool((2 * batch, dim, K - 1), self.act, scale=1.0)
        call = self.inputs.conv_decode(batch, dim, K, indices=self.slots(batch), **self.draw)
        sec = self.timed(call, pool)
        shape = {"batch": batch, "dim": dim, "width": K, "state_dtype": str(self.act).removeprefix("torch.")}
        nbytes = bench.conv_update_bytes(batch, dim, K, self.act_bytes, self.act_bytes, self.act_bytes)
        return bench.make_row("causal_conv1d_update", shape, sec, nbytes, 2 * K * batch * dim, copy_bw)

    def chunk_scan(self, ntok, nseq, copy_bw):
        H, P, N, G, Q, bench = self.H, self.P, self.N, self.G, self.Q, self.bench
        lengths, slots = self.packed(ntok, nseq)
        pool = self.pool((2 * nseq, H, P, N), self.torch.float32)
        call = self.inputs.mamba2_prefill(lengths, H, P, N, G, Q, slots=slots, **self.draw)
        sec = self.timed(call, pool)
        shape = {
            "ntokens": ntok,
            "nseqs": nseq,
            "nheads": H,
            "headdim": P,
            "dstate": N,
            "ngroups": G,
            "chunk_size": Q,
            "state_dtype": "float32",
        }
        nbytes = bench.chunk_scan_bytes(ntok, nseq, H, P, N, G, io_bytes=self.act_bytes)
        return bench.make_row(
            "ssd_chunk_scan", shape, sec, nbytes, bench.chunk_scan_flops(lengths, Q, H, P, N, G), copy_bw, tokens=ntok
        )

    def conv_prefill(self, ntok, nseq, copy_bw):
        dim, K, bench = self.dim, self.K, self.bench
        lengths, slots = self.packed(ntok, nseq)
        pool = self.pool((2 * nseq, dim, K - 1), self.act, scale=1.0)
        call = self.inputs.conv_prefill(lengths, dim, K, slots=slots, **self.draw)
        sec = self.timed(call, pool)
        shape = {"ntokens": ntok, "nseqs": nseq, "dim": dim, "width": K}
        nbytes = bench.conv_prefill_bytes(ntok, nseq, dim, K, self.act_bytes, self.act_bytes, self.act_bytes)
        return bench.make_row("causal_conv1d_prefill", shape, sec, nbytes, 2 * K * ntok * dim, copy_bw, tokens=ntok)


if __name__ == "__main__":
    sys.exit(main())
