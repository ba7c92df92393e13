"""How many blocks a budget buys, how many requests they hold, and whether a start succeeds.

Groups and blocks: vllm/v1/core/kv_cache_utils.py (≤ 0.32) and kv_cache_planning.py (0.33). The budget:
vllm/v1/worker/gpu_worker.py ``determine_available_memory``. The start-up check: vllm/config/compilation.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from msgspec import Struct
from msgspec.structs import replace

from hybridplan.engines.common import Shortfall, Waterfall, cdiv
from hybridplan.engines.vllm import defaults
from hybridplan.engines.vllm.blocks import (
    KERNEL_BLOCK,
    Layout,
    attention_pages,
    layout,
    recurrent_pages,
)
from hybridplan.engines.vllm.context import refusal
from hybridplan.engines.vllm.defaults import batched_tokens
from hybridplan.engines.vllm.dtypes import footprint
from hybridplan.engines.vllm.releases import NEWEST, Release
from hybridplan.errors import PlanError, Refused
from hybridplan.memory import Footprint

#: the `vllm serve` token budget of an H100-class GPU (defaults.py), for a Capacity built without a scenario
DEFAULT_SERVE_TOKENS = defaults.TIERS["serve"]["large"][0]

if TYPE_CHECKING:
    from hybridplan.scenario import Scenario
    from hybridplan.spec import AttentionMixer

GiB = 1 << 30


class CacheGroup(Struct, frozen=True):
    """A KV cache group: ``layers`` layers of one kind; every block holds one page of each."""

    kind: str
    layers: int
    window: int | None
    recurrent: bool
    #: tokens per block where they differ from the layout's: a draft's attention layers whose page vLLM scaled
    #: to the common page (``unify_kv_cache_spec_page_size``)
    block: int | None = None
    #: layers of the speculative draft (or the target's MTP layers) only
    draft: bool = False


class Bucket(Struct, frozen=True):
    """Layers of one KV cache spec (vLLM groups layers by spec equality): ``block`` as for ``CacheGroup``."""

    kind: str
    layers: int
    window: int | None
    recurrent: bool
    block: int | None = None
    draft: bool = False


#: from this release ``unify_kv_cache_spec_page_size`` pads an attention page that does not divide the common
#: page (where the backend indexes KV by the block stride, as FlashAttention does); before, vLLM refuses
PAD_ATTENTION_PAGE = "0.24.0"
#: from this release it pads a Mamba page to a larger page (a draft's); before, that fails (a Mamba page does not
#: grow with its block): 0.25.1 has no such branch, 0.26.0 has
PAD_MAMBA_PAGE = "0.26.0"
#: from this release the start-up check counts one request over the KV cache groups, padding layers included
#: (vllm/v1/core/kv_cache_utils.py ``_max_memory_usage_bytes_from_groups``, absent from the 0.13.0 wheel, called by
#: ``get_kv_cache_configs`` in 0.14.0); before, over the layers (``check_enough_kv_cache_memory``)
PADDED_REQUEST_FROM = "0.14.0"


def _attention_key(m: AttentionMixer, tp: int) -> tuple:
    """What makes two attention layers one vLLM spec (``AttentionSpec`` equality: KV heads on the rank, head
    size, window, and the shared dtype and block)."""
    from hybridplan.spec import MLA, kv_heads_per_rank

    if isinstance(m, MLA):
        return ("mla", m.kv_lora_rank + m.qk_rope_head_dim)
    return (m.kind, kv_heads_per_rank(m.num_heads, m.num_kv_heads, tp), m.head_dim, m.window)


def _keys(mixers: tuple, tp: int) -> list[tuple]:
    from hybridplan.spec import ATTENTION_KINDS

    return [_attention_key(m, tp) for m in dict.fromkeys(mixers) if m.kind in ATTENTION_KINDS]


def buckets(sc: Scenario, lay: Layout) -> tuple[tuple[Bucket, ...], int]:
    """The model's layers bucketed by spec, the draft's (``sc.speculative.layers``) joined to the target's
    buckets where their spec is equal, and the common page in bytes: the largest page (vllm/v1/core/
    kv_cache_utils.py ``unify_kv_cache_spec_page_size``). An attention page smaller than it grows its block by
    the ratio where it divides it, else (from 0.24.0) is padded to it, else vLLM refuses; a Mamba page smaller
    than a draft's is padded from 0.26.0, and vLLM fails before."""
    from hybridplan.engines.vllm.dtypes import draft_footprint
    from hybridplan.spec import ATTENTION_KINDS

    fp, rel = footprint(sc), sc.vllm.release
    kv = [[k, Bucket(g.kind, g.count, g.window, False)] for k, g in zip(_keys(sc.spec.mixers, sc.tp), fp.kv)]
    state = [
        [("state", g.kind, g.conv_shape, g.ssm_shape, g.conv_dtype, g.ssm_dtype), Bucket(g.kind, g.count, None, True)]
        for g in fp.state
    ]
    # in the order of the layers' first appearance, as vLLM fills its buckets (and prints their padding lines)
    kinds = [m.kind in ATTENTION_KINDS for m in dict.fromkeys(sc.spec.mixers)]
    firsts = list(dict.fromkeys(_keys(sc.spec.mixers, sc.tp)))
    out: list[list] = []
    for attn in kinds:
        if attn and kv:
            key = firsts.pop(0)
            out += [b for b in kv if b[0] == key]
            kv = [b for b in kv if b[0] != key]
        elif not attn and state:
            out.append(state.pop(0))
    out += kv + state
    page = lay.page_bytes
    draft = draft_footprint(sc)
    if draft is None:
        return tuple(b for _, b in out), page
    block = lay.block_size or sc.vllm.block_size or KERNEL_BLOCK
    # each attention bucket's page at the layout's block: the target's are the layout's page
    own_pages = {i: page for i, (_, b) in enumerate(out) if not b.recurrent}
    for key, g in zip(_keys(sc.speculative.layers, sc.tp), draft.kv):
        same = next((b for b in out if b[0] == key), None)
        if same is not None:
            same[1] = replace(same[1], layers=same[1].layers + g.count)
            continue
        out.append([key, Bucket(g.kind, g.count, g.window, False, None, True)])
        own_pages[len(out) - 1] = block * g.bytes_per_token_per_layer
    for s in draft.state:
        key = ("state", s.kind, s.conv_shape, s.ssm_shape, s.conv_dtype, s.ssm_dtype)
        same = next((b for b in out if b[0] == key), None)
        if same is None:
            raise PlanError(f"the draft's {s.kind} layers keep a state unlike the target's: not modelled")
        same[1] = replace(same[1], layers=same[1].layers + s.count)
    common = max([page, *own_pages.values()])
    if common > page and fp.state and rel.before(PAD_MAMBA_PAGE):
        raise Refused(
            f"vLLM {rel.version} cannot unify the KV pages: the draft's attention page ({common:,} B at "
            f"{block} tokens) is larger than the Mamba page ({page:,} B), which grows with its block no "
            f"more (unify_kv_cache_spec_page_size, vllm/v1/core/kv_cache_utils.py; vLLM {PAD_MAMBA_PAGE} "
            "pads the Mamba page to it)"
        )
    for i, own in own_pages.items():
        if own == common:
            continue
        if common % own == 0:
            out[i][1] = replace(out[i][1], block=block * (common // own))
        elif not rel.at_least(PAD_ATTENTION_PAGE):
            whose = "the draft's" if out[i][1].draft else "the target's"
            raise Refused(
                f'vLLM {rel.version} refuses {whose} {out[i][1].kind} layers: "The page size of the '
                'layer is not divisible by the maximum page size. Cannot unify by adjusting block_size." '
                f"({own:,} B against {common:,} B; unify_kv_cache_spec_page_size, "
                "vllm/v1/core/kv_cache_utils.py)"
            )
        # else the page is padded to the common page, its block kept
    return tuple(b for _, b in out), common


def _threshold(rel: Release) -> float | None:
    """The group size is the smallest bucket, or the largest when that is below this many times the smallest:
    never up to 0.11.2, 1.25 from 0.12.0, 1.5 from 0.18.0."""
    if rel.before("0.12.0"):
        return None
    return 1.5 if rel.at_least("0.18.0") else 1.25


def cache_groups(
    fp: Footprint, rel: Release = NEWEST, given: tuple[Bucket, ...] | None = None
) -> tuple[int, tuple[CacheGroup, ...]]:
    """Bucket layers by identical spec (``given``, else one bucket per footprint group); group size = the
    smallest bucket, or the largest when that is close enough (``_threshold``); each bucket of n layers makes
    cdiv(n, size) groups (layers assigned strided; contiguous in 0.10, which counts the same)."""
    if given is None:
        given = tuple(Bucket(g.kind, g.count, g.window, False) for g in fp.kv)
        given += tuple(Bucket(g.kind, g.count, None, True) for g in fp.state)
    sizes = [b.layers for b in given]
    size = min(sizes)
    threshold = _threshold(rel)
    if threshold is not None and max(sizes) < threshold * size:
        size = max(sizes)
    groups: list[CacheGroup] = []
    for b in given:
        k = cdiv(b.layers, size)
        for i in range(k):
            groups.append(CacheGroup(b.kind, len(range(i, b.layers, k)), b.window, b.recurrent, b.block, b.draft))
    return size, tuple(groups)


class Capacity(Struct, frozen=True):
    layout: Layout
    group_size: int
    groups: tuple[CacheGroup, ...]
    pages_per_request: tuple[int, ...]
    kv_budget: int
    max_len: int
    rel: Release
    #: ``--enforce-eager``: no CUDA graphs
    eager: bool = False
    #: ``--max-num-batched-tokens``: given, else the default for the GPU and release (defaults.py)
    batched_tokens: int = DEFAULT_SERVE_TOKENS
    #: ``--block-size`` as given, else 16: the cache block of an attention-free model
    cache_block: int = KERNEL_BLOCK
    #: the page every layer takes once unified, where a draft's is larger than the layout's
    common_page: int | None = None

    @property
    def page_bytes(self) -> int:
        return self.common_page or self.layout.page_bytes

    @property
    def bytes_per_block(self) -> int:
        return self.group_size * self.page_bytes

    def group_block(self, g: CacheGroup) -> int:
        """A group's tokens per block: its own where vLLM grew it, else the layout's (max_len where none)."""
        return g.block or self.layout.block_size or self.max_len

    @property
    def num_blocks(self) -> int:
        return self.kv_budget // self.bytes_per_block

    @property
    def blocks_per_request(self) -> int:
        return sum(self.pages_per_request)

    @property
    def max_concurrency(self) -> float:
        return self.num_blocks / self.blocks_per_request

    @property
    def kv_tokens(self) -> int:
        """The "GPU KV cache size" figure (vllm/v1/core/kv_cache_utils.py): from 0.20.1 int(concurrency ·
        max_len); up to 0.20.0 num_blocks // groups · the smallest group block size, where a Mamba group's
        block is max_len in mode none (the attention block otherwise), and 0.10's single-group path (a model
        of Mamba layers only) multiplies by the cache block size (``--block-size``, 16 by default)."""
        if self.rel.tokens_from_concurrency:
            return int(self.max_concurrency * self.max_len)
        if len(self.groups) == 1 and self.rel.before("0.11.0"):
            return self.num_blocks * (self.layout.block_size or self.cache_block)
        mamba_block = self.max_len if self.layout.mode == "none" else (self.layout.block_size or self.max_len)
        blocks = [mamba_block if g.recurrent else self.group_block(g) for g in self.groups]
        return self.num_blocks // len(self.groups) * min(blocks)

    @property
    def mamba_blocks(self) -> int | None:
        """The blocks the Mamba layers draw on (the whole shared pool), where the model has Mamba layers."""
        return self.num_blocks if any(g.recurrent for g in self.groups) else None

    @property
    def max_num_seqs_limit(self) -> int | None:
        """The most max_num_seqs that starts: num_blocks with Mamba layers and full decode CUDA graphs, from
        0.20.0 (vllm/config/compilation.py); no limit before (0.18–0.19 cap the graph sizes instead), nor with
        --enforce-eager."""
        return self.mamba_blocks if self.rel.max_num_seqs_check == "refuse" and not self.eager else None

    @property
    def padding_layers(self) -> tuple[tuple[int, float], ...]:
        """(layers added, % of the bucket) per bucket whose layers do not fill their groups."""
        out = []

        def bucket(g: CacheGroup) -> tuple:
            return (g.kind, g.window, g.recurrent, g.block, g.draft)

        for key in dict.fromkeys(bucket(g) for g in self.groups):
            n = sum(g.layers for g in self.groups if bucket(g) == key)
            pad = self.group_size - n % self.group_size
            if pad != self.group_size:
                out.append((pad, 100 * pad / n))
        return tuple(out)

    @property
    def logs(self) -> tuple[str, ...]:
        pads = tuple(
            f"Add {p} padding layers, may waste at most {pct:.2f}% KV cache memory" for p, pct in self.padding_layers
        )
        size = f"GPU KV cache size: {self.kv_tokens:,} tokens"
        conc = f"Maximum concurrency for {self.max_len:,} tokens per request: {self.max_concurrency:.2f}x"
        return pads + ((f"{size}, {conc}",) if self.rel.one_line_capacity_log else (size, conc))

    @property
    def request_bytes(self) -> int:
        """What one request of the context takes, as the start-up check counts it (vllm/v1/core/kv_cache_utils.py;
        kv_cache_planning.py from 0.33.0): up to 0.13.0 each layer's ``max_memory_usage_bytes`` summed
        (``check_enough_kv_cache_memory``); from 0.14.0 over the groups (``_max_memory_usage_bytes_from_groups``:
        the group size × the page × every group's pages, so a group's padding layers count too)."""
        if self.rel.at_least(PADDED_REQUEST_FROM):
            return self.bytes_per_block * self.blocks_per_request
        return sum(g.layers * p for g, p in zip(self.groups, self.pages_per_request)) * self.page_bytes

    @property
    def block_problem(self) -> str | None:
        """0.17.0–0.26: align mode refuses a block larger than ``--max-num-batched-tokens`` (vllm/config/vllm.py:
        in ``__post_init__`` in 0.17, in ``validate_block_size``, called by the engine core, from 0.18)."""
        block = self.layout.block_size
        if (
            self.layout.mode == "align"
            and block
            and block > self.batched_tokens
            and self.rel.at_least("0.17.0")
            and self.rel.before("0.27.0")
        ):
            return (
                f"In Mamba cache align mode, block_size ({block}) must be <= max_num_batched_tokens "
                f"({self.batched_tokens})."
            )
        return None

    @property
    def memory_problem(self) -> str | None:
        """vLLM's refusal when one request of max_model_len needs more than the budget (check_enough_kv_cache_memory:
        vllm/v1/core/kv_cache_utils.py, in kv_cache_planning.py from 0.33.0), in its words; None when it fits."""
        if self.request_bytes <= self.kv_budget:
            return None
        whose = seq_len_owner(self.rel)
        return (
            f"To serve at least one request with the {whose} max seq len ({self.max_len}), "
            f"({_gib(self.request_bytes, self.rel)} GiB KV cache is needed, which is larger than the "
            f"available KV cache memory ({_gib(self.kv_budget, self.rel)} GiB)."
        )

    def problem(self, max_num_seqs: int) -> str | None:
        """Why vLLM would not start with this many sequences, in its own words; None when it starts."""
        if self.block_problem:
            return self.block_problem
        if self.memory_problem:
            return self.memory_problem
        if self.max_concurrency < 1:
            return (
                f"one {self.max_len:,}-token request needs {self.blocks_per_request} blocks, only {self.num_blocks} fit"
            )
        lim = self.max_num_seqs_limit
        if lim is not None and max_num_seqs > lim:
            return (
                f"max_num_seqs ({max_num_seqs}) exceeds available Mamba cache blocks ({lim}). Each decode "
                "sequence requires one Mamba cache block, so CUDA graph capture cannot proceed. Please lower "
                f"max_num_seqs to at most {lim} or increase gpu_memory_utilization."
            )
        return None


def capacity(sc: Scenario, mode: str, kv_budget: int) -> Capacity:
    """Blocks, concurrency and the token figure of ``kv_budget`` bytes in ``mode``."""
    if kv_budget <= 0:
        raise PlanError(f"the KV budget must be positive, got {kv_budget} B")
    lay = layout(sc, mode)
    given, common = buckets(sc, lay)
    size, groups = cache_groups(footprint(sc), sc.vllm.release, given)
    pages = tuple(
        recurrent_pages(sc, g.kind, mode, lay.block_size)
        if g.recurrent
        else attention_pages(sc, g.window, g.block or lay.block_size)
        for g in groups
    )
    return Capacity(
        lay,
        size,
        groups,
        pages,
        kv_budget,
        sc.ctx,
        sc.vllm.release,
        sc.vllm.enforce_eager,
        batched_tokens(sc),
        sc.vllm.block_size or KERNEL_BLOCK,
        None if common == lay.page_bytes else common,
    )


def max_num_seqs(sc: Scenario) -> int:
    """``--max-num-seqs`` as given, else its default for the GPU and release (defaults.py)."""
    return defaults.max_num_seqs(sc)


def kv_budget(sc: Scenario) -> int:
    """ "Available KV cache memory" on one rank: given, or what the memory waterfall leaves (``memory``)."""
    if sc.budget.kv_budget is not None:
        return sc.budget.kv_budget
    from hybridplan.engines.vllm.memory import memory

    left = memory(sc).cache_bytes
    if left <= 0:
        raise PlanError("nothing is left for the KV cache after the weights and the engine's own memory")
    return left


def seq_len_owner(rel: Release) -> str:
    """vLLM's own spelling in its not-enough-KV-memory error: "models's" up to 0.21.0, "model's" from 0.22.0
    (vllm/v1/core/kv_cache_utils.py, read in each wheel)."""
    return "model's" if rel.at_least("0.22.0") else "models's"


def _gib(n: int, rel: Release) -> str:
    """GiB as vLLM prints them: ``round(b / 2**30, 2)`` from 0.14.0 (format_gib), ``%.2f`` before."""
    return f"{round(n / GiB, 2)}" if rel.rounds_available_memory else f"{n / GiB:.2f}"


def available_kv_memory_log(budget: int, rel: Release = NEWEST) -> str:
    """vllm/v1/worker/gpu_worker.py: ``Available KV cache memory: … GiB``."""
    return f"Available KV cache memory: {_gib(budget, rel)} GiB"


class ModeFit(Struct, frozen=True):
    """One mode's capacity at the budget, and whether ``max_num_seqs`` sequences start."""

    capacity: Capacity
    max_num_seqs: int
    max_num_seqs_given: bool

    @property
    def largest_max_num_seqs(self) -> int | None:
        return self.capacity.max_num_seqs_limit

    @property
    def problem(self) -> str | None:
        return self.capacity.problem(self.max_num_seqs)

    @property
    def starts(self) -> bool:
        return self.problem is None

    def to_dict(self) -> dict:
        c = self.capacity
        return {
            "block_size": c.layout.block_size,
            "page_bytes": c.page_bytes,
            "group_size": c.group_size,
            "groups": len(c.groups),
            "bytes_per_block": c.bytes_per_block,
            "num_blocks": c.num_blocks,
            "blocks_per_request": c.blocks_per_request,
            "max_concurrency": c.max_concurrency,
            "kv_tokens": c.kv_tokens,
            "max_num_seqs": self.max_num_seqs,
            "largest_max_num_seqs": self.largest_max_num_seqs,
            "starts": self.starts,
            "problem": self.problem,
            "logs": list(c.layout.logs) + list(c.logs),
        }


class Fit(Struct, frozen=True):
    """`fit` on vLLM: the budget, and per mode what it holds; the verdict is the mode the start runs in."""

    rel: Release
    budget: int
    default_mode: str
    modes: dict[str, ModeFit]
    ctx: int
    tp: int
    #: vLLM's refusal of the context as --max-model-len, if it refuses it
    refusal: str | None = None
    notes: tuple[str, ...] = ()
    #: the GPU's memory down to the budget, where the budget was not given
    memory: Waterfall | None = None

    @property
    def chosen(self) -> ModeFit:
        return self.modes[self.default_mode]

    @property
    def starts(self) -> bool:
        return self.refusal is None and self.chosen.starts

    @property
    def problem(self) -> str | None:
        if self.refusal is not None:
            return f"vLLM: {self.refusal}"
        p = self.chosen.problem
        return None if p is None else f"vLLM ({self.default_mode}): {p}"

    @property
    def flags(self) -> str:
        f = self.chosen
        n = f.max_num_seqs if f.starts else (f.largest_max_num_seqs or 0)
        return f"--max-model-len {self.ctx} --max-num-seqs {max(n, 1)}" + (
            f" --tensor-parallel-size {self.tp}" if self.tp > 1 else ""
        )

    @property
    def logs(self) -> tuple[str, ...]:
        """The memory lines vLLM prints before the cache lines."""
        # the drafter loads inside the same measurement (hybridplan/engines/vllm/memory.py ``drafter``)
        drafter = self.memory.term("drafter weights") if self.memory else 0
        weights = (self.memory.term("weights") + drafter) if self.memory else 0
        loading = (("Loading drafter model...",) if drafter else ()) + (
            (f"Model loading took {_gib(weights, self.rel)} GiB memory",) if weights else ()
        )
        return loading + (available_kv_memory_log(self.budget, self.rel),)

    def to_dict(self) -> dict:
        return {
            "version": self.rel.version,
            "default_mode": self.default_mode,
            "kv_budget_bytes": self.budget,
            "available_kv_cache_memory_log": available_kv_memory_log(self.budget, self.rel),
            "memory": self.memory.to_dict() if self.memory else None,
            "max_model_len_refused": self.refusal,
            "modes": {m: f.to_dict() for m, f in self.modes.items()},
        }


def fit(sc: Scenario) -> Fit | Shortfall:
    """`fit` on vLLM: the budget, and what it holds in every mode."""
    from hybridplan.engines.vllm.memory import CACHE_LABEL, FACTOR_LABEL, memory

    rel = sc.vllm.release
    water = None if sc.budget.kv_budget is not None else memory(sc)
    if water is not None and water.cache_bytes <= 0:
        return Shortfall(f"vLLM {rel.version}", water, CACHE_LABEL, FACTOR_LABEL)
    budget = water.cache_bytes if water else sc.budget.kv_budget
    n = max_num_seqs(sc)
    modes = rel.modes_for(sc.spec, sc.vllm.mode)
    fits = {mode: ModeFit(capacity(sc, mode, budget), n, sc.vllm.max_num_seqs is not None) for mode in modes}
    chosen = modes[0] if sc.vllm.mode else rel.default_mode(sc.spec, sc.spec_tokens)
    notes = list(rel.caveats(sc.spec))
    if water is not None and sc.budget.overhead is None:
        from hybridplan.engines.vllm.memory import encoder_note

        notes += filter(None, [encoder_note(rel, sc.spec.facts.multimodal)])
    notes += filter(None, [defaults.note(sc), defaults.gdn_note(sc)])
    blocks = fits[chosen].capacity.mamba_blocks
    if rel.max_num_seqs_check == "cap" and blocks is not None and n > blocks and not sc.vllm.enforce_eager:
        notes.append(
            f"vLLM {rel.version} starts, but caps its CUDA-graph capture sizes at the {blocks} Mamba cache "
            f"blocks: batches above {blocks} sequences run without graphs (vllm/config/compilation.py)"
        )
    return Fit(rel, budget, chosen, fits, sc.ctx, sc.tp, refusal(sc), tuple(notes), water)
