"""A checkpoint's quantization: read once (config.json's quantization_config, a folder's or a Hub repository's
hf_quant_config.json), priced in its weights, and the KV cache it makes each engine release keep.

Bytes per weight are the tensors the engines' loaders create (vLLM vllm/model_executor/layers/quantization/*.py);
the KV rules are read from the wheels: vLLM vllm/utils/torch_utils.py ``resolve_kv_cache_dtype_string`` (0.14.0
on) and the compressed-tensors branch of the Attention layer (vllm/attention/layer.py 0.15, then
vllm/model_executor/layers/attention/attention.py); SGLang model_executor/model_runner.py
``configure_kv_cache_dtype`` with layers/quantization/modelopt_quant.py."""

from __future__ import annotations

import json
import shutil

import pytest

from hybridplan.adapters import spec_from_config
from hybridplan.engines.sglang import dtypes as sglang_dtypes
from hybridplan.engines.sglang.releases import release as sglang_release
from hybridplan.engines.vllm import dtypes as vllm_dtypes
from hybridplan.engines.vllm.releases import release as vllm_release
from hybridplan.errors import PlanError
from hybridplan.loader import load_model, load_path
from hybridplan.weights import weights
from hybridplan.weights.quant import read
from tests.conftest import CONFIGS

pytestmark = pytest.mark.unit

QUANT = CONFIGS.parent / "quant"
NANO = CONFIGS / "nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json"


def _cfg(path=NANO) -> dict:
    return json.loads(path.read_text())


