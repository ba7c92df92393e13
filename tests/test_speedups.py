"""The replay's trace-side native code (hybridplan/replay/_speedups.c) against its Python twins: the chained
keys of a prompt's runs must be the twin's values (``Prompt.chains`` and ``Prompt.unit_keys`` with the C module
set aside), and the twin must be its definition (trace.py ``step``). The C ideal cache is held to its definition beside its Python twin in
tests/test_replay_ideal.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridplan.replay import loop, trace
from hybridplan.replay.trace import Prompt
from tests.helpers import assert_native_built, native

pytestmark = pytest.mark.native

C = native("hybridplan.replay._speedups")

KEYS = st.one_of(
    st.integers(-(1 << 63), (1 << 63) - 1),
    st.integers(0, 6),
    st.sampled_from(["sys", "doc", ""]),
    st.tuples(st.just("out"), st.integers(0, 3)),
)
#: runs of a few thousand tokens at most (the unit keys are one a unit), and runs past 2**61 for the chains
RUNS = st.lists(st.tuples(KEYS, st.sampled_from([0, 1, 7, 512, 530])), max_size=12).map(tuple)
HUGE_RUNS = st.tuples(RUNS, st.tuples(KEYS, st.sampled_from([(1 << 61) - 1, 1 << 61, (1 << 61) + 5]))).map(
    lambda x: (*x[0], x[1])
)


def _python(prompt: Prompt, unit: int, stop: int) -> tuple[list[int], list[int]]:
    """The chains and unit keys of a fresh copy of ``prompt`` with the C module set aside."""
    native, trace._native = trace._native, None
    try:
        copy = Prompt(runs=prompt.runs, tokens=prompt.tokens)
        return copy.chains(), copy.unit_keys(unit, stop)
    finally:
        trace._native = native


def test_the_native_code_is_built_and_used():
    """The install compiles it (setup.py) where a C compiler is at hand, and a replay then uses it; CI requires
    it (HYBRIDPLAN_REQUIRE_NATIVE=1)."""
    assert_native_built("hybridplan.replay._speedups")
    assert trace._native is not None
    assert loop.Ideal is loop.NativeIdeal


def test_a_fold_is_splitmix64s_finaliser():
    """``_fold(n, 0)`` is splitmix64's n-th output from seed 0 (the state advanced by φ n times, then finalised):
    0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f in the reference splitmix64.c (S. Vigna,
    prng.di.unimi.it)."""
    assert [trace._fold(n, 0) for n in (1, 2, 3)] == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]


@settings(max_examples=200, deadline=None)
@given(runs=RUNS)
def test_the_python_twin_is_the_definition(runs):
    """A chain is ``step`` over the runs with tokens, in order (a run of none changes nothing); every key is a
    signed 64-bit int and never -1 (the native tables' empty mark)."""
    twin = _python(Prompt(runs=runs), 16, 4000)[0]
    chain, want = 0, [0]
    for key, n in runs:
        if n:
            x = trace._fold(trace._fold(chain, hash(key)), n)
            chain = x - (1 << 64) if x >= 1 << 63 else x
            chain = -2 if chain == -1 else chain
        want.append(chain)
    assert twin == want
    assert all(-(1 << 63) <= c < 1 << 63 and c != -1 for c in twin)


@C
@settings(max_examples=300, deadline=None)
@given(runs=RUNS, unit=st.sampled_from([1, 16, 528]), stop=st.integers(0, 8000))
def test_chains_and_unit_keys_are_the_python_twins(runs, unit, stop):
    prompt = Prompt(runs=runs)
    assert (prompt.chains(), prompt.unit_keys(unit, stop)) == _python(prompt, unit, stop)


@C
@settings(max_examples=100, deadline=None)
@given(runs=HUGE_RUNS)
def test_chains_of_runs_past_2_61_are_the_python_twins(runs):
    """Lengths past 2**61 − 1 and units of 2**60 tokens."""
    prompt = Prompt(runs=runs)
    assert (prompt.chains(), prompt.unit_keys(1 << 60, 1 << 62)) == _python(prompt, 1 << 60, 1 << 62)


@C
@settings(max_examples=100, deadline=None)
@given(tokens=st.lists(st.integers(0, 1 << 62), min_size=1, max_size=40).map(tuple))
def test_token_chains_are_the_python_twins(tokens):
    prompt = Prompt(tokens=tokens)
    assert prompt.chains() == _python(prompt, 16, 40)[0]


@C
@settings(max_examples=200, deadline=None)
@given(
    ids=st.lists(st.one_of(st.integers(-(1 << 70), 1 << 70), st.booleans(), st.just(1.0)), min_size=1, max_size=6),
    tail=st.integers(1, 512),
)
def test_a_mooncake_lines_runs_are_the_python_twins(ids, tail):
    """``block_runs`` builds a Mooncake line's runs, (id, 512) a hash id and the rest of the prompt last; an id
    that is not exactly an int (a bool, a float) is the same one error line either way."""
    obj = {"input_length": 512 * (len(ids) - 1) + tail, "output_length": 3, "hash_ids": ids}
    seen = []
    for built in (trace._native, None):
        saved, trace._native = trace._native, built
        try:
            rec = trace._convert(obj, trace.MooncakeLine, trace.Path("t.jsonl"), 7, trace._mooncake_refusal)
            seen.append(trace._mooncake_line(rec, trace.Path("t.jsonl"), 7, 0).prompt.runs)
        except trace.PlanError as exc:
            seen.append(str(exc))
        finally:
            trace._native = saved
    assert seen[0] == seen[1]
    if all(type(i) is int for i in ids):
        assert seen[0] == (*((i, 512) for i in ids[:-1]), (ids[-1], tail))
    else:
        assert seen[0] == "t.jsonl: line 7: 'hash_ids' must be a list of integers"


@C
def test_a_mooncake_lines_request_is_the_one_python_makes():
    """A trace line's Request and Prompts, their runs made in C (``block_runs``) or by the Python twin, are equal,
    field for field and with their prompt and output, to those the records' own constructors make."""
    rec = trace.MooncakeLine(timestamp=3, input_length=1100, output_length=7, hash_ids=[4, 9, 2])
    made = []
    for impl in (trace._native, None):
        saved, trace._native = trace._native, impl
        try:
            made.append(trace._mooncake_line(rec, trace.Path("t.jsonl"), 5, 2))
        finally:
            trace._native = saved
    runs = ((4, 512), (9, 512), (2, 76))
    constructed = trace.Request(2, Prompt(runs=runs), 7, 3.0, "line 5")
    for req in made:
        assert req == constructed
        assert (req.prompt_len, req.prompt.size, req.prompt.runs) == (1100, 1100, runs)
        assert req.with_output() == constructed.with_output() == Prompt(runs=(*runs, ((("out", 2), 0), 7)))
        assert req.with_output().unit_keys(528, 1107) == constructed.with_output().unit_keys(528, 1107)
