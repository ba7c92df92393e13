"""vLLM's ``--kv-cache-dtype int8_per_token_head`` (0.20.0 on): int8 K and V and one float32 scale per token,
KV head and side, carved from the KV cache. vllm/v1/kv_cache_interface.py ``AttentionSpec.page_size_bytes``
(0.20.0–0.32.0) adds 2 · block · heads · 4 B to the int8 page; 0.33.0's Triton backend packs each head as
(head_size + head_size) · 1 + 2 · 4 B (vllm/v1/attention/backends/triton_attn.py ``customize_spec``): the same
bytes. vllm/config/cache.py ``CacheDType`` first lists it in 0.20.0."""

from __future__ import annotations

import pytest

from hybridplan.engines.vllm.blocks import layout
from hybridplan.errors import PlanError
from hybridplan.scenario import DtypeChoice
from tests.helpers import footprint, scenario

pytestmark = pytest.mark.unit

INT8 = DtypeChoice(kv="int8_per_token_head")


@pytest.mark.parametrize("minor", [20, 25, 33])
def test_page_holds_the_scales(minor):
    # Nemotron-H-8B: 8 KV heads of 128. A token of one attention layer: 2 · 8 · (128 · 1 + 4) = 2,112 B (bf16
    # would be 4,096, fp8 2,048)
    fp = footprint("nemotron-h", dtypes=INT8, minor=minor)
    assert {g.bytes_per_token_per_layer for g in fp.kv} == {2 * 8 * (128 + 4)}
    # TP 2 halves the heads, and their scales with them: 2 · 4 · 132
    fp = footprint("nemotron-h", dtypes=INT8, minor=minor, tp=2)
    assert {g.bytes_per_token_per_layer for g in fp.kv} == {2 * 4 * (128 + 4)}


def test_hybrid_block_is_aligned_on_the_page_with_scales():
    # the Mamba page, 4,255,744 B (bf16 conv + float32 SSM, tests/test_engines.py's 1040 block), over 16 tokens of
    # 2,112 B: 16 · cdiv(4,255,744, 33,792) = 16 · 126 = 2,016; the page 2,016 · 2,112 = 4,257,792 B pads the Mamba
    # page by 0.05 %
    lay = layout(scenario("nemotron-h", minor="0.20.0", dtypes=INT8), "none")
    assert lay.block_size == 2016 and lay.page_bytes == 2016 * 2112 and f"{lay.padding_pct:.2f}" == "0.05"


def test_refused_before_0_20():
    with pytest.raises(PlanError, match="int8_per_token_head"):
        footprint("nemotron-h", dtypes=INT8, minor="0.19.1")


def test_fit_takes_it_and_prints_it_back(run_cli):
    code, out, err = run_cli(
        "fit",
        "nemotron-h",
        "--ctx",
        "8192",
        "--gpu-type",
        "h100",
        "--engine",
        "vllm",
        "--vllm-version",
        "0.20.0",
        "--kv-dtype",
        "int8_per_token_head",
    )
    assert code == 0, err
    assert "Setting attention block size to 2016 tokens" in out and "--kv-cache-dtype int8_per_token_head" in out


def test_check_log_reads_it_from_the_log(run_cli, tmp_path):
    # tests/data/vllm-0.23-nemotron-h.log with the line vLLM 0.20.0 on prints for this dtype added (vllm/config/
    # cache.py ``_validate_cache_dtype``: "Using int8_per_token_head data type to store kv cache. …"), the engine
    # line's kv_cache_dtype=auto written int8_per_token_head, and its block and padding lines written for that
    # dtype as derived above (its capacity lines dropped): a derived excerpt, not a posted log
    from pathlib import Path

    src = (Path(__file__).parent / "data" / "vllm-0.23-nemotron-h.log").read_text().splitlines()
    out = []
    for line in src:
        line = (
            line.replace("block size to 1040 tokens", "block size to 2016 tokens")
            .replace("by 0.10%", "by 0.05%")
            .replace("kv_cache_dtype=auto", "kv_cache_dtype=int8_per_token_head")
        )
        if "Available KV cache memory" in line or "KV cache size" in line or "Maximum concurrency" in line:
            continue
        out.append(line)
        if "non-default args" in line:
            out.append(
                "INFO 11-20 09:12:04 [cache.py:255] Using int8_per_token_head data type to store kv cache. "
                "It reduces the GPU memory footprint and boosts the performance. Dynamic per-token-head "
                "scales will be computed at runtime."
            )
    log = tmp_path / "int8.log"
    log.write_text("\n".join(out) + "\n")
    code, o, err = run_cli("check-log", log, "--json")
    import json

    d = json.loads(o)
    rows = {r["figure"]: (r["logged"], r["predicted"]) for r in d["rows"]}
    assert code == 0 and rows["attention block size"] == (2016, 2016), (d["rows"], err)
    kv = next(s for s in d["settings"] if s["name"] == "kv_cache_dtype")
    assert kv["value"] == "int8_per_token_head" and kv["source"].startswith("line ")
