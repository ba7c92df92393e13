"""The profile's report arithmetic and workload plan as pure functions (no torch, no GPU)."""

import json

import pytest
from hybridplan.kernels import bench
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridplan.errors import PlanError
from hybridplan.loader import load_model, shipped_specs
from hybridplan.profile import arith
from hybridplan.profile.report import (
    CUDA,
    DeviceReport,
    KernelResult,
    MemoryReport,
    PhaseReport,
    ProfileReport,
    TensorReport,
)
from hybridplan.profile.shrink import CHUNK, shrink_spec
from hybridplan.profile.workload import (
    DECODE,
    PREFILL,
    ConvDims,
    KernelPlan,
    Mamba1Dims,
    Mamba2Dims,
    Prefill,
    Sizes,
    StateDims,
    Step,
    TensorPlan,
    plan_workload,
)
from hybridplan.scenario import DtypeChoice
from tests.helpers import footprint

pytestmark = pytest.mark.unit

MiB, GiB = 1 << 20, 1 << 30
HYBRIDS = [s for s in shipped_specs() if s.recurrent]


# ---------------------------------------------------------------------------------------------------------
# arith


def test_peak_bandwidth():
    assert arith.peak_bandwidth(2619, 5120) == 3_352_320_000_000  # H100 SXM
    assert arith.peak_bandwidth(3201, 6144) == 4_916_736_000_000  # H200
    assert arith.peak_bandwidth(None, 5120) is None and arith.peak_bandwidth(2619, 0) is None


def test_copy_and_kernel_bandwidth():
    assert arith.copy_bandwidth(GiB, 0.5e-3) == 2 * GiB / 0.5e-3  # read + write
    assert arith.achieved_bandwidth(4_000_000, 1e-6) == 4e12
    assert arith.achieved_bandwidth(4_000_000, None) is None and arith.achieved_bandwidth(1, 0) is None
    with pytest.raises(ValueError):
        arith.copy_bandwidth(GiB, 0)


def test_predicted_time_and_ratios():
    assert arith.predicted_seconds(4_300_000_000, 4.3e12) == pytest.approx(1e-3)
    assert arith.predicted_seconds(1, None) is None
    assert arith.fraction(3.0, 4.0) == 0.75 and arith.fraction(1.0, 0) is None and arith.fraction(None, 1) is None
    assert arith.difference(100, 90) == -10 and arith.difference(None, 1) is None
    assert arith.missing_bytes(10, 4) == 6 and arith.missing_bytes(4, 10) == 0
    assert arith.tflops(2_000_000_000_000, 0.5) == 4.0 and arith.tflops(0, 1.0) is None


@pytest.mark.parametrize(
    "n, booked", [(0, 0), (1, 512), (511, 512), (512, 512), (513, 1024), (10 * MiB + 1, 10 * MiB + 512)]
)
def test_allocator_rounds_to_512_byte_blocks(n, booked):
    assert arith.allocator_block(n) == booked


def test_allocator_rounded_sums_blocks():
    assert arith.allocator_rounded([0, 1, 512, 700]) == 512 + 512 + 1024


def test_formatting():
    assert arith.fmt_rate(4.312e12) == "4,312 GB/s" and arith.fmt_rate(None) == "—"
    assert arith.fmt_seconds(2.5e-4) == "250 µs" and arith.fmt_seconds(0.0123) == "12.3 ms"
    assert arith.fmt_fraction(0.8766) == "87.7 %" and arith.fmt_fraction(1e-6) == "<0.1 %"
    assert arith.fmt_rate(8.44e9) == "8.44 GB/s" and arith.fmt_rate(2.5e7) == "25 MB/s"
    assert arith.fmt_rate(87e3) == "87 kB/s"


# ---------------------------------------------------------------------------------------------------------
# report values


def _tensor(name, role, shape, dtype, *, nbytes=None, block=None):
    plan = TensorPlan(name, role, "ssm" if role == "state" else "kv", 0, shape, dtype)
    n = plan.nbytes if nbytes is None else nbytes
    return TensorReport(plan=plan, nbytes=n, storage_bytes=n, block_bytes=block)


def _memory(**counters):
    tensors = (
        _tensor("mamba2.ssm", "state", (2, 3, 5, 7), "float32"),  # 840 B → a 1,024 B block
        _tensor("attention.kv", "kv", (4, 2, 8192, 8, 128), "bfloat16"),
    )  # 128 MiB
    return MemoryReport(predicted_state=840, predicted_kv=128 * MiB, tensors=tensors, **counters)


