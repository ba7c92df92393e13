"""A Mooncake trace through hybridplan's replay and through vLLM's own Scheduler and KVCacheManager, side by
side: requests per second, peak memory, and a million requests end to end.

    /tmp/hp-validation/bin/python benchmarks/replay.py [--requests 20000] [--every-requests 2000]
                                                       [--vllm-requests 300] [--long 1000000]
                                                       [--release 0.29.0] [--model qwen3.5-4b] [--repeats 5]

The trace: the 300-line excerpt of the Mooncake conversation trace (tests/data/traces/) cycled, each cycle
with hash ids of its own (ids + cycle × (1 + the largest id)), written to a JSONL file and read back one line
at a time as `replay` reads a trace. On it:

- hybridplan, the vLLM 0.29 align policy alone (one row), ``--requests`` requests: the seconds, then the
  peak of Python's traced memory in a second run (tracing slows Python down many times over, so it is kept
  out of the timing; it sees Python's objects only, not what the native code of the pool and the ideal cache
  holds: the long run's resident size counts everything);
- hybridplan, every row `replay` shows (both vLLM modes, SGLang, both baselines), ``--every-requests``;
- vLLM's own Scheduler and KVCacheManager from the unpacked wheel (validation/replay.py's worker, in a
  subprocess, so it needs the validation environment) over the first ``--vllm-requests`` of the same
  requests (the whole excerpt by default), outputs capped at 8 tokens as validation/replay.py caps them,
  which makes vLLM's side faster, not slower; and hybridplan over the ``--requests`` with outputs capped
  alike, for the ratio at the same work;
- ``--long`` requests (a million by default; 0 skips it) through the one policy in a subprocess of its own,
  ``--long-runs`` times (three by default: a shared machine's speed moves from run to run), progress on
  stderr: the wall and CPU seconds and the process's peak resident memory of each run.

A run of a second or two moves by a third from one run to the next on a shared machine (the allocator's and the
CPU's caches warming, the neighbours), so each short measurement is made ``--repeats`` times over fresh caches
and the fastest reported, every run's seconds beside it (vLLM's worker at most three times).

The report says which build ran: the native code or its Python twins.

The figures go to stdout and to benchmarks/results/replay.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
EXCERPT = ROOT / "tests/data/traces/mooncake-conversation-300.jsonl"
RESULTS = ROOT / "benchmarks" / "results" / "replay.json"
GiB = 1 << 30
MiB = 1 << 20


def write_trace(path: Path, n: int, max_output: int | None = None) -> None:
    """The excerpt cycled to ``n`` lines, each cycle's hash ids its own; outputs capped at ``max_output``."""
    lines = [json.loads(x) for x in EXCERPT.read_text().splitlines() if x.strip()]
    span = 1 + max(h for x in lines for h in x["hash_ids"])
    with path.open("w") as fh:
        for i in range(n):
            rec = dict(lines[i % len(lines)])
            cycle = i // len(lines)
            rec["hash_ids"] = [h + cycle * span for h in rec["hash_ids"]]
            if max_output is not None:
                rec["output_length"] = min(rec["output_length"], max_output)
            fh.write(json.dumps(rec) + "\n")


def build() -> dict:
    """Which build of the replay runs: the native code, or its Python twins."""
    from hybridplan.engines.vllm import block_pool
    from hybridplan.replay import loop, trace

    return {
        "native": {
            "block pool": block_pool.BlockPool is not block_pool.PyPool,
            "hashes": trace._native is not None,
            "ideal cache": loop.Ideal is loop.NativeIdeal,
        }
    }


def _policies(release: str, model: str, every_row: bool):
    from hybridplan.engines.vllm import prefix_cache as vpc
    from hybridplan.engines.vllm.releases import release as vrel
    from hybridplan.engines.vllm.settings import VllmSettings
    from hybridplan.loader import load_model
    from hybridplan.replay.loop import Policy
    from hybridplan.replay.settings import ReplaySettings
    from hybridplan.reports.replay import policies
    from hybridplan.scenario import Budget, Scenario

    sc = Scenario(
        load_model(model), ctx=131072, vllm=VllmSettings(release=vrel(release)), budget=Budget(kv_budget=40 * GiB)
    )
    rs = ReplaySettings(per_request=False)
    if every_row:
        return [p for _, p, _ in policies(sc, rs)[0]]
    r = vpc.rules(sc, rs, "align", 40 * GiB)
    return [Policy(r.label, vpc.Cache(r), r.block, r.max_model_len)]


