"""The attention backend vLLM picks on each GPU, and the kernel block it brings to a hybrid's block size, run from
the published vLLM wheels on a CPU and compared with hybridplan's rule (hybridplan/engines/vllm/blocks.py
``backend_kernel_block``).

    python validation/vllm_backends.py [--releases 0.20.0 ... 0.33.0] [--cache-dir ~/.cache/hybridplan-validation]
                                       [--json]

From 0.20.0 the hybrid block grows in units of the larger of the backend's smallest kernel block and the block the
backend prefers (vllm/platforms/interface.py ``update_block_size_for_backend``, ``_align_hybrid_block_size``).
What runs as vLLM wrote it, for each release and each compute capability of the GPUs hybridplan knows (8.0, 8.6,
8.9, 9.0, 10.0, 10.3, 12.0, 12.1), with and without MLA:

* ``_get_backend_priorities`` (vllm/platforms/cuda.py), the order vLLM tries the backends in;
* each backend class (``AttentionBackendEnum.get_class``) and its ``supports_compute_capability``,
  ``get_supported_kernel_block_sizes`` and ``get_preferred_block_size(16)``.

The pick is the first backend whose ``supports_compute_capability`` holds; its unit is the smallest kernel block,
or the preferred block where that is larger. Stand-ins (runtime context only): the platform (vLLM's own
``CudaPlatform``, its ``get_device_capability`` answering the capability under test), the current config (no
model: the backends' model-dependent branches, FlashInfer's pages of 128 and more for GQA on 10.x and
FlashAttention 4's 128-token pages for head size 256, are not taken; neither changes the smallest block), the
compiled extensions and the ``flashinfer`` package (empty modules), and module-level workspaces allocated on
"cuda" (on the meta device). Not run: ``validate_configuration``'s checks of head size, dtype and KV dtype.
Before 0.20.0 the unit is in vllm/model_executor/models/config.py and does not ask the backend; there
(``--before-0.20``, releases 0.11.1-0.19.1; 0.11.0, which has no such clause, needs numba to import here) the
script runs ``HybridAttentionMambaModelConfig`` itself through
validation/vllm.py's worker (its ``VllmConfig`` built from Qwen3-Next's shipped config at TP 2 with an fp8 KV
cache: head size 256, where Blackwell's clause applies), with ``current_platform`` in that module answering each
compute capability through vLLM's own ``is_device_capability`` and ``is_device_capability_family``, and compares
the block it sets with hybridplan's ``attention_block_size`` for a GPU of that capability.

Uses the interpreter validation/vllm.py documents (torch, transformers and vLLM's pure-Python dependencies).
Exit status 0 when every figure matches, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hybridplan.engines.vllm.releases import VERSIONS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
#: the releases from 0.20.0, where the hybrid block alignment reads the backend's kernel block sizes
RELEASES = VERSIONS[VERSIONS.index("0.20.0") :]
CAPABILITIES = ((8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (10, 3), (12, 0), (12, 1))

WORKER = r'''
import importlib.abc, importlib.machinery, json, sys, types
from types import SimpleNamespace

src, capabilities = sys.argv[1], json.loads(sys.argv[2])
sys.path.insert(0, src)


class Stub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """vLLM's compiled extensions and the flashinfer package: empty modules (not unpacked, not installed)."""

    def find_spec(self, name, path, target=None):
        if (name.startswith(("vllm._C", "vllm._moe_C", "vllm._rocm_C", "vllm._flashmla_C", "vllm.cumem_allocator",
                             "vllm.vllm_flash_attn._vllm_fa"))
                or name == "flashinfer" or name.startswith("flashinfer.")):
            return importlib.machinery.ModuleSpec(name, self)
        return None

    def create_module(self, spec):
        m = types.ModuleType(spec.name)
        m.__path__ = []
        m.__file__ = f"<stub {spec.name}>"

        def missing(attr):
            if attr.startswith("__"):
                raise AttributeError(attr)
            return type(attr, (), {"__init__": lambda self, *a, **k: None})

        m.__getattr__ = missing
        return m

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, Stub())
import torch


def on_meta(make):
    def made(*args, **kwargs):
        if str(kwargs.get("device", "")).startswith("cuda"):
            kwargs["device"] = "meta"
        return make(*args, **kwargs)
    return made


torch.zeros, torch.empty = on_meta(torch.zeros), on_meta(torch.empty)

import vllm.config.vllm as config_module
import vllm.platforms as platforms
from vllm.platforms import cuda
from vllm.platforms.interface import DeviceCapability

config_module._current_vllm_config = SimpleNamespace(
    model_config=None, attention_config=SimpleNamespace(flash_attn_version=None, backend=None),
    cache_config=SimpleNamespace(cache_dtype="auto"), parallel_config=None)
current = [None]
cuda.CudaPlatform.get_device_capability = classmethod(lambda cls, device_id=0: current[0])
platforms._current_platform = cuda.CudaPlatform()

