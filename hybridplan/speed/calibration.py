"""Calibration from `hybridplan profile`: what one GPU measured, in place of the efficiencies fitted on attention
models where the measurement says more.

``profile --save-calibration FILE`` records, from the profile's own report (its ``--json`` form):

- the device-to-device copy bandwidth;
- the per-launch overhead: for each decode row, the seconds beyond what its bytes take at the copy bandwidth,
  per layer (one launch a layer), the median over the rows;
- the decode bandwidth the recurrent state kernels achieved (every decode row's bytes over its seconds: what a
  person reads, launches included);
- the chunked scans' prefill throughput (the profiled prompt's tokens over the prefill rows' seconds), the
  tensor FLOP/s they reached, and the FLOP/s they reached beyond their launches (``scan_tflops``).

``speed --calibration FILE`` then splits a kernel's time as the profile did, once: the recurrent state's
traffic at the copy bandwidth (``Efficiency.state_hbm``), each launch at the measured overhead (the kernel
floor), the scans' FLOPs at ``scan_tflops`` (``Efficiency.scan``). Timing the bytes at the achieved decode
bandwidth and adding the measured overhead on top would count the overhead twice (``check_profile`` below
shows the split reproduces the profile's own step). Weights, KV and matmuls keep the fitted fractions, which a
profile of the recurrent kernels does not measure.
"""

from __future__ import annotations

import json
from pathlib import Path
from statistics import median

from msgspec import Struct
from msgspec.structs import asdict, replace

from hybridplan.errors import PlanError
from hybridplan.speed.gpus import Datasheet
from hybridplan.speed.model import DEFAULT, Efficiency, tensor_peak

#: the calibration file's version (2: ``scan_tflops``, and the state traffic at the copy bandwidth)
CALIBRATION_VERSION = 2


class Calibration(Struct, frozen=True):
    device: str
    #: "cuda", or "triton-interpreter" (the CPU pipeline: figures of no GPU)
    backend: str
    model: str
    copy_bandwidth: float | None
    decode_bandwidth: float | None
    prefill_tokens_per_s: float | None
    prefill_tflops: float | None
    launch_us: float | None
    #: the scans' FLOP/s over their time less their launches at ``launch_us``
    scan_tflops: float | None = None
    version: int = CALIBRATION_VERSION

    @property
    def on_gpu(self) -> bool:
        return self.backend == "cuda"

    def to_dict(self) -> dict:
        return asdict(self)

    def efficiency(self, g: Datasheet, base: Efficiency = DEFAULT) -> Efficiency:
        """``base`` with the measured figures set, each as a fraction of ``g``'s datasheet."""
        changes: dict = {"source": f"{base.source}; calibrated by a profile of {self.model} on {self.device}"}
        if self.launch_us is not None and self.copy_bandwidth and g.hbm_gbps:
            # the profile's split: bytes at the copy bandwidth, the rest of each row a launch's overhead
            changes["state_hbm"] = min(1.0, self.copy_bandwidth / (g.hbm_gbps * 1e9))
            changes["kernel_floor_graph_us"] = self.launch_us
        elif self.decode_bandwidth and g.hbm_gbps:  # no overhead measured: the achieved bandwidth holds it all
            changes["state_hbm"] = min(1.0, self.decode_bandwidth / (g.hbm_gbps * 1e9))
        scan = self.scan_tflops or self.prefill_tflops
        if scan and g.bf16_tflops:
            changes["scan"] = min(1.0, scan * 1e12 / tensor_peak(g, "bf16"))
        return replace(base, **changes)


def _phase_seconds(phase: dict) -> float | None:
    return (phase.get("measured") or {}).get("seconds")


def _scan_tflops(rows, launch_us: float | None) -> float | None:
    """TFLOP/s of the prefill rows that do FLOPs, over their time less one launch a layer at ``launch_us``."""
    flops = seconds = 0.0
    for row in rows:
        f, t = (row.get("predicted") or {}).get("flops"), (row.get("measured") or {}).get("seconds")
        if f and t:
            flops += f
            seconds += t - (launch_us or 0.0) * 1e-6 * max(1, row.get("layers") or 1)
    return flops / seconds / 1e12 if flops and seconds > 0 else None


