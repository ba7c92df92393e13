"""Every published speed measurement under tests/data/speed against hybridplan's prediction for the same
settings (hybridplan/speed), scored by grouped k-fold: the only accuracy figure.

Three kinds of fixture, each file holding one source's rows (one issue, one cookbook page, one blog post) and the
settings:

- ``gdn_decode_kernel``: one GDN layer's decode update at a batch (µs), predicted from the state the layer reads
  and writes (the scenario's Footprint) against the GPU's bandwidth and the kernel floor;
- ``ssd_prefill_kernel``: one Mamba-2 layer's chunked scan over T tokens (tokens/s), from its chunk FLOPs and
  bytes (hybridplan/speed/work.py ``scan_layer_work``);
- ``bench``: what ``vllm bench serve`` / ``sglang.bench_serving`` printed (output tokens/s, TTFT, TPOT, ITL),
  predicted by hybridplan/speed/bench.py with the running batch capped as ``hybridplan fit`` finds it.

Grouped k-fold (``kfold``): the files are dealt into K folds, whole; for each fold the efficiencies that
hybridplan fits (``fit``: the decode terms on the TPOTs, the prefill terms on the TTFTs, the grouped-GEMM term on
the MoE TTFTs, each a grid search) are fitted on the other folds' benchmark rows and every row of the fold is
predicted with them. No file is ever both fitted and tested. The error table is per figure (TPOT, TTFT, output
tok/s), hybrids and attention references apart, per regime (concurrency 1, 2–127, ≥ 128: "saturated"). A row
hybridplan cannot price (a GPU with no datasheet row, a model not shipped, a finite request rate) is kept in the
corpus and counted as not predicted, with the reason.

    python validation/speed.py [--folds K] [--json | --markdown] [--rows] [--in-sample] [--fit]

``--fit`` prints the efficiencies fitted on every file (what would ship); ``--in-sample`` prints the old
per-figure table with the shipped efficiencies (DEFAULT), which saw some of these files: not an accuracy figure.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from msgspec.structs import replace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hybridplan.engines.sglang.releases import release as sglang_release  # noqa: E402
from hybridplan.engines.sglang.settings import SglangSettings  # noqa: E402
from hybridplan.engines.vllm.releases import release as vllm_release  # noqa: E402
from hybridplan.engines.vllm.settings import VllmSettings  # noqa: E402
from hybridplan.errors import PlanError  # noqa: E402
from hybridplan.gpus import gpu as gpu_entry  # noqa: E402
from hybridplan.loader import load_model  # noqa: E402
from hybridplan.scenario import Budget, DtypeChoice, Scenario  # noqa: E402
from hybridplan.speed.bench import DEFAULT_PROMPTS, Workload, prepare, price, spread  # noqa: E402
from hybridplan.speed.gpus import datasheet  # noqa: E402
from hybridplan.speed.model import DEFAULT, FITTED_ON_MOE, Efficiency, kind_time  # noqa: E402
from hybridplan.speed.work import Work, footprint_of, recurrent_update_flops, scan_layer_work  # noqa: E402

DATA = ROOT / "tests" / "data" / "speed"


#: the settings every benchmark row must carry (in the row, or once for the file); the engine's release may be
#: missing only where the file says why (``release_note``), the checkpoint's dtype or quantization likewise
BENCH_REQUIRED = ("id", "figure", "value", "engine", "gpu", "tp", "model", "input", "output", "concurrency")
KERNEL_REQUIRED = {
    "gdn_decode_kernel": ("id", "figure", "value", "model", "gpu", "tp", "batch"),
    "ssd_prefill_kernel": ("id", "figure", "value", "model", "gpu", "tp", "tokens", "chunk", "variant"),
}
#: figures a benchmark prints, and the class each is scored in
FIGURES = {
    "mean_tpot_ms": "TPOT",
    "median_tpot_ms": "TPOT",
    "mean_itl_ms": "TPOT",
    "median_itl_ms": "TPOT",
    "mean_ttft_ms": "TTFT",
    "median_ttft_ms": "TTFT",
    "output_tok_s": "output tok/s",
    "total_tok_s": "total tok/s",
    # a page that prints "TTFT" / "TPOT" without saying mean or median: compared to the mean
    "ttft_ms": "TTFT",
    "tpot_ms": "TPOT",
}
from hybridplan.speed.ranges import PATH as RANGES_PATH  # noqa: E402
from hybridplan.speed.ranges import REGIMES, regime  # noqa: E402  (the regimes, in one place)


def settings(doc: dict, m: dict) -> dict:
    """One row's settings: the file's, overridden by the row's; refused (PlanError) where one it needs is missing."""
    s = {k: v for k, v in doc.items() if k != "measurements" and not k.startswith("_")}
    s.update(m)
    need = BENCH_REQUIRED if doc["kind"] == "bench" else KERNEL_REQUIRED[doc["kind"]]
    missing = [k for k in need if s.get(k) is None]
    if doc["kind"] == "bench":
        if s.get("figure") not in FIGURES:
            missing.append(f"a known figure (not {s.get('figure')!r})")
        release = "vllm_version" if s.get("engine") == "vllm" else "sglang_version"
        if not s.get(release) and not s.get("release_note"):
            missing.append(f"{release} or release_note")
        if not (s.get("dtype") or s.get("quantization")):
            missing.append("dtype or quantization")
    if not str(s.get("source", "")).startswith("https://"):
        missing.append("source URL")
    if missing:
        raise PlanError(f"{doc.get('_file')}: row {m.get('id')!r} lacks {', '.join(missing)}")
    return s


