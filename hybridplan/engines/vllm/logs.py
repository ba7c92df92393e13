"""A vLLM start-up log read back whole: the settings it states (version banner, ``non-default args``, the
engine-config line and the lines around them), each figure it prints beside the prediction for those
settings, and the figures hybridplan does not predict, with the reason."""

from __future__ import annotations

import json
import re
from math import ceil, floor
from typing import TYPE_CHECKING

from msgspec.structs import replace

from hybridplan.engines.common import Estimate, LogCheck, NotModelled, Row, Settings, literal
from hybridplan.engines.vllm.blocks import layout
from hybridplan.engines.vllm.dtypes import footprint
from hybridplan.engines.vllm.releases import Release, release, untagged
from hybridplan.engines.vllm.sizing import Capacity, capacity
from hybridplan.errors import NotServed, PlanError
from hybridplan.logread import Found, Log
from hybridplan.scenario import DtypeChoice, Scenario, Speculative, default_ctx
from hybridplan.units import article

if TYPE_CHECKING:
    from hybridplan.engines import LogGiven

GiB = 1 << 30
ENGINE = "vllm"

#: substrings one of which every line read here holds: a log is filtered by them before it is read
KEYWORDS = (
    "vLLM",
    "version",
    "non-default args",
    "LLM engine",
    "max model len",
    "amba",
    "attention block size",
    "KV cache",
    "concurrency",
    "padding layers",
    "Resolved architecture",
    "prefix caching",
    "max_num_seqs",
    "Model loading took",
    "CUDA graph",
    "Graph capturing",
    "cudagraph",
    "To serve at least one request",
    "Auto-fit",
    "Free memory on device",
    "data type to store kv cache",
    "model   ",
    "Device capability",
    "arch=sm",
    "device_name=",
    "Error: ",
    "Chunked prefill is enabled",
    "GDN prefill kernel",
)

# --- settings ----------------------------------------------------------------------------------------
BANNER = (
    re.compile(r"vLLM (?:API )?server version ([^\s,]+)"),
    re.compile(r"LLM engine \(v([^)\s]+)\)"),
    re.compile(r"\bversion (\d+\.\d+\.\d+[\w.+]*)\s*$"),
)
BANNER_MODEL = (re.compile(r"serving model (\S+)"), re.compile(r"\bmodel {3}(\S+)\s*$"))
ARGS = re.compile(r"non-default args: (\{.*)")
CONFIG = re.compile(r"with config: (.*)")
USING_LEN = re.compile(r"Using max model len (\d+)")
ARCH = re.compile(r"Resolved architecture: (\w+)")
MODE = re.compile(r"Mamba cache mode is set to '(\w+)'")
PREFIX_OFF = re.compile(r"(?:disabling prefix caching|prefix caching: disabling)")
KV_DTYPE_LINE = re.compile(r"Using (\w+) data type to store kv cache")
#: the token budget the start runs with (vllm/config/scheduler.py), and the GDN prefill kernel it picked (0.33's
#: qwen_gdn_linear_attn.py ``_log_gdn_backend_decision``; gdn_linear_attn.py before): what the engine's defaults
#: for the GPU gave, where the flags left them (hybridplan/engines/vllm/defaults.py)
CHUNKED = re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)")
GDN_KERNEL = re.compile(r"Using (FlashInfer|Triton/FLA) GDN prefill kernel")
#: the GPU as the lines name it, for the block unit (hybridplan/engines/vllm/blocks.py ``compute_capability``): its
#: compute capability (SymmMemCommunicator's warning, FlashInfer's JIT arch), else its name (a fused-MoE config
#: file, device_name=NVIDIA_H200)
CAPABILITY = (re.compile(r"Device capability (\d+)\.(\d+)"), re.compile(r"\barch=sm_?(\d+?)(\d)a?\b"))
DEVICE_NAME = re.compile(r"device_name=(NVIDIA_[A-Za-z0-9_-]+?)(?:,|\.json)")
#: the GDN prefill kernel a start runs (0.33.0: vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py
#: ``_log_gdn_backend_decision``, "Using FlashInfer GDN prefill kernel (requested=auto, head_k_dim=128).")
GDN_KERNEL = re.compile(r"Using (FlashInfer|CuteDSL|AITER FlyDSL|Triton/FLA|SYCL|CPU) GDN prefill kernel")
#: engine-config fields (``VllmConfig.__str__``), as ``name=value``
CONFIG_FIELDS = {
    "model": r"\bmodel='([^']*)'",
    "tensor_parallel_size": r"\btensor_parallel_size=(\d+)",
    "pipeline_parallel_size": r"\bpipeline_parallel_size=(\d+)",
    "max_seq_len": r"\bmax_seq_len=(\d+)",
    "dtype": r"\bdtype=(?:torch\.)?(\w+)",
    "kv_cache_dtype": r"\bkv_cache_dtype=(\w+)",
    "enable_prefix_caching": r"\benable_prefix_caching=(True|False)",
    "quantization": r"\bquantization=(\w+)",
    "num_spec_tokens": r"\bnum_spec_tokens=(\d+)",
    "enforce_eager": r"\benforce_eager=(True|False)",
    # ``SpeculativeConfig.__repr__``: method, model and num_spec_tokens, the method as normalised
    "speculative_method": r"speculative_config=SpeculativeConfig\(method='(\w+)'",
    "speculative_model": r"speculative_config=SpeculativeConfig\(method='\w+', model='([^']*)'",
}

