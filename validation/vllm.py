"""Compare hybridplan's vLLM figures with vLLM's own code, run from the published vLLM wheels on a CPU.

    python validation/vllm.py [--releases 0.23.0 0.28.0 0.32.0 0.33.0] [--models NAME ...]
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
cache mode of the release:

* ``ModelConfig`` (``vllm/config/model.py``) built from a folder holding the spec's ``config:`` mapping as
  ``config.json``: vLLM's own config loading (``transformers_utils/config.py``), dtype resolution, model
  registry and inspection; ``CacheConfig``, ``ParallelConfig`` and ``VllmConfig``, whose construction runs the
  model's config hooks (``vllm/model_executor/models/config.py``: ``MambaModelConfig``,
  ``HybridAttentionMambaModelConfig``, the Nemotron-H and Qwen3.5 SSM-dtype hooks) and the TP checks;
* the model class (found by vLLM's ``ModelRegistry``): ``get_mamba_state_shape_from_config`` and
  ``get_mamba_state_dtype_from_config``;
* ``Platform.update_block_size_for_backend`` and ``_align_hybrid_block_size`` (``vllm/platforms/interface.py``)
  on the real ``CacheConfig``;
* the layers' ``get_kv_cache_spec`` (``Attention``, ``MambaBase``, ``MambaMixer2``, the Qwen GDN layer), with
  ``get_mamba_prefill_checkpoint_alignment``;
* KV cache grouping and sizing: 0.33 ``kv_cache_planning.get_global_kv_cache_groups`` and
  ``get_kv_cache_configs``; <= 0.32 ``kv_cache_utils.get_kv_cache_configs``; then
  ``generate_scheduler_kv_cache_config``, ``get_max_concurrency_for_kv_cache_config`` and the capacity log
  (``update_kv_cache_capacity``, or ``_report_kv_cache_config`` in 0.23).

Stand-ins (runtime context only; see ``STAND_INS``): the platform (a subclass of vLLM's base ``Platform``
reporting CUDA on a Hopper GPU, no device queried), the attention backend (FlashAttention's kernel blocks on
Hopper: multiples of 16), the GDN prefill backend choice (FlashInfer, Hopper's default, or Triton), the loaded
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

ROOT = Path(__file__).resolve().parents[1]
GiB = 1 << 30
RELEASES = ("0.23.0", "0.28.0", "0.32.0", "0.33.0")
TPS = (1, 2, 4, 8)
KV_BUDGET = 40 * GiB
MAX_LEN = 8192
#: architectures run, and the vLLM layer class of their recurrent mixer
ARCHS = {
    "NemotronHForCausalLM": "mamba_mixer2.MambaMixer2",
    "FalconH1ForCausalLM": "mamba_mixer2.MambaMixer2",
    "Zamba2ForCausalLM": "mamba_mixer2.MambaMixer2",
    "Mamba2ForCausalLM": "mamba_mixer2.MambaMixer2",
    "GraniteMoeHybridForCausalLM": "mamba_mixer2.MambaMixer2",
    "BambaForCausalLM": "mamba_mixer2.MambaMixer2",
    "JambaForCausalLM": "mamba_mixer.MambaMixer",
    "MambaForCausalLM": "mamba_mixer.MambaMixer",
    "FalconMambaForCausalLM": "mamba_mixer.MambaMixer",
    "Lfm2ForCausalLM": "short_conv.ShortConv",
    "Qwen3NextForCausalLM": "gdn.qwen_gdn_linear_attn.QwenGatedDeltaNetAttention",
    "Qwen3_5ForConditionalGeneration": "gdn.qwen_gdn_linear_attn.QwenGatedDeltaNetAttention",
}
GDN_ARCHS = ("Qwen3NextForCausalLM", "Qwen3_5ForConditionalGeneration")
#: before 0.22 the GDN layer sat in one module of its own
GDN_BEFORE_0_22 = "gdn_linear_attn.GatedDeltaNetAttention"


def mixer(arch: str, version: str) -> str:
    """The module (under vllm/model_executor/layers/mamba/) and class of the architecture's recurrent layer."""
    if arch in GDN_ARCHS and minor(version) < 22:
        return GDN_BEFORE_0_22
    return ARCHS[arch]
STAND_INS = (
    "platform: vLLM's base Platform subclassed as CUDA on compute capability 9.0 (Hopper)",
    "attention backend: FlashAttention's kernel block sizes on Hopper, MultipleOf(16)",
    "GDN prefill backend: FlashInfer (Hopper's default) or Triton, as the layer's __init__ would pick",
    "layers: vLLM's layer classes without __init__; which layers exist is read from the HF config; "
    "recurrent layers report the model class's state shapes/dtypes, attention layers ModelConfig's heads",
    "model runner: its loop calling each layer's get_kv_cache_spec",
    "KV budget: 40 GiB per worker in place of the profiling run",
)


