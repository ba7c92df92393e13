"""Start-up speed of the planner: `hybridplan size nemotron-h --ctx 131072 --json` against a bare
`python -c "import typer, rich, yaml"` on the same machine (target: 1.2× that baseline).

    python benchmarks/startup.py [--runs 21] [--limit 1.2] [--json] [--instructions]

What it costs beyond the baseline is mostly loading the modules the command uses, typer turning the invoked
command's options into click parameters (only that one is built: hybridplan/cli.py), two YAML specs, the
figures and the JSON. The command's classes are msgspec Structs, whose methods are built in C (no generated
source to compile), and the shipped specs' names come from model_specs/index.json. Measured runs, step by
step, are in docs/startup.md.

The package's bytecode is compiled first, as a wheel install does, so that both sides start from .pyc files.
Runs both commands alternately (so drifts in machine load hit both alike), takes the median wall time of
each, prints the ratio, and exits 1 when it is above the limit. With --instructions it also runs each once
under valgrind's callgrind and prints the instructions each executes: a count no other work on the machine
moves, for telling whether a change helped on a busy machine (the limit is on the wall ratio alone).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
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


def size_command() -> list[str]:
    return planner_command() + ["size", "nemotron-h", "--ctx", "131072", "--json"]


def wall(cmd: list[str]) -> float:
    return timed(cmd)[0]


def timed(cmd: list[str]) -> tuple[float, float]:
    """Wall time and CPU time (user + system) of one run. On a machine shared with other work the CPU time
    moves less with the load than the wall time does."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=ENV)
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def instructions(cmd: list[str]) -> int:
    """Instructions one run executes, counted by valgrind's callgrind (user space, the whole process)."""
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *cmd],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    ).stderr
    m = re.search(r"Collected : (\d+)", out)
    if m is None:
        raise SystemExit(f"no instruction count in valgrind's output:\n{out}")
    return int(m.group(1))


def measure(runs: int) -> dict:
    import compileall

    import hybridplan

    compileall.compile_dir(hybridplan.__path__[0], quiet=1, force=False)
    size = size_command()
    for cmd in (BASELINE, size):  # warm the file cache and the bytecode caches
        wall(cmd)
    base, plan = [], []
    for _ in range(runs):
        base.append(timed(BASELINE))
        plan.append(timed(size))
    b, p = statistics.median(t[0] for t in base), statistics.median(t[0] for t in plan)
    bc, pc = statistics.median(t[1] for t in base), statistics.median(t[1] for t in plan)
    return {
        "runs": runs,
        "baseline_s": b,
        "size_s": p,
        "ratio": p / b,
        "baseline_cpu_s": bc,
        "size_cpu_s": pc,
        "cpu_ratio": pc / bc,
        "load_average": os.getloadavg()[0],
        "baseline_cmd": " ".join(BASELINE),
        "size_cmd": " ".join(size),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--limit", type=float, default=1.2)
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--instructions",
        action="store_true",
        help="also count each command's instructions (valgrind's callgrind; slow)",
    )
    args = ap.parse_args()
    r = measure(args.runs)
    if args.instructions:
        r["baseline_instructions"] = instructions(BASELINE)
        r["size_instructions"] = instructions(size_command())
        r["instruction_ratio"] = r["size_instructions"] / r["baseline_instructions"]
    if args.json:
        print(json.dumps(r, indent=2))
    else:
        print(f"import typer, rich, yaml : {r['baseline_s'] * 1e3:7.1f} ms (median of {r['runs']})")
        print(f"size nemotron-h --json   : {r['size_s'] * 1e3:7.1f} ms")
        print(f"ratio                    : {r['ratio']:.2f}× (limit {args.limit}×)")
        print(
            f"CPU time                 : {r['baseline_cpu_s'] * 1e3:7.1f} ms and {r['size_cpu_s'] * 1e3:.1f} ms: "
            f"{r['cpu_ratio']:.2f}× (load average {r['load_average']:.1f})"
        )
        if args.instructions:
            print(
                f"instructions             : {r['baseline_instructions'] / 1e6:7.1f} M and "
                f"{r['size_instructions'] / 1e6:.1f} M: {r['instruction_ratio']:.2f}×"
            )
    return 0 if r["ratio"] <= args.limit else 1


if __name__ == "__main__":
    sys.exit(main())
