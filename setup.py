"""The replay's native code; everything else about the package is in pyproject.toml.

Two C modules, each beside its Python twin, both optional: where no C compiler (or no Python headers) is at
hand, the build skips them and the twins run, with the same results, a few times slower.

- the vLLM block pool: hybridplan/engines/vllm/_block_pool.c, twin of block_pool.py ``PyPool``;
- the chained hashes, a Mooncake line's runs and the ideal cache: hybridplan/replay/_speedups.c, twins in
  trace.py and loop.py.

tests/test_block_pool.py and tests/test_speedups.py hold each equal to its twin wherever it was built;
``HYBRIDPLAN_REQUIRE_NATIVE=1`` (set by .ci/run) makes them fail where it was not.
"""

from setuptools import Extension, setup

NATIVE = [
    Extension(
        "hybridplan.engines.vllm._block_pool",
        ["hybridplan/engines/vllm/_block_pool.c"],
        depends=["hybridplan/_table.h"],
        optional=True,
        extra_compile_args=["-O2"],
    ),
    Extension(
        "hybridplan.replay._speedups",
        ["hybridplan/replay/_speedups.c"],
        depends=["hybridplan/_table.h"],
        optional=True,
        extra_compile_args=["-O2"],
    ),
]

setup(ext_modules=NATIVE)
