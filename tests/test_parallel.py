"""Pipeline parallelism: each engine's layer split, what each stage holds, and how the engines reconcile the
stages. Figures from the engines' code, release and file named beside each, or derived in a comment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from msgspec.structs import replace

from hybridplan.engines.common import Shortfall
from hybridplan.engines.sglang import parallel as sglang_pp
from hybridplan.engines.vllm import parallel as vllm_pp
from hybridplan.errors import PlanError
from hybridplan.loader import load_model
from hybridplan.scenario import Budget
from hybridplan.stages import decoder_layers, stage_rank_bytes, stages
from hybridplan.weights import rank_bytes
from tests.helpers import GiB, one_line_error, scenario

pytestmark = pytest.mark.unit


# --- the split ---------------------------------------------------------------------------------------


def test_vllm_split_gives_the_leftover_layers_to_the_stages_before_the_last():
    # vllm/distributed/utils.py get_pp_indices (the same in 0.10.0 and 0.33.0): 60 layers over 8 stages are 7
    # each and 4 left over, added to partitions[-2], [-3], [-4], [-5]: 7,7,7,8,8,8,8,7
    bounds = vllm_pp.split(60, 8)
    assert [e - s for s, e in bounds] == [7, 7, 7, 8, 8, 8, 8, 7]
    assert bounds[0] == (0, 7) and bounds[-1] == (53, 60)
    # 62 layers over 4: 15 each, 2 left over to the middle stages (partitions[-2], [-3]): 15,16,16,15
    assert [e - s for s, e in vllm_pp.split(62, 4)] == [15, 16, 16, 15]
    assert vllm_pp.split(48, 2) == ((0, 24), (24, 48))


def test_sglang_split_gives_the_leftover_layers_to_the_last_stages():
    # sglang/srt/distributed/utils.py get_pp_indices (0.5.6-0.5.23): base 7, the last 60 % 8 = 4
    # stages one more each: 7,7,7,7,8,8,8,8
    assert [e - s for s, e in sglang_pp.split(60, 8)] == [7, 7, 7, 7, 8, 8, 8, 8]
    assert [e - s for s, e in sglang_pp.split(62, 4)] == [15, 15, 16, 16]
    # up to 0.5.5.post3 (0.5.2, 0.5.4, 0.5.5 read) the last stage takes all that is left: 7 × 7 and 11
    from hybridplan.engines.sglang.releases import release

    assert [e - s for s, e in sglang_pp.split(60, 8, None, release("0.5.4"))] == [7] * 7 + [11]
    assert [e - s for s, e in sglang_pp.split(60, 8, None, release("0.5.6"))] == [7, 7, 7, 7, 8, 8, 8, 8]


def test_layer_partition_overrides_the_split_and_is_checked_as_the_engines_check_it():
    assert vllm_pp.split(60, 3, (10, 20, 30)) == ((0, 10), (10, 30), (30, 60))
    # the engines' ValueError texts (vllm/distributed/utils.py, sglang/srt/distributed/utils.py)
    with pytest.raises(PlanError, match=r"len\(partitions\)=2 does not match pp_size=3"):
        vllm_pp.split(60, 3, (30, 30))
    with pytest.raises(PlanError, match=r"sum\(partitions\)=59 does not match num_hidden_layers=60"):
        sglang_pp.split(60, 2, (30, 29))
    with pytest.raises(PlanError, match="leaves a stage without layers"):
        vllm_pp.split(60, 2, (60, 0))


# --- what a stage holds ------------------------------------------------------------------------------


def test_a_stage_holds_its_own_mix_of_attention_and_recurrent_layers():
    # Qwen3.5-397B-A17B: 60 layers, full attention every 4th (layer_types: 3, 7, 11, …), each with a MoE block.
    # vLLM at PP 4: 15 layers a stage; layers 0-14 hold attention at 3, 7, 11 (3) and 12 GDN; 15-29 at 15, 19,
    # 23, 27 (4) and 11 GDN
    sc = scenario("qwen3.5-397b-a17b", pp=4)
    sts = vllm_pp.pipeline(sc)
    assert [st.spec.layer_counts for st in sts[:2]] == [
        {"gdn": 12, "attention": 3, "moe": 15},
        {"gdn": 11, "attention": 4, "moe": 15},
    ]
    assert (sts[0].first, sts[0].last, sts[-1].last) == (True, False, True)


def test_nemotron_h_stages_follow_its_layer_pattern():
    # Nemotron-H-8B: 52 characters of hybrid_override_pattern, MLP layers among them; at PP 2 each stage gets 26
    spec = load_model("nemotron-h-8b")
    pattern = json.loads(spec.config_json)["hybrid_override_pattern"]
    assert len(decoder_layers(spec)) == len(pattern) == 52
    st = stages(spec, vllm_pp.split(52, 2))
    for s in st:
        part = pattern[s.start : s.end]
        assert s.spec.layer_counts == {
            k: v
            for k, v in (("mamba2", part.count("M")), ("attention", part.count("*")), ("mlp", part.count("-")))
            if v
        }


def test_stage_weights_are_the_models_parts_in_the_stages_share():
    # untied: the stages' weights add up to the whole rank's (the same parts, each in one stage)
    spec = load_model("qwen3.5-397b-a17b")
    whole, _ = rank_bytes(spec, 4, "bfloat16")
    sts = stages(spec, vllm_pp.split(60, 4))
    parts = [stage_rank_bytes(spec, st, 4, "bfloat16")[0] for st in sts]
    assert abs(sum(parts) - whole) <= len(sts)
    # the first holds the embedding, the last the LM head: both above a middle stage of the same layers
    assert parts[0] > parts[1] and parts[3] > parts[2]
    # one stage of everything is the whole model
    one = stages(spec, ((0, 60),))[0]
    assert abs(stage_rank_bytes(spec, one, 4, "bfloat16")[0] - whole) <= 1


def test_quantized_stage_weights_add_up_as_well():
    # Nemotron-3-Super's FP8 checkpoint (modelopt): the same parts priced by its scheme, each in one stage
    spec = load_model("nemotron-3-super-120b-a12b")
    whole, _ = rank_bytes(spec, 2, "bfloat16")
    sts = stages(spec, vllm_pp.split(len(decoder_layers(spec)), 4))
    assert sum(stage_rank_bytes(spec, st, 2, "bfloat16")[0] for st in sts) == pytest.approx(whole, abs=8)


def test_tied_embeddings_are_built_again_on_the_last_stage():
    # vLLM builds the embedding on the last rank too where the LM head is tied to it (vllm/model_executor/models/
    # qwen2.py-style ``is_first_rank or (tie_word_embeddings and is_last_rank)``): the stages hold one embedding
    # more than the whole model. Qwen3.5-0.8B ties them (tie_word_embeddings: true)
    spec = load_model("qwen3.5-0.8b-base")
    whole, _ = rank_bytes(spec, 1, "bfloat16")
    sts = stages(spec, vllm_pp.split(len(decoder_layers(spec)), 2))
    total = sum(stage_rank_bytes(spec, st, 1, "bfloat16")[0] for st in sts)
    config = json.loads(spec.config_json)["text_config"]
    padded = -(-config["vocab_size"] // 64) * 64  # VocabParallelEmbedding pads to 64
    assert total - whole == pytest.approx(padded * config["hidden_size"] * 2, abs=4)


# --- vLLM: the stages reconciled ---------------------------------------------------------------------


def test_vllm_stage_block_holds_one_page_per_layer_of_its_fullest_projected_group():
    # From 0.11.0 the groups are the whole model's (vllm/v1/core/kv_cache_utils.py get_kv_cache_configs):
    # Qwen3.5-397B's 45 GDN layers make 3 groups of 15 (layers dealt strided, gdn[i::3]) and its 15 attention
    # layers one. Stage 0 (layers 0-14) holds GDN 0-11: 4 in each group, and 3 attention layers; stage 3 (45-59)
    # holds GDN 34-44: 3, 4, 4 (34 % 3 = 1 opens group 1) and 4 attention layers. A block of a stage is 4 pages,
    # where the whole model's is 15; with the same 40 GiB on every stage, the blocks are budget // (4 · page).
    sc = scenario("qwen3.5-397b-a17b", 32768, tp=4, pp=4, engine="vllm", budget=Budget(kv_budget=40 * GiB))
    f = vllm_pp.fit(sc)
    cap = f.chosen.capacity
    held = [c.group_layers for c in cap.stage_caches]
    assert held[0] == (4, 4, 4, 3) and held[3] == (3, 4, 4, 4)
    assert cap.num_blocks == 40 * GiB // (4 * cap.layout.page_bytes)
    from hybridplan.engines.vllm.sizing import fit as tp_fit

    flat = tp_fit(replace(sc, pp=1)).chosen.capacity
    assert flat.num_blocks == 40 * GiB // (15 * flat.layout.page_bytes)
    # the scheduler's groups are the whole model's: a request pins as many blocks as without PP
    assert cap.blocks_per_request == flat.blocks_per_request
    assert f.flags.endswith("--pipeline-parallel-size 4")


def test_vllm_keeps_the_smallest_block_count_of_all_stages():
    # on a GPU the last stage runs the profiling sampler pass (gpu_model_runner.py profile_run, is_last_rank) and
    # holds the LM head: it has the least left, and its block count is the engine's
    sc = scenario("qwen3.5-397b-a17b", 32768, tp=4, pp=4, engine="vllm", budget=Budget(gpu_mem=80 * GiB, gpu="h100"))
    f = vllm_pp.fit(sc)
    caches = f.chosen.capacity.stage_caches
    assert f.chosen.capacity.num_blocks == min(c.num_blocks for c in caches) == caches[f.binding].num_blocks
    assert f.binding == 3
    last, middle = caches[3].memory, caches[2].memory
    assert last.term("activation") > middle.term("activation")
    assert f.budget == caches[3].budget


def test_vllm_before_0_11_each_stage_groups_its_own_layers():
    # 0.10.x: get_kv_cache_config per worker, then unify_kv_cache_configs (vllm/v1/engine/core.py): a stage's
    # group size is its own smallest bucket. Nemotron-H-8B's stages of 26 layers hold 12 Mamba-2 and 2 attention
    # layers each: group size 2, where the whole model's is 4 (24 Mamba-2, 4 attention)
    sc = scenario("nemotron-h-8b", 8192, minor="0.10.2", pp=2, engine="vllm", budget=Budget(kv_budget=20 * GiB))
    cap = vllm_pp.fit(sc).chosen.capacity
    assert [c.group_layers for c in cap.stage_caches] == [(2,), (2,)]
    assert cap.num_blocks == 20 * GiB // (2 * cap.layout.page_bytes)


def test_vllm_refuses_pp_with_a_drafter_that_does_not_support_it():
    # the real 0.23.0 log: Qwen3.6-27B with MTP at PP 2 refused, "Pipeline parallelism is not supported for this
    # model" (tests/data/logs/vllm-0.23.0-qwen3.6-27b-nvfp4-mtp-2xrtx5060ti-4.log, raised for its Qwen3_5MTP
    # drafter). Qwen3_5MTP implements SupportsPP from 0.30.0 (vllm/model_executor/models/qwen3_5_mtp.py)
    from hybridplan.scenario import Speculative

    spec = load_model("qwen3.6-27b")
    sp = Speculative(method="mtp", num_tokens=3)
    sc = scenario(spec, 65535, minor="0.23.0", pp=2, spec_tokens=3, speculative=sp)
    with pytest.raises(PlanError, match="Pipeline parallelism is not supported for this model"):
        vllm_pp.check(sc)
    log = open("tests/data/logs/vllm-0.23.0-qwen3.6-27b-nvfp4-mtp-2xrtx5060ti-4.log").read()
    assert "Pipeline parallelism is not supported for this model" in log and "'pipeline_parallel_size': 2" in log
    vllm_pp.check(replace(sc, vllm=replace(sc.vllm, release=scenario(spec, minor="0.30.0").vllm.release)))


def test_vllm_refuses_pp_for_a_class_without_supports_pp():
    # Zamba2ForCausalLM implements no SupportsPP in any release 0.10.0-0.33.0 (vllm/model_executor/models/zamba2.py)
    with pytest.raises(PlanError, match="refuses --pipeline-parallel-size 2 for Zamba2ForCausalLM"):
        vllm_pp.check(scenario("zamba2-7b", pp=2))


# --- SGLang ------------------------------------------------------------------------------------------


def _per_slot(f) -> int:
    return f.pool.bytes // f.pool.size if f.pool.size else 0


def test_sglang_charges_the_largest_stages_state_from_0_5_17():
    # kv_cache_configurator.py _handle_max_mamba_cache (0.5.17 on): the slot is priced at the largest stage's
    # share of the recurrent layers; 0.5.16 and before at every recurrent layer of the model. Nemotron-H-8B at
    # PP 2: 12 of its 24 Mamba-2 layers on each stage, so a slot costs half the whole model's from 0.5.17
    new = sglang_pp.fit(
        scenario(
            "nemotron-h-8b", 8192, sglang_version="0.5.23", pp=2, engine="sglang", budget=Budget(kv_budget=20 * GiB)
        )
    )
    old = sglang_pp.fit(
        scenario(
            "nemotron-h-8b", 8192, sglang_version="0.5.16", pp=2, engine="sglang", budget=Budget(kv_budget=20 * GiB)
        )
    )
    whole = sum(m.kind == "mamba2" for m in load_model("nemotron-h-8b").mixers)
    assert whole == 24
    assert len(new.stage_pools[0].fit.pool.fp.state) == 1
    assert new.stage_pools[0].fit.pool.fp.state[0].count == 12
    assert old.stage_pools[0].fit.pool.fp.state[0].count == 24
    # the KV token capacity of every stage is the smallest (all-reduce MIN)
    assert new.min_kv_tokens == min(p.fit.kv_tokens for p in new.stage_pools) == new.kv_tokens
    assert new.flags.endswith("--pp-size 2")


def test_sglang_qwen35_before_0_5_10_builds_every_layer_on_every_stage():
    # sglang#21070: Qwen3.5's make_layers took no PP rank (sglang/srt/models/qwen3_5.py in 0.5.9), so each stage
    # loaded the whole model; 0.5.10 passes pp_rank
    old = sglang_pp.pipeline(scenario("qwen3.5-27b", sglang_version="0.5.9", pp=2))
    new = sglang_pp.pipeline(scenario("qwen3.5-27b", sglang_version="0.5.10", pp=2))
    assert len(old[1].spec.mixers) == 64 and len(new[1].spec.mixers) == 32


def test_a_stage_left_without_memory_is_a_shortfall():
    sc = scenario("qwen3.5-397b-a17b", 32768, tp=1, pp=2, engine="vllm", budget=Budget(gpu_mem=80 * GiB, gpu="h100"))
    f = vllm_pp.fit(sc)
    assert isinstance(f, Shortfall) and "PP stage 0" in f.problem


# --- the command line --------------------------------------------------------------------------------


def test_fit_reads_the_engines_pp_flags_and_prints_them_back(run_cli):
    code, out, _ = run_cli(
        "fit",
        "--gpu-type",
        "h100",
        "--json",
        "--",
        "vllm",
        "serve",
        "Qwen/Qwen3.5-397B-A17B",
        "--tensor-parallel-size",
        "4",
        "--pipeline-parallel-size",
        "4",
        "--max-model-len",
        "32768",
    )
    d = json.loads(out)
    assert d["vllm"]["pp"] == 4 and len(d["vllm"]["stages"]) == 4
    argv = d["commands"]["vllm"]["argv"]
    assert argv[argv.index("--pipeline-parallel-size") + 1] == "4"
    code2, out2, _ = run_cli("fit", "--gpu-type", "h100", "--json", "--", *argv)
    assert json.loads(out2)["vllm"]["modes"] == d["vllm"]["modes"]
    code, out, _ = run_cli(
        "fit",
        "--gpu-type",
        "h100",
        "--json",
        "--",
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "Qwen/Qwen3.5-397B-A17B",
        "--tp-size",
        "4",
        "--pp-size",
        "4",
        "--context-length",
        "32768",
    )
    d = json.loads(out)
    assert d["sglang"]["pp"] == 4 and len(d["sglang"]["stages"]) == 4
    sg = d["commands"]["sglang"]["argv"]
    assert sg[sg.index("--pp-size") + 1] == "4"


def test_a_partition_that_does_not_name_pp_stages_is_one_line(run_cli):
    one_line_error(
        *run_cli("fit", "qwen3.5-27b", "--kv-budget", "20GiB", "--pp", "2", "--pp-layers", "10,20,34"),
        "names 3 stages",
        "--pp is 2",
    )


# --- data and expert parallelism ---------------------------------------------------------------------


def _expert_bytes(spec, ranks: int) -> float:
    """The routed experts' bytes on one of ``ranks`` ranks, sliced (hybridplan/weights parts ``experts.*``)."""
    from hybridplan.weights import _bytes, rank_params
    from hybridplan.weights.families import parts

    every = [p for p in parts(spec.architecture, json.loads(spec.config_json), spec.family) if p.section != "mtp"]
    return sum(
        _bytes(p, rank_params(p, ranks, spec.hidden_size), 2, None)
        for p in every
        if p.group == "moe" and p.name.startswith("experts.")
    )


