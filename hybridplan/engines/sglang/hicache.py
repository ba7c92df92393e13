"""SGLang's hierarchical cache (HiCache) for hybrids: the host tier beside the device pools, sized as each
release allocates it, what a release refuses, and how the host tier fills (``--hicache-write-policy``).
Every rule names its release range and SGLang's file (paths of the wheels, ``sglang/srt/...``).

Which tree serves a hybrid with ``--enable-hierarchical-cache`` (``--enable-hicache`` in 0.5.23, flags.json):

- 0.5.2–0.5.9: the scheduler builds ``HiRadixCache`` for every model (managers/scheduler.py); a hybrid's KV
  pool is a ``HybridLinearKVPool``, neither MHA nor MLA, and ``HiRadixCache.__init__`` raises "HiRadixCache
  only supports MHA and MLA yet" (mem_cache/hiradix_cache.py): the server does not start.
- 0.5.10rc0–0.5.10.post1: ``HiMambaRadixCache`` (mem_cache/hi_mamba_radix_cache.py, sglang#19663), which
  builds the KV host pool over the full-attention layers and a ``MambaPoolHost`` over the Mamba pool.
- 0.5.11–0.5.23: the same two host pools built by mem_cache/hybrid_cache/hybrid_pool_assembler.py
  ``build_hybrid_mamba_stack`` (HiMambaRadixCache to 0.5.17, UnifiedRadixCache from 0.5.18).

Host pool sizes (mem_cache/memory_pool_host.py ``HostKVCache`` / ``MambaPoolHost`` to 0.5.14; from 0.5.15
mem_cache/pool_host/base.py and, from 0.5.18, pool_host/mamba.py):

- ``--hicache-size N`` (GB, 1e9 bytes) > 0: ``int(N·1e9 // bytes_per_token)`` tokens (KV) or states (Mamba);
  otherwise ``int(device_size · --hicache-ratio)``. Then one page more: ``(size // page + 1) · page``, with
  the KV pool's ``--page-size`` and a page of one state for the Mamba pool. Host KV per token is K and V of
  every full-attention layer of the rank, at the KV cache dtype; a host state is one slot's conv and SSM
  states over the Mamba layers (the draft's intermediate buffers are not backed up).
- 0.5.10rc0–0.5.16: both pools get the whole ``--hicache-size`` (sglang#29034: 2N GB per rank).
  0.5.17–0.5.23: ``_split_hicache_size`` divides N between the KV and Mamba pools in proportion to their
  device bytes (``get_kv_size_bytes``: the K and V buffers, T + page rows; the Mamba cache with its
  speculative buffers, ``mem_usage_bytes``, which counts the deduplicated conv windows at their dense view's
  size) (sglang#32915; sglang#39436 proposes a separate Mamba budget).
- A host pool no larger than its device pool: 0.5.10rc0–0.5.14 ``assert``: "The host memory should be larger
  than the device memory with the current protocol" (start-up fails); from 0.5.15 a warning ("L2 cache
  effectiveness is reduced").
- ``--hicache-ratio`` defaults to 2.0 (None resolved to 2.0 in cache mode from 0.5.18,
  arg_groups/hicache_hook.py). From 0.5.21 ``--hicache-host-memory-fraction`` (default 0.8) lowers that
  default ratio until the pools fit the host's free memory (mem_cache/hicache_auto_size.py): hybridplan does
  not know the host, so it keeps 2.0 and says so; an explicit ratio or size turns the auto-sizing off.

The host tier in `replay` (mem_cache/hiradix_cache.py, hi_mamba_radix_cache.py ``_inc_hit_count`` /
``_evict_device_leaf``, 0.5.10rc0–0.5.23): ``write_through`` backs a node up to host when it is first cached
(threshold 1), ``write_through_selective`` when it is hit a second time (threshold 2), ``write_back`` only
when the device evicts it. A device eviction of a backed-up node keeps it on host; a later request whose
prefix is on host (its KV and a Mamba state at its end) loads it back instead of recomputing (a host hit).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from msgspec import Struct

from hybridplan.errors import PlanError, Refused
from hybridplan.spec import ATTENTION_KINDS

if TYPE_CHECKING:
    from hybridplan.engines.sglang.pool import Fit
    from hybridplan.engines.sglang.radix_cache import Rules
    from hybridplan.engines.sglang.releases import Release
    from hybridplan.replay.settings import ReplaySettings
    from hybridplan.scenario import Scenario

#: the first release whose hierarchical cache takes a hybrid (hi_mamba_radix_cache.py, sglang#19663)
HYBRID_SINCE = "0.5.10rc0"
#: what 0.5.2–0.5.9 raise for a hybrid's KV pool (mem_cache/hiradix_cache.py ``HiRadixCache.__init__``)
HYBRID_REFUSAL = "HiRadixCache only supports MHA and MLA yet"
#: the first release that splits --hicache-size between the KV and Mamba host pools
#: (hybrid_pool_assembler.py ``_split_hicache_size`` in ``build_hybrid_mamba_stack``; sglang#29034, #32915)
SPLIT_SINCE = "0.5.17"
#: the first release that only warns of a host pool no larger than its device pool (pool_host/base.py)
WARN_SINCE = "0.5.15"
SMALL_HOST_ASSERT = "The host memory should be larger than the device memory with the current protocol"
#: the first release whose default --hicache-ratio is auto-sized to the host (hicache_auto_size.py)
AUTO_SIZE_SINCE = "0.5.21"
#: "Allocating kv hierarchical KV host pool: N tokens, X GB host memory." from 0.5.17 (pool_host/base.py)
TOKENS_LOG_SINCE = "0.5.17"
#: the Mamba host line names its state slots from 0.5.23 (pool_host/mamba.py)
SLOTS_LOG_SINCE = "0.5.23"
#: the default --hicache-mem-layout: layer_first to 0.5.13, page_first from 0.5.14 (server_args.py,
#: arg_groups/fields/memory.py)
PAGE_FIRST_SINCE = "0.5.14"
#: the first release that packs an MTP draft's KV layers into the KV host pool (base_spec_worker.py)
MTP_PACKED_SINCE = "0.5.18"
#: the first release that refuses --enable-int8-mamba-checkpoint with the hierarchical cache
INT8_REFUSED_SINCE = "0.5.18"
#: --hicache-write-policy: the hits after which a node is backed up to host (None: on device eviction)
WRITE_POLICIES = {"write_through": 1, "write_through_selective": 2, "write_back": None}
DEFAULT_RATIO = 2.0
#: SGLang's --hicache-size unit (host_size * 1e9)
GB = 1_000_000_000


class HiCache(Struct, frozen=True):
    """``--enable-hierarchical-cache`` and its ``--hicache-*`` flags as given (None: the release's default)."""

    ratio: float | None = None
    #: ``--hicache-size`` in GB (1e9 bytes); 0 = by ratio
    size_gb: float = 0
    write_policy: str = "write_through"
    mem_layout: str | None = None
    io_backend: str = "kernel"

    def __post_init__(self) -> None:
        if self.write_policy not in WRITE_POLICIES:
            raise PlanError(
                f"--hicache-write-policy {self.write_policy!r}: SGLang takes "
                f"{', '.join(WRITE_POLICIES)} (server_args.py)"
            )
        if self.ratio is not None and self.ratio <= 0:
            raise PlanError(f"--hicache-ratio must be positive, got {self.ratio:g}")
        if self.size_gb < 0:
            raise PlanError(f"--hicache-size must be 0 or positive, got {self.size_gb:g}")

    @property
    def threshold(self) -> int | None:
        return WRITE_POLICIES[self.write_policy]

    def layout(self, rel: Release) -> str:
        """The host layout the Mamba pool logs: the flag or the release's default, page_first becoming
        page_first_direct with the direct I/O backend (hi_mamba_radix_cache.py, server_args.py
        ``_handle_hicache``: "Page first layout is not supported with direct IO backend")."""
        layout = self.mem_layout or ("page_first" if rel.at_least(PAGE_FIRST_SINCE) else "layer_first")
        if layout == "page_first" and self.io_backend == "direct":
            return "page_first_direct"
        return layout


class HostPool(Struct, frozen=True):
    """One host pool: ``size`` tokens (KV) or states (Mamba) of ``unit`` bytes each, beside a device pool of
    ``device`` of them."""

    name: str
    size: int
    unit: int
    device: int

    @property
    def bytes(self) -> int:
        return self.size * self.unit


class HostPools(Struct, frozen=True):
    kv: HostPool
    mamba: HostPool
    #: the budget in GB each pool was sized from (``--hicache-size``, split or not), None by ratio
    kv_budget_gb: float | None
    mamba_budget_gb: float | None
    ratio: float
    layout: str
    write_policy: str
    rel: Release
    notes: tuple[str, ...] = ()

    @property
    def bytes(self) -> int:
        return self.kv.bytes + self.mamba.bytes

    @property
    def logs(self) -> list[str]:
        """The two start-up lines (pool_host/base.py, pool_host/mamba.py; memory_pool_host.py before)."""
        kv_gb, m_gb = self.kv.bytes / GB, self.mamba.bytes / GB
        if self.rel.at_least(TOKENS_LOG_SINCE):
            kv = f"Allocating kv hierarchical KV host pool: {self.kv.size} tokens, {kv_gb:.2f} GB host memory."
        else:
            kv = f"Allocating {kv_gb:.2f} GB host memory for hierarchical KV cache."
        slots = f"{self.mamba.size} state slots, " if self.rel.at_least(SLOTS_LOG_SINCE) else ""
        return [kv, f"Allocating {m_gb:.2f} GB host memory for hierarchical Mamba cache ({slots}layout={self.layout})."]

    def to_dict(self) -> dict:
        return {
            "kv_host_tokens": self.kv.size,
            "kv_host_bytes": self.kv.bytes,
            "kv_bytes_per_token": self.kv.unit,
            "mamba_host_slots": self.mamba.size,
            "mamba_host_bytes": self.mamba.bytes,
            "mamba_bytes_per_slot": self.mamba.unit,
            "kv_budget_gb": self.kv_budget_gb,
            "mamba_budget_gb": self.mamba_budget_gb,
            "hicache_ratio": self.ratio,
            "layout": self.layout,
            "write_policy": self.write_policy,
            "notes": list(self.notes),
        }


def check(rel: Release, radix_off: bool = False) -> None:
    """SGLang's refusals of HiCache for a hybrid, before any pool is built."""
    if radix_off:
        # server_args.py (0.5.2–0.5.22), arg_groups/hicache_hook.py (0.5.23)
        raise Refused(
            "The arguments enable-hierarchical-cache and disable-radix-cache are mutually exclusive "
            "and cannot be used at the same time. Please use only one of them."
        )
    if rel.before(HYBRID_SINCE):
        raise Refused(
            f"{HYBRID_REFUSAL} (mem_cache/hiradix_cache.py: a hybrid's KV pool is a HybridLinearKVPool; "
            f"HiCache takes hybrids from {HYBRID_SINCE})"
        )


def _size(device: int, unit: int, page: int, ratio: float, budget_gb: float | None) -> int:
    """``HostKVCache.__init__`` / ``MambaPoolHost.__init__``: by budget or by ratio, then one page more."""
    size = int(budget_gb * GB // unit) if budget_gb else int(device * ratio)
    return (size // page + 1) * page


class DevicePools(Struct, frozen=True):
    """The device pools a host tier backs: ``kv_tokens`` tokens of ``kv_unit`` host bytes each on ``page``-token
    pages, ``mamba_slots`` states of ``mamba_unit`` bytes, and each pool's device bytes (``get_kv_size_bytes``)."""

    kv_tokens: int
    kv_unit: int
    kv_device_bytes: int
    page: int
    mamba_slots: int
    mamba_unit: int
    mamba_device_bytes: int


def host_pools(rel: Release, hc: HiCache, dev: DevicePools) -> HostPools:
    """The KV and Mamba host pools a release allocates beside the device pools ``dev``."""
    check(rel)
    kv_tokens, kv_unit, kv_device_bytes, page = dev.kv_tokens, dev.kv_unit, dev.kv_device_bytes, dev.page
    mamba_slots, mamba_unit, mamba_device_bytes = dev.mamba_slots, dev.mamba_unit, dev.mamba_device_bytes
    notes: list[str] = []
    ratio = hc.ratio if hc.ratio is not None else DEFAULT_RATIO
    kv_gb = m_gb = None
    if hc.size_gb > 0:
        if rel.at_least(SPLIT_SINCE):
            total = kv_device_bytes + mamba_device_bytes
            kv_gb = hc.size_gb * kv_device_bytes / total
            m_gb = hc.size_gb * mamba_device_bytes / total
        else:
            kv_gb = m_gb = hc.size_gb
            notes.append(
                f"SGLang {rel.version} gives each host pool the whole --hicache-size {hc.size_gb:g} GB "
                f"(sglang#29034; split between them from {SPLIT_SINCE})"
            )
    elif hc.ratio is None and rel.at_least(AUTO_SIZE_SINCE):
        notes.append(
            f"SGLang {rel.version} lowers the default --hicache-ratio {DEFAULT_RATIO:g} until the host "
            "pools fit 0.8 of the host's free memory (--hicache-host-memory-fraction, "
            "mem_cache/hicache_auto_size.py): the sizes shown assume the host holds them; give "
            "--hicache-ratio or --hicache-size to pin them"
        )
    kv = HostPool("kv", _size(kv_tokens, kv_unit, page, ratio, kv_gb), kv_unit, kv_tokens)
    mamba = HostPool("mamba", _size(mamba_slots, mamba_unit, 1, ratio, m_gb), mamba_unit, mamba_slots)
    for p in (kv, mamba):
        if p.size <= p.device:
            what = "tokens" if p.name == "kv" else "states"
            if rel.before(WARN_SINCE):
                raise Refused(
                    f"{SMALL_HOST_ASSERT} (the {p.name} host pool holds {p.size:,} {what}, the device "
                    f"pool {p.device:,}; mem_cache/memory_pool_host.py, an assert until {WARN_SINCE})"
                )
            notes.append(
                f"the {p.name} host pool ({p.size:,} {what}) is no larger than the device pool "
                f"({p.device:,}): SGLang warns that L2 cache effectiveness is reduced "
                "(pool_host/base.py)"
            )
    return HostPools(kv, mamba, kv_gb, m_gb, ratio, hc.layout(rel), hc.write_policy, rel, tuple(notes))


def draft_layers(rel: Release, sc: Scenario) -> int:
    """The draft KV layers SGLang packs into the KV host pool: from 0.5.18 an EAGLE (NEXTN) draft that is the
    model's own MTP layers has its KV pools packed beside the target's, one layer per draft pool
    (speculative/base_spec_worker.py ``_can_pack_hicache_mtp``, pool_host/mha.py ``layer_num``: "packed MTP KV
    layers: target_layers=…, draft_layers=…"); other drafts get a separate sidecar host pool, not counted."""
    sp = sc.speculative
    if rel.before(MTP_PACKED_SINCE) or sp.method != "eagle" or sp.draft_ref is not None or not sp.layers:
        return 0
    return sum(m.kind in ATTENTION_KINDS for m in sp.layers)


def host_tier(r: Rules, sc: Scenario, rs: ReplaySettings, f: Fit) -> Rules:
    """`replay`'s rules with the host tier behind the device pools; SGLang's refusal raised as its own."""
    from msgspec.structs import replace

    rel, hc = sc.sglang.release, sc.sglang.hicache
    if rs.int8_checkpoint and rel.at_least(INT8_REFUSED_SINCE):
        # server_args.py (0.5.18), arg_groups/mamba_hook.py ``handle_int8_mamba_checkpoint`` (0.5.19-0.5.23)
        raise Refused(
            f"SGLang {rel.version}: --enable-int8-mamba-checkpoint is not supported together with "
            "--enable-hierarchical-cache: the host-offload path is not int8-aware. Disable one of them."
        )
    try:
        check(rel, radix_off=r.strategy == "off")
        host = for_fit(f, hc, sc, kv_tokens=r.kv_tokens)
    except Refused as exc:
        raise Refused(f"SGLang {rel.version} will not start: {exc}") from None
    return replace(
        r,
        label=f"{r.label} + HiCache {hc.write_policy}",
        host_kv_tokens=host.kv.size,
        host_states=host.mamba.size,
        write_policy=hc.write_policy,
        write_threshold=hc.threshold,
        host_notes=host.notes,
    )


def for_fit(f: Fit, hc: HiCache, sc: Scenario, kv_tokens: int | None = None) -> HostPools:
    """The host pools beside a start that ``fit`` sized (pool.py): T tokens of the full-attention layers'
    KV (and any packed MTP layers), and the Mamba pool's states, with the speculative buffers counted in its
    device bytes."""
    fp = f.pool.fp
    spec_bytes = 0
    if f.spec is not None:
        # ``mem_usage_bytes`` sums each tensor's logical shape: from 0.5.14 the deduplicated conv windows are an
        # ``as_strided`` view of (S + 1, D, conv) rows per layer, so the split counts them dense, D·(K − 1)
        # columns, not the D + K − 2 the log's "intermediate_conv_window_cache size" prints (memory_pool.py)
        spec_bytes = f.spec.ssm_bytes + f.spec.rows * f.spec.draft * fp.conv_bytes
    layers = sum(g.count for g in fp.kv)
    unit = fp.kv_bytes_per_token
    extra = draft_layers(f.rel, sc)
    if extra and layers:
        unit += extra * fp.kv_bytes_per_token // layers
    t = kv_tokens if kv_tokens is not None else f.kv_tokens  # --max-total-tokens in `replay`
    return host_pools(
        f.rel,
        hc,
        DevicePools(
            t,
            unit,
            (t + f.page_size) * fp.kv_bytes_per_token,
            f.page_size,
            f.pool.size,
            fp.conv_bytes + fp.ssm_bytes,
            f.pool.bytes + spec_bytes,
        ),
    )


def diagnose(run, rules: dict) -> list[str]:
    """The host tier of a replayed row in words: its pools' warnings, and why it gave no host hit where the
    device evicted (the write policy's rule, hi_mamba_radix_cache.py / unified_radix_cache.py)."""
    h = run.host
    if h is None:
        return []
    out = list(rules.get("hicache_notes", ()))
    if h["host_hit_requests"] or not run.evictions:
        return out
    policy = h["write_policy"]
    if policy == "write_through_selective":
        why = (
            "write_through_selective backs a node up only when a second request inserts it "
            "(write_through_threshold 2), so a prefix evicted after one sighting is not on host; "
            "--hicache-write-policy write_through backs every insert up"
        )
    elif policy == "write_back":
        why = (
            "write_back backs a node up only when the device evicts it, and no later request matched what was backed up"
        )
    else:
        why = "no later request matched a prefix that was on host and not on device"
    out.append(f"the host tier gave no host hit over {run.evictions:,} device evictions: {why}")
    return out
