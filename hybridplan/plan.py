"""The planner's results: one pure function per command, returning a frozen report that both the table and
``--json`` are made from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from hybridplan.engines import vllm
from hybridplan.errors import PlanError
from hybridplan.memory import Footprint, footprint
from hybridplan.spec import ModelSpec

if TYPE_CHECKING:  # the exact-rational crossover machinery is imported only by `crossover`
    from fractions import Fraction

    from hybridplan.crossover import CrossoverRow

SCHEMA_VERSION = 1
#: contexts of the crossover ladder: 1K … 1M tokens
LADDER = tuple(1024 * 2**k for k in range(11))


@dataclass(frozen=True)
class DtypeChoice:
    """The dtype flags a user typed (None = the engine's "auto")."""

    dtype: str | None = None
    conv: str | None = None
    ssm: str | None = None
    kv: str | None = None


def positive(value: int, flag: str) -> int:
    if value is None or value <= 0:
        raise PlanError(f"{flag} must be a positive integer, got {value}")
    return value


def resolve_footprint(spec: ModelSpec, *, tp: int, choice: DtypeChoice, spec_tokens: int = 0,
                      rel: vllm.Release = vllm.NEWEST, ssm_override: str | None = None) -> Footprint:
    dts = vllm.cache_dtypes(spec, rel, dtype=choice.dtype, conv=choice.conv, ssm=ssm_override or choice.ssm,
                            kv=choice.kv)
    return footprint(spec, dts, tp=tp, spec_tokens=spec_tokens)


def default_ctx(spec: ModelSpec) -> int:
    return spec.max_position_embeddings or 131072


@dataclass(frozen=True)
class SizeReport:
    spec: ModelSpec
    ref: ModelSpec
    fp: Footprint
    ref_fp: Footprint
    ctx: int
    slots: int
    vllm_release: vllm.Release

    @property
    def total_at_ctx(self) -> int:
        return self.fp.total_at(self.ctx)

    @property
    def ref_at_ctx(self) -> int:
        return self.ref_fp.total_at(self.ctx)

    @property
    def ratio(self) -> float:
        """Reference bytes ÷ hybrid bytes at the context: above 1, the hybrid is smaller."""
        return self.ref_at_ctx / self.total_at_ctx if self.total_at_ctx else float("inf")

    def to_dict(self) -> dict:
        fp = self.fp
        full = [g for g in fp.kv if g.window is None] or list(fp.kv)
        return {
            "schema_version": SCHEMA_VERSION,
            "model": self.spec.name,
            "architecture": self.spec.architecture,
            "family": self.spec.family,
            "tp": fp.tp,
            "ctx": self.ctx,
            "spec_tokens": fp.spec_tokens,
            "vllm_version": self.vllm_release.version,
            "layers": self.spec.layer_counts,
            "dtypes": {"conv": fp.dtypes.conv, "ssm": fp.dtypes.ssm, "kv": fp.dtypes.kv},
            "state": {
                "groups": [{
                    "kind": g.kind, "count": g.count,
                    "conv_shape": list(g.conv_shape) if g.conv_shape else None,
                    "ssm_shape": list(g.ssm_shape) if g.ssm_shape else None,
                    "conv_dtype": g.conv_dtype, "ssm_dtype": g.ssm_dtype,
                    "conv_bytes_per_layer": g.conv_bytes_per_layer, "ssm_bytes_per_layer": g.ssm_bytes_per_layer,
                    "bytes_per_layer": g.bytes_per_layer, "bytes": g.bytes,
                } for g in fp.state],
                "conv_bytes_per_sequence": fp.conv_bytes,
                "ssm_bytes_per_sequence": fp.ssm_bytes,
                "bytes_per_sequence": fp.state_bytes,
            },
            "kv": {
                "bytes_per_token_per_layer": full[0].bytes_per_token_per_layer if full else 0,
                "bytes_per_token": fp.kv_bytes_per_token,
                "bytes_at_ctx": fp.kv_bytes_at(self.ctx),
                "groups": [{"kind": g.kind, "count": g.count, "dtype": g.dtype, "window": g.window,
                            "bytes_per_token_per_layer": g.bytes_per_token_per_layer,
                            "bytes_at_ctx": g.bytes_at(self.ctx)} for g in fp.kv],
            },
            "total_bytes_at_ctx": self.total_at_ctx,
            "reference": {"model": self.ref.name, "bytes_per_token": self.ref_fp.kv_bytes_per_token,
                          "bytes_at_ctx": self.ref_at_ctx, "ratio": self.ratio},
            "pool": {"slots": self.slots, "state_bytes": fp.pool_bytes(self.slots)},
            "notes": list(self.spec.notes),
        }


def size(spec: ModelSpec, ref: ModelSpec, *, ctx: int, tp: int = 1, slots: int = 256,
         choice: DtypeChoice = DtypeChoice(), spec_tokens: int = 0,
         rel: vllm.Release = vllm.NEWEST) -> SizeReport:
    positive(ctx, "--ctx")
    positive(slots, "--slots")
    vllm.check_served(spec, rel)
    fp = resolve_footprint(spec, tp=tp, choice=choice, spec_tokens=spec_tokens, rel=rel)
    try:
        ref_fp = resolve_footprint(ref, tp=tp, choice=DtypeChoice(dtype=choice.dtype, kv=choice.kv), rel=rel)
    except PlanError as exc:
        raise PlanError(f"reference {ref.name}: {exc}") from None
    return SizeReport(spec=spec, ref=ref, fp=fp, ref_fp=ref_fp, ctx=ctx, slots=slots, vllm_release=rel)


def _exact(x: Fraction | None) -> dict | None:
    if x is None:
        return None
    return {"value": float(x), "fraction": f"{x.numerator}/{x.denominator}" if x.denominator != 1 else str(x)}


@dataclass(frozen=True)
class CrossoverReport:
    spec: ModelSpec
    ref: ModelSpec
    tp: int
    rows: tuple[CrossoverRow, ...]
    fp: Footprint
    ref_fp: Footprint
    #: the hybrid's footprint behind each row (its SSM dtype)
    row_fps: tuple[Footprint, ...] = ()
    ladder: tuple[int, ...] = LADDER

    def ladder_rows(self) -> list[dict]:
        out = []
        for ctx in self.ladder:
            hyb, ref = self.fp.total_at(ctx), self.ref_fp.total_at(ctx)
            out.append({"ctx": ctx, "hybrid_state_bytes": self.fp.state_bytes,
                        "hybrid_kv_bytes": self.fp.kv_bytes_at(ctx), "hybrid_bytes": hyb, "reference_bytes": ref,
                        "ratio": ref / hyb if hyb else None})
        return out

    def to_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "model": self.spec.name,
            "reference": self.ref.name,
            "tp": self.tp,
            "reference_bytes_per_token": self.ref_fp.kv_bytes_per_token,
            "hybrid_kv_bytes_per_token": self.fp.kv_bytes_per_token,
            "rows": [{
                "ssm_dtype": r.ssm_dtype,
                "state_bytes": r.state_bytes,
                "state_only_tokens": float(r.state_only) if r.state_only is not None else None,
                "state_only_exact": _exact(r.state_only),
                "state_only_first_smaller": r.state_only_tokens,
                "total_tokens": float(r.total) if r.total is not None else None,
                "total_exact": _exact(r.total),
                "total_first_smaller": r.total_tokens,
            } for r in self.rows],
            "ladder": self.ladder_rows(),
            "notes": list(self.spec.notes),
        }


