"""SGLang's radix-strategy resolution and checks for hybrid models, run from the SGLang wheels' own source on a
CPU and compared with hybridplan's (hybridplan/engines/sglang/radix.py ``strategy``).

    python validation/sglang_radix.py [--releases 0.5.15 ... 0.5.23] [--cache-dir ~/.cache/hybridplan-validation]
                                      [--json]

What runs as SGLang wrote it (no SGLang package is imported: each function is cut out of the wheel's source with
``ast`` and executed unmodified), by release:

* arg_groups/overrides.py: ``_MAMBA_RADIX_CACHE_ARCHS``, ``_MAMBA_EXTRA_BUFFER_ARCHS``,
  ``supports_mamba_cache_extra_buffer`` and ``_mamba_radix_cache_resolution`` (what ``auto`` becomes, and whether
  the architecture's strategy is checked at all);
* the checks: server_args.py ``ServerArgs._validate_mamba_no_buffer``, ``_validate_mamba_extra_buffer`` and
  ``_handle_mamba_radix_cache`` (0.5.15–0.5.18), then arg_groups/mamba_hook.py ``validate_mamba_no_buffer``,
  ``validate_mamba_extra_buffer`` and arg_groups/model_hook.py ``handle_mamba_radix_cache`` (0.5.19 on);
  ``mamba_extra_buffer_of`` (overrides.py, then model_override_base.py).

For each architecture hybridplan serves with a Mamba pool in that release, each of ``auto``, ``no_buffer`` and
``extra_buffer``, the overlap scheduler on and off, and pages of 1 and 64 tokens: SGLang either refuses (the
assertion or error it raises) or runs with or without the extra buffer; hybridplan must refuse the same starts and
name the same strategy. Stand-ins: the server arguments (a plain object holding the flags above and SGLang's
defaults for the rest the checks read: Triton linear-attention backend, track interval 256, no speculative
decoding, no disaggregation), the resolution pipeline (``run_post_process_pass`` sets what the pass declares;
``resolved_view`` is the arguments themselves), the HF config (its ``architectures``, and ``layer_types`` for
GraniteMoeHybrid), the platform (CUDA), the linear-attention registry (no spec: the wheels register one only for
GigaChat3.5), and ``mamba_cache_chunk_size`` (64).

Exit status 0 when every case matches, 1 otherwise.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import types
import zipfile
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
RELEASES = ("0.5.15", "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23")
#: a shipped spec per architecture (GraniteMoeHybrid with Mamba layers)
MODELS = {
    "FalconMambaForCausalLM": "falcon-mamba-7b",
    "MambaForCausalLM": "mamba-130m",
    "Mamba2ForCausalLM": "mamba-codestral-7b",
    "Lfm2ForCausalLM": "lfm2-1.2b",
    "Qwen3_5MoeForCausalLM": "qwen3.8-2.4t-a95b",
    "Qwen3NextForCausalLM": "qwen3-next",
    "NemotronHForCausalLM": "nemotron-h-8b",
    "GraniteMoeHybridForCausalLM": "granite-4.0-h-tiny",
    "FalconH1ForCausalLM": "falcon-h1-0.5b",
    "KimiLinearForCausalLM": "kimi-linear-48b-a3b",
}
STRATEGIES = ("auto", "no_buffer", "extra_buffer")
FILES = (
    "sglang/srt/server_args.py",
    "sglang/srt/arg_groups/overrides.py",
    "sglang/srt/arg_groups/mamba_hook.py",
    "sglang/srt/arg_groups/model_hook.py",
    "sglang/srt/arg_groups/model_override_base.py",
)
WANTED = {
    "_MAMBA_RADIX_CACHE_ARCHS",
    "_MAMBA_EXTRA_BUFFER_ARCHS",
    "supports_mamba_cache_extra_buffer",
    "_mamba_radix_cache_resolution",
    "mamba_extra_buffer_of",
    "validate_mamba_no_buffer",
    "validate_mamba_extra_buffer",
    "_platform_supports_mamba_cache_extra_buffer",
    "handle_mamba_radix_cache",
}
METHODS = {"_validate_mamba_no_buffer", "_validate_mamba_extra_buffer", "_handle_mamba_radix_cache"}


def sources(version: str, cache: Path) -> dict[str, str]:
    wheel = next(iter(sorted((cache / "wheels").glob(f"sglang-{version}-*.whl"))), None)
    if wheel is None:
        raise SystemExit(
            f"no SGLang {version} wheel under {cache / 'wheels'} (pip download --no-deps "
            f"sglang=={version} -d {cache / 'wheels'})"
        )
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        return {f: z.read(f).decode() for f in FILES if f in names}


def extract(version: str, cache: Path) -> tuple[dict, list[str]]:
    """The release's functions and sets, executed from its source in one namespace with the stand-ins."""
    ns: dict = {}
    found: list[str] = []
    for path, text in sources(version, cache).items():
        tree = ast.parse(text)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name in WANTED:
                node.decorator_list = []
                found.append(f"{path}:{node.name}")
                exec(compile(ast.Module([node], []), path, "exec"), ns)
            elif (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and getattr(node.targets[0], "id", None) in WANTED
            ):
                found.append(f"{path}:{node.targets[0].id}")
                exec(compile(ast.Module([node], []), path, "exec"), ns)
            elif isinstance(node, ast.ClassDef) and node.name == "ServerArgs":
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and item.name in METHODS:
                        item.decorator_list = []
                        found.append(f"{path}:ServerArgs.{item.name}")
                        exec(compile(ast.Module([item], []), path, "exec"), ns)
    return ns, found


