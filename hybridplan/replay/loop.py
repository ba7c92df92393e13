"""One replay loop for every cache policy: requests in trace order, at most ``concurrency`` in flight, each
looked up, admitted (its blocks or slots pinned), cached, and released when it finishes. docs/replay.md gives
the semantics.

A policy is an object with ``keys(req, stop)``, ``lookup(req, keys)``, ``admit(req, lookup, keys)`` (False
when its pool cannot hold the request now) and ``finish(req)``; the engines' live in
hybridplan/engines/vllm/prefix_cache.py and hybridplan/engines/sglang/radix_cache.py, the ideal one here. The
engines' caches are built from their rules (``Cache(r)``) and also say where they hold states along a request
(``held_states(req)``: `prefix`'s checkpoints of the first request).
"""

from __future__ import annotations

import gc
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from struct import Struct
from typing import Any, Protocol, cast

from hybridplan.replay.trace import Request, step

#: why a request reused less than it shares with an earlier one
REASONS = (
    "hit",
    "cold",
    "caching_off",
    "refused",
    "block_past_max_len",
    "before_first_checkpoint",
    "checkpoint_past_divergence",
    "not_admitted_yet",
    "retention",
    "evicted",
    "speculative",
    "partial",
)


@dataclass
class Outcome:
    index: int
    prompt: int
    reused: int
    #: what the attention KV alone would have given (the blocks found from the left)
    attention_hit: int
    #: what an ideal cache gives: the longest prefix shared with any earlier request
    shared: int
    reason: str


@dataclass(slots=True)
class Run:
    """One policy over the whole trace (slotted, and ``reasons`` a plain dict: ``count`` runs for every request
    and policy, and a Counter's item update costs as much as the rest of it)."""

    label: str
    block: int
    requests: int = 0
    prompt_tokens: int = 0
    reused_tokens: int = 0
    with_hit: int = 0
    refused: list[tuple[int, str]] = field(default_factory=list)
    #: requests by reason (``REASONS``), the reasons met only
    reasons: dict[str, int] = field(default_factory=dict)
    outcomes: list[Outcome] = field(default_factory=list)
    #: Σ reused² (for the attention FLOPs saved: they grow with the position)
    reused_sq: int = 0
    evictions: int = 0
    peak_states: int = 0
    peak_blocks: int = 0
    keep_outcomes: bool = True
    #: the longest prompt refused at max_model_len (0: none)
    longest_refused: int = 0
    #: a host tier's hits and write-backs (SGLang HiCache, ``host_stats()`` of the cache); None without one
    host: dict | None = None

    @property
    def computed_tokens(self) -> int:
        return self.prompt_tokens - self.reused_tokens

    @property
    def hit_rate(self) -> float:
        return self.reused_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def add(self, o: Outcome) -> None:
        self.count(o.prompt, o.reused, o.reason)
        if self.keep_outcomes:
            self.outcomes.append(o)

    def count(self, prompt: int, reused: int, reason: str) -> None:
        """One request's figures into the totals (``add`` without the per-request record)."""
        self.requests += 1
        self.prompt_tokens += prompt
        if reused:
            self.reused_tokens += reused
            self.reused_sq += reused * reused
            self.with_hit += 1
        reasons = self.reasons
        reasons[reason] = reasons.get(reason, 0) + 1


