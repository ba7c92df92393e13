"""Step time from work: each layer kind takes the longest of its memory time (bytes over the achieved HBM
bandwidth), its tensor time (FLOPs over the achieved tensor peak), its fp32 time and its launch floor; the
TP all-reduces and the engine's per-step overhead add to that. Pure functions.

The achieved fractions (``Efficiency``) are the only fitted figures. They were fitted on published
measurements of attention-only models (the fixtures named in ``FITTED_ON``) and are held fixed for the hybrids,
so a hybrid's figures are a prediction, not a fit (validation/speed.py, docs/VALIDATION.md).
"""

from __future__ import annotations


from msgspec import Struct
from msgspec.structs import replace

from hybridplan.errors import PlanError
from hybridplan.speed.gpus import Datasheet
from hybridplan.speed.work import Step, Work

#: what bounds a layer kind's time
BOUNDS = ("weights", "KV reads", "state reads and writes", "FLOPs", "fp32 FLOPs", "launch overhead",
          "communication", "step overhead")


class Efficiency(Struct, frozen=True):
    """Achieved over peak, and the fixed costs, as one engine on one GPU reaches them."""

    #: HBM bandwidth a large decode GEMV or cache read reaches
    hbm: float = 0.75
    #: tensor-core peak a prefill reaches on large matmuls
    tensor: float = 0.65
    #: fp32 peak a recurrent kernel reaches
    scalar: float = 0.30
    #: the link's one-way bandwidth an all-reduce reaches
    link: float = 0.70
    #: HBM fraction the recurrent state's reads and writes reach, and tensor fraction the chunked scans reach;
    #: None: as ``hbm`` and ``tensor`` (only a profile measures them: hybridplan/speed/calibration.py)
    state_hbm: float | None = None
    scan: float | None = None
    #: tokens per expert at which a routed expert's grouped GEMM in a prefill reaches half of ``tensor``: each
    #: expert's GEMM of m tokens takes as long as a large matmul of m + this many tokens would (its fixed cost:
    #: weight tiles loaded for few rows, partial tiles, the permute around it), see ``grouped_gemm_efficiency``
    expert_tokens_half: float = 192.0
    #: µs a kernel takes at the least, replayed from a CUDA graph, and launched eagerly
    kernel_floor_graph_us: float = 1.0
    kernel_floor_eager_us: float = 6.0
    #: µs an all-reduce takes at the least, on top of its bytes over the link; None (the default): over NVLink, the
    #: measured latency of vLLM's custom all-reduce at the message size and TP (``ALLREDUCE_NVLINK_US``), elsewhere
    #: ``ALLREDUCE_FALLBACK_US`` plus the ring's bytes (``comm_time``)
    allreduce_us: float | None = None
    #: µs the engine spends per decode step outside the GPU's kernels (scheduling, sampling, detokenising)
    step_overhead_us: float = 0.0
    #: µs of fixed cost a prefill chunk adds (its own step)
    prefill_overhead_us: float = 0.0
    #: where the figures come from
    source: str = "fitted on attention-model fixtures (FITTED_ON; python validation/speed.py --fit)"

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__struct_fields__}


#: µs one all-reduce takes, by TP degree and message size in bytes, for vLLM's custom all-reduce kernel on H100s
#: over NVLink: the "vllm" table of SGLang PR #2904 (https://github.com/sgl-project/sglang/pull/2904, 2025-01-15,
#: sgl-kernel tests/test_trt_reduce.py ``performance``: 5,000 eager calls timed by the wall clock, no CUDA graph,
#: tensors of 512 … 1,048,576 float32 elements, so 2 KiB … 4 MiB; the PR prints milliseconds). Eager timing holds
#: each call's host launch, so inside a CUDA graph a call takes no longer than this. Used for every NVLink GPU (the
#: kernel's one- and two-shot algorithms are the same there; an NVLink 5 link is faster than the H100's 4, which
#: this does not credit), between the points linearly in bytes, past the last point its bytes at the link.
ALLREDUCE_NVLINK_US: dict[int, tuple[tuple[int, float], ...]] = {
    2: ((2048, 9.5), (16384, 8.8), (131072, 8.7), (1048576, 12.9), (2097152, 17.7), (4194304, 26.6)),
    4: ((2048, 9.1), (16384, 8.5), (131072, 9.2), (1048576, 20.6), (2097152, 26.9), (4194304, 40.2)),
    8: ((2048, 10.1), (16384, 9.3), (131072, 11.8), (1048576, 24.1), (2097152, 30.4), (4194304, 45.0)),
}
#: µs an all-reduce takes at the least where no measured table applies (PCIe, xGMI, no link): a round figure of
#: the order of NCCL's small-message latency, plus the ring's bytes at the link
ALLREDUCE_FALLBACK_US = 8.0

