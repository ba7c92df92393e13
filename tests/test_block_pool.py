"""The replay's vLLM block pool has two builds, the reference in Python (``PyPool``) and the same in C
(``BlockPool``, hybridplan/engines/vllm/_block_pool.c); every replay runs the C one where it was built. They
must agree on every figure: the same requests through the same rules, once over each pool, give the same reuse,
reasons, refusals, evictions and peaks, request by request. The traces are random prompts built from a few
shared segments (so that they hit, miss, part inside blocks and evict), over pools small enough to evict and to
make requests wait or be refused."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybridplan.engines.vllm import block_pool
from hybridplan.engines.vllm import prefix_cache as vpc
from hybridplan.engines.vllm.scheduler import Scheduled
from hybridplan.replay.loop import Policy, replay
from hybridplan.replay.settings import ReplaySettings
from hybridplan.replay.trace import Prompt, Request
from tests.helpers import GiB, assert_native_built, native, scenario

pytestmark = pytest.mark.native

C = native("hybridplan.engines.vllm._block_pool")

#: (model, release minor, mode, the replay's settings): every pool path (align and all; hits that pin blocks
#: in the queue and blocks held twice; uncached blocks queued before 0.24.0 and reused first after; several
#: Mamba groups; hash units finer than the block)
RULES = [
    ("qwen3.5-4b", 23, "align", {}),
    ("qwen3.5-4b", 29, "align", {}),
    ("qwen3.5-4b", 29, "align", {"retention_interval": 1056}),
    ("qwen3.5-4b", 26, "align", {"prefix_match_unit": 16}),
    ("qwen3.5-4b", 33, "align", {}),
    ("nemotron-h-8b", 27, "all", {}),
]

#: the segments prompts are made of: (key, tokens)
SEGMENTS = [("sys", 1600), ("doc", 1100), ("a", 530), ("b", 60), ("c", 1056), ("d", 7)]


def _trace(shapes: list[tuple[list[int], int]]) -> list[Request]:
    """One request per shape: its segments (a segment's tokens may be cut short) and its output tokens."""
    out = []
    for i, (parts, output) in enumerate(shapes):
        runs = tuple(
            (SEGMENTS[p % len(SEGMENTS)][0], SEGMENTS[p % len(SEGMENTS)][1] - p // len(SEGMENTS)) for p in parts
        )
        out.append(Request(i, Prompt(runs=runs + ((("own", i), 40 + i),)), output))
    return out


def _figures(rule: tuple, trace: list[Request], blocks: int, concurrency: int, pool, scheduled: bool = False) -> dict:
    """The replay's figures over ``pool``: through the cache alone, or (``scheduled``) through vLLM's scheduler
    loop, whose pool runs each request's steps as the scheduler reaches them (``admit(..., stepwise=True)``,
    ``advance``)."""
    model, minor, mode, given_rs = rule
    rs = ReplaySettings(concurrency=concurrency, num_gpu_blocks_override=blocks, **given_rs)
    # 32k tokens: past Nemotron-H-8B's 8,192, so with VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (--allow-long-context)
    budget = {"chunk": 2048} if scheduled else {}
    r = vpc.rules(scenario(model, 32768, minor=minor, allow_long_context=True, **budget), rs, mode, 40 * GiB)
    sched = Scheduled(r) if scheduled else None
    cache = sched.cache if sched is not None else vpc.Cache(r)
    cache.pool = pool(r.num_blocks, "".join(cache.groups), r.uncached_first, r.block)
    runs, _ = replay([Policy(r.label, sched or cache, r.block, r.max_model_len)], trace, concurrency)
    run = runs[r.label]
    return {
        "outcomes": [(o.index, o.reused, o.attention_hit, o.reason) for o in run.outcomes],
        "refused": run.refused,
        "evictions": run.evictions,
        "peak_states": run.peak_states,
        "peak_blocks": run.peak_blocks,
        "states": cache.pool.states,
        "available": cache.pool.available,
    }


def test_the_c_pool_is_built():
    """The install compiles it (setup.py); a replay falls back to the Python pool only
    where no C compiler was at hand, which this environment has."""
    assert_native_built("hybridplan.engines.vllm._block_pool")
    assert block_pool.BlockPool is not block_pool.PyPool


#: traces of 3-14 requests, each a few shared segments and a tail, and the block budgets they run under
SHAPES = st.lists(
    st.tuples(st.lists(st.integers(0, 3 * len(SEGMENTS) - 1), min_size=1, max_size=4), st.integers(0, 700)),
    min_size=3,
    max_size=14,
)
BLOCKS = st.sampled_from([None, 14, 24, 40])


@C
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rule=st.sampled_from(RULES),
    shapes=SHAPES,
    blocks=BLOCKS,
    concurrency=st.integers(1, 3),
)
def test_the_c_pool_equals_the_python_pool(rule, shapes, blocks, concurrency):
    trace = _trace(shapes)
    assert _figures(rule, trace, blocks, concurrency, block_pool.BlockPool) == _figures(
        rule, trace, blocks, concurrency, block_pool.PyPool
    )


@C
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rule=st.sampled_from(RULES),
    shapes=SHAPES,
    blocks=BLOCKS,
    concurrency=st.integers(2, 6),
)
def test_the_pools_agree_step_by_step_under_the_scheduler(rule, shapes, blocks, concurrency):
    """Through vLLM's scheduler loop (a 2,048-token step budget, so that prompts take several steps and the
    running requests' steps interleave) both pools run each request's later steps when the loop reaches them."""
    trace = _trace(shapes)
    assert _figures(rule, trace, blocks, concurrency, block_pool.BlockPool, True) == _figures(
        rule, trace, blocks, concurrency, block_pool.PyPool, True
    )


