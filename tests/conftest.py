from pathlib import Path

import pytest

#: the real HF configs the project is tested against, beside the repository (absent in a bare checkout)
SHARED_CONFIGS = Path(__file__).resolve().parents[1].parent / "shared" / "model_configs"


@pytest.fixture
def shared_configs() -> Path:
    if not SHARED_CONFIGS.is_dir():
        pytest.skip("../shared/model_configs is not present")
    return SHARED_CONFIGS


@pytest.fixture
def run_cli(capsys):
    """Run the CLI in-process; returns (exit code, stdout, stderr)."""
    from hybridplan.cli import main

    def run(*args: str):
        code = main([str(a) for a in args])
        out = capsys.readouterr()
        return code, out.out, out.err

    return run