# --- figures -----------------------------------------------------------------------------------------
SSM_DTYPE = re.compile(r"Updating mamba_ssm_cache_dtype to '(\w+)'")
BLOCK = re.compile(r"Setting attention block size to (\d+) tokens")
PADDING = re.compile(r"Padding mamba page size by ([\d.]+)%")
PAD_LAYERS = re.compile(r"Add (\d+) padding layers, may waste at most ([\d.]+)% KV cache memory")
AVAILABLE = re.compile(r"Available KV cache memory: (-?[\d.]+) GiB")
LOADED = re.compile(r"Model loading took ([\d.]+) GiB")
TOKENS = re.compile(r"KV cache size: ([\d,]+) tokens")
CONC = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
SEQS = re.compile(r"max_num_seqs \((\d+)\) exceeds available Mamba cache blocks \((\d+)\)")
CAPPED = re.compile(
    r"Capping cudagraph capture sizes from max (\d+) to (\d+) to fit Mamba cache blocks "
    r"\((\d+) blocks available\)"
)
ONE_REQUEST = re.compile(
    r"To serve at least one request with the models?'s max seq len \((\d+)\), \(([\d.]+) GiB "
    r"KV cache is needed, which is larger than the available KV cache memory \(([\d.]+) GiB\)"
)
#: the exception a start ended with (its last line, ``NotImplementedError: Pipeline parallelism is not supported …``)
REFUSED = re.compile(r"(?:^|\s)([A-Z]\w*Error): (.+?)\s*$")
#: figures the log may show that hybridplan does not predict: pattern, figure, reason
NOT_MODELLED = (
    (
        re.compile(r"Estimated CUDA graph memory: ([\d.]+) GiB"),
        "CUDA graph estimate (GiB)",
        "CUDA-graph memory is profiled on the GPU; hybridplan takes it in --overhead",
    ),
    (
        re.compile(r"CUDA graph pool memory: ([\d.]+) GiB \(actual\)"),
        "CUDA graph pool (GiB)",
        "CUDA-graph memory is profiled on the GPU; hybridplan takes it in --overhead",
    ),
    (
        re.compile(r"Graph capturing finished in \d+ secs?, took (-?[\d.]+) GiB"),
        "CUDA graph capture (GiB)",
        "CUDA-graph memory is profiled on the GPU; hybridplan takes it in --overhead",
    ),
    (
        re.compile(r"Free memory on device \(([^)]*)\) on startup is less than desired"),
        "free memory at start",
        "other processes' use of the GPU is not known before the start",
    ),
    (
        re.compile(r"Auto-fit max_model_len: reduced from \d+ to (\d+)"),
        "auto-fit max_model_len",
        "--max-model-len auto is not modelled: give the context",
    ),
)
FIGURE_PATTERNS = (SSM_DTYPE, BLOCK, PADDING, PAD_LAYERS, AVAILABLE, TOKENS, CONC, SEQS, CAPPED, ONE_REQUEST, REFUSED)
#: the figures in the order a start prints them: the configuration (vllm/model_executor/models/config.py), the
#: memory profile (gpu_worker.py, kv_cache_utils.py), the capacity last; a figure printed again after the capacity
#: opens the next of several runs pasted without their banners (``logread.Log.starts``)
FIGURE_STAGES = ((SSM_DTYPE, BLOCK, PADDING), (PAD_LAYERS, AVAILABLE), (TOKENS, CONC, SEQS, CAPPED, ONE_REQUEST))
#: the lines a start-up prints once each (the API server's banner, its arguments, the engine core's config): one
#: printed again opens the next start in the same file (``logread.Log.starts``)
OPENERS = (
    re.compile(r"vLLM (?:API )?server version"),
    re.compile(r"non-default args: \{"),
    re.compile(r"Initializing a V[01] LLM engine"),
)


def present(log: Log) -> bool:
    """Does the log hold a figure this module checks?"""
    return any(
        log.has(p) for p in (SSM_DTYPE, BLOCK, PADDING, PAD_LAYERS, TOKENS, CONC, SEQS, CAPPED, ONE_REQUEST)
    ) or (_refusal(log) is not None and any(log.has(p) for p in OPENERS))


def _refusal(log: Log) -> Found | None:
    """The error a start was refused with, where it is not a figure read on its own (the max_num_seqs and
    one-request refusals are)."""
    f = log.last(REFUSED)
    if f is None or SEQS.search(f[2]) or "To serve at least one request" in f[2]:
        return None
    return f


def _refusal_row(refused: Found, ours: str | None, notes: list[str]) -> Row:
    """The start the engine refused beside hybridplan's verdict for the same settings: the same refusal when
    hybridplan's reason quotes the engine's message."""
    notes.append(f"the engine refused the start ({refused.source}): {refused[1]}: {refused[2]}")
    if ours is None:
        return Row(ENGINE, "start", "refused", "starts")
    notes.append(f"hybridplan refuses it: {ours}")
    return Row(ENGINE, "start", "refused", "refused" if refused[2].rstrip(".") in ours else "refused, another reason")


