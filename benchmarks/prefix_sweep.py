"""`prefix --sweep` in-process: the seconds a sweep takes, best of ``--repeat`` runs, for the sweeps the docs
name and 2,000-point ones (each point is a replay of three requests through every policy: hybridplan/reports/
prefix.py). Run against another tree (``--tree``, e.g. an older checkout) for the ratio in the same run.

    python benchmarks/prefix_sweep.py [--tree PATH ...] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: (model, sweep, private tokens, vLLM release)
SWEEPS = (
    ("nemotron-h", "0:6000:100", 200, "0.33.0"),
    ("nemotron-h", "0:20000:10", 200, "0.33.0"),
    ("nemotron-h", "0:20000:10", 200, "0.28.0"),
    ("nemotron-h", "0:200000:100", 200, "0.33.0"),
    ("qwen3-next", "0:20000:10", 200, "0.33.0"),
)
CHILD = """
import json, sys, time
sys.path[:0] = [{tree!r}, {tree!r} + "/tests"]
from helpers import scenario
from hybridplan.reports.prefix import prefix_sweep
out = []
for model, sweep, private, version in {sweeps!r}:
    sc = scenario(model, minor=version, allow_long_context=True)
    best = 1e9
    for _ in range({repeat}):
        t = time.perf_counter(); r = prefix_sweep(sc, sweep, private); best = min(best, time.perf_counter() - t)
    out.append({{"model": model, "sweep": sweep, "vllm": version, "points": len(r.points), "seconds": best}})
print(json.dumps(out))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", default=None, help="a checkout to time (default: this one)")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    for tree in a.tree or [str(ROOT)]:
        code = CHILD.format(tree=str(Path(tree).resolve()), sweeps=SWEEPS, repeat=a.repeat)
        rows = json.loads(
            subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/").stdout
        )
        for r in rows:
            print(
                f"{tree}  {r['model']} --sweep {r['sweep']} (vLLM {r['vllm']}): {r['points']} points, "
                f"{r['seconds']:.2f} s, {1000 * r['seconds'] / r['points']:.2f} ms a point"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
