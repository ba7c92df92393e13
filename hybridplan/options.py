"""The command-line options, each defined once, and the one place they become a ``Scenario``.

Options are ``Flag[type, option(...)]`` declarations, grouped as the commands share them. ``command`` gives a
command the groups it names and hands it one ``Options`` value, so every command reads a flag the same way
and no help text is written twice. A declaration becomes typer's ``typer.Option(...)`` only when its command
is built (``signature``): the CLI builds the one command it runs, and making every command's options up front
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
from typing import TYPE_CHECKING, Any, Optional

import typer
import typer.core

from hybridplan import startup
from hybridplan.errors import PlanError
from hybridplan.units import MAX_COUNT, MAX_TOKENS, parse_count, parse_size

if TYPE_CHECKING:
    from hybridplan.scenario import Budget, Scenario

MODEL_HELP = ("A shipped spec name or alias (see `hybridplan models`), a config.json, a model folder, a spec "
              "YAML, or a Hugging Face Hub id (org/name: its config.json only, from the local cache first).")
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
    """``Flag[type, option(...)]``: an option's type and its declaration, made into typer's parameter when its
    command is built."""

    __slots__ = ("type", "decl")

    def __init__(self, type_: Any, decl: Decl) -> None:
        self.type, self.decl = type_, decl

    def __class_getitem__(cls, args: tuple[Any, Decl]) -> Flag:
        return cls(*args)


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

Model = Flag[str, argument(help=MODEL_HELP, metavar="MODEL", autocompletion=_complete_model)]
Tp = Flag[int, option("--tp", metavar="N", parser=count_value("--tp"),
                      help="Tensor-parallel size; sizes are per rank. Refused where the engines refuse it.")]
Pp = Flag[int, option("--pp", metavar="N", parser=count_value("--pp"),
                      help="Pipeline-parallel stages (vLLM --pipeline-parallel-size, SGLang --pp-size): each "
                           "stage holds its own layers; sizes are per stage and rank.")]


def _layer_counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise PlanError(f"--pp-layers: expected layer counts separated by commas (as VLLM_PP_LAYER_PARTITION), "
                        f"got {text!r}") from None
    if any(c < 0 for c in counts):
        raise PlanError(f"--pp-layers: layer counts must not be negative, got {text!r}")
    return counts


PpLayers = Flag[Optional[str], option("--pp-layers", metavar="N,N,...",
                                      help="The layers of each pipeline stage, as VLLM_PP_LAYER_PARTITION / "
                                           "SGLANG_PP_LAYER_PARTITION give them; default: the engine's split.")]
Dtype = Flag[Optional[str], option("--dtype", metavar="DTYPE", autocompletion=_choices(_dtypes("model")),
                                   help="Model dtype (vLLM --dtype); default: the config's.")]
ConvDtype = Flag[Optional[str], option("--conv-dtype", metavar="DTYPE", autocompletion=_choices(_dtypes("state")),
                                       help="Conv state dtype (vLLM --mamba-cache-dtype).")]
SsmDtype = Flag[Optional[str], option("--ssm-dtype", metavar="DTYPE", autocompletion=_choices(_dtypes("state")),
                                      help="SSM state dtype (vLLM --mamba-ssm-cache-dtype).")]
KvDtype = Flag[Optional[str], option("--kv-dtype", metavar="DTYPE", autocompletion=_choices(_dtypes("kv")),
                                     help="Attention KV dtype (vLLM --kv-cache-dtype), e.g. fp8.")]
SpecTokens = Flag[int, option("--spec-tokens", metavar="N", parser=count_value("--spec-tokens"),
                              help="Speculative tokens (widen conv windows, add pages); vLLM's "
                                   "--speculative-config JSON and SGLang's --speculative-num-steps are read "
                                   "too.")]
#: what an engine line names of its speculative decoding beside the token count (hybridplan/cmdline.py)
SpecMethod = Flag[Optional[str], option("--spec-method", metavar="METHOD", hidden=True,
                                        help="The speculative method (vLLM's method, SGLang's algorithm).")]
SpecDraft = Flag[Optional[str], option("--spec-draft", metavar="MODEL", hidden=True,
                                       help="The draft model as the engine line names it.")]
SpecConfig = Flag[Optional[str], option("--speculative-config", metavar="JSON",
                                        help="vLLM --speculative-config: the method, its tokens and draft "
                                             "(hybridplan/speculative.py reads it as vLLM does).")]
EagleTopk = Flag[Optional[int], option("--eagle-topk", metavar="K", hidden=True,
                                       parser=count_value("--speculative-eagle-topk"),
                                       help="SGLang --speculative-eagle-topk.")]
VllmVersion = Flag[Optional[str], option("--vllm-version", metavar="VERSION",
                                         autocompletion=_choices(_vllm_versions),
                                         help="vLLM release whose rules apply, 0.10.0 to 0.33.0; a minor means "
                                              "its newest patch (default: 0.33.0).")]
SglangVersion = Flag[Optional[str], option("--sglang-version", metavar="VERSION",
                                           autocompletion=_choices(_sglang_versions),
                                           help="SGLang release whose rules apply, 0.5.2 to 0.5.23 (default: "
                                                "0.5.23).")]
Mode = Flag[Optional[str], option("--mode", metavar="MODE",
                                  autocompletion=_choices(lambda: ("none", "align", "all")),
                                  help="vLLM mamba cache mode: none, align or all (default: every mode).")]
PrefixCaching = Flag[Optional[bool], option(
    "--enable-prefix-caching/--no-enable-prefix-caching",
    help="vLLM prefix caching on or off: the mamba cache mode the release picks for it (default: the release's).")]
BlockSize = Flag[Optional[int], option("--block-size", metavar="TOKENS", parser=count_value("--block-size"),
                                       help="vLLM --block-size (the block only grows from it).")]
GdnBackend = Flag[Optional[str], option("--gdn-prefill-backend", metavar="BACKEND",
                                        autocompletion=_choices(lambda: ("flashinfer", "triton")),
                                        help="vLLM --gdn-prefill-backend: flashinfer or triton (default: the "
                                             "release's pick for the GPU).")]
PerformanceMode = Flag[Optional[str], option("--performance-mode", metavar="MODE",
                                             autocompletion=_choices(lambda: ("balanced", "interactivity",
                                                                              "throughput")),
                                             help="vLLM --performance-mode (0.17.0 on): throughput doubles the "
                                                  "default batch limits.")]
Engine = Flag[str, option("--engine", metavar="ENGINE",
                          autocompletion=_choices(lambda: ("vllm", "sglang", "both")),
                          help="vllm, sglang or both.")]
Radix = Flag[str, option("--radix", metavar="STRATEGY",
                         autocompletion=_choices(lambda: ("auto", "no_buffer", "extra_buffer",
                                                          "extra_buffer_lazy", "off")),
                         help="SGLang --mamba-radix-cache-strategy: auto, no_buffer, extra_buffer, "
                              "extra_buffer_lazy, or off (--disable-radix-cache).")]
PageSize = Flag[int, option("--page-size", metavar="TOKENS", parser=count_value("--page-size"),
                            help="SGLang --page-size: tokens per KV page.")]
NoOverlap = Flag[bool, option("--disable-overlap-schedule",
                              help="SGLang without its overlap scheduler (one extra_buffer slot fewer).")]
DraftTokens = Flag[Optional[int], option("--draft-tokens", metavar="N", parser=count_value("--draft-tokens"),
                                         help="SGLang --speculative-num-draft-tokens (default: --spec-tokens "
                                              "+ 1).")]
SglangEnv = Flag[Optional[list[str]], option("--sglang-env", metavar="NAME=VALUE",
                                             help="An SGLang environment variable of its Mamba sizing: "
                                                  "SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=1 (repeatable).")]
Chunk = Flag[Optional[int], option("--max-num-batched-tokens", metavar="TOKENS",
                                   parser=tokens_value("--max-num-batched-tokens"),
                                   help="Prefill chunk limit (vLLM --max-num-batched-tokens, SGLang "
                                        "--chunked-prefill-size; default: each engine's for the GPU and "
                                        "release).")]
AllowLong = Flag[bool, option("--allow-long-context",
                              help="Start with a context beyond the model's own maximum, as "
                                   "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 and "
                                   "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 allow.")]
AsJson = Flag[bool, option("--json", help="Print the result as JSON.")]
Exact = Flag[bool, option("--bytes", help="Show exact byte counts beside the readable units.")]


def tokens_option(flag: str, help: str) -> Any:
    return Flag[Optional[int], option(flag, metavar="TOKENS", parser=tokens_value(flag), help=help)]


def ctx_option(help: str) -> Any:
    return Flag[Optional[int], option("--ctx", metavar="TOKENS", parser=tokens_value("--ctx"),
                                      help=f"{help} 131072, 128k (128,000) or 128K (131,072).")]


def size_option(flag: str, help: str) -> Any:
    return Flag[Optional[int], option(flag, metavar="SIZE", parser=_size(flag), help=f"{help} ({SIZE_HELP}).")]


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
    return Flag[Optional[Path], option("--plot", metavar="FILE.png", parser=_plot_path,
                                       help=f"{help} (.png, .svg or .pdf)")]


# --- the groups commands share --------------------------------------------------------------------

Revision = Flag[Optional[str], option("--revision", metavar="REV",
                                      help="With a Hugging Face Hub id: the branch, tag or commit to read.")]

Quantization = Flag[Optional[str], option("--quantization", metavar="METHOD", hidden=True,
                                          help="The engines' --quantization: only the checkpoint's own "
                                               "method is sized.")]

MODEL = (param("model", Model, "nemotron-h"), param("revision", Revision, None),
         param("quantization", Quantization, None))
TP = (param("tp", Tp, 1),)
#: pipeline stages: only for the commands that size them (size, fit)
PP = (param("pp", Pp, 1), param("pp_layers", PpLayers, None))
#: data and expert parallelism: only for the commands that size them (fit)
DP = (param("dp", Flag[int, option(
          "--dp", metavar="N", parser=count_value("--dp"),
          help="Data-parallel ranks (vLLM --data-parallel-size: whole engines, their MoE layers over all data × "
               "tensor ranks; SGLang --dp-size: replicas, or attention groups with --enable-dp-attention).")], 1),
      param("expert_parallel", Flag[bool, option(
          "--enable-expert-parallel", help="vLLM --enable-expert-parallel: the routed experts dealt whole over the "
                                           "data × tensor ranks.")], False),
      param("ep_size", Flag[int, option(
          "--ep-size", metavar="N", parser=count_value("--ep-size"),
          help="SGLang --ep-size: the routed experts dealt whole over N of the tensor ranks.")], 1),
      param("dp_attention", Flag[bool, option(
          "--enable-dp-attention", help="SGLang --enable-dp-attention: attention and recurrent layers data-parallel "
                                        "over --dp groups of --tp / --dp ranks, the MLP and MoE over all --tp.")],
            False))
DTYPES = (param("dtype", Dtype, None), param("conv_dtype", ConvDtype, None), param("ssm_dtype", SsmDtype, None),
          param("kv_dtype", KvDtype, None))
SPEC_TOKENS = (param("spec_tokens", SpecTokens, 0), param("speculative_config", SpecConfig, None),
               param("spec_method", SpecMethod, None), param("spec_draft", SpecDraft, None),
               param("eagle_topk", EagleTopk, None))
VLLM = (param("vllm_version", VllmVersion, None), param("mode", Mode, None),
        param("prefix_caching", PrefixCaching, None), param("block_size", BlockSize, None),
        param("gdn_backend", GdnBackend, None), param("performance_mode", PerformanceMode, None))
SGLANG = (param("sglang_version", SglangVersion, None), param("radix", Radix, "auto"),
          param("page_size", PageSize, 1), param("no_overlap", NoOverlap, False),
          param("draft_tokens", DraftTokens, None), param("sglang_env", SglangEnv, None))
#: the engine flags given that change no figure, kept for the printed command (``ENGINE=["word", ...]``,
#: written by ``expand``; hybridplan/cmdline.py)
EngineArg = Flag[Optional[list[str]], option("--engine-arg", metavar="ENGINE=JSON", hidden=True,
                                             help="An engine flag kept as given for the printed command.")]
ENGINES = (param("engine", Engine, "both"), *VLLM, *SGLANG, param("engine_args", EngineArg, None))
ALLOW_LONG = (param("allow_long_context", AllowLong, False),)
JSON = (param("as_json", AsJson, False),)
#: what `fit` and `plan` write for a deployment (hybridplan/deploy.py)
EMIT = (param("emit", Flag[Optional[str], option(
            "--emit", metavar="FORMAT",
            help="Write the chosen start as a deployment file: vllm-config (for vllm serve --config), "
                 "sglang-config (for sglang.launch_server --config) or k8s (a ConfigMap, a Deployment or, past "
                 "one node, a LeaderWorkerSet, and a Service). To stdout, or into --out.")], None),
        param("out", Flag[Optional[Path], option(
            "--out", metavar="DIR", help="With --emit: the folder to write the files into (made if missing).")],
            None),
        param("gpus_per_node", Flag[int, option(
            "--gpus-per-node", metavar="N", parser=count_value("--gpus-per-node"),
            help="With --emit k8s: GPUs one node offers (default 8); a replica past it spans nodes.")], 8))
OUTPUT = (*JSON, param("exact", Exact, False))
def _gpus() -> list[str]:
    from hybridplan.gpus import GPUS

    return [g.key for g in GPUS]


BUDGET = (
    param("gpu_type", Flag[Optional[str], option(
        "--gpu-type", metavar="GPU", autocompletion=_choices(_gpus),
        help="The GPU by name (h100, h200, b200, a100-80g, l40s, rtx-4090 and more: `hybridplan gpus` lists them): "
             "its memory and the engines' defaults for it.")], None),
    param("gpu_mem", size_option("--gpu-mem", "GPU memory instead of --gpu-type, e.g. 141GB or 80GiB"), None),
    param("weights", size_option("--weights", "The model's weights over all ranks, each of --tp GPUs holding its "
                                             "share (default: counted from the config), e.g. 16GiB"), None),
    param("params", Flag[Optional[float], option(
        "--params", metavar="N", parser=number_value("--params", 0, 1e14, "a parameter count"),
        help="Parameter count, e.g. 8.1e9: weights at the model dtype, split over --tp.")], None),
    param("gpu_util", Flag[Optional[float], option(
        "--gpu-util", metavar="FRACTION", parser=number_value("--gpu-util", 0, 1, "vLLM's gpu_memory_utilization"),
        help="vLLM --gpu-memory-utilization (default: the release's).")], None),
    param("overhead", Flag[Optional[int], option(
        "--overhead", metavar="SIZE", parser=_size("--overhead", allow_zero=True),
        help=f"Activations, CUDA graphs and non-torch memory as one figure, in place of each engine's estimate "
             f"({SIZE_HELP}).")], None),
    param("kv_budget", size_option("--kv-budget", "Memory left for caches (vLLM's \"Available KV cache memory\"; "
                                                  "SGLang's memory to split); skips --gpu-mem"), None),
    param("cpu_offload", Flag[Optional[int], option(
        "--cpu-offload-gb", metavar="GiB",
        parser=_offload_gb,
        help="vLLM and SGLang --cpu-offload-gb: GiB of weights per GPU moved to the CPU, less on the GPU.")], None),
)
ADMISSION = (
    param("max_num_seqs", Flag[Optional[int], option(
        "--max-num-seqs", metavar="N", parser=count_value("--max-num-seqs"),
        help="vLLM --max-num-seqs to check (default: vLLM's default for the GPU).")], None),
    param("enforce_eager", Flag[bool, option(
        "--enforce-eager", help="vLLM --enforce-eager: no CUDA graphs, so no graph memory to set aside.")], False),
    param("o0", Flag[bool, option("--o0", hidden=True, help="vLLM -O0 (CUDA graphs off from 0.12.0).")],
          False),
    param("max_running_requests", Flag[Optional[int], option(
        "--max-running-requests", metavar="N", parser=count_value("--max-running-requests"),
        help="SGLang --max-running-requests to check.")], None),
    param("max_mamba_cache_size", Flag[Optional[int], option(
        "--max-mamba-cache-size", metavar="N", parser=count_value("--max-mamba-cache-size"),
        help="SGLang --max-mamba-cache-size (default: from the memory split).")], None),
    param("full_memory_ratio", Flag[float, option(
        "--mamba-full-memory-ratio", metavar="RATIO",
        parser=number_value("--mamba-full-memory-ratio", 0, 1000, "SGLang's state-to-KV ratio"),
        help="SGLang's state/KV split.")], 0.9),
    param("mem_fraction", Flag[Optional[float], option(
        "--mem-fraction-static", metavar="FRACTION",
        parser=number_value("--mem-fraction-static", 0, 1, "SGLang's mem_fraction_static"),
        help="SGLang --mem-fraction-static (default: SGLang's for the GPU).")], None),
)


#: check-log's share of the flags fit takes (issue 28 item 7), each None unless given, so that the log's own
#: settings stand where no flag says otherwise (hybridplan/engines/given.py LogGiven)
CHECK_LOG_FLAGS = (
    param("speculative_config", SpecConfig, None), param("spec_method", SpecMethod, None),
    param("spec_draft", SpecDraft, None), param("eagle_topk", EagleTopk, None),
    param("draft_tokens", Flag[Optional[int], option("--draft-tokens", metavar="N",
                                                       parser=count_value("--draft-tokens"),
                                                       help="SGLang --speculative-num-draft-tokens.")], None),
    param("block_size", BlockSize, None),
    param("max_mamba_cache_size", Flag[Optional[int], option(
        "--max-mamba-cache-size", metavar="N", parser=count_value("--max-mamba-cache-size"),
        help="SGLang --max-mamba-cache-size (default: read from the log).")], None),
    param("full_memory_ratio", Flag[Optional[float], option(
        "--mamba-full-memory-ratio", metavar="RATIO",
        parser=number_value("--mamba-full-memory-ratio", 0, 1000, "SGLang's state-to-KV ratio"),
        help="SGLang --mamba-full-memory-ratio (default: read from the log).")], None),
    param("radix", Flag[Optional[str], option(
        "--radix", metavar="STRATEGY",
        help="SGLang --mamba-radix-cache-strategy (or off: --disable-radix-cache); default: read from the log.")],
          None),
    param("page_size", Flag[Optional[int], option("--page-size", metavar="TOKENS", parser=count_value("--page-size"),
                                                  help="SGLang --page-size (default: read from the log).")], None),
)


ENGINE_LINE_HELP = ("Engine flags: vLLM's and SGLang's own names are read too (--tensor-parallel-size, "
                    "--max-model-len, --kv-cache-dtype, --tp-size, --context-length and more), and so is a whole "
                    "engine command after --: -- vllm serve MODEL [FLAGS] or -- python -m sglang.launch_server --model-path "
                    "MODEL [FLAGS] (environment variables first, as you type them).")


class _Command(typer.core.TyperCommand):
    """A command whose usage line names a required argument as click does (LOG), not typer's {LOG}."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return [p[1:-1] if p.startswith("{") and p.endswith("}") else p for p in super().collect_usage_pieces(ctx)]

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """The help, its examples continued with a backslash where the terminal is narrower than them (copied,
        each runs as written)."""
        original = self.help
        self.help = examples_wrapped(original) if original else original
        try:
            super().format_help(ctx, formatter)
        finally:
            self.help = original


