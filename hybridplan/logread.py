"""A start-up log read as a stream: only the lines that may hold a setting or a figure are kept, with their
line numbers, so a log of millions of unrelated lines (a DEBUG log) is read in constant memory and in seconds.
Lines that start with ``#`` are comments (a saved log may name its source there) and are never read."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Sequence
from pathlib import Path

from msgspec import Struct

from hybridplan.errors import PlanError

BLOCK = 1 << 22
#: the most kept lines: the last ones win, as a setting printed twice counts as it was printed last
MAX_LINES = 50_000
#: how much of a line a source shows
EXCERPT = 100


class Line(Struct, frozen=True):
    no: int
    text: str

    @property
    def excerpt(self) -> str:
        """The line without the engine's prefixes (docker timestamps, process tags, level and time), cut short."""
        text = (
            re.sub(
                r"^.*?(?:INFO|WARNING|ERROR|DEBUG)\s+(?:\d\d-\d\d \d\d:\d\d:\d\d\s+)?(?:\[[^\]]*\]\s*)?", "", self.text
            ).strip()
            or self.text.strip()
        )
        text = re.sub(r"^\[[\d\-: ]+(?:TP\d+|DP\d+|PP\d+|EP\d+|\s)*\]\s*", "", text)
        return text if len(text) <= EXCERPT else text[: EXCERPT - 1] + "…"


class Found(Struct, frozen=True):
    """A pattern's match and the line it is on."""

    line: Line
    match: re.Match[str]

    def __getitem__(self, i: int) -> str:
        return self.match.group(i)

    @property
    def source(self) -> str:
        return f"line {self.line.no}: {self.line.excerpt}"


class Log(Struct, frozen=True):
    lines: tuple[Line, ...]
    #: why this start was cut from the one before it, where it was not by an opener printed again: the figure
    #: printed again (runs pasted without their banner)
    cut_by: str | None = None

    @property
    def text(self) -> str:
        return "\n".join(line.text for line in self.lines)

    def all(self, pattern: re.Pattern[str]) -> list[Found]:
        return [Found(line, m) for line in self.lines for m in pattern.finditer(line.text)]

    def last(self, pattern: re.Pattern[str]) -> Found | None:
        for line in reversed(self.lines):
            found = list(pattern.finditer(line.text))
            if found:
                return Found(line, found[-1])
        return None

    def has(self, pattern: re.Pattern[str]) -> bool:
        return any(pattern.search(line.text) for line in self.lines)

    @property
    def span(self) -> tuple[int, int]:
        """The first and last line numbers kept (0, 0 for an empty log)."""
        return (self.lines[0].no, self.lines[-1].no) if self.lines else (0, 0)

    def containers(self) -> list[Log]:
        """The log cut by the container each line comes from, where ``docker compose logs`` prefixed every line with
        its service (``qwen3.5-9b  | …``) and two or more services are interleaved; else the log itself."""
        matches = [_COMPOSE.match(line.text) for line in self.lines]
        names = [m.group(1) for m in matches if m is not None]
        if not self.lines or len(names) < len(matches) or len(set(names)) < 2:
            return [self]
        order = list(dict.fromkeys(names))
        return [
            Log(tuple(line for line, n in zip(self.lines, names) if n == name), f"container {name}") for name in order
        ]

    def starts(
        self,
        openers: Iterable[re.Pattern[str]],
        figures: Iterable[re.Pattern[str]],
        stages: Sequence[Sequence[Sequence[re.Pattern[str]]]] = (),
    ) -> list[Log]:
        """The log cut into its start-ups: a restart appended by ``docker logs``, or several runs pasted into one
        file, so that no figure is ever read beside another start's settings.

        A start is told by its openers (a version banner, the argument line, the engine-config line: one of
        ``openers``), each printed once a start: when one is printed a second time, a new start has begun. It
        begins at the first opener printed after the previous start's last figure (a line matching one of
        ``figures``), or at the repeated opener itself. Lines out of order in a pasted excerpt (figures before
        the arguments) stay one start: only a repeated opener cuts.

        Runs pasted without their openers are cut where a figure repeats: ``stages`` gives each engine's figures
        in the order a start prints them (its configuration, then its memory, then its capacity last). Once a
        start has printed its capacity, a figure it already printed appearing again opens the next start, as
        does a capacity figure printed again with another value, by the same process (its tag without the pid:
        ``Worker_TP0``, ``EngineCore``, SGLang's ``TP1``); the same figure printed again with the same value, or by
        another worker of the start, does not cut. Such a start begins after the
        previous start's last figure or opener (an opener printed once stays with the start it is in, as above)."""
        openers, figures = tuple(openers), tuple(figures)
        cuts: list[int] = [0]
        why: dict[int, str] = {}
        seen: set[int] = set()
        kinds: list[int | None] = []
        last_figure: int | None = None
        after_figure: int | None = None  # the first opener after the last figure of the current start
        printed: list[dict[tuple[int, int, str], str]] = [{} for _ in stages]  # each engine's, by stage and process
        reached: list[int] = [-1 for _ in stages]  # the furthest stage each engine printed in this start
        last_mark = 0  # the last figure or opener of the current start: a start cut by a figure begins after it
        for i, line in enumerate(self.lines):
            kind = next((k for k, p in enumerate(openers) if p.search(line.text)), None)
            kinds.append(kind)
            if kind is not None:
                if kind in seen:
                    cut = after_figure if after_figure is not None else i
                    cuts.append(cut)
                    seen = {k for k in kinds[cut:] if k is not None}
                    last_figure = after_figure = None
                    printed, reached = [{} for _ in stages], [-1 for _ in stages]
                else:
                    seen.add(kind)
                    if after_figure is None and last_figure is not None:
                        after_figure = i
            for e, order in enumerate(stages):
                for st, group in enumerate(order):
                    for k, p in enumerate(group):
                        m = p.search(line.text)
                        if m is None:
                            continue
                        tag = _tag(line.text)
                        before = printed[e].get((st, k, tag))
                        last = len(order) - 1
                        if (
                            before is not None
                            and last_figure is not None
                            and ((reached[e] == last and st < last) or (st == last and before != m.group(0)))
                        ):
                            cut = last_mark + 1
                            cuts.append(cut)
                            why[cut] = f"line {line.no}: {line.excerpt}"
                            seen = {x for x in kinds[cut:] if x is not None}
                            last_figure = after_figure = None
                            printed, reached = [{} for _ in stages], [-1 for _ in stages]
                        printed[e][(st, k, tag)] = m.group(0)
                        reached[e] = max(reached[e], st)
            if any(p.search(line.text) for p in figures):
                last_figure, after_figure = i, None
            if kind is not None or last_figure == i:
                last_mark = i
        bounds = [*cuts, len(self.lines)]
        return [Log(self.lines[a:b], why.get(a)) for a, b in zip(bounds, bounds[1:]) if b > a]


