"""`fit` from a GPU name alone: the GPU table, the memory waterfall of each engine, and the refusals.

The estimated terms (activation, non-torch, CUDA graphs) are checked against real logs in
tests/test_memory_logs.py; here the rules around them: which release subtracts what, what a flag removes, what
each engine picks for a GPU, and that every shipped spec gets an answer with no other input.
"""

from __future__ import annotations

import json
from math import ceil
from pathlib import Path

import pytest

from hybridplan.engines.vllm.releases import release as vllm_release
from hybridplan.gpus import GPUS, MiB, gpu
from tests.helpers import one_line_error

pytestmark = pytest.mark.cli

GiB = 1 << 30
SPECS = sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "model_specs").glob("*.yaml"))


def _fit(run_cli, *args):
    code, out, err = run_cli("fit", *args, "--json")
    assert code in (0, 1), (code, err)
    return json.loads(out)


# --- every shipped spec, from the GPU's name --------------------------------------------------------------------


@pytest.mark.parametrize("spec", SPECS)
def test_every_shipped_spec_fits_an_h100_with_no_other_input(run_cli, spec):
    code, out, err = run_cli("fit", spec, "--gpu-type", "h100", "--ctx", "32768", "--json")
    if code == 2:
        # neither engine's newest release serves it: the refusal says which release does
        assert "try --vllm-version" in err and len(err.strip().splitlines()) == 1, err
        return
    assert code in (0, 1), err
    d = json.loads(out)
    assert set(d["flags"]) | set(d.get("skipped", {})) == {"vllm", "sglang"}
    for name in d["flags"]:
        mem = d[name]["memory"]
        # the JSON the issue asks for, and the waterfall's identity: what is left is the request less every term
        for key in (
            "gpu_bytes",
            "utilization",
            "weights_bytes",
            "activation_bytes",
            "non_torch_bytes",
            "cudagraph_bytes",
            "kv_budget_bytes",
            "estimated",
        ):
            assert key in mem, (name, key)
        assert mem["gpu_bytes"] == gpu("h100").total
        assert mem["weights_bytes"] > 0
        after = [t for t in mem["terms"] if t["name"] not in ("CUDA context",)]
        assert mem["kv_budget_bytes"] == mem["requested_bytes"] - sum(t["bytes"] for t in after)


def test_a_model_no_newest_release_serves_names_the_release_that_does(run_cli):
    # vLLM 0.24.0 moved MiniMaxM1ForCausalLM to _PREVIOUSLY_SUPPORTED_MODELS with "0.23.0"
    # (vllm/model_executor/models/registry.py); SGLang 0.5.23 has no class for it
    one_line_error(
        *run_cli("fit", "minimax-m1", "--gpu-type", "h100", "--ctx", "32768"),
        "was supported in vLLM until v0.23.0",
        "try --vllm-version 0.23.0",
    )
    d = _fit(
        run_cli, "minimax-m1", "--gpu-type", "h100", "--ctx", "32768", "--vllm-version", "0.23.0", "--engine", "vllm"
    )
    # 456B parameters in bf16 do not fit one H100: the answer is that it will not start, and why
    assert d["ok"] is False and d["vllm"]["starts"] is False and "use more GPUs" in d["vllm"]["problem"]


def test_weights_that_do_not_fit_say_the_engine_will_not_start(run_cli):
    # Llama-3.1-70B in bf16 is 141 GB: more than an RTX 4090's 24 GB
    code, out, _ = run_cli("fit", "llama-3.1-70b", "--gpu-type", "rtx-4090", "--ctx", "8192")
    assert code == 1
    assert "will not start" in out and "nothing is left for the caches" in out


# --- bad input ------------------------------------------------------------------------------------------------


def test_unknown_gpu_lists_the_known_ones(run_cli):
    one_line_error(
        *run_cli("fit", "nemotron-h", "--gpu-type", "h900"), "unknown GPU 'h900'", "h100", "mi300x", "rtx-4090"
    )


def test_gpu_type_and_gpu_mem_together_are_refused(run_cli):
    one_line_error(
        *run_cli("fit", "nemotron-h", "--gpu-type", "h100", "--gpu-mem", "80GiB"),
        "give --gpu-type or --gpu-mem, not both",
    )


