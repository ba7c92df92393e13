"""An SGLang start-up log read back whole: the server arguments it prints (as ``ServerArgs(…)`` up to 0.5.18,
as a dict from 0.5.19), each figure of its pools beside the prediction for those arguments, and the figures
hybridplan does not predict, with the reason."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from msgspec.structs import replace

from hybridplan.engines.common import LogCheck, NotModelled, Row, Settings, literal
from hybridplan.engines.sglang.releases import DEFAULT, Release, release
from hybridplan.engines.sglang.settings import FULL_MEMORY_RATIO
from hybridplan.errors import PlanError
from hybridplan.logread import Found, Log
from hybridplan.scenario import Budget, DtypeChoice, Scenario, default_ctx

if TYPE_CHECKING:
    from hybridplan.engines import LogGiven

GB = 1 << 30

ENGINE = "sglang"
#: substrings one of which every line read here holds: a log is filtered by them before it is read
KEYWORDS = (
    "server_args",
    "Mamba Cache is allocated",
    "KV Cache is allocated",
    "max_running_requests",
    "max_total_num_tokens",
    "max_mamba_cache_size",
    "Load weight",
    "Memory pool end",
    "Found local HF snapshot",
    "hierarchical",
)

SERVER_ARGS = re.compile(r"server_args=(?:ServerArgs\()?(.*)")
_PAIR = re.compile(
    r"(?:'(\w+)': |\b(\w+)=)('(?:[^'\\]|\\.)*'|\"[^\"]*\"|True|False|None|-?\d[\d.e+-]*|"
    r"\[[^\[\]]*\]|\{[^{}]*\}|[\w.]+)"
)
#: the server arguments read, with the scenario's name for each
FIELDS = (
    "model_path",
    "tp_size",
    "dp_size",
    "enable_dp_attention",
    "pp_size",
    "page_size",
    "mem_fraction_static",
    "max_running_requests",
    "max_total_tokens",
    "context_length",
    "kv_cache_dtype",
    "dtype",
    "disable_radix_cache",
    "speculative_algorithm",
    "speculative_num_draft_tokens",
    "speculative_eagle_topk",
    "speculative_draft_model_path",
    "speculative_num_steps",
    "disable_overlap_schedule",
    "max_mamba_cache_size",
    "mamba_ssm_dtype",
    "mamba_full_memory_ratio",
    "mamba_scheduler_strategy",
    "mamba_radix_cache_strategy",
    "quantization",
    "enable_hierarchical_cache",
    "hicache_ratio",
    "hicache_size",
    "hicache_write_policy",
    "hicache_mem_layout",
    "hicache_io_backend",
)

POOL = re.compile(
    r"Mamba Cache is allocated\. (?:max_mamba_cache_size: (\d+), )?conv_state size: ([\d.]+)GB, "
    r"ssm_state size: ([\d.]+)GB(?: intermediate_ssm_state_cache size: ([\d.]+)GB "
    r"intermediate_conv_window_cache size: ([\d.]+)GB)?"
)
KV = re.compile(
    r"KV Cache is allocated\. (?:dtype: ([\w.]+), )?#tokens: (\d+), K size: ([\d.]+) GB, "
    r"V size: ([\d.]+) GB"
)
SCHED = re.compile(
    r"max_total_num_tokens=(\d+), chunked_prefill_size=(-?\d+), max_prefill_tokens=(\d+), "
    r"max_running_requests=(\d+), context_len=(\d+)"
)
CAP = re.compile(
    r"max_running_requests is capped to (\d+) by the mamba state cache \(max_mamba_cache_size=(\d+), "
    r"(\d+) state slots per request\)"
)
REDUCED = re.compile(r"max_running_requests was reduced from the requested (\d+) to (\d+)")
NOT_ENOUGH = re.compile(
    r"Computed max_mamba_cache_size=(-?\d+) \(total_rest_memory=(-?[\d.]+) GB, "
    r"mamba_cache_per_req=([\d.]+) MB\)"
)
#: the HiCache host pools (pool_host/base.py from 0.5.17, memory_pool_host.py before; pool_host/mamba.py)
HOST_KV = re.compile(
    r"Allocating (?:kv hierarchical KV host pool: (\d+) tokens, ([\d.]+) GB host memory|"
    r"([\d.]+) GB host memory for hierarchical KV cache)"
)
HOST_MAMBA = re.compile(
    r"Allocating ([\d.]+) GB host memory for hierarchical Mamba cache \((?:(\d+) state slots, )?"
    r"layout=(\w+)\)"
)
#: the weights' download step names the Hub repository where no server_args line is in the excerpt
#: (sglang/srt/model_loader/weight_utils.py), and the loader's last line names the class it loaded
SNAPSHOT = re.compile(r"Found local HF snapshot for (\S+?) at ")
LOADED_TYPE = re.compile(r"Load weight end\..*?\btype=(\w+)")
LOAD_BEGIN = re.compile(r"Load weight begin\. avail mem=([\d.]+) GB")
LOAD_END = re.compile(r"Load weight end\..*?avail mem=([\d.]+) GB, mem usage=([\d.]+) GB")
NOT_MODELLED = (
    (LOAD_END, 2, "weights loaded (GB)", "the weights are measured at load; hybridplan takes them as input"),
    (
        re.compile(r"Memory pool end\. avail mem=([\d.]+) GB"),
        1,
        "free memory after the pools (GB)",
        "what is left besides the pools depends on the GPU and the process",
    ),
)


FIGURE_PATTERNS = (POOL, KV, CAP, SCHED, NOT_ENOUGH)
#: the figures in the order a start prints them: the pools (model_runner.py), then the scheduler's capacity line
#: (scheduler.py); a figure printed again after it opens the next of several runs pasted without server_args
FIGURE_STAGES = ((POOL, KV, NOT_ENOUGH), (CAP, SCHED))
#: the line a start-up prints once (the launcher's server arguments): printed again, it opens the next start
OPENERS = (SERVER_ARGS,)


def present(log: Log) -> bool:
    return any(log.has(p) for p in FIGURE_PATTERNS)


def server_args(log: Log) -> tuple[dict, Found | None, bool]:
    """The server arguments (the last printed), and whether they were printed as a dict (0.5.19 on)."""
    found = log.last(SERVER_ARGS)
    if found is None:
        return {}, None, False
    out = {}
    for m in _PAIR.finditer(found[1]):
        name = m.group(1) or m.group(2)
        if name in FIELDS and name not in out:
            out[name] = literal(m.group(3))
    return out, found, found[1].lstrip().startswith("{")


def _version(log: Log, given: LogGiven, as_dict: bool, s: Settings, notes: list[str]) -> Release:
    """The release: given, else the newest, said together with what the log's own format tells."""
    if given.sglang_version:
        s.put("version", given.sglang_version, "flag")
        return release(given.sglang_version)
    hints = []
    if as_dict:
        hints.append("server_args printed as a dict: 0.5.19 or later")
    kv = log.last(KV)
    if kv is not None and kv[1]:
        hints.append('"dtype:" in the KV cache line: 0.5.13 or later')
    if log.has(re.compile(r"\bmamba_radix_cache_strategy\b")):
        hints.append("--mamba-radix-cache-strategy: 0.5.14 or later")
    elif log.has(re.compile(r"\bmamba_scheduler_strategy\b")):
        hints.append("--mamba-scheduler-strategy alone: 0.5.7 to 0.5.13")
    s.put("version", DEFAULT.version, "default (newest modelled)")
    notes.append(
        f"the log does not say the SGLang version: rules of {DEFAULT.version} used"
        + (f" ({'; '.join(hints)})" if hints else "")
    )
    return DEFAULT


