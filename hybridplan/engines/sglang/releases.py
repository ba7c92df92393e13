"""Which SGLang release, and what it decides before any arithmetic: the models it runs with a Mamba pool,
whether their radix cache is on, the radix strategies and the one ``auto`` picks, the state slots a request
holds, and which band of the pool-sizing code runs. Every 0.5.x release on PyPI is known; the Mamba pool came
in 0.5.2. Paths are those of the SGLang wheels (``sglang/srt/...``); docs/engines.md lists the rules by
release."""

from __future__ import annotations

import re

from msgspec import Struct

from hybridplan.errors import NotServed, PlanError
from hybridplan.spec import ModelSpec

#: every 0.5.x release on PyPI (there is no final 0.5.0); the first ones have no Mamba pool
EARLY = (
    "0.5.0rc0",
    "0.5.0rc1",
    "0.5.0rc2",
    "0.5.1",
    "0.5.1.post1",
    "0.5.1.post2",
    "0.5.1.post3",
    "0.5.2rc0",
    "0.5.2rc1",
    "0.5.2rc2",
)
VERSIONS = (
    "0.5.2",
    "0.5.3rc0",
    "0.5.3rc2",
    "0.5.3",
    "0.5.3.post1",
    "0.5.3.post2",
    "0.5.3.post3",
    "0.5.4",
    "0.5.4.post1",
    "0.5.4.post2",
    "0.5.4.post3",
    "0.5.5",
    "0.5.5.post1",
    "0.5.5.post2",
    "0.5.5.post3",
    "0.5.6",
    "0.5.6.post1",
    "0.5.6.post2",
    "0.5.7",
    "0.5.8",
    "0.5.8.post1",
    "0.5.9",
    "0.5.10rc0",
    "0.5.10",
    "0.5.10.post1",
    "0.5.11",
    "0.5.12",
    "0.5.12.post1",
    "0.5.13",
    "0.5.13.post1",
    "0.5.14",
    "0.5.15",
    "0.5.15.post1",
    "0.5.16",
    "0.5.17",
    "0.5.18",
    "0.5.19",
    "0.5.20",
    "0.5.21",
    "0.5.22",
    "0.5.23",
)
DEFAULT_VERSION = VERSIONS[-1]

#: the release whose models/ first holds a class for the architecture (``EntryClass``)
_ADDED = {
    "Qwen3NextForCausalLM": "0.5.2",
    "FalconH1ForCausalLM": "0.5.3rc2",
    "NemotronHForCausalLM": "0.5.3.post1",
    "KimiLinearForCausalLM": "0.5.4.post2",
    "GraniteMoeHybridForCausalLM": "0.5.9",
    "Lfm2ForCausalLM": "0.5.9",
    "Lfm2MoeForCausalLM": "0.5.9",
    "Qwen3_5ForConditionalGeneration": "0.5.9",
    "Qwen3_5MoeForConditionalGeneration": "0.5.9",
    "NemotronHPuzzleForCausalLM": "0.5.13",
    "Qwen3_5ForCausalLM": "0.5.17",
    "Qwen3_5MoeForCausalLM": "0.5.17",
    "MambaForCausalLM": "0.5.20",
    "Mamba2ForCausalLM": "0.5.20",
    "FalconMambaForCausalLM": "0.5.20",
}
#: hybrids no 0.5.x release has a class for
_NEVER = frozenset(
    {
        "BambaForCausalLM",
        "JambaForCausalLM",
        "Zamba2ForCausalLM",
        "MiniMaxText01ForCausalLM",
        "MiniMaxForCausalLM",
        "MiniMaxM1ForCausalLM",
    }
)

#: architectures whose radix cache SGLang switches off, from one release to the one before the second
#: (model_runner.py and server_args.py: "... model detected, disable radix cache", "Disabling Radix Cache for
#: ... as it is not yet supported")
_RADIX_OFF = {
    "NemotronHForCausalLM": ("0.5.3.post1", "0.5.6.post1"),
    "FalconH1ForCausalLM": ("0.5.3rc2", "0.5.6.post1"),
    "KimiLinearForCausalLM": ("0.5.4.post2", "0.5.14"),
}