def hybridplan_rate(path: Path, release: str, model: str, every_row: bool, traced: bool, repeats: int = 1) -> dict:
    """Seconds (the fastest of ``repeats`` runs, each over fresh caches; every run's in ``runs_seconds``),
    requests, the rows' token hit rates, and (``traced``) the peak traced bytes of one more run."""
    from hybridplan.replay.loop import replay
    from hybridplan.replay.trace import mooncake

    times = []
    for _ in range(max(repeats, 1)):
        pols = _policies(release, model, every_row)
        t = time.perf_counter()
        runs, ideal = replay(pols, mooncake(path), keep_outcomes=False)
        times.append(time.perf_counter() - t)
    out = {
        "seconds": min(times),
        "runs_seconds": [round(x, 4) for x in times],
        "requests": ideal.requests,
        "hit_rates": {k: round(v.hit_rate, 6) for k, v in runs.items()},
    }
    if traced:
        fresh = _policies(release, model, every_row)
        tracemalloc.start()
        replay(fresh, mooncake(path), keep_outcomes=False)
        out["peak_traced_bytes"] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return out


def long_worker(path: Path, release: str, model: str) -> int:
    """One policy over a long trace, progress on stderr; JSON on stdout."""
    from hybridplan.replay.loop import replay
    from hybridplan.replay.trace import mooncake

    pols = _policies(release, model, every_row=False)
    t0, c0 = time.perf_counter(), time.process_time()

    def progress(n: int) -> None:
        if n % 100_000 == 0:
            print(f"  {n:,} requests, {time.perf_counter() - t0:,.0f} s", file=sys.stderr, flush=True)

    runs, ideal = replay(pols, mooncake(path), keep_outcomes=False, progress=progress)
    print(
        json.dumps(
            {
                "seconds": time.perf_counter() - t0,
                "cpu_seconds": time.process_time() - c0,
                "requests": ideal.requests,
                "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                "hit_rates": {k: round(v.hit_rate, 6) for k, v in runs.items()},
                "ideal_hit_rate": round(ideal.hit_rate, 6),
            }
        )
    )
    return 0


def validation_replay():
    """validation/replay.py as a module (its traces, its cap on outputs, its vLLM worker)."""
    spec = importlib.util.spec_from_file_location("hp_validation_replay", ROOT / "validation" / "replay.py")
    vr = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vr)
    return vr


