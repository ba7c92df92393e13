"""What SGLang prints at start-up about its state pool, read back and set beside the prediction."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from hybridplan.engines.common import Row, last
from hybridplan.engines.sglang.pool import GB, Pool, footprint, request_cap
from hybridplan.engines.sglang.radix import slots_per_request, strategy
from hybridplan.engines.sglang.releases import release

if TYPE_CHECKING:
    from hybridplan.engines import LogGiven
    from hybridplan.scenario import Scenario

SETTINGS = {
    "model": re.compile(r"\bmodel_path='([^']+)'"),
    "tp": re.compile(r"\btp_size=(\d+)"),
    "kv_dtype": re.compile(r"\bkv_cache_dtype='?([\w.]+)'?"),
}
#: substrings one of which every line here holds: a log is filtered by them before it is read
KEYWORDS = ("server_args", "model_path", "tp_size", "Mamba Cache is allocated", "max_running_requests")
FIGURES = {
    "pool": re.compile(r"Mamba Cache is allocated\. max_mamba_cache_size: (\d+), conv_state size: "
                       r"([\d.]+)GB, ssm_state size: ([\d.]+)GB"),
    "cap": re.compile(r"max_running_requests is capped to (\d+) by the mamba state cache "
                      r"\(max_mamba_cache_size=(\d+), (\d+) state slots per request\)"),
}


def present(text: str) -> bool:
    return any(p.search(text) for p in FIGURES.values())


def setting(text: str, name: str) -> str | None:
    return last(SETTINGS[name], text)


def rows(text: str, sc: Scenario) -> list[Row]:
    out: list[Row] = []
    pool_line = last(FIGURES["pool"], text)
    cap_line = last(FIGURES["cap"], text)
    if pool_line is not None:
        pool = Pool(int(pool_line[0]), footprint(sc))
        out.append(Row("sglang", f"conv_state size (max_mamba_cache_size {pool.size})", f"{pool_line[1]}GB",
                       f"{pool.conv_bytes / GB:.2f}GB"))
        out.append(Row("sglang", f"ssm_state size (max_mamba_cache_size {pool.size})", f"{pool_line[2]}GB",
                       f"{pool.ssm_bytes / GB:.2f}GB"))
    if cap_line is not None:
        n, k, ratio = (int(x) for x in cap_line)
        rel = sc.sglang.release
        predicted = slots_per_request(strategy(sc.spec, rel), rel)
        out.append(Row("sglang", "state slots per request", str(ratio), str(predicted)))
        out.append(Row("sglang", f"max_running_requests cap (max_mamba_cache_size {k})", str(n),
                       str(request_cap(k, predicted))))
    return out


@dataclass(frozen=True)
class LogCheck:
    settings: dict
    rows: tuple[Row, ...]
    notes: tuple[str, ...]


def check(text: str, sc: Scenario, given: LogGiven) -> LogCheck:
    rel = release(given.sglang_version)
    run = replace(sc, sglang=replace(sc.sglang, release=rel))
    rel.check_served(run.spec)
    return LogCheck({"sglang_version": rel.version}, tuple(rows(text, run)), ())
