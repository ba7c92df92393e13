"""Compare hybridplan's HiCache host pools (hybridplan/engines/sglang/hicache.py ``host_pools``) with SGLang's own
sizing code, read from the wheels' source and executed on plain numbers (no torch, no GPU).

    python validation/sglang_hicache.py                      # the releases 0.5.10rc0 – 0.5.23 under /tmp/wheels
    python validation/sglang_hicache.py --releases 0.5.16,0.5.17 [--json]

Nothing of SGLang is copied here: for each release the wheel's files are unzipped (only those named below) and
the statements that size a pool are cut out with ``ast`` and run as they are, with the objects they read stood in
(``self`` holding ``size_per_token`` and ``page_size``, a device pool holding ``size``, ``sync_fixed_hicache_size``
as the identity it is on one rank):

* the KV host pool: ``HostKVCache.__init__``, the ``if host_size > 0`` statement and the page round-up after it
  (mem_cache/memory_pool_host.py to 0.5.13, mem_cache/pool_host/base.py from 0.5.14);
* the Mamba host pool: ``MambaPoolHost.__init__``, the same statements (memory_pool_host.py to 0.5.17,
  pool_host/mamba.py from 0.5.18);
* the budget each gets: ``_split_hicache_size`` (mem_cache/hybrid_cache/hybrid_pool_assembler.py) where
  ``build_hybrid_mamba_stack`` calls it, else the whole ``--hicache-size`` to each (hi_mamba_radix_cache.py in
  0.5.10rc0–0.5.10.post1, the assembler to 0.5.16).

Each case (ratios, sizes, pages) is compared figure by figure: host KV tokens and Mamba states. Exit 1 on a
mismatch.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hybridplan.engines.sglang.hicache import DevicePools, HiCache, host_pools  # noqa: E402
from hybridplan.engines.sglang.releases import VERSIONS, release  # noqa: E402

WHEELS = Path("/tmp/wheels")
FILES = (
    "sglang/srt/mem_cache/memory_pool_host.py",
    "sglang/srt/mem_cache/pool_host/base.py",
    "sglang/srt/mem_cache/pool_host/mamba.py",
    "sglang/srt/mem_cache/hybrid_cache/hybrid_pool_assembler.py",
    "sglang/srt/mem_cache/hi_mamba_radix_cache.py",
)

#: (device KV tokens, host KV bytes a token, page, device states, bytes a state, KV device bytes, Mamba device
#: bytes): the sglang#39830 log's pools (tests/test_hicache.py), and a second shape at page 1
POOLS = (
    (240_128, 13_312, 64, 48, 58_834_944, 5_902_958_592, 4_059_611_136),
    (1_245_404, 12_288, 1, 712, 19_210_240, 15_303_536_640, 13_696_901_120),
)
#: (ratio or None, --hicache-size GB)
SETTINGS = ((None, 0), (3.0, 0), (1.5, 0), (None, 96), (None, 20))


def _sources(version: str) -> dict[str, str]:
    wheel = next((WHEELS / f"sglang-{version}").glob("*.whl"))
    out = {}
    with zipfile.ZipFile(wheel) as z:
        for name in FILES:
            if name in z.namelist():
                out[name] = z.read(name).decode()
    return out


def _init(source: str, cls: str) -> ast.FunctionDef | None:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    return item
    return None


def _sizing(init: ast.FunctionDef) -> str:
    """The ``if host_size > 0: … else: …`` statement and the two page round-up statements after it, as
    source."""
    for node in ast.walk(init):
        body = getattr(node, "body", None)
        for seq in (body, getattr(node, "orelse", None)):
            if not isinstance(seq, list):
                continue
            for i, stmt in enumerate(seq):
                if isinstance(stmt, ast.If) and ast.unparse(stmt.test) == "host_size > 0":
                    return "\n".join(ast.unparse(s) for s in seq[i : i + 3])
    raise LookupError("no `if host_size > 0` statement")


def _run(code: str, device: int, unit: int, page: int, ratio: float, host_size: float) -> int:
    me = SimpleNamespace(size_per_token=unit, page_size=page)
    ns = {
        "self": me,
        "host_size": host_size,
        "host_to_device_ratio": ratio,
        "device_pool": SimpleNamespace(size=device),
        "device_capacity": device,
        "device_capacity_tokens": device,
        "sync_fixed_hicache_size": lambda size, _gb: size,
    }
    exec(code, ns)  # noqa: S102 - SGLang's own statements, read from its wheel
    return me.size


def _split(sources: dict[str, str]):
    """SGLang's budget per pool: ``_split_hicache_size`` where the Mamba stack calls it, else the whole size."""
    asm = sources.get("sglang/srt/mem_cache/hybrid_cache/hybrid_pool_assembler.py", "")
    tree = ast.parse(asm) if asm else None
    fn = stack = None
    for node in tree.body if tree else ():
        if isinstance(node, ast.FunctionDef) and node.name == "_split_hicache_size":
            fn = node
        if isinstance(node, ast.FunctionDef) and node.name == "build_hybrid_mamba_stack":
            stack = node
    if fn is None or stack is None or "_split_hicache_size(" not in ast.unparse(stack):
        return lambda size, kv, mamba: (size, size)
    ns: dict = {"Any": object}
    exec(compile(ast.Module([fn], []), "hybrid_pool_assembler.py", "exec"), ns)  # noqa: S102
    pools = [SimpleNamespace(get_kv_size_bytes=lambda b=b: b) for b in (0, 0)]

    def split(size, kv, mamba):
        pools[0].get_kv_size_bytes = lambda: kv
        pools[1].get_kv_size_bytes = lambda: mamba
        return ns["_split_hicache_size"](size, tuple(pools))

    return split


