"""`hybridplan prefix` is a replay of its three-request trace (hybridplan/reports/prefix.py): the figures it
gives are those `replay` gives for the same trace through the same policies, whose rules validation/replay.py
checks request by request against vLLM's own Scheduler and KVCacheManager (0.23.0, 0.24.0, 0.26.0, 0.29.0,
0.33.0) and validation/sglang_radix.py against SGLang's radix cache code. Where the figures differ from the
analytic rules `prefix` had before, the test names the engine rule and file behind the new figure."""

from __future__ import annotations

import json

import pytest
from msgspec.structs import replace

from hybridplan.replay.settings import ReplaySettings
from hybridplan.replay.trace import Synthetic
from hybridplan.reports.prefix import OUTPUT, REQUESTS, prefix
from hybridplan.reports.replay import replay_report
from hybridplan.scenario import Budget
from tests.helpers import GiB, one_line_error, scenario

pytestmark = pytest.mark.unit

#: (shared, private): inside one block, across chunk ends, a block-aligned prompt, a prompt of shared tokens only
CASES = ((4000, 200), (10000, 5000), (20800, 0), (900, 200), (3100, 20))


def _replayed(sc, shared, private):
    """(engine, mode or strategy) → the reused tokens of the 2nd and 3rd request, by `replay` with a 40 GiB budget
    (three requests evict nothing from it)."""
    trace = Synthetic(shared=shared, users=REQUESTS, private=private, output=OUTPUT)
    rep = replay_report(
        replace(sc, budget=Budget(kv_budget=40 * GiB)), ReplaySettings(), trace.requests, "three requests"
    )
    out = {}
    for row in rep.rows:
        if row.engine in ("vllm", "sglang"):
            key = row.rules.get("mode") or row.rules.get("strategy")
            out[(row.engine, key)] = tuple(o.reused for o in row.run.outcomes[1:])
    return out


def _prefixed(sc, shared, private):
    r = prefix(sc, shared, private)
    out = {}
    if "vllm" in r.parts:
        out.update((("vllm", m), (x.reused_tokens, x.later_reused_tokens)) for m, x in r.parts["vllm"].modes.items())
    if "sglang" in r.parts:
        x = r.parts["sglang"].reuse
        out[
            (
                "sglang",
                sc.sglang.release.strategy(
                    sc.spec, sc.sglang.radix, overlap=sc.sglang.overlap, page_size=sc.sglang.page_size
                ),
            )
        ] = (x.reused_tokens, x.later_reused_tokens)
    return out


@pytest.mark.parametrize("minor", ["0.23.0", "0.24.0", "0.29.0", "0.33.0"])
@pytest.mark.parametrize("model", ["nemotron-h", "qwen3.5-4b"])
def test_prefix_is_the_replay_of_its_trace_on_vllm(model, minor):
    sc = scenario(model, 32768, minor=minor, engine="vllm", allow_long_context=True)
    for shared, private in CASES:
        want = _replayed(sc, shared, private)
        assert want and _prefixed(sc, shared, private) == want, (shared, private)


@pytest.mark.parametrize(
    "model,version,radix,overlap",
    [
        ("nemotron-h", "0.5.23", "auto", True),
        ("nemotron-h", "0.5.23", "no_buffer", False),
        ("nemotron-h", "0.5.23", "extra_buffer", True),
        ("nemotron-h", "0.5.23", "extra_buffer_lazy", True),
        ("qwen3-next", "0.5.18", "auto", True),
        ("nemotron-h", "0.5.9", "no_buffer", False),
        ("qwen3-next", "0.5.9", "extra_buffer", True),
    ],
)
def test_prefix_is_the_replay_of_its_trace_on_sglang(model, version, radix, overlap):
    sc = scenario(
        model,
        32768,
        sglang_version=version,
        engine="sglang",
        allow_long_context=True,
        sglang=dict(radix=radix, overlap=overlap),
    )
    for shared, private in CASES:
        want = _replayed(sc, shared, private)
        assert want and _prefixed(sc, shared, private) == want, (shared, private)


def _align(minor, shared, private):
    x = prefix(scenario("nemotron-h", minor=minor, engine="vllm", allow_long_context=True), shared, private)
    return x.parts["vllm"].modes["align"]


def test_marconi_admission_from_0_24():
    # Nemotron-H, align, B = 1040, 10,000 shared + 5,000 private, 8,192-token chunks. Request 1 saves at the chunk
    # ends ⌊8192/1040⌋·1040 = 7280, 14,560, and its last boundary ⌊14,999/1040⌋·1040 = 14,560: request 2 reuses
    # 7280. From 0.24.0 request 2 also stops a chunk where the attention blocks it found end, ⌊10,000/1040⌋·1040 =
    # 9360, and saves a state there (Marconi-style admission, #37898: 0.24.0's vllm/v1/core/sched/scheduler.py
    # num_uncached_common_prefix_tokens), which request 3 reuses; 0.23 has no such stop (prefix had it from 0.28)
    before, after = _align("0.23.0", 10000, 5000), _align("0.24.0", 10000, 5000)
    assert before.checkpoints == after.checkpoints == (7280, 14560)
    assert (before.reused_tokens, before.later_reused_tokens) == (7280, 7280)
    assert (after.reused_tokens, after.later_reused_tokens) == (7280, 9360)


