"""Workloads for `replay`, read one request at a time (constant memory however long the trace):

- the Mooncake format (JSONL: ``timestamp``, ``input_length``, ``output_length``, ``hash_ids``, one id per
  512-token block, the last block partial);
- a JSONL of token-id lists (``prompt_token_ids``, ``output_len``);
- a synthetic workload from flags or a small YAML: a shared system prompt, users, turns, private tokens per
  turn, output tokens and the arrival order.

A prompt is known by its content, not its token ids: a sequence of runs, each ``(key, length)``, where token
``j`` of a run keyed ``k`` is the same token in every prompt that has the run (a Mooncake block, a synthetic
segment), or for token-id traces the ids themselves. Two prompts share a prefix exactly as far as their
runs agree, which is all a prefix cache can see.
"""

from __future__ import annotations

import json
from bisect import bisect_left
from collections.abc import Iterator
from functools import cache
from itertools import accumulate, repeat
from pathlib import Path
from typing import Annotated

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType
from msgspec.structs import force_setattr

from hybridplan.errors import PlanError

try:  # the chained hashes in C (hybridplan/replay/_speedups.c): the same values, a fraction of the time
    from hybridplan.replay import _speedups as _native
except ImportError:  # no C compiler where it was installed
    _native = None

_M64 = (1 << 64) - 1


def _fold(a: int, b: int) -> int:
    """One fold of ``b`` into ``a`` on 64 bits: splitmix64's finaliser of a·φ xor b (the same in _speedups.c)."""
    x = ((a * 0x9E3779B97F4A7C15) ^ b) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def step(chain: int, key: object, length: int) -> int:
    """The key of a prefix that ends ``length`` tokens into a run keyed ``key``, after the runs whose chain is
    ``chain``: ``hash(key)`` folded into the chain, then the length, as a signed 64-bit int that is never -1 (the
    native tables' empty mark). Equal prefixes get equal keys; unequal ones collide with chance about 2**-64."""
    x = _fold(_fold(chain, hash(key)), length)
    x = x - (1 << 64) if x >> 63 else x
    return -2 if x == -1 else x


#: tokens per ``hash_ids`` entry in the Mooncake traces (kvcache-ai/Mooncake FAST25-release/README.md)
MOONCAKE_BLOCK = 512
#: the most requests one trace may hold (a bound on a runaway synthetic workload)
MAX_REQUESTS = 10_000_000
#: the most tokens one request may hold
MAX_PROMPT = 1 << 24
#: the most a line of a trace may be, in characters
MAX_LINE = 64 << 20