def _args(log: Log) -> tuple[dict, Found | None]:
    """``non-default args: {…}`` (the last), as a dict; a line cut short keeps the pairs it holds whole."""
    found = log.last(ARGS)
    if found is None:
        return {}, None
    text = found[1]
    try:
        value = literal(text)
        if isinstance(value, dict):
            return value, found
    except (ValueError, SyntaxError):
        pass
    pairs = re.findall(
        r"'(\w+)': ('(?:[^'\\]|\\.)*'|\"[^\"]*\"|True|False|None|-?[\d.e+]+|\{[^{}]*\}|\[[^\[\]]*\])", text
    )
    return {k: literal(v) for k, v in pairs}, found


def _config(log: Log) -> tuple[dict, Found | None]:
    found = log.last(CONFIG)
    if found is None:
        return {}, None
    out = {}
    for name, pattern in CONFIG_FIELDS.items():
        m = re.search(pattern, found[1])
        if m:
            out[name] = literal(m.group(1)) if m.group(1) not in ("auto",) else "auto"
    return out, found


def _spec_flag(text: str) -> dict:
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError:
        raise PlanError(f"--speculative-config is not valid JSON: {text}") from None
    if not isinstance(cfg, dict):
        raise PlanError("--speculative-config must be a JSON object")
    return cfg


def read_settings(log: Log, given: LogGiven) -> Settings:
    """What the run was started with: flags, then the engine-config line, then ``non-default args``, then the
    other lines that state a setting."""
    s = Settings(ENGINE)
    for name, value in (
        ("version", given.vllm_version),
        ("model", given.model),
        ("tensor_parallel_size", given.tp),
        ("max_model_len", given.ctx),
        ("mamba_cache_mode", given.mode),
        ("kv_cache_memory_bytes", given.kv_budget),
        ("num_speculative_tokens", given.spec_tokens),
        ("max_num_seqs", given.max_num_seqs),
        ("dtype", given.dtype),
        ("mamba_cache_dtype", given.conv_dtype),
        ("mamba_ssm_cache_dtype", given.ssm_dtype),
        ("kv_cache_dtype", given.kv_dtype),
        ("gpu", given.gpu),
    ):
        s.put(name, value, "flag")
    s.put("block_size", given.block_size, "flag")
    if given.speculative_config is not None:  # --speculative-config, as fit reads it
        cfg = _spec_flag(given.speculative_config)
        for name, key in (
            ("num_speculative_tokens", "num_speculative_tokens"),
            ("speculative_method", "method"),
            ("speculative_model", "model"),
        ):
            s.put(name, cfg.get(key), "flag")
    for pattern in BANNER:
        if (f := log.last(pattern)) is not None:
            s.put("version", f[1], f.source)
    config, cfg_line = _config(log)
    args, args_line = _args(log)
    cfg_src = cfg_line.source if cfg_line else ""
    args_src = args_line.source if args_line else ""
    renames = {"max_seq_len": "max_model_len", "num_spec_tokens": "num_speculative_tokens"}
    for name, value in config.items():
        s.put(renames.get(name, name), value, cfg_src)
    if (f := log.last(USING_LEN)) is not None:
        s.put("max_model_len", int(f[1]), f.source)
    spec_cfg = args.get("speculative_config")
    if isinstance(spec_cfg, str):  # passed as JSON text
        try:
            spec_cfg = json.loads(spec_cfg)
        except json.JSONDecodeError:
            spec_cfg = None
    if isinstance(spec_cfg, dict):
        s.put("num_speculative_tokens", spec_cfg.get("num_speculative_tokens"), args_src)
        s.put("speculative_method", spec_cfg.get("method"), args_src)
        s.put("speculative_model", spec_cfg.get("model"), args_src)
    for name in (
        "model",
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "max_model_len",
        "dtype",
        "kv_cache_dtype",
        "mamba_cache_dtype",
        "mamba_ssm_cache_dtype",
        "enable_prefix_caching",
        "mamba_cache_mode",
        "block_size",
        "max_num_seqs",
        "gpu_memory_utilization",
        "kv_cache_memory_bytes",
        "enforce_eager",
        "quantization",
        "max_num_batched_tokens",
        "gdn_prefill_backend",
    ):
        s.put(name, args.get(name), args_src)
    if (f := log.last(CHUNKED)) is not None:
        s.put("max_num_batched_tokens", int(f[1]), f.source)
    if (f := log.last(GDN_KERNEL)) is not None:
        s.put("gdn_prefill_backend", "flashinfer" if f[1] == "FlashInfer" else "triton", f.source)
    for pattern in BANNER_MODEL:
        if (f := log.last(pattern)) is not None:
            s.put("model", f[1], f.source)
    if (f := log.last(PREFIX_OFF)) is not None:
        s.put("enable_prefix_caching", False, f.source)
    if (f := log.last(KV_DTYPE_LINE)) is not None:
        s.put("kv_cache_dtype", f[1], f.source)
    served = [f for f in log.all(ARCH) if not DRAFT_ARCH.search(f[1])]  # the drafter resolves its own
    if served:
        s.put("architecture", served[-1][1], served[-1].source)
    return s


