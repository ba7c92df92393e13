"""`hybridplan replay`: traces, the engines' prefix-cache policies against the users' reports that publish
their figures, the baselines, and the concurrency semantics (docs/replay.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from msgspec.structs import replace

from hybridplan.engines.sglang import radix_cache as spc
from hybridplan.engines.vllm import prefix_cache as vpc
from hybridplan.replay.loop import Policy, replay
from hybridplan.replay.settings import ReplaySettings
from hybridplan.replay.trace import MOONCAKE_BLOCK, Prompt, Request, Synthetic, mooncake, read
from hybridplan.scenario import Budget, Speculative
from tests.helpers import GiB, one_line_error, scenario

pytestmark = pytest.mark.unit

TRACES = Path(__file__).resolve().parent / "data" / "traces"
MOONCAKE = TRACES / "mooncake-conversation-300.jsonl"


def vllm_run(sc, mode, reqs, rs=ReplaySettings(), budget=40 * GiB):
    r = vpc.rules(sc, rs, mode, budget)
    runs, ideal = replay([Policy(r.label, vpc.Cache(r), r.block, r.max_model_len)], reqs, rs.concurrency)
    return runs[r.label], ideal, r


def sglang_run(sc, reqs, rs=ReplaySettings()):
    r = spc.rules(sc, rs)
    runs, ideal = replay([Policy(r.label, spc.Cache(r), r.grid, r.max_model_len)], reqs, rs.concurrency)
    return runs[r.label], ideal, r


def reused(run):
    return [o.reused for o in run.outcomes]


# --- traces -------------------------------------------------------------------------------------------


def test_mooncake_excerpt_reads_block_by_block():
    reqs = list(mooncake(MOONCAKE))
    # the first 300 lines of Mooncake's conversation_trace.jsonl (tests/data/traces/SOURCES.md), one request a line
    assert len(reqs) == 300
    # line 1: {"input_length": 6758, "hash_ids": [0, ..., 13]}: 13 full blocks and 6758 − 13·512 = 102 tokens
    first = reqs[0]
    assert first.prompt_len == 6758 and first.output_len == 500
    assert first.prompt.runs[-1][1] == 6758 - 13 * MOONCAKE_BLOCK
    # line 2 starts with hash id 0 too, then differs: the two share exactly one 512-token block
    assert first.prompt.common_prefix(reqs[1].prompt) == MOONCAKE_BLOCK


@pytest.mark.parametrize(
    "line, needle",
    [
        ("{not json", "line 2: not JSON"),
        ('{"input_length": 600, "output_length": 1, "hash_ids": [1]}', "line 2: 1 hash_ids for 600 input tokens"),
        ('{"input_length": -3, "hash_ids": []}', "line 2: 'input_length' must be an integer"),
        ("[1, 2]", "line 2: a JSON object was expected"),
    ],
)
def test_malformed_mooncake_line_is_one_error(run_cli, tmp_path, line, needle):
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [7]}\n' + line + "\n")
    code, out, err = run_cli("replay", bad, "qwen3.5-4b", "--kv-budget", "4GiB")
    one_line_error(code, out, err, needle)


def test_lines_read_alike_with_msgspec_and_json(tmp_path, monkeypatch):
    """A trace's lines are decoded by msgspec, to the format's typed fields; what msgspec refuses is read again
    by json and converted. What strict JSON refuses and json takes (NaN, 1e400, a lone surrogate) or neither
    takes gets json's answer, so a line reads alike either way; an integer past 64 bits is an integer in both."""
    import msgspec

    from hybridplan.replay import trace

    def json_only(kind):
        def refuse(text):
            raise msgspec.DecodeError("the json path")

        return refuse

    t = tmp_path / "t.jsonl"
    t.write_text(
        '{"a": 1, "b": [1, 2]}  \n\n{"a": NaN}\n{"a": "\\u00e9", "a": 2}\n{"a": 1e400}\n'
        '{"a": "\\ud800", "b": 18446744073709551615}\n'
    )
    fast = [(n, repr(obj)) for n, obj in trace._lines(t)]
    monkeypatch.setattr(trace, "_decoder", json_only)
    assert fast == [(n, repr(obj)) for n, obj in trace._lines(t)]
    assert [n for n, _ in fast] == [1, 3, 4, 5, 6]
    monkeypatch.undo()
    big = 1 << 64
    t.write_text(json.dumps({"input_length": 600, "output_length": 2, "hash_ids": [big + 1, 3]}) + "\n")
    tok = tmp_path / "tok.jsonl"
    tok.write_text(json.dumps({"prompt_token_ids": [1, big], "output_len": 1}) + "\n")
    both = []
    for decoder in (trace._decoder, json_only):
        monkeypatch.setattr(trace, "_decoder", decoder)
        both.append(([r.prompt.runs for r in mooncake(t)], [r.prompt.tokens for r in read(tok)]))
    assert both[0] == both[1] == ([(((big + 1, 512), (3, 88)))], [(1, big)])
    for text, needle in (
        ('{"a": 1} x', "line 1: not JSON"),
        ("[1]", "line 1: a JSON object was expected"),
        ('{"input_length": 1e30, "hash_ids": [1]}', "line 1: 'input_length' must be an integer"),
    ):
        t.write_text(text + "\n")
        for decoder in (trace._decoder, json_only):
            monkeypatch.setattr(trace, "_decoder", decoder)
            with pytest.raises(trace.PlanError, match=needle):
                list(mooncake(t))


