"""A checkpoint's quantization, read once (``read``) into one frozen value, ``Quantization``, that the weights
and both engines' KV-dtype rules read: the method and algorithm it names, the KV-cache scheme it declares, and
what its weights cost (``Scheme``: bytes per parameter, scales included, and what it leaves unquantized).

Where it is read: ``quantization_config`` in config.json (or its ``text_config``); a folder's or Hub
repository's ``hf_quant_config.json`` (ModelOpt 0.29 and older write it beside config.json) is merged in by
hybridplan/loader.py as the engines do (vLLM vllm/transformers_utils/config.py ``get_config``: taken when
config.json has no ``quantization_config``). A scheme hybridplan cannot size is kept (its KV scheme still
counts) and refused only where its weights are asked for: pass --weights.

Bytes per parameter, as the engines' loaders hold them after loading (vLLM vllm/model_executor/layers/
quantization/*.py, 0.10–0.33):

- fp8: one byte a weight; per-tensor scales, or with ``weight_block_size`` a float32 ``weight_scale_inv`` per
  block (fp8.py ``Fp8LinearMethod.create_weights``).
- modelopt FP8: one byte, per-tensor scales (modelopt.py ``ModelOptFp8LinearMethod``); NVFP4: two weights a
  byte and an fp8 ``weight_scale`` per 16 (``ModelOptNvFp4LinearMethod``), global scales per tensor.
- awq / gptq / auto-round (int``bits``): ``qweight`` packs 32/bits codes an int32, a 16-bit scale and a packed
  zero point per ``group_size`` (awq.py, gptq.py ``qzeros``; the Marlin kernels drop the zeros of symmetric
  GPTQ after loading, gptq_marlin.py), so zeros are counted for AWQ and asymmetric GPTQ.
- compressed-tensors: ``weight_packed`` int4 with 16-bit scales per group (and zero points when asymmetric),
  fp8 one byte, fp4 (NVFP4) half a byte and an fp8 scale per 16 (compressed_tensors/schemes/*.py).
- mxfp4: half a byte and an e8m0 scale per 32 (mxfp4.py).
- bitsandbytes 4-bit: half a byte and a float32 absmax per 64 weights, or with double quantization an 8-bit
  absmax per 64 and a float32 per 256 of those (bitsandbytes.py); 8-bit: one byte, a scale per row.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from fnmatch import fnmatchcase, translate
from functools import cache, lru_cache
from typing import Any, ClassVar

from msgspec import Struct
from msgspec.structs import replace

from hybridplan.errors import PlanError
from hybridplan.quant_config import stated_quantization

#: the checkpoint's module names (after ``…layers.N.``) that each counted part (hybridplan/weights/families.py,
#: group → name) is made of, across the families' checkpoints
_MODULES: dict[str, dict[str, tuple[str, ...]]] = {
    "gdn": {
        "in_proj_qkvz": ("linear_attn.in_proj_qkvz", "linear_attn.in_proj_qkv", "linear_attn.in_proj_z"),
        "in_proj_ba": ("linear_attn.in_proj_ba", "linear_attn.in_proj_b", "linear_attn.in_proj_a"),
        "out_proj": ("linear_attn.out_proj",),
    },
    "attention": {
        n: (f"self_attn.{n}", f"mixer.{n}", f"attention.{n}") for n in ("q_proj", "k_proj", "v_proj", "o_proj")
    },
    "mamba": {
        "in_proj.zx": ("mixer.in_proj", "mamba.in_proj"),
        "in_proj.bc": ("mixer.in_proj", "mamba.in_proj"),
        "in_proj.dt": ("mixer.in_proj", "mamba.in_proj"),
        "out_proj": ("mixer.out_proj", "mamba.out_proj"),
    },
    "mlp": {"gate_up_proj": ("mlp.gate_proj", "mlp.up_proj", "mlp.gate_up_proj"), "down_proj": ("mlp.down_proj",)},
    "moe": {
        "experts.up": ("mlp.experts.0.gate_proj", "mlp.experts.0.up_proj", "mixer.experts.0.up_proj"),
        "experts.down": ("mlp.experts.0.down_proj", "mixer.experts.0.down_proj"),
        "shared_expert.up": (
            "mlp.shared_expert.gate_proj",
            "mlp.shared_expert.up_proj",
            "mixer.shared_experts.up_proj",
        ),
        "shared_expert.down": ("mlp.shared_expert.down_proj", "mixer.shared_experts.down_proj"),
        "fc1_latent_proj": ("mixer.fc1_latent_proj",),
        "fc2_latent_proj": ("mixer.fc2_latent_proj",),
    },
}
_LAYER_PREFIXES = (
    "model.language_model.layers.{i}.",
    "model.layers.{i}.",
    "backbone.layers.{i}.",
    "language_model.model.layers.{i}.",
)
_VISION_PREFIXES = ("model.visual.", "visual.", "model.vision_tower.", "vision_tower.")


def _matches(name: str, pattern: str) -> bool:
    """vLLM's and ModelOpt's ways of naming a module to skip: ``re:`` a regular expression, a glob, or the module
    itself and what is under it."""
    if pattern.startswith("re:"):
        return re.match(pattern[3:], name) is not None  # a whole match is a match at the start too
    return fnmatchcase(name, pattern) or name == pattern or name.startswith(pattern + ".")


@cache
def _skipper(patterns: tuple[str, ...]) -> Callable[[str], bool]:
    """``_matches`` against every pattern of a list at once. A ModelOpt ignore list can name each layer's modules
    (hundreds to thousands of entries), each tried against every module name of every layer: one compiled
    expression for the regular expressions (matched at the start, as ``re.match``), one for the globs and module
    names (matched whole) takes that from seconds a spec to milliseconds. A list whose expressions cannot be
    joined (inline flags, numbered back-references, repeated group names) is tried one pattern at a time."""
    exprs = [p[3:] for p in patterns if p.startswith("re:")]
    names = [p for p in patterns if not p.startswith("re:")]
    whole = "|".join(f"(?:{translate(p)})|(?:{re.escape(p)}(?:\\..*)?)" for p in names)
    try:
        if any(re.search(r"\\\d|\(\?[aiLmsux]+\)|\(\?P<", e) for e in exprs):
            raise re.error("not joinable")
        start = re.compile("|".join(f"(?:{e})" for e in exprs)) if exprs else None
    except re.error:
        return lambda name: any(_matches(name, p) for p in patterns)
    full = re.compile(whole, re.DOTALL) if names else None
    return lambda name: bool((start and start.match(name)) or (full and full.fullmatch(name)))


class Scheme(Struct, frozen=True):
    """``bytes_per_param``: a quantized weight with its share of the scales and zero points."""

    name: str
    bytes_per_param: float
    #: module-name fragments the checkpoint leaves unquantized
    ignore: tuple[str, ...] = ()
    #: the ignore list as written (globs, ``re:`` expressions, module names)
    patterns: tuple[str, ...] = ()
    #: ModelOpt MIXED_PRECISION: module → bytes a weight of the algorithm it names
    per_module: tuple[tuple[str, float], ...] = ()

    def skips(self, where: str) -> bool:
        return any(frag and frag in where for frag in self.ignore)

    def price(self, section: str, group: str, name: str, layers: int, kind_layers: int, model_bytes: int) -> float:
        """Bytes a parameter of the part, the layers that hold it (``kind_layers`` of the ``layers``) weighed by
        what the checkpoint does to each: skipped (the model dtype), its module's algorithm, or the scheme's."""
        names = self._names(section, group, name, layers)
        if names is None:  # a part not mapped to module names: the fragments rule
            where = f"{section}.{group}.{name}"
            skipped = self.skips(where) or (section == "vision" and self.skips("vision"))
            return model_bytes if skipped or self.per_module else self.bytes_per_param
        held = 1 if len(names) == 1 else max(kind_layers, 1)
        modules = dict(self.per_module)
        skip = _skipper(self.patterns)
        n_skipped = priced = 0
        cost = 0.0
        for per_layer in names:
            if any(map(skip, per_layer)):
                n_skipped += 1
            elif self.per_module:
                algo = next((modules[k] for n in per_layer for k in modules if n == k or n.startswith(k + ".")), None)
                if algo is not None:
                    priced, cost = priced + 1, cost + algo
        if self.per_module:  # the modules it lists take their algorithm, the rest stay whole
            if not priced:
                return float(model_bytes)
            share = min(priced, held)
            return (cost / priced * share + model_bytes * (held - share)) / held
        share = min(n_skipped, held)
        return (model_bytes * share + self.bytes_per_param * (held - share)) / held

    @staticmethod
    def _names(section: str, group: str, name: str, layers: int) -> list[tuple[str, ...]] | None:
        """The module names of the part, one tuple a layer index (one for a part outside the layers)."""
        if group == "lm_head":
            return [("lm_head",)]
        if section == "vision":
            return [tuple(p + name for p in _VISION_PREFIXES)]
        frags = _MODULES.get(group, {}).get(name)
        if frags is None:
            return None
        if section == "mtp":
            return [tuple(f"mtp.layers.0.{f}" for f in frags) + tuple(f"mtp.{f}" for f in frags)]
        return [tuple(p.format(i=i) + f for p in _LAYER_PREFIXES for f in frags) for i in range(max(layers, 1))]


class KVScheme(Struct, frozen=True):
    """A ``kv_cache_scheme`` object (compressed-tensors' and ModelOpt's newer config.json layout)."""

    num_bits: int | None
    type: str | None
    dynamic: bool | None

    @property
    def label(self) -> str:
        kind = {"float": "fp", "int": "int"}.get(self.type or "", self.type or "?")
        return f"{kind}{self.num_bits}" if self.num_bits else kind


class Quantization(Struct, frozen=True):
    """The checkpoint's quantization as its files state it; which engine release honours what is an engine rule
    (hybridplan/engines/vllm/dtypes.py, hybridplan/engines/sglang/dtypes.py)."""

    #: ``quant_method`` in lower case; a ModelOpt ``hf_quant_config.json`` (producer modelopt) reads as "modelopt"
    method: str
    #: ModelOpt's ``quant_algo`` (FP8, NVFP4, MIXED_PRECISION, …), upper case
    algo: str | None
    #: ``kv_cache_quant_algo`` as written (ModelOpt), inside ``quantization`` or at the top
    kv_algo: str | None
    #: ``kv_cache_scheme`` (compressed-tensors; ModelOpt's config.json layout)
    kv_scheme: KVScheme | None
    #: the fields sit under ``quantization`` (the hf_quant_config.json layout) rather than at the top
    nested: bool
    #: where it was read: "config.json", "config.json text_config" or "hf_quant_config.json"
    where: str
    scheme: Scheme | None
    #: why ``scheme`` is None: hybridplan does not size these weights
    unsized: str | None = None

    #: what is read from the config is the quantization's identity; ``scheme`` and ``unsized`` are derived from
    #: it, so equality and hash skip them
    _UNCOMPARED: ClassVar[frozenset[str]] = frozenset({"scheme", "unsized"})

    def _identity(self) -> tuple:
        return tuple([getattr(self, n) for n in self.__struct_fields__ if n not in self._UNCOMPARED])

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    @property
    def name(self) -> str:
        return self.scheme.name if self.scheme else (self.method or "unnamed")

    @property
    def kv_declared(self) -> str | None:
        """The KV cache the checkpoint declares, in its own words (``fp8``, ``nvfp4``, ``fp8`` from a scheme)."""
        if self.kv_scheme is not None:
            return self.kv_scheme.label
        return self.kv_algo.lower() if isinstance(self.kv_algo, str) and self.kv_algo else None

    def weights_scheme(self) -> Scheme:
        if self.scheme is None:
            raise PlanError(
                self.unsized or f"hybridplan does not size the quantization {self.method!r}: give --weights"
            )
        return self.scheme

    def describe(self) -> str:
        """One line a person reads: the scheme, and the KV cache it declares."""
        kv = self.kv_declared
        return self.name + (f", KV cache {kv} declared ({self.where})" if kv else "")


def _kv_scheme(value: Any) -> KVScheme | None:
    if not isinstance(value, Mapping):
        return None
    bits = value.get("num_bits")
    dyn = value.get("dynamic")
    return KVScheme(
        bits if isinstance(bits, int) else None,
        str(value["type"]) if value.get("type") else None,
        dyn if isinstance(dyn, bool) else None,
    )


def read(config: Mapping[str, Any], where: str | None = None) -> Quantization | None:
    """The quantization a config states (``quantization_config``, else its text config's:
    hybridplan/quant_config.py ``stated_quantization``); None when none."""
    q, place = stated_quantization(config)
    if q is None:
        return None
    return _read_cached(json.dumps(q, sort_keys=True, default=str), where or place)


@lru_cache(maxsize=256)
def _read_cached(text: str, where: str) -> Quantization:
    q = json.loads(text)
    if not isinstance(q, Mapping):
        return Quantization("", None, None, None, False, where, None, "quantization_config must be an object")
    inner = q.get("quantization") if isinstance(q.get("quantization"), Mapping) else None
    method = str(q.get("quant_method") or "").lower()
    producer = q.get("producer")
    if not isinstance(producer, Mapping):
        producer = {}
    if not method and str(producer.get("name", "")).lower() == "modelopt":
        method = "modelopt"
    section = inner if inner is not None else q
    algo = section.get("quant_algo") or q.get("quant_algo")
    kv_algo = section.get("kv_cache_quant_algo") or q.get("kv_cache_quant_algo")
    kv_scheme = _kv_scheme(section.get("kv_cache_scheme")) or _kv_scheme(q.get("kv_cache_scheme"))
    try:
        sch, unsized = _scheme(q, method, section), None
        sch = replace(sch, patterns=_patterns(q) + (_patterns(section) if section is not q else ()))
    except PlanError as exc:
        sch, unsized = None, str(exc)
    return Quantization(
        method,
        str(algo).upper() if algo else None,
        str(kv_algo) if kv_algo else None,
        kv_scheme,
        inner is not None,
        where,
        sch,
        unsized,
    )


def scheme(config: Mapping[str, Any]) -> Scheme | None:
    """The checkpoint's weight scheme; None when unquantized; PlanError when hybridplan cannot size it."""
    quant = read(config)
    return None if quant is None else quant.weights_scheme()


