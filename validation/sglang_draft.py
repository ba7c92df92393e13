"""SGLang's pricing of a speculative draft's KV into the target's KV cell, run from each wheel's own source,
against hybridplan (hybridplan/engines/sglang/pool.py ``draft_layers_in_cell``, ``kv_cell`` and the KV tokens of
``fit``).

What runs as SGLang wrote it (no SGLang package is imported: each piece is cut out of the wheel's source with
``ast`` and run with stand-ins for what it reads):

* configs/model_config.py ``ModelConfig._config_draft_model`` (0.5.14 on): the draft-mode rewrite of the draft's
  config (architecture, ``num_nextn_predict_layers``);
* the draft's layer count: 0.5.14–0.5.15 the ``eagle_draft_num_layers`` block of model_executor/model_runner.py
  ``ModelRunner.__init__``, 0.5.16 on model_runner_components/spec_aux_hidden_state.py
  ``_resolve_eagle_aux_hidden_state``;
* model_executor/pool_configurator.py ``DefaultPoolConfigurator.__init__``: its EAGLE/STANDALONE and
  DFLASH/DSPARK statements that scale ``_cell_size`` (0.5.11 on), with speculative/dflash_utils.py
  ``scale_kv_cell_size_per_token_for_dflash`` and, from 0.5.18, ``dflash_draft_cell_size_per_token``; then
  ``calculate_pool_sizes`` for the tokens.

Stood in: the target's unscaled cell and full-attention layer count (hybridplan's, as validation/sglang.py does),
the KV bytes of the split (hybridplan's), ``get_hf_text_config`` (the config's ``text_config`` if it has one, else
the config), the draft ModelConfig's ``num_nextn_predict_layers`` (``getattr(hf_text_config, ...)``, as
``_derive_model_shapes`` reads it), ``num_hidden_layers`` and ``num_attention_layers`` (the text config's
num_hidden_layers: the same for these models), ``get_num_kv_heads`` (max(1, heads // TP)), the DFLASH draft's
layer count (its num_hidden_layers, ``require_num_layers``) and its KV dtype (``--kv-cache-dtype``, else the
draft's dtype); the configs are plain namespaces of the config.json fields, not transformers objects.
Not run: ServerArgs (NEXTN → EAGLE is taken as given), the draft worker itself, HiSparse, DCP, fused pools, DSA.

Usage: python validation/sglang_draft.py [--releases 0.5.13 0.5.14 ...] [--json]; exit 1 on a mismatch.
"""

from __future__ import annotations

import argparse
import ast
import copy
import importlib.abc
import importlib.machinery
import json
import sys
import tempfile
import types
import zipfile
from pathlib import Path
from types import SimpleNamespace

from msgspec.structs import replace

ROOT = Path(__file__).resolve().parents[1]
#: SGLang's files postpone their annotations: so do the pieces run here
_FUTURE = annotations.compiler_flag
GiB = 1 << 30
RELEASES = (
    "0.5.10",
    "0.5.11",
    "0.5.13",
    "0.5.14",
    "0.5.15",
    "0.5.16",
    "0.5.17",
    "0.5.18",
    "0.5.19",
    "0.5.20",
    "0.5.21",
    "0.5.22",
    "0.5.23",
)
#: the targets whose MTP layers draft (NEXTN), with and without --speculative-draft-model-path
MTP_TARGETS = ("qwen3-next-80b-a3b", "qwen3.5-27b", "qwen3.5-35b-a3b")
#: draft models of their own: (algorithm, layers, KV heads, head dim, architecture)
DRAFTS = (
    ("EAGLE3", 1, 8, 128, "LlamaForCausalLMEagle3"),
    ("STANDALONE", 5, 8, 128, "Qwen3DFlashForCausalLM"),
    ("DFLASH", 5, 8, 128, "DFlashDraftModel"),
    ("DFLASH", 1, 1, 128, "DFlashDraftModel"),
    ("DFLASH", 2, 32, 128, "DFlashDraftModel"),
)
FILES = (
    "sglang/srt/configs/model_config.py",
    "sglang/srt/model_executor/model_runner.py",
    "sglang/srt/model_executor/model_runner_components/spec_aux_hidden_state.py",
    "sglang/srt/model_executor/pool_configurator.py",
    "sglang/srt/speculative/dflash_utils.py",
)


