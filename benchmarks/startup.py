"""Start-up speed of the planner: `hybridplan size nemotron-h --ctx 131072 --json` against a bare
`python -c "import typer, rich, yaml"` on the same machine (target: under 1.5× that baseline).

    python benchmarks/startup.py [--runs 21] [--limit 1.5] [--json]

The package's bytecode is compiled first, as a wheel install does, so that both sides start from .pyc files.
Runs both commands alternately (so drifts in machine load hit both alike), takes the median wall time of
each, prints the ratio, and exits 1 when it is above the limit.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

BASELINE = [sys.executable, "-c", "import typer, rich, yaml"]
ENV = {**os.environ, "PYTHONDONTWRITEBYTECODE": ""}


def planner_command() -> list[str]:
    """The console script installed beside this interpreter (what a user runs), else `python -m hybridplan`.
    Never a `hybridplan` found elsewhere on PATH: that may be another environment's, or a shim to nothing."""
    exe = Path(sys.executable).parent / "hybridplan"
    return [str(exe)] if exe.is_file() and os.access(exe, os.X_OK) else [sys.executable, "-m", "hybridplan"]


def wall(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=ENV)
    return time.perf_counter() - t0


def measure(runs: int) -> dict:
    import compileall

    import hybridplan

    compileall.compile_dir(hybridplan.__path__[0], quiet=1, force=False)
    size = planner_command() + ["size", "nemotron-h", "--ctx", "131072", "--json"]
    for cmd in (BASELINE, size):  # warm the file cache and the bytecode caches
        wall(cmd)
    base, plan = [], []
    for _ in range(runs):
        base.append(wall(BASELINE))
        plan.append(wall(size))
    b, p = statistics.median(base), statistics.median(plan)
    return {"runs": runs, "baseline_s": b, "size_s": p, "ratio": p / b, "baseline_cmd": " ".join(BASELINE),
            "size_cmd": " ".join(size)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--limit", type=float, default=1.5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    r = measure(args.runs)
    if args.json:
        print(json.dumps(r, indent=2))
    else:
        print(f"import typer, rich, yaml : {r['baseline_s'] * 1e3:7.1f} ms (median of {r['runs']})")
        print(f"size nemotron-h --json   : {r['size_s'] * 1e3:7.1f} ms")
        print(f"ratio                    : {r['ratio']:.2f}× (limit {args.limit}×)")
    return 0 if r["ratio"] <= args.limit else 1


if __name__ == "__main__":
    sys.exit(main())
