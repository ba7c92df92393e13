"""Engine command lines in, complete commands out (hybridplan/cmdline.py).

The round trips hold no figure of their own: each runs `fit` with hybridplan's options, feeds the command it
prints for an engine back as a pasted engine line, and asks for the same figures. The flag names come from the
engines' argument parsers (vLLM vllm/engine/arg_utils.py; SGLang python/sglang/srt/server_args.py)."""

from __future__ import annotations

import json
import shlex

import pytest

from hybridplan.cmdline import translate
from hybridplan.errors import PlanError
from tests.helpers import one_line_error

pytestmark = pytest.mark.cli


def _fit(run_cli, *argv):
    cut = argv.index("--") if "--" in argv else len(argv)
    code, out, err = run_cli("fit", *argv[:cut], "--json", *argv[cut:])
    assert code in (0, 1), err
    return json.loads(out), err


def _vllm_figures(d: dict) -> dict:
    """What vLLM's start shows: the budget, the memory and the mode it runs in, block by block."""
    v = d["vllm"]
    m = dict(v["modes"][v["default_mode"]])
    m.pop("problem")  # its wording names whether --max-num-seqs was given
    return {
        "budget": v["kv_budget_bytes"],
        "memory": v["memory"],
        "mode": v["default_mode"],
        "fit": m,
        "refused": v["max_model_len_refused"],
        "version": v["version"],
    }


def _sglang_figures(d: dict) -> dict:
    g = dict(d["sglang"])
    g.pop("requested_max_running_requests")  # given on the command line, estimated without it
    return g


def _round_trip(run_cli, engine: str, argv: tuple[str, ...], budget: tuple[str, ...]):
    first, _ = _fit(run_cli, *budget, *argv, "--engine", engine)
    cmd = first["commands"][engine]
    line = [*cmd["env"], *cmd["argv"]]
    # the printed line, as a shell splits it, is the line fed back
    assert shlex.split(first["flags"][engine]) == line
    again, _ = _fit(run_cli, *budget, "--", *line)
    figures = _vllm_figures if engine == "vllm" else _sglang_figures
    assert figures(again) == figures(first), line
    assert again["ok"] == first["ok"]
    return line


H100 = ("--gpu-type", "h100")

# each: hybridplan's options, and those that are no engine flag: the GPU, and the release the command is for
VLLM_CASES = [
    (("nemotron-h", "--ctx", "8192"), H100),
    (
        (
            "nemotron-nano-9b-v2",
            "--ctx",
            "32k",
            "--tp",
            "2",
            "--kv-dtype",
            "fp8_e4m3",
            "--ssm-dtype",
            "bf16",
            "--gpu-util",
            "0.95",
            "--max-num-seqs",
            "64",
        ),
        ("--gpu-type", "l40s"),
    ),
    (("nemotron-h", "--ctx", "16384", "--enforce-eager", "--block-size", "64"), H100),
    (("nemotron-h", "--ctx", "131072", "--allow-long-context"), H100),
    (("qwen3-next", "--tp", "4", "--ctx", "32k", "--mode", "none"), H100),
    (("qwen3-next", "--tp", "4", "--ctx", "32k", "--mode", "all"), (*H100, "--vllm-version", "0.28")),
    (("nemotron-h", "--ctx", "8192", "--kv-budget", "40GiB"), ()),
    (("nemotron-h", "--ctx", "8192", "--spec-tokens", "2"), H100),
    (
        (
            "qwen3-next",
            "--tp",
            "4",
            "--ctx",
            "32k",
            "--speculative-config",
            '{"method": "mtp", "num_speculative_tokens": 3}',
        ),
        H100,
    ),
    (("jamba", "--ctx", "8192", "--tp", "8", "--dtype", "bfloat16", "--kv-dtype", "fp8"), ("--gpu-type", "h200")),
    (("nemotron-h", "--ctx", "8192", "--conv-dtype", "float32"), (*H100, "--vllm-version", "0.20")),
    (("nemotron-h", "--ctx", "4096", "--max-num-batched-tokens", "4096"), ("--gpu-type", "a100-80g")),
    (
        ("qwen3.6-27b", "--ctx", "32k", "--gdn-prefill-backend", "triton", "--mode", "align", "--max-num-seqs", "256"),
        H100,
    ),
    (("mamba-130m",), H100),
]

SGLANG_CASES = [
    (("nemotron-h", "--ctx", "8192"), H100),
    (
        (
            "nemotron-nano-9b-v2",
            "--ctx",
            "32k",
            "--tp",
            "2",
            "--kv-dtype",
            "fp8",
            "--ssm-dtype",
            "bf16",
            "--mem-fraction-static",
            "0.9",
        ),
        ("--gpu-type", "l40s"),
    ),
    (("nemotron-h", "--ctx", "8192", "--radix", "off"), H100),
    (("nemotron-h", "--ctx", "8192", "--max-running-requests", "32"), H100),
    (("qwen3-next", "--tp", "4", "--ctx", "32k", "--page-size", "64"), H100),
    (("nemotron-h", "--ctx", "131072", "--allow-long-context"), H100),
    (("nemotron-h", "--ctx", "8192", "--spec-tokens", "3"), H100),
    (
        (
            "qwen3-next",
            "--tp",
            "4",
            "--ctx",
            "32k",
            "--speculative-config",
            '{"method": "mtp", "num_speculative_tokens": 3}',
        ),
        H100,
    ),
    (("nemotron-h", "--ctx", "8192", "--mamba-full-memory-ratio", "2"), H100),
    (("nemotron-h", "--ctx", "8192", "--radix", "off", "--max-mamba-cache-size", "200"), H100),
    (
        (
            "nemotron-h",
            "--ctx",
            "8192",
            "--disable-overlap-schedule",
            "--sglang-env",
            "SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=1",
        ),
        (*H100, "--sglang-version", "0.5.7"),
    ),
    (("qwen3-next", "--tp", "4", "--ctx", "32k", "--radix", "extra_buffer"), (*H100, "--sglang-version", "0.5.9")),
    (("nemotron-h", "--ctx", "8192", "--conv-dtype", "float32"), H100),
    (("mamba-130m",), H100),
]


