"""The speculative drafter's weights: counted from the configs (the MTP layers of the target, or a draft model of
its own), shared with the target as each engine shares them, and taken off the memory where each engine loads
them (issue 28 item 2).

Sources: the parameter counts are derived by hand below, shape by shape, from the configs under
tests/data/configs (SOURCES.md there); the engine rules are read from the vLLM wheels 0.10.0, 0.16.0, 0.25.1 and
0.33.0 (v1/worker/gpu_model_runner.py ``load_model``, v1/spec_decode/eagle.py / llm_base_proposer.py
``load_model``, the models' *_mtp.py) and the SGLang wheels 0.5.2 and 0.5.23 (managers/scheduler.py, speculative/
eagle_worker*.py), as hybridplan/engines/*/memory.py ``drafter`` says; the logged figures are from
tests/data/logs (their sources in each file's header and in tests/data/logs/SOURCES.md).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from msgspec.structs import replace

from hybridplan.adapters import config_facts
from hybridplan.engines.sglang.memory import drafter as sglang_drafter
from hybridplan.engines.sglang.memory import drafter_shortfall
from hybridplan.engines.sglang.memory import memory as sglang_memory
from hybridplan.engines.sglang.releases import release as sglang_release
from hybridplan.engines.sglang.settings import SglangSettings
from hybridplan.engines.sglang.speculative import SglangFlags, speculative_from_sglang
from hybridplan.engines.vllm.memory import drafter, memory
from hybridplan.engines.vllm.releases import release
from hybridplan.engines.vllm.settings import VllmSettings
from hybridplan.engines.vllm.speculative import speculative_from_vllm
from hybridplan.loader import load_model
from hybridplan.scenario import Budget, DtypeChoice, Scenario
from hybridplan.weights import mtp_rank_bytes

pytestmark = pytest.mark.unit

GiB = 1 << 30
LOGS = Path(__file__).parent / "data" / "logs"
CONFIGS = Path(__file__).parent / "data" / "configs"

# Qwen3.6-35B-A3B's MTP layer (Qwen__Qwen3.6-35B-A3B.json: hidden 2,048, 16 query heads and 2 KV heads of 256,
# 256 experts of 512, a shared expert of 512; mtp_num_hidden_layers 1), as vllm/model_executor/models/
# qwen3_5_mtp.py builds it:
#   fc 2·2,048 → 2,048                                       8,388,608
#   pre_fc_norm_hidden, pre_fc_norm_embedding, norm  3·2,048      6,144
#   input_layernorm, post_attention_layernorm         2·2,048      4,096
#   attention: q (gated, 2·16·256 wide) 2,048·8,192          16,777,216
#              k, v 2·2,048·512                               2,097,152
#              o 4,096·2,048                                  8,388,608
#              q_norm, k_norm 2·256                                 512
#   MoE: router 256·2,048                                       524,288
#        experts gate_up 2,048·(2·512·256)                  536,870,912
#        experts down (512·256)·2,048                       268,435,456
#        shared expert gate_up 2,048·1,024, down 512·2,048    3,145,728
#        shared_expert_gate 2,048                                 2,048
#   total                                                   844,640,768 parameters = 1,689,281,536 B in bfloat16
# (1.5733 GiB: the "about 1.57 GiB" issue 28 says is missing). The embedding and LM head are not in it.
QWEN36_MTP = 844_640_768
# Qwen3-Next-80B-A3B (Qwen__Qwen3-Next-80B-A3B-Instruct.json): the same layer with 512 experts. Its config names
# no num_nextn_predict_layers; qwen3_next_mtp.py reads getattr(config, "num_nextn_predict_layers", 1): one layer.
#   fc, the five norms, attention as above          8,388,608 + 10,240 + 27,263,488
#   router 512·2,048                                  1,048,576
#   experts gate_up 2,048·(2·512·512)             1,073,741,824
#   experts down (512·512)·2,048                    536,870,912
#   shared expert and its gate                        3,147,776
#   total                                         1,650,471,424
QWEN3_NEXT_MTP = 1_650_471_424


def _vllm(spec, sp, version="0.33.0", tp=1, gpu="h100", pp=1):
    return Scenario(
        spec=spec,
        ctx=8192,
        tp=tp,
        pp=pp,
        dtypes=DtypeChoice(),
        spec_tokens=sp.num_tokens,
        speculative=sp,
        engine="vllm",
        vllm=VllmSettings(release=release(version)),
        budget=Budget(gpu_mem=80 * GiB, gpu=gpu),
    )


def _loaded(name: str) -> float:
    """The log's "Model loading took … GiB"."""
    return float(re.search(r"Model loading took ([\d.]+) GiB", (LOGS / name).read_text()).group(1))