def test_memory_report_exact_and_counters():
    m = _memory(
        requested_delta=840 + 128 * MiB,
        allocated_delta=1024 + 128 * MiB,
        reserved_delta=2 * MiB + 128 * MiB,
        nvml_used_delta=2 * MiB + 128 * MiB,
        context_bytes=500 * MiB,
    )
    assert m.exact and m.predicted_total == m.measured_total == 840 + 128 * MiB
    assert m.predicted_rounded == 1024 + 128 * MiB and m.rounding_explained
    assert m.requested_difference == 0 and m.unsplit_tails == 0
    assert m.segment_slack == 2 * MiB - 1024  # the small pool's 2 MiB segment, mostly cached
    assert m.outside_allocator == 0
    d = m.to_dict()
    assert d["predicted"]["allocator_rounded_bytes"] == 1024 + 128 * MiB
    assert d["measured"]["allocator_allocated_bytes"] == 1024 + 128 * MiB
    assert all(isinstance(v, int) for v in d["predicted"].values())
    json.dumps(d)


def test_memory_report_mismatch_and_tails():
    m = _memory(requested_delta=840 + 128 * MiB + 4, allocated_delta=1024 + 130 * MiB)
    assert not m.exact  # the allocator was asked for more than predicted
    assert m.unsplit_tails == 2 * MiB and m.rounding_explained is False
    wrong = MemoryReport(
        predicted_state=840,
        predicted_kv=0,
        tensors=(_tensor("mamba2.ssm", "state", (2, 3, 5, 7), "float32", nbytes=836),),
    )
    assert not wrong.exact and wrong.to_dict()["difference"]["total_bytes"] == -4


def test_memory_report_without_cuda_counters():
    m = _memory()
    assert m.exact and m.rounding_explained is None and m.unsplit_tails is None and m.block_bytes is None


def _plan(phase=DECODE, nbytes=1_000_000_000, flops=0, status="ok", part="ssm"):
    return KernelPlan(
        phase,
        "mamba2",
        part,
        0,
        24,
        "selective_state_update" if status == "ok" else None,
        status,
        Mamba2Dims(128, 64, 128, 8),
        Step(256),
        nbytes,
        flops,
        0,
    )


def test_kernel_result_against_the_ceiling():
    r = KernelResult(_plan(), seconds=3e-4, ceiling=4e12, peak=4.8e12)
    assert r.predicted_seconds == pytest.approx(2.5e-4)
    assert r.achieved_bandwidth == pytest.approx(1e9 / 3e-4)
    assert r.fraction_of_ceiling == pytest.approx(1e9 / 3e-4 / 4e12)
    assert r.fraction_of_peak == pytest.approx(1e9 / 3e-4 / 4.8e12)
    assert r.slowdown == pytest.approx(1.2)
    d = r.to_dict()
    assert d["predicted"]["bytes"] == 1_000_000_000 and d["measured"]["seconds"] == 3e-4


def test_rows_without_a_kernel_have_no_figures():
    r = KernelResult(_plan(status="no kernel", nbytes=0), seconds=None, ceiling=4e12)
    assert r.predicted_seconds is None and r.achieved_bandwidth is None and r.fraction_of_ceiling is None
    assert r.to_dict()["predicted"]["bytes"] is None


def test_phase_totals_skip_rows_without_kernels():
    rows = (
        KernelResult(_plan(nbytes=2_000_000_000, flops=10), 1e-3, 4e12),
        KernelResult(_plan(nbytes=1_000_000_000, part="conv", flops=5), 0.5e-3, 4e12),
        KernelResult(_plan(status="no kernel", nbytes=0), None, 4e12),
    )
    ph = PhaseReport(DECODE, rows, 4e12)
    assert ph.nbytes == 3_000_000_000 and ph.flops == 15
    assert ph.seconds == pytest.approx(1.5e-3)
    assert ph.predicted_seconds == pytest.approx(0.75e-3)
    assert ph.achieved_bandwidth == pytest.approx(2e12) and ph.fraction_of_ceiling == pytest.approx(0.5)
    assert ph.not_covered == ("mamba2 ssm",)
    assert PhaseReport(DECODE, rows[2:], 4e12).seconds is None


def test_device_report():
    d = DeviceReport(
        backend=CUDA,
        index=0,
        name="NVIDIA H200",
        total_bytes=141 * GiB,
        free_bytes=140 * GiB,
        memory_clock_mhz=3201,
        bus_width_bits=6144,
        copy_bytes=GiB,
        copy_seconds=2 * GiB / 4.3e12,
        nvml=True,
    )
    assert d.copy_bandwidth == pytest.approx(4.3e12)
    assert d.copy_fraction_of_peak == pytest.approx(4.3e12 / 4_916_736_000_000)
    assert d.to_dict()["peak_bandwidth_bytes_per_s"] == 4_916_736_000_000


