"""vLLM's cache arithmetic for hybrid models, release by release.

Every rule is a pure function of a ``ModelSpec`` (via its ``Footprint``) and a ``Release``; each names the
releases it holds for and where vLLM does it. Paths are those of the vLLM wheels.

Why is Nemotron-H-8B's block 1040? ``attention_block_size``: one attention token of one layer is
2·8·128·2 = 4,096 B, one Mamba layer's state is 4,255,744 B, and vLLM grows the block (a multiple of 16)
until one attention page holds at least one Mamba page: 16·cdiv(4,255,744, 16·4,096) = 1040.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil, gcd

from hybridplan.dtypes import parse_dtype, serving_dtype
from hybridplan.errors import NotServed, PlanError
from hybridplan.memory import CacheDtypes, Footprint
from hybridplan.spec import ModelSpec

#: The release bands modelled, by minor version (0.X). Rules below may differ inside a band; they key on
#: the minor itself.
BANDS: tuple[tuple[int, ...], ...] = ((11,), (14, 15, 16, 17), tuple(range(20, 28)), (28, 29, 30, 31), (32, 33))
KNOWN_MINORS = tuple(m for band in BANDS for m in band)
NEWEST_MINOR = KNOWN_MINORS[-1]

#: Architectures whose model class implements Mamba prefix caching in `all` mode
#: (``SupportsMambaPrefixCaching`` in vllm/model_executor/models/*.py, 0.14–0.31).
_ALL_MODE_ARCHS = frozenset({"NemotronHForCausalLM", "JambaForCausalLM", "Zamba2ForCausalLM", "FalconH1ForCausalLM",
                             "GraniteMoeHybridForCausalLM", "BambaForCausalLM", "MambaForCausalLM",
                             "FalconMambaForCausalLM", "Mamba2ForCausalLM"})
_QWEN35_VLM = frozenset({"Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"})
_QWEN35_LM = frozenset({"Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM"})

#: Smallest kernel block of the attention backends vLLM picks on Hopper (FlashAttention, FlashInfer, Triton).
KERNEL_BLOCK = 16
#: MLA forces the block to at least this (vllm/platforms/interface.py, 0.27+).
MLA_MIN_BLOCK = 128
#: FlashInfer's GDN prefill emits checkpoints on a 64-token grid (vllm/v1/attention/backends/gdn_attn.py, 0.33).
GDN_FLASHINFER_ALIGNMENT = 64


def lcm(a: int, b: int) -> int:
    return a * b // gcd(a, b)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Release:
    """One vLLM minor release, 0.``minor``."""

    minor: int

    @property
    def version(self) -> str:
        return f"0.{self.minor}"

    @property
    def band(self) -> str:
        band = next(b for b in BANDS if self.minor in b)
        return f"0.{band[0]}" if len(band) == 1 else f"0.{band[0]}–0.{band[-1]}"

    @property
    def modes(self) -> tuple[str, ...]:
        """Mamba cache modes (vllm/config/cache.py ``MambaCacheMode``): no prefix caching branch in 0.11;
        all/align/none through 0.31; align/none from 0.32."""
        if self.minor == 11:
            return ("none",)
        return ("none", "align") if self.minor >= 32 else ("none", "align", "all")

    def modes_for(self, spec: ModelSpec) -> tuple[str, ...]:
        """The modes modelled for this model: attention-free models are sized without prefix caching."""
        return self.modes if spec.attention else ("none",)

    def supports_all(self, spec: ModelSpec) -> bool:
        return "all" in self.modes and spec.architecture in _ALL_MODE_ARCHS

    def prefix_caching_default(self, spec: ModelSpec) -> bool:
        """Prefix caching on by default? (vllm/config/model.py ``is_prefix_caching_supported``): never in 0.11
        (``MambaModelConfig`` turns it off); off for hybrids until 0.25, on from 0.27 (0.26 taken as 0.25);
        never for attention-free models."""
        if self.minor == 11 or not spec.attention:
            return False
        return self.minor >= 27

    def prefix_mode(self, spec: ModelSpec, spec_tokens: int = 0) -> str:
        """The mode vLLM picks when prefix caching is on (vllm/model_executor/models/config.py
        ``MambaModelConfig``): `all` where supported through 0.27 (0.20: `align` with speculative decoding),
        `align` otherwise and from 0.28."""
        if self.minor == 11:
            return "none"
        if self.minor <= 27 and self.supports_all(spec) and not (self.minor == 20 and spec_tokens):
            return "all"
        return "align"

    def default_mode(self, spec: ModelSpec, spec_tokens: int = 0) -> str:
        """The mode of a start with no flags."""
        return self.prefix_mode(spec, spec_tokens) if self.prefix_caching_default(spec) else "none"

    @property
    def gpu_memory_utilization(self) -> float:
        """``--gpu-memory-utilization`` default (vllm/config/cache.py): 0.9 in 0.11, 0.92 from 0.20."""
        return 0.9 if self.minor == 11 else 0.92

    @property
    def one_line_capacity_log(self) -> bool:
        """0.28 merged "GPU KV cache size" and "Maximum concurrency" into one line."""
        return self.minor >= 28

    def serves(self, spec: ModelSpec) -> bool:
        """Bamba left in 0.28; MiniMax-Text-01 is absent from 0.33."""
        if spec.architecture == "BambaForCausalLM":
            return self.minor < 28
        if spec.family == "MiniMax-Text-01":
            return self.minor < 33
        return True


NEWEST = Release(NEWEST_MINOR)


def known_versions() -> list[str]:
    return [f"0.{m}" for m in KNOWN_MINORS]


def release(version: str | None) -> Release:
    """The rules of ``--vllm-version X.Y`` (a patch level is accepted and ignored)."""
    if version is None:
        return NEWEST
    parts = version.strip().lstrip("v").split(".")
    try:
        major, minor = int(parts[0]), int(parts[1])
    except (ValueError, IndexError):
        major = minor = -1
    if major != 0 or minor not in KNOWN_MINORS:
        raise PlanError(f"unknown vLLM version {version!r} (known: {', '.join(known_versions())})")
    return Release(minor)


def check_served(spec: ModelSpec, rel: Release) -> None:
    if not rel.serves(spec):
        raise NotServed(f"vLLM {rel.version} does not serve {spec.architecture} ({spec.name})")


# --------------------------------------------------------------------------------------------------
# Dtypes
# --------------------------------------------------------------------------------------------------


def model_dtype(spec: ModelSpec, dtype: str | None = None) -> str:
    """``--dtype``, auto by default (vllm/config/model.py ``_resolve_auto_dtype``)."""
    return serving_dtype(spec.model_dtype, dtype)


def cache_dtypes(spec: ModelSpec, rel: Release = NEWEST, *, dtype: str | None = None, conv: str | None = None,
                 ssm: str | None = None, kv: str | None = None) -> CacheDtypes:
    """``--mamba-cache-dtype`` (conv), ``--mamba-ssm-cache-dtype`` (SSM), ``--kv-cache-dtype``; None = auto.

    vllm/model_executor/layers/mamba/mamba_utils.py ``MambaStateDtypeCalculator``: conv = mamba cache dtype
    (auto → model dtype); SSM = the SSM cache dtype if set, else the conv dtype. Model hooks that resolve an
    "auto" SSM dtype (vllm/model_executor/models/config.py):
      - Nemotron-H: 0.14–0.17 float16; 0.20+ the config's ``mamba_ssm_cache_dtype``, default float32.
      - Qwen3.5: 0.20+ the config's ``mamba_ssm_dtype`` (the *ForCausalLM classes only from 0.28).
      - KDA keeps its recurrent state in float32 under auto.
    """
    mdt = model_dtype(spec, dtype)
    conv_dt = parse_dtype(conv, what="--conv-dtype") if conv else mdt
    kv_dt = parse_dtype(kv, what="--kv-dtype") if kv else mdt
    if ssm:
        ssm_dt = parse_dtype(ssm, what="--ssm-dtype")
    elif spec.family == "Nemotron-H" and rel.minor >= 14:
        ssm_dt = "float16" if rel.minor <= 17 else (spec.config_dtype("mamba_ssm_cache_dtype") or "float32")
    elif (spec.config_dtype("mamba_ssm_dtype") and rel.minor >= 20
          and (spec.architecture in _QWEN35_VLM or (spec.architecture in _QWEN35_LM and rel.minor >= 28))):
        ssm_dt = spec.config_dtype("mamba_ssm_dtype")
    else:
        ssm_dt = conv_dt
    return CacheDtypes(conv=conv_dt, ssm=ssm_dt, kv=kv_dt, ssm_by_kind=() if ssm else (("kda", "float32"),))


# --------------------------------------------------------------------------------------------------
# Block size and pages (vllm/platforms/interface.py ``_align_hybrid_block_size``, 0.20+;
# vllm/model_executor/models/config.py ``HybridAttentionMambaModelConfig`` in 0.11)
# --------------------------------------------------------------------------------------------------


def attention_page_per_token(fp: Footprint) -> int:
    """``attn1``: one token of one attention layer, from the model-level heads (sliding layers included)."""
    return max((g.bytes_per_token_per_layer for g in fp.kv), default=0)


def mamba_page(fp: Footprint) -> int:
    """One layer's state: Σ prod(shape)·dtype over its tensors (``MambaSpec.page_size_bytes``)."""
    return max((g.bytes_per_layer for g in fp.state), default=0)


