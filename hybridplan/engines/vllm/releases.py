"""Which vLLM release, and what it decides before any arithmetic: the models it serves, its Mamba cache
modes and which one a start picks, its flag defaults and its start-up check. Every release from 0.10.0 to
0.33.0 is known, to the patch: a rule that moved inside a minor (the KV token figure, 0.20.0 → 0.20.1) keys on
the patch. Paths are those of the vLLM wheels; docs/engines.md lists the rules by release."""

from __future__ import annotations

import re

from msgspec import Struct

from hybridplan.errors import NotServed, PlanError
from hybridplan.spec import ModelSpec

#: every vLLM release on PyPI from 0.10.0 on (there are no post releases)
VERSIONS = (
    "0.10.0",
    "0.10.1",
    "0.10.1.1",
    "0.10.2",
    "0.11.0",
    "0.11.1",
    "0.11.2",
    "0.12.0",
    "0.13.0",
    "0.14.0",
    "0.14.1",
    "0.15.0",
    "0.15.1",
    "0.16.0",
    "0.17.0",
    "0.17.1",
    "0.18.0",
    "0.18.1",
    "0.19.0",
    "0.19.1",
    "0.20.0",
    "0.20.1",
    "0.20.2",
    "0.21.0",
    "0.22.0",
    "0.22.1",
    "0.23.0",
    "0.24.0",
    "0.25.0",
    "0.25.1",
    "0.26.0",
    "0.27.0",
    "0.27.1",
    "0.28.0",
    "0.29.0",
    "0.30.0",
    "0.31.0",
    "0.32.0",
    "0.33.0",
)

#: Architectures whose class implements Mamba prefix caching in `all` mode (``SupportsMambaPrefixCaching``
#: in vllm/model_executor/models/*.py, 0.11.1–0.31; Bamba left the registry in 0.24.0)
ALL_MODE_ARCHS = frozenset(
    {
        "NemotronHForCausalLM",
        "JambaForCausalLM",
        "Zamba2ForCausalLM",
        "FalconH1ForCausalLM",
        "GraniteMoeHybridForCausalLM",
        "BambaForCausalLM",
        "MambaForCausalLM",
        "FalconMambaForCausalLM",
        "Mamba2ForCausalLM",
    }
)

#: when a hybrid architecture entered the registry (vllm/model_executor/models/registry.py), and when it left
_REGISTERED = {
    "Lfm2ForCausalLM": ("0.10.2", None),
    "Qwen3NextForCausalLM": ("0.10.2", None),
    "KimiLinearForCausalLM": ("0.11.1", None),
    "Lfm2MoeForCausalLM": ("0.11.1", None),
    "Qwen3_5ForConditionalGeneration": ("0.17.0", None),
    "Qwen3_5MoeForConditionalGeneration": ("0.17.0", None),
    "Qwen3_5ForCausalLM": ("0.27.0", None),
    "Qwen3_5MoeForCausalLM": ("0.27.0", None),
    # Nemotron-H's vision-language and omni wrappers (vllm/model_executor/models/nano_nemotron_vl.py)
    "NemotronH_Nano_VL_V2": ("0.11.0", None),
    "NemotronH_Nano_Omni_Reasoning_V3": ("0.20.0", None),
    "NemotronH_Super_Omni_Reasoning_V3": ("0.20.0", None),
    "NemotronH_Omni_Reasoning_V3": ("0.29.0", None),
    "BambaForCausalLM": ("0.10.0", "0.24.0"),
    "MiniMaxForCausalLM": ("0.10.0", "0.24.0"),
    "MiniMaxM1ForCausalLM": ("0.10.0", "0.24.0"),
    "MiniMaxText01ForCausalLM": ("0.10.0", "0.24.0"),
}

#: Nemotron-H and the wrappers that build it as their language model (vllm/model_executor/models/
#: nano_nemotron_vl.py ``NemotronH_Nano_VL_V2``, which also serves the Omni architectures): their cache shapes are
#: NemotronH's (``get_mamba_state_shape_from_config`` hands the text config to NemotronHForCausalLM's); the
#: config hooks keyed on the architecture's name (vllm/model_executor/models/config.py) are not shared
NEMOTRON_H = frozenset(
    {
        "NemotronHForCausalLM",
        "NemotronH_Nano_VL_V2",
        "NemotronH_Nano_Omni_Reasoning_V3",
        "NemotronH_Super_Omni_Reasoning_V3",
        "NemotronH_Omni_Reasoning_V3",
    }
)

