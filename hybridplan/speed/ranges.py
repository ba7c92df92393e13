"""The range printed beside each predicted figure: P10–P90 of the held-out residuals (measured over predicted)
of the figure's class (TPOT, TTFT, output tok/s), its model's set (hybrid or attention reference) and its regime
(concurrency 1, mid 2–127, saturated ≥ 128), from the grouped k-fold of validation/speed.py. The data file
(ranges.json beside this module) is written by ``python validation/speed.py --write-ranges``, which names itself
in the file; nothing here fits anything.

A regime cell with fewer than ``MIN_ROWS`` held-out rows is too thin for a P10 and a P90: the set's cell over
every regime is used instead, and the range says so (``pooled``). A set with no held-out row of that figure has
no range (None), and ``speed`` says so rather than print one.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from msgspec import Struct

PATH = Path(__file__).with_name("ranges.json")
#: the regimes, by the benchmark's --max-concurrency (validation/speed.py scores by the same)
REGIMES = ("concurrency 1", "mid (2-127)", "saturated (>=128)")
#: fewest held-out rows a regime's own P10–P90 is read from
MIN_ROWS = 8
#: the figure classes a benchmark's printed figures are scored in
CLASSES = {
    "output_tok_s": "output tok/s",
    "mean_ttft_ms": "TTFT",
    "median_ttft_ms": "TTFT",
    "mean_tpot_ms": "TPOT",
    "mean_itl_ms": "TPOT",
}


def regime(concurrency: int) -> str:
    return REGIMES[0] if concurrency <= 1 else REGIMES[1] if concurrency < 128 else REGIMES[2]


class Range(Struct, frozen=True):
    """measured / predicted at the 10th and 90th percentile of the held-out rows of a cell."""

    set: str
    figure: str
    regime: str
    rows: int
    p10: float
    p90: float
    #: the regime's own cell was too thin: the set's cell over every regime
    pooled: bool = False

    def around(self, predicted: float) -> tuple[float, float]:
        return predicted * self.p10, predicted * self.p90

    def to_dict(self, predicted: float | None = None) -> dict:
        d = {
            "set": self.set,
            "figure": self.figure,
            "regime": self.regime,
            "rows": self.rows,
            "ratio_p10": self.p10,
            "ratio_p90": self.p90,
            "pooled": self.pooled,
        }
        if predicted is not None:
            d["p10"], d["p90"] = self.around(predicted)
        return d


@lru_cache(maxsize=1)
def table() -> dict:
    if not PATH.exists():
        return {"ranges": []}
    return json.loads(PATH.read_text())


def lookup(hybrid: bool, figure: str, concurrency: int) -> Range | None:
    """The range of a figure class (TPOT, TTFT, output tok/s) for a hybrid or a reference at a concurrency."""
    which = "hybrid" if hybrid else "reference"
    cells = {(c["set"], c["figure"], c["regime"]): c for c in table()["ranges"]}
    reg = regime(concurrency)
    own = cells.get((which, figure, reg))
    if own is not None and own["rows"] >= MIN_ROWS:
        return Range(which, figure, reg, own["rows"], own["p10"], own["p90"])
    pooled = cells.get((which, figure, "all"))
    if pooled is not None and pooled["rows"] >= MIN_ROWS:
        return Range(which, figure, reg, pooled["rows"], pooled["p10"], pooled["p90"], pooled=True)
    return None


def source() -> str:
    t = table()
    return t.get("command", "python validation/speed.py --write-ranges")
