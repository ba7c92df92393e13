"""What `speed` can price: every GPU hybridplan knows, a quantized variant's Hub id offline, a dataset's lengths,
and both engines' benchmarks."""

from __future__ import annotations

import pytest

from hybridplan.gpus import GPUS
from hybridplan.loader import load_model
from hybridplan.scenario import Budget, Scenario
from hybridplan.speed.bench import Workload, bench
from hybridplan.speed.gpus import DATASHEETS, datasheet

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("g", GPUS, ids=lambda g: g.key)
def test_every_gpu_prices_a_step(g):
    # a datasheet row for every GPU `hybridplan gpus` lists, with the figures a step needs and where they are read
    d = datasheet(g.key)
    assert d.hbm_gbps and d.bf16_tflops and d.link_gbps, g.key
    assert d.sheet and (d.url.startswith("https://") or "product brief" in d.sheet), g.key
    # fp8 and fp4 tensor cores never outrun the narrower format: fp4 ≥ fp8 ≥ bf16 where stated
    assert (d.fp8_tflops or d.bf16_tflops) >= d.bf16_tflops
    assert (d.fp4_tflops or d.fp8_tflops or 0) >= (d.fp8_tflops or 0)
    # a hybrid (LFM2-1.2B, 2.3 GB of bf16 weights) on one of these GPUs: the step and the benchmark are priced
    sc = Scenario(spec=load_model("lfm2-1.2b"), ctx=2048, budget=Budget(gpu_mem=g.total, gpu=g.key))
    b = bench(sc, d, Workload(1024, 128, 4, 8))
    assert b.decode.seconds > 0 and b.prefill.seconds > 0 and b.output_tok_s > 0


def test_datasheets_are_the_gpus():
    assert set(DATASHEETS) == {g.key for g in GPUS}


@pytest.fixture
def offline_hub(monkeypatch, tmp_path):
    """No Hub and an empty cache: a Hub id's config.json cannot be had."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))


@pytest.mark.parametrize("repo_id, base, scheme, bytes_per_param", [
    # NVIDIA's -FP8 releases are ModelOpt FP8: one byte a weight, per-tensor scales (hybridplan/weights/quant.py)
    ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-FP8", "nemotron-3-nano-30b-a3b", "modelopt fp8", 1.0),
    # Qwen's -FP8 are block-wise fp8: one byte and a float32 scale per 128 × 128 block, 1 + 4 / 16384
    ("Qwen/Qwen3.6-27B-FP8", "qwen3.6-27b", "fp8 (blocks 128×128)", 1 + 4 / 16384),
    # NVFP4: half a byte and an fp8 scale per 16 weights, 0.5 + 1 / 16
    ("nvidia/Qwen3.6-35B-A3B-NVFP4", "qwen3.6-35b-a3b", "modelopt nvfp4 (group 16)", 0.5 + 1 / 16),
    # MXFP4: half a byte and an e8m0 scale per 32, 0.5 + 1 / 32; AMD's name for Meta's model
    ("amd/Llama-3.3-70B-Instruct-MXFP4-Preview", "llama-3.3-70b-instruct", "mxfp4", 0.5 + 1 / 32),
    # AWQ int4, group 128 with 4-bit zero points: 0.5 + 2 / 128 + 0.5 / 128
    ("Qwen/Qwen3-8B-AWQ", "qwen3-8b", "awq int4 (group 128)", 0.5 + 2 / 128 + 0.5 / 128),
    # GPTQ int4, group 128, symmetric (the Marlin kernels drop the zeros): 0.5 + 2 / 128
    ("Qwen/Qwen3-8B-GPTQ-Int4", "qwen3-8b", "gptq int4 (group 128)", 0.5 + 2 / 128),
])
def test_a_quantized_variant_resolves_offline(offline_hub, repo_id, base, scheme, bytes_per_param):
    spec, shipped = load_model(repo_id), load_model(base)
    assert spec.architecture == shipped.architecture and spec.mixers == shipped.mixers and spec.ffn == shipped.ffn
    assert spec.quantization is not None and spec.quantization.kv_declared is None
    s = spec.quantization.weights_scheme()
    assert s.name == scheme and s.bytes_per_param == pytest.approx(bytes_per_param)
    assert any(repo_id in n and shipped.name in n and "suffix" in n for n in spec.notes)


def test_a_bf16_variant_drops_the_shipped_quantization(offline_hub):
    # the shipped Nemotron-3-Super spec is NVIDIA's FP8 release; its -BF16 sibling is the same model unquantized
    assert load_model("nemotron-3-super").quantization is not None
    spec = load_model("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16")
    assert spec.quantization is None and spec.mixers == load_model("nemotron-3-super").mixers
    assert any("unquantized" in n for n in spec.notes)


def test_an_unknown_suffix_is_refused_not_guessed(offline_hub):
    from hybridplan.errors import PlanError

    with pytest.raises(PlanError, match="does not read as a quantization"):
        load_model("Qwen/Qwen3-8B-Int3-Experimental")
    # a name that is no shipped spec's: the Hub's own refusal
    with pytest.raises(PlanError, match="not in the local Hugging Face cache"):
        load_model("Qwen/Qwen3-4B-FP8")


def _fit(capsys, *args):
    import json

    from hybridplan.cli import main

    code = main(["fit", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_qwen35_397b_at_tp8_on_h20s(capsys, offline_hub):
    # bf16 on the 96 GB H20: 396.8B parameters × 2 B / 8 ranks = 92.4 GiB of weights a GPU, more than vLLM's 0.92
    # of the 95.1 GiB CUDA total and SGLang's static fraction of it: neither engine starts
    code, d = _fit(capsys, "qwen3.5-397b-a17b", "--tp", "8", "--gpu-type", "h20")
    assert code == 1 and not d["ok"] and d["vllm"]["starts"] is False and d["sglang"]["starts"] is False
    # the H20-3e (141 GB HBM3e, nvidia-smi 143771 MiB) holds the same bf16 weights with room for the caches
    code, d = _fit(capsys, "qwen3.5-397b-a17b", "--tp", "8", "--gpu-type", "h20-3e")
    assert code == 0 and d["ok"] and "starts" not in d["vllm"] and "starts" not in d["sglang"]
    # and Qwen's FP8 release (a byte a weight: about 46 GiB a rank) starts on the 96 GB H20, read offline
    code, d = _fit(capsys, "Qwen/Qwen3.5-397B-A17B-FP8", "--tp", "8", "--gpu-type", "h20")
    assert code == 0 and d["ok"] and "starts" not in d["vllm"] and "starts" not in d["sglang"]