def test_a_quantization_hybridplan_cannot_size_asks_for_weights(run_cli, tmp_path, configs):
    cfg = json.loads((configs / "nvidia__Nemotron-H-8B-Base-8K.from-python-dict.json").read_text())
    cfg["quantization_config"] = {"quant_method": "hqq", "nbits": 4}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    one_line_error(
        *run_cli("fit", p, "--gpu-type", "h100", "--ctx", "8192"), "does not size the quantization 'hqq'", "--weights"
    )
    # given the weights, it answers
    d = _fit(run_cli, p, "--gpu-type", "h100", "--ctx", "8192", "--weights", "6GiB", "--engine", "vllm")
    assert d["vllm"]["memory"]["weights_bytes"] == 6 * GiB


# --- the GPU table --------------------------------------------------------------------------------------------


def test_every_gpu_says_where_its_figure_comes_from():
    keys = [g.key for g in GPUS] + [a for g in GPUS for a in g.aliases]
    assert len(keys) == len(set(keys))
    for g in GPUS:
        assert g.total > 8 * GiB and g.kind in ("cuda", "nvidia-smi", "datasheet") and g.source
        if g.kind == "datasheet":
            # the vendor's memory size, in whole GiB, named as such until a reported total is found
            assert g.total % GiB == 0 and ("datasheet" in g.source or "specifications" in g.source)
        if g.kind == "nvidia-smi":
            # an nvidia-smi figure is a whole number of MiB, and the source quotes it
            assert g.total % MiB == 0 and f"{g.total // MiB}" in g.source.replace(",", "")
        if g.smi is not None:
            # the driver keeps back part of nvidia-smi's total from CUDA: the CUDA total is never larger
            # (rocm-smi and HIP agree on the MI300X's 205,822,885,888 B = 196,288 MiB)
            assert g.total <= g.smi * MiB


def test_gpu_names_are_forgiving():
    assert gpu("H100_SXM") is gpu("h100") and gpu(" DGX Spark ") is gpu("gb10")


@pytest.mark.parametrize(
    "name,key",
    [
        # the names nvidia-smi (and torch.cuda.get_device_name) print for these boards
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA GB10", "gb10"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA A100-SXM4-80GB", "a100-80g"),
        ("NVIDIA A100 80GB PCIe", "a100-80g-pcie"),
        ("Tesla T4", "t4"),
        ("NVIDIA H800 80GB HBM3", "h800"),
        ("NVIDIA H200 NVL", "h200-nvl"),
        ("NVIDIA B300 SXM6 AC", "b300"),
        ("AMD Instinct MI300X", "mi300x"),
        # and as people type them
        ("rtx4090", "rtx-4090"),
        ("RTX 4090", "rtx-4090"),
        ("h100-sxm", "h100"),
        ("H800", "h800"),
        ("L20", "l20"),
        ("mi355x", "mi355x"),
        ("RTX 5070 Ti", "rtx-5070-ti"),
        ("h20", "h20"),
        ("gb200", "gb200"),
    ],
)
def test_gpus_by_the_names_nvidia_smi_prints(name, key):
    assert gpu(name).key == key


def test_every_spelling_names_one_gpu():
    from hybridplan.gpus import _norm

    seen: dict[str, str] = {}
    for g in GPUS:
        for n in {_norm(x) for x in (g.key, g.name, *g.aliases)}:
            assert seen.setdefault(n, g.key) == g.key, f"{n!r}: {seen[n]} and {g.key}"


def test_an_unknown_gpu_suggests_the_nearest(run_cli):
    one_line_error(
        *run_cli("fit", "nemotron-h", "--gpu-type", "rtx4900"), "unknown GPU 'rtx4900'", "did you mean rtx-4090"
    )


def test_a_datasheet_figure_is_said(run_cli):
    d = _fit(run_cli, "nemotron-h", "--gpu-type", "h800", "--ctx", "8192", "--engine", "vllm")
    # the NVIDIA H800 SXM datasheet's 80 GB HBM3, the figure hybridplan/gpus.py records for h800 (read as GiB)
    assert d["vllm"]["memory"]["gpu_bytes"] == 80 * GiB
    assert any("datasheet" in n for n in d["notes"])