def vllm_rate(release: str, model: str, n: int, cache: Path, repeats: int = 1) -> dict:
    """Seconds (the fastest of ``repeats`` workers; every one's in ``runs_seconds``), requests and max RSS of vLLM's
    scheduler over the first ``n`` requests."""
    vr = validation_replay()
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
        results = []
        for _ in range(max(repeats, 1)):
            subprocess.run(
                [
                    sys.executable,
                    str(ROOT / "validation" / "replay.py"),
                    "--worker",
                    release,
                    str(src),
                    str(cases),
                    str(out),
                ],
                check=True,
                env=env,
                cwd=tmp,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            results.append(json.loads(out.read_text())["results"][0])
    res = min(results, key=lambda x: x["seconds"])
    return {
        "seconds": res["seconds"],
        "runs_seconds": [round(x["seconds"], 4) for x in results],
        "requests": len(res["reused"]),
        "max_rss_bytes": max(x["max_rss_kib"] for x in results) * 1024,
        "equal_to_hybridplan": all(x["reused"] == side["reused"] for x in results),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--every-requests", type=int, default=2_000)
    ap.add_argument("--vllm-requests", type=int, default=300)
    ap.add_argument("--long", type=int, default=1_000_000, help="requests of the end-to-end run (0: none)")
    ap.add_argument("--long-runs", type=int, default=3, help="times the end-to-end run is made")
    ap.add_argument(
        "--repeats",
        type=int,
        default=5,
        help="runs of each short measurement, the fastest reported (a second's run moves by a third)",
    )
    ap.add_argument("--release", default="0.29.0")
    ap.add_argument("--model", default="qwen3.5-4b")
    ap.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "hybridplan-validation")
    ap.add_argument("--no-write", action="store_true", help=f"do not write {RESULTS.relative_to(ROOT)}")
    ap.add_argument("--long-worker", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.long_worker:
        return long_worker(args.long_worker, args.release, args.model)
    rate = lambda x: x["requests"] / x["seconds"]  # noqa: E731
    report: dict = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{os.cpu_count()} cores, {platform.machine()}",
        "python": platform.python_version(),
        "release": args.release,
        "model": args.model,
        "trace": "tests/data/traces/mooncake-conversation-300.jsonl cycled, hash ids renamed per cycle",
        "build": build(),
    }
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.jsonl"
        write_trace(trace, max(args.requests, args.every_requests))
        small = Path(tmp) / "every.jsonl"
        write_trace(small, args.every_requests)
        one = hybridplan_rate(trace, args.release, args.model, every_row=False, traced=True, repeats=args.repeats)
        capped_trace = Path(tmp) / "capped.jsonl"
        cap = validation_replay().MAX_OUTPUT
        write_trace(capped_trace, args.requests, max_output=cap)
        capped = hybridplan_rate(
            capped_trace, args.release, args.model, every_row=False, traced=False, repeats=args.repeats
        )
        every = hybridplan_rate(small, args.release, args.model, every_row=True, traced=False, repeats=args.repeats)
        print(
            f"hybridplan, vLLM {args.release} align alone: {one['requests']:,} requests in {one['seconds']:.2f} s "
            f"({rate(one):,.0f}/s), peak {one['peak_traced_bytes'] / MiB:.1f} MiB of Python objects traced",
            flush=True,
        )
        print(
            f"hybridplan, every row (vLLM modes, SGLang, baselines): {every['requests']:,} requests in "
            f"{every['seconds']:.2f} s ({rate(every):,.0f}/s)",
            flush=True,
        )
        print(
            f"hybridplan, the same with outputs capped at {cap} tokens as on vLLM's side: "
            f"{capped['requests']:,} requests in {capped['seconds']:.2f} s ({rate(capped):,.0f}/s)",
            flush=True,
        )
        report.update(one_policy=one, one_policy_outputs_capped=capped, every_row=every)
        theirs = vllm_rate(
            args.release, args.model, args.vllm_requests, args.cache_dir.expanduser(), repeats=min(args.repeats, 3)
        )
        report["vllm"] = theirs
        report["speed_ratio_one_policy"] = round(rate(one) / rate(theirs), 2)
        report["speed_ratio_one_policy_outputs_capped"] = round(rate(capped) / rate(theirs), 2)
        print(
            f"vLLM {args.release} Scheduler + KVCacheManager: {theirs['requests']:,} requests in "
            f"{theirs['seconds']:.2f} s ({rate(theirs):,.1f}/s), max RSS {theirs['max_rss_bytes'] / MiB:.0f} MiB "
            f"(the whole worker process); reuse equal to hybridplan's: {theirs['equal_to_hybridplan']}"
        )
        print(
            f"speed ratio, one policy: {report['speed_ratio_one_policy']:,.1f}x with hybridplan's outputs whole, "
            f"{report['speed_ratio_one_policy_outputs_capped']:,.1f}x capped alike",
            flush=True,
        )
        if args.long:
            big = Path(tmp) / "long.jsonl"
            t = time.perf_counter()
            write_trace(big, args.long)
            print(
                f"{args.long:,}-request trace written in {time.perf_counter() - t:.0f} s "
                f"({big.stat().st_size / MiB:,.0f} MiB); replaying it:",
                file=sys.stderr,
                flush=True,
            )
            report["long"] = []
            for _ in range(args.long_runs):
                done = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--long-worker",
                        str(big),
                        "--release",
                        args.release,
                        "--model",
                        args.model,
                    ],
                    check=True,
                    stdout=subprocess.PIPE,
                    text=True,
                )
                long = json.loads(done.stdout)
                report["long"].append(long)
                print(
                    f"hybridplan, vLLM {args.release} align alone, {long['requests']:,} requests read from the "
                    f"file: {long['seconds']:,.0f} s ({long['requests'] / long['seconds']:,.0f}/s; "
                    f"{long['cpu_seconds']:,.0f} CPU s), max RSS {long['max_rss_bytes'] / MiB:,.0f} MiB",
                    flush=True,
                )
    if not args.no_write:
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
