"""Compare hybridplan's pipeline-parallel layer splits with the engines' own ``get_pp_indices``, run from the
wheels' sources on a CPU.

    python validation/parallel.py [--cache-dir ~/.cache/hybridplan-validation] [--json]

For every vLLM release unpacked in the cache folder (``vllm-X.Y.Z/vllm/distributed/utils.py``, as
validation/vllm.py leaves them) and every SGLang release (``sglang-X.Y.Z/sglang/srt/distributed/utils.py``,
or read from ``wheels/sglang-X.Y.Z-*.whl``), the function's source is taken from the file as the release ships
it and run with the engine's environment variable unset and then set, for 1-130 layers over 1-16 stages, and
each stage's ``(start, end)`` is compared with hybridplan/engines/*/parallel.py ``split``. Only the function
runs: its module imports torch and the engine's own packages, which are stood in for by what the function
reads (``envs.VLLM_PP_LAYER_PARTITION`` / ``os.getenv``, and a logger).

Exit status 0 when every split matches, 1 otherwise (or when no release was found).
"""

from __future__ import annotations

import argparse
import ast
import json
import logging
import os
import re
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hybridplan.engines.sglang import parallel as sglang_pp  # noqa: E402
from hybridplan.engines.vllm import parallel as vllm_pp  # noqa: E402
from hybridplan.errors import PlanError  # noqa: E402

#: a partition tried with the environment variable set, per (layers, stages): the engine's own split reversed
PARTITION_CASES = ((60, 4), (61, 3), (48, 2), (92, 8))


def _function(source: str, name: str) -> str:
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return ast.get_source_segment(source, node) or ""
    raise LookupError(name)


def _engine_split(source: str, engine: str, partition: str | None):
    env = SimpleNamespace(VLLM_PP_LAYER_PARTITION=partition)
    fake_os = SimpleNamespace(
        getenv=lambda key, default=None: partition if key.endswith("PP_LAYER_PARTITION") else default
    )
    scope = {"envs": env, "os": fake_os, "logger": logging.getLogger("validation"), "Tuple": tuple}
    exec(compile(_function(source, "get_pp_indices"), engine, "exec"), scope)  # noqa: S102 - the engine's code
    return scope["get_pp_indices"]


def _sources(cache: Path) -> list[tuple[str, str, str]]:
    """(engine, version, utils.py source) for every release found."""
    out = []
    for d in sorted(cache.glob("vllm-*")):
        f = d / "vllm" / "distributed" / "utils.py"
        if d.is_dir() and f.exists():
            out.append(("vllm", d.name[5:], f.read_text()))
    seen = set()
    for d in sorted(cache.glob("sglang-*")):
        f = d / "sglang" / "srt" / "distributed" / "utils.py"
        if d.is_dir() and f.exists():
            out.append(("sglang", d.name[7:], f.read_text()))
            seen.add(d.name[7:])
    for w in sorted((cache / "wheels").glob("sglang-*.whl")):
        version = w.name.split("-")[1]
        if version in seen:
            continue
        with zipfile.ZipFile(w) as z:
            try:
                out.append(("sglang", version, z.read("sglang/srt/distributed/utils.py").decode()))
            except KeyError:
                continue
    return out


def _ours(engine: str, n: int, pp: int, partition: tuple[int, ...] | None, version: str):
    if engine == "vllm":
        return vllm_pp.split(n, pp, partition)
    from hybridplan.engines.sglang.releases import release

    return sglang_pp.split(n, pp, partition, release(version))


def check(engine: str, version: str, source: str) -> list[str]:
    bad: list[str] = []
    try:
        theirs = _engine_split(source, engine, None)
    except LookupError:
        return [f"{engine} {version}: no get_pp_indices"]
    for n in range(1, 131):
        for pp in range(1, 17):
            mine = None
            try:
                mine = _ours(engine, n, pp, None, version)
            except PlanError:
                pass  # a stage without layers: hybridplan refuses it
            engine_bounds = tuple(theirs(n, r, pp) for r in range(pp))
            if mine is None:
                if all(e > s for s, e in engine_bounds):
                    bad.append(f"{engine} {version}: {n} layers / {pp}: refused, the engine gives {engine_bounds}")
                continue
            if mine != engine_bounds:
                bad.append(f"{engine} {version}: {n} layers / {pp}: {mine} against {engine_bounds}")
    for n, pp in PARTITION_CASES:
        default = [e - s for s, e in _ours(engine, n, pp, None, version)]
        given = tuple(reversed(default))
        env = _engine_split(source, engine, ",".join(map(str, given)))
        engine_bounds = tuple(env(n, r, pp) for r in range(pp))
        if _ours(engine, n, pp, given, version) != engine_bounds:
            bad.append(
                f"{engine} {version}: partition {given}: {_ours(engine, n, pp, given, version)} against {engine_bounds}"
            )
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "hybridplan-validation")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    found = _sources(args.cache_dir)
    if not found:
        print(f"no vLLM or SGLang release under {args.cache_dir}", file=sys.stderr)
        return 1
    report = {}
    for engine, version, source in sorted(found, key=lambda t: (t[0], [int(x) for x in re.findall(r"\d+", t[1])])):
        report[f"{engine} {version}"] = check(engine, version, source)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for name, bad in report.items():
            print(f"{name}: {'ok' if not bad else f'{len(bad)} differ'}")
            for line in bad[:5]:
                print(f"  {line}")
    return 1 if any(report.values()) else 0


if __name__ == "__main__":
    os.environ.pop("VLLM_PP_LAYER_PARTITION", None)
    sys.exit(main())