def test_vllm_dp_slices_the_experts_over_all_data_and_tensor_ranks():
    # vllm/model_executor/layers/fused_moe/config.py FusedMoEParallelConfig.make (0.33.0): without EP the MoE's
    # TP is flattened across DP (tp_size = dp × tp); the attention and GDN layers stay split over the engine's tp.
    # Qwen3.5-397B at TP 2 × DP 2 holds the experts as TP 4 does and everything else as TP 2 does
    spec = load_model("qwen3.5-397b-a17b")
    tp2 = stage_rank_bytes(spec, None, 2, "bfloat16")[0]
    tp4 = stage_rank_bytes(spec, None, 4, "bfloat16")[0]
    dp = stage_rank_bytes(spec, None, 2, "bfloat16", vllm_pp.sharding(scenario(spec, tp=2, dp=2)))[0]
    assert dp == pytest.approx(tp2 - _expert_bytes(spec, 2) + _expert_bytes(spec, 4), abs=4)
    assert tp4 < dp < tp2
    # EP deals whole experts: 512 over 4 ranks is 128 each, the bytes of a 4-way slice
    ep = stage_rank_bytes(
        spec, None, 2, "bfloat16", vllm_pp.sharding(scenario(spec, tp=2, dp=2, expert_parallel=True))
    )[0]
    assert ep == pytest.approx(dp, abs=4)
    # over 3 ranks (TP 1 × DP 3 with EP) the most loaded holds ceil(512 / 3) = 171 experts, 171/512 of them, not
    # a third (determine_expert_map from 0.10.1: the first 512 % 3 = 2 ranks one more each)
    three = stage_rank_bytes(spec, None, 1, "bfloat16", vllm_pp.sharding(scenario(spec, dp=3, expert_parallel=True)))[0]
    one = stage_rank_bytes(spec, None, 1, "bfloat16")[0]
    assert three == pytest.approx(one - _expert_bytes(spec, 1) * (1 - 171 / 512), abs=4)


