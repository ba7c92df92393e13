"""SGLang's radix strategy for the Mamba state, settled by the engine's own code (release and file beside each
test).

0.5.23 arg_groups/model_hook.py handle_mamba_radix_cache: arg_groups/overrides.py _mamba_radix_cache_resolution
sets uses_mamba_radix_cache (and resolves auto) only for an architecture in _MAMBA_RADIX_CACHE_ARCHS or with a
registered linear-attention spec; otherwise the handler returns before validate_mamba_no_buffer (page_size 1,
no overlap scheduler), and kv_cache_configurator.py _calculate_mamba_ratio gives 3 slots (no extra buffer).
FalconMamba, Mamba and Mamba2 (classes from 0.5.20) are in no release's list (0.5.15-0.5.23)."""

from __future__ import annotations

import pytest

from hybridplan.engines.sglang.radix import page_size as sglang_page_size
from hybridplan.engines.sglang.radix import strategy as sglang_strategy
from hybridplan.errors import PlanError
from tests.helpers import scenario

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("model", ["falcon-mamba-7b", "mamba-130m", "mamba-codestral-7b"])
@pytest.mark.parametrize(
    "flags", [dict(radix="no_buffer"), dict(radix="auto", page_size=64), dict(radix="no_buffer", page_size=64)]
)
def test_unlisted_pure_ssm_is_served_with_no_buffer_flags_sglang_would_check_for_listed_ones(model, flags):
    sc = scenario(model, sglang_version="0.5.23", sglang=flags)
    chosen = sglang_strategy(sc)
    assert (chosen.name, chosen.ratio) == ("no_buffer", 3)
    assert sglang_page_size(sc, chosen) == flags.get("page_size", 1)


def test_listed_architecture_keeps_the_no_buffer_checks():
    # LFM2 is in _MAMBA_RADIX_CACHE_ARCHS and not in _MAMBA_EXTRA_BUFFER_ARCHS: auto → no_buffer, whose
    # validate_mamba_no_buffer asserts "no_buffer only supports page_size=1."
    with pytest.raises(PlanError, match="no_buffer only supports page_size=1"):
        sglang_strategy(scenario("lfm2-1.2b", sglang_version="0.5.23", sglang=dict(page_size=64)))
    with pytest.raises(PlanError, match="overlap"):
        sglang_strategy(scenario("lfm2-1.2b", sglang_version="0.5.23", sglang=dict(radix="no_buffer")))


@pytest.mark.parametrize(
    "version, checked",
    [
        # Qwen3_5MoeForCausalLM (Qwen3.8-2.4T-A95B ships as it): class from 0.5.17, in _MAMBA_RADIX_CACHE_ARCHS from 0.5.19
        ("0.5.17", False),
        ("0.5.18", False),
        ("0.5.19", True),
        ("0.5.23", True),
    ],
)
def test_text_only_qwen3_5_is_checked_from_0_5_19(version, checked):
    sc = scenario("qwen3.8-2.4t-a95b", sglang_version=version, sglang=dict(radix="no_buffer"))
    if checked:
        with pytest.raises(PlanError, match="overlap"):
            sglang_strategy(sc)
    else:
        assert sglang_strategy(sc).name == "no_buffer"


def test_extra_buffer_on_an_unlisted_architecture():
    # 0.5.21+ handle_mamba_radix_cache: an explicit extra_buffer on an unlisted architecture raises "needs mamba
    # state"; before, nothing checks it and the start keeps the extra buffer (3 + 2 slots with the overlap
    # scheduler, kv_cache_configurator.py _calculate_mamba_ratio); listed ones without it fail
    # validate_mamba_extra_buffer ("extra_buffer is not supported for ...")
    with pytest.raises(PlanError, match="needs mamba state"):
        sglang_strategy(scenario("falcon-mamba-7b", sglang_version="0.5.23", sglang=dict(radix="extra_buffer")))
    chosen = sglang_strategy(scenario("falcon-mamba-7b", sglang_version="0.5.20", sglang=dict(radix="extra_buffer")))
    assert (chosen.name, chosen.ratio) == ("extra_buffer", 5)
    with pytest.raises(PlanError, match="extra_buffer is not supported"):
        sglang_strategy(scenario("lfm2-1.2b", sglang_version="0.5.23", sglang=dict(radix="extra_buffer")))
