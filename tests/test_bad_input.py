"""Bad input: one line on stderr naming the problem, exit code 2, never a traceback."""

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybridplan.adapters import spec_from_config
from hybridplan.errors import PlanError
from hybridplan.loader import load_path
from tests.helpers import one_line_error

pytestmark = pytest.mark.cli


@pytest.fixture
def nemotron_cfg(configs):
    return json.loads((configs / "nvidia__Nemotron-H-8B-Base-8K.from-python-dict.json").read_text())


def test_unknown_model(run_cli):
    one_line_error(*run_cli("size", "no-such-model"), "unknown model 'no-such-model'")


def test_missing_file(run_cli, tmp_path):
    one_line_error(*run_cli("size", tmp_path / "nope" / "config.json"), "no such file")


def test_folder_without_config(run_cli, tmp_path):
    one_line_error(*run_cli("size", tmp_path), "without a config.json")


def test_malformed_json(run_cli, tmp_path):
    p = tmp_path / "config.json"
    p.write_text('{"architectures": ["NemotronHForCausalLM",}')
    one_line_error(*run_cli("size", p), "not valid JSON at line 1")


def test_malformed_yaml(run_cli, tmp_path):
    p = tmp_path / "spec.yaml"
    p.write_text("name: x\nconfig: {a: [1, 2\n")
    one_line_error(*run_cli("size", p), "not valid YAML")


def test_yaml_is_loaded_safely(run_cli, tmp_path):
    p = tmp_path / "spec.yaml"
    p.write_text("config: !!python/object/apply:os.system ['echo pwned']\n")
    one_line_error(*run_cli("size", p), "not valid YAML")


def test_config_missing_a_needed_field(run_cli, tmp_path, nemotron_cfg):
    del nemotron_cfg["hidden_size"]
    p = tmp_path / "config.json"
    p.write_text(json.dumps(nemotron_cfg))
    one_line_error(*run_cli("size", p), "missing the needed field 'hidden_size'")


def test_unsupported_architecture(run_cli, tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}))
    one_line_error(*run_cli("size", p), "unsupported architecture 'GPT2LMHeadModel'")


@pytest.mark.parametrize(
    "args,needle",
    [
        (("--ctx", "0"), "--ctx must be a positive integer"),
        (("--ctx", "-5"), "--ctx must be a positive integer"),
        (("--ctx", "abc"), "--ctx"),
        (("--tp", "3"), "--tp 3 does not divide"),
        (("--tp", "0"), "--tp must be a positive integer"),
        (("--ssm-dtype", "fp64"), "unknown --ssm-dtype 'fp64'"),
        (("--kv-dtype", "int4"), "unknown --kv-dtype 'int4'"),
        (("--slots", "0"), "--slots must be a positive integer"),
        (("--vllm-version", "0.9"), "unknown vLLM version '0.9'"),
        (("--vllm-version", "0.40"), "newer than the newest modelled release"),
        (("--no-such-flag",), "no-such-flag"),
    ],
)
def test_bad_flags(run_cli, args, needle):
    one_line_error(*run_cli("size", "nemotron-h", *args), needle)


def test_crossover_of_a_transformer_is_refused(run_cli):
    one_line_error(*run_cli("crossover", "llama-3-8b"), "no recurrent layers")


def test_model_the_release_does_not_serve(run_cli, tmp_path):
    p = tmp_path / "config.json"
    p.write_text(
        json.dumps(
            {
                "architectures": ["BambaForCausalLM"],
                "num_hidden_layers": 2,
                "hidden_size": 4096,
                "num_attention_heads": 32,
                "attn_layer_indices": [1],
            }
        )
    )
    code, out, _ = run_cli("size", p, "--vllm-version", "0.23", "--json")
    assert code == 0 and json.loads(out)["layers"]["mamba2"] == 1
    # vLLM 0.24.0 lists it in _PREVIOUSLY_SUPPORTED_MODELS as "0.23.0" (vllm/model_executor/models/registry.py)
    one_line_error(
        *run_cli("size", p, "--vllm-version", "0.33"),
        "refuses BambaForCausalLM",
        "was supported in vLLM until v0.23.0",
        "try --vllm-version 0.23.0",
    )


# --- property test: mutated real configs either load or fail with one PlanError -----------------------

#: examples per run; FUZZ_EXAMPLES=5000 for a longer hunt
FUZZ_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "300"))

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 1 << 20) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


