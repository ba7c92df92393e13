"""Compare hybridplan's SGLang figures with SGLang's own code, run from an unpacked SGLang wheel on a CPU.

    python validation/sglang.py                       # every release 0.5.2 – 0.5.23, wheels fetched into the cache
    python validation/sglang.py --releases bands      # one release per band of the pool split
    python validation/sglang.py --releases 0.5.7,0.5.23
    python validation/sglang.py --src sglang-0.5.23 --version 0.5.23 [--json]   # one unpacked wheel

Needs torch, numpy, transformers, regex and yaml beside hybridplan. Nothing of SGLang is copied here: its config
classes are imported from the wheel, and the functions that size the pools are read from the wheel's source and
executed unmodified (a method whole, or, where the rule is inline in a longer method, just its statements, cut
out with ``ast``), with only the runtime context they consult stood in. The parts, and where each release keeps
them (paths under ``sglang/srt/``):

* shapes: each model's state shapes and dtypes for every shipped spec the release serves, at TP 1, 2, 4 and 8
  (``configs/<family>.py`` ``hybrid_gdn_params`` 0.5.2–0.5.3, ``mamba2_cache_params`` on
  ``configs/mamba_utils.py`` from 0.5.3.post1): bytes per layer of conv and SSM state, the dtypes, the layer
  count and ``mamba_cache_per_req``; at TP 1 also with the config's ``mamba_ssm_dtype`` set, with
  ``--mamba-ssm-dtype`` and with ``SGLANG_MAMBA_CONV_DTYPE`` (0.5.9 on). For Nemotron-H, whether
  ``NemotronHModel`` has a layer class for every letter of the pattern (``models/nemotron_h.py``
  ``ALL_DECODER_LAYER_TYPES``).
* split and requests: K (``max_mamba_cache_size``), the state pool built, the KV pool's bytes and tokens, the
  slots per request, the request pool and ``max_running_requests`` (and the warnings, 0.5.14 on), against
  ``hybridplan fit``, for several budgets, contexts, ``--max-running-requests``, radix strategies, overlap,
  ``--max-mamba-cache-size``, speculative decoding (EAGLE, top-k 1, D = 2 and 4, 48 requests) and
  ``SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK``. Run, by release:

  - 0.5.2–0.5.6: the statements of ``ModelRunner.initialize`` that switch the radix cache off by model or fix
    the pool (``model_executor/model_runner.py``), on the ``ModelRunner`` properties that tell the model kind;
  - the split: 0.5.3.post2–0.5.6.post2 ``ModelRunner.handle_max_mamba_cache``; 0.5.7–0.5.15.post1
    ``ModelRunnerKVCacheMixin.handle_max_mamba_cache`` (``model_executor/model_runner_kv_cache_mixin.py``);
    0.5.16 on ``KVCacheConfigurator._handle_max_mamba_cache`` (``mem_cache/kv_cache_configurator.py``, with
    0.5.18 on ``mm_runtime_reservation_gb`` and ``configs/model_config.py`` ``is_multimodal_model``);
  - the KV tokens: 0.5.2–0.5.10.post1 ``profile_max_num_token`` from ``rest_memory =`` on (0.5.2–0.5.3.post1
    its inline split); 0.5.11–0.5.15.post1 ``_profile_available_bytes`` and ``_apply_token_constraints``; 0.5.11
    on ``DefaultPoolConfigurator.calculate_pool_sizes`` (``model_executor/pool_configurator.py``);
  - the slots and the request count: 0.5.2–0.5.9 ``init_memory_pool`` up to its token-count check (the
    estimate, the cap by the state pool with its inline ratio, the EAGLE headroom to 0.5.6.post2, the page
    floor), then the statement that sets ``max_running_requests`` (``managers/tp_worker.py``
    ``TpModelWorker.__init__`` to 0.5.6.post2, ``ModelRunner`` 0.5.7–0.5.9); 0.5.10rc0–0.5.10.post1
    ``_resolve_token_capacity``; 0.5.10rc0 on ``_calculate_mamba_ratio`` and ``_resolve_max_num_reqs``
    (``resolve_max_num_reqs`` from 0.5.16; 0.5.22 on with ``mem_cache/allocation_sizing.py``
    ``get_mamba_tracking_slots``).

* slots: the slots per request alone, for every strategy, overlap on and off, speculative decoding on and off and
  ``SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK`` on and off (0.5.17 on), against ``Release.slots_per_request``.

Stood in: the free memory (the budget, with no slack: ``mem_fraction_static`` 1), the KV cell per token
(hybridplan's), the parallel sizes (TP as given, no DP attention, no PP), the flags, which strategies keep the
extra buffer, and the radix strategy hybridplan resolves (from 0.5.6.post1 its on/off too). Releases to
0.5.10.post1 pin transformers 4.56–5.3; under the 5.19 used here their config subclasses are given back the
``__init__`` they inherited (``Sglang._inherit_init``); releases to 0.5.21 (transformers 4.57.1–5.12.1) get back
the config's layer type names that transformers 5.13 on renames (``Sglang.config``). Not run: ``ServerArgs``
(what ``auto`` picks, the refusals, 48 requests by default under speculative decoding), ``MambaPool`` (the
speculative buffers), the cell size, ``_profile_available_bytes`` from 0.5.16, the mem-fraction default; DP
attention and PP (validation/parallel_dp_ep.py runs them), pages above 1 token.

Exit status 0 when every figure matches, 1 on a mismatch, 2 when a release's code would not run on the stand-ins.
"""

from __future__ import annotations

