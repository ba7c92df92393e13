"""The step's fixed costs, each pinned by its derivation at a stated shape: kernels counted from the engines' model
files, CUDA-graph coverage and host overlap by engine and release, the sampler's bytes, the all-reduce tables per
link, the host time's place in the step, the speculative draft's pass, and the held-out ranges beside a figure.
No figure here is a fitted output."""

from __future__ import annotations

import json

import pytest
from msgspec.structs import replace

from hybridplan.engines.sglang import kernels as sglang_kernels
from hybridplan.engines.sglang.releases import release as sglang_release
from hybridplan.engines.sglang.settings import SglangSettings
from hybridplan.engines.vllm import kernels as vllm_kernels
from hybridplan.engines.vllm.releases import release as vllm_release
from hybridplan.engines.vllm.settings import VllmSettings
from hybridplan.gpus import gpu
from hybridplan.loader import load_model
from hybridplan.scenario import Budget, Scenario
from hybridplan.speed import ranges
from hybridplan.speed.costs import decode_mode, draft_step, graph_max_batch
from hybridplan.speed.gpus import datasheet
from hybridplan.speed.model import (
    ALLREDUCE_PCIE_TP8_US,
    ALLREDUCE_XGMI_US,
    Efficiency,
    allreduce_time,
    kind_time,
    link_class,
    step_time,
)
from hybridplan.speed.work import SAMPLING, Step, Work, decode_step, vocab_size


def _sc(model: str, gpu_key: str = "h100", engine: str = "vllm", **kw) -> Scenario:
    return Scenario(
        spec=load_model(model), ctx=4096, engine=engine, budget=Budget(gpu_mem=gpu(gpu_key).total, gpu=gpu_key), **kw
    )


def test_kernels_per_block_are_the_named_kernels_times_the_layers():
    # Qwen3-Next-80B: 48 layers, every fourth full attention (12) and the rest GDN (36), an MoE FFN on each
    spec = load_model("qwen3-next")
    assert spec.layer_counts["gdn"] == 36 and spec.layer_counts["attention"] == 12
    # vLLM 0.14 qwen3_next.py: norm, 2 in-projections, cat, conv update, 3 copies, gating, recurrent, gated norm,
    # out_proj = 12; SGLang 0.5.16 fuses the split/cat/copies into one kernel and the gating into the update = 8
    assert len(vllm_kernels.DECODE_KERNELS["gdn"]) == 12 and len(sglang_kernels.DECODE_KERNELS["gdn"]) == 8
    for engine, per_gdn in (("vllm", 12), ("sglang", 8)):
        step = decode_step(_sc("qwen3-next", "h200", engine, tp=4), 1, 1000)
        kinds = {w.kind: w for w in step.kinds}
        assert kinds["gdn"].kernels == 36 * per_gdn
        # attention: norm, qkv, rotary, cache write, attention, o_proj; the fused MoE: norm, router, top-k, align,
        # two grouped GEMMs, the activation, the sum
        assert kinds["attention"].kernels == 12 * 6
        assert kinds["moe"].kernels == 48 * 8


def test_the_sampler_reads_and_writes_the_vocabulary_per_kernel():
    sc = _sc("llama-3.1-8b")
    vocab = vocab_size(sc.spec)
    assert vocab == 128256  # the config's vocab_size
    s = next(w for w in decode_step(sc, 4, 100).kinds if w.kind == SAMPLING)
    # vLLM: fp32 cast 2+4, temperature 4+4, softmax 4+4, exponential 4, div 8+4, argmax 4 = 42 bytes a logit
    assert s.logit_bytes == 4 * vocab * 42 and s.kernels == 6
    s = next(w for w in decode_step(replace(sc, engine="sglang"), 4, 100).kinds if w.kind == SAMPLING)
    assert s.logit_bytes == 4 * vocab * (6 + 8 + 8 + 4) and s.kernels == 4


def test_cuda_graph_coverage_by_engine():
    sc = _sc("llama-3.1-8b")
    # vLLM: min(2 · max_num_seqs, 512); the H100's serve default is 1,024 sequences, so 512
    assert graph_max_batch(sc) == 512
    assert graph_max_batch(replace(sc, vllm=replace(sc.vllm, max_num_seqs=64))) == 128
    assert decode_mode(sc, 512)[0] and not decode_mode(sc, 513)[0]
    assert graph_max_batch(replace(sc, vllm=replace(sc.vllm, enforce_eager=True))) == 0
    # SGLang on an 80 GB GPU below TP 4: cuda_graph_max_bs 256 (defaults.py decode_graph_bs, 60–160 GiB)
    assert graph_max_batch(replace(sc, engine="sglang")) == 256


def test_host_overlap_by_engine_and_release():
    sc = _sc("llama-3.1-8b")
    assert decode_mode(replace(sc, vllm=VllmSettings(release=vllm_release("0.14.0"))), 8)[1]
    # async scheduling is off by default before 0.11.2, and with speculative decoding
    assert not decode_mode(replace(sc, vllm=VllmSettings(release=vllm_release("0.11.0"))), 8)[1]
    assert not vllm_kernels.overlaps_cpu(replace(sc, spec_tokens=2))[0]
    sg = replace(sc, engine="sglang", sglang=SglangSettings(release=sglang_release("0.5.16")))
    assert decode_mode(sg, 8)[1]
    assert not decode_mode(replace(sg, sglang=replace(sg.sglang, overlap=False)), 8)[1]


