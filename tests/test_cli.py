"""The command line as a person types it: values read as the engines read them, bounded and named when they are
not, the engines' own flag names, help that says what it does, completion, and what a command says beside its
output. Each refusal is one line on stderr with exit code 2 (tests.helpers.one_line_error), or for an engine that
would not start, fit's verdict with exit code 1."""

import json

import pytest

from tests.helpers import one_line_error

pytestmark = pytest.mark.cli


# --- values as the engines read them, and their bounds ---------------------------------------------------


@pytest.mark.parametrize(
    "text,value",
    [("131072", 131072), ("128k", 128_000), ("128K", 131_072), ("25.6k", 25_600), ("1e9", 10**9), ("131,072", 131_072)],
)
def test_ctx_as_vllms_max_model_len_reads_it(run_cli, text, value):
    # vllm/utils/argparse_utils.py human_readable_int: k = 10^3, K = 2^10, decimals with decimal suffixes only;
    # a whole 1e9 and thousands separators as a person types them
    code, out, err = run_cli("size", "mamba-2.8b", "--ctx", text, "--json")
    assert code == 0, err
    assert json.loads(out)["ctx"] == value


@pytest.mark.parametrize(
    "argv,needle",
    [
        (("size", "nemotron-h", "--ctx", "99999999999999999999"), "at most 1,073,741,824"),
        (("size", "nemotron-h", "--ctx", "2.5K"), "no decimals with a binary suffix"),
        (("size", "nemotron-h", "--ctx", "abc"), "cannot read 'abc'"),
        (
            ("fit", "nemotron-h", "--gpu-mem", "80GB", "--params", "8e9", "--gpu-util", "1.5"),
            "--gpu-util must be (0, 1]",
        ),
        (("fit", "nemotron-h", "--gpu-mem", "80GB", "--params", "8e9", "--gpu-util", "0"), "--gpu-util must be (0, 1]"),
        (
            ("fit", "nemotron-h", "--gpu-mem", "80GB", "--params", "8e9", "--mem-fraction-static", "2"),
            "--mem-fraction-static must be (0, 1]",
        ),
        (
            ("fit", "nemotron-h", "--kv-budget", "40GiB", "--mamba-full-memory-ratio", "-1"),
            "--mamba-full-memory-ratio must be (0, 1000]",
        ),
        (("fit", "nemotron-h", "--gpu-mem", "99999TB", "--params", "8e9"), "beyond any GPU"),
        (("fit", "nemotron-h", "--gpu-mem", "80GB", "--params", "1e20"), "--params must be (0, 1e+14]"),
        (("fit", "nemotron-h", "--kv-budget", "40GiB", "--max-num-seqs", "99999999999"), "at most 2,147,483,647"),
        (("size", "nemotron-h", "--slots", "1e12"), "at most 2,147,483,647"),
        (("size", "nemotron-h", "--dtype", "float8"), "unknown --dtype 'float8'"),
        (("size", "nemotron-h", "--ssm-dtype", "fp8"), "unknown --ssm-dtype 'fp8'"),
        (("size", "nemotron-h", "--conv-dtype", "fp8"), "unknown --conv-dtype 'fp8'"),
        (("size", "nemotron-h", "--kv-dtype", "nvfp4"), "not sized by hybridplan"),
        (
            ("fit", "nemotron-h", "--kv-budget", "40GiB", "--engine", "sglang", "--kv-dtype", "float16"),
            "SGLang 0.5.23 --kv-cache-dtype takes",
        ),
        (("crossover", "--plot", "y.txt"), "name a file ending in .png"),
        (("crossover", "--plot", "x"), "name a file ending in .png"),
        (("prefix", "nemotron-h", "--sweep", "0:100:10", "--plot", "y.csv"), "name a file ending in .png"),
    ],
)
def test_values_are_bounded_and_named(run_cli, argv, needle):
    one_line_error(*run_cli(*argv), needle)


