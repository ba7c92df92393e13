"""A tiny copy of a model for ``--interpret``: same layer kinds in the same order, same dtypes and conv
windows, but at most two layers of each distinct mixer and a handful of heads, so that every kernel launch
is a few programs under the Triton CPU interpreter (about 8 ms each).

The planner then sizes the *shrunken* spec, and the profile checks its allocation against that prediction
exactly, which exercises the same code path as a full-size run on a GPU.
"""

from __future__ import annotations

from msgspec.structs import replace

from hybridplan.errors import PlanError
from hybridplan.spec import (
    MLA,
    Attention,
    GatedDeltaNet,
    KimiDeltaAttention,
    LinearAttention,
    Mamba1,
    Mamba2,
    ModelSpec,
    ShortConv,
)

#: layers of each distinct mixer kept in the shrunken spec
LAYERS_PER_MIXER = 2
#: chunk size of the prefill scan in the shrunken spec (one tl.dot tile)
CHUNK = 16
#: sizes an --interpret run uses unless told otherwise
SLOTS, CTX, TOKENS = 4, 64, 32

_HEADS, _HEAD_DIM, _STATE = 4, 8, 8


def _groups(n_groups: int) -> int:
    return 1 if n_groups == 1 else 2


def shrink_mixer(m):
    """The same mixer at toy size; conv windows (``conv_kernel``, ``l_cache``) and attention windows kept."""
    if isinstance(m, Mamba2):
        return Mamba2(
            num_heads=_HEADS,
            head_dim=_HEAD_DIM,
            state_size=_STATE,
            n_groups=_groups(m.n_groups),
            conv_kernel=m.conv_kernel,
            intermediate=_HEADS * _HEAD_DIM,
        )
    if isinstance(m, Mamba1):
        return Mamba1(intermediate=16, state_size=_STATE, conv_kernel=m.conv_kernel)
    if isinstance(m, GatedDeltaNet):
        ratio = max(1, m.num_v_heads // max(1, m.num_k_heads))
        return GatedDeltaNet(
            num_k_heads=2,
            num_v_heads=2 * min(ratio, 2),
            head_k_dim=_HEAD_DIM,
            head_v_dim=_HEAD_DIM,
            conv_kernel=m.conv_kernel,
        )
    if isinstance(m, KimiDeltaAttention):
        return KimiDeltaAttention(num_heads=2, head_dim=_HEAD_DIM, conv_kernel=m.conv_kernel)
    if isinstance(m, ShortConv):
        return ShortConv(dim=16, l_cache=m.l_cache)
    if isinstance(m, LinearAttention):
        return LinearAttention(num_heads=2, head_dim=_HEAD_DIM)
    if isinstance(m, Attention):
        kv = _HEADS if m.num_kv_heads >= m.num_heads else 2
        return Attention(
            num_heads=_HEADS,
            num_kv_heads=kv,
            head_dim=_HEAD_DIM,
            window=None if m.window is None else min(m.window, CTX // 2),
        )
    if isinstance(m, MLA):
        return MLA(num_heads=_HEADS, kv_lora_rank=16, qk_rope_head_dim=_HEAD_DIM)
    raise PlanError(f"--interpret cannot shrink a {getattr(m, 'kind', type(m).__name__)} layer")


def shrink_spec(spec: ModelSpec, layers_per_mixer: int = LAYERS_PER_MIXER) -> ModelSpec:
    """``spec`` with its first ``layers_per_mixer`` layers of each distinct mixer, in their original order,
    each shrunk by ``shrink_mixer``; chunk size ``CHUNK``; name suffixed ``-tiny``."""
    seen: dict[object, int] = {}
    kept = []
    for m in spec.mixers:
        if seen.get(m, 0) < layers_per_mixer:
            seen[m] = seen.get(m, 0) + 1
            kept.append(m)
    small = {m: shrink_mixer(m) for m in seen}
    ffn_seen: dict[str, int] = {}
    ffn = []
    for kind in spec.ffn:
        if ffn_seen.get(kind, 0) < layers_per_mixer:
            ffn_seen[kind] = ffn_seen.get(kind, 0) + 1
            ffn.append(kind)
    return replace(
        spec,
        name=f"{spec.name}-tiny",
        mixers=tuple(small[m] for m in kept),
        ffn=tuple(ffn),
        chunk_size=CHUNK,
        aliases=(),
        max_position_embeddings=CTX,
        notes=(),
    )
