"""A Mooncake trace through hybridplan's replay and through vLLM's own Scheduler and KVCacheManager, side by
side: requests per second and peak memory.

    /tmp/hp-validation/bin/python benchmarks/replay.py [--requests 20000] [--vllm-requests 100]
                                                       [--release 0.29.0] [--model qwen3.5-4b]

hybridplan replays ``--requests`` requests: the 300-line excerpt of the Mooncake conversation trace
(tests/data/traces/) cycled, each cycle with hash ids of its own, read from a JSONL file one line at a time;
the vLLM 0.29 align policy alone (one row) and then every row `replay` shows. vLLM replays the first
``--vllm-requests`` of the same requests, one after another, with outputs capped as validation/replay.py caps
them (which makes vLLM's side faster, not slower). The vLLM side runs validation/replay.py's worker in a
subprocess (the wheel unpacked into the cache folder), so it needs the validation environment.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
EXCERPT = ROOT / "tests/data/traces/mooncake-conversation-300.jsonl"
GiB = 1 << 30


def write_trace(path: Path, n: int) -> None:
    lines = [json.loads(x) for x in EXCERPT.read_text().splitlines() if x.strip()]
    span = 1 + max(h for x in lines for h in x["hash_ids"])
    with path.open("w") as fh:
        for i in range(n):
            rec = dict(lines[i % len(lines)])
            cycle = i // len(lines)
            rec["hash_ids"] = [h + cycle * span for h in rec["hash_ids"]]
            fh.write(json.dumps(rec) + "\n")


def hybridplan_rate(path: Path, release: str, model: str, every_row: bool) -> tuple[float, int, int]:
    """(seconds, requests, peak traced bytes)."""
    from hybridplan.engines.vllm import prefix_cache as vpc
    from hybridplan.engines.vllm.releases import release as vrel
    from hybridplan.engines.vllm.settings import VllmSettings
    from hybridplan.loader import load_model
    from hybridplan.replay.loop import Policy, replay
    from hybridplan.replay.settings import ReplaySettings
    from hybridplan.replay.trace import mooncake
    from hybridplan.reports.replay import policies
    from hybridplan.scenario import Budget, Scenario

    sc = Scenario(load_model(model), ctx=131072, vllm=VllmSettings(release=vrel(release)),
                  budget=Budget(kv_budget=40 * GiB))
    rs = ReplaySettings(per_request=False)
    if every_row:
        pols = [p for _, p, _ in policies(sc, rs)[0]]
    else:
        r = vpc.rules(sc, rs, "align", 40 * GiB)
        pols = [Policy(r.label, vpc.Cache(r), r.block, r.max_model_len)]
    t = time.perf_counter()
    runs, ideal = replay(pols, mooncake(path), keep_outcomes=False)
    seconds = time.perf_counter() - t
    # the memory in a second run: tracing slows Python down many times over, so it is kept out of the timing
    if every_row:  # traced once, for one policy: a traced run of every row takes minutes
        return seconds, ideal.requests, 0
    fresh = [type(p)(p.label, type(p.cache)(p.cache.r), p.block, p.max_len) for p in pols]
    tracemalloc.start()
    replay(fresh, mooncake(path), keep_outcomes=False)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return seconds, ideal.requests, peak


def vllm_rate(release: str, model: str, n: int, cache: Path) -> tuple[float, int, int]:
    """(seconds, requests, max RSS in bytes) of vLLM's scheduler over the first ``n`` requests."""
    spec = importlib.util.spec_from_file_location("hp_validation_replay", ROOT / "validation" / "replay.py")
    vr = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vr)
    vr.MOONCAKE_REQUESTS = n
    side = vr.hybridplan_side(release, model, "align", "mooncake-conversation", "roomy")
    vv = vr._vllm_script()
    src = vv.unpack_release(release, cache)
    with tempfile.TemporaryDirectory() as tmp:
        cases, out = Path(tmp) / "cases.json", Path(tmp) / "out.json"
        cases.write_text(json.dumps([{"name": "bench", "rules": side["rules"], "requests": side["requests"]}]))
        env = dict(os.environ)
        overlay = vv.transformers_overlay(release, cache)
        if overlay is not None:
            env["PYTHONPATH"] = os.pathsep.join([str(overlay), env.get("PYTHONPATH", "")])
        subprocess.run([sys.executable, str(ROOT / "validation" / "replay.py"), "--worker", release, str(src),
                        str(cases), str(out)], check=True, env=env, cwd=tmp, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        res = json.loads(out.read_text())["results"][0]
    return res["seconds"], len(res["reused"]), res["max_rss_kib"] * 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--vllm-requests", type=int, default=100)
    ap.add_argument("--release", default="0.29.0")
    ap.add_argument("--model", default="qwen3.5-4b")
    ap.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "hybridplan-validation")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.jsonl"
        write_trace(trace, args.requests)
        one = hybridplan_rate(trace, args.release, args.model, every_row=False)
        every = hybridplan_rate(trace, args.release, args.model, every_row=True)
    theirs = vllm_rate(args.release, args.model, args.vllm_requests, args.cache_dir.expanduser())
    rate = lambda x: x[1] / x[0]  # noqa: E731
    print(f"hybridplan, vLLM {args.release} align alone: {one[1]:,} requests in {one[0]:.2f} s "
          f"({rate(one):,.0f}/s), peak {one[2] / 2**20:.1f} MiB traced")
    print(f"hybridplan, every row (vLLM modes, SGLang, baselines): {every[1]:,} requests in {every[0]:.2f} s "
          f"({rate(every):,.0f}/s)")
    print(f"vLLM {args.release} Scheduler + KVCacheManager: {theirs[1]:,} requests in {theirs[0]:.2f} s "
          f"({rate(theirs):,.1f}/s), max RSS {theirs[2] / 2**20:.0f} MiB (the whole worker process)")
    print(f"speed ratio, one policy: {rate(one) / rate(theirs):,.1f}x; a million requests would take "
          f"{1e6 / rate(one):,.0f} s (one policy), {1e6 / rate(every):,.0f} s (every row)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