@pytest.mark.parametrize("argv, budget", VLLM_CASES, ids=[" ".join(a) for a, _ in VLLM_CASES])
def test_the_vllm_command_fit_prints_gives_its_figures_back(run_cli, argv, budget):
    line = _round_trip(run_cli, "vllm", argv, budget)
    assert line[:2] == ["vllm", "serve"] or line[1:3] == ["vllm", "serve"]


@pytest.mark.parametrize("argv, budget", SGLANG_CASES, ids=[" ".join(a) for a, _ in SGLANG_CASES])
def test_the_sglang_command_fit_prints_gives_its_figures_back(run_cli, argv, budget):
    line = _round_trip(run_cli, "sglang", argv, budget)
    assert "sglang.launch_server" in line


def test_the_issues_start_is_printed_whole(run_cli):
    # issue 17: every setting given that changes a figure is on the line, in the engine's own spelling
    d, _ = _fit(
        run_cli,
        "nemotron-nano-9b-v2",
        "--ctx",
        "32k",
        "--gpu-type",
        "l40s",
        "--tp",
        "2",
        "--kv-dtype",
        "fp8_e4m3",
        "--ssm-dtype",
        "bf16",
        "--gpu-util",
        "0.95",
        "--max-num-seqs",
        "64",
        "--mem-fraction-static",
        "0.9",
        "--enforce-eager",
        "--block-size",
        "32",
        "--allow-long-context",
    )
    v, s = d["commands"]["vllm"], d["commands"]["sglang"]
    assert v["env"] == ["VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"]
    assert s["env"] == ["SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"]
    assert v["argv"][:3] == ["vllm", "serve", "nvidia/NVIDIA-Nemotron-Nano-9B-v2"]
    vflags = " ".join(v["argv"])
    for part in (
        "--tensor-parallel-size 2",
        "--max-model-len 32000",
        "--max-num-seqs 64",
        "--kv-cache-dtype fp8",
        "--mamba-ssm-cache-dtype bfloat16",
        "--gpu-memory-utilization 0.95",
        "--enforce-eager",
        "--block-size 32",
    ):
        assert part in vflags, part
    sflags = " ".join(s["argv"])
    for part in (
        "--model-path nvidia/NVIDIA-Nemotron-Nano-9B-v2",
        "--tp-size 2",
        "--context-length 32000",
        "--kv-cache-dtype fp8_e4m3",
        "--mamba-ssm-dtype bfloat16",
        "--mem-fraction-static 0.9",
    ):
        assert part in sflags, part


def test_the_pasted_line_equals_the_same_options(run_cli):
    ours, _ = _fit(
        run_cli,
        "nemotron-nano-9b-v2",
        "--gpu-type",
        "l40s",
        "--ctx",
        "32000",
        "--tp",
        "2",
        "--kv-dtype",
        "fp8",
        "--gpu-util",
        "0.9",
        "--engine",
        "vllm",
    )
    pasted, err = _fit(
        run_cli,
        "--gpu-type",
        "l40s",
        "--",
        "vllm",
        "serve",
        "nvidia/NVIDIA-Nemotron-Nano-9B-v2",
        "--tensor-parallel-size=2",
        "--max-model-len",
        "32000",
        "--kv-cache-dtype",
        "fp8",
        "--gpu-memory-utilization",
        "0.9",
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
        "--trust-remote-code",
        "--served-model-name",
        "nano",
    )
    assert _vllm_figures(pasted) == _vllm_figures(ours)
    assert "sglang" not in pasted
    assert err.strip().splitlines() == [
        "hybridplan: ignored: --host 0.0.0.0, --port 8000, --served-model-name nano: the API server's, no effect on "
        "GPU memory",
        "hybridplan: ignored: --trust-remote-code: how the model files are found and read: the same weights reach "
        "the GPU",
    ]
    # kept in the command printed, so that pasted back it still loads the model (issue 28, item 5)
    argv = pasted["commands"]["vllm"]["argv"]
    assert argv[-7:] == ["--host", "0.0.0.0", "--port", "8000", "--trust-remote-code", "--served-model-name", "nano"]
    # the engine's flag names among hybridplan's give the same
    aliases, _ = _fit(
        run_cli,
        "nemotron-nano-9b-v2",
        "--gpu-type",
        "l40s",
        "--max-model-len",
        "32000",
        "-tp",
        "2",
        "--kv-cache-dtype",
        "fp8",
        "--gpu-memory-utilization",
        "0.9",
        "--engine",
        "vllm",
    )
    assert _vllm_figures(aliases) == _vllm_figures(ours)


