"""The replay's modules the install compiles with Cython from their own source (setup.py ``COMPILED``,
hybridplan/_compiled.py): built here, no older than their source, and replaying every figure exactly as their
Python source does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hybridplan import _compiled

ROOT = Path(__file__).resolve().parents[1]
#: configurations of benchmarks/replay_fingerprint.py that take every path of the rules: align with retention 0,
#: a hash unit under the block, MTP with the shared-prefix checkpoint, an evicting pool with concurrency, a
#: pre-0.24 pool, all mode, SGLang's extra_buffer
CONFIGS = "q4-29,q4-26-unit16,q4-31-mtp-spc,q4-29-tight,q4-23-tight-c4,nh-27-all,q4-sg23-eb"


def test_the_replay_modules_are_compiled_and_fresh():
    """This environment has Cython and a C compiler (the build-system's requirements), so the install compiled
    them; a build older than its source runs the old code and must be rebuilt (``pip install -e .``)."""
    assert [n for n in _compiled.MODULES if not _compiled.is_compiled(n)] == []
    assert _compiled.stale() == [], "rebuild the compiled modules: pip install -e ."


def test_the_setup_compiles_the_listed_modules():
    """setup.py's list and hybridplan/_compiled.py's are the same modules."""
    text = (ROOT / "setup.py").read_text()
    for name in _compiled.MODULES:
        assert f'"{_compiled.source(name).relative_to(ROOT).as_posix()}"' in text


def _fingerprint(tmp: Path, pure: bool) -> dict:
    out = tmp / ("pure.json" if pure else "compiled.json")
    env = dict(os.environ, HYBRIDPLAN_PURE="1" if pure else "0")
    code = ("import sys, runpy; import hybridplan._compiled as c; "
            "print([c.is_compiled(n) for n in c.MODULES]); sys.argv = sys.argv[1:]; "
            "runpy.run_path(sys.argv[0], run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", code, str(ROOT / "benchmarks" / "replay_fingerprint.py"),
                           "--write", str(out), "--only", CONFIGS], env=env, cwd=ROOT, capture_output=True,
                          text=True, check=True)
    assert done.stdout.splitlines()[0] == str([not pure] * len(_compiled.MODULES))
    return json.loads(out.read_text())


def test_compiled_and_source_replay_every_figure_alike(tmp_path):
    """42 replays (seven configurations over the fingerprint's six traces), every row's totals, reasons,
    evictions and peaks and every request's reuse and reason, through the compiled modules and through their
    Python source."""
    compiled = _fingerprint(tmp_path, pure=False)
    assert len(compiled) == 7 * 6
    assert compiled == _fingerprint(tmp_path, pure=True)