def test_a_cuda_report_renders_and_serialises():
    """The GPU report end to end through the renderer, from made-up measurements."""
    from rich.console import Console

    from hybridplan.profile.render import profile_view

    spec = load_model("nemotron-h")
    fp = footprint(spec, tp=1, dtypes=DtypeChoice())
    w = plan_workload(spec, fp, Sizes(256, 8192, 8192, "bfloat16"))
    tensors = tuple(TensorReport(t, t.nbytes, t.nbytes, arith.allocator_block(t.nbytes)) for t in w.tensors)
    total = sum(t.nbytes for t in w.tensors)
    memory = MemoryReport(
        w.predicted_state,
        w.predicted_kv,
        tensors,
        requested_delta=total,
        allocated_delta=total,
        reserved_delta=total,
        nvml_used_delta=total + 2 * MiB,
        context_bytes=520 * MiB,
        other_processes_bytes=0,
    )
    device = DeviceReport(CUDA, 0, "NVIDIA H200", 141 * GiB, 139 * GiB, 3201, 6144, GiB, 2 * GiB / 4.3e12, True)
    decode = PhaseReport(
        DECODE, tuple(KernelResult(k, k.nbytes / 3.9e12, 4.3e12, device.peak_bandwidth) for k in w.decode), 4.3e12
    )
    prefill = PhaseReport(
        PREFILL, tuple(KernelResult(k, 2e-3, 4.3e12, device.peak_bandwidth) for k in w.prefill), 4.3e12
    )
    report = ProfileReport("nemotron-h-8b", w, False, device, memory, decode, prefill, ("a note",))
    d = report.to_dict()
    assert json.loads(json.dumps(d))["memory"]["exact"] is True
    assert d["memory"]["difference"]["nvml_vs_reserved_bytes"] == 2 * MiB
    assert d["decode"]["measured"]["fraction_of_copy"] == pytest.approx(3.9 / 4.3)
    console = Console(width=140, record=True, force_terminal=False)
    console.print(profile_view(report))
    text = console.export_text()
    for needle in (
        "NVIDIA H200 (GPU 0)",
        "4,917 GB/s",
        "4,300 GB/s",
        "memory_allocated",
        "NVML used",
        "selective_state_update",
        "ssd_chunk_scan",
        "90.7 %",
        "CUDA context",
        "exact",
        "note: a note",
    ):
        assert needle in text, needle


# ---------------------------------------------------------------------------------------------------------
# workload and shrink


@settings(max_examples=60, deadline=None)
@given(
    spec=st.sampled_from(HYBRIDS),
    slots=st.integers(1, 1024),
    ctx=st.integers(1, 1 << 20),
    ssm=st.sampled_from([None, "fp32", "bf16", "fp16"]),
)
def test_pools_add_up_to_the_prediction(spec, slots, ctx, ssm):
    try:
        fp = footprint(spec, tp=1, dtypes=DtypeChoice(ssm=ssm))
    except PlanError:  # KDA's recurrent state: auto, float32 or bfloat16 only (mamba_utils.py, vLLM 0.30+)
        assert ssm == "fp16" and any(m.kind == "kda" for m in spec.recurrent)
        return
    w = plan_workload(spec, fp, Sizes(slots, ctx, 64, "bfloat16"))
    assert sum(t.nbytes for t in w.tensors if t.role == "state") == fp.pool_bytes(slots) == w.predicted_state
    assert sum(t.nbytes for t in w.tensors if t.role == "kv") == fp.kv_bytes_at(ctx) == w.predicted_kv
    assert all(t.shape[0] >= 1 for t in w.tensors)
    assert all(t.shape[1] == slots for t in w.tensors if t.role == "state")


def test_nemotron_rows_use_the_kernels_cost_model():
    spec = load_model("nemotron-h")
    fp = footprint(spec, tp=1, dtypes=DtypeChoice())
    w = plan_workload(spec, fp, Sizes(256, 8192, 8192, "bfloat16"))
    conv, ssm = w.decode
    assert (conv.kernel, ssm.kernel) == ("causal_conv1d_update", "selective_state_update")
    assert conv.nbytes == 24 * bench.conv_update_bytes(256, 10240, 4, state_bytes=2, io_bytes=2, weight_bytes=2)
    assert ssm.nbytes == 24 * bench.state_update_bytes(256, 128, 64, 128, 8, state_bytes=4, io_bytes=2)
    pconv, scan = w.prefill
    assert scan.nbytes == 24 * bench.chunk_scan_bytes(8192, 1, 128, 64, 128, 8, io_bytes=2, state_bytes=4)
    assert scan.flops == 24 * bench.chunk_scan_flops([8192], 256, 128, 64, 128, 8)
    assert pconv.nbytes == 24 * bench.conv_prefill_bytes(8192, 1, 10240, 4, state_bytes=2, io_bytes=2, weight_bytes=2)
    # reading and writing the SSM pool is nearly all of the state update's traffic
    ssm_pool = next(t.nbytes for t in w.tensors if t.name == "mamba2.ssm")
    assert 2 * ssm_pool < ssm.nbytes < 1.01 * 2 * ssm_pool
    assert [t.shape for t in w.tensors] == [(24, 256, 10240, 3), (24, 256, 128, 64, 128), (4, 2, 8192, 8, 128)]