import argparse
import ast
import copy
import importlib
import importlib.abc
import importlib.machinery
import json
import logging
import math
import os
import re
import sys
import traceback
import types
from dataclasses import dataclass, field
from math import prod
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
GiB = 1 << 30
#: architecture → (module under srt/configs, config class)
CONFIG_CLASSES = {
    "NemotronHForCausalLM": ("nemotron_h", "NemotronHConfig"),
    "FalconH1ForCausalLM": ("falcon_h1", "FalconH1Config"),
    "Qwen3NextForCausalLM": ("qwen3_next", "Qwen3NextConfig"),
    "Qwen3_5ForConditionalGeneration": ("qwen3_5", "Qwen3_5Config"),
    "Qwen3_5MoeForConditionalGeneration": ("qwen3_5", "Qwen3_5MoeConfig"),
    # a text-only checkpoint (model_type qwen3_5_text / qwen3_5_moe_text): SGLang builds its text config directly
    # (python/sglang/srt/configs/qwen3_5.py Qwen3_5TextConfig / Qwen3_5MoeTextConfig, 0.5.17 on)
    "Qwen3_5ForCausalLM": ("qwen3_5", "Qwen3_5TextConfig"),
    "Qwen3_5MoeForCausalLM": ("qwen3_5", "Qwen3_5MoeTextConfig"),
    "Lfm2ForCausalLM": ("lfm2", "Lfm2Config"),
    "MambaForCausalLM": ("mamba", "MambaConfig"),
    "FalconMambaForCausalLM": ("mamba", "FalconMambaConfig"),
    "Mamba2ForCausalLM": ("mamba2", "Mamba2Config"),
    "GraniteMoeHybridForCausalLM": ("granitemoehybrid", "GraniteMoeHybridConfig"),
    "KimiLinearForCausalLM": ("kimi_linear", "KimiLinearConfig"),
}
#: the hybrids whose split is compared (attention + recurrent layers), where the release serves them
SPLIT_MODELS = (
    "nemotron-h-8b",
    "nemotron-h-56b",
    "nemotron-3-nano-30b-a3b",
    "falcon-h1-0.5b",
    "qwen3-next-80b-a3b",
    "qwen3.5-27b",
    "lfm2-1.2b",
    "granite-4.0-h-tiny",
    "kimi-linear-48b-a3b",
    "nemotron-nano-9b-v2",
)
#: one release per band of the pool split (``Release.split``) and of the request count (``Release.requests``),
#: with the releases where a function it runs changes
BANDS = (
    "0.5.2",
    "0.5.3.post1",
    "0.5.3.post2",
    "0.5.6",
    "0.5.6.post1",
    "0.5.7",
    "0.5.8",
    "0.5.9",
    "0.5.10rc0",
    "0.5.11",
    "0.5.13",
    "0.5.14",
    "0.5.16",
    "0.5.17",
    "0.5.18",
    "0.5.20",
    "0.5.21",
    "0.5.22",
    "0.5.23",
)
SPEC_REQUESTS = 48
#: SGLang's files postpone their annotations (``from __future__ import annotations``): so do the bits run here
_FUTURE = annotations.compiler_flag


def _release_key(version: str) -> tuple[int, int, int]:
    from hybridplan.engines.sglang.releases import Release

    return Release(version).key


# --- loading SGLang's code --------------------------------------------------------------------------------------


class _Packages(importlib.abc.MetaPathFinder):
    """Every ``sglang`` package as a bare namespace: its ``__init__`` (and all it imports) never runs; modules are
    then found in the package's folder as usual."""

    def __init__(self, root: Path) -> None:
        self.base = root.parent

    def find_spec(self, name, path, target=None):
        if name != "sglang" and not name.startswith("sglang."):
            return None
        where = self.base / name.replace(".", "/")
        if not where.is_dir():
            return None
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [str(where)]
        return spec


class _Env:
    def __init__(self, value):
        self.value = value

    def get(self):
        return self.value