class PyIdeal:
    """A cache with no memory limit that resumes anywhere: the longest prefix a request shares with any earlier
    one, to the token.

    A radix tree of the requests' runs (prompt and output), path-compressed and kept flat. A run is known by the
    chain after it (``Prompt.chains``: a hash of the whole runs up to its end, so equal exactly when the prefixes
    up to there are, hash collisions aside, as for the caches' keys) and by its length. An edge is one request's
    runs from a branch point on, as bytes of (chain after, length) int64 pairs (``Prompt.pairs``), until a later
    request parts from it; it is found by its first chain, which names both where it starts and its first run.
    A request follows the edges a slice at a time, splits the one it parts from (the head keeps its place; the
    rest and the request's own remaining runs start at the split point) and adds only its runs past that point.
    So a trace of distinct prompts costs one edge a request and 16 bytes a run, where a dict entry a run cost
    about a hundred.

    What chains alone cannot tell is a run with an earlier one's key and another length (the first min of the
    two lengths are shared): ``lengths`` keeps, per (branch point, key) of an edge's first run, the longest such
    run; the rest cut off at a split is checked against the parting request's key with one hash, and when the
    keys differ its length is kept in ``cut`` for a later request to check the same way."""

    label = "ideal cache"

    def __init__(self) -> None:
        #: the chain after an edge's first run → the edge
        self.edges: dict[int, bytes] = {}
        #: hash((branch point, key)) → the longest first run with that key of the edges starting there whose key
        #: is known (the requests' own remaining runs; a rest cut off whose key matched)
        self.lengths: dict[int, int] = {}
        #: split point → the length of the first run of the rest cut off there, when its key is not known
        self.cut: dict[int, int] = {}

    def visit(self, req: Request) -> int:
        """The tokens of ``req``'s prompt shared with any earlier request's prompt and output, then ``req``'s
        own prompt and output remembered."""
        full = req.with_output()
        pairs = full.pairs()
        runs: Sequence[tuple[Any, int]]
        if full.tokens is not None:  # a token is a run of one (keyed by its id)
            runs, prompt_end = tuple(zip(full.tokens, repeat(1))), 2 * req.prompt_len
        else:
            runs, prompt_end = full.runs, 2 * len(req.prompt.runs)
            if len(pairs) != 2 * len(runs):  # runs of no tokens are no part of a prefix
                runs = [run for run in runs if run[1]]
                prompt_end = 2 * sum(1 for run in req.prompt.runs if run[1])
        seq = _pack(pairs)
        edges = self.edges
        n = node = i = 0  # i: where the request's pairs are matched up to (an index into pairs, 8 bytes an entry)
        end = len(pairs)
        while i < end:
            first = pairs[i]
            edge = edges.get(first)
            if edge is None:  # no earlier run like this one here: the rest is the request's own
                key, length = runs[i >> 1][0], pairs[i + 1]
                slot = hash((node, key))
                lengths = self.lengths
                have = lengths.get(slot, 0)
                if length > have:
                    lengths[slot] = length
                cut = self.cut.get(node)
                if cut is not None and cut > have and step(node, key, cut) in edges:
                    have = cut
                if have and i < prompt_end:
                    n += min(length, have)
                edges[first] = seq[8 * i :] if i else seq
                break
            m = _common(edge, seq, 8 * i, min(len(edge), 8 * (end - i))) >> 3
            if i < prompt_end:
                n += sum(pairs[i + 1 : min(i + m, prompt_end) : 2])
            i += m
            node = pairs[i - 2]
            if 8 * m == len(edge):  # on from the branch point at its end
                continue
            if i == end:  # the request ends along the edge
                break
            other_first, other = _PAIR.unpack_from(edge, 8 * m)
            edges[first] = edge[: 8 * m]
            edges[other_first] = edge[8 * m :]
            edges[pairs[i]] = seq[8 * i :]
            key, length = runs[i >> 1][0], pairs[i + 1]
            if step(node, key, other) == other_first:  # the same key, another length
                if i < prompt_end:
                    n += min(length, other)
                self.lengths[hash((node, key))] = max(length, other)
            else:
                self.lengths[hash((node, key))] = length
                self.cut[node] = other
            break
        return n


#: one (chain, length) pair of an edge
_PAIR = Struct("=qq")
#: a packer by count of values (a few hundred counts in a trace; emptied past 4096)
_packers: dict[int, Struct] = {}


def _pack(values: list[int]) -> bytes:
    """``values`` as int64s in the machine's order, one call (array('q', values) converts each value through
    PyArg_Parse, about twice the cost)."""
    packer = _packers.get(len(values))
    if packer is None:
        if len(_packers) >= 4096:
            _packers.clear()
        packer = _packers[len(values)] = Struct(f"={len(values)}q")
    return packer.pack(*values)


def _common(edge: bytes, seq: bytes, at: int, limit: int) -> int:
    """How many of ``edge``'s first ``limit`` bytes equal ``seq``'s from ``at``, in whole pairs (16 bytes); the
    first pair is known equal. Compared a slice at a time: the whole, then halving."""
    if edge[:limit] == seq[at : at + limit]:
        return limit
    lo, hi = 16, limit  # equal up to lo, not up to hi
    while hi - lo > 16:
        mid = lo + ((hi - lo) >> 5 << 4)
        if edge[lo:mid] == seq[at + lo : at + mid]:
            lo = mid
        else:
            hi = mid
    return lo


