"""What a serving benchmark prints for a random dataset — ``vllm bench serve`` / ``sglang.bench_serving`` with
``--random-input-len I --random-output-len O --max-concurrency C --num-prompts N`` — from the step times.

The engine runs at most ``B`` requests at once: the concurrency, capped by what the engine admits on the GPU
(vLLM: ``--max-num-seqs`` and the blocks the KV budget holds; SGLang: ``max_running_requests``, for a hybrid
often the state pool), each figure taken from ``hybridplan fit`` for the same scenario. In steady state each
running request decodes O tokens, and while it does the B − 1 others are each replaced once, so B − 1 prompts
are prefilled in its lifetime, between its decode steps:

    TPOT   = t_decode(B, I + O/2) + (B − 1) · t_prefill(I) / O
    output = B · O / (O · TPOT + t_prefill(I)) tokens/s

(each request's lifetime holds its own prefill too).

A request's first token waits for its slot and its prefill: the first B start together and are prefilled one
after another; those beyond B wait for a slot to free (one every (O · TPOT + t_prefill) / B); in steady
state every later one waits behind the C − B queued before it. Mean and median TTFT come from that
per-request list. Speculative decoding with an acceptance rate a and k proposed tokens emits
(1 − a^(k+1)) / (1 − a) tokens a step (the draft's own forward passes are not timed).
"""

from __future__ import annotations

from math import ceil, floor

from msgspec import Struct
from msgspec.structs import replace

from hybridplan.errors import NotServed, PlanError
from hybridplan.scenario import Scenario
from hybridplan.speed.costs import arrival_lag, decode_mode, draft_step, graph_max_batch, mixes_prefill, mode_notes
from hybridplan.speed.gpus import Datasheet
from hybridplan.speed.model import DEFAULT, Efficiency, StepTime, step_time
from hybridplan.speed.queue import Queue, Schedule, schedule
from hybridplan.speed.work import Step, decode_step, mixed_step, prefill_step

#: ``vllm bench serve --num-prompts`` default (vllm/benchmarks/serve.py)
DEFAULT_PROMPTS = 1000


class Workload(Struct, frozen=True):
    input: int
    output: int
    concurrency: int
    num_prompts: int | None = None
    #: speculative decoding: the chance a proposed token is accepted (None: no speculative decoding)
    acceptance: float | None = None
    #: the client's ``--random-range-ratio``: each request's lengths drawn as the engine's benchmark client draws
    #: them around ``input`` and ``output`` (hybridplan/engines/*/client.py); None: every request exactly those
    range_ratio: float | None = None
    #: every request's (prompt, output) tokens in send order, where a dataset gives them (repeated to fill the
    #: prompts); ``input``/``output`` are then their means
    lengths: tuple[tuple[int, int], ...] | None = None

    def __post_init__(self) -> None:
        for value, flag in ((self.input, "--input"), (self.output, "--output"), (self.concurrency, "--concurrency")):
            if value < 1:
                raise PlanError(f"{flag} must be a positive integer, got {value}")
        if self.num_prompts is not None and self.num_prompts < 1:
            raise PlanError(f"--num-prompts must be a positive integer, got {self.num_prompts}")
        if self.acceptance is not None and not 0 <= self.acceptance < 1:
            raise PlanError(f"--acceptance must be in [0, 1), got {self.acceptance}")
        if self.range_ratio is not None and self.range_ratio < 0:
            raise PlanError(f"--random-range-ratio must be 0 or more, got {self.range_ratio:g}")
        if self.lengths is not None and (not self.lengths or min(min(r) for r in self.lengths) < 1):
            raise PlanError("every request needs a prompt and an output of at least one token")

    @property
    def prompts(self) -> int:
        return self.num_prompts or DEFAULT_PROMPTS


def spread(inputs: tuple[int, int], outputs: tuple[int, int], n: int) -> tuple[tuple[int, int], ...]:
    """``n`` requests whose prompts and outputs are uniform over the integers of two ranges, drawn independently,
    as the benchmark clients draw them; stratified rather than random (the (i + ½)/n quantiles of each range, in
    an order shuffled with a fixed seed), so that the means are the ranges' own and a prediction never depends
    on a random draw."""
    import numpy as np

    rng = np.random.default_rng(0)

    def draws(lo: int, hi: int) -> list[int]:
        width = hi - lo + 1
        return [int(x) for x in rng.permutation([lo + min(width - 1, int((i + 0.5) / n * width)) for i in range(n)])]

    return tuple(zip(draws(*inputs), draws(*outputs)))


