"""Weights from the checkpoint itself: a local folder's safetensors headers or index, or a Hub id's headers.

Each shard written here is a real safetensors header (8-byte little-endian length, then the JSON that maps a
tensor's name to its dtype, shape and byte range) with no tensor data behind it: hybridplan reads headers only.
The tensors are those of state-spaces/mamba-130m-hf (24 layers, d_model 768, d_inner 1536, d_state 16,
dt_rank 48, conv 4, vocabulary 50,280, tied embeddings): 129,135,360 parameters, the count transformers gives.
"""

from __future__ import annotations

import json
import struct
from math import prod
from types import SimpleNamespace

import pytest

from hybridplan.loader import load_model
from hybridplan.weights import weights
from hybridplan.weights.checkpoint import from_folder
from tests.conftest import CONFIGS

pytestmark = pytest.mark.unit

CONFIG = CONFIGS / "state-spaces__mamba-130m-hf.from-python-dict.json"
PARAMS = 129_135_360


def _mamba_130m_tensors() -> dict[str, list[int]]:
    t = {"backbone.embeddings.weight": [50280, 768], "backbone.norm_f.weight": [768]}
    for i in range(24):
        p = f"backbone.layers.{i}."
        t |= {
            p + "norm.weight": [768],
            p + "mixer.in_proj.weight": [3072, 768],
            p + "mixer.conv1d.weight": [1536, 1, 4],
            p + "mixer.conv1d.bias": [1536],
            p + "mixer.x_proj.weight": [80, 1536],
            p + "mixer.dt_proj.weight": [1536, 48],
            p + "mixer.dt_proj.bias": [1536],
            p + "mixer.A_log": [1536, 16],
            p + "mixer.D": [1536],
            p + "mixer.out_proj.weight": [768, 1536],
        }
    return t


def _write_shard(path, tensors: dict[str, list[int]], dtype="BF16", width=2) -> None:
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in tensors.items():
        size = prod(shape) * width
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)


@pytest.fixture
def folder(tmp_path):
    d = tmp_path / "mamba-130m"
    d.mkdir()
    d.joinpath("config.json").write_text(CONFIG.read_text())
    return d


def test_the_tensors_here_are_the_models():
    assert sum(prod(s) for s in _mamba_130m_tensors().values()) == PARAMS


def test_a_local_folders_shards_give_exact_weights(folder):
    tensors = _mamba_130m_tensors()
    names = sorted(tensors)
    _write_shard(folder / "model-00001-of-00002.safetensors", {n: tensors[n] for n in names[:100]})
    _write_shard(folder / "model-00002-of-00002.safetensors", {n: tensors[n] for n in names[100:]})
    w = weights(load_model(str(folder)), dtype="bfloat16")
    assert (w.source, w.params, w.bytes) == ("safetensors-headers", PARAMS, 2 * PARAMS)


def test_the_checkpoint_overrides_the_count(folder):
    # a checkpoint that holds one more tensor than the config describes (a fine-tune's extra head): its own
    # figure wins, and the per-rank share follows the count's split
    tensors = _mamba_130m_tensors() | {"score.weight": [2, 768]}
    _write_shard(folder / "model.safetensors", tensors)
    w = weights(load_model(str(folder)), tp=1)
    counted = weights(load_model(str(CONFIG)))
    assert w.params == PARAMS + 1536 and counted.params == PARAMS and counted.source == "config"
    assert w.bytes_per_rank == w.bytes * counted.bytes_per_rank // counted.bytes


def test_mtp_tensors_are_kept_apart(folder):
    # "mtp.*" tensors and layers past num_hidden_layers (24) are multi-token-prediction layers: a plain start
    # does not load them
    extra = {"mtp.fc.weight": [768, 1536], "model.layers.24.mlp.weight": [10, 10]}
    _write_shard(folder / "model.safetensors", _mamba_130m_tensors() | extra)
    ckpt = load_model(str(folder)).checkpoint
    assert (ckpt.params, ckpt.mtp_params) == (PARAMS, 768 * 1536 + 100)
    assert weights(load_model(str(folder)), mtp=True).params == PARAMS + 768 * 1536 + 100


