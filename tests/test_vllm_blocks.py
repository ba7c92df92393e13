"""vLLM's attention block size for hybrids: the block unit by release, GPU and MLA, and the Mamba cache mode a
start is left with. Each rule is settled by the engine's own code in its wheel (release and file beside the test),
and pinned on a real log where one exists (tests/data/logs/SOURCES.md). SGLang's radix strategy, settled the same
way: tests/test_sglang_radix.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hybridplan.engines.vllm.blocks import attention_block_size
from tests.helpers import scenario

pytestmark = pytest.mark.unit

LOGS = Path(__file__).parent / "data" / "logs"
KIMI_LOG = LOGS / "vllm-0.11.1rc-kimi-linear-48b-a3b-2xrtx3090-1.log"


# --- 1. Kimi-Linear in vLLM 0.11.x (vllm#28228) ------------------------------------------------------------------


@pytest.mark.parametrize(
    "version, block",
    [
        # 0.11.1 vllm/model_executor/models/config.py HybridAttentionMambaModelConfig: use_mla → alignment 64 (128 only
        # with VLLM_ATTENTION_BACKEND=CUTLASS_MLA). KDA page at TP 2: q, k, v convs 3·2,048·3·2 B + 16·128·128·4 B =
        # 1,085,440 B; MLA token (512 + 64)·2 B = 1,152 B → 64·cdiv(1,085,440, 64·1,152) = 64·15 = 960
        ("0.11.1", 960),
        ("0.19.1", 960),
    ],
)
def test_kimi_linear_block_grows_in_mla_units(version, block):
    sc = scenario("kimi-linear-48b-a3b", 120_000, minor=version, tp=2)
    assert attention_block_size(sc, "none") == (block, True)


def test_kimi_linear_log_of_issue_28228_reconciles_at_0_11_1(run_cli):
    """75,840 tokens = 318 blocks // 4 groups (1 MLA + 3 KDA of 7 layers) · 960; a 16-token unit would give block
    944 (16·cdiv(1,085,440, 18,432)), 2.30 GiB // (7·944·1,152 B) = 324 blocks → 81·944 = 76,464, which the log
    does not print: the log pins the 64-token MLA unit of 0.11.x."""
    code, out, err = run_cli(
        "check-log", KIMI_LOG, "--model", "kimi-linear-48b-a3b", "--tp", "2", "--vllm-version", "0.11.1"
    )
    assert code == 0, err
    assert "all figures match" in out


# --- 2. --mamba-cache-mode all on a model without SupportsMambaPrefixCaching (vLLM 0.15-0.31) --------------------
# vllm/config/vllm.py try_verify_and_update_config runs at VllmConfig construction; for a hybrid it calls
# HybridAttentionMambaModelConfig.verify_and_update_config (vllm/model_executor/models/config.py), whose first act
# is MambaModelConfig.verify_and_update_config: with prefix caching on, `all` on a class that is not
# SupportsMambaPrefixCaching becomes `align` ("falling back to 'align' mode"). Only then is the block sized: a few
# lines further in the same hook (0.15.0-0.19.1), or after load_model in Platform.update_block_size_for_backend
# (0.20.0 on, v1/executor/*_executor.py). Lfm2ForCausalLM's and Qwen3NextForCausalLM's __init__ raise
# NotImplementedError for `all`, but by then the mode is `align`: the start logs align's block, never the
# chunk-aligned one. 0.12.0-0.14.1 have no --mamba-cache-mode; prefix caching on such a class is switched off
# ("without support for prefix caching: disabling"). validation/vllm.py runs these hooks from the wheels
# (0.15.0, 0.17.1, 0.19.1, 0.20.0: the mode they leave is `align`, block and padding as below).

from hybridplan.engines.vllm.blocks import pages as vllm_pages  # noqa: E402


@pytest.mark.parametrize("version", ["0.15.0", "0.17.1", "0.19.1", "0.20.0", "0.27.1", "0.31.0"])
@pytest.mark.parametrize(
    "model, block",
    [
        # LFM2-1.2B: short-conv page 2,048 channels·(L_cache 3 − 1)·2 B = 8,192 B; attention 8 KV heads·64·2·2 =
        # 2,048 B a token → 16·cdiv(8,192, 32,768) = 16 (validation/vllm.py on 0.19.1: page 32,768 B, 300 % padding)
        ("lfm2-1.2b", 16),
        # Qwen3-Next at TP 1: GDN page 8,192·3·2 + 32·128·128·2 = 1,097,728 B; attention 2 KV heads·256·2·2 = 2,048 B
        # → 16·cdiv(1,097,728, 32,768) = 544
        ("qwen3-next", 544),
    ],
)
def test_all_on_a_model_without_it_logs_the_align_block(version, model, block):
    sc = scenario(model, 8192, minor=version, vllm=dict(mode="all"))
    got = vllm_pages(sc)
    assert list(got.modes) == ["align"]
    assert got.modes["align"].layout.block_size == block


@pytest.mark.parametrize("version", ["0.12.0", "0.14.1"])
def test_prefix_caching_on_a_model_without_it_is_switched_off_before_0_15(version):
    sc = scenario("lfm2-1.2b", 8192, minor=version, vllm=dict(mode="all"))
    assert list(vllm_pages(sc).modes) == ["none"]


# --- 3. The block unit by GPU (compute capability), from the wheels ----------------------------------------------
# Before 0.20.0 (vllm/model_executor/models/config.py HybridAttentionMambaModelConfig): 16, 64 for MLA from 0.11.1,
# and 32 when the head size is 256 and FlashInfer is the backend (its default) on Blackwell: compute capability
# 10.0 exactly in 0.11.1-0.12.0 (current_platform.is_device_capability(100)), any 10.x in 0.13.0-0.17.1
# (is_device_capability_family(100)); the clause is gone in 0.18.0. From 0.20.0 (vllm/platforms/interface.py
# _align_hybrid_block_size): the smallest kernel block of the backend vllm/platforms/cuda.py
# _get_backend_priorities picks first, raised to the block that backend prefers: on 10.x FlashInfer [16, 32, 64]
# and, for MLA, FlashInfer-MLA [32, 64] (mla/flashinfer_mla.py, supports_compute_capability: major 10) → 32;
# on 9.x FlashAttention (MultipleOf(16)) and FlashAttention-MLA (major 9 only); on 8.x and 12.x FlashAttention
# and Triton-MLA (MultipleOf(16); 12.x lists TRITON_MLA first from 0.24.0). MLA ≥ 128 from 0.27.0 everywhere.

from hybridplan.engines.vllm.blocks import compute_capability  # noqa: E402
from hybridplan.scenario import Budget, DtypeChoice  # noqa: E402


def _block(model, version, gpu, *, tp=1, kv=None, ctx=8192):
    sc = scenario(model, ctx, minor=version, tp=tp, dtypes=DtypeChoice(kv=kv), budget=Budget(gpu=gpu, gpu_mem=1))
    return attention_block_size(sc, "none")[0]


def test_gpu_names_map_to_compute_capability():
    assert [
        compute_capability(scenario("qwen3-next", budget=Budget(gpu=g, gpu_mem=1)))
        for g in ("h100", "b200", "b300", "rtx-5090", "gb10", "rtx-3090", "l40s", None)
    ] == [(9, 0), (10, 0), (10, 3), (12, 0), (12, 1), (8, 6), (8, 9), (9, 0)]


@pytest.mark.parametrize(
    "version, gpu, block",
    [
        # Qwen3-Next at TP 2 with fp8 KV (the L40S log vllm-0.13.0-qwen3-next-80b-w4a16-2xl40s-1.log prints 1072):
        # GDN page 548,864 B over 2·256·1 = 512 B a token = 1,072 tokens exactly → 16·67 = 1072 where the unit is 16,
        # 32·cdiv(1,072, 32) = 1088 where it is 32 (head size 256 on Blackwell)
        ("0.13.0", "l40s", 1072),
        ("0.13.0", "h100", 1072),
        ("0.13.0", "rtx-5090", 1072),
        ("0.13.0", "b200", 1088),
        ("0.13.0", "b300", 1088),
        ("0.17.1", "b200", 1088),
        ("0.18.0", "b200", 1072),
        ("0.20.0", "b200", 1072),
        ("0.12.0", "b200", 1088),
        ("0.12.0", "b300", 1072),
        ("0.11.1", "b200", 1088),
        ("0.11.0", "b200", 1072),
    ],
)
def test_head_256_on_blackwell_grows_in_32s_from_0_11_1_to_0_17_1(version, gpu, block):
    assert _block("qwen3-next", version, gpu, tp=2, kv="fp8") == block


def test_real_l40s_log_keeps_the_16_unit(run_cli):
    code, out, err = run_cli(
        "check-log", LOGS / "vllm-0.13.0-qwen3-next-80b-w4a16-2xl40s-1.log", "--model", "qwen3-next"
    )
    assert code == 0 and "all figures match" in out, out + err


@pytest.mark.parametrize(
    "version, gpu, block",
    [
        # Kimi-Linear at TP 2: KDA page 1,085,440 B, MLA 1,152 B a token (942.2 tokens). Unit 16 → 944; 32 → 960;
        # 64 (0.11.1-0.19.1) → 960; 128 (0.27.0 on) → 1024
        ("0.24.0", "h100", 944),
        ("0.24.0", "rtx-3090", 944),
        ("0.24.0", "rtx-5090", 944),
        ("0.24.0", "gb10", 944),
        ("0.24.0", "b200", 960),
        ("0.20.0", "b300", 960),
        ("0.26.0", "b200", 960),
        ("0.19.1", "b200", 960),
        ("0.19.1", "rtx-3090", 960),
        ("0.27.0", "b200", 1024),
        ("0.27.0", "h100", 1024),
    ],
)
def test_mla_unit_by_gpu(version, gpu, block):
    assert _block("kimi-linear-48b-a3b", version, gpu, tp=2) == block


def test_the_logs_device_line_decides_the_unit(run_cli, tmp_path):
    """check-log takes the compute capability from the log (SymmMemCommunicator's "Device capability 8.9" here);
    the same log with a Blackwell capability predicts 0.13.0's 32-token unit for head size 256: 1088, not the
    logged 1072."""
    src = LOGS / "vllm-0.13.0-qwen3-next-80b-w4a16-2xl40s-1.log"
    code, out, err = run_cli("check-log", src, "--model", "qwen3-next", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert {"engine": "vllm", "name": "compute_capability", "value": "8.9"}.items() <= next(
        st for st in data["settings"] if st["name"] == "compute_capability"
    ).items()
    b200 = tmp_path / "b200.log"
    b200.write_text(src.read_text().replace("Device capability 8.9", "Device capability 10.0"))
    code, out, err = run_cli("check-log", b200, "--model", "qwen3-next")
    row = next(line for line in out.splitlines() if "attention block size" in line)
    assert row.split()[-3:] == ["1072", "1088", "✗"], row


def _logged_block(name):
    import re

    return int(re.search(r"Setting attention block size to (\d+) tokens", (LOGS / name).read_text()).group(1))


@pytest.mark.parametrize("gpu", ["rtx-pro-6000", "rtx-5090", "b200"])
def test_blackwell_log_0_20_0_block_on_each_blackwell(gpu):
    """vllm-0.20.0-qwen3.6-35b-a3b-nvfp4-blackwell-wsl-1.log (a Blackwell board under WSL; kv_cache_dtype fp8_e4m3,
    prefix caching on: align) logs 2096 = 16·131, not a multiple of 32: in 0.20.0 the head-256 clause is gone and
    FlashInfer (10.x) or FlashAttention (12.x) brings 16 on every Blackwell."""
    sc = scenario(
        "qwen3.6-35b-a3b", 65536, minor="0.20.0", dtypes=DtypeChoice(kv="fp8"), budget=Budget(gpu=gpu, gpu_mem=1)
    )
    assert (
        attention_block_size(sc, "align")[0]
        == _logged_block("vllm-0.20.0-qwen3.6-35b-a3b-nvfp4-blackwell-wsl-1.log")
        == 2096
    )


def test_gb10_log_block():
    """vllm-0.25.1-qwen3.8-27b-int4-mtp-gb10-1.log (GB10, 12.1; bf16 KV, MTP 3, prefix caching on by default from
    0.28.0 only, so none): block 800 with GB10 named as the GPU (12.x: FlashAttention, multiples of 16; 800 is
    also a multiple of 32, so this log agrees rather than decides)."""
    sc = scenario("qwen3.5-27b", 262144, minor="0.25.1", spec_tokens=3, budget=Budget(gpu="gb10", gpu_mem=1))
    assert attention_block_size(sc, "none")[0] == _logged_block("vllm-0.25.1-qwen3.8-27b-int4-mtp-gb10-1.log")


@pytest.mark.parametrize(
    "version, prefix, mode",
    [
        # MambaModelConfig.verify_and_update_config: without prefix caching the mode becomes none ("Mamba cache mode is
        # set to 'none' when prefix caching is disabled"); hybrids get no prefix caching with no flag until 0.27.1
        # (vllm/engine/arg_utils.py default_prefix_caching), and it is on from 0.28.0, where `all` on LFM2 is align
        ("0.20.0", "", "none"),
        ("0.20.0", ", 'enable_prefix_caching': True", "align"),
        ("0.28.0", "", "align"),
    ],
)
def test_mode_all_asked_in_the_args_follows_prefix_caching(run_cli, tmp_path, version, prefix, mode):
    log = tmp_path / "lfm2.log"
    log.write_text(
        f"INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version {version}\n"
        "INFO 01-01 00:00:00 [utils.py:1] non-default args: {'model': 'LiquidAI/LFM2-1.2B', "
        f"'mamba_cache_mode': 'all'{prefix}}}\n"
        # LFM2-1.2B's padding in every mode but all (block 16: 32,768 B over an 8,192 B conv page)
        "INFO 01-01 00:00:01 [interface.py:1] Padding mamba page size by 300.00% to ensure that mamba "
        "page size and attention page size are exactly equal.\n"
    )
    code, out, err = run_cli("check-log", log, "--model", "lfm2-1.2b", "--json")
    assert code == 0, err
    got = next(st for st in json.loads(out)["settings"] if st["name"] == "mamba_cache_mode")
    assert got["value"] == mode, got
