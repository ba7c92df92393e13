"""Kernel tests: on a machine without a CUDA GPU, Triton runs through its CPU interpreter.

TRITON_INTERPRET must be set before triton decorates the kernels (on the first import of their modules),
hence at conftest import time. The interpreter runs each program instance in Python (milliseconds each), so
every test keeps its grids to a few dozen programs. Without torch (the ``gpu`` or ``test`` extra) each module
that needs it skips itself with ``pytest.importorskip("torch")``, saying so; the test environment installs it, so
there they always run.
"""

from __future__ import annotations

import os

import pytest

try:
    import torch
except ModuleNotFoundError:  # no gpu or test extra: each module that needs torch skips itself (importorskip)
    torch = None

if torch is not None and "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

ON_GPU = torch is not None and torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0")

BF16_ON_CPU_REASON = (
    "bf16 tl.dot/tl.sum give wrong results in the Triton CPU interpreter (and it truncates fp32 -> bf16); "
    "this case runs on a CUDA GPU"
)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "bf16_needs_gpu: the bf16 case of this test uses tl.dot on bf16 and only runs on a CUDA GPU"
    )


@pytest.fixture(scope="session")
def device() -> torch.device:
    pytest.importorskip("torch")
    return torch.device("cuda") if ON_GPU else torch.device("cpu")


@pytest.fixture
def gen() -> torch.Generator:
    pytest.importorskip("torch")
    g = torch.Generator()
    g.manual_seed(1234)
    return g


def pytest_generate_tests(metafunc):
    """A test taking a ``state_dtype`` argument runs once per state-pool dtype: fp32, fp16 and bf16.

    bf16 runs on the CPU too for kernels without bf16 dots (their bounds use ``store_roundoff``, which
    allows for the interpreter's truncating conversion); tests marked ``bf16_needs_gpu`` skip it there.
    """
    if "state_dtype" in metafunc.fixturenames:
        bf16_marks = []
        if metafunc.definition.get_closest_marker("bf16_needs_gpu") is not None:
            bf16_marks = [pytest.mark.skipif(not ON_GPU, reason=BF16_ON_CPU_REASON)]
        metafunc.parametrize(
            "state_dtype",
            [
                pytest.param(torch.float32, id="fp32"),
                pytest.param(torch.float16, id="fp16"),
                pytest.param(torch.bfloat16, id="bf16", marks=bf16_marks),
            ],
        )


def pytest_collection_modifyitems(config, items):
    """The interpreter converts loop bounds loaded from memory through NumPy's deprecated array-to-int path
    (one warning per loop); that is Triton's business, not the kernels', so keep it out of the report."""
    here = os.path.dirname(__file__)
    mark = pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0 to a scalar:DeprecationWarning")
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(mark)


@pytest.fixture(scope="session")
def on_gpu() -> bool:
    return ON_GPU
