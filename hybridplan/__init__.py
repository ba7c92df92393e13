"""hybridplan: capacity planner and live profiler for hybrid (attention + recurrent) LLMs."""

import os as _os

__version__ = "0.1.0"

if _os.environ.get("HYBRIDPLAN_PURE") == "1":  # the replay's compiled modules from their source (_compiled.py)
    from hybridplan._compiled import use_source as _use_source

    _use_source()