def test_vllm_dp_engines_each_hold_their_own_cache():
    # each DP rank is an engine with its own scheduler and KV cache: its figures are one engine's, and the
    # requests of the context all engines hold are dp times one's
    sc = scenario(
        "qwen3.5-397b-a17b",
        32768,
        tp=8,
        dp=2,
        expert_parallel=True,
        engine="vllm",
        budget=Budget(gpu_mem=80 * GiB, gpu="h100"),
    )
    f = vllm_pp.fit(sc)
    assert f.total_concurrency == pytest.approx(2 * f.chosen.capacity.max_concurrency)
    assert "--data-parallel-size 2 --enable-expert-parallel" in f.flags


def test_vllm_refuses_expert_parallel_without_experts():
    # vllm/config/model.py _verify_with_expert_parallelism (0.33.0)
    with pytest.raises(PlanError, match="Number of experts in the model must be greater than 0"):
        vllm_pp.pipeline(scenario("qwen3.5-27b", expert_parallel=True))


def test_sglang_dp_attention_sizes_each_rank_at_its_attention_group():
    # --enable-dp-attention: attn_tp = tp // dp (qwen3_next.py and nemotron_h.py build their mixers at
    # get_parallel().attn_tp_size); at TP 4, DP 4 a rank keeps whole heads of its own requests, as TP 1 does
    from hybridplan.engines.sglang.pool import footprint as sglang_footprint

    spec = load_model("nemotron-3-super-120b-a12b")
    sc = scenario(
        spec, 32768, tp=4, dp=4, dp_attention=True, ep_size=4, engine="sglang", budget=Budget(kv_budget=30 * GiB)
    )
    f = sglang_pp.fit_data_parallel(sc)
    one = sglang_footprint(scenario(spec, 32768, tp=1))
    assert f.pool.fp.state_bytes == one.state_bytes and f.pool.fp.kv_bytes_per_token == one.kv_bytes_per_token
    assert f.attn_tp == 1 and f.total_requests == 4 * f.max_running_requests
    assert f.flags.endswith("--dp-size 4 --enable-dp-attention --ep-size 4")
    with pytest.raises(PlanError, match="tp_size must be divisible by dp_size"):
        sglang_pp.attention_tp(replace(sc, dp=3))


