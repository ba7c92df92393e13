"""Compare hybridplan's SGLang figures with SGLang's own code, run from an unpacked SGLang wheel on a CPU.

    python validation/sglang.py                  # 0.5.23 and 0.5.9, wheels fetched into the cache
    python validation/sglang.py --src sglang-0.5.23 --version 0.5.23 [--json]   # one unpacked wheel

Needs torch, numpy, transformers and regex beside hybridplan. Nothing of SGLang is copied here: its config
classes are imported from the wheel, and the methods that size the pools are read from the wheel's source and
executed unmodified, with only the runtime context they consult (parallel sizes, schedule settings) stood in:

* state shapes and dtypes: each model's ``mamba2_cache_params`` (``srt/configs/<family>.py`` on
  ``srt/configs/mamba_utils.py``) for every shipped spec SGLang serves, at TP 1, 2, 4 and 8: bytes per layer of
  conv and SSM state, their dtypes, the layer count and ``mamba_cache_per_req``;
* the split and the request cap: 0.5.23 ``KVCacheConfigurator._handle_max_mamba_cache``,
  ``_calculate_mamba_ratio`` and ``resolve_max_num_reqs`` (``srt/mem_cache/kv_cache_configurator.py``), with
  the warnings they log; 0.5.9 ``ModelRunnerKVCacheMixin.handle_max_mamba_cache``
  (``srt/model_executor/model_runner_kv_cache_mixin.py``; its request cap is inline in ``init_memory_pool`` and
  is not run): K, the KV pool's bytes and tokens and max_running_requests against ``hybridplan fit``, for
  several budgets, context lengths and requested request counts, at TP 1 and 2.

Exit status 0 when every figure matches, 1 otherwise.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import logging
import sys
import types
from math import prod
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GiB = 1 << 30
#: architecture → (module under srt/configs, config class)
CONFIG_CLASSES = {
    "NemotronHForCausalLM": ("nemotron_h", "NemotronHConfig"),
    "FalconH1ForCausalLM": ("falcon_h1", "FalconH1Config"),
    "Qwen3NextForCausalLM": ("qwen3_next", "Qwen3NextConfig"),
    "Qwen3_5ForConditionalGeneration": ("qwen3_5", "Qwen3_5Config"),
    "Lfm2ForCausalLM": ("lfm2", "Lfm2Config"),
    "MambaForCausalLM": ("mamba", "MambaConfig"),
    "FalconMambaForCausalLM": ("mamba", "MambaConfig"),
    "Mamba2ForCausalLM": ("mamba2", "Mamba2Config"),
}
#: the hybrids whose split is compared (attention + recurrent layers, served by both releases)
SPLIT_MODELS = ("nemotron-h-8b", "nemotron-h-56b", "nemotron-3-nano-30b-a3b", "falcon-h1-0.5b", "qwen3-next-80b-a3b",
                "qwen3.5-27b", "lfm2-1.2b")


class _Env:
    def __init__(self, value):
        self.value = value

    def get(self):
        return self.value


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


class Sglang:
    """Just enough of the ``sglang`` package for its config and sizing code to import and run."""

    def __init__(self, src: Path) -> None:
        self.root = src / "sglang"
        self.tp = 1
        self.log = logging.getLogger("validate-sglang")
        self.log.propagate = False
        self.lines = _Lines()
        self.log.addHandler(self.lines)
        for name, sub in (("sglang", ""), ("sglang.srt", "srt"), ("sglang.srt.configs", "srt/configs"),
                          ("sglang.srt.distributed", "srt/distributed"), ("sglang.srt.layers", "srt/layers")):
            mod = types.ModuleType(name)
            mod.__path__ = [str(self.root / sub)]  # a package whose __init__ (and its imports) never runs
            sys.modules[name] = mod
        self._module("sglang.srt.distributed.utils",
                     self.functions("srt/distributed/utils.py", {"divide", "ensure_divisibility"}))
        self._module("sglang.srt.environ", {"envs": types.SimpleNamespace(
            SGLANG_MAMBA_CONV_DTYPE=_Env("bfloat16"), SGLANG_MAMBA_SSM_DTYPE=_Env(None),
            SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=_Env(False))})
        parallel = lambda: types.SimpleNamespace(attn_tp_size=self.tp, tp_size=self.tp, attn_cp_size=1)  # noqa: E731
        self._module("sglang.srt.runtime_context", {"get_parallel": parallel, "linear_attn_tp_size": lambda: self.tp})
        self._module("sglang.srt.layers.dp_attention", {"get_attention_tp_size": lambda: self.tp})
        self._module("sglang.srt.utils", {"is_cpu": lambda: False})
        self._module("sglang.srt.configs.update_config", {"adjust_tp_num_heads_if_necessary": lambda *a, **k: None})
        from transformers import PretrainedConfig

        vision = type("Qwen3VLVisionConfig", (PretrainedConfig,), {"model_type": "qwen3_vl_vision"})
        self._module("sglang.srt.configs.qwen3_vl", {"Qwen3VLVisionConfig": vision})

    @staticmethod
    def _module(name: str, attrs: dict) -> None:
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        sys.modules[name] = mod

    def _exec(self, rel: str, nodes: list, env: dict) -> dict:
        ns = dict(env)
        exec(compile(ast.Module(body=nodes, type_ignores=[]), str(self.root / rel), "exec"), ns)  # noqa: S102
        return ns

    def functions(self, rel: str, names: set[str], env: dict | None = None) -> dict:
        tree = ast.parse((self.root / rel).read_text())
        return self._exec(rel, [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names],
                          env or {})

    def methods(self, rel: str, cls: str, names: set[str], env: dict) -> dict:
        """The named methods of ``cls`` as plain functions, beside the file's ``MAMBA_*`` constants."""
        tree = ast.parse((self.root / rel).read_text())
        body = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls).body
        consts = [n for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)
                  and n.targets[0].id.startswith("MAMBA_")]
        return self._exec(rel, consts + [n for n in body if isinstance(n, ast.FunctionDef) and n.name in names], env)

    def cache_params(self, spec, raw: dict, tp: int):
        module, cls = CONFIG_CLASSES[spec.architecture]
        self.tp = tp
        cfg = getattr(importlib.import_module(f"sglang.srt.configs.{module}"), cls)(**raw)
        if not hasattr(type(cfg), "mamba2_cache_params") and hasattr(cfg, "text_config"):
            cfg = cfg.text_config  # Qwen3.5: the recurrent layers live in its text config
        return cfg.mamba2_cache_params


