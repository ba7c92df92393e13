"""Which vLLM release, and what it decides before any arithmetic: the models it serves, its Mamba cache
modes and which one a start picks, and its flag defaults. Paths are those of the vLLM wheels."""

from __future__ import annotations

from dataclasses import dataclass

from hybridplan.errors import NotServed, PlanError
from hybridplan.spec import ModelSpec

#: The release bands modelled, by minor version (0.X). Rules may differ inside a band; they key on the
#: minor itself.
BANDS: tuple[tuple[int, ...], ...] = ((11,), (14, 15, 16, 17), tuple(range(20, 28)), (28, 29, 30, 31), (32, 33))
KNOWN_MINORS = tuple(m for band in BANDS for m in band)
NEWEST_MINOR = KNOWN_MINORS[-1]

#: Architectures whose model class implements Mamba prefix caching in `all` mode
#: (``SupportsMambaPrefixCaching`` in vllm/model_executor/models/*.py, 0.14–0.31).
ALL_MODE_ARCHS = frozenset({"NemotronHForCausalLM", "JambaForCausalLM", "Zamba2ForCausalLM", "FalconH1ForCausalLM",
                            "GraniteMoeHybridForCausalLM", "BambaForCausalLM", "MambaForCausalLM",
                            "FalconMambaForCausalLM", "Mamba2ForCausalLM"})

#: ``--max-num-seqs`` defaults (vllm/engine/arg_utils.py): 1024 on GPUs with at least this much memory
#: (not A100), else 256
LARGE_GPU_BYTES = 70 * (1 << 30)


@dataclass(frozen=True)
class Release:
    """One vLLM minor release, 0.``minor``."""

    minor: int

    @property
    def version(self) -> str:
        return f"0.{self.minor}"

    @property
    def band(self) -> str:
        band = next(b for b in BANDS if self.minor in b)
        return f"0.{band[0]}" if len(band) == 1 else f"0.{band[0]}–0.{band[-1]}"

    @property
    def modes(self) -> tuple[str, ...]:
        """Mamba cache modes (vllm/config/cache.py ``MambaCacheMode``): no prefix caching branch in 0.11;
        all/align/none through 0.31; align/none from 0.32."""
        if self.minor == 11:
            return ("none",)
        return ("none", "align") if self.minor >= 32 else ("none", "align", "all")

    def modes_for(self, spec: ModelSpec, mode: str | None = None) -> tuple[str, ...]:
        """The modes modelled for this model, or just ``mode`` when one was asked for: attention-free models
        are sized without prefix caching."""
        modes = self.modes if spec.attention else ("none",)
        if mode is None:
            return modes
        self.check_mode(mode)
        if mode not in modes:
            raise PlanError(f"mode {mode!r} is not modelled for attention-free {spec.name}: only 'none'")
        return (mode,)

    def check_mode(self, mode: str) -> None:
        if mode not in self.modes:
            raise PlanError(f"vLLM {self.version} has no mamba cache mode {mode!r} (it has: {', '.join(self.modes)})")

    def supports_all(self, spec: ModelSpec) -> bool:
        return "all" in self.modes and spec.architecture in ALL_MODE_ARCHS

    def prefix_caching_default(self, spec: ModelSpec) -> bool:
        """Prefix caching on by default? (vllm/config/model.py ``is_prefix_caching_supported``): never in 0.11
        (``MambaModelConfig`` turns it off); off for hybrids until 0.25, on from 0.27 (0.26 taken as 0.25);
        never for attention-free models."""
        if self.minor == 11 or not spec.attention:
            return False
        return self.minor >= 27

    def prefix_mode(self, spec: ModelSpec, spec_tokens: int = 0) -> str:
        """The mode vLLM picks when prefix caching is on (vllm/model_executor/models/config.py
        ``MambaModelConfig``): `all` where supported through 0.27 (0.20: `align` with speculative decoding),
        `align` otherwise and from 0.28."""
        if self.minor == 11:
            return "none"
        if self.minor <= 27 and self.supports_all(spec) and not (self.minor == 20 and spec_tokens):
            return "all"
        return "align"

    def mode(self, spec: ModelSpec, spec_tokens: int = 0, prefix_caching: bool | None = None) -> str:
        """The mode a start runs in: with ``--enable-prefix-caching`` the prefix mode, with
        ``--no-enable-prefix-caching`` none, and with neither the release's default."""
        if prefix_caching is None:
            prefix_caching = self.prefix_caching_default(spec)
        return self.prefix_mode(spec, spec_tokens) if prefix_caching else "none"

    def default_mode(self, spec: ModelSpec, spec_tokens: int = 0) -> str:
        """The mode of a start with no flags."""
        return self.mode(spec, spec_tokens)

    @property
    def gpu_memory_utilization(self) -> float:
        """``--gpu-memory-utilization`` default (vllm/config/cache.py): 0.9 in 0.11, 0.92 from 0.20."""
        return 0.9 if self.minor == 11 else 0.92

    @property
    def one_line_capacity_log(self) -> bool:
        """0.28 merged "GPU KV cache size" and "Maximum concurrency" into one line."""
        return self.minor >= 28

    def serves(self, spec: ModelSpec) -> bool:
        """Bamba left in 0.28; MiniMax-Text-01 is absent from 0.33."""
        if spec.architecture == "BambaForCausalLM":
            return self.minor < 28
        if spec.family == "MiniMax-Text-01":
            return self.minor < 33
        return True

    def check_served(self, spec: ModelSpec) -> None:
        if not self.serves(spec):
            raise NotServed(f"vLLM {self.version} does not serve {spec.architecture} ({spec.name})")


NEWEST = Release(NEWEST_MINOR)


def known_versions() -> list[str]:
    return [f"0.{m}" for m in KNOWN_MINORS]


def release(version: str | None) -> Release:
    """The rules of ``--vllm-version X.Y`` (a patch level is accepted and ignored)."""
    if version is None:
        return NEWEST
    parts = version.strip().lstrip("v").split(".")
    try:
        major, minor = int(parts[0]), int(parts[1])
    except (ValueError, IndexError):
        major = minor = -1
    if major != 0 or minor not in KNOWN_MINORS:
        raise PlanError(f"unknown vLLM version {version!r} (known: {', '.join(known_versions())})")
    return Release(minor)


def default_max_num_seqs(gpu_mem: int | None) -> int:
    """``--max-num-seqs`` when none is given (vllm/engine/arg_utils.py): 1024 on GPUs with ≥ 70 GiB (not
    A100), else 256; a budget given directly is taken as a large GPU."""
    return 1024 if gpu_mem is None or gpu_mem >= LARGE_GPU_BYTES else 256
