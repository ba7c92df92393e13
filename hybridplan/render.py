"""Rich tables for the planner's reports. Rendering reads report fields; it never computes a figure."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from hybridplan.units import human_bytes, human_tokens

if TYPE_CHECKING:
    from hybridplan.plan import CrossoverReport, SizeReport
    from hybridplan.spec import ModelSpec


def console(stderr: bool = False) -> Console:
    """A terminal keeps its own width; a pipe or file gets 120 columns so the tables stay whole."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, highlight=False, width=None if stream.isatty() else 120)


_SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float8_e4m3fn": "fp8", "float8_e5m2": "fp8e5m2"}


def _short(dtype: str | None) -> str:
    return _SHORT.get(dtype, dtype or "—")


def _shape(shape, dtype: str | None = None) -> str:
    if not shape:
        return "—"
    text = "×".join(str(d) for d in shape)
    return f"{text} {_short(dtype)}" if dtype else text


def _b(n: int, exact: bool) -> str:
    return human_bytes(n, exact=exact)


def _notes(spec: ModelSpec) -> list[Text]:
    return [Text(f"note: {n}", style="yellow") for n in spec.notes]


def _layers_line(counts: dict[str, int]) -> str:
    return " · ".join(f"{v} {k}" for k, v in counts.items())


def size_view(r: SizeReport, *, exact: bool = False) -> Group:
    fp, spec = r.fp, r.spec
    head = Text.assemble((spec.name, "bold"), f"  {spec.architecture}  ·  TP {fp.tp}  ·  ctx {r.ctx:,}")
    parts: list = [head, Text(f"layers: {_layers_line(spec.layer_counts)}  ·  dtype rules: vLLM "
                              f"{r.vllm_release.version}", style="dim")]
    if fp.spec_tokens:
        parts.append(Text(f"speculative tokens: {fp.spec_tokens}", style="dim"))

    if fp.state:
        t = Table(title="Recurrent state per sequence (per layer, one rank)", box=box.SIMPLE_HEAD,
                  title_justify="left")
        for col in ("kind", "layers", "conv state", "SSM state", "conv", "SSM", "per layer", "all layers"):
            t.add_column(col, justify="left" if col in ("kind", "conv state", "SSM state") else "right",
                         no_wrap=col in ("conv state", "SSM state"))
        for g in fp.state:
            t.add_row(g.kind, str(g.count), _shape(g.conv_shape, g.conv_dtype), _shape(g.ssm_shape, g.ssm_dtype),
                      _b(g.conv_bytes_per_layer, exact), _b(g.ssm_bytes_per_layer, exact),
                      _b(g.bytes_per_layer, exact), _b(g.bytes, exact))
        parts.append(t)

    if fp.kv:
        t = Table(title=f"Attention KV (one rank), at {r.ctx:,} tokens", box=box.SIMPLE_HEAD, title_justify="left")
        for col in ("kind", "layers", "dtype", "window", "per token · layer", "per token", "at ctx"):
            t.add_column(col, justify="left" if col in ("kind", "dtype") else "right")
        for g in fp.kv:
            t.add_row(g.kind, str(g.count), _short(g.dtype), f"{g.window:,}" if g.window else "—",
                      _b(g.bytes_per_token_per_layer, exact), _b(g.bytes_per_token, exact),
                      _b(g.bytes_at(r.ctx), exact))
        parts.append(t)

    s = Table(box=box.SIMPLE_HEAD, show_header=False, title="Per sequence", title_justify="left")
    s.add_column(style="bold")
    s.add_column(justify="right")
    s.add_column(style="dim")
    if fp.state:
        share = 100 * fp.conv_bytes / fp.state_bytes if fp.state_bytes else 0.0
        s.add_row("recurrent state", _b(fp.state_bytes, exact), f"conv {share:.1f} % · SSM {100 - share:.1f} %")
    if fp.kv:
        s.add_row(f"KV at {r.ctx:,} tokens", _b(fp.kv_bytes_at(r.ctx), exact),
                  f"{human_bytes(fp.kv_bytes_per_token)} per token")
    s.add_row(f"total at {r.ctx:,} tokens", _b(r.total_at_ctx, exact), "")
    verdict = "hybrid smaller" if r.ratio > 1 else "hybrid larger"
    s.add_row(f"{r.ref.name} at {r.ctx:,} tokens", _b(r.ref_at_ctx, exact),
              f"{r.ratio:.2f}× the hybrid ({verdict})")
    s.add_row(f"pool of {r.slots:,} slots", _b(fp.pool_bytes(r.slots), exact), "recurrent state only")
    parts.append(s)
    parts.extend(_notes(spec))
    return Group(*parts)


def crossover_view(r: CrossoverReport) -> Group:
    d = r.to_dict()
    head = Text.assemble((r.spec.name, "bold"), f" vs {r.ref.name}  ·  TP {r.tp}  ·  ",
                         f"reference KV {human_bytes(r.ref_fp.kv_bytes_per_token)}/token, "
                         f"hybrid KV {human_bytes(r.fp.kv_bytes_per_token)}/token")
    t = Table(title="Crossover: context where the reference's KV reaches the hybrid's memory",
              box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("SSM dtype", "state / sequence", "= state only", "first smaller", "= state + KV", "first smaller"):
        t.add_column(col, justify="left" if col == "SSM dtype" else "right")
    for row in d["rows"]:
        t.add_row(row["ssm_dtype"], human_bytes(row["state_bytes"]), human_tokens(row["state_only_tokens"]),
                  human_tokens(row["state_only_first_smaller"]), human_tokens(row["total_tokens"]),
                  human_tokens(row["total_first_smaller"]))
    lad = Table(title=f"Memory per sequence (SSM {r.fp.dtypes.ssm})", box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("context", r.spec.name, r.ref.name, "ratio"):
        lad.add_column(col, justify="right")
    for row in d["ladder"]:
        lad.add_row(f"{row['ctx']:,}", human_bytes(row["hybrid_bytes"]), human_bytes(row["reference_bytes"]),
                    f"{row['ratio']:.2f}×")
    return Group(head, t, lad, *_notes(r.spec))


def models_view(specs: list[ModelSpec]) -> Table:
    t = Table(title="Shipped model specs", box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("name", "aliases", "family", "layers", "source"):
        t.add_column(col)
    for s in specs:
        t.add_row(s.name, ", ".join(s.aliases), s.family, _layers_line(s.layer_counts), s.source or "")
    return t