def crossover(spec: ModelSpec, ref: ModelSpec, *, tp: int = 1, choice: DtypeChoice = DtypeChoice(),
              ssm_dtypes: tuple[str, ...] = ("float32", "bfloat16"),
              rel: vllm.Release = vllm.NEWEST) -> CrossoverReport:
    from hybridplan.crossover import crossover_row

    if not spec.recurrent:
        raise PlanError(f"{spec.name} has no recurrent layers: there is no crossover to find")
    vllm.check_served(spec, rel)
    ref_fp = resolve_footprint(ref, tp=tp, choice=DtypeChoice(dtype=choice.dtype, kv=choice.kv), rel=rel)
    default_fp = resolve_footprint(spec, tp=tp, choice=choice, rel=rel)
    dtypes = list(dict.fromkeys([default_fp.dtypes.ssm, *ssm_dtypes])) if not choice.ssm else [default_fp.dtypes.ssm]
    row_fps = tuple(resolve_footprint(spec, tp=tp, choice=choice, rel=rel, ssm_override=d) for d in dtypes)
    rows = tuple(crossover_row(fp, ref_fp) for fp in row_fps)
    return CrossoverReport(spec=spec, ref=ref, tp=tp, rows=rows, fp=default_fp, ref_fp=ref_fp, row_fps=row_fps)
