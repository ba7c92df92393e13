"""The KV cache dtype a quantized checkpoint makes each engine release keep, from the engines' own code, against
hybridplan's rules (hybridplan/engines/vllm/dtypes.py ``checkpoint_kv``, hybridplan/engines/sglang/dtypes.py).

    /tmp/hp-validation/bin/python validation/quant_kv.py                 # every unpacked release in the cache
    /tmp/hp-validation/bin/python validation/quant_kv.py --engine vllm --releases 0.13.0,0.14.0,0.33.0

It reads the wheels that validation/vllm.py and validation/sglang.py unpack into ~/.cache/hybridplan-validation
(it unpacks none itself) and, per release, in a subprocess with the wheel first on ``sys.path``:

* vLLM: ``resolve_kv_cache_dtype_string`` (vllm/utils/torch_utils.py, 0.14.0 on; absent, auto stays auto) called
  on a stand-in ModelConfig whose ``hf_config.quantization_config`` is each case's, after vLLM's own ModelOpt
  normalisation of an hf_quant_config.json layout (``_normalize_quantization_config`` in
  vllm/transformers_utils/model_arch_config_convertor.py, or ``ModelConfig._parse_quant_hf_config`` before);
  then the compressed-tensors branch of the Attention layer (vllm/attention/layer.py, from 0.16
  vllm/model_executor/layers/attention/attention.py): its ``if`` on ``kv_cache_scheme``, cut out of
  ``Attention.__init__`` with ``ast`` and evaluated as written, with the case's scheme and --kv-cache-dtype.
* SGLang: ``ModelOptFp8Config.from_config`` and ``ModelOptFp4Config.from_config``
  (layers/quantization/modelopt_quant.py), cut out with ``ast`` and run on the case's config with ``cls``
  stood in, the attribute that keeps the KV algorithm read from the class's ``__init__`` chain, and the auto
  rule of ``configure_kv_cache_dtype`` (model_executor/model_runner.py; mem_cache/kv_cache_dtype.py from 0.5.22):
  whether it reads ``kv_cache_quant_algo`` and compares it with "FP8".

Exit status 0 when every case matches, 1 on a mismatch, 2 when a release's code could not be read.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path("~/.cache/hybridplan-validation").expanduser()

FP8_SCHEME = {"dynamic": False, "num_bits": 8, "type": "float"}
#: name → (quantization_config, --kv-cache-dtype given or None for auto)
CASES = {
    "modelopt nvfp4, kv_cache_quant_algo FP8": {
        "quant_method": "modelopt",
        "quant_algo": "NVFP4",
        "group_size": 16,
        "kv_cache_quant_algo": "FP8",
    },
    "modelopt nvfp4, kv_cache_scheme fp8": {
        "quant_method": "modelopt",
        "quant_algo": "NVFP4",
        "group_size": 16,
        "kv_cache_scheme": FP8_SCHEME,
    },
    "modelopt fp8, kv_cache_scheme fp8": {
        "quant_method": "modelopt",
        "quant_algo": "FP8",
        "kv_cache_scheme": FP8_SCHEME,
    },
    "modelopt fp8, kv_cache_quant_algo FP8": {
        "quant_method": "modelopt",
        "quant_algo": "FP8",
        "kv_cache_quant_algo": "FP8",
    },
    "modelopt nvfp4, kv_cache_scheme fp4": {
        "quant_method": "modelopt",
        "quant_algo": "NVFP4",
        "group_size": 16,
        "kv_cache_scheme": {"num_bits": 4, "type": "float"},
    },
    "modelopt nvfp4, no KV scheme": {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16},
    "hf_quant_config nvfp4, kv FP8": {
        "producer": {"name": "modelopt", "version": "0.29.0"},
        "quantization": {
            "quant_algo": "NVFP4",
            "kv_cache_quant_algo": "FP8",
            "group_size": 16,
            "exclude_modules": ["lm_head"],
        },
    },
    "hf_quant_config fp8, kv FP8": {
        "producer": {"name": "modelopt", "version": "0.29.0"},
        "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8", "exclude_modules": ["lm_head"]},
    },
    "compressed-tensors nvfp4, kv_cache_scheme fp8": {
        "quant_method": "compressed-tensors",
        "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False, "symmetric": True},
        "config_groups": {
            "group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "float", "group_size": 16}}
        },
    },
    "compressed-tensors w4a16, no KV scheme": {
        "quant_method": "compressed-tensors",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {"num_bits": 4, "type": "int", "group_size": 128, "symmetric": True},
            }
        },
    },
    "awq": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True},
}
GIVEN = (None, "bfloat16", "fp8_e5m2")


def key(version: str) -> tuple:
    import re

    m = re.match(r"(\d+)\.(\d+)\.(\d+)(?:\.post(\d+)|rc(\d+))?", version)
    a, b, c, post, rc = m.groups()
    return int(a), int(b), int(c), int(post) if post else (-1 if rc else 0), int(rc or 0)


# ==================================================================================================
# hybridplan: every call into hybridplan is here
# ==================================================================================================


def hybridplan_kv(engine: str, version: str, quant: dict, given: str | None) -> str:
    from hybridplan.adapters import spec_from_config
    from hybridplan.loader import load_model

    base = load_model("nemotron-3-nano-30b-a3b")
    cfg = {**json.loads(base.config_json), "quantization_config": quant}
    spec = spec_from_config(cfg, name="case")
    if "quantization" in quant:  # the hf_quant_config.json layout: the loader marks where it was read
        from msgspec.structs import replace

        from hybridplan.weights.quant import read

        spec = replace(spec, quantization=read({"quantization_config": quant}, where="hf_quant_config.json"))
    if engine == "vllm":
        from hybridplan.engines.vllm.dtypes import checkpoint_kv
        from hybridplan.engines.vllm.releases import release

        got = checkpoint_kv(spec, release(version), given)
    else:
        from hybridplan.engines.sglang.dtypes import checkpoint_kv
        from hybridplan.engines.sglang.releases import release

        got = checkpoint_kv(spec, release(version), given) if given is None else None
    return got[0] if got else (given or "auto")


# ==================================================================================================
# The engines' side: runs in a subprocess with the wheel first on sys.path
# ==================================================================================================


def _if_on(source: str, cls: str, method: str, needle: str) -> ast.If | None:
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for fn in node.body:
                if isinstance(fn, ast.FunctionDef) and fn.name == method:
                    for sub in ast.walk(fn):
                        if isinstance(sub, ast.If) and needle in ast.unparse(sub.test):
                            return sub
    return None


def vllm_kv(src: Path, version: str) -> dict:
    import copy
    from types import SimpleNamespace

    sys.path.insert(0, str(src))
    torch_utils = None
    try:
        from vllm.utils import torch_utils  # noqa: F811 - 0.11.1 on
    except ImportError:
        pass
    resolve = getattr(torch_utils, "resolve_kv_cache_dtype_string", None)
    normalise = None
    try:
        import vllm.config  # noqa: F401 - first: the convertor module is imported through it
        from vllm.transformers_utils.model_arch_config_convertor import ModelArchConfigConvertorBase as conv

        normalise = getattr(conv, "_normalize_quantization_config", None)
    except ImportError:  # before 0.14.0: ModelConfig._parse_quant_hf_config; 0.10 needs blake3 for vllm.config
        pass
    layer = next(
        (
            p
            for p in (src / "vllm/model_executor/layers/attention/attention.py", src / "vllm/attention/layer.py")
            if p.is_file()
        ),
        None,
    )
    branch = _if_on(layer.read_text(), "Attention", "__init__", "kv_cache_scheme") if layer else None
    out = {}
    for name, quant in CASES.items():
        for given in GIVEN:
            q = copy.deepcopy(quant)
            hf = SimpleNamespace(quantization_config=q)
            if resolve is None:  # nothing reads the checkpoint's KV scheme under auto: no need to normalise
                pass
            elif normalise is not None:
                normalise(None, hf)
            elif "producer" in q:  # before the convertor: ModelConfig._parse_quant_hf_config, same mapping
                from vllm.config import ModelConfig

                ModelConfig._parse_quant_hf_config(None, hf)
            kv = given or "auto"
            if resolve is not None:
                kv = resolve(kv, SimpleNamespace(hf_config=hf))
            if branch is not None and q.get("quant_method") == "compressed-tensors":
                scope = {
                    "quant_config": SimpleNamespace(kv_cache_scheme=q.get("kv_cache_scheme")),
                    "kv_cache_scheme": q.get("kv_cache_scheme"),
                    "kv_cache_dtype": kv,
                    "getattr": getattr,
                }
                if eval(compile(ast.Expression(branch.test), "attention", "eval"), scope):  # noqa: S307
                    kv = "fp8"
            out[f"{name} | {given or 'auto'}"] = kv
    return out


class _Cls:
    """``cls`` for a from_config cut out of its class: the helpers it calls, and the arguments it builds with."""

    @staticmethod
    def get_from_keys(config, keys):
        for k in keys:
            if k in config:
                return config[k]
        raise ValueError(f"none of {keys}")

    @staticmethod
    def get_from_keys_or(config, keys, default):
        try:
            return _Cls.get_from_keys(config, keys)
        except ValueError:
            return default

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


def _method(source: str, cls: str, name: str):
    tree = ast.parse(source)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for fn in node.body:
                if isinstance(fn, ast.FunctionDef) and fn.name == name:
                    return fn, node
    return None, None


def _statics(source: str, cls: str):
    """The static methods of a class of the wheel, executed as written (``ModelOptFp4Config.common_group_size``)."""
    from types import SimpleNamespace

    out = SimpleNamespace()
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for fn in node.body:
                if isinstance(fn, ast.FunctionDef) and any(
                    isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list
                ):
                    plain = ast.Module(
                        body=[
                            ast.FunctionDef(
                                **{**{f: getattr(fn, f) for f in fn._fields}, "decorator_list": [], "returns": None}
                            )
                        ],
                        type_ignores=[],
                    )
                    ast.fix_missing_locations(plain)
                    scope = {"Dict": dict, "Any": object, "Optional": object, "List": list}
                    exec(compile(plain, cls, "exec"), scope)  # noqa: S102 - the wheel's own function
                    setattr(out, fn.name, scope[fn.name])
    return out


def sglang_kv(src: Path, version: str) -> dict:
    import logging

    path = src / "sglang/srt/layers/quantization/modelopt_quant.py"
    text = path.read_text()
    runner = src / "sglang/srt/mem_cache/kv_cache_dtype.py"
    runner = runner if runner.is_file() else src / "sglang/srt/model_executor/model_runner.py"
    rt = runner.read_text()
    auto_reads = 'getattr(quant_config, "kv_cache_quant_algo"' in rt and '.upper() == "FP8"' in rt
    out = {}
    for name, quant in CASES.items():
        if not str(quant.get("quant_method", "modelopt")).startswith("modelopt"):
            out[f"{name} | auto"] = "auto"
            continue
        algo = (quant.get("quantization") or quant).get("quant_algo")
        cls = "ModelOptFp8Config" if algo == "FP8" else "ModelOptFp4Config"
        fn, node = _method(text, cls, "from_config")
        init, _ = _method(text, cls, "__init__")
        init_src = ast.unparse(init)
        # the attribute the KV algorithm lands in: its own, or ModelOptQuantConfig's (kv_cache_quant_algo)
        attr_is_algo = (
            "self.kv_cache_quant_algo = kv_cache_quant_algo" in init_src
            or "super().__init__(kv_cache_quant_" in init_src
        )
        fn = (
            ast.FunctionDef(
                name="from_config",
                args=fn.args,
                body=fn.body,
                decorator_list=[],
                returns=None,
                type_comment=None,
                type_params=[],
            )
            if sys.version_info >= (3, 12)
            else ast.FunctionDef(
                name="from_config", args=fn.args, body=fn.body, decorator_list=[], returns=None, type_comment=None
            )
        )
        mod = ast.Module(body=[fn], type_ignores=[])
        ast.fix_missing_locations(mod)
        scope = {
            "logger": logging.getLogger("sglang"),
            "Dict": dict,
            "Any": object,
            "Optional": object,
            "List": list,
            "is_layer_skipped": None,
            "ModelOptFp4Config": _statics(text, "ModelOptFp4Config"),
        }
        exec(compile(mod, str(path), "exec"), scope)  # noqa: S102 - the wheel's own function
        try:
            built = scope["from_config"](_Cls, json.loads(json.dumps(quant)))
        except Exception as exc:  # noqa: BLE001 - a config the release refuses
            out[f"{name} | auto"] = f"refused: {type(exc).__name__}: {exc}"
            continue
        kw = {**dict(zip(("is_checkpoint_fp8_serialized", "kv_cache_quant_method"), built.args)), **built.kwargs}
        value = kw.get("kv_cache_quant_algo", kw.get("kv_cache_quant_method"))
        held = value if attr_is_algo else None
        fp8 = auto_reads and isinstance(held, str) and held.upper() == "FP8"
        out[f"{name} | auto"] = "fp8_e4m3" if fp8 else "auto"
    return out


def worker(engine: str, src: Path, version: str) -> int:
    got = vllm_kv(src, version) if engine == "vllm" else sglang_kv(src, version)
    print(json.dumps(got))
    return 0


def show(engine: str, version: str) -> None:
    """What the engine's code gave per case (``--show``)."""
    src = CACHE / f"{engine}-{version}"
    run = subprocess.run(
        [sys.executable, __file__, "--worker", engine, str(src), version], capture_output=True, text=True
    )
    print(run.stdout.strip() or run.stderr.strip()[-2000:])