def test_sglang_lines_in_both_spellings(run_cli):
    ours, _ = _fit(
        run_cli,
        "nemotron-h",
        "--gpu-type",
        "h100",
        "--ctx",
        "8192",
        "--engine",
        "sglang",
        "--mem-fraction-static",
        "0.85",
        "--radix",
        "off",
    )
    for program in (
        ["python", "-m", "sglang.launch_server"],
        ["python3", "-m", "sglang.launch_server"],
        ["sglang", "serve"],
    ):
        pasted, _ = _fit(
            run_cli,
            "--gpu-type",
            "h100",
            "--",
            *program,
            "--model-path",
            "nvidia/Nemotron-H-8B-Base-8K",
            "--tp",
            "1",
            "--context-length",
            "8192",
            "--mem-fraction-static=0.85",
            "--disable-radix-cache",
            "--port",
            "30000",
        )
        assert _sglang_figures(pasted) == _sglang_figures(ours)
        assert "vllm" not in pasted


def test_environment_variables_of_the_line(run_cli):
    # Nemotron-H-8B-Base-8K's maximum is 8192 (model_specs/nemotron-h-8b.yaml): the variable lets 16384 start
    line = ("vllm", "serve", "nvidia/Nemotron-H-8B-Base-8K", "--max-model-len", "16384")
    d, _ = _fit(run_cli, "--gpu-type", "h100", "--", *line)
    assert not d["ok"] and d["vllm"]["max_model_len_refused"]
    d, _ = _fit(run_cli, "--gpu-type", "h100", "--", "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1", *line)
    assert d["ok"] and d["vllm"]["max_model_len_refused"] is None
    assert d["commands"]["vllm"]["env"] == ["VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"]
    d, _ = _fit(
        run_cli,
        "--gpu-type",
        "h100",
        "--",
        "env",
        "CUDA_VISIBLE_DEVICES=0",
        "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1",
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "nvidia/Nemotron-H-8B-Base-8K",
        "--context-length",
        "16384",
    )
    assert d["ok"] and d["sglang"]["context_length_refused"] is None


def test_prefix_caching_switches_are_the_releases_modes(run_cli):
    # vLLM 0.28+: prefix caching on by default for hybrids, in align mode for a model without `all`
    # (hybridplan/engines/vllm/releases.py prefix_caching_default, prefix_mode)
    on, _ = _fit(
        run_cli, "nemotron-h", "--gpu-type", "h100", "--ctx", "8192", "--engine", "vllm", "--enable-prefix-caching"
    )
    off, _ = _fit(
        run_cli, "nemotron-h", "--gpu-type", "h100", "--ctx", "8192", "--engine", "vllm", "--no-enable-prefix-caching"
    )
    assert list(on["vllm"]["modes"]) == ["align"] and list(off["vllm"]["modes"]) == ["none"]
    assert "--no-enable-prefix-caching" in off["commands"]["vllm"]["argv"]


def test_speculative_config_and_sglang_steps(run_cli):
    # read by hybridplan/speculative.py as each engine reads them: Qwen3-Next drafts with its own MTP layer
    # (num_nextn_predict_layers 1), which joins vLLM's KV cache
    spec = '{"method": "mtp", "num_speculative_tokens": 2}'
    pasted, _ = _fit(
        run_cli,
        "--gpu-type",
        "h100",
        "--",
        "vllm",
        "serve",
        "Qwen/Qwen3-Next-80B-A3B-Instruct",
        "--tensor-parallel-size",
        "4",
        "--max-model-len",
        "32000",
        "--speculative-config",
        spec,
    )
    ours, _ = _fit(
        run_cli,
        "qwen3-next",
        "--gpu-type",
        "h100",
        "--tp",
        "4",
        "--ctx",
        "32000",
        "--engine",
        "vllm",
        "--speculative-config",
        spec,
    )
    bare, _ = _fit(
        run_cli,
        "qwen3-next",
        "--gpu-type",
        "h100",
        "--tp",
        "4",
        "--ctx",
        "32000",
        "--engine",
        "vllm",
        "--spec-tokens",
        "2",
    )
    assert _vllm_figures(pasted) == _vllm_figures(ours) != _vllm_figures(bare)
    assert json.loads(pasted["commands"]["vllm"]["argv"][-1]) == {"method": "mtp", "num_speculative_tokens": 2}
    # MTP on a model without MTP layers is refused, as vLLM refuses it
    one_line_error(
        *run_cli(
            "fit",
            "--gpu-type",
            "h100",
            "--",
            "vllm",
            "serve",
            "nvidia/Nemotron-H-8B-Base-8K",
            "--speculative-config",
            spec,
        ),
        "no MTP layers",
    )
    pasted, _ = _fit(
        run_cli,
        "--gpu-type",
        "h100",
        "--",
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "nvidia/Nemotron-H-8B-Base-8K",
        "--context-length",
        "8192",
        "--speculative-algorithm",
        "NGRAM",
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "4",
    )
    ours, _ = _fit(
        run_cli,
        "nemotron-h",
        "--gpu-type",
        "h100",
        "--ctx",
        "8192",
        "--engine",
        "sglang",
        "--spec-tokens",
        "3",
        "--draft-tokens",
        "4",
    )
    assert _sglang_figures(pasted) == _sglang_figures(ours)
    one_line_error(
        *run_cli(
            "fit",
            "--gpu-type",
            "h100",
            "--",
            "sglang",
            "serve",
            "--model-path",
            "nvidia/Nemotron-H-8B-Base-8K",
            "--speculative-algorithm",
            "EAGLE",
            "--speculative-num-steps",
            "3",
            "--speculative-eagle-topk",
            "4",
        ),
        "--speculative-num-draft-tokens",
    )