#: the columns help text is indented by where it is shown (typer's rich help)
_HELP_INDENT = 2


def examples_wrapped(text: str) -> str:
    """A docstring whose example lines (``hybridplan …``) wider than the terminal are broken between words with a
    shell continuation; other lines as they are."""
    from hybridplan.output import words, wrap_command
    from hybridplan.render import UNWRAPPED, width

    cols = min(width(), UNWRAPPED) - _HELP_INDENT
    out = []
    for line in text.splitlines():
        body = line.lstrip()
        indent = line[:len(line) - len(body)]
        if body.startswith("hybridplan ") and len(line) > cols:
            out += wrap_command(words(body), cols, indent, indent + "    ")
        else:
            out.append(line)
    return "\n".join(out)


def command(app: typer.Typer, *groups: tuple[Param, ...], name: str | None = None,
            short: str | None = None) -> Callable[[Callable[[Options], Any]], Callable[[Options], Any]]:
    """Register ``fn(o: Options)`` as a command whose options are ``groups``, in that order; ``short`` is its
    line in the command list. typer reads the options when the command is built, after ``signature``."""

    def register(fn: Callable[[Options], Any]) -> Callable[[Options], Any]:
        def run(**values: Any) -> Any:
            startup.resume()
            return fn(Options(**values))

        run.params = tuple(p for g in groups for p in g)  # type: ignore[attr-defined]
        run.__doc__, run.__name__ = fn.__doc__, fn.__name__
        app.command(name=name or fn.__name__, short_help=short, cls=_Command,
                    epilog=ENGINE_LINE_HELP if takes_engine_flags(run.params) else None)(run)  # type: ignore[attr-defined]
        return fn

    return register


