"""Throughput figures of the GPUs ``hybridplan/gpus.py`` names, from the vendors' datasheets, for the speed
model: HBM bandwidth, dense tensor FLOP/s at bf16 and fp8, fp32 FLOP/s on the ordinary (non-tensor) cores, and
the GPU-to-GPU link.

One place per fact: ``hybridplan/gpus.py`` holds what a GPU *reports* (memory totals read from logs and tools),
this table what its vendor *publishes* about speed, keyed by the same GPU key, each row naming its datasheet.
A GPU hybridplan/gpus.py gains without a row here is still sized by ``fit``; ``speed`` says which figure it lacks.
(gpus.py's older ``bandwidth_gbps``/``bf16_tflops`` fields are read by nothing but ``hybridplan gpus --json``;
tests/test_speed.py holds them equal to this table where both are set.)

Dense means without 2:4 sparsity: datasheets that print only the sparse figure are halved, and say so. The link
is the datasheet's total (both directions) per GPU; a ring all-reduce moves data one way, at half of it.
"""

from __future__ import annotations


from msgspec import Struct

from hybridplan.errors import PlanError


class Datasheet(Struct, frozen=True):
    key: str
    #: HBM (or GDDR/LPDDR) bandwidth, GB/s (10^9 B/s)
    hbm_gbps: float | None
    #: dense tensor-core TFLOP/s at bf16 (fp16 where the GPU has no bf16), fp32 accumulate
    bf16_tflops: float | None
    #: dense tensor-core TFLOP/s at fp8; None where the GPU has no fp8 tensor cores
    fp8_tflops: float | None
    #: fp32 on the CUDA (or stream) cores, TFLOP/s: what a scan's exp and multiply-adds run on
    fp32_tflops: float | None
    #: GPU-to-GPU bandwidth, GB/s, both directions together, and what the link is
    link_gbps: float | None
    link: str
    sheet: str

    def to_dict(self) -> dict:
        return {"hbm_gb_per_s": self.hbm_gbps, "bf16_dense_tflops": self.bf16_tflops,
                "fp8_dense_tflops": self.fp8_tflops, "fp32_tflops": self.fp32_tflops,
                "link_gb_per_s": self.link_gbps, "link": self.link, "datasheet": self.sheet}


_PCIE4, _PCIE5 = (64.0, "PCIe Gen4 x16"), (128.0, "PCIe Gen5 x16")
_H100 = "NVIDIA H100 Tensor Core GPU datasheet"
_A100 = "NVIDIA A100 Tensor Core GPU datasheet"

