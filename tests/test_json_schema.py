"""Every command's --json against its published schema, docs/schema/<command>.json (issue 28, item 12): numbers
are numbers, a key ending in _bytes is a whole number of bytes, a unit is in the key's name.

The schemas are validated with the ``jsonschema`` package where it is installed (the ``test`` extra names it);
where it is not, with the small validator below, which reads the keywords the schemas use (type, const,
properties, required, patternProperties, additionalProperties, items) and refuses a schema using any other.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.golden

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "docs" / "schema"
DATA = Path(__file__).parent / "data"
LOGS = DATA / "logs"
TRACE = DATA / "traces" / "mooncake-conversation-300.jsonl"

COMMANDS = ("size", "crossover", "fit", "prefix", "replay", "check-log", "speed", "plan", "models", "gpus")

#: per command, runs that reach its different shapes: both engines, one engine, a refusal, a mismatch
RUNS = [
    ("size", "nemotron-h", "--ctx", "8192", "--engine", "both"),
    ("size", "qwen3-next", "--tp", "4", "--engine", "sglang"),
    ("size", "llama-3-8b"),
    ("crossover", "jamba", "--vs", "llama-3.1-70b"),
    ("fit", "nemotron-h", "--ctx", "8192", "--gpu-type", "h100"),
    ("fit", "nemotron-h", "--ctx", "8192", "--kv-budget", "40GiB", "--engine", "sglang"),
    ("fit", "llama-3.1-70b", "--gpu-type", "rtx-4090", "--ctx", "8192"),
    (
        "fit",
        "qwen3-next",
        "--tp",
        "4",
        "--gpu-type",
        "h100",
        "--engine",
        "sglang",
        "--enable-hierarchical-cache",
        "--hicache-size",
        "64",
    ),
    ("prefix", "nemotron-h", "--private", "200", "--sweep", "0:3000:250"),
    ("replay", str(TRACE), "qwen3.5-4b", "--kv-budget", "4GiB"),
    (
        "replay",
        str(TRACE),
        "qwen3.5-4b",
        "--kv-budget",
        "4GiB",
        "--engine",
        "sglang",
        "--enable-hierarchical-cache",
        "--limit",
        "40",
    ),
    ("check-log", str(DATA / "vllm-0.23-nemotron-h.log")),
    ("check-log", str(DATA / "sglang-0.5.23-nemotron-h.log")),
    # a mismatch (no release given, so 0.33.0's rules against a 0.11 build) and an SGLang split
    (
        "check-log",
        str(LOGS / "vllm-0.11.1rc-kimi-linear-48b-a3b-2xrtx3090-1.log"),
        "--model",
        "kimi-linear-48b-a3b",
        "--tp",
        "2",
    ),
    (
        "check-log",
        str(LOGS / "sglang-0.5.18-qwen3.8-27b-fp8-h100-1.log"),
        "--model",
        "qwen3.5-27b",
        "--sglang-version",
        "0.5.18",
        "--mem-fraction-static",
        "0.85",
        "--max-running-requests",
        "32",
    ),
    ("speed", "nemotron-h", "--gpu-type", "h200", "--engine", "both"),
    ("speed", "qwen3-next", "--gpu-type", "b200", "--tp", "2", "--engine", "sglang"),
    ("plan", "nemotron-h", "--ctx", "8192", "--concurrency", "2000", "--gpu-type", "rtx-4090", "--gpus", "2"),
    ("models",),
    ("gpus",),
]


# --- a validator for the keywords the schemas use, where jsonschema is not installed -------------------------

_KEYWORDS = {
    "$schema",
    "$id",
    "title",
    "description",
    "type",
    "const",
    "properties",
    "required",
    "patternProperties",
    "additionalProperties",
    "items",
}
_TYPES = {
    "null": lambda v: v is None,
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool) or isinstance(v, float) and v.is_integer(),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


def _errors(value, schema: dict, path: str = "$"):
    unknown = set(schema) - _KEYWORDS
    if unknown:
        raise ValueError(f"{path}: the fallback validator does not read {sorted(unknown)}")
    if "const" in schema and value != schema["const"]:
        yield f"{path}: {value!r} is not {schema['const']!r}"
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_TYPES[t](value) for t in types):
            yield f"{path}: {value!r} is not of type {types}"
            return
    if isinstance(value, dict):
        for k in schema.get("required", ()):
            if k not in value:
                yield f"{path}: {k!r} is a required property"
        props = schema.get("properties", {})
        for k, v in value.items():
            matched = False
            if k in props:
                matched = True
                yield from _errors(v, props[k], f"{path}.{k}")
            for pattern, sub in schema.get("patternProperties", {}).items():
                if re.search(pattern, k):
                    matched = True
                    yield from _errors(v, sub, f"{path}.{k}")
            extra = schema.get("additionalProperties", True)
            if not matched and extra is False:
                yield f"{path}: {k!r} is not allowed"
            elif not matched and isinstance(extra, dict):
                yield from _errors(v, extra, f"{path}.{k}")
    if isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            yield from _errors(v, schema["items"], f"{path}[{i}]")


def errors(value, schema: dict) -> list[str]:
    try:
        import jsonschema
    except ImportError:
        return list(_errors(value, schema))
    cls = jsonschema.validators.validator_for(schema)
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in cls(schema).iter_errors(value)]


def schema(command: str) -> dict:
    return json.loads((SCHEMAS / f"{command}.json").read_text())


# --- the tests ---------------------------------------------------------------------------------------------------


def test_every_command_publishes_a_schema():
    assert sorted(p.stem for p in SCHEMAS.glob("*.json")) == sorted(COMMANDS)
    assert {r[0] for r in RUNS} == set(COMMANDS)
    for c in COMMANDS:
        s = schema(c)
        assert s["type"] == "object" and "schema_version" in s["required"], c


@pytest.mark.parametrize("argv", RUNS, ids=lambda a: " ".join(Path(x).name for x in a[:3]))
def test_the_output_holds_to_its_schema(run_cli, argv):
    code, out, err = run_cli(*argv, "--json")
    assert code in (0, 1), err
    d = json.loads(out)
    bad = errors(d, schema(argv[0]))
    assert not bad, bad[:10]


def _leaves(d, path=""):
    if isinstance(d, dict):
        for k, v in d.items():
            yield from _leaves(v, f"{path}.{k}")
    elif isinstance(d, list):
        for v in d:
            yield from _leaves(v, f"{path}[]")
    else:
        yield path, d


_DISPLAY_NUMBER = re.compile(r"-?\d{1,3}(,\d{3})+(\.\d+)?|-?\d+(\.\d+)?( ?(GiB|GB|MiB|MB|%))?")


@pytest.mark.parametrize("argv", RUNS, ids=lambda a: " ".join(Path(x).name for x in a[:3]))
def test_no_figure_is_a_display_string_and_bytes_are_whole(run_cli, argv):
    # the issue's report: speed's *_bytes as floats (5262526464.0), check-log's "973,760", "2", "44.59 GiB";
    # a command line's argv, the printed text kept beside a typed value ("…_text") and an exact fraction
    # (crossover's "779/4") are text by design
    _, out, _ = run_cli(*argv, "--json")
    for path, v in _leaves(json.loads(out)):
        key = path.rsplit(".", 1)[-1]
        if key.endswith("_bytes"):
            assert v is None or type(v) is int, (path, v)
        if isinstance(v, str) and not key.endswith(("_text", "argv[]", "text", "version", "env[]", "fraction")):
            assert not _DISPLAY_NUMBER.fullmatch(v.strip()), (path, v)


def test_check_log_gives_numbers_and_the_unit_in_the_name(run_cli):
    # tests/data/vllm-0.23-nemotron-h.log prints "GPU KV cache size: 1,474,560 tokens" and block 1040
    # (docs/engines.md §2); tests/data/logs/vllm-0.11.1rc-kimi-linear-…: "Available KV cache memory: 2.30 GiB"
    _, out, _ = run_cli("check-log", DATA / "vllm-0.23-nemotron-h.log", "--json")
    d = json.loads(out)
    rows = {r["figure"]: r for r in d["rows"]}
    kv = rows["KV cache size (tokens)"]
    assert (kv["logged"], kv["logged_text"], kv["unit"]) == (1474560, "1,474,560", "tokens")
    assert rows["attention block size"]["logged"] == 1040
    settings = {s["name"]: s["value"] for s in d["settings"]}
    # the log's non-default args: 'kv_cache_memory_bytes': 42949672960 (40 GiB)
    assert settings["tensor_parallel_size"] == 1 and settings["kv_cache_memory_bytes"] == 42949672960
    assert settings["enable_prefix_caching"] is False and settings["version"] == "0.23.0"
    _, out, _ = run_cli(
        "check-log",
        LOGS / "vllm-0.11.1rc-kimi-linear-48b-a3b-2xrtx3090-1.log",
        "--model",
        "kimi-linear-48b-a3b",
        "--tp",
        "2",
        "--json",
    )
    got = next(s for s in json.loads(out)["settings"] if s["name"].startswith("available_kv_cache_memory"))
    assert (got["name"], got["value"], got["text"]) == ("available_kv_cache_memory_gib", 2.3, "2.30 GiB")


def test_speed_bytes_are_whole(run_cli):
    _, out, _ = run_cli("speed", "nemotron-h", "--gpu-type", "h100", "--json")
    d = json.loads(out)
    works = [k["work"] for st in d["decode_steps"] for k in st["kinds"] if "work" in k]
    assert works and all(type(w[f]) is int for w in works for f in ("weight_bytes", "kv_bytes", "state_bytes"))
    assert d["schema_version"] == 3  # 3: the held-out ranges beside the figures, the host and draft times


def test_the_schema_refuses_what_the_issue_reported():
    # the fallback validator and the schemas together: a float where bytes are due, a count as a display string
    s = schema("speed")
    bench = {"schema_version": 2}
    assert any("schema_version" not in e and "required" in e for e in _errors(bench, s))
    work = s["properties"]["decode_steps"]["items"]["properties"]["kinds"]["items"]["properties"]["work"]
    assert list(_errors({"weight_bytes": 5262526464.5}, work))
    # an integral float is an integer to JSON Schema (5262526464.0): test_no_figure_is_a_display_string_… holds
    # the type itself
    row = dict(
        engine="vllm",
        figure="KV cache size (tokens)",
        unit="tokens",
        logged="1,474,560x",
        predicted=1,
        logged_text="",
        predicted_text="",
        ok=True,
        start=1,
    )
    row_schema = schema("check-log")["properties"]["rows"]["items"]
    assert not list(_errors({**row, "logged": 1474560}, row_schema))
    row_schema_strict = {**row_schema, "properties": {**row_schema["properties"], "logged": {"type": "integer"}}}
    assert list(_errors(row, row_schema_strict))


def test_each_schema_pins_the_version_its_command_prints():
    # a schema describes one version of its output: a change of keys or types bumps both
    from hybridplan.reports import schema_version

    for c in COMMANDS:
        assert schema(c)["properties"]["schema_version"] == {"const": schema_version(c)}, c