def takes_engine_flags(params: tuple[Param, ...]) -> bool:
    """Whether a command's options include one an engine line sets, so its help tells how to paste one."""
    return any(p[0] in ("tp", "ctx", "kv_dtype") for p in params)


def command_in(app: typer.Typer, target: str, *, short: str, engine_flags: bool) -> None:
    """Register the command ``module:function``, whose module holds its option groups as ``GROUPS``, without
    importing the module: it is imported when the command is built (``signature``). ``engine_flags``: what
    ``takes_engine_flags`` says of its options (tests/test_startup.py checks it)."""
    module, _, name = target.partition(":")

    def run(**values: Any) -> Any:
        startup.resume()
        return run.fn(Options(**values))  # type: ignore[attr-defined]

    run.__name__, run.target = name, target  # type: ignore[attr-defined]
    app.command(name=name.replace("_", "-"), short_help=short, cls=_Command,
                epilog=ENGINE_LINE_HELP if engine_flags else None)(run)


def _import_command(run: Callable[..., Any]) -> None:
    from importlib import import_module

    module, _, name = run.target.partition(":")  # type: ignore[attr-defined]
    mod = import_module(module)
    run.fn = getattr(mod, name)  # type: ignore[attr-defined]
    run.params = tuple(p for g in mod.GROUPS for p in g)  # type: ignore[attr-defined]
    run.__doc__ = run.fn.__doc__  # type: ignore[attr-defined]


