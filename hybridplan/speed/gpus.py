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
    #: dense tensor-core TFLOP/s at fp4 (NVFP4 on Blackwell, MXFP4 on CDNA 4); None where the GPU has no fp4
    fp4_tflops: float | None = None
    #: where the vendor publishes the figures (a product page or a datasheet PDF)
    url: str = ""

    def to_dict(self) -> dict:
        return {
            "hbm_gb_per_s": self.hbm_gbps,
            "bf16_dense_tflops": self.bf16_tflops,
            "fp8_dense_tflops": self.fp8_tflops,
            "fp4_dense_tflops": self.fp4_tflops,
            "fp32_tflops": self.fp32_tflops,
            "link_gb_per_s": self.link_gbps,
            "link": self.link,
            "datasheet": self.sheet,
            "url": self.url,
        }


_PCIE3, _PCIE4, _PCIE5 = (32.0, "PCIe Gen3 x16"), (64.0, "PCIe Gen4 x16"), (128.0, "PCIe Gen5 x16")
_H100 = "NVIDIA H100 Tensor Core GPU datasheet"
_A100 = "NVIDIA A100 Tensor Core GPU datasheet"
#: the vendors' pages each row's figures are read from
_NV = "https://www.nvidia.com/en-us"
_U_H100 = f"{_NV}/data-center/h100/"
_U_H200 = f"{_NV}/data-center/h200/"
_U_A100 = f"{_NV}/data-center/a100/"
_U_GH200 = f"{_NV}/data-center/grace-hopper-superchip/"
_U_HGX = f"{_NV}/data-center/hgx/"
_U_ADA = "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf"
_U_GA102 = "https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf"
_U_RTXBW = "https://images.nvidia.com/aem-dam/Solutions/geforce/blackwell/nvidia-rtx-blackwell-gpu-architecture.pdf"
_U_AMD = "https://www.amd.com/en/products/accelerators/instinct"

