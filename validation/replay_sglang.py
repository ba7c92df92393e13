"""Replay traces through SGLang's own Scheduler, run from the published wheels on a CPU, and through
`hybridplan replay --engine sglang`, and compare what every request reuses.

    python validation/replay_sglang.py [--releases 0.5.9 ... 0.5.23] [--models qwen3-next nemotron-h]
                                       [--strategies no_buffer extra_buffer] [--concurrency 1 8]
                                       [--traces NAME ...] [--overlap] [--quick] [--progress FILE] [--json]

Needs the validation environment of validation/README.md (/tmp/hp-validation, Python 3.11). SGLang is never
installed: each release's wheel (``/tmp/wheels/sglang-X/`` or the cache folder, else ``pip download``) is
unpacked without its tests and multimodal generator, and runs in its own subprocess with that folder first on
``sys.path``; this process runs hybridplan through its own command (``hybridplan.api.replay``, what
``hybridplan replay TRACE MODEL --engine sglang --concurrency N --json`` prints).

What runs as SGLang wrote it (paths under ``sglang/srt/``):

- ``ServerArgs`` from the command line the case stands for (``prepare_server_args``: ``--chunked-prefill-size``,
  ``--mamba-scheduler-strategy`` / ``--mamba-radix-cache-strategy``, ``--disable-overlap-schedule``,
  ``--max-total-tokens``, ``--max-mamba-cache-size``, ``--max-running-requests``, ``--page-size``, ``--tp-size``),
  published as ``run_scheduler_process`` publishes it;
- ``managers/scheduler.py`` ``Scheduler.__init__`` whole: the model config from the model's config.json, the
  parallel groups (gloo, one rank), the tree cache the release builds for a hybrid model
  (``mem_cache/kv_cache_builder.py`` / ``Scheduler.init_cache_with_memory_pool``: ``UnifiedRadixCache`` in
  0.5.23, with its compiled tree core; ``MambaRadixCache`` before), the schedule policy, chunked prefill;
- the pools it hands the cache: ``HybridReqToTokenPool`` with its ``MambaPool`` and a
  ``TokenToKVPoolAllocator`` (``mem_cache/memory_pool.py``, ``mem_cache/allocator.py``);
- the event loop's body, step by step: ``handle_generate_request``, ``get_next_batch_to_run`` (its
  ``PrefillAdder``, chunked requests, ``cache_unfinished_req``), ``run_batch``, ``process_batch_result``
  (``cache_unfinished_req`` / ``cache_finished_req``).

The reuse of a request is the ``prefix_len`` (``len(prefix_indices)`` before 0.5.10) it has when it first
enters a prefill batch, and SGLang's own ``cached_tokens`` is reported beside it.

Stand-ins (``STAND_INS``; the fields the Scheduler read from them are listed in the report):

- ``managers/tp_worker.py`` ``TpModelWorker``: builds no model. Its pools are the release's classes at the
  sizes hybridplan's start-up arithmetic gives for the case (the KV tokens and Mamba slots, which
  validation/sglang.py checks against SGLang's own sizing code), over tensors of one element per token and per
  state; its ``get_worker_info`` is TpModelWorker's own; ``forward_batch_generation`` returns the token the
  trace says each request generates next (one per request per step, no sampling);
- the KV cache object behind the allocator (the allocator only keeps indices), the attention backends and
  CUDA graphs (none), ``setproctitle`` and ``sgl_kernel`` (modules imported for names only);
- ``is_cuda()`` and ``_platform_supports_mamba_cache_extra_buffer()`` as ``ServerArgs`` (server_args.py,
  arg_groups/) reads them, and 0.5.19–0.5.21's ``get_platform().is_cuda`` in arg_groups/mamba_hook.py: True,
  as on the GPU host (``DEVICE_CHECKS``, ``_cuda_platform``: the checks that refuse extra_buffer off CUDA);
- the model runner's ``dcp_size`` (1: no decode context parallelism; 0.5.15 on read it) and its
  ``forward_stream`` (a CPU stream, as ``ModelRunner`` makes one on its device);
- 0.5.15's frozen flags: the Scheduler freezes the process's runtime context, so each later case starts from
  ``runtime_context.reset_context()``, as a new process would;
- ``transformers.AutoConfig.register`` with ``exist_ok``: transformers 5.19 ships a config (qwen3_asr) that
  0.5.12 on register themselves;
- ``torch.Tensor.pin_memory`` and ``torch.tensor(..., pin_memory=True)``: the tensor itself (page-locking is
  for a copy to a GPU);
- ``--max-running-requests`` (``MAX_RUNNING``): above the concurrency, so only the client limits what runs;
- one rank (``--tp-size 1``): the pools are already one TP rank's; the scheduler of rank 0 decides for all.

The overlap scheduler: by default every case runs ``event_loop_normal`` with ``--disable-overlap-schedule`` on
both sides. ``--overlap`` runs the extra_buffer cases under ``event_loop_overlap`` instead (SGLang's default
loop; no_buffer runs without it in every release), driven as its body is: the next batch scheduled and
launched (``run_batch`` on the overlap path, the release's ``FutureMap`` and streams on the CPU device), then
the last batch's result processed (``pop_and_process``, unless ``is_disable_overlap_for_batch``), then the
delayed sample; the loop's preamble (``enable_skip_finishing_decode``, 0.5.22 on) as the loop sets it. Not
driven: the loop's stream fence (``_apply_war_barrier``) and its idle self-checks.

The client is hybridplan's replay loop: at most N requests in flight (N the concurrency), the next one sent
once the oldest in flight has finished; a request SGLang aborts on arrival (a prompt of
``max_req_input_len`` tokens or more) is sent at once and takes no place, as hybridplan's loop refuses it
before it waits for one. Outputs are capped at ``MAX_OUTPUT`` tokens
(the same trace goes to both sides), token ids are the trace's blocks hashed into the vocabulary.

Exit status 0 when every request's reused tokens are equal, 1 otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RELEASES = (
    "0.5.9",
    "0.5.10",
    "0.5.11",
    "0.5.12",
    "0.5.13",
    "0.5.14",
    "0.5.15",
    "0.5.16",
    "0.5.17",
    "0.5.18",
    "0.5.19",
    "0.5.20",
    "0.5.21",
    "0.5.22",
    "0.5.23",
)
QUICK_RELEASES = ("0.5.9", "0.5.23")
MAX_OUTPUT = 8
MAX_RUNNING = 64
VOCAB = 100_000
#: model → (hybridplan's name, the config.json shipped under /work/shared/model_configs or tests/data, TP)
MODELS = {
    "qwen3-next": ("qwen3-next", "Qwen__Qwen3-Next-80B-A3B-Thinking.json", 4),
    "nemotron-h": ("nemotron-h", "nvidia__Nemotron-H-8B-Base-8K.from-python-dict.json", 1),
}
GPU = "h100"
STAND_INS = (
    "TpModelWorker: no model; its pools are the release's HybridReqToTokenPool/MambaPool and "
    "TokenToKVPoolAllocator at hybridplan's KV tokens and Mamba slots (one-element tensors); get_worker_info is "
    "TpModelWorker's; forward_batch_generation returns each request's next trace token",
    "the KV cache object behind the allocator; attention backends and CUDA graphs (none)",
    "setproctitle and sgl_kernel: modules imported for names only",
    "torch.Tensor.pin_memory, torch.tensor(pin_memory=True): the tensor itself",
    "transformers.AutoConfig.register(exist_ok=True): the release's own config over transformers 5.19's",
    "is_cuda() / _platform_supports_mamba_cache_extra_buffer() / arg_groups/mamba_hook.py's get_platform().is_cuda "
    "as ServerArgs reads them: True (extra_buffer's device check)",
    f"--max-running-requests {MAX_RUNNING}: above the concurrency, the client alone limits what runs",
    "the model runner's dcp_size 1 and a CPU forward_stream",
    "0.5.15: runtime_context.reset_context() before a case whose flags the last case's Scheduler froze",
)
STUB_MODULES = ("setproctitle", "sgl_kernel")


# ==================================================================================================
# traces, as token lists both sides read
# ==================================================================================================


def _token(key, off: int) -> int:
    h = hashlib.blake2b(repr((key, off)).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") % VOCAB


#: the synthetic traces (``hybridplan.replay.trace.Synthetic``'s fields; outputs at most MAX_OUTPUT)
SYNTHETIC = {
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
MOONCAKE = ROOT / "tests/data/traces/mooncake-conversation-300.jsonl"


def write_trace(name: str, tmp: Path) -> tuple[Path, list]:
    """The trace as a file `hybridplan replay` reads (a synthetic YAML; the Mooncake JSONL with its outputs
    capped) and as token ids for SGLang: hybridplan's own requests, each block of the trace hashed into the
    vocabulary (a turn's history holds the earlier reply, which the model stand-in generates)."""
    sys.path.insert(0, str(ROOT))
    from hybridplan.replay.trace import read

    if name in SYNTHETIC:
        path = tmp / f"{name}.yaml"
        path.write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in SYNTHETIC[name].items()))
    else:
        path = tmp / f"{name}.jsonl"
        lines = [json.loads(x) for x in MOONCAKE.read_text().splitlines() if x.strip()]
        path.write_text(
            "".join(
                json.dumps({**x, "output_length": min(x.get("output_length", 0), MAX_OUTPUT)}) + "\n" for x in lines
            )
        )
    out = []
    for r in read(path):
        full = r.with_output()
        toks = list(full.tokens) if full.tokens is not None else [_token(k, j) for k, n in full.runs for j in range(n)]
        out.append({"prompt": toks[: r.prompt_len], "output": toks[r.prompt_len : r.prompt_len + r.output_len]})
    return path, out


