"""The shape of the code: each engine rule defined once, in its engine's package; short parameter lists; every
package and shipped spec in the wheel."""

import ast
from pathlib import Path

import pytest
import tomllib

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "hybridplan"


def _stub(f: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A protocol's method: its body ``...``, a signature that defines nothing."""
    return (
        len(f.body) == 1
        and isinstance(f.body[0], ast.Expr)
        and isinstance(f.body[0].value, ast.Constant)
        and f.body[0].value.value is Ellipsis
    )


def _functions() -> list[tuple[Path, ast.FunctionDef]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _stub(node):
                out.append((path.relative_to(ROOT), node))
    return out


@pytest.mark.parametrize(
    "name,home",
    [
        ("request_cap", "hybridplan/engines/sglang/pool.py"),  # SGLang: K // state slots per request
        ("batch_defaults", "hybridplan/engines/vllm/defaults.py"),  # vLLM's batch tiers by GPU and release
        ("chunked_prefill_size", "hybridplan/engines/sglang/defaults.py"),  # SGLang's chunk by GPU memory
        ("default_max_num_seqs", ()),
        ("kv_budget", "hybridplan/engines/vllm/sizing.py"),  # vLLM's KV budget formula
        ("budget_bytes", "hybridplan/engines/sglang/pool.py"),  # SGLang's memory to split
        # where a cache holds states along a request (`prefix`'s checkpoints of the first request): one per engine's
        # replay cache (each engine's scheduler loop runs the request, then asks its cache), and no analytic copy of where states land (`checkpoints`) or of the junction a second request
        # saves (`junction`) beside the replay's rules: `prefix` replays its trace through those caches
        (
            "held_states",
            (
                "hybridplan/engines/sglang/radix_cache.py",
                "hybridplan/engines/sglang/scheduler.py",
                "hybridplan/engines/vllm/prefix_cache.py",
                "hybridplan/engines/vllm/scheduler.py",
            ),
        ),
        ("checkpoints", ()),
        ("junction", ()),
    ],
)
def test_each_rule_is_defined_once(name, home):
    where = [str(p) for p, f in _functions() if f.name == name]
    if isinstance(home, str):
        assert where == [home]
    else:
        assert sorted(where) == list(home)


def test_reports_hold_no_engine_rule():
    # a report module composes: it names no engine's release, pool or block arithmetic
    for path in sorted((PACKAGE / "reports").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        for needle in ("cdiv", "floor_to", "minor", "padding_slot", "// ratio", "gpu_memory_utilization"):
            assert needle not in text, f"{path.name} uses {needle}"


def test_reports_branch_on_no_engine_and_check_no_release():
    # the engines' releases, flags and issue numbers are their packages' (engines/*/replay_advice.py): a report
    # loops over ``engines`` and calls its verbs, so it names no engine in a comparison and asks no release
    # (reports/fit.py, speed.py and plan.py still branch on the names: issue 31 item 4, not yet moved)
    for name in ("replay.py", "prefix.py"):
        path = PACKAGE / "reports" / name
        text = path.read_text(encoding="utf-8")
        for needle in (
            '== "vllm"',
            '!= "vllm"',
            '== "sglang"',
            '!= "sglang"',
            ".before(",
            ".at_least(",
            "#37898",
            "vllm#",
        ):
            assert needle not in text, f"{path.name} holds {needle}"


def _lint(config: Path) -> tuple[bool, str]:
    """import-linter's own run of the contracts in ``config`` over the source tree: passed, and its report."""
    pytest.importorskip("importlinter")  # the test extra (pyproject.toml)
    import contextlib
    import io

    from importlinter.application.use_cases import lint_imports
    from importlinter.configuration import configure

    configure()  # its config readers and contract types, as the lint-imports command sets them
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        passed = lint_imports(config_filename=str(config), cache_dir=None, no_logo=True)
    return passed, out.getvalue()


def test_the_import_contracts_hold():
    # the layers (commands > render > reports > engines > model), the engines' independence, no report that
    # renders, no CLI import from below and no import circle: [tool.importlinter] in pyproject.toml
    passed, report = _lint(ROOT / "pyproject.toml")
    assert passed, report


def test_a_broken_import_contract_fails(tmp_path):
    # the same run refuses a contract the tree breaks: every engine imports the Scenario
    config = tmp_path / "broken.toml"
    config.write_text(
        '[tool.importlinter]\nroot_package = "hybridplan"\n\n[[tool.importlinter.contracts]]\n'
        'name = "engines without the Scenario"\ntype = "forbidden"\n'
        'source_modules = ["hybridplan.engines.vllm.sizing"]\nforbidden_modules = ["hybridplan.scenario"]\n'
    )
    passed, report = _lint(config)
    assert not passed
    assert "hybridplan.engines.vllm.sizing is not allowed to import hybridplan.scenario" in report


def test_no_function_takes_more_than_six_parameters():
    long = []
    for path, f in _functions():
        a = f.args
        names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg not in ("self", "cls")]
        if len(names) + bool(a.vararg) > 6:
            long.append(f"{path}:{f.lineno} {f.name}")
    assert not long


def test_the_wheel_ships_every_package_and_spec():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    dirs = {pkg: ROOT / path for pkg, path in cfg["package-dir"].items()}

    def source(pkg: str) -> Path:
        base = max((p for p in dirs if pkg == p or pkg.startswith(p + ".")), key=len)
        return dirs[base].joinpath(*pkg[len(base) :].lstrip(".").split(".")) if pkg != base else dirs[base]

    listed = set(cfg["packages"])
    on_disk = set()
    for root in dirs.values():
        for init in root.rglob("__init__.py"):
            if "__pycache__" not in init.parts:
                on_disk.add(init.parent)
    assert {source(p) for p in listed} == on_disk
    # the specs and the index the loader reads their names from (hybridplan/loader.py INDEX)
    assert cfg["package-data"]["hybridplan.model_specs"] == ["*.yaml", "index.json"]
    assert (ROOT / "model_specs" / "index.json").is_file()
    assert len(list((ROOT / "model_specs").glob("*.yaml"))) >= 17
