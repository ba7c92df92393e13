"""Compare hybridplan's data- and expert-parallel figures per rank with the engines' own code, run from the
unpacked wheels on a CPU, for the shipped MoE hybrids each release serves.

    python validation/parallel_dp_ep.py     # vLLM: every release unpacked; SGLang: six releases (SGLANG_RELEASES)
    python validation/parallel_dp_ep.py --engine vllm --vllm-releases 0.10.0,0.33.0
    python validation/parallel_dp_ep.py --engine sglang --sglang-releases 0.5.18,0.5.23 [--json]

vLLM (``--data-parallel-size`` runs whole engines; ``--enable-expert-parallel`` deals the fused MoE's experts
over all ``dp × tp`` ranks). For every rank of TP 1/2/4/8 × DP 1/2/3/4/6/8/16, experts sliced and dealt, run:

* ``FusedMoEParallelConfig.make`` (vllm/model_executor/layers/fused_moe/config.py, with the
  ``flatten_tp_across_dp[_and_pcp]`` it calls), taken from the release's file and executed unmodified; it is
  called as FusedMoE calls it (``tp_size_`` the engine's TP, ``dp_size_`` the DP size, no PCP or SP);
* ``determine_expert_map`` (fused_moe/layer.py up to 0.21.0, fused_moe/expert_map_manager.py from 0.22.0) on
  each rank's EP size and rank: the experts that rank holds;
* FusedMoE's ``assert intermediate_size % tp_size == 0`` (layer.py to 0.23.0, config.py's FusedMoEConfig from
  0.24.0), read from the file (the assertion is looked up, not run) and applied to the MoE's TP size.

Compared with hybridplan/engines/vllm/parallel.py ``sharding`` and ``check_moe``: whether the layout is refused,
the EP size, the MoE's TP size, the experts on the most loaded and on the least loaded rank (hybridplan sizes
the most loaded), and the routed-expert parameters on the most loaded rank (the engine's count and slice of one
expert as hybridplan counts it, against hybridplan's ``stage_rank_bytes`` pricing: ``rank_params`` of each
``experts.*`` part at the Sharding's ranks times ``experts_held / experts``).

SGLang (``--dp-size N --enable-dp-attention``: N attention groups inside the TP ranks; ``--ep-size``). Each
release in its own process (it imports its own ``sglang``), through validation/sglang.py's loader. For TP 2/4/8
× every DP dividing it, and EP 1 and every EP dividing TP:

* ``compute_dp_attention_world_info`` (layers/dp_attention.py; 0.5.23 its ``derive_attn_tp_size`` and
  ``derive_attention_ranks`` from runtime_context.py) for every rank: the attention TP size and how many
  attention groups;
* the model config's ``mamba2_cache_params`` (configs/<family>.py) with the release's parallel context standing
  at attention TP ``tp // dp`` and TP ``tp`` (get_attention_tp_size / get_parallel().attn_tp_size /
  linear_attn_tp_size, 0.5.23's own ``linear_attn_tp_size`` run): conv and SSM bytes per layer,
  ``mamba_cache_per_req``; ``ModelConfig.get_num_kv_heads`` (configs/model_config.py) at the attention TP the
  release's cell-size code passes (read from its source: model_runner_kv_cache_mixin.py
  ``get_attention_tp_size()`` in 0.5.9, pool_configurator.py ``get_parallel().attn_tp_size`` from 0.5.18);
* FusedMoE's expert statements (layers/moe/fused_moe_triton/layer.py ``__init__``, from ``self.moe_ep_size =``
  to ``intermediate_size_per_partition``, their assertions included) on the MoE widths the release derives
  (distributed/parallel_state.py ``initialize_model_parallel``'s ``moe_tp_size`` statements to 0.5.18;
  runtime_context.py ``derive_parallel_widths`` in 0.5.23): the experts a rank holds, its slice;
* the pool split and the request count (validation/sglang.py's Runtime: the release's own
  ``_handle_max_mamba_cache`` / ``calculate_pool_sizes`` / ``resolve_max_num_reqs`` or their 0.5.9 forms) at
  the attention group's state, with the DP-attention size the release reads (``attn_dp_size``, ``dp_size``),
  for budgets of 20 and 60 GiB and ``--max-running-requests`` unset, 3, 100 and 1000.

And PP 2 and 4 at TP 1 (40 GiB a stage, the request estimate and 100 requests): each stage's split with the
release's ``pp_size`` and own ``get_pp_indices`` in ``_handle_max_mamba_cache`` (the largest stage's recurrent
layers charged from 0.5.17), on that stage's KV cell, the smallest capacity kept (the all-reduce MIN is not run),
against ``parallel.fit``'s stages.

Compared with hybridplan/engines/sglang/parallel.py: ``attention_tp``, ``sharding`` (EP, MoE TP, the experts
held, its refusals) and ``fit_data_parallel`` with the budget given (the state per request and per layer, the KV
heads per rank, the state slots, KV tokens and running requests).

Stood in, and not run: the free memory (the budget given, as validation/sglang.py does); the KV cell per token
(hybridplan's heads × head size × layers; only the heads per rank are the engine's); each model's layer classes
(the attention, GDN and Mamba layers' own head split, which the configs' state shapes mirror); quantized expert
layouts (block-quantized checkpoints' further divisibility checks); vLLM's attention and KV cache under DP, which
are each engine's own TP figures (validation/vllm.py); SGLang's ServerArgs (its chunked-prefill division under DP
attention, its ``tp_size % dp_size`` assertion: hybridplan's refusal is checked against the text), and the
moe-a2a backends that force ``ep_size = tp_size``; elastic EP and EPLB's redundant experts.

Exit status 0 when every figure matches, 1 on a mismatch, 2 when a release's code would not run.
"""

