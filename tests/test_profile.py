"""`hybridplan profile` end to end on the CPU (Triton interpreter), its refusals, and its clean-up."""

import gc
import json
import os
import subprocess
import sys
import weakref
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")  # the gpu or test extra; the test environment has it
if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before triton loads: without a GPU the kernels run interpreted

import typer  # noqa: E402
from hybridplan.kernels import bench  # noqa: E402

from hybridplan import cli  # noqa: E402
from hybridplan.errors import PlanError  # noqa: E402
from hybridplan.loader import load_model  # noqa: E402
from hybridplan.profile import backends, pipeline  # noqa: E402
from hybridplan.profile.command import profile  # noqa: E402
from hybridplan.profile.shrink import CTX, SLOTS, TOKENS, shrink_spec  # noqa: E402
from hybridplan.scenario import DtypeChoice  # noqa: E402
from tests.helpers import footprint  # noqa: E402


def _interpreter_usable() -> bool:
    if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        return False
    import triton.language.standard as std

    return type(std.sum).__name__ == "InterpretedFunction"


# the interpreter reads loop bounds through NumPy's deprecated array-to-int path: triton's, not ours
pytestmark = [
    pytest.mark.kernels,
    pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0 to a scalar:DeprecationWarning"),
]

needs_interpreter = pytest.mark.skipif(not _interpreter_usable(), reason="triton is loaded for a GPU in this process")
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")


@pytest.fixture
def profile_cli(monkeypatch, capsys):
    """``hybridplan profile ARGS`` through ``cli.main`` (its one-line errors and exit codes). Until the command
    is registered in hybridplan/cli.py, a stand-in app holding it takes the place of ``cli.app``."""
    if not any(c.name == "profile" for c in cli.app.registered_commands):
        app = typer.Typer(name="hybridplan", pretty_exceptions_enable=False, no_args_is_help=True)
        app.callback()(lambda: None)  # a group, so that `profile` stays a subcommand
        app.command(name="profile")(profile)
        monkeypatch.setattr(cli, "app", app)

    def run(*args: str):
        code = cli.main(["profile", *map(str, args)])
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def _predicted(model: str, choice: DtypeChoice = DtypeChoice()) -> tuple[int, int]:
    """The planner's own figures for the shrunken spec, computed independently of the profiler."""
    fp = footprint(shrink_spec(load_model(model)), tp=1, dtypes=choice)
    return fp.pool_bytes(SLOTS), fp.kv_bytes_at(CTX)


