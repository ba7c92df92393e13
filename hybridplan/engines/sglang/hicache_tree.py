"""The radix cache with SGLang's host tier (HiCache) behind it, for `replay`: the device pools of radix_cache.py's
``Cache``, and host pools of the sizes hicache.py gives, filled per ``--hicache-write-policy`` and read back on a
match. Rules (0.5.10rc0–0.5.23: mem_cache/hi_mamba_radix_cache.py to 0.5.17, unified_radix_cache.py from 0.5.18):

- A node's hit count grows each time a finished request inserts it, the first insert included
  (``_insert_helper`` → ``_inc_hit_count``; chunked inserts do not count). ``write_through`` backs the node up
  to host at its first count, ``write_through_selective`` at its second (``write_through_threshold`` 1 or 2);
  the backup carries the node's KV and, where the node holds one, its Mamba state (``write_backup``).
  ``write_back`` backs nothing up on insert: a device eviction backs the node up first, then demotes it
  (``_evict_device_leaf``).
- A device eviction of a backed-up node keeps it in the tree on host (``_evict_to_host``): its KV and state stay
  matchable. One never backed up is dropped (``_evict_regular``).
- A match walks device and host nodes alike: the hit is the deepest state on the request's path, on device or
  host, over KV on device or host; what is on host is loaded back into the device pools before the request runs
  (``load_back``), so it counts as reused, and as a host hit.
- The host pools evict least recently used first when a backup needs room (``evict_host``,
  ``evict_mamba_host``).

Here the tree is radix_cache.py's hash chains: a host unit is a grid unit of KV, a host state a state key, each
in a least-recently-used order of its own; a unit's hit count is per grid unit rather than per node.
"""

from __future__ import annotations

from collections import OrderedDict

from hybridplan.engines.common import floor_to
from hybridplan.engines.sglang.radix_cache import Cache, Lookup