TRACES = (*SYNTHETIC, "mooncake-conversation-300")
QUICK_TRACES = ("shared-prefix", "conversation", "mooncake-conversation-300")


# ==================================================================================================
# hybridplan's side
# ==================================================================================================


def hybridplan_side(
    version: str, model: str, strategy: str, concurrency: int, trace_file: Path, overlap: bool = False
) -> dict:
    """`hybridplan replay TRACE MODEL --engine sglang ... --json`: the rules and each request's reuse."""
    sys.path.insert(0, str(ROOT))
    from hybridplan import api

    name, _, tp = MODELS[model]
    opts = {
        "engine": "sglang",
        "sglang_version": version,
        "radix": strategy,
        "tp": tp,
        "gpu_type": GPU,
        "concurrency": concurrency,
        "no_gap": True,
    }
    opts["no_overlap"] = not overlap  # --disable-overlap-schedule unless the case runs event_loop_overlap
    try:
        doc = api.replay(str(trace_file), name, **opts).to_dict()
    except api.PlanError as exc:
        return {"refused": str(exc)}
    row = next(r for r in doc["rows"] if r["engine"] == "sglang")
    label = row["label"]
    return {
        "rules": row["rules"],
        "label": label,
        "concurrency": doc["concurrency"],
        "reused": [r["reused"].get(label, 0) for r in doc["requests"]],
        "why": [r["why"].get(label) for r in doc["requests"]],
    }


