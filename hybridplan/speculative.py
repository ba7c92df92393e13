"""Speculative decoding as each engine reads its flags: the method, the tokens proposed per step, and the layers
the draft adds to the caches. Two entry points, for the command line and for check-log alike:

    speculative_from_vllm(config, target, release=None) -> Speculative
        ``config``: vLLM's ``--speculative-config`` (the JSON text, or the dict it parses to);
        ``target``: the served model's ModelSpec; ``release``: a vLLM version string or Release (newest when None).

    speculative_from_sglang(flags, target, release=None) -> Speculative
        ``flags``: an ``SglangFlags`` holding SGLang's ``--speculative-algorithm``,
        ``--speculative-draft-model-path``, ``--speculative-num-steps``, ``--speculative-eagle-topk`` and
        ``--speculative-num-draft-tokens`` as typed (None = not given); ``release``: an SGLang version string
        (newest when None).

Both raise PlanError, in the engine's words where it has them, for bad JSON, an unknown method, a method the
release does not know, a draft that is missing or cannot be read, and MTP on a model without MTP layers.

What joins the caches (``Speculative.layers``): the draft model's token mixers (EAGLE, EAGLE-3, DFlash, a
draft model; loaded with ``hybridplan.loader.load_model``), or for MTP the target's own MTP layers, read from
its config: Qwen3.5 ``mtp_num_hidden_layers`` and Qwen3-Next ``num_nextn_predict_layers`` full-attention
layers (vllm/model_executor/models/qwen3_5_mtp.py, qwen3_next_mtp.py), Nemotron-H ``num_nextn_predict_layers``
× the attention layers of ``mtp_hybrid_override_pattern`` (nemotron_h_mtp.py), DeepSeek
``num_nextn_predict_layers`` MLA layers (deepseek_mtp.py). How each engine sizes them is an engine rule
(engines/vllm/sizing.py, engines/sglang/pool.py).

The same draft's weights (the MTP layers counted from the target's config, or the draft model's from its own)
are counted by hybridplan/weights and loaded as each engine loads them (``drafter`` in engines/vllm/memory.py and
engines/sglang/memory.py): a Qwen3-Next config without ``num_nextn_predict_layers`` has one MTP layer, as vLLM
reads it (``getattr(config, "num_nextn_predict_layers", 1)``, qwen3_next_mtp.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from msgspec import Struct

from hybridplan.errors import PlanError
from hybridplan.scenario import Speculative
from hybridplan.spec import MLA, Attention, Mixer, ModelSpec

# --- vLLM -------------------------------------------------------------------------------------------------

#: ``SpeculativeMethod`` (vllm/config/speculative.py; vllm/config/__init__.py in 0.10.x): each method name and
#: the release that first accepts it, and the first that no longer does (None: still accepted in 0.33.0). Read
#: from the wheels of 0.10.0, 0.10.1, 0.10.2, 0.11.0, 0.12.0, 0.14.0, 0.16.0-0.20.1, 0.22.0, 0.24.0, 0.26.0,
#: 0.28.0-0.30.0, 0.32.0 and 0.33.0; a name that came between two of them is given from the later one.
VLLM_METHODS: dict[str, tuple[str, str | None]] = {
    "ngram": ("0.10.0", None), "eagle": ("0.10.0", None), "eagle3": ("0.10.0", None),
    "draft_model": ("0.10.0", None), "deepseek_mtp": ("0.10.0", None),
    "medusa": ("0.10.0", "0.33.0"), "mlp_speculator": ("0.10.0", "0.33.0"),
    "qwen3_next_mtp": ("0.10.2", None), "ernie_mtp": ("0.10.2", None),
    "mtp": ("0.11.0", None), "mimo_mtp": ("0.11.0", None), "glm4_moe_mtp": ("0.11.0", None),
    "longcat_flash_mtp": ("0.11.0", None),
    "suffix": ("0.12.0", None),
    "qwen3_5_mtp": ("0.17.0", None), "nemotron_h_mtp": ("0.17.0", None),
    "extract_hidden_states": ("0.17.0", None), "ngram_gpu": ("0.18.0", None),
    "dflash": ("0.20.0", None),
    "custom_class": ("0.22.0", None),
    "dspark": ("0.26.0", None),
}
#: the per-model MTP names that 0.11.0 on rewrites to ``mtp`` ("method `…` is deprecated and replaced with mtp")
VLLM_MTP_NAMES = frozenset({"deepseek_mtp", "qwen3_next_mtp", "ernie_mtp", "mimo_mtp", "glm4_moe_mtp",
                            "longcat_flash_mtp", "qwen3_5_mtp", "nemotron_h_mtp"})
#: methods whose draft is a model of its own, named by ``model``
VLLM_DRAFT_METHODS = frozenset({"eagle", "eagle3", "dflash", "draft_model", "dspark"})
#: methods that propose without a model (nothing joins the caches)
VLLM_MODEL_FREE = frozenset({"ngram", "ngram_gpu", "suffix", "extract_hidden_states"})
#: methods whose heads keep no KV (MLP heads on the target's hidden states)
VLLM_HEADS_ONLY = frozenset({"medusa", "mlp_speculator"})


def _vllm_release(release: Any) -> Any:
    from hybridplan.engines.vllm.releases import Release, release as parse

    return release if isinstance(release, Release) else parse(release)


def _parse_json(config: str | dict, flag: str) -> dict:
    if isinstance(config, dict):
        return config
    try:
        parsed = json.loads(config)
    except json.JSONDecodeError as exc:
        raise PlanError(f"{flag} is not valid JSON ({exc.msg} at column {exc.colno}): {config}") from None
    if not isinstance(parsed, dict):
        raise PlanError(f"{flag} must be a JSON object, got {config}")
    return parsed


def _tokens(value: Any, flag: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlanError(f"{flag} must be a positive integer, got {value!r}")
    return value


def speculative_from_vllm(config: str | dict, target: ModelSpec, release: Any = None) -> Speculative:
    """vLLM's ``--speculative-config`` read as ``SpeculativeConfig.__post_init__`` reads it at ``release``."""
    rel = _vllm_release(release)
    cfg = _parse_json(config, "--speculative-config")
    method, model = cfg.get("method"), cfg.get("model")
    if method is not None and not isinstance(method, str):
        raise PlanError(f"--speculative-config: method must be a string, got {method!r}")
    if model is not None and not isinstance(model, str):
        raise PlanError(f"--speculative-config: model must be a string, got {model!r}")
    k = _tokens(cfg.get("num_speculative_tokens"), "--speculative-config num_speculative_tokens")
    if method is None:  # vLLM infers it: ngram by name, else a draft model, told apart by its name
        if model is None:
            raise PlanError("--speculative-config names neither a method nor a model")
        low = model.lower()
        method = ("ngram" if model in ("ngram", "[ngram]") else "eagle" if "eagle-" in low
                  else "eagle3" if "eagle3" in low else "dflash" if "dflash" in low and rel.at_least("0.20.0")
                  else "draft_model")
    since, until = VLLM_METHODS.get(method, (None, None))
    if since is None or rel.before(since) or (until is not None and rel.at_least(until)):
        known = sorted(m for m, (a, b) in VLLM_METHODS.items() if rel.at_least(a) and (b is None or rel.before(b)))
        when = (f"; it is accepted from vLLM {since}" if since and rel.before(since)
                else f"; vLLM {until} dropped it" if until and rel.at_least(until) else "")
        raise PlanError(f"vLLM {rel.version} refuses speculative method {method!r} (SpeculativeMethod, "
                        f"vllm/config/speculative.py: input should be one of {', '.join(known)}){when}")
    if method in VLLM_MTP_NAMES and rel.at_least("0.11.0"):
        method = "mtp"
    if method in VLLM_MODEL_FREE or method in VLLM_HEADS_ONLY:
        if k is None:
            raise PlanError(f"--speculative-config: {method} needs num_speculative_tokens")
        ref = None if method in VLLM_MODEL_FREE else model
        return Speculative(method=method, num_tokens=k, draft_ref=ref)
    if method in VLLM_DRAFT_METHODS:
        if model is None:
            raise PlanError("num_speculative_tokens was provided but without speculative model "
                            f"(vLLM {rel.version}, vllm/config/speculative.py): {method} needs \"model\"")
        draft = load_draft(model)
        if k is None:
            raise PlanError("num_speculative_tokens must be provided with speculative model unless the draft "
                            "model config contains an n_predict parameter (vllm/config/speculative.py)")
        return Speculative(method=method, num_tokens=k, draft=draft, draft_ref=model, layers=draft.mixers)
    # MTP: the target drafts with its own MTP layers; num_speculative_tokens defaults to their count
    layers, n_predict = mtp_layers(target)
    if k is None:
        k = n_predict
    elif k > n_predict and k % n_predict:
        raise PlanError(f"num_speculative_tokens:{k} must be divisible by n_predict={n_predict} "
                        f"(vLLM {rel.version}, vllm/config/speculative.py)")
    return Speculative(method=method, num_tokens=k, draft_ref=model, layers=layers)


