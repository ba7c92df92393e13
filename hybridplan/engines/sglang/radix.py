"""SGLang's radix cache for hybrids: the strategy a scenario runs (``Release.strategy`` and the rules that
involve other flags), the state slots it holds, the grid states are checkpointed on (mem_cache/
unified_radix_cache.py), and `prefix`'s part: what the radix policy (radix_cache.py) reuses over its
three-request trace."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from msgspec import Struct
from msgspec.structs import replace

from hybridplan.engines.common import Reuse, lcm
from hybridplan.engines.sglang.releases import Release
from hybridplan.errors import NotServed, PlanError
from hybridplan.spec import ModelSpec

if TYPE_CHECKING:
    from hybridplan.scenario import Scenario


class Strategy(Struct, frozen=True):
    """The radix strategy a scenario runs and the state slots a request holds under it."""

    name: str
    ratio: int


def strategy(sc: Scenario) -> Strategy:
    s, rel = sc.sglang, sc.sglang.release
    name = rel.strategy(sc.spec, s.radix, overlap=s.overlap, page_size=s.page_size)
    if name == "extra_buffer_lazy" and s.draft(sc.spec_tokens) and rel.between("0.5.13", "0.5.17"):
        # server_args.py: 0.5.13 _handle_mamba_radix_cache, 0.5.14-0.5.16 _validate_mamba_extra_buffer; 0.5.17
        # refuses it with DFlash only, later releases not at all
        why = (
            "extra_buffer_lazy is not yet supported with speculative decoding"
            if rel.before("0.5.14")
            else "extra_buffer_lazy unsupported with spec."
        )
        raise PlanError(
            f"SGLang {rel.version} refuses the extra_buffer_lazy strategy with speculative decoding "
            f'("{why}"): use --radix extra_buffer'
        )
    checked = rel.checks_radix(sc.spec)  # the no_buffer rules below run only for the architectures SGLang lists
    if name == "no_buffer" and s.draft(sc.spec_tokens) and checked:
        if rel.between("0.5.10rc0", "0.5.14"):
            raise PlanError(
                f"SGLang {rel.version} refuses speculative decoding with the no_buffer radix strategy "
                f'("Speculative decoding for {sc.spec.architecture} is not compatible with radix cache '
                'when using --mamba-scheduler-strategy no_buffer"): use --radix extra_buffer or off'
            )
        if rel.between("0.5.9", "0.5.10rc0"):  # "Disabling radix cache since speculative decoding ..."
            name = "off"
    if name == "no_buffer" and s.page_size > 1 and rel.page_rule == "refuse" and checked:
        raise PlanError(
            f"SGLang {rel.version} refuses --page-size {s.page_size} with the no_buffer strategy "
            '("no_buffer only supports page_size=1")'
        )
    overlap = s.overlap and name != "no_buffer"  # no_buffer runs without the overlap scheduler
    return Strategy(
        name,
        rel.slots_per_request(
            name, overlap=overlap, spec_decoding=bool(s.draft(sc.spec_tokens)), skip_decode_lock=s.skip_decode_lock
        ),
    )


def page_size(sc: Scenario, strat: Strategy) -> int:
    """The page the KV pool is floored to: 0.5.11–0.5.13 set no_buffer's to 1 themselves."""
    if strat.name == "no_buffer" and sc.sglang.release.page_rule == "reset" and sc.sglang.release.checks_radix(sc.spec):
        return 1
    return sc.sglang.page_size


#: the checkpoint chunk of models whose config names none, and of every model before 0.5.13
#: (``FLA_CHUNK_SIZE``)
FALLBACK_GRID = 64


def checkpoint_grid(spec: ModelSpec, rel: Release, page_size: int = 1, tree_page: int = 1) -> int:
    """States are saved on multiples of lcm(max(chunk, page_size), tree page), the chunk being the config's
    mamba_chunk_size from 0.5.13 and 64 before (``mamba_cache_chunk_size``)."""
    chunk = (spec.chunk_size or FALLBACK_GRID) if rel.chunk_from_config else FALLBACK_GRID
    return lcm(max(chunk, page_size), tree_page)


class Prefix(Struct, frozen=True):
    rel: Release
    reuse: Reuse

    def entries(self) -> list[tuple[str, str, Reuse]]:
        return [(f"SGLang {self.rel.version}", "grid", self.reuse)]

    def to_dict(self) -> dict:
        return {"version": self.rel.version, **self.reuse.to_dict("grid")}


def prefix(sc: Scenario, prompt: int, replayed: Callable[[], list[tuple[dict, Reuse]]]) -> Prefix:
    """The reuse ``replayed()`` gives under the scenario's strategy (radix_cache.py's policy, over `prefix`'s
    three-request trace: hybridplan/reports/prefix.py); a prompt beyond the model's context is one SGLang does not
    take."""
    from hybridplan.engines.sglang.context import refusal

    if (why := refusal(replace(sc, ctx=prompt))) is not None:
        raise NotServed(f"SGLang takes no {prompt:,}-token prompt for {sc.spec.name}: {why}")
    ((_, reuse),) = replayed()
    return Prefix(sc.sglang.release, reuse)