class _Lines(logging.Handler):
    """The warnings SGLang's sizing code logs (its info lines are not compared)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


class Sglang:
    """Just enough of the ``sglang`` package for its config and sizing code to import and run."""

    def __init__(self, src: Path, version: str) -> None:
        self.root = src / "sglang"
        self.version = version
        self.tp = 1
        self.log = logging.getLogger("validate-sglang")
        self.log.propagate = False
        self.lines = _Lines()
        self.log.addHandler(self.lines)
        self._sources: dict[str, tuple[str, ast.Module]] = {}
        sys.meta_path.insert(0, _Packages(self.root))
        self.envs = types.SimpleNamespace(
            SGLANG_MAMBA_CONV_DTYPE=_Env("bfloat16"),
            SGLANG_MAMBA_SSM_DTYPE=_Env(None),
            SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=_Env(False),
            SGLANG_VLM_CACHE_SIZE_MB=_Env(100),
            SGLANG_MM_FEATURE_CACHE_MB=_Env(1024),
        )
        os.environ["SGLANG_MAMBA_SSM_DTYPE"] = "float32"  # to 0.5.8.post1 ServerArgs always copies its flag here
        self._module(
            "sglang.srt.distributed.utils",
            self.functions("srt/distributed/utils.py", {"divide", "ensure_divisibility"}),
        )
        self._module("sglang.srt.environ", {"envs": self.envs})
        parallel = lambda: types.SimpleNamespace(attn_tp_size=self.tp, tp_size=self.tp, attn_cp_size=1)  # noqa: E731
        self._module("sglang.srt.runtime_context", {"get_parallel": parallel, "linear_attn_tp_size": lambda: self.tp})
        self._module(
            "sglang.srt.layers.dp_attention",
            {"get_attention_tp_size": lambda: self.tp, "get_tensor_model_parallel_world_size": lambda: self.tp},
        )
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

    def has(self, rel: str) -> bool:
        return (self.root / rel).is_file()

    def source(self, rel: str) -> tuple[str, ast.Module]:
        if rel not in self._sources:
            text = (self.root / rel).read_text()
            self._sources[rel] = (text, ast.parse(text))
        return self._sources[rel]

    def _exec(self, rel: str, nodes: list, env: dict) -> dict:
        ns = dict(env)
        code = compile(
            ast.Module(body=nodes, type_ignores=[]), str(self.root / rel), "exec", flags=_FUTURE, dont_inherit=True
        )
        exec(code, ns)  # noqa: S102
        return ns

    def functions(self, rel: str, names: set[str], env: dict | None = None) -> dict:
        """Top-level functions, classes and assignments of a file, by name."""
        tree = self.source(rel)[1]

        def named(n) -> bool:
            if isinstance(n, (ast.FunctionDef, ast.ClassDef)):
                return n.name in names
            return isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name) and n.targets[0].id in names

        return self._exec(rel, [n for n in tree.body if named(n)], env or {})

    def _class(self, rel: str, cls: str) -> ast.ClassDef:
        return next(n for n in ast.walk(self.source(rel)[1]) if isinstance(n, ast.ClassDef) and n.name == cls)

    def methods(self, rel: str, cls: str, names: set[str], env: dict) -> dict:
        """The named methods of ``cls`` as plain functions (properties as properties), beside the file's
        ``MAMBA_*`` constants (as are the statements ``part`` cuts out)."""
        body = [n for n in self._class(rel, cls).body if isinstance(n, ast.FunctionDef) and n.name in names]
        return self._exec(rel, self._constants(rel) + body, env)

    def _constants(self, rel: str) -> list:
        return [
            n
            for n in self.source(rel)[1].body
            if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name) and n.targets[0].id.startswith("MAMBA_")
        ]

    def part(
        self,
        rel: str,
        cls: str,
        method: str | None,
        env: dict,
        *,
        start: str = "",
        stop: str | None = None,
        keep=None,
        drop: tuple[str, ...] = (),
        given: tuple[str, ...] = (),
    ):
        """Some statements of a method as a function of ``self`` and the locals named in ``given`` that returns the
        method's locals (a ``return x`` becomes ``_returned = x``): those from the first one whose source begins
        with ``start`` up to the one that begins with ``stop`` (or to the end), or those ``keep`` accepts; less any
        mentioning one of ``drop``. ``method`` None: whichever method of ``cls`` holds such a statement."""
        text, _tree = self.source(rel)
        seg = lambda s: ast.get_source_segment(text, s)  # noqa: E731
        first = keep if keep is not None else (lambda src: src.startswith(start))
        fn = next(
            f
            for f in self._class(rel, cls).body
            if isinstance(f, ast.FunctionDef)
            and (method is None or f.name == method)
            and any(first(seg(s)) for s in f.body)
        )
        if keep is not None:
            chosen = [s for s in fn.body if keep(seg(s))]
        else:
            i = next(k for k, s in enumerate(fn.body) if seg(s).startswith(start))
            j = (
                len(fn.body)
                if stop is None
                else next(k for k, s in enumerate(fn.body) if k >= i and seg(s).startswith(stop)) + 1
            )
            chosen = fn.body[i:j]
        body = []
        for s in chosen:
            if any(d in seg(s) for d in drop):
                continue
            if isinstance(s, ast.Return) and s.value is not None:
                s = ast.Assign(targets=[ast.Name("_returned", ast.Store())], value=s.value, lineno=s.lineno)
            body.append(s)
        body.append(ast.Return(ast.Call(ast.Name("locals", ast.Load()), [], []), lineno=fn.end_lineno))
        new = copy.copy(fn)
        new.name, new.body, new.decorator_list, new.returns = f"{fn.name}_part", body, [], None
        new.args = ast.arguments(
            posonlyargs=[], args=[ast.arg(a) for a in ("self", *given)], kwonlyargs=[], kw_defaults=[], defaults=[]
        )
        ast.fix_missing_locations(new)
        return self._exec(rel, self._constants(rel) + [new], env)[new.name]

    # --- config classes -----------------------------------------------------------------------------------------

    def config(self, spec, raw: dict, tp: int):
        module, cls = CONFIG_CLASSES[spec.architecture]
        self.tp = tp
        mod = importlib.import_module(f"sglang.srt.configs.{module}")
        if _release_key(self.version) < _release_key("0.5.11"):
            self._inherit_init(mod)
        cfg = getattr(mod, cls)(**copy.deepcopy(raw))
        if _release_key(self.version) < _release_key("0.5.22") and isinstance(raw.get("layer_types"), list):
            # releases to 0.5.21 pin transformers 4.57.1-5.12.1, which keep a config's layer type names; 5.13 on
            # renames mamba/attention to linear_attention/full_attention as it builds the config
            # (configuration_utils.remap_legacy_layer_types), names Granite-4.0-H's mamba_layer_ids there would
            # not find: the names are given back as the pinned transformers leaves them
            cfg.__dict__["layer_types"] = list(raw["layer_types"])
        return cfg

    def _inherit_init(self, mod) -> None:
        """Releases to 0.5.10.post1 pin transformers 4.56–5.3, under which a config class without an ``__init__``
        of its own inherits its parent's. transformers 5.19 (5.5.3 on) gives every config class a dataclass
        ``__init__`` instead, which skips SGLang's (Qwen3.5-MoE's would keep ``text_config`` a dict): give such a
        class back the ``__init__`` it inherited."""

        def own(klass) -> bool:
            code = getattr(klass.__dict__.get("__init__"), "__code__", None)
            return code is not None and code.co_filename.startswith(str(self.root))

        for klass in list(vars(mod).values()):
            if not isinstance(klass, type) or not klass.__module__.startswith("sglang") or own(klass):
                continue
            parent = next((b for b in klass.__mro__[1:] if own(b)), None)
            if parent is not None:
                klass.__init__ = parent.__dict__["__init__"]

    def state(self, cfg) -> State:
        """The state of one sequence as the release describes it: 0.5.2–0.5.3 ``hybrid_gdn_params`` (a tuple, with
        ``mamba_cache_per_req`` beside it), 0.5.3.post1 on ``mamba2_cache_params``; Qwen3.5 keeps its recurrent
        layers in its text config."""
        if not hasattr(type(cfg), "mamba2_cache_params") and not hasattr(type(cfg), "hybrid_gdn_params"):
            cfg = cfg.text_config
        if hasattr(type(cfg), "mamba2_cache_params"):
            p = cfg.mamba2_cache_params
            conv = p.shape.conv
            convs = [tuple(conv)] if conv and isinstance(conv[0], int) else [tuple(c) for c in conv]
            return State(
                convs, tuple(p.shape.temporal), p.dtype.conv, p.dtype.temporal, len(p.layers), p.mamba_cache_per_req
            )
        conv, temporal, conv_dtype, ssm_dtype, layers = cfg.hybrid_gdn_params
        return State([tuple(conv)], tuple(temporal), conv_dtype, ssm_dtype, len(layers), cfg.mamba_cache_per_req)

    def set_dtypes(self, conv: str | None, ssm: str | None) -> None:
        """``SGLANG_MAMBA_CONV_DTYPE`` and ``--mamba-ssm-dtype`` as the release reads them (0.5.9 on through
        ``envs``; before, ServerArgs writes the flag, float32 by default, to the environment)."""
        self.envs.SGLANG_MAMBA_CONV_DTYPE.value = conv or "bfloat16"
        self.envs.SGLANG_MAMBA_SSM_DTYPE.value = ssm
        os.environ["SGLANG_MAMBA_SSM_DTYPE"] = ssm or "float32"


@dataclass
class State:
    convs: list[tuple[int, ...]]
    temporal: tuple[int, ...]
    conv_dtype: object
    ssm_dtype: object
    layers: int
    per: int


# --- shapes -----------------------------------------------------------------------------------------------------


def _raw_config(spec) -> dict:
    import yaml

    return yaml.safe_load((ROOT / "model_specs" / f"{spec.name}.yaml").read_text())["config"]


def _with_ssm_dtype(raw: dict, dtype: str) -> dict:
    """The config with ``mamba_ssm_dtype`` set where the model keeps it (Qwen3.5: its text config)."""
    raw = copy.deepcopy(raw)
    (raw["text_config"] if "text_config" in raw else raw)["mamba_ssm_dtype"] = dtype
    return raw


def _dtype_cases(sg: Sglang) -> list[tuple[str, str | None, str | None, str | None]]:
    """(label, config mamba_ssm_dtype, --mamba-ssm-dtype, SGLANG_MAMBA_CONV_DTYPE) at TP 1; float16 and the conv
    variable came in 0.5.9."""
    new = _release_key(sg.version) >= _release_key("0.5.9")
    cases = [("config-bf16", "bfloat16", None, None), ("flag-bf16", "float16" if new else "float32", "bfloat16", None)]
    if new:
        cases += [("config-fp16", "float16", None, None), ("conv-fp32", None, None, "float32")]
    return cases


def _builds(sg: Sglang, spec, raw: dict) -> bool:
    """Nemotron-H: can the release's ``NemotronHModel`` build every layer of the pattern? It looks each letter up
    in ``ALL_DECODER_LAYER_TYPES`` (``models/nemotron_h.py``), which has no MoE layer ('E') before 0.5.6."""
    rel = "srt/models/nemotron_h.py"
    if spec.architecture != "NemotronHForCausalLM" or not sg.has(rel):
        return True
    table = next(
        n.value
        for n in sg.source(rel)[1].body
        if isinstance(n, ast.AnnAssign) and getattr(n.target, "id", "") == "ALL_DECODER_LAYER_TYPES"
    )
    names = vars(importlib.import_module("sglang.srt.configs.nemotron_h"))
    kinds = {eval(ast.unparse(k), dict(names)) for k in table.keys}  # noqa: S307 — the table's keys are constants
    return set(sg.config(spec, raw, 1).hybrid_override_pattern) <= kinds


def check_shapes(sg: Sglang, version: str, report: dict) -> None:
    from hybridplan.adapters import spec_from_config
    from hybridplan.engines import sglang as hsg
    from hybridplan.errors import NotServed, PlanError
    from hybridplan.loader import shipped_specs
    from hybridplan.scenario import DtypeChoice, Scenario

    rel = hsg.release(version)
    for spec in shipped_specs():
        if not spec.recurrent:
            continue
        try:
            rel.check_served(spec)
        except NotServed:
            report["not_served"].append(spec.name)
            continue
        raw = _raw_config(spec)
        cases = [("default", tp, spec, raw, None, None) for tp in (1, 2, 4, 8)]
        for label, in_config, ssm, conv in _dtype_cases(sg):
            changed = _with_ssm_dtype(raw, in_config) if in_config else raw
            cases.append(
                (label, 1, spec_from_config(changed, name=spec.name) if in_config else spec, changed, ssm, conv)
            )
        _compare(report, "shapes", {"model": spec.name}, {"builds": _builds(sg, spec, raw)}, {"builds": True})
        for label, tp, variant, config, ssm, conv in cases:
            sc = Scenario(
                variant, ctx=8192, tp=tp, dtypes=DtypeChoice(conv=conv, ssm=ssm), sglang=hsg.SglangSettings(release=rel)
            )
            try:
                fp = hsg.footprint(sc)
            except PlanError as exc:  # a TP the heads do not allow (SGLang's layers assert it when built)
                report.setdefault("tp_refused", []).append(f"{spec.name} TP {tp}: {exc}")
                continue
            sg.set_dtypes(conv, ssm)
            st = sg.state(sg.config(variant, config, tp))
            layers = sum(g.count for g in fp.state)
            theirs = {
                "mamba_cache_per_req": st.per,
                "layers": st.layers,
                "conv_bytes_per_layer": sum(prod(s) for s in st.convs) * st.conv_dtype.itemsize,
                "ssm_bytes_per_layer": prod(st.temporal) * st.ssm_dtype.itemsize,
                "conv_dtype": str(st.conv_dtype).removeprefix("torch."),
                "ssm_dtype": str(st.ssm_dtype).removeprefix("torch."),
            }
            ours = {
                "mamba_cache_per_req": hsg.per_request_bytes(fp),
                "layers": layers,
                "conv_bytes_per_layer": fp.conv_bytes // layers,
                "ssm_bytes_per_layer": fp.ssm_bytes // layers,
                "conv_dtype": fp.dtypes.conv,
                "ssm_dtype": fp.dtypes.ssm,
            }
            _compare(report, "shapes", {"model": spec.name, "tp": tp, "dtypes": label}, theirs, ours)
    sg.set_dtypes(None, None)


# --- the runtime context the sizing code consults -----------------------------------------------------------------


class Args:
    """ServerArgs (and, from 0.5.17, the schedule/memory/spec/exec views) as the sizing code reads them."""

    def __init__(
        self,
        *,
        radix_off: bool,
        strategy: str,
        overlap: bool,
        requested: int | None,
        fixed: int | None,
        draft: int,
        page_size: int,
        full_memory_ratio: float,
    ) -> None:
        self.disable_radix_cache = radix_off
        self.mamba_scheduler_strategy = self.mamba_radix_cache_strategy = strategy
        self.disable_overlap_schedule = not overlap
        self.max_running_requests = requested
        self.max_mamba_cache_size = fixed
        self.speculative_num_draft_tokens = draft or None
        self.max_speculative_num_draft_tokens = draft or None
        self.speculative_num_steps = draft - 1 if draft else None
        self.speculative_eagle_topk = 1 if draft else None
        self.page_size = page_size
        self.mamba_full_memory_ratio = full_memory_ratio
        self.mem_fraction_static = 1.0
        self.max_total_tokens = None
        self.enable_dp_attention = False
        self.dp_size = 1
        self.prefill_max_requests = None
        self.mamba = types.SimpleNamespace(enable_linear_replayssm_spec=False, linear_replayssm_cache_len=None)

    # stood in: which strategies keep the extra buffer (ServerArgs methods to 0.5.17, derived fields after)
    def enable_mamba_extra_buffer(self) -> bool:
        return not self.disable_radix_cache and self.mamba_radix_cache_strategy in ("extra_buffer", "extra_buffer_lazy")

    def enable_mamba_extra_buffer_lazy(self) -> bool:
        return not self.disable_radix_cache and self.mamba_radix_cache_strategy == "extra_buffer_lazy"

    def override(self, _why: str, **fields) -> None:
        self.__dict__.update(fields)

    def exec_view(self):
        self.mamba.enable_mamba_extra_buffer = self.enable_mamba_extra_buffer()
        self.mamba.enable_mamba_extra_buffer_lazy = self.enable_mamba_extra_buffer_lazy()
        self.mamba.mamba_radix_cache_strategy = self.mamba_radix_cache_strategy
        return types.SimpleNamespace(mamba=self.mamba)


class Runtime:
    """The stand-in runner (ModelRunner, its mixin, or KVCacheConfigurator) with SGLang's own sizing methods
    bound to it, for one release. ``run`` sizes one case."""

    def __init__(self, sg: Sglang) -> None:
        self.sg = sg
        self.v = _release_key(sg.version)
        self.args: Args | None = None
        self.env = {
            "logger": sg.log,
            "logging": _QuietLogging(sg.log),
            "envs": sg.envs,
            "ModelRunner": object,
            "get_schedule": lambda: self.args,
            "get_memory": lambda: self.args,
            "get_spec": lambda: self.args,
            "get_context": lambda: self.args,
            "get_exec": lambda: self.args.exec_view(),
            "mamba_extra_buffer_enabled": lambda: self.args.enable_mamba_extra_buffer(),
            "mamba_extra_buffer_lazy_enabled": lambda: self.args.enable_mamba_extra_buffer_lazy(),
            "max_speculative_num_draft_tokens": lambda: self.args.max_speculative_num_draft_tokens,
            "_pd_prefill_skips_mamba_spec_state": lambda: False,
            "kimi_linear_config": lambda _mc: None,
            "get_pp_indices": None,
            "get_world_group": lambda: types.SimpleNamespace(world_size=1, cpu_group=None),
            "get_available_gpu_memory": lambda *a, **k: self.free,
            "SGLANG_CI_SMALL_KV_SIZE": None,
            "log_info_on_rank0": lambda *a, **k: None,
            "torch": None,
            "math": math,
            "gc": types.SimpleNamespace(collect=lambda: 0),
        }
        self.free = 0.0
        self.runner_cls = self._runner_class()
        self._load()

    def at_least(self, version: str) -> bool:
        return self.v >= _release_key(version)

    #: the sizing methods loaded from the wheel (attribute here → the name the runner calls it by)
    BOUND = {
        "handle": "handle_max_mamba_cache",
        "ratio": "_calculate_mamba_ratio",
        "requests": "_resolve_max_num_reqs",
        "capacity": "_resolve_token_capacity",
        "available": "_profile_available_bytes",
        "constraints": "_apply_token_constraints",
    }
    # which file holds what
    RUNNER = "srt/model_executor/model_runner.py"
    MIXIN = "srt/model_executor/model_runner_kv_cache_mixin.py"
    CONFIGURATOR = "srt/mem_cache/kv_cache_configurator.py"
    WORKER = "srt/managers/tp_worker.py"
    POOLS = "srt/model_executor/pool_configurator.py"

    def _runner_class(self) -> type:
        """0.5.2–0.5.6: ModelRunner's properties that tell what kind of Mamba model it runs (``is_hybrid_gdn``,
        ``mamba2_config``, ``hybrid_gdn_config``, ``mambaish_config``), from the wheel on its own config classes,
        since ``initialize`` decides by them; later ``mambaish_config`` is a plain attribute here."""
        if self.at_least("0.5.6.post1"):
            return type("Runner", (), {})
        names = {"is_hybrid_gdn", "mamba2_config", "hybrid_gdn_config", "mambaish_config", "kimi_linear_config"}
        env = {
            cls: _config_class(cls)
            for cls in ("Qwen3NextConfig", "FalconH1Config", "NemotronHConfig", "KimiLinearConfig")
        }
        props = self.sg.methods(self.RUNNER, "ModelRunner", names, _absent(env, self.sg, self.RUNNER))
        return type("ModelRunner", (), {k: v for k, v in props.items() if k in names})

    def _load(self) -> None:
        sg, env = self.sg, self.env
        self.initialize = None
        if not self.at_least("0.5.6.post1"):  # 0.5.2–0.5.6: the radix cache switched off by model, the fixed pool
            words = ("disable_radix_cache", "max_mamba_cache_size")
            self.initialize = sg.part(
                self.RUNNER, "ModelRunner", "initialize", env, keep=lambda src: any(w in src for w in words)
            )
        if self.at_least("0.5.16"):
            host, cls = self.CONFIGURATOR, "KVCacheConfigurator"
            ns = sg.methods(
                host,
                cls,
                {"_handle_max_mamba_cache", "_calculate_mamba_ratio", "resolve_max_num_reqs"},
                {**env, **self._tracking()},
            )
            self.handle, self.ratio, self.requests = (
                ns["_handle_max_mamba_cache"],
                ns["_calculate_mamba_ratio"],
                ns["resolve_max_num_reqs"],
            )
            self.mm = None
            if sg.has(host) and "mm_runtime_reservation_gb" in sg.source(host)[0]:
                self.mm = sg.functions(host, {"mm_runtime_reservation_gb"}, env)["mm_runtime_reservation_gb"]
                self.multimodal = sg.functions(
                    "srt/configs/model_config.py",
                    {"multimodal_model_archs", "is_multimodal_model"},
                    {"List": list, **_spliced(sg, "srt/configs/model_config.py", "multimodal_model_archs")},
                )
        else:
            host = self.MIXIN if sg.has(self.MIXIN) else self.RUNNER
            cls = "ModelRunnerKVCacheMixin" if host == self.MIXIN else "ModelRunner"
            names = {
                "handle_max_mamba_cache",
                "_calculate_mamba_ratio",
                "_resolve_max_num_reqs",
                "_resolve_token_capacity",
                "_profile_available_bytes",
                "_apply_token_constraints",
            }
            ns = sg.methods(host, cls, names, env) if self.at_least("0.5.3.post2") else {}
            self.handle = ns.get("handle_max_mamba_cache")
            self.ratio = ns.get("_calculate_mamba_ratio")
            self.requests = ns.get("_resolve_max_num_reqs")
            self.capacity = ns.get("_resolve_token_capacity")
            self.available = ns.get("_profile_available_bytes")
            self.constraints = ns.get("_apply_token_constraints")
            if not self.at_least("0.5.11"):
                self.profile = sg.part(
                    host,
                    cls,
                    "profile_max_num_token",
                    env,
                    start="rest_memory =",
                    given=(
                        "available_gpu_memory",
                        "post_model_load_memory",
                        "total_gpu_memory",
                        "pre_model_load_memory",
                        "cell_size",
                    ),
                )
            if not self.at_least("0.5.10rc0"):
                self.pool_params = _params(sg, host, cls, "init_memory_pool")
                self.pool = sg.part(
                    host,
                    cls,
                    "init_memory_pool",
                    env,
                    start="",
                    drop=("kv_cache_dtype",),
                    stop="if self.max_total_num_tokens <= 0",
                    given=self.pool_params,
                )
                worker = (self.WORKER, "TpModelWorker") if not self.at_least("0.5.7") else (self.RUNNER, "ModelRunner")
                self.final = sg.part(
                    *worker,
                    None,
                    env,
                    start="self.max_running_requests = min(",
                    stop="self.max_running_requests = min(",
                    given=("server_args",),
                )
        if self.at_least("0.5.11"):
            pools = sg.functions(
                self.POOLS, {"MemoryPoolConfig"}, {"dataclass": dataclass, "Optional": Optional, "field": field}
            )
            ns = sg.methods(self.POOLS, "DefaultPoolConfigurator", {"calculate_pool_sizes"}, pools)
            self.pool_sizes = ns["calculate_pool_sizes"]

    def _tracking(self) -> dict:
        """0.5.22 on: the extra slots come from ``mem_cache/allocation_sizing.py``."""
        rel = "srt/mem_cache/allocation_sizing.py"
        if self.sg.has(rel) and "get_mamba_tracking_slots" in self.sg.source(rel)[0]:
            return self.sg.functions(rel, {"get_mamba_tracking_slots"})
        return {}

    # --- one case -----------------------------------------------------------------------------------------------

    def runner(self, cfg, st: State, ctx: int, draft: int):
        me = self.runner_cls()
        spec_algo = types.SimpleNamespace(
            is_none=lambda: not draft,
            is_eagle=lambda: bool(draft),
            is_standalone=lambda: False,
            is_dflash=lambda: False,
        )
        hf = cfg.text_config if not hasattr(type(cfg), "mamba2_cache_params") and hasattr(cfg, "text_config") else cfg
        me.__dict__.update(
            server_args=self.args,
            spec_algorithm=spec_algo,
            is_draft_worker=False,
            mem_fraction_static=1.0,
            model_config=types.SimpleNamespace(
                context_len=ctx, hf_config=hf, num_hidden_layers=st.layers, is_multimodal=False
            ),
            dp_size=1,
            attn_dp_size=1,
            pp_size=1,
            ps=types.SimpleNamespace(attn_dp_size=1, pp_size=1),
            extra_mamba_cache_bytes_per_req=0,
            fused_entry_bytes=lambda _kind: None,
            req_to_token_pool=None,
            device="cuda",
            gpu_id=0,
            post_capture_kv_active=False,
            is_hybrid_swa=False,
            is_hybrid=False,
        )
        if not hasattr(type(me), "is_hybrid_gdn") and not hasattr(type(me), "mambaish_config"):
            me.mambaish_config = hf
            me.hybrid_gdn_config = hf if "qwen3" in type(hf).__name__.lower() else None
            me.hybrid_kda_config = None
        for attr, name in self.BOUND.items():
            fn = getattr(self, attr, None)
            if fn is not None:
                setattr(me, name, types.MethodType(fn, me))
        return me

    def run(self, cfg, st: State, *, budget: int, ctx: int, cell: int, args: Args, multimodal_arch: str) -> dict:
        """K, the pool built, KV bytes and tokens, slots per request, the request pool and max_running_requests,
        as the release computes them; ``radix`` is whether the radix cache stayed on."""
        self.args = args
        draft = args.speculative_num_draft_tokens or 0
        me = self.runner(cfg, st, ctx, draft)
        self.sg.lines.lines.clear()
        out: dict = {}
        if self.initialize is not None:  # 0.5.2–0.5.6: ModelRunner.initialize's own decisions
            self.initialize(me)
        out["radix"] = not args.disable_radix_cache
        if self.at_least("0.5.16"):
            rest = budget / GiB
            if self.mm is not None:
                rest -= self.mm(
                    is_multimodal=self.multimodal["is_multimodal_model"]([multimodal_arch]), mm_feature_transport=None
                )
            left = self.handle(me, rest)
            kv_bytes = int(left * GiB)
            tokens = self.pool_sizes(_PoolSelf(cell), kv_bytes, args.page_size).max_total_num_tokens
            ratio = self.ratio(me)
            self.sg.lines.lines.clear()
            reqs = self.requests(me, tokens)
            out.update(request_pool=reqs)
        elif self.at_least("0.5.11"):
            self.free = budget / GiB
            kv_bytes = me._profile_available_bytes(2 * self.free)  # any free memory before loading: the slack is 0
            tokens = self.pool_sizes(_PoolSelf(cell), kv_bytes, args.page_size).max_total_num_tokens
            tokens = me._apply_token_constraints(tokens)
            ratio = self.ratio(me)
            self.sg.lines.lines.clear()
            reqs = me._resolve_max_num_reqs(tokens)
            out.update(request_pool=reqs)
        else:
            kv_bytes, tokens, ratio, pool, reqs = self._run_old(me, budget, cell)
            out.update(request_pool=pool)
        out.update(
            max_mamba_cache_size=args.max_mamba_cache_size,
            kv_pool_bytes=kv_bytes,
            kv_tokens=tokens,
            max_running_requests=reqs,
            logs=list(self.sg.lines.lines),
        )
        if ratio is not None:
            out["ratio"] = ratio
        # the MambaPool built: before 0.5.3.post2 it is the request pool (HybridReqToTokenPool(size=max_num_reqs))
        out["pool_size"] = out["request_pool"] if not self.at_least("0.5.3.post2") else args.max_mamba_cache_size
        return out

    def _run_old(self, me, budget: int, cell: int):
        """0.5.2–0.5.10.post1: profile_max_num_token from ``rest_memory`` on (the split inline before
        0.5.3.post2), then the request count: init_memory_pool and the worker's statement to 0.5.9, or
        ``_resolve_token_capacity`` and ``_resolve_max_num_reqs``."""
        seen: dict = {}
        if me.__dict__.get("handle_max_mamba_cache") is not None:
            inner = me.handle_max_mamba_cache

            def handle(rest):
                seen["left"] = inner(rest)
                return seen["left"]

            me.handle_max_mamba_cache = handle
        free = budget / GiB
        prof = self.profile(me, free, free, 2 * free, 2 * free, cell)
        left = seen.get("left", prof["rest_memory"])
        kv_bytes = int(left * GiB)
        self.sg.lines.lines.clear()
        if self.at_least("0.5.10rc0"):
            tokens = me._resolve_token_capacity(prof["_returned"])
            ratio = me._calculate_mamba_ratio()
            reqs = me._resolve_max_num_reqs(tokens)
            return kv_bytes, tokens, ratio, reqs, reqs
        me.profile_max_num_token = lambda _total: prof["_returned"]
        given = {
            "total_gpu_memory": 2 * free,
            "max_num_reqs": self.args.max_running_requests,
            "max_total_tokens": self.args.max_total_tokens,
            "server_args": self.args,
        }
        local = self.pool(me, *[given[p] for p in self.pool_params])
        pool = local["max_num_reqs"]
        me.req_to_token_pool = types.SimpleNamespace(size=pool)
        me.model_runner = me
        final = self.final(me, self.args)
        return kv_bytes, me.max_total_num_tokens, local.get("ratio"), pool, final["self"].max_running_requests


class _QuietLogging:
    """The ``logging`` module as the sizing code calls it (``logging.warning(...)``), into the release's log."""

    def __init__(self, log: logging.Logger) -> None:
        self.warning = log.warning
        self.info = log.info


