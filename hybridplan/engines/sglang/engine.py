"""SGLang behind the ``Engine`` protocol: each verb takes a ``Scenario`` and returns a frozen result that
knows its own JSON. The rules are in the sibling modules."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from hybridplan.engines.common import Reuse, Row
from hybridplan.engines.sglang import logs
from hybridplan.engines.sglang.pool import (
    Admission,
    Pool,
    auto_pool_size,
    budget_bytes,
    footprint,
    kv_pool_bytes,
    kv_tokens,
    per_request_bytes,
    request_cap,
)
from hybridplan.engines.sglang.radix import checkpoint_grid, reuse, slots_per_request, strategy
from hybridplan.engines.sglang.releases import Release, release
from hybridplan.memory import Footprint
from hybridplan.units import human_bytes

if TYPE_CHECKING:
    from hybridplan.engines import LogGiven
    from hybridplan.scenario import Scenario


@dataclass(frozen=True)
class PoolLayout:
    """`size --engine sglang`: a MambaPool of ``--slots`` slots and what it admits."""

    rel: Release
    pool: Pool
    strategy: str
    ratio: int
    grid: int

    @property
    def max_running_requests(self) -> int:
        return request_cap(self.pool.size, self.ratio)

    def to_dict(self) -> dict:
        fp = self.pool.fp
        return {"version": self.rel.version, "slots": self.pool.size, "rows": self.pool.rows,
                "conv_dtype": fp.dtypes.conv, "ssm_dtype": fp.dtypes.ssm,
                "conv_state_bytes": self.pool.conv_bytes, "ssm_state_bytes": self.pool.ssm_bytes,
                "pool_bytes": self.pool.bytes, "per_request_bytes": per_request_bytes(fp),
                "radix_strategy": self.strategy, "state_slots_per_request": self.ratio,
                "max_running_requests": self.max_running_requests, "checkpoint_grid": self.grid,
                "logs": [self.pool.log]}


@dataclass(frozen=True)
class Fit:
    """`fit` on SGLang: the memory split between the two pools and the requests it admits."""

    budget: int
    pool: Pool
    kv_bytes: int
    strategy: str
    admission: Admission
    ctx: int
    tp: int

    @property
    def rel(self) -> Release:
        return self.admission.rel

    @property
    def kv_tokens(self) -> int:
        return self.admission.kv_tokens

    @property
    def ratio(self) -> int:
        return self.admission.ratio

    @property
    def max_running_requests(self) -> int:
        return self.admission.value

    @property
    def logs(self) -> list[str]:
        return [self.pool.log, *self.admission.logs]

    @property
    def starts(self) -> bool:
        return self.max_running_requests >= 1

    @property
    def problem(self) -> str | None:
        return None

    @property
    def flags(self) -> str:
        return (f"--context-length {self.ctx} --max-running-requests {self.max_running_requests}"
                + (f" --tp {self.tp}" if self.tp > 1 else ""))

    @property
    def notes(self) -> tuple[str, ...]:
        if self.rel.padding_slot_in_budget:
            return ()
        return (f"SGLang {self.rel.version} leaves the pool's padding row out of its split: the two pools take "
                f"{human_bytes(per_request_bytes(self.pool.fp))} more than the budget",)

    def to_dict(self) -> dict:
        a = self.admission
        return {"version": self.rel.version, "budget_bytes": self.budget, "max_mamba_cache_size": self.pool.size,
                "pool_bytes": self.pool.bytes, "conv_state_bytes": self.pool.conv_bytes,
                "ssm_state_bytes": self.pool.ssm_bytes, "kv_pool_bytes": self.kv_bytes, "kv_tokens": self.kv_tokens,
                "radix_strategy": self.strategy, "state_slots_per_request": self.ratio,
                "max_running_requests": self.max_running_requests, "requested_max_running_requests": a.requested,
                "state_pool_cap": a.cap, "capped": a.capped, "logs": self.logs}


@dataclass(frozen=True)
class Prefix:
    rel: Release
    reuse: Reuse

    def entries(self) -> list[tuple[str, str, Reuse]]:
        return [(f"SGLang {self.rel.version}", "grid", self.reuse)]

    def to_dict(self) -> dict:
        return {"version": self.rel.version, **self.reuse.to_dict("grid")}


@dataclass(frozen=True)
class LogCheck:
    settings: dict
    rows: tuple[Row, ...]
    notes: tuple[str, ...]


class SglangEngine:
    name = "sglang"
    looked_for = logs.LOOKED_FOR

    def check_served(self, sc: Scenario) -> None:
        sc.sglang.release.check_served(sc.spec)

    def footprint(self, sc: Scenario) -> Footprint:
        return footprint(sc)

    def _slots_per_request(self, sc: Scenario) -> tuple[str, int]:
        rel = sc.sglang.release
        strat = strategy(sc.spec, rel, sc.sglang.radix)
        return strat, slots_per_request(strat, rel, overlap=sc.sglang.overlap)

    def layout(self, sc: Scenario) -> PoolLayout:
        self.check_served(sc)
        pool = Pool(sc.slots, footprint(sc))
        return PoolLayout(sc.sglang.release, pool, *self._slots_per_request(sc), checkpoint_grid(sc.spec))

    def fit(self, sc: Scenario) -> Fit:
        self.check_served(sc)
        rel, fp = sc.sglang.release, footprint(sc)
        total = budget_bytes(sc)
        pool = Pool(auto_pool_size(fp, total, rel, sc.sglang.full_memory_ratio), fp)
        kv_bytes = kv_pool_bytes(fp, total, pool.size, rel)
        strat, ratio = self._slots_per_request(sc)
        admission = Admission(rel, pool.size, ratio, kv_tokens(fp, kv_bytes), sc.ctx, sc.sglang.max_running_requests)
        return Fit(total, pool, kv_bytes, strat, admission, sc.ctx, sc.tp)

    def prefix(self, sc: Scenario, shared: int, prompt: int) -> Prefix:
        self.check_served(sc)
        return Prefix(sc.sglang.release, reuse(sc, shared, prompt))

    def log_present(self, text: str) -> bool:
        return logs.present(text)

    def log_setting(self, text: str, name: str) -> str | None:
        return logs.setting(text, name) if name in logs.SETTINGS else None

    def check_log(self, text: str, sc: Scenario, given: LogGiven) -> LogCheck:
        rel = release(given.sglang_version)
        run = replace(sc, sglang=replace(sc.sglang, release=rel))
        self.check_served(run)
        return LogCheck({"sglang_version": rel.version}, tuple(logs.rows(text, run)), ())


ENGINE = SglangEngine()