# ==================================================================================================
# Comparison
# ==================================================================================================


def releases(engine: str, which: str | None, cache: Path = CACHE) -> list[tuple[str, Path]]:
    found = sorted(
        ((p.name.split("-", 1)[1], p) for p in cache.glob(f"{engine}-*") if p.is_dir()), key=lambda vp: key(vp[0])
    )
    if which:
        wanted = set(which.split(","))
        found = [vp for vp in found if vp[0] in wanted]
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=("vllm", "sglang", "both"), default="both")
    ap.add_argument("--releases")
    ap.add_argument("--cache-dir", type=Path, default=CACHE, help="where the unpacked wheels are (engine-X.Y.Z)")
    ap.add_argument("--show", nargs=2, metavar=("ENGINE", "VERSION"), help="print one release's answers")
    ap.add_argument("--worker", nargs=3, metavar=("ENGINE", "SRC", "VERSION"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args.worker[0], Path(args.worker[1]), args.worker[2])
    if args.show:
        show(*args.show)
        return 0
    sys.path.insert(0, str(ROOT))
    total = bad = failed = 0
    for engine in ("vllm", "sglang") if args.engine == "both" else (args.engine,):
        for version, src in releases(engine, args.releases, args.cache_dir.expanduser()):
            run = subprocess.run(
                [sys.executable, __file__, "--worker", engine, str(src), version], capture_output=True, text=True
            )
            if run.returncode:
                failed += 1
                print(f"{engine} {version}: could not run: {run.stderr.strip().splitlines()[-1:]}")
                continue
            theirs = json.loads(run.stdout.strip().splitlines()[-1])
            miss = []
            for case, kv in theirs.items():
                name, given = case.split(" | ")
                ours = hybridplan_kv(engine, version, CASES[name], None if given == "auto" else given)
                total += 1
                if ours != kv and not kv.startswith("refused"):
                    miss.append(f"{case}: engine {kv}, hybridplan {ours}")
            bad += len(miss)
            print(f"{engine} {version}: {len(theirs)} cases, {len(miss)} mismatches")
            for m in miss:
                print("   ", m)
    print(f"{total} comparisons, {bad} mismatches, {failed} releases not run")
    return 1 if bad else 2 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
