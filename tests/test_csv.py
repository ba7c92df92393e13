"""`--csv` on plan, prefix and check-log: each table parsed back with csv.DictReader and held to the same
command's --json, field by field, so that the CSV cannot drift from the figures. A number must read back as the
same number (no thousands separator), a yes/no as JSON spells it, a missing figure as an empty field; nothing
but the table is printed."""

from __future__ import annotations

import csv
import io
import json
import shlex
from pathlib import Path

import pytest

pytestmark = pytest.mark.cli

DATA = Path(__file__).parent / "data"
PLAN = ["plan", "qwen3-next", "--ctx", "32k", "--concurrency", "64", "--gpu-type", "h100"]
SWEEP = ["prefix", "nemotron-h", "--private", "200", "--sweep", "0:3000:500"]
#: real start-up logs (tests/data/SOURCES.md, tests/data/logs/SOURCES.md): one that matches, with counts of
#: seven digits; one that does not (without the flags it needs, tests/test_real_logs.py), with figures off
LOGS = [str(DATA / "vllm-0.23-nemotron-h.log"), str(DATA / "logs" / "sglang-unknown-qwen3.5-9b-2x24gb-1.log")]


def _both(run_cli, args):
    code, out, err = run_cli(*args, "--csv")
    jcode, jout, _ = run_cli(*args, "--json")
    assert code == jcode, err
    assert err == ""
    return list(csv.DictReader(io.StringIO(out))), json.loads(jout), out


def _same(field: str, value) -> None:
    """A CSV field against the JSON value it must be."""
    if value is None:
        assert field == ""
    elif isinstance(value, bool):
        assert field == ("true" if value else "false")
    elif isinstance(value, int):
        assert int(field) == value and field == str(value)
    elif isinstance(value, float):
        assert float(field) == value
    else:
        assert field == value


def test_plan_csv_is_a_row_per_plan(run_cli):
    rows, d, out = _both(run_cli, PLAN)
    assert out.splitlines()[0].startswith("rank,engine,gpus,tp,pp,dp,")
    assert len(rows) == len(d["plans"]) == 3
    for i, (r, p) in enumerate(zip(rows, d["plans"]), 1):
        _same(r["rank"], i)
        for col in ("engine", "gpus", "tp", "pp", "dp", "expert_parallel", "ep_size", "dp_attention"):
            _same(r[col], p[col])
        _same(r["kv_dtype"], p["variant"]["kv"])
        _same(r["ssm_dtype"], p["variant"]["ssm"])
        _same(r["mamba_cache_mode"], p["variant"]["mode"])
        _same(r["holds_requests"], p["holds"])
        _same(r["margin_fraction"], p["margin"])
        _same(r["decode_tokens_per_s_per_gpu"], p["decode"]["tokens_per_s_per_gpu"])
        for q in ("p10", "p90"):  # the held-out range beside it, as --json carries it
            _same(r[f"decode_tokens_per_s_per_gpu_{q}"], (p["decode_range"] or {}).get(q))
        assert shlex.split(r["command"]) == p["command"]["env"] + p["command"]["argv"]


def test_plan_csv_without_a_plan_is_the_header_alone(run_cli):
    args = ["plan", "qwen3-next", "--ctx", "32k", "--concurrency", "64", "--gpu-type", "h100", "--gpus", "1"]
    code, out, err = run_cli(*args, "--csv")
    assert code == 1 and err == ""
    assert out.splitlines() == [out.splitlines()[0]] and out.startswith("rank,")


def test_prefix_sweep_csv_is_a_row_per_length_and_engine_row(run_cli):
    rows, d, _ = _both(run_cli, SWEEP)
    want = []
    for pt in d["points"]:
        for engine in ("vllm", "sglang"):
            e = pt[engine]
            modes = e["modes"].items() if "modes" in e else [(None, e)]
            for mode, m in modes:
                want.append(
                    (
                        pt["shared"],
                        pt["private"],
                        pt["prompt"],
                        engine,
                        mode,
                        m.get("block_size", m.get("grid")),
                        m["reused_tokens"],
                        m["computed_tokens"],
                        m["later_reused_tokens"],
                        m["later_computed_tokens"],
                    )
                )
    assert len(rows) == len(want) == 7 * 3
    for r, w in zip(rows, want):
        for col, value in zip(("shared_tokens", "private_tokens", "prompt_tokens", "engine"), w[:4]):
            _same(r[col], value)
        if w[4] is not None:
            assert r["row"].endswith(f" {w[4]}")
        for col, value in zip(
            ("grid_tokens", "reused_tokens", "computed_tokens", "later_reused_tokens", "later_computed_tokens"), w[5:]
        ):
            _same(r[col], value)
    # the sweep reuses something somewhere: the table is not all zeros
    assert any(int(r["later_reused_tokens"]) > 0 for r in rows)


def test_prefix_one_length_csv_is_the_sweeps_row(run_cli):
    rows, _, _ = _both(run_cli, SWEEP)
    one, _, _ = _both(run_cli, ["prefix", "nemotron-h", "--private", "200", "--shared", "1500"])
    assert one == [r for r in rows if r["shared_tokens"] == "1500"]


@pytest.mark.parametrize("log", LOGS)
def test_check_log_csv_is_a_row_per_figure(run_cli, log):
    rows, d, out = _both(run_cli, ["check-log", log])
    assert out.splitlines()[0] == "start,engine,figure,unit,logged,predicted,ok"
    assert len(rows) == len(d["rows"]) > 0
    for r, j in zip(rows, d["rows"]):
        for col in ("start", "engine", "figure", "unit", "logged", "predicted", "ok"):
            _same(r[col], j[col])
    assert any("," in j["logged_text"] for j in d["rows"]) or not d["ok"]


@pytest.mark.parametrize("args", [PLAN, SWEEP, ["check-log", LOGS[0]]])
def test_csv_with_json_is_refused_in_one_line(run_cli, args):
    code, out, err = run_cli(*args, "--csv", "--json")
    assert code == 2 and out == ""
    assert "--csv and --json" in err and len(err.strip().splitlines()) == 1
