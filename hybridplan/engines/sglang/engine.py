"""SGLang behind the ``Engine`` protocol. Each verb takes a ``Scenario`` and returns the frozen result of the
module that owns its rules, imported when the verb runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hybridplan.engines import LogVerbs
from hybridplan.memory import Footprint

if TYPE_CHECKING:
    from collections.abc import Callable

    from hybridplan.engines import ReplayAdvice
    from hybridplan.engines.common import Reuse, Shortfall
    from hybridplan.engines.sglang.pool import Fit, PoolLayout
    from hybridplan.engines.sglang.radix import Prefix
    from hybridplan.scenario import Scenario


class SglangEngine(LogVerbs):
    name = "sglang"
    #: the line whose presence says a log is SGLang's (``logs.FIGURES``)
    looked_for = ('SGLang\'s "Mamba Cache is allocated"',)

    def check_served(self, sc: Scenario) -> None:
        sc.sglang.release.check_served(sc.spec)

    def footprint(self, sc: Scenario) -> Footprint:
        from hybridplan.engines.sglang.pool import footprint

        return footprint(sc)

    def layout(self, sc: Scenario) -> PoolLayout:
        from hybridplan.engines.sglang.pool import layout

        self.check_served(sc)
        return layout(sc)

    def fit(self, sc: Scenario) -> Fit | Shortfall:
        from hybridplan.engines.sglang.pool import fit

        self.check_served(sc)
        if sc.pp > 1 or sc.dp > 1 or sc.ep_size > 1:  # hybridplan/engines/sglang/parallel.py
            from hybridplan.engines.sglang import parallel

            return parallel.fit_data_parallel(sc) if sc.dp > 1 or sc.ep_size > 1 else parallel.fit(sc)
        return fit(sc)

    def prefix(self, sc: Scenario, prompt: int, replayed: Callable[[], list[tuple[dict, Reuse]]]) -> Prefix:
        from hybridplan.engines.sglang.radix import prefix

        self.check_served(sc)
        return prefix(sc, prompt, replayed)

    def replay_advice(self) -> ReplayAdvice:
        """`replay`'s rows, diagnosis and recovery candidates on SGLang (replay_advice.py)."""
        from hybridplan.engines.sglang import replay_advice

        return replay_advice


ENGINE = SglangEngine()
