"""The ``hybridplan`` command: the console script and ``python -m hybridplan``."""

from __future__ import annotations

import sys

from hybridplan import startup


def main() -> int:
    """The command line, with the cycle collector paused while it starts (hybridplan/startup.py)."""
    startup.pause()
    try:
        from hybridplan.cli import main as run

        return run()
    finally:
        startup.resume()


if __name__ == "__main__":
    sys.exit(main())
