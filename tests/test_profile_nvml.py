"""The profiler's NVML layer against a fake device, and the CUDA backend's memory accounting against a fake
allocator (no GPU needed)."""

import sys
from collections import namedtuple
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.unit

pynvml = pytest.importorskip("pynvml")

from hybridplan.errors import PlanError  # noqa: E402
from hybridplan.profile.backends import CudaBackend  # noqa: E402
from hybridplan.profile.nvml import NvmlReading, NvmlSession  # noqa: E402

Memory = namedtuple("Memory", "total free used")
Proc = namedtuple("Proc", "pid usedGpuMemory")

GiB = 1 << 30


class FakeNvml:
    """What an H100 SXM answers: 80 GiB, max memory clock 2619 MHz, 5120-bit bus."""

    def __init__(self, monkeypatch, *, clock=2619, bus=5120, uuids=("GPU-1234",), fail=()):
        self.calls: list = []
        self.shutdowns = 0
        self.used = 1 * GiB
        self.fail = set(fail)
        self.uuids = set(uuids)
        for name in (
            "nvmlInit",
            "nvmlShutdown",
            "nvmlDeviceGetHandleByIndex",
            "nvmlDeviceGetHandleByUUID",
            "nvmlDeviceGetName",
            "nvmlDeviceGetMemoryInfo",
            "nvmlDeviceGetMaxClockInfo",
            "nvmlDeviceGetMemoryBusWidth",
            "nvmlDeviceGetComputeRunningProcesses",
        ):
            monkeypatch.setattr(pynvml, name, self._wrap(name))
        self.clock, self.bus = clock, bus

    def _wrap(self, name):
        impl = getattr(self, name)

        def call(*args):
            self.calls.append((name, args))
            if name in self.fail:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
            return impl(*args)

        return call

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetHandleByIndex(self, index):
        return f"handle-{index}"

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if uuid not in self.uuids:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return f"handle-{uuid}"

    def nvmlDeviceGetName(self, handle):
        return b"NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetMemoryInfo(self, handle):
        return Memory(total=80 * GiB, free=80 * GiB - self.used, used=self.used)

    def nvmlDeviceGetMaxClockInfo(self, handle, kind):
        assert kind == pynvml.NVML_CLOCK_MEM
        return self.clock

    def nvmlDeviceGetMemoryBusWidth(self, handle):
        return self.bus

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return [
            Proc(pid=111, usedGpuMemory=5 * GiB),
            Proc(pid=222, usedGpuMemory=None),
            Proc(pid=333, usedGpuMemory=GiB),
            Proc(pid=444, usedGpuMemory=(1 << 64) - 1),
        ]


def test_reading_and_peak_bandwidth(monkeypatch):
    fake = FakeNvml(monkeypatch)
    with NvmlSession.open(0) as nv:
        r = nv.read()
    assert r == NvmlReading(
        name="NVIDIA H100 80GB HBM3",
        total=80 * GiB,
        free=79 * GiB,
        used=GiB,
        memory_clock_mhz=2619,
        bus_width_bits=5120,
    )
    # 2 · 2619 MHz · 1e6 · 5120 bit / 8
    assert r.peak_bandwidth == 3_352_320_000_000
    assert fake.shutdowns == 1


def test_h200_peak(monkeypatch):
    FakeNvml(monkeypatch, clock=3201, bus=6144)
    with NvmlSession.open(0) as nv:
        assert nv.read().peak_bandwidth == pytest.approx(4.917e12, rel=1e-3)


def test_the_cuda_uuid_picks_the_device(monkeypatch):
    fake = FakeNvml(monkeypatch, uuids=("GPU-abcd",))
    with NvmlSession.open(3, uuid="abcd") as nv:
        assert nv._handle == "handle-GPU-abcd"
    assert not any(name == "nvmlDeviceGetHandleByIndex" for name, _ in fake.calls)


def test_unknown_uuid_falls_back_to_the_index(monkeypatch):
    FakeNvml(monkeypatch, uuids=())
    with NvmlSession.open(2, uuid="ffff") as nv:
        assert nv._handle == "handle-2"