def test_size_and_prefix_take_a_line_too(run_cli):
    code, out, err = run_cli(
        "size",
        "--json",
        "--",
        "vllm",
        "serve",
        "nvidia/Nemotron-H-8B-Base-8K",
        "--max-model-len",
        "4096",
        "--gpu-memory-utilization",
        "0.8",
    )
    assert code == 0 and json.loads(out)["ctx"] == 4096
    assert "size does not use --gpu-memory-utilization 0.8" in err
    code, out, _ = run_cli(
        "prefix",
        "--shared",
        "4000",
        "--json",
        "--",
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "nvidia/Nemotron-H-8B-Base-8K",
        "--chunked-prefill-size",
        "2048",
    )
    assert code == 0 and "sglang" in json.loads(out) and "vllm" not in json.loads(out)


@pytest.mark.parametrize(
    "argv, needles",
    [
        (("fit", "--gpu-type", "h100", "--tensor-parallel", "2"), ("--tensor-parallel-size",)),
        (("fit", "--gpu-type", "h100", "--gpu-memory-util", "0.9"), ("--gpu-memory-utilization",)),
        (("fit", "--gpu-type", "h100", "--", "vllm", "serve", "m", "--max-model-length", "8k"), ("--max-model-len",)),
        (
            ("fit", "--gpu-type", "h100", "--", "sglang", "serve", "--model-path", "m", "--context-lenght", "8k"),
            ("unrecognized arguments: --context-lenght", "--context-length"),
        ),
        (
            ("fit", "--gpu-type", "h100", "--", "python", "-m", "sglang.launch_server", "--kv-cache-dtype", "fp8"),
            ("fp8_e4m3",),
        ),
        (
            ("fit", "--gpu-type", "h100", "--", "vllm", "serve", "Zyphra/Zamba2-7B", "--pipeline-parallel-size", "2"),
            ("Pipeline parallelism is not supported for this model",),
        ),
        (
            (
                "fit",
                "--gpu-type",
                "h100",
                "--",
                "vllm",
                "serve",
                "nvidia/Nemotron-H-8B-Base-8K",
                "--speculative-config",
                "{bad",
            ),
            ("--speculative-config",),
        ),
        (("fit", "--gpu-type", "h100", "--", "docker", "run", "vllm"), ("vllm serve MODEL",)),
        (("fit", "--gpu-type", "h100", "--", "vllm", "serve", "m", "--max-model-len"), ("needs a value",)),
        (
            (
                "fit",
                "--gpu-type",
                "h100",
                "--tp",
                "2",
                "--",
                "vllm",
                "serve",
                "nvidia/Nemotron-H-8B-Base-8K",
                "-tp",
                "4",
            ),
            ("given twice",),
        ),
        (
            ("fit", "jamba", "--gpu-type", "h100", "--", "vllm", "serve", "nvidia/Nemotron-H-8B-Base-8K"),
            ("two models",),
        ),
        (("fit", "--gpu-type", "h100", "--", "VLLM_MADE_UP=1", "vllm", "serve", "m"), ("VLLM_MADE_UP",)),
        (
            (
                "fit",
                "--gpu-type",
                "h100",
                "--",
                "vllm",
                "serve",
                "nvidia/Nemotron-H-8B-Base-8K",
                "--quantization",
                "fp8",
            ),
            ("--quantization fp8", "--weights"),
        ),
        # vLLM 0.33's FlexibleArgumentParser rewrites -O only before a level (0-3): a bare -O is no flag of its
        # parser (vllm/utils/argparse_utils.py)
        (
            ("fit", "--gpu-type", "h100", "--", "vllm", "serve", "nvidia/Nemotron-H-8B-Base-8K", "-O"),
            ("unrecognized arguments: -O",),
        ),
        (
            (
                "fit",
                "--gpu-type",
                "h100",
                "--vllm-version",
                "0.10.0",
                "--",
                "vllm",
                "serve",
                "nvidia/Nemotron-H-8B-Base-8K",
                "-O",
            ),
            ("needs a value",),
        ),
        (
            (
                "fit",
                "--gpu-type",
                "h100",
                "--",
                "vllm",
                "serve",
                "nvidia/Nemotron-H-8B-Base-8K",
                "--vllm-version",
                "0.20",
            ),
            ("unrecognized arguments: --vllm-version", "before --"),
        ),
    ],
)
def test_bad_lines_are_one_line(run_cli, argv, needles):
    one_line_error(*run_cli(*argv), *needles)