@dataclass(frozen=True)
class Layout:
    """The page layout of one mode: block size, page bytes and what one request pins."""

    mode: str
    block_size: int | None
    mamba_page_bytes: int
    page_bytes: int
    block_grown: bool
    logs: tuple[str, ...]

    @property
    def padding_pct(self) -> float:
        return 100 * (self.page_bytes - self.mamba_page_bytes) / self.mamba_page_bytes if self.mamba_page_bytes else 0.0


def attention_block_size(fp: Footprint, spec: ModelSpec, rel: Release, mode: str, *, block_size: int | None = None,
                         gdn_backend: str = "flashinfer") -> tuple[int, bool]:
    """The attention block size vLLM settles on, and whether it grew past the starting block."""
    attn1, mpage = attention_page_per_token(fp), mamba_page(fp)
    if block_size is not None and block_size < 1:
        raise PlanError(f"--block-size must be positive, got {block_size}")
    start = block_size or KERNEL_BLOCK
    if not fp.state or not fp.kv:
        return start, False
    if rel.minor == 11:  # hard-coded 16-token multiples
        b = KERNEL_BLOCK * cdiv(mpage, KERNEL_BLOCK * attn1)
        return (b, True) if b > start else (start, False)
    a = max(KERNEL_BLOCK, start)
    if rel.minor >= 27 and any(g.kind == "mla" for g in fp.kv):
        a = max(a, MLA_MIN_BLOCK)
    if mode == "all":
        chunk = spec.chunk_size or 2048  # Mamba-1 models have none: vLLM falls back to 2048
        c = lcm(chunk, a)
        b = c * cdiv(cdiv(mpage, attn1), c)
    else:
        if (mode == "align" and rel.minor >= 33 and gdn_backend == "flashinfer"
                and any(g.kind == "gdn" for g in fp.state)):
            a = lcm(a, GDN_FLASHINFER_ALIGNMENT)
        b = a * cdiv(mpage, a * attn1)
        if rel.minor >= 32:  # rounded up to the backends' kernel-block alignment
            b = KERNEL_BLOCK * cdiv(b, KERNEL_BLOCK)
    return (b, True) if b > start else (start, False)


