"""The SGLang flags of a scenario, with the release already resolved."""

from __future__ import annotations

from msgspec import Struct

from hybridplan.engines.sglang.hicache import HiCache
from hybridplan.engines.sglang.releases import DEFAULT, STRATEGIES, Release
from hybridplan.errors import PlanError

#: ``--mamba-full-memory-ratio`` fallback (server_args.py schedule fields)
FULL_MEMORY_RATIO = 0.9
#: the environment variables of SGLang's Mamba sizing that `--sglang-env` sets, and the values each takes
ENV = {"SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK": ("0", "1", "true", "false")}
#: ``--max-running-requests`` SGLang sets for speculative decoding when none is given
#: (arg_groups/speculative_hook.py; server_args.py before 0.5.15)
SPEC_MAX_RUNNING_REQUESTS = 48


class SglangSettings(Struct, frozen=True):
    """The SGLang release and flags of a scenario (None: SGLang's own default for the model and GPU)."""

    release: Release = DEFAULT
    radix: str = "auto"
    #: the overlap scheduler (on unless ``--disable-overlap-schedule``)
    overlap: bool = True
    full_memory_ratio: float = FULL_MEMORY_RATIO
    #: ``--max-running-requests``; None = SGLang's estimate
    max_running_requests: int | None = None
    #: ``--max-mamba-cache-size``; None = from the memory split
    max_mamba_cache_size: int | None = None
    #: ``--mem-fraction-static``; None = SGLang's default for the GPU (memory.py)
    mem_fraction_static: float | None = None
    #: ``--page-size``: tokens per KV page
    page_size: int = 1
    #: ``--speculative-num-draft-tokens``; None = the scenario's speculative tokens + 1 (EAGLE with top-k 1)
    draft_tokens: int | None = None
    #: ``SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=1``
    skip_decode_lock: bool = False
    #: ``--enable-hierarchical-cache`` and its ``--hicache-*`` flags (hicache.py); None = off
    hicache: HiCache | None = None

    def __post_init__(self) -> None:
        if self.radix not in STRATEGIES:
            raise PlanError(f"unknown radix strategy {self.radix!r} (known: {', '.join(STRATEGIES)})")
        if self.full_memory_ratio <= 0:
            raise PlanError(f"--mamba-full-memory-ratio must be positive, got {self.full_memory_ratio}")
        for flag, value in (
            ("--max-running-requests", self.max_running_requests),
            ("--max-mamba-cache-size", self.max_mamba_cache_size),
            ("--page-size", self.page_size),
            ("--draft-tokens", self.draft_tokens),
        ):
            if value is not None and value <= 0:
                raise PlanError(f"{flag} must be positive, got {value}")

    def draft(self, spec_tokens: int) -> int:
        """D, the draft tokens each request verifies per step (0 without speculative decoding)."""
        if self.draft_tokens is not None:
            return self.draft_tokens
        return spec_tokens + 1 if spec_tokens else 0

    def requested(self, spec_tokens: int) -> int | None:
        """``--max-running-requests`` as SGLang holds it after its own defaults."""
        if self.max_running_requests is None and self.draft(spec_tokens):
            return SPEC_MAX_RUNNING_REQUESTS
        return self.max_running_requests


def parse_env(pairs: list[str] | tuple[str, ...]) -> dict[str, bool]:
    """``--sglang-env NAME=VALUE`` pairs as settings fields."""
    out: dict[str, bool] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if name not in ENV:
            raise PlanError(f"--sglang-env {pair}: hybridplan models only {', '.join(ENV)}")
        if not sep or value.lower() not in ENV[name]:
            raise PlanError(f"--sglang-env {pair}: give {name}=1 or {name}=0")
        out["skip_decode_lock"] = value.lower() in ("1", "true")
    return out
