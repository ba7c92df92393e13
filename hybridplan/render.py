"""Rich tables for the planner's reports. Rendering reads report fields; it never computes a figure."""

from __future__ import annotations

import io
import os
import re
import shutil
import sys
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Union

from msgspec import Struct, field
from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text

from hybridplan.output import write
from hybridplan.units import human_bytes, human_tokens

if TYPE_CHECKING:
    from hybridplan.reports.check_log import CheckReport
    from hybridplan.reports.crossover import CrossoverReport
    from hybridplan.reports.engines import EngineReport
    from hybridplan.reports.fit import FitReport
    from hybridplan.reports.models import ModelsReport
    from hybridplan.reports.prefix import PrefixReport, SweepReport
    from hybridplan.reports.size import SizeReport


#: the columns of a pipe or a file with no ``COLUMNS``: wide enough that nothing wraps (rich itself would take 80,
#: and cut or fold a table to fit), so that a line greps whole and a table keeps every column
UNWRAPPED = 1000


def width(stream=None) -> int:
    """The columns output may use: ``COLUMNS`` when set, else the terminal's, else ``UNWRAPPED`` for a pipe or a
    file: every table at its natural width, every note and caption on one line."""
    stream = stream or sys.stdout
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) >= 20:
        return int(env)
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        tty = False
    if tty:
        return shutil.get_terminal_size().columns
    return UNWRAPPED


def console(stderr: bool = False) -> Console:
    """A console on stdout (or stderr) at ``width()``."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, highlight=False, width=width(stream))


_TRAILING = re.compile(r"[ \t]+(?=(?:\x1b\[[0-9;]*m)*$)")


def emit(renderable: RenderableType) -> None:
    """Print a view on stdout at ``width()`` columns, colours only on a terminal, no trailing spaces."""
    tty = sys.stdout.isatty()
    buf = io.StringIO()
    Console(
        file=buf,
        width=width(),
        force_terminal=tty,
        color_system="auto" if tty else None,
        highlight=False,
        legacy_windows=False,
    ).print(renderable, crop=False)
    lines = [_TRAILING.sub("", line) for line in buf.getvalue().splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    write("".join(line + "\n" for line in lines))


Cell = Union[str, Text]


def _plain(cell: Cell) -> str:
    return cell.plain if isinstance(cell, Text) else cell


def _len(cell: Cell) -> int:
    """The widest line of a cell (a cell may hold several lines)."""
    return max(cell_len(line) for line in _plain(cell).split("\n"))


class Rows(Struct, frozen=True):
    """A table that never cuts a cell. Every column is kept as wide as its widest cell (headers wrap between
    words instead), except ``prose`` columns, which wrap. Where that is wider than the output, the columns
    close up, then the ``optional`` ones are left out in that order, and as a last resort the rows are
    stacked: each row's first cell, then one ``header: value`` line per other cell."""

    header: Sequence[str] | None
    rows: Sequence[Sequence[Cell]]
    title: str | None = None
    left: Collection[int] = (0,)
    prose: Collection[int] = ()
    styles: Mapping[int, str] = field(default_factory=dict)
    sections: Collection[int] = ()
    caption: str | None = None
    optional: Sequence[int] = ()

    def _ncols(self) -> int:
        return len(self.header) if self.header is not None else max((len(r) for r in self.rows), default=0)

    def table(self, columns: Sequence[int] | None = None, compact: bool = False, fold: bool = True) -> Table:
        columns = range(self._ncols()) if columns is None else columns
        t = Table(
            box=box.SIMPLE_HEAD,
            show_header=self.header is not None,
            collapse_padding=compact,
            pad_edge=not compact,
            show_edge=not compact,
        )
        for i in columns:
            head = self.header[i] if self.header is not None else ""
            widest = max([_len(r[i]) for r in self.rows if i < len(r)] or [0])
            kept = i not in self.prose  # as wide as its widest cell; the header wraps to that width instead
            words = max([cell_len(w) for r in self.rows if i < len(r) for w in _plain(r[i]).split()] or [1])
            t.add_column(
                _fold(head, widest) if kept and fold else head,
                justify="left" if i in self.left else "right",
                style=self.styles.get(i),
                no_wrap=kept,
                min_width=None if kept else words,
                overflow="ellipsis",
            )
        for n, row in enumerate(self.rows):
            t.add_row(*(row[i] if i < len(row) else "" for i in columns), end_section=n in self.sections)
        return t

    def _layouts(self):
        every = list(range(self._ncols()))
        yield self.table(every, fold=False)  # headers on one line where the output is wide enough
        yield self.table(every, compact=True, fold=False)
        yield self.table(every)
        yield self.table(every, compact=True)
        kept = every
        for drop in self.optional:
            kept = [i for i in kept if i != drop]
            yield self.table(kept, compact=True)

    def stacked(self) -> Group:
        lines: list = []
        for row in self.rows:
            if not row:
                continue
            lines.append(Text(row[0].plain if isinstance(row[0], Text) else row[0], style="bold"))
            for i, cell in enumerate(row[1:], 1):
                text = cell.plain if isinstance(cell, Text) else cell
                if text:
                    head = self.header[i] if self.header is not None else ""
                    lines.append(Text(f"  {head}: {text}" if head else f"  {text}"))
        return Group(*lines)

    def _best(self, width: int) -> Table | None:
        """Every column with its edges, else closed up, else with fewer columns: the first that fits. With every
        column, headers stay on one line unless folding them lets a prose column wrap less."""
        layouts = list(self._layouts())
        for pair in (layouts[0:3:2], layouts[1:4:2]):  # (one-line headers, folded), with edges then closed up
            fitting = [(h, i, t) for i, t in enumerate(pair) if (h := _height(t, width)) is not None]
            if fitting:
                return min(fitting, key=lambda x: x[:2])[2]
        return next((t for t in layouts[4:] if _height(t, width) is not None), None)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.title:
            yield Text(self.title, style="bold")
        table = self._best(options.max_width)
        if table is not None and not table.show_edge:  # closed up: keep the blank lines the edges gave
            yield Group(Text(), table, Text())
        else:
            yield self.stacked() if table is None else table
        if self.caption:
            yield Text(self.caption, style="dim")