# ==================================================================================================
# SGLang's side (a subprocess, the release's sources first on sys.path)
# ==================================================================================================


def _stub_finder(names):
    import importlib.abc
    import importlib.util
    import types

    class Meta(type):
        def __getattr__(cls, n):
            if n.startswith("__"):
                raise AttributeError(n)
            return Meta(n, (Anything,), {})

        def __getitem__(cls, k):
            return cls

    class Anything(metaclass=Meta):
        def __init__(self, *a, **k):
            pass

    class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in names:
                return importlib.util.spec_from_loader(name, self, is_package=True)
            return None

        def create_module(self, spec):
            m = types.ModuleType(spec.name)
            m.__path__ = []

            def attr(a):
                if a.startswith("__"):
                    raise AttributeError(a)
                return Meta(a, (Anything,), {})

            m.__getattr__ = attr
            return m

        def exec_module(self, m):
            pass

    return Finder()


class _Empty:
    """The logits output of a forward with no logprobs or hidden states asked for: every field None."""

    def __getattr__(self, n):
        if n.startswith("__"):
            raise AttributeError(n)
        return None


class _Nop:
    """A method of a stand-in: callable, falsy, a context manager."""

    def __call__(self, *a, **k):
        return None

    def __bool__(self):
        return False


def worker_main(version: str, src: Path, cases_file: Path, out_file: Path) -> int:
    os.environ.setdefault("SGLANG_DISABLE_REQUEST_LOGGING", "1")
    sys.path.insert(0, str(src))
    sys.meta_path.append(_stub_finder(STUB_MODULES))
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    import inspect
    from array import array

    import torch
    from transformers import AutoConfig

    register = AutoConfig.register
    # transformers 5.19 (the environment's) ships configs the older releases register themselves (qwen3_asr,
    # 0.5.12-0.5.2x): theirs replace it, as under the transformers they pin
    AutoConfig.register = staticmethod(
        lambda model_type, config, exist_ok=False: register(model_type, config, exist_ok=True)
    )

    import sglang.srt.managers.scheduler as S
    import sglang.srt.managers.tp_worker as tpw
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.managers.io_struct import TokenizedGenerateReqInput
    from sglang.srt.mem_cache import allocator as alloc_mod
    from sglang.srt.mem_cache import memory_pool as mp
    from sglang.srt.sampling.sampling_params import SamplingParams
    from sglang.srt.server_args import PortArgs, prepare_server_args

    try:
        from sglang.srt.managers.utils import GenerationBatchResult
    except ImportError:
        from sglang.srt.managers.scheduler import GenerationBatchResult
    real_worker = next(c for c in _subclasses(tpw) if c.__name__ == "TpModelWorker")
    torch.Tensor.pin_memory = lambda self, *a, **k: self  # no CUDA host to pin for (extra_buffer's decode)
    tensor = torch.tensor
    torch.tensor = lambda *a, pin_memory=False, **k: tensor(*a, **k)  # the same, as a keyword (0.5.10)
    read: set[str] = set()
    calls = {
        "prewarm_sampling",
        "init_attention_backends",
        "init_cuda_graphs",
        "get_pad_input_ids_func",
        "register_hicache_layer_transfer_counter",
    }

    class StandIn:
        _name = "x"

        def __init__(self, **kw):
            self.__dict__.update(kw)

        def __getattr__(self, n):
            if n.startswith("__"):
                raise AttributeError(n)
            read.add(f"{self._name}.{n}")
            return _Nop() if n in calls else None

    case_sizes: dict = {}
    outs: dict = {}
    sampled: dict = {}  # rid -> the index of the output token its last forward sampled

    def state_params():
        from sglang.srt.configs import mamba_utils as mu

        fields = (
            mu.Mamba2StateShape.__dataclass_fields__
            if hasattr(mu.Mamba2StateShape, "__dataclass_fields__")
            else inspect.signature(mu.Mamba2StateShape).parameters
        )
        kw = {"conv": [(1, 1)], "temporal": (1, 1, 1)}
        kw.update(
            {
                k: 1
                for k in fields
                if k not in kw and k not in ("disable_conv_window_dedup", "num_k_heads_per_tp", "conv_shard_groups")
            }
        )
        shape = mu.Mamba2StateShape(**kw)
        return mu.Mamba2CacheParams(layers=[0], shape=shape)

    class Worker(StandIn):
        _name = "tp_worker"

        def __init__(self, server_args, *a, **kw):
            self.server_args = server_args
            self.ps = kw.get("ps")  # the ParallelState the Scheduler hands its worker (0.5.1x)
            self.model_config = ModelConfig.from_server_args(server_args)
            from sglang.srt.distributed import parallel_state as ps
            from sglang.srt.model_executor import model_runner as mr

            if not ps.model_parallel_is_initialized():  # to 0.5.2x the model runner builds the groups
                mr.ModelRunner.init_torch_distributed(
                    StandIn(
                        _name="model_runner",
                        server_args=server_args,
                        device="cpu",
                        gpu_id=0,
                        tp_size=1,
                        tp_rank=0,
                        pp_size=1,
                        pp_rank=0,
                        dp_size=1,
                        moe_ep_size=1,
                        attn_cp_size=1,
                        moe_dp_size=1,
                        dcp_size=1,  # 0.5.15's decode context parallel group (model_runner.py)
                        dist_port=kw.get("nccl_port"),
                        is_draft_worker=False,
                        local_omp_cpuid=None,
                        model_config=self.model_config,
                        ps=kw.get("ps"),
                    )
                )  # ps: the ParallelState 0.5.1x hand over
            self.is_hybrid_swa = False
            self.random_seed, self.device = 0, "cpu"
            self.weight_load_time, self.graph_time_usage = 0.0, {}
            kv, slots, reqs = case_sizes["kv"], case_sizes["slots"], case_sizes["reqs"]
            sig = inspect.signature(mp.HybridReqToTokenPool.__init__).parameters
            pkw = {
                "size": reqs,
                "mamba_size": slots,
                "max_context_len": self.model_config.context_len + 4,
                "device": "cpu",
                "enable_memory_saver": False,
                "cache_params": state_params(),
                "enable_mamba_extra_buffer": case_sizes["extra_buffer"],
            }
            for k, v in (
                ("mamba_spec_state_size", reqs),
                ("mamba_layer_ids", [0]),
                ("enable_overlap_schedule", case_sizes["overlap"]),
                ("speculative_num_draft_tokens", None),
            ):
                if k in sig:
                    pkw[k] = v
            pool = mp.HybridReqToTokenPool(**{k: v for k, v in pkw.items() if k in sig})
            kvc = StandIn(_name="kvcache", size=kv)
            allocator = alloc_mod.TokenToKVPoolAllocator(kv, torch.float32, "cpu", kvc, False)
            self._pools = pool, allocator
            # what get_worker_info returns before 0.5.10 (TpModelWorker.__init__'s statements, 0.5.9 tp_worker.py)
            self.max_total_num_tokens, self.max_running_requests = kv, reqs
            self.max_prefill_tokens = server_args.max_prefill_tokens
            self.max_queued_requests = server_args.max_queued_requests
            self.max_req_len = min(self.model_config.context_len - 1, kv - 1)
            self.max_req_input_len = self.max_req_len - 5
            self.model_runner = StandIn(
                _name="model_runner",
                model_config=self.model_config,
                req_to_token_pool=pool,
                token_to_kv_pool_allocator=allocator,
                token_to_kv_pool=kvc,
                memory_pool_config=object(),
                effective_logical_max_total_num_tokens=kv,
                logical_max_total_num_tokens=kv,
                max_total_num_tokens=kv,
                max_token_pool_size=kv,
                effective_max_total_num_tokens=kv,
                dcp_size=1,  # 0.5.17's get_worker_info: the decode context parallel size (tp_worker.py)
                max_running_requests=reqs,
                device="cpu",
                forward_stream=torch.get_device_module("cpu").Stream(),  # ModelRunner's own, on its device
                mtp_draft_device_pools=None,
                mtp_draft_mamba_pools=None,
                hybrid_gdn_config=None,
                mamba2_config=None,
            )
            try:
                from sglang.srt.model_executor.model_runner_components.ngram_embedding_manager import (
                    NgramEmbeddingManager,
                )

                args = {
                    "model": None,
                    "model_config": self.model_config,
                    "req_to_token_pool": pool,
                    "max_running_requests": reqs,
                    "device": "cpu",
                    "server_args": server_args,
                }
                wanted = inspect.signature(NgramEmbeddingManager.from_model).parameters
                self.model_runner.ngram_embedding_manager = NgramEmbeddingManager.from_model(
                    **{k: v for k, v in args.items() if k in wanted}
                )
            except ImportError:
                pass
            # the model kind, from ModelRunner's own properties where the release has them (0.5.9's
            # init_cache_with_memory_pool reads hybrid_gdn_config / mamba2_config)
            for prop in ("hybrid_gdn_config", "mamba2_config", "mambaish_config"):
                fget = getattr(getattr(mr.ModelRunner, prop, None), "fget", None)
                if fget is not None:
                    setattr(self.model_runner, prop, fget(self.model_runner))

        def get_memory_pool(self):
            return self._pools

        def get_worker_info(self):
            return real_worker.get_worker_info(self)

        def forward_batch_generation(self, batch, *a, **k):
            # the next trace token of each request: counted here, as the overlap scheduler launches a forward
            # before the previous one's tokens reach the request (a prefill samples the first, each decode the
            # next; a chunk's token is dropped by SGLang)
            decode = batch.forward_mode.is_decode()
            ids = []
            for r in batch.reqs:
                j = sampled[r.rid] = sampled.get(r.rid, -1) + 1 if decode else len(r.output_ids)
                ids.append(outs[r.rid][min(j, len(outs[r.rid]) - 1)])
            res = GenerationBatchResult(next_token_ids=torch.tensor(ids, dtype=torch.int64), can_run_cuda_graph=False)
            if case_sizes["overlap"]:  # the overlap path copies the logits output to the host (copy_to_cpu)
                res.logits_output = _Empty()
            return res

    tpw.TpModelWorker = Worker
    S.TpModelWorker = Worker
    publish = _publisher(S)
    results = []
    doc = json.loads(cases_file.read_text())
    for case in doc["cases"]:
        started = time.perf_counter()
        case_sizes.update(case["sizes"])
        try:
            sa = _server_args(prepare_server_args, case["argv"])
            publish(sa)
            sched = _scheduler(S, sa, PortArgs.init_new(sa))
            sampled.clear()
            loop = _Loop(sched, outs, TokenizedGenerateReqInput, SamplingParams, array)
            reused, cached = loop.run(doc["traces"][case["trace"]], case["concurrency"])
        except Exception as exc:  # noqa: BLE001 - one case that will not run is reported; the others run
            import traceback

            results.append(
                {
                    "name": case["name"],
                    "error": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc()[-3000:],
                }
            )
            print(f"  {case['name']}: {results[-1]['error']}", file=sys.stderr, flush=True)
        else:
            results.append(
                {
                    "name": case["name"],
                    "reused": reused,
                    "cached": cached,
                    "tree": _tree_name(sched.tree_cache),
                    "steps": loop.steps,
                    "seconds": round(time.perf_counter() - started, 1),
                }
            )
            print(f"  {case['name']}: {sum(reused):,} reused [{results[-1]['seconds']} s]", file=sys.stderr, flush=True)
            _teardown(sched)
        out_file.write_text(json.dumps({"results": results, "stand_in_fields_read": sorted(read)}))
    return 0


