"""SGLang's scheduler loop for `replay`: which requests share a prefill batch, where each one's chunks end, and
when what it computed enters the radix tree (radix_cache.py's ``Cache``). SGLang 0.5.9–0.5.23,
``managers/scheduler.py`` (``get_next_batch_to_run``, ``get_new_batch_prefill``, ``process_batch_result``) and
``managers/schedule_policy.py`` (``PrefillAdder``); validation/replay_sglang.py runs the release's own
``Scheduler`` against it.

One step of the loop is one forward:

- A prefill batch comes first whenever one can be formed. Its token budget is ``--chunked-prefill-size``:
  the request being chunked continues first (``add_chunked_req``), then the waiting requests in arrival order
  (the default ``fcfs`` policy); to 0.5.12 one whose whole remaining prompt reaches what is left of
  ``--max-prefill-tokens`` (16,384) ends the batch unless the batch is empty (``INPUT_CAP_UNTIL``). Each is
  matched against the tree as it stands at this step
  (``init_next_round_input``), so requests admitted in the same batch cannot hit each other. A request whose
  remaining prompt fits the budget left is taken whole; the first that does not is cut at the budget left
  (``add_one_req``'s truncation) and becomes the chunked request, and nothing more joins the batch.
- After the forward, each request of the batch is cached: a chunk that ends inside the prompt through
  ``cache_unfinished_req(chunked=True)`` (at the start of the next ``get_next_batch_to_run``), a finished
  prefill through ``cache_unfinished_req`` (or ``cache_finished_req`` when its only token is generated). The
  prefill samples the request's first output token.
- Otherwise the running requests decode one token each; one that reaches its output length is finished:
  ``cache_finished_req`` caches its KV (all of it under no_buffer; up to the last tracked state under
  extra_buffer) and its last state, and releases what it held.

Where a cached chunk keeps a Mamba state is the strategy's (radix_cache.py module docstring): no_buffer at the
chunk's end, extra_buffer at the chunk's last grid point or at the branching point inside it.

The overlap scheduler (``event_loop_overlap``, SGLang's default loop: on unless ``--disable-overlap-schedule``,
and never under no_buffer, which SGLang 0.5.9–0.5.13 run without it and 0.5.14–0.5.23 refuse with it) launches
batch k+1 before it processes batch k's result (``pop_and_process``; ``is_disable_overlap_for_batch`` keeps
the overlap unless ``SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP`` is set, off by default in every release).
What a prefill batch's finished prompts cache (``cache_unfinished_req`` in ``process_batch_result``) and what a
finished request caches (``cache_finished_req``) therefore reach the tree one batch late: the batch scheduled
next is matched without them, and the client learns of a finish one batch later. The chunked request is
cached as before, at the start of the next ``get_next_batch_to_run`` (``stash_chunked_request``), and the
requests of a prefill batch join the running batch there too, before their first token is processed. The
states a request tracks do not move: a prefill's at scheduling (``prepare_for_extend``), a decode's from the
tokens processed (``_mamba_prefix_cache_update``), in the same order either way.

The client keeps at most N requests in flight (the replay's concurrency), the next sent once the oldest in
flight has finished (the replay loop's ``finish``). Decoding with nothing to admit runs to the next finish in
one jump (nothing reaches the tree meanwhile).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hybridplan.engines.common import SchedulerLoop, floor_to
from hybridplan.engines.sglang.radix_cache import EVERY, Cache, Lookup, Rules, decode_track

if TYPE_CHECKING:
    from hybridplan.replay.trace import Request


#: ``--max-prefill-tokens`` (server_args.py's default, 0.5.9–0.5.23)
MAX_PREFILL_TOKENS = 16384
#: the first release whose PrefillAdder checks a request against --max-prefill-tokens only with chunked
#: prefill off (managers/schedule_policy.py ``add_one_req``: 0.5.9–0.5.12 ``real_input_tokens >=
#: self.rem_input_tokens and len(self.can_run_list) != 0`` ends the batch whatever the chunk; 0.5.13 adds
#: ``self.rem_chunk_tokens is None``)
INPUT_CAP_UNTIL = "0.5.13"


@dataclass
class _Entry:
    req: Request
    keys: list[int]
    look: Lookup | None = None
    #: prompt tokens computed (the hit counts as computed)
    done: int = 0
    generated: int = 0
    #: positions whose state this request has cached
    states: list[int] = field(default_factory=list)
    #: a prompt SGLang refuses: it passes the scheduler as one token and ends at that prefill
    aborted: bool = False
    #: output tokens launched (the overlap scheduler: its forwards run ahead of ``generated``)
    launched: int = 0


class Scheduled(SchedulerLoop):
    """The radix cache behind SGLang's scheduler loop: requests are submitted, stepped through prefill batches
    and decoding, and their lookups come out (``resolved``) when each is first scheduled. The replay loop
    (hybridplan/replay/loop.py) drives it through ``submit`` and ``finish``."""

    #: the replay loop records this cache's lookups as they are resolved, not at submission
    deferred = True

    def __init__(self, r: Rules) -> None:
        from hybridplan.engines.sglang.releases import release

        self.r = r
        self.input_cap = release(r.version).before(INPUT_CAP_UNTIL) if r.version else False
        self.cache = Cache(r)
        self.waiting: deque[_Entry] = deque()
        self.running: list[_Entry] = []
        self.chunked: _Entry | None = None
        self.done: set[int] = set()
        self.resolved: list[tuple[Request, Lookup | None]] = []
        #: the overlap scheduler: the last batch's result, processed after the next batch is scheduled
        self.overlap = r.overlap
        self.pending: Callable[[], None] | None = None
        #: whether ``pending`` is a decode step that finishes nobody (a state the next steps repeat)
        self.pending_plain = False
        #: the overlap scheduler's chunked request, cached at the start of the next step: (entry, start, end)
        self.stash: tuple[_Entry, int, int] | None = None

    def held_states(self, req: Request) -> list[int]:
        """Where the tree holds states along ``req`` once it has run (the loop runs it to its end first: the
        replay loop's own order at one in flight, `prefix`'s)."""
        self.finish(req)
        return self.cache.held_states(req)

    def submit(self, req: Request, keys: list[int]) -> None:
        self.waiting.append(_Entry(req, keys))

    # the loop's protocol for an undeferred cache (``EngineCache``): a lookup against the tree as it stands, and
    # admission as submission
    def lookup(self, req: Request, keys: list[int]) -> Lookup:
        return self.cache.lookup(req, keys)

    def admit(self, req: Request, look: Lookup, keys: list[int]) -> bool:
        self.submit(req, keys)
        return True

    def submit_refused(self, req: Request) -> None:
        """A prompt too long for the context: ``handle_generate_request`` aborts it but queues it, its prompt
        set to one token "to skip the long prefill" (managers/schedule_batch.py ``set_finish_with_abort``,
        0.5.9-0.5.23), so it takes one token of a prefill batch's budget and ends there."""
        self.waiting.append(_Entry(req, [], aborted=True))

    def finish(self, req: Request) -> None:
        """Run the loop until ``req`` has finished (or nothing can run: then it is refused)."""
        while req.index not in self.done:
            if not self.step():
                if not self.waiting:
                    return
                self._refuse_waiting()

    def _refuse_waiting(self) -> None:
        """Nothing runs and the first waiting request cannot be admitted: the pools cannot hold it."""
        e = self.waiting.popleft()
        self.resolved.append((e.req, None))
        self.done.add(e.req.index)

    def take_resolved(self) -> list[tuple[Request, Lookup | None]]:
        out, self.resolved = self.resolved, []
        return out

    # --- one step --------------------------------------------------------------------------------------

    def step(self) -> bool:
        """One forward: a prefill batch if one forms, else a decode jump; False when nothing can run."""
        if self.overlap:
            return self._step_overlap()
        batch = self._prefill_batch()
        if batch:
            self._after_prefill(batch)
            return True
        if self.running:
            self._decode()
            return True
        return False

    def _prefill_batch(self) -> list[tuple[_Entry, int]]:
        r = self.r
        budget = r.chunk
        batch: list[tuple[_Entry, int]] = []
        if self.chunked is not None:
            e, self.chunked = self.chunked, None
            n = min(e.req.prompt_len - e.done, budget)
            batch.append((e, n))
            budget -= n
            if e.done + n < e.req.prompt_len:
                self.chunked = e
                return batch
        taken = sum(n for _, n in batch)
        while self.waiting and budget > 0:
            e = self.waiting[0]
            if e.aborted:
                self.waiting.popleft()
                batch.append((e, 1))
                budget -= 1
                taken += 1
                continue
            look = self.cache.lookup(e.req, e.keys)
            if self.input_cap and batch and e.req.prompt_len - look.hit >= MAX_PREFILL_TOKENS - taken:
                break  # 0.5.9-0.5.12: the batch's --max-prefill-tokens, the request's whole prompt counted
            if not self.cache.reserve(e.req, look, e.keys):
                break  # NO_TOKEN: it waits for memory
            self.waiting.popleft()
            e.look, e.done = look, look.hit
            self.resolved.append((e.req, look))
            need = e.req.prompt_len - look.hit
            n = min(need, budget)
            batch.append((e, n))
            budget -= n
            taken += n
            if n < need:
                self.chunked = e
                break
        return batch

    def _chunk_state(self, e: _Entry, start: int, end: int) -> int | None:
        """Where the chunk [start, end) of ``e``'s prompt leaves a state (None: nowhere)."""
        r = self.r
        if r.strategy == "no_buffer":
            return end
        if r.strategy.startswith("extra_buffer"):
            tracked = start + floor_to(end - start, r.grid)
            b = e.look.branching if e.look is not None else 0
            if b and start < b < tracked and (b - start) % r.grid == 0:
                tracked = b
            return tracked if tracked > start else None
        return None

    def _after_prefill(self, batch: list[tuple[_Entry, int]]) -> None:
        chunked = self.chunked
        for e, n in sorted(batch, key=lambda x: x[0] is chunked):  # the chunked request is cached last
            if e.aborted:
                continue
            start = e.done
            e.done += n
            if self.r.strategy in (EVERY, "off"):
                if e.done >= e.req.prompt_len:  # whatever these rules keep, at once (counterfactuals)
                    self._admit_rest(e)
                continue
            pos = self._chunk_state(e, start, e.done)
            if pos is not None:
                e.states.append(pos)
            limit = e.done if self.r.strategy == "no_buffer" else max(e.states, default=e.look.hit)
            self.cache.insert(e.req, e.keys, [pos] if pos is not None else [], limit)
            if e.done >= e.req.prompt_len:
                e.generated = 1
                if e.generated >= max(e.req.output_len, 1):
                    self._finished(e)
                else:
                    self.running.append(e)

    def _admit_rest(self, e: _Entry) -> None:
        """The counterfactual strategies: the states ``Cache.state_positions`` gives, cached when the prefill
        is done; the request then decodes as any other."""
        look = e.look
        kv_end = e.req.prompt_len + max(e.req.output_len - 1, 0)
        positions = [p for p in self.cache.state_positions(e.req, look.hit, look.branching) if p <= kv_end]
        self.cache.insert(e.req, e.keys, positions, kv_end if self.r.strategy == EVERY else look.hit)
        e.generated = 1
        if e.generated >= max(e.req.output_len, 1):
            self._finished(e, cached=True)
        else:
            self.running.append(e)

    def _decode(self) -> None:
        """Decode steps up to the next finish (one jump: nothing is cached meanwhile)."""
        k = min(max(e.req.output_len, 1) - e.generated for e in self.running)
        for e in self.running:
            e.generated += k
        left = []
        for e in self.running:
            if e.generated >= max(e.req.output_len, 1):
                self._finished(e)
            else:
                left.append(e)
        self.running = left

    def _finished(self, e: _Entry, cached: bool = False) -> None:
        """``cache_finished_req``: the KV and the last state, then the request's holdings released."""
        r = self.r
        L = e.req.prompt_len
        kv_end = L + max(e.req.output_len - 1, 0)
        if not cached and r.strategy not in (EVERY, "off"):
            if r.strategy == "no_buffer":
                self.cache.insert(e.req, e.keys, [kv_end], kv_end)
            elif e.req.output_len:
                last = decode_track(r, L, kv_end)
                if last > max(e.states, default=0):
                    e.states.append(last)
                    self.cache.insert(e.req, e.keys, [last], last)
        self.cache.finish(e.req)
        self.done.add(e.req.index)

    # --- the overlap scheduler ---------------------------------------------------------------------------

    def _step_overlap(self) -> bool:
        """One pass of ``event_loop_overlap``: the chunked request of the last batch is cached, the next batch
        is formed against the tree as it stands and launched, then the last batch's result is processed; this
        batch's is left for the next pass. False when nothing ran and nothing was left to process."""
        if self.stash is not None:  # get_next_batch_to_run's start: stash_chunked_request
            e, start, end = self.stash
            self.stash = None
            self._cache_chunk(e, start, end)
        last, plain = self.pending, self.pending_plain
        self.pending, self.pending_plain = None, False
        batch = self._prefill_batch()
        if batch:
            self.pending = self._launch_prefill(batch)
        else:
            decoding = [e for e in self.running if e.launched < max(e.req.output_len, 1)]
            if decoding:
                if plain or last is None:  # nothing changes until one of them finishes: the steps between at once
                    k = min(max(e.req.output_len, 1) - e.launched for e in decoding) - 1
                    for e in decoding:
                        e.launched += k
                        e.generated += k
                self.pending, self.pending_plain = self._launch_decode(decoding)
        if last is not None:
            last()
        return bool(batch) or self.pending is not None or last is not None

    def _launch_prefill(self, batch: list[tuple[_Entry, int]]) -> Callable[[], None]:
        """The batch launched: its chunks counted, its finished prompts in the running batch, the chunked
        request stashed; what ``process_batch_result`` then caches, returned."""
        chunked = self.chunked
        done: list[tuple[_Entry, int, int]] = []
        for e, n in batch:
            if e.aborted:
                continue
            start = e.done
            e.done += n
            if e is chunked:
                self.stash = (e, start, e.done)
                continue
            e.launched = 1
            self.running.append(e)
            done.append((e, start, e.done))

        def process() -> None:
            for e, start, end in done:
                if self.r.strategy in (EVERY, "off"):
                    self.running.remove(e)
                    self._admit_rest(e)
                    continue
                self._cache_chunk(e, start, end)
                e.generated = 1
                if e.generated >= max(e.req.output_len, 1):
                    self.running.remove(e)
                    self._finished(e)

        return process

    def _launch_decode(self, decoding: list[_Entry]) -> tuple[Callable[[], None], bool]:
        """One decode step launched for ``decoding``; its processing returned, and whether it finishes
        nobody."""
        for e in decoding:
            e.launched += 1
        finishing = [e for e in decoding if e.launched >= max(e.req.output_len, 1)]

        def process() -> None:
            for e in decoding:
                e.generated += 1
            for e in finishing:
                self.running.remove(e)
                self._finished(e)

        return process, not finishing

    def _cache_chunk(self, e: _Entry, start: int, end: int) -> None:
        """``cache_unfinished_req`` after the chunk [start, end) of ``e``'s prompt (as ``_after_prefill``)."""
        if self.r.strategy in (EVERY, "off"):
            return
        pos = self._chunk_state(e, start, end)
        if pos is not None:
            e.states.append(pos)
        limit = end if self.r.strategy == "no_buffer" else max(e.states, default=e.look.hit)
        self.cache.insert(e.req, e.keys, [pos] if pos is not None else [], limit)
