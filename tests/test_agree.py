"""Figures and words that agree with each other (issue 28 items 15 and 17): a concurrency past the workload's
prompts, a count of one, the model a command fell back to, the `gpus` header beside the guide."""

import pytest

from hybridplan.gpus import gpu
from hybridplan.loader import load_model
from hybridplan.scenario import Budget, Scenario
from hybridplan.speed.bench import Workload, bench
from hybridplan.speed.gpus import datasheet


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


def test_one_request_is_singular(run_cli, tmp_path):
    p = tmp_path / "one.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 600, "output_length": 10, "hash_ids": [1, 2]}\n')
    code, out, _ = run_cli("replay", p, "nemotron-h", "--kv-budget", "40GiB")
    assert code == 0 and "1 request of one.jsonl (mooncake), 1 in flight" in out and "1 requests" not in out
