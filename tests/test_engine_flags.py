"""The engines' flag tables (hybridplan/engines/{vllm,sglang}/flags.json), made from the wheels by
validation/engine_flags.py, and what hybridplan does with each flag (hybridplan/cmdline.py).

The tables are regenerated from the real wheels and compared by ``python validation/engine_flags.py --check``
(validation/README.md). Here: every flag of every release has a disposition, every disposition names a flag the
engines have, the header covers every release hybridplan models with its wheel's sha256, and the reader turns
argument definitions written the engines' ways (built here, in small wheels of our own) into the rows it
writes."""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

import pytest

from hybridplan import cmdline
from hybridplan.engines.sglang.releases import VERSIONS as SGLANG_VERSIONS
from hybridplan.engines.vllm.releases import VERSIONS as VLLM_VERSIONS

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "validation"))
import engine_flags  # noqa: E402

sys.path.pop(0)

ENGINES = {"vllm": (VLLM_VERSIONS, cmdline.VLLM), "sglang": (SGLANG_VERSIONS, cmdline.SGLANG)}


@pytest.mark.parametrize("engine", ENGINES)
def test_the_table_covers_every_release_with_its_wheel(engine):
    data = cmdline._data(engine)
    versions, _ = ENGINES[engine]
    assert tuple(data["releases"]) == versions
    for v, head in data["releases"].items():
        assert re.fullmatch(r"[0-9a-f]{64}", head["sha256"]), v
        assert head["wheel"].startswith(f"{engine}-{v}-") and head["wheel"].endswith(".whl")
        # the count written beside each release is the count of flags the table holds for it
        assert head["flags"] == len({f.name for f in cmdline.parser(engine, v).flags.values()}), v


@pytest.mark.parametrize("engine", ENGINES)
def test_every_flag_of_every_release_has_a_disposition(engine):
    versions, _ = ENGINES[engine]
    kinds = {"model", "opt", "bool", "ignore", "refuse", "special"}
    for v in versions:
        for f in set(cmdline.parser(engine, v).flags.values()):
            kind, target = cmdline.disposition(engine, f.names)
            assert kind in kinds, (v, f.name)
            if kind in ("ignore", "refuse"):
                assert target and len(target) > 10, (v, f.name)  # a reason, said to the user


@pytest.mark.parametrize("engine", ENGINES)
def test_every_disposition_names_a_flag_the_engine_has(engine):
    # a name hybridplan lists that no release of the engine defines is a typo or a flag that never was
    versions, table = ENGINES[engine]
    every = {n for v in versions for n in cmdline.parser(engine, v).flags}
    assert sorted(set(table) - every) == []


def test_modelled_flags_exist_in_every_release_hybridplan_prints_them_for():
    # the printed commands use these spellings at every release (hybridplan/cmdline.py vllm_command /
    # sglang_command); a release that lacked one would be handed a flag it refuses
    for v in VLLM_VERSIONS:
        p = cmdline.parser("vllm", v)
        for flag in (
            "--tensor-parallel-size",
            "--max-model-len",
            "--max-num-seqs",
            "--kv-cache-dtype",
            "--gpu-memory-utilization",
            "--block-size",
            "--enable-prefix-caching",
            "--enforce-eager",
            "--speculative-config",
            "--cpu-offload-gb",
            "--trust-remote-code",
        ):
            assert flag in p.flags, (v, flag)
        assert ("--kv-cache-memory-bytes" in p.flags) == (
            VLLM_VERSIONS.index(v) >= VLLM_VERSIONS.index(cmdline.KV_BYTES_FROM)
        ), v
        assert ("--gdn-prefill-backend" in p.flags) == (
            VLLM_VERSIONS.index(v) >= VLLM_VERSIONS.index(cmdline.GDN_FLAG_FROM)
        ), v
    for v in SGLANG_VERSIONS:
        p = cmdline.parser("sglang", v)
        for flag in (
            "--model-path",
            "--tp-size",
            "--context-length",
            "--mem-fraction-static",
            "--cpu-offload-gb",
            "--max-mamba-cache-size",
            "--disable-radix-cache",
            "--speculative-algorithm",
        ):
            assert flag in p.flags, (v, flag)
        i = SGLANG_VERSIONS.index(v)
        assert ("--mamba-radix-cache-strategy" in p.flags) == (i >= SGLANG_VERSIONS.index(cmdline.RADIX_FLAG_RENAMED))


def test_what_the_parsers_do_by_release():
    # vLLM's FlexibleArgumentParser: -O<n> is -O.level=<n> to 0.11.0, -O.mode=<n> in 0.11.1-0.11.2, and
    # --optimization-level <n> from 0.12.0 (vllm/utils/__init__.py, vllm/utils/argparse_utils.py); neither
    # engine's parser turns argparse's allow_abbrev off
    assert cmdline.parser("vllm", "0.10.0").rules["o_target"] == "-O.level="
    assert cmdline.parser("vllm", "0.11.1").rules["o_target"] == "-O.mode="
    assert cmdline.parser("vllm", "0.12.0").rules["o_target"] == "--optimization-level"
    assert cmdline.O0_FROM == "0.12.0"
    assert all(cmdline.parser(e, v).rules["allow_abbrev"] for e, (vs, _) in ENGINES.items() for v in vs)
    # `vllm serve --model M` is refused up to 0.11.0 and moved to the front after
    assert cmdline.parser("vllm", "0.11.0").rules["model_option"] == "refused"
    assert cmdline.parser("vllm", "0.11.1").rules["model_option"] == "moved"


# --- the reader, on definitions written the engines' ways ---------------------------------------------------