def _mode(log: Log, s: Settings, rel: Release, spec, spec_tokens: int, notes: list[str]) -> str:
    """The Mamba cache mode the run used: a flag; else the "Mamba cache mode is set to" line; else the
    mode asked in ``non-default args`` (none without prefix caching; `all` on a model without it as align;
    ignored from 0.33.0); else the release's choice for the prefix-caching setting."""
    source = s.sources.get("mamba_cache_mode")
    asked = s.get("mamba_cache_mode")
    prefix = s.get("enable_prefix_caching")
    if source == "flag":
        return rel.modes_for(spec, str(asked))[0]
    if (f := log.last(MODE)) is not None:
        s.sources["mamba_cache_mode"], s.values["mamba_cache_mode"] = f.source, f[1]
        return f[1]
    if asked is not None:
        if rel.at_least("0.33.0") or rel.before("0.15.0"):
            notes.append(f"--mamba-cache-mode {asked} has no effect in vLLM {rel.version}")
        elif not (prefix if prefix is not None else rel.prefix_caching_default(spec)):
            # MambaModelConfig (vllm/model_executor/models/config.py) sets the mode to none when prefix caching is
            # off, as it is with no flag for hybrids until 0.27.1
            s.values["mamba_cache_mode"], s.sources["mamba_cache_mode"] = (
                "none",
                (f"{asked} asked ({source}), none with prefix caching off (vLLM {rel.version}'s MambaModelConfig)"),
            )
            return "none"
        else:
            run = rel.modes_for(spec, str(asked))[0]
            if run != asked:  # `all` on a class without SupportsMambaPrefixCaching
                s.values["mamba_cache_mode"], s.sources["mamba_cache_mode"] = (
                    run,
                    (
                        f"{asked} asked ({source}), {run} for {spec.architecture} (vLLM {rel.version}'s "
                        "MambaModelConfig)"
                    ),
                )
            return run
    mode = rel.mode(spec, spec_tokens, None if prefix is None else bool(prefix))
    s.values["mamba_cache_mode"], s.sources["mamba_cache_mode"] = (
        mode,
        (f"vLLM {rel.version}'s choice with prefix caching {'on' if mode != 'none' else 'off'}"),
    )
    return mode


def _checkpoint_kv(s: Settings, spec, rel: Release, given: str | None) -> None:
    """The KV cache dtype the checkpoint's quantization imposes (hybridplan/engines/vllm/dtypes.py), shown as the
    setting with its reason: auto (or the flag it overrides) resolved by the checkpoint."""
    from hybridplan.engines.vllm.dtypes import checkpoint_kv

    forced = checkpoint_kv(spec, rel, None if given is None else str(given).lower())
    if forced is not None:
        was = s.get("kv_cache_dtype") or "auto"
        s.values["kv_cache_dtype"] = forced[0]
        s.sources["kv_cache_dtype"] = f"{was} resolved to {forced[0]} by {forced[1]}"


def _dtype(value) -> str | None:
    return None if value in (None, "auto") else str(value)


#: architectures vLLM resolves for a speculative draft (MTP layers, EAGLE heads, DFlash), not the served model's
DRAFT_ARCH = re.compile(
    r"(?:MTP|Eagle\w*|EagleLlama\w*|DFlash\w*|Medusa\w*|Mlp\w*Speculator)$|^(?:Eagle|DFlash|Medusa)", re.IGNORECASE
)


def _model(s: Settings, notes: list[str]):
    """The model: --model, checked against the architecture the log resolved; else the log's own model
    reference, found among the shipped specs or in the Hugging Face cache (``loader.load_logged_model``)."""
    from hybridplan.loader import check_architecture, load_logged_model, load_model

    ref = s.get("model")
    arch = s.get("architecture")
    arch = str(arch) if arch is not None else None
    if ref is None:
        raise PlanError("the log does not name the model: pass --model")
    if s.sources["model"] == "flag":
        return check_architecture(load_model(str(ref)), arch, str(ref))
    spec, how = load_logged_model(str(ref), arch)
    notes.append(f"model {ref}: {spec.name}, {how}")
    return spec


#: the note that says a draft could not be read, which leaves the KV figures unchecked
DRAFT_UNREAD = "the speculative draft model"


def _speculative(s: Settings, spec, rel: Release, spec_tokens: int, notes: list[str]) -> Speculative:
    """The speculative method and draft the log names (``speculative_config``), read as
    ``speculative_from_vllm`` reads ``--speculative-config``; a bare token count (a flag, or a log that names no
    method) stays a count. A draft that cannot be read is said in the notes."""
    from hybridplan.engines.vllm.speculative import speculative_from_vllm

    method = s.get("speculative_method")
    if method is None or not spec_tokens:
        if spec_tokens:
            notes.append(
                f"{spec_tokens} speculative tokens with no method named (--spec-tokens alone, or a log "
                "that names none): not modelled beyond the count: an MTP layer's or a draft model's KV "
                "and weights are left out (give --speculative-config)"
            )
        return Speculative(num_tokens=spec_tokens) if spec_tokens else Speculative()
    model = s.get("speculative_model")
    cfg = {"method": str(method), "num_speculative_tokens": spec_tokens}
    if model is not None:
        cfg["model"] = str(model)
    try:
        return speculative_from_vllm(cfg, spec, rel)
    except PlanError as exc:
        notes.append(f"{DRAFT_UNREAD} ({method}, {model}) could not be read: {exc}")
        return Speculative(method=None, num_tokens=spec_tokens)


def _positive(value: object) -> int | None:
    return value if isinstance(value, int) and value > 0 else None


