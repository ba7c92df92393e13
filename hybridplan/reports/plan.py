"""`hybridplan plan`: the best few ways to serve a model at a context and concurrency on one GPU type, each
with the command that starts it (built as `fit` builds its commands, hybridplan/cmdline.py), and why the
layouts on fewer GPUs fail."""

from __future__ import annotations

from msgspec import Struct

from hybridplan.errors import PlanError
from hybridplan.plan import Plan, PlanResult, Rejection
from hybridplan.reports import schema_version


def _range_columns(p) -> dict:
    """The plan's held-out P10 and P90 of tok/s per GPU (hybridplan/speed/ranges.py), None where it has none."""
    r = p.rate_range
    lo, hi = r.around(p.tokens_per_s_per_gpu) if r is not None else (None, None)
    return {"decode_tokens_per_s_per_gpu_p10": lo, "decode_tokens_per_s_per_gpu_p90": hi}


class PlanReport(Struct, frozen=True):
    result: PlanResult
    model_ref: str | None = None
    revision: str | None = None

    def fit_report(self, p: Plan):
        """The plan as `fit` reports it: its engine's fit at the plan's scenario."""
        from hybridplan.reports.fit import FitReport

        return FitReport(p.scenario, {p.layout.engine: p.part}, model_ref=self.model_ref, revision=self.revision)

    def command(self, p: Plan):
        return self.fit_report(p).commands()[p.layout.engine]

    def picked(self, n: int) -> Plan:
        """The ``n``th plan as `plan` lists them (1-based: 1 is the best)."""
        plans = self.result.plans
        if not plans:
            raise PlanError("no plan holds the target, so there is nothing to pick")
        if not 1 <= n <= len(plans):
            raise PlanError(
                f"--pick {n}: there {'is 1 plan' if len(plans) == 1 else f'are {len(plans)} plans'}, "
                f"pick 1 to {len(plans)}"
            )
        return plans[n - 1]

    def targets(self, n: int = 1, gpus_per_node: int = 8) -> dict:
        """What `--emit` writes for the ``n``th plan: what `fit` with that plan's command writes."""
        return self.fit_report(self.picked(n)).targets(gpus_per_node)

    csv_columns = (
        "rank",
        "engine",
        "gpus",
        "tp",
        "pp",
        "dp",
        "expert_parallel",
        "ep_size",
        "dp_attention",
        "kv_dtype",
        "ssm_dtype",
        "mamba_cache_mode",
        "holds_requests",
        "margin_fraction",
        "decode_tokens_per_s_per_gpu",
        "decode_tokens_per_s_per_gpu_p10",
        "decode_tokens_per_s_per_gpu_p90",
        "command",
    )

    def csv_rows(self) -> list[dict]:
        """One row per plan, in the order `plan` lists them (``csv_columns``; a variant's None: the engine's
        default)."""
        out = []
        for i, p in enumerate(self.result.plans, 1):
            lay, v, c = p.layout, p.variant, self.command(p)
            out.append(
                {
                    "rank": i,
                    "engine": lay.engine,
                    "gpus": lay.gpus,
                    "tp": lay.tp,
                    "pp": lay.pp,
                    "dp": lay.dp,
                    "expert_parallel": lay.expert_parallel,
                    "ep_size": lay.ep_size,
                    "dp_attention": lay.dp_attention,
                    "kv_dtype": v.kv,
                    "ssm_dtype": v.ssm,
                    "mamba_cache_mode": v.mode,
                    "holds_requests": p.holds,
                    "margin_fraction": p.margin,
                    "decode_tokens_per_s_per_gpu": p.tokens_per_s_per_gpu,
                    **_range_columns(p),
                    "command": None if c is None else str(c),
                }
            )
        return out

    @property
    def fewest(self) -> int | None:
        return min((p.layout.gpus for p in self.result.plans), default=None)

    def why_not_fewer(self) -> list[tuple[str, str, list[Rejection]]]:
        """(GPUs, reason kind, layouts) for the layouts on fewer GPUs than the best plan (all tried, if none),
        fewest GPUs first; consecutive counts that fail for one same reason alone share a row ("1-4")."""
        limit = self.fewest
        by_count: dict[int, dict[str, list[Rejection]]] = {}
        for r in self.result.rejected:
            if limit is not None and r.layout.gpus >= limit:
                continue
            by_count.setdefault(r.layout.gpus, {}).setdefault(kind(r), []).append(r)
        rows: list[tuple[int, int, str, list[Rejection]]] = []
        alone = False  # whether the last row is a count (or counts) that failed for one reason alone
        for n in sorted(by_count):
            kinds = by_count[n]
            if alone and len(kinds) == 1 and rows[-1][1] == n - 1 and rows[-1][2] in kinds:
                lo, _, k, rs = rows[-1]
                rows[-1] = (lo, n, k, rs + kinds[k])
                continue
            rows += [(n, n, k, rs) for k, rs in kinds.items()]
            alone = len(kinds) == 1
        return [(f"{lo}" if lo == hi else f"{lo}-{hi}", k, rs) for lo, hi, k, rs in rows]

    def default_notes(self) -> list[str]:
        """Which batch and chunk defaults the plans were sized with, once per engine (the first plan's)."""
        from hybridplan.engines.sglang import defaults as sglang_defaults
        from hybridplan.engines.vllm import defaults as vllm_defaults

        out: list[str] = []
        for engine, mod in (("vllm", vllm_defaults), ("sglang", sglang_defaults)):
            p = next((p for p in self.result.plans if p.layout.engine == engine), None)
            if p is not None and (n := mod.note(p.scenario)):
                out.append(n)
        return out

    @property
    def ok(self) -> bool:
        return bool(self.result.plans)

    def to_dict(self) -> dict:
        r = self.result
        plans = []
        for p in r.plans:
            c = self.command(p)
            plans.append({**p.to_dict(), "command": None if c is None else {"env": list(c.env), "argv": list(c.argv)}})
        return {
            "schema_version": schema_version("plan"),
            "model": r.base.spec.name,
            "ctx": r.base.ctx,
            "concurrency": r.concurrency,
            "gpu": r.base.budget.gpu,
            "max_gpus": r.max_gpus,
            "layouts_tried": r.tried,
            "plans": plans,
            "rejected": [x.to_dict() for x in r.rejected],
            "notes": [r.base.budget.gpu_note] if r.base.budget.gpu_note else [],
        }


#: a rejection's kind (hybridplan/plan.py REJECTION_KINDS) as a family of causes a person reads
KIND_WORDS = {
    "refused": "the engine refuses the layout",
    "not modelled": "not modelled by hybridplan",
    "weights": "the weights do not fit",
    "too few": "too few requests fit (KV blocks or state slots)",
    "memory": "too few requests fit in the GPUs' memory",
}


def kind(r: Rejection) -> str:
    """A rejection's cause, as a family a person reads."""
    if r.kind in KIND_WORDS:
        return KIND_WORDS[r.kind]
    if "Mamba cache blocks" in r.reason or "mamba" in r.reason.lower():
        return "too few Mamba state slots"
    return "does not start"