class _PoolSelf:
    """What ``DefaultPoolConfigurator.calculate_pool_sizes`` reads of itself."""

    def __init__(self, cell: int) -> None:
        self._cell_size = cell
        self._fixed_overhead_bytes = 0
        self._zero_kv_max_tokens = None


def _params(sg: Sglang, rel: str, cls: str, method: str) -> tuple[str, ...]:
    fn = next(n for n in sg._class(rel, cls).body if isinstance(n, ast.FunctionDef) and n.name == method)
    return tuple(a.arg for a in fn.args.args[1:])


def _server_args_disable_radix(sg: Sglang, architecture: str) -> bool:
    """Whether the release's ``ServerArgs`` switches the radix cache off for this architecture by name, in a branch
    of its own (Kimi-Linear from 0.5.4.post2: ``elif model_arch in ["KimiLinearForCausalLM"]: …
    self.disable_radix_cache = True`` in ``srt/server_args.py``; later releases call a helper instead): the branch
    is found in the wheel's source, not run."""
    text = sg.source("srt/server_args.py")[0]
    branch = re.search(
        r'model_arch in \[\s*"' + re.escape(architecture) + r'"\s*\]:\n(.*?)(?=\n        (?:el)?if |\Z)', text, re.S
    )
    # the assignment at the branch's own level (12 spaces), not under a further condition
    return branch is not None and "\n            self.disable_radix_cache = True" in "\n" + branch.group(1)


