"""The work of one engine step on one tensor-parallel rank, per layer kind: bytes read and written, tensor-core
and fp32 FLOPs, kernels launched, and the all-reduce traffic. Pure functions, no timing (``model.py`` turns
work into time).

Every byte figure comes from what the planner already computes: the weights from ``hybridplan.weights`` (the
config's parts as vLLM shards them, scaled so that they sum to the planner's ``Weights.bytes_per_rank``), the
recurrent state and the KV from the scenario's ``Footprint`` (``hybridplan/engines/vllm/dtypes.py``). Nothing
here recounts a tensor.
"""

from __future__ import annotations

from functools import lru_cache
from math import prod

from msgspec import Struct

from hybridplan.dtypes import size_of
from hybridplan.engines.vllm.dtypes import footprint as vllm_footprint
from hybridplan.engines.vllm.dtypes import model_dtype
from hybridplan.errors import PlanError
from hybridplan.memory import Footprint
from hybridplan.scenario import Scenario
from hybridplan.spec import MLA, Attention, GatedDeltaNet, KimiDeltaAttention, Mamba1, Mamba2, ModelSpec, is_attention
from hybridplan.weights import _bytes as _part_bytes  # the one pricing rule of a part (quantization included)
from hybridplan.weights import counted_parts, rank_params, weights

#: the layer kinds a step is split into, beside the mixer and FFN kinds of hybridplan/spec.py
HEAD, NORM, SHARED = "lm_head", "norms", "shared"

#: the sampler's kind: the logits' fp32 copies, temperature, softmax and the draw, over the whole vocabulary
SAMPLING = "sampling"


def kernel_list(engine: str, kind: str) -> tuple[str, ...]:
    """The kernels one block of ``kind`` launches in a step under ``engine``, by name (hybridplan/engines/*/
    kernels.py, counted from each engine's model files); a kind neither engine names: a norm, two GEMMs and the
    activation, as a dense FFN."""
    if engine == "sglang":
        from hybridplan.engines.sglang.kernels import DECODE_KERNELS
    else:
        from hybridplan.engines.vllm.kernels import DECODE_KERNELS
    return DECODE_KERNELS.get(kind, DECODE_KERNELS["mlp"])


def sampler(engine: str) -> tuple[tuple[str, int], ...]:
    if engine == "sglang":
        from hybridplan.engines.sglang.kernels import SAMPLER_KERNELS
    else:
        from hybridplan.engines.vllm.kernels import SAMPLER_KERNELS
    return SAMPLER_KERNELS


def vocab_size(spec: ModelSpec) -> int:
    return spec.facts.vocab_size  # the text config's, else the config's (adapters.py ``config_facts``)


def sampling_work(spec: ModelSpec, engine: str, rows: int) -> Work:
    """The sampler over ``rows`` logit rows (one a request, or each verified token): each kernel of the engine's
    sampler reads and writes the vocabulary once (``sampler``'s bytes per logit), on every TP rank (the logits are
    gathered whole before sampling)."""
    per = sum(b for _, b in sampler(engine))
    return Work(SAMPLING, 0, kernels=len(sampler(engine)), logit_bytes=float(rows * vocab_size(spec) * per))


#: GDN/KDA chunk length of the chunked prefill (fla's ``chunk_gated_delta_rule``: 64 in every vLLM release)
GDN_CHUNK = 64
#: Mamba-2's chunk where the config names none (vLLM's default ``chunk_size``)
SSD_CHUNK = 256

_GROUP_KIND = {
    "mlp": "mlp",
    "moe": "moe",
    "gdn": "gdn",
    "kda": "kda",
    "linear_attention": "linear_attention",
    "conv": "short_conv",
    "shared": SHARED,
    "lm_head": HEAD,
    "norm": NORM,
}


