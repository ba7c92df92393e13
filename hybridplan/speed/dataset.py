"""A benchmark of a dataset's lengths (``speed --dataset-lengths FILE``): each request its own prompt and output,
priced as the mix it is and aggregated as ``vllm bench serve`` and ``sglang.bench_serving`` aggregate their
figures, rather than as one request of the mean lengths.

The file: JSON Lines (an object a line) or CSV (a header row), each record a request's prompt and output
tokens, under ``input``/``output``, ``input_len``/``output_len``, ``prompt_len``/``output_len``,
``prompt_tokens``/``completion_tokens`` or ``input_tokens``/``output_tokens``. The benchmark sends the records in
the file's order, each once (``--num-prompts`` takes that many, from the top, the file repeated if it is shorter).

What the mix changes against one request of the mean lengths, and how each figure is aggregated:

- the decode step runs the engine's running batch at the context a slot holds on average over its requests'
  lifetimes: a request of output o stays o steps, so the context is Σ o·(i + o/2) / Σ o, not ī + ō/2;
- each prompt's prefill is priced at its own length (attention's cost grows with the square of it, and a long
  prompt is cut into more chunks): TTFT per request, and the mean and median over the requests as the benchmark
  prints them;
- TPOT: every running request emits a token each decode step, and the other running requests' prefills stall
  it, B − 1 of them per request lifetime at the mean prefill and mean output:
  dec / tokens-a-step + (B − 1)·t̄_pf / ō, the same for each request (the benchmark's mean TPOT and mean ITL);
- a request's lifetime is its output at that TPOT plus its own prefill; a slot frees every c̄ / B; the output
  throughput is the total output over the benchmark's duration, B·ō / c̄.

With every record alike the mix is priced as ``hybridplan/speed/bench.py`` prices one length: the benchmark's
queue step by step (hybridplan/speed/queue.py). The steady-state figures above are kept for lengths that differ:
the queue prices every prompt token on the line of the mean prompt's prefill, where the mix prices each prompt at
its own length, attention's square included.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from statistics import median

from msgspec import Struct
from msgspec.structs import replace

from hybridplan.errors import PlanError
from hybridplan.scenario import Scenario
from hybridplan.speed.bench import Bench, Workload, prepare, price, running_cap
from hybridplan.speed.costs import decode_mode, draft_step, mode_notes
from hybridplan.speed.gpus import Datasheet
from hybridplan.speed.model import DEFAULT, Efficiency
from hybridplan.speed.work import decode_step, prefill_step

#: the field names a record's lengths go by, (prompt, output), first found wins
FIELDS = (
    ("input", "output"),
    ("input_len", "output_len"),
    ("prompt_len", "output_len"),
    ("prompt_tokens", "completion_tokens"),
    ("input_tokens", "output_tokens"),
)


def read(path: Path) -> tuple[tuple[int, int], ...]:
    """The (prompt, output) tokens of each record of a JSONL or CSV file; PlanError naming the line at fault."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanError(f"--dataset-lengths: cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    stripped = text.lstrip()
    records: list[tuple[int, dict]] = []
    if stripped.startswith("{"):
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
            except ValueError as exc:
                raise PlanError(f"--dataset-lengths {path}: line {n} is not JSON ({exc.args[0]})") from None
            if not isinstance(doc, dict):
                raise PlanError(f"--dataset-lengths {path}: line {n} is not a JSON object")
            records.append((n, doc))
    else:
        reader = csv.DictReader(io.StringIO(text))
        records = [(n, row) for n, row in enumerate(reader, 2)]
    if not records:
        raise PlanError(f"--dataset-lengths {path}: no records (a JSON object a line, or a CSV with a header)")
    return tuple(_lengths(path, n, doc) for n, doc in records)


def _lengths(path: Path, n: int, doc: dict) -> tuple[int, int]:
    keys = next((k for k in FIELDS if k[0] in doc and k[1] in doc), None)
    if keys is None:
        names = ", ".join(f"{a}/{b}" for a, b in FIELDS)
        raise PlanError(f"--dataset-lengths {path}: line {n} names no prompt and output lengths (one of {names})")
    out = []
    for key in keys:
        value = doc[key]
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = -1.0
        if number != int(number) or int(number) < 1:
            raise PlanError(
                f"--dataset-lengths {path}: line {n}: {key} must be a positive whole number of tokens, got {value!r}"
            )
        out.append(int(number))
    return out[0], out[1]


def requests(lengths: tuple[tuple[int, int], ...], num_prompts: int | None) -> tuple[tuple[int, int], ...]:
    """What the benchmark sends: the records in order, ``num_prompts`` of them (all by default)."""
    n = num_prompts or len(lengths)
    return tuple(lengths[k % len(lengths)] for k in range(n))


