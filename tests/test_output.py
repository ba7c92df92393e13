"""What a person reads: at 80, 100 and 120 columns, and in a pipe, no table cuts a digit or a name, no line
is wider than the output (an engine's own log line is broken at spaces, a command continued with a backslash, never
inside a word), and no line ends in spaces. Help never cuts an option name and exits 0 into a closed pipe."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

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
        p = subprocess.Popen([sys.executable, "-m", "hybridplan", *argv], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        p.stdout.readline()
        p.stdout.close()
        assert p.wait(timeout=60) == 0
        assert p.stderr.read() == b""


# --- "Available KV cache memory" as each release prints it (issue 28, item 14) -----------------------------------

_AVAILABLE_LOGS = sorted(p for d in ("logs", "memlogs") for p in (DATA / d).glob("vllm-0.*.log")
                         if "Available KV cache memory: " in p.read_text(errors="replace"))


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
    block = [lines[i][len(label):].strip()] if lines[i][len(label):].strip() else []
    for line in lines[i + 1:]:
        if not line.startswith("  "):
            break
        block.append(line)
    return block


@pytest.mark.parametrize("argv", [
    # a model-card command with a speculative config (a quoted JSON value) and a long model name
    ("fit", "qwen3-next", "--tp", "4", "--ctx", "32k", "--kv-budget", "60GiB", "--vllm-version", "0.28",
     "--speculative-config", '{"method":"mtp","num_speculative_tokens":2}'),
    ("fit", "nemotron-h", "--ctx", "131072", "--gpu-mem", "141GB", "--params", "8.1e9", "--max-num-seqs", "1024"),
    ("plan", "nemotron-h", "--ctx", "8192", "--concurrency", "16", "--gpu-type", "h100"),
])
def test_a_printed_command_is_whole_at_80_columns_and_pastes_back_word_for_word(run_cli, monkeypatch, argv):
    import shlex

    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = run_cli(*argv)
    assert code in (0, 1), err
    _, js, _ = run_cli(*argv, "--json")
    d = json.loads(js)
    commands = ({e: c for e, c in d["commands"].items() if c} if argv[0] == "fit" else
                {f"{i + 1}:": p["command"] for i, p in enumerate(d["plans"]) if p["command"]})
    assert commands
    for name, c in commands.items():
        block = _command_block(out, f"{name} command:" if argv[0] == "fit" else name)
        assert all(len(line) <= 80 for line in block), block
        assert shlex.split(_joined(block)) == [*c["env"], *c["argv"]], block
    if argv[0] == "fit" and "--speculative-config" in argv:
        # the JSON value is on one line, whole, quoted as the shell wants it
        assert any("""'{"method":"mtp","num_speculative_tokens":2}'""" in line for line in out.splitlines())


_EXAMPLES = re.compile(r"^ +hybridplan .*$", re.MULTILINE)


@pytest.mark.parametrize("command", ["size", "fit", "crossover", "prefix", "replay", "check-log", "speed", "plan",
                                     "profile"])
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
    line = ("max_running_requests is capped to 315 by the mamba state cache (max_mamba_cache_size=1578, 5 state "
            "slots per request). To raise it: increase --mamba-full-memory-ratio or --max-mamba-cache-size, or "
            "halve the state size with --mamba-ssm-dtype bfloat16.")
    lines = wrap_words(line, 80, "  ")
    assert len(lines) > 1 and all(len(x) <= 80 for x in lines)
    assert " ".join(x.strip() for x in lines).split() == line.split()
    # a word longer than the line stands alone and whole
    long = "x" * 90
    assert wrap_words(f"a {long} b", 80) == ["a", f"    {long}", "    b"]


def test_a_command_breaks_between_words_only():
    from hybridplan.output import words, wrap_command

    cmd = ("VLLM_USE_V1=1 vllm serve Qwen/Qwen3-Next-80B-A3B-Instruct --tensor-parallel-size 4 --speculative-config "
           "'{\"method\": \"mtp\", \"num_speculative_tokens\": 2}' --max-model-len=262144 --kv-cache-memory-bytes "
           "64424509440")
    ws = words(cmd)
    assert " ".join(ws) == cmd and "'{\"method\": \"mtp\", \"num_speculative_tokens\": 2}'" in ws
    for cols in (40, 60, 80):
        lines = wrap_command(ws, cols)
        assert _joined(lines).split() == cmd.split()
        # a line holding more than one word fits; a quoted value longer than the line stands alone, whole
        assert all(len(x) <= cols for x in lines if len(words(x.removesuffix(" \\"))) > 1)
        assert all(x.endswith(" \\") for x in lines[:-1]) and not lines[-1].endswith("\\")