def _run(rel: str, nodes: list, ns: dict) -> dict:
    """Run statements cut out of ``rel`` in the namespace ``ns`` (which they fill)."""
    code = compile(ast.Module(body=nodes, type_ignores=[]), rel, "exec", flags=_FUTURE, dont_inherit=True)
    exec(code, ns)  # noqa: S102
    return ns


class _Stubs(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Every ``sglang.*`` module a piece imports inside itself: a stub whose every name is a class nothing is an
    instance of (the module of dflash_utils functions is put in ``sys.modules`` per release instead)."""

    def find_spec(self, name, path, target=None):
        if name == "sglang" or name.startswith("sglang."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__getattr__ = lambda attr: type(attr, (), {})


class Wheel:
    def __init__(self, version: str, cache: Path) -> None:
        self.version = version
        found = sorted((cache / "wheels").glob(f"sglang-{version}-*.whl"))
        if not found:
            raise SystemExit(
                f"no sglang {version} wheel in {cache / 'wheels'} (pip download --no-deps "
                f"sglang=={version} -d {cache / 'wheels'})"
            )
        with zipfile.ZipFile(found[0]) as zf:
            names = set(zf.namelist())
            self.text = {f: zf.read(f).decode() for f in FILES if f in names}
        self.trees = {f: ast.parse(t) for f, t in self.text.items()}
        self.ran: set[str] = set()

    def has(self, rel: str) -> bool:
        return rel in self.text

    def _exec(self, rel: str, nodes: list, env: dict) -> dict:
        return _run(rel, nodes, {"__name__": __name__, **env})

    def _class(self, rel: str, cls: str) -> ast.ClassDef:
        return next(n for n in ast.walk(self.trees[rel]) if isinstance(n, ast.ClassDef) and n.name == cls)

    def function(self, rel: str, name: str, env: dict):
        node = next(n for n in self.trees[rel].body if isinstance(n, ast.FunctionDef) and n.name == name)
        self.ran.add(f"{rel.split('/')[-1]}:{name}")
        return self._exec(rel, [node], env)[name]

    def constants(self, rel: str) -> list:
        return [n for n in self.trees[rel].body if isinstance(n, ast.Assign)]

    def method(self, rel: str, cls: str, name: str, env: dict):
        """A method as a plain function, beside the file's module-level names (its lists of architectures) that
        run with what is given."""
        node = next(n for n in self._class(rel, cls).body if isinstance(n, ast.FunctionDef) and n.name == name)
        self.ran.add(f"{rel.split('/')[-1]}:{cls}.{name}")
        ns = {"__name__": __name__, **env}
        for c in self.constants(rel):
            try:
                _run(rel, [c], ns)
            except Exception:  # noqa: BLE001 — a name these checks do not need
                pass
        return _run(rel, [node], ns)[name]

    def statements(self, rel: str, cls: str, method: str, keep, given: tuple[str, ...], env: dict):
        """The top-level statements of a method that ``keep`` accepts (by source), as a function of ``given``."""
        text = self.text[rel]
        fn = next(n for n in self._class(rel, cls).body if isinstance(n, ast.FunctionDef) and n.name == method)
        body = [s for s in fn.body if keep(ast.get_source_segment(text, s))]
        if not body:
            return None
        body.append(ast.Return(ast.Call(ast.Name("locals", ast.Load()), [], []), lineno=fn.end_lineno))
        new = copy.copy(fn)
        new.name, new.body, new.decorator_list, new.returns = "piece", body, [], None
        new.args = ast.arguments(
            posonlyargs=[], args=[ast.arg(a) for a in given], kwonlyargs=[], kw_defaults=[], defaults=[]
        )
        ast.fix_missing_locations(new)
        self.ran.add(f"{rel.split('/')[-1]}:{cls}.{method} ({len(body) - 1} statements)")
        return self._exec(rel, [new], env)["piece"]


def _ns(value):
    if isinstance(value, dict):
        return SimpleNamespace(**{k: _ns(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_ns(v) for v in value]
    return value


class _Fields(SimpleNamespace):
    """SpecAuxHiddenStateConfig and the like: every field unset reads None."""

    def __getattr__(self, name):
        return None


def _model_config(w: Wheel, raw: dict, draft_mode: bool, algorithm: str = "EAGLE"):
    """The ModelConfig fields these pieces read, after ``_config_draft_model`` where ``draft_mode``."""
    hf = _ns(copy.deepcopy(raw))
    self = _Fields(
        hf_config=hf,
        hf_text_config=getattr(hf, "text_config", hf),
        is_draft_model=draft_mode,
        speculative_algorithm=algorithm,
    )
    rel = FILES[0]
    if draft_mode and any(
        isinstance(n, ast.FunctionDef) and n.name == "_config_draft_model" for n in w._class(rel, "ModelConfig").body
    ):
        fn = w.method(rel, "ModelConfig", "_config_draft_model", {"logger": _Quiet()})
        fn(self)
    text = self.hf_text_config
    layers = text.num_hidden_layers
    return SimpleNamespace(
        hf_config=self.hf_config,
        hf_text_config=text,
        num_nextn_predict_layers=getattr(text, "num_nextn_predict_layers", None),
        num_hidden_layers=layers,
        num_attention_layers=layers,
        is_hybrid_swa=False,
        is_deepseek_v4_arch=False,
        head_dim=getattr(text, "head_dim", None),
        v_head_dim=getattr(text, "head_dim", None),
        dtype=getattr(text, "torch_dtype", None),
        get_num_kv_heads=lambda tp: max(1, text.num_key_value_heads // tp),
    )


class _Quiet:
    def __getattr__(self, name):
        return lambda *a, **k: None


def _algorithm(name: str):
    return SimpleNamespace(
        is_eagle=lambda: name in ("EAGLE", "EAGLE3"),
        is_eagle3=lambda: name == "EAGLE3",
        is_standalone=lambda: name == "STANDALONE",
        is_dflash=lambda: name == "DFLASH",
        is_dspark=lambda: name == "DSPARK",
        is_dflash_family=lambda: name in ("DFLASH", "DSPARK"),
        is_none=lambda: False,
    )


def sglang_cell(
    w: Wheel,
    *,
    algorithm: str,
    target_raw: dict,
    draft_raw: dict | None,
    path: bool,
    cell: int,
    layers: int,
    tp: int,
    draft_kv_bytes: int,
) -> tuple[int | None, int]:
    """(SGLang's draft layer count, the target's cell as SGLang scales it) for one case."""
    algo = _algorithm(algorithm)
    args = _Fields(
        speculative_draft_model_path="/draft" if path else None,
        speculative_draft_model_revision=None,
        tp_size=tp,
        enable_hisparse=False,
        dcp_size=1,
    )
    target_mc = _model_config(w, target_raw, draft_mode=False)
    draft_mc = _model_config(w, draft_raw if path else target_raw, draft_mode=True, algorithm=algorithm)
    from_args = lambda *a, **k: draft_mc  # noqa: E731 — ModelConfig.from_server_args, the draft's config
    aux = _Fields()
    n_eagle = n_dflash = None
    runner = "sglang/srt/model_executor/model_runner.py"
    comp = "sglang/srt/model_executor/model_runner_components/spec_aux_hidden_state.py"
    if w.has(comp):
        env = {
            "ModelConfig": SimpleNamespace(from_server_args=from_args),
            "get_spec": lambda: args,
            "get_exec": lambda: args,
            "logger": _Quiet(),
            "is_deepseek_v4": lambda *_: False,
        }
        fn = w.function(comp, "_resolve_eagle_aux_hidden_state", env)
        params = fn.__code__.co_varnames[: fn.__code__.co_argcount + fn.__code__.co_kwonlyargcount]
        kw = {
            "config": aux,
            "server_args": args,
            "model_config": target_mc,
            "spec_algorithm": algo,
            "is_draft_worker": False,
        }
        fn(**{k: v for k, v in kw.items() if k in params})
        n_eagle = aux.eagle_draft_num_layers
    elif "eagle_draft_num_layers" in w.text.get(runner, ""):
        piece = w.statements(
            runner,
            "ModelRunner",
            "__init__",
            lambda src: "eagle_draft_num_layers" in src and "dflash" not in src,
            ("self", "server_args"),
            {"logger": _Quiet()},
        )
        me = SimpleNamespace(spec_algorithm=algo, is_draft_worker=False, _build_model_config=lambda *a, **k: draft_mc)
        piece(me, args)
        n_eagle = me.eagle_draft_num_layers
    if algorithm in ("DFLASH", "DSPARK"):
        n_dflash = draft_raw["num_hidden_layers"]  # stood in: require_num_layers
    aux.eagle_draft_num_layers, aux.dflash_draft_num_layers = n_eagle, n_dflash
    dflash_rel = "sglang/srt/speculative/dflash_utils.py"
    given = {}
    if w.has(dflash_rel):
        given["scale_kv_cell_size_per_token_for_dflash"] = w.function(
            dflash_rel, "scale_kv_cell_size_per_token_for_dflash", {"Optional": object}
        )
        if n_dflash and "def dflash_draft_cell_size_per_token" in w.text[dflash_rel]:
            import torch

            fn = w.function(dflash_rel, "dflash_draft_cell_size_per_token", {"torch": torch, "Any": object})
            dtype = {1: torch.float8_e4m3fn, 2: torch.bfloat16}[draft_kv_bytes]
            aux.dflash_draft_cell_size_per_token = fn(
                draft_model_config=draft_mc, draft_num_layers=n_dflash, draft_kv_cache_dtype=dtype, tp_size=tp
            )
    mod = types.ModuleType("sglang.srt.speculative.dflash_utils")
    mod.__dict__.update(given)
    sys.modules[mod.__name__] = mod  # this release's functions, not an earlier one's
    pools = "sglang/srt/model_executor/pool_configurator.py"
    if not w.has(pools):
        return n_eagle, cell
    keep = lambda src: src.startswith("if") and ("draft_num_layers" in src or "dflash" in src)  # noqa: E731
    env = {
        "is_deepseek_dsa": lambda *_: False,
        "get_memory": lambda: args,
        "get_parallel": lambda: SimpleNamespace(attn_dcp_size=1),
        "logger": _Quiet(),
    }
    if "def _dflash_draft_cell_size" in w.text[pools]:
        env["_dflash_draft_cell_size"] = w.function(pools, "_dflash_draft_cell_size", env)
    piece = w.statements(
        pools, "DefaultPoolConfigurator", "__init__", keep, ("self", "mr", "kvc", "num_layers", "dcp_size"), env
    )
    me = SimpleNamespace(_cell_size=cell)
    runner_ns = SimpleNamespace(
        spec_algorithm=algo,
        is_draft_worker=False,
        spec_aux_config=aux,
        eagle_draft_num_layers=n_eagle,
        dflash_draft_num_layers=n_dflash,
        dflash_draft_cell_size_per_token=aux.dflash_draft_cell_size_per_token,
        fused_entry_bytes=lambda _kind: None,
        server_args=args,
        model_config=target_mc,
    )
    if piece is not None:
        piece(me, runner_ns, runner_ns, layers, 1)
    return (n_dflash if algorithm in ("DFLASH", "DSPARK") else n_eagle), me._cell_size


def _draft_config(layers: int, heads: int, head_dim: int, arch: str) -> dict:
    return {
        "architectures": [arch],
        "model_type": "qwen3",
        "hidden_size": 4096,
        "num_hidden_layers": layers,
        "num_attention_heads": 32,
        "num_key_value_heads": heads,
        "head_dim": head_dim,
        "intermediate_size": 12288,
        "vocab_size": 151936,
        "max_position_embeddings": 262144,
        "torch_dtype": "bfloat16",
    }


def cases(version: str, tmp: Path):
    """(label, Scenario, target raw config, draft raw config, path given)."""
    from hybridplan.engines.sglang.releases import release
    from hybridplan.engines.sglang.settings import SglangSettings
    from hybridplan.engines.sglang.speculative import SglangFlags, speculative_from_sglang
    from hybridplan.errors import PlanError
    from hybridplan.loader import load_model
    from hybridplan.scenario import Budget, DtypeChoice, Scenario

    rel = release(version)

    def scenario(target, sp, tp, kv):
        return Scenario(
            spec=target,
            ctx=8192,
            tp=tp,
            spec_tokens=3,
            speculative=replace(sp, num_tokens=3),
            engine="sglang",
            dtypes=DtypeChoice(kv=kv),
            sglang=SglangSettings(release=rel, radix="off", max_running_requests=16),
            budget=Budget(kv_budget=40 * GiB),
        )

    for name in MTP_TARGETS:
        target = load_model(name)
        if not rel.serves(target):
            continue
        raw = json.loads(target.config_json)
        for path in (False, True):
            sp = speculative_from_sglang(
                SglangFlags("NEXTN", draft=target.source if path else None, num_steps=3, eagle_topk=1), target, version
            )
            for tp in (1, 2):
                for kv in (None, "fp8_e4m3"):
                    yield (
                        {"target": name, "algorithm": "NEXTN", "path": path, "tp": tp, "kv": kv},
                        scenario(target, sp, tp, kv),
                        raw,
                        raw,
                        path,
                    )
    target = load_model("qwen3.5-27b")
    raw = json.loads(target.config_json)
    for algorithm, layers, heads, dim, arch in DRAFTS:
        folder = tmp / f"{algorithm}-{layers}-{heads}-{dim}"
        folder.mkdir(exist_ok=True)
        draft_raw = _draft_config(layers, heads, dim, arch)
        (folder / "config.json").write_text(json.dumps(draft_raw))
        try:
            sp = speculative_from_sglang(SglangFlags(algorithm, draft=str(folder), num_draft_tokens=4), target, version)
        except PlanError:
            continue  # the release has no such algorithm
        for tp in (1, 2):
            for kv in (None, "fp8_e4m3"):
                yield (
                    {
                        "target": "qwen3.5-27b",
                        "algorithm": algorithm,
                        "draft": f"{layers}x{heads}x{dim}",
                        "tp": tp,
                        "kv": kv,
                    },
                    scenario(target, sp, tp, kv),
                    raw,
                    draft_raw,
                    True,
                )


def check(version: str, cache: Path) -> tuple[list[dict], set[str]]:
    from hybridplan.engines.sglang.pool import draft_layers_in_cell, fit, footprint, kv_cell

    w = Wheel(version, cache)
    pools = "sglang/srt/model_executor/pool_configurator.py"
    calc = None
    if w.has(pools):
        from dataclasses import dataclass, field
        from typing import Optional

        env = {"dataclass": dataclass, "field": field, "Optional": Optional}
        cfg = w._exec(
            pools, [n for n in w.trees[pools].body if isinstance(n, ast.ClassDef) and n.name == "MemoryPoolConfig"], env
        )
        calc = w.method(pools, "DefaultPoolConfigurator", "calculate_pool_sizes", {**env, **cfg})
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, sc, target_raw, draft_raw, path in cases(version, Path(tmp)):
            fp = footprint(sc)
            base = fp.kv_bytes_per_token
            layers = sum(g.count for g in fp.kv if g.window is None)
            kv_bytes = 2 if sc.dtypes.kv is None else 1
            n, cell = sglang_cell(
                w,
                algorithm=label["algorithm"] if label["algorithm"] != "NEXTN" else "EAGLE",
                target_raw=target_raw,
                draft_raw=draft_raw,
                path=path,
                cell=base,
                layers=layers,
                tp=sc.tp,
                draft_kv_bytes=kv_bytes,
            )
            ours_n = draft_layers_in_cell(sc.sglang.release, sc)
            ours_cell = kv_cell(sc.sglang.release, sc, fp)
            f = fit(sc)
            theirs_tokens = None
            if calc is not None and f.kv_bytes > 0:
                me = SimpleNamespace(_cell_size=cell, _fixed_overhead_bytes=0, _zero_kv_max_tokens=None)
                theirs_tokens = calc(me, f.kv_bytes, 1).max_total_num_tokens
            elif f.kv_bytes > 0:
                theirs_tokens = f.kv_bytes // cell
            # where SGLang counts no layers, hybridplan's None is the same outcome as SGLang's untouched cell
            theirs_n = n if cell != base else None
            rows.append(
                {
                    "release": version,
                    **label,
                    "sglang": {"n": theirs_n, "cell": cell, "tokens": theirs_tokens},
                    "hybridplan": {
                        "n": ours_n if ours_cell != base else None,
                        "cell": ours_cell,
                        "tokens": f.kv_tokens if f.kv_bytes > 0 else None,
                    },
                }
            )
    return rows, w.ran


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--releases", nargs="+", default=list(RELEASES), metavar="X.Y.Z")
    ap.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "hybridplan-validation")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    sys.path.insert(0, str(ROOT))
    sys.meta_path.insert(0, _Stubs())
    all_rows, bad, compared = [], 0, 0
    for version in args.releases:
        rows, ran = check(version, args.cache_dir)
        for r in rows:
            for key in ("n", "cell", "tokens"):
                compared += 1
                if r["sglang"][key] != r["hybridplan"][key]:
                    bad += 1
                    if not args.json:
                        print(f"SGLang {version} {key} MISMATCH: {r}")
        all_rows += rows
        if not args.json:
            scaled = sum(r["sglang"]["n"] is not None for r in rows)
            print(
                f"SGLang {version}: {len(rows)} cases ({scaled} with the draft in the cell), ran "
                f"{', '.join(sorted(ran)) or 'nothing (no such code)'}"
            )
    if args.json:
        print(json.dumps({"rows": all_rows, "compared": compared, "mismatches": bad}, indent=1))
    else:
        print(f"total: {compared} comparisons over {len(all_rows)} cases, {bad} mismatches")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
