"""The example outputs in README.md and docs/*.md, kept true: every fenced block that starts with a line
``$ hybridplan …`` holds exactly what that command prints at 100 columns.

    python scripts/docs.py          # list the blocks that differ (exit 1 if any)
    python scripts/docs.py --write  # rewrite them from the commands' output

Commands run from the repository root, in-process; a block fenced as ```text is never run.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
WIDTH = 100
_BLOCK = re.compile(r"^```\n(\$ hybridplan [^\n]*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Example:
    path: Path
    command: str
    shown: str
    start: int
    end: int


def examples(path: Path) -> list[Example]:
    text = path.read_text(encoding="utf-8")
    return [Example(path, m.group(1)[2:], m.group(2), m.start(2), m.end(2)) for m in _BLOCK.finditer(text)]


def run(command: str) -> str:
    """What ``command`` prints (stdout, then stderr) at ``WIDTH`` columns, from the repository root."""
    from hybridplan.cli import main

    argv = shlex.split(command)[1:]
    out, err = io.StringIO(), io.StringIO()
    old_cwd, old_cols = Path.cwd(), os.environ.get("COLUMNS")
    os.chdir(ROOT)
    os.environ["COLUMNS"] = str(WIDTH)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main(argv)
    finally:
        os.chdir(old_cwd)
        if old_cols is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old_cols
    return out.getvalue() + err.getvalue()


def main() -> int:
    write = "--write" in sys.argv[1:]
    stale = 0
    for path in FILES:
        text = path.read_text(encoding="utf-8")
        for ex in reversed(examples(path)):
            now = run(ex.command)
            if now != ex.shown:
                stale += 1
                print(f"{path.relative_to(ROOT)}: $ {ex.command}")
                text = text[: ex.start] + now + text[ex.end :]
        if write:
            path.write_text(text, encoding="utf-8")
    if stale and not write:
        print(f"{stale} example(s) differ from what the commands print: python scripts/docs.py --write")
    return 1 if stale and not write else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