# --- SGLang -----------------------------------------------------------------------------------------------

#: ``--speculative-algorithm`` choices (sglang/srt/server_args.py; SpeculativeAlgorithm in
#: sglang/srt/speculative/spec_info.py) and the release that first accepts each, read from the wheels of
#: 0.5.2-0.5.23: DFLASH from 0.5.11 (0.5.10 has none), DSPARK from 0.5.16; NEXTN is EAGLE.
SGLANG_ALGORITHMS: dict[str, str] = {"EAGLE": "0.5.2", "EAGLE3": "0.5.2", "NEXTN": "0.5.2", "STANDALONE": "0.5.2",
                                     "NGRAM": "0.5.2", "DFLASH": "0.5.11", "DSPARK": "0.5.16"}


class SglangFlags(Struct, frozen=True):
    """SGLang's speculative flags as typed (None = not given)."""

    algorithm: str | None = None
    #: ``--speculative-draft-model-path``
    draft: str | None = None
    num_steps: int | None = None
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None


def speculative_from_sglang(flags: SglangFlags, target: ModelSpec, release: str | None = None) -> Speculative:
    """SGLang's speculative flags as its server arguments resolve them at ``release``. ``num_tokens`` is D,
    ``--speculative-num-draft-tokens`` (the verify step's tokens per request): given, else ``num_steps + 1`` for
    top-k 1 (SGLang's ServerArgs sets it so). A Scenario takes the steps (``num_steps``, else D − 1) as its
    ``spec_tokens`` and D as ``SglangSettings.draft_tokens`` (hybridplan/options.py does so)."""
    from hybridplan.engines.sglang.releases import release as parse

    rel = parse(release)
    algorithm, draft, num_steps, eagle_topk, num_draft_tokens = (flags.algorithm, flags.draft, flags.num_steps,
                                                                 flags.eagle_topk, flags.num_draft_tokens)
    if algorithm is None:
        return Speculative()
    name = algorithm.upper()
    since = SGLANG_ALGORITHMS.get(name)
    if since is None or rel.before(since):
        known = [a for a, s in SGLANG_ALGORITHMS.items() if rel.at_least(s)]
        raise PlanError(f"SGLang {rel.version} refuses --speculative-algorithm {algorithm}: \"Unknown speculative "
                        f"algorithm name: {algorithm}\" (it has {', '.join(known)}; sglang/srt/speculative/"
                        "spec_info.py)" + (f"; {name} is accepted from {since}" if since else ""))
    steps = _tokens(num_steps, "--speculative-num-steps")
    topk = _tokens(eagle_topk, "--speculative-eagle-topk")
    tokens = _tokens(num_draft_tokens, "--speculative-num-draft-tokens")
    if tokens is None:
        if steps is None:
            raise PlanError(f"--speculative-algorithm {algorithm} needs --speculative-num-steps or "
                            "--speculative-num-draft-tokens (hybridplan does not guess SGLang's auto choice)")
        if topk not in (None, 1):
            raise PlanError("with --speculative-eagle-topk above 1 give --speculative-num-draft-tokens")
        tokens = steps + 1
    if tokens < 2:
        raise PlanError(f"--speculative-num-draft-tokens must be at least 2 (one proposed token), got {tokens}")
    method = "eagle" if name == "NEXTN" else name.lower()
    if name == "NGRAM":
        return Speculative(method=method, num_tokens=tokens)
    if name == "NEXTN" and draft is None:  # the target's own MTP layers
        layers, _ = mtp_layers(target)
        return Speculative(method=method, num_tokens=tokens, layers=layers)
    if draft is None:
        raise PlanError(f"--speculative-algorithm {algorithm} needs --speculative-draft-model-path")
    spec = load_draft(draft) if draft != target.source else target
    layers = spec.mixers if spec is not target else mtp_layers(target)[0]
    return Speculative(method=method, num_tokens=tokens, draft=spec, draft_ref=draft, layers=layers)


