"""`hybridplan gpus`: the GPUs --gpu-type names, with the memory each reports and where that figure comes from."""

from __future__ import annotations


from hybridplan.gpus import Gpu
from hybridplan.records import frozen
from hybridplan.reports import SCHEMA_VERSION


@frozen
class GpusReport:
    gpus: tuple[Gpu, ...]

    def to_dict(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, "gpus": [g.to_dict() for g in self.gpus]}
