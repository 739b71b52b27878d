"""The ``parallel-loops`` CPU rule, for every layer kind (dlight's CPU rules cover GEMV and plain
reductions only):

1. inline every injective block that can be inlined (padding into its convolution, bias and
   activation epilogues into their producer's consumer);
2. for each remaining block with spatial loops ``S0..Sn`` and reduction loops ``R0..Rm``:
   reorder to ``S0..Sn-1, R0..Rm, Sn`` so the innermost loop walks contiguous output (LLVM
   vectorizes it), fuse the outer spatial loops and parallelize the fused loop over the cores
   when the block does enough work (``MIN_PARALLEL_WORK`` iterations) to pay for the pool;
   a fused loop whose extent is symbolic (the rows of a shape range) is parallel when the
   static loops under it do ``MIN_SYMBOLIC_ROW_WORK`` iterations per row.
"""

from __future__ import annotations

from ...layers.classify import LAYER_KINDS
from ..rule import Rule
from .analysis import iterations, loop_extent
from .schedule_helpers import MIN_PARALLEL_EXTENT, MIN_PARALLEL_WORK, schedule_inlined


# the static iterations under a parallel loop of symbolic extent that pay for the pool
MIN_SYMBOLIC_ROW_WORK = 1 << 10


class ParallelLoops(Rule):
    """The ``parallel-loops`` rule: inline injective blocks; outer spatial loops fused and
    parallel, innermost spatial loop innermost (vectorized by LLVM)."""

    name = "parallel-loops"
    description = ("inline injective blocks; outer spatial loops fused and parallel, innermost"
                   " spatial loop innermost (vectorized by LLVM)")
    kinds = LAYER_KINDS
    families = ("cpu",)

    def apply(self, func, target):
        """Schedule `func` for a CPU target, or return None when it cannot."""
        del target
        found = schedule_inlined(func)
        if found is None:
            return None
        sch, infos = found
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
            if len(spatial) > 1 and (loop_extent(sch, spatial[-1]) or 0) >= 4:
                # the innermost spatial loop stays innermost and apart: fused into the parallel
                # loop, every element would divide its index back into coordinates
                inner = spatial[-1]
                spatial = spatial[:-1]
                if reduction:
                    sch.reorder(*spatial, *reduction, inner)
            elif reduction:
                sch.reorder(*spatial, *reduction)
            work = iterations(sch, sch.get_loops(info.block_rv))
            outer = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
            extent = loop_extent(sch, outer)
            if extent is not None and extent >= MIN_PARALLEL_EXTENT and work >= MIN_PARALLEL_WORK:
                sch.parallel(outer)
                changed = True
            elif extent is None and work >= MIN_SYMBOLIC_ROW_WORK:
                # rows known only at run time (a shape range's batch or sequence): parallel
                # whenever each row is enough work, as one row costs the pool one task
                sch.parallel(outer)
                changed = True
        return sch.mod["main"] if changed else None
