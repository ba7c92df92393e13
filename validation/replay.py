"""Replay the same traces through hybridplan's prefix-cache policy and through vLLM's own Scheduler and
KVCacheManager, run from the published wheels on a CPU, and compare what every request reuses.

    python validation/replay.py [--releases 0.23.0 0.24.0 0.26.0 0.29.0 0.33.0] [--cases NAME ...]
                                [--cache-dir ~/.cache/hybridplan-validation] [--json]

Needs the validation environment of validation/README.md (/tmp/hp-validation). vLLM is never installed: each
release's wheel is unpacked (``unpack_release`` of validation/vllm.py) and runs in its own subprocess with that
folder first on ``sys.path``; this process runs hybridplan (``hybridplan_side``, the only place that calls it).

What runs as vLLM wrote it: ``vllm.v1.core.sched.scheduler.Scheduler`` with its ``KVCacheManager``,
``HybridKVCacheCoordinator``, ``FullAttentionManager``, ``MambaManager`` and ``BlockPool``; the block hashing
of ``get_request_block_hasher``; ``CacheConfig`` and ``SchedulerConfig`` as a start builds them
(``--enable-prefix-caching``, ``--mamba-cache-mode``, ``--max-num-batched-tokens``, the retention interval, and
``VLLM_PREFIX_CACHE_RETENTION_INTERVAL`` where the release reads that). One request runs at a time, as
`replay`'s default: added, scheduled step by step until it finishes, then the next.

Stand-ins (see ``STAND_INS``): the KV cache config the engine core would hand the scheduler is built from
hybridplan's figures (the block, the block count at the budget, the number of attention and Mamba groups,
which validation/vllm.py checks against vLLM's own sizing code), with one-element page shapes since no tensor is
allocated; the model config is a namespace holding the fields the scheduler reads (max_model_len and no
multimodal, mrope or encoder-decoder features); the device config says CPU; the model runner is replaced by
its output: one sampled token per finished prefill or decode step, the token the trace says the request
generates. Outputs are capped at ``MAX_OUTPUT`` tokens to keep the step count small (the same trace goes to
both sides).

Exit status 0 when every request's reused tokens are equal, 1 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from msgspec.structs import replace

ROOT = Path(__file__).resolve().parents[1]
GiB = 1 << 30
#: vLLM's half runs in validation/replay_vllm.py (the engine's own start path, not hybridplan's rules); this file's
#: vLLM half is kept for --releases given by hand only
RELEASES: tuple[str, ...] = ()
MAX_OUTPUT = 8
MOONCAKE_REQUESTS = 120
STAND_INS = (
    "KVCacheConfig from hybridplan's block, block count and group counts (page shapes of one element)",
    "model config: a namespace with max_model_len, skip_tokenizer_init and no multimodal/mrope/encoder features",
    "DeviceConfig(device='cpu')",
    "model runner: one sampled token per step that completes the prompt or a decode step",
)


# ==================================================================================================
# hybridplan's side
# ==================================================================================================


def traces() -> dict:
    """name → (a factory of requests, the model, max_model_len)."""
    sys.path.insert(0, str(ROOT))
    from hybridplan.replay.trace import Synthetic, mooncake

    def capped(reqs):
        for r in reqs:
            yield replace(r, output_len=min(r.output_len, MAX_OUTPUT))

    def moon():
        for i, r in enumerate(capped(mooncake(ROOT / "tests/data/traces/mooncake-conversation-300.jsonl"))):
            if i >= MOONCAKE_REQUESTS:
                return
            yield r

    return {
        "shared-prefix": (lambda: capped(Synthetic(shared=3000, users=8, private=400, output=4).requests()), 32768),
        "shared-prefix-groups": (
            lambda: capped(
                Synthetic(shared=1200, users=8, private=300, output=4, group_size=4, group_shared=2500).requests()
            ),
            32768,
        ),
        "vllm-45238-1500-700": (
            lambda: capped(Synthetic(shared=1500, users=16, private=700, output=1).requests()),
            32768,
        ),
        "vllm-45238-1600-500": (
            lambda: capped(Synthetic(shared=1600, users=16, private=500, output=1).requests()),
            32768,
        ),
        "conversation": (
            lambda: capped(
                Synthetic(shared=1000, users=3, turns=3, private=700, output=8, order="round-robin").requests()
            ),
            32768,
        ),
        "revisited-documents": (
            lambda: capped(
                Synthetic(
                    shared=0,
                    users=6,
                    turns=3,
                    private=200,
                    output=2,
                    group_size=1,
                    group_shared=2000,
                    history=False,
                    order="round-robin",
                ).requests()
            ),
            32768,
        ),
        "mooncake-conversation": (moon, 131072),
        # `prefix`'s trace (hybridplan/reports/prefix.py): three requests, a shared prefix, one output token
        "prefix-4000-200": (lambda: Synthetic(shared=4000, users=3, private=200, output=1).requests(), 32768),
        "prefix-10000-5000": (lambda: Synthetic(shared=10000, users=3, private=5000, output=1).requests(), 32768),
    }


#: (model, mode, release gate) pairs run on every trace
MODELS = (("qwen3.5-4b", "align"), ("nemotron-h-8b", "all"), ("nemotron-h-8b", "align"))


def releases_modes(version: str, model: str, mode: str) -> bool:
    from hybridplan.engines.vllm.releases import release

    return mode in release(version).modes_for(
        __import__("hybridplan.loader", fromlist=["load_model"]).load_model(model)
    )


def hybridplan_side(version: str, model: str, mode: str, trace: str, budget: str) -> dict:
    """hybridplan's rules and per-request reuse for one case; the requests as token ids for vLLM."""
    from hybridplan.engines.vllm import prefix_cache as vpc
    from hybridplan.engines.vllm.releases import release
    from hybridplan.engines.vllm.settings import VllmSettings
    from hybridplan.loader import load_model
    from hybridplan.replay.loop import Policy, replay
    from hybridplan.replay.settings import ReplaySettings
    from hybridplan.scenario import Budget, Scenario

    factory, ctx = traces()[trace]
    sc = Scenario(
        load_model(model), ctx=ctx, vllm=VllmSettings(release=release(version)), budget=Budget(kv_budget=40 * GiB)
    )
    rules = vpc.rules(sc, ReplaySettings(), mode, 40 * GiB)
    if budget == "evicting":  # room for the largest request and a little more: the cache turns over
        biggest = max(vpc.Cache(rules).blocks_needed(r) for r in factory())
        rules = replace(rules, num_blocks=biggest + 2 * (rules.attn_groups + rules.mamba_groups))
    runs, _ = replay([Policy(rules.label, vpc.Cache(rules), rules.block, rules.max_model_len)], factory())
    ids: dict = {}

    def token(key, off: int) -> int:
        return ids.setdefault(key, len(ids)) * (1 << 20) + off

    def tokens(prompt) -> list[int]:
        if prompt.tokens is not None:
            return list(prompt.tokens)
        return [token(k, j) for k, n in prompt.runs for j in range(n)]

    reqs = []
    for r in factory():
        full = tokens(r.with_output())
        reqs.append({"prompt": full[: r.prompt_len], "output": full[r.prompt_len : r.prompt_len + r.output_len]})
    from hybridplan.engines.vllm.blocks import recurrent_pages
    from hybridplan.engines.vllm.dtypes import footprint

    fp = footprint(sc)
    extra = (
        max((recurrent_pages(sc, g.kind, mode, rules.block) for g in fp.state), default=2) - 2 if mode == "align" else 0
    )
    return {
        "rules": {
            "block": rules.block,
            "num_blocks": rules.num_blocks,
            "attn_groups": rules.attn_groups,
            "mamba_groups": rules.mamba_groups,
            "mode": mode,
            "chunk": rules.chunk,
            "max_model_len": ctx,
            "checkpoint_blocks": max(extra, 0),
            "retention": rules.retention,
            "checkpoint_align": rules.checkpoint_align,
            "group_order": list(rules.group_order),
        },
        "requests": reqs,
        "reused": [o.reused for o in runs[rules.label].outcomes],
    }


