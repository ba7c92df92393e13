"""Every figure `replay` computes, for 126 replays, as one JSON file, to show that a change to the replay's code
changes none of them (a speed-up, a refactor).

    python benchmarks/replay_fingerprint.py --write before.json     # on the code before
    python benchmarks/replay_fingerprint.py --compare before.json   # on the code after: exit 1 on a difference

``--only`` takes some of the configurations by name.

The replays: 21 configurations (Qwen3.5-4B on vLLM 0.23, 0.24, 0.26, 0.29, 0.31, 0.33 with every mode the
release has; retention 1056, --prefix-match-unit 16 and 48, MTP, the shared-prefix checkpoint, tight block pools,
concurrency 2-4, max_model_len 4096; Nemotron-H-8B in all mode; SGLang 0.5.9 and 0.5.23 no_buffer and
extra_buffer, the path cap, int8, a tight KV pool) over 6 traces (the Mooncake excerpt, 900 requests of it with
repeated ids, a token-id trace, three synthetic ones), every row `replay` shows and the ideal cache; per row
the totals, reasons, refusals, evictions and peaks, and per request its prompt, reuse, attention hit, shared
prefix and reason. About three minutes on two cores.
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

from msgspec.structs import replace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from hybridplan.replay.loop import replay  # noqa: E402
from hybridplan.replay.settings import ReplaySettings  # noqa: E402
from hybridplan.replay.trace import Synthetic, mooncake, read  # noqa: E402
from hybridplan.reports.replay import policies  # noqa: E402
from hybridplan.scenario import Budget, Speculative  # noqa: E402
from tests.helpers import GiB, scenario  # noqa: E402

MOON = ROOT / "tests/data/traces/mooncake-conversation-300.jsonl"


def write_traces(tmp: Path) -> None:
    """The two trace files: the excerpt to 900 lines (ids shifted every other cycle), a token-id trace."""
    lines = [json.loads(x) for x in MOON.read_text().splitlines() if x.strip()]
    with (tmp / "m900.jsonl").open("w") as fh:
        for i in range(900):
            rec = dict(lines[i % 300])
            c = i // 300
            rec["hash_ids"] = [h + (c % 2) * 100000 for h in rec["hash_ids"]]
            fh.write(json.dumps(rec) + "\n")
    with (tmp / "tok.jsonl").open("w") as fh:
        shared = list(range(3000))
        for u in range(12):
            ids = shared[: 1000 + 250 * (u % 5)] + [10_000 + 1000 * (u % 4) + j for j in range(300 + 37 * u)]
            fh.write(json.dumps({"prompt_token_ids": ids, "output_len": 5 + u}) + "\n")


def traces(tmp: Path) -> dict:
    """name → a factory of its requests (the files from ``write_traces``)."""
    return {
        "moon": lambda: mooncake(MOON),
        "moon900": lambda: mooncake(tmp / "m900.jsonl"),
        "tok": lambda: read(tmp / "tok.jsonl"),
        "syn": lambda: Synthetic(shared=1500, users=16, turns=3, private=700, output=40).requests(),
        "syn-nohist": lambda: Synthetic(
            shared=2900, users=10, turns=2, private=333, output=600, history=False, order="user-by-user"
        ).requests(),
        "syn-groups": lambda: Synthetic(
            shared=1200, users=12, private=300, output=4, group_size=4, group_shared=2500, turns=2
        ).requests(),
    }


def dump(runs, ideal) -> dict:
    """Every figure of each row and of the ideal cache, per request too."""
    out = {}
    for label, r in list(runs.items()) + [("ideal", ideal)]:
        out[label] = {
            "requests": r.requests,
            "prompt": r.prompt_tokens,
            "reused": r.reused_tokens,
            "with_hit": r.with_hit,
            "refused": r.refused,
            "reasons": dict(sorted(r.reasons.items())),
            "sq": r.reused_sq,
            "ev": r.evictions,
            "ps": r.peak_states,
            "pb": r.peak_blocks,
            "outcomes": [[o.index, o.prompt, o.reused, o.attention_hit, o.shared, o.reason] for o in r.outcomes],
        }
    return out


CONFIGS = []
for minor in (23, 24, 26, 29, 31, 33):
    CONFIGS.append((f"q4-{minor}", dict(model="qwen3.5-4b", ctx=32768, minor=minor), {}))
CONFIGS += [
    ("q4-29-ret528", dict(model="qwen3.5-4b", ctx=32768, minor=29), dict(retention_interval=1056)),
    ("q4-26-unit16", dict(model="qwen3.5-4b", ctx=32768, minor=26), dict(prefix_match_unit=16)),
    ("q4-29-unit48-c3", dict(model="qwen3.5-4b", ctx=32768, minor=29), dict(prefix_match_unit=48, concurrency=3)),
    ("q4-29-mtp", dict(model="qwen3.5-4b", ctx=32768, minor=29, mtp=True), {}),
    (
        "q4-31-mtp-spc",
        dict(model="qwen3.5-4b", ctx=32768, minor=31, mtp=True, vllm=dict(mode="align")),
        dict(prefix_match_unit=16, shared_prefix_checkpoint=True),
    ),
    (
        "q4-29-tight",
        dict(model="qwen3.5-4b", ctx=32768, minor=29, budget=4 * GiB, chunk=2048),
        dict(num_gpu_blocks_override=60, max_total_tokens=40000, concurrency=2),
    ),
    (
        "q4-23-tight-c4",
        dict(model="qwen3.5-4b", ctx=32768, minor=23, chunk=1024),
        dict(num_gpu_blocks_override=90, concurrency=4),
    ),
    ("q4-33-tight", dict(model="qwen3.5-4b", ctx=32768, minor=33), dict(num_gpu_blocks_override=45)),
    ("nh-27-all", dict(model="nemotron-h-8b", ctx=16384, minor=27), {}),
    ("nh-27-all-tight", dict(model="nemotron-h-8b", ctx=16384, minor=27), dict(num_gpu_blocks_override=70)),
    ("q4-sg9-states2", dict(model="qwen3.5-4b", ctx=32768, minor=29, sglang_version="0.5.9"), {}),
    (
        "q4-sg23-eb",
        dict(
            model="qwen3.5-4b",
            ctx=32768,
            minor=29,
            sglang_version="0.5.23",
            chunk=512,
            sglang=dict(radix="extra_buffer"),
        ),
        dict(mamba_max_states_per_path=2),
    ),
    (
        "q4-sg23-eb-int8",
        dict(
            model="qwen3.5-4b",
            ctx=32768,
            minor=29,
            sglang_version="0.5.23",
            sglang=dict(radix="extra_buffer"),
            budget=3 * GiB,
        ),
        dict(int8_checkpoint=True),
    ),
    (
        "q4-sg23-nb-tight",
        dict(
            model="qwen3.5-4b",
            ctx=32768,
            minor=29,
            sglang_version="0.5.23",
            chunk=2048,
            sglang=dict(radix="no_buffer", page_size=1, overlap=False),
        ),
        dict(max_total_tokens=30000, concurrency=2),
    ),
    ("q4-ctx4k", dict(model="qwen3.5-4b", ctx=4096, minor=29), {}),
]


def build(cfg: dict):
    """The scenario of one configuration (mtp: two MTP tokens; budget: the KV budget, 40 GiB unless given)."""
    cfg = dict(cfg)
    mtp = cfg.pop("mtp", False)
    budget = cfg.pop("budget", 40 * GiB)
    sc = scenario(cfg.pop("model"), cfg.pop("ctx"), budget=Budget(kv_budget=budget), **cfg)
    if mtp:
        sc = replace(sc, spec_tokens=2, speculative=Speculative("mtp", 2))
    return sc


def fingerprint(only: set[str] | None = None) -> dict:
    result = {}
    with tempfile.TemporaryDirectory(prefix="hybridplan-fingerprint-") as tmp:
        write_traces(Path(tmp))
        for name, cfg, rsk in CONFIGS:
            if only is not None and name not in only:
                continue
            sc = build(cfg)
            rs = ReplaySettings(**rsk)
            for tname, f in traces(Path(tmp)).items():
                pols = [p for _, p, _ in policies(sc, rs)[0]]
                runs, ideal = replay(pols, f(), rs.concurrency)
                result[f"{name}/{tname}"] = dump(runs, ideal)
    return json.loads(json.dumps(result))  # as read back from a file (tuples as lists)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", type=Path, metavar="FILE")
    group.add_argument("--compare", type=Path, metavar="FILE")
    ap.add_argument("--only", metavar="NAMES", help="comma-separated configuration names (all by default)")
    args = ap.parse_args()
    only = None
    if args.only:
        only = set(args.only.split(","))
        unknown = only - {name for name, _, _ in CONFIGS}
        if unknown:
            ap.error(f"unknown configurations: {', '.join(sorted(unknown))}")
    now = fingerprint(only)
    if args.write:
        args.write.write_text(json.dumps(now, sort_keys=True))
        print(f"{len(now)} replays written to {args.write}")
        return 0
    before = json.loads(args.compare.read_text())
    differ = []
    for case in sorted(set(before) | set(now)):
        a, b = before.get(case), now.get(case)
        if a == b:
            continue
        if a is None or b is None:
            differ.append(f"{case}: only {'after' if a is None else 'before'}")
            continue
        for label in sorted(set(a) | set(b)):
            x, y = a.get(label) or {}, b.get(label) or {}
            fields = [f for f in sorted(set(x) | set(y)) if x.get(f) != y.get(f)]
            if fields:
                differ.append(f"{case} {label}: {', '.join(fields)}")
    print(f"{len(now)} replays compared, {len(differ)} rows differ")
    for line in differ:
        print("  " + line)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