@dataclass(frozen=True)
class Row:
    file: str
    id: str
    kind: str
    figure: str
    measured: float
    #: None: not predicted (``reason`` says why)
    predicted: float | None
    hybrid: bool
    fit: bool
    bound: str = ""
    concurrency: int = 0
    gpu: str = ""
    reason: str = ""

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0

    def to_dict(self) -> dict:
        return {
            "file": self.file,
            "id": self.id,
            "kind": self.kind,
            "figure": self.figure,
            "measured": self.measured,
            "predicted": self.predicted,
            "error": None if self.predicted is None else self.error,
            "hybrid": self.hybrid,
            "fit": self.fit,
            "bound": self.bound,
            "concurrency": self.concurrency,
            "gpu": self.gpu,
            "reason": self.reason,
        }


def hybrid_of(doc: dict, m: dict) -> bool:
    """Whether the row's model is a hybrid: the row's ``hybrid_row`` where a file mixes both, else the file's."""
    return bool(m["hybrid_row"] if "hybrid_row" in m else doc.get("hybrid"))


def _model(ref: str):
    path = ROOT / ref
    return load_model(str(path) if path.exists() else ref)


def _gdn(doc: dict, m: dict, eff: Efficiency = DEFAULT) -> Row:
    s = settings(doc, m)
    spec = _model(s["model"])
    sc = Scenario(spec=spec, ctx=1, tp=s["tp"], vllm=VllmSettings(release=vllm_release(s.get("vllm_version"))))
    fp = footprint_of(sc)
    g = next(x for x in fp.state if x.kind == "gdn")
    mixer = next(x for x in spec.recurrent if x.kind == "gdn")
    b = s["batch"]
    # the kernel reads and writes the recurrent state (the conv window is another kernel's)
    w = Work(
        "gdn",
        1,
        state_bytes=2.0 * b * g.ssm_bytes_per_layer,
        scalar_flops=b * recurrent_update_flops(mixer, s["tp"]),
        kernels=1,
    )
    kt = kind_time(w, datasheet(s["gpu"]), eff, "bf16", graphs=True)
    return Row(
        doc["_file"],
        s["id"],
        doc["kind"],
        s["figure"],
        s["value"],
        kt.seconds * 1e6,
        True,
        bool(doc.get("fit")),
        kt.bound,
        b,
        s["gpu"],
    )


def _ssd(doc: dict, m: dict, eff: Efficiency = DEFAULT) -> Row:
    s = settings(doc, m)
    spec = _model(s["model"])
    mixer = next(x for x in spec.recurrent if x.kind == "mamba2")
    w = scan_layer_work(mixer, s["tp"], s["tokens"], s["chunk"], fused=s["variant"] == "fused")
    kt = kind_time(w, datasheet(s["gpu"]), eff, "bf16", graphs=True)
    return Row(
        doc["_file"],
        s["id"],
        doc["kind"],
        s["figure"],
        s["value"],
        s["tokens"] / kt.seconds,
        True,
        bool(doc.get("fit")),
        kt.bound,
        1,
        s["gpu"],
    )


