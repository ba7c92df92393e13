"""The benchmark's queue, step by step: what ``vllm bench serve`` / ``sglang.bench_serving`` send with
``--request-rate inf --max-concurrency C --num-prompts N`` and how the engine's scheduler takes it in. Pure, and
independent of any efficiency: it counts, per request, the steps and the prompt tokens between its send and its
first token and between its first token and its last, so that a price (``bench.price``) is one dot product per
request with the step's costs.

The client (vllm/benchmarks/serve.py ``benchmark``, sglang/bench_serving.py ``benchmark``): every request is
ready at once (rate inf) and a semaphore keeps C in flight; a request is sent when one finishes. Each request's
TTFT runs from its send to its first token, its TPOT is (latency − TTFT) / (output − 1) (both tools compute it per
request, then the mean and the median over requests), and the output throughput is the output tokens over the
run's duration.

The engine admits at most B requests (``running_cap``) and takes at most ``budget`` prompt tokens a step
(vLLM's ``--max-num-batched-tokens``, SGLang's ``--chunked-prefill-size``), a longer prompt in chunks, prompts in
arrival order:

- vLLM (vllm/v1/core/sched/scheduler.py ``Scheduler.schedule``, every V1 release): each step first gives each
  running request its decode token, then fills what is left of the budget with waiting prompts' tokens, so a
  step carries the decodes and the prompt tokens together (``mixed``);
- SGLang (sglang/srt/managers/scheduler.py ``get_next_batch_to_run``; mixing only with ``--enable-mixed-chunk``,
  off by default): a prefill batch runs whenever a waiting request can be admitted, alone, and the running
  requests decode in the steps between.

A request that finishes at the end of step k frees its slot and the client sends the next one; where the
engine overlaps its host with the GPU (vLLM's async scheduling, SGLang's overlap scheduler) step k + 1 was
already scheduled, so the new prompt joins step k + 2 (``lag`` 1); an idle engine takes it at once.

Each request has its own prompt and output (the random dataset's ``--random-range-ratio`` draws, or a dataset's
records): requests of unequal lengths finish at different steps, so their successors arrive spread out and
are prefilled a few at a time, where requests all alike arrive in waves.

The counts are six per interval: steps that decode (S), the decode batch above one summed over them (Bs, for a
decode step's time growing with its batch), prompt tokens in steps that also decode or wait on running decodes
(P, "loaded"), prompt tokens in steps with nothing else running (Q, "alone"), and the prefill steps of each
kind (Ps: SGLang's prefill batches while requests wait to decode; vLLM's loaded prompt tokens ride a decode step
and add no step; Qs: steps with prompt tokens alone). A prefill step's time is a fixed part (its weights read,
its kernels launched, its host's step) and a part per token, so a batch of prompts costs less than each apart.
"""

from __future__ import annotations

import heapq
from collections import deque

from msgspec import Struct

#: one interval's counts: steps that decode, their batch above one summed, prompt tokens loaded, prompt tokens
#: alone, prefill steps loaded, prefill steps alone
Counts = tuple[float, float, float, float, float, float]


class Schedule(Struct, frozen=True):
    """Per request, in the order the client sends them: the counts from its send to its first token (``ttft``)
    and from its first token to its last (``decode``); and the whole run's (``total``)."""

    ttft: tuple[Counts, ...]
    decode: tuple[Counts, ...]
    total: Counts
    #: whether a step carries decodes and prompt tokens together (vLLM) or runs a prefill batch apart (SGLang)
    mixed: bool

    def prompt_tokens_per_step(self) -> float:
        """The mean prompt tokens a prefill step carries over the run (vLLM: its steps with prompt tokens alone;
        SGLang: every prefill batch); 0 where no step was counted."""
        t = self.total
        steps = t[5] if self.mixed else t[4] + t[5]
        tokens = t[3] if self.mixed else t[2] + t[3]
        return tokens / steps if steps else 0.0


def _sub(a: list[float], b: list[float]) -> Counts:
    return (a[0] - b[0], a[1] - b[1], a[2] - b[2], a[3] - b[3], a[4] - b[4], a[5] - b[5])


