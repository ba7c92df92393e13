"""SGLang's hierarchical cache (HiCache) for hybrids: the host pools each release allocates, what it refuses,
and the real log that pins the sizing (hybridplan/engines/sglang/hicache.py; SGLang's files named per test)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from msgspec.structs import replace

from hybridplan.engines.sglang.hicache import DevicePools, HiCache, host_pools
from hybridplan.engines.sglang.releases import release
from hybridplan.errors import PlanError, Refused

LOG = Path(__file__).parent / "data" / "logs" / "sglang-0.5.20-qwen3.8-flash-next-nvfp4-hicache-rtxpro6000-1.log"

# --- the device pools the log prints, as bytes (the log's GB are GiB: memory_pool.py divides by 1 << 30) -------
# KV: "#tokens: 240128, K 1.37 GB": 1.37 GiB / ((240,128 + 64 page rows) · 12 layers) = 510 B a token and layer,
# i.e. 2 KV heads · 256 · 1 B (fp8_e4m3) = 512 B (1.374 GiB). Host KV per token: K and V of the 12 target layers
# and the packed MTP draft layer ("total_layers=13"): 2 · 512 · 13 = 13,312 B
T, PAGE, KV_LAYER = 240_128, 64, 512
KV_DEVICE = (T + PAGE) * KV_LAYER * 2 * 12
KV_HOST_UNIT = 2 * KV_LAYER * 13
# Mamba: 36 GDN layers, 48 + 1 rows ("max_mamba_cache_size: 48"). conv 10,240 channels · 3 · 2 B = 61,440 B a
# layer (49 · 36 · 61,440 = 0.10 GiB), SSM 48 heads · 128 · 128 · 2 B (bfloat16) = 1,572,864 B (49 · 36 · that =
# 2.58 GiB); a host state is one slot over the 36 layers: 36 · (61,440 + 1,572,864) = 58,834,944 B
SLOTS, CONV, SSM, GDN = 48, 61_440, 1_572_864, 36
SLOT = GDN * (CONV + SSM)
# speculative buffers: max_running_requests 4 + 1 rows, 4 draft tokens: SSM 5 · 4 · 36 · 1,572,864 = 1.05 GiB; the
# conv windows are stored deduplicated, 5 · 10,240 · (4 + 3 − 1) · 2 B · 36 = 0.02 GiB as the log prints, but held
# as an as_strided view of 5 · 4 · 61,440 B a layer, and mem_usage_bytes sums the view's shape
SPEC_SSM = 5 * 4 * GDN * SSM
CONV_PHYSICAL = 5 * 10_240 * (4 + 3 - 1) * 2 * GDN
CONV_VIEW = 5 * 4 * GDN * CONV
MAMBA_DEVICE = (SLOTS + 1) * SLOT + SPEC_SSM + CONV_VIEW
SETTINGS = HiCache(size_gb=96, mem_layout="page_first", io_backend="direct")


def _logged() -> tuple[int, float, float, str]:
    text = LOG.read_text()
    kv = re.search(r"hierarchical KV host pool: (\d+) tokens, ([\d.]+) GB host memory", text)
    mamba = re.search(r"Allocating ([\d.]+) GB host memory for hierarchical Mamba cache \(layout=(\w+)\)", text)
    assert kv and mamba
    return int(kv[1]), float(kv[2]), float(mamba[1]), mamba[2]


def _pools(version: str, hc: HiCache = SETTINGS, mamba_device: int = MAMBA_DEVICE):
    return host_pools(release(version), hc, DevicePools(T, KV_HOST_UNIT, KV_DEVICE, PAGE, SLOTS, SLOT, mamba_device))


def test_device_figures_are_the_logs():
    # the byte counts above print as the log's own figures
    gib = 1 << 30
    assert f"{KV_DEVICE / 2 / gib:.2f}" == "1.37"
    assert f"{(SLOTS + 1) * GDN * CONV / gib:.2f}" == "0.10" and f"{(SLOTS + 1) * GDN * SSM / gib:.2f}" == "2.58"
    assert f"{SPEC_SSM / gib:.2f}" == "1.05" and f"{CONV_PHYSICAL / gib:.2f}" == "0.02"


def test_host_pools_reproduce_a_real_log():
    # sglang#39830's boot lines (0.5.20.dev728): --hicache-size 96 split by device bytes (0.5.17 on,
    # _split_hicache_size), each pool one page past int(budget · 1e9 // unit), and page_first with the direct
    # I/O backend logged as page_first_direct
    tokens, kv_gb, mamba_gb, layout = _logged()
    p = _pools("0.5.20")
    assert p.kv.size == tokens == 3_035_904
    assert f"{p.kv.bytes / 1e9:.2f}" == f"{kv_gb:.2f}" == "40.41"
    assert f"{p.mamba.bytes / 1e9:.2f}" == f"{mamba_gb:.2f}" == "55.60"
    assert p.layout == layout == "page_first_direct"
    assert p.mamba.size == 945  # int(55.59… GB / 58,834,944 B) + 1
    assert p.logs[0] == "Allocating kv hierarchical KV host pool: 3035904 tokens, 40.41 GB host memory."


def test_the_split_counts_the_conv_view_not_the_printed_buffer():
    # with the deduplicated conv windows at their physical size the split moves and the log is missed: the log
    # pins that mem_usage_bytes counts the dense view (memory_pool.py SpeculativeState, as_strided)
    p = _pools("0.5.20", mamba_device=(SLOTS + 1) * SLOT + SPEC_SSM + CONV_PHYSICAL)
    assert p.kv.size != _logged()[0]


def test_before_0_5_17_each_pool_takes_the_whole_size():
    # sglang#29034: 0.5.10rc0-0.5.16 pass --hicache-size to both pools: KV int(96e9 // 13,312) = 7,211,538 tokens,
    # one page past: (7,211,538 // 64 + 1) · 64 = 7,211,584; Mamba int(96e9 // 58,834,944) + 1 = 1,632 states
    p = _pools("0.5.16")
    assert p.kv.size == 7_211_584 and p.mamba.size == 1_632
    assert p.bytes > 96e9 * 1.9 and any("whole --hicache-size" in n for n in p.notes)


def test_ratio_sizes_each_pool_by_its_own_device_pool():
    # --hicache-ratio 3: int(240,128 · 3) = 720,384 = 11,256 pages → 11,257 · 64 = 720,448 tokens; Mamba
    # int(48 · 3) + 1 = 145 states (pool_host/base.py, pool_host/mamba.py)
    p = _pools("0.5.23", HiCache(ratio=3))
    assert (p.kv.size, p.mamba.size) == (720_448, 145)
    assert p.logs[1].startswith("Allocating 8.53 GB host memory for hierarchical Mamba cache (145 state slots, ")


def test_default_ratio_is_auto_sized_from_0_5_21():
    # 0.5.21 on: the default ratio 2.0 is lowered to fit 0.8 of the host's free memory (hicache_auto_size.py)
    assert any("hicache_auto_size.py" in n for n in _pools("0.5.21", HiCache()).notes)
    assert not _pools("0.5.20", HiCache()).notes
    assert not _pools("0.5.21", HiCache(ratio=2)).notes


def test_hybrids_are_refused_before_0_5_10rc0():
    # 0.5.2-0.5.9 build HiRadixCache, which raises for a HybridLinearKVPool (mem_cache/hiradix_cache.py)
    with pytest.raises(Refused, match="HiRadixCache only supports MHA and MLA yet"):
        _pools("0.5.9")
    assert _pools("0.5.10rc0").kv.size


def test_a_host_pool_no_larger_than_the_device_pool():
    # ratio 0.5: int(48 · 0.5) + 1 = 25 ≤ 48 states. 0.5.10rc0-0.5.14 assert (memory_pool_host.py), 0.5.15 on warn
    with pytest.raises(Refused, match="The host memory should be larger than the device memory"):
        _pools("0.5.14", HiCache(ratio=0.5))
    p = _pools("0.5.15", HiCache(ratio=0.5))
    assert p.mamba.size == 25 and any("L2 cache effectiveness is reduced" in n for n in p.notes)


def test_layout_and_log_line_per_release():
    # default --hicache-mem-layout: layer_first to 0.5.13, page_first from 0.5.14; the KV line names its tokens
    # from 0.5.17 (pool_host/base.py), memory_pool_host.py's "... for hierarchical KV cache." before
    assert _pools("0.5.13", HiCache()).layout == "layer_first"
    assert _pools("0.5.14", HiCache()).layout == "page_first"
    assert _pools("0.5.16", HiCache()).logs[0].endswith("GB host memory for hierarchical KV cache.")


def test_bad_settings_are_one_line():
    with pytest.raises(PlanError, match="write_through, write_through_selective, write_back"):
        HiCache(write_policy="write_once")
    with pytest.raises(PlanError, match="--hicache-ratio must be positive"):
        HiCache(ratio=0)


# --- fit, the pasted line and the printed command -------------------------------------------------------------


def test_fit_shows_the_host_pools(run_cli):
    # Qwen3-Next at TP 4 on an H100, 0.5.20, --hicache-ratio 3: the host KV pool is (int(T · 3) // 1 + 1) tokens
    # of 12 layers · 1 KV head (2 heads over TP 4, replicated) · 256 · 2 (K, V) · 2 B = 12,288 B (pool_host/mha.py)
    code, out, err = run_cli(
        "fit",
        "qwen3-next",
        "--tp",
        "4",
        "--gpu-type",
        "h100",
        "--engine",
        "sglang",
        "--sglang-version",
        "0.5.20",
        "--enable-hierarchical-cache",
        "--hicache-ratio",
        "3",
        "--json",
    )
    assert code == 0, err
    import json

    s = json.loads(out)["sglang"]
    h = s["hicache"]
    assert h["kv_bytes_per_token"] == 12 * 1 * 256 * 2 * 2
    assert h["kv_host_tokens"] == int(s["kv_tokens"] * 3) + 1
    assert h["mamba_host_slots"] == int(s["max_mamba_cache_size"] * 3) + 1
    assert any(line.startswith("Allocating kv hierarchical KV host pool: ") for line in s["logs"])


def test_fit_refuses_hicache_where_the_release_does(run_cli):
    code, out, err = run_cli(
        "fit",
        "qwen3-next",
        "--tp",
        "4",
        "--gpu-type",
        "h100",
        "--engine",
        "sglang",
        "--sglang-version",
        "0.5.9",
        "--enable-hierarchical-cache",
    )
    assert code == 1 and "HiRadixCache only supports MHA and MLA yet" in out


def test_pasted_line_round_trips(run_cli):
    # the line SGLang 0.5.23 takes (--enable-hicache, flags.json) gives the same host pools as hybridplan's flags,
    # and fit prints it back with the release's flag name
    line = (
        "--",
        "sglang",
        "serve",
        "--model-path",
        "Qwen/Qwen3-Next-80B-A3B-Instruct",
        "--tp-size",
        "4",
        "--enable-hicache",
        "--hicache-size",
        "64",
        "--hicache-write-policy",
        "write_back",
    )
    code, out, err = run_cli("fit", "--gpu-type", "h100", "--sglang-version", "0.5.23", "--engine", "sglang", *line)
    assert code == 0, err
    assert "--enable-hicache --hicache-size 64 --hicache-write-policy write_back" in out
    assert "Mamba host pool" in out and "write_back" in out


def test_check_log_reads_the_host_pool_lines(run_cli, tmp_path):
    # the real 0.5.18 Qwen3.8-27B log (tests/data/logs, SOURCES.md) with the two host lines a start with
    # --enable-hierarchical-cache at the default ratio 2 prints, derived from its own device pools: KV
    # int(330,323 · 2) + 1 = 660,647 tokens of 16 layers · 4 KV heads · 256 · 2 (K, V) · 2 B = 65,536 B =
    # 43.30 GB; Mamba int(124 · 2) + 1 = 249 states of 48 · (61,440 + 3,145,728) B = 38.33 GB; page_first, the
    # default layout from 0.5.14
    real = (LOG.parent / "sglang-0.5.18-qwen3.8-27b-fp8-h100-1.log").read_text()
    log = tmp_path / "hicache.log"
    log.write_text(
        real + "Allocating kv hierarchical KV host pool: 660647 tokens, 43.30 GB host memory.\n"
        "Allocating 38.33 GB host memory for hierarchical Mamba cache (layout=page_first).\n"
    )
    code, out, err = run_cli(
        "check-log",
        log,
        "--model",
        "qwen3.5-27b",
        "--sglang-version",
        "0.5.18",
        "--mem-fraction-static",
        "0.85",
        "--max-running-requests",
        "32",
        "--json",
    )
    import json

    d = json.loads(out)
    rows = {r["figure"]: r for r in d["rows"]}
    assert code == 0 and d["ok"], err
    for figure in ("KV host pool tokens", "KV host pool (GB)", "Mamba host pool (GB)", "host pool layout"):
        assert rows[figure]["ok"], rows[figure]
    # a wrong figure is a mismatch: the Mamba pool at the whole ratio of a different device pool
    log.write_text(real + "Allocating 38.48 GB host memory for hierarchical Mamba cache (layout=page_first).\n")
    code, out, _ = run_cli(
        "check-log",
        log,
        "--model",
        "qwen3.5-27b",
        "--sglang-version",
        "0.5.18",
        "--mem-fraction-static",
        "0.85",
        "--max-running-requests",
        "32",
        "--json",
    )
    assert code == 1 and not {r["figure"]: r for r in json.loads(out)["rows"]}["Mamba host pool (GB)"]["ok"]


# --- the host tier in replay (hicache_tree.py) -----------------------------------------------------------------


def _trace(tmp_path):
    # P: 256 tokens; Q: 480 other tokens; then P again with 64 more. With a 512-token device KV pool, Q's 480
    # tokens evict P's 256 (256 + 480 > 512); P's no_buffer state sits at its end, token 256 (a chunk end)
    import json

    p, q = list(range(256)), list(range(1000, 1480))
    path = tmp_path / "t.jsonl"
    path.write_text(
        "".join(
            json.dumps({"prompt_token_ids": ids, "output_len": 0}) + "\n" for ids in (p, q, p + list(range(5000, 5064)))
        )
    )
    return path


def _replay(tmp_path, policy: str | None):
    from hybridplan.engines.sglang import radix_cache as spc
    from hybridplan.engines.sglang.hicache import WRITE_POLICIES
    from hybridplan.replay import trace as tr
    from hybridplan.replay.loop import Policy, replay

    r = spc.Rules("t", "0.5.23", "no_buffer", 64, 8192, 512, 8, 1, -1, False, 1 << 20)
    if policy is not None:
        r = replace(r, host_kv_tokens=4096, host_states=16, write_policy=policy, write_threshold=WRITE_POLICIES[policy])
    runs, _ = replay([Policy("t", spc.cache(r), r.grid, r.max_model_len)], tr.read(_trace(tmp_path), "tokens"))
    return runs["t"]


@pytest.mark.parametrize(
    "policy,host_tokens",
    [
        (None, None),  # no host tier: P was evicted from the device, the third request recomputes it
        ("write_through", 256),  # P backed up at its first insert: found on host, 256 tokens loaded back
        ("write_back", 256),  # P backed up when Q evicts it from the device
        ("write_through_selective", 0),  # P inserted once: never backed up, lost with its eviction
    ],
)
def test_host_hits_per_write_policy(tmp_path, policy, host_tokens):
    run = _replay(tmp_path, policy)
    assert run.evictions
    if policy is None:
        assert run.host is None and run.outcomes[2].reused == 0
        return
    assert run.host["host_hit_tokens"] == host_tokens
    assert run.outcomes[2].reused == host_tokens
    assert run.host["host_hit_requests"] == (1 if host_tokens else 0)
    # write_through backs up every insert once: P's 4 grid units of 64 (256), Q's 7 (448; its last 32 tokens
    # fill no unit), and the third request's one new unit (64; its first 256 are on host already)
    if policy == "write_through":
        assert run.host["written_tokens"] == 256 + 448 + 64


def test_replay_refuses_what_the_release_refuses(run_cli, tmp_path):
    trace = _trace(tmp_path)
    code, out, err = run_cli(
        "replay",
        trace,
        "qwen3-next",
        "--tp",
        "4",
        "--kv-budget",
        "20GiB",
        "--engine",
        "sglang",
        "--sglang-version",
        "0.5.9",
        "--enable-hierarchical-cache",
    )
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert "SGLang 0.5.9 will not start: HiRadixCache only supports MHA and MLA yet" in err
    code, out, err = run_cli(
        "replay",
        trace,
        "qwen3-next",
        "--tp",
        "4",
        "--kv-budget",
        "20GiB",
        "--engine",
        "sglang",
        "--sglang-version",
        "0.5.18",
        "--enable-hierarchical-cache",
        "--enable-int8-mamba-checkpoint",
    )
    assert code == 2 and "--enable-int8-mamba-checkpoint is not supported together with" in err


def test_replay_json_reports_the_host_tier(run_cli, tmp_path):
    import json

    code, out, err = run_cli(
        "replay",
        _trace(tmp_path),
        "qwen3-next",
        "--tp",
        "4",
        "--kv-budget",
        "20GiB",
        "--engine",
        "sglang",
        "--enable-hierarchical-cache",
        "--hicache-ratio",
        "2",
        "--json",
    )
    assert code == 0, err
    row = json.loads(out)["rows"][0]
    h = row["host_tier"]
    assert row["label"].endswith("+ HiCache write_through") and h["write_policy"] == "write_through"
    assert h["device_hit_tokens"] + h["host_hit_tokens"] == row["reused_tokens"]
    assert row["rules"]["host_kv_tokens"] > row["rules"]["kv_pool_tokens"]


def test_buffer_only_host_memory_is_refused_as_sglang_refuses_it(run_cli):
    # buffer_only needs a storage backend (arg_groups/hicache_hook.py validate_hicache_host_memory_mode, 0.5.19+)
    code, out, err = run_cli(
        "fit",
        "--gpu-type",
        "h100",
        "--engine",
        "sglang",
        "--",
        "sglang",
        "serve",
        "--model-path",
        "Qwen/Qwen3-Next-80B-A3B-Instruct",
        "--tp-size",
        "4",
        "--enable-hierarchical-cache",
        "--hicache-host-memory-mode",
        "buffer_only",
    )
    assert code == 2 and not out and "buffer_only requires a storage backend" in err
    assert len(err.strip().splitlines()) == 1


def test_the_whole_size_to_each_pool_as_sglang_29037_reports():
    # sglang#29037's table (Qwen3.5-397B-A17B-FP8, TP 8, --hicache-size 20, before its fix): KV host 20.00 GB,
    # Mamba host 20.02 GB per rank. A host state at TP 8: 45 GDN layers · (conv 1,536 · 3 · 2 B + SSM 8 heads ·
    # 128 · 128 · 4 B) = 24,007,680 B, so int(20e9 // that) + 1 = 834 states = 20.02 GB; host KV 15 layers · 1 KV
    # head · 256 · 2 · 1 B (fp8) = 7,680 B a token. Device pools from the table: 13.42 GB of KV (1,747,395
    # tokens), 1.34 GB of states (55)
    from hybridplan.engines.sglang.pool import footprint
    from hybridplan.loader import load_model
    from hybridplan.scenario import DtypeChoice, Scenario

    fp = footprint(
        Scenario(load_model("qwen3.5-397b-a17b"), ctx=8192, tp=8, engine="sglang", dtypes=DtypeChoice(kv="fp8_e4m3"))
    )
    slot = fp.conv_bytes + fp.ssm_bytes
    assert slot == 45 * (1_536 * 3 * 2 + 8 * 128 * 128 * 4) and fp.kv_bytes_per_token == 7_680
    dev = DevicePools(1_747_395, 7_680, 13_420_000_000, 1, 55, slot, 1_340_000_000)
    p = host_pools(release("0.5.16"), HiCache(size_gb=20), dev)
    assert f"{p.kv.bytes / 1e9:.2f}" == "20.00" and f"{p.mamba.bytes / 1e9:.2f}" == "20.02" and p.mamba.size == 834
    # from 0.5.17 the 20 GB are split by device bytes: 20 · 13.42 / 14.76 = 18.18 GB of KV, 1.82 GB of states
    q = host_pools(release("0.5.17"), HiCache(size_gb=20), dev)
    assert f"{q.kv.bytes / 1e9:.2f}" == "18.18" and q.mamba.size == int(20e9 * 1.34 / 14.76 // slot) + 1