def layout(fp: Footprint, spec: ModelSpec, rel: Release, mode: str, *, block_size: int | None = None,
           gdn_backend: str = "flashinfer") -> Layout:
    if mode not in rel.modes:
        raise PlanError(f"vLLM {rel.version} has no mamba cache mode {mode!r} (it has: {', '.join(rel.modes)})")
    mpage = mamba_page(fp)
    if not fp.kv:  # attention-free: no alignment, pages are the state itself
        return Layout(mode, None, mpage, mpage, False, ())
    b, grown = attention_block_size(fp, spec, rel, mode, block_size=block_size, gdn_backend=gdn_backend)
    page = b * attention_page_per_token(fp)
    logs: list[str] = []
    if fp.state:
        if grown:
            logs.append(f"Setting attention block size to {b} tokens to ensure that attention page size is >= "
                        "mamba page size.")
        if page != mpage:
            logs.append(f"Padding mamba page size by {100 * (page - mpage) / mpage:.2f}% to ensure that mamba page "
                        "size and attention page size are exactly equal.")
    return Layout(mode, b, mpage if fp.state else page, page, grown, tuple(logs))


# --------------------------------------------------------------------------------------------------
# Groups and per-request pages (vllm/v1/core/kv_cache_utils.py, kv_cache_planning.py, kv_cache_interface.py)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CacheGroup:
    """A KV cache group: ``layers`` layers of one kind; every block holds one page of each."""

    kind: str
    layers: int
    window: int | None
    recurrent: bool


def cache_groups(fp: Footprint) -> tuple[int, tuple[CacheGroup, ...]]:
    """Bucket layers by identical spec; group size = the smallest bucket, or the largest when that is below
    1.5× the smallest; each bucket of n layers makes cdiv(n, size) groups (layers assigned strided)."""
    buckets: list[tuple[str, int, int | None, bool]] = [(g.kind, g.count, g.window, False) for g in fp.kv]
    buckets += [(g.kind, g.count, None, True) for g in fp.state]
    sizes = [n for _, n, _, _ in buckets]
    size = min(sizes)
    if max(sizes) < 1.5 * size:
        size = max(sizes)
    groups: list[CacheGroup] = []
    for kind, n, window, rec in buckets:
        k = cdiv(n, size)
        for i in range(k):
            groups.append(CacheGroup(kind, len(range(i, n, k)), window, rec))
    return size, tuple(groups)


