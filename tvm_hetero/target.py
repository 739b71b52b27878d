"""What tvm_hetero knows of a device's target: the fp32 lanes and vector registers of an LLVM
CPU target's widest vector unit (:func:`vector_lanes`) and its data cache sizes
(:func:`cpu_traits`); an NVIDIA GPU's limits by architecture (:data:`CUDA_LIMITS`,
:func:`cuda_target`). Preparation (:class:`~tvm_hetero.prepare.PrepareConfig`: the lanes of
channel padding and of the blocked layout), the rules (their tiles) and the GPU census read
them here.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass


def vector_lanes(target) -> tuple[int, int]:
    """``(fp32 lanes, vector registers)`` of `target`'s widest vector unit (LLVM CPU targets),
    from its features (its ``mcpu``). Not TVM's ``llvm_get_vector_width``: it answers 512 bits
    for ``{"kind": "llvm", "mcpu": "x86-64"}`` and ``haswell`` targets alike."""
    from tvm.target.codegen import llvm_cpu_has_features

    try:
        if llvm_cpu_has_features(["avx512f"], target):
            return 16, 32
        if llvm_cpu_has_features(["avx2"], target):
            return 8, 16
    except Exception:  # noqa: BLE001 (a non-x86 LLVM target has no such features)
        pass
    return 4, 16


# Data cache sizes per core by the width of the vector unit (fp32 lanes): TVM's LLVM targets
# carry no cache attribute, so these are the defaults of each vector ISA's common cores, and
# the one place the rules read cache sizes from. AVX-512 (Skylake-SP to Sapphire Rapids, Zen 4):
# L1d 32-48 KiB, L2 1-2 MiB; AVX2 (Haswell to Zen 3): L1d 32 KiB, L2 256-512 KiB; narrower
# (SSE, NEON): the smallest of those.
CACHE_BYTES = {16: (32 << 10, 1 << 20), 8: (32 << 10, 256 << 10), 4: (32 << 10, 256 << 10)}


@dataclass(frozen=True)
class CpuTraits:
    """What the CPU rules size their tiles by, from an LLVM target (:func:`cpu_traits`).

    Attributes
    ----------
    lanes : int
        fp32 lanes of the widest vector unit (16 AVX-512, 8 AVX2, 4 otherwise).
    registers : int
        Vector registers of that unit (32 zmm with AVX-512, 16 ymm with AVX2, 16 otherwise).
    l1_bytes, l2_bytes : int
        Data cache sizes per core (`CACHE_BYTES` of the lanes).
    """

    lanes: int
    registers: int
    l1_bytes: int
    l2_bytes: int


def cpu_traits(target) -> CpuTraits:
    """The vector unit and data caches of an LLVM CPU `target` (its ``mcpu``'s features)."""
    lanes, registers = vector_lanes(target)
    l1_bytes, l2_bytes = CACHE_BYTES[lanes]
    return CpuTraits(lanes, registers, l1_bytes, l2_bytes)


@dataclass(frozen=True)
class CudaLimits:
    """Limits of an NVIDIA GPU architecture, per thread block unless said.

    Attributes
    ----------
    multiprocessors : int
        Streaming multiprocessors of the architecture's data-centre part (a GPU present
        reports its own: :func:`cuda_multiprocessors`).
    max_threads_per_block, max_shared_memory_per_block, registers_per_block : int
        Threads, static shared memory (bytes) and 32-bit registers of one thread block.
    max_dynamic_shared_memory_per_block : int
        Shared memory one block may opt in to (bytes).
    l2_cache_bytes : int
    """

    multiprocessors: int
    max_threads_per_block: int
    max_shared_memory_per_block: int
    max_dynamic_shared_memory_per_block: int
    registers_per_block: int
    l2_cache_bytes: int


# NVIDIA's CUDA C Programming Guide (compute capabilities) and the parts' data sheets: A100
# (sm_80, 108 SMs, 40 MiB L2), H100/H200 SXM (sm_90, 132 SMs, 50 MiB L2)
CUDA_LIMITS = {
    "sm_80": CudaLimits(108, 1024, 48 << 10, 163 << 10, 64 << 10, 40 << 20),
    "sm_90": CudaLimits(132, 1024, 48 << 10, 227 << 10, 64 << 10, 50 << 20),
}


def cuda_target(arch: str) -> dict:
    """The JSON-dict target of a GPU of `arch`: with its limits from :data:`CUDA_LIMITS` as
    the target attributes TVM's GPU rules read (without them dlight assumes 48 KiB of shared
    memory, and says so on every kernel); an arch not in the table gets TVM's defaults."""
    target = {"kind": "cuda", "arch": arch}
    limits = CUDA_LIMITS.get(arch)
    if limits is not None:
        target.update(max_threads_per_block=limits.max_threads_per_block,
                      max_shared_memory_per_block=limits.max_shared_memory_per_block,
                      registers_per_block=limits.registers_per_block,
                      l2_cache_size_bytes=limits.l2_cache_bytes)
    return target


def present_gpu(index: int):
    """TVM's device for CUDA GPU `index` when this runtime has CUDA and that GPU exists, else
    None (no driver, no such GPU)."""
    try:
        import tvm

        device = tvm.cuda(index)
        if tvm.runtime.enabled("cuda") and device.exist:
            return device
    except Exception:  # noqa: BLE001 (no CUDA driver)
        pass
    return None


def cuda_multiprocessors(arch: str, index: int | None = None) -> int | None:
    """Streaming multiprocessors of GPU `index` when one is present, else those of `arch` in
    :data:`CUDA_LIMITS` (None for an arch not there)."""
    device = present_gpu(index) if index is not None else None
    if device is not None:
        return int(device.multi_processor_count)
    limits = CUDA_LIMITS.get(arch)
    return limits.multiprocessors if limits else None


@functools.lru_cache(maxsize=None)
def arch_multiprocessors(arch: str) -> int | None:
    """SMs the GPU rules size their tiles by for a target of `arch` (a target names no
    device): those of GPU 0 when it is present and of that architecture, else
    :data:`CUDA_LIMITS`' (None for an arch not there)."""
    device = present_gpu(0)
    if device is not None and "sm_" + str(device.compute_version).replace(".", "") == arch:
        return cuda_multiprocessors(arch, 0)
    return cuda_multiprocessors(arch)

