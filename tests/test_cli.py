"""A new user's first hour: wrong answers, refusals and limits found by trying hybridplan as a newcomer would.
Each refusal is one line on stderr with exit code 2, or for an engine that would not start, fit's verdict
with exit code 1."""

import json

import pytest

from hybridplan.adapters import spec_from_config
from hybridplan.errors import PlanError
from tests.conftest import CONFIGS


def _one_line(code, out, err, *needles, rc=2):
    assert code == rc, (code, out, err)
    assert out == "" and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for n in needles:
        assert n in err, err


# --- a context past the model's own maximum ----------------------------------------------------------------


def test_fit_past_the_models_context_is_vllms_and_sglangs_refusal(run_cli):
    # Nemotron-H-8B-Base-8K: max_position_embeddings 8192 (model_specs/nemotron-h-8b.yaml); vLLM refuses a longer
    # --max-model-len (vllm/config/model.py _get_and_verify_max_len), SGLang a longer --context-length
    # (srt/configs/model_config.py _derive_context_length), unless their environment variables allow it
    argv = ("fit", "nemotron-h", "--ctx", "131072", "--gpu-mem", "141GB", "--params", "8.1e9", "--max-num-seqs",
            "1024", "--json")
    code, out, _ = run_cli(*argv)
    d = json.loads(out)
    assert code == 1 and not d["ok"]
    assert d["vllm"]["max_model_len_refused"].startswith(
        "User-specified max_model_len (131072) is greater than the derived max_model_len "
        "(max_position_embeddings=8192 or model_max_length=None in model's config.json). To allow overriding this "
        "maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.")
    assert d["sglang"]["context_length_refused"].startswith(
        "User-specified context_length (131072) is greater than the derived context_length (8192).")
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
    lin = spec_from_config({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "hidden_size": 64,
                            "num_attention_heads": 4, "max_position_embeddings": 4096,
                            "rope_scaling": {"rope_type": "linear", "factor": 4.0}}, name="lin")
    assert derived_max_len(lin).value == 16384.0 and context_length(lin) == 16384
    # Mamba-2.8B names no length: vLLM takes any --max-model-len (2048 when none), SGLang assumes 2048
    mamba = load_model("mamba-2.8b")
    assert derived_max_len(mamba).value is None and default_max_len(mamba) == 2048 and context_length(mamba) == 2048


@pytest.mark.parametrize("text,value", [("131072", 131072), ("128k", 128_000), ("128K", 131_072), ("25.6k", 25_600),
                                        ("1e9", 10**9), ("131,072", 131_072)])
def test_ctx_as_vllms_max_model_len_reads_it(run_cli, text, value):
    # vllm/utils/argparse_utils.py human_readable_int: k = 10^3, K = 2^10, decimals with decimal suffixes only;
    # a whole 1e9 and thousands separators as a person types them
    code, out, err = run_cli("size", "mamba-2.8b", "--ctx", text, "--json")
    assert code == 0, err
    assert json.loads(out)["ctx"] == value


@pytest.mark.parametrize("argv,needle", [
    (("size", "nemotron-h", "--ctx", "99999999999999999999"), "at most 1,073,741,824"),
    (("size", "nemotron-h", "--ctx", "2.5K"), "no decimals with a binary suffix"),
    (("size", "nemotron-h", "--ctx", "abc"), "cannot read 'abc'"),
    (("fit", "nemotron-h", "--gpu-mem", "80GB", "--params", "8e9", "--gpu-util", "1.5"), "--gpu-util must be (0, 1]"),
    (("fit", "nemotron-h", "--gpu-mem", "80GB", "--params", "8e9", "--gpu-util", "0"), "--gpu-util must be (0, 1]"),
    (("fit", "nemotron-h", "--gpu-mem", "80GB", "--params", "8e9", "--mem-fraction-static", "2"),
     "--mem-fraction-static must be (0, 1]"),
    (("fit", "nemotron-h", "--kv-budget", "40GiB", "--mamba-full-memory-ratio", "-1"),
     "--mamba-full-memory-ratio must be (0, 1000]"),
    (("fit", "nemotron-h", "--gpu-mem", "99999TB", "--params", "8e9"), "beyond any GPU"),
    (("fit", "nemotron-h", "--gpu-mem", "80GB", "--params", "1e20"), "--params must be (0, 1e+14]"),
    (("fit", "nemotron-h", "--kv-budget", "40GiB", "--max-num-seqs", "99999999999"), "at most 2,147,483,647"),
    (("size", "nemotron-h", "--slots", "1e12"), "at most 2,147,483,647"),
    (("size", "nemotron-h", "--dtype", "float8"), "unknown --dtype 'float8'"),
    (("size", "nemotron-h", "--ssm-dtype", "fp8"), "unknown --ssm-dtype 'fp8'"),
    (("size", "nemotron-h", "--conv-dtype", "fp8"), "unknown --conv-dtype 'fp8'"),
    (("size", "nemotron-h", "--kv-dtype", "nvfp4"), "not sized by hybridplan"),
    (("fit", "nemotron-h", "--kv-budget", "40GiB", "--engine", "sglang", "--kv-dtype", "float16"),
     "SGLang 0.5.23 --kv-cache-dtype takes"),
    (("crossover", "--plot", "y.txt"), "name a file ending in .png"),
    (("crossover", "--plot", "x"), "name a file ending in .png"),
    (("prefix", "nemotron-h", "--sweep", "0:100:10", "--plot", "y.csv"), "name a file ending in .png"),
])
def test_values_are_bounded_and_named(run_cli, argv, needle):
    _one_line(*run_cli(*argv), needle)


