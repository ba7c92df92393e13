"""A command's options → the one ``Scenario`` it computes with (hybridplan/scenario.py), and the notes that reading
them had to say (the default MODEL taken)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hybridplan.errors import PlanError
from hybridplan.options import Options, layer_counts

if TYPE_CHECKING:
    from hybridplan.scenario import Budget, Scenario

#: Scenario field ← option, for the options a command may take
_SCENARIO = {
    "tp": "tp",
    "pp": "pp",
    "dp": "dp",
    "expert_parallel": "expert_parallel",
    "ep_size": "ep_size",
    "dp_attention": "dp_attention",
    "spec_tokens": "spec_tokens",
    "chunk": "chunk",
    "slots": "slots",
    "allow_long_context": "allow_long_context",
}
_VLLM = {
    "mode": "mode",
    "block_size": "block_size",
    "gdn_backend": "gdn_backend",
    "max_num_seqs": "max_num_seqs",
    "performance_mode": "performance_mode",
    "gpu_util": "gpu_util",
    "enforce_eager": "enforce_eager",
}
_SGLANG = {
    "radix": "radix",
    "full_memory_ratio": "full_memory_ratio",
    "max_running_requests": "max_running_requests",
    "mem_fraction_static": "mem_fraction",
    "max_mamba_cache_size": "max_mamba_cache_size",
    "page_size": "page_size",
    "draft_tokens": "draft_tokens",
}
_BUDGET = {"kv_budget": "kv_budget", "weights": "weights", "params": "params", "overhead": "overhead"}
_BUDGET = {**_BUDGET, "cpu_offload": "cpu_offload"}  # --cpu-offload-gb, read as bytes


def _hicache(o: Options):
    """``--enable-hierarchical-cache`` with its ``--hicache-*`` flags; None where it is off or not taken."""
    if not getattr(o, "hicache", False):
        return None
    from hybridplan.engines.sglang.hicache import HiCache

    return HiCache(
        ratio=o.hicache_ratio,
        size_gb=o.hicache_size or 0,
        write_policy=o.hicache_write_policy,
        mem_layout=o.hicache_mem_layout,
        io_backend=o.hicache_io_backend,
    )


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
    from msgspec.structs import replace

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

        flags = SglangFlags(
            algorithm,
            getattr(o, "spec_draft", None),
            n or None,
            getattr(o, "eagle_topk", None),
            getattr(o, "draft_tokens", None),
        )
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
        raise PlanError(
            f"--quantization {q}: hybridplan sizes the checkpoint's own weights "
            f"({own or 'not quantized'}); give --weights with the quantized size"
        )


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
        from click import get_current_context  # type: ignore[no-redef]  # typer before 0.28: click's own
        from click.core import ParameterSource  # type: ignore[assignment]

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
        raise PlanError(
            f"vLLM {vrel.version}: -O is the compilation level before {cmdline_o0()} and leaves CUDA "
            "graphs on; give --enforce-eager for a start without them"
        )
    ctx = getattr(o, "ctx", None)
    spec_tokens, speculative = _speculative(o, spec, vrel)
    o = Options(**{**vars(o), "spec_tokens": spec_tokens}) if hasattr(o, "spec_tokens") else o
    vllm = {**_given(o, _VLLM), "mode": _mode(o, spec, vrel)} if hasattr(o, "mode") else _given(o, _VLLM)
    env: dict[str, Any] = parse_env(getattr(o, "sglang_env", None) or ())
    extra: dict[str, Any] = {
        **({"pp_partition": layer_counts(o.pp_layers)} if getattr(o, "pp_layers", None) else {}),
        **({"engine_args": _engine_args(o.engine_args)} if getattr(o, "engine_args", None) else {}),
    }
    return Scenario(
        spec=spec,
        ctx=ctx if ctx is not None else default_ctx(spec, engine, vrel),
        dtypes=DtypeChoice(
            getattr(o, "dtype", None),
            getattr(o, "conv_dtype", None),
            getattr(o, "ssm_dtype", None),
            _kv_dtype(o, engine),
        ),
        engine=engine,
        vllm=VllmSettings(release=vrel, **vllm),
        sglang=SglangSettings(
            release=sglang_release(getattr(o, "sglang_version", None)),
            **_given(o, _SGLANG),
            overlap=not getattr(o, "no_overlap", False),
            hicache=_hicache(o),
            **env,
        ),
        budget=budget(o),
        speculative=speculative,
        **_given(o, _SCENARIO),
        **extra,
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
            raise PlanError(f'--engine-arg {text}: expected ENGINE=["word", ...]')
        out.append((engine, tuple(str(w) for w in parsed)))
    return tuple(out)


def cmdline_o0() -> str:
    from hybridplan.cmdline import O0_FROM

    return O0_FROM