def _tree_name(tree) -> str:
    """The tree cache's class, and its compiled tree core's where it has one (0.5.23: the wheel's
    ``mem_cache/rust_tree_core`` extension behind ``RustUnifiedTreeCore``)."""
    core = getattr(tree, "tree_core", None)
    binding = getattr(core, "_binding", None)
    name = type(tree).__name__
    if core is not None:
        name += (
            f" ({type(core).__name__}"
            + (f", {type(binding).__name__} from {type(binding).__module__}" if binding is not None else "")
            + ")"
        )
    return name


def _server_args(prepare, argv):
    """``prepare_server_args(argv)`` as on a CUDA host: extra_buffer's device checks (``DEVICE_CHECKS``) in
    server_args.py and arg_groups/ answer True (those modules' own names only; the scheduler's are left)."""
    import importlib

    try:
        importlib.import_module("sglang.srt.arg_groups.mamba_hook")
    except ImportError:
        pass
    mods = [
        m
        for name, m in list(sys.modules.items())
        if name == "sglang.srt.server_args" or name.startswith("sglang.srt.arg_groups")
    ]
    for m in mods:  # for the process: 0.5.2x resolve the arguments when first read, in the Scheduler
        for f in DEVICE_CHECKS:
            if f in m.__dict__:
                setattr(m, f, _true)
        # 0.5.19-0.5.21: validate_mamba_extra_buffer asks the platform itself (arg_groups/mamba_hook.py
        # ``get_platform().is_cuda or ...``): that module's platform answers is_cuda as a CUDA host's would
        if m.__name__.endswith("arg_groups.mamba_hook") and callable(m.__dict__.get("get_platform")):
            if not getattr(m.get_platform, "_hp_cuda", False):
                m.get_platform = _cuda_platform(m.get_platform)
    return prepare(argv)


