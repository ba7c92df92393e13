"""Engine command lines as input, and the commands to run as output.

A user pastes the line they already run (``vllm serve MODEL …``, ``sglang serve …``,
``python -m sglang.launch_server --model-path MODEL …``, environment variables first if any) after ``--``, or
types an engine's own flag names among hybridplan's. ``translate`` turns such tokens into hybridplan's own
options (pure: tokens in, option tokens and what was set aside out); ``pasted.expand`` wires it in front of
the command-line parser, so every value is read and checked by the option that owns it.

The other direction, ``vllm_command`` and ``sglang_command``, writes back the complete command that starts
an engine with the figures ``fit`` shows: the model, every setting that changed a figure, and the
environment variables. Fed back through ``translate`` it gives the same figures (tests/test_cmdline.py).

Flag names and meanings: vLLM vllm/engine/arg_utils.py (``EngineArgs.add_cli_args``) and vllm/config/*.py,
0.10–0.33; SGLang python/sglang/srt/server_args.py (``ServerArgs.add_cli_args``), 0.5.2–0.5.23.
"""

from __future__ import annotations

import difflib
import json
import shlex
from collections.abc import Iterable, Sequence
from functools import lru_cache

from msgspec import Struct, field

from hybridplan.errors import PlanError

# --- the flags ------------------------------------------------------------------------------------------
#
# Which flags exist, their other names, what each takes and its choices come from the engines' own argument
# definitions, per release: hybridplan/engines/vllm/flags.json and hybridplan/engines/sglang/flags.json, made
# from the wheels by validation/engine_flags.py (tests/test_engine_flags.py holds them equal). What hybridplan
# does with each flag is said here, by its name in that table:
#   ("opt", "--hybridplan-flag")  a value, handed to hybridplan's option of that name
#   ("bool", "--hybridplan-flag") a switch, handed to hybridplan's switch (``--no-`` form: the switch left off)
#   ("model", None)               the model
#   ("ignore", why)               no effect on memory: listed with the reason, kept in the printed command
#   ("refuse", why)               changes memory in a way hybridplan does not model: refused, saying why
#   ("special", name)             read here (JSON configs, modes spelled as switches)
# A flag of the table named nowhere below is refused as not modelled (``NOT_MODELLED``).

_SERVER = "the API server's, no effect on GPU memory"
_LOGGING = "logging, metrics and tracing, no effect on GPU memory"
_LOADING = "how the model files are found and read: the same weights reach the GPU"
_LAUNCH = "how the processes are launched and reached, no effect on one GPU's memory"
_SAMPLING = "sampling, parsing and structured output: no effect on the memory sized at start-up"
_SCHED = "the scheduler's order and pacing: no effect on the memory sized at start-up"
_CPU = "host (CPU) memory, not the GPU's"
_GRAPHS = (
    "hybridplan's CUDA-graph estimate is one figure for every level or setting that keeps graphs on "
    "(hybridplan/engines/vllm/memory.py); only graphs off (-O0, cudagraph_mode NONE, --enforce-eager) "
    "changes it"
)


def _each(why: str, names: str) -> dict[str, tuple[str, str | None]]:
    return {f"--{n}": ("ignore", why) for n in names.split()}


VLLM: dict[str, tuple[str, str | None]] = {
    "--model": ("model", None),
    "--tensor-parallel-size": ("opt", "--tp"),
    "-tp": ("opt", "--tp"),
    "--max-model-len": ("special", "max_model_len"),
    "--kv-cache-dtype": ("opt", "--kv-dtype"),
    "--mamba-cache-dtype": ("opt", "--conv-dtype"),
    "--mamba-ssm-cache-dtype": ("opt", "--ssm-dtype"),
    "--dtype": ("opt", "--dtype"),
    "--gpu-memory-utilization": ("opt", "--gpu-util"),
    "--max-num-seqs": ("opt", "--max-num-seqs"),
    "--block-size": ("opt", "--block-size"),
    "--mamba-cache-mode": ("opt", "--mode"),
    "--max-num-batched-tokens": ("opt", "--max-num-batched-tokens"),
    "--enforce-eager": ("bool", "--enforce-eager"),
    "--enable-prefix-caching": ("bool", "--enable-prefix-caching"),
    "--speculative-config": ("opt", "--speculative-config"),
    "-O": ("special", "optimization"),
    "--optimization-level": ("special", "optimization"),
    "--compilation-config": ("special", "compilation_config"),
    "-cc": ("special", "compilation_config"),
    "--quantization": ("opt", "--quantization"),
    "-q": ("opt", "--quantization"),
    "--revision": ("opt", "--revision"),
    "--kv-cache-memory-bytes": ("opt", "--kv-budget"),
    "--gdn-prefill-backend": ("opt", "--gdn-prefill-backend"),
    "--performance-mode": ("opt", "--performance-mode"),
    "--pipeline-parallel-size": ("opt", "--pp"),
    "-pp": ("opt", "--pp"),
    "--enable-expert-parallel": ("bool", "--enable-expert-parallel"),
    "--data-parallel-size": ("opt", "--dp"),
    "-dp": ("opt", "--dp"),
    "--cpu-offload-gb": ("opt", "--cpu-offload-gb"),
    "--num-gpu-blocks-override": ("refuse", "a block count override is not modelled"),
    "--max-cudagraph-capture-size": ("refuse", "CUDA graph sizes are not modelled"),
    "--cuda-graph-sizes": ("refuse", "CUDA graph sizes are not modelled"),
    "--cudagraph-capture-sizes": ("refuse", "CUDA graph sizes are not modelled"),
    "--kv-offloading-size": ("refuse", "KV offloading to the CPU is not modelled"),
    "--swap-space": ("ignore", _CPU),
    "--max-seq-len-to-capture": ("refuse", "CUDA graph sizes are not modelled"),
    "--disable-cascade-attn": ("ignore", "vLLM 0.3x: no effect (cascade attention removed)"),
    **_each(
        _SERVER,
        "host port uds api-key ssl-keyfile ssl-certfile ssl-ca-certs ssl-cert-reqs ssl-ciphers "
        "enable-ssl-refresh root-path allowed-origins allowed-methods allowed-headers allow-credentials "
        "middleware response-role served-model-name chat-template chat-template-content-format "
        "tool-call-parser tool-parser-plugin enable-auto-tool-choice reasoning-parser "
        "reasoning-parser-plugin uvicorn-log-level disable-uvicorn-access-log "
        "disable-access-log-for-endpoints disable-fastapi-docs enable-request-id-headers "
        "h11-max-incomplete-event-size h11-max-header-count enable-offline-docs "
        "enable-prompt-tokens-details enable-server-load-tracking enable-force-include-usage "
        "enable-tokenizer-info-endpoint return-tokens-as-token-ids max-log-len "
        "disable-frontend-multiprocessing lora-modules exclude-tools-when-tool-choice-none "
        "trust-request-chat-template default-chat-template-kwargs sse-keep-alive-interval "
        "tool-server grpc grpc-port api-server-count",
    ),
    **_each(
        _LOGGING,
        "disable-log-stats disable-log-requests enable-log-requests enable-log-outputs "
        "enable-log-deltas otlp-traces-endpoint collect-detailed-traces "
        "show-hidden-metrics-for-version log-level log-config-file logging-config "
        "aggregate-engine-logging kv-cache-metrics kv-cache-metrics-sample cudagraph-metrics "
        "enable-mfu-metrics enable-logging-iteration-details enable-per-request-metrics "
        "per-request-spec-decode-metrics log-error-stack enable-layerwise-nvtx-tracing "
        "custom-histogram-buckets",
    ),
    **_each(
        _LOADING,
        "trust-remote-code download-dir load-format tokenizer tokenizer-mode tokenizer-revision "
        "code-revision hf-token hf-config-path config-format seed safetensors-load-strategy "
        "use-tqdm-on-load max-parallel-loading-workers ignore-patterns pt-load-map-location "
        "skip-tokenizer-init generation-config override-generation-config config "
        "safetensors-prefetch-block-size safetensors-prefetch-num-threads",
    ),
    **_each(
        _LAUNCH,
        "distributed-executor-backend nnodes node-rank master-addr master-port headless "
        "data-parallel-address data-parallel-rpc-port data-parallel-rank data-parallel-start-rank "
        "data-parallel-size-local data-parallel-backend data-parallel-external-lb "
        "data-parallel-hybrid-lb data-parallel-multi-port-external-lb distributed-timeout-seconds "
        "cpu-distributed-timeout-seconds ray-workers-use-nsight data-parallel-supervisor-port "
        "dp-supervisor-probe-interval-s dp-supervisor-probe-timeout-s "
        "dp-supervisor-probe-failure-threshold shutdown-timeout numa-bind numa-bind-nodes "
        "numa-bind-cpus",
    ),
    **_each(
        _SAMPLING,
        "guided-decoding-backend guided-decoding-disable-fallback "
        "guided-decoding-disable-any-whitespace guided-decoding-disable-additional-properties "
        "structured-outputs-config reasoning-config logprobs-mode max-logprobs "
        "logits-processor-pattern use-fp64-gumbel",
    ),
    **_each(
        _SCHED,
        "scheduling-policy async-scheduling enable-chunked-prefill stream-interval "
        "scheduler-delay-factor max-num-partial-prefills max-long-partial-prefills "
        "long-prefill-token-threshold",
    ),
}