SGLANG_SRC = """
import argparse
CHOICES = ["auto", "fp8_e4m3"]
class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--model-path", "--model", type=str, required=True)
        parser.add_argument("--kv-cache-dtype", type=str, choices=CHOICES + ["bf16"])
        parser.add_argument("--trust-remote-code", action="store_true")
        parser.add_argument("--cuda-graph-bs", type=int, nargs="+")
        parser.add_argument("--old-flag", action=DeprecatedAction)
def prepare_server_args(argv):
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return parser.parse_args(argv)
"""

VLLM_CONFIG = """
from typing import Literal
CacheDType = Literal["auto", "fp8"]
@config
class CacheConfig:
    block_size: int = 16
    cache_dtype: CacheDType = "auto"
    enable_prefix_caching: bool | None = None
    kv_cache_memory_bytes: int | None = None
@config
class CompilationConfig:
    level: int = 0
@config
class VllmConfig:
    compilation_config: CompilationConfig = None
"""

VLLM_ARGS = """
class EngineArgs:
    @staticmethod
    def add_cli_args(parser):
        cache_kwargs = get_kwargs(CacheConfig)
        cache_group = parser.add_argument_group()
        cache_group.add_argument("--block-size", **cache_kwargs["block_size"])
        cache_group.add_argument("--kv-cache-dtype", **cache_kwargs["cache_dtype"])
        cache_group.add_argument("--enable-prefix-caching", **cache_kwargs["enable_prefix_caching"])
        cache_group.add_argument("--kv-cache-memory-bytes", **cache_kwargs["kv_cache_memory_bytes"])
        vllm_kwargs = get_kwargs(VllmConfig)
        parser.add_argument("--compilation-config", "-O", **vllm_kwargs["compilation_config"])
        parser.add_argument("--disable-log-requests", action="store_true", deprecated=True)
        parser.add_argument("--served-model-name", nargs="+", type=str)
"""

VLLM_PARSER = """
class FlexibleArgumentParser(ArgumentParser):
    def parse_args(self, args=None, namespace=None):
        pattern = re.compile(r"(?<=--)[^\\.]*")
        for i, arg in enumerate(args):
            if arg.startswith("--"):
                key = pattern.sub(lambda m: m.group(0).replace("_", "-"), arg, count=1)
            elif arg.startswith("-O") and arg != "-O" and arg[2] != ".":
                level = arg[3:] if arg[2] == "=" else arg[2:]
                processed_args.append(f"-O.level={level}")
            elif arg == "-O" and i + 1 < len(args) and args[i + 1] in {"0", "1", "2", "3"}:
                processed_args.append("-O.level")
        key, *keys = processed_arg.split(".")
"""


def _wheel(tmp_path: Path, files: dict[str, str]) -> Path:
    path = tmp_path / "made-0.0.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return path


def test_the_reader_on_sglang_definitions(tmp_path):
    flags, rules = engine_flags.extract("sglang", _wheel(tmp_path, {"sglang/srt/server_args.py": SGLANG_SRC}))
    assert flags == {
        "--model-path": {"names": ["--model"], "takes": "value"},
        "--kv-cache-dtype": {"takes": "value", "choices": ["auto", "bf16", "fp8_e4m3"]},
        "--trust-remote-code": {"takes": "switch"},
        "--cuda-graph-bs": {"takes": "list", "nargs": "+"},
        "--old-flag": {"takes": "switch", "deprecated": True},
    }
    assert rules == {"allow_abbrev": True, "config_file": False}


def test_the_reader_on_vllm_definitions(tmp_path):
    wheel = _wheel(
        tmp_path,
        {
            "vllm/config/cache.py": VLLM_CONFIG,
            "vllm/engine/arg_utils.py": VLLM_ARGS,
            "vllm/utils/__init__.py": VLLM_PARSER,
        },
    )
    flags, rules = engine_flags.extract("vllm", wheel)
    assert flags == {
        "--block-size": {"takes": "value"},
        "--kv-cache-dtype": {"takes": "value", "choices": ["auto", "fp8"]},
        # a bool field: argparse.BooleanOptionalAction, --enable-prefix-caching / --no-enable-prefix-caching
        "--enable-prefix-caching": {"takes": "bool"},
        "--kv-cache-memory-bytes": {"takes": "value"},
        # a dataclass-typed field takes JSON
        "--compilation-config": {"names": ["-O"], "takes": "value"},
        "--disable-log-requests": {"takes": "switch", "deprecated": True},
        "--served-model-name": {"takes": "list", "nargs": "+"},
    }
    assert rules["o_target"] == "-O.level=" and rules["underscores"] and rules["model_option"] == "moved"


def test_an_unknown_action_stops_the_reader(tmp_path):
    src = SGLANG_SRC.replace('action="store_true"', "action=SomethingNew")
    with pytest.raises(engine_flags.Unreadable, match="SomethingNew"):
        engine_flags.extract("sglang", _wheel(tmp_path, {"sglang/srt/server_args.py": src}))


def test_rows_join_consecutive_releases_only():
    order = ("a", "b", "c", "d")
    rows = engine_flags._runs({"a": {"takes": "value"}, "b": {"takes": "value"}, "d": {"takes": "value"}}, order)
    assert rows == [{"from": "a", "to": "b", "takes": "value"}, {"from": "d", "to": "d", "takes": "value"}]
    data = {
        "releases": {v: {} for v in order},
        "parser": [{"from": "a", "to": "d", "x": 1}],
        "flags": {"--f": rows, "--g": [{"from": "c", "to": "c", "takes": "switch"}]},
    }
    cut = engine_flags._restrict(data, ("b", "d"), order)
    assert cut["flags"] == {"--f": [{"from": "b", "to": "d", "takes": "value"}]}
    assert list(cut["releases"]) == ["b", "d"]
