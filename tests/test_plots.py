"""`replay --plot` and `plan --plot`: each writes a PNG, refuses a bad path in one line, and draws the figures its
report's --json gives (hybridplan/plots.py ``hit_rate_series``, ``gap_bars``, ``plan_series``). No image is
compared: the PNG is checked by its signature and header (the PNG specification, section 5.2 and 11.2.2)."""

import json
import struct
from collections import Counter
from itertools import accumulate

import pytest

from hybridplan import api, plots

pytestmark = pytest.mark.cli

TRACE = "tests/data/traces/mooncake-conversation-300.jsonl"
#: a short replay: 40 requests of the Mooncake excerpt, every engine row and the gap
REPLAY = (TRACE, "qwen3-next", "--tp", "4", "--kv-budget", "60GiB", "--limit", "40")
REPLAY_KW = {"tp": 4, "kv_budget": "60GiB", "limit": 40}
#: a plan found on 3 H100s (the layouts on 1 and 2 fail), both engines among its plans
PLAN = ("qwen3-next", "--ctx", "32k", "--concurrency", "64", "--gpu-type", "h100")
PLAN_KW = {"ctx": "32k", "concurrency": 64, "gpu_type": "h100"}


def _png(path) -> tuple[int, int]:
    """The image's width and height from its IHDR chunk, after checking the PNG signature."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:8]
    assert data[12:16] == b"IHDR"
    assert len(data) > 10_000  # a drawn figure, not an empty canvas
    return struct.unpack(">II", data[16:24])


def _one_line(code, out, err, *needles):
    assert code == 2, (code, out, err)
    assert out == "" and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for n in needles:
        assert n in err, err


def test_replay_plot_draws_each_rows_hit_rate_over_the_trace_and_its_gap(run_cli, tmp_path):
    png = tmp_path / "replay.png"
    code, out, err = run_cli("replay", *REPLAY, "--plot", png, "--json")
    assert code == 0, err
    w, h = _png(png)
    assert w > 800 and h > 800  # the two panels
    d = json.loads(out)
    assert "sweep" not in d  # no --plot-over: the trace view, not the sweep
    series = plots.hit_rate_series(api.replay(TRACE, "qwen3-next", **REPLAY_KW))
    assert [label for label, _, _ in series] == [row["label"] for row in d["rows"]]
    for (label, xs, ys), row in zip(series, d["rows"]):
        # one point per request replayed, ending at the row's own token hit rate
        assert xs == list(range(1, row["requests"] + 1))
        assert ys[-1] == pytest.approx(row["token_hit_rate"], rel=1e-12)
        # and every point is the hit rate so far from --json's per-request list
        reused = list(accumulate(r["reused"][label] for r in d["requests"]))
        prompt = list(accumulate(r["prompt_tokens"] for r in d["requests"]))
        assert ys == pytest.approx([u / p if p else 0.0 for u, p in zip(reused, prompt)], rel=1e-12)


def test_replay_plot_gap_bars_are_the_reports_gap_cause_by_cause():
    report = api.replay(TRACE, "qwen3-next", **REPLAY_KW)
    d = report.to_dict()
    gapped = [row for row in d["rows"] if "gap" in row]
    bars = plots.gap_bars(report)
    assert gapped and [label for label, _, _ in bars] == [row["label"] for row in gapped]
    for (_, reused, causes), row in zip(bars, gapped):
        g = row["gap"]
        assert reused == g["reused_tokens"] == row["reused_tokens"]
        assert [name for name, _ in causes] == g["order"]
        assert dict(causes) == {name: c["tokens"] for name, c in g["lost"].items()}
        assert reused + sum(t for _, t in causes) == g["ideal_tokens"]  # the bar ends at the ideal cache


def test_replay_plot_over_still_draws_the_sweep(run_cli, tmp_path):
    png = tmp_path / "sweep.png"
    code, out, err = run_cli("replay", *REPLAY[:-1], "20", "--no-gap", "--plot", png, "--plot-over", "block", "--json")
    assert code == 0, err
    _png(png)
    assert json.loads(out)["sweep"]["over"] == "block"


@pytest.mark.parametrize(
    "argv, needles",
    [
        (("--plot-over", "budget"), ("--plot-over", "--plot FILE.png")),
        (("--plot", "x.png", "--plot-over", "context"), ("--plot-over takes budget or block", "'context'")),
        (("--plot", "x.txt"), ("--plot x.txt", ".png")),
    ],
)
def test_replay_plot_refusals(run_cli, tmp_path, monkeypatch, argv, needles):
    monkeypatch.chdir(tmp_path)
    from pathlib import Path

    trace = str(Path(__file__).parent.parent / TRACE)
    _one_line(*run_cli("replay", trace, *REPLAY[1:], *argv), *needles)
    assert not any(tmp_path.iterdir())


def test_plot_to_a_missing_folder_is_one_line(run_cli, tmp_path):
    png = tmp_path / "no" / "such" / "folder" / "x.png"
    _one_line(
        *run_cli(
            "replay",
            "synthetic",
            "qwen3.5-4b",
            "--shared",
            "1500",
            "--private",
            "700",
            "--users",
            "4",
            "--kv-budget",
            "40GiB",
            "--plot",
            png,
        ),
        f"cannot write {png}",
    )


def test_plan_plot_draws_the_plans_tok_s_per_gpu_against_gpus(run_cli, tmp_path):
    png = tmp_path / "plan.png"
    code, out, err = run_cli("plan", *PLAN, "--plot", png, "--json")
    assert code == 0, err
    _png(png)
    d = json.loads(out)
    s = plots.plan_series(api.plan("qwen3-next", **PLAN_KW))
    # each plan as the table numbers it, at its GPUs and decode tok/s per GPU
    assert [(p["rank"], p["engine"], p["gpus"], p["tokens_per_s_per_gpu"]) for p in s["plans"]] == [
        (i + 1, p["engine"], p["gpus"], p["decode"]["tokens_per_s_per_gpu"]) for i, p in enumerate(d["plans"])
    ]
    assert {p["engine"] for p in s["plans"]} == {"vllm", "sglang"}
    # every layout listed or rejected is counted once, at its GPU count, fitted or not as --json says
    drawn = Counter()
    for n, by in s["tried"].items():
        for key, count in by.items():
            drawn[(n, key == "plan" or key[1], key == "plan")] += count
    listed = Counter((p["gpus"], True, True) for p in d["plans"]) + Counter(
        (x["gpus"], x["fitted"], False) for x in d["rejected"]
    )
    assert drawn == listed
    assert min(s["tried"]) == 1 and min(p["gpus"] for p in d["plans"]) == max(s["tried"])


def test_plan_plot_without_a_plan_draws_why_and_exits_1(run_cli, tmp_path):
    # --gpus 2: the plan above needs 3 H100s, so every layout tried fails
    png = tmp_path / "none.png"
    code, out, err = run_cli("plan", *PLAN, "--gpus", "2", "--plot", png)
    assert code == 1, err
    _png(png)
    assert f"plot written to {png}" in out


def test_plan_plot_refusals(run_cli, tmp_path):
    _one_line(*run_cli("plan", *PLAN, "--plot", tmp_path / "p.csv"), "name a file ending in .png")
    missing = tmp_path / "missing" / "p.png"
    _one_line(*run_cli("plan", *PLAN, "--gpus", "1", "--plot", missing), f"cannot write {missing}")


def test_plan_plot_beside_csv_and_emit(run_cli, tmp_path):
    # --csv prints the table alone and --emit without --out the files alone: the plot is written all the same
    for extra, first in ((("--csv",), "rank,"), (("--emit", "vllm-config"), "# ")):
        png = tmp_path / f"{extra[-1]}.png"
        code, out, err = run_cli("plan", *PLAN, *extra, "--plot", png)
        assert code == 0, err
        _png(png)
        assert out.startswith(first) and "plot written" not in out