SGLANG: dict[str, tuple[str, str | None]] = {
    "--model-path": ("model", None),
    "--tp-size": ("opt", "--tp"),
    "--context-length": ("opt", "--ctx"),
    "--mem-fraction-static": ("opt", "--mem-fraction-static"),
    "--max-running-requests": ("opt", "--max-running-requests"),
    "--max-mamba-cache-size": ("opt", "--max-mamba-cache-size"),
    "--mamba-full-memory-ratio": ("opt", "--mamba-full-memory-ratio"),
    "--kv-cache-dtype": ("special", "sglang_kv_dtype"),
    "--mamba-ssm-dtype": ("opt", "--ssm-dtype"),
    "--dtype": ("opt", "--dtype"),
    "--page-size": ("opt", "--page-size"),
    "--chunked-prefill-size": ("opt", "--max-num-batched-tokens"),
    "--disable-radix-cache": ("special", "disable_radix_cache"),
    "--mamba-radix-cache-strategy": ("opt", "--radix"),
    "--mamba-scheduler-strategy": ("special", "mamba_scheduler_strategy"),
    "--disable-overlap-schedule": ("bool", "--disable-overlap-schedule"),
    "--speculative-algorithm": ("opt", "--spec-method"),
    "--speculative-num-steps": ("opt", "--spec-tokens"),
    "--speculative-eagle-topk": ("opt", "--eagle-topk"),
    "--speculative-num-draft-tokens": ("opt", "--draft-tokens"),
    "--speculative-draft-model-path": ("opt", "--spec-draft"),
    "--quantization": ("opt", "--quantization"),
    "--revision": ("opt", "--revision"),
    "--pp-size": ("opt", "--pp"),
    "--ep-size": ("opt", "--ep-size"),
    "--dp-size": ("opt", "--dp"),
    "--enable-dp-attention": ("bool", "--enable-dp-attention"),
    "--cpu-offload-gb": ("opt", "--cpu-offload-gb"),
    # the host tier (hybridplan/engines/sglang/hicache.py)
    "--enable-hierarchical-cache": ("bool", "--enable-hierarchical-cache"),
    "--hicache-ratio": ("opt", "--hicache-ratio"),
    "--hicache-size": ("opt", "--hicache-size"),
    "--hicache-write-policy": ("opt", "--hicache-write-policy"),
    "--hicache-mem-layout": ("opt", "--hicache-mem-layout"),
    "--hicache-io-backend": ("opt", "--hicache-io-backend"),
    "--hicache-host-memory-mode": ("opt", "--hicache-host-memory-mode"),
    "--hicache-host-memory-fraction": (
        "ignore",
        "sizes the default --hicache-ratio to the host's free memory, "
        "which hybridplan does not know: give --hicache-ratio to pin it",
    ),
    "--hicache-storage-backend": ("refuse", "an L3 storage backend behind the host tier is not modelled"),
    **_each(
        _CPU,
        "disable-hicache-numa-detect hicache-storage-backend-extra-config hicache-storage-prefetch-policy "
        "hicache-storage-prefetch-retry-max-attempts hicache-storage-prefetch-retry-poll-interval",
    ),
    "--max-total-tokens": ("refuse", "a KV token cap is not modelled: hybridplan sizes the pool SGLang's split gives"),
    "--schedule-conservativeness": (
        "ignore",
        "how far ahead the scheduler reserves tokens for running requests: no effect on the pools sized at start-up",
    ),
    "--cuda-graph-max-bs": (
        "ignore",
        "hybridplan's default --mem-fraction-static for the GPU does not read it; "
        "give --mem-fraction-static as your log prints it",
    ),
    "--cuda-graph-bs": (
        "ignore",
        "hybridplan's default --mem-fraction-static for the GPU does not read it; "
        "give --mem-fraction-static as your log prints it",
    ),
    "--disable-cuda-graph": ("ignore", "SGLang's pools come from --mem-fraction-static, which this does not change"),
    "--enable-torch-compile": ("ignore", "SGLang's pools come from --mem-fraction-static, which this does not change"),
    **_each(
        _SERVER,
        "host port api-key admin-api-key ssl-keyfile ssl-certfile ssl-ca-certs ssl-keyfile-password "
        "enable-ssl-refresh served-model-name chat-template completion-template tool-call-parser "
        "reasoning-parser tool-server fastapi-root-path enable-cache-report skip-server-warmup "
        "warmups enable-http2 grpc-mode grpc-port stream-output stream-response-default-include-usage "
        "incremental-streaming-output default-chat-template-kwargs hf-chat-template-name "
        "trust-request-chat-template uvicorn-access-log-exclude-prefixes file-storage-path "
        "enable-response-store",
    ),
    **_each(
        _LOGGING,
        "log-level log-level-http log-requests log-requests-level log-requests-format "
        "log-requests-target enable-metrics enable-metrics-for-all-schedulers show-time-cost "
        "decode-log-interval otlp-traces-endpoint oltp-traces-endpoint otlp-service-name enable-trace "
        "collect-tokens-histogram bucket-time-to-first-token bucket-inter-token-latency "
        "bucket-e2e-request-latency prompt-tokens-buckets generation-tokens-buckets "
        "enable-request-time-stats-logging export-metrics-to-file export-metrics-to-file-dir "
        "crash-dump-folder enable-mfu-metrics extra-metric-labels enable-expert-distribution-metrics",
    ),
    **_each(
        _LOADING,
        "trust-remote-code download-dir load-format tokenizer-path tokenizer-mode random-seed "
        "skip-tokenizer-init tokenizer-worker-num detokenizer-worker-num weight-loader-disable-mmap "
        "config model-checksum weight-version",
    ),
    **_each(
        _LAUNCH,
        "dist-init-addr nnodes node-rank dist-timeout nccl-port base-gpu-id gpu-id-step "
        "watchdog-timeout soft-watchdog-timeout custom-sigquit-handler numa-node "
        "enable-http-worker-reuseport",
    ),
    **_each(
        _SAMPLING,
        "grammar-backend sampling-defaults preferred-sampling-params enable-custom-logit-processor "
        "constrained-json-whitespace-pattern constrained-json-disable-any-whitespace "
        "constrained-json-max-whitespace-cnt",
    ),
    **_each(
        _SCHED,
        "schedule-policy stream-interval max-queued-requests enable-priority-scheduling "
        "schedule-low-priority-values-first priority-scheduling-preemption-threshold "
        "default-priority-value abort-on-priority-when-disabled",
    ),
}

