"""The `replay` command's options and body (registered in hybridplan/cli.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

from hybridplan.errors import PlanError
from hybridplan.options import (
    ADMISSION,
    ALLOW_LONG,
    BUDGET,
    DTYPES,
    ENGINES,
    HICACHE,
    JSON,
    MODEL,
    SPEC_TOKENS,
    TP,
    Chunk,
    Flag,
    Options,
    argument,
    count_value,
    ctx_option,
    option,
    param,
    plot_option,
    tokens_option,
)

TRACE = (
    param(
        "trace",
        Flag(
            str,
            argument(
                metavar="TRACE",
                help="A Mooncake trace (JSONL with hash_ids), a JSONL of prompt_token_ids, a synthetic "
                "workload YAML, or the word synthetic to build one from --shared/--users/--turns/"
                "--private/--output.",
            ),
        ),
    ),
)

REPLAY = (
    param(
        "fmt",
        Flag(
            str,
            option("--format", metavar="FORMAT", help="auto, mooncake, tokens or synthetic (default: from the file)."),
        ),
        "auto",
    ),
    param(
        "concurrency",
        Flag(
            int,
            option(
                "--concurrency",
                metavar="N",
                parser=count_value("--concurrency"),
                help="Requests in flight at once (default 1: one after another).",
            ),
        ),
        1,
    ),
    param(
        "limit",
        Flag(
            Optional[int],
            option("--limit", metavar="N", parser=count_value("--limit"), help="Replay only the first N requests."),
        ),
        None,
    ),
    param(
        "retention",
        Flag(
            Optional[int],
            option(
                "--prefix-cache-retention-interval",
                metavar="TOKENS",
                parser=count_value("--prefix-cache-retention-interval"),
                help="vLLM's retention interval for Mamba states (0.29+; VLLM_PREFIX_CACHE_RETENTION_INTERVAL in "
                "0.24-0.28); 0 keeps only the replay boundary and shared-prefix junctions.",
            ),
        ),
        None,
    ),
    param(
        "match_unit",
        Flag(
            Optional[int],
            option(
                "--prefix-match-unit",
                metavar="TOKENS",
                parser=count_value("--prefix-match-unit"),
                help="vLLM --prefix-match-unit (0.26+): hash every TOKENS tokens; must divide the block.",
            ),
        ),
        None,
    ),
    param(
        "shared_ckpt",
        Flag(
            bool,
            option(
                "--enable-mamba-shared-prefix-checkpoint",
                help="vLLM's shared-prefix checkpoint (0.31+; --enable-mamba-fine-grained-prefix-cache in 0.30).",
            ),
        ),
        False,
    ),
    param(
        "blocks_override",
        Flag(
            Optional[int],
            option(
                "--num-gpu-blocks-override",
                metavar="N",
                parser=count_value("--num-gpu-blocks-override"),
                help="vLLM's block count instead of the budget's.",
            ),
        ),
        None,
    ),
    param(
        "max_total_tokens",
        Flag(
            Optional[int],
            option(
                "--max-total-tokens",
                metavar="N",
                parser=count_value("--max-total-tokens"),
                help="SGLang's KV pool tokens instead of the split's.",
            ),
        ),
        None,
    ),
    param(
        "states_per_path",
        Flag(
            int,
            option(
                "--mamba-max-states-per-path", metavar="N", help="SGLang --mamba-max-states-per-path (-1: unlimited)."
            ),
        ),
        -1,
    ),
    param(
        "int8_ckpt",
        Flag(
            bool,
            option("--enable-int8-mamba-checkpoint", help="SGLang's int8 Mamba checkpoints (twice the cached states)."),
        ),
        False,
    ),
    param("shared", tokens_option("--shared", "synthetic: tokens of the system prompt every request shares."), None),
    param(
        "users", Flag(int, option("--users", metavar="N", parser=count_value("--users"), help="synthetic: users.")), 1
    ),
    param(
        "turns",
        Flag(int, option("--turns", metavar="N", parser=count_value("--turns"), help="synthetic: turns per user.")),
        1,
    ),
    param("private", tokens_option("--private", "synthetic: each turn's own tokens."), None),
    param("output", tokens_option("--output", "synthetic: tokens each request generates."), None),
    param(
        "order",
        Flag(
            str,
            option(
                "--order",
                metavar="ORDER",
                help="synthetic: round-robin (every user's turn 1, then turn 2...) or user-by-user.",
            ),
        ),
        "round-robin",
    ),
    param(
        "no_history",
        Flag(bool, option("--no-history", help="synthetic: a turn's prompt does not repeat the earlier turns.")),
        False,
    ),
    param(
        "plot",
        plot_option(
            "Write each row's hit rate over the trace and its gap to the ideal cache by cause "
            "to this file; with --plot-over, the hit rate against the budget or the block"
        ),
        None,
    ),
    param(
        "plot_over",
        Flag(
            Optional[str],
            option(
                "--plot-over",
                metavar="WHAT",
                help="With --plot: budget (multiples of the one given) or block (vLLM --block-size multiples).",
            ),
        ),
        None,
    ),
    param("no_requests", Flag(bool, option("--no-requests", help="--json without the per-request list.")), False),
    param(
        "requests_out",
        Flag(
            Optional[str],
            option(
                "--requests-out",
                metavar="FILE.jsonl",
                help="Write one JSON line per request: its prompt, what it shares with an earlier one, and per row what "
                "it reused and why.",
            ),
        ),
        None,
    ),
    param(
        "no_gap",
        Flag(
            bool,
            option("--no-gap", help="Skip the gap to the ideal cache, cause by cause (its counterfactual replays)."),
        ),
        False,
    ),
)

GROUPS = (
    TRACE,
    MODEL,
    (param("ctx", ctx_option("max_model_len (default: the model's maximum):"), None),),
    BUDGET,
    ADMISSION,
    TP,
    ENGINES,
    (param("chunk", Chunk, None),),
    DTYPES,
    SPEC_TOKENS,
    REPLAY,
    HICACHE,
    ALLOW_LONG,
    JSON,
)


def _progress(total_hint: int | None):
    """A rich progress bar on stderr, only on a terminal: the requests replayed, of how many where --limit says,
    and how many a second."""
    if not sys.stderr.isatty():
        return None

    def wrap(reqs: Iterator) -> Iterator:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
        from rich.text import Text

        class Rate(ProgressColumn):
            def render(self, task) -> Text:
                return Text(f"{task.speed:,.0f} requests/s" if task.speed else "")

        count = "{task.completed:,.0f} / {task.total:,.0f} requests" if total_hint else "{task.completed:,.0f} requests"
        columns = [
            TextColumn("replaying"),
            *([BarColumn()] if total_hint else []),
            TextColumn(count),
            Rate(),
            TimeElapsedColumn(),
        ]
        with Progress(*columns, transient=True, console=Console(stderr=True)) as bar:
            task = bar.add_task("replaying", total=total_hint)
            i = 0
            for i, r in enumerate(reqs):
                if i % 64 == 0:
                    bar.update(task, completed=i)
                yield r
            bar.update(task, completed=i + 1)

    return wrap


def write_requests(report, path: str) -> None:
    """``--requests-out``: one JSON line per request (``ReplayReport.request_lines``)."""
    import json

    try:
        with open(path, "w", encoding="utf-8") as f:
            for line in report.request_lines():
                f.write(json.dumps(line, ensure_ascii=False) + "\n")
    except OSError as exc:
        raise PlanError(f"--requests-out {path}: {exc.strerror or exc}") from None


def replay(o: Options) -> None:
    """Replay a sequence of requests through each engine's prefix cache — vLLM per Mamba cache mode, SGLang's
    radix strategy — at the memory the engine would have, beside the model's attention layers alone and an
    ideal cache: token hit rate, requests with a hit, tokens computed, prefill FLOPs saved, states and blocks
    held, evictions; each row's gap to the ideal cache split by cause (concurrency, eviction, max_model_len,
    caching off, checkpoint policy, hash unit, grid), with the flag or memory that recovers each and the hit
    rate replayed with it; and for each miss the reason. A pasted `vllm serve MODEL …` or SGLang line after --
    names the model. docs/replay.md gives the semantics.

    Examples:

    \b
      hybridplan replay synthetic qwen3.5-4b --shared 1500 --private 700 --users 64 --kv-budget 40GiB
      hybridplan replay tests/data/traces/mooncake-conversation-300.jsonl qwen3-next --tp 4 --kv-budget 60GiB
      hybridplan replay chat.yaml nemotron-h --gpu-type h100 --concurrency 8 --json
    """
    from hybridplan.build import scenario
    from hybridplan.replay import trace as tr
    from hybridplan.replay.settings import ReplaySettings
    from hybridplan.reports.replay import replay_report

    sc = scenario(o)
    rs = ReplaySettings(
        concurrency=o.concurrency,
        limit=o.limit,
        retention_interval=o.retention,
        prefix_match_unit=o.match_unit,
        shared_prefix_checkpoint=o.shared_ckpt,
        num_gpu_blocks_override=o.blocks_override,
        max_total_tokens=o.max_total_tokens,
        mamba_max_states_per_path=o.states_per_path,
        int8_checkpoint=o.int8_ckpt,
        per_request=not o.no_requests,
        gap=not o.no_gap,
    )
    synth_flags = (
        [f for f, v in (("--shared", o.shared), ("--private", o.private), ("--output", o.output)) if v is not None]
        + (["--users"] if o.users != 1 else [])
        + (["--turns"] if o.turns != 1 else [])
    )
    if o.trace == "synthetic":
        w = tr.Synthetic(
            shared=o.shared or 0,
            users=o.users,
            turns=o.turns,
            private=o.private or 0,
            output=o.output or 0,
            history=not o.no_history,
            order=o.order,
        )
        factory, label = (
            w.requests,
            (
                f"a synthetic workload ({o.shared or 0:,} shared, {o.users:,} users × "
                f"{o.turns:,} turn{'s' if o.turns != 1 else ''} of {o.private or 0:,} private + {o.output or 0:,} output)"
            ),
        )
    else:
        if synth_flags:
            raise PlanError(f"{', '.join(synth_flags)} build a synthetic workload: give TRACE as synthetic")
        path = Path(o.trace)
        fmt = o.fmt if o.fmt != "auto" else tr.detect(path) if path.exists() else "auto"
        factory, label = (lambda: tr.read(path, fmt)), f"{path.name} ({fmt})"
        factory()  # a missing file or an unknown format is refused before anything runs
    if o.plot_over is not None and o.plot_over not in ("budget", "block"):
        raise PlanError(f"--plot-over takes budget or block, got {o.plot_over!r}")
    if o.plot_over is not None and o.plot is None:
        raise PlanError("--plot-over sweeps for a plot: give --plot FILE.png as well")
    report = replay_report(sc, rs, factory, label, _progress(o.limit), sweep_over=o.plot_over)
    if o.requests_out is not None:
        write_requests(report, o.requests_out)
    from hybridplan.show import show

    show(report, o, "hybridplan.render_replay:replay_view", "replay_plot")
