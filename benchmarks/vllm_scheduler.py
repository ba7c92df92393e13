"""What vLLM's scheduler loop (hybridplan/engines/vllm/scheduler.py) costs `replay`: one vLLM align row over the
Mooncake conversation excerpt cycled, with the prefix cache alone (prefix_cache.py ``Cache``: a request's whole
plan at admission, the loop before the scheduler model) and behind the scheduler (``Scheduled``, what `replay`
runs), at each concurrency.

    python benchmarks/vllm_scheduler.py [--requests 3000] [--concurrency 1 8 64] [--release 0.28.0]
                                        [--model qwen3-next-80b-a3b] [--tp 4] [--repeats 3]

The trace is benchmarks/replay.py's (the 300-line excerpt cycled, each cycle with hash ids of its own). Each
measurement is the fastest of ``--repeats`` runs over fresh caches, every run's seconds beside it. The report
says which build of the block pool ran (the native code or its Python twin). Figures on stdout, as JSON.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
GiB = 1 << 30


def _replay_module():
    spec = importlib.util.spec_from_file_location("bench_replay", ROOT / "benchmarks" / "replay.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def measure(path: Path, release: str, model: str, tp: int, concurrency: int, scheduled: bool, repeats: int) -> dict:
    from hybridplan.engines.vllm import prefix_cache as vpc
    from hybridplan.engines.vllm.releases import release as vrel
    from hybridplan.engines.vllm.scheduler import Scheduled
    from hybridplan.engines.vllm.settings import VllmSettings
    from hybridplan.loader import load_model
    from hybridplan.replay.loop import Policy, replay
    from hybridplan.replay.settings import ReplaySettings
    from hybridplan.replay.trace import mooncake
    from hybridplan.scenario import Budget, Scenario

    sc = Scenario(
        load_model(model),
        ctx=131072,
        tp=tp,
        chunk=8192,
        vllm=VllmSettings(release=vrel(release)),
        budget=Budget(kv_budget=40 * GiB),
    )
    r = vpc.rules(sc, ReplaySettings(per_request=False), "align", 40 * GiB)
    times, run = [], None
    for _ in range(max(repeats, 1)):
        cache = Scheduled(r) if scheduled else vpc.Cache(r)
        t = time.perf_counter()
        runs, _ = replay([Policy(r.label, cache, r.block, r.max_model_len)], mooncake(path), concurrency, False)
        times.append(time.perf_counter() - t)
        run = runs[r.label]
    assert run is not None
    return {
        "seconds": round(min(times), 4),
        "runs_seconds": [round(x, 4) for x in times],
        "requests_per_second": round(run.requests / min(times), 1),
        "hit_rate": round(run.hit_rate, 6),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64])
    ap.add_argument("--release", default="0.28.0")
    ap.add_argument("--model", default="qwen3-next-80b-a3b")
    ap.add_argument("--tp", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    bench = _replay_module()
    out: dict = {"release": a.release, "model": a.model, "tp": a.tp, "requests": a.requests, **bench.build()}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.jsonl"
        bench.write_trace(path, a.requests)
        for c in a.concurrency:
            out[f"concurrency {c}"] = {
                "cache alone": measure(path, a.release, a.model, a.tp, c, False, a.repeats),
                "scheduler": measure(path, a.release, a.model, a.tp, c, True, a.repeats),
            }
            print(json.dumps({f"concurrency {c}": out[f"concurrency {c}"]}), file=sys.stderr)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