def acceptance_of(accept_length: float, k: int) -> float:
    """The per-token acceptance a at which k proposed tokens emit ``accept_length`` tokens a step on average,
    (1 − a^(k+1)) / (1 − a) = L, by bisection (L runs from 1 at a = 0 to k + 1 as a → 1)."""
    if not 1 <= accept_length < k + 1:
        raise PlanError(f"an accept length of {accept_length} is outside [1, {k + 1}) for {k} proposed tokens")
    lo, hi = 0.0, 1.0 - 1e-12
    for _ in range(100):
        mid = (lo + hi) / 2
        if (1 - mid ** (k + 1)) / (1 - mid) < accept_length:
            lo = mid
        else:
            hi = mid
    return lo


def _prepared(file: str, index: int):
    """The row's benchmark sized once (the running batch from ``fit``, the steps' work): what no efficiency
    changes. Raises PlanError where hybridplan cannot price it (the refusal cached as well)."""
    got = _try_prepare(file, index)
    if isinstance(got, PlanError):
        raise got
    return got


@cache
def _try_prepare(file: str, index: int):
    try:
        return _prepare(file, index)
    except PlanError as exc:
        return exc


def _prepare(file: str, index: int):
    doc = next(d for d in _all_docs() if d["_file"] == file)
    s = settings(doc, doc["measurements"][index])
    if s.get("request_rate") not in (None, "inf"):
        raise PlanError(f"a finite request rate ({s['request_rate']}/s) is not modelled by speed's benchmark")
    if FIGURES[s["figure"]] == "TTFT" and int(s["concurrency"]) > 1 and not s.get("num_prompts"):
        raise PlanError("the prompt count, on which a queued request's TTFT depends, is not stated")
    spec = _model(s["model"])
    g = gpu_entry(s["gpu"])
    sheet = datasheet(g.key)
    spec_tokens, acceptance = 0, None
    sp = s.get("speculative")
    if sp:
        if sp.get("accept_length") is None or sp.get("tokens") is None:
            raise PlanError("speculative decoding without a stated accept length (or draft token count)")
        spec_tokens = int(sp["tokens"])
        acceptance = acceptance_of(float(sp["accept_length"]), spec_tokens)
    lengths = None
    if s.get("input_range") or s.get("output_range"):
        # each request's lengths as the run drew them: uniform over the stated ranges (the file says whence)
        n = s.get("num_prompts") or DEFAULT_PROMPTS
        i_range = tuple(s.get("input_range") or (s["input"], s["input"]))
        o_range = tuple(s.get("output_range") or (s["output"], s["output"]))
        lengths = spread((int(i_range[0]), int(i_range[1])), (int(o_range[0]), int(o_range[1])), n)
    wl = Workload(s["input"], s["output"], s["concurrency"], s.get("num_prompts"), acceptance, lengths=lengths)
    sc = Scenario(
        spec=spec,
        ctx=wl.input + wl.output,
        tp=s["tp"],
        engine=s["engine"],
        spec_tokens=spec_tokens,
        dtypes=DtypeChoice(kv=s.get("kv_dtype")),
        dp=s.get("dp") or 1,
        ep_size=s.get("ep") or 1,
        expert_parallel=(s.get("ep") or 1) > 1,
        vllm=VllmSettings(release=vllm_release(s.get("vllm_version")), max_num_seqs=s.get("max_num_seqs")),
        sglang=SglangSettings(
            release=sglang_release(s.get("sglang_version")),
            mem_fraction_static=s.get("mem_fraction_static"),
            max_running_requests=s.get("max_running_requests"),
        ),
        budget=Budget(gpu_mem=g.total, gpu=g.key) if s.get("cap", True) else Budget(),
        allow_long_context=True,
    )
    return s, sheet, prepare(sc, wl)


def _bench(doc: dict, m: dict, eff: Efficiency = DEFAULT) -> Row:
    s = settings(doc, m)
    base = dict(
        file=doc["_file"],
        id=s["id"],
        kind=doc["kind"],
        figure=s["figure"],
        measured=s["value"],
        hybrid=hybrid_of(doc, m),
        fit=bool(doc.get("fit")),
        concurrency=int(s["concurrency"]),
        gpu=str(s["gpu"]),
    )
    try:
        _, sheet, p = _prepared(doc["_file"], doc["measurements"].index(m))
        b = price(p, sheet, eff)
    except PlanError as exc:
        return Row(predicted=None, reason=str(exc), **base)
    figure = s["figure"]
    total = b.output_tok_s * (p.workload.input + p.workload.output) / p.workload.output
    value = {
        "output_tok_s": b.output_tok_s,
        "total_tok_s": total,
        "mean_ttft_ms": b.mean_ttft_s * 1e3,
        "median_ttft_ms": b.median_ttft_s * 1e3,
        "mean_tpot_ms": b.tpot_s * 1e3,
        "median_tpot_ms": b.median_tpot_s * 1e3,
        "mean_itl_ms": b.tpot_s * 1e3,
        "median_itl_ms": b.median_tpot_s * 1e3,
        "ttft_ms": b.mean_ttft_s * 1e3,
        "tpot_ms": b.tpot_s * 1e3,
    }[figure]
    bound = b.prefill.main_bound[0] if "ttft" in figure else b.decode.main_bound[0]
    return Row(predicted=value, bound=bound, **base)


