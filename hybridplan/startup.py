"""The cycle collector, paused while the command line starts.

Starting makes tens of thousands of objects that live as long as the process (modules, classes, functions:
typer's, rich's, PyYAML's and the planner's) and next to no garbage in cycles, yet Python's cycle collector
walks the young ones some thirty times on the way: 16 M instructions on `size`, a fifth of what the command adds
to importing its libraries (docs/startup.md). The ``hybridplan`` command pauses it before it imports anything
(``pause``, from ``hybridplan.__main__``) and resumes it as the command's own work begins (``resume``, from
the command's wrapper in hybridplan/signature.py), after moving what start-up made to the permanent generation
(``gc.freeze``), so that the collections a long replay needs never walk it again. The planner used as a library
never pauses it.
"""

from __future__ import annotations

import gc

_paused = False


def pause() -> None:
    """Pause the cycle collector, if it runs, until ``resume``."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume() -> None:
    """Resume the collector ``pause`` paused, with what exists now frozen out of its walks."""
    global _paused
    if _paused:
        gc.freeze()
        gc.enable()
        _paused = False
