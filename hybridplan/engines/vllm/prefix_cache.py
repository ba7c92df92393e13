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

from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hybridplan.engines.common import cdiv, floor_to
from hybridplan.errors import NotServed, PlanError

if TYPE_CHECKING:
    from hybridplan.replay.settings import ReplaySettings
    from hybridplan.replay.trace import Request
    from hybridplan.scenario import Scenario

#: speculative methods vLLM runs as EAGLE-style drafting (``SpeculativeConfig.use_eagle``)
EAGLE_METHODS = frozenset({"eagle", "eagle3", "mtp", "qwen3_next_mtp", "deepseek_mtp", "dflash"})
#: the kernel block of a model's attention layers alone (the attention-only baseline)
ATTENTION_BLOCK = 16


@dataclass(frozen=True)
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
    from hybridplan.engines.vllm.blocks import layout, recurrent_pages
    from hybridplan.engines.vllm.dtypes import footprint
    from hybridplan.engines.vllm.sizing import capacity

    rel = sc.vllm.release
    rel.check_served(sc.spec)
    lay = layout(sc, mode)
    block = lay.block_size or ATTENTION_BLOCK
    cap = capacity(sc, mode, kv_budget)
    attn = sum(1 for g in cap.groups if not g.recurrent)
    mamba = sum(1 for g in cap.groups if g.recurrent)
    if not attn:
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
    override = rs.num_gpu_blocks_override
    return Rules(f"vLLM {rel.version} {mode}", rel.version, mode, block, unit, sc.chunk, attn,
                 mamba if mode != "none" else mamba, override or cap.num_blocks, ret, source,
                 rel.at_least("0.24.0"), eagle(sc), rel.at_least("0.32.0"), pages, spc, sc.ctx,
                 group_order=tuple("m" if g.recurrent else "a" for g in cap.groups),
                 uncached_first=rel.at_least("0.24.0"), junction_kept=rel.at_least("0.26.0"))


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