def requests(wl: Workload, engine: str) -> tuple[tuple[int, int], ...]:
    """Each request's (prompt, output) tokens, in the order the client sends them."""
    n = wl.prompts
    if wl.lengths is not None:
        return tuple(wl.lengths[i % len(wl.lengths)] for i in range(n))
    if wl.range_ratio is None:
        return ((wl.input, wl.output),) * n
    if engine == "sglang":
        from hybridplan.engines.sglang.client import length_range
    else:
        from hybridplan.engines.vllm.client import length_range
    return spread(length_range(wl.input, wl.range_ratio), length_range(wl.output, wl.range_ratio), n)


class Bench(Struct, frozen=True):
    workload: Workload
    engine: str
    running: int
    running_from: str
    decode: StepTime
    prefill: StepTime
    prefill_s: float
    tokens_per_step: float
    tpot_s: float
    mean_ttft_s: float
    median_ttft_s: float
    output_tok_s: float
    notes: tuple[str, ...] = ()
    #: speculative decoding: the draft's forward passes a step (seconds), None without one
    draft_s: float | None = None
    #: the median over requests of each one's TPOT (``tpot_s`` is the mean)
    median_tpot_s: float | None = None
    #: what one prompt's prefill adds to the running requests' time in a loaded engine: vLLM, its tokens' share
    #: of mixed steps (``mixed``, the step at the running batch carrying a chunk of prompt tokens); SGLang, its
    #: prefill batch, which the running requests wait for, the host's part hidden by the overlap scheduler
    loaded_prefill_s: float | None = None
    mixed: StepTime | None = None

    def to_dict(self) -> dict:
        return {
            "input": self.workload.input,
            "output": self.workload.output,
            "concurrency": self.workload.concurrency,
            "num_prompts": self.workload.prompts,
            "engine": self.engine,
            "running": self.running,
            "running_from": self.running_from,
            "output_tok_s": self.output_tok_s,
            "mean_ttft_ms": self.mean_ttft_s * 1e3,
            "median_ttft_ms": self.median_ttft_s * 1e3,
            "mean_tpot_ms": self.tpot_s * 1e3,
            "mean_itl_ms": self.tpot_s * 1e3,
            "tokens_per_step": self.tokens_per_step,
            "decode_step_ms": self.decode.seconds * 1e3,
            "prefill_ms": self.prefill_s * 1e3,
            "draft_ms": None if self.draft_s is None else self.draft_s * 1e3,
            "median_tpot_ms": (self.median_tpot_s if self.median_tpot_s is not None else self.tpot_s) * 1e3,
            "loaded_prefill_ms": None if self.loaded_prefill_s is None else self.loaded_prefill_s * 1e3,
            "mixed_step_ms": None if self.mixed is None else self.mixed.seconds * 1e3,
            "decode_host_ms": self.decode.host_s * 1e3,
            "decode_host_overlapped": self.decode.overlap,
            "notes": list(self.notes),
        }


def running_cap(sc: Scenario, wl: Workload) -> tuple[int, str]:
    """The requests the engine runs at once for this workload, and where the figure comes from."""
    b = sc.budget
    if b.kv_budget is None and b.gpu_mem is None:
        return wl.concurrency, "the concurrency (no GPU memory given: nothing caps it)"
    from hybridplan import engines

    fit_sc = replace(sc, ctx=wl.input + wl.output)
    name = "sglang" if sc.engine == "sglang" else "vllm"
    try:
        fitted = engines.get(name).fit(fit_sc)
    except NotServed as exc:  # SGLang's pools are sized for hybrids only
        return wl.concurrency, f"the concurrency ({exc})"
    if not fitted.starts:
        raise PlanError(f"{name} will not start with these settings: {fitted.problem} (hybridplan fit shows why)")
    part = fitted.to_dict()
    if name == "sglang":
        cap = int(part["max_running_requests"])
        if cap < 1:
            raise PlanError(
                f"SGLang runs no request of {wl.input + wl.output:,} tokens on this GPU "
                "(hybridplan fit shows the memory split)"
            )
        return min(wl.concurrency, cap), f"SGLang max_running_requests {cap} (hybridplan fit)"
    mode = part["modes"][sc.vllm.mode or part["default_mode"]]
    cap = min(int(mode["max_num_seqs"]), floor(mode["max_concurrency"]))
    if cap < 1:
        raise PlanError(
            f"vLLM's KV blocks do not hold one request of {wl.input + wl.output:,} tokens on this GPU "
            f"({mode['max_concurrency']:.2f}x; hybridplan fit shows the budget)"
        )
    return min(wl.concurrency, cap), (
        f"vLLM: max_num_seqs {mode['max_num_seqs']}, blocks for "
        f"{floor(mode['max_concurrency'])} requests (hybridplan fit)"
    )