NOT_MODELLED = "hybridplan does not model what it does to memory; drop it to size the start without it"

#: environment variables read from a pasted line: NAME → (hybridplan tokens for a true value, engine)
ENV_FLAGS = {
    "VLLM_ALLOW_LONG_MAX_MODEL_LEN": ("--allow-long-context",),
    "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": ("--allow-long-context",),
}
#: environment variables that set a value: NAME → hybridplan option
ENV_VALUES = {
    "SGLANG_MAMBA_CONV_DTYPE": "--conv-dtype",
    "VLLM_PP_LAYER_PARTITION": "--pp-layers",
    "SGLANG_PP_LAYER_PARTITION": "--pp-layers",
}
#: SGLang's own Mamba sizing variables, handed to --sglang-env
SGLANG_ENV = ("SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK",)
#: variables with no effect on memory
ENV_IGNORED = (
    "CUDA_VISIBLE_DEVICES",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HF_HOME",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "VLLM_LOGGING_LEVEL",
    "VLLM_USE_V1",
    "NCCL_DEBUG",
    "VLLM_CONFIGURE_LOGGING",
    "VLLM_WORKER_MULTIPROC_METHOD",
    "OMP_NUM_THREADS",
    "TOKENIZERS_PARALLELISM",
    "SGLANG_LOG_LEVEL",
    "PYTHONUNBUFFERED",
    "VLLM_HOST_IP",
    "VLLM_PORT",
)
_TRUE = ("1", "true", "yes", "on")

#: the programs a pasted line may start with, and the engine each is
PROGRAMS = {
    ("vllm", "serve"): "vllm",
    ("sglang", "serve"): "sglang",
    ("-m", "sglang.launch_server"): "sglang",
    ("-m", "vllm.entrypoints.openai.api_server"): "vllm",
}
#: SGLang's --kv-cache-dtype has no plain "fp8" (server_args.py choices)
SGLANG_NO_FP8 = "SGLang's --kv-cache-dtype takes fp8_e4m3 or fp8_e5m2, not fp8 (python/sglang/srt/server_args.py)"
#: vLLM's -O0 turns CUDA graphs off from 0.12.0 (vllm/config/vllm.py OptimizationLevel.O0: "no compilation, no
#: cudagraphs"; the 0.11.0-0.11.2 wheels have no such level: -O is the compilation level there)
O0_FROM = "0.12.0"


class Line(Struct, frozen=True):
    """What a pasted line or an engine flag among hybridplan's says, in hybridplan's options."""

    #: "vllm" or "sglang" where the line names its engine
    engine: str | None = None
    model: str | None = None
    #: (the flag as typed, hybridplan's tokens for it)
    options: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: flags with no effect on memory, as typed, and why each has none
    ignored: tuple[str, ...] = ()
    why: tuple[str, ...] = ()
    #: (engine, the words as typed, the flag's name) of each flag to keep in that engine's printed command
    kept: tuple[tuple[str, tuple[str, ...], str], ...] = ()

    @property
    def argv(self) -> list[str]:
        return [t for _, tokens in self.options for t in tokens]


def closest(name: str, known: Iterable[str]) -> str:
    """`` (did you mean --x?)`` for the closest known name, or nothing."""
    match = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean {match[0]}?)" if match else ""


def _max_model_len(value: str) -> tuple[str, ...]:
    # -1 / auto: the engine's own maximum, which is hybridplan's default too
    return () if value.strip().lower() in ("-1", "auto") else ("--ctx", value)