# --- the draft's layers -----------------------------------------------------------------------------------

#: draft architectures whose layers are plain decoder layers (EAGLE heads are Llama layers; DFlash drafts are
#: Qwen3 layers): read with the dense-attention adapter
DRAFT_ARCHITECTURES = ("LlamaForCausalLMEagle", "LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM",
                       "EagleLlamaForCausalLM", "Qwen3ForCausalLMEagle3", "Eagle3Qwen3ForCausalLM",
                       "DFlashDraftModel", "DFlash2DraftModel", "Qwen3DFlashForCausalLM", "Qwen3DSparkModel")


def load_draft(ref: str) -> ModelSpec:
    """The draft model: a shipped spec, a config path or folder, or a Hub id (``hybridplan.loader``); a draft
    architecture the adapters do not list is read as the plain attention layers it is made of."""
    from hybridplan.loader import load_model

    try:
        return load_model(ref)
    except PlanError as exc:
        if "unsupported architecture" not in str(exc):
            raise PlanError(f"the speculative draft model {ref}: {exc}") from None
    cfg = _raw_config(ref)
    archs = cfg.get("architectures") or []
    if not any(a in DRAFT_ARCHITECTURES for a in archs):
        raise PlanError(f"the speculative draft model {ref} has architecture {', '.join(map(str, archs))}, "
                        f"which hybridplan does not read (draft architectures: {', '.join(DRAFT_ARCHITECTURES)})")
    from hybridplan.adapters import spec_from_config

    return spec_from_config({**cfg, "architectures": ["LlamaForCausalLM"]}, name=Path(ref).name or ref,
                            source=ref)


