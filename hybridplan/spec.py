"""The normalised model: a tuple of mixers (one per token-mixing block) and what each keeps per sequence.

Every mixer is a small frozen record (a msgspec Struct). Recurrent mixers know the shapes of their
per-sequence state on one tensor-parallel rank (``state_shapes``); attention mixers know their KV elements per
token (``kv_elements_per_token``). Both refuse a TP degree the serving engine would refuse. Shapes follow vLLM's
``MambaStateShapeCalculator`` (vllm/model_executor/layers/mamba/mamba_utils.py); conv shapes are written
``(channels, window)`` — vLLM stores some transposed, which changes no byte.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Union

import msgspec
from msgspec import Struct

from hybridplan.errors import PlanError

if TYPE_CHECKING:
    from typing_extensions import TypeIs

    from hybridplan.weights.checkpoint import Checkpoint
    from hybridplan.weights.quant import Quantization

RECURRENT_KINDS = ("mamba1", "mamba2", "gdn", "kda", "short_conv", "linear_attention")
ATTENTION_KINDS = ("attention", "sliding_attention", "mla")
FFN_KINDS = ("mlp", "moe")
LAYER_KINDS = RECURRENT_KINDS + ATTENTION_KINDS + FFN_KINDS


def divide(numerator: int, tp: int, what: str) -> int:
    """Exact division by the TP degree, as the engines' ``divide()`` asserts (vLLM and SGLang
    distributed/utils.py); anything else is an invalid TP."""
    if numerator % tp:
        raise PlanError(f"--tp {tp} does not divide {what} ({numerator}); both engines refuse this TP")
    return numerator // tp


Shape = tuple[int, ...]


class StateShapes(Struct, frozen=True):
    """Per-sequence state of one recurrent layer on one rank. ``conv``/``ssm`` are None where absent."""

    conv: Shape | None
    ssm: Shape | None


# --------------------------------------------------------------------------------------------------
# Recurrent mixers
# --------------------------------------------------------------------------------------------------


class Mamba2(Struct, frozen=True):
    """Mamba-2 (SSD) mixer. ``intermediate`` is the inner width I as vLLM reads it for the family."""

    num_heads: int
    head_dim: int
    state_size: int
    n_groups: int
    conv_kernel: int
    intermediate: int
    kind: ClassVar[str] = "mamba2"

    def padded_groups(self, tp: int) -> int:
        # vLLM extra_groups_for_head_shards: groups that TP cannot split are replicated up to tp.
        return self.n_groups if self.n_groups % tp == 0 else tp

    def conv_channels(self, tp: int) -> int:
        return divide(
            self.intermediate + 2 * self.padded_groups(tp) * self.state_size,
            tp,
            "the Mamba-2 conv dimension (I + 2·groups·state)",
        )

    def state_shapes(self, tp: int, spec_tokens: int = 0) -> StateShapes:
        if self.n_groups % tp and self.n_groups != 1:
            raise PlanError(
                f"--tp {tp} does not divide the Mamba-2 groups ({self.n_groups}), which are not 1; "
                "both engines refuse this TP"
            )
        divide(self.intermediate, tp, "the Mamba-2 inner width")
        heads = divide(self.num_heads, tp, "the Mamba heads")
        return StateShapes(
            conv=(self.conv_channels(tp), self.conv_kernel - 1 + spec_tokens),
            ssm=(heads, self.head_dim, self.state_size),
        )


class Mamba1(Struct, frozen=True):
    """Mamba-1 mixer: ``intermediate`` channels, each with a conv window and an SSM state of ``state_size``."""

    intermediate: int
    state_size: int
    conv_kernel: int
    kind: ClassVar[str] = "mamba1"

    def state_shapes(self, tp: int, spec_tokens: int = 0) -> StateShapes:
        # vLLM's Mamba-1 state has no speculative columns.
        inner = divide(self.intermediate, tp, "the Mamba inner width")
        return StateShapes(conv=(inner, self.conv_kernel - 1), ssm=(inner, self.state_size))


class GatedDeltaNet(Struct, frozen=True):
    """Gated DeltaNet (Qwen3-Next's linear attention): a short conv over q, k and v, and a (v × k) state per value
    head."""

    num_k_heads: int
    num_v_heads: int
    head_k_dim: int
    head_v_dim: int
    conv_kernel: int
    kind: ClassVar[str] = "gdn"

    def state_shapes(self, tp: int, spec_tokens: int = 0) -> StateShapes:
        divide(self.num_k_heads, tp, "the linear-attention key heads")
        v_heads = divide(self.num_v_heads, tp, "the linear-attention value heads")
        conv = 2 * self.num_k_heads * self.head_k_dim + self.num_v_heads * self.head_v_dim
        return StateShapes(
            conv=(divide(conv, tp, "the GDN conv dimension"), self.conv_kernel - 1 + spec_tokens),
            ssm=(v_heads, self.head_v_dim, self.head_k_dim),
        )


class KimiDeltaAttention(Struct, frozen=True):
    """Kimi Delta Attention (Kimi-Linear): a short conv over q, k and v, and a (d × d) state per head."""

    num_heads: int
    head_dim: int
    conv_kernel: int
    kind: ClassVar[str] = "kda"

    def state_shapes(self, tp: int, spec_tokens: int = 0) -> StateShapes:
        heads = divide(self.num_heads, tp, "the KDA heads")
        # q, k and v each keep a short-conv window (Kimi-Linear: key heads = heads, key dim = head dim).
        conv = 3 * self.num_heads * self.head_dim
        return StateShapes(
            conv=(divide(conv, tp, "the KDA conv dimension"), self.conv_kernel - 1 + spec_tokens),
            ssm=(heads, self.head_dim, self.head_dim),
        )


class ShortConv(Struct, frozen=True):
    """LFM2's short convolution over ``dim`` channels (kernel ``l_cache``): a conv state, no SSM state."""

    dim: int
    l_cache: int
    kind: ClassVar[str] = "short_conv"

    def state_shapes(self, tp: int, spec_tokens: int = 0) -> StateShapes:
        return StateShapes(
            conv=(divide(self.dim, tp, "the short-conv dimension"), self.l_cache - 1 + spec_tokens), ssm=None
        )


class LinearAttention(Struct, frozen=True):
    """Lightning (linear) attention: a (d × d) state per head, no conv."""

    num_heads: int
    head_dim: int
    kind: ClassVar[str] = "linear_attention"

    def state_shapes(self, tp: int, spec_tokens: int = 0) -> StateShapes:
        heads = divide(self.num_heads, tp, "the linear-attention heads")
        return StateShapes(conv=None, ssm=(heads, self.head_dim, self.head_dim))


# --------------------------------------------------------------------------------------------------
# Attention mixers
# --------------------------------------------------------------------------------------------------


def kv_heads_per_rank(num_heads: int, num_kv_heads: int, tp: int) -> int:
    """vLLM QKVParallelLinear: query heads split exactly; KV heads split, or replicated when fewer than tp."""
    divide(num_heads, tp, "the attention heads")
    if num_kv_heads >= tp:
        return divide(num_kv_heads, tp, "the KV heads")
    if tp % num_kv_heads:
        raise PlanError(
            f"--tp {tp} is not a multiple of the KV heads ({num_kv_heads}), so they cannot be "
            "replicated evenly; both engines refuse this TP"
        )
    return 1


class Attention(Struct, frozen=True):
    """Softmax attention with a per-token K and V. ``window`` set means a sliding-window layer."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    window: int | None = None

    @property
    def kind(self) -> str:
        return "attention" if self.window is None else "sliding_attention"

    def kv_elements_per_token(self, tp: int) -> int:
        return 2 * kv_heads_per_rank(self.num_heads, self.num_kv_heads, tp) * self.head_dim


class MLA(Struct, frozen=True):
    """Multi-head latent attention: one compressed latent + rope key per token, replicated on every rank."""

    num_heads: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    window: ClassVar[None] = None
    kind: ClassVar[str] = "mla"

    def kv_elements_per_token(self, tp: int) -> int:
        divide(self.num_heads, tp, "the attention heads")
        return self.kv_lora_rank + self.qk_rope_head_dim


RecurrentMixer = Union[Mamba2, Mamba1, GatedDeltaNet, KimiDeltaAttention, ShortConv, LinearAttention]
AttentionMixer = Union[Attention, MLA]
Mixer = Union[RecurrentMixer, AttentionMixer]


def is_recurrent(m: Mixer) -> TypeIs[RecurrentMixer]:
    """Whether the mixer keeps a state per sequence (and a type checker knows which kinds those are)."""
    return m.kind in RECURRENT_KINDS


def is_attention(m: Mixer) -> TypeIs[AttentionMixer]:
    """Whether the mixer keeps KV per token."""
    return m.kind in ATTENTION_KINDS


class RopeScaling(Struct, frozen=True):
    """One RoPE scaling entry of a config (``rope_scaling``, or ``rope_parameters`` per layer type)."""

    rope_type: str
    factor: float | None = None
    #: the entry names the context the model was trained at before scaling (``original_max_position_embeddings``)
    names_original: bool = False
    original: int | None = None


class ContextFields(Struct, frozen=True):
    """What a config says about the longest context: every length field it sets, in the order it sets them,
    and its RoPE scaling. How an engine derives its maximum from them is an engine rule."""

    lengths: tuple[tuple[str, int], ...] = ()
    rope: tuple[RopeScaling, ...] = ()

    def length(self, key: str) -> int | None:
        return dict(self.lengths).get(key)


class DraftFields(Struct, frozen=True):
    """What a speculative draft's own config says of the tensors its draft class adds (hybridplan/weights
    ``draft_extra_parts``): its width, decoder layers and attention heads, the target layers it takes hidden
    states from, its vocabulary, and the target width it was trained on. Zero where the config does not say."""

    hidden_size: int = 0
    num_hidden_layers: int = 0
    heads: int = 0
    kv_heads: int = 0
    head_dim: int = 0
    #: ``eagle_config.eagle_aux_hidden_state_layer_ids`` or ``dflash_config.target_layer_ids`` (their count), else
    #: ``num_aux_hidden_states``
    aux_layers: int = 0
    #: ``draft_vocab_size``, else ``vocab_size``
    vocab_size: int = 0
    target_hidden_size: int = 0


class ConfigFacts(Struct, frozen=True):
    """What the engines, the weights and the reports read of a config beyond its mixers, read once where the spec
    is built (hybridplan/adapters.py ``config_facts``), so that no rule parses the config again."""

    #: the config's top-level field names (sorted)
    fields: tuple[str, ...] = ()
    #: the text config's vocabulary (``text_config.vocab_size``, else the config's)
    vocab_size: int = 0
    #: the vision tower's depth and width (``vision_config``: ``num_hidden_layers`` or ``depth``, 24 where
    #: unset; ``hidden_size``, 1024 where unset); None without one
    vision: tuple[int, int] | None = None
    #: ``quantization_config.quant_method`` as written
    quant_method: str | None = None
    #: Nemotron-H's ``mamba_expand`` (2 where unset: NemotronHConfig's default)
    mamba_expand: int = 2
    #: Nemotron-H's layers, one character each (M mamba, * attention, - MLP, E MoE), from
    #: ``hybrid_override_pattern``, else ``layers_block_type`` or ``layer_types``; "" for other families
    layer_pattern: str = ""
    #: the text config's layer counts as written (only those it sets): ``num_hidden_layers``, ``n_layer``,
    #: ``num_nextn_predict_layers``, ``mtp_num_hidden_layers``, ``mtp_hybrid_override_pattern``
    counts: tuple[tuple[str, object], ...] = ()
    #: routed experts per MoE layer and experts a token is routed to (0 without experts)
    experts: int = 0
    experts_per_token: int = 0
    draft: DraftFields = msgspec.field(default_factory=DraftFields)
    #: the tensors hybridplan/weights/families.py counts from the config, or why it cannot count them
    parts: tuple = ()
    parts_error: str | None = None

    def count(self, key: str, default: Any = None) -> Any:  # a config's number, as the config holds it
        return dict(self.counts).get(key, default)

    @property
    def multimodal(self) -> bool:
        return "vision_config" in self.fields


class ModelSpec(Struct, frozen=True):
    """A model as the planner sees it: identity, dtypes from its config, and its mixers in layer order.

    ``mixers`` counts token mixers: a Falcon-H1 layer contributes one Mamba-2 and one attention mixer, a
    Zamba2 hybrid layer its Mamba-2 and the shared block's attention. ``ffn`` lists the MLP / MoE blocks.
    """

    name: str
    architecture: str
    family: str
    model_dtype: str
    mixers: tuple[Mixer, ...]
    ffn: tuple[str, ...] = ()
    hidden_size: int = 0
    max_position_embeddings: int | None = None
    context: ContextFields = ContextFields()
    chunk_size: int | None = None
    #: recurrent-state dtypes the config itself names: ``mamba_ssm_cache_dtype`` (Nemotron) and
    #: ``mamba_ssm_dtype`` (Qwen3.5); which engine reads which is an engine rule
    config_dtypes: tuple[tuple[str, str], ...] = ()
    source: str | None = None
    aliases: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    #: the config as read, JSON (not part of the spec's identity): kept for the scripts and tests that derive
    #: figures from it; hybridplan's rules read ``facts``
    config_json: str = ""
    #: what the rules read of the config beyond the mixers, read once with them (``ConfigFacts``); not part of
    #: the spec's identity either
    facts: ConfigFacts = msgspec.field(default_factory=ConfigFacts)
    #: the checkpoint's own figures where they were read (hybridplan/weights/checkpoint.py); not part of the
    #: spec's identity either
    checkpoint: Checkpoint | None = None
    #: the checkpoint's quantization (hybridplan/weights/quant.py), read once: the weights and the engines'
    #: KV-dtype rules read this value
    quantization: Quantization | None = None

    #: the fields the spec's identity leaves out: equality, hash and repr skip them
    _UNCOMPARED: ClassVar[frozenset[str]] = frozenset({"config_json", "facts", "checkpoint"})

    def _identity(self) -> tuple:
        return tuple([getattr(self, n) for n in self.__struct_fields__ if n not in self._UNCOMPARED])

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    def __repr__(self) -> str:
        shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__struct_fields__ if n not in self._UNCOMPARED)
        return f"{type(self).__name__}({shown})"

    def config_dtype(self, field: str) -> str | None:
        return dict(self.config_dtypes).get(field)

    @property
    def recurrent(self) -> tuple[RecurrentMixer, ...]:
        return tuple(m for m in self.mixers if is_recurrent(m))

    @property
    def attention(self) -> tuple[AttentionMixer, ...]:
        return tuple(m for m in self.mixers if is_attention(m))

    @property
    def is_hybrid(self) -> bool:
        return bool(self.recurrent) and bool(self.attention)

    @property
    def layer_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for kind in [m.kind for m in self.mixers] + list(self.ffn):
            counts[kind] = counts.get(kind, 0) + 1
        return {k: counts[k] for k in LAYER_KINDS if k in counts}

    def check_tp(self, tp: int) -> None:
        """Raise PlanError when vLLM would refuse this TP for any layer of the model."""
        if tp < 1:
            raise PlanError(f"--tp must be a positive integer, got {tp}")
        for m in dict.fromkeys(self.mixers):  # layer order: the same message every run
            if is_recurrent(m):
                m.state_shapes(tp)
            else:
                m.kv_elements_per_token(tp)
