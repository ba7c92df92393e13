"""A model's weights: parameters and bytes, whole and per tensor-parallel rank, counted from its config
(``families``), priced by its quantization (``quant``), and exact where the checkpoint's safetensors headers
are at hand (``exact``).

Per rank, as vLLM shards a checkpoint: linear layers split over the ranks (KV projections and Mamba group
slices replicated where the ranks outnumber the heads or groups), the embedding and LM head split by
vocabulary rows after padding the vocabulary to a multiple of 64 (``VocabParallelEmbedding``), norms and
small vectors whole on every rank.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from hybridplan.dtypes import size_of
from hybridplan.engines.common import cdiv
from hybridplan.errors import PlanError
from hybridplan.spec import ModelSpec
from hybridplan.weights.families import Part, parts
from hybridplan.weights.quant import Scheme, scheme

#: vLLM pads the vocabulary to a multiple of this before splitting it (``DEFAULT_VOCAB_PADDING_SIZE``)
VOCAB_PADDING = 64


@dataclass(frozen=True)
class Weights:
    """What a start loads: ``params`` and ``bytes`` over all ranks, ``bytes_per_rank`` on one GPU."""

    params: int
    bytes: int
    bytes_per_rank: int
    dtype: str
    quantization: str | None
    #: config (counted), safetensors-index or safetensors-headers (exact)
    source: str
    tp: int
    #: parameters of the parts a plain start leaves out: multi-token-prediction layers
    mtp_params: int = 0
    #: parameters of the vision tower (loaded, and counted above, for a multimodal class)
    vision_params: int = 0
    groups: tuple[tuple[str, int], ...] = ()

    def to_dict(self) -> dict:
        return {"params": self.params, "bytes": self.bytes, "bytes_per_rank": self.bytes_per_rank,
                "dtype": self.dtype, "quantization": self.quantization, "source": self.source, "tp": self.tp,
                "mtp_params": self.mtp_params, "vision_params": self.vision_params,
                "params_by_part": dict(self.groups)}


def _vocab_rows(part: Part, hidden: int, tp: int) -> int:
    vocab = part.params // hidden
    padded = cdiv(vocab, VOCAB_PADDING) * VOCAB_PADDING
    return cdiv(padded, tp) * hidden


def rank_params(part: Part, tp: int, hidden: int) -> float:
    """The parameters of ``part`` one of ``tp`` ranks holds."""
    if tp == 1 and part.split != "vocab":
        return float(part.params)
    if part.split == "replicated":
        return float(part.params)
    if part.split == "vocab":
        return float(_vocab_rows(part, hidden, tp))
    if part.units is not None:
        return part.params / min(tp, part.units)
    return part.params / tp


def _bytes(part: Part, params: float, dtype_bytes: int, q: Scheme | None) -> float:
    if q is not None and part.quantizable and not q.skips(f"{part.section}.{part.group}.{part.name}") and not (
            part.section == "vision" and q.skips("vision")):
        return params * q.bytes_per_param
    return params * dtype_bytes


def weights(spec: ModelSpec, tp: int = 1, dtype: str | None = None, *, mtp: bool = False) -> Weights:
    """The weights a start of ``spec`` at ``tp`` loads, counted from its config, in ``dtype`` (the serving
    dtype) unless the checkpoint is quantized; ``mtp`` adds the multi-token-prediction layers."""
    if not spec.config_json:
        raise PlanError(f"{spec.name} carries no config to count its weights from: give --weights or --params")
    config = json.loads(spec.config_json)
    every = parts(spec.architecture, config, spec.family)
    q = scheme(config)
    dtype = dtype or spec.model_dtype
    dbytes = size_of(dtype)
    loaded = [p for p in every if p.section != "mtp" or mtp]
    hidden = spec.hidden_size or 1
    total_bytes = sum(_bytes(p, p.params, dbytes, q) for p in loaded)
    rank_bytes = sum(_bytes(p, rank_params(p, tp, hidden), dbytes, q) for p in loaded)
    groups: dict[str, int] = {}
    for p in every:
        key = p.section if p.section != "model" else p.group
        groups[key] = groups.get(key, 0) + p.params
    return Weights(params=sum(p.params for p in loaded), bytes=int(total_bytes), bytes_per_rank=int(rank_bytes),
                   dtype=dtype, quantization=q.name if q else None, source="config", tp=tp,
                   mtp_params=sum(p.params for p in every if p.section == "mtp"),
                   vision_params=sum(p.params for p in every if p.section == "vision"),
                   groups=tuple(groups.items()))


def rank_bytes(spec: ModelSpec, tp: int, dtype: str, given: int | None = None,
               params: float | None = None) -> tuple[int, str]:
    """One rank's weights and where the figure comes from: ``given`` (bytes over all ranks, split evenly),
    ``params`` at ``dtype``, else counted from the config as the engine shards it."""
    if given is not None:
        return given // tp, "given (--weights)"
    if params is not None:
        return int(params * size_of(dtype)) // tp, "given (--params)"
    w = weights(spec, tp, dtype)
    return w.bytes_per_rank, f"counted from the config ({w.params / 1e9:.2f}B parameters" + (
        f", {w.quantization}" if w.quantization else "") + ")"