#: the service name ``docker compose logs`` puts before each line
_COMPOSE = re.compile(r"^([\w.\-]+)\s+\|\s")
#: the process a line was printed by, without its pid: vLLM's ``(Worker_TP0 pid=306)``, SGLang's ``[… TP1]``
_TAG = re.compile(r"\((\w+?)(?: pid=\d+)?\)|\[[^\]]*?\b((?:[TDPE]P\d+ ?)+)\]")


def _tag(text: str) -> str:
    m = _TAG.search(text)
    return (m.group(1) or m.group(2) or "").strip() if m else ""


def _open(path: Path):
    """The log's bytes: the file, or standard input for ``-`` (left open: it is not ours to close)."""
    if str(path) == "-":
        import sys
        from contextlib import nullcontext

        return nullcontext(sys.stdin.buffer)
    return open(path, "rb")


def scan(path: Path, keywords: Iterable[str]) -> Log:
    """The lines of ``path`` (standard input for ``-``) holding any of ``keywords``, in order, with their numbers
    (from 1), read a block at a time."""
    keys = [k.encode() for k in dict.fromkeys(keywords)]
    kept: deque[Line] = deque(maxlen=MAX_LINES)
    try:
        with _open(path) as f:
            carry, seen = b"", 0
            while block := f.read(BLOCK):
                block = carry + block
                cut = block.rfind(b"\n") + 1
                body, carry = block[:cut], block[cut:]
                kept.extend(_lines(body, keys, seen))
                seen += body.count(b"\n")
            kept.extend(_lines(carry + b"\n", keys, seen) if carry else ())
    except OSError as exc:
        raise PlanError(f"cannot read {'standard input' if str(path) == '-' else path}: {exc.strerror}") from None
    return Log(tuple(kept))


def read_text(text: str, keywords: Iterable[str] = ("",)) -> Log:
    """A log held in memory (tests, the validation scripts)."""
    keys = [k.encode() for k in dict.fromkeys(keywords)] or [b""]
    return Log(tuple(_lines((text if text.endswith("\n") else text + "\n").encode(), keys, 0)))


def _lines(body: bytes, keys: list[bytes], seen: int) -> list[Line]:
    starts: set[int] = set()
    for key in keys:
        i = body.find(key)
        while i >= 0:
            start = body.rfind(b"\n", 0, i) + 1
            starts.add(start)
            end = body.find(b"\n", i)
            i = body.find(key, end + 1) if end >= 0 else -1
    out, at, no = [], 0, seen + 1
    for s in sorted(starts):
        no += body.count(b"\n", at, s)
        at = s
        raw = body[s : body.find(b"\n", s)]
        if not raw.lstrip().startswith(b"#"):
            out.append(Line(no, raw.decode("utf-8", errors="replace").rstrip("\r")))
    return out
