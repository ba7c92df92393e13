"""The command-line options, each defined once, and the one place they become a ``Scenario``.

Options are ``Annotated`` aliases grouped as the commands share them (model, dtypes, vLLM, SGLang, budget,
output). ``command`` gives a command the signature of the groups it names and hands it one ``Options``
value, so every command reads the same flag the same way and none repeats a help text.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from types import SimpleNamespace
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

if TYPE_CHECKING:
    from hybridplan.scenario import Scenario

MODEL_HELP = "Shipped spec name or alias (see `hybridplan models`), a config.json, a model folder, or a spec YAML."

# rich help panels
ENGINE_PANEL = "Engine"
DTYPE_PANEL = "Dtypes"
BUDGET_PANEL = "Budget"
OUTPUT_PANEL = "Output"


def _complete_model(incomplete: str) -> list[str]:
    """Shell completion for MODEL: the shipped names and aliases."""
    from hybridplan.loader import shipped_names

    return sorted(n for n in shipped_names() if n.startswith(incomplete.lower()))


Options = SimpleNamespace
_EMPTY = inspect.Parameter.empty


def param(name: str, annotation: Any, default: Any = _EMPTY) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default, annotation=annotation)


def option(*decls: str, panel: str | None = None, **kw: Any) -> Any:
    return typer.Option(*decls, rich_help_panel=panel, **kw)


# --- the options -----------------------------------------------------------------------------------

Model = Annotated[str, typer.Argument(help=MODEL_HELP, autocompletion=_complete_model)]
Tp = Annotated[int, option("--tp", help="Tensor-parallel size; sizes are per rank. Refused where vLLM refuses it.")]
Dtype = Annotated[Optional[str], option("--dtype", panel=DTYPE_PANEL,
                                      help="Model dtype (vLLM --dtype); default: the config's.")]
ConvDtype = Annotated[Optional[str], option("--conv-dtype", panel=DTYPE_PANEL,
                                          help="Conv state dtype (vLLM --mamba-cache-dtype).")]
SsmDtype = Annotated[Optional[str], option("--ssm-dtype", panel=DTYPE_PANEL,
                                         help="SSM state dtype (vLLM --mamba-ssm-cache-dtype).")]
KvDtype = Annotated[Optional[str], option("--kv-dtype", panel=DTYPE_PANEL,
                                        help="Attention KV dtype (vLLM --kv-cache-dtype), e.g. fp8.")]
SpecTokens = Annotated[int, option("--spec-tokens", min=0,
                                 help="Speculative tokens (widen conv windows, add pages).")]
VllmVersion = Annotated[Optional[str], option("--vllm-version", panel=ENGINE_PANEL,
                                            help="vLLM release whose rules apply (default: newest known).")]
SglangVersion = Annotated[Optional[str], option("--sglang-version", panel=ENGINE_PANEL,
                                              help="SGLang release: 0.5.23 (default) or 0.5.9.")]
Mode = Annotated[Optional[str], option("--mode", panel=ENGINE_PANEL,
                                     help="vLLM mamba cache mode: none, align or all (default: every mode).")]
BlockSize = Annotated[Optional[int], option("--block-size", panel=ENGINE_PANEL,
                                          help="vLLM --block-size (the block only grows from it).")]
GdnBackend = Annotated[str, option("--gdn-prefill-backend", panel=ENGINE_PANEL,
                                 help="GDN prefill backend vLLM picks: flashinfer (its Hopper default) or triton.")]
Engine = Annotated[str, option("--engine", panel=ENGINE_PANEL, help="vllm, sglang or both.")]
Radix = Annotated[str, option("--radix", panel=ENGINE_PANEL, help="SGLang --mamba-radix-cache-strategy: auto, "
                                                                "no_buffer, extra_buffer, or off (radix cache "
                                                                "disabled).")]
Chunk = Annotated[int, option("--max-num-batched-tokens", panel=ENGINE_PANEL,
                            help="Prefill chunk limit (vLLM --max-num-batched-tokens, SGLang "
                                 "--chunked-prefill-size).")]
AsJson = Annotated[bool, option("--json", panel=OUTPUT_PANEL, help="Print the result as JSON.")]
Exact = Annotated[bool, option("--bytes", panel=OUTPUT_PANEL, help="Show exact byte counts beside the readable "
                                                                 "units.")]

# --- the groups commands share --------------------------------------------------------------------

MODEL = (param("model", Model, "nemotron-h"),)
DTYPES = (param("dtype", Dtype, None), param("conv_dtype", ConvDtype, None), param("ssm_dtype", SsmDtype, None),
          param("kv_dtype", KvDtype, None))
VLLM = (param("vllm_version", VllmVersion, None), param("mode", Mode, None), param("block_size", BlockSize, None),
        param("gdn_backend", GdnBackend, "flashinfer"))
SGLANG = (param("sglang_version", SglangVersion, None), param("radix", Radix, "auto"))
ENGINES = (param("engine", Engine, "both"), *VLLM, *SGLANG)
JSON = (param("as_json", AsJson, False),)
OUTPUT = (*JSON, param("exact", Exact, False))


def command(app: typer.Typer, *groups: tuple[inspect.Parameter, ...], name: str | None = None
            ) -> Callable[[Callable[[Options], Any]], Callable[[Options], Any]]:
    """Register ``fn(o: Options)`` as a command whose options are ``groups``, in that order."""

    def register(fn: Callable[[Options], Any]) -> Callable[[Options], Any]:
        def run(**values: Any) -> Any:
            return fn(Options(**values))

        run.__signature__ = inspect.Signature([p for g in groups for p in g])  # type: ignore[attr-defined]
        run.__doc__, run.__name__ = fn.__doc__, fn.__name__
        app.command(name=name or fn.__name__)(run)
        return fn

    return register


# --- options → Scenario ----------------------------------------------------------------------------

#: Scenario field ← option, for the options a command may take
_SCENARIO = {"tp": "tp", "spec_tokens": "spec_tokens", "chunk": "chunk", "slots": "slots"}
_VLLM = {"mode": "mode", "block_size": "block_size", "gdn_backend": "gdn_backend", "max_num_seqs": "max_num_seqs",
         "gpu_util": "gpu_util"}
_SGLANG = {"radix": "radix", "full_memory_ratio": "full_memory_ratio",
           "max_running_requests": "max_running_requests", "mem_fraction_static": "mem_fraction"}


def _given(o: Options, fields: dict[str, str]) -> dict[str, Any]:
    """The fields whose option this command takes; the others keep their defaults."""
    return {f: getattr(o, name) for f, name in fields.items() if hasattr(o, name)}


def _size(o: Options, name: str) -> int | None:
    from hybridplan.units import parse_size

    text = getattr(o, name, None)
    return parse_size(text, what="--" + name.replace("_", "-")) if text else None


def _overhead(o: Options) -> int:
    """``--overhead``: ``0`` (or none) means none."""
    return 0 if getattr(o, "overhead", "0") == "0" else _size(o, "overhead") or 0


def scenario(o: Options) -> Scenario:
    """The scenario the options describe."""
    from hybridplan.engines.sglang.releases import release as sglang_release
    from hybridplan.engines.sglang.settings import SglangSettings
    from hybridplan.engines.vllm.releases import release as vllm_release
    from hybridplan.engines.vllm.settings import VllmSettings
    from hybridplan.loader import load_model
    from hybridplan.scenario import Budget, DtypeChoice, Scenario, default_ctx

    spec = load_model(o.model)
    ctx = getattr(o, "ctx", None)
    return Scenario(
        spec=spec,
        ctx=ctx if ctx is not None else default_ctx(spec),
        dtypes=DtypeChoice(*(getattr(o, n, None) for n in ("dtype", "conv_dtype", "ssm_dtype", "kv_dtype"))),
        engine=getattr(o, "engine", None) or "both",
        vllm=VllmSettings(release=vllm_release(getattr(o, "vllm_version", None)), **_given(o, _VLLM)),
        sglang=SglangSettings(release=sglang_release(getattr(o, "sglang_version", None)), **_given(o, _SGLANG)),
        budget=Budget(kv_budget=_size(o, "kv_budget"), gpu_mem=_size(o, "gpu_mem"), weights=_size(o, "weights"),
                      params=getattr(o, "params", None), overhead=_overhead(o)),
        **_given(o, _SCENARIO),
    )
