"""The engines' defaults per GPU and release: vLLM's --max-num-batched-tokens / --max-num-seqs tiers and the GDN
prefill backend it resolves (hybridplan/engines/vllm/defaults.py), SGLang's --chunked-prefill-size
(hybridplan/engines/sglang/defaults.py), and what fit and replay take from them."""

from __future__ import annotations

import pytest
from msgspec.structs import replace

from hybridplan.engines.sglang.defaults import chunked_prefill_size
from hybridplan.engines.sglang.releases import release as sglang_release
from hybridplan.engines.vllm import prefix_cache as vpc
from hybridplan.engines.vllm.defaults import Device, batch_defaults, batched_tokens, device, gdn_prefill_backend
from hybridplan.engines.vllm.releases import release as vllm_release
from hybridplan.engines.vllm.sizing import fit
from hybridplan.gpus import gpu
from hybridplan.replay.settings import ReplaySettings
from hybridplan.replay.trace import Prompt, Request
from hybridplan.scenario import Budget
from tests.helpers import GiB, scenario

pytestmark = pytest.mark.unit


def _batch(version: str, key: str, **kw):
    d = batch_defaults(vllm_release(version), device(gpu(key)), **kw)
    return d.max_num_batched_tokens, d.max_num_seqs


# --- vLLM: the tiers --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "version,key,serve",
    [
        # vllm/engine/arg_utils.py get_batch_defaults, 0.33.0: ≥ 160 GiB → 16384/1024; ≥ 70 GiB and "a100" not in the
        # name and not GB10 → 8192/1024; else 2048/256. The memory is NVML's total (nvidia-smi's MiB, gpus.py).
        ("0.33.0", "rtx-4090", (2048, 256)),  # 24,564 MiB
        ("0.33.0", "rtx-5090", (2048, 256)),  # 32,607 MiB
        ("0.33.0", "l40s", (2048, 256)),  # 46,068 MiB
        ("0.33.0", "a100-80g", (2048, 256)),  # 81,920 MiB, but "a100" in "NVIDIA A100-SXM4-80GB"
        ("0.33.0", "h100", (8192, 1024)),  # 81,559 MiB
        ("0.33.0", "h200", (8192, 1024)),  # 143,771 MiB < 160 GiB (163,840 MiB)
        ("0.33.0", "b200", (16384, 1024)),  # 183,359 MiB
        ("0.33.0", "gb10", (2048, 256)),  # is_gb10: compute capability (12, 1)
        # the ≥ 160 GiB tier is new in 0.28.0 (absent from the 0.27.0 wheel's arg_utils.py): B200 is "large" before
        ("0.27.0", "b200", (8192, 1024)),
        ("0.28.0", "b200", (16384, 1024)),
        # 0.10.0 (_set_default_args_v1): the same two lower tiers, the A100 exception included
        ("0.10.0", "h100", (8192, 1024)),
        ("0.10.0", "a100-80g", (2048, 256)),
        ("0.10.0", "b200", (8192, 1024)),
        # GB10 before 0.33.0: NVML's memory query raises on it (vllm/platforms/cuda.py has no fallback until 0.33.0),
        # get_batch_defaults catches it and reads 0 bytes: the small tier
        ("0.25.1", "gb10", (2048, 256)),
    ],
)
def test_vllm_serve_tiers(version, key, serve):
    assert _batch(version, key) == serve


def test_vllm_gb10_log_shows_the_small_tier():
    # tests/data/logs/vllm-0.25.1-qwen3.8-27b-int4-mtp-gb10-1.log: no --max-num-batched-tokens among its
    # non-default args, and "max_num_scheduled_tokens is set to 2048" (vllm/config/vllm.py: the token budget less
    # MTP's new drafting slots, none for MTP): the budget is the small tier's 2048, not the large tier's 8192
    from pathlib import Path

    log = (Path(__file__).parent / "data" / "logs" / "vllm-0.25.1-qwen3.8-27b-int4-mtp-gb10-1.log").read_text()
    assert "max_num_scheduled_tokens is set to 2048" in log and "'max_num_batched_tokens'" not in log
    assert _batch("0.25.1", "gb10")[0] == 2048