def prefill_chunk(sc: Scenario) -> int:
    """The prefill chunk of the engine benchmarked: given, else its default for the GPU and release."""
    if sc.engine == "sglang":
        from hybridplan.engines.sglang.defaults import chunk

        return chunk(sc)
    from hybridplan.engines.vllm.defaults import batched_tokens

    return batched_tokens(sc)


def prefill_chunk_note(sc: Scenario) -> str | None:
    """Which chunk the prefill was cut into, where the engine's default gave it."""
    if sc.chunk is not None:
        return None
    if sc.engine == "sglang":
        from hybridplan.engines.sglang.defaults import note

        return note(sc)
    from hybridplan.engines.vllm.defaults import note as vllm_note

    return vllm_note(sc)


def _prefill_seconds(sc: Scenario, st: StepTime, eff: Efficiency, tokens: int) -> float:
    """The prefill's time in chunks of the scenario's ``--max-num-batched-tokens``: the work of the whole prompt
    (``st``, its host time for one chunk of all its tokens included), and each further chunk's fixed host time."""
    return st.seconds + (ceil(tokens / prefill_chunk(sc)) - 1) * eff.prefill_step_us * 1e-6


def prefill_time(sc: Scenario, g: Datasheet, eff: Efficiency, tokens: int) -> tuple[StepTime, float]:
    """One prompt's prefill, in chunks of the scenario's ``--max-num-batched-tokens``: eager (a host launch per
    kernel), the host's time for the prompt's tokens added (a prefill is not overlapped)."""
    st = step_time(prefill_step(sc, tokens), g, eff, tp=sc.tp, graphs=False)
    return st, _prefill_seconds(sc, st, eff, tokens)


class Prepared(Struct, frozen=True):
    """What a benchmark's figures need that no efficiency changes: the running batch (from ``fit``), the work of
    its decode step, of one prompt's prefill and of a step carrying both, and the benchmark's queue counted step
    by step (hybridplan/speed/queue.py). ``price`` times it at an ``Efficiency``, so a fit can try many
    efficiencies on one scenario without sizing the engine or running the queue again."""

    sc: Scenario
    workload: Workload
    running: int
    running_from: str
    decode: Step
    prefill: Step
    graphs: bool
    #: whether the engine's host time for a decode step overlaps the GPU's
    overlap: bool = False
    #: one draft forward pass (speculative decoding), None without one
    draft: Step | None = None
    mode_notes: tuple[str, ...] = ()
    #: the decode step of one request (a decode step's time grows with its batch, from this to ``decode``'s)
    decode_one: Step | None = None
    #: vLLM: the decode step at the running batch carrying ``mixed_tokens`` prompt tokens (work.py ``mixed_step``)
    mixed: Step | None = None
    mixed_tokens: int = 0
    mixed_graphs: bool = False
    #: tokens a decode step emits per request (speculative decoding: more than one)
    per_step: float = 1.0
    queue: Schedule | None = None
    #: a prefill step of one prompt's chunk (the mean prompt, at most the budget) and of the mean batch of such
    #: chunks the queue's prefill steps carried: the line through the two is a step's fixed part and its part per
    #: prompt token
    chunk: Step | None = None
    batch: Step | None = None
    #: each request's prompt and output tokens, in send order
    prompts: tuple[int, ...] = ()
    outputs: tuple[int, ...] = ()


def _per_step(sc: Scenario, wl: Workload) -> float:
    k = sc.spec_tokens
    if k and wl.acceptance is not None:
        a = wl.acceptance
        return (1 - a ** (k + 1)) / (1 - a)
    return 1.0


