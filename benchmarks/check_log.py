"""`hybridplan check-log` on a large log: a real start-up log among millions of unrelated DEBUG lines, as a
DEBUG-level log is. Reports the wall time and the peak memory of the command (goal: at most 3 s, and memory
that does not grow with the log).

    python benchmarks/check_log.py [--mb 168] [--json]

The log is written to a temporary folder and removed afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "data" / "vllm-0.23-nemotron-h.log"
WORDS = (
    "DEBUG scheduler step batch tokens waiting running swapped request finished metrics throughput prompt "
    "generation usage"
).split()


def write_log(path: Path, megabytes: int) -> int:
    """Unrelated lines up to ``megabytes``, with the real start-up log in the middle; returns the line count."""
    rng = random.Random(1)
    target, size, n = megabytes * 1_000_000, 0, 0
    real = REAL.read_text()
    with open(path, "w") as f:
        while size < target:
            line = (
                f"DEBUG 11-20 09:{n % 60:02d}:{n % 60:02d} [engine.py:{n % 900}] "
                + " ".join(rng.choice(WORDS) for _ in range(12))
                + f" id={n}\n"
            )
            f.write(line)
            size, n = size + len(line), n + 1
            if n == 600_000:
                f.write(real)
    return n


def planner_command() -> list[str]:
    exe = Path(sys.executable).parent / "hybridplan"
    return [str(exe)] if exe.is_file() and os.access(exe, os.X_OK) else [sys.executable, "-m", "hybridplan"]


def measure(megabytes: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "big.log"
        lines = write_log(log, megabytes)
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        t0 = time.perf_counter()
        proc = subprocess.run(planner_command() + ["check-log", str(log), "--json"], capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {
        "log_bytes": megabytes * 1_000_000,
        "log_lines": lines,
        "exit_code": proc.returncode,
        "ok": json.loads(proc.stdout)["ok"] if proc.returncode in (0, 1) else None,
        "seconds": seconds,
        "peak_rss_mib": max(peak_kib, before) / 1024,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=168)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    r = measure(args.mb)
    if args.json:
        print(json.dumps(r, indent=2))
    else:
        print(f"log                : {args.mb} MB, {r['log_lines']:,} lines")
        print(f"check-log          : exit {r['exit_code']}, figures match: {r['ok']}")
        print(f"wall time          : {r['seconds']:.2f} s (goal ≤ 3 s)")
        print(f"peak memory (RSS)  : {r['peak_rss_mib']:.0f} MiB")
    return 0 if r["exit_code"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