def _config_class(name: str):
    module = {
        "Qwen3NextConfig": "qwen3_next",
        "FalconH1Config": "falcon_h1",
        "NemotronHConfig": "nemotron_h",
        "KimiLinearConfig": "kimi_linear",
    }[name]
    try:
        return getattr(importlib.import_module(f"sglang.srt.configs.{module}"), name)
    except ImportError:
        return type(name, (), {})


def _spliced(sg: Sglang, rel: str, name: str) -> dict:
    """The lists another module splices into ``name`` (``*OTHER_ARCHS``), as empty: the hybrids are listed
    by name."""
    node = next(
        n
        for n in sg.source(rel)[1].body
        if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name) and n.targets[0].id == name
    )
    return {s.value.id: () for s in ast.walk(node) if isinstance(s, ast.Starred) and isinstance(s.value, ast.Name)}


def _absent(env: dict, sg: Sglang, rel: str) -> dict:
    """Every other name the file's ModelRunner properties use: a class nothing is an instance of."""
    tree = sg.source(rel)[1]
    names = {n.id for n in ast.walk(sg._class(rel, "ModelRunner")) if isinstance(n, ast.Name)}
    imported = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    return {**{n: type(n, (), {}) for n in names & imported}, **env}


# --- the split and the request count -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    model: str
    tp: int
    budget: int
    ctx: int
    requested: int | None = None
    radix: str = "auto"
    overlap: bool = True
    fixed: int | None = None
    draft: int = 0
    skip_lock: bool = False

    def label(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v not in (None, False, 0, "auto") or k in ("model", "tp")}