class Prompt(Struct, frozen=True, dict=True):
    """A prompt's content as runs ``(key, length)``, or as token ids (``tokens``). What it computes once (its unit
    keys, chains, pairs and runs index) it keeps in its ``__dict__``, beside the fields: no part of its value."""

    runs: tuple[tuple[object, int], ...] = ()
    tokens: tuple[int, ...] | None = None
    #: the token count: the runs' lengths summed, or the token ids counted, where it is not given (-1)
    size: int = -1

    def __post_init__(self) -> None:
        if self.size < 0:
            size = len(self.tokens) if self.tokens is not None else sum([n for _, n in self.runs])
            force_setattr(self, "size", size)  # msgspec's way to set a frozen Struct's field in __post_init__

    @classmethod
    def of_runs(cls, runs: tuple[tuple[object, int], ...], size: int) -> Prompt:
        """``Prompt(runs=runs)`` whose token count the caller knows (``size``, the runs' lengths summed)."""
        return cls(runs, None, size)

    def __len__(self) -> int:
        return self.size

    def unit_keys(self, unit: int, stop: int) -> list[int]:
        """One key per full ``unit``-token piece up to ``stop`` tokens, each standing for all the tokens before
        its end (a chained hash): two prompts get equal keys exactly as far as their first tokens agree.
        Computed once per (unit, stop) and shared; the caller must not change the list.

        Runs: the key of a prefix is ``step`` of (the chain of the whole runs before the run it ends in, that
        run's key, the tokens it takes of it), the chain being ``chains``; so a prefix is known by its runs cut
        at its end, which is the same as by its tokens. Token ids: a chain over the pieces' ids."""
        memos = self.__dict__.setdefault("_keys", {})
        memo = memos.get((unit, stop))
        if memo is not None:
            return memo
        total = min(stop, self.size)
        out: list[int] = []
        if self.tokens is not None:
            h, toks = 0, self.tokens
            for a in range(0, total - unit + 1, unit):
                h = hash((h, toks[a : a + unit]))
                out.append(h)
        elif _native is not None:
            out = _native.unit_keys(self.runs, unit, total)
        else:
            # the chains are ``chains``'s, made once and shared with the ideal cache (a loop over the unit ends
            # instead, each one's run found by bisection and the keys hashed through map/zip, was measured slower
            # on the Mooncake trace, with about one unit a run)
            start, end = 0, unit
            append = out.append
            many = 2 * unit
            for (key, n), chain in zip(self.runs, self.chains()):
                stop_run = start + n
                if end <= stop_run:  # a unit ends in the run (or at its end)
                    lim = stop_run if stop_run < total else total
                    if lim - end >= many:  # many units in the run: one comprehension
                        out += [step(chain, key, e) for e in range(end - start, lim - start + 1, unit)]
                        end += ((lim - end) // unit + 1) * unit
                    while end <= lim:
                        append(step(chain, key, end - start))
                        end += unit
                    if end > total:
                        break
                start = stop_run
        memos[(unit, stop)] = out
        return out

    def chains(self) -> list[int]:
        """0, then after each run the chain of the runs so far: ``step(chain, key, length)`` over each run with
        tokens (a run of none changes nothing); a token-id prompt's tokens are runs of one token each. Computed
        once; the caller must not change the list."""
        memo = self.__dict__.get("_chains")
        if memo is None:
            if _native is not None:
                memo = _native.chains(self.runs) if self.tokens is None else _native.token_chains(self.tokens)
            else:
                memo, chain = [0], 0
                append = memo.append
                for key, n in self.runs if self.tokens is None else zip(self.tokens, repeat(1)):
                    if n:
                        chain = step(chain, key, n)
                    append(chain)
            self.__dict__["_chains"] = memo
        return memo

    def pairs(self) -> list[int]:
        """The runs with tokens as interleaved (the chain after the run, its length): the path of the ideal
        cache's Python twin (hybridplan/replay/loop.py ``PyIdeal``). Computed once."""
        memo = self.__dict__.get("_pairs")
        if memo is None:
            lens = [n for _, n in self.runs] if self.tokens is None else repeat(1, len(self.tokens))
            memo = []
            for after, n in zip(self.chains()[1:], lens):
                if n:
                    memo += (after, n)
            self.__dict__["_pairs"] = memo
        return memo

    def point_key(self, pos: int, unit: int, keys: list[int]) -> int:
        """The key of the first ``pos`` tokens (any position; at a multiple of ``unit`` the unit key itself), for a
        state saved off the unit grid."""
        q, t = divmod(pos, unit)
        base = keys[q - 1] if q else 0
        if not t:
            return base
        if self.tokens is not None:
            return hash((base, self.tokens[q * unit : pos]))
        ends, starts, chains, keys_ = self._runs_index()
        j = bisect_left(ends, pos)
        return step(chains[j], keys_[j], pos - starts[j])

    def _runs_index(self) -> tuple[list[int], list[int], list[int], tuple[object, ...]]:
        """Each run's end and start (in tokens), the chain of the runs before it (``chains``) and its key, made
        once: position ``pos`` > 0 ends in run ``bisect_left(ends, pos)``."""
        index = self.__dict__.get("_index")
        if index is None:
            keys, lens = zip(*self.runs) if self.runs else ((), ())
            ends = list(accumulate(lens))
            index = ends, [0, *ends[:-1]], self.chains(), keys
            self.__dict__["_index"] = index
        return index

    def common_prefix(self, other: Prompt) -> int:
        """Tokens the two prompts share from the start (the ideal cache's reach)."""
        if self.tokens is not None and other.tokens is not None:
            n = 0
            for a, b in zip(self.tokens, other.tokens):
                if a != b:
                    break
                n += 1
            return n
        n = 0
        for (ka, la), (kb, lb) in zip(self.runs, other.runs):
            if ka != kb:
                break
            n += min(la, lb)
            if la != lb:
                break
        return n


class Request(Struct, frozen=True, dict=True):
    """One request of a trace: its place, arrival time, prompt and the tokens it generates (its prompt followed by
    them, ``with_output``, kept in its ``__dict__`` once made)."""

    index: int
    prompt: Prompt
    output_len: int
    arrival: float = 0.0
    #: where it came from (file line, or the synthetic user and turn)
    origin: str = ""
    #: what the generated tokens are, so that a later turn that quotes them shares them
    output_key: object = None
    #: the prompt's tokens (``len(prompt)``, kept as a field: every policy reads it several times a request);
    #: -1: read from the prompt
    prompt_len: int = -1

    def __post_init__(self) -> None:
        if self.prompt_len < 0:
            force_setattr(self, "prompt_len", self.prompt.size)

    @classmethod
    def of(cls, index: int, prompt: Prompt, output_len: int, arrival: float, origin: str) -> Request:
        """``Request(index, prompt, output_len, arrival, origin)``, its prompt with the output (``with_output``)
        made with it: every replay asks for it."""
        req = cls(index, prompt, output_len, arrival, origin, None, prompt.size)
        req.__dict__["_full"] = _followed(prompt, ("out", index), output_len)
        return req

    def with_output(self) -> Prompt:
        """The prompt followed by its generated tokens (what decoding hashes), built once (kept beside the
        fields; functools.cached_property takes a lock on every read before Python 3.12)."""
        full = self.__dict__.get("_full")
        if full is None:
            full = self._with_output()
            self.__dict__["_full"] = full
        return full

    def _with_output(self) -> Prompt:
        return _followed(
            self.prompt, self.output_key if self.output_key is not None else ("out", self.index), self.output_len
        )


def _followed(prompt: Prompt, key: object, n: int) -> Prompt:
    """``prompt`` followed by ``n`` generated tokens known by ``key`` (a run ``((key, 0), n)``; for token ids, ids
    of their own below 0)."""
    if prompt.tokens is not None:
        base = hash(key) & 0x7FFFFFFF
        return Prompt(tokens=prompt.tokens + tuple(-(base + j) - 1 for j in range(n)))
    if not n:
        return Prompt.of_runs(prompt.runs, prompt.size)
    return Prompt.of_runs(prompt.runs + (((key, 0), n),), prompt.size + n)


def _bad(path: Path, line: int, why: str) -> PlanError:
    return PlanError(f"{path}: line {line}: {why}")


# --- the JSONL formats: each line's fields as msgspec types, checked by msgspec as a line decodes ---------------

#: a line's token count (``Count``: ≥ 0; ``Positive``: ≥ 1), at most MAX_PROMPT; a token id, ≥ 0
Count = Annotated[int, Meta(ge=0, le=MAX_PROMPT)]
Positive = Annotated[int, Meta(ge=1, le=MAX_PROMPT)]
TokenId = Annotated[int, Meta(ge=0)]


class MooncakeLine(Struct, kw_only=True):
    """The fields of a Mooncake line (any others it has are left alone)."""

    input_length: Positive
    output_length: Count = 0
    hash_ids: list[int]
    timestamp: float = 0.0


class TokenLine(Struct, kw_only=True):
    """The fields of a token-id line; ``arrival`` where absent is the request's index."""

    prompt_token_ids: Annotated[list[TokenId], Meta(min_length=1, max_length=MAX_PROMPT)]
    output_len: Count = 0
    arrival: float | UnsetType = UNSET


def _records(path: Path, kind: type, make, refusal) -> Iterator:
    """Each line's request, ``make(rec, path, line, index)``, ``rec`` the line decoded to ``kind`` by msgspec (the
    fields' types and bounds checked as it decodes). A line msgspec refuses is read again by json, which takes
    what strict JSON does not (NaN, 1e400, a lone surrogate) and says where a line is no JSON, and converted to
    ``kind`` by msgspec; where that refuses the line, ``refusal(obj)`` says why, in one line."""
    try:
        fh = path.open(encoding="utf-8")
    except OSError as exc:
        raise PlanError(f"cannot read {path}: {exc.strerror}") from None
    decode = _decoder(kind)
    index = n = 0
    with fh:
        try:
            for n, text in enumerate(fh, 1):
                if len(text) > MAX_LINE:
                    raise _bad(path, n, f"longer than {MAX_LINE:,} characters")
                if text.isspace():  # (a line read is never empty)
                    continue
                try:
                    rec = decode(text)
                except msgspec.DecodeError:  # (a ValidationError is one)
                    rec = _convert(_loads(path, n, text), kind, path, n, refusal)
                yield make(rec, path, n, index)
                index += 1
                if n > MAX_REQUESTS:
                    raise _bad(path, n, f"more than {MAX_REQUESTS:,} requests")
        except UnicodeDecodeError:  # a binary file or another encoding
            raise _bad(path, _undecodable_line(path, n), "not UTF-8 text (a trace is JSON lines)") from None


@cache
def _decoder(kind: type):
    """msgspec's JSON decoder to ``kind`` (a quarter of json's time on a Mooncake line, the checks included)."""
    return msgspec.json.Decoder(kind).decode


def _convert(obj: object, kind: type, path: Path, n: int, refusal):
    """A line json read, as ``kind``; refused in one line where it is no object or ``kind`` refuses it."""
    if not isinstance(obj, dict):
        raise _bad(path, n, f"a JSON object was expected, got {type(obj).__name__}")
    try:
        return msgspec.convert(obj, kind)
    except msgspec.ValidationError:
        raise _bad(path, n, refusal(obj)) from None


def _undecodable_line(path: Path, after: int) -> int:
    """The first line past ``after`` that is not UTF-8 (the text reader decodes a chunk ahead of the lines it
    gives; a newline byte is never inside a UTF-8 sequence, so each line decodes alone)."""
    with path.open("rb") as fh:
        for n, raw in enumerate(fh, 1):
            if n > after:
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError:
                    return n
    return after + 1


def _lines(path: Path) -> Iterator[tuple[int, dict]]:
    """Each line's number and object."""
    return _records(path, dict, lambda obj, path, line, index: (line, obj), None)


def _loads(path: Path, n: int, text: str) -> object:
    """A line through json.loads, its failure one error naming the line."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise _bad(path, n, f"not JSON ({exc.msg} at column {exc.colno})") from None
    except UnicodeDecodeError:
        raise _bad(path, n, "not UTF-8 text") from None


#: a field a line lacks
_ABSENT = object()


def _count_why(name: str, low: int):
    """What a line is told whose token count ``name`` msgspec refuses: none, above MAX_PROMPT, or no integer
    ≥ ``low``."""

    def why(v: object) -> str:
        if v is _ABSENT:
            return f"no {name!r}"
        if _holds(v, Annotated[int, Meta(ge=low)]):
            return f"{name!r} is {v:,}: more than {MAX_PROMPT:,} tokens"
        return f"{name!r} must be an integer ≥ {low}, got {v!r}"

    return why


def _holds(value: object, kind: object) -> bool:
    try:
        msgspec.convert(value, kind)
    except msgspec.ValidationError:
        return False
    return True


def _first_refused(obj: dict, kind: type, whys: dict) -> str | None:
    """What the line is told for the first of ``whys``'s fields, in its order, that ``kind`` refuses (a required
    one absent, or one whose value its type does not take), from the field's value; None where none is."""
    fields = {f.name: f for f in msgspec.structs.fields(kind)}
    for name, why in whys.items():
        v = obj.get(name, _ABSENT)
        if v is _ABSENT:
            if fields[name].required:
                return why(v)
        elif not _holds(v, fields[name].type):
            return why(v)
    return None


