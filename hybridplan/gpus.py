"""GPUs by name: the memory the driver reports, which is what an engine multiplies by its utilisation.

Two totals circulate and differ by the driver's reservation (0.45–0.9 GiB on the boards where both were seen):
the CUDA total (``torch.cuda.mem_get_info()[1]``, deviceQuery's "Total amount of global memory", the second
figure of vLLM's "Free memory on device (free/total GiB)", the "total capacity" of PyTorch's out-of-memory
message) and nvidia-smi's ``memory.total`` (NVML). Engines size from the CUDA total; where only the nvidia-smi
figure was found it is used, and ``exact`` says so. Every figure names where it was read: a vLLM start-up log,
a PyTorch error, deviceQuery, rocm-smi or nvidia-smi output posted publicly; a few GPUs (kind "datasheet") have
only the vendor's memory size, in GiB, until a reported total is found. A GPU is found by its key, an alias, its
name or the name nvidia-smi and PyTorch give it (``NVIDIA GeForce RTX 4090``, ``rtx4090``, ``RTX 4090``). Bandwidth and dense BF16 TFLOPs
are the vendors' datasheet figures, kept for speed estimates.
"""

from __future__ import annotations

import re
from functools import lru_cache

from msgspec import Struct

from hybridplan.errors import PlanError, did_you_mean

GiB, MiB = 1 << 30, 1 << 20


class Gpu(Struct, frozen=True):
    key: str
    name: str
    #: total memory in bytes, as the source gives it
    total: int
    #: "cuda" (what engines see), "nvidia-smi" (larger by the driver's reservation) or "datasheet" (the
    #: vendor's memory size in GiB, where no reported total was found: larger still)
    kind: str
    source: str
    bandwidth_gbps: float | None = None
    bf16_tflops: float | None = None
    aliases: tuple[str, ...] = ()
    #: nvidia-smi's total in MiB where the entry is the CUDA total (SGLang sizes from nvidia-smi's)
    smi: int | None = None
    #: memory shared with the host (vLLM then reads free memory from the host's available memory)
    unified: bool = False
    #: boards joined by an NVLink switch with NVLink SHARP (Hopper and Blackwell SXM), where NCCL's buffers
    #: make non-torch memory at TP ≥ 2 about 2 GiB; False: PCIe or a bridge
    nvswitch: bool = False

    @property
    def exact(self) -> bool:
        return self.kind == "cuda"

    @property
    def approximation(self) -> str | None:
        """What the total is, where it is not the CUDA total the engines see."""
        if self.kind == "nvidia-smi":
            return (
                f"{self.name}: nvidia-smi's total, {self.total:,} B; the CUDA total the engines see is 0.45–0.9 "
                "GiB smaller (hybridplan/gpus.py)"
            )
        if self.kind == "datasheet":
            return (
                f"{self.name}: the datasheet's {self.total / GiB:g} GiB, no reported total found; the CUDA total "
                "the engines see is about 1 GiB smaller (hybridplan/gpus.py)"
            )
        return None

    @property
    def smi_mib(self) -> float:
        """The total nvidia-smi reports, in MiB (the CUDA total where no nvidia-smi figure was found)."""
        return float(self.smi) if self.smi else self.total / MiB

    def to_dict(self) -> dict:
        return {
            "key": self.key,
            "name": self.name,
            "total_bytes": self.total,
            "total_kind": self.kind,
            "source": self.source,
            "bandwidth_gb_per_s": self.bandwidth_gbps,
            "bf16_dense_tflops": self.bf16_tflops,
            "nvswitch": self.nvswitch,
            "unified_memory": self.unified,
        }


def _vllm(gib: str) -> int:
    """vLLM and PyTorch print the CUDA total to 0.01 GiB: the byte count is known to ±5 MiB."""
    return round(float(gib) * GiB)


