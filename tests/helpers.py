"""Scenarios as the tests write them: a model name, a context, a vLLM release (a minor such as 33 means its
newest patch; a string names a release), and any other field."""

from __future__ import annotations

import importlib
import os

import pytest

from hybridplan.engines.sglang.releases import release as sglang_release
from hybridplan.engines.sglang.settings import SglangSettings
from hybridplan.engines.vllm.dtypes import footprint as vllm_footprint
from hybridplan.engines.vllm.releases import release as vllm_release
from hybridplan.engines.vllm.settings import VllmSettings
from hybridplan.loader import load_model
from hybridplan.memory import Footprint
from hybridplan.scenario import DtypeChoice, Scenario
from hybridplan.spec import ModelSpec

GiB = 1 << 30


def vrel(minor: int | str):
    """``33`` → vLLM 0.33's newest patch; ``"0.20.0"`` → that release."""
    return vllm_release(minor if isinstance(minor, str) else f"0.{minor}")


def scenario(
    model: str | ModelSpec,
    ctx: int = 8192,
    *,
    minor: int | str = 33,
    sglang_version: str | None = None,
    vllm: dict | None = None,
    sglang: dict | None = None,
    **fields,
) -> Scenario:
    """``vllm`` and ``sglang`` hold the engines' flags (``dict(mode="all")``); ``fields`` the scenario's own."""
    spec = load_model(model) if isinstance(model, str) else model
    return Scenario(
        spec,
        ctx=ctx,
        vllm=VllmSettings(release=vrel(minor), **(vllm or {})),
        sglang=SglangSettings(release=sglang_release(sglang_version), **(sglang or {})),
        **fields,
    )


def footprint(
    model: str | ModelSpec,
    *,
    tp: int = 1,
    dtypes: DtypeChoice = DtypeChoice(),
    spec_tokens: int = 0,
    minor: int | str = 33,
) -> Footprint:
    """One sequence under vLLM's dtype rules."""
    return vllm_footprint(scenario(model, minor=minor, tp=tp, dtypes=dtypes, spec_tokens=spec_tokens))


def one_line_error(code, out, err, *needles) -> None:
    """Bad input's answer: exit code 2, nothing on stdout, one line on stderr holding every needle."""
    assert code == 2, (code, out, err)
    assert "Traceback" not in err and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for n in needles:
        assert n in lines[0], lines[0]


# --- the replay's native code (setup.py): optional where no C compiler is at hand ----------------------------
#
# Where it was built, the tests hold each C module equal to its Python twin. Where it was not, those tests skip
# with the reason, and the twins alone run the replays, unless HYBRIDPLAN_REQUIRE_NATIVE=1 (scripts/test sets it
# under CI=true), which turns a missing build into a failure.

REQUIRE_NATIVE = os.environ.get("HYBRIDPLAN_REQUIRE_NATIVE") == "1"


def native_built(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def native(module: str):
    """A mark for a test that runs ``module``'s C build: skipped where it was not built, unless required."""
    built = native_built(module)
    return pytest.mark.skipif(
        not built and not REQUIRE_NATIVE, reason=f"{module} was not built here (no C compiler?): its Python twin runs"
    )


def assert_native_built(module: str) -> None:
    """A build required (CI) must be there; elsewhere a missing one is a skip that says so."""
    if native_built(module):
        return
    if REQUIRE_NATIVE:
        pytest.fail(f"{module} was not built, and HYBRIDPLAN_REQUIRE_NATIVE=1: is a C compiler there?")
    pytest.skip(f"{module} was not built here (no C compiler?): its Python twin runs")
