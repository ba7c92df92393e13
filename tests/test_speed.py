"""The speed model's terms, each pinned by a derivation from the config (in the comment), not by its output."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from msgspec.structs import replace

from hybridplan.errors import PlanError
from hybridplan.gpus import GPUS, gpu
from hybridplan.loader import load_model
from hybridplan.scenario import Budget, Scenario
from hybridplan.speed.bench import Workload, bench, running_cap
from hybridplan.speed.gpus import DATASHEETS, datasheet
from hybridplan.speed.model import DEFAULT, Efficiency, comm_time, kind_time, step_time
from hybridplan.speed.work import (
    Experts,
    Work,
    chunk_scan_flops,
    decode_step,
    experts,
    prefill_step,
    rank_weights,
    scan_layer_work,
)

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]


def _kind(step, kind):
    return next(w for w in step.kinds if w.kind == kind)


def test_distinct_experts_touched():
    # one token touches exactly its top-k; E·(1 − (1 − k/E)^B) for B = 32 at E = 512, k = 10
    ex = Experts(512, 10)
    assert ex.touched(1) == pytest.approx(10)
    assert ex.touched(32) == pytest.approx(512 * (1 - (502 / 512) ** 32))
    assert ex.touched(100_000) == pytest.approx(512)
    # Qwen3-Next's config: num_experts 512, num_experts_per_tok 10
    assert experts(load_model("qwen3-next")) == Experts(512, 10)
    assert experts(load_model("llama-3.1-8b")) is None


def test_decode_kv_bytes_llama():
    # Llama-3.1-8B: 32 layers × 8 KV heads × 128 × (K and V) × 2 B = 131,072 B a token; 4 sequences read 1,000
    # tokens each and write one: 4 · 1,000 · 131,072 + 4 · 131,072
    sc = Scenario(spec=load_model("llama-3.1-8b"), ctx=2048)
    assert _kind(decode_step(sc, 4, 1000), "attention").kv_bytes == 4 * 1000 * 131_072 + 4 * 131_072


def test_decode_attention_flops_llama():
    # QKᵀ and PV: 2 matmuls × 2 FLOPs × 32 heads × 128 per key, 1,000 keys, 32 layers, batch 4; plus the
    # projections: 2 FLOPs a parameter of the 32 attention blocks (q 4096², k and v 4096·1024, o 4096²) per token
    sc = Scenario(spec=load_model("llama-3.1-8b"), ctx=2048)
    proj = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024)
    assert _kind(decode_step(sc, 4, 1000), "attention").flops == 4 * (32 * 4 * 32 * 128 * 1000 + 2 * proj)


def test_decode_state_bytes_nemotron_h():
    # Nemotron-H-8B, 24 Mamba-2 layers: conv (8192 + 2·8·128) × 3 bf16 = 61,440 B, SSM 128 × 64 × 128 fp32
    # = 4,194,304 B (README's size example); read and written every step, 2 sequences
    sc = Scenario(spec=load_model("nemotron-h"), ctx=8192)
    assert _kind(decode_step(sc, 2, 100), "mamba2").state_bytes == 2 * 2 * 24 * (61_440 + 4_194_304)


def test_decode_weights_llama_leave_the_embedding():
    # an untied embedding is read for the batch's rows only: the step reads every weight but
    # embed_tokens, 128,256 × 4,096 × 2 B
    spec = load_model("llama-3.1-8b")
    rw = rank_weights(spec, 1, "bfloat16")
    read = sum(w.weight_bytes for w in decode_step(Scenario(spec=spec, ctx=2048), 1, 10).kinds)
    assert read == pytest.approx(rw.total - 128_256 * 4096 * 2)


def test_moe_routed_weights_scale_with_experts_touched():
    # Qwen3-Next routed experts: 48 layers × 512 × (2048 · 2·512 up + 512 · 2048 down) parameters
    spec = load_model("qwen3-next")
    rw = rank_weights(spec, 1, "bfloat16")
    assert rw.routed_params == 48 * 512 * (2048 * 1024 + 512 * 2048)
    sc = Scenario(spec=spec, ctx=4096)
    moe_all = dict(rw.bytes)["moe"]
    one = _kind(decode_step(sc, 1, 100), "moe").weight_bytes
    assert one == pytest.approx(moe_all - rw.routed_bytes * (1 - 10 / 512))
    # a large batch touches nearly every expert
    assert _kind(decode_step(sc, 4096, 100), "moe").weight_bytes == pytest.approx(moe_all, rel=1e-6)


def test_ssd_chunk_flops_granite():
    # granite-4.0-h-small: 128 heads × 64, state 128, chunk 256: per token and head
    # 2·256·128 + 2·256·64 + 4·64·128 = 131,072 FLOPs
    m = next(x for x in load_model("granite-4.0-h-small").recurrent if x.kind == "mamba2")
    assert chunk_scan_flops(m, 1, 1000, 256) == 1000 * 128 * 131_072


def test_ssd_bytes_fused_and_unfused():
    # per token: x 128·64·2 = 16,384 B, B and C 128·2 = 256 B each, dt 128·4 = 512 B, y 16,384 B; chunk states
    # 128·64·128·4 = 4 MiB each, 4 chunks of 256 in 1,024 tokens
    m = next(x for x in load_model("granite-4.0-h-small").recurrent if x.kind == "mamba2")
    state = 4 * 128 * 64 * 128 * 4
    fused = scan_layer_work(m, 1, 1024, 256, fused=True)
    assert fused.scan_flops == chunk_scan_flops(m, 1, 1024, 256) and fused.flops == 0
    assert fused.state_bytes == 1024 * (16_384 + 2 * 256 + 512 + 16_384) + 2 * state
    # unfused: x twice, B and C twice each, dt four times, the C·Bᵀ scores (256 fp32 a token) twice, states 4×
    unfused = scan_layer_work(m, 1, 1024, 256)
    assert unfused.state_bytes == 1024 * (2 * 16_384 + 4 * 256 + 4 * 512 + 2 * 256 * 4 + 16_384) + 4 * state
    assert (fused.kernels, unfused.kernels) == (1, 5)


def test_prefill_attention_flops_are_causal():
    # Llama-3.1-8B, 2,048 tokens: each query sees half the keys on average: 4 · 32 heads · 128 · 2048 · 1024
    # a layer, 32 layers, beside 2 FLOPs a parameter of the projections per token
    sc = Scenario(spec=load_model("llama-3.1-8b"), ctx=4096)
    proj = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024)
    assert _kind(prefill_step(sc, 2048), "attention").flops == 32 * 4 * 32 * 128 * 2048 * 1024 + 2 * proj * 2048


def test_kind_time_bounds():
    g = datasheet("h100")
    eff = Efficiency(hbm=0.5, tensor=0.5, kernel_floor_graph_us=0.0)
    # 1 GB at half of 3,350 GB/s
    kt = kind_time(Work("mlp", 1, weight_bytes=1e9), g, eff, "bf16", graphs=True)
    assert kt.seconds == pytest.approx(1e9 / 1675e9) and kt.bound == "weights"
    # 1e15 FLOPs at half of 989 TFLOP/s beat 1 GB of memory time
    kt = kind_time(Work("mlp", 1, weight_bytes=1e9, flops=1e15), g, eff, "bf16", graphs=True)
    assert kt.seconds == pytest.approx(1e15 / 494.5e12) and kt.bound == "FLOPs"
    # fp8 weights run at the fp8 peak (1,979 TFLOP/s)
    assert kind_time(Work("mlp", 1, flops=1e15), g, eff, "fp8", graphs=True).seconds == pytest.approx(1e15 / 989.5e12)
    # ten kernels at a 3 µs floor and nothing else to do
    kt = kind_time(Work("mlp", 1, kernels=10), g, replace(eff, kernel_floor_eager_us=3.0), "bf16", graphs=False)
    assert kt.seconds == pytest.approx(30e-6) and kt.bound == "launch overhead"


def test_allreduce_time():
    # TP 2 over NVLink 4 (900 GB/s both ways, 450 one way, at 0.7): a ring all-reduce moves 2·(2−1)/2 of
    # each message; 64 all-reduces (32 mixers + 32 MLPs) of 8 tokens × 4,096 × 2 B, 8 µs each at the least
    sc = Scenario(spec=load_model("llama-3.1-8b"), ctx=2048, tp=2)
    step = decode_step(sc, 8, 100)
    assert step.allreduces == 64 and step.allreduce_bytes == 8 * 4096 * 2
    eff = Efficiency(link=0.7, allreduce_us=8.0)
    assert comm_time(step, datasheet("h100"), eff, 2) == pytest.approx(64 * (8e-6 + 8 * 4096 * 2 / (450e9 * 0.7)))


def test_bench_at_concurrency_one_is_each_request_alone():
    # --max-concurrency 1: each request finds the engine idle, so its TTFT is its prompt's prefill alone (host time
    # added), its TPOT (latency − TTFT) / (O − 1) the decode step of one request, and the run's output tok/s
    # N·O over N requests each taking t_pf + (O − 1)·t_dec
    sc = Scenario(spec=load_model("nemotron-h"), ctx=8192)
    wl = Workload(1024, 256, 1, num_prompts=4)
    b = bench(sc, datasheet("h100"), wl)
    assert b.running == 1
    # each first token also takes the request's path outside the engine's steps (a fitted constant)
    path = DEFAULT.ttft_request_us * 1e-6
    assert b.mean_ttft_s == pytest.approx(b.prefill_s + path, rel=1e-12)
    assert b.median_ttft_s == pytest.approx(b.prefill_s + path, rel=1e-12)
    assert b.tpot_s == pytest.approx(b.decode.seconds, rel=1e-12)
    assert b.output_tok_s == pytest.approx(4 * 256 / (4 * (b.prefill_s + 255 * b.decode.seconds)), rel=1e-12)


def test_bench_a_burst_in_one_step_waits_for_the_whole_step():
    # 8 prompts of 1,024 tokens sent at once to vLLM with --max-num-batched-tokens 8,192: one step takes all 8
    # (8 × 1,024 = 8,192), so every first token comes at that step's end: one forward pass over 8 prompts, which
    # reads the weights once, not 1 to 8 prefills one after another; the 8 decode together and finish together,
    # and the next 8 are again one step
    sc = replace(Scenario(spec=load_model("nemotron-h"), ctx=8192), chunk=8192)
    g = datasheet("h100")
    b = bench(sc, g, Workload(1024, 256, 8, num_prompts=16))
    assert b.running == 8
    step = step_time(prefill_step(sc, 1024, 8), g, graphs=False).seconds
    path = DEFAULT.ttft_request_us * 1e-6  # a first token's path outside the engine's steps
    assert b.mean_ttft_s == pytest.approx(step + path, rel=1e-12)
    assert b.median_ttft_s == pytest.approx(step + path, rel=1e-12)
    assert b.prefill_s < step < 8 * b.prefill_s
    # between a request's first and last token only decode steps of 8 (no other prompt is prefilled meanwhile)
    assert b.tpot_s == pytest.approx(b.decode.seconds, rel=1e-12)


def test_bench_speculative_tokens_a_step():
    # k = 2 proposed tokens at acceptance 0.5: 1 + 0.5 + 0.25 = 1.75 tokens a step
    sc = Scenario(spec=load_model("qwen3-next"), ctx=4096, tp=4, spec_tokens=2)
    b = bench(sc, datasheet("h200"), Workload(512, 128, 4, acceptance=0.5))
    assert b.tokens_per_step == pytest.approx(1.75)


def test_running_cap_is_fits():
    # SGLang's max_running_requests as `hybridplan fit` computes it for the same scenario, context I + O
    from hybridplan import engines

    g = gpu("h200")
    sc = Scenario(
        spec=load_model("qwen3.6-35b-a3b"), ctx=9216, engine="sglang", budget=Budget(gpu_mem=g.total, gpu=g.key)
    )
    cap = engines.get("sglang").fit(sc).to_dict()["max_running_requests"]
    assert running_cap(sc, Workload(8192, 1024, 100_000))[0] == cap


def test_datasheets_name_known_gpus():
    keys = {g.key for g in GPUS}
    assert set(DATASHEETS) <= keys
    for g in GPUS:  # gpus.py's two older speed fields say what the table says
        d = DATASHEETS.get(g.key)
        if d and g.bandwidth_gbps:
            assert g.bandwidth_gbps == d.hbm_gbps, g.key
        if d and g.bf16_tflops:
            assert g.bf16_tflops == d.bf16_tflops, g.key
    assert all(d.sheet for d in DATASHEETS.values())


def test_bad_input():
    with pytest.raises(PlanError):
        Workload(0, 10, 1)
    with pytest.raises(PlanError):
        Workload(10, 10, 1, acceptance=1.0)
    with pytest.raises(PlanError):
        datasheet("no-such-gpu")
    with pytest.raises(PlanError):
        decode_step(Scenario(spec=load_model("llama-3.1-8b"), ctx=10), 0, 10)


def test_fixtures_each_predicted():
    # ≥ 30 published measurements, each with its source, each predicted by validation/speed.py
    sys.path.insert(0, str(ROOT / "validation"))
    import speed as validation

    docs = validation.fixtures()
    assert sum(len(d["measurements"]) for d in docs) >= 30
    assert all(d["source"].startswith("https://") for d in docs)
    rows = validation.rows(files=frozenset(d["_file"] for d in docs))  # the sealed set too
    assert len(rows) == sum(len(d["measurements"]) for d in docs)
    # the efficiencies were fitted on the attention fixtures alone
    from hybridplan.speed.model import FITTED_ON

    assert all(not json.loads((validation.DATA / f).read_text()).get("hybrid") for f in FITTED_ON)
    assert (
        step_time(
            decode_step(Scenario(spec=load_model("llama-3.1-8b"), ctx=10), 1, 10), datasheet("h100"), DEFAULT
        ).seconds
        > 0
    )


def test_speed_command(capsys):
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
    assert {"output_tok_s", "mean_ttft_ms", "mean_tpot_ms"} <= set(d["bench"])
    assert [row["batch"] for row in d["decode"]] == [1, 2, 4, 8]
    # the table's tokens/s is the batch over the step time
    assert d["decode"][-1]["tokens_per_s"] == pytest.approx(8 / (d["decode"][-1]["step_ms"] / 1e3))
    assert main(["speed", "nemotron-h", "--gpu-type", "h100", "--input", "1024", "--output", "128"]) == 0
    assert "Output token throughput (tok/s)" in capsys.readouterr().out


def test_speed_command_refuses(capsys):
    from hybridplan.cli import main

    assert main(["speed", "nemotron-h", "--gpu-mem", "80GB"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--gpu-type" in err
    # Qwen3-Next in bf16 leaves nothing for the caches on two H100s: vLLM's refusal, not a speed
    assert main(["speed", "qwen3-next", "--gpu-type", "h100", "--tp", "2", "--ctx", "32k"]) == 2
    assert "will not start" in capsys.readouterr().err


def _fake_profile() -> dict:
    """A profile report's dict (``hybridplan profile --json``) from a fake CUDA device: copy at 3.0 TB/s; a
    decode row of 24 layers moving 3 GB in 1 ms + 24 × 5 µs; the decode at 1.5 TB/s; an 8,192-token prefill in
    0.1 s at 200 TFLOP/s."""
    return {
        "model": "nemotron-h-8b",
        "tokens": 8192,
        "device": {"name": "NVIDIA H100 80GB HBM3", "backend": "cuda", "copy": {"bandwidth_bytes_per_s": 3.0e12}},
        "decode": {
            "measured": {"bandwidth_bytes_per_s": 1.5e12},
            "rows": [
                {"layers": 24, "predicted": {"bytes": 3.0e9}, "measured": {"seconds": 1e-3 + 24 * 5e-6}},
                {"layers": 4, "predicted": {"bytes": None}, "measured": {"seconds": None}},
            ],
        },
        "prefill": {"measured": {"seconds": 0.1, "tflop_per_s": 200.0}},
    }


def test_calibration_from_a_profile(tmp_path):
    from hybridplan.speed.calibration import from_profile, load, save

    cal = from_profile(_fake_profile())
    # the row's time beyond its bytes at the copy bandwidth, 120 µs, over its 24 launches
    assert cal.launch_us == pytest.approx(5.0)
    assert cal.prefill_tokens_per_s == pytest.approx(81_920)
    assert cal.on_gpu and cal.decode_bandwidth == 1.5e12
    eff = cal.efficiency(datasheet("h100"))
    # the profile's split: the state's bytes at the 3.0 TB/s copy of the H100's 3,350 GB/s, each launch 5 µs;
    # the scans at 200 of its 989 bf16 TFLOP/s (no prefill rows here: the phase's figure); weights keep the fit
    assert eff.state_hbm == pytest.approx(3.0e12 / 3.35e12) and eff.scan == pytest.approx(200 / 989)
    assert eff.hbm == DEFAULT.hbm and eff.kernel_floor_graph_us == pytest.approx(5.0)
    # state traffic at the copy bandwidth, weights at the fitted one
    kt = kind_time(
        Work("mamba2", 1, weight_bytes=1e9, state_bytes=1e9),
        datasheet("h100"),
        replace(eff, kernel_floor_graph_us=0.0),
        "bf16",
        graphs=True,
    )
    assert kt.seconds == pytest.approx(1e9 / 3.0e12 + 1e9 / (3.35e12 * DEFAULT.hbm))
    path = tmp_path / "cal.json"
    save(cal, path)
    assert load(path) == cal
    path.write_text("{}")
    with pytest.raises(PlanError):
        load(path)
    with pytest.raises(PlanError):
        from_profile({"model": "x"})


def test_the_calibrated_step_is_the_profiles_own(tmp_path):
    """`speed --calibration` times the profile's rows as the profile measured them, the overhead counted once.
    Two decode rows of 24 layers: 3 GB in 1 ms + 24 × 5 µs, and 1.5 GB in 0.5 ms + 24 × 7 µs at a 3.0 TB/s copy;
    their overhead a layer is 5 and 7 µs, median 6: predicted 1 ms + 0.5 ms + 48 × 6 µs = 1.788 ms, the measured
    sum (1.12 + 0.668 ms). A prefill row of 1e14 FLOPs in 0.5 s + 24 launches: 1e14 / (0.5 s) beyond them,
    so it is predicted at its measured time. Timing the bytes at the achieved bandwidth (bytes over the whole
    time) and adding the overhead on top, as the first calibration did, would predict 1.788 + 0.288 ms."""
    from hybridplan.speed.calibration import check_profile, from_profile

    rep = _fake_profile()
    rep["decode"]["rows"] = [
        {"kind": "mamba2", "layers": 24, "predicted": {"bytes": 3.0e9}, "measured": {"seconds": 1e-3 + 24 * 5e-6}},
        {"kind": "mamba2", "layers": 24, "predicted": {"bytes": 1.5e9}, "measured": {"seconds": 5e-4 + 24 * 7e-6}},
    ]
    rep["prefill"]["rows"] = [
        {
            "kind": "mamba2",
            "layers": 24,
            "predicted": {"bytes": 1e6, "flops": 1e14},
            "measured": {"seconds": 0.5 + 24 * 6e-6},
        }
    ]
    cal = from_profile(rep)
    assert cal.launch_us == pytest.approx(6.0) and cal.scan_tflops == pytest.approx(200.0)
    dec, pre = check_profile(rep, cal, datasheet("h100"))
    assert dec.measured_s == pytest.approx(1.788e-3) and dec.predicted_s == pytest.approx(1.788e-3)
    assert pre.predicted_s == pytest.approx(pre.measured_s)


def test_speed_command_calibration(tmp_path, capsys):
    from hybridplan.cli import main
    from hybridplan.speed.calibration import from_profile, save

    path = tmp_path / "cal.json"
    save(from_profile(_fake_profile()), path)
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
                "4",
                "--calibration",
                str(path),
                "--json",
            ]
        )
        == 0
    )
    d = json.loads(capsys.readouterr().out)
    assert d["efficiency"]["state_hbm"] == pytest.approx(3.0e12 / 3.35e12)  # the copy's, with 5 µs a launch
    assert d["efficiency"]["kernel_floor_graph_us"] == pytest.approx(5.0)
    assert any("calibrated by a profile" in n for n in d["notes"])
    assert main(["speed", "nemotron-h", "--gpu-type", "h100", "--calibration", str(tmp_path / "none.json")]) == 2


# --- a whole layout's decode tokens/s (hybridplan/speed/layout.py) ------------------------------------------


def _layout_sc(model: str, **kw):
    from hybridplan.loader import load_model
    from hybridplan.scenario import Scenario

    return Scenario(load_model(model), ctx=32000, **kw)


def test_pipeline_stages_share_the_whole_step():
    """The stages of vLLM's split of Qwen3.5-397B-A17B at PP 4 (60 layers: 15, 15, 15, 15; its 45 GDN and 15
    attention layers one attention in four) hold every layer kind's work once between them: their bytes and
    FLOPs add up to the whole model's step, and only the last holds the LM head."""
    from hybridplan.engines.vllm.parallel import pipeline
    from hybridplan.speed.layout import stage_step
    from hybridplan.speed.work import HEAD, decode_step

    sc = _layout_sc("qwen3.5-397b-a17b", tp=2, pp=4)
    whole = decode_step(sc, 16, 32000)
    stages = pipeline(sc)
    cut = [stage_step(whole, sc.spec, st.spec, st.last) for st in stages]
    for attr in ("weight_bytes", "kv_bytes", "state_bytes", "flops"):
        assert sum(c.total(attr) for c in cut) == pytest.approx(whole.total(attr))
    assert [any(w.kind == HEAD for w in c.kinds) for c in cut] == [False, False, False, True]
    assert sum(c.allreduces for c in cut) == whole.allreduces