GPUS: tuple[Gpu, ...] = (
    Gpu(
        "h100",
        "NVIDIA H100 80GB HBM3 (SXM)",
        85_028_896_768,
        "cuda",
        "deviceQuery: 81090 MBytes (85028896768 bytes), CUDA 12.8 driver; 85,017,755,648 to 85,045,477,376 "
        "bytes across drivers; vLLM prints 79.18–79.19 GiB",
        3350,
        989,
        ("h100-sxm", "h100-80g", "NVIDIA H100 80GB HBM3"),
        smi=81559,
        nvswitch=True,
    ),
    Gpu(
        "h100-pcie",
        "NVIDIA H100 PCIe 80GB",
        81559 * MiB,
        "nvidia-smi",
        "nvidia-smi: 81559MiB",
        2000,
        756,
        ("NVIDIA H100 PCIe",),
    ),
    Gpu(
        "h100-nvl",
        "NVIDIA H100 NVL 94GB",
        _vllm("93.0"),
        "cuda",
        "vLLM: Free memory on device (…/93.0 GiB)",
        aliases=("h100nvl",),
        smi=95830,
    ),
    Gpu(
        "h800",
        "NVIDIA H800 80GB HBM3 (SXM)",
        80 * GiB,
        "datasheet",
        "NVIDIA H800 SXM datasheet: 80 GB HBM3 (the H100 SXM's memory; nvidia-smi name NVIDIA H800 80GB HBM3)",
        3350,
        989,
        ("h800-sxm", "NVIDIA H800 80GB HBM3", "NVIDIA H800"),
        nvswitch=True,
    ),
    Gpu(
        "h200",
        "NVIDIA H200 141GB",
        _vllm("139.81"),
        "cuda",
        "vLLM: Free memory on device (139.21/139.81 GiB); nvidia-smi: 143771MiB",
        4800,
        989,
        ("h200-sxm", "h200-141g", "NVIDIA H200"),
        smi=143771,
        nvswitch=True,
    ),
    Gpu(
        "h200-nvl",
        "NVIDIA H200 NVL",
        143771 * MiB,
        "nvidia-smi",
        "nvidia-smi: ~143771 MiB on 4× H200 NVL (gpuq's README, a public GPU-queue tool); datasheet 141 GB",
        4800,
        aliases=("NVIDIA H200 NVL", "h200nvl"),
    ),
    Gpu(
        "h20",
        "NVIDIA H20 96GB",
        97871 * MiB,
        "nvidia-smi",
        "nvidia-smi: 97871MiB",
        aliases=("NVIDIA H20",),
        nvswitch=True,
    ),
    Gpu(
        "h20-3e",
        "NVIDIA H20-3e 141GB",
        143771 * MiB,
        "nvidia-smi",
        "nvidia-smi: NVIDIA H20-3e, 143771 MiB (the H200's figure: the same 141 GB HBM3e), as public run notes on "
        "GitHub print it; 8 × H20-3e (143 GB) a node in Mooncake's SGLang PD-disaggregation benchmark "
        "(kvcache-ai/Mooncake docs, Qwen3-235B-A22B in bf16 at TP 8)",
        aliases=("NVIDIA H20-3e", "h20-141g", "NVIDIA H20 141GB"),
        nvswitch=True,
    ),
    Gpu(
        "gh200",
        "NVIDIA GH200 96GB (480GB superchip)",
        97871 * MiB,
        "nvidia-smi",
        "nvidia-smi: NVIDIA GH200 480GB, 97871MiB",
        aliases=("gh200-96g", "NVIDIA GH200 480GB"),
    ),
    Gpu("gh200-144g", "NVIDIA GH200 144G HBM3e", 146831 * MiB, "nvidia-smi", "nvidia-smi: 146831 MiB"),
    Gpu("b200", "NVIDIA B200", 183359 * MiB, "nvidia-smi", "nvidia-smi: 183359MiB", 8000, 2250, nvswitch=True),
    Gpu("gb200", "NVIDIA GB200", 189471 * MiB, "nvidia-smi", "nvidia-smi: 189471MiB", 8000, 2500, nvswitch=True),
    Gpu(
        "b300",
        "NVIDIA B300 SXM6",
        275040 * MiB,
        "nvidia-smi",
        "nvidia-smi: NVIDIA B300 SXM6 AC, 275040MiB",
        aliases=("NVIDIA B300 SXM6 AC",),
        nvswitch=True,
    ),
    Gpu("gb300", "NVIDIA GB300", 284208 * MiB, "nvidia-smi", "nvidia-smi: 284208MiB", nvswitch=True),
    Gpu(
        "a100-40g",
        "NVIDIA A100-SXM4-40GB",
        42_405_855_232,
        "cuda",
        "deviceQuery: 40441 MBytes (42405855232 bytes); nvidia-smi: 40960MiB",
        1555,
        312,
        ("a100-sxm4-40gb",),
        smi=40960,
    ),
    Gpu("a100-40g-pcie", "NVIDIA A100-PCIE-40GB", 40960 * MiB, "nvidia-smi", "nvidia-smi: 40960MiB", 1555, 312),
    Gpu(
        "a100-80g",
        "NVIDIA A100-SXM4-80GB",
        _vllm("79.25"),
        "cuda",
        "vLLM: Free memory on device (78.84/79.25 GiB); nvidia-smi: 81920MiB",
        2039,
        312,
        ("a100", "a100-sxm4-80gb"),
        smi=81920,
    ),
    Gpu(
        "a100-80g-pcie",
        "NVIDIA A100 80GB PCIe",
        81920 * MiB,
        "nvidia-smi",
        "nvidia-smi: 81920MiB",
        1935,
        312,
        ("a100-80gb-pcie",),
    ),
    Gpu(
        "l40s",
        "NVIDIA L40S",
        _vllm("44.42"),
        "cuda",
        'PyTorch: "GPU has a total capacity of 44.42 GiB" (stepfun-ai/Step-Video-T2V#8, 8× L40S); 44.39–44.53 '
        "GiB across drivers (Wan-Video/Wan2.1#205: 44.53); nvidia-smi: 46068 MiB (ECC on)",
        smi=46068,
    ),
    Gpu(
        "l40",
        "NVIDIA L40",
        _vllm("44.40"),
        "cuda",
        'PyTorch: "GPU 0 has a total capacity of 44.40 GiB" (QwenLM/Qwen3-VL#2097, a single L40); nvidia-smi: '
        "46068MiB with ECC on (49140MiB with ECC off)",
        smi=46068,
    ),
    Gpu("l20", "NVIDIA L20", 48 * GiB, "datasheet", "NVIDIA L20 datasheet: 48 GB GDDR6 (ECC on leaves less)", 864),
    Gpu(
        "l4",
        "NVIDIA L4",
        _vllm("22.03"),
        "cuda",
        'PyTorch: "GPU 0 has a total capacity of 22.03 GiB" (ArcInstitute/evo2#190, an L4); nvidia-smi: 23034MiB',
        smi=23034,
    ),
    Gpu("a10g", "NVIDIA A10G", 23028 * MiB, "nvidia-smi", "nvidia-smi: 23028MiB"),
    Gpu(
        "a10",
        "NVIDIA A10",
        _vllm("22.18"),
        "cuda",
        'PyTorch: "GPU 0 has a total capacity of 22.18 GiB" (OpenBMB/MiniCPM-V#640, one A10); nvidia-smi: 23028MiB',
        smi=23028,
    ),
    Gpu("rtx-a6000", "NVIDIA RTX A6000", 49140 * MiB, "nvidia-smi", "nvidia-smi: 49140MiB", aliases=("a6000",)),
    Gpu("rtx-6000-ada", "NVIDIA RTX 6000 Ada Generation", 49140 * MiB, "nvidia-smi", "nvidia-smi: 49140MiB"),
    Gpu(
        "rtx-pro-6000",
        "NVIDIA RTX PRO 6000 Blackwell (Server Edition)",
        _vllm("94.97"),
        "cuda",
        "vLLM: Free memory on device (93.47/94.97 GiB); nvidia-smi: 97887MiB",
        aliases=("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000-blackwell"),
        smi=97887,
    ),
    Gpu("rtx-3060", "NVIDIA GeForce RTX 3060 12GB", 12288 * MiB, "nvidia-smi", "nvidia-smi: 12288 MiB"),
    Gpu(
        "rtx-3090",
        "NVIDIA GeForce RTX 3090",
        _vllm("23.56"),
        "cuda",
        "vLLM: Free memory on device (22.93/23.56 GiB); nvidia-smi: 24576 MiB",
        smi=24576,
    ),
    Gpu(
        "rtx-4080",
        "NVIDIA GeForce RTX 4080 16GB",
        _vllm("15.99"),
        "cuda",
        "vLLM: Free memory on device (14.66/15.99 GiB)",
    ),
    Gpu(
        "rtx-4090",
        "NVIDIA GeForce RTX 4090",
        _vllm("23.64"),
        "cuda",
        'PyTorch: "GPU 0 has a total capacty of 23.64 GiB" (3DTopia/Phidias-Diffusion#8, an RTX 4090); '
        "nvidia-smi: 24564 MiB",
        smi=24564,
    ),
    Gpu(
        "rtx-5070-ti",
        "NVIDIA GeForce RTX 5070 Ti",
        16 * GiB,
        "datasheet",
        "NVIDIA RTX 5070 Ti specifications: 16 GB GDDR7 (a PyTorch benchmark reports 15.9 GB)",
        896,
    ),
    Gpu(
        "rtx-5090",
        "NVIDIA GeForce RTX 5090",
        _vllm("31.40"),
        "cuda",
        "vLLM: Free memory on device (30.27/31.4 GiB) (noonghunna/club-3090#1087, 2× RTX 5090); PyTorch: 31.37 GiB "
        "(Wan-Video/Wan2.1#465); nvidia-smi: 32607MiB",
        smi=32607,
    ),
    Gpu(
        "t4",
        "Tesla T4",
        _vllm("14.56"),
        "cuda",
        'PyTorch: "GPU 0 has a total capacity of 14.56 GiB" (Zheng-Chong/CatVTON#133 and '
        "AlphaGPU/leetgpu-challenges#52, Tesla T4s); nvidia-smi: 15360MiB",
        smi=15360,
    ),
    Gpu(
        "gb10",
        "NVIDIA GB10 (DGX Spark, unified memory)",
        _vllm("119.63"),
        "cuda",
        "vLLM: Free memory on device (…/119.63 GiB); memory shared with the host",
        aliases=("dgx-spark",),
        unified=True,
    ),
    Gpu(
        "mi300x",
        "AMD Instinct MI300X",
        205_822_885_888,
        "cuda",
        "rocm-smi: VRAM Total Memory (B): 205822885888",
        5300,
        smi=196288,
    ),
    Gpu(
        "mi325x",
        "AMD Instinct MI325X",
        _vllm("255.98"),
        "cuda",
        'PyTorch (HIP): "GPU 0 has a total capacity of 255.98 GiB" (vllm-project/vllm#41962, 8× MI325X)',
        6000,
    ),
    Gpu("mi355x", "AMD Instinct MI355X", 288 * GiB, "datasheet", "AMD Instinct MI355X datasheet: 288 GB HBM3E", 8000),
)