# scheme → (quantization_config, name, bytes a weight, where the figure is read)
SCHEMES = {
    # Fp8LinearMethod: a float8 weight; block-quantized, a float32 weight_scale_inv per 128×128 block
    "fp8": (
        {"quant_method": "fp8", "weight_block_size": [128, 128]},
        "fp8 (blocks 128×128)",
        1 + 4 / 128**2,
        "vLLM 0.33.0 model_executor/layers/quantization/fp8.py",
    ),
    # ModelOptFp8LinearMethod: a float8 weight, per-tensor weight_scale and input_scale
    "modelopt fp8": (
        {"quant_method": "modelopt", "quant_algo": "FP8"},
        "modelopt fp8",
        1.0,
        "vLLM 0.33.0 model_executor/layers/quantization/modelopt.py",
    ),
    # ModelOptNvFp4LinearMethod: two fp4 codes a uint8, one float8_e4m3 weight_scale per 16
    "modelopt nvfp4": (
        {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16},
        "modelopt nvfp4 (group 16)",
        0.5 + 1 / 16,
        "vLLM 0.33.0 model_executor/layers/quantization/modelopt.py",
    ),
    # AWQLinearMethod: qweight int32 of 8 codes, scales fp16 per 128 inputs, qzeros int32 of 8 zeros per 128
    "awq": (
        {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True},
        "awq int4 (group 128)",
        0.5 + 2 / 128 + 0.5 / 128,
        "vLLM 0.33.0 model_executor/layers/quantization/awq.py",
    ),
    # symmetric GPTQ under Marlin: qweight and scales; the zeros are emptied after loading (gptq_marlin.py)
    "gptq": (
        {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True},
        "gptq int4 (group 128)",
        0.5 + 2 / 128,
        "vLLM 0.33.0 model_executor/layers/quantization/gptq_marlin.py",
    ),
    # AutoRound exports GPTQ-packed int4 with zero points (auto_round.py hands it to the GPTQ/AWQ kernels)
    "auto-round": (
        {"quant_method": "auto-round", "bits": 4, "group_size": 128, "sym": True},
        "auto-round int4 (group 128)",
        0.5 + 2 / 128 + 0.5 / 128,
        "vLLM 0.33.0 model_executor/layers/quantization/auto_round.py",
    ),
    # CompressedTensorsWNA16: weight_packed int32 of 8 codes, weight_scale bf16 per group, no zeros when symmetric
    "compressed-tensors": (
        {
            "quant_method": "compressed-tensors",
            "config_groups": {
                "group_0": {"weights": {"num_bits": 4, "type": "int", "symmetric": True, "group_size": 128}}
            },
        },
        "compressed-tensors int4 (group 128)",
        0.5 + 2 / 128,
        "vLLM 0.33.0 compressed_tensors/schemes/compressed_tensors_wNa16.py",
    ),
    # Mxfp4MoEMethod: two fp4 codes a uint8, one e8m0 scale per 32
    "mxfp4": (
        {"quant_method": "mxfp4"},
        "mxfp4",
        0.5 + 1 / 32,
        "vLLM 0.33.0 model_executor/layers/quantization/mxfp4.py",
    ),
    # 4-bit: packed codes and a float32 absmax per 64; double quantization: a uint8 absmax per 64, float32 per 256
    "bitsandbytes": (
        {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_use_double_quant": True},
        "bitsandbytes 4-bit (double quant)",
        0.5 + 1 / 64 + 4 / (64 * 256),
        "bitsandbytes functional.quantize_4bit, as vLLM's bitsandbytes.py loads it",
    ),
}


@pytest.mark.parametrize("name", sorted(SCHEMES))
def test_bytes_per_weight_of_each_scheme(name):
    config, label, per, _where = SCHEMES[name]
    q = read({"quantization_config": config})
    assert q.scheme.name == label and q.scheme.bytes_per_param == pytest.approx(per)


@pytest.mark.parametrize("name", sorted(SCHEMES))
def test_each_scheme_prices_the_linear_weights_only(name):
    # the quantized spec's bytes: the bf16 spec's less (2 − b) a quantizable weight; embedding, head, norms,
    # convs and the router stay at 2 B (no ignore list here)
    from hybridplan.weights.families import parts

    config, _label, per, _where = SCHEMES[name]
    base = load_model("nemotron-3-nano-30b-a3b")
    spec = spec_from_config({**json.loads(base.config_json), "quantization_config": config}, name="q")
    linear = sum(
        p.params
        for p in parts(spec.architecture, json.loads(spec.config_json), spec.family)
        if p.quantizable and p.section == "model"
    )
    assert weights(spec).bytes == pytest.approx(weights(base).bytes - linear * (2 - per), rel=1e-9)


def test_one_value_for_the_checkpoints_quantization():
    spec = load_model("nemotron-3-super-120b-a12b")
    assert spec.quantization.method == "modelopt" and spec.quantization.algo == "FP8"
    w = weights(spec)
    assert w.quantization == spec.quantization.scheme.name == "modelopt fp8"


def test_the_shipped_fp8_super_is_not_sized_at_bf16():
    # the figure: 224.8 GiB at bf16. At FP8 the Mamba and MoE GEMMs take 1 B a weight (NVIDIA's precision
    # table); attention projections, latent projections, embedding, head and router stay 16-bit
    w = weights(load_model("nemotron-3-super-120b-a12b"))
    assert w.bytes < 0.55 * w.params * 2 and w.bytes > w.params


def test_a_folders_hf_quant_config_is_read(tmp_path):
    shutil.copy(NANO, tmp_path / "config.json")
    shutil.copy(QUANT / "hf_quant_config.modelopt-nvfp4.json", tmp_path / "hf_quant_config.json")
    spec = load_path(tmp_path)
    q = spec.quantization
    assert (q.method, q.algo, q.kv_algo, q.nested, q.where) == (
        "modelopt",
        "NVFP4",
        "FP8",
        True,
        "hf_quant_config.json",
    )
    assert weights(spec).quantization == "modelopt nvfp4 (group 16)"
    assert load_path(tmp_path / "config.json").quantization == q


def test_config_json_wins_over_hf_quant_config(tmp_path):
    # vLLM get_config: hf_quant_config.json is read only when config.json has no quantization_config
    (tmp_path / "config.json").write_text(json.dumps({**_cfg(), "quantization_config": {"quant_method": "fp8"}}))
    shutil.copy(QUANT / "hf_quant_config.modelopt-nvfp4.json", tmp_path / "hf_quant_config.json")
    assert load_path(tmp_path).quantization.method == "fp8"


def test_a_hub_resave_of_a_shipped_config_keeps_its_quantization(tmp_path, monkeypatch):
    # the base model's config plus quantization_config (an NVFP4 re-save): the shapes are the shipped spec's,
    # the quantization the repository's; hf_quant_config.json is read from the cache as huggingface_hub lays it
    home = tmp_path / "hf"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rev = "0123456789abcdef0123456789abcdef01234567"
    repo = home / "hub" / "models--someone--Nemotron-3-Nano-NVFP4"
    snap = repo / "snapshots" / rev
    snap.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(rev)
    (snap / "config.json").write_text(json.dumps(_cfg()))
    shutil.copy(QUANT / "hf_quant_config.modelopt-nvfp4.json", snap / "hf_quant_config.json")
    spec = load_model("someone/Nemotron-3-Nano-NVFP4")
    assert spec.quantization.where == "hf_quant_config.json" and spec.quantization.algo == "NVFP4"
    assert weights(spec).quantization == "modelopt nvfp4 (group 16)"


def _nano(quantization: dict):
    return spec_from_config({**_cfg(), "quantization_config": quantization}, name="nano-q")


MODELOPT_NVFP4 = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "kv_cache_quant_algo": "FP8"}
MODELOPT_SCHEME = {
    "quant_method": "modelopt",
    "quant_algo": "NVFP4",
    "kv_cache_scheme": {"dynamic": False, "num_bits": 8, "type": "float"},
}
CT_NVFP4 = {
    "quant_method": "compressed-tensors",
    "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "float", "group_size": 16}}},
    "kv_cache_scheme": {"num_bits": 8, "type": "float"},
}