def test_malformed_token_line_names_its_line(run_cli, tmp_path):
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"prompt_token_ids": [1, 2, 3], "output_len": 2}\n\n{"prompt_token_ids": [1, "x"]}\n')
    code, out, err = run_cli("replay", bad, "qwen3.5-4b", "--kv-budget", "4GiB")
    one_line_error(code, out, err, "line 3", "prompt_token_ids")


def test_synthetic_yaml_errors(run_cli, tmp_path):
    y = tmp_path / "w.yaml"
    y.write_text("shared: 100\nusers: 2\ncolour: blue\n")
    code, out, err = run_cli("replay", y, "qwen3.5-4b", "--kv-budget", "4GiB")
    one_line_error(code, out, err, "unknown field 'colour'")
    y.write_text("shared: 100\nusers: [1\n")
    code, out, err = run_cli("replay", y, "qwen3.5-4b", "--kv-budget", "4GiB")
    one_line_error(code, out, err, "not YAML")
    # a prompt past the reader's bound, 2**24 tokens: 10**19 shared tokens; 9 turns of 2,000,000 with history
    for text in ("shared: 10000000000000000000\nusers: 2\n", "private: 2000000\nturns: 9\n"):
        y.write_text(text)
        code, out, err = run_cli("replay", y, "qwen3.5-4b", "--kv-budget", "4GiB")
        one_line_error(code, out, err, "synthetic workload: a prompt of", "at most 16,777,216")
    # without history each turn's prompt is its own 2,000,000 tokens: taken
    assert len(next(Synthetic(private=2_000_000, turns=9, history=False).requests()).prompt) == 2_000_000


def test_token_lists_hash_like_runs():
    """A token-id trace and a synthetic one with the same sharing pattern replay alike."""
    import tempfile

    sc = scenario("qwen3.5-4b", 32768, minor=24)
    shared = list(range(3000))
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as fh:
        for u in range(4):
            fh.write(
                json.dumps({"prompt_token_ids": shared + [10_000 + 1000 * u + j for j in range(300)], "output_len": 1})
                + "\n"
            )
    tok, _, _ = vllm_run(sc, "align", read(Path(fh.name)))
    syn, _, _ = vllm_run(sc, "align", Synthetic(shared=3000, users=4, private=300, output=1).requests())
    assert reused(tok) == reused(syn) == [0, 0, 2640, 2640]  # 2640 = ⌊3000/528⌋·528, from the third (Marconi)


# --- vLLM: the users' reports --------------------------------------------------------------------------