out = []
for major, minor in capabilities:
    current[0] = DeviceCapability(major, minor)
    for mla in (False, True):
        tried = []
        for backend in cuda._get_backend_priorities(mla, current[0]):
            try:
                cls = backend.get_class()
                if not cls.supports_compute_capability(current[0]):
                    tried.append(f"{backend.name} (not on {major}.{minor})")
                    continue
                sizes = cls.get_supported_kernel_block_sizes()
                smallest = min(getattr(s, "base", s) for s in sizes)
                preferred = cls.get_preferred_block_size(16)
            except Exception as e:  # a backend whose module cannot load here: reported, never guessed
                tried.append(f"{backend.name} ({type(e).__name__}: {str(e)[:80]})")
                continue
            out.append({"capability": f"{major}.{minor}", "mla": mla, "backend": backend.name, "tried": tried,
                        "kernel_sizes": [f"MultipleOf({s.base})" if hasattr(s, "base") else s for s in sizes], "unit": max(smallest, preferred)})
            break
        else:
            out.append({"capability": f"{major}.{minor}", "mla": mla, "backend": None, "tried": tried})
print("RESULT " + json.dumps(out))
'''


#: before 0.20.0: releases, and a GPU hybridplan knows for each capability
BEFORE_RELEASES = ("0.11.1", "0.12.0", "0.13.0", "0.14.1", "0.15.1", "0.16.0", "0.17.1", "0.18.0", "0.19.1")
GPU_OF = {(8, 9): "l40s", (9, 0): "h100", (10, 0): "b200", (10, 3): "b300", (12, 0): "rtx-5090"}
HD256_CASE = {
    "model": "qwen3-next-80b-a3b",
    "arch": "Qwen3NextForCausalLM",
    "tp": 2,
    "mode": "none",
    "gdn_backend": "flashinfer",
    "block_size": None,
    "kv_dtype": "fp8",
}


def before_worker(version: str, src: str, config_root: str) -> None:
    """In a subprocess: validation/vllm.py's worker for the release, then the hybrid config hook per capability."""
    import importlib.util
    import os

    spec = importlib.util.spec_from_file_location("hp_validation_vllm", ROOT / "validation" / "vllm.py")
    vv = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = vv
    spec.loader.exec_module(vv)
    os.environ.update(
        HF_HUB_OFFLINE="1", VLLM_ALLOW_LONG_MAX_MODEL_LEN="1", VLLM_CACHE_ROOT=str(Path(src) / ".vllm-cache")
    )
    os.environ["PYTHONPATH"] = os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])
    if not vv.since(version, "0.11.1"):
        os.environ["VLLM_USE_V1"] = "1"
    if vv.since(version, "0.10.2") and not vv.since(version, "0.11.1"):
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    sys.path.insert(0, src)
    w = vv.Worker(version, Path(config_root), [HD256_CASE["model"]])
    import vllm.model_executor.models.config as hook
    from vllm.platforms.interface import DeviceCapability

    out = []
    for cc in GPU_OF:

        class OnThisGpu(type(w.platform)):
            @classmethod
            def get_device_capability(cls, device_id: int = 0):
                return DeviceCapability(*cc)

        hook.current_platform = OnThisGpu()
        try:
            out.append({"capability": f"{cc[0]}.{cc[1]}", "block_size": w.run(dict(HD256_CASE)).get("block_size")})
        except Exception as e:  # reported, never compared
            out.append({"capability": f"{cc[0]}.{cc[1]}", "error": f"{type(e).__name__}: {e}"[:300]})
    print("RESULT " + json.dumps(out))


def worker_rows(version: str, cmd: list[str], failed: list[str], **run: object) -> list[dict] | None:
    """The rows a worker prints on its ``RESULT`` line; None, the release listed in ``failed`` and the tail of its
    output shown, where it prints none."""
    proc = subprocess.run(cmd, capture_output=True, text=True, **run)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        failed.append(version)
        print(f"vLLM {version}: the worker failed\n{(proc.stdout + proc.stderr)[-3000:]}", file=sys.stderr)
        return None
    return json.loads(line[len("RESULT ") :])


def hybridplan_block(version: str, capability: str) -> int:
    sys.path.insert(0, str(ROOT))
    from hybridplan.engines.vllm.blocks import attention_block_size
    from hybridplan.engines.vllm.releases import release
    from hybridplan.engines.vllm.settings import VllmSettings
    from hybridplan.loader import load_model
    from hybridplan.scenario import Budget, DtypeChoice, Scenario

    cc = tuple(int(p) for p in capability.split("."))
    sc = Scenario(
        load_model(HD256_CASE["model"]),
        ctx=8192,
        tp=HD256_CASE["tp"],
        dtypes=DtypeChoice(kv="fp8"),
        engine="vllm",
        vllm=VllmSettings(release=release(version)),
        budget=Budget(gpu=GPU_OF[cc], gpu_mem=1),
    )
    return attention_block_size(sc, "none")[0]


def run_before(releases: list[str], cache: Path, as_json: bool) -> tuple[list, int, list]:
    import os
    import tempfile

    sys.path.insert(0, str(ROOT))
    import yaml

    rows, bad, failed = [], 0, []
    with tempfile.TemporaryDirectory(prefix="hybridplan-backends-") as tmp:
        doc = yaml.safe_load((ROOT / "model_specs" / "qwen3-next-80b-a3b.yaml").read_text())
        (Path(tmp) / "models" / HD256_CASE["model"]).mkdir(parents=True)
        (Path(tmp) / "models" / HD256_CASE["model"] / "config.json").write_text(json.dumps(doc["config"]))
        for version in releases:
            src = unpack(version, cache)
            out = worker_rows(
                version,
                [
                    sys.executable,
                    str(Path(__file__).resolve()),
                    "--before-worker",
                    version,
                    str(src),
                    str(Path(tmp) / "models"),
                ],
                failed,
                cwd=tmp,
                env=dict(os.environ),
            )
            for row in out or ():
                row["release"] = version
                row["hybridplan"] = hybridplan_block(version, row["capability"])
                row["match"] = row.get("block_size") == row["hybridplan"]
                bad += not row["match"]
                rows.append(row)
                if not as_json:
                    print(
                        f"vLLM {version} {row['capability']:>4} Qwen3-Next TP 2 fp8 KV: block "
                        f"{row.get('block_size', row.get('error'))} / hybridplan {row['hybridplan']}"
                        f"{'' if row['match'] else '  MISMATCH'}"
                    )
    return rows, bad, failed


def unpack(version: str, cache: Path) -> Path:
    """The release's Python sources, unpacked once beside its wheel (the layout validation/vllm.py uses)."""
    dest = cache / f"vllm-{version}"
    if (dest / "vllm" / "platforms" / "cuda.py").exists():
        return dest
    wheels = sorted((cache / "wheels").glob(f"vllm-{version}-*.whl")) or sorted(cache.glob(f"vllm-{version}-*.whl"))
    if not wheels:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", f"vllm=={version}", "-d", str(cache / "wheels")],
            check=True,
        )
        wheels = sorted((cache / "wheels").glob(f"vllm-{version}-*.whl"))
    with zipfile.ZipFile(wheels[0]) as z:
        z.extractall(dest, [n for n in z.namelist() if n.startswith("vllm/") and n.endswith(".py")])
    return dest


def hybridplan_unit(capability: str, mla: bool) -> int:
    sys.path.insert(0, str(ROOT))
    from hybridplan.engines.vllm.blocks import backend_kernel_block

    major, minor = (int(p) for p in capability.split("."))
    return backend_kernel_block((major, minor), mla)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--releases", nargs="+", default=list(RELEASES), metavar="X.Y.Z")
    ap.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "hybridplan-validation")
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--before-0.20",
        dest="before",
        action="store_true",
        help="the hybrid config hook of 0.11.0-0.19.1 (--releases from those) instead",
    )
    ap.add_argument("--before-worker", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.before_worker:
        here = Path(__file__).resolve().parent  # keep validation/vllm.py from shadowing the vllm package
        sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
        before_worker(*args.before_worker)
        return 0
    if args.before:
        releases = [r for r in args.releases if r in BEFORE_RELEASES] or list(BEFORE_RELEASES)
        rows, bad, failed = run_before(releases, args.cache_dir, args.json)
        if args.json:
            print(json.dumps({"rows": rows, "mismatches": bad, "failed": failed}, indent=1))
        else:
            print(f"total: {len(rows)} comparisons, {bad} mismatches, {len(failed)} releases failed")
        return 0 if not bad and not failed else 1
    report, bad, failed = [], 0, []
    for version in args.releases:
        src = unpack(version, args.cache_dir)
        out = worker_rows(
            version, [sys.executable, "-c", WORKER, str(src), json.dumps(CAPABILITIES)], failed, cwd="/tmp"
        )
        for row in out or ():
            row["release"] = version
            if row["backend"] is None:
                row["match"] = False
            else:
                row["hybridplan"] = hybridplan_unit(row["capability"], row["mla"])
                row["match"] = row["hybridplan"] == row["unit"]
            bad += not row["match"]
            report.append(row)
            if not args.json:
                kind = "MLA" if row["mla"] else "MHA"
                print(
                    f"vLLM {version} {row['capability']:>4} {kind}: {row['backend'] or 'none valid'} "
                    f"{row.get('kernel_sizes')} unit {row.get('unit')} / hybridplan {row.get('hybridplan')}"
                    f"{'' if row['match'] else '  MISMATCH'}"
                )
    if args.json:
        print(json.dumps({"rows": report, "mismatches": bad, "failed": failed}, indent=1))
    else:
        print(f"total: {len(report)} comparisons, {bad} mismatches, {len(failed)} releases failed")
    return 0 if not bad and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