def _cuda_platform(get):
    """``get_platform`` whose answer says ``is_cuda`` (the rest is the CPU host's)."""

    class View:
        def __init__(self, p):
            self._p = p

        def __getattr__(self, n):
            return True if n == "is_cuda" else getattr(self._p, n)

    def wrapped():
        return View(get())

    wrapped._hp_cuda = True
    return wrapped


def _true(*a, **k) -> bool:
    return True


#: the checks of a CUDA host that ``ServerArgs`` makes for extra_buffer: 0.5.9 ``is_cuda()``; 0.5.23
#: arg_groups/mamba_hook.py ``_platform_supports_mamba_cache_extra_buffer()``
DEVICE_CHECKS = ("is_cuda", "_platform_supports_mamba_cache_extra_buffer")


def _subclasses(mod):
    seen, todo = [], [c for c in vars(mod).values() if isinstance(c, type)]
    while todo:
        c = todo.pop()
        if c not in seen:
            seen.append(c)
            todo.extend(c.__subclasses__())
    return seen


def _publisher(S):
    """Publish the ServerArgs as ``run_scheduler_process`` does: ``runtime_context.publish`` (0.5.2x),
    ``set_global_server_args_for_scheduler`` before."""
    try:
        from sglang.srt.runtime_context import SpawnRanks, publish, spawn_world_rank

        def pub(sa):
            publish(
                sa,
                role="scheduler",
                ranks=SpawnRanks(
                    world_rank=spawn_world_rank(sa, tp_rank=0, pp_rank=0),
                    dp_rank=S.resolve_spawn_dp_rank(None),
                    gpu_id=0,
                ),
            )

        return pub
    except ImportError:
        from sglang.srt.server_args import set_global_server_args_for_scheduler

        try:  # 0.5.15: the Scheduler freezes the process's flags; a new process would start unfrozen
            from sglang.srt.runtime_context import reset_context
        except ImportError:
            return set_global_server_args_for_scheduler

        def fresh(sa):
            try:
                set_global_server_args_for_scheduler(sa)
            except RuntimeError as exc:
                if "freeze_flags" not in str(exc):
                    raise
                reset_context()  # runtime_context.py: drops the published server_args, a fresh unfrozen Flags
                set_global_server_args_for_scheduler(sa)

        return fresh


_PARALLEL_DONE = []


