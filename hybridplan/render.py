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
    from hybridplan.reports.check_log import CheckReport
    from hybridplan.reports.crossover import CrossoverReport
    from hybridplan.reports.engines import EngineReport
    from hybridplan.reports.fit import FitReport
    from hybridplan.reports.models import ModelsReport
    from hybridplan.reports.prefix import PrefixReport, SweepReport
    from hybridplan.reports.size import SizeReport
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
    parts.extend(Text(f"note: {n}", style="yellow") for n in r.notes)
    if r.engines is not None:
        parts.append(engines_view(r.engines, exact=exact))
    return Group(*parts)


def crossover_view(r: CrossoverReport) -> Group:
    d = r.to_dict()
    ref_state = (f" + {human_bytes(r.ref_fp.state_bytes)} state" if r.ref_fp.state_bytes else "")
    head = Text.assemble((r.spec.name, "bold"), f" vs {r.ref.name}  ·  TP {r.tp}  ·  ",
                         f"reference KV {human_bytes(r.ref_fp.kv_bytes_per_token)}/token{ref_state}, "
                         f"hybrid KV {human_bytes(r.fp.kv_bytes_per_token)}/token")
    t = Table(title="Crossover: context where the reference's memory reaches the hybrid's",
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


def models_view(r: ModelsReport) -> Table:
    t = Table(title="Shipped model specs", box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("name", "aliases", "family", "layers", "source"):
        t.add_column(col)
    for s in r.specs:
        t.add_row(s.name, ", ".join(s.aliases), s.family, _layers_line(s.layer_counts), s.source or "")
    return t


def _vllm_pages(v, exact: bool) -> list:
    t = Table(title=f"vLLM {v.rel.version}: pages per mamba cache mode (default: {v.default_mode}; with prefix "
                    f"caching: {v.prefix_mode})", box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("mode", "block", "mamba page", "page", "padding", "state / request", "KV / request"):
        t.add_column(col, justify="left" if col == "mode" else "right")
    for mode, m in v.modes.items():
        d = m.to_dict()
        t.add_row(mode, f"{d['block_size']:,}" if d["block_size"] else "—", _b(d["mamba_page_bytes"], exact),
                  _b(d["page_bytes"], exact), f"{d['padding_pct']:.2f} %",
                  f"{_b(d['state_bytes_per_request'], exact)} ({d['state_pages_per_request']} pages)",
                  f"{_b(d['kv_bytes_per_request'], exact)} ({d['kv_pages_per_request']} pages)")
    parts: list = [t]
    for mode, m in v.modes.items():
        for line in m.layout.logs:
            parts.append(Text(f"  [{mode}] {line}", style="dim"))
    return parts


def _sglang_pool(p, exact: bool) -> list:
    d = p.to_dict()
    t = Table(title=f"SGLang {d['version']}: MambaPool of {d['slots']:,} slots (+1 padding row)",
              box=box.SIMPLE_HEAD, show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column(justify="right")
    t.add_column(style="dim")
    t.add_row("conv state", _b(d["conv_state_bytes"], exact), _short(d["conv_dtype"]))
    t.add_row("SSM state", _b(d["ssm_state_bytes"], exact), _short(d["ssm_dtype"]))
    t.add_row("per request", _b(d["per_request_bytes"], exact), "")
    t.add_row("max running requests", f"{d['max_running_requests']:,}",
              f"{d['radix_strategy']}: {d['state_slots_per_request']} state slots per request")
    t.add_row("checkpoint grid", f"{d['checkpoint_grid']:,} tokens", "")
    return [t, Text(f"  {d['logs'][0]}", style="dim")]


_LAYOUT_VIEWS = {"vllm": _vllm_pages, "sglang": _sglang_pool}


def engines_view(e: EngineReport, *, exact: bool = False) -> Group:
    parts: list = []
    for name, part in e.parts.items():
        parts += _LAYOUT_VIEWS[name](part, exact)
    parts.extend(_skipped(e.skipped))
    return Group(*parts)


def _skipped(skipped) -> list[Text]:
    return [Text(f"{engine}: skipped — {why}", style="yellow") for engine, why in skipped]


def _vllm_fit(v) -> list:
    d = v.to_dict()
    t = Table(title=f"vLLM {v.rel.version}: {d['available_kv_cache_memory_log']} ({d['kv_budget_bytes']:,} B)",
              box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("mode", "block", "blocks", "blocks / request", "max concurrency", "KV tokens", "max_num_seqs ≤",
                "starts"):
        t.add_column(col, justify="left" if col == "mode" else "right")
    for mode, m in d["modes"].items():
        label = f"{mode} (default)" if mode == d["default_mode"] else mode
        t.add_row(label, f"{m['block_size']:,}" if m["block_size"] else "—", f"{m['num_blocks']:,}",
                  str(m["blocks_per_request"]), f"{m['max_concurrency']:.2f}x", f"{m['kv_tokens']:,}",
                  f"{m['largest_max_num_seqs']:,}" if m["largest_max_num_seqs"] is not None else "—",
                  "[green]yes[/]" if m["starts"] else "[red]no[/]")
    parts: list = [t]
    dm = d["modes"].get(d["default_mode"])
    if dm:
        parts += [Text(f"  {line}", style="dim") for line in dm["logs"]]
    return parts


def _sglang_fit(g) -> list:
    s = g.to_dict()
    t = Table(title=f"SGLang {s['version']}: {human_bytes(s['budget_bytes'])} split between the state pool and "
                    "the KV pool", box=box.SIMPLE_HEAD, show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column(justify="right")
    t.add_column(style="dim")
    t.add_row("max_mamba_cache_size", f"{s['max_mamba_cache_size']:,}", human_bytes(s["pool_bytes"]))
    t.add_row("KV pool", f"{s['kv_tokens']:,} tokens", human_bytes(s["kv_pool_bytes"]))
    t.add_row("max running requests", f"{s['max_running_requests']:,}",
              f"{s['radix_strategy']}: {s['state_slots_per_request']} state slots per request")
    return [t, *(Text(f"  {line}", style="dim") for line in s["logs"])]


_FIT_VIEWS = {"vllm": _vllm_fit, "sglang": _sglang_fit}


def fit_view(r: FitReport) -> Group:
    parts: list = [Text.assemble((r.sc.spec.name, "bold"), f"  ·  {r.sc.ctx:,} tokens per request  ·  TP {r.sc.tp}")]
    for name, part in r.parts.items():
        parts += _FIT_VIEWS[name](part)
    for engine, flags in r.flags().items():
        parts.append(Text(f"{engine} flags: {flags}"))
    if r.verdict_ok:
        parts.append(Text("verdict: starts with these settings", style="bold green"))
    else:
        parts.append(Text("verdict: will not start — " + "; ".join(r.problems or ["no request fits"]),
                          style="bold red"))
    parts.extend(Text(f"note: {n}", style="yellow") for n in r.notes)
    parts.extend(_skipped(r.skipped))
    return Group(*parts)


def prefix_view(r: PrefixReport) -> Group:
    t = Table(title=f"{r.spec.name}: a request of {r.shared:,} shared + {r.private:,} private tokens after one "
                    "that shared the prefix", box=box.SIMPLE_HEAD, title_justify="left")
    for col in ("engine", "block / grid", "checkpoints of the first request", "2nd reuses", "computes",
                "3rd+ reuses", "computes"):
        t.add_column(col, justify="left" if col in ("engine", "checkpoints of the first request") else "right")
    for label, _, x in r.entries():
        t.add_row(label, f"{x.grid:,}" if x.grid else "—", _cps(x.checkpoints), f"{x.reused_tokens:,}",
                  f"{x.computed_tokens:,}", f"{x.later_reused_tokens:,}", f"{x.later_computed_tokens:,}")
    return Group(t, *_skipped(r.skipped))


def _cps(cps) -> str:
    if not cps:
        return "none"
    shown = ", ".join(f"{c:,}" for c in cps[:6])
    return shown + (f", … ({len(cps)})" if len(cps) > 6 else "")


def sweep_view(sw: SweepReport) -> Group:
    series = sw.series()
    t = Table(title=f"{sw.spec.name}: tokens reused as the shared prefix grows (+{sw.private:,} private); "
                    "2nd request / 3rd and later", box=box.SIMPLE_HEAD, title_justify="left")
    t.add_column("shared", justify="right")
    for label in series:
        t.add_column(label, justify="right")
    for i, p in enumerate(sw.points):
        t.add_row(f"{p.shared:,}", *(f"{series[label][i][1]:,} / {series[label][i][2]:,}" for label in series))
    return Group(t)


def check_view(r: CheckReport) -> Group:
    settings = ", ".join(f"{k} {v}" for k, v in r.settings.items())
    t = Table(title=f"{r.model}: the log against the prediction ({settings})", box=box.SIMPLE_HEAD,
              title_justify="left")
    for col in ("engine", "figure", "logged", "predicted", ""):
        t.add_column(col, justify="right" if col in ("logged", "predicted") else "left")
    for row in r.rows:
        t.add_row(row.engine, row.figure, row.logged, row.predicted, "[green]✓[/]" if row.ok else "[red]✗[/]")
    verdict = Text("all figures match" if r.ok else "MISMATCH", style="bold green" if r.ok else "bold red")
    return Group(t, verdict, *(Text(f"note: {n}", style="yellow") for n in r.notes))
