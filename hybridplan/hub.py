"""Models by their Hugging Face Hub id: the ``config.json`` of ``org/name`` (at a revision), from the local
Hugging Face cache first and from the Hub only when it may be reached. Only that small file is ever fetched,
never weights. ``huggingface_hub`` is imported here, when a Hub id is used, and nowhere else.

The cache and the network follow huggingface_hub's own settings, read when the model is resolved:
``HF_HUB_CACHE`` / ``HF_HOME`` for the cache, ``HF_HUB_OFFLINE`` to stay offline, ``HF_TOKEN`` or the stored
token (``huggingface-cli login``) for gated repositories.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from hybridplan.errors import PlanError

#: ``org/name`` as the Hub spells repository ids
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")
_TRUE = ("1", "on", "yes", "true")


class HubUnreachable(PlanError):
    """The config.json is in no local cache and the Hub cannot be asked for it: hybridplan/loader.py may then
    still read a quantized variant's id as the shipped spec it was made from (``variant_of``)."""


def is_hub_id(ref: str) -> bool:
    return bool(_HUB_ID.fullmatch(ref)) and not ref.lower().endswith((".json", ".yaml", ".yml"))


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE


def cache_dir() -> Path:
    """The hub cache as huggingface_hub finds it: ``HF_HUB_CACHE``, else ``HF_HOME``/hub, else
    ``~/.cache/huggingface/hub``."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface"
    return Path(home).expanduser() / "hub"


def endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def reachable(timeout: float = 3.0) -> bool:
    """Can the Hub's host be reached at all? Asked once, quickly, so that a machine without a network gets its
    answer at once instead of after huggingface_hub's retries."""
    url = urlsplit(endpoint())
    try:
        with socket.create_connection(
            (url.hostname or "", url.port or (443 if url.scheme == "https" else 80)), timeout=timeout
        ):
            return True
    except OSError:
        return False


def config(repo_id: str, revision: str | None = None) -> tuple[dict[str, Any], str]:
    """The repository's ``config.json`` and where it was read (``cache`` or ``hub``)."""
    import huggingface_hub
    from huggingface_hub import errors

    where = f"{repo_id}@{revision}" if revision else repo_id
    cached = huggingface_hub.try_to_load_from_cache(repo_id, "config.json", cache_dir=cache_dir(), revision=revision)
    if isinstance(cached, str):
        return _read(Path(cached), where), "cache"
    if offline() or not reachable():
        why = "HF_HUB_OFFLINE is set" if offline() else f"no answer from {endpoint()}"
        raise HubUnreachable(
            f"{where} is not in the local Hugging Face cache and the Hub cannot be reached ({why}): "
            "download its config.json or pass a folder"
        )
    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)  # its retry warnings are not ours to print
    try:
        path = huggingface_hub.hf_hub_download(repo_id, "config.json", revision=revision, cache_dir=cache_dir())
    except errors.GatedRepoError:
        raise PlanError(
            f"{repo_id} is gated: accept its terms on huggingface.co and log in (huggingface-cli login, or HF_TOKEN)"
        ) from None
    except errors.RepositoryNotFoundError:
        raise PlanError(
            f"no model {repo_id} on the Hugging Face Hub (or it is private: log in, or set HF_TOKEN)"
        ) from None
    except errors.RevisionNotFoundError:
        raise PlanError(f"{repo_id} has no revision {revision!r}") from None
    except errors.RemoteEntryNotFoundError:
        raise PlanError(f"{where} has no config.json{_gguf_hint(repo_id, revision)}") from None
    except (errors.LocalEntryNotFoundError, errors.HfHubHTTPError, OSError) as exc:
        raise HubUnreachable(
            f"{where} is not in the local Hugging Face cache and the Hub cannot be reached "
            f"({type(exc).__name__}): download its config.json or pass a folder"
        ) from None
    return _read(Path(path), where), "hub"


def quant_config(repo_id: str, revision: str | None = None) -> dict[str, Any] | None:
    """The repository's ``hf_quant_config.json`` (ModelOpt 0.29 and older write it beside config.json), from the
    cache, else from the Hub when it may be reached; None when it has none or it cannot be had."""
    import huggingface_hub

    where = f"{repo_id}@{revision}" if revision else repo_id
    cached = huggingface_hub.try_to_load_from_cache(
        repo_id, "hf_quant_config.json", cache_dir=cache_dir(), revision=revision
    )
    if isinstance(cached, str):
        return _read(Path(cached), where)
    if cached is not None or offline() or not reachable():  # cached as absent, or no Hub to ask
        return None
    try:
        path = huggingface_hub.hf_hub_download(
            repo_id, "hf_quant_config.json", revision=revision, cache_dir=cache_dir()
        )
    except Exception:  # noqa: BLE001 - most repositories have none; config.json alone then stands
        return None
    return _read(Path(path), where)


def _gguf_hint(repo_id: str, revision: str | None) -> str:
    """Say so when the repository holds GGUF files only."""
    try:
        import huggingface_hub

        files = huggingface_hub.list_repo_files(repo_id, revision=revision)
    except Exception:  # noqa: BLE001 - only a hint: the error above stands without it
        return ""
    if any(f.endswith(".gguf") for f in files):
        return ": it holds GGUF files only; size the original model it was converted from (its Hub id or config.json)"
    return ""


def _read(path: Path, where: str) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PlanError(f"{where}: cannot read its config.json ({exc})") from None
    if not isinstance(doc, dict):
        raise PlanError(f"{where}: its config.json is not a JSON object")
    return doc
