"""SGLang's scheduler loop under `replay` (hybridplan/engines/sglang/scheduler.py): prefill batches under the
chunk budget, the chunked request's state, requests of one batch missing each other, and the client's
concurrency. Each expected figure is derived in a comment from SGLang's code (managers/scheduler.py
``get_next_batch_to_run``, managers/schedule_policy.py ``PrefillAdder.add_one_req``, mem_cache's
``cache_unfinished_req``); validation/replay_sglang.py runs the release's own Scheduler on the same traces
(benchmarks/results/replay-validation-sglang-2026-12-02.md)."""

from __future__ import annotations

import pytest

from hybridplan.engines.sglang import radix_cache as spc
from hybridplan.engines.sglang.scheduler import Scheduled
from hybridplan.replay.loop import Policy, replay
from hybridplan.replay.settings import ReplaySettings
from hybridplan.replay.trace import Synthetic
from hybridplan.scenario import Budget
from tests.helpers import GiB, scenario

pytestmark = pytest.mark.unit

#: 8 users, a 3,000-token system prompt, 400 tokens each, 4 output tokens
SHARED = Synthetic(shared=3000, users=8, private=400, output=4)


def run(radix: str, concurrency: int, chunk: int = 8192, version: str = "0.5.23"):
    sc = scenario("qwen3.5-4b", 32768, sglang_version=version, chunk=chunk, budget=Budget(kv_budget=40 * GiB),
                  sglang=dict(radix=radix, overlap=False))
    r = spc.rules(sc, ReplaySettings())
    runs, ideal = replay([Policy(r.label, Scheduled(r), r.grid, r.max_model_len)], SHARED.requests(), concurrency)
    return [o.reused for o in runs[r.label].outcomes], [o.shared for o in ideal.outcomes], r


def test_no_buffer_one_at_a_time_saves_states_past_the_divergence():
    # one request at a time, each prompt of 3,400 tokens fits one 8,192-token chunk: no_buffer saves the state
    # at 3,400 (its prefill's end) and at 3,403 (its last KV), both past the 3,000 tokens the next one shares
    reused, shared, _ = run("no_buffer", 1)
    assert reused == [0] * 8
    assert shared == [0] + [3000] * 7


def test_no_buffer_eight_in_flight_hit_the_chunked_request_state():
    # all 8 wait at the first step. Batch 1 (budget 8,192): r0 and r1 whole (3,400 each), r2 cut at the
    # 8,192 − 6,800 = 1,392 left and chunked; its chunk's end is cached with its state (cache_unfinished_req,
    # chunked) before batch 2 is formed. Batch 2: r2's 2,008 left, then r3, r4, r5 match the 1,392 and extend
    # 2,008 each (8,032 in all), r6 matches 1,392 and is cut at the 160 left: its state at 1,552. Batch 3:
    # r7 matches 1,552. r1 shares 3,000 with r0 but ran in r0's batch: nothing of r0 was in the tree yet.
    reused, shared, _ = run("no_buffer", 8)
    assert reused == [0, 0, 0, 1392, 1392, 1392, 1392, 1552]
    assert shared[1] == 3000


def test_a_smaller_chunk_moves_the_chunked_state():
    # chunk 4,096, 8 in flight. Batch 1: r0 whole (3,400), r1 cut at the 696 left (state at 696). Batch 2: r1's
    # 2,704 left, r2 matches 696 and is cut at the 1,392 left (state at 2,088). Batch 3: r2's 1,312 left, r3 and
    # r4 match 2,088 and extend 1,312 each, r5 matches 2,088 and is cut at the 160 left (state at 2,248).
    # Batch 4: r5's 1,152 left, r6 and r7 match 2,248.
    reused, _, _ = run("no_buffer", 8, chunk=4096)
    assert reused == [0, 0, 696, 2088, 2088, 2088, 2248, 2248]


def test_concurrency_one_equals_the_one_request_policy():
    # one in flight, chunks start at the hit and end every --chunked-prefill-size tokens: with chunk 1,024,
    # no_buffer saves r0's states at 1,024, 2,048, 3,072 and 3,400; r1 resumes from 2,048 (the last at or before
    # the 3,000 it shares; 3,072 lies in r0's own tokens), and so does every later one
    reused, _, r = run("no_buffer", 1, chunk=1024)
    assert r.chunk == 1024
    assert reused == [0] + [2048] * 7