def _raw_config(spec) -> dict:
    import yaml

    return yaml.safe_load((ROOT / "model_specs" / f"{spec.name}.yaml").read_text())["config"]


def check_shapes(sg: Sglang, version: str, report: dict) -> None:
    from hybridplan.engines import sglang as hsg
    from hybridplan.errors import NotServed
    from hybridplan.loader import shipped_specs
    from hybridplan.scenario import Scenario

    rel = hsg.release(version)
    for spec in shipped_specs():
        if not spec.recurrent:
            continue
        try:
            rel.check_served(spec)
        except NotServed:
            report["not_served"].append(spec.name)
            continue
        for tp in (1, 2, 4, 8):
            params = sg.cache_params(spec, _raw_config(spec), tp)
            fp = hsg.footprint(Scenario(spec, ctx=8192, tp=tp, sglang=hsg.SglangSettings(release=rel)))
            layers = sum(g.count for g in fp.state)
            theirs = {"mamba_cache_per_req": params.mamba_cache_per_req, "layers": len(params.layers),
                      "conv_bytes_per_layer": sum(prod(s) for s in params.shape.conv) * params.dtype.conv.itemsize,
                      "ssm_bytes_per_layer": prod(params.shape.temporal) * params.dtype.temporal.itemsize,
                      "conv_dtype": str(params.dtype.conv).removeprefix("torch."),
                      "ssm_dtype": str(params.dtype.temporal).removeprefix("torch.")}
            ours = {"mamba_cache_per_req": hsg.per_request_bytes(fp), "layers": layers,
                    "conv_bytes_per_layer": fp.conv_bytes // layers, "ssm_bytes_per_layer": fp.ssm_bytes // layers,
                    "conv_dtype": fp.dtypes.conv, "ssm_dtype": fp.dtypes.ssm}
            _compare(report, "shapes", {"model": spec.name, "tp": tp}, theirs, ours)


