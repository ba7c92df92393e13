"""Shipped specs against the real configs, per-family shapes, and TP rules (docs/engines.md §1)."""

import json

import pytest

from hybridplan.adapters import spec_from_config
from hybridplan.engines.vllm.releases import known_versions as vllm_versions
from hybridplan.errors import PlanError
from hybridplan.loader import load_model, load_path, shipped_specs
from hybridplan.reports.size import size
from hybridplan.scenario import DtypeChoice
from tests.conftest import CONFIGS
from tests.helpers import footprint, scenario, vrel

pytestmark = pytest.mark.unit

#: shipped spec → the real config it was taken from, and the fields deliberately changed in the spec
PROVENANCE = {
    "nemotron-h-8b": ("nvidia__Nemotron-H-8B-Base-8K.from-python-dict.json", {}),
    "nemotron-h-56b": ("nvidia__Nemotron-H-56B-Base-8K.json", {}),
    "nemotron-3-nano-30b-a3b": ("nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json", {}),
    "jamba-1.5-mini": ("ai21labs__AI21-Jamba-1.5-Mini.from-python-dict.json", {}),
    # the saved config is trimmed: mamba_d_ssm = 24 heads · 64 = 1536 restored (tests/data/configs/SOURCES.md)
    "falcon-h1-0.5b": ("tiiuae__Falcon-H1-0.5B-Base.from-python-dict.json", {"mamba_d_ssm"}),
    "falcon-mamba-7b": ("tiiuae__falcon-mamba-7b.json", {}),
    "mamba-2.8b": ("state-spaces__mamba-2.8b-hf.json", {}),
    "mamba-codestral-7b": ("mistralai__Mamba-Codestral-7B-v0.1.from-python-dict.json", {}),
    "lfm2-1.2b": ("LiquidAI__LFM2-1.2B.json", {}),
    "qwen3-next-80b-a3b": ("Qwen__Qwen3-Next-80B-A3B-Instruct.json", {}),
    "qwen3-next-80b-a3b-thinking": ("Qwen__Qwen3-Next-80B-A3B-Thinking.json", {}),
    "qwen3.5-27b": ("Qwen__Qwen3.5-27B.json", {}),
    "llama-3.1-70b": ("meta-llama__Meta-Llama-3.1-70B.json", {}),
    # Llama-3-8B = Llama-3.1-8B shapes with an 8K context and no rope scaling (tests/data/configs/SOURCES.md)
    "llama-3-8b": ("meta-llama__Meta-Llama-3.1-8B.json", {"max_position_embeddings", "rope_scaling"}),
    "qwen2.5-7b": ("Qwen__Qwen2.5-7B.json", {}),
    "mistral-7b": ("mistralai__Mistral-7B-v0.1.json", {}),
    "deepseek-v3": ("deepseek-ai__DeepSeek-V3.json", {}),
    "qwen3.5-35b-a3b": ("Qwen__Qwen3.5-35B-A3B.json", {}),
    "qwen3.5-122b-a10b": ("Qwen__Qwen3.5-122B-A10B.json", {}),
    "qwen3.5-397b-a17b": ("Qwen__Qwen3.5-397B-A17B.json", {}),
    "qwen3.6-35b-a3b": ("Qwen__Qwen3.6-35B-A3B.json", {}),
    "lfm2-350m": ("LiquidAI__LFM2-350M.json", {}),
    "lfm2-2.6b": ("LiquidAI__LFM2-2.6B.mlx-resave.json", {}),
    "mamba-130m": ("state-spaces__mamba-130m-hf.from-python-dict.json", {}),
    "minimax-m1": ("MiniMaxAI__MiniMax-M1.json", {}),
    # the saved config omits the FP8 checkpoint's quantization_config: the spec's is written from NVIDIA's
    # precision table for it (see the spec's comment)
    "nemotron-3-super-120b-a12b": ("nvidia__NVIDIA-Nemotron-3-Super-120B-A12B-FP8.json", {"quantization_config"}),
    "nemotron-3-ultra-550b-a55b": ("nvidia__NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16.json", {}),
    "llama-3.1-8b": ("meta-llama__Meta-Llama-3.1-8B.json", {}),
    "nemotron-nano-9b-v2": ("nvidia__NVIDIA-Nemotron-Nano-9B-v2.json", {}),
    "granite-4.0-h-small": ("ibm-granite__granite-4.0-h-small.json", {}),
    "granite-4.0-h-tiny": ("ibm-granite__granite-4.0-h-tiny.json", {}),
    "kimi-linear-48b-a3b": ("moonshotai__Kimi-Linear-48B-A3B-Instruct.json", {}),
    "qwen3.6-27b": ("Qwen__Qwen3.6-27B.json", {}),
    "qwen3.5-4b": ("Qwen__Qwen3.5-4B.json", {}),
    "qwen3.5-0.8b-base": ("Qwen__Qwen3.5-0.8B-Base.json", {}),
    # mlx-vlm's 8-bit re-save: its MLX "quantization" / "quantization_config" (group 64, affine) are left out of
    # the spec, which is the bf16 checkpoint; every other field is the re-save's (tests/data/configs/SOURCES.md)
    "qwen3.5-9b": ("Qwen__Qwen3.5-9B.mlx-vlm-resave.json", {}),
    # NVIDIA's ModelOpt re-saves: the base model's config plus its quantization_config, kept as it is
    "qwen3.5-122b-a10b-nvfp4": ("nvidia__Qwen3.5-122B-A10B-NVFP4.json", {}),
    "qwen3.5-397b-a17b-nvfp4": ("nvidia__Qwen3.5-397B-A17B-NVFP4.json", {}),
    # transformer references beside the hybrids of the same size (Qwen3 dense next to Qwen3.5)
    "qwen3-0.6b": ("Qwen__Qwen3-0.6B.json", {}),
    "qwen3-1.7b": ("Qwen__Qwen3-1.7B.json", {}),
    "qwen3-8b": ("Qwen__Qwen3-8B.json", {}),
    "qwen3-32b": ("Qwen__Qwen3-32B.json", {}),
    "qwen3-32b-fp8": ("Qwen__Qwen3-32B-FP8.json", {}),
    "qwen3-30b-a3b": (
        "Qwen__Qwen3-30B-A3B.json",
        {},
    ),  # attention-only MoE beside Qwen3.5/3.6-35B-A3B  # the 32B's config plus its fp8 quantization_config
    "llama-3.3-70b-instruct": ("meta-llama__Llama-3.3-70B-Instruct.json", {}),
    "kimi-k2-instruct": ("moonshotai__Kimi-K2-Instruct.json", {}),  # DeepSeek-V3 layout, fp8 blocks
    "deepseek-r1": ("deepseek-ai__DeepSeek-R1.json", {}),  # the DeepSeek-V3 config but transformers_version
    "qwen3.8-2.4t-a95b": ("Qwen__Qwen3.8-2.4T-A95B.json", {}),
    "qwen3.8-2.4t-a95b-fp8": ("Qwen__Qwen3.8-2.4T-A95B-FP8.json", {}),  # + fp8 blocks, 978 modules left bf16
    # config.json has no quantization_config: the checkpoint's hf_quant_config.json is the spec's, as vLLM
    # (vllm/transformers_utils/config.py get_config) reads it; test_hf_quant_config_is_the_specs_quantization
    "nemotron-3-nano-30b-a3b-nvfp4": ("nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4.json", {"quantization_config"}),
}