def test_fit_reads_the_engines_dp_and_ep_flags(run_cli):
    code, out, _ = run_cli(
        "fit",
        "--gpu-type",
        "h100",
        "--json",
        "--",
        "vllm",
        "serve",
        "Qwen/Qwen3.5-397B-A17B",
        "-tp",
        "8",
        "-dp",
        "2",
        "--enable-expert-parallel",
        "--max-model-len",
        "32768",
    )
    d = json.loads(out)
    assert (d["vllm"]["dp"], d["vllm"]["expert_parallel"]) == (2, True)
    argv = d["commands"]["vllm"]["argv"]
    assert "--enable-expert-parallel" in argv and argv[argv.index("--data-parallel-size") + 1] == "2"
    code, out, _ = run_cli(
        "fit",
        "--gpu-type",
        "h100",
        "--json",
        "--",
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "Qwen/Qwen3-Next-80B-A3B-Instruct",
        "--tp-size",
        "4",
        "--dp-size",
        "2",
        "--enable-dp-attention",
        "--ep-size",
        "4",
        "--context-length",
        "32768",
    )
    d = json.loads(out)
    assert (d["sglang"]["dp"], d["sglang"]["attention_tp"], d["sglang"]["ep_size"]) == (2, 2, 4)
    sg = d["commands"]["sglang"]["argv"]
    assert "--enable-dp-attention" in sg and sg[sg.index("--ep-size") + 1] == "4"


