"""The benchmark's queue (hybridplan/speed/queue.py) and the step that carries decodes and prompt tokens together
(work.py ``mixed_step``), each pinned by counting the steps by hand at a stated shape."""

from __future__ import annotations

import pytest

from hybridplan.loader import load_model
from hybridplan.scenario import Scenario
from hybridplan.speed.bench import Workload, bench
from hybridplan.speed.costs import arrival_lag, mixes_prefill
from hybridplan.speed.gpus import datasheet
from hybridplan.speed.model import step_time
from hybridplan.speed.queue import Queue, schedule
from hybridplan.speed.work import decode_step, mixed_step, prefill_step

pytestmark = pytest.mark.unit


def test_vllm_budget_splits_a_burst_and_the_decodes_take_their_tokens_first():
    # 4 prompts of 1,024 at once, --max-num-batched-tokens 2,048, 3 decode rounds after the first token:
    # step 1: nothing runs, prompts 1 and 2 (2,048 tokens, alone); step 2: 2 decodes take 2 of the budget, prompt 3
    # whole and 1,022 of prompt 4 (2,046 loaded); step 3: 3 decodes, the last 2 of prompt 4; step 4: 4 decodes,
    # prompts 1–2's third round, they finish; step 5: 2 decodes, prompt 3 finishes; step 6: prompt 4 finishes
    q = schedule(Queue.alike(4, 1024, 3, mixed=True, concurrency=4, running=4, budget=2048, lag=0))
    # (decode steps, Σ batch − 1 over them, prompt tokens loaded, prompt tokens alone, prefill steps loaded, alone):
    # vLLM's loaded prompt tokens ride decode steps, so it counts no loaded prefill step
    assert q.ttft == ((0, 0, 0, 2048, 0, 1), (0, 0, 0, 2048, 0, 1), (1, 1, 2046, 2048, 0, 1), (2, 3, 2048, 2048, 0, 1))
    # prompt 1 from its first token: steps 2, 3, 4 (batches 2, 3, 4) and the 2,048 prompt tokens they carried
    assert q.decode[0] == (3, 1 + 2 + 3, 2048, 0, 0, 0)
    # prompt 3: steps 3, 4, 5 (batches 3, 4, 2) and the 2 tokens step 3 carried; prompt 4: steps 4, 5, 6 (4, 2, 1)
    assert q.decode[2] == (3, 2 + 3 + 1, 2, 0, 0, 0)
    assert q.decode[3] == (3, 3 + 1 + 0, 0, 0, 0, 0)
    assert q.total == (5, 7, 2048, 2048, 0, 1)
    # the one step with prompt tokens alone carried 2,048 of them
    assert q.prompt_tokens_per_step() == 2048


def test_sglang_prefill_batches_stall_the_running_decodes():
    # 3 prompts of 100 at once, --chunked-prefill-size 100 (one prompt a batch), 4 decode rounds: three prefill
    # batches run first (SGLang's prefill-first loop), the 2nd and 3rd while requests wait to decode (loaded); no
    # decode round runs in a prefill batch, so prompt 1's 4 rounds come after both other prefills
    q = schedule(Queue.alike(3, 100, 4, mixed=False, concurrency=3, running=3, budget=100, lag=0))
    # each prefill batch is a step of its own: the first alone, the 2nd and 3rd loaded
    assert q.ttft == ((0, 0, 0, 100, 0, 1), (0, 0, 100, 100, 1, 1), (0, 0, 200, 100, 2, 1))
    assert q.decode == ((4, 8, 200, 0, 2, 0), (4, 8, 100, 0, 1, 0), (4, 8, 0, 0, 0, 0))
    assert q.total == (4, 8, 200, 100, 2, 1)
    assert q.prompt_tokens_per_step() == 100