def _scheduler(S, sa, port_args):
    """``Scheduler(server_args, port_args, ...)``: the parallel groups are built on the first case only (a
    second build in one process is refused)."""
    boot = getattr(S, "bootstrap", None)
    if boot is not None and not hasattr(boot, "_hp_once"):
        first = boot.init_parallel_runtime

        def once(*a, **k):
            if _PARALLEL_DONE:
                return None
            _PARALLEL_DONE.append(1)
            return first(*a, **k)

        boot.init_parallel_runtime = once
        boot._hp_once = True
    params = __import__("inspect").signature(S.Scheduler.__init__).parameters
    if "gpu_id" in params:
        kw = {
            k: 0 for k in ("gpu_id", "tp_rank", "moe_ep_rank", "pp_rank", "attn_cp_rank", "moe_dp_rank") if k in params
        }
        return S.Scheduler(sa, port_args, dp_rank=None, **kw)
    return S.Scheduler(sa, port_args)


def _teardown(sched) -> None:
    for name in ("recv_from_tokenizer", "recv_from_rpc", "send_to_tokenizer", "send_to_detokenizer"):
        sock = getattr(sched, name, None)
        close = getattr(sock, "close", None)
        if callable(close):
            try:
                close()
            except Exception:  # noqa: BLE001 - a socket wrapper that cannot close is left to the process exit
                pass


class _Loop:
    """The body of ``event_loop_normal`` with the client of the module docstring in place of the socket."""

    def __init__(self, sched, outs, req_type, sp_type, array):
        self.s, self.outs, self.req_type, self.sp_type, self.array = sched, outs, req_type, sp_type, array
        self.hit: dict = {}
        self.reqs: dict = {}
        self.steps = 0

    def submit(self, i: int, r: dict) -> None:
        rid = f"r{i}"
        out = r["output"] or [0]
        self.outs[rid] = out
        sp = self.sp_type(max_new_tokens=len(out), ignore_eos=True)
        sp.normalize(None)
        fields = self.req_type.__dataclass_fields__ if hasattr(self.req_type, "__dataclass_fields__") else {}
        kw = dict(
            rid=rid,
            input_text=None,
            input_ids=self.array("q", r["prompt"]) if _wants_array(self.req_type) else list(r["prompt"]),
            mm_inputs=None,
            sampling_params=sp,
            return_logprob=False,
            logprob_start_len=-1,
            top_logprobs_num=0,
            token_ids_logprob=None,
            stream=False,
        )
        for k in ("input_embeds", "token_type_ids"):
            kw[k] = None
        if fields:
            kw = {k: v for k, v in kw.items() if k in fields}
        before = len(self.s.waiting_queue)
        self.s.handle_generate_request(self.req_type(**kw))
        if len(self.s.waiting_queue) > before:
            self.reqs[rid] = self.s.waiting_queue[-1]

    def finished(self, i: int) -> bool:
        req = self.reqs.get(f"r{i}")
        return req is None or req.finished()

    def _schedule(self):
        s = self.s
        if "running_batch" in __import__("inspect").signature(s.get_next_batch_to_run).parameters:
            plan = s.get_next_batch_to_run(running_batch=s.running_batch, last_batch=s.last_batch)
            s.running_batch = plan.running_batch
            batch = plan.batch_to_run
        else:
            batch = s.get_next_batch_to_run()
            s.cur_batch = batch
        if batch:
            self.steps += 1
            if batch.forward_mode.is_extend():
                for r in batch.reqs:
                    if r.rid not in self.hit:
                        self.hit[r.rid] = r.prefix_len if hasattr(r, "prefix_len") else len(r.prefix_indices)
        return batch

    def step(self) -> bool:
        if getattr(self.s, "enable_overlap", False):
            return self.step_overlap()
        s = self.s
        batch = self._schedule()
        if batch:
            result = s.run_batch(batch)
            s.process_batch_result(batch, result)
        s.last_batch = batch
        return bool(batch)

    def step_overlap(self) -> bool:
        """One pass of ``event_loop_overlap``'s body (0.5.9-0.5.23 managers/scheduler.py): the next batch is
        scheduled and launched before the last one's result is processed (``pop_and_process``), unless
        ``is_disable_overlap_for_batch`` says so; then the current batch's delayed sample. Left out: the
        loop's stream fence (``_apply_war_barrier``) and its idle self-checks."""
        import inspect
        from collections import deque

        s = self.s
        if not hasattr(s, "result_queue"):  # the loop's preamble
            s.result_queue = deque()
            if hasattr(s, "enable_skip_finishing_decode"):  # 0.5.22-0.5.23
                s.enable_skip_finishing_decode = True
        last = s.last_batch
        batch = self._schedule()
        if "last_batch" in inspect.signature(s.is_disable_overlap_for_batch).parameters:
            disable = s.is_disable_overlap_for_batch(batch, last_batch=last)
        else:
            disable = s.is_disable_overlap_for_batch(batch)
        processed = False
        if disable and s.result_queue:
            s.process_batch_result(*s.result_queue.popleft())
            processed = True
        result = None
        if batch:
            result = s.run_batch(batch)
            s.result_queue.append((batch.copy(), result))
        if last and not disable and s.result_queue and (s.result_queue[0][1] is not result):
            s.process_batch_result(*s.result_queue.popleft())
            processed = True
        if len(inspect.signature(s.launch_batch_sample_if_needed).parameters) >= 2:
            s.launch_batch_sample_if_needed(result, batch)
        else:
            s.launch_batch_sample_if_needed(result)
        s.last_batch = batch
        return bool(batch) or processed

    def run(self, requests: list, concurrency: int):
        """The client, run where the release runs its loop: under the overlap scheduler inside
        ``Scheduler.run_event_loop`` where that sets the schedule stream up (0.5.12-0.5.19: the stream, its
        CPU no-op synchronize, its stream context), the release's ``dispatch_event_loop`` calling the client."""
        s = self.s
        mod = sys.modules[type(s).__module__]
        if not (
            getattr(s, "enable_overlap", False)
            and not hasattr(s, "schedule_stream")
            and hasattr(s, "run_event_loop")
            and "dispatch_event_loop" in vars(mod)
        ):
            return self._run(requests, concurrency)
        out: list = []
        dispatch = mod.dispatch_event_loop
        mod.dispatch_event_loop = lambda sched: out.append(self._run(requests, concurrency))
        try:
            s.run_event_loop()
        finally:
            mod.dispatch_event_loop = dispatch
        return out[0]

    def _run(self, requests: list, concurrency: int):
        from collections import deque

        n, sent = len(requests), 0
        idle = 0
        flight: deque[int] = deque()  # the requests SGLang took, oldest first (one it aborts takes no place)
        while True:
            while sent < n:
                if len(requests[sent]["prompt"]) >= self.s.max_req_input_len:
                    self.submit(sent, requests[sent])  # aborted on arrival: sent at once, it takes no place
                    sent += 1
                    continue
                if len(flight) >= concurrency:
                    if not self.finished(flight[0]):
                        break
                    flight.popleft()
                    continue
                self.submit(sent, requests[sent])
                if f"r{sent}" in self.reqs:
                    flight.append(sent)
                sent += 1
            if self.step():
                idle = 0
                continue
            if sent >= n and all(self.finished(i) for i in range(n)):
                break
            idle += 1
            if idle > 3:
                raise RuntimeError(f"the scheduler is idle with requests unfinished (sent {sent} of {n})")
        reused = [self.hit.get(f"r{i}", -1) for i in range(n)]
        cached = [getattr(self.reqs.get(f"r{i}"), "cached_tokens", -1) for i in range(n)]
        return reused, cached


