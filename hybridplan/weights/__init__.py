"""A model's weights: parameters and bytes, whole and per tensor-parallel rank, counted from its config
(``families``), priced by its quantization (``quant``), and exact where the checkpoint's safetensors headers
or index are at hand (``checkpoint``).

Per rank, as vLLM shards a checkpoint: linear layers split over the ranks (KV projections and Mamba group
slices replicated where the ranks outnumber the heads or groups), the embedding and LM head split by
vocabulary rows after padding the vocabulary to a multiple of 64 (``VocabParallelEmbedding``), norms and
small vectors whole on every rank.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from msgspec import Struct

from hybridplan.dtypes import size_of
from hybridplan.errors import PlanError
from hybridplan.spec import DraftFields, ModelSpec
from hybridplan.units import cdiv
from hybridplan.weights.families import Part

if TYPE_CHECKING:  # annotations only: a config's count loads neither a checkpoint reader nor the schemes
    from hybridplan.weights.checkpoint import Checkpoint
    from hybridplan.weights.quant import Scheme

#: vLLM pads the vocabulary to a multiple of this before splitting it (``DEFAULT_VOCAB_PADDING_SIZE``)
VOCAB_PADDING = 64


class Weights(Struct, frozen=True):
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
        return {
            "params": self.params,
            "bytes": self.bytes,
            "bytes_per_rank": self.bytes_per_rank,
            "dtype": self.dtype,
            "quantization": self.quantization,
            "source": self.source,
            "tp": self.tp,
            "mtp_params": self.mtp_params,
            "vision_params": self.vision_params,
            "params_by_part": dict(self.groups),
        }


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


#: the layer kinds (ModelSpec.layer_counts) that hold each group of parts
_KINDS = {
    "gdn": ("gdn",),
    "attention": ("attention", "sliding_attention", "mla"),
    "mamba": ("mamba2", "mamba1"),
    "mlp": ("mlp",),
    "moe": ("moe",),
}


class _Layers(Struct, frozen=True):
    """How many decoder layers the model has, and how many of each kind (to weigh a per-layer ignore list)."""

    total: int
    kinds: tuple[tuple[str, int], ...]

    def of(self, group: str) -> int:
        counts = dict(self.kinds)
        return sum(counts.get(k, 0) for k in _KINDS.get(group, ()))


def _layers(spec: ModelSpec) -> _Layers:
    total = spec.facts.count("num_hidden_layers") or spec.facts.count("n_layer") or len(spec.mixers)
    return _Layers(int(total), tuple(spec.layer_counts.items()))


def counted_parts(spec: ModelSpec) -> tuple[Part, ...]:
    """The tensors counted from the spec's config where it was read (``ConfigFacts.parts``: families.py
    ``parts``); PlanError where they cannot be counted."""
    if spec.facts.parts_error is not None:
        raise PlanError(spec.facts.parts_error)
    return spec.facts.parts


def _bytes(part: Part, params: float, dtype_bytes: int, q: Scheme | None, layers: _Layers | None = None) -> float:
    # the LM head stays whole unless a mixed-precision checkpoint lists it (vLLM's ParallelLMHead takes the
    # module's method then: nvidia/Qwen3.6-27B-NVFP4 loads 19.78 GiB with it at nvfp4)
    head = part.group == "lm_head" and q is not None and any(k == "lm_head" for k, _ in q.per_module)
    if q is None or not (part.quantizable or head):
        return params * dtype_bytes
    if layers is None:
        layers = _Layers(0, ())
    return params * q.price(part.section, part.group, part.name, layers.total, layers.of(part.group), dtype_bytes)


def weights(spec: ModelSpec, tp: int = 1, dtype: str | None = None, *, mtp: bool = False) -> Weights:
    """The weights a start of ``spec`` at ``tp`` loads, in ``dtype`` (the serving dtype) unless the checkpoint
    is quantized; ``mtp`` adds the multi-token-prediction layers. Counted from the config, and taken from the
    checkpoint's own figures where the spec carries them (a local folder or Hub id with safetensors)."""
    dtype = dtype or spec.model_dtype
    ckpt = spec.checkpoint
    try:
        counted = _counted(spec, tp, dtype, mtp)
    except PlanError:
        if ckpt is None:
            raise
        counted = None
    if ckpt is None:
        return counted
    return _from_checkpoint(ckpt, counted, _Serving(tp, dtype, mtp, spec))


class _Serving(Struct, frozen=True):
    """How the weights are served: the TP degree, the dtype, whether the MTP layers load, and the model."""

    tp: int
    dtype: str
    mtp: bool
    spec: ModelSpec


