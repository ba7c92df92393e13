"""The flags of `replay` that are no part of a start-up: how the trace runs, and the engines' prefix-cache
flags. Frozen, built once at the edge beside the ``Scenario``."""

from __future__ import annotations

from msgspec import Struct

from hybridplan.errors import PlanError


class ReplaySettings(Struct, frozen=True):
    #: requests in flight at once (1: one after another)
    concurrency: int = 1
    #: the most requests replayed from the trace (None: all)
    limit: int | None = None
    #: vLLM ``--prefix-cache-retention-interval`` (0.29+; the env var VLLM_PREFIX_CACHE_RETENTION_INTERVAL
    #: 0.24–0.28); None = the release's default
    retention_interval: int | None = None
    #: vLLM ``--prefix-match-unit`` (0.26+)
    prefix_match_unit: int | None = None
    #: vLLM ``--enable-mamba-shared-prefix-checkpoint`` (0.31+; --enable-mamba-fine-grained-prefix-cache in 0.30)
    shared_prefix_checkpoint: bool = False
    #: vLLM ``--num-gpu-blocks-override``
    num_gpu_blocks_override: int | None = None
    #: SGLang ``--max-total-tokens``
    max_total_tokens: int | None = None
    #: SGLang ``--mamba-max-states-per-path`` (-1: unlimited)
    mamba_max_states_per_path: int = -1
    #: SGLang ``--enable-int8-mamba-checkpoint``
    int8_checkpoint: bool = False
    #: list every request in the JSON (``requests[i]``)
    per_request: bool = True
    #: split each row's gap to the ideal cache into causes (counterfactual replays in the same pass)
    gap: bool = True

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise PlanError(f"--concurrency must be at least 1, got {self.concurrency}")
        for flag, v in (
            ("--limit", self.limit),
            ("--prefix-match-unit", self.prefix_match_unit),
            ("--num-gpu-blocks-override", self.num_gpu_blocks_override),
            ("--max-total-tokens", self.max_total_tokens),
        ):
            if v is not None and v <= 0:
                raise PlanError(f"{flag} must be positive, got {v}")
        if self.retention_interval is not None and self.retention_interval < 0:
            raise PlanError(f"--prefix-cache-retention-interval must be ≥ 0, got {self.retention_interval}")
