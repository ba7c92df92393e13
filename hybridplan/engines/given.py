"""What `check-log`'s flags say (``LogGiven``), apart from the engines' verbs so that only check-log builds it;
``hybridplan.engines.LogGiven`` names it."""

from __future__ import annotations

from msgspec import Struct


class LogGiven(Struct, frozen=True):
    """What `check-log`'s flags say, overriding what the log says."""

    model: str | None = None
    tp: int | None = None
    vllm_version: str | None = None
    sglang_version: str | None = None
    mode: str | None = None
    ctx: int | None = None
    kv_budget: int | None = None
    spec_tokens: int | None = None
    max_num_seqs: int | None = None
    max_running_requests: int | None = None
    mem_fraction_static: float | None = None
    #: the dtype flags (model, conv state, SSM state, KV), for a log whose excerpt does not print them
    dtype: str | None = None
    conv_dtype: str | None = None
    ssm_dtype: str | None = None
    kv_dtype: str | None = None
    #: the GPU by its hybridplan/gpus.py key (``--gpu-type``), for a log whose lines do not name it
    gpu: str | None = None
    #: the flags `fit` takes beside, as the user gives them (issue 28 item 7): vLLM --speculative-config (JSON)
    #: and --block-size; SGLang --max-mamba-cache-size, --mamba-full-memory-ratio, the radix strategy
    #: (--mamba-radix-cache-strategy / --mamba-scheduler-strategy, "off" for --disable-radix-cache), --page-size
    #: and the speculative algorithm with its draft, top-k and draft tokens
    speculative_config: str | None = None
    block_size: int | None = None
    max_mamba_cache_size: int | None = None
    mamba_full_memory_ratio: float | None = None
    radix: str | None = None
    page_size: int | None = None
    spec_method: str | None = None
    spec_draft: str | None = None
    eagle_topk: int | None = None
    draft_tokens: int | None = None