#: words a GPU's name may carry or not: nvidia-smi writes "NVIDIA GeForce RTX 4090", people write "rtx4090"
_VENDOR_WORDS = ("nvidia", "geforce", "tesla", "amd", "instinct")


def _norm(name: str) -> str:
    """A name with case, spaces, ``-``, ``_``, brackets and vendor words dropped: ``NVIDIA GeForce RTX 4090``,
    ``RTX 4090``, ``rtx-4090`` and ``rtx4090`` are one name."""
    words = re.split(r"[^0-9a-z]+", name.lower())
    return "".join(w for w in words if w and w not in _VENDOR_WORDS)


@lru_cache(maxsize=1)
def _names() -> dict[str, Gpu]:
    """Every spelling → its GPU: the key, the aliases (nvidia-smi's names among them) and the display name.
    Built once (GPUS is fixed): the engines look their GPU up on every sizing, `plan` thousands of times."""
    out: dict[str, Gpu] = {}
    for g in GPUS:
        for n in (g.key, *g.aliases, g.name):
            out.setdefault(_norm(n), g)
    return out


# --- a name as people type it and as nvidia-smi / torch print it: family, memory, form factor, the rest --------

#: a memory size as it is written after a name: 80GB, 80gb, 80G, 80GiB, "16 GB"
_MEM = re.compile(r"^(\d+)(?:g|gb|gib)$")
#: words that say nothing about which card: memory kinds, and the words around a display name
_PLAIN = frozenset(
    {
        "hbm2",
        "hbm2e",
        "hbm3",
        "hbm3e",
        "gddr6",
        "gddr6x",
        "gddr7",
        "gpu",
        "generation",
        "edition",
        "server",
        "blackwell",
        "superchip",
        "unified",
        "memory",
        "graphics",
        "card",
    }
)


