"""Read a real vLLM or SGLang start-up log and set each figure it printed beside the prediction.

The settings (model, TP, version, mode, max_model_len, dtypes) are read from the log where the engine
prints them and can be given explicitly; every figure is then predicted from those settings alone, except
the KV budget, which vLLM rounds in its log: the block count is recovered from the logged concurrency and
checked against the logged budget.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hybridplan.engines import sglang, vllm
from hybridplan.errors import PlanError
from hybridplan.loader import load_model, shipped_specs
from hybridplan.plan import SCHEMA_VERSION, DtypeChoice, resolve_footprint
from hybridplan.serving import sglang_footprint
from hybridplan.spec import ModelSpec

GiB = 1 << 30

_P = {
    "vllm_version": re.compile(r"(?:vLLM(?: API server)? version |LLM engine \(v)(\d+\.\d+)(?:\.\d+)?"),
    "model": re.compile(r"\bmodel(?:_path)?='([^']+)'"),
    "tp": re.compile(r"\b(?:tensor_parallel_size|tp_size)=(\d+)"),
    "max_len": re.compile(r"\bmax_seq_len=(\d+)"),
    "prefix_caching": re.compile(r"\benable_prefix_caching=(True|False)"),
    "kv_dtype": re.compile(r"\bkv_cache_dtype='?([\w.]+)'?"),
    "mode": re.compile(r"Mamba cache mode is set to '(\w+)'"),
    "ssm_dtype": re.compile(r"Updating mamba_ssm_cache_dtype to '(\w+)'"),
    "block": re.compile(r"Setting attention block size to (\d+) tokens"),
    "padding": re.compile(r"Padding mamba page size by ([\d.]+)%"),
    "available": re.compile(r"Available KV cache memory: ([\d.]+) GiB"),
    "tokens": re.compile(r"\w+ KV cache size: ([\d,]+) tokens"),
    "concurrency": re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x"),
    "sglang_pool": re.compile(r"Mamba Cache is allocated\. max_mamba_cache_size: (\d+), conv_state size: "
                              r"([\d.]+)GB, ssm_state size: ([\d.]+)GB"),
    "sglang_cap": re.compile(r"max_running_requests is capped to (\d+) by the mamba state cache "
                             r"\(max_mamba_cache_size=(\d+), (\d+) state slots per request\)"),
}
_FIGURES = ("block", "padding", "tokens", "concurrency", "sglang_pool", "sglang_cap", "ssm_dtype")


def _last(name: str, text: str):
    found = _P[name].findall(text)
    return found[-1] if found else None


@dataclass(frozen=True)
class Row:
    engine: str
    figure: str
    logged: str
    predicted: str

    @property
    def ok(self) -> bool:
        return self.logged == self.predicted


@dataclass(frozen=True)
class CheckReport:
    model: str
    settings: dict
    rows: tuple[Row, ...]
    notes: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.rows)

    def to_dict(self) -> dict:
        return {"schema_version": SCHEMA_VERSION, "model": self.model, "settings": self.settings, "ok": self.ok,
                "rows": [{"engine": r.engine, "figure": r.figure, "logged": r.logged, "predicted": r.predicted,
                          "ok": r.ok} for r in self.rows], "notes": list(self.notes)}


def _model_from_log(text: str) -> ModelSpec:
    ref = _last("model", text)
    if ref is None:
        raise PlanError("the log does not name the model: pass --model")
    key = ref.rstrip("/").lower()
    for spec in shipped_specs():
        if spec.source and (spec.source.lower() == key or key.endswith("/" + spec.source.lower().split("/")[-1])):
            return spec
    try:
        return load_model(ref)
    except PlanError:
        raise PlanError(f"the log's model {ref!r} is not a shipped spec: pass --model") from None


def _vllm_rows(text: str, spec: ModelSpec, *, tp: int, rel: vllm.Release, mode: str, max_len: int | None,
               kv_dtype: str | None, kv_budget: int | None, notes: list[str]) -> list[Row]:
    rows: list[Row] = []
    fp = resolve_footprint(spec, tp=tp, choice=DtypeChoice(kv=kv_dtype), rel=rel)
    lay = vllm.layout(fp, spec, rel, mode)
    if (v := _last("ssm_dtype", text)) is not None:
        rows.append(Row("vllm", "SSM cache dtype", v, fp.dtypes.ssm))
    if (v := _last("block", text)) is not None:
        rows.append(Row("vllm", "attention block size", v, str(lay.block_size)))
    if (v := _last("padding", text)) is not None:
        rows.append(Row("vllm", "mamba page padding %", v, f"{lay.padding_pct:.2f}"))
    conc = _last("concurrency", text)
    tokens = _last("tokens", text)
    if conc is None and tokens is None:
        return rows
    logged_len = int(conc[0].replace(",", "")) if conc else None
    max_len = max_len or logged_len
    if max_len is None:
        raise PlanError("the log has no max_model_len: pass --ctx")
    probe = vllm.capacity(fp, spec, rel, mode, kv_budget=max(kv_budget or 0, 1), max_len=max_len)
    bpr = probe.blocks_per_request
    if kv_budget is not None:
        num_blocks = probe.num_blocks
    elif conc is not None:
        num_blocks = round(float(conc[1]) * bpr)
        notes.append(f"vLLM rounds its KV budget in the log: {num_blocks} blocks recovered from the logged "
                     f"concurrency × {bpr} blocks per request")
        if (avail := _last("available", text)) is not None:
            per_block = probe.bytes_per_block
            lo, hi = (float(avail) - 0.005) * GiB, (float(avail) + 0.005) * GiB
            fits = num_blocks * per_block <= hi and (num_blocks + 1) * per_block > lo
            rows.append(Row("vllm", "blocks within the logged budget", "yes",
                            "yes" if fits else f"no ({num_blocks} × {per_block:,} B vs {avail} GiB)"))
    else:
        notes.append("no concurrency line and no --kv-budget: the KV token count cannot be predicted")
        return rows
    cap = vllm.capacity(fp, spec, rel, mode, kv_budget=num_blocks * probe.bytes_per_block, max_len=max_len)
    if conc is not None:
        rows.append(Row("vllm", f"max concurrency ({max_len:,} tokens)", conc[1], f"{cap.max_concurrency:.2f}"))
    if tokens is not None:
        rows.append(Row("vllm", "KV cache size (tokens)", tokens, f"{cap.kv_tokens:,}"))
    return rows


def _sglang_rows(text: str, spec: ModelSpec, *, tp: int, rel: sglang.Release, kv_dtype: str | None) -> list[Row]:
    rows: list[Row] = []
    pool_line = _last("sglang_pool", text)
    cap_line = _last("sglang_cap", text)
    if pool_line is None and cap_line is None:
        return rows
    sglang.check_served(spec, rel)
    fp = sglang_footprint(spec, tp=tp, choice=DtypeChoice(kv=kv_dtype))
    if pool_line is not None:
        pool = sglang.Pool(int(pool_line[0]), fp)
        rows.append(Row("sglang", f"conv_state size (max_mamba_cache_size {pool.size})", f"{pool_line[1]}GB",
                        f"{pool.conv_bytes / sglang.GB:.2f}GB"))
        rows.append(Row("sglang", f"ssm_state size (max_mamba_cache_size {pool.size})", f"{pool_line[2]}GB",
                        f"{pool.ssm_bytes / sglang.GB:.2f}GB"))
    if cap_line is not None:
        n, k, ratio = (int(x) for x in cap_line)
        predicted_ratio = sglang.slots_per_request(sglang.strategy(spec, rel), rel)
        rows.append(Row("sglang", "state slots per request", str(ratio), str(predicted_ratio)))
        rows.append(Row("sglang", f"max_running_requests cap (max_mamba_cache_size {k})", str(n),
                        str(k // predicted_ratio)))
    return rows


def check(text: str, *, model: str | None = None, ctx: int | None = None, tp: int | None = None,
          vllm_version: str | None = None, sglang_version: str | None = None, mode: str | None = None,
          kv_budget: int | None = None) -> CheckReport:
    if not any(_P[f].search(text) for f in _FIGURES):
        raise PlanError("no line hybridplan can check in this log (looked for vLLM's \"Setting attention block "
                        "size\", \"Padding mamba page size\", \"KV cache size\", \"Maximum concurrency\" and "
                        "SGLang's \"Mamba Cache is allocated\")")
    spec = load_model(model) if model else _model_from_log(text)
    tp = tp or int(_last("tp", text) or 1)
    if tp < 1:
        raise PlanError(f"--tp must be a positive integer, got {tp}")
    max_len = ctx or (int(_last("max_len", text)) if _last("max_len", text) else None)
    kv = _last("kv_dtype", text)
    kv = None if kv in (None, "auto") else kv
    notes: list[str] = []
    rows: list[Row] = []
    settings: dict = {"tp": tp, "kv_dtype": kv or "auto"}
    if any(_P[f].search(text) for f in ("block", "padding", "tokens", "concurrency", "ssm_dtype")):
        rel = vllm.release(vllm_version or _last("vllm_version", text))
        if vllm_version is None and _last("vllm_version", text) is None:
            notes.append(f"the log does not say the vLLM version: rules of {rel.version} used")
        pc = _last("prefix_caching", text)
        m = mode or _last("mode", text) or (rel.default_mode(spec) if pc is None else
                                            (rel.prefix_mode(spec) if pc == "True" else "none"))
        settings.update({"vllm_version": rel.version, "mode": m, "max_model_len": max_len})
        rows += _vllm_rows(text, spec, tp=tp, rel=rel, mode=m, max_len=max_len, kv_dtype=kv, kv_budget=kv_budget,
                           notes=notes)
    srel = sglang.release(sglang_version)
    srows = _sglang_rows(text, spec, tp=tp, rel=srel, kv_dtype=kv)
    if srows:
        settings["sglang_version"] = srel.version
    rows += srows
    return CheckReport(spec.name, settings, tuple(rows), tuple(notes))
