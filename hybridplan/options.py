"""The command-line options, each defined once, and the one place they become a ``Scenario``.

Options are ``Annotated`` aliases, grouped as the commands share them. ``command`` gives a command the
signature of the groups it names and hands it one ``Options`` value, so every command reads a flag the same
way and no help text is written twice. Values are read when the line is parsed (a size, a token count, a
fraction), so a bad one is refused before anything is computed.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from hybridplan.errors import PlanError
from hybridplan.units import MAX_COUNT, MAX_TOKENS, parse_count, parse_size

if TYPE_CHECKING:
    from hybridplan.scenario import Budget, Scenario

MODEL_HELP = ("A shipped spec name or alias (see `hybridplan models`), a config.json, a model folder, a spec "
              "YAML, or a Hugging Face Hub id (org/name: its config.json only, from the local cache first).")
SIZE_HELP = "GB means 10^9 bytes, GiB 2^30 bytes"

Options = SimpleNamespace


def param(name: str, annotation: Any, default: Any = inspect.Parameter.empty) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default, annotation=annotation)


def option(*decls: str, **kw: Any) -> Any:
    return typer.Option(*decls, **kw)


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

Model = Annotated[str, typer.Argument(help=MODEL_HELP, metavar="MODEL", autocompletion=_complete_model)]
Tp = Annotated[int, option("--tp", metavar="N", parser=count_value("--tp"),
                           help="Tensor-parallel size; sizes are per rank. Refused where vLLM refuses it.")]
Dtype = Annotated[Optional[str], option("--dtype", metavar="DTYPE", autocompletion=_choices(_dtypes("model")),
                                        help="Model dtype (vLLM --dtype); default: the config's.")]
ConvDtype = Annotated[Optional[str], option("--conv-dtype", metavar="DTYPE", autocompletion=_choices(_dtypes("state")),
                                            help="Conv state dtype (vLLM --mamba-cache-dtype).")]
SsmDtype = Annotated[Optional[str], option("--ssm-dtype", metavar="DTYPE", autocompletion=_choices(_dtypes("state")),
                                           help="SSM state dtype (vLLM --mamba-ssm-cache-dtype).")]
KvDtype = Annotated[Optional[str], option("--kv-dtype", metavar="DTYPE", autocompletion=_choices(_dtypes("kv")),
                                          help="Attention KV dtype (vLLM --kv-cache-dtype), e.g. fp8.")]
SpecTokens = Annotated[int, option("--spec-tokens", metavar="N", parser=count_value("--spec-tokens"),
                                   help="Speculative tokens (widen conv windows, add pages).")]
VllmVersion = Annotated[Optional[str], option("--vllm-version", metavar="VERSION",
                                              autocompletion=_choices(_vllm_versions),
                                              help="vLLM release whose rules apply, 0.10.0 to 0.33.0; a minor means "
                                                   "its newest patch (default: 0.33.0).")]
SglangVersion = Annotated[Optional[str], option("--sglang-version", metavar="VERSION",
                                                autocompletion=_choices(_sglang_versions),
                                                help="SGLang release whose rules apply, 0.5.2 to 0.5.23 (default: "
                                                     "0.5.23).")]
Mode = Annotated[Optional[str], option("--mode", metavar="MODE",
                                       autocompletion=_choices(lambda: ("none", "align", "all")),
                                       help="vLLM mamba cache mode: none, align or all (default: every mode).")]
BlockSize = Annotated[Optional[int], option("--block-size", metavar="TOKENS", parser=count_value("--block-size"),
                                            help="vLLM --block-size (the block only grows from it).")]
GdnBackend = Annotated[str, option("--gdn-prefill-backend", metavar="BACKEND",
                                   autocompletion=_choices(lambda: ("flashinfer", "triton")),
                                   help="GDN prefill backend vLLM picks: flashinfer (its Hopper default) or triton.")]
Engine = Annotated[str, option("--engine", metavar="ENGINE",
                               autocompletion=_choices(lambda: ("vllm", "sglang", "both")),
                               help="vllm, sglang or both.")]
Radix = Annotated[str, option("--radix", metavar="STRATEGY",
                              autocompletion=_choices(lambda: ("auto", "no_buffer", "extra_buffer",
                                                               "extra_buffer_lazy", "off")),
                              help="SGLang --mamba-radix-cache-strategy: auto, no_buffer, extra_buffer, "
                                   "extra_buffer_lazy, or off (--disable-radix-cache).")]
PageSize = Annotated[int, option("--page-size", metavar="TOKENS", parser=count_value("--page-size"),
                                 help="SGLang --page-size: tokens per KV page.")]
NoOverlap = Annotated[bool, option("--disable-overlap-schedule",
                                   help="SGLang without its overlap scheduler (one extra_buffer slot fewer).")]
DraftTokens = Annotated[Optional[int], option("--draft-tokens", metavar="N", parser=count_value("--draft-tokens"),
                                              help="SGLang --speculative-num-draft-tokens (default: --spec-tokens "
                                                   "+ 1).")]
SglangEnv = Annotated[Optional[list[str]], option("--sglang-env", metavar="NAME=VALUE",
                                                  help="An SGLang environment variable of its Mamba sizing: "
                                                       "SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=1 (repeatable).")]
Chunk = Annotated[int, option("--max-num-batched-tokens", metavar="TOKENS",
                              parser=tokens_value("--max-num-batched-tokens"),
                              help="Prefill chunk limit (vLLM --max-num-batched-tokens, SGLang "
                                   "--chunked-prefill-size).")]
AllowLong = Annotated[bool, option("--allow-long-context",
                                   help="Start with a context beyond the model's own maximum, as "
                                        "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 and "
                                        "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 allow.")]
AsJson = Annotated[bool, option("--json", help="Print the result as JSON.")]
Exact = Annotated[bool, option("--bytes", help="Show exact byte counts beside the readable units.")]


def tokens_option(flag: str, help: str) -> Any:
    return Annotated[Optional[int], option(flag, metavar="TOKENS", parser=tokens_value(flag), help=help)]


def ctx_option(help: str) -> Any:
    return Annotated[Optional[int], option("--ctx", metavar="TOKENS", parser=tokens_value("--ctx"),
                                           help=f"{help} 131072, 128k (128,000) or 128K (131,072).")]


def size_option(flag: str, help: str) -> Any:
    return Annotated[Optional[int], option(flag, metavar="SIZE", parser=_size(flag), help=f"{help} ({SIZE_HELP}).")]


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
    return Annotated[Optional[Path], option("--plot", metavar="FILE.png", parser=_plot_path,
                                            help=f"{help} (.png, .svg or .pdf)")]


# --- the groups commands share --------------------------------------------------------------------

Revision = Annotated[Optional[str], option("--revision", metavar="REV",
                                           help="With a Hugging Face Hub id: the branch, tag or commit to read.")]

MODEL = (param("model", Model, "nemotron-h"), param("revision", Revision, None))
TP = (param("tp", Tp, 1),)
DTYPES = (param("dtype", Dtype, None), param("conv_dtype", ConvDtype, None), param("ssm_dtype", SsmDtype, None),
          param("kv_dtype", KvDtype, None))
SPEC_TOKENS = (param("spec_tokens", SpecTokens, 0),)
VLLM = (param("vllm_version", VllmVersion, None), param("mode", Mode, None), param("block_size", BlockSize, None),
        param("gdn_backend", GdnBackend, "flashinfer"))
SGLANG = (param("sglang_version", SglangVersion, None), param("radix", Radix, "auto"),
          param("page_size", PageSize, 1), param("no_overlap", NoOverlap, False),
          param("draft_tokens", DraftTokens, None), param("sglang_env", SglangEnv, None))
ENGINES = (param("engine", Engine, "both"), *VLLM, *SGLANG)
ALLOW_LONG = (param("allow_long_context", AllowLong, False),)
JSON = (param("as_json", AsJson, False),)
OUTPUT = (*JSON, param("exact", Exact, False))
def _gpus() -> list[str]:
    from hybridplan.gpus import GPUS

    return [g.key for g in GPUS]


BUDGET = (
    param("gpu_type", Annotated[Optional[str], option(
        "--gpu-type", metavar="GPU", autocompletion=_choices(_gpus),
        help="The GPU by name (h100, h200, b200, a100-80g, l40s, rtx-4090 and more: `hybridplan gpus` lists them): "
             "its memory and the engines' defaults for it.")], None),
    param("gpu_mem", size_option("--gpu-mem", "GPU memory instead of --gpu-type, e.g. 141GB or 80GiB"), None),
    param("weights", size_option("--weights", "The model's weights over all ranks, each of --tp GPUs holding its "
                                             "share (default: counted from the config), e.g. 16GiB"), None),
    param("params", Annotated[Optional[float], option(
        "--params", metavar="N", parser=number_value("--params", 0, 1e14, "a parameter count"),
        help="Parameter count, e.g. 8.1e9: weights at the model dtype, split over --tp.")], None),
    param("gpu_util", Annotated[Optional[float], option(
        "--gpu-util", metavar="FRACTION", parser=number_value("--gpu-util", 0, 1, "vLLM's gpu_memory_utilization"),
        help="vLLM --gpu-memory-utilization (default: the release's).")], None),
    param("overhead", Annotated[Optional[int], option(
        "--overhead", metavar="SIZE", parser=_size("--overhead", allow_zero=True),
        help=f"Activations, CUDA graphs and non-torch memory as one figure, in place of each engine's estimate "
             f"({SIZE_HELP}).")], None),
    param("kv_budget", size_option("--kv-budget", "Memory left for caches (vLLM's \"Available KV cache memory\"; "
                                                  "SGLang's memory to split); skips --gpu-mem"), None),
)
ADMISSION = (
    param("max_num_seqs", Annotated[Optional[int], option(
        "--max-num-seqs", metavar="N", parser=count_value("--max-num-seqs"),
        help="vLLM --max-num-seqs to check (default: vLLM's default for the GPU).")], None),
    param("enforce_eager", Annotated[bool, option(
        "--enforce-eager", help="vLLM --enforce-eager: no CUDA graphs, so no graph memory to set aside.")], False),
    param("max_running_requests", Annotated[Optional[int], option(
        "--max-running-requests", metavar="N", parser=count_value("--max-running-requests"),
        help="SGLang --max-running-requests to check.")], None),
    param("max_mamba_cache_size", Annotated[Optional[int], option(
        "--max-mamba-cache-size", metavar="N", parser=count_value("--max-mamba-cache-size"),
        help="SGLang --max-mamba-cache-size (default: from the memory split).")], None),
    param("full_memory_ratio", Annotated[float, option(
        "--mamba-full-memory-ratio", metavar="RATIO",
        parser=number_value("--mamba-full-memory-ratio", 0, 1000, "SGLang's state-to-KV ratio"),
        help="SGLang's state/KV split.")], 0.9),
    param("mem_fraction", Annotated[Optional[float], option(
        "--mem-fraction-static", metavar="FRACTION",
        parser=number_value("--mem-fraction-static", 0, 1, "SGLang's mem_fraction_static"),
        help="SGLang --mem-fraction-static (default: SGLang's for the GPU).")], None),
)


def command(app: typer.Typer, *groups: tuple[inspect.Parameter, ...], name: str | None = None,
            short: str | None = None) -> Callable[[Callable[[Options], Any]], Callable[[Options], Any]]:
    """Register ``fn(o: Options)`` as a command whose options are ``groups``, in that order; ``short`` is its
    line in the command list."""

    def register(fn: Callable[[Options], Any]) -> Callable[[Options], Any]:
        def run(**values: Any) -> Any:
            return fn(Options(**values))

        run.__signature__ = inspect.Signature([p for g in groups for p in g])  # type: ignore[attr-defined]
        run.__doc__, run.__name__ = fn.__doc__, fn.__name__
        app.command(name=name or fn.__name__, short_help=short)(run)
        return fn

    return register


# --- options → Scenario ----------------------------------------------------------------------------

#: Scenario field ← option, for the options a command may take
_SCENARIO = {"tp": "tp", "spec_tokens": "spec_tokens", "chunk": "chunk", "slots": "slots",
             "allow_long_context": "allow_long_context"}
_VLLM = {"mode": "mode", "block_size": "block_size", "gdn_backend": "gdn_backend", "max_num_seqs": "max_num_seqs",
         "gpu_util": "gpu_util", "enforce_eager": "enforce_eager"}
_SGLANG = {"radix": "radix", "full_memory_ratio": "full_memory_ratio",
           "max_running_requests": "max_running_requests", "mem_fraction_static": "mem_fraction",
           "max_mamba_cache_size": "max_mamba_cache_size", "page_size": "page_size", "draft_tokens": "draft_tokens"}
_BUDGET = {"kv_budget": "kv_budget", "weights": "weights", "params": "params", "overhead": "overhead"}


def _given(o: Options, fields: dict[str, str]) -> dict[str, Any]:
    """The fields whose option this command takes; the others keep their defaults."""
    return {f: getattr(o, name) for f, name in fields.items() if hasattr(o, name)}


def budget(o: Options) -> Budget:
    """The budget the options give: --gpu-type names the GPU (its memory, and the engines' defaults for it);
    --gpu-mem gives the memory alone."""
    from hybridplan.scenario import Budget

    gpu_type, gpu_mem = getattr(o, "gpu_type", None), getattr(o, "gpu_mem", None)
    key = None
    if gpu_type is not None:
        from hybridplan.gpus import gpu

        if gpu_mem is not None:
            raise PlanError("give --gpu-type or --gpu-mem, not both")
        g = gpu(gpu_type)
        key, gpu_mem = g.key, g.total
    return Budget(gpu_mem=gpu_mem, gpu=key, **_given(o, _BUDGET))


def scenario(o: Options) -> Scenario:
    """The scenario the options describe."""
    from hybridplan.engines.sglang.releases import release as sglang_release
    from hybridplan.engines.sglang.settings import SglangSettings, parse_env
    from hybridplan.engines.vllm.releases import release as vllm_release
    from hybridplan.engines.vllm.settings import VllmSettings
    from hybridplan.loader import load_model
    from hybridplan.scenario import DtypeChoice, Scenario, default_ctx

    spec = load_model(o.model, getattr(o, "revision", None))
    ctx = getattr(o, "ctx", None)
    return Scenario(
        spec=spec,
        ctx=ctx if ctx is not None else default_ctx(spec),
        dtypes=DtypeChoice(*(getattr(o, n, None) for n in ("dtype", "conv_dtype", "ssm_dtype", "kv_dtype"))),
        engine=getattr(o, "engine", None) or "both",
        vllm=VllmSettings(release=vllm_release(getattr(o, "vllm_version", None)), **_given(o, _VLLM)),
        sglang=SglangSettings(release=sglang_release(getattr(o, "sglang_version", None)), **_given(o, _SGLANG),
                              overlap=not getattr(o, "no_overlap", False),
                              **parse_env(getattr(o, "sglang_env", None) or ())),
        budget=budget(o),
        **_given(o, _SCENARIO),
    )
