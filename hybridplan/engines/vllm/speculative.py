"""vLLM's ``--speculative-config`` read as ``SpeculativeConfig.__post_init__`` reads it, per release:

    speculative_from_vllm(config, target, release=None) -> Speculative
        ``config``: the JSON text, or the dict it parses to; ``target``: the served model's ModelSpec;
        ``release``: a vLLM version string or Release (newest when None).

What joins the caches, and the draft, are read by hybridplan/speculative.py (``mtp_layers``, ``load_draft``).
"""

from __future__ import annotations

import json
from typing import Any

from hybridplan.errors import PlanError
from hybridplan.scenario import Speculative
from hybridplan.spec import ModelSpec
from hybridplan.speculative import load_draft, mtp_layers, token_count

# --- vLLM -------------------------------------------------------------------------------------------------

#: ``SpeculativeMethod`` (vllm/config/speculative.py; vllm/config/__init__.py in 0.10.x): each method name and
#: the release that first accepts it, and the first that no longer does (None: still accepted in 0.33.0). Read
#: from the wheels of 0.10.0, 0.10.1, 0.10.2, 0.11.0, 0.12.0, 0.14.0, 0.16.0-0.20.1, 0.22.0, 0.24.0, 0.26.0,
#: 0.28.0-0.30.0, 0.32.0 and 0.33.0; a name that came between two of them is given from the later one.
VLLM_METHODS: dict[str, tuple[str, str | None]] = {
    "ngram": ("0.10.0", None),
    "eagle": ("0.10.0", None),
    "eagle3": ("0.10.0", None),
    "draft_model": ("0.10.0", None),
    "deepseek_mtp": ("0.10.0", None),
    "medusa": ("0.10.0", "0.33.0"),
    "mlp_speculator": ("0.10.0", "0.33.0"),
    "qwen3_next_mtp": ("0.10.2", None),
    "ernie_mtp": ("0.10.2", None),
    "mtp": ("0.11.0", None),
    "mimo_mtp": ("0.11.0", None),
    "glm4_moe_mtp": ("0.11.0", None),
    "longcat_flash_mtp": ("0.11.0", None),
    "suffix": ("0.12.0", None),
    "qwen3_5_mtp": ("0.17.0", None),
    "nemotron_h_mtp": ("0.17.0", None),
    "extract_hidden_states": ("0.17.0", None),
    "ngram_gpu": ("0.18.0", None),
    "dflash": ("0.20.0", None),
    "custom_class": ("0.22.0", None),
    "dspark": ("0.26.0", None),
}
#: the per-model MTP names that 0.11.0 on rewrites to ``mtp`` ("method `…` is deprecated and replaced with mtp")
VLLM_MTP_NAMES = frozenset(
    {
        "deepseek_mtp",
        "qwen3_next_mtp",
        "ernie_mtp",
        "mimo_mtp",
        "glm4_moe_mtp",
        "longcat_flash_mtp",
        "qwen3_5_mtp",
        "nemotron_h_mtp",
    }
)
#: methods whose draft is a model of its own, named by ``model``
VLLM_DRAFT_METHODS = frozenset({"eagle", "eagle3", "dflash", "draft_model", "dspark"})
#: methods that propose without a model (nothing joins the caches)
VLLM_MODEL_FREE = frozenset({"ngram", "ngram_gpu", "suffix", "extract_hidden_states"})
#: methods whose heads keep no KV (MLP heads on the target's hidden states)
VLLM_HEADS_ONLY = frozenset({"medusa", "mlp_speculator"})


def _vllm_release(release: Any) -> Any:
    from hybridplan.engines.vllm.releases import Release
    from hybridplan.engines.vllm.releases import release as parse

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


def speculative_from_vllm(config: str | dict, target: ModelSpec, release: Any = None) -> Speculative:
    """vLLM's ``--speculative-config`` read as ``SpeculativeConfig.__post_init__`` reads it at ``release``."""
    rel = _vllm_release(release)
    cfg = _parse_json(config, "--speculative-config")
    method, model = cfg.get("method"), cfg.get("model")
    if method is not None and not isinstance(method, str):
        raise PlanError(f"--speculative-config: method must be a string, got {method!r}")
    if model is not None and not isinstance(model, str):
        raise PlanError(f"--speculative-config: model must be a string, got {model!r}")
    k = token_count(cfg.get("num_speculative_tokens"), "--speculative-config num_speculative_tokens")
    if method is None:  # vLLM infers it: ngram by name, else a draft model, told apart by its name
        if model is None:
            raise PlanError("--speculative-config names neither a method nor a model")
        low = model.lower()
        method = (
            "ngram"
            if model in ("ngram", "[ngram]")
            else "eagle"
            if "eagle-" in low
            else "eagle3"
            if "eagle3" in low
            else "dflash"
            if "dflash" in low and rel.at_least("0.20.0")
            else "draft_model"
        )
    since, until = VLLM_METHODS.get(method, (None, None))
    if since is None or rel.before(since) or (until is not None and rel.at_least(until)):
        known = sorted(m for m, (a, b) in VLLM_METHODS.items() if rel.at_least(a) and (b is None or rel.before(b)))
        when = (
            f"; it is accepted from vLLM {since}"
            if since and rel.before(since)
            else f"; vLLM {until} dropped it"
            if until and rel.at_least(until)
            else ""
        )
        raise PlanError(
            f"vLLM {rel.version} refuses speculative method {method!r} (SpeculativeMethod, "
            f"vllm/config/speculative.py: input should be one of {', '.join(known)}){when}"
        )
    if method in VLLM_MTP_NAMES and rel.at_least("0.11.0"):
        method = "mtp"
    if method in VLLM_MODEL_FREE or method in VLLM_HEADS_ONLY:
        if k is None:
            raise PlanError(f"--speculative-config: {method} needs num_speculative_tokens")
        ref = None if method in VLLM_MODEL_FREE else model
        return Speculative(method=method, num_tokens=k, draft_ref=ref)
    if method in VLLM_DRAFT_METHODS:
        if model is None:
            raise PlanError(
                "num_speculative_tokens was provided but without speculative model "
                f'(vLLM {rel.version}, vllm/config/speculative.py): {method} needs "model"'
            )
        draft = load_draft(model)
        if k is None:
            raise PlanError(
                "num_speculative_tokens must be provided with speculative model unless the draft "
                "model config contains an n_predict parameter (vllm/config/speculative.py)"
            )
        return Speculative(method=method, num_tokens=k, draft=draft, draft_ref=model, layers=draft.mixers)
    # MTP: the target drafts with its own MTP layers; num_speculative_tokens defaults to their count
    layers, n_predict = mtp_layers(target)
    if k is None:
        k = n_predict
    elif k > n_predict and k % n_predict:
        raise PlanError(
            f"num_speculative_tokens:{k} must be divisible by n_predict={n_predict} "
            f"(vLLM {rel.version}, vllm/config/speculative.py)"
        )
    return Speculative(method=method, num_tokens=k, draft_ref=model, layers=layers)
