"""SGLang's pool sizing release by release. Figures are derived in the comments from the rules of the SGLang
wheels (paths under sglang/srt/); docs/engines.md §3 lists the rules by release.

Nemotron-H-8B under SGLang, one rank: 24 Mamba-2 layers of conv 10,240·3 bf16 = 61,440 B and SSM
128·64·128 fp32 = 4,194,304 B, so per = 24·4,255,744 = 102,137,856 B a sequence; 4 attention layers of
8 KV heads·128·2 (K and V)·2 B: a KV cell of 16,384 B a token. R = 40 GiB = 42,949,672,960 B; with
--mamba-full-memory-ratio 0.9 the state share is R·0.9/1.9 = 20,344,581,928.4 B = 199.19 sequences.
"""

from __future__ import annotations

import json

import pytest

from hybridplan.engines import sglang
from hybridplan.errors import NotServed, PlanError
from hybridplan.loader import load_model
from hybridplan.reports.fit import fit
from hybridplan.scenario import Budget, DtypeChoice
from tests.helpers import GiB, scenario

pytestmark = pytest.mark.unit

R = 40 * GiB
PER = 102_137_856
CELL = 16_384


def sg_fit(model="nemotron-h", version=None, budget=R, ctx=8192, **kw):
    spec_tokens = kw.pop("spec_tokens", 0)
    return fit(
        scenario(
            model,
            ctx,
            budget=Budget(kv_budget=budget),
            engine="sglang",
            sglang_version=version,
            spec_tokens=spec_tokens,
            sglang=kw,
        )
    ).parts["sglang"]


def test_versions():
    # every 0.5.x on PyPI from the first with a Mamba pool (0.5.2) to 0.5.23; builds take their release's rules
    assert len(sglang.VERSIONS) == 41 and sglang.release(None).version == "0.5.23"
    assert sglang.release("0.5.17.dev20260819+g574274660f").version == "0.5.17"
    assert sglang.release("v0.5.6.post1").version == "0.5.6.post1"
    assert sglang.release("0.5.10rc0").version == "0.5.10rc0"
    with pytest.raises(PlanError, match="SGLang 0.5.1 has no Mamba state pool"):
        sglang.release("0.5.1")
    with pytest.raises(PlanError, match=r"newer than the newest modelled release \(0.5.23\)"):
        sglang.release("0.5.24")
    with pytest.raises(PlanError, match="unknown SGLang version '0.5.3rc1'"):  # not on PyPI
        sglang.release("0.5.3rc1")
    with pytest.raises(PlanError, match="unknown SGLang version"):
        sglang.release("0.4.9")


def test_model_classes_by_release():
    # models/: Qwen3-Next 0.5.2, Falcon-H1 0.5.3rc2, Nemotron-H 0.5.3.post1, LFM2 0.5.9, Mamba 0.5.20; never Jamba
    rel = sglang.release
    rel("0.5.2").check_served(load_model("qwen3-next"))
    with pytest.raises(NotServed, match="came in 0.5.3rc2"):
        rel("0.5.3rc0").check_served(load_model("falcon-h1-0.5b"))
    with pytest.raises(NotServed, match="came in 0.5.3.post1"):
        rel("0.5.3").check_served(load_model("nemotron-h"))
    with pytest.raises(NotServed, match="came in 0.5.9"):
        rel("0.5.8.post1").check_served(load_model("lfm2"))
    with pytest.raises(NotServed, match="came in 0.5.20"):
        rel("0.5.19").check_served(load_model("mamba-2.8b"))
    rel("0.5.20").check_served(load_model("mamba-2.8b"))
    with pytest.raises(NotServed, match="no model class for JambaForCausalLM"):
        rel(None).check_served(load_model("jamba"))


