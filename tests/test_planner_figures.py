"""The published Nemotron-H-8B / Llama-3-8B figures, each derived in a comment from the config and
docs/engines.md §1 (vLLM MambaStateShapeCalculator, fp32 SSM default for Nemotron-H in vLLM ≥ 0.20)."""

import json
from fractions import Fraction

import pytest

from hybridplan.errors import PlanError
from hybridplan.loader import load_model
from hybridplan.reports.crossover import crossover
from hybridplan.reports.size import size
from hybridplan.units import GiB
from tests.helpers import scenario

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def nemo():
    return load_model("nemotron-h")


@pytest.fixture(scope="module")
def llama():
    return load_model("llama-3-8b")


@pytest.fixture(scope="module")
def report(nemo, llama):
    return size(scenario(nemo, 131072, slots=256), llama)


def test_mamba_layer_shapes_and_bytes(report):
    (g,) = report.fp.state
    assert g.kind == "mamba2" and g.count == 24  # 24 'M' in hybrid_override_pattern
    # conv dim = I + 2·groups·state = 128·64 + 2·8·128 = 10,240 channels; window = conv_kernel − 1 = 3
    assert g.conv_shape == (10240, 3)
    # SSM = (heads, head_dim, state) = (128, 64, 128)
    assert g.ssm_shape == (128, 64, 128)
    assert (g.conv_dtype, g.ssm_dtype) == ("bfloat16", "float32")
    assert g.ssm_bytes_per_layer == 128 * 64 * 128 * 4 == 4_194_304
    assert g.conv_bytes_per_layer == 10240 * 3 * 2 == 61_440
    # 24 · (4,194,304 + 61,440) = 102,137,856 B; conv share 61,440 / 4,255,744 = 1.44 %
    assert report.fp.state_bytes == 102_137_856
    assert round(100 * report.fp.conv_bytes / report.fp.state_bytes, 2) == 1.44


def test_kv_per_token(report):
    # Nemotron-H: 4 attention layers · 2 (K,V) · 8 KV heads · 128 · 2 B = 16,384 B per token
    assert report.fp.kv_bytes_per_token == 16_384
    # Llama-3-8B: 32 layers · 2 · 8 · 128 · 2 B = 131,072 B = 128 KiB per token (docs/engines.md §1)
    assert report.ref_fp.kv_bytes_per_token == 131_072


def test_totals_at_131k(report):
    # 102,137,856 + 16,384 · 131,072 = 2,249,621,504 B = 2.095 GiB
    assert report.total_at_ctx == 102_137_856 + 16_384 * 131_072 == 2_249_621_504
    assert f"{report.total_at_ctx / GiB:.3f}" == "2.095"
    # Llama: 131,072 · 131,072 B = 16 GiB; ratio 17,179,869,184 / 2,249,621,504 = 7.64
    assert report.ref_at_ctx == 16 * GiB
    assert f"{report.ratio:.2f}" == "7.64"
    # 256 slots · 102,137,856 B = 26,147,291,136 B = 24.35 GiB
    assert report.fp.pool_bytes(256) == 26_147_291_136
    assert f"{report.fp.pool_bytes(256) / GiB:.2f}" == "24.35"


def test_crossovers(nemo, llama):
    r = crossover(scenario(nemo), llama)
    rows = {row.ssm_dtype: row for row in r.rows}
    # state only, fp32: 102,137,856 / 131,072 = 779.25 exactly
    assert rows["float32"].state_only == Fraction(102_137_856, 131_072) == Fraction(3117, 4)
    assert rows["float32"].state_only_tokens == 780
    # bf16 SSM: 24 · (2,097,152 + 61,440) = 51,806,208 B; / 131,072 = 395.25
    assert rows["bfloat16"].state_only == Fraction(51_806_208, 131_072) == Fraction(1581, 4)
    # whole hybrid: 102,137,856 + 16,384·x = 131,072·x → x = 102,137,856 / 114,688 = 890.571…
    assert rows["float32"].total == Fraction(102_137_856, 114_688)
    assert f"{float(rows['float32'].total):.2f}" == "890.57"
    assert rows["float32"].total_tokens == 891


def test_a_hybrid_reference_counts_its_own_state(nemo):
    # Jamba-1.5-Mini: 28 Mamba-1 layers · (8192·3·2 + 8192·16·2) = 8,716,288 B of state, and 16,384 B of KV per
    # token, as Nemotron-H-8B. Jamba's whole footprint reaches Nemotron's fp32 state alone at
    # (102,137,856 − 8,716,288) / 16,384 = 5,702 tokens (equal there, smaller from 5,703); their state + KV
    # never cross (same slope, Jamba's constant below).
    r = crossover(scenario(nemo), load_model("jamba"))
    row = next(x for x in r.rows if x.ssm_dtype == "float32")
    assert (row.state_only, row.state_only_tokens) == (5702, 5703)
    assert row.total is None and r.to_dict()["reference_state_bytes"] == 8_716_288
    # against itself the two needs are equal at every context: there is no crossover to report, and it says so
    with pytest.raises(PlanError, match="against itself"):
        crossover(scenario(nemo), nemo)


