"""How long `hybridplan plan`'s search takes: a few shipped models at `--gpus 64` (the default), each in a fresh
process, as a user runs it.

    python benchmarks/plan_search.py [--runs 3] [--json] [--out benchmarks/results/plan_search-DATE.json]

Each case runs `python -m hybridplan plan … --json` in its own process, ``--runs`` times. Per run it keeps the
seconds of the search alone (the call of ``hybridplan.plan.plan``, timed in that process: wall and CPU), the
whole command's wall and CPU seconds, and from the JSON the layouts tried and the fewest GPUs found. The best
(smallest) of the runs is printed: the machine is shared, and its load only ever adds time. The CPU seconds
move less with the load than the wall seconds do.

The cases: the issue-28 case (Qwen3.5-397B-A17B, 256K, 16 requests, B200), the docs' case (the same model at
32k and 128 requests on H100), Nemotron-3-Ultra on H200, a small model (Nemotron-H-8B, 8k, 2,000 requests on
L40S, its fewest above one GPU), Qwen3.5-27B at 256K on RTX 4090s (16 of them), the largest shipped model
(Qwen3.8-2.4T-A95B on H200s: 40, where every count below has dozens of layouts that load), and a target no
64 GPUs hold.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CASES = {
    "issue 28: qwen3.5-397b-a17b 256K x16 b200": [
        "qwen3.5-397b-a17b",
        "--ctx",
        "256K",
        "--concurrency",
        "16",
        "--gpu-type",
        "b200",
    ],
    "docs: qwen3.5-397b-a17b 32k x128 h100": [
        "qwen3.5-397b-a17b",
        "--ctx",
        "32k",
        "--concurrency",
        "128",
        "--gpu-type",
        "h100",
    ],
    "nemotron-3-ultra-550b-a55b 32k x128 h200": [
        "nemotron-3-ultra-550b-a55b",
        "--ctx",
        "32k",
        "--concurrency",
        "128",
        "--gpu-type",
        "h200",
    ],
    "nemotron-h 8k x2000 l40s": ["nemotron-h", "--ctx", "8192", "--concurrency", "2000", "--gpu-type", "l40s"],
    "qwen3.5-27b 256K x32 rtx-4090": ["qwen3.5-27b", "--ctx", "256K", "--concurrency", "32", "--gpu-type", "rtx-4090"],
    "qwen3.8-2.4t-a95b 32k x64 h200": [
        "qwen3.8-2.4t-a95b",
        "--ctx",
        "32k",
        "--concurrency",
        "64",
        "--gpu-type",
        "h200",
    ],
    "unreachable: qwen3.5-27b 256K x100000 h100": [
        "qwen3.5-27b",
        "--ctx",
        "256K",
        "--concurrency",
        "100000",
        "--gpu-type",
        "h100",
    ],
}

#: run in the child: the plan command, with ``hybridplan.plan.plan`` timed (the CLI imports it at call time)
CHILD = """
import contextlib, io, json, sys, time
import hybridplan.plan as P
inner = P.plan
spent = {}
def timed(*a, **k):
    w, c = time.perf_counter(), time.process_time()
    try:
        return inner(*a, **k)
    finally:
        spent['wall'], spent['cpu'] = time.perf_counter() - w, time.process_time() - c
P.plan = timed
from hybridplan.cli import main
shown = io.StringIO()
with contextlib.redirect_stdout(shown):
    main(['plan', *sys.argv[2:], '--json'])
open(sys.argv[1], 'w').write(shown.getvalue())
sys.stderr.write('SEARCH ' + json.dumps(spent) + '\\n')
"""


def one(args: list[str], out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-c", CHILD, str(out), *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    line = next((x for x in p.stderr.splitlines() if x.startswith("SEARCH ")), None)
    if line is None:
        raise SystemExit(f"plan {' '.join(args)} failed:\n{p.stderr}")
    spent = json.loads(line[len("SEARCH ") :])
    d = json.loads(out.read_text())
    return {
        "search_s": spent["wall"],
        "search_cpu_s": spent["cpu"],
        "command_s": wall,
        "command_cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "layouts_tried": d["layouts_tried"],
        "fewest_gpus": min((x["gpus"] for x in d["plans"]), default=None),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", type=Path, help="write the results (JSON) here too")
    a = ap.parse_args()
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"plan_search_{os.getpid()}.json"
    results = {}
    for name, args in CASES.items():
        runs = [one(args, tmp) for _ in range(a.runs)]
        best = {k: min(r[k] for r in runs) for k in ("search_s", "search_cpu_s", "command_s", "command_cpu_s")}
        results[name] = {
            "args": args,
            **best,
            "layouts_tried": runs[0]["layouts_tried"],
            "fewest_gpus": runs[0]["fewest_gpus"],
            "runs": runs,
        }
        if not a.json:
            print(
                f"{name:45s} search {best['search_s']:5.2f} s (CPU {best['search_cpu_s']:5.2f} s)  command "
                f"{best['command_s']:5.2f} s  {runs[0]['layouts_tried']:5d} layouts  fewest "
                f"{runs[0]['fewest_gpus']}",
                flush=True,
            )
    tmp.unlink(missing_ok=True)
    doc = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{os.cpu_count()} cores, {platform.machine()}",
        "python": platform.python_version(),
        "load_average": os.getloadavg()[0],
        "max_gpus": 64,
        "runs": a.runs,
        "cases": results,
    }
    if a.json:
        print(json.dumps(doc, indent=2))
    if a.out is not None:
        a.out.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
