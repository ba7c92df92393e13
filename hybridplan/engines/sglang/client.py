"""``sglang.bench_serving``'s random dataset: the lengths it draws for ``--random-input-len I --random-output-len O
--random-range-ratio R``.

sglang/bench_serving.py ``sample_random_requests`` (0.5.2–0.5.x), sglang/benchmark/datasets/common.py
``compute_random_lens`` (0.5.23): each request's prompt and output are drawn independently and uniformly from the
integers in [max(⌊X·R⌋, 1), X], X the flag's value. R defaults to 0.0, so by default a prompt is anything from
1 token to I (its mean about I/2), unlike ``vllm bench serve``'s exact lengths; R = 1 gives exactly I and O. An R
above 1 leaves no integer to draw (numpy's ``randint`` fails on a low above the high), so hybridplan refuses it.
"""

from __future__ import annotations

from hybridplan.errors import PlanError


def length_range(length: int, ratio: float) -> tuple[int, int]:
    """The lowest and highest length the client draws for a flag value of ``length`` at ``ratio``."""
    if not 0.0 <= ratio <= 1.0:
        raise PlanError(
            f"--random-range-ratio {ratio:g}: sglang.bench_serving draws from [max(int(L*R), 1), L], empty for R above 1"
        )
    return max(int(length * ratio), 1), length
