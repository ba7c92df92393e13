"""vLLM's prefix cache for `replay`: where each request leaves reusable blocks and Mamba states, what a later
request finds, and what the block pool evicts. Each rule names its release range and vLLM's file.

- Hashing (vllm/v1/core/kv_cache_utils.py ``hash_block_tokens``): one chained hash per full block of the
  scheduler block (the block from the alignment loop, hybridplan/engines/vllm/blocks.py ``layout``); from
  0.26.0 ``--prefix-match-unit`` (``CacheConfig.prefix_match_unit``) hashes every that-many tokens, which
  must divide the block.
- The hit (vllm/v1/core/kv_cache_coordinator.py ``HybridKVCacheCoordinator.find_longest_cache_hit``, and
  ``MambaManager.find_longest_cache_hit`` in single_type_kv_cache_manager.py): capped at prompt − 1
  (kv_cache_manager.py ``get_computed_blocks``); full attention takes the longest run of cached blocks from
  the left, EAGLE/MTP drops its last block; the Mamba group searches right to left inside it for the last
  block holding a state, and every group is cut to that length.
- Where states are written (vllm/v1/core/sched/scheduler.py ``_mamba_block_aligned_split``): `align` runs a
  prefill in chunks of ``--max-num-batched-tokens`` cut down to block boundaries, stops at the last block
  boundary before the prompt ends (one block earlier with EAGLE, 0.16.0+), and from 0.24.0 (#37898,
  Marconi-style admission) at the shared prefix the attention blocks found beyond the Mamba hit. A state
  exists at each chunk end on a block boundary, and at every block boundary decoding crosses. `all`
  (0.11.1–0.31.0) keeps one at every block.
- Retention (single_type_kv_cache_manager.py ``MambaManager.reachable_block_mask``): from 0.24.0 the env
  var ``VLLM_PREFIX_CACHE_RETENTION_INTERVAL`` (unset: dense), from 0.29.0 ``--prefix-cache-retention-
  interval`` (vllm/config/cache.py; default 0, and unset with EAGLE/MTP on a hybrid: dense,
  vllm/engine/arg_utils.py). 0 keeps only the states at the replay boundary (prompt − 1, floored to the block)
  and at the shared-prefix junction; N > 0 also one every N tokens.
- The pool (vllm/v1/core/block_pool.py): the blocks ``fit`` computes (hybridplan/engines/vllm/sizing.py
  ``capacity``) or ``--num-gpu-blocks-override``; a cached block is evicted least recently freed first, a
  finished request freeing its blocks tail first, group by group; from 0.24.0 a freed block that caches
  nothing is reused before any cached block is evicted (``free_blocks`` prepends it), before 0.24.0 it waits
  in the queue with the others.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from dataclasses import dataclass, replace
from math import lcm
from typing import TYPE_CHECKING

from hybridplan.engines.common import cdiv, floor_to
from hybridplan.errors import NotServed, PlanError
from hybridplan.records import frozen

if TYPE_CHECKING:
    from hybridplan.replay.settings import ReplaySettings
    from hybridplan.replay.trace import Request
    from hybridplan.scenario import Scenario

#: speculative methods vLLM runs as EAGLE-style drafting (``SpeculativeConfig.use_eagle``)
EAGLE_METHODS = frozenset({"eagle", "eagle3", "mtp", "qwen3_next_mtp", "deepseek_mtp", "dflash"})
#: the kernel block of a model's attention layers alone (the attention-only baseline)
ATTENTION_BLOCK = 16


@frozen
class Rules:
    """The prefix-cache rules of one release and mode, resolved from the scenario."""

    label: str
    version: str
    mode: str
    block: int
    #: the hash unit: --prefix-match-unit, else the block
    unit: int
    chunk: int
    attn_groups: int
    mamba_groups: int
    num_blocks: int
    #: None = dense; 0 = semantic only; N = one per N tokens
    retention: int | None
    retention_source: str
    marconi: bool
    eagle: bool
    #: the last prefill boundary is floor((L − 1)/B)·B (0.32.0+) rather than floor(L/B)·B
    last_minus_one: bool
    #: Mamba pages one running request pins per Mamba group (align/none)
    mamba_pages: int
    shared_prefix_checkpoint: bool
    max_model_len: int
    #: a baseline: the model's attention layers alone
    attention_only: bool = False
    #: the kinds of the KV cache groups in vLLM's order ("a" attention, "m" Mamba)
    group_order: tuple[str, ...] = ()
    #: a freed block that caches nothing goes to the front of the free queue (reused before any cached block
    #: is evicted): 0.24.0+ (block_pool.py ``free_blocks``); before, every freed block joins the tail
    uncached_first: bool = True
    #: retention keeps the shared-prefix junction's state too (``request.shared_prefix_boundary``, #47782):
    #: 0.26.0+; 0.24.0–0.25.x keep the replay boundary alone
    junction_kept: bool = True
    #: align mode, layers that export the prompt's checkpoint from inside a chunk (blocks.py
    #: ``prefill_checkpoint``): the scheduler's ``prefill_checkpoint_alignment``; None where they do not, and
    #: the prefill is split at the checkpoint instead
    checkpoint_align: int | None = None

    @property
    def recurrent(self) -> bool:
        return self.mamba_groups > 0 and not self.attention_only

    def to_dict(self) -> dict:
        return {"version": self.version, "mode": self.mode, "block_size": self.block, "hash_unit": self.unit,
                "max_num_batched_tokens": self.chunk, "attention_groups": self.attn_groups,
                "mamba_groups": self.mamba_groups, "num_gpu_blocks": self.num_blocks,
                "retention_interval": self.retention, "retention_source": self.retention_source,
                "marconi_admission": self.marconi, "eagle": self.eagle,
                "shared_prefix_checkpoint": self.shared_prefix_checkpoint}


def chunk_ending_at_block(shared: int, block: int) -> int:
    """The --max-num-batched-tokens whose prefill chunks end on the last block boundary inside a shared prefix of
    ``shared`` tokens, so that align mode saves a state there (align splits a prefill at block boundaries and
    saves the state at each chunk's end, as ``stops`` below models it); 0 when the prefix is shorter than one
    block."""
    return floor_to(shared, block)


def eagle(sc: Scenario) -> bool:
    """EAGLE-style drafting: a named EAGLE/MTP method, or speculative tokens with no method named."""
    m = sc.speculative.method
    return sc.spec_tokens > 0 and (m is None or m in EAGLE_METHODS)


def retention(sc: Scenario, rs: ReplaySettings) -> tuple[int | None, str]:
    """The retention interval a start runs with, and where it came from."""
    rel = sc.vllm.release
    given = rs.retention_interval
    if rel.before("0.24.0"):
        if given is not None:
            raise PlanError(f"vLLM {rel.version} has no prefix-cache retention for Mamba states: it comes in 0.24.0 "
                            "(VLLM_PREFIX_CACHE_RETENTION_INTERVAL, #45845); try --vllm-version 0.24")
        return None, "dense (no retention before 0.24.0)"
    if given is not None:
        how = "VLLM_PREFIX_CACHE_RETENTION_INTERVAL" if rel.before("0.29.0") else "--prefix-cache-retention-interval"
        return given, f"{how} {given}"
    if rel.before("0.29.0"):
        return None, "dense (VLLM_PREFIX_CACHE_RETENTION_INTERVAL unset, 0.24.0–0.28.0)"
    if eagle(sc) and sc.spec.is_hybrid:
        return None, "dense (unset with EAGLE/MTP on a hybrid, 0.29.0+, vllm/engine/arg_utils.py)"
    return 0, "0 (the default from 0.29.0, #52216)"


def rules(sc: Scenario, rs: ReplaySettings, mode: str, kv_budget: int) -> Rules:
    """The rules ``mode`` runs with on this release, with the pool the budget buys."""
    from hybridplan.engines.vllm.blocks import layout, prefill_checkpoint, recurrent_pages
    from hybridplan.engines.vllm.dtypes import footprint
    from hybridplan.engines.vllm.sizing import capacity

    rel = sc.vllm.release
    rel.check_served(sc.spec)
    lay = layout(sc, mode)
    block = lay.block_size or ATTENTION_BLOCK
    cap = capacity(sc, mode, kv_budget)
    if cap.block_problem is not None:  # 0.17.0–0.26: align refuses a block wider than the chunk (sizing.py)
        raise NotServed(f"vLLM {rel.version} does not start in {mode} mode: {cap.block_problem}")
    attn = sum(1 for g in cap.groups if not g.recurrent)
    mamba = sum(1 for g in cap.groups if g.recurrent)
    if not attn and mode != "none":  # mode none is what it runs: nothing cached, nothing reused
        raise NotServed(f"{sc.spec.name} has no attention layers: vLLM runs it without prefix caching")
    unit = block
    if rs.prefix_match_unit is not None:
        if rel.before("0.26.0"):
            raise PlanError(f"vLLM {rel.version} has no --prefix-match-unit: it comes in 0.26.0 (#46384)")
        if block % rs.prefix_match_unit:
            raise PlanError(f"Invalid prefix_match_unit={rs.prefix_match_unit}; prefix-cacheable KV cache group block "
                            f"sizes must be divisible by prefix_match_unit (block {block}; vllm/v1/core/"
                            "kv_cache_utils.py)")
        unit = rs.prefix_match_unit
    ret, source = retention(sc, rs)
    if ret and ret % block:
        raise PlanError(f"prefix_cache_retention_interval ({ret}) must be a multiple of the scheduler block size "
                        f"({block}) (vllm/v1/core/kv_cache_coordinator.py)")
    spc = rs.shared_prefix_checkpoint
    if spc:
        if rel.before("0.30.0"):
            raise PlanError(f"vLLM {rel.version} has no shared-prefix checkpoint: "
                            "--enable-mamba-fine-grained-prefix-cache comes in 0.30.0 (#53945), renamed "
                            "--enable-mamba-shared-prefix-checkpoint in 0.31.0")
        if mode != "align" or not eagle(sc) or unit >= block:
            raise PlanError("the shared-prefix checkpoint takes effect only with --mamba-cache-mode align, EAGLE/MTP "
                            "speculative decoding and a --prefix-match-unit smaller than the block (vllm/config/"
                            "cache.py)")
    fp = footprint(sc)
    pages = max((recurrent_pages(sc, g.kind, mode, block) for g in fp.state), default=0) if mode != "all" else 0
    align = None
    if mode == "align" and fp.state and all(prefill_checkpoint(sc, g.kind) for g in fp.state):
        # the first Mamba group's alignment (scheduler.py): Mamba-2's 1; FlashInfer GDN's grid, the block, or with
        # --prefix-match-unit lcm(unit, 64) (abstract.py get_mamba_prefill_checkpoint_grid, gdn_attn.py)
        align = 1 if fp.state[0].kind == "mamba2" else (lcm(unit, 64) if unit < block else block)
    override = rs.num_gpu_blocks_override
    return Rules(f"vLLM {rel.version} {mode}", rel.version, mode, block, unit, sc.chunk, attn,
                 mamba if mode != "none" else mamba, override or cap.num_blocks, ret, source,
                 rel.at_least("0.24.0"), eagle(sc), rel.at_least("0.32.0"), pages, spc, sc.ctx,
                 group_order=tuple("m" if g.recurrent else "a" for g in cap.groups),
                 uncached_first=rel.at_least("0.24.0"), junction_kept=rel.at_least("0.26.0"), checkpoint_align=align)


def unbounded(r: Rules, blocks: int) -> Rules:
    """The same rules over a pool of ``blocks`` that never evicts (`prefix`: the geometry alone). Every group of
    a kind takes and caches the same blocks (``Cache._plan``), and only eviction, which runs group by group, sets
    them apart: with none, one group of each kind answers for them all, at a fraction of the work."""
    kinds = tuple(dict.fromkeys(r.group_order or ("a",) * r.attn_groups + ("m",) * r.mamba_groups))
    return replace(r, num_blocks=blocks, attn_groups=min(r.attn_groups, 1), mamba_groups=min(r.mamba_groups, 1),
                   group_order=kinds)


def attention_rules(sc: Scenario, kv_budget: int) -> Rules:
    """The baseline of the same model's attention layers alone: 16-token blocks, every full block cached, the
    same bytes."""
    from hybridplan.engines.vllm.dtypes import footprint

    fp = footprint(sc)
    per_block = ATTENTION_BLOCK * fp.kv_bytes_per_token
    if per_block <= 0:
        raise NotServed(f"{sc.spec.name} has no attention layers")
    return Rules("attention layers alone", sc.vllm.release.version, "attention-only", ATTENTION_BLOCK,
                 ATTENTION_BLOCK, sc.chunk, 1, 0, max(kv_budget // per_block, 1), None, "—", False, False,
                 False, 0, False, sc.ctx, attention_only=True)


# --- the replay ----------------------------------------------------------------------------------------


@dataclass(slots=True)
class Lookup:
    """What one request found: the hit, the attention blocks' reach, and what stood in the way."""

    hit: int
    attention_hit: int
    #: a state the request would have used that was evicted / dropped by retention
    evicted_state: bool = False
    retention_dropped: bool = False
    eagle_cut: bool = False
    #: the Marconi junction this request saves (0: none)
    junction: int = 0
    #: prefix caching off (a hybrid in mode none)
    off: bool = False


class Cache:
    """vLLM's block pool for one release and mode (vllm/v1/core/block_pool.py): every group's blocks come from
    one pool; never-used blocks first, then the free queue from its head, a cached block popped there being
    evicted; a finished request frees each group's blocks tail first, group by group; a hit takes its blocks
    out of the queue. Several blocks may hold one hash (a prefix recomputed past a shorter Mamba hit): a lookup
    finds the first.

    Kept lean, since a replay runs every block of every request through it: an allocation is a number (each
    one new, so a block freed and taken again is a new number), a cached block is an entry (its group, its
    key; a tuple, which unpacks for a fraction of the cost of packing both in one int), each group keeps key →
    its block (or the list of its blocks, oldest first, when several hold the key), and a holder count is kept
    only for blocks held more than once."""

    def __init__(self, r: Rules) -> None:
        self.r = r
        # block 0 is the null block that stands for a skipped position (block_pool.py ``null_block``)
        self.fresh = r.num_blocks - 1
        # the free queue: block → the entry it caches (None: uncached), and its order, oldest first, as a deque the
        # blocks are appended to as they are freed; a hit taking a block out of the queue leaves its place in the
        # deque behind, counted in ``_stale`` and skipped when it comes to the head (a block freed again after it
        # has a later place): an OrderedDict costs twice as much a block
        self.queue: dict[int, tuple[int, int] | None] = {}
        self._order: deque[int] = deque()
        self._stale: dict[int, int] = {}
        self.groups = r.group_order or (("a",) * r.attn_groups + ("m",) * r.mamba_groups)
        # per group: key → the block caching it, or a list of the blocks, oldest first
        self.cached_in: list[dict[int, int | list[int]]] = [{} for _ in self.groups]
        self.refs: dict[int, int] = {}  # block → holders, for the blocks held more than once
        self._next = 0
        self.evictions = 0
        self.evicted_states: set[int] = set()
        self.dropped_states: set[int] = set()
        self.running: dict[int, tuple[list[int], list[int | None], list[tuple[int, int] | None]]] = {}
        self.states = 0
        self.peak_states = 0
        self.peak_blocks = 0
        #: blocks in the free queue that cache nothing (before 0.24.0 only): every other block not fresh is held
        #: or caches an entry, which ``peak_blocks`` counts
        self.uncached_queued = 0
        # with --prefix-match-unit: per group, each hash unit → the attention entry (block or partial tail)
        # holding it
        self.units: list[dict[int, tuple[int, int]]] = [{} for _ in self.groups]
        self._first_mamba = self.groups.index("m") if "m" in self.groups else -1
        self._attn = [g for g, k in enumerate(self.groups) if k == "a"]
        self._is_mamba = [k == "m" for k in self.groups]
        self._mamba = [g for g, k in enumerate(self.groups) if k == "m"]
        self._attn_dicts = [self.cached_in[g] for g in self._attn]
        self._mamba_dicts = [self.cached_in[g] for g in self._mamba]

    # --- keys -----------------------------------------------------------------------------------------

    def keys(self, req: Request, stop: int) -> list[int]:
        """Chained hashes of every full hash unit of the request's tokens up to ``stop`` (``Prompt.unit_keys``:
        computed once per request and unit, whichever policy asks)."""
        return req.with_output().unit_keys(self.r.unit, stop)

    # --- the pool -------------------------------------------------------------------------------------

    def _holds(self, entry: tuple[int, int] | None) -> bool:
        return entry is not None and entry[1] in self.cached_in[entry[0]]

    def cached(self, kind: str, key: int) -> bool:
        if kind == "a" and self.r.unit < self.r.block:  # a hash unit inside a cached block (or partial tail)
            return all(self._holds(self.units[g].get(key)) for g in self._attn)
        return all(key in self.cached_in[g] for g in (self._attn if kind == "a" else self._mamba))

    @property
    def available(self) -> int:
        return self.fresh + len(self.queue)

    def _oldest(self, entry: tuple[int, int]) -> int:
        holders = self.cached_in[entry[0]][entry[1]]
        return holders if type(holders) is int else holders[0]

    def _touch(self, entry: tuple[int, int]) -> int:
        slot = self._oldest(entry)
        if slot in self.queue:
            del self.queue[slot]
            self._stale[slot] = self._stale.get(slot, 0) + 1
        else:
            self.refs[slot] = self.refs.get(slot, 1) + 1
        return slot

    def held_states(self, req: Request) -> list[int]:
        """The positions along ``req``'s tokens at which this cache now holds what a later request resumes from:
        each hash-unit boundary whose key every Mamba group caches (the pool's own entries, as ``lookup`` reads
        them), or on a model with no recurrent group every attention group; none with prefix caching off
        (mode none)."""
        r = self.r
        keys = self.keys(req, req.prompt_len + req.output_len)
        if r.recurrent and r.mode == "none":
            return []
        if r.recurrent:
            groups = self._mamba_dicts
            return [(i + 1) * r.unit for i, k in enumerate(keys) if all(k in d for d in groups)]
        return [(i + 1) * r.unit for i, k in enumerate(keys) if self.cached("a", k)]

    # --- one request ----------------------------------------------------------------------------------

    def lookup(self, req: Request, keys: list[int]) -> Lookup:
        r = self.r
        per_block = r.block // r.unit
        n = min((req.prompt_len - 1) // r.unit, len(keys))  # units a hit may cover
        a = 0
        if r.unit < r.block:
            while a < n and self.cached("a", keys[a]):
                a += 1
        elif len(self._attn) == 1:
            mine = self.cached_in[self._attn[0]]
            while a < n and keys[a] in mine:
                a += 1
        else:
            groups = self._attn_dicts
            while a < n and all(keys[a] in d for d in groups):
                a += 1
        a_tokens = a * r.unit
        full_blocks = a // per_block
        if r.mamba_groups and r.mode == "none" and not r.attention_only:
            return Lookup(0, a_tokens, off=True)
        if not r.recurrent:
            return Lookup(full_blocks * r.block if r.unit == r.block else a_tokens, a_tokens)
        # the attention group's hit is whole blocks unless matched finer; EAGLE drops its last block
        reach = a if r.unit < r.block else full_blocks * per_block
        cut = False
        if r.eagle and reach:
            reach = max(reach - per_block, 0)
            cut = True
        hit = 0
        evicted = dropped = False
        groups = self._mamba_dicts
        for u in range(reach, 0, -1):
            k = keys[u - 1]
            for d in groups:
                if k not in d:
                    break
            else:  # every Mamba group holds the state
                hit = u * r.unit
                break
            evicted = evicted or k in self.evicted_states
            dropped = dropped or k in self.dropped_states
        # the shared prefix the attention blocks reach past the Mamba hit (Marconi-style admission): align stops a
        # chunk there (0.24+), and retention keeps its state in align and all (0.26+)
        junction = 0
        if r.marconi and full_blocks * r.block - hit >= r.block and (
                r.mode == "align" or (r.retention is not None and r.junction_kept)):
            junction = full_blocks * r.block
        return Lookup(hit, a_tokens, evicted and not hit, dropped and not hit, cut, junction)

    def prefill_ends(self, req: Request, start: int, junction: int) -> list[int]:
        """Where each prefill step of the request ends (``_mamba_block_aligned_split`` in align; chunks of
        ``--max-num-batched-tokens`` otherwise)."""
        r = self.r
        L, B = req.prompt_len, r.block
        ends: list[int] = []
        pos = start
        if r.mode != "align" or not r.recurrent:
            while pos < L:
                pos = min(pos + r.chunk, L)
                ends.append(pos)
            return ends
        # the last cacheable boundary: floor(L/B)·B up to 0.31, floor((L − 1)/B)·B from 0.32
        # (kv_cache_interface.py get_mamba_prefill_checkpoint_position); EAGLE backs off one block (0.16+)
        last = floor_to(L - 1 if r.last_minus_one and not r.eagle else L, B)
        if r.eagle:
            last = max(last - B, 0)
        tail = floor_to(L, r.unit) if r.unit < B else 0
        while pos < L:
            end = min(pos + r.chunk, L)
            inside = r.checkpoint_align is not None and self.internal_checkpoint(req, pos, end) is not None
            if end < L:
                aligned = floor_to(end, B)
                if aligned > pos or B <= r.chunk:
                    end = aligned
            # the first of these inside the step ends it: the next block boundary (a step from inside a block),
            # the last cacheable boundary, a partial tail, the junction (and its unit, shared-prefix checkpoint);
            # none but the junction where the step's last chunk takes the checkpoint inside it (0.32.0+)
            cut = end
            if pos % B and pos < floor_to(pos, B) + B < cut and not inside:
                cut = floor_to(pos, B) + B
            if pos < last < cut and not inside:
                cut = last
            if last < tail < L and pos < tail < cut and not inside:
                cut = tail
            if pos < junction < end:
                at = pos + floor_to(junction - pos, B)
                if pos < at < cut:
                    cut = at
                if r.shared_prefix_checkpoint:
                    at = pos + floor_to(junction - pos, r.unit)
                    if pos < at < cut:
                        cut = at
            end = cut
            if end <= pos:  # a block wider than the chunk: vLLM refuses this start (sizing.py block_problem)
                break
            ends.append(end)
            pos = end
        return ends

    def checkpoint_position(self, req: Request) -> int:
        """The prompt's checkpoint (kv_cache_interface.py ``get_mamba_prefill_checkpoint_position``): the last
        hash-unit boundary before its last token; EAGLE's block drop backs off one unit more."""
        r, L = self.r, req.prompt_len
        if r.eagle:
            return max(floor_to(L, r.unit) - r.unit, 0)
        return floor_to(L - 1, r.unit)

    def internal_checkpoint(self, req: Request, start: int, end: int) -> int | None:
        """Where a step from ``start`` to ``end`` (the chunk before any split) takes the prompt's checkpoint inside
        it, as the scheduler decides (``_mamba_block_aligned_split``'s ``use_internal_checkpoint``, with
        kv_cache_interface.py ``is_mamba_prefill_checkpoint_valid``): the last chunk, starting on a hash unit,
        the checkpoint strictly inside it at least a unit in and on the alignment from its start, in a block
        after the one it starts from. None where it does not (the step is split there instead)."""
        r = self.r
        align = r.checkpoint_align
        if align is None or end < req.prompt_len or start % r.unit:
            return None
        cp = self.checkpoint_position(req)
        if (cdiv(end, r.block) - 2 > (start - 1) // r.block and start + r.unit <= cp and start < cp < end
                and (cp - start) % align == 0):
            return cp
        return None

    def state_positions(self, req: Request, start: int, junction: int) -> list[int]:
        """Token positions (multiples of the block, or of the unit for a partial tail) where this request
        leaves a Mamba state, from ``start``: prefill step ends on a boundary, then decoding's block
        boundaries (not under EAGLE, whose steps move the state)."""
        return self._state_positions(req, start, self.prefill_ends(req, start, junction))

    def _state_positions(self, req: Request, start: int, ends: list[int]) -> list[int]:
        r = self.r
        L, B = req.prompt_len, r.block
        kv_end = L + max(req.output_len - 1, 0)
        if r.mode == "all":
            return list(range(floor_to(start, B) + B, kv_end + 1, B))
        if r.mode != "align":
            return []
        tail = floor_to(L, r.unit) if r.unit < B else 0
        out = [e for e in ends if e % B == 0 or (r.unit < B and e == tail)]
        if r.checkpoint_align is not None:
            for a, e in zip([start, *ends], ends):  # a checkpoint a step takes inside it
                cp = self.internal_checkpoint(req, a, e)
                if cp is not None and cp not in out:
                    out.append(cp)
        if not r.eagle:
            out.extend(range(floor_to(L, B) + B, kv_end + 1, B))
        return out

    def reachable(self, req: Request, junction: int) -> set[int] | None:
        """The positions retention always keeps a state at (``reachable_block_mask``): the replay boundary and the
        junction; None when retention keeps every state."""
        r = self.r
        if r.retention is None:
            return None
        align = r.unit if r.unit < r.block else r.block
        out = {floor_to(req.prompt_len - 1, align)}
        if junction and r.junction_kept:
            out.add(floor_to(junction, align))
        return out

    def kept(self, pos: int, reachable: set[int] | None) -> bool:
        """Whether retention keeps the state at ``pos`` (``reachable`` from ``reachable``): every state when
        dense, else those reachable and (an interval N) one every N tokens."""
        r = self.r
        if reachable is None or pos in reachable:
            return True
        if r.retention:
            per = r.retention // r.block
            if per <= 1:
                return True
            return pos % r.block == 0 and (pos // r.block) % per == 0
        return False

    def blocks_needed(self, req: Request) -> int:
        """Blocks one request pins when nothing is reused: its attention blocks in every attention group, and
        its Mamba pages (`all`: one per block)."""
        r = self.r
        tokens = req.prompt_len + req.output_len
        n = r.attn_groups * cdiv(tokens, r.block)
        if r.recurrent:
            n += r.mamba_groups * (cdiv(tokens, r.block) if r.mode == "all" else r.mamba_pages)
        return n

    def _plan(self, req: Request, look: Lookup, keys: list[int]):
        """The request's steps (the computed tokens at each: the hit, its prefill step ends, then the decode
        steps that end in a new block or cross a boundary) and its blocks, the same in every group of a kind:
        attention, the key each block caches (None: none), block b held from the start when b is below the hit,
        else needed once b·B + 1 tokens are computed; Mamba, per block its key, index (the block of the
        request's tokens it stands for) and the computed tokens it is needed at (None: a hit, held from the
        start). Registers the hash units of the attention blocks (--prefix-match-unit) and the states
        retention drops."""
        r = self.r
        B, unit = r.block, r.unit
        L = req.prompt_len
        kv_end = L + max(req.output_len - 1, 0)
        nblocks = cdiv(L + req.output_len, B)
        hit = look.hit
        ends = self.prefill_ends(req, hit, look.junction)
        states: dict[int, int] = {}
        if r.recurrent:
            reachable = self.reachable(req, look.junction)
            for pos in self._state_positions(req, hit, ends):
                if not 0 < pos // unit <= len(keys):
                    continue
                k = keys[pos // unit - 1]
                if self.kept(pos, reachable):
                    states[pos] = k
                else:
                    self.dropped_states.add(k)
        # decoding, one token a step: only the steps that end in a new block or cross a boundary matter (the
        # first, each that starts a block, and the last)
        steps = [hit, *ends]
        if kv_end > L:
            first = floor_to(L, B) + 1
            decode = list(range(first if first > L else first + B, kv_end + 1, B))
            if not decode or decode[0] != L + 1:
                decode.insert(0, L + 1)
            if decode[-1] != kv_end:
                decode.append(kv_end)
            steps += decode
        if unit == B:
            full = max(min(kv_end // B, len(keys)), 0)
            attn: list[int | None] = keys[:full] + [None] * (nblocks - full)
        else:
            per_block = B // unit
            tail = floor_to(L, unit)
            attn = []
            for b in range(nblocks):
                if (b + 1) * B <= kv_end and (b + 1) * per_block <= len(keys):
                    end = (b + 1) * B
                else:
                    end = tail if b * B < tail < (b + 1) * B else 0
                attn.append(keys[end // unit - 1] if end else None)
                if end:
                    for g in self._attn:
                        entry = (g, attn[-1])
                        mine = self.units[g]
                        for u in range(b * per_block, end // unit):
                            if not self._holds(mine.get(keys[u])):
                                mine[keys[u]] = entry
        mamba: list[int | None] = []
        index: list[int] = []
        need: list[int | None] = []
        if r.recurrent:
            if hit:
                mamba.append(keys[hit // unit - 1])
                index.append((hit - 1) // B)
                need.append(None)
            if r.mode == "all":
                for b in range(hit // B, nblocks):
                    mamba.append(states.get((b + 1) * B))
                    index.append(b)
                    need.append(b * B + 1)
            else:
                # align: each step's state lands in the block holding its last token (a new block when the step
                # ends in one not yet allocated); that block is cached when the state sits on its boundary and
                # retention keeps it; the speculative (and prefill-checkpoint) blocks are held to the end
                # (single_type_kv_cache_manager.py MambaManager.allocate_new_blocks)
                in_block = {(pos - 1) // B: k for pos, k in states.items()}  # the last kept state in each block
                seen = {(hit - 1) // B} if hit else set()
                inside = r.checkpoint_align is not None
                for a, e in zip(steps, steps[1:]):
                    cp = self.internal_checkpoint(req, a, e) if inside and a < L else None
                    if cp is not None:  # its own block, before the step's last (MambaManager checkpoint_idx)
                        i = cdiv(e, B) - 2
                        if i not in seen:
                            seen.add(i)
                            mamba.append(states.get(cp))
                            index.append(i)
                            need.append(e)
                    i = (e - 1) // B
                    if i not in seen:
                        seen.add(i)
                        mamba.append(in_block.get(i))
                        index.append(i)
                        need.append(e)
                # the speculative blocks are held to the end; the prefill-checkpoint page is a block only where a
                # step takes the checkpoint inside it (MambaManager ``_needs_internal_checkpoint``): the one above
                late = max(r.mamba_pages - 2 - (r.checkpoint_align is not None), 0)
                mamba += [None] * late
                index += [1 << 62] * late
                need += [1] * late
        return steps, attn, (mamba, index, need)

    def admit(self, req: Request, look: Lookup, keys: list[int]) -> bool:
        """Run the request step by step as the scheduler allocates for it (allocate_slots: first the Mamba
        blocks behind the computed tokens are freed, tail first, then each group's new blocks); False when a
        step finds too few blocks. Which block is taken or freed when follows from the plan alone, so the steps
        are laid out first as one sequence of takes and frees, then run against the pool."""
        steps, attn, (mamba, index, need) = self._plan(req, look, keys)
        B = self.r.block
        hit_blocks = look.hit // B
        nblocks = len(attn)
        # every group's blocks in one list: group g's block i at offset[g] + i
        offset = []
        n_ents = 0
        for kind in self.groups:
            offset.append(n_ents)
            n_ents += nblocks if kind == "a" else len(mamba)
        ents: list[tuple[int, int] | None] = [(g, k) if k is not None else None for g, kind in enumerate(self.groups)
                                              for k in (attn if kind == "a" else mamba)]
        hits: list[int] = []  # the blocks a hit holds from the start: attention's below it, Mamba's first
        if look.hit:
            m_hit = bool(need) and need[0] is None
            for g, kind in enumerate(self.groups):
                if kind == "a":
                    hits += range(offset[g], offset[g] + hit_blocks)
                elif m_hit:
                    hits.append(offset[g])
        touched = {self._oldest(ents[f]) for f in hits} if hits else None
        # the new Mamba blocks in the order they are taken, and every Mamba block in the order it is passed
        m_order = sorted((i for i, n in enumerate(need) if n is not None), key=need.__getitem__)
        m_needs = [need[i] for i in m_order]
        m_behind = sorted(range(len(index)), key=index.__getitem__)
        m_index = [index[i] for i in m_behind]
        avail = self.fresh + len(self.queue) - (len(touched & self.queue.keys()) if touched else 0)
        # the dry run can only fail when the free blocks are fewer than the new ones (frees only add)
        if avail < len(self._attn) * (nblocks - hit_blocks) + len(self._mamba) * len(m_needs) and not self._fits(
                steps, hit_blocks, nblocks, m_needs, m_index, avail):
            return False
        slots: list[int | None] = [None] * len(ents)
        for f in hits:
            slots[f] = self._touch(ents[f])
        events: list[int] = []  # f: take block f; ~f: free it
        held = [n is None for n in need]  # per Mamba block: held (a hit, or taken at an earlier step)
        freed = [False] * len(need)
        a_next, m_next, m_gone = hit_blocks, 0, 0
        n_index = len(m_index)
        m_offsets, a_offsets, kinds = [], [], []
        for g, kind in enumerate(self.groups):
            (a_offsets if kind == "a" else m_offsets).append(offset[g])
            kinds.append((offset[g], kind == "a"))
        last_step = len(steps) - 1
        for k in range(max(last_step, 1)):
            c = steps[k]
            end = steps[k + 1] if k < last_step else c
            if m_gone < n_index and m_index[m_gone] < (c - 1) // B:
                limit = (c - 1) // B
                batch = []  # remove_skipped_blocks, tail first
                while m_gone < n_index and m_index[m_gone] < limit:
                    i = m_behind[m_gone]
                    m_gone += 1
                    if held[i] and not freed[i]:
                        batch.append(i)
                        freed[i] = True
                if batch:
                    batch.reverse()
                    events += [~(o + i) for o in m_offsets for i in batch]
            a_stop = (end - 1) // B + 1
            if a_stop > nblocks:
                a_stop = nblocks
            if a_stop < a_next:
                a_stop = a_next
            m_stop = bisect_right(m_needs, end, m_next)
            if m_stop > m_next:
                taken = m_order[m_next:m_stop]
                for i in taken:
                    held[i] = True
                for o, is_attn in kinds:
                    if is_attn:
                        events += range(o + a_next, o + a_stop)
                    elif len(taken) == 1:
                        events.append(o + taken[0])
                    else:
                        events += [o + i for i in taken]
                m_next = m_stop
            elif a_stop > a_next:
                for o in a_offsets:
                    events += range(o + a_next, o + a_stop)
            a_next = a_stop
        for g, kind in enumerate(self.groups):  # what no step reached (a request of one token)
            if kind == "a":
                events += range(offset[g] + a_next, offset[g] + nblocks)
            else:
                events += [offset[g] + i for i in m_order[m_next:]]
        self._run(events, slots, ents)
        # at the end: group by group, each tail first (KVCacheManager.free), what the steps did not free
        last: list[int] = []
        kept = [i for i in range(len(need) - 1, -1, -1) if not freed[i]]
        for g, kind in enumerate(self.groups):
            if kind == "a":
                last += range(~(offset[g] + nblocks - 1), ~offset[g] + 1)
            else:
                last += map((-1 - offset[g]).__sub__, kept)  # ~(offset + i)
        self.running[req.index] = (last, slots, ents)
        # the blocks held or caching an entry: all but the fresh ones and the uncached ones in the queue
        self.peak_blocks = max(self.peak_blocks, self.r.num_blocks - 1 - self.fresh - self.uncached_queued)
        return True

    def _run(self, events: list[int], slots: list[int | None], ents: list[tuple[int, int] | None]) -> None:
        """Take (``f``) or free (``~f``) the request's blocks in order: a block is taken fresh, else from the head
        of the free queue, evicting what it caches, then caches its own entry; a freed block held by no one else
        joins the queue's tail if it caches an entry (a block held is never evicted, so it still caches the
        entry it was taken or hit for), else (0.24.0+) goes back among the fresh ones."""
        queue, cached_in, refs, stale = self.queue, self.cached_in, self.refs, self._stale
        pop, popleft, append = queue.pop, self._order.popleft, self._order.append
        first = self._first_mamba
        uncached_first = self.r.uncached_first
        slot, fresh, uncached = self._next, self.fresh, self.uncached_queued
        states, peak, evictions = self.states, self.peak_states, self.evictions
        mamba = self._is_mamba
        evicted_state = self.evicted_states.add
        for f in events:
            if f < 0:
                f = ~f
                held = slots[f]
                if refs and held in refs:  # still held by another request
                    n = refs[held]
                    if n > 2:
                        refs[held] = n - 1
                    else:
                        del refs[held]
                    continue
                entry = ents[f]
                if entry is not None:
                    queue[held] = entry
                    append(held)
                elif uncached_first:
                    fresh += 1
                else:
                    queue[held] = None
                    append(held)
                    uncached += 1
                continue
            if fresh:
                fresh -= 1
            else:  # the head of the free queue, evicting what it caches
                old = popleft()
                while stale and old in stale:  # a place left by a hit
                    if stale[old] > 1:
                        stale[old] -= 1
                    else:
                        del stale[old]
                    old = popleft()
                entry = pop(old)
                if entry is None:
                    uncached -= 1
                else:
                    g, key = entry
                    mine = cached_in[g]
                    holders = mine.pop(key)
                    if type(holders) is int:
                        if g == first:
                            states -= 1
                    else:  # others still cache the key (the dicts are only looked up: where it sits is no matter)
                        holders.remove(old)
                        mine[key] = holders if len(holders) > 1 else holders[0]
                    evictions += 1
                    if mamba[g]:
                        evicted_state(key)
            entry = ents[f]
            if entry is not None:
                g, key = entry
                holders = cached_in[g].setdefault(key, slot)
                if holders is slot:  # the key new to the group (a block number is never seen twice)
                    if g == first:
                        states += 1
                        if states > peak:
                            peak = states
                elif type(holders) is int:
                    cached_in[g][key] = [holders, slot]
                else:
                    holders.append(slot)
            slots[f] = slot
            slot += 1
        self._next, self.fresh, self.uncached_queued = slot, fresh, uncached
        self.states, self.peak_states, self.evictions = states, peak, evictions

    def _fits(self, steps: list[int], hit_blocks: int, nblocks: int, m_needs: list[int], m_index: list[int],
              avail: int) -> bool:
        """The dry run: at no step does the request take more blocks than are free (the attention groups' new
        blocks b ≥ ``hit_blocks`` are needed at b·B + 1 tokens; the Mamba groups' at ``m_needs``, and each
        Mamba block passed, whether held yet or not, counts as freed once the computed tokens are past it)."""
        B = self.r.block
        na, nm = len(self._attn), len(self._mamba)
        new = na * (nblocks - hit_blocks) + nm * len(m_needs)
        freed = 0
        for k in range(max(len(steps) - 1, 1)):
            c = steps[k]
            end = steps[k + 1] if k + 1 < len(steps) else c
            freed = nm * bisect_left(m_index, (c - 1) // B)
            a_taken = min(max((end - 1) // B + 1 - hit_blocks, 0), nblocks - hit_blocks) if end >= 1 else 0
            if avail + freed - na * a_taken - nm * bisect_right(m_needs, end) < 0:
                return False
        return avail + freed - new >= 0

    def finish(self, req: Request) -> None:
        last, slots, ents = self.running.pop(req.index)
        self._run(last, slots, ents)