def test_o0_is_eager_only_where_it_turns_graphs_off(run_cli):
    # vLLM 0.12.0's OptimizationLevel.O0: "no compilation, no cudagraphs" (vllm/config/vllm.py); 0.10.2 has no
    # such level (its -O is the compilation level)
    eager, _ = _fit(run_cli, "nemotron-h", "--gpu-type", "h100", "--ctx", "8192", "--engine", "vllm", "--enforce-eager")
    o0, _ = _fit(
        run_cli,
        "--gpu-type",
        "h100",
        "--",
        "vllm",
        "serve",
        "nvidia/Nemotron-H-8B-Base-8K",
        "--max-model-len",
        "8192",
        "-O0",
    )
    assert _vllm_figures(o0) == _vllm_figures(eager)
    one_line_error(
        *run_cli(
            "fit",
            "--gpu-type",
            "h100",
            "--vllm-version",
            "0.11",
            "--",
            "vllm",
            "serve",
            "nvidia/Nemotron-H-8B-Base-8K",
            "-O",
            "0",
        ),
        "-O is the compilation level",
    )


def test_translate_is_pure():
    line = translate(
        [
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1",
            "vllm",
            "serve",
            "org/m",
            "--max-model-len=-1",
            "--no-enforce-eager",
            "--api-key",
            "k",
        ]
    )
    assert (line.engine, line.model) == ("vllm", "org/m")
    assert line.argv == ["--allow-long-context"]
    assert line.ignored == ("--api-key k",)
    with pytest.raises(PlanError, match="did you mean --mamba-ssm-cache-dtype"):
        translate(["vllm", "serve", "m", "--mamba-ssm-cach-dtype", "float32"])


def test_flag_names_by_release(run_cli):
    # SGLang renamed --mamba-scheduler-strategy to --mamba-radix-cache-strategy in 0.5.14 (server_args.py's
    # DeprecatedAliasStoreAction); vLLM's --kv-cache-memory-bytes came in 0.10.2 (absent from the 0.10.0 and
    # 0.10.1 wheels' arg_utils.py): docs/engines.md section 5
    argv = (
        "qwen3-next",
        "--tp",
        "4",
        "--ctx",
        "32k",
        "--gpu-type",
        "h100",
        "--radix",
        "extra_buffer",
        "--engine",
        "sglang",
        "--sglang-version",
    )
    old, _ = _fit(run_cli, *argv, "0.5.13")
    new, _ = _fit(run_cli, *argv, "0.5.14")
    assert "--mamba-scheduler-strategy" in old["commands"]["sglang"]["argv"]
    assert "--mamba-radix-cache-strategy" in new["commands"]["sglang"]["argv"]
    argv = ("nemotron-h", "--ctx", "8192", "--kv-budget", "40GiB", "--engine", "vllm", "--vllm-version")
    old, _ = _fit(run_cli, *argv, "0.10.1")
    new, _ = _fit(run_cli, *argv, "0.10.2")
    assert "--kv-cache-memory-bytes" not in old["commands"]["vllm"]["argv"]
    assert any("has no --kv-cache-memory-bytes" in n for n in old["notes"])
    assert new["commands"]["vllm"]["argv"][-2:] == ["--kv-cache-memory-bytes", str(40 << 30)]


def test_no_enable_prefix_caching_on_a_pasted_line():
    line = translate(["vllm", "serve", "m", "--no-enable-prefix-caching", "--enable-prefix-caching"])
    assert line.argv == ["--no-enable-prefix-caching", "--enable-prefix-caching"]


@pytest.mark.parametrize(
    "line, engine",
    [
        (["nohup", "vllm", "serve", "org/m"], "vllm"),
        (["uv", "run", "vllm", "serve", "org/m"], "vllm"),
        (["/usr/bin/python3.11", "-m", "vllm.entrypoints.openai.api_server", "--model", "org/m"], "vllm"),
        (["python3", "-m", "sglang.launch_server", "--model-path", "org/m"], "sglang"),
        (["/opt/venv/bin/sglang", "serve", "--model-path", "org/m"], "sglang"),
    ],
)
def test_the_program_of_a_pasted_line(line, engine):
    got = translate(line)
    assert (got.engine, got.model) == (engine, "org/m")


@pytest.mark.parametrize(
    "line", [["docker", "run", "vllm", "serve", "m"], ["-m", "sglang.launch_server"], ["vllm", "bench", "serve"]]
)
def test_a_line_that_is_not_an_engine_start_is_refused(line):
    with pytest.raises(PlanError, match="give the engine's command"):
        translate(line)


# --- read as the engines' own parsers read them (issue 28, items 4, 5, 9) ---------------------------------------


def _same_vllm(run_cli, a: tuple[str, ...], b: tuple[str, ...]) -> dict:
    x, _ = _fit(run_cli, "--gpu-type", "h100", "--", *a)
    y, _ = _fit(run_cli, "--gpu-type", "h100", "--", *b)
    assert _vllm_figures(x) == _vllm_figures(y), (a, b)
    return x


NEMO = "nvidia/Nemotron-H-8B-Base-8K"