def test_vllm_45238_checkpoint_in_unique_tokens_hits_nothing():
    """vllm#45238 (Qwen3.5-4B, block 528, concurrency 1, main of 2026-06-11, before 0.24.0's Marconi
    admission, so 0.23's rules): align keeps one state per request, at the last block boundary before the
    prompt ends. A 1500/700 split puts it at ⌊2200/528⌋·528 = 2112, in the unique tokens: 0 of 64, as
    published. With the prompt short enough that the boundary falls at 1584, inside a 1600-token shared
    prefix, every later request hits 1584 (the issue's table gives the boundary; its 52 of 64 comes from
    prompts whose exact lengths it does not publish, so here all 63 later requests hit)."""
    sc = scenario("qwen3.5-4b", 32768, minor=23)
    run, ideal, r = vllm_run(sc, "align", Synthetic(shared=1500, users=64, private=700, output=1).requests())
    assert r.block == 528
    assert run.with_hit == 0 and run.requests == 64
    assert run.reasons["checkpoint_past_divergence"] == 63
    assert ideal.with_hit == 63  # the prefix is there to be reused
    run, _, _ = vllm_run(sc, "align", Synthetic(shared=1600, users=64, private=500, output=1).requests())
    assert run.with_hit == 63 and set(reused(run)[1:]) == {1584}


def test_vllm_40696_prompts_under_one_block_never_hit():
    """vllm#40696 (Qwen3.5-4B, vLLM 0.19.1, block 528): a ~480-token prefix never hits; a 552-token prompt sent
    again reuses one block and recomputes 24 tokens, a 979-token one recomputes 451."""
    sc = scenario("qwen3.5-4b", 1024, minor="0.19.1")
    run, _, r = vllm_run(sc, "align", Synthetic(shared=480, users=8, private=30, output=1).requests())
    assert r.block == 528 and run.with_hit == 0 and run.reasons["before_first_checkpoint"] == 7
    for length, computed in ((552, 24), (979, 451)):
        reqs = [Request(i, Prompt(runs=((("p",), length),)), 1) for i in range(2)]
        run, _, _ = vllm_run(sc, "align", reqs)
        assert reused(run) == [0, 528] and run.outcomes[1].prompt - run.outcomes[1].reused == computed


def test_vllm_48401_block_larger_than_max_model_len_is_inert():
    """vllm#48401 (Nemotron-3-Super, vLLM main 0.23.1rc1.dev): block 8320; at max_model_len 4096 no prompt
    fills a block, 0 hits; at 16384 the shared prefix hits. 0.23 starts align only with max_num_batched_tokens
    at least the block (vllm/config/vllm.py validate_block_size, called by vllm/v1/engine/core.py), so the
    report's start had one: 16384, the LLM class's default on a GPU of 70 GiB and more (its RTX PRO 6000 has 96;
    vllm/engine/arg_utils.py)."""
    work = Synthetic(shared=3000, users=6, private=500, output=1)
    sc = scenario("nemotron-3-super-120b-a12b", 4096, minor=23, chunk=16384)
    run, _, r = vllm_run(sc, "align", work.requests(), budget=60 * GiB)
    assert r.block == 8320 and run.with_hit == 0 and run.reasons["block_past_max_len"] == 5
    work = Synthetic(shared=9000, users=6, private=500, output=1)
    run, _, _ = vllm_run(replace(sc, ctx=16384), "align", work.requests(), budget=60 * GiB)
    assert run.with_hit > 0 and set(reused(run)[2:]) == {8320}


def test_vllm_52216_retention_zero_with_eagle_hits_nothing():
    """vllm#52216 (0.29.0: --prefix-cache-retention-interval defaults to 0; #55760 restores dense for a hybrid
    under EAGLE/MTP when it is unset): with EAGLE the last prefill state lands a block before the replay
    boundary, so retention 0 keeps no reachable state and hits drop to 0; left unset, dense retention hits."""
    sc = replace(scenario("qwen3.5-4b", 32768, minor=29), spec_tokens=2, speculative=Speculative("mtp", 2))
    work = Synthetic(shared=4000, users=8, private=200, output=1)
    run, _, r = vllm_run(sc, "align", work.requests(), ReplaySettings(retention_interval=0))
    assert r.retention == 0 and run.with_hit == 0
    run, _, r = vllm_run(sc, "align", work.requests())
    assert r.retention is None and run.with_hit == 7
    # two speculative tokens widen the conv state: block 544 (blocks.py); 4200 tokens: the last boundary
    # ⌊4200/544⌋·544 = 3808 backs off one block with EAGLE, to 3264
    assert r.block == 544 and set(reused(run)[1:]) == {3264}


