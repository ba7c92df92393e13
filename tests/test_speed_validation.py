"""validation/speed.py's corpus and its grouped k-fold: every fixture row carries the settings its figure needs,
and no source is ever both fitted and tested."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "validation"))

import speed as validation  # noqa: E402

from hybridplan.errors import PlanError  # noqa: E402


def test_every_fixture_row_parses_with_its_settings():
    docs = validation.fixtures()
    assert docs
    for doc in docs:
        assert doc["source"].startswith("https://"), doc["_file"]
        ids = [m["id"] for m in doc["measurements"]]
        assert len(ids) == len(set(ids)), doc["_file"]
        for m in doc["measurements"]:
            s = validation.settings(doc, m)  # raises PlanError naming what is missing
            assert isinstance(s["value"], (int, float)) and s["value"] > 0, s["id"]
            if doc["kind"] == "bench":
                assert s["figure"] in validation.FIGURES
                assert int(s["tp"]) >= 1 and int(s["concurrency"]) >= 1
                assert int(s["input"]) >= 1 and int(s["output"]) >= 1


def test_a_row_without_a_setting_is_refused():
    doc = copy.deepcopy(next(d for d in validation.fixtures() if d["kind"] == "bench"))
    m = dict(doc["measurements"][0])
    doc.pop("gpu", None)
    m.pop("gpu", None)
    with pytest.raises(PlanError, match="gpu"):
        validation.settings(doc, m)
    doc2 = copy.deepcopy(next(d for d in validation.fixtures() if d["kind"] == "bench"))
    m2 = dict(doc2["measurements"][0], figure="p99_ttft_ms")
    with pytest.raises(PlanError, match="known figure"):
        validation.settings(doc2, m2)


@pytest.mark.parametrize("k", [2, 5])
def test_kfold_never_puts_one_source_in_train_and_test(k):
    files = {d["_file"] for d in validation.fixtures()}
    folds = validation.folds(k)
    assert len(folds) == k
    # every file is tested exactly once
    assert set().union(*folds) == files
    assert sum(len(f) for f in folds) == len(files)
    for test in folds:
        train = files - test
        assert not train & test
        # the source URLs too: no source's rows on both sides
        assert not {validation.source_of(f) for f in train} & {validation.source_of(f) for f in test}


def test_fit_depends_on_the_training_rows_alone():
    # fitted on two attention files; a third file's measurements, changed tenfold, change nothing
    train = ("tt-143-qwen2.5-72b-2xh100.json", "pages-llama-3.1-8b-decode.json")
    before = validation.fit(train)
    saved = validation._DOCS
    try:
        docs = copy.deepcopy(validation._docs())
        for d in docs:
            if d["_file"] == "tt-340-qwen3-30b-a3b-a100.json":
                for m in d["measurements"]:
                    m["value"] *= 10
        validation._DOCS = docs
        assert validation.fit(train) == before
    finally:
        validation._DOCS = saved


def test_acceptance_from_accept_length():
    # k = 3 proposed tokens at a = 0.5 emit (1 − 0.5⁴) / (1 − 0.5) = 1.875 tokens a step
    assert validation.acceptance_of(1.875, 3) == pytest.approx(0.5, abs=1e-9)
    with pytest.raises(PlanError):
        validation.acceptance_of(4.5, 3)


def test_regimes_and_quantile():
    assert validation.regime(1) == "concurrency 1"
    assert validation.regime(2) == validation.regime(127) == "mid (2-127)"
    assert validation.regime(128) == "saturated (>=128)"
    # nearest rank: the 9th of ten
    assert validation._quantile([float(x) for x in range(1, 11)], 0.9) == 9.0


def test_unpredicted_rows_say_why():
    rows = validation.rows(files=("sglang-30179-qwen3.5-4b-mi300x.json", "tt-394-qwen3-4b-rtx4090.json"))
    assert rows
    for r in rows:
        assert (r.predicted is None) == bool(r.reason), r.id
    # the low-latency cells state no accept length; the Qwen3-4B checkpoint is not shipped
    assert any("accept length" in r.reason for r in rows)
    assert any("Qwen/Qwen3-4B" in r.reason for r in rows)