def test_vllm_spellings_its_parser_accepts(run_cli):
    # FlexibleArgumentParser turns the underscores of --max_model_len into dashes; argparse reads -tp=4 and
    # --flag=value; allow_abbrev (never turned off, flags.json "parser") takes a unique prefix
    plain = (
        "vllm",
        "serve",
        NEMO,
        "--max-model-len",
        "4096",
        "--tensor-parallel-size",
        "2",
        "--gpu-memory-utilization",
        "0.8",
    )
    _same_vllm(
        run_cli, plain, ("vllm", "serve", NEMO, "--max_model_len", "4096", "-tp=2", "--gpu_memory_utilization=0.8")
    )
    _same_vllm(run_cli, plain, ("vllm", "serve", NEMO, "--max-model", "4096", "-tp", "2", "--gpu-memory-util", "0.8"))
    # JSON flags key by key, as FlexibleArgumentParser folds them
    spec = '{"method": "mtp", "num_speculative_tokens": 2}'
    _same_vllm(
        run_cli,
        (
            "vllm",
            "serve",
            "Qwen/Qwen3-Next-80B-A3B-Instruct",
            "-tp",
            "4",
            "--max-model-len",
            "32k",
            "--speculative-config",
            spec,
        ),
        (
            "vllm",
            "serve",
            "Qwen/Qwen3-Next-80B-A3B-Instruct",
            "-tp",
            "4",
            "--max-model-len",
            "32k",
            "--speculative-config.method",
            "mtp",
            "--speculative-config.num_speculative_tokens=2",
        ),
    )


def test_sglang_takes_a_unique_prefix(run_cli):
    # issue 28 item 4: --speculative-algo is a prefix of --speculative-algorithm alone; argparse accepts it
    # (python/sglang/srt/server_args.py prepare_server_args: argparse.ArgumentParser(), allow_abbrev left on)
    line = (
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "Qwen/Qwen3-Next-80B-A3B-Instruct",
        "--tp",
        "4",
        "--context-length",
        "32000",
    )
    full, _ = _fit(
        run_cli,
        "--gpu-type",
        "h100",
        "--",
        *line,
        "--speculative-algorithm",
        "NEXTN",
        "--speculative-num-steps",
        "2",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "3",
    )
    short, _ = _fit(
        run_cli,
        "--gpu-type",
        "h100",
        "--",
        *line,
        "--speculative-algo",
        "NEXTN",
        "--speculative-num-steps",
        "2",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "3",
    )
    assert _sglang_figures(short) == _sglang_figures(full)
    # a prefix of several is refused as argparse refuses it
    one_line_error(
        *run_cli("fit", "--gpu-type", "h100", "--", *line, "--speculative-num", "2"),
        "ambiguous option: --speculative-num could match",
        "--speculative-num-steps",
        "--speculative-num-draft-tokens",
    )


def test_flags_by_the_release_asked():
    # --mamba-scheduler-strategy: 0.5.7-0.5.19 (a deprecated alias from 0.5.14), gone from 0.5.20's
    # server_args (hybridplan/engines/sglang/flags.json, from the wheels)
    line = ["sglang", "serve", "--model-path", "m", "--mamba-scheduler-strategy", "no_buffer"]
    assert translate(line, versions={"sglang": "0.5.13"}).argv == ["--radix", "no_buffer"]
    with pytest.raises(
        PlanError,
        match=r"SGLang 0\.5\.20 \(launch_server\): unrecognized arguments: "
        "--mamba-scheduler-strategy",
    ):
        translate(line, versions={"sglang": "0.5.20"})
    with pytest.raises(PlanError, match="unrecognized arguments: --mamba-scheduler-strategy"):
        translate(line, versions={"sglang": "0.5.6"})
    # vLLM up to 0.11.0 refuses --model with `vllm serve` (vllm/utils/__init__.py FlexibleArgumentParser)
    with pytest.raises(PlanError, match="positional argument"):
        translate(["vllm", "serve", "--model", "m"], versions={"vllm": "0.10.2"})
    assert translate(["vllm", "serve", "--model", "m"], versions={"vllm": "0.20.0"}).model == "m"


def test_choices_and_values_as_argparse_checks_them():
    with pytest.raises(PlanError, match=r"argument --kv-cache-dtype: invalid choice: 'fp9'"):
        translate(["vllm", "serve", "m", "--kv-cache-dtype", "fp9"], versions={"vllm": "0.20.0"})
    with pytest.raises(PlanError, match="expected one argument"):
        translate(["vllm", "serve", "m", "--max-num-seqs", "--enforce-eager"])
    with pytest.raises(PlanError, match="ignored explicit argument"):
        translate(["sglang", "serve", "--model-path", "m", "--trust-remote-code=yes"])


def test_cpu_offload_moves_weights_off_the_gpu(run_cli):
    # vLLM and SGLang copy int(gb * 1024**3) bytes of the layers' parameters to the CPU
    # (vllm/config/offload.py, sglang/srt/utils/offloader.py): the weights on the GPU are that much less
    argv = ("nemotron-h", "--gpu-type", "h100", "--ctx", "8192")
    base, _ = _fit(run_cli, *argv)
    off, _ = _fit(run_cli, *argv, "--cpu-offload-gb", "2.5")

    def weights(d, engine):
        return next(t["bytes"] for t in d[engine]["memory"]["terms"] if t["name"] == "weights")

    for engine in ("vllm", "sglang"):
        assert weights(base, engine) - weights(off, engine) == int(2.5 * 1024**3)
        assert off["commands"][engine]["argv"][-2:] == ["--cpu-offload-gb", "2.5"]
    pasted, _ = _fit(
        run_cli,
        "--gpu-type",
        "h100",
        "--",
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        NEMO,
        "--context-length",
        "8192",
        "--cpu-offload-gb",
        "2.5",
    )
    assert _sglang_figures(pasted) == _sglang_figures(off)


