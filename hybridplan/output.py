"""Writing to stdout as a command-line tool should: a reader that goes away (``| head -1``) ends the
output quietly, with exit code 0."""

from __future__ import annotations

import os
import sys


def write(text: str) -> None:
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # nothing more can be shown; point stdout at /dev/null so that the flush at exit does not fail too
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
