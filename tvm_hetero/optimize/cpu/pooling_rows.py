"""The ``pooling-rows`` CPU rule: windowed max and average pools: one output row of one channel per
parallel task, initialized, then updated with vectors of output columns per window offset; padding
computed first.

What: lanes are the largest divisor of the output width up to 16 (strided loads for a stride-2
pool); padding, where there is any, is computed first in parallel instead of re-testing each
window's bounds per element. Pools in the blocked layout take a tile of up to 8 output columns, each
a channel vector, per window offset.

Why: ResNet-50's 3x3/2 max pool over 112x112 0.22 -> 0.12 ms with 14 lanes (28 lanes 0.16, a whole
56-lane row 0.31: rejected); SqueezeNet's three pools 0.25 -> 0.14 ms (onnxruntime 0.07, in its
NCHWc layout). Blocked: SqueezeNet's 55 -> 27 max pool 18.9 -> 10.3 us, ResNet-50's global average
pool 4.2 us against 7.7 with ``reduction-chains``.

Declined where the row's width has no divisor of at least half a vector up to two vectors (37 wide;
58 with 8 lanes): the tile would run scalar, and a 1 x 1 tile (an odd height too) left the epilogue
no loop and raised; ``tiled`` takes those.
"""

from __future__ import annotations

from ..rule import Rule
from .analysis import is_reduction_iter, iterations, largest_divisor, loop_extent
from .schedule_helpers import MIN_PARALLEL_EXTENT, MIN_PARALLEL_WORK, schedule_one_reduction

# Vector lanes of the pooling rule: the largest divisor of the output width up to this many
# (ResNet-50's 56-wide max pool: 14 lanes 0.12 ms, 28 lanes 0.16, 56 lanes 0.31; scalar 0.22).
POOL_LANES = 16
# Output columns per tile of a pool in the blocked layout (each column one vector of lanes).
POOL_BLOCKED_COLUMNS = 8


class PoolingRows(Rule):
    """The ``pooling-rows`` rule: windowed pooling: one output row per parallel task, updated with
    vectors of output columns per window offset; padding computed first."""

    name = "pooling-rows"
    description = ("windowed pooling: one output row per parallel task, updated with vectors "
                   "of output columns per window offset; padding computed first")
    kinds = ("pooling",)
    families = ("cpu",)

    def apply(self, func, target):
        """Schedule a windowed pooling kernel (max or average pool over ``KH x KW``) row by row.

        Each parallel task computes one output row of one channel: the row is initialized, then
        every window offset ``(ry, rx)`` updates it with vectors of output columns (strided input
        loads for a stride-2 pool) while the row is in the L1 cache, and no element re-tests its
        window's bounds: padding, when there is any, is computed first, in parallel. Lanes: the
        largest divisor of the width up to `POOL_LANES`; in the blocked layout (NCHW[x]c) the
        block's channels, a tile of up to `POOL_BLOCKED_COLUMNS` columns updated together. Returns
        None for other kernels and for NCHW widths with no divisor of at least 4 lanes (those keep
        ``parallel-loops``).
        """
        del target
        found = schedule_one_reduction(func, "pooling")
        if found is None:
            return None
        sch, blocks, pool_index = found
        pool = blocks[pool_index]
        kinds = [is_reduction_iter(iv) for iv in sch.get(pool).iter_vars]
        loops = sch.get_loops(pool)
        if len(loops) != len(kinds) or any(loop_extent(sch, loop) is None for loop in loops):
            return None
        work = iterations(sch, loops)
        if kinds == [False] * 5 + [True] * 2 and loop_extent(sch, loops[4]) % 4 == 0:
            # blocked layout (NCHW[x]c): the lanes are the channels of the block; a tile of
            # output columns, each one vector, updated per window offset
            n, c, y, x, x_lanes, ry, rx = loops
            x_outer, x_tile = sch.split(x, [None, largest_divisor(loop_extent(sch, x),
                                                                   POOL_BLOCKED_COLUMNS)])
            sch.reorder(n, c, y, x_outer, ry, rx, x_tile, x_lanes)
            sch.unroll(x_tile)
        elif kinds == [False] * 4 + [True] * 2:
            n, c, y, x, ry, rx = loops
            lanes = largest_divisor(loop_extent(sch, x), POOL_LANES)
            if lanes < 4:
                return None
            x_outer, x_lanes = sch.split(x, [None, lanes])
            sch.reorder(n, c, y, x_outer, ry, rx, x_lanes)
        else:
            return None
        rows = sch.fuse(n, c, y)
        if (loop_extent(sch, rows) or 0) >= MIN_PARALLEL_EXTENT and work >= MIN_PARALLEL_WORK:
            sch.parallel(rows)
        sch.vectorize(x_lanes)
        init = sch.decompose_reduction(pool, ry)
        sch.vectorize(sch.get_loops(init)[-1])
        for block_rv in blocks:  # padding before, a divisor after (average pool): parallel rows
            if block_rv.same_as(pool):
                continue
            other_loops = sch.get_loops(block_rv)
            if len(other_loops) > 1 and work >= MIN_PARALLEL_WORK:
                sch.parallel(sch.fuse(*other_loops[:-1]))
        return sch.mod["main"]