#: classes marked ``SupportsV0Only`` (no V1 engine at all) until the release given
_V0_ONLY = {
    "JambaForCausalLM": "0.10.1",
    "MambaForCausalLM": "0.10.1",
    "FalconMambaForCausalLM": "0.10.1",
    "MiniMaxText01ForCausalLM": "0.10.1",
    "MiniMaxM1ForCausalLM": "0.10.1",
}

#: a version as typed or logged (compiled on first use, by re's own cache: the newest release needs none)
_VERSION = r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.(\d+))?(?P<rest>.*)"


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


class Release(Struct, frozen=True, order=True):
    """One vLLM release, as ``(0, minor, patch[, sub])``."""

    key: tuple[int, ...]

    @property
    def version(self) -> str:
        return ".".join(str(p) for p in self.key)

    @property
    def minor(self) -> int:
        return self.key[1]

    def at_least(self, version: str) -> bool:
        return self.key >= _key(version)

    def before(self, version: str) -> bool:
        return self.key < _key(version)

    # --- which models, which engine ----------------------------------------------------------------

    def serves(self, spec: ModelSpec) -> bool:
        """In the registry (vllm/model_executor/models/registry.py) at this release."""
        added, removed = _REGISTERED.get(spec.architecture, ("0.10.0", None))
        return self.at_least(added) and (removed is None or self.before(removed))

    def check_served(self, spec: ModelSpec) -> None:
        if not self.serves(spec):
            added, removed = _REGISTERED.get(spec.architecture, ("0.10.0", None))
            if removed is not None and self.at_least(removed):
                last = _last_before(removed)
                raise NotServed(
                    f'vLLM {self.version} refuses {spec.architecture} ({spec.name}): "was supported in '
                    f'vLLM until v{last}, and is not supported anymore" (_PREVIOUSLY_SUPPORTED_MODELS, '
                    f"vllm/model_executor/models/registry.py); try --vllm-version {last}"
                )
            raise NotServed(
                f"vLLM {self.version} does not serve {spec.architecture} ({spec.name}): it enters the "
                f"registry in {added}; try --vllm-version {added}"
            )
        if spec.architecture in NEMOTRON_H and "moe" in spec.ffn and self.before("0.11.1"):
            raise NotServed(
                f'vLLM {self.version} cannot build {spec.name}: its MoE layers ("E" in '
                "hybrid_override_pattern) are not in NemotronH's ALL_DECODER_LAYER_TYPES "
                "(vllm/model_executor/models/nemotron_h.py) until 0.11.1; try --vllm-version 0.11.1"
            )
        if spec.architecture == "Mamba2ForCausalLM" and self.at_least("0.14.0") and self.before("0.18.0"):
            raise NotServed(
                f"vLLM {self.version} fails to load {spec.name}'s config: \"'Mamba2Config' object has no "
                "attribute 'num_attention_heads'\" (vllm/transformers_utils/model_arch_config_convertor.py "
                "has no Mamba-2 entry, 0.14.0-0.17.1); try --vllm-version 0.18.0"
            )
        v0_only = _V0_ONLY.get(spec.architecture)
        if v0_only and self.before(v0_only):
            raise NotServed(
                f"vLLM {self.version} serves {spec.architecture} on its V0 engine only (SupportsV0Only "
                "in vllm/model_executor/models/); hybridplan models the V1 engine"
            )

    def caveats(self, spec: ModelSpec) -> tuple[str, ...]:
        """What a reader of figures for this release should know before trusting them."""
        if spec.recurrent and self.before("0.10.2"):
            return (
                f"vLLM {self.version} runs Mamba layers on its V0 engine unless VLLM_USE_V1=1 is set "
                "(vllm/engine/arg_utils.py), and V1 then needs --no-enable-prefix-caching: these are the V1 "
                "engine's figures",
            )
        return ()

    # --- Mamba cache modes (vllm/config/cache.py, vllm/model_executor/models/config.py) -------------------

    @property
    def modes(self) -> tuple[str, ...]:
        """The modes a start can run in: none only until 0.11.0 (prefix caching forced off); from 0.11.1
        prefix caching on a supporting model caches every block, which 0.15.0 named `all` beside `align`;
        `all` is gone in 0.32.0."""
        if self.before("0.11.1"):
            return ("none",)
        if self.before("0.15.0"):
            return ("none", "all")
        return ("none", "align") if self.at_least("0.32.0") else ("none", "align", "all")

    def check_mode(self, mode: str) -> None:
        if mode not in self.modes:
            raise PlanError(f"vLLM {self.version} has no mamba cache mode {mode!r} (it has: {', '.join(self.modes)})")

    def supports_all(self, spec: ModelSpec) -> bool:
        return "all" in self.modes and spec.architecture in ALL_MODE_ARCHS

    def modes_for(self, spec: ModelSpec, mode: str | None = None) -> tuple[str, ...]:
        """The modes this model runs in, or the one a start asked for ``mode`` runs in: attention-free models
        are sized without prefix caching; `all` on a model without it runs as `align` (as vLLM falls back,
        0.15–0.31), and before 0.15 prefix caching on such a model is switched off."""
        if not spec.attention:
            modes: tuple[str, ...] = ("none",)
        else:
            modes = tuple(m for m in self.modes if m != "all" or self.supports_all(spec))
        if mode is None:
            return modes
        self.check_mode(mode)
        if not spec.attention and mode != "none":
            raise PlanError(f"mode {mode!r} is not modelled for attention-free {spec.name}: only 'none'")
        if mode == "all" and not self.supports_all(spec):
            return ("align",) if "align" in self.modes else ("none",)
        return (mode,)

    def prefix_caching_default(self, spec: ModelSpec) -> bool:
        """Prefix caching with no flag (vllm/engine/arg_utils.py, vllm/config/model.py): off for hybrids until
        0.27.1, on from 0.28.0; never for attention-free models in what hybridplan models."""
        return bool(spec.attention) and self.at_least("0.28.0")

    def prefix_mode(self, spec: ModelSpec, spec_tokens: int = 0) -> str:
        """The mode with prefix caching on (``MambaModelConfig.verify_and_update_config``): `all` where the
        class supports it, else `align` (0.15–0.27; 0.20.0–0.21.0 pick `align` under speculative decoding),
        always `align` from 0.28.0; before 0.15 `all` where supported, else prefix caching is switched off."""
        if self.before("0.15.0"):
            return "all" if self.supports_all(spec) else "none"
        if self.at_least("0.28.0") or not self.supports_all(spec):
            return "align"
        if spec_tokens and self.at_least("0.20.0") and self.before("0.22.0"):
            return "align"
        return "all"

    def mode(self, spec: ModelSpec, spec_tokens: int = 0, prefix_caching: bool | None = None) -> str:
        """The mode a start runs in: with ``--enable-prefix-caching`` the prefix mode, with
        ``--no-enable-prefix-caching`` none, and with neither the release's default."""
        if prefix_caching is None:
            prefix_caching = self.prefix_caching_default(spec)
        return self.prefix_mode(spec, spec_tokens) if prefix_caching and spec.attention else "none"

    def default_mode(self, spec: ModelSpec, spec_tokens: int = 0) -> str:
        """The mode of a start with no flags."""
        return self.mode(spec, spec_tokens)

    # --- figures that change by release ------------------------------------------------------------------

    @property
    def gpu_memory_utilization(self) -> float:
        """``--gpu-memory-utilization`` default (vllm/config/cache.py): 0.9, 0.92 from 0.20.0."""
        return 0.92 if self.at_least("0.20.0") else 0.9

    @property
    def tokens_from_concurrency(self) -> bool:
        """The "KV cache size" token figure (vllm/v1/core/kv_cache_utils.py): ``num_blocks // groups ·
        block`` up to 0.20.0, ``int(max_concurrency · max_model_len)`` from 0.20.1."""
        return self.at_least("0.20.1")

    @property
    def one_line_capacity_log(self) -> bool:
        """0.28.0 merged "GPU KV cache size" and "Maximum concurrency" into one line."""
        return self.at_least("0.28.0")

    @property
    def max_num_seqs_check(self) -> str:
        """What a ``max_num_seqs`` above the Mamba cache blocks does: nothing up to 0.17.1; 0.18.0–0.19.1 cap
        the CUDA-graph capture sizes and start ("cap"); from 0.20.0 the start fails ("refuse";
        vllm/config/compilation.py)."""
        if self.at_least("0.20.0"):
            return "refuse"
        return "cap" if self.at_least("0.18.0") else "none"

    @property
    def rounds_available_memory(self) -> bool:
        """ "Available KV cache memory" prints ``round(GiB, 2)`` from 0.14.0 (format_gib), ``%.2f`` before."""
        return self.at_least("0.14.0")