def _subset_equal(spec_cfg: dict, real: dict, changed: set, where: str):
    for key, value in spec_cfg.items():
        if key in changed:
            continue
        assert key in real, f"{where}: {key} is not in the real config"
        if isinstance(value, dict) and isinstance(real[key], dict):
            _subset_equal(value, real[key], set(), f"{where}.{key}")
        else:
            assert value == real[key], f"{where}: {key} = {value!r}, config says {real[key]!r}"


@pytest.mark.parametrize("name", sorted(PROVENANCE))
def test_shipped_spec_matches_its_config(name, configs):
    import yaml

    from hybridplan.loader import _specs_dir

    filename, changed = PROVENANCE[name]
    doc = yaml.safe_load((_specs_dir() / f"{name}.yaml").read_text())
    real = json.loads((configs / filename).read_text())
    _subset_equal(doc["config"], real, changed, name)
    if not changed:  # the real config itself normalises to the same model
        assert load_path(configs / filename).mixers == load_model(name).mixers


def test_hf_quant_config_is_the_specs_quantization(configs, tmp_path):
    # the NVFP4 checkpoint's two files side by side read as the shipped spec: same layers, same quantization
    import yaml

    from hybridplan.loader import _specs_dir

    doc = yaml.safe_load((_specs_dir() / "nemotron-3-nano-30b-a3b-nvfp4.yaml").read_text())
    quant = json.loads((configs / "nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4.hf_quant_config.json").read_text())
    assert doc["config"]["quantization_config"] == quant
    (tmp_path / "config.json").write_text((configs / "nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4.json").read_text())
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(quant))
    folder, shipped = load_path(tmp_path), load_model("nemotron-3-nano-30b-a3b-nvfp4")
    assert folder.mixers == shipped.mixers == load_model("nemotron-3-nano-30b-a3b").mixers
    assert folder.quantization.scheme == shipped.quantization.scheme
    assert shipped.quantization.algo == "NVFP4" and shipped.quantization.kv_algo == "FP8"


