"""Compare hybridplan's parameter counts with the model classes of transformers, built from each shipped
spec's config on PyTorch's meta device (no memory, no weights).

    python validation/weights.py [--json]

Needs torch and transformers (5.19 has every family below) in the interpreter that runs it; hybridplan is
imported from this checkout. For each shipped spec: the class transformers picks for the config
(``AutoModelForImageTextToText`` for the multimodal Qwen3.5 classes, so the vision tower is counted;
``AutoModelForCausalLM`` otherwise) is built with ``from_config`` under ``torch.device("meta")`` and its
parameters summed; hybridplan's count is ``hybridplan.weights.weights(spec).params`` (the loaded model and
vision tower, without multi-token-prediction layers, which no transformers class builds).

Known differences, each checked against the checkpoint itself and reported, not counted as mismatches:

* minimax-m1: transformers' MiniMax class is not the checkpoint's MiniMax-M1 layout; the official
  ``model.safetensors.index.json`` (MiniMax-AI/MiniMax-M1) gives 912,210,767,872 bytes, which is hybridplan's
  count at 2 bytes a parameter plus 2 more bytes for each of the 15,728,640 router weights kept in float32.
* kimi-linear-48b-a3b: the checkpoint holds each MoE layer's router bias (``e_score_correction_bias``, 26
  layers × 256 experts = 6,656 values), which the transformers class keeps as a buffer, not a parameter;
  hybridplan's count, with them, is the 49,122,681,728 of a scan of the checkpoint's 20 shards.

Exit status 0 when every other count matches exactly.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: model → (why hybridplan's count differs, the difference expected: None where the layouts differ outright)
KNOWN = {
    "minimax-m1": ("transformers' MiniMax class is another layout; the official index agrees with hybridplan", None),
    "kimi-linear-48b-a3b": ("the checkpoint's router biases, a buffer in transformers: 26 · 256", 26 * 256),
}
#: model_type transformers knows the checkpoint's class by, where the config's own is not registered
MODEL_TYPES = {"minimax_m1": "minimax"}


def transformers_count(config: dict) -> tuple[int, str]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    model_type = MODEL_TYPES.get(config["model_type"], config["model_type"])
    cfg = AutoConfig.for_model(model_type, **{k: v for k, v in config.items() if k != "model_type"})
    multimodal = "vision_config" in config
    with torch.device("meta"):
        model = (AutoModelForImageTextToText if multimodal else AutoModelForCausalLM).from_config(cfg)
    return sum(p.numel() for p in model.parameters()), type(model).__name__


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from hybridplan.loader import shipped_specs
    from hybridplan.weights import weights

    rows, bad = [], 0
    for spec in shipped_specs():
        ours = weights(spec).params
        theirs, cls = transformers_count(json.loads(spec.config_json))
        why, expected = KNOWN.get(spec.name, (None, None))
        known = why if expected is None or ours - theirs == expected else None
        ok = ours == theirs
        bad += not ok and known is None
        rows.append(
            {
                "model": spec.name,
                "class": cls,
                "hybridplan": ours,
                "transformers": theirs,
                "match": ok,
                "known_difference": None if ok else known,
            }
        )
    if args.json:
        print(json.dumps({"rows": rows, "mismatches": bad}, indent=2))
    else:
        for r in rows:
            mark = "=" if r["match"] else ("~" if r["known_difference"] else "≠")
            print(
                f"{r['model']:28} {r['hybridplan']:>17,} {mark} {r['transformers']:>17,}  {r['class']}"
                + (f"  ({r['known_difference']})" if r["known_difference"] else "")
            )
        print(f"{len(rows)} models, {sum(r['match'] for r in rows)} exact, {bad} unexplained")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
