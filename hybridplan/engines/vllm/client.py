"""``vllm bench serve``'s random dataset: the lengths it draws for ``--random-input-len I --random-output-len O
--random-range-ratio R``.

vllm/benchmarks/datasets.py ``RandomDataset`` (0.10.0–0.33.0; ``get_sampling_params`` from 0.11): each request's
prompt and output are drawn independently and uniformly from the integers in [⌊X·(1 − R)⌋, ⌈X·(1 + R)⌉], X the
flag's value (the prompt's less the tokenizer's special tokens, which hybridplan does not count), the output at
least 1. R defaults to 0.0 (every request of exactly I and O), and R outside [0, 1) is refused with
"range_ratio must be in [0, 1)."
"""

from __future__ import annotations

from math import ceil, floor

from hybridplan.errors import PlanError


def length_range(length: int, ratio: float) -> tuple[int, int]:
    """The lowest and highest length the client draws for a flag value of ``length`` at ``ratio``."""
    if not 0.0 <= ratio < 1.0:
        raise PlanError(f"--random-range-ratio {ratio:g}: vllm bench serve refuses it (range_ratio must be in [0, 1).)")
    return max(floor(length * (1 - ratio)), 1), max(ceil(length * (1 + ratio)), 1)