def test_pipeline_rate_is_the_slowest_stage_or_the_round():
    """pp micro-batches of m = ⌈B / pp⌉ in flight: tokens/s = min(pp·m / Σ T_s, m / max T_s). Equal stages make
    both pp·m / Σ T_s; and at PP 1 it is B over the one step."""
    from hybridplan.engines.vllm.parallel import pipeline
    from hybridplan.speed.costs import decode_mode
    from hybridplan.speed.layout import decode_rate, stage_step
    from hybridplan.speed.model import step_time
    from hybridplan.speed.work import decode_step

    g = datasheet("h100")
    sc = _layout_sc("qwen3.5-397b-a17b", tp=2, pp=4)
    r = decode_rate(sc, g, 30, 32000)
    m = 8  # ⌈30 / 4⌉
    whole = decode_step(sc, m, 32000)
    # each stage's step in the engine's decode mode: graphs at batch 8, the host not overlapped under PP (vLLM turns
    # async scheduling off with pipeline parallelism, vllm/config/vllm.py)
    graphs, overlap = decode_mode(sc, m)
    assert graphs and not overlap
    times = [
        step_time(stage_step(whole, sc.spec, st.spec, st.last), g, tp=2, graphs=graphs, overlap=overlap).seconds
        for st in pipeline(sc)
    ]
    assert r.tokens_per_s == pytest.approx(min(4 * m / sum(times), m / max(times)))
    assert r.round_s == pytest.approx(sum(times)) and r.gpus == 8
    one = _layout_sc("qwen3.5-27b", tp=2)
    graphs, overlap = decode_mode(one, 16)  # PP 1: async scheduling overlaps the host with the GPU's step
    assert graphs and overlap
    assert decode_rate(one, g, 16, 32000).tokens_per_s == pytest.approx(
        16 / step_time(decode_step(one, 16, 32000), g, tp=2, graphs=graphs, overlap=overlap).seconds
    )