def read_settings(log: Log, given: LogGiven, notes: list[str]) -> tuple[Settings, Release]:
    s = Settings(ENGINE)
    for name, value in (
        ("model_path", given.model),
        ("tp_size", given.tp),
        ("context_length", given.ctx),
        ("max_running_requests", given.max_running_requests),
        ("mem_fraction_static", given.mem_fraction_static),
        ("dtype", given.dtype),
        ("mamba_ssm_dtype", given.ssm_dtype),
        # SGLang has no plain fp8: hybridplan's fp8 is its fp8_e4m3 (options._kv_dtype)
        ("kv_cache_dtype", "fp8_e4m3" if given.kv_dtype == "fp8" else given.kv_dtype),
        # the flags fit takes too (LogGiven)
        ("max_mamba_cache_size", given.max_mamba_cache_size),
        ("mamba_full_memory_ratio", given.mamba_full_memory_ratio),
        ("disable_radix_cache", None if given.radix is None else given.radix == "off"),
        ("mamba_radix_cache_strategy", given.radix if given.radix not in (None, "off") else None),
        ("page_size", given.page_size),
        ("speculative_algorithm", given.spec_method),
        ("speculative_num_steps", given.spec_tokens),
        ("speculative_draft_model_path", given.spec_draft),
        ("speculative_eagle_topk", given.eagle_topk),
        ("speculative_num_draft_tokens", given.draft_tokens),
    ):
        s.put(name, value, "flag")
    args, found, as_dict = server_args(log)
    rel = _version(log, given, as_dict, s, notes)
    for name in FIELDS:
        s.put(name, args.get(name), found.source if found else "")
    if (f := log.last(SNAPSHOT)) is not None:
        s.put("model_path", f[1], f.source)
    if (f := log.last(SCHED)) is not None:
        s.put("context_length", int(f[5]), f.source)
    return s, rel


