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

from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from hybridplan.replay.trace import Request

#: why a request reused less than it shares with an earlier one
REASONS = ("hit", "cold", "caching_off", "refused", "block_past_max_len", "before_first_checkpoint", "checkpoint_past_divergence",
           "not_admitted_yet", "retention", "evicted", "speculative", "partial")


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


@dataclass
class Run:
    """One policy over the whole trace."""

    label: str
    block: int
    requests: int = 0
    prompt_tokens: int = 0
    reused_tokens: int = 0
    with_hit: int = 0
    refused: list[tuple[int, str]] = field(default_factory=list)
    reasons: Counter = field(default_factory=Counter)
    outcomes: list[Outcome] = field(default_factory=list)
    #: Σ reused² (for the attention FLOPs saved: they grow with the position)
    reused_sq: int = 0
    evictions: int = 0
    peak_states: int = 0
    peak_blocks: int = 0
    keep_outcomes: bool = True

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
        self.reused_tokens += reused
        self.reused_sq += reused * reused
        self.with_hit += reused > 0
        self.reasons[reason] += 1


class PyIdeal:
    """A cache with no memory limit that resumes anywhere: the longest prefix a request shares with any earlier
    one, to the token. A trie of the prompts' runs kept flat: for each prefix of whole runs (known by a chained
    hash, as the caches' keys are) and each run key that follows it, the lengths those runs have; one dict
    entry per distinct (prefix, key), so a long trace of distinct prompts costs tens of bytes a run."""

    label = "ideal cache"

    def __init__(self) -> None:
        #: hash((prefix, key)) → the lengths of the runs keyed ``key`` seen after ``prefix``: an int, or a
        #: frozenset when there are several
        self.lengths: dict[int, object] = {}

    def visit(self, req: Request) -> int:
        """The tokens of ``req``'s prompt shared with any earlier request's prompt and output, then ``req``'s
        own prompt and output remembered (one walk does both: what the walk reads at a run is never what it
        wrote at an earlier one)."""
        full = req.with_output()
        runs = iter(full.runs if full.tokens is None else ((t, 1) for t in full.tokens))
        lengths = self.lengths
        get = lengths.get
        left = req.prompt_len  # the prompt's tokens still to match; the output's runs are only remembered
        node = n = 0
        for key, length in runs:  # while the prompt matches an earlier one
            slot = hash((node, key))
            have = get(slot)
            if have is None:
                lengths[slot] = length
            elif have == length or (type(have) is not int and length in have):
                if left > 0:
                    n += length
                left -= length
                node = hash((slot, length))
                continue
            else:
                if left > 0:
                    n += min(length, have if type(have) is int else max(have))
                lengths[slot] = frozenset((have, length)) if type(have) is int else have | {length}
            node = hash((slot, length))
            break
        remember = lengths.setdefault
        for key, length in runs:  # the rest, remembered
            slot = hash((node, key))
            have = remember(slot, length)
            if have != length and (type(have) is int or length not in have):
                lengths[slot] = frozenset((have, length)) if type(have) is int else have | {length}
            node = hash((slot, length))
        return n


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
    Ideal: type = NativeIdeal
except ImportError:
    Ideal = PyIdeal


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


@dataclass
class Policy:
    """A cache and how its runs are labelled."""

    label: str
    cache: object
    block: int
    max_len: int

    def renewed(self, max_len: int) -> Policy:
        """The same rules over an empty cache (an engine's cache is built from its rules, ``r``), taking prompts
        below ``max_len``."""
        return Policy(self.label, type(self.cache)(self.cache.r), self.block, max_len)


def replay(policies: list[Policy], requests: Iterable[Request], concurrency: int = 1, keep_outcomes: bool = True,
           progress: Callable[[int], None] | None = None) -> tuple[dict[str, Run], Run]:
    """Every policy over the same requests, and the ideal cache beside them."""
    ideal = Ideal()
    runs = {p.label: Run(p.label, p.block, keep_outcomes=keep_outcomes) for p in policies}
    ideal_run = Run(Ideal.label, 1, keep_outcomes=keep_outcomes)
    flights: dict[str, deque] = {p.label: deque() for p in policies}
    lanes = [(p, runs[p.label], flights[p.label]) for p in policies]
    for n, req in enumerate(requests, 1):
        prompt_len = req.prompt_len
        shared = min(ideal.visit(req), prompt_len - 1)
        stop = prompt_len + req.output_len
        refused = None
        for p, run, flight in lanes:
            cache = p.cache
            if prompt_len >= p.max_len:
                why = f"prompt of {prompt_len:,} tokens at or past max_model_len {p.max_len:,}"
                run.refused.append((req.index, why))
                run.add(Outcome(req.index, 0, 0, 0, 0, "refused"))
                refused = why
                continue
            while len(flight) >= concurrency:
                cache.finish(flight.popleft())
            keys = cache.keys(req, stop)
            look = cache.lookup(req, keys)
            while not cache.admit(req, look, keys):
                if not flight:
                    break
                cache.finish(flight.popleft())
                look = cache.lookup(req, keys)
            else:
                flight.append(req)
                reason = classify(look, req, shared, p.block, p.max_len)
                if keep_outcomes:
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
        else:
            ideal_run.add(Outcome(req.index, 0, 0, 0, 0, "refused"))
        if progress is not None:
            progress(n)
    for p, run, flight in lanes:
        while flight:
            p.cache.finish(flight.popleft())
        run.evictions = p.cache.evictions
        run.peak_states = p.cache.peak_states
        run.peak_blocks = p.cache.peak_blocks
    return runs, ideal_run