def test_vllm_data_parallel_reads_the_moe_across_its_ranks():
    """vLLM DP 2 × TP 2: each engine decodes its own 16 requests, but the MoE is sliced over the 4 ranks: a rank
    reads half of the TP-2 slice of the experts the 32 tokens together touch (hybridplan/engines/vllm/parallel.py
    ``sharding``); the dense kinds are each engine's own, so a replica's."""
    from hybridplan.speed.layout import _moe_across_dp
    from hybridplan.speed.work import decode_step

    sc = _layout_sc("qwen3.5-35b-a3b", tp=2, dp=2)
    own = decode_step(sc, 16, 32000)
    pooled = decode_step(sc, 32, 32000)
    got = {w.kind: w for w in _moe_across_dp(sc, own, 16, 32000).kinds}
    moe = {w.kind: w for w in pooled.kinds}["moe"]
    assert got["moe"].weight_bytes == pytest.approx(moe.weight_bytes / 2)
    assert got["moe"].flops == pytest.approx(moe.flops / 2)
    assert got["gdn"] == {w.kind: w for w in own.kinds}["gdn"]


def test_sglang_dp_attention_is_not_priced_and_says_why():
    from hybridplan.engines.sglang.settings import SglangSettings
    from hybridplan.speed.layout import decode_rate

    sc = replace(_layout_sc("qwen3.5-35b-a3b", tp=4, dp=4, dp_attention=True), engine="sglang", sglang=SglangSettings())
    r = decode_rate(sc, datasheet("h100"), 8, 32000)
    assert r.tokens_per_s is None and r.gpus == 4 and "DP attention" in r.why


