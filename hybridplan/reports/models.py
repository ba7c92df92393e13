"""`hybridplan models`: the shipped specs."""

from __future__ import annotations

from msgspec import Struct

from hybridplan.reports import SCHEMA_VERSION
from hybridplan.spec import ModelSpec


class ModelsReport(Struct, frozen=True):
    specs: tuple[ModelSpec, ...]

    def to_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "models": [
                {
                    "name": s.name,
                    "aliases": list(s.aliases),
                    "architecture": s.architecture,
                    "family": s.family,
                    "layers": s.layer_counts,
                    "source": s.source,
                    "quantization": s.quantization.describe() if s.quantization else None,
                }
                for s in self.specs
            ],
        }
