"""SGLang pipeline parallelism (``--pp-size``): which layers each stage holds and how the stages' pools are
reconciled.

The split: sglang/srt/distributed/utils.py ``get_pp_indices`` (the same rule 0.5.6–0.5.23): ``n // pp`` layers a
stage and one more for each of the last ``n % pp`` stages (up to 0.5.5 the last stage took all that was left); ``SGLANG_PP_LAYER_PARTITION`` (comma-separated
layer counts) overrides it, refused unless it names ``pp`` stages summing to the layers. (vLLM gives the
extra layers to the stages before the last instead: hybridplan/engines/vllm/parallel.py.)

Each stage profiles its own memory (its own weights) and splits it between its pools as a whole model would
(hybridplan/engines/sglang/pool.py): the KV cell counts the stage's own full-attention layers (the
configurator's ``start_layer <= i < end_layer``); the state slot is charged, from 0.5.17, the largest stage's
share of the recurrent layers (sglang/srt/mem_cache/kv_cache_configurator.py ``_handle_max_mamba_cache``:
"charge the largest per-stage share so every rank derives the same pool"), and up to 0.5.16 every recurrent
layer of the model (``mamba_cache_per_req`` of the whole model, though a rank allocates only its own). The
KV token capacity is then the smallest of all stages' (an all-reduce MIN over the world group,
model_runner_kv_cache_mixin.py in 0.5.9, kv_cache_configurator.py from 0.5.17).

Qwen3.5 before 0.5.10 built every layer on every stage (its ``make_layers`` took no PP rank, sglang#21070,
sglang/srt/models/qwen3_5.py): PP saved no memory, and each stage here holds the whole model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from msgspec import Struct
from msgspec.structs import replace

from hybridplan.engines.common import Shortfall, Term, Waterfall
from hybridplan.engines.sglang.pool import Fit
from hybridplan.errors import PlanError
from hybridplan.spec import ATTENTION_KINDS
from hybridplan.stages import Sharding, Stage, bounds_of, decoder_layers, partition_parts, stages

if TYPE_CHECKING:
    from hybridplan.engines.sglang.releases import Release
    from hybridplan.scenario import Scenario

PARTITION_ENV = "SGLANG_PP_LAYER_PARTITION"
#: from this release the state slot is charged the largest stage's recurrent layers, not the whole model's
STAGE_SHARE = "0.5.17"
#: from this release Qwen3.5 builds only its stage's layers
QWEN35_STAGE_LAYERS = "0.5.10"


#: from this release the leftover layers go one each to the last stages; before, all to the last stage
SPREAD_LEFTOVER = "0.5.6"


def split(
    num_layers: int, pp: int, partition: tuple[int, ...] | None = None, rel: Release | None = None
) -> tuple[tuple[int, int], ...]:
    """Each stage's layers ``[start, end)`` as SGLang's ``get_pp_indices`` gives them: from 0.5.6 (read in every
    wheel 0.5.6-0.5.23) one leftover layer to each of the last ``n % pp`` stages; up to 0.5.5.post3 (0.5.2-0.5.5
    read) ``n // pp`` a stage and the last takes what is left."""
    if partition is not None:
        parts = partition_parts(partition, pp, num_layers, PARTITION_ENV)
    elif rel is not None and rel.before(SPREAD_LEFTOVER):
        base = num_layers // pp
        parts = [base] * (pp - 1) + [num_layers - base * (pp - 1)]
    else:
        base, extra = divmod(num_layers, pp)
        parts = [base + (1 if rank >= pp - extra else 0) for rank in range(pp)]
    return bounds_of(parts, "--pp-size", num_layers)


def every_layer_on_every_stage(sc: Scenario) -> bool:
    return sc.spec.family == "Qwen3.5" and sc.sglang.release.before(QWEN35_STAGE_LAYERS)


def pipeline(sc: Scenario) -> tuple[Stage, ...]:
    layers = decoder_layers(sc.spec)
    sts = stages(sc.spec, split(len(layers), sc.pp, sc.pp_partition, sc.sglang.release))
    if every_layer_on_every_stage(sc):
        return tuple(replace(st, spec=sc.spec) for st in sts)
    return sts