def test_dtype_names_the_engine_flags_take(run_cli):
    # vLLM --dtype takes half and float (vllm/config/model.py ModelDType); --mamba-ssm-cache-dtype float16
    for argv in (
        ("--dtype", "half"),
        ("--dtype", "float"),
        ("--ssm-dtype", "float16"),
        ("--kv-dtype", "fp8_e5m2"),
        ("--ssm-dtype", "auto"),
    ):
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
    one_line_error(*run_cli("profile", "--interpret", "--slots", "70000"), "--slots 70,000", "65,535")


@pytest.mark.parametrize(
    "argv",
    [
        ("prefix", "qwen3-next", "--shared", "99999999999999999999", "--json"),
        ("prefix", "nemotron-h", "--private", "8192", "--shared", "99999999999999999999"),
        ("prefix", "llama-3-8b", "--sweep", "0:6000:250", "--private", "99999999999999999999", "--json"),
        ("prefix", "llama-3-8b", "--shared", "1000000000", "--allow-long-context", "--json"),
        ("prefix", "llama-3-8b", "--sweep", "0:6000:2", "--private", "100"),
        ("prefix", "llama-3.1-70b", "--sweep", "0:130000:100", "--private", "100", "--json"),
    ],
)
def test_absurd_prefix_sizes_are_refused_quickly(run_cli, argv):
    # before, these ran out of time (30 s) or memory; now one line, exit 2 (timings: benchmarks/, not here)
    code, out, err = run_cli(*argv)
    one_line_error(code, out, err)


def test_a_prompt_longer_than_the_engine_takes_skips_that_engine(run_cli):
    # Mamba-2.8B names no length: vLLM takes the prompt, SGLang (2048 assumed) does not
    code, out, _ = run_cli("prefix", "mamba-2.8b", "--shared", "3000", "--private", "10", "--json")
    d = json.loads(out)
    assert code == 0 and "vllm" in d and "SGLang takes no 3,010-token prompt" in d["skipped"]["sglang"]


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
        env = {
            **os.environ,
            "_HYBRIDPLAN_COMPLETE": "complete_bash",
            "COMP_WORDS": words,
            "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1)),
        }
        out = subprocess.run([sys.executable, "-m", "hybridplan"], env=env, capture_output=True, text=True).stdout
        return out.split()

    assert complete("hybridplan fit --engine ") == ["vllm", "sglang", "both"]
    assert set(complete("hybridplan size --mode a")) == {"align", "all"}
    assert "bfloat16" in complete("hybridplan size --kv-dtype ") and "fp8" in complete("hybridplan size --kv-dtype ")
    assert "0.33.0" in complete("hybridplan size --vllm-version 0.3")
    assert "nemotron-h" in complete("hybridplan size nemo")


# --- what the help promises, and the engines' flag names -------------------------------------------------


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


def test_an_attention_free_model_shows_no_kv_pool(run_cli):
    code, out, _ = run_cli("fit", "mamba-130m", "--gpu-type", "h100", "--engine", "sglang")
    row = next(line for line in out.splitlines() if line.startswith("KV pool") or line.startswith("  KV pool"))
    assert "none" in row and "GiB" not in row


def test_prefix_refuses_shared_with_a_sweep(run_cli):
    one_line_error(*run_cli("prefix", "nemotron-h", "--shared", "4000", "--sweep", "0:6000:100"), "not both")


def test_help_says_what_ctx_defaults_to_and_names_log_plainly(run_cli):
    import re

    code, out, _ = run_cli("fit", "--help")
    assert code == 0 and "default: the model's maximum" in re.sub(r"\s+", " ", out)
    code, out, _ = run_cli("check-log", "--help")
    assert code == 0 and "Usage: hybridplan check-log [OPTIONS] LOG" in out and "{LOG}" not in out