def test_dtype_names_the_engine_flags_take(run_cli):
    # vLLM --dtype takes half and float (vllm/config/model.py ModelDType); --mamba-ssm-cache-dtype float16
    for argv in (("--dtype", "half"), ("--dtype", "float"), ("--ssm-dtype", "float16"), ("--kv-dtype", "fp8_e5m2"),
                 ("--ssm-dtype", "auto")):
        code, out, err = run_cli("size", "nemotron-h", *argv, "--json")
        assert code == 0, err
    d = json.loads(run_cli("size", "nemotron-h", "--dtype", "half", "--json")[1])
    assert d["dtypes"]["kv"] == "float16"


def test_plot_format_is_checked_before_anything_is_computed(run_cli, tmp_path):
    # before, the table printed and then `internal error: ValueError`, exit 1
    code, out, err = run_cli("crossover", "--plot", tmp_path / "y.txt")
    assert code == 2 and out == "" and not (tmp_path / "y.txt").exists()


def test_profile_refuses_more_slots_than_one_launch_covers(run_cli):
    # kernels launch one grid row per slot; CUDA allows 65,535 rows (hybridplan.kernels.bench.MAX_GRID_YZ)
    _one_line(*run_cli("profile", "--interpret", "--slots", "70000"), "--slots 70,000", "65,535")


@pytest.mark.parametrize("argv", [
    ("prefix", "qwen3-next", "--shared", "99999999999999999999", "--json"),
    ("prefix", "nemotron-h", "--private", "8192", "--shared", "99999999999999999999"),
    ("prefix", "llama-3-8b", "--sweep", "0:6000:250", "--private", "99999999999999999999", "--json"),
    ("prefix", "llama-3-8b", "--shared", "1000000000", "--allow-long-context", "--json"),
    ("prefix", "llama-3-8b", "--sweep", "0:6000:2", "--private", "100"),
    ("prefix", "llama-3.1-70b", "--sweep", "0:130000:100", "--private", "100", "--json"),
])
def test_absurd_prefix_sizes_are_refused_quickly(run_cli, argv):
    # before, these ran out of time (30 s) or memory; now one line, exit 2 (timings: benchmarks/, not here)
    code, out, err = run_cli(*argv)
    _one_line(code, out, err)


def test_a_prompt_longer_than_the_engine_takes_skips_that_engine(run_cli):
    # Mamba-2.8B names no length: vLLM takes the prompt, SGLang (2048 assumed) does not
    code, out, _ = run_cli("prefix", "mamba-2.8b", "--shared", "3000", "--private", "10", "--json")
    d = json.loads(out)
    assert code == 0 and "vllm" in d and "SGLang takes no 3,010-token prompt" in d["skipped"]["sglang"]


def test_layer_list_that_does_not_match_the_layer_count_is_refused():
    cfg = json.loads((CONFIGS / "Qwen__Qwen3-Next-80B-A3B-Thinking.json").read_text())
    cfg["layer_types"] = ["linear_attention", "full_attention"]
    with pytest.raises(PlanError, match="layer_types lists 2 layers but num_hidden_layers is 48"):
        spec_from_config(cfg, name="q")


def test_missing_mamba_d_ssm_is_named_as_the_class_default():
    cfg = json.loads((CONFIGS / "tiiuae__Falcon-H1-0.5B-Base.from-python-dict.json").read_text())
    with pytest.raises(PlanError, match="no mamba_d_ssm, and FalconH1Config's default inner width, 1024, is not "
                                        r"heads·head_dim = 24·64 = 1536"):
        spec_from_config(cfg, name="f")


def test_check_log_reads_a_large_log_as_a_stream(run_cli, tmp_path):
    # the start-up lines among many unrelated ones, CRLF line ends and undecodable bytes; the whole file is never
    # held (hybridplan.logread keeps the lines that hold a keyword); speed: benchmarks/check_log.py
    from tests.test_engines import DATA

    real = (DATA / "vllm-0.23-nemotron-h.log").read_bytes().replace(b"\n", b"\r\n")
    junk = b"".join(b"DEBUG 11-20 09:12:%02d step %d \xff\xfe scheduler\r\n" % (i % 60, i) for i in range(200_000))
    p = tmp_path / "big.log"
    p.write_bytes(junk + real + junk)
    code, out, err = run_cli("check-log", p, "--json")
    d = json.loads(out)
    assert code == 0 and d["ok"], err
    assert {r["figure"] for r in d["rows"]} >= {"attention block size", "KV cache size (tokens)"}


