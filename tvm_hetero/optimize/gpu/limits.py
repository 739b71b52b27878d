"""Whether a scheduled GPU kernel stays within its target's limits: static shared memory and
threads per block (the target's ``max_shared_memory_per_block`` and
``max_threads_per_block``), checked by TVM's ``verify_gpu_code`` on the kernel lowered as far
as its buffers' final sizes. The pass gives a rule's kernel that does not fit to the next rule:
dlight's GEMV staged 16,384 floats of a 2048 x 1024 activation in 64 KiB of shared memory
(sm_90's static limit is 48 KiB) and the build failed in ptxas.

Not MetaSchedule's ``VerifyGPUCode`` postprocessor: it refused dlight Fallback's plain
1024-thread concatenation, which passes each of these checks."""

from __future__ import annotations


def _lowered(func):
    """`func` lowered until its allocations have their final sizes (TVM's own passes)."""
    import tvm
    from tvm.s_tir import transform as s_tir_transform

    passes = tvm.transform.Sequential([
        s_tir_transform.LowerCrossThreadReduction(), s_tir_transform.LowerInitBlock(),
        s_tir_transform.PlanAndUpdateBufferAllocationLocation(),
        s_tir_transform.ConvertBlocksToOpaque(), s_tir_transform.CompactBufferAllocation(),
        s_tir_transform.LowerMatchBuffer(), s_tir_transform.LowerOpaqueBlock(),
        # as TVM's own pipeline: FlattenBuffer divided by zero on an unsimplified
        # (b * 256 + x) // 256 - b of a split reduction's sum
        s_tir_transform.StmtSimplify(), tvm.tirx.transform.FlattenBuffer()])
    return passes(tvm.IRModule({"main": func}))["main"]


def within_gpu_limits(func, target) -> bool:
    """Whether the scheduled PrimFunc `func` fits a block of the GPU of `target` (a few ms a
    kernel). A target without the limits (none stated) always fits."""
    from tvm.s_tir.analysis import verify_gpu_code

    limits = {key: int(target.attrs[key]) for key in ("max_shared_memory_per_block",
                                                      "max_threads_per_block")
              if key in target.attrs}
    if not limits:
        return True
    if not _static(func):
        # verify_gpu_code wants constant launch extents: a kernel over symbolic rows (a shape
        # range) is checked with them at 1; its blocks' threads and shared memory are the
        # rule's static tiles, its grid the symbolic part
        from ...relax_ir import bounded_kernel

        func = bounded_kernel(func, {})
    return bool(verify_gpu_code(_lowered(func.with_attr("target", target)), limits))


def _static(func) -> bool:
    from tvm import tirx

    return all(isinstance(d, tirx.IntImm) for p in func.params
               for d in (getattr(p.ty, "shape", None) or [tirx.Var("scalar", "int64")]))


__all__ = ["within_gpu_limits"]