@pytest.mark.parametrize(
    "config,version,given,kv",
    [
        # ModelOpt: auto resolves from the checkpoint from 0.14.0 (resolve_kv_cache_dtype_string absent in 0.13.0)
        (MODELOPT_NVFP4, "0.13.0", None, None),
        (MODELOPT_NVFP4, "0.14.0", None, "fp8_e4m3"),
        (MODELOPT_SCHEME, "0.33.0", None, "fp8_e4m3"),
        (MODELOPT_NVFP4, "0.33.0", "bfloat16", None),  # a flag the user gives wins
        # compressed-tensors: its Attention layer sets fp8 from 0.15.0, over any flag until 0.21.0, under auto only
        # from 0.22.0 (0.14.1 has no such branch)
        (CT_NVFP4, "0.14.1", None, None),
        (CT_NVFP4, "0.15.0", None, "fp8"),
        (CT_NVFP4, "0.18.0", "bfloat16", "fp8"),
        (CT_NVFP4, "0.21.0", "bfloat16", "fp8"),
        (CT_NVFP4, "0.22.0", "bfloat16", None),
        # ModelOpt's 4-bit KV scheme maps to nvfp4 from 0.20.0 (MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP), auto before
        ({**MODELOPT_SCHEME, "kv_cache_scheme": {"num_bits": 4, "type": "float"}}, "0.19.1", None, None),
        ({**MODELOPT_SCHEME, "kv_cache_scheme": {"num_bits": 4, "type": "float"}}, "0.20.0", None, "nvfp4"),
        (CT_NVFP4, "0.25.1", "bfloat16", None),
        (CT_NVFP4, "0.25.1", None, "fp8"),
        ({"quant_method": "awq", "bits": 4, "group_size": 128}, "0.33.0", None, None),
    ],
)
def test_vllm_kv_from_the_checkpoint_by_release(config, version, given, kv):
    got = vllm_dtypes.checkpoint_kv(_nano(config), vllm_release(version), given)
    assert (got[0] if got else None) == kv


