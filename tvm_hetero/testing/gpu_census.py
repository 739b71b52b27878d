"""What each CUDA kernel of a model looks like, built all on ``cuda@ARCH`` without a GPU, and
the census goals for it: the rule that scheduled it, the work it does against its layer's, the
resources nvcc gives it and the blocks it launches against the SMs.

- :func:`census`: a :class:`KernelRow` per kernel of a model built all on cuda;
- :func:`misses`: the goals a kernel misses (:data:`GOALS` says them once);
- :func:`nvcc_resources`: registers, spills and shared memory per kernel from
  ``nvcc -cubin -arch=ARCH -Xptxas -v``;
- :func:`launch_shape`: the thread blocks and threads per block of a scheduled kernel.

Used by ``benchmarks/gpu_census.py`` (a table over the suite) and the tests of the goals.
Speed is not measured here: that needs a GPU (``benchmarks/gpu_check.py``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass

from .scheduled import built_cuda_kernels, estimated_flops, is_depthwise


@dataclass(frozen=True)
class Goals:
    """The census goals for every CUDA kernel (no GPU needed to check them).

    Attributes
    ----------
    heavy_kinds : tuple of str
        Layer kinds that must not be left to :attr:`not_gemm_rules`.
    not_gemm_rules : tuple of str
        dlight's catch-all rules: one thread per output, no shared-memory tiles.
    max_work : float
        Scheduled FLOPs over the layer's (``estimate_tir_flops``): recomputation or padding.
    min_mflop_for_sms : float
        Kernels of at least this many MFLOP launch at least one block per SM.
    min_mflop_for_work : float
        Kernels below this are too small for the work ratio to matter.
    """

    heavy_kinds: tuple = ("conv2d", "depthwise", "matmul", "pooling")
    not_gemm_rules: tuple = ("dlight.gpu.Fallback", "dlight.gpu.GeneralReduction")
    max_work: float = 1.3
    min_mflop_for_sms: float = 10.0
    min_mflop_for_work: float = 0.01


GOALS = Goals()


@dataclass
class KernelRow:
    """One CUDA kernel of a census (resources None when nvcc was not run)."""

    kernel: str
    kind: str
    rule: str | None
    mflop: float
    scheduled_mflop: float
    blocks: int
    threads: int
    registers: int | None = None
    spill_bytes: int = 0
    shared_bytes: int | None = None

    @property
    def work(self) -> float:
        """Scheduled FLOPs over the layer's."""
        return self.scheduled_mflop / max(self.mflop, 1e-9)


def launch_shape(func) -> tuple[int, int]:
    """``(thread blocks, threads per block)`` of a scheduled kernel: the blocks of its largest
    launch (the product of its ``blockIdx`` loop extents) and the most threads a block of any
    of its launches has (the product of its ``threadIdx`` extents). A kernel of several
    launches (matmul-tiles' split reduction: the partial sums, then their sum) is not the
    product of all its launches' extents."""
    from .gpu_emulation import thread_extents

    blocks = threads = 1
    for launch in thread_extents(func):
        sizes = {"blockIdx": 1, "threadIdx": 1}
        for tag, extents in launch.items():
            kind = tag.split(".")[0]
            if kind in sizes:
                sizes[kind] *= max((e for e in extents if isinstance(e, int)), default=1)
        blocks, threads = max(blocks, sizes["blockIdx"]), max(threads, sizes["threadIdx"])
    return blocks, threads