class _Parsed(Struct, frozen=True):
    family: str
    mem_gb: int | None
    #: "sxm", "pcie", "nvl" or None
    form: str | None
    words: frozenset[str]


def _parse(name: str) -> _Parsed:
    """``H100 SXM5 80GB`` → family h100, 80 GB, SXM; ``NVIDIA A100 80GB PCIe`` → a100, 80 GB, PCIe;
    ``RTX 5070 Ti`` → rtx5070 with the word ti. The family is the leading words up to the first holding a digit
    (``rtx`` + ``4090``), so that a size or a form factor after it does not change it."""
    words = [w for w in re.split(r"[^0-9a-z]+", name.lower()) if w and w not in _VENDOR_WORDS]
    family, rest, mem, form = "", [], None, None
    i = 0
    while i < len(words):
        family += words[i]
        i += 1
        if any(c.isdigit() for c in family):
            break
    for w in words[i:]:
        m = _MEM.match(w)
        if m and mem is None:
            mem = int(m.group(1))
        elif m or w in ("gb", "gib"):
            continue  # a second size (GH200's "480GB" superchip) or the unit written apart ("16 GB")
        elif re.fullmatch(r"sxm\d?", w):
            form = "sxm"
        elif w in ("pcie", "nvl"):
            form = w
        elif w.isdigit() and mem is None and len(w) <= 3:
            mem = int(w)  # "16 GB" written apart: the unit is dropped above
        elif w not in _PLAIN:
            rest.append(w)
    return _Parsed(family, mem, form, frozenset(rest))