def test_host_time_overlaps_or_adds():
    # one kind reading 1.675 GB on an H100 (3,350 GB/s) at hbm 0.5, so at 1,675 GB/s: 1 ms of GPU time
    g = datasheet("h100")
    w = Work("mlp", 1, weight_bytes=1.675e9, kernels=0)
    step = Step("decode", 4, 100, 4, (w,))
    eff = Efficiency(hbm=0.5, vllm_step_us=1000.0, vllm_request_us=500.0)  # host: 1 ms + 4 · 0.5 ms = 3 ms
    over = step_time(step, g, eff, overlap=True)
    assert over.host_s == pytest.approx(3e-3) and over.seconds == pytest.approx(3e-3)  # max(1 ms, 3 ms)
    assert step_time(step, g, eff, overlap=False).seconds == pytest.approx(4e-3)  # 1 ms + 3 ms
    # SGLang's coefficients apply to an SGLang step
    sg = replace(eff, vllm_step_us=0.0, vllm_request_us=0.0, sglang_step_us=200.0)
    assert step_time(replace(step, engine="sglang"), g, sg).seconds == pytest.approx(1.2e-3)


def test_eager_kernels_wait_on_the_host_launch():
    g = datasheet("h100")
    w = Work("mlp", 1, weight_bytes=1.0, kernels=10)  # no work to speak of: the launches bound it
    eff = Efficiency(kernel_floor_graph_us=1.0, kernel_floor_eager_us=6.0)
    assert kind_time(w, g, eff, "bf16", graphs=True).seconds == pytest.approx(10e-6, rel=1e-3)
    eager = kind_time(w, g, eff, "bf16", graphs=False)
    assert eager.seconds == pytest.approx(60e-6) and eager.bound == "launch overhead"


def test_allreduce_by_link():
    assert link_class(datasheet("h100")) == "nvlink" and link_class(datasheet("b200")) == "nvlink"
    assert link_class(datasheet("mi300x")) == "xgmi" and link_class(datasheet("rtx-4090")) == "pcie"
    eff = Efficiency()
    # xGMI (SGLang PR #6619, MI300X): 16 KB at 7.26 µs; halfway from 32 KB (7.58) to 256 KB (14.39): 10.985 µs
    s = Step("decode", 1, 1, 1, (), allreduces=1, allreduce_bytes=16384)
    assert allreduce_time(s, datasheet("mi300x"), eff, 8)[0] == pytest.approx(7.26e-6)
    s = replace(s, allreduce_bytes=(32768 + 262144) / 2)
    assert allreduce_time(s, datasheet("mi300x"), eff, 8)[0] == pytest.approx((7.58 + 14.39) / 2 * 1e-6)
    assert ALLREDUCE_XGMI_US[0] == (2048, 7.18)
    # PCIe: NCCL's ring, 42.14 µs at 8 GPUs, 3/7 of it at TP 4; 8 KiB over PCIe Gen4 (64 GB/s both ways, 32 one
    # way, at link 0.7): 2 · 3/4 · 8192 B / 22.4 GB/s on top
    s = replace(s, allreduce_bytes=8192)
    want = ALLREDUCE_PCIE_TP8_US * 3 / 7 * 1e-6 + 1.5 * 8192 / (32e9 * 0.7)
    assert allreduce_time(s, datasheet("rtx-4090"), eff, 4)[0] == pytest.approx(want)


def test_the_draft_pass_is_one_block_and_the_head():
    sc = _sc("qwen3-next", "h200", tp=4, spec_tokens=2)
    step = decode_step(sc, 8, 1000)  # 8 requests verify 3 tokens each: 24 tokens
    assert step.tokens == 24
    d = draft_step(step, sc)
    kinds = {w.kind: w for w in d.kinds}
    # one attention block (6 kernels) and one MoE block (8), the LM head (2) and the sampler (6); no GDN layer
    assert "gdn" not in kinds and d.tokens == 8
    assert kinds["attention"].kernels == 6 and kinds["moe"].kernels == 8 and kinds["lm_head"].kernels == 2
    assert kinds[SAMPLING].kernels == 6
    whole = {w.kind: w for w in step.kinds}
    # the LM head's weights are read once a pass, whole; the sampler's logits for 8 rows, not 24
    assert kinds["lm_head"].weight_bytes == pytest.approx(whole["lm_head"].weight_bytes)
    assert kinds[SAMPLING].logit_bytes == pytest.approx(whole[SAMPLING].logit_bytes / 3)
    # one attention layer's weights of the twelve
    assert kinds["attention"].weight_bytes == pytest.approx(whole["attention"].weight_bytes / 12)