# ==================================================================================================
# vLLM's side (runs in a subprocess, with the release's sources first on sys.path)
# ==================================================================================================


def worker_main(version: str, src: Path, cases_file: Path, out_file: Path) -> int:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["VLLM_CACHE_ROOT"] = str(src / ".vllm-cache")
    sys.path.insert(0, str(src))
    import hashlib
    import inspect
    import logging
    import pickle
    import types

    import torch

    logging.getLogger("vllm").setLevel(logging.ERROR)
    from vllm.config import CacheConfig, DeviceConfig, SchedulerConfig, VllmConfig
    from vllm.sampling_params import SamplingParams
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, MambaSpec
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request
    from vllm.v1.structured_output import StructuredOutputManager

    class ModelStandIn(types.SimpleNamespace):
        """The fields the scheduler reads; any other reads as None (recorded)."""

        read: set = set()

        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            ModelStandIn.read.add(name)
            return None

    def sha(obj) -> bytes:
        return hashlib.sha256(pickle.dumps(obj)).digest()

    init_none_hash(sha)
    results = []
    for case in json.loads(cases_file.read_text()):
        r = case["rules"]
        block, n = r["block"], r["num_blocks"]
        retention = r["retention"]
        if retention is not None and "prefix_cache_retention_interval" not in inspect.signature(CacheConfig).parameters:
            os.environ["VLLM_PREFIX_CACHE_RETENTION_INTERVAL"] = str(retention)
        else:
            os.environ.pop("VLLM_PREFIX_CACHE_RETENTION_INTERVAL", None)
        schc = SchedulerConfig(
            max_model_len=r["max_model_len"],
            is_encoder_decoder=False,
            max_num_seqs=16,
            max_num_batched_tokens=r["chunk"],
            enable_chunked_prefill=True,
            async_scheduling=False,
        )
        kw = {"block_size": block, "enable_prefix_caching": True, "mamba_cache_mode": r["mode"]}
        if "prefix_cache_retention_interval" in inspect.signature(CacheConfig).parameters:
            kw["prefix_cache_retention_interval"] = retention
        cc = CacheConfig(**kw)
        cc.num_gpu_blocks = n
        vc = VllmConfig(scheduler_config=schc, cache_config=cc, device_config=DeviceConfig(device="cpu"))
        object.__setattr__(
            vc,
            "model_config",
            ModelStandIn(
                skip_tokenizer_init=True,
                uses_mrope=False,
                uses_xdrope=False,
                is_encoder_decoder=False,
                max_model_len=r["max_model_len"],
                is_diffusion=False,
                enable_return_routed_experts=False,
                return_sampling_mask=False,
                is_hybrid=True,
                is_multimodal_model=False,
                runner_type="generate",
                architectures=[],
            ),
        )
        mspec = {"block_size": block, "shapes": ((1,),), "dtypes": (torch.float32,), "mamba_cache_mode": r["mode"]}
        if "num_prefill_checkpoint_blocks" in MambaSpec.__dataclass_fields__:
            mspec["num_prefill_checkpoint_blocks"] = r["checkpoint_blocks"]
            if r["checkpoint_align"] is not None and "prefill_checkpoint_alignment" in MambaSpec.__dataclass_fields__:
                # as the layers' get_kv_cache_spec set it (mamba_mixer2.py 1, from 0.32.0; qwen_gdn_linear_attn.py
                # the prefix-cache grid for FlashInfer, 0.33.0): the scheduler then takes the prompt's checkpoint
                # inside its last chunk instead of splitting the chunk there (hybridplan's Rules.checkpoint_align)
                mspec["prefill_checkpoint_alignment"] = r["checkpoint_align"]
        groups = [
            KVCacheGroupSpec([f"mamba{i}"], MambaSpec(**mspec))
            if kind == "m"
            else KVCacheGroupSpec(
                [f"attn{i}"], FullAttentionSpec(block_size=block, num_kv_heads=1, head_size=1, dtype=torch.float32)
            )
            for i, kind in enumerate(r["group_order"])
        ]  # in the order vLLM buckets the layers
        kv = {"num_blocks": n, "kv_cache_tensors": [], "kv_cache_groups": groups}
        if "prefix_cache_retention_interval" in KVCacheConfig.__dataclass_fields__:
            kv["prefix_cache_retention_interval"] = retention
        sched = Scheduler(
            vllm_config=vc,
            kv_cache_config=KVCacheConfig(**kv),
            structured_output_manager=StructuredOutputManager(vc),
            block_size=block,
            log_stats=True,
        )
        hasher = get_request_block_hasher(block, sha)
        reused, steps_seen = [], []
        started = time.perf_counter()
        for i, rq in enumerate(case["requests"]):
            rid = str(i)
            out = rq["output"] or [0]
            req = Request(
                request_id=rid,
                prompt_token_ids=rq["prompt"],
                pooling_params=None,
                block_hasher=hasher,
                sampling_params=SamplingParams(max_tokens=len(out), ignore_eos=True),
            )
            sched.add_request(req)
            hit, steps = None, []
            for _ in range(100_000):
                so = sched.schedule()
                if not so.num_scheduled_tokens:
                    break
                for nr in so.scheduled_new_reqs:
                    if nr.req_id == rid:
                        hit = nr.num_computed_tokens
                steps.append(so.num_scheduled_tokens.get(rid, 0))
                ids = list(so.num_scheduled_tokens)
                sampled = []
                for j in ids:
                    q = sched.requests[j]
                    sampled.append([out[len(q.output_token_ids)]] if q.num_computed_tokens >= q.num_tokens else [])
                sched.update_from_output(
                    so,
                    ModelRunnerOutput(
                        req_ids=ids, req_id_to_index={x: k for k, x in enumerate(ids)}, sampled_token_ids=sampled
                    ),
                )
                if rid not in sched.requests:
                    break
            reused.append(hit if hit is not None else -1)
            steps_seen.append(steps[:6])
        import resource

        results.append(
            {
                "name": case["name"],
                "reused": reused,
                "steps": steps_seen,
                "seconds": time.perf_counter() - started,
                "max_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            }
        )
    out_file.write_text(json.dumps({"results": results, "stand_in_fields_read": sorted(ModelStandIn.read)}))
    return 0


# SGLang: validation/replay_sglang.py drives SGLang's own Scheduler (its prefill batches, chunks and caching calls)


# ==================================================================================================
# Driver
# ==================================================================================================


def _vllm_script():
    """validation/vllm.py, loaded under another name (its file name would shadow the vllm package)."""
    spec = importlib.util.spec_from_file_location("hp_validation_vllm", Path(__file__).with_name("vllm.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--releases", nargs="*", default=list(RELEASES), metavar="X.Y.Z")
    ap.add_argument("--cases", nargs="+", metavar="TRACE", help="only these traces")
    ap.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "hybridplan-validation")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--worker", nargs=4, metavar=("VERSION", "SRC", "CASES", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    if args.worker:
        version, src, cases_file, out_file = args.worker
        return worker_main(version, Path(src), Path(cases_file), Path(out_file))
    sys.path.insert(0, str(ROOT))
    vv = _vllm_script()
    cache = args.cache_dir.expanduser().resolve()
    names = args.cases or list(traces())
    report: dict = {"compared": {}, "mismatches": [], "failed": [], "cases": {}, "stand_ins": list(STAND_INS)}
    with tempfile.TemporaryDirectory(prefix="hybridplan-replay-") as tmp:
        for version in args.releases:
            start = time.time()
            src = vv.unpack_release(version, cache)
            todo, ours = [], {}
            for model, mode in MODELS:
                if not releases_modes(version, model, mode):
                    continue
                for trace in names:
                    for budget in ("roomy", "evicting"):
                        name = f"{model} {mode} {trace} {budget}"
                        side = hybridplan_side(version, model, mode, trace, budget)
                        ours[name] = side
                        todo.append({"name": name, "rules": side["rules"], "requests": side["requests"]})
            cases_file, out_file = Path(tmp) / f"cases-{version}.json", Path(tmp) / f"out-{version}.json"
            cases_file.write_text(json.dumps(todo))
            print(f"vLLM {version}: {len(todo)} cases ...", file=sys.stderr, flush=True)
            env = dict(os.environ)
            overlay = vv.transformers_overlay(version, cache)
            if overlay is not None:
                env["PYTHONPATH"] = os.pathsep.join([str(overlay), env.get("PYTHONPATH", "")])
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
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            if proc.returncode != 0:
                print(proc.stdout[-6000:], file=sys.stderr)
                report["failed"].append(version)
                continue
            out = json.loads(out_file.read_text())
            n = 0
            for res in out["results"]:
                mine = ours[res["name"]]
                report["cases"][f"{version} {res['name']}"] = {
                    "requests": len(res["reused"]),
                    "block": mine["rules"]["block"],
                    "num_blocks": mine["rules"]["num_blocks"],
                    "vllm_reused_tokens": sum(res["reused"]),
                    "hybridplan_reused_tokens": sum(mine["reused"]),
                }
                for i, (a, b) in enumerate(zip(res["reused"], mine["reused"])):
                    n += 1
                    if a != b:
                        report["mismatches"].append(
                            {
                                "release": version,
                                "case": res["name"],
                                "request": i,
                                "vllm": a,
                                "hybridplan": b,
                                "vllm_steps": res["steps"][i],
                            }
                        )
            report["compared"][version] = n
            report.setdefault("stand_in_fields_read", {})[version] = out["stand_in_fields_read"]
            print(
                f"vLLM {version}: {n} requests compared, "
                f"{sum(m['release'] == version for m in report['mismatches'])} mismatches "
                f"[{time.time() - start:.0f} s]",
                file=sys.stderr,
                flush=True,
            )
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for k, c in report["cases"].items():
            print(
                f"{k}: {c['requests']} requests, block {c['block']}, {c['num_blocks']} blocks, reused "
                f"{c['vllm_reused_tokens']:,} (vLLM) / {c['hybridplan_reused_tokens']:,} (hybridplan)"
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
