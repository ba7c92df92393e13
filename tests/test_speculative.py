"""Speculative decoding with a draft: the flags as each engine reads them (hybridplan/speculative.py) and the
draft's layers in vLLM's KV cache groups (hybridplan/engines/vllm/sizing.py ``buckets``).

Figures: the method tables are read from the vLLM wheels' vllm/config/speculative.py (SpeculativeMethod) and
SGLang's sglang/srt/speculative/spec_info.py; the grouping follows vllm/v1/core/kv_cache_utils.py
(``_get_kv_cache_groups_uniform_page_size``, ``unify_kv_cache_spec_page_size``); the log figures are from
tests/data/logs (their sources in each file's header) and vllm-project/vllm#46462, as said per test.
"""

from __future__ import annotations

import json

import pytest
from msgspec.structs import replace

from hybridplan.engines.sglang.speculative import SglangFlags, speculative_from_sglang
from hybridplan.engines.vllm.blocks import layout
from hybridplan.engines.vllm.releases import release
from hybridplan.engines.vllm.settings import VllmSettings
from hybridplan.engines.vllm.sizing import buckets, capacity
from hybridplan.engines.vllm.speculative import speculative_from_vllm
from hybridplan.errors import PlanError
from hybridplan.loader import load_model
from hybridplan.scenario import DtypeChoice, Scenario
from hybridplan.spec import MLA, Attention
from hybridplan.speculative import mtp_layers

pytestmark = pytest.mark.unit

GiB = 1 << 30


def _draft(tmp_path, layers: int, kv_heads: int, head_dim: int, arch: str = "DFlashDraftModel") -> str:
    """A Qwen3-layer draft's config.json (the fields vLLM's qwen3_dflash.py reads for its attention)."""
    cfg = {
        "architectures": [arch],
        "model_type": "qwen3",
        "hidden_size": 5120,
        "num_hidden_layers": layers,
        "num_attention_heads": 32,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "intermediate_size": 17408,
        "vocab_size": 248320,
        "max_position_embeddings": 262144,
        "torch_dtype": "bfloat16",
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return str(tmp_path)


# --- vLLM: the method per release --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "method,version,accepted",
    [
        ("dflash", "0.19.1", False),
        ("dflash", "0.20.0", True),  # DFlashModelTypes enter in 0.20.0
        ("mtp", "0.10.2", False),
        ("mtp", "0.11.0", True),  # the generic name from 0.11.0
        ("qwen3_5_mtp", "0.16.0", False),
        ("qwen3_5_mtp", "0.17.0", True),
        ("medusa", "0.32.0", True),
        ("medusa", "0.33.0", False),  # 0.33.0 drops medusa and mlp_speculator
        ("eagle3", "0.10.0", True),
        ("nonsense", "0.33.0", False),
    ],
)
def test_vllm_method_by_release(method, version, accepted):
    target = load_model("qwen3.5-27b")
    cfg = {"method": method, "num_speculative_tokens": 2}
    if method in ("dflash", "eagle3"):
        cfg["model"] = "qwen3.5-0.8b-base"  # a shipped spec stands in for the draft: only acceptance is tested
    if accepted:
        assert speculative_from_vllm(cfg, target, version).num_tokens == 2
    else:
        with pytest.raises(PlanError, match=f"vLLM {version} refuses speculative method '{method}'"):
            speculative_from_vllm(cfg, target, version)


def test_vllm_mtp_names_become_mtp_from_0_11():
    # SpeculativeConfig.__post_init__: "method `qwen3_next_mtp` is deprecated and replaced with mtp" from 0.11.0
    target = load_model("qwen3-next")
    cfg = {"method": "qwen3_next_mtp", "num_speculative_tokens": 2}
    assert speculative_from_vllm(cfg, target, "0.10.2").method == "qwen3_next_mtp"
    assert speculative_from_vllm(cfg, target, "0.11.0").method == "mtp"