def _strategy_flag(s: Settings) -> str:
    if s.get("disable_radix_cache"):
        return "off"
    chosen = s.get("mamba_radix_cache_strategy") or s.get("mamba_scheduler_strategy") or "auto"
    return str(chosen)


def scenario(log: Log, s: Settings, rel: Release, given: LogGiven, notes: list[str]) -> Scenario:
    from hybridplan.engines.sglang.settings import SglangSettings
    from hybridplan.loader import load_logged_model, load_model

    ref = s.get("model_path")
    if ref is None:
        raise PlanError("the log does not name the model: pass --model")
    if s.sources["model_path"] == "flag":
        spec = load_model(str(ref))
    else:
        loaded = log.last(LOADED_TYPE)
        spec, how = load_logged_model(str(ref), loaded[1] if loaded else None)
        notes.append(f"model {ref}: {spec.name}, {how}")
    rel.check_served(spec)
    ctx = s.get("context_length")
    if not isinstance(ctx, int):
        ctx = default_ctx(spec)
        s.put("context_length", ctx, "default (the model's maximum)")
    draft = s.get("speculative_num_draft_tokens") if s.get("speculative_algorithm") else None
    settings = SglangSettings(
        release=rel,
        radix=_strategy_flag(s),
        overlap=not s.get("disable_overlap_schedule"),
        full_memory_ratio=float(s.get("mamba_full_memory_ratio") or FULL_MEMORY_RATIO),
        max_running_requests=s.get("max_running_requests"),
        max_mamba_cache_size=s.get("max_mamba_cache_size"),
        page_size=int(s.get("page_size") or 1),
        draft_tokens=int(draft) if draft else None,
        mem_fraction_static=float(s.get("mem_fraction_static")) if s.get("mem_fraction_static") else None,
        hicache=_hicache(log, s),
    )
    kv = s.get("kv_cache_dtype")
    if kv in (None, "auto"):  # a ModelOpt checkpoint's fp8 KV under auto (hybridplan/engines/sglang/dtypes.py)
        from hybridplan.engines.sglang.dtypes import checkpoint_kv

        if (forced := checkpoint_kv(spec, settings.release, None)) is not None:
            s.values["kv_cache_dtype"] = forced[0]
            s.sources["kv_cache_dtype"] = f"auto resolved to {forced[0]} by {forced[1]}"
    dtypes = DtypeChoice(
        None if s.get("dtype") in (None, "auto") else str(s.get("dtype")),
        None,
        None if s.get("mamba_ssm_dtype") is None else str(s.get("mamba_ssm_dtype")),
        None if kv in (None, "auto") else str(kv),
    )
    sp = _speculative(s, spec, rel, notes)
    return Scenario(
        spec,
        ctx=ctx,
        tp=int(s.get("tp_size") or 1),
        dtypes=dtypes,
        engine=ENGINE,
        sglang=settings,
        spec_tokens=sp.num_tokens,
        speculative=sp,
        allow_long_context=True,
    )