def test_retention_zero_keeps_the_replay_boundary_and_the_junction_from_0_29():
    # 0.29.0+ default --prefix-cache-retention-interval 0 (vllm/config/cache.py, #52216) keeps only the replay
    # boundary ⌊(L − 1)/B⌋·B = 14,560 and the junction (single_type_kv_cache_manager.py reachable_block_mask): the
    # chunk end 7280 is not kept, so request 2 reuses nothing; request 3 reuses request 2's junction 9360
    x = _align("0.29.0", 10000, 5000)
    assert (x.checkpoints, x.reused_tokens, x.later_reused_tokens) == ((14560,), 0, 9360)
    # 0.33.0, a 20,000-token prompt: the chunk ends 7280 and 14,560 go, the boundary ⌊19,999/1040⌋·1040 = 19,760
    # stays; through 0.28 (dense) all three are kept
    assert _align("0.33.0", 20000, 0).checkpoints == (19760,)
    assert _align("0.28.0", 20000, 0).checkpoints == (7280, 14560, 19760)
    # `all` (0.29–0.31) under the same default: of every 1280-token block only the boundary ⌊14,999/1280⌋·1280
    # = 14,080 is kept, and request 3 reuses the junction ⌊10,000/1280⌋·1280 = 8960
    r = prefix(scenario("nemotron-h", minor="0.29.0", engine="vllm", allow_long_context=True), 10000, 5000)
    a = r.parts["vllm"].modes["all"]
    assert (a.checkpoints, a.reused_tokens, a.later_reused_tokens) == ((14080,), 0, 8960)


def test_extra_buffer_lazy_saves_the_branching_point_too():
    # SGLang 0.5.23 tracks mamba_branching_seqlen whatever enable_mamba_extra_buffer_lazy says (managers/
    # schedule_batch.py: only the ping-pong swap is skipped in lazy mode; unified_cache/components/mamba.py sets the
    # branching point): request 2 saves ⌊4000/256⌋·256 = 3840, which request 3 reuses (prefix had 0 for lazy)
    r = prefix(scenario("nemotron-h", engine="sglang", sglang=dict(radix="extra_buffer_lazy")), 4000, 200)
    x = r.parts["sglang"].reuse
    assert (x.grid, x.checkpoints, x.reused_tokens, x.later_reused_tokens) == (256, (4096,), 0, 3840)


def test_checkpoints_are_what_the_cache_holds_after_the_first_request():
    # the junction request 2 saves (9360 at 0.24) lies on request 1's path too, but is not request 1's checkpoint
    assert 9360 not in _align("0.24.0", 10000, 5000).checkpoints


def test_a_model_without_attention_runs_mode_none_on_vllm(run_cli):
    # vLLM runs an attention-free Mamba with no prefix caching (releases.py modes_for: none alone): nothing reused,
    # no block; SGLang's radix replay models hybrids only, and says so
    code, out, _ = run_cli("prefix", "mamba-130m", "--shared", "1000", "--private", "10", "--json")
    d = json.loads(out)
    assert code == 0 and d["vllm"]["modes"] == {
        "none": {
            "block_size": None,
            "checkpoints": [],
            "reused_tokens": 0,
            "computed_tokens": 1010,
            "later_reused_tokens": 0,
            "later_computed_tokens": 1010,
        }
    }
    assert "has no attention layers" in d["skipped"]["sglang"]


@pytest.mark.parametrize(
    "args,needle",
    [
        (("nemotron-h", "--shared", "9000", "--engine", "vllm"), "vLLM takes no 9,000-token prompt"),
        (("llama-3-8b", "--shared", "1000000000", "--allow-long-context"), "replays requests of at most 16,777,216"),
        (("llama-3-8b", "--shared", "1700000", "--allow-long-context"), "106,250 16-token blocks"),
        (("llama-3.1-70b", "--sweep", "0:130000:100", "--private", "100"), "more than 2,000,000"),
    ],
)
def test_prefix_refusals_are_one_line(run_cli, args, needle):
    one_line_error(*run_cli("prefix", *args), needle)


def test_a_sweep_reports_its_progress_point_by_point():
    # the sweep is a replay per point (seconds for 2,000 long ones): the command shows a bar from these ticks
    from hybridplan.reports.prefix import prefix_sweep

    ticks: list[tuple[int, int]] = []
    report = prefix_sweep(scenario("nemotron-h", ctx=8192), "0:3000:1000", 200, lambda d, t: ticks.append((d, t)))
    assert ticks == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert [p.shared for p in report.points] == [0, 1000, 2000, 3000]


def test_an_align_start_vllm_refuses_is_skipped_with_its_reason_the_other_modes_run():
    # vLLM 0.17.0-0.26 refuses align with a block wider than --max-num-batched-tokens (vllm/config/vllm.py
    # validate_block_size; hybridplan/engines/vllm/sizing.py block_problem): nemotron-h's align block is 1,040
    # tokens, over a 512-token chunk. 0.27.0 dropped the check, so align runs there.
    from hybridplan.reports.prefix import prefix as prefix_report

    refused = prefix_report(scenario("nemotron-h", minor=26, chunk=512, engine="vllm"), 4000, 200)
    assert set(refused.parts["vllm"].modes) == {"none", "all"}
    ((label, why),) = refused.skipped
    assert label == "vLLM 0.26.0 align" and "block_size (1040) must be <= max_num_batched_tokens (512)" in why
    later = prefix_report(scenario("nemotron-h", minor=27, chunk=512, engine="vllm"), 4000, 200)
    assert "align" in later.parts["vllm"].modes and not later.skipped
