"""The planner's records are msgspec ``Struct(frozen=True)`` classes: immutable, equal and hashed by their fields,
changed only through ``msgspec.structs.replace``; the few fields that are no part of a record's identity are left
out of its equality and hash, as ``field(compare=False)`` left them out of the dataclasses they were."""

from __future__ import annotations

import msgspec
import pytest
from msgspec.structs import asdict, replace

from hybridplan.loader import load_model
from hybridplan.scenario import Scenario
from hybridplan.speed.work import Step
from hybridplan.weights.quant import Quantization, Scheme


def test_a_record_is_a_frozen_struct():
    sc = Scenario(load_model("nemotron-h"), ctx=4096)
    assert isinstance(sc, msgspec.Struct) and sc.__struct_config__.frozen
    moved = replace(sc, ctx=8192)
    assert (moved.ctx, sc.ctx) == (8192, 4096) and moved != sc and replace(moved, ctx=4096) == sc
    assert asdict(sc.spec)["name"] == "nemotron-h-8b"
    with pytest.raises(AttributeError):
        sc.ctx = 1  # type: ignore[misc]
    assert hash(sc) == hash(replace(moved, ctx=4096))


def test_a_spec_is_known_by_its_model_not_its_config_text_or_checkpoint():
    spec = load_model("nemotron-h")
    other = replace(spec, config_json="{}")
    assert other == spec and hash(other) == hash(spec) and "config_json" not in repr(spec)
    assert replace(spec, name="x") != spec


def test_derived_fields_are_no_part_of_a_records_identity():
    # a quantization is what its files state; the scheme is derived from it
    q = Quantization("fp8", None, None, None, False, "config.json", Scheme("fp8", 1.0, ()))
    assert replace(q, scheme=None, unsized="why") == q and hash(replace(q, scheme=None)) == hash(q)
    assert replace(q, method="awq") != q
    step = Step("decode", 1, 4096, 1, ())
    assert replace(step, notes=("a note",)) == step and replace(step, batch=2) != step