def check_split(sg: Sglang, version: str, report: dict) -> None:
    from hybridplan.engines import sglang as hsg
    from hybridplan.loader import load_model
    from hybridplan.scenario import Budget, Scenario

    for name in SPLIT_MODELS:
        spec = load_model(name)
        raw = _raw_config(spec)
        for tp in (1, 2):
            cache = types.SimpleNamespace(mamba2_cache_params=sg.cache_params(spec, raw, tp))
            for budget in (20 * GiB, 40 * GiB, 60 * GiB + 12345 * 4096):
                for ctx in (8192, 131072):
                    for requested in (None, 100, 5000):
                        settings = hsg.SglangSettings(release=hsg.release(version), max_running_requests=requested)
                        r = hsg.ENGINE.fit(Scenario(spec, ctx=ctx, tp=tp, engine="sglang", sglang=settings,
                                                    budget=Budget(kv_budget=budget), allow_long_context=True))
                        cell = r.pool.fp.kv_bytes_per_token
                        theirs = (_run_new if version == "0.5.23" else _run_old)(
                            sg, cache, budget, ctx, requested, extra_buffer=r.strategy == "extra_buffer", cell=cell)
                        ours = {"max_mamba_cache_size": r.pool.size, "kv_pool_bytes": r.kv_bytes,
                                "kv_tokens": r.kv_tokens, "max_running_requests": r.max_running_requests,
                                "logs": r.admission.logs}
                        case = {"model": name, "tp": tp, "budget": budget, "ctx": ctx, "requested": requested}
                        _compare(report, "split", case, theirs, {k: ours[k] for k in theirs})