def signature(run: Callable[..., Any]) -> None:
    """Give a registered command the signature typer reads, each option as ``name: type = typer.Option(...)``
    (once; the commands the CLI does not build never pay for theirs)."""
    if "__signature__" in run.__dict__:
        return
    if not hasattr(run, "params"):
        _import_command(run)
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    run.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
        inspect.Parameter(n, kind, default=a.decl.build(d), annotation=a.type) if isinstance(a, Flag)
        else inspect.Parameter(n, kind, default=d, annotation=a)
        for n, a, d in run.params])  # type: ignore[attr-defined]


# --- options → Scenario ----------------------------------------------------------------------------

#: Scenario field ← option, for the options a command may take
_SCENARIO = {"tp": "tp", "pp": "pp", "dp": "dp", "expert_parallel": "expert_parallel", "ep_size": "ep_size",
             "dp_attention": "dp_attention", "spec_tokens": "spec_tokens", "chunk": "chunk", "slots": "slots",
             "allow_long_context": "allow_long_context"}
_VLLM = {"mode": "mode", "block_size": "block_size", "gdn_backend": "gdn_backend", "max_num_seqs": "max_num_seqs",
         "performance_mode": "performance_mode",
         "gpu_util": "gpu_util", "enforce_eager": "enforce_eager"}