def test_an_index_alone_gives_the_totals(folder):
    index = {
        "metadata": {"total_size": 2 * PARAMS, "total_parameters": PARAMS},
        "weight_map": {n: "model-00001-of-00002.safetensors" for n in _mamba_130m_tensors()},
    }
    folder.joinpath("model.safetensors.index.json").write_text(json.dumps(index))
    w = weights(load_model(str(folder)), dtype="bfloat16")
    assert (w.source, w.params, w.bytes) == ("safetensors-index", PARAMS, 2 * PARAMS)


def test_a_float32_checkpoint_is_priced_at_the_serving_dtype(folder):
    # the config says float32, as the checkpoint stores it; served in bfloat16 it takes half
    _write_shard(folder / "model.safetensors", _mamba_130m_tensors(), dtype="F32", width=4)
    assert weights(load_model(str(folder))).bytes == 4 * PARAMS
    w = weights(load_model(str(folder)), dtype="bfloat16")
    assert (w.params, w.bytes) == (PARAMS, 2 * PARAMS)


def test_a_broken_shard_falls_back_to_the_count(folder):
    folder.joinpath("model.safetensors").write_bytes(b"\xff" * 8 + b"not json")
    assert from_folder(folder, 24) is None
    assert weights(load_model(str(folder))).source == "config"


def test_size_and_fit_say_where_the_weights_come_from(run_cli, folder):
    _write_shard(folder / "model.safetensors", _mamba_130m_tensors())
    code, out, _ = run_cli("size", folder, "--json")
    assert code == 0 and json.loads(out)["weights"]["source"] == "safetensors-headers"
    code, out, _ = run_cli("fit", folder, "--gpu-type", "l4", "--ctx", "2048", "--engine", "vllm", "--json")
    terms = json.loads(out)["vllm"]["memory"]["terms"]
    assert "safetensors headers" in next(t["note"] for t in terms if t["name"] == "weights")


def test_a_hub_id_reads_the_headers_the_hub_serves(run_cli, tmp_path, monkeypatch):
    """Online, the Hub's safetensors metadata (huggingface_hub.get_safetensors_metadata) is read; the network
    is replaced here by what that call returns."""
    import huggingface_hub

    from hybridplan import hub

    home = tmp_path / "hf"
    snap = home / "hub" / "models--acme--tiny-mamba" / "snapshots" / ("0" * 40)
    snap.mkdir(parents=True)
    snap.joinpath("config.json").write_text(CONFIG.read_text())
    (snap.parents[1] / "refs").mkdir()
    (snap.parents[1] / "refs" / "main").write_text("0" * 40)
    # the cache records that the repository has no hf_quant_config.json (huggingface_hub's ``.no_exist`` entry,
    # as a download that found none leaves it), so nothing is asked of the network beyond the headers
    (snap.parents[1] / ".no_exist" / ("0" * 40)).mkdir(parents=True)
    (snap.parents[1] / ".no_exist" / ("0" * 40) / "hf_quant_config.json").touch()
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hub, "reachable", lambda timeout=3.0: True)
    tensors, offset, infos = _mamba_130m_tensors(), 0, {}
    for name, shape in tensors.items():
        infos[name] = SimpleNamespace(shape=shape, data_offsets=(offset, offset + 2 * prod(shape)))
        offset += 2 * prod(shape)
    meta = SimpleNamespace(files_metadata={"model.safetensors": SimpleNamespace(tensors=infos)})
    monkeypatch.setattr(huggingface_hub, "get_safetensors_metadata", lambda repo_id, revision=None: meta)
    code, out, err = run_cli("size", "acme/tiny-mamba", "--json")
    assert code == 0, err
    w = json.loads(out)["weights"]
    assert (w["source"], w["params"]) == ("safetensors-headers", PARAMS)


def test_an_index_without_a_parameter_count_is_read_at_its_stored_width(folder):
    # the config says float32 but the shards are bfloat16: total_size / 2 is the count
    index = {"metadata": {"total_size": 2 * PARAMS}, "weight_map": {}}
    folder.joinpath("model.safetensors.index.json").write_text(json.dumps(index))
    w = weights(load_model(str(folder)), dtype="bfloat16")
    assert (w.source, w.params, w.bytes) == ("safetensors-index", PARAMS, 2 * PARAMS)