def check(version: str) -> list[dict]:
    src = _sources(version)
    base = src.get("sglang/srt/mem_cache/pool_host/base.py") or src["sglang/srt/mem_cache/memory_pool_host.py"]
    if _init(base, "HostKVCache") is None:
        base = src["sglang/srt/mem_cache/memory_pool_host.py"]
    kv_code = _sizing(_init(base, "HostKVCache"))
    mamba_src = src.get("sglang/srt/mem_cache/pool_host/mamba.py") or src["sglang/srt/mem_cache/memory_pool_host.py"]
    mamba_code = _sizing(_init(mamba_src, "MambaPoolHost"))
    split = _split(src)
    rows = []
    for t, kv_unit, page, slots, slot, kv_dev, m_dev in POOLS:
        for ratio, size in SETTINGS:
            r = 2.0 if ratio is None else ratio
            kv_gb, m_gb = split(size, kv_dev, m_dev) if size else (0, 0)
            engine = (_run(kv_code, t, kv_unit, page, r, kv_gb), _run(mamba_code, slots, slot, 1, r, m_gb))
            try:
                p = host_pools(
                    release(version),
                    HiCache(ratio=ratio, size_gb=size),
                    DevicePools(t, kv_unit, kv_dev, page, slots, slot, m_dev),
                )
                ours = (p.kv.size, p.mamba.size)
            except Exception as exc:  # a refusal: SGLang's assert to 0.5.14 where the host pool is not larger
                ours = (type(exc).__name__, str(exc)[:60])
                asserted = release(version).before("0.5.15") and (engine[0] <= t or engine[1] <= slots)
                rows.append(
                    {
                        "version": version,
                        "case": (t, page, ratio, size),
                        "sglang": engine,
                        "hybridplan": ours,
                        "ok": asserted,
                    }
                )
                continue
            rows.append(
                {
                    "version": version,
                    "case": (t, page, ratio, size),
                    "sglang": engine,
                    "hybridplan": ours,
                    "ok": engine == ours,
                }
            )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--releases", help="comma-separated (default: 0.5.10rc0 on, those under /tmp/wheels)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    versions = (
        a.releases.split(",")
        if a.releases
        else [v for v in VERSIONS[VERSIONS.index("0.5.10rc0") :] if (WHEELS / f"sglang-{v}").is_dir()]
    )
    rows = [r for v in versions for r in check(v)]
    bad = [r for r in rows if not r["ok"]]
    if a.json:
        print(json.dumps({"rows": rows, "mismatches": len(bad)}, indent=1, default=str))
    else:
        for v in versions:
            mine = [r for r in rows if r["version"] == v]
            print(f"sglang {v}: {sum(r['ok'] for r in mine)}/{len(mine)} cases equal")
        for r in bad:
            print(f"  MISMATCH {r['version']} {r['case']}: sglang {r['sglang']} hybridplan {r['hybridplan']}")
        print(f"{len(rows)} cases, {len(bad)} mismatches")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