_SGLANG = {"radix": "radix", "full_memory_ratio": "full_memory_ratio",
           "max_running_requests": "max_running_requests", "mem_fraction_static": "mem_fraction",
           "max_mamba_cache_size": "max_mamba_cache_size", "page_size": "page_size", "draft_tokens": "draft_tokens"}
_BUDGET = {"kv_budget": "kv_budget", "weights": "weights", "params": "params", "overhead": "overhead"}
_BUDGET = {**_BUDGET, "cpu_offload": "cpu_offload"}  # --cpu-offload-gb, read as bytes


def _given(o: Options, fields: dict[str, str]) -> dict[str, Any]:
    """The fields whose option this command takes; the others keep their defaults."""
    return {f: getattr(o, name) for f, name in fields.items() if hasattr(o, name)}


def budget(o: Options) -> Budget:
    """The budget the options give: --gpu-type names the GPU (its memory, and the engines' defaults for it);
    --gpu-mem gives the memory alone."""
    from hybridplan.scenario import Budget

    gpu_type, gpu_mem = getattr(o, "gpu_type", None), getattr(o, "gpu_mem", None)
    key = note = None
    if gpu_type is not None:
        from hybridplan.gpus import resolve

        if gpu_mem is not None:
            raise PlanError("give --gpu-type or --gpu-mem, not both")
        g, note = resolve(gpu_type)
        key, gpu_mem = g.key, g.total
    return Budget(gpu_mem=gpu_mem, gpu=key, gpu_note=note, **_given(o, _BUDGET))