def test_vllm_retention_default_by_release():
    """0.24.0–0.28.0: VLLM_PREFIX_CACHE_RETENTION_INTERVAL unset → dense; 0.29.0+: 0 (vllm/config/cache.py)."""
    rs = ReplaySettings()
    assert vpc.retention(scenario("qwen3.5-4b", minor=28), rs)[0] is None
    assert vpc.retention(scenario("qwen3.5-4b", minor=29), rs)[0] == 0
    with pytest.raises(Exception, match="0.24.0"):
        vpc.retention(scenario("qwen3.5-4b", minor=23), ReplaySettings(retention_interval=528))


def test_vllm_marconi_first_hit_on_third_request():
    """#37898 (0.24.0), measured in vllm#42317 (Qwen3.6-35B-A3B, block 1056, 6000 shared + 2000): request 2
    stops a chunk at ⌊6000/1056⌋·1056 = 5280 and saves the state; requests 3 and later reuse 5280. Before 0.24
    (0.23) no request hits."""
    work = Synthetic(shared=6000, users=5, private=2000, output=1)
    run, _, r = vllm_run(scenario("qwen3.6-35b-a3b", 65536, minor=24), "align", work.requests())
    assert r.block == 1056 and reused(run) == [0, 0, 5280, 5280, 5280]
    assert run.reasons["not_admitted_yet"] == 1
    run, _, _ = vllm_run(scenario("qwen3.6-35b-a3b", 65536, minor=23), "align", work.requests())
    assert run.with_hit == 0


def test_vllm_prefix_match_unit_release_and_divisor():
    """--prefix-match-unit (0.26.0, #46384) must divide the block (528 = 33·16); a prompt's partial tail is then
    registered at its last unit boundary, so a 500-token prompt sent again with more tokens reuses
    ⌊500/16⌋·16 = 496 where block hashing alone reuses nothing (vllm#40696's case)."""
    rs = ReplaySettings(prefix_match_unit=16)
    with pytest.raises(Exception, match="0.26.0"):
        vpc.rules(scenario("qwen3.5-4b", minor=25), rs, "align", 40 * GiB)
    with pytest.raises(Exception, match="divisible by prefix_match_unit"):
        vpc.rules(scenario("qwen3.5-4b", minor=26), ReplaySettings(prefix_match_unit=100), "align", 40 * GiB)
    assert vpc.rules(scenario("qwen3.5-4b", minor=26), rs, "align", 40 * GiB).unit == 16
    reqs = [Request(0, Prompt(runs=((("p",), 500),)), 1), Request(1, Prompt(runs=((("p",), 500), (("q",), 100))), 1)]
    run, _, _ = vllm_run(scenario("qwen3.5-4b", 32768, minor=26), "align", list(reqs), rs)
    assert reused(run) == [0, 496]
    run, _, _ = vllm_run(scenario("qwen3.5-4b", 32768, minor=26), "align", list(reqs))
    assert reused(run) == [0, 0]


def test_vllm_shared_prefix_checkpoint_needs_its_conditions():
    sc = scenario("qwen3.5-4b", minor=29)
    with pytest.raises(Exception, match="0.30.0"):
        vpc.rules(sc, ReplaySettings(shared_prefix_checkpoint=True), "align", 40 * GiB)
    with pytest.raises(Exception, match="EAGLE/MTP"):
        vpc.rules(scenario("qwen3.5-4b", minor=31), ReplaySettings(shared_prefix_checkpoint=True), "align", 40 * GiB)


def test_vllm_all_mode_resumes_at_the_last_block_inside_the_prefix():
    """docs/engines.md §4: in all (block 1280 for Nemotron-H-8B with chunk 256) a 4000-token prompt cached every
    block; a request with the same 4000 tokens + 200 private reuses 3840."""
    sc = scenario("nemotron-h-8b", 8192, minor=27)
    run, _, r = vllm_run(sc, "all", Synthetic(shared=4000, users=3, private=200, output=1).requests())
    assert r.block == 1280 and reused(run) == [0, 3840, 3840]


# --- SGLang: the users' reports ------------------------------------------------------------------------


