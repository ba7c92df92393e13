"""SGLang rules that hold for some releases only and that its own code, run by validation/sglang.py, showed
hybridplan had wrong: the KV headroom for speculative decoding and the ignored --max-mamba-cache-size
(0.5.2–0.5.6.post2), the Nemotron-H checkpoints a release cannot read, and the lazy strategy refused with
speculative decoding (0.5.13–0.5.16). Paths are those of the SGLang wheels (sglang/srt/...).

Nemotron-H-8B as in tests/test_sglang.py: per = 102,137,856 B a sequence, a KV cell of 16,384 B a token,
R = 40 GiB = 42,949,672,960 B, a state share of R·0.9/1.9 = 199.19 sequences.
"""

from __future__ import annotations

import json

import pytest

from hybridplan.adapters import spec_from_config
from hybridplan.engines import sglang
from hybridplan.errors import NotServed, PlanError
from hybridplan.loader import load_model
from tests.test_sglang import CELL, PER, R, sg_fit

pytestmark = pytest.mark.unit


def test_speculative_decoding_adds_kv_headroom_until_0_5_6_post2():
    # model_runner.py init_memory_pool, 0.5.2–0.5.6.post2: the target's max_total_num_tokens becomes
    # T + max_num_reqs·speculative_num_steps·speculative_eagle_topk + max_num_reqs·speculative_num_draft_tokens + 100
    # (draft_runner_cache_size), before the page floor. 0.5.6.post1, radix on, --spec-tokens 1: D = 2, steps 1,
    # top-k 1, 48 requests asked. K = ⌊199.19 / (1 + D)⌋ = 66; 3 slots a request: 66 // 3 = 22 requests;
    # KV = R − 66·3·per = 22,726,377,472 B → 1,387,108 tokens; + 22·1·1 + 22·2 + 100 = 166 → 1,387,274
    r = sg_fit(version="0.5.6.post1", spec_tokens=1)
    assert (r.pool.size, r.admission.request_pool) == (66, 22)
    assert r.kv_bytes == R - 66 * 3 * PER == 22_726_377_472
    assert r.kv_tokens == 22_726_377_472 // CELL + 166 == 1_387_274
    assert r.draft_headroom == 166 and "adds 166 KV tokens" in r.notes[0]
    assert "#tokens: 1387274," in r.kv_log
    # with 64-token pages the sum is floored: (1,387,108 + 166) // 64 · 64 = 1,387,264
    assert sg_fit(version="0.5.6.post1", spec_tokens=1, page_size=64).kv_tokens == 1_387_264
    # model_runner_kv_cache_mixin.py from 0.5.7: draft_runner_cache_size = max_total_num_tokens, no headroom
    r = sg_fit(version="0.5.7", spec_tokens=1)
    assert r.draft_headroom == 0 and r.kv_tokens == r.kv_bytes // CELL
    # without speculative decoding nothing is added
    assert sg_fit(version="0.5.6.post1").kv_tokens == (R - 199 * PER) // CELL


def test_speculative_headroom_qwen3_next_0_5_2():
    # SGLang 0.5.2's model_runner.py run by validation/sglang.py: Qwen3-Next, R = 40 GiB, D = 2, 48 requests:
    # 1,596,958 KV tokens; the split alone leaves 1,596,714, and 48·1 + 48·2 + 100 = 244 more
    r = sg_fit("qwen3-next", version="0.5.2", spec_tokens=1)
    assert r.admission.request_pool == 48 and r.draft_headroom == 244
    assert r.kv_tokens == 1_596_958 == 1_596_714 + 244


def test_max_mamba_cache_size_is_ignored_with_the_radix_cache_until_0_5_6_post2():
    # model_runner.py handle_max_mamba_cache, 0.5.3.post2–0.5.6.post2: the flag is read only under
    # --disable-radix-cache (or a zero per-request state); with the radix cache on K = ⌊199.19 / (1 + 0)⌋ = 199
    r = sg_fit(version="0.5.6.post1", max_mamba_cache_size=100)
    assert r.pool.size == 199 and r.kv_bytes == R - 199 * PER
    assert r.split.fixed_ignored and "ignores --max-mamba-cache-size while the radix cache is on" in r.notes[0]
    # with the radix cache off it is the pool: K = 100, KV = R − 100·per
    r = sg_fit(version="0.5.6.post1", max_mamba_cache_size=100, radix="off")
    assert (r.pool.size, r.kv_bytes) == (100, R - 100 * PER) and not r.split.fixed_ignored
    # 0.5.7 (model_runner_kv_cache_mixin.py) reads it with the radix cache on too: K = 100
    r = sg_fit(version="0.5.7", max_mamba_cache_size=100)
    assert r.pool.size == 100 and not any("ignores" in n for n in r.notes)


