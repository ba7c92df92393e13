"""Compare hybridplan's vLLM figures with vLLM's own code, run from the published vLLM wheels on a CPU.

    python validation/vllm.py [--releases 0.10.0 ... 0.33.0] [--models NAME ...]
                              [--cache-dir ~/.cache/hybridplan-validation] [--json]

No GPU, no weights, and vLLM is never installed: each release's wheel is fetched with
``pip download --no-deps vllm==X.Y.Z`` into the cache folder and only its Python sources (``vllm/**.py``) are
unpacked beside it. Each release then runs in its own subprocess with that folder first on ``sys.path``; this
process runs hybridplan (``hybridplan_figures`` below is the only place that calls it) and compares.

Needs, beside hybridplan, in the interpreter that runs this script (Python 3.11): torch with a matching
torchvision (vLLM's Qwen3.5 module loads transformers' Qwen2-VL image code, which imports torchvision; no
CPU torchvision build matches the local torch 2.13.0+cpu, so pip's own pair, torch 2.14.1 and torchvision
0.29.1, is used; it runs on the CPU), numpy<2.4, transformers 5.19 (the one release every wheel above
accepts: it has the NemotronH, FalconH1, Zamba2, Jamba, Mamba, FalconMamba, Mamba2, Lfm2, Qwen3Next, Qwen3_5,
GraniteMoeHybrid and Bamba config classes) and the pure-Python packages that vLLM's config, layer and model
modules import:

    pip install -e . torchvision 'numpy<2.4' transformers==5.19.0 pydantic msgspec cachetools psutil regex \
        cloudpickle cbor2 pyzmq requests aiohttp openai openai-harmony gguf pillow pybase64 uvloop py-cpuinfo \
        prometheus_client xgrammar fastapi partial-json-parser llguidance einops compressed-tensors

What runs as vLLM wrote it, for each shipped hybrid (and pure-SSM) spec, at TP 1, 2, 4 and 8, in every Mamba
cache mode of the release, and at TP 1 also with ``--block-size 64`` and with ``--kv-cache-dtype fp8``, and at
PP 2 and 4 (each stage's layers, split by the release's ``get_pp_indices``, on a worker of its own):

* ``ModelConfig`` (``vllm/config/model.py``) built from a folder holding the spec's ``config:`` mapping as
  ``config.json``: vLLM's own config loading (``transformers_utils/config.py``), dtype resolution, model
  registry and inspection; ``CacheConfig``, ``ParallelConfig`` and ``VllmConfig``, whose construction runs the
  model's config hooks (``vllm/model_executor/models/config.py``: ``MambaModelConfig``,
  ``HybridAttentionMambaModelConfig``, the Nemotron-H and Qwen3.5 SSM-dtype hooks) and the TP checks;
* the model class (found by vLLM's ``ModelRegistry``): ``get_mamba_state_shape_from_config`` (also with two
  speculative tokens) and ``get_mamba_state_dtype_from_config``;
* ``Platform.update_block_size_for_backend`` and ``_align_hybrid_block_size`` (``vllm/platforms/interface.py``)
  on the real ``CacheConfig``;
* the layers' ``get_kv_cache_spec`` (``Attention``, ``MLAAttention``, ``MambaBase``, ``MambaMixer2``, the Qwen
  GDN and Kimi KDA layers), with ``get_mamba_prefill_checkpoint_alignment``;
* KV cache grouping and sizing: 0.33 ``kv_cache_planning.get_global_kv_cache_groups`` and
  ``get_kv_cache_configs``; <= 0.32 ``kv_cache_utils.get_kv_cache_configs``; then
  ``generate_scheduler_kv_cache_config``, ``get_max_concurrency_for_kv_cache_config`` and the capacity log
  (``update_kv_cache_capacity``, or ``_report_kv_cache_config`` in 0.23); from 0.18.0 the engine core's
  ``VllmConfig.validate_block_size`` on the block the groups settled on.

Stand-ins (runtime context only; see ``STAND_INS``): the platform (a subclass of vLLM's base ``Platform``
reporting CUDA on a Hopper GPU, no device queried; up to 0.17.1 it forces FlashMLA's block of 64 on MLA models
as ``CudaPlatform`` does there), the attention backends (FlashAttention's and FlashAttention-MLA's kernel blocks
on Hopper: multiples of 16), the GDN prefill backend choice (FlashInfer, Hopper's default, or Triton), the
speculative config (only ``num_speculative_tokens``, 2, for the widened-conv figure), the loaded
model's layers (instances of vLLM's layer classes whose ``__init__`` is not run: which layers exist is read from
the HF config as each model class reads it; recurrent layers report the state shapes and dtypes the model class
returned; attention layers get the heads and head size ``ModelConfig`` reports), the model runner's loop over
the layers, and the KV budget (40 GiB per worker, in place of a profiling run).

Exit status 0 when every figure matches, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hybridplan.engines.vllm.releases import VERSIONS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GiB = 1 << 30
#: every vLLM release from 0.10.0 on: the list of releases to run is hybridplan's (which releases it claims),
#: read from hybridplan/engines/vllm/releases.py; every figure compared comes from the release's own code
ALL_RELEASES = VERSIONS
RELEASES = ALL_RELEASES
TPS = (1, 2, 4, 8)
#: pipeline-parallel degrees run at TP 1: the layers split by vLLM's own get_pp_indices, one worker a stage
PPS = (2, 4)
KV_BUDGET = 40 * GiB
MAX_LEN = 8192
#: the scheduler's --max-num-batched-tokens when VllmConfig is built without one (SchedulerConfig's
#: DEFAULT_MAX_NUM_BATCHED_TOKENS, vllm/config/scheduler.py, every release run here)
BATCHED_TOKENS = 2048
#: the speculative tokens of the widened-conv figure
SPEC_TOKENS = 2
#: cases run at TP 1 beside the defaults: (--block-size, --kv-cache-dtype)
VARIANTS = ((64, None), (None, "fp8"))
#: speculative drafts run beside the target (TP 1 and 2, every mode), from 0.20.0: "mtp" is one more attention
#: layer of the target's own shape (Qwen3.5's MTP layer); the others are a draft's attention layers as
#: (layers, KV heads, head size): a DFlash-like five-layer draft, an EAGLE-like one-layer draft whose page is a
#: fraction of the target's (its block grows, or its page is padded), and one whose page exceeds the Mamba page
DRAFTS = ("mtp", (5, 8, 128), (1, 1, 128), (1, 1, 96), (2, 32, 128))
DRAFT_SINCE = "0.20.0"
#: architectures run, and the vLLM layer class (under vllm/model_executor/) of their recurrent mixer
ARCHS = {
    "NemotronHForCausalLM": "layers.mamba.mamba_mixer2.MambaMixer2",
    "FalconH1ForCausalLM": "layers.mamba.mamba_mixer2.MambaMixer2",
    "Zamba2ForCausalLM": "layers.mamba.mamba_mixer2.MambaMixer2",
    "Mamba2ForCausalLM": "layers.mamba.mamba_mixer2.MambaMixer2",
    "GraniteMoeHybridForCausalLM": "layers.mamba.mamba_mixer2.MambaMixer2",
    "BambaForCausalLM": "layers.mamba.mamba_mixer2.MambaMixer2",
    "JambaForCausalLM": "layers.mamba.mamba_mixer.MambaMixer",
    "MambaForCausalLM": "layers.mamba.mamba_mixer.MambaMixer",
    "FalconMambaForCausalLM": "layers.mamba.mamba_mixer.MambaMixer",
    "Lfm2ForCausalLM": "layers.mamba.short_conv.ShortConv",
    "Qwen3NextForCausalLM": "layers.mamba.gdn.qwen_gdn_linear_attn.QwenGatedDeltaNetAttention",
    "Qwen3_5ForConditionalGeneration": "layers.mamba.gdn.qwen_gdn_linear_attn.QwenGatedDeltaNetAttention",
    "KimiLinearForCausalLM": "layers.mamba.gdn.kimi_gdn_linear_attn.KimiGatedDeltaNetAttention",
}
GDN_ARCHS = ("Qwen3NextForCausalLM", "Qwen3_5ForConditionalGeneration")
#: the transformers each release runs with where it is not the interpreter's own (5.19, run by 0.32.0 and
#: 0.33.0): (first, last, requirements), inside the wheel's pin, installed without dependencies into the cache
#: folder and put first on the worker's path. 0.11.1-0.19.0 require transformers<5 (4.57.6 is inside 0.10.x's
#: pin too); 0.19.1-0.31.0 get 5.12.0, inside all their pins and the last transformers whose GraniteMoeHybrid
#: config keeps the layer types `mamba`/`attention` that their model class looks up (5.13 renames them
#: `linear_attention`/`full_attention`, which only 0.32.0's table knows).
TRANSFORMERS = (
    ("0.10.0", "0.19.0", ("transformers==4.57.6", "huggingface_hub==0.36.0", "tokenizers==0.22.1")),
    ("0.19.1", "0.31.0", ("transformers==5.12.0", "huggingface_hub==1.33.0", "tokenizers==0.22.1")),
)
ATTENTION_FREE = ("MambaForCausalLM", "FalconMambaForCausalLM", "Mamba2ForCausalLM")


def key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def since(version: str, first: str) -> bool:
    """Whether ``version`` is ``first`` or newer."""
    return key(version) >= key(first)


def mixer(arch: str, version: str) -> str:
    """The module (under vllm/model_executor/) and class of the architecture's recurrent layer. The Qwen GDN
    layer sat in the model modules up to 0.18.1 (Qwen3.5's subclassing Qwen3-Next's), in one layer module of
    its own in 0.19.0-0.21.0, and in the gdn/ package from 0.22.0."""
    if arch == "KimiLinearForCausalLM" and not since(version, "0.22.0"):
        return "layers.kda.KimiDeltaAttention"
    if arch in GDN_ARCHS and not since(version, "0.22.0"):
        if since(version, "0.19.0"):
            return "layers.mamba.gdn_linear_attn.GatedDeltaNetAttention"
        if arch == "Qwen3_5ForConditionalGeneration":
            return "models.qwen3_5.Qwen3_5GatedDeltaNet"
        return "models.qwen3_next.Qwen3NextGatedDeltaNet"
    return ARCHS[arch]


def attention_layer(version: str) -> str:
    """The module of the ``Attention`` layer class: vllm/attention/layer.py up to 0.15.1, under
    vllm/model_executor/layers/attention/ from 0.16.0."""
    return "vllm.model_executor.layers.attention.attention" if since(version, "0.16.0") else "vllm.attention.layer"


def mla_layer(version: str) -> str:
    """The module of the ``MLAAttention`` layer class: vllm/attention/layer.py up to 0.15.1, its own module
    under vllm/model_executor/layers/attention/ from 0.16.0."""
    return "vllm.model_executor.layers.attention.mla_attention" if since(version, "0.16.0") else "vllm.attention.layer"


def attention_backend_base(version: str) -> str:
    """The module of ``AttentionBackend`` and ``AttentionType``: vllm/attention/backends/abstract.py up to 0.13.0,
    vllm/v1/attention/backend.py from 0.14.0."""
    return "vllm.v1.attention.backend" if since(version, "0.14.0") else "vllm.attention.backends.abstract"


STAND_INS = (
    "platform: vLLM's base Platform subclassed as CUDA on compute capability 9.0 (Hopper)",
    "attention backend: FlashAttention's kernel block sizes on Hopper, MultipleOf(16)",
    "MLA backend: FlashAttention-MLA, Hopper's first MLA pick, MultipleOf(16) (from 0.20.0); up to 0.17.1 the "
    "platform forces FlashMLA's block of 64 on MLA models, as CudaPlatform does on Hopper",
    "speculative config: num_speculative_tokens only (2), for the conv shapes with speculative tokens",
    "GDN prefill backend: FlashInfer (Hopper's default) or Triton, as the layer's __init__ would pick",
    "layers: vLLM's layer classes without __init__; which layers exist is read from the HF config; "
    "recurrent layers report the model class's state shapes/dtypes, attention layers ModelConfig's heads",
    "model runner: its loop calling each layer's get_kv_cache_spec",
    "KV budget: 40 GiB per worker in place of the profiling run",
)


# ==================================================================================================
# hybridplan: every call into hybridplan is in this one function
# ==================================================================================================


def hybridplan_figures(case: dict, *, release: str, kv_budget: int, max_len: int) -> dict:
    """hybridplan's figures for one case (``cases``), with the keys the vLLM side reports (``Worker.run``).

    ``{"refused": why}`` when hybridplan refuses the case."""
    from msgspec.structs import replace

    from hybridplan.engines import vllm
    from hybridplan.errors import PlanError
    from hybridplan.loader import load_model
    from hybridplan.scenario import DtypeChoice, Scenario, Speculative
    from hybridplan.spec import Attention

    spec = load_model(case["model"])
    rel = vllm.release(release)
    draft = case.get("draft")
    layers: tuple = ()
    if draft == "mtp":
        layers = (next(m for m in spec.attention if isinstance(m, Attention)),)
    elif draft:
        n, kv_heads, head_size = draft
        layers = (Attention(32, kv_heads, head_size),) * n
    try:
        rel.check_served(spec)
        mode = rel.modes_for(spec, case["mode"])[0]  # `all` on a model without it runs as vLLM falls back
        sc = Scenario(
            spec,
            ctx=max_len,
            tp=case["tp"],
            chunk=BATCHED_TOKENS,
            dtypes=DtypeChoice(kv=case["kv_dtype"]),
            speculative=Speculative(method="draft_model" if draft else None, layers=layers),
            vllm=vllm.VllmSettings(release=rel, gdn_backend=case["gdn_backend"], block_size=case["block_size"]),
        )
        fp = vllm.footprint(sc)
        cap = vllm.capacity(sc, mode, kv_budget)
        if case.get("pp"):  # the stages reconciled (hybridplan/engines/vllm/parallel.py), each with kv_budget
            from hybridplan.engines.vllm import parallel
            from hybridplan.scenario import Budget

            staged = replace(sc, pp=case["pp"], budget=Budget(kv_budget=kv_budget), vllm=replace(sc.vllm, mode=mode))
            cap = parallel.fit(staged).modes[mode].capacity
    except PlanError as exc:
        return {"refused": str(exc)}
    if cap.block_problem:  # the align block against max_num_batched_tokens (the budget is the script's own)
        return {"refused": cap.block_problem}
    state = fp.state[0]
    lay = cap.layout
    out = {
        "refused": None,
        "mamba_cache_mode": mode,
        "mamba_layers": sum(g.count for g in fp.state),
        "attention_layers": sum(g.count for g in fp.kv) + len(layers),
        "conv_bytes_per_layer": state.conv_bytes_per_layer,
        "conv_bytes_per_layer_spec2": vllm.footprint(replace(sc, spec_tokens=SPEC_TOKENS))
        .state[0]
        .conv_bytes_per_layer,
        "ssm_bytes_per_layer": state.ssm_bytes_per_layer,
        "conv_dtype": state.conv_dtype,
        "ssm_dtype": state.ssm_dtype,
        "mamba_page_bytes": lay.mamba_page_bytes,
        "page_bytes": lay.page_bytes,
        "group_size": cap.group_size,
        "num_groups": len(cap.groups),
        "blocks_per_request": cap.blocks_per_request,
        "num_blocks": cap.num_blocks,
        "max_concurrency": cap.max_concurrency,
        "max_concurrency_2dp": f"{cap.max_concurrency:.2f}",
        "kv_tokens": cap.kv_tokens,
        # each distinct line once, as the vLLM side collects them (two buckets can print the same padding line)
        "capacity_logs": list(dict.fromkeys(cap.logs)),
    }
    if case.get("pp"):  # vLLM's scheduler takes the first worker's groups: stage 0's layers of each
        out["group_size"] = max(cap.stage_caches[0].group_layers)
    if fp.kv:
        # the target's attention block as the groups hold it (grown where a draft's larger page set the common one)
        block = next((g.block or lay.block_size for g in cap.groups if not g.recurrent and not g.draft), lay.block_size)
        out.update({"block_size": block, "padding_pct_2dp": f"{lay.padding_pct:.2f}", "block_logs": list(lay.logs)})
    own = {g.block or lay.block_size for g in cap.groups if g.draft}
    if own:  # the draft's layers in groups of their own
        out["draft_block_size"] = own.pop()
    return out


# ==================================================================================================
# Wheels and inputs
# ==================================================================================================


def unpack_release(version: str, cache: Path) -> Path:
    """The folder holding the release's ``vllm/`` Python sources, downloading the wheel if needed."""
    src = cache / f"vllm-{version}"
    done = src / ".unpacked"
    if done.exists():
        return src
    wheels = cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    found = sorted(wheels.glob(f"vllm-{version}-*.whl"))
    if not found:
        print(f"downloading the vllm {version} wheel into {wheels} ...", file=sys.stderr, flush=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", f"vllm=={version}", "-d", str(wheels)],
            check=True,
        )
        found = sorted(wheels.glob(f"vllm-{version}-*.whl"))
    with zipfile.ZipFile(found[0]) as zf:
        zf.extractall(src, [n for n in zf.namelist() if n.startswith("vllm/") and n.endswith(".py")])
    done.write_text(found[0].name)
    return src