class HostTierCache(Cache):
    """``Cache`` with the host tier of ``r.host_kv_tokens`` KV tokens and ``r.host_states`` states."""

    def __init__(self, r) -> None:
        super().__init__(r)
        self.host_kv: OrderedDict[int, int] = OrderedDict()
        self.host_kv_used = 0
        self.host_st: OrderedDict[object, int] = OrderedDict()
        #: hit counts, of KV units and of states apart (a state at a grid point has its unit's key)
        self.kv_counts: dict[int, int] = {}
        self.st_counts: dict[object, int] = {}
        #: host units and states being loaded back, which host evictions spare
        self.pinned: set = set()
        self.host_hit_requests = 0
        self.host_hit_tokens = 0
        self.written_tokens = 0
        self.written_states = 0
        self.host_evicted_tokens = 0
        self.host_evicted_states = 0

    # --- the host pools -----------------------------------------------------------------------------------

    def _backup_kv(self, k: int, tokens: int) -> None:
        if k in self.host_kv:
            self.host_kv.move_to_end(k)
            return
        cap = self.r.host_kv_tokens
        if tokens > cap:
            return
        pinned, spared = self.pinned, 0
        while self.host_kv_used + tokens > cap and len(self.host_kv) > spared:
            victim, t = self.host_kv.popitem(last=False)
            if victim in pinned:  # being loaded back (``_protect_host_node``)
                self.host_kv[victim] = t
                spared += 1
                continue
            self.host_kv_used -= t
            self.host_evicted_tokens += t
        if self.host_kv_used + tokens > cap:
            return
        self.host_kv[k] = tokens
        self.host_kv_used += tokens
        self.written_tokens += tokens

    def _backup_state(self, k: object) -> None:
        if k in self.host_st:
            self.host_st.move_to_end(k)
            return
        if self.r.host_states < 1:
            return
        pinned, spared = self.pinned, 0
        while len(self.host_st) >= self.r.host_states and len(self.host_st) > spared:
            victim, c = self.host_st.popitem(last=False)
            if victim in pinned:
                self.host_st[victim] = c
                spared += 1
                continue
            self.host_evicted_states += 1
        if len(self.host_st) >= self.r.host_states:
            return
        self.host_st[k] = 1
        self.written_states += 1

    # --- the device pools' evictions: write_back backs a victim up first ------------------------------------

    def _evict_kv(self, need: int) -> bool:
        back = self.r.write_threshold is None
        while self.kv_used + self.kv_private + need > self.r.kv_tokens and self.kv_lru:
            k, c = self.kv_lru.popitem(last=False)
            del self.kv_cost[k]
            self.kv_used -= c
            self.evictions += 1
            if back:
                self._backup_kv(k, c)
        return self.kv_used + self.kv_private + need <= self.r.kv_tokens

    def _evict_state(self, need: float) -> bool:
        back = self.r.write_threshold is None
        while self.st_used + self.st_private + need > self.r.state_slots and self.st_lru:
            k, c = self.st_lru.popitem(last=False)
            del self.st_cost[k]
            self.st_used -= c
            self.states -= 1
            self.evictions += 1
            if back:
                self._backup_state(k)
            elif k not in self.host_st:
                self.evicted_states.add(k)
        return self.st_used + self.st_private + need <= self.r.state_slots

    # --- one request ----------------------------------------------------------------------------------------

    def lookup(self, req, keys: list[int]) -> Lookup:
        """The match over device and host (``Cache.lookup`` with either tier counting), with ``host_units``: the
        KV units of the hit only on host, and ``host_state``: the hit's state only on host."""
        r = self.r
        cap = req.prompt_len - 1
        cost, host = self.kv_cost, self.host_kv
        m, most = 0, min(cap // r.grid, len(keys))
        while m < most and (keys[m] in cost or keys[m] in host):
            m += 1
        hit, evicted, hit_key = 0, False, None
        for q in range(m, -1, -1):
            here = self.tails.get(keys[q - 1] if q else 0)
            if not here:
                continue
            for t in sorted(here, reverse=True):
                pos = q * r.grid + t
                if pos > cap or pos == 0:
                    continue
                sk = self._state_key(req, keys, pos)[2]
                if sk in self.st_cost or sk in self.host_st:
                    hit, hit_key = pos, sk
                    break
                if sk in self.evicted_states:
                    evicted = True
            if hit:
                break
        kv = m * r.grid
        if r.strategy == "off":
            return Lookup(0, kv, off=True)
        branching = floor_to(kv, r.grid) if r.strategy.startswith("extra_buffer") and kv > hit else 0
        look = Lookup(hit, kv, branching, evicted and not hit, junction=branching)
        units = keys[: hit // r.grid]
        look.host_units = [k for k in units if k not in cost]  # type: ignore[attr-defined]
        look.host_state = hit_key if hit_key is not None and hit_key not in self.st_cost else None  # type: ignore
        return look

    def admit(self, req, look: Lookup, keys: list[int]) -> bool:
        r = self.r
        loaded = getattr(look, "host_units", [])
        state = getattr(look, "host_state", None)
        if loaded or state is not None:  # load_back: the host part of the hit into the device pools first
            on_device = [k for k in keys[: look.hit // r.grid] if k in self.kv_cost]
            self._hold_all(on_device)  # the hit's device part is not a victim of its own load
            self.pinned = {*loaded, *([state] if state is not None else [])}
            room = self._evict_kv(len(loaded) * r.grid) and (state is None or self._evict_state(1.0))
            self.pinned = set()
            self._release_all(on_device)
            if not room:
                return False
            for k in loaded:
                self.host_kv.move_to_end(k)
                if k not in self.kv_cost:
                    self.kv_cost[k] = r.grid
                    self.kv_used += r.grid
                    self.kv_lru[k] = r.grid
            if state is not None:
                self.host_st.move_to_end(state)
                if state not in self.st_cost:
                    cost = 0.5 if r.int8 else 1.0
                    self.st_cost[state] = cost
                    self.st_used += cost
                    self.states += 1
                    self.st_lru[state] = cost
            look.host_units, look.host_state = [], None  # type: ignore[attr-defined]
        if not super().admit(req, look, keys):
            return False
        if loaded or state is not None:
            self.host_hit_requests += 1
            self.host_hit_tokens += len(loaded) * r.grid if loaded else 0
        threshold = r.write_threshold
        if threshold is not None:
            kv, st, _, _ = self.running[req.index]
            counts = self.kv_counts
            for k in kv:
                n = counts[k] = counts.get(k, 0) + 1
                if n >= threshold:
                    self._backup_kv(k, r.grid)
            st_counts = self.st_counts
            for k in st:
                n = st_counts[k] = st_counts.get(k, 0) + 1
                if n >= threshold:
                    self._backup_state(k)
        return True

    def host_stats(self) -> dict:
        return {
            "write_policy": self.r.write_policy,
            "host_kv_tokens": self.r.host_kv_tokens,
            "host_states": self.r.host_states,
            "host_hit_requests": self.host_hit_requests,
            "host_hit_tokens": self.host_hit_tokens,
            "written_tokens": self.written_tokens,
            "written_states": self.written_states,
            "host_evicted_tokens": self.host_evicted_tokens,
            "host_evicted_states": self.host_evicted_states,
        }
