"""What `speed` can price: every GPU hybridplan knows, a quantized variant's Hub id offline, a dataset's lengths,
and both engines' benchmarks."""

from __future__ import annotations

import pytest

from hybridplan.gpus import GPUS
from hybridplan.loader import load_model
from hybridplan.scenario import Budget, Scenario
from hybridplan.speed.bench import Workload, bench
from hybridplan.speed.gpus import DATASHEETS, datasheet

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("g", GPUS, ids=lambda g: g.key)
def test_every_gpu_prices_a_step(g):
    # a datasheet row for every GPU `hybridplan gpus` lists, with the figures a step needs and where they are read
    d = datasheet(g.key)
    assert d.hbm_gbps and d.bf16_tflops and d.link_gbps, g.key
    assert d.sheet and (d.url.startswith("https://") or "product brief" in d.sheet), g.key
    # fp8 and fp4 tensor cores never outrun the narrower format: fp4 ≥ fp8 ≥ bf16 where stated
    assert (d.fp8_tflops or d.bf16_tflops) >= d.bf16_tflops
    assert (d.fp4_tflops or d.fp8_tflops or 0) >= (d.fp8_tflops or 0)
    # a hybrid (LFM2-1.2B, 2.3 GB of bf16 weights) on one of these GPUs: the step and the benchmark are priced
    sc = Scenario(spec=load_model("lfm2-1.2b"), ctx=2048, budget=Budget(gpu_mem=g.total, gpu=g.key))
    b = bench(sc, d, Workload(1024, 128, 4, 8))
    assert b.decode.seconds > 0 and b.prefill.seconds > 0 and b.output_tok_s > 0


def test_datasheets_are_the_gpus():
    assert set(DATASHEETS) == {g.key for g in GPUS}