def test_compilation_levels_are_listed_not_taken_silently(run_cli):
    # issue 28 item 9: -O3, -O 3 and --compilation-config keep CUDA graphs on, which is the one graph estimate
    # hybridplan has (hybridplan/engines/vllm/memory.py): the same figures, each listed with the reason
    plain = ("vllm", "serve", NEMO, "--max-model-len", "8192")
    for extra in (("-O3",), ("-O", "3"), ("-O=2",), ("--compilation-config", '{"mode": 3}')):
        code, out, err = run_cli("fit", "--gpu-type", "h100", "--json", "--", *plain, *extra)
        assert code in (0, 1)
        assert "ignored:" in err and "CUDA-graph estimate" in err, extra
    _same_vllm(run_cli, plain, (*plain, "-O3"))
    # cudagraph_mode NONE is graphs off, as --enforce-eager
    _same_vllm(run_cli, (*plain, "--enforce-eager"), (*plain, "--compilation-config.cudagraph_mode", "NONE"))
    # -O.3 is --optimization-level .3 in 0.33 (vllm/utils/argparse_utils.py), no level
    one_line_error(*run_cli("fit", "--gpu-type", "h100", "--", *plain, "-O.3"), "levels are 0, 1, 2 and 3")


def test_sglang_schedule_conservativeness_is_listed():
    line = translate(["sglang", "serve", "--model-path", "m", "--schedule-conservativeness", "0.3"])
    assert line.ignored == ("--schedule-conservativeness 0.3",)
    assert "no effect on the pools" in line.why[0]
    assert line.kept == (("sglang", ("--schedule-conservativeness", "0.3"), "--schedule-conservativeness"),)


def test_a_flag_hybridplan_does_not_model_is_refused():
    with pytest.raises(PlanError, match="--kv-offloading-size: KV offloading"):
        translate(["vllm", "serve", "m", "--kv-offloading-size", "8"])
    with pytest.raises(PlanError, match="--enable-lora: hybridplan does not model"):
        translate(["sglang", "serve", "--model-path", "m", "--enable-lora"])
    with pytest.raises(PlanError, match="--hicache-storage-backend: an L3 storage backend"):
        translate(
            ["sglang", "serve", "--model-path", "m", "--enable-hierarchical-cache", "--hicache-storage-backend", "file"]
        )


def test_kimi_linear_round_trip_keeps_trust_remote_code(run_cli):
    # issue 28 item 5: the printed command keeps every flag given, so pasted back it loads the model (Kimi-Linear
    # ships its modelling code: --trust-remote-code) and gives the same table
    line = (
        "vllm",
        "serve",
        "moonshotai/Kimi-Linear-48B-A3B-Instruct",
        "--trust-remote-code",
        "--tensor-parallel-size",
        "2",
        "--max-model-len",
        "32000",
        "--enable-prefix-caching",
        "--port",
        "8001",
    )
    first, _ = _fit(run_cli, "--gpu-type", "h200", "--", *line)
    argv = first["commands"]["vllm"]["argv"]
    for word in ("--trust-remote-code", "--enable-prefix-caching", "--port"):
        assert word in argv, word
    again, _ = _fit(run_cli, "--gpu-type", "h200", "--", *argv)
    assert _vllm_figures(again) == _vllm_figures(first)
    assert again["commands"]["vllm"]["argv"] == argv
    # among hybridplan's own flags too, for each engine that has it
    d, _ = _fit(
        run_cli, "kimi-linear-48b-a3b", "--gpu-type", "h200", "--tp", "2", "--ctx", "32000", "--trust-remote-code"
    )
    assert "--trust-remote-code" in d["commands"]["vllm"]["argv"]
    assert "--trust-remote-code" in d["commands"]["sglang"]["argv"]


def test_enable_prefix_caching_stays_on_the_printed_line(run_cli):
    # issue 28 item 5: pasted back without it, the table would gain the `none` row
    first, _ = _fit(
        run_cli, "--gpu-type", "h100", "--", "vllm", "serve", NEMO, "--max-model-len", "8192", "--enable-prefix-caching"
    )
    assert list(first["vllm"]["modes"]) == ["align"]
    argv = first["commands"]["vllm"]["argv"]
    assert "--enable-prefix-caching" in argv
    again, _ = _fit(run_cli, "--gpu-type", "h100", "--", *argv)
    assert list(again["vllm"]["modes"]) == ["align"]


# --- check-log takes the flags fit takes (issue 28 item 7) -----------------------------------------------------

MTP_LOG = "tests/data/logs/vllm-0.23.0-qwen3.6-27b-fp8-mtp-4xrtx5060ti-1.log"


def _excerpt(tmp_path, path: str, drop: tuple[str, ...]) -> str:
    """The real log with the lines that state its settings left out, as an excerpt people post leaves them."""
    from pathlib import Path

    lines = [ln for ln in Path(path).read_text().splitlines() if not any(d in ln for d in drop)]
    out = tmp_path / "excerpt.log"
    out.write_text("\n".join(lines) + "\n")
    return str(out)


def _check(run_cli, *argv):
    cut = argv.index("--") if "--" in argv else len(argv)
    code, out, err = run_cli("check-log", *argv[:cut], "--json", *argv[cut:])
    assert code in (0, 1), err
    return json.loads(out), code


