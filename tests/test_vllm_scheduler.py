"""vLLM's scheduler loop under `replay` (hybridplan/engines/vllm/scheduler.py): the step's shared token budget,
running requests first, align's block-floored chunks with the budget left, the junction per release, and what a
lookup sees of the requests still running. The figures come from vLLM's own run (validation/replay_vllm.py,
benchmarks/results/replay-validation-vllm-2026-12-02.md) or are derived step by step from
vllm/v1/core/sched/scheduler.py ``schedule`` / ``_mamba_block_aligned_split`` in the comments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hybridplan.engines.vllm import prefix_cache as vpc
from hybridplan.engines.vllm.scheduler import Scheduled
from hybridplan.replay.loop import Policy, replay
from hybridplan.replay.settings import ReplaySettings
from hybridplan.replay.trace import Prompt, Request, Synthetic, mooncake
from tests.helpers import GiB, scenario

pytestmark = pytest.mark.unit

MOONCAKE = Path(__file__).resolve().parent / "data" / "traces" / "mooncake-conversation-300.jsonl"


def qwen3_next(version: str):
    """Qwen3-Next-80B-A3B at TP 4, align, --max-model-len 131072, --max-num-batched-tokens 8192, 40 GiB a GPU
    (validation/replay_vllm.py's roomy case): block 272."""
    sc = scenario("qwen3-next-80b-a3b", 131072, minor=version, tp=4, chunk=8192)
    r = vpc.rules(sc, ReplaySettings(), "align", 40 * GiB)
    assert r.block == 272 and r.chunk == 8192
    return r


def run(r, reqs, concurrency):
    cache = Scheduled(r)
    cache.record = True
    runs, _ = replay([Policy(r.label, cache, r.block, r.max_model_len)], reqs, concurrency)
    return [o.reused for o in runs[r.label].outcomes], cache.chunks


def three_users():
    """validation/replay_vllm.py's prefix-10000-5000: three prompts of 10,000 shared + 5,000 own tokens, one
    output token each."""
    return list(Synthetic(shared=10000, users=3, private=5000, output=1).requests())


def test_worked_case_0_24_as_vllm_ran_it():
    # vLLM 0.24.0's own run (benchmarks/results/replay-validation-vllm-2026-12-02.md, "A worked case", recorded by
    # validation/replay_vllm.py from the release's Scheduler): request 2 reuses 9,520 tokens and its prompt is
    # scheduled in chunks of 272, 5,168 and 40 tokens.
    reused, chunks = run(qwen3_next("0.24.0"), three_users(), 8)
    assert reused[2] == 9520
    assert chunks[2] == [272, 5168, 40]
    # the steps before it, from scheduler.py: step 1 gives request 0 8,160 (8,192 floored to the block), leaving
    # 32, too few for a block of request 1; step 2 request 0 runs to 14,960 (the last block boundary, 6,800) and
    # request 1, hitting request 0's state at 8,160, gets 1,392 floored to 1,360 (to 9,520); step 3 request 0
    # takes its last 40, request 1 runs on from 9,520 to 14,960 (0.24: the junction stops the admitting step
    # only) and request 2 is admitted with 2,712 left: it finds request 1's state at 9,520 and stops at the
    # junction, 9,792
    assert reused[:2] == [0, 8160]
    assert chunks[0] == [8160, 6800, 40]
    assert chunks[1] == [1360, 5440, 40]


def test_before_marconi_0_23_reuses_more_in_flight_than_alone():
    # 0.23.0 has no junction stop (no num_uncached_common_prefix_tokens): alone, each request's chunks end at
    # 8,160 and 14,960 (the last boundary), so requests 1 and 2 resume from request 0's state at 8,160; at 8 in
    # flight request 1's first chunk is cut by the budget left at 9,520 (as in 0.24.0 above), and request 2,
    # admitted at step 3, resumes there. Its first chunk: 2,712 left, floored to 2,448 (to 11,968).
    r = qwen3_next("0.23.0")
    alone, _ = run(r, three_users(), 1)
    assert alone == [0, 8160, 8160]
    together, chunks = run(r, three_users(), 8)
    assert together == [0, 8160, 9520]
    assert chunks[2] == [2448, 2992, 40]  # then 8,192 − 40 (request 1's last) floored: 11,968 → 14,960, 40


def test_from_0_26_the_junction_stops_every_step():
    # 0.26.0 keeps the junction on the request (request.shared_prefix_boundary) and the split stops each step at
    # it: step 3 request 1 runs 9,520 → 9,792 (272). Request 2, looked up after it in step 3, would resume from
    # that state, but a Mamba hit on a block cached in the same step is refused (single_type_kv_cache_manager.py
    # MambaManager.get_num_blocks_to_allocate, cached_blocks_this_step: its forward has not run), so it is
    # admitted at step 4 behind request 1's 5,168 (9,792 → 14,960) with 3,024 left: 9,792 → 12,784 (floored to
    # the block, 2,992), then 2,176 to the last boundary 14,960, then 40.
    reused, chunks = run(qwen3_next("0.26.0"), three_users(), 8)
    assert reused == [0, 8160, 9792]
    assert chunks[1] == [1360, 272, 5168, 40]
    assert chunks[2] == [2992, 2176, 40]


def test_a_waiting_request_is_looked_up_again_each_step_until_it_is_admitted():
    # Two identical 20,000-token prompts at 2 in flight on 0.24.0: request 0 takes 8,160 a step (8,160, 16,320,
    # then 3,536 to 19,856, the last boundary below 20,000: floor(20,000/272)·272, then 144), leaving 32 each
    # step, too few for a block of request 1 (the split gives 0 and admission stops). At step 3 4,656 are left,
    # but request 1's hit, request 0's state at 19,856, is cached in that step (refused, as above); at step 4 it
    # resumes there and computes the 144 left.
    same = list(Synthetic(shared=20000, users=2, private=0, output=1).requests())
    assert same[0].prompt_len == same[1].prompt_len == 20000
    reused, chunks = run(qwen3_next("0.24.0"), same, 2)
    assert chunks[0] == [8160, 8160, 3536, 144]
    assert reused == [0, 19856] and chunks[1] == [144]


def test_a_lookup_does_not_see_a_running_requests_later_blocks():
    # 0.28.0: request 0, a 1,000-token prompt generating 600 tokens, and request 1, whose prompt is request 0's
    # prompt and output and 100 tokens more, both in flight. Step 1: request 0 runs to 816 (the last boundary
    # below 1,000); request 1 would hit its state at 816, cached in that step, and waits. Step 2: request 0
    # computes 184 (to 1,000) and samples its first token; request 1 is looked up: allocate_slots has cached
    # request 0's blocks up to its computed + scheduled tokens only (1,000: three full blocks, and the state at
    # 816), not the blocks and states its decoding will reach (1,088, 1,360), so request 1 resumes from 816
    # (from 1,360 if the whole plan were seen).
    first = Request(0, Prompt(runs=((("p",), 1000),)), 600, output_key="o")
    second = Request(1, Prompt(runs=(*first.with_output().runs, (("w",), 100))), 1)
    assert second.prompt_len == 1700 and first.with_output().common_prefix(second.prompt) == 1600
    reused, chunks = run(qwen3_next("0.28.0"), [first, second], 2)
    assert chunks[0] == [816, 184]
    assert reused == [0, 816]
    assert chunks[1] == [816, 68]  # to 1,632, the last boundary below 1,700, with 8,192 − 184 left; then 68


def test_at_one_in_flight_the_loop_is_the_cache_alone():
    # one request at a time, every step has the whole budget and every earlier request has finished: the scheduler
    # changes nothing, request by request, from the cache run without it (prefix_cache.py's prefill_ends)
    r = qwen3_next("0.28.0")
    reqs = list(mooncake(MOONCAKE))[:60]
    plain, _ = replay([Policy(r.label, vpc.Cache(r), r.block, r.max_model_len)], reqs, 1)
    stepped, _ = run(r, reqs, 1)
    assert stepped == [o.reused for o in plain[r.label].outcomes]
    assert sum(stepped) > 0


def mooncake_capped(folder: Path) -> list[Request]:
    """The Mooncake excerpt as validation/replay_vllm.py replays it: every output capped at 8 tokens."""
    path = folder / "mooncake-capped.jsonl"
    lines = []
    for line in MOONCAKE.read_text().splitlines():
        obj = json.loads(line)
        obj["output_length"] = min(obj.get("output_length", 0), 8)
        lines.append(json.dumps(obj))
    path.write_text("\n".join(lines) + "\n")
    return list(mooncake(path))


def test_a_running_requests_later_blocks_are_taken_at_their_own_steps(tmp_path):
    # vLLM 0.27.0's own run of the Mooncake excerpt at 8 in flight (validation/replay_vllm.py, Qwen3-Next at TP 4,
    # align, 40 GiB; benchmarks/results/replay-validation-vllm-2026-12-02c.md): request 262 reuses 8,432 tokens,
    # the state request 42 (the same conversation's earlier turn) left at 8,432, and the case 207,264. vLLM takes a
    # running request's blocks step by step (kv_cache_manager.py ``allocate_slots`` for the tokens each step
    # schedules), each step's running requests before its waiting ones, so at step 493, when request 262 is
    # looked up, request 261 (1,902 prompt tokens and 8 out, admitted at step 491) holds the blocks its steps so
    # far reach, not those of its later decode steps. Taking all of 261's blocks when it was admitted evicted
    # request 42's Mamba states at 8,432 (the least recently freed) before 262's lookup, and 262 resumed from 272
    # (199,104 over the case).
    r = qwen3_next("0.27.0")
    reused, chunks = run(r, mooncake_capped(tmp_path), 8)
    assert reused[262] == 8432 and chunks[262] == [3264, 8160, 7344, 94]
    assert sum(reused) == 207264


@pytest.mark.parametrize(("version", "expected"), [("0.26.0", [544, 82, 16]), ("0.27.0", [544, 98])])
def test_before_0_27_a_step_past_the_last_boundary_takes_what_the_budget_leaves(tmp_path, version, expected):
    # vLLM's own runs of the Mooncake excerpt at 8 in flight (as above): request 135, 914 prompt tokens resuming
    # from 272, is scheduled 544 tokens at step 261 (to 816, the last block boundary, 3 × 272), then at step 262
    # the running requests leave 82 of the 8,192. 0.26.0's _mamba_block_aligned_split floors a step only when it
    # ends before the last cacheable boundary (``end < last_cache_position``: 898 is past 816), so it takes the
    # 82 and its last 16 at step 263; 0.27.0 floors wherever the step ends before the prompt's end
    # (``end < prefill_end``), 898 to 816, no token: it waits until step 266 has its 98 (vllm/v1/core/sched/
    # scheduler.py of each release)
    reused, chunks = run(qwen3_next(version), mooncake_capped(tmp_path), 8)
    assert reused[135] == 272 and chunks[135] == expected
