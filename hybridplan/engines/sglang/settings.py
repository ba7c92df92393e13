"""The SGLang flags of a scenario, with the release already resolved."""

from __future__ import annotations

from dataclasses import dataclass

from hybridplan.engines.sglang.releases import DEFAULT, Release
from hybridplan.errors import PlanError

#: ``--mamba-radix-cache-strategy`` values, and ``off`` for ``--disable-radix-cache``
STRATEGIES = ("auto", "off", "no_buffer", "extra_buffer")
#: ``--mamba-full-memory-ratio`` fallback (server_args.py schedule fields)
FULL_MEMORY_RATIO = 0.9
#: ``--mem-fraction-static`` taken when none is given
MEM_FRACTION_STATIC = 0.88


@dataclass(frozen=True)
class SglangSettings:
    release: Release = DEFAULT
    radix: str = "auto"
    #: the overlap scheduler (on unless ``--disable-overlap-schedule``)
    overlap: bool = True
    full_memory_ratio: float = FULL_MEMORY_RATIO
    #: ``--max-running-requests``; None = SGLang's estimate
    max_running_requests: int | None = None
    mem_fraction_static: float = MEM_FRACTION_STATIC

    def __post_init__(self) -> None:
        if self.radix not in STRATEGIES:
            raise PlanError(f"unknown radix strategy {self.radix!r} (known: {', '.join(STRATEGIES)})")
        if self.full_memory_ratio <= 0:
            raise PlanError(f"--mamba-full-memory-ratio must be positive, got {self.full_memory_ratio}")
        if self.max_running_requests is not None and self.max_running_requests <= 0:
            raise PlanError(f"--max-running-requests must be positive, got {self.max_running_requests}")
