"""`hybridplan size --engine`: what each engine allocates for the model (vLLM's pages and padding per mode,
SGLang's MambaPool)."""

from __future__ import annotations

from msgspec import Struct

from hybridplan import engines
from hybridplan.scenario import Scenario


class EngineReport(Struct, frozen=True):
    parts: dict[str, engines.Part]
    skipped: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> dict:
        d: dict = {name: part.to_dict() for name, part in self.parts.items()}
        if self.skipped:
            d["skipped"] = dict(self.skipped)
        return d


def engine_layouts(sc: Scenario) -> EngineReport:
    parts, skipped = engines.each(sc, lambda e: e.layout(sc))
    return EngineReport(parts, tuple(skipped.items()))