def test_gpus_command_lists_every_gpu(run_cli):
    code, out, _ = run_cli("gpus", "--json")
    assert code == 0
    listed = json.loads(out)
    rows = listed["gpus"] if isinstance(listed, dict) else listed
    assert [r["key"] for r in rows] == [g.key for g in GPUS]
    code, out, _ = run_cli("gpus")
    assert code == 0 and all(g.key in out for g in GPUS)


# --- vLLM: what each release takes off ------------------------------------------------------------------------


def _vllm_memory(run_cli, *args):
    return _fit(run_cli, "llama-3.1-8b", "--ctx", "8192", "--engine", "vllm", *args)["vllm"]["memory"]


def test_vllm_requested_memory_is_the_total_times_the_utilization(run_cli):
    # vllm/v1/worker/utils.py request_memory (0.14.0 on): ceil(total × gpu_memory_utilization); the default
    # utilization is 0.92 from 0.20.0 (vllm/config/cache.py), 0.9 before
    mem = _vllm_memory(run_cli, "--gpu-type", "h100", "--vllm-version", "0.20.1")
    assert mem["utilization"] == 0.92 and mem["requested_bytes"] == ceil(85_028_896_768 * 0.92)
    mem = _vllm_memory(run_cli, "--gpu-type", "h100", "--vllm-version", "0.19.1")
    assert mem["utilization"] == 0.9 and mem["requested_bytes"] == ceil(85_028_896_768 * 0.9)
    # up to 0.13.0 the product is truncated (vllm/v1/worker/gpu_worker.py)
    mem = _vllm_memory(run_cli, "--gpu-type", "h100", "--vllm-version", "0.13.0")
    assert mem["requested_bytes"] == int(85_028_896_768 * 0.9)


def test_vllm_subtracts_its_cuda_graph_estimate_from_0_20_0_unless_eager(run_cli):
    # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS defaults to "0" in 0.19.1's vllm/envs.py and to "1" in 0.20.0's
    assert _vllm_memory(run_cli, "--gpu-type", "h100", "--vllm-version", "0.19.1")["cudagraph_bytes"] == 0
    with_graphs = _vllm_memory(run_cli, "--gpu-type", "h100", "--vllm-version", "0.20.0")
    assert with_graphs["cudagraph_bytes"] > 0 and "CUDA graphs" in with_graphs["estimated"]
    eager = _vllm_memory(run_cli, "--gpu-type", "h100", "--vllm-version", "0.20.0", "--enforce-eager")
    assert eager["cudagraph_bytes"] == 0
    assert eager["kv_budget_bytes"] - with_graphs["kv_budget_bytes"] == with_graphs["cudagraph_bytes"]


def test_vllm_profiling_peak_follows_max_num_seqs_times_the_vocabulary(run_cli):
    # the sampler's dummy pass holds min(max_num_seqs, max_num_batched_tokens) rows of logits
    # (gpu_model_runner.py _dummy_sampler_run): halving the rows halves that part, whatever the context
    a = _vllm_memory(run_cli, "--gpu-type", "h100", "--max-num-seqs", "512")["activation_bytes"]
    b = _vllm_memory(run_cli, "--gpu-type", "h100", "--max-num-seqs", "256")["activation_bytes"]
    c = _fit(
        run_cli, "llama-3.1-8b", "--ctx", "65536", "--engine", "vllm", "--gpu-type", "h100", "--max-num-seqs", "256"
    )["vllm"]["memory"]["activation_bytes"]
    assert a - b == b - (2 * b - a) and a > b and b == c
    vocab = 128_256  # llama-3.1-8b's config
    assert a - b == pytest.approx(256 * vocab * 14, abs=1)  # 14 B a logit element from 0.13.0


def test_vllm_default_max_num_seqs_follows_the_gpu():
    # vllm/engine/arg_utils.py get_batch_defaults (0.33.0): 1024 from 70 GiB up, except A100s; 256 below
    from hybridplan.engines.vllm.defaults import batch_defaults, device

    rel = vllm_release("0.33.0")
    for key, seqs in (("h100", 1024), ("h200", 1024), ("a100-80g", 256), ("l40s", 256), ("rtx-4090", 256)):
        assert batch_defaults(rel, device(gpu(key))).max_num_seqs == seqs, key
    # GB10 is small in 0.33.0 by is_gb10, and in 0.32.0 because NVML's memory query fails there and
    # get_batch_defaults reads 0 bytes (vllm/platforms/cuda.py has no fallback before 0.33.0)
    assert batch_defaults(rel, device(gpu("gb10"))).max_num_seqs == 256
    assert batch_defaults(vllm_release("0.32.0"), device(gpu("gb10"))).max_num_seqs == 256