class NativeIdeal:
    """The ideal cache in C (hybridplan/replay/_speedups.c ``Ideal``): ``PyIdeal``'s answers, from a radix tree
    of the requests' runs that keeps 16 bytes a run."""

    label = PyIdeal.label

    def __init__(self) -> None:
        from hybridplan.replay._speedups import Ideal as Tree

        self._tree = Tree()

    def visit(self, req: Request) -> int:
        full = req.with_output()
        return self._tree.visit(full.runs, full.tokens, req.prompt_len)


try:
    from hybridplan.replay import _speedups  # noqa: F401 - built where a C compiler was at hand

    Ideal: type[PyIdeal] | type[NativeIdeal] = NativeIdeal
except ImportError:
    Ideal = PyIdeal


def _record(p: Policy, run: Run, resolved: list, pending: dict[int, int]) -> None:
    """The outcomes of a deferred policy's requests, as its scheduler looked them up (None: refused, the pool
    cannot hold it)."""
    for req, look in resolved:
        shared = pending.pop(req.index)
        if look is None:
            run.refused.append((req.index, "needs more blocks than the whole pool holds"))
            run.add(Outcome(req.index, 0, 0, 0, 0, "refused"))
            continue
        reason = classify(look, req, shared, p.block, p.max_len)
        if run.keep_outcomes:
            run.add(Outcome(req.index, req.prompt_len, look.hit, look.attention_hit, shared, reason))
        else:
            run.count(req.prompt_len, look.hit, reason)


def classify(look, req: Request, shared: int, block: int, max_len: int) -> str:
    if look.hit:
        return "hit" if look.hit >= min(shared, req.prompt_len - 1) or shared == 0 else "partial"
    if shared == 0:
        return "cold"
    if getattr(look, "off", False):
        return "caching_off"
    if block > max_len:
        return "block_past_max_len"
    if min(shared, req.prompt_len - 1) < block:
        return "before_first_checkpoint"
    if look.evicted_state:
        return "evicted"
    if look.retention_dropped:
        return "retention"
    if look.junction:
        return "not_admitted_yet"
    if look.eagle_cut and look.attention_hit >= block:
        return "speculative"
    if look.attention_hit >= block:
        return "checkpoint_past_divergence"
    return "evicted"


class EngineCache(Protocol):
    """What the loop asks of an engine's cache (hybridplan/engines/*/prefix_cache.py and radix_cache.py)."""

    r: Any  # the engine's rules the cache was built from

    def __init__(self, r: Any) -> None: ...
    def keys(self, req: Request, stop: int) -> list[int]: ...
    def lookup(self, req: Request, keys: list[int]) -> Any: ...
    def admit(self, req: Request, look: Any, keys: list[int]) -> bool: ...
    def finish(self, req: Request) -> None: ...
    def held_states(self, req: Request) -> list[int]: ...
    @property
    def evictions(self) -> int: ...
    @property
    def peak_states(self) -> int: ...
    @property
    def peak_blocks(self) -> int: ...


class DeferredCache(EngineCache, Protocol):
    """A cache whose engine's scheduler decides when a request is looked up (``deferred``: SGLang's,
    hybridplan/engines/sglang/scheduler.py): the loop submits, and takes the lookups it resolved."""

    deferred: bool

    def submit(self, req: Request, keys: list[int]) -> None: ...
    def submit_refused(self, req: Request) -> None: ...
    def take_resolved(self) -> list: ...


def _deferred(cache: EngineCache) -> DeferredCache | None:
    return cast(DeferredCache, cache) if getattr(cache, "deferred", False) else None


@dataclass
class Policy:
    """A cache and how its runs are labelled."""

    label: str
    cache: EngineCache
    block: int
    max_len: int
    #: the most requests in flight for this policy (None: the replay's ``concurrency``): an engine's running
    #: limit caps what the workload asks for
    concurrency: int | None = None
    #: a counterfactual run beside the rows (`replay`'s gap attribution, a what-if): its refusals leave the
    #: ideal cache's figures alone, and it keeps no per-request record
    aside: bool = False

    def renewed(self, max_len: int) -> Policy:
        """The same rules over an empty cache (an engine's cache is built from its rules, ``r``), taking prompts
        below ``max_len``."""
        return Policy(self.label, type(self.cache)(self.cache.r), self.block, max_len, self.concurrency, self.aside)