def _ignore(cfg: Mapping[str, Any]) -> tuple[str, ...]:
    out: list[str] = []
    for key in ("modules_to_not_convert", "ignored_layers", "ignore", "exclude_modules", "llm_int8_skip_modules"):
        value = cfg.get(key)
        if isinstance(value, list):
            out += [str(v).strip("*").removeprefix("re:").strip(".*") for v in value if isinstance(v, str)]
    return tuple(out)


def _patterns(cfg: Mapping[str, Any]) -> tuple[str, ...]:
    out: list[str] = []
    for key in ("modules_to_not_convert", "ignored_layers", "ignore", "exclude_modules", "llm_int8_skip_modules"):
        value = cfg.get(key)
        if isinstance(value, list):
            out += [str(v) for v in value if isinstance(v, str) and v]
    return tuple(out)


#: bytes a weight of each algorithm a ModelOpt MIXED_PRECISION checkpoint names per module
_MODELOPT_ALGO = {"FP8": 1.0, "FP8_PER_CHANNEL_PER_TOKEN": 1.0}


def _mixed(q: Mapping[str, Any], section: Mapping[str, Any], ignore: tuple[str, ...]) -> Scheme:
    """ModelOpt MIXED_PRECISION: ``quantized_layers`` names each quantized module's algorithm (FP8 one byte;
    NVFP4 and W4A16_NVFP4 half a byte and an fp8 scale per ``group_size``); a module it does not list stays at
    the model dtype (vLLM modelopt.py ``ModelOptMixedPrecisionConfig``)."""
    layers = section.get("quantized_layers") or q.get("quantized_layers")
    if not isinstance(layers, Mapping) or not layers:
        raise PlanError(
            "hybridplan does not size the modelopt scheme MIXED_PRECISION without quantized_layers: give --weights"
        )
    per: list[tuple[str, float]] = []
    for module, how in layers.items():
        algo = str((how or {}).get("quant_algo", "")).upper() if isinstance(how, Mapping) else ""
        if algo in _MODELOPT_ALGO:
            per.append((str(module), _MODELOPT_ALGO[algo]))
        elif algo in ("NVFP4", "W4A16_NVFP4"):
            per.append((str(module), 0.5 + 1 / int(how.get("group_size") or 16)))
        else:
            raise PlanError(
                f"hybridplan does not size the modelopt algorithm {algo or '?'} of {module}: give --weights"
            )
    algos = sorted({a for _, a in per})
    return Scheme(
        "modelopt mixed (" + ", ".join({1.0: "fp8"}.get(a, "nvfp4") for a in algos) + ")",
        max(algos),
        ignore,
        per_module=tuple(per),
    )