def _fold(head: str, width: int) -> str:
    """A header broken between words into lines of at most ``width`` (a longer word keeps its own line)."""
    lines: list[str] = []
    for word in head.split():
        if lines and cell_len(lines[-1]) + 1 + cell_len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "\n".join(lines)


def _height(renderable: RenderableType, width: int) -> int | None:
    """The lines ``renderable`` takes in ``width`` columns, or None where a line is wider or a cell is cut (rich
    marks a cut with "…", which no cell of ours holds)."""
    probe = Console(file=io.StringIO(), width=width, color_system=None, legacy_windows=False)
    probe.print(renderable, crop=False)
    lines = probe.file.getvalue().splitlines()  # type: ignore[attr-defined]  # the StringIO given above
    if any("…" in line or cell_len(line.rstrip()) > width for line in lines):
        return None
    return len(lines)


def log_line(line: str, prefix: str = "  ") -> Text:
    """An engine's own log line, as the engine prints it: whole on one line into a pipe or a file (it greps as
    the engine's), and on a terminal narrower than it broken at spaces only, never inside a flag or a number,
    the rest indented under it."""
    from hybridplan.output import wrap_words

    return Text(
        "\n".join(wrap_words(line, min(width(), UNWRAPPED), prefix)), style="dim", no_wrap=True, overflow="ignore"
    )


def labelled(label: str, text: str | Text, style: str | None = None) -> Table:
    """``label`` and a text that wraps under itself, not under the label."""
    g = Table.grid(padding=(0, 1))
    g.add_column(no_wrap=True, style=style)
    g.add_column(style=style)
    g.add_row(label, text)
    return g


def note(text: str) -> Table:
    return labelled("note:", text, style="yellow")


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


def _notes(notes: Iterable[str]) -> list[Table]:
    return [note(n) for n in notes]


def _layers_line(counts: dict[str, int]) -> str:
    return " · ".join(f"{v} {k}" for k, v in counts.items())