def _steps(s: Settings, sp):
    """As hybridplan/build.py: the Scenario counts the steps (``speculative_num_steps``, else D − 1) and D is
    ``SglangSettings.draft_tokens``."""
    from msgspec.structs import replace

    steps = s.get("speculative_num_steps")
    steps = int(steps) if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0 else sp.num_tokens - 1
    return replace(sp, num_tokens=steps)


def _speculative(s: Settings, spec, rel: Release, notes: list[str]):
    """The speculative algorithm and draft of the server args, read as ``speculative_from_sglang`` reads the
    flags; a draft that cannot be read is said in the notes (the draft tokens still size the buffers)."""
    from hybridplan.engines.sglang.speculative import SglangFlags, speculative_from_sglang
    from hybridplan.scenario import Speculative

    algorithm = s.get("speculative_algorithm")
    if not algorithm:
        return Speculative()

    def num(name: str) -> int | None:
        value = s.get(name)
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    draft = s.get("speculative_draft_model_path")
    try:
        flags = SglangFlags(
            str(algorithm),
            None if draft is None else str(draft),
            num("speculative_num_steps"),
            num("speculative_eagle_topk"),
            num("speculative_num_draft_tokens"),
        )
        return _steps(s, speculative_from_sglang(flags, spec, rel.version))
    except PlanError as exc:
        notes.append(f"the speculative draft ({algorithm}, {draft}) could not be read: {exc}")
        return Speculative()


def _gb(n: float) -> str:
    return f"{n / GB:.2f}"


def _memory(log: Log, sc: Scenario, given: LogGiven, s: Settings) -> tuple[float, float] | None:
    """R, the memory split between the pools (bytes), as an interval: exact from --kv-budget; else free memory
    after loading less (1 − mem_fraction_static) of it before, from the "Load weight" lines (0.01 GB each)."""
    if given.kv_budget is not None:
        s.put("memory split (R)", f"{given.kv_budget:,} B", "flag")
        return float(given.kv_budget), float(given.kv_budget)
    begin, end = log.last(LOAD_BEGIN), log.last(LOAD_END)
    if begin is None or end is None or sc.sglang.mem_fraction_static is None:
        return None
    keep = 1 - sc.sglang.mem_fraction_static
    pre, post = float(begin[1]), float(end[1])
    s.put("free before loading", f"{begin[1]} GB", begin.source)
    s.put("free after loading", f"{end[1]} GB", end.source)
    lo = (post - 0.005 - (pre + 0.005) * keep) * GB
    hi = (post + 0.005 - (pre - 0.005) * keep) * GB
    return lo, hi


def _with_budget(sc: Scenario, r: float) -> Scenario:
    return replace(sc, budget=Budget(kv_budget=int(r)))


