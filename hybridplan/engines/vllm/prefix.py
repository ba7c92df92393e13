"""Where vLLM leaves reusable recurrent states, and what a later request with a shared prefix finds.

vllm/v1/core/sched/scheduler.py ``_mamba_block_aligned_split`` and kv_cache_interface.py
``get_mamba_prefill_checkpoint_position``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from hybridplan.engines.common import Reuse, floor_to, spaced
from hybridplan.engines.vllm.blocks import layout
from hybridplan.engines.vllm.releases import Release
from hybridplan.errors import NotServed
from hybridplan.records import frozen

if TYPE_CHECKING:
    from hybridplan.scenario import Scenario

#: the key of a transformer's row: prefix caching keeps every full block, whatever the Mamba mode
TRANSFORMER_ROW = "prefix_caching"


def checkpoints(mode: str, block: int | None, prompt: int, chunk: int, minor: int = 33) -> tuple[int, ...]:
    """Where the first request leaves reusable states.

    all: every full block. align: the ends of prefill chunks, cut to block boundaries (a chunk is
    floor(max_num_batched_tokens / B)·B tokens), and the prompt's last cacheable boundary: floor(L/B)·B
    through 0.31, floor((L − 1)/B)·B from 0.32 (saved inside the final forward). none: nothing."""
    if mode == "none" or not block:
        return ()
    if mode == "all":
        return tuple(spaced(block, prompt + 1, block, f"one per {block}-token block"))
    last = floor_to(prompt - 1 if minor >= 32 else prompt, block)
    step = max(block, floor_to(chunk, block))
    ends = set(spaced(step, prompt, step, f"one per {step}-token prefill chunk"))
    ends.add(last)
    return tuple(sorted(c for c in ends if 0 < c <= last))


def junction(mode: str, block: int, shared: int, prompt: int, minor: int) -> int:
    """align (0.28+): the second request stops a chunk at the block-floored point where it leaves the first
    one's prefix and saves a state there, for the requests after it; all caches every block anyway."""
    return floor_to(min(shared, prompt - 1), block) if mode == "align" and minor >= 28 else 0


def reuse(sc: Scenario, shared: int, prompt: int) -> dict[str, Reuse]:
    """Reuse per Mamba cache mode (one row for a transformer)."""
    rel = sc.vllm.release
    if not sc.spec.recurrent:
        block = layout(sc, "none").block_size
        return {TRANSFORMER_ROW: Reuse.of(block, checkpoints("all", block, prompt, sc.chunk), 0, shared, prompt)}
    out: dict[str, Reuse] = {}
    for mode in rel.modes_for(sc.spec, sc.vllm.mode):
        block = layout(sc, mode).block_size
        cps = checkpoints(mode, block, prompt, sc.chunk, rel.minor)
        out[mode] = Reuse.of(block, cps, junction(mode, block, shared, prompt, rel.minor), shared, prompt)
    return out


@frozen
class Prefix:
    """`prefix` on vLLM: reuse per mode."""

    rel: Release
    modes: dict[str, Reuse]

    def entries(self) -> list[tuple[str, str, Reuse]]:
        """(row label, what its grid is called, reuse) per mode."""
        return [(f"vLLM {self.rel.version} {mode}", "block", r) for mode, r in self.modes.items()]

    def to_dict(self) -> dict:
        return {"version": self.rel.version, "modes": {m: r.to_dict("block_size") for m, r in self.modes.items()}}


def prefix(sc: Scenario, shared: int, prompt: int) -> Prefix:
    """Reuse per mode; a prompt beyond the model's maximum context is one vLLM does not take."""
    from hybridplan.engines.vllm.context import refusal

    if (why := refusal(replace(sc, ctx=prompt))) is not None:
        raise NotServed(f"vLLM takes no {prompt:,}-token prompt for {sc.spec.name}: {why}")
    return Prefix(sc.vllm.release, reuse(sc, shared, prompt))
