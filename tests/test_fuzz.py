"""Every input reader under hypothesis (issue 28 item 8): traces (Mooncake, token ids, synthetic YAML), pasted
engine command lines, and `speed`'s and `plan`'s options. Whatever comes in, the answer is a result, a "will not
start" (exit 1), or one line on stderr with exit 2: never an internal error, never a traceback.

The commands run in-process (cli.main) and the Hub is kept offline, so a run takes seconds; FUZZ_SCALE=20 runs
twenty times the examples for a longer hunt."""

from __future__ import annotations

import json
import os
from itertools import islice

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybridplan.errors import PlanError
from hybridplan.replay import trace as tr

pytestmark = pytest.mark.cli

SCALE = int(os.environ.get("FUZZ_SCALE", "1"))


def fuzz(examples: int):
    return settings(
        max_examples=examples * SCALE,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


@pytest.fixture
def cli(run_cli, monkeypatch):
    """run_cli with the Hub offline (a fuzzed token never becomes a download), answering as bad input must."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def run(*argv: str, json_out: bool = False) -> int:
        code, out, err = run_cli(*argv)
        assert "internal error" not in err and "Traceback" not in err, (argv, err)
        assert code in (0, 1, 2), (argv, code, err)
        if code == 2:
            assert out == "", (argv, out)
            assert len(err.splitlines()) == 1 and err.startswith("hybridplan: error:"), (argv, err)
        elif json_out:
            json.loads(out)
        return code

    return run


# --- values ------------------------------------------------------------------------------------------------

#: JSON values of every kind, the edges of the integers the readers bound among them
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-3, 3000)
    | st.sampled_from([0, 511, 512, 513, 1 << 24, 1 << 63])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=6)
)
_json = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
#: command-line words that are neither a path nor a Hub id (no '/', no '.' alone), so nothing is read or fetched
_word = st.text(alphabet="abcxyzABC0123456789-_=:,{}[]\"' ", min_size=0, max_size=8).filter(
    lambda w: w not in (".", "..") and not w.startswith("~")
)


@st.composite
def mooncake_line(draw) -> dict:
    n = draw(st.integers(1, 3000))
    obj: dict = {
        "timestamp": draw(st.integers(0, 10**6)),
        "input_length": n,
        "output_length": draw(st.integers(0, 300)),
        "hash_ids": draw(st.lists(st.integers(0, 50), min_size=-(-n // 512), max_size=-(-n // 512))),
    }
    for _ in range(draw(st.integers(0, 2))):
        key = draw(st.sampled_from([*obj, "extra"]))
        if draw(st.booleans()):
            obj.pop(key, None)
        else:
            obj[key] = draw(_json)
    return obj


@st.composite
def token_line(draw) -> dict:
    obj: dict = {
        "prompt_token_ids": draw(st.lists(st.integers(0, 50_000), min_size=1, max_size=40)),
        "output_len": draw(st.integers(0, 64)),
    }
    if draw(st.booleans()):
        obj["arrival"] = draw(st.floats(0, 100))
    for _ in range(draw(st.integers(0, 2))):
        key = draw(st.sampled_from([*obj, "arrival", "hash_ids"]))
        if draw(st.booleans()):
            obj.pop(key, None)
        else:
            obj[key] = draw(_json)
    return obj


def _dump(obj) -> str:
    return json.dumps(obj)  # NaN and Infinity as Python writes them: json reads them, strict JSON (msgspec) does not


@st.composite
def jsonl(draw, line) -> bytes:
    """A few lines of records, with now and then a line that is no record: text, a JSON non-object, raw bytes."""
    parts: list[bytes] = []
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["record"] * 6 + ["text", "json", "bytes", "blank"]))
        if kind == "record":
            parts.append(_dump(draw(line)).encode())
        elif kind == "text":
            parts.append(draw(st.text(max_size=20)).encode("utf-8", "surrogatepass"))
        elif kind == "json":
            parts.append(_dump(draw(_json)).encode())
        elif kind == "bytes":
            parts.append(draw(st.binary(max_size=20)))
        else:
            parts.append(b"   ")
    return b"\n".join(parts) + draw(st.sampled_from([b"", b"\n", b"\r\n"]))


_SYNTH_FIELDS = sorted(tr._SYNTH_KEYS) + ["private_extra", "name"]


@st.composite
def synthetic_yaml(draw) -> bytes:
    if draw(st.integers(0, 9)) == 0:  # not YAML of a mapping at all
        return draw(st.binary(max_size=40) | st.text(max_size=40).map(lambda t: t.encode("utf-8", "surrogatepass")))
    fields = {
        "shared": draw(st.integers(0, 2000)),
        "users": draw(st.integers(1, 4)),
        "turns": draw(st.integers(1, 3)),
        "private": draw(st.integers(0, 500)),
        "output": draw(st.integers(0, 100)),
    }
    for _ in range(draw(st.integers(0, 3))):
        key = draw(st.sampled_from(_SYNTH_FIELDS))
        if draw(st.booleans()):
            fields.pop(key, None)
        else:
            fields[key] = draw(_json | st.sampled_from(["round-robin", "user-by-user", "yes", "1e3"]))
    data = {"synthetic": fields} if draw(st.booleans()) else fields
    return yaml.safe_dump(data, allow_unicode=True).encode()


# --- traces -----------------------------------------------------------------------------------------------

_TRACES = {
    "mooncake": (".jsonl", jsonl(mooncake_line())),
    "tokens": (".jsonl", jsonl(token_line())),
    "synthetic": (".yaml", synthetic_yaml()),
}


def _read(path, fmt: str) -> None:
    """The reader alone: the first requests, or a PlanError."""
    try:
        for r in islice(tr.read(path, fmt), 20):
            assert r.prompt_len == len(r.prompt) >= 1 and r.output_len >= 0
    except PlanError as exc:
        assert "\n" not in str(exc)


@fuzz(60)
@given(data=st.data())
def test_trace_readers_read_or_refuse_in_one_line(tmp_path_factory, data):
    kind = data.draw(st.sampled_from(sorted(_TRACES)))
    suffix, content = _TRACES[kind]
    path = tmp_path_factory.mktemp("trace") / f"t{suffix}"
    path.write_bytes(data.draw(content))
    for fmt in ("auto", kind):
        _read(path, fmt)


#: replay's own options, in range and out of it
_REPLAY_OPTIONS = [
    ("--concurrency", "3"),
    ("--format", "mooncake"),
    ("--format", "tokens"),
    ("--format", "x"),
    ("--engine", "vllm"),
    ("--engine", "sglang"),
    ("--ctx", "4096"),
    ("--kv-budget", "0.01GiB"),
    ("--kv-budget", "1B"),
    ("--num-gpu-blocks-override", "1"),
    ("--num-gpu-blocks-override", "0"),
    ("--max-total-tokens", "1"),
    ("--max-mamba-cache-size", "1"),
    ("--prefix-match-unit", "16"),
    ("--prefix-match-unit", "7"),
    ("--prefix-cache-retention-interval", "0"),
    ("--prefix-cache-retention-interval", "100"),
    ("--mamba-max-states-per-path", "1"),
    ("--mamba-max-states-per-path", "0"),
    ("--enable-int8-mamba-checkpoint",),
    ("--mode", "all"),
    ("--gpu-type", "rtx-4090"),
    ("--spec-tokens", "2"),
    ("--limit", "1"),
    ("--enable-mamba-shared-prefix-checkpoint",),
    ("--no-requests",),
]


@fuzz(15)
@given(data=st.data())
def test_replay_of_any_trace_answers_or_refuses(cli, tmp_path_factory, data):
    kind = data.draw(st.sampled_from(sorted(_TRACES)))
    suffix, content = _TRACES[kind]
    path = tmp_path_factory.mktemp("trace") / f"t{suffix}"
    path.write_bytes(data.draw(content))
    extra = data.draw(st.lists(st.sampled_from(_REPLAY_OPTIONS), max_size=2))
    model = data.draw(st.sampled_from(["nemotron-h", "nemotron-h", "qwen3-next", "lfm2", "llama-3-8b", "mamba-130m"]))
    cli(
        "replay",
        str(path),
        model,
        "--kv-budget",
        "40GiB",
        "--limit",
        "6",
        *(w for o in extra for w in o),
        "--json",
        json_out=True,
    )


# --- pasted engine command lines ------------------------------------------------------------------------

#: the engines' flags as people paste them (spelled right and wrong), each with values it takes
_VLLM_FLAGS = {
    "--max-model-len": ["8192", "32k", "128K", "4096"],
    "--max_model_len": ["8192"],
    "-tp": ["1", "2"],
    "--tensor-parallel-size": ["1", "2", "4"],
    "--gpu-memory-utilization": ["0.9", "0.8", "0.95"],
    "--max-num-seqs": ["16", "256", "1024"],
    "--kv-cache-dtype": ["auto", "fp8", "fp8_e5m2"],
    "--mamba-ssm-cache-dtype": ["auto", "float32", "bfloat16"],
    "--enable-prefix-caching": [],
    "--no-enable-prefix-caching": [],
    "--block-size": ["16", "32"],
    "--max-num-batched-tokens": ["2048", "8192"],
    "--speculative-config": ['{"method":"mtp","num_speculative_tokens":2}', '{"method":"ngram"}'],
    "--enforce-eager": [],
    "--dtype": ["auto", "bfloat16"],
    "--quantization": ["fp8"],
    "--trust-remote-code": [],
    "--mamba-cache-mode": ["align", "all", "none"],
    "--pipeline-parallel-size": ["1", "2"],
    "--data-parallel-size": ["1", "2"],
    "--enable-expert-parallel": [],
    "--kv-cache-memory-bytes": ["40GiB"],
    "--num-gpu-blocks-override": ["100"],
    "-O3": [],
    "-O": ["3"],
    "--compilation-config": ['{"level": 3}'],
    "--served-model-name": ["m"],
    "--port": ["8000"],
    "--seed": ["0"],
    "--tensor-parallel": ["2"],
    "--revision": ["main"],
}
_SGLANG_FLAGS = {
    "--context-length": ["8192", "32768"],
    "--tp-size": ["1", "2"],
    "--tp": ["1", "2"],
    "--mem-fraction-static": ["0.85", "0.7", "0.667"],
    "--max-running-requests": ["8", "64"],
    "--max-mamba-cache-size": ["16", "100"],
    "--mamba-full-memory-ratio": ["0.9", "0.5"],
    "--page-size": ["1", "64"],
    "--kv-cache-dtype": ["auto", "fp8_e4m3"],
    "--mamba-ssm-dtype": ["float32", "bfloat16"],
    "--disable-radix-cache": [],
    "--speculative-algorithm": ["EAGLE", "NEXTN"],
    "--speculative-algo": ["NEXTN"],
    "--speculative-num-steps": ["1", "3"],
    "--speculative-num-draft-tokens": ["2", "4"],
    "--speculative-eagle-topk": ["1"],
    "--chunked-prefill-size": ["8192", "2048"],
    "--dp-size": ["1", "2"],
    "--enable-dp-attention": [],
    "--ep-size": ["1", "2"],
    "--trust-remote-code": [],
    "--cpu-offload-gb": ["4"],
    "--schedule-conservativeness": ["1.0"],
    "--mamba-scheduler-strategy": ["auto", "extra_buffer"],
    "--pp-size": ["1", "2"],
    "--dtype": ["auto", "bfloat16"],
    "--port": ["30000"],
    "--host": ["0.0.0.0"],
}
#: what a flag might get instead: out of range, of the wrong kind, half a JSON
_JUNK = ["0", "-1", "1.5", "1e9", "x", "", "{}", '{"method":', "[1, 2]", "true", "nvidia/Nemotron-H-8B-Base-8K"]
_MODELS_HUB = [
    "nvidia/Nemotron-H-8B-Base-8K",
    "nvidia/NVIDIA-Nemotron-Nano-9B-v2",
    "Qwen/Qwen3-Next-80B-A3B-Instruct",
    "ibm-granite/granite-4.0-h-small",
    "LiquidAI/LFM2-1.2B",
    "not-a-model",
]
_ENV = ["SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1", "VLLM_USE_V1=1", "CUDA_VISIBLE_DEVICES=0,1", "X=", "=1"]


@st.composite
def engine_words(draw, flags: dict[str, list[str]]) -> list[str]:
    """Flags with their values, now and then a value of the wrong kind, a missing one, or a stray word."""
    words: list[str] = []
    for _ in range(draw(st.integers(0, 4))):
        flag = draw(st.sampled_from(sorted(flags)))
        good = flags[flag]
        junk = draw(st.integers(0, 4)) == 0
        value = draw(st.sampled_from(_JUNK) | _word) if junk or not good else draw(st.sampled_from(good))
        if not good and not junk:
            words.append(flag)
            continue
        shape = draw(st.sampled_from(["flag value"] * 4 + ["flag=value", "flag", "word"]))
        words += (
            [flag, value]
            if shape == "flag value"
            else [f"{flag}={value}"]
            if shape == "flag=value"
            else [flag]
            if shape == "flag"
            else [value]
        )
    return words


@st.composite
def engine_line(draw) -> list[str]:
    env = draw(st.lists(st.sampled_from(_ENV), max_size=2)) if draw(st.integers(0, 3)) == 0 else []
    model = draw(st.sampled_from(_MODELS_HUB))
    engine = draw(st.sampled_from(["vllm"] * 3 + ["sglang-launch"] * 2 + ["sglang-serve", "other"]))
    if engine == "vllm":
        head = ["vllm", "serve", *([model] if draw(st.integers(0, 5)) else [])]
        return env + head + draw(engine_words(_VLLM_FLAGS))
    if engine == "other":
        return env + draw(st.lists(_word | st.sampled_from(["vllm", "serve", "python", "-m", "sglang"]), max_size=4))
    head = ["python", "-m", "sglang.launch_server"] if engine == "sglang-launch" else ["sglang", "serve"]
    path = ["--model-path", model] if draw(st.integers(0, 5)) else []
    return env + head + path + draw(engine_words(_SGLANG_FLAGS))


@fuzz(40)
@given(data=st.data())
def test_pasted_command_lines_answer_or_refuse_in_one_line(cli, data):
    line = data.draw(engine_line())
    command = data.draw(st.sampled_from(["fit", "fit", "fit", "size", "speed"]))
    own = ["--gpu-type", data.draw(st.sampled_from(["h100", "rtx-4090", "b200"]))] if command != "size" else []
    cli(command, *own, "--json", "--", *line, json_out=True)


# --- speed and plan options ----------------------------------------------------------------------------

_SPEED_FLAGS = {
    "--input": ["0", "1", "1024", "8k", "1e9", "x", "-5"],
    "--output": ["0", "1", "128", "64k", "x"],
    "--concurrency": ["0", "1", "8", "100000", "-1", "x"],
    "--num-prompts": ["0", "1", "16", "1000", "x"],
    "--acceptance": ["0", "0.5", "1", "1.5", "-0.1", "nan", "x"],
    "--spec-tokens": ["0", "1", "3", "-1"],
    "--gpu-type": ["h100", "h200", "rtx-4090", "b200", "mi300x", "nope", "a100"],
    "--gpu-mem": ["0", "24GB", "80GiB", "x"],
    "--kv-budget": ["0", "1B", "0.01GiB", "40GiB", "x"],
    "--tp": ["0", "1", "2", "3", "8"],
    "--engine": ["vllm", "sglang", "both", "x"],
    "--ctx": ["0", "1", "8192", "1M", "x"],
    "--max-num-seqs": ["0", "1", "4096"],
    "--max-running-requests": ["0", "1", "64"],
    "--mem-fraction-static": ["0", "0.5", "0.667", "1.2"],
    "--gpu-util": ["0", "0.5", "0.92", "1.5"],
    "--max-num-batched-tokens": ["0", "1", "2048", "x"],
    "--kv-dtype": ["auto", "fp8", "x"],
    "--ssm-dtype": ["auto", "fp32", "bf16", "x"],
    "--speculative-config": ['{"method":"mtp","num_speculative_tokens":2}', "{}", "x", '{"method":"eagle"}'],
    "--vllm-version": ["0.10.0", "0.20", "0.33", "9.9", "x"],
    "--calibration": ["no-such-file.json"],
}
_PLAN_FLAGS = {
    "--ctx": ["0", "1", "8192", "128k", "1M", "x"],
    "--concurrency": ["0", "1", "16", "100000", "x"],
    "--gpus": ["0", "1", "2", "3", "4", "-1", "x"],
    "--gpu-type": ["h100", "rtx-4090", "b200", "l40s", "nope"],
    "--gpu-mem": ["0", "24GB", "80GiB", "x"],
    "--kv-budget": ["0", "0.01GiB", "40GiB"],
    "--engine": ["vllm", "sglang", "both", "x"],
    "--mode": ["none", "align", "all", "x"],
    "--block-size": ["0", "16", "17"],
    "--page-size": ["0", "1", "64"],
    "--vllm-version": ["0.15", "0.33", "x"],
    "--sglang-version": ["0.5.2", "0.5.23", "x"],
    "--gpu-util": ["0", "0.9", "1.5"],
    "--weights": ["0", "1GiB", "500GiB"],
}
_MODELS = [
    "nemotron-h",
    "lfm2",
    "qwen3-next",
    "jamba",
    "llama-3-8b",
    "mamba-130m",
    "granite-4.0-h",
    "qwen3.5",
    "no-such-model",
]


@st.composite
def options(draw, table: dict[str, list[str]], always: dict[str, str]) -> list[str]:
    chosen = draw(st.lists(st.sampled_from(sorted(table)), max_size=4, unique=True))
    argv: list[str] = []
    for flag in chosen:
        argv += [flag, draw(st.sampled_from(table[flag]))]
    for flag, value in always.items():
        if flag not in chosen:
            argv += [flag, value]
    return argv


@fuzz(40)
@given(data=st.data())
def test_speed_options_answer_or_refuse_in_one_line(cli, data):
    argv = data.draw(options(_SPEED_FLAGS, {"--gpu-type": "h100"}))
    cli("speed", data.draw(st.sampled_from(_MODELS)), *argv, "--json", json_out=True)


@fuzz(10)
@given(data=st.data())
def test_plan_options_answer_or_refuse_in_one_line(cli, data):
    # at most 4 GPUs (the table's values), so that each search stays short
    argv = data.draw(options(_PLAN_FLAGS, {"--gpu-type": "h100", "--gpus": "4", "--concurrency": "4", "--ctx": "8192"}))
    cli("plan", data.draw(st.sampled_from(_MODELS)), *argv, "--json", json_out=True)