def test_a_request_beyond_the_running_limit_waits_for_a_slot():
    # 3 prompts at once, 2 admitted: the third waits for both to finish their 2 rounds at batch 2, then is prefilled
    q = schedule(Queue.alike(3, 100, 2, mixed=False, concurrency=3, running=2, budget=1000, lag=0))
    # step 1 prefills the first two together (200 tokens, one step), the third comes in a step of its own
    assert q.ttft[2] == (2, 2, 0, 300, 0, 2)


def test_a_prompt_sent_to_a_busy_overlapping_engine_waits_one_step():
    # budget 10, prompts of 10, 2 in flight, 3 sent: prompt 1 finishes after step 4 and prompt 3 is sent then.
    # Without a lag it joins step 5 (9 tokens beside prompt 2's decode) and step 6 (its last token): TTFT 2 decode
    # steps and 10 loaded tokens. With the lag of an engine that scheduled step 5 while step 4 ran, step 5 is a
    # decode step only and its tokens come in step 6 (9 loaded) and step 7 (1 alone, prompt 2 finished)
    kw = dict(mixed=True, concurrency=2, running=2, budget=10)
    assert schedule(Queue.alike(3, 10, 3, lag=0, **kw)).ttft[2] == (2, 0, 10, 0, 0, 0)
    assert schedule(Queue.alike(3, 10, 3, lag=1, **kw)).ttft[2] == (2, 0, 9, 1, 0, 1)


def test_concurrency_one_never_waits_a_lag():
    # the engine is idle whenever a request arrives at --max-concurrency 1: each TTFT is its prompt alone
    q = schedule(Queue.alike(3, 512, 7, mixed=True, concurrency=1, running=1, budget=8192, lag=1))
    assert q.ttft == ((0, 0, 0, 512, 0, 1),) * 3
    assert q.decode == ((7, 0, 0, 0, 0, 0),) * 3


def test_a_shorter_request_finishes_first_and_its_successor_is_sent_then():
    # SGLang, 2 in flight, prompts of 10, budget 100; request 1 decodes 1 round after its first token, request 2
    # five, request 3 one. Step 1 prefills 1 and 2 together (alone); decode round 1 (batch 2) finishes request 1
    # and the client sends request 3, prefilled in a batch of its own while request 2 waits (loaded): its TTFT is
    # that one prefill step. Round 2 (batch 2) finishes request 3, before request 2, sent earlier
    q = schedule(
        Queue(mixed=False, concurrency=2, running=2, prompts=(10, 10, 10), rounds=(1, 5, 1), budget=100, lag=0)
    )
    assert q.ttft == ((0, 0, 0, 20, 0, 1), (0, 0, 0, 20, 0, 1), (0, 0, 10, 0, 1, 0))
    assert q.decode[2] == (1, 1, 0, 0, 0, 0)
    # request 2: rounds 1 and 2 at batch 2, request 3's prefill between them, then rounds 3-5 alone
    assert q.decode[1] == (5, 2, 10, 0, 1, 0)
    with pytest.raises(ValueError):
        schedule(Queue(mixed=False, concurrency=2, running=2, prompts=(10, 10), rounds=(1,), budget=100, lag=0))


def test_the_mixed_step_reads_the_weights_once():
    # Llama-3.1-8B, decode of 8 at context 1,536 with 512 of a 1,024-token prompt's tokens in the same step: each
    # layer kind reads the larger of the two steps' weight bytes once, adds half the prompt's FLOPs, KV bytes and
    # all-reduce rows, keeps the decode step's kernels and sampler rows
    sc = Scenario(spec=load_model("llama-3.1-8b"), ctx=4096, tp=2)
    dec, pf = decode_step(sc, 8, 1536), prefill_step(sc, 1024)
    mix = mixed_step(dec, pf, 512)
    assert mix.tokens == 8 + 512 and mix.batch == 8 and mix.phase == "mixed"
    assert mix.allreduces == dec.allreduces
    assert mix.allreduce_bytes == pytest.approx(dec.allreduce_bytes + pf.allreduce_bytes / 2)
    for d, p, m in zip(dec.kinds, (next(w for w in pf.kinds if w.kind == d.kind) for d in dec.kinds), mix.kinds):
        assert m.kind == d.kind and m.kernels == d.kernels
        if d.kind == "sampling":
            assert m == d
            continue
        assert m.weight_bytes == max(d.weight_bytes, p.weight_bytes)
        assert m.flops == pytest.approx(d.flops + p.flops / 2)
        assert m.kv_bytes == pytest.approx(d.kv_bytes + p.kv_bytes / 2)
    # the step takes at least the decode step and no more than the decode step and the whole prefill's GPU time
    g = datasheet("h100")
    t_dec, t_mix = step_time(dec, g, tp=2).seconds, step_time(mix, g, tp=2, graphs=False).seconds
    t_pf = step_time(pf, g, tp=2, graphs=False)
    assert t_dec < t_mix < t_dec + t_pf.seconds - t_pf.host_s