def _gdn(value: object) -> str | None:
    """A GDN backend as the log names it, where hybridplan models it (else the resolution for the GPU)."""
    return value if value in ("flashinfer", "triton") else None


def _capability(log: Log, s: Settings) -> tuple[int, int] | None:
    """The compute capability the log states, put among the settings with its line."""
    from hybridplan.engines.vllm.blocks import COMPUTE_CAPABILITY
    from hybridplan.gpus import gpu

    if s.sources.get("gpu") == "flag":  # --gpu-type names the GPU: its capability, over any line
        cc = COMPUTE_CAPABILITY.get(str(s.get("gpu")))
        if cc is not None:
            s.put("compute_capability", f"{cc[0]}.{cc[1]}", f"the {s.get('gpu')}'s (--gpu-type)")
        return cc
    cc, f = None, None
    for pattern in CAPABILITY:
        if (f := log.last(pattern)) is not None:
            cc = (int(f[1]), int(f[2]))
            break
    if cc is None and (f := log.last(DEVICE_NAME)) is not None:
        try:
            cc = COMPUTE_CAPABILITY.get(gpu(f[1].replace("_", " ")).key)
        except PlanError:
            cc = None
    if cc is not None and f is not None:
        s.put("compute_capability", f"{cc[0]}.{cc[1]}", f.source)
    return cc


#: vLLM's GDN kernel names → the backends hybridplan sizes: only FlashInfer plans the 0.33 prefill checkpoints
#: (vllm/v1/attention/backends/gdn_attn.py ``plan_flashinfer_checkpoints``); every other kernel pages as Triton
_GDN_KERNELS = {"FlashInfer": "flashinfer"}


def _gdn_backend(log: Log, s: Settings, rel: Release, cc: tuple[int, int] | None, spec) -> str | None:
    """The GDN prefill backend the start ran: the kernel the log names; else the one its args ask for (not
    auto); else None: auto, which VllmSettings resolves for the log's compute capability as the release does
    (hybridplan/engines/vllm/defaults.py)."""
    if not any(m.kind == "gdn" for m in spec.recurrent) or rel.before("0.33.0"):
        return None
    if (f := log.last(GDN_KERNEL)) is not None:
        backend = _GDN_KERNELS.get(f[1], "triton")
        s.values["gdn_prefill_backend"] = backend
        s.sources["gdn_prefill_backend"] = f.source if f[1] in _GDN_KERNELS else f"{f.source} (pages as Triton)"
        return backend
    asked = s.get("gdn_prefill_backend")
    if asked is not None and str(asked).lower() != "auto":
        return "flashinfer" if str(asked).lower() == "flashinfer" else "triton"
    return None


def scenario(log: Log, s: Settings, notes: list[str], rel: Release | None = None) -> tuple[Scenario, Release, str]:
    """The scenario, release and Mamba cache mode the settings describe (``rel``: the release whose rules a
    build between two releases is checked with, ``neighbours``)."""
    from hybridplan.engines.vllm.settings import VllmSettings

    version = s.get("version")
    rel = rel or release(str(version) if version is not None and not untagged(str(version)) else None)
    if version is None:
        notes.append(f"the log does not say the vLLM version: rules of {rel.version} used")
        s.put("version", rel.version, "default (newest modelled)")
    elif untagged(str(version)):
        notes.append(
            f"vLLM {version} is a source build whose version names no release (setuptools-scm's fallback "
            f"without a git tag): rules of {rel.version} used; pass --vllm-version with the release it "
            "follows"
        )
        s.values["version"] = f"{version} (checked as {rel.version})"
    spec = _model(s, notes)
    rel.check_served(spec)
    notes.extend(rel.caveats(spec))
    tp = int(s.get("tensor_parallel_size") or 1)
    ctx = s.get("max_model_len")
    if not isinstance(ctx, int) or ctx <= 0:  # "auto", -1, or not in the log
        conc = log.last(CONC)
        ctx = int(conc[1].replace(",", "")) if conc else default_ctx(spec)
        s.put("max_model_len", ctx, conc.source if conc else "default (the model's maximum)")
    spec_tokens = int(s.get("num_speculative_tokens") or 0)
    dtypes = DtypeChoice(
        _dtype(s.get("dtype")),
        _dtype(s.get("mamba_cache_dtype")),
        _dtype(s.get("mamba_ssm_cache_dtype")),
        _dtype(s.get("kv_cache_dtype")),
    )
    _checkpoint_kv(s, spec, rel, dtypes.kv)
    mode = _mode(log, s, rel, spec, spec_tokens, notes)
    sp = _speculative(s, spec, rel, spec_tokens, notes)
    cc = _capability(log, s)
    gdn = _gdn_backend(log, s, rel, cc, spec)
    sc = Scenario(
        spec,
        ctx=int(ctx),
        tp=tp,
        dtypes=dtypes,
        spec_tokens=spec_tokens,
        speculative=sp,
        engine=ENGINE,
        vllm=VllmSettings(
            release=rel,
            block_size=s.get("block_size"),
            max_num_seqs=s.get("max_num_seqs"),
            enforce_eager=bool(s.get("enforce_eager")),
            compute_capability=cc,
            gdn_backend=gdn,
        ),
        chunk=_positive(s.get("max_num_batched_tokens")),
        allow_long_context=True,
    )
    return sc, rel, mode


# --- the figures ----------------------------------------------------------------------------------------


