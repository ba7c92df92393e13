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
  Marconi-style admission) at the shared prefix the attention blocks found beyond the Mamba hit; a step is
  floored to the block where it ends before the prompt's end from 0.27.0, before the last cacheable boundary
  only up to 0.26.0 (``floor_until_prompt_end``). A state
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
  in the queue with the others. The pool itself is hybridplan/engines/vllm/block_pool.py (in C where built):
  the rules here plan each request's blocks and the pool runs the plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import lcm
from typing import TYPE_CHECKING

from msgspec import Struct
from msgspec.structs import replace

from hybridplan.engines.common import cdiv, floor_to
from hybridplan.engines.vllm.defaults import batched_tokens
from hybridplan.errors import NotServed, PlanError

if TYPE_CHECKING:
    from hybridplan.engines.vllm.block_pool import Pool
    from hybridplan.replay.settings import ReplaySettings
    from hybridplan.replay.trace import Request
    from hybridplan.scenario import Scenario

#: speculative methods vLLM runs as EAGLE-style drafting (``SpeculativeConfig.use_eagle``)
EAGLE_METHODS = frozenset({"eagle", "eagle3", "mtp", "qwen3_next_mtp", "deepseek_mtp", "dflash"})
#: the kernel block of a model's attention layers alone (the attention-only baseline)
ATTENTION_BLOCK = 16


