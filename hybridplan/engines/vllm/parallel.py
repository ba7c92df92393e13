"""vLLM pipeline parallelism (``--pipeline-parallel-size``): which layers each stage holds, which models and
releases refuse it, and how the stages' caches are reconciled into one block count.

The split: vllm/distributed/utils.py ``get_pp_indices`` (the same rule 0.10.0–0.33.0): ``n // pp`` layers a
stage, the ``n % pp`` left over one each to the stages before the last, counted back from the second-to-last
(so with ``pp > 2`` and few left over the middle stages take them); ``VLLM_PP_LAYER_PARTITION`` (comma-separated
layer counts) overrides it, refused unless it names ``pp`` stages summing to the layers.

The reconciliation: every stage profiles its own memory (its own weights: the embedding on the first, the
LM head on the last; the profiling sampler pass runs on the last only, vllm/v1/worker/gpu_model_runner.py
``profile_run``), and the engine core asks each worker for its KV cache config and keeps the smallest block
count of all (vllm/v1/engine/core.py; vllm/v1/core/kv_cache_utils.py ``get_kv_cache_configs``, from 0.33.0
kv_cache_planning.py). From 0.11.0 the groups are those of the whole model (its layer ratio, its page
unification), each projected onto a stage's layers; a block of a stage holds one page per layer of its
largest projected group, so a stage whose layers crowd one group pays more per block than its share of the
model. Up to 0.10.2 each stage grouped its own layers (``get_kv_cache_config`` per worker, then
``unify_kv_cache_configs``), and the scheduler took the first stage's groups.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from msgspec import Struct
from msgspec.structs import replace

from hybridplan.engines.common import Shortfall, Term, Waterfall
from hybridplan.engines.vllm.releases import Release
from hybridplan.engines.vllm.sizing import Capacity, Fit, ModeFit, capacity, max_num_seqs
from hybridplan.errors import PlanError
from hybridplan.stages import Sharding, Stage, bounds_of, decoder_layers, partition_parts, stages

if TYPE_CHECKING:
    from hybridplan.scenario import Scenario

PARTITION_ENV = "VLLM_PP_LAYER_PARTITION"
#: from this release the KV cache groups are the whole model's, projected onto each stage
GLOBAL_GROUPS = "0.11.0"
#: [from, until): the start-up check weighs the whole model's request against the smallest worker's memory
WHOLE_MODEL_CHECK = ("0.14.0", "0.17.0")

#: architectures whose vLLM class does not implement ``SupportsPP`` in any release 0.10.0–0.33.0 (read from
#: each wheel's class bases, vllm/model_executor/models/): vLLM refuses PP for them (vllm/config/model.py
#: ``verify_with_parallel_config``)
NO_PP = ("Mamba2ForCausalLM", "MiniMaxM1ForCausalLM", "MiniMaxText01ForCausalLM", "Zamba2ForCausalLM")
#: the drafter's class a speculative method loads, and the releases [from, until) in which it implements
#: ``SupportsPP``: outside them vLLM refuses the draft's config with the target's PP degree (the draft's
#: ``verify_with_parallel_config``, from vllm/config/speculative.py; a real 0.23.0 log of Qwen3.6-27B with MTP
#: at PP 2: tests/data/logs/vllm-0.23.0-qwen3.6-27b-nvfp4-mtp-2xrtx5060ti-4.log)
DRAFT_PP: dict[str, tuple[tuple[str, str | None], ...]] = {
    "Qwen3NextMTP": (("0.10.2", "0.14.0"),),
    "Qwen3_5MTP": (("0.30.0", None),),
    "Qwen3_5MoeMTP": (("0.30.0", None),),
    "NemotronHMTPModel": (("0.10.0", None),),
    "DeepSeekMTPModel": (("0.10.0", "0.14.0"), ("0.30.0", None)),
    "EagleLlamaForCausalLM": (("0.10.0", "0.30.0"),),
    "Eagle3LlamaForCausalLM": (("0.10.0", "0.30.0"),),
    "DFlashDraftModel": (("0.20.0", None),),
}
#: the MTP drafter's class for each target architecture (vllm/config/speculative.py rewrites the draft's
#: architectures to these)
MTP_DRAFT = {
    "Qwen3NextForCausalLM": "Qwen3NextMTP",
    "Qwen3_5ForConditionalGeneration": "Qwen3_5MTP",
    "Qwen3_5ForCausalLM": "Qwen3_5MTP",
    "Qwen3_5MoeForConditionalGeneration": "Qwen3_5MoeMTP",
    "Qwen3_5MoeForCausalLM": "Qwen3_5MoeMTP",
    "NemotronHForCausalLM": "NemotronHMTPModel",
    "DeepseekV3ForCausalLM": "DeepSeekMTPModel",
}
REFUSAL = "Pipeline parallelism is not supported for this model. Supported models implement the `SupportsPP` interface."


def split(num_layers: int, pp: int, partition: tuple[int, ...] | None = None) -> tuple[tuple[int, int], ...]:
    """Each stage's layers ``[start, end)`` as ``get_pp_indices`` gives them."""
    if partition is not None:
        parts = partition_parts(partition, pp, num_layers, PARTITION_ENV)
    else:
        parts = [num_layers // pp] * pp
        for i in range(2, num_layers % pp + 2):
            parts[-i] += 1
    return bounds_of(parts, "--pipeline-parallel-size", num_layers)


def _supported(rel: Release, ranges: tuple[tuple[str, str | None], ...]) -> bool:
    return any(rel.at_least(lo) and (hi is None or rel.before(hi)) for lo, hi in ranges)


def draft_class(sc: Scenario) -> str | None:
    """The drafter class vLLM loads for the scenario's speculative method, where it loads one."""
    method = sc.speculative.method
    if not sc.speculative.active or method in (None, "ngram", "ngram_gpu", "suffix", "medusa", "mlp_speculator"):
        return None
    if method.endswith("mtp"):
        return MTP_DRAFT.get(sc.spec.architecture, f"{sc.spec.architecture} MTP")
    if method in ("eagle", "eagle3"):
        return "EagleLlamaForCausalLM" if method == "eagle" else "Eagle3LlamaForCausalLM"
    if method == "dflash":
        return "DFlashDraftModel"
    draft = sc.speculative.draft
    return draft.architecture if draft is not None else None


def check(sc: Scenario) -> None:
    """Refuse what vLLM refuses at ``--pipeline-parallel-size`` > 1, with its reason."""
    rel = sc.vllm.release
    if sc.spec.architecture in NO_PP:
        raise PlanError(
            f"vLLM {rel.version} refuses --pipeline-parallel-size {sc.pp} for {sc.spec.architecture}: "
            f'"{REFUSAL}" (vllm/config/model.py)'
        )
    drafter = draft_class(sc)
    if drafter is None:
        return
    ranges = DRAFT_PP.get(drafter)
    if ranges is None:
        if drafter in NO_PP:
            ranges = ()
        else:
            return  # a draft model of a target architecture: checked as one
    if not _supported(rel, ranges):
        raise PlanError(
            f"vLLM {rel.version} refuses --pipeline-parallel-size {sc.pp} with {sc.speculative.method} "
            f'speculative decoding: its drafter {drafter} does not implement SupportsPP: "{REFUSAL}" '
            "(raised from vllm/config/speculative.py)"
        )


#: from this release the experts ``ep`` does not divide go one each to the first ``experts % ep`` ranks
#: (``determine_expert_map``: vllm/model_executor/layers/fused_moe/layer.py 0.10.1-0.21.0, fused_moe/
#: expert_map_manager.py from 0.22.0); in 0.10.0 the last rank took every expert left over
EVEN_EXPERTS = "0.10.1"


def experts_held(experts: int, ep: int, rel: Release) -> int:
    """The routed experts the most loaded of ``ep`` expert-parallel ranks holds (``determine_expert_map``'s
    ``local_num_experts``): ceil(experts / ep) from 0.10.1, the last rank's ``experts - (ep - 1) * (experts // ep)``
    in 0.10.0."""
    if ep <= 1:
        return experts
    if rel.before(EVEN_EXPERTS):
        return experts - (ep - 1) * (experts // ep)
    return -(-experts // ep)


def sharding(sc: Scenario) -> Sharding:
    """How one rank's weights split (vllm/model_executor/layers/fused_moe/config.py ``FusedMoEParallelConfig.make``,
    the same 0.10.0-0.33.0 as validation/parallel_dp_ep.py runs it): attention, recurrent layers and dense MLPs over
    the TP ranks of one engine; the fused MoE over all ``dp × tp`` ranks, sliced (TP flattened across DP) or, with
    --enable-expert-parallel, dealt whole (EP of ``dp × tp``, the most loaded rank as ``experts_held`` says)."""
    from hybridplan.stages import expert_shape

    world = sc.tp * sc.dp
    if sc.expert_parallel:
        shape = expert_shape(sc.spec)
        held = experts_held(shape.experts, world, sc.vllm.release) if shape is not None else None
        return Sharding(sc.tp, expert_tp=1, ep=world, experts_held=held)
    return Sharding(sc.tp, expert_tp=world)


def check_moe(sc: Scenario) -> None:
    """--enable-expert-parallel on a model without experts: vllm/config/model.py ``_verify_with_expert_parallelism``;
    an expert's intermediate size the MoE's TP ranks (``dp × tp`` without EP) do not divide: FusedMoE asserts
    ``intermediate_size % tp_size == 0`` (fused_moe/layer.py 0.10.0-0.23.0, fused_moe/config.py from
    0.24.0 to 0.33.0)."""
    from hybridplan.stages import expert_shape

    rel = sc.vllm.release
    if sc.expert_parallel and "moe" not in sc.spec.ffn:
        raise PlanError(
            f"vLLM {rel.version} refuses --enable-expert-parallel for {sc.spec.name}: "
            '"Number of experts in the model must be greater than 0 when expert parallelism is '
            'enabled." (vllm/config/model.py)'
        )
    shape = expert_shape(sc.spec) if "moe" in sc.spec.ffn else None
    moe_tp = 1 if sc.expert_parallel else sc.tp * sc.dp
    if shape is not None and shape.intermediate % moe_tp:
        raise PlanError(
            f"vLLM {rel.version} cannot build {sc.spec.name}'s fused MoE sliced over {moe_tp} ranks "
            f"(TP {sc.tp} × DP {sc.dp}): its experts' intermediate size {shape.intermediate} is not a "
            "multiple of it (FusedMoE asserts intermediate_size % tp_size == 0, "
            "vllm/model_executor/layers/fused_moe/); --enable-expert-parallel deals the experts whole"
        )


def pipeline(sc: Scenario) -> tuple[Stage, ...]:
    """The stages of the scenario's model, split as vLLM splits it."""
    check_moe(sc)
    if sc.pp == 1:
        return stages(sc.spec, ((0, len(decoder_layers(sc.spec))),))
    check(sc)
    layers = decoder_layers(sc.spec)
    return stages(sc.spec, split(len(layers), sc.pp, sc.pp_partition))


def stage_memory(sc: Scenario, stage: Stage) -> Waterfall:
    """One stage's memory, total to "Available KV cache memory": the whole model's waterfall at its TP degree
    (hybridplan/engines/vllm/memory.py) with the stage's own weights, and without the sampler's logits where
    the stage is not the last."""
    from hybridplan.engines.vllm.dtypes import model_dtype
    from hybridplan.engines.vllm.memory import BATCH_ACTIVATION, memory
    from hybridplan.stages import stage_rank_bytes

    b = sc.budget
    # the whole model's terms but the weights, which are the stage's (given ones split evenly)
    whole = memory(replace(sc, budget=replace(b, weights=1, params=None)))
    if b.weights is not None or b.params is not None:
        from hybridplan.dtypes import size_of

        total = b.weights if b.weights is not None else int(b.params * size_of(model_dtype(sc.spec, sc.dtypes.dtype)))
        weights = Term("weights", total // (sc.tp * sc.pp), "exact", "given, split evenly over the stages and ranks")
    else:
        size, source = stage_rank_bytes(sc.spec, stage, sc.tp, model_dtype(sc.spec, sc.dtypes.dtype), sharding(sc))
        if sc.dp > 1 or sc.expert_parallel:
            source += f"; experts {'dealt whole over' if sc.expert_parallel else 'sliced over'} {sc.tp * sc.dp} ranks"
        weights = Term("weights", size, "counted", source)
    terms = []
    for t in whole.terms:
        if t.name == "weights":
            t = weights
        elif t.name == "drafter weights" and not stage.last:
            continue  # the drafter is built on the last PP rank only (gpu_model_runner.py __init__, 0.10.0-0.33.0)
        elif t.name == "activation" and not stage.last:
            t = Term(
                "activation", BATCH_ACTIVATION, "estimate", "the dummy batch; the sampler runs on the last stage only"
            )
        terms.append(t)
    left = whole.requested - sum(t.bytes for t in terms)
    return Waterfall(
        whole.gpu_bytes, whole.utilization, whole.requested, tuple(terms), left, whole.before, whole.factor_note
    )


def _group_layers(sc: Scenario, cap: Capacity) -> list[list[int]]:
    """The decoder layer of each layer of each global KV cache group, in group order: a bucket's layers (in
    layer order) dealt strided over its groups, ``layers[i::k]`` (vllm/v1/core/kv_cache_utils.py)."""
    from hybridplan.engines.vllm.sizing import _attention_key
    from hybridplan.spec import is_attention

    positions: dict[tuple, list[int]] = {}
    kinds: dict[tuple, str] = {}
    for i, layer in enumerate(decoder_layers(sc.spec)):
        for m in layer.mixers:
            key = _attention_key(m, sc.tp) if is_attention(m) else ("state", m)
            positions.setdefault(key, []).append(i)
            kinds[key] = m.kind
    unused = list(positions)
    layers_of: dict[tuple, list[int]] = {}
    order: list[tuple] = []
    for g in cap.groups:
        if g.draft:
            raise PlanError("speculative draft layers with pipeline parallelism are not modelled")
        bucket = (g.kind, g.window, g.recurrent, g.block)
        if bucket not in layers_of:
            n = sum(h.layers for h in cap.groups if (h.kind, h.window, h.recurrent, h.block) == bucket)
            key = next((k for k in unused if kinds[k] == g.kind and len(positions[k]) == n), None)
            if key is None:
                raise PlanError(f"the {g.kind} layers of {sc.spec.name} do not map onto vLLM's KV cache groups")
            unused.remove(key)
            layers_of[bucket] = positions[key]
        order.append(bucket)
    dealt: list[list[int]] = []
    dealt_so_far: dict[tuple, int] = {}
    for bucket in order:
        i, k = dealt_so_far.get(bucket, 0), order.count(bucket)
        dealt.append(layers_of[bucket][i::k])
        dealt_so_far[bucket] = i + 1
    return dealt


class StageCache(Struct, frozen=True):
    """One stage's cache: its budget, the layers of each global group it holds, and the blocks it buys."""

    stage: Stage
    budget: int
    #: the stage's layers in each KV cache group (vLLM's projected groups)
    group_layers: tuple[int, ...]
    page_bytes: int
    #: one request of the context over the stage's layers (``max_memory_usage_bytes`` summed)
    request_bytes: int
    memory: Waterfall | None = None

    @property
    def bytes_per_block(self) -> int:
        return max(self.group_layers, default=0) * self.page_bytes

    @property
    def num_blocks(self) -> int:
        return self.budget // self.bytes_per_block

    def to_dict(self) -> dict:
        return {
            **self.stage.to_dict(),
            "kv_budget_bytes": self.budget,
            "group_layers": list(self.group_layers),
            "bytes_per_block": self.bytes_per_block,
            "num_blocks": self.num_blocks,
            "request_bytes": self.request_bytes,
            "weights_bytes": self.memory.term("weights") if self.memory else None,
        }


class StagedCapacity(Capacity, frozen=True):
    """The capacity the engine core settles on: the scheduler's groups, the binding stage's budget and bytes per
    block (so ``num_blocks`` is the smallest of all stages'), and every stage's own start-up check."""

    stage_caches: tuple[StageCache, ...] = ()
    binding: int = 0

    @property
    def bytes_per_block(self) -> int:
        return self.stage_caches[self.binding].bytes_per_block

    @property
    def request_bytes(self) -> int:
        return self.stage_caches[self.binding].request_bytes

    @property
    def model_request_bytes(self) -> int:
        """One request of the context over the model's global groups, as 0.14.0-0.16.x check it (sizing.py
        ``Capacity.request_bytes``: the group size × the page × the groups' pages)."""
        return self.group_size * self.layout.page_bytes * sum(self.pages_per_request)

    def problem(self, max_num_seqs: int) -> str | None:
        """The start-up memory check (vllm/v1/core/kv_cache_utils.py ``get_kv_cache_configs``): up to 0.13.0 and
        from 0.17.0 each worker checks its own layers (0.17 on: the global groups projected on it); 0.14.0-0.16.x
        check the whole model's request against the smallest worker's memory, so PP refuses what its stages
        would hold (vllm#34076)."""
        from hybridplan.engines.vllm.sizing import _gib, seq_len_owner

        whose = seq_len_owner(self.rel)
        checks = [
            (c.request_bytes, c.budget, f"PP stage {c.stage.rank} (layers {c.stage.start}-{c.stage.end - 1}): ")
            for c in self.stage_caches
        ]
        if self.rel.at_least(WHOLE_MODEL_CHECK[0]) and self.rel.before(WHOLE_MODEL_CHECK[1]):
            checks = [
                (
                    self.model_request_bytes,
                    min(c.budget for c in self.stage_caches),
                    "the whole model's request against the smallest stage's memory: ",
                )
            ]
        for need, have, where in checks:
            if need > have:
                return (
                    f"{where}To serve at least one request with the {whose} max seq len ({self.max_len}), "
                    f"({_gib(need, self.rel)} GiB KV cache is needed, which is larger than the available KV "
                    f"cache memory ({_gib(have, self.rel)} GiB)."
                )
        return super().problem(max_num_seqs)


def _stage_caches(
    sc: Scenario, mode: str, budgets: list[int], sts: tuple[Stage, ...], waters: list[Waterfall | None]
) -> StagedCapacity:
    rel = sc.vllm.release
    caches = []
    if rel.at_least(GLOBAL_GROUPS):
        base = capacity(sc, mode, budgets[0])
        per_group = _group_layers(sc, base)
        for st, budget, water in zip(sts, budgets, waters):
            held = tuple(sum(1 for i in layers if st.start <= i < st.end) for layers in per_group)
            request = sum(n * p for n, p in zip(held, base.pages_per_request)) * base.layout.page_bytes
            caches.append(StageCache(st, budget, held, base.layout.page_bytes, request, water))
    else:
        base = None
        for st, budget, water in zip(sts, budgets, waters):
            own = capacity(replace(sc, spec=st.spec, pp=1, pp_partition=None), mode, budget)
            size, groups = own.group_size, own.groups
            held = tuple(g.layers for g in groups)
            request = sum(n * p for n, p in zip(held, own.pages_per_request)) * own.layout.page_bytes
            caches.append(StageCache(st, budget, (size,) if groups else (), own.layout.page_bytes, request, water))
            base = base or own  # the scheduler takes the first stage's groups
    for c in caches:
        if c.bytes_per_block == 0:
            raise PlanError(
                f"PP stage {c.stage.rank} (layers {c.stage.start}-{c.stage.end - 1}) holds no attention or "
                "recurrent layer: vLLM has no KV cache to size on it (give VLLM_PP_LAYER_PARTITION)"
            )
    binding = min(range(len(caches)), key=lambda i: caches[i].num_blocks)
    fields = {
        f: getattr(base, f)
        for f in (
            "layout",
            "group_size",
            "groups",
            "pages_per_request",
            "max_len",
            "rel",
            "eager",
            "batched_tokens",
            "cache_block",
        )
    }
    return StagedCapacity(**fields, kv_budget=caches[binding].budget, stage_caches=tuple(caches), binding=binding)


def _kinds(stage: Stage) -> str:
    return " · ".join(f"{n} {k}" for k, n in stage.spec.layer_counts.items())


def _gib_text(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB"


class PipelineFit(Fit, frozen=True):
    """`fit` on vLLM at ``--pipeline-parallel-size`` > 1: the engine's figures (those of the stage that binds)
    and every stage's own."""

    pp: int = 1
    dp: int = 1
    expert_parallel: bool = False

    @property
    def stage_caches(self) -> tuple[StageCache, ...]:
        return self._capacity.stage_caches

    @property
    def binding(self) -> int:
        return self._capacity.binding

    @property
    def _capacity(self) -> StagedCapacity:
        cap = self.chosen.capacity
        assert isinstance(cap, StagedCapacity)  # a pipeline fit's capacity is its stages'
        return cap

    @property
    def flags(self) -> str:
        return (
            super().flags
            + (f" --pipeline-parallel-size {self.pp}" if self.pp > 1 else "")
            + (f" --data-parallel-size {self.dp}" if self.dp > 1 else "")
            + (" --enable-expert-parallel" if self.expert_parallel else "")
        )

    @property
    def total_concurrency(self) -> float:
        """Requests of the context all data-parallel engines hold together."""
        return self.dp * self.chosen.capacity.max_concurrency

    def to_dict(self) -> dict:
        return {
            **super().to_dict(),
            "pp": self.pp,
            "dp": self.dp,
            "expert_parallel": self.expert_parallel,
            "total_max_concurrency": self.total_concurrency,
            "binding_stage": self.binding,
            "stages": [c.to_dict() for c in self.stage_caches],
        }


def fit(sc: Scenario) -> PipelineFit | Shortfall:
    """`fit` on vLLM with pipeline stages: each stage's memory and blocks, the smallest block count kept."""
    from hybridplan.engines.vllm.context import refusal

    rel = sc.vllm.release
    sts = pipeline(sc)
    waters: list[Waterfall | None] = [None] * len(sts)
    if sc.budget.kv_budget is not None:
        budgets = [sc.budget.kv_budget] * len(sts)
    else:
        waters = [stage_memory(sc, st) for st in sts]
        for st, w in zip(sts, waters):
            if w.cache_bytes <= 0:
                where = f" (PP stage {st.rank}, layers {st.start}-{st.end - 1})" if sc.pp > 1 else ""
                from hybridplan.engines.vllm.memory import CACHE_LABEL, FACTOR_LABEL

                return Shortfall(f"vLLM {rel.version}{where}", w, CACHE_LABEL, FACTOR_LABEL)
        budgets = [w.cache_bytes for w in waters]
    n = max_num_seqs(sc)
    modes = rel.modes_for(sc.spec, sc.vllm.mode)
    fits = {
        mode: ModeFit(_stage_caches(sc, mode, budgets, sts, waters), n, sc.vllm.max_num_seqs is not None)
        for mode in modes
    }
    chosen = modes[0] if sc.vllm.mode else rel.default_mode(sc.spec, sc.spec_tokens)
    cap = fits[chosen].capacity
    assert isinstance(cap, StagedCapacity)  # _stage_caches builds one
    notes = list(rel.caveats(sc.spec))
    if waters[0] is not None and sc.budget.overhead is None:
        from hybridplan.engines.vllm.memory import encoder_note

        notes += filter(None, [encoder_note(rel, sc.spec.facts.multimodal)])
        if sc.pp > 1 or sc.dp > 1:
            notes.append(
                "non-torch memory is estimated at the TP degree of one engine stage; the estimate was "
                "fitted to logs without PP or DP"
            )
    from hybridplan.engines.vllm import defaults

    notes += filter(None, [defaults.note(sc), defaults.gdn_note(sc)])
    b = cap.stage_caches[cap.binding]
    if sc.dp > 1:
        notes.append(
            f"--data-parallel-size {sc.dp}: {sc.dp} engines of {sc.tp * sc.pp} GPUs each "
            f"({sc.tp * sc.pp * sc.dp} in all), each with its own scheduler and KV cache as shown: "
            f"{sc.dp} × {cap.max_concurrency:.2f} = {sc.dp * cap.max_concurrency:.2f} requests of the "
            "context together"
        )
    notes += [
        (
            f"PP stage {c.stage.rank} (layers {c.stage.start}-{c.stage.end - 1}, {_kinds(c.stage)}; {c.stage.ends})"
            if sc.pp > 1
            else f"each of the {sc.tp * sc.dp} ranks"
        )
        + f": weights {_gib_text(c.memory.term('weights')) if c.memory else '—'}, KV budget "
        f"{_gib_text(c.budget)}, {c.bytes_per_block:,} B a block ({max(c.group_layers)} layers of its "
        f"fullest group), {c.num_blocks:,} blocks"
        for c in cap.stage_caches
    ]
    if sc.pp > 1:
        notes.append(
            f"PP stage {b.stage.rank} (layers {b.stage.start}-{b.stage.end - 1}) binds: "
            f"{b.num_blocks:,} blocks; vLLM keeps the smallest block count of all stages "
            "(vllm/v1/core/kv_cache_utils.py get_kv_cache_configs)"
        )
    return PipelineFit(
        rel,
        b.budget,
        chosen,
        fits,
        sc.ctx,
        sc.tp,
        refusal(sc),
        tuple(notes),
        b.memory,
        pp=sc.pp,
        dp=sc.dp,
        expert_parallel=sc.expert_parallel,
    )


class StageSize(Struct, frozen=True):
    """`size --pp`: what one stage keeps per sequence (vLLM's dtype rules) and the weights one of its ranks loads."""

    stage: Stage
    state_bytes: int
    kv_bytes_per_token: int
    kv_bytes_at_ctx: int
    weights_bytes: int | None

    #: ``--data-parallel-size`` and ``--enable-expert-parallel``, where given: how the experts split
    experts: str = ""

    @property
    def line(self) -> str:
        w = f"weights {_gib_text(self.weights_bytes)} a rank" if self.weights_bytes is not None else "weights —"
        w += f" ({self.experts})" if self.experts else ""
        if self.stage.first and self.stage.last:
            return f"each rank: {w.replace(' a rank', '')}"
        return (
            f"PP stage {self.stage.rank} (layers {self.stage.start}-{self.stage.end - 1}, {_kinds(self.stage)}; "
            f"{self.stage.ends}): state {self.state_bytes / (1 << 20):,.2f} MiB a sequence, KV "
            f"{self.kv_bytes_per_token / 1024:,.1f} KiB a token, {w}"
        )

    def to_dict(self) -> dict:
        return {
            **self.stage.to_dict(),
            "state_bytes_per_sequence": self.state_bytes,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "kv_bytes_at_ctx": self.kv_bytes_at_ctx,
            "weights_bytes_per_rank": self.weights_bytes,
        }


def stage_sizes(sc: Scenario) -> tuple[StageSize, ...]:
    """Each stage's share of a sequence's state and KV, and of the weights, as vLLM splits the layers."""
    from hybridplan.engines.vllm.dtypes import footprint, model_dtype
    from hybridplan.stages import stage_rank_bytes

    out = []
    for st in pipeline(sc):
        fp = footprint(replace(sc, spec=st.spec, pp=1, pp_partition=None))
        try:
            w: int | None = stage_rank_bytes(sc.spec, st, sc.tp, model_dtype(sc.spec, sc.dtypes.dtype), sharding(sc))[0]
        except PlanError:
            w = None
        experts = (
            ""
            if "moe" not in sc.spec.ffn or (sc.dp == 1 and not sc.expert_parallel)
            else (f"routed experts {'dealt whole' if sc.expert_parallel else 'sliced'} over {sc.tp * sc.dp} ranks")
        )
        out.append(StageSize(st, fp.state_bytes, fp.kv_bytes_per_token, fp.kv_bytes_at(sc.ctx), w, experts))
    return tuple(out)
