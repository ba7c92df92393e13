"""Replay traces through `hybridplan replay` and through vLLM's own engine core, built from the published wheels
on a CPU the way a start builds it, and compare what every request reuses.

    python validation/replay_vllm.py [--releases 0.23.0 ... 0.33.0] [--cases TRACE ...] [--quick]
                                     [--cache-dir ~/.cache/hybridplan-validation] [--log FILE] [--json]

Needs the validation environment of validation/README.md (/tmp/hp-validation). vLLM is never installed: each
release's wheel is unpacked (``unpack_release`` of validation/vllm.py) and runs in its own subprocess with that
folder first on ``sys.path``. This process runs hybridplan, through its public API as a user runs `replay`
(``hybridplan_side``, the only place that calls hybridplan), on the same trace files.

What goes into the vLLM subprocess: the trace (token ids, and the output lengths) and the flags a user types,
nothing hybridplan computed. Each case's flags: the model's config folder (the shipped spec's HF ``config:``),
``--tensor-parallel-size``, ``--max-model-len``, ``--enable-prefix-caching``, ``--mamba-cache-mode``,
``--max-num-batched-tokens``, ``--kv-cache-memory-bytes`` (the memory the cache gets on each GPU, as a user
states it; hybridplan's ``--kv-budget`` is the same figure) and ``--no-async-scheduling``. From them the
subprocess runs, as vLLM wrote it:

* ``EngineArgs(...).create_engine_config()`` (vllm/engine/arg_utils.py): the ``VllmConfig`` with every default
  the release fills in and the model's config hooks (block alignment up to 0.19.1, the Mamba cache mode's
  checks, retention defaults);
* per worker, the model's layers' ``get_kv_cache_spec`` through validation/vllm.py's ``Worker`` (the model
  class's state shapes and dtypes, the worker's ``update_block_size_for_backend`` on its own copy of the config
  where TP > 1, as a worker process holds one);
* ``EngineCore.__init__`` (vllm/v1/engine/core.py) itself, with an executor standing in for the workers: its
  ``_initialize_kv_caches`` (KV cache layout, ``get_kv_cache_configs``, ``generate_scheduler_kv_cache_config``,
  the block the groups settle on, ``validate_block_size``), the scheduler block and hash block it resolves,
  ``Scheduler(vllm_config, kv_cache_config, ...)`` and the request block hasher with the release's hash
  function;
* then that scheduler, step by step: ``schedule()``, the model runner's stand-in output, ``update_from_output``.
  At concurrency N, N requests are in the engine at once (added in trace order, the next as soon as one
  finishes), as a client holding N requests in flight drives a server; the reuse is the request's
  ``num_computed_tokens`` when first scheduled.

Stand-ins (see ``STAND_INS``): validation/vllm.py's (the platform, the attention backend, the layers without
``__init__``, the model runner's loop over them); the workers' answers to the engine core (their layers' specs,
the ``--kv-cache-memory-bytes`` figure as ``gpu_worker.determine_available_memory`` returns it, FlashAttention's
KV cache layouts, no-ops for loading and warming up); the model runner's output: one sampled token per step that
completes the prompt or a decode step, the token the trace says comes next. Outputs are capped at
``MAX_OUTPUT`` tokens (the same capped trace goes to both sides).

Exit status 0 when every request's reused tokens are equal, 1 otherwise.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GiB = 1 << 30
RELEASES = (
    "0.23.0",
    "0.24.0",
    "0.25.0",
    "0.25.1",
    "0.26.0",
    "0.27.0",
    "0.27.1",
    "0.28.0",
    "0.29.0",
    "0.30.0",
    "0.31.0",
    "0.32.0",
    "0.33.0",
)
QUICK_RELEASES = ("0.23.0", "0.33.0")
MAX_OUTPUT = 8
#: --max-model-len of every case (the Mooncake excerpt's longest prompt is 120,633 tokens)
MAX_MODEL_LEN = 131072
#: --max-num-batched-tokens of every case (vLLM's H100/H200 server default from get_batch_defaults, stated)
BATCHED_TOKENS = 8192
#: the models, at their --tensor-parallel-size
MODELS = (("qwen3-next-80b-a3b", 4), ("nemotron-nano-9b-v2", 1))
#: --kv-cache-memory-bytes per GPU: "roomy", and "tight" (a pool that turns over on the Mooncake excerpt while
#: still holding one request of max_model_len, as vLLM's start requires); chosen by hand, per model
BUDGETS = {
    "qwen3-next-80b-a3b": {"roomy": 40 * GiB, "tight": 3 * GiB},
    "nemotron-nano-9b-v2": {"roomy": 40 * GiB, "tight": 3 * GiB + GiB // 2},
}
CONCURRENCY = (1, 8)
QUICK_MOONCAKE = 40
STAND_INS = (
    "validation/vllm.py's: the platform (CUDA on Hopper), FlashAttention's kernel block sizes, the layers "
    "(vLLM's classes without __init__, the model class's state shapes/dtypes), the model runner's loop over them",
    "ModelConfig built by EngineArgs.create_model_config before the CUDA platform stand-in is installed "
    "(create_engine_config then reuses it)",
    "the executor's workers: their layers' get_kv_cache_spec, --kv-cache-memory-bytes as "
    "gpu_worker.determine_available_memory returns it, FlashAttention's KV cache layouts, no-op load/warm-up",
    "model runner output: one sampled token per step that completes the prompt or a decode step",
)


# ==================================================================================================
# The traces (files both sides read)
# ==================================================================================================


def write_traces(folder: Path, quick: bool) -> dict[str, Path]:
    """name → a trace file `hybridplan replay` reads: the synthetic workloads as YAML (validation/replay.py's,
    outputs at most MAX_OUTPUT), the Mooncake excerpt with outputs capped at MAX_OUTPUT."""
    import yaml

    synthetic = {
        "shared-prefix": {"shared": 3000, "users": 8, "private": 400, "output": 4},
        "shared-prefix-groups": {
            "shared": 1200,
            "users": 8,
            "private": 300,
            "output": 4,
            "group_size": 4,
            "group_shared": 2500,
        },
        "vllm-45238-1500-700": {"shared": 1500, "users": 16, "private": 700, "output": 1},
        "vllm-45238-1600-500": {"shared": 1600, "users": 16, "private": 500, "output": 1},
        "conversation": {"shared": 1000, "users": 3, "turns": 3, "private": 700, "output": 8, "order": "round-robin"},
        "revisited-documents": {
            "shared": 0,
            "users": 6,
            "turns": 3,
            "private": 200,
            "output": 2,
            "group_size": 1,
            "group_shared": 2000,
            "history": False,
            "order": "round-robin",
        },
        "prefix-4000-200": {"shared": 4000, "users": 3, "private": 200, "output": 1},
        "prefix-10000-5000": {"shared": 10000, "users": 3, "private": 5000, "output": 1},
    }
    if quick:
        synthetic = {k: synthetic[k] for k in ("conversation", "shared-prefix-groups")}
    out = {}
    for name, w in synthetic.items():
        path = folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump(w))
        out[name] = path
    lines = (ROOT / "tests/data/traces/mooncake-conversation-300.jsonl").read_text().splitlines()
    if quick:
        lines = lines[:QUICK_MOONCAKE]
    capped = []
    for line in lines:
        obj = json.loads(line)
        obj["output_length"] = min(obj.get("output_length", 0), MAX_OUTPUT)
        capped.append(json.dumps(obj))
    path = folder / "mooncake-conversation.jsonl"
    path.write_text("\n".join(capped) + "\n")
    out["mooncake-conversation"] = path
    return out


def token_ids(path: Path) -> list[dict]:
    """The trace's requests as token ids (prompt, output): a run of n tokens with key k is k's own n tokens
    (hybridplan/replay/trace.py: equal keys are equal tokens), the same meaning the trace has for hybridplan."""
    sys.path.insert(0, str(ROOT))
    from hybridplan.replay.trace import read

    ids: dict = {}
    out = []
    for r in read(path):
        full = r.with_output()
        if full.tokens is not None:
            toks = list(full.tokens)
        else:
            toks = [ids.setdefault(k, len(ids)) * (1 << 20) + j for k, n in full.runs for j in range(n)]
        out.append({"prompt": toks[: r.prompt_len], "output": toks[r.prompt_len : r.prompt_len + r.output_len]})
    return out


# ==================================================================================================
# hybridplan's side: `hybridplan replay` through its API, as a user runs it
# ==================================================================================================


def hybridplan_side(version: str, model: str, tp: int, mode: str, trace: Path, budget: int, concurrency: int) -> dict:
    """`hybridplan replay TRACE MODEL --engine vllm --vllm-version V --mode M --tp N --ctx L --chunk C
    --kv-budget B --concurrency K --no-gap`: per request the tokens the vLLM row reused, and the row's rules."""
    from hybridplan import api
    from hybridplan.errors import PlanError

    try:
        rep = api.replay(
            str(trace),
            model,
            engine="vllm",
            vllm_version=version,
            mode=mode,
            tp=tp,
            ctx=str(MAX_MODEL_LEN),
            chunk=str(BATCHED_TOKENS),
            kv_budget=str(budget),
            concurrency=concurrency,
            no_gap=True,
        )
    except PlanError as exc:
        return {"refused": str(exc)}
    row = next(r for r in rep.rows if r.engine == "vllm")
    return {
        "refused": None,
        "reused": [o.reused for o in row.run.outcomes],
        "block": row.rules.get("block_size"),
        "num_blocks": row.rules.get("num_gpu_blocks"),
        "in_flight": row.in_flight,
        "label": row.label,
    }