def test_vllm_h200_log_shows_the_large_tier():
    # tests/data/logs/vllm-0.10.2-qwen3-next-80b-a3b-instruct-2xh200-1.log: "Chunked prefill is enabled with
    # max_num_batched_tokens=8192" with none given
    from pathlib import Path

    log = (Path(__file__).parent / "data" / "logs" / "vllm-0.10.2-qwen3-next-80b-a3b-instruct-2xh200-1.log").read_text()
    assert "Chunked prefill is enabled with max_num_batched_tokens=8192" in log
    assert _batch("0.10.2", "h200")[0] == 8192


def test_vllm_llm_class_tiers():
    # the same function, UsageContext.LLM_CLASS (0.33.0): 8192/256, 16384/1024, 16384/1024
    assert _batch("0.33.0", "l40s", usage="llm") == (8192, 256)
    assert _batch("0.33.0", "h100", usage="llm") == (16384, 1024)
    assert _batch("0.33.0", "b200", usage="llm") == (16384, 1024)


def test_vllm_performance_mode_throughput_doubles_what_is_not_given():
    # arg_utils.py (0.17.0 on): `if self.performance_mode == "throughput"` doubles each value left unset
    assert _batch("0.33.0", "h100", performance_mode="throughput") == (16384, 2048)
    assert _batch("0.33.0", "h100", given=(4096, None), performance_mode="throughput") == (4096, 2048)
    assert _batch("0.17.0", "l40s", performance_mode="throughput") == (4096, 512)
    # 0.16.0 has no such flag: fit refuses it
    from hybridplan.engines.vllm.settings import VllmSettings
    from hybridplan.errors import PlanError

    with pytest.raises(PlanError, match="no --performance-mode"):
        VllmSettings(release=vllm_release("0.16.0"), performance_mode="throughput")


def test_vllm_clamps_from_0_11_1():
    # 0.11.1 on (absent from the 0.11.0 wheel, present in 0.11.1): tokens ≤ max_num_seqs × max_model_len, then
    # max_num_seqs ≤ tokens.
    # At max_model_len 4 on an L40S: min(256·4, 2048) = 1024 tokens, max_num_seqs min(256, 1024) = 256;
    # at max_model_len 1 with --max-num-seqs 100: min(100·1, 2048) = 100 tokens
    assert _batch("0.33.0", "l40s", ctx=4) == (1024, 256)
    assert _batch("0.33.0", "l40s", ctx=1, given=(None, 100)) == (100, 100)
    assert _batch("0.11.0", "l40s", ctx=1, given=(None, 100)) == (2048, 100)


def test_vllm_gpu_by_memory_alone_and_no_gpu():
    rel = vllm_release("0.33.0")
    # --gpu-mem 80GiB: memory alone, no name: ≥ 70 GiB → the large tier (an A100 of that size would be small)
    assert batch_defaults(rel, device(gpu_mem=80 * GiB)).max_num_batched_tokens == 8192
    # --kv-budget only: no GPU, hybridplan's documented default is the H100-class tier
    d = batch_defaults(rel, Device(None))
    assert (d.max_num_batched_tokens, d.max_num_seqs, d.tier) == (8192, 1024, "large")


# --- vLLM: the align refusal with the GPU's default ---------------------------------------------------------


@pytest.mark.parametrize(
    "key,refused", [("rtx-4090", True), ("rtx-5090", True), ("l40s", True), ("a100-80g", True), ("h100", False)]
)
def test_align_refusal_follows_the_gpus_default(key, refused):
    # Nemotron-3-Nano-30B-A3B, 0.26.0 align: Mamba page 2,134,016 B, attention 1,024 B a token, unit 16:
    # block = cdiv(2,134,016, 1,024·16)·16 = 131·16 = 2096. vllm/config/vllm.py (0.17.0–0.26) refuses a block
    # above max_num_batched_tokens: 2096 > 2048 (the small tier) refuses, 2096 ≤ 8192 (H100) starts
    sc = scenario(
        "nemotron-3-nano-30b-a3b",
        8192,
        minor="0.26.0",
        engine="vllm",
        vllm=dict(mode="align"),
        budget=Budget(gpu=key, gpu_mem=gpu(key).total, weights=1 * GiB),
    )
    cap = fit(sc).modes["align"].capacity
    assert cap.layout.block_size == 2096
    msg = "In Mamba cache align mode, block_size (2096) must be <= max_num_batched_tokens (2048)."
    assert (cap.block_problem == msg) if refused else cap.block_problem is None
    # given explicitly, the flag lifts the refusal on the small GPU too
    assert fit(replace(sc, chunk=4096)).modes["align"].capacity.block_problem is None