def _spellings(g: Gpu) -> tuple[_Parsed, ...]:
    return tuple(_parse(n) for n in (g.key, g.name, *g.aliases))


def _families(g: Gpu) -> set[str]:
    return {p.family for p in _spellings(g)}


def _form(g: Gpu) -> str:
    """The board's form factor as its spellings name it; SXM where none says PCIe or NVL."""
    forms = {p.form for p in _spellings(g) if p.form is not None} - {"sxm"}
    return forms.pop() if forms else "sxm"


def _model_words(g: Gpu) -> frozenset[str]:
    """Words every spelling of the card carries (``ti`` of the RTX 5070 Ti, ``ada`` of the RTX 6000 Ada):
    a name without them is another card."""
    sets = [p.words for p in _spellings(g)]
    return frozenset.intersection(*sets) if sets else frozenset()


def _mem_fits(g: Gpu, gb: int) -> bool:
    """A size written on a card (80GB) against its total as reported: within 12 % (an H100's 80 GB is 79.19 GiB
    in CUDA; an L40S's 48 GB is 44.42 GiB with ECC on)."""
    return abs(g.total / GiB - gb) <= 0.12 * gb


def _matches(p: _Parsed, g: Gpu) -> bool:
    if p.family not in _families(g):
        return False
    if p.mem_gb is not None and not _mem_fits(g, p.mem_gb):
        return False
    if p.form is not None and p.form != _form(g):
        return False
    words = frozenset().union(*(s.words for s in _spellings(g)))
    return p.words <= words and _model_words(g) <= p.words


def _family_default(cands: list[Gpu], family: str) -> Gpu:
    """The card a bare family name means: the one that has the family name itself as its key or an alias (a100 →
    a100-80g, h100 → the SXM card), else the first listed."""
    for g in cands:
        if any(_norm(n) == family for n in (g.key, *g.aliases)):
            return g
    return cands[0]


def _variants_note(typed: str, g: Gpu, others: list[Gpu]) -> str:
    keys = [o.key for o in others]
    listed = keys[0] if len(keys) == 1 else f"{', '.join(keys[:-1])} and {keys[-1]}"
    return (
        f"GPU {typed!r} is taken as the {g.name} ({g.key}, {g.total / GiB:.2f} GiB); {listed} "
        f"{'is' if len(keys) == 1 else 'are'} of the same family: give --gpu-type the one you have"
    )


def resolve(name: str) -> tuple[Gpu, str | None]:
    """The GPU a name means, and a note where the name leaves a choice (a bare ``a100`` is the 80 GB SXM card of
    four A100s). Spellings accepted: the key, an alias, the display name, nvidia-smi's and
    ``torch.cuda.get_device_name``'s names, and these with a memory size (80gb, 80GB, 80G), a form factor (SXM,
    SXM5, PCIe, NVL) or case and separators of one's own."""
    p = _parse(name)
    family = [g for g in GPUS if p.family in _families(g)]
    exact = _names().get(_norm(name))
    if exact is not None:
        others = [g for g in family if g is not exact]
        bare = p.mem_gb is None and p.form is None and _norm(name) != _norm(exact.key)
        return exact, (_variants_note(name.strip(), exact, others) if bare and others else None)
    cands = [g for g in family if _matches(p, g)]
    if not cands:
        raise PlanError(
            f"unknown GPU {name!r}{_suggest(name, p, family)} (known: {', '.join(g.key for g in GPUS)}; "
            "`hybridplan gpus` lists them); or give --gpu-mem"
        )
    g = _family_default(cands, p.family) if len(cands) > 1 else cands[0]
    others = [c for c in cands if c is not g]
    return g, (_variants_note(name.strip(), g, others) if others else None)


def _suggest(name: str, p: _Parsed, family: list[Gpu]) -> str:
    """``; did you mean …?``: the cards of the same family first (an H100 name gets H100s), then the closest
    spellings of the others."""
    if family:
        return f"; did you mean {' or '.join(g.key for g in family[:3])}?"
    from difflib import get_close_matches

    names = _names()
    close = get_close_matches(_norm(name), list(names), n=3, cutoff=0.75)
    return did_you_mean(_norm(name), [names[c].key for c in close], cutoff=0) if close else ""


def gpu(name: str) -> Gpu:
    """A GPU by its key, an alias, its name or nvidia-smi's name for it (case, spaces, ``-``/``_``, vendor
    words, a memory size and a form factor do not matter where they name one card): :func:`resolve` less the
    note."""
    return resolve(name)[0]
