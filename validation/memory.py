"""vLLM's "Available KV cache memory" in real start-up logs against hybridplan's estimate of what comes off the
GPU besides the weights (hybridplan/engines/vllm/memory.py), and "Model loading took" against the weights
counted from the config where the checkpoint is a shipped spec's.

Each log under tests/data/memlogs (and the vLLM logs of tests/data/logs that print both lines) is read for its
release, GPU memory utilization, --max-num-seqs, TP, "Model loading took" and "Available KV cache memory"; the
GPU's total is the log's own "Free memory on device (free/total GiB)" where it prints one, else the GPU named
in the file's header, from hybridplan/gpus.py. The prediction is

    total × utilization − weights (as logged) − activation − non-torch − CUDA graphs (from 0.20.0)

with the three estimated terms of hybridplan; the weights are taken as logged, so the comparison measures the
estimates alone. Where the log prints a term by itself (vLLM's "Estimated CUDA graph memory"; with DEBUG
logging, "torch peak memory increase" and "non-torch forward increase memory") it is compared too. A log
counts as a hit within 3 % or 0.5 GiB; a miss carries the reason it misses. Logs that cannot be predicted
(the GPU or the vocabulary not known, a refused start, the same start kept twice, settings cut from an excerpt)
are listed apart, with why.

    python validation/memory.py [--json | --markdown | --write]

Only hybridplan is needed; the same table feeds tests/test_memory_logs.py.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GiB = 1 << 30

#: vocabulary sizes, from shipped configs of the same tokenizer (model_specs/*.yaml)
VOCAB = {
    "qwen3": (151_936, "qwen3-next-80b-a3b's config (the Qwen3 tokenizer)"),
    "qwen2.5": (152_064, "qwen2.5-7b's config (the Qwen2.5 tokenizer, DeepSeek-R1-Distill-Qwen's too)"),
    "llama3": (128_256, "llama-3.1-8b's config"),
    "qwen3.5": (248_320, "the Qwen3.5 configs (Qwen3.6 and Qwen3.8 keep the tokenizer)"),
    "nemotron": (131_072, "the Nemotron-H configs"),
    "log": (0, "the log's lm_head shard (Loaded weight lm_head.weight with shape …) times TP"),
    "phi3": (
        32_064,
        "microsoft/Phi-3-mini-4k-instruct's config, as NVIDIA/TensorRT-LLM copies it in "
        "tests/unittest/_torch/modeling/test_modeling_phi3.py",
    ),
}


@dataclass(frozen=True)
class Case:
    file: str
    #: a hybridplan/gpus.py key, or None where the log prints its own total
    gpu: str | None
    vocab: str | None
    #: why this start is outside what the estimate describes (kept, and counted as a miss if it misses)
    caveat: str = ""
    #: a shipped spec whose counted weights the logged weights are compared with
    spec: str | None = None
    #: the board, where the log prints its own total (for what depends on the board besides its memory)
    board: str | None = None


CASES = (
    Case("vllm-0.10.0-Qwen3-235B-A22B-FP8-H100-1.log", "h100", "qwen3"),
    Case("vllm-0.10.0-Qwen3-30B-A3B-Thinking-2507-AWQ-RTX3090-1.log", "rtx-3090", "qwen3"),
    Case("vllm-0.10.0-Qwen3-32B-H100-1.log", "h100", "qwen3"),
    Case("vllm-0.10.2-Qwen3-30B-A3B-Instruct-2507-H100-1.log", None, "qwen3", board="h100"),
    Case("vllm-0.10.2-Qwen3-Next-80B-A3B-Instruct-H200-1.log", None, "qwen3", spec="qwen3-next", board="h200"),
    Case("vllm-0.11.0-DeepSeek-R1-Distill-Qwen-32B-FP8-L40S-1.log", "l40s", "qwen2.5"),
    Case("vllm-0.11.0-Llama-3.1-8B-Instruct-A100-40GB-1.log", "a100-40g", "llama3", spec="llama-3.1-8b"),
    Case("vllm-0.11.2-Meta-Llama-3-8B-Instruct-H200-1.log", "h200", "llama3", spec="llama-3-8b"),
    Case(
        "vllm-0.12.0-Qwen3-30B-A3B-H100-1.log",
        "h100",
        "qwen3",
        "non-torch memory at PCIe size on an H100 pair: the log leaves 1.13 GiB for activation and non-torch "
        "together, where the 0.19.0 sweep's H100s show 2.1 GiB of NCCL buffers alone (no NVLink SHARP here)",
    ),
    Case("vllm-0.12.0-Qwen3-30B-A3B-Instruct-2507-RTXPRO6000-1.log", None, "qwen3", board="rtx-pro-6000"),
    Case(
        "vllm-0.12.0-Qwen3-VL-30B-A3B-Instruct-H100-1.log",
        "h100",
        "qwen3",
        "a vision model: the profiling run also encodes a dummy image",
    ),
    Case(
        "vllm-0.13.0-Nemotron-3-Nano-4B-FP8-GB10-1.log",
        "gb10",
        "nemotron",
        "unified memory at utilization 0.15: the host's use of the same memory counts as non-torch",
    ),
    Case(
        "vllm-0.13.0-Qwen2.5-14B-Instruct-FP8-GB10-1.log",
        "gb10",
        "qwen2.5",
        "unified memory: the host's use of the same memory counts as non-torch",
    ),
    Case(
        "vllm-0.13.0-Qwen3-30B-A3B-FP8-GB10-1.log",
        "gb10",
        "qwen3",
        "unified memory: the host's use of the same memory counts as non-torch",
    ),
    Case("vllm-0.17.1-Llama-3.1-8B-Instruct-A100-1.log", "a100-80g", "llama3", spec="llama-3.1-8b"),
    Case(
        "vllm-0.18.1rc1-Qwen3.5-35B-A3B-FP8-GB10-1.log",
        "gb10",
        "qwen3.5",
        "unified memory: the host's use of the same memory counts as non-torch",
    ),
    Case(
        "vllm-0.19.1-Phi-3-mini-4k-instruct-RTX3090-1.log",
        "rtx-3090",
        "phi3",
        "memory freed during profiling on a desktop GPU: the log leaves −0.15 GiB for activation and non-torch",
    ),
    Case("vllm-0.20.2rc1-Qwen3.6-27B-AutoRound-INT4-RTX3090-1.log", "rtx-3090", "qwen3.5"),
    Case(
        "vllm-0.22.1-Qwen3-30B-A3B-Instruct-2507-FP8-H100-1.log",
        "h100",
        "qwen3",
        "online FP8 quantization: the logged weights include memory freed after loading",
    ),
    Case("vllm-0.22.1-Qwen3-8B-LoRA-T4-1.log", "t4", "qwen3", "LoRA adapters add their own buffers"),
    Case(
        "vllm-0.25.1-Qwen3.6-35B-A3B-NVFP4-GB10-1.log",
        "gb10",
        "qwen3.5",
        "unified memory: the host's use of the same memory counts as non-torch",
    ),
    Case(
        "vllm-0.25.1-Qwen3.8-27B-INT4-GB10-1.log",
        "gb10",
        "qwen3.5",
        "unified memory: the host's use of the same memory counts as non-torch",
    ),
    Case(
        "vllm-0.25.1-Qwen3.8-27B-NVFP4-GB10-1.log",
        "gb10",
        "qwen3.5",
        "unified memory: the host's use of the same memory counts as non-torch",
    ),
    Case("vllm-0.26.1rc1-Qwen3-Coder-30B-A3B-Instruct-A100-80GB-1.log", None, "qwen3", board="a100-80g"),
    Case("vllm-0.27.1-Qwen3.6-27B-FP8-H100-1.log", "h100", "qwen3.5"),
    Case("vllm-0.13.0-qwen3-next-80b-w4a16-2xl40s-1.log", "l40s", "qwen3"),
    # a capacity planner's accuracy sweep on H100s with DEBUG logging: each term printed apart
    Case(
        "vllm-0.19.0-Qwen3-30B-A3B-H100-1.log",
        None,
        "log",
        "an MoE model: the fused-MoE workspace of the profiling run's dummy batch is not estimated (2.68 GiB of "
        "activation logged)",
        board="h100",
    ),
    *(
        Case(f"vllm-0.19.0-{m}-H100-{n}.log", None, "log", board="h100")
        for m, n in (
            ("Qwen3-8B", 1),
            ("Llama-3.1-8B-Instruct", 1),
            ("Llama-3.1-8B-Instruct", 2),
            ("Llama-3.1-8B-Instruct", 3),
            ("Llama-3.3-70B-Instruct-FP8-dynamic", 1),
            ("Llama-3.3-70B-Instruct-FP8-dynamic", 2),
            ("Mixtral-8x7B-Instruct-v0.1", 1),
            ("gpt-oss-20b", 1),
            ("Qwen2.5-72B-Instruct", 1),
        )
    ),
    *(
        Case(
            f"vllm-0.19.0-{m}-H100-1.log",
            None,
            "log",
            "a vision model: the profiling run also encodes a dummy image",
            board="h100",
        )
        for m in ("Mistral-Small-3.1-24B-Instruct-2503", "Llama-4-Scout-17B-16E-Instruct")
    ),
)
#: logs kept under tests/data/memlogs (and the vLLM logs of tests/data/logs that print both lines) that no
#: prediction is made for, and why
LEFT_OUT = {
    "vllm-0.20.1rc1-nemotron-cascade-2-30b-nvfp4-blackwell-wsl-1.log": "the GPU is not named (a Blackwell under WSL2)",
    "vllm-0.23.1rc1-qwen3.6-27b-nvfp4-hopper-1.log": "the GPU is not named (a Hopper, by its kernels)",
    "vllm-0.26.0-lfm2.5-1.2b-sm90-1.log": "the GPU is not named (sm90, apparently a slice of one)",
    "vllm-0.10.2-qwen3-next-80b-a3b-instruct-2xh200-1.log": "the same start as "
    "vllm-0.10.2-Qwen3-Next-80B-A3B-Instruct-H200-1.log",
    "vllm-0.10.2-llava-1.5-7b-awq-RTX4080-1.log": "its vocabulary (LLaVA-1.5's) is in no shipped config",
    "vllm-0.11.0-Llama-3.1-8B-Instruct-L4-1.log": "the GPU is not known: its figures do not fit an L4",
    "vllm-0.13.0-Nemotron-3-Nano-4B-FP8-GB10-2.log": "a start refused for memory (utilization 0.05)",
    "vllm-0.13.0-Qwen2.5-14B-Instruct-FP8-GB10-2.log": "a start refused for memory (utilization 0.15)",
    "vllm-0.13.0-gpt-oss-20b-GB10-1.log": "its vocabulary (gpt-oss's) is in no shipped config",
    "vllm-0.14.0rc1-DeepSeek-R1-Distill-Qwen-14B-AWQ-RX9070XT-1.log": "the GPU's total is not known (RX 9070 XT)",
    "vllm-0.25.1-Laguna-S-2.1-INT4-GB10-1.log": "its vocabulary (Laguna's) is in no shipped config",
    "vllm-0.25.1-gemma-4-26B-A4B-it-AWQ-INT4-GB10-1.log": "its vocabulary (Gemma 4's) is in no shipped config",
    "vllm-0.25.1-gemma-4-26B-A4B-it-NVFP4-GB10-1.log": "its vocabulary (Gemma 4's) is in no shipped config",
    # tests/data/logs (the logs of tests/test_real_logs.py that print both lines)
    # the held-out logs of tests/test_real_logs.py HELD_OUT that print both lines
    "vllm-0.23.1rc1-qwen3.6-27b-nvfp4-mtp-arm64-1.log": "the GPU is not named (an arm64 host without native FP4); "
    "and an MTP drafter (the table holds starts without one)",
    "vllm-0.20.0-qwen3.6-35b-a3b-nvfp4-mtp-gb10-1.log": "an MTP drafter (Qwen3_5MoeMTP): the table holds "
    "starts without a drafter",
    "vllm-0.20.2-qwen3.6-35b-a3b-nvfp4-mtp-gb10-1.log": "an MTP drafter (Qwen3_5MoeMTP): the table holds "
    "starts without a drafter",
    "vllm-0.22.1rc1-qwen3.6-35b-a3b-nvfp4-mtp-gb10-1.log": "an MTP drafter (Qwen3_5MoeMTP): the table holds "
    "starts without a drafter",
    "vllm-0.13.0-nemotron-3-nano-4b-fp8-unknown-1.log": "the same start as "
    "vllm-0.13.0-Nemotron-3-Nano-4B-FP8-GB10-1.log (same "
    "process ids, times and figures)",
    "vllm-0.19.0-granite-4.0-h-1b-unknown-1.log": "the GPU is not named (one NVIDIA GPU, shared with a second vLLM "
    "container)",
    "vllm-0.19.1-nemotron-cascade-2-30b-nvfp4-hopper-1.log": "the GPU is not named (a Hopper, by FlashAttention 3 "
    "and Marlin FP4)",
    "vllm-0.20.0-qwen3.6-35b-a3b-nvfp4-blackwell-wsl-1.log": "the GPU is not named (a Blackwell under WSL2)",
    "vllm-0.16.1rc1-qwen3.5-122b-a10b-int4-2xsm89-1.log": "the GPU is not named (two of compute capability 8.9)",
    "vllm-0.16.1rc1-qwen3.5-9b-awq-and-4b-awq-l40s-1.log": "two compose services share one L40S: each budget is "
    "what the other left",
    "vllm-0.22.0-qwen3.6-35b-a3b-prismaquant-mtp-unknown-1.log": "the GPU is not named (one without native FP4)",
    **{
        f"vllm-0.23.0-qwen3.6-27b-{q}-mtp-{n}xrtx5060ti-{i}.log": f"the GPU is not known to hybridplan/gpus.py "
        f"(RTX 5060 Ti 16 GB, {n} of them)"
        for q, n, i in (("fp8", 4, 1), ("fp8", 4, 2), ("nvfp4", 2, 1), ("nvfp4", 2, 2), ("nvfp4", 2, 3))
    },
    **{
        f"vllm-0.25.1-{m}-mtp-gb10-1.log": f"the same start as vllm-0.25.1-{n}-GB10-1.log (same process ids, times "
        f"and figures)"
        for m, n in (
            ("qwen3.6-35b-a3b-nvfp4", "Qwen3.6-35B-A3B-NVFP4"),
            ("qwen3.8-27b-int4", "Qwen3.8-27B-INT4"),
            ("qwen3.8-27b-nvfp4", "Qwen3.8-27B-NVFP4"),
        )
    },
    "vllm-unknown-nemotron-3-nano-30b-nvfp4-rtx5080-rtx5070ti-1.log": "settings cut from the excerpt (no release, "
    "no args line) and two unlike GPUs at TP 2 "
    "(RTX 5080, not known, and RTX 5070 Ti)",
}

_PATTERNS = {
    # the engine line first: a log also prints NCCL's and the driver's versions ("NCCL version 2.28.9+cuda13.0")
    "engine_version": re.compile(r"LLM engine \(v(\d+\.\d+\.\d+[\w.+]*)"),
    "version": re.compile(r"(?:version |LLM engine \(v)(\d+\.\d+\.\d+[\w.+]*)"),
    "util": re.compile(r"'gpu_memory_utilization': ([\d.]+)"),
    "seqs": re.compile(r"'max_num_seqs': (\d+)"),
    "tp": re.compile(r"'tensor_parallel_size': (\d+)|tensor_parallel_size=(\d+)"),
    "eager": re.compile(r"'enforce_eager': True|enforce_eager=True"),
    "weights": re.compile(r"Model loading took ([\d.]+) GiB"),
    "available": re.compile(r"Available KV cache memory: (-?[\d.]+) GiB"),
    "total": re.compile(r"Free memory on device \([\d.]+/([\d.]+) GiB\)"),
    "header_version": re.compile(r"^# engine: vllm ([\d.a-z+]+)", re.I | re.M),
    "header_tp": re.compile(r"^# TP: (\d+)", re.M),
    "graphs": re.compile(r"Estimated CUDA graph memory: ([\d.]+) GiB"),
    "lm_head": re.compile(r"Loaded weight lm_head\.weight with shape torch\.Size\(\[(\d+), \d+\]\)"),
    "torch_peak": re.compile(r"torch peak memory increase: ([\d.]+) ?GiB"),
    "non_torch": re.compile(r"non-torch forward increase memory: ([\d.]+) ?GiB"),
}


def _find(name: str, text: str) -> str | None:
    m = _PATTERNS[name].findall(text)
    if not m:
        return None
    last = m[-1]
    return next((x for x in last if x), None) if isinstance(last, tuple) else last


def path_of(file: str) -> Path:
    for folder in ("memlogs", "logs"):
        p = ROOT / "tests" / "data" / folder / file
        if p.exists():
            return p
    raise FileNotFoundError(file)


def evaluate(case: Case) -> dict:
    sys.path.insert(0, str(ROOT))
    from hybridplan.engines.vllm.defaults import batch_defaults, device
    from hybridplan.engines.vllm.memory import CUDA_GRAPHS, overheads, requested_memory
    from hybridplan.engines.vllm.releases import release
    from hybridplan.gpus import gpu

    text = path_of(case.file).read_text()
    rel = release(_find("engine_version", text) or _find("version", text) or _find("header_version", text))
    tp = int(_find("tp", text) or _find("header_tp", text) or 1)
    util = float(_find("util", text) or rel.gpu_memory_utilization)
    logged_total = _find("total", text)
    total = round(float(logged_total) * GiB) if logged_total else gpu(case.gpu).total
    given = int(_find("seqs", text)) if _find("seqs", text) else None
    # the tier reads the board (its NVML total and name: an A100 is small whatever its memory)
    batch = batch_defaults(rel, device(gpu(case.board or case.gpu)), None, (None, given))
    vocab, vocab_source = VOCAB[case.vocab]
    if case.vocab == "log":
        vocab = int(_find("lm_head", text)) * tp
    weights = round(float(_find("weights", text)) * GiB)
    logged = float(_find("available", text))
    nvswitch = gpu(case.board or case.gpu).nvswitch
    seqs = batch.max_num_seqs
    terms = {
        t.name: t.bytes / GiB
        for t in overheads(rel, tp, (seqs, batch.max_num_batched_tokens), vocab, bool(_find("eager", text)), nvswitch)
    }
    requested = requested_memory(total, util, rel) / GiB
    predicted = requested - weights / GiB - sum(terms.values())
    error = predicted - logged
    # the terms one at a time: the CUDA-graph estimate where the log prints it, and what the log leaves for the
    # activation and non-torch memory together (requested − weights − graphs subtracted − available)
    graphs_logged = _find("graphs", text)
    graphs_subtracted = "CUDA graphs" in terms
    graphs_used = float(graphs_logged) if graphs_logged and graphs_subtracted else terms.get("CUDA graphs", 0.0)
    other_logged = requested - weights / GiB - graphs_used - logged
    other_predicted = terms["activation"] + terms["non-torch"]
    out = {
        "file": case.file,
        "release": rel.version,
        "tp": tp,
        "utilization": util,
        "max_num_seqs": seqs,
        "gpu_total_gib": round(total / GiB, 2),
        "total_from": "log" if logged_total else case.gpu,
        "vocab": vocab,
        "vocab_from": vocab_source,
        "weights_gib": round(weights / GiB, 2),
        "logged_gib": logged,
        "predicted_gib": round(predicted, 2),
        "error_gib": round(error, 2),
        "hit": abs(error) <= max(0.5, 0.03 * abs(logged)),
        "caveat": case.caveat,
        "activation_non_torch": {
            "predicted_gib": round(other_predicted, 2),
            "logged_gib": round(other_logged, 2),
            "error_gib": round(other_predicted - other_logged, 2),
        },
    }
    if _find("torch_peak", text):  # DEBUG logs print the two terms apart
        for key, name in (("torch_peak", "activation"), ("non_torch", "non-torch")):
            logged_term = float(_find(key, text))
            out[name] = {
                "predicted_gib": round(terms[name], 2),
                "logged_gib": logged_term,
                "error_gib": round(terms[name] - logged_term, 2),
            }
    if graphs_logged:
        out["cuda_graphs"] = {
            "predicted_gib": round(CUDA_GRAPHS / GiB, 2),
            "logged_gib": float(graphs_logged),
            "subtracted": graphs_subtracted,
            "error_gib": round(CUDA_GRAPHS / GiB - float(graphs_logged), 2),
        }
    if case.spec is not None:
        from hybridplan.loader import load_model
        from hybridplan.weights import weights as counted

        w = counted(load_model(case.spec), tp).bytes_per_rank / GiB
        out.update(
            counted_weights_gib=round(w, 4), weights_error_pct=round(100 * (w - weights / GiB) / (weights / GiB), 2)
        )
    return out


def evaluate_all() -> list[dict]:
    return [evaluate(c) for c in CASES]


def _stats(errors: list[float]) -> str:
    if not errors:
        return "—"
    a = sorted(abs(e) for e in errors)
    return (
        f"{len(errors)} logs: median |error| {statistics.median(a):.2f}, largest {a[-1]:.2f}, "
        f"mean error {statistics.fmean(errors):+.2f}"
    )


def markdown(rows: list[dict]) -> str:
    """The table and per-term summary docs/VALIDATION.md shows between its memory markers."""
    hits = sum(r["hit"] for r in rows)
    out = ["| log | release | TP | util | logged GiB | predicted GiB | error | |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        mark = "hit" if r["hit"] else f"**miss**: {r['caveat'] or 'unexplained'}"
        out.append(
            f"| `{r['file']}` | {r['release']} | {r['tp']} | {r['utilization']:g} | {r['logged_gib']:.2f} | "
            f"{r['predicted_gib']:.2f} | {r['error_gib']:+.2f} | {mark} |"
        )
    plain = [r for r in rows if not r["caveat"]]
    other = [r["activation_non_torch"]["error_gib"] for r in plain]
    graphs = [r["cuda_graphs"]["error_gib"] for r in rows if "cuda_graphs" in r]
    apart = {name: [r[name]["error_gib"] for r in plain if name in r] for name in ("activation", "non-torch")}
    weights = [r["weights_error_pct"] for r in rows if "weights_error_pct" in r]
    out += [
        "",
        f"**{hits} of {len(rows)} within 3 % or 0.5 GiB ({100 * hits / len(rows):.0f} %)**; "
        f"{len(LEFT_OUT)} logs kept but not predicted (below).",
        "",
        "Per term (predicted − logged, GiB; logs without a caveat):",
        "",
        f"- activation + non-torch (what the log leaves once weights, CUDA graphs and the cache are taken "
        f"off): {_stats(other)}",
        f'- activation alone (DEBUG logs: "torch peak memory increase"): {_stats(apart["activation"])}',
        f'- non-torch alone (DEBUG logs: "non-torch forward increase memory"): {_stats(apart["non-torch"])}',
        f'- CUDA graphs (0.5 GiB against the "Estimated CUDA graph memory" the log prints): {_stats(graphs)}',
        f'- weights (counted from the shipped spec against "Model loading took", %): {_stats(weights)}',
        "",
        "Kept, not predicted:",
        "",
    ]
    out += [f"- `{f}`: {why}" for f, why in LEFT_OUT.items()]
    return "\n".join(out) + "\n"


_MARKERS = ("<!-- memory-validation:begin -->\n", "<!-- memory-validation:end -->")


def _span(text: str) -> tuple[int, int]:
    start = text.index(_MARKERS[0]) + len(_MARKERS[0])
    return start, text.index(_MARKERS[1], start)


def block_in(doc: Path) -> str:
    text = doc.read_text(encoding="utf-8")
    start, end = _span(text)
    return text[start:end]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--markdown", action="store_true", help="the block docs/VALIDATION.md shows")
    ap.add_argument("--write", action="store_true", help="rewrite that block in docs/VALIDATION.md")
    args = ap.parse_args()
    rows = evaluate_all()
    hits = sum(r["hit"] for r in rows)
    if args.json:
        print(json.dumps({"rows": rows, "hits": hits, "cases": len(rows), "left_out": LEFT_OUT}, indent=2))
        return 0
    if args.markdown or args.write:
        block = markdown(rows)
        if args.write:
            doc = ROOT / "docs" / "VALIDATION.md"
            text = doc.read_text(encoding="utf-8")
            start, end = _span(text)
            doc.write_text(text[:start] + block + text[end:], encoding="utf-8")
        else:
            print(block, end="")
        return 0
    for r in rows:
        w = f"  weights {r['weights_error_pct']:+.2f} %" if "weights_error_pct" in r else ""
        print(
            f"{'hit ' if r['hit'] else 'MISS'} {r['file'][:58]:58} logged {r['logged_gib']:7.2f}  predicted "
            f"{r['predicted_gib']:7.2f}  ({r['error_gib']:+.2f}){w}" + (f"  [{r['caveat']}]" if r["caveat"] else "")
        )
    print(
        f"{hits} of {len(rows)} within 3 % or 0.5 GiB ({100 * hits / len(rows):.0f} %); {len(LEFT_OUT)} logs left out"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
