"""Write a shipped spec (model_specs/NAME.yaml) from a model's real config.json: its name, aliases, the Hub id
it came from, and every field of the config, unchanged.

    python scripts/spec_from_config.py CONFIG.json --name NAME --source ORG/MODEL [--alias A ...] [--revision R]

The spec is read back through hybridplan before it is written, so a config hybridplan cannot read is refused.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", type=Path)
    ap.add_argument("--name", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--alias", action="append", default=[])
    ap.add_argument("--revision")
    args = ap.parse_args()
    config = json.loads(args.config.read_text())
    sys.path.insert(0, str(ROOT))
    from hybridplan.adapters import spec_from_config

    spec_from_config(config, name=args.name, source=args.source)
    text = f"name: {args.name}\naliases: [{', '.join(args.alias)}]\nsource: {args.source}\n"
    if args.revision:
        text += f"revision: {args.revision}\n"
    text += yaml.safe_dump({"config": config}, sort_keys=True, default_flow_style=None, width=120, allow_unicode=True)
    out = ROOT / "model_specs" / f"{args.name}.yaml"
    out.write_text(text)
    print(out.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
