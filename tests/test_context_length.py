"""The context a start takes: each engine's maximum from the model's config (vLLM vllm/config/model.py
_get_and_verify_max_len, SGLang srt/configs/model_config.py _derive_context_length), the refusal past it, and the
default where neither --max-model-len nor --context-length is given."""

import json

import pytest

from hybridplan.adapters import spec_from_config

pytestmark = pytest.mark.cli


def test_fit_past_the_models_context_is_vllms_and_sglangs_refusal(run_cli):
    # Nemotron-H-8B-Base-8K: max_position_embeddings 8192 (model_specs/nemotron-h-8b.yaml); vLLM refuses a longer
    # --max-model-len (vllm/config/model.py _get_and_verify_max_len), SGLang a longer --context-length
    # (srt/configs/model_config.py _derive_context_length), unless their environment variables allow it
    argv = (
        "fit",
        "nemotron-h",
        "--ctx",
        "131072",
        "--gpu-mem",
        "141GB",
        "--params",
        "8.1e9",
        "--max-num-seqs",
        "1024",
        "--json",
    )
    code, out, _ = run_cli(*argv)
    d = json.loads(out)
    assert code == 1 and not d["ok"]
    assert d["vllm"]["max_model_len_refused"].startswith(
        "User-specified max_model_len (131072) is greater than the derived max_model_len "
        "(max_position_embeddings=8192 or model_max_length=None in model's config.json). To allow overriding this "
        "maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."
    )
    assert d["sglang"]["context_length_refused"].startswith(
        "User-specified context_length (131072) is greater than the derived context_length (8192)."
    )
    code, out, _ = run_cli(*argv, "--allow-long-context")
    assert code == 0 and json.loads(out)["ok"]
    code, out, _ = run_cli(*argv[:3], "8192", *argv[4:])
    assert code == 0


def test_size_past_the_models_context_sizes_it_with_a_note(run_cli):
    code, out, _ = run_cli("size", "nemotron-h", "--ctx", "131072", "--json")
    assert code == 0 and any("would not start with --max-model-len 131072" in n for n in json.loads(out)["notes"])
    code, out, _ = run_cli("size", "nemotron-h", "--ctx", "8192", "--json")
    assert not any("max-model-len" in n for n in json.loads(out)["notes"])


def test_rope_scaling_and_config_without_a_length():
    from hybridplan.engines.sglang.context import context_length
    from hybridplan.engines.vllm.context import default_max_len, derived_max_len
    from hybridplan.loader import load_model

    # Llama-3.1: llama3 RoPE leaves max_position_embeddings as the scaled length for both engines
    llama = load_model("llama-3.1-70b")
    assert default_max_len(llama) == 131072 and context_length(llama) == 131072
    # a linear RoPE factor of 4 scales the length in both (vLLM: rope types other than su/longrope/llama3/yarn…)
    lin = spec_from_config(
        {
            "architectures": ["LlamaForCausalLM"],
            "num_hidden_layers": 2,
            "hidden_size": 64,
            "num_attention_heads": 4,
            "max_position_embeddings": 4096,
            "rope_scaling": {"rope_type": "linear", "factor": 4.0},
        },
        name="lin",
    )
    assert derived_max_len(lin).value == 16384.0 and context_length(lin) == 16384
    # Mamba-2.8B names no length: vLLM takes any --max-model-len (2048 when none), SGLang assumes 2048
    mamba = load_model("mamba-2.8b")
    assert derived_max_len(mamba).value is None and default_max_len(mamba) == 2048 and context_length(mamba) == 2048


@pytest.mark.parametrize("model", ["mamba-130m", "falcon-mamba-7b", "mamba-2.8b", "mamba-codestral-7b"])
def test_fit_with_no_ctx_sizes_the_engines_own_maximum(run_cli, model):
    # no length in these configs: vLLM and SGLang both assume 2048 (vllm/config/model.py _get_and_verify_max_len;
    # sglang srt/configs/model_config.py, hybridplan/engines/*/context.py FALLBACK), so a start with neither
    # --max-model-len nor --context-length runs at 2048, which each accepts
    from hybridplan.engines.sglang.context import context_length
    from hybridplan.engines.vllm.context import default_max_len
    from hybridplan.loader import load_model

    spec = load_model(model)
    code, out, err = run_cli("fit", model, "--gpu-type", "h100", "--json")
    d = json.loads(out)
    assert d["ctx"] == min(default_max_len(spec), context_length(spec))
    assert d["sglang"]["context_length_refused"] is None and d["vllm"]["max_model_len_refused"] is None, err
    assert code in (0, 1), err
    # where vLLM's default --max-num-seqs is more than the Mamba blocks (Mamba-Codestral: 450 on an H100), the
    # command printed asks for what starts, and starts
    code, out, err = run_cli("fit", "--gpu-type", "h100", "--json", "--", *d["commands"]["vllm"]["argv"])
    assert code == 0 and json.loads(out)["ok"], err


def test_the_8k_alias_names_the_specs_made_for_the_context(run_cli):
    code, js, _ = run_cli("size", "nemotron-h", "--ctx", "131072", "--json")
    notes = json.loads(js)["notes"]
    assert any("would not start" in n for n in notes)
    last = notes[-1]
    # nemotron-h is the 8K base model (max_position_embeddings 8192 in its config); Nemotron-Nano-9B-v2 takes
    # 131,072 tokens (its config's max_position_embeddings)
    assert "nvidia/Nemotron-H-8B-Base-8K, made for 8,192 tokens" in last and "nemotron-nano-9b-v2" in last