@pytest.mark.parametrize(
    "config,version,kv",
    [
        (MODELOPT_NVFP4, "0.5.2", None),  # configure_kv_cache_dtype takes the model dtype under auto
        (MODELOPT_NVFP4, "0.5.3rc2", "fp8_e4m3"),
        (MODELOPT_NVFP4, "0.5.9", None),  # 0.5.9–0.5.14: the config.json layout reads kv_cache_scheme only
        (MODELOPT_NVFP4, "0.5.14", None),
        (MODELOPT_NVFP4, "0.5.15", "fp8_e4m3"),
        (MODELOPT_SCHEME, "0.5.9", "fp8_e4m3"),
        (MODELOPT_NVFP4, "0.5.16", "fp8_e4m3"),  # from 0.5.15 the scheme, else kv_cache_quant_algo
        # ModelOptFp8Config keeps kv_cache_quant_method up to 0.5.3.post3, an attribute the auto rule does not read
        ({**MODELOPT_SCHEME, "quant_algo": "FP8"}, "0.5.3.post3", None),
        ({**MODELOPT_SCHEME, "quant_algo": "FP8"}, "0.5.4", "fp8_e4m3"),
        (CT_NVFP4, "0.5.23", None),  # compressed-tensors sets no kv_cache_quant_algo
    ],
)
def test_sglang_kv_from_the_checkpoint_by_release(config, version, kv):
    got = sglang_dtypes.checkpoint_kv(_nano(config), sglang_release(version), None)
    assert (got[0] if got else None) == kv


def test_modelopt_nvfp4_nano_block_of_the_real_0_16_log(run_cli, tmp_path):
    # issue 16 quotes a real vLLM 0.16 Nemotron-3-Nano NVFP4 log (not under tests/data/logs): block 4176 with
    # --kv-cache-dtype auto where hybridplan said 2096. The checkpoint's
    # FP8 KV halves the attention page: 2 KV heads · 128 · 2 · 1 B = 512 B a token a layer; the Mamba page
    # 6,144·3·2 + 64·64·128·4 = 2,134,016 B → 16 · cdiv(2,134,016, 16 · 512) = 4,176; at bf16 it was 2,096
    shutil.copy(NANO, tmp_path / "config.json")
    shutil.copy(QUANT / "hf_quant_config.modelopt-nvfp4.json", tmp_path / "hf_quant_config.json")
    code, out, err = run_cli(
        "fit", tmp_path, "--kv-budget", "10GiB", "--ctx", "8192", "--vllm-version", "0.16.0", "--json"
    )
    assert code in (0, 1), err
    assert json.loads(out)["vllm"]["modes"]["none"]["block_size"] == 4176
    code, out, err = run_cli(
        "fit", tmp_path, "--kv-budget", "10GiB", "--ctx", "8192", "--vllm-version", "0.13.0", "--json"
    )
    assert json.loads(out)["vllm"]["modes"]["none"]["block_size"] == 2096


def test_an_unsized_scheme_keeps_its_kv_and_refuses_its_weights():
    spec = _nano(
        {
            "quant_method": "modelopt",
            "quant_algo": "MIXED_PRECISION",
            "kv_cache_scheme": {"dynamic": False, "num_bits": 8, "type": "float"},
        }
    )
    assert vllm_dtypes.checkpoint_kv(spec, vllm_release("0.33.0"), None)[0] == "fp8_e4m3"
    with pytest.raises(PlanError, match="MIXED_PRECISION"):
        weights(spec)