from __future__ import annotations

import argparse
import ast
import copy
import importlib.util
import inspect
import json
import re
import subprocess
import sys
import traceback
import types
from math import prod
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
GiB = 1 << 30
#: the shipped MoE hybrids (issue 20)
MOE_HYBRIDS = (
    "qwen3-next-80b-a3b",
    "qwen3.5-35b-a3b",
    "qwen3.5-122b-a10b",
    "qwen3.5-397b-a17b",
    "nemotron-3-nano-30b-a3b",
    "nemotron-3-super-120b-a12b",
    "granite-4.0-h-small",
    "granite-4.0-h-tiny",
    "kimi-linear-48b-a3b",
)
VLLM_TP = (1, 2, 4, 8)
VLLM_DP = (1, 2, 3, 4, 6, 8, 16)
SGLANG_TP = (2, 4, 8)
#: 0.5.9 (the mixin), 0.5.15 (its last form), 0.5.16 (resolve_max_num_reqs in the configurator), 0.5.18 (the
#: runtime context), 0.5.22 and 0.5.23 (at least one request a DP-attention group)
SGLANG_RELEASES = ("0.5.9", "0.5.15", "0.5.16", "0.5.18", "0.5.22", "0.5.23")


def _release_key(version: str) -> tuple:
    return tuple(int(x) for x in re.findall(r"\d+", version))


def _bare(fn: ast.FunctionDef) -> ast.FunctionDef:
    """The function without its decorators and annotations (they name types this run does not import)."""
    fn = copy.deepcopy(fn)
    fn.decorator_list, fn.returns = [], None
    for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs:
        a.annotation = None
    for a in (fn.args.vararg, fn.args.kwarg):
        if a is not None:
            a.annotation = None
    return fn


def _exec_functions(path: Path, nodes: list, scope: dict) -> dict:
    code = compile(ast.Module(body=[_bare(n) for n in nodes], type_ignores=[]), str(path), "exec")
    exec(code, scope)  # noqa: S102 - the engine's own code
    return scope


def _compare(report: dict, part: str, case: dict, theirs: dict, ours: dict) -> None:
    for key, value in theirs.items():
        report["compared"][part] = report["compared"].get(part, 0) + 1
        if value != ours.get(key):
            report["mismatches"].append(
                {"part": part, **case, "figure": key, "engine": value, "hybridplan": ours.get(key)}
            )


def _routed_parts(spec) -> list:
    from hybridplan.weights.families import parts

    every = parts(spec.architecture, json.loads(spec.config_json), spec.family)
    return [p for p in every if p.section != "mtp" and p.group == "moe" and p.name.startswith("experts.")]


def _expert_params(spec, moe_tp: int, held: int, experts: int) -> int:
    """hybridplan's routed-expert parameters on a rank that holds ``held`` experts sliced ``moe_tp`` ways."""
    from hybridplan.weights import rank_params

    return round(sum(rank_params(p, moe_tp, spec.hidden_size) for p in _routed_parts(spec)) * held / experts)


# --- vLLM ---------------------------------------------------------------------------------------------------------


class _Anything:
    """A parallel config or ``envs`` module: the fields ``make`` reads, anything else None."""

    def __init__(self, **fields) -> None:
        self.__dict__.update(fields)

    def __getattr__(self, name):
        return None


