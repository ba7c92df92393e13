"""vLLM and SGLang arithmetic. Each expected figure is vLLM's or SGLang's own (docs/engines.md §2–§4, noted so)
or a derivation written out in the comment beside it."""

import json

import pytest
from msgspec.structs import replace

from hybridplan.engines import sglang, vllm
from hybridplan.engines.common import lcm
from hybridplan.errors import NotServed, PlanError
from hybridplan.loader import load_model
from hybridplan.reports.fit import fit
from hybridplan.reports.prefix import prefix, prefix_sweep
from hybridplan.scenario import Budget, DtypeChoice
from tests.helpers import GiB, one_line_error, scenario

pytestmark = pytest.mark.unit


def fp_of(name, minor=33, tp=1, **kw):
    return vllm.footprint(scenario(name, minor=minor, tp=tp, dtypes=DtypeChoice(**kw)))


def lay(name, mode, minor=33, tp=1, **kw):
    return vllm.layout(scenario(name, minor=minor, tp=tp, vllm=kw), mode)


def cap_of(name, mode, minor=33, budget=40 * GiB, ctx=8192, **kw):
    return vllm.capacity(scenario(name, ctx, minor=minor, vllm=kw), mode, budget)


# --- docs/engines.md §2: "vLLM gives, for Nemotron-H-8B (bf16 KV, fp32 SSM, t=1)" -------------------------


@pytest.mark.parametrize("minor", [20, 23, 28, 31, 32, 33])
@pytest.mark.parametrize("mode", ["none", "align"])
def test_nemotron_block_1040(minor, mode):
    # vLLM gives: block 1040 (+0.10%) in none/align
    lo = lay("nemotron-h", mode, minor)
    assert lo.block_size == 1040 and f"{lo.padding_pct:.2f}" == "0.10"
    assert lo.mamba_page_bytes == 4_255_744 and lo.page_bytes == 1040 * 4096
    assert lo.logs == (
        "Setting attention block size to 1040 tokens to ensure that attention page size is >= mamba page size.",
        "Padding mamba page size by 0.10% to ensure that mamba page size and attention page size are exactly equal.",
    )


def test_nemotron_all_mode_blocks():
    # vLLM gives: in all, 1280 (+23.20%) with chunk_size 256 (the 8B config) and 1152 (+10.88%) with 128
    lo = lay("nemotron-h", "all", 28)
    assert (lo.block_size, f"{lo.padding_pct:.2f}", lo.page_bytes) == (1280, "23.20", 5_242_880)
    spec = load_model("nemotron-h")
    lo = vllm.layout(scenario(replace(spec, chunk_size=128), minor=28), "all")
    assert (lo.block_size, f"{lo.padding_pct:.2f}") == (1152, "10.88")


@pytest.mark.parametrize(
    "minor,mode,blocks,conc,tokens",
    [
        # vLLM gives, at 40 GiB and max_len 8192: 2520 blocks, 180.00 (none), 126.00 (align); all: 2048 and 41.80.
        # tokens = int(concurrency · 8192) (vllm/v1/core/kv_cache_utils.py, 0.23+)
        (28, "none", 2520, "180.00", 1_474_560),
        (28, "align", 2520, "126.00", 1_032_192),
        (28, "all", 2048, "41.80", int(2048 / 49 * 8192)),
        # 0.32+: MambaMixer2 adds one prefill-checkpoint page in align: 8 + 6·(2 + 1) = 26 blocks per request
        (33, "align", 2520, "96.92", int(2520 / 26 * 8192)),
    ],
)
def test_nemotron_capacity_at_40gib(minor, mode, blocks, conc, tokens):
    cap = cap_of("nemotron-h", mode, minor)
    # groups: 4 attention + 24 Mamba layers → group size 4 → 1 attention group and 6 Mamba groups
    assert cap.group_size == 4 and len(cap.groups) == 7
    assert cap.num_blocks == blocks and f"{cap.max_concurrency:.2f}" == conc and cap.kv_tokens == tokens
    line = f"GPU KV cache size: {tokens:,} tokens, Maximum concurrency for 8,192 tokens per request: {conc}x"
    assert cap.logs == (line,)


def test_two_line_capacity_log_before_028():
    # 0.23 prints two lines (docs/engines.md §2)
    cap = cap_of("nemotron-h", "none", 23)
    assert cap.logs == (
        "GPU KV cache size: 1,474,560 tokens",
        "Maximum concurrency for 8,192 tokens per request: 180.00x",
    )


def test_max_num_seqs_over_mamba_blocks_will_not_start():
    # vLLM 0.33 raises when max_num_seqs > num_blocks with Mamba layers (vllm/config/compilation.py)
    r = fit(scenario("nemotron-h", budget=Budget(kv_budget=40 * GiB), engine="vllm", vllm=dict(max_num_seqs=3000)))
    f = r.parts["vllm"].modes["align"]
    assert not f.starts and f.largest_max_num_seqs == 2520 and not r.verdict_ok
    assert f.problem.startswith("max_num_seqs (3000) exceeds available Mamba cache blocks (2520).")
    r = fit(scenario("nemotron-h", budget=Budget(kv_budget=40 * GiB), engine="vllm", vllm=dict(max_num_seqs=2520)))
    assert r.verdict_ok


def test_fit_cli_exit_codes(run_cli):
    code, out, _ = run_cli("fit", "nemotron-h", "--ctx", "8192", "--kv-budget", "40GiB", "--json")
    d = json.loads(out)
    assert code == 0 and d["ok"]
    assert d["vllm"]["available_kv_cache_memory_log"] == "Available KV cache memory: 40.0 GiB"
    # vLLM: 40 GiB // (4 layers a group · 1040-token pages of 4,096 B a token) = 42,949,672,960 // 17,039,360
    # = 2,520 blocks (test_nemotron_capacity_at_40gib above)
    assert d["vllm"]["modes"]["none"]["num_blocks"] == 2520
    # SGLang 0.5.23 (the default release), --mamba-full-memory-ratio 0.9 (its default): kv_cache_configurator.py
    # K = ⌊(R·0.9/1.9 − per)/per⌋ = ⌊199.19 − 1⌋ = 198 with per = 102,137,856 B (derived in tests/test_sglang.py)
    assert d["sglang"]["max_mamba_cache_size"] == 198
    code, out, _ = run_cli("fit", "nemotron-h", "--ctx", "8192", "--kv-budget", "40GiB", "--max-num-seqs", "5000")
    assert code == 1 and "will not start" in out