@pytest.mark.parametrize(
    "text,message",
    [
        ('{"method": "mtp", ', "is not valid JSON"),
        ('["mtp"]', "must be a JSON object"),
        ('{"method": "eagle", "num_speculative_tokens": 3}', "without speculative model"),
        ('{"method": "mtp", "num_speculative_tokens": 0}', "must be a positive integer"),
        ('{"model": "[ngram]"}', "ngram needs num_speculative_tokens"),
    ],
)
def test_vllm_bad_config(text, message):
    with pytest.raises(PlanError, match=message):
        speculative_from_vllm(text, load_model("qwen3.5-27b"))


def test_vllm_method_inferred_from_the_draft_name(tmp_path):
    # with no method vLLM names it from the model: "eagle3" in the name → eagle3, "dflash" → dflash (0.20.0 on)
    draft = tmp_path / "qwen3.6-27b-dflash"
    draft.mkdir()
    ref = _draft(draft, 5, 8, 128)
    sp = speculative_from_vllm({"model": ref, "num_speculative_tokens": 5}, load_model("qwen3.6-27b"), "0.20.1")
    assert sp.method == "dflash" and len(sp.layers) == 5 and sp.draft_ref == ref


# --- MTP layers from the target's config ---------------------------------------------------------------------


def test_mtp_layers_from_the_config():
    # Qwen3.5: mtp_num_hidden_layers (1) full-attention layers of the target's shape (qwen3_5_mtp.py)
    layers, n = mtp_layers(load_model("qwen3.5-27b"))
    assert n == 1 and layers == (Attention(24, 4, 256),)
    # Nemotron-3-Super: num_nextn_predict_layers 1 × mtp_hybrid_override_pattern "*E": one attention layer
    layers, n = mtp_layers(load_model("nemotron-3-super-120b-a12b"))
    assert n == 1 and len(layers) == 1 and isinstance(layers[0], Attention)
    # DeepSeek-V3: num_nextn_predict_layers 1 MLA layer (deepseek_mtp.py)
    layers, n = mtp_layers(load_model("deepseek-v3"))
    assert n == 1 and isinstance(layers[0], MLA)


def test_mtp_needs_mtp_layers():
    with pytest.raises(PlanError, match="no MTP layers"):
        speculative_from_vllm({"method": "mtp", "num_speculative_tokens": 1}, load_model("nemotron-h-8b"))


def test_mtp_tokens_default_to_the_layers():
    # no num_speculative_tokens: vLLM takes n_predict, the MTP layer count
    sp = speculative_from_vllm({"method": "mtp"}, load_model("qwen3.5-27b"), "0.24.0")
    assert sp.num_tokens == 1 and sp.method == "mtp"


# --- vLLM sizing: the draft in the KV cache groups ------------------------------------------------------------


def _scenario(target, sp, ctx, tp, dtype, version, kv=None):
    return Scenario(
        spec=target,
        ctx=ctx,
        tp=tp,
        dtypes=DtypeChoice(dtype=dtype, kv=kv),
        spec_tokens=sp.num_tokens,
        speculative=sp,
        vllm=VllmSettings(release=release(version)),
    )


def test_mtp_layer_joins_the_attention_bucket():
    # vllm-0.23.0-qwen3.6-27b-nvfp4-mtp-2xrtx5060ti-1.log prints "Add 3 padding layers, may waste at most 6.25% KV
    # cache memory": 16 + 1 MTP attention layers make group size 17, and the 48 GDN layers pad to 51 (3/48)
    target = load_model("qwen3.6-27b")
    sp = speculative_from_vllm({"method": "mtp", "num_speculative_tokens": 3}, target, "0.23.0")
    sc = _scenario(target, sp, 65535, 2, "bfloat16", "0.23.0")
    cap = capacity(sc, "align", 2 * GiB)
    assert cap.group_size == 17 and cap.padding_layers == ((3, 6.25),)
    without = capacity(replace(sc, speculative=replace(sp, layers=())), "align", 2 * GiB)
    assert without.group_size == 16 and without.padding_layers == ()


