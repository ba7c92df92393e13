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
    sc = scenario(
        "qwen3.5-4b",
        32768,
        sglang_version=version,
        chunk=chunk,
        budget=Budget(kv_budget=40 * GiB),
        sglang=dict(radix=radix, overlap=False),
    )
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


def test_to_0_5_12_a_long_prompt_waits_for_the_next_batch():
    # prompts of 15,000 tokens (3,000 shared), one output token, 4 in flight, chunk 8,192. 0.5.23: batch 1 cuts
    # r0 at 8,192; batch 2 ends r0 (6,808) and cuts r1 at the 1,384 left (its state at 1,384, on the shared
    # prompt); batch 3 takes r1 on to 9,576; batch 4 ends it (5,424) and r2, matching 1,384, is cut at the
    # 2,768 left; batch 6 ends r2 and r3 matches 1,384 too. 0.5.9: in batch 2 r1's whole 15,000 reach the
    # 16,384 − 6,808 left of --max-prefill-tokens, so the batch ends (schedule_policy.py add_one_req,
    # real_input_tokens >= rem_input_tokens); every request then starts alone, its first state at 8,192, past
    # the 3,000 they share
    work = Synthetic(shared=3000, users=4, private=12000, output=1)

    def reuse(version):
        return overlap_run(work, "no_buffer", False, concurrency=4, version=version)[0]

    assert reuse("0.5.23") == [0, 0, 1384, 1384]
    assert reuse("0.5.9") == [0, 0, 0, 0]


def test_extra_buffer_decode_tracks_only_past_the_prompt():
    # the three-user conversation (1,000 shared, 700 a turn, 8 output tokens), one in flight, extra_buffer,
    # grid 64. r1 (user 2, turn 1) matches r0's KV over the system prompt to 960 (⌊1,000/64⌋·64), its
    # branching point, where it keeps its state; its decode goes from 1,700 to 1,707 tokens and reaches no
    # multiple of 256 (schedule_batch.py prepare_for_decode tracks seq_len % 256 == 0), so no other state.
    # r4 (user 2, turn 2) holds r1's 1,708 tokens and resumes from 960 (SGLang 0.5.9's own Scheduler reuses
    # 960 there: benchmarks/results/replay-validation-sglang-2026-12-02.md)
    sc = scenario(
        "qwen3.5-4b",
        32768,
        sglang_version="0.5.23",
        chunk=8192,
        budget=Budget(kv_budget=40 * GiB),
        sglang=dict(radix="extra_buffer", overlap=False),
    )
    r = spc.rules(sc, ReplaySettings())
    work = Synthetic(shared=1000, users=3, turns=3, private=700, output=8, order="round-robin")
    for cache in (Scheduled(r), spc.Cache(r)):
        runs, _ = replay([Policy(r.label, cache, r.grid, r.max_model_len)], work.requests(), 1)
        assert runs[r.label].outcomes[4].reused == 960


def test_a_refused_prompt_takes_one_token_of_the_batch():
    # context 8,192, chunk 8,192, 5 in flight: r1's 9,000 tokens are refused, but SGLang queues it with its
    # prompt set to one token (schedule_batch.py set_finish_with_abort, "to skip the long prefill"). Batch 1:
    # r0 whole (3,400), r1's one token, r2 whole (3,400), r3 cut at the 8,192 − 6,801 = 1,391 left. Batch 2:
    # r3's rest, r4 matches r3's state at 1,391 (1,392 if the refused request took nothing).
    from hybridplan.replay.trace import Prompt, Request

    shared = tuple(range(1, 3001))

    def req(i, toks):
        return Request(i, Prompt(tokens=toks), 1, float(i), f"request {i}")

    own = [tuple(range(10_000 * (i + 1), 10_000 * (i + 1) + 400)) for i in range(5)]
    reqs = [
        req(0, shared + own[0]),
        req(1, tuple(range(100_000, 109_000))),
        req(2, shared + own[2]),
        req(3, shared + own[3]),
        req(4, shared + own[4]),
    ]
    sc = scenario(
        "qwen3.5-4b",
        8192,
        sglang_version="0.5.23",
        chunk=8192,
        budget=Budget(kv_budget=40 * GiB),
        sglang=dict(radix="no_buffer", overlap=False),
    )
    r = spc.rules(sc, ReplaySettings())
    runs, _ = replay([Policy(r.label, Scheduled(r), r.grid, r.max_model_len)], reqs, 5)
    out = runs[r.label].outcomes
    assert [o.reason for o in out][1] == "refused"
    assert [o.reused for o in out] == [0, 0, 0, 0, 1391]