class Work(Struct, frozen=True):
    """One layer kind's share of a step on one rank."""

    kind: str
    layers: int
    weight_bytes: float = 0.0
    kv_bytes: float = 0.0
    state_bytes: float = 0.0
    #: tensor-core FLOPs (matmuls, attention, the chunked scans' matmuls)
    flops: float = 0.0
    #: fp32 FLOPs on the ordinary cores (the recurrent update's exp, decay and multiply-adds)
    scalar_flops: float = 0.0
    kernels: int = 0
    #: tensor-core FLOPs of the chunked scans (SSD, the chunked delta rule), apart from the matmuls
    scan_flops: float = 0.0
    #: the part of ``flops`` in the routed experts' grouped GEMMs of a prefill (counted in ``flops``, not beside
    #: it), and the tokens each routed expert multiplies there on average, T·top_k/E
    routed_flops: float = 0.0
    expert_tokens: float = 0.0
    #: bytes of activations a kind reads and writes on its own (the sampler's logits)
    logit_bytes: float = 0.0

    @property
    def bytes(self) -> float:
        return self.weight_bytes + self.kv_bytes + self.state_bytes + self.logit_bytes

    def to_dict(self) -> dict:
        # bytes as whole bytes (a rank's share of a tensor can be fractional in the model: rounded here only)
        return {
            "kind": self.kind,
            "layers": self.layers,
            "weight_bytes": round(self.weight_bytes),
            "kv_bytes": round(self.kv_bytes),
            "state_bytes": round(self.state_bytes),
            "flops": self.flops,
            "scalar_flops": self.scalar_flops,
            "scan_flops": self.scan_flops,
            "kernels": self.kernels,
            "routed_flops": self.routed_flops,
            "expert_tokens": self.expert_tokens,
            "logit_bytes": round(self.logit_bytes),
        }


class Step(Struct, frozen=True):
    """A step's work: per layer kind, plus the TP all-reduces (``allreduces`` of ``allreduce_bytes`` each)."""

    phase: str  # decode or prefill
    batch: int
    ctx: int
    tokens: int
    kinds: tuple[Work, ...]
    allreduces: int = 0
    allreduce_bytes: float = 0.0
    #: the weights' dtype class for the tensor peak: bf16 or fp8 (fp8 and narrower checkpoints)
    tensor_dtype: str = "bf16"
    notes: tuple[str, ...] = ()

    def __eq__(self, other: object) -> bool:  # the notes are no part of the step's identity
        if type(other) is not type(self):
            return NotImplemented
        return self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    def _identity(self) -> tuple:
        return tuple([getattr(self, n) for n in self.__struct_fields__ if n != "notes"])

    #: the engine whose kernels and host time the step is priced with
    engine: str = "vllm"

    def total(self, attr: str) -> float:
        return sum(getattr(w, attr) for w in self.kinds)


# --- the model's static figures -------------------------------------------------------------------


class Experts(Struct, frozen=True):
    """Routed experts: ``count`` per MoE layer, ``top_k`` of them per token."""

    count: int
    top_k: int

    def touched(self, tokens: int) -> float:
        """Expected distinct experts ``tokens`` independent tokens route to: E·(1 − (1 − k/E)^B)."""
        return self.count * (1.0 - (1.0 - self.top_k / self.count) ** tokens)


def experts(spec: ModelSpec) -> Experts | None:
    e, k = spec.facts.experts, spec.facts.experts_per_token
    return Experts(e, k) if e > 1 and k else None


class RankWeights(Struct, frozen=True):
    """One rank's weight bytes and parameters per layer kind; ``routed`` the routed experts' share of
    ``moe`` (read in proportion to the experts a step touches)."""

    bytes: tuple[tuple[str, float], ...]
    params: tuple[tuple[str, float], ...]
    routed_bytes: float
    routed_params: float
    total: int
    tensor_dtype: str
    source: str


def _mixer_kind(spec: ModelSpec, group: str) -> str:
    if group == "attention":
        kinds = {m.kind for m in spec.attention}
        return kinds.pop() if len(kinds) == 1 else "attention"
    if group == "mamba":
        kinds = {m.kind for m in spec.recurrent if m.kind in ("mamba1", "mamba2")}
        return kinds.pop() if len(kinds) == 1 else "mamba2"
    return _GROUP_KIND.get(group, group)