def _gb(n: int) -> str:
    """A size as a person typed it: GiB, and GB (10^9 bytes) beside it."""
    return f"{human_bytes(n)} = {n / 1e9:,.3g} GB"


def _weights_table(w, exact: bool) -> Rows:
    """Parameters, bytes and bytes per rank; what a plain start leaves out said plainly."""
    notes = [
        f"vision tower {w.vision_params / 1e9:.2f}B included" if w.vision_params else "",
        f"MTP layers {w.mtp_params / 1e9:.2f}B not loaded" if w.mtp_params else "",
    ]
    rows = [
        ("parameters", f"{w.params / 1e9:.2f}B", "; ".join(n for n in notes if n)),
        ("bytes", _b(w.bytes, exact), w.quantization or _short(w.dtype)),
    ]
    if w.tp > 1:
        rows.append(("per rank", _b(w.bytes_per_rank, exact), f"TP {w.tp}, as vLLM shards them"))
    return Rows(
        None, rows, title=f"Weights (from the {w.source})", left=(0, 2), prose=(2,), styles={0: "bold", 2: "dim"}
    )


def size_view(r: SizeReport, *, exact: bool = False) -> Group:
    fp, spec = r.fp, r.spec
    head = Text.assemble((spec.name, "bold"), f"  {spec.architecture}  ·  TP {fp.tp}  ·  ctx {r.ctx:,}")
    parts: list = [
        head,
        Text(f"layers: {_layers_line(spec.layer_counts)}  ·  dtype rules: vLLM {r.vllm_release.version}", style="dim"),
    ]
    if fp.spec_tokens:
        parts.append(Text(f"speculative tokens: {fp.spec_tokens}", style="dim"))
    if fp.state:
        parts.append(
            Rows(
                ("kind", "layers", "conv state", "SSM state", "conv", "SSM", "per layer", "all layers"),
                [
                    (
                        g.kind,
                        f"{g.count:,}",
                        _shape(g.conv_shape, g.conv_dtype),
                        _shape(g.ssm_shape, g.ssm_dtype),
                        _b(g.conv_bytes_per_layer, exact),
                        _b(g.ssm_bytes_per_layer, exact),
                        _b(g.bytes_per_layer, exact),
                        _b(g.bytes, exact),
                    )
                    for g in fp.state
                ],
                title="Recurrent state per sequence (per layer, one rank)",
                left=(0, 2, 3),
                optional=(4, 5),
            )
        )
    if fp.kv:
        parts.append(
            Rows(
                ("kind", "layers", "dtype", "window", "per token · layer", "per token", "at ctx"),
                [
                    (
                        g.kind,
                        f"{g.count:,}",
                        _short(g.dtype),
                        f"{g.window:,}" if g.window else "—",
                        _b(g.bytes_per_token_per_layer, exact),
                        _b(g.bytes_per_token, exact),
                        _b(g.bytes_at(r.ctx), exact),
                    )
                    for g in fp.kv
                ],
                title=f"Attention KV (one rank), at {r.ctx:,} tokens",
                left=(0, 2),
            )
        )
    rows: list[tuple[str, str, str]] = []
    if fp.state:
        share = 100 * fp.conv_bytes / fp.state_bytes if fp.state_bytes else 0.0
        rows.append(("recurrent state", _b(fp.state_bytes, exact), f"conv {share:.1f} % · SSM {100 - share:.1f} %"))
    if fp.kv:
        rows.append(
            (
                f"KV at {r.ctx:,} tokens",
                _b(fp.kv_bytes_at(r.ctx), exact),
                f"{human_bytes(fp.kv_bytes_per_token)} per token",
            )
        )
    rows.append((f"total at {r.ctx:,} tokens", _b(r.total_at_ctx, exact), ""))
    verdict = "hybrid smaller" if r.ratio > 1 else "hybrid larger"
    rows.append(
        (f"{r.ref.name} at {r.ctx:,} tokens", _b(r.ref_at_ctx, exact), f"{r.ratio:.2f}× the hybrid ({verdict})")
    )
    rows.append((f"pool of {r.slots:,} slots", _b(fp.pool_bytes(r.slots), exact), "recurrent state only"))
    parts.append(Rows(None, rows, title="Per sequence", left=(0, 2), prose=(2,), styles={0: "bold", 2: "dim"}))
    if r.weights is not None:
        parts.append(_weights_table(r.weights, exact))
    parts.extend(_notes(r.notes))
    if r.engines is not None:
        parts.append(engines_view(r.engines, exact=exact, attention_only=not fp.state))
    return Group(*parts)


