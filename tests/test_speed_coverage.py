"""What `speed` can price: every GPU hybridplan knows, a quantized variant's Hub id offline, a dataset's lengths,
and both engines' benchmarks."""

from __future__ import annotations

import pytest
from msgspec.structs import replace

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


@pytest.mark.parametrize(
    "repo_id, base, scheme, bytes_per_param",
    [
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
    ],
)
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
        load_model("Qwen/Qwen3-14B-FP8")


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


def _sc(engine="vllm", gpu_key="h100", model="nemotron-h", ctx=4096):
    from hybridplan.gpus import gpu

    g = gpu(gpu_key)
    return Scenario(spec=load_model(model), ctx=ctx, engine=engine, budget=Budget(gpu_mem=g.total, gpu=g.key))


def test_dataset_of_one_length_is_that_benchmark():
    from hybridplan.speed.dataset import Mix, bench_mix

    # every record 1,024 in / 128 out: the mix's figures are those of the single-length benchmark, exactly
    sc, g = _sc(), datasheet("h100")
    mix = bench_mix(sc, g, Mix(((1024, 128),) * 3, concurrency=8, num_prompts=300))
    one = bench(sc, g, Workload(1024, 128, 8, 300))
    for f in ("running", "output_tok_s", "mean_ttft_s", "median_ttft_s", "tpot_s"):
        assert getattr(mix, f) == pytest.approx(getattr(one, f), rel=1e-12), f


def test_dataset_of_one_length_keeps_the_benchmarks_decode_mode():
    from hybridplan.speed.dataset import Mix, bench_mix
    from hybridplan.speed.model import Efficiency

    # a host time the engine hides (vLLM's async scheduling from 0.11.2, no speculative decoding: overlapped) and
    # one it adds (speculative decoding turns async scheduling off, vllm/config/vllm.py), and a draft's passes at
    # acceptance 0.6: a one-length mix prices each exactly as its single-length benchmark
    eff = Efficiency(vllm_step_us=500.0, vllm_request_us=20.0)
    g = datasheet("h100")
    for sc, acceptance in ((_sc(), None), (replace(_sc(), spec_tokens=2), 0.6)):
        mix = bench_mix(sc, g, Mix(((1024, 128),) * 3, concurrency=8, num_prompts=300, acceptance=acceptance), eff)
        one = bench(sc, g, Workload(1024, 128, 8, 300, acceptance), eff)
        assert mix.decode.overlap == one.decode.overlap == (acceptance is None)
        assert mix.draft_s == one.draft_s and (mix.draft_s is None) == (acceptance is None)
        for f in ("running", "output_tok_s", "mean_ttft_s", "median_ttft_s", "tpot_s"):
            assert getattr(mix, f) == pytest.approx(getattr(one, f), rel=1e-12), f


def test_dataset_mix_at_concurrency_one_is_each_request_in_turn():
    from hybridplan.speed.dataset import Mix, bench_mix

    # at --max-concurrency 1 the benchmark runs the requests one after another: each TTFT is its own prompt's
    # prefill alone, the mean TTFT their mean, and the output throughput all outputs over the sum of the requests'
    # times (each: its prefill and its output at one token a decode step)
    sc, g = _sc(), datasheet("h100")
    lengths = ((512, 64), (1536, 192), (4000, 32))
    mix = bench_mix(sc, g, Mix(lengths, concurrency=1))
    alone = [bench(sc, g, Workload(i, o, 1, 1)) for i, o in lengths]
    assert mix.running == 1
    assert mix.mean_ttft_s == pytest.approx(sum(b.mean_ttft_s for b in alone) / 3, rel=1e-12)
    assert mix.median_ttft_s == pytest.approx(sorted(b.mean_ttft_s for b in alone)[1], rel=1e-12)
    total_s = sum(o / b.output_tok_s for (_, o), b in zip(lengths, alone))
    # the decode step of the mix is priced at its lifetime-weighted context, each alone at its own: within 2 %
    assert mix.output_tok_s == pytest.approx(sum(o for _, o in lengths) / total_s, rel=0.02)
    # the long prompt weighs on the mean TTFT more than one of the mean length would
    mean_len = bench(sc, g, Workload(round(sum(i for i, _ in lengths) / 3), 96, 1, 3))
    assert mix.mean_ttft_s > mean_len.mean_ttft_s


def test_dataset_lengths_files(tmp_path, capsys):
    from hybridplan.cli import main
    from hybridplan.errors import PlanError
    from hybridplan.speed.dataset import read

    (tmp_path / "a.jsonl").write_text('{"prompt_len": 100, "output_len": 20}\n\n{"input": 300, "output": 40}\n')
    (tmp_path / "b.csv").write_text("input_tokens,output_tokens,extra\n100,20,x\n300,40,y\n")
    assert read(tmp_path / "a.jsonl") == read(tmp_path / "b.csv") == ((100, 20), (300, 40))
    (tmp_path / "bad.jsonl").write_text('{"input": 100, "output": 20}\n{"input": 0, "output": 20}\n')
    with pytest.raises(PlanError, match="line 2: input must be a positive whole number"):
        read(tmp_path / "bad.jsonl")
    (tmp_path / "none.csv").write_text("a,b\n1,2\n")
    with pytest.raises(PlanError, match="line 2 names no prompt and output lengths"):
        read(tmp_path / "none.csv")
    assert (
        main(
            [
                "speed",
                "nemotron-h",
                "--gpu-type",
                "h100",
                "--dataset-lengths",
                str(tmp_path / "a.jsonl"),
                "--input",
                "100",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--dataset-lengths" in err
    assert (
        main(
            [
                "speed",
                "nemotron-h",
                "--gpu-type",
                "h100",
                "--dataset-lengths",
                str(tmp_path / "a.jsonl"),
                "--concurrency",
                "2",
                "--json",
            ]
        )
        == 0
    )
    import json

    d = json.loads(capsys.readouterr().out)
    assert d["dataset"] == "a.jsonl" and d["bench"]["input"] == 200 and d["bench"]["output"] == 30


def test_engine_both_benchmarks_each_engine_at_its_own_batch(capsys):
    import json

    from hybridplan import engines
    from hybridplan.cli import main

    # concurrency 1,000 of 1,024 + 128 tokens: each engine runs what its own sizing admits (hybridplan fit)
    assert (
        main(
            [
                "speed",
                "nemotron-h",
                "--gpu-type",
                "h100",
                "--input",
                "1024",
                "--output",
                "128",
                "--concurrency",
                "1000",
                "--engine",
                "both",
                "--json",
            ]
        )
        == 0
    )
    d = json.loads(capsys.readouterr().out)
    assert [b["engine"] for b in d["benches"]] == ["vllm", "sglang"]
    sglang = engines.get("sglang").fit(_sc("sglang", ctx=1152)).to_dict()["max_running_requests"]
    vfit = engines.get("vllm").fit(_sc("vllm", ctx=1152)).to_dict()
    mode = vfit["modes"][vfit["default_mode"]]
    vllm = min(mode["max_num_seqs"], int(mode["max_concurrency"]))
    assert [b["running"] for b in d["benches"]] == [min(1000, vllm), min(1000, sglang)]
    assert vllm != sglang