@lru_cache(maxsize=64)
def rank_weights(spec: ModelSpec, tp: int, dtype: str) -> RankWeights:
    """The weights per layer kind on one rank: hybridplan/weights' parts priced as it prices them, scaled to
    its ``bytes_per_rank`` (exact where the checkpoint's headers were read). The embedding is read for the
    batch's rows only, unless it is tied and doubles as the LM head."""
    w = weights(spec, tp, dtype)
    # the checkpoint's scheme as hybridplan.weights prices it
    q = spec.quantization.weights_scheme() if spec.quantization is not None else None
    every = [p for p in counted_parts(spec) if p.section == "model"]
    hidden = spec.hidden_size or 1
    tied = not any(p.group == "lm_head" for p in every)
    by: dict[str, float] = {}
    params: dict[str, float] = {}
    routed_b = routed_p = 0.0
    counted = 0.0
    for p in every:
        rp = rank_params(p, tp, hidden)
        b = _part_bytes(p, rp, size_of(dtype), q)
        counted += b
        if p.group == "embedding" and not tied:
            continue
        kind = HEAD if p.group == "embedding" else _mixer_kind(spec, p.group)
        by[kind] = by.get(kind, 0.0) + b
        params[kind] = params.get(kind, 0.0) + rp
        if p.group == "moe" and p.name.startswith("experts."):
            routed_b += b
            routed_p += rp
    scale = w.bytes_per_rank / counted if counted and w.source != "config" else 1.0
    from hybridplan.engines.vllm.kernels import gemm_dtype  # the same rule in both engines (its docstring)

    tensor = gemm_dtype(spec.quantization)
    return RankWeights(
        bytes=tuple((k, v * scale) for k, v in by.items()),
        params=tuple(params.items()),
        routed_bytes=routed_b * scale,
        routed_params=routed_p,
        total=w.bytes_per_rank,
        tensor_dtype=tensor,
        source=w.source,
    )


def _decoder_blocks(spec: ModelSpec) -> int:
    """Blocks that end in a TP all-reduce: every token mixer and every FFN (Falcon-H1's parallel mixers are
    counted apart, one all-reduce too many for that family)."""
    return len(spec.mixers) + len(spec.ffn)


# --- per-kind FLOPs and bytes of the mixers ---------------------------------------------------------


def _heads(m: Attention | MLA, tp: int) -> int:
    return m.num_heads // tp


def attention_flops(m: Attention | MLA, tp: int, queries: int, keys_per_query: float) -> float:
    """QKᵀ and PV: 2 FLOPs a multiply-add, two matmuls of head_dim each (MLA in the absorbed form decode
    uses: scores over the latent plus the rope key, values over the latent)."""
    if isinstance(m, MLA):
        return 2.0 * _heads(m, tp) * (2 * m.kv_lora_rank + m.qk_rope_head_dim) * queries * keys_per_query
    return 4.0 * _heads(m, tp) * m.head_dim * queries * keys_per_query


def recurrent_update_flops(m, tp: int) -> float:
    """fp32 FLOPs of one token's recurrent update, from the state it touches (the shapes of hybridplan/spec.py):
    GDN/KDA read the state for kᵀS, decay it, add the rank-one update and read it again for qS (about 6 per
    element); Mamba-2 and Mamba-1 decay, add and contract (about 5); linear attention 4; a short conv 2 a tap."""
    shapes = m.state_shapes(tp)
    elements = prod(shapes.ssm) if shapes.ssm else 0
    if isinstance(m, (GatedDeltaNet, KimiDeltaAttention)):
        return 6.0 * elements
    if isinstance(m, (Mamba2, Mamba1)):
        return 5.0 * elements + 2.0 * prod(shapes.conv)
    if shapes.ssm is None:
        return 2.0 * prod(shapes.conv)
    return 4.0 * elements


