"""validation/speed.py's corpus and its grouped k-fold: every fixture row carries the settings its figure needs,
and no source is ever both fitted and tested."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.golden

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
    files = {d["_file"] for d in validation._docs()}  # the sealed set is never dealt into a fold
    assert not files & validation.sealed_files()
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
    rows = validation.rows(files=("sglang-30179-qwen3.5-4b-mi300x.json", "inferencex-1053-gpt-oss-120b-mi300x.json"))
    assert rows
    for r in rows:
        assert (r.predicted is None) == bool(r.reason), r.id
    # the low-latency cells state no accept length; gpt-oss-120b's config.json is vendored
    # (tests/data/speed/configs), but no adapter reads its architecture
    assert any("accept length" in r.reason for r in rows)
    assert any("GptOssForCausalLM" in r.reason for r in rows)


def test_allreduce_latency_from_the_published_table():
    from hybridplan.loader import load_model
    from hybridplan.scenario import Scenario
    from hybridplan.speed.gpus import datasheet
    from hybridplan.speed.model import ALLREDUCE_PCIE_TP8_US, DEFAULT, Efficiency, allreduce_nvlink_us, comm_time
    from hybridplan.speed.work import decode_step

    # SGLang PR #2904's "vllm" rows: TP 8 takes 9.3 µs for 4,096 float32 elements (16 KiB), 11.8 µs for 32,768
    # (128 KiB); a message between them is priced on the straight line: 72 KiB is half way, 10.55 µs
    assert allreduce_nvlink_us(8, 16384) == pytest.approx(9.3)
    assert allreduce_nvlink_us(8, 73728) == pytest.approx(9.3 + (11.8 - 9.3) * (73728 - 16384) / (131072 - 16384))
    assert allreduce_nvlink_us(8, 73728) == pytest.approx(10.55)
    # below the first point it is flat; TP 3 is priced as TP 4, TP 6 as TP 8
    assert allreduce_nvlink_us(2, 100) == pytest.approx(9.5)
    assert allreduce_nvlink_us(3, 16384) == allreduce_nvlink_us(4, 16384) == pytest.approx(8.5)
    assert allreduce_nvlink_us(6, 16384) == pytest.approx(9.3)
    # past 4 MiB the last two points' slope carries on: 8 MiB at TP 8 is 45.0 + (45.0 − 30.4) · 2
    assert allreduce_nvlink_us(8, 8388608) == pytest.approx(45.0 + (45.0 - 30.4) * 2)
    # a Llama-3.1-8B decode step at batch 8, TP 2 on H100s: 64 all-reduces (32 attention + 32 MLP) of
    # 8 tokens × 4,096 × 2 B = 64 KiB each, 8.8 + (8.7 − 8.8)·(65,536 − 16,384)/(131,072 − 16,384) µs apiece
    step = decode_step(Scenario(spec=load_model("llama-3.1-8b"), ctx=1024, tp=2), 8, 1024)
    assert step.allreduces == 64 and step.allreduce_bytes == 65536
    per = 8.8 + (8.7 - 8.8) * (65536 - 16384) / (131072 - 16384)
    assert comm_time(step, datasheet("h100"), DEFAULT, 2) == pytest.approx(64 * per * 1e-6)
    # over PCIe (an L40S pair): NCCL's ring, 42.14 µs at 8 GPUs scaled by the hops (1/7 at TP 2), and the ring's
    # bytes at 70 % of half the link
    ring = ALLREDUCE_PCIE_TP8_US / 7 * 1e-6 + 2 * (2 - 1) / 2 * 65536 / (64e9 / 2 * 0.7)
    assert comm_time(step, datasheet("l40s"), DEFAULT, 2) == pytest.approx(64 * ring)
    # a set latency keeps the ring formula everywhere
    assert comm_time(step, datasheet("h100"), Efficiency(allreduce_us=8.0), 2) == pytest.approx(
        64 * (8e-6 + 65536 / (450e9 * 0.7))
    )


def test_a_folds_fit_starts_from_the_round_values_not_the_shipped_ones():
    from hybridplan.speed.model import DEFAULT, Efficiency

    # with no file to fit on, the fit returns its starting point: the class's round values, never DEFAULT (the
    # fit on every file), so no fold starts from figures that saw its test files
    got = validation.fit(files=frozenset())
    assert got.hbm == Efficiency().hbm and got.kernel_floor_graph_us == Efficiency().kernel_floor_graph_us
    assert (got.hbm, got.kernel_floor_graph_us) != (DEFAULT.hbm, DEFAULT.kernel_floor_graph_us)


def test_ranges_are_the_held_out_ratios_nearest_rank():
    # ten held-out hybrid TPOT rows at concurrency 1, measured / predicted = 0.5, 0.6, …, 1.4: P10 by nearest rank
    # is the 1st (0.5), P90 the 9th (1.3); two reference rows give a cell of 2
    rows = [
        validation.Row(
            "f.json", f"r{i}", "bench", "mean_tpot_ms", (0.5 + i / 10) * 10.0, 10.0, True, False, concurrency=1
        )
        for i in range(10)
    ]
    rows += [
        validation.Row("g.json", f"s{i}", "bench", "output_tok_s", 100.0, 50.0 * (i + 1), False, False, concurrency=64)
        for i in range(2)
    ]
    cells = {(c["set"], c["figure"], c["regime"]): c for c in validation.ranges(rows, 5)["ranges"]}
    c = cells[("hybrid", "TPOT", "concurrency 1")]
    assert c["rows"] == 10 and c["p10"] == pytest.approx(0.5) and c["p90"] == pytest.approx(1.3)
    assert cells[("hybrid", "TPOT", "all")]["rows"] == 10
    r = cells[("reference", "output tok/s", "mid (2-127)")]
    assert r["rows"] == 2 and r["p10"] == pytest.approx(1.0) and r["p90"] == pytest.approx(2.0)
    assert ("hybrid", "TTFT", "concurrency 1") not in cells


def test_a_sealed_file_stays_out_of_the_fit_and_the_folds():
    # a file whose `collected` carries the marker is held apart: scored only by --sealed, never fitted or dealt
    # into a fold. The 19 files of the first sealed set joined the corpus after their two scorings
    # (benchmarks/results/speed-sealed-2026-12-02.md, -02b.md); each is listed with its source in SOURCES.md
    assert validation.is_sealed({"collected": f"2026-12-03, {validation.SEALED}"})
    assert not validation.is_sealed({"collected": "2026-12-02, held out ... then joined the corpus"})
    collected = [d for d in validation.fixtures() if "collected" in d]
    assert len(collected) == 19 and not validation.sealed_files()
    listed = (ROOT / "tests" / "data" / "SOURCES.md").read_text()
    for doc in collected:
        assert "joined the corpus" in doc["collected"], doc["_file"]
        assert f"`speed/{doc['_file']}`" in listed, doc["_file"]
