"""A checkpoint's own figures, where they can be read: the safetensors headers of a local folder's shards (every
tensor's shape and byte range), its ``model.safetensors.index.json`` (``metadata.total_size`` and, where the
writer added it, ``total_parameters``), or for a Hub id the headers the Hub serves
(``huggingface_hub.get_safetensors_metadata``, a few small range requests, never the weights) or a cached index.

A safetensors file starts with 8 bytes, the little-endian length of a JSON header that maps each tensor's name
to its ``dtype``, ``shape`` and ``data_offsets``. Tensors of multi-token-prediction layers (``mtp.*``, or a
``model.layers.N`` past ``num_hidden_layers``) are kept apart: a plain start does not load them.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Iterable
from math import prod
from pathlib import Path
from typing import Any

from msgspec import Struct

#: a header longer than this is not a safetensors header (the format caps it at 100 MB)
MAX_HEADER = 100_000_000
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_MTP = re.compile(r"(?:^|\.)mtp[._]")


class Checkpoint(Struct, frozen=True):
    """What a checkpoint holds, and where it was read: parameters and bytes outside its MTP layers, and in them
    (None where the source does not say: an index gives totals only, MTP layers included)."""

    params: int | None
    bytes: int
    mtp_params: int | None
    mtp_bytes: int | None
    #: safetensors-headers (every tensor read) or safetensors-index (the index's totals)
    source: str
    where: str

    @property
    def exact(self) -> bool:
        return self.source == "safetensors-headers"


def _is_mtp(name: str, layers: int | None) -> bool:
    if _MTP.search(name):
        return True
    m = _LAYER.search(name)
    return bool(m and layers is not None and name.startswith("model.") and int(m.group(1)) >= layers)


def from_tensors(tensors: Iterable[tuple[str, int, int]], layers: int | None, where: str) -> Checkpoint:
    """A checkpoint from (name, elements, bytes) of each tensor."""
    params = size = mtp_params = mtp_bytes = 0
    for name, n, b in tensors:
        if _is_mtp(name, layers):
            mtp_params, mtp_bytes = mtp_params + n, mtp_bytes + b
        else:
            params, size = params + n, size + b
    return Checkpoint(params, size, mtp_params, mtp_bytes, "safetensors-headers", where)


def read_header(path: Path) -> dict[str, Any]:
    """The JSON header of one ``.safetensors`` file."""
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ValueError("shorter than a safetensors header")
        (length,) = struct.unpack("<Q", head)
        if length > MAX_HEADER:
            raise ValueError("not a safetensors file")
        header = json.loads(f.read(length))
    if not isinstance(header, dict):
        raise ValueError("its header is not a JSON object")
    return header


def _header_tensors(header: dict[str, Any]) -> Iterable[tuple[str, int, int]]:
    for name, t in header.items():
        if name == "__metadata__":
            continue
        start, end = t["data_offsets"]
        yield name, prod(t["shape"]), end - start


def from_folder(folder: Path, layers: int | None) -> Checkpoint | None:
    """A local folder's checkpoint: its shards' headers, else its index; None when it holds neither (or they
    cannot be read, in which case the weights are counted from the config)."""
    shards = sorted(folder.glob("*.safetensors"))
    try:
        if shards:
            tensors = [t for s in shards for t in _header_tensors(read_header(s))]
            return from_tensors(tensors, layers, str(folder))
        index = folder / "model.safetensors.index.json"
        if index.is_file():
            return from_index(json.loads(index.read_text(encoding="utf-8")), layers, str(index))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return None


def from_index(index: dict[str, Any], layers: int | None, where: str) -> Checkpoint | None:
    """An index's totals. It gives no size per tensor: where it lists MTP tensors, their share is not known
    here (None), and the totals include it."""
    meta = index.get("metadata") or {}
    size = meta.get("total_size")
    if not isinstance(size, int) or size <= 0:
        return None
    params = meta.get("total_parameters")
    mtp = any(_is_mtp(name, layers) for name in (index.get("weight_map") or {}))
    unknown = None if mtp else 0
    return Checkpoint(
        params if isinstance(params, int) and params > 0 else None, size, unknown, unknown, "safetensors-index", where
    )


def from_hub(repo_id: str, revision: str | None, layers: int | None) -> Checkpoint | None:
    """A Hub repository's checkpoint: the index in the local cache, else (online) the headers the Hub serves."""
    import huggingface_hub

    from hybridplan import hub

    where = f"{repo_id}@{revision}" if revision else repo_id
    cached = huggingface_hub.try_to_load_from_cache(
        repo_id, "model.safetensors.index.json", cache_dir=hub.cache_dir(), revision=revision
    )
    if isinstance(cached, str):
        try:
            return from_index(json.loads(Path(cached).read_text(encoding="utf-8")), layers, where)
        except (OSError, ValueError):
            pass
    if hub.offline() or not hub.reachable():
        return None
    try:
        meta = huggingface_hub.get_safetensors_metadata(repo_id, revision=revision)
    except Exception:  # noqa: BLE001 - the headers are a refinement: without them the weights are counted
        return None
    tensors = [
        (name, prod(t.shape), t.data_offsets[1] - t.data_offsets[0])
        for f in meta.files_metadata.values()
        for name, t in f.tensors.items()
    ]
    return from_tensors(tensors, layers, where)