def _compilation(value: str, flag: str) -> tuple[tuple[str, ...], str | None]:
    """-O LEVEL, --optimization-level or --compilation-config JSON as hybridplan's tokens, and why it changes no
    figure where it changes none: only CUDA graphs off (level 0 from 0.12.0, cudagraph_mode NONE) does."""
    text = value.strip()
    if flag == "--optimization-level" or (flag == "-O" and text in ("0", "1", "2", "3")):
        if text not in ("0", "1", "2", "3"):
            raise PlanError(f"{flag} {value}: vLLM's levels are 0, 1, 2 and 3")
        return (("--enforce-eager", "--o0"), None) if text == "0" else ((), _GRAPHS)
    try:
        cfg = json.loads(value)
    except json.JSONDecodeError:
        if text in ("0", "1", "2", "3"):  # the old spelling, -O's level
            return _compilation(value, "-O")
        raise PlanError(f"{flag} is not valid JSON: {value}") from None
    if not isinstance(cfg, dict):
        if isinstance(cfg, int) and flag in ("-O", "-cc", "--compilation-config"):
            if str(cfg) not in ("0", "1", "2", "3"):  # a level, and none of vLLM's
                raise PlanError(f"{flag} {value}: vLLM's levels are 0, 1, 2 and 3")
            return _compilation(str(cfg), "-O")
        raise PlanError(f"{flag} must be a JSON object")
    if flag == "-O" and len(cfg) == 1 and set(cfg) <= {"level", "mode"}:
        # -O3 as 0.10.0-0.11.0 read it (-O.level=3) and 0.11.1-0.11.2 (-O.mode=3): the compilation level
        level = str(next(iter(cfg.values())))
        if level not in ("0", "1", "2", "3"):
            raise PlanError(f"{flag} {value}: vLLM's levels are 0, 1, 2 and 3")
        return _compilation(level, "-O")
    out: tuple[str, ...] = ()
    for key, v in cfg.items():
        if key == "cudagraph_mode":
            if str(v).upper() == "NONE":
                out = ("--enforce-eager",)
            elif not isinstance(v, str):
                raise PlanError(f"{flag}: cudagraph_mode {v!r} is not a mode")
        elif key in ("cudagraph_capture_sizes", "max_cudagraph_capture_size", "cudagraph_num_of_warmups"):
            raise PlanError(
                f"{flag} {key}: CUDA graph sizes are not modelled; hybridplan estimates vLLM's own "
                "graphs (give --overhead with your log's figure)"
            )
    return (out, None) if out else ((), _GRAPHS)


def _special(kind: str, flag: str, value: str | None) -> tuple[str, ...]:
    if kind == "max_model_len":
        return _max_model_len(value or "")
    if kind == "sglang_kv_dtype":
        if (value or "").strip().lower() == "fp8":
            raise PlanError(SGLANG_NO_FP8)
        return ("--kv-dtype", value or "")
    if kind == "disable_radix_cache":
        return ("--radix", "off")
    if kind == "mamba_scheduler_strategy":
        # SGLang 0.5.10+: extra_buffer / no_buffer name the radix strategy the same way
        return ("--radix", value or "")
    raise AssertionError(kind)  # pragma: no cover


#: words a pasted line may put before the program, with no effect on what it starts
LAUNCHERS = ("nohup", "exec", "time", "uv", "run", "uvx")


def _program(tokens: list[str]) -> tuple[str, int]:
    """The engine a pasted line runs, and where its arguments start: ``vllm serve`` or ``sglang serve`` (a path
    to the program as well), or a Python running ``-m sglang.launch_server``, after launcher words only."""
    for i in range(len(tokens) - 1):
        word = tokens[i].rsplit("/", 1)[-1]
        engine = PROGRAMS.get((word, tokens[i + 1]))
        before = [t.rsplit("/", 1)[-1] for t in tokens[:i]]
        if word == "-m":
            ok = bool(before) and before[-1].startswith("python") and all(b in LAUNCHERS for b in before[:-1])
        else:
            ok = all(b in LAUNCHERS for b in before)
        if engine is not None and ok:
            return engine, i + 2
        if engine is None and word not in LAUNCHERS and not word.startswith("python"):
            break
    raise PlanError(
        "after --, give the engine's command as you run it: vllm serve MODEL …, sglang serve "
        "--model-path MODEL … or python -m sglang.launch_server --model-path MODEL …"
    )


def _env(tokens: list[str]) -> tuple[list[tuple[str, tuple[str, ...]]], list[str], int]:
    """Leading NAME=VALUE words (and an ``env`` before them)."""
    options: list[tuple[str, tuple[str, ...]]] = []
    ignored: list[str] = []
    i = 0
    while i < len(tokens) and ("=" in tokens[i] and not tokens[i].startswith("-") or tokens[i] == "env"):
        if tokens[i] == "env":
            i += 1
            continue
        name, _, value = tokens[i].partition("=")
        on = value.strip().lower() in _TRUE
        if name in ENV_FLAGS:
            options.append((tokens[i], ENV_FLAGS[name] if on else ()))
        elif name in ENV_VALUES:
            options.append((tokens[i], (ENV_VALUES[name], value)))
        elif name in SGLANG_ENV:
            options.append((tokens[i], ("--sglang-env", f"{name}={value}")))
        elif name in ENV_IGNORED:
            ignored.append(tokens[i])
        elif name.startswith(("VLLM_", "SGLANG_")):
            raise PlanError(
                f"{name}: hybridplan does not know what this variable does to memory; drop it to size "
                "the start without it"
            )
        else:
            ignored.append(tokens[i])
        i += 1
    return options, ignored, i


# --- the engines' tables and how their parsers read a line --------------------------------------------------


class Flag(Struct, frozen=True):
    """One flag of an engine's parser at a release (its row of flags.json)."""

    name: str
    names: tuple[str, ...]
    #: "switch" (no value), "bool" (no value, and a --no- form), "value", "optional" (a value or none), "list"
    takes: str
    nargs: str | int | None = None
    choices: tuple[str, ...] | None = None
    deprecated: bool = False

    @property
    def needs_value(self) -> bool:
        return self.takes in ("value", "list") and self.nargs not in ("*",)


class Parser(Struct, frozen=True):
    """An engine's parser at a release: its flags by every option string, and what it does to a line first."""

    engine: str
    version: str
    flags: dict = field(default_factory=dict)
    #: FlexibleArgumentParser's rewrites (vLLM), argparse's allow_abbrev (both)
    rules: dict = field(default_factory=dict)

    @property
    def prog(self) -> str:
        return (
            f"vLLM {self.version} (vllm serve)" if self.engine == "vllm" else f"SGLang {self.version} (launch_server)"
        )


def _versions(engine: str) -> tuple[str, ...]:
    from hybridplan.engines.sglang import releases as sglang_releases
    from hybridplan.engines.vllm import releases as vllm_releases

    return tuple((vllm_releases if engine == "vllm" else sglang_releases).VERSIONS)


@lru_cache(maxsize=4)
def _data(engine: str) -> dict:
    from importlib import resources

    return json.loads(resources.files(f"hybridplan.engines.{engine}").joinpath("flags.json").read_text())


def _row(rows: list[dict], version: str, order: tuple[str, ...]) -> dict | None:
    i = order.index(version)
    return next((r for r in rows if order.index(r["from"]) <= i <= order.index(r["to"])), None)