def test_ranges_fall_back_to_the_pooled_cell(monkeypatch):
    fake = {
        "ranges": [
            {
                "set": "hybrid",
                "figure": "TPOT",
                "regime": "concurrency 1",
                "rows": 3,
                "p10": 0.5,
                "median": 1,
                "p90": 2,
            },
            {"set": "hybrid", "figure": "TPOT", "regime": "all", "rows": 20, "p10": 0.8, "median": 1, "p90": 1.3},
            {
                "set": "hybrid",
                "figure": "TTFT",
                "regime": "mid (2-127)",
                "rows": 9,
                "p10": 0.9,
                "median": 1,
                "p90": 1.1,
            },
        ]
    }
    monkeypatch.setattr(ranges, "table", lambda: fake)
    r = ranges.lookup(True, "TPOT", 1)  # 3 rows < MIN_ROWS: the set's cell over every regime
    assert r.pooled and (r.p10, r.p90, r.rows) == (0.8, 1.3, 20)
    assert r.around(10.0) == pytest.approx((8.0, 13.0))
    r = ranges.lookup(True, "TTFT", 64)
    assert not r.pooled and r.regime == "mid (2-127)" and r.around(100.0) == pytest.approx((90.0, 110.0))
    assert ranges.lookup(False, "TPOT", 1) is None  # no reference cell


def test_the_shipped_ranges_file_names_its_command():
    t = json.loads(ranges.PATH.read_text())
    assert "validation/speed.py" in t["command"] and "--write-ranges" in t["command"]
    assert t["ranges"]
    for c in t["ranges"]:
        assert c["set"] in ("hybrid", "reference") and c["figure"] in ("TPOT", "TTFT", "output tok/s")
        assert c["regime"] in (*ranges.REGIMES, "all")
        assert 0 < c["p10"] <= c["median"] <= c["p90"] and c["rows"] >= 1


def test_speed_json_carries_the_range_beside_each_figure(capsys):
    from hybridplan.cli import main

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
                "8",
                "--json",
            ]
        )
        == 0
    )
    d = json.loads(capsys.readouterr().out)
    assert d["schema_version"] == 3
    for key in ("output_tok_s", "mean_ttft_ms", "mean_tpot_ms"):
        r = d["bench"]["ranges"][key]
        if r is not None:
            assert r["p10"] == pytest.approx(d["bench"][key] * r["ratio_p10"])
            assert r["p90"] == pytest.approx(d["bench"][key] * r["ratio_p90"])
            assert r["set"] == "hybrid" and r["regime"] in ("mid (2-127)",)
    assert "decode_host_ms" in d["bench"] and d["bench"]["draft_ms"] is None


def test_each_recurrent_kernel_at_its_own_fraction():
    g = datasheet("h200")  # 4,800 GB/s
    eff = Efficiency(hbm=0.8, gdn_state_hbm=0.4, kernel_floor_graph_us=0.0)
    # a GDN layer's decode update moving 48 MB of state: at 0.4 of 4,800 GB/s, 25 µs (weights at 0.8 elsewhere)
    assert kind_time(Work("gdn", 1, state_bytes=48e6), g, eff, "bf16", True).seconds == pytest.approx(25e-6)
    # a Mamba-2 layer's state is not GDN's: at hbm until a calibration or its own fraction says otherwise
    assert kind_time(Work("mamba2", 1, state_bytes=48e6), g, eff, "bf16", True).seconds == pytest.approx(12.5e-6)
    # Mamba-2's chunked scan at ssd_scan of the bf16 peak (989 TFLOP/s): 98.9 TFLOP at 0.2 takes 0.5 s
    scan = Efficiency(tensor=0.5, ssd_scan=0.2, kernel_floor_graph_us=0.0)
    assert kind_time(Work("mamba2", 1, scan_flops=98.9e12), g, scan, "bf16", True).seconds == pytest.approx(0.5)
    # a profile's calibration (state_hbm) wins over the fitted per-architecture fraction
    cal = replace(eff, state_hbm=0.6)
    assert kind_time(Work("gdn", 1, state_bytes=48e6), g, cal, "bf16", True).seconds == pytest.approx(
        48e6 / (4800e9 * 0.6)
    )


def test_plan_prints_and_carries_the_range(capsys):
    from hybridplan.cli import main

    assert main(["plan", "nemotron-h", "--ctx", "8k", "--concurrency", "16", "--gpu-type", "h100", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["schema_version"] == 2
    priced = [p for p in d["plans"] if p["decode"] and p["decode"]["tokens_per_s_per_gpu"]]
    assert priced and any(p["decode_range"] for p in priced)
    for p in priced:
        r = p["decode_range"]
        if r is not None:  # the figure times the cell's ratios
            assert r["figure"] == "output tok/s" and r["set"] == "hybrid"
            assert r["p10"] == pytest.approx(p["decode"]["tokens_per_s_per_gpu"] * r["ratio_p10"])
    assert main(["plan", "nemotron-h", "--ctx", "8k", "--concurrency", "16", "--gpu-type", "h100"]) == 0
    assert "tok/s/GPU range" in capsys.readouterr().out
