"""SGLang's speculative flags read as its server arguments resolve them, per release:

    speculative_from_sglang(flags, target, release=None) -> Speculative
        ``flags``: an ``SglangFlags`` holding ``--speculative-algorithm``, ``--speculative-draft-model-path``,
        ``--speculative-num-steps``, ``--speculative-eagle-topk`` and ``--speculative-num-draft-tokens`` as typed
        (None = not given); ``release``: an SGLang version string (newest when None).

What joins the caches, and the draft, are read by hybridplan/speculative.py (``mtp_layers``, ``load_draft``).
"""

from __future__ import annotations

from msgspec import Struct

from hybridplan.errors import PlanError
from hybridplan.scenario import Speculative
from hybridplan.spec import ModelSpec
from hybridplan.speculative import load_draft, mtp_layers, token_count

#: ``--speculative-algorithm`` choices (sglang/srt/server_args.py; SpeculativeAlgorithm in
#: sglang/srt/speculative/spec_info.py) and the release that first accepts each, read from the wheels of
#: 0.5.2-0.5.23: DFLASH from 0.5.11 (0.5.10 has none), DSPARK from 0.5.16; NEXTN is EAGLE.
SGLANG_ALGORITHMS: dict[str, str] = {
    "EAGLE": "0.5.2",
    "EAGLE3": "0.5.2",
    "NEXTN": "0.5.2",
    "STANDALONE": "0.5.2",
    "NGRAM": "0.5.2",
    "DFLASH": "0.5.11",
    "DSPARK": "0.5.16",
}


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
    ``spec_tokens`` and D as ``SglangSettings.draft_tokens`` (hybridplan/build.py does so)."""
    from hybridplan.engines.sglang.releases import release as parse

    rel = parse(release)
    algorithm, draft, num_steps, eagle_topk, num_draft_tokens = (
        flags.algorithm,
        flags.draft,
        flags.num_steps,
        flags.eagle_topk,
        flags.num_draft_tokens,
    )
    if algorithm is None:
        return Speculative()
    name = algorithm.upper()
    since = SGLANG_ALGORITHMS.get(name)
    if since is None or rel.before(since):
        known = [a for a, s in SGLANG_ALGORITHMS.items() if rel.at_least(s)]
        raise PlanError(
            f'SGLang {rel.version} refuses --speculative-algorithm {algorithm}: "Unknown speculative '
            f'algorithm name: {algorithm}" (it has {", ".join(known)}; sglang/srt/speculative/'
            "spec_info.py)" + (f"; {name} is accepted from {since}" if since else "")
        )
    steps = token_count(num_steps, "--speculative-num-steps")
    topk = token_count(eagle_topk, "--speculative-eagle-topk")
    tokens = token_count(num_draft_tokens, "--speculative-num-draft-tokens")
    if tokens is None:
        if steps is None:
            raise PlanError(
                f"--speculative-algorithm {algorithm} needs --speculative-num-steps or "
                "--speculative-num-draft-tokens (hybridplan does not guess SGLang's auto choice)"
            )
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