@pytest.mark.parametrize("pool", [block_pool.PyPool, pytest.param(block_pool.BlockPool, marks=C)], ids=["python", "c"])
def test_the_pool_evicts_the_least_recently_freed_block(pool):
    """Three blocks and one attention group (block 16): request 0 caches keys 1, 2 in blocks it frees tail
    first (2, then 1); request 1 takes two new blocks: the one never used, then the queue's head, which evicts
    key 2 (freed first), not key 1."""
    p = pool(4, "a", True, 16)
    assert p.admit(0, 0, ([0, 32], [1, 2], ([], [], [])))
    p.finish(0)
    assert p.available == 3 and p.has(0, 1) and p.has(0, 2)
    assert p.admit(1, 0, ([0, 32], [7, 8], ([], [], [])))
    assert p.evictions == 1 and p.has(0, 1) and not p.has(0, 2)
    assert p.prefix([0], [7, 8, 9], 3) == 2 and p.last_held([0], [1, 5, 6], 3) == 1
    # a request needing more blocks than are free is not admitted, and takes nothing
    assert not p.admit(2, 0, ([0, 64], [3, 4, 5, 6], ([], [], [])))
    assert p.available == 1 and p.evictions == 1


@C
def test_the_c_pool_refuses_a_malformed_plan():
    p = block_pool.BlockPool(10, "am", True, 16)
    with pytest.raises(TypeError):
        p.admit(0, 0, ([0, 16], [1], [None]))
    with pytest.raises(ValueError):
        p.admit(0, 0, ([0, 16], [1], ([None], [0, 1], [1])))
    with pytest.raises(KeyError):
        p.finish(5)
    with pytest.raises(ValueError):
        block_pool.BlockPool(10, "ax", True, 16)


@pytest.mark.parametrize("pool", [block_pool.PyPool, pytest.param(block_pool.BlockPool, marks=C)], ids=["python", "c"])
def test_evicted_and_dropped_keys_are_told_apart_past_a_batch(pool):
    """The C pool notes the keys evicted or dropped in batches of 256 (_block_pool.c ``PENDING``); ``lost`` sees
    every one, whether its batch was written out or still waits. A pool of 4 blocks, one Mamba group (block 16):
    request r caches its state in a new block (key 10_000 + r) and drops 2 keys (r, -r - 1); each take past the
    first three evicts the oldest state. After 400 requests, 800 drops and 396 evictions have been noted (more
    than a batch), and the keys of the first, middle and last requests read as each was noted."""
    p = pool(5, "m", True, 16)
    for r in range(400):
        p.drop([r, -r - 1])
        # one Mamba block caching key 10_000 + r, taken at the first step, freed at the end
        assert p.admit(r, 0, ([0, 16], [], ([10_000 + r], [0], [16])))
        p.finish(r)
    assert p.evictions == 396
    assert p.lost([10_000, 10_200, 10_395, 10_396, 10_399], 0, 5) == (True, False)  # evicted: the first 396
    assert p.lost([10_396, 10_399], 0, 2) == (False, False)  # still cached
    assert p.lost([0, 199, -400], 0, 3) == (False, True)
    assert p.lost([10_001, 399], 0, 2) == (True, True) and p.lost([5, 6], 1, 1) == (False, False)


