"""The ``strided-depthwise-rows`` CPU rule: stride-2 depthwise convolutions (NCHW): each
parallel task a block of one channel's output rows; the task pads the input rows it reads and
splits them into even and odd columns, so that every vector load of the window is contiguous;
lanes along the output row, the window unrolled; epilogue per tile.

What: output column ``x`` at window column ``rx`` reads padded column ``2 x + rx``, so lanes
along ``x`` read every other element. The padded rows laid out ``[row, column % 2, column //
2]`` (``transform_layout`` of the padding block, which a task computes for its own ``2 R + K -
2`` rows of one channel: a few KiB, in L1) turn that read into ``[2 y + ry, rx % 2, x + rx //
2]``: one contiguous vector per window position. The split copy is the padding copy the kernel
makes anyway, iterated over (row, parity, half-column) with the half-column vectorized.

Why: ``depthwise-rows`` walks stride 1 only, so ``tiled`` took these kernels, 16 channels x
the row with every lane load a stride-2 gather: the stride-2 layers of channel counts that stay
NCHW (72, 120, 240 ... beside convolutions that are not blocked) ran at 2-5 GFLOP/s, the
slowest kernels of Faster R-CNN's MobileNetV3-Large backbone at 800 x 800 and of
EfficientNet-B0. Alone (2-core Xeon, AVX-512, shared, alternated): 72ch 200 -> 100 5x5 7.7 ->
2.5 ms, 144ch 56 -> 28 5x5 1.01 -> 0.32 ms, 96ch 112 -> 56 3x3 1.10 -> 0.71 ms.

Rejected: the split copy written element by element in the padded buffer's order (each store
to alternating halves, scalar): its per-input-element cost made the 3x3 kernels 1.4x slower
than ``tiled`` (the 5x5 ones still 2.5x faster); iterated by parity with the half-column
vectorized, every kernel measured is faster. Channels padded to whole vectors and the blocked
layout (``depthwise-nchwc``) would take them too, at the cost of a preparation change and
layout transforms around each layer. Output rows under 28 (two AVX-512 vectors) stay with
``tiled``, not measured here.
"""


from __future__ import annotations

from ...target import vector_lanes
from ..choices import choose
from ..rule import Rule
from .analysis import largest_divisor, loop_extent
from .schedule_helpers import epilogue_at, inline_identity_copies, static_conv

# Output rows per task: a task pads (de-interleaves) 2 R + K - 2 input rows for R output rows.
STRIDED_ROWS = 4
# Only output rows at least this wide: narrower rows fill less than two vectors of 16 lanes.
MIN_OUTPUT_ROW = 28


def strided_depthwise_block(func, sch, block_rv) -> tuple[int, int] | None:
    """``(window columns, padded input width)`` when `block_rv` is a depthwise NCHW
    convolution (one input channel per group) reading its input ``data[n, f, 2 y + ry, 2 x +
    rx]`` (stride 2 along both axes) from a padded copy, with output rows of at least
    `MIN_OUTPUT_ROW`; else None."""
    from tvm import tirx
    from tvm.sym.analyzer import Analyzer
    from tvm.tirx.analysis import undefined_vars

    block = sch.get(block_rv)
    iters = block.iter_vars
    if len(iters) != 7 or len(block.writes) != 1 or len(block.reads) != 2:
        return None
    n, f, y, x, rc, ry, rx = (iv.var for iv in iters)
    if int(iters[4].dom.extent) != 1:
        return None
    out = block.writes[0]
    if len(out.region) != 4 or not all(r.min.same_as(v) for r, v in zip(out.region,
                                                                         (n, f, y, x))):
        return None
    params = list(func.params)
    weight = [r for r in block.reads if any(p.same_as(r.source) for p in params)
              and len(r.region) == 4 and r.region[0].min.same_as(f)]
    data = [r for r in block.reads if not r.source.same_as(weight[0].source)] if weight else []
    if len(weight) != 1 or len(data) != 1 or len(data[0].region) != 4:
        return None
    if not any(v.same_as(f) for v in undefined_vars(data[0].region[1].min)):
        return None
    analyzer = Analyzer()
    row, column = data[0].region[2].min, data[0].region[3].min
    if not (analyzer.can_prove_equal(row, 2 * y + ry)
            and analyzer.can_prove_equal(column, 2 * x + rx)):
        return None
    width = int(iters[3].dom.extent)
    padded = data[0].source.shape[3]
    if not isinstance(padded, tirx.IntImm) or width < MIN_OUTPUT_ROW:
        return None
    return int(iters[6].dom.extent), int(padded)