# --- the routed experts' grouped GEMM in a prefill (hybridplan/speed/model.py grouped_gemm_efficiency) ---------


def test_qwen3_moe_parameters_from_its_config():
    # Qwen/Qwen3-30B-A3B's config (tests/data/configs/Qwen__Qwen3-30B-A3B.json): hidden 2048, 48 layers, 32 q
    # heads and 4 kv heads of 128, 128 experts of moe_intermediate 768, vocab 151,936, untied, no bias:
    # embed + head 2·151936·2048; attention q 2048·4096 + k, v 2·2048·512 + o 4096·2048, and q/k norms 2·128;
    # experts 128·3·2048·768 and the router 128·2048; the two layer norms 2·2048; the final norm 2048
    from hybridplan.weights import weights

    layer = 2048 * 4096 + 2 * 2048 * 512 + 4096 * 2048 + 2 * 128 + 128 * 3 * 2048 * 768 + 128 * 2048 + 2 * 2048
    assert weights(load_model("qwen3-30b-a3b")).params == 2 * 151936 * 2048 + 48 * layer + 2048  # 30.53 B
    assert experts(load_model("qwen3-30b-a3b")) == Experts(128, 8)


def test_prefill_counts_the_routed_experts_flops_and_tokens_per_expert():
    # Qwen3-30B-A3B, TP 2, a 4,096-token prompt: each token multiplies 8 of the 128 experts, each 3·2048·768
    # parameters, split over 2 ranks, in 48 layers; the experts' GEMMs get 4096·8/128 = 256 tokens each
    sc = Scenario(spec=load_model("qwen3-30b-a3b"), ctx=4096, tp=2)
    moe = _kind(prefill_step(sc, 4096), "moe")
    assert moe.routed_flops == pytest.approx(2.0 * 48 * 8 * 3 * 2048 * 768 / 2 * 4096)
    assert moe.expert_tokens == 256
    # the rest of the moe kind's FLOPs is its router (128·2048 a layer, not split by TP): counted once
    assert moe.flops - moe.routed_flops == pytest.approx(2.0 * 48 * 128 * 2048 * 4096)
    # a decode step's expert GEMVs are bounded by the weights they read, priced as before
    assert _kind(decode_step(sc, 1, 4096), "moe").routed_flops == 0