def default_ctx(spec: Any, engine: str, vllm_rel: Any) -> int:
    """The context a start with no --max-model-len / --context-length runs at: each engine's own maximum for
    the model (vLLM's derived max_model_len, SGLang's context_length, 2048 for a config naming none); under
    both engines the smaller, so that both start."""
    from hybridplan.engines.sglang.context import context_length
    from hybridplan.engines.vllm.context import default_max_len

    from hybridplan.scenario import ENGINE_CHOICES

    if engine not in ENGINE_CHOICES:  # the Scenario's own refusal, before a context is looked for
        raise PlanError(f"unknown engine {engine!r} (known: {', '.join(ENGINE_CHOICES)})")
    each = {"vllm": default_max_len(spec, vllm_rel), "sglang": context_length(spec)}
    return min(v for k, v in each.items() if engine in (k, "both"))


def _kv_dtype(o: Options, engine: str) -> str | None:
    """--kv-dtype as each engine spells it: hybridplan's fp8 is vLLM's fp8 and SGLang's fp8_e4m3 (SGLang has no
    plain fp8), so under SGLang or both it is given as fp8_e4m3, which vLLM reads alike (vllm/config/cache.py)."""
    kv = getattr(o, "kv_dtype", None)
    if kv is not None and kv.strip().lower() == "fp8" and engine in ("sglang", "both"):
        return "fp8_e4m3"
    return kv


def _mode(o: Options, spec: Any, rel: Any) -> str | None:
    """--mode, or the mode --enable-prefix-caching / --no-enable-prefix-caching gives (the release's rule)."""
    mode, prefix = getattr(o, "mode", None), getattr(o, "prefix_caching", None)
    if prefix is None:
        return mode
    if mode is not None:
        if not prefix and mode != "none":
            raise PlanError(f"--mamba-cache-mode {mode} needs prefix caching; drop --no-enable-prefix-caching")
        return mode
    return rel.mode(spec, getattr(o, "spec_tokens", 0) or 0, prefix)


def _speculative(o: Options, spec: Any, vrel: Any) -> tuple[int, Any]:
    """The speculative tokens and method: vLLM's --speculative-config and SGLang's --speculative-algorithm with
    its steps, top-k, draft tokens and draft read by hybridplan/speculative.py as each engine reads them; a bare
    --spec-tokens stays a count. SGLang's count is its steps (``Scenario.spec_tokens``; the draft tokens it
    verifies are ``SglangSettings.draft_tokens``)."""
    from dataclasses import replace

    from hybridplan.scenario import Speculative

    n = getattr(o, "spec_tokens", 0) or 0
    cfg, algorithm = getattr(o, "speculative_config", None), getattr(o, "spec_method", None)
    if cfg is not None and algorithm is not None:
        raise PlanError("give vLLM's --speculative-config or SGLang's --speculative-algorithm, not both")
    if cfg is not None:
        from hybridplan.engines.vllm.speculative import speculative_from_vllm

        sp = speculative_from_vllm(cfg, spec, vrel)
        if n and n != sp.num_tokens:
            raise PlanError(f"--spec-tokens {n} and --speculative-config's {sp.num_tokens} tokens disagree")
        return sp.num_tokens, sp
    if algorithm is not None:
        from hybridplan.engines.sglang.speculative import SglangFlags, speculative_from_sglang

        flags = SglangFlags(algorithm, getattr(o, "spec_draft", None), n or None, getattr(o, "eagle_topk", None),
                            getattr(o, "draft_tokens", None))
        sp = speculative_from_sglang(flags, spec, getattr(o, "sglang_version", None))
        steps = n or sp.num_tokens - 1
        return steps, replace(sp, num_tokens=steps)
    if getattr(o, "spec_draft", None) is not None or getattr(o, "eagle_topk", None) is not None:
        raise PlanError("a speculative draft or top-k without --speculative-algorithm")
    return n, Speculative(num_tokens=n)