@pytest.mark.parametrize("suffix, no_buffer, extra_buffer", [(40, 0.0, 0.992), (376, 0.0, 0.0), (1296, 0.0, 0.0)])
def test_sglang_22935_end_checkpoint_and_suffix(suffix, no_buffer, extra_buffer):
    """sglang#22935 (SGLang 0.5.9, Qwen3.5-122B-A10B, TP 8, chunked prefill off, page 64): the cache holds P+s1
    (P = 6476), P+s2 is asked; the share of P+s2 reused, as published. extra_buffer's one checkpoint at
    ⌊len/64⌋·64 lies inside P only for a suffix under 64 tokens: 6464/6516 = 0.992."""
    reqs = [Request(i, Prompt(runs=((("P",), 6476), (("s", i), suffix))), 1) for i in range(2)]
    for radix, want in (("no_buffer", no_buffer), ("extra_buffer", extra_buffer)):
        sc = scenario(
            "qwen3.5-122b-a10b",
            32768,
            sglang_version="0.5.9",
            tp=8,
            chunk=1 << 20,
            sglang=dict(radix=radix, page_size=64),
            budget=Budget(kv_budget=60 * GiB),
        )
        run, _, _ = sglang_run(sc, list(reqs))
        assert round(run.outcomes[1].reused / run.outcomes[1].prompt, 3) == want


def test_sglang_branching_point_serves_the_third_request():
    """extra_buffer: the second request tracks its branching point ⌊6476/64⌋·64 = 6464 (mamba_branching_seqlen,
    managers/schedule_batch.py), which the third reuses; no_buffer never saves one (#22935: 0 throughout)."""
    reqs = [Request(i, Prompt(runs=((("P",), 6476), (("s", i), 376))), 1) for i in range(4)]
    sc = scenario(
        "qwen3.5-122b-a10b",
        32768,
        sglang_version="0.5.23",
        tp=8,
        chunk=1 << 20,
        sglang=dict(radix="extra_buffer", page_size=64),
        budget=Budget(kv_budget=60 * GiB),
    )
    run, _, r = sglang_run(sc, reqs)
    assert r.grid == 64 and reused(run) == [0, 0, 6464, 6464]
    sc = replace(sc, sglang=replace(sc.sglang, radix="no_buffer", page_size=1, overlap=False))
    run, _, _ = sglang_run(sc, reqs)
    assert reused(run) == [0, 0, 0, 0]


def test_sglang_path_cap_and_int8_by_release():
    sc = scenario("qwen3.5-4b", 32768, sglang_version="0.5.9", budget=Budget(kv_budget=20 * GiB))
    for rs in (ReplaySettings(mamba_max_states_per_path=2), ReplaySettings(int8_checkpoint=True)):
        with pytest.raises(Exception, match="0.5.18"):
            spc.rules(sc, rs)
    sc = scenario(
        "qwen3.5-4b",
        32768,
        sglang_version="0.5.23",
        chunk=512,
        budget=Budget(kv_budget=20 * GiB),
        sglang=dict(radix="extra_buffer"),
    )
    work = Synthetic(shared=0, users=1, private=4000, output=1)
    run, _, _ = sglang_run(sc, work.requests(), ReplaySettings(mamba_max_states_per_path=2))
    # one state per 512-token chunk (8 of them), the path capped to its 2 deepest
    assert run.peak_states == 8
    r = spc.rules(sc, ReplaySettings(mamba_max_states_per_path=2))
    cache = spc.Cache(r)
    req = next(work.requests())
    keys = cache.keys(req, req.prompt_len + 1)
    cache.admit(req, cache.lookup(req, keys), keys)
    assert cache.states == 2


# --- baselines and semantics ---------------------------------------------------------------------------


def test_baselines_bound_the_hybrid(run_cli):
    code, out, _ = run_cli(
        "replay",
        MOONCAKE,
        "qwen3.5-4b",
        "--ctx",
        "131072",
        "--kv-budget",
        "40GiB",
        "--engine",
        "vllm",
        "--limit",
        "120",
        "--json",
    )
    assert code == 0
    d = json.loads(out)
    rates = {r["label"]: r["token_hit_rate"] for r in d["rows"]}
    hybrid = rates["vLLM 0.33.0 align"]
    assert hybrid <= rates["attention layers alone"] <= rates["ideal cache"]
    assert rates["ideal cache"] > 0
    assert len(d["requests"]) == 120 and "vLLM 0.33.0 align" in d["requests"][5]["reused"]


