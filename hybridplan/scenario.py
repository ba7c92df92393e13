"""The one value a command builds from its flags and passes down: which model, how it is served, and what
memory there is. Engines derive everything else from it (dtypes, footprints, pages, pools), so two figures
of one run can never be computed from two different settings.

Like vLLM's config object: frozen, built once at the edge, read everywhere, changed only by copying
(``msgspec.structs.replace``).
"""

from __future__ import annotations

from msgspec import Struct, field

from hybridplan.engines.sglang.settings import SglangSettings
from hybridplan.engines.vllm.settings import VllmSettings
from hybridplan.errors import PlanError
from hybridplan.spec import Mixer, ModelSpec

#: ``--engine``: one engine or both
ENGINE_CHOICES = ("vllm", "sglang", "both")
#: the context a model is sized at when none is given and its config names none
FALLBACK_CTX = 131072


class DtypeChoice(Struct, frozen=True):
    """The dtype flags a user typed (None = the engine's "auto")."""

    dtype: str | None = None
    conv: str | None = None
    ssm: str | None = None
    kv: str | None = None


#: ``--speculative-config`` methods (vLLM's ``method``; SGLang's ``--speculative-algorithm`` in lower case);
#: which release accepts which is in hybridplan/speculative.py
SPECULATIVE_METHODS = (
    "eagle",
    "eagle3",
    "dflash",
    "mtp",
    "qwen3_next_mtp",
    "deepseek_mtp",
    "ngram",
    "medusa",
    "draft_model",
    "nextn",
    "standalone",
    "ernie_mtp",
    "mimo_mtp",
    "glm4_moe_mtp",
    "longcat_flash_mtp",
    "qwen3_5_mtp",
    "nemotron_h_mtp",
    "mlp_speculator",
    "suffix",
    "ngram_gpu",
    "extract_hidden_states",
    "custom_class",
    "dspark",
)


class Speculative(Struct, frozen=True):
    """Speculative decoding as served: the method, the tokens proposed per step, and the draft model where the
    method has one of its own (EAGLE, EAGLE-3, DFlash, a draft model). ``draft`` is None for MTP (the target's
    own MTP layers draft) and for n-gram (no model). ``num_tokens`` equals ``Scenario.spec_tokens``; how each
    engine sizes the draft's KV and state, and which of the drafter's weights it loads beside the target's
    (``drafter`` in hybridplan/engines/*/memory.py: the MTP layers of ``spec``, or ``draft``'s), is an engine
    rule."""

    method: str | None = None
    num_tokens: int = 0
    #: the draft model's spec, loaded at the edge; None where the method has no separate draft
    draft: ModelSpec | None = None
    #: what the user (or the log) named as the draft model, as typed
    draft_ref: str | None = None
    #: the token mixers the draft adds to the caches: the draft model's layers, or for MTP the target's own MTP
    #: layers (hybridplan/speculative.py reads them); empty for n-gram and MLP heads
    layers: tuple[Mixer, ...] = ()

    def __post_init__(self) -> None:
        if self.method is not None and self.method not in SPECULATIVE_METHODS:
            raise PlanError(f"unknown speculative method {self.method!r} (known: {', '.join(SPECULATIVE_METHODS)})")
        if self.num_tokens < 0:
            raise PlanError(f"num_speculative_tokens must be ≥ 0, got {self.num_tokens}")

    @property
    def active(self) -> bool:
        return self.num_tokens > 0


class Budget(Struct, frozen=True):
    """What the caches may take: given directly (``kv_budget``), or derived from the GPU's memory (``gpu_mem``,
    or ``gpu`` by name) less the weights (``weights`` over all ranks, ``params`` at the model dtype, else counted
    from the config) and what the engine needs besides (``overhead`` when given, else each engine's own
    estimate of activations, non-torch memory and CUDA graphs). How each engine turns these into its budget is
    an engine rule."""

    kv_budget: int | None = None
    gpu_mem: int | None = None
    #: the GPU by name (hybridplan/gpus.py), which also sets the engines' defaults for it
    gpu: str | None = None
    #: what the name typed left open, where it named one card of several (a bare ``a100``: hybridplan/gpus.py)
    gpu_note: str | None = None
    weights: int | None = None
    params: float | None = None
    overhead: int | None = None
    #: the engines' --cpu-offload-gb in bytes per GPU: weights moved to the CPU (hybridplan/engines/*/memory.py)
    cpu_offload: int | None = None

    def check(self) -> None:
        if self.kv_budget is None and self.gpu_mem is None:
            raise PlanError("give --gpu-type, --gpu-mem or --kv-budget")
        if self.params is not None and self.params <= 0:
            raise PlanError(f"--params must be positive, got {self.params:g}")