@lru_cache(maxsize=128)
def parser(engine: str, version: str | None = None) -> Parser:
    """The engine's parser at ``version`` (a release hybridplan models; default: the newest)."""
    order = _versions(engine)
    version = version if version in order else order[-1]
    data = _data(engine)
    flags: dict[str, Flag] = {}
    for name, rows in data["flags"].items():
        r = _row(rows, version, order)
        if r is None:
            continue
        f = Flag(
            name,
            (name, *r.get("names", ())),
            r["takes"],
            r.get("nargs"),
            tuple(r["choices"]) if isinstance(r.get("choices"), list) else None,
            bool(r.get("deprecated")),
        )
        for n in f.names:
            flags.setdefault(n, f)
        if f.takes == "bool":
            for n in f.names:
                if n.startswith("--"):
                    flags.setdefault("--no-" + n[2:], f)
    rules = _row(data["parser"], version, order) or {}
    return Parser(engine, version, flags, rules)


def disposition(engine: str, names: Sequence[str]) -> tuple[str, str | None]:
    """What hybridplan does with a flag of the engine's table, by any of its names (a release may list another
    first: SGLang's --tp-size and --tensor-parallel-size)."""
    table = VLLM if engine == "vllm" else SGLANG
    return next((table[n] for n in names if n in table), None) or ("refuse", NOT_MODELLED)


def _negative_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def _looks_like_flag(token: str) -> bool:
    """argparse: a word starting with - is an option, unless it is a negative number (neither parser has an
    option that looks like one)."""
    return token.startswith("-") and token != "-" and not _negative_number(token)


def _vllm_rewrite(tokens: list[str], p: Parser) -> list[str]:
    """FlexibleArgumentParser.parse_args's rewrites, as the release has them (flags.json ``parser``): the part of
    a --flag before any dot with its underscores as dashes; -O<x>, -O=<x> and -O <digit> as the release spells
    the level (vllm/utils/__init__.py 0.10-0.1x, vllm/utils/argparse_utils.py later)."""
    rules, out = p.rules, []
    target = rules.get("o_target") or ""
    for i, arg in enumerate(tokens):
        if arg.startswith("--"):
            key, eq, value = arg.partition("=")
            head, dot, rest = key[2:].partition(".")
            if rules.get("underscores", True):
                head = head.replace("_", "-")
            out.append(f"--{head}{dot}{rest}{eq}{value}")
        elif arg.startswith("-O") and arg != "-O" and (target == "--optimization-level" or arg[2] != "."):
            level = arg[3:] if arg[2] == "=" else arg[2:]
            out += ["--optimization-level", level] if target == "--optimization-level" else [f"{target}{level}"]
        elif arg == "-O" and i + 1 < len(tokens) and tokens[i + 1] in ("0", "1", "2", "3"):
            out.append("--optimization-level" if target == "--optimization-level" else target.rstrip("="))
        else:
            out.append(arg)
    return out


def _dotted(tokens: list[str], p: Parser) -> list[str]:
    """vLLM's JSON flags given key by key (``--compilation-config.level 3``, ``-O.level=3``,
    ``--speculative-config.method mtp``, ``.key+`` for a list item) folded into one JSON value each, as
    FlexibleArgumentParser does (a value that reads as JSON is taken as JSON)."""
    out: list[str] = []
    merged: dict[str, dict] = {}
    skip = False
    for i, arg in enumerate(tokens):
        if skip:
            skip = False
            continue
        if arg.startswith("-") and "." in arg.split("=", 1)[0] and not _negative_number(arg):
            key, eq, value = arg.partition("=")
            if not eq:
                if i + 1 >= len(tokens):
                    raise PlanError(f"{p.prog}: {key} needs a value")
                value, skip = tokens[i + 1], True
            append = key.endswith("+")
            flag, *keys = key.rstrip("+").split(".")
            try:
                parsed = json.loads(value)
            except json.JSONDecodeError:
                parsed = value
            if append:
                parsed = value.split(",")
            node = merged.setdefault(flag, {})
            for k in keys[:-1]:
                node = node.setdefault(k, {})
            if append and isinstance(node.get(keys[-1]), list):
                node[keys[-1]] += parsed
            else:
                node[keys[-1]] = parsed
            if flag not in [t for t in out]:
                out += [flag, "\0dotted"]
            continue
        out.append(arg)
    return [json.dumps(merged[out[i - 1]], separators=(",", ":")) if t == "\0dotted" else t for i, t in enumerate(out)]


def _match(name: str, p: Parser, abbrev: bool) -> tuple[Flag | None, str, str | None]:
    """argparse's lookup of an option word: exact, ``--name=value``, ``-xVALUE`` for a two-character option,
    then (allow_abbrev) the one option that starts with it. Returns (the flag, its option string, a value
    attached)."""
    if name in p.flags:
        return p.flags[name], name, None
    if "=" in name:
        head, _, value = name.partition("=")
        if head in p.flags:
            return p.flags[head], head, value
        flag, opt, _ = _match(head, p, abbrev)
        return flag, opt, value if flag is not None else None
    if not name.startswith("--") and len(name) > 2 and name[:2] in p.flags:
        return p.flags[name[:2]], name[:2], name[2:]
    if abbrev and p.rules.get("allow_abbrev", True):
        # option strings of one flag (its names, its --no- form) count once, as one action
        hits = sorted(opt for opt in p.flags if opt.startswith(name))
        flags = {p.flags[h].name for h in hits}
        if len(flags) == 1:
            return p.flags[hits[0]], hits[0], None
        if len(hits) > 1:
            raise PlanError(f"{p.prog}: ambiguous option: {name} could match {', '.join(hits)}")
    return None, name, None


def _check_choice(p: Parser, f: Flag, opt: str, value: str) -> None:
    if f.choices and value not in f.choices:
        choices = ", ".join(repr(c) for c in f.choices)
        raise PlanError(f"{p.prog}: argument {'/'.join(f.names)}: invalid choice: {value!r} (choose from {choices})")


def _read(tokens: list[str], i: int, p: Parser, f: Flag, opt: str, attached: str | None) -> tuple[list[str], int]:
    """The values argparse gives the flag at ``tokens[i]``, and where the next word starts."""
    takes = "bool" if opt.startswith("--no-") and f.takes == "bool" else f.takes
    if takes in ("switch", "bool"):
        if attached is not None:
            raise PlanError(f"{p.prog}: argument {'/'.join(f.names)}: ignored explicit argument {attached!r}")
        return [], i + 1
    if attached is not None:
        values = [attached]
        i += 1
    else:
        j = i + 1
        values = []
        limit = 1 if takes in ("value", "optional") else (f.nargs if isinstance(f.nargs, int) else None)
        while j < len(tokens) and not _looks_like_flag(tokens[j]) and (limit is None or len(values) < limit):
            values.append(tokens[j])
            j += 1
        i = j
    if not values and takes != "optional" and f.nargs not in ("*", "?"):
        want = "one argument" if takes == "value" else "at least one argument"
        raise PlanError(f"{p.prog}: argument {'/'.join(f.names)}: expected {want} ({opt} needs a value)")
    if isinstance(f.nargs, int) and len(values) != f.nargs:
        raise PlanError(f"{p.prog}: argument {'/'.join(f.names)}: expected {f.nargs} arguments")
    for v in values:
        _check_choice(p, f, opt, v)
    return values, i