def test_concurrency_pins_blocks_and_waits():
    """Two requests in flight pin their blocks: with a pool that holds one request at a time, the second waits
    for the first instead of evicting what it holds; at concurrency 1 the same pool serves both."""
    sc = scenario("qwen3.5-4b", 32768, minor=29)
    work = Synthetic(shared=2112, users=3, private=500, output=1)
    r = vpc.rules(sc, ReplaySettings(), "align", 40 * GiB)
    per = vpc.Cache(r).blocks_needed(next(work.requests()))
    spare = r.attn_groups + r.mamba_groups  # room for the state a request saves at the shared prefix
    rs = ReplaySettings(concurrency=2, num_gpu_blocks_override=per + spare)
    run, _, _ = vllm_run(sc, "align", work.requests(), rs)
    assert run.requests == 3 and not run.refused
    rs = ReplaySettings(concurrency=2, num_gpu_blocks_override=per - 1)
    run, _, _ = vllm_run(sc, "align", work.requests(), rs)
    assert len(run.refused) == 3 and all("pool" in w for _, w in run.refused)


def test_prompt_at_max_model_len_is_refused_alone(run_cli, tmp_path):
    t = tmp_path / "t.jsonl"
    t.write_text(
        "".join(json.dumps({"prompt_token_ids": list(range(n)), "output_len": 1}) + "\n" for n in (100, 4096, 200))
    )
    code, out, _ = run_cli(
        "replay",
        t,
        "qwen3.5-4b",
        "--ctx",
        "4096",
        "--kv-budget",
        "8GiB",
        "--json",
        "--engine",
        "vllm",
        "--mode",
        "align",
    )
    assert code == 0
    row = json.loads(out)["rows"][0]
    assert row["requests"] == 3 and [x["request"] for x in row["refused"]] == [1]
    assert "max_model_len 4,096" in row["refused"][0]["why"]


def test_eviction_is_counted_and_explained():
    """Six users each revisit a document of their own, round-robin: with room for a couple of requests the
    document's blocks and states are evicted before the user comes back (least recently freed first)."""
    sc = scenario("qwen3.5-4b", 32768, minor=29)
    work = Synthetic(shared=0, users=6, turns=3, private=200, output=2, group_size=1, group_shared=2000, history=False)
    r = vpc.rules(sc, ReplaySettings(), "align", 40 * GiB)
    per = vpc.Cache(r).blocks_needed(next(work.requests()))
    tight = per + 2 * (r.attn_groups + r.mamba_groups)
    run, _, _ = vllm_run(sc, "align", work.requests(), ReplaySettings(num_gpu_blocks_override=tight))
    big, _, _ = vllm_run(sc, "align", work.requests())
    # roomy: turn 2 saves the state at the document's ⌊2000/528⌋·528 = 1584 (Marconi), turn 3 reuses it
    assert reused(big)[12:] == [1584] * 6
    assert run.evictions > 0 and run.reused_tokens == 0 and run.reasons["evicted"] > 0


def test_cli_text_view_and_diagnostics(run_cli):
    code, out, _ = run_cli(
        "replay",
        "synthetic",
        "qwen3.5-4b",
        "--shared",
        "1500",
        "--private",
        "700",
        "--users",
        "16",
        "--output",
        "1",
        "--kv-budget",
        "40GiB",
        "--vllm-version",
        "0.23",
        "--engine",
        "vllm",
    )
    assert code == 0
    assert "vLLM 0.23.0 align" in out and "ideal cache" in out
    assert "vLLM 0.24.0+ saves a state at the shared prefix" in out  # the flag that changes it, with its rate
    code, out, err = run_cli("replay", "trace-that-is-not-there.jsonl", "qwen3.5-4b", "--kv-budget", "4GiB")
    one_line_error(code, out, err, "no trace at")
    code, out, err = run_cli("replay", "synthetic", "qwen3.5-4b", "--shared", "100")
    one_line_error(code, out, err, "--kv-budget")


