"""The per-SM limits of the five arches the kernels are compiled for, and the occupancy a compiled kernel gets
from them (no triton import: the interpreter tests import this beside their own kernels)."""

from __future__ import annotations

ARCHES = (80, 89, 90, 100, 120)
#: per-SM limits by arch (NVIDIA CCCL, libcudacxx include/cuda/__device/arch_traits.h ``traits<id::sm_XX>``):
#: shared memory a multiprocessor has, resident blocks, resident threads; every one of these arches also has
#: 64K 32-bit registers a multiprocessor, 255 a thread, and reserves 1 KiB of shared memory for each block
LIMITS = {
    80: (164 * 1024, 32, 2048),
    89: (100 * 1024, 24, 1536),
    90: (228 * 1024, 32, 2048),
    100: (228 * 1024, 32, 2048),
    120: (100 * 1024, 32, 1536),
}
REGISTERS_PER_SM, RESERVED_SHARED = 64 * 1024, 1024


def occupancy(row: dict, arch: int) -> tuple[int, str]:
    """Resident blocks a multiprocessor holds for one compiled kernel, and what bounds them: registers are
    allocated per warp in units of 256 (a thread's count rounded up to 8), shared memory per block with the
    1 KiB the driver reserves."""
    shared_sm, max_blocks, max_threads = LIMITS[arch]
    threads = 32 * row["num_warps"]
    regs_per_warp = -(-row["regs"] * 32 // 256) * 256
    bounds = {
        "blocks": max_blocks,
        "threads": max_threads // threads,
        "registers": REGISTERS_PER_SM // (regs_per_warp * row["num_warps"]),
        "shared memory": shared_sm // (row["shared"] + RESERVED_SHARED),
    }
    bound = min(bounds, key=bounds.get)
    return bounds[bound], bound