def test_grouped_gemm_efficiency_is_a_fixed_cost_in_tokens():
    from hybridplan.speed.model import grouped_gemm_efficiency

    eff = replace(DEFAULT, tensor=0.6, expert_tokens_half=200.0)
    # m tokens take as long as a large matmul of m + m½: half the large-matmul fraction at m = m½, all of it
    # far beyond, and (m + m½)/m times the time in between
    assert grouped_gemm_efficiency(200.0, eff) == pytest.approx(0.3)
    assert grouped_gemm_efficiency(1e9, eff) == pytest.approx(0.6)
    assert grouped_gemm_efficiency(50.0, eff) == pytest.approx(0.6 * 50 / 250)


def test_routed_flops_alone_take_the_grouped_gemm_fraction():
    # the moe kind's tensor time: its non-routed FLOPs at `tensor`, its routed ones at tensor·m/(m + m½); with
    # m½ = m the routed part takes twice its time at m½ = 0 and nothing else moves
    g = datasheet("a100-40g")
    w = Work("moe", 48, flops=3e12, routed_flops=2e12, expert_tokens=64.0)
    peak = g.bf16_tflops * 1e12
    plain = kind_time(w, g, replace(DEFAULT, tensor=0.5, expert_tokens_half=0.0), "bf16", True)
    halved = kind_time(w, g, replace(DEFAULT, tensor=0.5, expert_tokens_half=64.0), "bf16", True)
    assert plain.tensor_s == pytest.approx(3e12 / (peak * 0.5))
    assert halved.tensor_s - plain.tensor_s == pytest.approx(2e12 / (peak * 0.5))


