from pathlib import Path

import pytest

#: the real HF configs the project is tested against (tests/data/configs/SOURCES.md says where each came from)
CONFIGS = Path(__file__).resolve().parent / "data" / "configs"


@pytest.fixture
def configs() -> Path:
    return CONFIGS


@pytest.fixture
def run_cli(capsys):
    """Run the CLI in-process; returns (exit code, stdout, stderr)."""
    from hybridplan.cli import main

    def run(*args: str):
        code = main([str(a) for a in args])
        out = capsys.readouterr()
        return code, out.out, out.err

    return run