def _wants_array(req_type) -> bool:
    ann = getattr(req_type, "__annotations__", {}).get("input_ids", "")
    return "array" in str(ann)


# ==================================================================================================
# Driver
# ==================================================================================================


def unpack(version: str, cache: Path) -> Path:
    """The release's ``sglang/`` package (without its tests and multimodal generator) under the cache folder."""
    dest = cache / f"sglang-{version}-scheduler"
    if (dest / "sglang/srt/managers/scheduler.py").is_file():
        return dest
    wheels = (
        sorted(Path(f"/tmp/wheels/sglang-{version}").glob("sglang-*.whl"))
        + sorted(cache.glob(f"sglang-{version}-*.whl"))
        + sorted((cache / "wheels").glob(f"sglang-{version}-*.whl"))
    )
    if not wheels:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", f"sglang=={version}", "-d", str(cache)],
            check=True,
        )
        wheels = sorted(cache.glob(f"sglang-{version}-*.whl"))
    with zipfile.ZipFile(wheels[0]) as zf:
        names = [
            n
            for n in zf.namelist()
            if n.startswith("sglang/") and not n.startswith(("sglang/test/", "sglang/multimodal_gen/"))
        ]
        zf.extractall(dest, names)
    return dest


def model_dir(model: str, tmp: Path) -> Path:
    """A folder holding the model's config.json (all ModelConfig reads)."""
    d = tmp / f"model-{model}"
    d.mkdir(exist_ok=True)
    cfg = MODELS[model][1]
    for base in (Path("/work/shared/model_configs"), ROOT / "tests/data/model_configs", ROOT / "tests/data/configs"):
        if (base / cfg).is_file():
            (d / "config.json").write_text((base / cfg).read_text())
            return d
    raise SystemExit(f"no config.json for {model} ({cfg})")