KINDS = {"gdn_decode_kernel": _gdn, "ssd_prefill_kernel": _ssd, "bench": _bench}


def fixtures() -> list[dict]:
    docs = []
    for path in sorted(DATA.glob("*.json")):
        doc = json.loads(path.read_text())
        doc["_file"] = path.name
        docs.append(doc)
    return docs


_DOCS: list[dict] | None = None

#: the files collected while the 02d model was designed, by someone who saw no prediction, and kept from its
#: designers (each carries ``collected`` with this marker): they stay out of the fit and the k-fold, and
#: ``--sealed`` scores the shipped DEFAULT (fitted on the other files) on them alone
SEALED = "sealed held-out set"


def is_sealed(doc: dict) -> bool:
    return SEALED in str(doc.get("collected", ""))


def _all_docs() -> list[dict]:
    global _DOCS
    if _DOCS is None:
        _DOCS = fixtures()
    return _DOCS


def _docs() -> list[dict]:
    """The corpus the fit and the k-fold use: every file but the sealed set."""
    return [d for d in _all_docs() if not is_sealed(d)]


def sealed_files() -> frozenset[str]:
    return frozenset(d["_file"] for d in _all_docs() if is_sealed(d))


def rows(
    eff: Efficiency = DEFAULT, only_fit: bool = False, files: tuple[str, ...] | frozenset | None = None
) -> list[Row]:
    """One Row per measurement of those files (every file by default), predicted with ``eff``."""
    return [
        KINDS[doc["kind"]](doc, m, eff)
        for doc in (_docs() if files is None else _all_docs())
        if (doc.get("fit") or not only_fit) and (files is None or doc["_file"] in files)
        for m in doc["measurements"]
    ]


# --- the fit: what hybridplan fits, as a function of the rows it is fitted on ---------------------------------

#: the grids of the coordinate search: the achieved fractions, the per-kernel GPU floor of a graph replay, each
#: engine's host time per decode step (fixed and per running request), a prefill chunk's host time (fixed and per
#: token), the grouped GEMM's half-efficiency rows, and the recurrent kernels' own fractions (on the kernel rows).
#: The other terms are derived (kernel counts, all-reduce tables, sampler bytes, graph sizes) and not fitted.
DECODE_GRID = {
    "hbm": (0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95),
    "kernel_floor_graph_us": (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 6.0, 8.0),
    "vllm_step_us": (0, 100, 200, 400, 800, 1600, 3200),
    "vllm_request_us": (0, 1, 2, 5, 10, 20, 40),
    "sglang_step_us": (0, 100, 200, 400, 800, 1600, 3200),
    "sglang_request_us": (0, 1, 2, 5, 10, 20, 40),
}
PREFILL_GRID = {
    "tensor": (0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8),
    "prefill_step_us": (0, 250, 500, 1000, 2000, 4000, 8000),
    "prefill_token_us": (0, 0.25, 0.5, 1, 2, 4),
    "ttft_request_us": (0, 2500, 5000, 10000, 20000, 40000, 80000),
}
MOE_GRID = {"expert_tokens_half": (0, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512)}
#: the recurrent kernels' own fractions, each on its kernel rows alone
KERNEL_GRIDS = {
    "gdn_decode_kernel": {
        "gdn_state_hbm": (0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9)
    },
    "ssd_prefill_kernel": {"ssd_scan": (0.05, 0.075, 0.1, 0.125, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.6, 0.7)},
}