@pytest.fixture(scope="module")
def real_configs():
    from tests.conftest import CONFIGS

    return [json.loads(p.read_text()) for p in sorted(CONFIGS.glob("*.json"))]


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_configs_load_or_fail_cleanly(real_configs, data):
    cfg = dict(data.draw(st.sampled_from(real_configs)))
    target = cfg
    if isinstance(cfg.get("text_config"), dict) and data.draw(st.booleans()):
        target = cfg["text_config"] = dict(cfg["text_config"])
    for _ in range(data.draw(st.integers(1, 4))):
        key = data.draw(st.sampled_from(sorted(target)))
        if data.draw(st.booleans()):
            del target[key]
        else:
            target[key] = data.draw(_json_values)
        if not target:
            break
    try:
        spec = spec_from_config(cfg, name="mutant")
    except PlanError as exc:
        assert "\n" not in str(exc)
        return
    from hybridplan.scenario import DtypeChoice
    from hybridplan.weights import weights
    from tests.helpers import footprint

    for tp in (1, 2):
        try:
            fp = footprint(spec, tp=tp, dtypes=DtypeChoice())
        except PlanError:
            continue
        assert fp.state_bytes >= 0 and fp.kv_bytes_per_token >= 0
        # the weights read more of the config than the caches do (experts, MTP layers, vision tower)
        try:
            w = weights(spec, tp, "bfloat16")
        except PlanError:
            continue
        assert w.params > 0 and w.bytes > 0


def test_non_object_config(tmp_path):
    p = tmp_path / "config.json"
    p.write_text("[1, 2, 3]")
    with pytest.raises(PlanError, match="JSON object"):
        load_path(p)


# --- property test: any mix of flag values answers, refuses in one line, or says it will not start -----------

#: plausible and broken values per flag (the engines' own and hybridplan's spellings, out-of-range numbers)
_FLAGS = {
    "--ctx": ["0", "-1", "1", "8k", "128K", "1e9", "abc", "2.5k", "1048576"],
    "--tp": ["0", "1", "2", "3", "1024", "x"],
    "--pp": ["0", "1", "2", "3"],
    "--dp": ["0", "1", "2"],
    "--kv-budget": ["0", "1B", "40GiB", "1e30", "abc", "-5GiB"],
    "--gpu-mem": ["0", "24GB", "80GiB", "1TB", "x"],
    "--gpu-type": ["h100", "rtx4090", "NVIDIA H200", "l20", "nope"],
    "--gpu-util": ["0", "0.5", "0.92", "1", "1.5", "x"],
    "--max-num-seqs": ["0", "1", "100000", "x"],
    "--max-running-requests": ["0", "1", "4096"],
    "--mem-fraction-static": ["0", "0.5", "1.2"],
    "--block-size": ["0", "1", "16", "17", "1024"],
    "--page-size": ["0", "1", "16", "63"],
    "--spec-tokens": ["0", "1", "7", "-1"],
    "--dtype": ["auto", "bf16", "float32", "fp8", "x"],
    "--kv-dtype": ["auto", "fp8", "fp8_e5m2", "nvfp4", "x"],
    "--ssm-dtype": ["auto", "fp32", "bf16", "fp8"],
    "--vllm-version": ["0.10.0", "0.15", "0.33", "9.9", "x"],
    "--sglang-version": ["0.5.2", "0.5.23", "1.0", "x"],
    "--mode": ["none", "align", "all", "x"],
    "--engine": ["vllm", "sglang", "both", "x"],
    "--weights": ["0", "1GiB", "500GiB"],
    "--params": ["0", "8e9", "-1"],
}
_FIT_ONLY = {
    "--kv-budget",
    "--gpu-mem",
    "--gpu-type",
    "--gpu-util",
    "--max-num-seqs",
    "--max-running-requests",
    "--mem-fraction-static",
    "--weights",
    "--params",
}
_MODELS = [
    "nemotron-h",
    "lfm2",
    "qwen3-next",
    "jamba",
    "llama-3-8b",
    "mamba-130m",
    "minimax-m1",
    "kimi-linear",
    "granite-4.0-h",
    "zamba2",
    "qwen3.5",
]


