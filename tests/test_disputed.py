"""Rules that were disputed (issue 16, item 6), each settled by the engine's own code in its wheel, release and
file named beside the test, and pinned on a real log where one exists (tests/data/logs/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybridplan.engines.vllm.blocks import attention_block_size
from tests.helpers import scenario

LOGS = Path(__file__).parent / "data" / "logs"
KIMI_LOG = LOGS / "vllm-0.11.1rc-kimi-linear-48b-a3b-2xrtx3090-1.log"


# --- 1. Kimi-Linear in vLLM 0.11.x (vllm#28228) ------------------------------------------------------------------

@pytest.mark.parametrize("version, block", [
    # 0.11.1 vllm/model_executor/models/config.py HybridAttentionMambaModelConfig: use_mla → alignment 64 (128 only
    # with VLLM_ATTENTION_BACKEND=CUTLASS_MLA). KDA page at TP 2: q, k, v convs 3·2,048·3·2 B + 16·128·128·4 B =
    # 1,085,440 B; MLA token (512 + 64)·2 B = 1,152 B → 64·cdiv(1,085,440, 64·1,152) = 64·15 = 960
    ("0.11.1", 960), ("0.19.1", 960),
])
def test_kimi_linear_block_grows_in_mla_units(version, block):
    sc = scenario("kimi-linear-48b-a3b", 120_000, minor=version, tp=2)
    assert attention_block_size(sc, "none") == (block, True)


def test_kimi_linear_log_of_issue_28228_reconciles_at_0_11_1(run_cli):
    """75,840 tokens = 318 blocks // 4 groups (1 MLA + 3 KDA of 7 layers) · 960; a 16-token unit would give block
    944 (16·cdiv(1,085,440, 18,432)), 2.30 GiB // (7·944·1,152 B) = 324 blocks → 81·944 = 76,464, which the log
    does not print: the log pins the 64-token MLA unit of 0.11.x."""
    code, out, err = run_cli("check-log", KIMI_LOG, "--model", "kimi-linear-48b-a3b", "--tp", "2",
                             "--vllm-version", "0.11.1")
    assert code == 0, err
    assert "all figures match" in out
