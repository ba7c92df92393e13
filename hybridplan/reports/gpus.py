"""`hybridplan gpus`: the GPUs --gpu-type names, with the memory each reports and where that figure comes from."""

from __future__ import annotations

from msgspec import Struct

from hybridplan.gpus import Gpu
from hybridplan.reports import SCHEMA_VERSION


class GpusReport(Struct, frozen=True):
    gpus: tuple[Gpu, ...]

    def to_dict(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, "gpus": [g.to_dict() for g in self.gpus]}