def test_dflash_draft_gets_buckets_of_its_own_on_a_real_log(tmp_path):
    # vllm-0.20.2rc1-qwen3.6-27b-int4-dflash-2xrtx3090-1.log: DFlash (k = 5) on Qwen3.6-27B, TP 2, bf16, prefix
    # caching (align), 200,000 tokens, "Available KV cache memory: 10.16 GiB" → "GPU KV cache size: 200,769 tokens",
    # "Maximum concurrency … 1.00x". The drafter's config is not in the log; a five-layer Qwen3 draft with 8 KV
    # heads of 128 (2,048 B a token on a rank, as the target's 2 heads of 256) is a spec unlike the target's:
    # buckets 16 attention, 48 GDN, 5 draft → group size 5, 4 + 10 + 1 groups; a request pins 246 pages in each of
    # the 5 attention groups (cdiv(200,000, 816)) and 2 + 5 in each of the 10 GDN groups = 1,300; a block is
    # 5 pages of 1,671,168 B, so 10.16 GiB hold 1,305 blocks: 1,305 / 1,300 = 1.0038 → int(1.0038·200,000) =
    # 200,769. Without the draft's layers the same budget gives 4 groups of 16: 407 blocks over 246 + 3·7 = 267
    # pages a request → int(1.524…·200,000) = 304,868, the figure hybridplan printed before
    target = load_model("qwen3.6-27b")
    sp = speculative_from_vllm(
        {"method": "dflash", "model": _draft(tmp_path, 5, 8, 128), "num_speculative_tokens": 5}, target, "0.20.2"
    )
    sc = _scenario(target, sp, 200_000, 2, "bfloat16", "0.20.2")
    lo, hi = int((10.16 - 0.005) * GiB), int((10.16 + 0.005) * GiB)
    per_block = capacity(sc, "align", GiB).bytes_per_block
    assert per_block == 5 * 1_671_168
    found = {capacity(sc, "align", n * per_block).kv_tokens for n in range(lo // per_block, hi // per_block + 1)}
    assert 200_769 in found
    cap = capacity(sc, "align", 1305 * per_block)
    assert (cap.group_size, len(cap.groups), cap.blocks_per_request) == (5, 15, 1300)
    # in vLLM's order, the buckets' first layers': GDN (layer 0), attention (layer 3), the draft
    assert cap.padding_layers == ((2, 100 * 2 / 48), (4, 25.0))
    bare = capacity(replace(sc, speculative=replace(sp, layers=())), "align", 1305 * per_block)
    assert (bare.group_size, bare.num_blocks, bare.blocks_per_request, bare.kv_tokens) == (16, 407, 267, 304_868)


def test_draft_padding_lines_of_issue_46462(tmp_path):
    # vllm-project/vllm#46462 (0.20.2, Qwen3.6-35B-A3B-FP8 + Qwen3.6-35B-A3B-DFlash, TP 1, k = 6) logs "Add 2 padding
    # layers, may waste at most 6.67%" and "Add 6 padding layers, may waste at most 60.00%": buckets 10 attention,
    # 30 GDN and an 8-layer draft of its own spec → group size 8: 30 → 32 (2/30) and 10 → 16 (6/10)
    target = load_model("qwen3.6-35b-a3b")
    sp = speculative_from_vllm(
        {"method": "dflash", "model": _draft(tmp_path, 8, 4, 128), "num_speculative_tokens": 6}, target, "0.20.2"
    )
    cap = capacity(_scenario(target, sp, 8192, 1, "bfloat16", "0.20.2"), "align", 10 * GiB)
    assert sorted(cap.padding_layers) == sorted([(6, 60.0), (2, 100 * 2 / 30)])


def test_draft_page_larger_than_the_mamba_page(tmp_path):
    # unify_kv_cache_spec_page_size grows smaller pages to the largest; up to 0.25.1 a Mamba page cannot grow
    # (MambaSpec's page is its state), so a draft whose attention page exceeds the target's fails: 8 KV heads of
    # 128 at TP 1 against Qwen3.6-35B-A3B's 2 of 256 is 4,096 B a token against 2,048. From 0.26.0 the Mamba page
    # is padded to the draft's and the target's attention block doubles (4,096 / 2,048 divides)
    target = load_model("qwen3.6-35b-a3b")
    ref = _draft(tmp_path, 8, 8, 128)
    sp = speculative_from_vllm({"method": "dflash", "model": ref, "num_speculative_tokens": 6}, target, "0.20.2")
    with pytest.raises(PlanError, match="cannot unify the KV pages"):
        capacity(_scenario(target, sp, 8192, 1, "bfloat16", "0.20.2"), "align", 10 * GiB)
    sp = speculative_from_vllm({"method": "dflash", "model": ref, "num_speculative_tokens": 6}, target, "0.26.0")
    sc = _scenario(target, sp, 8192, 1, "bfloat16", "0.26.0")
    cap = capacity(sc, "align", 10 * GiB)
    lay = cap.layout
    target_attn = next(g for g in cap.groups if not g.recurrent and not g.draft)
    assert cap.page_bytes == 2 * lay.page_bytes and target_attn.block == 2 * lay.block_size
    assert cap.bytes_per_block == cap.group_size * 2 * lay.page_bytes


def test_smaller_draft_page_grows_its_block(tmp_path):
    # a draft of 1 KV head of 128 at TP 1 (512 B a token) beside Qwen3.6-35B-A3B's 2,048 B: its page at the
    # target's block is a quarter of the common page, so its block grows 4× (unify_kv_cache_spec_page_size)
    target = load_model("qwen3.6-35b-a3b")
    sp = speculative_from_vllm(
        {
            "method": "eagle3",
            "model": _draft(tmp_path, 1, 1, 128, "LlamaForCausalLMEagle3"),
            "num_speculative_tokens": 3,
        },
        target,
        "0.24.0",
    )
    sc = _scenario(target, sp, 8192, 1, "bfloat16", "0.24.0")
    lay = layout(sc, "align")
    draft = [b for b in buckets(sc, lay)[0] if b.draft]
    assert len(draft) == 1 and draft[0].block == 4 * lay.block_size


# --- SGLang flags ----------------------------------------------------------------------------------------------


def test_sglang_nextn_is_eagle_with_the_mtp_layers():
    # NEXTN is EAGLE (server_args / arg_groups/speculative_hook.py: "NEXTN" → "EAGLE"); D = steps + 1 = 4 at
    # top-k 1
    sp = speculative_from_sglang(SglangFlags("NEXTN", num_steps=3, eagle_topk=1), load_model("qwen3.5-27b"), "0.5.18")
    assert (sp.method, sp.num_tokens, len(sp.layers)) == ("eagle", 4, 1)


def test_sglang_unknown_algorithm():
    with pytest.raises(PlanError, match="Unknown speculative algorithm name: MEDUSA"):
        speculative_from_sglang(SglangFlags("MEDUSA", num_draft_tokens=4), load_model("qwen3.5-27b"))


@pytest.mark.parametrize("version,accepted", [("0.5.10", False), ("0.5.11", True)])
def test_sglang_dflash_from_0_5_11(tmp_path, version, accepted):
    # SpeculativeAlgorithm gains DFLASH in 0.5.11 (sglang/srt/speculative/spec_info.py of the 0.5.10 and 0.5.11 wheels)
    flags = SglangFlags("DFLASH", draft=_draft(tmp_path, 5, 8, 128), num_draft_tokens=8)
    if accepted:
        sp = speculative_from_sglang(flags, load_model("qwen3.6-27b"), version)
        assert (sp.method, sp.num_tokens, len(sp.layers)) == ("dflash", 8, 5)
    else:
        with pytest.raises(PlanError, match="DFLASH is accepted from 0.5.11"):
            speculative_from_sglang(flags, load_model("qwen3.6-27b"), version)


def _sglang_fit(version: str, model: str, *, path: bool, budget: int = 40 * GiB):
    from hybridplan.engines.sglang.pool import fit
    from hybridplan.engines.sglang.releases import release as sglang_release
    from hybridplan.engines.sglang.settings import SglangSettings
    from hybridplan.scenario import Budget

    target = load_model(model)
    flags = SglangFlags("NEXTN", draft=target.source if path else None, num_steps=3, eagle_topk=1)
    sp = replace(speculative_from_sglang(flags, target, version), num_tokens=3)  # the steps, as build.py counts
    sc = Scenario(
        spec=target,
        ctx=8192,
        spec_tokens=3,
        speculative=sp,
        engine="sglang",
        sglang=SglangSettings(release=sglang_release(version), radix="off", max_running_requests=48),
        budget=Budget(kv_budget=budget),
    )
    return sc, fit(sc)


@pytest.mark.parametrize(
    "version,path,priced",
    [("0.5.13", True, False), ("0.5.14", True, True), ("0.5.14", False, False), ("0.5.23", False, False)],
)
def test_sglang_says_what_the_draft_kv_takes(version, path, priced):
    # EAGLE's draft KV enters the target's cell from 0.5.14 only with --speculative-draft-model-path
    # (model_runner.py 0.5.14 / model_runner_components/spec_aux_hidden_state.py: ``eagle_draft_num_layers`` is
    # read only when the path is set; from 0.5.22 a path-less head reads the target config's
    # num_nextn_predict_layers, which Qwen3.5 has not); otherwise the draft pool lies outside the split, said
    _, f = _sglang_fit(version, "qwen3.5-27b", path=path)
    notes = " ".join(f.notes)
    assert ("into the target's KV cell" in notes) is priced and ("outside the split" in notes) is not priced


@pytest.mark.parametrize(
    "model,version,cell",
    [
        # Qwen3.5-27B: 16 full-attention layers × 4 KV heads × (256 + 256) × 2 bytes = 65,536 bytes a token
        # (pool_configurator.py ``_compute_cell_size``). The draft-mode config (configs/model_config.py
        # ``_config_draft_model``) sets num_nextn_predict_layers = 1 on hf_config only until 0.5.17; SGLang reads the
        # text config, so n = max(num_hidden_layers, num_attention_layers) = 64 and the cell is
        # int(65,536 · (1 + 64/16)) = 327,680; from 0.5.18 the text config gets 1 too: int(65,536 · 17/16) = 69,632
        ("qwen3.5-27b", "0.5.13", 65536),
        ("qwen3.5-27b", "0.5.14", 327680),
        ("qwen3.5-27b", "0.5.17", 327680),
        ("qwen3.5-27b", "0.5.18", 69632),
        # 0.5.22 on: c + int(c·n/L) = 65,536 + 4,096 (pool_configurator.py, ``draft_kv_size``)
        ("qwen3.5-27b", "0.5.23", 69632),
        # Qwen3-Next-80B-A3B: 12 full-attention layers × 2 KV heads × 512 × 2 bytes = 24,576; hf_config is the text
        # config, n = 1 from 0.5.14: int(24,576 · 13/12) = 26,624
        ("qwen3-next-80b-a3b", "0.5.14", 26624),
        ("qwen3-next-80b-a3b", "0.5.23", 26624),
    ],
)
def test_sglang_eagle_draft_in_the_cell(model, version, cell):
    from hybridplan.engines.sglang.pool import footprint, kv_cell

    sc, f = _sglang_fit(version, model, path=True)
    assert kv_cell(sc.sglang.release, sc, footprint(sc)) == cell
    # the tokens are the KV pool's bytes over that cell (page 1): max_total_num_tokens = available // cell
    assert f.kv_tokens == f.kv_bytes // cell


def test_sglang_eagle_draft_tokens_at_0_5_18():
    # Qwen3.5-27B, 40 GiB split, radix off, 48 requests, D = 4 (0.5.18, kv_cache_configurator.py): the KV pool
    # keeps 5,128,519,680 bytes (the same as without the draft: the cell changes, not the split), and
    # 5,128,519,680 // 69,632 = 73,651 tokens where 5,128,519,680 // 65,536 = 78,255 without the draft in the cell
    _, with_path = _sglang_fit("0.5.18", "qwen3.5-27b", path=True)
    _, without = _sglang_fit("0.5.18", "qwen3.5-27b", path=False)
    assert (with_path.kv_bytes, without.kv_bytes) == (5128519680, 5128519680)
    assert (with_path.kv_tokens, without.kv_tokens) == (73651, 78255)
    # the "KV Cache is allocated" line stays the target's pool: (T + page) · 65,536 / 2 per K and V
    assert with_path.kv_log == (
        "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 73651, K size: 2.25 GB, V size: 2.25 GB"
    )


def test_sglang_log_settings_become_the_scenario_speculative():
    # check-log reads server_args' speculative_algorithm, speculative_num_steps, speculative_eagle_topk and
    # speculative_num_draft_tokens (sglang/srt/server_args.py field names) into Scenario.speculative
    from hybridplan.engines.common import Settings
    from hybridplan.engines.sglang.logs import _speculative
    from hybridplan.engines.sglang.releases import release as sglang_release

    s = Settings("sglang")
    for name, value in (
        ("speculative_algorithm", "NEXTN"),
        ("speculative_num_steps", 3),
        ("speculative_eagle_topk", 1),
        ("speculative_num_draft_tokens", 4),
    ):
        s.put(name, value, "line 1")
    notes: list[str] = []
    sp = _speculative(s, load_model("qwen3.5-27b"), sglang_release("0.5.18"), notes)
    assert (sp.method, sp.num_tokens, len(sp.layers), notes) == ("eagle", 3, 1, [])  # the steps
    s.put("speculative_draft_model_path", "/nowhere/draft", "line 1")
    s.values["speculative_algorithm"] = "EAGLE3"
    sp = _speculative(s, load_model("qwen3.5-27b"), sglang_release("0.5.18"), notes)
    assert sp.method is None and notes and "could not be read" in notes[0]


def _dflash_fit(tmp_path, version: str, kv: str | None = None):
    from hybridplan.engines.sglang.pool import fit, footprint, kv_cell
    from hybridplan.engines.sglang.releases import release as sglang_release
    from hybridplan.engines.sglang.settings import SglangSettings
    from hybridplan.scenario import Budget

    target = load_model("qwen3.6-27b")
    sp = speculative_from_sglang(
        SglangFlags("DFLASH", draft=_draft(tmp_path, 5, 1, 128), num_draft_tokens=4), target, version
    )
    sp = replace(sp, num_tokens=3)
    sc = Scenario(
        spec=target,
        ctx=8192,
        spec_tokens=3,
        speculative=sp,
        engine="sglang",
        dtypes=DtypeChoice(kv=kv),
        sglang=SglangSettings(release=sglang_release(version), radix="off", max_running_requests=16),
        budget=Budget(kv_budget=40 * GiB),
    )
    return kv_cell(sc.sglang.release, sc, footprint(sc)), fit(sc)


@pytest.mark.parametrize(
    "version,kv,cell",
    [
        # Qwen3.6-27B's cell: 16 full-attention layers × 4 KV heads × 512 × 2 bytes = 65,536. The draft: 5 layers of
        # 1 KV head of 128. 0.5.11–0.5.17 scale by layer count (speculative/dflash_utils.py
        # ``scale_kv_cell_size_per_token_for_dflash``): ⌈65,536 · (16 + 5) / 16⌉ = 86,016
        ("0.5.11", None, 86016),
        ("0.5.17", None, 86016),
        # 0.5.18 on add the draft's own cell (``dflash_draft_cell_size_per_token``): 1 · (128 + 128) · 5 · 2 = 2,560
        ("0.5.18", None, 68096),
        ("0.5.23", None, 68096),
        # --kv-cache-dtype fp8_e4m3 is the draft pool's dtype too (configure_kv_cache_dtype): 32,768 + 1,280
        ("0.5.18", "fp8_e4m3", 34048),
    ],
)
def test_sglang_dflash_draft_in_the_cell(tmp_path, version, kv, cell):
    got, f = _dflash_fit(tmp_path, version, kv)
    assert got == cell
    assert f.kv_tokens == f.kv_bytes // cell > 0