def _unknown(name: str, p: Parser, ours: set[str]) -> PlanError:
    engine = _name(p.engine)
    if name in ours:
        return PlanError(
            f"{p.prog}: unrecognized arguments: {name} (it is hybridplan's, not {engine}'s: give it before --)"
        )
    known = [n for n in p.flags if n.startswith("--")]
    return PlanError(f"{p.prog}: unrecognized arguments: {name}{closest(name, known)}")


def _apply(engine: str, f: Flag, opt: str, values: list[str], shown: str, out: dict) -> bool:
    """One flag the engine read, as hybridplan's options; True where it is to be kept in the printed command as
    typed (no effect on a figure)."""
    kind, target = disposition(engine, f.names)
    value = values[0] if values else None
    negated = opt.startswith("--no-") and f.takes == "bool"
    if f.takes == "optional" and value is None:
        value = "true"
    if kind == "model":
        out["model"] = value
    elif kind == "opt":
        if f.takes in ("switch", "bool"):
            raise AssertionError(f.name)  # pragma: no cover - a table flag that takes no value given a value
        out["options"].append((shown, (str(target), str(value))))
    elif kind == "bool":
        no = "--no-enable-prefix-caching" if target == "--enable-prefix-caching" else None
        out["options"].append((shown, ((no,) if no else ()) if negated else (str(target),)))
    elif kind == "ignore":
        out["ignored"].append((shown, str(target)))
        return True
    elif kind == "refuse":
        raise PlanError(f"{shown.split(' ', 1)[0]}: {target}")
    elif target in ("optimization", "compilation_config"):
        tokens, why = _compilation(value or "", opt)
        if why is not None:
            out["ignored"].append((shown, why))
            return True
        out["options"].append((shown, tokens))
    else:
        out["options"].append((shown, _special(str(target), f.name, value)))
    return False


def _shown(opt: str, values: list[str], attached: str | None) -> str:
    if attached is not None:
        return f"{opt}={attached}"
    return " ".join([opt, *values])


def _parse(
    tokens: list[str], engine: str, version: str | None, ours: set[str], out: dict, *, program: tuple[str, ...] | None
) -> None:
    """``tokens`` read as the engine's parser reads them at ``version``; the flags read as hybridplan's options
    into ``out``, and the tokens of those with no effect on memory kept verbatim. ``program``: the words that
    started the engine's own command line, whose parser takes abbreviations and, after ``vllm serve``, the
    positional model; None: a JSON config's flags, read whole."""
    abbrev = program is not None
    positional_model = program is not None and engine == "vllm" and program[-1:] == ("serve",)
    p = parser(engine, version)
    if engine == "vllm":
        tokens = _dotted(_vllm_rewrite(tokens, p), p)
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not _looks_like_flag(token):
            if positional_model and out.get("model") is None:
                out["model"] = token  # vllm serve MODEL
                i += 1
                continue
            raise PlanError(f"{p.prog}: unrecognized arguments: {token} (a value without its flag?)")
        f, opt, attached = _match(token, p, abbrev)
        if f is None:
            raise _unknown(token.split("=", 1)[0], p, ours)
        if engine == "vllm" and f.name == "--model" and positional_model and p.rules.get("model_option") == "refused":
            raise PlanError(
                f"{p.prog}: With `vllm serve`, you should provide the model as a positional argument "
                "or in a config file instead of via the `--model` option."
            )
        values, nxt = _read(tokens, i, p, f, opt, attached)
        shown = _shown(opt, values, attached)
        if _apply(engine, f, opt, values, shown, out):
            out["kept"].append((engine, tuple(tokens[i:nxt]), f.name))
        i = nxt


def translate(
    tokens: Sequence[str],
    engine: str | None = None,
    ours: Iterable[str] = (),
    versions: dict[str, str | None] | None = None,
) -> Line:
    """Engine flags as hybridplan's options: with ``engine`` None a whole pasted line (environment variables,
    the program, its arguments), read as that engine's parser reads it at its release in ``versions`` (default:
    the newest): underscores, ``-tp=4``, ``--flag=value``, unique prefixes, vLLM's ``-O3`` and dotted JSON keys;
    else flags of ``engine`` ("vllm", "sglang", or "either" for flags typed among hybridplan's own, by their full
    names). ``ours``: hybridplan's own flags, which a pasted line is told to put before ``--``."""
    tokens = list(tokens)
    versions = versions or {}
    out: dict = {"model": None, "options": [], "ignored": [], "kept": []}
    if engine is None:
        env_options, env_ignored, i = _env(tokens)
        engine, skip = _program(tokens[i:])
        out["options"] += env_options
        out["ignored"] += [(t, "no effect on memory") for t in env_ignored]
        _parse(tokens[i + skip :], engine, versions.get(engine), set(ours), out, program=tuple(tokens[i : i + skip]))
        line_engine: str | None = engine
    else:
        _either(tokens, engine, versions, out)
        line_engine = engine if engine in ("vllm", "sglang") else None
    return Line(
        line_engine,
        out["model"],
        tuple(out["options"]),
        tuple(s for s, _ in out["ignored"]),
        tuple(why for _, why in out["ignored"]),
        tuple(out["kept"]),
    )


def _either(tokens: list[str], engine: str, versions: dict[str, str | None], out: dict) -> None:
    """Engine flags typed among hybridplan's, by their full names: each read by the engine that has it (vLLM
    first), with one value at most; an ignored flag is kept for each engine that has it."""
    engines = ("vllm", "sglang") if engine == "either" else (engine,)
    i = 0
    while i < len(tokens):
        token = tokens[i]
        owner, f = None, None
        for e in engines:
            p = parser(e, versions.get(e))
            word = _vllm_rewrite(tokens[i : i + 2], p)[0] if e == "vllm" else token
            base = word.split("=", 1)[0]
            if e == "vllm":
                base = base.split(".", 1)[0]
            if base in p.flags:
                owner, f = e, p.flags[base]
                break
        if owner is None or f is None:
            name = token.split("=", 1)[0]
            raise PlanError(f"no such option: {name}{closest(name, engine_flag_names())}")
        attached = "=" in token or (token.startswith("-O") and len(token) > 2)
        n = 1 if attached or (f.takes in ("switch", "bool") and "." not in token) else 2
        sub: dict = {"model": None, "options": [], "ignored": [], "kept": []}
        _parse(tokens[i : i + n], owner, versions.get(owner), set(), sub, program=None)
        out["options"] += sub["options"]
        out["ignored"] += sub["ignored"]
        out["model"] = out["model"] or sub["model"]
        for _, words, name in sub["kept"]:
            for e in engines:
                if e == owner or name in parser(e, versions.get(e)).flags:
                    out["kept"].append((e, words, name))
        i += n


