"""`hybridplan speed`: decode step time and tokens/s at each batch size, the prompt's prefill and TTFT, what
bounds each figure per layer kind, and what a serving benchmark of the workload prints."""

from __future__ import annotations

from typing import TYPE_CHECKING

from msgspec import Struct
from msgspec.structs import replace

from hybridplan.errors import PlanError
from hybridplan.reports import schema_version
from hybridplan.scenario import Scenario
from hybridplan.speed.bench import Bench, Workload, bench, prefill_time
from hybridplan.speed.calibration import Calibration
from hybridplan.speed.costs import decode_mode
from hybridplan.speed.gpus import Datasheet, datasheet
from hybridplan.speed.model import DEFAULT, Efficiency, StepTime, allreduce_time, step_time
from hybridplan.speed.ranges import CLASSES, Range, lookup
from hybridplan.speed.ranges import source as ranges_source
from hybridplan.speed.work import decode_step

if TYPE_CHECKING:
    from hybridplan.speed.dataset import Mix


def batch_sizes(top: int) -> tuple[int, ...]:
    """1, 2, 4, … below ``top``, and ``top``."""
    out, b = [], 1
    while b < top:
        out.append(b)
        b *= 2
    return (*out, top)


class SpeedReport(Struct, frozen=True):
    sc: Scenario
    gpu: Datasheet
    eff: Efficiency
    #: the context each sequence holds at decode
    ctx: int
    steps: tuple[StepTime, ...]
    prefill: StepTime
    prefill_s: float
    bench: Bench
    notes: tuple[str, ...] = ()
    #: under ``--engine both``, SGLang's benchmark beside vLLM's (``bench``): each engine admits its own number
    others: tuple[Bench, ...] = ()
    #: ``--dataset-lengths``: the file the requests' lengths came from (the benchmark's workload is its mean)
    dataset: str | None = None

    def ranges(self, b: Bench) -> dict[str, Range | None]:
        """The held-out P10–P90 range of each of the benchmark's figures (hybridplan/speed/ranges.py)."""
        return {key: lookup(self.sc.spec.is_hybrid, cls, b.workload.concurrency) for key, cls in CLASSES.items()}

    def _bench_dict(self, b: Bench) -> dict:
        """A benchmark's figures, each one's held-out range beside it (None where no held-out row prices one)."""
        d = b.to_dict()
        d["ranges"] = {key: (r.to_dict(d[key]) if r is not None else None) for key, r in self.ranges(b).items()}
        return d

    @property
    def benches(self) -> tuple[Bench, ...]:
        return (self.bench, *self.others)

    @property
    def graphs(self) -> bool:
        return not self.sc.vllm.enforce_eager

    def to_dict(self) -> dict:
        sc = self.sc
        rows = []
        for st in self.steps:
            name, share = st.main_bound
            rows.append(
                {
                    "batch": st.step.batch,
                    "step_ms": st.seconds * 1e3,
                    "tokens_per_s": st.step.tokens / st.seconds,
                    "bound": name,
                    "bound_share": share,
                    "admitted": st.step.batch <= self.bench.running,
                }
            )
        return {
            "schema_version": schema_version("speed"),
            "model": sc.spec.name,
            "tp": sc.tp,
            "gpu": self.gpu.key,
            "datasheet": self.gpu.to_dict(),
            "efficiency": self.eff.to_dict(),
            "ctx": self.ctx,
            "cuda_graphs": self.graphs,
            "decode": rows,
            "decode_steps": [st.to_dict() for st in self.steps],
            "prefill": {
                "tokens": self.bench.workload.input,
                "seconds": self.prefill_s,
                "tokens_per_s": self.bench.workload.input / self.prefill_s,
                **self.prefill.to_dict(),
            },
            "bench": self._bench_dict(self.bench),
            "benches": [self._bench_dict(b) for b in self.benches],
            "dataset": self.dataset,
            "notes": list(self.notes),
        }


