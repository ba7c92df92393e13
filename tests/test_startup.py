"""The planner stays light: each command imports what it needs and nothing else — no GPU stack, no plotting,
no other command's report, no engine it does not ask for, and no rich console under --json. (How fast it
starts is measured, not asserted: benchmarks/startup.py.)"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.cli

DATA = Path(__file__).parent / "data"
GPU_STACK = (
    "torch",
    "triton",
    "pynvml",
    "numpy",
    "matplotlib",
    "hybridplan.kernels",
    "hybridplan.profile.pipeline",
    "huggingface_hub",
)
REPORTS = ("size", "crossover", "engines", "fit", "prefix", "check_log", "models", "gpus")


def _loaded(*argv: str) -> set[str]:
    code = (
        "import sys, io, contextlib\n"
        "from hybridplan.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    rc = main({list(argv)!r})\n"
        "print(rc, ' '.join(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] in ("0", "1"), out[0]
    return set(out[1:])


def _others(*needed: str) -> list[str]:
    return [f"hybridplan.reports.{r}" for r in REPORTS if r not in needed]


@pytest.mark.parametrize(
    "argv,needed,not_needed",
    [
        # size without --engine: vLLM's dtype rules only — no engine sizing, no SGLang pool, no crossover maths
        (
            ("size", "nemotron-h", "--ctx", "131072", "--json"),
            ("size",),
            (
                "hybridplan.engines.vllm.sizing",
                "hybridplan.engines.vllm.engine",
                "hybridplan.engines.sglang.pool",
                "hybridplan.crossover",
                "fractions",
                "hybridplan.render",
                "rich.console",
                "rich.table",
                # the engines' log and prefix pieces, the Hub client (a shipped name is no Hub id), a checkpoint reader
                "hybridplan.engines.common",
                "hybridplan.hub",
                "hybridplan.weights.checkpoint",
                "logging",
                "socket",
                # the engine-flag tables (no engine flag on the line), check-log's flags, a quantization (none stated)
                "hybridplan.cmdline",
                "shlex",
                "hybridplan.engines.given",
                "hybridplan.weights.quant",
            ),
        ),
        (
            ("size", "nemotron-h", "--engine", "both", "--json"),
            ("size", "engines"),
            ("hybridplan.crossover", "hybridplan.render", "rich.console"),
        ),
        (("size", "nemotron-h"), ("size",), ("hybridplan.engines.sglang.pool", "hybridplan.crossover")),
        (
            ("crossover", "--json"),
            ("crossover", "size"),
            ("hybridplan.engines.sglang.pool", "hybridplan.engines.vllm.sizing", "rich.console"),
        ),
        (
            ("fit", "nemotron-h", "--kv-budget", "40GiB", "--json"),
            ("fit",),
            ("hybridplan.crossover", "hybridplan.engines.vllm.prefix", "rich.console"),
        ),
        (
            ("fit", "nemotron-h", "--kv-budget", "40GiB", "--engine", "vllm", "--json"),
            ("fit",),
            ("hybridplan.engines.sglang.pool", "hybridplan.engines.sglang.engine"),
        ),
        # prefix replays through replay's policies, whose rules take the cache groups from the engines' sizing; no
        # crossover maths, no replay rendering, no rich console under --json
        (
            ("prefix", "nemotron-h", "--shared", "4000", "--json"),
            ("prefix",),
            ("hybridplan.crossover", "hybridplan.render_replay", "rich.console"),
        ),
        (
            ("check-log", str(DATA / "vllm-0.23-nemotron-h.log"), "--json"),
            ("check_log",),
            ("hybridplan.crossover", "rich.console"),
        ),
        (("models", "--json"), ("models",), ("hybridplan.engines.vllm.dtypes", "rich.console")),
    ],
)
def test_each_command_imports_only_what_it_needs(argv, needed, not_needed):
    loaded = _loaded(*argv)
    assert {f"hybridplan.reports.{r}" for r in needed} <= loaded
    assert not [m for m in (*GPU_STACK, *_others(*needed), *not_needed) if m in loaded]


def test_only_the_invoked_command_is_built(monkeypatch, capsys):
    # typer turns every registered command's options into click parameters before it parses anything: a run
    # builds the one it was asked for (all of them for help or a name that is none)
    import typer.main

    from hybridplan.cli import main

    built: list[set[str]] = []
    real = typer.main.get_command

    def spy(app):
        group = real(app)
        built.append(set(group.commands))
        return group

    monkeypatch.setattr(typer.main, "get_command", spy)
    assert main(["size", "nemotron-h", "--json"]) == 0
    assert built and all(b == {"size"} for b in built)
    built.clear()
    assert main(["--help"]) == 0
    assert {"size", "fit", "check-log", "models"} <= built[-1]
    capsys.readouterr()


def test_a_command_registered_by_its_module_says_truly_whether_it_takes_engine_flags():
    # profile and replay register without importing their modules (hybridplan/signature.py command_in)
    from hybridplan import cli, signature

    lazy = [c for c in cli.app.registered_commands if hasattr(c.callback, "target")]
    assert {c.callback.target for c in lazy} == {
        "hybridplan.profile.command:profile",
        "hybridplan.replay.command:replay",
    }
    for c in lazy:
        signature.signature(c.callback)
        assert (c.epilog is not None) == signature.takes_engine_flags(c.callback.params), c.name


def test_the_spec_index_is_the_specs():
    # the loader reads the shipped specs' names, architectures and contexts from model_specs/index.json, not from
    # the 51 files; it must say what the files say (python scripts/specs_index.py rewrites it)
    from hybridplan import loader

    path = Path(loader._specs_dir()) / loader.INDEX
    assert json.loads(path.read_text(encoding="utf-8")) == loader.build_index(), (
        "model_specs/index.json differs from the specs: run python scripts/specs_index.py"
    )
    yaml_names = {
        n.lower(): fn
        for fn in loader._spec_documents()
        for doc in [yaml.safe_load((Path(loader._specs_dir()) / fn).read_text(encoding="utf-8"))]
        for n in [fn[:-5], doc.get("name"), *(doc.get("aliases") or [])]
        if n
    }
    assert loader.shipped_names() == yaml_names


def test_a_missing_or_stale_index_is_rebuilt(tmp_path, monkeypatch):
    # an index that lists other files than the folder holds (a spec added without rewriting it), or none at
    # all, is not trusted: the loader reads the specs instead
    import shutil

    from hybridplan import loader

    specs = tmp_path / "specs"
    shutil.copytree(loader._specs_dir(), specs)
    (specs / "nemotron-h-8b.yaml").rename(specs / "renamed-8b.yaml")
    monkeypatch.setattr(loader, "_SPECS_DIR", specs)
    for clear in (loader._index, loader._spec_text, loader._read_spec_document):
        clear.cache_clear()
    try:
        assert loader.shipped_names()["renamed-8b"] == "renamed-8b.yaml"
        assert "nemotron-h-8b.yaml" not in loader.shipped_names().values()
        (specs / loader.INDEX).unlink()
        loader._index.cache_clear()
        assert loader.shipped_names()["nemotron-h"] == "renamed-8b.yaml"
    finally:
        for clear in (loader._index, loader._spec_text, loader._read_spec_document):
            clear.cache_clear()


def test_spec_contexts_from_the_index_agree_with_the_specs():
    from hybridplan import loader

    specs = loader.shipped_specs()
    for arch in {s.architecture for s in specs}:
        expected = {
            s.name: s.max_position_embeddings for s in specs if s.architecture == arch and s.max_position_embeddings
        }
        assert loader.shipped_contexts(arch) == expected, arch


def test_the_cycle_collector_is_paused_only_while_the_command_line_starts():
    # hybridplan/startup.py: the console script pauses it before importing anything and the command's own work
    # runs with it on again, start-up's objects frozen out of its walks; the planner as a library never pauses it
    code = (
        "import gc, sys\n"
        "import hybridplan.reports.size as size_report\n"
        "real = size_report.size\n"
        "def spy(*a, **k):\n"
        "    print('during', gc.isenabled(), gc.get_freeze_count() > 0, file=sys.stderr)\n"
        "    return real(*a, **k)\n"
        "size_report.size = spy\n"
        "import hybridplan.cli\n"
        "print('library', gc.isenabled(), file=sys.stderr)\n"
        "from hybridplan.__main__ import main\n"
        "sys.argv = ['hybridplan', 'size', 'nemotron-h', '--json']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exc:\n"
        "    print('after', gc.isenabled(), exc.code, file=sys.stderr)\n"
    )
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stderr.split("\n")
    assert [line for line in err if line] == ["library True", "during True True", "after True 0"]

    from hybridplan import startup

    code = (
        "import gc\nfrom hybridplan import startup\ngc.disable()\nstartup.pause()\nstartup.resume()\n"
        "print(gc.isenabled())\n"
    )  # a process that turned it off keeps it off
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
        == "False"
    )
    assert startup._paused is False