class StridedDepthwiseRows(Rule):
    """The ``strided-depthwise-rows`` rule: stride-2 depthwise convolutions (NCHW): a task per
    block of one channel's output rows, its padded input rows split into even and odd columns
    (contiguous vector loads), lanes along the row, the window unrolled; epilogue per tile."""

    name = "strided-depthwise-rows"
    description = ("stride-2 depthwise convolutions (NCHW): a task per block of one channel's "
                   "output rows, its padded input rows split into even and odd columns "
                   "(contiguous vector loads), lanes along the row; epilogue per tile")
    kinds = ("conv2d",)
    families = ("cpu",)

    def apply(self, func, target):
        """Schedule a stride-2 depthwise NCHW convolution (MobileNetV3's, EfficientNet's
        downsampling layers).

        Loops: ``n, channel, row block (parallel tasks), column block, window rows, window
        columns (unrolled), rows (unrolled), columns (vectorized)``; a tile of
        `STRIDED_ROWS` output rows (the largest divisor of the height up to it) x the row's
        columns in vectors (the largest divisor of the width up to two vectors). Each task
        writes its rows' padding into a buffer laid out ``[n, channel, row, column % 2,
        column // 2]``, so the window's loads are contiguous vectors. Returns None for
        anything else (stride 1, the blocked layout, convolutions without padding, rows
        narrower than `MIN_OUTPUT_ROW`).
        """
        from tvm import s_tir

        found = static_conv(func, 7)
        if found is None:
            return None
        lanes, _ = vector_lanes(target)
        sch, blocks, main_index, loops, _ = found
        conv = blocks[main_index]
        shape = strided_depthwise_block(func, sch, conv)
        if shape is None:
            return None
        prologue = inline_identity_copies(sch, blocks[:main_index])
        if len(prologue) != 1 or shape[1] % 2:
            return None  # no padding copy to split (or an odd padded width)
        pad = prologue[0]
        width = loop_extent(sch, loops[3])
        columns = width if width <= 2 * lanes else largest_divisor(width, 2 * lanes)
        if 2 * columns < lanes:
            return None  # no tile of at least half a vector
        try:
            sch.transform_layout(pad, ("write", 0),
                                 lambda n, c, h, w: (n, c, h, w % 2, w // 2))
            sch.transform_block_layout(pad, lambda n, c, h, w: (n, c, h, w % 2, w // 2))
        except (s_tir.ScheduleError, ValueError):
            return None
        tail = [sch.cache_write(conv, 0, "local")] + list(blocks[main_index + 1:])
        for block_rv in tail[:-1]:
            sch.compute_inline(block_rv)
        n, f, y, x, rc, ry, rx = sch.get_loops(conv)
        rows = largest_divisor(loop_extent(sch, y), choose(
            "strided-depthwise-rows", [STRIDED_ROWS, STRIDED_ROWS // 2, 2 * STRIDED_ROWS]))
        y_outer, y_inner = sch.split(y, [None, rows])
        x_outer, x_inner = sch.split(x, [None, columns])
        sch.reorder(n, f, y_outer, x_outer, rc, ry, rx, y_inner, x_inner)
        *tile, tile_lane = epilogue_at(sch, tail[-1], x_outer)  # rows; columns
        sch.vectorize(tile_lane)
        for loop in tile:
            sch.unroll(loop)
        tasks = sch.fuse(n, f, y_outer)
        for loop in (ry, rx, y_inner):
            sch.unroll(loop)
        sch.vectorize(x_inner)
        sch.parallel(tasks)
        init = sch.decompose_reduction(conv, rc)
        sch.vectorize(sch.get_loops(init)[-1])
        sch.compute_at(pad, tasks)  # each task pads and splits its own rows
        sch.vectorize(sch.get_loops(pad)[-1])
        return sch.mod["main"]