def speed(
    sc: Scenario,
    wl: Workload,
    ctx: int,
    eff: Efficiency = DEFAULT,
    calibration: Calibration | None = None,
    mix: Mix | None = None,
) -> SpeedReport:
    """The report for the scenario; ``calibration`` (a profile's measurements) refines ``eff``; ``mix`` (each
    request's prompt and output, from a dataset) is benchmarked as that mix (hybridplan/speed/dataset.py), ``wl``
    its mean."""
    if sc.budget.gpu is None:
        raise PlanError("speed needs --gpu-type: the GPU's datasheet figures (hybridplan gpus lists the GPUs)")
    g = datasheet(sc.budget.gpu)
    cal_notes: list[str] = []
    if calibration is not None:
        eff = calibration.efficiency(g, eff)
        cal_notes.append(
            f"calibrated by a profile of {calibration.model} on {calibration.device}: recurrent state "
            f"at {eff.state_hbm or eff.hbm:.0%} of the HBM datasheet figure, chunked scans at "
            f"{eff.scan or eff.tensor:.0%} of the tensor peak, {eff.kernel_floor_graph_us:.2f} µs a "
            "launch"
        )
        if not calibration.on_gpu:
            cal_notes.append(
                f"the calibration comes from {calibration.backend} (the CPU pipeline), not a GPU: its "
                "figures test the plumbing and say nothing of a GPU's speed"
            )
    benches, refused = _benches(sc, g, wl, eff, mix)
    b = benches[0]
    steps = tuple(
        step_time(
            decode_step(sc, n, ctx), g, eff, tp=sc.tp, graphs=decode_mode(sc, n)[0], overlap=decode_mode(sc, n)[1]
        )
        for n in batch_sizes(max(wl.concurrency, 1))
    )
    pf, t_pf = prefill_time(sc, g, eff, wl.input)
    notes = [
        f"efficiencies: {eff.source}; HBM {eff.hbm:.0%} and tensor {eff.tensor:.0%} of the datasheet ({g.sheet})",
        *cal_notes,
        *(f"{_LABEL[x.engine]}: {n}" if len(benches) > 1 else n for x in benches for n in x.notes),
        *refused,
    ]
    if sc.budget.gpu_note:
        notes.insert(0, sc.budget.gpu_note)
    if sc.tp > 1 and b.decode.step.allreduces:
        per, src = allreduce_time(b.decode.step, g, eff, sc.tp)
        st = b.decode.step
        notes.append(
            f"all-reduce: {st.allreduces} per decode step of {st.allreduce_bytes:,.0f} B, "
            f"{per * 1e6:.1f} µs each ({src})"
        )
    notes.append(
        f"ranges: P10–P90 of the measured / predicted ratio of held-out published runs of "
        f"{'hybrid' if sc.spec.is_hybrid else 'attention-only'} models at this concurrency's regime "
        f"(grouped k-fold, {ranges_source()}; docs/speed.md)"
    )
    if g.fp32_tflops is None and any(w.scalar_flops for st in steps for w in st.step.kinds):
        notes.append(f"{g.key}: no fp32 figure in its datasheet; the recurrent layers' fp32 work is not timed")
    return SpeedReport(
        sc, g, eff, ctx, steps, pf, t_pf, b, tuple(notes), tuple(benches[1:]), mix.source if mix is not None else None
    )


_LABEL = {"vllm": "vLLM", "sglang": "SGLang"}


def _benches(
    sc: Scenario, g: Datasheet, wl: Workload, eff: Efficiency, mix: Mix | None = None
) -> tuple[list[Bench], list[str]]:
    """The benchmark of each engine asked for; under ``both``, one engine's refusal is a note beside the other's
    figures (an error only when neither starts)."""

    def one(s: Scenario) -> Bench:
        if mix is None:
            return bench(s, g, wl, eff)
        from hybridplan.speed.dataset import bench_mix

        return bench_mix(s, g, mix, eff)

    if sc.engine != "both":
        return [one(sc)], []
    out, refused, first = [], [], None
    for e in ("vllm", "sglang"):
        try:
            out.append(one(replace(sc, engine=e)))
        except PlanError as exc:
            first = first or exc
            refused.append(f"{_LABEL[e]}: no benchmark: {exc}")
    if not out:
        raise first
    return out, refused
