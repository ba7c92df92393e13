"""Step time from work: each layer kind takes the longest of its memory time (bytes over the achieved HBM
bandwidth), its tensor time (FLOPs over the achieved tensor peak) and its fp32 time, plus a GPU floor for each
of its kernels (or, without a CUDA graph, at least the host's launch of each); the TP all-reduces (measured
tables per link) and the engine's host time for the step (hidden where the engine overlaps it) add to that.
Pure functions.

What is derived and what is fitted: the kernels per block (hybridplan/engines/*/kernels.py, from the engines'
model files), the batches a CUDA graph covers, whether the host overlaps the GPU, the sampler's bytes, the
all-reduce latencies (``ALLREDUCE_*``) and every byte and FLOP (work.py) are derived. The achieved fractions and
the fixed times in ``Efficiency`` are fitted, by validation/speed.py ``fit`` on every file of tests/data/speed
(``DEFAULT``); the accuracy quoted for them is the grouped k-fold's, where each file is predicted by a fit that
never saw it (docs/VALIDATION.md).
"""

from __future__ import annotations

from msgspec import Struct
from msgspec.structs import replace

from hybridplan.errors import PlanError
from hybridplan.speed.gpus import Datasheet
from hybridplan.speed.work import Step, Work

#: what bounds a layer kind's time
BOUNDS = (
    "weights",
    "KV reads",
    "state reads and writes",
    "logits",
    "FLOPs",
    "fp32 FLOPs",
    "launch overhead",
    "communication",
    "step overhead",
)


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
    #: fraction of the HBM bandwidth a GDN layer's decode state update reaches, and of the tensor peak Mamba-2's
    #: chunked scan (SSD) reaches in a prefill: per architecture, fitted on the kernel rows of tests/data/speed
    #: (vllm-31722-gdn-decode-kernel.json, vllm-27299-ssd-prefill-kernel.json); None: as ``state_hbm``/``scan``.
    #: KDA's update takes GDN's (the same gated delta-rule kernel family, no KDA kernel row); Mamba-1, a short conv
    #: and lightning attention have no kernel rows and stay at ``hbm``
    gdn_state_hbm: float | None = None
    ssd_scan: float | None = None
    #: µs each kernel of a CUDA-graph replay adds on the GPU (its launch and drain between dependent kernels);
    #: the kernels are counted from each engine's model files (hybridplan/engines/*/kernels.py)
    kernel_floor_graph_us: float = 1.0
    #: µs of host time one eager kernel launch takes (PyTorch's dispatch and the driver's launch): without a CUDA
    #: graph (prefill, a decode batch above the captured sizes, --enforce-eager) the GPU waits on the host when a
    #: kernel's work is shorter than this
    kernel_floor_eager_us: float = 6.0
    #: µs an all-reduce takes at the least, on top of its bytes over the link; None (the default): the measured
    #: latency table of the link (``allreduce_time``)
    allreduce_us: float | None = None
    #: the engine's host time per decode step (scheduling, input preparation, sampling's bookkeeping, output
    #: processing): a fixed part and a part per running request, per engine (the structure of vLLM's
    #: ``EngineCore.step`` and SGLang's ``Scheduler.event_loop_overlap``: a pass over the running requests each
    #: step); it overlaps the GPU's step where the engine overlaps them (hybridplan/engines/*/kernels.py
    #: ``overlaps_cpu``), else adds to it
    vllm_step_us: float = 0.0
    vllm_request_us: float = 0.0
    sglang_step_us: float = 0.0
    sglang_request_us: float = 0.0
    #: host time of one prefill chunk: a fixed part (its own step) and a part per prompt token (input
    #: preparation, the positions and slot mapping the engine builds per token)
    prefill_step_us: float = 0.0
    prefill_token_us: float = 0.0
    #: µs each request's first token takes outside the engine's steps (the server's request path: receiving and
    #: tokenizing the prompt, queueing it to the scheduler, detokenizing and streaming the first token back)
    ttft_request_us: float = 0.0
    #: where the figures come from
    source: str = "round starting values, not fitted (validation/speed.py fit starts from them)"

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__struct_fields__}

    def cpu_step_us(self, engine: str, batch: int) -> float:
        """The engine's host µs for a decode step of ``batch`` running requests."""
        if engine == "sglang":
            return self.sglang_step_us + self.sglang_request_us * batch
        return self.vllm_step_us + self.vllm_request_us * batch

    def cpu_prefill_us(self, tokens: int) -> float:
        """Host µs of one prefill chunk of ``tokens``."""
        return self.prefill_step_us + self.prefill_token_us * tokens


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
#: µs one all-reduce takes over AMD's Infinity Fabric (xGMI), by message size, for the custom all-reduce SGLang and
#: vLLM run on ROCm: the "baseline" column of SGLang PR #6619 (https://github.com/sgl-project/sglang/pull/6619,
#: MI300X, TP 4, 2 KB … 8 MB; the PR's quick-reduce columns are opt-in). Used for every TP on xGMI (TP 8 was not
#: measured there; its full mesh has the same one hop).
ALLREDUCE_XGMI_US: tuple[tuple[int, float], ...] = (
    (2048, 7.18),
    (16384, 7.26),
    (32768, 7.58),
    (262144, 14.39),
    (524288, 14.65),
    (1048576, 22.91),
    (2097152, 36.64),
    (4194304, 63.86),
    (8388608, 118.31),
)
#: µs NCCL's ring all-reduce of 8 bytes took on 8 PCIe GPUs: 42.14 µs on 8 RTX 4090s over PCIe Gen4
#: (https://github.com/NVIDIA/nccl/issues/1530, nccl-tests all_reduce_perf, out-of-place). A ring's latency is
#: 2·(tp − 1) hops, so TP t is priced at 42.14 · (t − 1) / 7, plus its bytes at the link (``allreduce_time``).
#: vLLM's custom all-reduce, which would be faster, is off on PCIe beyond 2 GPUs (custom_all_reduce.py).
ALLREDUCE_PCIE_TP8_US = 42.14

