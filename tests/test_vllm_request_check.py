"""vLLM's start-up check of one request of max_model_len counts a group's padding layers from 0.14.0
(vllm/v1/core/kv_cache_utils.py ``_max_memory_usage_bytes_from_groups``, called by ``get_kv_cache_configs``;
kv_cache_planning.py in 0.33.0); before, each layer's own ``max_memory_usage_bytes`` (``check_enough_kv_cache_memory``).

Nemotron-Nano-9B-v2 (model_specs/nemotron-nano-9b-v2.yaml): 27 Mamba-2 layers and 4 attention layers
(``hybrid_override_pattern``: 27 M, 4 *), so groups of 4 layers: 7 Mamba groups (one of them 3 layers and a
padding slot) and 1 attention group, 8 groups. The attention page at the block of 1,408 tokens (``all`` mode)
is 1,408 × 2 (K and V) × 8 KV heads × 128 × 2 bytes = 5,767,168 bytes, the Mamba page padded to it. At
--max-model-len 131072 every group takes cdiv(131072, 1408) = 94 pages in ``all`` mode. So vLLM counts
4 × 5,767,168 × 8 × 94 = 17,347,641,344 bytes = 16.16 GiB, where the layers alone come to
31 × 94 × 5,767,168 = 16,805,527,552 bytes (15.65 GiB). vLLM 0.23.0's own code, run by
validation/replay_vllm.py on 2 December 2026 at --kv-cache-memory-bytes 3.5 GiB, refused with
"(16.16 GiB KV cache is needed, which is larger than the available KV cache memory (3.5 GiB)".
"""

from __future__ import annotations

from hybridplan.engines import vllm
from hybridplan.loader import load_model
from hybridplan.scenario import Scenario

GiB = 1 << 30
PAGE = 1408 * 2 * 8 * 128 * 2


def _capacity(version: str, budget: int):
    sc = Scenario(load_model("nemotron-nano-9b-v2"), ctx=131072, vllm=vllm.VllmSettings(release=vllm.release(version)))
    return vllm.capacity(sc, "all", budget)


def test_request_counts_padding_layers_from_0_14():
    cap = _capacity("0.23.0", 7 * GiB // 2)
    assert cap.page_bytes == PAGE
    assert cap.request_bytes == 4 * PAGE * 8 * 94
    assert "(16.16 GiB KV cache is needed" in cap.memory_problem


def test_padding_decides_the_start():
    # between the layers' 16,805,527,552 bytes and the groups' 17,347,641,344: vLLM 0.23.0 refuses
    assert _capacity("0.23.0", 17_000_000_000).memory_problem is not None
    assert _capacity("0.23.0", 4 * PAGE * 8 * 94).memory_problem is None
