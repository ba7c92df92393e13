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
Before 0.20.0 the unit is in vllm/model_executor/models/config.py and does not ask the backend (docs/engines.md).

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

ROOT = Path(__file__).resolve().parents[1]
RELEASES = ("0.20.0", "0.20.1", "0.20.2", "0.21.0", "0.22.0", "0.22.1", "0.23.0", "0.24.0", "0.25.0", "0.25.1",
            "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0")
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


def unpack(version: str, cache: Path) -> Path:
    """The release's Python sources, unpacked once beside its wheel (the layout validation/vllm.py uses)."""
    dest = cache / f"vllm-{version}"
    if (dest / "vllm" / "platforms" / "cuda.py").exists():
        return dest
    wheels = sorted((cache / "wheels").glob(f"vllm-{version}-*.whl")) or sorted(cache.glob(f"vllm-{version}-*.whl"))
    if not wheels:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", f"vllm=={version}", "-d",
                        str(cache / "wheels")], check=True)
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
    args = ap.parse_args()
    report, bad, failed = [], 0, []
    for version in args.releases:
        src = unpack(version, args.cache_dir)
        run = subprocess.run([sys.executable, "-c", WORKER, str(src), json.dumps(CAPABILITIES)],
                             capture_output=True, text=True, cwd="/tmp")
        line = next((ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            failed.append(version)
            print(f"vLLM {version}: the worker failed\n{run.stderr[-2000:]}", file=sys.stderr)
            continue
        for row in json.loads(line[len("RESULT "):]):
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
                print(f"vLLM {version} {row['capability']:>4} {kind}: {row['backend'] or 'none valid'} "
                      f"{row.get('kernel_sizes')} unit {row.get('unit')} / hybridplan {row.get('hybridplan')}"
                      f"{'' if row['match'] else '  MISMATCH'}")
    if args.json:
        print(json.dumps({"rows": report, "mismatches": bad, "failed": failed}, indent=1))
    else:
        print(f"total: {len(report)} comparisons, {bad} mismatches, {len(failed)} releases failed")
    return 0 if not bad and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
