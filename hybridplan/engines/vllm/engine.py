"""vLLM behind the ``Engine`` protocol: each verb takes a ``Scenario`` and returns a frozen result that knows
its own JSON. The rules are in the sibling modules; this one only puts them together per mode."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from hybridplan.engines.common import Reuse
from hybridplan.engines.vllm import logs
from hybridplan.engines.vllm.blocks import Layout, layout, pages_per_request
from hybridplan.engines.vllm.dtypes import footprint
from hybridplan.engines.vllm.prefix import reuse
from hybridplan.engines.vllm.releases import Release, release
from hybridplan.engines.vllm.sizing import Capacity, available_kv_memory_log, capacity, kv_budget, max_num_seqs
from hybridplan.errors import PlanError
from hybridplan.memory import Footprint

if TYPE_CHECKING:
    from hybridplan.engines import LogGiven
    from hybridplan.scenario import Scenario


@dataclass(frozen=True)
class ModePages:
    """One mode's layout and what one request pins in it."""

    layout: Layout
    state_pages_per_request: int
    kv_pages_per_request: int

    def to_dict(self) -> dict:
        lay = self.layout
        return {"block_size": lay.block_size, "mamba_page_bytes": lay.mamba_page_bytes, "page_bytes": lay.page_bytes,
                "padding_pct": lay.padding_pct, "padding_bytes": lay.page_bytes - lay.mamba_page_bytes,
                "state_pages_per_request": self.state_pages_per_request,
                "state_bytes_per_request": self.state_pages_per_request * lay.page_bytes,
                "kv_pages_per_request": self.kv_pages_per_request,
                "kv_bytes_per_request": self.kv_pages_per_request * lay.page_bytes, "logs": list(lay.logs)}


@dataclass(frozen=True)
class Pages:
    """`size --engine vllm`: pages and padding per mode."""

    rel: Release
    default_mode: str
    prefix_mode: str
    modes: dict[str, ModePages]

    def to_dict(self) -> dict:
        return {"version": self.rel.version, "default_mode": self.default_mode,
                "mode_with_prefix_caching": self.prefix_mode,
                "modes": {m: v.to_dict() for m, v in self.modes.items()}}


@dataclass(frozen=True)
class ModeFit:
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
        return {"block_size": c.layout.block_size, "page_bytes": c.layout.page_bytes, "group_size": c.group_size,
                "groups": len(c.groups), "bytes_per_block": c.bytes_per_block, "num_blocks": c.num_blocks,
                "blocks_per_request": c.blocks_per_request, "max_concurrency": c.max_concurrency,
                "kv_tokens": c.kv_tokens, "max_num_seqs": self.max_num_seqs,
                "largest_max_num_seqs": self.largest_max_num_seqs, "starts": self.starts, "problem": self.problem,
                "logs": list(c.layout.logs) + list(c.logs)}


@dataclass(frozen=True)
class Fit:
    """`fit` on vLLM: the budget, and per mode what it holds; the verdict is the mode the start runs in."""

    rel: Release
    budget: int
    default_mode: str
    modes: dict[str, ModeFit]
    ctx: int
    tp: int

    @property
    def chosen(self) -> ModeFit:
        return self.modes[self.default_mode]

    @property
    def starts(self) -> bool:
        return self.chosen.starts

    @property
    def problem(self) -> str | None:
        p = self.chosen.problem
        return None if p is None else f"vLLM ({self.default_mode}): {p}"

    @property
    def flags(self) -> str:
        f = self.chosen
        n = f.max_num_seqs if f.starts else (f.largest_max_num_seqs or 0)
        return f"--max-model-len {self.ctx} --max-num-seqs {max(n, 1)}" + (
            f" --tensor-parallel-size {self.tp}" if self.tp > 1 else "")

    @property
    def notes(self) -> tuple[str, ...]:
        return ()

    def to_dict(self) -> dict:
        return {"default_mode": self.default_mode, "kv_budget_bytes": self.budget,
                "available_kv_cache_memory_log": available_kv_memory_log(self.budget),
                "modes": {m: f.to_dict() for m, f in self.modes.items()}}