def crossover_view(r: CrossoverReport, *, exact: bool = False) -> Group:
    d = r.to_dict()
    ref_state = f" + {human_bytes(r.ref_fp.state_bytes)} state" if r.ref_fp.state_bytes else ""
    head = Text.assemble(
        (r.spec.name, "bold"),
        f" vs {r.ref.name}  ·  TP {r.tp}  ·  ",
        f"reference KV {human_bytes(r.ref_fp.kv_bytes_per_token)}/token{ref_state}, "
        f"hybrid KV {human_bytes(r.fp.kv_bytes_per_token)}/token",
    )
    t = Rows(
        ("SSM dtype", "state / sequence", "= state only", "first smaller", "= state + KV", "first smaller"),
        [
            (
                row["ssm_dtype"],
                _b(row["state_bytes"], exact),
                human_tokens(row["state_only_tokens"]),
                human_tokens(row["state_only_first_smaller"]),
                human_tokens(row["total_tokens"]),
                human_tokens(row["total_first_smaller"]),
            )
            for row in d["rows"]
        ],
        title="Crossover: context where the reference's memory reaches the hybrid's",
        caption="= state only: the context at which the reference needs as much as the hybrid's recurrent "
        "state alone; = state + KV: as much as its whole footprint; first smaller: the first whole "
        "context at which the hybrid needs less",
    )
    lad = Rows(
        ("context", r.spec.name, r.ref.name, "ratio"),
        [
            (
                f"{row['ctx']:,}",
                _b(row["hybrid_bytes"], exact),
                _b(row["reference_bytes"], exact),
                f"{row['ratio']:.2f}×",
            )
            for row in d["ladder"]
        ],
        title=f"Memory per sequence (SSM {r.fp.dtypes.ssm})",
        left=(),
    )
    return Group(head, t, lad, *_notes(r.spec.notes))


def gpus_view(r, *, exact: bool = False) -> Rows:
    return Rows(
        ("gpu", "name", "memory", "from", "source"),
        [(g.key, g.name, _b(g.total, exact), {"cuda": "CUDA"}.get(g.kind, g.kind), g.source) for g in r.gpus],
        title="GPUs (--gpu-type)",
        left=(0, 1, 3, 4),
        prose=(1, 4),
        styles={4: "dim"},
        optional=(4,),
    )


def models_view(r: ModelsReport) -> Rows:
    """One row a spec, its source checkpoint under its name: the two longest cells share a column, so that the
    family and the layers fit beside them at 120 columns."""
    return Rows(
        ("name / source", "aliases", "family", "layers"),
        [
            (
                Text.assemble((s.name, "bold"), *(("\n", (s.source, "dim")) if s.source else ())),
                ", ".join(s.aliases),
                s.family,
                _layers_line(s.layer_counts) + (f"\nquantized: {s.quantization.describe()}" if s.quantization else ""),
            )
            for s in r.specs
        ],
        title="Shipped model specs",
        left=range(4),
        prose=(1, 3),
        optional=(2, 3),
    )


def _vllm_attention_pages(v, exact: bool) -> list:
    """An attention-only model: one layout, no Mamba cache mode to choose (every mode lays it out alike)."""
    m = v.modes[v.default_mode] if v.default_mode in v.modes else next(iter(v.modes.values()))
    d = m.to_dict()
    t = Rows(
        ("block", "page", "KV / request"),
        [
            (
                f"{d['block_size']:,}" if d["block_size"] else "—",
                _b(d["page_bytes"], exact),
                f"{_b(d['kv_bytes_per_request'], exact)} ({d['kv_pages_per_request']:,} pages)",
            )
        ],
        title=f"vLLM {v.rel.version}: attention pages (no recurrent layers, so no Mamba cache mode)",
        left=(),
        caption="block: tokens per attention page; page: one layer's page; per request: the pages one "
        "request pins over all layers",
    )
    return [t, *(log_line(line) for line in m.layout.logs)]


