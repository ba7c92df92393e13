"""The ``hybridplan`` command line. Each command parses, calls one pure function, and renders."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

import typer

from hybridplan.errors import PlanError

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


def _emit_json(payload: dict) -> None:
    sys.stdout.write(json.dumps(payload, indent=2) + "\n")


def _choice(dtype, conv, ssm, kv):
    from hybridplan.plan import DtypeChoice

    return DtypeChoice(dtype=dtype, conv=conv, ssm=ssm, kv=kv)


@app.command()
def size(
    model: str = typer.Argument("nemotron-h", help=MODEL_HELP),
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
    as_json: bool = JsonOpt,
    exact: bool = BytesOpt,
) -> None:
    """Shapes and bytes of every recurrent layer, KV per token and at the context, totals, the state pool.

    Examples:

      hybridplan size nemotron-h --ctx 131072

      hybridplan size qwen3-next --tp 4 --ssm-dtype fp32 --json

      hybridplan size ./Zamba2-7B/config.json --vs mistral-7b --bytes
    """
    from hybridplan import plan
    from hybridplan.engines import vllm
    from hybridplan.loader import load_model

    spec = load_model(model)
    report = plan.size(spec, load_model(vs), ctx=ctx if ctx is not None else plan.default_ctx(spec), tp=tp,
                       slots=slots, choice=_choice(dtype, conv_dtype, ssm_dtype, kv_dtype), spec_tokens=spec_tokens,
                       rel=vllm.release(vllm_version))
    if as_json:
        _emit_json(report.to_dict())
        return
    from hybridplan.render import console, size_view

    console().print(size_view(report, exact=exact))


@app.command()
def crossover(
    model: str = typer.Argument("nemotron-h", help=MODEL_HELP),
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
    if plot is not None:
        from hybridplan.plots import crossover_plot

        crossover_plot(report, plot)
    if as_json:
        _emit_json(report.to_dict())
        return
    from hybridplan.render import console, crossover_view

    console().print(crossover_view(report))
    if plot is not None:
        console().print(f"plot written to {plot}")


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


def main(argv: list[str] | None = None) -> int:
    """Entry point: one line on stderr and exit 2 for any bad input, never a traceback."""
    try:
        rv = app(args=argv, standalone_mode=False, prog_name="hybridplan")
    except PlanError as exc:
        sys.stderr.write(f"hybridplan: error: {exc}\n")
        code = exc.exit_code
    except typer.TyperException as exc:  # usage errors: unknown option, bad integer, missing argument
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