def test_grouped_gemm_term_fitted_on_attention_moe_alone():
    # the term's fixtures are attention-only MoE models marked fit; the dense fit's fixtures have no experts
    from hybridplan.speed.model import FITTED_ON_DENSE, FITTED_ON_MOE

    sys.path.insert(0, str(ROOT / "validation"))
    import speed as validation

    for f in FITTED_ON_MOE:
        doc = json.loads((validation.DATA / f).read_text())
        assert doc["fit"] and not doc["hybrid"]
        spec = load_model(doc["model"])
        assert experts(spec) is not None and not spec.recurrent
    for f in FITTED_ON_DENSE:
        doc = json.loads((validation.DATA / f).read_text())
        assert experts(validation._model(doc["model"])) is None


# --- running requests are never more than the workload's prompts --------------------------------------------


def test_concurrency_past_the_prompts_waits_no_more_than_the_prompts():
    # vllm bench serve sends each of its --num-prompts once (1,000 by default, vllm/benchmarks/serve.py), so with
    # --max-concurrency 100,000 at most the 1,000 prompts are in flight, and of them all but the running wait
    g = gpu("h100")
    sc = Scenario(spec=load_model("nemotron-h"), ctx=1536, engine="vllm", budget=Budget(gpu_mem=g.total, gpu=g.key))
    b = bench(sc, datasheet("h100"), Workload(1024, 512, 100_000))
    assert b.running < 1000
    waits = [n for n in b.notes if "wait for a slot" in n]
    assert waits and waits[0].startswith(f"{1000 - b.running:,} of the 1,000 concurrent requests wait")
    assert any("--concurrency 100,000 is more than the workload's 1,000 prompts" in n for n in b.notes)


def test_running_is_never_more_than_the_prompts():
    # no GPU memory given: nothing caps the running requests but the workload, 16 prompts
    sc = Scenario(spec=load_model("nemotron-h"), ctx=8192)
    b = bench(sc, datasheet("h100"), Workload(1024, 256, 100, num_prompts=16))
    assert b.running == 16 and "16 prompts" in b.running_from
    assert not any("wait for a slot" in n for n in b.notes)
