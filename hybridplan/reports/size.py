"""`hybridplan size`: shapes and bytes per layer kind, KV per token and at the context, totals, a reference
model at the same context, and a pool of state slots."""

from __future__ import annotations

from typing import TYPE_CHECKING

from msgspec import Struct
from msgspec.structs import replace

from hybridplan.engines import vllm
from hybridplan.errors import PlanError
from hybridplan.memory import Footprint
from hybridplan.reports import SCHEMA_VERSION
from hybridplan.scenario import DtypeChoice, Scenario
from hybridplan.spec import ModelSpec

if TYPE_CHECKING:
    from hybridplan.reports.engines import EngineReport
    from hybridplan.weights import Weights


class SizeReport(Struct, frozen=True):
    """`size`'s report: the model's footprint beside the reference's at the scenario's context."""

    sc: Scenario
    ref: ModelSpec
    fp: Footprint
    ref_fp: Footprint
    #: with `--engine`, what each engine allocates
    engines: EngineReport | None = None
    #: the model's weights, counted from its config (None for a family hybridplan does not count)
    weights: Weights | None = None
    #: how the release was chosen, where it is not the one asked for
    release_notes: tuple[str, ...] = ()
    #: with --pp, what each pipeline stage keeps (hybridplan/engines/vllm/parallel.py ``StageSize``)
    stages: tuple = ()

    @property
    def spec(self) -> ModelSpec:
        return self.sc.spec

    @property
    def ctx(self) -> int:
        return self.sc.ctx

    @property
    def slots(self) -> int:
        return self.sc.slots

    @property
    def vllm_release(self) -> vllm.Release:
        return self.sc.vllm.release

    @property
    def notes(self) -> tuple[str, ...]:
        """The config's assumed fields, and vLLM's refusal of the context where it would refuse it."""
        from hybridplan.engines.vllm.context import refusal

        why = refusal(self.sc)
        late = (
            (
                f"sized as asked, but vLLM {self.vllm_release.version} would not start with --max-model-len "
                f"{self.ctx}: {why}",
            )
            + self._longer()
            if why
            else ()
        )
        staged = tuple(s.line for s in self.stages) + (
            (
                "the figures above are the whole model's; each stage keeps only its own layers' (vLLM's split, "
                "vllm/distributed/utils.py get_pp_indices)",
            )
            if self.sc.pp > 1
            else ()
        )
        return self.release_notes + self.spec.notes + self.vllm_release.caveats(self.spec) + late + staged

    def _longer(self) -> tuple[str, ...]:
        """Which checkpoint the model is, and the shipped specs of its architecture made for the context asked."""
        from hybridplan.loader import shipped_contexts

        spec = self.spec
        made = spec.max_position_embeddings
        longer = [
            name for name, n in shipped_contexts(spec.architecture).items() if name != spec.name and n >= self.ctx
        ]
        what = f"{spec.name} is {spec.source}" if spec.source else spec.name
        what += f", made for {made:,} tokens" if made else ""
        if not longer:
            return (what,)
        return (f"{what}; the shipped {spec.family} specs made for {self.ctx:,} tokens or more: {', '.join(longer)}",)

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
                "groups": [
                    {
                        "kind": g.kind,
                        "count": g.count,
                        "conv_shape": list(g.conv_shape) if g.conv_shape else None,
                        "ssm_shape": list(g.ssm_shape) if g.ssm_shape else None,
                        "conv_dtype": g.conv_dtype,
                        "ssm_dtype": g.ssm_dtype,
                        "conv_bytes_per_layer": g.conv_bytes_per_layer,
                        "ssm_bytes_per_layer": g.ssm_bytes_per_layer,
                        "bytes_per_layer": g.bytes_per_layer,
                        "bytes": g.bytes,
                    }
                    for g in fp.state
                ],
                "conv_bytes_per_sequence": fp.conv_bytes,
                "ssm_bytes_per_sequence": fp.ssm_bytes,
                "bytes_per_sequence": fp.state_bytes,
            },
            "kv": {
                "bytes_per_token_per_layer": full[0].bytes_per_token_per_layer if full else 0,
                "bytes_per_token": fp.kv_bytes_per_token,
                "bytes_at_ctx": fp.kv_bytes_at(self.ctx),
                "groups": [
                    {
                        "kind": g.kind,
                        "count": g.count,
                        "dtype": g.dtype,
                        "window": g.window,
                        "bytes_per_token_per_layer": g.bytes_per_token_per_layer,
                        "bytes_at_ctx": g.bytes_at(self.ctx),
                    }
                    for g in fp.kv
                ],
            },
            "total_bytes_at_ctx": self.total_at_ctx,
            "reference": {
                "model": self.ref.name,
                "bytes_per_token": self.ref_fp.kv_bytes_per_token,
                "bytes_at_ctx": self.ref_at_ctx,
                "ratio": self.ratio,
            },
            "pool": {"slots": self.slots, "state_bytes": fp.pool_bytes(self.slots)},
            "weights": self.weights.to_dict() if self.weights else None,
            "notes": list(self.notes),
            **(
                {
                    "pp": self.sc.pp,
                    "dp": self.sc.dp,
                    "expert_parallel": self.sc.expert_parallel,
                    "stages": [s.to_dict() for s in self.stages],
                }
                if self.stages
                else {}
            ),
            **(self.engines.to_dict() if self.engines else {}),
        }


