"""vLLM's scheduler loop for `replay`: which step looks each request up, how many tokens each step gives each
request, where its prefill chunks end (so where align mode leaves its Mamba states), and what a lookup can see
of the requests still running. The prefix cache's rules and its block pool are prefix_cache.py's ``Cache``;
this drives it. validation/replay_vllm.py steps the release's own ``Scheduler`` against it.

One step is one ``Scheduler.schedule`` (vllm/v1/core/sched/scheduler.py, 0.23.0–0.33.0, with
``--no-async-scheduling``, no preemption, the FCFS policy):

- The step's token budget is ``--max-num-batched-tokens`` (``token_budget = self.max_num_scheduled_tokens``).
- The running requests come first, in the order they were admitted: each takes ``min(what it has left,
  token_budget)`` (a decoding request one token), cut by ``_mamba_block_aligned_split`` in align mode
  (prefix_cache.py ``Cache.step_end``); one the split leaves no token is skipped for this step (``continue``).
- Then the waiting requests, in arrival order, while budget is left: each is looked up in this step
  (``get_computed_blocks``), its first chunk is ``min(prompt − hit, token_budget)`` cut by the split, with the
  shared-prefix junction (Marconi-style admission, 0.24.0+: ``num_uncached_common_prefix_tokens`` for the
  admitting step only before 0.26.0, ``request.shared_prefix_boundary`` every step from 0.26.0,
  ``Rules.junction_every_step``). A split that leaves no token, or ``allocate_slots`` finding too few free
  blocks, stops admission for this step (``break``): the request waits and is looked up again at a later step.
- What a lookup sees: ``allocate_slots`` caches a request's blocks up to its computed plus scheduled tokens
  (kv_cache_manager.py ``cache_blocks(request, num_tokens_to_cache)``), so a request admitted at step s finds
  the blocks and states the others have reached by step s (their chunks of step s included: they were
  allocated before it), not those of their later chunks.
- ``update_from_output``: a step that completes the prompt samples its first token, each decode step one more;
  a request is freed after the step that samples its last (``max_tokens``, at least one).

Every request's steps depend only on those admitted before it (they take the budget first), so its whole
timeline (the tokens each step gives it, when it decodes, when it finishes) is known when it is admitted, and
its plan goes to the pool then, stepwise: the pool takes (and frees) the blocks of its first step at once and
those of each later step at the scheduler step that reaches it (``allocs``, ``Pool.advance``), the running
requests' before the step's admissions, as ``allocate_slots`` runs for them first (0.23.0–0.33.0). So a lookup
finds the pool as the running requests have left it so far: a block they will take later has evicted nothing
yet. A new request's dry run leaves the blocks the running requests' later steps still need to them (vLLM would
preempt, which is not modelled). The blocks and states of its later steps are hidden from lookups until the
step that reaches them (``hidden``).

The client keeps at most N requests in flight (the replay's concurrency, capped at ``--max-num-seqs``); the
next is sent as soon as one finishes, and is first scheduled at the next step (validation/replay_vllm.py adds
requests before each ``schedule()``).
"""

from __future__ import annotations

import heapq
from bisect import bisect_right, insort
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hybridplan.engines.common import SchedulerLoop, cdiv
from hybridplan.engines.vllm.prefix_cache import Cache, Lookup, Rules

if TYPE_CHECKING:
    from hybridplan.engines.vllm.block_pool import Plan
    from hybridplan.replay.trace import Request


@dataclass(slots=True)
class _Entry:
    req: Request
    keys: list[int]
    #: the first step that can schedule it (the one after its submission)
    arrival: int
    look: Lookup | None = None
    #: step → prefill tokens scheduled
    prefill: dict[int, int] = field(default_factory=dict)
    #: its decode steps: from ``decode_start`` to ``decode_end``, but for ``decode_skipped``
    decode_start: int = 0
    decode_end: int = -1
    decode_skipped: set[int] = field(default_factory=set)
    finish: int = 0