# Figures: dense (a datasheet's sparse figure halved, as the row says). Derived rows say how, in the sheet text.
DATASHEETS: dict[str, Datasheet] = {
    d.key: d
    for d in (
        Datasheet("h100", 3350, 989, 1979, 67, 900, "NVLink 4", f"{_H100} (H100 SXM column)", url=_U_H100),
        Datasheet("h100-pcie", 2000, 756, 1513, 51, *_PCIE5, f"{_H100} (H100 PCIe column)", url=_U_H100),
        Datasheet("h100-nvl", 3900, 835, 1671, 60, 600, "NVLink bridge", f"{_H100} (H100 NVL column)", url=_U_H100),
        Datasheet(
            "h800",
            3350,
            989,
            1979,
            67,
            400,
            "NVLink 4 (cut to 400 GB/s)",
            "NVIDIA H800 SXM5 datasheet: the "
            "H100 SXM's memory and tensor figures (sparse bf16 1,979 and fp8 3,958, halved) with NVLink at "
            "400 GB/s",
            url=f"{_NV}/data-center/h800/",
        ),
        Datasheet(
            "h200",
            4800,
            989,
            1979,
            67,
            900,
            "NVLink 4",
            "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM)",
            url=_U_H200,
        ),
        Datasheet(
            "h200-nvl",
            4800,
            835.5,
            1670.5,
            60,
            900,
            "NVLink bridge (2- or 4-way)",
            "NVIDIA H200 Tensor Core GPU datasheet (H200 NVL column; sparse bf16 1,671 and fp8 3,341 halved)",
            url=_U_H200,
        ),
        Datasheet("h20", 4000, 148, 296, 44, 900, "NVLink 4", "NVIDIA H20 product brief (dense figures as printed)"),
        Datasheet(
            "h20-3e",
            4000,
            148,
            296,
            44,
            900,
            "NVLink 4",
            "the H20 product brief's compute and NVLink (the "
            "H20-3e is the H20 with 141 GB of HBM3e); NVIDIA publishes no bandwidth for it: the H20's 4.0 TB/s is "
            "taken, a floor (the H200's HBM3e stacks run at 4.8 TB/s)",
        ),
        Datasheet(
            "gh200",
            4000,
            989,
            1979,
            67,
            900,
            "NVLink 4",
            "NVIDIA GH200 Grace Hopper Superchip datasheet (96GB HBM3)",
            url=_U_GH200,
        ),
        Datasheet(
            "gh200-144g",
            4900,
            989,
            1979,
            67,
            900,
            "NVLink 4",
            "NVIDIA GH200 Grace Hopper Superchip datasheet (144GB HBM3e)",
            url=_U_GH200,
        ),
        Datasheet(
            "b200",
            8000,
            2250,
            4500,
            75,
            1800,
            "NVLink 5",
            "NVIDIA HGX B200 datasheet, per GPU (the "
            "8-GPU figures ÷ 8; sparse figures halved: fp4 144 PF sparse → 9 PF dense a GPU)",
            9000,
            _U_HGX,
        ),
        Datasheet(
            "gb200",
            8000,
            2500,
            5000,
            80,
            1800,
            "NVLink 5",
            "NVIDIA GB200 NVL72 datasheet, per GPU "
            "(÷ 72; sparse figures halved: fp4 1,440 PF sparse → 10 PF dense a GPU)",
            10000,
            f"{_NV}/data-center/gb200-nvl72/",
        ),
        Datasheet(
            "b300",
            8000,
            2250,
            4500,
            None,
            1800,
            "NVLink 5",
            "NVIDIA HGX B300 datasheet, per GPU (sparse figures halved; fp4 108 PF dense for 8 GPUs)",
            13500,
            _U_HGX,
        ),
        Datasheet(
            "gb300",
            8000,
            2500,
            5000,
            None,
            1800,
            "NVLink 5",
            "NVIDIA GB300 NVL72 datasheet, per GPU (sparse figures halved; fp4 1,080 PF dense for 72 GPUs)",
            15000,
            f"{_NV}/data-center/gb300-nvl72/",
        ),
        Datasheet("a100-40g", 1555, 312, None, 19.5, 600, "NVLink 3", f"{_A100} (A100 40GB SXM column)", url=_U_A100),
        Datasheet("a100-40g-pcie", 1555, 312, None, 19.5, *_PCIE4, f"{_A100} (A100 40GB PCIe column)", url=_U_A100),
        Datasheet("a100-80g", 2039, 312, None, 19.5, 600, "NVLink 3", f"{_A100} (A100 80GB SXM column)", url=_U_A100),
        Datasheet("a100-80g-pcie", 1935, 312, None, 19.5, *_PCIE4, f"{_A100} (A100 80GB PCIe column)", url=_U_A100),
        Datasheet(
            "l40s",
            864,
            362,
            733,
            91.6,
            *_PCIE4,
            "NVIDIA L40S datasheet (sparse figures halved)",
            url=f"{_NV}/data-center/l40s/",
        ),
        Datasheet(
            "l40",
            864,
            181,
            362,
            90.5,
            *_PCIE4,
            "NVIDIA L40 datasheet (sparse figures halved)",
            url=f"{_NV}/data-center/l40/",
        ),
        Datasheet(
            "l20",
            864,
            119.5,
            239,
            59.8,
            *_PCIE4,
            "NVIDIA L20 product brief (bf16 119.5, fp8 239, fp32 59.8 "
            "TFLOPS; 48 GB GDDR6 at 864 GB/s); the fp32 figure is 92 SMs × 128 lanes × 2 × 2.52 GHz",
        ),
        Datasheet(
            "l4",
            300,
            121,
            242,
            30.3,
            *_PCIE4,
            "NVIDIA L4 Tensor Core GPU datasheet (sparse figures halved)",
            url=f"{_NV}/data-center/l4/",
        ),
        Datasheet(
            "a10",
            600,
            125,
            None,
            31.2,
            *_PCIE4,
            "NVIDIA A10 Tensor Core GPU datasheet (sparse figures halved)",
            url=f"{_NV}/data-center/products/a10-gpu/",
        ),
        Datasheet(
            "a10g",
            600,
            70,
            None,
            35,
            *_PCIE4,
            "AWS EC2 G5 (A10G): 600 GB/s, as the A10; NVIDIA publishes no "
            "A10G datasheet: its tensor (fp16, fp32 accumulate) and fp32 figures, 70 and 35 TFLOPS, as Baseten's "
            "A10-vs-A10G comparison lists them (https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-"
            "inference/)",
            url="https://aws.amazon.com/ec2/instance-types/g5/",
        ),
        Datasheet(
            "rtx-a6000",
            768,
            155,
            None,
            38.7,
            112.5,
            "NVLink bridge",
            "NVIDIA RTX A6000 datasheet (tensor figure 309.7 sparse, halved)",
            url=f"{_NV}/design-visualization/rtx-a6000/",
        ),
        Datasheet(
            "rtx-6000-ada",
            960,
            364,
            728,
            91.1,
            *_PCIE4,
            "NVIDIA RTX 6000 Ada Generation datasheet (sparse fp8 1,457 halved; bf16 half of fp8)",
            url=f"{_NV}/design-visualization/rtx-6000/",
        ),
        Datasheet(
            "rtx-pro-6000",
            1792,
            500,
            1000,
            125,
            *_PCIE5,
            "NVIDIA RTX PRO 6000 Blackwell Server Edition "
            "datasheet: 96 GB GDDR7 at 1,792 GB/s, fp32 125 TFLOPS, fp4 4,000 AI TOPS (sparse); dense fp4 2,000, "
            "fp8 and bf16 each half the one before (the professional card's fp32-accumulate rate)",
            2000,
            f"{_NV}/data-center/rtx-pro-6000-blackwell-server-edition/",
        ),
        Datasheet(
            "rtx-3060",
            360,
            25.4,
            None,
            12.7,
            *_PCIE4,
            "NVIDIA GeForce RTX 3060 specifications (12 GB GDDR6 at "
            "360 GB/s, 3,584 CUDA cores at 1.777 GHz boost: fp32 12.7 TFLOPS); the tensor figure at the GA102 "
            "whitepaper's per-SM rate (the RTX 3090's 71 dense fp16 TFLOPS, fp32 accumulate, over 82 SMs at "
            "1.695 GHz) for 28 SMs at 1.777 GHz",
            url=_U_GA102,
        ),
        Datasheet(
            "rtx-3090",
            936,
            71,
            None,
            35.6,
            112.5,
            "NVLink bridge",
            "NVIDIA Ampere GA102 GPU architecture whitepaper, RTX 3090 (fp16 tensor, fp32 accumulate)",
            url=_U_GA102,
        ),
        Datasheet(
            "rtx-4080",
            717,
            97.5,
            195,
            48.7,
            *_PCIE4,
            "NVIDIA Ada GPU architecture whitepaper, RTX 4080 (fp32 accumulate)",
            url=_U_ADA,
        ),
        Datasheet(
            "rtx-4090",
            1008,
            165,
            330,
            82.6,
            *_PCIE4,
            "NVIDIA Ada GPU architecture whitepaper, RTX 4090 (fp32 accumulate)",
            url=_U_ADA,
        ),
        Datasheet(
            "rtx-5070-ti",
            896,
            87.9,
            175.8,
            43.9,
            *_PCIE5,
            "NVIDIA GeForce RTX 5070 Ti specifications: 16 GB "
            "GDDR7 at 896 GB/s, 1,406 AI TOPS (fp4, sparse); dense fp4 703, and fp8 and bf16 (fp32 accumulate) "
            "at the RTX 5090's ratios to its fp4 in the RTX Blackwell whitepaper (1/4, 1/8); fp32 8,960 CUDA "
            "cores × 2 × 2.452 GHz",
            703,
            f"{_NV}/geforce/graphics-cards/50-series/rtx-5070-family/",
        ),
        Datasheet(
            "rtx-5090",
            1792,
            209.5,
            419,
            104.8,
            *_PCIE5,
            "NVIDIA RTX Blackwell GPU architecture "
            "whitepaper, RTX 5090 (sparse figures halved; fp4 3,352 AI TOPS sparse → 1,676)",
            1676,
            _U_RTXBW,
        ),
        Datasheet(
            "t4",
            320,
            65,
            None,
            8.1,
            *_PCIE3,
            "NVIDIA T4 datasheet (mixed-precision fp16: the T4 has no bf16)",
            url=f"{_NV}/data-center/tesla-t4/",
        ),
        Datasheet(
            "gb10",
            273,
            125,
            250,
            None,
            50,
            "ConnectX-7, 200 Gb/s each way (two DGX Sparks)",
            "NVIDIA DGX "
            "Spark datasheet: 128 GB LPDDR5x at 273 GB/s, 1 PFLOP fp4 with sparsity; dense fp4 500, and fp8 and "
            "bf16 each half the one before (Blackwell's tensor-core ratios); no fp32 figure published",
            500,
            f"{_NV}/products/workstations/dgx-spark/",
        ),
        Datasheet(
            "mi300x",
            5300,
            1307,
            2615,
            163.4,
            896,
            "Infinity Fabric (7 links)",
            "AMD Instinct MI300X datasheet",
            url=f"{_U_AMD}/mi300/mi300x.html",
        ),
        Datasheet(
            "mi325x",
            6000,
            1307,
            2615,
            163.4,
            896,
            "Infinity Fabric (7 links)",
            "AMD Instinct MI325X datasheet",
            url=f"{_U_AMD}/mi300/mi325x.html",
        ),
        Datasheet(
            "mi355x",
            8000,
            2516.6,
            5033.2,
            157.3,
            1075.2,
            "Infinity Fabric (7 links × 153.6 GB/s)",
            "AMD Instinct MI355X datasheet (dense: fp16/bf16 2.5 PF, fp8 5.0 PF, MXFP4 10.1 PF)",
            10066.4,
            f"{_U_AMD}/mi350/mi355x.html",
        ),
    )
}


def datasheet(key: str) -> Datasheet:
    """The speed figures of a GPU by its hybridplan/gpus.py key; refused where none are recorded."""
    try:
        return DATASHEETS[key]
    except KeyError:
        raise PlanError(f"no datasheet speed figures for GPU {key!r} (known: {', '.join(DATASHEETS)})") from None