def stage_memory(sc: Scenario, stage: Stage) -> Waterfall:
    """One stage's memory down to R: the whole model's waterfall (hybridplan/engines/sglang/memory.py) with the
    stage's own weights."""
    from hybridplan.engines.sglang.dtypes import model_dtype
    from hybridplan.engines.sglang.memory import memory
    from hybridplan.stages import stage_rank_bytes
    from hybridplan.weights import rank_bytes

    b = sc.budget
    whole = memory(replace(sc, budget=replace(b, weights=1, params=None)))
    dtype = model_dtype(sc.spec, sc.dtypes.dtype)
    if b.weights is not None or b.params is not None:
        size, _ = rank_bytes(sc.spec, sc.tp * sc.pp, dtype, b.weights, b.params)
        weights = Term("weights", size, "exact", "given, split evenly over the stages and ranks")
    elif stage.spec is sc.spec:
        size, source = rank_bytes(sc.spec, sc.tp, dtype)
        weights = Term("weights", size, "counted", source + "; every layer on every stage (sglang#21070)")
    else:
        size, source = stage_rank_bytes(sc.spec, stage, sc.tp, dtype)
        weights = Term("weights", size, "counted", source)
    terms = tuple(weights if t.name == "weights" else t for t in whole.terms)
    left = whole.requested - sum(t.bytes for t in terms)
    return Waterfall(whole.gpu_bytes, whole.utilization, whole.requested, terms, left, whole.before, whole.factor_note)


class StagePools(Struct, frozen=True):
    """One stage's split: its R, its state pool and its KV pool."""

    stage: Stage
    fit: Fit

    def to_dict(self) -> dict:
        f = self.fit
        return {
            **self.stage.to_dict(),
            "budget_bytes": f.budget,
            "max_mamba_cache_size": f.pool.size,
            "kv_tokens": f.kv_tokens,
            "max_running_requests": f.max_running_requests,
            "weights_bytes": f.memory.term("weights") if f.memory else None,
        }


class PipelineFit(Fit, frozen=True):
    """`fit` on SGLang with pipeline stages: the binding stage's figures, and every stage's."""

    pp: int = 1
    stage_pools: tuple[StagePools, ...] = ()
    binding: int = 0
    #: the KV token capacity after the all-reduce MIN over the stages
    min_kv_tokens: int = 0

    @property
    def flags(self) -> str:
        return super().flags + f" --pp-size {self.pp}"

    @property
    def notes(self) -> tuple[str, ...]:
        b = self.stage_pools[self.binding]
        rows = tuple(
            f"PP stage {p.stage.rank} (layers {p.stage.start}-{p.stage.end - 1}): R "
            f"{p.fit.budget / (1 << 30):.2f} GiB, {p.fit.pool.size:,} state slots, {p.fit.kv_tokens:,} KV "
            f"tokens, {p.fit.max_running_requests:,} requests"
            for p in self.stage_pools
        )
        fewest = min(self.stage_pools, key=lambda p: p.fit.max_running_requests)
        caps = (
            ()
            if fewest.fit.max_running_requests >= b.fit.max_running_requests
            else (
                f"PP stage {fewest.stage.rank}'s state pool admits fewer requests "
                f"({fewest.fit.max_running_requests:,}) than the binding stage's",
            )
        )
        return (
            super().notes
            + rows
            + (
                f"SGLang keeps the smallest KV token capacity of all stages ({self.min_kv_tokens:,}, the all-reduce MIN): "
                f"PP stage {b.stage.rank} (layers {b.stage.start}-{b.stage.end - 1}) binds",
            )
            + caps
        )

    def to_dict(self) -> dict:
        return {
            **super().to_dict(),
            "pp": self.pp,
            "binding_stage": self.binding,
            "min_kv_tokens": self.min_kv_tokens,
            "stages": [p.to_dict() for p in self.stage_pools],
        }