def _kernel_loss(eff: Efficiency, files, kind: str) -> float | None:
    """Mean |log(predicted / measured)| over those files' kernel rows of that kind."""
    errs = [
        abs(math.log(r.predicted / r.measured))
        for doc in _docs()
        if doc["kind"] == kind and doc["_file"] in files
        for r in (KINDS[kind](doc, m, eff) for m in doc["measurements"])
        if r.predicted
    ]
    return sum(errs) / len(errs) if errs else None


def _kernel_search(base: Efficiency, files) -> Efficiency:
    best = base
    for kind, grid in KERNEL_GRIDS.items():
        for key, values in grid.items():
            scored = [(_kernel_loss(replace(best, **{key: v}), files, kind), v) for v in values]
            scored = [(loss, v) for loss, v in scored if loss is not None]
            if scored:
                best = replace(best, **{key: min(scored)[1]})
    return best


def _loss(eff: Efficiency, files, classes: tuple[str, ...], moe_only: bool = False) -> float | None:
    """Mean |log(predicted / measured)| over those files' predicted benchmark rows of those figure classes."""
    errs = []
    for doc in _docs():
        if doc["kind"] != "bench" or doc["_file"] not in files:
            continue
        if moe_only and not _is_moe(doc):
            continue
        for m in doc["measurements"]:
            if FIGURES.get(m.get("figure") or doc.get("figure")) not in classes:
                continue
            r = _bench(doc, m, eff)
            if r.predicted is not None and r.predicted > 0:
                errs.append(abs(math.log(r.predicted / r.measured)))
    return sum(errs) / len(errs) if errs else None


def _is_moe(doc: dict) -> bool:
    return _file_is_moe(doc["_file"])


@cache
def _file_is_moe(file: str) -> bool:
    """Whether every row of the file is of a model with routed experts."""
    from hybridplan.speed.work import experts

    doc = next(d for d in _all_docs() if d["_file"] == file)
    try:
        return all(experts(_model(settings(doc, m)["model"])) is not None for m in doc["measurements"])
    except PlanError:
        return False


def _search(base: Efficiency, grid: dict, files, classes, moe_only: bool = False, passes: int = 3) -> Efficiency:
    """Coordinate search: each term in turn over its grid with the others held, ``passes`` times round (or until
    a pass changes nothing)."""
    best, best_loss = base, _loss(base, files, classes, moe_only)
    if best_loss is None:
        return base
    for _ in range(passes):
        moved = False
        for key, values in grid.items():
            for v in values:
                e = replace(best, **{key: v})
                loss = _loss(e, files, classes, moe_only)
                if loss is not None and loss < best_loss - 1e-12:
                    best, best_loss, moved = e, loss, True
        if not moved:
            break
    return best


def fit(files=None) -> Efficiency:
    """The efficiencies that fit those files' rows best (every file by default), by grid search: the decode terms
    (HBM fraction, per-kernel graph floor, each engine's host time per step and per request) on the TPOTs and
    output tok/s, then
    the prefill terms (tensor fraction, a chunk's host time and per token) on the TTFTs, then the routed experts'
    grouped-GEMM term (expert_tokens_half) on the MoE models' TTFTs, each with the others held (a coordinate
    search from DEFAULT over the grids above), then the GDN and SSD kernels' own fractions on the kernel rows.
    A stage with no row keeps DEFAULT's values."""
    files = frozenset(d["_file"] for d in _docs()) if files is None else frozenset(files)
    # from the class defaults (round starting values), never from DEFAULT: DEFAULT is the fit on every file
    best = _search(Efficiency(), DECODE_GRID, files, ("TPOT", "output tok/s"))
    best = _search(best, PREFILL_GRID, files, ("TTFT",))
    best = _search(best, MOE_GRID, files, ("TTFT",), moe_only=True)
    best = _kernel_search(best, files)
    return replace(best, source=f"fitted on {len(files)} files of tests/data/speed (validation/speed.py fit)")


# --- grouped k-fold ---------------------------------------------------------------------------------------------


def priceable(doc: dict) -> int:
    """How many of a file's benchmark rows hybridplan can price (their settings alone decide it, not their
    measured values)."""
    if doc["kind"] != "bench":
        return 0
    return sum(not isinstance(_try_prepare(doc["_file"], i), PlanError) for i in range(len(doc["measurements"])))