def recurrent_pages_per_request(kind: str, rel: Release, mode: str, *, block_size: int | None, max_len: int,
                                spec_tokens: int = 0, gdn_backend: str = "flashinfer") -> int:
    """``MambaSpec.max_memory_usage_bytes`` in pages: none 1 + spec; align 2 + spec (+1 prefill checkpoint
    page for Mamba-2 layers from 0.32, for FlashInfer GDN in 0.33); all cdiv(max_len, block) + spec.
    0.11 pins one page whatever the speculation."""
    if rel.minor == 11:
        return 1
    if mode == "none":
        return 1 + spec_tokens
    if mode == "all":
        return cdiv(max_len, block_size) + spec_tokens
    extra = int((kind == "mamba2" and rel.minor >= 32)
                or (kind == "gdn" and rel.minor >= 33 and gdn_backend == "flashinfer"))
    return 2 + spec_tokens + extra


def attention_pages_per_request(group: CacheGroup, *, block_size: int, max_len: int, in_flight: int) -> int:
    if group.window is None:
        return cdiv(max_len, block_size)
    return cdiv(min(group.window - 1 + in_flight, max_len), block_size) + 1


@dataclass(frozen=True)
class Capacity:
    layout: Layout
    group_size: int
    groups: tuple[CacheGroup, ...]
    pages_per_request: tuple[int, ...]
    kv_budget: int
    max_len: int
    rel: Release

    @property
    def bytes_per_block(self) -> int:
        return self.group_size * self.layout.page_bytes

    @property
    def num_blocks(self) -> int:
        return self.kv_budget // self.bytes_per_block

    @property
    def blocks_per_request(self) -> int:
        return sum(self.pages_per_request)

    @property
    def max_concurrency(self) -> float:
        return self.num_blocks / self.blocks_per_request

    @property
    def kv_tokens(self) -> int:
        """The "GPU KV cache size" figure: int(concurrency · max_len) from 0.23; before that
        num_blocks // groups · block."""
        if self.rel.minor <= 20 and self.layout.block_size:
            return self.num_blocks // len(self.groups) * self.layout.block_size
        return int(self.max_concurrency * self.max_len)

    @property
    def max_num_seqs_limit(self) -> int | None:
        """With Mamba layers and full decode CUDA graphs, max_num_seqs may not exceed num_blocks
        (vllm/config/compilation.py, 0.33)."""
        return self.num_blocks if any(g.recurrent for g in self.groups) else None

    @property
    def logs(self) -> tuple[str, ...]:
        size = f"GPU KV cache size: {self.kv_tokens:,} tokens"
        conc = f"Maximum concurrency for {self.max_len:,} tokens per request: {self.max_concurrency:.2f}x"
        return (f"{size}, {conc}",) if self.rel.one_line_capacity_log else (size, conc)


def capacity(fp: Footprint, spec: ModelSpec, rel: Release, mode: str, *, kv_budget: int, max_len: int,
             block_size: int | None = None, spec_tokens: int = 0, gdn_backend: str = "flashinfer",
             in_flight: int = 8192) -> Capacity:
    if kv_budget <= 0:
        raise PlanError(f"the KV budget must be positive, got {kv_budget} B")
    if max_len <= 0:
        raise PlanError(f"--ctx must be a positive integer, got {max_len}")
    lay = layout(fp, spec, rel, mode, block_size=block_size, gdn_backend=gdn_backend)
    size, groups = cache_groups(fp)
    pages = tuple(
        recurrent_pages_per_request(g.kind, rel, mode, block_size=lay.block_size, max_len=max_len,
                                    spec_tokens=spec_tokens, gdn_backend=gdn_backend) if g.recurrent
        else attention_pages_per_request(g, block_size=lay.block_size, max_len=max_len, in_flight=in_flight)
        for g in groups)
    return Capacity(lay, size, groups, pages, kv_budget, max_len, rel)


def available_kv_memory_log(kv_budget: int) -> str:
    """vllm/v1/worker/gpu_worker.py: ``Available KV cache memory: {round(b / 2**30, 2)} GiB``."""
    return f"Available KV cache memory: {round(kv_budget / 2**30, 2)} GiB"


def requested_memory(total: int, utilization: float) -> int:
    """vllm/v1/worker/utils.py ``request_memory``: ceil(total · gpu_memory_utilization)."""
    return ceil(total * utilization)