def test_engines_mix_or_not():
    vllm = Scenario(spec=load_model("nemotron-h"), ctx=4096)
    sglang = Scenario(spec=load_model("nemotron-h"), ctx=4096, engine="sglang")
    # vLLM V1's scheduler: decodes first, then prompt tokens, one step; SGLang: prefill batches apart by default
    assert mixes_prefill(vllm)[0] and not mixes_prefill(sglang)[0]
    # both schedule the next step while one runs (async scheduling from 0.11.2, the overlap scheduler)
    assert arrival_lag(vllm) == arrival_lag(sglang) == 1


def test_bench_reports_the_loaded_prefill_and_median_tpot():
    # vLLM at concurrency 16: a prompt's cost to the running batch is its tokens' share of the mixed step beyond
    # the decode step, which is less than its prefill alone (the weights are read once for the whole step)
    sc = Scenario(spec=load_model("nemotron-h"), ctx=8192)
    b = bench(sc, datasheet("h100"), Workload(1024, 256, 16, num_prompts=64))
    assert b.mixed is not None and b.loaded_prefill_s < b.prefill_s
    per_token = (b.mixed.seconds - b.decode.seconds) / (b.mixed.step.tokens - b.mixed.step.batch)
    assert b.loaded_prefill_s == pytest.approx(per_token * 1024, rel=1e-12)
    assert b.median_tpot_s is not None and b.median_tpot_s > b.decode.seconds


