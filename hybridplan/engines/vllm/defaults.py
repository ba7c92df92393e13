"""vLLM's batch defaults and the GDN prefill backend it resolves, by release and GPU.

``--max-num-batched-tokens`` and ``--max-num-seqs`` left unset (vllm/engine/arg_utils.py: ``EngineArgs.
_set_default_args_v1`` in 0.10.0–0.10.2, ``_set_default_max_num_seqs_and_batched_tokens_args`` with
``get_batch_defaults`` later). The tier is chosen from the device's total memory as vLLM reads it
(``current_platform.get_device_total_memory()``: NVML's ``memory.total`` on NVIDIA, the figure nvidia-smi
prints; amdsmi's VRAM total on ROCm) and from the device's name:

=================  ======================  ========================  ==============================
tier               ``vllm serve``          ``LLM(...)``              releases
=================  ======================  ========================  ==============================
≥ 160 GiB          16,384 tokens, 1,024    16,384 tokens, 1,024      0.28.0 on (B200, B300, MI300X)
≥ 70 GiB, not A100 8,192 tokens, 1,024     16,384 tokens, 1,024      0.10.0 on (H100, H200; ≥ 160
                                                                     GiB too before 0.28.0)
otherwise          2,048 tokens, 256       8,192 tokens, 256         0.10.0 on (A100 by name, L40S,
                                                                     RTX 4090/5090, GB10)
=================  ======================  ========================  ==============================

GB10 (DGX Spark) is on the small tier in every release, for two reasons: up to 0.32.0 NVML's memory query
fails on that unified part and ``get_batch_defaults`` catches it and reads 0 bytes; 0.33.0 falls back to the
device properties (vllm/platforms/cuda.py) but keeps it small by its compute capability (12, 1)
(``is_gb10``). A 0.25.1 GB10 log agrees: "max_num_scheduled_tokens is set to 2048" with no
``--max-num-batched-tokens`` (tests/data/logs/vllm-0.25.1-qwen3.8-27b-int4-mtp-gb10-1.log).

Then, for a value left unset: ``--performance-mode throughput`` doubles it (from PERFORMANCE_MODE_FROM); the
token budget is at most ``max_num_seqs × max_model_len`` and ``max_num_seqs`` at most the token budget (both
from CLAMPS_FROM). hybridplan writes ``vllm serve`` commands, so the serve column is the default; a GPU given
by its memory alone (``--gpu-mem``) is matched by memory only (no A100 or GB10 by name), and a bare
``--kv-budget`` names no GPU: the ≥ 70 GiB tier is taken, and the note says so.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from msgspec import Struct

from hybridplan.engines.vllm.releases import Release
from hybridplan.engines.vllm.settings import PERFORMANCE_MODE_FROM
from hybridplan.spec import GatedDeltaNet

if TYPE_CHECKING:
    from hybridplan.gpus import Gpu
    from hybridplan.scenario import Scenario

GiB, MiB = 1 << 30, 1 << 20

#: the tiers' memory bounds (``get_batch_defaults``: ``device_memory >= 70 * GiB_bytes``, ``>= 160 * GiB_bytes``)
LARGE_BYTES, LARGEST_BYTES = 70 * GiB, 160 * GiB
#: the ≥ 160 GiB tier appears in 0.28.0 (absent from 0.27.0's arg_utils.py)
LARGEST_FROM = "0.28.0"
#: ``min(max_num_seqs × max_model_len, tokens)`` and ``min(max_num_seqs, tokens)`` appear in 0.11.1 (absent from
#: 0.11.0's arg_utils.py)
CLAMPS_FROM = "0.11.1"
#: ``is_gb10``: the small tier by compute capability from 0.33.0 (before, NVML's failing query reads 0 bytes)
GB10_CHECK_FROM = "0.33.0"
#: GB10's compute capability (``current_platform.is_device_capability((12, 1))``)
GB10_CC = (12, 1)

#: usage context → tier → (max_num_batched_tokens, max_num_seqs)
TIERS = {
    "serve": {"largest": (16384, 1024), "large": (8192, 1024), "small": (2048, 256)},
    "llm": {"largest": (16384, 1024), "large": (16384, 1024), "small": (8192, 256)},
}
USAGES = tuple(TIERS)


class BatchDefaults(Struct, frozen=True):
    """The two defaults one start takes, and why."""

    max_num_batched_tokens: int
    max_num_seqs: int
    #: "largest" (≥ 160 GiB), "large" (≥ 70 GiB, not A100 or GB10) or "small"
    tier: str
    #: the GPU and memory the tier was read from, in words
    device: str
    #: whether each value was the engine's default (not given)
    tokens_default: bool = True
    seqs_default: bool = True


def device_memory(g: Gpu) -> int:
    """The total vLLM's tier reads: NVML's (nvidia-smi's figure) where gpus.py has it, else the CUDA or
    datasheet total; GB10's NVML query fails, so its device-properties total."""
    if g.unified or not g.smi:
        return g.total
    return g.smi * MiB


class Device(Struct, frozen=True):
    """What vLLM's tier reads of a GPU: its total memory (None: no GPU named), its name and compute capability."""

    mem: int | None
    name: str = ""
    cc: tuple[int, int] | None = None
    #: the GPU in words, for the note
    words: str = "no GPU named (--kv-budget): taken as an H100-class GPU"


def device(gpu: Gpu | None = None, gpu_mem: int | None = None) -> Device:
    """The device of ``--gpu-type`` (by name, memory and compute capability), or of ``--gpu-mem`` alone."""
    from hybridplan.engines.vllm.blocks import COMPUTE_CAPABILITY

    if gpu is not None:
        mem = device_memory(gpu)
        return Device(mem, gpu.name, COMPUTE_CAPABILITY.get(gpu.key), f"the {gpu.key} ({mem / MiB:,.0f} MiB)")
    if gpu_mem is not None:
        return Device(gpu_mem, words=f"a {gpu_mem / GiB:.2f} GiB GPU (by its memory alone)")
    return Device(None)


def tier(rel: Release, dev: Device) -> str:
    """ "largest", "large" or "small" (``get_batch_defaults``)."""
    mem = dev.mem
    if mem is None:  # no GPU named: taken as an H100-class device
        return "large"
    gb10 = dev.cc == GB10_CC
    if gb10 and rel.before(GB10_CHECK_FROM):
        mem = 0  # NVML's memory query raises on GB10; get_batch_defaults falls back to 0 bytes
    if mem >= LARGEST_BYTES and rel.at_least(LARGEST_FROM):
        return "largest"
    if mem >= LARGE_BYTES and "a100" not in dev.name.lower() and not gb10:
        return "large"
    return "small"


def batch_defaults(
    rel: Release,
    dev: Device,
    ctx: int | None = None,
    given: tuple[int | None, int | None] = (None, None),
    usage: str = "serve",
    performance_mode: str | None = None,
) -> BatchDefaults:
    """``max_num_batched_tokens`` and ``max_num_seqs`` of a start at ``ctx`` (max_model_len): each as given
    (``given``), else the release's default for the device."""
    tokens, seqs = given
    which = tier(rel, dev)
    t, s = TIERS[usage][which]
    if performance_mode == "throughput" and rel.at_least(PERFORMANCE_MODE_FROM):
        t, s = t * 2, s * 2
    t = tokens if tokens is not None else t
    s = seqs if seqs is not None else s
    if rel.at_least(CLAMPS_FROM):
        if tokens is None and ctx is not None:
            t = min(s * ctx, t)
        if seqs is None:
            s = min(s, t)
    return BatchDefaults(t, s, which, dev.words, tokens is None, seqs is None)


@cache
def _gpu_by_key(key: str) -> Gpu:
    """``Budget.gpu`` is a GPU's key: looked up once (gpus.gpu builds its table of names on every call)."""
    from hybridplan.gpus import gpu

    return gpu(key)


def _gpu(sc: Scenario) -> Gpu | None:
    return _gpu_by_key(sc.budget.gpu) if sc.budget.gpu else None


def for_scenario(sc: Scenario) -> BatchDefaults:
    """The scenario's ``max_num_batched_tokens`` (``Scenario.chunk`` where given) and ``max_num_seqs``."""
    return batch_defaults(
        sc.vllm.release,
        device(_gpu(sc), sc.budget.gpu_mem),
        sc.ctx,
        (sc.chunk, sc.vllm.max_num_seqs),
        performance_mode=sc.vllm.performance_mode,
    )


def batched_tokens(sc: Scenario) -> int:
    """``--max-num-batched-tokens``: given, else vLLM's default for the GPU and release."""
    return for_scenario(sc).max_num_batched_tokens


def max_num_seqs(sc: Scenario) -> int:
    """``--max-num-seqs``: given, else vLLM's default for the GPU and release."""
    return for_scenario(sc).max_num_seqs


_TIER_WORDS = {
    "largest": "the tier from 160 GiB",
    "large": "the tier from 70 GiB, not A100s or GB10",
    "small": "the tier under 70 GiB, A100s and GB10 included",
}


def note(sc: Scenario) -> str | None:
    """Which defaults were taken and why; None when both were given."""
    d = for_scenario(sc)
    taken = [f"--max-num-batched-tokens {d.max_num_batched_tokens:,}"] if d.tokens_default else []
    taken += [f"--max-num-seqs {d.max_num_seqs:,}"] if d.seqs_default else []
    if not taken:
        return None
    rel = sc.vllm.release
    mode = (
        ", doubled by --performance-mode throughput"
        if sc.vllm.performance_mode == "throughput" and rel.at_least(PERFORMANCE_MODE_FROM)
        else ""
    )
    where = "vllm/engine/arg_utils.py get_batch_defaults"
    word = "defaults" if len(taken) > 1 else "default"
    if d.device == Device(None).words:
        return (
            f"{' and '.join(taken)}: no GPU named (--kv-budget), so vLLM {rel.version}'s `vllm serve` {word} "
            f"for an H100-class GPU ({_TIER_WORDS['large']}{mode}; {where})"
        )
    return (
        f"{' and '.join(taken)}: vLLM {rel.version}'s `vllm serve` {word} for {d.device}, "
        f"{_TIER_WORDS[d.tier]}{mode} ({where})"
    )


# --- the GDN prefill backend ------------------------------------------------------------------------------

#: the FlashInfer GDN prefill kernel on Blackwell needs this key head size and CUDA runtime; vLLM 0.33.0's PyPI
#: wheel is built on CUDA 13 (it requires nvidia-cutlass-dsl[cu13]), so the runtime condition holds
GDN_FLASHINFER_HEAD_K, GDN_FLASHINFER_CUDA = 128, 13
#: the release whose GDN backend changes the block and the checkpoint page (hybridplan/engines/vllm/blocks.py)
GDN_BACKEND_MATTERS_FROM = "0.33.0"


def gdn_prefill_backend(sc: Scenario) -> str:
    """The GDN prefill kernel that runs (vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py
    ``_resolve_gdn_prefill_backend``, 0.33.0): FlashInfer when it is asked for or left to auto, on CUDA, and
    the GPU is Hopper (compute capability 9.0 exactly), or Blackwell 10.x or 12.x with a key head size of 128
    on CUDA 13; triton otherwise (sm_80, sm_86, sm_89, ROCm, and ``--gdn-prefill-backend triton``). The GPU
    is ``--gpu-type``'s, else the compute capability a start-up log states, else Hopper's
    (blocks.py ``compute_capability``)."""
    from hybridplan.engines.vllm.blocks import compute_capability

    asked = sc.vllm.gdn_backend
    if asked == "triton":
        return "triton"
    g = _gpu(sc)
    if g is not None and g.name.startswith("AMD"):
        return "triton"  # ROCm: triton, or AITER FlyDSL where VLLM_ROCM_USE_AITER is set (not modelled)
    cc = compute_capability(sc)
    heads = {m.head_k_dim for m in sc.spec.recurrent if isinstance(m, GatedDeltaNet)}
    if cc == (9, 0):
        return "flashinfer"
    if cc[0] in (10, 12) and heads == {GDN_FLASHINFER_HEAD_K}:
        return "flashinfer"
    return "triton"


def gdn_note(sc: Scenario) -> str | None:
    """Which GDN prefill backend 0.33 runs, where the model has GDN layers and none was given."""
    if (
        sc.vllm.gdn_backend is not None
        or sc.vllm.release.before(GDN_BACKEND_MATTERS_FROM)
        or not any(m.kind == "gdn" for m in sc.spec.recurrent)
    ):
        return None
    from hybridplan.engines.vllm.blocks import compute_capability

    cc = compute_capability(sc)
    b = gdn_prefill_backend(sc)
    return (
        f"GDN prefill backend: {b}, vLLM {sc.vllm.release.version}'s pick on compute capability "
        f"{cc[0]}.{cc[1]} (qwen_gdn_linear_attn.py _resolve_gdn_prefill_backend"
        + ("; FlashInfer's 64-token checkpoint grid applies in align mode)" if b == "flashinfer" else ")")
    )
