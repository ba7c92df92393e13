"""Weights counted from the config (hybridplan/weights). Each count is pinned to a published figure where one
exists, and every shipped spec's count equals the parameter count of the transformers class built from the
same config on the meta device (validation/weights.py, transformers 5.19: 33 of 35 exact; MiniMax-M1's class in
transformers is another layout, and its official index agrees with hybridplan, below; Kimi-Linear's router
biases are a buffer there and parameters in its checkpoint)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridplan.errors import PlanError
from hybridplan.loader import load_model, shipped_specs
from hybridplan.weights import weights
from hybridplan.weights.quant import scheme

pytestmark = pytest.mark.unit

# shipped spec → (the published figure, the unit of its last digit, where it is published). A figure given to
# the parameter ("7,285,403,648") must be met exactly; a rounded one ("8B") within 0.5 %, or within what
# rounding or cutting the count to that digit gives (NVIDIA's "120B" is 120.67B cut, Qwen's "7.61B" 7.6156B).
PUBLISHED = {
    "mamba-codestral-7b": (7_285_403_648, 1, 'Mistral\'s release post: "with 7,285,403,648 parameters"'),
    "lfm2-350m": (354_483_968, 1, 'LFM2 model card: "Parameters | 354,483,968"'),
    "lfm2-1.2b": (1_170_340_608, 1, "LFM2 model card, and total_parameters in an index of the checkpoint"),
    "lfm2-2.6b": (2_569_272_320, 1, "LFM2 model card, and total_parameters in an index of the checkpoint"),
    "llama-3.1-8b": (8_030_261_248, 1, "model.safetensors.index.json total_size 16,060,522,496 B, all bf16"),
    "llama-3.1-70b": (70_553_706_496, 1, "model.safetensors.index.json total_size 141,107,412,992 B, all bf16"),
    "llama-3-8b": (8e9, 1e9, 'Llama 3 card: "Llama 3 comes in two sizes — 8B and 70B parameters"'),
    "mistral-7b": (7e9, 1e9, 'Mistral-7B-v0.1 card: "with 7 billion parameters"'),
    "qwen2.5-7b": (7.61e9, 1e7, 'Qwen2.5 card: "Number of Parameters: 7.61B"'),
    "nemotron-h-8b": (8e9, 1e9, 'Nemotron-H-8B card: "This model has 8B model parameters"'),
    "nemotron-h-56b": (56e9, 1e9, 'Nemotron-H-56B card: "This model has 56B model parameters"'),
    "nemotron-3-nano-30b-a3b": (31.6e9, 1e8, 'NVIDIA: "a 3.2B active (3.6B with embeddings), 31.6B total"'),
    "nemotron-3-super-120b-a12b": (120e9, 1e9, 'NVIDIA: "a 12B active 120B total parameter" model'),
    "nemotron-3-ultra-550b-a55b": (550e9, 1e9, 'NVIDIA: "550 billion total and 55 billion active parameters"'),
    "jamba-1.5-mini": (52e9, 1e9, 'Jamba 1.5 card: "Jamba 1.5 Mini (12B active/52B total)"'),
    "zamba2-7b": (7.4e9, 1e8, 'Zamba2 report: "a suite of 1.2B, 2.7B, and 7.4B parameter" models'),
    "falcon-h1-0.5b": (500e6, 100e6, 'tiiuae/Falcon-H1 README: "500M, 1.5B, 1.5B-Deep, 3B, 7B, and 34B"'),
    "mamba-2.8b": (2.8e9, 1e8, "the checkpoint's name in state-spaces/mamba's README: mamba-2.8b"),
    "mamba-130m": (130e6, 10e6, "the checkpoint's name in state-spaces/mamba's README: mamba-130m"),
    "qwen3-next-80b-a3b": (80e9, 1e9, 'Qwen3-Next card: "80B in total and 3B activated"'),
    "qwen3.5-27b": (27e9, 1e9, 'Qwen3.5 docs: "27B parameter vision-language model"'),
    "qwen3.5-35b-a3b": (35e9, 1e9, 'Qwen3.5 card: "35B in total and 3B activated"'),
    "qwen3.6-35b-a3b": (35e9, 1e9, 'Qwen3.6 card: "35B in total and 3B activated"'),
    "qwen3.5-122b-a10b": (122e9, 1e9, 'Qwen3.5 card: "122B in total and 10B activated"'),
    "qwen3.5-397b-a17b": (397e9, 1e9, 'Qwen3.5 card: "397B in total and 17B activated"'),
    "deepseek-v3": (671e9, 1e9, 'DeepSeek-V3 card: "671B of the Main Model weights"'),
    "granite-4.0-h-small": (32e9, 1e9, "Granite-4.0-H-Small card: 32B total parameters, 9B active"),
    "granite-4.0-h-tiny": (7e9, 1e9, "Granite-4.0-H-Tiny card: 7B total parameters, 1B active"),
    "nemotron-nano-9b-v2": (9e9, 1e9, "the model's name: NVIDIA-Nemotron-Nano-9B-v2"),
    "qwen3.6-27b": (27e9, 1e9, 'Qwen3.6-27B card: "Number of Parameters: 27B"'),
    "qwen3.5-4b": (4e9, 1e9, "the model's name: Qwen3.5-4B"),
    "qwen3.5-0.8b-base": (0.8e9, 1e8, "the model's name: Qwen3.5-0.8B-Base"),
    "falcon-mamba-7b": (7e9, 1e9, 'the paper\'s title: "Falcon Mamba 7B"'),
    "kimi-linear-48b-a3b": (
        49_122_681_728,
        1,
        "a scan of the checkpoint's 20 shards in the report that keeps its config (tests/data/configs/SOURCES.md)",
    ),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_parameter_counts(name):
    figure, unit, _source = PUBLISHED[name]
    count = weights(load_model(name)).params
    if unit == 1:
        assert count == figure
    else:
        assert abs(count - figure) <= 0.005 * figure or figure - unit / 2 <= count < figure + unit, (count, figure)


def test_minimax_m1_matches_its_checkpoint_index():
    # MiniMax-AI/MiniMax-M1 model.safetensors.index.json: total_size 912,210,767,872 B = 456,089,655,296
    # parameters at 2 B, plus 2 B more for each router weight kept in float32: 80 layers · 32 experts · 6144
    w = weights(load_model("minimax-m1"))
    assert 2 * w.params + 2 * 80 * 32 * 6144 == 912_210_767_872


def test_every_shipped_spec_is_counted():
    for spec in shipped_specs():
        w = weights(spec)
        assert w.params > 0 and w.source == "config"
        # at least a byte a parameter, unless the checkpoint is quantized (an NVFP4 re-save keeps ~0.56 B)
        assert w.bytes >= w.params or scheme(json.loads(spec.config_json)) is not None, spec.name


def test_multimodal_and_mtp_parts():
    # Qwen3.5-27B: the vision tower is loaded with the multimodal class; its one MTP layer is not
    # (transformers' Qwen3_5ForConditionalGeneration: 27,356,728,560 with the tower, 26,895,998,464 without)
    w = weights(load_model("qwen3.5-27b"))
    assert (w.params, w.vision_params) == (27_356_728_560, 27_356_728_560 - 26_895_998_464)
    assert w.mtp_params > 0 and weights(load_model("qwen3.5-27b"), mtp=True).params == w.params + w.mtp_params
    # DeepSeek-V3's MTP module: "14B of the Multi-Token Prediction (MTP) Module weights", of which the embedding
    # and head it shares with the main model are 2 · 129,280 · 7168 = 1.85B
    mtp = weights(load_model("deepseek-v3")).mtp_params
    assert abs(mtp + 2 * 129_280 * 7168 - 14e9) / 14e9 < 0.05


def test_per_rank_bytes():
    # mamba-130m (tied embedding, 24 layers, served in bfloat16): the vocabulary of 50,280 pads to 50,304 rows
    # (a multiple of 64) on every rank, so one GPU holds 24·768·2 B more than the checkpoint
    w = weights(load_model("mamba-130m"), dtype="bfloat16")
    assert w.bytes == 2 * 129_135_360 and w.bytes_per_rank == w.bytes + 24 * 768 * 2
    # Nemotron-H-8B at TP 8: the 8 KV heads split one a rank; the 8 Mamba groups too; 131,072 vocabulary rows
    # split evenly: close to an eighth, above it by the replicated norms
    w1, w8 = weights(load_model("nemotron-h")), weights(load_model("nemotron-h"), tp=8)
    assert w1.bytes / 8 < w8.bytes_per_rank < w1.bytes / 8 * 1.001


def test_replicated_kv_heads_per_rank():
    # Qwen3-Next has 2 KV heads: at TP 8 each rank keeps one, so k and v take 1/2 of their bytes, not 1/8
    spec = load_model("qwen3-next")
    from hybridplan.weights.families import parts

    kv = [
        p for p in parts(spec.architecture, json.loads(spec.config_json), spec.family) if p.name in ("k_proj", "v_proj")
    ]
    from hybridplan.weights import rank_params

    assert all(rank_params(p, 8, spec.hidden_size) == p.params / 2 for p in kv)


@pytest.mark.parametrize(
    "config,name,per_param",
    [
        ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "fp8 (blocks 128×128)", 1 + 4 / 16384),
        (
            {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16},
            "modelopt nvfp4 (group 16)",
            0.5 + 1 / 16,
        ),
        (
            {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True},
            "awq int4 (group 128)",
            0.5 + 2 / 128 + 0.5 / 128,
        ),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {
                    "g": {"weights": {"num_bits": 4, "type": "int", "group_size": 32, "symmetric": True}}
                },
            },
            "compressed-tensors int4 (group 32)",
            0.5 + 2 / 32,
        ),
    ],
)
def test_quantization_schemes(config, name, per_param):
    q = scheme({"quantization_config": config})
    assert q.name == name and q.bytes_per_param == pytest.approx(per_param)


def test_quantized_checkpoint_keeps_embeddings_and_norms():
    # an fp8 Nemotron-H-8B: the linear weights take 1 B, the 2 · 131,072 · 4096 embedding and head 2 B each
    from hybridplan.adapters import spec_from_config

    spec = load_model("nemotron-h")
    fp8 = spec_from_config(
        {**json.loads(spec.config_json), "quantization_config": {"quant_method": "fp8"}}, name="nemotron-h-fp8"
    )
    w, bf16 = weights(fp8), weights(spec)
    embed = 2 * 131_072 * 4096
    assert w.quantization == "fp8" and bf16.bytes - w.bytes > (bf16.params - embed) * 0.99
    assert w.bytes > embed * 2


def test_unsized_quantization_is_refused():
    with pytest.raises(PlanError, match="does not size the quantization 'hqq'"):
        scheme({"quantization_config": {"quant_method": "hqq"}})


@settings(max_examples=300, deadline=None)
@given(
    patterns=st.lists(
        st.one_of(
            st.sampled_from(
                [
                    "lm_head",
                    "model.layers.0.mlp",
                    "*.mixer.in_proj",
                    "model.layers.1?.*",
                    "re:.*self_attn.*",
                    "re:model\\.layers\\.[0-3]\\.",
                    "re:(?i)LM_HEAD",
                    "model.layers.[12].mlp.gate",
                    "backbone.layers.*.mixer",
                ]
            ),
            st.text(alphabet="abl.*?[]01_", max_size=12),
        ),
        max_size=6,
    ),
    name=st.sampled_from(
        [
            "lm_head",
            "model.layers.0.mlp.down_proj",
            "model.layers.12.mlp.gate",
            "model.layers.1.mlp.gate",
            "backbone.layers.3.mixer.in_proj",
            "model.layers.2.self_attn.q_proj",
            "model.visual.blocks.0",
        ]
    )
    | st.text(alphabet="abl.*?[]01_", max_size=12),
)
def test_the_joined_ignore_list_matches_as_each_pattern_does(patterns, name):
    # the joined matcher is an implementation of the per-pattern rule (quant.py ``_matches``: vLLM's and
    # ModelOpt's ``re:`` expressions, globs and module names): the two must agree on every list and name
    from hybridplan.weights.quant import _matches, _skipper

    assert _skipper(tuple(patterns))(name) == any(_matches(name, p) for p in patterns)
