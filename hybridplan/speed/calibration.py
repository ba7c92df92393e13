"""Calibration from `hybridplan profile`: what one GPU measured, in place of the efficiencies fitted on attention
models where the measurement says more.

``profile --save-calibration FILE`` records, from the profile's own report (its ``--json`` form):

- the decode bandwidth the recurrent state kernels achieved (every decode row's bytes over its seconds);
- the chunked scans' prefill throughput (the profiled prompt's tokens over the prefill rows' seconds) and the
  tensor FLOP/s they reached;
- the device-to-device copy bandwidth;
- the per-launch overhead: for each decode row, the seconds beyond what its bytes take at the copy bandwidth,
  per layer (one launch a layer), the median over the rows.

``speed --calibration FILE`` then reads the recurrent state's traffic at the measured decode bandwidth
(``Efficiency.state_hbm``), the scans' FLOPs at the measured fraction of the tensor peak (``Efficiency.scan``)
and the kernel floor as the measured launch overhead; weights, KV and matmuls keep the fitted fractions, which
a profile of the recurrent kernels does not measure.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from statistics import median

from hybridplan.errors import PlanError
from hybridplan.speed.gpus import Datasheet
from hybridplan.speed.model import DEFAULT, Efficiency, tensor_peak

#: the calibration file's version
CALIBRATION_VERSION = 1


@dataclass(frozen=True)
class Calibration:
    device: str
    #: "cuda", or "triton-interpreter" (the CPU pipeline: figures of no GPU)
    backend: str
    model: str
    copy_bandwidth: float | None
    decode_bandwidth: float | None
    prefill_tokens_per_s: float | None
    prefill_tflops: float | None
    launch_us: float | None
    version: int = CALIBRATION_VERSION

    @property
    def on_gpu(self) -> bool:
        return self.backend == "cuda"

    def to_dict(self) -> dict:
        return asdict(self)

    def efficiency(self, g: Datasheet, base: Efficiency = DEFAULT) -> Efficiency:
        """``base`` with the measured figures set, each as a fraction of ``g``'s datasheet."""
        changes: dict = {"source": f"{base.source}; calibrated by a profile of {self.model} on {self.device}"}
        if self.decode_bandwidth and g.hbm_gbps:
            changes["state_hbm"] = min(1.0, self.decode_bandwidth / (g.hbm_gbps * 1e9))
        if self.prefill_tflops and g.bf16_tflops:
            changes["scan"] = min(1.0, self.prefill_tflops * 1e12 / tensor_peak(g, "bf16"))
        if self.launch_us is not None:
            changes["kernel_floor_graph_us"] = self.launch_us
        return replace(base, **changes)


def _phase_seconds(phase: dict) -> float | None:
    return (phase.get("measured") or {}).get("seconds")


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
        return Calibration(
            device=str(device["name"]), backend=str(device["backend"]), model=str(report["model"]),
            copy_bandwidth=copy, decode_bandwidth=decode["measured"]["bandwidth_bytes_per_s"],
            prefill_tokens_per_s=report["tokens"] / t_pf if t_pf else None,
            prefill_tflops=prefill["measured"]["tflop_per_s"], launch_us=median(excess) if excess else None)
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
        raise PlanError(f"--calibration {path} is not a calibration file of version {CALIBRATION_VERSION} "
                        "(write one with hybridplan profile --save-calibration)")
    try:
        return Calibration(**d)
    except TypeError as exc:
        raise PlanError(f"--calibration {path}: {exc}") from None