def test_fit_notes_which_default_was_taken():
    sc = scenario("nemotron-h", 8192, engine="vllm", budget=Budget(gpu="l40s", gpu_mem=gpu("l40s").total))
    notes = " ".join(fit(sc).notes)
    assert "--max-num-batched-tokens 2,048 and --max-num-seqs 256" in notes and "l40s (46,068 MiB)" in notes


# --- replay: align checkpoints by the GPU's chunk -------------------------------------------------------


def test_replay_chunks_by_the_gpus_default():
    # align splits a prefill into chunks of max_num_batched_tokens cut at block boundaries and saves a state at
    # each chunk's end (prefix_cache.py prefill_ends): a 20,000-token prompt of Nemotron-H (0.33.0 align,
    # block b) ends its steps at multiples of the chunk floored to b, so a 2,048-token chunk on an L40S gives
    # about four times the steps of an 8,192-token one on an H100
    def ends(key):
        # past Nemotron-H-8B's 8,192 tokens: VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (--allow-long-context)
        sc = scenario(
            "nemotron-h", 32768, engine="vllm", allow_long_context=True, budget=Budget(gpu=key, gpu_mem=gpu(key).total)
        )
        r = vpc.rules(sc, ReplaySettings(), "align", 40 * GiB)
        return r, vpc.Cache(r).prefill_ends(Request(0, Prompt(runs=((("p",), 20_000),)), 1), 0, 0)

    small, large = ends("l40s"), ends("h100")
    # vllm serve's batch defaults (vllm/engine/arg_utils.py get_batch_defaults; the tiers in
    # hybridplan/engines/vllm/defaults.py): an L40S's 44.42 GiB is under 70 GiB → 2,048 tokens, an H100's 80 → 8,192
    assert (small[0].chunk, large[0].chunk) == (2048, 8192)
    b = small[0].block
    assert all(e % b == 0 for e in small[1][:-1]) and small[1][-1] == 20_000
    assert small[1][0] == 2048 // b * b and large[1][0] == 8192 // b * b
    assert len(small[1]) > 3 * (len(large[1]) - 1)


# --- vLLM 0.33: the GDN prefill backend -----------------------------------------------------------------


@pytest.mark.parametrize(
    "key,backend",
    [
        # qwen_gdn_linear_attn.py _resolve_gdn_prefill_backend (0.33.0): FlashInfer on 9.0 exactly; on 10.x and 12.x
        # with head_k_dim 128 and CUDA ≥ 13 (the PyPI wheel's); triton on 8.0, 8.6, 8.9 and ROCm
        ("h100", "flashinfer"),
        ("h200", "flashinfer"),
        ("b200", "flashinfer"),
        ("rtx-5090", "flashinfer"),
        ("a100-80g", "triton"),
        ("rtx-3090", "triton"),
        ("a10", "triton"),
        ("rtx-4090", "triton"),
        ("l40s", "triton"),
        ("mi300x", "triton"),
    ],
)
def test_gdn_backend_follows_the_gpu(key, backend):
    sc = scenario("qwen3-next-80b-a3b", 8192, budget=Budget(gpu=key, gpu_mem=gpu(key).total))
    assert gdn_prefill_backend(sc) == backend
    # asking for flashinfer where it is not supported still runs triton; asking for triton always does
    assert gdn_prefill_backend(replace(sc, vllm=replace(sc.vllm, gdn_backend="flashinfer"))) == backend
    assert gdn_prefill_backend(replace(sc, vllm=replace(sc.vllm, gdn_backend="triton"))) == "triton"


def test_gdn_backend_changes_the_align_block_on_sm86():
    # 0.33 align with FlashInfer GDN: the block unit is lcm(unit, 64) and the checkpoint page is added
    # (blocks.py _unit, prefill_checkpoint); with triton (sm_86) neither
    from hybridplan.engines.vllm.blocks import layout, prefill_checkpoint

    def at(key):
        return scenario("qwen3-next-80b-a3b", 8192, tp=4, budget=Budget(gpu=key, gpu_mem=gpu(key).total))

    h100, a10 = at("h100"), at("a10")
    assert layout(h100, "align").block_size % 64 == 0 and prefill_checkpoint(h100, "gdn")
    assert not prefill_checkpoint(a10, "gdn")
    # the same as --gdn-prefill-backend triton on the H100
    assert (
        layout(a10, "align").block_size
        == layout(replace(h100, vllm=replace(h100.vllm, gdn_backend="triton")), "align").block_size
    )