@pytest.mark.parametrize("pool", [block_pool.PyPool, pytest.param(block_pool.BlockPool, marks=C)], ids=["python", "c"])
def test_a_passed_mamba_hit_another_request_holds_frees_no_block(pool):
    """vLLM 0.29.0 (vllm/v1/core/kv_cache_manager.py ``allocate_slots``): each step first frees the Mamba blocks
    behind the computed tokens (``remove_skipped_blocks``), then allocates only if the new blocks are no more than
    ``get_num_free_blocks``, the free queue's length; block_pool.py ``free_blocks`` puts a block in that queue
    only when its ref_cnt falls to 0. So a passed Mamba hit block that another running request holds adds no
    free block. One attention and one Mamba group (block 16), 6 blocks with the null one (5 free): request 0
    (16 tokens) caches key 1 in an attention and a Mamba block. Request 1 resumes from its 16 tokens and runs to
    33: step 16 → 32 takes attention block 1 and Mamba block 1 (2), step 32 → 33 frees the hit's Mamba block
    (index 0 < (32 − 1) // 16) and takes attention block 2 and Mamba block 2 (2)."""
    plan0 = ([0, 16], [1], ([1], [0], [16]))
    plan1 = ([16, 32, 33], [1, 2, None], ([1, 2, None], [0, 1, 2], [None, 32, 33]))
    # request 0 finished: its 2 blocks wait in the queue and the hit takes both out, leaving 3 free; step 1
    # leaves 1, step 2 has the hit's Mamba block back (ref_cnt 1 → 0), 2, enough for its 2 (the last evicts key 1)
    p = pool(6, "am", True, 16)
    assert p.admit(0, 0, plan0)
    p.finish(0)
    assert p.admit(1, 16, plan1) and p.available == 0 and p.evictions == 1
    # request 0 still running: 3 free; step 1 leaves 1, step 2 frees the hit's Mamba block only from request 1
    # (ref_cnt 2 → 1), so 1 free for 2 new: vLLM does not allocate, and the request takes nothing
    p = pool(6, "am", True, 16)
    assert p.admit(0, 0, plan0)
    assert not p.admit(1, 16, plan1) and p.available == 3 and p.evictions == 0


@pytest.mark.parametrize("pool", [block_pool.PyPool, pytest.param(block_pool.BlockPool, marks=C)], ids=["python", "c"])
def test_three_mamba_groups_sharing_a_held_hit_are_refused_where_vllm_allocates_nothing(pool):
    """The pool's admits in tests/test_replay_gap.py ``test_causes_add_up_to_the_gap`` (shared 0, users 1,
    turns 3, private 273, output 0, history, concurrency 3, 24 blocks, vllm, qwen3.5-4b on 0.29): Qwen3.5's
    groups "mmma", block 272, 24 blocks with the null one (23 free). Turn 0 (273 tokens) takes 2 attention and
    2 blocks in each Mamba group (8: 15 free); turn 1 (546, resuming from 272, whose Mamba block turn 0 holds)
    takes attention blocks 1, 2 and Mamba blocks 1, 2 per group (8: 7 free). Turn 2 (819, resuming from 544: the
    attention blocks 0, 1 and the Mamba block of index 1, all held by turn 1, so the hit takes no free block)
    by vLLM's rule (kv_cache_manager.py ``allocate_slots``, block_pool.py ``free_blocks``, 0.29.0): step
    544 → 816 frees nothing ((544 − 1) // 272 = 1) and takes attention block 2 and Mamba block 2 in 3 groups
    (4 of 7: 3 free); step 816 → 819 frees the Mamba block of index 1 in the 3 groups, but turn 1 still holds
    them (ref_cnt 2 → 1: still 3 free), and needs attention block 3 and Mamba block 3 in 3 groups, 4 > 3: vLLM
    allocates nothing, so the turn is refused and takes nothing. (Counting those 3 as freed, 6 ≥ 4, admitted
    it, and the run then took a block from an empty free queue.)"""
    p = pool(24, "mmma", True, 272)
    assert p.admit(0, 0, ([0, 272, 273], [1, None], ([1, None], [0, 1], [272, 273])))
    assert p.admit(1, 272, ([272, 544, 546], [1, 2, None], ([1, 2, None], [0, 1, 2], [None, 544, 546])))
    assert p.available == 7
    turn2 = ([544, 816, 819], [1, 2, 3, None], ([2, 3, None], [1, 2, 3], [None, 816, 819]))
    assert not p.admit(2, 544, turn2) and p.available == 7 and p.evictions == 0
    # once turn 1 finishes, its blocks are free (15, 4 of them the hit's, taken out of the queue: 11) and the
    # frees do count: step 2 has 11 − 4 + 3 = 10 free for its 4
    p.finish(1)
    assert p.available == 15
    assert p.admit(2, 544, turn2) and p.available == 15 - 4 - 8 + 3
