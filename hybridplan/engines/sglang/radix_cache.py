"""SGLang's radix cache for hybrids (MambaRadixCache, UnifiedRadixCache's Mamba component) for `replay`: where
each request leaves Mamba states in the tree, what a later request matches, and what the two pools evict.
Each rule names its release range and SGLang's file.

- The tree holds KV per token and, at some nodes, a Mamba state. A match is the deepest node on the request's
  path that holds a state, capped at prompt − 1 (mem_cache/mamba_radix_cache.py ``match_prefix``,
  mem_cache/unified_radix_cache.py from 0.5.10rc0); the KV beyond it is not used. Splitting a node to insert a
  diverging request creates a node with no state: the state stays where it was saved (#22935).
- Where states are saved, by strategy (hybridplan/engines/sglang/radix.py ``strategy``):
  no_buffer: the request's own slot at each prefill chunk end (``--chunked-prefill-size``) and at its end;
  extra_buffer / extra_buffer_lazy: one tracked state per forward, at the chunk's last point of the checkpoint
  grid lcm(max(chunk, page), tree page) (radix.py ``checkpoint_grid``), or at the branching point
  (``mamba_branching_seqlen``: the KV match floored to the grid, when the KV reaches past the state hit) when
  that lies inside the chunk (managers/schedule_batch.py ``mamba_last_track_seqlen``); decoding tracks where
  the sequence reaches a multiple of lcm(grid, ``mamba_track_interval`` 256) past the prompt
  (``decode_track``) and the last tracked state is inserted at the end.
- ``--mamba-max-states-per-path N`` (present in 0.5.18 and 0.5.23, absent in 0.5.9; #31230): after an insert,
  the shallowest interior states of the path beyond N are dropped; the tail is kept.
  ``--enable-int8-mamba-checkpoint`` (the same releases; #28185): cached states are stored as int8, about
  twice as many in the same pool.
- Pools (hybridplan/engines/sglang/pool.py ``fit``): the KV pool's tokens (or ``--max-total-tokens``) and the
  Mamba pool's slots (or ``--max-mamba-cache-size``); a running request holds its KV and its state slots (1,
  2 or 3 by strategy, ``Strategy.ratio``); cached KV and cached states are evicted least recently used first,
  each in its own pool (a state can go while its KV stays).
- ``--enable-hierarchical-cache``: the host tier behind these pools (hicache.py sizes it, hicache_tree.py runs
  it; ``cache`` builds the one the rules name).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from msgspec import Struct
from msgspec.structs import replace

from hybridplan.engines.common import Shortfall, floor_to, lcm
from hybridplan.engines.sglang.defaults import chunk as default_chunk
from hybridplan.errors import NotServed, PlanError, Refused

if TYPE_CHECKING:
    from hybridplan.replay.settings import ReplaySettings
    from hybridplan.replay.trace import Request
    from hybridplan.scenario import Scenario

#: decode tracking interval (``mamba_track_interval``, server_args.py)
TRACK_INTERVAL = 256
#: the release that has --mamba-max-states-per-path and --enable-int8-mamba-checkpoint first, of those read
CAP_FLAGS_SINCE = "0.5.18"


class Rules(Struct, frozen=True):
    label: str
    version: str
    strategy: str
    grid: int
    chunk: int
    kv_tokens: int
    state_slots: int
    slots_per_request: int
    max_states_per_path: int
    int8: bool
    max_model_len: int
    #: the HiCache host tier (hicache.py, hicache_tree.py): its pools, and the hits after which a node is backed
    #: up (None: write_back, on device eviction); no host tier where write_policy is None
    host_kv_tokens: int = 0
    host_states: int = 0
    write_policy: str | None = None
    write_threshold: int | None = None
    #: what SGLang warns of its host pools (hicache.py ``host_pools``)
    host_notes: tuple[str, ...] = ()
    #: the overlap scheduler runs (``event_loop_overlap``: on unless --disable-overlap-schedule, never under
    #: no_buffer), which caches a batch's results after the next batch is scheduled (scheduler.py)
    overlap: bool = False

    def to_dict(self) -> dict:
        d = {
            "version": self.version,
            "strategy": self.strategy,
            "checkpoint_grid": self.grid,
            "chunked_prefill_size": self.chunk,
            "kv_pool_tokens": self.kv_tokens,
            "mamba_pool_slots": self.state_slots,
            "slots_per_request": self.slots_per_request,
            "mamba_max_states_per_path": self.max_states_per_path,
            "int8_checkpoint": self.int8,
        }
        if self.write_policy is not None:
            d.update(
                hicache_write_policy=self.write_policy,
                host_kv_tokens=self.host_kv_tokens,
                host_states=self.host_states,
                hicache_notes=list(self.host_notes),
            )
        return d


def rules(sc: Scenario, rs: ReplaySettings) -> Rules:
    from hybridplan.engines.sglang.pool import fit
    from hybridplan.engines.sglang.radix import checkpoint_grid, page_size, strategy

    rel = sc.sglang.release
    if not sc.spec.attention:
        raise NotServed(f"{sc.spec.name} has no attention layers: replay models SGLang's hybrid radix cache")
    strat = strategy(sc)
    grid = checkpoint_grid(sc.spec, rel, page_size(sc, strat))
    for flag, on in (
        ("--mamba-max-states-per-path", rs.mamba_max_states_per_path != -1),
        ("--enable-int8-mamba-checkpoint", rs.int8_checkpoint),
    ):
        if on and rel.before(CAP_FLAGS_SINCE):
            raise PlanError(
                f"SGLang {rel.version} has no {flag} (present from {CAP_FLAGS_SINCE} among the releases read)"
            )
    if rs.mamba_max_states_per_path == 0 or rs.mamba_max_states_per_path < -1:
        raise PlanError(
            "--mamba-max-states-per-path must be -1 (unlimited) or a positive integer (arg_groups/mamba_hook.py)"
        )
    try:
        f = fit(sc)
    except Refused as exc:  # SGLang's own start-up refusal: with --engine both, vLLM still replays
        raise NotServed(f'SGLang {rel.version} will not start: "{exc}"') from None
    if isinstance(f, Shortfall):
        raise NotServed(f"SGLang {rel.version}: {f.problem}")
    if f.refusal is not None:  # pool.py fit: a context past the config, HiCache it refuses
        raise NotServed(f"SGLang {rel.version} will not start: {f.refusal}")
    kv = rs.max_total_tokens or f.kv_tokens
    slots = sc.sglang.max_mamba_cache_size or f.pool.size
    name = strat.name
    out = Rules(
        f"SGLang {rel.version} {name}",
        rel.version,
        name,
        grid,
        default_chunk(sc),
        kv,
        slots,
        strat.ratio,
        rs.mamba_max_states_per_path,
        rs.int8_checkpoint,
        sc.ctx,
        overlap=sc.sglang.overlap and name != "no_buffer",  # radix.py strategy: no_buffer runs without it
    )
    if sc.sglang.hicache is not None:
        from hybridplan.engines.sglang.hicache import host_tier

        out = host_tier(out, sc, rs, f)
    return out


def cache(r: Rules) -> Cache:
    """The cache of these rules: with its host tier where HiCache is on (hicache_tree.py)."""
    if r.write_policy is not None:
        from hybridplan.engines.sglang.hicache_tree import HostTierCache

        return HostTierCache(r)
    return Cache(r)


def unbounded(r: Rules, size: int) -> Rules:
    """The same rules over pools of ``size`` KV tokens and state slots that never evict (`prefix`)."""
    return replace(r, kv_tokens=size, state_slots=size)


# --- counterfactuals: the same rules with one cause of a gap lifted (`replay`'s attribution) ---------------

#: a strategy no release has: a state at every grid point of the request's tokens, prompt and decode
EVERY = "every_grid_point"
#: a context length no prompt reaches
ANY_LENGTH = 1 << 62


def any_length(r: Rules) -> Rules:
    """The same rules taking a prompt of any length."""
    return replace(r, max_model_len=ANY_LENGTH)


def caching_on(r: Rules) -> Rules:
    """The radix cache on (``every_checkpoint``) where it is off; any other rules unchanged."""
    return every_checkpoint(r) if r.strategy == "off" else r


def every_checkpoint(r: Rules) -> Rules:
    """A state kept at every point of the checkpoint grid, prompt and decode, and all the KV kept (no chunk ends,
    branching points or tracking interval decide where; no per-path cap)."""
    return replace(r, strategy=EVERY, max_states_per_path=-1)


def decode_track(r: Rules, prompt: int, kv_end: int) -> int:
    """extra_buffer's last state tracked while decoding (0: none): decode steps track where the sequence
    reaches a multiple of the interval (managers/schedule_batch.py ``prepare_for_decode``, ``seq_lens %
    mamba_track_interval == 0`` after the step's token, 0.5.9–0.5.23), so only multiples past the prompt:
    the first decode step reaches prompt + 1, the last the KV's end."""
    last = floor_to(kv_end, lcm(r.grid, TRACK_INTERVAL))
    return last if last > prompt else 0


def state_grid(r: Rules) -> int:
    """The tokens a resumed state's position is a multiple of under ``every_checkpoint``: the grid."""
    return r.grid


@dataclass
class Lookup:
    hit: int
    kv_match: int
    branching: int = 0
    evicted_state: bool = False
    eagle_cut: bool = False
    junction: int = 0
    retention_dropped: bool = False
    off: bool = False

    @property
    def attention_hit(self) -> int:
        return self.kv_match


class Cache:
    """The radix tree as hash chains: KV per grid unit (and per state's tail), states at their positions."""

    def __init__(self, r: Rules) -> None:
        self.r = r
        self.kv_lru: OrderedDict[int, int] = OrderedDict()  # chain key → tokens (cached, unheld)
        self.kv_held: dict[int, int] = {}
        self.kv_cost: dict[int, int] = {}
        self.kv_used = 0  # cached KV tokens
        self.kv_private = 0  # tokens running requests hold outside the tree
        self.st_lru: OrderedDict[object, float] = OrderedDict()
        self.st_held: dict[object, int] = {}
        self.st_cost: dict[object, float] = {}
        self.st_used = 0.0
        self.st_private = 0
        # chain key at a grid point → tails (tokens past it) that hold a state
        self.tails: dict[int, set[int]] = {}
        self.evictions = 0
        self.evicted_states: set[object] = set()
        self.running: dict[int, tuple[list[int], list[object], int, int]] = {}
        self.peak_states = 0
        self.states = 0
        self.peak_blocks = 0

    def keys(self, req: Request, stop: int) -> list[int]:
        """Chained hashes of every full grid unit up to ``stop`` (``Prompt.unit_keys``, shared across policies)."""
        return req.with_output().unit_keys(self.r.grid, stop)

    def _state_key(self, req: Request, keys: list[int], pos: int) -> tuple[int, int, object]:
        """(the key of the grid point at or before ``pos``, the tokens past it, the key of the first ``pos``
        tokens)."""
        q, t = divmod(pos, self.r.grid)
        base = keys[q - 1] if q else 0
        return base, t, req.with_output().point_key(pos, self.r.grid, keys) if t else base

    # --- pools ----------------------------------------------------------------------------------------

    def _evict_kv(self, need: int) -> bool:
        while self.kv_used + self.kv_private + need > self.r.kv_tokens and self.kv_lru:
            k, c = self.kv_lru.popitem(last=False)
            del self.kv_cost[k]
            self.kv_used -= c
            self.evictions += 1
        return self.kv_used + self.kv_private + need <= self.r.kv_tokens

    def _evict_state(self, need: float) -> bool:
        while self.st_used + self.st_private + need > self.r.state_slots and self.st_lru:
            k, c = self.st_lru.popitem(last=False)
            del self.st_cost[k]
            self.st_used -= c
            self.states -= 1
            self.evictions += 1
            self.evicted_states.add(k)
        return self.st_used + self.st_private + need <= self.r.state_slots

    def held_states(self, req: Request) -> list[int]:
        """The positions along ``req``'s tokens at which the tree now holds a Mamba state (the states ``lookup``
        searches: each grid point's tails whose key the state pool holds), in order."""
        r = self.r
        length = req.prompt_len + req.output_len
        keys = self.keys(req, length)
        out = []
        for q in range(len(keys) + 1):
            for t in self.tails.get(keys[q - 1] if q else 0, ()):
                pos = q * r.grid + t
                if 0 < pos <= length and self._state_key(req, keys, pos)[2] in self.st_cost:
                    out.append(pos)
        return sorted(out)

    # --- one request ----------------------------------------------------------------------------------

    def lookup(self, req: Request, keys: list[int]) -> Lookup:
        r = self.r
        cap = req.prompt_len - 1
        m, most, cost = 0, min(cap // r.grid, len(keys)), self.kv_cost
        while m < most and keys[m] in cost:
            m += 1
        hit, evicted = 0, False
        tails = self.tails
        for q in range(m, -1, -1):
            here = tails.get(keys[q - 1] if q else 0)
            if not here:
                continue
            for t in sorted(here, reverse=True):
                pos = q * r.grid + t
                if pos > cap or pos == 0:
                    continue
                sk = self._state_key(req, keys, pos)[2]
                if sk in self.st_cost:
                    hit = pos
                    break
                if sk in self.evicted_states:
                    evicted = True
            if hit:
                break
        kv = m * r.grid
        if r.strategy == "off":
            return Lookup(0, kv, off=True)
        branching = floor_to(kv, r.grid) if r.strategy.startswith("extra_buffer") and kv > hit else 0
        return Lookup(hit, kv, branching, evicted and not hit, junction=branching)

    def state_positions(self, req: Request, start: int, branching: int) -> list[int]:
        r = self.r
        L = req.prompt_len
        kv_end = L + max(req.output_len - 1, 0)
        if r.strategy == "off":
            return []
        if r.strategy == EVERY:
            return list(range(floor_to(start, r.grid) + r.grid, kv_end + 1, r.grid))
        out = []
        pos = start
        while pos < L:
            end = min(pos + r.chunk, L)
            if r.strategy == "no_buffer":
                out.append(end)
            else:
                tracked = pos + floor_to(end - pos, r.grid)
                if branching and pos < branching < tracked and (branching - pos) % r.grid == 0:
                    tracked = branching
                if tracked > pos:
                    out.append(tracked)
            pos = end
        if req.output_len:
            if r.strategy == "no_buffer":
                out.append(kv_end)
            else:
                last = decode_track(r, L, kv_end)
                if last > max(out, default=0):
                    out.append(last)
        return out

    def admit(self, req: Request, look: Lookup, keys: list[int]) -> bool:
        r = self.r
        kv_end = req.prompt_len + max(req.output_len - 1, 0)
        hit_units = look.hit // r.grid
        held_kv = keys[:hit_units]
        self._hold_all(held_kv)
        new_kv = max(req.prompt_len + req.output_len - hit_units * r.grid, 0)
        if req.prompt_len + req.output_len > r.kv_tokens:
            self._release_all(held_kv[::-1])  # in order
            return False
        if not self._evict_kv(new_kv) or not self._evict_state(r.slots_per_request):
            self._release_all(held_kv[::-1])  # in order
            return False
        self.kv_private += new_kv
        self.st_private += r.slots_per_request
        positions = [p for p in self.state_positions(req, look.hit, look.branching) if p <= kv_end]
        # what the tree keeps: no_buffer every computed token; extra_buffer only up to the last tracked state, the
        # KV past it is freed (mem_cache/mamba_radix_cache.py cache_finished_req)
        kv_limit = kv_end if r.strategy in ("no_buffer", EVERY) else max(positions, default=look.hit)
        mine_kv = keys[: max(min(kv_limit // r.grid, len(keys)), hit_units)]
        kv_cost, grid = self.kv_cost, r.grid
        inserted = 0
        for k in mine_kv[hit_units:]:
            if k not in kv_cost:
                kv_cost[k] = grid
                inserted += 1
        self.kv_used += inserted * grid
        self._hold_all(mine_kv[hit_units:])
        moved = min(inserted * grid, new_kv)
        self.kv_private -= moved
        mine_st: list[object] = []
        if look.hit:
            sk = self._state_key(req, keys, look.hit)[2]
            self._hold_st(sk)
            mine_st.append(sk)
        cost = 0.5 if r.int8 else 1.0
        for pos in positions:
            if pos // r.grid > len(keys):
                continue
            base, t, sk = self._state_key(req, keys, pos)
            if sk not in self.st_cost:
                if not self._evict_state(cost):
                    continue
                self.st_cost[sk] = cost
                self.st_used += cost
                self.states += 1
                self.peak_states = max(self.peak_states, self.states)
                self.tails.setdefault(base, set()).add(t)
            self._hold_st(sk)
            mine_st.append(sk)
        if r.max_states_per_path > 0:
            self._cap_path(mine_st)
        self.running[req.index] = (mine_kv, mine_st, new_kv - moved, r.slots_per_request)
        self.peak_blocks = max(self.peak_blocks, self.kv_used + self.kv_private)
        return True

    # --- a request step by step (hybridplan/engines/sglang/scheduler.py: SGLang's scheduler loop) -------

    def reserve(self, req: Request, look: Lookup, keys: list[int]) -> bool:
        """``admit`` without the caching: the hit pinned, the KV and state slots the request needs taken
        (evicting), nothing inserted yet; ``insert`` caches as the request computes. False when the pools
        cannot hold it now."""
        r = self.r
        hit_units = look.hit // r.grid
        held_kv = keys[:hit_units]
        self._hold_all(held_kv)
        new_kv = max(req.prompt_len + req.output_len - hit_units * r.grid, 0)
        if (
            req.prompt_len + req.output_len > r.kv_tokens
            or not self._evict_kv(new_kv)
            or not self._evict_state(r.slots_per_request)
        ):
            self._release_all(held_kv[::-1])  # in order
            return False
        self.kv_private += new_kv
        self.st_private += r.slots_per_request
        mine_st: list[object] = []
        if look.hit:
            sk = self._state_key(req, keys, look.hit)[2]
            self._hold_st(sk)
            mine_st.append(sk)
        self.running[req.index] = (list(held_kv), mine_st, new_kv, r.slots_per_request)
        self.peak_blocks = max(self.peak_blocks, self.kv_used + self.kv_private)
        return True

    def insert(self, req: Request, keys: list[int], positions: list[int], kv_limit: int) -> None:
        """Cache what a reserved request has computed: its KV up to ``kv_limit`` (whole grid units) and a
        state at each of ``positions`` (``cache_unfinished_req`` / ``cache_finished_req``)."""
        r = self.r
        mine_kv, mine_st, priv, slots = self.running[req.index]
        have = len(mine_kv)
        upto = min(kv_limit // r.grid, len(keys))
        kv_cost, grid = self.kv_cost, r.grid
        inserted = 0
        for k in keys[have:upto]:
            if k not in kv_cost:
                kv_cost[k] = grid
                inserted += 1
        self.kv_used += inserted * grid
        fresh = keys[have:upto]
        self._hold_all(fresh)
        mine_kv.extend(fresh)
        moved = min(inserted * grid, priv)
        self.kv_private -= moved
        cost = 0.5 if r.int8 else 1.0
        for pos in positions:
            if pos // r.grid > len(keys) or pos <= 0:
                continue
            base, t, sk = self._state_key(req, keys, pos)
            if sk not in self.st_cost:
                if not self._evict_state(cost):
                    continue
                self.st_cost[sk] = cost
                self.st_used += cost
                self.states += 1
                self.peak_states = max(self.peak_states, self.states)
                self.tails.setdefault(base, set()).add(t)
            self._hold_st(sk)
            mine_st.append(sk)
        if r.max_states_per_path > 0 and positions:
            self._cap_path(mine_st)
        self.running[req.index] = (mine_kv, mine_st, priv - moved, slots)
        self.peak_blocks = max(self.peak_blocks, self.kv_used + self.kv_private)

    def _cap_path(self, path: list[object]) -> None:
        """Drop the shallowest states of this path beyond the cap; the tail stays (#31230)."""
        present = [k for k in dict.fromkeys(path) if k in self.st_cost]
        for k in present[: max(len(present) - self.r.max_states_per_path, 0)]:
            self.st_used -= self.st_cost.pop(k)
            self.st_lru.pop(k, None)
            self.states -= 1
            self.evicted_states.add(k)

    def _hold_all(self, ks: list[int]) -> None:
        """Hold each KV unit (out of the LRU while held)."""
        pop, held = self.kv_lru.pop, self.kv_held
        get = held.get
        for k in ks:
            pop(k, None)
            held[k] = get(k, 0) + 1

    def _release_all(self, ks: list[int]) -> None:
        """Release each KV unit, last first; one no one holds goes to the LRU's tail."""
        held, cost, lru = self.kv_held, self.kv_cost, self.kv_lru
        get = held.get
        for k in reversed(ks):
            n = get(k, 0) - 1
            if n > 0:
                held[k] = n
                continue
            held.pop(k, None)
            if k in cost:
                lru[k] = cost[k]

    def _hold_st(self, k: object) -> None:
        self.st_lru.pop(k, None)
        self.st_held[k] = self.st_held.get(k, 0) + 1

    def _release_st(self, k: object) -> None:
        n = self.st_held.get(k, 0) - 1
        if n > 0:
            self.st_held[k] = n
            return
        self.st_held.pop(k, None)
        if k in self.st_cost:
            self.st_lru[k] = self.st_cost[k]

    def finish(self, req: Request) -> None:
        kv, st, priv_kv, slots = self.running.pop(req.index)
        self._release_all(kv)
        for k in reversed(st):
            self._release_st(k)
        self.kv_private -= priv_kv
        self.st_private -= slots
