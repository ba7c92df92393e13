"""Write model_specs/index.json, the names, architecture and context of every shipped spec that the loader
reads in place of the 51 files (hybridplan/loader.py ``build_index``). Run it after adding or editing a spec;
tests/test_startup.py fails while the index and the specs disagree.

    python scripts/specs_index.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hybridplan import loader  # noqa: E402


def text() -> str:
    return json.dumps(loader.build_index(), indent=1, sort_keys=True) + "\n"


def main() -> int:
    path = Path(loader._specs_dir()) / loader.INDEX
    path.write_text(text(), encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