def test_qwen36_mtp_layer_counted_shape_by_shape():
    spec = load_model("qwen3.6-35b-a3b")
    assert mtp_rank_bytes(spec, 1, "bfloat16") == (QWEN36_MTP, 2 * QWEN36_MTP)
    # at TP 2 the layer's linear weights split, its router, norms and fc (gather_output, replicated) do not
    # (hybridplan/weights ``rank_params``): fc 8,388,608 + norms 10,240 + q/k norms 512 + router 524,288 + shared
    # gate 2,048 stay whole, the rest halves
    whole = 8_388_608 + 10_240 + 512 + 524_288 + 2_048
    assert mtp_rank_bytes(spec, 2, "bfloat16")[1] == 2 * (whole + (QWEN36_MTP - whole) // 2)


def test_qwen3_next_mtp_layer_is_not_zero():
    # issue 28: Qwen3-Next's MTP layer counted 0 parameters, because its config has neither field
    spec = load_model(str(CONFIGS / "Qwen__Qwen3-Next-80B-A3B-Instruct.json"))
    assert "num_nextn_predict_layers" not in json.loads(spec.config_json)
    assert mtp_rank_bytes(spec, 1, "bfloat16") == (QWEN3_NEXT_MTP, 2 * QWEN3_NEXT_MTP)


def test_nemotron_h_mtp_builds_every_step():
    # nemotron_h_mtp.py builds num_nextn_predict_layers × len(mtp_hybrid_override_pattern) layers, each step with
    # its own start projections and end norm: two steps are exactly twice one step
    path = CONFIGS / "nvidia__NVIDIA-Nemotron-3-Super-120B-A12B-FP8.json"
    cfg = json.loads(path.read_text())
    one = load_model(str(path))
    two = replace(one, facts=config_facts({**cfg, "num_nextn_predict_layers": 2}, one.architecture, one.family))
    p1, p2 = mtp_rank_bytes(one, 1, "bfloat16")[0], mtp_rank_bytes(two, 1, "bfloat16")[0]
    assert p1 > 0 and p2 == 2 * p1


def test_vllm_budget_falls_by_the_mtp_layer():
    # the issue's command: fit qwen3.6-35b-a3b --ctx 8192 --gpu-type h100 --speculative-config
    # '{"method":"mtp","num_speculative_tokens":2}' showed the weights of a plain start; vLLM loads the MTP layer
    # inside "Model loading took" (gpu_model_runner.py load_model), embedding and LM head shared with the target
    spec = load_model("qwen3.6-35b-a3b")
    sp = speculative_from_vllm({"method": "mtp", "num_speculative_tokens": 2}, spec)
    with_mtp, plain = memory(_vllm(spec, sp)), memory(_vllm(spec, replace(sp, method=None, layers=())))
    assert with_mtp.term("drafter weights") == 2 * QWEN36_MTP
    assert with_mtp.term("weights") == plain.term("weights")
    assert plain.cache_bytes - with_mtp.cache_bytes == 2 * QWEN36_MTP
    assert [t.name for t in with_mtp.terms][:2] == ["weights", "drafter weights"]


def test_the_same_checkpoint_loads_the_mtp_layer_more_with_mtp():
    # RedHatAI/Qwen3.6-35B-A3B-NVFP4 at TP 1, vision tower loaded in both (no --language-model-only):
    # vllm-0.20.0-qwen3.6-35b-a3b-nvfp4-blackwell-wsl-1.log (speculative_config=None) took 21.86 GiB,
    # vllm-0.25.1-qwen3.6-35b-a3b-nvfp4-mtp-gb10-1.log (method mtp, "Loading drafter model..." first) 23.45 GiB:
    # 1.59 GiB more, the MTP layer as counted in bfloat16 (this checkpoint keeps it unquantized: an NVFP4 layer
    # would be about 0.45 GiB). Tolerance 0.025 GiB: each logged figure is rounded to 0.01 GiB (±0.005 each), and
    # the measurement also holds the layer's small non-parameter buffers, under 1 % of it
    plain = _loaded("vllm-0.20.0-qwen3.6-35b-a3b-nvfp4-blackwell-wsl-1.log")
    with_mtp = _loaded("vllm-0.25.1-qwen3.6-35b-a3b-nvfp4-mtp-gb10-1.log")
    spec = load_model("qwen3.6-35b-a3b")
    sp = speculative_from_vllm({"method": "mtp", "num_speculative_tokens": 3}, spec, "0.25.1")
    counted = drafter(_vllm(spec, sp, "0.25.1", gpu="gb10")).bytes / GiB
    assert abs((with_mtp - plain) - counted) <= 0.025
    assert round(counted, 4) == 1.5733


def test_check_log_estimate_includes_the_drafter():
    # check-log's "weights loaded" sits beside "Model loading took", which holds the drafter where the log loads
    # one: the estimate grows by the layer's bytes (hybridplan/engines/vllm/logs.py weights_estimate)
    from hybridplan.engines.vllm.logs import weights_estimate
    from hybridplan.logread import read_text

    log = read_text(
        "INFO [gpu_model_runner.py:5233] Loading drafter model...\n"
        "INFO [gpu_model_runner.py:5306] Model loading took 66.97 GiB memory and 125.6 seconds\n"
    )
    spec = load_model("qwen3.6-35b-a3b")
    sp = speculative_from_vllm({"method": "mtp", "num_speculative_tokens": 3}, spec, "0.25.1")
    (with_mtp,), _ = weights_estimate(log, _vllm(spec, sp, "0.25.1"), None)
    (plain,), _ = weights_estimate(log, _vllm(spec, replace(sp, method=None, layers=()), "0.25.1"), None)
    assert round(with_mtp.predicted - plain.predicted, 4) == round(2 * QWEN36_MTP / GiB, 4)
    assert "drafter" in with_mtp.basis


def test_deepseek_mtp_head_shared_from_0_16():
    # deepseek_mtp.py: each MTP layer has a shared_head with a ParallelLMHead of its own. 0.10.0's
    # EagleProposer.load_model replaces only lm_head, so that head stays loaded; 0.16.0's _maybe_share_lm_head
    # replaces shared_head.head too (vllm#34385). One head on a rank of TP 8: 129,280 rows (a multiple of 64) / 8 =
    # 16,160 rows · 7,168 · 2 B = 231,669,760 B (the LM head is not quantized in DeepSeek-V3's fp8 checkpoint)
    spec = load_model("deepseek-v3")
    sp = speculative_from_vllm({"method": "deepseek_mtp", "num_speculative_tokens": 1}, spec, "0.10.0")
    old = drafter(_vllm(spec, sp, "0.10.0", tp=8)).bytes
    sp = speculative_from_vllm({"method": "mtp", "num_speculative_tokens": 1}, spec, "0.16.0")
    new = drafter(_vllm(spec, sp, "0.16.0", tp=8)).bytes
    assert old - new == 231_669_760


def _eagle3(tmp_path, vocab: int | None) -> str:
    """An EAGLE-3 head for a 4,096-wide target: one Llama layer of 4,096, 32 heads and 8 KV heads of 128,
    intermediate 14,336, the target's vocabulary of 128,256, and ``draft_vocab_size`` where given."""
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": 4096,
        "num_hidden_layers": 1,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 14336,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
        "torch_dtype": "bfloat16",
        **({"draft_vocab_size": vocab} if vocab else {}),
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return str(tmp_path)


# the EAGLE-3 layer of _eagle3 (llama_eagle3.py), without embedding or head:
#   input_layernorm, post_attention_layernorm 2·4,096, final norm 4,096, hidden_norm 4,096    16,384
#   q 4,096·4,096, k and v 2·4,096·1,024, o 4,096·4,096                                   41,943,040
#   layer 0's QKV takes [embedding, hidden state]: 4,096 more inputs · (4,096 + 2·1,024)  25,165,824
#   gate_up 4,096·28,672, down 14,336·4,096                                              176,160,768
#   fc over three aux hidden states of the 4,096-wide target: 12,288·4,096                50,331,648
#   total                                                                                293,617,664
EAGLE3_LAYERS = 293_617_664


def test_eagle3_head_by_vocabulary_and_release(tmp_path):
    target = load_model("llama-3.1-8b")
    ref = _eagle3(tmp_path, 32000)
    sp = speculative_from_vllm({"method": "eagle3", "model": ref, "num_speculative_tokens": 3}, target, "0.33.0")
    # a 32,000-row head of its own: 32,000·4,096 = 131,072,000 more; the embedding is the target's
    assert drafter(_vllm(target, sp)).bytes == 2 * (EAGLE3_LAYERS + 131_072_000)
    (tmp_path / "same").mkdir()
    same = _eagle3(tmp_path / "same", None)
    sp = speculative_from_vllm({"method": "eagle3", "model": same, "num_speculative_tokens": 3}, target, "0.33.0")
    # the target's vocabulary: the head is shared from 0.16.0, kept by 0.10.0 (method != "eagle3"): 128,256·4,096
    assert drafter(_vllm(target, sp)).bytes == 2 * EAGLE3_LAYERS
    sp = speculative_from_vllm({"method": "eagle3", "model": same, "num_speculative_tokens": 3}, target, "0.10.0")
    assert drafter(_vllm(target, sp, "0.10.0")).bytes == 2 * (EAGLE3_LAYERS + 128_256 * 4096)


def test_drafter_on_the_last_pipeline_stage_only():
    # gpu_model_runner.py builds the drafter only where get_pp_group().is_last_rank (0.10.0-0.33.0)
    from hybridplan.engines.vllm.parallel import pipeline, stage_memory

    spec = load_model("qwen3.6-35b-a3b")
    sp = speculative_from_vllm({"method": "mtp", "num_speculative_tokens": 1}, spec)
    sc = replace(_vllm(spec, sp, pp=2), budget=Budget(gpu_mem=80 * GiB, gpu="h100"))
    first, last = (stage_memory(sc, st) for st in pipeline(sc))
    assert first.term("drafter weights") == 0
    # at PP > 1 the drafter loads the vocabulary embedding of its own: 248,320 rows · 2,048 · 2 B = 1,017,118,720
    assert last.term("drafter weights") == 2 * QWEN36_MTP + 1_017_118_720


def _sglang(spec, sp, fraction=None):
    """As hybridplan/build.py builds it: the steps (D − 1) as spec_tokens, D as the settings' draft tokens."""
    steps = sp.num_tokens - 1
    settings = SglangSettings(
        release=sglang_release("0.5.23"), mem_fraction_static=fraction, draft_tokens=sp.num_tokens
    )
    return Scenario(
        spec=spec,
        ctx=8192,
        spec_tokens=steps,
        speculative=replace(sp, num_tokens=steps),
        engine="sglang",
        sglang=settings,
        budget=Budget(gpu_mem=80 * GiB, gpu="h100"),
    )


def test_sglang_draft_loads_after_the_split():
    # the draft worker is made after the target's pools (scheduler.py 0.5.2; model_runner.py 0.5.23): the
    # target's R is total-before-loading × mem_fraction_static − the target's weights, the draft not in it
    spec = load_model("qwen3.6-35b-a3b")
    sp = speculative_from_sglang(SglangFlags("NEXTN", num_steps=2), spec, "0.5.23")
    water = sglang_memory(_sglang(spec, sp, 0.8))
    before = water.gpu_bytes - water.term("CUDA context")
    assert water.cache_bytes == int(before * 0.8) - water.term("weights")
    assert [t.bytes for t in water.after] == [2 * QWEN36_MTP]
    assert drafter_shortfall(water) is None
    # at 0.99 the 0.80 GiB left beside the pools cannot hold the layer's 1.57 GiB
    tight = sglang_memory(_sglang(spec, sp, 0.99))
    assert "exceed" in drafter_shortfall(tight)


def test_sglang_standalone_draft_keeps_its_ends(tmp_path):
    # standalone_worker_v2.py: a STANDALONE draft shares neither its embedding nor its head with the target
    target = load_model("llama-3.1-8b")
    ref = _eagle3(tmp_path, None)
    sp = speculative_from_sglang(SglangFlags("STANDALONE", ref, 2), target, "0.5.23")
    eagle3 = speculative_from_sglang(SglangFlags("EAGLE3", ref, 2), target, "0.5.23")
    # the plain Llama layer (no fc, no second QKV input, no hidden_norm) with both ends, against the EAGLE-3
    # layer with its own head only: the embedding 128,256·4,096 less the EAGLE-3 extras 25,165,824 + 50,331,648
    # + 4,096
    diff = sglang_drafter(_sglang(target, sp)).bytes - sglang_drafter(_sglang(target, eagle3)).bytes
    assert diff == 2 * (128_256 * 4096 - 25_165_824 - 50_331_648 - 4096)


@pytest.mark.parametrize("method", ["ngram", "suffix"])
def test_model_free_methods_load_no_drafter(method):
    spec = load_model("qwen3.6-35b-a3b")
    sp = speculative_from_vllm({"method": method, "num_speculative_tokens": 2}, spec)
    assert drafter(_vllm(spec, sp)) is None


def test_one_mtp_drafter_for_both_engines():
    # --speculative-config '{"method":"mtp",…}' sizes SGLang as NEXTN (hybridplan/cmdline.py VLLM_TO_SGLANG), and a
    # NEXTN line read for vLLM is its MTP: the same layer's 1,689,281,536 B either way
    spec = load_model("qwen3.6-35b-a3b")
    mtp = speculative_from_vllm({"method": "mtp", "num_speculative_tokens": 3}, spec)
    assert sglang_drafter(_sglang(spec, replace(mtp, num_tokens=4))).bytes == 2 * QWEN36_MTP
    nextn = speculative_from_sglang(SglangFlags("NEXTN", num_steps=3), spec, "0.5.23")
    assert drafter(_vllm(spec, replace(nextn, num_tokens=3))).bytes == 2 * QWEN36_MTP


def test_dflash_draft_counted_shape_by_shape(tmp_path):
    # a five-layer Qwen3 DFlash draft for Qwen3.6-27B (the fields vLLM's qwen3_dflash.py reads: hidden 5,120, 32
    # query and 8 KV heads of 128, intermediate 17,408, the target's vocabulary of 248,320, no target_layer_ids):
    #   norms: 2·5,120 a layer · 5, the final norm and hidden_norm 2·5,120                 61,440
    #   attention a layer: q 5,120·4,096, k and v 2·5,120·1,024, o 4,096·5,120, q/k norms 256
    #                      = 52,429,056, · 5                                          262,145,280
    #   MLP a layer: gate_up 5,120·34,816, down 17,408·5,120 = 267,386,880, · 5     1,336,934,400
    #   fc over the hidden states of 5 target layers (num_hidden_layers without target_layer_ids):
    #      5·5,120·5,120                                                              131,072,000
    #   total                                                                       1,730,213,120
    # its embedding and its head (draft_vocab_size = the target's vocabulary) are the target's
    cfg = {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "hidden_size": 5120,
        "num_hidden_layers": 5,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 17408,
        "vocab_size": 248320,
        "max_position_embeddings": 262144,
        "torch_dtype": "bfloat16",
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    target = load_model("qwen3.6-27b")
    sp = speculative_from_vllm(
        {"method": "dflash", "model": str(tmp_path), "num_speculative_tokens": 5}, target, "0.20.2"
    )
    term = drafter(_vllm(target, sp, "0.20.2"))
    assert term.bytes == 2 * 1_730_213_120 and "LM head shared" in term.note
    # with target_layer_ids naming 6 target layers the fc takes 6 hidden states: 5,120·5,120 more
    (tmp_path / "six").mkdir()
    (tmp_path / "six" / "config.json").write_text(
        json.dumps({**cfg, "dflash_config": {"target_layer_ids": [1, 12, 23, 34, 45, 56]}})
    )
    sp = speculative_from_vllm(
        {"method": "dflash", "model": str(tmp_path / "six"), "num_speculative_tokens": 5}, target, "0.20.2"
    )
    assert drafter(_vllm(target, sp, "0.20.2")).bytes == 2 * (1_730_213_120 + 5120 * 5120)


@pytest.mark.parametrize(
    "argv",
    [
        (
            "qwen3.6-35b-a3b",
            "--ctx",
            "8192",
            "--gpu-type",
            "h100",
            "--engine",
            "vllm",
            "--json",
            "--speculative-config",
            '{"method":"mtp","num_speculative_tokens":2}',
        ),
        (
            "--gpu-type",
            "h100",
            "--json",
            "--",
            "vllm",
            "serve",
            "Qwen/Qwen3.6-35B-A3B",
            "--max-model-len",
            "8192",
            "--speculative-config",
            '{"method":"mtp","num_speculative_tokens":2}',
        ),
    ],
)
def test_the_issues_command_both_spellings(run_cli, argv):
    # issue 28's reproduction, as options and as a pasted engine line: the drafter is its own term of the
    # memory, and the budget is the plain start's less the layer's 1,689,281,536 B
    code, out, err = run_cli("fit", *argv)
    assert code in (0, 1), err
    mem = json.loads(out)["vllm"]["memory"]
    assert mem["drafter_weights_bytes"] == 2 * QWEN36_MTP
    code, out, _ = run_cli(
        "fit", "qwen3.6-35b-a3b", "--ctx", "8192", "--gpu-type", "h100", "--engine", "vllm", "--json"
    )
    plain = json.loads(out)["vllm"]["memory"]
    assert plain["drafter_weights_bytes"] == 0 and plain["weights_bytes"] == mem["weights_bytes"]
    assert plain["kv_budget_bytes"] - mem["kv_budget_bytes"] == 2 * QWEN36_MTP