def chunk_scan_flops(m, tp: int, tokens: int, chunk: int) -> float:
    """Tensor-core FLOPs of a chunked scan over ``tokens`` (SSD for Mamba-2, the chunked delta rule for
    GDN/KDA), per rank. Per token and head, with chunk Q, key/state width N and value/head width P: the
    intra-chunk scores (2·Q·N), scores times values (2·Q·P), the chunk's state (2·P·N) and the output from the
    carried state (2·P·N); the delta rule adds its WY transform (2·Q·N + 2·Q·P)."""
    if isinstance(m, Mamba2):
        heads, p, n = m.state_shapes(tp).ssm
        per = 2 * chunk * n + 2 * chunk * p + 4 * p * n
    elif isinstance(m, (GatedDeltaNet, KimiDeltaAttention)):
        heads, p, n = m.state_shapes(tp).ssm
        per = 4 * chunk * n + 4 * chunk * p + 4 * p * n
    else:
        return 0.0
    return float(heads * per * tokens)


def scan_scalar_flops(m, tp: int, tokens: int) -> float:
    """fp32 FLOPs of a scan that runs token by token (Mamba-1's selective scan, a short conv, lightning
    attention's decay): the recurrent update per token."""
    if isinstance(m, (Mamba2, GatedDeltaNet, KimiDeltaAttention)):
        return 0.0
    return recurrent_update_flops(m, tp) * tokens