# ==================================================================================================
# hybridplan: every call into hybridplan is in this one function
# ==================================================================================================


def hybridplan_figures(name: str, *, tp: int, release: str, mode: str, kv_budget: int, max_len: int,
                       gdn_backend: str = "flashinfer") -> dict:
    """hybridplan's figures for one case, with the keys the vLLM side reports (``vllm_figures``).

    ``{"refused": why}`` when hybridplan refuses the TP size or the mode."""
    from hybridplan.engines import vllm
    from hybridplan.errors import PlanError
    from hybridplan.loader import load_model
    from hybridplan.scenario import Scenario

    spec = load_model(name)
    rel = vllm.release(release)
    try:
        rel.check_served(spec)
        mode = rel.modes_for(spec, mode)[0]  # `all` on a model without it runs as vLLM falls back
        sc = Scenario(spec, ctx=max_len, tp=tp, vllm=vllm.VllmSettings(release=rel, gdn_backend=gdn_backend))
        fp = vllm.footprint(sc)
        cap = vllm.capacity(sc, mode, kv_budget)
    except PlanError as exc:
        return {"refused": str(exc)}
    state = fp.state[0]
    lay = cap.layout
    out = {
        "refused": None,
        "mamba_cache_mode": mode,
        "mamba_layers": sum(g.count for g in fp.state),
        "attention_layers": sum(g.count for g in fp.kv),
        "conv_bytes_per_layer": state.conv_bytes_per_layer,
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
        "capacity_logs": list(cap.logs),
    }
    if fp.kv:
        out.update({"block_size": lay.block_size, "padding_pct_2dp": f"{lay.padding_pct:.2f}",
                    "block_logs": list(lay.logs)})
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
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", f"vllm=={version}",
                        "-d", str(wheels)], check=True)
        found = sorted(wheels.glob(f"vllm-{version}-*.whl"))
    with zipfile.ZipFile(found[0]) as zf:
        zf.extractall(src, [n for n in zf.namelist() if n.startswith("vllm/") and n.endswith(".py")])
    done.write_text(found[0].name)
    return src


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


def minor(version: str) -> int:
    return int(version.split(".")[1])


def modes(version: str, config: dict) -> tuple[str, ...]:
    """The Mamba cache modes of the release (vllm/config/cache.py ``MambaCacheMode``); prefix caching needs
    attention layers here, so attention-free models run in `none` only."""
    if config.get("architectures", [""])[0] in ("MambaForCausalLM", "FalconMambaForCausalLM",
                                                 "Mamba2ForCausalLM"):
        return ("none",)
    return ("none", "align") if minor(version) >= 32 else ("none", "align", "all")


def cases(version: str, configs: dict[str, dict]) -> list[dict]:
    out = []
    for name, config in configs.items():
        arch = config["architectures"][0]
        for tp in TPS:
            for mode in modes(version, config):
                backends = ("flashinfer", "triton") if (arch in GDN_ARCHS and mode == "align"
                                                        and minor(version) >= 33) else ("flashinfer",)
                for gdn in backends:
                    out.append({"model": name, "arch": arch, "tp": tp, "mode": mode, "gdn_backend": gdn})
    return out


# ==================================================================================================
# The vLLM side: runs in a subprocess whose sys.path starts with the unpacked wheel
# ==================================================================================================


