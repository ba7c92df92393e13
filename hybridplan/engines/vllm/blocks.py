"""Block size, page padding and what one request pins, by mode and release.

Block size: vllm/platforms/interface.py ``_align_hybrid_block_size`` (0.20+), before that
vllm/model_executor/models/config.py ``HybridAttentionMambaModelConfig``. Pages per request:
vllm/v1/kv_cache_interface.py (``max_memory_usage_bytes`` of each spec).

Why is Nemotron-H-8B's block 1040? One attention token of one layer is 2·8·128·2 = 4,096 B, one Mamba
layer's state is 4,255,744 B, and vLLM grows the block (a multiple of 16) until one attention page holds at
least one Mamba page: 16·cdiv(4,255,744, 16·4,096) = 1040.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from msgspec import Struct

from hybridplan.engines.common import cdiv, lcm
from hybridplan.engines.vllm.dtypes import footprint
from hybridplan.engines.vllm.releases import Release
from hybridplan.memory import Footprint
from hybridplan.spec import Attention

if TYPE_CHECKING:
    from hybridplan.scenario import Scenario

#: Smallest kernel block of the attention backends vLLM picks on Hopper (FlashAttention, FlashInfer, Triton).
KERNEL_BLOCK = 16
#: The unit MLA blocks grow in from 0.11.1 to 0.19 (``HybridAttentionMambaModelConfig``, vllm/model_executor/models/
#: config.py: 64 for every MLA backend but CUTLASS; FlashMLA's forced block on Hopper agrees). From 0.20.0 the
#: backend says: FlashAttention-MLA, Hopper's first MLA pick (vllm/platforms/cuda.py), has kernel blocks of 16.
MLA_BLOCK = 64
#: MLA forces the block to at least this (vllm/platforms/interface.py, 0.27+).
MLA_MIN_BLOCK = 128
#: FlashInfer's GDN prefill emits checkpoints on a 64-token grid (vllm/v1/attention/backends/gdn_attn.py, 0.33).
GDN_FLASHINFER_ALIGNMENT = 64
#: Mamba-1 models name no chunk size: `all` mode then aligns to this
FALLBACK_CHUNK = 2048

#: The CUDA compute capability of each GPU hybridplan/gpus.py knows (NVIDIA's published list); the ROCm boards
#: have none. The block unit below depends on it; with no GPU given, Hopper's rules (9.0) apply.
COMPUTE_CAPABILITY = {
    **dict.fromkeys(
        ("h100", "h100-pcie", "h100-nvl", "h800", "h200", "h200-nvl", "h20", "gh200", "gh200-144g"), (9, 0)
    ),
    "b200": (10, 0),
    "gb200": (10, 0),
    "b300": (10, 3),
    "gb300": (10, 3),
    **dict.fromkeys(("a100-40g", "a100-40g-pcie", "a100-80g", "a100-80g-pcie"), (8, 0)),
    **dict.fromkeys(("a10g", "a10", "rtx-a6000", "rtx-3060", "rtx-3090"), (8, 6)),
    **dict.fromkeys(("l40s", "l40", "l20", "l4", "rtx-6000-ada", "rtx-4080", "rtx-4090"), (8, 9)),
    **dict.fromkeys(("rtx-pro-6000", "rtx-5070-ti", "rtx-5090"), (12, 0)),
    "gb10": (12, 1),
    "t4": (7, 5),
}
#: FlashInfer-MLA's kernel blocks are 32 and 64 (vllm/v1/attention/backends/mla/flashinfer_mla.py, 0.20.0–0.33.0):
#: the block it prefers, and so the unit, is 32
FLASHINFER_MLA_BLOCK = 32
#: FlashInfer with head size 256 on Blackwell (HybridAttentionMambaModelConfig, 0.11.1–0.17.1)
FLASHINFER_HD256_BLOCK = 32


def compute_capability(sc: Scenario) -> tuple[int, int]:
    """The GPU's compute capability: ``Budget.gpu`` (``--gpu-type``), else the one a start-up log states
    (``VllmSettings.compute_capability``), else Hopper's."""
    return COMPUTE_CAPABILITY.get(sc.budget.gpu or "") or sc.vllm.compute_capability or (9, 0)


def attention_page_per_token(fp: Footprint) -> int:
    """``attn1``: one token of one attention layer, from the model-level heads (sliding layers included)."""
    return max((g.bytes_per_token_per_layer for g in fp.kv), default=0)


def mamba_page(fp: Footprint) -> int:
    """One layer's state: Σ prod(shape)·dtype over its tensors (``MambaSpec.page_size_bytes``)."""
    return max((g.bytes_per_layer for g in fp.state), default=0)


class Layout(Struct, frozen=True):
    """The page layout of one mode: block size, page bytes and the lines vLLM logs about them."""

    mode: str
    block_size: int | None
    mamba_page_bytes: int
    page_bytes: int
    block_grown: bool
    logs: tuple[str, ...]

    @property
    def padding_pct(self) -> float:
        return 100 * (self.page_bytes - self.mamba_page_bytes) / self.mamba_page_bytes if self.mamba_page_bytes else 0.0