def _cases(rel) -> list[Case]:
    """The base grid (budgets × contexts × requested counts at TP 1 and 2) and, at TP 1, every strategy the
    release has × overlap × --max-mamba-cache-size (none, or a third of the budget) × speculative decoding (D 2
    and 4 at 48 requests), with SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK on and off from 0.5.17."""
    from hybridplan.engines import sglang as hsg
    from hybridplan.loader import load_model
    from hybridplan.scenario import Scenario

    out = []
    for name in SPLIT_MODELS:
        spec = load_model(name)
        if not rel.serves(spec):
            continue
        per = hsg.per_request_bytes(hsg.footprint(Scenario(spec, ctx=8192, sglang=hsg.SglangSettings(release=rel))))
        third = max(8, 40 * GiB // 3 // per)  # a --max-mamba-cache-size taking about a third of the budget
        for tp in (1, 2):
            for budget in (20 * GiB, 40 * GiB, 60 * GiB + 12345 * 4096):
                for ctx in (8192, 131072):
                    for requested in (None, 100, 5000):
                        out.append(Case(name, tp, budget, ctx, requested))
        locks = (False, True) if rel.at_least("0.5.17") else (False,)
        for radix in rel.strategies:
            for overlap in (True, False):
                for fixed in (None, third):
                    for draft in (0, 2, 4):
                        for requested in (None, 100) if not draft else (SPEC_REQUESTS,):
                            for lock in locks:
                                out.append(Case(name, 1, 40 * GiB, 8192, requested, radix, overlap, fixed, draft, lock))
    return out


def check_split(sg: Sglang, version: str, report: dict) -> None:
    from hybridplan.engines import sglang as hsg
    from hybridplan.errors import PlanError
    from hybridplan.loader import load_model
    from hybridplan.scenario import Budget, Scenario

    rel = hsg.release(version)
    rt = Runtime(sg)
    configs: dict = {}
    for case in _cases(rel):
        spec = load_model(case.model)
        settings = hsg.SglangSettings(
            release=rel,
            radix=case.radix,
            overlap=case.overlap,
            max_running_requests=case.requested,
            max_mamba_cache_size=case.fixed,
            skip_decode_lock=case.skip_lock,
        )
        sc = Scenario(
            spec,
            ctx=case.ctx,
            tp=case.tp,
            engine="sglang",
            sglang=settings,
            spec_tokens=max(case.draft - 1, 0),
            budget=Budget(kv_budget=case.budget),
            allow_long_context=True,
        )
        try:
            r = hsg.ENGINE.fit(sc)
        except PlanError as exc:
            report["refused"].append({**case.label(), "hybridplan": str(exc)[:120]})
            continue
        key = (case.model, case.tp)
        if key not in configs:
            cfg = sg.config(spec, _raw_config(spec), case.tp)
            configs[key] = (cfg, sg.state(cfg))
        cfg, st = configs[key]
        sg.tp = case.tp
        sg.envs.SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK.value = case.skip_lock
        # radix: what the user asked (off) — the releases that decide by model (to 0.5.6) run their own code,
        # after what their ServerArgs decides by architecture (read from the wheel, not run); later ones take the
        # strategy hybridplan resolved
        off = (
            case.radix == "off"
            or (rt.at_least("0.5.6.post1") and r.strategy == "off")
            or _server_args_disable_radix(sg, spec.architecture)
        )
        strategy = r.strategy if r.strategy != "off" else "auto"
        overlap = case.overlap and r.strategy != "no_buffer"
        args = Args(
            radix_off=off,
            strategy=strategy,
            overlap=overlap,
            requested=settings.requested(sc.spec_tokens),
            fixed=case.fixed,
            draft=settings.draft(sc.spec_tokens),
            page_size=r.page_size,
            full_memory_ratio=settings.full_memory_ratio,
        )
        ours = {
            "radix": r.strategy != "off",
            "max_mamba_cache_size": r.split.pool_size,
            "pool_size": r.pool.size,
            "kv_pool_bytes": r.kv_bytes,
            "kv_tokens": r.kv_tokens,
            "ratio": r.ratio,
            "request_pool": r.admission.request_pool,
            "max_running_requests": r.max_running_requests,
            "logs": r.admission.logs,
            "starts": r.starts,
        }
        try:
            theirs = rt.run(
                cfg,
                st,
                budget=case.budget,
                ctx=case.ctx,
                cell=r.pool.fp.kv_bytes_per_token,
                args=args,
                multimodal_arch=spec.architecture,
            )
            theirs["starts"] = True
        except (RuntimeError, ValueError) as exc:
            theirs = {"starts": False}
            report["refusals"].append({**case.label(), "sglang": str(exc)[:120], "hybridplan": r.problem})
        if not ours["starts"] and theirs["starts"]:
            # hybridplan flags a start that leaves no KV tokens or no request; SGLang raises later than this code
            theirs["starts"] = theirs["kv_tokens"] > 0 and theirs["max_running_requests"] > 0
        if not theirs["starts"] or not ours["starts"]:
            theirs = {"starts": theirs["starts"]}
        _compare(report, "split", case.label(), theirs, {k: ours[k] for k in theirs})
    sg.envs.SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK.value = False


def check_slots(sg: Sglang, version: str, report: dict) -> None:
    """The slots per request for each strategy × overlap × speculative decoding × skip-lock, SGLang's ratio code
    against ``Release.slots_per_request`` (before 0.5.3.post2 there is none: the pool itself caps the count)."""
    from hybridplan.engines import sglang as hsg
    from hybridplan.loader import load_model

    rel = hsg.release(version)
    if not rel.at_least("0.5.3.post2"):
        return
    rt = Runtime(sg)
    spec = load_model("qwen3-next-80b-a3b")
    cfg = sg.config(spec, _raw_config(spec), 1)
    st = sg.state(cfg)
    locks = (False, True) if rel.at_least("0.5.17") else (False,)
    for strategy in rel.strategies:
        if strategy == "auto":
            continue
        for overlap in (True, False):
            for draft in (0, 4):
                for lock in locks:
                    if strategy == "extra_buffer_lazy" and not overlap:
                        continue  # SGLang asserts
                    sg.envs.SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK.value = lock
                    args = Args(
                        radix_off=strategy == "off",
                        strategy=strategy,
                        overlap=overlap,
                        requested=SPEC_REQUESTS if draft else 100,
                        fixed=60,
                        draft=draft,
                        page_size=1,
                        full_memory_ratio=0.9,
                    )
                    theirs = rt.run(
                        cfg, st, budget=80 * GiB, ctx=8192, cell=1 << 16, args=args, multimodal_arch=spec.architecture
                    )
                    ours = rel.slots_per_request(
                        strategy, overlap=overlap, spec_decoding=bool(draft), skip_decode_lock=lock
                    )
                    case = {"strategy": strategy, "overlap": overlap, "draft": draft, "skip_lock": lock}
                    _compare(report, "slots", case, {"ratio": theirs["ratio"]}, {"ratio": ours})
    sg.envs.SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK.value = False


def _compare(report: dict, part: str, case: dict, theirs: dict, ours: dict) -> None:
    for key, value in theirs.items():
        report["compared"][part] = report["compared"].get(part, 0) + 1
        if value != ours[key]:
            report["mismatches"].append({"part": part, **case, "figure": key, "sglang": value, "hybridplan": ours[key]})


def _grouped(mismatches: list[dict]) -> list[str]:
    """One line per figure and model and kind of case (speculative, --max-mamba-cache-size), with one example."""
    groups: dict[tuple, list[dict]] = {}
    for m in mismatches:
        kind = ("D" if m.get("draft") else "") + ("F" if m.get("fixed") else "")
        groups.setdefault((m["part"], m["figure"], m.get("model", ""), kind), []).append(m)
    out = []
    for (part, figure, model, _kind), ms in groups.items():
        e = {k: v for k, v in ms[0].items() if k not in ("part", "figure", "model", "sglang", "hybridplan")}
        out.append(
            f"{part} {figure} {model}: {len(ms)}x, e.g. {e}: sglang {ms[0]['sglang']!r}, "
            f"hybridplan {ms[0]['hybridplan']!r}"
        )
    return out


# --- releases and wheels ------------------------------------------------------------------------------------------


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
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", f"sglang=={version}", "-d", str(wheels)],
            check=True,
        )
        found = sorted(wheels.glob(f"sglang-{version}-*.whl"))
    with zipfile.ZipFile(found[0]) as zf:
        zf.extractall(src, [n for n in zf.namelist() if n.startswith("sglang/")])
    (src / ".unpacked").write_text(found[0].name)
    return src