def folds(k: int = 5) -> list[frozenset[str]]:
    """The test files of each of k folds: whole files (one source each), dealt largest first (by the rows
    hybridplan can price) to the fold with the fewest such rows so far (ties to the fold with fewer files, then
    the lower fold), so the folds weigh about the same in the fit."""
    sizes = sorted(((priceable(d), d["_file"]) for d in _docs()), key=lambda t: (-t[0], t[1]))
    bins: list[list[str]] = [[] for _ in range(k)]
    load = [0] * k
    for n, f in sizes:
        i = min(range(k), key=lambda j: (load[j], len(bins[j]), j))
        bins[i].append(f)
        load[i] += n
    return [frozenset(b) for b in bins]


def source_of(file: str) -> str:
    return next(d["source"] for d in _all_docs() if d["_file"] == file)


def kfold(k: int = 5) -> tuple[list[Row], list[tuple[frozenset[str], Efficiency]]]:
    """Every row predicted with efficiencies fitted on the other folds' files alone."""
    everything = frozenset(d["_file"] for d in _docs())
    out: list[Row] = []
    fitted = []
    for test in folds(k):
        train = everything - test
        assert not train & test
        eff = fit(train)
        fitted.append((test, eff))
        out += rows(eff, files=test)
    return out, fitted


def factor(r: Row) -> float:
    """How far off, as a ratio ≥ 1 either way."""
    return max(r.predicted / r.measured, r.measured / r.predicted)


def _quantile(xs: list[float], q: float) -> float:
    """The nearest-rank quantile."""
    xs = sorted(xs)
    return xs[max(0, math.ceil(q * len(xs)) - 1)]


def set_of(r: Row) -> str:
    if r.kind != "bench":
        return "kernel"
    return "hybrid" if r.hybrid else "reference"


def table(rs: list[Row]) -> list[dict]:
    """Per set (hybrid, attention reference), figure class and regime, and over all regimes: predicted rows,
    median |error|, P90 |error|, the worst as a factor (and its row), the share off by more than 2×; with the
    rows not predicted beside."""
    out = []
    bench = [r for r in rs if r.kind == "bench"]
    for which in ("hybrid", "reference"):
        for cls in dict.fromkeys(FIGURES.values()):
            for reg in (*REGIMES, "all"):
                sel = [
                    r
                    for r in bench
                    if set_of(r) == which
                    and FIGURES[r.figure] == cls
                    and (reg == "all" or regime(r.concurrency) == reg)
                ]
                if not sel:
                    continue
                got = [r for r in sel if r.predicted is not None]
                line = {"set": which, "figure": cls, "regime": reg, "rows": len(sel), "predicted": len(got)}
                if got:
                    errs = [abs(r.error) for r in got]
                    worst = max(got, key=factor)
                    line.update(
                        median=statistics.median(errs),
                        p90=_quantile(errs, 0.9),
                        worst=factor(worst),
                        worst_id=worst.id,
                        beyond_2x=sum(factor(r) > 2 for r in got) / len(got),
                        bias=statistics.median(r.error for r in got),
                    )
                out.append(line)
    for name in dict.fromkeys(kernel_group(r) for r in rs if r.kind != "bench"):
        got = [r for r in rs if r.kind != "bench" and kernel_group(r) == name]
        errs = [abs(r.error) for r in got]
        worst = max(got, key=factor)
        out.append(
            {
                "set": "kernel",
                "figure": name,
                "regime": "all",
                "rows": len(got),
                "predicted": len(got),
                "median": statistics.median(errs),
                "p90": _quantile(errs, 0.9),
                "worst": factor(worst),
                "worst_id": worst.id,
                "beyond_2x": sum(factor(r) > 2 for r in got) / len(got),
                "bias": statistics.median(r.error for r in got),
            }
        )
    return out


def kernel_group(r: Row) -> str:
    if r.kind == "gdn_decode_kernel":
        return f"GDN decode kernel, {r.gpu.upper()}"
    return "SSD prefill kernel, " + ("unfused (vLLM's)" if "unfused" in r.id else "fused (#27299)")


def group(r: Row) -> str:
    """The old in-sample table's grouping (``--in-sample``)."""
    if r.kind != "bench":
        return kernel_group(r)
    if r.file in FITTED_ON_MOE:  # its TTFTs fitted the grouped-GEMM term; its TPOTs fitted nothing
        what = "attention MoE (fitted)" if "ttft" in r.figure else "attention MoE (held out)"
    else:
        what = "hybrid" if r.hybrid else "attention (fitted)" if r.fit else "attention (held out)"
    return f"{what} {r.figure.replace('_', ' ')}"