def test_pool_256_slots():
    # "conv_state size: 0.35GB, ssm_state size: 24.09GB" for 256 slots + 1 padding row:
    # conv 24·257·61,440 B = 378,961,920 B = 0.35 GiB; SSM 24·257·4,194,304 B = 25,870,467,072 B = 24.09 GiB
    s = sglang.ENGINE.layout(scenario("nemotron-h", slots=256))
    assert s.pool.conv_bytes == 378_961_920 and s.pool.ssm_bytes == 25_870_467_072
    assert s.pool.log() == (
        "Mamba Cache is allocated. max_mamba_cache_size: 256, conv_state size: 0.35GB, ssm_state size: 24.09GB "
    )
    assert s.max_running_requests == 256 // 5  # extra_buffer with overlap: 5 state slots per request
    # before 0.5.3.post2 the line names no size
    s = sglang.ENGINE.layout(scenario("qwen3-next", slots=256, sglang_version="0.5.3"))
    assert s.pool.log().startswith("Mamba Cache is allocated. conv_state size: ")


@pytest.mark.parametrize(
    "version,k,kv_rows",
    [
        # 0.5.17 on (kv_cache_configurator.py): K = ⌊(R·r/(1+r) − per)/per⌋ = ⌊199.19 − 1⌋ = 198; KV = R − (K+1)·per
        ("0.5.23", 198, 199),
        ("0.5.17", 198, 199),
        # 0.5.9–0.5.16: K = ⌊R·r/(1+r)/per⌋ = 199; KV = R − K·per (the pool still allocates K + 1 rows)
        ("0.5.16", 199, 199),
        ("0.5.13", 199, 199),
        ("0.5.9", 199, 199),
        # 0.5.6.post1 (radix cache on for Nemotron-H from here): K = ⌊R·r/(1+r)/per/(1+D)⌋ = 199; KV = R − K·per·(1+D)
        ("0.5.6.post1", 199, 199),
    ],
)
def test_split_by_band(version, k, kv_rows):
    r = sg_fit(version=version)
    assert r.pool.size == k and r.kv_bytes == R - kv_rows * PER
    # KV = 42,949,672,960 − 199·102,137,856 = 22,624,239,616 B → // 16,384 = 1,380,874 tokens
    assert r.kv_tokens == (R - kv_rows * PER) // CELL == 1_380_874
    assert r.kv_log.endswith("#tokens: 1380874, K size: 10.54 GB, V size: 10.54 GB")