def scan_layer_work(m, tp: int, tokens: int, chunk: int, sequences: int = 1, *, fused: bool = False) -> Work:
    """One recurrent layer's scan over ``sequences`` prompts of ``tokens`` (the projections apart): its tensor
    and fp32 FLOPs, the kernels it launches and the bytes it moves, inputs and outputs at 2 bytes an element,
    intermediates at 4.

    Mamba-2 as vLLM runs it (``mamba_chunk_scan_combined``, vllm/model_executor/layers/mamba/ops/ssd_*.py): five
    kernels — the dt cumsum, each chunk's state (reads x, B, dt), the state passing over the chunks (reads and
    writes every chunk's fp32 state), the chunk-local C·Bᵀ (reads B and C, writes Q fp32 scores a token and
    group) and the chunk scan (reads the scores, x, C and the states, writes y): x read twice, B and C twice
    each, the states four times, the scores twice. ``fused``: one kernel that reads each input once and writes
    and reads each chunk's state once (vLLM PR #27299's kernel). GDN/KDA (fla's chunked delta rule): q, k, v read
    once, the output written once, each chunk's state written and read once."""
    total = tokens * sequences
    shapes = m.state_shapes(tp)
    moved, kernels = 0.0, 1
    chunks = sequences * -(-tokens // chunk)
    if isinstance(m, Mamba2):
        heads, p, n = shapes.ssm
        groups = m.padded_groups(tp) // tp if m.padded_groups(tp) % tp == 0 else 1
        x, bc, states = heads * p * 2, groups * n * 2, chunks * heads * p * n * 4
        if fused:
            moved = total * (x + 2 * bc + heads * 4 + x) + 2 * states
        else:
            moved = total * (2 * x + 4 * bc + 4 * heads * 4 + 2 * groups * chunk * 4 + x) + 4 * states
            kernels = 5
    elif isinstance(m, (GatedDeltaNet, KimiDeltaAttention)):
        heads, p, n = shapes.ssm
        moved = total * (shapes.conv[0] * 2 + heads * p * 2) + 2 * chunks * heads * p * n * 4
    return Work(
        m.kind,
        1,
        state_bytes=moved,
        scan_flops=chunk_scan_flops(m, tp, total, chunk),
        scalar_flops=scan_scalar_flops(m, tp, total),
        kernels=kernels,
    )


def _chunk(spec: ModelSpec, m) -> int:
    return (spec.chunk_size or SSD_CHUNK) if isinstance(m, Mamba2) else GDN_CHUNK


# --- steps ----------------------------------------------------------------------------------------


def _ffn_active(rw: RankWeights, ex: Experts | None, kind: str) -> float:
    """Parameters one token multiplies through in ``kind`` on one rank: the routed experts at top_k of E."""
    p = dict(rw.params).get(kind, 0.0)
    if kind == "moe" and ex is not None:
        p -= rw.routed_params * (1.0 - ex.top_k / ex.count)
    return p


def _weights_read(rw: RankWeights, ex: Experts | None, kind: str, tokens: int) -> float:
    b = dict(rw.bytes).get(kind, 0.0)
    if kind == "moe" and ex is not None:
        b -= rw.routed_bytes * (1.0 - ex.touched(tokens) / ex.count)
    return b


def _activation_bytes(spec: ModelSpec, dtype: str) -> int:
    return (spec.hidden_size or 0) * size_of(dtype)


def footprint_of(sc: Scenario) -> Footprint:
    return vllm_footprint(sc)


def decode_step(sc: Scenario, batch: int, ctx: int) -> Step:
    """One decode step: ``batch`` sequences each at ``ctx`` tokens of context, each emitting one token (plus
    the scenario's speculative tokens, verified in the same step)."""
    if batch < 1:
        raise PlanError(f"the batch must be a positive integer, got {batch}")
    spec, tp = sc.spec, sc.tp
    fp = footprint_of(sc)
    dtype = model_dtype(spec, sc.dtypes.dtype)
    rw = rank_weights(spec, tp, dtype)
    ex = experts(spec)
    q = 1 + sc.spec_tokens  # tokens each sequence pushes through the model this step
    tokens = batch * q
    counts = spec.layer_counts
    out: list[Work] = []
    mixers = {m: spec.mixers.count(m) for m in dict.fromkeys(spec.mixers)}
    kinds = list(dict.fromkeys([m.kind for m in spec.mixers] + list(spec.ffn) + [k for k, _ in rw.bytes]))
    for kind in kinds:
        layers = counts.get(kind, 0)
        wb = _weights_read(rw, ex, kind, tokens)
        flops = 2.0 * _ffn_active(rw, ex, kind) * tokens
        kv = st = scalar = 0.0
        for g in fp.kv:
            if g.kind == kind:
                kv += batch * g.bytes_at(ctx) + tokens * g.bytes_per_token  # read the context, write the new
        for sg in fp.state:
            if sg.kind == kind:
                st += 2.0 * batch * sg.bytes  # read and write every state (conv window included), every step
        for m, n in mixers.items():
            if m.kind != kind:
                continue
            if is_attention(m):
                keys = min(ctx, m.window) if m.window else ctx
                flops += n * attention_flops(m, tp, tokens, keys)
            else:
                scalar += n * recurrent_update_flops(m, tp) * tokens
        launches = len(kernel_list(sc.engine, kind)) * (layers or 1) if kind not in (NORM,) else 0
        out.append(Work(kind, layers, wb, kv, st, flops, scalar, launches))
    if vocab_size(spec):
        out.append(sampling_work(spec, sc.engine, tokens))
    return Step(
        "decode",
        batch,
        ctx,
        tokens,
        tuple(out),
        allreduces=_decoder_blocks(spec) if tp > 1 else 0,
        allreduce_bytes=float(tokens * _activation_bytes(spec, dtype)),
        tensor_dtype=rw.tensor_dtype,
        engine=_engine(sc),
    )


def prefill_step(sc: Scenario, tokens: int, sequences: int = 1) -> Step:
    """Prefill of ``sequences`` prompts of ``tokens`` tokens each, from an empty context, in one pass."""
    if tokens < 1 or sequences < 1:
        raise PlanError(f"the prompt must be a positive number of tokens, got {tokens}")
    spec, tp = sc.spec, sc.tp
    fp = footprint_of(sc)
    dtype = model_dtype(spec, sc.dtypes.dtype)
    rw = rank_weights(spec, tp, dtype)
    ex = experts(spec)
    total = tokens * sequences
    counts = spec.layer_counts
    mixers = {m: spec.mixers.count(m) for m in dict.fromkeys(spec.mixers)}
    out: list[Work] = []
    kinds = list(dict.fromkeys([m.kind for m in spec.mixers] + list(spec.ffn) + [k for k, _ in rw.bytes]))
    for kind in kinds:
        layers = counts.get(kind, 0)
        wb = _weights_read(rw, ex, kind, total)
        # the LM head runs on each prompt's last token only
        flops = 2.0 * _ffn_active(rw, ex, kind) * (sequences if kind == HEAD else total)
        kv = st = scalar = scan_flops = 0.0
        for g in fp.kv:
            if g.kind == kind:
                kv += sequences * g.bytes_at(tokens)  # written once, read from on-chip tiles
        for sg in fp.state:
            if sg.kind == kind:
                st += sequences * sg.bytes  # the final state written
        for m, n in mixers.items():
            if m.kind != kind:
                continue
            if is_attention(m):
                w = m.window
                keys = (min(tokens, w) if w else tokens) / (1 if w and w < tokens else 2)  # causal: half
                if isinstance(m, MLA):  # prefill runs MLA unabsorbed, as heads of qk 192 / v 128
                    flops += n * 2.0 * _heads(m, tp) * (192 + 128) * total * keys
                else:
                    flops += n * attention_flops(m, tp, total, keys)
            else:
                scan = scan_layer_work(m, tp, tokens, _chunk(spec, m), sequences)
                scan_flops += n * scan.scan_flops
                scalar += n * scan.scalar_flops
                st += n * scan.state_bytes
        launches = len(kernel_list(sc.engine, kind)) * (layers or 1) if kind != NORM else 0
        routed = m_tokens = 0.0
        if kind == "moe" and ex is not None:
            # each token goes through top_k of the E experts: the routed share of the FLOPs above, and the
            # tokens one expert's GEMM gets on average
            routed = 2.0 * rw.routed_params * (ex.top_k / ex.count) * total
            m_tokens = total * ex.top_k / ex.count
        out.append(Work(kind, layers, wb, kv, st, flops, scalar, launches, scan_flops, routed, m_tokens))
    if vocab_size(spec):
        out.append(sampling_work(spec, sc.engine, sequences))
    return Step(
        "prefill",
        sequences,
        tokens,
        total,
        tuple(out),
        allreduces=_decoder_blocks(spec) if tp > 1 else 0,
        allreduce_bytes=float(total * _activation_bytes(spec, dtype)),
        tensor_dtype=rw.tensor_dtype,
        engine=_engine(sc),
    )


def _engine(sc: Scenario) -> str:
    return "sglang" if sc.engine == "sglang" else "vllm"


def mixed_step(dec: Step, pf: Step, tokens: int) -> Step:
    """A decode step of ``dec.batch`` requests carrying ``tokens`` prompt tokens of ``pf`` (one prompt's whole
    prefill) in the same forward pass, as vLLM's scheduler builds it: each layer's weights are read once for all
    the step's tokens (the larger of the two steps' reads: the prefill's experts touched cover the decode's), the
    KV, state, FLOPs and scans of the prompt's share (``tokens`` of its ``pf.tokens``) add to the decode's, the
    kernels are the decode step's (the same GEMMs and attention over a longer token list), the sampler the
    decode's rows (a prompt samples only at its last chunk), and the all-reduces carry both steps' rows."""
    share = tokens / pf.tokens if pf.tokens else 0.0
    by = {w.kind: w for w in pf.kinds}
    kinds = []
    for w in dec.kinds:
        p = by.get(w.kind)
        if p is None or w.kind == SAMPLING:
            kinds.append(w)
            continue
        kinds.append(
            Work(
                w.kind,
                w.layers,
                weight_bytes=max(w.weight_bytes, p.weight_bytes),
                kv_bytes=w.kv_bytes + share * p.kv_bytes,
                state_bytes=w.state_bytes + share * p.state_bytes,
                flops=w.flops + share * p.flops,
                scalar_flops=w.scalar_flops + share * p.scalar_flops,
                kernels=w.kernels,
                scan_flops=w.scan_flops + share * p.scan_flops,
                routed_flops=share * p.routed_flops,
                expert_tokens=share * p.expert_tokens,
                logit_bytes=w.logit_bytes,
            )
        )
    return Step(
        "mixed",
        dec.batch,
        dec.ctx,
        dec.tokens + tokens,
        tuple(kinds),
        allreduces=dec.allreduces,
        allreduce_bytes=dec.allreduce_bytes + share * pf.allreduce_bytes,
        tensor_dtype=dec.tensor_dtype,
        notes=dec.notes,
        engine=dec.engine,
    )