@pytest.mark.parametrize(
    "flag",
    [
        "--tensor-parallel-size",
        "--gpu-memory-utilization",
        "--max-model-len",
        "--kv-cache-dtype",
        "--enable-prefix-caching",
        "--context-length",
        "--tp-size",
    ],
)
def test_the_engines_flag_names_are_taken(run_cli, flag):
    # issue 17: these were refused, --tensor-parallel-size with a hint of --page-size
    value = {
        "--tensor-parallel-size": "2",
        "--gpu-memory-utilization": "0.85",
        "--max-model-len": "4096",
        "--kv-cache-dtype": "fp8_e4m3",
        "--context-length": "4096",
        "--tp-size": "2",
    }.get(flag)
    ctx = () if flag in ("--max-model-len", "--context-length") else ("--ctx", "4096")
    code, out, err = run_cli(
        "fit", "nemotron-h", "--gpu-type", "h100", *ctx, "--json", flag, *([value] if value else [])
    )
    assert code in (0, 1), err
    # the same value through hybridplan's own option
    own = {
        "--tensor-parallel-size": "--tp",
        "--gpu-memory-utilization": "--gpu-util",
        "--max-model-len": "--ctx",
        "--kv-cache-dtype": "--kv-dtype",
        "--context-length": "--ctx",
        "--tp-size": "--tp",
    }.get(flag)
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


# --- the model and release a command takes, and check-log on standard input --------------------------------


def test_a_model_the_newest_release_dropped_is_sized_under_the_last_that_serves_it(run_cli):
    # vLLM removed MiniMaxM1ForCausalLM after 0.23.0 (_PREVIOUSLY_SUPPORTED_MODELS, vllm/model_executor/models/
    # registry.py): with no --vllm-version, size takes 0.23.0's rules and says so
    code, js, err = run_cli("size", "minimax-m1", "--ctx", "8192", "--json")
    assert code == 0, err
    d = json.loads(js)
    assert d["vllm_version"] == "0.23.0" and any("newest release that serves it" in n for n in d["notes"])
    # a release named on the command line is kept, and refuses as vLLM does
    code, _, err = run_cli("size", "minimax-m1", "--vllm-version", "0.33")
    assert code == 2 and "try --vllm-version 0.23.0" in err


def test_check_log_reads_standard_input():
    # `docker logs vllm 2>&1 | hybridplan check-log -`: the same report as from the file
    import subprocess
    import sys
    from pathlib import Path

    log = Path(__file__).parent / "data" / "vllm-0.23-nemotron-h.log"
    by_path = subprocess.run(
        [sys.executable, "-m", "hybridplan", "check-log", str(log), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    with open(log, "rb") as f:
        by_stdin = subprocess.run(
            [sys.executable, "-m", "hybridplan", "check-log", "-", "--json"],
            stdin=f,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert by_stdin.returncode == by_path.returncode == 0, by_stdin.stderr
    assert json.loads(by_stdin.stdout)["rows"] == json.loads(by_path.stdout)["rows"]


def test_the_default_model_is_said(run_cli):
    # issue 28 item 17: MODEL left out sizes nemotron-h; the note says so on stderr, beside the output
    code, out, err = run_cli("fit", "--kv-budget", "40GiB", "--json")
    assert code == 0 and json.loads(out)["model"] == "nemotron-h-8b"
    assert err == "hybridplan: note: no MODEL given: the default, nemotron-h (nvidia/Nemotron-H-8B-Base-8K)\n"
    # typed, even as the default's own name, or taken from a pasted engine command: nothing to say
    assert run_cli("fit", "nemotron-h", "--kv-budget", "40GiB")[2] == ""
    code, _, err = run_cli("fit", "--gpu-type", "h100", "--", "vllm", "serve", "nvidia/Nemotron-H-8B-Base-8K")
    assert code == 0 and "no MODEL given" not in err
    # bad input stays one line
    one_line_error(*run_cli("fit", "--ctx", "0"), "--ctx must be a positive integer")
