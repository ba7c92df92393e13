"""The planner stays light: each command imports what it needs and nothing else — no GPU stack, no plotting,
no other command's report, no engine it does not ask for, and no rich console under --json. (How fast it
starts is measured, not asserted: benchmarks/startup.py.)"""

import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
GPU_STACK = ("torch", "triton", "pynvml", "numpy", "matplotlib", "hybridplan.kernels", "hybridplan.profile.pipeline",
             "huggingface_hub")
REPORTS = ("size", "crossover", "engines", "fit", "prefix", "check_log", "models", "gpus")


def _loaded(*argv: str) -> set[str]:
    code = ("import sys, io, contextlib\n"
            "from hybridplan.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    rc = main({list(argv)!r})\n"
            "print(rc, ' '.join(sorted(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] in ("0", "1"), out[0]
    return set(out[1:])


def _others(*needed: str) -> list[str]:
    return [f"hybridplan.reports.{r}" for r in REPORTS if r not in needed]


@pytest.mark.parametrize("argv,needed,not_needed", [
    # size without --engine: vLLM's dtype rules only — no engine sizing, no SGLang pool, no crossover maths
    (("size", "nemotron-h", "--ctx", "131072", "--json"), ("size",),
     ("hybridplan.engines.vllm.sizing", "hybridplan.engines.vllm.engine", "hybridplan.engines.sglang.pool",
      "hybridplan.crossover", "fractions", "hybridplan.render", "rich.console", "rich.table")),
    (("size", "nemotron-h", "--engine", "both", "--json"), ("size", "engines"),
     ("hybridplan.crossover", "hybridplan.render", "rich.console")),
    (("size", "nemotron-h"), ("size",), ("hybridplan.engines.sglang.pool", "hybridplan.crossover")),
    (("crossover", "--json"), ("crossover", "size"),
     ("hybridplan.engines.sglang.pool", "hybridplan.engines.vllm.sizing", "rich.console")),
    (("fit", "nemotron-h", "--kv-budget", "40GiB", "--json"), ("fit",),
     ("hybridplan.crossover", "hybridplan.engines.vllm.prefix", "rich.console")),
    (("fit", "nemotron-h", "--kv-budget", "40GiB", "--engine", "vllm", "--json"), ("fit",),
     ("hybridplan.engines.sglang.pool", "hybridplan.engines.sglang.engine")),
    (("prefix", "nemotron-h", "--shared", "4000", "--json"), ("prefix",),
     ("hybridplan.engines.vllm.sizing", "hybridplan.engines.sglang.pool", "rich.console")),
    (("check-log", str(DATA / "vllm-0.23-nemotron-h.log"), "--json"), ("check_log",),
     ("hybridplan.crossover", "rich.console")),
    (("models", "--json"), ("models",), ("hybridplan.engines.vllm.dtypes", "rich.console")),
])
def test_each_command_imports_only_what_it_needs(argv, needed, not_needed):
    loaded = _loaded(*argv)
    assert {f"hybridplan.reports.{r}" for r in needed} <= loaded
    assert not [m for m in (*GPU_STACK, *_others(*needed), *not_needed) if m in loaded]
