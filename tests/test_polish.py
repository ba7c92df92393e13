"""The small things a person reads (issue 17): headers on one line where the output is wide enough, every
column of `models` at 120 columns, a pipe laid out unwrapped, thousands separators, no Mamba cache mode for a
model without Mamba layers, SGLang's fraction as SGLang prints it, and notes that name what they mean."""

import json

import pytest


def test_headers_stay_on_one_line_at_120_columns(run_cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    _, out, _ = run_cli("size", "nemotron-h", "--ctx", "8192", "--engine", "vllm")
    # the KV table's header "per token · layer" and the pages table's "state / request" used to fold into
    # three or four lines even though the table was far narrower than 120 columns
    assert any("per token · layer" in line for line in out.splitlines())
    assert any("state / request" in line and "KV / request" in line for line in out.splitlines())


def test_headers_fold_only_where_the_output_is_narrow(run_cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    _, out, _ = run_cli("size", "nemotron-h", "--ctx", "8192")
    assert all(len(line) <= 80 for line in out.splitlines())
    assert "97.41 MiB" in out


def test_models_keeps_family_and_layers_at_120_columns(run_cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    _, out, _ = run_cli("models")
    _, js, _ = run_cli("models", "--json")
    header = next(line for line in out.splitlines() if "aliases" in line)
    assert "family" in header and "layers" in header
    assert all(len(line) <= 120 for line in out.splitlines())
    for m in json.loads(js)["models"]:
        assert m["name"] in out and m["family"] in out and (m["source"] or "") in out


def test_a_pipe_gets_the_whole_width(run_cli, monkeypatch):
    # no COLUMNS and stdout not a terminal (capsys): nothing wraps, so every column is there and a caption or a
    # note greps on one line (rich alone would lay a pipe out at 80 columns)
    monkeypatch.delenv("COLUMNS", raising=False)
    _, out, _ = run_cli("models")
    header = next(line for line in out.splitlines() if "aliases" in line)
    assert "family" in header and "layers" in header
    _, out, _ = run_cli("fit", "nemotron-h", "--ctx", "8192", "--kv-budget", "40GiB")
    assert any(line.startswith("block: tokens per block;") and line.rstrip().endswith("running sequence)")
               for line in out.splitlines())
    assert "…" not in out


def test_counts_have_thousands_separators(run_cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    # llama-3-8b at 131,072 tokens: 131,072 / 16-token blocks = 8,192 pages a layer, × 32 layers = 262,144 pages
    _, out, _ = run_cli("size", "llama-3-8b", "--ctx", "131072", "--engine", "vllm")
    assert "(262,144 pages)" in out and "262144" not in out
    # a request of 1M tokens pins over a thousand blocks: the figure is printed with its separator
    _, out, _ = run_cli("fit", "nemotron-h", "--ctx", "1048576", "--kv-budget", "400GiB", "--allow-long-context")
    _, js, _ = run_cli("fit", "nemotron-h", "--ctx", "1048576", "--kv-budget", "400GiB", "--allow-long-context",
                       "--json")
    per_request = json.loads(js)["vllm"]["modes"]["none"]["blocks_per_request"]
    assert per_request >= 1000 and f"{per_request:,}" in out and f" {per_request} " not in out


def test_an_attention_only_model_has_no_mamba_cache_mode(run_cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    _, out, _ = run_cli("size", "llama-3-8b", "--ctx", "8192", "--engine", "vllm")
    assert "no Mamba cache mode" in out
    assert "align" not in out and "mamba page" not in out
    _, out, _ = run_cli("fit", "llama-3-8b", "--ctx", "8192", "--kv-budget", "20GiB", "--engine", "vllm")
    assert "attention only" in out and "align" not in out
    # a hybrid keeps its modes
    _, out, _ = run_cli("size", "nemotron-h", "--ctx", "8192", "--engine", "vllm")
    assert "align" in out and "no Mamba cache mode" not in out


def test_mem_fraction_static_as_sglang_prints_it(run_cli, monkeypatch):
    # SGLang logs its ServerArgs dataclass, whose repr writes the float whole (server_args.py); a multimodal
    # model's fraction is round(…, 3) times the vision tower's factor (arg_groups/memory_hook.py
    # adjust_mem_fraction_for_vlm in 0.5.23), which is not rounded again
    monkeypatch.setenv("COLUMNS", "160")
    argv = ("fit", "qwen3.5-27b", "--ctx", "8192", "--engine", "sglang", "--gpu-type", "h100")
    _, out, _ = run_cli(*argv)
    _, js, _ = run_cli(*argv, "--json")
    fraction = json.loads(js)["sglang"]["memory"]["utilization"]
    assert len(repr(fraction)) > 6  # the scaled fraction has more than 3 places
    assert f"mem_fraction_static {fraction!r} " in out


@pytest.mark.parametrize("engine,named,not_named", [
    ("sglang", "SGLang: CUDA context", "activation"),
    ("vllm", "vLLM: activation, non-torch and CUDA graphs", "CUDA context"),
])
def test_the_estimates_note_names_the_terms_estimated(run_cli, monkeypatch, engine, named, not_named):
    # the note used to name vLLM's three terms under --engine sglang, whose waterfall has none of them
    monkeypatch.setenv("COLUMNS", "200")
    _, js, _ = run_cli("fit", "nemotron-h", "--ctx", "8192", "--gpu-type", "h100", "--engine", engine, "--json")
    d = json.loads(js)
    note = next(n for n in d["notes"] if "estimated from real start-up logs" in n)
    assert named in note and not_named not in note
    assert d[engine]["memory"]["estimated"] and all(term in note for term in d[engine]["memory"]["estimated"])


# --- errors a person meets ------------------------------------------------------------------------------------

@pytest.mark.skipif(not __import__("os").path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("argv", [("size", "nemotron-h"), ("size", "nemotron-h", "--json"), ("size", "--help")])
def test_output_that_cannot_be_written_is_one_line_and_exit_2(argv):
    # exit 1 means "will not start" (fit) or "mismatch" (check-log): a full disk is neither
    import subprocess
    import sys

    with open("/dev/full", "w") as full:
        p = subprocess.run([sys.executable, "-m", "hybridplan", *argv], stdout=full, stderr=subprocess.PIPE,
                           text=True, timeout=120)
    assert p.returncode == 2
    assert p.stderr == "hybridplan: error: cannot write the output: No space left on device\n"


def test_tp_zero_is_refused_before_anything_is_counted(run_cli):
    # `fit lfm2 --tp 0 --gpu-mem 80GB` used to answer "starts", and with --block-size 17 to divide by zero
    for extra in ((), ("--block-size", "17")):
        code, out, err = run_cli("fit", "lfm2", "--tp", "0", "--gpu-mem", "80GB", *extra)
        assert code == 2 and out == "" and err == "hybridplan: error: --tp must be a positive integer, got 0\n"


def test_a_model_against_itself_has_no_crossover(run_cli):
    code, out, err = run_cli("crossover", "nemotron-h", "--vs", "nemotron-h-8b")
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and "against itself" in err
    # another size of the same family still has one
    code, _, _ = run_cli("crossover", "nemotron-h", "--vs", "nemotron-h-56b")
    assert code == 0


# --- naming a model -----------------------------------------------------------------------------------------

def test_revision_main_of_a_shipped_hub_id_needs_no_network(run_cli, monkeypatch):
    # nvidia/Nemotron-H-8B-Base-8K is the source of the shipped nemotron-h-8b, which notes no revision of its own
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, js, err = run_cli("size", "nvidia/Nemotron-H-8B-Base-8K", "--revision", "main", "--json")
    assert code == 0, err
    assert json.loads(js)["model"] == "nemotron-h-8b"


@pytest.mark.parametrize("url", ["https://huggingface.co/nvidia/Nemotron-H-8B-Base-8K",
                                 "huggingface.co/nvidia/Nemotron-H-8B-Base-8K/tree/main",
                                 "https://hf.co/nvidia/Nemotron-H-8B-Base-8K/"])
def test_a_hub_address_is_read_as_its_id(run_cli, monkeypatch, url):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, js, err = run_cli("size", url, "--json")
    assert code == 0, err
    assert json.loads(js)["model"] == "nemotron-h-8b"


def test_a_hub_address_and_another_revision_disagree(run_cli):
    code, _, err = run_cli("size", "https://huggingface.co/nvidia/Nemotron-H-8B-Base-8K/tree/v1", "--revision", "v2")
    assert code == 2 and "names revision 'v1' but --revision says 'v2'" in err


@pytest.mark.parametrize("argv,hint", [
    (("size", "nemotorn-h"), "did you mean nemotron-h"),
    (("size", "qwen3.5-27"), "did you mean qwen3.5-27b"),
    (("fit", "nemotron-h", "--gpu-type", "h10"), "did you mean h100"),
    (("size", "nemotron-h", "--dtype", "bf17"), "did you mean bf16?"),
    (("size", "nemotron-h", "--ssm-dtype", "flaot32"), "did you mean float32?"),
    (("size", "nemotron-h", "--kv-dtype", "fp9"), "did you mean fp8"),
])
def test_a_near_miss_gets_a_suggestion(run_cli, argv, hint):
    code, out, err = run_cli(*argv)
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and hint in err


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


def test_the_8k_alias_names_the_specs_made_for_the_context(run_cli):
    code, js, _ = run_cli("size", "nemotron-h", "--ctx", "131072", "--json")
    notes = json.loads(js)["notes"]
    assert any("would not start" in n for n in notes)
    last = notes[-1]
    # nemotron-h is the 8K base model (max_position_embeddings 8192 in its config); Nemotron-Nano-9B-v2 takes
    # 131,072 tokens (its config's max_position_embeddings)
    assert "nvidia/Nemotron-H-8B-Base-8K, made for 8,192 tokens" in last and "nemotron-nano-9b-v2" in last


@pytest.mark.parametrize("word,art", [("online_int4", "an"), ("fp8", "an"), ("awq", "an"), ("nvfp4", "an"),
                                      ("gptq", "a"), ("bitsandbytes", "a"), ("modelopt", "a"),
                                      ("8,192", "an"), ("11,000", "an"), ("1,024", "a"), ("110,000", "a")])
def test_the_article_before_a_word_as_it_is_read(word, art):
    from hybridplan.units import article

    assert article(word) == art


def test_check_log_says_an_online_int4_checkpoint(run_cli):
    # the LFM2.5 log ran --quantization online_int4 (its own header, tests/data/logs/SOURCES.md)
    from pathlib import Path

    log = Path(__file__).parent / "data" / "logs" / "vllm-0.26.0-lfm2.5-1.2b-sm90-1.log"
    _, js, err = run_cli("check-log", log, "--model", "lfm2-1.2b", "--json")
    assert "an online_int4 checkpoint" in js and "a online_int4" not in js, err


def test_check_log_reads_standard_input():
    # `docker logs vllm 2>&1 | hybridplan check-log -`: the same report as from the file
    import subprocess
    import sys
    from pathlib import Path

    log = Path(__file__).parent / "data" / "vllm-0.23-nemotron-h.log"
    by_path = subprocess.run([sys.executable, "-m", "hybridplan", "check-log", str(log), "--json"],
                             capture_output=True, text=True, timeout=120)
    with open(log, "rb") as f:
        by_stdin = subprocess.run([sys.executable, "-m", "hybridplan", "check-log", "-", "--json"], stdin=f,
                                  capture_output=True, text=True, timeout=120)
    assert by_stdin.returncode == by_path.returncode == 0, by_stdin.stderr
    assert json.loads(by_stdin.stdout)["rows"] == json.loads(by_path.stdout)["rows"]


@pytest.mark.parametrize("argv,figure", [
    (("size", "nemotron-h", "--ctx", "8192"), lambda d: d["state"]["bytes_per_sequence"]),
    (("crossover",), lambda d: d["rows"][0]["state_bytes"]),
    (("fit", "nemotron-h", "--ctx", "8192", "--gpu-type", "h100"), lambda d: d["vllm"]["memory"]["weights_bytes"]),
    (("fit", "nemotron-h", "--ctx", "8192", "--gpu-type", "h100", "--engine", "sglang"),
     lambda d: d["sglang"]["memory"]["requested_bytes"]),
    (("gpus",), lambda d: d["gpus"][0]["total_bytes"]),
])
def test_bytes_works_wherever_sizes_print(run_cli, monkeypatch, argv, figure):
    monkeypatch.setenv("COLUMNS", "200")
    _, js, _ = run_cli(*argv, "--json")
    n = figure(json.loads(js))
    _, plain, _ = run_cli(*argv)
    code, out, err = run_cli(*argv, "--bytes")
    assert code in (0, 1), err
    assert f"({n:,} B)" in out and f"({n:,} B)" not in plain


def test_profile_without_a_gpu_names_interpret(run_cli, monkeypatch):
    import sys

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    code, _, err = run_cli("profile", "nemotron-h", "--gpu", "0")
    if "no CUDA GPU" in err:  # this machine: torch for the CPU
        assert code == 2 and "--interpret" in err
    # without the gpu extra
    monkeypatch.setitem(sys.modules, "torch", None)
    code, _, err = run_cli("profile", "nemotron-h", "--gpu", "0")
    assert code == 2 and "hybridplan[gpu]" in err and "--interpret" in err and len(err.splitlines()) == 1