class Scheduled(SchedulerLoop):
    """vLLM's prefix cache behind its scheduler loop: requests are submitted, stepped through the shared token
    budget, and their lookups come out (``take_resolved``) at the step that admits each. The replay loop
    (hybridplan/replay/loop.py) drives it through ``submit`` and ``finish``."""

    #: the replay loop records this cache's lookups as they are resolved, not at submission
    deferred = True

    def __init__(self, r: Rules) -> None:
        self.r = r
        self.cache = Cache(r)
        self.now = 0  # the last step run
        self.waiting: deque[_Entry] = deque()
        self.running: list[_Entry] = []
        #: step → the prefill tokens the running requests take at it, and those steps in order
        self.used: dict[int, int] = {}
        self.used_steps: list[int] = []
        #: step → the requests that finish after it
        self.finishing: dict[int, list[_Entry]] = {}
        #: (step, n, kind, key): a running request's block or state, visible to lookups from that step
        self.pending: list[tuple[int, int, int, int]] = []
        #: (step, n, request, k): a running request's k-th step of its plan, whose blocks the pool takes (and
        #: frees) at that step, before the step's admissions (``allocate_slots`` for the running requests first)
        self.allocs: list[tuple[int, int, int, int]] = []
        self._n = 0
        self.hidden: tuple[set[int], set[int]] = (set(), set())
        #: step → the Mamba states the requests' chunks of that step cache (MambaManager
        #: ``cached_blocks_this_step``)
        self.step_states: dict[int, set[int]] = {}
        #: the waiting head found too few free blocks: nothing changes until a request finishes
        self.blocked = False
        #: requests finished (or refused) that the loop has not yet taken (``finish``)
        self.unacked = 0
        self.done: set[int] = set()
        self.resolved: list[tuple[Request, Lookup | None]] = []
        #: per request, the tokens each step scheduled for its prompt (kept when ``record`` is set, as
        #: validation/replay_vllm.py records vLLM's)
        self.record = False
        self.chunks: dict[int, list[int]] = {}

    def held_states(self, req: Request) -> list[int]:
        """Where the pool holds states along ``req`` once it has run."""
        while req.index not in self.done and self._advance():
            pass
        return self.cache.held_states(req)

    # the loop's protocol for an undeferred cache (``EngineCache``)
    def lookup(self, req: Request, keys: list[int]) -> Lookup:
        return self.cache.lookup(req, keys, self.hidden)

    def admit(self, req: Request, look: Lookup, keys: list[int]) -> bool:
        self.submit(req, keys)
        return True

    def submit(self, req: Request, keys: list[int]) -> None:
        self.waiting.append(_Entry(req, keys, self.now + 1))

    def submit_refused(self, req: Request) -> None:
        """A prompt at or past max_model_len: vLLM's input processing refuses it before the scheduler sees it."""

    def finish(self, req: Request) -> None:
        """Run the steps until a request in flight has finished (the client then sends the next): the loop
        calls this once per request it lets go, whichever finished."""
        while not self.unacked:
            if not self._advance():
                return
        self.unacked -= 1

    def take_resolved(self) -> list[tuple[Request, Lookup | None]]:
        out, self.resolved = self.resolved, []
        return out

    # --- the steps ------------------------------------------------------------------------------------

    def _advance(self) -> bool:
        """Run the next step that can change anything: the next one when a waiting request may be admitted,
        else the next at which a request finishes; False when nothing is left to run."""
        t = self.now + 1
        if not self.waiting or self.blocked:
            if not self.finishing:
                if self.waiting:  # blocked with nothing running: cannot happen (refused below)
                    self.blocked = False
                    return True
                return False
            t = max(t, min(self.finishing))
        self._step(t)
        self.now = t
        return True

    def _decoding(self, t: int) -> int:
        """The running requests that decode at step ``t`` (a token each)."""
        return sum(1 for e in self.running if e.decode_start <= t <= e.decode_end and t not in e.decode_skipped)

    def _left(self, t: int) -> int:
        return self.r.chunk - self.used.get(t, 0) - self._decoding(t)

    def _step(self, t: int) -> None:
        allocs, advance = self.allocs, self.cache.pool.advance
        while allocs and allocs[0][0] <= t:
            _, _, index, k = heapq.heappop(allocs)
            advance(index, k)
        pending, (hidden_a, hidden_m) = self.pending, self.hidden
        while pending and pending[0][0] <= t:
            _, _, kind, key = heapq.heappop(pending)
            (hidden_m if kind else hidden_a).discard(key)
        while self.waiting and not self.blocked and self.waiting[0].arrival <= t:
            if self._left(t) <= 0:
                break
            e = self.waiting[0]
            if not self._admit(e, t):
                break
        for e in self.finishing.pop(t, ()):
            self.cache.finish(e.req)
            self.running.remove(e)
            self.done.add(e.req.index)
            self.unacked += 1
            self.blocked = False
        used = self.used
        while self.used_steps and self.used_steps[0] <= t:
            used.pop(self.used_steps.pop(0), None)
        for step in [q for q in self.step_states if q <= t]:
            del self.step_states[step]

    def _admit(self, e: _Entry, t: int) -> bool:
        """Look ``e`` up at step ``t`` and lay out its steps; False when it is not admitted at this step."""
        r, cache = self.r, self.cache
        req = e.req
        look = cache.lookup(req, e.keys, self.hidden)
        if look.hit and cache._mamba and e.keys[look.hit // r.unit - 1] in self.step_states.get(t, ()):
            # a Mamba hit on a state another request's chunk caches in this very step: its forward has not run,
            # so allocate_slots refuses (MambaManager.get_num_blocks_to_allocate returns more blocks than the
            # pool has when the hit's last block is in cached_blocks_this_step, 0.23.0-0.33.0): it waits a step
            return False
        L = req.prompt_len
        pos = look.hit
        prefill: dict[int, int] = {}
        ends: list[int] = []
        s = t
        while pos < L:
            left = self._left(s)
            junction = look.junction if (s == t or r.junction_every_step) else 0
            end = cache.step_end(req, pos, left, junction) if left > 0 else pos
            if end > pos:
                prefill[s] = end - pos
                ends.append(end)
                pos = end
            elif s == t:
                return False  # the split leaves no token: admission stops at this step
            s += 1
        last_prefill = s - 1 if ends else t
        # the decode steps: max_tokens − 1 after the one that completes the prompt, each a token when the budget
        # has one left (only a step where the running requests' prefills take it can be full)
        k = max(req.output_len, 1) - 1
        skipped: set[int] = set()
        d = last_prefill + 1
        if k:
            need = k
            i = bisect_right(self.used_steps, last_prefill)
            while i < len(self.used_steps) and need:
                q = self.used_steps[i]
                if need <= q - d:
                    break
                need -= q - d
                if self._left(q) > 0:
                    need -= 1
                else:
                    skipped.add(q)
                d = q + 1
                i += 1
            end_step = d + need - 1 if need else d - 1
        else:
            end_step = last_prefill
        plan = cache._plan(req, look, e.keys, ends)
        visible, reached = self._visible(e, look, plan, t, (prefill, last_prefill, skipped))
        if not cache.pool.admit(req.index, look.hit, plan, True):
            if self.running:
                self.blocked = True
                return False
            self.waiting.popleft()  # nothing runs and the pool cannot hold it: refused
            self.resolved.append((req, None))
            self.done.add(req.index)
            self.unacked += 1
            return True
        self.waiting.popleft()
        e.look, e.prefill = look, prefill
        e.decode_start, e.decode_end, e.decode_skipped = last_prefill + 1, end_step if k else last_prefill, skipped
        e.finish = end_step
        self.running.append(e)
        self.resolved.append((req, look))
        if self.record:
            self.chunks[req.index] = [prefill[step] for step in sorted(prefill)]
        for step, tokens in prefill.items():
            if step in self.used:
                self.used[step] += tokens
            else:
                self.used[step] = tokens
                insort(self.used_steps, step)
        self.finishing.setdefault(end_step, []).append(e)
        # the plan's later steps, each at the scheduler step whose tokens reach its end
        marks = self._marks(look.hit, prefill)
        plan_steps = plan[0]
        for k in range(1, len(plan_steps) - 1):
            self._n += 1
            at = _step_at(marks, L, last_prefill, skipped, plan_steps[k + 1])
            heapq.heappush(self.allocs, (at, self._n, req.index, k))
        for step, key in reached:
            self.step_states.setdefault(step, set()).add(key)
        hidden_a, hidden_m = self.hidden
        for step, kind, key in visible:
            self._n += 1
            heapq.heappush(self.pending, (step, self._n, kind, key))
            (hidden_m if kind else hidden_a).add(key)
        return True

    @staticmethod
    def _marks(hit: int, prefill: dict[int, int]) -> list[tuple[int, int]]:
        """(the tokens reached, the step) of each prefill step in order, from the hit."""
        marks: list[tuple[int, int]] = []
        pos = hit
        for step in sorted(prefill):
            pos += prefill[step]
            marks.append((pos, step))
        return marks

    def _visible(
        self,
        e: _Entry,
        look: Lookup,
        plan: Plan,
        t: int,
        steps: tuple[dict[int, int], int, set[int]],
    ) -> tuple[list[tuple[int, int, int]], list[tuple[int, int]]]:
        """The blocks and states ``e``'s plan caches that no block caches yet (or only another running request's,
        still hidden), each with the step from which a lookup sees it: the first whose computed plus scheduled
        tokens reach it (step ``t``'s own are seen by the requests admitted after it at ``t``, so they are left
        out); and every state it caches past its hit with the step that caches it."""
        # its prefill tokens per step, its last prefill step, the steps its decoding skips
        prefill, last_prefill, skipped = steps
        cache, r = self.cache, self.r
        B, unit = r.block, r.unit
        L = e.req.prompt_len
        marks = self._marks(look.hit, prefill)
        kv_end = L + max(e.req.output_len - 1, 0)
        hidden_a, hidden_m = self.hidden

        def step_at(p: int) -> int:
            return _step_at(marks, L, last_prefill, skipped, p)

        out: list[tuple[int, int, int]] = []
        _, attn, _ = plan
        keys = e.keys
        first_attn = cache._attn[0] if cache._attn else None
        if first_attn is not None:
            if unit == B:
                for b in range(look.hit // B, len(attn)):
                    key = attn[b]
                    if key is None or (cache.pool.has(first_attn, key) and key not in hidden_a):
                        continue
                    end = (b + 1) * B
                    step = step_at(min(end, kv_end))
                    if step > t:
                        out.append((step, 0, key))
            else:  # hash units: each seen once its block (or the partial tail) is cached
                for u in range(look.hit // unit, min(len(keys), kv_end // unit)):
                    key = keys[u]
                    if cache.cached("a", key) and key not in hidden_a:
                        continue
                    end = min(cdiv((u + 1) * unit, B) * B, kv_end)
                    step = step_at(end)
                    if step > t:
                        out.append((step, 0, key))
        reached: list[tuple[int, int]] = []
        if cache._mamba:
            for p, key in cache.planned_states.items():
                if p <= look.hit:
                    continue
                step = step_at(min(p, kv_end))
                reached.append((step, key))
                if step > t and not (cache.cached("m", key) and key not in hidden_m):
                    out.append((step, 1, key))
        return out, reached


def _step_at(marks: list[tuple[int, int]], prompt: int, last_prefill: int, skipped: set[int], p: int) -> int:
    """The scheduler step at which a request's computed tokens reach ``p``: a prefill step (``marks``: the tokens
    reached and the step, in order), else the decode step (position ``prompt`` + j is reached at the j-th, the
    steps in ``skipped`` giving it none)."""
    for reached, step in marks:
        if reached >= p:
            return step
    j, d = p - prompt, last_prefill + 1
    while True:
        if d not in skipped:
            j -= 1
            if j <= 0:
                return d
        d += 1