def gdn_prefill_backend(sc: Scenario) -> str:
    """The GDN prefill kernel the release runs on the GPU (defaults.py, imported late: it reads this module)."""
    from hybridplan.engines.vllm.defaults import gdn_prefill_backend as resolve

    return resolve(sc)


def _flashinfer_gdn(sc: Scenario, fp: Footprint, mode: str) -> bool:
    """0.33 align with FlashInfer's GDN prefill: a 64-token checkpoint grid and one more page per GDN layer."""
    return (
        mode == "align"
        and sc.vllm.release.at_least("0.33.0")
        and any(g.kind == "gdn" for g in fp.state)
        and gdn_prefill_backend(sc) == "flashinfer"
    )


def backend_kernel_block(cc: tuple[int, int], mla: bool) -> int:
    """From 0.20.0: the smallest kernel block of the backend vllm/platforms/cuda.py ``_get_backend_priorities``
    picks first, or the block it prefers (``get_preferred_block_size``) where 16 is not among them: on 10.x
    FlashInfer (16, 32, 64) and for MLA FlashInfer-MLA (32, 64: 32); elsewhere FlashAttention (multiples of 16),
    for MLA FlashAttention-MLA on 9.x and Triton-MLA (multiples of 16) on 8.x and 12.x.
    validation/vllm_backends.py runs that choice from each wheel."""
    return FLASHINFER_MLA_BLOCK if mla and cc[0] == 10 else KERNEL_BLOCK


def _unit(sc: Scenario, fp: Footprint, mode: str) -> int:
    """The block grows in multiples of this. Before 0.20.0 (``HybridAttentionMambaModelConfig``): 16, 64 for MLA
    from 0.11.1, and 32 for head size 256 on Blackwell (10.x) in 0.11.1–0.17.1. From 0.20.0
    (``Platform._align_hybrid_block_size``): the larger of the backend's smallest kernel block (16 for
    FlashAttention, FlashInfer, FlashAttention-MLA and Triton-MLA; 32 for FlashInfer-MLA on 10.x) and the starting
    block size, which the backend's preferred block sets, so ``--block-size 64`` makes the block a multiple of 64;
    MLA at least 128 from 0.27.0; lcm with FlashInfer GDN's 64 in 0.33 align. The GPU decides through
    ``compute_capability``."""
    rel = sc.vllm.release
    mla = any(g.kind == "mla" for g in fp.kv)
    cc = compute_capability(sc)
    if rel.before("0.20.0"):
        if mla:
            return MLA_BLOCK if rel.at_least("0.11.1") else KERNEL_BLOCK
        head = max((m.head_dim for m in sc.spec.attention if isinstance(m, Attention)), default=0)
        # FlashInfer (the default there) with head size 256: compute capability 10.0 exactly in 0.11.1–0.12.0
        # (is_device_capability(100)), any 10.x in 0.13.0–0.17.1 (is_device_capability_family(100)); gone in 0.18.0
        blackwell = cc == (10, 0) if rel.before("0.13.0") else cc[0] == 10
        if head == 256 and blackwell and rel.at_least("0.11.1") and rel.before("0.18.0"):
            return FLASHINFER_HD256_BLOCK
        return KERNEL_BLOCK
    kernel = backend_kernel_block(cc, mla)
    a = max(kernel, sc.vllm.block_size or kernel)
    if mla and rel.at_least("0.27.0"):
        a = max(a, MLA_MIN_BLOCK)
    if _flashinfer_gdn(sc, fp, mode):
        a = lcm(a, GDN_FLASHINFER_ALIGNMENT)
    return a


def attention_block_size(sc: Scenario, mode: str) -> tuple[int, bool]:
    """The attention block size vLLM settles on, and whether it grew past the starting block."""
    fp, rel = footprint(sc), sc.vllm.release
    attn1, mpage = attention_page_per_token(fp), mamba_page(fp)
    start = sc.vllm.block_size or KERNEL_BLOCK
    if not fp.state or not fp.kv:
        return start, False
    a = _unit(sc, fp, mode)
    if mode == "all":
        c = lcm(sc.spec.chunk_size or FALLBACK_CHUNK, a)
        b = c * cdiv(cdiv(mpage, attn1), c)
    else:
        b = a * cdiv(mpage, a * attn1)
        if rel.at_least("0.32.0"):  # rounded up to the backends' kernel-block alignment
            b = KERNEL_BLOCK * cdiv(b, KERNEL_BLOCK)
    return (b, True) if b > start else (start, False)