class Queue(Struct, frozen=True):
    """The benchmark's queue: each request's ``prompts`` tokens and the ``rounds`` it decodes after its first
    token, in send order; ``concurrency`` in flight, ``running`` admitted at most, ``budget`` prompt tokens a
    step; ``mixed``: the engine's steps carry decodes and prompt tokens together; ``lag``: the steps an arriving
    prompt waits on a busy engine."""

    mixed: bool
    concurrency: int
    running: int
    prompts: tuple[int, ...]
    rounds: tuple[int, ...]
    budget: int
    lag: int

    @classmethod
    def alike(cls, n: int, prompt: int, rounds: int, **kw) -> Queue:
        """``n`` requests of one prompt length and one decode length."""
        return cls(prompts=(prompt,) * n, rounds=(rounds,) * n, **kw)


def schedule(q: Queue) -> Schedule:
    """Run the benchmark's queue."""
    mixed, concurrency, running, budget, lag = q.mixed, q.concurrency, q.running, q.budget, q.lag
    prompts = len(q.prompts)
    if len(q.rounds) != prompts:
        raise ValueError("the queue needs a decode length for each prompt")
    if min(prompts, concurrency, running, budget, *q.prompts) < 1 or min(q.rounds) < 0 or lag < 0:
        raise ValueError("the queue needs positive counts")
    acc = [0.0] * 6
    k = 0  # steps run
    rnd = 0  # decode rounds run
    sent = done = 0
    send: list[list[float]] = []
    first: list[list[float] | None] = [None] * prompts
    fin: list[list[float] | None] = [None] * prompts
    waiting: deque[tuple[int, int]] = deque()  # (request, the step it may join)
    filling: deque[list[int]] = deque()  # [request, prompt tokens left], admitted
    decoding: list[tuple[int, int]] = []  # heap of (the round it finishes at, request)

    def send_next(ready: int) -> None:
        nonlocal sent
        if sent < prompts:
            send.append(list(acc))
            waiting.append((sent, ready))
            sent += 1

    def finish(r: int) -> None:
        nonlocal done
        fin[r] = list(acc)
        done += 1
        send_next(k + lag)

    def finish_due() -> None:
        while decoding and decoding[0][0] <= rnd:
            finish(heapq.heappop(decoding)[1])

    for _ in range(min(concurrency, prompts)):
        send_next(0)
    while done < prompts:
        idle = not (decoding or filling)  # an idle engine takes what has arrived at once
        while waiting and len(filling) + len(decoding) < running and (waiting[0][1] <= k or idle):
            r = waiting.popleft()[0]
            filling.append([r, q.prompts[r]])
        nd = len(decoding)
        if filling:
            # a step with prompt tokens: vLLM's carries the running decodes too (their tokens first in the budget),
            # SGLang's is a prefill batch alone
            left = budget - nd if mixed else budget
            left = max(left, 1)
            toks = 0
            for req in filling:
                if left <= 0:
                    break
                t = min(req[1], left)
                req[1] -= t
                left -= t
                toks += t
            decodes = mixed and nd > 0
            if decodes:
                acc[0] += 1
                acc[1] += nd - 1
                acc[2] += toks
            elif nd:  # SGLang: a prefill batch the running requests wait for
                acc[2] += toks
                acc[4] += 1
            else:
                acc[3] += toks
                acc[5] += 1
            k += 1
            if decodes:
                rnd += 1
                finish_due()
            while filling and filling[0][1] == 0:
                r = filling.popleft()[0]
                first[r] = list(acc)
                if q.rounds[r] == 0:
                    finish(r)
                else:
                    heapq.heappush(decoding, (rnd + q.rounds[r], r))
            continue
        if not decoding:  # nothing admitted, nothing running: the waiting ones are admitted at the next pass
            continue
        # decode steps only, up to the next event: a request finishing, or a waiting one allowed in
        n = decoding[0][0] - rnd
        if waiting and len(decoding) < running and waiting[0][1] > k:
            n = min(n, waiting[0][1] - k)
        n = max(n, 1)
        acc[0] += n
        acc[1] += n * (nd - 1)
        k += n
        rnd += n
        finish_due()
    ttft = tuple(_sub(first[i], send[i]) for i in range(prompts))
    dec = tuple(_sub(fin[i], first[i]) for i in range(prompts))
    return Schedule(ttft, dec, (acc[0], acc[1], acc[2], acc[3], acc[4], acc[5]), mixed)