def test_an_index_of_one_byte_a_parameter_without_quantization_is_refused(tmp_path):
    # total_size is bytes: an index holding about a byte a parameter is an FP8 checkpoint whose config does not
    # say so; its bytes were once read as the parameter count and priced at bf16 (twice the checkpoint)
    shutil.copy(NANO, tmp_path / "config.json")
    counted = weights(load_path(tmp_path)).params
    index = {"metadata": {"total_size": counted}, "weight_map": {}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(PlanError, match="about one byte each"):
        weights(load_path(tmp_path))
    shutil.copy(QUANT / "hf_quant_config.modelopt-nvfp4.json", tmp_path / "hf_quant_config.json")
    w = weights(load_path(tmp_path))
    assert (w.bytes, w.params, w.source) == (counted, counted, "safetensors-index")


def test_check_log_says_the_checkpoint_resolved_auto(run_cli):
    # a real log (NVIDIA's retail-shopping-assistant PR #95) of the FP8 Nemotron-3-Super at TP 2, version not
    # logged (newest rules): its KV is fp8 by the checkpoint's kv_cache_scheme, said with the reason
    from tests.conftest import CONFIGS as _c

    log = _c.parent / "logs" / "vllm-unknown-nemotron-3-super-120b-h100-1.log"
    code, out, err = run_cli("check-log", log, "--model", "nemotron-3-super-120b-a12b", "--tp", "2", "--json")
    kv = next(x for x in json.loads(out)["settings"] if x["name"] == "kv_cache_dtype")
    assert code == 0 and kv["value"] == "fp8_e4m3"
    assert kv["source"].startswith("auto resolved to fp8_e4m3 by the ModelOpt checkpoint's kv_cache_scheme")


def test_compressed_tensors_fp8_kv_before_the_block_follows_the_layers_is_refused():
    # up to 0.19.1 the hybrid block is aligned in the engine config while the cache dtype is still auto (bf16),
    # and the Attention layers then set fp8: a start hybridplan does not model, said so; with --kv-dtype fp8 both
    # agree, and from 0.20.0 the block is aligned after the model is built (update_block_size_for_backend)
    from hybridplan.scenario import DtypeChoice

    spec = _nano(CT_NVFP4)
    with pytest.raises(PlanError, match="aligns the hybrid block"):
        vllm_dtypes.cache_dtypes(spec, DtypeChoice(), vllm_release("0.19.1"))
    assert vllm_dtypes.cache_dtypes(spec, DtypeChoice(kv="fp8"), vllm_release("0.19.1")).kv == "float8_e4m3fn"
    assert vllm_dtypes.cache_dtypes(spec, DtypeChoice(), vllm_release("0.20.0")).kv == "float8_e4m3fn"


def test_a_checkpoint_imposed_nvfp4_kv_is_refused_as_not_sized():
    spec = _nano({**MODELOPT_SCHEME, "kv_cache_scheme": {"num_bits": 4, "type": "float"}})
    from hybridplan.scenario import DtypeChoice

    with pytest.raises(PlanError, match="nvfp4 KV cache for this checkpoint"):
        vllm_dtypes.cache_dtypes(spec, DtypeChoice(), vllm_release("0.33.0"))
    assert vllm_dtypes.cache_dtypes(spec, DtypeChoice(), vllm_release("0.19.1")).kv == "bfloat16"


def test_modelopt_mixed_precision_against_a_real_log():
    # nvidia/Qwen3.6-27B-NVFP4 (config verbatim, tests/data/configs/SOURCES.md): MIXED_PRECISION, GDN and
    # attention projections FP8 (1 B), MLP and lm_head W4A16_NVFP4 (0.5625 B), embedding, vision tower and the
    # rest bf16. vLLM 0.23.1rc1 on one GPU printed "Model loading took 19.78 GiB"
    # (tests/data/logs/vllm-0.23.1rc1-qwen3.6-27b-nvfp4-hopper-1.log); counted: 19.63 GiB, the rest is what the
    # load holds beside the weights
    spec = load_path(CONFIGS / "nvidia__Qwen3.6-27B-NVFP4.json")
    w = weights(spec)
    assert w.quantization == "modelopt mixed (nvfp4, fp8)"
    assert abs(w.bytes / 2**30 - 19.78) < 0.2


def test_a_per_layer_ignore_list_leaves_those_layers_whole():
    # nvidia/Qwen3.5-122B-A10B-NVFP4 ignores every layer's linear_attn, self_attn and shared expert by name
    # (model.language_model.layers.N.linear_attn*, …), the visual tower and lm_head: only the routed experts
    # are NVFP4, so the bytes are the bf16 count less (2 − 0.5625) B a routed-expert weight
    from hybridplan.weights.families import parts

    spec = load_path(CONFIGS / "nvidia__Qwen3.5-122B-A10B-NVFP4.json")
    bf16 = spec_from_config(
        {k: v for k, v in json.loads(spec.config_json).items() if k != "quantization_config"}, name="bf16"
    )
    experts = sum(
        p.params
        for p in parts(spec.architecture, json.loads(spec.config_json), spec.family)
        if p.section == "model" and p.name.startswith("experts.")
    )
    assert weights(spec).bytes == pytest.approx(weights(bf16).bytes - experts * (2 - 0.5625), rel=1e-9)