def summary(rs: list[Row]) -> list[tuple[str, int, float, float, str]]:
    """The in-sample table: per figure, predicted fixtures, median |error|, worst as a factor, the worst."""
    out = []
    got = [r for r in rs if r.predicted is not None]
    for name in dict.fromkeys(group(r) for r in got):
        sel = [r for r in got if group(r) == name]
        worst = max(sel, key=factor)
        out.append((name, len(sel), statistics.median(abs(r.error) for r in sel), factor(worst), worst.id))
    return out


def corpus_counts() -> dict:
    """What the corpus holds: rows, files, GPUs, TP degrees, concurrencies, engines, hybrid and reference rows."""
    bench = [(d, settings(d, m)) for d in _docs() if d["kind"] == "bench" for m in d["measurements"]]
    kernels = sum(len(d["measurements"]) for d in _docs() if d["kind"] != "bench")
    return {
        "bench_rows": len(bench),
        "kernel_rows": kernels,
        "files": len(_docs()),
        "hybrid_rows": sum(hybrid_of(d, s) for d, s in bench),
        "reference_rows": sum(not hybrid_of(d, s) for d, s in bench),
        "gpus": sorted({str(s["gpu"]) for _, s in bench}),
        "tp": sorted({int(s["tp"]) for _, s in bench}),
        "concurrency": [min(int(s["concurrency"]) for _, s in bench), max(int(s["concurrency"]) for _, s in bench)],
        "engines": sorted({str(s["engine"]) for _, s in bench}),
        "models": sorted({str(s["model"]).rsplit("/", 1)[-1] for _, s in bench}),
    }


def ranges(rs: list[Row], k: int) -> dict:
    """The data file hybridplan/speed/ranges.json: per set, figure class and regime (and over every regime), the
    held-out rows' measured / predicted at P10 and P90 (nearest rank), from the grouped k-fold's rows alone."""
    cells = []
    bench = [r for r in rs if r.kind == "bench" and r.predicted]
    for which in ("hybrid", "reference"):
        for cls in ("TPOT", "TTFT", "output tok/s"):
            for reg in (*REGIMES, "all"):
                sel = [
                    r.measured / r.predicted
                    for r in bench
                    if set_of(r) == which
                    and FIGURES[r.figure] == cls
                    and (reg == "all" or regime(r.concurrency) == reg)
                ]
                if sel:
                    cells.append(
                        {
                            "set": which,
                            "figure": cls,
                            "regime": reg,
                            "rows": len(sel),
                            "p10": _quantile(sel, 0.1),
                            "median": statistics.median(sel),
                            "p90": _quantile(sel, 0.9),
                        }
                    )
    return {
        "command": f"PYTHONPATH=. python validation/speed.py --folds {k} --write-ranges",
        "what": "measured / predicted of the grouped k-fold's held-out rows (tests/data/speed), P10 and P90 "
        "by nearest rank, per model set, figure class and regime (validation/speed.py ranges)",
        "folds": k,
        "ranges": cells,
    }


def _pct(x) -> str:
    return "—" if x is None else f"{x:.1%}"


FITTED_KEYS = (*DECODE_GRID, *PREFILL_GRID, *MOE_GRID, *(k for g in KERNEL_GRIDS.values() for k in g))


def fold_table(fitted) -> str:
    """One line a fold: its test files and what its fit (on the other folds) chose."""
    lines = ["| fold | test files | " + " | ".join(FITTED_KEYS) + " |", "|---:|---|" + "---:|" * len(FITTED_KEYS)]
    for i, (test, eff) in enumerate(fitted, 1):
        files = ", ".join(f"`{f}`" for f in sorted(test))
        lines.append(
            f"| {i} | {files} | "
            + " | ".join("—" if getattr(eff, k) is None else f"{getattr(eff, k):g}" for k in FITTED_KEYS)
            + " |"
        )
    return "\n".join(lines)