@settings(
    max_examples=int(os.environ.get("FUZZ_FLAGS", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_any_flags_answer_or_refuse_in_one_line(run_cli, data):
    command = data.draw(st.sampled_from(["fit", "size"]))
    names = [f for f in _FLAGS if command == "fit" or f not in _FIT_ONLY]
    chosen = data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=5, unique=True))
    argv = [command, data.draw(st.sampled_from(_MODELS))]
    for flag in chosen:
        argv += [flag, data.draw(st.sampled_from(_FLAGS[flag]))]
    if command == "fit" and not _FIT_ONLY & set(chosen):
        argv += ["--kv-budget", "40GiB"]
    code, out, err = run_cli(*argv, "--json")
    assert "internal error" not in err, argv
    assert code in (0, 1, 2), argv
    if code == 2:
        assert out == "" and len(err.splitlines()) == 1 and err.startswith("hybridplan: error:"), (argv, err)
    else:
        json.loads(out)


# --- issue 28 item 6: one engine's refusal is that engine's verdict, the other engine still answers ---------


def test_one_engines_refusal_keeps_the_others_table(run_cli):
    # RTX 4090, --mem-fraction-static 0.667: SGLang's split R is 0.667·(total − CUDA context) − weights, 217 MiB
    # (the waterfall); from 0.5.17 the padding row is counted, K = ⌊(R·0.9/1.9 − per)/per⌋ with one Nemotron-H
    # state 97.41 MiB: ⌊(102.8 − 97.41) MiB / 97.41 MiB⌋ = 0, and SGLang stops with its RuntimeError (the same
    # line as tests/data/logs/sglang-0.5.17-qwen3.8-27b-fp8-mi355x-3.log). vLLM starts on that GPU all the same.
    argv = ("fit", "nemotron-h", "--ctx", "8192", "--gpu-type", "rtx-4090", "--mem-fraction-static", "0.667")
    code, out, err = run_cli(*argv)
    assert code == 1 and not err
    assert "GPU KV cache size:" in out  # vLLM's table is there
    assert "verdict: SGLang will not start; vLLM starts with these settings" in out
    assert "Not enough GPU memory for hybrid (mamba/linear-attention) state cache" in out
    assert "max_mamba_cache_size=0" in out
    code, js, _ = run_cli(*argv, "--json")
    d = json.loads(js)
    assert code == 1 and not d["ok"] and d["sglang"]["starts"] is False
    assert d["sglang"]["refused"].startswith("Not enough GPU memory") and d["vllm"]["modes"]
    # at 0.68 the split keeps one slot (⌊(247.5 − 97.41) / 97.41⌋ = 1), which admits no request of 5 slots: the
    # same verdict line, reached the other way
    code, out, _ = run_cli(*argv[:-1], "0.68")
    assert code == 1 and "verdict: SGLang will not start; vLLM starts with these settings" in out
    # asked alone, the refusal is SGLang's verdict (exit 1), not bad input
    code, out, err = run_cli(*argv, "--engine", "sglang")
    assert code == 1 and not err and "verdict: will not start" in out and "max_mamba_cache_size=0" in out


def test_both_engines_refusing_are_named(run_cli):
    # 0.01 GiB of KV: one Nemotron-H state slot is 97.41 MiB, so neither engine holds a request
    code, out, err = run_cli("fit", "nemotron-h", "--ctx", "8192", "--kv-budget", "0.01GiB")
    assert code == 1 and not err and "verdict: vLLM and SGLang will not start" in out
    assert "To serve at least one request with the model's max seq len (8192)" in out


def test_bad_input_for_both_engines_stays_exit_2(run_cli):
    # Nemotron-H-8B's 32 attention heads and 8 KV heads: --tp 3 divides neither, for either engine
    one_line_error(
        *run_cli("fit", "nemotron-h", "--ctx", "8192", "--gpu-type", "rtx-4090", "--tp", "3"), "--tp 3 does not divide"
    )


# --- issue 28 item 8: a trace that is not text, and a budget that holds no block --------------------------


def test_binary_trace_is_one_line(run_cli, tmp_path):
    p = tmp_path / "trace.jsonl"
    p.write_bytes(bytes(range(128, 256)) * 8)  # no newline, and 0x80 is no UTF-8 start byte
    one_line_error(*run_cli("replay", p, "--kv-budget", "40GiB"), f"{p}: line 1: not UTF-8 text")
    # the text reader decodes a chunk ahead: the line named is still the first that is not UTF-8
    good = '{"timestamp": 0, "input_length": 600, "output_length": 10, "hash_ids": [1, 2]}\n'
    p.write_bytes((good * 3).encode() + b"\xff\xfe\n" + good.encode())
    one_line_error(*run_cli("replay", p, "--kv-budget", "40GiB"), f"{p}: line 4: not UTF-8 text")
    y = tmp_path / "workload.yaml"
    y.write_bytes(b"users: 4\n\xff\n")
    one_line_error(*run_cli("replay", y, "--kv-budget", "40GiB"), "not a text file (not UTF-8)")


def test_replay_on_a_budget_without_one_block(run_cli):
    # 0.01 GiB of KV: one Nemotron-H request of 8,192 tokens needs one Mamba page and its attention blocks, over
    # 0.2 GiB; vLLM refuses to start in its own words (check_enough_kv_cache_memory, vllm 0.33.0
    # vllm/v1/core/kv_cache_planning.py), SGLang with its state-cache RuntimeError; asked alone, that is the answer
    trace = "tests/data/traces/mooncake-conversation-300.jsonl"
    code, out, err = run_cli("replay", trace, "nemotron-h", "--kv-budget", "0.01GiB", "--engine", "vllm")
    one_line_error(
        code,
        out,
        err,
        "vLLM 0.33.0 will not start in none mode",
        "To serve at least one request with the model's max seq len (8192)",
    )
    # both engines asked: each skipped with its refusal, the baseline and the ideal cache still replayed
    code, out, err = run_cli("replay", trace, "nemotron-h", "--kv-budget", "0.01GiB")
    assert code == 0 and "internal error" not in err
    assert 'vllm: skipped — vLLM 0.33.0 will not start in none mode: "To serve at least one request' in out
    assert 'sglang: skipped — SGLang 0.5.23 will not start: "Not enough GPU memory for hybrid' in out


def test_nemotron_h_without_its_pattern_names_the_pattern(run_cli, tmp_path, nemotron_cfg):
    # issue 28 item 16: vLLM builds Nemotron-H's layers from config.hybrid_override_pattern
    # (vllm/model_executor/models/nemotron_h.py, 0.33.0); the list form is the fallback, not the field to name
    del nemotron_cfg["hybrid_override_pattern"]
    p = tmp_path / "config.json"
    p.write_text(json.dumps(nemotron_cfg))
    one_line_error(*run_cli("size", p), "missing the needed field 'hybrid_override_pattern'")


# --- refusals a person meets on the command line ------------------------------------------------------------


@pytest.mark.skipif(not __import__("os").path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("argv", [("size", "nemotron-h"), ("size", "nemotron-h", "--json"), ("size", "--help")])
def test_output_that_cannot_be_written_is_one_line_and_exit_2(argv):
    # exit 1 means "will not start" (fit) or "mismatch" (check-log): a full disk is neither
    import subprocess
    import sys

    with open("/dev/full", "w") as full:
        p = subprocess.run(
            [sys.executable, "-m", "hybridplan", *argv], stdout=full, stderr=subprocess.PIPE, text=True, timeout=120
        )
    assert p.returncode == 2
    assert p.stderr == "hybridplan: error: cannot write the output: No space left on device\n"


def test_tp_zero_is_refused_before_anything_is_counted(run_cli):
    # `fit lfm2 --tp 0 --gpu-mem 80GB` used to answer "starts", and with --block-size 17 to divide by zero
    for extra in ((), ("--block-size", "17")):
        code, out, err = run_cli("fit", "lfm2", "--tp", "0", "--gpu-mem", "80GB", *extra)
        assert code == 2 and out == "" and err == "hybridplan: error: --tp must be a positive integer, got 0\n"


def test_a_model_against_itself_has_no_crossover(run_cli):
    one_line_error(*run_cli("crossover", "nemotron-h", "--vs", "nemotron-h-8b"), "against itself")
    # another size of the same family still has one
    code, _, _ = run_cli("crossover", "nemotron-h", "--vs", "nemotron-h-56b")
    assert code == 0


@pytest.mark.parametrize(
    "argv,hint",
    [
        (("size", "nemotorn-h"), "did you mean nemotron-h"),
        (("size", "qwen3.5-27"), "did you mean qwen3.5-27b"),
        (("fit", "nemotron-h", "--gpu-type", "h10"), "did you mean h100"),
        (("size", "nemotron-h", "--dtype", "bf17"), "did you mean bf16?"),
        (("size", "nemotron-h", "--ssm-dtype", "flaot32"), "did you mean float32?"),
        (("size", "nemotron-h", "--kv-dtype", "fp9"), "did you mean fp8"),
    ],
)
def test_a_near_miss_gets_a_suggestion(run_cli, argv, hint):
    one_line_error(*run_cli(*argv), hint)


def test_profile_without_a_gpu_names_interpret(run_cli, monkeypatch):
    import sys

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    code, _, err = run_cli("profile", "nemotron-h", "--gpu", "0")
    if "no CUDA GPU" in err:  # this machine: torch for the CPU
        assert code == 2 and "--interpret" in err
    # without the gpu extra
    monkeypatch.setitem(sys.modules, "torch", None)
    one_line_error(*run_cli("profile", "nemotron-h", "--gpu", "0"), "hybridplan[gpu]", "--interpret")


@pytest.mark.parametrize("bad", [[""], False, "0,1", [1.5]])
def test_qwen3_moe_mlp_only_layers_must_be_layer_indices(bad):
    # found by the fuzz test above: vLLM's Qwen3MoeDecoderLayer tests `layer_idx in config.mlp_only_layers`, which
    # a string of digits or a bool cannot answer as layers; hybridplan refuses it in one line, naming the field
    from tests.conftest import CONFIGS

    cfg = json.loads((CONFIGS / "Qwen__Qwen3-30B-A3B.json").read_text())
    cfg["mlp_only_layers"] = bad
    with pytest.raises(PlanError, match="'mlp_only_layers' must be a list of integers") as exc:
        spec_from_config(cfg, name="mutant")
    assert "\n" not in str(exc.value)
