"""The KV cache dtype a quantized checkpoint imposes on SGLang under ``--kv-cache-dtype auto``, by release.

SGLang resolves auto in ``ModelRunner.configure_kv_cache_dtype`` (model_executor/model_runner.py; from 0.5.22
mem_cache/kv_cache_dtype.py): from 0.5.3rc2, a quantization config whose ``kv_cache_quant_algo`` attribute is
"FP8" (any case) gives float8_e4m3fn (float8_e4m3fnuz on ROCm, the same byte); 0.5.2 and 0.5.3rc0 always take
the model dtype. The attribute is set by the ModelOpt configs (layers/quantization/modelopt_quant.py), each
release reading the checkpoint its own way:

- NVFP4 (``ModelOptFp4Config.from_config``), hf_quant_config.json layout: ``quantization.kv_cache_quant_algo``.
  config.json layout: ``kv_cache_quant_algo``, else a ``kv_cache_scheme`` of 8-bit floats (0.5.3rc2–0.5.8); the
  scheme alone (0.5.9–0.5.14); the scheme, else ``kv_cache_quant_algo`` (0.5.15 on).
- FP8 (``ModelOptFp8Config``): up to 0.5.3.post3 it keeps the KV algorithm as ``kv_cache_quant_method``, an
  attribute the auto rule does not read; from 0.5.4 (``ModelOptQuantConfig``) as ``kv_cache_quant_algo``:
  ``quantization.kv_cache_quant_algo`` (hf_quant_config.json), or a ``kv_cache_scheme`` of 8-bit floats
  (config.json), else from 0.5.15 ``kv_cache_quant_algo``.

compressed-tensors, fp8, AWQ, GPTQ and the others set no such attribute: their KV cache follows the flag.
"""

from __future__ import annotations

from hybridplan.dtypes import flag_dtype, serving_dtype
from hybridplan.engines.sglang.releases import Release
from hybridplan.spec import ModelSpec

#: ``--dtype`` (server_args.py), the same in every release
MODEL_DTYPES = {
    "half": "float16",
    "float16": "float16",
    "bfloat16": "bfloat16",
    "float": "float32",
    "float32": "float32",
}


def model_dtype(spec: ModelSpec, dtype: str | None) -> str:
    """The dtype SGLang serves the model at: the config's, unless ``--dtype``."""
    return serving_dtype(
        spec.model_dtype, flag_dtype(dtype, what="--dtype", engine_flag="SGLang --dtype", accepted=MODEL_DTYPES)
    )


AUTO_FROM_CHECKPOINT_SINCE = "0.5.3rc2"
FP8_CONFIG_ATTRIBUTE_SINCE = "0.5.4"
#: from this release a config.json without a kv_cache_scheme falls back to its kv_cache_quant_algo
KEY_FALLBACK_SINCE = "0.5.15"


def _scheme_fp8(q) -> bool:
    ks = q.kv_scheme
    return ks is not None and ks.type == "float" and ks.num_bits == 8


def _key_fp8(q) -> bool:
    return isinstance(q.kv_algo, str) and q.kv_algo.upper() == "FP8"


def _declares_fp8(q, rel: Release) -> tuple[bool, str]:
    """Whether the release's ModelOpt config for this checkpoint carries kv_cache_quant_algo "FP8", and the field
    it read."""
    if q.algo == "FP8" and rel.before(FP8_CONFIG_ATTRIBUTE_SINCE):
        return False, "kv_cache_quant_method"
    if q.nested:
        return _key_fp8(q), "quantization.kv_cache_quant_algo"
    if q.algo == "NVFP4":
        if rel.before("0.5.9"):
            if q.kv_algo:
                return _key_fp8(q), "kv_cache_quant_algo"
            return _scheme_fp8(q), "kv_cache_scheme"
        if q.kv_scheme is not None or rel.before(KEY_FALLBACK_SINCE):
            return _scheme_fp8(q), "kv_cache_scheme"
        return _key_fp8(q), "kv_cache_quant_algo"
    if q.algo == "FP8":
        if q.kv_scheme is not None or rel.before(KEY_FALLBACK_SINCE):
            return _scheme_fp8(q), "kv_cache_scheme"
        return _key_fp8(q), "kv_cache_quant_algo"
    return False, ""


def checkpoint_kv(spec: ModelSpec, rel: Release, given: str | None) -> tuple[str, str] | None:
    """``fp8_e4m3`` and why, where the checkpoint makes SGLang's auto KV cache fp8; None when the flag (or the
    model dtype) stands. ``given``: the --kv-cache-dtype name, None for auto."""
    q = spec.quantization
    if q is None or given is not None or not q.method.startswith("modelopt") or rel.before(AUTO_FROM_CHECKPOINT_SINCE):
        return None
    fp8, field = _declares_fp8(q, rel)
    if not fp8:
        return None
    return "fp8_e4m3", (
        f"the ModelOpt {q.algo or ''} checkpoint's {field} ({q.where}): SGLang {rel.version} "
        "resolves auto to fp8 (ModelRunner.configure_kv_cache_dtype)"
    )
