"""Engine command lines as input, and the commands to run as output.

A user pastes the line they already run (``vllm serve MODEL …``, ``sglang serve …``,
``python -m sglang.launch_server --model-path MODEL …``, environment variables first if any) after ``--``, or
types an engine's own flag names among hybridplan's. ``translate`` turns such tokens into hybridplan's own
options (pure: tokens in, option tokens and what was set aside out); ``options.expand`` wires it in front of
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
from dataclasses import field

from hybridplan.errors import PlanError
from hybridplan.records import frozen

# --- the flags ------------------------------------------------------------------------------------------
#
# Each engine flag maps to one of:
#   ("opt", "--hybridplan-flag")  a value, handed to hybridplan's option of that name
#   ("bool", "--hybridplan-flag") a switch, handed to hybridplan's switch (``--no-`` form: the switch left off)
#   ("model", None)               the model
#   ("ignore", None) / ("ignore-bool", None)  no effect on memory: listed, not used
#   ("refuse", why)               changes memory in a way hybridplan does not model: refused, saying why
#   ("special", name)             read here (JSON configs, modes spelled as switches)

_IGNORED_VALUE = ("--host", "--port", "--served-model-name", "--api-key", "--tokenizer", "--tokenizer-mode",
                  "--download-dir", "--seed", "--chat-template", "--tool-call-parser", "--reasoning-parser",
                  "--uvicorn-log-level", "--max-log-len", "--generation-config", "--distributed-executor-backend",
                  "--allowed-origins", "--root-path", "--ssl-keyfile",
                  "--ssl-certfile", "--response-role", "--hf-token", "--load-format", "--code-revision",
                  "--tokenizer-revision", "--swap-space", "--config-format", "--middleware", "--lora-modules",
                  "--override-generation-config", "--disable-log-requests")
_IGNORED_BOOL = ("--trust-remote-code", "--disable-log-stats", "--enable-auto-tool-choice", "--disable-log-requests",
                 "--enable-log-requests", "--disable-frontend-multiprocessing", "--enable-chunked-prefill",
                 "--async-scheduling", "--disable-fastapi-docs", "--enable-prompt-tokens-details",
                 "--enable-server-load-tracking")

VLLM: dict[str, tuple[str, str | None]] = {
    "--model": ("model", None),
    "--tensor-parallel-size": ("opt", "--tp"), "-tp": ("opt", "--tp"),
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
    "-O": ("special", "optimization"), "--optimization-level": ("special", "optimization"),
    "--compilation-config": ("special", "compilation_config"), "-cc": ("special", "compilation_config"),
    "--quantization": ("opt", "--quantization"), "-q": ("opt", "--quantization"),
    "--revision": ("opt", "--revision"),
    "--kv-cache-memory-bytes": ("opt", "--kv-budget"),
    "--gdn-prefill-backend": ("opt", "--gdn-prefill-backend"),
    "--performance-mode": ("opt", "--performance-mode"),
    "--pipeline-parallel-size": ("opt", "--pp"), "-pp": ("opt", "--pp"),
    "--enable-expert-parallel": ("bool", "--enable-expert-parallel"),
    "--data-parallel-size": ("opt", "--dp"), "-dp": ("opt", "--dp"),
    "--cpu-offload-gb": ("refuse", "weight offloading is not modelled: give --weights with what stays on the GPU"),
    "--num-gpu-blocks-override": ("refuse", "a block count override is not modelled"),
    "--max-cudagraph-capture-size": ("refuse", "CUDA graph sizes are not modelled"),
    "--cuda-graph-sizes": ("refuse", "CUDA graph sizes are not modelled"),
    **{f: ("ignore", None) for f in _IGNORED_VALUE},
    **{f: ("ignore-bool", None) for f in _IGNORED_BOOL},
}

SGLANG: dict[str, tuple[str, str | None]] = {
    "--model-path": ("model", None), "--model": ("model", None),
    "--tp-size": ("opt", "--tp"), "--tp": ("opt", "--tp"), "--tensor-parallel-size": ("opt", "--tp"),
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
    "--ep-size": ("opt", "--ep-size"), "--ep": ("opt", "--ep-size"),
    "--dp-size": ("opt", "--dp"), "--dp": ("opt", "--dp"),
    "--enable-dp-attention": ("bool", "--enable-dp-attention"),
    "--max-total-tokens": ("refuse", "a KV token cap is not modelled: hybridplan sizes the pool SGLang's split "
                                     "gives"),
    **{f: ("ignore", None) for f in ("--host", "--port", "--served-model-name", "--api-key", "--tokenizer-path",
                                     "--log-level", "--random-seed", "--chat-template",
                                     "--tool-call-parser", "--reasoning-parser", "--download-dir", "--load-format",
                                     "--tokenizer-mode", "--attention-backend", "--cuda-graph-max-bs",
                                     "--cuda-graph-bs", "--schedule-policy", "--stream-interval",
                                     "--watchdog-timeout", "--dist-init-addr", "--nnodes", "--node-rank")},
    **{f: ("ignore-bool", None) for f in ("--trust-remote-code", "--enable-metrics", "--disable-cuda-graph",
                                          "--skip-server-warmup", "--log-requests", "--enable-torch-compile",
                                          "--enable-mixed-chunk", "--disable-custom-all-reduce",
                                          "--enable-cache-report", "--show-time-cost")},
}

#: environment variables read from a pasted line: NAME → (hybridplan tokens for a true value, engine)
ENV_FLAGS = {
    "VLLM_ALLOW_LONG_MAX_MODEL_LEN": ("--allow-long-context",),
    "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": ("--allow-long-context",),
}
#: environment variables that set a value: NAME → hybridplan option
ENV_VALUES = {"SGLANG_MAMBA_CONV_DTYPE": "--conv-dtype", "VLLM_PP_LAYER_PARTITION": "--pp-layers",
              "SGLANG_PP_LAYER_PARTITION": "--pp-layers"}
#: SGLang's own Mamba sizing variables, handed to --sglang-env
SGLANG_ENV = ("SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK",)
#: variables with no effect on memory
ENV_IGNORED = ("CUDA_VISIBLE_DEVICES", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HOME", "HF_HUB_OFFLINE",
               "TRANSFORMERS_OFFLINE", "VLLM_LOGGING_LEVEL", "VLLM_USE_V1", "NCCL_DEBUG", "VLLM_CONFIGURE_LOGGING",
               "VLLM_WORKER_MULTIPROC_METHOD", "OMP_NUM_THREADS", "TOKENIZERS_PARALLELISM", "SGLANG_LOG_LEVEL",
               "PYTHONUNBUFFERED", "VLLM_HOST_IP", "VLLM_PORT")
_TRUE = ("1", "true", "yes", "on")

#: the programs a pasted line may start with, and the engine each is
PROGRAMS = {("vllm", "serve"): "vllm", ("sglang", "serve"): "sglang",
            ("-m", "sglang.launch_server"): "sglang", ("-m", "vllm.entrypoints.openai.api_server"): "vllm"}
#: SGLang's --kv-cache-dtype has no plain "fp8" (server_args.py choices)
SGLANG_NO_FP8 = "SGLang's --kv-cache-dtype takes fp8_e4m3 or fp8_e5m2, not fp8 (python/sglang/srt/server_args.py)"
#: vLLM's -O0 turns CUDA graphs off from 0.12.0 (vllm/config/vllm.py OptimizationLevel.O0: "no compilation, no
#: cudagraphs"; the 0.11.0-0.11.2 wheels have no such level: -O is the compilation level there)
O0_FROM = "0.12.0"


@frozen
class Line:
    """What a pasted line or an engine flag among hybridplan's says, in hybridplan's options."""

    #: "vllm" or "sglang" where the line names its engine
    engine: str | None = None
    model: str | None = None
    #: (the flag as typed, hybridplan's tokens for it)
    options: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: flags with no effect on memory, as typed
    ignored: tuple[str, ...] = ()

    @property
    def argv(self) -> list[str]:
        return [t for _, tokens in self.options for t in tokens]


def closest(name: str, known: Iterable[str]) -> str:
    """`` (did you mean --x?)`` for the closest known name, or nothing."""
    match = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean {match[0]}?)" if match else ""


def _split_eq(token: str) -> tuple[str, str | None]:
    if token.startswith("--") and "=" in token:
        name, _, value = token.partition("=")
        return name, value
    if token.startswith("-O") and len(token) > 2 and not token.startswith("-O."):  # -O0, -O3
        return "-O", token[2:].lstrip("=")
    return token, None


def _max_model_len(value: str) -> tuple[str, ...]:
    # -1 / auto: the engine's own maximum, which is hybridplan's default too
    return () if value.strip().lower() in ("-1", "auto") else ("--ctx", value)


def _compilation(value: str, flag: str) -> tuple[str, ...]:
    """-O LEVEL or --compilation-config JSON: only whether CUDA graphs are off changes a figure."""
    if flag in ("-O", "--optimization-level"):
        level = value.strip()
        if level not in ("0", "1", "2", "3"):
            raise PlanError(f"{flag} {value}: vLLM's levels are 0, 1, 2 and 3")
        return ("--enforce-eager", "--o0") if level == "0" else ()
    try:
        cfg = json.loads(value)
    except json.JSONDecodeError:
        if value.strip() in ("0", "1", "2", "3"):  # the old spelling, -O's level
            return _compilation(value, "-O")
        raise PlanError(f"{flag} is not valid JSON: {value}") from None
    if not isinstance(cfg, dict):
        raise PlanError(f"{flag} must be a JSON object")
    out: tuple[str, ...] = ()
    for key, v in cfg.items():
        if key == "cudagraph_mode":
            if str(v).upper() == "NONE":
                out = ("--enforce-eager",)
            elif not isinstance(v, str):
                raise PlanError(f"{flag}: cudagraph_mode {v!r} is not a mode")
        elif key in ("level", "mode"):
            if str(v) in ("0", "NONE", "none"):
                continue  # no torch.compile: no memory term of hybridplan's
        elif key in ("cudagraph_capture_sizes", "max_cudagraph_capture_size", "cudagraph_num_of_warmups"):
            raise PlanError(f"{flag} {key}: CUDA graph sizes are not modelled; hybridplan estimates vLLM's own "
                            "graphs (give --overhead with your log's figure)")
    return out


def _special(kind: str, flag: str, value: str | None) -> tuple[str, ...]:
    if kind == "max_model_len":
        return _max_model_len(value or "")
    if kind in ("optimization", "compilation_config"):
        return _compilation(value or "", flag)
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
    raise PlanError("after --, give the engine's command as you run it: vllm serve MODEL …, sglang serve "
                    "--model-path MODEL … or python -m sglang.launch_server --model-path MODEL …")


def _env(tokens: list[str]) -> tuple[list[tuple[str, tuple[str, ...]]], list[str], int]:
    """Leading NAME=VALUE words (and an ``env`` before them)."""
    options, ignored, i = [], [], 0
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
            raise PlanError(f"{name}: hybridplan does not know what this variable does to memory; drop it to size "
                            "the start without it")
        else:
            ignored.append(tokens[i])
        i += 1
    return options, ignored, i


def translate(tokens: Sequence[str], engine: str | None = None, ours: Iterable[str] = ()) -> Line:
    """Engine flags as hybridplan's options: with ``engine`` None a whole pasted line (environment variables,
    the program, its arguments); else flags of ``engine`` ("vllm", "sglang", or "either" for flags typed
    among hybridplan's own). ``ours``: hybridplan's own flags, which a pasted line is told to put before ``--``."""
    tokens = list(tokens)
    ours = set(ours)
    options: list[tuple[str, tuple[str, ...]]] = []
    ignored: list[str] = []
    model = None
    i = 0
    if engine is None:
        options, ignored, i = _env(tokens)
        engine, skip = _program(tokens[i:])
        i += skip
    table = {**SGLANG, **VLLM} if engine == "either" else (VLLM if engine == "vllm" else SGLANG)
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("-") or token == "-":
            if engine == "vllm" and model is None:
                model = token  # vllm serve MODEL
                i += 1
                continue
            raise PlanError(f"{token!r}: not a flag of the {_name(engine)} command line (a value without its flag?)")
        name, value = _split_eq(token)
        entry, negated = table.get(name), False
        if entry is None and name.startswith("--no-"):
            entry = table.get("--" + name[5:])
            negated = entry is not None and entry[0] in ("bool", "ignore-bool")
            entry = entry if negated else None
        if entry is None:
            if name in ours:
                raise PlanError(f"unknown {_name(engine)} flag {name}: it is hybridplan's, so give it before --")
            raise PlanError(f"unknown {_name(engine)} flag {name}{closest(name, table)}")
        kind, target = entry
        takes_value = kind in ("opt", "model", "ignore", "special", "refuse") and target not in (
            "disable_radix_cache",) and name != "--enable-expert-parallel"
        if takes_value and value is None:
            if i + 1 >= len(tokens):
                raise PlanError(f"{name} needs a value")
            i += 1
            value = tokens[i]
        i += 1
        shown = f"{name} {value}" if takes_value else token
        if kind == "model":
            model = value
        elif kind == "opt":
            options.append((shown, (str(target), str(value))))
        elif kind == "bool":
            no = "--no-enable-prefix-caching" if target == "--enable-prefix-caching" else None
            options.append((shown, ((no,) if no else ()) if negated else (str(target),)))
        elif kind in ("ignore", "ignore-bool"):
            ignored.append(shown)
        elif kind == "refuse":
            raise PlanError(f"{name}: {target}")
        else:
            options.append((shown, _special(str(target), name, value)))
    return Line(engine if engine in ("vllm", "sglang") else None, model, tuple(options), tuple(ignored))


def _name(engine: str | None) -> str:
    return {"vllm": "vLLM", "sglang": "SGLang"}.get(engine or "", "engine")


def takes_value(token: str) -> bool:
    """Whether an engine flag typed among hybridplan's takes the next word as its value."""
    name, value = _split_eq(token)
    if value is not None:
        return False
    entry = {**SGLANG, **VLLM}.get(name)
    if entry is None:
        return False
    kind, target = entry
    return kind in ("opt", "model", "ignore", "special", "refuse") and target != "disable_radix_cache" and (
        name != "--enable-expert-parallel")


def engine_flag_names() -> set[str]:
    return set(VLLM) | set(SGLANG)


# --- the commands back ----------------------------------------------------------------------------------


@frozen
class Command:
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
VLLM_KV = {"float8_e4m3fn": "fp8", "float8_e5m2": "fp8_e5m2", "bfloat16": "bfloat16", "float16": "float16"}
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
VLLM_TO_SGLANG = {"mtp": "NEXTN", "eagle": "EAGLE", "eagle3": "EAGLE3", "draft_model": "STANDALONE",
                  "ngram": "NGRAM", "dflash": "DFLASH", "dspark": "DSPARK"}


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


def vllm_command(sc, model: str, *, mode: str, max_num_seqs: int, revision: str | None = None,
                 lowered: bool = False) -> Command:
    """``vllm serve`` with the settings of ``sc`` that change a figure, starting in ``mode`` with
    ``max_num_seqs``; ``lowered``: that is the most that starts, in place of a count that does not."""
    rel = sc.vllm.release
    env = ("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1",) if sc.allow_long_context else ()
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
    for flag, value in (("--dtype", _torch(d.dtype)), ("--mamba-cache-dtype", _torch(d.conv)),
                        ("--mamba-ssm-cache-dtype", _torch(d.ssm))):
        if value:
            a += [flag, value]
    if (kv := _torch(d.kv)) is not None:
        a += ["--kv-cache-dtype", VLLM_KV[kv]]
    if sc.vllm.gpu_util is not None:
        a += ["--gpu-memory-utilization", f"{sc.vllm.gpu_util:g}"]
    if sc.vllm.block_size is not None:
        a += ["--block-size", str(sc.vllm.block_size)]
    if sc.vllm.mode is not None and mode != rel.default_mode(sc.spec, sc.spec_tokens):
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
    notes: tuple[str, ...] = ()
    if lowered and max_num_seqs >= 1:
        notes += (f"the vllm command asks for --max-num-seqs {max_num_seqs}, the most that starts here; vLLM "
                  "profiles with that many sequences, so its budget comes out a little above the one shown",)
    if sc.budget.kv_budget is not None:
        if rel.at_least(KV_BYTES_FROM):
            a += ["--kv-cache-memory-bytes", str(sc.budget.kv_budget)]
        else:
            notes += (f"vLLM {rel.version} has no --kv-cache-memory-bytes (from {KV_BYTES_FROM}): the budget given "
                     "is what its profiling must leave",)
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
        a += ["--mamba-radix-cache-strategy" if rel.at_least(RADIX_FLAG_RENAMED) else "--mamba-scheduler-strategy",
              s.radix]
    if not s.overlap:
        a += ["--disable-overlap-schedule"]
    if sc.spec_tokens:
        method = VLLM_TO_SGLANG.get(_method(sc), _method(sc).upper())
        a += ["--speculative-algorithm", method, "--speculative-num-steps", str(sc.spec_tokens),
              "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(s.draft(sc.spec_tokens))]
        if sc.speculative.draft_ref:
            a += ["--speculative-draft-model-path", sc.speculative.draft_ref]
    notes = ()
    if sc.budget.kv_budget is not None:
        notes = ("SGLang has no flag for the memory to split (--kv-budget): it starts with what its "
                 "--mem-fraction-static leaves",)
    return Command(tuple(env), tuple(a), notes)
