"""One replay loop for every cache policy: requests in trace order, at most ``concurrency`` in flight, each
looked up, admitted (its blocks or slots pinned), cached, and released when it finishes. docs/replay.md gives
the semantics.

A policy is an object with ``keys(req, stop)``, ``lookup(req, keys)``, ``admit(req, lookup, keys)`` (False
when its pool cannot hold the request now) and ``finish(req)``; the engines' live in
hybridplan/engines/vllm/prefix_cache.py and hybridplan/engines/sglang/radix_cache.py, the ideal one here.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from hybridplan.replay.trace import Prompt, Request

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
        self.requests += 1
        self.prompt_tokens += o.prompt
        self.reused_tokens += o.reused
        self.reused_sq += o.reused * o.reused
        self.with_hit += o.reused > 0
        self.reasons[o.reason] += 1
        if self.keep_outcomes:
            self.outcomes.append(o)


class Ideal:
    """A cache with no memory limit that resumes anywhere: the longest prefix a request shares with any earlier
    one, to the token (a trie of the prompts' runs)."""

    label = "ideal cache"

    def __init__(self) -> None:
        self.root: dict = {}

    def shared(self, p: Prompt) -> int:
        node, n = self.root, 0
        for key, length in (p.runs if p.tokens is None else ((t, 1) for t in p.tokens)):
            child = node.get((key, length))
            if child is None:
                n += min(length, node.get(("len", key), 0))
                break
            n += length
            node = child
        return n

    def insert(self, p: Prompt) -> None:
        node = self.root
        for key, length in (p.runs if p.tokens is None else ((t, 1) for t in p.tokens)):
            lk = ("len", key)
            node[lk] = max(node.get(lk, 0), length)
            node = node.setdefault((key, length), {})


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


def replay(policies: list[Policy], requests: Iterable[Request], concurrency: int = 1, keep_outcomes: bool = True,
           progress: Callable[[int], None] | None = None) -> tuple[dict[str, Run], Run]:
    """Every policy over the same requests, and the ideal cache beside them."""
    ideal = Ideal()
    runs = {p.label: Run(p.label, p.block, keep_outcomes=keep_outcomes) for p in policies}
    ideal_run = Run(Ideal.label, 1, keep_outcomes=keep_outcomes)
    flights: dict[str, deque] = {p.label: deque() for p in policies}
    for n, req in enumerate(requests, 1):
        shared = min(ideal.shared(req.prompt), req.prompt_len - 1)
        refused = None
        for p in policies:
            run, flight, cache = runs[p.label], flights[p.label], p.cache
            if req.prompt_len >= p.max_len:
                why = f"prompt of {req.prompt_len:,} tokens at or past max_model_len {p.max_len:,}"
                run.refused.append((req.index, why))
                run.add(Outcome(req.index, 0, 0, 0, 0, "refused"))
                refused = why
                continue
            while len(flight) >= concurrency:
                cache.finish(flight.popleft())
            stop = req.prompt_len + req.output_len
            keys = cache.keys(req, stop)
            look = cache.lookup(req, keys)
            while not cache.admit(req, look, keys):
                if not flight:
                    break
                cache.finish(flight.popleft())
                look = cache.lookup(req, keys)
            else:
                flight.append(req)
                run.add(Outcome(req.index, req.prompt_len, look.hit, look.attention_hit, shared,
                                classify(look, req, shared, p.block, p.max_len)))
                continue
            why = "needs more blocks than the whole pool holds"
            run.refused.append((req.index, why))
            run.add(Outcome(req.index, 0, 0, 0, 0, "refused"))
        if refused is None or not policies:
            ideal_run.add(Outcome(req.index, req.prompt_len, shared, shared, shared, "hit" if shared else "cold"))
        else:
            ideal_run.add(Outcome(req.index, 0, 0, 0, 0, "refused"))
        ideal.insert(req.with_output())
        if progress is not None:
            progress(n)
    for p in policies:
        flight = flights[p.label]
        while flight:
            p.cache.finish(flight.popleft())
        run = runs[p.label]
        run.evictions = p.cache.evictions
        run.peak_states = p.cache.peak_states
        run.peak_blocks = p.cache.peak_blocks
    return runs, ideal_run