def _name(engine: str | None) -> str:
    return {"vllm": "vLLM", "sglang": "SGLang"}.get(engine or "", "engine")


def takes_value(token: str) -> bool:
    """Whether an engine flag typed among hybridplan's takes the next word as its value."""
    if "=" in token or (token.startswith("-O") and len(token) > 2):
        return False
    for e in ("vllm", "sglang"):
        for v in reversed(_versions(e)):  # the newest release that has it
            p = parser(e, v)
            word = _vllm_rewrite([token], p)[0] if e == "vllm" else token
            f = p.flags.get(word.split(".", 1)[0] if e == "vllm" and "." in word else word)
            if f is not None:
                return "." in word or f.takes in ("value", "list") or f.takes == "optional"
    return False


def engine_flag_names() -> set[str]:
    return {n for e in ("vllm", "sglang") for v in _versions(e) for n in parser(e, v).flags}


# --- the commands back ----------------------------------------------------------------------------------


class Command(Struct, frozen=True):
    """A command line to run: environment variables, the program and its arguments."""

    env: tuple[str, ...] = ()
    argv: tuple[str, ...] = ()
    #: what the command cannot say (a budget given as hybridplan's own figure)
    notes: tuple[str, ...] = field(default=())

    def __str__(self) -> str:
        return " ".join([*self.env, *(shlex.quote(a) for a in self.argv)])


def _torch(name: str | None) -> str | None:
    """A dtype flag's value as a torch name (None for auto)."""
    if name is None or str(name).strip().lower() == "auto":
        return None
    from hybridplan.dtypes import parse_dtype

    return parse_dtype(name)


#: torch dtype → each engine's spelling of it for --kv-cache-dtype (vllm/config/cache.py CacheDType;
#: SGLang server_args.py)
VLLM_KV = {
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8_e5m2",
    "bfloat16": "bfloat16",
    "float16": "float16",
    "int8": "int8_per_token_head",
}
SGLANG_KV = {"float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2", "bfloat16": "bfloat16", "float16": "float16"}
#: vLLM's --kv-cache-memory-bytes came in 0.10.2 (vllm/engine/arg_utils.py: absent from the 0.10.0 and 0.10.1
#: wheels, present in 0.10.2's)
KV_BYTES_FROM = "0.10.2"
#: SGLang's --mamba-scheduler-strategy (0.5.7 on) became --mamba-radix-cache-strategy in 0.5.14, the old name
#: kept as a deprecated alias (python/sglang/srt/server_args.py, DeprecatedAliasStoreAction, 0.5.14-0.5.23)
RADIX_FLAG_RENAMED = "0.5.14"
#: vLLM's --gdn-prefill-backend came in 0.18.0 (absent from the 0.17.1 wheel's vllm/engine/arg_utils.py)
GDN_FLAG_FROM = "0.18.0"


#: a method as the other engine names it (vLLM --speculative-config method ↔ SGLang --speculative-algorithm)
VLLM_TO_SGLANG = {
    "mtp": "NEXTN",
    "eagle": "EAGLE",
    "eagle3": "EAGLE3",
    "draft_model": "STANDALONE",
    "ngram": "NGRAM",
    "dflash": "DFLASH",
    "dspark": "DSPARK",
}


def _method(sc) -> str:
    """vLLM's name of the method: as given; NEXTN (SGLang's EAGLE on the target's MTP layers) is MTP; a bare
    --spec-tokens is n-gram, which adds no draft layers, as the figures were sized."""
    sp = sc.speculative
    if sp.method is None:
        return "ngram"
    if sp.method == "eagle" and sp.draft_ref is None and sp.layers:
        return "mtp"
    return sp.method


def _spec_json(sc) -> str:
    sp = sc.speculative
    method = _method(sc)
    cfg: dict = {"method": method}
    if sp.draft_ref:
        cfg["model"] = sp.draft_ref
    cfg["num_speculative_tokens"] = sc.spec_tokens
    if method == "ngram":
        cfg["prompt_lookup_max"] = 4
    return json.dumps(cfg, separators=(",", ":"))


def _gib(n: int) -> str:
    return f"{n / 2**30:.6g}"


def _kept(sc, engine: str) -> list[str]:
    """The flags given for ``engine`` that change no figure (--trust-remote-code, --port, ...), as typed: the
    line must still start the model as the user runs it."""
    return [w for e, words in getattr(sc, "engine_args", ()) if e == engine for w in words]


