"""The ``hybridplan`` command line. Each command parses, calls one pure function, and renders."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

import typer

from hybridplan.errors import PlanError

try:  # usage errors (unknown option, bad integer, missing argument)
    _UsageError: type[Exception] = typer.TyperException
except AttributeError:  # typer before 0.28 raises click's own
    from click import ClickException as _UsageError

app = typer.Typer(
    name="hybridplan",
    help="Capacity planner and live profiler for hybrid (attention + recurrent) LLMs.\n\n"
         "Sizes recurrent state, attention KV and engine pools exactly as vLLM and SGLang allocate them, "
         "with no GPU.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

MODEL_HELP = "Shipped spec name or alias (see `hybridplan models`), a config.json, a model folder, or a spec YAML."


def _complete_model(incomplete: str) -> list[str]:
    """Shell completion for MODEL: the shipped names and aliases."""
    from hybridplan.loader import shipped_names

    return sorted(n for n in shipped_names() if n.startswith(incomplete.lower()))


def _version(value: bool) -> None:
    if value:
        from hybridplan import __version__

        sys.stdout.write(f"hybridplan {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", help="Print the version and exit.", is_eager=True,
                                       callback=_version)) -> None:
    """Capacity planner and live profiler for hybrid (attention + recurrent) LLMs."""

# Options shared by the planning commands.
TpOpt = typer.Option(1, "--tp", help="Tensor-parallel size; sizes are per rank. Refused where vLLM refuses it.")
DtypeOpt = typer.Option(None, "--dtype", help="Model dtype (vLLM --dtype); default: the config's.")
ConvOpt = typer.Option(None, "--conv-dtype", help="Conv state dtype (vLLM --mamba-cache-dtype).")
SsmOpt = typer.Option(None, "--ssm-dtype", help="SSM state dtype (vLLM --mamba-ssm-cache-dtype).")
KvOpt = typer.Option(None, "--kv-dtype", help="Attention KV dtype (vLLM --kv-cache-dtype), e.g. fp8.")
SpecOpt = typer.Option(0, "--spec-tokens", help="Speculative tokens (widen conv windows, add pages).", min=0)
VllmOpt = typer.Option(None, "--vllm-version", help="vLLM release whose rules apply (default: newest known).")
JsonOpt = typer.Option(False, "--json", help="Print the result as JSON.")
BytesOpt = typer.Option(False, "--bytes", help="Show exact byte counts beside the readable units.")
SglangOpt = typer.Option(None, "--sglang-version", help="SGLang release: 0.5.23 (default) or 0.5.9.")
ModeOpt = typer.Option(None, "--mode", help="vLLM mamba cache mode: none, align or all (default: every mode).")
BlockOpt = typer.Option(None, "--block-size", help="vLLM --block-size (the block only grows from it).")
GdnOpt = typer.Option("flashinfer", "--gdn-prefill-backend",
                      help="GDN prefill backend vLLM picks: flashinfer (its Hopper default) or triton.")
EngineOpt = typer.Option("both", "--engine", help="vllm, sglang or both.")
RadixOpt = typer.Option("auto", "--radix", help="SGLang --mamba-radix-cache-strategy: auto, no_buffer, "
                                               "extra_buffer, or off (radix cache disabled).")


def _emit_json(payload: dict) -> None:
    sys.stdout.write(json.dumps(payload, indent=2) + "\n")


def _show(report, as_json: bool, view: str, plot: Optional[Path] = None, plotter: str = "") -> None:
    """Writes the plot when asked, then the report: its JSON, or the rich view named `view` of hybridplan.render
    (imported only here: rich's console stays out of --json runs)."""
    if plot is not None:
        from hybridplan import plots

        getattr(plots, plotter)(report, plot)
    if as_json:
        _emit_json(report.to_dict())
        return
    from hybridplan import render

    render.console().print(getattr(render, view)(report))
    if plot is not None:
        render.console().print(f"plot written to {plot}")


def _settings(engine, vllm_version, sglang_version, mode=None, block_size=None, gdn_backend="flashinfer", **kw):
    from hybridplan.serving import EngineSettings

    return EngineSettings(engine=engine, vllm_version=vllm_version, sglang_version=sglang_version, mode=mode,
                          block_size=block_size, gdn_backend=gdn_backend, **kw)


def _choice(dtype, conv, ssm, kv):
    from hybridplan.plan import DtypeChoice

    return DtypeChoice(dtype=dtype, conv=conv, ssm=ssm, kv=kv)


@app.command()
def size(
    model: str = typer.Argument("nemotron-h", help=MODEL_HELP, autocompletion=_complete_model),
    ctx: Optional[int] = typer.Option(None, "--ctx", help="Context length in tokens (default: the model's maximum)."),
    tp: int = TpOpt,
    slots: int = typer.Option(256, "--slots", help="Concurrent sequences in the state pool."),
    vs: str = typer.Option("llama-3-8b", "--vs", help="Reference model for the comparison."),
    dtype: Optional[str] = DtypeOpt,
    conv_dtype: Optional[str] = ConvOpt,
    ssm_dtype: Optional[str] = SsmOpt,
    kv_dtype: Optional[str] = KvOpt,
    spec_tokens: int = SpecOpt,
    vllm_version: Optional[str] = VllmOpt,
    engine: Optional[str] = typer.Option(None, "--engine", help="Add the engine layout: vllm, sglang or both."),
    sglang_version: Optional[str] = SglangOpt,
    mode: Optional[str] = ModeOpt,
    block_size: Optional[int] = BlockOpt,
    gdn_backend: str = GdnOpt,
    as_json: bool = JsonOpt,
    exact: bool = BytesOpt,
) -> None:
    """Shapes and bytes of every recurrent layer, KV per token and at the context, totals, the state pool,
    and with --engine the pages, padding and pools vLLM and SGLang will allocate.

    Examples:

      hybridplan size nemotron-h --ctx 131072

      hybridplan size nemotron-h --ctx 8192 --engine both --vllm-version 0.28

      hybridplan size qwen3-next --tp 4 --ssm-dtype fp32 --json

      hybridplan size ./Zamba2-7B/config.json --vs mistral-7b --bytes
    """
    from hybridplan import plan
    from hybridplan.loader import load_model

    from hybridplan.engines import vllm

    spec = load_model(model)
    choice = _choice(dtype, conv_dtype, ssm_dtype, kv_dtype)
    report = plan.size(spec, load_model(vs), ctx=ctx if ctx is not None else plan.default_ctx(spec), tp=tp,
                       slots=slots, choice=choice, spec_tokens=spec_tokens, rel=vllm.release(vllm_version))
    eng = None
    if engine is not None:  # the engine models are imported only when asked for
        from hybridplan import serving

        settings = _settings(engine, vllm_version, sglang_version, mode, block_size, gdn_backend)
        eng = serving.engines(spec, report.fp, tp=tp, choice=choice, max_len=report.ctx, slots=slots, s=settings)
    if as_json:
        _emit_json({**report.to_dict(), **(eng.to_dict() if eng else {})})
        return
    from hybridplan.render import console, engines_view, size_view

    out = console()
    out.print(size_view(report, exact=exact))
    if eng is not None:
        out.print(engines_view(eng, exact=exact))


@app.command()
def crossover(
    model: str = typer.Argument("nemotron-h", help=MODEL_HELP, autocompletion=_complete_model),
    vs: str = typer.Option("llama-3-8b", "--vs", help="Reference model."),
    tp: int = TpOpt,
    dtype: Optional[str] = DtypeOpt,
    conv_dtype: Optional[str] = ConvOpt,
    ssm_dtype: Optional[str] = typer.Option(None, "--ssm-dtype", help="Only this SSM dtype (default: the engine "
                                                                      "default, fp32 and bf16)."),
    kv_dtype: Optional[str] = KvOpt,
    vllm_version: Optional[str] = VllmOpt,
    as_json: bool = JsonOpt,
    plot: Optional[Path] = typer.Option(None, "--plot", help="Write both memory curves to this PNG."),
) -> None:
    """Context length past which the hybrid needs less memory per sequence than a transformer.

    Two crossovers per SSM dtype: where the reference's KV equals the hybrid's recurrent state alone, and
    where it equals the hybrid's whole footprint (state + its own KV).

    Examples:

      hybridplan crossover

      hybridplan crossover jamba --vs llama-3.1-70b --plot jamba.png
    """
    from hybridplan import plan
    from hybridplan.engines import vllm
    from hybridplan.loader import load_model

    report = plan.crossover(load_model(model), load_model(vs), tp=tp,
                            choice=_choice(dtype, conv_dtype, ssm_dtype, kv_dtype), rel=vllm.release(vllm_version))
    _show(report, as_json, "crossover_view", plot, "crossover_plot")


@app.command()
def fit(
    model: str = typer.Argument("nemotron-h", help=MODEL_HELP, autocompletion=_complete_model),
    ctx: Optional[int] = typer.Option(None, "--ctx", help="Tokens per request (vLLM --max-model-len)."),
    gpu_mem: Optional[str] = typer.Option(None, "--gpu-mem", help="GPU memory, e.g. 141GB, 80GiB."),
    weights: Optional[str] = typer.Option(None, "--weights", help="The model's weights over all ranks (each of --tp "
                                                                  "GPUs holds its share), e.g. 16GiB."),
    params: Optional[float] = typer.Option(None, "--params", help="Parameter count, e.g. 8.1e9: weights at the "
                                                                 "model dtype, split over --tp."),
    gpu_util: Optional[float] = typer.Option(None, "--gpu-util", help="vLLM --gpu-memory-utilization "
                                                                     "(default: the release's)."),
    overhead: str = typer.Option("2GiB", "--overhead", help="Activations, CUDA graphs, non-torch memory: an "
                                                           "estimate the engine measures at start-up."),
    kv_budget: Optional[str] = typer.Option(None, "--kv-budget", help="Memory left for caches (vLLM's "
                                            "\"Available KV cache memory\"; SGLang's memory to split); skips "
                                            "--gpu-mem."),
    max_num_seqs: Optional[int] = typer.Option(None, "--max-num-seqs", help="vLLM --max-num-seqs to check."),
    max_running_requests: Optional[int] = typer.Option(None, "--max-running-requests",
                                                       help="SGLang --max-running-requests to check."),
    tp: int = TpOpt,
    engine: str = EngineOpt,
    vllm_version: Optional[str] = VllmOpt,
    sglang_version: Optional[str] = SglangOpt,
    mode: Optional[str] = ModeOpt,
    block_size: Optional[int] = BlockOpt,
    gdn_backend: str = GdnOpt,
    radix: str = RadixOpt,
    full_memory_ratio: float = typer.Option(0.9, "--mamba-full-memory-ratio", help="SGLang's state/KV split."),
    mem_fraction: float = typer.Option(0.88, "--mem-fraction-static", help="SGLang --mem-fraction-static (only "
                                                                          "with --gpu-mem)."),
    dtype: Optional[str] = DtypeOpt,
    conv_dtype: Optional[str] = ConvOpt,
    ssm_dtype: Optional[str] = SsmOpt,
    kv_dtype: Optional[str] = KvOpt,
    spec_tokens: int = SpecOpt,
    as_json: bool = JsonOpt,
) -> None:
    """How many requests of --ctx tokens fit, and whether a --max-num-seqs / --max-running-requests starts.

    Exit code 0 when the engine(s) will start with these settings, 1 when not (the verdict line says why).

    Examples:

      hybridplan fit nemotron-h --ctx 8192 --kv-budget 40GiB

      hybridplan fit nemotron-h --ctx 131072 --gpu-mem 141GB --params 8.1e9 --max-num-seqs 1024

      hybridplan fit qwen3-next --tp 4 --ctx 32768 --kv-budget 60GiB --engine vllm --json
    """
    from hybridplan import plan, serving
    from hybridplan.loader import load_model
    from hybridplan.units import parse_size

    spec = load_model(model)
    settings = _settings(engine, vllm_version, sglang_version, mode, block_size, gdn_backend, radix=radix,
                         full_memory_ratio=full_memory_ratio)
    budget = serving.Budget(
        kv_budget=parse_size(kv_budget, what="--kv-budget") if kv_budget else None,
        gpu_mem=parse_size(gpu_mem, what="--gpu-mem") if gpu_mem else None,
        weights=parse_size(weights, what="--weights") if weights else None, params=params, gpu_util=gpu_util,
        overhead=parse_size(overhead, what="--overhead") if overhead not in ("0", "") else 0)
    report = serving.fit(spec, ctx=ctx if ctx is not None else plan.default_ctx(spec), tp=tp,
                         choice=_choice(dtype, conv_dtype, ssm_dtype, kv_dtype), budget=budget, s=settings,
                         spec_tokens=spec_tokens, max_num_seqs=max_num_seqs, max_running_requests=max_running_requests,
                         mem_fraction_static=mem_fraction)
    _show(report, as_json, "fit_view")
    raise typer.Exit(0 if report.verdict_ok else 1)


@app.command()
def prefix(
    model: str = typer.Argument("nemotron-h", help=MODEL_HELP, autocompletion=_complete_model),
    shared: Optional[int] = typer.Option(None, "--shared", help="Tokens of the prefix two requests share."),
    private: int = typer.Option(0, "--private", help="Tokens after it that differ between the requests."),
    sweep: Optional[str] = typer.Option(None, "--sweep", help="Sweep the shared length: A:B:STEP."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="With --sweep: write the step function to a PNG."),
    tp: int = TpOpt,
    engine: str = EngineOpt,
    vllm_version: Optional[str] = VllmOpt,
    sglang_version: Optional[str] = SglangOpt,
    mode: Optional[str] = ModeOpt,
    block_size: Optional[int] = BlockOpt,
    gdn_backend: str = GdnOpt,
    chunk: int = typer.Option(8192, "--max-num-batched-tokens", help="Prefill chunk limit (vLLM "
                                                                   "--max-num-batched-tokens, SGLang "
                                                                   "--chunked-prefill-size)."),
    radix: str = RadixOpt,
    dtype: Optional[str] = DtypeOpt,
    conv_dtype: Optional[str] = ConvOpt,
    ssm_dtype: Optional[str] = SsmOpt,
    kv_dtype: Optional[str] = KvOpt,
    as_json: bool = JsonOpt,
) -> None:
    """How much of a shared prefix a second request reuses: a recurrent state is reusable only where a
    checkpoint was saved.

    Examples:

      hybridplan prefix nemotron-h --shared 4000 --private 200 --vllm-version 0.28

      hybridplan prefix nemotron-h --private 200 --sweep 0:6000:100 --mode align --plot steps.png
    """
    from hybridplan import serving
    from hybridplan.loader import load_model

    spec = load_model(model)
    if chunk <= 0:
        raise PlanError(f"--max-num-batched-tokens must be positive, got {chunk}")
    settings = _settings(engine, vllm_version, sglang_version, mode, block_size, gdn_backend,
                         max_num_batched_tokens=chunk, radix=radix)
    choice = _choice(dtype, conv_dtype, ssm_dtype, kv_dtype)
    if sweep is None:
        if shared is None:
            raise PlanError("give --shared N (or --sweep A:B:STEP)")
        if plot is not None:
            raise PlanError("--plot draws a sweep: give --sweep A:B:STEP as well")
        _show(serving.prefix(spec, shared=shared, private=private, tp=tp, choice=choice, s=settings), as_json,
              "prefix_view")
        return
    sw = serving.prefix_sweep(spec, sweep=sweep, private=private, tp=tp, choice=choice, s=settings)
    _show(sw, as_json, "sweep_view", plot, "prefix_plot")


@app.command(name="check-log")
def check_log(
    log: Path = typer.Argument(..., help="A vLLM or SGLang start-up log."),
    model: Optional[str] = typer.Option(None, "--model", help="The model (default: read from the log)."),
    ctx: Optional[int] = typer.Option(None, "--ctx", help="max_model_len (default: read from the log)."),
    tp: Optional[int] = typer.Option(None, "--tp", help="Tensor-parallel size (default: read from the log)."),
    vllm_version: Optional[str] = typer.Option(None, "--vllm-version", help="Default: read from the log."),
    sglang_version: Optional[str] = SglangOpt,
    mode: Optional[str] = typer.Option(None, "--mode", help="vLLM mamba cache mode (default: read from the log)."),
    kv_budget: Optional[str] = typer.Option(None, "--kv-budget", help="Exact KV budget, if known."),
    as_json: bool = JsonOpt,
) -> None:
    """Read a real start-up log and put each figure the engine printed beside hybridplan's prediction for
    the same settings. Exit 1 on a mismatch.

    Examples:

      hybridplan check-log vllm.log

      hybridplan check-log sglang.log --model nemotron-h --tp 2
    """
    from hybridplan.logcheck import check
    from hybridplan.units import parse_size

    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise PlanError(f"cannot read {log}: {exc.strerror}") from None
    report = check(text, model=model, ctx=ctx, tp=tp, vllm_version=vllm_version, sglang_version=sglang_version,
                   mode=mode, kv_budget=parse_size(kv_budget, what="--kv-budget") if kv_budget else None)
    _show(report, as_json, "check_view")
    raise typer.Exit(0 if report.ok else 1)


@app.command()
def models(as_json: bool = JsonOpt) -> None:
    """The shipped model specs: family, layer counts and source checkpoint.

    Example:

      hybridplan models
    """
    from hybridplan.loader import shipped_specs

    specs = shipped_specs()
    if as_json:
        _emit_json({"schema_version": 1, "models": [
            {"name": s.name, "aliases": list(s.aliases), "architecture": s.architecture, "family": s.family,
             "layers": s.layer_counts, "source": s.source} for s in specs]})
        return
    from hybridplan.render import console, models_view

    console().print(models_view(specs))


from hybridplan.profile.command import profile as _profile  # noqa: E402 - imports typer only; torch at run time

app.command(name="profile")(_profile)


def main(argv: list[str] | None = None) -> int:
    """Entry point: one line on stderr and exit 2 for any bad input, never a traceback."""
    try:
        rv = app(args=argv, standalone_mode=False, prog_name="hybridplan")
    except PlanError as exc:
        sys.stderr.write(f"hybridplan: error: {exc}\n")
        code = exc.exit_code
    except _UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `hybridplan` or a bare group: its help
            sys.stdout.write(exc.ctx.get_help() + "\n")
            code = 0
        else:
            sys.stderr.write(f"hybridplan: error: {exc.format_message()}\n")
            code = exc.exit_code
    except typer.Abort:
        sys.stderr.write("hybridplan: interrupted\n")
        code = 130
    except KeyboardInterrupt:
        sys.stderr.write("hybridplan: interrupted\n")
        code = 130
    except BrokenPipeError:
        code = 0
    except Exception as exc:  # a bug of ours: still one line, with the way to see more
        if os.environ.get("HYBRIDPLAN_DEBUG"):
            raise
        sys.stderr.write(f"hybridplan: internal error: {type(exc).__name__}: {exc} "
                         "(set HYBRIDPLAN_DEBUG=1 for the traceback)\n")
        code = 1
    else:
        code = rv if isinstance(rv, int) else 0
    if argv is None:
        sys.exit(code)
    return code