def _run_new(sg: Sglang, cache, budget: int, ctx: int, requested, *, extra_buffer: bool, cell: int) -> dict:
    """0.5.23: ``_handle_max_mamba_cache`` then ``resolve_max_num_reqs``, as the configurator calls them."""
    sched = types.SimpleNamespace(max_mamba_cache_size=None, mamba_full_memory_ratio=0.9,
                                  max_running_requests=requested, disable_overlap_schedule=False, page_size=1)
    context = types.SimpleNamespace(override=lambda _why, **kw: sched.__dict__.update(kw))
    tracking = sg.functions("srt/mem_cache/allocation_sizing.py", {"get_mamba_tracking_slots"})
    env = {"get_schedule": lambda: sched, "get_context": lambda: context,
           "get_memory": lambda: types.SimpleNamespace(disable_radix_cache=False),
           "get_exec": lambda: types.SimpleNamespace(mamba=types.SimpleNamespace(
               enable_linear_replayssm_spec=False, enable_mamba_extra_buffer=extra_buffer,
               enable_mamba_extra_buffer_lazy=False)),
           "get_spec": lambda: types.SimpleNamespace(speculative_num_draft_tokens=None),
           "_pd_prefill_skips_mamba_spec_state": lambda: False,
           "envs": sys.modules["sglang.srt.environ"].envs,
           "get_mamba_tracking_slots": tracking["get_mamba_tracking_slots"], "logger": sg.log, "logging": logging}
    ns = sg.methods("srt/mem_cache/kv_cache_configurator.py", "KVCacheConfigurator",
                    {"_handle_max_mamba_cache", "_calculate_mamba_ratio", "resolve_max_num_reqs"}, env)
    me = types.SimpleNamespace(mambaish_config=cache, pp_size=1, attn_dp_size=1, fused_entry_bytes=lambda _k: None,
                               spec_algorithm=types.SimpleNamespace(is_none=lambda: True), hybrid_gdn_config=None,
                               hybrid_kda_config=None, extra_mamba_cache_bytes_per_req=0,
                               model_config=types.SimpleNamespace(context_len=ctx))
    me._calculate_mamba_ratio = types.MethodType(ns["_calculate_mamba_ratio"], me)
    rest = ns["_handle_max_mamba_cache"](me, budget / GiB)
    kv_bytes = int(rest * GiB)
    sg.lines.lines.clear()
    reqs = ns["resolve_max_num_reqs"](me, kv_bytes // cell)
    return {"max_mamba_cache_size": sched.max_mamba_cache_size, "kv_pool_bytes": kv_bytes,
            "kv_tokens": kv_bytes // cell, "max_running_requests": reqs, "logs": list(sg.lines.lines)}


def _run_old(sg: Sglang, cache, budget: int, ctx: int, requested, *, extra_buffer: bool, cell: int) -> dict:
    """0.5.9: ``handle_max_mamba_cache`` (its request cap is inline in ``init_memory_pool``: not run)."""
    ns = sg.methods("srt/model_executor/model_runner_kv_cache_mixin.py", "ModelRunnerKVCacheMixin",
                    {"handle_max_mamba_cache"}, {"ModelRunner": object})
    args = types.SimpleNamespace(max_mamba_cache_size=None, disable_radix_cache=False, max_running_requests=requested,
                                 mamba_full_memory_ratio=0.9, enable_dp_attention=False, dp_size=1)
    me = types.SimpleNamespace(mambaish_config=cache, server_args=args,
                               spec_algorithm=types.SimpleNamespace(is_none=lambda: True))
    kv_bytes = int(ns["handle_max_mamba_cache"](me, budget / GiB) * GiB)
    return {"max_mamba_cache_size": args.max_mamba_cache_size, "kv_pool_bytes": kv_bytes,
            "kv_tokens": kv_bytes // cell}


def _compare(report: dict, part: str, case: dict, theirs: dict, ours: dict) -> None:
    for key, value in theirs.items():
        report["compared"][part] = report["compared"].get(part, 0) + 1
        if value != ours[key]:
            report["mismatches"].append({**case, "figure": key, "sglang": value, "hybridplan": ours[key]})


VERSIONS = ("0.5.23", "0.5.9")


def unpack(version: str, cache: Path) -> Path:
    """The folder holding the release's unpacked ``sglang/`` package, downloading the wheel if needed."""
    import subprocess
    import zipfile

    src = cache / f"sglang-{version}"
    if (src / ".unpacked").exists():
        return src
    wheels = cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    found = sorted(wheels.glob(f"sglang-{version}-*.whl"))
    if not found:
        print(f"downloading the sglang {version} wheel into {wheels} ...", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", f"sglang=={version}",
                        "-d", str(wheels)], check=True)
        found = sorted(wheels.glob(f"sglang-{version}-*.whl"))
    with zipfile.ZipFile(found[0]) as zf:
        zf.extractall(src, [n for n in zf.namelist() if n.startswith("sglang/")])
    (src / ".unpacked").write_text(found[0].name)
    return src


def every_release(cache: Path, as_json: bool) -> int:
    """Each release in its own process (each imports its own ``sglang`` package)."""
    import subprocess

    status = 0
    for version in VERSIONS:
        src = unpack(version, cache)
        run = subprocess.run([sys.executable, __file__, "--src", str(src), "--version", version,
                              *(["--json"] if as_json else [])])
        status = status or run.returncode
    return status


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, help="folder holding an unpacked wheel's sglang/ package (default: fetch "
                                             "and unpack every release into the cache)")
    ap.add_argument("--version", choices=VERSIONS)
    ap.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "hybridplan-validation")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.src is None:
        return every_release(args.cache_dir, args.json)
    if args.version is None:
        ap.error("--src needs --version")
    here = Path(__file__).resolve().parent  # this file is named sglang.py: keep its folder off the import path
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    sys.path.insert(0, str(ROOT))
    sg = Sglang(args.src.resolve())
    report: dict = {"version": args.version, "compared": {}, "mismatches": [], "not_served": []}
    check_shapes(sg, args.version, report)
    check_split(sg, args.version, report)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        total = sum(report["compared"].values())
        parts = ", ".join(f"{k} {v}" for k, v in report["compared"].items())
        print(f"SGLang {args.version}: {total} figures compared ({parts}), {len(report['mismatches'])} mismatches")
        for m in report["mismatches"][:20]:
            print("  ", m)
    return 0 if not report["mismatches"] else 1


if __name__ == "__main__":
    sys.exit(main())
