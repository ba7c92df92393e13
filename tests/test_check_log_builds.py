"""check-log on the cases issue 28 item 7 found in held-out real logs: builds between two releases, a logged
concurrency no block count gives, pasted runs without a banner, an ambiguous SGLang split, and a hint where
nothing reconciles. Each log here is a real log of tests/data/logs/ (named per test, listed in SOURCES.md) or an
excerpt derived from one, the change said in the test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hybridplan.errors import PlanError

pytestmark = pytest.mark.golden

LOGS = Path(__file__).parent / "data" / "logs"


def _derived(tmp_path: Path, name: str, old: str, new: str) -> Path:
    """The real log ``name`` with every ``old`` written ``new`` (said by each test that uses it)."""
    text = (LOGS / name).read_text()
    assert old in text
    out = tmp_path / f"derived-{Path(name).name}"
    out.write_text(text.replace(old, new))
    return out


def _json(run_cli, path, *args) -> tuple[int, dict, str]:
    code, out, err = run_cli("check-log", path, *args, "--json")
    return code, (json.loads(out) if out else {}), err


# --- builds between two releases ------------------------------------------------------------------------------


def test_dev_build_keeps_the_older_neighbour_when_its_token_figure_is_printed(run_cli, tmp_path):
    # the 0.20.0 Qwen3.6-35B-A3B log (vllm-0.20.0-qwen3.6-35b-a3b-nvfp4-blackwell-wsl-1.log) with its version
    # written 0.20.1rc1.dev16, a build cut before 0.20.1: the KV token figure it prints is 0.20.0's (num_blocks //
    # groups · block, vllm/v1/core/kv_cache_utils.py 0.20.0) not 0.20.1's int(concurrency · max_model_len), so of
    # the neighbours 0.20.0 and 0.20.1 only 0.20.0 reproduces the log, and is kept
    log = _derived(tmp_path, "vllm-0.20.0-qwen3.6-35b-a3b-nvfp4-blackwell-wsl-1.log", "0.20.0", "0.20.1rc1.dev16")
    code, d, err = _json(run_cli, log, "--model", "qwen3.6-35b-a3b")
    assert code == 0 and d["ok"], d["rows"]
    note = next(n for n in d["notes"] if "build between releases" in n)
    assert "0.20.0 and 0.20.1" in note and "0.20.0's rules kept" in note
    version = next(s for s in d["settings"] if s["name"] == "version")
    assert version["value"] == "0.20.1rc1.dev16 (checked as 0.20.0)"
    # read as 0.20.1 alone, the token figure is off: the choice is what makes it pass
    code, d, _ = _json(run_cli, log, "--model", "qwen3.6-35b-a3b", "--vllm-version", "0.20.1")
    assert code == 1 and [r["figure"] for r in d["rows"] if not r["ok"]] == ["KV cache size (tokens)"]


def test_dev_build_keeps_the_newer_neighbour_when_it_reproduces_the_log(run_cli):
    # vllm-0.20.1rc1-nemotron-cascade-2-30b-nvfp4-blackwell-wsl-1.log: 0.20.1rc1.dev91, a build that already prints
    # 0.20.1's token figure (1,206,303 = int(4.71… · 256,000)); 0.20.0's num_blocks // groups · block would differ
    code, d, _ = _json(
        run_cli,
        LOGS / "vllm-0.20.1rc1-nemotron-cascade-2-30b-nvfp4-blackwell-wsl-1.log",
        "--model",
        "nemotron-3-nano-30b-a3b",
    )
    assert code == 0 and d["ok"]
    assert any("0.20.1's rules kept" in n and "0.20.0's: 1 of 5 figures differ" in n for n in d["notes"])


def test_dev_build_serves_what_the_next_release_registers(run_cli, tmp_path):
    # vllm-0.18.1rc1-qwen3.5-35b-a3b-awq-rocm-1.log with its version written 0.16.1rc1.dev111 (a build after
    # 0.16.0, before 0.17.0): Qwen3_5MoeForConditionalGeneration enters the registry in 0.17.0
    # (vllm/model_executor/models/registry.py), so 0.16.0 refuses it and 0.17.0 is kept: block 1,056 and padding
    # 0.76 % as in test_real_logs
    log = _derived(tmp_path, "vllm-0.18.1rc1-qwen3.5-35b-a3b-awq-rocm-1.log", "0.18.1rc1.dev27", "0.16.1rc1.dev111")
    code, d, err = _json(run_cli, log, "--model", "qwen3.5-35b-a3b")
    assert code == 0 and d["ok"] and d["rows"], err
    note = next(n for n in d["notes"] if "build between releases" in n)
    assert "0.16.0 and 0.17.0" in note and "0.17.0's rules kept" in note and "0.16.0" in note
    # a release that serves neither: 0.10.1rc1.dev5 lies between 0.10.0 and 0.10.1, before Qwen3.5
    log = _derived(tmp_path, "vllm-0.18.1rc1-qwen3.5-35b-a3b-awq-rocm-1.log", "0.18.1rc1.dev27", "0.10.1rc1.dev5")
    code, d, err = _json(run_cli, log, "--model", "qwen3.5-35b-a3b")
    assert code == 2 and "neither serves" in err and "0.10.0 and 0.10.1" in err and err.count("\n") == 1, err


def test_neighbours_of_a_build():
    from hybridplan.engines.vllm.releases import neighbours

    # pre-releases and dev builds lie before the release they name (PEP 440): between it and the one before
    assert [r.version for r in neighbours("0.16.1rc1.dev111")] == ["0.16.0", "0.17.0"]
    assert sorted(r.version for r in neighbours("0.20.1rc1.dev16")) == ["0.20.0", "0.20.1"]
    # a release, a local build of one (the NGC 0.13.0+faa43dbf.nv26.01), a minor: one release
    for version, rel in (("0.20.1", "0.20.1"), ("0.13.0+faa43dbf.nv26.01", "0.13.0"), ("0.20", "0.20.2")):
        assert [r.version for r in neighbours(version)] == [rel]
    # a source build setuptools-scm could not date from a tag (vllm#54458's 0.1.dev20073+g8e685d198) names no
    # release: check-log reads it with the newest rules and says so; --vllm-version refuses it (fit would be
    # silently wrong)
    from hybridplan.engines.vllm.releases import NEWEST, release

    assert neighbours("0.1.dev20073+g8e685d198") == (NEWEST,)
    with pytest.raises(PlanError, match="unknown vLLM version"):
        release("0.1.dev20073+g8e685d198")


def test_an_untagged_build_is_read_with_a_note(run_cli, tmp_path):
    # tests/data/vllm-0.23-nemotron-h.log with its version written 0.1.dev20073+g8e685d198 (the version vllm#54458's
    # source build prints): the newest rules are used and said; Nemotron-H-8B's block 1040 is the same there
    log = _derived(tmp_path, "../vllm-0.23-nemotron-h.log", "0.23.0", "0.1.dev20073+g8e685d198")
    code, d, err = _json(run_cli, log)
    assert code in (0, 1) and any("names no release" in n for n in d["notes"]), err
    version = next(s for s in d["settings"] if s["name"] == "version")
    assert version["value"].startswith("0.1.dev20073+g8e685d198 (checked as ")


# --- a logged concurrency no block count gives ---------------------------------------------------------------


def test_concurrency_no_block_count_gives_is_a_mismatch_not_a_crash(run_cli, tmp_path):
    # vllm-0.13.0-qwen3-next-80b-w4a16-2xl40s-1.log without its "Available KV cache memory" line, read at TP 4 (the
    # log ran TP 2): the blocks then come from "Maximum concurrency … 84.29x" alone, and at TP 4 a request takes 64
    # blocks, so 84.285x to 84.295x is 5,394.24 to 5,394.88 blocks: no whole count. It was an internal IndexError
    text = (LOGS / "vllm-0.13.0-qwen3-next-80b-w4a16-2xl40s-1.log").read_text().splitlines()
    log = tmp_path / "no-budget.log"
    log.write_text("\n".join(x for x in text if "Available KV cache memory" not in x) + "\n")
    code, d, err = _json(run_cli, log, "--model", "qwen3-next", "--tp", "4")
    assert code == 1 and "internal error" not in err, err
    assert any("no whole block count gives the logged concurrency 84.29x at 64 blocks" in n for n in d["notes"])
    # the settings assumed are said, and the TP the log ran (2) is named as one that reconciles
    assert any("TP 4 (flag), vLLM 0.13.0 (line 7" in n for n in d["notes"]), d["notes"]
    hint = next(n for n in d["notes"] if "reconciles every figure" in n)
    assert "2" in hint.split("reconciles")[0]
    # at the logged TP 2 the log reconciles
    code, d, _ = _json(run_cli, log, "--model", "qwen3-next")
    assert code == 0 and d["ok"]


def test_a_mismatch_says_the_settings_assumed(run_cli):
    # vllm-unknown-qwen3.8-27b-fp8-2xrtx5090-1.log: its args line is cut, so TP and release are not in the log;
    # read at TP 1 with the newest release, the figures are off and the note says both were assumed by default
    code, d, _ = _json(run_cli, LOGS / "vllm-unknown-qwen3.8-27b-fp8-2xrtx5090-1.log", "--model", "qwen3.5-27b")
    assert code == 1
    assert any(
        n.startswith("the figures do not reconcile with the settings assumed: TP 1 (default), vLLM 0.33.0")
        for n in d["notes"]
    ), d["notes"]


# --- runs pasted without their banners -------------------------------------------------------------------------


def _figure_lines(name: str) -> list[str]:
    keep = ("Available KV cache memory", "GPU KV cache size", "Maximum concurrency")
    return [x for x in (LOGS / name).read_text().splitlines() if not x.startswith("#") and any(k in x for k in keep)]


A_RUN, B_RUN = ("vllm-0.24.0-qwen3.6-35b-a3b-nvfp4-rtx5090-1.log", "vllm-0.24.0-qwen3.6-35b-a3b-nvfp4-rtx5090-2.log")
#: the settings both runs' args lines state (fp8 KV, prefix caching on: align, 131,072 tokens, 0.24.0)
AB_FLAGS = (
    "--model",
    "qwen3.6-35b-a3b",
    "--vllm-version",
    "0.24.0",
    "--kv-dtype",
    "fp8",
    "--ctx",
    "131072",
    "--mode",
    "align",
)


def test_runs_pasted_without_banners_are_cut_where_a_figure_repeats(run_cli, tmp_path):
    # the capacity lines of two real runs of one rig (issues 612 and 652 of noonghunna/club-3090, 5.98 and 6.01
    # GiB free), pasted one after the other with no banner, args or engine line: one start read them all as the
    # last run's. "Available KV cache memory" printed again after the first run's capacity opens the second
    log = tmp_path / "ab.log"
    log.write_text("\n".join(_figure_lines(A_RUN) + _figure_lines(B_RUN)) + "\n")
    code, d, err = _json(run_cli, log, *AB_FLAGS)
    assert code == 0 and d["ok"] and len(d["starts"]) == 2, err
    a, b = d["starts"]
    tokens = [next(r["logged"] for r in s["rows"] if r["figure"] == "KV cache size (tokens)") for s in (a, b)]
    # the two logs' own "GPU KV cache size: 567,978 tokens" and "569,878 tokens" (line 8 of each)
    assert tokens == [567978, 569878] and all(r["ok"] for s in (a, b) for r in s["rows"])
    assert any(
        n.startswith("start 2 (lines 4–6) prints no banner") and "Available KV cache memory: 6.01 GiB" in n
        for n in b["notes"]
    )


def test_a_run_with_its_banner_then_one_without(run_cli, tmp_path):
    # the first run whole (its args and engine lines below its figures, as posted), the second's capacity lines
    # alone: the second is cut where its "Available KV cache memory" repeats the first's
    first = [x for x in (LOGS / A_RUN).read_text().splitlines() if not x.startswith("#")]
    log = tmp_path / "a-then-b.log"
    log.write_text("\n".join(first + _figure_lines(B_RUN)) + "\n")
    code, d, err = _json(run_cli, log, *AB_FLAGS)
    assert code == 0 and len(d["starts"]) == 2, err
    assert d["starts"][1]["lines"][0] == len(first) + 1


def test_one_start_is_not_cut_by_its_own_repeats():
    # within one start a figure is printed again by another worker (TP0 and TP1's budgets), or by the engine core
    # twice with the same value (0.10.2's capacity lines), or before the capacity (0.26.0's padding-layer warning,
    # at profiling and at allocation): none opens a start
    from hybridplan.logread import scan
    from hybridplan.reports.check_log import keywords, split

    for name in (
        "vllm-0.10.2-qwen3-next-80b-a3b-instruct-2xh200-1.log",
        "vllm-0.26.0-lfm2.5-1.2b-sm90-1.log",
        "vllm-0.23.0-qwen3.6-27b-fp8-mtp-4xrtx5060ti-1.log",
        "vllm-0.11.1rc-kimi-linear-48b-a3b-2xrtx3090-1.log",
    ):
        assert len(split(scan(LOGS / name, keywords()))) == 1, name


# --- SGLang: more than one memory split leaves the logged KV tokens -------------------------------------------

SGL = "sglang-0.5.18-qwen3.8-27b-fp8-h100-1.log"
SGL_FLAGS = (
    "--model",
    "qwen3.5-27b",
    "--sglang-version",
    "0.5.18",
    "--mem-fraction-static",
    "0.85",
    "--max-running-requests",
    "32",
)


def test_every_split_that_leaves_the_logged_tokens_is_reported(run_cli):
    # the real 0.5.18 log: 124 slots and 330,323 KV tokens, no "Load weight begin" line, so the split R is solved
    # from the tokens. One state row is per = 48·(61,440 + 3,145,728) B = 146.81 MiB; the padded split (0.5.17 on,
    # K = ⌊(R·0.9/1.9 − per) / per⌋, KV = R − (K+1)·per) leaves the same tokens at R and at R + per with K + 1, so
    # 124 and 125 both fit, and both are said
    code, d, _ = _json(run_cli, LOGS / SGL, *SGL_FLAGS)
    assert code == 0 and d["ok"]
    note = next(n for n in d["notes"] if "memory splits leave the logged 330,323 KV tokens" in n)
    assert "max_mamba_cache_size 124" in note and "max_mamba_cache_size 125" in note
    # read with 0.5.16's split (K rows charged, not K + 1), neither fit is the logged 124: both are shown
    code, d, _ = _json(run_cli, LOGS / SGL, *SGL_FLAGS[:2], "--sglang-version", "0.5.16", *SGL_FLAGS[4:])
    k = next(r for r in d["rows"] if r["figure"] == "max_mamba_cache_size")
    assert code == 1 and k["predicted"] == "125 or 126"


def test_the_upper_split_is_not_flagged_wrong(run_cli, tmp_path):
    # the same log with its pool line written as the other split's (derived, not posted): max_mamba_cache_size 125,
    # so 126 rows, conv 126·48·61,440 B = 0.35 GB and SSM 126·48·3,145,728 B = 17.72 GB (GiB, as SGLang prints
    # them), the KV line unchanged. Only the lowest split was kept before, and 125 was flagged against 124
    log = _derived(
        tmp_path,
        SGL,
        "max_mamba_cache_size: 124, conv_state size: 0.34GB, ssm_state size: 17.58GB",
        "max_mamba_cache_size: 125, conv_state size: 0.35GB, ssm_state size: 17.72GB",
    )
    code, d, _ = _json(run_cli, log, *SGL_FLAGS)
    k = next(r for r in d["rows"] if r["figure"] == "max_mamba_cache_size")
    assert code == 0 and d["ok"] and (k["logged"], k["predicted"]) == (125, 125), d["rows"]


# --- the GPU and the GDN prefill kernel, read from the log ---------------------------------------------------


def test_the_gdn_kernel_the_log_names_decides_the_0_33_page(run_cli, tmp_path):
    # vllm-unknown-qwen3.6-27b-int4-2xrtx3090-2.log (two RTX 3090, sm_86) read with 0.33.0's rules: FlashInfer's GDN
    # prefill would add a checkpoint page per GDN layer and miss the logged 2.37x (test_real_logs). On sm_86 vLLM
    # 0.33.0 runs Triton/FLA (``_resolve_gdn_prefill_backend``, vllm/model_executor/layers/mamba/gdn/
    # qwen_gdn_linear_attn.py) and says so in one line; that line added (derived, with 0.33.0's wording from
    # ``_log_gdn_backend_decision``), the start is checked with Triton's pages and reconciles
    name = "vllm-unknown-qwen3.6-27b-int4-2xrtx3090-2.log"
    text = (LOGS / name).read_text()
    log = tmp_path / "triton-gdn.log"
    log.write_text(
        text + "(EngineCore pid=120) INFO 06-01 09:21:10 [qwen_gdn_linear_attn.py:300] Using Triton/FLA "
        "GDN prefill kernel (requested=auto, head_k_dim=128).\n"
    )
    code, d, err = _json(run_cli, log, "--model", "qwen3.5-27b", "--vllm-version", "0.33.0")
    assert code == 0 and d["ok"], (d.get("rows"), err)
    gdn = next(s for s in d["settings"] if s["name"] == "gdn_prefill_backend")
    assert gdn["value"] == "triton" and "Triton/FLA GDN prefill kernel" in gdn["source"]
    code, d, _ = _json(run_cli, LOGS / name, "--model", "qwen3.5-27b", "--vllm-version", "0.33.0")
    assert code == 1


def test_the_gpu_is_read_for_the_gdn_choice():
    # the GDN prefill backend left to auto is vLLM 0.33's pick for the log's GPU: vllm-0.13.0-qwen3-next-80b-w4a16-
    # 2xl40s-1.log prints "Device capability 8.9" (L40S), where _resolve_gdn_prefill_backend (0.33.0,
    # qwen_gdn_linear_attn.py) runs triton; FlashInfer only on 9.0, or 10.x/12.x with head_k_dim 128
    from hybridplan.engines.given import LogGiven
    from hybridplan.engines.vllm import logs
    from hybridplan.engines.vllm.defaults import gdn_prefill_backend
    from hybridplan.logread import scan
    from hybridplan.reports.check_log import keywords

    log = scan(LOGS / "vllm-0.13.0-qwen3-next-80b-w4a16-2xl40s-1.log", keywords())
    d = logs.check(log, LogGiven(model="qwen3-next", vllm_version="0.33.0"))
    cc = next(x for x in d.settings if x.name == "compute_capability")
    assert cc.value == "8.9"
    sc, _, _ = logs.scenario(log, logs.read_settings(log, LogGiven(model="qwen3-next", vllm_version="0.33.0")), [])
    assert sc.vllm.gdn_backend is None and sc.vllm.compute_capability == (8, 9)
    assert gdn_prefill_backend(sc) == "triton"


def test_sglang_dev_build_is_checked_against_both_neighbours(run_cli):
    # sglang-0.5.18-qwen3.8-27b-fp8-h100-1.log given as a 0.5.17 dev build (between 0.5.16 and 0.5.17): 0.5.16's split
    # charges K state rows and gives 125 or 126 slots for the logged tokens, 0.5.17's charges K + 1 and gives the
    # logged 124 (test_real_logs test_padding_row_of_0_5_17_on_a_real_log), so 0.5.17 is kept
    args = ("--model", "qwen3.5-27b", "--mem-fraction-static", "0.85", "--max-running-requests", "32")
    code, d, _ = _json(run_cli, LOGS / SGL, *args, "--sglang-version", "0.5.17.dev20260819+g574274660f")
    assert code == 0 and d["ok"]
    note = next(n for n in d["notes"] if "build between releases 0.5.16 and 0.5.17" in n)
    assert "0.5.17's rules kept" in note and "0.5.16's: 1 of" in note


def test_sglang_neighbours():
    from hybridplan.engines.sglang.releases import neighbours

    assert [r.version for r in neighbours("0.5.17.dev20260819+g574274660f")] == ["0.5.17", "0.5.16"]
    assert [r.version for r in neighbours("0.5.17")] == ["0.5.17"]
    assert [r.version for r in neighbours("0.5.6.post2")] == ["0.5.6.post2"]


def test_interleaved_compose_services_are_read_apart(run_cli):
    # vllm-0.16.1rc1-qwen3.5-9b-awq-and-4b-awq-l40s-1.log: "docker compose logs -f" of two services on one L40S,
    # their lines interleaved, each prefixed with its service. Read as one log, the banners and figures of the two
    # would be cut at their repeats and mixed; read per service, the 9B starts and reconciles, and the 4B's
    # -8.59 GiB budget is the refusal vLLM gives ("No available memory for the cache blocks")
    code, d, err = _json(run_cli, LOGS / "vllm-0.16.1rc1-qwen3.5-9b-awq-and-4b-awq-l40s-1.log")
    assert code == 0 and d["ok"], (d.get("rows"), err)
    models = [s["model"] for s in d["starts"]]
    assert models == ["qwen3.5-4b", "qwen3.5-9b"]
    four, nine = d["starts"]
    assert [(r["figure"], r["logged"], r["predicted"]) for r in four["rows"]] == [("start", "refused", "refused")]
    assert any("container qwen3.5-9b" in n for n in nine["notes"])
    assert {r["figure"].split(" (")[0] for r in nine["rows"]} >= {"attention block size", "KV cache size"}