def test_vllm_0_14_to_0_16_check_the_whole_models_request_against_the_smallest_stage():
    # vllm/v1/core/kv_cache_utils.py get_kv_cache_configs: 0.14.0-0.16.x call _check_enough_kv_cache_memory with
    # min(available_memory) and the global groups' max_memory_usage_bytes (vllm#34076: PP 2 refused with the
    # whole model's 24.0 GiB); 0.17.0 checks each worker's projected groups. Nemotron-H-8B at 131,072 tokens:
    # 4 attention layers × 1040-token blocks; a budget that holds a stage's half but not the whole
    base = scenario(
        "nemotron-h-8b",
        131072,
        minor="0.17.0",
        pp=2,
        engine="vllm",
        allow_long_context=True,
        budget=Budget(kv_budget=1 * GiB),
    )
    cap = vllm_pp.fit(base).chosen.capacity
    stage = max(c.request_bytes for c in cap.stage_caches)
    assert stage < cap.model_request_bytes <= 2 * stage
    budget = (stage + cap.model_request_bytes) // 2
    new = vllm_pp.fit(replace(base, budget=Budget(kv_budget=budget)))
    old = vllm_pp.fit(
        replace(
            base,
            budget=Budget(kv_budget=budget),
            vllm=replace(base.vllm, release=scenario("nemotron-h-8b", minor="0.15.0").vllm.release),
        )
    )
    assert new.chosen.capacity.problem(1) is None or "To serve at least one" not in new.chosen.capacity.problem(1)
    assert "whole model's request" in old.chosen.capacity.problem(1)
    assert "models's max seq len" in old.chosen.capacity.problem(1)  # vLLM's spelling up to 0.21.0


