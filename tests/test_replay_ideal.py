"""The ideal cache (hybridplan/replay/loop.py: ``NativeIdeal``, the C one a replay uses where it was built, and
its Python twin ``PyIdeal``) and the prompt's chained keys (hybridplan/replay/trace.py
``Prompt.chains``, ``unit_keys``, ``point_key``) against their definitions, written out the slow way."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridplan.replay.loop import NativeIdeal, PyIdeal
from hybridplan.replay.trace import Prompt, Request, step
from tests.helpers import native

pytestmark = pytest.mark.unit


def _tokens(p: Prompt) -> list:
    """A prompt token by token: token j of a run keyed k is (k, j), the same token in every prompt that has the
    run (the trace module's meaning of a run); a token-id prompt is its ids."""
    if p.tokens is not None:
        return list(p.tokens)
    return [(k, j) for k, n in p.runs for j in range(n)]


def _brute(reqs: list[Request]) -> list[int]:
    """Per request, the longest common prefix of its prompt's tokens with any earlier request's prompt followed
    by its output (what the ideal cache is defined to give: a cache with no limit that resumes anywhere holds
    every earlier prompt and output, and a prompt reuses at most its own tokens), token by token."""
    out, seen = [], []
    for r in reqs:
        mine = _tokens(r.prompt)
        best = 0
        for other in seen:
            n = 0
            for a, b in zip(mine, other):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        out.append(best)
        seen.append(_tokens(r.with_output()))
    return out


_KEYS = st.sampled_from(["a", "b", "c", 7, ("reply", 0)])
#: both builds of the ideal cache, held to the same definition
BOTH = pytest.mark.parametrize(
    "Ideal", [pytest.param(NativeIdeal, marks=native("hybridplan.replay._speedups")), PyIdeal], ids=["c", "python"]
)
_RUN = st.tuples(_KEYS, st.integers(0, 4))


@st.composite
def _run_trace(draw) -> list[Request]:
    """Small run traces: a few keys, so that runs with equal keys and other lengths meet; runs of no tokens;
    prompts that are an earlier prompt cut short (inside a run too) or grown; outputs a later prompt quotes."""
    reqs: list[Request] = []
    for i in range(draw(st.integers(1, 10))):
        runs = list(draw(st.lists(_RUN, max_size=5)))
        if reqs and draw(st.booleans()):
            base = list(draw(st.sampled_from(reqs)).with_output().runs)
            cut = draw(st.integers(0, len(base)))
            head = base[:cut]
            if head and draw(st.booleans()):  # the last run taken only in part
                k, n = head[-1]
                head[-1] = (k, draw(st.integers(0, n)))
            runs = head + runs
        if sum(n for _, n in runs) == 0:
            runs.append(("a", 1))
        quoted = draw(st.sampled_from([None, "reply"]))  # the output is the run a later prompt has as ("reply", 0)
        reqs.append(Request(i, Prompt(runs=tuple(runs)), draw(st.integers(0, 3)), float(i), "", output_key=quoted))
    return reqs


@st.composite
def _token_trace(draw) -> list[Request]:
    reqs: list[Request] = []
    for i in range(draw(st.integers(1, 10))):
        ids = draw(st.lists(st.integers(0, 3), min_size=1, max_size=8))
        if reqs and draw(st.booleans()):
            base = draw(st.sampled_from(reqs)).prompt.tokens
            ids = list(base[: draw(st.integers(0, len(base)))]) + ids
        reqs.append(Request(i, Prompt(tokens=tuple(ids)), draw(st.integers(0, 3)), float(i), ""))
    return reqs


@BOTH
@settings(max_examples=400, deadline=None)
@given(reqs=st.one_of(_run_trace(), _token_trace()))
def test_ideal_is_the_longest_prefix_shared_with_any_earlier_request(Ideal, reqs):
    ideal = Ideal()
    assert [ideal.visit(r) for r in reqs] == _brute(reqs)


@BOTH
def test_ideal_zero_length_run_changes_nothing(Ideal):
    """A run of no tokens is no token: (a, 2) (z, 0) (b, 1) and (a, 2) (b, 1) are the same three tokens."""
    ideal = Ideal()
    ideal.visit(Request(0, Prompt(runs=(("a", 2), ("z", 0), ("b", 1))), 0))
    assert ideal.visit(Request(1, Prompt(runs=(("a", 2), ("b", 1), ("c", 1))), 0)) == 3


@BOTH
def test_ideal_same_key_other_length_shares_the_shorter(Ideal):
    """A run keyed b of 3 tokens and one of 5 share their first 3; the tree meets it at a branch point (a later
    run after a split) and inside an edge."""
    ideal = Ideal()
    assert ideal.visit(Request(0, Prompt(runs=(("a", 2), ("b", 5), ("c", 1))), 0)) == 0
    assert ideal.visit(Request(1, Prompt(runs=(("a", 2), ("b", 3))), 0)) == 5  # inside the first edge
    assert ideal.visit(Request(2, Prompt(runs=(("a", 2), ("d", 1))), 0)) == 2  # a third branch at (a, 2)
    assert ideal.visit(Request(3, Prompt(runs=(("a", 2), ("b", 4), ("e", 1))), 0)) == 6  # at the branch point
    # the rest cut off by a request with another key: its key is learnt from the next request that has it
    ideal = Ideal()
    ideal.visit(Request(0, Prompt(runs=(("a", 2), ("b", 5))), 0))
    assert ideal.visit(Request(1, Prompt(runs=(("a", 2), ("c", 1))), 0)) == 2
    assert ideal.visit(Request(2, Prompt(runs=(("a", 2), ("b", 3))), 0)) == 5


def _chain(runs) -> int:
    """The chain of whole runs, as the ``unit_keys`` docstring defines it: ``step(chain, key, length)`` over the
    runs with tokens, from 0."""
    c = 0
    for k, n in runs:
        if n:
            c = step(c, k, n)
    return c


def _prefix_key(runs, pos: int) -> int:
    """The key of a prompt's first ``pos`` tokens (``pos`` > 0): ``step``(chain of the whole runs before the run
    it ends in, that run's key, the tokens it takes of it))."""
    start = 0
    for j, (k, n) in enumerate(runs):
        if n and start < pos <= start + n:
            return step(_chain(runs[:j]), k, pos - start)
        start += n
    raise AssertionError(pos)


@settings(max_examples=300, deadline=None)
@given(st.lists(_RUN, max_size=8), st.integers(1, 6), st.integers(0, 40))
def test_unit_and_point_keys_by_definition(runs, unit, stop):
    runs = tuple(runs)
    p = Prompt(runs=runs)
    total = min(stop, len(p))
    keys = p.unit_keys(unit, stop)
    assert keys == [_prefix_key(runs, e) for e in range(unit, total + 1, unit)]
    assert p.chains() == [_chain(runs[:j]) for j in range(len(runs) + 1)]
    for pos in range(1, total + 1):
        assert p.point_key(pos, unit, keys) == _prefix_key(runs, pos)