#: the fixtures (tests/data/speed/) the defaults were fitted on: attention-only models, never a hybrid. The
#: search (validation/speed.py ``fit``) set hbm, kernel_floor_graph_us and step_overhead_us on the dense
#: fixtures' TPOTs, then tensor and prefill_overhead_us on their TTFTs, then expert_tokens_half on the
#: attention-only MoE fixtures' TTFTs (FITTED_ON_MOE) with the rest held; scalar, link, allreduce_us and the
#: eager floor are not fitted (no attention fixture resolves them) and keep round values of the order published
#: kernels reach.
FITTED_ON_DENSE: tuple[str, ...] = ("tt-143-qwen2.5-72b-2xh100.json", "pages-llama-3.1-8b-decode.json")
FITTED_ON_MOE: tuple[str, ...] = ("tt-340-qwen3-30b-a3b-a100.json",)
FITTED_ON: tuple[str, ...] = FITTED_ON_DENSE + FITTED_ON_MOE
DEFAULT = Efficiency()


class KindTime(Struct, frozen=True):
    kind: str
    seconds: float
    bound: str
    #: the bound's time over the step's
    share: float
    memory_s: float
    tensor_s: float
    scalar_s: float
    launch_s: float
    work: Work | None = None

    def to_dict(self) -> dict:
        d = {"kind": self.kind, "seconds": self.seconds, "bound": self.bound, "share": self.share,
             "memory_s": self.memory_s, "tensor_s": self.tensor_s, "scalar_s": self.scalar_s,
             "launch_s": self.launch_s}
        if self.work is not None:
            d["work"] = self.work.to_dict()
        return d


class StepTime(Struct, frozen=True):
    step: Step
    kinds: tuple[KindTime, ...]
    seconds: float

    @property
    def bound(self) -> KindTime:
        return max(self.kinds, key=lambda k: k.seconds)

    def by_bound(self) -> dict[str, float]:
        """Seconds of the step each bound accounts for."""
        out: dict[str, float] = {}
        for k in self.kinds:
            out[k.bound] = out.get(k.bound, 0.0) + k.seconds
        return out

    @property
    def main_bound(self) -> tuple[str, float]:
        b = self.by_bound()
        name = max(b, key=b.get)
        return name, b[name] / self.seconds if self.seconds else 0.0

    def to_dict(self) -> dict:
        name, share = self.main_bound
        return {"phase": self.step.phase, "batch": self.step.batch, "ctx": self.step.ctx,
                "tokens": self.step.tokens, "seconds": self.seconds, "bound": name, "bound_share": share,
                "by_bound_s": self.by_bound(), "kinds": [k.to_dict() for k in self.kinds]}


def _need(value: float | None, what: str, g: Datasheet) -> float:
    if value is None:
        raise PlanError(f"{g.key}: its datasheet figure for {what} is not recorded (hybridplan/speed/gpus.py)")
    return value


def tensor_peak(g: Datasheet, dtype: str) -> float:
    """FLOP/s of the tensor cores at the weights' dtype class (fp8 falls back to bf16 where the GPU has none)."""
    if dtype == "fp8" and g.fp8_tflops is not None:
        return g.fp8_tflops * 1e12
    return _need(g.bf16_tflops, "bf16 tensor FLOP/s", g) * 1e12


def grouped_gemm_efficiency(expert_tokens: float, eff: Efficiency) -> float:
    """Tensor fraction a routed expert's GEMM of ``expert_tokens`` rows reaches in a prefill: a fixed cost worth
    ``expert_tokens_half`` rows on top of the rows it has, so ``tensor`` · m / (m + m½); large m → ``tensor``."""
    if expert_tokens <= 0:
        return eff.tensor
    return eff.tensor * expert_tokens / (expert_tokens + eff.expert_tokens_half)