def fit(sc: Scenario) -> PipelineFit | Shortfall:
    """`fit` on SGLang with pipeline stages."""
    from hybridplan.engines.sglang.pool import fit as pool_fit
    from hybridplan.scenario import Budget

    rel = sc.sglang.release
    sts = pipeline(sc)
    most = max(sts, key=lambda st: len(st.spec.recurrent))
    out = []
    for st in sts:
        water = None
        if sc.budget.kv_budget is not None:
            budget = Budget(kv_budget=sc.budget.kv_budget, gpu=sc.budget.gpu)
        else:
            water = stage_memory(sc, st)
            if water.cache_bytes <= 0:
                from hybridplan.engines.sglang.memory import CACHE_LABEL, FACTOR_LABEL

                return Shortfall(
                    f"SGLang {rel.version} (PP stage {st.rank}, layers {st.start}-{st.end - 1})",
                    water,
                    CACHE_LABEL,
                    FACTOR_LABEL,
                )
            budget = Budget(kv_budget=water.cache_bytes, gpu=sc.budget.gpu, gpu_mem=sc.budget.gpu_mem)
        charged = most if rel.at_least(STAGE_SHARE) else None
        recurrent = charged.spec.recurrent if charged is not None else sc.spec.recurrent
        own = replace(st.spec, mixers=tuple(m for m in st.spec.mixers if m.kind in ATTENTION_KINDS) + recurrent)
        f = pool_fit(replace(sc, spec=own, pp=1, pp_partition=None, budget=budget))
        if isinstance(f, Shortfall):
            return f
        out.append(StagePools(st, replace(f, memory=water)))
    tokens = min(p.fit.kv_tokens for p in out if p.fit.pool.fp.kv) if any(p.fit.pool.fp.kv for p in out) else 0
    # the token capacity every stage keeps is the smallest (the all-reduce MIN): that stage's figures are shown
    binding = min(
        range(len(out)),
        key=lambda i: (out[i].fit.kv_tokens if out[i].fit.pool.fp.kv else 1 << 62, out[i].fit.max_running_requests),
    )
    f = out[binding].fit
    fields = {
        name: getattr(f, name)
        for name in (
            "split",
            "pool",
            "spec",
            "strategy",
            "admission",
            "ctx",
            "tp",
            "page_size",
            "refusal",
            "memory",
            "draft",
        )
    }
    from hybridplan.engines.sglang.context import refusal

    fields["refusal"] = refusal(sc)
    return PipelineFit(**fields, pp=sc.pp, stage_pools=tuple(out), binding=binding, min_kv_tokens=tokens)


# --- data and expert parallelism ---------------------------------------------------------------------


def attention_tp(sc: Scenario) -> int:
    """The ranks one attention group spans: ``tp // dp`` with --enable-dp-attention (sglang/srt/server_args.py
    requires dp to divide tp), else ``tp``."""
    if not sc.dp_attention:
        return sc.tp
    if sc.dp < 2:
        raise PlanError("--enable-dp-attention needs --dp-size above 1")
    if sc.tp % sc.dp:
        raise PlanError(
            f"SGLang refuses --enable-dp-attention with --tp-size {sc.tp} and --dp-size {sc.dp}: "
            "tp_size must be divisible by dp_size"
        )
    return sc.tp // sc.dp


def sharding(sc: Scenario) -> Sharding:
    """One rank's weights: the attention and recurrent layers over the attention group, the dense MLPs and the
    LM head over all ``tp`` (``enable_dp_lm_head`` off), the routed experts dealt whole over ``--ep-size`` and
    sliced over ``tp / ep`` (sglang/srt/distributed/parallel_state.py ``moe_tp_size``). The embedding: over the
    attention group where the model passes ``use_attn_tp_group`` (qwen3_next.py, nemotron_h.py), whole where it
    passes ``enable_tp=False`` (qwen3_5.py). FusedMoE (layers/moe/fused_moe_triton/layer.py, 0.5.9-0.5.23) asserts
    that ``ep`` divides the routed experts, each rank holding ``experts // ep``, and that ``tp / ep`` divides an
    expert's intermediate size: refused here as it fails there."""
    from hybridplan.stages import expert_shape

    if sc.ep_size > 1 and sc.tp % sc.ep_size:
        raise PlanError(f"SGLang refuses --ep-size {sc.ep_size} with --tp-size {sc.tp}: ep_size must divide tp_size")
    attn = attention_tp(sc)
    embedding = (1 if sc.spec.family == "Qwen3.5" else attn) if sc.dp_attention else None
    moe_tp = sc.tp // sc.ep_size
    shape = expert_shape(sc.spec) if "moe" in sc.spec.ffn else None
    held = None
    if shape is not None:
        where = "(FusedMoE, sglang/srt/layers/moe/fused_moe_triton/layer.py)"
        if shape.experts % sc.ep_size:
            raise PlanError(
                f"SGLang cannot deal {sc.spec.name}'s {shape.experts} routed experts over --ep-size "
                f"{sc.ep_size}: it asserts num_experts % moe_ep_size == 0 {where}"
            )
        if shape.intermediate % moe_tp:
            raise PlanError(
                f"SGLang cannot slice {sc.spec.name}'s experts over {moe_tp} MoE TP ranks (tp_size "
                f"{sc.tp} / ep_size {sc.ep_size}): their intermediate size {shape.intermediate} is not a "
                f"multiple of it; it asserts intermediate_size % moe_tp_size == 0 {where}"
            )
        held = shape.experts // sc.ep_size if sc.ep_size > 1 else None
    return Sharding(
        attn, ffn_tp=sc.tp, expert_tp=moe_tp, ep=sc.ep_size, lm_head_tp=sc.tp, embedding_tp=embedding, experts_held=held
    )