class Rules(Struct, frozen=True):
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
    #: the shared-prefix junction stops every prefill step of the request (``request.shared_prefix_boundary``,
    #: read by ``_mamba_block_aligned_split`` each step): 0.26.0+; 0.24.0–0.25.x stop only the admitting step at
    #: it (vllm/v1/core/sched/scheduler.py: ``num_uncached_common_prefix_tokens`` is passed for a waiting
    #: request alone)
    junction_every_step: bool = True
    #: align floors a prefill step to the block wherever it ends before the prompt's end: 0.27.0+
    #: (vllm/v1/core/sched/scheduler.py ``_mamba_block_aligned_split``, ``end < prefill_end``); 0.15.0–0.26.0
    #: floor only a step that ends before the last cacheable boundary (``end < last_cache_position``), so a
    #: step from that boundary on takes what the budget leaves it
    floor_until_prompt_end: bool = True

    @property
    def recurrent(self) -> bool:
        return self.mamba_groups > 0 and not self.attention_only

    def to_dict(self) -> dict:
        return {
            "version": self.version,
            "mode": self.mode,
            "block_size": self.block,
            "hash_unit": self.unit,
            "max_num_batched_tokens": self.chunk,
            "attention_groups": self.attn_groups,
            "mamba_groups": self.mamba_groups,
            "num_gpu_blocks": self.num_blocks,
            "retention_interval": self.retention,
            "retention_source": self.retention_source,
            "marconi_admission": self.marconi,
            "eagle": self.eagle,
            "shared_prefix_checkpoint": self.shared_prefix_checkpoint,
        }


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
            raise PlanError(
                f"vLLM {rel.version} has no prefix-cache retention for Mamba states: it comes in 0.24.0 "
                "(VLLM_PREFIX_CACHE_RETENTION_INTERVAL, #45845); try --vllm-version 0.24"
            )
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
    from hybridplan.engines.vllm.context import refusal
    from hybridplan.engines.vllm.dtypes import footprint
    from hybridplan.engines.vllm.sizing import capacity

    rel = sc.vllm.release
    rel.check_served(sc.spec)
    long_context = refusal(sc)  # --max-model-len past the config's length: vLLM does not start (as `fit` says)
    if long_context is not None:
        raise NotServed(f'vLLM {rel.version} will not start: "{long_context}"')
    lay = layout(sc, mode)
    block = lay.block_size or ATTENTION_BLOCK
    cap = capacity(sc, mode, kv_budget)
    if cap.block_problem is not None:  # 0.17.0–0.26: align refuses a block wider than the chunk (sizing.py)
        raise NotServed(f"vLLM {rel.version} does not start in {mode} mode: {cap.block_problem}")
    if rs.num_gpu_blocks_override is None and (cap.memory_problem is not None or cap.num_blocks < 1):
        # one request of max_model_len needs more blocks than the budget holds (check_enough_kv_cache_memory)
        why = cap.memory_problem or "No available memory for the cache blocks."
        raise NotServed(f'vLLM {rel.version} will not start in {mode} mode: "{why}"')
    attn = sum(1 for g in cap.groups if not g.recurrent)
    mamba = sum(1 for g in cap.groups if g.recurrent)
    if not attn and mode != "none":  # mode none is what it runs: nothing cached, nothing reused
        raise NotServed(f"{sc.spec.name} has no attention layers: vLLM runs it without prefix caching")
    unit = block
    if rs.prefix_match_unit is not None:
        if rel.before("0.26.0"):
            raise PlanError(f"vLLM {rel.version} has no --prefix-match-unit: it comes in 0.26.0 (#46384)")
        if block % rs.prefix_match_unit:
            raise PlanError(
                f"Invalid prefix_match_unit={rs.prefix_match_unit}; prefix-cacheable KV cache group block "
                f"sizes must be divisible by prefix_match_unit (block {block}; vllm/v1/core/"
                "kv_cache_utils.py)"
            )
        unit = rs.prefix_match_unit
    ret, source = retention(sc, rs)
    if ret and ret % block:
        raise PlanError(
            f"prefix_cache_retention_interval ({ret}) must be a multiple of the scheduler block size "
            f"({block}) (vllm/v1/core/kv_cache_coordinator.py)"
        )
    spc = rs.shared_prefix_checkpoint
    if spc:
        if rel.before("0.30.0"):
            raise PlanError(
                f"vLLM {rel.version} has no shared-prefix checkpoint: "
                "--enable-mamba-fine-grained-prefix-cache comes in 0.30.0 (#53945), renamed "
                "--enable-mamba-shared-prefix-checkpoint in 0.31.0"
            )
        if mode != "align" or not eagle(sc) or unit >= block:
            raise PlanError(
                "the shared-prefix checkpoint takes effect only with --mamba-cache-mode align, EAGLE/MTP "
                "speculative decoding and a --prefix-match-unit smaller than the block (vllm/config/"
                "cache.py)"
            )
    fp = footprint(sc)
    pages = max((recurrent_pages(sc, g.kind, mode, block) for g in fp.state), default=0) if mode != "all" else 0
    align = None
    if mode == "align" and fp.state and all(prefill_checkpoint(sc, g.kind) for g in fp.state):
        # the first Mamba group's alignment (scheduler.py): Mamba-2's 1; FlashInfer GDN's grid, the block, or with
        # --prefix-match-unit lcm(unit, 64) (abstract.py get_mamba_prefill_checkpoint_grid, gdn_attn.py)
        align = 1 if fp.state[0].kind == "mamba2" else (lcm(unit, 64) if unit < block else block)
    override = rs.num_gpu_blocks_override
    return Rules(
        f"vLLM {rel.version} {mode}",
        rel.version,
        mode,
        block,
        unit,
        batched_tokens(sc),
        attn,
        mamba if mode != "none" else mamba,
        override or cap.num_blocks,
        ret,
        source,
        rel.at_least("0.24.0"),
        eagle(sc),
        rel.at_least("0.32.0"),
        pages,
        spc,
        sc.ctx,
        group_order=tuple("m" if g.recurrent else "a" for g in cap.groups),
        uncached_first=rel.at_least("0.24.0"),
        junction_kept=rel.at_least("0.26.0"),
        checkpoint_align=align,
        junction_every_step=rel.at_least("0.26.0"),
        floor_until_prompt_end=rel.at_least("0.27.0"),
    )


def unbounded(r: Rules, blocks: int) -> Rules:
    """The same rules over a pool of ``blocks`` that never evicts (`prefix`: the geometry alone). Every group of
    a kind takes and caches the same blocks (``Cache._plan``), and only eviction, which runs group by group, sets
    them apart: with none, one group of each kind answers for them all, at a fraction of the work."""
    kinds = tuple(dict.fromkeys(r.group_order or ("a",) * r.attn_groups + ("m",) * r.mamba_groups))
    return replace(
        r, num_blocks=blocks, attn_groups=min(r.attn_groups, 1), mamba_groups=min(r.mamba_groups, 1), group_order=kinds
    )


# --- counterfactuals: the same rules with one cause of a gap lifted (`replay`'s attribution) ---------------