#: architectures that may run the extra_buffer strategy, with the release that first allows it
#: (server_args.py ``_handle_mamba_radix_cache``; 0.5.14 ``_support_mamba_cache_extra_buffer``; 0.5.15+
#: arg_groups/overrides.py ``_MAMBA_EXTRA_BUFFER_ARCHS``)
_EXTRA_BUFFER = {
    "Qwen3NextForCausalLM": "0.5.7",
    "Qwen3_5ForConditionalGeneration": "0.5.9",
    "Qwen3_5MoeForConditionalGeneration": "0.5.9",
    "FalconH1ForCausalLM": "0.5.13",
    "GraniteMoeHybridForCausalLM": "0.5.13",
    "NemotronHForCausalLM": "0.5.13",
    "NemotronHPuzzleForCausalLM": "0.5.14",
    "KimiLinearForCausalLM": "0.5.16",
    "Qwen3_5ForCausalLM": "0.5.19",
    "Qwen3_5MoeForCausalLM": "0.5.19",
}

#: SGLang resolves ``auto`` and checks the strategy (no_buffer: page_size 1, no overlap scheduler, speculative
#: decoding; the 0.5.11–0.5.13 page reset) only for the architectures it lists: server_args.py's per-model
#: branches calling ``_handle_mamba_radix_cache`` (0.5.9–0.5.14), then arg_groups/overrides.py
#: ``_MAMBA_RADIX_CACHE_ARCHS`` or a registered linear-attention spec (0.5.15–0.5.23). Every hybrid hybridplan
#: models is listed from its class on, except these: listed from the release given, or never (None)
_RADIX_CHECKED_FROM = {
    "Lfm2MoeForCausalLM": "0.5.17",
    "Qwen3_5ForCausalLM": "0.5.19",
    "Qwen3_5MoeForCausalLM": "0.5.19",
    "MambaForCausalLM": None,
    "Mamba2ForCausalLM": None,
    "FalconMambaForCausalLM": None,
}

#: configs whose state-dtype helper is handed the model config from 0.5.9, so that its ``mamba_ssm_dtype``
#: counts (configs/mamba_utils.py ``mamba2_state_dtype(self)`` in configs/<model>.py); the others keep float32
_SSM_FROM_CONFIG = frozenset(
    {
        "NemotronHForCausalLM",
        "NemotronHPuzzleForCausalLM",
        "FalconH1ForCausalLM",
        "Qwen3NextForCausalLM",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen3_5ForCausalLM",
        "Qwen3_5MoeForCausalLM",
        "Lfm2ForCausalLM",
    }
)

#: Nemotron-H: the config fields configs/nemotron_h.py ``NemotronHConfig`` takes the layers from, with the release
#: that first reads each; a config naming none of them gets the class's default pattern, not the model's layers
_NEMOTRON_LAYER_FIELDS = {"hybrid_override_pattern": "0.5.3.post1", "layers_block_type": "0.5.10rc0"}
#: the release whose models/nemotron_h.py ``ALL_DECODER_LAYER_TYPES`` first builds an MoE layer ('E'); before it
#: ``NemotronHModel`` fails on the first one (KeyError: 'E')
_NEMOTRON_MOE = "0.5.6"

#: ``--mamba-radix-cache-strategy`` (``--mamba-scheduler-strategy`` before 0.5.14) and ``off`` for
#: ``--disable-radix-cache``
STRATEGIES = ("auto", "off", "no_buffer", "extra_buffer", "extra_buffer_lazy")

#: a version as typed or logged (compiled on first use, by re's own cache: the default release needs none)
_VERSION = r"v?0\.5\.(\d+)(rc\d+|\.post\d+)?(?:\.?dev[\w.]*)?(?:\+[\w.]*)?"


def _key(version: str) -> tuple[int, int, int]:
    """(patch, stage, n): rc n → (p, 0, n), final → (p, 1, 0), post n → (p, 2, n)."""
    m = re.fullmatch(r"0\.5\.(\d+)(?:rc(\d+)|\.post(\d+))?", version)
    assert m is not None, version
    patch, rc, post = m.groups()
    if rc is not None:
        return int(patch), 0, int(rc)
    return (int(patch), 2, int(post)) if post is not None else (int(patch), 1, 0)