def _range_from_gib(value: float, per_block: int) -> range:
    """The block counts a budget printed to 0.01 GiB allows."""
    lo, hi = (value - 0.005) * GiB, (value + 0.005) * GiB
    return range(max(floor(lo / per_block), 0), max(floor(hi / per_block), 0) + 1)


def _range_from_concurrency(value: float, per_request: int) -> range:
    return range(max(ceil((value - 0.005) * per_request), 0), floor((value + 0.005) * per_request) + 1)


def _figures(
    cap: Capacity, ctx: int, conc: Found | None, tokens: Found | None, seqs: Found | None, capped: Found | None
) -> list[Row]:
    rows = []
    if conc is not None:
        rows.append(Row(ENGINE, f"max concurrency ({ctx:,} tokens)", conc[2], f"{cap.max_concurrency:.2f}"))
    if tokens is not None:
        rows.append(Row(ENGINE, "KV cache size (tokens)", tokens[1], f"{cap.kv_tokens:,}"))
    if seqs is not None:
        rows.append(Row(ENGINE, f"Mamba cache blocks (max_num_seqs {seqs[1]} refused)", seqs[2], str(cap.num_blocks)))
    if capped is not None:
        rows.append(Row(ENGINE, "Mamba cache blocks (CUDA-graph sizes capped)", capped[3], str(cap.num_blocks)))
    return rows


