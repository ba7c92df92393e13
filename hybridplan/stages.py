"""Pipeline stages: a model's decoder layers in order, a stage as the layers ``[start, end)`` it holds and the
ends it holds (the embedding on the first stage, the final norm and LM head on the last), and the weights
one rank of a stage loads.

A stage is a ``ModelSpec`` restricted to its layers' mixers and FFN blocks, so every engine rule that sizes a
whole model sizes a stage unchanged. Which layers each stage gets is an engine rule (each engine package's
``parallel.py``); this module only knows the model's layer structure.

The weights of a stage are the whole model's parts (hybridplan/weights/families.py, counted module by module,
never recounted here) in the stage's share: a part of a layer kind in the share of that kind's layers the
stage holds, the embedding where the stage is first (and last, with tied embeddings: vLLM builds the
embedding again on the last rank to tie its LM head to it), the LM head where it is last, the layer norms in
the stage's share of the layers (the final norm, one hidden-size vector, goes with them).
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from msgspec import Struct
from msgspec.structs import replace

from hybridplan.errors import PlanError
from hybridplan.spec import ATTENTION_KINDS, Mixer, ModelSpec
from hybridplan.weights.families import Part

if TYPE_CHECKING:
    from hybridplan.weights.quant import Scheme

#: a weights part's group → the mixer or FFN kinds whose layers hold it
_PART_KINDS = {
    "attention": ATTENTION_KINDS,
    "mamba": ("mamba1", "mamba2"),
    "gdn": ("gdn",),
    "kda": ("kda",),
    "linear_attention": ("linear_attention",),
    "conv": ("short_conv",),
    "mlp": ("mlp",),
    "moe": ("moe",),
}


class Layer(Struct, frozen=True):
    """One decoder layer: its token mixers and FFN blocks (Falcon-H1 layers hold two mixers, a Nemotron-H
    layer one mixer or one FFN)."""

    mixers: tuple[Mixer, ...]
    ffn: tuple[str, ...]


def decoder_layers(spec: ModelSpec) -> tuple[Layer, ...]:
    """The model's decoder layers in order (what an engine's ``num_hidden_layers`` counts)."""
    mixers, ffn = spec.mixers, spec.ffn
    if spec.family == "Nemotron-H":
        chars = spec.facts.layer_pattern  # one character a layer, as its adapter reads them (adapters.py)
        if len(chars) != len(mixers) + len(ffn):
            raise PlanError(f"{spec.name}: its layer pattern does not match its layers; cannot split it into stages")
        out, m, f = [], iter(mixers), iter(ffn)
        for c in chars:
            out.append(Layer((next(m),), ()) if c in "M*" else Layer((), (next(f),)))
        return tuple(out)
    if spec.family == "Falcon-H1" and len(mixers) == 2 * len(ffn):
        # each layer: attention and Mamba-2 side by side, then its MLP
        return tuple(Layer(tuple(mixers[2 * i : 2 * i + 2]), (ffn[i],)) for i in range(len(ffn)))
    if not ffn or len(ffn) == len(mixers):
        return tuple(Layer((m,), (ffn[i],) if ffn else ()) for i, m in enumerate(mixers))
    raise PlanError(
        f"{spec.name} ({spec.architecture}): how its {len(mixers)} mixers and {len(ffn)} FFN blocks "
        "make decoder layers is not modelled, so its pipeline stages are not either"
    )


class Stage(Struct, frozen=True):
    """One pipeline stage: decoder layers ``[start, end)`` of the model, and the spec restricted to them."""

    rank: int
    start: int
    end: int
    first: bool
    last: bool
    spec: ModelSpec

    @property
    def layers(self) -> int:
        return self.end - self.start

    @property
    def ends(self) -> str:
        """Which ends of the model the stage holds besides its layers, as a person reads them."""
        held = (["embedding"] if self.first else []) + (["LM head"] if self.last else [])
        return " + ".join(held) or "—"

    def to_dict(self) -> dict:
        return {
            "rank": self.rank,
            "layers": [self.start, self.end],
            "first": self.first,
            "last": self.last,
            "layer_counts": self.spec.layer_counts,
        }


def partition_parts(partition: tuple[int, ...], pp: int, num_layers: int, env: str) -> list[int]:
    """The layers a stage each of an explicit partition (``env``: the engine's variable, VLLM_PP_LAYER_PARTITION
    or SGLang's), checked as both engines' ``get_pp_indices`` check it, in their words."""
    if len(partition) != pp:
        raise PlanError(f"{env}: len(partitions)={len(partition)} does not match pp_size={pp}.")
    if sum(partition) != num_layers:
        raise PlanError(f"{env}: sum(partitions)={sum(partition)} does not match num_hidden_layers={num_layers}.")
    return list(partition)


def bounds_of(parts: list[int], flag: str, num_layers: int) -> tuple[tuple[int, int], ...]:
    """Each stage's [first, last) decoder layers from the layers each holds (an engine's split), refused where a
    stage would hold none (``flag``: the engine's flag, for the message)."""
    if min(parts) <= 0:
        raise PlanError(
            f"{flag} {len(parts)} leaves a stage without layers (of {num_layers}: {','.join(map(str, parts))})"
        )
    bounds, start = [], 0
    for n in parts:
        bounds.append((start, start + n))
        start += n
    return tuple(bounds)


def stages(spec: ModelSpec, bounds: tuple[tuple[int, int], ...]) -> tuple[Stage, ...]:
    """The stages whose layer ranges are ``bounds`` (an engine's split), each a spec of its own layers."""
    layers = decoder_layers(spec)
    if (
        not bounds
        or bounds[0][0] != 0
        or bounds[-1][1] != len(layers)
        or any(a[1] != b[0] for a, b in zip(bounds, bounds[1:]))
    ):
        raise PlanError(f"pipeline stages {list(bounds)} do not cover the {len(layers)} layers of {spec.name}")
    out = []
    for rank, (start, end) in enumerate(bounds):
        held = layers[start:end]
        sub = replace(
            spec,
            name=f"{spec.name}[{start}:{end}]",
            mixers=tuple(m for layer in held for m in layer.mixers),
            ffn=tuple(f for layer in held for f in layer.ffn),
        )
        out.append(Stage(rank, start, end, rank == 0, rank == len(bounds) - 1, sub))
    return tuple(out)


def stage_shares(whole: ModelSpec, stage: Stage) -> dict[str, float]:
    """Per weights group, the share of the whole model's part one stage holds."""
    total, held = whole.layer_counts, stage.spec.layer_counts
    layers = len(decoder_layers(whole)) or 1
    shares: dict[str, float] = {}
    for group, kinds in _PART_KINDS.items():
        n = sum(total.get(k, 0) for k in kinds)
        shares[group] = sum(held.get(k, 0) for k in kinds) / n if n else 0.0
    shares["norm"] = stage.layers / layers
    shares["lm_head"] = 1.0 if stage.last else 0.0
    shares["vision"] = 1.0 if stage.first else 0.0
    return shares


class Sharding(Struct, frozen=True):
    """How one rank's weights split: ``tp`` ranks for the attention and recurrent layers, the norms and the
    embedding; ``ffn_tp`` for the dense MLPs and shared experts and ``lm_head_tp`` for the LM head (``tp`` where
    None); the routed experts sliced over ``expert_tp`` ranks and dealt whole over ``ep`` ranks, the most loaded
    rank holding ``experts_held`` of them (how an engine deals them is its rule: each engine's ``parallel.py``
    ``sharding``; None with ``ep`` 1). ``embedding_tp`` 1 replicates the embedding."""

    tp: int
    ffn_tp: int | None = None
    expert_tp: int | None = None
    ep: int = 1
    lm_head_tp: int | None = None
    embedding_tp: int | None = None
    experts_held: int | None = None

    def ranks(self, group: str, name: str) -> int:
        if group == "moe" and name.startswith("experts."):
            return self.expert_tp or self.ffn_tp or self.tp
        if group in ("mlp", "moe"):
            return self.ffn_tp or self.tp
        if group == "lm_head":
            return self.lm_head_tp or self.tp
        if group == "embedding":
            return self.embedding_tp or self.tp
        return self.tp


def _experts(parts: list, whole: ModelSpec) -> int | None:
    """The routed experts a MoE layer holds: the router's rows (experts × hidden, over the MoE layers)."""
    router = sum(p.params for p in parts if p.group == "moe" and p.name == "router")
    layers = sum(1 for f in whole.ffn if f == "moe")
    if not router or not layers or not whole.hidden_size:
        return None
    return router // (whole.hidden_size * layers)


class ExpertShape(Struct, frozen=True):
    """A MoE layer's routed experts as the weights count them: how many, and each one's intermediate size (what
    the engines' fused MoE slices over its TP ranks)."""

    experts: int
    intermediate: int


@lru_cache(maxsize=64)
def expert_shape(whole: ModelSpec) -> ExpertShape | None:
    """The routed experts of ``whole`` from its counted parts (hybridplan/weights/families.py ``moe``): the router's
    rows give the experts, ``experts.down`` (experts × intermediate × width, width the latent size where
    ``fc1_latent_proj`` projects into one, else the hidden size) the intermediate size. None without experts or
    a config."""
    from hybridplan.weights import counted_parts

    if not whole.facts.fields:
        return None
    every = [p for p in counted_parts(whole) if p.section != "mtp"]
    experts = _experts(every, whole)
    layers = sum(1 for f in whole.ffn if f == "moe")
    down = sum(p.params for p in every if p.group == "moe" and p.name == "experts.down")
    if not experts or not down:
        return None
    latent = sum(p.params for p in every if p.group == "moe" and p.name == "fc1_latent_proj")
    width = latent // (whole.hidden_size * layers) if latent else whole.hidden_size
    return ExpertShape(experts, down // (experts * width * layers))


@lru_cache(maxsize=64)
def _whole_weights(whole: ModelSpec, tp: int, dtype: str):
    from hybridplan.weights import weights

    return weights(whole, tp, dtype)


@lru_cache(maxsize=8192)
def _price(p: Part, ranks: int, hidden: int, dbytes: int, q: Scheme | None, lay: tuple) -> float:
    """One part's bytes on one of ``ranks`` ranks (hybridplan/weights ``_bytes``), the same for every stage."""
    from hybridplan.weights import _bytes, rank_params

    return _bytes(p, rank_params(p, ranks, hidden), dbytes, q, *lay)


def stage_rank_bytes(
    whole: ModelSpec, stage: Stage | None, tp: int, dtype: str, sharding: Sharding | None = None
) -> tuple[int, str]:
    """The weights one rank of ``stage`` (the whole model where None) loads, and where the figure comes from: the
    whole model's parts (hybridplan/weights) in the stage's share, each split as ``sharding`` says (over ``tp``
    where None); a checkpoint's exact figure scaled by the same shares. Remembered per arguments: pricing a
    quantized checkpoint's parts against its module list is slow, and `plan` asks for the same stage often."""
    try:
        return _stage_rank_bytes(whole, stage, tp, dtype, sharding)
    except TypeError:  # an unhashable spec: priced afresh
        return _stage_rank_bytes.__wrapped__(whole, stage, tp, dtype, sharding)


@lru_cache(maxsize=512)
def _stage_rank_bytes(
    whole: ModelSpec, stage: Stage | None, tp: int, dtype: str, sharding: Sharding | None = None
) -> tuple[int, str]:
    from hybridplan.dtypes import size_of
    from hybridplan.weights import _bytes, counted_parts, rank_params, weights

    if not whole.facts.fields:
        raise PlanError(f"{whole.name} carries no config to split its weights by rank: give --weights")
    if stage is None:
        stage = stages(whole, ((0, len(decoder_layers(whole))),))[0]
    sharding = sharding or Sharding(tp)
    every = [p for p in counted_parts(whole) if p.section != "mtp"]
    shares = stage_shares(whole, stage)
    tied = not any(p.group == "lm_head" for p in every)
    experts = _experts(every, whole) if sharding.ep > 1 else None
    if sharding.ep > 1 and experts is None:
        raise PlanError(f"{whole.name} has no routed experts to split over expert-parallel ranks")
    if sharding.ep > 1 and sharding.experts_held is None:
        raise ValueError("an expert-parallel Sharding names the experts its most loaded rank holds (experts_held)")
    q = whole.quantization.weights_scheme() if whole.quantization is not None else None
    hidden, dbytes = whole.hidden_size or 1, size_of(dtype)
    try:  # the model's layer counts, which a per-layer ignore list of a quantized checkpoint is weighed by
        from hybridplan.weights import _layers

        lay: tuple = (_layers(whole),)
    except ImportError:
        lay = ()
    full = held = 0.0

    def price(p: Part, ranks: int) -> float:
        try:
            return _price(p, ranks, hidden, dbytes, q, lay)
        except TypeError:  # an unhashable scheme
            return _bytes(p, rank_params(p, ranks, hidden), dbytes, q, *lay)

    for p in every:
        share = shares.get(p.section if p.section == "vision" else p.group)
        if p.group == "embedding":
            share = 1.0 if stage.first or (tied and stage.last) else 0.0
        if share is None:
            share = stage.layers / (len(decoder_layers(whole)) or 1)
        routed = p.group == "moe" and p.name.startswith("experts.")
        b = price(p, sharding.ranks(p.group, p.name))
        if routed and experts:
            b *= (sharding.experts_held if sharding.experts_held is not None else experts) / experts
        full += price(p, tp)
        held += share * b
    try:
        w = _whole_weights(whole, tp, dtype)
    except TypeError:
        w = weights(whole, tp, dtype)
    where = f"layers {stage.start}-{stage.end - 1}" if stage.layers != len(decoder_layers(whole)) else "all layers"
    if w.source == "config":
        return int(held), f"counted from the config, {where}"
    return int(w.bytes_per_rank * held / full) if full else 0, f"{w.source}, in the share of {where}"