def check(log: Log, given: LogGiven) -> LogCheck:
    """The log's figures beside the prediction; a build between two releases (``--sglang-version
    0.5.17.dev…``, ``releases.neighbours``) is checked with each one's rules, the one that reproduces the most
    figures kept and said, and the model refused only when neither runs it."""
    from msgspec.structs import replace as with_

    from hybridplan.engines.sglang.releases import neighbours
    from hybridplan.errors import NotServed

    candidates = neighbours(given.sglang_version) if given.sglang_version else ()
    if len(candidates) < 2:
        return _check(log, given)
    tried, refusals = [], []
    for rel in candidates:
        try:
            tried.append((rel, _check(log, with_(given, sglang_version=rel.version))))
        except NotServed as exc:
            refusals.append(str(exc))
    names = " and ".join(r.version for r in sorted(candidates, key=lambda r: r.key))
    if not tried:
        raise NotServed(
            f"SGLang {given.sglang_version} is a build between {names}, and neither runs the model: "
            + "; ".join(refusals)
        )
    rel, best = max(tried, key=lambda t: (sum(r.ok for r in t[1].rows), -tried.index(t)))
    why = "; ".join(
        f"{r.version}'s: {sum(not x.ok for x in c.rows)} of {len(c.rows)} figures differ" for r, c in tried if r != rel
    ) or "; ".join(refusals)
    note = (
        f"SGLang {given.sglang_version} is a build between releases {names}: checked against both, "
        f"{rel.version}'s rules kept ({sum(x.ok for x in best.rows)} of {len(best.rows)} figures match; {why})"
    )
    settings = tuple(
        with_(x, value=f"{given.sglang_version} (checked as {rel.version})") if x.name == "version" else x
        for x in best.settings
    )
    return with_(best, settings=settings, notes=(note, *best.notes))


def _hicache(log: Log, s: Settings):
    """The hierarchical cache the server arguments (or a host pool line) say is on, with its flags."""
    from hybridplan.engines.sglang.hicache import HiCache

    if not s.get("enable_hierarchical_cache"):
        if (f := log.last(HOST_KV)) is None and (f := log.last(HOST_MAMBA)) is None:
            return None
        s.put("enable_hierarchical_cache", True, f.source)
    size = s.get("hicache_size")
    ratio = s.get("hicache_ratio")
    return HiCache(
        ratio=float(ratio) if ratio is not None else None,
        size_gb=float(size or 0),
        write_policy=str(s.get("hicache_write_policy") or "write_through"),
        mem_layout=s.get("hicache_mem_layout"),
        io_backend=str(s.get("hicache_io_backend") or "kernel"),
    )