def _check_quantization(o: Options, spec: Any) -> None:
    """--quantization: the checkpoint's own method changes nothing; another (online quantization) is not sized."""
    q = getattr(o, "quantization", None)
    if q is None:
        return
    own = spec.facts.quant_method
    if own is None or str(own).lower() != q.strip().lower():
        raise PlanError(f"--quantization {q}: hybridplan sizes the checkpoint's own weights "
                        f"({own or 'not quantized'}); give --weights with the quantized size")


#: what reading the options had to say (the default MODEL taken): the CLI writes it on stderr after the output,
#: beside the pasted engine command's notes (cli.main ``said``)
_SAID: list[str] = []


def said() -> list[str]:
    """The notes so far, emptied."""
    out = _SAID[:]
    _SAID.clear()
    return out


def note_default_model(model: str) -> None:
    """Say that MODEL was not given and ``model``, its default, is sized (read from the running command's
    context: a MODEL typed, even the default's name, or taken from a pasted engine command, is given)."""
    try:  # typer 0.28 carries its own click (pyproject pins typer 0.28)
        from typer._click.core import ParameterSource
        from typer._click.globals import get_current_context
    except ImportError:
        from click import get_current_context
        from click.core import ParameterSource

    ctx = get_current_context(silent=True)
    if ctx is None or "model" not in ctx.params or ctx.get_parameter_source("model") is not ParameterSource.DEFAULT:
        return
    _SAID.append(f"note: no MODEL given: the default, {model}")


def scenario(o: Options) -> Scenario:
    """The scenario the options describe."""
    from hybridplan.engines.sglang.releases import release as sglang_release
    from hybridplan.engines.sglang.settings import SglangSettings, parse_env
    from hybridplan.engines.vllm.releases import release as vllm_release
    from hybridplan.engines.vllm.settings import VllmSettings
    from hybridplan.loader import load_model
    from hybridplan.scenario import DtypeChoice, Scenario

    spec = load_model(o.model, getattr(o, "revision", None))
    note_default_model(f"{o.model} ({spec.source})" if spec.source else o.model)
    _check_quantization(o, spec)
    engine = getattr(o, "engine", None) or "both"
    vrel = vllm_release(getattr(o, "vllm_version", None))
    if getattr(o, "o0", False) and vrel.before(cmdline_o0()):
        raise PlanError(f"vLLM {vrel.version}: -O is the compilation level before {cmdline_o0()} and leaves CUDA "
                        "graphs on; give --enforce-eager for a start without them")
    ctx = getattr(o, "ctx", None)
    spec_tokens, speculative = _speculative(o, spec, vrel)
    o = Options(**{**vars(o), "spec_tokens": spec_tokens}) if hasattr(o, "spec_tokens") else o
    vllm = {**_given(o, _VLLM), "mode": _mode(o, spec, vrel)} if hasattr(o, "mode") else _given(o, _VLLM)
    return Scenario(
        spec=spec,
        ctx=ctx if ctx is not None else default_ctx(spec, engine, vrel),
        dtypes=DtypeChoice(getattr(o, "dtype", None), getattr(o, "conv_dtype", None), getattr(o, "ssm_dtype", None),
                           _kv_dtype(o, engine)),
        engine=engine,
        vllm=VllmSettings(release=vrel, **vllm),
        sglang=SglangSettings(release=sglang_release(getattr(o, "sglang_version", None)), **_given(o, _SGLANG),
                              overlap=not getattr(o, "no_overlap", False),
                              **parse_env(getattr(o, "sglang_env", None) or ())),
        budget=budget(o),
        speculative=speculative,
        **_given(o, _SCENARIO),
        **({"pp_partition": _layer_counts(o.pp_layers)} if getattr(o, "pp_layers", None) else {}),
        **({"engine_args": _engine_args(o.engine_args)} if getattr(o, "engine_args", None) else {}),
    )