def test_crossover_exact_integer_point_is_not_smaller():
    # At an exact integer crossing the two are equal: the first *smaller* context is the next one.
    from hybridplan.crossover import Curve, first_crossing, first_whole_smaller

    ref, hyb = Curve(0, ((10, None),)), Curve(100, ())
    x = first_crossing(ref, hyb)
    assert x == 10 and first_whole_smaller(ref, hyb, x) == 11


def test_sliding_window_reference_can_never_cross():
    # Mistral-7B keeps at most 4,096 tokens: 4,096 · 131,072 B = 512 MiB at most, above Nemotron's 97 MiB
    # state, so a crossover exists; against a window of 512 tokens (64 MiB) there is none.
    from hybridplan.crossover import Curve, first_crossing

    assert first_crossing(Curve(0, ((131_072, 4096),)), Curve(102_137_856, ())) == Fraction(3117, 4)
    assert first_crossing(Curve(0, ((131_072, 512),)), Curve(102_137_856, ())) is None


def test_size_json_contract(run_cli):
    code, out, err = run_cli("size", "nemotron-h", "--ctx", "131072", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["schema_version"] == 1
    # model_specs/nemotron-h-8b.yaml: hybrid_override_pattern holds 24 M, 4 * and 24 - of its 52 layers; conv
    # channels expand 2 · hidden 4,096 + 2 · n_groups 8 · ssm_state_size 128 = 10,240 over conv_kernel 4 − 1 = 3;
    # SSM mamba_num_heads 128 · mamba_head_dim 64 · ssm_state_size 128
    assert d["layers"] == {"mamba2": 24, "attention": 4, "mlp": 24}
    g = d["state"]["groups"][0]
    assert g["conv_shape"] == [10240, 3] and g["ssm_shape"] == [128, 64, 128]
    assert g["conv_dtype"] == "bfloat16" and g["ssm_dtype"] == "float32"
    assert g["bytes_per_layer"] == 4_255_744  # 4,194,304 + 61,440
    assert d["state"]["bytes_per_sequence"] == 102_137_856
    assert d["kv"] == {
        **d["kv"],
        "bytes_per_token_per_layer": 4096,
        "bytes_per_token": 16_384,
        "bytes_at_ctx": 16_384 * 131_072,
    }
    assert d["total_bytes_at_ctx"] == 2_249_621_504
    assert d["reference"]["model"] == "llama-3-8b" and d["reference"]["bytes_at_ctx"] == 16 * GiB
    assert d["pool"] == {"slots": 256, "state_bytes": 26_147_291_136}
    for key in ("model", "architecture", "tp", "ctx"):
        assert key in d


def test_crossover_json_contract(run_cli):
    code, out, _ = run_cli("crossover", "--json")
    d = json.loads(out)
    assert code == 0 and d["schema_version"] == 1 and d["model"] == "nemotron-h-8b"
    assert d["reference"] == "llama-3-8b"
    assert [r["ssm_dtype"] for r in d["rows"]] == ["float32", "bfloat16"]
    # state over Llama-3-8B's KV of 32 layers · 8 heads · 128 · 2 · 2 B = 131,072 B a token: fp32 SSM
    # 24 · (61,440 + 4,194,304) = 102,137,856 B → 779.25 tokens; bf16 SSM 24 · (61,440 + 2,097,152) = 51,806,208 B
    # → 395.25 tokens
    assert d["rows"][0]["state_only_tokens"] == 779.25 and d["rows"][1]["state_only_tokens"] == 395.25
    assert [row["ctx"] for row in d["ladder"]] == [1024 * 2**k for k in range(11)]
    # at 131,072 the ladder agrees with `size`
    row = next(r for r in d["ladder"] if r["ctx"] == 131072)
    assert row["hybrid_bytes"] == 2_249_621_504 and row["reference_bytes"] == 16 * GiB


def test_size_table_renders(run_cli):
    code, out, _ = run_cli("size", "nemotron-h", "--ctx", "131072")
    assert code == 0
    for text in ("10240×3 bf16", "128×64×128 fp32", "97.41 MiB", "2.095 GiB", "16 GiB", "7.64×", "24.35 GiB"):
        assert text in out
    code, out, _ = run_cli("size", "nemotron-h", "--ctx", "131072", "--bytes")
    assert "(102,137,856 B)" in out and "(26,147,291,136 B)" in out


def test_crossover_plot(tmp_path, run_cli):
    pytest.importorskip("matplotlib")
    png = tmp_path / "x.png"
    code, out, err = run_cli("crossover", "--plot", png)
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_models_lists_every_required_spec(run_cli):
    code, out, _ = run_cli("models", "--json")
    names = {m["name"] for m in json.loads(out)["models"]}
    assert code == 0
    assert names >= {
        "nemotron-h-8b",
        "nemotron-h-56b",
        "nemotron-3-nano-30b-a3b",
        "jamba-1.5-mini",
        "zamba2-7b",
        "falcon-h1-0.5b",
        "falcon-mamba-7b",
        "mamba-2.8b",
        "mamba-codestral-7b",
        "lfm2-1.2b",
        "qwen3-next-80b-a3b",
        "qwen3.5-27b",
        "llama-3-8b",
        "llama-3.1-70b",
        "qwen2.5-7b",
        "mistral-7b",
        "deepseek-v3",
    }
    assert load_model("llama3-8b").name == "llama-3-8b"
    assert load_model("NEMOTRON-H").name == "nemotron-h-8b"
