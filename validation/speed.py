"""Every published speed measurement under tests/data/speed against hybridplan's prediction for the same
settings (hybridplan/speed).

Three kinds of fixture, each file naming its source and the settings:

- ``gdn_decode_kernel``: one GDN layer's decode update at a batch (µs), predicted from the state the layer reads
  and writes (the scenario's Footprint) against the GPU's bandwidth and the kernel floor;
- ``ssd_prefill_kernel``: one Mamba-2 layer's chunked scan over T tokens (tokens/s), from its chunk FLOPs and
  bytes (hybridplan/speed/work.py ``scan_layer_work``);
- ``bench``: what ``vllm bench serve`` / ``sglang.bench_serving`` printed (output tokens/s, TTFT, TPOT),
  predicted by hybridplan/speed/bench.py with the running batch capped as ``hybridplan fit`` finds it.

Files marked ``"fit": true`` hold attention-only models: the default efficiencies of hybridplan/speed/model.py
were fitted on them (their error is the fit's residual): the dense ones (FITTED_ON_DENSE) for every term but
the routed experts' grouped-GEMM one, the MoE ones (FITTED_ON_MOE) for that term alone, on their TTFTs.
Everything else, the hybrids, is a prediction with those efficiencies held fixed.

    python validation/speed.py [--json | --markdown]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass, replace
from math import prod
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hybridplan.engines.sglang.releases import release as sglang_release  # noqa: E402
from hybridplan.engines.sglang.settings import SglangSettings  # noqa: E402
from hybridplan.engines.vllm.releases import release as vllm_release  # noqa: E402
from hybridplan.engines.vllm.settings import VllmSettings  # noqa: E402
from hybridplan.gpus import gpu as gpu_entry  # noqa: E402
from hybridplan.loader import load_model  # noqa: E402
from hybridplan.scenario import Budget, Scenario  # noqa: E402
from hybridplan.speed.bench import Workload, bench  # noqa: E402
from hybridplan.speed.gpus import datasheet  # noqa: E402
from hybridplan.speed.model import DEFAULT, FITTED_ON_DENSE, FITTED_ON_MOE, Efficiency, kind_time  # noqa: E402
from hybridplan.speed.work import Work, footprint_of, recurrent_update_flops, scan_layer_work  # noqa: E402

DATA = ROOT / "tests" / "data" / "speed"


@dataclass(frozen=True)
class Row:
    file: str
    id: str
    kind: str
    figure: str
    measured: float
    predicted: float
    hybrid: bool
    fit: bool
    bound: str = ""

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0

    def to_dict(self) -> dict:
        return {"file": self.file, "id": self.id, "kind": self.kind, "figure": self.figure,
                "measured": self.measured, "predicted": self.predicted, "error": self.error,
                "hybrid": self.hybrid, "fit": self.fit, "bound": self.bound}


def _model(ref: str):
    path = ROOT / ref
    return load_model(str(path) if path.exists() else ref)


def _gdn(doc: dict, m: dict, eff: Efficiency = DEFAULT) -> Row:
    spec = _model(doc["model"])
    sc = Scenario(spec=spec, ctx=1, tp=m["tp"], vllm=VllmSettings(release=vllm_release(doc["vllm_version"])))
    fp = footprint_of(sc)
    g = next(s for s in fp.state if s.kind == "gdn")
    mixer = next(x for x in spec.recurrent if x.kind == "gdn")
    b = m["batch"]
    # the kernel reads and writes the recurrent state (the conv window is another kernel's)
    w = Work("gdn", 1, state_bytes=2.0 * b * g.ssm_bytes_per_layer,
             scalar_flops=b * recurrent_update_flops(mixer, m["tp"]), kernels=1)
    kt = kind_time(w, datasheet(m["gpu"]), eff, "bf16", graphs=True)
    return Row(doc["_file"], m["id"], doc["kind"], m["figure"], m["value"], kt.seconds * 1e6, True,
               bool(doc.get("fit")), kt.bound)


def _ssd(doc: dict, m: dict, eff: Efficiency = DEFAULT) -> Row:
    spec = _model(doc["model"])
    mixer = next(x for x in spec.recurrent if x.kind == "mamba2")
    w = scan_layer_work(mixer, doc["tp"], m["tokens"], m["chunk"], fused=m["variant"] == "fused")
    kt = kind_time(w, datasheet(doc["gpu"]), eff, "bf16", graphs=True)
    return Row(doc["_file"], m["id"], doc["kind"], m["figure"], m["value"], m["tokens"] / kt.seconds, True,
               bool(doc.get("fit")), kt.bound)


def _bench(doc: dict, m: dict, eff: Efficiency = DEFAULT) -> Row:
    spec = _model(m.get("model") or doc["model"])
    key = m.get("gpu") or doc["gpu"]
    g = gpu_entry(key)
    engine = doc["engine"]
    wl = Workload(m["input"], m["output"], m["concurrency"], m.get("num_prompts"))
    sc = Scenario(spec=spec, ctx=wl.input + wl.output, tp=m.get("tp") or doc["tp"], engine=engine,
                  vllm=VllmSettings(release=vllm_release(m.get("vllm_version") or doc.get("vllm_version"))),
                  sglang=SglangSettings(release=sglang_release(m.get("sglang_version") or doc.get("sglang_version")),
                                        mem_fraction_static=m.get("mem_fraction_static")),
                  budget=Budget(gpu_mem=g.total, gpu=g.key) if doc.get("cap", True) else Budget(),
                  allow_long_context=True)
    b = bench(sc, datasheet(g.key), wl, eff)
    figure = m["figure"]
    value = {"output_tok_s": b.output_tok_s, "mean_ttft_ms": b.mean_ttft_s * 1e3,
             "median_ttft_ms": b.median_ttft_s * 1e3, "mean_tpot_ms": b.tpot_s * 1e3,
             "median_tpot_ms": b.tpot_s * 1e3}[figure]
    bound = b.decode.main_bound[0] if "tpot" in figure or "output" in figure else b.prefill.main_bound[0]
    return Row(doc["_file"], m["id"], doc["kind"], figure, m["value"], value, bool(doc.get("hybrid")),
               bool(doc.get("fit")), bound)


KINDS = {"gdn_decode_kernel": _gdn, "ssd_prefill_kernel": _ssd, "bench": _bench}


def fixtures() -> list[dict]:
    docs = []
    for path in sorted(DATA.glob("*.json")):
        doc = json.loads(path.read_text())
        doc["_file"] = path.name
        docs.append(doc)
    return docs


def rows(eff: Efficiency = DEFAULT, only_fit: bool = False, files: tuple[str, ...] | None = None) -> list[Row]:
    return [KINDS[doc["kind"]](doc, m, eff) for doc in fixtures()
            if (doc.get("fit") or not only_fit) and (files is None or doc["_file"] in files)
            for m in doc["measurements"]]


def _loss(eff: Efficiency, figures: tuple[str, ...], files: tuple[str, ...] = FITTED_ON_DENSE) -> float:
    """Mean |log(predicted / measured)| over those attention fixtures' rows of those figures."""
    import math

    rs = [r for r in rows(eff, only_fit=True, files=files) if r.figure in figures]
    return sum(abs(math.log(r.predicted / r.measured)) for r in rs) / len(rs)


