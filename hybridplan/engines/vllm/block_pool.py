"""vLLM's block pool as `replay` runs it (vllm/v1/core/block_pool.py, and the order in which
kv_cache_manager.py ``allocate_slots`` and ``free`` take and free each group's blocks): the mechanism under
hybridplan/engines/vllm/prefix_cache.py's rules, which say what a request's blocks cache and when each is
needed (its plan); the pool runs the plan.

Every group's blocks come from one pool; never-used blocks first, then the free queue from its head, a cached
block popped there being evicted; a finished request frees each group's blocks tail first, group by group; a
hit takes its blocks out of the queue. Several blocks may hold one key (a prefix recomputed past a shorter
Mamba hit): a lookup finds the first. Under the scheduler loop (scheduler.py) a request runs stepwise: its
first step's takes and frees at admission, each later step's when the loop reaches it (``advance``). From 0.24.0 a freed block that caches nothing is reused before any cached
block is evicted (``free_blocks`` prepends it); before, it waits in the queue with the others
(``uncached_first``).

Two builds of one pool: ``PyPool`` here, the reference, and ``hybridplan.engines.vllm._block_pool.BlockPool``,
the same in C (hybridplan/engines/vllm/_block_pool.c), built where a C compiler is at hand; ``BlockPool`` is
the C one where it was built, else this one. tests/test_block_pool.py holds them equal.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from typing import Protocol

#: a request's plan (prefix_cache.py ``Cache._plan``): the computed tokens at each step; each attention block's
#: key (None: none); each Mamba block's key, index (the block of the request's tokens it stands for) and the
#: computed tokens it is needed at (None: a hit, held from the start)
Plan = tuple[list[int], list[int | None], tuple[list[int | None], list[int], list[int | None]]]


class Pool(Protocol):
    """What the rules ask of a pool."""

    evictions: int
    states: int
    peak_states: int
    peak_blocks: int

    def has(self, group: int, key: int) -> bool: ...
    def prefix(self, groups: list[int], keys: list[int], n: int) -> int: ...
    def last_held(self, groups: list[int], keys: list[int], reach: int) -> int: ...
    def drop(self, keys: list[int]) -> None: ...
    def lost(self, keys: list[int], start: int, stop: int) -> tuple[bool, bool]: ...
    def admit(self, request: int, hit: int, plan: Plan, stepwise: bool = False) -> bool: ...
    def advance(self, request: int, step: int) -> None: ...
    def finish(self, request: int) -> None: ...


class PyPool:
    """The pool in Python. Kept lean, since a replay runs every block of every request through it: an allocation
    is a number (each one new, so a block freed and taken again is a new number), a cached block is an entry
    (its group, its key; a tuple, which unpacks for a fraction of the cost of packing both in one int), each
    group keeps key → its block (or the list of its blocks, oldest first, when several hold the key), and a
    holder count is kept only for blocks held more than once."""

    def __init__(self, num_blocks: int, groups: str, uncached_first: bool, block: int) -> None:
        """``num_blocks`` with the null block; ``groups`` the kinds of the KV cache groups in vLLM's order ("a"
        attention, "m" Mamba); ``block`` the scheduler block in tokens."""
        self.num_blocks = num_blocks
        self.uncached_first = uncached_first
        self.block = block
        # block 0 is the null block that stands for a skipped position (block_pool.py ``null_block``)
        self.fresh = num_blocks - 1
        # the free queue: block → the entry it caches (None: uncached), and its order, oldest first, as a deque the
        # blocks are appended to as they are freed; a hit taking a block out of the queue leaves its place in the
        # deque behind, counted in ``_stale`` and skipped when it comes to the head (a block freed again after it
        # has a later place): an OrderedDict costs twice as much a block
        self.queue: dict[int, tuple[int, int] | None] = {}
        self._order: deque[int] = deque()
        self._stale: dict[int, int] = {}
        self.groups = groups
        # per group: key → the block caching it, or a list of the blocks, oldest first
        self.cached_in: list[dict[int, int | list[int]]] = [{} for _ in groups]
        self.refs: dict[int, int] = {}  # block → holders, for the blocks held more than once
        self._next = 0
        self.evictions = 0
        self.evicted_states: set[int] = set()
        #: the Mamba keys whose states the rules did not keep (retention), for a lookup to tell why it missed
        self.dropped_states: set[int] = set()
        self.running: dict[int, tuple[list[int], list[int | None], list[tuple[int, int] | None]]] = {}
        #: stepwise requests (``admit``): their events, each later step's span of them, the steps run, and the
        #: most blocks the events still to run take at once beyond what they surely free (``_peak``);
        #: ``reserved`` sums the last over them: the blocks a new request's dry run leaves to them
        self.pending: dict[int, tuple[list[int], list[tuple[int, int]], int, int]] = {}
        self.reserved = 0
        self.states = 0
        self.peak_states = 0
        self.peak_blocks = 0
        #: blocks in the free queue that cache nothing (before 0.24.0 only): every other block not fresh is held
        #: or caches an entry, which ``peak_blocks`` counts
        self.uncached_queued = 0
        self._first_mamba = groups.index("m") if "m" in groups else -1
        self._attn = [g for g, k in enumerate(groups) if k == "a"]
        self._is_mamba = [k == "m" for k in groups]
        self._mamba = [g for g, k in enumerate(groups) if k == "m"]

    # --- what a lookup reads ---------------------------------------------------------------------------

    def has(self, group: int, key: int) -> bool:
        """Whether a block of ``group`` caches ``key``."""
        return key in self.cached_in[group]

    def prefix(self, groups: list[int], keys: list[int], n: int) -> int:
        """How many of the first ``n`` keys every one of ``groups`` caches, from the left."""
        dicts = [self.cached_in[g] for g in groups]
        a = 0
        if len(dicts) == 1:
            mine = dicts[0]
            while a < n and keys[a] in mine:
                a += 1
            return a
        while a < n and all(keys[a] in d for d in dicts):
            a += 1
        return a

    def last_held(self, groups: list[int], keys: list[int], reach: int) -> int:
        """The last u ≤ ``reach`` whose key ``keys[u − 1]`` every one of ``groups`` caches (0: none)."""
        dicts = [self.cached_in[g] for g in groups]
        for u in range(reach, 0, -1):
            k = keys[u - 1]
            for d in dicts:
                if k not in d:
                    break
            else:
                return u
        return 0

    def drop(self, keys: list[int]) -> None:
        """The Mamba states at ``keys`` that the rules did not keep (they were computed, not cached)."""
        self.dropped_states.update(keys)

    def lost(self, keys: list[int], start: int, stop: int) -> tuple[bool, bool]:
        """Whether a Mamba block caching any of ``keys[start:stop]`` was ever evicted, and whether any of them was
        dropped (``drop``)."""
        missed = keys[start:stop]
        return not self.evicted_states.isdisjoint(missed), not self.dropped_states.isdisjoint(missed)

    @property
    def available(self) -> int:
        return self.fresh + len(self.queue)

    def _oldest(self, entry: tuple[int, int]) -> int:
        holders = self.cached_in[entry[0]][entry[1]]
        return holders if isinstance(holders, int) else holders[0]

    def _touch(self, entry: tuple[int, int]) -> int:
        slot = self._oldest(entry)
        if slot in self.queue:
            del self.queue[slot]
            self._stale[slot] = self._stale.get(slot, 0) + 1
        else:
            self.refs[slot] = self.refs.get(slot, 1) + 1
        return slot

    # --- one request -----------------------------------------------------------------------------------

    def admit(self, request: int, hit: int, plan: Plan, stepwise: bool = False) -> bool:
        """Run the request step by step as the scheduler allocates for it (allocate_slots: first the Mamba
        blocks behind the computed tokens are freed, tail first, then each group's new blocks); False when a
        step finds too few blocks (nothing is taken then). Which block is taken or freed when follows from the
        plan alone, so the steps are laid out first as one sequence of takes and frees, then run against the
        pool. ``hit``: the tokens the request resumes from. ``stepwise``: only the first step's takes and frees
        run now, each later step's when ``advance`` reaches it (the scheduler loop, which interleaves the
        running requests' steps as vLLM's ``schedule`` does); the dry run then counts the blocks the running
        requests' later steps still take (``reserved``)."""
        steps, attn, (mamba, index, need) = plan
        B = self.block
        hit_blocks = hit // B
        nblocks = len(attn)
        # every group's blocks in one list: group g's block i at offset[g] + i
        offset = []
        n_ents = 0
        for kind in self.groups:
            offset.append(n_ents)
            n_ents += nblocks if kind == "a" else len(mamba)
        ents: list[tuple[int, int] | None] = [
            (g, k) if k is not None else None
            for g, kind in enumerate(self.groups)
            for k in (attn if kind == "a" else mamba)
        ]
        hits: list[int] = []  # the blocks a hit holds from the start: attention's below it, Mamba's first
        m_hit = False
        if hit:
            m_hit = bool(need) and need[0] is None
            for g, kind in enumerate(self.groups):
                if kind == "a":
                    hits += range(offset[g], offset[g] + hit_blocks)
                elif m_hit:
                    hits.append(offset[g])
        touched = {self._oldest(ents[f]) for f in hits} if hits else None
        # the Mamba hit blocks another request holds: passed, they are freed only once more (free_blocks lowers
        # ref_cnt), so they add nothing to the free blocks
        m_kept = sum(self._oldest(ents[offset[g]]) not in self.queue for g in self._mamba) if hits and m_hit else 0
        # the new Mamba blocks in the order they are taken, and every Mamba block in the order it is passed
        m_order = sorted((i for i, n in enumerate(need) if n is not None), key=need.__getitem__)
        m_needs = [need[i] for i in m_order]
        m_behind = sorted(range(len(index)), key=index.__getitem__)
        m_index = [index[i] for i in m_behind]
        avail = self.fresh + len(self.queue) - (len(touched & self.queue.keys()) if touched else 0) - self.reserved
        # the dry run can only fail when the free blocks are fewer than the new ones (frees only add)
        if avail < len(self._attn) * (nblocks - hit_blocks) + len(self._mamba) * len(m_needs) and not self._fits(
            steps, hit_blocks, nblocks, (m_needs, m_index, m_kept), avail
        ):
            return False
        slots: list[int | None] = [None] * len(ents)
        for f in hits:
            slots[f] = self._touch(ents[f])
        events: list[int] = []  # f: take block f; ~f: free it
        bounds: list[int] = []  # per step k: where its events end in ``events``
        held = [n is None for n in need]  # per Mamba block: held (a hit, or taken at an earlier step)
        freed = [False] * len(need)
        a_next, m_next, m_gone = hit_blocks, 0, 0
        n_index = len(m_index)
        m_offsets: list[int] = []
        a_offsets: list[int] = []
        kinds: list[tuple[int, bool]] = []
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
            bounds.append(len(events))
        for g, kind in enumerate(self.groups):  # what no step reached (a request of one token)
            if kind == "a":
                events += range(offset[g] + a_next, offset[g] + nblocks)
            else:
                events += [offset[g] + i for i in m_order[m_next:]]
        bounds[-1] = len(events)
        pending: list[tuple[int, int]] = []  # per later step: its events' start and end
        before = self.pending.pop(request, None)  # admitted again while running: the last admit's steps count
        if before is not None:
            self.reserved -= before[3]
        if stepwise and len(bounds) > 1:
            pending = [(bounds[k - 1], bounds[k]) for k in range(1, len(bounds))]
            most = _peak(events, bounds[0], ents)
            self.reserved += most
            self.pending[request] = (events, pending, 0, most)
            events = events[: bounds[0]]
        self._run(events, slots, ents)
        # at the end: group by group, each tail first (KVCacheManager.free), what the steps did not free
        last: list[int] = []
        kept = [i for i in range(len(need) - 1, -1, -1) if not freed[i]]
        for g, kind in enumerate(self.groups):
            if kind == "a":
                last += range(~(offset[g] + nblocks - 1), ~offset[g] + 1)
            else:
                last += map((-1 - offset[g]).__sub__, kept)  # ~(offset + i)
        self.running[request] = (last, slots, ents)
        # the blocks held or caching an entry: all but the fresh ones and the uncached ones in the queue
        self.peak_blocks = max(self.peak_blocks, self.num_blocks - 1 - self.fresh - self.uncached_queued)
        return True

    def _run(self, events: list[int], slots: list[int | None], ents: list[tuple[int, int] | None]) -> None:
        """Take (``f``) or free (``~f``) the request's blocks in order: a block is taken fresh, else from the head
        of the free queue, evicting what it caches, then caches its own entry; a freed block held by no one else
        joins the queue's tail if it caches an entry (a block held is never evicted, so it still caches the
        entry it was taken or hit for), else (0.24.0+) goes back among the fresh ones."""
        queue, cached_in, refs, stale = self.queue, self.cached_in, self.refs, self._stale
        pop, popleft, append = queue.pop, self._order.popleft, self._order.append
        first = self._first_mamba
        uncached_first = self.uncached_first
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
                    if isinstance(holders, int):
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
                elif isinstance(holders, int):
                    cached_in[g][key] = [holders, slot]
                else:
                    holders.append(slot)
            slots[f] = slot
            slot += 1
        self._next, self.fresh, self.uncached_queued = slot, fresh, uncached
        self.states, self.peak_states, self.evictions = states, peak, evictions

    def _fits(
        self,
        steps: list[int],
        hit_blocks: int,
        nblocks: int,
        mamba: tuple[list[int], list[int], int],
        avail: int,
    ) -> bool:
        """The dry run: at no step does the request take more blocks than are free (the attention groups' new
        blocks b ≥ ``hit_blocks`` are needed at b·B + 1 tokens; the Mamba groups' at ``m_needs``, and each
        Mamba block passed counts as freed once the computed tokens are past it, but for the ``m_kept`` hit
        blocks another request still holds: vLLM's free_blocks puts a block in the free queue only when its
        ref_cnt falls to 0, and allocate_slots compares the new blocks with the free queue's length after
        remove_skipped_blocks, vllm/v1/core/kv_cache_manager.py and block_pool.py, 0.29.0). The hit's Mamba
        block stands for the lowest index, so it is passed first: with any block passed. ``mamba``: the Mamba
        groups' ``(m_needs, m_index, m_kept)``."""
        m_needs, m_index, m_kept = mamba
        B = self.block
        na, nm = len(self._attn), len(self._mamba)
        new = na * (nblocks - hit_blocks) + nm * len(m_needs)
        freed = 0
        for k in range(max(len(steps) - 1, 1)):
            c = steps[k]
            end = steps[k + 1] if k + 1 < len(steps) else c
            passed = bisect_left(m_index, (c - 1) // B)
            freed = nm * passed - m_kept if passed else 0
            a_taken = min(max((end - 1) // B + 1 - hit_blocks, 0), nblocks - hit_blocks) if end >= 1 else 0
            if avail + freed - na * a_taken - nm * bisect_right(m_needs, end) < 0:
                return False
        return avail + freed - new >= 0

    def advance(self, request: int, step: int) -> None:
        """Run a stepwise request's steps up to its ``step``-th (0: the one ``admit`` ran): the takes and frees
        of vLLM's ``allocate_slots`` for the tokens that step schedules."""
        held = self.pending.get(request)
        if held is None:
            return
        events, pending, done, need = held
        if step > len(pending):
            step = len(pending)
        if step <= done:
            return
        _, slots, ents = self.running[request]
        self.reserved -= need
        self._run(events[pending[done][0] : pending[step - 1][1]], slots, ents)
        self.peak_blocks = max(self.peak_blocks, self.num_blocks - 1 - self.fresh - self.uncached_queued)
        if step == len(pending):
            del self.pending[request]
        else:
            need = _peak(events, pending[step][0], ents)
            self.reserved += need
            self.pending[request] = (events, pending, step, need)

    def finish(self, request: int) -> None:
        """Free what the request still holds (KVCacheManager.free), its steps not yet run first."""
        if request in self.pending:
            self.advance(request, len(self.pending[request][1]))
        last, slots, ents = self.running.pop(request)
        self._run(last, slots, ents)


def _peak(events: list[int], start: int, ents: list[tuple[int, int] | None]) -> int:
    """The most blocks ``events[start:]`` take beyond what they free, at any point of them (at least 0). Only a
    freed block that caches nothing counts as freed: one that caches an entry may be held by a request that hit
    it in the meantime, and then frees nothing."""
    n = most = 0
    for f in events[start:]:
        if f >= 0:
            n += 1
            if n > most:
                most = n
        elif ents[~f] is None:
            n -= 1
    return most


try:
    from hybridplan.engines.vllm._block_pool import BlockPool
except ImportError:  # no C compiler where it was installed: the reference, a few times slower
    BlockPool = PyPool
