"""What a person reads: at 80, 100 and 120 columns, and in a pipe, no table cuts a digit or a name, no line
is wider than the output (an engine's own log line is broken at spaces, a command continued with a backslash, never
inside a word), and no line ends in spaces. Help never cuts an option name and exits 0 into a closed pipe."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cli

DATA = Path(__file__).parent / "data"

COMMANDS = [
    ("size", "nemotron-h", "--ctx", "131072"),
    ("size", "nemotron-h", "--ctx", "8192", "--engine", "both", "--bytes"),
    ("size", "qwen3-next", "--tp", "4", "--engine", "both", "--vllm-version", "0.28"),
    ("size", "jamba", "--engine", "both"),
    ("fit", "nemotron-h", "--ctx", "8192", "--kv-budget", "40GiB"),
    ("fit", "nemotron-h", "--ctx", "131072", "--gpu-mem", "141GB", "--params", "8.1e9", "--max-num-seqs", "1024"),
    ("fit", "qwen3-next", "--tp", "4", "--ctx", "32k", "--kv-budget", "60GiB", "--vllm-version", "0.28"),
    ("crossover",),
    ("crossover", "jamba", "--vs", "llama-3.1-70b"),
    ("prefix", "nemotron-h", "--shared", "4000", "--private", "200", "--vllm-version", "0.28"),
    ("prefix", "nemotron-h", "--private", "200", "--sweep", "0:3000:250"),
    ("check-log", str(DATA / "vllm-0.23-nemotron-h.log")),
    ("check-log", str(DATA / "sglang-0.5.23-nemotron-h.log")),
    ("models",),
]


def _logs(d) -> set[str]:
    """Every engine log line a report carries (its "logs" lists), wherever they sit."""
    out: set[str] = set()
    if isinstance(d, dict):
        for k, v in d.items():
            if k == "logs" and isinstance(v, list):
                out.update(v)
            else:
                out |= _logs(v)
    elif isinstance(d, list):
        for v in d:
            out |= _logs(v)
    return out


@pytest.mark.parametrize("columns", [80, 100, 120])
@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_nothing_is_cut(run_cli, monkeypatch, argv, columns):
    monkeypatch.setenv("COLUMNS", str(columns))
    code, out, err = run_cli(*argv)
    assert code in (0, 1), err
    assert "…" not in out  # rich's mark of a cut cell
    for line in out.splitlines():
        assert line == line.rstrip(), f"trailing spaces: {line!r}"
        # wider only where one word is: nothing may be broken inside a word
        assert len(line) <= columns or " " not in line.strip(), f"{len(line)} > {columns}: {line!r}"


def test_the_figures_of_an_80_column_terminal_are_whole(run_cli, monkeypatch):
    # the cells that 80 columns used to cut: 97.41 MiB (size), 1,474,560 tokens (fit), every model name
    monkeypatch.setenv("COLUMNS", "80")
    _, out, _ = run_cli("size", "nemotron-h", "--ctx", "131072")
    assert "97.41 MiB" in out and "mamba2" in out
    _, out, _ = run_cli("fit", "nemotron-h", "--ctx", "8192", "--kv-budget", "40GiB")
    assert "1,474,560" in out and "793,993" in out
    code, out, _ = run_cli("models")
    _, js, _ = run_cli("models", "--json")
    for m in json.loads(js)["models"]:
        assert m["name"] in out and all(a in out for a in m["aliases"])


@pytest.mark.parametrize("argv", [("fit", "--help"), ("prefix", "--help"), ("size", "--help"), ("--help",)])
def test_help_at_80_columns_keeps_every_option_whole(run_cli, monkeypatch, argv):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run_cli(*argv)
    assert code == 0 and "…" not in out and "🅱" not in out
    if argv[0] == "fit":
        assert "--mamba-full-memory-ratio" in out and "--max-running-requests" in out
    if argv[0] == "prefix":
        assert "A:B:STEP" in out


def test_bare_command_prints_its_help_once(run_cli):
    code, out, err = run_cli()
    assert code == 0 and out.count("Usage:") == 1 and err == ""


def test_a_closed_pipe_exits_quietly():
    # `hybridplan … | head -1`: the reader goes away after one line; the writer exits 0 with nothing on stderr
    for argv in (["--help"], ["prefix", "nemotron-h", "--private", "10", "--sweep", "0:8000:4"]):
        p = subprocess.Popen(
            [sys.executable, "-m", "hybridplan", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        p.stdout.readline()
        p.stdout.close()
        assert p.wait(timeout=60) == 0
        assert p.stderr.read() == b""


# --- "Available KV cache memory" as each release prints it (issue 28, item 14) -----------------------------------

_AVAILABLE_LOGS = sorted(
    p
    for d in ("logs", "memlogs")
    for p in (DATA / d).glob("vllm-0.*.log")
    if "Available KV cache memory: " in p.read_text(errors="replace")
)


@pytest.mark.parametrize("log", _AVAILABLE_LOGS, ids=lambda p: p.name)
def test_available_kv_cache_memory_is_printed_as_the_logs_print_it(log):
    # vllm/v1/worker/gpu_worker.py prints "%.2f" up to 0.13.0 (0.11.x's 2.30 GiB in
    # vllm-0.11.1rc-kimi-linear-48b-a3b-2xrtx3090-1.log) and format_gib, str(round(GiB, 2)), from 0.14.0
    # (0.25.1's 35.2 GiB, 0.19.1's 40.0 GiB): every such line of every dated log, re-made from its own figure
    import re

    from hybridplan.engines.vllm.releases import release
    from hybridplan.engines.vllm.sizing import available_kv_memory_log

    rel = release(log.name.split("-")[1])
    lines = re.findall(r"Available KV cache memory: -?[\d.]+ GiB", log.read_text(errors="replace"))
    assert lines
    for line in lines:
        gib = float(line.split(": ")[1].split()[0])
        assert available_kv_memory_log(round(gib * (1 << 30)), rel) == line, (log.name, rel.version)


def test_two_decimals_before_0_14_one_where_round_drops_the_zero_after():
    from hybridplan.engines.vllm.releases import release
    from hybridplan.engines.vllm.sizing import available_kv_memory_log

    b = round(2.30 * (1 << 30))
    # the 2.30 GiB: "%.2f" in vllm 0.13.0's gpu_worker.py; format_gib's round() in 0.33.0's
    assert available_kv_memory_log(b, release("0.13.0")) == "Available KV cache memory: 2.30 GiB"
    assert available_kv_memory_log(b, release("0.33.0")) == "Available KV cache memory: 2.3 GiB"


# --- speed --engine both: each engine's benchmark, labelled (issue 28, item 13) ----------------------------------


def test_speed_under_both_engines_prints_both_benchmarks(run_cli):
    argv = ("speed", "nemotron-h", "--gpu-type", "h100", "--concurrency", "300")
    code, out, err = run_cli(*argv, "--engine", "both")
    assert code == 0, err
    assert "vLLM benchmark (vllm bench serve figures)" in out
    assert "SGLang benchmark (sglang.bench_serving figures)" in out
    _, js, _ = run_cli(*argv, "--engine", "both", "--json")
    both = json.loads(js)["benches"]
    assert [b["engine"] for b in both] == ["vllm", "sglang"]
    # each is the benchmark that engine alone gives: --engine both adds the other, it does not change either
    for b in both:
        _, one, _ = run_cli(*argv, "--engine", b["engine"], "--json")
        alone = json.loads(one)
        assert alone["benches"] == [alone["bench"]] and alone["bench"] == b
    # the two engines admit different numbers at once (vLLM's blocks, SGLang's max_running_requests), so the
    # figures differ: a second copy of one engine's table would not
    assert both[0]["running"] != both[1]["running"]


# --- what is copied off an 80-column terminal comes out whole (issue 28, item 11) --------------------------------


def _joined(lines: list[str]) -> str:
    """Continued lines as the shell reads them: a trailing backslash and the newline after it are one space."""
    return " ".join(line[:-2] if line.endswith(" \\") else line for line in lines)


def _command_block(out: str, label: str) -> list[str]:
    lines = out.splitlines()
    i = next(n for n, line in enumerate(lines) if line.startswith(label))
    block = [lines[i][len(label) :].strip()] if lines[i][len(label) :].strip() else []
    for line in lines[i + 1 :]:
        if not line.startswith("  "):
            break
        block.append(line)
    return block


@pytest.mark.parametrize(
    "argv",
    [
        # a model-card command with a speculative config (a quoted JSON value) and a long model name
        (
            "fit",
            "qwen3-next",
            "--tp",
            "4",
            "--ctx",
            "32k",
            "--kv-budget",
            "60GiB",
            "--vllm-version",
            "0.28",
            "--speculative-config",
            '{"method":"mtp","num_speculative_tokens":2}',
        ),
        ("fit", "nemotron-h", "--ctx", "131072", "--gpu-mem", "141GB", "--params", "8.1e9", "--max-num-seqs", "1024"),
        ("plan", "nemotron-h", "--ctx", "8192", "--concurrency", "16", "--gpu-type", "h100"),
    ],
)
def test_a_printed_command_is_whole_at_80_columns_and_pastes_back_word_for_word(run_cli, monkeypatch, argv):
    import shlex

    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = run_cli(*argv)
    assert code in (0, 1), err
    _, js, _ = run_cli(*argv, "--json")
    d = json.loads(js)
    commands = (
        {e: c for e, c in d["commands"].items() if c}
        if argv[0] == "fit"
        else {f"{i + 1}:": p["command"] for i, p in enumerate(d["plans"]) if p["command"]}
    )
    assert commands
    for name, c in commands.items():
        block = _command_block(out, f"{name} command:" if argv[0] == "fit" else name)
        assert all(len(line) <= 80 for line in block), block
        assert shlex.split(_joined(block)) == [*c["env"], *c["argv"]], block
    if argv[0] == "fit" and "--speculative-config" in argv:
        # the JSON value is on one line, whole, quoted as the shell wants it
        assert any("""'{"method":"mtp","num_speculative_tokens":2}'""" in line for line in out.splitlines())


_EXAMPLES = re.compile(r"^ +hybridplan .*$", re.MULTILINE)


@pytest.mark.parametrize(
    "command", ["size", "fit", "crossover", "prefix", "replay", "check-log", "speed", "plan", "profile"]
)
def test_help_examples_fit_80_columns_and_read_as_written(run_cli, monkeypatch, command):
    import shlex

    monkeypatch.setenv("COLUMNS", "1000")
    _, wide, _ = run_cli(command, "--help")
    monkeypatch.setenv("COLUMNS", "80")
    code, narrow, _ = run_cli(command, "--help")
    assert code == 0
    assert all(len(line) <= 80 for line in narrow.splitlines()), [x for x in narrow.splitlines() if len(x) > 80]
    written = [shlex.split(m) for m in _EXAMPLES.findall(wide)]
    lines = narrow.splitlines()
    shown, i = [], 0
    while i < len(lines):
        if lines[i].lstrip().startswith("hybridplan "):
            block = [lines[i]]
            while block[-1].endswith(" \\"):
                i += 1
                block.append(lines[i])
            shown.append(shlex.split(_joined(block)))
        i += 1
    assert written and shown == written


def test_an_engine_line_breaks_at_spaces_only():
    from hybridplan.output import wrap_words

    # SGLang 0.5.23's cap line, as tests/data/sglang-0.5.23-nemotron-h.log and the fit view print it
    line = (
        "max_running_requests is capped to 315 by the mamba state cache (max_mamba_cache_size=1578, 5 state "
        "slots per request). To raise it: increase --mamba-full-memory-ratio or --max-mamba-cache-size, or "
        "halve the state size with --mamba-ssm-dtype bfloat16."
    )
    lines = wrap_words(line, 80, "  ")
    assert len(lines) > 1 and all(len(x) <= 80 for x in lines)
    assert " ".join(x.strip() for x in lines).split() == line.split()
    # a word longer than the line stands alone and whole
    long = "x" * 90
    assert wrap_words(f"a {long} b", 80) == ["a", f"    {long}", "    b"]


def test_a_command_breaks_between_words_only():
    from hybridplan.output import words, wrap_command

    cmd = (
        "VLLM_USE_V1=1 vllm serve Qwen/Qwen3-Next-80B-A3B-Instruct --tensor-parallel-size 4 --speculative-config "
        '\'{"method": "mtp", "num_speculative_tokens": 2}\' --max-model-len=262144 --kv-cache-memory-bytes '
        "64424509440"
    )
    ws = words(cmd)
    assert " ".join(ws) == cmd and '\'{"method": "mtp", "num_speculative_tokens": 2}\'' in ws
    for cols in (40, 60, 80):
        lines = wrap_command(ws, cols)
        assert _joined(lines).split() == cmd.split()
        # a line holding more than one word fits; a quoted value longer than the line stands alone, whole
        assert all(len(x) <= cols for x in lines if len(words(x.removesuffix(" \\"))) > 1)
        assert all(x.endswith(" \\") for x in lines[:-1]) and not lines[-1].endswith("\\")


# --- headers, separators, articles and notes as a person reads them -----------------------------------------


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
    assert any(
        line.startswith("block: tokens per block;") and line.rstrip().endswith("running sequence)")
        for line in out.splitlines()
    )
    assert "…" not in out


def test_counts_have_thousands_separators(run_cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    # llama-3-8b at 131,072 tokens: 131,072 / 16-token blocks = 8,192 pages a layer, × 32 layers = 262,144 pages
    _, out, _ = run_cli("size", "llama-3-8b", "--ctx", "131072", "--engine", "vllm")
    assert "(262,144 pages)" in out and "262144" not in out
    # a request of 1M tokens pins over a thousand blocks: the figure is printed with its separator
    _, out, _ = run_cli("fit", "nemotron-h", "--ctx", "1048576", "--kv-budget", "400GiB", "--allow-long-context")
    _, js, _ = run_cli(
        "fit", "nemotron-h", "--ctx", "1048576", "--kv-budget", "400GiB", "--allow-long-context", "--json"
    )
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


@pytest.mark.parametrize(
    "engine,named,not_named",
    [
        ("sglang", "SGLang: CUDA context", "activation"),
        ("vllm", "vLLM: activation, non-torch and CUDA graphs", "CUDA context"),
    ],
)
def test_the_estimates_note_names_the_terms_estimated(run_cli, monkeypatch, engine, named, not_named):
    # the note used to name vLLM's three terms under --engine sglang, whose waterfall has none of them
    monkeypatch.setenv("COLUMNS", "200")
    _, js, _ = run_cli("fit", "nemotron-h", "--ctx", "8192", "--gpu-type", "h100", "--engine", engine, "--json")
    d = json.loads(js)
    note = next(n for n in d["notes"] if "estimated from real start-up logs" in n)
    assert named in note and not_named not in note
    assert d[engine]["memory"]["estimated"] and all(term in note for term in d[engine]["memory"]["estimated"])


@pytest.mark.parametrize(
    "word,art",
    [
        ("online_int4", "an"),
        ("fp8", "an"),
        ("awq", "an"),
        ("nvfp4", "an"),
        ("gptq", "a"),
        ("bitsandbytes", "a"),
        ("modelopt", "a"),
        ("8,192", "an"),
        ("11,000", "an"),
        ("1,024", "a"),
        ("110,000", "a"),
    ],
)
def test_the_article_before_a_word_as_it_is_read(word, art):
    from hybridplan.units import article

    assert article(word) == art


def test_check_log_says_an_online_int4_checkpoint(run_cli):
    # the LFM2.5 log ran --quantization online_int4 (its own header, tests/data/logs/SOURCES.md)
    from pathlib import Path

    log = Path(__file__).parent / "data" / "logs" / "vllm-0.26.0-lfm2.5-1.2b-sm90-1.log"
    _, js, err = run_cli("check-log", log, "--model", "lfm2-1.2b", "--json")
    assert "an online_int4 checkpoint" in js and "a online_int4" not in js, err


@pytest.mark.parametrize(
    "argv,figure",
    [
        (("size", "nemotron-h", "--ctx", "8192"), lambda d: d["state"]["bytes_per_sequence"]),
        (("crossover",), lambda d: d["rows"][0]["state_bytes"]),
        (("fit", "nemotron-h", "--ctx", "8192", "--gpu-type", "h100"), lambda d: d["vllm"]["memory"]["weights_bytes"]),
        (
            ("fit", "nemotron-h", "--ctx", "8192", "--gpu-type", "h100", "--engine", "sglang"),
            lambda d: d["sglang"]["memory"]["requested_bytes"],
        ),
        (("gpus",), lambda d: d["gpus"][0]["total_bytes"]),
    ],
)
def test_bytes_works_wherever_sizes_print(run_cli, monkeypatch, argv, figure):
    monkeypatch.setenv("COLUMNS", "200")
    _, js, _ = run_cli(*argv, "--json")
    n = figure(json.loads(js))
    _, plain, _ = run_cli(*argv)
    code, out, err = run_cli(*argv, "--bytes")
    assert code in (0, 1), err
    assert f"({n:,} B)" in out and f"({n:,} B)" not in plain


#: the help examples that need what a user brings: their own config, trace, log or calibration file, or a GPU
_NEEDS_A_USER_FILE = (
    "./Zamba2-7B/config.json",
    "chat.yaml",
    "vllm.log",
    "sglang.log",
    "excerpt.log",
    "h100-nemotron-h.json",
    "--gpu 0",
    "--gpu 1",
)


@pytest.mark.parametrize(
    "command", ["size", "fit", "crossover", "prefix", "replay", "check-log", "speed", "plan", "profile"]
)
def test_help_examples_run(run_cli, monkeypatch, tmp_path, command):
    # every example a help shows runs as written (less a shell redirect; the files it writes go to a scratch
    # folder),
    # where it needs nothing the user brings
    import shlex

    monkeypatch.setenv("COLUMNS", "1000")
    monkeypatch.chdir(tmp_path)
    _, wide, _ = run_cli(command, "--help")
    ran = 0
    for line in _EXAMPLES.findall(wide):
        if any(f in line for f in _NEEDS_A_USER_FILE):
            continue
        words = shlex.split(line.split(" > ")[0])[1:]
        words = [str(Path(__file__).parents[1] / w) if w.startswith("tests/data/") else w for w in words]
        code, out, err = run_cli(*words)
        # exit 1 is fit's verdict that an engine does not start (the example that shows one), never an error
        assert code in (0, 1) and "error" not in err, (line, err)
        assert out.strip() or list(tmp_path.iterdir()), line
        ran += 1
    assert ran or command in ("check-log",)