def argv_for(
    version: str, src: Path, model_path: Path, strategy: str, rules: dict, tp: int, overlap: bool = False
) -> list[str]:
    text = (
        "".join(p.read_text() for p in (src / "sglang/srt").glob("arg_groups/**/*.py"))
        + (src / "sglang/srt/server_args.py").read_text()
    )
    flag = "--mamba-radix-cache-strategy" if "--mamba-radix-cache-strategy" in text else "--mamba-scheduler-strategy"
    argv = [
        "--model-path",
        str(model_path),
        "--skip-tokenizer-init",
        "--device",
        "cpu",
        "--load-format",
        "dummy",
        "--chunked-prefill-size",
        str(rules["chunked_prefill_size"]),
        flag,
        strategy,
        "--max-total-tokens",
        str(rules["kv_pool_tokens"]),
        "--max-mamba-cache-size",
        str(rules["mamba_pool_slots"]),
        "--max-running-requests",
        str(MAX_RUNNING),
    ]  # one rank: the pools are already the TP rank's
    if not overlap:
        argv.append("--disable-overlap-schedule")
    return argv


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--releases", nargs="*", metavar="X.Y.Z")
    ap.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--strategies", nargs="*", default=["no_buffer", "extra_buffer"])
    ap.add_argument("--concurrency", nargs="*", type=int, default=[1, 8])
    ap.add_argument("--traces", nargs="*", metavar="TRACE")
    ap.add_argument(
        "--overlap",
        action="store_true",
        help="run extra_buffer under the overlap scheduler (event_loop_overlap, SGLang's default) on both sides; "
        "no_buffer cases are left out (SGLang runs no_buffer without it)",
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help=f"releases {', '.join(QUICK_RELEASES)} and traces {', '.join(QUICK_TRACES)} only",
    )
    ap.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "hybridplan-validation")
    ap.add_argument("--progress", type=Path, help="append one line per release and case to this file")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", type=Path, help="write the JSON report here after each release")
    ap.add_argument("--worker", nargs=4, metavar=("VERSION", "SRC", "CASES", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    if args.worker:
        version, src, cases_file, out_file = args.worker
        return worker_main(version, Path(src), Path(cases_file), Path(out_file))
    releases = args.releases or list(QUICK_RELEASES if args.quick else RELEASES)
    traces = args.traces or list(QUICK_TRACES if args.quick else TRACES)
    cache = args.cache_dir.expanduser().resolve()
    cache.mkdir(parents=True, exist_ok=True)
    report: dict = {
        "compared": {},
        "mismatches": [],
        "failed": {},
        "cases": {},
        "refused": {},
        "stand_ins": list(STAND_INS),
        "max_output": MAX_OUTPUT,
    }

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)
        if args.progress:
            with args.progress.open("a") as fh:
                fh.write(time.strftime("%H:%M:%S ") + line + "\n")

    with tempfile.TemporaryDirectory(prefix="hybridplan-sglang-replay-") as tmp_name:
        tmp = Path(tmp_name)
        files, reqs = {}, {}
        for t in traces:
            files[t], reqs[t] = write_trace(t, tmp)
        for version in releases:
            start = time.time()
            src = unpack(version, cache)
            todo, ours = [], {}
            for model in args.models:
                mdir = model_dir(model, tmp)
                for strategy in args.strategies:
                    if args.overlap and strategy == "no_buffer":
                        continue
                    for t in traces:
                        for c in args.concurrency:
                            name = f"{model} {strategy} {t} c{c}" + (" overlap" if args.overlap else "")
                            side = hybridplan_side(version, model, strategy, c, files[t], args.overlap)
                            if "refused" in side:
                                report["refused"][f"{version} {name}"] = side["refused"]
                                continue
                            ours[name] = side
                            r = side["rules"]
                            todo.append(
                                {
                                    "name": name,
                                    "concurrency": c,
                                    "trace": t,
                                    "argv": argv_for(
                                        version, src, mdir, r["strategy"], r, MODELS[model][2], args.overlap
                                    ),
                                    "sizes": {
                                        "kv": r["kv_pool_tokens"],
                                        "slots": r["mamba_pool_slots"],
                                        "reqs": MAX_RUNNING,
                                        "extra_buffer": r["strategy"] != "no_buffer",
                                        "overlap": args.overlap,
                                    },
                                }
                            )
            cases_file, out_file = tmp / f"cases-{version}.json", tmp / f"out-{version}.json"
            used = {c["trace"] for c in todo}
            cases_file.write_text(json.dumps({"cases": todo, "traces": {t: reqs[t] for t in used}}))
            log(f"SGLang {version}: {len(todo)} cases ...")
            proc = subprocess.run(
                [
                    sys.executable,
                    str(Path(__file__).resolve()),
                    "--worker",
                    version,
                    str(src),
                    str(cases_file),
                    str(out_file),
                ],
                cwd=tmp,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            if not out_file.exists():
                tail = proc.stdout[-4000:]
                report["failed"][version] = tail
                log(f"SGLang {version}: failed\n{tail}")
                continue
            out = json.loads(out_file.read_text())
            n = bad = 0
            for res in out["results"]:
                mine = ours[res["name"]]
                if "error" in res:
                    report["failed"][f"{version} {res['name']}"] = res["traceback"]
                    continue
                report["cases"][f"{version} {res['name']}"] = {
                    "requests": len(res["reused"]),
                    "tree": res["tree"],
                    "steps": res["steps"],
                    "sglang_reused_tokens": sum(max(x, 0) for x in res["reused"]),
                    "sglang_cached_tokens": sum(max(x, 0) for x in res["cached"]),
                    "hybridplan_reused_tokens": sum(mine["reused"]),
                }
                for i, (a, b) in enumerate(zip(res["reused"], mine["reused"])):
                    n += 1
                    # -1: SGLang never scheduled it (handle_generate_request aborts a prompt too long for the
                    # context), which hybridplan lists as refused
                    if a != b and not (a == -1 and mine["why"][i] == "refused"):
                        bad += 1
                        report["mismatches"].append(
                            {
                                "release": version,
                                "case": res["name"],
                                "request": i,
                                "sglang": a,
                                "hybridplan": b,
                                "why": mine["why"][i],
                            }
                        )
            if proc.returncode != 0:
                report["failed"][version] = proc.stdout[-4000:]
                log(f"SGLang {version}: the worker stopped\n{proc.stdout[-4000:]}")
            report["compared"][version] = n
            report.setdefault("stand_in_fields_read", {})[version] = out["stand_in_fields_read"]
            log(f"SGLang {version}: {n} requests compared, {bad} mismatches [{time.time() - start:.0f} s]")
            if args.out:
                args.out.write_text(json.dumps(report, indent=1))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for k, c in report["cases"].items():
            print(
                f"{k}: {c['requests']} requests ({c['tree']}), reused {c['sglang_reused_tokens']:,} (SGLang) / "
                f"{c['hybridplan_reused_tokens']:,} (hybridplan)"
            )
        total = sum(report["compared"].values())
        print(
            f"total: {total} requests compared, {len(report['mismatches'])} mismatches"
            + (f", failed: {', '.join(report['failed'])}" if report["failed"] else "")
        )
        for m in report["mismatches"][:30]:
            print("  ", m)
    return 0 if not report["mismatches"] and not report["failed"] else 1


if __name__ == "__main__":
    sys.exit(main())