def test_unsupported_figures_are_none(monkeypatch):
    FakeNvml(monkeypatch, fail={"nvmlDeviceGetMaxClockInfo", "nvmlDeviceGetMemoryBusWidth"})
    with NvmlSession.open(0) as nv:
        r = nv.read()
    assert r.name == "NVIDIA H100 80GB HBM3" and r.total == 80 * GiB
    assert r.memory_clock_mhz is None and r.bus_width_bits is None and r.peak_bandwidth is None


def test_used_memory_follows_the_device(monkeypatch):
    fake = FakeNvml(monkeypatch)
    with NvmlSession.open(0) as nv:
        before = nv.used()
        fake.used += 3 * GiB
        assert nv.used() - before == 3 * GiB


def test_other_processes(monkeypatch):
    FakeNvml(monkeypatch)
    with NvmlSession.open(0) as nv:
        assert nv.other_processes_bytes(own_pid=111) == GiB  # 333's; 222 reports no figure
        assert nv.other_processes_bytes(own_pid=999) == 6 * GiB


def test_no_driver_means_no_session(monkeypatch):
    def broken():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", broken)
    assert NvmlSession.open(0) is None


def test_no_device_means_no_session_and_nvml_shut_down(monkeypatch):
    fake = FakeNvml(monkeypatch, uuids=(), fail={"nvmlDeviceGetHandleByIndex"})
    assert NvmlSession.open(7) is None
    assert fake.shutdowns == 1