def _raw_config(ref: str) -> dict:
    path = Path(ref).expanduser()
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise PlanError(f"cannot read the draft config {path}: {exc}") from None
    from hybridplan import hub

    return hub.config(ref)[0]


def mtp_layers(target: ModelSpec) -> tuple[tuple[Mixer, ...], int]:
    """The target's MTP layers that keep a cache, and how many MTP steps it has (vLLM's ``n_predict``)."""
    raw = json.loads(target.config_json or "{}")
    text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else raw
    arch = target.architecture
    full = next((m for m in target.attention if isinstance(m, Attention) and m.window is None), None)
    if arch.startswith("Qwen3_5") or arch == "Qwen3NextForCausalLM":
        key = "mtp_num_hidden_layers" if arch.startswith("Qwen3_5") else "num_nextn_predict_layers"
        n = _count(text.get(key, 1), key)
        return _need(target, (full,) * n if full else (), n, key)
    if arch == "NemotronHForCausalLM":
        n = _count(text.get("num_nextn_predict_layers", 0), "num_nextn_predict_layers")
        pattern = text.get("mtp_hybrid_override_pattern")
        if n and not isinstance(pattern, str):
            raise PlanError(f"{target.name}: num_nextn_predict_layers is {n} but the config has no "
                            "mtp_hybrid_override_pattern (vllm/model_executor/models/nemotron_h_mtp.py)")
        attn = pattern.count("*") if n else 0
        return _need(target, (full,) * (n * attn) if full else (), n, "num_nextn_predict_layers")
    if arch.startswith("Deepseek"):
        n = _count(text.get("num_nextn_predict_layers", 0), "num_nextn_predict_layers")
        mla = next((m for m in target.attention if isinstance(m, MLA)), None)
        return _need(target, (mla,) * n if mla else (), n, "num_nextn_predict_layers")
    raise PlanError(f"{target.name} ({arch}) has no MTP layers hybridplan reads: MTP drafts with the target's own "
                    "layers (Qwen3.5, Qwen3-Next, Nemotron-H, DeepSeek)")


def _count(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise PlanError(f"config field {key!r} must be a non-negative integer, got {value!r}")
    return value


def _need(target: ModelSpec, layers: tuple, n: int, key: str) -> tuple[tuple[Mixer, ...], int]:
    if n == 0:
        raise PlanError(f"{target.name} has no MTP layers ({key} is 0): MTP speculative decoding needs them")
    return layers, n