def kind_time(w: Work, g: Datasheet, eff: Efficiency, dtype: str, graphs: bool) -> KindTime:
    peak_bw = _need(g.hbm_gbps, "HBM bandwidth", g) * 1e9
    state_eff = eff.state_hbm if eff.state_hbm is not None else eff.hbm
    mem = (w.weight_bytes + w.kv_bytes) / (peak_bw * eff.hbm) + w.state_bytes / (peak_bw * state_eff)
    peak = tensor_peak(g, dtype)
    scan_eff = eff.scan if eff.scan is not None else eff.tensor
    # the routed experts' share of the FLOPs at the grouped GEMM's fraction, the rest at the large-matmul one
    routed = w.routed_flops / (peak * grouped_gemm_efficiency(w.expert_tokens, eff)) if w.routed_flops else 0.0
    ten = (w.flops - w.routed_flops) / (peak * eff.tensor) + routed + w.scan_flops / (peak * scan_eff)
    # a GPU whose datasheet names no fp32 figure: its recurrent fp32 work is not timed (Step notes say so)
    sca = w.scalar_flops / (g.fp32_tflops * 1e12 * eff.scalar) if w.scalar_flops and g.fp32_tflops else 0.0
    floor = (eff.kernel_floor_graph_us if graphs else eff.kernel_floor_eager_us) * 1e-6
    launch = w.kernels * floor
    # the work runs at the slowest of its rates; each kernel adds its fixed launch-and-drain time on top
    parts = {"memory": mem, "FLOPs": ten, "fp32 FLOPs": sca}
    top = max(parts, key=parts.get)
    if launch > parts[top]:
        top = "launch overhead"
    elif top == "memory":
        split = {"weights": w.weight_bytes, "KV reads": w.kv_bytes, "state reads and writes": w.state_bytes}
        top = max(split, key=split.get)
    seconds = max(parts.values()) + launch
    return KindTime(w.kind, seconds, top, 1.0, mem, ten, sca, launch, w)


def allreduce_nvlink_us(tp: int, nbytes: float) -> float:
    """µs one all-reduce of ``nbytes`` takes at TP ``tp`` over NVLink, from ``ALLREDUCE_NVLINK_US``: the table of
    the smallest measured TP ≥ ``tp`` (TP 3 is priced as 4, 5–7 as 8, above 8 as 8), linear in bytes between its
    points, flat below the first; past the last, its slope between the last two points carries on."""
    key = next((k for k in sorted(ALLREDUCE_NVLINK_US) if k >= tp), max(ALLREDUCE_NVLINK_US))
    pts = ALLREDUCE_NVLINK_US[key]
    if nbytes <= pts[0][0]:
        return pts[0][1]
    for (b0, t0), (b1, t1) in zip(pts, pts[1:]):
        if nbytes <= b1:
            return t0 + (t1 - t0) * (nbytes - b0) / (b1 - b0)
    (b0, t0), (b1, t1) = pts[-2], pts[-1]
    return t1 + (t1 - t0) * (nbytes - b1) / (b1 - b0)


def allreduce_time(step: Step, g: Datasheet, eff: Efficiency, tp: int) -> tuple[float, str]:
    """Seconds one of the step's all-reduces takes, and where the figure comes from."""
    if eff.allreduce_us is None and g.link.startswith("NVLink"):
        return (allreduce_nvlink_us(tp, step.allreduce_bytes) * 1e-6,
                "vLLM's custom all-reduce measured on H100 NVLink (SGLang PR #2904)")
    link = _need(g.link_gbps, "the GPU-to-GPU link", g) * 1e9 / 2 * eff.link
    fixed = ALLREDUCE_FALLBACK_US if eff.allreduce_us is None else eff.allreduce_us
    return (fixed * 1e-6 + 2 * (tp - 1) / tp * step.allreduce_bytes / link,
            f"a ring over {g.link}: {fixed:g} µs + its bytes at {eff.link:.0%} of the link")


def comm_time(step: Step, g: Datasheet, eff: Efficiency, tp: int) -> float:
    """The step's TP all-reduces: over NVLink each at vLLM's measured custom all-reduce latency for its size
    (``allreduce_nvlink_us``) unless ``eff.allreduce_us`` is set; otherwise a ring, each rank sending and receiving
    2·(tp−1)/tp of the message one way at half the link, after a fixed latency."""
    if tp <= 1 or not step.allreduces:
        return 0.0
    return step.allreduces * allreduce_time(step, g, eff, tp)[0]


def step_time(step: Step, g: Datasheet, eff: Efficiency = DEFAULT, *, tp: int = 1, graphs: bool = True) -> StepTime:
    kinds = [kind_time(w, g, eff, step.tensor_dtype, graphs) for w in step.kinds if w.bytes or w.flops
             or w.scan_flops or w.scalar_flops or w.kernels]
    comm = comm_time(step, g, eff, tp)
    fixed = (eff.step_overhead_us if step.phase == "decode" else eff.prefill_overhead_us) * 1e-6
    extra = [KindTime("all-reduce", comm, "communication", 1.0, 0, 0, 0, 0)] if comm else []
    extra.append(KindTime("engine", fixed, "step overhead", 1.0, 0, 0, 0, 0))
    total = sum(k.seconds for k in kinds) + comm + fixed
    out = tuple(replace(k, share=k.seconds / total) for k in (*kinds, *extra))
    return StepTime(step, out, total)
