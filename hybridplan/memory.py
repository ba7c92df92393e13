"""What one sequence costs: recurrent state per layer kind, attention KV per token, totals at a context.

Pure functions over frozen values. Byte figures are per tensor-parallel rank, the way an engine allocates
them on each GPU.
"""

from __future__ import annotations

from math import prod

from msgspec import Struct

from hybridplan.dtypes import size_of
from hybridplan.errors import PlanError
from hybridplan.spec import Mixer, ModelSpec, Shape, is_recurrent


class CacheDtypes(Struct, frozen=True):
    """Resolved cache dtypes. ``ssm_by_kind`` overrides ``ssm`` for a mixer kind (KDA keeps fp32)."""

    conv: str
    ssm: str
    kv: str
    ssm_by_kind: tuple[tuple[str, str], ...] = ()

    def ssm_for(self, kind: str) -> str:
        return dict(self.ssm_by_kind).get(kind, self.ssm)


class StateGroup(Struct, frozen=True):
    """Identical recurrent layers: ``count`` layers each holding one conv and/or one SSM tensor per sequence."""

    kind: str
    count: int
    conv_shape: Shape | None
    ssm_shape: Shape | None
    conv_dtype: str | None
    ssm_dtype: str | None

    @property
    def conv_bytes_per_layer(self) -> int:
        return prod(self.conv_shape) * size_of(self.conv_dtype) if self.conv_shape else 0

    @property
    def ssm_bytes_per_layer(self) -> int:
        return prod(self.ssm_shape) * size_of(self.ssm_dtype) if self.ssm_shape else 0

    @property
    def bytes_per_layer(self) -> int:
        return self.conv_bytes_per_layer + self.ssm_bytes_per_layer

    @property
    def bytes(self) -> int:
        return self.count * self.bytes_per_layer


class KVGroup(Struct, frozen=True):
    """Identical attention layers; a sliding window caps what each keeps at ``window`` tokens."""

    kind: str
    count: int
    bytes_per_token_per_layer: int
    dtype: str
    window: int | None = None

    def tokens_kept(self, ctx: int) -> int:
        return ctx if self.window is None else min(ctx, self.window)

    def bytes_at(self, ctx: int) -> int:
        return self.count * self.bytes_per_token_per_layer * self.tokens_kept(ctx)

    @property
    def bytes_per_token(self) -> int:
        return self.count * self.bytes_per_token_per_layer


class Footprint(Struct, frozen=True):
    """One sequence of a model as an engine caches it on one rank: its state groups and its KV groups."""

    model: str
    tp: int
    spec_tokens: int
    dtypes: CacheDtypes
    state: tuple[StateGroup, ...]
    kv: tuple[KVGroup, ...]

    @property
    def state_bytes(self) -> int:
        """Recurrent state of one sequence, all layers."""
        return sum(g.bytes for g in self.state)

    @property
    def conv_bytes(self) -> int:
        return sum(g.count * g.conv_bytes_per_layer for g in self.state)

    @property
    def ssm_bytes(self) -> int:
        return sum(g.count * g.ssm_bytes_per_layer for g in self.state)

    @property
    def kv_bytes_per_token(self) -> int:
        """KV of one token over all attention layers (before any window cap)."""
        return sum(g.bytes_per_token for g in self.kv)

    def kv_bytes_at(self, ctx: int) -> int:
        return sum(g.bytes_at(ctx) for g in self.kv)

    def total_at(self, ctx: int) -> int:
        return self.state_bytes + self.kv_bytes_at(ctx)

    def pool_bytes(self, slots: int) -> int:
        return slots * self.state_bytes


def footprint(
    spec: ModelSpec, dtypes: CacheDtypes, *, tp: int = 1, spec_tokens: int = 0, conv_holds_spec: bool = True
) -> Footprint:
    """Group the model's mixers into identical layers and size each on one rank. ``conv_holds_spec``: whether
    the conv windows keep a column per speculative token (an engine's rule; the block count still counts them)."""
    if spec_tokens < 0:
        raise PlanError(f"--spec-tokens must be ≥ 0, got {spec_tokens}")
    spec.check_tp(tp)
    counts: dict[Mixer, int] = {}
    for m in spec.mixers:
        counts[m] = counts.get(m, 0) + 1
    state: list[StateGroup] = []
    kv: list[KVGroup] = []
    for mixer, count in counts.items():
        if is_recurrent(mixer):
            shapes = mixer.state_shapes(tp, spec_tokens if conv_holds_spec else 0)
            state.append(
                StateGroup(
                    kind=mixer.kind,
                    count=count,
                    conv_shape=shapes.conv,
                    ssm_shape=shapes.ssm,
                    conv_dtype=dtypes.conv if shapes.conv else None,
                    ssm_dtype=dtypes.ssm_for(mixer.kind) if shapes.ssm else None,
                )
            )
        else:
            kv.append(
                KVGroup(
                    kind=mixer.kind,
                    count=count,
                    dtype=dtypes.kv,
                    window=mixer.window,
                    bytes_per_token_per_layer=mixer.kv_elements_per_token(tp) * size_of(dtypes.kv),
                )
            )
    return Footprint(model=spec.name, tp=tp, spec_tokens=spec_tokens, dtypes=dtypes, state=tuple(state), kv=tuple(kv))