def prepare(sc: Scenario, wl: Workload) -> Prepared:
    reqs = requests(wl, "sglang" if sc.engine == "sglang" else "vllm")
    ins, outs = tuple(i for i, _ in reqs), tuple(o for _, o in reqs)
    mean_in = max(1, round(sum(ins) / len(ins)))
    running, running_from = running_cap(sc, wl)
    if running > wl.prompts:  # the benchmark sends no more than its prompts, however many it may keep in flight
        running, running_from = wl.prompts, f"the workload's {wl.prompts:,} prompts"
    # the context a slot holds on average: a request of output o stays o steps, at i + o/2 on average
    ctx = sum(o * i + o * (o // 2) for i, o in reqs) // sum(outs)
    dec = decode_step(sc, running, ctx)
    one = dec if running == 1 else decode_step(sc, 1, ctx)
    graphs, overlap = decode_mode(sc, running)
    draft = draft_step(dec, sc) if sc.spec_tokens and wl.acceptance is not None else None
    pf = prefill_step(sc, mean_in)
    budget = prefill_chunk(sc)
    mixed, why = mixes_prefill(sc)
    mixed_st, mixed_tokens, mixed_graphs = None, 0, False
    if mixed:
        # the prompt tokens a loaded step carries: what the budget leaves after the running decodes, at most a prompt
        mixed_tokens = max(1, min(mean_in, budget - running))
        mixed_st = mixed_step(dec, pf, mixed_tokens)
        mixed_graphs = graphs and running + mixed_tokens <= graph_max_batch(sc)
    per_step = _per_step(sc, wl)
    q = schedule(
        Queue(
            mixed=mixed,
            concurrency=wl.concurrency,
            running=running,
            prompts=ins,
            rounds=tuple(ceil((o - 1) / per_step) if o > 1 else 0 for o in outs),
            budget=budget,
            lag=arrival_lag(sc),
        )
    )
    chunk = min(mean_in, budget)
    per = q.prompt_tokens_per_step()
    batch = max(2, round(per / chunk)) if per else 2
    return Prepared(
        sc,
        wl,
        running,
        running_from,
        dec,
        pf,
        graphs,
        overlap,
        draft,
        (*mode_notes(sc, running), why),
        one,
        mixed_st,
        mixed_tokens,
        mixed_graphs,
        per_step,
        q,
        prefill_step(sc, chunk),
        prefill_step(sc, chunk, batch),
        ins,
        outs,
    )


def loaded_prefill(st: StepTime, seconds: float, overlap: bool) -> float:
    """One prompt's prefill (``seconds``: its GPU work and its host time, every chunk's) while the engine is busy:
    where the engine overlaps its host with the GPU the host's time shows only past the GPU's."""
    host = seconds - (st.seconds - st.host_s)
    gpu = st.seconds - st.host_s
    return gpu + (max(0.0, host - gpu) if overlap else host)


def prefill_line(
    chunk: StepTime, batch: StepTime, whole_s: float, prompt: int, chunks: int, overlap: bool | None
) -> tuple[float, float]:
    """A prefill step's (fixed seconds, seconds per prompt token): the line through a step of one prompt's chunk
    (``chunk``) and a step of several (``batch``), each as it runs alone (``overlap`` None) or while requests wait
    (its host hidden where ``overlap``). Per token, at least what makes one prompt alone cost its prefill as one
    pass (``whole_s``: attention over the whole prompt, not chunk by chunk from an empty context)."""

    def t(st: StepTime) -> float:
        return st.seconds if overlap is None else loaded_prefill(st, st.seconds, overlap)

    tokens = chunk.step.tokens
    extra = batch.step.tokens - tokens
    slope = max(0.0, (t(batch) - t(chunk)) / extra) if extra > 0 else 0.0
    fixed = max(0.0, t(chunk) - slope * tokens)
    slope += max(0.0, whole_s - (chunks * fixed + slope * prompt)) / prompt
    return fixed, slope


def price(p: Prepared, g: Datasheet, eff: Efficiency = DEFAULT) -> Bench:
    """The benchmark's figures at ``eff``: each request's TTFT and TPOT from its queue counts (queue.py) times the
    step's costs: a decode step of b requests (from one request's to the running batch's, linear in b), a prompt
    token in a loaded step (vLLM: its share of the mixed step beyond the decode step; SGLang: its prefill batch,
    host hidden where overlapped), a prompt token alone, and each prefill step's fixed part (loaded and alone)."""
    import numpy as np

    sc, wl, running, running_from = p.sc, p.workload, p.running, p.running_from
    dec = step_time(p.decode, g, eff, tp=sc.tp, graphs=p.graphs, overlap=p.overlap)
    one = dec if p.decode_one is None or p.decode_one is p.decode else None
    if one is None:
        one = step_time(p.decode_one, g, eff, tp=sc.tp, graphs=graph_max_batch(sc) >= 1, overlap=p.overlap)
    prompt = p.prefill.tokens
    pf = step_time(p.prefill, g, eff, tp=sc.tp, graphs=False)
    t_pf = _prefill_seconds(sc, pf, eff, prompt)
    k = sc.spec_tokens
    notes: list[str] = list(filter(None, [prefill_chunk_note(sc)])) + list(p.mode_notes)
    if wl.range_ratio is not None and wl.lengths is None and (min(p.prompts), min(p.outputs)) != (wl.input, wl.output):
        client = "sglang.bench_serving" if sc.engine == "sglang" else "vllm bench serve"
        notes.append(
            f"{client} --random-range-ratio {wl.range_ratio:g}: prompts of {min(p.prompts):,}-{max(p.prompts):,} "
            "tokens "
            f"(mean {prompt:,}), outputs of {min(p.outputs):,}-{max(p.outputs):,} "
            f"(mean {sum(p.outputs) / len(p.outputs):,.0f}), drawn as the client draws them"
        )
    per_step = p.per_step
    draft_s = None
    if k and wl.acceptance is not None:
        a = wl.acceptance
        draft_s = k * step_time(p.draft, g, eff, tp=sc.tp, graphs=p.graphs).seconds
        notes.append(
            f"speculative: {k} proposed tokens a step at acceptance {a:g}: {per_step:.2f} tokens a step; "
            f"the draft's {k} forward passes take {draft_s * 1e3:.3f} ms a step (one decoder block of "
            "the target's shape, its LM head and sampler each)"
        )
    elif k:
        notes.append(
            f"--spec-tokens {k} without --acceptance: every step verifies {k + 1} tokens a request but "
            "only one is counted as emitted"
        )
    t1 = one.seconds + (draft_s or 0.0)
    tb = dec.seconds + (draft_s or 0.0)
    grow = (tb - t1) / (running - 1) if running > 1 else 0.0
    chunks = ceil(prompt / prefill_chunk(sc))
    chunk = step_time(p.chunk or p.prefill, g, eff, tp=sc.tp, graphs=False)
    batch = step_time(p.batch or p.prefill, g, eff, tp=sc.tp, graphs=False)
    alone_step, alone_token = prefill_line(chunk, batch, t_pf, prompt, chunks, None)
    mixed = None
    if p.mixed is not None:
        mixed = step_time(p.mixed, g, eff, tp=sc.tp, graphs=p.mixed_graphs, overlap=p.overlap)
        loaded_step, loaded_token = 0.0, max(0.0, mixed.seconds - dec.seconds) / p.mixed_tokens
        loaded_s = loaded_token * prompt
    else:
        whole = loaded_prefill(pf, t_pf, p.overlap)
        loaded_step, loaded_token = prefill_line(chunk, batch, whole, prompt, chunks, p.overlap)
        loaded_s = whole
    cost = np.array([t1, grow, loaded_token, alone_token, loaded_step, alone_step])
    q = p.queue
    ttft = np.asarray(q.ttft, dtype=float) @ cost + eff.ttft_request_us * 1e-6
    if eff.ttft_request_us:
        notes.append(
            f"each first token adds {eff.ttft_request_us / 1e3:,.1f} ms of the request's path outside the engine's "
            "steps (receiving and tokenizing it, streaming the token back; fitted)"
        )
    life = np.asarray(q.decode, dtype=float) @ cost
    outs = np.asarray(p.outputs or (wl.output,) * len(life), dtype=float)
    long = outs > 1
    tpots = life[long] / (outs[long] - 1) if long.any() else np.zeros(1)
    duration = float(np.asarray(q.total, dtype=float) @ cost)
    n, c = wl.prompts, min(wl.concurrency, wl.prompts)
    if wl.concurrency > n:
        notes.append(
            f"--concurrency {wl.concurrency:,} is more than the workload's {n:,} prompts: at most {n:,} "
            "are in flight at once (vllm bench serve sends each prompt once)"
        )
    if running < c:
        notes.append(f"{c - running:,} of the {c:,} concurrent requests wait for a slot: {running_from}")
    return Bench(
        wl,
        sc.engine if sc.engine != "both" else "vllm",
        running,
        running_from,
        dec,
        pf,
        t_pf,
        per_step,
        float(tpots.mean()),
        float(ttft.mean()),
        float(np.median(ttft)),
        float(outs.sum()) / duration if duration > 0 else 0.0,
        tuple(notes),
        draft_s,
        float(np.median(tpots)),
        loaded_s,
        mixed,
    )


def bench(sc: Scenario, g: Datasheet, wl: Workload, eff: Efficiency = DEFAULT) -> Bench:
    return price(prepare(sc, wl), g, eff)
