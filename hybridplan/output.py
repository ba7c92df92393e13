"""Writing to stdout as a command-line tool should: a reader that goes away (``| head -1``) ends the
output quietly, with exit code 0; output that cannot be written (a full disk, ``> /dev/full``) is one line on
stderr and exit code 2, as for any other request that cannot be carried out."""

from __future__ import annotations

import errno
import os
import sys

from hybridplan.errors import PlanError


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the flush at exit does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout is not a file (replaced, closed)
        pass
    finally:
        os.close(devnull)


def write(text: str) -> None:
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # nothing more can be shown
        _silence_stdout()
    except OSError as exc:
        _silence_stdout()
        raise PlanError(f"cannot write the output: {exc.strerror or exc}") from None


#: what a write to a full or failing device raises
_WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)


def failed(exc: Exception) -> int:
    """The exit code, and the one line on stderr, for an exception no command turned into a PlanError: a
    write that failed (help into a full disk) is exit 2; anything else is a bug of ours, exit 1, with the way
    to see the traceback."""
    if isinstance(exc, OSError) and exc.errno in _WRITE_ERRNOS:
        _silence_stdout()
        sys.stderr.write(f"hybridplan: error: cannot write the output: {exc.strerror or exc}\n")
        return PlanError.exit_code
    if os.environ.get("HYBRIDPLAN_DEBUG"):
        raise exc
    sys.stderr.write(f"hybridplan: internal error: {type(exc).__name__}: {exc} "
                     "(set HYBRIDPLAN_DEBUG=1 for the traceback)\n")
    return 1