def test_check_log_takes_the_speculative_config(run_cli, tmp_path):
    # the log's start was `--speculative-config '{"method": "qwen3_next_mtp", "num_speculative_tokens": 3}'` (its
    # non-default args line): without that line and its engine config, the flag as its owner gave it adds the MTP
    # layer's KV and the logged figures come back; --spec-tokens alone is said to leave the draft out
    log = _excerpt(tmp_path, MTP_LOG, ("non-default args", "with config:", "# "))
    given = (
        log,
        "--model",
        "qwen3.6-27b",
        "--vllm-version",
        "0.23.0",
        "--tp",
        "4",
        "--ctx",
        "200000",
        "--max-num-seqs",
        "4",
    )
    d, code = _check(run_cli, *given, "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 3}')
    assert code == 0 and d["ok"], d["rows"]
    assert {s["name"]: s["source"] for s in d["settings"]}["speculative_method"] == "flag"
    bare, code = _check(run_cli, *given, "--spec-tokens", "3")
    assert code == 1 and not bare["ok"]
    assert any("no method named" in n and "not modelled" in n for n in bare["notes"])
    # pasted as the owner runs it, the same
    pasted, code = _check(
        run_cli,
        log,
        "--vllm-version",
        "0.23.0",
        "--",
        "vllm",
        "serve",
        "qwen3.6-27b",
        "-tp",
        "4",
        "--max-model-len",
        "200000",
        "--max-num-seqs",
        "4",
        "--speculative-config",
        '{"method": "mtp", "num_speculative_tokens": 3}',
        "--trust-remote-code",
    )
    assert code == 0 and pasted["rows"] == d["rows"]


def test_check_log_takes_the_block_size(run_cli, tmp_path):
    # vLLM grows the attention block from the user's --block-size in whole multiples: the logged 800 is 2 × 400,
    # and from 528 the smallest multiple at or above the Mamba page's need (784 tokens, the figure hybridplan
    # predicts with no block given) is 2 × 528 = 1,056 (hybridplan/engines/vllm/blocks.py)
    log = _excerpt(tmp_path, MTP_LOG, ("non-default args", "with config:", "# "))
    given = (
        log,
        "--model",
        "qwen3.6-27b",
        "--vllm-version",
        "0.23.0",
        "--tp",
        "4",
        "--ctx",
        "200000",
        "--max-num-seqs",
        "4",
        "--speculative-config",
        '{"method": "mtp", "num_speculative_tokens": 3}',
    )

    def block(d):
        return next(r for r in d["rows"] if r["figure"] == "attention block size")

    d, _ = _check(run_cli, *given, "--block-size", "400")
    assert block(d)["ok"] and {s["name"]: s["source"] for s in d["settings"]}["block_size"] == "flag"
    d, _ = _check(run_cli, *given, "--block-size", "528")
    assert not block(d)["ok"] and str(block(d)["predicted"]).replace(",", "") == "1056"


def test_check_log_takes_sglangs_pool_flags(run_cli):
    # the log's start was --tp 2 --mem-fraction-static 0.8 (its header); the pool flags, given, are what SGLang
    # sizes with: --max-mamba-cache-size is taken as the state pool's size (server_args.py), the ratio moves the
    # split, and an explicit no_buffer strategy meets SGLang's own refusal with the overlap scheduler on
    log = "tests/data/logs/sglang-unknown-qwen3.5-9b-2x24gb-1.log"
    base = (log, "--tp", "2", "--mem-fraction-static", "0.8")

    def predicted(d, figure):
        return next(r["predicted"] for r in d["rows"] if r["figure"] == figure)

    plain, _ = _check(run_cli, *base)
    sized, _ = _check(run_cli, *base, "--max-mamba-cache-size", "100")
    assert str(predicted(sized, "max_mamba_cache_size")) == "100"
    ratio, _ = _check(run_cli, *base, "--mamba-full-memory-ratio", "2")
    assert predicted(ratio, "max_mamba_cache_size") != predicted(plain, "max_mamba_cache_size")
    assert {s["name"]: s["source"] for s in ratio["settings"]}["mamba_full_memory_ratio"] == "flag"
    for flag in ("--radix", "--mamba-radix-cache-strategy"):
        one_line_error(*run_cli("check-log", *base, flag, "no_buffer"), "no_buffer do not support overlap schedule")
    # 0.5.13's own name for it, which that release takes with the overlap scheduler on
    old, _ = _check(run_cli, *base, "--sglang-version", "0.5.13", "--mamba-scheduler-strategy", "no_buffer")
    assert {s["name"]: (s["value"], s["source"]) for s in old["settings"]}["mamba_radix_cache_strategy"] == (
        "no_buffer",
        "flag",
    )


@pytest.mark.parametrize("flag", [("--compilation-config", "-1"), ("--compilation-config", "7")])
def test_a_level_vllm_has_not_is_one_line(run_cli, flag):
    # found by tests/test_fuzz.py: `--compilation-config -1` read its JSON int as -O's level and asked itself again,
    # without end; vLLM's compilation levels are 0-3 (vllm/config/compilation.py CompilationLevel / CompilationMode)
    code, out, err = run_cli("size", "--json", "--", "vllm", "serve", "nvidia/Nemotron-H-8B-Base-8K", *flag)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "levels are 0, 1, 2 and 3" in err