def _from_checkpoint(ckpt: Checkpoint, counted: Weights | None, s: _Serving) -> Weights:
    """The checkpoint's figures in place of the count: its parameters, and its bytes where it is quantized
    (packed weights and scales as stored) or its parameters at the serving dtype where it is not; split per
    rank as the count splits them."""
    quantized = s.spec.quantization is not None
    stored = size_of(s.spec.model_dtype)
    counted_mtp = counted.mtp_params if counted else 0
    mtp_params = ckpt.mtp_params if ckpt.mtp_params is not None else counted_mtp
    mtp_bytes = ckpt.mtp_bytes if ckpt.mtp_bytes is not None else counted_mtp * stored
    # an index's totals hold the MTP layers where it lists them: take their counted share off
    inside = ckpt.mtp_params is None
    size = ckpt.bytes - (mtp_bytes if inside else 0) + (mtp_bytes if s.mtp else 0)
    if ckpt.params is not None:
        params = ckpt.params - (mtp_params if inside else 0) + (mtp_params if s.mtp else 0)
    elif not quantized:
        # an index without total_parameters: total_size is bytes; its parameters are those bytes at the width
        # they are stored in (the config's dtype may not say: float32 configs ship bfloat16 shards), the 2 or 4
        # bytes the count points to. About one byte a parameter is a quantized checkpoint whose config does not
        # say so: its bytes are not parameters to price at the serving dtype
        width = min((1, 2, 4), key=lambda b: abs(size / b - counted.params)) if counted else stored
        if width == 1:
            raise PlanError(
                f"{ckpt.where} holds {size:,} B for {counted.params:,} counted parameters, about one "
                "byte each, yet its config names no quantization (no quantization_config, no "
                "hf_quant_config.json): give --weights"
            )
        params = size // width
    else:
        params = counted.params if counted else 0
    loaded = size if quantized or not params else params * size_of(s.dtype)
    per_rank = loaded * counted.bytes_per_rank // counted.bytes if counted and counted.bytes else loaded // s.tp
    return Weights(
        params=params,
        bytes=loaded,
        bytes_per_rank=per_rank,
        dtype=s.dtype,
        quantization=counted.quantization if counted else None,
        source=ckpt.source,
        tp=s.tp,
        mtp_params=mtp_params,
        vision_params=counted.vision_params if counted else 0,
        groups=counted.groups if counted else (),
    )


def _counted(spec: ModelSpec, tp: int, dtype: str, mtp: bool) -> Weights:
    if not spec.facts.fields:
        raise PlanError(f"{spec.name} carries no config to count its weights from: give --weights or --params")
    every = counted_parts(spec)
    q = spec.quantization.weights_scheme() if spec.quantization is not None else None
    dbytes = size_of(dtype)
    loaded = [p for p in every if p.section != "mtp" or mtp]
    hidden = spec.hidden_size or 1
    lay = _layers(spec)
    total_bytes = sum(_bytes(p, p.params, dbytes, q, lay) for p in loaded)
    rank_bytes = sum(_bytes(p, rank_params(p, tp, hidden), dbytes, q, lay) for p in loaded)
    groups: dict[str, int] = {}
    for p in every:
        key = p.section if p.section != "model" else p.group
        groups[key] = groups.get(key, 0) + p.params
    return Weights(
        params=sum(p.params for p in loaded),
        bytes=int(total_bytes),
        bytes_per_rank=int(rank_bytes),
        dtype=dtype,
        quantization=q.name if q else None,
        source="config",
        tp=tp,
        mtp_params=sum(p.params for p in every if p.section == "mtp"),
        vision_params=sum(p.params for p in every if p.section == "vision"),
        groups=tuple(groups.items()),
    )


def rank_bytes(
    spec: ModelSpec, tp: int, dtype: str, given: int | None = None, params: float | None = None
) -> tuple[int, str]:
    """One rank's weights and where the figure comes from: ``given`` (bytes over all ranks, split evenly),
    ``params`` at ``dtype``, else counted from the config as the engine shards it."""
    if given is not None:
        return given // tp, "given (--weights)"
    if params is not None:
        return int(params * size_of(dtype)) // tp, "given (--params)"
    w = weights(spec, tp, dtype)
    how = {
        "config": "counted from the config",
        "safetensors-headers": "from the checkpoint's safetensors headers",
        "safetensors-index": "from the checkpoint's safetensors index",
    }[w.source]
    return w.bytes_per_rank, f"{how} ({w.params / 1e9:.2f}B parameters" + (
        f", {w.quantization}" if w.quantization else ""
    ) + ")"


# --- a speculative drafter's weights ---------------------------------------------------------------------------
#
# What a drafter adds to a start is an engine rule (which of its tensors the engine shares with the target:
# hybridplan/engines/vllm/memory.py and hybridplan/engines/sglang/memory.py ``drafter``); these functions only
# count tensors, as the rest of this package does.


