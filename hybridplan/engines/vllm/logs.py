"""What vLLM prints at start-up, read back: its settings, and each figure set beside the prediction.

The figures are predicted from the settings alone, except the KV budget, which vLLM rounds in its log: the
block count is recovered from the logged concurrency and checked against the logged budget.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from hybridplan.engines.common import Row, last
from hybridplan.engines.vllm.blocks import layout
from hybridplan.engines.vllm.dtypes import footprint
from hybridplan.engines.vllm.releases import release
from hybridplan.engines.vllm.sizing import capacity
from hybridplan.errors import PlanError

if TYPE_CHECKING:
    from hybridplan.engines import LogGiven
    from hybridplan.scenario import Scenario

GiB = 1 << 30

SETTINGS = {
    "version": re.compile(r"(?:vLLM(?: API)?(?: server)? version |LLM engine \(v)(\d+\.\d+[\w.+]*)"),
    "model": re.compile(r"\bmodel='([^']+)'"),
    "tp": re.compile(r"\btensor_parallel_size=(\d+)"),
    "max_len": re.compile(r"\bmax_seq_len=(\d+)"),
    "prefix_caching": re.compile(r"\benable_prefix_caching=(True|False)"),
    "kv_dtype": re.compile(r"\bkv_cache_dtype='?([\w.]+)'?"),
    "mode": re.compile(r"Mamba cache mode is set to '(\w+)'"),
}
FIGURES = {
    "ssm_dtype": re.compile(r"Updating mamba_ssm_cache_dtype to '(\w+)'"),
    "block": re.compile(r"Setting attention block size to (\d+) tokens"),
    "padding": re.compile(r"Padding mamba page size by ([\d.]+)%"),
    "available": re.compile(r"Available KV cache memory: ([\d.]+) GiB"),
    "tokens": re.compile(r"\w+ KV cache size: ([\d,]+) tokens"),
    "concurrency": re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x"),
}
#: the lines whose presence says a log is vLLM's, as a person would name them
#: substrings one of which every line above holds (the settings sit in the "LLM engine (v…) with config" line):
#: a log is filtered by them before it is read
KEYWORDS = ("vLLM", "LLM engine", "amba", "attention block size", "KV cache", "concurrency")
_CHECKED = ("block", "padding", "tokens", "concurrency", "ssm_dtype")


def present(text: str) -> bool:
    """Does the log hold a figure this module checks?"""
    return any(FIGURES[f].search(text) for f in _CHECKED)


def setting(text: str, name: str) -> str | None:
    """A setting as the log states it (None where it does not)."""
    return last(SETTINGS[name], text)


def prefix_caching(text: str) -> bool | None:
    flag = setting(text, "prefix_caching")
    return None if flag is None else flag == "True"


def rows(text: str, sc: Scenario, mode: str, kv_budget: int | None) -> tuple[list[Row], list[str]]:
    """Each figure of the log beside its prediction, and notes on how they were compared. ``sc.ctx`` is the
    context the settings name; the concurrency line's own context is used where they name none."""
    out: list[Row] = []
    notes: list[str] = []
    fp, lay = footprint(sc), layout(sc, mode)
    if (v := last(FIGURES["ssm_dtype"], text)) is not None:
        out.append(Row("vllm", "SSM cache dtype", v, fp.dtypes.ssm))
    if (v := last(FIGURES["block"], text)) is not None:
        out.append(Row("vllm", "attention block size", v, str(lay.block_size)))
    if (v := last(FIGURES["padding"], text)) is not None:
        out.append(Row("vllm", "mamba page padding %", v, f"{lay.padding_pct:.2f}"))
    conc = last(FIGURES["concurrency"], text)
    tokens = last(FIGURES["tokens"], text)
    if conc is None and tokens is None:
        return out, notes
    probe = capacity(sc, mode, max(kv_budget or 0, 1))
    bpr = probe.blocks_per_request
    if kv_budget is not None:
        num_blocks = probe.num_blocks
    elif conc is not None:
        num_blocks = round(float(conc[1]) * bpr)
        notes.append(f"vLLM rounds its KV budget in the log: {num_blocks} blocks recovered from the logged "
                     f"concurrency × {bpr} blocks per request")
        if (avail := last(FIGURES["available"], text)) is not None:
            per_block = probe.bytes_per_block
            lo, hi = (float(avail) - 0.005) * GiB, (float(avail) + 0.005) * GiB
            fits = num_blocks * per_block <= hi and (num_blocks + 1) * per_block > lo
            out.append(Row("vllm", "blocks within the logged budget", "yes",
                           "yes" if fits else f"no ({num_blocks} × {per_block:,} B vs {avail} GiB)"))
    else:
        notes.append("no concurrency line and no --kv-budget: the KV token count cannot be predicted")
        return out, notes
    cap = capacity(sc, mode, num_blocks * probe.bytes_per_block)
    if conc is not None:
        out.append(Row("vllm", f"max concurrency ({sc.ctx:,} tokens)", conc[1], f"{cap.max_concurrency:.2f}"))
    if tokens is not None:
        out.append(Row("vllm", "KV cache size (tokens)", tokens, f"{cap.kv_tokens:,}"))
    return out, notes


def sizes_tokens(text: str) -> bool:
    """Does the log print the token or concurrency figure (which need the context)?"""
    return bool(FIGURES["concurrency"].search(text) or FIGURES["tokens"].search(text))


def logged_ctx(text: str) -> int | None:
    """The context of the concurrency line, where the settings name none."""
    conc = last(FIGURES["concurrency"], text)
    return int(conc[0].replace(",", "")) if conc else None


@dataclass(frozen=True)
class LogCheck:
    settings: dict
    rows: tuple[Row, ...]
    notes: tuple[str, ...]


def check(text: str, sc: Scenario, given: LogGiven) -> LogCheck:
    """The log's figures beside those of ``sc`` run with the release, mode and context the log states
    (or ``given`` overrides)."""
    notes: list[str] = []
    logged_version = setting(text, "version")
    rel = release(given.vllm_version or logged_version)
    if given.vllm_version is None and logged_version is None:
        notes.append(f"the log does not say the vLLM version: rules of {rel.version} used")
    mode = given.mode or setting(text, "mode") or rel.mode(sc.spec, 0, prefix_caching(text))
    max_len = given.ctx or (int(v) if (v := setting(text, "max_len")) else None)
    settings = {"vllm_version": rel.version, "mode": mode, "max_model_len": max_len}
    ctx = max_len or logged_ctx(text)
    if ctx is None and sizes_tokens(text):
        raise PlanError("the log has no max_model_len: pass --ctx")
    run = replace(sc, vllm=replace(sc.vllm, release=rel), ctx=ctx or sc.ctx)
    found, more = rows(text, run, mode, given.kv_budget)
    return LogCheck(settings, tuple(found), tuple(notes + more))