def _vllm_pages(v, exact: bool, attention_only: bool = False) -> list:
    if attention_only:
        return _vllm_attention_pages(v, exact)
    rows = []
    for mode, m in v.modes.items():
        d = m.to_dict()
        rows.append(
            (
                mode,
                f"{d['block_size']:,}" if d["block_size"] else "—",
                _b(d["mamba_page_bytes"], exact),
                _b(d["page_bytes"], exact),
                f"{d['padding_pct']:.2f} %",
                f"{_b(d['state_bytes_per_request'], exact)} ({d['state_pages_per_request']:,} pages)",
                f"{_b(d['kv_bytes_per_request'], exact)} ({d['kv_pages_per_request']:,} pages)",
            )
        )
    parts: list = [
        Rows(
            ("mode", "block", "mamba page", "page", "padding", "state / request", "KV / request"),
            rows,
            title=f"vLLM {v.rel.version}: pages per mamba cache mode (default: {v.default_mode}; with "
            f"prefix caching: {v.prefix_mode})",
            caption="block: tokens per attention page; page: one layer's page, the state padded to "
            "it; per request: the pages one request pins over all layers",
            optional=(2, 3),
        )
    ]
    for mode, m in v.modes.items():
        parts.extend(log_line(line, f"  [{mode}] ") for line in m.layout.logs)
    return parts


def _slots(d: dict) -> str:
    n = d["state_slots_per_request"]
    return f"{d['radix_strategy']}: {n:,} state slot{'s' if n != 1 else ''} per request"


def _sglang_pool(p, exact: bool) -> list:
    d = p.to_dict()
    t = Rows(
        None,
        [
            ("conv state", _b(d["conv_state_bytes"], exact), _short(d["conv_dtype"])),
            ("SSM state", _b(d["ssm_state_bytes"], exact), _short(d["ssm_dtype"])),
            ("per request", _b(d["per_request_bytes"], exact), ""),
            ("max running requests", f"{d['max_running_requests']:,}", _slots(d)),
            ("checkpoint grid", f"{d['checkpoint_grid']:,} tokens", ""),
        ],
        title=f"SGLang {d['version']}: MambaPool of {d['slots']:,} slots (+1 padding row)",
        prose=(2,),
        styles={0: "bold", 2: "dim"},
    )
    return [t, log_line(d["logs"][0])]


_LAYOUT_VIEWS: dict[str, Callable[..., list]] = {"vllm": _vllm_pages, "sglang": _sglang_pool}


def engines_view(e: EngineReport, *, exact: bool = False, attention_only: bool = False) -> Group:
    parts: list = []
    for name, part in e.parts.items():
        parts += _vllm_pages(part, exact, attention_only) if name == "vllm" else _LAYOUT_VIEWS[name](part, exact)
    parts.extend(_skipped(e.skipped))
    return Group(*parts)


def _skipped(skipped) -> list[Table]:
    return [labelled(f"{engine}: skipped —", why, style="yellow") for engine, why in skipped]


