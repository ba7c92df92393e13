"""The command-line options, each declared once.

Options are ``Flag(type, option(...))`` declarations, grouped as the commands share them. ``command``
(hybridplan/signature.py) gives a command the groups it names and hands it one ``Options`` value, so every
command reads a flag the same way and no help text is written twice; hybridplan/build.py makes the ``Scenario``
of them. A declaration becomes typer's ``typer.Option(...)`` only when its command is built (``signature``):
the CLI builds the one command it runs, and making every command's options up front
cost a fifth of the start-up above a bare ``import typer`` (docs/startup.md). Shell completers are attached
only when the shell asks for completions. Values are read when the line is parsed (a size, a token count, a
fraction), so a bad one is refused before anything is computed.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import typer

from hybridplan.errors import PlanError
from hybridplan.units import MAX_COUNT, MAX_TOKENS, parse_count, parse_size

MODEL_HELP = (
    "A shipped spec name or alias (see `hybridplan models`), a config.json, a model folder, a spec "
    "YAML, or a Hugging Face Hub id (org/name: its config.json only, from the local cache first)."
)
SIZE_HELP = "GB means 10^9 bytes, GiB 2^30 bytes"

Options = SimpleNamespace


class Decl:
    """``typer.Option(default, *decls, **kw)`` (or ``typer.Argument``), made when its command is built."""

    __slots__ = ("make", "decls", "kw")

    def __init__(self, make: str, decls: tuple[str, ...], kw: dict[str, Any]) -> None:
        self.make, self.decls, self.kw = make, decls, kw

    def build(self, default: Any) -> Any:
        kw = self.kw
        if "autocompletion" in kw and not _completing():  # typer reads each completer's signature
            kw = {k: v for k, v in kw.items() if k != "autocompletion"}
        default = ... if default is inspect.Parameter.empty else default
        if self.make == "option":
            return typer.Option(default, *self.decls, **kw)
        return typer.Argument(default, **kw)


@lru_cache(maxsize=1)
def _completing() -> bool:
    """Whether the shell asked for completions (click's _HYBRIDPLAN_COMPLETE)."""
    import os

    return any(k.endswith("_COMPLETE") for k in os.environ)


class Flag:
    """``Flag(type, option(...))``: an option's type and its declaration, made into typer's parameter when its
    command is built."""

    __slots__ = ("type", "decl")

    def __init__(self, type_: Any, decl: Decl) -> None:
        self.type, self.decl = type_, decl


#: a command's parameter: (name, its Flag or type, its default)
Param = tuple


def param(name: str, annotation: Any, default: Any = inspect.Parameter.empty) -> Param:
    return (name, annotation, default)


def option(*decls: str, **kw: Any) -> Decl:
    return Decl("option", decls, kw)


def argument(**kw: Any) -> Decl:
    return Decl("argument", (), kw)


# --- values as the line is parsed -----------------------------------------------------------------


def tokens_value(flag: str) -> Callable[[str], int]:
    return lambda text: parse_count(text, what=flag, limit=MAX_TOKENS)


def count_value(flag: str) -> Callable[[str], int]:
    return lambda text: parse_count(text, what=flag, limit=MAX_COUNT)


def _size(flag: str, allow_zero: bool = False) -> Callable[[str], int]:
    return lambda text: parse_size(text, what=flag, allow_zero=allow_zero)


def number_value(flag: str, low: float, high: float | None, why: str) -> Callable[[str], float]:
    """A number in (low, high]; ``why`` names whose bound it is."""

    def read(text: Any) -> float:
        try:
            value = float(text)
        except ValueError:
            raise PlanError(f"{flag}: cannot read {text!r} as a number") from None
        if not (low < value and (high is None or value <= high)):
            span = f"({low:g}, {high:g}]" if high is not None else f"greater than {low:g}"
            raise PlanError(f"{flag} must be {span} ({why}), got {text}")
        return value

    return read


def range_ratio_value(text: Any) -> float:
    """--random-range-ratio: a number, 0 or more; each client's own bound is checked where its draw is made
    (hybridplan/engines/*/client.py), with that client's reason."""
    try:
        value = float(text)
    except ValueError:
        raise PlanError(f"--random-range-ratio: cannot read {text!r} as a number") from None
    if not 0 <= value < float("inf"):
        raise PlanError(f"--random-range-ratio must be 0 or more, got {text}")
    return value


def _offload_gb(text: Any) -> int | None:
    """--cpu-offload-gb: GiB per GPU, 0 or more (vllm/config/offload.py ``Field(default=0, ge=0)``), as the bytes
    both engines move: ``int(gb * 1024**3)`` (vllm/model_executor/offloader, sglang/srt/utils/offloader.py)."""
    try:
        value = float(text)
    except ValueError:
        raise PlanError(f"--cpu-offload-gb: cannot read {text!r} as a number") from None
    if not 0 <= value < 1e6:
        raise PlanError(f"--cpu-offload-gb must be 0 or more (GiB per GPU), got {text}")
    return int(value * 1024**3) or None


def _choices(values: Callable[[], Iterable[str]]) -> Callable[[str], list[str]]:
    """Shell completion for an option's value."""
    return lambda incomplete: [v for v in values() if v.startswith(incomplete)]


def _complete_model(incomplete: str) -> list[str]:
    from hybridplan.loader import shipped_names

    return sorted(n for n in shipped_names() if n.startswith(incomplete.lower()))


def _vllm_versions() -> list[str]:
    from hybridplan.engines.vllm.releases import known_versions

    return known_versions()


def _sglang_versions() -> list[str]:
    from hybridplan.engines.sglang.releases import VERSIONS

    return list(VERSIONS)


def _dtypes(kind: str) -> Callable[[], list[str]]:
    def names() -> list[str]:
        from hybridplan.engines.vllm import dtypes

        return ["auto", *{"model": dtypes.MODEL_DTYPES, "state": dtypes.STATE_DTYPES, "kv": dtypes.KV_DTYPES}[kind]]

    return names


# --- the options ----------------------------------------------------------------------------------

Model = Flag(str, argument(help=MODEL_HELP, metavar="MODEL", autocompletion=_complete_model))
Tp = Flag(
    int,
    option(
        "--tp",
        metavar="N",
        parser=count_value("--tp"),
        help="Tensor-parallel size; sizes are per rank. Refused where the engines refuse it.",
    ),
)
Pp = Flag(
    int,
    option(
        "--pp",
        metavar="N",
        parser=count_value("--pp"),
        help="Pipeline-parallel stages (vLLM --pipeline-parallel-size, SGLang --pp-size): each "
        "stage holds its own layers; sizes are per stage and rank.",
    ),
)


def layer_counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise PlanError(
            f"--pp-layers: expected layer counts separated by commas (as VLLM_PP_LAYER_PARTITION), got {text!r}"
        ) from None
    if any(c < 0 for c in counts):
        raise PlanError(f"--pp-layers: layer counts must not be negative, got {text!r}")
    return counts


PpLayers = Flag(
    Optional[str],
    option(
        "--pp-layers",
        metavar="N,N,...",
        help="The layers of each pipeline stage, as VLLM_PP_LAYER_PARTITION / "
        "SGLANG_PP_LAYER_PARTITION give them; default: the engine's split.",
    ),
)
Dtype = Flag(
    Optional[str],
    option(
        "--dtype",
        metavar="DTYPE",
        autocompletion=_choices(_dtypes("model")),
        help="Model dtype (vLLM --dtype); default: the config's.",
    ),
)
ConvDtype = Flag(
    Optional[str],
    option(
        "--conv-dtype",
        metavar="DTYPE",
        autocompletion=_choices(_dtypes("state")),
        help="Conv state dtype (vLLM --mamba-cache-dtype).",
    ),
)
SsmDtype = Flag(
    Optional[str],
    option(
        "--ssm-dtype",
        metavar="DTYPE",
        autocompletion=_choices(_dtypes("state")),
        help="SSM state dtype (vLLM --mamba-ssm-cache-dtype).",
    ),
)
KvDtype = Flag(
    Optional[str],
    option(
        "--kv-dtype",
        metavar="DTYPE",
        autocompletion=_choices(_dtypes("kv")),
        help="Attention KV dtype (vLLM --kv-cache-dtype), e.g. fp8.",
    ),
)
SpecTokens = Flag(
    int,
    option(
        "--spec-tokens",
        metavar="N",
        parser=count_value("--spec-tokens"),
        help="Speculative tokens (widen conv windows, add pages); vLLM's "
        "--speculative-config JSON and SGLang's --speculative-num-steps are read "
        "too.",
    ),
)
#: what an engine line names of its speculative decoding beside the token count (hybridplan/cmdline.py)
SpecMethod = Flag(
    Optional[str],
    option(
        "--spec-method",
        metavar="METHOD",
        hidden=True,
        help="The speculative method (vLLM's method, SGLang's algorithm).",
    ),
)
SpecDraft = Flag(
    Optional[str],
    option("--spec-draft", metavar="MODEL", hidden=True, help="The draft model as the engine line names it."),
)
SpecConfig = Flag(
    Optional[str],
    option(
        "--speculative-config",
        metavar="JSON",
        help="vLLM --speculative-config: the method, its tokens and draft "
        "(hybridplan/speculative.py reads it as vLLM does).",
    ),
)
EagleTopk = Flag(
    Optional[int],
    option(
        "--eagle-topk",
        metavar="K",
        hidden=True,
        parser=count_value("--speculative-eagle-topk"),
        help="SGLang --speculative-eagle-topk.",
    ),
)
VllmVersion = Flag(
    Optional[str],
    option(
        "--vllm-version",
        metavar="VERSION",
        autocompletion=_choices(_vllm_versions),
        help="vLLM release whose rules apply, 0.10.0 to 0.33.0; a minor means its newest patch (default: 0.33.0).",
    ),
)
SglangVersion = Flag(
    Optional[str],
    option(
        "--sglang-version",
        metavar="VERSION",
        autocompletion=_choices(_sglang_versions),
        help="SGLang release whose rules apply, 0.5.2 to 0.5.23 (default: 0.5.23).",
    ),
)
Mode = Flag(
    Optional[str],
    option(
        "--mode",
        metavar="MODE",
        autocompletion=_choices(lambda: ("none", "align", "all")),
        help="vLLM mamba cache mode: none, align or all (default: every mode).",
    ),
)
PrefixCaching = Flag(
    Optional[bool],
    option(
        "--enable-prefix-caching/--no-enable-prefix-caching",
        help="vLLM prefix caching on or off: the mamba cache mode the release picks for it (default: the release's).",
    ),
)
BlockSize = Flag(
    Optional[int],
    option(
        "--block-size",
        metavar="TOKENS",
        parser=count_value("--block-size"),
        help="vLLM --block-size (the block only grows from it).",
    ),
)
GdnBackend = Flag(
    Optional[str],
    option(
        "--gdn-prefill-backend",
        metavar="BACKEND",
        autocompletion=_choices(lambda: ("flashinfer", "triton")),
        help="vLLM --gdn-prefill-backend: flashinfer or triton (default: the release's pick for the GPU).",
    ),
)
PerformanceMode = Flag(
    Optional[str],
    option(
        "--performance-mode",
        metavar="MODE",
        autocompletion=_choices(lambda: ("balanced", "interactivity", "throughput")),
        help="vLLM --performance-mode (0.17.0 on): throughput doubles the default batch limits.",
    ),
)
Engine = Flag(
    str,
    option(
        "--engine",
        metavar="ENGINE",
        autocompletion=_choices(lambda: ("vllm", "sglang", "both")),
        help="vllm, sglang or both.",
    ),
)
Radix = Flag(
    str,
    option(
        "--radix",
        metavar="STRATEGY",
        autocompletion=_choices(lambda: ("auto", "no_buffer", "extra_buffer", "extra_buffer_lazy", "off")),
        help="SGLang --mamba-radix-cache-strategy: auto, no_buffer, extra_buffer, "
        "extra_buffer_lazy, or off (--disable-radix-cache).",
    ),
)
PageSize = Flag(
    int,
    option(
        "--page-size",
        metavar="TOKENS",
        parser=count_value("--page-size"),
        help="SGLang --page-size: tokens per KV page.",
    ),
)
NoOverlap = Flag(
    bool,
    option("--disable-overlap-schedule", help="SGLang without its overlap scheduler (one extra_buffer slot fewer)."),
)
DraftTokens = Flag(
    Optional[int],
    option(
        "--draft-tokens",
        metavar="N",
        parser=count_value("--draft-tokens"),
        help="SGLang --speculative-num-draft-tokens (default: --spec-tokens + 1).",
    ),
)
SglangEnv = Flag(
    Optional[list[str]],
    option(
        "--sglang-env",
        metavar="NAME=VALUE",
        help="An SGLang environment variable of its Mamba sizing: SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=1 (repeatable).",
    ),
)
Chunk = Flag(
    Optional[int],
    option(
        "--max-num-batched-tokens",
        metavar="TOKENS",
        parser=tokens_value("--max-num-batched-tokens"),
        help="Prefill chunk limit (vLLM --max-num-batched-tokens, SGLang "
        "--chunked-prefill-size; default: each engine's for the GPU and "
        "release).",
    ),
)
AllowLong = Flag(
    bool,
    option(
        "--allow-long-context",
        help="Start with a context beyond the model's own maximum, as "
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 and "
        "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 allow.",
    ),
)
AsJson = Flag(bool, option("--json", help="Print the result as JSON."))
Exact = Flag(bool, option("--bytes", help="Show exact byte counts beside the readable units."))


def tokens_option(flag: str, help: str) -> Any:
    return Flag(Optional[int], option(flag, metavar="TOKENS", parser=tokens_value(flag), help=help))


def ctx_option(help: str) -> Any:
    return Flag(
        Optional[int],
        option(
            "--ctx",
            metavar="TOKENS",
            parser=tokens_value("--ctx"),
            help=f"{help} 131072, 128k (128,000) or 128K (131,072).",
        ),
    )


def size_option(flag: str, help: str) -> Any:
    return Flag(Optional[int], option(flag, metavar="SIZE", parser=_size(flag), help=f"{help} ({SIZE_HELP})."))


#: the formats --plot writes (matplotlib's Agg backend, by the file's suffix)
PLOT_FORMATS = (".png", ".svg", ".pdf")


def _plot_path(text: str) -> Path:
    """A plot file, checked before anything is computed: a format matplotlib writes, and matplotlib present."""
    path = Path(text)
    if path.suffix.lower() not in PLOT_FORMATS:
        raise PlanError(f"--plot {text}: name a file ending in {', '.join(PLOT_FORMATS)}")
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise PlanError("--plot needs matplotlib: pip install 'hybridplan[plot]'")
    return path


def plot_option(help: str) -> Any:
    return Flag(
        Optional[Path], option("--plot", metavar="FILE.png", parser=_plot_path, help=f"{help} (.png, .svg or .pdf)")
    )


# --- the groups commands share --------------------------------------------------------------------

Revision = Flag(
    Optional[str],
    option("--revision", metavar="REV", help="With a Hugging Face Hub id: the branch, tag or commit to read."),
)

Quantization = Flag(
    Optional[str],
    option(
        "--quantization",
        metavar="METHOD",
        hidden=True,
        help="The engines' --quantization: only the checkpoint's own method is sized.",
    ),
)

MODEL = (
    param("model", Model, "nemotron-h"),
    param("revision", Revision, None),
    param("quantization", Quantization, None),
)
TP = (param("tp", Tp, 1),)
#: pipeline stages: only for the commands that size them (size, fit)
PP = (param("pp", Pp, 1), param("pp_layers", PpLayers, None))
#: data and expert parallelism: only for the commands that size them (fit)
DP = (
    param(
        "dp",
        Flag(
            int,
            option(
                "--dp",
                metavar="N",
                parser=count_value("--dp"),
                help="Data-parallel ranks (vLLM --data-parallel-size: whole engines, their MoE layers over all data × "
                "tensor ranks; SGLang --dp-size: replicas, or attention groups with --enable-dp-attention).",
            ),
        ),
        1,
    ),
    param(
        "expert_parallel",
        Flag(
            bool,
            option(
                "--enable-expert-parallel",
                help="vLLM --enable-expert-parallel: the routed experts dealt whole over the data × tensor ranks.",
            ),
        ),
        False,
    ),
    param(
        "ep_size",
        Flag(
            int,
            option(
                "--ep-size",
                metavar="N",
                parser=count_value("--ep-size"),
                help="SGLang --ep-size: the routed experts dealt whole over N of the tensor ranks.",
            ),
        ),
        1,
    ),
    param(
        "dp_attention",
        Flag(
            bool,
            option(
                "--enable-dp-attention",
                help="SGLang --enable-dp-attention: attention and recurrent layers data-parallel "
                "over --dp groups of --tp / --dp ranks, the MLP and MoE over all --tp.",
            ),
        ),
        False,
    ),
)
DTYPES = (
    param("dtype", Dtype, None),
    param("conv_dtype", ConvDtype, None),
    param("ssm_dtype", SsmDtype, None),
    param("kv_dtype", KvDtype, None),
)
SPEC_TOKENS = (
    param("spec_tokens", SpecTokens, 0),
    param("speculative_config", SpecConfig, None),
    param("spec_method", SpecMethod, None),
    param("spec_draft", SpecDraft, None),
    param("eagle_topk", EagleTopk, None),
)
VLLM = (
    param("vllm_version", VllmVersion, None),
    param("mode", Mode, None),
    param("prefix_caching", PrefixCaching, None),
    param("block_size", BlockSize, None),
    param("gdn_backend", GdnBackend, None),
    param("performance_mode", PerformanceMode, None),
)
SGLANG = (
    param("sglang_version", SglangVersion, None),
    param("radix", Radix, "auto"),
    param("page_size", PageSize, 1),
    param("no_overlap", NoOverlap, False),
    param("draft_tokens", DraftTokens, None),
    param("sglang_env", SglangEnv, None),
)
#: the engine flags given that change no figure, kept for the printed command (``ENGINE=["word", ...]``,
#: written by ``expand``; hybridplan/cmdline.py)
EngineArg = Flag(
    Optional[list[str]],
    option(
        "--engine-arg", metavar="ENGINE=JSON", hidden=True, help="An engine flag kept as given for the printed command."
    ),
)
ENGINES = (param("engine", Engine, "both"), *VLLM, *SGLANG, param("engine_args", EngineArg, None))
ALLOW_LONG = (param("allow_long_context", AllowLong, False),)
JSON = (param("as_json", AsJson, False),)
#: what `fit` and `plan` write for a deployment (hybridplan/deploy.py)
EMIT = (
    param(
        "emit",
        Flag(
            Optional[str],
            option(
                "--emit",
                metavar="FORMAT",
                help="Write the chosen start as a deployment file: vllm-config (for vllm serve --config), "
                "sglang-config (for sglang.launch_server --config), k8s (a ConfigMap, a Deployment or, past "
                "one node, a LeaderWorkerSet, and a Service) or kserve (a KServe LLMInferenceService running "
                "vLLM). To stdout, or into --out.",
            ),
        ),
        None,
    ),
    param(
        "out",
        Flag(
            Optional[Path],
            option("--out", metavar="DIR", help="With --emit: the folder to write the files into (made if missing)."),
        ),
        None,
    ),
    param(
        "gpus_per_node",
        Flag(
            int,
            option(
                "--gpus-per-node",
                metavar="N",
                parser=count_value("--gpus-per-node"),
                help="With --emit k8s: GPUs one node offers (default 8); a replica past it spans nodes.",
            ),
        ),
        8,
    ),
)
OUTPUT = (*JSON, param("exact", Exact, False))


def _gpus() -> list[str]:
    from hybridplan.gpus import GPUS

    return [g.key for g in GPUS]


BUDGET = (
    param(
        "gpu_type",
        Flag(
            Optional[str],
            option(
                "--gpu-type",
                metavar="GPU",
                autocompletion=_choices(_gpus),
                help="The GPU by name (h100, h200, b200, a100-80g, l40s, rtx-4090 and more: `hybridplan gpus` lists them): "
                "its memory and the engines' defaults for it.",
            ),
        ),
        None,
    ),
    param("gpu_mem", size_option("--gpu-mem", "GPU memory instead of --gpu-type, e.g. 141GB or 80GiB"), None),
    param(
        "weights",
        size_option(
            "--weights",
            "The model's weights over all ranks, each of --tp GPUs holding its "
            "share (default: counted from the config), e.g. 16GiB",
        ),
        None,
    ),
    param(
        "params",
        Flag(
            Optional[float],
            option(
                "--params",
                metavar="N",
                parser=number_value("--params", 0, 1e14, "a parameter count"),
                help="Parameter count, e.g. 8.1e9: weights at the model dtype, split over --tp.",
            ),
        ),
        None,
    ),
    param(
        "gpu_util",
        Flag(
            Optional[float],
            option(
                "--gpu-util",
                metavar="FRACTION",
                parser=number_value("--gpu-util", 0, 1, "vLLM's gpu_memory_utilization"),
                help="vLLM --gpu-memory-utilization (default: the release's).",
            ),
        ),
        None,
    ),
    param(
        "overhead",
        Flag(
            Optional[int],
            option(
                "--overhead",
                metavar="SIZE",
                parser=_size("--overhead", allow_zero=True),
                help=f"Activations, CUDA graphs and non-torch memory as one figure, in place of each engine's estimate "
                f"({SIZE_HELP}).",
            ),
        ),
        None,
    ),
    param(
        "kv_budget",
        size_option(
            "--kv-budget",
            "Memory left for caches (vLLM's \"Available KV cache memory\"; SGLang's memory to split); skips --gpu-mem",
        ),
        None,
    ),
    param(
        "cpu_offload",
        Flag(
            Optional[int],
            option(
                "--cpu-offload-gb",
                metavar="GiB",
                parser=_offload_gb,
                help="vLLM and SGLang --cpu-offload-gb: GiB of weights per GPU moved to the CPU, less on the GPU.",
            ),
        ),
        None,
    ),
)
ADMISSION = (
    param(
        "max_num_seqs",
        Flag(
            Optional[int],
            option(
                "--max-num-seqs",
                metavar="N",
                parser=count_value("--max-num-seqs"),
                help="vLLM --max-num-seqs to check (default: vLLM's default for the GPU).",
            ),
        ),
        None,
    ),
    param(
        "enforce_eager",
        Flag(
            bool,
            option("--enforce-eager", help="vLLM --enforce-eager: no CUDA graphs, so no graph memory to set aside."),
        ),
        False,
    ),
    param("o0", Flag(bool, option("--o0", hidden=True, help="vLLM -O0 (CUDA graphs off from 0.12.0).")), False),
    param(
        "max_running_requests",
        Flag(
            Optional[int],
            option(
                "--max-running-requests",
                metavar="N",
                parser=count_value("--max-running-requests"),
                help="SGLang --max-running-requests to check.",
            ),
        ),
        None,
    ),
    param(
        "max_mamba_cache_size",
        Flag(
            Optional[int],
            option(
                "--max-mamba-cache-size",
                metavar="N",
                parser=count_value("--max-mamba-cache-size"),
                help="SGLang --max-mamba-cache-size (default: from the memory split).",
            ),
        ),
        None,
    ),
    param(
        "full_memory_ratio",
        Flag(
            float,
            option(
                "--mamba-full-memory-ratio",
                metavar="RATIO",
                parser=number_value("--mamba-full-memory-ratio", 0, 1000, "SGLang's state-to-KV ratio"),
                help="SGLang's state/KV split.",
            ),
        ),
        0.9,
    ),
    param(
        "mem_fraction",
        Flag(
            Optional[float],
            option(
                "--mem-fraction-static",
                metavar="FRACTION",
                parser=number_value("--mem-fraction-static", 0, 1, "SGLang's mem_fraction_static"),
                help="SGLang --mem-fraction-static (default: SGLang's for the GPU).",
            ),
        ),
        None,
    ),
)


def _host_memory_mode(text: Any) -> str:
    """``--hicache-host-memory-mode``: ``buffer_only`` stages for a storage backend, which SGLang requires and
    hybridplan does not model (arg_groups/hicache_hook.py ``validate_hicache_host_memory_mode``)."""
    if text == "cache":
        return text
    if text == "buffer_only":
        raise PlanError(
            "--hicache-host-memory-mode buffer_only requires a storage backend "
            "(--hicache-storage-backend): host memory is only a staging buffer and all cached data lives "
            "in storage; hybridplan does not model a storage backend"
        )
    raise PlanError(f"hicache_host_memory_mode must be 'cache' or 'buffer_only', got {text!r}")


#: SGLang's hierarchical cache (hybridplan/engines/sglang/hicache.py): the host tier beside the device pools
HICACHE = (
    param(
        "hicache",
        Flag(
            bool,
            option(
                "--enable-hierarchical-cache",
                "--enable-hicache",
                help="SGLang's hierarchical cache (--enable-hicache in 0.5.23): host pools beside the device pools.",
            ),
        ),
        False,
    ),
    param(
        "hicache_ratio",
        Flag(
            Optional[float],
            option(
                "--hicache-ratio",
                metavar="RATIO",
                parser=number_value("--hicache-ratio", 0, 1e6, "a host/device ratio"),
                help="SGLang --hicache-ratio: host pools this many times their device pools (default 2).",
            ),
        ),
        None,
    ),
    param(
        "hicache_size",
        Flag(
            Optional[float],
            option(
                "--hicache-size",
                metavar="GB",
                parser=lambda t: (
                    0.0
                    if str(t).strip() in ("0", "0.0")
                    else number_value("--hicache-size", 0, 1e7, "GB of host memory")(t)
                ),
                help="SGLang --hicache-size: GB (1e9 bytes) of host memory per rank, in place of the ratio.",
            ),
        ),
        None,
    ),
    param(
        "hicache_write_policy",
        Flag(
            str,
            option(
                "--hicache-write-policy",
                metavar="POLICY",
                help="SGLang --hicache-write-policy: write_through, write_through_selective or write_back.",
            ),
        ),
        "write_through",
    ),
    param(
        "hicache_mem_layout",
        Flag(
            Optional[str],
            option(
                "--hicache-mem-layout", metavar="LAYOUT", help="SGLang --hicache-mem-layout (default: the release's)."
            ),
        ),
        None,
    ),
    param(
        "hicache_io_backend",
        Flag(
            str,
            option("--hicache-io-backend", metavar="BACKEND", help="SGLang --hicache-io-backend (kernel or direct)."),
        ),
        "kernel",
    ),
    param(
        "hicache_host_memory_mode",
        Flag(
            str,
            option(
                "--hicache-host-memory-mode",
                metavar="MODE",
                parser=_host_memory_mode,
                help="SGLang --hicache-host-memory-mode (0.5.19+): cache, the host tier hybridplan models.",
            ),
        ),
        "cache",
    ),
)


#: check-log's share of the flags fit takes (issue 28 item 7), each None unless given, so that the log's own
#: settings stand where no flag says otherwise (hybridplan/engines/given.py LogGiven)
CHECK_LOG_FLAGS = (
    param("speculative_config", SpecConfig, None),
    param("spec_method", SpecMethod, None),
    param("spec_draft", SpecDraft, None),
    param("eagle_topk", EagleTopk, None),
    param(
        "draft_tokens",
        Flag(
            Optional[int],
            option(
                "--draft-tokens",
                metavar="N",
                parser=count_value("--draft-tokens"),
                help="SGLang --speculative-num-draft-tokens.",
            ),
        ),
        None,
    ),
    param("block_size", BlockSize, None),
    param(
        "max_mamba_cache_size",
        Flag(
            Optional[int],
            option(
                "--max-mamba-cache-size",
                metavar="N",
                parser=count_value("--max-mamba-cache-size"),
                help="SGLang --max-mamba-cache-size (default: read from the log).",
            ),
        ),
        None,
    ),
    param(
        "full_memory_ratio",
        Flag(
            Optional[float],
            option(
                "--mamba-full-memory-ratio",
                metavar="RATIO",
                parser=number_value("--mamba-full-memory-ratio", 0, 1000, "SGLang's state-to-KV ratio"),
                help="SGLang --mamba-full-memory-ratio (default: read from the log).",
            ),
        ),
        None,
    ),
    param(
        "radix",
        Flag(
            Optional[str],
            option(
                "--radix",
                metavar="STRATEGY",
                help="SGLang --mamba-radix-cache-strategy (or off: --disable-radix-cache); default: read from the log.",
            ),
        ),
        None,
    ),
    param(
        "page_size",
        Flag(
            Optional[int],
            option(
                "--page-size",
                metavar="TOKENS",
                parser=count_value("--page-size"),
                help="SGLang --page-size (default: read from the log).",
            ),
        ),
        None,
    ),
)
