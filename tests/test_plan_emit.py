"""`plan --emit FORMAT [--pick N]`: the chosen plan written as `fit` writes it. The reference is `fit` itself run
on the command the plan prints (its own --json ``command``), pasted after ``--``: the same engine start, so the
same file, byte for byte. The manifests' GPU limits are the plan's TP × PP (one replica's GPUs: vLLM and SGLang
each run TP × PP ranks per engine, vllm/config/parallel.py ``world_size``, SGLang server_args.py
``tp_size * pp_size``)."""

from __future__ import annotations

import json

import pytest
import yaml

pytestmark = pytest.mark.cli

#: a target both engines plan for on three GPUs (three plans: two vLLM, one SGLang)
PLAN = ["plan", "qwen3-next", "--ctx", "32k", "--concurrency", "64", "--gpu-type", "h100"]
FORMATS = {"vllm": "vllm-config", "sglang": "sglang-config"}
#: a dense hybrid on L40S: five vLLM plans on eight GPUs, whose data-parallel ranks may run as replicas
#: (hybridplan/engines/vllm/deploy.py ``dp_replicas``: no MoE)
DENSE = ["plan", "nemotron-h", "--ctx", "8192", "--concurrency", "2000", "--gpu-type", "l40s"]


def _plans(args: list[str]) -> list[dict]:
    import contextlib
    import io

    from hybridplan.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main([*args, "--json"])
    assert code == 0
    return json.loads(buf.getvalue())["plans"]


@pytest.fixture(scope="module")
def plans():
    return _plans(PLAN)


@pytest.fixture(scope="module")
def dense():
    return _plans(DENSE)


def _pods(out: str) -> list[tuple[int, list[int]]]:
    """(replicas, GPU limits of its containers) per Deployment or LeaderWorkerSet."""
    docs = [d for d in yaml.safe_load_all(out) if d]
    found = []
    for d in docs:
        if d["kind"] not in ("Deployment", "LeaderWorkerSet"):
            continue
        spec = d["spec"]
        templates = (
            [spec["template"]]
            if d["kind"] == "Deployment"
            else [
                t
                for t in (
                    spec["leaderWorkerTemplate"].get("leaderTemplate"),
                    spec["leaderWorkerTemplate"].get("workerTemplate"),
                )
                if t
            ]
        )
        found.append(
            (
                spec["replicas"],
                [c["resources"]["limits"]["nvidia.com/gpu"] for t in templates for c in t["spec"]["containers"]],
            )
        )
    return found


def test_the_case_has_plans_of_both_engines(plans):
    assert {p["engine"] for p in plans} == {"vllm", "sglang"}


@pytest.mark.parametrize("pick", [None, 1, 2, 3])
def test_each_pick_is_the_file_fit_writes_for_its_command(run_cli, plans, pick):
    n = pick or 1  # the best plan by default
    p = plans[n - 1]
    fmt = FORMATS[p["engine"]]
    code, out, err = run_cli(*PLAN, "--emit", fmt, *(["--pick", str(pick)] if pick else []))
    assert code == 0, err
    code, want, err = run_cli(
        "fit", "--gpu-type", "h100", "--emit", fmt, "--", *p["command"]["env"], *p["command"]["argv"]
    )
    assert code == 0, err
    assert out == want
    assert out.startswith(f"# {p['engine']} --config file")


@pytest.mark.parametrize("pick", [1, 2, 3, 4, 5])
def test_k8s_gpu_limits_are_the_plans_tp_times_pp_and_dp_the_replicas(run_cli, dense, pick):
    p = dense[pick - 1]
    code, out, err = run_cli(*DENSE, "--emit", "k8s", "--pick", str(pick))
    assert code == 0, err
    assert _pods(out) == [(p["dp"], [p["tp"] * p["pp"]])]


def test_dense_case_varies_tp_pp_and_dp(dense):
    assert len(dense) == 5 and len({(p["tp"], p["pp"], p["dp"]) for p in dense}) == 5


@pytest.mark.parametrize("pick", [1, 2, 3])
def test_k8s_of_moe_plans_keep_the_data_parallel_ranks_in_one_engine(run_cli, plans, pick):
    """qwen3-next is MoE: vLLM's data-parallel ranks are one engine (and SGLang's always are), so one pod holds
    TP × PP × DP GPUs: still the plan's GPUs."""
    p = plans[pick - 1]
    code, out, err = run_cli(*PLAN, "--emit", "k8s", "--pick", str(pick))
    assert code == 0, err
    assert _pods(out) == [(1, [p["tp"] * p["pp"] * p["dp"]])]
    assert p["tp"] * p["pp"] * p["dp"] == p["gpus"]


def test_out_writes_the_files_and_the_plans_follow(run_cli, tmp_path):
    code, out, err = run_cli(*PLAN, "--emit", "vllm-config", "--out", tmp_path)
    assert code == 0, err
    assert "hybridplan: wrote" in err and "Plans that start" in out
    assert list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "args, message",
    [
        (["--emit", "vllm-config", "--pick", "4"], "--pick 4: there are 3 plans, pick 1 to 3"),
        (["--emit", "vllm-config", "--pick", "0"], "--pick 0"),
        (["--pick", "2"], "--pick chooses the plan --emit writes"),
        (["--emit", "vllm-config", "--json"], "give --out DIR"),
        (["--emit", "vllm-config", "--gpus", "1"], "no plan holds the target, so there is nothing to pick"),
    ],
)
def test_what_cannot_be_emitted_is_one_line(run_cli, args, message):
    code, out, err = run_cli(*PLAN, *args)
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1