def transformers_overlay(version: str, cache: Path) -> Path | None:
    """The folder holding the transformers the release runs with where it is not the interpreter's own
    (``TRANSFORMERS``), installing it on first use."""
    for first, last, requirements in TRANSFORMERS:
        if key(first) <= key(version) <= key(last):
            target = cache / requirements[0].replace("==", "-")
            done = target / ".installed"
            if not done.exists():
                print(f"installing {' '.join(requirements)} into {target} ...", file=sys.stderr, flush=True)
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "pip",
                        "install",
                        "--quiet",
                        "--no-deps",
                        "--target",
                        str(target),
                        *requirements,
                    ],
                    check=True,
                )
                done.write_text(" ".join(requirements))
            return target
    return None


def shipped_configs() -> dict[str, dict]:
    """Every shipped spec's HF ``config:`` mapping, by spec name, for the architectures run."""
    import yaml

    out = {}
    for path in sorted((ROOT / "model_specs").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        arch = (doc["config"].get("architectures") or [None])[0]
        if arch in ARCHS:
            out[doc.get("name") or path.stem] = doc["config"]
    return out


def modes(version: str, config: dict) -> tuple[str, ...]:
    """The Mamba cache modes of the release: up to 0.11.0 prefix caching is off with Mamba layers (`none`);
    0.11.1-0.14.1 switch it on or off (on is what 0.15.0 named `all`); ``MambaCacheMode``
    (vllm/config/cache.py) is `all`, `align`, `none` from 0.15.0 and loses `all` in 0.32.0. Prefix caching
    needs attention layers here, so attention-free models run in `none` only."""
    if config.get("architectures", [""])[0] in ATTENTION_FREE or not since(version, "0.11.1"):
        return ("none",)
    if not since(version, "0.15.0"):
        return ("none", "all")
    return ("none", "align") if since(version, "0.32.0") else ("none", "align", "all")


def cases(version: str, configs: dict[str, dict]) -> list[dict]:
    out = []
    for name, config in configs.items():
        arch = config["architectures"][0]
        for tp in TPS:
            for mode in modes(version, config):
                backends = (
                    ("flashinfer", "triton")
                    if (arch in GDN_ARCHS and mode == "align" and since(version, "0.33.0"))
                    else ("flashinfer",)
                )
                for gdn in backends:
                    out.append(
                        {
                            "model": name,
                            "arch": arch,
                            "tp": tp,
                            "mode": mode,
                            "gdn_backend": gdn,
                            "block_size": None,
                            "kv_dtype": None,
                        }
                    )
        for mode in modes(version, config):  # at TP 1: a user's --block-size, and an fp8 KV cache
            for block, kv in VARIANTS:
                out.append(
                    {
                        "model": name,
                        "arch": arch,
                        "tp": 1,
                        "mode": mode,
                        "gdn_backend": "flashinfer",
                        "block_size": block,
                        "kv_dtype": kv,
                    }
                )
        for pp in PPS:  # pipeline stages at TP 1 (hybridplan/engines/vllm/parallel.py)
            for mode in modes(version, config):
                out.append(
                    {
                        "model": name,
                        "arch": arch,
                        "tp": 1,
                        "pp": pp,
                        "mode": mode,
                        "gdn_backend": "flashinfer",
                        "block_size": None,
                        "kv_dtype": None,
                    }
                )
        if since(version, DRAFT_SINCE) and arch not in ATTENTION_FREE and arch != "KimiLinearForCausalLM":
            for tp in (1, 2):
                for mode in modes(version, config):
                    for draft in DRAFTS:
                        out.append(
                            {
                                "model": name,
                                "arch": arch,
                                "tp": tp,
                                "mode": mode,
                                "gdn_backend": "flashinfer",
                                "block_size": None,
                                "kv_dtype": None,
                                "draft": draft,
                            }
                        )
    return out


# ==================================================================================================
# The vLLM side: runs in a subprocess whose sys.path starts with the unpacked wheel
# ==================================================================================================


class NotRun(Exception):
    """A case this setup cannot run as vLLM would (reported apart, never compared)."""


class Worker:
    def __init__(self, version: str, config_root: Path, names: list[str]) -> None:
        import logging

        self.version = version
        self.config_root = config_root
        self.messages: list[str] = []
        outer = self

        class Lines(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                outer.messages.append(record.getMessage())

        import torch
        import vllm.platforms as platforms

        logging.getLogger("vllm").addHandler(Lines())
        logging.getLogger("vllm").setLevel(logging.INFO)
        from vllm.platforms.interface import DeviceCapability, Platform, PlatformEnum

        class HopperCuda(Platform):
            """Stand-in: CUDA on an H100/H200, without querying a device."""

            _enum = PlatformEnum.CUDA
            device_name = "cuda"
            device_type = "cuda"
            dispatch_key = "CUDA"
            ray_device_key = "GPU"
            dist_backend = "nccl"
            device_control_env_var = "CUDA_VISIBLE_DEVICES"

            @classmethod
            def get_device_capability(cls, device_id: int = 0):
                return DeviceCapability(major=9, minor=0)

            @classmethod
            def get_device_name(cls, device_id: int = 0) -> str:
                return "NVIDIA H200"

            @classmethod
            def get_device_total_memory(cls, device_id: int = 0) -> int:
                return 143771467776

            @classmethod
            def is_fully_connected(cls, device_ids) -> bool:
                return True

            @classmethod
            def support_hybrid_kv_cache(cls) -> bool:
                return True

            @classmethod
            def support_static_graph_mode(cls) -> bool:
                return True

            @classmethod
            def supports_v1(cls, model_config) -> bool:
                return True  # as CudaPlatform (read by the V1 engine oracle, up to 0.11.0)

            @classmethod
            def is_kv_cache_dtype_supported(cls, kv_cache_dtype, model_config=None) -> bool:
                return True  # as CudaPlatform on Hopper: FlashAttention 3 and FlashMLA take fp8 (V1 oracle, <= 0.11.0)

            @classmethod
            def is_async_output_supported(cls, enforce_eager) -> bool:
                return True  # as CudaPlatform without --enforce-eager (asked by ModelConfig up to 0.10.2)

            @classmethod
            def check_and_update_config(cls, vllm_config) -> None:
                # as CudaPlatform: the default block size where CacheConfig leaves it unset (up to 0.17.1), and
                # for MLA on Hopper FlashMLA's forced block of 64 (CudaPlatform picks FlashMLA there up to 0.17.1)
                cc = vllm_config.cache_config
                if cc is not None and cc.block_size is None:
                    cc.block_size = 16
                mc = vllm_config.model_config
                if (
                    cc is not None
                    and mc is not None
                    and getattr(mc, "use_mla", False)
                    and cc.block_size % 64
                    and not since(version, "0.18.0")
                ):
                    cc.block_size = 64

            @property
            def supported_dtypes(self) -> list:
                return [torch.bfloat16, torch.float16, torch.float32]

        # Everything vLLM imports is imported, and every ModelConfig built, under the platform vLLM finds on
        # this machine: under CUDA some modules would load CUDA-only extensions.
        import importlib

        from vllm.model_executor.models import ModelRegistry

        for module in (
            attention_layer(version),
            attention_backend_base(version),
            "vllm.v1.core.kv_cache_utils",
            *self.runner_modules(),
        ):
            importlib.import_module(module)
        for arch in ARCHS:
            registered = ModelRegistry.models.get(arch)
            if registered is None:  # not in this release's registry
                continue
            if hasattr(registered, "module_name"):
                importlib.import_module(registered.module_name)
            importlib.import_module("vllm.model_executor." + mixer(arch, version).rsplit(".", 1)[0])
        self.record_shape_calls()
        self.checked_asserts: set[str] = set()
        self.model_configs: dict[str, object] = {}
        self.checkpoint_code = self.checkpoint_config_code()
        for name in names:
            try:
                self.model_config(name)
            except (ValueError, AttributeError, NotRun):  # raised again in run()
                pass
        platforms.current_platform = HopperCuda()
        self.platform = platforms.current_platform
        self.backend = self.attention_backend()
        self.mla_backend = self.mla_attention_backend()

    @staticmethod
    def checkpoint_config_code():
        """Stand-in for the configuration code Nemotron-H checkpoints ship (loaded with trust_remote_code):
        transformers has a NemotronH config class only from 5.3, so with the 4.x that 0.10.0-0.19.0 run with,
        vLLM's own copy of that code (vllm/transformers_utils/configs/nemotron_h.py) serves the model type."""
        from transformers import AutoConfig
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        if "nemotron_h" not in CONFIG_MAPPING:
            from vllm.transformers_utils.configs import NemotronHConfig

            AutoConfig.register("nemotron_h", NemotronHConfig)
            return NemotronHConfig
        return None

    def check_loadable(self, name: str) -> None:
        """A config written for newer checkpoint code than the stand-in (Nemotron-3 Ultra gives
        ``layers_block_type``, a read-only property of the older class) is not run."""
        if self.checkpoint_code is None:
            return
        config = json.loads((self.config_root / name / "config.json").read_text())
        if config.get("model_type") != self.checkpoint_code.model_type:
            return
        fixed = [
            k
            for k in config
            if isinstance(getattr(self.checkpoint_code, k, None), property)
            and getattr(self.checkpoint_code, k).fset is None
        ]
        if fixed:
            raise NotRun(
                f"its config sets {', '.join(fixed)}, which vLLM's copy of the checkpoint's config code "
                f"computes: it needs the checkpoint's own, newer code (trust_remote_code)"
            )

    def attention_backend(self):
        """Stand-in, from 0.20.0 (where the hybrid block alignment reads the backend's kernel block sizes):
        FlashAttention's kernel block sizes on Hopper. Earlier releases do not consult the backend here."""
        if not since(self.version, "0.20.0"):
            return None
        from vllm.v1.attention.backend import AttentionBackend, MultipleOf

        class FlashAttentionOnHopper(AttentionBackend):
            accept_output_buffer = True

            @staticmethod
            def get_name() -> str:
                return "FLASH_ATTN"

            @staticmethod
            def get_supported_kernel_block_sizes():
                return [MultipleOf(16)]

            @staticmethod
            def get_impl_cls():
                raise NotImplementedError

            @staticmethod
            def get_builder_cls():
                raise NotImplementedError

            @staticmethod
            def get_kv_cache_shape(num_blocks, block_size, num_kv_heads, head_size, cache_dtype_str="auto"):
                return (2, num_blocks, block_size, num_kv_heads, head_size)

        return FlashAttentionOnHopper

    def mla_attention_backend(self):
        """Stand-in, from 0.20.0: FlashAttention-MLA, the first MLA backend vLLM tries on Hopper
        (``CudaPlatform._get_backend_priorities``, vllm/platforms/cuda.py), with its kernel block sizes
        (vllm/v1/attention/backends/mla/flashattn_mla.py: multiples of 16)."""
        if not since(self.version, "0.20.0"):
            return None
        from vllm.v1.attention.backend import MultipleOf

        base = self.backend

        class FlashAttentionMlaOnHopper(base):
            @staticmethod
            def get_name() -> str:
                return "FLASH_ATTN_MLA"

            @staticmethod
            def get_supported_kernel_block_sizes():
                return [MultipleOf(16)]

        return FlashAttentionMlaOnHopper

    def runner_modules(self) -> tuple[str, ...]:
        """Modules the KV cache steps use beyond kv_cache_utils: the model runner, whose get_kv_cache_spec builds
        the specs up to 0.11.0, and 0.33.0's kv_cache_planning."""
        if not since(self.version, "0.11.1"):
            return ("vllm.v1.worker.gpu_model_runner",)
        return ("vllm.v1.core.kv_cache_planning",) if since(self.version, "0.33.0") else ()

    # -- configs ---------------------------------------------------------------------------------

    def model_config(self, name: str):
        """vLLM's ModelConfig for the spec; the error it raised (e.g. an architecture the release does not
        register, or a config its code cannot read) is raised again for every case of that spec."""
        if name not in self.model_configs:
            from vllm.config import ModelConfig

            path = str(self.config_root / name)
            try:
                self.check_loadable(name)
                self.model_configs[name] = ModelConfig(
                    model=path, tokenizer=path, skip_tokenizer_init=True, max_model_len=MAX_LEN
                )
            except (ValueError, AttributeError, NotRun) as exc:
                self.model_configs[name] = exc
        found = self.model_configs[name]
        if isinstance(found, Exception):
            raise found
        return found

    def cache_settings(self, case: dict) -> dict:
        """CacheConfig's prefix caching and Mamba cache mode: ``mamba_cache_mode`` from 0.15.0; before it,
        prefix caching on is the mode 0.15.0 named `all` (0.11.1-0.14.1), and off the only V1 choice;
        ``--block-size`` (CacheConfig marks it the user's, from 0.18.0) and ``--kv-cache-dtype``."""
        mode = case["mode"]
        settings: dict = {"enable_prefix_caching": mode != "none"}
        if case.get("block_size"):
            settings["block_size"] = case["block_size"]
        if case.get("kv_dtype"):
            settings["cache_dtype"] = case["kv_dtype"]
        if since(self.version, "0.15.0"):
            settings["mamba_cache_mode"] = mode
        if not since(self.version, "0.18.0"):
            # the V1 engine allocates no CPU swap; up to 0.17.1 the 4 GiB default only feeds a check of
            # swap x TP against this machine's RAM (CacheConfig.verify_with_parallel_config)
            settings["swap_space"] = 0
        return settings

    @staticmethod
    def resolved_kv_dtype(kv_dtype: str, mc) -> str:
        """``--kv-cache-dtype`` as ``EngineArgs.create_engine_config`` hands it to CacheConfig: from 0.14.0 an
        "auto" is resolved from the checkpoint's quantization config (vllm/utils/torch_utils.py
        ``resolve_kv_cache_dtype_string``: a ModelOpt ``kv_cache_quant_algo`` FP8 gives fp8_e4m3); before, auto
        stays auto. CacheConfig built without the engine args skips that step, so it is called here."""
        try:
            from vllm.utils import torch_utils
        except ImportError:  # before 0.11.1 vllm.utils is a module without it
            return kv_dtype
        resolve = getattr(torch_utils, "resolve_kv_cache_dtype_string", None)
        return resolve(kv_dtype, mc) if resolve is not None else kv_dtype

    def cache_mode(self, cache_config) -> str:
        """The mode the config hooks left (they may switch prefix caching off, or `all` to `align`)."""
        if since(self.version, "0.15.0"):
            return cache_config.mamba_cache_mode
        return "all" if cache_config.enable_prefix_caching else "none"

    def vllm_config(self, case: dict):
        """VllmConfig, whose construction runs the model's config hooks; up to 0.19.1 these include the hybrid
        block alignment (``HybridAttentionMambaModelConfig.verify_and_update_config``)."""
        import copy

        from vllm.config import CacheConfig, ParallelConfig, VllmConfig

        mc = copy.deepcopy(self.model_config(case["model"]))
        settings = self.cache_settings(case)
        settings["cache_dtype"] = self.resolved_kv_dtype(settings.get("cache_dtype", "auto"), mc)
        cc = CacheConfig(**settings)
        pc = ParallelConfig(
            tensor_parallel_size=case["tp"], **({"pipeline_parallel_size": case["pp"]} if case.get("pp") else {})
        )
        return VllmConfig(model_config=mc, cache_config=cc, parallel_config=pc)

    def v1_engine_check(self, case: dict) -> None:
        """Up to 0.11.0: the V1 engine oracle (``EngineArgs._is_v1_supported_oracle``, vllm/engine/arg_utils.py),
        run with VLLM_USE_V1=1 set, as a user asking for V1 runs it: it raises for a class marked
        ``SupportsV0Only`` (Jamba and Mamba in 0.10.0) instead of falling back to V0."""
        if since(self.version, "0.11.1"):
            return
        from vllm.engine.arg_utils import EngineArgs

        path = str(self.config_root / case["model"])
        args = EngineArgs(
            model=path,
            tokenizer=path,
            skip_tokenizer_init=True,
            max_model_len=MAX_LEN,
            tensor_parallel_size=case["tp"],
            enable_prefix_caching=False,
            kv_cache_dtype=case.get("kv_dtype") or "auto",
            block_size=case.get("block_size"),
        )
        args._is_v1_supported_oracle(self.model_config(case["model"]))

    def model_class(self, mc):
        """The class vLLM's registry resolves (``resolve_model_cls`` takes the ModelConfig from 0.10.1). An
        architecture the release does not register but transformers knows resolves to vLLM's generic
        Transformers backend, which keeps no recurrent state: refused here."""
        from vllm.model_executor.models import ModelRegistry

        if since(self.version, "0.10.1"):
            model_cls = ModelRegistry.resolve_model_cls(mc.architectures, model_config=mc)[0]
        else:
            model_cls = ModelRegistry.resolve_model_cls(mc.architectures)[0]
        if not hasattr(model_cls, "get_mamba_state_shape_from_config"):
            raise ValueError(
                f"{mc.architectures[0]} is not in vLLM {self.version}'s registry: it resolves to "
                f"{model_cls.__name__}, which has no recurrent-state support"
            )
        return model_cls

    @staticmethod
    def speculative_shapes(model_cls, vc):
        """The model class's state shapes with 2 speculative tokens: the same VllmConfig with a stand-in
        speculative config holding only ``num_speculative_tokens`` (what the classes read of it here)."""
        import copy
        import types

        spec_vc = copy.copy(vc)
        object.__setattr__(spec_vc, "speculative_config", types.SimpleNamespace(num_speculative_tokens=SPEC_TOKENS))
        return model_cls.get_mamba_state_shape_from_config(spec_vc)

    def state_dtypes(self, model_cls, vc):
        """The model class's state dtypes (``get_mamba_state_dtype_from_config``, from 0.10.1); 0.10.0 has none:
        the model runner gives every state the KV cache dtype (``GPUModelRunner.get_kv_cache_spec``)."""
        if not since(self.version, "0.10.1"):
            return None
        return model_cls.get_mamba_state_dtype_from_config(vc)

    def record_shape_calls(self) -> None:
        """Record the arguments the model class passes to the state-shape helper (the same config fields it
        passes to its mixer's constructor), calling the original unchanged: ``MambaStateShapeCalculator``'s
        methods from 0.10.1, the ``get_mamba_state_shape`` function each model module imports in 0.10.0."""
        from vllm.model_executor.layers.mamba import mamba_utils

        self.shape_calls: list[dict] = []

        def record(owner, name: str) -> None:
            original = getattr(owner, name)

            def recorder(*args, _original=original, **kwargs):
                self.shape_calls.append(kwargs)
                return _original(*args, **kwargs)

            setattr(owner, name, recorder)

        calculator = getattr(mamba_utils, "MambaStateShapeCalculator", None)
        if calculator is not None:
            for name in [n for n in vars(calculator) if n.endswith("_state_shape")]:
                record(calculator, name)
            return
        for module_name, module in list(sys.modules.items()):
            if module_name.startswith("vllm.model_executor.models.") and hasattr(module, "get_mamba_state_shape"):
                record(module, "get_mamba_state_shape")

    def constructor_asserts(self, arch: str, tp: int) -> None:
        """The mixer constructor's own top-level ``assert`` statements (e.g. ``MambaMixer2``: TP must divide
        the heads, and the groups unless there is one), executed unmodified from the wheel's source with the
        values the model class passed for the state shape. The rest of the constructor is not run."""
        import ast
        import builtins
        import inspect
        import textwrap
        import types

        cls = self.mixer_class(arch)
        init = ast.parse(textwrap.dedent(inspect.getsource(cls.__init__))).body[0]
        for call in self.shape_calls:
            ns = {"self": types.SimpleNamespace(tp_size=tp), **call}
            for node in init.body:
                names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
                if not isinstance(node, ast.Assert) or not names <= set(ns) | set(dir(builtins)):
                    continue
                try:
                    exec(compile(ast.Module([node], []), inspect.getsourcefile(cls), "exec"), ns)  # noqa: S102
                except AttributeError:  # reads a field the constructor sets: not checkable here
                    continue
                self.checked_asserts.add(f"{cls.__name__}.__init__: {ast.unparse(node.test)}")

    @staticmethod
    def dtype_name(dtype, case: dict) -> str:
        """A state dtype's name. vLLM allocates an fp8 cache as torch.uint8 (``STR_DTYPE_TO_TORCH_DTYPE``), which
        0.10.0's states take with ``--kv-cache-dtype fp8``: named here by the format the flag names, as
        hybridplan names it (the bytes are the same)."""
        name = str(dtype).removeprefix("torch.")
        if name == "uint8" and (case.get("kv_dtype") or "").startswith("fp8"):
            return "float8_e5m2" if case["kv_dtype"] == "fp8_e5m2" else "float8_e4m3fn"
        return name

    @staticmethod
    def str_dtypes() -> dict:
        """vLLM's ``STR_DTYPE_TO_TORCH_DTYPE`` (vllm/utils/torch_utils.py, vllm/utils.py in older releases)."""
        try:
            from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE
        except ImportError:
            from vllm.utils import STR_DTYPE_TO_TORCH_DTYPE
        return STR_DTYPE_TO_TORCH_DTYPE

    def mixer_class(self, arch: str):
        import importlib

        module, cls_name = mixer(arch, self.version).rsplit(".", 1)
        return getattr(importlib.import_module(f"vllm.model_executor.{module}"), cls_name)

    # -- the loaded model's layers (stand-in) ------------------------------------------------------

    #: model classes that pick each decoder layer's class from their module's ALL_DECODER_LAYER_TYPES, keyed by
    #: the HF config field they read: (module, field)
    LAYER_TABLES = {
        "NemotronHForCausalLM": ("nemotron_h", "hybrid_override_pattern"),
        "JambaForCausalLM": ("jamba", "layers_block_type"),
        "BambaForCausalLM": ("bamba", "layers_block_type"),
        "GraniteMoeHybridForCausalLM": ("granitemoehybrid", "layer_types"),
    }

    def layer_kinds(self, arch: str, hf) -> list[str]:
        """Per decoder layer, the cache-holding mixers the vLLM model class builds, read from the HF config
        the way the model class reads it: where it looks each layer's type up in its ALL_DECODER_LAYER_TYPES
        table, a type missing from the release's table stops the model's construction (KeyError), e.g.
        Nemotron-3's MoE layers before 0.11.1."""
        import importlib

        text = hf.get_text_config() if hasattr(hf, "get_text_config") else hf
        if arch in self.LAYER_TABLES:
            module, field = self.LAYER_TABLES[arch]
            table = importlib.import_module(f"vllm.model_executor.models.{module}").ALL_DECODER_LAYER_TYPES
            kinds = []
            for t in getattr(hf, field):
                name = table[t].__name__  # the decoder-layer class: ...MambaDecoderLayer, ...AttentionDecoderLayer
                kinds.append("mamba" if "Mamba" in name else "attention" if "Attention" in name else "")
            return kinds
        if arch == "FalconH1ForCausalLM":  # every layer holds a Mamba-2 mixer and an attention block
            return ["mamba+attention"] * hf.num_hidden_layers
        if arch == "Zamba2ForCausalLM":  # a hybrid layer adds one KV cache of the shared attention block
            return ["mamba+attention" if t == "hybrid" else "mamba" for t in hf.layers_block_type]
        if arch in ATTENTION_FREE:
            return ["mamba"] * hf.num_hidden_layers
        if arch == "Lfm2ForCausalLM":
            return ["attention" if t == "full_attention" else "mamba" for t in hf.layer_types]
        if arch in GDN_ARCHS:
            return ["attention" if t == "full_attention" else "mamba" for t in text.layer_types]
        if arch == "KimiLinearForCausalLM":  # KimiDecoderLayer: KDA where config.is_kda_layer, else MLA
            return ["mamba" if hf.is_kda_layer(i) else "mla" for i in range(hf.num_hidden_layers)]
        raise KeyError(arch)

    def build_layers(self, vc, arch: str, kinds: list[str], shapes, dtypes, gdn_backend: str) -> dict:
        import importlib
        import inspect

        import torch

        Attention = importlib.import_module(attention_layer(self.version)).Attention
        AttentionType = importlib.import_module(attention_backend_base(self.version)).AttentionType
        mixer_cls = self.mixer_class(arch)
        mixer_module = inspect.getmodule(mixer_cls)
        mc, pc, cc = vc.model_config, vc.parallel_config, vc.cache_config
        kv_dtype = mc.dtype if cc.cache_dtype == "auto" else self.str_dtypes()[cc.cache_dtype]
        layers: dict = {}
        for i, layer_kinds in enumerate(kinds):
            for kind in layer_kinds.split("+"):
                if kind == "mamba":
                    layer = mixer_cls.__new__(mixer_cls)
                    torch.nn.Module.__init__(layer)
                    layer.get_state_shape = lambda s=shapes: s
                    if dtypes is not None:
                        layer.get_state_dtype = lambda d=dtypes: d
                    layer.vllm_config = vc
                    layer.model_config, layer.cache_config = mc, cc
                    if hasattr(mixer_module, "FLASHINFER_GDN_CHECKPOINT_ALIGNMENT"):
                        # as QwenGatedDeltaNetAttention.__init__: FlashInfer's prefill exports checkpoints in align
                        layer._checkpoint_alignment = (
                            mixer_module.FLASHINFER_GDN_CHECKPOINT_ALIGNMENT
                            if cc.mamba_cache_mode == "align" and gdn_backend == "flashinfer"
                            else None
                        )
                    layers[f"model.layers.{i}.mixer"] = layer
                elif kind == "mla":
                    MLAAttention = importlib.import_module(mla_layer(self.version)).MLAAttention
                    layer = MLAAttention.__new__(MLAAttention)
                    torch.nn.Module.__init__(layer)
                    layer.num_kv_heads = 1
                    layer.head_size = mc.get_head_size()  # kv_lora_rank + qk_rope_head_dim
                    layer.kv_cache_dtype = cc.cache_dtype
                    layer.sliding_window = None
                    # as the constructor sets them for a dense MLA layer (no sparse indexer, causal decode)
                    layer.topk_buffer_width, layer.indexer, layer.non_causal_multi_token_decode = None, None, False
                    layer.attn_backend = self.mla_backend
                    layer.layer_name = f"model.layers.{i}.self_attn.mla_attn"
                    layers[layer.layer_name] = layer
                elif kind == "attention":
                    layer = Attention.__new__(Attention)
                    torch.nn.Module.__init__(layer)
                    layer.attn_type = AttentionType.DECODER
                    layer.num_kv_heads = mc.get_num_kv_heads(pc)
                    layer.head_size = layer.head_size_v = mc.get_head_size()
                    layer.kv_cache_dtype = cc.cache_dtype
                    layer.kv_cache_torch_dtype = kv_dtype
                    layer.sliding_window = None
                    layer.kv_sharing_target_layer_name = None
                    layer.attn_backend = self.backend
                    layer.layer_name = f"model.layers.{i}.self_attn.attn"
                    layers[layer.layer_name] = layer
        return layers

    def draft_layers(self, vc, draft, layers: dict) -> dict:
        """Stand-in for a drafter's attention layers in the forward context (vllm/v1/worker/gpu_model_runner.py
        ``get_kv_cache_spec`` takes them with the target's): "mtp", a copy of the target's attention layer; else
        (layers, KV heads, head size) layers of vLLM's Attention class as a draft's ``__init__`` sets them (KV heads
        split over TP, replicated below it: ``max(1, heads // tp)``), the target's cache config and dtype."""
        import copy

        if not draft:
            return {}
        target = next(layer for name, layer in layers.items() if name.endswith("self_attn.attn"))
        if draft == "mtp":
            count, kv_heads, head_size = 1, target.num_kv_heads, target.head_size
        else:
            count, total, head_size = draft
            kv_heads = max(1, total // vc.parallel_config.tensor_parallel_size)
        out = {}
        for i in range(count):
            layer = copy.copy(target)
            layer.num_kv_heads, layer.head_size, layer.head_size_v = kv_heads, head_size, head_size
            layer.layer_name = f"draft.layers.{i}.self_attn.attn"
            out[layer.layer_name] = layer
        return out

    def draft_specs(self, specs: dict) -> dict:
        """As the model runner's ``get_kv_cache_spec`` does from 0.24.0: an attention spec records whether its
        backend reads KV pages by the block stride, which FlashAttention does (its layered stride order puts the
        blocks first, vllm/v1/attention/backends/flash_attn.py)."""
        from dataclasses import fields, replace

        out = {}
        for name, spec in specs.items():
            if "indexes_kv_by_block_stride" in {f.name for f in fields(spec)} and type(spec).__name__ != "MambaSpec":
                spec = replace(spec, indexes_kv_by_block_stride=True)
            out[name] = spec
        return out

    # -- the worker and engine-core steps ----------------------------------------------------------

    def align_block_size(self, vc) -> None:
        """The worker's block-size step once the model is loaded (``Platform.update_block_size_for_backend``,
        from 0.18.0): from 0.20.0 it aligns a hybrid's attention block (``_align_hybrid_block_size``); in
        0.18.0-0.19.1 it sets a hybrid's block back to the default 16 (the engine core's grouping scales the
        attention spec up to the padded page again). Up to 0.19.1 the alignment ran in ``vllm_config``."""
        if since(self.version, "0.18.0"):
            self.platform.update_block_size_for_backend(vc)

    def layer_specs(self, vc, layers: dict) -> dict:
        """Each layer's KV cache spec, as the model runner gathers them: from 0.11.1 each layer's own
        ``get_kv_cache_spec`` (the runner's loop over the layers); up to 0.11.0
        ``GPUModelRunner.get_kv_cache_spec`` builds them itself, run here on a stand-in runner holding the
        fields it reads, set as ``GPUModelRunner.__init__`` sets them."""
        import types

        if since(self.version, "0.11.1"):
            specs = {}
            for layer_name, layer in layers.items():
                spec = layer.get_kv_cache_spec(vc)
                if spec is not None:
                    specs[layer_name] = spec
            return specs
        from vllm.utils import STR_DTYPE_TO_TORCH_DTYPE
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner

        mc, cc = vc.model_config, vc.cache_config
        runner = types.SimpleNamespace(
            vllm_config=vc,
            speculative_config=vc.speculative_config,
            shared_kv_cache_layers={},
            kv_cache_dtype=mc.dtype if cc.cache_dtype == "auto" else STR_DTYPE_TO_TORCH_DTYPE[cc.cache_dtype],
            attention_chunk_size=mc.attention_chunk_size,
        )
        return GPUModelRunner.get_kv_cache_spec(runner)

    def scheduler_kv_cache_config(self, vc, specs: dict, workers: int, stages: list[dict] | None = None):
        """KV cache grouping and sizing over the workers, and the config the scheduler gets: 0.33.0 plans the
        groups in ``kv_cache_planning``; 0.11.0-0.32.0 ``kv_cache_utils.get_kv_cache_configs``; up to 0.10.2
        ``get_kv_cache_config`` per worker and ``unify_kv_cache_configs``, the scheduler taking the first
        worker's (``EngineCore._initialize_kv_caches``)."""
        from vllm.v1.core import kv_cache_utils

        per_worker, budgets = [dict(specs) for _ in range(workers)], [KV_BUDGET] * workers
        if stages is not None:  # pipeline stages: each worker holds its stage's layers, every TP rank alike
            per_worker = [dict(s) for s in stages for _ in range(workers)]
            budgets = [KV_BUDGET] * len(per_worker)
        if since(self.version, "0.33.0"):
            from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups, get_kv_cache_configs

            groups = get_global_kv_cache_groups(vc, per_worker if stages is not None else [specs] * workers)
            configs = get_kv_cache_configs(vc, per_worker, budgets, groups)
        elif since(self.version, "0.11.0"):
            configs = kv_cache_utils.get_kv_cache_configs(vc, per_worker, budgets)
        else:
            configs = [kv_cache_utils.get_kv_cache_config(vc, s, b) for s, b in zip(per_worker, budgets)]
            kv_cache_utils.unify_kv_cache_configs(configs)
            return configs[0]
        return kv_cache_utils.generate_scheduler_kv_cache_config(configs)

    # -- one case ---------------------------------------------------------------------------------

    def run(self, case: dict) -> dict:
        from math import prod

        self.messages.clear()
        try:
            self.model_config(case["model"])
        except NotRun as exc:
            return {"not_run": str(exc)}
        except (ValueError, AttributeError) as exc:
            return {"refused": f"{type(exc).__name__}: {exc}"}
        try:
            self.v1_engine_check(case)
            vc = self.vllm_config(case)
            model_cls = self.model_class(vc.model_config)
            self.shape_calls.clear()
            shapes = model_cls.get_mamba_state_shape_from_config(vc)
            spec_shapes = self.speculative_shapes(model_cls, vc)
            dtypes = self.state_dtypes(model_cls, vc)
            self.constructor_asserts(case["arch"], case["tp"])
            kinds = self.layer_kinds(case["arch"], vc.model_config.hf_config)
        except (ValueError, AssertionError, TypeError, KeyError, NotImplementedError) as exc:
            return {"refused": f"{type(exc).__name__}: {exc}"}
        layers = self.build_layers(vc, case["arch"], kinds, shapes, dtypes, case["gdn_backend"])
        layers.update(self.draft_layers(vc, case.get("draft"), layers))
        vc.compilation_config.static_forward_context.update(layers)

        self.align_block_size(vc)
        block_logs = [
            m for m in self.messages if m.startswith(("Setting attention block size", "Padding mamba page size"))
        ]
        specs = self.layer_specs(vc, layers)
        workers = case["tp"]
        from vllm.logger import _print_info_once

        _print_info_once.cache_clear()
        self.messages.clear()
        if since(self.version, "0.29.0"):  # the engine core resolves the KV cache layout first
            from vllm.v1.attention.backends import utils as backend_utils

            layouts = [x.name for x in backend_utils.get_supported_kv_cache_layouts([self.backend])]
            backend_utils.resolve_kv_cache_layout(vc, [layouts] * workers, list(specs.values()))
        if case.get("draft"):
            specs = self.draft_specs(specs)
            try:
                sched = self.scheduler_kv_cache_config(vc, specs, workers)
            except (AssertionError, NotImplementedError) as exc:
                return {"refused": f"{type(exc).__name__}: {exc}"}
        elif case.get("pp"):
            from vllm.distributed.utils import get_pp_indices

            bounds = [get_pp_indices(len(kinds), r, case["pp"]) for r in range(case["pp"])]
            index = {n: int(re.search(r"layers\.(\d+)\.", n).group(1)) for n in specs}
            stages = [{n: s for n, s in specs.items() if a <= index[n] < b} for a, b in bounds]
            sched = self.scheduler_kv_cache_config(vc, specs, workers, stages)
        else:
            sched = self.scheduler_kv_cache_config(vc, specs, workers)
        if hasattr(vc, "validate_block_size"):  # the engine core's check once the caches are sized (0.18.0+)
            vc.cache_config.block_size = min(g.kv_cache_spec.block_size for g in sched.kv_cache_groups)
            try:
                vc.validate_block_size()
            except AssertionError as exc:
                return {"refused": f"AssertionError: {exc}"}
        from vllm.v1.core import kv_cache_utils

        conc = kv_cache_utils.get_max_concurrency_for_kv_cache_config(vc, sched)
        if hasattr(kv_cache_utils, "update_kv_cache_capacity"):
            kv_cache_utils.update_kv_cache_capacity(vc, sched)
        # the grouping's padding warning comes once per worker in this process: each distinct line once
        capacity_logs = list(
            dict.fromkeys(
                m for m in self.messages if "KV cache size" in m or m.startswith(("Maximum concurrency", "Add "))
            )
        )
        tokens = re.search(r"KV cache size: ([\d,]+) tokens", "\n".join(capacity_logs))

        kv_groups = sched.kv_cache_groups
        mamba_specs = [s for s in specs.values() if type(s).__name__ == "MambaSpec"]
        attn = [n for n, s in specs.items() if type(s).__name__ != "MambaSpec"]
        mamba = mamba_specs[0]
        state_dtypes = getattr(mamba, "dtypes", None) or (mamba.dtype,) * len(mamba.shapes)  # one dtype in 0.10.0
        convs = mamba.shapes[:-1] if len(mamba.shapes) > 1 else mamba.shapes
        out = {
            "refused": None,
            "mamba_cache_mode": self.cache_mode(vc.cache_config),
            "mamba_layers": len(mamba_specs),
            "attention_layers": len(attn),
            # the last of several states is the SSM (recurrent) state, the others conv windows (KDA: q, k, v up to
            # 0.24, one fused window from 0.25)
            "conv_bytes_per_layer": sum(prod(s) * d.itemsize for s, d in zip(convs, state_dtypes)),
            "ssm_bytes_per_layer": prod(mamba.shapes[-1]) * state_dtypes[-1].itemsize if len(mamba.shapes) > 1 else 0,
            "conv_bytes_per_layer_spec2": sum(
                prod(s) * d.itemsize
                for s, d in zip(spec_shapes[:-1] if len(spec_shapes) > 1 else spec_shapes, state_dtypes)
            ),
            "conv_dtype": self.dtype_name(state_dtypes[0], case),
            "ssm_dtype": self.dtype_name(state_dtypes[-1], case) if len(state_dtypes) > 1 else None,
            "mamba_page_bytes": sum(prod(s) * d.itemsize for s, d in zip(mamba.shapes, state_dtypes)),
            "page_bytes": mamba.page_size_bytes,
            "group_size": max(len(g.layer_names) for g in kv_groups),
            "num_groups": len(kv_groups),
            "blocks_per_request": round(sched.num_blocks / conc),
            "num_blocks": sched.num_blocks,
            "max_concurrency": conc,
            "max_concurrency_2dp": f"{conc:.2f}",
            "kv_tokens": int(tokens.group(1).replace(",", "")) if tokens else None,
            "capacity_logs": capacity_logs,
        }
        if attn:
            padding = re.search(r"Padding mamba page size by ([\d.]+)%", "\n".join(block_logs))

            # the attention groups' block as the engine sizes them (0.18.0-0.19.1: scaled up to the padded page
            # by unify_kv_cache_spec_page_size after the worker set the config's block back to 16)
            # a draft's own group holds draft layers only; under PP the scheduler's groups are the first stage's,
            # whose attention group holds no layer where the stage has none (Nemotron-Nano-9B-v2 at PP 4)
            def draft(g) -> bool:
                return bool(g.layer_names) and all(n.startswith("draft.") for n in g.layer_names)

            (block_size,) = {
                g.kv_cache_spec.block_size
                for g in kv_groups
                if type(g.kv_cache_spec).__name__ != "MambaSpec" and not draft(g)
            }
            own = {g.kv_cache_spec.block_size for g in kv_groups if draft(g)}
            if own:
                (out["draft_block_size"],) = own
            out.update(
                {
                    "block_size": block_size,
                    "padding_pct_2dp": padding.group(1) if padding else "0.00",
                    "block_logs": block_logs,
                }
            )
        return out


def worker_main(version: str, src: Path, config_root: Path, cases_file: Path, out_file: Path) -> int:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["VLLM_CACHE_ROOT"] = str(src / ".vllm-cache")
    os.environ["VLLM_ALLOW_LONG_MAX_MODEL_LEN"] = "1"  # max_model_len 8192 for every model, as the inputs say
    # vLLM inspects model classes in a subprocess: it gets the wheel first, then the transformers overlay if any
    os.environ["PYTHONPATH"] = os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")])
    if not since(version, "0.11.1"):  # V1 asked for explicitly: a V0-only model is refused, not moved to V0
        os.environ["VLLM_USE_V1"] = "1"
    if since(version, "0.10.2") and not since(version, "0.11.1"):
        # Qwen3-Next's module reads triton.language functions at import that vLLM's Triton placeholder lacks
        # here: vLLM keeps the installed Triton (as on a GPU) when CUDA_VISIBLE_DEVICES is set but empty
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    sys.path.insert(0, str(src))
    todo = json.loads(cases_file.read_text())
    w = Worker(version, config_root, sorted({c["model"] for c in todo}))
    results = []
    for case in todo:
        try:
            results.append({**case, "vllm": w.run(case)})
        except Exception as exc:  # a failure of this script, not an answer of vLLM's: reported, never compared
            import traceback

            results.append({**case, "vllm": {"error": "".join(traceback.format_exception(exc, limit=-4))}})
    out_file.write_text(json.dumps({"results": results, "constructor_asserts": sorted(w.checked_asserts)}))
    return 0


# ==================================================================================================
# Comparison
# ==================================================================================================


def compare(version: str, results: list[dict], report: dict) -> None:
    report["compared"].setdefault(version, 0)
    for r in results:
        theirs = r["vllm"]
        case = {k: r[k] for k in ("model", "tp", "mode", "gdn_backend", "block_size", "kv_dtype")}
        if r.get("draft"):
            case["draft"] = r["draft"]
        if r.get("pp"):
            case["pp"] = r["pp"]
        ours = hybridplan_figures(case, release=version, kv_budget=KV_BUDGET, max_len=MAX_LEN)
        if "not_run" in theirs:
            report["not_run"].append({"release": version, **case, "why": theirs["not_run"]})
            continue
        if "error" in theirs:
            report["errors"].append({"release": version, **case, "error": theirs["error"]})
            continue
        report["compared"][version] += 1
        if (theirs["refused"] is None) != (ours["refused"] is None):
            report["mismatches"].append(
                {
                    "release": version,
                    **case,
                    "figure": "refused",
                    "vllm": theirs["refused"],
                    "hybridplan": ours["refused"],
                }
            )
            continue
        if theirs["refused"] is not None:
            report["refused"].append({"release": version, **case, "vllm": theirs["refused"]})
            continue
        report["cases"].append({"release": version, **case, "vllm": theirs})
        for key, value in theirs.items():
            if key == "refused":
                continue
            report["compared"][version] += 1
            if key not in ours or ours[key] != value:
                report["mismatches"].append(
                    {"release": version, **case, "figure": key, "vllm": value, "hybridplan": ours.get(key, "<missing>")}
                )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--releases", nargs="+", default=list(RELEASES), metavar="X.Y.Z")
    ap.add_argument("--models", nargs="+", metavar="NAME", help="only these shipped specs")
    ap.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "hybridplan-validation")
    ap.add_argument("--json", action="store_true", help="print the whole report as JSON")
    ap.add_argument("--worker", nargs=4, metavar=("VERSION", "SRC", "CASES", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--config-root", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    here = Path(__file__).resolve().parent  # this file is named vllm.py: keep its folder off the import path
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    if args.worker:
        version, src, cases_file, out_file = args.worker
        return worker_main(version, Path(src), args.config_root, Path(cases_file), Path(out_file))

    sys.path.insert(0, str(ROOT))
    cache = args.cache_dir.expanduser().resolve()
    cache.mkdir(parents=True, exist_ok=True)
    configs = shipped_configs()
    if args.models:
        configs = {k: v for k, v in configs.items() if k in args.models}
    report: dict = {
        "compared": {},
        "mismatches": [],
        "refused": [],
        "not_run": [],
        "errors": [],
        "failed": [],
        "cases": [],
        "stand_ins": list(STAND_INS),
        "seconds": {},
    }
    with tempfile.TemporaryDirectory(prefix="hybridplan-vllm-") as tmp:
        config_root = Path(tmp) / "models"
        for name, config in configs.items():
            (config_root / name).mkdir(parents=True)
            (config_root / name / "config.json").write_text(json.dumps(config))
        for version in args.releases:
            start = time.time()
            src = unpack_release(version, cache)
            todo = cases(version, configs)
            cases_file, out_file = Path(tmp) / f"cases-{version}.json", Path(tmp) / f"out-{version}.json"
            cases_file.write_text(json.dumps(todo))
            print(f"vLLM {version}: running {len(todo)} cases ...", file=sys.stderr, flush=True)
            env = dict(os.environ)
            overlay = transformers_overlay(version, cache)
            if overlay is not None:
                env["PYTHONPATH"] = os.pathsep.join([str(overlay), env.get("PYTHONPATH", "")])
            proc = subprocess.run(
                [
                    sys.executable,
                    str(Path(__file__).resolve()),
                    "--config-root",
                    str(config_root),
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
                print(f"vLLM {version}: the worker failed (exit {proc.returncode})", file=sys.stderr)
                report["failed"].append(version)
                continue
            out = json.loads(out_file.read_text())
            compare(version, out["results"], report)
            report.setdefault("constructor_asserts", {})[version] = out["constructor_asserts"]
            report["seconds"][version] = round(time.time() - start, 1)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        for version, n in report["compared"].items():
            bad = sum(m["release"] == version for m in report["mismatches"])
            refused = sum(m["release"] == version for m in report["refused"])
            not_run = sum(m["release"] == version for m in report["not_run"])
            errors = sum(m["release"] == version for m in report["errors"])
            print(
                f"vLLM {version}: {n} comparisons, {bad} mismatches ({refused} cases refused by both"
                + (f", {not_run} not run" if not_run else "")
                + (f", {errors} script errors" if errors else "")
                + f") [{report['seconds'][version]} s]"
            )
        for version in report["failed"]:
            print(f"vLLM {version}: the worker failed (its output is above)")
        total = sum(report["compared"].values())
        print(
            f"total: {total} comparisons, {len(report['mismatches'])} mismatches"
            + (f", {len(report['failed'])} releases failed" if report["failed"] else "")
        )
        for m in report["mismatches"][:40]:
            print("  ", m)
        for m in report["errors"][:5]:
            print("   script error:", {k: v for k, v in m.items() if k != "error"}, "\n", m["error"])
    return 0 if not report["mismatches"] and not report["failed"] and not report["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