def _versions(which: str) -> tuple[str, ...]:
    sys.path.insert(0, str(ROOT))
    from hybridplan.engines.sglang.releases import VERSIONS

    if which == "all":
        return VERSIONS
    if which == "bands":
        return BANDS
    chosen = tuple(v.strip() for v in which.split(","))
    unknown = [v for v in chosen if v not in VERSIONS]
    if unknown:
        raise SystemExit(f"unknown SGLang release(s): {', '.join(unknown)}")
    return chosen


def every_release(versions: tuple[str, ...], cache: Path, as_json: bool) -> int:
    """Each release in its own process (each imports its own ``sglang`` package)."""
    import subprocess

    status = 0
    for version in versions:
        src = unpack(version, cache)
        run = subprocess.run(
            [sys.executable, __file__, "--src", str(src), "--version", version, *(["--json"] if as_json else [])]
        )
        status = status or run.returncode
    return status


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--src",
        type=Path,
        help="folder holding an unpacked wheel's sglang/ package (default: fetch "
        "and unpack the releases into the cache)",
    )
    ap.add_argument("--version", help="the release --src holds")
    ap.add_argument(
        "--releases",
        default="all",
        help="all (default), bands (one release per band of the rules), or a comma-separated list",
    )
    ap.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "hybridplan-validation")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    here = Path(__file__).resolve().parent  # this file is named sglang.py: keep its folder off the import path
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    if args.src is None:
        return every_release(_versions(args.releases), args.cache_dir, args.json)
    if args.version is None:
        ap.error("--src needs --version")
    sys.path.insert(0, str(ROOT))
    sg = Sglang(args.src.resolve(), args.version)
    report: dict = {
        "version": args.version,
        "compared": {},
        "mismatches": [],
        "not_served": [],
        "refused": [],
        "refusals": [],
    }
    try:
        check_shapes(sg, args.version, report)
        check_split(sg, args.version, report)
        check_slots(sg, args.version, report)
    except Exception:  # a stand-in this release's code does not accept: say so in the summary
        traceback.print_exc()
        print(f"SGLang {args.version}: the run failed (traceback above)", flush=True)
        return 2
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        total = sum(report["compared"].values())
        parts = ", ".join(f"{k} {v}" for k, v in report["compared"].items())
        print(
            f"SGLang {args.version}: {total} figures compared ({parts}), {len(report['mismatches'])} mismatches",
            flush=True,
        )
        for line in _grouped(report["mismatches"])[:12]:
            print("  ", line, flush=True)
    return 0 if not report["mismatches"] else 1


if __name__ == "__main__":
    sys.exit(main())
