"""`--emit vllm-config` and `--emit sglang-config` read back by the engines' own parsers, from their wheels.

For each release and case, hybridplan writes the engine's --config file and prints the command that starts
the engine (`fit ... --json`'s ``commands``). A worker, with the unpacked wheel first on ``sys.path``, parses both
with the engine's own code:

- vLLM: the ``vllm serve`` parser as vLLM's CLI builds it (vllm/entrypoints/cli/serve.py
  ``ServeSubcommand.subparser_init`` on a ``FlexibleArgumentParser``), ``serve --config FILE`` against the
  printed ``serve MODEL --flag …``;
- SGLang: ``ServerArgs.add_cli_args`` on an ``argparse.ArgumentParser`` with its ``ConfigArgumentMerger``
  (python/sglang/srt/server_args_config_parser.py, 0.5.3 on), ``--config FILE`` against the printed flags.

The two namespaces must be equal, every field (the --config field itself aside): so the file starts the engine
exactly as the command does, and the command, pasted back into `fit`, gives the figures shown
(tests/test_cmdline.py holds that round trip). Nothing of hybridplan's is fed to the engine but the file and
the command it wrote.

    /tmp/hp-validation/bin/python validation/emit.py                          # the default releases
    /tmp/hp-validation/bin/python validation/emit.py --vllm 0.33.0 --sglang 0.5.23

The wheels come from ``pip download --no-deps`` into ``--cache-dir`` (validation/vllm.py's cache). Exit 1 on
any difference or failed release.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VLLM = ("0.10.0", "0.15.0", "0.20.0", "0.26.0", "0.33.0")
SGLANG = ("0.5.3", "0.5.9", "0.5.14", "0.5.23")
#: (name, fit arguments): the flags each case sets, so that every kind of key is written (numbers, switches,
#: a negated switch, a JSON config, a dtype, parallelism)
CASES = (
    ("nemotron-h", ["nemotron-h", "--ctx", "8192", "--kv-budget", "40GiB"]),
    ("qwen3-next-tp4-fp8", ["qwen3-next", "--tp", "4", "--ctx", "32768", "--kv-budget", "60GiB", "--kv-dtype", "fp8",
                            "--max-num-seqs", "64"]),
    ("qwen3.5-mtp-align", ["qwen3.5-4b", "--ctx", "16384", "--kv-budget", "30GiB", "--enforce-eager",
                           "--speculative-config", '{"method":"mtp","num_speculative_tokens":2}']),
)


def unpack(engine: str, version: str, cache: Path) -> Path:
    src = cache / f"{engine}-{version}"
    if (src / ".unpacked").exists():
        return src
    wheels = cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    found = sorted(wheels.glob(f"{engine}-{version}-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", f"{engine}=={version}",
                        "-d", str(wheels)], check=True)
        found = sorted(wheels.glob(f"{engine}-{version}-*.whl"))
    with zipfile.ZipFile(found[0]) as zf:
        zf.extractall(src, [n for n in zf.namelist() if n.startswith(f"{engine}/") and n.endswith(".py")])
    (src / ".unpacked").write_text(found[0].name)
    return src


def hybridplan_case(engine: str, version: str, args: list[str], out: Path) -> dict:
    """The file and the command hybridplan writes for one case."""
    flag = "--vllm-version" if engine == "vllm" else "--sglang-version"
    base = [sys.executable, "-m", "hybridplan", "fit", *args, "--engine", engine, flag, version]
    done = subprocess.run([*base, "--json"], capture_output=True, text=True, cwd=ROOT)
    if done.returncode not in (0, 1):
        raise RuntimeError(done.stderr.strip())
    command = json.loads(done.stdout)["commands"][engine]
    path = out / f"{engine}.yaml"
    emitted = subprocess.run([*base, "--emit", f"{engine}-config", "--out", str(out)], capture_output=True,
                             text=True, cwd=ROOT)
    if emitted.returncode not in (0, 1) or not path.exists():
        raise RuntimeError(emitted.stderr.strip())
    return {"argv": command["argv"], "file": str(path)}


# --- the workers: run with the engine's unpacked wheel first on sys.path -----------------------------------

def vllm_worker(cases: list[dict]) -> list[dict]:
    import vllm.platforms as platforms
    from vllm.platforms.interface import Platform, PlatformEnum

    class Cuda(Platform):
        """Stand-in: the parser asks which device it runs on (for a few defaults), not what it can do."""

        _enum = PlatformEnum.CUDA
        device_name = device_type = "cuda"
        dispatch_key = "CUDA"

    platforms.current_platform = Cuda()
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # before 0.15: in vllm/utils/__init__.py
        from vllm.utils import FlexibleArgumentParser
    from vllm.entrypoints.cli.serve import ServeSubcommand

    parser = FlexibleArgumentParser(prog="vllm")
    ServeSubcommand().subparser_init(parser.add_subparsers(dest="subparser"))
    out = []
    for c in cases:
        argv = c["argv"]  # vllm serve MODEL --flag ...
        from_file = _served(vars(parser.parse_args(["serve", "--config", c["file"]])))
        from_cli = _served(vars(parser.parse_args(["serve", *argv[2:]])))
        out.append(_diff(from_file, from_cli))
    return out


def _served(ns: dict) -> dict:
    """The arguments as ``vllm serve`` runs with them: its positional model, where given, is the model
    (vllm/entrypoints/cli/serve.py ``ServeSubcommand.cmd``)."""
    if ns.get("model_tag") is not None:
        ns["model"] = ns["model_tag"]
    ns.pop("model_tag", None)
    return ns


def sglang_worker(cases: list[dict]) -> list[dict]:
    from sglang.srt.server_args import ServerArgs

    try:
        from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger
    except ImportError:
        from sglang.srt.server_args_config_parser import ConfigArgumentMerger
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    out = []
    for c in cases:
        argv = c["argv"]  # python -m sglang.launch_server --flag ...
        merged = ConfigArgumentMerger(parser).merge_config_with_args(["--config", c["file"]])
        out.append(_diff(vars(parser.parse_args(merged)), vars(parser.parse_args(argv[3:]))))
    return out


def _diff(a: dict, b: dict) -> dict:
    skip = {"config", "dispatch_function"}
    keys = sorted((set(a) | set(b)) - skip)
    return {k: [repr(a.get(k)), repr(b.get(k))] for k in keys if a.get(k) != b.get(k)}


def worker(engine: str, cases_file: Path) -> int:
    # this folder holds vllm.py and sglang.py, which would stand in for the engines' packages
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    cases = json.loads(cases_file.read_text())
    diffs = vllm_worker(cases) if engine == "vllm" else sglang_worker(cases)
    print(json.dumps(diffs))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vllm", nargs="*", default=list(VLLM), metavar="X.Y.Z")
    ap.add_argument("--sglang", nargs="*", default=list(SGLANG), metavar="X.Y.Z")
    ap.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "hybridplan-validation")
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args.worker[0], Path(args.worker[1]))
    cache = args.cache_dir.expanduser().resolve()
    failed = compared = 0
    for engine, versions in (("vllm", args.vllm), ("sglang", args.sglang)):
        for version in versions:
            src = unpack(engine, version, cache)
            with tempfile.TemporaryDirectory() as tmp:
                cases = []
                for name, fit_args in CASES:
                    folder = Path(tmp) / name
                    folder.mkdir()
                    try:
                        cases.append({"name": name, **hybridplan_case(engine, version, fit_args, folder)})
                    except RuntimeError as exc:  # a model the release does not serve: nothing to write
                        print(f"{engine} {version} {name}: not written: {exc}")
                cases_file = Path(tmp) / "cases.json"
                cases_file.write_text(json.dumps(cases))
                env = {**os.environ, "PYTHONPATH": f"{src}:{ROOT}"}
                done = subprocess.run([sys.executable, __file__, "--worker", engine, str(cases_file)],
                                      capture_output=True, text=True, env=env)
            if done.returncode:
                failed += 1
                print(f"{engine} {version}: the worker failed: {done.stderr.strip().splitlines()[-1:]}")
                continue
            for case, diff in zip(cases, json.loads(done.stdout.splitlines()[-1])):
                compared += 1
                status = "equal" if not diff else f"DIFFERS: {diff}"
                failed += bool(diff)
                print(f"{engine} {version} {case['name']}: the file and the command parse {status}")
    print(f"{compared} files compared, {failed} failures")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