def _vllm_fit(v, exact: bool = False) -> list:
    d = v.to_dict()
    lead = (
        waterfall_view(
            v.memory,
            f"vLLM {v.rel.version}: the GPU's memory on one rank",
            "Available KV cache memory",
            "gpu_memory_utilization",
            exact,
        )
        if v.memory is not None
        else []
    )
    rows = []
    # an attention-only model has no Mamba cache mode: every mode holds the same, so one row, unlabelled
    attention_only = all(m.capacity.mamba_blocks is None for m in v.modes.values())
    for mode, m in d["modes"].items():
        if attention_only and mode != d["default_mode"]:
            continue
        label = "— (attention only)" if attention_only else f"{mode} (default)" if mode == d["default_mode"] else mode
        rows.append(
            (
                label,
                f"{m['block_size']:,}" if m["block_size"] else "—",
                f"{m['num_blocks']:,}",
                f"{m['blocks_per_request']:,}",
                f"{m['max_concurrency']:.2f}x",
                f"{m['kv_tokens']:,}",
                f"{m['largest_max_num_seqs']:,}" if m["largest_max_num_seqs"] is not None else "—",
                Text("yes", style="green") if m["starts"] else Text("no", style="red"),
            )
        )
    parts: list = [
        Rows(
            ("mode", "block", "blocks", "per request", "concurrency", "KV tokens", "max seqs", "starts"),
            rows,
            title=f"vLLM {v.rel.version}: {d['available_kv_cache_memory_log']} ({d['kv_budget_bytes']:,} B)",
            caption="block: tokens per block; blocks: what the budget holds; per request: the blocks "
            "one request of the context pins; concurrency: blocks ÷ blocks per request (vLLM's "
            '"Maximum concurrency"); max seqs: the most --max-num-seqs that starts (one Mamba '
            "block per running sequence)",
            optional=(1,),
        )
    ]
    dm = d["modes"].get(d["default_mode"])
    parts.extend(log_line(line) for line in v.logs[:-1])
    if dm:
        parts.extend(log_line(line) for line in dm["logs"])
    return lead + parts


def _sglang_fit(g, exact: bool = False) -> list:
    s = g.to_dict()
    lead = (
        waterfall_view(
            g.memory,
            f"SGLang {g.rel.version}: the GPU's memory on one rank",
            "memory split between the pools (R)",
            "mem_fraction_static",
            exact,
        )
        if g.memory is not None
        else []
    )
    t = Rows(
        None,
        [
            ("max_mamba_cache_size", f"{s['max_mamba_cache_size']:,}", _b(s["pool_bytes"], exact)),
            ("KV pool", f"{s['kv_tokens']:,} tokens", _b(s["kv_pool_bytes"], exact))
            if g.pool.fp.kv
            else ("KV pool", "none", "no attention layers"),
            ("max running requests", f"{s['max_running_requests']:,}", _slots(s)),
            *_host_rows(s.get("hicache"), exact),
        ],
        title=f"SGLang {s['version']}: {_gb(s['budget_bytes'])} split between the state pool and the KV pool",
        left=(0, 2),
        prose=(2,),
        styles={0: "bold", 2: "dim"},
    )
    return [*lead, t, *(log_line(line) for line in s["logs"])]


def _host_rows(h: dict | None, exact: bool) -> list:
    """The HiCache host pools (hybridplan/engines/sglang/hicache.py), in host memory beside the device pools."""
    if h is None:
        return []
    return [
        ("KV host pool", f"{h['kv_host_tokens']:,} tokens", f"{_b(h['kv_host_bytes'], exact)} host memory"),
        (
            "Mamba host pool",
            f"{h['mamba_host_slots']:,} states",
            f"{_b(h['mamba_host_bytes'], exact)} host memory, {h['write_policy']}",
        ),
    ]


_FIT_VIEWS = {"vllm": _vllm_fit, "sglang": _sglang_fit}


_MARKS = {
    "weights": "█",
    "drafter weights": "█",
    "activation": "▓",
    "non-torch": "▒",
    "CUDA graphs": "▒",
    "overhead": "▒",
    "CUDA context": "▒",
    "reserve": "▒",
}


def _bar(w, width: int = 60) -> Text:
    """The GPU's memory as one line: each term in proportion, then what is left for the caches."""
    total = max(w.gpu_bytes, sum(t.bytes for t in (*w.before, *w.terms)) + max(w.cache_bytes, 0), 1)
    text = Text("  [")
    used = 0
    for t in (*w.before, *w.terms):
        n = round(width * t.bytes / total)
        text.append(_MARKS.get(t.name, "▒") * n, style="cyan" if t.name in ("weights", "drafter weights") else "yellow")
        used += n
    n = max(0, min(width - used, round(width * w.cache_bytes / total)))
    text.append("░" * n, style="green")
    text.append("·" * max(0, width - used - n), style="dim")
    text.append("]\n   █ weights  ▓▒ the rest  ░ caches  · not used", style="dim")
    return text


