"""hybridplan.api: each command as a function whose report serialises to exactly what the command's --json prints,
taking the command's own arguments; docs/api.md's examples run as written."""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import pytest

from hybridplan import api
from hybridplan.errors import PlanError

pytestmark = pytest.mark.cli

ROOT = Path(__file__).resolve().parents[1]
LOG = "tests/data/logs/vllm-0.10.2-qwen3-next-80b-a3b-instruct-2xh200-1.log"
TRACE = "tests/data/traces/mooncake-conversation-300.jsonl"

#: (function, positional, options, the same as command-line arguments)
CALLS = [
    (api.size, ["qwen3-next"], {"tp": 4, "ctx": 131072}, ["size", "qwen3-next", "--tp", "4", "--ctx", "131072"]),
    (api.crossover, ["nemotron-h"], {}, ["crossover", "nemotron-h"]),
    (
        api.fit,
        ["nemotron-h"],
        {"ctx": 8192, "kv_budget": "40GiB", "enforce_eager": True},
        ["fit", "nemotron-h", "--ctx", "8192", "--kv-budget", "40GiB", "--enforce-eager"],
    ),
    (
        api.prefix,
        ["nemotron-h"],
        {"shared": 4000, "private": 200},
        ["prefix", "nemotron-h", "--shared", "4000", "--private", "200"],
    ),
    (
        api.speed,
        ["nemotron-h"],
        {"gpu_type": "h100", "concurrency": 8},
        ["speed", "nemotron-h", "--gpu-type", "h100", "--concurrency", "8"],
    ),
    (
        api.plan,
        ["nemotron-h"],
        {"ctx": 8192, "concurrency": 64, "gpu_type": "h100"},
        ["plan", "nemotron-h", "--ctx", "8192", "--concurrency", "64", "--gpu-type", "h100"],
    ),
    (api.check_log, [LOG], {}, ["check-log", LOG]),
    (
        api.replay,
        [TRACE, "qwen3.5-4b"],
        {"kv_budget": "20GiB", "engine": "vllm", "limit": 60},
        ["replay", TRACE, "qwen3.5-4b", "--kv-budget", "20GiB", "--engine", "vllm", "--limit", "60"],
    ),
]


@pytest.mark.parametrize("fn,positional,options,argv", CALLS, ids=[c[3][0] for c in CALLS])
def test_a_reports_dict_is_what_json_prints(run_cli, fn, positional, options, argv):
    code, out, _ = run_cli(*argv, "--json")
    assert code in (0, 1)
    assert fn(*positional, **options).to_dict() == json.loads(out)


def test_an_engine_line_is_a_list(run_cli):
    line = ["vllm", "serve", "nvidia/Nemotron-H-8B-Base-8K", "--max-model-len", "8192", "--port", "8000"]
    code, out, _ = run_cli("fit", "--kv-budget", "40GiB", "--json", "--", *line)
    assert api.fit(kv_budget="40GiB", engine_line=line).to_dict() == json.loads(out)


def test_bad_input_raises_the_line_the_command_prints(run_cli):
    code, _, err = run_cli("fit", "nemotron-h", "--ctx", "8192", "--kv-budget", "40GiB", "--tp", "3")
    assert code == 2
    with pytest.raises(PlanError) as raised:
        api.fit("nemotron-h", ctx=8192, kv_budget="40GiB", tp=3)
    assert err.strip() == f"hybridplan: error: {raised.value}"
    with pytest.raises(ValueError, match="fit\\(\\) takes no option 'kv_budgt'"):
        api.fit("nemotron-h", kv_budgt="40GiB")
    with pytest.raises(ValueError, match="enforce_eager is a switch"):
        api.fit("nemotron-h", kv_budget="40GiB", enforce_eager="yes")


def test_a_call_prints_nothing(capsys):
    api.fit("nemotron-h", ctx=8192, kv_budget="40GiB")
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""


def test_the_docs_examples_run_as_written():
    result = doctest.testfile(str(ROOT / "docs" / "api.md"), module_relative=False, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 8 and result.failed == 0