def stand_ins(ns: dict) -> None:
    import logging
    from typing import Any

    def run_post_process_pass(server_args, fn):
        for k, v in fn(server_args).items():
            setattr(server_args, k, v)

    cuda = SimpleNamespace(is_xpu=False, is_cuda=True, is_musa=False, is_npu=False, is_hip=False)
    ns.update(
        Any=Any,
        Dict=dict,
        logger=logging.getLogger("sglang-radix"),
        run_post_process_pass=run_post_process_pass,
        resolved_view=lambda sa: sa,
        model_config_of=lambda view: view.model_config,
        get_platform=lambda: cuda,
        current_platform=SimpleNamespace(is_out_of_tree=lambda: False),
        is_cuda=lambda: True,
        is_musa=lambda: False,
        is_npu=lambda: False,
        mamba_cache_chunk_size=lambda server_args: 64,
        get_linear_attn_spec=lambda cfg: None,
        get_linear_attn_spec_by_arch=lambda arch: None,
    )
    module = types.ModuleType("sglang_radix_stub")
    module.__path__ = []

    def lookup(name):  # the functions' own imports resolve to the namespace
        if name.startswith("__") or name not in ns:
            raise AttributeError(name)
        return ns[name]

    module.__getattr__ = lookup
    for name in (
        "sglang",
        "sglang.srt",
        "sglang.srt.configs",
        "sglang.srt.arg_groups",
        "sglang.srt.configs.linear_attn_model_registry",
        "sglang.srt.arg_groups.mamba_hook",
        "sglang.srt.arg_groups.overrides",
        "sglang.srt.arg_groups.model_override_base",
    ):
        sys.modules[name] = module


def sglang_outcome(ns: dict, version: str, arch: str, strategy: str, overlap: bool, page: int) -> str:
    hf = SimpleNamespace(architectures=[arch], layer_types=["mamba", "attention"])
    sa_cls = type("ServerArgs", (), {m: ns[m] for m in METHODS if m in ns})
    sa = sa_cls()
    sa.__dict__.update(
        model_config=SimpleNamespace(hf_config=hf),
        disable_radix_cache=False,
        mamba_radix_cache_strategy=strategy,
        disable_overlap_schedule=not overlap,
        page_size=page,
        linear_attn_backend="triton",
        mamba_track_interval=256,
        speculative_num_draft_tokens=None,
        chunked_prefill_size=8192,
        disaggregation_mode="null",
        attention_backend=None,
        uses_mamba_radix_cache=False,
        mamba_cache_chunk_size=64,
    )
    sa.get_model_config = lambda: sa.model_config
    try:
        if "handle_mamba_radix_cache" in ns:
            takes_config = "hf_config" in ns["handle_mamba_radix_cache"].__code__.co_varnames[:2]
            ns["handle_mamba_radix_cache"](sa, hf if takes_config else arch)
        else:
            sa._handle_mamba_radix_cache(arch)
    except (AssertionError, ValueError) as e:
        return f"refused: {e}"
    return "extra_buffer" if ns["mamba_extra_buffer_of"](sa) else "no_buffer"


def hybridplan_outcome(version: str, model: str, strategy: str, overlap: bool, page: int) -> str | None:
    sys.path.insert(0, str(ROOT))
    from hybridplan.engines.sglang.radix import strategy as resolve
    from hybridplan.engines.sglang.releases import release
    from hybridplan.engines.sglang.settings import SglangSettings
    from hybridplan.errors import NotServed, PlanError
    from hybridplan.loader import load_model
    from hybridplan.scenario import Scenario

    spec = load_model(model)
    rel = release(version)
    if not rel.serves(spec):
        return None
    sc = Scenario(
        spec,
        ctx=8192,
        engine="sglang",
        sglang=SglangSettings(release=rel, radix=strategy, overlap=overlap, page_size=page),
    )
    try:
        return resolve(sc).name
    except NotServed:
        return None
    except PlanError as e:
        return f"refused: {e}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--releases", nargs="+", default=list(RELEASES), metavar="X.Y.Z")
    ap.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "hybridplan-validation")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows, bad = [], 0
    for version in args.releases:
        ns, found = extract(version, args.cache_dir)
        stand_ins(ns)
        for arch, model in MODELS.items():
            for strategy in STRATEGIES:
                for overlap in (True, False):
                    for page in (1, 64):
                        ours = hybridplan_outcome(version, model, strategy, overlap, page)
                        if ours is None:  # no class for it in this release
                            continue
                        theirs = sglang_outcome(ns, version, arch, strategy, overlap, page)
                        match = (ours.startswith("refused") and theirs.startswith("refused")) or ours == theirs
                        bad += not match
                        rows.append(
                            {
                                "release": version,
                                "architecture": arch,
                                "strategy": strategy,
                                "overlap": overlap,
                                "page_size": page,
                                "sglang": theirs,
                                "hybridplan": ours,
                                "match": match,
                            }
                        )
                        if not args.json and not match:
                            print(
                                f"SGLang {version} {arch} {strategy} overlap={overlap} page={page}: SGLang "
                                f"{theirs!r}, hybridplan {ours!r}  MISMATCH"
                            )
        if not args.json:
            print(
                f"SGLang {version}: {sum(r['release'] == version for r in rows)} cases, ran {len(found)} pieces "
                f"of its source"
            )
    if args.json:
        print(json.dumps({"rows": rows, "mismatches": bad}, indent=1))
    else:
        print(f"total: {len(rows)} comparisons, {bad} mismatches")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