# --- SGLang: chunked_prefill_size --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "version,key,chunk",
    [
        # server_args.py _handle_gpu_memory_settings (0.5.3rc2–0.5.18), arg_groups/memory_hook.py (0.5.19–0.5.23), on
        # nvidia-smi's MiB: < 20 GiB 2048; 20–35 GiB 2048 (4096 from 0.5.20); 35–60 GiB 4096; 60–160 GiB 8192;
        # else 16384
        ("0.5.23", "t4", 2048),
        ("0.5.23", "rtx-4090", 4096),
        ("0.5.19", "rtx-4090", 2048),
        ("0.5.20", "rtx-5090", 4096),
        ("0.5.23", "l40s", 4096),
        ("0.5.23", "a100-80g", 8192),
        ("0.5.23", "h100", 8192),
        ("0.5.23", "h200", 8192),
        ("0.5.23", "b200", 16384),
        ("0.5.3rc2", "l40s", 4096),
        # 0.5.2–0.5.3rc0 (__post_init__): < 35 GiB 2048, < 160 GiB 8192 (the L40S's 46,068 MiB included), else 16384
        ("0.5.2", "l40s", 8192),
        ("0.5.3rc0", "rtx-4090", 2048),
        ("0.5.2", "b200", 16384),
    ],
)
def test_sglang_chunk_tiers(version, key, chunk):
    assert chunked_prefill_size(sglang_release(version), gpu(key).smi_mib) == chunk


def test_sglang_replay_takes_the_gpus_chunk():
    from hybridplan.engines.sglang import radix_cache as spc

    sc = scenario("nemotron-h", 8192, engine="sglang", budget=Budget(gpu="rtx-4090", gpu_mem=gpu("rtx-4090").total))
    assert spc.rules(sc, ReplaySettings()).chunk == 4096  # 24,564 MiB, 0.5.23: the 20–35 GiB tier
    assert batched_tokens(sc) == 2048  # vLLM's on the same GPU


# --- check-log: what the start ran with -------------------------------------------------------------------


def test_check_log_reads_the_gdn_kernel_and_the_token_budget(run_cli):
    # tests/data/logs/vllm-0.20.0-qwen3.6-35b-a3b-nvfp4-blackwell-wsl-1.log: line 9 passes max_num_batched_tokens
    # 8192 (non-default args) and line 20 says "Using Triton/FLA GDN prefill kernel": check-log sizes with both,
    # rather than with a default (engines/vllm/logs.py CHUNKED, GDN_KERNEL)
    import json
    from pathlib import Path

    log = Path(__file__).parent / "data" / "logs" / "vllm-0.20.0-qwen3.6-35b-a3b-nvfp4-blackwell-wsl-1.log"
    code, out, _ = run_cli("check-log", log, "--json")
    settings = {s["name"]: (s["value"], s["source"]) for s in json.loads(out)["settings"]}
    assert settings["gdn_prefill_backend"] == ("triton", "line 20: Using Triton/FLA GDN prefill kernel")
    value, source = settings["max_num_batched_tokens"]
    assert value == 8192 and source.startswith("line 9")
    assert code == 0


def test_performance_mode_on_the_command_line(run_cli):
    from tests.helpers import one_line_error

    # 0.16.0's arg_utils.py has no --performance-mode: refused in one line
    one_line_error(
        *run_cli(
            "fit",
            "nemotron-h",
            "--ctx",
            "8192",
            "--gpu-type",
            "h100",
            "--engine",
            "vllm",
            "--vllm-version",
            "0.16",
            "--performance-mode",
            "throughput",
        ),
        "--performance-mode",
    )
    # 0.33.0 on an H100: 1,024 sequences doubled to 2,048, and the printed command keeps the flag
    code, out, _ = run_cli(
        "fit",
        "nemotron-h",
        "--ctx",
        "8192",
        "--gpu-type",
        "h100",
        "--engine",
        "vllm",
        "--performance-mode",
        "throughput",
    )
    assert "--max-num-seqs 2048 --performance-mode throughput" in out
    assert "--max-num-batched-tokens 16,384 and --max-num-seqs 2,048" in out.replace("\n      ", " ")
