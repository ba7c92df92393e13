"""The replay's trace-side native code (hybridplan/replay/_speedups.c) against its Python twins: the chained
hashes of a prompt's runs must be Python's own hash values (``Prompt.chains`` and ``Prompt.unit_keys`` with the
C module set aside). The C ideal cache is held to its definition beside its Python twin in
tests/test_replay_ideal.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridplan.replay import loop, trace
from hybridplan.replay.trace import Prompt
from tests.helpers import assert_native_built, native

C = native("hybridplan.replay._speedups")

KEYS = st.one_of(st.integers(-(1 << 63), (1 << 63) - 1), st.integers(0, 6), st.sampled_from(["sys", "doc", ""]),
                 st.tuples(st.just("out"), st.integers(0, 3)))
#: runs of a few thousand tokens at most (the unit keys are one a unit), and runs past 2**61 for the chains
RUNS = st.lists(st.tuples(KEYS, st.sampled_from([0, 1, 7, 512, 530])), max_size=12).map(tuple)
HUGE_RUNS = st.tuples(RUNS, st.tuples(KEYS, st.sampled_from([(1 << 61) - 1, 1 << 61, (1 << 61) + 5]))).map(
    lambda x: (*x[0], x[1]))


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


@C
@settings(max_examples=300, deadline=None)
@given(runs=RUNS, unit=st.sampled_from([1, 16, 528]), stop=st.integers(0, 8000))
def test_chains_and_unit_keys_are_pythons_own_hashes(runs, unit, stop):
    prompt = Prompt(runs=runs)
    assert (prompt.chains(), prompt.unit_keys(unit, stop)) == _python(prompt, unit, stop)


@C
@settings(max_examples=100, deadline=None)
@given(runs=HUGE_RUNS)
def test_chains_of_runs_past_the_hash_modulus_are_pythons_own(runs):
    """A length past 2**61 − 1, where Python hashes an int modulo it, and units of 2**60 tokens."""
    prompt = Prompt(runs=runs)
    assert (prompt.chains(), prompt.unit_keys(1 << 60, 1 << 62)) == _python(prompt, 1 << 60, 1 << 62)


@C
@settings(max_examples=100, deadline=None)
@given(tokens=st.lists(st.integers(0, 1 << 62), min_size=1, max_size=40).map(tuple))
def test_token_chains_are_pythons_own_hashes(tokens):
    prompt = Prompt(tokens=tokens)
    assert prompt.chains() == _python(prompt, 16, 40)[0]


@C
@settings(max_examples=200, deadline=None)
@given(ids=st.lists(st.one_of(st.integers(-(1 << 70), 1 << 70), st.booleans(), st.just(1.0)), min_size=1,
                    max_size=6),
       tail=st.integers(1, 512))
def test_a_mooncake_lines_runs_are_the_python_twins(ids, tail):
    """``block_runs`` builds a Mooncake line's runs, (id, 512) a hash id and the rest of the prompt last; an id
    that is not exactly an int (a bool, a float) is the same one error line either way."""
    obj = {"input_length": 512 * (len(ids) - 1) + tail, "output_length": 3, "hash_ids": ids}
    seen = []
    for native in (trace._native, None):
        saved, trace._native = trace._native, native
        try:
            seen.append(trace._mooncake_line(obj, trace.Path("t.jsonl"), 7, 0).prompt.runs)
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
    """``_speedups.instance`` makes a trace line's Request and Prompts without their ``__init__``; the records are
    equal, field for field and with their prompt and output, to those the Python twin (``_py_instance``) and the
    dataclasses' own constructors make; it refuses what it cannot make that way."""
    obj = {"timestamp": 3, "input_length": 1100, "output_length": 7, "hash_ids": [4, 9, 2]}
    made = []
    for make in (trace._native.instance, trace._py_instance):
        saved, trace._instance = trace._instance, make
        try:
            made.append(trace._mooncake_line(obj, trace.Path("t.jsonl"), 5, 2))
        finally:
            trace._instance = saved
    runs = ((4, 512), (9, 512), (2, 76))
    dataclass_made = trace.Request(2, Prompt(runs=runs), 7, 3.0, "line 5")
    for req in made:
        assert req == dataclass_made and vars(req).keys() >= {"index", "prompt", "output_len", "prompt_len"}
        assert (req.prompt_len, req.prompt.size, req.prompt.runs) == (1100, 1100, runs)
        assert req.with_output() == dataclass_made.with_output() == Prompt(runs=(*runs, ((("out", 2), 0), 7)))
        assert req.with_output().unit_keys(528, 1107) == dataclass_made.with_output().unit_keys(528, 1107)
    for bad in ((Prompt, []), (int, {}), (object, {})):
        with pytest.raises(TypeError):
            trace._native.instance(*bad)