def replay(
    policies: list[Policy],
    requests: Iterable[Request],
    concurrency: int = 1,
    keep_outcomes: bool = True,
    progress: Callable[[int], None] | None = None,
) -> tuple[dict[str, Run], Run]:
    """Every policy over the same requests, and the ideal cache beside them. Python's cycle collector is paused
    meanwhile (and resumed after, if it was running): the replay makes millions of objects, none of them in a
    reference cycle (requests, prompts, their keys, the caches' dicts and tuples, the tree's bytes), so they are
    freed by reference counting alone while the collector's passes over them cost about a seventh of the time."""
    running = gc.isenabled()
    gc.disable()
    try:
        return _replay(policies, requests, concurrency, keep_outcomes, progress)
    finally:
        if running:
            gc.enable()


def _replay(
    policies: list[Policy],
    requests: Iterable[Request],
    concurrency: int,
    keep_outcomes: bool,
    progress: Callable[[int], None] | None,
) -> tuple[dict[str, Run], Run]:
    ideal = Ideal()
    runs = {p.label: Run(p.label, p.block, keep_outcomes=keep_outcomes and not p.aside) for p in policies}
    ideal_run = Run(Ideal.label, 1, keep_outcomes=keep_outcomes)
    flights: dict[str, deque] = {p.label: deque() for p in policies}
    lanes = [(p, runs[p.label], flights[p.label], p.concurrency or concurrency) for p in policies]
    #: per deferred policy, the requests submitted and not yet resolved → what they share with earlier ones
    deferred: dict[str, dict[int, int]] = {p.label: {} for p in policies}
    for n, req in enumerate(requests, 1):
        prompt_len = req.prompt_len
        shared = min(ideal.visit(req), prompt_len - 1)
        stop = prompt_len + req.output_len
        refused = None
        for p, run, flight, in_flight in lanes:
            cache = p.cache
            if prompt_len >= p.max_len:
                why = f"prompt of {prompt_len:,} tokens at or past max_model_len {p.max_len:,}"
                run.refused.append((req.index, why))
                run.add(Outcome(req.index, 0, 0, 0, 0, "refused"))
                if prompt_len > run.longest_refused:
                    run.longest_refused = prompt_len
                if not p.aside:
                    refused = why
                if (dc := _deferred(cache)) is not None:  # the engine's scheduler still sees it pass
                    dc.submit_refused(req)
                continue
            while len(flight) >= in_flight:
                cache.finish(flight.popleft())
            keys = cache.keys(req, stop)
            if (dc := _deferred(cache)) is not None:  # an engine's scheduler decides when it is looked up
                dc.submit(req, keys)
                flight.append(req)
                deferred[p.label][req.index] = shared
                _record(p, run, dc.take_resolved(), deferred[p.label])
                continue
            look = cache.lookup(req, keys)
            while not cache.admit(req, look, keys):
                if not flight:
                    break
                cache.finish(flight.popleft())
                look = cache.lookup(req, keys)
            else:
                flight.append(req)
                reason = classify(look, req, shared, p.block, p.max_len)
                if run.keep_outcomes:
                    run.add(Outcome(req.index, prompt_len, look.hit, look.attention_hit, shared, reason))
                else:
                    run.count(prompt_len, look.hit, reason)
                continue
            why = "needs more blocks than the whole pool holds"
            run.refused.append((req.index, why))
            run.add(Outcome(req.index, 0, 0, 0, 0, "refused"))
        if refused is None or not policies:
            if keep_outcomes:
                ideal_run.add(Outcome(req.index, prompt_len, shared, shared, shared, "hit" if shared else "cold"))
            else:
                ideal_run.count(prompt_len, shared, "hit" if shared else "cold")
        else:  # what it shares is kept (the gap attribution's ideal takes every request)
            ideal_run.add(Outcome(req.index, 0, 0, 0, shared, "refused"))
        if progress is not None:
            progress(n)
    for p, run, flight, _ in lanes:
        while flight:
            p.cache.finish(flight.popleft())
        if (dc := _deferred(p.cache)) is not None:
            _record(p, run, dc.take_resolved(), deferred[p.label])
            run.outcomes.sort(key=lambda o: o.index)
        run.evictions = p.cache.evictions
        run.peak_states = p.cache.peak_states
        run.peak_blocks = p.cache.peak_blocks
        if (stats := getattr(p.cache, "host_stats", None)) is not None:
            run.host = stats()
    return runs, ideal_run
