"""SGLang's radix cache for hybrids: which strategy runs, how many state slots a request holds, and where
states are checkpointed (python/sglang/srt/server_args.py, arg_groups/overrides.py,
mem_cache/unified_radix_cache.py)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from hybridplan.engines.common import Reuse, floor_to, lcm, spaced
from hybridplan.engines.sglang.releases import Release
from hybridplan.errors import NotServed, PlanError
from hybridplan.spec import ModelSpec

if TYPE_CHECKING:
    from hybridplan.scenario import Scenario

#: architectures that may use the extra_buffer strategy (0.5.23: arg_groups/overrides.py
#: ``_MAMBA_EXTRA_BUFFER_ARCHS``; 0.5.9: server_args.py, ``support_mamba_cache_extra_buffer=True`` in
#: ``_handle_mamba_radix_cache``); the others are refused it
_EXTRA_BUFFER_ARCHS = {
    "0.5.23": frozenset({"NemotronHForCausalLM", "GraniteMoeHybridForCausalLM", "FalconH1ForCausalLM",
                         "Qwen3NextForCausalLM", "Qwen3_5ForConditionalGeneration",
                         "Qwen3_5MoeForConditionalGeneration", "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM",
                         "KimiLinearForCausalLM"}),
    "0.5.9": frozenset({"Qwen3NextForCausalLM", "Qwen3_5ForConditionalGeneration",
                        "Qwen3_5MoeForConditionalGeneration"}),
}
#: architectures whose radix cache SGLang disables (0.5.9 server_args.py: ``support_mamba_cache=False``)
_NO_RADIX_ARCHS = {"0.5.23": frozenset(), "0.5.9": frozenset({"KimiLinearForCausalLM"})}
#: decode tracking interval (``mamba_track_interval``)
TRACK_INTERVAL = 256
#: state slots per running request with the radix cache (``MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO``)
BASE_RATIO = 3
#: the grid models without a Mamba chunk size checkpoint on
FALLBACK_GRID = 64


def strategy(spec: ModelSpec, rel: Release, chosen: str = "auto") -> str:
    """The radix strategy SGLang runs with default flags (overlap scheduler on, page size 1): ``auto`` resolves
    to extra_buffer where the architecture supports it in 0.5.23 (arg_groups/overrides.py
    ``_mamba_radix_cache_resolution``) and to no_buffer always in 0.5.9 (server_args.py); pure SSMs run as
    no_buffer; an asked-for extra_buffer the architecture does not support is refused, as SGLang does."""
    arch = spec.architecture
    if arch in _NO_RADIX_ARCHS[rel.version]:
        return "off"
    extra = arch in _EXTRA_BUFFER_ARCHS[rel.version]
    if chosen == "extra_buffer" and not extra:
        raise PlanError(f"SGLang {rel.version} refuses --mamba-radix-cache-strategy extra_buffer for {arch}: "
                        "use no_buffer")
    if chosen != "auto":
        return chosen
    return "extra_buffer" if extra and rel.newer else "no_buffer"


def slots_per_request(strat: str, rel: Release, *, overlap: bool = True) -> int:
    """State slots one running request may hold: 1 without radix cache, 3 for no_buffer, and for extra_buffer
    3 + 2 (0.5.23 with the overlap scheduler, and 0.5.9 without speculative decoding) or 3 + 1 (0.5.23
    without overlap)."""
    if strat == "off":
        return 1
    if strat == "no_buffer":
        return BASE_RATIO
    return BASE_RATIO + (2 if overlap or not rel.newer else 1)


def checkpoint_grid(spec: ModelSpec, page_size: int = 1, tree_page: int = 1) -> int:
    """States are saved on multiples of lcm(max(model chunk or 64, page_size), tree page)."""
    return lcm(max(spec.chunk_size or FALLBACK_GRID, page_size), tree_page)


def checkpoints(strat: str, grid: int, prompt: int, chunk: int) -> tuple[int, ...]:
    """Where the first request leaves states in the radix tree (mem_cache/unified_radix_cache.py
    ``checkpoint_into_tree``): extra_buffer, one per prefill chunk at the chunk's last grid point; no_buffer,
    every chunk end and the prompt's end; off, nothing."""
    if strat == "off":
        return ()
    starts = spaced(0, prompt, chunk, f"one per {chunk}-token prefill chunk")
    if strat == "no_buffer":
        ends = {min(s + chunk, prompt) for s in starts}
    else:
        ends = {s + floor_to(min(chunk, prompt - s), grid) for s in starts}
    return tuple(sorted(c for c in ends if c > 0))


def junction(strat: str, grid: int, shared: int, prompt: int) -> int:
    """extra_buffer: the second request records its branch point, grid-floored, and saves a state there."""
    return floor_to(min(shared, prompt - 1), grid) if strat == "extra_buffer" else 0


def reuse(sc: Scenario, shared: int, prompt: int) -> Reuse:
    rel = sc.sglang.release
    grid = checkpoint_grid(sc.spec)
    strat = strategy(sc.spec, rel, sc.sglang.radix)
    return Reuse.of(grid, checkpoints(strat, grid, prompt, sc.chunk), junction(strat, grid, shared, prompt), shared,
                    prompt)


@dataclass(frozen=True)
class Prefix:
    rel: Release
    reuse: Reuse

    def entries(self) -> list[tuple[str, str, Reuse]]:
        return [(f"SGLang {self.rel.version}", "grid", self.reuse)]

    def to_dict(self) -> dict:
        return {"version": self.rel.version, **self.reuse.to_dict("grid")}


def prefix(sc: Scenario, shared: int, prompt: int) -> Prefix:
    """Reuse under the scenario's strategy; a prompt beyond the model's context is one SGLang does not take."""
    from hybridplan.engines.sglang.context import refusal

    if (why := refusal(replace(sc, ctx=prompt))) is not None:
        raise NotServed(f"SGLang takes no {prompt:,}-token prompt for {sc.spec.name}: {why}")
    return Prefix(sc.sglang.release, reuse(sc, shared, prompt))