def overlap_run(work, radix: str, overlap: bool, concurrency: int = 8, version: str = "0.5.23"):
    sc = scenario(
        "qwen3.5-4b",
        32768,
        sglang_version=version,
        chunk=8192,
        budget=Budget(kv_budget=40 * GiB),
        sglang=dict(radix=radix, overlap=overlap),
    )
    r = spc.rules(sc, ReplaySettings())
    runs, _ = replay([Policy(r.label, Scheduled(r), r.grid, r.max_model_len)], work.requests(), concurrency)
    return [o.reused for o in runs[r.label].outcomes], r


def test_the_overlap_scheduler_matches_the_next_batch_before_the_last_is_cached():
    # extra_buffer, grid 64, 8 in flight, chunk 8,192. Batch 1: r0 and r1 whole (3,400 each), r2 cut at 1,392
    # (its state at ⌊1,392/64⌋·64 = 1,344). event_loop_normal processes batch 1 first: r0's and r1's prompts
    # enter the tree (states at 3,392, past the 3,000 shared), then r2's chunk (get_next_batch_to_run's
    # stash_chunked_request). Batch 2: r3-r6 match r2's 1,344; the 3,000 they share with r0 ends inside r0's
    # node, so each keeps its state at that branching point, ⌊3,000/64⌋·64 = 2,944; r6 is cut. Batch 3: r7
    # matches 2,944. event_loop_overlap (SGLang 0.5.9-0.5.23 managers/scheduler.py) forms batch 2 before it
    # processes batch 1 (pop_and_process after run_batch): the tree holds r2's chunk alone, no node branches
    # inside the shared prompt, and batch 3 is formed before batch 2's r3-r5 are cached: every one matches
    # 1,344. SGLang 0.5.23's own Scheduler driven so (validation/replay_sglang.py --overlap, Qwen3-Next
    # shared-prefix c8) reuses 6,720 = 5 × 1,344.
    normal, r = overlap_run(SHARED, "extra_buffer", False)
    assert not r.overlap
    assert normal == [0, 0, 0, 1344, 1344, 1344, 1344, 2944]
    lagged, r = overlap_run(SHARED, "extra_buffer", True)
    assert r.overlap
    assert lagged == [0, 0, 0, 1344, 1344, 1344, 1344, 1344]


def test_the_overlap_scheduler_one_at_a_time_changes_nothing():
    # one in flight, the next request is sent once the last has finished, i.e. once its result is processed:
    # the tree it is matched against is the same under either loop
    conversation = Synthetic(shared=1000, users=3, turns=3, private=700, output=8, order="round-robin")
    for work in (SHARED, conversation):
        assert overlap_run(work, "extra_buffer", True, 1)[0] == overlap_run(work, "extra_buffer", False, 1)[0]


def test_the_overlap_scheduler_on_the_conversation():
    # the three-user conversation at 8 in flight: SGLang 0.5.23's own Scheduler under event_loop_overlap
    # (validation/replay_sglang.py --overlap, Qwen3-Next conversation c8, grid 64 as here) reuses 4,288 tokens
    # in all, 3 × 640 + 2,368, where SGLang 0.5.16-0.5.18's own Scheduler under event_loop_normal reuses 8,064
    # (benchmarks/results/replay-validation-sglang-2026-12-02b.md)
    conversation = Synthetic(shared=1000, users=3, turns=3, private=700, output=8, order="round-robin")
    lagged, _ = overlap_run(conversation, "extra_buffer", True)
    normal, _ = overlap_run(conversation, "extra_buffer", False)
    assert sum(lagged) == 4288
    assert sum(normal) == 8064


def test_no_buffer_runs_without_the_overlap_scheduler():
    # SGLang 0.5.9-0.5.13 turn the overlap scheduler off for no_buffer (server_args.py "Disabling overlap
    # schedule since mamba no_buffer is not compatible with overlap schedule"); 0.5.14-0.5.23 refuse it
    # (releases.py): no_buffer's reuse is event_loop_normal's
    reused, r = overlap_run(SHARED, "no_buffer", True, version="0.5.9")
    assert not r.overlap
    assert reused == overlap_run(SHARED, "no_buffer", False, version="0.5.9")[0]
