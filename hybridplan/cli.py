"""The ``hybridplan`` command line. Each command parses its options into one ``Scenario``, calls one pure
function, and renders the report it returns."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

import typer

from hybridplan.build import said, scenario
from hybridplan.errors import PlanError
from hybridplan.options import (
    ADMISSION,
    ALLOW_LONG,
    BUDGET,
    CHECK_LOG_FLAGS,
    DP,
    DTYPES,
    EMIT,
    ENGINES,
    HICACHE,
    JSON,
    MODEL,
    OUTPUT,
    PP,
    SGLANG,
    SPEC_TOKENS,
    TP,
    VLLM,
    Chunk,
    Flag,
    Options,
    SglangVersion,
    argument,
    count_value,
    ctx_option,
    number_value,
    option,
    param,
    plot_option,
    range_ratio_value,
    size_option,
    tokens_option,
)
from hybridplan.output import say, write
from hybridplan.show import show, show_csv
from hybridplan.signature import command, command_in, signature
from hybridplan.tables import CSV, refuse_with_json

try:  # usage errors (unknown option, bad integer, missing argument)
    _UsageError: Any = typer.TyperException  # ctx, format_message() and exit_code, as click's
except AttributeError:  # typer before 0.28 raises click's own
    from click import ClickException as _UsageError

app = typer.Typer(
    name="hybridplan",
    help="Capacity planner and live profiler for hybrid (attention + recurrent) LLMs.\n\n"
    "Sizes recurrent state, attention KV and engine pools exactly as vLLM and SGLang allocate them, "
    "with no GPU.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's plain help: wraps at any width, never cuts a name, never reads :x: as an emoji
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from hybridplan import __version__

        write(f"hybridplan {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", help="Print the version and exit.", is_eager=True, callback=_version
    ),
) -> None:
    """Capacity planner and live profiler for hybrid (attention + recurrent) LLMs."""


# --- options of one command ---------------------------------------------------------------------


VS = (
    param("vs", Flag(str, option("--vs", metavar="MODEL", help="Reference model for the comparison.")), "llama-3-8b"),
)
SLOTS = (
    param(
        "slots",
        Flag(
            int,
            option(
                "--slots", metavar="N", parser=count_value("--slots"), help="Concurrent sequences in the state pool."
            ),
        ),
        256,
    ),
)
SIZE_ENGINE = (
    param(
        "engine",
        Flag(Optional[str], option("--engine", metavar="ENGINE", help="Add the engine layout: vllm, sglang or both.")),
        None,
    ),
)
ONE_SSM_DTYPE = Flag(
    Optional[str],
    option("--ssm-dtype", metavar="DTYPE", help="Only this SSM dtype (default: the engine default, fp32 and bf16)."),
)
PREFIX = (
    param("shared", tokens_option("--shared", "Tokens of the prefix two requests share."), None),
    param("private", tokens_option("--private", "Tokens after it that differ between the requests."), 0),
    param(
        "sweep",
        Flag(
            Optional[str],
            option("--sweep", metavar="A:B:STEP", help="Sweep the shared length from A to B tokens in steps of STEP."),
        ),
        None,
    ),
    param("plot", plot_option("With --sweep: write the step function to this PNG."), None),
)
CHECK_LOG = (
    param("log", Flag(Path, argument(metavar="LOG", help="A vLLM or SGLang start-up log (- reads standard input)."))),
    param(
        "model",
        Flag(Optional[str], option("--model", metavar="MODEL", help="The model (default: read from the log).")),
        None,
    ),
    param("ctx", ctx_option("max_model_len (default: read from the log):"), None),
    param(
        "tp",
        Flag(
            Optional[int],
            option(
                "--tp",
                metavar="N",
                parser=count_value("--tp"),
                help="Tensor-parallel size (default: read from the log).",
            ),
        ),
        None,
    ),
    param(
        "vllm_version",
        Flag(
            Optional[str],
            option("--vllm-version", metavar="VERSION", help="vLLM release (default: read from the log)."),
        ),
        None,
    ),
    param("sglang_version", SglangVersion, None),
    param(
        "mode",
        Flag(
            Optional[str], option("--mode", metavar="MODE", help="vLLM mamba cache mode (default: read from the log).")
        ),
        None,
    ),
    param(
        "kv_budget", size_option("--kv-budget", "Exact KV budget (vLLM's, or the memory SGLang splits), if known"), None
    ),
    param(
        "spec_tokens",
        Flag(
            Optional[int],
            option(
                "--spec-tokens",
                metavar="N",
                parser=count_value("--spec-tokens"),
                help="Speculative tokens (default: read from the log).",
            ),
        ),
        None,
    ),
    param(
        "max_num_seqs",
        Flag(
            Optional[int],
            option(
                "--max-num-seqs",
                metavar="N",
                parser=count_value("--max-num-seqs"),
                help="vLLM --max-num-seqs (default: read from the log).",
            ),
        ),
        None,
    ),
    param(
        "max_running_requests",
        Flag(
            Optional[int],
            option(
                "--max-running-requests",
                metavar="N",
                parser=count_value("--max-running-requests"),
                help="SGLang --max-running-requests (default: read from the log).",
            ),
        ),
        None,
    ),
    param(
        "mem_fraction",
        Flag(
            Optional[float],
            option(
                "--mem-fraction-static",
                metavar="FRACTION",
                parser=number_value("--mem-fraction-static", 0, 1, "SGLang's mem_fraction_static"),
                help="SGLang --mem-fraction-static (default: read from the log).",
            ),
        ),
        None,
    ),
    param(
        "gpu_type",
        Flag(
            Optional[str],
            option(
                "--gpu-type",
                metavar="GPU",
                help="The GPU the log ran on, by name (`hybridplan gpus`), where its lines do not say (vLLM's block unit "
                "depends on it).",
            ),
        ),
        None,
    ),
)


@command(
    app,
    MODEL,
    (
        param(
            "ctx",
            ctx_option(
                "Context length (default: the model's maximum as the engines derive "
                "it, 2048 where its config names none):"
            ),
            None,
        ),
    ),
    TP,
    PP,
    DP[:2],
    SLOTS,
    VS,
    DTYPES,
    SPEC_TOKENS,
    SIZE_ENGINE,
    VLLM,
    SGLANG,
    ALLOW_LONG,
    OUTPUT,
    short="State, KV and totals per sequence; engine pages and pools",
)
def size(o: Options) -> None:
    """Shapes and bytes of every recurrent layer, KV per token and at the context, totals, the state pool,
    and with --engine the pages, padding and pools vLLM and SGLang will allocate.

    Examples:

    \b
      hybridplan size nemotron-h --ctx 131072
      hybridplan size nemotron-h --ctx 8192 --engine both --vllm-version 0.28
      hybridplan size qwen3-next --tp 4 --ssm-dtype fp32 --json
      hybridplan size ./Zamba2-7B/config.json --vs mistral-7b --bytes
    """
    from hybridplan.loader import load_model
    from hybridplan.reports.size import size as size_report

    sc = scenario(o)
    show(size_report(sc, load_model(o.vs), with_engines=o.engine is not None), o, "size_view")


@command(
    app,
    MODEL,
    VS,
    TP,
    (*DTYPES[:2], param("ssm_dtype", ONE_SSM_DTYPE, None), DTYPES[3]),
    VLLM[:1],
    OUTPUT,
    (param("plot", plot_option("Write the memory curves to this PNG."), None),),
    short="Where the hybrid needs less memory than a transformer",
)
def crossover(o: Options) -> None:
    """Context length past which the hybrid needs less memory per sequence than a transformer.

    Two crossovers per SSM dtype: where the reference's KV equals the hybrid's recurrent state alone, and
    where it equals the hybrid's whole footprint (state + its own KV).

    Examples:

    \b
      hybridplan crossover
      hybridplan crossover jamba --vs llama-3.1-70b --plot jamba.png
    """
    from hybridplan.loader import load_model
    from hybridplan.reports.crossover import crossover as crossover_report

    sc = scenario(o)
    show(crossover_report(sc, load_model(o.vs)), o, "crossover_view", "crossover_plot")


@command(
    app,
    MODEL,
    (
        param(
            "ctx",
            ctx_option(
                "Tokens per request (vLLM --max-model-len, SGLang --context-length; "
                "default: the model's maximum as the engines derive it, 2048 where "
                "its config names none):"
            ),
            None,
        ),
    ),
    BUDGET,
    ADMISSION,
    TP,
    PP,
    DP,
    ENGINES,
    DTYPES,
    SPEC_TOKENS,
    (param("chunk", Chunk, None),),
    HICACHE,
    ALLOW_LONG,
    OUTPUT,
    EMIT,
    short="How many requests fit, whether the engines start, the commands to run",
)
def fit(o: Options) -> None:
    """How many requests of --ctx tokens fit, and whether a --max-num-seqs / --max-running-requests starts.

    Exit code 0 when the engine(s) will start with these settings, 1 when at least one does not (the verdict
    line names which, and each one's reason).

    Examples:

    \b
      hybridplan fit nemotron-h --ctx 8192 --kv-budget 40GiB
      hybridplan fit nemotron-h --ctx 8192 --gpu-mem 141GB --params 8.1e9
      hybridplan fit nemotron-h --ctx 8192 --kv-budget 40GiB --max-num-seqs 4096
      hybridplan fit qwen3-next --tp 4 --ctx 32k --kv-budget 60GiB --json
      hybridplan fit --gpu-type h100 -- vllm serve nvidia/NVIDIA-Nemotron-Nano-9B-v2 --max-model-len 32k
      hybridplan fit --gpu-type l40s -- sglang serve --model-path nvidia/Nemotron-H-8B-Base-8K --tp 2
      hybridplan fit nemotron-h --ctx 8192 --gpu-type h100 --emit vllm-config > vllm.yaml
      hybridplan fit nemotron-h --ctx 8192 --gpu-type h100 --emit k8s --out deploy/

    The commands it prints start the engines with the figures shown: the model, every setting that changes
    a figure, and the environment variables. --emit writes the same start as the engine's --config file or
    as Kubernetes manifests (docs/deploy.md).
    """
    from hybridplan.reports.fit import fit as fit_report

    _emit_args(o, "the report")
    report = fit_report(scenario(o), o.model, o.revision)
    code = 0 if report.verdict_ok else 1
    if o.emit is not None:
        wrote = _emit(o, report.targets(o.gpus_per_node))
        if not wrote:
            raise typer.Exit(code)
    show(report, o, "fit_view")
    raise typer.Exit(code)


def _emit_args(o: Options, what: str) -> None:
    """``--emit`` and ``--out`` together as they can be: to stdout the files are all that is printed."""
    if o.out is not None and o.emit is None:
        raise PlanError("--out names the folder --emit writes into: give --emit FORMAT as well")
    if o.emit is not None and o.out is None and (o.as_json or getattr(o, "as_csv", False)):
        raise PlanError(f"--emit {o.emit} without --out prints the files: give --out DIR to print {what} too")


def _emit(o: Options, targets: dict) -> bool:
    """``--emit``: the files to stdout (then nothing else is shown; False), or into ``--out`` (True: the report
    follows, with a line per file on stderr)."""
    from hybridplan.deploy import emit

    if not targets:
        raise PlanError(f"--emit {o.emit}: no engine starts with these settings, so there is nothing to deploy")
    files = emit(o.emit, targets)
    if o.out is None:
        write("---\n".join(f.text for f in files))
        return False
    try:
        o.out.mkdir(parents=True, exist_ok=True)
        for f in files:
            (o.out / f.name).write_text(f.text)
    except OSError as exc:
        raise PlanError(f"--out {o.out}: {exc.strerror or exc}") from None
    for f in files:
        say(f"wrote {o.out / f.name}")
    return True


@command(
    app,
    MODEL,
    PREFIX,
    TP,
    ENGINES,
    (param("chunk", Chunk, None),),
    DTYPES,
    ALLOW_LONG,
    JSON,
    CSV,
    short="How much of a shared prefix a later request reuses",
)
def prefix(o: Options) -> None:
    """How much of a shared prefix a second request reuses: a recurrent state is reusable only where a
    checkpoint was saved. A replay of three requests that share the prefix, through replay's policies.

    Examples:

    \b
      hybridplan prefix nemotron-h --shared 4000 --private 200
      hybridplan prefix nemotron-h --private 200 --sweep 0:6000:100 --plot p.png
      hybridplan prefix nemotron-h --private 200 --sweep 0:6000:100 --csv > reuse.csv
    """
    from hybridplan.reports.prefix import prefix as prefix_report
    from hybridplan.reports.prefix import prefix_sweep

    refuse_with_json(o.as_csv, o.as_json)
    if o.sweep is not None and o.shared is not None:
        raise PlanError("--sweep varies the shared length itself: give --shared N or --sweep A:B:STEP, not both")
    sc = scenario(o)
    if o.sweep is None:
        if o.shared is None:
            raise PlanError("give --shared N (or --sweep A:B:STEP)")
        if o.plot is not None:
            raise PlanError("--plot draws a sweep: give --sweep A:B:STEP as well")
        one = prefix_report(sc, o.shared, o.private)
        if not show_csv(one, o):
            show(one, o, "prefix_view")
        return
    with _progress_bar("replaying the sweep") as tick:
        report = prefix_sweep(sc, o.sweep, o.private, tick)
    if not show_csv(report, o, "prefix_plot"):
        show(report, o, "sweep_view", "prefix_plot")


@contextmanager
def _progress_bar(what: str) -> Iterator[Callable[[int, int], None] | None]:
    """``tick(done, total)`` for a rich progress bar on stderr, on a terminal only (None elsewhere)."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(transient=True, console=Console(stderr=True)) as bar:
        task = bar.add_task(what, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def _gpu_key(name: str | None) -> str | None:
    if name is None:
        return None
    from hybridplan.gpus import gpu

    return gpu(name).key


@command(
    app,
    CHECK_LOG,
    CHECK_LOG_FLAGS,
    DTYPES,
    JSON,
    CSV,
    name="check-log",
    short="A real start-up log beside the prediction",
)
def check_log(o: Options) -> None:
    """Read a real vLLM or SGLang start-up log: the settings it states (and the line each came from), each
    figure the engine printed beside hybridplan's prediction for those settings, and the figures hybridplan
    does not model, with the reason. Flags override the log. Exit 0 when every figure matches, 1 on a
    mismatch, 2 when the log cannot be read or holds nothing to check.

    Examples:

    \b
      hybridplan check-log vllm.log
      hybridplan check-log vllm.log --model qwen3-next --vllm-version 0.10.2
      hybridplan check-log sglang.log --model nemotron-h --tp 2 --json
      hybridplan check-log excerpt.log --kv-dtype fp8 --ssm-dtype float32
      docker logs vllm 2>&1 | hybridplan check-log -
      hybridplan check-log vllm.log --csv > figures.csv
    """
    from hybridplan.engines import LogGiven
    from hybridplan.logread import scan
    from hybridplan.reports.check_log import check, keywords

    refuse_with_json(o.as_csv, o.as_json)
    log = scan(o.log, keywords())
    given = LogGiven(
        model=o.model,
        tp=o.tp,
        vllm_version=o.vllm_version,
        sglang_version=o.sglang_version,
        mode=o.mode,
        ctx=o.ctx,
        kv_budget=o.kv_budget,
        spec_tokens=o.spec_tokens,
        max_num_seqs=o.max_num_seqs,
        max_running_requests=o.max_running_requests,
        mem_fraction_static=o.mem_fraction,
        dtype=o.dtype,
        conv_dtype=o.conv_dtype,
        ssm_dtype=o.ssm_dtype,
        kv_dtype=o.kv_dtype,
        gpu=_gpu_key(o.gpu_type),
        speculative_config=o.speculative_config,
        block_size=o.block_size,
        max_mamba_cache_size=o.max_mamba_cache_size,
        mamba_full_memory_ratio=o.full_memory_ratio,
        radix=o.radix,
        page_size=o.page_size,
        spec_method=o.spec_method,
        spec_draft=o.spec_draft,
        eagle_topk=o.eagle_topk,
        draft_tokens=o.draft_tokens,
    )
    report = check(log, given)
    if not show_csv(report, o):
        show(report, o, "check_view")
    raise typer.Exit(0 if report.ok else 1)


@command(app, JSON, short="The shipped model specs")
def models(o: Options) -> None:
    """The shipped model specs: family, layer counts and source checkpoint.

    Example:

    \b
      hybridplan models
    """
    from hybridplan.loader import shipped_specs
    from hybridplan.reports.models import ModelsReport

    show(ModelsReport(tuple(shipped_specs())), o, "models_view")


@command(app, OUTPUT, short="The GPUs --gpu-type knows")
def gpus(o: Options) -> None:
    """The GPUs --gpu-type names: the memory each reports (the CUDA total the engines size from, or
    nvidia-smi's where that is all that was found) and where the figure comes from.

    Example:

    \b
      hybridplan gpus
    """
    from hybridplan.gpus import GPUS
    from hybridplan.reports.gpus import GpusReport

    show(GpusReport(GPUS), o, "gpus_view")


# their modules (and options) load only when the command is built
command_in(
    app,
    "hybridplan.profile.command:profile",
    engine_flags=True,
    short="Allocate the predicted pools on a GPU and time the kernels",
)
command_in(
    app,
    "hybridplan.replay.command:replay",
    engine_flags=True,
    short="A trace through each engine's prefix cache: what each request reuses, and why",
)


SPEED = (
    param(
        "input",
        tokens_option("--input", "Prompt tokens (bench --random-input-len; default: --ctx less --output, or 1024)."),
        None,
    ),
    param("output", tokens_option("--output", "Output tokens (bench --random-output-len)."), 512),
    param(
        "concurrency",
        Flag(
            int,
            option(
                "--concurrency",
                metavar="N",
                parser=count_value("--concurrency"),
                help="Requests in flight (bench --max-concurrency); the decode table runs up to it.",
            ),
        ),
        64,
    ),
    param(
        "num_prompts",
        Flag(
            Optional[int],
            option(
                "--num-prompts",
                metavar="N",
                parser=count_value("--num-prompts"),
                help="Requests the benchmark sends (default 1000).",
            ),
        ),
        None,
    ),
    param(
        "acceptance",
        Flag(
            Optional[float],
            option(
                "--acceptance",
                metavar="RATE",
                parser=number_value("--acceptance", 0, 1, "a speculative acceptance rate"),
                help="With --spec-tokens: the chance a proposed token is accepted.",
            ),
        ),
        None,
    ),
    param(
        "range_ratio",
        Flag(
            float,
            option(
                "--random-range-ratio",
                metavar="R",
                parser=range_ratio_value,
                help="Spread of each request's lengths as the bench client draws them "
                "(default 0.0, both clients' own): vllm bench serve takes "
                "[I(1-R), I(1+R)], so 0 is exactly --input; sglang.bench_serving "
                "takes [I*R, I], so 0 is anything from 1 to --input and 1 is exact.",
            ),
        ),
        0.0,
    ),
    param("plot", plot_option("Write tokens/s against batch with the roofline to this file."), None),
    param(
        "dataset_lengths",
        Flag(
            Optional[Path],
            option(
                "--dataset-lengths",
                metavar="FILE",
                help="Each request's prompt and output tokens (JSONL or CSV: "
                "input,output): the benchmark of that mix, in place of "
                "--input/--output.",
            ),
        ),
        None,
    ),
    param(
        "calibration",
        Flag(
            Optional[Path],
            option(
                "--calibration",
                metavar="FILE",
                help="A profile's measurements (hybridplan profile --save-calibration) "
                "in place of the fitted efficiencies where they say more.",
            ),
        ),
        None,
    ),
)


@command(
    app,
    MODEL,
    (param("ctx", ctx_option("Tokens per request, prompt and output (default: --input + --output):"), None),),
    SPEED,
    BUDGET,
    ADMISSION,
    TP,
    ENGINES,
    DTYPES,
    SPEC_TOKENS,
    (param("chunk", Chunk, None),),
    ALLOW_LONG,
    JSON,
    short="Decode and prefill speed per GPU, and what a serving benchmark prints",
)
def speed(o: Options) -> None:
    """Decode step time and tokens/s at each batch size, prefill throughput and TTFT for the prompt, and what
    bounds each (weights, KV reads, state reads and writes, FLOPs, communication, launch overhead) per layer
    kind, from the bytes and FLOPs of the planner's own footprint against the GPU's datasheet; then what
    `vllm bench serve` / `sglang.bench_serving` print for a random dataset of that shape. Estimates: docs/speed.md
    and docs/VALIDATION.md give their error against published measurements.

    Examples:

    \b
      hybridplan speed qwen3-next --gpu-type h100 --tp 4 --ctx 32k --concurrency 64 --output 512
      hybridplan speed nemotron-h --gpu-type h200 --input 4096 --output 1024 --concurrency 256 --json
      hybridplan speed qwen3-next --gpu-type h200 --tp 4 --engine sglang --random-range-ratio 0.8
      hybridplan speed nemotron-h --gpu-type h100 --calibration h100-nemotron-h.json
    """
    from msgspec.structs import replace

    from hybridplan.reports.speed import speed as speed_report
    from hybridplan.speed.bench import Workload
    from hybridplan.speed.calibration import load as load_calibration

    cal = load_calibration(o.calibration) if o.calibration is not None else None
    if o.dataset_lengths is not None:
        from hybridplan.speed import dataset

        if o.input is not None:
            raise PlanError("--dataset-lengths gives each request's prompt and output: drop --input")
        reqs = dataset.requests(dataset.read(o.dataset_lengths), o.num_prompts)
        wl = dataset.mean_workload(reqs, o.concurrency, o.acceptance)
        longest = max(i + n for i, n in reqs)
        if o.ctx is not None and o.ctx < longest:
            raise PlanError(f"--ctx {o.ctx} is shorter than the dataset's longest request ({longest:,} tokens)")
        sc = replace(scenario(o), ctx=o.ctx if o.ctx is not None else longest)
        mix = dataset.Mix(reqs, o.concurrency, None, o.acceptance, source=o.dataset_lengths.name)
        show(
            speed_report(sc, wl, wl.input + wl.output // 2, calibration=cal, mix=mix),
            o,
            "hybridplan.render_speed:speed_view",
            "speed_plot",
        )
        return
    out = o.output
    given = o.input if o.input is not None else (o.ctx - out if o.ctx is not None else 1024)
    if given < 1:
        raise PlanError(f"--ctx {o.ctx} leaves no prompt for --output {out}: give --input")
    sc = replace(scenario(o), ctx=o.ctx if o.ctx is not None else given + out)
    wl = Workload(given, out, o.concurrency, o.num_prompts, o.acceptance, range_ratio=o.range_ratio)
    show(speed_report(sc, wl, given + out // 2, calibration=cal), o, "hybridplan.render_speed:speed_view", "speed_plot")


PLAN = (
    param(
        "concurrency",
        Flag(
            Optional[int],
            option(
                "--concurrency",
                metavar="N",
                parser=count_value("--concurrency"),
                help="Requests of --ctx tokens to hold at once, over all data-parallel engines.",
            ),
        ),
        None,
    ),
    param(
        "gpus",
        Flag(
            Optional[int],
            option("--gpus", metavar="N", parser=count_value("--gpus"), help="The most GPUs to use (default 64)."),
        ),
        None,
    ),
    param(
        "pick",
        Flag(
            Optional[int],
            option(
                "--pick",
                metavar="N",
                parser=count_value("--pick"),
                help="With --emit: the Nth plan as listed (default 1, the best).",
            ),
        ),
        None,
    ),
    param(
        "plot",
        plot_option(
            "Write decode tok/s per GPU of the plans against their GPUs, and the layouts tried on "
            "each count by why they fail, to this file"
        ),
        None,
    ),
)


@command(
    app,
    MODEL,
    (param("ctx", ctx_option("Tokens per request (default: the model's maximum as the engines derive it):"), None),),
    PLAN,
    BUDGET,
    ENGINES,
    ALLOW_LONG,
    OUTPUT,
    CSV,
    EMIT,
    short="How many GPUs, split how: TP × PP × DP × EP plans that hold a target",
)
def plan(o: Options) -> None:
    """The fewest GPUs of --gpu-type that serve --concurrency requests of --ctx tokens, and how to split them:
    tensor, pipeline and data parallelism, experts sliced or dealt whole, the KV and state dtypes and vLLM's
    Mamba cache mode, for both engines. Each plan comes with the command that starts it (`fit` confirms it),
    and the layouts on fewer GPUs with why they fail. Exit code 0 with a plan, 1 without.

    Examples:

    \b
      hybridplan plan qwen3.5-397b-a17b --ctx 32k --concurrency 128 --gpu-type h100
      hybridplan plan nemotron-3-ultra-550b-a55b --ctx 32k --concurrency 128 --gpu-type h200 --engine vllm
      hybridplan plan qwen3.5-397b-a17b --ctx 32k --concurrency 128 --gpu-type h100 --csv > plans.csv
      hybridplan plan qwen3.5-397b-a17b --ctx 32k --concurrency 128 --gpu-type h100 --emit k8s --out deploy/

    --emit writes the plan --pick N names (the best by default) as `fit` writes it (docs/deploy.md).
    """
    from hybridplan.plan import plan as make_plan
    from hybridplan.reports.plan import PlanReport

    refuse_with_json(o.as_csv, o.as_json)
    if o.pick is not None and o.emit is None:
        raise PlanError("--pick chooses the plan --emit writes: give --emit FORMAT as well")
    _emit_args(o, "the plans")
    if o.concurrency is None:
        raise PlanError("give --concurrency: the requests of --ctx tokens to hold at once")
    if getattr(o, "gpu_type", None) is None and getattr(o, "gpu_mem", None) is None:
        raise PlanError("give --gpu-type (or --gpu-mem): plan sizes each GPU's memory")
    shown = [False]

    def progress(done: int, total: int) -> None:
        if total > 200 and not shown[0] and sys.stderr.isatty():
            say(f"trying up to {total} layouts…")
            shown[0] = True

    report = PlanReport(make_plan(scenario(o), o.concurrency, o.gpus, progress=progress), o.model, o.revision)
    if o.emit is not None and not _emit(o, report.targets(1 if o.pick is None else o.pick, o.gpus_per_node)):
        if o.plot is not None:  # the files went to stdout alone: the plot is still written
            from hybridplan import plots

            plots.plan_plot(report, o.plot)
        raise typer.Exit(0)
    if not show_csv(report, o, "plan_plot"):
        show(report, o, "hybridplan.render_plan:plan_view", "plan_plot")
    raise typer.Exit(0 if report.ok else 1)


def _command_group(args: list[str]) -> Any:
    """The click group to run: with only the command the first argument names (building every command's options
    is most of the start-up time; benchmarks/startup.py), else with all of them (help, a misspelt command)."""
    import typer.main

    every = app.registered_commands
    name = args[0] if args and not args[0].startswith("-") else None
    one = [
        c for c in every if name is not None and (c.name or typer.main.get_command_name(c.callback.__name__)) == name
    ]
    app.registered_commands = one or every
    for c in app.registered_commands:
        signature(c.callback)
    try:
        return typer.main.get_command(app)
    finally:
        app.registered_commands = every


def _engine_flags(args: list[str], group: Any) -> tuple[list[str], list[str]]:
    """The command's arguments with engine flags and a pasted engine line read as hybridplan's options
    (pasted.expand), and the notes on what was set aside."""
    from hybridplan.pasted import expand

    if not args or args[0].startswith("-"):
        return args, []
    cmd = group.commands.get(args[0])
    if cmd is None:
        return args, []
    rest, notes = expand(cmd, args[1:])
    return [args[0], *rest], notes


def main(argv: list[str] | None = None) -> int:
    """Entry point: one line on stderr and exit 2 for any bad input, never a traceback."""
    args = list(sys.argv[1:] if argv is None else argv)
    notes: list[str] = []
    try:
        group = _command_group(args)
        args, notes = _engine_flags(args, group)
        rv = group.main(args=args, standalone_mode=False, prog_name="hybridplan")
    except PlanError as exc:
        say(f"error: {exc}")
        code = exc.exit_code
    except _UsageError as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `hybridplan` or a bare group: its help
            write(exc.ctx.get_help() + "\n")
            code = 0
        else:
            say(f"error: {exc.format_message()}")
            code = exc.exit_code
    except typer.Abort:
        say("interrupted")
        code = 130
    except KeyboardInterrupt:
        say("interrupted")
        code = 130
    except BrokenPipeError:
        code = 0
    except Exception as exc:  # output that cannot be written (> /dev/full), else a bug of ours: one line each
        from hybridplan.output import failed

        code = failed(exc)
    else:
        code = rv if isinstance(rv, int) else 0
    notes += said()  # the default MODEL taken (hybridplan/build.py)
    if code in (0, 1):
        for line in notes:
            say(line)
    if argv is None:
        sys.exit(code)
    return code


__all__ = ["app", "main"]