def test_vllm_non_torch_memory_follows_the_interconnect(run_cli):
    # at TP 2, about 2 GiB of NCCL buffers over an NVLink switch (an H100 sweep's DEBUG breakdown at 0.19.0:
    # 2.07–2.21 GiB), well under 1 GiB over PCIe (RTX 3090, T4 and L40S logs)
    def non_torch(gpu_type, tp):
        return (
            _fit(run_cli, "llama-3.1-8b", "--ctx", "8192", "--engine", "vllm", "--gpu-type", gpu_type, "--tp", str(tp))[
                "vllm"
            ]["memory"]["non_torch_bytes"]
            / GiB
        )

    assert non_torch("h100", 2) > 2 > 1 > non_torch("l40s", 2) > non_torch("l40s", 1)
    assert gpu("h100").nvswitch and not gpu("l40s").nvswitch and not gpu("h100-pcie").nvswitch


def test_vllm_non_torch_memory_grows_with_tp(run_cli):
    one = _fit(run_cli, "qwen3-next-80b-a3b", "--ctx", "8192", "--engine", "vllm", "--gpu-type", "h200")
    two = _fit(run_cli, "qwen3-next-80b-a3b", "--ctx", "8192", "--engine", "vllm", "--gpu-type", "h200", "--tp", "2")
    assert two["vllm"]["memory"]["non_torch_bytes"] > one["vllm"]["memory"]["non_torch_bytes"]
    # the weights are sharded: each rank holds about half
    w1, w2 = one["vllm"]["memory"]["weights_bytes"], two["vllm"]["memory"]["weights_bytes"]
    assert 0.5 < w2 / w1 < 0.52


# --- SGLang: its fraction for the GPU -------------------------------------------------------------------------


def test_sglang_picks_its_mem_fraction_static_from_the_gpu(run_cli):
    # SGLang 0.5.23 (srt/arg_groups/memory_hook.py) on an H100, nvidia-smi 81559 MiB, TP 1, no speculative
    # decoding: chunk 8192 and decode graphs to 256 (60–160 GiB), so the reserve is
    # 512 + 8192·1.5 + 256·2 + 1024/8 = 13440 MiB, plus 8 MiB for each of the 58 prefill graph sizes up to
    # 8192 = 13904 MiB (above the 10 GiB floor); fraction round((81559 − 13904)/81559, 3) = 0.83
    d = _fit(run_cli, "nemotron-h-8b", "--ctx", "8192", "--engine", "sglang", "--gpu-type", "h100")
    assert d["sglang"]["memory"]["utilization"] == 0.83
    # given, it is used as given
    d = _fit(
        run_cli,
        "nemotron-h-8b",
        "--ctx",
        "8192",
        "--engine",
        "sglang",
        "--gpu-type",
        "h100",
        "--mem-fraction-static",
        "0.7",
    )
    assert d["sglang"]["memory"]["utilization"] == 0.7


def test_sglang_splits_what_the_fraction_leaves_after_the_weights(run_cli):
    mem = _fit(run_cli, "nemotron-h-8b", "--ctx", "8192", "--engine", "sglang", "--gpu-type", "h100")["sglang"][
        "memory"
    ]
    context = next(t["bytes"] for t in mem["terms"] if t["name"] == "CUDA context")
    # R = (free memory before loading) × mem_fraction_static − weights (model_runner.py _profile_available_bytes)
    assert mem["requested_bytes"] == int((mem["gpu_bytes"] - context) * 0.83)
    assert mem["kv_budget_bytes"] == mem["requested_bytes"] - mem["weights_bytes"]


def test_unified_memory_is_said(run_cli):
    code, out, _ = run_cli("fit", "nemotron-h-8b", "--ctx", "8192", "--gpu-type", "gb10")
    assert code in (0, 1) and "shares its memory with the host" in out