class Release(Struct, frozen=True):
    """One SGLang release, by its version string (0.5.x, with any rc or post suffix)."""

    version: str

    @property
    def key(self) -> tuple[int, int, int]:
        return _key(self.version)

    def at_least(self, version: str) -> bool:
        return self.key >= _key(version)

    def before(self, version: str) -> bool:
        return self.key < _key(version)

    def between(self, first: str, after: str | None) -> bool:
        """From ``first`` up to, not including, ``after``."""
        return self.at_least(first) and (after is None or self.before(after))

    # --- which models ------------------------------------------------------------------------------

    def serves(self, spec: ModelSpec) -> bool:
        return self._cannot_load(spec) is None

    def check_served(self, spec: ModelSpec) -> None:
        """SGLang runs the model with a Mamba pool: it has a class for it, that class reads the checkpoint's config
        and builds its layers, and the model has recurrent layers."""
        if not spec.recurrent:
            raise NotServed(f"{spec.name} has no recurrent layers: SGLang keeps no Mamba pool for it")
        if (why := self._cannot_load(spec)) is not None:
            raise NotServed(why)

    def _cannot_load(self, spec: ModelSpec) -> str | None:
        """Why the release cannot load the model, or None: no class for the architecture (``_ADDED``, ``_NEVER``;
        a model without recurrent layers and no class of its own is left to SGLang's other models), or for
        Nemotron-H a checkpoint its code cannot read (``_nemotron_gap``)."""
        arch, added = spec.architecture, _ADDED.get(spec.architecture)
        if arch in _NEVER or (added is None and spec.recurrent):
            return f"SGLang {self.version} has no model class for {arch} ({spec.name})"
        if added is not None and self.before(added):
            return f"SGLang {self.version} has no model class for {arch} ({spec.name}) (its class came in {added})"
        return self._nemotron_gap(spec) if arch == "NemotronHForCausalLM" else None

    def _nemotron_gap(self, spec: ModelSpec) -> str | None:
        """Nemotron-H checkpoints newer than the release's code: a config that names its layers only in a field
        ``NemotronHConfig`` does not read yet (``_NEMOTRON_LAYER_FIELDS``: ``layers_block_type`` from 0.5.10rc0),
        and MoE layers before ``ALL_DECODER_LAYER_TYPES`` has one (``_NEMOTRON_MOE``)."""
        config = spec.facts.fields  # the config's top-level fields (none when the spec was not read from one)
        if config:
            read = [f for f, since in _NEMOTRON_LAYER_FIELDS.items() if self.at_least(since)]
            if not any(f in config for f in read):
                unread = [(f, since) for f, since in _NEMOTRON_LAYER_FIELDS.items() if f in config]
                reason = (
                    f"its config gives them as {unread[0][0]}, which configs/nemotron_h.py NemotronHConfig reads "
                    f"from {unread[0][1]}"
                    if unread
                    else "its config names them in none of the fields "
                    f"configs/nemotron_h.py NemotronHConfig reads ({', '.join(read)})"
                )
                return (
                    f"SGLang {self.version} cannot read the layers of {spec.name}: {reason}; without one the "
                    "class keeps its default layer pattern"
                )
        if "moe" in spec.ffn and self.before(_NEMOTRON_MOE):
            return (
                f"SGLang {self.version} cannot build {spec.name}: models/nemotron_h.py has no MoE layer class "
                f"(ALL_DECODER_LAYER_TYPES has no 'E' until {_NEMOTRON_MOE})"
            )
        return None

    # --- the radix cache ---------------------------------------------------------------------------

    def radix_on(self, spec: ModelSpec) -> bool:
        """Is the radix cache on for this model with no flag? Off for every model until 0.5.3.post1, and for
        some architectures until a later release (``_RADIX_OFF``)."""
        if self.before("0.5.3.post2"):
            return False
        off = _RADIX_OFF.get(spec.architecture)
        return not (off is not None and self.between(*off))

    @property
    def strategies(self) -> tuple[str, ...]:
        """The strategies a start can ask for: before 0.5.7 the radix cache is on or off (on is what 0.5.7
        calls no_buffer); extra_buffer from 0.5.7, extra_buffer_lazy from 0.5.13."""
        if self.before("0.5.7"):
            return ("auto", "off", "no_buffer")
        return STRATEGIES if self.at_least("0.5.13") else STRATEGIES[:4]

    def extra_buffer(self, spec: ModelSpec) -> bool:
        since = _EXTRA_BUFFER.get(spec.architecture)
        return since is not None and self.at_least(since)

    def checks_radix(self, spec: ModelSpec) -> bool:
        """Does this release resolve and check the radix strategy for the architecture (``_RADIX_CHECKED_FROM``)?
        Where it does not, ``auto`` stays unresolved and an explicit no_buffer goes unchecked: the tree keeps no
        extra buffer (3 slots a request, arg_groups/model_hook.py ``handle_mamba_radix_cache`` returns early)."""
        if spec.architecture not in _RADIX_CHECKED_FROM:
            return True
        first = _RADIX_CHECKED_FROM[spec.architecture]
        return first is not None and self.at_least(first)

    def strategy(self, spec: ModelSpec, chosen: str = "auto", *, overlap: bool = True, page_size: int = 1) -> str:
        """The strategy a start runs: ``auto`` is no_buffer until 0.5.13 and, from 0.5.14, extra_buffer where the
        architecture has it and the overlap scheduler is on or pages are longer than one token
        (arg_groups/overrides.py ``_mamba_radix_cache_resolution``). Refused as SGLang refuses it: a strategy the
        release lacks, extra_buffer on an architecture without it, lazy without the overlap scheduler, and from
        0.5.14 an explicit no_buffer with the overlap scheduler on or pages longer than one token, the last only
        for an architecture the release checks (``checks_radix``)."""
        if chosen not in STRATEGIES:
            raise PlanError(f"unknown radix strategy {chosen!r} (known: {', '.join(STRATEGIES)})")
        if chosen not in self.strategies:
            raise PlanError(
                f"SGLang {self.version} has no radix strategy {chosen!r} (it has: {', '.join(self.strategies)})"
            )
        if chosen == "off" or not self.radix_on(spec):
            return "off"
        unchecked = not self.checks_radix(spec)
        if chosen.startswith("extra_buffer") and unchecked and self.at_least("0.5.21"):
            raise PlanError(
                f"SGLang {self.version} refuses the {chosen} strategy for {spec.architecture} "
                f'("--mamba-radix-cache-strategy {chosen} needs mamba state", arg_groups/model_hook.py): '
                "use no_buffer"
            )
        if chosen.startswith("extra_buffer") and not self.extra_buffer(spec) and not unchecked:
            raise PlanError(
                f'SGLang {self.version} refuses the {chosen} strategy for {spec.architecture} ("mamba '
                'extra_buffer is not supported"): use no_buffer'
            )
        if chosen == "extra_buffer_lazy" and not overlap:
            raise PlanError(
                'SGLang refuses extra_buffer_lazy without the overlap scheduler ("Lazy extra buffer '
                'requires overlap schedule")'
            )
        if unchecked:  # auto unresolved and no_buffer unchecked (no extra buffer, overlap kept); before 0.5.21 an
            # explicit extra_buffer is not checked either and starts with the buffer (0.5.21's handler says such a
            # start fails at prefill)
            return chosen if chosen.startswith("extra_buffer") else "no_buffer"
        if chosen == "auto":
            if self.at_least("0.5.14") and self.extra_buffer(spec) and (overlap or page_size > 1):
                return "extra_buffer"
            return "no_buffer"
        if chosen == "no_buffer" and self.at_least("0.5.14") and overlap:
            raise PlanError(
                f"SGLang {self.version} refuses an explicit no_buffer strategy with the overlap scheduler "
                'on ("no_buffer do not support overlap schedule"): add --disable-overlap-schedule'
            )
        return chosen

    def slots_per_request(
        self, strategy: str, *, overlap: bool = True, spec_decoding: bool = False, skip_decode_lock: bool = False
    ) -> int:
        """State slots one running request holds (``mamba_ratio``): 1 without the radix cache (and before
        0.5.3.post2, whose cap is the pool itself); 3 with it until 0.5.6.post2; then by strategy — no_buffer 3
        (5 in 0.5.7), extra_buffer 3 + 2, or 3 + 1 with speculative decoding (0.5.8–0.5.9) or without the overlap
        scheduler (0.5.10rc0 on), extra_buffer_lazy 3 + 1. ``SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK`` (0.5.17 on)
        takes one off the base of 3 and gives it back to no_buffer."""
        if strategy == "off" or self.before("0.5.3.post2"):
            return 1
        if self.before("0.5.7"):
            return 3
        if self.before("0.5.8"):  # the strategies' extra slots were added to no_buffer too
            return 4 if strategy == "extra_buffer" and spec_decoding else 5
        base = 2 if skip_decode_lock and self.at_least("0.5.17") else 3
        if strategy == "no_buffer":
            return 3
        if strategy == "extra_buffer_lazy":
            return base + 1
        if self.before("0.5.10rc0"):
            return base + (1 if spec_decoding else 2)
        return base + (2 if overlap else 1)

    # --- which code sizes the pools ------------------------------------------------------------------

    @property
    def split(self) -> str:
        """The band of the pool split (see ``pool.split``): the function changed at these releases."""
        for first, name in (
            ("0.5.17", "padded"),
            ("0.5.13", "joint"),
            ("0.5.9", "ratio"),
            ("0.5.8", "spec-first"),
            ("0.5.7", "0.5.7"),
            ("0.5.3.post2", "radix"),
            ("0.5.2", "fixed"),
        ):
            if self.at_least(first):
                return name
        raise AssertionError(self.version)

    @property
    def requests(self) -> str:
        """The band of the max_running_requests rule (see ``pool.Admission``)."""
        for first, name in (
            ("0.5.17", "capped-log"),
            ("0.5.14", "kv-bounded"),
            ("0.5.10rc0", "estimate"),
            ("0.5.2", "two-stage"),
        ):
            if self.at_least(first):
                return name
        raise AssertionError(self.version)

    @property
    def default_pool_size(self) -> int | None:
        """The pool size taken without the radix cache and without --max-running-requests: 512 until
        0.5.8.post1; from 0.5.9 the ratio split runs instead."""
        return 512 if self.before("0.5.9") else None

    @property
    def logs_pool_size(self) -> bool:
        """The "Mamba Cache is allocated" line names max_mamba_cache_size from 0.5.3.post2."""
        return self.at_least("0.5.3.post2")

    @property
    def logs_cap(self) -> bool:
        """ "max_running_requests is capped to …" from 0.5.17; "… was reduced from the requested …" from 0.5.14."""
        return self.at_least("0.5.17")

    @property
    def spec_rows_follow_requests(self) -> bool:
        """The speculative buffers hold max_running_requests + 1 rows from 0.5.7 (the pool's K + 1 before)."""
        return self.at_least("0.5.7")

    @property
    def chunk_from_config(self) -> bool:
        """The checkpoint chunk is the config's mamba_chunk_size from 0.5.13 (64 before)."""
        return self.at_least("0.5.13")

    @property
    def page_rule(self) -> str:
        """no_buffer with pages longer than one token: not checked before 0.5.11, set to 1 silently 0.5.11–0.5.13,
        refused from 0.5.14."""
        if self.at_least("0.5.14"):
            return "refuse"
        return "reset" if self.at_least("0.5.11") else "none"

    @property
    def multimodal_reserve(self) -> int:
        """Bytes a multimodal model's split loses from 0.5.18 (``SGLANG_VLM_CACHE_SIZE_MB``, 100 MB)."""
        return 100 << 20 if self.at_least("0.5.18") else 0

    @property
    def conv_dtype_settable(self) -> bool:
        """``SGLANG_MAMBA_CONV_DTYPE`` from 0.5.9; bfloat16 always before."""
        return self.at_least("0.5.9")

    def ssm_from_config(self, spec: ModelSpec) -> bool:
        """Does the config's ``mamba_ssm_dtype`` set the SSM dtype? From 0.5.9, for the configs that pass
        themselves to ``mamba2_state_dtype``; never before."""
        return self.at_least("0.5.9") and spec.architecture in _SSM_FROM_CONFIG