@dataclass(frozen=True)
class Prefix:
    """`prefix` on vLLM: reuse per mode."""

    rel: Release
    modes: dict[str, Reuse]

    def entries(self) -> list[tuple[str, str, Reuse]]:
        """(row label, what its grid is called, reuse) per mode."""
        return [(f"vLLM {self.rel.version} {mode}", "block", r) for mode, r in self.modes.items()]

    def to_dict(self) -> dict:
        return {"version": self.rel.version, "modes": {m: r.to_dict("block_size") for m, r in self.modes.items()}}


@dataclass(frozen=True)
class LogCheck:
    settings: dict
    rows: tuple[logs.Row, ...]
    notes: tuple[str, ...]


class VllmEngine:
    name = "vllm"
    looked_for = logs.LOOKED_FOR

    def check_served(self, sc: Scenario) -> None:
        sc.vllm.release.check_served(sc.spec)

    def footprint(self, sc: Scenario) -> Footprint:
        return footprint(sc)

    def layout(self, sc: Scenario) -> Pages:
        self.check_served(sc)
        rel = sc.vllm.release
        out: dict[str, ModePages] = {}
        for mode in rel.modes_for(sc.spec, sc.vllm.mode):
            lay = layout(sc, mode)
            out[mode] = ModePages(lay, *pages_per_request(sc, mode, lay))
        return Pages(rel, rel.default_mode(sc.spec, sc.spec_tokens), rel.prefix_mode(sc.spec, sc.spec_tokens), out)

    def fit(self, sc: Scenario) -> Fit:
        self.check_served(sc)
        rel = sc.vllm.release
        budget = kv_budget(sc)
        n = max_num_seqs(sc)
        fits = {mode: ModeFit(capacity(sc, mode, budget), n, sc.vllm.max_num_seqs is not None)
                for mode in rel.modes_for(sc.spec, sc.vllm.mode)}
        return Fit(rel, budget, sc.vllm.mode or rel.default_mode(sc.spec, sc.spec_tokens), fits, sc.ctx, sc.tp)

    def prefix(self, sc: Scenario, shared: int, prompt: int) -> Prefix:
        self.check_served(sc)
        return Prefix(sc.vllm.release, reuse(sc, shared, prompt))

    def log_present(self, text: str) -> bool:
        return logs.present(text)

    def log_setting(self, text: str, name: str) -> str | None:
        return logs.setting(text, name) if name in logs.SETTINGS else None

    def check_log(self, text: str, sc: Scenario, given: LogGiven) -> LogCheck:
        """The log's figures beside those of ``sc`` run with the release, mode and context the log states
        (or ``given`` overrides)."""
        notes: list[str] = []
        logged_version = logs.setting(text, "version")
        rel = release(given.vllm_version or logged_version)
        if given.vllm_version is None and logged_version is None:
            notes.append(f"the log does not say the vLLM version: rules of {rel.version} used")
        mode = given.mode or logs.setting(text, "mode") or rel.mode(sc.spec, 0, logs.prefix_caching(text))
        max_len = given.ctx or (int(v) if (v := logs.setting(text, "max_len")) else None)
        settings = {"vllm_version": rel.version, "mode": mode, "max_model_len": max_len}
        ctx = max_len or logs.logged_ctx(text)
        if ctx is None and logs.sizes_tokens(text):
            raise PlanError("the log has no max_model_len: pass --ctx")
        run = replace(sc, vllm=replace(sc.vllm, release=rel), ctx=ctx or sc.ctx)
        rows, more = logs.rows(text, run, mode, given.kv_budget)
        return LogCheck(settings, tuple(rows), tuple(notes + more))


ENGINE = VllmEngine()