def test_zamba2_spec_matches_the_prerelease_config(configs):
    # The 7B config on disk uses the pre-release field names; read through them it is the same model.
    real = load_path(configs / "Zyphra__Zamba2-7B.prerelease-format.from-python-dict.json")
    assert real.mixers == load_model("zamba2-7b").mixers
    assert any("pre-release" in n for n in real.notes)


def test_trimmed_falcon_h1_config_is_refused_naming_the_field(configs):
    # Without mamba_d_ssm, FalconH1Config's default 1024 is not 24 heads · 64: the model cannot be built.
    with pytest.raises(PlanError, match="1024.*24·64"):
        load_path(configs / "tiiuae__Falcon-H1-0.5B-Base.from-python-dict.json")


def test_every_shipped_spec_loads_and_sizes():
    from hybridplan.engines.vllm.releases import KNOWN

    specs = shipped_specs()
    assert len(specs) >= 17
    ref = load_model("llama-3-8b")
    for s in specs:  # at the newest release that serves it (MiniMax left vLLM before 0.33)
        rel = next(r for r in reversed(KNOWN) if r.serves(s))
        r = size(scenario(s, 4096, minor=rel.version), ref)
        assert r.total_at_ctx > 0
        # MiniMax-M1's config names no torch_dtype: the class default (bfloat16 under vLLM's auto) is noted
        expected = (
            ("torch_dtype not in config: using the MiniMax-Text-01 class default 'bfloat16'",)
            if s.name == "minimax-m1"
            else ()
        )
        assert s.notes == expected, f"{s.name} relies on class defaults: {s.notes}"