# ==================================================================================================
# vLLM's side (runs in a subprocess, with the release's sources first on sys.path)
# ==================================================================================================


def _vllm_script():
    """validation/vllm.py, loaded under another name (its file name would shadow the vllm package)."""
    spec = importlib.util.spec_from_file_location("hp_validation_vllm", Path(__file__).with_name("vllm.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules["hp_validation_vllm"] = mod
    spec.loader.exec_module(mod)
    return mod


def worker_main(version: str, src: Path, config_root: Path, cases_file: Path, out_file: Path) -> int:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["VLLM_CACHE_ROOT"] = str(src / ".vllm-cache")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")])
    sys.path.insert(0, str(src))
    import logging

    vv = _vllm_script()
    vv.MAX_LEN = MAX_MODEL_LEN
    todo = json.loads(cases_file.read_text())
    # only the architectures run here are imported and registered by the Worker (it loads every one otherwise)
    archs = {json.loads((config_root / c["model"] / "config.json").read_text())["architectures"][0] for c in todo}
    vv.ARCHS = {a: m for a, m in vv.ARCHS.items() if a in archs}

    from vllm.engine.arg_utils import EngineArgs

    class StartWorker(vv.Worker):
        """validation/vllm.py's Worker, whose ModelConfig comes from ``EngineArgs.create_model_config``."""

        def model_config(self, name: str):
            if name not in self.model_configs:
                path = str(self.config_root / name)
                try:
                    self.model_configs[name] = EngineArgs(
                        model=path, tokenizer=path, skip_tokenizer_init=True, max_model_len=MAX_MODEL_LEN
                    ).create_model_config()
                except (ValueError, AttributeError) as exc:
                    self.model_configs[name] = exc
            found = self.model_configs[name]
            if isinstance(found, Exception):
                raise found
            return found

    import vllm.platforms as platforms

    before = platforms.current_platform
    w = StartWorker(version, config_root, sorted({c["model"] for c in todo}))
    # a node of 8 such GPUs (ParallelConfig checks the world size against the platform's device count)
    type(w.platform).device_count = classmethod(lambda cls: 8)
    for mod in list(sys.modules.values()):  # modules that bound the platform at import see the stand-in too
        if getattr(mod, "__name__", "").startswith("vllm") and getattr(mod, "current_platform", None) is before:
            mod.current_platform = w.platform
    logging.getLogger("vllm").setLevel(logging.WARNING)
    results = []
    for case in todo:
        started = time.perf_counter()
        try:
            res = run_case(w, vv, case)
        except Exception as exc:  # a failure of this script, not an answer of vLLM's: reported, never compared
            import traceback

            res = {"error": "".join(traceback.format_exception(exc, limit=-6))}
        res["seconds"] = round(time.perf_counter() - started, 2)
        results.append({"name": case["name"], **res})
        print(
            f"  {case['name']}: {res.get('error', '').splitlines()[-1:] or 'done'} [{res['seconds']} s]",
            file=sys.stderr,
            flush=True,
        )
        out_file.write_text(json.dumps({"results": results}))
    return 0


def engine_core(w, vv, case: dict):
    """The engine core a start builds for the case's flags: (EngineCore, VllmConfig)."""
    import concurrent.futures

    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.engine.core import EngineCore
    from vllm.v1.executor.abstract import Executor

    path = str(w.config_root / case["model"])
    built = w.model_config(case["model"])
    flags = {
        "model": path,
        "tokenizer": path,
        "skip_tokenizer_init": True,
        "max_model_len": MAX_MODEL_LEN,
        "tensor_parallel_size": case["tp"],
        "enable_prefix_caching": True,
        "mamba_cache_mode": case["mode"],
        "max_num_batched_tokens": BATCHED_TOKENS,
        "kv_cache_memory_bytes": case["budget"],
        "async_scheduling": False,
    }
    args = EngineArgs(**flags)
    args.create_model_config = lambda: copy.deepcopy(built)
    vc = args.create_engine_config()
    arch = vc.model_config.architectures[0]
    model_cls = w.model_class(vc.model_config)
    tp = case["tp"]

    def worker_specs(wvc):
        """One worker's layers and their specs (the worker's config: its own copy where TP > 1)."""
        shapes = model_cls.get_mamba_state_shape_from_config(wvc)
        dtypes = w.state_dtypes(model_cls, wvc)
        kinds = w.layer_kinds(arch, wvc.model_config.hf_config)
        layers = w.build_layers(wvc, arch, kinds, shapes, dtypes, "flashinfer")
        wvc.compilation_config.static_forward_context.update(layers)
        w.align_block_size(wvc)
        return w.layer_specs(wvc, layers)

    specs = [worker_specs(vc if tp == 1 else copy.deepcopy(vc))]
    specs += [specs[0]] * (tp - 1)  # every rank holds the same layers at the same shapes
    layouts = None
    if vv.since(w.version, "0.29.0"):
        from vllm.v1.attention.backends import utils as backend_utils

        layouts = [x.name for x in backend_utils.get_supported_kv_cache_layouts([w.backend])]
    budget = vc.cache_config.kv_cache_memory_bytes

    class Workers(Executor):
        """Stand-in for the executor's workers: what each answers the engine core."""

        def _init_executor(self) -> None:
            pass

        def collective_rpc(self, method, timeout=None, args=(), kwargs=None, non_block=False, **_):
            name = method if isinstance(method, str) else getattr(method, "__name__", str(method))
            if name == "get_kv_cache_spec":
                out = specs
            elif name == "determine_available_memory":  # gpu_worker: --kv-cache-memory-bytes skips profiling
                out = [budget] * tp
            elif name == "get_supported_kv_cache_layouts":
                out = [layouts] * tp
            elif name in (
                "initialize_from_config",
                "compile_or_warm_up_model",
                "set_kv_cache_layout",
                "update_max_model_len",
                "initialize_cache",
            ):
                out = []
            else:
                raise NotImplementedError(f"the stand-in workers have no answer to {name!r}")
            if non_block:
                f = concurrent.futures.Future()
                f.set_result(out)
                return f
            return out

        def check_health(self) -> None:
            pass

        def shutdown(self) -> None:
            pass

        def get_supported_kv_cache_layouts(self):
            return [layouts] * tp

        def set_kv_cache_layout(self, *a, **k) -> None:
            pass

    # freeze_gc_heap and the env cache are process-wide switches a real engine core flips once; harmless here
    core = EngineCore(vc, Workers, log_stats=True)
    return core, vc


def run_case(w, vv, case: dict) -> dict:
    from vllm.sampling_params import SamplingParams
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request

    try:
        core, vc = engine_core(w, vv, case)
    except ValueError as exc:  # the start refused (e.g. check_enough_kv_cache_memory): vLLM's answer, compared
        return {"refused": f"{type(exc).__name__}: {str(exc).splitlines()[0][:400]}"}
    sched = core.scheduler
    groups = sched.kv_cache_config.kv_cache_groups
    blocks = sorted({g.kv_cache_spec.block_size for g in groups})
    info = {
        "mode": vc.cache_config.mamba_cache_mode,
        "block": vc.cache_config.block_size,
        "group_blocks": blocks,
        "num_blocks": sched.kv_cache_config.num_blocks,
        "groups": "".join("m" if type(g.kv_cache_spec).__name__ == "MambaSpec" else "a" for g in groups),
        "retention": getattr(vc.cache_config, "prefix_cache_retention_interval", None),
        "scheduler": type(sched).__name__,
    }
    hasher = core.request_block_hasher
    reqs = case["requests"]
    conc = case["concurrency"]
    reused = [-1] * len(reqs)
    #: per request, the tokens each step scheduled for it until its prompt was computed (where states land)
    chunks: list[list[int]] = [[] for _ in reqs]
    nxt = 0
    in_flight: set[str] = set()
    stalled = 0
    steps = 0
    while nxt < len(reqs) or in_flight:
        while nxt < len(reqs) and len(in_flight) < conc:
            rq = reqs[nxt]
            out = rq["output"] or [0]
            req = Request(
                request_id=str(nxt),
                prompt_token_ids=rq["prompt"],
                pooling_params=None,
                block_hasher=hasher,
                sampling_params=SamplingParams(max_tokens=len(out), ignore_eos=True),
            )
            sched.add_request(req)
            in_flight.add(str(nxt))
            nxt += 1
        so = sched.schedule()
        steps += 1
        if not so.num_scheduled_tokens:
            stalled += 1
            if stalled > 3:
                return {
                    "error": f"the scheduler scheduled nothing with {sorted(in_flight, key=int)} in flight",
                    **info,
                    "reused": reused,
                }
            continue
        stalled = 0
        for nr in so.scheduled_new_reqs:
            i = int(nr.req_id)
            if reused[i] < 0:
                reused[i] = nr.num_computed_tokens
        ids = list(so.num_scheduled_tokens)
        for j in ids:
            q = sched.requests[j]
            if q.num_computed_tokens - so.num_scheduled_tokens[j] < q.num_prompt_tokens:
                chunks[int(j)].append(so.num_scheduled_tokens[j])
        sampled = []
        for j in ids:
            q = sched.requests[j]
            out = reqs[int(j)]["output"] or [0]
            sampled.append([out[len(q.output_token_ids)]] if q.num_computed_tokens >= q.num_tokens else [])
        sched.update_from_output(
            so,
            ModelRunnerOutput(
                req_ids=ids, req_id_to_index={x: k for k, x in enumerate(ids)}, sampled_token_ids=sampled
            ),
        )
        in_flight = {j for j in in_flight if j in sched.requests}
    return {"refused": None, **info, "reused": reused, "chunks": chunks, "steps": steps}


# ==================================================================================================
# Driver
# ==================================================================================================


def modes(version: str, model: str, every: bool) -> tuple[str, ...]:
    """The release's Mamba cache modes with prefix caching on (vllm/config/cache.py ``MambaCacheMode``: `all`
    and `align` from 0.15.0, `all` gone in 0.32.0). Qwen3-Next's `all` runs as `align` on every release here
    (its GDN layers keep no state per block: the config hook switches the mode, and hybridplan does the same;
    checked on 0.23.0 and 0.24.0, 2 December 2026), so it runs in `align` only unless ``every``."""
    vv = _vllm_script()
    if vv.since(version, "0.32.0") or (model.startswith("qwen3-next") and not every):
        return ("align",)
    return ("align", "all")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--releases", nargs="+", metavar="X.Y.Z")
    ap.add_argument("--cases", nargs="+", metavar="TRACE", help="only these traces")
    ap.add_argument("--models", nargs="+", metavar="NAME", help="only these models")
    ap.add_argument("--concurrency", nargs="+", type=int, default=list(CONCURRENCY))
    ap.add_argument("--budgets", nargs="+", default=["roomy", "tight"])
    ap.add_argument("--every-mode", action="store_true", help="Qwen3-Next in `all` too (vLLM runs it as align)")
    ap.add_argument(
        "--quick",
        action="store_true",
        help=f"releases {' '.join(QUICK_RELEASES)}, two synthetic traces and the first "
        f"{QUICK_MOONCAKE} Mooncake requests",
    )
    ap.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "hybridplan-validation")
    ap.add_argument("--log", type=Path, help="append progress lines to this file too")
    ap.add_argument("--verbose", action="store_true", help="a line per case")
    ap.add_argument("--json", type=Path, metavar="FILE", help="write the whole report here as JSON")
    ap.add_argument("--worker", nargs=5, metavar=("VERSION", "SRC", "CONFIGS", "CASES", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    if args.worker:
        version, src, configs, cases_file, out_file = args.worker
        return worker_main(version, Path(src), Path(configs), Path(cases_file), Path(out_file))
    sys.path.insert(0, str(ROOT))
    vv = _vllm_script()
    cache = args.cache_dir.expanduser().resolve()
    releases = args.releases or list(QUICK_RELEASES if args.quick else RELEASES)
    models = [(m, tp) for m, tp in MODELS if not args.models or m in args.models]

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)
        if args.log:
            with args.log.open("a") as f:
                f.write(time.strftime("%H:%M:%S ") + line + "\n")

    report: dict = {
        "compared": {},
        "mismatches": [],
        "failed": [],
        "errors": [],
        "cases": [],
        "refused": [],
        "stand_ins": list(STAND_INS),
        "flags": {
            "max_model_len": MAX_MODEL_LEN,
            "max_num_batched_tokens": BATCHED_TOKENS,
            "budgets": BUDGETS,
            "max_output": MAX_OUTPUT,
        },
    }
    with tempfile.TemporaryDirectory(prefix="hybridplan-vreplay-") as tmp:
        tmp = Path(tmp)
        traces = write_traces(tmp, args.quick)
        if args.cases:
            traces = {k: v for k, v in traces.items() if k in args.cases}
        tokens = {name: token_ids(path) for name, path in traces.items()}
        config_root = tmp / "models"
        for name, config in vv.shipped_configs().items():
            if any(name == m for m, _ in models):
                (config_root / name).mkdir(parents=True)
                (config_root / name / "config.json").write_text(json.dumps(config))
        for version in releases:
            start = time.time()
            src = vv.unpack_release(version, cache)
            todo, ours = [], {}
            for model, tp in models:
                for mode in modes(version, model, args.every_mode):
                    for budget in args.budgets:
                        for conc in args.concurrency:
                            for trace, path in traces.items():
                                name = f"{model} tp{tp} {mode} {budget} c{conc} {trace}"
                                ours[name] = hybridplan_side(
                                    version, model, tp, mode, path, BUDGETS[model][budget], conc
                                )
                                todo.append(
                                    {
                                        "name": name,
                                        "model": model,
                                        "tp": tp,
                                        "mode": mode,
                                        "budget": BUDGETS[model][budget],
                                        "concurrency": conc,
                                        "requests": tokens[trace],
                                    }
                                )
            cases_file, out_file = tmp / f"cases-{version}.json", tmp / f"out-{version}.json"
            cases_file.write_text(json.dumps(todo))
            say(f"vLLM {version}: {len(todo)} cases (hybridplan's side done in {time.time() - start:.0f} s) ...")
            env = dict(os.environ)
            overlay = vv.transformers_overlay(version, cache) if os.environ.get("HP_OVERLAY") else None
            if overlay is not None:
                env["PYTHONPATH"] = os.pathsep.join([str(overlay), env.get("PYTHONPATH", "")])
            proc = subprocess.run(
                [
                    sys.executable,
                    str(Path(__file__).resolve()),
                    "--worker",
                    version,
                    str(src),
                    str(config_root),
                    str(cases_file),
                    str(out_file),
                ],
                cwd=tmp,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            if proc.returncode != 0 or not out_file.exists():
                say(proc.stdout[-6000:])
                report["failed"].append(version)
                continue
            n = bad = 0
            for res in json.loads(out_file.read_text())["results"]:
                mine = ours[res["name"]]
                if "error" in res:
                    report["errors"].append({"release": version, "case": res["name"], "error": res["error"]})
                    say(f"  script error {res['name']}: {res['error'][-800:]}")
                    continue
                if (res["refused"] is None) != (mine["refused"] is None):
                    report["mismatches"].append(
                        {
                            "release": version,
                            "case": res["name"],
                            "request": None,
                            "vllm": res["refused"] or "started",
                            "hybridplan": mine["refused"] or "started",
                        }
                    )
                    say(
                        f"  {res['name']}: vLLM {res['refused'] or 'started'}; hybridplan "
                        f"{mine['refused'] or 'started'}"
                    )
                    bad += 1
                    continue
                if res["refused"] is not None:  # both refused the start
                    report["refused"].append(
                        {"release": version, "case": res["name"], "vllm": res["refused"], "hybridplan": mine["refused"]}
                    )
                    n += 1
                    continue
                case = {
                    "release": version,
                    "case": res["name"],
                    "requests": len(res["reused"]),
                    "vllm_block": res["block"],
                    "vllm_num_blocks": res["num_blocks"],
                    "vllm_groups": res["groups"],
                    "vllm_mode": res["mode"],
                    "vllm_retention": res["retention"],
                    "hybridplan_block": mine["block"],
                    "hybridplan_num_blocks": mine["num_blocks"],
                    "vllm_reused_tokens": sum(max(x, 0) for x in res["reused"]),
                    "hybridplan_reused_tokens": sum(mine["reused"]),
                    "seconds": res["seconds"],
                }
                report["cases"].append(case)
                if args.verbose:
                    say(
                        f"  {res['name']}: vLLM {res['mode']} block {res['block']} × {res['num_blocks']} "
                        f"({res['groups']}), reused {case['vllm_reused_tokens']:,}; hybridplan block {mine['block']} "
                        f"× {mine['num_blocks']}, reused {case['hybridplan_reused_tokens']:,} [{res['seconds']} s]"
                    )
                diff = [i for i, (a, b) in enumerate(zip(res["reused"], mine["reused"])) if a != b]
                if len(res["reused"]) != len(mine["reused"]):
                    diff.append(min(len(res["reused"]), len(mine["reused"])))
                n += len(res["reused"])
                bad += len(diff)
                for i in diff:
                    report["mismatches"].append(
                        {
                            "release": version,
                            "case": res["name"],
                            "request": i,
                            "vllm": res["reused"][i] if i < len(res["reused"]) else None,
                            "hybridplan": mine["reused"][i] if i < len(mine["reused"]) else None,
                            "vllm_chunks": res["chunks"][i][:8] if i < len(res["chunks"]) else None,
                        }
                    )
                if diff:
                    say(
                        f"  {res['name']}: {len(diff)} of {len(res['reused'])} differ (first: request {diff[0]}); "
                        f"vLLM block {res['block']} × {res['num_blocks']}, hybridplan {mine['block']} × "
                        f"{mine['num_blocks']}"
                    )
            report["compared"][version] = n
            if args.json:  # after each release: a sweep cut short still leaves its figures
                args.json.write_text(json.dumps(report, indent=1))
            say(
                f"vLLM {version}: {n} requests compared, {bad} mismatches, "
                f"{sum(e['release'] == version for e in report['errors'])} script errors [{time.time() - start:.0f} s]"
            )
    total = sum(report["compared"].values())
    say(
        f"total: {total} requests compared, {len(report['mismatches'])} mismatches listed, "
        f"{len(report['errors'])} script errors"
        + (f", failed: {', '.join(report['failed'])}" if report["failed"] else "")
    )
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0 if not report["mismatches"] and not report["failed"] and not report["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