def test_missing_package_means_no_session(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert NvmlSession.open(0) is None


# ---------------------------------------------------------------------------------------------------------
# The CUDA backend's counters and allocator blocks, with a fake torch.cuda


class _T:
    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    def data_ptr(self) -> int:
        return self.ptr


def _fake_torch(snapshot, stats):
    cuda = SimpleNamespace(
        memory_snapshot=lambda: snapshot,
        memory_stats=lambda device=None: stats,
        memory_allocated=lambda device=None: stats["allocated_bytes.all.current"],
        memory_reserved=lambda device=None: stats["reserved_bytes.all.current"],
    )
    return SimpleNamespace(cuda=cuda)


def test_cuda_blocks_are_found_by_address():
    # one 20 MiB segment cut into a 5 MiB block, a 1,536 B block and the free rest; a second segment whose
    # blocks carry no address (older snapshots): addresses follow from the sizes
    snapshot = [
        {
            "device": 0,
            "address": 1 << 32,
            "total_size": 20 << 20,
            "blocks": [
                {"address": 1 << 32, "size": 5 << 20, "requested_size": (5 << 20) - 100, "state": "active_allocated"},
                {"address": (1 << 32) + (5 << 20), "size": 1536, "requested_size": 1100, "state": "active_allocated"},
                {"address": (1 << 32) + (5 << 20) + 1536, "size": (15 << 20) - 1536, "state": "inactive"},
            ],
        },
        {
            "device": 0,
            "address": 1 << 40,
            "total_size": 12 << 20,
            "blocks": [{"size": 12 << 20, "requested_size": (11 << 20) + 1, "state": "active_allocated"}],
        },
        {"device": 1, "address": 1 << 44, "total_size": 2 << 20, "blocks": [{"size": 2 << 20}]},
    ]
    backend = CudaBackend(_fake_torch(snapshot, {}), 0)
    tensors = [_T(1 << 32), _T((1 << 32) + (5 << 20)), _T(1 << 40), _T(1 << 44), _T(12345)]
    assert backend.blocks(tensors) == [5 << 20, 1536, 12 << 20, None, None]


def test_cuda_counters():
    stats = {
        "requested_bytes.all.current": 1000,
        "allocated_bytes.all.current": 1024,
        "reserved_bytes.all.current": 2 << 20,
    }
    backend = CudaBackend(_fake_torch([], stats), 0)
    backend.nvml = SimpleNamespace(used=lambda: 7 * GiB)
    assert backend.counters() == {"requested": 1000, "allocated": 1024, "reserved": 2 << 20, "nvml_used": 7 * GiB}


def test_cuda_backend_opens_reads_nvml_and_reports_the_device(monkeypatch):
    """``CudaBackend.open`` and ``device_report`` against fake torch.cuda and NVML: the context's cost is NVML's
    growth across its creation, the device is found by its CUDA UUID, the peak comes from NVML."""
    fake = FakeNvml(monkeypatch, clock=3201, bus=6144, uuids=("GPU-0badcafe",))
    calls: list = []

    def empty(*shape, device=None):
        calls.append(("empty", device))
        fake.used += 500 * 2**20  # the CUDA context appears with the first allocation

    cuda = SimpleNamespace(
        device_count=lambda: 2,
        is_initialized=lambda: False,
        get_device_properties=lambda i: SimpleNamespace(name="NVIDIA H200 (torch)", uuid="0badcafe"),
        set_device=lambda d: calls.append(("set_device", d)),
        synchronize=lambda d=None: None,
        empty_cache=lambda: calls.append(("empty_cache",)),
        mem_get_info=lambda d=None: (139 * GiB, 141 * GiB),
    )
    torch = SimpleNamespace(cuda=cuda, device=lambda kind, index: f"{kind}:{index}", empty=empty)
    backend = CudaBackend(torch, 1)
    backend.open()
    try:
        assert backend.nvml._handle == "handle-GPU-0badcafe"
        assert backend.context_bytes == 500 * 2**20
        assert backend.other_processes == 6 * GiB  # every process with a figure is another one
        assert ("set_device", "cuda:1") in calls and ("empty", "cuda:1") in calls
        assert backend.free_bytes() == 139 * GiB
        assert backend.copy_size(None) == GiB and backend.copy_size(600 * 2**20) == 300 * 2**20
        dev = backend.device_report(GiB, 2 * GiB / 4.3e12)
        assert dev.name == "NVIDIA H100 80GB HBM3"  # NVML's name when NVML answers
        assert (dev.index, dev.total_bytes, dev.free_bytes, dev.nvml) == (1, 141 * GiB, 139 * GiB, True)
        assert dev.peak_bandwidth == 4_916_736_000_000 and dev.copy_bandwidth == pytest.approx(4.3e12)
    finally:
        backend.close()
    assert fake.shutdowns == 1


def test_cuda_backend_refuses_a_missing_gpu_index():
    cuda = SimpleNamespace(device_count=lambda: 1)
    with pytest.raises(PlanError, match="--gpu 3: this machine has 1 CUDA GPU"):
        CudaBackend(SimpleNamespace(cuda=cuda), 3).open()


def test_both_backends_implement_the_protocol():
    from hybridplan.profile.backends import Backend, InterpreterBackend

    cuda, cpu = CudaBackend(SimpleNamespace(), 2), InterpreterBackend(SimpleNamespace())
    assert isinstance(cuda, Backend) and isinstance(cpu, Backend)
    assert (cuda.label, cuda.where()) == ("GPU 2", "GPU 2")
    assert (cpu.label, cpu.where()) == ("CPU, Triton interpreter", "this CPU")
    assert cpu.counters() == {"requested": None, "allocated": None, "reserved": None, "nvml_used": None}
    assert cpu.blocks([_T(1), _T(2)]) == [None, None] and cpu.copy_size(None) == 64 << 20
    assert cpu.context_bytes is None and cpu.other_processes is None and cpu.harness_bytes == 0


def test_backend_notes_around_the_common_ones():
    from hybridplan.profile.backends import InterpreterBackend

    few = SimpleNamespace(slots=4, spec=SimpleNamespace(name="nemotron-h-8b-tiny"))
    many = SimpleNamespace(slots=256, spec=few.spec)
    cpu = InterpreterBackend(SimpleNamespace()).notes(few, ["common"])
    assert cpu[0].startswith("--interpret: nemotron-h-8b-tiny is nemotron-h-8b shrunk") and cpu[1:] == ("common",)
    cuda = CudaBackend(SimpleNamespace(), 0)
    assert cuda.notes(few, ["common"])[0] == "common" and cuda.notes(few, ["common"])[1].startswith("few slots")
    assert cuda.notes(many, ["common"]) == ("common",)