def waterfall_view(w, title: str, cache_label: str, factor_label: str, exact: bool = False) -> list:
    def row(t) -> tuple[str, str, str]:
        return (f"− {t.name}", _b(t.bytes, exact), ("estimate: " if t.kind == "estimate" else "") + t.note)

    rows = [
        ("GPU total", _b(w.gpu_bytes, exact), "" if exact else f"{w.gpu_bytes:,} B"),
        *(row(t) for t in w.before),
        (f"× {factor_label} {float(w.utilization)!r}", _b(w.requested, exact), w.factor_note),
        *(row(t) for t in w.terms),
        (f"= {cache_label}", _b(w.cache_bytes, exact), "" if exact else f"{w.cache_bytes:,} B"),
        *((f"  then − {t.name}", _b(t.bytes, exact), t.note) for t in getattr(w, "after", ())),
    ]
    return [Rows(None, rows, title=title, left=(0, 2), prose=(2,), styles={2: "dim"}), _bar(w)]


def _command(label: str, cmd) -> Text:
    """A command to paste: on one line where it fits, else continued with backslashes, never breaking a word."""
    if cmd is None:
        return Text(f"{label} — (the weights leave nothing for the caches)")
    import shlex

    from hybridplan.output import wrap_command

    words = [*cmd.env, *(shlex.quote(a) for a in cmd.argv)]
    one = f"{label} {' '.join(words)}"
    cols = min(width(), UNWRAPPED)
    if len(one) <= cols:
        return Text(one, no_wrap=True, overflow="ignore")
    return Text("\n".join([label, *wrap_command(words, cols)]), no_wrap=True, overflow="ignore")


def fit_view(r: FitReport, *, exact: bool = False) -> Group:
    head = f"  ·  {r.sc.ctx:,} tokens per request  ·  TP {r.sc.tp}"
    b = r.sc.budget
    if b.gpu is not None:
        from hybridplan.gpus import gpu

        g = gpu(b.gpu)
        head += f"  ·  {g.name}"
    parts: list = [Text.assemble((r.sc.spec.name, "bold"), head)]
    if b.kv_budget is None and b.gpu_mem is not None:
        parts.append(Text(f"GPU memory {_gb(b.gpu_mem)}", style="dim"))
    from hybridplan.engines.common import Shortfall
    from hybridplan.reports.fit import Refusal

    for name, part in r.parts.items():
        if isinstance(part, (Shortfall, Refusal)):
            if part.memory is not None:
                parts += waterfall_view(
                    part.memory,
                    f"{part.engine}: the GPU's memory on one rank",
                    part.cache_label,
                    part.factor_label,
                    exact,
                )
        else:
            parts += _FIT_VIEWS[name](part, exact)
    for engine, cmd in r.commands().items():
        parts.append(_command(f"{engine} command:", cmd))
    if r.verdict_ok:
        parts.append(Text("verdict: starts with these settings", style="bold green"))
    else:
        parts.append(Text(f"verdict: {r.verdict}", style="bold red"))
        parts.extend(labelled("  -", p, style="red") for p in (r.problems or ["no request fits"]))
    parts.extend(_notes(r.notes))
    parts.extend(_skipped(r.skipped))
    return Group(*parts)


def prefix_view(r: PrefixReport) -> Group:
    t = Rows(
        (
            "engine",
            "block / grid",
            "checkpoints of the first request",
            "2nd reuses",
            "computes",
            "3rd+ reuses",
            "computes",
        ),
        [
            (
                label,
                f"{x.grid:,}" if x.grid else "—",
                _cps(x.checkpoints),
                f"{x.reused_tokens:,}",
                f"{x.computed_tokens:,}",
                f"{x.later_reused_tokens:,}",
                f"{x.later_computed_tokens:,}",
            )
            for label, _, x in r.entries()
        ],
        title=f"{r.spec.name}: a request of {r.shared:,} shared + {r.private:,} private tokens after one that "
        "shared the prefix",
        left=(0, 2),
        prose=(2,),
        caption="2nd reuses: tokens the second request with this prefix resumes from a checkpoint; 3rd+: the "
        "requests after it, which also find the checkpoint the second one saved where it branched off",
    )
    return Group(t, *_skipped(r.skipped))