#: the fixtures (tests/data/speed/) that fixed the defaults before the grouped k-fold: kept for the old in-sample
#: table (validation/speed.py --in-sample); the shipped figures are now fitted on every file (``DEFAULT``)
FITTED_ON_DENSE: tuple[str, ...] = ("tt-143-qwen2.5-72b-2xh100.json", "pages-llama-3.1-8b-decode.json")
FITTED_ON_MOE: tuple[str, ...] = ("tt-340-qwen3-30b-a3b-a100.json",)
FITTED_ON: tuple[str, ...] = FITTED_ON_DENSE + FITTED_ON_MOE
#: the shipped figures: ``python validation/speed.py --fit`` on every file of tests/data/speed (38 files,
#: 2026-12-02e: benchmarks/results/speed-kfold-2026-12-02e.md, the benchmark's queue step by step with each
#: request's lengths, hybridplan/speed/queue.py); the terms the corpus does not resolve keep the starting values
#: (scalar, link, the eager launch); vLLM's per-step and per-request host times, the prefill's host time per
#: token, a first token's request path and the grouped GEMM's m½ sit at the top of their grids (reported, not
#: widened)
DEFAULT = Efficiency(
    hbm=0.7,
    tensor=0.7,
    gdn_state_hbm=0.5,
    ssd_scan=0.2,
    expert_tokens_half=512.0,
    kernel_floor_graph_us=6.0,
    vllm_step_us=3200.0,
    vllm_request_us=40.0,
    sglang_step_us=400.0,
    sglang_request_us=40.0,
    prefill_step_us=0.0,
    prefill_token_us=4.0,
    ttft_request_us=80000.0,
    source="fitted on every file of tests/data/speed (python validation/speed.py --fit); "
    "held-out accuracy: docs/VALIDATION.md",
)


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
        d = {
            "kind": self.kind,
            "seconds": self.seconds,
            "bound": self.bound,
            "share": self.share,
            "memory_s": self.memory_s,
            "tensor_s": self.tensor_s,
            "scalar_s": self.scalar_s,
            "launch_s": self.launch_s,
        }
        if self.work is not None:
            d["work"] = self.work.to_dict()
        return d


class StepTime(Struct, frozen=True):
    step: Step
    kinds: tuple[KindTime, ...]
    seconds: float
    #: the engine's host time for the step, and whether the engine overlaps it with the GPU's (then only its
    #: excess over the GPU's time shows, as the "engine" kind)
    host_s: float = 0.0
    overlap: bool = False

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
        return {
            "phase": self.step.phase,
            "batch": self.step.batch,
            "ctx": self.step.ctx,
            "tokens": self.step.tokens,
            "seconds": self.seconds,
            "bound": name,
            "bound_share": share,
            "host_s": self.host_s,
            "host_overlapped": self.overlap,
            "by_bound_s": self.by_bound(),
            "kinds": [k.to_dict() for k in self.kinds],
        }


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


