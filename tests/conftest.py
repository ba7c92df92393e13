"""Shared fixtures. Every test module is marked with its tier (a module-level ``pytestmark``; the markers are
registered in pyproject.toml, and ``--strict-markers`` fails a misspelt one):

- ``unit``: pure functions and reports, in-process;
- ``cli``: commands as a person types them (the ``run_cli`` fixture or a subprocess);
- ``golden``: held to outside fixtures (the docs' shown output, real logs under tests/data, published schemas);
- ``kernels``: the Triton kernels and the profiler (interpreted where there is no GPU: TRITON_INTERPRET=1);
- ``native``: the replay's C modules against their Python twins (skipped where they were not built).

Run one tier with ``pytest -m unit``, several with ``pytest -m "unit or cli"``, all but one with
``pytest -m "not kernels"``."""

from pathlib import Path

import pytest

#: the real HF configs the project is tested against (tests/data/configs/SOURCES.md says where each came from)
CONFIGS = Path(__file__).resolve().parent / "data" / "configs"


@pytest.fixture
def configs() -> Path:
    return CONFIGS


@pytest.fixture
def run_cli(capsys):
    """Run the CLI in-process; returns (exit code, stdout, stderr)."""
    from hybridplan.cli import main

    def run(*args: str):
        code = main([str(a) for a in args])
        out = capsys.readouterr()
        return code, out.out, out.err

    return run