def vllm_command(
    sc, model: str, *, mode: str, max_num_seqs: int, revision: str | None = None, lowered: bool = False
) -> Command:
    """``vllm serve`` with the settings of ``sc`` that change a figure, starting in ``mode`` with
    ``max_num_seqs``; ``lowered``: that is the most that starts, in place of a count that does not."""
    rel = sc.vllm.release
    env: tuple[str, ...] = ("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1",) if sc.allow_long_context else ()
    if sc.pp_partition is not None:
        env += (f"VLLM_PP_LAYER_PARTITION={','.join(map(str, sc.pp_partition))}",)
    a: list[str] = ["vllm", "serve", model]
    if revision:
        a += ["--revision", revision]
    if sc.tp > 1:
        a += ["--tensor-parallel-size", str(sc.tp)]
    if sc.pp > 1:
        a += ["--pipeline-parallel-size", str(sc.pp)]
    if sc.dp > 1:
        a += ["--data-parallel-size", str(sc.dp)]
    if sc.expert_parallel:
        a += ["--enable-expert-parallel"]
    a += ["--max-model-len", str(sc.ctx), "--max-num-seqs", str(max(max_num_seqs, 1))]
    d = sc.dtypes
    for flag, value in (
        ("--dtype", _torch(d.dtype)),
        ("--mamba-cache-dtype", _torch(d.conv)),
        ("--mamba-ssm-cache-dtype", _torch(d.ssm)),
    ):
        if value:
            a += [flag, value]
    if (kv := _torch(d.kv)) is not None:
        a += ["--kv-cache-dtype", VLLM_KV[kv]]
    if sc.vllm.gpu_util is not None:
        a += ["--gpu-memory-utilization", f"{sc.vllm.gpu_util:g}"]
    if sc.vllm.block_size is not None:
        a += ["--block-size", str(sc.vllm.block_size)]
    if sc.vllm.mode is not None:
        # given (--mode or the prefix-caching switch): stated even where it is the release's default, so that
        # the line pasted back shows the one mode shown here, not every mode
        if mode == "none":
            a += ["--no-enable-prefix-caching"]
        elif mode == rel.mode(sc.spec, sc.spec_tokens, True):
            a += ["--enable-prefix-caching"]
        else:
            a += ["--enable-prefix-caching", "--mamba-cache-mode", mode]
    if sc.chunk is not None:
        a += ["--max-num-batched-tokens", str(sc.chunk)]
    if sc.vllm.gdn_backend is not None and rel.at_least(GDN_FLAG_FROM):
        a += ["--gdn-prefill-backend", sc.vllm.gdn_backend]
    if sc.vllm.performance_mode is not None:
        a += ["--performance-mode", sc.vllm.performance_mode]
    if sc.vllm.enforce_eager:
        a += ["--enforce-eager"]
    if sc.spec_tokens:
        a += ["--speculative-config", _spec_json(sc)]
    if sc.budget.cpu_offload:
        a += ["--cpu-offload-gb", _gib(sc.budget.cpu_offload)]
    a += _kept(sc, "vllm")
    notes: tuple[str, ...] = ()
    if lowered and max_num_seqs >= 1:
        notes += (
            f"the vllm command asks for --max-num-seqs {max_num_seqs}, the most that starts here; vLLM "
            "profiles with that many sequences, so its budget comes out a little above the one shown",
        )
    if sc.budget.kv_budget is not None:
        if rel.at_least(KV_BYTES_FROM):
            a += ["--kv-cache-memory-bytes", str(sc.budget.kv_budget)]
        else:
            notes += (
                f"vLLM {rel.version} has no --kv-cache-memory-bytes (from {KV_BYTES_FROM}): the budget given "
                "is what its profiling must leave",
            )
    return Command(env, tuple(a), notes)


def sglang_command(sc, model: str, *, revision: str | None = None) -> Command:
    """``python -m sglang.launch_server`` with the settings of ``sc`` that change a figure. The request cap only
    where it was given: SGLang sizes its CUDA graphs, and so its default --mem-fraction-static, from
    --max-running-requests when it is set (server_args.py), so stating its own estimate would change the start."""
    s, rel = sc.sglang, sc.sglang.release
    env: list[str] = []
    if sc.allow_long_context:
        env.append("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1")
    if s.skip_decode_lock:
        env.append("SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=1")
    d = sc.dtypes
    if (conv := _torch(d.conv)) is not None:
        env.append(f"SGLANG_MAMBA_CONV_DTYPE={conv}")
    a: list[str] = ["python", "-m", "sglang.launch_server", "--model-path", model]
    if revision:
        a += ["--revision", revision]
    if sc.pp_partition is not None:
        env.append(f"SGLANG_PP_LAYER_PARTITION={','.join(map(str, sc.pp_partition))}")
    if sc.tp > 1:
        a += ["--tp-size", str(sc.tp)]
    if sc.pp > 1:
        a += ["--pp-size", str(sc.pp)]
    if sc.dp > 1:
        a += ["--dp-size", str(sc.dp)]
    if sc.dp_attention:
        a += ["--enable-dp-attention"]
    if sc.ep_size > 1:
        a += ["--ep-size", str(sc.ep_size)]
    a += ["--context-length", str(sc.ctx)]
    if s.max_running_requests is not None:
        a += ["--max-running-requests", str(s.max_running_requests)]
    if (dt := _torch(d.dtype)) is not None:
        a += ["--dtype", dt]
    if (kv := _torch(d.kv)) is not None:
        a += ["--kv-cache-dtype", SGLANG_KV[kv]]
    if (ssm := _torch(d.ssm)) is not None:
        a += ["--mamba-ssm-dtype", ssm]
    if s.mem_fraction_static is not None:
        a += ["--mem-fraction-static", f"{s.mem_fraction_static:g}"]
    if s.max_mamba_cache_size is not None:
        a += ["--max-mamba-cache-size", str(s.max_mamba_cache_size)]
    from hybridplan.engines.sglang.settings import FULL_MEMORY_RATIO

    if s.full_memory_ratio != FULL_MEMORY_RATIO:
        a += ["--mamba-full-memory-ratio", f"{s.full_memory_ratio:g}"]
    if s.page_size != 1:
        a += ["--page-size", str(s.page_size)]
    if sc.chunk is not None:
        a += ["--chunked-prefill-size", str(sc.chunk)]
    if s.radix == "off":
        a += ["--disable-radix-cache"]
    elif s.radix != "auto" and not rel.before("0.5.7"):
        a += [
            "--mamba-radix-cache-strategy" if rel.at_least(RADIX_FLAG_RENAMED) else "--mamba-scheduler-strategy",
            s.radix,
        ]
    if not s.overlap:
        a += ["--disable-overlap-schedule"]
    if sc.spec_tokens:
        method = VLLM_TO_SGLANG.get(_method(sc), _method(sc).upper())
        a += [
            "--speculative-algorithm",
            method,
            "--speculative-num-steps",
            str(sc.spec_tokens),
            "--speculative-eagle-topk",
            "1",
            "--speculative-num-draft-tokens",
            str(s.draft(sc.spec_tokens)),
        ]
        if sc.speculative.draft_ref:
            a += ["--speculative-draft-model-path", sc.speculative.draft_ref]
    if sc.budget.cpu_offload:
        a += ["--cpu-offload-gb", _gib(sc.budget.cpu_offload)]
    if (hc := s.hicache) is not None:
        a += ["--enable-hicache" if rel.at_least("0.5.23") else "--enable-hierarchical-cache"]  # flags.json
        if hc.ratio is not None:
            a += ["--hicache-ratio", f"{hc.ratio:g}"]
        if hc.size_gb:
            a += ["--hicache-size", f"{hc.size_gb:g}"]
        if hc.write_policy != "write_through":
            a += ["--hicache-write-policy", hc.write_policy]
        if hc.mem_layout is not None:
            a += ["--hicache-mem-layout", hc.mem_layout]
        if hc.io_backend != "kernel":
            a += ["--hicache-io-backend", hc.io_backend]
    a += _kept(sc, "sglang")
    notes: tuple[str, ...] = ()
    if sc.budget.kv_budget is not None:
        notes = (
            "SGLang has no flag for the memory to split (--kv-budget): it starts with what its "
            "--mem-fraction-static leaves",
        )
    return Command(tuple(env), tuple(a), notes)