def test_fp8_state_has_no_kernel():
    # no engine flag takes an fp8 recurrent state (vLLM's MambaDType, SGLang's --mamba-ssm-dtype); a footprint
    # built with one still gets a row that says why nothing runs
    from hybridplan.memory import CacheDtypes
    from hybridplan.memory import footprint as raw_footprint

    spec = load_model("nemotron-h")
    fp = raw_footprint(spec, CacheDtypes(conv="bfloat16", ssm="float8_e4m3fn", kv="bfloat16"))
    w = plan_workload(spec, fp, Sizes(4, 16, 16, "bfloat16"))
    assert w.decode[1].status == "no kernel for float8_e4m3fn state" and not w.decode[1].runs
    assert w.decode[0].runs


@pytest.mark.parametrize("spec", HYBRIDS, ids=lambda s: s.name)
def test_shrunken_spec_keeps_kinds_order_and_dtypes(spec):
    tiny = shrink_spec(spec)
    kinds = [m.kind for m in spec.mixers]
    first = list(dict.fromkeys(kinds))
    assert list(dict.fromkeys(m.kind for m in tiny.mixers)) == first
    assert all(1 <= n <= 2 for n in tiny.layer_counts.values())
    assert tiny.chunk_size == CHUNK and tiny.architecture == spec.architecture
    full_fp = footprint(spec, tp=1, dtypes=DtypeChoice())
    tiny_fp = footprint(tiny, tp=1, dtypes=DtypeChoice())
    assert tiny_fp.dtypes == full_fp.dtypes
    for big, small in zip(full_fp.state, tiny_fp.state):
        assert big.kind == small.kind
        if big.conv_shape:
            assert small.conv_shape[1] == big.conv_shape[1]  # same conv window
    w = plan_workload(tiny, tiny_fp, Sizes(4, 64, 32, "float32"))
    assert w.workspace_bytes < 1 * MiB  # grids of a few programs under the interpreter


def test_kernel_rows_carry_typed_shapes_serialised_in_the_report_order():
    spec = load_model("nemotron-h")
    fp = footprint(spec)
    w = plan_workload(spec, fp, Sizes(256, 8192, 8192, "bfloat16"))
    (conv_d, ssm_d), (conv_p, ssm_p) = w.decode, w.prefill
    assert conv_d.dims == conv_p.dims == ConvDims(10240, 4)
    assert ssm_d.dims == ssm_p.dims == Mamba2Dims(128, 64, 128, 8)
    assert conv_d.launch == ssm_d.launch == Step(256)
    assert conv_p.launch == Prefill(8192) and ssm_p.launch == Prefill(8192, 1, w.chunk_size)
    assert conv_d.shape_dict() == {"batch": 256, "dim": 10240, "width": 4}
    assert list(conv_p.shape_dict().items()) == [("tokens", 8192), ("seqs", 1), ("dim", 10240), ("width", 4)]
    assert list(ssm_p.shape_dict().items()) == [
        ("tokens", 8192),
        ("seqs", 1),
        ("chunk", w.chunk_size),
        ("nheads", 128),
        ("headdim", 64),
        ("dstate", 128),
        ("ngroups", 8),
    ]
    assert KernelResult(ssm_d, None, None).to_dict()["shape"] == {
        "batch": 256,
        "nheads": 128,
        "headdim": 64,
        "dstate": 128,
        "ngroups": 8,
    }
    assert len({*w.decode, *w.prefill}) == 4  # hashable, as the pipeline keys its timings by row


def test_rows_without_a_kernel_keep_their_dims_only():
    spec = load_model("jamba")
    fp = footprint(spec)
    w = plan_workload(spec, fp, Sizes(8, 64, 32, "bfloat16"))
    ssm_p = next(k for k in w.prefill if k.part == "ssm")
    assert not ssm_p.runs and ssm_p.launch is None and isinstance(ssm_p.dims, Mamba1Dims)
    assert ssm_p.shape_dict() == {"dim": ssm_p.dims.dim, "dstate": ssm_p.dims.dstate}
    other = KernelPlan(DECODE, "kda", "ssm", 0, 6, None, "no kernel", StateDims((32, 128, 128)))
    assert other.shape_dict() == {"state": [32, 128, 128]}
