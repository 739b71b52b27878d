"""CPU rules: turn TVM's naive loops into parallel loops with a vectorizable innermost loop.

``parallel_loops`` (written here: dlight's CPU rules cover GEMV and plain reductions only):

1. inline every injective block that can be inlined (padding into its convolution, bias and
   activation epilogues into their producer's consumer);
2. for each remaining block with spatial loops ``S0..Sn`` and reduction loops ``R0..Rm``:
   reorder to ``S0..Sn-1, R0..Rm, Sn`` so the innermost loop walks contiguous output (LLVM
   vectorizes it), fuse the outer spatial loops and parallelize the fused loop over the cores
   when the block does enough work (``MIN_PARALLEL_WORK`` iterations) to pay for the pool.

Reductions stay sequential per output element, so results are bit-for-bit those of the
unscheduled loops up to the vector code LLVM emits.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

MIN_PARALLEL_EXTENT = 2
# below this many loop iterations a block runs faster on one core than through the thread pool
MIN_PARALLEL_WORK = 1 << 15


def _extent(sch, loop) -> int | None:
    from tvm import tirx

    extent = sch.get(loop).extent
    return int(extent) if isinstance(extent, tirx.IntImm) else None


def parallel_loops(func, target):
    """Schedule `func` for a CPU target, or return None when it cannot."""
    from tvm import s_tir
    from tvm.s_tir.dlight.analysis import normalize_prim_func
    from tvm.s_tir.dlight.base.common_schedules import try_inline

    del target
    sch = s_tir.Schedule(func)
    infos = normalize_prim_func(sch)
    if infos is None:
        return None
    infos = try_inline(sch, infos)
    changed = False
    for info in infos:
        loops = sch.get_loops(info.block_rv)
        kinds = [it.kind for it in info.iters]
        if len(loops) != len(kinds) or not loops:
            continue
        spatial = [loop for loop, kind in zip(loops, kinds) if kind == "S"]
        reduction = [loop for loop, kind in zip(loops, kinds) if kind == "R"]
        if len(spatial) + len(reduction) != len(loops) or not spatial:
            continue
        inner = None
        if reduction and len(spatial) > 1 and (_extent(sch, spatial[-1]) or 0) >= 4:
            inner = spatial[-1]
            spatial = spatial[:-1]
            sch.reorder(*spatial, *reduction, inner)
        elif reduction:
            sch.reorder(*spatial, *reduction)
        work = 1
        for loop in sch.get_loops(info.block_rv):
            work *= _extent(sch, loop) or 1
        outer = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
        extent = _extent(sch, outer)
        if extent is not None and extent >= MIN_PARALLEL_EXTENT and work >= MIN_PARALLEL_WORK:
            sch.parallel(outer)
            changed = True
    return sch.mod["main"] if changed else None
