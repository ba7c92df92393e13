"""vLLM behind the ``Engine`` protocol. Each verb takes a ``Scenario`` and returns the frozen result of the
module that owns its rules, imported when the verb runs: a command loads only the rules it uses."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hybridplan.engines import LogVerbs
from hybridplan.engines.vllm.dtypes import footprint
from hybridplan.memory import Footprint

if TYPE_CHECKING:
    from collections.abc import Callable

    from hybridplan.engines import ReplayAdvice
    from hybridplan.engines.common import Reuse, Shortfall
    from hybridplan.engines.vllm.blocks import Pages
    from hybridplan.engines.vllm.prefix import Prefix
    from hybridplan.engines.vllm.sizing import Fit
    from hybridplan.scenario import Scenario


class VllmEngine(LogVerbs):
    name = "vllm"
    #: the lines whose presence says a log is vLLM's (``logs.FIGURES``)
    looked_for = (
        'vLLM\'s "Setting attention block size"',
        '"Padding mamba page size"',
        '"KV cache size"',
        '"Maximum concurrency"',
    )

    def check_served(self, sc: Scenario) -> None:
        sc.vllm.release.check_served(sc.spec)

    def footprint(self, sc: Scenario) -> Footprint:
        return footprint(sc)

    def layout(self, sc: Scenario) -> Pages:
        from hybridplan.engines.vllm.blocks import pages

        self.check_served(sc)
        return pages(sc)

    def fit(self, sc: Scenario) -> Fit | Shortfall:
        from hybridplan.engines.vllm.sizing import fit

        self.check_served(sc)
        if sc.pp > 1 or sc.dp > 1 or sc.expert_parallel:  # hybridplan/engines/vllm/parallel.py
            from hybridplan.engines.vllm import parallel

            return parallel.fit(sc)
        return fit(sc)

    def prefix(self, sc: Scenario, prompt: int, replayed: Callable[[], list[tuple[dict, Reuse]]]) -> Prefix:
        from hybridplan.engines.vllm.prefix import prefix

        self.check_served(sc)
        return prefix(sc, prompt, replayed)

    def replay_advice(self) -> ReplayAdvice:
        """`replay`'s rows, diagnosis and recovery candidates on vLLM (replay_advice.py)."""
        from hybridplan.engines.vllm import replay_advice

        return replay_advice


ENGINE = VllmEngine()