def _cps(cps) -> str:
    if not cps:
        return "none"
    shown = ", ".join(f"{c:,}" for c in cps[:6])
    return shown + (f", ... ({len(cps)})" if len(cps) > 6 else "")


def sweep_view(sw: SweepReport) -> Group:
    series = sw.series()
    t = Rows(
        ("shared", *series),
        [
            (f"{p.shared:,}", *(f"{series[label][i][1]:,} / {series[label][i][2]:,}" for label in series))
            for i, p in enumerate(sw.points)
        ],
        title=f"{sw.spec.name}: tokens reused as the shared prefix grows (+{sw.private:,} private); "
        "2nd request / 3rd and later",
        left=(),
    )
    return Group(t)


def check_view(r: CheckReport) -> Group:
    """One start: its tables. Several: each under a heading naming its lines, then the verdict over all."""
    if len(r.starts) == 1:
        return _start_view(r.starts[0], r.starts[0].model or r.model)
    parts: list = []
    for st in r.starts:
        heading = f"start {st.index} of {len(r.starts)}: lines {st.lines[0]:,}–{st.lines[1]:,}"
        parts.append(Text(heading + (f" · {st.model}" if st.model else ""), style="bold"))
        if st.error is not None:
            parts.append(Text(f"not checked: {st.error}", style="yellow"))
        elif st.rows or st.settings:
            parts.append(_start_view(st, st.model or ""))
        else:
            parts.extend(_notes(st.notes))
        parts.append(Text(""))
    checked = [st for st in r.starts if st.checked]
    bad = [st.index for st in checked if not st.ok]
    if not checked:
        verdict = Text("no modelled figure in this log", style="bold yellow")
    elif bad:
        verdict = Text(f"MISMATCH in start {', '.join(map(str, bad))}", style="bold red")
    else:
        verdict = Text(f"all figures match in {len(checked)} of {len(r.starts)} starts", style="bold green")
    return Group(*parts, verdict)


def _start_view(r, model: str) -> Group:
    settings = Rows(
        ("setting", "value", "from"),
        [
            (f"{s.engine} {s.name}", s.value, s.source.partition(":")[0] if s.source.startswith("line ") else s.source)
            for s in r.settings
        ],
        title=f"{model}: the settings the log states (--json gives each source line)",
        left=(0, 1, 2),
        prose=(2,),
        styles={2: "dim"},
    )
    t = Rows(
        ("engine", "figure", "logged", "predicted", ""),
        [
            (
                row.engine,
                row.figure,
                row.logged,
                row.predicted,
                Text("✓", style="green") if row.ok else Text("✗", style="red"),
            )
            for row in r.rows
        ],
        title="the log against the prediction",
        left=(0, 1, 4),
        prose=(1,),
    )
    parts: list = [settings, t]
    if r.estimates:
        parts.append(
            Rows(
                ("engine", "figure", "logged", "estimate", "error", "from"),
                [
                    (
                        e.engine,
                        e.figure,
                        f"{e.logged:g}",
                        f"{e.predicted:g}",
                        Text(f"{e.error_pct:+.2f} %", style="green" if e.within else "yellow"),
                        e.basis,
                    )
                    for e in r.estimates
                ],
                title="estimates beside the log (not exact: the weights as counted from the config)",
                left=(0, 1, 5),
                prose=(1, 5),
                styles={5: "dim"},
            )
        )
    if r.not_modelled:
        parts.append(
            Rows(
                ("engine", "figure", "logged", "not modelled because"),
                [(n.engine, n.figure, n.logged, n.reason) for n in r.not_modelled],
                title="figures hybridplan does not model",
                left=(0, 1, 3),
                prose=(1, 3),
                styles={3: "dim"},
            )
        )
    if not r.rows:
        verdict = Text("no modelled figure in this log", style="bold yellow")
    else:
        verdict = Text("all figures match" if r.ok else "MISMATCH", style="bold green" if r.ok else "bold red")
    return Group(*parts, verdict, *_notes(r.notes))