def layout(sc: Scenario, mode: str) -> Layout:
    sc.vllm.release.check_mode(mode)
    fp = footprint(sc)
    mpage = mamba_page(fp)
    if not fp.kv:  # attention-free: no alignment, pages are the state itself
        return Layout(mode, None, mpage, mpage, False, ())
    b, grown = attention_block_size(sc, mode)
    page = b * attention_page_per_token(fp)
    logs: list[str] = []
    if fp.state:
        # up to 0.17.1 the block is still unset when the hybrid hook runs (``HybridAttentionMambaModelConfig``):
        # it says so even when the default 16 already holds a state page
        if grown or (sc.vllm.release.before("0.18.0") and sc.vllm.block_size is None):
            logs.append(
                f"Setting attention block size to {b} tokens to ensure that attention page size is >= mamba page size."
            )
        if page != mpage:
            logs.append(
                f"Padding mamba page size by {100 * (page - mpage) / mpage:.2f}% to ensure that mamba page "
                "size and attention page size are exactly equal."
            )
    return Layout(mode, b, mpage if fp.state else page, page, grown, tuple(logs))


def recurrent_pages(sc: Scenario, kind: str, mode: str, block_size: int | None) -> int:
    """Pages one request pins in one recurrent layer (``MambaSpec.max_memory_usage_bytes``). Up to 0.14.1: one,
    or with prefix caching one per block of the context, speculative tokens not counted. From 0.15.0: none
    1 + spec; align 2 + spec (+1 prefill-checkpoint page for Mamba-2 layers from 0.32.0, for FlashInfer GDN in
    0.33.0); all one per block, + spec from 0.22.0."""
    rel, spec_tokens = sc.vllm.release, footprint(sc).spec_tokens
    if rel.before("0.15.0"):
        return cdiv(sc.ctx, block_size) if mode == "all" else 1
    if mode == "none":
        return 1 + spec_tokens
    if mode == "all":
        return cdiv(sc.ctx, block_size) + (spec_tokens if rel.at_least("0.22.0") else 0)
    return 2 + spec_tokens + int(prefill_checkpoint(sc, kind))


def prefill_checkpoint(sc: Scenario, kind: str) -> bool:
    """Does this recurrent layer export the prompt's checkpoint state from inside a prefill chunk in align mode
    (``MambaSpec.num_prefill_checkpoint_blocks`` 1, one page more a request): Mamba-2 from 0.32.0
    (mamba_mixer2.py ``get_kv_cache_spec``, alignment 1), FlashInfer's GDN in 0.33.0 (qwen_gdn_linear_attn.py,
    alignment the prefix-cache grid)."""
    rel = sc.vllm.release
    return (kind == "mamba2" and rel.at_least("0.32.0")) or (
        kind == "gdn" and rel.at_least("0.33.0") and gdn_prefill_backend(sc) == "flashinfer"
    )


def attention_pages(sc: Scenario, window: int | None, block_size: int) -> int:
    """Pages one request pins in one attention layer: the whole context, or for a sliding window what the
    window and one step's tokens in flight (``--max-num-batched-tokens``) can reach, plus one."""
    if window is None:
        return cdiv(sc.ctx, block_size)
    from hybridplan.engines.vllm.defaults import batched_tokens

    return cdiv(min(window - 1 + batched_tokens(sc), sc.ctx), block_size) + 1


def pages_per_request(sc: Scenario, mode: str, lay: Layout) -> tuple[int, int]:
    """Pages one request pins over all layers: (recurrent, attention)."""
    fp = footprint(sc)
    state = sum(g.count * recurrent_pages(sc, g.kind, mode, lay.block_size) for g in fp.state)
    attn = sum(g.count * attention_pages(sc, g.window, lay.block_size) for g in fp.kv)
    return state, attn


class ModePages(Struct, frozen=True):
    """One mode's layout and what one request pins in it."""

    layout: Layout
    state_pages_per_request: int
    kv_pages_per_request: int

    def to_dict(self) -> dict:
        lay = self.layout
        return {
            "block_size": lay.block_size,
            "mamba_page_bytes": lay.mamba_page_bytes,
            "page_bytes": lay.page_bytes,
            "padding_pct": lay.padding_pct,
            "padding_bytes": lay.page_bytes - lay.mamba_page_bytes,
            "state_pages_per_request": self.state_pages_per_request,
            "state_bytes_per_request": self.state_pages_per_request * lay.page_bytes,
            "kv_pages_per_request": self.kv_pages_per_request,
            "kv_bytes_per_request": self.kv_pages_per_request * lay.page_bytes,
            "logs": list(lay.logs),
        }


class Pages(Struct, frozen=True):
    """`size --engine vllm`: pages and padding per mode."""

    rel: Release
    default_mode: str
    prefix_mode: str
    modes: dict[str, ModePages]

    def to_dict(self) -> dict:
        return {
            "version": self.rel.version,
            "default_mode": self.default_mode,
            "mode_with_prefix_caching": self.prefix_mode,
            "modes": {m: v.to_dict() for m, v in self.modes.items()},
        }


def pages(sc: Scenario) -> Pages:
    """`size --engine vllm`: every mode's layout and pages per request."""
    rel = sc.vllm.release
    out = {}
    for mode in rel.modes_for(sc.spec, sc.vllm.mode):
        lay = layout(sc, mode)
        out[mode] = ModePages(lay, *pages_per_request(sc, mode, lay))
    return Pages(rel, rel.default_mode(sc.spec, sc.spec_tokens), rel.prefix_mode(sc.spec, sc.spec_tokens), out)