NEWEST = Release(_key(VERSIONS[-1]))
KNOWN = tuple(Release(_key(v)) for v in VERSIONS)
KNOWN_MINORS = tuple(sorted({r.minor for r in KNOWN}))


def known_versions() -> list[str]:
    return list(VERSIONS)


def newest_serving(spec: ModelSpec) -> Release | None:
    """The newest known release that serves ``spec`` (``check_served`` passes), or None."""
    for rel in reversed(KNOWN):
        try:
            rel.check_served(spec)
        except NotServed:
            continue
        return rel
    return None


def release(version: str | None) -> Release:
    """The rules of ``--vllm-version``: a minor (``0.20``, its newest patch), a release (``0.20.1``), or a build
    as logs print it (``0.17.0rc1.dev201+g1234abc``, ``0.11.1rc6``, ``0.13.0+faa43dbf.nv26.01``), which takes
    the rules of the release it belongs to."""
    if version is None:
        return NEWEST
    m = re.fullmatch(_VERSION, version.strip())
    if not m or m.group(1) != "0":
        raise PlanError(f"unknown vLLM version {version!r} (known: {VERSIONS[0]} to {VERSIONS[-1]})")
    minor = int(m.group(2))
    if minor > NEWEST.minor:
        raise PlanError(f"vLLM {version} is newer than the newest modelled release ({NEWEST.version})")
    if minor not in KNOWN_MINORS:
        raise PlanError(f"unknown vLLM version {version!r} (known: {VERSIONS[0]} to {VERSIONS[-1]})")
    same_minor = [r for r in KNOWN if r.minor == minor]
    if m.group(3) is None:
        return same_minor[-1]
    key = tuple(int(p) for p in m.groups()[:4] if p is not None)
    exact = next((r for r in same_minor if r.key == key), None)
    if exact is not None:
        return exact
    if m.group("rest"):  # a pre-release or dev build: the newest release at or below it
        below = [r for r in same_minor if r.key <= key]
        if below:
            return below[-1]
        return same_minor[0]
    raise PlanError(f"unknown vLLM version {version!r} (0.{minor} has: {', '.join(r.version for r in same_minor)})")


