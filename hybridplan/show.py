"""How every command shows its report: a plot when asked, then the JSON, the CSV table or the rich view. The
commands (hybridplan/cli.py, replay/command.py, profile/command.py) call it; it imports no command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hybridplan.options import Options
from hybridplan.output import write


def show(report: Any, o: Options, view: str, plotter: str = "") -> None:
    """Every command's output: the plot when asked, then the report's JSON or the rich view named ``view`` of
    hybridplan.render, or ``module:function`` elsewhere (imported only here: rich's console stays out of
    --json runs)."""
    from hybridplan.api import Captured, capturing

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
    from hybridplan.api import capturing
    from hybridplan.tables import to_csv

    if not getattr(o, "as_csv", False) or capturing.get():
        return False
    plot: Path | None = getattr(o, "plot", None)
    if plot is not None and plotter:
        from hybridplan import plots

        getattr(plots, plotter)(report, plot)
    write(to_csv(report.csv_columns, report.csv_rows()))
    return True