def test_completion_of_option_values(run_cli):
    # typer's completion protocol: _HYBRIDPLAN_COMPLETE=complete_bash with COMP_WORDS / COMP_CWORD
    import os
    import subprocess
    import sys

    def complete(words: str) -> list[str]:
        env = {**os.environ, "_HYBRIDPLAN_COMPLETE": "complete_bash", "COMP_WORDS": words,
               "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1))}
        out = subprocess.run([sys.executable, "-m", "hybridplan"], env=env, capture_output=True, text=True).stdout
        return out.split()

    assert complete("hybridplan fit --engine ") == ["vllm", "sglang", "both"]
    assert set(complete("hybridplan size --mode a")) == {"align", "all"}
    assert "bfloat16" in complete("hybridplan size --kv-dtype ") and "fp8" in complete("hybridplan size --kv-dtype ")
    assert "0.33.0" in complete("hybridplan size --vllm-version 0.3")
    assert "nemotron-h" in complete("hybridplan size nemo")


# --- issue 17: what the help promises, and the defaults, start ----------------------------------------------


def test_the_helps_kv_dtype_example_runs_under_both_engines(run_cli):
    # --kv-dtype's help says "e.g. fp8": vLLM spells it fp8, SGLang fp8_e4m3 (server_args.py has no plain fp8);
    # both are float8_e4m3fn, so the figures are those of fp8_e4m3
    argv = ("fit", "nemotron-h", "--ctx", "8192", "--gpu-type", "h100", "--json", "--kv-dtype")
    code, out, err = run_cli(*argv, "fp8")
    assert code == 0, err
    code2, out2, _ = run_cli(*argv, "fp8_e4m3")
    a, b = json.loads(out), json.loads(out2)
    assert a["sglang"] == b["sglang"] and a["vllm"] == b["vllm"]
    assert "fp8_e4m3" in a["commands"]["sglang"]["argv"] and "fp8" in a["commands"]["vllm"]["argv"]


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


def test_an_attention_free_model_shows_no_kv_pool(run_cli):
    code, out, _ = run_cli("fit", "mamba-130m", "--gpu-type", "h100", "--engine", "sglang")
    row = next(line for line in out.splitlines() if line.startswith("KV pool") or line.startswith("  KV pool"))
    assert "none" in row and "GiB" not in row


def test_prefix_refuses_shared_with_a_sweep(run_cli):
    _one_line(*run_cli("prefix", "nemotron-h", "--shared", "4000", "--sweep", "0:6000:100"), "not both")


def test_help_says_what_ctx_defaults_to_and_names_log_plainly(run_cli):
    import re

    code, out, _ = run_cli("fit", "--help")
    assert code == 0 and "default: the model's maximum" in re.sub(r"\s+", " ", out)
    code, out, _ = run_cli("check-log", "--help")
    assert code == 0 and "Usage: hybridplan check-log [OPTIONS] LOG" in out and "{LOG}" not in out


@pytest.mark.parametrize("flag", ["--tensor-parallel-size", "--gpu-memory-utilization", "--max-model-len",
                                  "--kv-cache-dtype", "--enable-prefix-caching", "--context-length", "--tp-size"])
def test_the_engines_flag_names_are_taken(run_cli, flag):
    # issue 17: these were refused, --tensor-parallel-size with a hint of --page-size
    value = {"--tensor-parallel-size": "2", "--gpu-memory-utilization": "0.85", "--max-model-len": "4096",
             "--kv-cache-dtype": "fp8_e4m3", "--context-length": "4096", "--tp-size": "2"}.get(flag)
    ctx = () if flag in ("--max-model-len", "--context-length") else ("--ctx", "4096")
    code, out, err = run_cli("fit", "nemotron-h", "--gpu-type", "h100", *ctx, "--json", flag,
                             *([value] if value else []))
    assert code in (0, 1), err
    # the same value through hybridplan's own option
    own = {"--tensor-parallel-size": "--tp", "--gpu-memory-utilization": "--gpu-util", "--max-model-len": "--ctx",
           "--kv-cache-dtype": "--kv-dtype", "--context-length": "--ctx", "--tp-size": "--tp"}.get(flag)
    if own:
        argv = ["fit", "nemotron-h", "--gpu-type", "h100", "--json", own, value]
        if own != "--ctx":
            argv += ["--ctx", "4096"]
        assert json.loads(run_cli(*argv)[1])["vllm"] == json.loads(out)["vllm"]
        assert json.loads(out)["ctx"] == 4096


def test_model_path_names_the_model(run_cli):
    code, out, err = run_cli("size", "--model-path", "nvidia/Nemotron-H-8B-Base-8K", "--ctx", "4096", "--json")
    assert code == 0, err
    assert json.loads(out)["model"] == "nemotron-h-8b"