DEFAULT = Release(DEFAULT_VERSION)


def known_versions() -> list[str]:
    return list(VERSIONS)


def release(version: str | None) -> Release:
    """The rules of ``--sglang-version``: a release (``0.5.17``, ``0.5.10rc0``, ``0.5.6.post1``), or a build as
    it names itself (``0.5.17.dev20260819+g574274660f``), which takes the rules of the release it belongs to;
    ``0.5`` means the newest."""
    if version is None or version.strip() in ("0.5", "v0.5"):
        return DEFAULT
    v = version.strip()
    m = re.fullmatch(_VERSION, v)
    if not m:
        raise PlanError(f"unknown SGLang version {version!r} (known: {VERSIONS[0]} to {VERSIONS[-1]})")
    name = f"0.5.{m.group(1)}{m.group(2) or ''}"
    if name in EARLY:
        raise PlanError(f"SGLang {name} has no Mamba state pool (it came in {VERSIONS[0]})")
    if name in VERSIONS:
        return Release(name)
    if _key(name) > _key(VERSIONS[-1]):
        raise PlanError(f"SGLang {version} is newer than the newest modelled release ({VERSIONS[-1]})")
    raise PlanError(f"unknown SGLang version {version!r} (known: {VERSIONS[0]} to {VERSIONS[-1]})")


def neighbours(version: str | None) -> tuple[Release, ...]:
    """The releases a build may follow: a dev build (``0.5.17.dev20260819+g574274660f``) or a pre-release not on
    PyPI lies between the newest release before its number and the first at or after it, and may hold either's
    rules: both, the one ``release`` picks first. A release gives one."""
    if version is None:
        return (DEFAULT,)
    m = re.fullmatch(_VERSION, version.strip())
    if m is None:
        return (release(version),)
    name = f"0.5.{m.group(1)}{m.group(2) or ''}"
    dev = re.search(r"\.?dev", version.strip()) is not None
    if name in VERSIONS and not dev:
        return (Release(name),)
    key = _key(name)
    below = [v for v in VERSIONS if _key(v) < key]
    above = [v for v in VERSIONS if _key(v) >= key]
    if not below and not above:
        return (release(version),)
    out = [Release(v) for v in (above[:1] + below[-1:])]
    return tuple(out)