# (model, kind) → (count, conv shape, SSM shape, conv dtype, SSM dtype) at TP 1, each derived from its config.
FAMILY_SHAPES = {
    # 56B: I = 256·64 = 16384; conv = 16384 + 2·8·256 = 20480; SSM fp32 (no mamba_ssm_cache_dtype → float32)
    "nemotron-h-56b": (54, (20480, 3), (256, 64, 256), "bfloat16", "float32"),
    # Nano-3: I = 64·64 = 4096 (not 2·2688); conv = 4096 + 2·8·128 = 6144
    "nemotron-3-nano-30b-a3b": (23, (6144, 3), (64, 64, 128), "bfloat16", "float32"),
    # Jamba: Mamba-1, I = 2·4096 = 8192, state 16, model dtype
    "jamba-1.5-mini": (28, (8192, 3), (8192, 16), "bfloat16", "bfloat16"),
    # Zamba2-7B: I = 7168 = 112·64; conv = 7168 + 2·2·64 = 7424
    "zamba2-7b": (81, (7424, 3), (112, 64, 64), "bfloat16", "bfloat16"),
    # Falcon-H1-0.5B: I = mamba_d_ssm = 1536; conv = 1536 + 2·1·128 = 1792
    "falcon-h1-0.5b": (36, (1792, 3), (24, 64, 128), "bfloat16", "bfloat16"),
    # falcon-mamba-7b: intermediate_size 8192 wins over expand 16 (16·4096 would be 65536)
    "falcon-mamba-7b": (64, (8192, 3), (8192, 16), "bfloat16", "bfloat16"),
    # mamba-2.8b: I = 5120; a float32 checkpoint runs in bfloat16 under vLLM --dtype auto
    "mamba-2.8b": (64, (5120, 3), (5120, 16), "bfloat16", "bfloat16"),
    # Codestral: I = 2·4096 = 8192; conv = 8192 + 2·8·128 = 10240; model dtype (not Nemotron-H)
    "mamba-codestral-7b": (64, (10240, 3), (128, 64, 128), "bfloat16", "bfloat16"),
    # LFM2: 16 layers − 6 attention = 10 short convs of 2048 channels, L_cache − 1 = 2
    "lfm2-1.2b": (10, (2048, 2), None, "bfloat16", None),
    # LFM2-2.6B: 30 layers − 8 attention = 22 short convs of 2048 channels
    "lfm2-2.6b": (22, (2048, 2), None, "bfloat16", None),
    # mamba-130m: Mamba-1, intermediate 1536, state 16; its float32 checkpoint runs in bfloat16 under auto
    "mamba-130m": (24, (1536, 3), (1536, 16), "bfloat16", "bfloat16"),
    # Qwen3-Next: conv = 2·16·128 + 32·128 = 8192; SSM (Hv, dv, dk) = (32, 128, 128), model dtype
    "qwen3-next-80b-a3b": (36, (8192, 3), (32, 128, 128), "bfloat16", "bfloat16"),
    # Qwen3.5-27B: conv = 2·16·128 + 48·128 = 10240; vLLM ≥ 0.20 reads mamba_ssm_dtype = float32
    "qwen3.5-27b": (48, (10240, 3), (48, 128, 128), "bfloat16", "float32"),
    # Nemotron-Nano-9B-v2: I = 128·80 = 10240; conv = 10240 + 2·8·128 = 12288; 27 "M" in the pattern; no
    # mamba_ssm_cache_dtype, so float32 as for the 56B
    "nemotron-nano-9b-v2": (27, (12288, 3), (128, 80, 128), "bfloat16", "float32"),
    # Granite-4.0-H-Small: I = 128·64 = 8192; conv = 8192 + 2·1·128 = 8448; 36 of 40 layer_types "mamba"
    "granite-4.0-h-small": (36, (8448, 3), (128, 64, 128), "bfloat16", "bfloat16"),
    # Granite-4.0-H-Tiny: I = 48·64 = 3072; conv = 3072 + 2·1·128 = 3328
    "granite-4.0-h-tiny": (36, (3328, 3), (48, 64, 128), "bfloat16", "bfloat16"),
    # Kimi-Linear: 20 kda_layers; the conv runs over q, k and v: 3·32·128 = 12288 channels, kernel 4 − 1;
    # the KDA state is 32 heads of 128×128 in float32
    "kimi-linear-48b-a3b": (20, (12288, 3), (32, 128, 128), "bfloat16", "float32"),
    # Qwen3.6-27B: the Qwen3.5-27B shapes (conv 2·16·128 + 48·128 = 10240), mamba_ssm_dtype float32
    "qwen3.6-27b": (48, (10240, 3), (48, 128, 128), "bfloat16", "float32"),
    # Qwen3.5-4B: 32 layers, every 4th attention, 24 GDN; conv = 2·16·128 + 32·128 = 8192
    "qwen3.5-4b": (24, (8192, 3), (32, 128, 128), "bfloat16", "float32"),
    # Qwen3.5-0.8B: 24 layers, 18 GDN; conv = 2·16·128 + 16·128 = 6144
    "qwen3.5-0.8b-base": (18, (6144, 3), (16, 128, 128), "bfloat16", "float32"),
    # Qwen3.5-9B: 32 layers, every 4th attention, 24 GDN; conv = 2·16·128 + 32·128 = 8192; mamba_ssm_dtype float32
    "qwen3.5-9b": (24, (8192, 3), (32, 128, 128), "bfloat16", "float32"),
    # An NVFP4 re-save quantizes weights only, the state is the base model's. Qwen3.5-122B-A10B: 36 GDN;
    # conv = 2·16·128 + 64·128 = 12288; mamba_ssm_dtype float32
    "qwen3.5-122b-a10b-nvfp4": (36, (12288, 3), (64, 128, 128), "bfloat16", "float32"),
    # Qwen3.8-2.4T-A95B: 92 layers, every 4th attention, 69 GDN of 16 key and 128 value heads of 128:
    # conv = 2·16·128 + 128·128 = 20480; SSM (128, 128, 128) in mamba_ssm_dtype float32
    "qwen3.8-2.4t-a95b": (69, (20480, 3), (128, 128, 128), "bfloat16", "float32"),
    # NVFP4 weights, the BF16 model's state: 23 Mamba-2 layers, conv 64·64 + 2·8·128 = 6144, SSM fp32
    "nemotron-3-nano-30b-a3b-nvfp4": (23, (6144, 3), (64, 64, 128), "bfloat16", "float32"),
}


@pytest.mark.parametrize("name", sorted(FAMILY_SHAPES))
def test_family_state_shapes(name):
    count, conv, ssm, conv_dt, ssm_dt = FAMILY_SHAPES[name]
    fp = footprint(load_model(name), tp=1, dtypes=DtypeChoice())
    (g,) = fp.state
    assert (g.count, g.conv_shape, g.ssm_shape, g.conv_dtype, g.ssm_dtype) == (count, conv, ssm, conv_dt, ssm_dt)