def _engine_args(given: list[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    import json

    out = []
    for text in given:
        engine, _, words = text.partition("=")
        try:
            parsed = json.loads(words)
        except json.JSONDecodeError:
            parsed = None
        if engine not in ("vllm", "sglang") or not isinstance(parsed, list):
            raise PlanError(f"--engine-arg {text}: expected ENGINE=[\"word\", ...]")
        out.append((engine, tuple(str(w) for w in parsed)))
    return tuple(out)


def cmdline_o0() -> str:
    from hybridplan.cmdline import O0_FROM

    return O0_FROM


# --- engine flags and engine command lines ---------------------------------------------------------------


def _own_flags(cmd: Any) -> dict[str, bool]:
    """A command's flags → whether each takes a value."""
    own: dict[str, bool] = {"--help": False, "-h": False}
    for p in cmd.params:
        if getattr(p, "param_type_name", None) == "option":
            for name in (*p.opts, *p.secondary_opts):
                own[name] = not (p.is_flag or p.count)
    return own


def _is_flag(token: str) -> bool:
    if not token.startswith("-") or token == "-":
        return False
    try:
        float(token)
    except ValueError:
        return True
    return False


def _release_asked(head: list[str]) -> dict[str, str | None]:
    """The releases --vllm-version / --sglang-version name among hybridplan's options, resolved as the
    engines' release tables resolve them (a pasted line is read by that release's parser)."""
    asked: dict[str, str | None] = {}
    for i, token in enumerate(head):
        for flag, engine in (("--vllm-version", "vllm"), ("--sglang-version", "sglang")):
            value = None
            if token == flag and i + 1 < len(head):
                value = head[i + 1]
            elif token.startswith(flag + "="):
                value = token.split("=", 1)[1]
            if value is None:
                continue
            try:
                if engine == "vllm":
                    from hybridplan.engines.vllm.releases import release
                else:
                    from hybridplan.engines.sglang.releases import release
                asked[engine] = release(value).version
            except PlanError:
                pass  # refused where the option is read
    return asked


def expand(cmd: Any, args: list[str]) -> tuple[list[str], list[str]]:
    """A command's arguments with engine flags (vLLM's and SGLang's own names, typed among hybridplan's) and a
    pasted engine line (after ``--``) turned into hybridplan's options (hybridplan/cmdline.py), for the parser
    to read and check as if typed; and the lines to say what was set aside. A pasted line is read as the
    engine's own parser reads it at the release asked (--vllm-version / --sglang-version, else the newest);
    an unknown flag is refused here, with the closest name among hybridplan's and the engines'. The flags with
    no effect on memory are kept (``--engine-arg``) for the command the report prints. The engines' flag tables
    load only for a line that has a flag the command does not own, or a pasted engine line."""
    own = _own_flags(cmd)
    head, tail = (args[:args.index("--")], args[args.index("--") + 1:]) if "--" in args else (args, None)
    out: list[str] = []
    engine_tokens: list[str] = []
    positional: list[str] = []
    i = 0
    while i < len(head):
        token = head[i]
        name = token.split("=", 1)[0] if token.startswith("--") else token
        if not _is_flag(token):
            out.append(token)
            positional.append(token)
        elif name in own:
            out.append(token)
            if own[name] and "=" not in token and i + 1 < len(head):
                i += 1
                out.append(head[i])
        else:
            from hybridplan import cmdline

            engine_tokens.append(token)
            if cmdline.takes_value(token) and i + 1 < len(head):
                i += 1
                engine_tokens.append(head[i])
        i += 1
    lines = []
    versions = _release_asked(head) if engine_tokens or tail is not None else {}
    if engine_tokens or tail is not None:
        from hybridplan import cmdline

        try:
            lines = [cmdline.translate(engine_tokens, "either", versions=versions)] if engine_tokens else []
        except PlanError as exc:
            if str(exc).startswith("no such option: "):
                name = str(exc)[len("no such option: "):].split(" ", 1)[0]
                raise PlanError(f"no such option: {name}{cmdline.closest(name, [*own, *cmdline.engine_flag_names()])}"
                                ) from None
            raise
    if tail is not None:
        if not tail:
            raise PlanError("nothing after --: paste the engine's command, e.g. -- vllm serve MODEL …")
        lines.append(cmdline.translate(tail, ours=own, versions=versions))
    notes: list[str] = []
    set_by_head = {t.split("=", 1)[0] for t in out if _is_flag(t)}
    dropped: list[str] = []
    # where the model stands among the command's arguments (`replay TRACE MODEL`: second)
    arguments = [p.name for p in cmd.params if getattr(p, "param_type_name", None) == "argument"]
    at = arguments.index("model") if "model" in arguments else 0
    for line in lines:
        if line.model is not None:
            model_is_option = "--model" in own
            if model_is_option:
                out += ["--model", line.model]
            elif len(positional) > at and positional[at] != line.model:
                raise PlanError(f"two models: {positional[at]} and the engine line's {line.model}")
            elif len(positional) == at:  # the pasted line's model is the model (after a TRACE, say)
                out.append(line.model)
                positional.append(line.model)
        if line.engine is not None and "--engine" in own and "--engine" not in set_by_head:
            out += ["--engine", line.engine]
            set_by_head.add("--engine")
        for shown, tokens in line.options:
            if not tokens:
                continue
            flag = tokens[0]
            if flag not in own:
                dropped.append(shown)
                continue
            if flag in set_by_head and flag not in ("--sglang-env", "--enforce-eager", "--allow-long-context"):
                raise PlanError(f"{shown}: {flag} is given twice; give it once")
            out += list(tokens)
            set_by_head.add(flag)
        if "--engine-arg" in own:
            import json

            for engine, words, _ in line.kept:
                out += ["--engine-arg", f"{engine}={json.dumps(list(words))}"]
        if line.ignored:
            said: dict[str, list[str]] = {}
            for shown, why in zip(line.ignored, line.why or ("no effect on memory",) * len(line.ignored)):
                said.setdefault(why, []).append(shown)
            notes += [f"ignored: {', '.join(flags)}: {why}" for why, flags in said.items()]
    if dropped:
        notes.append(f"ignored: {cmd.name} does not use " + ", ".join(dropped))
    return out, notes