def mean_workload(reqs: tuple[tuple[int, int], ...], concurrency: int, acceptance: float | None) -> Workload:
    """The workload of the mix's mean lengths (rounded), sending as many prompts."""
    n = len(reqs)
    return Workload(
        max(1, round(sum(i for i, _ in reqs) / n)),
        max(1, round(sum(o for _, o in reqs) / n)),
        concurrency,
        n,
        acceptance,
    )


class Mix(Struct, frozen=True):
    """A dataset's requests as the benchmark sends them: each one's prompt and output tokens (``lengths``), at
    ``concurrency`` in flight, the first ``num_prompts`` of them, at an acceptance rate where speculative."""

    lengths: tuple[tuple[int, int], ...]
    concurrency: int
    num_prompts: int | None = None
    acceptance: float | None = None
    #: where the lengths came from, as the notes name it
    source: str = "the dataset"


def bench_mix(sc: Scenario, g: Datasheet, mix: Mix, eff: Efficiency = DEFAULT) -> Bench:
    """The benchmark of the mix's requests (module docstring); its ``workload`` is the mix's mean."""
    reqs = requests(mix.lengths, mix.num_prompts)
    n = len(reqs)
    concurrency, source = mix.concurrency, mix.source
    wl = mean_workload(reqs, concurrency, mix.acceptance)
    running, running_from = running_cap(sc, wl)
    if running > n:
        running, running_from = n, f"the workload's {n:,} prompts"
    out_total = sum(o for _, o in reqs)
    mean_out = out_total / n
    ctx = max(1, round(sum(o * (i + o / 2) for i, o in reqs) / out_total))
    decode = decode_step(sc, running, ctx)
    # the decode step's mode (graph coverage, the host's overlap) and draft as bench.prepare decides them
    graphs, overlap = decode_mode(sc, running)
    draft = draft_step(decode, sc) if sc.spec_tokens and mix.acceptance is not None else None
    notes_mode = tuple(mode_notes(sc, running))
    base = prepare(sc, wl)
    if len(set(reqs)) == 1:  # every request alike: the benchmark's own queue (bench.py), step by step
        b = price(base, g, eff)
        return replace(
            b,
            notes=(
                f"{source}: {n:,} requests of {reqs[0][0]:,} prompt and {reqs[0][1]:,} output tokens each",
                *b.notes,
            ),
        )
    # lengths that differ: the steady-state mix below (the queue's step-by-step count is of one length)
    priced: dict[int, Bench] = {}
    for i in sorted({i for i, _ in reqs}):
        p = replace(
            base,
            workload=replace(wl, input=i),
            decode=decode,
            prefill=prefill_step(sc, i),
            graphs=graphs,
            overlap=overlap,
            draft=draft,
            mode_notes=notes_mode,
        )
        priced[i] = price(p, g, eff)
    one = priced[reqs[0][0]]
    t_pf = [priced[i].prefill_s for i, _ in reqs]
    mean_pf = sum(t_pf) / n
    tpot = (one.decode.seconds + (one.draft_s or 0.0)) / one.tokens_per_step + (running - 1) * mean_pf / mean_out
    cycles = [tpot * o + t for (_, o), t in zip(reqs, t_pf)]
    cycle = sum(cycles) / n
    c = min(concurrency, n)
    ttft, waited = [], 0.0
    t_pf_first = [t + eff.ttft_request_us * 1e-6 for t in t_pf]  # a first token's path outside the steps
    for k, t in enumerate(t_pf_first):
        if k < running:  # the first burst: each prompt prefills after the ones before it
            waited += t
            ttft.append(waited)
        elif k < c:  # sent at once, waiting for a slot: one frees every cycle / running
            ttft.append((k - running + 1) * cycle / running + t)
        else:  # sent as one finishes, into the same queue
            ttft.append(max(0, c - running) * cycle / running + t)
    notes = [x for x in one.notes if not x.startswith("--concurrency")]
    notes.insert(
        0,
        f"{source}: {n:,} requests, prompts {min(i for i, _ in reqs):,}–{max(i for i, _ in reqs):,} "
        f"tokens (mean {sum(i for i, _ in reqs) / n:,.1f}), outputs {min(o for _, o in reqs):,}–"
        f"{max(o for _, o in reqs):,} (mean {mean_out:,.1f}); each prompt prefilled at its own "
        f"length, the decode step at the slots' lifetime-weighted context of {ctx:,} tokens",
    )
    if concurrency > n:
        notes.append(
            f"--concurrency {concurrency:,} is more than the dataset's {n:,} requests: at most {n:,} are "
            "in flight at once"
        )
    return Bench(
        wl,
        one.engine,
        running,
        running_from,
        one.decode,
        priced[wl.input].prefill if wl.input in priced else one.prefill,
        mean_pf,
        one.tokens_per_step,
        tpot,
        sum(ttft) / n,
        median(ttft),
        running * mean_out / cycle,
        tuple(notes),
        one.draft_s,
    )