def _host_rows(
    log: Log, sc: Scenario, fp, page: int, pools: tuple[int | None, int | None, int | None], out: list[NotModelled]
) -> list[Row]:
    """The host pools the log prints beside those hybridplan sizes for its device pools (hicache.py): ``pools``
    is (the Mamba pool's states, the KV pool's tokens, max_running_requests)."""
    from hybridplan.engines.sglang import hicache
    from hybridplan.engines.sglang.pool import SpecBuffers
    from hybridplan.errors import Refused

    kv_line, m_line = log.last(HOST_KV), log.last(HOST_MAMBA)
    hc, rel = sc.sglang.hicache, sc.sglang.release
    k, t, n = pools
    if hc is None or (kv_line is None and m_line is None):
        return []
    if k is None or t is None:
        for f, what in ((kv_line, "KV host pool"), (m_line, "Mamba host pool")):
            if f is not None:
                out.append(NotModelled(ENGINE, what, f.line.excerpt, "the device pools are not known from the log"))
        return []
    d = sc.sglang.draft(sc.spec_tokens)
    spec = 0
    if d:
        rows_s = (n if rel.spec_rows_follow_requests and n is not None else k) + 1
        buf = SpecBuffers(rows_s, d, fp, dedup=False)  # the split counts the dense view (hicache.for_fit)
        spec = buf.bytes
    layers = sum(g.count for g in fp.kv)
    unit = fp.kv_bytes_per_token + (hicache.draft_layers(rel, sc) * fp.kv_bytes_per_token // layers if layers else 0)
    from hybridplan.engines.sglang.pool import Pool

    pool = Pool(k, fp)
    try:
        dev = hicache.DevicePools(
            t, unit, (t + page) * fp.kv_bytes_per_token, page, k, fp.conv_bytes + fp.ssm_bytes, pool.bytes + spec
        )
        h = hicache.host_pools(rel, hc, dev)
    except Refused as exc:
        for f, what in ((kv_line, "KV host pool"), (m_line, "Mamba host pool")):
            if f is not None:
                out.append(NotModelled(ENGINE, what, f.line.excerpt, f"SGLang {rel.version} refuses it: {exc}"))
        return []
    rows = []
    if kv_line is not None:
        if kv_line[1] is not None:
            rows.append(Row(ENGINE, "KV host pool tokens", kv_line[1], str(h.kv.size)))
        rows.append(Row(ENGINE, "KV host pool (GB)", kv_line[2] or kv_line[3], f"{h.kv.bytes / hicache.GB:.2f}"))
    if m_line is not None:
        if m_line[2] is not None:
            rows.append(Row(ENGINE, "Mamba host pool states", m_line[2], str(h.mamba.size)))
        rows.append(Row(ENGINE, "Mamba host pool (GB)", m_line[1], f"{h.mamba.bytes / hicache.GB:.2f}"))
        rows.append(Row(ENGINE, "host pool layout", m_line[3], h.layout))
    return rows


def _check(log: Log, given: LogGiven) -> LogCheck:
    from hybridplan.engines.sglang.pool import Admission, Pool, SpecBuffers, footprint, per_request_bytes
    from hybridplan.engines.sglang.radix import page_size
    from hybridplan.engines.sglang.radix import strategy as run_strategy

    notes: list[str] = []
    s, rel = read_settings(log, given, notes)
    sc = scenario(log, s, rel, given, notes)
    fp, per = footprint(sc), per_request_bytes(footprint(sc))
    strat = run_strategy(sc)
    page = page_size(sc, strat)
    s.put("radix strategy", strat.name, f"SGLang {rel.version}'s choice for these arguments")
    rows: list[Row] = []
    out: list[NotModelled] = []
    if int(s.get("pp_size") or 1) > 1 or (s.get("enable_dp_attention") and int(s.get("dp_size") or 1) > 1):
        why = "pipeline parallelism" if int(s.get("pp_size") or 1) > 1 else "DP attention"
        for p in (POOL, KV, SCHED, CAP):
            if (f := log.last(p)) is not None:
                out.append(NotModelled(ENGINE, p.pattern[:30], f.line.excerpt, f"{why} is not modelled"))
        return LogCheck(sc.spec.name, s.listed(), (), tuple(out), tuple(notes))

    pool_line, kv_line, sched, cap_line = log.last(POOL), log.last(KV), log.last(SCHED), log.last(CAP)
    logged_k = int(pool_line[1]) if pool_line is not None and pool_line[1] else None
    logged_t = int(kv_line[2]) if kv_line is not None else (int(sched[1]) if sched is not None else None)
    k, t = logged_k, logged_t
    memory = _memory(log, sc, given, s)
    from_tokens = memory is None and logged_t is not None and bool(fp.kv_bytes_per_token)
    either = None  # the pool sizes of every split that leaves the logged tokens, where more than one does
    if from_tokens:
        fits = _from_tokens(sc, fp, strat, page, logged_t)
        chosen = next((f for f in fits if f[2] == logged_k), fits[0])
        memory = chosen[:2]
        s.put("max_total_num_tokens", logged_t, (kv_line or sched).source)
        notes.append(
            'no KV budget (--kv-budget) and no "Load weight begin" line: the memory split is taken as '
            f"the one that leaves the logged {logged_t:,} KV tokens ({_gb(memory[0])} GB)"
        )
        if len(fits) > 1:
            either = [f[2] for f in fits]
            notes.append(
                f"{len(fits)} memory splits leave the logged {logged_t:,} KV tokens: "
                + ", ".join(f"{_gb(lo)} GB with max_mamba_cache_size {k}" for lo, _, k in fits)
                + (f"; the logged {logged_k} is one of them, and its split is checked" if logged_k in either else "")
            )
    if memory is not None and (k is not None or t is not None):
        k_pred, t_pred = _predict(sc, strat, page, memory, (logged_k, logged_t))
        if logged_k is not None:
            shown = str(k_pred) if either is None or logged_k in either else " or ".join(map(str, either))
            rows.append(Row(ENGINE, "max_mamba_cache_size", str(logged_k), shown))
        if logged_t is not None and not from_tokens:
            rows.append(Row(ENGINE, "KV pool tokens", str(logged_t), str(t_pred)))
        k, t = k_pred if k is None else k, t_pred if t is None else t
    elif k is not None or t is not None:
        notes.append('no KV budget (--kv-budget) and no "Load weight" lines: the pool sizes are taken from the log')
        if logged_k is not None:
            s.put("max_mamba_cache_size", logged_k, pool_line.source)
        if logged_t is not None:
            s.put("max_total_num_tokens", logged_t, (kv_line or sched).source)
    requested = sc.sglang.requested(sc.spec_tokens)
    admission = Admission(rel, k, strat.ratio, t, sc.ctx, requested) if k is not None and t is not None else None
    n = int(sched[4]) if sched is not None else (admission.value if admission else None)
    if pool_line is not None and k is not None:
        pool = Pool(k if rel.logs_pool_size else (n or k), fp, rel.logs_pool_size)
        rows.append(Row(ENGINE, f"conv_state size (GB, {pool.size} slots)", pool_line[2], _gb(pool.conv_bytes)))
        rows.append(Row(ENGINE, f"ssm_state size (GB, {pool.size} slots)", pool_line[3], _gb(pool.ssm_bytes)))
        d = sc.sglang.draft(sc.spec_tokens)
        if pool_line[4] is not None and d and n is not None:
            rows_s = (n if rel.spec_rows_follow_requests else k) + 1
            buf = SpecBuffers(rows_s, d, fp, dedup=rel.at_least("0.5.14"))
            rows.append(
                Row(ENGINE, f"intermediate_ssm_state_cache (GB, {rows_s} rows × {d})", pool_line[4], _gb(buf.ssm_bytes))
            )
            rows.append(
                Row(
                    ENGINE,
                    f"intermediate_conv_window_cache (GB, {rows_s} rows × {d})",
                    pool_line[5],
                    _gb(buf.conv_bytes),
                )
            )
    if kv_line is not None:
        half = (int(kv_line[2]) + page) * fp.kv_bytes_per_token // 2
        rows.append(Row(ENGINE, f"K size (GB, {int(kv_line[2]):,} tokens)", kv_line[3], _gb(half)))
        rows.append(Row(ENGINE, f"V size (GB, {int(kv_line[2]):,} tokens)", kv_line[4], _gb(half)))
        if kv_line[1]:
            rows.append(Row(ENGINE, "KV cache dtype", kv_line[1].removeprefix("torch."), fp.dtypes.kv))
    if sched is not None and admission is not None:
        rows.append(Row(ENGINE, "max_running_requests", sched[4], str(admission.value)))
    if cap_line is not None:
        rows.append(Row(ENGINE, "state slots per request", cap_line[3], str(strat.ratio)))
        rows.append(
            Row(
                ENGINE,
                f"max_running_requests cap (max_mamba_cache_size {cap_line[2]})",
                cap_line[1],
                str(int(cap_line[2]) // strat.ratio),
            )
        )
    if (f := log.last(REDUCED)) is not None and admission is not None:
        rows.append(Row(ENGINE, f"max_running_requests reduced from {f[1]}", f[2], str(admission.value)))
    if (f := log.last(NOT_ENOUGH)) is not None:
        rows.append(Row(ENGINE, "mamba_cache_per_req (MB)", f[3], f"{per / (1 << 20):.2f}"))
        rows += _not_enough(sc, fp, strat, f)
    rows += _host_rows(log, sc, fp, page, (k, t, n), out)
    for pattern, group, figure, why in NOT_MODELLED:
        if (f := log.last(pattern)) is not None:
            out.append(NotModelled(ENGINE, figure, f[group], why))
    if per and rel.split != "padded" and memory is not None:
        notes.append(f"SGLang {rel.version} counts K state rows in its split and allocates K + 1")
    return LogCheck(sc.spec.name, s.listed(), tuple(rows), tuple(out), tuple(notes))


def _predict(
    sc: Scenario, strat, page: int, memory: tuple[float, float], logged: tuple[int | None, int | None]
) -> tuple[int, int]:
    """K and T for the memory split: the R in the logged interval that reproduces the logged (K, T) if there
    is one (the "Load weight" lines print 0.01 GB, so R is known to a few MB), else the interval's middle."""
    from hybridplan.engines.sglang.pool import admit, footprint, split

    (lo, hi), (logged_k, logged_t), fp = memory, logged, footprint(sc)
    step = max(fp.kv_bytes_per_token * page or 1 << 20, (hi - lo) / 10_000, 1.0)
    r, first = lo, None
    while r <= hi:
        try:
            at = _with_budget(sc, r)
            part = split(at, fp, strat.name, strat.ratio)
        except PlanError:
            r += step
            continue
        k, t = part.pool_size, admit(at, fp, part, strat, page).kv_tokens
        first = first or (k, t)
        if (logged_k is None or k == logged_k) and (logged_t is None or t == logged_t):
            return k, t
        r += step
    try:
        at = _with_budget(sc, (lo + hi) / 2)
        mid = split(at, fp, strat.name, strat.ratio)
    except PlanError:
        if first is None:
            raise
        return first
    return mid.pool_size, admit(at, fp, mid, strat, page).kv_tokens


def _from_tokens(sc: Scenario, fp, strat, page: int, tokens: int) -> list[tuple[float, float, int]]:
    """Every memory split that leaves ``tokens`` KV tokens, as (low, high, K): their bytes plus what the split
    charged besides (the pool's K rows and the speculative buffers), less the tokens added beyond the split under
    speculative decoding (``pool.draft_headroom``), to within one page of cells. A split one state row larger
    charges one row more and may leave the same tokens: K and K + 1 (rarely more) can both fit, so each is
    tried from the lowest up, and every one that reproduces the tokens is returned."""
    from hybridplan.engines.sglang.pool import admit, draft_headroom, per_request_bytes, split

    cell = fp.kv_bytes_per_token * page

    def settle(r: float) -> float:
        for _ in range(200):  # the pool's size follows the memory: R = KV bytes + what the split charges at R
            at = _with_budget(sc, max(r, 1.0))
            part = split(at, fp, strat.name, strat.ratio)
            extra = draft_headroom(
                sc.sglang.release, admit(at, fp, part, strat, page).request_pool, sc.sglang.draft(sc.spec_tokens)
            )
            nxt = max(tokens - extra, 0) // page * cell + (r - part.kv_bytes)
            if abs(nxt - r) < 1:
                break
            r = nxt
        return r

    def fits(r: float) -> int | None:
        try:
            at = _with_budget(sc, max(r, 1.0))
            part = split(at, fp, strat.name, strat.ratio)
        except PlanError:
            return None
        return part.pool_size if admit(at, fp, part, strat, page).kv_tokens == tokens else None

    low = settle(float(tokens // page * cell))
    out = [(low, low + cell - 1, k)] if (k := fits(low)) is not None else []
    per = per_request_bytes(fp)
    if out and per:
        for more in range(1, 5):  # K + more rows: the same tokens at R grown by their bytes
            r = settle(low + more * per * (1 + sc.sglang.draft(sc.spec_tokens)))
            k = fits(r)
            if k is not None and all(k != f[2] for f in out):
                out.append((r, r + cell - 1, k))
    return out or [(low, low + cell - 1, -1)]


def _not_enough(sc: Scenario, fp, strat, f: Found) -> list[Row]:
    """The refusal's K from its own total_rest_memory (0.01 GB): K = ⌊(R·r/(1+r) − per) / per⌋ (0.5.17 on)."""
    from hybridplan.engines.sglang.pool import per_request_bytes

    r_gb, per = float(f[2]), per_request_bytes(fp)
    ratio = sc.sglang.full_memory_ratio
    ks = {
        int(((r_gb + e) * GB * ratio / (1 + ratio) - (per if sc.sglang.release.split == "padded" else 0)) // per)
        for e in (-0.005, 0.0, 0.005)
    }
    logged = int(f[1])
    predicted = logged if logged in ks else min(ks, key=lambda k: abs(k - logged))
    return [Row(ENGINE, f"max_mamba_cache_size from total_rest_memory {f[2]} GB", f[1], str(predicted))]