def test_nemotron_layers_block_type_is_read_from_0_5_10rc0(run_cli):
    # configs/nemotron_h.py: NemotronHConfig takes the layers only from hybrid_override_pattern until 0.5.9
    # (a config without it keeps the class's default pattern); layers_block_type is read from 0.5.10rc0.
    # Nemotron-3-Ultra's config gives its layers only as layers_block_type.
    ultra, rel = load_model("nemotron-3-ultra"), sglang.release
    for version in ("0.5.3.post1", "0.5.6", "0.5.9"):
        assert not rel(version).serves(ultra)
        with pytest.raises(
            NotServed,
            match="gives them as layers_block_type, which configs/nemotron_h.py NemotronHConfig reads from 0.5.10rc0",
        ):
            rel(version).check_served(ultra)
    rel("0.5.10rc0").check_served(ultra)
    # the same for Nemotron-H-8B rewritten with layers_block_type in place of its pattern
    config = json.loads(load_model("nemotron-h").config_json)
    kinds = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
    config["layers_block_type"] = [kinds[c] for c in config.pop("hybrid_override_pattern")]
    rewritten = spec_from_config(config, name="nemotron-h-listed")
    assert not rel("0.5.9").serves(rewritten) and rel("0.5.10rc0").serves(rewritten)
    assert rel("0.5.9").serves(load_model("nemotron-h"))
    # refused as any model a release does not serve: exit 2, one line
    code, out, err = run_cli(
        "fit",
        "nemotron-3-ultra",
        "--ctx",
        "8192",
        "--kv-budget",
        "40GiB",
        "--engine",
        "sglang",
        "--sglang-version",
        "0.5.9",
    )
    assert code == 2 and out == "" and "cannot read the layers of nemotron-3-ultra" in err, err


def test_nemotron_moe_layers_from_0_5_6():
    # models/nemotron_h.py: ALL_DECODER_LAYER_TYPES has no MOE ('E') entry before 0.5.6, so NemotronHModel fails
    # on the first MoE layer; Nemotron-3 Nano and Super have them ('E' in hybrid_override_pattern)
    rel = sglang.release
    for name in ("nemotron-3-nano-30b-a3b", "nemotron-3-super-120b-a12b"):
        spec = load_model(name)
        for version in ("0.5.3.post1", "0.5.5.post3"):
            assert not rel(version).serves(spec)
            with pytest.raises(NotServed, match="has no MoE layer class"):
                rel(version).check_served(spec)
        rel("0.5.6").check_served(spec)
    # the dense Nemotron-H (M, * and - only) from its class's first release
    rel("0.5.3.post1").check_served(load_model("nemotron-h"))


@pytest.mark.parametrize(
    "version,why",
    [
        # server_args.py 0.5.13–0.5.13.post1 _handle_mamba_radix_cache
        ("0.5.13", "extra_buffer_lazy is not yet supported with speculative decoding"),
        ("0.5.13.post1", "extra_buffer_lazy is not yet supported with speculative decoding"),
        # server_args.py 0.5.14–0.5.16 _validate_mamba_extra_buffer
        ("0.5.14", "extra_buffer_lazy unsupported with spec."),
        ("0.5.16", "extra_buffer_lazy unsupported with spec."),
    ],
)
def test_lazy_strategy_refused_with_speculative_decoding(version, why):
    with pytest.raises(PlanError, match=f"refuses the extra_buffer_lazy strategy with speculative decoding.*{why}"):
        sg_fit("qwen3-next", version=version, radix="extra_buffer_lazy", spec_tokens=1)
    # without speculative decoding it runs: 3 + 1 slots a request
    assert sg_fit("qwen3-next", version=version, radix="extra_buffer_lazy").ratio == 4


@pytest.mark.parametrize("version", ["0.5.17", "0.5.23"])
def test_lazy_strategy_with_speculative_decoding_from_0_5_17(version):
    # 0.5.17 refuses it only with DFlash (hybridplan sizes EAGLE), later releases not at all
    r = sg_fit("qwen3-next", version=version, radix="extra_buffer_lazy", spec_tokens=1)
    assert r.strategy == "extra_buffer_lazy" and r.starts


def test_lazy_refusal_exits_2(run_cli):
    code, out, err = run_cli(
        "fit",
        "qwen3-next",
        "--ctx",
        "8192",
        "--kv-budget",
        "40GiB",
        "--engine",
        "sglang",
        "--sglang-version",
        "0.5.14",
        "--radix",
        "extra_buffer_lazy",
        "--spec-tokens",
        "1",
    )
    assert code == 2 and out == "" and "extra_buffer_lazy unsupported with spec." in err, err