DATASHEETS: dict[str, Datasheet] = {d.key: d for d in (
    Datasheet("h100", 3350, 989, 1979, 67, 900, "NVLink 4", f"{_H100} (H100 SXM column)"),
    Datasheet("h100-pcie", 2000, 756, 1513, 51, *_PCIE5, f"{_H100} (H100 PCIe column)"),
    Datasheet("h100-nvl", 3900, 835, 1671, 60, 600, "NVLink bridge", f"{_H100} (H100 NVL column)"),
    Datasheet("h200", 4800, 989, 1979, 67, 900, "NVLink 4", "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM)"),
    Datasheet("h20", 4000, 148, 296, 44, 900, "NVLink 4", "NVIDIA H20 product brief"),
    Datasheet("gh200", 4000, 989, 1979, 67, 900, "NVLink 4", "NVIDIA GH200 Grace Hopper Superchip datasheet "
              "(96GB HBM3)"),
    Datasheet("gh200-144g", 4900, 989, 1979, 67, 900, "NVLink 4", "NVIDIA GH200 Grace Hopper Superchip "
              "datasheet (144GB HBM3e)"),
    Datasheet("b200", 8000, 2250, 4500, 75, 1800, "NVLink 5", "NVIDIA HGX B200 datasheet, per GPU (the "
              "8-GPU figures ÷ 8; sparse figures halved)"),
    Datasheet("gb200", 8000, 2500, 5000, 80, 1800, "NVLink 5", "NVIDIA GB200 NVL72 datasheet, per GPU "
              "(sparse figures halved)"),
    Datasheet("b300", 8000, 2250, 4500, None, 1800, "NVLink 5", "NVIDIA HGX B300 datasheet, per GPU "
              "(sparse figures halved)"),
    Datasheet("gb300", 8000, 2500, 5000, None, 1800, "NVLink 5", "NVIDIA GB300 NVL72 datasheet, per GPU "
              "(sparse figures halved)"),
    Datasheet("a100-40g", 1555, 312, None, 19.5, 600, "NVLink 3", f"{_A100} (A100 40GB SXM column)"),
    Datasheet("a100-40g-pcie", 1555, 312, None, 19.5, *_PCIE4, f"{_A100} (A100 40GB PCIe column)"),
    Datasheet("a100-80g", 2039, 312, None, 19.5, 600, "NVLink 3", f"{_A100} (A100 80GB SXM column)"),
    Datasheet("a100-80g-pcie", 1935, 312, None, 19.5, *_PCIE4, f"{_A100} (A100 80GB PCIe column)"),
    Datasheet("l40s", 864, 362, 733, 91.6, *_PCIE4, "NVIDIA L40S datasheet (sparse figures halved)"),
    Datasheet("l40", 864, 181, 362, 90.5, *_PCIE4, "NVIDIA L40 datasheet (sparse figures halved)"),
    Datasheet("l4", 300, 121, 242, 30.3, *_PCIE4, "NVIDIA L4 Tensor Core GPU datasheet (sparse figures halved)"),
    Datasheet("a10", 600, 125, None, 31.2, *_PCIE4, "NVIDIA A10 Tensor Core GPU datasheet (sparse figures "
              "halved)"),
    Datasheet("a10g", 600, None, None, None, *_PCIE4, "AWS EC2 G5 instance page (memory bandwidth only)"),
    Datasheet("rtx-a6000", 768, 155, None, 38.7, 112.5, "NVLink bridge", "NVIDIA RTX A6000 datasheet (tensor "
              "figure 309.7 sparse, halved)"),
    Datasheet("rtx-6000-ada", 960, 364, 728, 91.1, *_PCIE4, "NVIDIA RTX 6000 Ada Generation datasheet (sparse "
              "fp8 1,457 halved; bf16 half of fp8)"),
    Datasheet("rtx-3090", 936, 71, None, 35.6, 112.5, "NVLink bridge", "NVIDIA Ampere GA102 GPU architecture "
              "whitepaper, RTX 3090 (fp16 tensor, fp32 accumulate)"),
    Datasheet("rtx-4080", 717, 97.5, 195, 48.7, *_PCIE4, "NVIDIA Ada GPU architecture whitepaper, RTX 4080 "
              "(fp32 accumulate)"),
    Datasheet("rtx-4090", 1008, 165, 330, 82.6, *_PCIE4, "NVIDIA Ada GPU architecture whitepaper, RTX 4090 "
              "(fp32 accumulate)"),
    Datasheet("rtx-5090", 1792, 209.5, 419, 104.8, *_PCIE5, "NVIDIA RTX Blackwell GPU architecture "
              "whitepaper, RTX 5090 (sparse figures halved)"),
    Datasheet("t4", 320, 65, None, 8.1, 32.0, "PCIe Gen3 x16", "NVIDIA T4 datasheet (mixed-precision fp16: "
              "the T4 has no bf16)"),
    Datasheet("gb10", 273, None, None, None, None, "none", "NVIDIA DGX Spark datasheet (LPDDR5x bandwidth only)"),
    Datasheet("mi300x", 5300, 1307, 2615, 163.4, 896, "Infinity Fabric (7 links)", "AMD Instinct MI300X "
              "datasheet"),
    Datasheet("mi325x", 6000, 1307, 2615, 163.4, 896, "Infinity Fabric (7 links)", "AMD Instinct MI325X "
              "datasheet"),
)}


def datasheet(key: str) -> Datasheet:
    """The speed figures of a GPU by its hybridplan/gpus.py key; refused where none are recorded."""
    try:
        return DATASHEETS[key]
    except KeyError:
        raise PlanError(f"no datasheet speed figures for GPU {key!r} (known: {', '.join(DATASHEETS)})") from None
