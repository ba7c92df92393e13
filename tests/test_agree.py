"""Figures and words that agree with each other (issue 28 items 15 and 17): a concurrency past the workload's
prompts, a count of one, the model a command fell back to, the `gpus` header beside the guide."""

import json
from pathlib import Path

from hybridplan.gpus import gpu
from hybridplan.loader import load_model
from hybridplan.scenario import Budget, Scenario
from hybridplan.speed.bench import Workload, bench
from hybridplan.speed.gpus import datasheet
from tests.helpers import one_line_error


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


def test_the_default_model_is_said(run_cli):
    # issue 28 item 17: MODEL left out sizes nemotron-h; the note says so on stderr, beside the output
    code, out, err = run_cli("fit", "--kv-budget", "40GiB", "--json")
    assert code == 0 and json.loads(out)["model"] == "nemotron-h-8b"
    assert err == "hybridplan: note: no MODEL given: the default, nemotron-h (nvidia/Nemotron-H-8B-Base-8K)\n"
    # typed, even as the default's own name, or taken from a pasted engine command: nothing to say
    assert run_cli("fit", "nemotron-h", "--kv-budget", "40GiB")[2] == ""
    code, _, err = run_cli("fit", "--gpu-type", "h100", "--", "vllm", "serve", "nvidia/Nemotron-H-8B-Base-8K")
    assert code == 0 and "no MODEL given" not in err
    # bad input stays one line
    one_line_error(*run_cli("fit", "--ctx", "0"), "--ctx must be a positive integer")


def test_gpus_header_is_the_guides_word(run_cli):
    # the guide: "**from** says where it was read" (docs/guide.md, `gpus`)
    _, out, _ = run_cli("gpus")
    header = next(line for line in out.splitlines() if line.startswith("gpu "))
    assert header.split()[-1] == "from"
    guide = (Path(__file__).resolve().parents[1] / "docs" / "guide.md").read_text()
    shown = guide.split("$ hybridplan gpus", 1)[1]
    assert "**from** says where" in guide
    assert next(line for line in shown.splitlines() if line.startswith("gpu ")).split()[-1] == "from"