#: the version setuptools-scm gives a source build it cannot date from a git tag (vLLM's setup.py falls back to
#: it): ``0.1.dev20073+g8e685d198`` names no release
_UNTAGGED = r"v?0\.1\.dev\d+(?:\+[\w.]*)?"


def untagged(version: str | None) -> bool:
    """A source build whose version names no release (``0.1.devN``)."""
    return version is not None and re.fullmatch(_UNTAGGED, version.strip()) is not None


def neighbours(version: str | None) -> tuple[Release, ...]:
    """The releases a logged build may follow: a pre-release or dev build (``0.16.1rc1.dev111``,
    ``0.20.1rc1.dev16``, ``0.17.0.dev5``) is cut from main between two releases, the newest release before its
    number and the first at or after it (0.16.0 and 0.17.0; 0.20.0 and 0.20.1), and may hold either's rules: both
    are returned, the one ``release`` picks first. A release, a local build of one (``0.13.0+faa43dbf.nv26.01``) or
    a minor gives one."""
    if untagged(version):  # check-log reads it as the newest release, and says so
        return (NEWEST,)
    rel = release(version)
    if version is None:
        return (rel,)
    m = re.fullmatch(_VERSION, version.strip())
    rest = m.group("rest") if m else ""
    if m is None or m.group(3) is None or not rest or rest.startswith("+"):
        return (rel,)
    key = tuple(int(p) for p in m.groups()[:4] if p is not None)
    below = [r for r in KNOWN if r.key < key]
    above = [r for r in KNOWN if r.key >= key]
    out = [rel] + [r for r in (below[-1:] + above[:1]) if r != rel]
    return tuple(out)


def _last_before(version: str) -> str:
    """The newest modelled release before ``version``."""
    return [r for r in KNOWN if r.before(version)][-1].version
