"""Where a model comes from: a shipped spec by name or alias, a config.json, a model folder, or a spec YAML.

This is the only module of the planner that reads files. Everything it returns is a frozen ``ModelSpec``.
"""

from __future__ import annotations

import json
import os
import re
from functools import cache
from itertools import chain
from pathlib import Path
from typing import Any

import yaml
from msgspec.structs import replace

from hybridplan.adapters import spec_from_config
from hybridplan.errors import PlanError
from hybridplan.spec import ModelSpec

try:  # libyaml when present: the shipped specs parse in a fraction of the time
    _YamlLoader: Any = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on the PyYAML build
    _YamlLoader = yaml.SafeLoader


def _safe_load(text: str) -> Any:
    """``yaml.safe_load``, with the C loader when PyYAML has it."""
    return yaml.load(text, Loader=_YamlLoader)  # noqa: S506 - CSafeLoader/SafeLoader are the safe loaders


_HERE = Path(__file__).resolve().parent
#: installed, the specs ship as hybridplan.model_specs beside this module; in a checkout they sit at the top
_SPECS_DIR = next(
    (d for d in (_HERE / "model_specs", _HERE.parent / "model_specs") if d.is_dir()), _HERE / "model_specs"
)


def _specs_dir() -> Path:
    return _SPECS_DIR


def _spec_documents() -> list[str]:
    """The shipped specs' file names (``*.yaml``, as a glob would list them), sorted."""
    return sorted(n for n in os.listdir(_SPECS_DIR) if n.endswith(".yaml") and not n.startswith("."))


@cache
def _spec_text(filename: str) -> str:
    """A shipped spec's text, read once: its header, its YAML and its context all come from it."""
    with open(_specs_dir() / filename, encoding="utf-8") as f:
        return f.read()


@cache
def _read_spec_document(filename: str) -> dict:
    doc = _safe_load(_spec_text(filename))
    if not isinstance(doc, dict) or not isinstance(doc.get("config"), dict):
        raise PlanError(f"shipped spec {filename} is malformed: it needs a 'config' mapping")
    return doc


def _spec_from_document(doc: Any, origin: str) -> ModelSpec:
    if not isinstance(doc, dict) or not isinstance(doc.get("config"), dict):
        raise PlanError(f"{origin}: a spec file needs a 'config' mapping (the model's HF config fields)")
    name = doc.get("name") or Path(origin).stem
    aliases = doc.get("aliases") or []
    if not isinstance(name, str) or not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise PlanError(f"{origin}: 'name' must be a string and 'aliases' a list of strings")
    source = doc.get("source")
    return spec_from_config(
        doc["config"], name=name, source=source if isinstance(source, str) else None, aliases=tuple(aliases)
    )


#: what the loader knows of every shipped spec before it loads one (``build_index``), kept beside the specs:
#: reading 51 files for their names cost a tenth of a start (docs/startup.md); tests/test_startup.py keeps it
#: equal to the specs, and ``python scripts/specs_index.py`` writes it
INDEX = "index.json"


def build_index() -> dict[str, dict]:
    """Each shipped spec's file name → its names (the file's stem, its name, its aliases; lower case), its
    architecture and its max_position_embeddings, from the specs themselves."""
    out: dict[str, dict] = {}
    for fn in _spec_documents():
        spec = _spec_from_document(_read_spec_document(fn), fn)
        names = [fn[:-5], spec.name, *spec.aliases]
        out[fn] = {
            "names": list(dict.fromkeys(n.lower() for n in names if n)),
            "architecture": spec.architecture,
            "max_position_embeddings": spec.max_position_embeddings,
        }
    return out


@cache
def _index() -> dict[str, dict]:
    """The index beside the specs; built from them when it is missing, unreadable, or lists other files."""
    try:
        with open(os.path.join(_SPECS_DIR, INDEX), encoding="utf-8") as f:
            index = json.load(f)
    except (OSError, ValueError):
        return build_index()
    if not isinstance(index, dict) or sorted(index) != _spec_documents():
        return build_index()
    return index


def shipped_names() -> dict[str, str]:
    """Every shipped name and alias (lower case) → the spec's file name."""
    return {n: filename for filename, entry in _index().items() for n in entry["names"]}


def shipped_contexts(architecture: str) -> dict[str, int]:
    """The shipped specs of one architecture → their max_position_embeddings (those that state one)."""
    return {
        entry["names"][0]: entry["max_position_embeddings"]
        for entry in _index().values()
        if entry["architecture"] == architecture and entry["max_position_embeddings"] is not None
    }


def shipped_specs() -> list[ModelSpec]:
    return [_spec_from_document(_read_spec_document(fn), fn) for fn in _spec_documents()]