def reference(sc: Scenario, ref: ModelSpec) -> Scenario:
    """The reference model served like the hybrid: same TP, model and KV dtypes, no state flags."""
    return replace(sc, spec=ref, dtypes=DtypeChoice(dtype=sc.dtypes.dtype, kv=sc.dtypes.kv), spec_tokens=0)


def _served(sc: Scenario) -> tuple[Scenario, tuple[str, ...]]:
    """The scenario under a release that serves the model. With no --vllm-version (the newest release) and a
    model the newest release no longer serves, or does not serve yet, the newest release that does, said in a
    note; a release the user named is kept, and refuses as vLLM would."""
    from hybridplan.engines.vllm.releases import NEWEST, newest_serving
    from hybridplan.errors import NotServed

    try:
        sc.vllm.release.check_served(sc.spec)
        return sc, ()
    except NotServed as exc:
        rel = newest_serving(sc.spec) if sc.vllm.release is NEWEST else None
        if rel is None:
            raise
        why = str(exc).split("; try --vllm-version")[0]
        return (
            replace(sc, vllm=replace(sc.vllm, release=rel)),
            (
                f"sized with vLLM {rel.version}'s rules, the newest release that serves it ({why}); "
                f"--vllm-version picks another",
            ),
        )


def size(sc: Scenario, ref: ModelSpec, with_engines: bool = False) -> SizeReport:
    """The model's footprint under vLLM's dtype rules beside ``ref``'s, and with ``with_engines`` what the
    engines the scenario asks for allocate."""
    sc, served = _served(sc)
    fp = vllm.footprint(sc)
    try:
        ref_fp = vllm.footprint(reference(sc, ref))
    except PlanError as exc:
        raise PlanError(f"reference {ref.name}: {exc}") from None
    from hybridplan.engines.vllm.dtypes import model_dtype
    from hybridplan.weights import weights

    try:
        w = weights(sc.spec, sc.tp, model_dtype(sc.spec, sc.dtypes.dtype))
    except PlanError:
        w = None
    staged: tuple = ()
    if sc.pp > 1 or sc.dp > 1 or sc.expert_parallel:
        from hybridplan.engines.vllm.parallel import stage_sizes

        staged = stage_sizes(sc)
    if not with_engines:
        return SizeReport(sc, ref, fp, ref_fp, weights=w, release_notes=served, stages=staged)
    from hybridplan.reports.engines import engine_layouts

    return SizeReport(sc, ref, fp, ref_fp, engine_layouts(sc), weights=w, release_notes=served, stages=staged)