def test_no_radix_cache_means_a_fixed_pool():
    # 0.5.3.post2–0.5.6: Nemotron-H's radix cache is off ("... model detected, disable radix cache"): K =
    # --max-running-requests, else 512; 512·102,137,856 B = 48.7 GiB does not fit 40 GiB
    r = sg_fit(version="0.5.6")
    assert (r.strategy, r.pool.size, r.ratio) == ("off", 512, 1) and not r.starts
    assert "512-slot state pool" in r.problem
    r = sg_fit(version="0.5.6", max_running_requests=100)
    # K = 100; KV = R − 100·per = 32,735,887,360 B → 1,998,040 tokens; one slot per request: 100 requests
    assert (r.pool.size, r.kv_tokens, r.max_running_requests) == (100, (R - 100 * PER) // CELL, 100)
    # from 0.5.9 the 512 default is gone: radix off without --max-running-requests splits by the ratio
    assert sg_fit(version="0.5.9", radix="off").pool.size == 199


def test_before_0_5_3_post2_the_pool_is_the_request_pool():
    # 0.5.2–0.5.3.post1 reserve K = 512 (no flag) but build MambaPool(max_num_reqs): min(estimate, 512)
    r = sg_fit("qwen3-next", version="0.5.3")
    assert r.split.pool_size == 512 and r.pool.size == r.admission.request_pool <= 512
    assert r.ratio == 1 and "reserves 512 state slots" in r.notes[0]


@pytest.mark.parametrize(
    "version,strategy,overlap,spec,lock,slots",
    [
        ("0.5.6.post1", "no_buffer", True, False, False, 3),  # radix on: MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO
        ("0.5.7", "no_buffer", True, False, False, 5),  # 0.5.7 adds the extra-buffer slots to no_buffer too
        ("0.5.7", "extra_buffer", True, True, False, 4),
        ("0.5.8", "no_buffer", True, False, False, 3),
        ("0.5.9", "extra_buffer", False, False, False, 5),  # 3 + 2 without speculative decoding, overlap or not
        ("0.5.9", "extra_buffer", True, True, False, 4),
        ("0.5.10", "extra_buffer", False, False, False, 4),  # from 0.5.10rc0 the overlap scheduler decides
        ("0.5.13", "extra_buffer_lazy", True, False, False, 4),
        ("0.5.23", "extra_buffer", True, False, False, 5),
        # SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK (0.5.17 on): base 3 → 2, given back to no_buffer
        ("0.5.23", "extra_buffer", True, False, True, 4),
        ("0.5.23", "no_buffer", False, False, True, 3),
        ("0.5.23", "extra_buffer_lazy", True, False, True, 3),
        ("0.5.16", "extra_buffer", True, False, True, 5),
        ("0.5.23", "off", True, False, False, 1),
    ],
)
def test_slots_per_request(version, strategy, overlap, spec, lock, slots):
    rel = sglang.release(version)
    assert rel.slots_per_request(strategy, overlap=overlap, spec_decoding=spec, skip_decode_lock=lock) == slots


def test_strategy_by_release():
    nh, qn, rel = load_model("nemotron-h"), load_model("qwen3-next"), sglang.release
    # auto is no_buffer until 0.5.13; from 0.5.14 extra_buffer where the architecture has it and the overlap
    # scheduler is on (or pages are longer than a token)
    assert rel("0.5.13").strategy(nh) == "no_buffer" and rel("0.5.14").strategy(nh) == "extra_buffer"
    assert rel("0.5.23").strategy(nh, overlap=False) == "no_buffer"
    assert rel("0.5.23").strategy(nh, overlap=False, page_size=64) == "extra_buffer"
    assert rel("0.5.23").strategy(load_model("lfm2")) == "no_buffer"
    # extra_buffer: Qwen3-Next from 0.5.7, Nemotron-H from 0.5.13; lazy from 0.5.13
    assert rel("0.5.7").strategy(qn, "extra_buffer") == "extra_buffer"
    with pytest.raises(PlanError, match="refuses the extra_buffer strategy for NemotronHForCausalLM"):
        rel("0.5.12").strategy(nh, "extra_buffer")
    with pytest.raises(PlanError, match="has no radix strategy 'extra_buffer_lazy'"):
        rel("0.5.12").strategy(qn, "extra_buffer_lazy")
    with pytest.raises(PlanError, match="has no radix strategy 'extra_buffer'"):
        rel("0.5.6").strategy(qn, "extra_buffer")
    # 0.5.14 on: an explicit no_buffer with the overlap scheduler on fails SGLang's assertion
    with pytest.raises(PlanError, match="no_buffer do not support overlap schedule"):
        rel("0.5.14").strategy(nh, "no_buffer")
    assert rel("0.5.14").strategy(nh, "no_buffer", overlap=False) == "no_buffer"
    assert rel("0.5.13").strategy(nh, "no_buffer") == "no_buffer"
    # lazy needs the overlap scheduler
    with pytest.raises(PlanError, match="Lazy extra buffer requires overlap schedule"):
        rel("0.5.23").strategy(nh, "extra_buffer_lazy", overlap=False)


def test_requests_by_band():
    def adm(version, requested=None, pool=3000, ratio=3, tokens=1000):
        return sglang.Admission(sglang.release(version), pool, ratio, tokens, 8192, requested)

    # 0.5.2–0.5.9 (tp_worker.py / ModelRunner): with no --max-running-requests the count is bounded by half the
    # KV tokens: min(1000 // 2, min(estimate 2048, 3000 // 3)) = 500; asked 800: min(800, min(800, 1000)) = 800
    assert adm("0.5.9").value == 500 and adm("0.5.9", 800).value == 800
    # 0.5.10rc0–0.5.13 (_resolve_max_num_reqs): an asked count above the estimate is lowered to it, silently:
    # 1,000,000 tokens at 8192 → clamp(62,500, 2048, 4096) = 4096; min(5000, 4096) = 4096 under the cap 10,000
    assert adm("0.5.10", 5000, pool=30_000, tokens=1_000_000).value == 4096
    assert adm("0.5.10", 5000, pool=30_000, tokens=1_000_000).logs == []
    # 0.5.14 on: the asked count is bounded by half the KV tokens instead, and a lowered count is logged
    a = adm("0.5.14", 800)
    assert a.value == 500 and a.logs == [
        "max_running_requests was reduced from the requested 800 to 500 (per dp "
        "worker) due to the available KV cache capacity."
    ]
    # 0.5.17 on: a cap by the state pool is logged instead (and the "reduced" line is left out)
    a = adm("0.5.17", 800, pool=600)
    assert (a.value, a.capped) == (200, True) and a.logs[0].startswith("max_running_requests is capped to 200 ")
    assert adm("0.5.16", 800, pool=600).logs[0].startswith("max_running_requests was reduced from the requested 800")


def test_dtypes_by_release():
    nh = load_model("nemotron-h")
    # conv bf16 whatever the model dtype; SSM fp32 unless the config's mamba_ssm_dtype says otherwise (0.5.9 on)
    d = sglang.cache_dtypes(load_model("mamba-codestral-7b"), DtypeChoice(), sglang.release("0.5.23"))
    assert (d.conv, d.ssm) == ("bfloat16", "float32")
    # SGLANG_MAMBA_CONV_DTYPE and a float16 SSM came in 0.5.9
    with pytest.raises(PlanError, match="keeps conv states in bfloat16"):
        sglang.cache_dtypes(nh, DtypeChoice(conv="float32"), sglang.release("0.5.8"))
    with pytest.raises(PlanError, match="float16"):
        sglang.cache_dtypes(nh, DtypeChoice(ssm="float16"), sglang.release("0.5.8"))
    assert sglang.cache_dtypes(nh, DtypeChoice(ssm="float16"), sglang.release("0.5.9")).ssm == "float16"
    # --kv-cache-dtype bf16/bfloat16 from 0.5.4
    with pytest.raises(PlanError, match="bfloat16"):
        sglang.cache_dtypes(nh, DtypeChoice(kv="bfloat16"), sglang.release("0.5.3.post3"))
    # the config's mamba_ssm_dtype counts from 0.5.9, for the configs that pass themselves
    # (configs/qwen3_next.py, qwen3_5.py: mamba2_state_dtype(self)); Qwen3.5-27B's is float32 either way, so
    # check the rule through the release
    rel = sglang.release
    q = load_model("qwen3.5-27b")
    assert rel("0.5.9").ssm_from_config(q) and not rel("0.5.8").ssm_from_config(q)
    assert not rel("0.5.23").ssm_from_config(load_model("jamba"))


def test_speculative_buffers():
    # D = --spec-tokens 3 + 1 = 4 draft tokens, --max-running-requests 48 (SGLang's default for speculative
    # decoding). 0.5.17 on, extra_buffer (5 slots): K = ⌊(R·r/(1+r) − per·(1+D)) / (per·(1 + D/5))⌋
    # = ⌊(20,344,581,928.4 − 510,689,280) / 183,848,140.8⌋ = 107; buffers min(48, 107 // 5) + 1 = 22 rows
    r = sg_fit(spec_tokens=3)
    assert r.pool.size == (R * 0.9 / 1.9 - PER * 5) // (PER * 1.8) == 107
    assert r.split.spec_reserve == PER * 22 * 4 and r.spec.rows == 22 and r.max_running_requests == 21
    # intermediate_ssm_state_cache: 22·4·24·4,194,304 B; the conv windows overlap and are kept once from
    # 0.5.14: 22·24·10,240·(4 + 3 − 1)·2 B instead of 22·4·24·61,440 B
    assert r.spec.ssm_bytes == 22 * 4 * 24 * 4_194_304
    assert r.spec.conv_bytes == 22 * 24 * 10_240 * 6 * 2
    assert "intermediate_ssm_state_cache size: 8.25GB intermediate_conv_window_cache size: 0.06GB" in r.logs[0]
    # --draft-tokens sets D directly
    assert sg_fit(spec_tokens=3, draft_tokens=2).spec.draft == 2
    # 0.5.10rc0–0.5.13: no_buffer (auto) with speculative decoding is refused; 0.5.9 turns the radix cache off
    with pytest.raises(PlanError, match="not compatible with radix cache"):
        sg_fit(version="0.5.13", spec_tokens=1)
    assert sg_fit(version="0.5.9", spec_tokens=1).strategy == "off"


def test_page_size():
    # KV tokens are floored to the page: 1,380,874 → 1,380,864 with 64-token pages
    assert sg_fit(page_size=64).kv_tokens == 1_380_874 // 64 * 64
    # no_buffer takes only one-token pages: refused from 0.5.14, reset to 1 in 0.5.11–0.5.13
    with pytest.raises(PlanError, match="no_buffer only supports page_size=1"):
        sg_fit(radix="no_buffer", overlap=False, page_size=64)
    assert sg_fit(version="0.5.12", page_size=64).kv_tokens == 1_380_874


def test_multimodal_reserve():
    # 0.5.18 on: a multimodal model's split loses SGLANG_VLM_CACHE_SIZE_MB = 100 MB first
    a, b = sg_fit("qwen3.5-27b", version="0.5.17"), sg_fit("qwen3.5-27b", version="0.5.18")
    assert a.budget - b.budget == 100 << 20


def test_cli_flags(run_cli):
    code, out, err = run_cli(
        "fit",
        "nemotron-h",
        "--ctx",
        "8192",
        "--kv-budget",
        "40GiB",
        "--engine",
        "sglang",
        "--sglang-env",
        "SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=1",
        "--json",
    )
    assert code == 0, err
    d = json.loads(out)["sglang"]
    # 198 Mamba slots at 0.5.23 (the K of test_split_by_band's table, derived in its comment)
    # over 4 slots a request: extra_buffer (Nemotron-H is in _MAMBA_EXTRA_BUFFER_ARCHS from 0.5.13) with the overlap
    # scheduler and SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK, base 3 → 2 (test_slots_per_request's 0.5.23 row)
    assert (d["state_slots_per_request"], d["max_running_requests"]) == (4, 198 // 4)
    code, out, err = run_cli(
        "fit",
        "nemotron-h",
        "--ctx",
        "8192",
        "--kv-budget",
        "40GiB",
        "--engine",
        "sglang",
        "--sglang-version",
        "0.5.13",
        "--disable-overlap-schedule",
        "--radix",
        "extra_buffer",
        "--json",
    )
    assert code == 0 and json.loads(out)["sglang"]["state_slots_per_request"] == 4
    for args, needle in (
        (("--sglang-env", "FOO=1"), "hybridplan models only SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK"),
        (("--sglang-env", "SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK"), "give SGLANG_OPT_MAMBA"),
        (("--page-size", "0"), "--page-size must be positive"),
        (("--sglang-version", "0.5.0rc2"), "has no Mamba state pool"),
    ):
        code, out, err = run_cli(
            "fit", "nemotron-h", "--ctx", "8192", "--kv-budget", "40GiB", "--engine", "sglang", *args
        )
        assert code == 2 and out == "" and needle in err and err.count("\n") == 1, err
