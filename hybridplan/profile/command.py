"""The ``hybridplan profile`` command. Importing this module loads typer only: torch, triton and pynvml are
imported when the command runs."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from hybridplan.options import DTYPES, MODEL, OUTPUT, Flag, Options, count_value, option, param, tokens_option

GROUPS = (
    MODEL,
    (
        param(
            "gpu",
            Flag(Optional[int], option("--gpu", min=0, metavar="INDEX", help="CUDA device index (default 0).")),
            None,
        ),
        param(
            "slots",
            Flag(
                Optional[int],
                option(
                    "--slots",
                    metavar="N",
                    parser=count_value("--slots"),
                    help="Sequences in the state pool, all stepped at decode (default 256; 4 with --interpret).",
                ),
            ),
            None,
        ),
        param(
            "ctx",
            tokens_option(
                "--ctx", "Tokens of attention KV to allocate (default: the model's maximum; 64 with --interpret)."
            ),
            None,
        ),
        param(
            "tokens",
            tokens_option("--tokens", "Prefill length through the chunk scan (default 8192; 32 with --interpret)."),
            None,
        ),
        param(
            "interpret",
            Flag(
                bool,
                option(
                    "--interpret",
                    help="No GPU: run the same pipeline on the CPU "
                    "through the Triton interpreter, on the model "
                    "shrunk to toy sizes.",
                ),
            ),
            False,
        ),
        param(
            "save_calibration",
            Flag(
                Optional[Path],
                option(
                    "--save-calibration",
                    metavar="FILE",
                    help="Also write what was measured (decode bandwidth, scan prefill "
                    "throughput, copy bandwidth, launch overhead) for hybridplan "
                    "speed --calibration.",
                ),
            ),
            None,
        ),
    ),
    DTYPES,
    OUTPUT,
)


def profile(o: Options) -> None:
    """Check the planner on real hardware: allocate the pools it predicts, run the kernels, compare.

    Allocates the state pool (--slots) and the attention KV (--ctx)
    at the planner's shapes (tp 1), and checks the allocation byte for byte
    against the PyTorch allocator's counters and NVML.
    Times a decode step over every slot and a prefill of --tokens tokens
    on every recurrent layer, against a measured device-to-device copy.
    Refuses, before allocating, when the prediction exceeds free memory.
    Needs torch, triton and nvidia-ml-py (the gpu extra).

    Examples:

    \b
      hybridplan profile nemotron-h --gpu 0
      hybridplan profile jamba --gpu 1 --slots 64 --ctx 32768 --json
      hybridplan profile nemotron-h --interpret --json
      hybridplan profile nemotron-h --gpu 0 --save-calibration h100-nemotron-h.json
    """
    from hybridplan.build import note_default_model
    from hybridplan.loader import load_model
    from hybridplan.profile.pipeline import ProfileRequest, run_profile
    from hybridplan.profile.render import progress_display
    from hybridplan.scenario import DtypeChoice
    from hybridplan.show import show

    spec = load_model(o.model, o.revision)
    note_default_model(f"{o.model} ({spec.source})" if spec.source else o.model)
    req = ProfileRequest(
        spec,
        gpu=o.gpu,
        interpret=o.interpret,
        slots=o.slots,
        ctx=o.ctx,
        tokens=o.tokens,
        dtypes=DtypeChoice(o.dtype, o.conv_dtype, o.ssm_dtype, o.kv_dtype),
    )
    with progress_display() as reporter:
        report = run_profile(req, reporter)
    if o.save_calibration is not None:
        from hybridplan.speed.calibration import from_profile, save

        save(from_profile(report.to_dict()), o.save_calibration)
    show(report, o, "hybridplan.profile.render:profile_view")