#: what a Mooncake line is told when msgspec refuses one of its fields, in the order the fields are checked (the
#: count of ``hash_ids`` is checked before ``timestamp``: ``_mooncake_refusal``)
_MOONCAKE_WHY = {
    "input_length": _count_why("input_length", 1),
    "output_length": _count_why("output_length", 0),
    "hash_ids": lambda v: "'hash_ids' must be a list of integers",
}
_TIMESTAMP_WHY = {"timestamp": lambda v: f"'timestamp' must be a number, got {v!r}"}


def mooncake(path: Path) -> Iterator[Request]:
    """A Mooncake trace: block ``i`` of ``hash_ids`` is tokens 512·i to 512·(i+1), the last one holding what
    is left of ``input_length``; equal ids are equal token blocks across requests."""
    return _records(path, MooncakeLine, _mooncake_line, _mooncake_refusal)


def _blocks_why(n: int, ids: list) -> str | None:
    """Why ``ids`` are not the hash ids of ``n`` input tokens: one per 512-token block."""
    need = -(-n // MOONCAKE_BLOCK)
    if len(ids) == need:
        return None
    return f"{len(ids)} hash_ids for {n:,} input tokens: {need} expected, one per {MOONCAKE_BLOCK}-token block"


def _mooncake_refusal(obj: dict) -> str:
    return (
        _first_refused(obj, MooncakeLine, _MOONCAKE_WHY)
        or _blocks_why(obj["input_length"], obj["hash_ids"])
        or _first_refused(obj, MooncakeLine, _TIMESTAMP_WHY)
        or "not a Mooncake record"
    )


def _mooncake_line(rec: MooncakeLine, path: Path, line: int, index: int) -> Request:
    n, ids = rec.input_length, rec.hash_ids
    why = _blocks_why(n, ids)
    if why is not None:
        raise _bad(path, line, why)
    # a block's id is its run's key (no other key in the trace is an int)
    last = n - MOONCAKE_BLOCK * (len(ids) - 1)
    if _native is not None:
        runs = _native.block_runs(ids, MOONCAKE_BLOCK, last)
    else:
        runs = (*zip(ids, repeat(MOONCAKE_BLOCK, len(ids) - 1)), (ids[-1], last))
    return Request.of(index, Prompt.of_runs(runs, n), rec.output_length, rec.timestamp, f"line {line}")


def token_lists(path: Path) -> Iterator[Request]:
    """A JSONL of ``{"prompt_token_ids": [...], "output_len": N}`` (``arrival`` optional)."""
    return _records(path, TokenLine, _token_line, _token_refusal)


def _token_ids_why(v: object) -> str:
    if _holds(v, Annotated[list[TokenId], Meta(min_length=1)]):
        return f"{len(v):,} prompt tokens: more than {MAX_PROMPT:,}"  # type: ignore[arg-type]
    return "'prompt_token_ids' must be a non-empty list of token ids (integers ≥ 0)"


#: what a token-id line is told when msgspec refuses one of its fields, in the order the fields are checked
_TOKEN_WHY = {
    "prompt_token_ids": _token_ids_why,
    "output_len": _count_why("output_len", 0),
    "arrival": lambda v: f"'arrival' must be a number, got {v!r}",
}


def _token_refusal(obj: dict) -> str:
    return _first_refused(obj, TokenLine, _TOKEN_WHY) or "not a token-id record"


def _token_line(rec: TokenLine, path: Path, line: int, index: int) -> Request:
    t = index if rec.arrival is UNSET else rec.arrival
    return Request(index, Prompt(tokens=tuple(rec.prompt_token_ids)), rec.output_len, float(t), f"line {line}")


# --- synthetic workloads ------------------------------------------------------------------------------

#: arrival orders: every user's turn 1, then every user's turn 2 (round-robin), or one user's turns together
ORDERS = ("round-robin", "user-by-user")


class Synthetic(Struct, frozen=True):
    """U users share a system prompt of ``shared`` tokens; each has T turns; turn t adds ``private`` tokens of
    the user's own and generates ``output`` tokens. ``history``: a turn's prompt holds the user's earlier
    turns and their outputs (a conversation), else it is the system prompt and the new private part alone.
    ``shared_users``: users in groups of this many share a second prefix of ``group_shared`` tokens after the
    system prompt (a few-shot set, a document). Every count is tokens."""

    shared: int = 0
    users: int = 1
    turns: int = 1
    private: int = 0
    output: int = 0
    history: bool = True
    order: str = "round-robin"
    group_size: int = 0
    group_shared: int = 0
    #: every ``private_step``-th request (by arrival) adds this many tokens to its private part
    private_extra: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for name in ("shared", "users", "turns", "private", "output", "group_size", "group_shared"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise PlanError(f"synthetic workload: {name} must be an integer ≥ 0, got {v!r}")
        if self.users < 1 or self.turns < 1:
            raise PlanError("synthetic workload: users and turns must be at least 1")
        if self.order not in ORDERS:
            raise PlanError(f"synthetic workload: order must be one of {', '.join(ORDERS)}, got {self.order!r}")
        if self.users * self.turns > MAX_REQUESTS:
            raise PlanError(f"synthetic workload: {self.users * self.turns:,} requests, more than {MAX_REQUESTS:,}")
        if self.shared + self.private + self.group_shared == 0:
            raise PlanError("synthetic workload: every prompt would be empty (give shared or private tokens)")
        extra = max((x for x in self.private_extra if isinstance(x, int)), default=0)
        turns = self.turns if self.history else 1  # the longest prompt: the last turn's, with its extra tokens
        longest = self.shared + self.group_shared + turns * self.private + extra + (turns - 1) * self.output
        if longest > MAX_PROMPT or self.output > MAX_PROMPT:
            raise PlanError(
                f"synthetic workload: a prompt of {longest:,} tokens and {self.output:,} output "
                f"tokens; at most {MAX_PROMPT:,} each"
            )

    def requests(self) -> Iterator[Request]:
        pairs = (
            [(u, t) for t in range(self.turns) for u in range(self.users)]
            if self.order == "round-robin"
            else [(u, t) for u in range(self.users) for t in range(self.turns)]
        )
        for i, (u, t) in enumerate(pairs):
            runs: list[tuple[object, int]] = []
            if self.shared:
                runs.append((("system",), self.shared))
            if self.group_size and self.group_shared:
                runs.append((("group", u // self.group_size), self.group_shared))
            first = 0 if self.history else t
            for k in range(first, t + 1):
                extra = self.private_extra[i % len(self.private_extra)] if self.private_extra and k == t else 0
                if self.private + extra:
                    runs.append((("user", u, k), self.private + extra))
                if k < t and self.output:
                    runs.append(((("reply", u, k), 0), self.output))
            yield Request(
                i,
                Prompt(runs=tuple(runs)),
                self.output,
                float(i),
                f"user {u + 1}, turn {t + 1}",
                output_key=("reply", u, t),
            )


_SYNTH_KEYS = {
    "shared": "shared",
    "system_prompt": "shared",
    "users": "users",
    "turns": "turns",
    "private": "private",
    "private_per_turn": "private",
    "output": "output",
    "output_tokens": "output",
    "history": "history",
    "order": "order",
    "group_size": "group_size",
    "group_shared": "group_shared",
}


def synthetic_yaml(path: Path) -> Synthetic:
    """A synthetic workload from a small YAML mapping (the keys of ``Synthetic``)."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PlanError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise PlanError(f"{path}: not a text file (not UTF-8): a synthetic workload is a YAML mapping") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise PlanError(f"{path}: {where}not YAML ({getattr(exc, 'problem', None) or exc})") from None
    if not isinstance(data, dict):
        raise PlanError(f"{path}: a YAML mapping of the synthetic workload's fields was expected")
    if "synthetic" in data and isinstance(data["synthetic"], dict):
        data = data["synthetic"]
    kw: dict = {}
    for k, v in data.items():
        if k not in _SYNTH_KEYS:
            raise PlanError(f"{path}: unknown field {k!r} (known: {', '.join(sorted(_SYNTH_KEYS))})")
        kw[_SYNTH_KEYS[k]] = v
    return Synthetic(**kw)


#: trace formats ``--format`` names
FORMATS = ("auto", "mooncake", "tokens", "synthetic")


def detect(path: Path) -> str:
    """The format of a trace file: YAML → synthetic; JSONL by the first object's keys."""
    if path.suffix.lower() in (".yaml", ".yml"):
        return "synthetic"
    for line, obj in _lines(path):
        if "hash_ids" in obj:
            return "mooncake"
        if "prompt_token_ids" in obj:
            return "tokens"
        raise _bad(path, line, "neither a Mooncake record ('hash_ids') nor a token-id record ('prompt_token_ids')")
    raise PlanError(f"{path}: the trace holds no request")


def read(path: Path, fmt: str = "auto") -> Iterator[Request]:
    """The requests of a trace file, one at a time."""
    if fmt not in FORMATS:
        raise PlanError(f"unknown trace format {fmt!r} (known: {', '.join(FORMATS)})")
    if not path.exists():
        raise PlanError(f"no trace at {path}")
    if fmt == "auto":
        fmt = detect(path)
    if fmt == "synthetic":
        return synthetic_yaml(path).requests()
    return mooncake(path) if fmt == "mooncake" else token_lists(path)