def mtp_rank_bytes(spec: ModelSpec, tp: int, dtype: str | None = None) -> tuple[int, int]:
    """The target's own multi-token-prediction layers (the ``mtp`` section of its parts: hybridplan/weights/
    families.py), as parameters over all ranks and bytes on one rank of ``tp``. Their embedding and LM head are not
    among them: the families count those once, with the model."""
    plain, full = weights(spec, tp, dtype), weights(spec, tp, dtype, mtp=True)
    return full.params - plain.params, full.bytes_per_rank - plain.bytes_per_rank


def head_rank_bytes(spec: ModelSpec, tp: int, dtype: str | None = None) -> int:
    """One more copy of the model's LM head on one rank of ``tp`` (the embedding's shape where the head is tied),
    at ``dtype``: what an MTP layer that keeps a head of its own loads."""
    dtype = dtype or spec.model_dtype
    every = counted_parts(spec) if spec.facts.fields else ()
    heads = [p for p in every if p.group == "lm_head"] or [p for p in every if p.group == "embedding"]
    q = spec.quantization.weights_scheme() if spec.quantization is not None else None
    hidden = spec.hidden_size or 1
    return int(sum(_bytes(p, rank_params(p, tp, hidden), size_of(dtype), q) for p in heads[:1]))


def draft_extra_parts(kind: str, cfg: DraftFields, target_hidden: int) -> tuple[Part, ...]:
    """The tensors a draft class holds beyond the decoder layers its config describes (which the dense family
    counts): EAGLE's ``fc`` over [embedding, hidden state] (2h → h, llama_eagle.py); EAGLE-3's ``fc`` over the
    target's aux hidden states (aux × target width → h), its ``hidden_norm`` and the first layer's QKV taking
    [embedding, hidden state], h more inputs (llama_eagle3.py); DFlash's ``fc`` over the target's hidden states
    (target layers × target width → h) and ``hidden_norm`` (qwen3_dflash.py). None for a plain draft model."""
    h = cfg.hidden_size
    if kind == "eagle":
        return (Part("draft", "fc", 2 * h * h, "replicated"),)
    if kind not in ("eagle3", "dflash", "dspark"):
        return ()
    # the target layers whose hidden states the draft takes in (its ``fc`` is that many times the target's width
    # wide): ``eagle_config.eagle_aux_hidden_state_layer_ids`` or ``dflash_config.target_layer_ids``
    # (vllm/model_executor/models/llama_eagle3.py, qwen3_dflash.py), else 3 (EAGLE-3) or the draft's layers
    n_aux = cfg.aux_layers or (3 if kind == "eagle3" else cfg.num_hidden_layers or 1)
    extra: tuple[Part, ...] = (
        Part("draft", "fc", n_aux * target_hidden * h, "replicated"),
        Part("draft", "hidden_norm", h),
    )
    if kind == "eagle3":
        heads = cfg.heads or 1
        kv = cfg.kv_heads or heads
        hd = cfg.head_dim or h // heads
        extra += (Part("attention", "qkv_proj, layer 0's second input", h * (heads + 2 * kv) * hd, "column"),)
    return extra


def draft_rank_bytes(
    draft: ModelSpec,
    tp: int,
    dtype: str | None = None,
    *,
    kind: str,
    ends: tuple[bool, int | None],
    target_hidden: int | None = None,
) -> tuple[int, int]:
    """A draft model's weights as parameters over all ranks and bytes on one rank of ``tp``: its decoder layers and
    norms as its config's family counts them, the tensors of its draft class (``draft_extra_parts``: ``kind``
    eagle, eagle3, dflash, dspark, or model for a plain draft), and the ends it keeps of its own, ``ends`` =
    (embedding, head_rows): its embedding only where ``embedding``, and an LM head of ``head_rows`` vocabulary
    rows (None: it has none of its own)."""
    embedding, head_rows = ends
    dtype = dtype or draft.model_dtype
    hidden = draft.hidden_size or 1
    kept = [
        p
        for p in (counted_parts(draft) if draft.facts.fields else ())
        if p.group != "lm_head" and (embedding or p.group != "embedding") and p.section == "model"
    ]
    if head_rows:
        kept.append(Part("lm_head", "lm_head", head_rows * hidden, "vocab"))
    kept += draft_extra_parts(kind, draft.facts.draft, target_hidden or hidden)
    q = draft.quantization.weights_scheme() if draft.quantization is not None else None
    lay = _layers(draft)
    return (
        sum(p.params for p in kept),
        int(sum(_bytes(p, rank_params(p, tp, hidden), size_of(dtype), q, lay) for p in kept)),
    )
