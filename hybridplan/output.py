"""Writing to stdout as a command-line tool should: a reader that goes away (``| head -1``) ends the
output quietly, with exit code 0; output that cannot be written (a full disk, ``> /dev/full``) is one line on
stderr and exit code 2, as for any other request that cannot be carried out."""

from __future__ import annotations

import errno
import os
import re
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


def say(line: str) -> None:
    """One line on stderr, as the command line says everything that is not its output: ``hybridplan: line``."""
    sys.stderr.write(f"hybridplan: {line}\n")


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
        say(f"error: cannot write the output: {exc.strerror or exc}")
        return PlanError.exit_code
    if os.environ.get("HYBRIDPLAN_DEBUG"):
        raise exc
    say(f"internal error: {type(exc).__name__}: {exc} (set HYBRIDPLAN_DEBUG=1 for the traceback)")
    return 1


# --- lines a person copies off a terminal: broken between words only -------------------------------------------

#: a word of a command as it was written: quoted parts kept whole (``'{"method": "mtp"}'`` is one word)
_WORD = re.compile(r"""(?:[^\s'"]+|'[^']*'|"(?:\\.|[^"\\])*")+""")


def words(command: str) -> list[str]:
    """A command line's words, each as written (quotes kept), so that re-joining them gives the same line."""
    return _WORD.findall(command)


def _groups(ws: list[str]) -> list[list[str]]:
    """Words kept on one line where they fit: a flag with its value, the program with its model."""
    out: list[list[str]] = []
    for w in ws:
        last = out[-1] if out else None
        if (
            last is not None
            and not w.startswith("-")
            and (
                last[0].startswith("-")
                and last[0] != "--"
                and len(last) == 1
                and "=" not in last[0]
                or not last[0].startswith("-")
                and not any("=" in x for x in last)
            )
        ):
            last.append(w)
        else:
            out.append([w])
    return out


def wrap_command(ws: list[str], cols: int, indent: str = "  ", more: str = "    ") -> list[str]:
    """A command to paste, in lines of at most ``cols`` where its words allow: broken between words only, never
    inside a flag, a number or a quoted value, each line but the last ending in a shell continuation (a
    backslash); a flag stays with its value where both fit. Removing the continuations gives the command back,
    word for word."""
    lines: list[str] = []
    line = indent
    for group in _groups(ws):
        chunk = " ".join(group)
        fresh = len(more) + len(chunk) + 2 <= cols
        parts = [chunk] if fresh or len(group) == 1 else group  # too long even alone: its words apart
        for part in parts:
            if line.strip() and len(line) + 1 + len(part) + 2 > cols:
                lines.append(line + " \\")
                line = more + part
            else:
                line += (" " if line.strip() else "") + part
    lines.append(line)
    return lines


def wrap_words(text: str, cols: int, indent: str = "", hang: str = "    ") -> list[str]:
    """A line of prose or an engine's log line in lines of at most ``cols``, broken at spaces only (a word
    longer than the line stands alone, whole), the lines after the first indented by ``hang`` under the first
    line's ``indent``."""
    import textwrap

    if len(indent) + len(text) <= cols:
        return [indent + text]
    return textwrap.wrap(
        text,
        width=cols,
        initial_indent=indent,
        subsequent_indent=" " * len(indent) + hang,
        break_long_words=False,
        break_on_hyphens=False,
        replace_whitespace=False,
    ) or [indent]