@pytest.mark.parametrize(
    "version,starts,capped", [("0.17.1", True, False), ("0.19.0", True, True), ("0.20.0", False, False)]
)
def test_fit_verdict_follows_the_release(version, starts, capped):
    # Nemotron-H, 5 GiB of KV, --max-num-seqs 1024. 0.17–0.19.0: SSM float16 (the hook's fallback): state
    # 10240·3·2 + 128·64·128·2 = 2,158,592 B, attn1 2·8·128·2 = 4,096 → block 16·cdiv(2,158,592, 65,536) = 528,
    # page 2,162,688 B, groups of 4: 5 GiB // 8,650,752 = 620 blocks; 0.20 (and 0.19.1 under transformers 5): SSM
    # float32 → 4,255,744 B, block
    # 1040, page 4,259,840 B: 5 GiB // 17,039,360 = 315 blocks. 1024 sequences exceed
    # both: nothing happens up to 0.17.1, 0.18–0.19 cap the CUDA-graph sizes and start, 0.20 refuses
    # (vllm/config/compilation.py)
    r = fit(
        scenario(
            "nemotron-h", minor=version, budget=Budget(kv_budget=5 * GiB), engine="vllm", vllm=dict(max_num_seqs=1024)
        )
    )
    part = r.parts["vllm"]
    blocks = part.chosen.capacity.num_blocks
    assert blocks == (315 if version == "0.20.0" else 620)
    assert r.verdict_ok is starts
    assert any(f"caps its CUDA-graph capture sizes at the {blocks} Mamba cache blocks" in n for n in r.notes) is capped


def test_kv_token_figure_moves_inside_0_20():
    # "GPU KV cache size" (vllm/v1/core/kv_cache_utils.py): 0.20.0 num_blocks // groups · block =
    # 315 // 7 · 1040 = 46,800; 0.20.1 int(max_concurrency · max_len) = int(315 / 14 · 8192) = 184,320
    caps = {v: vllm.capacity(scenario("nemotron-h", minor=v), "none", 5 * GiB) for v in ("0.20.0", "0.20.1")}
    assert caps["0.20.0"].num_blocks == caps["0.20.1"].num_blocks == 315
    assert (caps["0.20.0"].kv_tokens, caps["0.20.1"].kv_tokens) == (46_800, 184_320)