def capacity_rows(log: Log, sc: Scenario, mode: str, s: Settings, notes: list[str]) -> list[Row]:
    """The figures that follow from the number of blocks: that number is the budget over the bytes of a block,
    and a budget the log prints to 0.01 GiB leaves a few counts possible; the count that reproduces the
    logged figures is taken, and said."""
    conc, tokens, seqs, capped = (log.last(p) for p in (CONC, TOKENS, SEQS, CAPPED))
    if not any((conc, tokens, seqs, capped)):
        return []
    probe = capacity(sc, mode, 1 << 50)
    per_block, per_request = probe.bytes_per_block, probe.blocks_per_request
    exact = s.get("kv_cache_memory_bytes")
    avail = log.last(AVAILABLE)
    if exact is not None:
        counts, how = range(int(exact) // per_block, int(exact) // per_block + 1), "the KV budget given"
    elif avail is not None and float(avail[1]) > 0:
        counts, how = _range_from_gib(float(avail[1]), per_block), f"the logged budget ({avail[1]} GiB ± 0.005)"
        s.put("available_kv_cache_memory", f"{avail[1]} GiB", avail.source)
    elif seqs is not None or capped is not None:
        blocks = int((seqs or capped)[2] if seqs else capped[3])
        counts, how = range(blocks, blocks + 1), "the logged Mamba cache blocks"
        s.put("num_blocks", blocks, (seqs or capped).source)
        seqs = capped = None
    elif conc is not None:
        counts, how = _range_from_concurrency(float(conc[2]), per_request), "the logged concurrency"
        s.put("num_blocks", "from the concurrency", conc.source)
        if not counts:  # at fewer than 100 blocks a request, 0.01x may hold no whole count: take the nearest
            near = max(round(float(conc[2]) * per_request), 0)
            notes.append(
                f"no whole block count gives the logged concurrency {conc[2]}x at {per_request:,} blocks a "
                f"request for these settings: {near:,} blocks, the nearest, are checked"
            )
            counts = range(near, near + 1)
    else:
        notes.append("the log gives no KV budget, concurrency or block count: the KV token figure is not checked")
        return []
    chosen = None
    for n in counts[:100_000]:
        cap = capacity(sc, mode, n * per_block)
        if all(r.ok for r in _figures(cap, sc.ctx, conc, tokens, seqs, capped)):
            chosen = cap
            break
    if chosen is None:
        chosen = capacity(sc, mode, counts[len(counts) // 2] * per_block)
        notes.append(
            f"no block count that {how} allows ({counts[0]:,} to {counts[-1]:,} blocks of {per_block:,} B) "
            "reproduces the logged figures"
        )
    elif len(counts) > 1:
        notes.append(
            f"{chosen.num_blocks:,} blocks of {per_block:,} B: the count of the {len(counts)} that {how} "
            f"allows ({counts[0]:,} to {counts[-1]:,}) that reproduces the logged figures"
        )
    return _figures(chosen, sc.ctx, conc, tokens, seqs, capped)


def check(log: Log, given: LogGiven) -> LogCheck:
    """The log's figures beside the prediction for the settings it states (flags override them); where a figure
    is off, the settings assumed and the one that would reconcile the log (``_hints``)."""
    result = _releases(log, given)
    if any(not r.ok for r in result.rows):
        result = replace(result, notes=(*result.notes, *_hints(log, given, result)))
    return result


#: the tensor-parallel sizes tried where a log's figures do not reconcile
HINT_TPS = (1, 2, 4, 8)


def _hints(log: Log, given: LogGiven, result: LogCheck) -> tuple[str, ...]:
    """Where a figure is off: the TP and release assumed (and where from), and which other TP (1, 2, 4, 8), or
    which release (the newest of each minor, where the log does not say it), reconciles every figure."""
    from msgspec.structs import replace as with_

    from hybridplan.engines.vllm.releases import KNOWN

    def setting(name: str) -> tuple[str, str]:
        x = next((x for x in result.settings if x.name == name), None)
        return (
            (x.value, x.source) if x is not None else ("1", "default") if name == "tensor_parallel_size" else ("?", "")
        )

    def reconciles(g: LogGiven) -> bool:
        try:
            c = _releases(log, g)
        except PlanError:
            return False
        return bool(c.rows) and all(r.ok for r in c.rows)

    (tp, tp_from), (version, version_from) = setting("tensor_parallel_size"), setting("version")
    out = [
        f"the figures do not reconcile with the settings assumed: TP {tp} ({tp_from}), vLLM {version} ({version_from})"
    ]
    tps = [] if tp_from.startswith("line") else [n for n in HINT_TPS if str(n) != tp and reconciles(with_(given, tp=n))]
    if tps:
        out.append(
            f"TP {' or '.join(map(str, tps))} reconciles every figure: the log may leave its TP out "
            f"(pass --tp {tps[0]})"
        )
    if not version_from.startswith("line"):  # the log does not say its release: try the newest of each minor
        newest = {r.minor: r for r in KNOWN}
        hits = [
            r.version
            for r in newest.values()
            if r.version != version and reconciles(with_(given, vllm_version=r.version))
        ]
        if hits:
            out.append(
                f"vLLM {', '.join(hits)} reconcile{'s' if len(hits) == 1 else ''} every figure: pass "
                f"--vllm-version with the release the log ran"
            )
    tried = [what for what, src in (("TP", tp_from), ("release", version_from)) if not src.startswith("line")]
    if len(out) == 1 and tried:
        out.append(
            f"no other {' or '.join(tried)} reconciles them either (TP {', '.join(map(str, HINT_TPS))}; "
            "each minor's newest release)"
        )
    return tuple(out)


def _releases(log: Log, given: LogGiven) -> LogCheck:
    """The log checked with the rules of its release. A build
    between two releases (``releases.neighbours``) is checked with the rules of each; the one that reproduces
    the log (the most figures, the first on a tie) is kept and said, and the model is refused only when
    neither release serves it."""
    from hybridplan.engines.vllm.releases import neighbours

    version = read_settings(log, given).get("version")
    candidates = neighbours(None if version is None else str(version))
    if len(candidates) == 1:
        return _check(log, given, None)
    tried: list[tuple[Release, LogCheck]] = []
    refusals: list[str] = []
    for rel in candidates:
        try:
            tried.append((rel, _check(log, given, rel)))
        except NotServed as exc:
            refusals.append(str(exc))
    if not tried:
        raise NotServed(
            f"vLLM {version} is a build between {' and '.join(r.version for r in sorted(candidates))}, "
            f"and neither serves the model: " + "; ".join(refusals)
        )
    rel, best = max(tried, key=lambda t: (sum(r.ok for r in t[1].rows), -tried.index(t)))
    others = [(r, c) for r, c in tried if r != rel]
    why = "; ".join(
        f"{r.version}'s: {sum(not x.ok for x in c.rows)} of {len(c.rows)} figures differ" for r, c in others
    ) or "; ".join(refusals)
    note = (
        f"vLLM {version} is a build between releases "
        f"{' and '.join(r.version for r in sorted(candidates))}: checked against both, {rel.version}'s rules "
        f"kept ({sum(x.ok for x in best.rows)} of {len(best.rows)} figures match; {why})"
    )
    settings = tuple(
        replace(x, value=f"{x.value} (checked as {rel.version})") if x.name == "version" else x for x in best.settings
    )
    return replace(best, settings=settings, notes=(note, *best.notes))


def _check(log: Log, given: LogGiven, rel: Release | None) -> LogCheck:
    """``check`` with one release's rules (None: the release the version names)."""
    notes: list[str] = []
    s = read_settings(log, given)
    refused = _refusal(log)
    pp = int(s.get("pipeline_parallel_size") or 1)
    sc, rel, mode = scenario(log, s, notes, rel)  # a model not found, a bad setting: one line, exit 2, as ever
    rows: list[Row] = []
    out: list[NotModelled] = []
    ours = None
    if (avail := log.last(AVAILABLE)) is not None and float(avail[1]) <= 0:
        # vllm/v1/core/kv_cache_utils.py ``check_enough_kv_cache_memory`` (every release modelled): nothing left
        # for the KV cache once the weights and activations are in (another process holds the GPU, or the
        # utilisation is too low)
        ours = (
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
            "initializing the engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for "
            f"more details. (the log's {avail.source}; vllm/v1/core/kv_cache_utils.py "
            "check_enough_kv_cache_memory)"
        )
    if pp > 1 and ours is None:
        from hybridplan.engines.vllm import parallel

        try:  # what vLLM refuses at start with pipeline stages (hybridplan/engines/vllm/parallel.py ``check``)
            parallel.check(replace(sc, pp=pp))
        except PlanError as exc:
            ours = str(exc)
    if refused is not None:
        rows.append(_refusal_row(refused, ours, notes))
        if ours is not None:
            return LogCheck(sc.spec.name, s.listed(), tuple(rows), (), tuple(notes))
    elif ours is not None:  # the log went on to print figures: it started
        rows.append(Row(ENGINE, "start", "starts", "refused"))
        notes.append(f"hybridplan refuses it: {ours}")
    if pp > 1:
        for p in FIGURE_PATTERNS:
            if p is not REFUSED and (f := log.last(p)) is not None:
                out.append(
                    NotModelled(
                        ENGINE,
                        p.pattern.split("(")[0].strip(),
                        f[1],
                        f"pipeline parallelism (PP {pp}) splits the layers over ranks",
                    )
                )
        return LogCheck(sc.spec.name, s.listed(), tuple(rows), tuple(out), tuple(notes))
    fp, lay = footprint(sc), layout(sc, mode)
    if (f := log.last(SSM_DTYPE)) is not None:
        rows.append(Row(ENGINE, "SSM cache dtype", f[1], fp.dtypes.ssm))
    if (f := log.last(BLOCK)) is not None:
        rows.append(Row(ENGINE, "attention block size", f[1], str(lay.block_size)))
    if (f := log.last(PADDING)) is not None:
        rows.append(Row(ENGINE, "mamba page padding %", f[1], f"{lay.padding_pct:.2f}"))
    probe = capacity(sc, mode, 1 << 50)
    logged_pads = {(int(f[1]), f[2]) for f in log.all(PAD_LAYERS)}
    if logged_pads:
        predicted = {(n, f"{pct:.2f}") for n, pct in probe.padding_layers}
        rows.append(Row(ENGINE, "padding layers (added, % wasted)", _pads(logged_pads), _pads(predicted)))
    if (f := log.last(ONE_REQUEST)) is not None:
        need = capacity(sc, mode, 1 << 50).request_bytes
        rows.append(
            Row(
                ENGINE,
                f"KV cache one {int(f[1]):,}-token request needs (GiB)",
                f[2],
                f"{round(need / GiB, 2)}" if rel.rounds_available_memory else f"{need / GiB:.2f}",
            )
        )
    if (f := log.last(SEQS)) is not None:
        rows.append(
            Row(
                ENGINE,
                f"max_num_seqs {f[1]} against {f[2]} Mamba cache blocks",
                "refused",
                _verdict(rel, int(f[1]), int(f[2]), sc.vllm.enforce_eager),
            )
        )
    if any(n.startswith(DRAFT_UNREAD) for n in notes):  # the draft's layers join the KV cache: not sized
        for p, figure in (
            (PAD_LAYERS, "padding layers"),
            (TOKENS, "KV cache size (tokens)"),
            (CONC, "max concurrency"),
        ):
            if (f := log.last(p)) is not None:
                out.append(
                    NotModelled(
                        ENGINE,
                        figure,
                        f[0] if p is PAD_LAYERS else f[1] if p is TOKENS else f[2],
                        "the speculative draft's layers join the KV cache, and its config could not "
                        "be read (give the draft as a shipped spec, a config path or a Hub id)",
                    )
                )
        rows = [r for r in rows if not r.figure.startswith("padding layers")]
    else:
        rows += capacity_rows(log, sc, mode, s, notes)
    for pattern, figure, why in NOT_MODELLED:
        if (f := log.last(pattern)) is not None:
            out.append(NotModelled(ENGINE, figure, f[1], why))
    estimates, unsized = weights_estimate(log, sc, s.get("quantization"))
    out += unsized
    return LogCheck(sc.spec.name, s.listed(), tuple(rows), tuple(out), tuple(notes), estimates)


def weights_estimate(
    log: Log, sc: Scenario, quantization: str | None
) -> tuple[tuple[Estimate, ...], list[NotModelled]]:
    """ "Model loading took" beside the weights counted for the log's model, TP and dtype."""
    from hybridplan.engines.vllm.dtypes import model_dtype
    from hybridplan.weights import weights

    f = log.last(LOADED)
    if f is None:
        return (), []
    if quantization not in (None, "None") and "quantization_config" not in sc.spec.facts.fields:
        return (), [
            NotModelled(
                ENGINE,
                "weights loaded (GiB)",
                f[1],
                f"{article(quantization)} {quantization} checkpoint of a spec whose "
                "config is not: pass the checkpoint's config.json as the model",
            )
        ]
    from hybridplan.engines.vllm.memory import drafter

    try:
        w = weights(sc.spec, sc.tp, model_dtype(sc.spec, sc.dtypes.dtype))
        draft = drafter(sc)  # loaded inside the same "Model loading took" (memory.py ``drafter``)
    except PlanError as exc:
        return (), [NotModelled(ENGINE, "weights loaded (GiB)", f[1], str(exc))]
    extra = draft.bytes if draft is not None else 0
    return (
        Estimate(
            ENGINE,
            "weights loaded (GiB)",
            float(f[1]),
            round((w.bytes_per_rank + extra) / GiB, 4),
            f"{w.source}: {w.params / 1e9:.2f}B parameters, {w.dtype}, one rank of TP {sc.tp}"
            + (f"; with the drafter's {extra / GiB:.2f} GiB ({draft.note})" if draft else ""),
        ),
    ), []


def _verdict(rel: Release, seqs: int, blocks: int, eager: bool) -> str:
    """What the release does with more sequences than Mamba cache blocks (``Release.max_num_seqs_check``)."""
    if seqs <= blocks or eager or rel.max_num_seqs_check == "none":
        return "starts"
    return "refused" if rel.max_num_seqs_check == "refuse" else "starts, CUDA graphs capped"


def _pads(pads: set[tuple[int, str]]) -> str:
    return "; ".join(f"{n}, {pct}%" for n, pct in sorted(pads)) or "none"
