"""Triton kernels for the recurrent layers of hybrid models, each beside its plain-torch reference.

Importing this package needs torch and triton (the ``gpu`` extra); the planner never imports it. The names
below load on first use, so ``hybridplan.kernels.bench`` (pure arithmetic) needs neither.

Decode:   ``selective_state_update`` (Mamba-2), ``mamba1_state_update`` (Mamba-1),
          ``gated_delta_rule_update`` (Gated DeltaNet), ``causal_conv1d_update``
Prefill:  ``ssd_chunk_scan``, ``causal_conv1d_prefill`` (``ssd_chunk_metadata`` / ``conv_prefill_metadata``
          build the per-batch chunk maps once, outside the layers)
References (float64-capable, same signatures): ``*_ref`` in ``ssd.naive``, ``mamba1.naive``,
``gdn.naive`` and ``conv1d.naive``.
Cost models and benchmark arithmetic: ``bench``; plausible inputs for every kernel (the tests', the
benchmarks' and the profiler's): ``inputs``; error measures for the tests: ``testing``.

Conventions shared by every op:
* states live in pools indexed by slot: SSM ``(slots, H, P, N)``, conv ``(slots, dim, K-1)``; the ops update
  them in place and never copy them.
* an index equal to ``pad_slot_id`` (default -1; SGLang reserves slot 0 and passes 0) is neither read nor
  written, and a decode op writes zeros into that entry's output row.
* math in fp32 whatever the storage dtype (fp32, fp16, bf16); states are stored back in the pool's dtype.
* sequences or batch entries must use distinct slots.
"""

from __future__ import annotations

from importlib import import_module

_EXPORTS = {
    "selective_state_update": ".ssd.state_update",
    "ssd_chunk_scan": ".ssd.chunk",
    "ssd_chunk_metadata": ".ssd.chunk",
    "causal_conv1d_update": ".conv1d.update",
    "causal_conv1d_prefill": ".conv1d.prefill",
    "conv_prefill_metadata": ".conv1d.prefill",
    "selective_state_update_ref": ".ssd.naive",
    "ssd_chunk_scan_ref": ".ssd.naive",
    "ssd_scan_sequential_ref": ".ssd.naive",
    "causal_conv1d_update_ref": ".conv1d.naive",
    "causal_conv1d_prefill_ref": ".conv1d.naive",
    "gated_delta_rule_update": ".gdn.fused_recurrent",
    "gated_delta_rule_update_ref": ".gdn.naive",
    "mamba1_state_update": ".mamba1.state_update",
    "mamba1_state_update_ref": ".mamba1.naive",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