def test_size_shows_what_each_stage_keeps(run_cli):
    # Nemotron-H-8B at PP 2: 26 layers a stage (vLLM's split), 12 Mamba-2 and 2 attention layers each: half the
    # model's state per sequence and half its KV per token on each stage
    code, out, _ = run_cli("size", "nemotron-h-8b", "--ctx", "8192", "--pp", "2", "--json")
    d = json.loads(out)
    assert code == 0 and d["pp"] == 2 and [s["layers"] for s in d["stages"]] == [[0, 26], [26, 52]]
    for s in d["stages"]:
        assert 2 * s["state_bytes_per_sequence"] == d["state"]["bytes_per_sequence"]
        assert 2 * s["kv_bytes_per_token"] == d["kv"]["bytes_per_token"]
    assert d["stages"][0]["weights_bytes_per_rank"] > 0


def test_size_shows_each_ranks_weights_with_dp_and_ep(run_cli):
    # --data-parallel-size 2 --enable-expert-parallel at TP 8: the experts dealt over 16 ranks (as fit sizes them)
    from hybridplan.engines.vllm.dtypes import model_dtype

    code, out, _ = run_cli(
        "size", "qwen3.5-397b-a17b", "--ctx", "32k", "--tp", "8", "--dp", "2", "--enable-expert-parallel", "--json"
    )
    d = json.loads(out)
    spec = load_model("qwen3.5-397b-a17b")
    sc = scenario(spec, tp=8, dp=2, expert_parallel=True)
    want = stage_rank_bytes(spec, None, 8, model_dtype(spec, None), vllm_pp.sharding(sc))[0]
    assert code == 0 and d["stages"][0]["weights_bytes_per_rank"] == want
    assert want < d["weights"]["bytes_per_rank"]  # TP 8 alone holds an eighth of the experts, not a sixteenth


# --- per rank, as the engines' own code gives it (validation/parallel_dp_ep.py runs it from the wheels) -------


def test_vllm_expert_parallel_ranks_hold_what_determine_expert_map_deals():
    # Granite-4.0-H-Small's 72 experts over TP 8 × DP 2 with --enable-expert-parallel: EP 16
    # (fused_moe/config.py FusedMoEParallelConfig.make, ep_size = dp × tp). determine_expert_map, run per rank:
    # 0.33.0 (fused_moe/expert_map_manager.py) deals 5,5,5,5,5,5,5,5,4,4,4,4,4,4,4,4 (72 % 16 = 8 ranks one more);
    # 0.10.0 (fused_moe/layer.py) 4 to each of the first 15 and the remaining 12 to the last
    new = vllm_pp.sharding(scenario("granite-4.0-h-small", tp=8, dp=2, expert_parallel=True))
    old = vllm_pp.sharding(scenario("granite-4.0-h-small", tp=8, dp=2, expert_parallel=True, minor="0.10.0"))
    assert (new.ep, new.expert_tp, new.experts_held) == (16, 1, 5)
    assert (old.ep, old.experts_held) == (16, 12)
    rel = scenario("qwen3-next-80b-a3b").vllm.release
    assert vllm_pp.experts_held(512, 16, rel) == 32
    assert vllm_pp.experts_held(512, 3, rel) == 171  # 512 = 3 × 170 + 2: the first two ranks hold 171