class Scenario(Struct, frozen=True):
    """A model served one way: the model, its tensor-parallel degree, the context per request, the dtype
    flags, speculative tokens, the engines asked for and their flags, and the memory budget."""

    spec: ModelSpec
    ctx: int
    tp: int = 1
    dtypes: DtypeChoice = DtypeChoice()
    spec_tokens: int = 0
    #: the speculative method and draft (``spec_tokens`` is its token count; a bare ``--spec-tokens`` leaves the
    #: method unnamed)
    speculative: Speculative = Speculative()
    #: ``--engine``: vllm, sglang or both
    engine: str = "both"
    #: the prefill chunk as given: vLLM ``--max-num-batched-tokens``, SGLang ``--chunked-prefill-size``; None =
    #: each engine's default for the GPU and release (engines/vllm/defaults.py, engines/sglang/defaults.py)
    chunk: int | None = None
    #: state slots of the pool `size` reports
    slots: int = 256
    vllm: VllmSettings = field(default_factory=VllmSettings)
    sglang: SglangSettings = field(default_factory=SglangSettings)
    budget: Budget = Budget()
    #: start with a context beyond the model's own maximum, as VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 and
    #: SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 allow
    allow_long_context: bool = False
    #: pipeline-parallel stages (vLLM ``--pipeline-parallel-size``, SGLang ``--pp-size``); each engine splits the
    #: layers by its own rule (hybridplan/engines/*/parallel.py)
    pp: int = 1
    #: the layers of each stage as given (``VLLM_PP_LAYER_PARTITION`` / ``SGLANG_PP_LAYER_PARTITION``); None =
    #: the engine's own split
    pp_partition: tuple[int, ...] | None = None
    #: data-parallel ranks (vLLM ``--data-parallel-size``: whole engine replicas whose MoE layers shard over all
    #: data × tensor ranks; SGLang ``--dp-size``)
    dp: int = 1
    #: vLLM ``--enable-expert-parallel``: the routed experts split whole over the data × tensor ranks
    expert_parallel: bool = False
    #: SGLang ``--ep-size``: the routed experts split whole over this many of the tensor ranks
    ep_size: int = 1
    #: SGLang ``--enable-dp-attention``: attention (and the recurrent layers) data-parallel over ``dp`` groups of
    #: ``tp // dp`` ranks, the MLP / MoE tensor- or expert-parallel over all ``tp``
    dp_attention: bool = False
    #: engine flags given that change no figure, kept as typed for the printed command: (engine, words)
    engine_args: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def __post_init__(self) -> None:
        if self.engine not in ENGINE_CHOICES:
            raise PlanError(f"unknown engine {self.engine!r} (known: {', '.join(ENGINE_CHOICES)})")
        for value, flag in (
            (self.tp, "--tp"),
            (self.ctx, "--ctx"),
            (self.slots, "--slots"),
            (self.pp, "--pp"),
            (self.dp, "--dp"),
            (self.ep_size, "--ep-size"),
        ):
            positive(value, flag)
        if self.chunk is not None and self.chunk <= 0:
            raise PlanError(f"--max-num-batched-tokens must be positive, got {self.chunk}")
        if self.spec_tokens < 0:
            raise PlanError(f"--spec-tokens must be ≥ 0, got {self.spec_tokens}")
        if self.speculative.num_tokens and self.speculative.num_tokens != self.spec_tokens:
            raise PlanError(
                f"num_speculative_tokens {self.speculative.num_tokens} and --spec-tokens {self.spec_tokens} disagree"
            )
        if self.pp_partition is not None and len(self.pp_partition) != self.pp:
            raise PlanError(
                f"the layer partition {','.join(map(str, self.pp_partition))} names "
                f"{len(self.pp_partition)} stages, but --pp is {self.pp}"
            )

    def wants(self, engine: str) -> bool:
        return self.engine in (engine, "both")


def positive(value: int | None, flag: str) -> int:
    if value is None or value <= 0:
        raise PlanError(f"{flag} must be a positive integer, got {value}")
    return value


def default_ctx(spec: ModelSpec) -> int:
    """The context a model is sized at when none is given: its own maximum."""
    return spec.max_position_embeddings or FALLBACK_CTX