class Worker:
    def __init__(self, version: str, config_root: Path, names: list[str]) -> None:
        import logging

        self.version = version
        self.minor = minor(version)
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
        from vllm.v1.attention.backend import AttentionBackend, MultipleOf

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

            @property
            def supported_dtypes(self) -> list:
                return [torch.bfloat16, torch.float16, torch.float32]

        class FlashAttentionOnHopper(AttentionBackend):
            """Stand-in: the attention backend's kernel block sizes, as FlashAttention on Hopper."""

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

        # Everything vLLM imports is imported, and every ModelConfig built, under the platform vLLM finds on
        # this machine: under CUDA some modules would load CUDA-only extensions.
        import importlib

        from vllm.model_executor.models import ModelRegistry

        for module in ("vllm.model_executor.layers.attention.attention", "vllm.v1.core.kv_cache_utils",
                       *(f"vllm.model_executor.layers.mamba.{mixer(a, version).rsplit('.', 1)[0]}" for a in ARCHS)):
            importlib.import_module(module)
        if self.minor >= 33:
            importlib.import_module("vllm.v1.core.kv_cache_planning")
        for arch in ARCHS:
            registered = ModelRegistry.models.get(arch)
            if registered is not None and hasattr(registered, "module_name"):
                importlib.import_module(registered.module_name)
        self.record_shape_calls()
        self.checked_asserts: set[str] = set()
        self.model_configs: dict[str, object] = {}
        for name in names:
            self.model_config(name)
        platforms.current_platform = HopperCuda()
        self.platform = platforms.current_platform
        self.backend = FlashAttentionOnHopper

    # -- configs ---------------------------------------------------------------------------------

    def model_config(self, name: str):
        if name not in self.model_configs:
            from vllm.config import ModelConfig

            path = str(self.config_root / name)
            self.model_configs[name] = ModelConfig(model=path, tokenizer=path, skip_tokenizer_init=True,
                                                   max_model_len=MAX_LEN)
        return self.model_configs[name]

    def vllm_config(self, name: str, tp: int, mode: str):
        import copy

        from vllm.config import CacheConfig, ParallelConfig, VllmConfig

        mc = copy.deepcopy(self.model_config(name))
        cc = CacheConfig(enable_prefix_caching=mode != "none", mamba_cache_mode=mode)
        pc = ParallelConfig(tensor_parallel_size=tp)
        return VllmConfig(model_config=mc, cache_config=cc, parallel_config=pc)

    def record_shape_calls(self) -> None:
        """Record the arguments the model class passes to ``MambaStateShapeCalculator`` (the same config
        fields it passes to its mixer's constructor), calling the original unchanged."""
        from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator

        self.shape_calls: list[dict] = []
        for name in [n for n in vars(MambaStateShapeCalculator) if n.endswith("_state_shape")]:
            original = getattr(MambaStateShapeCalculator, name)

            def recorder(*args, _original=original, **kwargs):
                self.shape_calls.append(kwargs)
                return _original(*args, **kwargs)

            setattr(MambaStateShapeCalculator, name, recorder)

    def constructor_asserts(self, arch: str, tp: int) -> None:
        """The mixer constructor's own top-level ``assert`` statements (e.g. ``MambaMixer2``: TP must divide
        the heads, and the groups unless there is one), executed unmodified from the wheel's source with the
        values the model class passed for the state shape. The rest of the constructor is not run."""
        import ast
        import builtins
        import importlib
        import inspect
        import textwrap
        import types

        module, cls_name = mixer(arch, self.version).rsplit(".", 1)
        cls = getattr(importlib.import_module(f"vllm.model_executor.layers.mamba.{module}"), cls_name)
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
                self.checked_asserts.add(f"{cls_name}.__init__: {ast.unparse(node.test)}")

    # -- the loaded model's layers (stand-in) ------------------------------------------------------

    @staticmethod
    def layer_kinds(arch: str, hf) -> list[str]:
        """Per decoder layer, the cache-holding mixers the vLLM model class builds, read from the HF config
        the way the model class reads it."""
        text = hf.get_text_config() if hasattr(hf, "get_text_config") else hf
        if arch == "NemotronHForCausalLM":
            return [{"M": "mamba", "*": "attention"}.get(c, "") for c in hf.hybrid_override_pattern]
        if arch == "FalconH1ForCausalLM":  # every layer holds a Mamba-2 mixer and an attention block
            return ["mamba+attention"] * hf.num_hidden_layers
        if arch == "Zamba2ForCausalLM":  # a hybrid layer adds one KV cache of the shared attention block
            return ["mamba+attention" if t == "hybrid" else "mamba" for t in hf.layers_block_type]
        if arch in ("JambaForCausalLM", "GraniteMoeHybridForCausalLM", "BambaForCausalLM"):
            types = getattr(hf, "layers_block_type", None) or getattr(hf, "layer_types")
            return ["mamba" if t == "mamba" else "attention" for t in types]
        if arch in ("MambaForCausalLM", "FalconMambaForCausalLM", "Mamba2ForCausalLM"):
            return ["mamba"] * hf.num_hidden_layers
        if arch == "Lfm2ForCausalLM":
            return ["attention" if t == "full_attention" else "mamba" for t in hf.layer_types]
        if arch in GDN_ARCHS:
            return ["attention" if t == "full_attention" else "mamba" for t in text.layer_types]
        raise KeyError(arch)

    def build_layers(self, vc, arch: str, shapes, dtypes, gdn_backend: str) -> dict:
        import importlib

        import torch
        from vllm.model_executor.layers.attention.attention import Attention
        from vllm.v1.attention.backend import AttentionType

        module, cls_name = mixer(arch, self.version).rsplit(".", 1)
        mixer_module = importlib.import_module(f"vllm.model_executor.layers.mamba.{module}")
        mixer_cls = getattr(mixer_module, cls_name)
        mc, pc, cc = vc.model_config, vc.parallel_config, vc.cache_config
        kv_dtype = mc.dtype if cc.cache_dtype == "auto" else cc.cache_dtype
        layers: dict = {}
        for i, kinds in enumerate(self.layer_kinds(arch, mc.hf_config)):
            for kind in kinds.split("+"):
                if kind == "mamba":
                    layer = mixer_cls.__new__(mixer_cls)
                    torch.nn.Module.__init__(layer)
                    layer.get_state_shape = lambda s=shapes: s
                    layer.get_state_dtype = lambda d=dtypes: d
                    layer.vllm_config = vc
                    layer.model_config, layer.cache_config = mc, cc
                    if hasattr(mixer_module, "FLASHINFER_GDN_CHECKPOINT_ALIGNMENT"):
                        # as QwenGatedDeltaNetAttention.__init__: FlashInfer's prefill exports checkpoints in align
                        layer._checkpoint_alignment = (
                            mixer_module.FLASHINFER_GDN_CHECKPOINT_ALIGNMENT
                            if cc.mamba_cache_mode == "align" and gdn_backend == "flashinfer" else None)
                    layers[f"model.layers.{i}.mixer"] = layer
                elif kind == "attention":
                    layer = Attention.__new__(Attention)
                    torch.nn.Module.__init__(layer)
                    layer.attn_type = AttentionType.DECODER
                    layer.num_kv_heads = mc.get_num_kv_heads(pc)
                    layer.head_size = layer.head_size_v = mc.get_head_size()
                    layer.kv_cache_dtype = cc.cache_dtype
                    layer.kv_cache_torch_dtype = kv_dtype
                    layer.sliding_window = None
                    layer.attn_backend = self.backend
                    layer.layer_name = f"model.layers.{i}.self_attn.attn"
                    layers[layer.layer_name] = layer
        return layers

    # -- one case ---------------------------------------------------------------------------------

    def run(self, case: dict) -> dict:
        from math import prod

        try:
            vc = self.vllm_config(case["model"], case["tp"], case["mode"])
            from vllm.model_executor.models import ModelRegistry

            mc = vc.model_config
            model_cls, _ = ModelRegistry.resolve_model_cls(mc.architectures, model_config=mc)
            self.shape_calls.clear()
            shapes = model_cls.get_mamba_state_shape_from_config(vc)
            dtypes = model_cls.get_mamba_state_dtype_from_config(vc)
            self.constructor_asserts(case["arch"], case["tp"])
        except (ValueError, AssertionError, TypeError) as exc:
            return {"refused": f"{type(exc).__name__}: {exc}"}
        layers = self.build_layers(vc, case["arch"], shapes, dtypes, case["gdn_backend"])
        vc.compilation_config.static_forward_context.update(layers)

        self.messages.clear()
        self.platform.update_block_size_for_backend(vc)
        block_logs = [m for m in self.messages
                      if m.startswith(("Setting attention block size", "Padding mamba page size"))]

        # the model runner: each layer's spec
        specs = {}
        for layer_name, layer in layers.items():
            spec = layer.get_kv_cache_spec(vc)
            if spec is not None:
                specs[layer_name] = spec
        workers = case["tp"]
        from vllm.logger import _print_info_once

        _print_info_once.cache_clear()
        self.messages.clear()
        from vllm.v1.attention.backends import utils as backend_utils

        if hasattr(backend_utils, "resolve_kv_cache_layout"):  # the engine core resolves it first (0.33)
            layouts = [x.name for x in backend_utils.get_supported_kv_cache_layouts([self.backend])]
            backend_utils.resolve_kv_cache_layout(vc, [layouts] * workers, list(specs.values()))
        if self.minor >= 33:
            from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups, get_kv_cache_configs

            groups = get_global_kv_cache_groups(vc, [specs] * workers)
            configs = get_kv_cache_configs(vc, [dict(specs) for _ in range(workers)], [KV_BUDGET] * workers,
                                           groups)
        else:
            from vllm.v1.core.kv_cache_utils import get_kv_cache_configs

            configs = get_kv_cache_configs(vc, [dict(specs) for _ in range(workers)], [KV_BUDGET] * workers)
        from vllm.v1.core import kv_cache_utils

        sched = kv_cache_utils.generate_scheduler_kv_cache_config(configs)
        conc = kv_cache_utils.get_max_concurrency_for_kv_cache_config(vc, sched)
        if hasattr(kv_cache_utils, "update_kv_cache_capacity"):
            kv_cache_utils.update_kv_cache_capacity(vc, sched)
        # the grouping's padding warning comes once per worker in this process: each distinct line once
        capacity_logs = list(dict.fromkeys(m for m in self.messages if "KV cache size" in m or m.startswith(
            ("Maximum concurrency", "Add "))))
        tokens = re.search(r"KV cache size: ([\d,]+) tokens", "\n".join(capacity_logs))

        kv_groups = sched.kv_cache_groups
        mamba_specs = [s for s in specs.values() if type(s).__name__ == "MambaSpec"]
        attn = [n for n, s in specs.items() if type(s).__name__ != "MambaSpec"]
        conv_bytes = prod(shapes[0]) * dtypes[0].itemsize
        ssm_bytes = prod(shapes[1]) * dtypes[1].itemsize if len(shapes) > 1 else 0
        out = {
            "refused": None,
            "mamba_cache_mode": vc.cache_config.mamba_cache_mode,  # the config hooks may change the mode asked
            "mamba_layers": len(mamba_specs),
            "attention_layers": len(attn),
            "conv_bytes_per_layer": conv_bytes,
            "ssm_bytes_per_layer": ssm_bytes,
            "conv_dtype": str(dtypes[0]).removeprefix("torch."),
            "ssm_dtype": str(dtypes[1]).removeprefix("torch.") if len(dtypes) > 1 else None,
            "mamba_page_bytes": sum(prod(s) * d.itemsize for s, d in zip(shapes, dtypes)),
            "page_bytes": mamba_specs[0].page_size_bytes,
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
            out.update({"block_size": vc.cache_config.block_size,
                        "padding_pct_2dp": padding.group(1) if padding else "0.00", "block_logs": block_logs})
        return out


def worker_main(version: str, src: Path, config_root: Path, cases_file: Path, out_file: Path) -> int:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["VLLM_CACHE_ROOT"] = str(src / ".vllm-cache")
    os.environ["VLLM_ALLOW_LONG_MAX_MODEL_LEN"] = "1"  # max_model_len 8192 for every model, as the inputs say
    os.environ["PYTHONPATH"] = str(src)  # vLLM inspects model classes in a subprocess
    sys.path.insert(0, str(src))
    todo = json.loads(cases_file.read_text())
    w = Worker(version, config_root, sorted({c["model"] for c in todo}))
    results = []
    for case in todo:
        results.append({**case, "vllm": w.run(case)})
    out_file.write_text(json.dumps({"results": results, "constructor_asserts": sorted(w.checked_asserts)}))
    return 0


# ==================================================================================================
# Comparison
# ==================================================================================================


def compare(version: str, results: list[dict], report: dict) -> None:
    for r in results:
        theirs = r["vllm"]
        case = {k: r[k] for k in ("model", "tp", "mode", "gdn_backend")}
        ours = hybridplan_figures(r["model"], tp=r["tp"], release=version, mode=r["mode"], kv_budget=KV_BUDGET,
                                  max_len=MAX_LEN, gdn_backend=r["gdn_backend"])
        report["compared"][version] = report["compared"].get(version, 0) + 1
        if (theirs["refused"] is None) != (ours["refused"] is None):
            report["mismatches"].append({"release": version, **case, "figure": "refused",
                                         "vllm": theirs["refused"], "hybridplan": ours["refused"]})
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
                report["mismatches"].append({"release": version, **case, "figure": key, "vllm": value,
                                             "hybridplan": ours.get(key, "<missing>")})


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
    report: dict = {"compared": {}, "mismatches": [], "refused": [], "cases": [], "stand_ins": list(STAND_INS),
                    "seconds": {}}
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
            proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--config-root", str(config_root),
                                   "--worker", version, str(src), str(cases_file), str(out_file)],
                                  cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if proc.returncode != 0:
                print(proc.stdout[-6000:], file=sys.stderr)
                print(f"vLLM {version}: the worker failed (exit {proc.returncode})", file=sys.stderr)
                return 1
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
            print(f"vLLM {version}: {n} comparisons, {bad} mismatches ({refused} cases refused by both)"
                  f" [{report['seconds'][version]} s]")
        total = sum(report["compared"].values())
        print(f"total: {total} comparisons, {len(report['mismatches'])} mismatches")
        for m in report["mismatches"][:40]:
            print("  ", m)
    return 0 if not report["mismatches"] else 1


if __name__ == "__main__":
    sys.exit(main())