#: a max_model_len no prompt reaches
ANY_LENGTH = 1 << 62


def any_length(r: Rules) -> Rules:
    """The same rules taking a prompt of any length (none refused at max_model_len)."""
    return replace(r, max_model_len=ANY_LENGTH)


def caching_on(r: Rules) -> Rules:
    """A hybrid in mode none (prefix caching off) with caching on, its states where ``every_checkpoint`` keeps
    them; any other rules unchanged."""
    return every_checkpoint(r) if r.recurrent and r.mode == "none" else r


def every_checkpoint(r: Rules) -> Rules:
    """A state at every point the grid allows, prompt and decode, kept: mode `all`'s placement (one per block)
    on every release, no retention interval, no EAGLE/MTP block drop, so none of align's choices (chunk ends,
    admission, the shared-prefix checkpoint) decides where states are. With ``--prefix-match-unit`` the grid is
    the unit (align's partial tail and junction states sit on it): the block shrinks to the unit. The attention
    layers alone, or a model without Mamba layers, keep what they have."""
    if not r.recurrent:
        return r
    return replace(
        r,
        mode="all",
        block=r.unit,
        retention=None,
        retention_source="dense (counterfactual)",
        eagle=False,
        shared_prefix_checkpoint=False,
        checkpoint_align=None,
        mamba_pages=0,
    )


def state_grid(r: Rules) -> int:
    """The tokens a resumed state's position is a multiple of under ``every_checkpoint``: the block (the unit
    with --prefix-match-unit); 1 for the attention layers alone, which resume at any token of a matched
    block."""
    return every_checkpoint(r).block if r.recurrent else 1


