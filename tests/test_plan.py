"""`hybridplan plan`: the layouts it tries, what it keeps, that `fit` confirms every command it prints, and that
no layout `fit`'s own engine code confirms uses fewer GPUs than the fewest it names."""

from __future__ import annotations

import json
from math import ceil

import pytest
from msgspec.structs import replace

from hybridplan import engines
from hybridplan.errors import PlanError
from hybridplan.gpus import gpu
from hybridplan.loader import load_model
from hybridplan.plan import Layout, layouts, layouts_on, plan
from hybridplan.scenario import Budget, DtypeChoice, Scenario

pytestmark = pytest.mark.cli

GIB = 1 << 30


def _holds(d: dict) -> float:
    """Requests of the context a fit's JSON says its engine(s) hold at once."""
    if "vllm" in d:
        v = d["vllm"]
        one = v["modes"][v["default_mode"]]["max_concurrency"]
        return one * v.get("dp", 1)
    g = d["sglang"]
    per = min(g["max_running_requests"], g["kv_tokens"] // d["ctx"])
    return per * g.get("dp", 1)


def _confirmed_by_fit(run_cli, gpu_type: str, p: dict) -> float:
    """Run `fit` on a plan's printed command; the requests it holds (it must start)."""
    cmd = p["command"]
    code, fout, ferr = run_cli("fit", "--gpu-type", gpu_type, "--json", "--", *cmd["env"], *cmd["argv"])
    assert code == 0, (cmd, ferr)
    f = json.loads(fout)
    assert f["ok"], f
    return _holds(f)


# --- the reported case (issue 28, item 1) ----------------------------------------------------------------


def test_issue_28_the_fewest_gpus_are_found(run_cli):
    # Qwen3.5-397B-A17B, 16 requests of 256K (262,144) tokens on B200s. Before, plan tried TP, PP in {1, 2, 4, 8}
    # only and said 8 GPUs, and "no layout starts" with --gpus 6; its own fit starts PP 6, and TP 2 x PP 3, on 6.
    # The weights in bfloat16 are 793,604,721,632 B = 739.10 GiB (fit --tp 1 prints "weights 739.10 GiB"); a
    # B200 reports 192,265,846,784 B = 179.06 GiB (hybridplan/gpus.py, nvidia-smi's total), so 4 of them
    # (716.25 GiB) cannot hold the weights at all, whatever the layout: the fewest is 5 or more.
    code, out, err = run_cli(
        "plan", "qwen3.5-397b-a17b", "--ctx", "256K", "--concurrency", "16", "--gpu-type", "b200", "--json"
    )
    assert code == 0, err
    d = json.loads(out)
    assert {p["gpus"] for p in d["plans"]} == {5}
    for p in d["plans"]:
        assert _confirmed_by_fit(run_cli, "b200", p) >= 16
    # on 5: PP 5 with fp8 KV (vLLM's get_pp_indices: 60 layers as 12 a stage) holds 16.32 requests (its
    # printed command, through fit, above); 4 GPUs are ruled out by the weights: no plan on fewer
    assert 4 * gpu("b200").total < 793_604_721_632
    small = [r for r in d["rejected"] if r["gpus"] <= 4]
    # each the weights, or a TP the engine refuses for the model's heads (3: the 16 GDN key heads)
    assert small and all(r["kind"] == "weights" or r["kind"] == "refused" and r["tp"] == 3 for r in small)
    # the 6-GPU layouts of the issue start and hold the target with fit's defaults (vLLM's default Mamba cache
    # mode, align): so 6 GPUs are not "no layout"
    for flags in (["--pp", "6"], ["--tp", "2", "--pp", "3"]):
        code, fout, ferr = run_cli(
            "fit", "qwen3.5-397b-a17b", "--ctx", "256K", "--gpu-type", "b200", "--engine", "vllm", "--json", *flags
        )
        assert code == 0, ferr
        assert _holds(json.loads(fout)) >= 16
    code, out, err = run_cli(
        "plan", "qwen3.5-397b-a17b", "--ctx", "256K", "--concurrency", "16", "--gpu-type", "b200", "--gpus", "6"
    )
    assert code == 0, err
    # and with 4 the answer is none, each count's reason the weights, in the engine's own words for one layout
    code, out, _ = run_cli(
        "plan", "qwen3.5-397b-a17b", "--ctx", "256K", "--concurrency", "16", "--gpu-type", "b200", "--gpus", "4"
    )
    assert code == 1 and "no layout of up to 4 GPUs" in out
    flat = " ".join(out.split())
    # 1-2 GPUs the weights alone; 3 also TP 3, which the 16 GDN key heads refuse, in the engine's words
    assert "1-2 GPUs the weights do not fit" in flat and "4 GPUs the weights do not fit" in flat
    assert (
        "3 GPUs the engine refuses the layout" in flat
        and "--tp 3 does not divide the linear-attention key heads" in flat
    )
    assert "nothing is left for the caches" in flat  # vLLM's or SGLang's shortfall, as fit says it


# --- the property: no layout fit confirms on fewer GPUs --------------------------------------------------


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _brute_layouts(n: int, moe: bool) -> list[dict]:
    """Every way the engines' flags split ``n`` GPUs, enumerated here on its own (not plan's code): vLLM
    --tensor-parallel-size x --pipeline-parallel-size x --data-parallel-size = n, with and without
    --enable-expert-parallel; SGLang --tp-size x --pp-size, or --tp-size x --dp-size (replicas), each --ep-size
    dividing --tp-size without PP, and --enable-dp-attention (--dp-size dividing --tp-size = n). SGLang PP with DP
    or EP is left out: hybridplan does not model it (docs/parallel.md)."""
    out = []
    for tp in _divisors(n):
        for pp in _divisors(n // tp):
            dp = n // tp // pp
            out += [
                dict(engine="vllm", tp=tp, pp=pp, dp=dp, expert_parallel=ep) for ep in (False, True) if not ep or moe
            ]
            if pp == 1 or dp == 1:
                out += [
                    dict(engine="sglang", tp=tp, pp=pp, dp=dp, ep_size=e)
                    for e in _divisors(tp)
                    if e == 1 or (moe and pp == 1)
                ]
    for dp in _divisors(n)[1:]:
        out += [dict(engine="sglang", tp=n, dp=dp, dp_attention=True, ep_size=e) for e in _divisors(n) if e == 1 or moe]
    return out


def _fit_holds(sc: Scenario, concurrency: int) -> float | None:
    """What `fit`'s engine code says the scenario holds, where it starts (None where it refuses it or it
    does not start)."""
    try:
        part = engines.get(sc.engine).fit(sc)
    except PlanError:
        return None
    if not getattr(part, "starts", False):
        return None
    d = part.to_dict()
    return _holds({sc.engine: d, "ctx": sc.ctx})


def _confirmed_below(base: Scenario, fewest: int, concurrency: int) -> list[tuple[dict, tuple]]:
    """Every layout on fewer than ``fewest`` GPUs, in every cache setting `plan` could name (KV: the model's
    or fp8; SSM state: the default or bfloat16; vLLM's Mamba cache mode: the default or none), that starts and
    holds ``concurrency`` requests; vLLM asked for each engine's share, ceil(concurrency / dp), as
    --max-num-seqs (its default, 1024 on these GPUs, asks for more slots than any share here)."""
    moe = "moe" in base.spec.ffn
    found = []
    for n in range(1, fewest):
        for lay in _brute_layouts(n, moe):
            e = lay["engine"]
            for kv in (None, "fp8" if e == "vllm" else "fp8_e4m3"):
                for ssm in (None, "bfloat16"):
                    for mode in (None, "none") if e == "vllm" else (None,):
                        sc = replace(
                            base,
                            engine=e,
                            dtypes=DtypeChoice(kv=kv, ssm=ssm),
                            **{k: v for k, v in lay.items() if k != "engine"},
                        )
                        if e == "vllm":
                            sc = replace(
                                sc, vllm=replace(sc.vllm, mode=mode, max_num_seqs=ceil(concurrency / lay["dp"]))
                            )
                        h = _fit_holds(sc, concurrency)
                        if h is not None and h >= concurrency:
                            found.append((lay, (kv, ssm, mode)))
    return found


@pytest.mark.parametrize(
    "model,ctx,concurrency,gpu_type",
    [
        # the reported case: its fewest, 5, is above the 4 GPUs the weights alone rule out
        ("qwen3.5-397b-a17b", 262_144, 16, "b200"),
        # a dense hybrid (Nemotron-H-8B, 15.09 GiB of weights on 44.42 GiB L40S): 600 requests of 8k take more than one
        # GPU's caches
        ("nemotron-h", 8192, 600, "l40s"),
        # a MoE hybrid with experts (Qwen3-Next-80B-A3B: 512 experts, GDN heads 16/32): EP, DP attention, PP 2
        ("qwen3-next-80b-a3b", 64_000, 64, "h100"),
        # Nemotron-3-Nano (MoE, Mamba-2 groups 8): 300 requests of 32k
        ("nemotron-3-nano-30b-a3b", 32_000, 300, "h100"),
    ],
)
def test_no_layout_fit_confirms_uses_fewer_gpus_than_plan(model, ctx, concurrency, gpu_type):
    g = gpu(gpu_type)
    base = Scenario(spec=load_model(model), ctx=ctx, budget=Budget(gpu_mem=g.total, gpu=g.key))
    r = plan(base, concurrency)
    assert r.plans, r.rejected[-3:]
    fewest = min(p.layout.gpus for p in r.plans)
    assert all(p.layout.gpus == fewest and p.holds >= concurrency and p.part.starts for p in r.plans)
    assert _confirmed_below(base, fewest, concurrency) == []


def test_the_brute_force_finds_what_plan_finds():
    # the brute force above is no stub: on the fewest count itself it confirms the plans plan names
    # (Nemotron-H-8B, 600 requests of 8k on L40S)
    g = gpu("l40s")
    base = Scenario(spec=load_model("nemotron-h"), ctx=8192, budget=Budget(gpu_mem=g.total, gpu=g.key))
    r = plan(base, 600)
    fewest = r.plans[0].layout.gpus
    found = _confirmed_below(base, fewest + 1, 600)
    assert found and {f[0]["engine"] for f in found} >= {p.layout.engine for p in r.plans}


# --- refusals are the engine's -------------------------------------------------------------------------------


def test_a_refused_layout_carries_the_engines_own_reason(run_cli):
    # Nemotron-H-8B on L40S, 2,000 requests of 8k: the counts below the fewest include TP 3 (3 GPUs) and TP 6,
    # which 32 attention heads and 128 Mamba heads do not divide; plan's reason for them is fit's own error,
    # word for word
    code, out, err = run_cli(
        "plan", "nemotron-h", "--ctx", "8192", "--concurrency", "2000", "--gpu-type", "l40s", "--json"
    )
    assert code == 0, err
    d = json.loads(out)
    refused = [
        r
        for r in d["rejected"]
        if r["kind"] == "refused"
        and r["engine"] == "vllm"
        and r["pp"] == 1
        and r["dp"] == 1
        and not r["expert_parallel"]
    ]
    assert refused
    for r in refused:
        code, _, ferr = run_cli(
            "fit", "nemotron-h", "--ctx", "8192", "--gpu-type", "l40s", "--engine", "vllm", "--tp", str(r["tp"])
        )
        assert code == 2 and ferr.strip() == f"hybridplan: error: {r['reason']}"
    # every rejected layout says why, and a fitted one's reason is the engine's
    assert all(r["reason"] for r in d["rejected"])


def test_a_model_without_pp_is_refused_pp_as_vllm_refuses_it(run_cli):
    # Mamba-Codestral-7B (Mamba2ForCausalLM, no SupportsPP in any vLLM 0.10.0-0.33.0): every PP layout is
    # vLLM's refusal, in fit's words for the same flags, though its memory alone would not rule it out
    code, out, err = run_cli(
        "plan",
        "mamba-codestral-7b",
        "--ctx",
        "32k",
        "--concurrency",
        "400",
        "--gpu-type",
        "rtx-4090",
        "--engine",
        "vllm",
        "--json",
    )
    assert code == 0, err
    d = json.loads(out)
    pp = [r for r in d["rejected"] if r["pp"] > 1]
    assert pp and all(r["kind"] == "refused" for r in pp)
    assert all(p["pp"] == 1 for p in d["plans"])
    for r in pp:
        code, _, ferr = run_cli(
            "fit",
            "mamba-codestral-7b",
            "--ctx",
            "32k",
            "--gpu-type",
            "rtx-4090",
            "--engine",
            "vllm",
            "--pp",
            str(r["pp"]),
            "--tp",
            str(r["tp"]),
            "--dp",
            str(r["dp"]),
        )
        assert code == 2 and ferr.strip() == f"hybridplan: error: {r['reason']}"


def test_a_context_the_engine_refuses_is_refused_on_every_count(run_cli):
    # SGLang derives Mamba-Codestral-7B's context from its config (2,048, as fit says) and refuses 8,000 tokens
    # above it, whatever the layout: every layout of the 64 counts is refused, in fit's words, and none is sized
    code, out, _ = run_cli(
        "plan",
        "mamba-codestral-7b",
        "--ctx",
        "8k",
        "--concurrency",
        "4",
        "--gpu-type",
        "h100",
        "--engine",
        "sglang",
        "--json",
    )
    assert code == 1
    d = json.loads(out)
    code, fout, _ = run_cli(
        "fit", "mamba-codestral-7b", "--ctx", "8k", "--gpu-type", "h100", "--engine", "sglang", "--json"
    )
    said = json.loads(fout)["sglang"]["context_length_refused"]
    assert code == 1 and said
    assert {r["gpus"] for r in d["rejected"]} == set(range(1, 65))
    assert {r["kind"] for r in d["rejected"]} == {"refused"}
    # a TP its 8 Mamba-2 groups do not divide is refused first; every other layout, the context
    assert {r["reason"] for r in d["rejected"] if not r["reason"].startswith("--tp ")} == {f"SGLang: {said}"}
    assert all(r["reason"] == f"SGLang: {said}" for r in d["rejected"] if r["tp"] == 1)


# --- the layouts tried ------------------------------------------------------------------------------------


def test_layouts_are_every_split_of_each_count():
    spec = load_model("qwen3-next-80b-a3b")
    sc = Scenario(spec=spec, ctx=8192, budget=Budget(gpu_mem=80 << 30))
    # 6 GPUs split as TP x PP x DP: the ordered triples of divisors whose product is 6 (1·1·6, 1·2·3, 1·3·2,
    # 1·6·1, 2·1·3, 2·3·1, 3·1·2, 3·2·1, 6·1·1): nine, none left out for a divisibility rule (the engine's fit
    # refuses TP 3 and 6 for the model's 16 GDN key heads, with its reason)
    triples = {(a, b, 6 // a // b) for a in range(1, 7) for b in range(1, 7) if 6 % (a * b) == 0}
    assert len(triples) == 9
    got = layouts_on(sc, 6)
    assert {(x.tp, x.pp, x.dp) for x in got if x.engine == "vllm" and not x.expert_parallel} == triples
    assert all(x.gpus == 6 for x in got)
    # SGLang: DP attention groups inside TP 6 (dp 2, 3, 6), each --ep-size dividing the TP
    assert Layout("sglang", 6, 1, 3, dp_attention=True) in got
    assert Layout("sglang", 6, 1, 2, ep_size=3, dp_attention=True) in got
    assert Layout("sglang", 3, 2, 1) in got and Layout("sglang", 3, 1, 2, ep_size=3) in got
    # PP goes up to the decoder layers (48) and no further: 64 GPUs of TP 1 take PP 1, 2, 4, 8, 16, 32
    pps = {x.pp for x in layouts_on(sc, 64) if x.engine == "vllm" and x.tp == 1}
    assert pps == {1, 2, 4, 8, 16, 32}
    assert [x.gpus for x in layouts(sc, 8)] == sorted(x.gpus for x in layouts(sc, 8))
    # a dense model gets no expert layouts
    dense = Scenario(spec=load_model("qwen3.5-27b"), ctx=8192, budget=Budget(gpu_mem=80 << 30))
    assert not any(lay.expert_parallel or lay.ep_size > 1 for lay in layouts(dense, 8))


# --- the plans ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["qwen3.5-397b-a17b", "nemotron-3-ultra-550b-a55b"])
def test_every_plan_is_confirmed_by_fit(run_cli, model):
    code, out, err = run_cli("plan", model, "--ctx", "32k", "--concurrency", "128", "--gpu-type", "h100", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["plans"], d
    assert len({p["gpus"] for p in d["plans"]}) == 1  # all on the fewest count
    for p in d["plans"]:
        h = _confirmed_by_fit(run_cli, "h100", p)
        assert h >= 128 and h == pytest.approx(p["holds"], rel=1e-9)


def test_fewer_gpus_than_the_best_plan_are_rejected_with_a_reason(run_cli):
    # Qwen3.5-397B-A17B in bfloat16 is 739.10 GiB of weights: 9 H100s (9 × 79.19 GiB = 712.7 GiB) cannot hold
    # them, so no layout on 9 or fewer starts, and each says the weights do not fit; every layout on fewer GPUs
    # than the plans' has a reason
    code, out, _ = run_cli(
        "plan", "qwen3.5-397b-a17b", "--ctx", "32k", "--concurrency", "128", "--gpu-type", "h100", "--json"
    )
    d = json.loads(out)
    fewest = min(p["gpus"] for p in d["plans"])
    assert 9 * gpu("h100").total < 793_604_721_632 and fewest >= 10
    small = [r for r in d["rejected"] if r["gpus"] <= 9]
    # each the weights, or a TP the engine refuses: 32 attention heads and 16 GDN key heads take 1, 2, 4, 8, 16
    assert small and all(r["kind"] == "weights" or r["kind"] == "refused" and 16 % r["tp"] for r in small)
    assert {r["tp"] for r in small if r["kind"] == "refused"} == {3, 5, 6, 7, 9}
    assert {r["gpus"] for r in d["rejected"] if r["gpus"] < fewest} == set(range(1, fewest))
    assert max(r["gpus"] for r in d["rejected"]) == fewest  # the search stops on the fewest count


def test_a_target_no_layout_holds_exits_1(run_cli):
    code, out, _ = run_cli(
        "plan", "qwen3.5-397b-a17b", "--ctx", "32k", "--concurrency", "128", "--gpu-type", "h100", "--gpus", "8"
    )
    assert code == 1 and "no layout of up to 8 GPUs" in out


def test_a_target_no_64_gpus_hold_is_answered_without_fitting_them_all():
    # Qwen3.5-27B, 100,000 requests of 256K on H100s: one request keeps at least its 16 full-attention layers'
    # fp8 KV (4 KV heads × 256 × 2 × 1 B = 2 KiB a token and layer: 8 GiB at 262,144 tokens) and its state, so
    # 64 × 79.19 GiB hold a few hundred at most: no count is fitted but one layout of the last, for the
    # engine's own reason
    g = gpu("h100")
    base = Scenario(spec=load_model("qwen3.5-27b"), ctx=262_144, budget=Budget(gpu_mem=g.total, gpu=g.key))
    r = plan(base, 100_000)
    assert not r.plans
    assert 64 * g.total / (16 * 2048 * 262_144) < 100_000
    assert {x.layout.gpus for x in r.rejected} == set(range(1, 65))
    # a TP the engine refuses for the model's heads is its refusal on every count (asked once, not fitted)
    refused = [x for x in r.rejected if x.kind == "refused"]
    assert refused and all("does not divide" in x.reason for x in refused if x.layout.tp > 1)
    fitted = [x for x in r.rejected if x.fitted and x.kind != "refused"]
    assert fitted and {x.layout.gpus for x in fitted} == {64} and r.tried == len(fitted) + len(refused)


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
    code, out, err = run_cli(
        "plan",
        "qwen3-next-80b-a3b",
        "--ctx",
        "64k",
        "--concurrency",
        "64",
        "--gpu-type",
        "h100",
        "--engine",
        "sglang",
        "--json",
    )
    assert code == 0, err
    d = json.loads(out)
    assert d["plans"]
    for p in d["plans"]:
        assert p["engine"] == "sglang"
        h = _confirmed_by_fit(run_cli, "h100", p)
        assert h == pytest.approx(p["holds"]) and h >= 64


def test_plans_rank_by_margin_steps_then_decode_tokens_per_gpu(run_cli):
    # the plans on the fewest count: within a 10 % step of margin the more decode tokens/s per GPU
    # (hybridplan/speed/layout.py) comes first; each plan's rate is the layout's own
    code, out, err = run_cli(
        "plan", "qwen3.5-397b-a17b", "--ctx", "32k", "--concurrency", "128", "--gpu-type", "h100", "--json"
    )
    assert code == 0, err
    plans = json.loads(out)["plans"]
    keys = [(p["gpus"], -int(p["margin"] * 10 // 1), -p["decode"]["tokens_per_s_per_gpu"]) for p in plans]
    assert keys == sorted(keys) and len(plans) >= 2
    assert all(p["decode"]["gpus"] == p["gpus"] and p["decode"]["tokens_per_s"] > 0 for p in plans)
