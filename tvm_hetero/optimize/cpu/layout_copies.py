"""The ``layout-copies`` CPU rule: layout transforms: the loop along the read's contiguous axis
innermost and vectorized (whole-vector loads, strided stores), the others fused in the order the
output is written and parallel from 4096 elements.

Why: the zoo models' transform into NCHW16c (16 x 32 x 32) 10.5 us with TVM's loops, 3.1 parallel by
output rows, 4.6 on one core; a strided copy costs several plain iterations each, hence the parallel
threshold. The written order matters: fused in the read's order, the two tasks of NCHW -> NCHW16c
split the channels and wrote alternate halves of the same cache lines, and the zoo ResNet ran 1.8x
slower.

Rejected: the written axis (the 16 channels) vectorized instead, whole-vector stores with loads
gathered from 16 channel planes. Alone it was twice as fast (32 x 112 x 112 0.067 -> 0.033 ms, 64 x
56 x 56 0.032 -> 0.017), in the models no clear gain, since there the transform reads what the
kernel before it has just written (alternating rounds, haswell / znver4 targets: MobileNetV2 4.69 ->
4.78 / 4.47 -> 4.62 ms, Inception v2 22.02 -> 21.78 / 19.17 -> 19.43, ResNet-50 41.17 -> 41.82 /
35.60 -> 35.35).
"""

from __future__ import annotations

from ...layers.classify import op_kinds
from ..rule import Rule
from .analysis import is_reduction_iter, iterations, loop_extent
from .schedule_helpers import MIN_PARALLEL_EXTENT

# a strided copy costs several times a plain loop's iteration: from this many elements the
# thread pool pays (the zoo models' 16K-element transform: 10.5 us serial, 3.1 us parallel)
MIN_PARALLEL_COPY = 1 << 12


class LayoutCopies(Rule):
    """The ``layout-copies`` rule: layout transforms: the loop along the read's contiguous axis
    innermost and vectorized, the others fused and parallel."""

    name = "layout-copies"
    description = ("layout transforms: the loop along the read's contiguous axis innermost and"
                   " vectorized, the others fused and parallel")
    kinds = ("elementwise",)
    families = ("cpu",)

    def apply(self, func, target):
        """Schedule a layout transform (a copy whose write and read orders differ, such as NCHW ->
        NCHW16c): the loop along the read's contiguous axis innermost and vectorized (contiguous
        loads, strided stores), the others fused and parallel. Returns None for other kernels."""
        from tvm import ir, s_tir, tirx
        from tvm.tirx.analysis import undefined_vars

        del target
        if op_kinds(func) != ["te_layout_transform"]:
            return None
        sch = s_tir.Schedule(func)
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
        if len(blocks) != 1:
            return None
        block = sch.get(blocks[0])
        store = block.body
        if not isinstance(store, tirx.stmt.BufferStore) or not isinstance(store.value,
                                                                           ir.expr.TensorLoad) \
                or any(is_reduction_iter(iv) for iv in block.iter_vars):
            return None
        loops = sch.get_loops(blocks[0])
        if len(loops) != len(block.iter_vars) or any(loop_extent(sch, lp) is None for lp in loops):
            return None
        last_index = store.value.indices[-1]
        inner = [i for i, iv in enumerate(block.iter_vars) if last_index.same_as(iv.var)]
        if not inner:
            return None

        def write_position(index: int) -> int:  # the first written axis the loop's variable indexes
            var = block.iter_vars[index].var
            return next((axis for axis, value in enumerate(store.indices)
                         if any(v.same_as(var) for v in undefined_vars(value))), len(store.indices))

        elements = iterations(sch, loops)
        inner_loop = loops[inner[0]]
        # the outer loops in the written order: each task writes whole rows of the output (split
        # along the read's order, the two tasks would write alternate parts of the same cache
        # lines: the zoo ResNet 1.8x slower)
        outer = [loops[i] for i in sorted((i for i in range(len(loops)) if i != inner[0]),
                                          key=write_position)]
        sch.reorder(*outer, inner_loop)
        fused = sch.fuse(*outer) if len(outer) > 1 else (outer[0] if outer else None)
        if fused is not None and loop_extent(sch, fused) >= MIN_PARALLEL_EXTENT \
                and elements >= MIN_PARALLEL_COPY:
            sch.parallel(fused)
        sch.vectorize(inner_loop)
        return sch.mod["main"]