def test_weight_only_schemes_multiply_in_bf16():
    from hybridplan.engines.vllm.kernels import gemm_dtype
    from hybridplan.weights.quant import read

    def q(cfg):
        return read({"quantization_config": cfg})

    # AWQ and GPTQ int4 run Marlin (bf16 MMA on dequantized tiles): bf16 whatever the 4-bit weights; ModelOpt FP8
    # and NVFP4 quantize the activations too and multiply on the low-precision tensor cores
    assert gemm_dtype(q({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True})) == "bf16"
    assert gemm_dtype(q({"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True})) == "bf16"
    assert gemm_dtype(q({"quant_method": "modelopt", "quant_algo": "FP8"})) == "fp8"
    assert gemm_dtype(q({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16})) == "fp8"
    assert gemm_dtype(None) == "bf16"


def test_a_prefill_step_is_a_fixed_part_and_a_part_per_token():
    # the line through a step of one 1,000-token prompt and a step of four: exact at both points
    from hybridplan.speed.bench import prefill_line

    sc = Scenario(spec=load_model("nemotron-h"), ctx=4096, engine="sglang")
    g = datasheet("h100")
    one = step_time(prefill_step(sc, 1000), g, graphs=False)
    four = step_time(prefill_step(sc, 1000, 4), g, graphs=False)
    fixed, per_token = prefill_line(one, four, one.seconds, 1000, 1, None)
    assert fixed + 1000 * per_token == pytest.approx(one.seconds, rel=1e-12)
    assert fixed + 4000 * per_token == pytest.approx(four.seconds, rel=1e-12)
    # a batch of four costs less than four prompts apart: the weights are read and the kernels launched once
    assert fixed > 0 and four.seconds < 4 * one.seconds
    # while requests wait on an overlapping engine, the host's part is hidden behind the GPU's
    assert prefill_line(one, four, one.seconds, 1000, 1, True)[0] <= fixed


def test_sglang_prefills_a_burst_in_one_batch():
    # SGLang, 8 prompts of 1,000 sent at once, --chunked-prefill-size 8,192 (its H100 default): one prefill batch of
    # all 8 (8,000 tokens), so every first token comes at that one step's end, not after eight prefills in a row
    sc = Scenario(spec=load_model("nemotron-h"), ctx=4096, engine="sglang", chunk=8192)
    g = datasheet("h100")
    b = bench(sc, g, Workload(1000, 2, 8, num_prompts=8))
    batch = step_time(prefill_step(sc, 1000, 8), g, graphs=False).seconds
    from hybridplan.speed.model import DEFAULT

    path = DEFAULT.ttft_request_us * 1e-6  # a first token's path outside the engine's steps
    assert b.mean_ttft_s == pytest.approx(batch + path, rel=1e-9)
    assert b.mean_ttft_s - path < 8 * b.prefill_s


def test_the_clients_draw_lengths_as_their_random_datasets_do():
    from hybridplan.engines.sglang.client import length_range as sglang_range
    from hybridplan.engines.vllm.client import length_range as vllm_range
    from hybridplan.errors import PlanError
    from hybridplan.speed.bench import requests, spread

    # vllm/benchmarks/datasets.py RandomDataset: [floor(X(1 - R)), ceil(X(1 + R))], R in [0, 1)
    assert vllm_range(1000, 0.0) == (1000, 1000)
    assert vllm_range(1000, 0.25) == (750, 1250)
    with pytest.raises(PlanError, match=r"range_ratio must be in \[0, 1\)"):
        vllm_range(1000, 1.0)
    # sglang bench_serving sample_random_requests: [max(int(X R), 1), X]; the default 0.0 spans 1 to X
    assert sglang_range(1000, 0.0) == (1, 1000)
    assert sglang_range(1024, 0.8) == (819, 1024)
    with pytest.raises(PlanError):
        sglang_range(1000, 1.5)
    # stratified draws: every value in range and the mean the range's, (lo + hi) / 2
    ds = spread((1, 1000), (819, 1024), 1000)
    assert min(i for i, _ in ds) >= 1 and max(i for i, _ in ds) <= 1000
    assert sum(i for i, _ in ds) / 1000 == pytest.approx(500.5, abs=0.01)
    assert sum(o for _, o in ds) / 1000 == pytest.approx(921.5, abs=0.2)
    # a workload's requests: exact without a range ratio, the engine client's draws with one
    assert set(requests(Workload(1000, 100, 4, num_prompts=10), "sglang")) == {(1000, 100)}
    drawn = requests(Workload(1000, 100, 4, num_prompts=10, range_ratio=0.0), "sglang")
    assert len(drawn) == 10 and len({i for i, _ in drawn}) == 10


def test_the_request_path_adds_to_each_first_token_only():
    # a per-request cost outside the engine's steps (Efficiency.ttft_request_us) moves every TTFT by itself and
    # leaves TPOT and the output rate alone (the steps are the same)
    from msgspec.structs import replace

    from hybridplan.speed.model import DEFAULT

    sc, g, wl = Scenario(spec=load_model("nemotron-h"), ctx=4096), datasheet("h100"), Workload(1000, 64, 4, 16)
    base = bench(sc, g, wl, replace(DEFAULT, ttft_request_us=0.0))
    slow = bench(sc, g, wl, replace(DEFAULT, ttft_request_us=50_000.0))
    assert slow.mean_ttft_s == pytest.approx(base.mean_ttft_s + 0.05, rel=1e-12)
    assert slow.median_ttft_s == pytest.approx(base.median_ttft_s + 0.05, rel=1e-12)
    assert slow.tpot_s == base.tpot_s and slow.output_tok_s == base.output_tok_s