def nvcc_resources(source: str, arch: str = "sm_90") -> dict[str, dict[str, int]]:
    """``{kernel: {registers, spill_bytes, shared_bytes}}`` of CUDA `source` from ``nvcc
    -cubin -arch=ARCH -Xptxas -v``. RuntimeError when nvcc is absent or fails."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise RuntimeError("nvcc is not on PATH")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernels.cu")
        with open(path, "w") as handle:
            handle.write(source)
        done = subprocess.run([nvcc, "-cubin", f"-arch={arch}", "-Xptxas", "-v", "-o",
                               os.path.join(tmp, "k.cubin"), path],
                              capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"nvcc failed: {done.stderr.strip().splitlines()[-1:]}")
    found: dict[str, dict[str, int]] = {}
    kernel = None
    for line in done.stderr.splitlines():
        name = re.search(r"Compiling entry function '(\w+)'", line)
        if name:
            kernel = name.group(1)
            found[kernel] = {"registers": 0, "spill_bytes": 0, "shared_bytes": 0}
            continue
        if kernel is None:
            continue
        spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if spills:
            found[kernel]["spill_bytes"] = int(spills.group(1)) + int(spills.group(2))
        registers = re.search(r"Used (\d+) registers", line)
        if registers:
            found[kernel]["registers"] = int(registers.group(1))
        shared = re.search(r"(\d+) bytes smem", line)
        if shared:
            found[kernel]["shared_bytes"] = int(shared.group(1))
    return found


def census(model, arch: str = "sm_90", with_nvcc: bool = True) -> tuple[list[KernelRow], float]:
    """Every CUDA kernel of `model` built all on ``cuda@ARCH``: a row per kernel, and the
    build's seconds."""
    from tvm_hetero.layers.classify import kernel_kind

    start = time.perf_counter()
    compiled, kernels = built_cuda_kernels(model, arch)
    build_s = time.perf_counter() - start
    resources: dict[str, dict[str, int]] = {}
    if with_nvcc:
        for lib in compiled.libs.values():
            for imported in lib.imports:
                if imported.kind == "cuda":
                    resources.update(nvcc_resources(imported.inspect_source(), arch))
    rows = []
    for name, (func, scheduled) in kernels.items():
        kind = kernel_kind(func, name)
        kind = "depthwise" if kind == "conv2d" and is_depthwise(func) else kind
        mine = [r for k, r in resources.items() if k.startswith(f"{name}_kernel")]
        blocks, threads = launch_shape(scheduled)
        rows.append(KernelRow(
            kernel=name, kind=kind, rule=compiled.stats.rules.get(name),
            mflop=estimated_flops(func) / 1e6,
            scheduled_mflop=estimated_flops(scheduled) / 1e6,
            blocks=blocks, threads=threads,
            registers=max((r["registers"] for r in mine), default=None),
            spill_bytes=sum(r["spill_bytes"] for r in mine),
            shared_bytes=max((r["shared_bytes"] for r in mine), default=None)))
    return rows, build_s


def misses(row: KernelRow, sms: int, arch: str = "sm_90", goals: Goals = GOALS) -> list[str]:
    """The goals `row`'s kernel misses on a GPU of `sms` SMs and `arch`'s limits (none: [])."""
    from ..target import CUDA_LIMITS

    out = []
    if row.kind in goals.heavy_kinds and row.rule in goals.not_gemm_rules:
        out.append("heavy kernel on " + row.rule.rsplit(".", 1)[-1])
    if row.mflop > goals.min_mflop_for_work and row.work > goals.max_work:
        out.append(f"work {row.work:.1f}x")
    if row.spill_bytes:
        out.append(f"spills {row.spill_bytes} B")
    if row.mflop >= goals.min_mflop_for_sms and row.blocks < sms:
        out.append(f"{row.blocks} blocks < {sms} SMs")
    limits = CUDA_LIMITS.get(arch)
    if limits is not None:
        if row.threads > limits.max_threads_per_block:
            out.append(f"{row.threads} threads > {limits.max_threads_per_block}")
        if (row.shared_bytes or 0) > limits.max_shared_memory_per_block:
            out.append(f"{row.shared_bytes} B shared > {limits.max_shared_memory_per_block}")
    return out


__all__ = ["GOALS", "Goals", "KernelRow", "census", "launch_shape", "misses",
           "nvcc_resources"]