@dataclass
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
    finds the first."""

    def __init__(self, r: Rules) -> None:
        self.r = r
        # block 0 is the null block that stands for a skipped position (block_pool.py ``null_block``)
        self.fresh = r.num_blocks - 1
        self.queue: OrderedDict[int, tuple | None] = OrderedDict()  # slot → the entry it holds (None: uncached)
        self.slots: dict[tuple, OrderedDict[int, None]] = {}  # entry → its slots, oldest first
        self.refs: dict[int, int] = {}  # slot → holders
        self._next = 0
        self.evictions = 0
        self.evicted_states: set[int] = set()
        self.dropped_states: set[int] = set()
        self.running: dict[int, tuple[list[list[tuple[int, tuple | None]]], list[tuple[int, tuple | None]]]] = {}
        self.states = 0
        self.peak_states = 0
        self.peak_blocks = 0
        self.held_blocks = 0
        self.queued_cached = 0
        # with --prefix-match-unit: each hash unit → the attention entry (block or partial tail) holding it
        self.units: dict[tuple[int, int], tuple] = {}
        self.groups = r.group_order or (("a",) * r.attn_groups + ("m",) * r.mamba_groups)

    # --- keys -----------------------------------------------------------------------------------------

    def keys(self, req: Request, stop: int) -> list[int]:
        """Chained hashes of every full hash unit of the request's tokens up to ``stop``."""
        out, h = [], 0
        for chunk in req.with_output().chunks(self.r.unit, stop):
            h = hash((h, chunk))
            out.append(h)
        return out

    # --- the pool -------------------------------------------------------------------------------------

    def cached(self, kind: str, key: int) -> bool:
        if kind == "a" and self.r.unit < self.r.block:  # a hash unit inside a cached block (or partial tail)
            return all(self.units.get((g, key)) in self.slots for g, k in enumerate(self.groups) if k == kind)
        return all((kind, g, key) in self.slots for g, k in enumerate(self.groups) if k == kind)

    @property
    def available(self) -> int:
        return self.fresh + len(self.queue)

    def _alloc(self) -> int:
        """One block: a never-used one, else the head of the free queue (evicting what it caches)."""
        slot = self._next
        self._next += 1
        if self.fresh:
            self.fresh -= 1
        else:
            old, entry = self.queue.popitem(last=False)
            if entry is not None:
                self.queued_cached -= 1
                self._uncache(old, entry)
                self.evictions += 1
                if entry[0] == "m":
                    self.evicted_states.add(entry[2])
        self.refs[slot] = 1
        self.held_blocks += 1
        return slot

    def _uncache(self, slot: int, entry: tuple) -> None:
        holders = self.slots[entry]
        del holders[slot]
        if not holders:
            del self.slots[entry]
            if entry[0] == "m" and entry[1] == self._first_mamba:
                self.states -= 1

    @property
    def _first_mamba(self) -> int:
        return self.groups.index("m") if "m" in self.groups else -1

    def _cache(self, slot: int, entry: tuple) -> None:
        new = entry not in self.slots
        self.slots.setdefault(entry, OrderedDict())[slot] = None
        if new and entry[0] == "m" and entry[1] == self._first_mamba:
            self.states += 1
            self.peak_states = max(self.peak_states, self.states)

    def _touch(self, entry: tuple) -> int:
        slot = next(iter(self.slots[entry]))
        if slot in self.queue:
            del self.queue[slot]
            self.queued_cached -= 1
            self.held_blocks += 1
        self.refs[slot] = self.refs.get(slot, 0) + 1
        return slot

    def _free(self, slot: int, entry: tuple | None) -> None:
        n = self.refs.get(slot, 1) - 1
        if n > 0:
            self.refs[slot] = n
            return
        self.refs.pop(slot, None)
        self.held_blocks -= 1
        cached = entry is not None and slot in self.slots.get(entry, ())
        if not cached and self.r.uncached_first:
            self.fresh += 1
            return
        self.queue[slot] = entry if cached else None
        self.queued_cached += cached

    # --- one request ----------------------------------------------------------------------------------

    def lookup(self, req: Request, keys: list[int]) -> Lookup:
        r = self.r
        per_block = r.block // r.unit
        limit = (req.prompt_len - 1) // r.unit  # units a hit may cover
        a = 0
        while a < min(limit, len(keys)) and self.cached("a", keys[a]):
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
        for u in range(reach, 0, -1):
            k = keys[u - 1]
            if self.cached("m", k):
                hit = u * r.unit
                break
            evicted |= k in self.evicted_states
            dropped |= k in self.dropped_states
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
            if end < L:
                aligned = floor_to(end, B)
                if aligned > pos or B <= r.chunk:
                    end = aligned
            stops = [floor_to(pos, B) + B if pos % B else 0, last,
                     tail if last < tail < L else 0,
                     pos + floor_to(junction - pos, B) if pos < junction < end else 0]
            if r.shared_prefix_checkpoint and pos < junction < end:
                stops.append(pos + floor_to(junction - pos, r.unit))
            end = min((s for s in stops if pos < s < end), default=end)
            if end <= pos:  # a block wider than the chunk: vLLM refuses this start (sizing.py block_problem)
                break
            ends.append(end)
            pos = end
        return ends

    def state_positions(self, req: Request, start: int, junction: int) -> list[int]:
        """Token positions (multiples of the block, or of the unit for a partial tail) where this request
        leaves a Mamba state, from ``start``: prefill step ends on a boundary, then decoding's block
        boundaries (not under EAGLE, whose steps move the state)."""
        r = self.r
        L, B = req.prompt_len, r.block
        kv_end = L + max(req.output_len - 1, 0)
        if r.mode == "all":
            return list(range(floor_to(start, B) + B, kv_end + 1, B))
        if r.mode != "align":
            return []
        tail = floor_to(L, r.unit) if r.unit < B else 0
        out = [e for e in self.prefill_ends(req, start, junction) if e % B == 0 or (r.unit < B and e == tail)]
        if not r.eagle:
            out.extend(range(floor_to(L, B) + B, kv_end + 1, B))
        return out

    def kept(self, pos: int, req: Request, junction: int) -> bool:
        """Whether retention keeps the state at ``pos`` (``reachable_block_mask``)."""
        r = self.r
        if r.retention is None:
            return True
        align = r.unit if r.unit < r.block else r.block
        reachable = {floor_to(req.prompt_len - 1, align)}
        if junction and r.junction_kept:
            reachable.add(floor_to(junction, align))
        if pos in reachable:
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
        """Per group, the request's blocks: (block index, needed once this many tokens are computed, "hit" or
        "new", entry or None). A hit block is held from the start; private pages (align) sit at the end."""
        r = self.r
        B = r.block
        per_block = B // r.unit
        tokens = req.prompt_len + req.output_len
        kv_end = req.prompt_len + max(req.output_len - 1, 0)
        nblocks = cdiv(tokens, B)
        hit_blocks = look.hit // B
        states: dict[int, int] = {}
        if r.recurrent:
            for pos in self.state_positions(req, look.hit, look.junction):
                if not 0 < pos // r.unit <= len(keys):
                    continue
                k = keys[pos // r.unit - 1]
                if self.kept(pos, req, look.junction):
                    states[pos] = k
                else:
                    self.dropped_states.add(k)
        late = 1 << 62
        steps = [look.hit, *self.prefill_ends(req, look.hit, look.junction)]
        # decoding, one token a step: only the steps that end in a new block or cross a boundary matter
        L = req.prompt_len
        steps += sorted({c for c in (L + 1, kv_end) if L < c <= kv_end}
                        | {c for c in range(floor_to(L, B) + 1, kv_end + 1, B) if c > L})
        ends = steps[1:]
        # the state each block ends up holding (the last kept position inside it)
        in_block = {(pos - 1) // B: k for pos, k in sorted(states.items())}
        plan: list[list[tuple[int, int, str, tuple | None]]] = []
        for g, kind in enumerate(self.groups):
            blocks: list[tuple[int, int, str, tuple | None]] = []
            if kind == "a":
                tail = floor_to(req.prompt_len, r.unit) if r.unit < B else 0
                for b in range(nblocks):
                    full = (b + 1) * B <= kv_end and (b + 1) * per_block <= len(keys)
                    end = (b + 1) * B if full else (tail if b * B < tail < (b + 1) * B else 0)
                    entry = ("a", g, keys[end // r.unit - 1]) if end else None
                    if entry is not None and r.unit < B:
                        for u in range(b * per_block, end // r.unit):
                            if self.units.get((g, keys[u])) not in self.slots:
                                self.units[(g, keys[u])] = entry
                    blocks.append((b, b * B + 1, "hit" if b < hit_blocks else "new", entry))
            else:
                if look.hit:
                    blocks.append(((look.hit - 1) // B, 0, "hit", ("m", g, keys[look.hit // r.unit - 1])))
                if r.mode == "all":
                    for b in range(hit_blocks, nblocks):
                        pos = (b + 1) * B
                        blocks.append((b, b * B + 1, "new", ("m", g, states[pos]) if pos in states else None))
                else:
                    # align: each step's state lands in the block holding its last token (a new block when the
                    # step ends in one not yet allocated); that block is cached when the state sits on its
                    # boundary and retention keeps it; the speculative (and prefill-checkpoint) blocks are held
                    # to the end (single_type_kv_cache_manager.py MambaManager.allocate_new_blocks)
                    seen = {(look.hit - 1) // B} if look.hit else set()
                    for e in ends:
                        i = (e - 1) // B
                        if i not in seen:
                            seen.add(i)
                            k = in_block.get(i)
                            blocks.append((i, e, "new", ("m", g, k) if k is not None else None))
                    blocks += [(late, 1, "new", None)] * max(r.mamba_pages - 2, 0)
            plan.append(blocks)
        return plan, steps

    def admit(self, req: Request, look: Lookup, keys: list[int]) -> bool:
        """Run the request step by step as the scheduler allocates for it (allocate_slots: first the Mamba
        blocks behind the computed tokens are freed, tail first, then each group's new blocks); False when a
        step finds too few blocks."""
        plan, steps = self._plan(req, look, keys)
        touched = {next(iter(self.slots[e])) for blocks in plan for _, _, how, e in blocks if how == "hit"}
        if not self._fits(plan, steps, self.available - len(touched & self.queue.keys())):
            return False
        B = self.r.block
        held: list[list] = [[None] * len(blocks) for blocks in plan]
        done: list[list[bool]] = [[False] * len(blocks) for blocks in plan]
        todo, behind = [], []
        for g, blocks in enumerate(plan):
            for i, (_, _, how, entry) in enumerate(blocks):
                if how == "hit":
                    held[g][i] = (self._touch(entry), entry)
            todo.append(sorted((need, i) for i, (_, need, how, _) in enumerate(blocks) if how == "new"))
            behind.append(sorted((idx, i) for i, (idx, _, _, _) in enumerate(blocks)) if self.groups[g] == "m" else [])
        nxt = [0] * len(plan)  # the next block to allocate, per group
        gone = [0] * len(plan)  # the next block to free, per Mamba group
        for k in range(max(len(steps) - 1, 1)):
            c = steps[k]
            end = steps[k + 1] if k + 1 < len(steps) else c
            limit = (c - 1) // B
            for g, order in enumerate(behind):  # remove_skipped_blocks, tail first
                batch = []
                while gone[g] < len(order) and order[gone[g]][0] < limit:
                    i = order[gone[g]][1]
                    gone[g] += 1
                    if held[g][i] is not None and not done[g][i]:
                        batch.append(i)
                for i in reversed(batch):
                    self._free(*held[g][i])
                    done[g][i] = True
            for g, order in enumerate(todo):
                while nxt[g] < len(order) and order[nxt[g]][0] <= end:
                    i = order[nxt[g]][1]
                    nxt[g] += 1
                    entry = plan[g][i][3]
                    slot = self._alloc()
                    if entry is not None:
                        self._cache(slot, entry)
                    held[g][i] = (slot, entry)
        for g, order in enumerate(todo):  # what no step reached (a request of one token)
            for _, i in order[nxt[g]:]:
                entry = plan[g][i][3]
                slot = self._alloc()
                if entry is not None:
                    self._cache(slot, entry)
                held[g][i] = (slot, entry)
        self.running[req.index] = (held, done)
        self.peak_blocks = max(self.peak_blocks, self.held_blocks + self.queued_cached)
        return True

    def _fits(self, plan, steps, avail: int) -> bool:
        """The dry run: at no step does the request take more blocks than are free."""
        B = self.r.block
        needs = [sorted(need for _, need, how, _ in blocks if how == "new") for blocks in plan]
        idxs = [sorted(idx for idx, _, _, _ in blocks) if self.groups[g] == "m" else [] for g, blocks in
                enumerate(plan)]
        nxt = [0] * len(plan)
        gone = [0] * len(plan)
        for k in range(max(len(steps) - 1, 1)):
            c = steps[k]
            end = steps[k + 1] if k + 1 < len(steps) else c
            limit = (c - 1) // B
            for g, order in enumerate(idxs):
                while gone[g] < len(order) and order[gone[g]] < limit:
                    avail += 1
                    gone[g] += 1
            for g, order in enumerate(needs):
                while nxt[g] < len(order) and order[nxt[g]] <= end:
                    nxt[g] += 1
                    avail -= 1
            if avail < 0:
                return False
        return avail - sum(len(o) - n for o, n in zip(needs, nxt)) >= 0

    def finish(self, req: Request) -> None:
        held, done = self.running.pop(req.index)
        for g, mine in enumerate(held):  # group by group, each tail first (KVCacheManager.free)
            for i in range(len(mine) - 1, -1, -1):
                if not done[g][i]:
                    slot, entry = mine[i]
                    self._free(slot, entry)
