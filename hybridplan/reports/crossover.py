"""`hybridplan crossover`: the context past which the hybrid needs less memory per sequence than a
reference, for each SSM dtype, and a ladder of contexts 1K … 1M."""

from __future__ import annotations

from typing import TYPE_CHECKING

from msgspec import Struct
from msgspec.structs import replace

from hybridplan.engines import vllm
from hybridplan.errors import PlanError
from hybridplan.memory import Footprint
from hybridplan.reports import SCHEMA_VERSION
from hybridplan.reports.size import reference
from hybridplan.scenario import Scenario
from hybridplan.spec import ModelSpec

if TYPE_CHECKING:  # the exact-rational crossover machinery is imported only by `crossover`
    from fractions import Fraction

    from hybridplan.crossover import CrossoverRow

#: contexts of the crossover ladder: 1K … 1M tokens
LADDER = tuple(1024 * 2**k for k in range(11))
#: the SSM dtypes compared besides the engine's default
SSM_DTYPES = ("float32", "bfloat16")


def _exact(x: Fraction | None) -> dict | None:
    if x is None:
        return None
    return {"value": float(x), "fraction": f"{x.numerator}/{x.denominator}" if x.denominator != 1 else str(x)}


class CrossoverReport(Struct, frozen=True):
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
            out.append(
                {
                    "ctx": ctx,
                    "hybrid_state_bytes": self.fp.state_bytes,
                    "hybrid_kv_bytes": self.fp.kv_bytes_at(ctx),
                    "hybrid_bytes": hyb,
                    "reference_bytes": ref,
                    "ratio": ref / hyb if hyb else None,
                }
            )
        return out

    def to_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "model": self.spec.name,
            "reference": self.ref.name,
            "tp": self.tp,
            "reference_bytes_per_token": self.ref_fp.kv_bytes_per_token,
            "reference_state_bytes": self.ref_fp.state_bytes,
            "hybrid_kv_bytes_per_token": self.fp.kv_bytes_per_token,
            "rows": [
                {
                    "ssm_dtype": r.ssm_dtype,
                    "state_bytes": r.state_bytes,
                    "state_only_tokens": float(r.state_only) if r.state_only is not None else None,
                    "state_only_exact": _exact(r.state_only),
                    "state_only_first_smaller": r.state_only_tokens,
                    "total_tokens": float(r.total) if r.total is not None else None,
                    "total_exact": _exact(r.total),
                    "total_first_smaller": r.total_tokens,
                }
                for r in self.rows
            ],
            "ladder": self.ladder_rows(),
            "notes": list(self.spec.notes),
        }


def crossover(sc: Scenario, ref: ModelSpec) -> CrossoverReport:
    """One row per SSM dtype: the engine's default first, then fp32 and bf16 (only the one asked for, when
    ``--ssm-dtype`` is given)."""
    from hybridplan.crossover import crossover_row

    spec = sc.spec
    if not spec.recurrent:
        raise PlanError(f"{spec.name} has no recurrent layers: there is no crossover to find")
    if (spec.name, spec, spec.facts) == (ref.name, ref, ref.facts):
        raise PlanError(
            f"{spec.name} against itself: the two needs are equal at every context, so there is no "
            "crossover; name another reference with --vs"
        )
    sc.vllm.release.check_served(spec)
    ref_fp = vllm.footprint(reference(sc, ref))
    default_fp = vllm.footprint(sc)
    dtypes = [default_fp.dtypes.ssm] if sc.dtypes.ssm else list(dict.fromkeys([default_fp.dtypes.ssm, *SSM_DTYPES]))
    row_fps = tuple(vllm.footprint(replace(sc, dtypes=replace(sc.dtypes, ssm=d))) for d in dtypes)
    rows = tuple(crossover_row(fp, ref_fp) for fp in row_fps)
    return CrossoverReport(spec=spec, ref=ref, tp=sc.tp, rows=rows, fp=default_fp, ref_fp=ref_fp, row_fps=row_fps)