# KV bytes per token per layer at TP 1, bf16.
KV_PER_LAYER = {
    "nemotron-3-nano-30b-a3b": 2 * 2 * 128 * 2,  # 2 KV heads × head_dim 128
    "zamba2-7b": 2 * 32 * 224 * 2,  # shared block: 32 KV heads × 2·3584/32
    "falcon-h1-0.5b": 2 * 2 * 64 * 2,
    "lfm2-1.2b": 2 * 8 * 64 * 2,  # head_dim = 2048 / 32
    "qwen3-next-80b-a3b": 2 * 2 * 256 * 2,
    "deepseek-v3": (512 + 64) * 2,  # MLA: kv_lora_rank + qk_rope_head_dim, no factor 2
    "mistral-7b": 2 * 8 * 128 * 2,
    "nemotron-nano-9b-v2": 2 * 8 * 128 * 2,
    "granite-4.0-h-small": 2 * 8 * (4096 // 32) * 2,
    "granite-4.0-h-tiny": 2 * 4 * (1536 // 12) * 2,
    "kimi-linear-48b-a3b": (512 + 64) * 2,  # MLA, as DeepSeek
    "qwen3.5-4b": 2 * 4 * 256 * 2,
    "qwen3.5-0.8b-base": 2 * 2 * 256 * 2,
    "qwen3.5-9b": 2 * 4 * 256 * 2,  # 4 KV heads × head_dim 256
    "qwen3-8b": 2 * 8 * 128 * 2,  # every one of its 36 layers: 8 KV heads × head_dim 128
    "qwen3-32b-fp8": 2 * 8 * 128 * 2,  # fp8 weights; the KV cache stays bf16 under --kv-cache-dtype auto
    "kimi-k2-instruct": (512 + 64) * 2,  # MLA: kv_lora_rank + qk_rope_head_dim, as DeepSeek-V3
    "qwen3.8-2.4t-a95b": 2 * 4 * 256 * 2,  # 23 attention layers of 4 KV heads × head_dim 256
}


@pytest.mark.parametrize("name", sorted(KV_PER_LAYER))
def test_kv_per_token_per_layer(name):
    fp = footprint(load_model(name), tp=1, dtypes=DtypeChoice())
    assert {g.bytes_per_token_per_layer for g in fp.kv} == {KV_PER_LAYER[name]}


def test_sliding_window_caps_kv():
    fp = footprint(load_model("mistral-7b"), tp=1, dtypes=DtypeChoice())
    (g,) = fp.kv
    # mistralai/Mistral-7B-v0.1's config: sliding_window 4096 (model_specs/mistral-7b.yaml)
    assert g.window == 4096 and g.kind == "sliding_attention"
    # 32 layers · 4,096 B · min(131,072, 4,096) tokens
    assert fp.kv_bytes_at(131072) == 32 * 4096 * 4096 == fp.kv_bytes_at(4096)


def test_mla_kv_is_not_divided_by_tp():
    fp1 = footprint(load_model("deepseek-v3"), tp=1, dtypes=DtypeChoice())
    fp8 = footprint(load_model("deepseek-v3"), tp=8, dtypes=DtypeChoice())
    # model_specs/deepseek-v3.yaml: 61 layers of one latent, kv_lora_rank 512 + qk_rope_head_dim 64 = 576, bf16
    assert fp1.kv_bytes_per_token == fp8.kv_bytes_per_token == 61 * 576 * 2


# TP rules (docs/engines.md §1): conv = (I + 2·g'·N)/t, g' = g if g % t == 0 else t; SSM heads/t.
@pytest.mark.parametrize(
    "tp,conv,ssm",
    [
        (1, (10240, 3), (128, 64, 128)),
        (2, ((8192 + 2 * 8 * 128) // 2, 3), (64, 64, 128)),
        (4, ((8192 + 2 * 8 * 128) // 4, 3), (32, 64, 128)),
        (8, ((8192 + 2 * 8 * 128) // 8, 3), (16, 64, 128)),
    ],
)
def test_nemotron_tp_shapes(tp, conv, ssm):
    fp = footprint(load_model("nemotron-h"), tp=tp, dtypes=DtypeChoice())
    (g,) = fp.state
    assert (g.conv_shape, g.ssm_shape) == (conv, ssm)
    # KV heads 8 / tp, one per rank at TP 8
    assert fp.kv_bytes_per_token == 4 * 2 * (8 // tp) * 128 * 2


# g = 1 (Falcon-H1-0.5B): the single group is replicated to g' = t groups: conv = (1536 + 2·t·128)/t.
@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_group_padding_for_single_group_mamba2(tp):
    fp = footprint(load_model("falcon-h1-0.5b"), tp=tp, dtypes=DtypeChoice())
    g = fp.state[0]
    padded_groups = 1 if tp == 1 else tp
    assert g.conv_shape == ((1536 + 2 * padded_groups * 128) // tp, 3)
    assert g.ssm_shape == (24 // tp, 64, 128)
    # 2 KV heads: split at TP 2, replicated (1 per rank) at TP 4 and 8
    assert fp.kv[0].bytes_per_token_per_layer == 2 * max(1, 2 // tp) * 64 * 2


@pytest.mark.parametrize(
    "name,tp,what",
    [
        ("nemotron-h", 3, "groups"),  # 8 groups, not 1, not divisible by 3
        ("nemotron-h", 16, "groups"),  # 8 % 16 ≠ 0 and 8 ≠ 1
        ("falcon-h1-0.5b", 16, "attention heads"),  # 8 attention heads (and 24 Mamba heads)
        ("qwen3.5-27b", 16, "attention heads"),  # 24 attention heads
        ("jamba", 3, "inner width|attention heads"),  # 8192 % 3 and 32 % 3
        ("lfm2", 3, "short-conv|attention heads"),  # 2048 % 3 and 32 % 3
        ("qwen3-next", 3, r"heads \(16\)"),  # 16 attention heads and 16 GDN key heads
    ],
)
def test_invalid_tp_is_refused_saying_what(name, tp, what):
    with pytest.raises(PlanError, match=what):
        footprint(load_model(name), tp=tp, dtypes=DtypeChoice())


@pytest.mark.parametrize("name", sorted(s.name for s in shipped_specs()))
@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_tp_sweep_either_sizes_or_refuses(name, tp):
    try:
        fp = footprint(load_model(name), tp=tp, dtypes=DtypeChoice())
    except PlanError as exc:
        assert f"--tp {tp}" in str(exc)
    else:
        assert fp.tp == tp and (fp.state or fp.kv)


def test_spec_tokens_widen_conv_windows():
    fp = footprint(load_model("nemotron-h"), tp=1, dtypes=DtypeChoice(), spec_tokens=2)
    assert fp.state[0].conv_shape == (10240, 3 + 2)
    # Mamba-1 keeps no speculative columns in vLLM
    fp = footprint(load_model("jamba"), tp=1, dtypes=DtypeChoice(), spec_tokens=2)
    assert fp.state[0].conv_shape == (8192, 3)


@pytest.mark.parametrize(
    "model, first", [("nemotron-h", "0.17.0"), ("falcon-h1-0.5b", "0.32.0"), ("kimi-linear-48b-a3b", "0.27.0")]
)
def test_conv_keeps_speculative_columns_from_the_release_the_class_passes_them(model, first):
    # vllm/model_executor/models/{nemotron_h,falcon_h1}.py pass num_spec to MambaStateShapeCalculator from 0.17.0
    # and 0.32.0; kda_state_shape (layers/mamba/mamba_utils.py) adds it to the conv length only from 0.27.0
    before = [v for v in vllm_versions() if vrel(v).before(first)][-1]
    wide = footprint(model, spec_tokens=2, minor=first).state[0].conv_shape
    narrow = footprint(model, spec_tokens=2, minor=before).state[0].conv_shape
    plain = footprint(model, minor=first).state[0].conv_shape
    assert narrow == plain and wide == (plain[0], plain[1] + 2)


def test_lfm2_never_widens_its_conv_for_speculative_tokens():
    # lfm2.py's get_mamba_state_shape_from_config passes no num_spec in any release up to 0.33.0
    assert footprint("lfm2-1.2b", spec_tokens=3).state[0].conv_shape == footprint("lfm2-1.2b").state[0].conv_shape


def test_kda_recurrent_dtype_follows_the_ssm_flag_from_0_30():
    # mamba_utils.py kda_state_dtype: no SSM dtype up to 0.29.0; from 0.30.0 float32/bfloat16, auto = float32
    assert (
        footprint("kimi-linear-48b-a3b", dtypes=DtypeChoice(ssm="bf16"), minor="0.29.0").state[0].ssm_dtype == "float32"
    )
    assert (
        footprint("kimi-linear-48b-a3b", dtypes=DtypeChoice(ssm="bf16"), minor="0.30.0").state[0].ssm_dtype
        == "bfloat16"
    )
    assert footprint("kimi-linear-48b-a3b", minor="0.30.0").state[0].ssm_dtype == "float32"
    with pytest.raises(PlanError, match="KDA recurrent state supports only auto, float32, and bfloat16"):
        footprint("kimi-linear-48b-a3b", dtypes=DtypeChoice(ssm="fp16"), minor="0.30.0")


def test_dtype_overrides():
    fp = footprint(load_model("nemotron-h"), tp=1, dtypes=DtypeChoice(ssm="bf16", kv="fp8"))
    assert fp.state[0].ssm_dtype == "bfloat16" and fp.kv_bytes_per_token == 16_384 // 2


def test_transformers5_spellings_are_accepted():
    cfg = {
        "architectures": ["GraniteMoeHybridForCausalLM"],
        "hidden_size": 1536,
        "num_attention_heads": 12,
        "num_key_value_heads": 4,
        "mamba_n_heads": 48,
        "mamba_d_head": 64,
        "mamba_d_state": 128,
        "mamba_n_groups": 1,
        "mamba_d_conv": 4,
        "mamba_expand": 2,
        "layer_types": ["linear_attention", "full_attention", "mamba", "attention"],
    }
    s = spec_from_config(cfg, name="granite")
    assert s.layer_counts["mamba2"] == 2 and s.layer_counts["attention"] == 2
    # Granite-4.0-H-tiny style: 12 heads cannot be split 8 ways (docs/engines.md §1)
    with pytest.raises(PlanError, match="attention heads"):
        footprint(s, tp=8, dtypes=DtypeChoice())


def test_zamba2_missing_heads_takes_the_class_default_and_says_so():
    cfg = {
        "architectures": ["Zamba2ForCausalLM"],
        "hidden_size": 3584,
        "num_attention_heads": 32,
        "layers_block_type": ["mamba", "hybrid"],
    }
    s = spec_from_config(cfg, name="z")
    assert s.mixers[-1].num_heads == 8  # Zamba2Config.n_mamba_heads default, as vLLM sees it
    assert any("n_mamba_heads" in n for n in s.notes)


def test_kimi_linear_and_minimax_and_bamba():
    kimi = spec_from_config(
        {
            "architectures": ["KimiLinearForCausalLM"],
            "num_hidden_layers": 8,
            "hidden_size": 2304,
            "num_attention_heads": 32,
            "kv_lora_rank": 512,
            "qk_rope_head_dim": 64,
            "linear_attn_config": {
                "kda_layers": [1, 2, 3, 5, 6, 7],
                "full_attn_layers": [4, 8],
                "num_heads": 32,
                "head_dim": 128,
                "short_conv_kernel_size": 4,
            },
        },
        name="kimi",
    )
    assert kimi.layer_counts["kda"] == 6 and kimi.layer_counts["mla"] == 2  # 1-indexed 4 and 8
    fp = footprint(kimi, tp=1, dtypes=DtypeChoice())
    (g,) = fp.state
    # conv = (H·d + 2·Hk·dk) = 3·32·128 = 12288 × (K − 1); SSM (32, 128, 128) kept in fp32
    assert g.conv_shape == (12288, 3) and g.ssm_shape == (32, 128, 128) and g.ssm_dtype == "float32"
    mm = spec_from_config(
        {
            "architectures": ["MiniMaxText01ForCausalLM"],
            "hidden_size": 6144,
            "num_attention_heads": 64,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "attn_type_list": [0, 0, 0, 1],
        },
        name="mm",
    )
    fp = footprint(mm, tp=1, dtypes=DtypeChoice())
    assert fp.state[0].conv_shape is None and fp.state[0].ssm_shape == (64, 128, 128)
    bamba = spec_from_config(
        {
            "architectures": ["BambaForCausalLM"],
            "num_hidden_layers": 4,
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "mamba_n_heads": 128,
            "mamba_d_state": 128,
            "attn_layer_indices": [2],
        },
        name="bamba",
    )
    assert bamba.layer_counts == {"mamba2": 3, "attention": 1, "mlp": 4}
    assert bamba.mixers[0].head_dim == 64  # "auto": 2·4096 / 128


# LFM2-8B-A1B's fields as lablup/mlxcel's test fixture (src/models/lfm2_tests.rs @ e69fb511, "A trimmed
# LFM2-8B-A1B (MoE) config") writes them, with the class defaults of Lfm2MoeConfig for dtype and tied embeddings
# (transformers 5.12 models/lfm2_moe/configuration_lfm2_moe.py); no full config.json was found to ship
LFM2_8B_A1B = {
    "architectures": ["Lfm2MoeForCausalLM"],
    "model_type": "lfm2_moe",
    "vocab_size": 65536,
    "hidden_size": 2048,
    "intermediate_size": 7168,
    "moe_intermediate_size": 1792,
    "num_hidden_layers": 24,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "max_position_embeddings": 128000,
    "conv_bias": False,
    "conv_L_cache": 3,
    "num_dense_layers": 2,
    "num_experts": 32,
    "num_experts_per_tok": 4,
    "use_expert_bias": True,
    "dtype": "bfloat16",
    "tie_word_embeddings": True,
    "layer_types": [
        "conv",
        "conv",
        "full_attention",
        "conv",
        "conv",
        "conv",
        "full_attention",
        "conv",
        "conv",
        "conv",
        "full_attention",
        "conv",
        "conv",
        "conv",
        "full_attention",
        "conv",
        "conv",
        "conv",
        "full_attention",
        "conv",
        "conv",
        "full_attention",
        "conv",
        "conv",
    ],
}


def test_lfm2_moe_layers_state_and_weights():
    from hybridplan.weights import weights

    s = spec_from_config(LFM2_8B_A1B, name="lfm2-8b-a1b")
    # 6 "full_attention" of 24; a gated MLP in the first num_dense_layers = 2, experts in the other 22
    assert s.layer_counts == {"short_conv": 18, "attention": 6, "mlp": 2, "moe": 22} and not s.notes
    fp = footprint(s, tp=1, dtypes=DtypeChoice())
    # vllm lfm2_moe.py get_mamba_state_shape_from_config: short_conv_state_shape(hidden_size, conv_L_cache):
    # (2048, 3 - 1); heads of hidden_size / num_attention_heads = 64: 2 · 8 · 64 · 2 B a token and layer
    (g,) = fp.state
    assert (g.count, g.conv_shape, g.ssm_shape, g.conv_dtype) == (18, (2048, 2), None, "bfloat16")
    assert {k.bytes_per_token_per_layer for k in fp.kv} == {2 * 8 * 64 * 2}
    # TP 8: 2048 / 8 channels, one KV head a rank; no speculative columns (the class passes no num_spec)
    assert footprint(s, tp=8).state[0].conv_shape == (256, 2)
    assert footprint(s, spec_tokens=2).state[0].conv_shape == (2048, 2)
    # the transformers LFM2-MoE page: "LFM2-8B-A1B, with 8.3B total parameters"
    assert abs(weights(s).params - 8.3e9) <= 0.005 * 8.3e9


def test_lfm2_moe_reads_what_the_engines_read():
    # conv_dim and head_dim are not read (the convs are hidden_size wide, the heads hidden / heads)
    base = spec_from_config(LFM2_8B_A1B, name="a")
    assert spec_from_config({**LFM2_8B_A1B, "conv_dim": 1024, "head_dim": 128}, name="b").mixers == base.mixers
    assert (
        spec_from_config({k: v for k, v in LFM2_8B_A1B.items() if k != "architectures"}, name="c").mixers == base.mixers
    )  # model_type lfm2_moe alone
    # a layer is attention only where layer_types says "full_attention" (vLLM builds a short conv otherwise)
    with pytest.raises(PlanError, match="unknown layer type 'attention'"):
        spec_from_config({**LFM2_8B_A1B, "layer_types": ["attention"] + LFM2_8B_A1B["layer_types"][1:]}, name="d")
    # Lfm2MoeConfig has no full_attn_idxs and no default layout
    with pytest.raises(PlanError, match="layer_types"):
        spec_from_config({k: v for k, v in LFM2_8B_A1B.items() if k != "layer_types"}, name="e")


def test_lfm2_both_schemas_agree(configs):
    # the original release lists full_attn_idxs; newer configs write layer_types ("conv" / "full_attention")
    real = json.loads((configs / "LiquidAI__LFM2-1.2B.json").read_text())
    idx = set(real.pop("full_attn_idxs"))
    real["layer_types"] = ["full_attention" if i in idx else "conv" for i in range(real["num_hidden_layers"])]
    assert spec_from_config(real, name="lfm2").mixers == load_model("lfm2").mixers


def test_zamba2_transformers5_spelling():
    # transformers 5 writes "linear_attention" for a Mamba layer; "hybrid" stays
    import yaml

    from hybridplan.loader import _specs_dir

    cfg = yaml.safe_load((_specs_dir() / "zamba2-7b.yaml").read_text())["config"]
    cfg["layers_block_type"] = ["linear_attention" if t == "mamba" else t for t in cfg["layers_block_type"]]
    assert spec_from_config(cfg, name="z").mixers == load_model("zamba2-7b").mixers


def test_native_zamba2_layer_mapping(configs):
    # Zyphra's own format names the layers 'm' / 'g'; 9 shared-block layers among 54
    s = spec_from_config(
        {
            **json.loads((configs / "Zyphra__Zamba2-2.7B.native-megatron-format.json").read_text()),
            "architectures": ["Zamba2ForCausalLM"],
        },
        name="z27",
    )
    assert s.layer_counts["mamba2"] == 54 and s.layer_counts["attention"] == 9


def test_layer_list_that_does_not_match_the_layer_count_is_refused():
    cfg = json.loads((CONFIGS / "Qwen__Qwen3-Next-80B-A3B-Thinking.json").read_text())
    cfg["layer_types"] = ["linear_attention", "full_attention"]
    with pytest.raises(PlanError, match="layer_types lists 2 layers but num_hidden_layers is 48"):
        spec_from_config(cfg, name="q")


def test_missing_mamba_d_ssm_is_named_as_the_class_default():
    cfg = json.loads((CONFIGS / "tiiuae__Falcon-H1-0.5B-Base.from-python-dict.json").read_text())
    with pytest.raises(
        PlanError,
        match="no mamba_d_ssm, and FalconH1Config's default inner width, 1024, is not "
        r"heads·head_dim = 24·64 = 1536",
    ):
        spec_from_config(cfg, name="f")
