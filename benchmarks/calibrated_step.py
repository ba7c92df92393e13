"""A profile's measured decode step and prefill beside `hybridplan speed --calibration`'s prediction for them.

    python benchmarks/calibrated_step.py PROFILE.json CALIBRATION.json [--gpu-type KEY] [--json]

PROFILE.json is `hybridplan profile MODEL --gpu N --json`'s output and CALIBRATION.json what the same run wrote
with --save-calibration (benchmarks/profile_gpu.sh writes both). The GPU's datasheet is found from the
profile's device name (nvidia-smi's spelling) unless --gpu-type names it. Prints each phase's predicted and
measured seconds and the error (hybridplan/speed/calibration.py ``check_profile``). Exit 0; 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from hybridplan.errors import PlanError
    from hybridplan.gpus import gpu
    from hybridplan.speed.calibration import check_profile, load
    from hybridplan.speed.gpus import datasheet

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile", type=Path)
    ap.add_argument("calibration", type=Path)
    ap.add_argument("--gpu-type")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    try:
        try:
            report = json.loads(a.profile.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise PlanError(f"cannot read the profile report {a.profile}: {exc}") from None
        cal = load(a.calibration)
        key = a.gpu_type or gpu(str(report.get("device", {}).get("name", ""))).key
        checks = check_profile(report, cal, datasheet(key))
    except PlanError as exc:
        print(f"calibrated_step.py: error: {exc}", file=sys.stderr)
        return 2
    if a.json:
        print(
            json.dumps(
                {
                    "model": report.get("model"),
                    "gpu": key,
                    "backend": cal.backend,
                    "phases": [c.to_dict() for c in checks],
                },
                indent=1,
            )
        )
        return 0
    print(f"{report.get('model')} on {key} ({cal.backend}): speed --calibration against the profile's own step")
    for c in checks:
        print(
            f"  {c.phase:<8} {c.rows:>2} rows  predicted {c.predicted_s * 1e3:10.3f} ms  measured "
            f"{c.measured_s * 1e3:10.3f} ms  {c.error:+.1%}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