def markdown(tab: list[dict], k: int, rs: list[Row], fitted=()) -> str:
    lines = ([fold_table(fitted), ""] if fitted else []) + [
        "| set | figure | regime | rows | predicted | median | P90 | worst | beyond 2× | median signed |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for t in tab:
        worst = f"{t['worst']:.2f}× (`{t['worst_id']}`)" if "worst" in t else "—"
        lines.append(
            f"| {t['set']} | {t['figure']} | {t['regime']} | {t['rows']} | {t['predicted']} | "
            f"{_pct(t.get('median'))} | {_pct(t.get('p90'))} | {worst} | {_pct(t.get('beyond_2x'))} | "
            f"{'—' if t.get('bias') is None else format(t['bias'], '+.1%')} |"
        )
    missing = [r for r in rs if r.predicted is None]
    if missing:
        lines += ["", f"Not predicted: {len(missing)} of {len(rs)} rows:", ""]
        why: dict[str, list[str]] = {}
        for r in missing:
            why.setdefault(r.reason, []).append(r.id)
        for reason, ids in sorted(why.items(), key=lambda t: -len(t[1])):
            lines.append(f"- {len(ids)} rows: {reason}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--rows", action="store_true", help="print every held-out row")
    ap.add_argument("--folds", type=int, default=5, help="K of the grouped k-fold (default 5)")
    ap.add_argument("--fit", action="store_true", help="fit the efficiencies on every file and print them")
    ap.add_argument(
        "--write-ranges",
        action="store_true",
        help=f"write the held-out P10–P90 ranges speed prints ({RANGES_PATH.relative_to(ROOT)})",
    )
    ap.add_argument(
        "--sealed",
        action="store_true",
        help="score the shipped DEFAULT on the sealed held-out files alone (collected after it was fitted)",
    )
    ap.add_argument(
        "--in-sample",
        action="store_true",
        help="the old table: every row at the shipped efficiencies (some fitted on these rows)",
    )
    args = ap.parse_args(argv)
    if args.folds < 2 or args.folds > len(_docs()):
        print(f"--folds must be from 2 to the number of files ({len(_docs())}), got {args.folds}", file=sys.stderr)
        return 2
    if args.fit:
        print(json.dumps(fit().to_dict(), indent=1))
        return 0
    if args.in_sample:
        rs = rows()
        for name, n, med, worst, wid in summary(rs):
            print(f"{name:<44} n={n:<3} median {med:6.1%}  worst {worst:5.2f}× ({wid})  [in-sample]")
        return 0
    if args.sealed:
        rs, fitted = rows(DEFAULT, files=sealed_files()), []
    else:
        rs, fitted = kfold(args.folds)
    tab = table(rs)
    if args.sealed and args.write_ranges:
        print("--write-ranges takes the k-fold's residuals, not the sealed set's", file=sys.stderr)
        return 2
    if args.write_ranges:
        RANGES_PATH.write_text(json.dumps(ranges(rs, args.folds), indent=1) + "\n")
        print(f"wrote {RANGES_PATH.relative_to(ROOT)}", file=sys.stderr)
    if args.json:
        print(
            json.dumps(
                {
                    "folds": [{"test": sorted(t), "efficiency": e.to_dict()} for t, e in fitted],
                    "corpus": corpus_counts(),
                    "table": tab,
                    "rows": [r.to_dict() for r in rs],
                },
                indent=1,
            )
        )
        return 0
    if args.markdown:
        print(markdown(tab, args.folds, rs, fitted))
        return 0
    if args.rows:
        for r in rs:
            if r.predicted is None:
                print(f"{r.id:<48} {r.figure:<15} {r.measured:>13,.2f} {'—':>13}  not predicted: {r.reason}")
            else:
                print(
                    f"{r.id:<48} {r.figure:<15} {r.measured:>13,.2f} {r.predicted:>13,.2f} {r.error:>+8.1%}  {r.bound}"
                )
        print()
    c = corpus_counts()
    print(
        f"corpus: {c['bench_rows']} benchmark rows ({c['hybrid_rows']} hybrid, {c['reference_rows']} reference) "
        f"and {c['kernel_rows']} kernel rows in {c['files']} files; GPUs {', '.join(c['gpus'])}; TP "
        f"{', '.join(map(str, c['tp']))}; concurrency {c['concurrency'][0]}–{c['concurrency'][1]}"
    )
    print(f"grouped {args.folds}-fold: each file fitted or tested, never both\n")
    for t in tab:
        if "median" in t:
            print(
                f"{t['set']:<9} {t['figure']:<28} {t['regime']:<18} n={t['predicted']:<3}/{t['rows']:<3} "
                f"median {t['median']:6.1%}  P90 {t['p90']:6.1%}  worst {t['worst']:5.2f}×  "
                f">2× {t['beyond_2x']:5.1%}"
            )
        else:
            print(f"{t['set']:<9} {t['figure']:<28} {t['regime']:<18} n=0  /{t['rows']:<3} not predicted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
