"""`check-log` on a log holding several start-ups, and on a log that names its own model.

A log is cut into its start-ups where a line each start prints once (vLLM's API-server banner, its
``non-default args``, the engine core's config line; SGLang's ``server_args``) is printed again, so each start
is checked on its own lines. The multi-start files here are built from the real logs under tests/data/ the way
``docker logs`` appends a restart: one whole log after another.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hybridplan.errors import PlanError
from hybridplan.loader import _logged_names, load_logged_model
from hybridplan.logread import read_text
from hybridplan.reports.check_log import check, split

pytestmark = pytest.mark.golden

DATA = Path(__file__).parent / "data"
LOGS = DATA / "logs"
NEMOTRON = DATA / "vllm-0.23-nemotron-h.log"  # vLLM 0.23.0, Nemotron-H-8B, TP 1, 40 GiB: 180.00x at 8,192
QWEN_TP4 = DATA / "vllm-0.33-qwen3-next-tp4.log"  # vLLM 0.33.0, Qwen3-Next-80B-A3B, TP 4
SGLANG = DATA / "sglang-0.5.23-nemotron-h.log"


def _json(run_cli, path: Path, *args: str) -> tuple[int, dict]:
    code, out, err = run_cli("check-log", path, *args, "--json")
    assert out, err
    return code, json.loads(out)


def test_a_restart_appended_is_two_starts_each_on_its_own_lines(run_cli, tmp_path):
    p = tmp_path / "restart.log"
    first, second = NEMOTRON.read_text(), QWEN_TP4.read_text()
    p.write_text(first + second)
    code, d = _json(run_cli, p)
    assert code == 0 and d["ok"] and len(d["starts"]) == 2
    a, b = d["starts"]
    n = first.count("\n")
    assert a["lines"][1] <= n < b["lines"][0]
    assert (a["model"], b["model"]) == ("nemotron-h-8b", "qwen3-next-80b-a3b")
    # each start's settings come from its own banner, never the other's
    va = next(s for s in a["settings"] if s["name"] == "version")
    vb = next(s for s in b["settings"] if s["name"] == "version")
    assert (va["value"], vb["value"]) == ("0.23.0", "0.33.0")
    # the flat lists keep each row's start
    assert {r["start"] for r in d["rows"]} == {1, 2}
    assert all(r["ok"] for r in a["rows"]) and all(r["ok"] for r in b["rows"])


def test_one_start_read_with_another_starts_figures_would_not_match(run_cli, tmp_path):
    # without the cut, the settings would be the last printed (Qwen3-Next at TP 4) and Nemotron-H's 180.00x would
    # be read beside them: the check of each start alone is what makes both match
    p = tmp_path / "restart.log"
    p.write_text(NEMOTRON.read_text() + QWEN_TP4.read_text())
    from hybridplan.logread import scan
    from hybridplan.reports.check_log import keywords

    log = scan(p, keywords())
    assert [piece.span for piece in split(log)] == [(2, 11), (12, 16)]


def test_a_start_that_stopped_before_its_caches_is_listed_and_the_restart_checked(run_cli, tmp_path):
    lines = NEMOTRON.read_text().splitlines(keepends=True)
    crashed = "".join(lines[:4])  # banner, args, architecture: then the process died
    p = tmp_path / "crash-restart.log"
    p.write_text(crashed + "".join(lines))
    code, d = _json(run_cli, p)
    assert code == 0 and len(d["starts"]) == 2
    assert d["starts"][0]["rows"] == [] and "prints no figure" in d["notes"][0]
    assert d["starts"][1]["ok"] and d["starts"][1]["rows"]


def test_an_excerpt_with_figures_above_its_arguments_stays_one_start(run_cli):
    # the poster pasted the capacity lines (7–8) above the arguments (13) and the engine line (14); no line is
    # printed twice, so it is one start
    code, d = _json(run_cli, LOGS / "vllm-0.20.1-qwen3.6-27b-int4-2xrtx3090-1.log", "--model", "qwen3.5-27b")
    assert code == 0 and len(d["starts"]) == 1


def test_per_rank_lines_do_not_cut(run_cli):
    # TP 2: both workers print "Available KV cache memory"; the engine prints its capacity lines twice
    code, d = _json(run_cli, LOGS / "vllm-0.10.2-qwen3-next-80b-a3b-instruct-2xh200-1.log")
    assert code == 0 and len(d["starts"]) == 1


def test_two_engines_restarts_in_one_file(run_cli, tmp_path):
    p = tmp_path / "both.log"
    p.write_text(SGLANG.read_text() + SGLANG.read_text())
    code, d = _json(run_cli, p)
    assert code == 0 and len(d["starts"]) == 2 and all(s["ok"] for s in d["starts"])


def test_a_start_that_cannot_be_read_is_named_and_the_others_checked(run_cli, tmp_path):
    # the second start names a model no spec has: it is listed with the reason, the first is still checked
    other = NEMOTRON.read_text().replace("nvidia/Nemotron-H-8B-Base-8K", "someone/unknown-model")
    p = tmp_path / "two.log"
    p.write_text(NEMOTRON.read_text() + other)
    code, d = _json(run_cli, p)
    assert code == 0 and d["starts"][0]["ok"] and d["starts"][1]["error"].startswith("the log's model")
    code, out, _ = run_cli("check-log", p)
    assert "start 2 of 2" in out and "not checked" in out


def test_several_starts_render_each_under_its_heading(run_cli, tmp_path):
    p = tmp_path / "restart.log"
    p.write_text(NEMOTRON.read_text() + QWEN_TP4.read_text())
    code, out, _ = run_cli("check-log", p)
    assert code == 0 and "start 1 of 2: lines 2–11" in out and "start 2 of 2: lines 12–16" in out
    assert "all figures match in 2 of 2 starts" in out


# --- the model named in the log -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "ref,hub_id,first,last",
    [
        (
            "nvidia/Nemotron-H-8B-Base-8K",
            "nvidia/nemotron-h-8b-base-8k",
            "nemotron-h-8b-base-8k",
            "nemotron-h-8b-base-8k",
        ),
        # a Hugging Face cache path names its repository
        (
            "/root/.cache/huggingface/hub/models--Qwen--Qwen3.5-27B/snapshots/0123abc",
            "qwen/qwen3.5-27b",
            "qwen3.5-27b",
            "qwen3.5-27b",
        ),
        # re-saves: the quantization endings come off one at a time, then the variant's
        (
            "/ai/Qwen3-Next-80B-A3B-Instruct-AWQ-4bit",
            "ai/qwen3-next-80b-a3b-instruct-awq-4bit",
            "qwen3-next-80b-a3b-instruct-awq-4bit",
            "qwen3-next-80b-a3b",
        ),
        (
            "~/.cache/huggingface/qwen3.6-27b-autoround-int4",
            "huggingface/qwen3.6-27b-autoround-int4",
            "qwen3.6-27b-autoround-int4",
            "qwen3.6-27b",
        ),
    ],
)
def test_logged_names(ref, hub_id, first, last):
    got_id, names = _logged_names(ref)
    assert got_id == hub_id and names[0] == first and names[-1] == last


def test_the_log_finds_its_model_by_source_and_by_resave():
    spec, how = load_logged_model("nvidia/Nemotron-H-8B-Base-8K")
    assert spec.name == "nemotron-h-8b" and "source" in how
    spec, how = load_logged_model("/ai/Qwen3-Next-80B-A3B-Instruct-AWQ-4bit", "Qwen3NextForCausalLM")
    assert spec.architecture == "Qwen3NextForCausalLM" and "re-save" in how


def test_a_resave_with_an_unknown_ending_is_found_by_the_sized_name_that_starts_it():
    # vllm-0.22.0-qwen3.6-35b-a3b-prismaquant-mtp-unknown-1.log serves rdtand/Qwen3.6-35B-A3B-PrismaQuant-4.75bit-vllm,
    # an ending no list knows: qwen3.6-35b-a3b starts the name and names a size, so it is the base
    spec, how = load_logged_model(
        "rdtand/Qwen3.6-35B-A3B-PrismaQuant-4.75bit-vllm", "Qwen3_5MoeForConditionalGeneration"
    )
    assert spec.name == "qwen3.6-35b-a3b" and "re-save" in how
    # a family name names no size: "nemotron-h" (an alias of nemotron-h-8b) never stands for another Nemotron-H
    with pytest.raises(PlanError, match="not a shipped spec"):
        load_logged_model("someone/Nemotron-H-47B-Reasoning-128K", "NemotronHForCausalLM")


def test_a_post_train_of_a_shipped_base_is_found_by_its_alias():
    # Nemotron-Cascade-2-30B-A3B is post-trained from Nemotron-3-Nano-30B-A3B-Base (its model card); its NVFP4
    # re-save is what vllm-0.19.0-nemotron-cascade-2-30b-nvfp4-wsl-2.log serves
    spec, how = load_logged_model("chankhavu/Nemotron-Cascade-2-30B-A3B-NVFP4", "NemotronHForCausalLM")
    assert spec.name == "nemotron-3-nano-30b-a3b" and "re-save" in how


def test_a_spec_of_another_architecture_is_never_taken():
    # Qwen3-Next's name, but the log resolved a Nemotron-H architecture: no shipped spec matches both
    with pytest.raises(PlanError, match="NemotronHForCausalLM"):
        load_logged_model("/ai/Qwen3-Next-80B-A3B-Instruct-AWQ-4bit", "NemotronHForCausalLM")


def test_a_model_flag_of_another_architecture_is_refused_with_both_names(run_cli):
    # the log resolved Qwen3NextForCausalLM (its line 9); --model nemotron-h is a NemotronHForCausalLM
    code, _, err = run_cli(
        "check-log", LOGS / "vllm-0.10.2-qwen3-next-80b-a3b-instruct-2xh200-1.log", "--model", "nemotron-h"
    )
    assert code == 2 and "NemotronHForCausalLM" in err and "Qwen3NextForCausalLM" in err


def test_the_drafts_architecture_is_not_the_models(run_cli):
    # an MTP log resolves the target (Qwen3_5ForConditionalGeneration) and then its drafter (Qwen3_5MTP)
    name = "vllm-0.23.0-qwen3.6-27b-fp8-mtp-4xrtx5060ti-1.log"
    text = (LOGS / name).read_text()
    assert "Resolved architecture: Qwen3_5MTP" in text
    code, d = _json(run_cli, LOGS / name)
    arch = next(s for s in d["settings"] if s["name"] == "architecture")
    assert arch["value"] == "Qwen3_5ForConditionalGeneration"


def test_a_model_in_the_local_hugging_face_cache(tmp_path, monkeypatch):
    # huggingface_hub's cache layout: models--ORG--NAME/refs/main holds the commit, snapshots/COMMIT/config.json
    repo = tmp_path / "hub" / "models--someone--my-lfm2"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    snap = repo / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    shutil.copy(DATA / "configs" / "LiquidAI__LFM2-350M.json", snap / "config.json")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    spec, how = load_logged_model("someone/my-lfm2", "Lfm2ForCausalLM")
    assert spec.architecture == "Lfm2ForCausalLM" and spec.source == "someone/my-lfm2" and "cache" in how
    with pytest.raises(PlanError, match="not a shipped spec"):
        load_logged_model("someone/not-cached")


def test_split_of_a_log_in_memory():
    log = read_text(NEMOTRON.read_text() * 3)
    assert len(split(log)) == 3
    report = check(log)
    assert report.ok and len(report.starts) == 3 and report.model == "nemotron-h-8b"


def test_dtype_flags_stand_in_for_an_excerpt_that_does_not_print_them(run_cli):
    # Nemotron-H-8B at 0.23.0 with bf16 KV: block 1040 (its line 6). With fp8 KV given as a flag the attention page
    # halves, the block doubles to 2,080 and the logged 1040 no longer matches: the flag is what was read
    code, d = _json(run_cli, NEMOTRON, "--kv-dtype", "fp8")
    kv = next(s for s in d["settings"] if s["name"] == "kv_cache_dtype")
    block = next(r for r in d["rows"] if r["figure"] == "attention block size")
    assert code == 1 and kv["source"] == "flag" and (block["logged"], block["predicted"]) == (1040, 2080)
    # SGLang spells hybridplan's fp8 fp8_e4m3 (it has no plain fp8)
    code, d = _json(run_cli, SGLANG, "--kv-dtype", "fp8")
    kv = next(s for s in d["settings"] if s["name"] == "kv_cache_dtype")
    assert kv["value"] == "fp8_e4m3" and kv["source"] == "flag"


def test_gpu_type_names_the_gpu_a_log_does_not(run_cli):
    # vLLM 0.13.0, Qwen3-Next at TP 2 with fp8 KV on two L40S: the logged block is 1,072 (548,864 B of GDN page /
    # 512 B of attention per token, a multiple of 16). On a B200 the same start grows the block in 32s
    # (FlashInfer with head size 256 on Blackwell, HybridAttentionMambaModelConfig 0.11.1–0.17.1):
    # 32·cdiv(1,072, 32) = 1,088, so the logged figure no longer matches; the L40S reproduces it
    log = LOGS / "vllm-0.13.0-qwen3-next-80b-w4a16-2xl40s-1.log"
    code, d = _json(run_cli, log, "--model", "qwen3-next", "--gpu-type", "l40s")
    block = next(r for r in d["rows"] if r["figure"] == "attention block size")
    cc = next(s for s in d["settings"] if s["name"] == "compute_capability")
    assert code == 0 and block["predicted"] == 1072 and cc["value"] == "8.9"
    code, d = _json(run_cli, log, "--model", "qwen3-next", "--gpu-type", "NVIDIA B200")
    block = next(r for r in d["rows"] if r["figure"] == "attention block size")
    assert code == 1 and (block["logged"], block["predicted"]) == (1072, 1088)
    code, _, err = run_cli("check-log", log, "--gpu-type", "h1000")
    assert code == 2 and "h1000" in err