def test_fit_from_gpu_memory():
    # 0.33: requested = ceil(141e9 · 0.92); budget = that − weights (8e9 params · 2 B) − 2 GiB overhead
    r = fit(scenario("nemotron-h", budget=Budget(gpu_mem=141 * 10**9, params=8e9, overhead=2 * GiB), engine="vllm"))
    assert r.parts["vllm"].budget == -(-141 * 10**9 * 92 // 100) - 16 * 10**9 - 2 * GiB
    # without --weights or --params the weights are counted from the config: 8,100,852,736 parameters at 2 B
    r = fit(scenario("nemotron-h", budget=Budget(gpu_mem=141 * 10**9, overhead=2 * GiB), engine="vllm"))
    assert r.parts["vllm"].memory.term("weights") == 2 * 8_100_852_736


def test_impossible_budget(run_cli):
    # the weights alone exceed 16 GiB × 0.92: neither engine starts, and each says why
    code, out, err = run_cli("fit", "nemotron-h", "--gpu-mem", "16GiB", "--weights", "20GiB")
    assert code == 1 and "will not start" in out and out.count("nothing is left for the caches") == 2 and not err


# --- rules across versions, TPs and families ---------------------------------------------------------


@pytest.mark.parametrize("tp,block", [(1, 1040), (2, 1040), (4, 1040), (8, 1040)])
def test_nemotron_block_at_every_tp(tp, block):
    # state and attn1 halve together: TP 2: conv 5120·3·2 + SSM 64·64·128·4 = 2,127,872 B; attn1 2·4·128·2
    # = 2,048 → 16·cdiv(2,127,872, 32,768) = 16·65 = 1040; likewise at 4 and 8.
    assert lay("nemotron-h", "align", tp=tp).block_size == block


@pytest.mark.parametrize(
    "tp,mpage,attn1,none_block,all_block",
    [
        # Falcon-H1-0.5B, g = 1 padded to t groups; SSM at bf16 (model dtype); chunk 128; attn1 = 2·kv·64·2
        # TP 1: conv 1792·3·2 = 10,752 + SSM 24·64·128·2 = 393,216 → 403,968; attn1 512 → 16·cdiv(403,968, 8,192)
        #       = 800; all: lcm(128,16) = 128, cdiv(403,968, 512) = 789 → 128·7 = 896
        (1, 403_968, 512, 800, 896),
        # TP 2: conv (1536 + 2·2·128)/2 = 1024 → 6,144 + 196,608 = 202,752; attn1 256 → 16·cdiv(202,752, 4,096) = 800
        (2, 202_752, 256, 800, 896),
        # TP 4: conv (1536 + 2·4·128)/4 = 640 → 3,840 + 98,304 = 102,144; KV heads 2 < 4 → 1 → attn1 256 → 400
        (4, 102_144, 256, 400, 512),
        # TP 8: conv (1536 + 2·8·128)/8 = 448 → 2,688 + 49,152 = 51,840; attn1 256 → 16·cdiv(51,840, 4,096) = 208
        (8, 51_840, 256, 208, 256),
    ],
)
def test_single_group_mamba2_model(tp, mpage, attn1, none_block, all_block):
    fp = fp_of("falcon-h1-0.5b", 28, tp)
    assert vllm.mamba_page(fp) == mpage and vllm.attention_page_per_token(fp) == attn1
    assert lay("falcon-h1-0.5b", "none", 28, tp).block_size == none_block
    # all: 128·cdiv(cdiv(mpage, attn1), 128); TP 4: cdiv(102,144, 256) = 399 → 512; TP 8: 203 → 256
    assert lay("falcon-h1-0.5b", "all", 28, tp).block_size == all_block


def test_mamba1_model():
    # Jamba: conv 8192·3·2 = 49,152 + SSM 8192·16·2 = 262,144 → 311,296 B; attn1 2·8·128·2 = 4,096
    # none: 16·cdiv(311,296, 65,536) = 80 (+5.26 %); all: no chunk size → 2048 → 2048·cdiv(76, 2048) = 2048
    lo = lay("jamba", "none", 28)
    assert (lo.block_size, f"{lo.padding_pct:.2f}") == (80, "5.26")
    assert lay("jamba", "all", 28).block_size == 2048
    # Mamba-1 layers pin 2 pages in align even in 0.33 (no prefill checkpoint page)
    assert vllm.recurrent_pages(scenario("jamba"), "mamba1", "align", 80) == 2
    assert vllm.recurrent_pages(scenario("jamba"), "mamba2", "align", 80) == 3


@pytest.mark.parametrize(
    "minor,backend,block",
    [
        # Qwen3-Next: conv 8192·3·2 = 49,152 + SSM 32·128·128·2 = 1,048,576 → 1,097,728 B; attn1 2·2·256·2 = 2,048
        # → 16·cdiv(1,097,728, 32,768) = 544; vLLM 0.33 with FlashInfer GDN prefill aligns to lcm(16, 64) = 64:
        # 64·cdiv(1,097,728, 131,072) = 576 (docs/engines.md §2: "block 576 instead of 544 at t=1")
        (33, "flashinfer", 576),
        (33, "triton", 544),
        (32, "flashinfer", 544),  # the checkpoint alignment arrived in 0.33
    ],
)
def test_gdn_checkpoint_alignment(minor, backend, block):
    assert lay("qwen3-next", "align", minor, gdn_backend=backend).block_size == block
    assert lay("qwen3-next", "none", minor, gdn_backend=backend).block_size == 544
    # FlashInfer GDN also pins a checkpoint page in 0.33 align: 2 + 1
    pages = vllm.recurrent_pages(
        scenario("qwen3-next", minor=minor, vllm=dict(gdn_backend=backend)), "gdn", "align", block
    )
    assert pages == (3 if (minor, backend) == (33, "flashinfer") else 2)


def test_lfm2_block_does_not_grow_but_page_is_padded():
    # LFM2: conv state 2048·2·2 = 8,192 B per layer; attn1 2·8·64·2 = 2,048; 16·cdiv(8,192, 32,768) = 16:
    # the block stays at 16 (no "Setting" line); the state page is padded to 16·2,048 = 32,768 (+300 %)
    lo = lay("lfm2", "align")
    assert lo.block_size == 16 and not lo.block_grown and lo.padding_pct == 300.0
    assert lo.logs == (
        "Padding mamba page size by 300.00% to ensure that mamba page size and attention page size are exactly equal.",
    )


@pytest.mark.parametrize("name", ["nemotron-h", "falcon-h1-0.5b", "jamba", "qwen3-next", "lfm2"])
@pytest.mark.parametrize("tp", [1, 2, 4, 8])
@pytest.mark.parametrize("version", vllm.VERSIONS)
def test_every_mode_of_every_release(name, tp, version):
    rel = vllm.release(version)
    spec = load_model(name)
    sc = scenario(spec, minor=version, tp=tp)
    if not rel.serves(spec) or (spec.architecture == "JambaForCausalLM" and rel.before("0.10.1")):
        with pytest.raises(NotServed):
            rel.check_served(spec)
        return
    try:
        fp = vllm.footprint(sc)
    except PlanError as exc:
        assert f"--tp {tp}" in str(exc)
        return
    mpage, attn1 = vllm.mamba_page(fp), vllm.attention_page_per_token(fp)
    for mode in rel.modes:
        lo = vllm.layout(sc, mode)
        # invariants of the block alignment (HybridAttentionMambaModelConfig, Platform._align_hybrid_block_size
        # from 0.20): one attention page holds one state page, the state page is padded to exactly
        # block·attn1, and the block is a multiple of the kernel block (16)
        assert lo.page_bytes == lo.block_size * attn1 >= mpage
        assert lo.block_size % 16 == 0
        # minimality: one kernel block less (none/align) or one chunk less (all) would not hold the state
        step = 16 if mode != "all" else lcm(spec.chunk_size or 2048, 16)
        if mode == "align" and rel.at_least("0.33.0") and name == "qwen3-next":
            step = 64
        assert lo.block_size == 16 or (lo.block_size - step) * attn1 < mpage
        cap = vllm.capacity(sc, mode, 40 * GiB)
        assert cap.num_blocks == 40 * GiB // (cap.group_size * lo.page_bytes)
        # one merged capacity line from 0.28.0, two before; padding-layer warnings come first
        capacity_lines = [line for line in cap.logs if not line.startswith("Add ")]
        assert len(capacity_lines) == (1 if rel.at_least("0.28.0") else 2)


def test_user_block_larger_than_needed_is_kept():
    # the block only grows: --block-size 2048 stays, and the state page is padded to 2048·4,096 B
    lo = lay("nemotron-h", "align", block_size=2048)
    assert lo.block_size == 2048 and not lo.block_grown and lo.page_bytes == 2048 * 4096
    assert lo.logs == (
        f"Padding mamba page size by {100 * (2048 * 4096 - 4_255_744) / 4_255_744:.2f}% to ensure "
        "that mamba page size and attention page size are exactly equal.",
    )


def test_mla_block_at_least_128():
    from hybridplan.adapters import spec_from_config

    kimi = spec_from_config(
        {
            "architectures": ["KimiLinearForCausalLM"],
            "num_hidden_layers": 4,
            "hidden_size": 2304,
            "num_attention_heads": 32,
            "kv_lora_rank": 512,
            "qk_rope_head_dim": 64,
            "linear_attn_config": {
                "full_attn_layers": [4],
                "num_heads": 32,
                "head_dim": 128,
                "short_conv_kernel_size": 4,
            },
        },
        name="kimi",
    )
    # KDA page: conv 12288·3·2 = 73,728 + SSM 32·128·128·4 = 2,097,152 → 2,170,880 B; MLA attn1 = 576·2 = 1,152
    # 0.27+: A = max(64, 16, 128) → 128·cdiv(2,170,880, 147,456) = 128·15 = 1920
    assert vllm.layout(scenario(kimi), "align").block_size == 1920
    # 0.23: A = max(the backend's smallest kernel block, the block): FlashAttention-MLA, first of Hopper's MLA
    # backends (vllm/platforms/cuda.py _get_backend_priorities), has MultipleOf(16) (v1/attention/backends/mla/
    # flashattn_mla.py) → 16·cdiv(2,170,880, 18,432) = 16·118 = 1888; with --block-size 256 the unit is 256
    # (Platform._align_hybrid_block_size, 0.20+): 256·cdiv(…, 294,912) = 2048
    assert vllm.layout(scenario(kimi, minor=23), "none").block_size == 1888
    assert vllm.layout(scenario(kimi, minor=23, vllm=dict(block_size=256)), "none").block_size == 2048
    # before 0.20 the unit stays 64 (HybridAttentionMambaModelConfig) and a smaller user block is raised to 1920
    assert vllm.layout(scenario(kimi, minor=19, vllm=dict(block_size=256)), "none").block_size == 1920


def test_dtype_defaults_by_release():
    # Nemotron-H SSM (vllm/model_executor/models/config.py NemotronHForCausalLMConfig): no hook up to 0.12.0
    # (the model dtype); the hook's fallback is float16 from 0.13.0; 0.19.1 (wheel METADATA: transformers
    # >=4.56.0 without the <5 cap) runs with transformers 5, whose NemotronHConfig defaults the field to
    # float32 (validation/vllm.py runs 0.19.1 with transformers 5.12); 0.20.0's hook falls back to float32 itself
    assert fp_of("nemotron-h", "0.12.0").state[0].ssm_dtype == "bfloat16"
    assert fp_of("nemotron-h", "0.13.0").state[0].ssm_dtype == "float16"
    assert fp_of("nemotron-h", "0.19.0").state[0].ssm_dtype == "float16"
    assert fp_of("nemotron-h", "0.19.1").state[0].ssm_dtype == "float32"
    assert fp_of("nemotron-h", "0.20.0").state[0].ssm_dtype == "float32"
    # Qwen3.5 (multimodal class) reads mamba_ssm_dtype from 0.17.0, when it entered the registry; Qwen3-Next
    # has no hook, and GDN ignores --mamba-ssm-cache-dtype before 0.17.0 (gated_delta_net_state_dtype)
    assert fp_of("qwen3.5-27b", "0.17.0").state[0].ssm_dtype == "float32"
    assert fp_of("qwen3-next", 33).state[0].ssm_dtype == "bfloat16"
    assert fp_of("qwen3-next", 33, ssm="float32").state[0].ssm_dtype == "float32"
    assert fp_of("qwen3-next", "0.16.0", ssm="float32").state[0].ssm_dtype == "bfloat16"


def test_state_dtype_names_by_release():
    # MambaDType (vllm/config/cache.py): float32 only until 0.12.0, float16 from 0.13.0, bfloat16 from 0.22.0
    with pytest.raises(PlanError, match="float16"):
        fp_of("nemotron-h", "0.12.0", ssm="float16")
    assert fp_of("nemotron-h", "0.13.0", ssm="float16").state[0].ssm_dtype == "float16"
    with pytest.raises(PlanError, match="bfloat16"):
        fp_of("nemotron-h", "0.21.0", conv="bfloat16")
    assert fp_of("nemotron-h", "0.22.0", conv="bfloat16").state[0].conv_dtype == "bfloat16"
    # --kv-cache-dtype float16 arrived in 0.18.0 (CacheDType)
    with pytest.raises(PlanError, match="float16"):
        fp_of("nemotron-h", "0.17.1", kv="float16")


def test_state_dtypes_before_0_10_2():
    # 0.10.0 has no state dtype flags: every state takes the KV cache dtype (MambaSpec dtype=kv_cache_dtype)
    fp = fp_of("nemotron-h", "0.10.0", kv="fp8")
    assert (fp.state[0].conv_dtype, fp.state[0].ssm_dtype) == ("float8_e4m3fn", "float8_e4m3fn")
    with pytest.raises(PlanError, match="no --ssm-dtype"):
        fp_of("nemotron-h", "0.10.0", ssm="float32")
    # 0.10.1–0.10.1.1: mamba1_state_dtype raises on float32
    with pytest.raises(PlanError, match="fp32 state for mamba1"):
        fp_of("jamba", "0.10.1.1", ssm="float32")
    assert fp_of("jamba", "0.10.2", ssm="float32").state[0].ssm_dtype == "float32"


def test_minimax_float32_state_refused_until_0_20_1():
    # linear_attention_state_dtype raises "fp32 state for minimax is not yet supported" up to 0.20.0
    with pytest.raises(PlanError, match="fp32 state for minimax"):
        fp_of("minimax-m1", "0.20.0", conv="float32")
    # the linear-attention state takes the --mamba-cache-dtype (conv) dtype: (conv,)
    assert fp_of("minimax-m1", "0.20.1", conv="float32").state[0].ssm_dtype == "float32"
    assert fp_of("minimax-m1", "0.20.1").state[0].ssm_dtype == "bfloat16"


def test_default_modes_by_release():
    spec = load_model("nemotron-h")
    # prefix caching is off for hybrids by default until 0.27.1 and on from 0.28.0 (vllm/engine/arg_utils.py);
    # when on, 0.28.0+ always picks align (MambaModelConfig.verify_and_update_config)
    assert [vllm.release(v).default_mode(spec) for v in ("0.11.0", "0.23", "0.27", "0.28", "0.33")] == [
        "none",
        "none",
        "none",
        "align",
        "align",
    ]
    # with --enable-prefix-caching: `all` for a supporting class from 0.11.1 (0.15.0 names it) to 0.27.1; align
    # under speculative decoding in 0.20.0–0.21.0; GDN has no `all`, and before 0.15 has it switched off
    assert vllm.release("0.27").mode(spec, prefix_caching=True) == "all"
    assert vllm.release("0.12.0").mode(spec, prefix_caching=True) == "all"
    assert vllm.release("0.21.0").mode(spec, spec_tokens=2, prefix_caching=True) == "align"
    assert vllm.release("0.22.0").mode(spec, spec_tokens=2, prefix_caching=True) == "all"
    assert vllm.release("0.27").mode(load_model("qwen3-next"), prefix_caching=True) == "align"
    assert vllm.release("0.14.1").mode(load_model("qwen3-next"), prefix_caching=True) == "none"
    with pytest.raises(PlanError, match="no mamba cache mode 'all'"):
        vllm.layout(scenario(spec), "all")


def test_versions():
    # every vLLM release on PyPI from 0.10.0 to 0.33.0 (the .1.1 patch included); a minor means its newest patch
    assert len(vllm.VERSIONS) == 39 and vllm.release("0.20").version == "0.20.2"
    assert vllm.release("0.10.1.1").version == "0.10.1.1"
    # builds as logs print them take the rules of their release
    assert vllm.release("0.13.0+faa43dbf.nv26.01").version == "0.13.0"
    assert vllm.release("0.17.0rc1.dev201+g1234abc").version == "0.17.0"
    assert vllm.release("v0.11.1rc6").version == "0.11.1"
    assert vllm.release("0.20.3.dev4").version == "0.20.2"  # a dev build past the newest patch
    with pytest.raises(PlanError, match=r"unknown vLLM version '0.23.1' \(0.23 has: 0.23.0\)"):
        vllm.release("0.23.1")
    with pytest.raises(PlanError, match=r"newer than the newest modelled release \(0.33.0\)"):
        vllm.release("0.34.0")
    with pytest.raises(PlanError, match="unknown vLLM version '0.9.2'"):
        vllm.release("0.9.2")
    with pytest.raises(PlanError, match="unknown SGLang version"):
        sglang.release("0.4.0")


def test_v0_engine_and_registry_by_release():
    # 0.10.0–0.10.1.1 run hybrids on the V0 engine unless VLLM_USE_V1=1 (vllm/engine/arg_utils.py
    # _is_v1_supported_oracle): sized as V1, with the caveat; classes marked SupportsV0Only are refused
    assert "V0 engine unless VLLM_USE_V1=1" in vllm.release("0.10.1.1").caveats(load_model("nemotron-h"))[0]
    assert vllm.release("0.10.2").caveats(load_model("nemotron-h")) == ()
    with pytest.raises(NotServed, match="V0 engine only"):
        vllm.release("0.10.0").check_served(load_model("jamba"))
    vllm.release("0.10.1").check_served(load_model("jamba"))
    # Qwen3-Next entered the registry in 0.10.2; MiniMax left it in 0.24.0; Qwen3.5 (multimodal) came in 0.17.0
    with pytest.raises(NotServed, match="does not serve .* it enters the registry in 0.17.0"):
        vllm.release("0.16.0").check_served(load_model("qwen3.5-27b"))
    with pytest.raises(NotServed, match="was supported in vLLM until v0.23.0"):
        vllm.release("0.24.0").check_served(load_model("minimax-m1"))
    vllm.release("0.23.0").check_served(load_model("minimax-m1"))


# --- SGLang (docs/engines.md §3) -----------------------------------------------------------------------


def test_size_engine_json_contract(run_cli):
    code, out, err = run_cli(
        "size", "nemotron-h", "--ctx", "8192", "--engine", "both", "--vllm-version", "0.28", "--json"
    )
    assert code == 0, err
    d = json.loads(out)
    v = d["vllm"]
    assert v["version"] == "0.28.0" and v["default_mode"] == "align" and set(v["modes"]) == {"none", "align", "all"}
    al = v["modes"]["all"]
    assert (al["block_size"], al["page_bytes"], f"{al['padding_pct']:.2f}") == (1280, 5_242_880, "23.20")
    # per request at 8,192 tokens, all mode: 24 layers · cdiv(8192, 1280) = 7 pages; KV 4 layers · 7 pages
    assert al["state_bytes_per_request"] == 24 * 7 * 5_242_880 and al["kv_bytes_per_request"] == 4 * 7 * 5_242_880
    assert al["logs"][0] == (
        "Setting attention block size to 1280 tokens to ensure that attention page size is >= mamba page size."
    )
    sg = d["sglang"]
    # SGLang's MambaPool keeps slots + 1 rows, one of them padding (sglang/srt/mem_cache/memory_pool.py
    # MambaPool; engines/sglang/pool.py): 257 rows of, per row, conv 24 Mamba layers · (8,192 + 2·8·128 = 10,240
    # channels) · 3 (kernel − 1) · 2 B (bf16) = 1,474,560 B and SSM 24 · 128 heads · 64 · 128 · 4 B (fp32) =
    # 100,663,296 B; 257 · 1,474,560 = 378,961,920 and 257 · 100,663,296 = 25,870,467,072
    assert (sg["slots"], sg["conv_state_bytes"], sg["ssm_state_bytes"]) == (256, 378_961_920, 25_870_467_072)
    # a request: 1,474,560 + 100,663,296 B; extra_buffer with the overlap scheduler holds 3 + 2 state slots a
    # request (``mamba_ratio`` from 0.5.10rc0: engines/sglang/releases.py ``slots_per_request``), so 256 // 5 = 51
    assert sg["max_running_requests"] == 51 and sg["per_request_bytes"] == 102_137_856


# --- prefix reuse (docs/engines.md §4): `prefix` replays three requests (tests/test_prefix.py) ----------------


@pytest.mark.parametrize(
    "shared,private,reused,computed",
    [
        (4000, 200, 3840, 360),  # cached at 1280/2560/3840: reuses 3840, computes 360
        (900, 200, 0, 1100),  # no checkpoint inside 900 tokens: every request computes all 1100
        (1279, 200, 0, 1479),  # a 1279-token prefix in a 1280-token block hits nothing
        (1280, 0, 0, 1280),  # a whole cached prompt still recomputes its last token, here its only block
    ],
)
def test_prefix_examples_all_mode(shared, private, reused, computed):
    # 0.28 `all` (dense retention through 0.28.0): a state at every full 1280-token block
    r = prefix(scenario("nemotron-h", minor=28, engine="vllm", vllm=dict(mode="all")), shared, private)
    x = r.parts["vllm"].modes["all"]
    assert x.grid == 1280 and (x.reused_tokens, x.computed_tokens) == (reused, computed)


def test_prefix_align_and_none():
    r = prefix(scenario("nemotron-h", engine="vllm"), 3000, 200).parts["vllm"]
    # align (0.33, block 1040): the first 3,200-token request stops its prefill at the last block boundary
    # before its final token, (3200 − 1)//1040·1040 = 3120 > 3000, and nowhere else: nothing to reuse
    assert r.modes["align"].checkpoints == (3120,) and r.modes["align"].reused_tokens == 0
    assert r.modes["none"].reused_tokens == 0
    r = prefix(scenario("nemotron-h", engine="vllm"), 3100, 20).parts["vllm"]
    assert r.modes["align"].reused_tokens == 2080  # (3120 − 1)//1040·1040 = 2080 ≤ 3100


def test_prefix_sweep_steps_at_block_boundaries(run_cli, tmp_path):
    sw = prefix_sweep(scenario("nemotron-h", minor=28, engine="vllm", vllm=dict(mode="all")), "1200:2700:100", 200)
    reused = [p.parts["vllm"].modes["all"].reused_tokens for p in sw.points]
    assert reused == [0] + [1280] * 13 + [2560, 2560]  # steps at 1280 and 2560
    pytest.importorskip("matplotlib")
    png = tmp_path / "s.png"
    code, _, err = run_cli("prefix", "nemotron-h", "--private", "200", "--sweep", "0:3000:250", "--plot", png)
    assert code == 0, err
    assert png.stat().st_size > 0


@pytest.mark.parametrize(
    "args,needle",
    [
        (("--shared", "-5"), "--shared and --private must be ≥ 0"),
        (("--sweep", "5:1:1"), "--sweep needs"),
        (("--shared", "10", "--mode", "all"), "no mamba cache mode 'all'"),
    ],
)
def test_prefix_bad_input(run_cli, args, needle):
    one_line_error(*run_cli("prefix", "nemotron-h", *args), needle)


# --- check-log on logs written the way the engines print them ----------------------------------------

DATA = __import__("pathlib").Path(__file__).parent / "data"


def test_check_log_vllm_023(run_cli):
    # vLLM 0.23, prefix caching off (its default for hybrids) → mode none; docs/engines.md §2 figures:
    # block 1040 (+0.10%), 180.00x at 8,192 tokens from a 40 GiB budget, 1,474,560 tokens
    code, out, err = run_cli("check-log", DATA / "vllm-0.23-nemotron-h.log", "--json")
    d = json.loads(out)
    assert code == 0, (out, err)
    settings = {x["name"]: x["value"] for x in d["settings"]}
    assert d["model"] == "nemotron-h-8b" and settings["version"] == "0.23.0" and settings["mamba_cache_mode"] == "none"
    figures = {r["figure"]: (r["logged"], r["predicted"]) for r in d["rows"]}
    assert figures["attention block size"] == (1040, 1040)
    assert figures["mamba page padding %"] == (0.1, 0.1)
    assert figures["SSM cache dtype"] == ("float32", "float32")
    # the exact budget of --kv-cache-memory-bytes 42949672960 (its non-default args): 2,520 blocks
    assert figures["KV cache size (tokens)"] == (1474560, 1474560)


def test_check_log_vllm_033_gdn_tp4(run_cli):
    # Qwen3-Next at TP 4: conv 2048·3·2 = 12,288 + SSM 8·128·128·2 = 262,144 → 274,432 B; KV heads 2 < 4 → 1:
    # attn1 = 2·1·256·2 = 1,024; align with FlashInfer GDN: 64·cdiv(274,432, 65,536) = 320;
    # padding (320·1,024 − 274,432)/274,432 = 19.40 %
    code, out, _ = run_cli("check-log", DATA / "vllm-0.33-qwen3-next-tp4.log")
    assert code == 0 and "all figures match" in out
    code, out, _ = run_cli("check-log", DATA / "vllm-0.33-qwen3-next-tp4.log", "--tp", "1")
    assert code == 1 and "MISMATCH" in out  # at TP 1 the block would be 576


def test_check_log_sglang(run_cli):
    # docs/engines.md §3: 256 slots → 0.35GB / 24.09GB; the cap of 39 at max_mamba_cache_size 198 (198 // 5)
    code, out, _ = run_cli("check-log", DATA / "sglang-0.5.23-nemotron-h.log", "--json")
    d = json.loads(out)
    assert code == 0 and d["ok"] and len(d["rows"]) == 4


def test_check_log_mismatch(run_cli, tmp_path):
    p = tmp_path / "bad.log"
    p.write_text((DATA / "vllm-0.23-nemotron-h.log").read_text().replace("size to 1040", "size to 1024"))
    code, out, _ = run_cli("check-log", p)
    assert code == 1 and "MISMATCH" in out


def test_check_log_nothing_recognised(run_cli, tmp_path):
    p = tmp_path / "empty.log"
    p.write_text("INFO starting\nINFO done\n")
    one_line_error(*run_cli("check-log", p), "no line hybridplan can check")
    code, _, err = run_cli("check-log", tmp_path / "missing.log")
    assert code == 2 and "cannot read" in err


def test_prefix_later_requests_reuse_the_junction():
    # 4,000 shared + 200 private (docs/engines.md §4 example) on each engine:
    # vLLM 0.28 align (B 1040): request 1 stores only 4160 (its last block boundary) → request 2 reuses 0, but
    # stops a chunk at the block-floored junction floor(4000/1040)·1040 = 3120 and stores a state there, which
    # request 3 reuses. SGLang extra_buffer (grid 256): request 1 stores floor(4200/256)·256 = 4096 → request 2
    # reuses 0 and records its branch point floor(4000/256)·256 = 3840 for the next.
    r = prefix(scenario("nemotron-h", minor=28), 4000, 200)
    al = r.parts["vllm"].modes["align"]
    assert (al.checkpoints, al.reused_tokens, al.later_reused_tokens) == ((4160,), 0, 3120)
    sg = r.parts["sglang"].reuse
    assert (sg.grid, sg.checkpoints, sg.reused_tokens, sg.later_reused_tokens) == (256, (4096,), 0, 3840)
    # no_buffer keeps states only at chunk ends and the prompt's end: nothing inside a 4,000-token prefix (an
    # explicit no_buffer needs the overlap scheduler off from 0.5.14)
    r = prefix(scenario("nemotron-h", engine="sglang", sglang=dict(radix="no_buffer", overlap=False)), 4000, 200).parts[
        "sglang"
    ]
    assert (r.reuse.checkpoints, r.reuse.later_reused_tokens) == ((4200,), 0)


def test_align_chunk_ends_are_checkpoints():
    # 0.28 (dense retention), a 20,000-token prompt with 8,192-token chunks and B = 1040: chunks end at
    # floor(8192/1040)·1040 = 7280, 14,560, then the last boundary floor(20,000/1040)·1040 = 19,760
    def align(minor, prompt):
        sc = scenario("nemotron-h", minor=minor, engine="vllm", allow_long_context=True)
        return prefix(sc, prompt, 0).parts["vllm"].modes["align"].checkpoints

    assert align(28, 20_000) == (7280, 14560, 19760)
    # through 0.31 the last boundary is floor(L/B)·B: for L = 20,800 = 20·1040 that is L itself; from 0.32
    # floor((L − 1)/B)·B = 19,760 (kv_cache_interface.py get_mamba_prefill_checkpoint_position), and retention 0
    # (0.29.0+) keeps only that boundary (tests/test_prefix.py)
    assert align(28, 20_800)[-1] == 20_800
    assert align(33, 20_800) == (19_760,)


def test_both_engines_skip_the_one_that_does_not_serve(run_cli):
    # SGLang 0.5.23 has no Jamba class (docs/engines.md §3): with --engine both vLLM still answers
    code, out, _ = run_cli("size", "jamba", "--ctx", "8192", "--engine", "both", "--json")
    d = json.loads(out)
    assert code == 0 and "vllm" in d and "sglang" not in d and "JambaForCausalLM" in d["skipped"]["sglang"]
    code, out, _ = run_cli("fit", "llama-3-8b", "--ctx", "8192", "--kv-budget", "40GiB", "--json")
    d = json.loads(out)
    assert code == 0 and "no recurrent layers" in d["skipped"]["sglang"]
    # asked for alone, it is an error
    code, _, err = run_cli("fit", "jamba", "--engine", "sglang", "--kv-budget", "40GiB")
    assert code == 2 and "no model class for JambaForCausalLM" in err


def test_transformer_prefix_reuses_every_block():
    # no recurrent state: vLLM's prefix cache keeps every full 16-token block; 3,100-token prompt, 3,000
    # shared → floor(3000/16)·16 = 2,992 reused
    r = prefix(scenario("llama-3-8b", engine="vllm"), 3000, 100)
    x = r.parts["vllm"].modes["prefix_caching"]
    assert (x.grid, x.reused_tokens, x.computed_tokens) == (16, 2992, 108)


# vLLM 0.33's own code (its model classes' state shapes and dtypes, _align_hybrid_block_size, the
# get_kv_cache_configs / get_kv_cache_capacity chain) run on a CPU for the shipped configs, TP 1, 40 GiB,
# max_model_len 8192, FlashAttention on Hopper (docs/VALIDATION.md): (num_blocks, concurrency, tokens).
VLLM_033 = [
    ("falcon-h1-0.5b", "none", "flashinfer", 2912, "242.67", 1_987_925),
    ("falcon-h1-0.5b", "align", "flashinfer", 2912, "208.00", 1_703_936),
    ("zamba2-7b", "none", "flashinfer", 2400, "13.48", 110_453),
    ("zamba2-7b", "align", "flashinfer", 2400, "12.50", 102_400),
    ("jamba-1.5-mini", "none", "flashinfer", 32768, "297.89", 2_440_322),
    ("jamba-1.5-mini", "align", "flashinfer", 32768, "280.07", 2_294_320),
    ("qwen3-next-80b-a3b", "none", "flashinfer", 3212, "169.05", 1_384_879),
    ("qwen3-next-80b-a3b", "align", "flashinfer", 3034, "126.42", 1_035_605),
    ("qwen3-next-80b-a3b", "align", "triton", 3212, "146.00", 1_196_032),
    ("qwen3.5-27b", "none", "flashinfer", 835, "59.64", None),
    ("qwen3.5-27b", "align", "flashinfer", 787, "41.42", None),
    ("qwen3.5-27b", "align", "triton", 835, "49.12", None),
    ("lfm2-1.2b", "none", "flashinfer", 218453, "425.01", 3_481_647),
    ("lfm2-1.2b", "align", "flashinfer", 218453, "423.36", 3_468_153),
    ("nemotron-h-56b", "none", "flashinfer", 254, "31.75", None),
    ("nemotron-h-56b", "align", "flashinfer", 254, "12.70", None),
    ("nemotron-3-nano-30b-a3b", "none", "flashinfer", 3335, "416.88", None),
    ("nemotron-3-nano-30b-a3b", "align", "flashinfer", 3335, "208.44", None),
]


@pytest.mark.parametrize("name,mode,backend,blocks,conc,tokens", VLLM_033)
def test_figures_from_vllm_033s_own_code(name, mode, backend, blocks, conc, tokens):
    cap = cap_of(name, mode, gdn_backend=backend)
    assert cap.num_blocks == blocks and f"{cap.max_concurrency:.2f}" == conc
    if tokens is not None:
        assert cap.kv_tokens == tokens


@pytest.mark.parametrize(
    "name,mode,backend,block,pad",
    [
        # the same run: block size and padding
        ("qwen3.5-27b", "align", "flashinfer", 832, "6.26"),
        ("qwen3.5-27b", "align", "triton", 784, "0.13"),
        ("zamba2-7b", "align", "flashinfer", 48, "43.05"),
        ("falcon-h1-0.5b", "none", "flashinfer", 800, "1.39"),
        ("nemotron-h-56b", "align", "flashinfer", 4128, "0.05"),
        ("nemotron-3-nano-30b-a3b", "none", "flashinfer", 2096, "0.58"),
        ("qwen3-next-80b-a3b", "align", "triton", 544, "1.49"),
    ],
)
def test_blocks_from_vllm_033s_own_code(name, mode, backend, block, pad):
    lo = lay(name, mode, 33, gdn_backend=backend)
    assert (lo.block_size, f"{lo.padding_pct:.2f}") == (block, pad)


def test_nemotron3_moe_layers_need_0_11_1():
    # vllm/model_executor/models/nemotron_h.py ALL_DECODER_LAYER_TYPES has no "E" before 0.11.1: building the
    # model raises KeyError: 'E' (validation/vllm.py runs it)
    with pytest.raises(NotServed, match="until 0.11.1"):
        vllm.release("0.11.0").check_served(load_model("nemotron-3-nano-30b-a3b"))
    vllm.release("0.11.1").check_served(load_model("nemotron-3-nano-30b-a3b"))
    vllm.release("0.11.0").check_served(load_model("nemotron-h"))  # no MoE layers: served


def test_mamba2_configs_fail_to_load_in_0_14_to_0_17():
    # vllm/transformers_utils/model_arch_config_convertor.py (0.14.0-0.17.1) falls back to num_attention_heads,
    # which Mamba2Config lacks: AttributeError at ModelConfig (validation/vllm.py runs it)
    codestral = load_model("mamba-codestral-7b")
    for v in ("0.14.0", "0.17.1"):
        with pytest.raises(NotServed, match="num_attention_heads"):
            vllm.release(v).check_served(codestral)
    for v in ("0.13.0", "0.18.0"):
        vllm.release(v).check_served(codestral)


def test_align_block_must_fit_the_batched_tokens_0_17_to_0_26():
    # vllm/config/vllm.py: "In Mamba cache align mode, block_size (B) must be <= max_num_batched_tokens" in
    # __post_init__ (0.17) and validate_block_size (0.18-0.26, called by the engine core); gone in 0.27.0.
    # Nemotron-H-56B 0.17 (SSM float16): block 2080 (test_specs' derivation); 2048 tokens are too few
    for v, refused in (("0.16.0", False), ("0.17.0", True), ("0.26.0", True), ("0.27.0", False)):
        cap = vllm.capacity(scenario("nemotron-h-56b", minor=v, chunk=2048), "align", 40 * GiB)
        problem = cap.problem(1) or ""
        assert ("must be <= max_num_batched_tokens (2048)" in problem) is refused, (v, problem)
    assert vllm.capacity(scenario("nemotron-h-56b", minor="0.17.0"), "align", 40 * GiB).problem(1) is None


def test_unset_block_is_announced_up_to_0_17():
    # HybridAttentionMambaModelConfig (vllm/model_executor/models/config.py, 0.10-0.17.1) logs "Setting attention
    # block size to 16 tokens" whenever the block is still unset, even when 16 already holds an LFM2 state page
    logs = lay("lfm2-350m", "none", minor="0.17.1").logs
    assert logs[0].startswith("Setting attention block size to 16 tokens")
    assert not lay("lfm2-350m", "none", minor="0.18.0").logs[0].startswith("Setting")
    assert not lay("lfm2-350m", "none", minor="0.17.1", block_size=16).logs[0].startswith("Setting")


def test_nemotron_conv_from_expand_in_0_10_0():
    # 0.10.0 nemotron_h.py sizes the conv from expand·hidden_size (2·4480 = 8960) + 2·8·128 = 11,008 channels;
    # 0.10.1 from heads·head_dim (128·80 = 10,240) + 2,048 = 12,288
    assert fp_of("nemotron-nano-9b-v2", "0.10.0").state[0].conv_shape == (11008, 3)
    assert fp_of("nemotron-nano-9b-v2", "0.10.1").state[0].conv_shape == (12288, 3)


def test_attention_free_token_figure_takes_the_cache_block_before_0_11():
    # vllm/v1/core/kv_cache_utils.py (0.10.x): a single KV cache group logs num_blocks · cache_config.block_size,
    # so --block-size 64 makes the figure 4× the default 16's for Mamba-2 (validation/vllm.py runs both)
    plain = vllm.capacity(scenario("mamba-codestral-7b", minor="0.10.2"), "none", 40 * GiB)
    wide = vllm.capacity(scenario("mamba-codestral-7b", minor="0.10.2", vllm=dict(block_size=64)), "none", 40 * GiB)
    assert plain.num_blocks == wide.num_blocks and wide.kv_tokens == 4 * plain.kv_tokens == 64 * plain.num_blocks
    later = vllm.capacity(scenario("mamba-codestral-7b", minor="0.18.0", vllm=dict(block_size=64)), "none", 40 * GiB)
    assert later.kv_tokens == vllm.capacity(scenario("mamba-codestral-7b", minor="0.18.0"), "none", 40 * GiB).kv_tokens
