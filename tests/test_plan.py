"""`hybridplan plan`: the layouts it tries, what it keeps, and that `fit` confirms every command it prints."""

from __future__ import annotations

import json
from math import ceil

import pytest

from hybridplan.loader import load_model
from hybridplan.plan import Layout, layouts, plan
from hybridplan.scenario import Budget, Scenario


def _holds(d: dict) -> float:
    """Requests of the context a fit's JSON says its engine(s) hold at once."""
    if "vllm" in d:
        v = d["vllm"]
        one = v["modes"][v["default_mode"]]["max_concurrency"]
        return one * v.get("dp", 1)
    g = d["sglang"]
    per = min(g["max_running_requests"], g["kv_tokens"] // d["ctx"])
    return per * g.get("dp", 1)


@pytest.mark.parametrize("model", ["qwen3.5-397b-a17b", "nemotron-3-ultra-550b-a55b"])
def test_every_plan_is_confirmed_by_fit(run_cli, model):
    code, out, err = run_cli("plan", model, "--ctx", "32k", "--concurrency", "128", "--gpu-type", "h100", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["plans"], d
    gpus = [p["gpus"] for p in d["plans"]]
    assert gpus == sorted(gpus)
    for p in d["plans"]:
        cmd = p["command"]
        code, fout, ferr = run_cli("fit", "--gpu-type", "h100", "--json", "--", *cmd["env"], *cmd["argv"])
        assert code == 0, (cmd, ferr)
        f = json.loads(fout)
        assert f["ok"] and _holds(f) >= 128 and _holds(f) == pytest.approx(p["holds"], rel=1e-9)


def test_fewer_gpus_than_the_best_plan_are_rejected_with_a_reason(run_cli):
    # Qwen3.5-397B-A17B in bfloat16 is about 740 GiB of weights: 8 H100s (79.2 GiB each) cannot hold them,
    # so no layout under 16 GPUs starts, and each says the weights do not fit
    code, out, _ = run_cli("plan", "qwen3.5-397b-a17b", "--ctx", "32k", "--concurrency", "128", "--gpu-type", "h100",
                           "--json")
    d = json.loads(out)
    assert min(p["gpus"] for p in d["plans"]) == 16
    small = [r for r in d["rejected"] if r["gpus"] <= 8]
    assert small and all(r["reason"].startswith("the weights do not fit") for r in small)


def test_a_target_no_layout_holds_exits_1(run_cli):
    code, out, _ = run_cli("plan", "qwen3.5-397b-a17b", "--ctx", "32k", "--concurrency", "128", "--gpu-type", "h100",
                           "--gpus", "8")
    assert code == 1 and "no layout of up to 8 GPUs" in out


def test_layouts_cover_the_engines_parallel_flags():
    spec = load_model("qwen3-next-80b-a3b")
    sc = Scenario(spec=spec, ctx=8192, budget=Budget(gpu_mem=80 << 30))
    got = set(layouts(sc, 8))
    assert Layout("vllm", 2, 2, 2) in got and Layout("vllm", 4, 1, 2, expert_parallel=True) in got
    assert Layout("sglang", 4, 1, 2, dp_attention=True) in got and Layout("sglang", 8, 1, 1, ep_size=8) in got
    assert all(lay.gpus <= 8 for lay in got)
    # --enable-dp-attention runs the dp groups inside the tp ranks: 4 GPUs, not 8
    assert Layout("sglang", 4, 1, 2, dp_attention=True).gpus == 4
    # a dense model gets no expert layouts
    dense = Scenario(spec=load_model("qwen3.5-27b"), ctx=8192, budget=Budget(gpu_mem=80 << 30))
    assert not any(lay.expert_parallel or lay.ep_size > 1 for lay in layouts(dense, 8))


def test_vllm_plans_ask_each_engine_for_its_share_of_the_requests():
    # each data-parallel engine runs ceil(C / dp) sequences: the --max-num-seqs its command starts with
    spec = load_model("nemotron-3-nano-30b-a3b")
    sc = Scenario(spec=spec, ctx=32768, engine="vllm", budget=Budget(gpu_mem=80 << 30, gpu="h100"))
    r = plan(sc, 300, 8)
    assert r.plans
    for p in r.plans:
        assert p.scenario.vllm.max_num_seqs == ceil(300 / p.layout.dp)
        assert p.holds >= 300


def test_sglang_plans_are_confirmed_by_fit(run_cli):
    # the SGLang layouts: pipeline stages, DP attention groups inside the TP ranks, fp8 KV (fp8_e4m3)
    code, out, err = run_cli("plan", "qwen3-next-80b-a3b", "--ctx", "64k", "--concurrency", "64", "--gpu-type",
                             "h100", "--engine", "sglang", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert any(p["dp_attention"] for p in d["plans"]) and any(p["pp"] > 1 for p in d["plans"])
    for p in d["plans"]:
        cmd = p["command"]
        code, fout, ferr = run_cli("fit", "--gpu-type", "h100", "--json", "--", *cmd["env"], *cmd["argv"])
        assert code == 0, (cmd, ferr)
        f = json.loads(fout)
        assert f["ok"] and _holds(f) == pytest.approx(p["holds"]) and _holds(f) >= 64


def test_plans_rank_by_gpus_then_margin_steps_then_decode_tokens_per_gpu(run_cli):
    # the Qwen3.5-397B-A17B plans on 16 H100s: within a 10 % step of margin the more decode tokens/s per GPU
    # (hybridplan/speed/layout.py) comes first; each plan's rate is the layout's own
    code, out, err = run_cli("plan", "qwen3.5-397b-a17b", "--ctx", "32k", "--concurrency", "128", "--gpu-type",
                             "h100", "--json")
    assert code == 0, err
    plans = json.loads(out)["plans"]
    keys = [(p["gpus"], -int(p["margin"] * 10 // 1), -p["decode"]["tokens_per_s_per_gpu"]) for p in plans]
    assert keys == sorted(keys)
    assert all(p["decode"]["gpus"] == p["gpus"] and p["decode"]["tokens_per_s"] > 0 for p in plans)
    same = [p for p in plans if (p["gpus"], int(p["margin"] * 10 // 1)) == (plans[0]["gpus"],
                                                                             int(plans[0]["margin"] * 10 // 1))]
    assert len(same) >= 2  # the tie the rate breaks: TP 2 · PP 4 · DP 2 (+70 %) before TP 1 · PP 8 · DP 2 (+71 %)