def from_profile(report: dict) -> Calibration:
    """A calibration from a profile report's dict (``hybridplan profile --json``)."""
    try:
        device, decode, prefill = report["device"], report["decode"], report["prefill"]
        copy = device["copy"]["bandwidth_bytes_per_s"]
        excess = []
        for row in decode["rows"]:
            seconds, nbytes = row["measured"]["seconds"], row["predicted"]["bytes"]
            if seconds is None or nbytes is None or not copy:
                continue
            excess.append(max(0.0, seconds - nbytes / copy) / max(1, row["layers"]) * 1e6)
        t_pf = _phase_seconds(prefill)
        launch = median(excess) if excess else None
        return Calibration(
            device=str(device["name"]),
            backend=str(device["backend"]),
            model=str(report["model"]),
            copy_bandwidth=copy,
            decode_bandwidth=decode["measured"]["bandwidth_bytes_per_s"],
            prefill_tokens_per_s=report["tokens"] / t_pf if t_pf else None,
            prefill_tflops=prefill["measured"]["tflop_per_s"],
            launch_us=launch,
            scan_tflops=_scan_tflops(prefill.get("rows") or (), launch),
        )
    except (KeyError, TypeError) as exc:
        raise PlanError(f"not a hybridplan profile report: {exc} missing") from None


def save(cal: Calibration, path: Path) -> None:
    try:
        path.write_text(json.dumps(cal.to_dict(), indent=1) + "\n")
    except OSError as exc:
        raise PlanError(f"cannot write {path}: {exc.strerror}") from None


def load(path: Path) -> Calibration:
    try:
        d = json.loads(Path(path).read_text())
    except OSError as exc:
        raise PlanError(f"cannot read --calibration {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise PlanError(f"--calibration {path} is not JSON: {exc.msg} (line {exc.lineno})") from None
    if not isinstance(d, dict) or d.get("version") != CALIBRATION_VERSION:
        raise PlanError(
            f"--calibration {path} is not a calibration file of version {CALIBRATION_VERSION} "
            "(write one with hybridplan profile --save-calibration)"
        )
    try:
        return Calibration(**d)
    except TypeError as exc:
        raise PlanError(f"--calibration {path}: {exc}") from None


class PhaseCheck(Struct, frozen=True):
    """One phase of a profile (its decode step over every slot, or its prefill) against `speed`'s calibrated
    prediction for the same rows: each row's bytes and FLOPs timed as ``speed`` times a layer kind's work."""

    phase: str
    rows: int
    predicted_s: float
    measured_s: float

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1

    def to_dict(self) -> dict:
        return {
            "phase": self.phase,
            "rows": self.rows,
            "predicted_s": self.predicted_s,
            "measured_s": self.measured_s,
            "error": self.error,
        }


def check_profile(report: dict, cal: Calibration, g: Datasheet, base: Efficiency = DEFAULT) -> tuple[PhaseCheck, ...]:
    """The profile's measured decode step and prefill beside what ``speed --calibration`` predicts for them.

    Each row that ran is one kernel a layer (``layers`` launches) moving its modelled bytes (the recurrent
    state and conv window: ``speed``'s state traffic, at the calibrated ``state_hbm``) and, in the prefill, doing
    its FLOPs on the tensor cores at the calibrated ``scan`` fraction; the kernel floor is the calibrated launch
    overhead. The calibration comes from the same run, so this checks that it is read back as measured: what is
    left is the spread of the per-layer overhead about its median and the rows whose bytes outlast their FLOPs,
    not a new measurement."""
    from hybridplan.speed.model import kind_time
    from hybridplan.speed.work import Work

    eff = cal.efficiency(g, base)
    out = []
    for phase in ("decode", "prefill"):
        try:
            rows = [
                r
                for r in report[phase]["rows"]
                if r["predicted"]["bytes"] is not None and r["measured"]["seconds"] is not None
            ]
        except (KeyError, TypeError) as exc:
            raise PlanError(f"not a hybridplan profile report: {exc} missing") from None
        if not rows:
            continue
        predicted = 0.0
        for r in rows:
            flops = float(r["predicted"].get("flops") or 0) if phase == "prefill" else 0.0
            w = Work(
                r["kind"],
                int(r["layers"]),
                state_bytes=float(r["predicted"]["bytes"]),
                scan_flops=flops,
                kernels=int(r["layers"]),
            )
            predicted += kind_time(w, g, eff, "bf16", graphs=True).seconds
        out.append(PhaseCheck(phase, len(rows), predicted, sum(float(r["measured"]["seconds"]) for r in rows)))
    return tuple(out)