def fit() -> Efficiency:
    """The efficiencies that fit the attention fixtures best, by coordinate search: the decode terms (HBM
    fraction, kernel floor, step overhead) on the dense fixtures' TPOT, then the prefill terms (tensor fraction,
    chunk overhead) on their TTFT, then the routed experts' grouped-GEMM term (expert_tokens_half) on the
    attention-only MoE fixtures' TTFT with everything else held, the grid of each as below. The MoE fixtures'
    TPOTs are fitted on nothing (their residual is shown, not absorbed)."""
    decode = ("mean_tpot_ms", "median_tpot_ms")
    best = min((replace(DEFAULT, hbm=h, kernel_floor_graph_us=f, step_overhead_us=o)
                for h in (0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95) for f in (0.5, 1.0, 1.5, 2.0, 3.0)
                for o in (0, 250, 500, 750, 1000, 1500, 2000)), key=lambda e: _loss(e, decode))
    prefill = ("mean_ttft_ms",)
    best = min((replace(best, tensor=t, prefill_overhead_us=o)
                for t in (0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8) for o in (0, 1000, 2000, 4000, 8000)),
               key=lambda e: _loss(e, prefill))
    best = min((replace(best, expert_tokens_half=m) for m in (0, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512)),
               key=lambda e: _loss(e, prefill, FITTED_ON_MOE))
    return best


def group(r: Row) -> str:
    if r.kind == "gdn_decode_kernel":
        return f"GDN decode kernel, {r.id.split('-')[2].upper()}"
    if r.kind == "ssd_prefill_kernel":
        return "SSD prefill kernel, " + ("unfused (vLLM's)" if "unfused" in r.id else "fused (#27299)")
    if r.file in FITTED_ON_MOE:  # its TTFTs fitted the grouped-GEMM term; its TPOTs fitted nothing
        what = "attention MoE (fitted)" if "ttft" in r.figure else "attention MoE (held out)"
    else:
        what = "hybrid" if r.hybrid else "attention (fitted)" if r.fit else "attention (held out)"
    return f"{what} {r.figure.replace('_', ' ')}"


def factor(r: Row) -> float:
    """How far off, as a ratio ≥ 1 either way."""
    return max(r.predicted / r.measured, r.measured / r.predicted)


def summary(rs: list[Row]) -> list[tuple[str, int, float, float, str]]:
    """Per figure: fixtures, median |error|, worst error as a factor, the worst fixture."""
    out = []
    for name in dict.fromkeys(group(r) for r in rs):
        sel = [r for r in rs if group(r) == name]
        worst = max(sel, key=factor)
        out.append((name, len(sel), statistics.median(abs(r.error) for r in sel), factor(worst), worst.id))
    # the "end to end": every figure a serving benchmark prints for a hybrid (output throughput, TTFT,
    # TPOT) together, beside the per-figure rows above
    sel = [r for r in rs if r.hybrid and r.kind == "bench"]
    if sel:
        worst = max(sel, key=factor)
        out.append(("hybrid end to end (output, TPOT, TTFT together)", len(sel),
                    statistics.median(abs(r.error) for r in sel), factor(worst), worst.id))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--fit", action="store_true", help="search the efficiencies on the attention fixtures")
    args = ap.parse_args(argv)
    if args.fit:
        e = fit()
        print(json.dumps(e.to_dict(), indent=1))
        return 0
    rs = rows()
    if args.json:
        print(json.dumps({"rows": [r.to_dict() for r in rs], "summary": summary(rs)}, indent=1))
        return 0
    if args.markdown:
        print("| figure | fixtures | median error | worst (factor) | worst fixture |")
        print("|---|---:|---:|---:|---|")
        for name, n, med, worst, wid in summary(rs):
            print(f"| {name} | {n} | {med:.1%} | {worst:.2f}× | `{wid}` |")
        return 0
    for r in rs:
        print(f"{r.id:<44} {r.figure:<16} {r.measured:>14,.2f} {r.predicted:>14,.2f} {r.error:>+8.1%}  {r.bound}")
    print()
    for name, n, med, worst, wid in summary(rs):
        print(f"{name:<44} n={n:<3} median {med:6.1%}  worst {worst:5.2f}× ({wid})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