class VllmMoE:
    """One release's ``FusedMoEParallelConfig.make`` and ``determine_expert_map``, and the file that asserts the
    MoE's intermediate size divides over its TP ranks."""

    def __init__(self, root: Path) -> None:
        import torch

        moe = root / "vllm" / "model_executor" / "layers" / "fused_moe"
        self.root = root
        self.rank = {"dp": 0, "tp": 0}
        tree = ast.parse((moe / "config.py").read_text())
        cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "FusedMoEParallelConfig")
        methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
        group = lambda key: types.SimpleNamespace(rank_in_group=self.rank[key], world_size=None)  # noqa: E731
        scope = {
            "get_dp_group": lambda: group("dp"),
            "get_pcp_group": lambda: types.SimpleNamespace(rank_in_group=0, world_size=1),
            "get_tensor_model_parallel_rank": lambda: self.rank["tp"],
            "envs": _Anything(),
            "logger": None,
        }
        flatten = [n for n in methods if n.startswith("flatten_tp_across")]
        _exec_functions(moe / "config.py", [methods["make"]] + [methods[n] for n in flatten], scope)
        stand = type("FusedMoEParallelConfig", (), {"__init__": lambda self, **kw: self.__dict__.update(kw)})
        for n in flatten:
            setattr(stand, n, staticmethod(scope[n]))
        scope["FusedMoEParallelConfig"] = stand
        self.make = scope["make"]
        self.make_params = set(inspect.signature(self.make).parameters)
        where = next(
            f
            for f in ("expert_map_manager.py", "layer.py")
            if (moe / f).exists() and "def determine_expert_map" in (moe / f).read_text()
        )
        self.map_file = f"fused_moe/{where}"
        fn = next(
            n
            for n in ast.parse((moe / where).read_text()).body
            if isinstance(n, ast.FunctionDef) and n.name == "determine_expert_map"
        )
        self.expert_map = _exec_functions(moe / where, [fn], {"torch": torch})["determine_expert_map"]
        pattern = re.compile(r"assert (self\.)?intermediate_size % (self\.)?tp_size == 0")
        self.assert_file = next(
            (f"fused_moe/{f.name}" for f in sorted(moe.glob("*.py")) if pattern.search(f.read_text())), None
        )

    def ranks(self, tp: int, dp: int, ep: bool, experts: int) -> list[dict]:
        """Each rank's MoE parallel config and the experts it holds."""
        out = []
        for dp_rank in range(dp):
            for tp_rank in range(tp):
                self.rank.update(dp=dp_rank, tp=tp_rank)
                kw = {
                    "tp_size_": tp,
                    "dp_size_": dp,
                    "pcp_size_": 1,
                    "sp_size_": 1,
                    "vllm_parallel_config": _Anything(
                        enable_expert_parallel=ep, enable_eplb=False, all2all_backend="allgather_reducescatter"
                    ),
                }
                cfg = self.make(**{k: v for k, v in kw.items() if k in self.make_params})
                local = experts
                if cfg.use_ep:
                    local = self.expert_map(ep_size=cfg.ep_size, ep_rank=cfg.ep_rank, global_num_experts=experts)[0]
                out.append({"ep_size": cfg.ep_size, "moe_tp": cfg.tp_size, "experts": local})
        return out


def check_vllm(version: str, root: Path, report: dict) -> None:
    from hybridplan.engines.vllm import parallel as vllm_pp
    from hybridplan.engines.vllm.releases import release
    from hybridplan.engines.vllm.settings import VllmSettings
    from hybridplan.errors import PlanError
    from hybridplan.loader import load_model
    from hybridplan.scenario import Scenario
    from hybridplan.stages import expert_shape

    rel = release(version)
    engine = VllmMoE(root)
    report["files"] = {
        "make": "fused_moe/config.py",
        "determine_expert_map": engine.map_file,
        "intermediate assert": engine.assert_file,
    }
    for name in MOE_HYBRIDS:
        spec = load_model(name)
        if not rel.serves(spec):
            report["not_served"].append(name)
            continue
        shape = expert_shape(spec)
        for tp in VLLM_TP:
            for dp in VLLM_DP:
                for ep in (False, True):
                    if tp * dp == 1:
                        continue
                    ranks = engine.ranks(tp, dp, ep, shape.experts)
                    moe_tp = ranks[0]["moe_tp"]
                    most = max(r["experts"] for r in ranks)
                    refused = engine.assert_file is not None and shape.intermediate % moe_tp != 0
                    theirs = {"refused": refused}
                    if not refused:
                        theirs.update(
                            ep_size=max(r["ep_size"] for r in ranks),
                            moe_tp=moe_tp,
                            experts_most=most,
                            experts_least=min(r["experts"] for r in ranks),
                            expert_params_most=_expert_params(spec, moe_tp, most, shape.experts),
                        )
                    sc = Scenario(
                        spec, ctx=8192, tp=tp, dp=dp, expert_parallel=ep, engine="vllm", vllm=VllmSettings(release=rel)
                    )
                    ours: dict = {"refused": False}
                    try:
                        vllm_pp.check_moe(sc)
                    except PlanError:
                        ours["refused"] = True
                    if not ours["refused"]:
                        sh = vllm_pp.sharding(sc)
                        held = sh.experts_held if sh.experts_held is not None else shape.experts
                        mtp = sh.ranks("moe", "experts.up")
                        # hybridplan sizes the most loaded rank; the least loaded is the even share or one less
                        ours.update(
                            ep_size=sh.ep,
                            moe_tp=mtp,
                            experts_most=held,
                            experts_least=_least(shape.experts, sh.ep),
                            expert_params_most=_expert_params(spec, mtp, held, shape.experts),
                        )
                    _compare(report, "experts", {"model": name, "tp": tp, "dp": dp, "ep": ep}, theirs, ours)


def _least(experts: int, ep: int) -> int:
    """The least loaded EP rank's experts: ``experts // ep`` (every rank but the last in 0.10.0, the ranks past
    the remainder from 0.10.1); all of them without EP."""
    return experts // ep if ep > 1 else experts