def _int_scheme(bits: int, group: int | None, zero: bool) -> float:
    """An integer code of ``bits`` with a 16-bit scale (and a ``bits``-bit zero point) per ``group`` weights."""
    if group is None or group <= 0:  # per output channel: the scales are a rounding error
        return bits / 8
    return bits / 8 + 2 / group + (bits / 8 / group if zero else 0.0)


def _scheme(q: Mapping[str, Any], method: str, section: Mapping[str, Any]) -> Scheme:
    ignore = _ignore(q) + (_ignore(section) if section is not q else ())
    if method == "fp8":
        block = q.get("weight_block_size")
        if isinstance(block, list) and len(block) == 2:
            return Scheme(f"fp8 (blocks {block[0]}×{block[1]})", 1 + 4 / (block[0] * block[1]), ignore)
        return Scheme("fp8", 1.0, ignore)
    if method in ("modelopt", "modelopt_fp4"):
        algo = str(section.get("quant_algo") or q.get("quant_algo") or "").upper()
        if algo in ("FP8", "FP8_PER_CHANNEL_PER_TOKEN"):
            return Scheme("modelopt fp8", 1.0, ignore)
        if algo == "NVFP4":
            group = int(section.get("group_size") or q.get("group_size") or 16)
            return Scheme(f"modelopt nvfp4 (group {group})", 0.5 + 1 / group, ignore)
        if algo == "MIXED_PRECISION":
            return _mixed(q, section, ignore)
        raise PlanError(f"hybridplan does not size the modelopt scheme {algo or '?'}: give --weights")
    if method in ("awq", "gptq", "auto-round", "auto_round"):
        bits = int(q.get("bits") or q.get("w_bit") or 4)
        group = q.get("group_size", q.get("q_group_size", 128))
        zero = bool(q.get("zero_point", method != "gptq" or not q.get("sym", True)))
        return Scheme(f"{method} int{bits} (group {group})", _int_scheme(bits, int(group), zero), ignore)
    if method == "mxfp4":
        return Scheme("mxfp4", 0.5 + 1 / 32, ignore)
    if method == "bitsandbytes":
        if q.get("load_in_4bit"):
            double = bool(q.get("bnb_4bit_use_double_quant"))
            return Scheme(
                "bitsandbytes 4-bit" + (" (double quant)" if double else ""),
                0.5 + (1 / 64 + 4 / (64 * 256) if double else 4 / 64),
                ignore,
            )
        if q.get("load_in_8bit"):
            return Scheme("bitsandbytes 8-bit", 1.0, ignore)
    if method == "compressed-tensors":
        return _compressed(q, ignore)
    raise PlanError(f"hybridplan does not size the quantization {method or 'unnamed'!r}: give --weights")


def _compressed(q: Mapping[str, Any], ignore: tuple[str, ...]) -> Scheme:
    """compressed-tensors: the weights of the first config group (the one that covers the linear layers)."""
    groups = q.get("config_groups") or {}
    for group in groups.values() if isinstance(groups, Mapping) else ():
        w = group.get("weights") if isinstance(group, Mapping) else None
        if not isinstance(w, Mapping):
            continue
        bits, kind = int(w.get("num_bits") or 8), str(w.get("type") or "int")
        size = w.get("group_size")
        if kind == "float" and bits == 4:
            return Scheme(f"compressed-tensors fp4 (group {size or 16})", 0.5 + 1 / int(size or 16), ignore)
        if kind == "float":
            return Scheme("compressed-tensors fp8", bits / 8, ignore)
        zero = not bool(w.get("symmetric", True))
        name = f"compressed-tensors int{bits}" + (f" (group {size})" if size else "")
        return Scheme(name, _int_scheme(bits, int(size) if size else None, zero), ignore)
    raise PlanError("compressed-tensors config without weight settings: give --weights")