@needs_interpreter
def test_interpret_json_allocation_equals_prediction(profile_cli):
    code, out, err = profile_cli("nemotron-h", "--interpret", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["schema_version"] == 1
    assert (d["model"], d["profiled_spec"], d["interpret"]) == ("nemotron-h-8b", "nemotron-h-8b-tiny", True)
    assert (d["slots"], d["ctx"], d["tokens"], d["chunk_size"]) == (SLOTS, CTX, TOKENS, 16)
    assert d["dtypes"] == {"conv": "bfloat16", "ssm": "float32", "kv": "bfloat16", "activations": "float32"}

    mem = d["memory"]
    state, kv = _predicted("nemotron-h")
    assert mem["exact"] is True
    assert mem["predicted"]["state_pool_bytes"] == mem["measured"]["state_pool_bytes"] == state
    assert mem["predicted"]["kv_bytes"] == mem["measured"]["kv_bytes"] == kv
    assert mem["predicted"]["total_bytes"] == mem["measured"]["total_bytes"] == state + kv
    assert mem["difference"]["total_bytes"] == 0
    assert [t["name"] for t in mem["tensors"]] == ["mamba2.conv", "mamba2.ssm", "attention.kv"]
    for t in mem["tensors"]:
        assert t["predicted"]["bytes"] == t["measured"]["bytes"] == t["measured"]["storage_bytes"]
        assert isinstance(t["measured"]["bytes"], int)
    # (layers, slots, *state shape), and the KV as (layers, K/V, tokens, kv heads, head dim)
    assert mem["tensors"][1]["shape"] == [2, SLOTS, 4, 8, 8]
    assert mem["tensors"][2]["shape"][:3] == [2, 2, CTX]

    for phase, kernels in (
        ("decode", ["causal_conv1d_update", "selective_state_update"]),
        ("prefill", ["causal_conv1d_prefill", "ssd_chunk_scan"]),
    ):
        rows = d[phase]["rows"]
        assert [r["kernel"] for r in rows] == kernels
        assert all(r["status"] == "ok" and r["measured"]["seconds"] > 0 for r in rows)
        assert all(r["predicted"]["seconds"] > 0 and isinstance(r["predicted"]["bytes"], int) for r in rows)
        total = d[phase]
        assert total["predicted"]["bytes"] == sum(r["predicted"]["bytes"] for r in rows)
        assert total["measured"]["seconds"] == pytest.approx(sum(r["measured"]["seconds"] for r in rows))
    # the modelled bytes are the kernels' own cost model, times the layers
    ssm = d["decode"]["rows"][1]
    assert ssm["predicted"]["bytes"] == 2 * bench.state_update_bytes(SLOTS, 4, 8, 8, 2, state_bytes=4, io_bytes=4)
    dev = d["device"]
    assert dev["backend"] == "triton-interpreter" and dev["copy"]["bandwidth_bytes_per_s"] > 0
    assert dev["peak_bandwidth_bytes_per_s"] is None


@needs_interpreter
def test_interpret_dtype_flags_follow_the_planner(profile_cli):
    choice = DtypeChoice(ssm="bf16", kv="fp8")
    code, out, err = profile_cli(
        "nemotron-h", "--interpret", "--json", "--ssm-dtype", "bf16", "--kv-dtype", "fp8", "--slots", "2"
    )
    assert code == 0, err
    d = json.loads(out)
    assert d["dtypes"]["ssm"] == "bfloat16" and d["dtypes"]["kv"] == "float8_e4m3fn"
    fp = footprint(shrink_spec(load_model("nemotron-h")), tp=1, dtypes=choice)
    assert d["memory"]["measured"]["total_bytes"] == fp.pool_bytes(2) + fp.kv_bytes_at(CTX)
    assert d["memory"]["exact"] is True


@needs_interpreter
def test_interpret_table_reports_missing_kernels(profile_cli):
    code, out, err = profile_cli("jamba", "--interpret")
    assert code == 0, err
    assert "jamba-1.5-mini-tiny" in out and "exact" in out
    assert "no kernel" in out  # Mamba-1's prefill scan has none: a status, never a figure
    assert "causal_conv1d_update" in out and "mamba1_state_update" in out  # its conv window and decode step do
    assert "Decode step" in out and "Prefill" in out


@needs_interpreter
def test_interpret_gdn_model_json(profile_cli):
    code, out, err = profile_cli("qwen3-next", "--interpret", "--json", "--slots", "2", "--tokens", "16")
    assert code == 0, err
    d = json.loads(out)
    # decode: the conv window and the gated delta rule both run; prefill: the chunked delta rule has no kernel
    decode = {r["part"]: r for r in d["decode"]["rows"]}
    assert {p: r["status"] for p, r in decode.items()} == {"conv": "ok", "ssm": "ok"}
    assert decode["ssm"]["kernel"] == "gated_delta_rule_update" and decode["ssm"]["measured"]["seconds"] > 0
    no_kernel = next(r for r in d["prefill"]["rows"] if r["part"] == "ssm")
    assert no_kernel["measured"]["seconds"] is None and no_kernel["predicted"]["bytes"] is None
    assert d["decode"]["not_covered"] == [] and d["prefill"]["not_covered"] == ["gdn ssm"]
    assert d["memory"]["exact"] is True


@no_gpu
def test_gpu_without_one_is_one_line_and_exit_2(profile_cli):
    code, out, err = profile_cli("nemotron-h", "--gpu", "0")
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("hybridplan: error: no CUDA GPU")
    assert "--interpret" in err


def test_interpret_and_gpu_together_are_refused(profile_cli):
    code, out, err = profile_cli("nemotron-h", "--interpret", "--gpu", "0")
    assert code == 2 and out == "" and "drop --gpu" in err


def test_model_without_recurrent_layers_is_refused(profile_cli):
    code, _, err = profile_cli("llama-3-8b", "--interpret")
    assert code == 2 and "no recurrent layers" in err and err.count("\n") == 1


@pytest.mark.parametrize("flag", ["--slots", "--ctx", "--tokens"])
def test_non_positive_sizes_are_refused(profile_cli, flag):
    code, _, err = profile_cli("nemotron-h", "--interpret", flag, "0")
    assert code == 2 and flag in err


@needs_interpreter
def test_refuses_before_allocating_when_the_prediction_exceeds_free_memory(profile_cli, monkeypatch):
    state, kv = _predicted("nemotron-h")
    monkeypatch.setattr(backends.InterpreterBackend, "free_bytes", lambda self: 10_000)
    monkeypatch.setattr(pipeline, "_allocate", lambda *a: pytest.fail("allocated although it does not fit"))
    monkeypatch.setattr(pipeline, "_copy_seconds", lambda *a: pytest.fail("ran although it does not fit"))
    code, out, err = profile_cli("nemotron-h", "--interpret")
    assert code == 2 and out == ""
    assert state + kv == 19456  # 9,456 bytes more than the 10,000 free
    assert "9.234 KiB missing" in err and "lower --slots or --ctx" in err


@needs_interpreter
def test_refuses_when_the_kernel_buffers_do_not_fit_beside_the_pools(profile_cli, monkeypatch):
    state, kv = _predicted("nemotron-h")
    monkeypatch.setattr(backends.InterpreterBackend, "free_bytes", lambda self: state + kv + 1)
    monkeypatch.setattr(pipeline, "_allocate", lambda *a: pytest.fail("allocated although it does not fit"))
    code, _, err = profile_cli("nemotron-h", "--interpret")
    assert code == 2 and "kernel runs need" in err and "missing" in err


class _InterruptAt:
    """A progress reporter that presses Ctrl-C when a step's label starts with ``prefix``."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def begin(self, total: int) -> None:
        pass

    def step(self, label: str) -> None:
        if label.startswith(self.prefix):
            raise KeyboardInterrupt


def _spy_pools(monkeypatch) -> list:
    refs: list = []
    real = pipeline._allocate

    def spy(backend, arena, w):
        report = real(backend, arena, w)
        refs.extend(weakref.ref(t) for t in arena.pools.values())
        return report

    monkeypatch.setattr(pipeline, "_allocate", spy)
    return refs


@needs_interpreter
def test_ctrl_c_between_kernels_leaves_nothing_allocated(monkeypatch):
    refs = _spy_pools(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        pipeline.run_profile(
            pipeline.ProfileRequest(load_model("nemotron-h"), interpret=True), reporter=_InterruptAt("prefill")
        )
    gc.collect()
    assert len(refs) == 3 and all(r() is None for r in refs)


@needs_interpreter
def test_ctrl_c_inside_a_kernel_leaves_nothing_allocated(monkeypatch):
    refs = _spy_pools(monkeypatch)
    real = pipeline._kernel_fn

    def interrupted(backend, arena, w, k):
        real(backend, arena, w, k)
        refs.extend(weakref.ref(t) for t in arena.scratch if isinstance(t, torch.Tensor))

        def run():
            raise KeyboardInterrupt

        return run

    monkeypatch.setattr(pipeline, "_kernel_fn", interrupted)
    with pytest.raises(KeyboardInterrupt):
        pipeline.run_profile(pipeline.ProfileRequest(load_model("nemotron-h"), interpret=True))
    gc.collect()
    assert len(refs) > 3 and all(r() is None for r in refs)


@needs_interpreter
def test_ctrl_c_through_the_cli_exits_130(profile_cli, monkeypatch):
    refs = _spy_pools(monkeypatch)

    def step(self, label: str) -> None:  # the progress display's step: Ctrl-C as the decode rows start
        if label.startswith("decode"):
            raise KeyboardInterrupt

    monkeypatch.setattr("hybridplan.profile.render._RichReporter.step", step)
    code, out, err = profile_cli("nemotron-h", "--interpret")
    gc.collect()
    assert code == 130 and out == ""  # typer turns Ctrl-C into exit status 130
    assert refs and all(r() is None for r in refs)


def test_run_profile_checks_its_arguments_before_loading_torch():
    with pytest.raises(PlanError, match="drop --gpu"):
        pipeline.run_profile(pipeline.ProfileRequest(load_model("nemotron-h"), gpu=0, interpret=True))


def test_command_module_loads_nothing_heavy():
    code = (
        "import sys, hybridplan.profile.command, hybridplan.profile.report, hybridplan.profile.render, "
        "hybridplan.profile.workload, hybridplan.profile.nvml, hybridplan.profile.pipeline; "
        "heavy = [m for m in ('torch', 'triton', 'pynvml', 'numpy') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@needs_interpreter
def test_the_cpu_pipeline_calibration_is_checked_against_its_own_rows(profile_cli, tmp_path, capsys):
    # benchmarks/profile_gpu.sh's path, on the interpreter: profile --save-calibration, then
    # benchmarks/calibrated_step.py puts `speed --calibration`'s prediction for the profiled rows beside the
    # measured step. The calibration splits each row's time once (bytes at the copy bandwidth, the rest per
    # launch; the scans' FLOPs beyond their launches), so the prediction is the measurement up to the spread
    # of the per-layer overhead about its median; the first calibration predicted twice the decode step here
    cal = tmp_path / "cal.json"
    code, out, err = profile_cli("nemotron-h", "--interpret", "--json", "--save-calibration", cal)
    assert code == 0, err
    report = tmp_path / "profile.json"
    report.write_text(out)
    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    import calibrated_step

    assert calibrated_step.main([str(report), str(cal), "--gpu-type", "h100", "--json"]) == 0
    phases = {p["phase"]: p for p in json.loads(capsys.readouterr().out)["phases"]}
    assert set(phases) == {"decode", "prefill"}
    profiled = json.loads(report.read_text())
    for name, p in phases.items():
        # the measured side is the profile's own rows, summed; how near the prediction comes is a timing, and
        # timings are benchmarks/calibrated_step.py's to print (benchmarks/profile_gpu.sh), not a test's
        timed = [
            r
            for r in profiled[name]["rows"]
            if r["predicted"]["bytes"] is not None and r["measured"]["seconds"] is not None
        ]
        assert p["rows"] == len(timed) > 0
        assert p["measured_s"] == pytest.approx(sum(r["measured"]["seconds"] for r in timed))
        assert p["predicted_s"] > 0 and p["error"] == pytest.approx(p["predicted_s"] / p["measured_s"] - 1)
    assert calibrated_step.main([str(report), str(tmp_path / "none.json"), "--gpu-type", "h100"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