def attention_rules(sc: Scenario, kv_budget: int) -> Rules:
    """The baseline of the same model's attention layers alone: 16-token blocks, every full block cached, the
    same bytes."""
    from hybridplan.engines.vllm.dtypes import footprint

    fp = footprint(sc)
    per_block = ATTENTION_BLOCK * fp.kv_bytes_per_token
    if per_block <= 0:
        raise NotServed(f"{sc.spec.name} has no attention layers")
    return Rules(
        "attention layers alone",
        sc.vllm.release.version,
        "attention-only",
        ATTENTION_BLOCK,
        ATTENTION_BLOCK,
        batched_tokens(sc),
        1,
        0,
        max(kv_budget // per_block, 1),
        None,
        "—",
        False,
        False,
        False,
        0,
        False,
        sc.ctx,
        attention_only=True,
    )


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
    """vLLM's prefix cache for one release and mode: its rules (``r``) over a block pool
    (hybridplan/engines/vllm/block_pool.py). The rules find what a request resumes from (``lookup``) and plan
    its blocks (``_plan``: what each caches and when it is needed); the pool runs the plan."""

    def __init__(self, r: Rules) -> None:
        from hybridplan.engines.vllm.block_pool import BlockPool

        self.r = r
        self.groups = r.group_order or (("a",) * r.attn_groups + ("m",) * r.mamba_groups)
        self.pool: Pool = BlockPool(r.num_blocks, "".join(self.groups), r.uncached_first, r.block)
        # with --prefix-match-unit: per group, each hash unit → the attention entry (block or partial tail)
        # holding it
        self.units: list[dict[int, tuple[int, int]]] = [{} for _ in self.groups]
        self._attn = [g for g, k in enumerate(self.groups) if k == "a"]
        self._mamba = [g for g, k in enumerate(self.groups) if k == "m"]
        # read for every request: resolved once (``Rules.recurrent`` is a property)
        self._recurrent = r.recurrent
        self._align = r.recurrent and r.mode == "align"
        #: the Mamba states the last plan kept (position → key), for the scheduler model's visibility
        self.planned_states: dict[int, int] = {}

    @property
    def evictions(self) -> int:
        return self.pool.evictions

    @property
    def peak_states(self) -> int:
        return self.pool.peak_states

    @property
    def peak_blocks(self) -> int:
        return self.pool.peak_blocks

    # --- keys -----------------------------------------------------------------------------------------

    def keys(self, req: Request, stop: int) -> list[int]:
        """Chained hashes of every full hash unit of the request's tokens up to ``stop`` (``Prompt.unit_keys``:
        computed once per request and unit, whichever policy asks)."""
        return req.with_output().unit_keys(self.r.unit, stop)

    # --- what the pool caches ----------------------------------------------------------------------

    def _holds(self, entry: tuple[int, int] | None) -> bool:
        return entry is not None and self.pool.has(entry[0], entry[1])

    def cached(self, kind: str, key: int) -> bool:
        if kind == "a" and self.r.unit < self.r.block:  # a hash unit inside a cached block (or partial tail)
            return all(self._holds(self.units[g].get(key)) for g in self._attn)
        has = self.pool.has
        return all(has(g, key) for g in (self._attn if kind == "a" else self._mamba))

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
            return [(i + 1) * r.unit for i, k in enumerate(keys) if self.cached("m", k)]
        return [(i + 1) * r.unit for i, k in enumerate(keys) if self.cached("a", k)]

    # --- one request ----------------------------------------------------------------------------------

    def lookup(self, req: Request, keys: list[int], hidden: tuple[set[int], set[int]] | None = None) -> Lookup:
        """What ``req`` resumes from (``get_computed_blocks``). ``hidden``: the attention and the Mamba keys the
        pool holds for requests still running but that vLLM has not cached yet (allocate_slots caches a block
        once the computed plus the scheduled tokens reach it: the scheduler model, scheduler.py)."""
        r = self.r
        unit, B = r.unit, r.block
        per_block = B // unit
        n = (req.prompt_len - 1) // unit  # units a hit may cover
        if n > len(keys):
            n = len(keys)
        a = 0
        if unit < B:
            while a < n and self.cached("a", keys[a]):
                a += 1
        else:
            a = self.pool.prefix(self._attn, keys, n)
        if hidden is not None and hidden[0]:
            seen = hidden[0]
            for i in range(a):
                if keys[i] in seen:
                    a = i
                    break
        a_tokens = a * unit
        full_blocks = a // per_block
        if not self._recurrent:
            return Lookup(full_blocks * B if unit == B else a_tokens, a_tokens)
        if r.mode == "none":  # a hybrid in mode none: prefix caching off
            return Lookup(0, a_tokens, off=True)
        # the attention group's hit is whole blocks unless matched finer; EAGLE drops its last block
        reach = a if unit < B else full_blocks * per_block
        cut = False
        if r.eagle and reach:
            reach = max(reach - per_block, 0)
            cut = True
        # the last unit whose state every Mamba group holds, and what stood in the way past it
        u = self.pool.last_held(self._mamba, keys, reach)
        if hidden is not None and hidden[1]:
            while u and keys[u - 1] in hidden[1]:
                u = self.pool.last_held(self._mamba, keys, u - 1)
        hit = u * unit
        evicted = dropped = False
        if u < reach and not hit:
            evicted, dropped = self.pool.lost(keys, u, reach)
        # the shared prefix the attention blocks reach past the Mamba hit (Marconi-style admission): align stops a
        # chunk there (0.24+), and retention keeps its state in align and all (0.26+)
        junction = 0
        if (
            r.marconi
            and full_blocks * B - hit >= B
            and (r.mode == "align" or (r.retention is not None and r.junction_kept))
        ):
            junction = full_blocks * B
        return Lookup(hit, a_tokens, evicted, dropped, cut, junction)

    def prefill_ends(self, req: Request, start: int, junction: int) -> list[int]:
        """Where each prefill step of the request ends when it runs alone, each step given the whole
        ``--max-num-batched-tokens`` (``_mamba_block_aligned_split`` in align; chunks of the budget otherwise):
        ``step_end`` step after step. Before 0.26.0 the junction stops only the first step (``junction_every_step``).
        """
        r = self.r
        L, chunk = req.prompt_len, r.chunk
        if start >= L:
            return []
        if not self._align:  # chunks of --max-num-batched-tokens, the last one what is left
            return [*range(start + chunk, L, chunk), L]
        ends: list[int] = []
        pos = start
        while pos < L:
            end = self.step_end(req, pos, chunk, junction if (r.junction_every_step or pos == start) else 0)
            if end <= pos:  # a block wider than the chunk: vLLM refuses this start (sizing.py block_problem)
                break
            ends.append(end)
            pos = end
        return ends

    def step_end(self, req: Request, pos: int, budget: int, junction: int) -> int:
        """Where one prefill step from ``pos`` ends when the scheduler has ``budget`` tokens left for it
        (vllm/v1/core/sched/scheduler.py ``schedule``: ``num_new_tokens = min(remaining, token_budget)``, then
        ``_mamba_block_aligned_split`` in align mode); ``pos`` or less when the split leaves no token (the
        budget reaches no block boundary: vLLM skips a running request then, and stops admitting a waiting
        one). ``junction``: the shared-prefix junction this step stops at (0: none; before 0.26.0 vLLM passes
        it only to the admitting step, ``num_uncached_common_prefix_tokens``; from 0.26.0 it is the request's
        ``shared_prefix_boundary``, every step)."""
        r = self.r
        L, B, chunk = req.prompt_len, r.block, r.chunk
        if budget <= 0 or pos >= L:
            return pos
        if not self._align:
            return min(pos + budget, L)
        # the last cacheable boundary: floor(L/B)·B up to 0.31, floor((L − 1)/B)·B from 0.32
        # (kv_cache_interface.py get_mamba_prefill_checkpoint_position); EAGLE backs off one block (0.16+)
        last = floor_to(L - 1 if r.last_minus_one and not r.eagle else L, B)
        if r.eagle:
            last = max(last - B, 0)
        tail = floor_to(L, r.unit) if r.unit < B else 0
        if not last < tail < L:
            tail = 0
        checkpoints = r.checkpoint_align is not None
        end = pos + budget
        if end >= L:
            end = L
            inside = checkpoints and self.internal_checkpoint(req, pos, end) is not None
        else:  # inside: only a step to the prompt's end takes the checkpoint inside it
            inside = False
            # floored to the block before the prompt's end (0.27.0+), before the last cacheable boundary only
            # before 0.27.0 (``floor_until_prompt_end``)
            if r.floor_until_prompt_end or end < last:
                aligned = floor_to(end, B)
                # 0.28.0+: a block wider than --max-num-batched-tokens advances sub-block (the chunk limit, not
                # the budget left, decides)
                if aligned > pos or B <= chunk:
                    end = aligned
        # the first of these inside the step ends it: the next block boundary (a step from inside a block),
        # the last cacheable boundary, a partial tail, the junction (and its unit, shared-prefix checkpoint);
        # none but the junction where the step's last chunk takes the checkpoint inside it (0.32.0+)
        cut = end
        if not inside:
            if pos % B and floor_to(pos, B) + B < cut:
                cut = floor_to(pos, B) + B
            if pos < last < cut:
                cut = last
            if pos < tail < cut:
                cut = tail
        if pos < junction < end:
            at = pos + floor_to(junction - pos, B)
            if pos < at < cut:
                cut = at
            if r.shared_prefix_checkpoint:
                at = pos + floor_to(junction - pos, r.unit)
                if pos < at < cut:
                    cut = at
        return cut

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
        if (
            cdiv(end, r.block) - 2 > (start - 1) // r.block
            and start + r.unit <= cp
            and start < cp < end
            and (cp - start) % align == 0
        ):
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
        kv_end = L + req.output_len - 1 if req.output_len else L
        if r.mode == "all":
            return list(range(floor_to(start, B) + B, kv_end + 1, B))
        if r.mode != "align":
            return []
        if r.unit < B:  # and a partial tail
            tail = floor_to(L, r.unit)
            out = [e for e in ends if not e % B or e == tail]
        else:
            out = [e for e in ends if not e % B]
        if r.checkpoint_align is not None:
            for a, e in zip([start, *ends], ends):  # a checkpoint a step takes inside it
                cp = self.internal_checkpoint(req, a, e)
                if cp is not None and cp not in out:
                    out.append(cp)
        if not r.eagle:
            out += range(floor_to(L, B) + B, kv_end + 1, B)
        return out

    def retained(self, req: Request, junction: int, positions: list[int]) -> tuple[list[int], list[int]]:
        """``positions`` split into the states retention keeps and those it drops (``reachable_block_mask``):
        every state when dense (no interval, or one under two blocks); else the replay boundary's (prompt − 1,
        floored to the hash unit or the block) and the junction's, and with an interval N one every N tokens."""
        r = self.r
        B = r.block
        if r.retention is None or 0 < r.retention < 2 * B:
            return positions, []
        per = r.retention // B
        align = r.unit if r.unit < B else B
        always = {floor_to(req.prompt_len - 1, align)}
        if junction and r.junction_kept:
            always.add(floor_to(junction, align))
        kept: list[int] = []
        dropped: list[int] = []
        for pos in positions:
            if pos in always or (per and pos % B == 0 and pos // B % per == 0):
                kept.append(pos)
            else:
                dropped.append(pos)
        return kept, dropped

    def blocks_needed(self, req: Request) -> int:
        """Blocks one request pins when nothing is reused: its attention blocks in every attention group, and
        its Mamba pages (`all`: one per block)."""
        r = self.r
        tokens = req.prompt_len + req.output_len
        n = r.attn_groups * cdiv(tokens, r.block)
        if r.recurrent:
            n += r.mamba_groups * (cdiv(tokens, r.block) if r.mode == "all" else r.mamba_pages)
        return n

    def _plan(self, req: Request, look: Lookup, keys: list[int], ends: list[int] | None = None):
        """The request's steps (the computed tokens at each: the hit, its prefill step ends, then the decode
        steps that end in a new block or cross a boundary) and its blocks, the same in every group of a kind:
        attention, the key each block caches (None: none), block b held from the start when b is below the hit,
        else needed once b·B + 1 tokens are computed; Mamba, per block its key, index (the block of the
        request's tokens it stands for) and the computed tokens it is needed at (None: a hit, held from the
        start). Registers the hash units of the attention blocks (--prefix-match-unit), and notes with the pool
        the states retention drops (``Pool.drop``, for a later lookup's diagnosis)."""
        r = self.r
        B, unit = r.block, r.unit
        L, out = req.prompt_len, req.output_len
        kv_end = L + out - 1 if out else L
        nblocks = cdiv(L + out, B)
        n_keys = len(keys)
        hit = look.hit
        if ends is None:  # running alone (the scheduler model, scheduler.py, passes the ends it scheduled)
            ends = self.prefill_ends(req, hit, look.junction)
        states: dict[int, int] = {}
        self.planned_states = states
        if self._recurrent:
            kept, dropped = self.retained(req, look.junction, self._state_positions(req, hit, ends))
            for pos in kept:
                q = pos // unit
                if 0 < q <= n_keys:
                    states[pos] = keys[q - 1]
            lost = [keys[pos // unit - 1] for pos in dropped if 0 < pos // unit <= n_keys]
            if lost:
                self.pool.drop(lost)
        # decoding, one token a step: only the steps that end in a new block or cross a boundary matter (the
        # first, each that starts a block, and the last)
        steps = [hit, *ends]
        if kv_end > L:
            first = floor_to(L, B) + 1  # the first step to start a block
            if first <= L:
                first += B
            if first != L + 1:
                steps.append(L + 1)
            steps += range(first, kv_end + 1, B)
            if steps[-1] != kv_end:
                steps.append(kv_end)
        if unit == B:
            full = kv_end // B
            if full > n_keys:
                full = n_keys
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
        if self._recurrent:
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
                if r.checkpoint_align is None:  # the steps rise, so each block is new once past the last one
                    last = (hit - 1) // B if hit else -1
                    for e in steps[1:]:
                        i = (e - 1) // B
                        if i > last:
                            last = i
                            mamba.append(in_block.get(i))
                            index.append(i)
                            need.append(e)
                else:
                    seen = {(hit - 1) // B} if hit else set()
                    for a, e in zip(steps, steps[1:]):
                        cp = self.internal_checkpoint(req, a, e) if a < L else None
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
                late = r.mamba_pages - 2 - (r.checkpoint_align is not None)
                if late > 0:
                    mamba += [None] * late
                    index += [1 << 62] * late
                    need += [1] * late
        return steps, attn, (mamba, index, need)

    def admit(self, req: Request, look: Lookup, keys: list[int], ends: list[int] | None = None) -> bool:
        """The request's plan run against the pool (``BlockPool.admit``); False when a step finds too few
        blocks. ``ends``: where its prefill steps end (None: ``prefill_ends``, the request running alone)."""
        return self.pool.admit(req.index, look.hit, self._plan(req, look, keys, ends))

    def finish(self, req: Request) -> None:
        self.pool.finish(req.index)
