"""Cache dtypes by their torch names, their sizes, and the spellings a user may type."""

from __future__ import annotations

from hybridplan.errors import PlanError, did_you_mean

#: bytes per element, keyed by the torch dtype name
SIZES: dict[str, int] = {
    "float32": 4,
    "bfloat16": 2,
    "float16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    # vLLM's int8_per_token_head KV cache (its scales are added by hybridplan/engines/vllm/dtypes.py)
    "int8": 1,
}

_ALIASES: dict[str, str] = {
    "fp32": "float32",
    "float": "float32",
    "f32": "float32",
    "bf16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "f16": "float16",
    "fp8": "float8_e4m3fn",
    "fp8_e4m3": "float8_e4m3fn",
    "float8": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2",
    "int8_per_token_head": "int8",
}


def parse_dtype(name: str, *, what: str = "dtype") -> str:
    """Return the torch name for a user-typed dtype (``bf16`` → ``bfloat16``); refuse anything else."""
    key = str(name).strip().lower().removeprefix("torch.")
    key = _ALIASES.get(key, key)
    if key not in SIZES:
        known = ", ".join(sorted(SIZES) + sorted(_ALIASES))
        raise PlanError(f"unknown {what} {name!r} (known: {known}){did_you_mean(key, [*SIZES, *_ALIASES])}")
    return key


#: the short spellings hybridplan takes beside each engine's own names
SHORT = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def flag_dtype(
    name: str | None, *, what: str, engine_flag: str, accepted: dict[str, str], not_sized: tuple[str, ...] = ()
) -> str | None:
    """A dtype flag checked against the names the engine's own flag takes (``accepted``: name → torch dtype,
    hybridplan's short spellings added); None for auto. A name the engine takes but hybridplan cannot size
    (``not_sized``) is refused as such."""
    if name is None:
        return None
    key = str(name).strip().lower().removeprefix("torch.")
    if key == "auto":
        return None
    names = {**accepted, **{k: v for k, v in SHORT.items() if v in accepted.values()}}
    if key in names:
        return names[key]
    if key in not_sized:
        raise PlanError(f"{engine_flag} {name} is not sized by hybridplan (it sizes: auto, {', '.join(accepted)})")
    also = [k for k in SHORT if SHORT[k] in accepted.values() and k not in accepted]
    raise PlanError(
        f"unknown {what} {name!r} ({engine_flag} takes: auto, {', '.join(accepted)}"
        + (f"; also {', '.join(also)})" if also else ")")
        + did_you_mean(key, ["auto", *names])
    )


def size_of(dtype: str) -> int:
    """Bytes per element of a torch dtype name."""
    return SIZES[dtype]


def serving_dtype(config_dtype: str, override: str | None = None) -> str:
    """The dtype a model runs in: ``override`` (an already checked ``--dtype``), else under auto the config's,
    except that float32 checkpoints run in bfloat16 on GPUs that have it (vLLM vllm/config/model.py
    ``_resolve_auto_dtype``; SGLang alike)."""
    if override is not None:
        return override
    return "bfloat16" if config_dtype == "float32" else config_dtype
