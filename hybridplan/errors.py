"""The one exception type a user ever sees: it carries a single line naming the problem."""

from __future__ import annotations


class PlanError(Exception):
    """Bad input or an impossible request. The CLI prints ``str(err)`` on one line and exits 2."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class NotServed(PlanError):
    """An engine (release) that does not run this model. With ``--engine both`` the other engine still
    answers; asked for alone, it is an error like any other."""


class Refused(PlanError):
    """An engine that would not start with these settings, in its own words (its start-up check failing on the
    memory or the pages it gets). `fit` gives it as that engine's verdict ("will not start", exit 1) while the
    other engine still answers; everywhere else it is an error like any other."""


def did_you_mean(word: str, choices, *, n: int = 3, cutoff: float = 0.6) -> str:
    """``"; did you mean a or b?"`` for the choices closest to ``word`` (difflib), or nothing."""
    from difflib import get_close_matches

    close = get_close_matches(word, list(dict.fromkeys(choices)), n=n, cutoff=cutoff)
    return f"; did you mean {' or '.join(close)}?" if close else ""
