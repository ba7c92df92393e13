"""The ``hybridplan profile`` command. Importing this module loads typer only: torch, triton and pynvml are
imported when the command runs."""

from __future__ import annotations

import json
import sys
from typing import Optional

import typer

MODEL_HELP = "Shipped spec name or alias (see `hybridplan models`), a config.json, a model folder, or a spec YAML."


def profile(
    model: str = typer.Argument("nemotron-h", help=MODEL_HELP),
    gpu: Optional[int] = typer.Option(None, "--gpu", help="CUDA device index (default 0).", min=0),
    slots: Optional[int] = typer.Option(None, "--slots", help="Sequences in the state pool, all stepped at decode "
                                                              "(default 256; 4 with --interpret)."),
    ctx: Optional[int] = typer.Option(None, "--ctx", help="Tokens of attention KV to allocate (default: the model's "
                                                          "maximum; 64 with --interpret)."),
    tokens: Optional[int] = typer.Option(None, "--tokens", help="Prefill length through the chunk scan (default "
                                                                "8192; 32 with --interpret)."),
    dtype: Optional[str] = typer.Option(None, "--dtype", help="Model dtype (vLLM --dtype); also the activations'."),
    conv_dtype: Optional[str] = typer.Option(None, "--conv-dtype", help="Conv state dtype (vLLM --mamba-cache-dtype)."),
    ssm_dtype: Optional[str] = typer.Option(None, "--ssm-dtype", help="SSM state dtype (vLLM "
                                                                      "--mamba-ssm-cache-dtype)."),
    kv_dtype: Optional[str] = typer.Option(None, "--kv-dtype", help="Attention KV dtype (vLLM --kv-cache-dtype)."),
    interpret: bool = typer.Option(False, "--interpret", help="No GPU: run the same pipeline on the CPU through the "
                                                              "Triton interpreter, on the model shrunk to toy sizes."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON (predicted and measured side by "
                                                       "side)."),
    exact: bool = typer.Option(False, "--bytes", help="Show exact byte counts beside the readable units."),
) -> None:
    """Check the planner on real hardware: allocate the pools it predicts, run the kernels, compare.

    Allocates the state pool (--slots) and the attention KV (--ctx)
    at the planner's shapes (tp 1), and checks the allocation byte for byte
    against the PyTorch allocator's counters and NVML.
    Times a decode step over every slot and a prefill of --tokens tokens
    on every recurrent layer, against a measured device-to-device copy.
    Refuses, before allocating, when the prediction exceeds free memory.
    Needs torch, triton and nvidia-ml-py (the gpu extra).

    Examples:

      hybridplan profile nemotron-h --gpu 0

      hybridplan profile jamba --gpu 1 --slots 64 --ctx 32768 --json

      hybridplan profile nemotron-h --interpret --json
    """
    from hybridplan.loader import load_model
    from hybridplan.profile.pipeline import run_profile
    from hybridplan.profile.render import progress_display
    from hybridplan.scenario import DtypeChoice

    spec = load_model(model)
    choice = DtypeChoice(dtype=dtype, conv=conv_dtype, ssm=ssm_dtype, kv=kv_dtype)
    with progress_display() as reporter:
        report = run_profile(spec, gpu=gpu, interpret=interpret, slots=slots, ctx=ctx, tokens=tokens, choice=choice,
                             reporter=reporter)
    if as_json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
        return
    from hybridplan.profile.render import profile_view
    from hybridplan.render import console

    console().print(profile_view(report, exact=exact))