def _parse_file(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanError(f"cannot read {path}: {exc.strerror if isinstance(exc, OSError) else exc}") from None
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            return _safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark else ""
            raise PlanError(f"{path} is not valid YAML{where}: {getattr(exc, 'problem', None) or exc}") from None
    try:
        # Python's json accepts Infinity, which real configs contain (time_step_limit).
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanError(f"{path} is not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None


def load_path(path: Path) -> ModelSpec:
    if path.is_dir():
        candidate = path / "config.json"
        if not candidate.is_file():
            raise PlanError(f"{path} is a folder without a config.json")
        path = candidate
    doc = _parse_file(path)
    if path.suffix.lower() in (".yaml", ".yml"):
        return _spec_from_document(doc, str(path))
    name = path.parent.name if path.name == "config.json" else path.stem
    quant = path.parent / "hf_quant_config.json" if path.name == "config.json" else None
    spec = _with_quant_file(doc, quant if quant is not None and quant.is_file() else None, name=name, source=str(path))
    from hybridplan.weights.checkpoint import from_folder

    return replace(spec, checkpoint=from_folder(path.parent, _layers(doc)))


def _with_quant_file(config: Any, quant: Path | dict | None, **kw: Any) -> ModelSpec:
    """The spec of a config, with ModelOpt's hf_quant_config.json (a path, or its parsed content) taken as its
    ``quantization_config`` where config.json has none, as vLLM (vllm/transformers_utils/config.py
    ``get_config``) and SGLang (configs/model_config.py) read it."""
    if quant is None or not isinstance(config, dict) or config.get("quantization_config") is not None:
        return spec_from_config(config, **kw)
    doc = _parse_file(quant) if isinstance(quant, Path) else quant
    if not isinstance(doc, dict):
        raise PlanError(f"{quant}: hf_quant_config.json is not a JSON object")
    from hybridplan.weights.quant import read

    spec = spec_from_config({**config, "quantization_config": doc}, **kw)
    return replace(spec, quantization=read({"quantization_config": doc}, where="hf_quant_config.json"))


def _layers(config: Any) -> int | None:
    """The decoder's layer count, past which a checkpoint's layers are MTP layers."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    n = text.get("num_hidden_layers")
    return n if isinstance(n, int) else None


def load_model(ref: str, revision: str | None = None) -> ModelSpec:
    """Resolve MODEL as typed on the command line: a path to a config or folder (a path on disk always wins), a
    shipped name or alias, or a Hugging Face Hub id (``org/name``, at ``revision``)."""
    ref = ref.strip()
    if not ref:
        raise PlanError("empty model name")
    ref, revision = _from_url(ref, revision)
    path = Path(ref).expanduser()
    looks_like_path = any(sep in ref for sep in ("/", "\\")) or path.suffix.lower() in (".json", ".yaml", ".yml")
    if path.exists():
        _no_revision(revision, ref)
        return load_path(path)
    if "/" in ref:  # a Hub id has one; hub (and its imports) stays unloaded for a shipped name
        from hybridplan import hub

        if hub.is_hub_id(ref):
            return _from_hub(ref, revision)
    direct = f"{ref.lower()}.yaml"
    names = shipped_names()
    filename = direct if not looks_like_path and (_specs_dir() / direct).is_file() else names.get(ref.lower())
    if filename is not None:
        _no_revision(revision, ref)
        return _spec_from_document(_read_spec_document(filename), filename)
    if looks_like_path:
        raise PlanError(f"no such file or folder: {ref}")
    from hybridplan.errors import did_you_mean

    raise PlanError(
        f"unknown model {ref!r}: not a shipped spec (see `hybridplan models`), a path to a config.json, "
        f"nor a Hugging Face Hub id (org/name){did_you_mean(ref.lower(), names, cutoff=0.7)}"
    )


#: the Hub's own addresses of a repository: ``https://huggingface.co/org/name`` (``/tree/REV`` …), ``hf.co/org/name``
#: (compiled on first use: only a name with one of the Hub's hosts in it is tried)
_HUB_URL = (
    r"(?:https?://)?(?:www\.)?(?:huggingface\.co|hf\.co)/([^/?#]+)/([^/?#]+)"
    r"(?:/(?:tree|blob|resolve)/([^/?#]+))?[^?#]*(?:[?#].*)?"
)


def _from_url(ref: str, revision: str | None) -> tuple[str, str | None]:
    """A Hub address pasted from the browser as the Hub id it names (and the revision of a ``/tree/REV`` address);
    anything else unchanged."""
    low = ref.lower()
    m = re.fullmatch(_HUB_URL, ref, re.IGNORECASE) if "huggingface.co" in low or "hf.co" in low else None
    if m is None:
        return ref, revision
    repo_id, rev = f"{m.group(1)}/{m.group(2)}", m.group(3)
    if rev is not None and revision is not None and rev != revision:
        raise PlanError(f"{ref} names revision {rev!r} but --revision says {revision!r}")
    return repo_id, revision if revision is not None else rev


def _no_revision(revision: str | None, ref: str) -> None:
    if revision is not None:
        raise PlanError(f"--revision is for a Hugging Face Hub id; {ref} is not one")


def _from_hub(repo_id: str, revision: str | None) -> ModelSpec:
    """A shipped spec when the id is its source (at its revision, if it notes one) — no network; else the
    repository's config.json, read as the shipped spec it matches if any."""
    from hybridplan import hub

    for filename in _spec_documents():
        doc = _read_spec_document(filename)
        source, noted = str(doc.get("source") or ""), doc.get("revision")
        # "main" is what the shipped spec was read from when it notes no revision of its own
        if source.lower() == repo_id.lower() and revision in (None, noted, "main" if noted is None else None):
            return _spec_from_document(doc, filename)
    from hybridplan.weights.checkpoint import from_hub

    try:
        cfg, _ = hub.config(repo_id, revision)
    except hub.HubUnreachable:
        spec = _offline_variant(repo_id, revision)
        if spec is None:
            raise
        return spec
    ckpt = from_hub(repo_id, revision, _layers(cfg))
    quant_file = hub.quant_config(repo_id, revision) if cfg.get("quantization_config") is None else None
    own = _with_quant_file(
        cfg, quant_file, name=repo_id.split("/")[-1], source=f"{repo_id}@{revision}" if revision else repo_id
    )
    for filename in _spec_documents():
        doc = _read_spec_document(filename)
        if _subset(doc["config"], cfg):
            spec = _spec_from_document(doc, filename)
            # a re-save (AWQ, GPTQ, NVFP4, …) keeps the base config and adds its quantization: the shapes are the
            # shipped spec's, the quantization and the config the weights are counted from the repository's
            return replace(
                spec,
                checkpoint=ckpt,
                quantization=own.quantization,
                config_json=own.config_json,
                facts=own.facts,
                notes=spec.notes
                + (
                    f"{repo_id}'s config.json is that of the shipped spec {spec.name}"
                    + (f", quantized: {own.quantization.describe()}" if own.quantization else ""),
                ),
            )
    return replace(own, checkpoint=ckpt)


def _offline_variant(repo_id: str, revision: str | None) -> ModelSpec | None:
    """A Hub id whose config.json cannot be had, read as the quantized (or unquantized) variant of the shipped
    spec its name extends (hybridplan/variants.py); None when it is none's."""
    from hybridplan import variants
    from hybridplan.quant_config import stated_quantization

    docs = {fn: _read_spec_document(fn) for fn in _spec_documents()}
    found = variants.variant_of(
        repo_id,
        {fn: str(d.get("source") or "") for fn, d in docs.items()},
        {fn: stated_quantization(d["config"])[0] is not None for fn, d in docs.items()},
    )
    if found is None:
        return None
    filename, suffix = found
    doc = docs[filename]
    config, how = variants.config_of(doc["config"], repo_id, suffix)
    base = _spec_from_document(doc, filename)
    spec = spec_from_config(
        config,
        name=f"{base.name}-{suffix}" if not base.name.endswith(suffix) else base.name,
        source=f"{repo_id}@{revision}" if revision else repo_id,
    )
    note = (
        f"{repo_id}: no config.json at hand (not cached, no Hub): read as the shipped spec {base.name} "
        f"({doc.get('source')}), {how}"
    )
    return replace(spec, notes=spec.notes + (note,))


def _subset(part: Any, whole: Any) -> bool:
    """Every field of ``part`` is in ``whole`` with the same value (nested mappings alike)."""
    if isinstance(part, dict):
        return isinstance(whole, dict) and all(k in whole and _subset(v, whole[k]) for k, v in part.items())
    return part == whole


#: name endings of re-saved checkpoints (quantized, converted) and of a model's released variants, taken off a
#: logged model's name one at a time to find the shipped spec it is a re-save of: the architecture and the cache
#: shapes are the base model's (the weights are not: a quantized checkpoint is weighed from its own config)
_RESAVE_SUFFIXES = (
    "awq",
    "gptq",
    "int4",
    "int8",
    "w4a16",
    "w8a8",
    "w4a4",
    "fp8",
    "fp8-dynamic",
    "fp8-block",
    "nvfp4",
    "mxfp4",
    "mxfp8",
    "fp4",
    "bnb",
    "bnb-4bit",
    "4bit",
    "8bit",
    "4-bit",
    "8-bit",
    "autoround",
    "auto-round",
    "dynamic",
    "quantized",
    "modelopt",
    "text",
    "mlx",
    "hf",
    "bf16",
    "fp16",
    "mtp",
)
_VARIANT_SUFFIXES = ("instruct", "thinking", "base", "chat", "it", "hf")
#: (patterns compiled on first use, by re's own cache: only check-log reads a logged name)
_SIZE = r"\d(?:\.\d+)?[bmt](?:$|[-_])"
_CACHE_DIR = r"models--([^/\\]+?)--([^/\\]+)"


def _logged_names(ref: str) -> tuple[str, list[str]]:
    """A logged model reference (a Hub id, a local path, a Hugging Face cache path) as the Hub id it names, if
    any, and the candidate names to look up, most exact first."""
    text = ref.strip().rstrip("/\\")
    if (m := re.search(_CACHE_DIR, text)) is not None:
        hub_id = f"{m.group(1)}/{m.group(2)}"
    else:
        parts = [p for p in re.split(r"[/\\]", text) if p]
        hub_id = "/".join(parts[-2:]) if len(parts) >= 2 else None
    base = (hub_id or text).split("/")[-1].lower()
    names = [base]
    name = base
    for suffixes in (_RESAVE_SUFFIXES, _VARIANT_SUFFIXES):
        while True:
            cut = next(
                (name[: -len(s) - 1] for s in suffixes if name.endswith("-" + s) or name.endswith("_" + s)), None
            )
            if not cut:
                break
            name = cut
            names.append(name)
    return hub_id.lower() if hub_id else "", list(dict.fromkeys(names))


def load_logged_model(ref: str, architecture: str | None = None) -> tuple[ModelSpec, str]:
    """The model a start-up log names (a Hub id, a local path, a Hugging Face cache path), and how it was found:
    the path itself where it exists here; else the shipped spec whose source, name or alias it is, or whose
    re-save it is (a quantized or converted copy: the name with its ``-AWQ``, ``-NVFP4``, ``-Instruct`` … endings
    taken off); else its config.json in the local Hugging Face cache. A spec whose architecture is not the one
    the log resolved (``architecture``) is never taken. Else an error asking for --model."""
    path = Path(ref).expanduser()
    if path.exists():
        return check_architecture(load_path(path), architecture, ref), "the log's path, read here"
    hub_id, names = _logged_names(ref)
    specs = [(fn, _read_spec_document(fn)) for fn in _spec_documents()]
    by_name: dict[str, str] = {}
    for fn, doc in specs:
        source = str(doc.get("source") or "").lower()
        keys = [
            fn[:-5],
            *(str(a).lower() for a in doc.get("aliases") or ()),
            source.split("/")[-1],
            *(str(p).lower().split("/")[-1] for p in doc.get("post_trains") or ()),
        ]
        for key in keys:
            by_name.setdefault(key, fn)
        if source and source == hub_id:
            by_name.setdefault("\0" + source, fn)

    def sized():
        """A re-save whose ending is not one of the known ones (``Qwen3.6-35B-A3B-PrismaQuant-4.75bit-vllm``): the
        longest shipped name that starts it and names a size, so that a family name never stands for a sized
        model; sought only once the exact names are not found."""
        yield from sorted(
            (k for k in by_name if re.search(_SIZE, k) and names[-1].startswith((k + "-", k + "_"))),
            key=len,
            reverse=True,
        )

    for i, key in enumerate(chain(["\0" + hub_id, *names], sized())):
        fn = by_name.get(key)
        if fn is None:
            continue
        spec = _spec_from_document(_read_spec_document(fn), fn)
        if architecture and spec.architecture != architecture:
            continue
        how = (
            "the shipped spec whose source it is"
            if i == 0
            else "the shipped spec of that name"
            if i == 1
            else f"the shipped spec {spec.name}, of which {ref.rstrip('/').split('/')[-1]} is a re-save or variant"
        )
        return spec, how
    if hub_id:
        from hybridplan import hub

        try:
            import huggingface_hub

            cached = huggingface_hub.try_to_load_from_cache(hub_id, "config.json", cache_dir=hub.cache_dir())
        except Exception:  # noqa: BLE001 - no cache to read: the error below says what to do
            cached = None
        if isinstance(cached, str):
            spec = spec_from_config(_parse_file(Path(cached)), name=hub_id.split("/")[-1], source=hub_id)
            return check_architecture(spec, architecture, ref), "its config.json in the local Hugging Face cache"
    arch = f" ({architecture})" if architecture else ""
    raise PlanError(
        f"the log's model {ref!r}{arch} is not a shipped spec, nor in the local Hugging Face cache: pass "
        "--model (a shipped spec of the same architecture, or its config.json)"
    )


def check_architecture(spec: ModelSpec, architecture: str | None, ref: str) -> ModelSpec:
    """Refuse a model whose architecture is not the one the log resolved."""
    if architecture and spec.architecture != architecture:
        raise PlanError(
            f"{ref} is a {spec.architecture}, but the log resolved the architecture {architecture}: "
            "pass a --model of that architecture"
        )
    return spec