def test_vllm_refuses_experts_its_fused_moe_cannot_slice():
    # without EP the MoE's TP is dp × tp (FusedMoEParallelConfig.make flattens TP across DP), and FusedMoE asserts
    # intermediate_size % tp_size == 0 (fused_moe/layer.py 0.10.0-0.23.0, fused_moe/config.py FusedMoEConfig from
    # 0.24.0): Qwen3-Next's 512 over TP 1 × DP 3, Nemotron-3-Nano's 1856 over TP 8 × DP 16 (1856 = 128 × 14.5)
    with pytest.raises(PlanError, match="intermediate size 512 is not a multiple"):
        vllm_pp.check_moe(scenario("qwen3-next-80b-a3b", dp=3))
    with pytest.raises(PlanError, match="intermediate size 1856"):
        vllm_pp.check_moe(scenario("nemotron-3-nano-30b-a3b", tp=8, dp=16))
    # dealt whole the experts are not sliced: 512 / 3 is no matter, nor 1856 at TP 8 × DP 8 (1856 = 64 × 29)
    vllm_pp.check_moe(scenario("qwen3-next-80b-a3b", dp=3, expert_parallel=True))
    vllm_pp.check_moe(scenario("nemotron-3-nano-30b-a3b", tp=8, dp=8))


def test_sglang_dp_attention_rank_holds_its_groups_heads_and_state():
    # SGLang 0.5.18 and 0.5.23, run from the wheels: compute_dp_attention_world_info (layers/dp_attention.py;
    # 0.5.23 runtime_context.py derive_attn_tp_size) gives rank 7 of TP 8 / DP 4 attn_tp 2, attention group 3;
    # configs/qwen3_next.py mamba2_cache_params at get_parallel().attn_tp_size 2: 36 GDN layers of 1,048,576 B SSM
    # (16 value heads × 128 × 128 × fp32) and 24,576 B conv (4,096 channels × 3 × bf16), mamba_cache_per_req
    # 38,633,472; configs/model_config.py get_num_kv_heads(2): 1 of its 2 KV heads
    from hybridplan.engines.sglang.pool import per_request_bytes

    for version in ("0.5.18", "0.5.23"):
        sc = scenario(
            "qwen3-next-80b-a3b",
            32768,
            tp=8,
            dp=4,
            dp_attention=True,
            engine="sglang",
            sglang_version=version,
            budget=Budget(kv_budget=20 * GiB),
        )
        assert sglang_pp.attention_tp(sc) == 2
        fp = sglang_pp.fit_data_parallel(sc).pool.fp
        assert per_request_bytes(fp) == 38_633_472 and fp.ssm_bytes // 36 == 1_048_576 and fp.conv_bytes // 36 == 24_576
        attn = [m for m in sc.spec.mixers if m.kind == "attention"]
        assert fp.kv_bytes_per_token == len(attn) * 2 * 1 * attn[0].head_dim * 2  # one KV head a rank, K and V
    # Nemotron-3-Super at TP 4 / DP 4: attn_tp 1, configs/nemotron_h.py: 40 Mamba-2 layers of 4,194,304 B SSM and
    # 61,440 B conv, 170,229,760 B a request, both KV heads on every rank
    sc = scenario(
        "nemotron-3-super-120b-a12b",
        32768,
        tp=4,
        dp=4,
        dp_attention=True,
        engine="sglang",
        sglang_version="0.5.23",
        budget=Budget(kv_budget=20 * GiB),
    )
    fp = sglang_pp.fit_data_parallel(sc).pool.fp
    assert per_request_bytes(fp) == 170_229_760 and fp.ssm_bytes // 40 == 4_194_304


