"""SGLang's defaults by GPU memory and release: ``--chunked-prefill-size`` and the decode CUDA-graph batch
(``cuda_graph_max_bs``) when none is given.

SGLang reads the GPU's memory in MiB from nvidia-smi's ``memory.total`` (python/sglang/srt/utils
``get_nvgpu_memory_capacity``; amdsmi/rocm-smi on ROCm) and picks (python/sglang/srt/server_args.py
``__post_init__`` in 0.5.2–0.5.3rc0, ``_handle_gpu_memory_settings`` from 0.5.3rc2, arg_groups/memory_hook.py
from 0.5.19):

===============  ==============================  ====================================
GPU memory       chunked_prefill_size            releases
===============  ==============================  ====================================
< 20 GiB         2,048                           0.5.3rc2 on (T4, RTX 4080)
20–35 GiB        2,048; 4,096 from 0.5.20        0.5.3rc2 on (A10, L4, RTX 4090/5090)
35–60 GiB        4,096                           0.5.3rc2 on (A100 40 GB, L40S)
60–160 GiB       8,192                           0.5.3rc2 on (H100, A100 80 GB, H200)
≥ 160 GiB        16,384                          0.5.3rc2 on (B200, MI300X)
< 35 GiB         2,048                           0.5.2–0.5.3rc0
35–160 GiB       8,192                           0.5.2–0.5.3rc0 (L40S included)
≥ 160 GiB        16,384                          0.5.2–0.5.3rc0
no GPU found     4,096                           every release
===============  ==============================  ====================================

``--max-running-requests`` has no per-GPU default in any release: left unset it is derived from the KV pool
(hybridplan/engines/sglang/pool.py ``Admission``). A bare ``--kv-budget`` names no GPU; hybridplan then takes the
60–160 GiB tier (8,192), as for vLLM's H100-class default, and says so.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from hybridplan.engines.sglang.releases import Release

if TYPE_CHECKING:
    from hybridplan.scenario import Scenario

GiB, MiB = 1 << 30, 1 << 20
#: the chunk of a scenario that names no GPU (the 60–160 GiB tier)
NO_GPU_CHUNK = 8192
#: the tiers by memory appear in 0.5.3rc2 (``_handle_gpu_memory_settings``); 20–35 GiB moves to 4,096 in 0.5.20
TIERS_FROM, MID_CHUNK_FROM = "0.5.3rc2", "0.5.20"
#: the rule moved to python/sglang/srt/arg_groups/memory_hook.py in 0.5.19
HOOK_FROM = "0.5.19"


def chunked_prefill_size(rel: Release, mem_mib: float) -> int:
    """``chunked_prefill_size`` SGLang picks for a GPU of ``mem_mib`` MiB (nvidia-smi's total)."""
    if rel.before(TIERS_FROM):
        if mem_mib < 35 * 1024:
            return 2048
        return 8192 if mem_mib < 160 * 1024 else 16384
    if mem_mib < 20 * 1024:
        return 2048
    if mem_mib < 35 * 1024:
        return 4096 if rel.at_least(MID_CHUNK_FROM) else 2048
    if mem_mib < 60 * 1024:
        return 4096
    return 8192 if mem_mib < 160 * 1024 else 16384


def decode_graph_bs(rel: Release, mem_mib: float, tp: int) -> int:
    """``cuda_graph_max_bs`` SGLang picks (0.5.3rc2 on): 8 under 20 GiB; 20–35 GiB 16 (24 from 0.5.4.post1, 48
    from 0.5.20) below TP 4, else 80 (160 from 0.5.20); 35–60 GiB 32, or 160 at TP ≥ 4; 60–160 GiB 256, or 512 at
    TP ≥ 4; 512 from 160 GiB."""
    if mem_mib < 20 * 1024:
        return 8
    if mem_mib < 35 * 1024:
        if tp >= 4:
            return 160 if rel.at_least("0.5.20") else 80
        return 48 if rel.at_least("0.5.20") else (24 if rel.at_least("0.5.4.post1") else 16)
    if mem_mib < 60 * 1024:
        return 32 if tp < 4 else 160
    return (256 if tp < 4 else 512) if mem_mib < 160 * 1024 else 512


@cache
def _smi_mib(key: str) -> float:
    from hybridplan.gpus import gpu

    return gpu(key).smi_mib


def gpu_mib(sc: Scenario) -> float | None:
    """The GPU's memory as SGLang reads it (nvidia-smi's MiB), or None where no GPU is named."""
    b = sc.budget
    if b.gpu:
        return _smi_mib(b.gpu)
    return b.gpu_mem / MiB if b.gpu_mem is not None else None


def chunk(sc: Scenario) -> int:
    """``--chunked-prefill-size``: given, else SGLang's default for the GPU and release."""
    if sc.chunk is not None:
        return sc.chunk
    mib = gpu_mib(sc)
    return NO_GPU_CHUNK if mib is None else chunked_prefill_size(sc.sglang.release, mib)


def note(sc: Scenario) -> str | None:
    """Which chunk was taken and why; None where it was given."""
    if sc.chunk is not None:
        return None
    mib, rel = gpu_mib(sc), sc.sglang.release
    if mib is None:
        return (
            f"--chunked-prefill-size not given and no GPU named: {NO_GPU_CHUNK:,}, SGLang's default for a "
            "60–160 GiB GPU (H100-class), taken as hybridplan's default"
        )
    who = f"the {sc.budget.gpu}" if sc.budget.gpu else "a GPU"
    where = (
        "server_args.py __post_init__"
        if rel.before(TIERS_FROM)
        else "server_args.py _handle_gpu_memory_settings"
        if rel.before(HOOK_FROM)
        else "arg_groups/memory_hook.py"
    )
    return f"--chunked-prefill-size {chunk(sc):,}: SGLang {rel.version}'s default for {who} of {mib:,.0f} MiB ({where})"