def rank_memory(sc: Scenario) -> Waterfall:
    """One rank's memory down to R with its weights split as ``sharding`` says."""
    from hybridplan.engines.sglang.dtypes import model_dtype
    from hybridplan.engines.sglang.memory import memory
    from hybridplan.stages import stage_rank_bytes

    b = sc.budget
    whole = memory(replace(sc, budget=replace(b, weights=1, params=None)))
    if b.weights is not None or b.params is not None:
        raise PlanError("with --dp-size / --ep-size the weights are split per part: leave --weights and --params out")
    size, source = stage_rank_bytes(sc.spec, None, sc.tp, model_dtype(sc.spec, sc.dtypes.dtype), sharding(sc))
    weights = Term(
        "weights", size, "counted", source + f"; attention over {attention_tp(sc)}, experts over EP {sc.ep_size}"
    )
    terms = tuple(weights if t.name == "weights" else t for t in whole.terms)
    left = whole.requested - sum(t.bytes for t in terms)
    return Waterfall(whole.gpu_bytes, whole.utilization, whole.requested, terms, left, whole.before, whole.factor_note)


#: from this release a DP-attention group keeps at least one of the requests asked for
ONE_REQUEST_A_GROUP = "0.5.23"
#: from this release a group left no request raises (model_runner_kv_cache_mixin.py, read in each wheel)
RAISES_NO_REQUEST = "0.5.13"


def requests_per_group(requested: int, dp: int, rel: Release) -> int:
    """--max-running-requests under --enable-dp-attention: each of the ``dp`` attention groups keeps
    ``requested // dp`` (model_runner.py and model_runner_kv_cache_mixin.py to 0.5.15, ``resolve_max_num_reqs`` in
    mem_cache/kv_cache_configurator.py from 0.5.16), at least 1 from 0.5.23 (``max(1, …)``). Before 0.5.23 fewer
    requests than groups leave a group none: 0.5.13-0.5.22 raise "Hybrid (mamba/linear-attention) state cache is
    too small to serve any requests" (the mixin to 0.5.15, the configurator after), earlier releases start with
    ``max_running_requests`` 0 and serve nothing: refused here."""
    share = requested // dp
    if rel.at_least(ONE_REQUEST_A_GROUP):
        return max(1, share)
    if share < 1:
        said = (
            ' and raises "Hybrid (mamba/linear-attention) state cache is too small to serve any requests"'
            if rel.at_least(RAISES_NO_REQUEST)
            else ", so no request can run (max_running_requests 0)"
        )
        raise PlanError(
            f"SGLang {rel.version} splits --max-running-requests {requested} over the {dp} DP-attention "
            f"groups as {requested} // {dp} = 0 a group{said}; give at least {dp}"
        )
    return share


def state_slots_per_group(slots: int, dp: int) -> int:
    """--max-mamba-cache-size under --enable-dp-attention: each attention group's state pool holds
    ``slots // dp`` (handle_max_mamba_cache in model_executor/model_runner_kv_cache_mixin.py, 0.5.9;
    ``_handle_max_mamba_cache``'s "mamba_pool.per_dp_shard" in mem_cache/kv_cache_configurator.py, 0.5.18 and
    0.5.23: the releases validation/parallel_dp_ep.py runs). A share of none is refused: the pool would hold no
    state."""
    if slots // dp < 1:
        raise PlanError(
            f"SGLang splits --max-mamba-cache-size {slots} over the {dp} DP-attention groups as "
            f"{slots} // {dp} = 0 state slots a group: no request can run; give at least {dp}"
        )
    return slots // dp


