"""The ``separable-resize`` CPU rule: bilinear resizes legalized as two passes
(:mod:`tvm_hetero.ops.resize`): a task per map computes the columns of its input rows, then its
output rows, each from two of those rows, contiguous in vector lanes; an elementwise epilogue is
inlined into the rows pass.

Why: the source indices and weights of each row and column are build-time constants, where TVM's
``resize2d`` computes four inputs' coordinates, floors, clamps and weights again per element. With
fewer maps (batch x channels) than the rule's threshold, a task per output row instead, the columns
pass first. DeepLabV3's 21 x 32x32 -> 256x256 upsampling 1.47 -> 0.26 ms alone. Kernels without
blocks (TVM's scatters, which raised in it) are declined.
"""

from __future__ import annotations

from ...target import vector_lanes
from ..rule import Rule
from .analysis import loop_extent
from .injective_lanes import inner_lanes

# at least this many maps (batch x channels) for a task per map; fewer: a task per output row,
# the columns pass first
MIN_MAP_TASKS = 4


class SeparableResize(Rule):
    """The ``separable-resize`` rule: bilinear resizes legalized as two passes
    (:func:`tvm_hetero.ops.resize.separable_linear`): a task per map computes the columns of
    its input rows, then its output rows, each from two of those rows, contiguous in vector
    lanes; an elementwise epilogue is inlined into the rows pass."""

    name = "separable-resize"
    description = ("bilinear resizes as two passes: the columns of a map's input rows per "
                   "task, then its output rows from two of them each, in vector lanes")
    kinds = ("elementwise", "other")
    families = ("cpu",)

    def apply(self, func, target):
        """Schedule a kernel whose blocks are the columns pass, the rows pass and elementwise
        blocks after it (each inlined into the rows pass): the rows pass's batch and channel
        loops fused into parallel tasks, a map each, the columns pass computed at that loop
        (its rows' columns in a task's own buffer), the output columns in whole vectors of
        the target. With fewer than `MIN_MAP_TASKS` maps, the tasks are output rows and the
        columns pass runs first over its rows in parallel. Returns None for other kernels."""
        from tvm import s_tir

        from ...ops.resize import COLUMNS_BLOCK, ROWS_BLOCK

        sch = s_tir.Schedule(func)
        try:
            blocks = sch.get_child_blocks(sch.get_sblock("root"))
        except s_tir.ScheduleError:
            return None  # no blocks (an opaque kernel: TVM's scatters)
        names = [sch.get(b).name_hint for b in blocks]
        if names[:2] != [COLUMNS_BLOCK, ROWS_BLOCK]:
            return None
        columns, rows = blocks[0], blocks[1]
        for block in reversed(blocks[2:]):
            try:
                sch.reverse_compute_inline(block)
            except s_tir.ScheduleError:
                return None  # an epilogue that is not elementwise
        lanes, _ = vector_lanes(target)
        n, c, y, x = sch.get_loops(rows)
        if any(loop_extent(sch, lp) is None for lp in (n, c, y, x)):
            return None
        maps = loop_extent(sch, n) * loop_extent(sch, c)
        width = inner_lanes(loop_extent(sch, x), lanes)
        if width is not None and width < loop_extent(sch, x):
            _, x_inner = sch.split(x, [None, width])
        else:
            x_inner = x
        if width is not None and width > 1:
            sch.vectorize(x_inner)
        if maps >= MIN_MAP_TASKS:
            task = sch.fuse(n, c)
            sch.compute_at(columns, task)
        else:
            task = sch.fuse(n, c, y)
            column_loops = sch.get_loops(columns)
            sch.parallel(sch.fuse(*column_loops[:-1]))
        sch.parallel(task)
        return sch.mod["main"]
