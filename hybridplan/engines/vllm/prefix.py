"""`prefix` on vLLM: what its prefix-cache policy (hybridplan/engines/vllm/prefix_cache.py) reuses per Mamba cache
mode over `prefix`'s three-request trace, replayed by hybridplan/reports/prefix.py, and the prompt vLLM does not
take."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from msgspec import Struct
from msgspec.structs import replace

from hybridplan.engines.common import Reuse
from hybridplan.engines.vllm.releases import Release
from hybridplan.errors import NotServed

if TYPE_CHECKING:
    from hybridplan.scenario import Scenario

#: the key of a transformer's row: prefix caching keeps every full block, whatever the Mamba mode
TRANSFORMER_ROW = "prefix_caching"


class Prefix(Struct, frozen=True):
    """`prefix` on vLLM: reuse per mode."""

    rel: Release
    modes: dict[str, Reuse]

    def entries(self) -> list[tuple[str, str, Reuse]]:
        """(row label, what its grid is called, reuse) per mode."""
        return [(f"vLLM {self.rel.version} {mode}", "block", r) for mode, r in self.modes.items()]

    def to_dict(self) -> dict:
        return {"version": self.rel.version, "modes": {m: r.to_dict("block_size") for m, r in self.modes.items()}}


def prefix(sc: Scenario, prompt: int, replayed: Callable[[], list[tuple[dict, Reuse]]]) -> Prefix:
    """The reuse ``replayed()`` gives per policy (its rules, ``prefix_cache.Rules.to_dict``, and its reuse), keyed
    by mode (one row for a transformer); a prompt beyond the model's maximum context is one vLLM does not take."""
    from hybridplan.engines.vllm.context import refusal

    if (why := refusal(replace(sc, ctx=prompt))) is not None:
        raise NotServed(f"vLLM takes no {prompt:,}-token prompt for {sc.spec.name}: {why}")
    recurrent = bool(sc.spec.recurrent)
    rows = {(rules["mode"] if recurrent else TRANSFORMER_ROW): r for rules, r in replayed()}
    if not sc.spec.attention:  # no attention layer, no block (the replay's pool counts in 16-token ones)
        rows = {m: replace(r, grid=None) for m, r in rows.items()}
    return Prefix(sc.vllm.release, rows)
