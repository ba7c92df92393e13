"""The vLLM flags of a scenario, with the release already resolved."""

from __future__ import annotations

from msgspec import Struct

from hybridplan.engines.vllm.releases import NEWEST, Release
from hybridplan.errors import PlanError

#: vllm/config/vllm.py ``PerformanceMode``; the flag and its doubling from 0.17.0 (absent from 0.16.0's
#: vllm/engine/arg_utils.py; defaults.py)
PERFORMANCE_MODES = ("balanced", "interactivity", "throughput")
PERFORMANCE_MODE_FROM = "0.17.0"

#: GDN prefill backends vLLM can pick (vllm/v1/attention/backends/gdn_attn.py, 0.33)
GDN_BACKENDS = ("flashinfer", "triton")


class VllmSettings(Struct, frozen=True):
    """The vLLM release and flags of a scenario (None: vLLM's own default for the model and GPU)."""

    release: Release = NEWEST
    #: ``--mamba-cache-mode``; None = every mode of the release
    mode: str | None = None
    #: ``--block-size`` (the block only grows from it)
    block_size: int | None = None
    #: ``--gdn-prefill-backend``; None = auto, the pick for the GPU (hybridplan/engines/vllm/defaults.py
    #: ``gdn_prefill_backend``)
    gdn_backend: str | None = None
    #: ``--max-num-seqs``; None = the default for the GPU
    max_num_seqs: int | None = None
    #: ``--gpu-memory-utilization``; None = the release's default
    gpu_util: float | None = None
    #: ``--enforce-eager``: no CUDA graphs, so no max_num_seqs check against the Mamba blocks
    enforce_eager: bool = False
    #: the GPU's compute capability as a start-up log states it, where no ``--gpu-type`` names the GPU (the block
    #: unit depends on it: hybridplan/engines/vllm/blocks.py ``compute_capability``)
    compute_capability: tuple[int, int] | None = None
    #: ``--performance-mode`` (0.17.0 on; None = balanced): throughput doubles the batch defaults (defaults.py)
    performance_mode: str | None = None

    def __post_init__(self) -> None:
        if self.mode is not None:
            self.release.check_mode(self.mode)
        if self.block_size is not None and self.block_size < 1:
            raise PlanError(f"--block-size must be positive, got {self.block_size}")
        if self.gdn_backend is not None and self.gdn_backend not in GDN_BACKENDS:
            raise PlanError(f"unknown --gdn-prefill-backend {self.gdn_backend!r} (known: {', '.join(GDN_BACKENDS)})")
        if self.performance_mode is not None and self.performance_mode not in PERFORMANCE_MODES:
            raise PlanError(
                f"unknown --performance-mode {self.performance_mode!r} (known: {', '.join(PERFORMANCE_MODES)})"
            )
        if self.performance_mode is not None and self.release.before(PERFORMANCE_MODE_FROM):
            raise PlanError(
                f"vLLM {self.release.version} has no --performance-mode (it appears in {PERFORMANCE_MODE_FROM})"
            )
        if self.max_num_seqs is not None and self.max_num_seqs <= 0:
            raise PlanError(f"--max-num-seqs must be positive, got {self.max_num_seqs}")