def _state_eff(w: Work, eff: Efficiency) -> float:
    own = eff.gdn_state_hbm if w.kind in ("gdn", "kda") else None
    if own is not None and eff.state_hbm is None:
        return own
    return eff.state_hbm if eff.state_hbm is not None else eff.hbm


def _scan_eff(w: Work, eff: Efficiency) -> float:
    own = eff.ssd_scan if w.kind == "mamba2" else None
    if own is not None and eff.scan is None:
        return own
    return eff.scan if eff.scan is not None else eff.tensor


def kind_time(w: Work, g: Datasheet, eff: Efficiency, dtype: str, graphs: bool) -> KindTime:
    """A layer kind's time: the slowest of its memory, tensor and fp32 times, plus each kernel's GPU floor
    (``kernel_floor_graph_us``); without a CUDA graph the host launches each kernel (``kernel_floor_eager_us``)
    ahead of the GPU, so the kind takes at least its kernels' launches."""
    peak_bw = _need(g.hbm_gbps, "HBM bandwidth", g) * 1e9
    mem = (w.weight_bytes + w.kv_bytes + w.logit_bytes) / (peak_bw * eff.hbm) + w.state_bytes / (
        peak_bw * _state_eff(w, eff)
    )
    peak = tensor_peak(g, dtype)
    # the routed experts' share of the FLOPs at the grouped GEMM's fraction, the rest at the large-matmul one
    routed = w.routed_flops / (peak * grouped_gemm_efficiency(w.expert_tokens, eff)) if w.routed_flops else 0.0
    ten = (w.flops - w.routed_flops) / (peak * eff.tensor) + routed + w.scan_flops / (peak * _scan_eff(w, eff))
    # a GPU whose datasheet names no fp32 figure: its recurrent fp32 work is not timed (Step notes say so)
    sca = w.scalar_flops / (g.fp32_tflops * 1e12 * eff.scalar) if w.scalar_flops and g.fp32_tflops else 0.0
    parts = {"memory": mem, "FLOPs": ten, "fp32 FLOPs": sca}
    top = max(parts, key=parts.get)
    gpu = parts[top] + w.kernels * eff.kernel_floor_graph_us * 1e-6
    host = 0.0 if graphs else w.kernels * eff.kernel_floor_eager_us * 1e-6
    seconds = max(gpu, host)
    launch = seconds - parts[top]
    if launch > parts[top]:
        top = "launch overhead"
    elif top == "memory":
        split = {
            "weights": w.weight_bytes,
            "KV reads": w.kv_bytes,
            "state reads and writes": w.state_bytes,
            "logits": w.logit_bytes,
        }
        top = max(split, key=split.get)
    return KindTime(w.kind, seconds, top, 1.0, mem, ten, sca, launch, w)


def _table_us(pts: tuple[tuple[int, float], ...], nbytes: float) -> float:
    """Linear in bytes between a table's points, flat below the first; past the last its last slope carries on."""
    if nbytes <= pts[0][0]:
        return pts[0][1]
    for (b0, t0), (b1, t1) in zip(pts, pts[1:]):
        if nbytes <= b1:
            return t0 + (t1 - t0) * (nbytes - b0) / (b1 - b0)
    (b0, t0), (b1, t1) = pts[-2], pts[-1]
    return t1 + (t1 - t0) * (nbytes - b1) / (b1 - b0)


def allreduce_nvlink_us(tp: int, nbytes: float) -> float:
    """µs one all-reduce of ``nbytes`` takes at TP ``tp`` over NVLink, from ``ALLREDUCE_NVLINK_US``: the table of
    the smallest measured TP ≥ ``tp`` (TP 3 is priced as 4, 5–7 as 8, above 8 as 8), linear in bytes between its
    points, flat below the first; past the last, its slope between the last two points carries on."""
    key = next((k for k in sorted(ALLREDUCE_NVLINK_US) if k >= tp), max(ALLREDUCE_NVLINK_US))
    return _table_us(ALLREDUCE_NVLINK_US[key], nbytes)