def test_sglang_expert_parallel_rank_holds_experts_over_ep_sliced_over_tp_by_ep():
    # layers/moe/fused_moe_triton/layer.py FusedMoE.__init__ (0.5.23), on runtime_context.py
    # derive_parallel_widths' moe_tp_size = tp // ep: Qwen3.5-397B at TP 8, EP 4 holds 128 of 512 experts, each
    # sliced 2 ways (512 of 1024 intermediate rows); Granite-4.0-H-Small at TP 8, EP 8 holds 9 of 72 whole
    sh = sglang_pp.sharding(scenario("qwen3.5-397b-a17b", tp=8, ep_size=4, engine="sglang"))
    assert (sh.ep, sh.expert_tp, sh.experts_held) == (4, 2, 128)
    sh = sglang_pp.sharding(scenario("granite-4.0-h-small", tp=8, ep_size=8, engine="sglang"))
    assert (sh.ep, sh.expert_tp, sh.experts_held) == (8, 1, 9)


def test_sglang_dp_attention_splits_the_requests_and_the_state_pool_per_group():
    # the release's own split and request count (validation/parallel_dp_ep.py, 0.5.18 and 0.5.23 alike):
    # Qwen3-Next at TP 4 / DP 2, 20 GiB a rank: --max-mamba-cache-size 500 builds 500 // 2 = 250 slots a group
    # (mem_cache/kv_cache_configurator.py _handle_max_mamba_cache, "mamba_pool.per_dp_shard"), 958,482 KV tokens
    # (calculate_pool_sizes on hybridplan's KV cell, as the validation stands it in), and --max-running-requests
    # 100 admits 50 a group (resolve_max_num_reqs: requested // attn_dp_size)
    for version in ("0.5.18", "0.5.23"):
        sc = scenario(
            "qwen3-next-80b-a3b",
            32768,
            tp=4,
            dp=2,
            dp_attention=True,
            engine="sglang",
            sglang_version=version,
            sglang=dict(max_running_requests=100, max_mamba_cache_size=500),
            budget=Budget(kv_budget=20 * GiB),
        )
        f = sglang_pp.fit_data_parallel(sc)
        assert (f.split.pool_size, f.kv_tokens, f.max_running_requests) == (250, 958_482, 50)
        assert f.total_requests == 100
    # --max-running-requests 3 over DP 4: 0.5.23 keeps max(1, 3 // 4) = 1 a group; 0.5.18 gets 0 and raises
    # "Hybrid (mamba/linear-attention) state cache is too small to serve any requests" (kv_cache_configurator.py)
    few = dict(max_running_requests=3)
    sc = scenario(
        "qwen3-next-80b-a3b",
        32768,
        tp=4,
        dp=4,
        dp_attention=True,
        engine="sglang",
        sglang=few,
        sglang_version="0.5.23",
        budget=Budget(kv_budget=20 * GiB),
    )
    assert sglang_pp.fit_data_parallel(sc).max_running_requests == 1
    with pytest.raises(PlanError, match="3 // 4 = 0 a group and raises .Hybrid"):
        sglang_pp.fit_data_parallel(
            replace(
                sc,
                sglang=replace(
                    sc.sglang, release=scenario("qwen3-next-80b-a3b", sglang_version="0.5.18").sglang.release
                ),
            )
        )


def test_sglang_refuses_experts_its_ep_does_not_divide():
    # layers/moe/fused_moe_triton/layer.py FusedMoE.__init__ (0.5.9-0.5.23) asserts that moe_ep_size divides the
    # routed experts and deals experts // ep to each rank; vLLM deals them unevenly instead
    # (fused_moe/expert_map_manager.py determine_expert_map, 0.33.0). Granite-4.0-H-Tiny with 60 experts, not 64:
    # EP 8 does not divide them (SGLang fails), EP 4 holds 15 each; vLLM's 8 ranks hold 8,8,8,8,7,7,7,7
    import yaml

    from hybridplan.adapters import spec_from_config

    root = Path(__file__).resolve().parents[1]
    config = yaml.safe_load((root / "model_specs" / "granite-4.0-h-tiny.yaml").read_text())["config"]
    spec = spec_from_config({**config, "num_local_experts": 60}, name="granite-60")
    with pytest.raises(PlanError, match="num_experts % moe_ep_size == 0"):
        sglang_pp.sharding(scenario(spec, tp=8, ep_size=8, engine="sglang"))
    # SGLang: 60 experts / --ep-size 4 = 15 a rank; vLLM's expert parallelism spans the TP 8 ranks and gives the
    # 60 % 8 = 4 left over one each to the first ranks (determine_expert_map, 0.10.1 on): 7 + 1 = 8 on rank 0
    assert sglang_pp.sharding(scenario(spec, tp=8, ep_size=4, engine="sglang")).experts_held == 15
    assert vllm_pp.sharding(scenario(spec, tp=8, expert_parallel=True)).experts_held == 8
