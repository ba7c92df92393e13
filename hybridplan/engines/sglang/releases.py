"""Which SGLang release, and which models it serves. Paths are those of the SGLang wheels
(python/sglang/srt/...)."""

from __future__ import annotations

from dataclasses import dataclass

from hybridplan.errors import NotServed, PlanError
from hybridplan.spec import ModelSpec

VERSIONS = ("0.5.9", "0.5.23")
DEFAULT_VERSION = "0.5.23"

_NO_CLASS_BOTH = frozenset({"BambaForCausalLM", "JambaForCausalLM", "Zamba2ForCausalLM", "MiniMaxText01ForCausalLM",
                            "MiniMaxForCausalLM"})
#: architectures a release has no model class for (python/sglang/srt/models/)
_NOT_SERVED = {
    "0.5.23": _NO_CLASS_BOTH,
    # 0.5.9 has no mamba.py, mamba2.py or falcon_mamba.py yet
    "0.5.9": _NO_CLASS_BOTH | {"MambaForCausalLM", "Mamba2ForCausalLM", "FalconMambaForCausalLM"},
}


@dataclass(frozen=True)
class Release:
    version: str

    @property
    def newer(self) -> bool:
        """0.5.23 (mem_cache/kv_cache_configurator.py) rather than 0.5.9
        (model_executor/model_runner_kv_cache_mixin.py)."""
        return self.version != "0.5.9"

    @property
    def padding_slot_in_budget(self) -> bool:
        """0.5.23 counts the pool's padding row when it splits the budget (K one lower, and the KV pool gets
        the budget less (K+1) rows); 0.5.9 divides by the bare per-request bytes and subtracts K rows only."""
        return self.newer

    @property
    def logs_cap(self) -> bool:
        """0.5.23 warns "max_running_requests is capped to …" when the state pool caps the requests; 0.5.9 caps
        silently."""
        return self.newer

    @property
    def requests_bounded_by_kv(self) -> bool:
        """0.5.23 also bounds max_running_requests by half the KV tokens (``resolve_max_num_reqs``)."""
        return self.newer

    def check_served(self, spec: ModelSpec) -> None:
        """SGLang runs the model with a Mamba pool: it has a class for it and the model has recurrent layers."""
        if spec.architecture in _NOT_SERVED[self.version]:
            raise NotServed(f"SGLang {self.version} has no model class for {spec.architecture} ({spec.name})")
        if not spec.recurrent:
            raise NotServed(f"{spec.name} has no recurrent layers: SGLang keeps no Mamba pool for it")


DEFAULT = Release(DEFAULT_VERSION)


def release(version: str | None) -> Release:
    v = (version or DEFAULT_VERSION).strip().lstrip("v")
    if v not in VERSIONS:
        raise PlanError(f"unknown SGLang version {version!r} (known: {', '.join(VERSIONS)})")
    return Release(v)