def link_class(g: Datasheet) -> str:
    """The all-reduce table a GPU's link is priced by: NVLink (any generation, NVL72 included: the custom
    all-reduce's latency is its synchronisation, measured on NVLink 4), xGMI, PCIe, or none."""
    if g.link.startswith("NVLink") and "bridge" not in g.link:
        return "nvlink"
    if g.link.startswith("Infinity Fabric") or "xGMI" in g.link:
        return "xgmi"
    if g.link.startswith("PCIe") or "bridge" in g.link:
        return "pcie"
    return "none"


def allreduce_time(step: Step, g: Datasheet, eff: Efficiency, tp: int) -> tuple[float, str]:
    """Seconds one of the step's all-reduces takes, and where the figure comes from: the measured table of the
    GPU's link (``link_class``) at the message size, else a ring at the link's bandwidth after a latency."""
    nbytes = step.allreduce_bytes
    cls = link_class(g)
    if eff.allreduce_us is None and cls == "nvlink":
        return (
            allreduce_nvlink_us(tp, nbytes) * 1e-6,
            "vLLM's custom all-reduce measured on H100 NVLink (SGLang PR #2904)",
        )
    if eff.allreduce_us is None and cls == "xgmi":
        return (
            _table_us(ALLREDUCE_XGMI_US, nbytes) * 1e-6,
            "the ROCm custom all-reduce measured on MI300X xGMI (SGLang PR #6619)",
        )
    link = _need(g.link_gbps, "the GPU-to-GPU link", g) * 1e9 / 2 * eff.link
    fixed = ALLREDUCE_PCIE_TP8_US * (tp - 1) / 7 if eff.allreduce_us is None else eff.allreduce_us
    src = (
        f"NCCL's ring over {g.link}: {fixed:.1f} µs latency (8 PCIe GPUs measured at {ALLREDUCE_PCIE_TP8_US} "
        "µs, NCCL issue #1530, scaled by the ring's hops)"
        if eff.allreduce_us is None
        else f"a ring over {g.link}: {fixed:g} µs"
    )
    return (fixed * 1e-6 + 2 * (tp - 1) / tp * nbytes / link, f"{src} + its bytes at {eff.link:.0%} of the link")


def comm_time(step: Step, g: Datasheet, eff: Efficiency, tp: int) -> float:
    """The step's TP all-reduces, each at ``allreduce_time``."""
    if tp <= 1 or not step.allreduces:
        return 0.0
    return step.allreduces * allreduce_time(step, g, eff, tp)[0]


def step_time(
    step: Step, g: Datasheet, eff: Efficiency = DEFAULT, *, tp: int = 1, graphs: bool = True, overlap: bool = False
) -> StepTime:
    """The step's time: its layer kinds' GPU times, its all-reduces, and its engine's (``Step.engine``) host time
    for the step (``Efficiency.cpu_step_us`` / ``cpu_prefill_us``), which the GPU hides where the engine overlaps
    the two (``overlap``) and adds to otherwise. The breakdown carries the host time's visible part as "engine"."""
    kinds = [
        kind_time(w, g, eff, step.tensor_dtype, graphs)
        for w in step.kinds
        if w.bytes or w.flops or w.scan_flops or w.scalar_flops or w.kernels
    ]
    comm = comm_time(step, g, eff, tp)
    gpu = sum(k.seconds for k in kinds) + comm
    if step.phase == "decode":
        host_us = eff.cpu_step_us(step.engine, step.batch)
    elif step.phase == "mixed":  # one step: the decodes' host time and the prompt tokens' preparation
        host_us = eff.cpu_step_us(step.engine, step.batch) + eff.prefill_token_us * (step.tokens - step.batch)
    else:
        host_us = eff.cpu_prefill_us(step.tokens)
    host = host_us * 1e-6
    visible = max(0.0, host - gpu) if overlap else host
    extra = [KindTime("all-reduce", comm, "communication", 1.0, 0, 0, 0, 0)] if comm else []
    extra.append(KindTime("engine", visible, "step overhead", 1.0, 0, 0, 0, 0))
    total = gpu + visible
    out = tuple(replace(k, share=k.seconds / total if total else 0.0) for k in (*kinds, *extra))
    return StepTime(step, out, total, host, overlap)
