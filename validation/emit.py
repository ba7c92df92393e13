"""`--emit vllm-config` and `--emit sglang-config` read back by the engines' own parsers, from their wheels.

For each release and case, hybridplan (in this process) writes the engine's --config file and prints the
command that starts the engine (`fit ... --json`'s ``commands``). A worker, with the unpacked wheel first on
``sys.path``, parses both with the engine's own code:

- vLLM: the ``vllm serve`` parser as vLLM's CLI builds it (vllm/entrypoints/cli/serve.py
  ``ServeSubcommand.subparser_init`` on a ``FlexibleArgumentParser``), ``serve --config FILE`` against the
  printed ``serve MODEL --flag …``;
- SGLang: ``ServerArgs.add_cli_args`` on an ``argparse.ArgumentParser`` with its ``ConfigArgumentMerger``
  (python/sglang/srt/server_args_config_parser.py, 0.5.3rc2 on), built as the release's ``prepare_server_args``
  builds it, ``--config FILE`` against the printed flags.

The two namespaces must be equal, every field (the --config field itself aside). Then the arguments the file
stands for, as the engine's parser expands them (vLLM ``FlexibleArgumentParser._pull_args_from_config``,
SGLang ``merge_config_with_args``), are fed back to `fit` as the engine's command line: its figures and its
printed command must be the case's. A release hybridplan writes no file for must be one whose wheel has no
--config reader. Nothing of hybridplan's is fed to the engine but the file and the command it wrote.

The workers' stand-ins, each the least that lets the parser's modules import on a CPU in the validation
environment, are listed in ``STAND_INS``; none changes a flag, a default or the parsing.

    /tmp/hp-validation/bin/python validation/emit.py                          # every release of both engines
    /tmp/hp-validation/bin/python validation/emit.py --vllm 0.33.0 --sglang 0.5.23

The wheels come from /tmp/wheels/<engine>-<version>/, else ``--cache-dir``'s wheels/ (validation/vllm.py's
cache), else ``pip download --no-deps``. Exit 1 on any difference or failed release.
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
sys.path.insert(0, str(ROOT))
from hybridplan.engines.sglang.releases import VERSIONS as SGLANG  # noqa: E402 - every release hybridplan sizes
from hybridplan.engines.vllm.releases import VERSIONS as VLLM  # noqa: E402

sys.path.pop(0)
#: (name, fit arguments): the flags each case sets, so that every kind of key is written (numbers, switches,
#: a negated switch, a JSON config, a dtype, parallelism)
CASES = (
    ("nemotron-h", ["nemotron-h", "--ctx", "8192", "--kv-budget", "40GiB"]),
    (
        "qwen3-next-tp4-fp8",
        [
            "qwen3-next",
            "--tp",
            "4",
            "--ctx",
            "32768",
            "--kv-budget",
            "60GiB",
            "--kv-dtype",
            "fp8",
            "--max-num-seqs",
            "64",
        ],
    ),
    (
        "qwen3.5-mtp-align",
        [
            "qwen3.5-4b",
            "--ctx",
            "16384",
            "--kv-budget",
            "30GiB",
            "--enforce-eager",
            "--speculative-config",
            '{"method":"mtp","num_speculative_tokens":2}',
        ],
    ),
    # a switch in each engine's own spelling, from the engine's command line (SGLang's store_true flags are
    # the ones its 0.5.3rc2-0.5.6 merger lists, or fails to)
    (
        "sglang-switch",
        [
            "--gpu-type",
            "h100",
            "--",
            "python",
            "-m",
            "sglang.launch_server",
            "--model-path",
            "Qwen/Qwen3-Next-80B-A3B-Instruct",
            "--tp-size",
            "4",
            "--context-length",
            "32768",
            "--disable-radix-cache",
        ],
    ),
    (
        "vllm-switch",
        [
            "--gpu-type",
            "h100",
            "--",
            "vllm",
            "serve",
            "Qwen/Qwen3-Next-80B-A3B-Instruct",
            "--tensor-parallel-size",
            "4",
            "--max-model-len",
            "32768",
            "--no-enable-prefix-caching",
            "--enforce-eager",
        ],
    ),
)


def unpack(engine: str, version: str, cache: Path) -> Path:
    src = cache / f"{engine}-{version}"
    if (src / ".unpacked").exists():
        return src
    wheels = cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    # the shared wheel folder first (validation/engine_flags.py's /tmp/wheels/<engine>-<version>/)
    found = sorted(Path(f"/tmp/wheels/{engine}-{version}").glob("*.whl")) or sorted(
        wheels.glob(f"{engine}-{version}-*.whl")
    )
    if not found:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--quiet",
                f"{engine}=={version}",
                "-d",
                str(wheels),
            ],
            check=True,
        )
        found = sorted(wheels.glob(f"{engine}-{version}-*.whl"))
    with zipfile.ZipFile(found[0]) as zf:
        zf.extractall(src, [n for n in zf.namelist() if n.startswith(f"{engine}/") and n.endswith(".py")])
    (src / ".unpacked").write_text(found[0].name)
    return src


def _fit(argv: list[str]) -> subprocess.CompletedProcess:
    """``hybridplan fit ARGV`` run in this process (as scripts/docs.py runs the docs' commands), from this
    checkout: its exit status, stdout and stderr."""
    import contextlib
    import io

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from hybridplan.cli import main as hybridplan_main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = hybridplan_main(["fit", *argv]) or 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def hybridplan_case(engine: str, version: str, args: list[str], out: Path) -> dict:
    """The file and the command hybridplan writes for one case."""
    flag = "--vllm-version" if engine == "vllm" else "--sglang-version"
    # hybridplan's options go before an engine command line (``-- COMMAND``)
    cut = args.index("--") if "--" in args else len(args)
    base = [*args[:cut], "--engine", engine, flag, version]
    done = _fit([*base, "--json", *args[cut:]])
    if done.returncode not in (0, 1):
        raise RuntimeError(done.stderr.strip())
    report = json.loads(done.stdout)
    command = report["commands"][engine]
    path = out / f"{engine}.yaml"
    emitted = _fit([*base, "--emit", f"{engine}-config", "--out", str(out), *args[cut:]])
    if emitted.returncode not in (0, 1) or not path.exists():
        raise RuntimeError(emitted.stderr.strip())
    # what the engine's argv alone does not hold, for the feed-back (``feed_back``): the GPU, and SGLang's budget
    given = {k: args[args.index(k) + 1] for k in ("--gpu-type", "--kv-budget") if k in args[:cut]}
    if "--kv-cache-memory-bytes" in command["argv"]:
        given.pop("--kv-budget", None)  # the command carries it (where the release has the flag)
    return {
        "argv": command["argv"],
        "file": str(path),
        "figures": {"engine": report[engine], "command": command},
        "options": [*[t for kv in given.items() for t in kv], "--engine", engine, flag, version],
    }


def feed_back(case: dict, argv: list[str]) -> dict:
    """``fit`` given the engine command the file stands for (as the engine's own parser expanded it): its figures
    against the case's, the differing keys (empty: the same)."""
    done = _fit([*case["options"], "--json", "--", *argv])
    if done.returncode not in (0, 1):
        return {"fit": done.stderr.strip()}
    report = json.loads(done.stdout)
    engine = case["options"][case["options"].index("--engine") + 1]
    got = {"engine": report[engine], "command": report["commands"][engine]}
    return {k: "differs" for k in got if got[k] != case["figures"][k]}


# --- the workers: run with the engine's unpacked wheel first on sys.path -----------------------------------

#: what the workers stand in for, and why: each the least that lets the parser's module import on a CPU in this
#: environment; none changes a flag, a default or the parsing
STAND_INS = (
    "vLLM platform: vLLM's base Platform as CUDA, no device queried (the parser asks which device it runs on)",
    "vLLM compiled ops: the CUTLASS capability queries of vllm/_custom_ops.py (cutlass_*support*) answer False "
    "(0.15.0's w8a8_utils.py calls cutlass_scaled_mm_supports_fp8 at import; no compiled _C here)",
    "absent packages (ABSENT, only where the environment lacks them): placeholder modules whose every name is a "
    "placeholder class, python_multipart with a __version__ FastAPI accepts; vLLM's frontend imports them "
    "(0.10.0 prometheus_fastapi_instrumentator and python-multipart for the API server's routes, 0.15.0 "
    "mistral_common for its tokenizer module) and the parser never calls them",
    "transformers AutoConfig.register: exist_ok, where SGLang registers a config name transformers 5.19 already "
    "has (0.5.14's srt/configs/qwen3_asr.py registers qwen3_asr)",
)


def _vllm_stand_ins(src: Path) -> None:
    """The compiled-ops and frontend stand-ins of ``STAND_INS`` (the platform is set in ``vllm_worker``)."""
    import importlib.util
    import re

    import torch

    ops = src / "vllm" / "_custom_ops.py"
    names = set(re.findall(r"torch\.ops\._C\.(cutlass_\w*support\w*)", ops.read_text())) if ops.exists() else set()
    for name in names:
        if not hasattr(torch.ops._C, name):
            setattr(torch.ops._C, name, lambda *_args, **_kw: False)
    for name in ABSENT:
        if importlib.util.find_spec(name) is None:
            sys.meta_path.insert(0, _Absent(name))


#: packages vLLM's frontend imports that the validation environment may lack (``STAND_INS``)
ABSENT = (
    "prometheus_fastapi_instrumentator",
    "python_multipart",
    "mistral_common",
    "diskcache",
    "lmformatenforcer",
    "ijson",
    "setproctitle",
)


class _Placeholder(type):
    """A name of an absent package: a class, whose attributes are placeholders too; used as a decorator (a
    module-level ``@ijson.coroutine``) it gives the function back."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(name, (), {})

    def __call__(cls, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return cls


class _Absent:
    """A meta-path finder giving ``package`` and its submodules as placeholder modules."""

    def __init__(self, package: str) -> None:
        self.package = package

    def find_spec(self, name, path=None, target=None):
        import importlib.machinery

        if name != self.package and not name.startswith(self.package + "."):
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec):
        import types

        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = lambda attr: (
            _Placeholder(attr, (), {}) if not attr.startswith("__") else ((_ for _ in ()).throw(AttributeError(attr)))
        )
        if spec.name == "python_multipart":
            module.__version__ = "0.0.20"  # FastAPI's ensure_multipart_is_installed asks for > 0.0.12
        return module

    def exec_module(self, module) -> None:
        pass


def _sglang_stand_ins() -> None:
    from transformers import AutoConfig

    register = AutoConfig.register

    def register_once(model_type, config, exist_ok=False):
        return register(model_type, config, exist_ok=True)

    AutoConfig.register = staticmethod(register_once)


def vllm_worker(cases: list[dict], src: Path) -> list[dict]:
    _vllm_stand_ins(src)
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
        diff = _compared(
            lambda: _served(vars(parser.parse_args(["serve", "--config", c["file"]]))),
            lambda: _served(vars(parser.parse_args(["serve", *argv[2:]]))),
        )
        # the arguments the file stands for, as the parser inserts them (FlexibleArgumentParser._pull_args_from_config)
        expanded = parser._pull_args_from_config(["serve", "--config", c["file"]])
        if len(expanded) > 2 and expanded[1] == "--model":
            # to 0.10.x the file's model is inserted as --model, which serve runs as its model
            # (ServeSubcommand.cmd); as a typed command that is refused, so it is given as the positional
            expanded = ["serve", expanded[2], *expanded[3:]]
        expanded = ["vllm", *expanded]
        out.append({"diff": diff, "argv": expanded})
    return out


def _served(ns: dict) -> dict:
    """The arguments as ``vllm serve`` runs with them: its positional model, where given, is the model
    (vllm/entrypoints/cli/serve.py ``ServeSubcommand.cmd``)."""
    if ns.get("model_tag") is not None:
        ns["model"] = ns["model_tag"]
    ns.pop("model_tag", None)
    return ns


def sglang_worker(cases: list[dict]) -> list[dict]:
    _sglang_stand_ins()
    from sglang.srt.server_args import ServerArgs

    try:
        from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger
    except ImportError:
        from sglang.srt.server_args_config_parser import ConfigArgumentMerger
    import inspect

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    import sglang.srt.server_args as server_args

    if "ConfigArgumentMerger(boolean_actions=" in inspect.getsource(server_args):  # as the release calls it
        # 0.5.3rc2 to 0.5.6.x: prepare_server_args (python/sglang/srt/server_args.py) passes the destinations of
        # the actions whose ``action`` attribute is store_true/store_false; argparse's actions have no such
        # attribute, so the list it builds is empty, and a ``true`` becomes the bare switch
        merger = ConfigArgumentMerger(
            boolean_actions=[
                a.dest
                for a in parser._actions
                if hasattr(a, "dest") and hasattr(a, "action") and a.action in ("store_true", "store_false")
            ]
        )
    else:  # later (by 0.5.8.post1): the merger reads the parser itself
        merger = ConfigArgumentMerger(parser)
    out = []
    for c in cases:
        argv = c["argv"]  # python -m sglang.launch_server --flag ...
        diff = _compared(
            lambda: vars(parser.parse_args(merger.merge_config_with_args(["--config", c["file"]]))),
            lambda: vars(parser.parse_args(argv[3:])),
        )
        expanded = [*argv[:3], *merger.merge_config_with_args(["--config", c["file"]])]
        out.append({"diff": diff, "argv": expanded})
    return out


def _compared(from_file, from_cli) -> dict:
    """The two namespaces' differences, or the error one of them raised (argparse's exit included: a key the
    release does not know)."""
    try:
        return _diff(from_file(), from_cli())
    except (SystemExit, Exception) as exc:  # noqa: BLE001 - the engine's parser refused: reported, not raised
        return {"error": [type(exc).__name__, str(exc)]}


def _diff(a: dict, b: dict) -> dict:
    skip = {"config", "dispatch_function"}
    keys = sorted((set(a) | set(b)) - skip)
    return {k: [repr(a.get(k)), repr(b.get(k))] for k in keys if a.get(k) != b.get(k)}


def worker(engine: str, cases_file: Path) -> int:
    # this folder holds vllm.py and sglang.py, which would stand in for the engines' packages
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    cases = json.loads(cases_file.read_text())
    src = Path(os.environ["PYTHONPATH"].split(os.pathsep)[0])
    diffs = vllm_worker(cases, src) if engine == "vllm" else sglang_worker(cases)
    print(json.dumps(diffs))
    return 0


def no_config_agrees(engine: str, version: str, src: Path, refused: list[str]) -> int:
    """A release hybridplan writes no file for: it must be one whose wheel has no --config reader (SGLang's
    server_args_config_parser.py, 0.5.3rc2 on); 1 when it does not agree."""
    readers = list(src.glob("sglang/srt/**/server_args_config_parser.py")) if engine == "sglang" else [src]
    no_config = [r for r in refused if "reads no --config file" in r]
    if not no_config:
        print(f"{engine} {version}: no case is served by this release: nothing to compare")
        return 0
    if not readers:
        print(
            f"{engine} {version}: refused by hybridplan ({no_config[0]}), and the wheel has no --config "
            "reader (no server_args_config_parser.py): agrees"
        )
        return 0
    print(f"{engine} {version}: FAILED: hybridplan refuses ({no_config[0]}), but the wheel reads --config")
    return 1


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
                cases, refused = [], []
                for name, fit_args in CASES:
                    if name.endswith("-switch") and not name.startswith(engine):
                        continue
                    folder = Path(tmp) / name
                    folder.mkdir()
                    try:
                        cases.append({"name": name, **hybridplan_case(engine, version, fit_args, folder)})
                    except RuntimeError as exc:  # a model the release does not serve: nothing to write
                        print(f"{engine} {version} {name}: not written: {exc}")
                        refused.append(str(exc))
                if not cases:
                    failed += no_config_agrees(engine, version, src, refused)
                    continue
                cases_file = Path(tmp) / "cases.json"
                cases_file.write_text(json.dumps(cases))
                env = {**os.environ, "PYTHONPATH": f"{src}:{ROOT}"}
                done = subprocess.run(
                    [sys.executable, __file__, "--worker", engine, str(cases_file)],
                    capture_output=True,
                    text=True,
                    env=env,
                )
            if done.returncode:
                failed += 1
                print(f"{engine} {version}: the worker failed: {done.stderr.strip().splitlines()[-1:]}")
                continue
            for case, got in zip(cases, json.loads(done.stdout.splitlines()[-1])):
                compared += 1
                diff, back = got["diff"], feed_back(case, got["argv"])
                status = "equal" if not diff else f"DIFFERS: {diff}"
                again = "the same figures" if not back else f"FIGURES DIFFER: {back}"
                failed += bool(diff) or bool(back)
                print(
                    f"{engine} {version} {case['name']}: the file and the command parse {status}; fed back to "
                    f"fit, {again}"
                )
    print(f"{compared} files compared, {failed} failures")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
