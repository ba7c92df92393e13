"""The replay's compiled code; everything else about the package is in pyproject.toml.

Two kinds, both optional (an install never fails for them: where no C compiler is at hand the Python runs, with
the same results):

- the native code, each beside its Python twin: the vLLM block pool (hybridplan/engines/vllm/_block_pool.c,
  twin of block_pool.py ``PyPool``), the chained hashes, a Mooncake line's runs and the ideal cache
  (hybridplan/replay/_speedups.c, twins in trace.py and loop.py);
- the replay's hot Python modules compiled by Cython from their own source (``COMPILED``): the same code, each
  rule still written once, in Python, run without the interpreter's dispatch (about a quarter faster a request).
  The compiled module stands in front of its .py file, so after editing one of them rebuild (``pip install -e
  .``); tests/test_compiled.py fails while a build is older than its source. ``HYBRIDPLAN_PURE=1`` at install
  time leaves them out.
"""

import os

from setuptools import Extension, setup

NATIVE = [
    Extension("hybridplan.engines.vllm._block_pool", ["hybridplan/engines/vllm/_block_pool.c"],
              depends=["hybridplan/_table.h"], optional=True, extra_compile_args=["-O2"]),
    Extension("hybridplan.replay._speedups", ["hybridplan/replay/_speedups.c"], depends=["hybridplan/_table.h"],
              optional=True, extra_compile_args=["-O2"]),
]

#: the modules a replay spends its time in, compiled from their own source (hybridplan/_compiled.py lists them
#: for the test that they are fresh)
COMPILED = ["hybridplan/engines/vllm/prefix_cache.py", "hybridplan/replay/loop.py", "hybridplan/replay/trace.py"]


def compiled() -> list[Extension]:
    if os.environ.get("HYBRIDPLAN_PURE") == "1":
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:  # a build without build isolation and without Cython: the Python alone
        return []
    exts = [Extension(path[:-3].replace("/", "."), [path]) for path in COMPILED]
    # Python's semantics exactly: annotations are not C types, ints stay Python ints
    built = cythonize(exts, build_dir="build/cython", quiet=True,
                      compiler_directives={"language_level": 3, "annotation_typing": False, "binding": True,
                                           "emit_code_comments": False})
    for ext in built:  # (cythonize makes new extensions, which do not keep `optional`)
        ext.optional = True
    return built


setup(ext_modules=NATIVE + compiled())
