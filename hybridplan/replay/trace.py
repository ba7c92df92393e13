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
from dataclasses import dataclass, field
from itertools import accumulate, repeat
from pathlib import Path

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


@dataclass(frozen=True)
class Prompt:
    """A prompt's content as runs ``(key, length)``, or as token ids (``tokens``)."""

    runs: tuple[tuple[object, int], ...] = ()
    tokens: tuple[int, ...] | None = None
    #: the token count (computed once)
    size: int = field(init=False, default=0, compare=False, repr=False)
    #: the unit keys asked for, by (unit, stop): every policy with the same unit shares them
    _keys: dict = field(init=False, default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        size = len(self.tokens) if self.tokens is not None else sum([n for _, n in self.runs])
        object.__setattr__(self, "size", size)

    @classmethod
    def of_runs(cls, runs: tuple[tuple[object, int], ...], size: int) -> Prompt:
        """``Prompt(runs=runs)`` whose token count the caller knows (``size``, the runs' lengths summed), built
        without the dataclass's per-field ``object.__setattr__`` (a trace makes two a request)."""
        return _instance(cls, {"runs": runs, "tokens": None, "size": size, "_keys": {}})

    def __len__(self) -> int:
        return self.size

    def unit_keys(self, unit: int, stop: int) -> list[int]:
        """One key per full ``unit``-token piece up to ``stop`` tokens, each standing for all the tokens before
        its end (a chained hash): two prompts get equal keys exactly as far as their first tokens agree.
        Computed once per (unit, stop) and shared; the caller must not change the list.

        Runs: the key of a prefix is ``step`` of (the chain of the whole runs before the run it ends in, that
        run's key, the tokens it takes of it), the chain being ``chains``; so a prefix is known by its runs cut
        at its end, which is the same as by its tokens. Token ids: a chain over the pieces' ids."""
        memo = self._keys.get((unit, stop))
        if memo is not None:
            return memo
        total = min(stop, self.size)
        out: list[int] = []
        if self.tokens is not None:
            h, toks = 0, self.tokens
            for a in range(0, total - unit + 1, unit):
                h = hash((h, toks[a:a + unit]))
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
        self._keys[(unit, stop)] = out
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
                for key, n in (self.runs if self.tokens is None else zip(self.tokens, repeat(1))):
                    if n:
                        chain = step(chain, key, n)
                    append(chain)
            object.__setattr__(self, "_chains", memo)
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
            object.__setattr__(self, "_pairs", memo)
        return memo

    def point_key(self, pos: int, unit: int, keys: list[int]) -> int:
        """The key of the first ``pos`` tokens (any position; at a multiple of ``unit`` the unit key itself), for a
        state saved off the unit grid."""
        q, t = divmod(pos, unit)
        base = keys[q - 1] if q else 0
        if not t:
            return base
        if self.tokens is not None:
            return hash((base, self.tokens[q * unit:pos]))
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
            object.__setattr__(self, "_index", index)
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


@dataclass(frozen=True)
class Request:
    """One request of a trace: its place, arrival time, prompt and the tokens it generates."""

    index: int
    prompt: Prompt
    output_len: int
    arrival: float = 0.0
    #: where it came from (file line, or the synthetic user and turn)
    origin: str = ""
    #: what the generated tokens are, so that a later turn that quotes them shares them
    output_key: object = None
    #: the prompt's tokens (``len(prompt)``, kept as a field: every policy reads it several times a request)
    prompt_len: int = field(init=False, default=0, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "prompt_len", len(self.prompt))

    @classmethod
    def of(cls, index: int, prompt: Prompt, output_len: int, arrival: float, origin: str) -> Request:
        """``Request(index, prompt, output_len, arrival, origin)``, built without the dataclass's per-field
        ``object.__setattr__`` (one a line of a trace), its prompt with the output (``with_output``) made with it:
        every replay asks for it."""
        return _instance(cls, {"index": index, "prompt": prompt, "output_len": output_len, "arrival": arrival,
                               "origin": origin, "output_key": None, "prompt_len": prompt.size,
                               "_full": _followed(prompt, ("out", index), output_len)})

    def with_output(self) -> Prompt:
        """The prompt followed by its generated tokens (what decoding hashes), built once (kept beside the
        fields; functools.cached_property takes a lock on every read before Python 3.12)."""
        full = self.__dict__.get("_full")
        if full is None:
            full = self._with_output()
            object.__setattr__(self, "_full", full)
        return full

    def _with_output(self) -> Prompt:
        return _followed(self.prompt, self.output_key if self.output_key is not None else ("out", self.index),
                         self.output_len)


def _followed(prompt: Prompt, key: object, n: int) -> Prompt:
    """``prompt`` followed by ``n`` generated tokens known by ``key`` (a run ``((key, 0), n)``; for token ids, ids
    of their own below 0)."""
    if prompt.tokens is not None:
        base = hash(key) & 0x7FFFFFFF
        return Prompt(tokens=prompt.tokens + tuple(-(base + j) - 1 for j in range(n)))
    if not n:
        return Prompt.of_runs(prompt.runs, prompt.size)
    return Prompt.of_runs(prompt.runs + (((key, 0), n),), prompt.size + n)


def _py_instance(cls: type, fields: dict) -> object:
    """An instance of ``cls`` with ``fields`` as its attributes, ``__init__`` not called (``_speedups.instance``'s
    twin)."""
    obj = object.__new__(cls)
    obj.__dict__.update(fields)
    return obj


_instance = _native.instance if _native is not None else _py_instance


def _bad(path: Path, line: int, why: str) -> PlanError:
    return PlanError(f"{path}: line {line}: {why}")


def _int(obj: dict, key: str, path: Path, line: int, *, low: int = 0, required: bool = True) -> int:
    if key not in obj:
        if required:
            raise _bad(path, line, f"no {key!r}")
        return 0
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise _bad(path, line, f"{key!r} must be an integer ≥ {low}, got {v!r}")
    if v > MAX_PROMPT:
        raise _bad(path, line, f"{key!r} is {v:,}: more than {MAX_PROMPT:,} tokens")
    return v


def _records(path: Path, make) -> Iterator:
    """Each line's request, ``make(obj, path, line, index)``, the object read by orjson where it is installed.
    orjson reads an integer past 64 bits as a float, so a line whose check fails (``make`` raising PlanError) is
    read again by json and checked once more: such an integer is then json's integer."""
    try:
        fh = path.open(encoding="utf-8")
    except OSError as exc:
        raise PlanError(f"cannot read {path}: {exc.strerror}") from None
    fast = _fast_loads()
    index = n = 0
    with fh:
        try:
            for n, text in enumerate(fh, 1):
                if len(text) > MAX_LINE:
                    raise _bad(path, n, f"longer than {MAX_LINE:,} characters")
                if text.isspace():  # (a line read is never empty)
                    continue
                seen = None
                try:
                    # the fast path: orjson, strict JSON, else the object from the line's first character,
                    # nothing after it but whitespace (json.loads alone costs twice as much); anything else, or
                    # what orjson refuses, through json.loads and its message
                    if fast is not None:
                        obj = fast(text)
                        seen = text
                    else:
                        obj, end = _decode(text)
                        if end != len(text) and not text[end:].isspace():
                            raise ValueError(text)
                except ValueError:
                    obj = _loads(path, n, text)
                if not isinstance(obj, dict):
                    raise _bad(path, n, f"a JSON object was expected, got {type(obj).__name__}")
                try:
                    req = make(obj, path, n, index)
                except PlanError:
                    if seen is None:
                        raise
                    req = make(_loads(path, n, seen), path, n, index)
                yield req
                index += 1
                if n > MAX_REQUESTS:
                    raise _bad(path, n, f"more than {MAX_REQUESTS:,} requests")
        except UnicodeDecodeError:  # a binary file or another encoding
            raise _bad(path, _undecodable_line(path, n), "not UTF-8 text (a trace is JSON lines)") from None


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
    return _records(path, lambda obj, path, line, index: (line, obj))


_decode = json.JSONDecoder().raw_decode


def _fast_loads():
    """orjson's ``loads`` (a quarter of json's time on a Mooncake line), or None where it is not installed."""
    try:
        from orjson import loads
    except ImportError:
        return None
    return loads


def _loads(path: Path, n: int, text: str) -> object:
    """A line through json.loads, its failure one error naming the line."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise _bad(path, n, f"not JSON ({exc.msg} at column {exc.colno})") from None
    except UnicodeDecodeError:
        raise _bad(path, n, "not UTF-8 text") from None


_INT = frozenset({int})


def mooncake(path: Path) -> Iterator[Request]:
    """A Mooncake trace: block ``i`` of ``hash_ids`` is tokens 512·i to 512·(i+1), the last one holding what
    is left of ``input_length``; equal ids are equal token blocks across requests."""
    return _records(path, _mooncake_line)


def _mooncake_line(obj: dict, path: Path, line: int, index: int) -> Request:
    n, out = obj.get("input_length"), obj.get("output_length", 0)
    if type(n) is not int or not 1 <= n <= MAX_PROMPT:  # noqa: E721 - the checks' own message otherwise
        n = _int(obj, "input_length", path, line, low=1)
    if type(out) is not int or not 0 <= out <= MAX_PROMPT:  # noqa: E721
        out = _int(obj, "output_length", path, line, required=False)
    ids = obj.get("hash_ids")
    need = -(-n // MOONCAKE_BLOCK)
    if type(ids) is not list or len(ids) != need:  # noqa: E721
        if type(ids) is not list or not _INT.issuperset(map(type, ids)):  # noqa: E721 - bool is no hash id
            raise _bad(path, line, "'hash_ids' must be a list of integers")
        raise _bad(path, line, f"{len(ids)} hash_ids for {n:,} input tokens: {need} expected, one per "
                               f"{MOONCAKE_BLOCK}-token block")
    t = obj.get("timestamp", 0)
    if type(t) is not int and type(t) is not float:  # noqa: E721 - bool is no time
        if isinstance(t, bool) or not isinstance(t, (int, float)):
            raise _bad(path, line, f"'timestamp' must be a number, got {t!r}")
    # a block's id is its run's key (no other key in the trace is an int)
    last = n - MOONCAKE_BLOCK * (need - 1)
    if _native is not None:
        runs = _native.block_runs(ids, MOONCAKE_BLOCK, last)
    elif _INT.issuperset(map(type, ids)):
        runs = (*zip(ids, repeat(MOONCAKE_BLOCK, need - 1)), (ids[-1], last))
    else:
        runs = None
    if runs is None:
        raise _bad(path, line, "'hash_ids' must be a list of integers")
    return Request.of(index, Prompt.of_runs(runs, n), out, float(t), f"line {line}")


def token_lists(path: Path) -> Iterator[Request]:
    """A JSONL of ``{"prompt_token_ids": [...], "output_len": N}`` (``arrival`` optional)."""
    return _records(path, _token_line)


def _token_line(obj: dict, path: Path, line: int, index: int) -> Request:
    ids = obj.get("prompt_token_ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(t, int) and not isinstance(t, bool) and
                                                       t >= 0 for t in ids):
        raise _bad(path, line, "'prompt_token_ids' must be a non-empty list of token ids (integers ≥ 0)")
    if len(ids) > MAX_PROMPT:
        raise _bad(path, line, f"{len(ids):,} prompt tokens: more than {MAX_PROMPT:,}")
    out = _int(obj, "output_len", path, line, required=False)
    t = obj.get("arrival", index)
    if isinstance(t, bool) or not isinstance(t, (int, float)):
        raise _bad(path, line, f"'arrival' must be a number, got {t!r}")
    return Request(index, Prompt(tokens=tuple(ids)), out, float(t), f"line {line}")


# --- synthetic workloads ------------------------------------------------------------------------------

#: arrival orders: every user's turn 1, then every user's turn 2 (round-robin), or one user's turns together
ORDERS = ("round-robin", "user-by-user")


@dataclass(frozen=True)
class Synthetic:
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
    private_extra: tuple[int, ...] = field(default=())

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
            raise PlanError(f"synthetic workload: {self.users * self.turns:,} requests, more than "
                            f"{MAX_REQUESTS:,}")
        if self.shared + self.private + self.group_shared == 0:
            raise PlanError("synthetic workload: every prompt would be empty (give shared or private tokens)")
        extra = max((x for x in self.private_extra if isinstance(x, int)), default=0)
        turns = self.turns if self.history else 1  # the longest prompt: the last turn's, with its extra tokens
        longest = self.shared + self.group_shared + turns * self.private + extra + (turns - 1) * self.output
        if longest > MAX_PROMPT or self.output > MAX_PROMPT:
            raise PlanError(f"synthetic workload: a prompt of {longest:,} tokens and {self.output:,} output "
                            f"tokens; at most {MAX_PROMPT:,} each")

    def requests(self) -> Iterator[Request]:
        pairs = ([(u, t) for t in range(self.turns) for u in range(self.users)] if self.order == "round-robin"
                 else [(u, t) for u in range(self.users) for t in range(self.turns)])
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
            yield Request(i, Prompt(runs=tuple(runs)), self.output, float(i), f"user {u + 1}, turn {t + 1}",
                          output_key=("reply", u, t))


_SYNTH_KEYS = {"shared": "shared", "system_prompt": "shared", "users": "users", "turns": "turns",
               "private": "private", "private_per_turn": "private", "output": "output", "output_tokens": "output",
               "history": "history", "order": "order", "group_size": "group_size", "group_shared": "group_shared"}


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
        raise _bad(path, line, "neither a Mooncake record ('hash_ids') nor a token-id record "
                               "('prompt_token_ids')")
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