def run_vllm(cache: Path, versions: list[str] | None) -> dict:
    from hybridplan.engines.vllm.releases import VERSIONS

    found = [
        d
        for d in sorted(cache.glob("vllm-*"), key=lambda d: _release_key(d.name[5:]))
        if d.is_dir()
        and (d / "vllm" / "model_executor" / "layers" / "fused_moe" / "config.py").exists()
        and d.name[5:] in VERSIONS
        and (versions is None or d.name[5:] in versions)
    ]
    out = {}
    for d in found:
        version = d.name[5:]
        report = {"compared": {}, "mismatches": [], "not_served": []}
        try:
            check_vllm(version, d, report)
        except Exception:  # noqa: BLE001 - a stand-in this release's code does not accept: say so
            report["error"] = traceback.format_exc(limit=3)
        out[f"vllm {version}"] = report
    return out


# --- SGLang -------------------------------------------------------------------------------------------------------


def _validate_sglang():
    """validation/sglang.py's loader and runtime, imported by path (its name would shadow the ``sglang``
    package)."""
    spec = importlib.util.spec_from_file_location("validate_sglang", HERE / "sglang.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["validate_sglang"] = mod
    spec.loader.exec_module(mod)
    return mod


class SglangParallel:
    """One release's DP-attention, state-shape, KV-head, expert and pool code, with its parallel context (the
    attention TP, the TP, the MoE widths) standing where this run puts it."""

    def __init__(self, vsg, src: Path, version: str) -> None:
        self.vsg = vsg
        self.sg = sg = vsg.Sglang(src, version)
        self.version = version
        self.p = types.SimpleNamespace(
            attn_tp_size=1,
            tp_size=1,
            attn_dp_size=1,
            attn_cp_size=1,
            attn_dcp_size=1,
            enable_cp_tp_group_sharing=False,
            moe_ep_size=1,
            moe_ep_rank=0,
            moe_tp_size=1,
            moe_tp_rank=0,
            pp_size=1,
        )
        ctx = sys.modules["sglang.srt.runtime_context"].__dict__
        ctx["get_parallel"] = lambda: self.p
        ctx["linear_attn_tp_size"] = lambda: self.p.attn_tp_size
        if sg.has("srt/runtime_context.py") and "def linear_attn_tp_size" in sg.source("srt/runtime_context.py")[0]:
            ctx.update(
                sg.functions(
                    "srt/runtime_context.py",
                    {"linear_attn_parallel_group", "linear_attn_tp_size"},
                    {"get_parallel": lambda: self.p},
                )
            )
        dpa = sys.modules["sglang.srt.layers.dp_attention"].__dict__
        dpa["get_attention_tp_size"] = lambda: self.p.attn_tp_size
        dpa["get_tensor_model_parallel_world_size"] = lambda: self.p.tp_size
        self.world_info = self._world_info()
        self.moe_widths = self._moe_widths()
        self.experts = self._experts()
        self.kv_heads = self._kv_heads()
        self.cell_tp = self._cell_tp()

    # --- the release's functions ---

    def _world_info(self):
        sg = self.sg
        env = {}
        if sg.has("srt/runtime_context.py") and "def derive_attn_tp_size" in sg.source("srt/runtime_context.py")[0]:
            env = sg.functions("srt/runtime_context.py", {"derive_attn_tp_size", "derive_attention_ranks"})
        fn = sg.functions("srt/layers/dp_attention.py", {"compute_dp_attention_world_info"}, env)[
            "compute_dp_attention_world_info"
        ]
        takes_flag = "enable_dp_attention" in inspect.signature(fn).parameters

        def info(tp_rank: int, tp: int, dp: int):
            out = fn(True, tp_rank, tp, dp) if takes_flag else fn(tp_rank, tp, dp)
            return out[0], out[1], out[2]  # attn_tp_rank, attn_tp_size, attn_dp_rank

        return info

    def _moe_widths(self):
        """(tp, ep) → moe_tp_size as the release derives it (moe_dp_size 1)."""
        sg = self.sg
        if sg.has("srt/runtime_context.py") and "def derive_parallel_widths" in sg.source("srt/runtime_context.py")[0]:
            ns = sg.functions("srt/runtime_context.py", {"derive_parallel_widths", "derive_attn_tp_size"})
            derive = ns["derive_parallel_widths"]
            return lambda tp, ep, dp: derive(
                tp_size=tp,
                attn_cp_size=1,
                attn_dp_size=dp,
                moe_ep_size=ep,
                moe_dp_size=1,
                dcp_size=1,
                dcp_enabled=False,
            )["moe_tp_size"]
        rel = "srt/distributed/parallel_state.py"
        fn = next(
            n
            for n in sg.source(rel)[1].body
            if isinstance(n, ast.FunctionDef) and n.name == "initialize_model_parallel"
        )
        wanted = [
            s
            for s in fn.body
            if isinstance(s, ast.Assign)
            and isinstance(s.targets[0], ast.Name)
            and s.targets[0].id in ("moe_ep_size", "moe_dp_size", "moe_tp_size")
        ]
        code = compile(ast.Module(body=wanted, type_ignores=[]), str(sg.root / rel), "exec")

        def widths(tp, ep, dp):
            ns = {"expert_model_parallel_size": ep, "moe_data_model_parallel_size": 1, "tensor_model_parallel_size": tp}
            exec(code, ns)  # noqa: S102
            return ns["moe_tp_size"]

        return widths

    def _experts(self):
        """FusedMoE.__init__'s statements from ``self.moe_ep_size =`` to the intermediate slice."""
        rel = "srt/layers/moe/fused_moe_triton/layer.py"
        get_exec = lambda: types.SimpleNamespace(  # noqa: E731
            moe=types.SimpleNamespace(ep_join_mode=None, enable_w4a4_mxfp4_megamoe=False)
        )
        env = {
            "get_parallel": lambda: self.p,
            "get_moe_expert_parallel_world_size": lambda: self.p.moe_ep_size,
            "get_moe_expert_parallel_rank": lambda: self.p.moe_ep_rank,
            "get_moe_tensor_parallel_world_size": lambda: self.p.moe_tp_size,
            "get_moe_tensor_parallel_rank": lambda: self.p.moe_tp_rank,
            "has_per_rank_fused_shared_slots": lambda n: False,
            "get_exec": get_exec,
            "get_server_args": lambda: types.SimpleNamespace(ep_join_mode=None),
        }  # 0.5.16: no elastic EP
        return self.sg.part(
            rel,
            "FusedMoE",
            "__init__",
            env,
            start="self.moe_ep_size =",
            stop="self.intermediate_size_per_partition = intermediate_size",
            given=("num_experts", "num_fused_shared_experts", "intermediate_size"),
        )

    def _kv_heads(self):
        rel = "srt/configs/model_config.py"
        ns = self.sg.methods(rel, "ModelConfig", {"get_num_kv_heads", "get_total_num_kv_heads"}, {})
        return ns

    def _cell_tp(self) -> str:
        """Which TP the release's KV cell-size code divides the KV heads by, read from its source."""
        sg = self.sg
        for rel, attn in (
            ("srt/model_executor/pool_configurator.py", "tp_size = get_parallel().attn_tp_size"),
            ("srt/model_executor/model_runner_kv_cache_mixin.py", "get_num_kv_heads(get_attention_tp_size())"),
        ):
            if sg.has(rel) and attn in sg.source(rel)[0]:
                return "attn_tp"
        return "unknown"

    # --- one case ---

    def set(self, tp: int, dp: int, ep: int) -> None:
        attn = tp // dp
        self.p.attn_tp_size, self.p.tp_size, self.p.attn_dp_size = attn, tp, dp
        self.p.moe_ep_size, self.p.moe_tp_size = ep, self.moe_widths(tp, ep, dp)

    def heads(self, cfg, tp: int) -> int:
        text = getattr(cfg, "text_config", None)
        me = _Anything(
            hf_config=cfg, hf_text_config=text if text is not None and not isinstance(text, dict) else cfg
        )  # any other field the method reads: None
        for k in ("get_total_num_kv_heads", "get_num_kv_heads"):
            setattr(me, k, types.MethodType(self.kv_heads[k], me))
        return me.get_num_kv_heads(tp)


def _pool_case(engine: tuple, ask: dict, r):
    """The release's split and request count at the attention group's state, DP attention on (the mamba/full
    memory ratio hybridplan's default, as validation/sglang.py gives it)."""
    from hybridplan.engines.sglang.settings import SglangSettings as SglangSettingsDefault

    vsg, rt, cfg, st, spec = engine
    dp, budget, requested, fixed = ask["dp"], ask["budget"], ask["requested"], ask["fixed"]
    args = vsg.Args(
        radix_off=r.strategy == "off",
        strategy=r.strategy if r.strategy != "off" else "auto",
        overlap=r.strategy != "no_buffer",
        requested=requested,
        fixed=fixed,
        draft=0,
        page_size=r.page_size,
        full_memory_ratio=SglangSettingsDefault.full_memory_ratio,
    )
    args.enable_dp_attention, args.dp_size = True, dp
    runner = rt.runner

    def with_dp(*a, **k):
        me = runner(*a, **k)
        me.dp_size = me.attn_dp_size = dp
        me.ps = types.SimpleNamespace(attn_dp_size=dp, pp_size=1)
        return me

    rt.runner = with_dp
    try:
        return rt.run(
            cfg,
            st,
            budget=budget,
            ctx=r.ctx,
            cell=r.pool.fp.kv_bytes_per_token,
            args=args,
            multimodal_arch=spec.architecture,
        )
    finally:
        rt.runner = runner


def _pp_indices(sg):
    """The release's own ``get_pp_indices`` (distributed/utils.py), no partition given."""
    import os

    env = {
        "os": types.SimpleNamespace(getenv=lambda key, default=None: default, environ=os.environ),
        "envs": types.SimpleNamespace(SGLANG_PP_LAYER_PARTITION=types.SimpleNamespace(get=lambda: None)),
        "logger": sg.log,
        "Tuple": tuple,
        "List": list,
    }
    return sg.functions("srt/distributed/utils.py", {"get_pp_indices"}, env)["get_pp_indices"]


def _pp_case(engine: tuple, ask: dict, stage_cells: list[int]) -> dict:
    """Every stage's split as the release computes it (its ``pp_size`` and ``get_pp_indices`` in place, the
    whole model's config), each on its own KV cell; then the smallest token capacity (the all-reduce MIN, not
    run) and the running requests the stage holding it resolves."""
    vsg, rt, cfg, st, spec, indices = engine
    runner = rt.runner
    n_layers = ask["layers"]

    def with_pp(*a, **k):
        me = runner(*a, **k)
        # to 0.5.15 the mixin reads pp_size only for its all-reduce MIN (torch.distributed), taken here instead
        me.pp_size = ask["pp"] if rt.at_least("0.5.16") else 1
        me.ps = types.SimpleNamespace(attn_dp_size=1, pp_size=ask["pp"])
        me.model_config.num_hidden_layers = n_layers
        return me

    for fn in (rt.handle, getattr(rt, "requests", None)):
        if fn is not None:
            fn.__globals__["get_pp_indices"] = indices
    rt.runner = with_pp
    try:
        out = []
        for cell in stage_cells:
            args = vsg.Args(
                radix_off=ask["strategy"] == "off",
                strategy=ask["strategy"] if ask["strategy"] != "off" else "auto",
                overlap=ask["strategy"] != "no_buffer",
                requested=ask["requested"],
                fixed=None,
                draft=0,
                page_size=1,
                full_memory_ratio=ask["ratio"],
            )
            out.append(
                rt.run(
                    cfg,
                    st,
                    budget=ask["budget"],
                    ctx=ask["ctx"],
                    cell=cell,
                    args=args,
                    multimodal_arch=spec.architecture,
                )
            )
    finally:
        rt.runner = runner
    least = min(range(len(out)), key=lambda i: out[i]["kv_tokens"])
    return {
        "max_mamba_cache_size": [o["max_mamba_cache_size"] for o in out],
        "kv_tokens": [o["kv_tokens"] for o in out],
        "min_kv_tokens": out[least]["kv_tokens"],
        "max_running_requests": out[least]["max_running_requests"],
    }


def check_sglang_pp(sp: SglangParallel, report: dict) -> None:
    """PP 2 and 4 at TP 1, 40 GiB a stage, SGLang's request estimate and 100 requests."""
    from hybridplan.engines import sglang as hsg
    from hybridplan.engines.sglang import parallel as sglang_pp
    from hybridplan.errors import PlanError
    from hybridplan.loader import load_model
    from hybridplan.scenario import Budget, Scenario
    from hybridplan.stages import decoder_layers

    vsg, sg = sp.vsg, sp.sg
    rel = hsg.release(sp.version)
    rt = vsg.Runtime(sg)
    indices = _pp_indices(sg)
    sp.set(1, 1, 1)
    for name in MOE_HYBRIDS:
        spec = load_model(name)
        if not rel.serves(spec):
            continue
        cfg = sg.config(spec, vsg._raw_config(spec), 1)
        st = sg.state(cfg)
        for pp in (2, 4):
            for requested in (None, 100):
                settings = hsg.SglangSettings(release=rel, max_running_requests=requested)
                sc = Scenario(
                    spec,
                    ctx=32768,
                    pp=pp,
                    engine="sglang",
                    sglang=settings,
                    allow_long_context=True,
                    budget=Budget(kv_budget=40 * GiB),
                )
                case = {"model": name, "pp": pp, "requested": requested}
                try:
                    f = sglang_pp.fit(sc)
                except PlanError as exc:
                    report["refused"].append({**case, "hybridplan": str(exc)[:100]})
                    continue
                ours = {
                    "max_mamba_cache_size": [q.fit.split.pool_size for q in f.stage_pools],
                    "kv_tokens": [q.fit.kv_tokens for q in f.stage_pools],
                    "min_kv_tokens": f.min_kv_tokens,
                    "max_running_requests": f.max_running_requests,
                }
                ask = {
                    "pp": pp,
                    "layers": len(decoder_layers(spec)),
                    "budget": 40 * GiB,
                    "ctx": 32768,
                    "requested": settings.requested(0),
                    "strategy": f.strategy,
                    "ratio": settings.full_memory_ratio,
                }
                try:
                    theirs = _pp_case(
                        (vsg, rt, cfg, st, spec, indices),
                        ask,
                        [q.fit.pool.fp.kv_bytes_per_token for q in f.stage_pools],
                    )
                except (RuntimeError, ValueError) as exc:
                    report["refused"].append({**case, "sglang": str(exc)[:100]})
                    continue
                _compare(report, "pp", case, theirs, ours)


def check_sglang(sp: SglangParallel, report: dict) -> None:
    from hybridplan.engines import sglang as hsg
    from hybridplan.engines.sglang import parallel as sglang_pp
    from hybridplan.errors import PlanError
    from hybridplan.loader import load_model
    from hybridplan.scenario import Budget, Scenario
    from hybridplan.spec import ATTENTION_KINDS
    from hybridplan.stages import expert_shape

    vsg, sg = sp.vsg, sp.sg
    rel = hsg.release(sp.version)
    rt = vsg.Runtime(sg)
    report["cell_tp"] = sp.cell_tp
    for name in MOE_HYBRIDS:
        spec = load_model(name)
        if not rel.serves(spec):
            report["not_served"].append(name)
            continue
        raw = vsg._raw_config(spec)
        shape = expert_shape(spec)
        attn_layers = [m for m in spec.mixers if m.kind in ATTENTION_KINDS and hasattr(m, "num_kv_heads")]
        for tp in SGLANG_TP:
            for dp in [d for d in range(1, tp + 1) if tp % d == 0]:
                sc = Scenario(
                    spec,
                    ctx=32768,
                    tp=tp,
                    dp=dp,
                    dp_attention=dp > 1,
                    engine="sglang",
                    sglang=hsg.SglangSettings(release=rel),
                    allow_long_context=True,
                )
                case = {"model": name, "tp": tp, "dp": dp}
                # the attention topology, every rank
                infos = [sp.world_info(r, tp, dp) for r in range(tp)]
                theirs = {
                    "attn_tp": infos[0][1],
                    "attn_groups": len({i[2] for i in infos}),
                    "ranks_a_group": max(sum(1 for i in infos if i[2] == g) for g in {i[2] for i in infos}),
                }
                attn = sglang_pp.attention_tp(sc) if dp > 1 else tp
                _compare(report, "attention", case, theirs, {"attn_tp": attn, "attn_groups": dp, "ranks_a_group": attn})
                # one rank's state and KV heads at its attention group
                sp.set(tp, dp, 1)
                try:
                    cfg = sg.config(spec, raw, attn)
                    st = sg.state(cfg)
                except (AssertionError, ValueError) as exc:
                    report["refused"].append({**case, "sglang": str(exc)[:100]})
                    continue
                try:
                    f = sglang_pp.fit_data_parallel(replace_budget(sc, Budget(kv_budget=20 * GiB)))
                except PlanError as exc:  # a TP the heads do not allow: SGLang's layers (not run here) assert it
                    report["refused"].append({**case, "hybridplan": str(exc)[:100]})
                    continue
                fp = f.pool.fp
                theirs = {
                    "mamba_cache_per_req": st.per,
                    "layers": st.layers,
                    "conv_bytes_per_layer": sum(prod(s) for s in st.convs) * st.conv_dtype.itemsize,
                    "ssm_bytes_per_layer": prod(st.temporal) * st.ssm_dtype.itemsize,
                }
                n = sum(g.count for g in fp.state)
                ours = {
                    "mamba_cache_per_req": hsg.per_request_bytes(fp),
                    "layers": n,
                    "conv_bytes_per_layer": fp.conv_bytes // n,
                    "ssm_bytes_per_layer": fp.ssm_bytes // n,
                }
                _compare(report, "state", case, theirs, ours)
                if attn_layers and sp.cell_tp == "attn_tp":
                    _compare(
                        report,
                        "kv_heads",
                        case,
                        {"kv_heads_per_rank": sp.heads(cfg, attn)},
                        {"kv_heads_per_rank": _our_heads(fp, attn_layers)},
                    )
                # the pools and the request count, DP attention on
                if dp > 1:
                    for budget in (20 * GiB, 60 * GiB):
                        base = sglang_pp.fit_data_parallel(replace_budget(sc, Budget(kv_budget=budget)))
                        for requested in (None, 3, 100, 1000):
                            for fixed in (None, 500):
                                _pools(report, (vsg, rt, cfg, st, spec), sc, base, (budget, requested, fixed))
                # the experts, every EP dividing TP
                for ep in [e for e in range(1, tp + 1) if tp % e == 0]:
                    sp.set(tp, dp, ep)
                    ecase = {**case, "ep": ep}
                    me = types.SimpleNamespace()
                    try:
                        sp.experts(me, shape.experts, 0, shape.intermediate)
                        theirs = {
                            "refused": False,
                            "moe_tp": me.moe_tp_size,
                            "experts_held": me.num_local_experts,
                            "intermediate_per_rank": me.intermediate_size_per_partition,
                        }
                    except AssertionError:
                        theirs = {"refused": True}
                    try:
                        sh = sglang_pp.sharding(
                            Scenario(
                                spec,
                                ctx=32768,
                                tp=tp,
                                dp=dp,
                                dp_attention=dp > 1,
                                ep_size=ep,
                                engine="sglang",
                                sglang=hsg.SglangSettings(release=rel),
                            )
                        )
                        ours = {
                            "refused": False,
                            "moe_tp": sh.ranks("moe", "experts.up"),
                            "experts_held": sh.experts_held if sh.experts_held is not None else shape.experts,
                            "intermediate_per_rank": shape.intermediate // sh.ranks("moe", "experts.up"),
                        }
                    except PlanError:
                        ours = {"refused": True}
                    if theirs["refused"] or ours["refused"]:
                        theirs = {"refused": theirs["refused"]}
                    _compare(report, "experts", ecase, theirs, ours)


def _pools(report: dict, engine: tuple, sc, base, ask: tuple) -> None:
    """One pool case: whether each starts, and where both do K, the KV tokens and the running requests."""
    from hybridplan.engines import sglang as hsg
    from hybridplan.engines.sglang import parallel as sglang_pp
    from hybridplan.errors import PlanError
    from hybridplan.scenario import Budget

    spec = engine[-1]
    budget, requested, fixed = ask
    s = hsg.SglangSettings(release=sc.sglang.release, max_running_requests=requested, max_mamba_cache_size=fixed)
    case = {
        "model": spec.name,
        "tp": sc.tp,
        "dp": sc.dp,
        "budget_gib": budget // GiB,
        "requested": requested,
        "fixed": fixed,
    }
    try:
        r = sglang_pp.fit_data_parallel(replace_budget(sc, Budget(kv_budget=budget), sglang=s))
        ours = {
            "starts": r.starts,
            "max_mamba_cache_size": r.split.pool_size,
            "kv_tokens": r.kv_tokens,
            "max_running_requests": r.max_running_requests,
        }
    except PlanError:
        r, ours = None, {"starts": False}
    try:
        theirs = _pool_case(engine, {"dp": sc.dp, "budget": budget, "requested": requested, "fixed": fixed}, r or base)
        # as validation/sglang.py: a start that leaves no KV token or no request serves nothing
        theirs["starts"] = theirs["kv_tokens"] > 0 and theirs["max_running_requests"] > 0
    except (RuntimeError, ValueError) as exc:
        theirs = {"starts": False}
        report["refused"].append({**case, "sglang": str(exc)[:100]})
    if not (theirs["starts"] and ours["starts"]):
        theirs = {"starts": theirs["starts"]}
    _compare(report, "pools", case, {k: theirs[k] for k in theirs if k in ours or k == "starts"}, ours)


def _our_heads(fp, attn_layers) -> int:
    """hybridplan's KV heads on one rank: its KV bytes per token over 2 × head size × layers × element bytes."""
    from hybridplan.dtypes import size_of

    per = sum(2 * m.head_dim for m in attn_layers) * size_of(fp.dtypes.kv)
    return fp.kv_bytes_per_token // per


def replace_budget(sc, budget, sglang=None):
    from msgspec.structs import replace

    return replace(sc, budget=budget, sglang=sglang or sc.sglang)


def run_sglang_release(src: Path, version: str) -> dict:
    vsg = _validate_sglang()
    sp = SglangParallel(vsg, src, version)
    report = {"compared": {}, "mismatches": [], "not_served": [], "refused": []}
    check_sglang(sp, report)
    check_sglang_pp(sp, report)
    return report


def run_sglang(cache: Path, versions: tuple[str, ...]) -> dict:
    vsg = _validate_sglang()
    out = {}
    for version in versions:
        src = vsg.unpack(version, cache)
        run = subprocess.run(
            [sys.executable, __file__, "--sglang-src", str(src), "--version", version], capture_output=True, text=True
        )
        try:
            out[f"sglang {version}"] = json.loads(run.stdout)
        except json.JSONDecodeError:
            out[f"sglang {version}"] = {"compared": {}, "mismatches": [], "error": (run.stderr or run.stdout)[-2000:]}
    return out


# --- report ---------------------------------------------------------------------------------------------------------


def _summary(report: dict) -> list[str]:
    lines = []
    for name, r in report.items():
        total = sum(r.get("compared", {}).values())
        parts = ", ".join(f"{k} {v}" for k, v in r.get("compared", {}).items())
        status = f"{total} compared ({parts}), {len(r['mismatches'])} mismatches"
        if r.get("error"):
            status += "; the run failed: " + r["error"].strip().splitlines()[-1]
        if r.get("not_served"):
            status += f"; not served: {', '.join(r['not_served'])}"
        lines.append(f"{name}: {status}")
        groups: dict = {}
        for m in r["mismatches"]:
            groups.setdefault((m["part"], m["figure"], m.get("model")), []).append(m)
        for (part, figure, model), ms in list(groups.items())[:10]:
            e = {k: v for k, v in ms[0].items() if k not in ("part", "figure", "model", "engine", "hybridplan")}
            lines.append(
                f"   {part} {figure} {model}: {len(ms)}x, e.g. {e}: engine {ms[0]['engine']!r}, "
                f"hybridplan {ms[0]['hybridplan']!r}"
            )
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engine", choices=("vllm", "sglang", "both"), default="both")
    ap.add_argument("--vllm-releases", help="comma-separated (default: every vLLM release unpacked)")
    ap.add_argument("--sglang-releases", default=",".join(SGLANG_RELEASES))
    ap.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "hybridplan-validation")
    ap.add_argument("--sglang-src", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--version", help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]  # validation/sglang.py is not sglang
    sys.path.insert(0, str(ROOT))
    if args.sglang_src is not None:  # one SGLang release, in its own process
        try:
            report = run_sglang_release(args.sglang_src.resolve(), args.version)
        except Exception:  # noqa: BLE001
            report = {"compared": {}, "mismatches": [], "error": traceback.format_exc(limit=4)}
        print(json.dumps(report))
        return 0
    report: dict = {}
    if args.engine in ("vllm", "both"):
        report.update(run_vllm(args.cache_dir, args.vllm_releases.split(",") if args.vllm_releases else None))
    if args.engine in ("sglang", "both"):
        report.update(run_sglang(args.cache_dir, tuple(v.strip() for v in args.sglang_releases.split(","))))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print("\n".join(_summary(report)))
    if not report or any(r.get("error") for r in report.values()):
        return 2
    return 1 if any(r["mismatches"] for r in report.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