class DataParallelFit(Fit, frozen=True):
    """`fit` on SGLang with --dp-size / --ep-size: one rank's figures (every rank alike), and the whole."""

    dp: int = 1
    dp_attention: bool = False
    ep_size: int = 1
    attn_tp: int = 1

    @property
    def gpus(self) -> int:
        return self.tp if self.dp_attention else self.tp * self.dp

    @property
    def total_requests(self) -> int:
        return self.dp * self.max_running_requests

    @property
    def flags(self) -> str:
        return (
            super().flags
            + (f" --dp-size {self.dp}" if self.dp > 1 else "")
            + (" --enable-dp-attention" if self.dp_attention else "")
            + (f" --ep-size {self.ep_size}" if self.ep_size > 1 else "")
        )

    @property
    def notes(self) -> tuple[str, ...]:
        if self.dp_attention:
            how = (
                f"--enable-dp-attention: {self.dp} attention groups of {self.attn_tp} ranks on {self.tp} GPUs; "
                f"each rank keeps the KV and the recurrent state of its own group's requests, its attention and "
                f"recurrent layers split {self.attn_tp} ways, the MLP and MoE {self.tp} ways"
            )
        elif self.dp > 1:
            how = f"--dp-size {self.dp}: {self.dp} replicas of {self.tp} GPUs ({self.gpus} in all), each as shown"
        else:
            how = ""
        ep = (
            (
                f"--ep-size {self.ep_size}: each rank holds the routed experts of 1/{self.ep_size} of the experts "
                f"(the most loaded rank: rounded up)",
            )
            if self.ep_size > 1
            else ()
        )
        total = (
            (f"{self.dp} × {self.max_running_requests:,} = {self.total_requests:,} running requests in all",)
            if self.dp > 1
            else ()
        )
        return super().notes + ((how,) if how else ()) + ep + total

    def to_dict(self) -> dict:
        return {
            **super().to_dict(),
            "dp": self.dp,
            "dp_attention": self.dp_attention,
            "ep_size": self.ep_size,
            "attention_tp": self.attn_tp,
            "gpus": self.gpus,
            "total_max_running_requests": self.total_requests,
        }


def fit_data_parallel(sc: Scenario) -> DataParallelFit | Shortfall:
    """`fit` on SGLang with --dp-size (replicas, or attention groups) and --ep-size: one rank's split."""
    from hybridplan.engines.sglang.context import refusal
    from hybridplan.engines.sglang.pool import fit as pool_fit
    from hybridplan.scenario import Budget

    if sc.pp > 1:
        raise PlanError("SGLang with --pp-size and --dp-size / --ep-size together is not modelled")
    if sc.ep_size > 1 and "moe" not in sc.spec.ffn:
        raise PlanError(f"--ep-size {sc.ep_size}: {sc.spec.name} has no routed experts")
    attn = attention_tp(sc)
    water = None
    budget = sc.budget
    if sc.budget.kv_budget is None:
        water = rank_memory(sc)
        if water.cache_bytes <= 0:
            return Shortfall(
                f"SGLang {sc.sglang.release.version}",
                water,
                "the memory split between the pools (R)",
                "mem_fraction_static",
            )
        budget = Budget(kv_budget=water.cache_bytes, gpu=sc.budget.gpu, gpu_mem=sc.budget.gpu_mem)
    s = sc.sglang
    if sc.dp_attention and s.max_running_requests is not None:
        s = replace(s, max_running_requests=requests_per_group(s.max_running_requests, sc.dp, s.release))
    if sc.dp_attention and s.max_mamba_cache_size is not None:
        s = replace(s, max_mamba_cache_size=state_slots_per_group(s.max_mamba_cache_size, sc.dp))
    f = pool_fit(replace(sc, tp=attn, dp=1, dp_attention=False, ep_size=1, budget=budget, sglang=s))
    if isinstance(f, Shortfall):
        return f
    fields = {
        name: getattr(f, name)
        for name in ("split", "pool", "spec", "strategy", "admission", "ctx", "page_size", "draft")
    }
    return DataParallelFit(
        **fields,
        tp=sc.tp,
        refusal=refusal(sc),
        memory=water,
        dp=sc.dp,
        dp_attention=sc.dp_attention,
        ep_size=sc.ep_size,
        attn_tp=attn,
    )
