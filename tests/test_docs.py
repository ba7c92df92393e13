"""The documentation's example outputs are what the commands print (scripts/docs.py), and the README's
two commands are the ones the project's scripts run."""

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.golden

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import docs  # noqa: E402

sys.path.pop(0)


def test_every_example_output_is_current():
    stale = [
        f"{ex.path.name}: $ {ex.command}"
        for path in docs.FILES
        for ex in docs.examples(path)
        if docs.run(ex.command) != ex.shown
    ]
    assert not stale, "run python scripts/docs.py --write: " + "; ".join(stale)


def test_the_docs_show_examples():
    assert len(docs.examples(ROOT / "README.md")) >= 3
    assert len(docs.examples(ROOT / "docs" / "guide.md")) >= 8


def test_readme_commands():
    readme = (ROOT / "README.md").read_text()
    # the install line starts from a fresh machine (clone, then into it) and activates the environment it
    # creates, so the later bare commands are found
    assert "git clone REPO_URL hybridplan && cd hybridplan && python3 -m venv .venv && . .venv/bin/activate" in readme
    assert "&& pip install -q . && hybridplan size" in readme
    assert "`scripts/test`" in readme
    assert (ROOT / ".ci" / "run").read_text().strip().endswith("exec scripts/test")
