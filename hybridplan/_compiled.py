"""The modules the install compiles from their own source with Cython (setup.py ``COMPILED``), and a way to run
their Python source instead (``HYBRIDPLAN_PURE=1``, or ``use_source``): for the tests that hold the two equal,
and for anyone who edits one of them without rebuilding."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from pathlib import Path

#: the compiled modules (setup.py ``COMPILED``, as module names)
MODULES = ("hybridplan.engines.vllm.prefix_cache", "hybridplan.replay.loop", "hybridplan.replay.trace")

ROOT = Path(__file__).resolve().parent


def source(name: str) -> Path:
    """The .py file of a compiled module."""
    return ROOT.joinpath(*name.split(".")[1:]).with_suffix(".py")


def is_compiled(name: str) -> bool:
    """Whether the module of that name runs from its compiled build (imports it)."""
    mod = importlib.import_module(name)
    return not str(mod.__file__).endswith(".py")


def stale() -> list[str]:
    """The compiled builds older than their source (edited since the install): those to rebuild."""
    out = []
    for name in MODULES:
        spec = importlib.util.find_spec(name)
        origin = Path(spec.origin) if spec and spec.origin else None
        if origin is not None and origin.suffix != ".py" and origin.stat().st_mtime < source(name).stat().st_mtime:
            out.append(name)
    return out


class _Source(importlib.abc.MetaPathFinder):
    """Finds the compiled modules' .py source ahead of their builds."""

    def find_spec(self, name, path=None, target=None):
        if name not in MODULES:
            return None
        src = str(source(name))
        return importlib.util.spec_from_file_location(name, src, loader=importlib.machinery.SourceFileLoader(name, src))


def use_source() -> None:
    """From now on, import the compiled modules from their Python source (before anything imports them)."""
    loaded = [n for n in MODULES if n in sys.modules]
    if loaded:
        raise RuntimeError(f"already imported: {', '.join(loaded)}")
    sys.meta_path.insert(0, _Source())