def test_vllm_0_33_takes_the_prompt_checkpoint_inside_the_last_chunk():
    """vLLM 0.33.0, Qwen3.5-4B align with FlashInfer's GDN (block 576): its GDN layers export the prompt's
    checkpoint from inside a chunk (qwen_gdn_linear_attn.py: one prefill-checkpoint block, alignment the block).
    A 1,700-token prompt's checkpoint is ⌊1699/576⌋·576 = 1152; its one chunk 0 → 1700 starts on a unit,
    cdiv(1700, 576) − 2 = 1 > (0 − 1) // 576, 0 + 576 ≤ 1152 < 1700 and (1152 − 0) % 576 = 0: the scheduler
    does not split the prefill there (scheduler.py ``use_internal_checkpoint``), and each Mamba group takes the
    checkpoint's block (index 1) and the running state's (index 2), no third. vLLM 0.32.0 (GDN exports none)
    splits at 1152 and takes one block a step. validation/replay.py runs both against the wheels."""
    req = Request(0, Prompt(runs=((("p",), 1700),)), 8)
    sc33 = scenario("qwen3.5-4b", 32768, minor=33)
    r33 = vpc.rules(sc33, ReplaySettings(), "align", 40 * GiB)
    c = vpc.Cache(r33)
    keys = c.keys(req, 1708)
    look = c.lookup(req, keys)
    steps, _, (mamba, index, need) = c._plan(req, look, keys)
    assert (r33.block, r33.checkpoint_align, r33.mamba_pages) == (576, 576, 3)
    assert steps[:2] == [0, 1700] and c.internal_checkpoint(req, 0, 1700) == 1152
    assert index == [1, 2] and need == [1700, 1700] and mamba[0] is not None  # the checkpoint is cached
    r32 = vpc.rules(scenario("qwen3.5-4b", 32768, minor="0.32.0"), ReplaySettings(), "align", 40 * GiB)
    c = vpc.Cache(r32)
    steps, _, (mamba, index, need) = c._plan(req, c.lookup(req, c.keys(req, 1708)), c.keys(req, 1708))
    assert r32.checkpoint_align is None and steps[:3] == [0, r32.block * (1699 // r32.block), 1700]


def test_constructors_given_the_counts_make_what_counting_makes():
    """``Prompt.of_runs`` and ``Request.of`` are given the token counts (one a trace line, for speed): what they
    make must be equal, field for field, to what the records make counting them themselves."""
    runs = ((7, 512), (8, 100))
    fast, slow = Prompt.of_runs(runs, 612), Prompt(runs=runs)
    assert fast == slow and slow.size == 612
    fast_r, slow_r = Request.of(3, fast, 9, 1.5, "line 4"), Request(3, slow, 9, 1.5, "line 4")
    assert fast_r == slow_r and slow_r.prompt_len == 612
    assert fast_r.with_output() == slow_r.with_output() == Prompt(runs=(*runs, ((("out", 3), 0), 9)))


def test_one_request_is_singular(run_cli, tmp_path):
    p = tmp_path / "one.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 600, "output_length": 10, "hash_ids": [1, 2]}\n')
    code, out, _ = run_cli("replay", p, "nemotron-h", "--kv-budget", "40GiB")
    assert code == 0 and "1 request of one.jsonl (mooncake), 1 in flight" in out and "1 requests" not in out


def test_a_context_past_the_configs_length_is_refused_as_vllm_refuses_it(run_cli):
    # Nemotron-H-8B's config: max_position_embeddings 8192 (model_specs, its config.json); vLLM's
    # _get_and_verify_max_len (vllm/config/model.py) refuses a larger --max-model-len unless
    # VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 is set, as `fit` says; `replay` replays no engine that does not start
    args = (
        "replay",
        "synthetic",
        "nemotron-h",
        "--shared",
        "100",
        "--private",
        "100",
        "--users",
        "2",
        "--kv-budget",
        "40GiB",
        "--engine",
        "vllm",
    )
    code, out, err = run_cli(*args, "--ctx", "131072")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "User-specified max_model_len (131072) is greater than the derived max_model_len" in err
    assert err.count("will not start") == 1
    code, out, _ = run_cli(*args, "--ctx", "131072", "--allow-long-context")
    assert code == 0 and "vLLM 0.33.0" in out
    # SGLang likewise: ModelConfig's context check (srt/configs/model_config.py) unless
    # SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1
    code, out, err = run_cli(*args[:-1], "sglang", "--ctx", "131072")
    assert code == 2 and "User-specified context_length (131072) is greater than the derived context_length" in err
