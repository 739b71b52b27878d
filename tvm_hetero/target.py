"""What tvm_hetero knows of a device's target: the fp32 lanes and vector registers of an LLVM
CPU target's widest vector unit (:func:`vector_lanes`) and its data cache sizes
(:func:`cpu_traits`). Preparation (:class:`~tvm_hetero.prepare.PrepareConfig`: the lanes of
channel padding and of the blocked layout) and the CPU rules (their tiles) read them here.
"""

from __future__ import annotations

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
