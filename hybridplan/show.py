"""How every command shows its report: a plot when asked, then the JSON, the CSV table or the rich view. The
commands (hybridplan/cli.py, replay/command.py, profile/command.py) call it; it imports no command."""

from __future__ import annotations

import json
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hybridplan.output import write

if TYPE_CHECKING:
    from hybridplan.options import Options

#: set while an API call runs its command: ``show`` hands the report here instead of rendering it
capturing: ContextVar[bool] = ContextVar("hybridplan_api_capturing", default=False)


class Captured(Exception):
    """The command's report, on its way back to the API caller (raised by ``show``)."""

    def __init__(self, report: Any) -> None:
        super().__init__("report")
        self.report = report


def show(report: Any, o: Options, view: str, plotter: str = "") -> None:
    """Every command's output: the plot when asked, then the report's JSON or the rich view named ``view`` of
    hybridplan.render, or ``module:function`` elsewhere (imported only here: rich's console stays out of
    --json runs)."""
    if capturing.get():  # a call of hybridplan.api: the report goes back to it, nothing is shown
        raise Captured(report)
    plot: Path | None = getattr(o, "plot", None)
    if plot is not None:
        from hybridplan import plots

        getattr(plots, plotter)(report, plot)
    if o.as_json:
        write(json.dumps(report.to_dict(), indent=2) + "\n")
        return
    from importlib import import_module

    from hybridplan import render

    module, _, name = view.rpartition(":")
    kw = {"exact": o.exact} if hasattr(o, "exact") else {}
    render.emit(getattr(import_module(module) if module else render, name)(report, **kw))
    if plot is not None:
        render.emit(f"plot written to {plot}")


def show_csv(report: Any, o: Options, plotter: str = "") -> bool:
    """``--csv``: the report's table on stdout and nothing else (the plot still written when asked); False
    without --csv, or in a call of hybridplan.api (the report goes back to it)."""
    from hybridplan.tables import to_csv

    if not getattr(o, "as_csv", False) or capturing.get():
        return False
    plot: Path | None = getattr(o, "plot", None)
    if plot is not None and plotter:
        from hybridplan import plots

        getattr(plots, plotter)(report, plot)
    write(to_csv(report.csv_columns, report.csv_rows()))
    return True
