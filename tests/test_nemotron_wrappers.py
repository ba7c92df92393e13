"""Nemotron-H's vision-language and omni wrappers (``NemotronH_Nano_VL_V2``, ``NemotronH_Nano_Omni_Reasoning_V3``
and the others vllm/model_executor/models/nano_nemotron_vl.py serves): the language model is a Nemotron-H whose
config the wrapper nests as ``llm_config``. The configs here are the shipped Nemotron-3-Nano-30B-A3B config
(/work/shared/model_configs/nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json, model_specs/
nemotron-3-nano-30b-a3b.yaml; Nemotron-3-Nano-Omni-30B-A3B is built on it) nested as a wrapper would nest it:
derived, not a posted checkpoint's config."""

from __future__ import annotations

import json

import pytest

from hybridplan.adapters import spec_from_config
from hybridplan.engines.vllm.blocks import layout
from hybridplan.errors import NotServed
from hybridplan.loader import load_model
from tests.helpers import footprint, scenario, vrel

pytestmark = pytest.mark.unit

OMNI, VL = "NemotronH_Nano_Omni_Reasoning_V3", "NemotronH_Nano_VL_V2"


def _wrapped(arch: str):
    backbone = json.loads(load_model("nemotron-3-nano-30b-a3b").config_json)
    return spec_from_config({"architectures": [arch], "model_type": arch, "llm_config": backbone}, name=arch)


def test_the_backbone_is_read_from_the_nested_config():
    base = load_model("nemotron-3-nano-30b-a3b")
    for arch in (OMNI, VL, "NemotronH_Super_Omni_Reasoning_V3", "NemotronH_Omni_Reasoning_V3"):
        spec = _wrapped(arch)
        assert spec.architecture == arch and spec.mixers == base.mixers and spec.ffn == base.ffn


@pytest.mark.parametrize("release", ["0.20.0", "0.25.0", "0.33.0"])
def test_omni_keeps_its_ssm_state_at_the_model_dtype(release):
    # MODELS_CONFIG_MAP (vllm/model_executor/models/config.py) is looked up by the architecture the config names:
    # NemotronHForCausalLM's hook makes the SSM state float32 (the config's mamba_ssm_cache_dtype), and
    # NemotronH_Nano_VL_V2's (0.19.0 on) reads the same field from the text config; the Omni names have none, so
    # their SSM state takes the conv dtype, the model's bf16
    assert footprint(_wrapped(OMNI), minor=release).dtypes.ssm == "bfloat16"
    assert footprint(_wrapped(VL), minor=release).dtypes.ssm == "float32"
    assert footprint("nemotron-3-nano-30b-a3b", minor=release).dtypes.ssm == "float32"


def test_vl_before_its_hook():
    # 0.11.0-0.18.1 register NemotronH_Nano_VL_V2 without NemotronHNanoVLV2Config: the conv dtype
    assert footprint(_wrapped(VL), minor="0.18.0").dtypes.ssm == "bfloat16"


def test_the_omni_block_follows_its_bf16_state():
    # 64 Mamba heads of 64, d_state 128, 8 groups, conv 4: conv (64·64 + 2·8·128)·3·2 = 36,864 B, SSM at bf16
    # 64·64·128·2 = 1,048,576 B; attention 2 KV heads·128·2·2 = 1,024 B a token: block 16·cdiv(1,085,440, 16,384)
    # = 1,072. Nemotron-H's float32 SSM (2,097,152 B) gives 16·cdiv(2,134,016, 16,384) = 2,096
    assert layout(scenario(_wrapped(OMNI), minor="0.20.0"), "none").block_size == 1072
    assert layout(scenario("nemotron-3-nano-30b-a3b", minor="0.20.0"), "none").block_size == 2096


def test_release_range():
    # vllm/model_executor/models/registry.py: NemotronH_Nano_VL_V2 from 0.11.0, the Omni names from 0.20.0
    # (NemotronH_Omni_Reasoning_V3 from 0.29.0)
    with pytest.raises(NotServed, match="0.20.0"):
        vrel("0.19.1").check_served(_wrapped(OMNI))
    vrel("0.20.0").check_served(_wrapped(OMNI))
    vrel("0.11.1").check_served(_wrapped(VL))
    with pytest.raises(NotServed, match="enters the registry in 0.11.0"):
        vrel("0.10.2").check_served(_wrapped(VL))
    # this backbone has MoE layers, which NemotronH builds from 0.11.1 (the wrapper builds a NemotronH)
    with pytest.raises(NotServed, match="MoE layers"):
        vrel("0.11.0").check_served(_wrapped(VL))
    with pytest.raises(NotServed):
        vrel("0.28.0").check_served(_wrapped("NemotronH_Omni_Reasoning_V3"))
