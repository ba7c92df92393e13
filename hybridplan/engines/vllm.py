"""vLLM's cache arithmetic for hybrid models, release by release.

Each rule below names the releases it holds for and where vLLM does it. Everything is a pure function of a
``ModelSpec`` and a ``Release``.
"""

from __future__ import annotations

from dataclasses import dataclass

from hybridplan.dtypes import parse_dtype
from hybridplan.errors import PlanError
from hybridplan.memory import CacheDtypes
from hybridplan.spec import ModelSpec


@dataclass(frozen=True)
class Release:
    """One band of vLLM releases that share the rules modelled here."""

    label: str
    minors: tuple[int, ...]
    modes: tuple[str, ...]
    #: prefix-caching mode when prefix caching is on and the model supports ``all``
    default_mode: str
    #: how Nemotron-H resolves an "auto" SSM cache dtype: "config" (config field, default float32),
    #: a dtype name, or None (the model dtype)
    nemotron_ssm_auto: str | None
    #: architectures this band does not serve
    absent: frozenset[str] = frozenset()
    #: "GPU KV cache size" and "Maximum concurrency" on one log line (0.33) or two (0.23)
    one_line_capacity_log: bool = False

    @property
    def versions(self) -> str:
        lo, hi = self.minors[0], self.minors[-1]
        return f"0.{lo}" if lo == hi else f"0.{lo}–0.{hi}"


RELEASES: tuple[Release, ...] = (
    # 0.11: no prefix-caching branch for Mamba state; Nemotron-H keeps the model dtype.
    Release("0.11", (11,), ("none",), "none", None),
    # 0.14–0.17: all/align/none, `all` by default; Nemotron-H "auto" SSM dtype → float16.
    Release("0.14", (14, 15, 16, 17), ("none", "align", "all"), "all", "float16"),
    # 0.20–0.27: Nemotron-H "auto" SSM dtype → config mamba_ssm_cache_dtype, default float32
    # (vllm/model_executor/models/config.py NemotronHForCausalLMConfig).
    Release("0.20", tuple(range(20, 28)), ("none", "align", "all"), "all", "config"),
    # 0.28–0.31: align becomes the default, all opt-in.
    Release("0.28", (28, 29, 30, 31), ("none", "align", "all"), "align", "config"),
    # 0.32–0.33: all is gone; Bamba and MiniMax-Text-01 are no longer served.
    Release("0.32", (32, 33), ("none", "align"), "align", "config",
            absent=frozenset({"BambaForCausalLM", "MiniMaxText01ForCausalLM", "MiniMaxForCausalLM"}),
            one_line_capacity_log=True),
)
NEWEST = RELEASES[-1]


def known_versions() -> list[str]:
    return [f"0.{m}" for r in RELEASES for m in r.minors]


def release(version: str | None) -> Release:
    """The rule band of ``--vllm-version X.Y`` (a patch level is accepted and ignored)."""
    if version is None:
        return NEWEST
    parts = version.strip().lstrip("v").split(".")
    try:
        major, minor = int(parts[0]), int(parts[1])
    except (ValueError, IndexError):
        major = minor = -1
    for r in RELEASES:
        if major == 0 and minor in r.minors:
            return r
    raise PlanError(f"unknown vLLM version {version!r} (known: {', '.join(known_versions())})")


def check_served(spec: ModelSpec, rel: Release) -> None:
    if spec.architecture in rel.absent:
        raise PlanError(f"vLLM {rel.versions} does not serve {spec.architecture} ({spec.name})")


def model_dtype(spec: ModelSpec, dtype: str | None = None) -> str:
    """vLLM ``--dtype auto``: the config dtype, except that float32 checkpoints run in bfloat16 on GPUs that
    have it (vllm/config/model.py ``_resolve_auto_dtype``)."""
    if dtype is not None:
        return parse_dtype(dtype, what="--dtype")
    return "bfloat16" if spec.model_dtype == "float32" else spec.model_dtype


def cache_dtypes(spec: ModelSpec, rel: Release = NEWEST, *, dtype: str | None = None, conv: str | None = None,
                 ssm: str | None = None, kv: str | None = None) -> CacheDtypes:
    """Resolve the conv, SSM and KV cache dtypes as vLLM does for ``--mamba-cache-dtype``,
    ``--mamba-ssm-cache-dtype`` and ``--kv-cache-dtype`` (None = "auto").

    vllm/model_executor/layers/mamba/mamba_utils.py ``MambaStateDtypeCalculator``: conv = mamba cache dtype
    (auto → model dtype); SSM = mamba SSM cache dtype if set, else the conv dtype; KDA's recurrent state is
    float32 whatever the cache dtype.
    """
    mdt = model_dtype(spec, dtype)
    conv_dt = parse_dtype(conv, what="--conv-dtype") if conv else mdt
    kv_dt = parse_dtype(kv, what="--kv-dtype") if kv else mdt
    if ssm:
        ssm_dt = parse_dtype(ssm, what="--ssm-dtype")
    elif spec.family == "Nemotron-H" and rel.nemotron_ssm_auto is not None:
        ssm_dt = (spec.config_ssm_dtype or "float32") if rel.nemotron_ssm_auto == "config" else rel.nemotron_ssm_auto
    else:
        ssm_dt = conv_dt
    overrides = () if ssm else (("kda", "float32"),)
    return CacheDtypes(conv=conv_dt, ssm=ssm_dt, kv=kv_dt, ssm_by_kind=overrides)
